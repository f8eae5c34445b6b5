/* Float literals at the edges of their types reach the GPU exactly: infinities and NaN (WGSL has
 * no such constants: the emitter writes a bitcast of a runtime value, since Tint rejects a
 * constant bitcast to one), the largest finite values (whose shortest round-trip decimal,
 * 3.4028235e38, is above FLT_MAX and rejected by Tint), and the smallest normal and subnormal
 * ones. Each kernel is y = select(x, L, x == x): the literal L, stored. (Not -0.0: WGSL lets an
 * implementation drop a zero's sign, and lavapipe does.) */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "ir_testing.h"

typedef struct literal {
    float value;
    bool half;
} literal;

static kf_val literal_fn(kf_kernel *k, kf_val x, void *user) {
    const literal *l = user;
    kf_val lit = l->half ? kf_lit_f16(k, l->value) : kf_lit_f32(k, l->value);
    return kf_select(k, x, lit, kf_binary(k, KF_OP_EQ, x, x));
}

static bool same_value(float got, float want) {
    return isnan(want) ? isnan(got) : memcmp(&got, &want, sizeof got) == 0;
}

KT_TEST(unit, edge_float_literals_compile_and_arrive_exactly) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    const float f32_values[] = {INFINITY, -INFINITY, NAN,       FLT_MAX,
                                -FLT_MAX, FLT_MIN,   0x1p-149f, 1.0f / 3.0f};
    const float f16_values[] = {INFINITY, -INFINITY, NAN, 65504.0f, -65504.0f, 0x1p-14f, 0x1p-24f};
    const uint32_t n = 64;
    for (uint32_t half = 0; half < 2; half++) {
        if (half && !info.has_f16) {
            printf("    no shader-f16 on this adapter: f16 literals not run\n");
            break;
        }
        const float *values = half ? f16_values : f32_values;
        uint32_t count = half ? (uint32_t)(sizeof f16_values / sizeof *f16_values)
                              : (uint32_t)(sizeof f32_values / sizeof *f32_values);
        kf_type t = kf_type_scalar(half ? KF_SCALAR_F16 : KF_SCALAR_F32);
        size_t size = half ? 2 : 4;
        for (uint32_t i = 0; i < count; i++) {
            float v = values[i];
            literal lit = {v, half != 0};
            kf_kernel *k = kf_kernel_map("literal", t, t, NULL, literal_fn, &lit);
            KT_CHECK(k != NULL, "building the kernel of %g", (double)v);
            char *x = malloc(n * size), *y = malloc(n * size);
            for (uint32_t j = 0; j < n; j++) {
                float xv = kt_rand_f32(-2.0f, 2.0f);
                if (half) {
                    uint16_t h = kf__half_from_float(xv);
                    memcpy(x + j * size, &h, size);
                } else {
                    memcpy(x + j * size, &xv, size);
                }
            }
            kt_fill_poison(y, n * size);
            kf_host_buffer b[2] = {{x, n * size}, {y, n * size}};
            kt_launch l = {.elements = n};
            bool ok = k && kt_ir_gpu(ctx, k, b, 2, &l);
            KT_CHECK(ok, "%s literal %g: the kernel did not run (does its WGSL compile?)",
                     half ? "f16" : "f32", (double)v);
            for (uint32_t j = 0; ok && j < n; j++) {
                float got;
                if (half) {
                    uint16_t h;
                    memcpy(&h, y + j * size, size);
                    got = kf__half_to_float(h);
                } else {
                    memcpy(&got, y + j * size, size);
                }
                /* the f32 subnormal may be flushed to zero by the device (the H200 does) */
                bool flushed = !half && fpclassify(v) == FP_SUBNORMAL && got == 0.0f;
                ok = same_value(got, v) || flushed;
                KT_CHECK(ok, "%s literal %.9g came back as %.9g", half ? "f16" : "f32", (double)v,
                         (double)got);
            }
            free(x);
            free(y);
            kf_kernel_destroy(k);
        }
    }
}
