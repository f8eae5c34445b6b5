/* kf_graph_compile creates a plan's pipelines together (CreateComputePipelineAsync where the
 * implementation has it, one after another otherwise): the plans are the same either way, their
 * first run creates no pipeline, and a kernel whose pipeline cannot be made is named. */
#include "harness.h"
#include "ir/ir_internal.h"
#include "runtime/runtime.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* x through `layers` matmul + bias + GELU layers whose widths are drawn fresh (so the kernels
 * are new to the shared context's cache) and all differ: one kernel and pipeline per layer. */
static kf_graph *layers_graph(uint32_t layers, uint32_t rows, kf_shape *out_shape) {
    char text[4096];
    size_t used = 0;
    uint32_t width = 3 + (uint32_t)(kt_rand_u64() % 50);
    used += (size_t)snprintf(text + used, sizeof text - used, "x: f32[%u, %u]\n", rows, width);
    for (uint32_t i = 0; i < layers; i++) {
        uint32_t next = width + 1 + (uint32_t)(kt_rand_u64() % 7);
        char prev[16];
        snprintf(prev, sizeof prev, i ? "h%u" : "x", i);
        used += (size_t)snprintf(text + used, sizeof text - used,
                                 "w%u: f32[%u, %u]\nb%u: f32[%u]\nh%u = matmul(%s, w%u) |> "
                                 "add(b%u) |> gelu\n",
                                 i, width, next, i, next, i + 1, prev, i, i);
        width = next;
    }
    snprintf(text + used, sizeof text - used, "out h%u\n", layers);
    *out_shape = kf_shape_2d(rows, width);
    kf_graph *g = NULL;
    kf_spec_error err;
    if (kf_spec_parse(text, strlen(text), &g, &err) != KF_OK) {
        fprintf(stderr, "parse: %u:%u: %s\n", err.line, err.column, err.message);
        return NULL;
    }
    return g;
}

/* Compiles g in mode (1 together, -1 one after another), runs it on inputs drawn from seed and
 * returns the output; checks the counters on the way. */
static kf_tensor *compile_and_run(kf_context *ctx, const kf_graph *g, int mode, uint64_t seed,
                                  uint32_t layers, kf_shape shape, bool *ok) {
    *ok = false;
    bool async = kf__context_set_pipeline_async(ctx, mode);
    kf_context_stats s0, s1, s2;
    kf_context_stats_get(ctx, &s0);
    kf_plan *p = NULL;
    kf_status st = kf_graph_compile(ctx, g, NULL, &p);
    kf__context_set_pipeline_async(ctx, 0);
    if (st != KF_OK) {
        fprintf(stderr, "    compile: %s\n", kf_context_last_error(ctx));
        return NULL;
    }
    kf_context_stats_get(ctx, &s1);
    uint64_t made = s1.pipelines_compiled - s0.pipelines_compiled;
    if (made == 0) {
        fprintf(stderr, "    mode %d: every pipeline was cached: nothing was tested\n", mode);
        goto done_early;
    }
    uint64_t together = s1.pipelines_async - s0.pipelines_async;
    kf_tensor *y = NULL;
    char names[2 * 16 + 1][16];
    kf_plan_summary sum;
    kf_plan_summary_get(p, &sum);
    if (sum.dispatches != layers ||
        made + (s1.pipeline_cache_hits - s0.pipeline_cache_hits) < layers) {
        fprintf(stderr, "    %u dispatches, %llu pipelines made, %llu found\n", sum.dispatches,
                (unsigned long long)made,
                (unsigned long long)(s1.pipeline_cache_hits - s0.pipeline_cache_hits));
        goto done;
    }
    if (together != (async ? made : 0)) {
        fprintf(stderr, "    mode %d: %llu of %llu pipelines made together\n", mode,
                (unsigned long long)together, (unsigned long long)made);
        goto done;
    }
    snprintf(names[0], sizeof names[0], "x");
    for (uint32_t i = 0; i < layers; i++) {
        snprintf(names[1 + 2 * i], sizeof names[0], "w%u", i);
        snprintf(names[2 + 2 * i], sizeof names[0], "b%u", i);
    }
    for (uint32_t i = 0; i < 1 + 2 * layers; i++) {
        kf_tensor *t = NULL;
        if (kf_plan_random_input(p, names[i], seed + i, &t) != KF_OK ||
            kf_plan_set_input(p, names[i], t) != KF_OK) {
            kf_tensor_destroy(t);
            goto done;
        }
        kf_tensor_destroy(t);
    }
    if (kf_plan_run(p) != KF_OK) {
        goto done;
    }
    kf_context_stats_get(ctx, &s2);
    if (s2.pipelines_compiled != s1.pipelines_compiled ||
        s2.pipeline_cache_hits != s1.pipeline_cache_hits) {
        fprintf(stderr, "    the first run made or looked up pipelines\n");
        goto done;
    }
    char hname[16];
    snprintf(hname, sizeof hname, "h%u", layers);
    if (kf_tensor_create(&shape, &y) == KF_OK) {
        for (uint64_t i = 0; i < kf_tensor_size(y); i++) {
            y->data[i] = NAN;
        }
        *ok = kf_plan_get_output(p, hname, y) == KF_OK;
    }
done:
    kf_plan_destroy(p);
    return y;
done_early:
    kf_plan_destroy(p);
    return NULL;
}

