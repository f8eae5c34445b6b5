/* Pipelines created together (kf__pipeline_get_many, which kf_graph_compile uses): every
 * pipeline not cached is requested with CreateComputePipelineAsync and then waited for, or made
 * one after another where the implementation lacks it; the pipelines are the same either way,
 * and a failing one is reported by its label, the others still made. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "runtime/runtime.h"

#define POISON 0x7fc00000u

static const kf_binding_kind in_out[2] = {KF_BINDING_STORAGE_READ, KF_BINDING_STORAGE_READ_WRITE};

/* y[i] = x[i] * a + b, with a and b literals: each (a, b) is another WGSL text, so another
 * pipeline, whatever other tests cached. */
static char *affine_text(float a, float b) {
    char *s = malloc(512);
    snprintf(s, 512,
             "@group(0) @binding(0) var<storage, read> x: array<f32>;\n"
             "@group(0) @binding(1) var<storage, read_write> y: array<f32>;\n"
             "@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) id: "
             "vec3<u32>) {\n"
             "    if (id.x < arrayLength(&y)) { y[id.x] = x[id.x] * %.9g + %.9g; }\n"
             "}\n",
             (double)a, (double)b);
    return s;
}

/* Runs p on n fresh values and checks every element against x * a + b. */
static void check_affine(kf_context *ctx, kf_pipeline *p, float a, float b, uint32_t n) {
    float *x = malloc((size_t)n * 4);
    uint32_t *y = malloc((size_t)n * 4);
    for (uint32_t i = 0; i < n; i++) {
        x[i] = kt_rand_f32(-3.0f, 3.0f);
    }
    kf_buffer *bx = NULL, *by = NULL;
    KT_CHECK_OK(kf_buffer_create(ctx, (uint64_t)n * 4, &bx));
    KT_CHECK_OK(kf_buffer_create(ctx, (uint64_t)n * 4, &by));
    KT_CHECK_OK(kf_buffer_upload(bx, 0, x, (uint64_t)n * 4));
    KT_CHECK_OK(kf_buffer_fill_u32(by, POISON));
    kf_buffer *io[2] = {bx, by};
    kf_dispatch d = {p, io, 2, {(n + 63) / 64, 1, 1}};
    KT_CHECK_OK(kf_context_run(ctx, &d, 1));
    KT_CHECK_OK(kf_buffer_download(by, 0, y, (uint64_t)n * 4));
    for (uint32_t i = 0; i < n; i++) {
        float got;
        memcpy(&got, &y[i], 4);
        double want = (double)x[i] * (double)a + (double)b;
        KT_CHECK(fabs((double)got - want) <= 1e-5 * fmax(1.0, fabs(want)), "y[%u] = %g, not %g%s",
                 i, (double)got, want, isnan(got) ? " (never written)" : "");
    }
    kf_buffer_destroy(bx);
    kf_buffer_destroy(by);
    free(x);
    free(y);
}

/* Gets `count` new pipelines at once in mode (1 async, -1 one after another) and checks what
 * the counters say and that each computes its own function. */
static void many_in_mode(kf_context *ctx, int mode) {
    enum { COUNT = 6 };
    bool async = kf__context_set_pipeline_async(ctx, mode);
    bool lacks = !ctx->api.device_create_compute_pipeline_async;
    KT_CHECK(mode < 0 || lacks ? !async : async,
             "mode %d: the pinned Dawn has CreateComputePipelineAsync", mode);
    float a[COUNT], b[COUNT];
    char *text[COUNT];
    kf_pipeline_desc descs[COUNT + 1];
    const char *labels[COUNT + 1];
    for (uint32_t i = 0; i < COUNT; i++) {
        a[i] = kt_rand_f32(0.5f, 2.0f);
        b[i] = kt_rand_f32(-1.0f, 1.0f);
        text[i] = affine_text(a[i], b[i]);
        descs[i] = (kf_pipeline_desc){.wgsl = text[i], .bindings = in_out, .binding_count = 2};
        labels[i] = "affine";
    }
    descs[COUNT] = descs[1]; /* the same pipeline asked for twice in one batch */
    labels[COUNT] = "affine again";
    kf_context_stats s0, s1;
    KT_CHECK_OK(kf_context_stats_get(ctx, &s0));
    kf_pipeline *out[COUNT + 1];
    kf_status st = kf__pipeline_get_many(ctx, descs, labels, COUNT + 1, out);
    KT_CHECK(st == KF_OK, "mode %d: %s: %s", mode, kf_status_str(st), kf_context_last_error(ctx));
    KT_CHECK_OK(kf_context_stats_get(ctx, &s1));
    KT_CHECK(s1.pipelines_compiled - s0.pipelines_compiled == COUNT, "mode %d: %llu created", mode,
             (unsigned long long)(s1.pipelines_compiled - s0.pipelines_compiled));
    KT_CHECK(s1.pipelines_async - s0.pipelines_async == (async ? COUNT : 0),
             "mode %d: %llu created in parallel", mode,
             (unsigned long long)(s1.pipelines_async - s0.pipelines_async));
    KT_CHECK(s1.pipeline_cache_hits - s0.pipeline_cache_hits == 1, "the repeat was not shared");
    KT_CHECK(out[COUNT] == out[1], "one descriptor twice gave two pipelines");
    for (uint32_t i = 0; i < COUNT; i++) {
        KT_CHECK(out[i], "pipeline %u missing", i);
        check_affine(ctx, out[i], a[i], b[i], 67 + 64 * i);
    }
    /* Asked again, every one is found cached, one by one or together. */
    kf_pipeline *again = NULL;
    KT_CHECK_OK(kf_pipeline_get(ctx, &descs[3], &again));
    KT_CHECK(again == out[3], "kf_pipeline_get did not find the batch's pipeline");
    for (uint32_t i = 0; i < COUNT; i++) {
        free(text[i]);
    }
}

