/* Objects that outlive their context (include/kfuse.h, "Lifetimes"): kf_context_destroy releases
 * the device and every WebGPU object made from it; buffers, GPU tensors and plans still held
 * then fail their calls with KF_ERROR_DEVICE_LOST, and their destroy calls are safe in any
 * order. Run under the asan-ubsan preset, these find any read of freed memory, and
 * LeakSanitizer any context that is never freed. Each test makes its own context. */
#include <math.h>
#include <string.h>

#include "harness.h"

static kf_context *own_context(void) {
    kf_context *ctx = NULL;
    char err[1024] = "";
    kf_context_desc desc = {0};
    desc.error_out = err;
    desc.error_out_size = sizeof err;
    if (kf_context_create(&desc, &ctx) != KF_OK) {
        fprintf(stderr, "    no context: %s\n", err);
        return NULL;
    }
    return ctx;
}

#define KT_OWN_CONTEXT(ctx)                                                                        \
    kf_context *ctx = own_context();                                                               \
    KT_CHECK(ctx != NULL, "no WebGPU adapter: run scripts/setup.sh")

static const char *const copy_wgsl =
    "@group(0) @binding(0) var<storage, read> src: array<u32>;\n"
    "@group(0) @binding(1) var<storage, read_write> dst: array<u32>;\n"
    "@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) id: vec3<u32>) {\n"
    "    if (id.x < arrayLength(&dst)) { dst[id.x] = src[id.x] + 1u; }\n"
    "}\n";

KT_TEST(unit, lifetime_buffers_outlive_their_context) {
    KT_OWN_CONTEXT(ctx);
    kf_buffer *a = NULL, *b = NULL, *c = NULL;
    KT_CHECK_OK(kf_buffer_create(ctx, 64, &a));
    KT_CHECK_OK(kf_buffer_create(ctx, 13, &b));
    KT_CHECK_OK(kf_buffer_create(ctx, 4, &c));
    uint32_t words[16];
    for (int i = 0; i < 16; i++) {
        words[i] = (uint32_t)kt_rand_u64();
    }
    KT_CHECK_OK(kf_buffer_upload(a, 0, words, sizeof words));
    kf_buffer_destroy(b); /* one before, two after */
    kf_context_destroy(ctx);
    uint32_t back[16] = {0};
    KT_CHECK(kf_buffer_download(a, 0, back, sizeof back) == KF_ERROR_DEVICE_LOST,
             "download after kf_context_destroy");
    KT_CHECK(kf_buffer_upload(a, 4, words, 8) == KF_ERROR_DEVICE_LOST,
             "upload after kf_context_destroy");
    KT_CHECK(kf_buffer_upload(a, 1, words, 2) == KF_ERROR_DEVICE_LOST,
             "unaligned upload after kf_context_destroy");
    KT_CHECK(kf_buffer_fill_u32(c, 0) == KF_ERROR_DEVICE_LOST, "fill after kf_context_destroy");
    KT_CHECK(kf_buffer_size(a) == 64, "the size is still known");
    kf_buffer_destroy(c);
    kf_buffer_destroy(a); /* the last holder: frees what is left of the context */
}

KT_TEST(unit, lifetime_gpu_tensors_outlive_their_context) {
    KT_OWN_CONTEXT(ctx);
    kf_shape shape = kf_shape_2d(3, 7);
    kf_tensor *t = NULL;
    KT_CHECK_OK(kf_tensor_create(&shape, &t));
    for (uint64_t i = 0; i < kf_tensor_size(t); i++) {
        t->data[i] = kt_rand_f32(-2, 2);
    }
    kf_gpu_tensor *g = NULL, *h = NULL;
    KT_CHECK_OK(kf_gpu_tensor_from(ctx, t, KF_DTYPE_F32, &g));
    KT_CHECK_OK(kf_gpu_tensor_create(ctx, &shape, KF_DTYPE_I32, &h));
    kf_tensor *back = NULL;
    KT_CHECK_OK(kf_tensor_create(&shape, &back));
    KT_CHECK_OK(kf_gpu_tensor_to(g, back));
    KT_CHECK(!memcmp(back->data, t->data, kf_tensor_size(t) * sizeof(float)), "round trip");
    kf_context_destroy(ctx);
    KT_CHECK(kf_gpu_tensor_to(g, back) == KF_ERROR_DEVICE_LOST, "f32 download after destroy");
    KT_CHECK(kf_gpu_tensor_to(h, back) == KF_ERROR_DEVICE_LOST, "i32 download after destroy");
    kf_gpu_tensor_destroy(h);
    kf_gpu_tensor_destroy(g);
    kf_tensor_destroy(back);
    kf_tensor_destroy(t);
}

static kf_graph *small_graph(void) {
    kf_graph *g = kf_graph_create();
    kf_shape xs = kf_shape_2d(5, 33), bs = kf_shape_1d(33);
    kf_node x = kf_graph_input(g, "x", &xs, KF_DTYPE_F32);
    kf_node b = kf_graph_input(g, "b", &bs, KF_DTYPE_F32);
    kf_node in[2] = {x, b};
    kf_node y = kf_graph_unary(g, "softmax", kf_graph_op(g, "add", in, 2, NULL));
    kf_graph_output(g, "y", y);
    return g;
}

