/* kfuse's benchmark (`kfuse bench`, docs/PERFORMANCE.md).
 *
 * Every case is built through the public API exactly as a user would build it: a lazy graph,
 * compiled once fused and once with kf_compile_options.no_fuse, fed the same random inputs,
 * timed with kf_plan_time in interleaved rounds. The activation-save case times its copy
 * dispatches with kf_context_time the same way. Each case
 * reports both times, the dispatch counts, a throughput (GB/s of compulsory traffic, or TFLOP/s)
 * and that throughput as a fraction of a reference the program measures on the same device at
 * the start: a plain copy's bandwidth, and a plain matmul's rate.
 *
 * A benchmark is not a test: nothing here asserts a time. It does compare the fused and unfused
 * outputs, so a fast wrong kernel cannot pass unnoticed.
 */
#ifndef KF_BENCH_H
#define KF_BENCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kfuse.h"

typedef enum kf_bench_size {
    KF_BENCH_SIZE_DEFAULT = 0, /* small on a CPU adapter (lavapipe), full elsewhere */
    KF_BENCH_SIZE_SMALL,       /* every case scaled down: seconds on a 2-core CPU adapter */
    KF_BENCH_SIZE_FULL         /* the sizes of issue 6 (2^28-element chains, 8192^3 matmul) */
} kf_bench_size;

typedef struct kf_bench_options {
    const char *filter; /* POSIX extended regex on case names; NULL: every case */
    kf_bench_size size;
    uint32_t repeat; /* timed runs per variant (median reported); 0: 10 full, 5 small */
    uint32_t batch;  /* runs of a graph case's plan back to back in each timed submission, the
                        time per run reported; 0 or 1: one run per submission */
    uint64_t seed;   /* of the random inputs */
    bool json;       /* one JSON object per line instead of the table */
    FILE *json_also; /* without `json`: also write the JSON lines here (NULL: no) */
    bool list;       /* print the case names (after the filter) and their sizes; run nothing */
    FILE *out;       /* NULL: stdout */
} kf_bench_options;

/* Runs the benchmark on ctx and prints it (ctx may be NULL with `list`: sizes are then full
 * unless `size` says small). Returns the process exit code: 0 when every selected
 * case ran or was skipped for a stated reason (device limit, missing feature), 1 when a case
 * failed, 2 for a bad filter. */
int kf_bench_run(kf_context *ctx, const kf_bench_options *opts);

/* ---------------------------------------------------------------------------------------- */
/* Between the benchmark's own files                                                        */
/* ---------------------------------------------------------------------------------------- */

typedef enum kf_bench_family {
    KF_BENCH_COPY = 1, /* y = copy(x): the bandwidth reference */
    KF_BENCH_CHAIN,    /* x |> scale |> add |> relu |> tanh |> sigmoid |> mul |> gelu |> silu */
    KF_BENCH_MATMUL,   /* y = matmul(a, b): the rate reference */
    KF_BENCH_MATMUL_BIAS_GELU, /* y = gelu(matmul(a, b) + bias) */
    KF_BENCH_SOFTMAX,          /* y = softmax(x) over rows */
    KF_BENCH_RMSNORM_WEIGHT,   /* y = rmsnorm(x) * w */
    KF_BENCH_LAYERNORM_AFFINE, /* y = layernorm(x) * w + b */
    KF_BENCH_FFN_SAVE,         /* the seeds' FFN activation save: gate, up, hidden, residual */
    KF_BENCH_TRAIN_STEP,       /* a training step (forward, backward, AdamW) of an MLP:
                                  tokens x dim -> ffn_dim -> gelu -> cols classes */
    KF_BENCH_RMSNORM_MATMUL    /* y = matmul(rmsnorm(x, g), w): a is x [m, k], b is w [k, n] */
} kf_bench_family;

typedef struct kf_bench_case {
    char name[64];
    kf_bench_family family;
    kf_dtype dtype;    /* of every input */
    uint64_t elements; /* copy, chain */
    uint32_t ops;      /* chain length, 1..8; train step: 1 to upload the batch once only */
    uint32_t m, n, k;  /* matmul: a is [m, k], b is [k, n] */
    uint32_t rows, cols;
    uint32_t ffn_dim, dim, tokens; /* FFN save: 3 pairs of tokens*ffn_dim, 1 of tokens*dim */
    uint32_t batch;                /* kf_bench_options.batch (graph cases) */
} kf_bench_case;

/* What one case measured. Throughputs count compulsory work only (every input read once, every
 * output written once; 2*m*n*k flops for matmul), for both variants, so that
 * unfused_value / fused_value is the time ratio and the fraction compares with the reference. */
typedef struct kf_bench_result {
    bool skipped;
    bool failed;
    char note[320]; /* why it was skipped or failed, or a warning */
    kf_timing fused;
    kf_timing unfused;
    uint32_t dispatches_fused;
    uint32_t dispatches_unfused;
    uint64_t bytes_fused; /* the plan's own count of bytes read + written */
    uint64_t bytes_unfused;
    double work;           /* compulsory bytes, or flops */
    bool flops;            /* work is flops: the metric is TFLOP/s, else GB/s */
    double max_rel_diff;   /* fused output against unfused output */
    double sample_rel_err; /* fused output against the CPU specs, on a sample */
} kf_bench_result;

/* Times `variants` (at most 4) alternatives in `repeat` interleaved rounds: each round times
 * every variant once, in an order that alternates from round to round, through time_one (one
 * timed run after one untimed). out[v] gets variant v's median and minimum. Interleaving keeps a
 * comparison fair on a machine whose speed drifts (other work on a shared CPU adapter, clocks):
 * a slow spell hits both variants instead of one. */
typedef kf_status (*kf_bench_time_fn)(void *user, uint32_t variant, kf_timing *one);
kf_status kf_bench_interleave(uint32_t variants, uint32_t repeat, kf_bench_time_fn time_one,
                              void *user, kf_timing *out);

/* The largest single buffer the case needs, in bytes (for the device-limit check). */
uint64_t kf_bench_largest_buffer(const kf_bench_case *c);

/* The case's graph in the graph language (docs/graph-language.md), so that
 * `kfuse run -e 'SPEC' [--no-fuse]` reproduces it; "" for the activation save, which is not a
 * graph. The text and the graph kf_bench_run_graph_case builds come from the same tables. */
void kf_bench_spec(const kf_bench_case *c, char *buf, size_t size);

/* Builds, runs and times a graph-based case, fused and unfused (cases.c). */
void kf_bench_run_graph_case(kf_context *ctx, const kf_bench_case *c, uint32_t repeat,
                             uint64_t seed, kf_bench_result *r);

/* Builds, checks and times a training step, fused and unfused (train_step.c). */
void kf_bench_run_train_step(kf_context *ctx, const kf_bench_case *c, uint32_t repeat,
                             uint64_t seed, kf_bench_result *r);

/* Builds, checks and times the activation-save case (ffn_save.c). */
void kf_bench_run_ffn_save(kf_context *ctx, const kf_bench_case *c, uint32_t repeat, uint64_t seed,
                           kf_bench_result *r);

#endif
