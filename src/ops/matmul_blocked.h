/* The register-blocked f32 matmul kernel generator and its tile configurations. */
#ifndef KF_OPS_MATMUL_BLOCKED_H
#define KF_OPS_MATMUL_BLOCKED_H

#include "kfuse.h"
#include "ops/matmul_rownorm.h"

/* A tile configuration: the workgroup computes bm x bn of c walking K bk at a time, each
 * invocation tm x tn (workgroup size (bn/tn, bm/tm)). tm, tn are 4, 8 or 16 (tm * tn <= 128);
 * bk a multiple of 4.
 * stages 2 double-buffers the workgroup tiles (one barrier per step, twice the workgroup
 * memory: 2 * 4 * bk * (bm + bn) bytes); 0 or 1 keeps one (two barriers per step). */
typedef struct kf__mm_config {
    uint32_t bm, bn, bk, tm, tn;
    uint32_t stages;
    /* 0 or 1: tiles in row-major order; G > 1: in groups of G tile rows, down each group's
     * columns first, so neighbouring workgroups share b's panels in the L2 cache. At most 64. */
    uint32_t raster;
    /* 0: on ragged shapes every load is bounds-tested; 1: rows of a past M and columns of b past
     * N are clamped once (they feed only outputs that are never stored), the loads of every
     * whole K step run unguarded, and only the last, partial K step tests k. Shapes that are
     * whole tiles get the same kernel either way. */
    uint32_t edge;
} kf__mm_config;

/* "BMxBNxBK/TMxTN/S[/R[/E]]" (stages, raster, edge; kfuse tune's notation) into *out, the fields
 * left out 0; false if it does not parse or kf__matmul_blocked_valid refuses it. */
bool kf__mm_config_parse(const char *text, kf__mm_config *out);
/* The notation above for cfg (R and E only when set), into buf. */
void kf__mm_config_str(const kf__mm_config *cfg, char *buf, size_t size);

/* The configuration used when none is given: the double-buffered 128x128x8 tile of 8x8 in
 * groups of 4 tile rows for large products, 64x64x16 of 8x8 below (enough workgroups to fill a
 * large GPU); both on the edge path where the shape is ragged. */
const kf__mm_config *kf__mm_default_config(uint32_t m, uint32_t k, uint32_t n);

/* The batch of a batched product: one product per element of the result's batch dims (at most 2
 * axes, outermost first), numbered row-major; each product's workgroups follow the previous
 * one's in the 1-D grid. Steps say how many elements of a, b and c lie between neighbouring
 * products along each axis: 0 where that operand is broadcast along it. axes 0: one product. */
typedef struct kf__mm_batch {
    uint32_t axes;
    uint32_t dims[2];
    uint32_t a_step[2], b_step[2], c_step[2];
} kf__mm_batch;

/* The products of a batch (1 for none or axes 0). */
uint32_t kf__mm_batch_count(const kf__mm_batch *bt);
/* The offset, in elements, of product `index` (a u32 value) of an operand with these steps: the
 * invalid handle when it is 0 for every product (broadcast along every axis, or no batch). */
kf_val kf__mm_batch_offset(kf_kernel *k, const kf__mm_batch *bt, kf_val index,
                           const uint32_t step[2]);

/* c[m,n] = a[m,k] * b[k,n] (bindings a, b, then out), every element yielded to the store phase;
 * the grid is recorded on the kernel. NULL for an invalid configuration or zero sizes. */
kf_kernel *kf__matmul_blocked(uint32_t m, uint32_t k, uint32_t n, const kf__mm_config *cfg);
/* The same for f16 storage (inputs and output f16, loads widened, accumulation in f32); the
 * kernel needs the device's shader-f16. NULL for other dtypes. */
kf_kernel *kf__matmul_blocked_typed(uint32_t m, uint32_t k, uint32_t n, const kf__mm_config *cfg,
                                    kf_dtype dtype);
/* The same for a batch of products (NULL or axes 0: kf__matmul_blocked_typed's kernel): the
 * batch index is the workgroup's linear index divided by the tiles of one product. */
kf_kernel *kf__matmul_blocked_batched(uint32_t m, uint32_t k, uint32_t n, const kf__mm_config *cfg,
                                      kf_dtype dtype, const kf__mm_batch *batch);
/* The same with op(a) = a^T where ta (a stored [k, m]) and op(b) = b^T where tb (b stored
 * [n, k]); steps as for the plain product. A transposed operand loads as scalars (its elements
 * along the fetched direction are a row apart); false, false: kf__matmul_blocked_batched. NULL
 * for f16 with a transpose. */
kf_kernel *kf__matmul_blocked_transposed(uint32_t m, uint32_t k, uint32_t n,
                                         const kf__mm_config *cfg, kf_dtype dtype,
                                         const kf__mm_batch *batch, bool ta, bool tb);
/* The same with rmsnorm folded into a's rows (ops/matmul_rownorm.h; a not transposed, no
 * batch): bindings a, b, [gain], then the store phase, each result scaled by its row's r. */
kf_kernel *kf__matmul_blocked_rownorm(uint32_t m, uint32_t k, uint32_t n, const kf__mm_config *cfg,
                                      kf_dtype dtype, bool tb, const kf__mm_rownorm *rn);
/* How a workgroup stages its two tiles: invocation `local` of `threads` loads vec4 v of a's
 * bm x bk tile from row a_row[v], columns a_k[v]..+3 (along k), and vec4 v of b's bk x bn tile
 * from row b_k[v], columns b_col[v]..+3 (along n), into the registers next_a[v], next_b[v] (of
 * type vec). Shared by the register-blocked and the subgroup-matrix kernels. */
#define KF__MM_MAX_LOADS 16u
typedef struct kf__mm_staging {
    kf_val a_row[KF__MM_MAX_LOADS], a_k[KF__MM_MAX_LOADS];
    kf_val b_k[KF__MM_MAX_LOADS], b_col[KF__MM_MAX_LOADS];
    kf_var next_a[KF__MM_MAX_LOADS], next_b[KF__MM_MAX_LOADS];
} kf__mm_staging;
void kf__mm_staging_init(kf_kernel *k, kf_val local, uint32_t threads, uint32_t bk, uint32_t bn,
                         uint32_t loads_a, uint32_t loads_b, kf_type vec, kf__mm_staging *st);

/* Loads one vec4 of the row-major rows x cols matrix bound at b from element `offset` on (the
 * invalid handle: 0; a multiple of 4 when wide), at (r, c..c+3), into `into`:
 * the matrix holds `stored` (f32 or f16) elements, widened to f32 when to_f32. `wide`: b is
 * bound as vec4s (cols % 4 == 0); `checked`: zero outside the matrix (wide: one bounds test;
 * else scalar loads from clamped indices, zeroed by a select, without branches). */
void kf__mm_load4(kf_kernel *k, kf_binding b, kf_val offset, bool wide, bool checked, kf_val r,
                  kf_val c, uint32_t rows, uint32_t cols, kf_var into, kf_scalar stored,
                  bool to_f32);

/* Whether kf__matmul_blocked accepts the configuration. */
bool kf__matmul_blocked_valid(const kf__mm_config *cfg);
/* The tile tuned for this shape class on ctx's adapter (kf_matmul_tune, this process or the
 * cache file), or NULL when none was; $KF_MM_CONFIG (kf__mm_config_parse's notation), where it
 * parses, for every shape. */
const kf__mm_config *kf__matmul_config_for(kf_context *ctx, uint32_t m, uint32_t k, uint32_t n);

#endif
