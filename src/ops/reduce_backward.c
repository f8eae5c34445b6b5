/* Reductions for training, and the backward operators of the row reductions.
 *
 * Forward operators:
 *   sum_leading(x)        [..., n] -> [n]: the sum over every axis but the last (a bias's
 *                         gradient); its gradient is dy broadcast back along the rows.
 *   sum_to(x, like)       x summed over the axes along which `like` broadcasts onto x (as the
 *                         element-wise operators broadcast: a scalar, a row [n] or [1, .., n], a
 *                         column [..., 1]); the result has like's shape. The gradient of a
 *                         broadcast input. like is read for its shape only.
 *   broadcast_to(x, like) x broadcast onto like's shape (element-wise; like read for its shape):
 *                         sum_to's gradient, and sum_to is its.
 * Backward operators (kf_operator.grad_of; inputs: the forward's, then dy):
 *   sum_grad, mean_grad, max_grad (x, dy), softmax_grad, log_softmax_grad (x, dy), and
 *   cross_entropy_grad (logits, labels, dy): their kernels are the forward operators' backward
 *   kernels (reduce.c, loss.c) with the gradient yielded, so an element-wise tail fuses into them.
 *
 * Column sums (sum_leading, sum_to over rows): one invocation per column walks the rows in
 * blocks of 64 (rounding grows with 64 + rows / 64 additions, not rows), neighbouring invocations
 * reading neighbouring columns. Tolerances: an f32 sum of up to 4096 terms of [-1, 1), as sum's
 * (1e-4 against the floor).
 */
#include "ops/rowwise.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define COLUMN_BLOCK 64u

/* ---------------------------------------------------------------------------------------- */
/* Column sums                                                                              */
/* ---------------------------------------------------------------------------------------- */

/* The sum over rows of x viewed as rows x cols, yielded at each column; x is binding "x", and
 * `extra` (if not NULL) a second read binding declared after it (sum_to's like). */
static kf_kernel *column_sum_kernel(const char *name, uint64_t rows, uint32_t cols, kf_dtype dtype,
                                    const char *extra) {
    kf_kernel *k = kf__kernel_1d(name, kf__dtype_type(dtype), cols);
    if (!k) {
        return NULL;
    }
    kf_binding x = kf__bind(k, "x", dtype, KF_ACCESS_READ);
    if (extra) {
        kf__bind(k, extra, dtype, KF_ACCESS_READ);
    }
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_val col = kf__each_element(k, "col", cols);
    kf_var total = kf_declare(k, "total", f32, kf_lit_f32(k, 0));
    kf_val block = kf_for(k, "block", kf__u32(k, 0), kf__u32(k, rows), kf__u32(k, COLUMN_BLOCK));
    kf_var part = kf_declare(k, "part", f32, kf_lit_f32(k, 0));
    kf_val end =
        kf_call2(k, KF_FN_MIN, kf_add(k, block, kf__u32(k, COLUMN_BLOCK)), kf__u32(k, rows));
    kf_val r = kf_for(k, "r", block, end, kf__u32(k, 1));
    kf_val at = kf_add(k, kf_mul(k, r, kf__u32(k, cols)), col);
    kf_assign(k, part, kf_add(k, kf_read(k, part), kf__load_f32(k, x, at, dtype)));
    kf_end(k);
    kf_assign(k, total, kf_add(k, kf_read(k, total), kf_read(k, part)));
    kf_end(k);
    kf__yield_f32(k, kf_read(k, total), col, dtype);
    kf_end(k);
    return k;
}

/* ---------------------------------------------------------------------------------------- */
/* sum_leading                                                                              */
/* ---------------------------------------------------------------------------------------- */

static kf_status sum_leading_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out,
                                   char *msg, size_t msg_size) {
    (void)p;
    char a[64];
    if (!kf__shape_valid(&in[0]) || in[0].rank == 0) {
        return kf__shape_error(msg, msg_size, "sum_leading: needs a tensor of rank 1 to 4, got %s",
                               kf_shape_str(&in[0], a, sizeof a));
    }
    *out = kf_shape_1d(in[0].dims[in[0].rank - 1]);
    return KF_OK;
}

