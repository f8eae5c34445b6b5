/* matmul: c = op(a) * op(b), op(x) = x^T where params.transpose_a / transpose_b say so.
 *
 * Shapes: op(a) is [M, K] (a is [M, K], or [K, M] when transpose_a), op(b) is [K, N] (b is
 * [K, N], or [N, K] when transpose_b); c is [M, N]. Both inputs are rank 2.
 *
 * Gradients, with dc = grad_out:  da = dc * op(b)^T,  db = op(a)^T * dc,  each stored in its
 * input's own layout (transposed back where the input is transposed). Every one of them is again
 * a product of two stored matrices read with or without a transpose, so the forward kernel and
 * both backward kernels come from one tiled generator.
 *
 * Two kernels. The simple tiled one (transposed f16, the backward kernels, small outputs):
 * 16x16 invocations per workgroup, one output element each; the K axis is walked in 16-wide
 * steps through two 16x16 tiles in workgroup memory, loads bounds-checked (zero outside),
 * accumulation in f32. For the f32 forward product of 64x64 outputs and up (any transposes, so
 * the products autodiff builds for a training step's backward too) and plain f16, the
 * register-blocked kernel of matmul_blocked.c (each invocation an 8x8 or 4x4 block). Both hand
 * each element to kf_kernel_yield, their store phase, so a bias, an activation or a residual add
 * fuses into the store. On a device with subgroup matrices, f16 products of 64x64 outputs and up
 * (any transposes) run on matmul_sgmat.c's tensor-core kernel instead (mm_kernel_choose).
 */
#include "ops/matmul_blocked.h"
#include "ops/matmul_rownorm.h"
#include "ops/matmul_sgmat.h"
#include "ops/ops_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TILE 16u
/* From this many output elements up, the forward f32 kernel is the register-blocked one
 * (src/ops/matmul_blocked.c); below it the simple kernel's 16x16 tiles spread better. */
#define BLOCKED_MIN_ELEMENTS (64u * 64u)

/* ---------------------------------------------------------------------------------------- */
/* Shapes                                                                                   */
/* ---------------------------------------------------------------------------------------- */

/* A product's sizes: op(a) is m x k, op(b) k x n, for each of the products of `batch` (axes 0:
 * one). `rows` is one matrix of a's M; m is rows, or rows times the batch where the batch folds
 * into the rows (a [..., M, K] not transposed, b one matrix shared by every product: a is then
 * one [B*M, K] matrix and c one [B*M, N]). The result is `rank`-dimensional: out_batch, M, N. */
typedef struct mm_dims {
    uint32_t m, k, n, rows;
    uint32_t rank;
    uint32_t out_batch[2];
    kf__mm_batch batch;
} mm_dims;

static kf_status mm_dims_of(const kf_shape *in, const kf_op_params *p, bool fold, mm_dims *d,
                            char *msg, size_t msg_size) {
    char a[64], b[64];
    bool ta = p && p->transpose_a, tb = p && p->transpose_b;
    const kf_shape *sa = &in[0], *sb = &in[1];
    memset(d, 0, sizeof *d);
    if (sa->rank < 2 || sa->rank > 4 || sb->rank < 2 || sb->rank > 4 || !kf__shape_valid(sa) ||
        !kf__shape_valid(sb)) {
        return kf__shape_error(msg, msg_size,
                               "matmul: inputs must have rank 2 to 4 ([..., M, K] and "
                               "[..., K, N]): a is %s, b is %s",
                               kf_shape_str(sa, a, sizeof a), kf_shape_str(sb, b, sizeof b));
    }
    const uint32_t ra = sa->rank, rb = sb->rank;
    uint32_t ka = ta ? sa->dims[ra - 2] : sa->dims[ra - 1];
    uint32_t kb = tb ? sb->dims[rb - 1] : sb->dims[rb - 2];
    if (ka != kb) {
        return kf__shape_error(msg, msg_size, "matmul: inner dims differ: %sa is %s, %sb is %s",
                               ta ? "transposed " : "", kf_shape_str(sa, a, sizeof a),
                               tb ? "transposed " : "", kf_shape_str(sb, b, sizeof b));
    }
    d->m = d->rows = ta ? sa->dims[ra - 1] : sa->dims[ra - 2];
    d->k = ka;
    d->n = tb ? sb->dims[rb - 2] : sb->dims[rb - 1];
    d->rank = ra > rb ? ra : rb;
    const uint32_t axes = d->rank - 2;
    /* the batch dims of a and b aligned right with the result's (numpy broadcasting) */
    uint32_t da[2] = {1, 1}, db[2] = {1, 1};
    uint64_t count = 1;
    bool b_shared = true, a_whole = true;
    for (uint32_t i = 0; i < axes; i++) {
        int ia = (int)i + (int)ra - (int)d->rank, ib = (int)i + (int)rb - (int)d->rank;
        da[i] = ia >= 0 ? sa->dims[ia] : 1;
        db[i] = ib >= 0 ? sb->dims[ib] : 1;
        if (da[i] != db[i] && da[i] != 1 && db[i] != 1) {
            return kf__shape_error(msg, msg_size,
                                   "matmul: batch dims do not broadcast: a is %s, b is %s",
                                   kf_shape_str(sa, a, sizeof a), kf_shape_str(sb, b, sizeof b));
        }
        d->out_batch[i] = da[i] > db[i] ? da[i] : db[i];
        count *= d->out_batch[i];
        b_shared = b_shared && db[i] == 1;
        a_whole = a_whole && da[i] == d->out_batch[i];
    }
    if (count * d->m * d->n >= (1ull << 32)) {
        return kf__shape_error(msg, msg_size,
                               "matmul: the result (%llu products of %ux%u) has 2^32 elements or "
                               "more",
                               (unsigned long long)count, d->m, d->n);
    }
    if (fold && axes && b_shared && a_whole && !ta) {
        d->m = (uint32_t)(d->rows * count);
        return KF_OK;
    }
    /* steps in elements: each operand's own batch is contiguous, a broadcast axis steps 0 */
    kf__mm_batch *bt = &d->batch;
    bt->axes = count > 1 ? axes : 0;
    uint64_t step_a = (uint64_t)d->m * d->k, step_b = (uint64_t)d->k * d->n,
             step_c = (uint64_t)d->m * d->n;
    for (uint32_t i = axes; i-- > 0;) {
        bt->dims[i] = d->out_batch[i];
        bt->a_step[i] = da[i] == 1 ? 0 : (uint32_t)step_a;
        bt->b_step[i] = db[i] == 1 ? 0 : (uint32_t)step_b;
        bt->c_step[i] = (uint32_t)step_c;
        step_a *= da[i];
        step_b *= db[i];
        step_c *= d->out_batch[i];
    }
    return KF_OK;
}

