/* kf_context_float_behaviour against what plans actually compute with subnormal numbers, and
 * plan checks with subnormal inputs passing whether the device keeps or flushes them. */
#include <math.h>
#include <string.h>

#include "harness.h"

/* Runs y = mul(a, b) elementwise on the GPU for n values. */
static bool run_mul(kf_context *ctx, const float *a, const float *b, float *y, uint32_t n) {
    kf_shape s = kf_shape_1d(n);
    kf_graph *g = kf_graph_create();
    kf_node in[2] = {kf_graph_input(g, "a", &s, KF_DTYPE_F32),
                     kf_graph_input(g, "b", &s, KF_DTYPE_F32)};
    kf_graph_output(g, "y", kf_graph_op(g, "mul", in, 2, NULL));
    kf_plan *plan = NULL;
    kf_tensor *ta = NULL, *tb = NULL, *ty = NULL;
    kf_status st = kf_graph_compile(ctx, g, NULL, &plan);
    st = st == KF_OK ? kf_tensor_create(&s, &ta) : st;
    st = st == KF_OK ? kf_tensor_create(&s, &tb) : st;
    st = st == KF_OK ? kf_tensor_create(&s, &ty) : st;
    if (st == KF_OK) {
        memcpy(ta->data, a, n * sizeof *a);
        memcpy(tb->data, b, n * sizeof *b);
        st = kf_plan_set_input(plan, "a", ta);
    }
    st = st == KF_OK ? kf_plan_set_input(plan, "b", tb) : st;
    st = st == KF_OK ? kf_plan_run(plan) : st;
    st = st == KF_OK ? kf_plan_get_output(plan, "y", ty) : st;
    if (st == KF_OK) {
        memcpy(y, ty->data, n * sizeof *y);
    } else {
        kt_fail(__FILE__, __LINE__, "mul plan: %s: %s", kf_status_str(st),
                kf_context_last_error(ctx));
    }
    kf_tensor_destroy(ta);
    kf_tensor_destroy(tb);
    kf_tensor_destroy(ty);
    kf_plan_destroy(plan);
    kf_graph_destroy(g);
    return st == KF_OK;
}

KT_TEST(ops, float_behaviour_matches_what_plans_compute) {
    KT_NEED_GPU(ctx);
    kf_float_behaviour fb;
    KT_CHECK_OK(kf_context_float_behaviour(ctx, &fb));
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    KT_CHECK(fb.f16_measured == info.has_f16, "f16 measured %d, shader-f16 %d", fb.f16_measured,
             info.has_f16);
    printf("    %s: f32 subnormal inputs %s, results %s\n", info.device,
           fb.f32_subnormal_inputs_kept ? "kept" : "flushed",
           fb.f32_subnormal_results_kept ? "kept" : "flushed");
    /* subnormal operands (random ones, not the probe's) times 1, and normals times a half that
     * lands below 2^-126 */
    enum { N = 64 };
    float a[N], b[N], y[N];
    for (uint32_t i = 0; i < N; i++) {
        bool operand = i < N / 2;
        a[i] = operand ? kt_rand_f32(1e-44f, 1e-39f) : kt_rand_f32(1.2e-38f, 2.3e-38f);
        b[i] = operand ? 1.0f : 0.5f;
    }
    KT_CHECK(run_mul(ctx, a, b, y, N), "see above");
    for (uint32_t i = 0; i < N; i++) {
        bool operand = i < N / 2;
        float exact = a[i] * b[i]; /* the CPU keeps subnormals */
        float want =
            (operand ? fb.f32_subnormal_inputs_kept : fb.f32_subnormal_results_kept) ? exact : 0.0f;
        /* a device that flushes results may round the half-way product either way */
        KT_CHECK(y[i] == want || (!operand && fb.f32_subnormal_results_kept && exact == 0.0f),
                 "%s * %g = %g; kf_context_float_behaviour says %s, which gives %g",
                 operand ? "subnormal" : "normal", (double)b[i], (double)y[i],
                 (operand ? fb.f32_subnormal_inputs_kept : fb.f32_subnormal_results_kept)
                     ? "kept"
                     : "flushed",
                 (double)want);
    }
    KT_CHECK(kf_context_float_behaviour(ctx, NULL) == KF_ERROR_INVALID_ARGUMENT &&
                 strstr(kf_context_last_error(ctx), "out"),
             "NULL out: %s", kf_context_last_error(ctx));
}

/* A check with subnormal inputs given: the CPU spec must see them as the device does, or a
 * flushing device fails y = x * 1e30 with a relative error of 1. */
KT_TEST(ops, plan_check_with_subnormal_inputs) {
    KT_NEED_GPU(ctx);
    enum { N = 37 };
    kf_shape s = kf_shape_2d(1, N);
    const char *text = "x: f32[1, 37]\nbig: f32[37]\ny = mul(x, big) |> log\nz = mul(x, big)\n";
    kf_graph *g = NULL;
    kf_spec_error err = {0};
    KT_CHECK(kf_spec_parse(text, strlen(text), &g, &err) == KF_OK, "%u:%u: %s", err.line,
             err.column, err.message);
    kf_plan *plan = NULL;
    KT_CHECK_OK(kf_graph_compile(ctx, g, NULL, &plan));
    kf_tensor *x = NULL, *big = NULL;
    kf_shape bs = kf_shape_1d(N);
    kf_tensor_create(&s, &x);
    kf_tensor_create(&bs, &big);
    KT_CHECK(x && big, "tensors");
    for (uint32_t i = 0; i < N; i++) {
        x->data[i] = kt_rand_f32(1e-44f, 1e-38f);
        big->data[i] = 1e30f;
    }
    const char *names[2] = {"x", "big"};
    const kf_tensor *vals[2] = {x, big};
    kf_plan_report rep;
    kf_status st = kf_plan_check(plan, names, vals, 2, kt_rand_u64(), &rep);
    kf_tensor_destroy(x);
    kf_tensor_destroy(big);
    kf_plan_destroy(plan);
    kf_graph_destroy(g);
    KT_CHECK(st == KF_OK && rep.passed, "check: %s: %s (y err %.3g, z err %.3g)", kf_status_str(st),
             kf_context_last_error(ctx), rep.outputs[0].max_rel_error,
             rep.outputs[1].max_rel_error);
}
