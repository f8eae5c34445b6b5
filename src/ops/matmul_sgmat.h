/* The subgroup-matrix (tensor core) matmul kernel generator: f16 inputs, f32 accumulation. */
#ifndef KF_OPS_MATMUL_SGMAT_H
#define KF_OPS_MATMUL_SGMAT_H

#include "kfuse.h"
#include "ops/matmul_blocked.h"

/* A tile configuration. The workgroup computes bm x bn of c walking K bk at a time through
 * f16 tiles in workgroup memory; its wm x wn subgroups each own a (bm / wm) x (bn / wn) block
 * of it, as 16x16 result matrices (the 16x16x16 f16 -> f32 configuration). stages 2
 * double-buffers the tiles (one barrier per step), 1 keeps one (two). group_m > 0 numbers the
 * workgroups down group_m tile rows before moving right, so the tiles running together share
 * b's columns in the L2 cache; 0 numbers them row by row. direct (bit 0: a, bit 1: b) loads
 * that operand's matrices straight from its storage buffer, with no tile in workgroup memory (and,
 * for both, no barrier in the K loop), where the shape is a multiple of the tile (bm, bn, bk; K
 * and N multiples of 8); other shapes stage both. staging says how the staged tiles are filled:
 * 0 vec4 fetches stored as halves in lane order; 1 the same with the rows and the store order
 * chosen so a subgroup's 2-byte stores fall in distinct banks; 2 whole 16x16 blocks copied by
 * subgroupMatrixLoad (storage) and subgroupMatrixStore (tile) where the shape is a multiple of the
 * tile and the operand's rows of 8-half multiples (elsewhere 1); 3 halves in lane order (which a
 * compiler can merge into one 8-byte store) with only the rows each subgroup fetches chosen so
 * those 8-byte stores meet the fewest bank conflicts. scratch: result matrices each
 * subgroup passes through its f32 scratch per round of the store phase (a barrier pair each), a
 * divisor of its row of bn / wn / 16; 0 the most that fit in workgroup memory. probe, for
 * measuring what limits the kernel only (its results are not the product): 1 stages the tiles
 * once before the K loop (the loop keeps its barriers, loads and multiplies), 2 loads the
 * matrices once before it (the loop stages and multiplies), 3 both; 4 fetches every step but
 * stores one vector an operand (the others folded into it), 8 stores every step what was fetched
 * once (4 and 8: single stage, staging 0, 1 or 3, layout 0); not with direct. layout 1
 * keeps a's tile k-major (bk x bm, its matrices loaded column-major, as for a^T) where a is
 * stored [m, k]: each invocation fetches a 4x4 block of a (four vec4s along K from four rows)
 * and stores it transposed, four halves of consecutive rows at a time; where bm is not a
 * multiple of 32 or an invocation's vec4s of a are not a multiple of four, a's tile stays
 * row-major. order, with two stages: 0 fetches the next tiles into registers at the top of a
 * step and stores them into the other stage after the multiplies; 1 keeps the registers a step
 * ahead: a step first stores the tiles fetched during the step before into the other stage,
 * then fetches those of two steps on, then multiplies (a global load has a whole step to
 * arrive; one barrier a step either way). vector 1 fetches 16 bytes at a time (a and b bound as
 * array<vec4<u32>>, each u32 two halves) where an operand is staged in lane order (staging 0,
 * not a k-major a), its rows are whole 8-half vectors, no tile crosses an edge and the product
 * is not batched; elsewhere 8 bytes (vec4<f16>). straight 1 puts no branch around the K loop's
 * staging (the fetches past the last step read the last tile again, the stores past it fill a
 * stage no step reads), so the driver may schedule fetches and stores among the multiplies. */
typedef struct kf__sgmat_config {
    uint32_t bm, bn, bk;
    uint32_t wm, wn;
    uint32_t stages;
    uint32_t group_m;
    uint32_t direct;
    uint32_t staging;
    uint32_t scratch;
    uint32_t probe;
    uint32_t layout;
    uint32_t order;
    uint32_t vector;
    uint32_t straight;
} kf__sgmat_config;