static kf_shape mm_out_shape(const mm_dims *d) {
    kf_shape out = {.rank = d->rank};
    for (uint32_t i = 0; i + 2 < d->rank; i++) {
        out.dims[i] = d->out_batch[i];
    }
    out.dims[d->rank - 2] = d->rows;
    out.dims[d->rank - 1] = d->n;
    return out;
}

static kf_status mm_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out, char *msg,
                          size_t msg_size) {
    mm_dims d;
    kf_status st = mm_dims_of(in, p, false, &d, msg, msg_size);
    if (st == KF_OK) {
        *out = mm_out_shape(&d);
    }
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Specification                                                                            */
/* ---------------------------------------------------------------------------------------- */

/* Element (i, j) of op(x) for the matrix at x (stored row-major as rows x cols before the
 * transpose). */
static double at(const float *x, uint32_t cols, bool transposed, uint32_t i, uint32_t j) {
    return transposed ? x[(uint64_t)j * cols + i] : x[(uint64_t)i * cols + j];
}

/* Where product `o` of the result's batch starts in an operand with these steps. */
static uint64_t spec_offset(const mm_dims *d, uint32_t o, const uint32_t step[2]) {
    uint64_t off = 0;
    for (uint32_t i = d->rank - 2; i-- > 0;) {
        off += (uint64_t)(o % d->out_batch[i]) * step[i];
        o /= d->out_batch[i];
    }
    return off;
}

static uint32_t spec_count(const mm_dims *d) {
    uint32_t count = 1;
    for (uint32_t i = 0; i + 2 < d->rank; i++) {
        count *= d->out_batch[i];
    }
    return count;
}

static kf_status mm_spec_forward(const kf_tensor *const *in, const kf_op_params *p,
                                 kf_tensor *out) {
    if (!in || !in[0] || !in[1] || !out) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_shape shapes[2] = {in[0]->shape, in[1]->shape};
    mm_dims d;
    kf_status st = mm_dims_of(shapes, p, false, &d, NULL, 0);
    if (st != KF_OK) {
        return st;
    }
    kf_shape want = mm_out_shape(&d);
    if (!kf_shape_eq(&want, &out->shape)) {
        return KF_ERROR_SHAPE;
    }
    bool ta = p && p->transpose_a, tb = p && p->transpose_b;
    uint32_t a_cols = in[0]->shape.dims[in[0]->shape.rank - 1];
    uint32_t b_cols = in[1]->shape.dims[in[1]->shape.rank - 1];
    for (uint32_t o = 0; o < spec_count(&d); o++) {
        const float *a = in[0]->data + spec_offset(&d, o, d.batch.a_step);
        const float *b = in[1]->data + spec_offset(&d, o, d.batch.b_step);
        float *c = out->data + (uint64_t)o * d.m * d.n;
        for (uint32_t i = 0; i < d.m; i++) {
            for (uint32_t j = 0; j < d.n; j++) {
                double acc = 0;
                for (uint32_t k = 0; k < d.k; k++) {
                    acc += at(a, a_cols, ta, i, k) * at(b, b_cols, tb, k, j);
                }
                c[(uint64_t)i * d.n + j] = (float)acc;
            }
        }
    }
    return KF_OK;
}

/* Per product o: da(i, k) += sum_j dc(i, j) op(b)(k, j);  db(k, j) += sum_i op(a)(i, k) dc(i, j);
 * each written where op(x)(r, c) lives in x's storage, and summed in float64 over the products
 * along which x was broadcast. */
static kf_status mm_spec_backward(const kf_tensor *const *in, const kf_tensor *out,
                                  const kf_tensor *grad_out, const kf_op_params *p,
                                  kf_tensor *const *grad_in) {
    (void)out;
    if (!in || !in[0] || !in[1] || !grad_out || !grad_in) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_shape shapes[2] = {in[0]->shape, in[1]->shape};
    mm_dims d;
    kf_status st = mm_dims_of(shapes, p, false, &d, NULL, 0);
    if (st != KF_OK) {
        return st;
    }
    kf_shape want = mm_out_shape(&d);
    if (!kf_shape_eq(&want, &grad_out->shape)) {
        return KF_ERROR_SHAPE;
    }
    bool ta = p && p->transpose_a, tb = p && p->transpose_b;
    uint32_t a_cols = in[0]->shape.dims[in[0]->shape.rank - 1];
    uint32_t b_cols = in[1]->shape.dims[in[1]->shape.rank - 1];
    double *sum[2] = {NULL, NULL};
    for (uint32_t w = 0; w < 2; w++) {
        if (grad_in[w]) {
            sum[w] = calloc(kf_shape_elements(&in[w]->shape), sizeof(double));
            if (!sum[w]) {
                free(sum[0]);
                return KF_ERROR_OUT_OF_MEMORY;
            }
        }
    }
    for (uint32_t o = 0; o < spec_count(&d); o++) {
        uint64_t a_at = spec_offset(&d, o, d.batch.a_step);
        uint64_t b_at = spec_offset(&d, o, d.batch.b_step);
        const float *a = in[0]->data + a_at, *b = in[1]->data + b_at;
        const float *dc = grad_out->data + (uint64_t)o * d.m * d.n;
        for (uint32_t i = 0; sum[0] && i < d.m; i++) {
            for (uint32_t k = 0; k < d.k; k++) {
                double acc = 0;
                for (uint32_t j = 0; j < d.n; j++) {
                    acc += at(dc, d.n, false, i, j) * at(b, b_cols, tb, k, j);
                }
                sum[0][a_at + (ta ? (uint64_t)k * a_cols + i : (uint64_t)i * a_cols + k)] += acc;
            }
        }
        for (uint32_t k = 0; sum[1] && k < d.k; k++) {
            for (uint32_t j = 0; j < d.n; j++) {
                double acc = 0;
                for (uint32_t i = 0; i < d.m; i++) {
                    acc += at(a, a_cols, ta, i, k) * at(dc, d.n, false, i, j);
                }
                sum[1][b_at + (tb ? (uint64_t)j * b_cols + k : (uint64_t)k * b_cols + j)] += acc;
            }
        }
    }
    for (uint32_t w = 0; w < 2; w++) {
        for (uint64_t e = 0; sum[w] && e < kf_shape_elements(&in[w]->shape); e++) {
            grad_in[w]->data[e] = (float)sum[w][e];
        }
        free(sum[w]);
    }
    return KF_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* The tiled kernel generator                                                               */
/* ---------------------------------------------------------------------------------------- */

/* A factor of the product: a binding read as a rows x cols matrix (its logical shape in the
 * product); transposed means the storage is cols x rows. In a batch, the matrix of grid product g
 * and summed product r starts at element kf__mm_batch_offset(grid, g, step) +
 * kf__mm_batch_offset(sum, r, sum_step). */
typedef struct mm_operand {
    kf_binding binding;
    bool transposed;
    uint32_t rows, cols;
    uint32_t step[2], sum_step[2];
} mm_operand;

/* Where the generator puts each result element (row, col) of the rows x cols product. */
typedef struct mm_sink {
    bool yield;         /* forward: kf_kernel_yield at row * cols + col */
    kf_binding binding; /* backward: stored here ... */
    bool transposed;    /* ... at col * rows + row when set */
    uint32_t step[2];   /* in a batch: grid product g's result starts at its offset */
    /* valid: also the column sums of the right factor (read plain, every row of it walked by
     * the one result of the dispatch) stored here: a bias gradient riding on db */
    kf_binding column_sums;
    /* set: rmsnorm folded into the left factor's rows (ops/matmul_rownorm.h), the right factor's
     * rows scaled by `gain` (when valid) as they are loaded */
    const kf__mm_rownorm *rownorm;
    kf_binding gain;
} mm_sink;

/* The products one tiled dispatch computes: `grid`'s, side by side in the grid, and for each
 * the sum of `sum`'s (a broadcast input's gradient). NULL or axes 0: one. */
typedef struct mm_walk {
    const kf__mm_batch *grid, *sum;
} mm_walk;

static kf_val add_offset(kf_kernel *k, kf_val off, kf_val index) {
    return off.id ? kf_add(k, off, index) : index;
}

/* Element (i, j) of a factor, or 0 outside it: loads only inside the bounds. */
static kf_val load_factor(kf_kernel *k, const mm_operand *x, kf_val offset, kf_val i, kf_val j,
                          kf_dtype dtype, const char *name) {
    kf_val inside = kf_binary(k, KF_OP_AND, kf_binary(k, KF_OP_LT, i, kf__u32(k, x->rows)),
                              kf_binary(k, KF_OP_LT, j, kf__u32(k, x->cols)));
    kf_var v = kf_declare(k, name, kf_type_scalar(KF_SCALAR_F32), kf_lit_f32(k, 0));
    kf_if(k, inside);
    kf_val index = x->transposed ? kf_add(k, kf_mul(k, j, kf__u32(k, x->rows)), i)
                                 : kf_add(k, kf_mul(k, i, kf__u32(k, x->cols)), j);
    kf_assign(k, v, kf__load_f32(k, x->binding, add_offset(k, offset, index), dtype));
    kf_end(k);
    return kf_read(k, v);
}

/* grid product g's (and summed product r's, when r is valid) matrix of x */
static kf_val operand_offset(kf_kernel *k, const mm_walk *w, const mm_operand *x, kf_val g,
                             kf_val r) {
    kf_val off = g.id ? kf__mm_batch_offset(k, w->grid, g, x->step) : (kf_val){0};
    kf_val more = r.id ? kf__mm_batch_offset(k, w->sum, r, x->sum_step) : (kf_val){0};
    return more.id ? add_offset(k, off, more) : off;
}

/* Emits left * right (left: M x K, right: K x N) into the kernel body: each invocation of a
 * 16x16 workgroup computes one element, and the result goes to the sink. Workgroups are numbered
 * linearly over the tiles of the result, row-major, then over the products of the walk's grid,
 * so a wide or tall result never runs into the per-dimension dispatch limit (the runtime folds a
 * long 1-D grid). With a walk's sum, the K loop runs once per summed product, into one total. */
static void emit_tiled(kf_kernel *k, const mm_operand *left, const mm_operand *right,
                       const mm_sink *sink, kf_dtype dtype, const mm_walk *walk) {
    const uint32_t m = left->rows, kk = left->cols, n = right->cols;
    const uint32_t tiles_x = (n + TILE - 1) / TILE, tiles_y = (m + TILE - 1) / TILE;
    const uint32_t grid = walk ? kf__mm_batch_count(walk->grid) : 1;
    const uint32_t summed = walk ? kf__mm_batch_count(walk->sum) : 1;
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_shared tile_l = kf_kernel_workgroup(k, "tile_left", f32, TILE * TILE);
    kf_shared tile_r = kf_kernel_workgroup(k, "tile_right", f32, TILE * TILE);

    kf_val local = kf_builtin_get(k, KF_BUILTIN_LOCAL_ID);
    kf_val lx = kf_let(k, "lx", kf_extract(k, local, 0));
    kf_val ly = kf_let(k, "ly", kf_extract(k, local, 1));
    kf_val tile = kf_let(k, "tile", kf_workgroup_linear(k));
    kf_val g = {0};
    if (grid > 1) {
        g = kf_let(k, "product", kf_div(k, tile, kf__u32(k, tiles_x * tiles_y)));
        tile = kf_let(k, "tile_of", kf_binary(k, KF_OP_MOD, tile, kf__u32(k, tiles_x * tiles_y)));
    }
    kf_val tile_row = kf_div(k, tile, kf__u32(k, tiles_x));
    kf_val tile_col = kf_binary(k, KF_OP_MOD, tile, kf__u32(k, tiles_x));
    kf_val row = kf_let(k, "row", kf_add(k, kf_mul(k, tile_row, kf__u32(k, TILE)), ly));
    kf_val col = kf_let(k, "col", kf_add(k, kf_mul(k, tile_col, kf__u32(k, TILE)), lx));
    kf_val slot = kf_let(k, "slot", kf_add(k, kf_mul(k, ly, kf__u32(k, TILE)), lx));
    /* the column sums: the first row of invocations of the first row of tiles adds up, at each
     * step, its column of the right tile (16 rows), in the product's blocked order */
    kf_val summing = {0};
    kf_var total = {0};
    if (sink->column_sums.id) {
        summing = kf_let(k, "summing",
                         kf_binary(k, KF_OP_AND, kf_binary(k, KF_OP_EQ, tile_row, kf__u32(k, 0)),
                                   kf_binary(k, KF_OP_EQ, ly, kf__u32(k, 0))));
        total = kf_declare(k, "column_total", f32, kf_lit_f32(k, 0));
    }

    kf_var acc = kf_declare(k, "acc", f32, kf_lit_f32(k, 0));
    /* rmsnorm folded in: the row's sum of squares, from the left tiles this invocation reads */
    kf_var squares = {0};
    if (sink->rownorm) {
        squares = kf_declare(k, "squares", f32, kf_lit_f32(k, 0));
    }
    kf_val r = {0};
    if (summed > 1) {
        r = kf_for(k, "summed", kf__u32(k, 0), kf__u32(k, summed), kf__u32(k, 1));
    }
    kf_val off_l = {0}, off_r = {0};
    if (grid > 1 || summed > 1) {
        off_l = operand_offset(k, walk, left, g, r);
        off_r = operand_offset(k, walk, right, g, r);
        off_l = off_l.id ? kf_let(k, "left_at", off_l) : off_l;
        off_r = off_r.id ? kf_let(k, "right_at", off_r) : off_r;
    }
    kf_val t = kf_for(k, "t", kf__u32(k, 0), kf__u32(k, kk), kf__u32(k, TILE));
    /* left tile: rows of this workgroup, K columns t..t+15; right tile: K rows t..t+15 */
    kf_val lv = load_factor(k, left, off_l, row, kf_add(k, t, lx), dtype, "lv");
    kf_shared_store(k, tile_l, slot, lv);
    kf_val rv = load_factor(k, right, off_r, kf_add(k, t, ly), col, dtype, "rv");
    if (sink->gain.id) {
        /* the gain on the K axis (rows past K are zero already; their index is clamped) */
        kf_val at = kf_call2(k, KF_FN_MIN, kf_add(k, t, ly), kf__u32(k, kk - 1u));
        rv = kf_mul(k, rv, kf__load_f32(k, sink->gain, at, dtype));
    }
    kf_shared_store(k, tile_r, slot, rv);
    kf_barrier(k);
    /* Blocked summation: each tile's 16 products are summed on their own and then added to the
     * total, so rounding grows with 16 + K / 16 additions rather than K. */
    kf_var part = kf_declare(k, "part", f32, kf_lit_f32(k, 0));
    kf_var square_part = {0};
    if (sink->rownorm) {
        square_part = kf_declare(k, "square_part", f32, kf_lit_f32(k, 0));
    }
    kf_val q = kf_for(k, "q", kf__u32(k, 0), kf__u32(k, TILE), kf__u32(k, 1));
    kf_val a = kf_shared_load(k, tile_l, kf_add(k, kf_mul(k, ly, kf__u32(k, TILE)), q));
    kf_val b = kf_shared_load(k, tile_r, kf_add(k, kf_mul(k, q, kf__u32(k, TILE)), lx));
    kf_assign(k, part, kf_call3(k, KF_FN_FMA, a, b, kf_read(k, part)));
    if (sink->rownorm) {
        kf_assign(k, square_part, kf_call3(k, KF_FN_FMA, a, a, kf_read(k, square_part)));
    }
    kf_end(k);
    kf_assign(k, acc, kf_add(k, kf_read(k, acc), kf_read(k, part)));
    if (sink->rownorm) {
        kf_assign(k, squares, kf_add(k, kf_read(k, squares), kf_read(k, square_part)));
    }
    if (sink->column_sums.id) {
        kf_if(k, summing);
        kf_var column_part = kf_declare(k, "column_part", f32, kf_lit_f32(k, 0));
        kf_val q2 = kf_for(k, "q2", kf__u32(k, 0), kf__u32(k, TILE), kf__u32(k, 1));
        kf_val cv = kf_shared_load(k, tile_r, kf_add(k, kf_mul(k, q2, kf__u32(k, TILE)), lx));
        kf_assign(k, column_part, kf_add(k, kf_read(k, column_part), cv));
        kf_end(k);
        kf_assign(k, total, kf_add(k, kf_read(k, total), kf_read(k, column_part)));
        kf_end(k);
    }
    /* the next step overwrites the tiles */
    kf_barrier(k);
    kf_end(k);
    if (summed > 1) {
        kf_end(k);
    }
    if (sink->column_sums.id) {
        kf_if(k, kf_binary(k, KF_OP_AND, summing, kf_binary(k, KF_OP_LT, col, kf__u32(k, n))));
        kf__store_f32(k, sink->column_sums, col, kf_read(k, total), dtype);
        kf_end(k);
    }

    kf_val inside = kf_binary(k, KF_OP_AND, kf_binary(k, KF_OP_LT, row, kf__u32(k, m)),
                              kf_binary(k, KF_OP_LT, col, kf__u32(k, n)));
    kf_if(k, inside);
    kf_val result = kf_read(k, acc);
    if (sink->rownorm) {
        kf_val mean = kf_mul(k, kf_read(k, squares), kf_lit_f32(k, 1.0f / (float)kk));
        kf_val rstd =
            kf_call1(k, KF_FN_INVERSE_SQRT, kf_add(k, mean, kf_lit_f32(k, sink->rownorm->eps)));
        result = kf_mul(k, result, rstd);
    }
    kf_val off_s = g.id ? kf__mm_batch_offset(k, walk->grid, g, sink->step) : (kf_val){0};
    if (sink->yield) {
        kf_val index = kf_add(k, kf_mul(k, row, kf__u32(k, n)), col);
        kf__yield_f32(k, result, add_offset(k, off_s, index), dtype);
    } else {
        kf_val index = sink->transposed ? kf_add(k, kf_mul(k, col, kf__u32(k, m)), row)
                                        : kf_add(k, kf_mul(k, row, kf__u32(k, n)), col);
        kf__store_or_yield(k, sink->binding, add_offset(k, off_s, index), result, dtype);
    }
    kf_end(k);
}

static void mm_tile_grid(uint32_t rows, uint32_t cols, uint32_t products, uint32_t groups[3]) {
    uint64_t tiles = (uint64_t)((rows + TILE - 1) / TILE) * ((cols + TILE - 1) / TILE);
    kf__grid_1d(tiles * products, 1, groups);
}

static kf_kernel *mm_kernel_new(const char *name, kf_dtype dtype, bool producer) {
    kf_kernel_desc desc = {0};
    desc.name = name;
    desc.workgroup_size[0] = TILE;
    desc.workgroup_size[1] = TILE;
    desc.workgroup_size[2] = 1;
    desc.input = kf_type_scalar(KF_SCALAR_VOID);
    desc.output = producer ? kf__dtype_type(dtype) : kf_type_scalar(KF_SCALAR_VOID);
    return kf_kernel_create(&desc);
}

static kf_kernel *mm_kernel_forward(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {
    mm_dims d;
    kf_status st = mm_dims_of(in, p, true, &d, NULL, 0);
    bool ta = p && p->transpose_a, tb = p && p->transpose_b;
    if (st == KF_OK && (dtype == KF_DTYPE_F32 || (!ta && !tb)) &&
        (uint64_t)d.m * d.n >= BLOCKED_MIN_ELEMENTS) {
        /* Big enough to fill a GPU's registers: the register-blocked kernel (same bindings,
         * same store phase, its own grid recorded), f32 with any transposes (the backward's
         * products) or plain f16 storage. */
        kf_kernel *fast =
            kf__matmul_blocked_transposed(d.m, d.k, d.n, NULL, dtype, &d.batch, ta, tb);
        if (fast) {
            return fast;
        }
    }
    kf_kernel *k = mm_kernel_new("matmul", dtype, true);
    if (!k || st != KF_OK) {
        /* Shapes that do not multiply: no kernel to build (callers check shapes first). */
        kf_kernel_destroy(k);
        return NULL;
    }
    uint32_t groups[3];
    mm_tile_grid(d.m, d.n, kf__mm_batch_count(&d.batch), groups);
    kf_kernel_set_grid(k, groups);
    mm_operand a = {kf__bind(k, "a", dtype, KF_ACCESS_READ), ta, d.m, d.k, {0, 0}, {0, 0}};
    mm_operand b = {kf__bind(k, "b", dtype, KF_ACCESS_READ), tb, d.k, d.n, {0, 0}, {0, 0}};
    mm_sink sink = {.yield = true};
    memcpy(a.step, d.batch.a_step, sizeof a.step);
    memcpy(b.step, d.batch.b_step, sizeof b.step);
    memcpy(sink.step, d.batch.c_step, sizeof sink.step);
    mm_walk walk = {&d.batch, NULL};
    emit_tiled(k, &a, &b, &sink, dtype, &walk);
    return k;
}

/* The kernel a product runs on ctx, chosen here for plans and kf_op_verify alike. A batch whose
 * b is one matrix shared by every product (and a not transposed) is one [B*M, K] x [K, N]
 * product (mm_dims_of folds it). Products of 64x64 outputs and up: f32 (any transposes) on
 * the tile kf_matmul_tune measured for their shape class on this adapter, when it did (same
 * bindings, same store phase); f16 (any transposes) on subgroup matrices (tensor cores) where the
 * device has them ($KF_NO_SGMAT=1: never). Everything else, and any of those that cannot be built:
 * mm_kernel_forward. */
static kf_kernel *mm_kernel_choose(kf_context *ctx, const kf_shape *in, const kf_op_params *p,
                                   kf_dtype dtype) {
    mm_dims d;
    bool ta = p && p->transpose_a, tb = p && p->transpose_b;
    if (ctx && mm_dims_of(in, p, true, &d, NULL, 0) == KF_OK) {
        kf_kernel *k = NULL;
        if (dtype == KF_DTYPE_F32 && (uint64_t)d.m * d.n >= BLOCKED_MIN_ELEMENTS) {
            const kf__mm_config *tuned = kf__matmul_config_for(ctx, d.m, d.k, d.n);
            k = tuned ? kf__matmul_blocked_transposed(d.m, d.k, d.n, tuned, dtype, &d.batch, ta, tb)
                      : NULL;
        } else if (dtype == KF_DTYPE_F16) {
            /* any transposes: the backward's x^T dy and dy w^T run on tensor cores too */
            k = kf__matmul_sgmat_transposed_for(ctx, d.m, d.k, d.n, &d.batch, ta, tb);
        }
        if (k) {
            return k;
        }
    }
    return mm_kernel_forward(in, p, dtype);
}

/* rmsnorm folded into the product (ops/matmul_rownorm.h): the same kernel choice as
 * mm_kernel_choose, less the subgroup-matrix kernel, which has no such variant. */
bool kf__matmul_rownorm_fits(kf_context *ctx, const kf_shape *in, const kf_op_params *p,
                             kf_dtype dtype) {
    mm_dims d;
    if ((dtype != KF_DTYPE_F32 && dtype != KF_DTYPE_F16) || (p && p->transpose_a) ||
        mm_dims_of(in, p, true, &d, NULL, 0) != KF_OK || kf__mm_batch_count(&d.batch) > 1) {
        return false;
    }
    uint32_t sg = 0;
    /* f16 products of any transposes run on the tensor cores where the device has them */
    bool sgmat = dtype == KF_DTYPE_F16 && (uint64_t)d.m * d.n >= 64u * 64u && ctx &&
                 kf__sgmat_usable(ctx, &sg);
    return !sgmat;
}

kf_kernel *kf__matmul_rownorm_kernel(kf_context *ctx, const kf_shape *in, const kf_op_params *p,
                                     kf_dtype dtype, const kf__mm_rownorm *rn) {
    mm_dims d;
    if (!rn || !kf__matmul_rownorm_fits(ctx, in, p, dtype) ||
        mm_dims_of(in, p, true, &d, NULL, 0) != KF_OK) {
        return NULL;
    }
    bool tb = p && p->transpose_b;
    if ((dtype == KF_DTYPE_F32 || !tb) && (uint64_t)d.m * d.n >= BLOCKED_MIN_ELEMENTS) {
        const kf__mm_config *tuned =
            ctx && dtype == KF_DTYPE_F32 ? kf__matmul_config_for(ctx, d.m, d.k, d.n) : NULL;
        kf_kernel *fast = kf__matmul_blocked_rownorm(d.m, d.k, d.n, tuned, dtype, tb, rn);
        fast = fast ? fast : kf__matmul_blocked_rownorm(d.m, d.k, d.n, NULL, dtype, tb, rn);
        if (fast) {
            return fast;
        }
    }
    kf_kernel *k = mm_kernel_new("rmsnorm_matmul", dtype, true);
    if (!k) {
        return NULL;
    }
    uint32_t groups[3];
    mm_tile_grid(d.m, d.n, 1, groups);
    kf_kernel_set_grid(k, groups);
    mm_operand a = {kf__bind(k, "a", dtype, KF_ACCESS_READ), false, d.m, d.k, {0, 0}, {0, 0}};
    mm_operand b = {kf__bind(k, "b", dtype, KF_ACCESS_READ), tb, d.k, d.n, {0, 0}, {0, 0}};
    mm_sink sink = {.yield = true, .rownorm = rn};
    if (rn->has_gain) {
        sink.gain = kf__bind(k, "gain", dtype, KF_ACCESS_READ);
    }
    emit_tiled(k, &a, &b, &sink, dtype, NULL);
    return k;
}

/* The walk of input x's gradient: one result per product of x's own batch (the grid: the
 * result's batch axes along which x is not broadcast), each the sum over the products along
 * the axes it is broadcast (the sum). steps[t] are tensor t's steps over the result's batch axes
 * (t: a, b, dc); the operands' grid and sum steps are split from them. */
typedef struct mm_grad_walk {
    kf__mm_batch grid, sum;
    uint32_t step[3][2], sum_step[3][2]; /* a, b, dc */
} mm_grad_walk;

static void mm_grad_walk_of(const mm_dims *d, uint32_t which, mm_grad_walk *w) {
    memset(w, 0, sizeof *w);
    const kf__mm_batch *bt = &d->batch;
    const uint32_t *steps[3] = {bt->a_step, bt->b_step, bt->c_step};
    for (uint32_t i = 0; i < bt->axes; i++) {
        bool broadcast = steps[which][i] == 0 && bt->dims[i] > 1;
        kf__mm_batch *to = broadcast ? &w->sum : &w->grid;
        uint32_t at = to->axes++;
        to->dims[at] = bt->dims[i];
        for (uint32_t t = 0; t < 3; t++) {
            (broadcast ? w->sum_step : w->step)[t][at] = steps[t][i];
        }
    }
}

/* da and db as products of stored matrices (dc = grad_out, M x N), per product of the batch:
 *   da = dc * op(b)^T            (a plain)       da^T = op(b) * dc^T    (a transposed)
 *   db = op(a)^T * dc            (b plain)       db^T = dc^T * op(a)    (b transposed)
 * op(b)^T is b read as [N, K], transposed unless transpose_b; likewise for a. A broadcast
 * input's gradient sums the products it was broadcast to; where the batch folds into the rows
 * (b shared), db is one [K, B*M] x [B*M, N] product. grad_in valid: stored there (the
 * kernel_backward convention); invalid: yielded (the backward operators' kernel_forward). */
static void mm_emit_backward(kf_kernel *k, const mm_dims *d, const kf_op_params *p, kf_dtype dtype,
                             uint32_t which, kf_binding a, kf_binding b, kf_binding dc,
                             kf_binding grad_in, kf_binding dc_sums) {
    bool ta = p && p->transpose_a, tb = p && p->transpose_b;
    mm_operand left, right;
    mm_sink sink = {.binding = grad_in, .column_sums = dc_sums};
    uint32_t lt, rt;         /* the tensors left and right read: 0 a, 1 b, 2 dc */
    if (which == 0 && !ta) { /* da [M, K] = dc [M, N] * op(b)^T [N, K] */
        left = (mm_operand){.binding = dc, .transposed = false, .rows = d->m, .cols = d->n};
        right = (mm_operand){.binding = b, .transposed = !tb, .rows = d->n, .cols = d->k};
        lt = 2, rt = 1;
    } else if (which == 0) { /* da stored [K, M] = op(b) [K, N] * dc^T [N, M] */
        left = (mm_operand){.binding = b, .transposed = tb, .rows = d->k, .cols = d->n};
        right = (mm_operand){.binding = dc, .transposed = true, .rows = d->n, .cols = d->m};
        lt = 1, rt = 2;
    } else if (!tb) { /* db [K, N] = op(a)^T [K, M] * dc [M, N] */
        left = (mm_operand){.binding = a, .transposed = !ta, .rows = d->k, .cols = d->m};
        right = (mm_operand){.binding = dc, .transposed = false, .rows = d->m, .cols = d->n};
        lt = 0, rt = 2;
    } else { /* db stored [N, K] = dc^T [N, M] * op(a) [M, K] */
        left = (mm_operand){.binding = dc, .transposed = true, .rows = d->n, .cols = d->m};
        right = (mm_operand){.binding = a, .transposed = ta, .rows = d->m, .cols = d->k};
        lt = 2, rt = 0;
    }
    mm_grad_walk w;
    mm_grad_walk_of(d, which, &w);
    memcpy(left.step, w.step[lt], sizeof left.step);
    memcpy(left.sum_step, w.sum_step[lt], sizeof left.sum_step);
    memcpy(right.step, w.step[rt], sizeof right.step);
    memcpy(right.sum_step, w.sum_step[rt], sizeof right.sum_step);
    memcpy(sink.step, w.step[which], sizeof sink.step);
    uint32_t groups[3];
    mm_tile_grid(left.rows, right.cols, kf__mm_batch_count(&w.grid), groups);
    kf_kernel_set_grid(k, groups);
    mm_walk walk = {&w.grid, &w.sum};
    emit_tiled(k, &left, &right, &sink, dtype, &walk);
}

static kf_kernel *mm_kernel_backward(const kf_shape *in, const kf_op_params *p, kf_dtype dtype,
                                     uint32_t which) {
    mm_dims d;
    kf_status st = mm_dims_of(in, p, true, &d, NULL, 0);
    kf_kernel *k =
        mm_kernel_new(which == 0 ? "matmul_backward_a" : "matmul_backward_b", dtype, false);
    if (!k || st != KF_OK || which > 1) {
        kf_kernel_destroy(k);
        return NULL;
    }
    kf_binding a = kf__bind(k, "a", dtype, KF_ACCESS_READ);
    kf_binding b = kf__bind(k, "b", dtype, KF_ACCESS_READ);
    kf__bind(k, "out", dtype, KF_ACCESS_READ);
    kf_binding dc = kf__bind(k, "grad_out", dtype, KF_ACCESS_READ);
    kf_binding grad_in = kf__bind(k, "grad_in", dtype, KF_ACCESS_READ_WRITE);
    mm_emit_backward(k, &d, p, dtype, which, a, b, dc, grad_in, (kf_binding){0});
    return k;
}

static void mm_grid(const kf_shape *in, const kf_op_params *p, int32_t which, uint32_t groups[3]) {
    mm_dims d;
    if (mm_dims_of(in, p, true, &d, NULL, 0) != KF_OK) {
        mm_tile_grid(1, 1, 1, groups);
        return;
    }
    bool ta = p && p->transpose_a, tb = p && p->transpose_b;
    if (which < 0) {
        mm_tile_grid(d.m, d.n, kf__mm_batch_count(&d.batch), groups);
        return;
    }
    mm_grad_walk w;
    mm_grad_walk_of(&d, (uint32_t)which, &w);
    uint32_t products = kf__mm_batch_count(&w.grid);
    if (which == 0) {
        mm_tile_grid(ta ? d.k : d.m, ta ? d.m : d.k, products, groups);
    } else {
        mm_tile_grid(tb ? d.n : d.k, tb ? d.k : d.n, products, groups);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Verification table and operator record                                                   */
/* ---------------------------------------------------------------------------------------- */

#define TA                                                                                         \
    { .transpose_a = true }
#define TB                                                                                         \
    { .transpose_b = true }
#define TAB                                                                                        \
    { .transpose_a = true, .transpose_b = true }

/* M x K x N: 1x1x1; primes; non-multiples of the 16-wide tile on every axis (33x17x31); a K of
 * one tile plus one; every transpose combination; a skinny product; and 2^22 outputs with a short
 * K (2048x8x2048). */
static const kf_op_case mm_cases[] = {
    {.shapes = {SHAPE2(1, 1), SHAPE2(1, 1)}, .note = "1x1x1"},
    {.shapes = {SHAPE2(7, 13), SHAPE2(13, 5)}, .note = "primes 7x13x5"},
    {.shapes = {SHAPE2(33, 17), SHAPE2(17, 31)}, .note = "non-multiples of the tile"},
    {.shapes = {SHAPE2(257, 129), SHAPE2(129, 65)}, .note = "primes past a tile 257x129x65"},
    {.shapes = {SHAPE2(13, 7), SHAPE2(13, 5)}, .params = TA, .note = "a^T"},
    {.shapes = {SHAPE2(7, 13), SHAPE2(5, 13)}, .params = TB, .note = "b^T"},
    {.shapes = {SHAPE2(17, 33), SHAPE2(31, 17)}, .params = TAB, .note = "a^T b^T"},
    {.shapes = {SHAPE2(1, 300), SHAPE2(300, 3)}, .note = "one row, long K"},
    {.shapes = {SHAPE2(2048, 8), SHAPE2(8, 2048)}, .note = "large: 2^22 outputs"},
    /* batched (rank 3 and 4): b shared (folded into one [B*M, K] product), one product per
     * batch element, a broadcast, both broadcast along different axes, attention's q k^T, a
     * transposed a with b shared (a summed db), and a batch the register-blocked kernel runs */
    {.shapes = {SHAPE3(3, 7, 13), SHAPE2(13, 5)}, .note = "batch, b shared"},
    {.shapes = {SHAPE3(1, 1, 1), SHAPE3(1, 1, 1)}, .note = "batch 1x1x1x1"},
    {.shapes = {SHAPE3(2, 17, 9), SHAPE3(2, 9, 33)}, .note = "batch of 2"},
    {.shapes = {SHAPE2(5, 7), SHAPE3(3, 7, 4)}, .note = "batch, a shared"},
    {.shapes = {SHAPE4(2, 1, 5, 7), SHAPE4(1, 3, 7, 6)}, .note = "batch broadcast both ways"},
    {.shapes = {SHAPE4(2, 3, 17, 8), SHAPE4(2, 3, 17, 8)}, .params = TB, .note = "q k^T"},
    {.shapes = {SHAPE3(3, 13, 7), SHAPE2(13, 5)}, .params = TA, .note = "batch a^T, b shared"},
    {.shapes = {SHAPE4(2, 2, 65, 33), SHAPE4(2, 2, 33, 67)}, .note = "batch, blocked kernel"},
};

/* Tolerance (relative error against max(|spec|, 1% of the spec's rms), as kf_op_verify measures
 * it). An output is a dot product of L terms (L = K forward; N or M, up to 2048 in the large case,
 * for the gradients) summed in f32 in blocks of 16 (fma within a tile, then the tile's sum):
 * rounding adds up like a random walk over 16 + L / 16 partial sums of size ~sqrt(L) / 3, so an
 * element's error is ~2^-24 * sqrt(L) / 3 * sqrt(16 + L / 16) while the floor is 0.01 * sqrt(L) /
 * 3; at L = 2048 that is ~1e-5 typical, with the worst of 2^22 elements several times more (7e-5
 * measured on llvmpipe over seeds): 3e-4. f16: inputs are rounded to f16 before the spec sees
 * them, and the spec's output is rounded to f16 too, so what remains is the f32 sum's error and,
 * where it straddles an f16 rounding boundary, a one-ulp difference (2^-10 ~ 9.8e-4 of the value
 * at worst): 2e-3. */
static const kf__param mm_params[] = {
    {.name = "transpose_a", .about = "use a^T", KF__BOOL, KF__FIELD(transpose_a, TRANSPOSE_A)},
    {.name = "transpose_b", .about = "use b^T", KF__BOOL, KF__FIELD(transpose_b, TRANSPOSE_B)},
};
static const kf__input mm_inputs[] = {{.name = "a"}, {.name = "b"}};

const kf_operator kf__op_matmul = {
    .name = "matmul",
    .about = "matrix product op(a) * op(b), op = transpose where transpose_a / transpose_b",
    .op_class = KF_OP_CLASS_MATMUL,
    .arity = 2,
    KF__INPUTS(mm_inputs),
    KF__PARAMS(mm_params),
    .shape = mm_shape,
    .spec_forward = mm_spec_forward,
    .spec_backward = mm_spec_backward,
    .kernel_forward = mm_kernel_forward,
    .kernel_choose = mm_kernel_choose,
    .kernel_backward = mm_kernel_backward,
    .kernel_column_sums = kf__matmul_column_sums_kernel, /* src/ops/column_sums.c */
    .tolerance_f32 = 3e-4,
    .tolerance_f16 = 2e-3,
    .input_lo = -1.0f,
    .input_hi = 1.0f,
    .grid = mm_grid,
    .cases = mm_cases,
    .case_count = (uint32_t)(sizeof mm_cases / sizeof mm_cases[0]),
};

/* ---------------------------------------------------------------------------------------- */
/* Backward operators: the gradient of a broadcast input, summed over its broadcast         */
/* ---------------------------------------------------------------------------------------- */

/* matmul_grad_a(a, b, dy) and matmul_grad_b(a, b, dy): matmul's kernel_backward products as
 * operators, yielding da or db (shaped as a or b) through a store phase. kf_graph_grad uses them
 * for an input broadcast along the batch (b [K, N] shared by every product: db = sum over the
 * batch of op(a)_i^T dy_i, one [K, B*M] x [B*M, N] product when a is not transposed), where a
 * matmul node could not sum; an input with the whole batch gets plain matmul nodes. */
static kf_status mm_grad_shape_a(const kf_shape *in, const kf_op_params *p, kf_shape *out,
                                 char *msg, size_t msg_size) {
    return kf__grad_shape(&kf__op_matmul_grad_a, in, p, out, msg, msg_size);
}
static kf_status mm_grad_shape_b(const kf_shape *in, const kf_op_params *p, kf_shape *out,
                                 char *msg, size_t msg_size) {
    return kf__grad_shape(&kf__op_matmul_grad_b, in, p, out, msg, msg_size);
}
static kf_status mm_grad_spec_a(const kf_tensor *const *in, const kf_op_params *p, kf_tensor *out) {
    return kf__grad_spec_forward(&kf__op_matmul_grad_a, in, p, out);
}
static kf_status mm_grad_spec_b(const kf_tensor *const *in, const kf_op_params *p, kf_tensor *out) {
    return kf__grad_spec_forward(&kf__op_matmul_grad_b, in, p, out);
}

static kf_kernel *mm_grad_kernel(const kf_shape *in, const kf_op_params *p, kf_dtype dtype,
                                 uint32_t which) {
    mm_dims d;
    kf_status st = mm_dims_of(in, p, true, &d, NULL, 0);
    kf_kernel *k = mm_kernel_new(which == 0 ? "matmul_grad_a" : "matmul_grad_b", dtype, true);
    if (!k || st != KF_OK) {
        kf_kernel_destroy(k);
        return NULL;
    }
    kf_binding a = kf__bind(k, "a", dtype, KF_ACCESS_READ);
    kf_binding b = kf__bind(k, "b", dtype, KF_ACCESS_READ);
    kf_binding dy = kf__bind(k, "dy", dtype, KF_ACCESS_READ);
    mm_emit_backward(k, &d, p, dtype, which, a, b, dy, (kf_binding){0}, (kf_binding){0});
    return k;
}

/* db with the column sums of dy (sum_leading(dy): the bias gradient of a batched linear layer)
 * as a second output, for the bias-gradient rule (kf_operator.kernel_column_sums): where db is
 * one result over every row of dy (b shared by the whole batch) read plain (b not transposed). */
static kf_kernel *mm_grad_b_column_sums(const kf_shape *in, const kf_op_params *p, kf_dtype dtype,
                                        uint32_t which) {
    mm_dims d;
    if (which != 2 || (p && p->transpose_b) || mm_dims_of(in, p, true, &d, NULL, 0) != KF_OK) {
        return NULL;
    }
    mm_grad_walk w;
    mm_grad_walk_of(&d, 1, &w);
    if (kf__mm_batch_count(&w.grid) != 1) {
        return NULL;
    }
    kf_kernel *k = mm_kernel_new("matmul_grad_b_column_sums", dtype, true);
    if (!k) {
        return NULL;
    }
    kf_binding a = kf__bind(k, "a", dtype, KF_ACCESS_READ);
    kf_binding b = kf__bind(k, "b", dtype, KF_ACCESS_READ);
    kf_binding dy = kf__bind(k, "dy", dtype, KF_ACCESS_READ);
    kf_binding sums = kf__bind(k, "dy_sums", dtype, KF_ACCESS_READ_WRITE);
    mm_emit_backward(k, &d, p, dtype, 1, a, b, dy, (kf_binding){0}, sums);
    return k;
}
static kf_kernel *mm_grad_kernel_a(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {
    return mm_grad_kernel(in, p, dtype, 0);
}
static kf_kernel *mm_grad_kernel_b(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {
    return mm_grad_kernel(in, p, dtype, 1);
}
static void mm_grad_grid_a(const kf_shape *in, const kf_op_params *p, int32_t which,
                           uint32_t groups[3]) {
    (void)which;
    mm_grid(in, p, 0, groups);
}
static void mm_grad_grid_b(const kf_shape *in, const kf_op_params *p, int32_t which,
                           uint32_t groups[3]) {
    (void)which;
    mm_grid(in, p, 1, groups);
}

/* a, b, dy: the broadcast input in each (1x1x1, transposes, broadcast along both axes), a
 * moderate case, and a large one (dy of 2^22 elements; each result a sum of 4096 products) */
static const kf_op_case mm_grad_a_cases[] = {
    {.shapes = {SHAPE2(1, 1), SHAPE3(2, 1, 1), SHAPE3(2, 1, 1)}, .note = "1x1x1, batch 2"},
    {.shapes = {SHAPE2(5, 7), SHAPE3(3, 7, 4), SHAPE3(3, 5, 4)}, .note = "a shared"},
    {.shapes = {SHAPE2(7, 5), SHAPE3(3, 7, 4), SHAPE3(3, 5, 4)}, .params = TA, .note = "a^T"},
    {.shapes = {SHAPE4(2, 1, 5, 7), SHAPE4(1, 3, 4, 7), SHAPE4(2, 3, 5, 4)},
     .params = TB,
     .note = "broadcast both ways, b^T"},
    {.shapes = {SHAPE2(33, 40), SHAPE3(8, 40, 33), SHAPE3(8, 33, 33)}, .note = "moderate"},
    {.shapes = {SHAPE2(1024, 8), SHAPE3(4, 8, 1024), SHAPE3(4, 1024, 1024)},
     .note = "large: dy of 2^22, sums of 4096"},
};
static const kf_op_case mm_grad_b_cases[] = {
    {.shapes = {SHAPE3(2, 1, 1), SHAPE2(1, 1), SHAPE3(2, 1, 1)}, .note = "1x1x1, batch 2"},
    {.shapes = {SHAPE3(3, 7, 13), SHAPE2(13, 5), SHAPE3(3, 7, 5)}, .note = "b shared (folded)"},
    {.shapes = {SHAPE3(3, 13, 7), SHAPE2(13, 5), SHAPE3(3, 7, 5)}, .params = TA, .note = "a^T"},
    {.shapes = {SHAPE3(3, 7, 13), SHAPE2(5, 13), SHAPE3(3, 7, 5)}, .params = TB, .note = "b^T"},
    {.shapes = {SHAPE4(2, 1, 5, 7), SHAPE4(1, 3, 7, 6), SHAPE4(2, 3, 5, 6)},
     .note = "broadcast both ways"},
    {.shapes = {SHAPE3(8, 33, 64), SHAPE2(64, 40), SHAPE3(8, 33, 40)}, .note = "moderate"},
    {.shapes = {SHAPE3(4, 1024, 8), SHAPE2(8, 1024), SHAPE3(4, 1024, 1024)},
     .note = "large: dy of 2^22, sums of 4096"},
};
static const kf__input mm_grad_inputs[] = {{.name = "a"}, {.name = "b"}, {.name = "dy"}};

/* Tolerances: matmul's (the same kernel; a sum over the broadcast products is a longer dot
 * product, within the lengths matmul's table measures). */
const kf_operator kf__op_matmul_grad_a = {
    .name = "matmul_grad_a",
    .about = "matmul's gradient for a: dy op(b)^T, summed over the batch a was broadcast along",
    .op_class = KF_OP_CLASS_MATMUL,
    .arity = 3,
    KF__INPUTS(mm_grad_inputs),
    KF__PARAMS(mm_params),
    .shape = mm_grad_shape_a,
    .spec_forward = mm_grad_spec_a,
    .kernel_forward = mm_grad_kernel_a,
    .tolerance_f32 = 3e-4,
    .tolerance_f16 = 2e-3,
    .input_lo = -1.0f,
    .input_hi = 1.0f,
    .grid = mm_grad_grid_a,
    .cases = mm_grad_a_cases,
    .case_count = (uint32_t)(sizeof mm_grad_a_cases / sizeof mm_grad_a_cases[0]),
    .grad_of = &kf__op_matmul,
    .grad_input = 0,
};

const kf_operator kf__op_matmul_grad_b = {
    .name = "matmul_grad_b",
    .about = "matmul's gradient for b: op(a)^T dy, summed over the batch b was broadcast along",
    .op_class = KF_OP_CLASS_MATMUL,
    .arity = 3,
    KF__INPUTS(mm_grad_inputs),
    KF__PARAMS(mm_params),
    .shape = mm_grad_shape_b,
    .spec_forward = mm_grad_spec_b,
    .kernel_forward = mm_grad_kernel_b,
    .kernel_column_sums = mm_grad_b_column_sums,
    .tolerance_f32 = 3e-4,
    .tolerance_f16 = 2e-3,
    .input_lo = -1.0f,
    .input_hi = 1.0f,
    .grid = mm_grad_grid_b,
    .cases = mm_grad_b_cases,
    .case_count = (uint32_t)(sizeof mm_grad_b_cases / sizeof mm_grad_b_cases[0]),
    .grad_of = &kf__op_matmul,
    .grad_input = 1,
};
