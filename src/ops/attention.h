/* What attention's two operator files share (src/ops/attention.c: the forward and
 * attention_grad_prep; src/ops/attention_grad.c: attention_grad_q / _k / _v): the parameters,
 * the shape rules, the float64 specs and the grid. The formulas are attention.c's header's. */
#ifndef KF_OPS_ATTENTION_H
#define KF_OPS_ATTENTION_H

#include "ops/ops_internal.h"

#define KF__ATTN_MAX_D 128u /* the largest head dimension */

/* The parameters of every attention operator (causal, scale), declared once. */
#define KF__ATTN_PARAM_COUNT 2
extern const kf__param kf__attn_params[KF__ATTN_PARAM_COUNT];

bool kf__attn_causal(const kf_op_params *p);
/* params.alpha, or 1/sqrt(d) when it is 0. */
double kf__attn_scale(const kf_op_params *p, uint32_t d);

/* [..., T, D] viewed as bh heads of T rows of D. */
typedef struct kf__attn_dims {
    uint32_t bh, t, d;
} kf__attn_dims;
kf__attn_dims kf__attn_dims_of(const kf_shape *q);

/* q, k, v (in[0..3)) of one shape [..., T, D], D <= 128; messages name op `name`. */
kf_status kf__attn_qkv_check(const char *name, const kf_shape *in, char *msg, size_t msg_size);
/* g's shape [..., T, D + 2] for q's. */
kf_shape kf__attn_packed_shape(const kf_shape *q);

/* The grid of attention.c's kernels: one workgroup per 16 rows of each head. */
void kf__attn_grid(const kf_shape *in, const kf_op_params *p, int32_t which, uint32_t groups[3]);

/* Row i of one head (q, k: T rows of D): P into p (T entries, 0 past the last key the row
 * sees), returning lse, in float64. */
double kf__attn_spec_row(const float *q, const float *k, kf__attn_dims a, double scale, bool causal,
                         uint32_t i, double *p);
/* The float64 backward over every head into grads[0..3) (dq, dk, dv; NULL entries skipped).
 * With g NULL: dy (q's shape) and the statistics recomputed. With g ([dy | lse | delta]):
 * own_stats true recomputes lse and delta from g's dy, false takes g's as given. */
kf_status kf__attn_spec_backward(const kf_tensor *const *in, const kf_tensor *dy,
                                 const kf_tensor *g, bool own_stats, const kf_op_params *p,
                                 kf_tensor *const *grads);

/* attention_grad_k's kernel that also stores attention_grad_v's result (same inputs and params)
 * into a binding "dv" declared after the inputs, before "out": dk and dv from one pass over the
 * scores (attention_grad_k's kernel_with_companion; src/fuse/rules/companion.c plans it). The
 * tiling fits ctx's workgroup memory (NULL: the 16 KB every device has). NULL when out of memory.
 */
kf_kernel *kf__attention_grad_kv_kernel(kf_context *ctx, const kf_shape *in, const kf_op_params *p,
                                        kf_dtype dtype);

/* The dk + dv kernel (dq_side false) or attention_grad_q's with g2 into "stats" (true; the
 * bindings q, k, v, g, stats, out) in the tiling "rr,rc,wx,wy[,layout]" ($KF_ATTN_GRAD_TILES's
 * form, without a memory limit), q, k and v read through layouts[0..2] (NULL or rank 0: row-major;
 * kf_operator.kernel_strided), for checking the tilings the benchmarks measure; NULL where the
 * text does not parse or the kernel cannot take it. */
kf_kernel *kf__attention_grad_kernel_tiled(bool dq_side, const char *tiles, const kf_shape *in,
                                           const kf_op_params *p, kf_dtype dtype,
                                           const kf__strided *layouts);

#endif
