/* What kfuse_bench_attention (attention_bench.c) and kfuse_bench_attention_grad
 * (attention_grad_bench.c) share: the cases (T, D, dtype, B, H, causal from the command line),
 * the inputs (q, k, v, dy drawn alike, rounded to the dtype as the device holds them), plans
 * compiled from graph text, the timing of several plans over the same inputs, and a row's error
 * against float64. */
#ifndef KF_BENCH_ATTENTION_COMMON_H
#define KF_BENCH_ATTENTION_COMMON_H

#include "kfuse.h"

typedef struct attn_case {
    uint32_t b, h, t, d;
    kf_dtype dtype;
    bool causal;
} attn_case;

/* The command line. Default: T 1024 and 4096, D 64 and 128, f16 and f32, H 16, B = 8192 / T
 * (8192 tokens a case), causal, 10 repeats. */
typedef struct attn_args {
    uint32_t ts[8], ds[8], nt, nd, b, h, repeat;
    kf_dtype dts[2];
    uint32_t ndt;
    bool causal, json;
    /* kfuse_bench_attention's own options (ATTN_ARGS_FORWARD) */
    bool explain, fwd_only;
    const char *impl;
    /* kfuse_bench_attention_grad's (ATTN_ARGS_GRAD) */
    bool train_only;
} attn_args;

#define ATTN_ARGS_FORWARD 1u /* also --explain, --fwd-only, --impl NAME */
#define ATTN_ARGS_GRAD 2u    /* also --train-only */

/* Parses argv into *a; false (the usage printed) on anything it does not know. */
bool attn_args_parse(int argc, char **argv, unsigned flags, const char *usage, attn_args *a);

/* q, k, v, dy of the case's shape [B, H, T, D], uniform in [-1, 1) from seeds 1234 + i, rounded
 * to the dtype; false out of memory (then none is left). */
bool attn_inputs(const attn_case *c, kf_tensor *in[4]);
void attn_inputs_destroy(kf_tensor *in[4]);

/* The plan of graph text (max_bindings: kf_compile_options.max_storage_buffers, 0 the device's),
 * or NULL with the reason on stderr. */
kf_plan *attn_compile(kf_context *ctx, const char *text, uint32_t max_bindings);

/* Sets the inputs each plan declares (names[i] to in[i]; a plan without input names[i] skips it
 * when skip bit i is set) and times the plans one after the other, `repeat` runs each. */
bool attn_time(kf_plan *const *plans, uint32_t count, kf_tensor *const *in,
               const char *const *names, uint32_t inputs, const uint32_t *skip, uint32_t repeat,
               kf_timing *out);

/* The names of p's kernels (from its WGSL's first lines), ", " between, into out (n bytes), so
 * a table says which kernel and tiling ran. */
void attn_kernel_names(const kf_plan *p, char *out, size_t n);

/* The worst |got - ref| / max(|ref|, floor) over a row of d; floor 0: 1% of the row's rms. */
double attn_row_error(const float *got, const double *ref, uint32_t d, double floor);

/* Runs run(ctx, case, args) for every case of args (f16 skipped, with a note, where the device
 * has no shader-f16) after printing header(info) when not json; returns the exit status. */
typedef bool (*attn_run_fn)(kf_context *ctx, const attn_case *c, const attn_args *a);
int attn_main(const char *name, const attn_args *a, void (*header)(const kf_adapter_info *info),
              attn_run_fn run);

#endif
