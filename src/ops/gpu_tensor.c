/* GPU tensors (the seeds' GPUHandle): a device buffer with a shape and a dtype. The CPU side is
 * always f32; conversions to f16 (round to nearest, ties to even) and i32 happen on the host. */
#include "ops/ops_internal.h"
#include "runtime/runtime.h"
#include "core/half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static kf_status check_dtype(kf_context *ctx, kf_dtype dtype) {
    if (dtype == KF_DTYPE_F16) {
        kf_adapter_info info;
        kf_status st = kf_context_adapter_info(ctx, &info);
        if (st != KF_OK) {
            return st;
        }
        if (!info.has_f16) {
            kf__context_set_error(ctx, KF_ERROR_UNSUPPORTED,
                                  "gpu tensor: f16 needs shader-f16, which this device (%s) lacks; "
                                  "use f32",
                                  info.device);
            return KF_ERROR_UNSUPPORTED;
        }
    } else if (dtype != KF_DTYPE_F32 && dtype != KF_DTYPE_I32) {
        kf__context_set_error(ctx, KF_ERROR_INVALID_ARGUMENT, "gpu tensor: unknown dtype %d",
                              (int)dtype);
        return KF_ERROR_INVALID_ARGUMENT;
    }
    return KF_OK;
}

kf_status kf_gpu_tensor_create(kf_context *ctx, const kf_shape *shape, kf_dtype dtype,
                               kf_gpu_tensor **out) {
    if (out) {
        *out = NULL;
    }
    if (!out || !ctx || !shape) {
        kf__context_set_error(ctx, KF_ERROR_INVALID_ARGUMENT, "kf_gpu_tensor_create: %s is NULL",
                              !out ? "out" : "shape");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (!kf__shape_valid(shape)) {
        char b[64];
        kf__context_set_error(ctx, KF_ERROR_SHAPE,
                              "gpu tensor: invalid shape %s (rank <= 4, every dim >= 1, fewer "
                              "than 2^32 elements)",
                              kf_shape_str(shape, b, sizeof b));
        return KF_ERROR_SHAPE;
    }
    kf_status st = check_dtype(ctx, dtype);
    if (st != KF_OK) {
        return st;
    }
    kf_gpu_tensor *g = calloc(1, sizeof *g);
    if (!g) {
        kf__context_set_error(ctx, KF_ERROR_OUT_OF_MEMORY, "gpu tensor: out of host memory");
        return KF_ERROR_OUT_OF_MEMORY;
    }
    g->ctx = ctx;
    g->shape = *shape;
    g->dtype = dtype;
    /* WebGPU zero-initializes new buffers, which gives the documented zeros */
    st = kf_buffer_create(ctx, kf_shape_elements(shape) * kf_dtype_size(dtype), &g->buffer);
    if (st != KF_OK) {
        free(g);
        return st;
    }
    *out = g;
    return KF_OK;
}

kf_status kf_gpu_tensor_from(kf_context *ctx, const kf_tensor *t, kf_dtype dtype,
                             kf_gpu_tensor **out) {
    if (!out || !t) {
        if (out) {
            *out = NULL;
        }
        kf__context_set_error(ctx, KF_ERROR_INVALID_ARGUMENT, "kf_gpu_tensor_from: %s is NULL",
                              out ? "t" : "out");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    *out = NULL;
    uint64_t n = kf_tensor_size(t);
    const void *bytes = t->data;
    void *converted = NULL;
    if (dtype == KF_DTYPE_F16) {
        uint16_t *h = malloc((size_t)n * sizeof *h);
        if (!h) {
            return KF_ERROR_OUT_OF_MEMORY;
        }
        for (uint64_t i = 0; i < n; i++) {
            h[i] = kf__half_from_float(t->data[i]);
        }
        bytes = converted = h;
    } else if (dtype == KF_DTYPE_I32) {
        int32_t *v = malloc((size_t)n * sizeof *v);
        if (!v) {
            return KF_ERROR_OUT_OF_MEMORY;
        }
        for (uint64_t i = 0; i < n; i++) {
            float f = t->data[i];
            /* indices must be exact integers; anything else is the caller's mistake */
            if (!(f == floorf(f)) || f < -2147483648.0f || f >= 2147483648.0f) {
                free(v);
                kf__context_set_error(ctx, KF_ERROR_INVALID_ARGUMENT,
                                      "gpu tensor: element %llu is %g, not an integer index",
                                      (unsigned long long)i, (double)f);
                return KF_ERROR_INVALID_ARGUMENT;
            }
            v[i] = (int32_t)f;
        }
        bytes = converted = v;
    }
    kf_gpu_tensor *g = NULL;
    kf_status st = kf_gpu_tensor_create(ctx, &t->shape, dtype, &g);
    if (st == KF_OK) {
        st = kf_buffer_upload(g->buffer, 0, bytes, n * kf_dtype_size(dtype));
    }
    free(converted);
    if (st != KF_OK) {
        kf_gpu_tensor_destroy(g);
        return st;
    }
    *out = g;
    return KF_OK;
}

kf_status kf_gpu_tensor_to(const kf_gpu_tensor *g, kf_tensor *t) {
    if (!g || !t) {
        if (g) {
            kf__context_set_error(g->ctx, KF_ERROR_INVALID_ARGUMENT, "kf_gpu_tensor_to: t is NULL");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (!kf_shape_eq(&g->shape, &t->shape)) {
        char a[64], b[64];
        kf__context_set_error(
            g->ctx, KF_ERROR_SHAPE, "gpu tensor: cannot download %s into a CPU tensor of %s",
            kf_shape_str(&g->shape, a, sizeof a), kf_shape_str(&t->shape, b, sizeof b));
        return KF_ERROR_SHAPE;
    }
    uint64_t n = kf_tensor_size(t);
    if (g->dtype == KF_DTYPE_F32) {
        return kf_buffer_download(g->buffer, 0, t->data, n * sizeof(float));
    }
    void *tmp = malloc((size_t)n * kf_dtype_size(g->dtype) + 4);
    if (!tmp) {
        kf__context_set_error(g->ctx, KF_ERROR_OUT_OF_MEMORY, "gpu tensor: out of host memory");
        return KF_ERROR_OUT_OF_MEMORY;
    }
    kf_status st = kf_buffer_download(g->buffer, 0, tmp, n * kf_dtype_size(g->dtype));
    if (st == KF_OK) {
        for (uint64_t i = 0; i < n; i++) {
            t->data[i] = g->dtype == KF_DTYPE_F16 ? kf__half_to_float(((const uint16_t *)tmp)[i])
                                                  : (float)((const int32_t *)tmp)[i];
        }
    }
    free(tmp);
    return st;
}

void kf_gpu_tensor_destroy(kf_gpu_tensor *g) {
    if (g) {
        kf_buffer_destroy(g->buffer);
        free(g);
    }
}
