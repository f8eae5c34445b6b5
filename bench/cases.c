/* The graph-based benchmark cases: each graph is built with kf_graph_* as a user would build it,
 * compiled once fused and once with no_fuse, fed the same random inputs (kf_plan_random_input
 * from one seed) and timed with kf_plan_time, the two plans in interleaved rounds. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INPUTS 4 /* of any case's graph */

/* The chain's operators, in order; a case of length L uses the first L. Cheap arithmetic mixed
 * with transcendentals: eight of them per element stay far below a GPU's flop-per-byte balance,
 * so the fused chain is bound by memory, and unfused it moves 2 * L buffers instead of 2. The
 * PyTorch comparison (bench/torch_compare.py, CHAIN_STEPS) mirrors this table. */
typedef enum step_kind {
    STEP_UNARY = 0,
    STEP_PARAM, /* the number is the op's parameter: scale(x, alpha) */
    STEP_SCALAR /* the number is a scalar operand: add(x, 0.25) */
} step_kind;

typedef struct chain_step {
    const char *op;
    step_kind kind;
    double number;
} chain_step;

static const chain_step chain_steps[8] = {
    {"scale", STEP_PARAM, 1.5}, {"add", STEP_SCALAR, 0.25}, {"relu", STEP_UNARY, 0},
    {"tanh", STEP_UNARY, 0},    {"sigmoid", STEP_UNARY, 0}, {"mul", STEP_SCALAR, 2.0},
    {"gelu", STEP_UNARY, 0},    {"silu", STEP_UNARY, 0},
};

static kf_node chain(kf_graph *g, kf_node x, uint32_t ops) {
    for (uint32_t i = 0; i < ops && i < 8; i++) {
        kf_graph_arg arg = {.number = chain_steps[i].number};
        x = kf_graph_call(g, chain_steps[i].op, &x, 1, &arg, chain_steps[i].kind ? 1 : 0);
    }
    return x;
}

uint64_t kf_bench_largest_buffer(const kf_bench_case *c) {
    uint64_t size = kf_dtype_size(c->dtype);
    switch (c->family) {
    case KF_BENCH_COPY:
    case KF_BENCH_CHAIN:
        return c->elements * size;
    case KF_BENCH_MATMUL:
    case KF_BENCH_MATMUL_BIAS_GELU:
    case KF_BENCH_RMSNORM_MATMUL: {
        uint64_t mk = (uint64_t)c->m * c->k, kn = (uint64_t)c->k * c->n;
        uint64_t mn = (uint64_t)c->m * c->n;
        uint64_t big = mk > kn ? mk : kn;
        return (big > mn ? big : mn) * size;
    }
    case KF_BENCH_SOFTMAX:
    case KF_BENCH_RMSNORM_WEIGHT:
    case KF_BENCH_LAYERNORM_AFFINE:
        return (uint64_t)c->rows * c->cols * size;
    case KF_BENCH_FFN_SAVE:
        return (uint64_t)c->tokens * (c->ffn_dim > c->dim ? c->ffn_dim : c->dim) * 4u;
    case KF_BENCH_TRAIN_STEP: {
        /* an activation [tokens, ffn_dim], w1, and AdamW's state: m and v of every param in one
         * buffer behind a 16-byte header (src/ops/optimizer.c) */
        uint64_t act = (uint64_t)(c->tokens > c->dim ? c->tokens : c->dim) * c->ffn_dim * 4u;
        uint64_t params =
            (uint64_t)c->dim * c->ffn_dim + c->ffn_dim + (uint64_t)c->ffn_dim * c->cols + c->cols;
        uint64_t state = 8u * params + 16u;
        return act > state ? act : state;
    }
    }
    return 0;
}

