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
 * Two kernels. The simple tiled one (every transpose, f16, the backward products, small outputs):
 * 16x16 invocations per workgroup, one output element each; the K axis is walked in 16-wide
 * steps through two 16x16 tiles in workgroup memory, loads bounds-checked (zero outside),
 * accumulation in f32. For the plain f32 forward product of 64x64 outputs and up, the
 * register-blocked kernel of matmul_blocked.c (each invocation an 8x8 or 4x4 block). Both hand
 * each element to kf_kernel_yield, their store phase, so a bias, an activation or a residual add
 * fuses into the store.
 */
#include "ops/matmul_blocked.h"
#include "ops/matmul_sgmat.h"
#include "ops/ops_internal.h"

#include <stdio.h>
#include <stdlib.h>

#define TILE 16u
/* From this many output elements up, the forward f32 kernel is the register-blocked one
 * (src/ops/matmul_blocked.c); below it the simple kernel's 16x16 tiles spread better. */
#define BLOCKED_MIN_ELEMENTS (64u * 64u)

/* ---------------------------------------------------------------------------------------- */
/* Shapes                                                                                   */
/* ---------------------------------------------------------------------------------------- */

typedef struct mm_dims {
    uint32_t m, k, n;
} mm_dims;

static kf_status mm_dims_of(const kf_shape *in, const kf_op_params *p, mm_dims *d, char *msg,
                            size_t msg_size) {
    char a[64], b[64];
    bool ta = p && p->transpose_a, tb = p && p->transpose_b;
    if (in[0].rank != 2 || in[1].rank != 2 || !kf__shape_valid(&in[0]) ||
        !kf__shape_valid(&in[1])) {
        return kf__shape_error(
            msg, msg_size, "matmul: both inputs must be matrices: a is %s, b is %s",
            kf_shape_str(&in[0], a, sizeof a), kf_shape_str(&in[1], b, sizeof b));
    }
    uint32_t ka = ta ? in[0].dims[0] : in[0].dims[1];
    uint32_t kb = tb ? in[1].dims[1] : in[1].dims[0];
    if (ka != kb) {
        return kf__shape_error(msg, msg_size, "matmul: inner dims differ: %sa is %s, %sb is %s",
                               ta ? "transposed " : "", kf_shape_str(&in[0], a, sizeof a),
                               tb ? "transposed " : "", kf_shape_str(&in[1], b, sizeof b));
    }
    d->m = ta ? in[0].dims[1] : in[0].dims[0];
    d->k = ka;
    d->n = tb ? in[1].dims[0] : in[1].dims[1];
    if ((uint64_t)d->m * d->n >= (1ull << 32)) {
        return kf__shape_error(msg, msg_size, "matmul: the result %ux%u has 2^32 elements or more",
                               d->m, d->n);
    }
    return KF_OK;
}

