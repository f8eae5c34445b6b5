/* rmsnorm folded into the matmul that reads it (src/fuse/rules/rmsnorm_matmul.c):
 *
 *   rmsnorm(x, g) w = diag(r) (x diag(g) w),   r_i = 1 / sqrt(mean_k x_ik^2 + eps)
 *
 * so the product runs on the raw x. Every invocation of the tiled and the register-blocked
 * kernels walks the whole K range of its rows through the a tiles it multiplies anyway, so it
 * sums their squares on the way (no bytes): the tiled kernel from workgroup memory beside the
 * dot products, the register-blocked one as it stages a's vec4s into workgroup memory (its
 * partial sums added per row after the loop, one barrier). It scales its results by r_i in the
 * store phase, before the epilogue. The gain g scales b's rows as they are staged (K * N values
 * per row of workgroups), which keeps a's tiles raw for the squares. The subgroup-matrix kernel
 * loads a straight into subgroup matrices, where no invocation sees a row: it has no such variant.
 */
#ifndef KF_OPS_MATMUL_ROWNORM_H
#define KF_OPS_MATMUL_ROWNORM_H

#include "kfuse.h"

typedef struct kf__mm_rownorm {
    float eps;     /* under the root, as rmsnorm's eps */
    bool has_gain; /* a binding "gain" of K elements, right after b */
} kf__mm_rownorm;

/* Whether the product matmul(rmsnorm(x), b) (in: x's shape, b's; p: the matmul's params) has a
 * kernel with the norm folded in on ctx, and whether that is worth it: a not transposed, b one
 * matrix (a batch folds into the rows), f32 or f16, and not an f16 product the matmul itself
 * runs on subgroup matrices (tensor cores are worth more than the normed tensor's bytes). */
bool kf__matmul_rownorm_fits(kf_context *ctx, const kf_shape *in, const kf_op_params *p,
                             kf_dtype dtype);
/* That kernel, chosen as the matmul chooses its own (the register-blocked kernel, on the tile
 * kf_matmul_tune measured where it did, for f32 products of 64x64 outputs and up and plain f16;
 * the tiled one otherwise): bindings a (x), b, [gain], then the store phase (every element
 * yielded, already scaled by r). NULL where kf__matmul_rownorm_fits is false or out of memory. */
kf_kernel *kf__matmul_rownorm_kernel(kf_context *ctx, const kf_shape *in, const kf_op_params *p,
                                     kf_dtype dtype, const kf__mm_rownorm *rn);

#endif
