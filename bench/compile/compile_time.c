/* How long kf_graph_compile takes, split into creating the plan's pipelines and priming them (the
 * one-workgroup dispatches that make a lazily compiling driver such as lavapipe compile), with
 * pipelines created together (CreateComputePipelineAsync) or one after another.
 *
 *   compile_time SPEC.kf async|sync      (or --many N instead of SPEC.kf: an N-layer MLP whose
 *                                          layers all differ in width, so N distinct kernels)
 *
 * prints one JSON line. Built and run by bench/compile_time.sh, which also sets the caches up
 * (cold: kfuse's and Mesa's disk caches off; warm: a second process on the same folders). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kfuse.h"
#include "runtime/runtime.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static char *read_text(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) {
        s[n] = '\0';
        *size = (size_t)n;
    }
    fclose(f);
    return s;
}

/* x [16, 32] through `layers` matmul + bias + GELU layers of widths 32, 40, 48, ...: each layer's
 * shapes differ, so each is its own kernel and pipeline. */
static char *many_layers(unsigned layers, size_t *size) {
    size_t cap = 256 + (size_t)layers * 160, used = 0;
    char *s = malloc(cap);
    if (!s) {
        return NULL;
    }
    used += (size_t)snprintf(s + used, cap - used, "x: f32[16, 32]\n");
    for (unsigned i = 0; i < layers; i++) {
        unsigned in = 32 + 8 * i, out = 40 + 8 * i;
        char prev[16];
        snprintf(prev, sizeof prev, i ? "h%u" : "x", i);
        used += (size_t)snprintf(s + used, cap - used,
                                 "w%u: f32[%u, %u]\nb%u: f32[%u]\nh%u = matmul(%s, w%u) |> "
                                 "add(b%u) |> gelu\n",
                                 i, in, out, i, out, i + 1, prev, i, i);
    }
    used += (size_t)snprintf(s + used, cap - used, "out h%u\n", layers);
    *size = used;
    return s;
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: compile_time SPEC.kf|--many N async|sync\n");
        return 2;
    }
    size_t size = 0;
    bool many = !strcmp(argv[1], "--many");
    char *text = many ? many_layers((unsigned)atoi(argv[2]), &size) : read_text(argv[1], &size);
    const char *mode = argv[many ? 3 : 2];
    if (!text || !mode) {
        fprintf(stderr, "compile_time: cannot read %s\n", argv[1]);
        return 2;
    }
    kf_context *ctx = NULL;
    kf_context_desc desc = {0};
    double t0 = now_ms();
    if (kf_context_create(&desc, &ctx) != KF_OK) {
        fprintf(stderr, "compile_time: %s\n", kf_context_last_error(ctx));
        return 1;
    }
    double context_ms = now_ms() - t0;
    bool async = kf__context_set_pipeline_async(ctx, !strcmp(mode, "async") ? 1 : -1);
    kf_graph *g = NULL;
    kf_spec_error err;
    if (kf_spec_parse(text, size, &g, &err) != KF_OK) {
        fprintf(stderr, "compile_time: %u:%u: %s\n", err.line, err.column, err.message);
        return 1;
    }
    kf_context_stats s0, s1, s2;
    kf_context_stats_get(ctx, &s0);
    /* First the pipelines alone (no_prime), then the same plan again with priming: its
     * pipelines are cached by then, so the second compile's time is the priming. */
    kf_compile_options lazy = {.no_prime = true};
    kf_plan *p = NULL;
    double t1 = now_ms();
    kf_status st = kf_graph_compile(ctx, g, &lazy, &p);
    double pipelines_ms = now_ms() - t1;
    kf_context_stats_get(ctx, &s1);
    kf_plan *q = NULL;
    double t2 = now_ms();
    if (st == KF_OK) {
        st = kf_graph_compile(ctx, g, NULL, &q);
    }
    double prime_ms = now_ms() - t2;
    kf_context_stats_get(ctx, &s2);
    if (st != KF_OK) {
        fprintf(stderr, "compile_time: %s: %s\n", kf_status_str(st), kf_context_last_error(ctx));
        return 1;
    }
    kf_plan_summary sum;
    kf_plan_summary_get(q, &sum);
    printf("{\"plan\": \"%s%s\", \"mode\": \"%s\", \"async\": %s, \"dispatches\": %u, "
           "\"pipelines\": %llu, \"pipelines_async\": %llu, \"context_ms\": %.1f, "
           "\"pipelines_ms\": %.1f, \"prime_ms\": %.1f, \"compile_ms\": %.1f, "
           "\"disk_cache_loads\": %llu}\n",
           many ? "many:" : argv[1], many ? argv[2] : "", mode, async ? "true" : "false",
           sum.dispatches, (unsigned long long)(s1.pipelines_compiled - s0.pipelines_compiled),
           (unsigned long long)(s1.pipelines_async - s0.pipelines_async), context_ms, pipelines_ms,
           prime_ms, pipelines_ms + prime_ms, (unsigned long long)s2.disk_cache_loads);
    kf_plan_destroy(p);
    kf_plan_destroy(q);
    kf_graph_destroy(g);
    kf_context_destroy(ctx);
    free(text);
    return 0;
}