/* The configuration for a product of this shape on a device whose bounds checks (Dawn's
 * robustness) are on (`checked`) or off; kf__matmul_sgmat with no configuration uses the
 * unchecked one. */
const kf__sgmat_config *kf__sgmat_default_config(uint32_t m, uint32_t k, uint32_t n, bool checked);

/* Whether the generator accepts the configuration for subgroups of sg invocations: bm, bn
 * multiples of 16 * wm, 16 * wn; bk a multiple of 16; whole vec4 loads of both tiles per
 * invocation; workgroup memory within 48 KiB. */
bool kf__sgmat_config_valid(const kf__sgmat_config *cfg, uint32_t sg);

/* c[m,n] = a[m,k] * b[k,n], row-major, f16 storage (bindings a, b, then out), products on
 * subgroup matrices with f32 accumulation; every element of c goes through kf_kernel_yield
 * (rounded to f16), so element-wise tails fuse. Any m, k, n: tiles are zero-padded when staged
 * and the store phase is bounds-checked. sg is the device's subgroup size (subgroups are taken
 * to be consecutive local indices, as on every GPU that has subgroup matrices). cfg NULL: the
 * default (robustness off). The grid is recorded on the kernel. NULL for an invalid configuration
 * or zero sizes. */
kf_kernel *kf__matmul_sgmat(uint32_t m, uint32_t k, uint32_t n, const kf__sgmat_config *cfg,
                            uint32_t sg);
/* The same for a batch of products (kf__mm_batch; NULL or axes 0: one), each product's
 * workgroups after the previous one's. Operands are never read directly (cfg->direct is
 * ignored) in a batch. */
kf_kernel *kf__matmul_sgmat_batched(uint32_t m, uint32_t k, uint32_t n, const kf__sgmat_config *cfg,
                                    uint32_t sg, const kf__mm_batch *batch);
/* The same with op(a) = a^T where ta (a stored [k, m]) and op(b) = b^T where tb (b stored
 * [n, k]), batch steps as for the plain product: each tile is staged in its operand's stored
 * orientation and its matrices loaded column-major; operands are never read directly. NULL also
 * where a transposed operand's tile does not fit in workgroup memory beside the scratch. */
kf_kernel *kf__matmul_sgmat_transposed(uint32_t m, uint32_t k, uint32_t n,
                                       const kf__sgmat_config *cfg, uint32_t sg,
                                       const kf__mm_batch *batch, bool ta, bool tb);

/* Whether ctx can run the kernel: the device has subgroup matrices and shader-f16, one subgroup
 * size, and compiles a 16x16x16 f16 -> f32 probe; and $KF_NO_SGMAT is unset (or "0"). On true,
 * *sg is the subgroup size. */
bool kf__sgmat_usable(kf_context *ctx, uint32_t *sg);

/* "BMxBNxBK/WMxWN/S/G[/D[/T[/R[/P[/L[/O[/V[/B]]]]]]]]" (kfuse sgmat's notation; T the
 * staging, R the scratch, P the probe, L the layout, O the order, V the vector, B straight) into
 * *out; false if it does not parse. */
bool kf__sgmat_config_parse(const char *text, kf__sgmat_config *out);

/* The kernel an f16 product c[m,n] = a[m,k] * b[k,n] (no transposes) runs on ctx: the
 * subgroup-matrix kernel where kf__sgmat_usable and the product has 64x64 outputs or more, else
 * NULL (the caller keeps its FMA kernel). $KF_SGMAT_CONFIG (that notation) replaces the default
 * configuration, for measuring; an invalid one is ignored. */
kf_kernel *kf__matmul_sgmat_for(kf_context *ctx, uint32_t m, uint32_t k, uint32_t n);
/* The same for a batch of products (NULL: one). */
kf_kernel *kf__matmul_sgmat_batched_for(kf_context *ctx, uint32_t m, uint32_t k, uint32_t n,
                                        const kf__mm_batch *batch);
/* The same with transposes (kf__matmul_sgmat_transposed): the f16 backward's products. */
kf_kernel *kf__matmul_sgmat_transposed_for(kf_context *ctx, uint32_t m, uint32_t k, uint32_t n,
                                           const kf__mm_batch *batch, bool ta, bool tb);

#endif
