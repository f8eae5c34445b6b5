/* Fuzzing the planner: random valid graphs, planned fused, run on the device and proved against
 * the unfused composition of CPU specs (kf_plan_verify), for a fixed time (a share of
 * KFUSE_FUZZ_SECONDS). The graphs are what the fusion rules must get right: many inputs and
 * outputs, long element-wise chains, intermediates read by several consumers and named as
 * outputs, f16, every broadcast (scalar constants, [1]-shaped, rows, columns, ranks 1 to 4),
 * matmuls with epilogues, row reductions with tails, norms with weight and bias, labels.
 *
 * Each graph is also printed in the graph language (kf_graph_format) and parsed back; every
 * other graph is planned from that program. Graph n of a run is a function of the run's seed alone
 * (printed; --seed S reruns the same sequence), and a failing graph is printed in the graph
 * language, ready for kfuse run -e. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "plan_bounds.h"

#define GRAPH_SHARE 0.5
#define MAX_NODES 96
#define MAX_INPUTS 24

typedef struct fuzz_graph {
    kf_graph *g;
    kf_dtype dtype;
    kf_node nodes[MAX_NODES]; /* values ops may consume: inputs and results */
    uint32_t count;
    uint32_t inputs;
    char desc[256];
    size_t desc_len;
} fuzz_graph;

static uint32_t pick(uint32_t n) {
    return n ? (uint32_t)(kt_rand_u64() % n) : 0;
}

static void note(fuzz_graph *f, const char *what) {
    if (f->desc_len + strlen(what) + 2 < sizeof f->desc) {
        f->desc_len +=
            (size_t)snprintf(f->desc + f->desc_len, sizeof f->desc - f->desc_len, " %s", what);
    }
}

static kf_node input(fuzz_graph *f, const kf_shape *s, kf_dtype dtype) {
    char name[16];
    snprintf(name, sizeof name, "in%u", f->inputs++);
    return kf_graph_input(f->g, name, s, dtype);
}

static kf_node keep(fuzz_graph *f, kf_node n) {
    if (n.id && f->count < MAX_NODES) {
        f->nodes[f->count++] = n;
    }
    return n;
}

static kf_node call(fuzz_graph *f, const char *op, kf_node *in, uint32_t n, double a, double b,
                    uint32_t numbers) {
    kf_graph_arg args[2] = {{.number = a}, {.number = b}};
    note(f, op);
    return kf_graph_call(f->g, op, in, n, args, numbers);
}

/* x made safe for log, sqrt, reciprocal and division: |x| + 0.5, so the specs' float64 and the
 * kernels' f32 are compared where both are well conditioned. */
static kf_node positive(fuzz_graph *f, kf_node x) {
    kf_node a = kf_graph_unary(f->g, "abs", x);
    return call(f, "affine", &a, 1, 1.0, 0.5, 2);
}

/* A second operand for x's binary op: another value of x's shape, or a broadcast one. */
static kf_node operand_for(fuzz_graph *f, kf_node x, bool divisor) {
    kf_shape s = kf_graph_shape(f->g, x);
    switch (pick(6)) {
    case 0: /* a constant (the language's add(x, 1)); a divisor stays away from 0 */
        return kf_graph_scalar(f->g, divisor ? kt_rand_f32(0.5f, 2.0f) : kt_rand_f32(-2.0f, 2.0f));
    case 1: { /* a one-element tensor broadcast as a scalar: [1] or rank 0 (f32[]) */
        kf_shape one = kf_shape_1d(1);
        one.rank = pick(2);
        return keep(f, divisor ? positive(f, input(f, &one, f->dtype)) : input(f, &one, f->dtype));
    }
    case 2: /* a row: the last dim, rank 1 or padded with ones to x's rank */
        if (s.rank >= 1) {
            kf_shape row = kf_shape_1d(s.dims[s.rank - 1]);
            if (s.rank > 1 && pick(2)) {
                row.rank = s.rank;
                for (uint32_t d = 0; d + 1 < s.rank; d++) {
                    row.dims[d] = 1;
                }
                row.dims[s.rank - 1] = s.dims[s.rank - 1];
            }
            return keep(f, input(f, &row, f->dtype));
        }
        break;
    case 3: /* a column: x's leading dims, then 1 */
        if (s.rank >= 2) {
            kf_shape col = s;
            col.dims[s.rank - 1] = 1;
            return keep(f, input(f, &col, f->dtype));
        }
        break;
    default:
        break;
    }
    /* a value of the same shape from the pool (a shared intermediate), else a new input */
    for (uint32_t tries = 0; tries < 8 && f->count; tries++) {
        kf_node c = f->nodes[pick(f->count)];
        kf_shape cs = kf_graph_shape(f->g, c);
        if (kf_shape_eq(&cs, &s)) {
            return c;
        }
    }
    return keep(f, input(f, &s, f->dtype));
}

