/* Optimizers on the GPU against their CPU specs: SGD (plain, momentum, Nesterov, weight decay)
 * and AdamW over parameters of mixed and edge sizes, several steps each; one dispatch for a
 * model's parameters, more only past the binding limit; the spec against a hand computation;
 * refusals. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void check_verify(kf_context *ctx, const kf_optimizer_desc *d, const kf_shape *shapes,
                         uint32_t count, const char *what) {
    kf_verify_result r;
    kf_status st = kf_optimizer_verify(ctx, d, shapes, count, 4, kt_rand_u64(), &r);
    KT_CHECK(st == KF_OK && r.passed, "%s: %s (%s)", what, kf_status_str(st), r.message);
    KT_CHECK(r.max_rel_error <= r.tolerance, "%s: %g", what, r.max_rel_error);
}

KT_TEST(ops, optimizer_sgd_and_adamw_match_their_specs) {
    KT_NEED_GPU(ctx);
    /* a model's parameters: a matrix, a bias row, primes, a single element (scalar path) */
    kf_shape mixed[5] = {kf_shape_2d(64, 128), kf_shape_1d(128), kf_shape_2d(7, 13), kf_shape_1d(1),
                         kf_shape_1d(10)};
    /* every size a multiple of 4 (the vec4 path) */
    kf_shape quads[3] = {kf_shape_2d(32, 12), kf_shape_1d(4), kf_shape_2d(3, 100)};
    kf_optimizer_desc cases[] = {
        {.kind = KF_OPTIMIZER_SGD, .lr = 0.1f},
        {.kind = KF_OPTIMIZER_SGD, .lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-2f},
        {.kind = KF_OPTIMIZER_SGD, .lr = 0.05f, .momentum = 0.8f, .nesterov = true},
        {.kind = KF_OPTIMIZER_ADAMW, .lr = 1e-2f},
        {.kind = KF_OPTIMIZER_ADAMW,
         .lr = 3e-3f,
         .weight_decay = 0.1f,
         .beta1 = 0.8f,
         .beta2 = 0.99f,
         .eps = 1e-6f},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char what[64];
        snprintf(what, sizeof what, "case %zu mixed", c);
        check_verify(ctx, &cases[c], mixed, 5, what);
        snprintf(what, sizeof what, "case %zu vec4", c);
        check_verify(ctx, &cases[c], quads, 3, what);
    }
}

/* The spec against the rules written out by hand for one element (torch's formulas). */
KT_CPU_TEST(ops, optimizer_spec_matches_the_formulas) {
    kf_shape s = kf_shape_1d(1);
    kf_tensor *p, *g, *m, *v;
    KT_CHECK_OK(kf_tensor_constant(&s, 0.5f, &p));
    KT_CHECK_OK(kf_tensor_constant(&s, -0.25f, &g));
    KT_CHECK_OK(kf_tensor_constant(&s, 0.0f, &m));
    KT_CHECK_OK(kf_tensor_constant(&s, 0.0f, &v));
    kf_optimizer_desc adamw = {.kind = KF_OPTIMIZER_ADAMW, .lr = 0.01f, .weight_decay = 0.1f};
    KT_CHECK_OK(kf_optimizer_spec_step(&adamw, 1, p, g, m, v));
    KT_CHECK_OK(kf_optimizer_spec_step(&adamw, 2, p, g, m, v));
    /* by hand in double */
    double hp = 0.5, hm = 0, hv = 0, gg = -0.25, lr = 0.01f, wd = 0.1f;
    for (int t = 1; t <= 2; t++) {
        hp *= 1 - lr * wd;
        hm = 0.9f * hm + (1 - 0.9f) * gg;
        hv = 0.999f * hv + (1 - (double)0.999f) * gg * gg;
        double bc1 = 1 - pow(0.9f, t), bc2 = 1 - pow(0.999f, t);
        hp -= lr / bc1 * hm / (sqrt(hv) / sqrt(bc2) + 1e-8f);
    }
    KT_CHECK(fabs(p->data[0] - hp) < 1e-7, "adamw p %.9g, by hand %.9g", (double)p->data[0], hp);
    KT_CHECK(fabs(m->data[0] - hm) < 1e-8 && fabs(v->data[0] - hv) < 1e-9, "adamw m, v");
    kf_optimizer_desc sgd = {.kind = KF_OPTIMIZER_SGD, .lr = 0.1f, .momentum = 0.5f};
    p->data[0] = 1.0f;
    m->data[0] = 0.0f;
    KT_CHECK_OK(kf_optimizer_spec_step(&sgd, 1, p, g, m, NULL));
    KT_CHECK_OK(kf_optimizer_spec_step(&sgd, 2, p, g, m, NULL));
    /* buf = -0.25, then -0.375; p = 1 + 0.025 + 0.0375 */
    KT_CHECK(fabs(p->data[0] - 1.0625) < 1e-7 && fabs(m->data[0] + 0.375) < 1e-7, "sgd %.9g",
             (double)p->data[0]);
    kf_tensor_destroy(p);
    kf_tensor_destroy(g);
    kf_tensor_destroy(m);
    kf_tensor_destroy(v);
}