KT_TEST(fusion, compile_creates_pipelines_together_same_plan_as_one_by_one) {
    KT_NEED_GPU(ctx);
    enum { LAYERS = 5 };
    kf_shape shape;
    kf_graph *g = layers_graph(LAYERS, 1 + (uint32_t)(kt_rand_u64() % 9), &shape);
    KT_CHECK(g, "parse");
    uint64_t seed = kt_rand_u64();
    bool ok_async = false, ok_sync = false;
    kf_tensor *ya = compile_and_run(ctx, g, 1, seed, LAYERS, shape, &ok_async);
    /* A context of its own, whose cache is empty, so the one-by-one compile makes every
     * pipeline itself. */
    kf_context *fresh = NULL;
    kf_context_desc desc = {0};
    KT_CHECK_OK(kf_context_create(&desc, &fresh));
    kf_tensor *ys = compile_and_run(fresh, g, -1, seed, LAYERS, shape, &ok_sync);
    kf_context_stats fs;
    kf_context_stats_get(fresh, &fs);
    kf_context_destroy(fresh);
    KT_CHECK(fs.pipelines_compiled >= LAYERS && fs.pipelines_async == 0,
             "the fresh context made %llu pipelines, %llu together",
             (unsigned long long)fs.pipelines_compiled, (unsigned long long)fs.pipelines_async);
    KT_CHECK(ok_async && ya, "pipelines created together: the plan failed (see above)");
    KT_CHECK(ok_sync && ys, "pipelines created one by one: the plan failed (see above)");
    /* One WGSL text makes one pipeline either way, so the numbers are equal, bit for bit. */
    for (uint64_t i = 0; i < kf_tensor_size(ya); i++) {
        KT_CHECK(!isnan(ya->data[i]), "element %llu never written", (unsigned long long)i);
        KT_CHECK(memcmp(&ya->data[i], &ys->data[i], 4) == 0, "element %llu: %g against %g",
                 (unsigned long long)i, (double)ya->data[i], (double)ys->data[i]);
    }
    kf_tensor_destroy(ya);
    kf_tensor_destroy(ys);
    kf_graph_destroy(g);
}

/* The kernel transform (mutation testing's hook) hands every kernel of a compile over: this one
 * declares the first binding of the kernels whose WGSL has `needle` read-write, so their WGSL
 * compiles but no pipeline can be made of it with the layout the plan asks for (read-only). */
static kf_kernel *rebind(void *user, const kf_kernel *k) {
    kf_kernel *copy = kf_kernel_clone(k);
    char *wgsl = copy ? kf_kernel_emit_wgsl(copy) : NULL;
    bool hit = wgsl && strstr(wgsl, user);
    kf_free(wgsl);
    if (!hit) {
        kf_kernel_destroy(copy);
        return NULL;
    }
    copy->bindings[1].kind = KF_BINDING_STORAGE_READ_WRITE; /* binding 0 of the WGSL: x */
    copy->version++;                                        /* its cached WGSL is stale */
    return copy;
}

KT_TEST(fusion, compile_names_the_kernel_whose_pipeline_fails) {
    KT_NEED_GPU(ctx);
    const char *text = "x: f32[13, 7]\n"
                       "a = relu(x)\nout a\n"
                       "b = sigmoid(x)\nout b\n"
                       "c = abs(x)\nout c\n"; /* not tanh: its kernel has exp( too */
    kf_graph *g = NULL;
    kf_spec_error err;
    KT_CHECK_OK(kf_spec_parse(text, strlen(text), &g, &err));
    for (int mode = 1; mode >= -1; mode -= 2) {
        kf_compile_options no_fuse = {.no_fuse = true};
        kf__context_set_kernel_transform(ctx, rebind, "exp("); /* sigmoid's kernel */
        kf__context_set_pipeline_async(ctx, mode);
        kf_plan *p = NULL;
        kf_status st = kf_graph_compile(ctx, g, &no_fuse, &p);
        kf__context_set_pipeline_async(ctx, 0);
        kf__context_set_kernel_transform(ctx, NULL, NULL);
        const char *msg = kf_context_last_error(ctx);
        KT_CHECK(st == KF_ERROR_COMPILE && !p, "mode %d: %s: %s", mode, kf_status_str(st), msg);
        KT_CHECK(strstr(msg, "1 of 3"), "mode %d: %s", mode, msg);
        KT_CHECK(strstr(msg, "group 1 (") && strstr(msg, "kernel 'elementwise'"),
                 "mode %d: the group and kernel are not named: %s", mode, msg);
        KT_CHECK(strstr(msg, "ReadOnlyStorage"), "mode %d: Dawn's reason is not kept: %s", mode,
                 msg);
        KT_CHECK(!strstr(msg, "group 0 (") && !strstr(msg, "group 2 ("),
                 "mode %d: a good group named: %s", mode, msg);
        kf_plan_destroy(p);
    }
    kf_graph_destroy(g);
}