static kf_status sum_leading_spec_forward(const kf_tensor *const *in, const kf_op_params *p,
                                          kf_tensor *out) {
    kf_status st = kf__spec_check_out(&kf__op_sum_leading, in, p, out);
    if (st != KF_OK) {
        return st;
    }
    uint64_t rows;
    uint32_t cols;
    kf__shape_rows_cols(&in[0]->shape, &rows, &cols);
    for (uint32_t c = 0; c < cols; c++) {
        double acc = 0;
        for (uint64_t r = 0; r < rows; r++) {
            acc += in[0]->data[r * cols + c];
        }
        out->data[c] = (float)acc;
    }
    return KF_OK;
}

static kf_status sum_leading_spec_backward(const kf_tensor *const *in, const kf_tensor *out,
                                           const kf_tensor *grad_out, const kf_op_params *p,
                                           kf_tensor *const *grad_in) {
    (void)out;
    kf_status st = kf__spec_check_out(&kf__op_sum_leading, in, p, grad_out);
    if (st != KF_OK || !grad_in || !grad_in[0]) {
        return st != KF_OK ? st : KF_ERROR_INVALID_ARGUMENT;
    }
    uint64_t n = kf_tensor_size(in[0]);
    uint32_t cols = (uint32_t)kf_tensor_size(grad_out);
    for (uint64_t i = 0; i < n; i++) {
        grad_in[0]->data[i] = grad_out->data[i % cols];
    }
    return KF_OK;
}

static kf_kernel *sum_leading_kernel_forward(const kf_shape *in, const kf_op_params *p,
                                             kf_dtype dtype) {
    (void)p;
    uint64_t rows;
    uint32_t cols;
    kf__shape_rows_cols(&in[0], &rows, &cols);
    return column_sum_kernel("sum_leading", rows, cols, dtype, NULL);
}

/* dx[i] = dy[i % cols] under the kernel_backward convention (x, out, grad_out, grad_in). */
static kf_kernel *sum_leading_kernel_backward(const kf_shape *in, const kf_op_params *p,
                                              kf_dtype dtype, uint32_t which) {
    (void)p;
    if (which != 0) {
        return NULL;
    }
    uint64_t n = kf_shape_elements(&in[0]);
    uint32_t cols = in[0].rank ? in[0].dims[in[0].rank - 1] : 1;
    kf_kernel *k = kf__kernel_1d("sum_leading_backward", kf_type_scalar(KF_SCALAR_VOID), n);
    if (!k) {
        return NULL;
    }
    kf__bind(k, "x", dtype, KF_ACCESS_READ);
    kf__bind(k, "out", dtype, KF_ACCESS_READ);
    kf_binding dy = kf__bind(k, "grad_out", dtype, KF_ACCESS_READ);
    kf_binding dx = kf__bind(k, "grad_in", dtype, KF_ACCESS_READ_WRITE);
    kf_val i = kf__each_element(k, "i", n);
    kf_val v = kf__load_f32(k, dy, kf_binary(k, KF_OP_MOD, i, kf__u32(k, cols)), dtype);
    kf__store_f32(k, dx, i, v, dtype);
    kf_end(k);
    return k;
}