KT_TEST(unit, pipelines_created_together_async_and_one_by_one) {
    KT_NEED_GPU(ctx);
    many_in_mode(ctx, 1);
    many_in_mode(ctx, -1);
    /* An implementation without the call: asked for async, they are made one by one. */
    void *saved;
    memcpy(&saved, &ctx->api.device_create_compute_pipeline_async, sizeof saved);
    ctx->api.device_create_compute_pipeline_async = NULL;
    many_in_mode(ctx, 1);
    memcpy(&ctx->api.device_create_compute_pipeline_async, &saved, sizeof saved);
    /* KF_PIPELINE_ASYNC=off in the environment does the same for mode 0 */
    const char *old = getenv("KF_PIPELINE_ASYNC");
    char *kept = old ? strdup(old) : NULL;
    setenv("KF_PIPELINE_ASYNC", "off", 1);
    bool async = kf__context_set_pipeline_async(ctx, 0);
    KT_CHECK(!async, "KF_PIPELINE_ASYNC=off left pipelines async");
    if (kept) {
        setenv("KF_PIPELINE_ASYNC", kept, 1);
        free(kept);
    } else {
        unsetenv("KF_PIPELINE_ASYNC");
    }
    kf__context_set_pipeline_async(ctx, 0);
}

/* A batch with a WGSL error, a missing entry point and a workgroup too large for the device:
 * each failure named by its label, with the compiler's or the validation's words, the good
 * pipelines between them made and returned. */
static void failures_in_mode(kf_context *ctx, int mode) {
    kf__context_set_pipeline_async(ctx, mode);
    float a0 = kt_rand_f32(0.5f, 2.0f), b0 = kt_rand_f32(-1.0f, 1.0f);
    float a1 = kt_rand_f32(0.5f, 2.0f), b1 = kt_rand_f32(-1.0f, 1.0f);
    char *good0 = affine_text(a0, b0), *good1 = affine_text(a1, b1);
    static const char *bad_wgsl = "@group(0) @binding(0) var<storage, read> x: array<f32>;\n"
                                  "@group(0) @binding(1) var<storage, read_write> y: array<f32>;\n"
                                  "@compute @workgroup_size(1) fn main() {\n"
                                  "    y[0] = x[0] + not_declared;\n"
                                  "}\n";
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    char too_wide[512];
    snprintf(too_wide, sizeof too_wide,
             "@group(0) @binding(0) var<storage, read> x: array<f32>;\n"
             "@group(0) @binding(1) var<storage, read_write> y: array<f32>;\n"
             "@compute @workgroup_size(%u) fn main() { y[0] = x[0]; }\n",
             info.max_compute_invocations_per_workgroup * 2);
    kf_pipeline_desc descs[5] = {
        {.wgsl = good0, .bindings = in_out, .binding_count = 2},
        {.wgsl = bad_wgsl, .bindings = in_out, .binding_count = 2},
        {.wgsl = good1, .entry_point = "not_an_entry", .bindings = in_out, .binding_count = 2},
        {.wgsl = too_wide, .bindings = in_out, .binding_count = 2},
        {.wgsl = good1, .bindings = in_out, .binding_count = 2},
    };
    const char *labels[5] = {"kernel 'first_good'", "kernel 'undeclared_name'",
                             "kernel 'missing_entry'", "kernel 'too_wide'", "kernel 'last_good'"};
    kf_pipeline *out[5];
    kf_status st = kf__pipeline_get_many(ctx, descs, labels, 5, out);
    const char *msg = kf_context_last_error(ctx);
    KT_CHECK(st == KF_ERROR_COMPILE, "mode %d: status %s", mode, kf_status_str(st));
    KT_CHECK(out[0] && out[4] && !out[1] && !out[2] && !out[3], "mode %d: which were made", mode);
    KT_CHECK(strstr(msg, "3 of 5"), "mode %d: %s", mode, msg);
    KT_CHECK(strstr(msg, "undeclared_name") && strstr(msg, "not_declared"), "mode %d: %s", mode,
             msg);
    KT_CHECK(strstr(msg, "missing_entry") && strstr(msg, "not_an_entry"), "mode %d: %s", mode, msg);
    KT_CHECK(strstr(msg, "too_wide"), "mode %d: %s", mode, msg);
    KT_CHECK(!strstr(msg, "first_good") && !strstr(msg, "last_good"), "mode %d: %s", mode, msg);
    check_affine(ctx, out[0], a0, b0, 100);
    check_affine(ctx, out[4], a1, b1, 100);
    /* A pipeline that fails alone, where the implementation reports it (the async callback's
     * validation status, or the error scope one by one), is a compile error too. */
    st = kf__pipeline_get_many(ctx, &descs[2], &labels[2], 1, out);
    KT_CHECK(st == KF_ERROR_COMPILE && !out[0], "mode %d: missing entry alone: %s", mode,
             kf_status_str(st));
    KT_CHECK(strstr(kf_context_last_error(ctx), "'missing_entry'") &&
                 strstr(kf_context_last_error(ctx), "not_an_entry"),
             "mode %d: %s", mode, kf_context_last_error(ctx));
    free(good0);
    free(good1);
}

KT_TEST(unit, pipelines_created_together_report_each_failure) {
    KT_NEED_GPU(ctx);
    failures_in_mode(ctx, 1);
    failures_in_mode(ctx, -1);
    kf__context_set_pipeline_async(ctx, 0);
}
