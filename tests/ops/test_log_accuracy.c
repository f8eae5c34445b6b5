/* log's kernel against the float64 spec (C's log in double, which numpy.log matches) where WGSL's
 * log is weak: every decade from 1e-45 (subnormals) to 1e38, and next to 1, with a relative
 * tolerance of a few ulp. Also the edges: 0, -0, inf, negatives and NaN. Run both by the GPU
 * and by the CPU interpreter of the same kernel. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* 4 ulp of f32 at the result (fdlibm's logf is within 1 ulp; the rest is headroom for a compiler
 * that contracts into fused multiply-adds). */
#define LOG_REL_TOL (4.0 * 0x1p-24)

static uint32_t fill_inputs(float *x, uint32_t cap) {
    uint32_t n = 0;
    /* decades, and random points between them, from the smallest subnormal up */
    for (double e = -45.0; e <= 38.0 && n < cap; e += 0.25) {
        float v = (float)pow(10.0, e + kt_rand_f32(0.0f, 0.25f));
        if (v > 0.0f && isfinite(v)) {
            x[n++] = v;
        }
    }
    const float edges[] = {
        0x1p-149f, 0x1p-148f,        0x1.8p-140f,     0x1p-127f, 0x1.fffffcp-127f,
        0x1p-126f, 0x1.000002p-126f, 0x1.fffffep127f, 1.0f,      2.0f,
        0.5f,      1.41421354f,      0.70710677f,     1e-40f,    1e30f};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0] && n < cap; i++) {
        x[n++] = edges[i];
    }
    /* next to 1, on both sides: a few ulp away, then up to 1e-3 away */
    for (int i = 1; i <= 64 && n + 2 <= cap; i++) {
        x[n++] = 1.0f + (float)i * 0x1p-23f;
        x[n++] = 1.0f - (float)i * 0x1p-24f;
    }
    while (n < cap) {
        x[n++] = 1.0f + kt_rand_f32(-1e-3f, 1e-3f);
    }
    return n;
}

static bool check_against_spec(const char *who, const float *x, const float *y, uint32_t n) {
    double worst = 0.0;
    uint32_t worst_at = 0;
    for (uint32_t i = 0; i < n; i++) {
        double want = log((double)x[i]);
        double err = fabs((double)y[i] - want);
        double rel = want != 0.0 ? err / fabs(want) : err;
        if (!(rel <= worst)) {
            worst = rel;
            worst_at = i;
        }
    }
    if (!(worst <= LOG_REL_TOL)) {
        kt_fail(__FILE__, __LINE__,
                "%s: log(%.9g) = %.9g, float64 says %.17g: relative error %.3g > %.3g", who,
                (double)x[worst_at], (double)y[worst_at], log((double)x[worst_at]), worst,
                LOG_REL_TOL);
        return false;
    }
    printf("    %s: %u inputs in [1.4e-45, 3.4e38] and near 1, worst relative error %.3g\n", who, n,
           worst);
    return true;
}