/* One dispatch for a model; past the storage-buffer limit, as few as the limit allows, and the
 * split update still matches the spec. */
KT_TEST(ops, optimizer_one_dispatch_split_only_at_the_binding_limit) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    uint32_t limit = info.max_storage_buffers_per_stage;
    uint32_t per = (limit - 1) / 2 < 64 ? (limit - 1) / 2 : 64; /* 2 per parameter, 1 state */
    uint32_t count = per + 3 <= 64 ? per + 3 : 64;
    kf_shape shapes[64];
    kf_gpu_tensor *p[64] = {0}, *g[64] = {0};
    for (uint32_t i = 0; i < count; i++) {
        shapes[i] = kf_shape_1d(1 + i * 7);
        KT_CHECK_OK(kf_gpu_tensor_create(ctx, &shapes[i], KF_DTYPE_F32, &p[i]));
        KT_CHECK_OK(kf_gpu_tensor_create(ctx, &shapes[i], KF_DTYPE_F32, &g[i]));
    }
    kf_optimizer_desc d = {.kind = KF_OPTIMIZER_ADAMW, .lr = 1e-3f};
    kf_optimizer *o = NULL;
    KT_CHECK_OK(kf_optimizer_create(ctx, &d, p, g, 4, &o));
    KT_CHECK(kf_optimizer_dispatch_count(o) == 1, "4 parameters: %u dispatches",
             kf_optimizer_dispatch_count(o));
    kf_context_stats before, after;
    kf_context_stats_get(ctx, &before);
    KT_CHECK_OK(kf_optimizer_step(o));
    kf_context_stats_get(ctx, &after);
    KT_CHECK(after.dispatches - before.dispatches == 1 &&
                 after.submissions - before.submissions == 1,
             "a step: %llu dispatches", (unsigned long long)(after.dispatches - before.dispatches));
    KT_CHECK(after.upload_bytes == before.upload_bytes &&
                 after.download_bytes == before.download_bytes,
             "a step moved bytes");
    kf_optimizer_destroy(o);
    o = NULL;
    if (count > per) {
        KT_CHECK_OK(kf_optimizer_create(ctx, &d, p, g, count, &o));
        uint32_t want = (count + per - 1) / per;
        KT_CHECK(kf_optimizer_dispatch_count(o) == want, "%u parameters, limit %u: %u dispatches",
                 count, limit, kf_optimizer_dispatch_count(o));
        kf_optimizer_destroy(o);
        check_verify(ctx, &d, shapes, count, "split");
    }
    for (uint32_t i = 0; i < count; i++) {
        kf_gpu_tensor_destroy(p[i]);
        kf_gpu_tensor_destroy(g[i]);
    }
}