/* The case's graph with one output, "y". */
static kf_graph *build_graph(const kf_bench_case *c) {
    kf_graph *g = kf_graph_create();
    if (!g) {
        return NULL;
    }
    kf_node y = {0};
    switch (c->family) {
    case KF_BENCH_COPY:
    case KF_BENCH_CHAIN: {
        kf_shape s = kf_shape_1d((uint32_t)c->elements);
        kf_node x = kf_graph_input(g, "x", &s, c->dtype);
        y = c->family == KF_BENCH_COPY ? kf_graph_unary(g, "copy", x) : chain(g, x, c->ops);
        break;
    }
    case KF_BENCH_MATMUL:
    case KF_BENCH_MATMUL_BIAS_GELU: {
        kf_shape sa = kf_shape_2d(c->m, c->k), sb = kf_shape_2d(c->k, c->n);
        kf_shape sbias = kf_shape_1d(c->n);
        kf_node a = kf_graph_input(g, "a", &sa, c->dtype);
        kf_node b = kf_graph_input(g, "b", &sb, c->dtype);
        y = kf_graph_matmul(g, a, b);
        if (c->family == KF_BENCH_MATMUL_BIAS_GELU) {
            kf_node bias = kf_graph_input(g, "bias", &sbias, c->dtype);
            y = kf_graph_unary(g, "gelu", kf_graph_add(g, y, bias));
        }
        break;
    }
    case KF_BENCH_SOFTMAX:
    case KF_BENCH_RMSNORM_WEIGHT:
    case KF_BENCH_LAYERNORM_AFFINE: {
        kf_shape sx = kf_shape_2d(c->rows, c->cols), sw = kf_shape_1d(c->cols);
        kf_node x = kf_graph_input(g, "x", &sx, c->dtype);
        if (c->family == KF_BENCH_SOFTMAX) {
            y = kf_graph_unary(g, "softmax", x);
        } else if (c->family == KF_BENCH_RMSNORM_WEIGHT) {
            kf_node w = kf_graph_input(g, "w", &sw, c->dtype);
            y = kf_graph_mul(g, kf_graph_unary(g, "rmsnorm", x), w);
        } else {
            kf_node w = kf_graph_input(g, "w", &sw, c->dtype);
            kf_node b = kf_graph_input(g, "b", &sw, c->dtype);
            y = kf_graph_add(g, kf_graph_mul(g, kf_graph_unary(g, "layernorm", x), w), b);
        }
        break;
    }
    case KF_BENCH_RMSNORM_MATMUL: {
        kf_shape sx = kf_shape_2d(c->m, c->k), sg = kf_shape_1d(c->k), sw = kf_shape_2d(c->k, c->n);
        kf_node norm_in[2] = {kf_graph_input(g, "x", &sx, c->dtype),
                              kf_graph_input(g, "g", &sg, c->dtype)};
        kf_node w = kf_graph_input(g, "w", &sw, c->dtype);
        kf_op_params weighted = {.has_weight = true};
        y = kf_graph_matmul(g, kf_graph_op(g, "rmsnorm", norm_in, 2, &weighted), w);
        break;
    }
    case KF_BENCH_FFN_SAVE:
    case KF_BENCH_TRAIN_STEP:
        break; /* not a graph here: ffn_save.c, train_step.c */
    }
    kf_graph_output(g, "y", y);
    return g;
}

/* The operators a case needs, so a build without one skips the case with a reason. */
static const char *missing_operator(const kf_bench_case *c) {
    static const char *const needs[][4] = {
        [KF_BENCH_COPY] = {"copy"},
        [KF_BENCH_CHAIN] = {"scale", "add", "relu", "tanh"},
        [KF_BENCH_MATMUL] = {"matmul"},
        [KF_BENCH_MATMUL_BIAS_GELU] = {"matmul", "add", "gelu"},
        [KF_BENCH_SOFTMAX] = {"softmax"},
        [KF_BENCH_RMSNORM_WEIGHT] = {"rmsnorm", "mul"},
        [KF_BENCH_LAYERNORM_AFFINE] = {"layernorm", "mul", "add"},
        [KF_BENCH_RMSNORM_MATMUL] = {"rmsnorm", "matmul"},
    };
    if ((size_t)c->family >= sizeof needs / sizeof needs[0]) {
        return NULL;
    }
    for (uint32_t i = 0; i < 4 && needs[c->family][i]; i++) {
        if (!kf_op_find(needs[c->family][i])) {
            return needs[c->family][i];
        }
    }
    for (uint32_t i = 0; c->family == KF_BENCH_CHAIN && i < c->ops && i < 8; i++) {
        if (!kf_op_find(chain_steps[i].op)) {
            return chain_steps[i].op;
        }
    }
    return NULL;
}

