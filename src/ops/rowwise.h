/* Row kernels: the skeleton every reduction over the last axis shares (reduce.c, norm.c, loss.c).
 *
 * A tensor is viewed as rows x cols (cols = the last dim). A workgroup of (threads, rows_per_group)
 * invocations handles rows_per_group rows; the `threads` lanes of a row walk it with a stride of
 * `threads`, each keeping a partial result in a register, and a tree in workgroup memory combines
 * the partials. Short rows get few lanes and many rows per workgroup, long rows 256 lanes and one
 * row, so neither a 1-wide nor a 4096-wide row wastes the workgroup.
 *
 * Barriers must sit in uniform control flow, so the skeleton never branches on the row: lanes of
 * a row past the end (the last workgroup's spare rows) clamp their row to the last one, compute
 * alongside everyone else, and only `valid` lanes may yield or store.
 *
 * Also here: the float64 helpers the specs share, and the NaN-aware max both sides agree on.
 */
#ifndef KF_OPS_ROWWISE_H
#define KF_OPS_ROWWISE_H

#include "ops/ops_internal.h"

#define KF__ROWS_MAX_THREADS 256u
#define KF__ROWS_MAX_SCRATCH 4u

typedef struct kf__rows {
    kf_kernel *k;
    kf_dtype dtype;
    uint64_t rows;
    uint32_t cols;
    uint32_t threads;        /* lanes per row: a power of two, at most 256 */
    uint32_t rows_per_group; /* threads * rows_per_group <= 256 */
    kf_val lane;             /* u32: this invocation's lane in its row */
    kf_val row;              /* u32: the row, clamped to rows - 1 so every load is in bounds */
    kf_val valid;            /* bool: the row exists; only valid lanes yield or store */
    kf_val base;             /* u32: row * cols, the row's first element */
    kf_val slot;             /* u32: the row's first slot in the scratch arrays */
    kf_val mine;             /* u32: slot + lane, this lane's slot */
    uint32_t reductions;     /* names the results: reduced0, reduced1, ... */
    kf_shared scratch_f32[KF__ROWS_MAX_SCRATCH];
    kf_shared scratch_u32[KF__ROWS_MAX_SCRATCH];
    uint32_t scratch_f32_count, scratch_u32_count;
} kf__rows;

/* Lanes per row and rows per workgroup for rows of `cols` elements. */
void kf__rows_layout(uint32_t cols, uint32_t *threads, uint32_t *rows_per_group);
/* The grid of a row kernel over x viewed as rows x cols. */
void kf__rows_grid(const kf_shape *x, uint32_t groups[3]);

/* Creates the kernel (a producer yielding the dtype when `producer`, else output void), sets its
 * grid and fills r. Bindings are the caller's to declare, in the op's order. NULL only when out
 * of memory. */
kf_kernel *kf__rows_begin(kf__rows *r, const char *name, const kf_shape *x, kf_dtype dtype,
                          bool producer);
/* Opens `for (var name = lane; name < cols; name += threads)`; close it with kf_end. */
kf_val kf__rows_for(kf__rows *r, const char *name);

/* Combines tuples a and b of n values into out (element-wise ops only: no barriers). */
typedef void (*kf__combine_fn)(kf_kernel *k, const kf_val *a, const kf_val *b, uint32_t n,
                               kf_val *out);
/* Tree-reduces each lane's tuple of n partials (f32 or u32 each, n <= 4 of either) over the
 * row's lanes; out receives the row's result, the same in every lane. Must be called from the
 * kernel's top level (it contains barriers), and ends with a barrier so calls can follow. */
void kf__rows_reduce(kf__rows *r, uint32_t n, const kf_val *partials, kf__combine_fn combine,
                     kf_val *out);
/* The row's sum / NaN-propagating max of each lane's f32 partial. */
kf_val kf__rows_sum(kf__rows *r, kf_val partial);
kf_val kf__rows_max(kf__rows *r, kf_val partial);

/* isnan(x) for an f32 value, by its bits: WGSL lets compilers assume NaN never occurs, so a
 * `x != x` test may be folded away; an integer test may not. */
kf_val kf__isnan(kf_kernel *k, kf_val x);
/* The NaN-propagating max: NaN when either is NaN, else the larger (the spec's rule). */
kf_val kf__max_nan(kf_kernel *k, kf_val a, kf_val b);
/* A quiet NaN computed at run time from `anchor` (any u32 value the shader computes), so no
 * compiler can reject it as a constant NaN. */
kf_val kf__nan(kf_kernel *k, kf_val anchor);

/* --- float64 helpers of the specs --- */

/* The NaN-propagating max of the spec, in float64. */
double kf__spec_max(double a, double b);
/* Checks that out has the shape the op's shape rule gives for the inputs (KF_ERROR_SHAPE). */
kf_status kf__spec_check_out(const kf_operator *op, const kf_tensor *const *in,
                             const kf_op_params *p, const kf_tensor *out);

#endif