static const char *const unary_ops[] = {
    "relu", "leaky_relu", "sigmoid", "tanh", "gelu", "gelu_exact", "silu",      "neg",
    "abs",  "square",     "copy",    "exp",  "log",  "sqrt",       "reciprocal"};
static const char *const binary_ops[] = {"add", "sub", "mul", "maximum", "div"};
static const char *const row_ops[] = {"softmax", "log_softmax", "rmsnorm", "layernorm",
                                      "sum",     "mean",        "max"};

/* One more operation on a value from the pool; returns its result (id 0 when the op did not
 * apply to that value, which is no error). */
static kf_node grow(fuzz_graph *f, kf_node x) {
    kf_graph *g = f->g;
    kf_shape s = kf_graph_shape(g, x);
    uint32_t kind = pick(20);
    if (kind < 7) {
        const char *op = unary_ops[pick(sizeof unary_ops / sizeof unary_ops[0])];
        if (!strcmp(op, "exp")) {
            x = kf_graph_unary(g, "tanh", x); /* no overflow to compare */
        } else if (!strcmp(op, "log") || !strcmp(op, "sqrt") || !strcmp(op, "reciprocal")) {
            x = positive(f, x);
        }
        if (!strcmp(op, "leaky_relu")) {
            return call(f, op, &x, 1, kt_rand_f32(0.0f, 0.5f), 0, 1);
        }
        note(f, op);
        return kf_graph_unary(g, op, x);
    }
    if (kind < 13) {
        const char *op = binary_ops[pick(sizeof binary_ops / sizeof binary_ops[0])];
        bool div = !strcmp(op, "div");
        kf_node in[2] = {x, operand_for(f, x, div)};
        if (div && kf_graph_shape(g, in[1]).rank > 0) {
            in[1] = positive(f, in[1]);
        }
        if (!div && pick(4) == 0 && kf_graph_shape(g, in[1]).rank > 0) {
            kf_node t = in[0]; /* the broadcast one first: "b or a broadcast" */
            in[0] = in[1];
            in[1] = t;
        }
        note(f, op);
        return kf_graph_op(g, op, in, 2, NULL);
    }
    if (kind < 15) {
        return pick(2) ? call(f, "scale", &x, 1, kt_rand_f32(-2.0f, 2.0f), 0, 1)
                       : call(f, "affine", &x, 1, kt_rand_f32(-2.0f, 2.0f),
                              kt_rand_f32(-1.0f, 1.0f), 2);
    }
    if (kind < 18 && s.rank >= 1) {
        const char *op = row_ops[pick(sizeof row_ops / sizeof row_ops[0])];
        bool norm = !strcmp(op, "rmsnorm") || !strcmp(op, "layernorm");
        if (norm && pick(2)) {
            kf_shape row = kf_shape_1d(s.dims[s.rank - 1]);
            kf_node in[3] = {x, keep(f, input(f, &row, f->dtype)), {0}};
            uint32_t n = 2;
            if (pick(2)) {
                in[n++] = keep(f, input(f, &row, f->dtype));
            }
            return call(f, op, in, n, 1e-5, 0, 0);
        }
        note(f, op);
        return kf_graph_unary(g, op, x);
    }
    if (kind == 18 && s.rank == 2) {
        uint32_t n = 1 + pick(48);
        kf_shape ws = pick(2) ? kf_shape_2d(s.dims[1], n) : kf_shape_2d(n, s.dims[1]);
        kf_node w = keep(f, input(f, &ws, f->dtype));
        kf_graph_arg tb = {.name = "transpose_b", .number = 1};
        kf_node in[2] = {x, w};
        note(f, "matmul");
        return kf_graph_call(g, "matmul", in, 2, &tb, ws.dims[0] == s.dims[1] ? 0 : 1);
    }
    if (kind == 19 && s.rank == 2 && f->dtype == KF_DTYPE_F32) {
        if (pick(2)) {
            note(f, "transpose");
            return kf_graph_unary(g, "transpose", x);
        }
        kf_shape ls = kf_shape_1d(s.dims[0]);
        kf_node in[2] = {x, input(f, &ls, KF_DTYPE_I32)};
        note(f, "cross_entropy");
        return kf_graph_op(g, "cross_entropy", in, 2, NULL);
    }
    return (kf_node){0};
}