/* Compulsory bytes: every input read once and every output written once. */
static double compulsory_bytes(const kf_graph *g) {
    double bytes = 0.0;
    for (uint32_t i = 0; i < kf_graph_input_count(g); i++) {
        kf_shape s;
        kf_dtype d;
        if (kf_graph_input_info(g, i, NULL, &s, &d) == KF_OK) {
            bytes += (double)kf_shape_elements(&s) * kf_dtype_size(d);
        }
    }
    for (uint32_t i = 0; i < kf_graph_output_count(g); i++) {
        kf_shape s;
        kf_dtype d;
        if (kf_graph_output_info(g, i, NULL, &s, &d) == KF_OK) {
            bytes += (double)kf_shape_elements(&s) * kf_dtype_size(d);
        }
    }
    return bytes;
}

typedef struct variant {
    kf_plan *plan;
    kf_plan_summary summary;
    kf_tensor *output; /* "y", downloaded after timing */
    uint32_t batch;    /* runs back to back per timed submission */
} variant;

static kf_status time_plan(void *user, uint32_t which, kf_timing *out) {
    variant *v = user;
    if (v[which].batch <= 1) {
        return kf_plan_time(v[which].plan, 1, out);
    }
    /* The plan again and again in one submission: the GPU never idles between runs, so a
     * short plan runs at the clocks of steady work. */
    kf_plan *plans[64];
    uint32_t count = v[which].batch < 64 ? v[which].batch : 64;
    for (uint32_t i = 0; i < count; i++) {
        plans[i] = v[which].plan;
    }
    kf_status st = kf_plan_time_sequence(plans, count, 1, out);
    out->median_ms /= count;
    out->min_ms /= count;
    return st;
}

/* Compiles both variants, feeds them the same random inputs (kept in inputs[], in the graph's
 * input order), times them in interleaved rounds, and reads both outputs back. On failure, msg
 * says where and why. */