static void sum_leading_grid(const kf_shape *in, const kf_op_params *p, int32_t which,
                             uint32_t groups[3]) {
    (void)p;
    if (which < 0) {
        kf__grid_1d(in[0].rank ? in[0].dims[in[0].rank - 1] : 1, KF__WORKGROUP, groups);
    } else {
        kf__grid_1d(kf_shape_elements(&in[0]), KF__WORKGROUP, groups);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* sum_to and broadcast_to                                                                  */
/* ---------------------------------------------------------------------------------------- */

/* like broadcasts onto x (an element-wise operator would read like at x's elements). */
static kf_status sum_to_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out, char *msg,
                              size_t msg_size) {
    (void)p;
    char a[64], b[64];
    if (!kf__shape_valid(&in[0]) || !kf__shape_valid(&in[1]) ||
        kf_shape_elements(&in[1]) > kf_shape_elements(&in[0]) ||
        kf__broadcast_kind(&in[1], &in[0]) == KF__BCAST_NONE) {
        return kf__shape_error(msg, msg_size,
                               "sum_to: %s does not broadcast onto %s (a scalar, a row [n] or "
                               "[1, ..., n], or a column [..., 1] of it)",
                               kf_shape_str(&in[1], a, sizeof a),
                               kf_shape_str(&in[0], b, sizeof b));
    }
    *out = in[1];
    return KF_OK;
}

static uint64_t bcast_at(kf__bcast kind, uint64_t i, uint32_t cols) {
    return kind == KF__BCAST_SCALAR ? 0
           : kind == KF__BCAST_ROW  ? i % cols
           : kind == KF__BCAST_COL  ? i / cols
                                    : i;
}

static kf_status sum_to_spec_forward(const kf_tensor *const *in, const kf_op_params *p,
                                     kf_tensor *out) {
    kf_status st = kf__spec_check_out(&kf__op_sum_to, in, p, out);
    if (st != KF_OK) {
        return st;
    }
    uint64_t n = kf_tensor_size(in[0]), m = kf_tensor_size(out);
    double *acc = calloc((size_t)m, sizeof *acc);
    if (!acc) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    kf__bcast kind = kf__broadcast_kind(&in[1]->shape, &in[0]->shape);
    uint32_t cols;
    kf__shape_rows_cols(&in[0]->shape, NULL, &cols);
    for (uint64_t i = 0; i < n; i++) {
        acc[bcast_at(kind, i, cols)] += in[0]->data[i];
    }
    for (uint64_t j = 0; j < m; j++) {
        out->data[j] = (float)acc[j];
    }
    free(acc);
    return KF_OK;
}

/* dx = dy broadcast back; like gets no gradient (only its shape is read). */
static kf_status sum_to_spec_backward(const kf_tensor *const *in, const kf_tensor *out,
                                      const kf_tensor *grad_out, const kf_op_params *p,
                                      kf_tensor *const *grad_in) {
    (void)out;
    kf_status st = kf__spec_check_out(&kf__op_sum_to, in, p, grad_out);
    if (st != KF_OK || !grad_in) {
        return st != KF_OK ? st : KF_ERROR_INVALID_ARGUMENT;
    }
    kf__bcast kind = kf__broadcast_kind(&in[1]->shape, &in[0]->shape);
    uint32_t cols;
    kf__shape_rows_cols(&in[0]->shape, NULL, &cols);
    uint64_t n = kf_tensor_size(in[0]);
    for (uint64_t i = 0; grad_in[0] && i < n; i++) {
        grad_in[0]->data[i] = grad_out->data[bcast_at(kind, i, cols)];
    }
    uint64_t m = kf_tensor_size(in[1]);
    for (uint64_t j = 0; grad_in[1] && j < m; j++) {
        grad_in[1]->data[j] = 0.0f;
    }
    return KF_OK;
}

/* A copy of x into the output (sum_to of equal shapes). */
static kf_kernel *copy_kernel(uint64_t n, kf_dtype dtype) {
    kf_kernel *k = kf__kernel_1d("sum_to", kf__dtype_type(dtype), n);
    if (!k) {
        return NULL;
    }
    kf_binding x = kf__bind(k, "x", dtype, KF_ACCESS_READ);
    kf__bind(k, "like", dtype, KF_ACCESS_READ);
    kf_val i = kf__each_element(k, "i", n);
    kf__yield_f32(k, kf__load_f32(k, x, i, dtype), i, dtype);
    kf_end(k);
    return k;
}

/* Row sums where like is a column, column sums where it is a row, one row of everything where it
 * is a scalar: the output's linear index is the reduced row's or column's in each case. */
static kf_kernel *sum_to_kernel_forward(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {
    kf_shape out;
    if (sum_to_shape(in, p, &out, NULL, 0) != KF_OK) {
        return NULL;
    }
    kf__bcast kind = kf__broadcast_kind(&in[1], &in[0]);
    uint64_t rows, n = kf_shape_elements(&in[0]);
    uint32_t cols;
    kf__shape_rows_cols(&in[0], &rows, &cols);
    if (kind == KF__BCAST_FULL) {
        return copy_kernel(n, dtype);
    }
    if (kind == KF__BCAST_ROW) {
        return column_sum_kernel("sum_to", rows, cols, dtype, "like");
    }
    kf_shape view = kind == KF__BCAST_SCALAR ? kf_shape_1d((uint32_t)n) : in[0];
    kf_kernel *k = kf__op_sum.kernel_forward(&view, p, dtype);
    if (k) {
        kf__bind(k, "like", dtype, KF_ACCESS_READ);
    }
    return k;
}

static void sum_to_grid(const kf_shape *in, const kf_op_params *p, int32_t which,
                        uint32_t groups[3]) {
    (void)which;
    kf_kernel *k = sum_to_kernel_forward(in, p, KF_DTYPE_F32);
    groups[0] = groups[1] = groups[2] = 1;
    if (k) {
        kf_kernel_grid(k, groups);
    }
    kf_kernel_destroy(k);
}

/* broadcast_to(x, like): element-wise, out = x at its broadcast element; like only shapes. */
static kf_status broadcast_to_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out,
                                    char *msg, size_t msg_size) {
    (void)p;
    char a[64], b[64];
    if (!kf__shape_valid(&in[0]) || !kf__shape_valid(&in[1]) ||
        kf_shape_elements(&in[0]) > kf_shape_elements(&in[1]) ||
        kf__broadcast_kind(&in[0], &in[1]) == KF__BCAST_NONE) {
        return kf__shape_error(msg, msg_size,
                               "broadcast_to: %s does not broadcast onto %s (a scalar, a row [n] "
                               "or [1, ..., n], or a column [..., 1] of it)",
                               kf_shape_str(&in[0], a, sizeof a),
                               kf_shape_str(&in[1], b, sizeof b));
    }
    *out = in[1];
    return KF_OK;
}

static double broadcast_to_f(const double *x, const kf_op_params *p) {
    (void)p;
    return x[0];
}
static double broadcast_to_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    (void)x, (void)y, (void)p;
    return which == 0 ? 1.0 : 0.0;
}
static kf_val broadcast_to_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    (void)k, (void)p;
    return x[0];
}
static kf_val broadcast_to_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g,
                                         uint32_t which, const kf_op_params *p) {
    (void)x, (void)y, (void)p;
    return which == 0 ? g : kf_lit_f32(k, 0.0f);
}
static kf_status broadcast_to_spec_forward(const kf_tensor *const *in, const kf_op_params *p,
                                           kf_tensor *out) {
    return kf__ew_spec_forward(broadcast_to_f, 2, in, p, out);
}
static kf_status broadcast_to_spec_backward(const kf_tensor *const *in, const kf_tensor *out,
                                            const kf_tensor *grad_out, const kf_op_params *p,
                                            kf_tensor *const *grad_in) {
    return kf__ew_spec_backward(broadcast_to_df, 2, in, out, grad_out, p, grad_in);
}
static kf_kernel *broadcast_to_kernel_forward(const kf_shape *in, const kf_op_params *p,
                                              kf_dtype dtype) {
    return kf__ew_kernel_forward(&kf__op_broadcast_to, in, p, dtype);
}
static kf_kernel *broadcast_to_kernel_backward(const kf_shape *in, const kf_op_params *p,
                                               kf_dtype dtype, uint32_t which) {
    return kf__ew_kernel_backward(&kf__op_broadcast_to, in, p, dtype, which);
}
static void broadcast_to_grid(const kf_shape *in, const kf_op_params *p, int32_t which,
                              uint32_t groups[3]) {
    (void)p;
    kf__ew_grid(in, 2, which, groups);
}