static const uint32_t dim_choices[] = {1, 2, 3, 4, 5, 7, 8, 13, 16, 31, 33, 64, 100, 129};

static kf_graph *random_graph(fuzz_graph *f, bool f16_ok) {
    memset(f, 0, sizeof *f);
    f->g = kf_graph_create();
    f->dtype = f16_ok && pick(5) == 0 ? KF_DTYPE_F16 : KF_DTYPE_F32;
    kf_shape s = {1 + pick(4), {1, 1, 1, 1}};
    uint64_t elements = 1;
    for (uint32_t d = 0; d < s.rank; d++) {
        s.dims[d] = dim_choices[pick(sizeof dim_choices / sizeof dim_choices[0])];
        while (elements * s.dims[d] > 20000 && s.dims[d] > 1) {
            s.dims[d] /= 2;
        }
        elements *= s.dims[d];
    }
    f->desc_len = (size_t)snprintf(f->desc, sizeof f->desc,
                                   "%s rank %u:", f->dtype == KF_DTYPE_F16 ? "f16" : "f32", s.rank);
    uint32_t first_inputs = 1 + pick(6);
    for (uint32_t i = 0; i < first_inputs; i++) {
        keep(f, input(f, &s, f->dtype));
    }
    uint32_t steps = 1 + pick(pick(4) == 0 ? 60 : 12); /* now and then a long chain */
    kf_node last = f->nodes[0];
    for (uint32_t i = 0; i < steps && f->inputs < MAX_INPUTS; i++) {
        kf_node x = pick(3) ? last : f->nodes[pick(f->count)];
        kf_node y = grow(f, x);
        if (kf_graph_status(f->g) != KF_OK) {
            break;
        }
        if (y.id) {
            last = keep(f, y);
        }
    }
    kf_graph_output(f->g, "y", last);
    /* other outputs: shared intermediates, sometimes an input, sometimes one node twice */
    uint32_t extra = pick(5);
    for (uint32_t i = 0; i < extra; i++) {
        char name[16];
        snprintf(name, sizeof name, "side%u", i);
        kf_graph_output(f->g, name, pick(6) ? f->nodes[pick(f->count)] : last);
    }
    return f->g;
}