KT_TEST(unit, lifetime_plans_outlive_their_context) {
    for (int order = 0; order < 2; order++) {
        KT_OWN_CONTEXT(ctx);
        kf_graph *g = small_graph();
        kf_plan *p = NULL, *q = NULL;
        KT_CHECK_OK(kf_graph_compile(ctx, g, NULL, &p));
        KT_CHECK_OK(kf_graph_compile(ctx, g, NULL, &q));
        kf_plan_report report;
        KT_CHECK_OK(kf_plan_verify(p, kt_rand_u64(), &report));
        kf_tensor *x = NULL, *y = NULL;
        KT_CHECK_OK(kf_plan_random_input(p, "x", kt_rand_u64(), &x));
        kf_shape ys = kf_shape_2d(5, 33);
        KT_CHECK_OK(kf_tensor_create(&ys, &y));
        kf_buffer *extra = NULL;
        KT_CHECK_OK(kf_buffer_create(ctx, 100, &extra));
        kf_context_destroy(ctx);
        KT_CHECK(kf_plan_set_input(p, "x", x) == KF_ERROR_DEVICE_LOST, "set_input after destroy");
        KT_CHECK(kf_plan_run(p) == KF_ERROR_DEVICE_LOST, "run after destroy");
        KT_CHECK(kf_plan_get_output(p, "y", y) == KF_ERROR_DEVICE_LOST, "get_output after destroy");
        KT_CHECK(kf_plan_verify(q, kt_rand_u64(), &report) == KF_ERROR_DEVICE_LOST,
                 "verify after destroy");
        kf_timing timing;
        KT_CHECK(kf_plan_time(p, 1, &timing) == KF_ERROR_DEVICE_LOST, "time after destroy");
        char *text = kf_plan_explain(p, false); /* host-side: still fine */
        KT_CHECK(text != NULL, "explain after destroy");
        kf_free(text);
        if (order == 0) {
            kf_plan_destroy(p);
            kf_buffer_destroy(extra);
            kf_plan_destroy(q);
        } else {
            kf_buffer_destroy(extra);
            kf_plan_destroy(q);
            kf_plan_destroy(p);
        }
        kf_tensor_destroy(x);
        kf_tensor_destroy(y);
        kf_graph_destroy(g);
    }
}

/* Pipelines belong to their context and are released with it; one used with another context is
 * refused, also after its own context was destroyed (while anything of it lives). */
KT_TEST(unit, lifetime_pipelines_die_with_their_context) {
    KT_OWN_CONTEXT(a);
    KT_OWN_CONTEXT(b);
    kf_binding_kind kinds[2] = {KF_BINDING_STORAGE_READ, KF_BINDING_STORAGE_READ_WRITE};
    kf_pipeline_desc pd = {0};
    pd.wgsl = copy_wgsl;
    pd.bindings = kinds;
    pd.binding_count = 2;
    kf_pipeline *pa = NULL, *pb = NULL;
    KT_CHECK_OK(kf_pipeline_get(a, &pd, &pa));
    KT_CHECK_OK(kf_pipeline_get(b, &pd, &pb));
    kf_buffer *abuf[2] = {NULL, NULL}, *bbuf[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        KT_CHECK_OK(kf_buffer_create(a, 256, &abuf[i]));
        KT_CHECK_OK(kf_buffer_create(b, 256, &bbuf[i]));
    }
    uint32_t words[64], back[64];
    for (int i = 0; i < 64; i++) {
        words[i] = (uint32_t)kt_rand_u64() >> 1;
    }
    KT_CHECK_OK(kf_buffer_upload(bbuf[0], 0, words, sizeof words));
    KT_CHECK_OK(kf_buffer_fill_u32(bbuf[1], 0x7fc00000u));
    kf_context_destroy(a);
    kf_dispatch d = {pa, bbuf, 2, {1, 1, 1}};
    KT_CHECK(kf_context_run(b, &d, 1) == KF_ERROR_INVALID_ARGUMENT,
             "a destroyed context's pipeline on another context");
    kf_dispatch da = {pb, abuf, 2, {1, 1, 1}};
    KT_CHECK(kf_context_run(b, &da, 1) == KF_ERROR_INVALID_ARGUMENT,
             "a destroyed context's buffers on another context");
    kf_dispatch ok = {pb, bbuf, 2, {1, 1, 1}};
    KT_CHECK_OK(kf_context_run(b, &ok, 1));
    KT_CHECK_OK(kf_buffer_download(bbuf[1], 0, back, sizeof back));
    for (int i = 0; i < 64; i++) {
        KT_CHECK(back[i] == words[i] + 1, "element %d: %u, expected %u", i, back[i], words[i] + 1);
    }
    for (int i = 0; i < 2; i++) {
        kf_buffer_destroy(abuf[i]);
        kf_buffer_destroy(bbuf[i]);
    }
    kf_context_destroy(b);
}

/* Destroying everything first (the ordinary order) still frees everything at
 * kf_context_destroy. */
KT_TEST(unit, lifetime_ordinary_order_still_works) {
    KT_OWN_CONTEXT(ctx);
    kf_buffer *buf = NULL;
    KT_CHECK_OK(kf_buffer_create(ctx, 8, &buf));
    kf_graph *g = small_graph();
    kf_plan *p = NULL;
    KT_CHECK_OK(kf_graph_compile(ctx, g, NULL, &p));
    kf_plan_destroy(p);
    kf_buffer_destroy(buf);
    kf_graph_destroy(g);
    kf_context_destroy(ctx);
    kf_context_destroy(NULL);
}
