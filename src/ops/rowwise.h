/* Row kernels: the skeleton every reduction over the last axis shares (reduce.c, norm.c, loss.c).
 *
 * A tensor is viewed as rows x cols (cols = the last dim). A workgroup of (threads, rows_per_group)
 * invocations handles rows_per_group rows; the `threads` lanes of a row walk it with a stride of
 * `threads`, each keeping a partial result in a register, and workgroup memory combines the
 * partials (kf__rows_reduce: two or three barriers). Short rows get few lanes and many rows per
 * workgroup, long rows 256 lanes and one row, so neither a 1-wide nor a 4096-wide row wastes the
 * workgroup.
 *
 * Kernels that need the row more than once (softmax, the norms' forward) hold it in registers
 * instead of walking it again (kf__rows_begin_regs): each lane loads its units (vec4 where
 * cols % 4 == 0, lane l taking units l, l + threads, ... so neighbouring lanes read neighbouring
 * memory) once, computes its partials from the registers, and yields from them: x is read from
 * memory once. Rows past the register budget (8192 elements as vec4, 4096 as scalars) fall back
 * to the loops. Without subgroups (kernels are built without a device) the lanes meet in
 * workgroup memory.
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
/* Scratch arrays of one type a kernel's reductions may take in all (each takes its own). */
#define KF__ROWS_MAX_SCRATCH_ARRAYS 8u
/* Registers a lane may hold its share of a row in (kf__rows_begin_regs): up to 8 vec4 chunks
 * (rows of up to 256 * 32 = 8192 elements, cols % 4 == 0) or 16 scalar chunks (up to 4096). */
#define KF__ROWS_MAX_VEC_CHUNKS 8u
#define KF__ROWS_MAX_SCALAR_CHUNKS 16u
#define KF__ROWS_MAX_CHUNKS KF__ROWS_MAX_SCALAR_CHUNKS

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
    /* Register kernels (kf__rows_begin_regs) see the row as `units` units of `width` elements
     * (vec4 when 4), lane l holding units l, l + threads, ... in `chunks` registers; chunks 0:
     * the row is too long for registers and is walked with kf__rows_for (width 1). */
    uint32_t width, units, chunks;
    kf_val base_units;   /* u32: row * units, the row's first unit in a width-wide binding */
    uint32_t reductions; /* names the results: reduced0, reduced1, ... */
    kf_shared scratch_f32[KF__ROWS_MAX_SCRATCH_ARRAYS];
    kf_shared scratch_u32[KF__ROWS_MAX_SCRATCH_ARRAYS];
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

/* --- rows read once, into registers --- */

/* The register layout for rows of `cols` elements: width 4 where cols % 4 == 0, else 1; lanes
 * and rows per workgroup as kf__rows_layout gives them for cols / width units; chunks = units per
 * lane, 0 when that exceeds the register budget (the kernel then walks the row in loops, laid out
 * as kf__rows_layout(cols) says, width 1). Depends on cols only, so grids need no dtype. */
void kf__rows_regs_layout(uint32_t cols, uint32_t *width, uint32_t *chunks, uint32_t *threads,
                          uint32_t *rows_per_group);
/* The grid of a kernel begun with kf__rows_begin_regs. */
void kf__rows_regs_grid(const kf_shape *x, uint32_t groups[3]);
/* kf__rows_begin with the register layout: r->chunks > 0 means the caller holds the row in
 * registers (kf__rows_load), else it uses kf__rows_for loops exactly as after kf__rows_begin. */
kf_kernel *kf__rows_begin_regs(kf__rows *r, const char *name, const kf_shape *x, kf_dtype dtype,
                               bool producer);
/* A read-only binding of the dtype, of width-wide vectors when r->width is 4 (a row-shaped
 * input, or a [cols] weight). */
kf_binding kf__rows_bind(kf__rows *r, const char *name);
/* Chunk c's unit index within the row (u32): lane + c * threads. */
kf_val kf__rows_unit(kf__rows *r, uint32_t c);
/* Whether chunk c of this lane lies inside the row (bool); the invalid handle {0, 0} when it
 * always does (every chunk but a ragged last one). */
kf_val kf__rows_unit_inside(kf__rows *r, uint32_t c);
/* b[first + unit] widened to f32 (vec4<f32> at width 4), the unit clamped into the row so the
 * load stays in bounds and reads a real element of it (a duplicate where the chunk is outside:
 * mask it with kf__rows_unit_inside where that matters). */
kf_val kf__rows_load_unit(kf__rows *r, kf_binding b, kf_val first, uint32_t c);
/* Declares regs[0..chunks) and loads this lane's chunks of the row from x (a kf__rows_bind
 * binding): each element of the row is read from memory once, with the widest loads allowed. */
void kf__rows_load(kf__rows *r, kf_binding x, kf_var *regs);
/* Sum of the lanes of v (a scalar is itself), pairwise. */
kf_val kf__rows_hsum(kf_kernel *k, kf_val v);
/* Lane j of v, or v itself when it is a scalar (j 0). */
kf_val kf__rows_lane(kf_kernel *k, kf_val v, uint32_t j);
/* Yields each element of chunk c's value y (f32, or vec4<f32> at width 4) at its index in the
 * output, narrowed to the dtype: the store phase, one kf_kernel_yield per element. The caller
 * guards it with r->valid and, for a ragged chunk, kf__rows_unit_inside. */
void kf__rows_yield(kf__rows *r, kf_val y, uint32_t c);
/* Yields every chunk's value (ys[c], computed by every lane, valid or not, outside any if: this
 * may place a barrier), only valid lanes and chunks inside the row yielding. Width 4 (unless
 * $KF_ROWS_EXCHANGE=0): the vec4s go through workgroup memory first and each lane yields
 * neighbouring lanes' elements one after another, so the tail's scalar stores (and its loads
 * of a weight) are contiguous across lanes instead of 16 bytes apart (on the H200 rmsnorm * w 0.128
 * -> 0.076 ms at 4096 x 8192). */
void kf__rows_yield_all(kf__rows *r, const kf_val *ys);

/* Combines tuples a and b of n values into out (element-wise ops only: no barriers). */
typedef void (*kf__combine_fn)(kf_kernel *k, const kf_val *a, const kf_val *b, uint32_t n,
                               kf_val *out);
/* Reduces each lane's tuple of n partials (f32 or u32 each, n <= 4 of either) over the row's
 * lanes; out receives the row's result, the same in every lane. Must be called from the kernel's
 * top level (it contains barriers). Two barriers whatever the width: the partials go to
 * workgroup memory, 16 lanes each combine a strided group of them, then every lane combines
 * those 16 itself; each group is combined pairwise (a tree in registers), so sums round as a
 * tree over all lanes would. combine must be commutative and associative up to rounding.
 * Each call takes scratch arrays of its own, never written again, so no read of one reduction
 * can race with the next one's writes: Mesa's GLSL compiler moves a workgroup-memory read whose
 * value is used only after a barrier() past that barrier (Dawn's GLES path; the Vulkan path
 * keeps it), which made layernorm's mean read the variance's partials (docs/runtime.md). Past
 * KF__ROWS_MAX_SCRATCH_ARRAYS arrays the calls share them again, with a barrier after each. */
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
