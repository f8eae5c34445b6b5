/* dW = A^T B with the column sums of B as a second output: the bias gradient of a linear layer
 * (db = sum over rows of dY) from the dY tiles the weight gradient's product loads anyway
 * (cuBLASLt's BGRADB epilogue), instead of a kernel of its own that reads dY again. Likewise
 * dW^T = dY^T X with the column sums of A = dY (BGRADA: the weight stored [out, in], read with
 * transpose_b, whose gradient autodiff takes as matmul(dy, x, transpose_a)). The matmul
 * operator's kernel_column_sums hook (kf_operator): the planner's bias-gradient rule
 * (src/fuse/rules/bias_grad.c) asks for it where sum_leading(dY) and matmul(X, dY, transpose_a)
 * read the same dY.
 *
 * The product is the matmul's simple tiled kernel (src/ops/matmul.c's emit_tiled, the kernel
 * every transposed product runs): 16x16 invocations per workgroup, one element of dW each, the
 * K axis (the rows of dY) walked in steps of 16 through two 16x16 tiles in workgroup memory. The
 * workgroups of the first row of tiles hold, at each step, 16 rows of dY (as B) for their 16
 * columns in the right tile; the first row of invocations of each sums its column of that tile
 * (16 terms) and adds the step's sum to a running total: the same blocked summation (16 + K / 16
 * additions) as the product, in a fixed order, so the result is deterministic. For dY as A^T, the
 * first column of tiles does the same along the rows of the left tile. Loads outside dY are zero,
 * as the product's are. dW goes through kf_kernel_yield (an epilogue composes as onto any matmul),
 * the sums are stored into the binding declared after a and b.
 */
#include "ops/ops_internal.h"

#define TILE 16u
/* The largest product (m * n * k multiply-adds) whose dW carries the bias gradient (below). */
#define SUMS_MAX_FLOPS (1ull << 24)

/* Element (i, j) of a factor, or 0 outside it (rows x cols; stored transposed when asked). */
static kf_val load_factor(kf_kernel *k, kf_binding b, bool transposed, uint32_t rows, uint32_t cols,
                          kf_val i, kf_val j, kf_dtype dtype, const char *name) {
    kf_val inside = kf_binary(k, KF_OP_AND, kf_binary(k, KF_OP_LT, i, kf__u32(k, rows)),
                              kf_binary(k, KF_OP_LT, j, kf__u32(k, cols)));
    kf_var v = kf_declare(k, name, kf_type_scalar(KF_SCALAR_F32), kf_lit_f32(k, 0));
    kf_if(k, inside);
    kf_val index = transposed ? kf_add(k, kf_mul(k, j, kf__u32(k, rows)), i)
                              : kf_add(k, kf_mul(k, i, kf__u32(k, cols)), j);
    kf_assign(k, v, kf__load_f32(k, b, index, dtype));
    kf_end(k);
    return kf_read(k, v);
}

