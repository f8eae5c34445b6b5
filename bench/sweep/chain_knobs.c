/* kfuse_chain_knobs: kfuse's own element-wise chain kernel under its emission knobs, side by side
 * in one process: the benchmark's chain of L operators (bench/cases.c: x |> scale(1.5) |>
 * add(0.25) |> relu |> tanh |> sigmoid |> mul(2) |> gelu |> silu, the first L) compiled once per
 * variant ($KF_EW_VEC4S vec4s an invocation, $KF_EW_NEWTON's reciprocals), and a copy of the same
 * size as the baseline, all reading one random input (one GPU tensor bound to each) and timed in
 * interleaved rounds (one run of each plan a round, the order reversed every other round; median of
 * the rounds). Each variant's output is compared in full with the first variant's.
 *   kfuse_chain_knobs [-n ELEMENTS] [-l L[,L...]] [-r ROUNDS] [VARIANT ...]
 * VARIANT is VEC4S/NEWTON: VEC4S 1, 2, 4 or d (the fusion rule's own choice), NEWTON a list for
 * $KF_EW_NEWTON (tanh, sigmoid, gelu, silu), "none", or d (the variable unset: the default).
 * Defaults: 2^28 elements, L = 8, 20 rounds, the variants {1,2,4} x {none, tanh,sigmoid}.
 * Percent of copy: the copy's median over the chain's median (the same rounds), and, as kfuse
 * bench reports it, the copy's best run over the chain's median. */
#define _POSIX_C_SOURCE 200112L /* setenv, unsetenv */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kfuse.h"

#define MAX_PLANS 24

static const char *const steps[8] = {"scale(1.5)", "add(0.25)", "relu", "tanh",
                                     "sigmoid",    "mul(2)",    "gelu", "silu"};
static const char *const default_variants[] = {
    "1/none", "2/none", "4/none", "1/tanh,sigmoid", "2/tanh,sigmoid", "4/tanh,sigmoid"};