static kf_status run_variants(kf_context *ctx, const kf_graph *g, uint32_t repeat, uint64_t seed,
                              variant v[2], kf_tensor *inputs[MAX_INPUTS], kf_timing timing[2],
                              char *msg, size_t msg_size) {
    static const char *const what[2] = {"fused", "unfused"};
    kf_status st = KF_OK;
    for (uint32_t i = 0; i < 2 && st == KF_OK; i++) {
        kf_compile_options opts = {.no_fuse = i == 1};
        st = kf_graph_compile(ctx, g, &opts, &v[i].plan);
        if (st != KF_OK) {
            snprintf(msg, msg_size, "%s compile: %s: %s", what[i], kf_status_str(st),
                     kf_context_last_error(ctx));
        } else {
            kf_plan_summary_get(v[i].plan, &v[i].summary);
        }
    }
    for (uint32_t i = 0; i < kf_graph_input_count(g) && i < MAX_INPUTS && st == KF_OK; i++) {
        const char *name = NULL;
        kf_graph_input_info(g, i, &name, NULL, NULL);
        st = kf_plan_random_input(v[0].plan, name, seed, &inputs[i]);
        for (uint32_t j = 0; j < 2 && st == KF_OK; j++) {
            st = kf_plan_set_input(v[j].plan, name, inputs[i]);
        }
        if (st != KF_OK) {
            snprintf(msg, msg_size, "input %s: %s: %s", name, kf_status_str(st),
                     kf_context_last_error(ctx));
        }
    }
    if (st == KF_OK) {
        st = kf_bench_interleave(2, repeat, time_plan, v, timing);
        if (st != KF_OK) {
            snprintf(msg, msg_size, "run: %s: %s", kf_status_str(st), kf_context_last_error(ctx));
        }
    }
    for (uint32_t i = 0; i < 2 && st == KF_OK; i++) {
        kf_shape shape = {0};
        kf_graph_output_info(g, 0, NULL, &shape, NULL);
        st = kf_tensor_create(&shape, &v[i].output);
        if (st == KF_OK) {
            st = kf_plan_get_output(v[i].plan, "y", v[i].output);
        }
        if (st != KF_OK) {
            snprintf(msg, msg_size, "%s output: %s: %s", what[i], kf_status_str(st),
                     kf_context_last_error(ctx));
        }
    }
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* A sample of the output against the operators' CPU specifications                          */
/* ---------------------------------------------------------------------------------------- */

/* One operator's spec_forward on CPU tensors: a new tensor, or NULL with *st and msg set. */
static kf_tensor *spec(const char *op_name, const kf_tensor *const *in, uint32_t count,
                       const kf_op_params *params, kf_status *st, char *msg, size_t msg_size) {
    const kf_operator *op = kf_op_find(op_name);
    kf_op_params p = {0};
    if (params) {
        p = *params;
    }
    kf_shape shapes[MAX_INPUTS], shape;
    for (uint32_t i = 0; i < count && i < MAX_INPUTS; i++) {
        shapes[i] = in[i]->shape;
    }
    kf_tensor *out = NULL;
    *st = op ? KF_OK : KF_ERROR_UNSUPPORTED;
    if (*st == KF_OK) {
        *st = kf_op_shape(op, shapes, &p, &shape, msg, msg_size);
    }
    if (*st == KF_OK) {
        *st = kf_tensor_create(&shape, &out);
    }
    if (*st == KF_OK) {
        *st = kf_op_spec_forward(op, in, &p, out);
    }
    if (*st != KF_OK) {
        if (!msg[0]) {
            snprintf(msg, msg_size, "the %s spec: %s", op_name, kf_status_str(*st));
        }
        kf_tensor_destroy(out);
        return NULL;
    }
    return out;
}

/* Applies op to *cur (and `second`, when given) and replaces *cur with the result. */
static void step(kf_tensor **cur, const char *op, const kf_tensor *second,
                 const kf_op_params *params, kf_status *st, char *msg, size_t msg_size) {
    if (*st != KF_OK) {
        return;
    }
    const kf_tensor *in[2] = {*cur, second};
    kf_tensor *next = spec(op, in, second ? 2 : 1, params, st, msg, msg_size);
    kf_tensor_destroy(*cur);
    *cur = next;
}

/* The case's computation on CPU tensors for a sample: x is the sample of the first input
 * (elements of a chain, rows otherwise; consumed), inputs[] the other inputs whole. */
static kf_tensor *evaluate_sample(const kf_bench_case *c, kf_tensor *x,
                                  kf_tensor *const inputs[MAX_INPUTS], kf_status *st, char *msg,
                                  size_t msg_size) {
    kf_tensor *cur = x;
    *st = KF_OK;
    switch (c->family) {
    case KF_BENCH_COPY:
        step(&cur, "copy", NULL, NULL, st, msg, msg_size);
        break;
    case KF_BENCH_CHAIN:
        for (uint32_t i = 0; i < c->ops && i < 8 && *st == KF_OK; i++) {
            const chain_step *s = &chain_steps[i];
            kf_op_params p = {0};
            kf_tensor *scalar = NULL;
            if (s->kind == STEP_PARAM) {
                p.alpha = (float)s->number;
            } else if (s->kind == STEP_SCALAR) {
                kf_shape rank0 = {0};
                *st = kf_tensor_constant(&rank0, (float)s->number, &scalar);
            }
            step(&cur, s->op, scalar, &p, st, msg, msg_size);
            kf_tensor_destroy(scalar);
        }
        break;
    case KF_BENCH_MATMUL:
    case KF_BENCH_MATMUL_BIAS_GELU:
        step(&cur, "matmul", inputs[1], NULL, st, msg, msg_size);
        if (c->family == KF_BENCH_MATMUL_BIAS_GELU) {
            step(&cur, "add", inputs[2], NULL, st, msg, msg_size);
            step(&cur, "gelu", NULL, NULL, st, msg, msg_size);
        }
        break;
    case KF_BENCH_SOFTMAX:
        step(&cur, "softmax", NULL, NULL, st, msg, msg_size);
        break;
    case KF_BENCH_RMSNORM_WEIGHT:
        step(&cur, "rmsnorm", NULL, NULL, st, msg, msg_size);
        step(&cur, "mul", inputs[1], NULL, st, msg, msg_size);
        break;
    case KF_BENCH_LAYERNORM_AFFINE:
        step(&cur, "layernorm", NULL, NULL, st, msg, msg_size);
        step(&cur, "mul", inputs[1], NULL, st, msg, msg_size);
        step(&cur, "add", inputs[2], NULL, st, msg, msg_size);
        break;
    case KF_BENCH_RMSNORM_MATMUL: {
        kf_op_params weighted = {.has_weight = true};
        step(&cur, "rmsnorm", inputs[1], &weighted, st, msg, msg_size);
        step(&cur, "matmul", inputs[2], NULL, st, msg, msg_size);
        break;
    }
    case KF_BENCH_FFN_SAVE:
    case KF_BENCH_TRAIN_STEP:
        *st = KF_ERROR_INVALID_ARGUMENT;
        break;
    }
    if (*st != KF_OK) {
        kf_tensor_destroy(cur);
        return NULL;
    }
    return cur;
}

/* Checks the GPU output on a sample (4096 elements of a chain, 3 rows of a matmul, 64 rows of a
 * row operation, spread evenly, the first and the last included) against the operators' own CPU
 * specifications. What it is for: the full sizes are beyond what the test suite runs on a CPU
 * adapter (2^28 elements, 8192^2 outputs), and there a grid or an index could overflow. The
 * error is relative to the sample's scale, as in the fused/unfused comparison. */
static kf_status check_sample(const kf_bench_case *c, kf_tensor *const inputs[MAX_INPUTS],
                              const kf_tensor *gpu, double *max_err, char *msg, size_t msg_size) {
    const kf_tensor *first = inputs[0];
    bool rows = first->shape.rank == 2;
    uint64_t count = rows ? first->shape.dims[0] : kf_tensor_size(first);
    uint64_t width = rows ? first->shape.dims[1] : 1; /* of the input */
    uint64_t out_width = rows ? gpu->shape.dims[1] : 1;
    /* Matmul rows cost k * n multiply-adds each in the spec's plain loops: seconds at 8192. */
    bool product = c->family == KF_BENCH_MATMUL_BIAS_GELU || c->family == KF_BENCH_RMSNORM_MATMUL;
    uint64_t want = !rows ? 4096 : product ? 3 : 64;
    uint64_t n = count < want ? count : want;
    kf_shape xs = rows ? kf_shape_2d((uint32_t)n, (uint32_t)width) : kf_shape_1d((uint32_t)n);
    kf_shape ys = rows ? kf_shape_2d((uint32_t)n, (uint32_t)out_width) : kf_shape_1d((uint32_t)n);
    kf_tensor *x = NULL, *got = NULL, *expected = NULL;
    kf_status st = kf_tensor_create(&xs, &x);
    if (st == KF_OK) {
        st = kf_tensor_create(&ys, &got);
    }
    for (uint64_t i = 0; i < n && st == KF_OK; i++) {
        uint64_t at = n > 1 ? i * (count - 1) / (n - 1) : 0;
        memcpy(x->data + i * width, first->data + at * width, width * sizeof *x->data);
        memcpy(got->data + i * out_width, gpu->data + at * out_width,
               out_width * sizeof *got->data);
    }
    if (st == KF_OK) {
        expected = evaluate_sample(c, x, inputs, &st, msg, msg_size);
        x = NULL; /* consumed */
    }
    if (st == KF_OK) {
        uint64_t total = kf_tensor_size(expected);
        double scale = 0.0;
        for (uint64_t i = 0; i < total; i++) {
            double a = fabs((double)expected->data[i]);
            scale = a > scale ? a : scale;
        }
        double floor = 1e-3 * scale > 1e-6 ? 1e-3 * scale : 1e-6;
        *max_err = kf_max_rel_error(got->data, expected->data, total, floor);
    }
    kf_tensor_destroy(x);
    kf_tensor_destroy(got);
    kf_tensor_destroy(expected);
    return st;
}

/* Limits and missing features are reasons to skip; anything else is a failure. */
static bool is_skip(kf_status st) {
    return st == KF_ERROR_LIMIT || st == KF_ERROR_OUT_OF_MEMORY || st == KF_ERROR_UNSUPPORTED;
}

void kf_bench_run_graph_case(kf_context *ctx, const kf_bench_case *c, uint32_t repeat,
                             uint64_t seed, kf_bench_result *r) {
    const char *missing = missing_operator(c);
    if (missing) {
        r->skipped = true;
        snprintf(r->note, sizeof r->note, "this build has no '%s' operator", missing);
        return;
    }
    kf_graph *g = build_graph(c);
    if (!g || kf_graph_status(g) != KF_OK) {
        r->failed = true;
        snprintf(r->note, sizeof r->note, "building the graph: %s",
                 g ? kf_graph_error(g) : "out of memory");
        kf_graph_destroy(g);
        return;
    }
    bool matmul = c->family == KF_BENCH_MATMUL || c->family == KF_BENCH_MATMUL_BIAS_GELU ||
                  c->family == KF_BENCH_RMSNORM_MATMUL;
    r->flops = matmul;
    r->work = matmul ? 2.0 * c->m * c->n * c->k : compulsory_bytes(g);
    variant v[2];
    memset(v, 0, sizeof v);
    kf_tensor *inputs[MAX_INPUTS] = {NULL, NULL, NULL, NULL};
    kf_timing timing[2];
    memset(timing, 0, sizeof timing);
    v[0].batch = v[1].batch = c->batch;
    kf_status st = run_variants(ctx, g, repeat, seed, v, inputs, timing, r->note, sizeof r->note);
    const variant *fused = &v[0], *unfused = &v[1];
    if (st != KF_OK) {
        r->skipped = is_skip(st);
        r->failed = !r->skipped;
    } else {
        r->fused = timing[0];
        r->unfused = timing[1];
        r->dispatches_fused = fused->summary.dispatches;
        r->dispatches_unfused = unfused->summary.dispatches;
        r->bytes_fused = fused->summary.bytes;
        r->bytes_unfused = unfused->summary.bytes;
        /* Relative to the output's scale, so values near zero (gelu's left tail) do not turn
         * harmless rounding into a large ratio. */
        uint64_t n = kf_tensor_size(unfused->output);
        double scale = 0.0;
        for (uint64_t i = 0; i < n; i++) {
            double a = fabs((double)unfused->output->data[i]);
            scale = a > scale ? a : scale;
        }
        double floor = 1e-3 * scale > 1e-6 ? 1e-3 * scale : 1e-6;
        r->max_rel_diff = kf_max_rel_error(fused->output->data, unfused->output->data, n, floor);
        /* Unfused f16 plans round every intermediate to f16, fused ones keep f32 in registers:
         * they differ by a few f16 ulps. Anything beyond that is a broken kernel. */
        double allowed = c->dtype == KF_DTYPE_F16 ? 5e-2 : 1e-3;
        if (c->dtype == KF_DTYPE_F16 && c->family == KF_BENCH_RMSNORM_MATMUL) {
            /* ... and the unfused one rounds the normed tensor to f16 before the product,
             * which the fused one never forms: 2^-11 of each term, which the K-long sum carries
             * to ~0.1 of the 1e-3 floor at the outputs near zero. The specs check below holds
             * the fused output to 5e-2. */
            allowed = 0.25;
        } else if (c->family == KF_BENCH_RMSNORM_MATMUL) {
            /* The fused product sums raw x times the scaled w and applies 1 / rms after, the
             * unfused one sums the normed x times w: two f32 roundings of a K-long sum, not one
             * sum twice as in the other families. Each is ~2.5e-4 from a float64 reference at
             * K = 4096 on 16K outputs (kfuse run --check, lavapipe), and the largest of 16M
             * outputs (4096 x 4096) drifts further: 1.2e-3 to 1.5e-3 on an H100 (session 17). */
            allowed = 1e-2;
        }
        if (!(r->max_rel_diff <= allowed)) {
            r->failed = true;
            snprintf(r->note, sizeof r->note,
                     "fused and unfused outputs differ: max rel diff %.3g (allowed %.3g); "
                     "'kfuse run --check' on this graph shows which is wrong",
                     r->max_rel_diff, allowed);
        }
        /* Against the specs, a bound for gross errors (elements never written, rows mixed up),
         * not for precision: precision is kfuse verify's and the test suite's business. */
        double spec_allowed = c->dtype == KF_DTYPE_F16 ? 5e-2 : 1e-2;
        if (c->dtype == KF_DTYPE_F16 && c->family == KF_BENCH_RMSNORM_MATMUL) {
            /* Where f16 products run on subgroup matrices the plan is the unfused one, whose
             * normed tensor is rounded to f16: 2^-12 of each of K = 4096 terms, ~0.06 of the
             * 1e-3 floor at outputs near zero (0.08 to 0.15 seen on an H100, session 17). */
            spec_allowed = 0.25;
        }
        char msg[256] = {0};
        st = check_sample(c, inputs, fused->output, &r->sample_rel_err, msg, sizeof msg);
        if (st != KF_OK) {
            r->failed = true;
            snprintf(r->note, sizeof r->note, "checking a sample against the specs: %s", msg);
        } else if (!r->failed && !(r->sample_rel_err <= spec_allowed)) {
            r->failed = true;
            snprintf(r->note, sizeof r->note,
                     "sampled outputs differ from the CPU specs: max rel err %.3g (allowed "
                     "%.3g); 'kfuse run --check' on this graph, smaller, shows more",
                     r->sample_rel_err, spec_allowed);
        }
    }
    for (uint32_t i = 0; i < MAX_INPUTS; i++) {
        kf_tensor_destroy(inputs[i]);
    }
    for (uint32_t i = 0; i < 2; i++) {
        kf_tensor_destroy(v[i].output);
        kf_plan_destroy(v[i].plan);
    }
    kf_graph_destroy(g);
}

void kf_bench_spec(const kf_bench_case *c, char *buf, size_t size) {
    const char *t = kf_dtype_str(c->dtype);
    size_t used = 0;
#define SPEC_APPEND(...)                                                                           \
    do {                                                                                           \
        int n_ =                                                                                   \
            snprintf(used < size ? buf + used : NULL, used < size ? size - used : 0, __VA_ARGS__); \
        used += n_ > 0 ? (size_t)n_ : 0;                                                           \
    } while (0)
    if (size) {
        buf[0] = '\0';
    }
    switch (c->family) {
    case KF_BENCH_COPY:
    case KF_BENCH_CHAIN:
        SPEC_APPEND("x: %s[%llu]; y = x", t, (unsigned long long)c->elements);
        if (c->family == KF_BENCH_COPY) {
            SPEC_APPEND(" |> copy");
        }
        for (uint32_t i = 0; c->family == KF_BENCH_CHAIN && i < c->ops && i < 8; i++) {
            if (chain_steps[i].kind != STEP_UNARY) {
                SPEC_APPEND(" |> %s(%g)", chain_steps[i].op, chain_steps[i].number);
            } else {
                SPEC_APPEND(" |> %s", chain_steps[i].op);
            }
        }
        break;
    case KF_BENCH_MATMUL:
    case KF_BENCH_MATMUL_BIAS_GELU:
        SPEC_APPEND("a: %s[%u,%u]; b: %s[%u,%u]; ", t, c->m, c->k, t, c->k, c->n);
        if (c->family == KF_BENCH_MATMUL) {
            SPEC_APPEND("y = matmul(a, b)");
        } else {
            SPEC_APPEND("bias: %s[%u]; y = matmul(a, b) |> add(bias) |> gelu", t, c->n);
        }
        break;
    case KF_BENCH_SOFTMAX:
        SPEC_APPEND("x: %s[%u,%u]; y = softmax(x)", t, c->rows, c->cols);
        break;
    case KF_BENCH_RMSNORM_WEIGHT:
        SPEC_APPEND("x: %s[%u,%u]; w: %s[%u]; y = rmsnorm(x) |> mul(w)", t, c->rows, c->cols, t,
                    c->cols);
        break;
    case KF_BENCH_LAYERNORM_AFFINE:
        SPEC_APPEND("x: %s[%u,%u]; w: %s[%u]; b: %s[%u]; y = layernorm(x) |> mul(w) |> add(b)", t,
                    c->rows, c->cols, t, c->cols, t, c->cols);
        break;
    case KF_BENCH_RMSNORM_MATMUL:
        SPEC_APPEND("x: %s[%u,%u]; g: %s[%u]; w: %s[%u,%u]; y = rmsnorm(x, g) |> matmul(w)", t,
                    c->m, c->k, t, c->k, t, c->k, c->n);
        break;
    case KF_BENCH_FFN_SAVE:
        return; /* copies between buffers, not a graph */
    case KF_BENCH_TRAIN_STEP:
        SPEC_APPEND("x: f32[%u,%u]; labels: i32[%u]; param w1: f32[%u,%u]; param b1: f32[%u]; "
                    "param w2: f32[%u,%u]; param b2: f32[%u]; "
                    "h = matmul(x, w1) |> add(b1) |> gelu; logits = matmul(h, w2) |> add(b2); "
                    "loss = cross_entropy(logits, labels); out loss",
                    c->tokens, c->dim, c->tokens, c->dim, c->ffn_dim, c->ffn_dim, c->ffn_dim,
                    c->cols, c->cols);
        return; /* kfuse train runs it */
    }
    SPEC_APPEND("; out y");
#undef SPEC_APPEND
}