KT_TEST(ops, log_is_accurate_near_1_and_for_subnormals) {
    KT_NEED_GPU(ctx);
    enum { N = 1000 };
    kf_shape s = kf_shape_1d(N);
    kf_tensor *in = NULL, *out = NULL;
    KT_CHECK_OK(kf_tensor_create(&s, &in));
    KT_CHECK_OK(kf_tensor_create(&s, &out));
    uint32_t n = fill_inputs(in->data, N);
    KT_CHECK(n == N, "inputs: %u", n);

    kf_graph *g = kf_graph_create();
    kf_node xn = kf_graph_input(g, "x", &s, KF_DTYPE_F32);
    kf_graph_output(g, "y", kf_graph_unary(g, "log", xn));
    kf_plan *plan = NULL;
    kf_status st = kf_graph_compile(ctx, g, NULL, &plan);
    for (uint32_t i = 0; i < N; i++) {
        out->data[i] = NAN;
    }
    if (st == KF_OK) {
        st = kf_plan_set_input(plan, "x", in);
    }
    if (st == KF_OK) {
        st = kf_plan_run(plan);
    }
    if (st == KF_OK) {
        st = kf_plan_get_output(plan, "y", out);
    }
    bool gpu_ok = st == KF_OK && check_against_spec("gpu", in->data, out->data, N);
    kf_plan_destroy(plan);
    kf_graph_destroy(g);

    /* the same kernel in the CPU interpreter */
    const kf_operator *op = kf_op_find("log");
    kf_op_params params = {0};
    kf_kernel *k = op ? kf_op_kernel_forward(op, &s, &params, KF_DTYPE_F32) : NULL;
    kf_tensor *cpu = NULL;
    kf_tensor_create(&s, &cpu);
    bool cpu_ok = false;
    if (k && cpu) {
        kf_host_buffer bufs[2] = {{in->data, N * 4}, {cpu->data, N * 4}};
        kf_interp_desc d = {.buffers = bufs, .buffer_count = 2, .elements = N};
        kf_kernel_grid(k, d.groups);
        kf_status ist = kf_kernel_interpret(k, &d);
        cpu_ok = ist == KF_OK && check_against_spec("interpreter", in->data, cpu->data, N);
        if (ist != KF_OK) {
            kt_fail(__FILE__, __LINE__, "interpreter: %s: %s", kf_status_str(ist),
                    kf_kernel_error(k));
        }
    }
    kf_kernel_destroy(k);
    kf_tensor_destroy(cpu);
    kf_tensor_destroy(in);
    kf_tensor_destroy(out);
    KT_CHECK(st == KF_OK, "plan: %s: %s", kf_status_str(st), kf_context_last_error(ctx));
    KT_CHECK(gpu_ok && cpu_ok, "see above");
}

KT_TEST(ops, log_edges) {
    KT_NEED_GPU(ctx);
    const float x[] = {0.0f, -0.0f, INFINITY, -1.0f, -INFINITY, NAN, -0x1p-149f, 1.0f};
    enum { N = sizeof x / sizeof x[0] };
    kf_shape s = kf_shape_1d(N);
    kf_tensor *in = NULL, *out = NULL;
    KT_CHECK_OK(kf_tensor_create(&s, &in));
    KT_CHECK_OK(kf_tensor_create(&s, &out));
    memcpy(in->data, x, sizeof x);
    kf_graph *g = kf_graph_create();
    kf_graph_output(g, "y", kf_graph_unary(g, "log", kf_graph_input(g, "x", &s, KF_DTYPE_F32)));
    kf_plan *plan = NULL;
    kf_status st = kf_graph_compile(ctx, g, NULL, &plan);
    st = st == KF_OK ? kf_plan_set_input(plan, "x", in) : st;
    st = st == KF_OK ? kf_plan_run(plan) : st;
    st = st == KF_OK ? kf_plan_get_output(plan, "y", out) : st;
    kf_plan_destroy(plan);
    kf_graph_destroy(g);
    float y[N];
    memcpy(y, out->data, sizeof y);
    kf_tensor_destroy(in);
    kf_tensor_destroy(out);
    KT_CHECK(st == KF_OK, "%s: %s", kf_status_str(st), kf_context_last_error(ctx));
    KT_CHECK(isinf(y[0]) && y[0] < 0 && isinf(y[1]) && y[1] < 0, "log(+-0) = %g, %g", (double)y[0],
             (double)y[1]);
    KT_CHECK(isinf(y[2]) && y[2] > 0, "log(inf) = %g", (double)y[2]);
    KT_CHECK(isnan(y[3]) && isnan(y[4]) && isnan(y[5]) && isnan(y[6]),
             "log(-1), log(-inf), log(NaN), log(-denormal) = %g %g %g %g", (double)y[3],
             (double)y[4], (double)y[5], (double)y[6]);
    KT_CHECK(y[7] == 0.0f, "log(1) = %g", (double)y[7]);
}