static int compare_ms(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The graph of `ops` chain steps (0: a copy) on n elements, or NULL with a message. */
static kf_graph *chain_graph(uint64_t n, uint32_t ops) {
    char text[512];
    int at = snprintf(text, sizeof text, "x: f32[%llu]\ny = x", (unsigned long long)n);
    for (uint32_t i = 0; i < ops; i++) {
        at += snprintf(text + at, sizeof text - (size_t)at, " |> %s", steps[i]);
    }
    snprintf(text + at, sizeof text - (size_t)at, "%s\nout y\n", ops ? "" : " |> copy");
    kf_graph *g = NULL;
    kf_spec_error err = {0};
    if (kf_spec_parse(text, strlen(text), &g, &err) != KF_OK) {
        fprintf(stderr, "kfuse_chain_knobs: %u:%u: %s\n", err.line, err.column, err.message);
    }
    return g;
}

/* Sets (or, for "d", unsets) one knob for the next compile. */
static void set_knob(const char *name, const char *value, size_t length) {
    char buf[128];
    snprintf(buf, sizeof buf, "%.*s", (int)length, value);
    if (strcmp(buf, "d") == 0) {
        unsetenv(name);
    } else {
        setenv(name, buf, 1);
    }
}

int main(int argc, char **argv) {
    uint64_t n = 1ull << 28;
    const char *lengths = "8";
    uint32_t rounds = 20;
    int first = 1;
    for (; first + 1 < argc && argv[first][0] == '-'; first += 2) {
        if (strcmp(argv[first], "-n") == 0) {
            n = strtoull(argv[first + 1], NULL, 0);
        } else if (strcmp(argv[first], "-l") == 0) {
            lengths = argv[first + 1];
        } else if (strcmp(argv[first], "-r") == 0) {
            rounds = (uint32_t)atoi(argv[first + 1]);
        } else {
            break;
        }
    }
    const char *const *variants =
        first < argc ? (const char *const *)argv + first : default_variants;
    uint32_t variant_count = first < argc ? (uint32_t)(argc - first)
                                          : sizeof default_variants / sizeof *default_variants;
    if (n == 0 || n > (1ull << 30) || rounds == 0 || rounds > 1000 ||
        variant_count + 1 > MAX_PLANS) {
        fprintf(stderr, "usage: kfuse_chain_knobs [-n ELEMENTS] [-l L[,L...]] [-r ROUNDS] "
                        "[VEC4S/NEWTON ...]\n");
        return 2;
    }
    kf_context *ctx = NULL;
    kf_context_desc desc = {0};
    if (kf_context_create(&desc, &ctx) != KF_OK) {
        fprintf(stderr, "kfuse_chain_knobs: no device\n");
        return 1;
    }
    kf_adapter_info info;
    kf_context_adapter_info(ctx, &info);
    printf("kfuse_chain_knobs on %s: %llu f32, median of %u interleaved rounds\n", info.device,
           (unsigned long long)n, rounds);
    kf_shape shape = {.rank = 1, .dims = {(uint32_t)n}};
    kf_tensor *x = NULL, *want = NULL, *got = NULL;
    kf_gpu_tensor *xg = NULL;
    double *samples = calloc((size_t)MAX_PLANS * rounds, sizeof *samples);
    int rc = 0;
    if (!samples || kf_tensor_create(&shape, &want) != KF_OK ||
        kf_tensor_create(&shape, &got) != KF_OK) {
        fprintf(stderr, "kfuse_chain_knobs: out of memory\n");
        rc = 1;
    }
    for (const char *l = lengths; rc == 0 && l && *l; l = strchr(l, ','), l = l ? l + 1 : NULL) {
        uint32_t ops = (uint32_t)atoi(l);
        if (ops < 1 || ops > 8) {
            fprintf(stderr, "kfuse_chain_knobs: chain lengths are 1 to 8\n");
            rc = 2;
            break;
        }
        /* plan 0: the copy; plans 1..: the variants, each compiled under its knobs */
        kf_plan *plans[MAX_PLANS] = {0};
        uint32_t count = 1 + variant_count;
        for (uint32_t i = 0; i < count && rc == 0; i++) {
            const char *v = i ? variants[i - 1] : "d/d";
            const char *slash = strchr(v, '/');
            set_knob("KF_EW_VEC4S", v, slash ? (size_t)(slash - v) : strlen(v));
            set_knob("KF_EW_NEWTON", slash ? slash + 1 : "d", slash ? strlen(slash + 1) : 1);
            kf_graph *g = chain_graph(n, i ? ops : 0);
            if (!g || kf_graph_compile(ctx, g, NULL, &plans[i]) != KF_OK) {
                fprintf(stderr, "kfuse_chain_knobs: %s: %s\n", v, kf_context_last_error(ctx));
                rc = 1;
            }
            kf_graph_destroy(g);
        }
        unsetenv("KF_EW_VEC4S");
        unsetenv("KF_EW_NEWTON");
        if (rc == 0 && !x &&
            (kf_plan_random_input(plans[1], "x", 1, &x) != KF_OK ||
             kf_gpu_tensor_from(ctx, x, KF_DTYPE_F32, &xg) != KF_OK)) {
            fprintf(stderr, "kfuse_chain_knobs: input: %s\n", kf_context_last_error(ctx));
            rc = 1;
        }
        for (uint32_t i = 0; i < count && rc == 0; i++) {
            if (kf_plan_bind_input(plans[i], "x", xg) != KF_OK || kf_plan_run(plans[i]) != KF_OK) {
                fprintf(stderr, "kfuse_chain_knobs: run: %s\n", kf_context_last_error(ctx));
                rc = 1;
            }
        }
        for (uint32_t r = 0; r < rounds && rc == 0; r++) {
            for (uint32_t j = 0; j < count && rc == 0; j++) {
                uint32_t i = r % 2 ? count - 1 - j : j;
                kf_timing t;
                if (kf_plan_time(plans[i], 1, &t) != KF_OK) {
                    fprintf(stderr, "kfuse_chain_knobs: time: %s\n", kf_context_last_error(ctx));
                    rc = 1;
                }
                samples[(size_t)i * rounds + r] = t.median_ms;
            }
        }
        double copy_median = 0, copy_min = 0;
        for (uint32_t i = 0; i < count && rc == 0; i++) {
            double *s = samples + (size_t)i * rounds;
            qsort(s, rounds, sizeof *s, compare_ms);
            double median = rounds % 2 ? s[rounds / 2] : 0.5 * (s[rounds / 2 - 1] + s[rounds / 2]);
            if (i == 0) {
                copy_median = median;
                copy_min = s[0];
                printf("copy     %-33s median %.4f ms  min %.4f ms  %6.0f GB/s\n", "", median, s[0],
                       8.0 * (double)n / (median * 1e6));
                continue;
            }
            double diff = 0;
            if (kf_plan_get_output(plans[i], "y", i == 1 ? want : got) != KF_OK) {
                fprintf(stderr, "kfuse_chain_knobs: output: %s\n", kf_context_last_error(ctx));
                rc = 1;
                break;
            }
            if (i > 1) {
                diff = kf_max_rel_error(got->data, want->data, n, 1e-6);
            }
            printf("chain_%u  vec4s/newton %-20s median %.4f ms  min %.4f ms  %6.0f GB/s  %5.1f%% "
                   "of copy (%5.1f%% of its best)  diff %.2g\n",
                   ops, variants[i - 1], median, s[0], 8.0 * (double)n / (median * 1e6),
                   100.0 * copy_median / median, 100.0 * copy_min / median, diff);
        }
        fflush(stdout);
        for (uint32_t i = 0; i < count; i++) {
            kf_plan_destroy(plans[i]);
        }
    }
    kf_gpu_tensor_destroy(xg);
    kf_tensor_destroy(x);
    kf_tensor_destroy(want);
    kf_tensor_destroy(got);
    free(samples);
    kf_context_destroy(ctx);
    return rc;
}