static kf_status mm_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out, char *msg,
                          size_t msg_size) {
    mm_dims d = {1, 1, 1};
    kf_status st = mm_dims_of(in, p, &d, msg, msg_size);
    if (st == KF_OK) {
        *out = kf_shape_2d(d.m, d.n);
    }
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Specification                                                                            */
/* ---------------------------------------------------------------------------------------- */

/* Element (i, j) of op(x) for x stored row-major as rows x cols (before the transpose). */
static double at(const kf_tensor *x, bool transposed, uint32_t i, uint32_t j) {
    uint32_t cols = x->shape.dims[1];
    return transposed ? x->data[(uint64_t)j * cols + i] : x->data[(uint64_t)i * cols + j];
}

static kf_status mm_spec_forward(const kf_tensor *const *in, const kf_op_params *p,
                                 kf_tensor *out) {
    if (!in || !in[0] || !in[1] || !out) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_shape shapes[2] = {in[0]->shape, in[1]->shape};
    mm_dims d;
    kf_status st = mm_dims_of(shapes, p, &d, NULL, 0);
    if (st != KF_OK) {
        return st;
    }
    kf_shape want = kf_shape_2d(d.m, d.n);
    if (!kf_shape_eq(&want, &out->shape)) {
        return KF_ERROR_SHAPE;
    }
    bool ta = p && p->transpose_a, tb = p && p->transpose_b;
    for (uint32_t i = 0; i < d.m; i++) {
        for (uint32_t j = 0; j < d.n; j++) {
            double acc = 0;
            for (uint32_t k = 0; k < d.k; k++) {
                acc += at(in[0], ta, i, k) * at(in[1], tb, k, j);
            }
            out->data[(uint64_t)i * d.n + j] = (float)acc;
        }
    }
    return KF_OK;
}

/* da(i, k) = sum_j dc(i, j) op(b)(k, j);  db(k, j) = sum_i op(a)(i, k) dc(i, j); each written
 * where op(x)(r, c) lives in x's storage. */
static kf_status mm_spec_backward(const kf_tensor *const *in, const kf_tensor *out,
                                  const kf_tensor *grad_out, const kf_op_params *p,
                                  kf_tensor *const *grad_in) {
    (void)out;
    if (!in || !in[0] || !in[1] || !grad_out || !grad_in) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_shape shapes[2] = {in[0]->shape, in[1]->shape};
    mm_dims d;
    kf_status st = mm_dims_of(shapes, p, &d, NULL, 0);
    if (st != KF_OK) {
        return st;
    }
    kf_shape want = kf_shape_2d(d.m, d.n);
    if (!kf_shape_eq(&want, &grad_out->shape)) {
        return KF_ERROR_SHAPE;
    }
    bool ta = p && p->transpose_a, tb = p && p->transpose_b;
    const kf_tensor *dc = grad_out;
    if (grad_in[0]) {
        uint32_t a_cols = in[0]->shape.dims[1];
        for (uint32_t i = 0; i < d.m; i++) {
            for (uint32_t k = 0; k < d.k; k++) {
                double acc = 0;
                for (uint32_t j = 0; j < d.n; j++) {
                    acc += at(dc, false, i, j) * at(in[1], tb, k, j);
                }
                uint64_t where = ta ? (uint64_t)k * a_cols + i : (uint64_t)i * a_cols + k;
                grad_in[0]->data[where] = (float)acc;
            }
        }
    }
    if (grad_in[1]) {
        uint32_t b_cols = in[1]->shape.dims[1];
        for (uint32_t k = 0; k < d.k; k++) {
            for (uint32_t j = 0; j < d.n; j++) {
                double acc = 0;
                for (uint32_t i = 0; i < d.m; i++) {
                    acc += at(in[0], ta, i, k) * at(dc, false, i, j);
                }
                uint64_t where = tb ? (uint64_t)j * b_cols + k : (uint64_t)k * b_cols + j;
                grad_in[1]->data[where] = (float)acc;
            }
        }
    }
    return KF_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* The tiled kernel generator                                                               */
/* ---------------------------------------------------------------------------------------- */

/* A factor of the product: a binding read as a rows x cols matrix (its logical shape in the
 * product); transposed means the storage is cols x rows. */
typedef struct mm_operand {
    kf_binding binding;
    bool transposed;
    uint32_t rows, cols;
} mm_operand;

/* Where the generator puts each result element (row, col) of the rows x cols product. */
typedef struct mm_sink {
    bool yield;         /* forward: kf_kernel_yield at row * cols + col */
    kf_binding binding; /* backward: stored here ... */
    bool transposed;    /* ... at col * rows + row when set */
} mm_sink;

/* Element (i, j) of a factor, or 0 outside it: loads only inside the bounds. */
static kf_val load_factor(kf_kernel *k, const mm_operand *x, kf_val i, kf_val j, kf_dtype dtype,
                          const char *name) {
    kf_val inside = kf_binary(k, KF_OP_AND, kf_binary(k, KF_OP_LT, i, kf__u32(k, x->rows)),
                              kf_binary(k, KF_OP_LT, j, kf__u32(k, x->cols)));
    kf_var v = kf_declare(k, name, kf_type_scalar(KF_SCALAR_F32), kf_lit_f32(k, 0));
    kf_if(k, inside);
    kf_val index = x->transposed ? kf_add(k, kf_mul(k, j, kf__u32(k, x->rows)), i)
                                 : kf_add(k, kf_mul(k, i, kf__u32(k, x->cols)), j);
    kf_assign(k, v, kf__load_f32(k, x->binding, index, dtype));
    kf_end(k);
    return kf_read(k, v);
}

/* Emits left * right (left: M x K, right: K x N) into the kernel body: each invocation of a
 * 16x16 workgroup computes one element, and the result goes to the sink. Workgroups are numbered
 * linearly over the tiles of the result, row-major, so a wide or tall result never runs into the
 * per-dimension dispatch limit (the runtime folds a long 1-D grid). */
static void emit_tiled(kf_kernel *k, const mm_operand *left, const mm_operand *right,
                       const mm_sink *sink, kf_dtype dtype) {
    const uint32_t m = left->rows, kk = left->cols, n = right->cols;
    const uint32_t tiles_x = (n + TILE - 1) / TILE;
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_shared tile_l = kf_kernel_workgroup(k, "tile_left", f32, TILE * TILE);
    kf_shared tile_r = kf_kernel_workgroup(k, "tile_right", f32, TILE * TILE);

    kf_val local = kf_builtin_get(k, KF_BUILTIN_LOCAL_ID);
    kf_val lx = kf_let(k, "lx", kf_extract(k, local, 0));
    kf_val ly = kf_let(k, "ly", kf_extract(k, local, 1));
    kf_val tile = kf_let(k, "tile", kf_workgroup_linear(k));
    kf_val tile_row = kf_div(k, tile, kf__u32(k, tiles_x));
    kf_val tile_col = kf_binary(k, KF_OP_MOD, tile, kf__u32(k, tiles_x));
    kf_val row = kf_let(k, "row", kf_add(k, kf_mul(k, tile_row, kf__u32(k, TILE)), ly));
    kf_val col = kf_let(k, "col", kf_add(k, kf_mul(k, tile_col, kf__u32(k, TILE)), lx));
    kf_val slot = kf_let(k, "slot", kf_add(k, kf_mul(k, ly, kf__u32(k, TILE)), lx));

    kf_var acc = kf_declare(k, "acc", f32, kf_lit_f32(k, 0));
    kf_val t = kf_for(k, "t", kf__u32(k, 0), kf__u32(k, kk), kf__u32(k, TILE));
    /* left tile: rows of this workgroup, K columns t..t+15; right tile: K rows t..t+15 */
    kf_val lv = load_factor(k, left, row, kf_add(k, t, lx), dtype, "lv");
    kf_shared_store(k, tile_l, slot, lv);
    kf_val rv = load_factor(k, right, kf_add(k, t, ly), col, dtype, "rv");
    kf_shared_store(k, tile_r, slot, rv);
    kf_barrier(k);
    /* Blocked summation: each tile's 16 products are summed on their own and then added to the
     * total, so rounding grows with 16 + K / 16 additions rather than K. */
    kf_var part = kf_declare(k, "part", f32, kf_lit_f32(k, 0));
    kf_val q = kf_for(k, "q", kf__u32(k, 0), kf__u32(k, TILE), kf__u32(k, 1));
    kf_val a = kf_shared_load(k, tile_l, kf_add(k, kf_mul(k, ly, kf__u32(k, TILE)), q));
    kf_val b = kf_shared_load(k, tile_r, kf_add(k, kf_mul(k, q, kf__u32(k, TILE)), lx));
    kf_assign(k, part, kf_call3(k, KF_FN_FMA, a, b, kf_read(k, part)));
    kf_end(k);
    kf_assign(k, acc, kf_add(k, kf_read(k, acc), kf_read(k, part)));
    /* the next step overwrites the tiles */
    kf_barrier(k);
    kf_end(k);

    kf_val inside = kf_binary(k, KF_OP_AND, kf_binary(k, KF_OP_LT, row, kf__u32(k, m)),
                              kf_binary(k, KF_OP_LT, col, kf__u32(k, n)));
    kf_if(k, inside);
    kf_val result = kf_read(k, acc);
    if (sink->yield) {
        kf__yield_f32(k, result, kf_add(k, kf_mul(k, row, kf__u32(k, n)), col), dtype);
    } else {
        kf_val index = sink->transposed ? kf_add(k, kf_mul(k, col, kf__u32(k, m)), row)
                                        : kf_add(k, kf_mul(k, row, kf__u32(k, n)), col);
        kf__store_f32(k, sink->binding, index, result, dtype);
    }
    kf_end(k);
}

static void mm_tile_grid(uint32_t rows, uint32_t cols, uint32_t groups[3]) {
    uint64_t tiles = (uint64_t)((rows + TILE - 1) / TILE) * ((cols + TILE - 1) / TILE);
    kf__grid_1d(tiles, 1, groups);
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
    mm_dims d = {1, 1, 1};
    kf_status st = mm_dims_of(in, p, &d, NULL, 0);
    bool ta = p && p->transpose_a, tb = p && p->transpose_b;
    if (st == KF_OK && !ta && !tb && (uint64_t)d.m * d.n >= BLOCKED_MIN_ELEMENTS) {
        /* Big enough to fill a GPU's registers: the register-blocked kernel (same bindings,
         * same store phase, its own grid recorded), f32 or f16 storage. */
        kf_kernel *fast = kf__matmul_blocked_typed(d.m, d.k, d.n, NULL, dtype);
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
    mm_tile_grid(d.m, d.n, groups);
    kf_kernel_set_grid(k, groups);
    mm_operand a = {kf__bind(k, "a", dtype, KF_ACCESS_READ), ta, d.m, d.k};
    mm_operand b = {kf__bind(k, "b", dtype, KF_ACCESS_READ), tb, d.k, d.n};
    mm_sink sink = {.yield = true};
    emit_tiled(k, &a, &b, &sink, dtype);
    return k;
}

/* The kernel a product runs on ctx, chosen here for plans and kf_op_verify alike. Plain (no
 * transpose) products of 64x64 outputs and up: f32 on the tile kf_matmul_tune measured for their
 * shape class on this adapter, when it did (same bindings, same store phase); f16 on subgroup
 * matrices (tensor cores) where the device has them ($KF_NO_SGMAT=1: never). Everything else, and
 * any of those that cannot be built: mm_kernel_forward. */
static kf_kernel *mm_kernel_choose(kf_context *ctx, const kf_shape *in, const kf_op_params *p,
                                   kf_dtype dtype) {
    mm_dims d = {1, 1, 1};
    bool plain = !(p && (p->transpose_a || p->transpose_b));
    if (ctx && plain && mm_dims_of(in, p, &d, NULL, 0) == KF_OK) {
        kf_kernel *k = NULL;
        if (dtype == KF_DTYPE_F32 && (uint64_t)d.m * d.n >= BLOCKED_MIN_ELEMENTS) {
            const kf__mm_config *tuned = kf__matmul_config_for(ctx, d.m, d.k, d.n);
            k = tuned ? kf__matmul_blocked(d.m, d.k, d.n, tuned) : NULL;
        } else if (dtype == KF_DTYPE_F16) {
            k = kf__matmul_sgmat_for(ctx, d.m, d.k, d.n);
        }
        if (k) {
            return k;
        }
    }
    return mm_kernel_forward(in, p, dtype);
}

/* da and db as products of stored matrices (dc = grad_out, M x N):
 *   da = dc * op(b)^T            (a plain)       da^T = op(b) * dc^T    (a transposed)
 *   db = op(a)^T * dc            (b plain)       db^T = dc^T * op(a)    (b transposed)
 * op(b)^T is b read as [N, K], transposed unless transpose_b; likewise for a. */
static kf_kernel *mm_kernel_backward(const kf_shape *in, const kf_op_params *p, kf_dtype dtype,
                                     uint32_t which) {
    mm_dims d = {1, 1, 1};
    kf_status st = mm_dims_of(in, p, &d, NULL, 0);
    kf_kernel *k =
        mm_kernel_new(which == 0 ? "matmul_backward_a" : "matmul_backward_b", dtype, false);
    if (!k || st != KF_OK || which > 1) {
        kf_kernel_destroy(k);
        return NULL;
    }
    bool ta = p && p->transpose_a, tb = p && p->transpose_b;
    kf_binding a = kf__bind(k, "a", dtype, KF_ACCESS_READ);
    kf_binding b = kf__bind(k, "b", dtype, KF_ACCESS_READ);
    kf__bind(k, "out", dtype, KF_ACCESS_READ);
    kf_binding dc = kf__bind(k, "grad_out", dtype, KF_ACCESS_READ);
    kf_binding grad_in = kf__bind(k, "grad_in", dtype, KF_ACCESS_READ_WRITE);
    mm_operand left, right;
    mm_sink sink = {.binding = grad_in};
    if (which == 0 && !ta) { /* da [M, K] = dc [M, N] * op(b)^T [N, K] */
        left = (mm_operand){dc, false, d.m, d.n};
        right = (mm_operand){b, !tb, d.n, d.k};
    } else if (which == 0) { /* da stored [K, M] = op(b) [K, N] * dc^T [N, M] */
        left = (mm_operand){b, tb, d.k, d.n};
        right = (mm_operand){dc, true, d.n, d.m};
    } else if (!tb) { /* db [K, N] = op(a)^T [K, M] * dc [M, N] */
        left = (mm_operand){a, !ta, d.k, d.m};
        right = (mm_operand){dc, false, d.m, d.n};
    } else { /* db stored [N, K] = dc^T [N, M] * op(a) [M, K] */
        left = (mm_operand){dc, true, d.n, d.m};
        right = (mm_operand){a, ta, d.m, d.k};
    }
    uint32_t groups[3];
    mm_tile_grid(left.rows, right.cols, groups);
    kf_kernel_set_grid(k, groups);
    emit_tiled(k, &left, &right, &sink, dtype);
    return k;
}

static void mm_grid(const kf_shape *in, const kf_op_params *p, int32_t which, uint32_t groups[3]) {
    mm_dims d = {1, 1, 1};
    mm_dims_of(in, p, &d, NULL, 0);
    bool ta = p && p->transpose_a, tb = p && p->transpose_b;
    if (which < 0) {
        mm_tile_grid(d.m, d.n, groups);
    } else if (which == 0) {
        mm_tile_grid(ta ? d.k : d.m, ta ? d.m : d.k, groups);
    } else {
        mm_tile_grid(tb ? d.n : d.k, tb ? d.k : d.n, groups);
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