KT_TEST(fuzz, random_graphs_plan_run_and_verify) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    double seconds = kt_fuzz_seconds(GRAPH_SHARE), start = kt_now();
    printf("    %.0f s of random graphs from seed %llu (rerun with --seed %llu)\n", seconds,
           (unsigned long long)kt_seed(), (unsigned long long)kt_seed());
    uint32_t graphs = 0, refused = 0, fused_fewer = 0;
    uint64_t nodes = 0;
    kt_plan_bounds bounds = {0};
    char first_refusal[256] = "";
    while (graphs < 2 || kt_now() - start < seconds) {
        fuzz_graph f;
        kf_graph *g = random_graph(&f, info.has_f16);
        uint32_t index = graphs++;
        if (kf_graph_status(g) != KF_OK) {
            /* the generator's own mistake (a shape it should not have tried): not a finding,
             * but it must stay rare or the fuzzer tests nothing */
            if (!refused++) {
                snprintf(first_refusal, sizeof first_refusal, "%s", kf_graph_error(g));
            }
            bool too_often = refused * 4 > graphs + 20;
            if (too_often) {
                kt_fail(__FILE__, __LINE__, "the generator is refused too often (%u of %u): %s",
                        refused, graphs, kf_graph_error(g));
            }
            kf_graph_destroy(g);
            if (too_often) {
                return;
            }
            continue;
        }
        nodes += f.count;
        /* As a program too: the graph printed in the language must parse back, and every other
         * graph is planned from the parsed program rather than the built one. */
        char *program = kf_graph_format(g);
        kf_graph *parsed = NULL;
        kf_spec_error err = {0};
        kf_status pst = program ? kf_spec_parse(program, strlen(program), &parsed, &err)
                                : KF_ERROR_OUT_OF_MEMORY;
        bool same_outputs =
            pst == KF_OK && kf_graph_output_count(parsed) == kf_graph_output_count(g);
        for (uint32_t o = 0; same_outputs && o < kf_graph_output_count(g); o++) {
            const char *a = NULL, *b = NULL;
            kf_graph_output_info(g, o, &a, NULL, NULL);
            kf_graph_output_info(parsed, o, &b, NULL, NULL);
            same_outputs = a && b && !strcmp(a, b);
        }
        if (!same_outputs) {
            kt_fail(__FILE__, __LINE__,
                    "graph %u (seed %llu; %s): kf_graph_format printed a program that does not "
                    "parse back to the same outputs: %u:%u: %s\n%s",
                    index, (unsigned long long)kt_seed(), f.desc, err.line, err.column, err.message,
                    program ? program : "(format failed)");
            kf_graph_destroy(parsed);
            kf_free(program);
            kf_graph_destroy(g);
            return;
        }
        kf_free(program);
        if (index % 2) {
            kf_graph_destroy(g);
            g = parsed;
        } else {
            kf_graph_destroy(parsed);
        }
        kf_plan *plan = NULL;
        kf_status st = kf_graph_compile(ctx, g, NULL, &plan);
        kf_plan_report rep = {0};
        if (st == KF_OK) {
            st = kf_plan_verify(plan, kt_rand_u64(), &rep);
        }
        char oob[600] = "";
        if (st == KF_OK && !kt_plan_in_bounds(plan, 20000, &bounds, oob, sizeof oob)) {
            char *text = kf_graph_format(g);
            kt_fail(__FILE__, __LINE__,
                    "graph %u (seed %llu; %s): a kernel went out of bounds in the interpreter: "
                    "%s\n    the program: %s",
                    index, (unsigned long long)kt_seed(), f.desc, oob, text ? text : "");
            kf_free(text);
            kf_plan_destroy(plan);
            kf_graph_destroy(g);
            return;
        }
        if (st != KF_OK) {
            char *text = kf_graph_format(g);
            kt_fail(__FILE__, __LINE__,
                    "graph %u (seed %llu; %s): %s: %s\n    to reproduce: kfuse run --check -e '%s'",
                    index, (unsigned long long)kt_seed(), f.desc, kf_status_str(st),
                    kf_context_last_error(ctx), text ? text : "(format failed)");
            for (uint32_t o = 0; o < rep.output_count; o++) {
                fprintf(stderr, "    output %s: error %.3g, tolerance %.3g%s\n",
                        rep.outputs[o].name, rep.outputs[o].max_rel_error, rep.outputs[o].tolerance,
                        rep.outputs[o].passed ? "" : "  FAILED");
            }
            kf_free(text);
            kf_plan_destroy(plan);
            kf_graph_destroy(g);
            return;
        }
        kf_plan_summary sum;
        kf_plan_summary_get(plan, &sum);
        fused_fewer += sum.dispatches < sum.unfused_dispatches;
        kf_plan_destroy(plan);
        kf_graph_destroy(g);
    }
    printf("    %u graphs (%llu values, %u refused by the builder), %u fused into fewer "
           "dispatches, in %.1f s\n",
           graphs, (unsigned long long)nodes, refused, fused_fewer, kt_now() - start);
    if (refused) {
        printf("    the first refusal: %s\n", first_refusal);
    }
    printf("    their %u kernels: %u accesses, %u proved in bounds, %u guarded; %u run through "
           "the interpreter without an out-of-bounds access\n",
           bounds.kernels, bounds.accesses, bounds.proved, bounds.guarded, bounds.interpreted);
    KT_CHECK(fused_fewer > 0, "nothing ever fused");
}
