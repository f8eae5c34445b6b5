/* kfuse's erf (WGSL has none): its max abs error against libm's erf, measured on a dense grid in
 * the interpreter's f32 evaluation and on the GPU, must stay within what docs/builder.md states.
 * The vector and f16 helpers must agree with the scalar one. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir_internal.h"
#include "ir_testing.h"
#include "core/half.h"

/* The bounds docs/builder.md and include/kfuse.h state. */
#define ERF_MAX_ABS_ERROR_CPU 2.5e-7
#define ERF_MAX_ABS_ERROR_GPU 5e-7 /* the GPU's exp and division are not correctly rounded */

KT_CPU_TEST(unit, erf_error_on_the_cpu) {
    double worst = 0, at = 0;
    /* [-10, 10] in steps of 2^-17: 2.6 million points, every float near 0 region included */
    for (int64_t i = -10 * 131072; i <= 10 * 131072; i++) {
        float x = (float)i / 131072.0f;
        double e = fabs((double)kf__erf_f32(x) - erf((double)x));
        if (e > worst) {
            worst = e;
            at = x;
        }
    }
    printf("    erf (f32, CPU): max abs error %.3g at x = %.6f\n", worst, at);
    KT_CHECK(worst <= ERF_MAX_ABS_ERROR_CPU, "max abs error %.3g at %g exceeds %.3g", worst, at,
             ERF_MAX_ABS_ERROR_CPU);
    KT_CHECK(kf__erf_f32(0.0f) == 0.0f, "erf(0) = %g", (double)kf__erf_f32(0.0f));
    KT_CHECK(kf__erf_f32(20.0f) == 1.0f && kf__erf_f32(-20.0f) == -1.0f, "erf(+-20)");
    for (int i = 0; i < 1000; i++) {
        float x = kt_rand_f32(-5.0f, 5.0f);
        KT_CHECK(kf__erf_f32(-x) == -kf__erf_f32(x), "erf is odd at %g", (double)x);
    }
}

static kf_val erf_fn(kf_kernel *k, kf_val x, void *user) {
    (void)user;
    return kf_call1(k, KF_FN_ERF, x);
}

KT_TEST(unit, erf_error_on_the_gpu) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    const uint32_t n = 1u << 20;
    float *x = malloc(n * 4), *y = malloc(n * 4), *cpu = malloc(n * 4);
    for (uint32_t i = 0; i < n; i++) {
        x[i] = -8.0f + 16.0f * (float)i / (float)n;
    }
    kf_kernel *k = kf_kernel_map("erf", kf_type_scalar(KF_SCALAR_F32),
                                 kf_type_scalar(KF_SCALAR_F32), NULL, erf_fn, NULL);
    kt_fill_poison(y, n * 4);
    kt_fill_poison(cpu, n * 4);
    kf_host_buffer gb[2] = {{x, n * 4}, {y, n * 4}}, cb[2] = {{x, n * 4}, {cpu, n * 4}};
    kt_launch l = {.elements = n};
    bool ok = kt_ir_gpu(ctx, k, gb, 2, &l) && kt_ir_interp(k, cb, 2, &l);
    double worst = 0, at = 0;
    for (uint32_t i = 0; ok && i < n; i++) {
        double e = fabs((double)y[i] - erf((double)x[i]));
        if (!(e <= worst)) {
            worst = e;
            at = x[i];
        }
        ok = cpu[i] == kf__erf_f32(x[i]);
        KT_CHECK(ok, "interpreter erf(%g) = %.9g, kf__erf_f32 gives %.9g", (double)x[i],
                 (double)cpu[i], (double)kf__erf_f32(x[i]));
    }
    printf("    erf (f32, GPU: %s): max abs error %.3g at x = %.6f\n", info.device, worst, at);
    KT_CHECK(!ok || worst <= ERF_MAX_ABS_ERROR_GPU, "max abs error %.3g at %g exceeds %.3g", worst,
             at, ERF_MAX_ABS_ERROR_GPU);
    kf_kernel_destroy(k);

    /* vec4<f32> and f16 helpers against the scalar f32 one */
    if (ok) {
        kf_type v4 = kf_type_vec(KF_SCALAR_F32, 4);
        kf_kernel *kv = kf_kernel_map("erf4", v4, v4, NULL, erf_fn, NULL);
        uint32_t m = 4096;
        float *yv = malloc(m * 4);
        kt_fill_poison(yv, m * 4);
        kf_host_buffer vb[2] = {{x + n / 2 - m / 2, m * 4}, {yv, m * 4}};
        kt_launch lv = {.elements = m / 4};
        ok = kt_ir_gpu(ctx, kv, vb, 2, &lv) &&
             kt_close_f32(yv, y + n / 2 - m / 2, m, 1e-6, 1.0, "vec4 erf vs scalar erf (GPU)");
        free(yv);
        kf_kernel_destroy(kv);
    }
    if (ok && info.has_f16) {
        kf_type h = kf_type_scalar(KF_SCALAR_F16);
        kf_kernel *kh = kf_kernel_map("erf_f16", h, h, NULL, erf_fn, NULL);
        uint32_t m = 4096;
        uint16_t *xh = malloc(m * 2), *yh = malloc(m * 2), *ch = malloc(m * 2);
        for (uint32_t i = 0; i < m; i++) {
            xh[i] = kf__half_from_float(-4.0f + 8.0f * (float)i / (float)m);
        }
        kt_fill_poison(yh, m * 2);
        kt_fill_poison(ch, m * 2);
        kf_host_buffer hb[2] = {{xh, m * 2}, {yh, m * 2}}, hc[2] = {{xh, m * 2}, {ch, m * 2}};
        kt_launch lh = {.elements = m};
        ok = kt_ir_gpu(ctx, kh, hb, 2, &lh) && kt_ir_interp(kh, hc, 2, &lh);
        /* the f16 helper rounds the f32 result once: within one f16 step of libm */
        for (uint32_t i = 0; ok && i < m; i++) {
            double xv = kf__half_to_float(xh[i]);
            double g = kf__half_to_float(yh[i]), c = kf__half_to_float(ch[i]);
            ok = fabs(g - erf(xv)) <= 1e-3 && fabs(g - c) <= 1e-3;
            KT_CHECK(ok, "f16 erf(%g): GPU %g, interpreter %g, libm %g", xv, g, c, erf(xv));
        }
        free(xh);
        free(yh);
        free(ch);
        kf_kernel_destroy(kh);
    }
    free(x);
    free(y);
    free(cpu);
    KT_CHECK(ok, "erf");
}