/* ---------------------------------------------------------------------------------------- */
/* Backward operators of the row reductions                                                 */
/* ---------------------------------------------------------------------------------------- */

KF__GRAD_GLUE(sum_grad)
KF__GRAD_GLUE(mean_grad)
KF__GRAD_GLUE(max_grad)
KF__GRAD_GLUE(softmax_grad)
KF__GRAD_GLUE(log_softmax_grad)
KF__GRAD_GLUE(cross_entropy_grad)

static kf_kernel *sum_grad_kernel(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {
    (void)p;
    return kf__reduce_grad_kernel("sum_grad", KF__REDUCE_SUM, &in[0], dtype);
}
static kf_kernel *mean_grad_kernel(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {
    (void)p;
    return kf__reduce_grad_kernel("mean_grad", KF__REDUCE_MEAN, &in[0], dtype);
}
static kf_kernel *max_grad_kernel(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {
    (void)p;
    return kf__reduce_grad_kernel("max_grad", KF__REDUCE_MAX, &in[0], dtype);
}
static kf_kernel *softmax_grad_kernel(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {
    (void)p;
    return kf__softmax_grad_kernel("softmax_grad", false, &in[0], dtype);
}
static kf_kernel *log_softmax_grad_kernel(const kf_shape *in, const kf_op_params *p,
                                          kf_dtype dtype) {
    (void)p;
    return kf__softmax_grad_kernel("log_softmax_grad", true, &in[0], dtype);
}
static kf_kernel *cross_entropy_grad_kernel(const kf_shape *in, const kf_op_params *p,
                                            kf_dtype dtype) {
    (void)p;
    return kf__cross_entropy_grad_kernel(in, dtype);
}

/* one invocation per element of x */
static void elements_grid(const kf_shape *in, const kf_op_params *p, int32_t which,
                          uint32_t groups[3]) {
    (void)p, (void)which;
    kf__grid_1d(kf_shape_elements(&in[0]), KF__WORKGROUP, groups);
}
/* a row kernel over x */
static void rows_grid(const kf_shape *in, const kf_op_params *p, int32_t which,
                      uint32_t groups[3]) {
    (void)p, (void)which;
    kf__rows_grid(&in[0], groups);
}

/* ---------------------------------------------------------------------------------------- */
/* Verification tables and operator records                                                 */
/* ---------------------------------------------------------------------------------------- */

#define CASES(table) .cases = table, .case_count = sizeof table / sizeof table[0]

static const kf_op_case sum_leading_cases[] = {
    {.shapes = {SHAPE2(1, 1)}, .note = "1x1"},
    {.shapes = {SHAPE2(7, 13)}, .note = "primes"},
    {.shapes = {SHAPE2(257, 129)}, .note = "primes past a workgroup"},
    {.shapes = {SHAPE2(600, 7)}, .note = "long columns"},
    {.shapes = {SHAPE2(3, 300)}, .note = "more columns than a workgroup"},
    {.shapes = {SHAPE1(1000)}, .note = "rank 1 (no leading axis)"},
    {.shapes = {SHAPE3(3, 5, 7)}, .note = "rank 3"},
    {.shapes = {SHAPE2(4096, 1024)}, .note = "large: 2^22 elements"},
};

/* {x, like}: every broadcast kind, rank 4, and 2^22 elements */
static const kf_op_case sum_to_cases[] = {
    {.shapes = {SHAPE2(7, 13), SHAPE2(7, 13)}, .note = "same shape"},
    {.shapes = {SHAPE2(7, 13), SHAPE1(1)}, .note = "scalar"},
    {.shapes = {SHAPE2(257, 129), SHAPE0}, .note = "rank-0 scalar"},
    {.shapes = {SHAPE2(257, 129), SHAPE1(129)}, .note = "row (bias)"},
    {.shapes = {SHAPE2(257, 129), SHAPE2(1, 129)}, .note = "row [1, n]"},
    {.shapes = {SHAPE2(257, 129), SHAPE2(257, 1)}, .note = "column"},
    {.shapes = {SHAPE4(3, 5, 7, 11), SHAPE4(3, 5, 7, 1)}, .note = "rank 4, column"},
    {.shapes = {SHAPE2(2048, 2049), SHAPE1(2049)}, .note = "large, row"},
};

/* {x, like}, the mirror of sum_to's */
static const kf_op_case broadcast_to_cases[] = {
    {.shapes = {SHAPE2(7, 13), SHAPE2(7, 13)}, .note = "same shape"},
    {.shapes = {SHAPE1(1), SHAPE2(7, 13)}, .note = "scalar"},
    {.shapes = {SHAPE0, SHAPE0}, .note = "rank 0 (a loss's seed)"},
    {.shapes = {SHAPE1(129), SHAPE2(257, 129)}, .note = "row (bias)"},
    {.shapes = {SHAPE2(257, 1), SHAPE2(257, 129)}, .note = "column"},
    {.shapes = {SHAPE4(3, 5, 7, 1), SHAPE4(3, 5, 7, 11)}, .note = "rank 4, column"},
    {.shapes = {SHAPE1(2049), SHAPE2(2048, 2049)}, .note = "large, row"},
};

/* {x, dy}: the row kernels' width classes and 2^22 elements */
static const kf_op_case reduce_grad_cases[] = {
    {.shapes = {SHAPE2(1, 1), SHAPE1(1)}, .note = "1x1"},
    {.shapes = {SHAPE2(7, 13), SHAPE1(7)}, .note = "primes"},
    {.shapes = {SHAPE2(33, 17), SHAPE1(33)}, .note = "spare rows in the last workgroup"},
    {.shapes = {SHAPE2(5, 300), SHAPE1(5)}, .note = "rows longer than 256 lanes"},
    {.shapes = {SHAPE1(1000), SHAPE0}, .note = "rank 1"},
    {.shapes = {SHAPE3(3, 5, 7), SHAPE2(3, 5)}, .note = "rank 3"},
    {.shapes = {SHAPE2(1024, 4096), SHAPE1(1024)}, .note = "large: 2^22 elements"},
};
static const kf_op_case softmax_grad_cases[] = {
    {.shapes = {SHAPE2(1, 1), SHAPE2(1, 1)}, .note = "1x1"},
    {.shapes = {SHAPE2(7, 13), SHAPE2(7, 13)}, .note = "primes"},
    {.shapes = {SHAPE2(33, 17), SHAPE2(33, 17)}, .note = "spare rows in the last workgroup"},
    {.shapes = {SHAPE2(5, 300), SHAPE2(5, 300)}, .note = "rows longer than 256 lanes"},
    {.shapes = {SHAPE1(1000), SHAPE1(1000)}, .note = "rank 1"},
    {.shapes = {SHAPE3(3, 5, 7), SHAPE3(3, 5, 7)}, .note = "rank 3"},
    {.shapes = {SHAPE2(1024, 4096), SHAPE2(1024, 4096)}, .note = "large: 2^22 elements"},
};

/* {logits, labels, dy (rank 0)} */
static const kf_op_case ce_grad_cases[] = {
    {.shapes = {SHAPE2(1, 1), SHAPE1(1), SHAPE0}, .note = "1x1"},
    {.shapes = {SHAPE2(7, 13), SHAPE1(7), SHAPE0}, .note = "primes"},
    {.shapes = {SHAPE2(257, 129), SHAPE1(257), SHAPE0}, .note = "primes past a workgroup"},
    {.shapes = {SHAPE2(5, 300), SHAPE1(5), SHAPE0}, .note = "rows longer than 256 lanes"},
    {.shapes = {SHAPE1(10), SHAPE0, SHAPE0}, .note = "one row of logits"},
    {.shapes = {SHAPE2(4096, 1024), SHAPE1(4096), SHAPE0}, .note = "large: 2^22 logits"},
};

const kf_operator kf__op_sum_leading = {
    .name = "sum_leading",
    .about = "sum over every axis but the last ([..., n] -> [n]): a bias's gradient",
    .op_class = KF_OP_CLASS_ROW_REDUCTION,
    .arity = 1,
    .shape = sum_leading_shape,
    .spec_forward = sum_leading_spec_forward,
    .spec_backward = sum_leading_spec_backward,
    .kernel_forward = sum_leading_kernel_forward,
    .kernel_backward = sum_leading_kernel_backward,
    .tolerance_f32 = 1e-4,
    .tolerance_f16 = 2e-3,
    .input_lo = -1.0f,
    .input_hi = 1.0f,
    .grid = sum_leading_grid,
    CASES(sum_leading_cases),
};

const kf_operator kf__op_sum_to = {
    .name = "sum_to",
    .about = "x summed over the axes along which like broadcasts onto it (like's shape)",
    .op_class = KF_OP_CLASS_ROW_REDUCTION,
    .arity = 2,
    .shape_inputs = 1u << 1, /* like */
    .shape = sum_to_shape,
    .spec_forward = sum_to_spec_forward,
    .spec_backward = sum_to_spec_backward,
    .kernel_forward = sum_to_kernel_forward,
    .tolerance_f32 = 1e-4,
    .tolerance_f16 = 2e-3,
    .input_lo = -1.0f,
    .input_hi = 1.0f,
    .grid = sum_to_grid,
    CASES(sum_to_cases),
};

const kf_operator kf__op_broadcast_to = {
    .name = "broadcast_to",
    .about = "x broadcast onto like's shape (like is read for its shape only)",
    .op_class = KF_OP_CLASS_ELEMENTWISE,
    .arity = 2,
    .shape_inputs = 1u << 1, /* like */
    .shape = broadcast_to_shape,
    .spec_forward = broadcast_to_spec_forward,
    .spec_backward = broadcast_to_spec_backward,
    .kernel_forward = broadcast_to_kernel_forward,
    .kernel_backward = broadcast_to_kernel_backward,
    .expr = broadcast_to_expr,
    .expr_backward = broadcast_to_expr_backward,
    /* a copy forward; backward sums a broadcast as add's does */
    .tolerance_f32 = 2e-4,
    .tolerance_f16 = 2e-3,
    .input_lo = -4.0f,
    .input_hi = 4.0f,
    .grid = broadcast_to_grid,
    CASES(broadcast_to_cases),
};

#define ROW_GRAD_OP(NAME, FWD, ABOUT, TOL32, LO, HI, GRID, TABLE, INDEX)                           \
    const kf_operator kf__op_##NAME = {.name = #NAME,                                              \
                                       .about = ABOUT,                                             \
                                       .op_class = KF_OP_CLASS_ROW_REDUCTION,                      \
                                       .arity = kf__op_##FWD##_arity + 1,                          \
                                       .shape = NAME##_shape,                                      \
                                       .spec_forward = NAME##_spec,                                \
                                       .kernel_forward = NAME##_kernel,                            \
                                       .tolerance_f32 = TOL32,                                     \
                                       .tolerance_f16 = 2e-3,                                      \
                                       .input_lo = LO,                                             \
                                       .input_hi = HI,                                             \
                                       .grid = GRID,                                               \
                                       .index_inputs = INDEX,                                      \
                                       CASES(TABLE),                                               \
                                       .grad_of = &kf__op_##FWD,                                   \
                                       .grad_input = 0}

#define kf__op_sum_arity 1
#define kf__op_mean_arity 1
#define kf__op_max_arity 1
#define kf__op_softmax_arity 1
#define kf__op_log_softmax_arity 1
#define kf__op_cross_entropy_arity 2

/* Tolerances: the forward operators' backward ones (reduce.c, loss.c): the same kernels. */
ROW_GRAD_OP(sum_grad, sum, "sum's gradient: dy broadcast along the last axis", 1e-4, -1.0f, 1.0f,
            elements_grid, reduce_grad_cases, 0u);
ROW_GRAD_OP(mean_grad, mean, "mean's gradient: dy / n broadcast along the last axis", 1e-4, -1.0f,
            1.0f, elements_grid, reduce_grad_cases, 0u);
ROW_GRAD_OP(max_grad, max, "max's gradient: dy at the row's first argmax (or NaN), else 0", 1e-6,
            -1.0f, 1.0f, rows_grid, reduce_grad_cases, 0u);
ROW_GRAD_OP(softmax_grad, softmax, "softmax's gradient: y (dy - sum(dy y)), y = softmax(x)", 1e-4,
            -4.0f, 4.0f, rows_grid, softmax_grad_cases, 0u);
ROW_GRAD_OP(log_softmax_grad, log_softmax,
            "log_softmax's gradient: dy - softmax(x) sum(dy), softmax recomputed from x", 1e-4,
            -4.0f, 4.0f, rows_grid, softmax_grad_cases, 0u);
ROW_GRAD_OP(cross_entropy_grad, cross_entropy,
            "cross_entropy's gradient for the logits: (softmax - onehot(label)) dy / rows", 1e-4,
            -4.0f, 4.0f, rows_grid, ce_grad_cases, 1u << 1);