KT_TEST(ops, optimizer_refusals) {
    KT_NEED_GPU(ctx);
    kf_shape a = kf_shape_2d(3, 5), b = kf_shape_2d(5, 3);
    kf_gpu_tensor *p = NULL, *g = NULL, *h = NULL, *i32 = NULL;
    KT_CHECK_OK(kf_gpu_tensor_create(ctx, &a, KF_DTYPE_F32, &p));
    KT_CHECK_OK(kf_gpu_tensor_create(ctx, &a, KF_DTYPE_F32, &g));
    KT_CHECK_OK(kf_gpu_tensor_create(ctx, &b, KF_DTYPE_F32, &h));
    KT_CHECK_OK(kf_gpu_tensor_create(ctx, &a, KF_DTYPE_I32, &i32));
    kf_optimizer *o = NULL;
    kf_optimizer_desc ok = {.kind = KF_OPTIMIZER_SGD, .lr = 0.1f};
    kf_optimizer_desc bad_lr = {.kind = KF_OPTIMIZER_SGD, .lr = -1.0f};
    kf_optimizer_desc bad_beta = {.kind = KF_OPTIMIZER_ADAMW, .beta1 = 1.0f};
    kf_optimizer_desc bad_nesterov = {.kind = KF_OPTIMIZER_SGD, .nesterov = true};
    KT_CHECK(kf_optimizer_create(ctx, &bad_lr, &p, &g, 1, &o) == KF_ERROR_INVALID_ARGUMENT && !o,
             "lr < 0");
    KT_CHECK(strstr(kf_context_last_error(ctx), "lr"), "%s", kf_context_last_error(ctx));
    KT_CHECK(kf_optimizer_create(ctx, &bad_beta, &p, &g, 1, &o) == KF_ERROR_INVALID_ARGUMENT,
             "beta1 = 1");
    KT_CHECK(kf_optimizer_create(ctx, &bad_nesterov, &p, &g, 1, &o) == KF_ERROR_INVALID_ARGUMENT,
             "nesterov without momentum");
    KT_CHECK(kf_optimizer_create(ctx, &ok, &p, &h, 1, &o) == KF_ERROR_INVALID_ARGUMENT,
             "shape mismatch");
    KT_CHECK(strstr(kf_context_last_error(ctx), "3x5"), "%s", kf_context_last_error(ctx));
    KT_CHECK(kf_optimizer_create(ctx, &ok, &p, &p, 1, &o) == KF_ERROR_INVALID_ARGUMENT,
             "gradient is the parameter");
    KT_CHECK(kf_optimizer_create(ctx, &ok, &i32, &g, 1, &o) == KF_ERROR_TYPE, "i32 parameter");
    kf_gpu_tensor *twice[2] = {p, p}, *grads[2] = {g, h};
    KT_CHECK(kf_optimizer_create(ctx, &ok, twice, grads, 2, &o) == KF_ERROR_INVALID_ARGUMENT,
             "a parameter twice");
    /* the optimizer keeps its tensors alive: destroying them first is safe */
    KT_CHECK_OK(kf_optimizer_create(ctx, &ok, &p, &g, 1, &o));
    kf_gpu_tensor_destroy(p);
    kf_gpu_tensor_destroy(g);
    KT_CHECK_OK(kf_optimizer_step(o));
    KT_CHECK(kf_optimizer_steps(o) == 1, "steps");
    kf_tensor *state = NULL;
    KT_CHECK_OK(kf_tensor_create(&a, &state));
    KT_CHECK(kf_optimizer_state_get(o, 0, 0, state) == KF_ERROR_INVALID_ARGUMENT,
             "plain SGD keeps no state");
    kf_tensor_destroy(state);
    kf_optimizer_destroy(o);
    kf_gpu_tensor_destroy(h);
    kf_gpu_tensor_destroy(i32);
}