kf_kernel *kf__matmul_column_sums_kernel(const kf_shape *in, const kf_op_params *p, kf_dtype dtype,
                                         uint32_t which) {
    bool ta = p && p->transpose_a, tb = p && p->transpose_b;
    /* The summed input must be the product's K-major operand: b read plainly (its rows are the
     * K axis), or a read transposed (op(a)'s rows are a's columns). Both rank 2. */
    if (in[0].rank != 2 || in[1].rank != 2 || (which == 1 && tb) || (which == 0 && !ta) ||
        which > 1) {
        return NULL;
    }
    const uint32_t m = ta ? in[0].dims[1] : in[0].dims[0];
    const uint32_t kk = ta ? in[0].dims[0] : in[0].dims[1];
    const uint32_t n = tb ? in[1].dims[0] : in[1].dims[1];
    if ((tb ? in[1].dims[1] : in[1].dims[0]) != kk) {
        return NULL;
    }
    /* This kernel is the 16x16 tiled product. Past SUMS_MAX_FLOPS an f32 product runs on the
     * register-blocked kernel (7-9x faster on lavapipe, transposed or not) and saving the one
     * extra read of dY that a separate sum_leading costs is not worth that: the planner then
     * keeps the sum in a dispatch of its own. */
    if (dtype == KF_DTYPE_F32 && (uint64_t)m * n * kk > SUMS_MAX_FLOPS) {
        return NULL;
    }
    kf_kernel_desc desc = {.name = "matmul_column_sums",
                           .workgroup_size = {TILE, TILE, 1},
                           .output = kf__dtype_type(dtype)};
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    const uint32_t tiles_x = (n + TILE - 1) / TILE;
    uint32_t groups[3];
    kf__grid_1d((uint64_t)((m + TILE - 1) / TILE) * tiles_x, 1, groups);
    kf_kernel_set_grid(k, groups);
    kf_binding a = kf__bind(k, "a", dtype, KF_ACCESS_READ);
    kf_binding b = kf__bind(k, "b", dtype, KF_ACCESS_READ);
    kf_binding sums = kf__bind(k, which ? "b_sums" : "a_sums", dtype, KF_ACCESS_READ_WRITE);
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_shared tile_l = kf_kernel_workgroup(k, "tile_left", f32, TILE * TILE);
    kf_shared tile_r = kf_kernel_workgroup(k, "tile_right", f32, TILE * TILE);

    kf_val local = kf_builtin_get(k, KF_BUILTIN_LOCAL_ID);
    kf_val lx = kf_let(k, "lx", kf_extract(k, local, 0));
    kf_val ly = kf_let(k, "ly", kf_extract(k, local, 1));
    kf_val tile = kf_let(k, "tile", kf_workgroup_linear(k));
    kf_val tile_row = kf_let(k, "tile_row", kf_div(k, tile, kf__u32(k, tiles_x)));
    kf_val tile_col = kf_let(k, "tile_col", kf_binary(k, KF_OP_MOD, tile, kf__u32(k, tiles_x)));
    kf_val row = kf_let(k, "row", kf_add(k, kf_mul(k, tile_row, kf__u32(k, TILE)), ly));
    kf_val col = kf_let(k, "col", kf_add(k, kf_mul(k, tile_col, kf__u32(k, TILE)), lx));
    kf_val slot = kf_let(k, "slot", kf_add(k, kf_mul(k, ly, kf__u32(k, TILE)), lx));
    /* The invocations that sum: for b, the first row of invocations of the first row of tiles,
     * each down its column of the right tile; for a, the first column of invocations of the
     * first column of tiles, each along its row of the left tile (op(a)'s row, a's column). */
    kf_val tile_first = kf_binary(k, KF_OP_EQ, which ? tile_row : tile_col, kf__u32(k, 0));
    kf_val lane_first = kf_binary(k, KF_OP_EQ, which ? ly : lx, kf__u32(k, 0));
    kf_val summing = kf_let(k, "summing", kf_binary(k, KF_OP_AND, tile_first, lane_first));
    kf_val summed_at = which ? col : row;
    const uint32_t summed_count = which ? n : m;

    kf_var acc = kf_declare(k, "acc", f32, kf_lit_f32(k, 0));
    kf_var total = kf_declare(k, "line_total", f32, kf_lit_f32(k, 0));
    kf_val t = kf_for(k, "t", kf__u32(k, 0), kf__u32(k, kk), kf__u32(k, TILE));
    /* left: op(a), M x K, rows of this workgroup, K columns t..t+15; right: op(b), K x N */
    kf_val lv = load_factor(k, a, ta, m, kk, row, kf_add(k, t, lx), dtype, "lv");
    kf_shared_store(k, tile_l, slot, lv);
    kf_val rv = load_factor(k, b, tb, kk, n, kf_add(k, t, ly), col, dtype, "rv");
    kf_shared_store(k, tile_r, slot, rv);
    kf_barrier(k);
    kf_var part = kf_declare(k, "part", f32, kf_lit_f32(k, 0));
    kf_val q = kf_for(k, "q", kf__u32(k, 0), kf__u32(k, TILE), kf__u32(k, 1));
    kf_val av = kf_shared_load(k, tile_l, kf_add(k, kf_mul(k, ly, kf__u32(k, TILE)), q));
    kf_val bv = kf_shared_load(k, tile_r, kf_add(k, kf_mul(k, q, kf__u32(k, TILE)), lx));
    kf_assign(k, part, kf_call3(k, KF_FN_FMA, av, bv, kf_read(k, part)));
    kf_end(k);
    kf_assign(k, acc, kf_add(k, kf_read(k, acc), kf_read(k, part)));
    kf_if(k, summing);
    kf_var line_part = kf_declare(k, "line_part", f32, kf_lit_f32(k, 0));
    kf_val q2 = kf_for(k, "q2", kf__u32(k, 0), kf__u32(k, TILE), kf__u32(k, 1));
    kf_val cv = which ? kf_shared_load(k, tile_r, kf_add(k, kf_mul(k, q2, kf__u32(k, TILE)), lx))
                      : kf_shared_load(k, tile_l, kf_add(k, kf_mul(k, ly, kf__u32(k, TILE)), q2));
    kf_assign(k, line_part, kf_add(k, kf_read(k, line_part), cv));
    kf_end(k);
    kf_assign(k, total, kf_add(k, kf_read(k, total), kf_read(k, line_part)));
    kf_end(k);
    /* the next step overwrites the tiles */
    kf_barrier(k);
    kf_end(k);

    kf_if(k, kf_binary(k, KF_OP_AND, summing,
                       kf_binary(k, KF_OP_LT, summed_at, kf__u32(k, summed_count))));
    kf__store_f32(k, sums, summed_at, kf_read(k, total), dtype);
    kf_end(k);
    kf_val inside = kf_binary(k, KF_OP_AND, kf_binary(k, KF_OP_LT, row, kf__u32(k, m)),
                              kf_binary(k, KF_OP_LT, col, kf__u32(k, n)));
    kf_if(k, inside);
    kf__yield_f32(k, kf_read(k, acc), kf_add(k, kf_mul(k, row, kf__u32(k, n)), col), dtype);
    kf_end(k);
    return k;
}
