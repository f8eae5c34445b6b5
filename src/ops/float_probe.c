/* What a device does with subnormal numbers, measured rather than assumed: WebGPU lets an
 * implementation flush them (WGSL: "may be flushed to zero"), and devices differ (lavapipe keeps
 * f32 subnormals; the H200 flushes them in all f32 arithmetic, so 1 / 1e-40 is inf there). One
 * invocation multiplies values loaded from a buffer (so no compiler can fold them): a subnormal
 * by 1 (is a subnormal operand read as 0?) and the smallest normal by 0.5 (is a subnormal result
 * rounded to 0?). The answers go in bit-exact: a kept value comes back with the same bits. */
#include "ops/ops_internal.h"
#include "runtime/runtime.h"

#include <math.h>
#include <string.h>

enum { PROBE_VALUES = 2 };

static kf_kernel *probe_kernel(kf_dtype dtype) {
    kf_kernel_desc desc = {0};
    desc.name = dtype == KF_DTYPE_F16 ? "float_probe_f16" : "float_probe_f32";
    desc.workgroup_size[0] = 1;
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    kf_binding a = kf__bind(k, "a", dtype, KF_ACCESS_READ);
    kf_binding b = kf__bind(k, "b", dtype, KF_ACCESS_READ);
    kf_binding out = kf__bind(k, "out", dtype, KF_ACCESS_READ_WRITE);
    for (uint32_t i = 0; i < PROBE_VALUES; i++) {
        kf_val at = kf_lit_u32(k, i);
        kf_store(k, out, at, kf_mul(k, kf_load(k, a, at), kf_load(k, b, at)));
    }
    return k;
}

/* Runs the probe for one dtype: in_kept / out_kept as described above. */
static kf_status probe(kf_context *ctx, kf_dtype dtype, bool *in_kept, bool *out_kept) {
    /* f32: 2^-130 * 1 and 2^-126 * 0.5 = 2^-127; f16: 2^-20 * 1 and 2^-14 * 0.5 = 2^-15 */
    const uint32_t f32_in[4] = {0x00080000u, 0x00800000u, 0x3f800000u, 0x3f000000u};
    const uint32_t f32_want[2] = {0x00080000u, 0x00400000u};
    const uint16_t f16_in[4] = {0x0010u, 0x0400u, 0x3c00u, 0x3800u};
    const uint16_t f16_want[2] = {0x0010u, 0x0200u};
    size_t width = dtype == KF_DTYPE_F16 ? 2 : 4;
    unsigned char a[8] = {0}, b[8] = {0}, got[8] = {0};
    memcpy(a, dtype == KF_DTYPE_F16 ? (const void *)f16_in : (const void *)f32_in,
           PROBE_VALUES * width);
    memcpy(b, dtype == KF_DTYPE_F16 ? (const void *)(f16_in + 2) : (const void *)(f32_in + 2),
           PROBE_VALUES * width);
    kf_kernel *k = probe_kernel(dtype);
    kf_buffer *bufs[3] = {NULL, NULL, NULL};
    kf_status st = k ? KF_OK : KF_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < 3 && st == KF_OK; i++) {
        st = kf_buffer_create(ctx, sizeof a, &bufs[i]);
    }
    if (st == KF_OK) {
        st = kf_buffer_upload(bufs[0], 0, a, sizeof a);
    }
    if (st == KF_OK) {
        st = kf_buffer_upload(bufs[1], 0, b, sizeof b);
    }
    if (st == KF_OK) {
        kf_kernel_launch launch = {.buffers = bufs, .buffer_count = 3, .groups = {1, 1, 1}};
        st = kf_kernel_run(ctx, k, &launch);
        if (st != KF_OK && kf_kernel_error(k)[0]) {
            kf__context_set_error(ctx, st, "float probe: %s", kf_kernel_error(k));
        }
    }
    if (st == KF_OK) {
        st = kf_buffer_download(bufs[2], 0, got, sizeof got);
    }
    if (st == KF_OK) {
        const void *want = dtype == KF_DTYPE_F16 ? (const void *)f16_want : (const void *)f32_want;
        *in_kept = memcmp(got, want, width) == 0;
        *out_kept = memcmp(got + width, (const unsigned char *)want + width, width) == 0;
    }
    for (int i = 0; i < 3; i++) {
        kf_buffer_destroy(bufs[i]);
    }
    kf_kernel_destroy(k);
    return st;
}

kf_status kf_context_float_behaviour(kf_context *ctx, kf_float_behaviour *out) {
    if (!out) {
        if (ctx) {
            kf__context_set_error(ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "kf_context_float_behaviour: out is NULL");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    memset(out, 0, sizeof *out);
    if (!ctx) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_adapter_info info;
    kf_status st = kf_context_adapter_info(ctx, &info);
    if (st == KF_OK) {
        st = probe(ctx, KF_DTYPE_F32, &out->f32_subnormal_inputs_kept,
                   &out->f32_subnormal_results_kept);
    }
    if (st == KF_OK && info.has_f16) {
        out->f16_measured = true;
        st = probe(ctx, KF_DTYPE_F16, &out->f16_subnormal_inputs_kept,
                   &out->f16_subnormal_results_kept);
    }
    return st;
}

kf_status kf__match_device_subnormals(kf_context *ctx, kf_dtype dtype, kf_tensor *t) {
    if (dtype != KF_DTYPE_F32 && dtype != KF_DTYPE_F16) {
        return KF_OK; /* integers */
    }
    float smallest_normal = dtype == KF_DTYPE_F16 ? 0x1p-14f : 0x1p-126f;
    uint64_t n = kf_tensor_size(t);
    bool any = false;
    for (uint64_t i = 0; i < n && !any; i++) {
        any = t->data[i] != 0.0f && fabsf(t->data[i]) < smallest_normal;
    }
    if (!any) {
        return KF_OK; /* the common case: no kernel run */
    }
    kf_float_behaviour fb;
    kf_status st = kf_context_float_behaviour(ctx, &fb);
    if (st != KF_OK) {
        return st;
    }
    bool kept = dtype == KF_DTYPE_F16 ? !fb.f16_measured || fb.f16_subnormal_inputs_kept
                                      : fb.f32_subnormal_inputs_kept;
    for (uint64_t i = 0; i < n && !kept; i++) {
        if (fabsf(t->data[i]) < smallest_normal) {
            t->data[i] = copysignf(0.0f, t->data[i]);
        }
    }
    return KF_OK;
}
