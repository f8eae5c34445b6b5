/* kfuse demo: the seeds' exampleFusedLayer, through the fusion engine.
 *
 * Three graphs, each planned twice (fused, and one dispatch per operator), proved against the
 * unfused composition of the operators' CPU specifications, and timed:
 *   1. an MLP layer, y = gelu(x @ w + b): bias and GELU in the matmul's store phase;
 *   2. the FFN activation save: gate, up, hidden (ffnDim) and residual1 (dim) copied in one
 *      dispatch (the seeds needed two);
 *   3. an element-wise chain, y = gelu(relu(2x + 1)), in one dispatch.
 * On a GPU the timed graphs are large and the proof runs on the same graph at a size the CPU
 * reference computes in seconds; on a CPU adapter both are small. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct demo_sizes {
    uint32_t batch, d_in, d_out; /* MLP: x [batch, d_in], w [d_in, d_out] */
    uint32_t tokens, ffn, dim;   /* FFN save */
    uint32_t chain;              /* element-wise chain length */
} demo_sizes;

static const demo_sizes gpu_timed = {4096, 4096, 4096, 512, 14336, 4096, 1u << 24};
static const demo_sizes gpu_proved = {256, 1024, 1024, 16, 14336, 4096, 1u << 22};
static const demo_sizes cpu_sizes = {256, 512, 512, 8, 1436, 512, 1u << 22};

typedef struct demo_case {
    const char *title;
    const char *about;
    void (*program)(const demo_sizes *s, char *buf, size_t size);
} demo_case;

static void mlp_program(const demo_sizes *s, char *buf, size_t size) {
    snprintf(buf, size,
             "x: f32[%u, %u]\nw: f32[%u, %u]\nb: f32[%u]\ny = matmul(x, w) |> add(b) |> gelu\n"
             "out y\n",
             s->batch, s->d_in, s->d_in, s->d_out, s->d_out);
}

static void ffn_program(const demo_sizes *s, char *buf, size_t size) {
    snprintf(buf, size,
             "gate: f32[%u, %u]\nup: f32[%u, %u]\nhidden: f32[%u, %u]\nresidual1: f32[%u, %u]\n"
             "saved_gate = copy(gate)\nsaved_up = copy(up)\nsaved_hidden = copy(hidden)\n"
             "saved_residual1 = copy(residual1)\n"
             "out saved_gate, saved_up, saved_hidden, saved_residual1\n",
             s->tokens, s->ffn, s->tokens, s->ffn, s->tokens, s->ffn, s->tokens, s->dim);
}

static void chain_program(const demo_sizes *s, char *buf, size_t size) {
    snprintf(buf, size, "x: f32[%u]\ny = x |> scale(2) |> add(1) |> relu |> gelu\nout y\n",
             s->chain);
}

static const demo_case cases[] = {
    {"MLP layer", "matmul + bias + GELU: bias and GELU run in the matmul's store phase",
     mlp_program},
    {"FFN activation save", "3 copies of ffnDim and 1 of dim in one dispatch", ffn_program},
    {"element-wise chain", "gelu(relu(2x + 1)): every intermediate stays in registers",
     chain_program},
};

static void usage(FILE *f) {
    fprintf(f, "usage: kfuse demo [--small] [--repeat R] [--seed S]\n\n"
               "The seeds' exampleFusedLayer through kfuse's fusion engine: an MLP layer\n"
               "(matmul + bias + GELU), the FFN activation save and an element-wise chain,\n"
               "each planned fused and unfused, proved against the CPU specifications\n"
               "(kf_plan_verify) and timed (median of R runs, default 20).\n\n"
               "  --small     small sizes even on a GPU (the default on a CPU adapter)\n"
               "  --repeat R  timed runs per plan\n"
               "  --seed S    seed of the random inputs (default: fresh, printed)\n\n"
               "Exits 1 when a plan's result is outside its tolerance.\n");
}

static kf_graph *parse(const char *text) {
    kf_graph *g = NULL;
    kf_spec_error err = {0};
    if (kf_spec_parse(text, strlen(text), &g, &err) != KF_OK) {
        fprintf(stderr, "kfuse demo: internal program does not parse: %u:%u: %s\n", err.line,
                err.column, err.message);
        return NULL;
    }
    return g;
}

typedef struct measured {
    kf_plan_summary summary;
    kf_timing timing;
    double max_rel_error;
    double tolerance;
    bool passed;
} measured;

