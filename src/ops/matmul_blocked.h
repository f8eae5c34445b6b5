/* The register-blocked f32 matmul kernel generator and its tile configurations. */
#ifndef KF_OPS_MATMUL_BLOCKED_H
#define KF_OPS_MATMUL_BLOCKED_H

#include "kfuse.h"

/* A tile configuration: the workgroup computes bm x bn of c walking K bk at a time, each
 * invocation tm x tn (workgroup size (bn/tn, bm/tm)). tm, tn are 4, 8 or 16 (tm * tn <= 128);
 * bk a multiple of 4.
 * stages 2 double-buffers the workgroup tiles (one barrier per step, twice the workgroup
 * memory: 2 * 4 * bk * (bm + bn) bytes); 0 or 1 keeps one (two barriers per step). */
typedef struct kf__mm_config {
    uint32_t bm, bn, bk, tm, tn;
    uint32_t stages;
} kf__mm_config;

/* The configuration used when none is given: the 128x128 tile for large products, 32x32 below
 * (enough workgroups to fill a large GPU). */
const kf__mm_config *kf__mm_default_config(uint32_t m, uint32_t k, uint32_t n);

/* c[m,n] = a[m,k] * b[k,n] (bindings a, b, then out), every element yielded to the store phase;
 * the grid is recorded on the kernel. NULL for an invalid configuration or zero sizes. */
kf_kernel *kf__matmul_blocked(uint32_t m, uint32_t k, uint32_t n, const kf__mm_config *cfg);
/* The same for f16 storage (inputs and output f16, loads widened, accumulation in f32); the
 * kernel needs the device's shader-f16. NULL for other dtypes. */
kf_kernel *kf__matmul_blocked_typed(uint32_t m, uint32_t k, uint32_t n, const kf__mm_config *cfg,
                                    kf_dtype dtype);
/* Whether kf__matmul_blocked accepts the configuration. */
bool kf__matmul_blocked_valid(const kf__mm_config *cfg);
/* The tile tuned for this shape class on ctx's adapter (kf_matmul_tune, this process or the
 * cache file), or NULL when none was. */
const kf__mm_config *kf__matmul_config_for(kf_context *ctx, uint32_t m, uint32_t k, uint32_t n);

#endif