/* Plans `text` (fused or not), proves the plan at `proof_text` and times it at `text`. */
static int measure(kf_context *ctx, const char *text, const char *proof_text, bool no_fuse,
                   uint64_t seed, uint32_t repeat, measured *m) {
    kf_compile_options opts = {.no_fuse = no_fuse};
    memset(m, 0, sizeof *m);
    for (int pass = 0; pass < 2; pass++) {
        kf_graph *g = parse(pass == 0 ? proof_text : text);
        if (!g) {
            return 1;
        }
        kf_plan *plan = NULL;
        kf_status st = kf_graph_compile(ctx, g, &opts, &plan);
        if (st == KF_OK && pass == 0) {
            kf_plan_report report;
            st = kf_plan_verify(plan, seed, &report);
            m->passed = report.passed;
            for (uint32_t o = 0; o < report.output_count; o++) {
                if (report.outputs[o].max_rel_error >= m->max_rel_error) {
                    m->max_rel_error = report.outputs[o].max_rel_error;
                    m->tolerance = report.outputs[o].tolerance;
                }
            }
            if (st == KF_ERROR_MISMATCH) {
                st = KF_OK; /* reported through m->passed */
            }
        } else if (st == KF_OK) {
            kf_plan_summary_get(plan, &m->summary);
            for (uint32_t i = 0; st == KF_OK && i < kf_graph_input_count(g); i++) {
                const char *name;
                kf_graph_input_info(g, i, &name, NULL, NULL);
                kf_tensor *t = NULL;
                st = kf_plan_random_input(plan, name, seed, &t);
                if (st == KF_OK) {
                    st = kf_plan_set_input(plan, name, t);
                }
                kf_tensor_destroy(t);
            }
            if (st == KF_OK) {
                st = kf_plan_time(plan, repeat, &m->timing);
            }
        }
        if (st != KF_OK) {
            fprintf(stderr, "kfuse demo: %s: %s\n", kf_status_str(st), kf_context_last_error(ctx));
        }
        kf_plan_destroy(plan);
        kf_graph_destroy(g);
        if (st != KF_OK) {
            return 1;
        }
    }
    return 0;
}

static void print_row(const char *label, const measured *m) {
    printf("  %-8s %10u %12.4f %14.1f   %.2e (tolerance %.1e) %s\n", label, m->summary.dispatches,
           m->timing.median_ms, (double)m->summary.bytes / (1024.0 * 1024.0), m->max_rel_error,
           m->tolerance, m->passed ? "ok" : "FAILED");
}

int kf_cmd_demo(int argc, char **argv) {
    bool small = false;
    uint32_t repeat = 20;
    uint64_t seed = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)clock();
    for (int i = 1; i < argc; i++) {
        if (kf_cli_is_help(argv[i])) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--small")) {
            small = true;
        } else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) {
            uint64_t v;
            if (!kf_cli_number("demo", "--repeat", argv[++i], 1, 10000, &v)) {
                return 2;
            }
            repeat = (uint32_t)v;
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            if (!kf_cli_number("demo", "--seed", argv[++i], 0, UINT64_MAX, &seed)) {
                return 2;
            }
        } else {
            fprintf(stderr, "kfuse demo: unknown or incomplete option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    kf_context *ctx = kf_cli_context();
    if (!ctx) {
        return 1;
    }
    kf_adapter_info info;
    kf_context_adapter_info(ctx, &info);
    bool cpu = !strcmp(info.adapter_type, "CPU");
    const demo_sizes *timed = cpu || small ? &cpu_sizes : &gpu_timed;
    const demo_sizes *proved = cpu || small ? &cpu_sizes : &gpu_proved;
    printf("kfuse demo on %s (%s, %s); seed %llu\n", info.device, info.backend, info.adapter_type,
           (unsigned long long)seed);
    printf("each graph: fused and unfused plans, proved against the CPU specs (kf_plan_verify)%s,"
           "\ntimed by %s (median of %u runs)\n",
           timed == proved ? "" : " at the proof size shown", "the GPU's timestamps", repeat);
    int rc = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0] && rc == 0; c++) {
        char text[1024], proof[1024];
        cases[c].program(timed, text, sizeof text);
        cases[c].program(proved, proof, sizeof proof);
        printf("\n== %zu. %s: %s\n", c + 1, cases[c].title, cases[c].about);
        for (const char *line = text; *line;) {
            const char *end = strchr(line, '\n');
            size_t len = end ? (size_t)(end - line) : strlen(line);
            printf("   | %.*s\n", (int)len, line);
            line += len + (end ? 1 : 0);
        }
        if (proof[0] && strcmp(proof, text) != 0) {
            const char *nl = strchr(proof, '\n');
            int len = nl ? (int)(nl - proof) : (int)strlen(proof);
            printf("   (proved on the same graph at %.*s ...)\n", len, proof);
        }
        measured fused, unfused;
        if (measure(ctx, text, proof, false, seed, repeat, &fused) != 0 ||
            measure(ctx, text, proof, true, seed, repeat, &unfused) != 0) {
            rc = 1;
            break;
        }
        printf("  %-8s %10s %12s %14s   %s\n", "", "dispatches", "median ms", "MiB moved",
               "max rel error vs CPU specs");
        print_row("fused", &fused);
        print_row("unfused", &unfused);
        double speedup =
            fused.timing.median_ms > 0.0 ? unfused.timing.median_ms / fused.timing.median_ms : 0.0;
        printf("  speedup %.2fx, %u dispatch%s instead of %u, %.0f%% fewer bytes\n", speedup,
               fused.summary.dispatches, fused.summary.dispatches == 1 ? "" : "es",
               unfused.summary.dispatches,
               unfused.summary.bytes
                   ? 100.0 * (1.0 - (double)fused.summary.bytes / (double)unfused.summary.bytes)
                   : 0.0);
        if (!fused.passed || !unfused.passed) {
            rc = 1;
        }
    }
    printf("\nresult: %s\n",
           rc == 0 ? "every plan matches the CPU specifications" : "FAILED (see above)");
    kf_context_destroy(ctx);
    return rc;
}
