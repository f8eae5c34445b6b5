/* Reductions over the last axis: sum, mean, max, softmax and log_softmax.
 *
 * Shapes: x is viewed as rows x cols (cols = the last dim). sum, mean and max drop the last axis
 * (a rank-1 input gives a rank-0 scalar); softmax and log_softmax keep x's shape.
 *
 * NaN and infinity: sum, mean, softmax and log_softmax are arithmetic and propagate them as IEEE
 * arithmetic does (a NaN anywhere in a row makes the whole softmax row NaN; a +inf makes it NaN
 * too, since inf - inf is NaN). max propagates NaN: a row holding a NaN has max NaN. WGSL's max()
 * leaves NaN implementation-defined, so kernels compare by hand (kf__max_nan) and test NaN by its
 * bits. max's gradient goes to the first maximal element, or to the first NaN when there is one.
 *
 * Kernels: one workgroup handles one or more rows (rowwise.h); lanes stride over the row,
 * workgroup memory combines them (f32, also for f16 storage), and every output element goes
 * through kf_kernel_yield so an element-wise tail can fuse into the store. softmax and
 * log_softmax's forward kernels hold rows of up to 8192 elements in registers, so x is read from
 * memory once.
 */
#include "ops/rowwise.h"

#include <math.h>
#include <stdlib.h>

typedef enum reduce_kind { REDUCE_SUM, REDUCE_MEAN, REDUCE_MAX } reduce_kind;

/* ---------------------------------------------------------------------------------------- */
/* Shape rules                                                                              */
/* ---------------------------------------------------------------------------------------- */

static kf_status check_input(const kf_shape *x, const char *op, char *msg, size_t msg_size) {
    if (!kf__shape_valid(x)) {
        char buf[64];
        return kf__shape_error(msg, msg_size, "%s: invalid input shape %s", op,
                               kf_shape_str(x, buf, sizeof buf));
    }
    return KF_OK;
}

static kf_status shape_drop_last(const kf_shape *in, const char *op, kf_shape *out, char *msg,
                                 size_t msg_size) {
    kf_status st = check_input(&in[0], op, msg, msg_size);
    if (st == KF_OK) {
        *out = kf__shape_drop_last(&in[0]);
    }
    return st;
}

static kf_status sum_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out, char *msg,
                           size_t msg_size) {
    (void)p;
    return shape_drop_last(in, "sum", out, msg, msg_size);
}

static kf_status mean_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out, char *msg,
                            size_t msg_size) {
    (void)p;
    return shape_drop_last(in, "mean", out, msg, msg_size);
}

static kf_status max_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out, char *msg,
                           size_t msg_size) {
    (void)p;
    return shape_drop_last(in, "max", out, msg, msg_size);
}

static kf_status softmax_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out, char *msg,
                               size_t msg_size) {
    (void)p;
    kf_status st = check_input(&in[0], "softmax", msg, msg_size);
    if (st == KF_OK) {
        *out = in[0];
    }
    return st;
}

static kf_status log_softmax_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out,
                                   char *msg, size_t msg_size) {
    (void)p;
    kf_status st = check_input(&in[0], "log_softmax", msg, msg_size);
    if (st == KF_OK) {
        *out = in[0];
    }
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Specifications                                                                           */
/* ---------------------------------------------------------------------------------------- */

/* The index of the first NaN of the row, else of its first maximal element. */
static uint32_t spec_argmax(const float *row, uint32_t cols) {
    uint32_t best = 0;
    for (uint32_t c = 1; c < cols && !isnan(row[best]); c++) {
        if (isnan(row[c]) || row[c] > row[best]) {
            best = c;
        }
    }
    return best;
}

static kf_status reduce_spec_forward(const kf_operator *op, reduce_kind kind,
                                     const kf_tensor *const *in, const kf_op_params *p,
                                     kf_tensor *out) {
    kf_status st = kf__spec_check_out(op, in, p, out);
    if (st != KF_OK) {
        return st;
    }
    uint64_t rows;
    uint32_t cols;
    kf__shape_rows_cols(&in[0]->shape, &rows, &cols);
    for (uint64_t r = 0; r < rows; r++) {
        const float *x = in[0]->data + r * cols;
        double acc = kind == REDUCE_MAX ? x[0] : 0.0;
        for (uint32_t c = 0; c < cols; c++) {
            acc = kind == REDUCE_MAX ? kf__spec_max(acc, x[c]) : acc + x[c];
        }
        out->data[r] = (float)(kind == REDUCE_MEAN ? acc / cols : acc);
    }
    return KF_OK;
}

static kf_status reduce_spec_backward(const kf_operator *op, reduce_kind kind,
                                      const kf_tensor *const *in, const kf_tensor *grad_out,
                                      const kf_op_params *p, kf_tensor *const *grad_in) {
    kf_status st = kf__spec_check_out(op, in, p, grad_out);
    if (st != KF_OK || !grad_in || !grad_in[0]) {
        return st != KF_OK ? st : KF_ERROR_INVALID_ARGUMENT;
    }
    uint64_t rows;
    uint32_t cols;
    kf__shape_rows_cols(&in[0]->shape, &rows, &cols);
    for (uint64_t r = 0; r < rows; r++) {
        const float *x = in[0]->data + r * cols;
        float *dx = grad_in[0]->data + r * cols;
        double g = grad_out->data[r];
        uint32_t argmax = kind == REDUCE_MAX ? spec_argmax(x, cols) : 0;
        for (uint32_t c = 0; c < cols; c++) {
            switch (kind) {
            case REDUCE_SUM:
                dx[c] = (float)g;
                break;
            case REDUCE_MEAN:
                dx[c] = (float)(g / cols);
                break;
            case REDUCE_MAX:
                dx[c] = c == argmax ? (float)g : 0.0f;
                break;
            }
        }
    }
    return KF_OK;
}

static kf_status sum_spec_forward(const kf_tensor *const *in, const kf_op_params *p,
                                  kf_tensor *out) {
    return reduce_spec_forward(&kf__op_sum, REDUCE_SUM, in, p, out);
}
static kf_status mean_spec_forward(const kf_tensor *const *in, const kf_op_params *p,
                                   kf_tensor *out) {
    return reduce_spec_forward(&kf__op_mean, REDUCE_MEAN, in, p, out);
}
static kf_status max_spec_forward(const kf_tensor *const *in, const kf_op_params *p,
                                  kf_tensor *out) {
    return reduce_spec_forward(&kf__op_max, REDUCE_MAX, in, p, out);
}
static kf_status sum_spec_backward(const kf_tensor *const *in, const kf_tensor *out,
                                   const kf_tensor *grad_out, const kf_op_params *p,
                                   kf_tensor *const *grad_in) {
    (void)out;
    return reduce_spec_backward(&kf__op_sum, REDUCE_SUM, in, grad_out, p, grad_in);
}
static kf_status mean_spec_backward(const kf_tensor *const *in, const kf_tensor *out,
                                    const kf_tensor *grad_out, const kf_op_params *p,
                                    kf_tensor *const *grad_in) {
    (void)out;
    return reduce_spec_backward(&kf__op_mean, REDUCE_MEAN, in, grad_out, p, grad_in);
}
static kf_status max_spec_backward(const kf_tensor *const *in, const kf_tensor *out,
                                   const kf_tensor *grad_out, const kf_op_params *p,
                                   kf_tensor *const *grad_in) {
    (void)out;
    return reduce_spec_backward(&kf__op_max, REDUCE_MAX, in, grad_out, p, grad_in);
}

/* softmax of one row in float64, the numerically stable way: exp(x - max) / sum. A NaN max
 * (a NaN in the row) makes every element NaN, as in the kernel. */
static void spec_softmax_row(const float *x, uint32_t cols, double *y) {
    double m = x[0];
    for (uint32_t c = 0; c < cols; c++) {
        m = kf__spec_max(m, x[c]);
    }
    double s = 0;
    for (uint32_t c = 0; c < cols; c++) {
        y[c] = exp(x[c] - m);
        s += y[c];
    }
    for (uint32_t c = 0; c < cols; c++) {
        y[c] /= s;
    }
}

/* log_softmax of one row in float64: (x - max) - log(sum exp(x - max)). */
static void spec_log_softmax_row(const float *x, uint32_t cols, double *y) {
    double m = x[0];
    for (uint32_t c = 0; c < cols; c++) {
        m = kf__spec_max(m, x[c]);
    }
    double s = 0;
    for (uint32_t c = 0; c < cols; c++) {
        s += exp(x[c] - m);
    }
    for (uint32_t c = 0; c < cols; c++) {
        y[c] = (x[c] - m) - log(s);
    }
}

static kf_status softmax_spec_common(const kf_operator *op, bool log_form,
                                     const kf_tensor *const *in, const kf_op_params *p,
                                     kf_tensor *out) {
    kf_status st = kf__spec_check_out(op, in, p, out);
    if (st != KF_OK) {
        return st;
    }
    uint64_t rows;
    uint32_t cols;
    kf__shape_rows_cols(&in[0]->shape, &rows, &cols);
    double *y = malloc(sizeof *y * cols);
    if (!y) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    for (uint64_t r = 0; r < rows; r++) {
        const float *x = in[0]->data + r * cols;
        if (log_form) {
            spec_log_softmax_row(x, cols, y);
        } else {
            spec_softmax_row(x, cols, y);
        }
        for (uint32_t c = 0; c < cols; c++) {
            out->data[r * cols + c] = (float)y[c];
        }
    }
    free(y);
    return KF_OK;
}

static kf_status softmax_spec_forward(const kf_tensor *const *in, const kf_op_params *p,
                                      kf_tensor *out) {
    return softmax_spec_common(&kf__op_softmax, false, in, p, out);
}
static kf_status log_softmax_spec_forward(const kf_tensor *const *in, const kf_op_params *p,
                                          kf_tensor *out) {
    return softmax_spec_common(&kf__op_log_softmax, true, in, p, out);
}

/* softmax:     dx = y * (dy - sum(dy * y)),   y = softmax(x)
 * log_softmax: dx = dy - softmax(x) * sum(dy)
 * The spec recomputes softmax(x) in float64 rather than trusting the given output. */
static kf_status softmax_spec_backward_common(const kf_operator *op, bool log_form,
                                              const kf_tensor *const *in, const kf_tensor *grad_out,
                                              const kf_op_params *p, kf_tensor *const *grad_in) {
    kf_status st = kf__spec_check_out(op, in, p, grad_out);
    if (st != KF_OK || !grad_in || !grad_in[0]) {
        return st != KF_OK ? st : KF_ERROR_INVALID_ARGUMENT;
    }
    uint64_t rows;
    uint32_t cols;
    kf__shape_rows_cols(&in[0]->shape, &rows, &cols);
    double *y = malloc(sizeof *y * cols);
    if (!y) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    for (uint64_t r = 0; r < rows; r++) {
        const float *x = in[0]->data + r * cols;
        const float *dy = grad_out->data + r * cols;
        float *dx = grad_in[0]->data + r * cols;
        spec_softmax_row(x, cols, y);
        double s = 0;
        for (uint32_t c = 0; c < cols; c++) {
            s += log_form ? dy[c] : dy[c] * y[c];
        }
        for (uint32_t c = 0; c < cols; c++) {
            dx[c] = (float)(log_form ? dy[c] - y[c] * s : y[c] * (dy[c] - s));
        }
    }
    free(y);
    return KF_OK;
}

static kf_status softmax_spec_backward(const kf_tensor *const *in, const kf_tensor *out,
                                       const kf_tensor *grad_out, const kf_op_params *p,
                                       kf_tensor *const *grad_in) {
    (void)out;
    return softmax_spec_backward_common(&kf__op_softmax, false, in, grad_out, p, grad_in);
}
static kf_status log_softmax_spec_backward(const kf_tensor *const *in, const kf_tensor *out,
                                           const kf_tensor *grad_out, const kf_op_params *p,
                                           kf_tensor *const *grad_in) {
    (void)out;
    return softmax_spec_backward_common(&kf__op_log_softmax, true, in, grad_out, p, grad_in);
}

/* ---------------------------------------------------------------------------------------- */
/* Kernels                                                                                  */
/* ---------------------------------------------------------------------------------------- */

/* The row's max (NaN-propagating), each lane starting from the row's first element so that a
 * lane with no element of its own holds a real value of the row. */
static kf_val row_max(kf__rows *r, kf_binding x) {
    kf_kernel *k = r->k;
    kf_var acc = kf_declare(k, "max_acc", kf_type_scalar(KF_SCALAR_F32),
                            kf__load_f32(k, x, r->base, r->dtype));
    kf_val i = kf__rows_for(r, "i");
    kf_val v = kf_let(k, "v", kf__load_f32(k, x, kf_add(k, r->base, i), r->dtype));
    kf_assign(k, acc, kf__max_nan(k, kf_read(k, acc), v));
    kf_end(k);
    return kf__rows_max(r, kf_read(k, acc));
}

static kf_kernel *reduce_kernel_forward(const char *name, reduce_kind kind, const kf_shape *in,
                                        kf_dtype dtype) {
    kf__rows r;
    kf_kernel *k = kf__rows_begin(&r, name, &in[0], dtype, true);
    if (!k) {
        return NULL;
    }
    kf_binding x = kf__bind(k, "x", dtype, KF_ACCESS_READ);
    kf_val result;
    if (kind == REDUCE_MAX) {
        result = row_max(&r, x);
    } else {
        kf_var acc = kf_declare(k, "acc", kf_type_scalar(KF_SCALAR_F32), kf_lit_f32(k, 0));
        kf_val i = kf__rows_for(&r, "i");
        kf_val v = kf__load_f32(k, x, kf_add(k, r.base, i), dtype);
        kf_assign(k, acc, kf_add(k, kf_read(k, acc), v));
        kf_end(k);
        result = kf__rows_sum(&r, kf_read(k, acc));
        if (kind == REDUCE_MEAN) {
            result = kf_div(k, result, kf_lit_f32(k, (float)r.cols));
        }
    }
    kf_if(k, kf_binary(k, KF_OP_AND, r.valid, kf_binary(k, KF_OP_EQ, r.lane, kf__u32(k, 0))));
    kf__yield_f32(k, result, r.row, dtype);
    kf_end(k);
    return k;
}

static kf_kernel *sum_kernel_forward(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {
    (void)p;
    return reduce_kernel_forward("sum", REDUCE_SUM, in, dtype);
}
static kf_kernel *mean_kernel_forward(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {
    (void)p;
    return reduce_kernel_forward("mean", REDUCE_MEAN, in, dtype);
}
static kf_kernel *max_kernel_forward(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {
    (void)p;
    return reduce_kernel_forward("max", REDUCE_MAX, in, dtype);
}

/* Declares the backward bindings every kernel of a one-input op has: x, out, grad_out, grad_in. */
typedef struct unary_backward_bindings {
    kf_binding x, out, grad_out, grad_in;
} unary_backward_bindings;

static unary_backward_bindings bind_unary_backward(kf_kernel *k, kf_dtype dtype, bool producer) {
    unary_backward_bindings b = {0};
    b.x = kf__bind(k, "x", dtype, KF_ACCESS_READ);
    if (producer) {
        /* a backward operator (reduce_backward.c): x, dy, then the yielded gradient */
        b.grad_out = kf__bind(k, "dy", dtype, KF_ACCESS_READ);
        return b;
    }
    b.out = kf__bind(k, "out", dtype, KF_ACCESS_READ);
    b.grad_out = kf__bind(k, "grad_out", dtype, KF_ACCESS_READ);
    b.grad_in = kf__bind(k, "grad_in", dtype, KF_ACCESS_READ_WRITE);
    return b;
}

/* sum and mean: dx[r, c] = dy[r] (/ cols): one invocation per element, no reduction. */
static kf_kernel *broadcast_kernel_backward(const char *name, bool mean, const kf_shape *in,
                                            kf_dtype dtype, bool producer) {
    uint64_t rows;
    uint32_t cols;
    kf__shape_rows_cols(&in[0], &rows, &cols);
    uint64_t total = rows * cols;
    kf_kernel_desc desc = {0};
    desc.name = name;
    desc.workgroup_size[0] = KF__WORKGROUP;
    desc.input = kf_type_scalar(KF_SCALAR_VOID);
    desc.output = producer ? kf__dtype_type(dtype) : kf_type_scalar(KF_SCALAR_VOID);
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    uint32_t groups[3];
    kf__grid_1d(total, KF__WORKGROUP, groups);
    kf_kernel_set_grid(k, groups);
    unary_backward_bindings b = bind_unary_backward(k, dtype, producer);
    kf_val idx = kf_let(k, "idx", kf_global_linear(k));
    kf_if(k, kf_binary(k, KF_OP_LT, idx, kf__u32(k, total)));
    kf_val g = kf__load_f32(k, b.grad_out, kf_div(k, idx, kf__u32(k, cols)), dtype);
    if (mean) {
        g = kf_div(k, g, kf_lit_f32(k, (float)cols));
    }
    kf__store_or_yield(k, b.grad_in, idx, g, dtype);
    kf_end(k);
    return k;
}

/* Whether candidate (bv, bi) beats (av, ai) for max's gradient: NaN first (the earliest), then
 * the larger value, then the earlier index. A total order, so any tree gives the spec's answer. */
static kf_val argmax_beats(kf_kernel *k, kf_val bv, kf_val bi, kf_val av, kf_val ai) {
    kf_val bnan = kf_let(k, "b_nan", kf__isnan(k, bv));
    kf_val anan = kf_let(k, "a_nan", kf__isnan(k, av));
    kf_val earlier = kf_binary(k, KF_OP_LT, bi, ai);
    kf_val nan_wins = kf_binary(k, KF_OP_AND, bnan,
                                kf_binary(k, KF_OP_OR, kf_unary(k, KF_OP_NOT, anan), earlier));
    kf_val numbers =
        kf_binary(k, KF_OP_AND, kf_unary(k, KF_OP_NOT, bnan), kf_unary(k, KF_OP_NOT, anan));
    kf_val larger = kf_binary(k, KF_OP_OR, kf_binary(k, KF_OP_GT, bv, av),
                              kf_binary(k, KF_OP_AND, kf_binary(k, KF_OP_EQ, bv, av), earlier));
    return kf_let(k, "beats",
                  kf_binary(k, KF_OP_OR, nan_wins, kf_binary(k, KF_OP_AND, numbers, larger)));
}

static void combine_argmax(kf_kernel *k, const kf_val *a, const kf_val *b, uint32_t n,
                           kf_val *out) {
    (void)n;
    kf_val beats = argmax_beats(k, b[0], b[1], a[0], a[1]);
    out[0] = kf_select(k, a[0], b[0], beats);
    out[1] = kf_select(k, a[1], b[1], beats);
}

/* max: the row's gradient goes to its argmax (the spec's rule), zeros elsewhere. */
static kf_kernel *max_kernel_backward_build(const char *name, const kf_shape *in, kf_dtype dtype,
                                            bool producer) {
    kf__rows r;
    kf_kernel *k = kf__rows_begin(&r, name, &in[0], dtype, producer);
    if (!k) {
        return NULL;
    }
    unary_backward_bindings b = bind_unary_backward(k, dtype, producer);
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32), u32 = kf_type_scalar(KF_SCALAR_U32);
    kf_var best = kf_declare(k, "best", f32, kf__load_f32(k, b.x, r.base, dtype));
    kf_var best_at = kf_declare(k, "best_at", u32, kf__u32(k, 0));
    kf_val i = kf__rows_for(&r, "i");
    kf_val v = kf_let(k, "v", kf__load_f32(k, b.x, kf_add(k, r.base, i), dtype));
    kf_val cur = kf_let(k, "cur", kf_read(k, best));
    kf_val cur_at = kf_let(k, "cur_at", kf_read(k, best_at));
    kf_val beats = argmax_beats(k, v, i, cur, cur_at);
    kf_if(k, beats);
    kf_assign(k, best, v);
    kf_assign(k, best_at, i);
    kf_end(k);
    kf_end(k);
    kf_val partial[2] = {kf_read(k, best), kf_read(k, best_at)};
    kf_val reduced[2];
    kf__rows_reduce(&r, 2, partial, combine_argmax, reduced);
    kf_val g = kf_let(k, "g", kf__load_f32(k, b.grad_out, r.row, dtype));
    kf_if(k, r.valid);
    kf_val j = kf__rows_for(&r, "j");
    kf_val dx = kf_select(k, kf_lit_f32(k, 0), g, kf_binary(k, KF_OP_EQ, j, reduced[1]));
    kf__store_or_yield(k, b.grad_in, kf_add(k, r.base, j), dx, dtype);
    kf_end(k);
    kf_end(k);
    return k;
}

static kf_kernel *sum_kernel_backward(const kf_shape *in, const kf_op_params *p, kf_dtype dtype,
                                      uint32_t which) {
    (void)p;
    (void)which;
    return broadcast_kernel_backward("sum_backward", false, in, dtype, false);
}
static kf_kernel *mean_kernel_backward(const kf_shape *in, const kf_op_params *p, kf_dtype dtype,
                                       uint32_t which) {
    (void)p;
    (void)which;
    return broadcast_kernel_backward("mean_backward", true, in, dtype, false);
}
static kf_kernel *max_kernel_backward(const kf_shape *in, const kf_op_params *p, kf_dtype dtype,
                                      uint32_t which) {
    (void)p;
    (void)which;
    return max_kernel_backward_build("max_backward", in, dtype, false);
}

static void reduce_grid(const kf_shape *in, const kf_op_params *p, int32_t which,
                        uint32_t groups[3]) {
    (void)p;
    kf__rows_grid(&in[0], groups);
    (void)which;
}

/* softmax and log_softmax: the forward kernel holds rows in registers where they fit. */
static void softmax_grid(const kf_shape *in, const kf_op_params *p, int32_t which,
                         uint32_t groups[3]) {
    (void)p;
    if (which < 0) {
        kf__rows_regs_grid(&in[0], groups);
    } else {
        kf__rows_grid(&in[0], groups);
    }
}

/* sum and mean's backward is one invocation per element. */
static void broadcast_grid(const kf_shape *in, const kf_op_params *p, int32_t which,
                           uint32_t groups[3]) {
    (void)p;
    if (which < 0) {
        kf__rows_grid(&in[0], groups);
    } else {
        kf__grid_1d(kf_shape_elements(&in[0]), KF__WORKGROUP, groups);
    }
}

/* softmax over a row held in registers (r->chunks > 0): the row is read once; the lane's max,
 * the row's max (one reduction), the lane's sum of exp(x - m) kept in the registers (softmax)
 * or not (log_softmax), the row's sum (a second), then the yields from registers. */
static void softmax_regs(kf__rows *r, bool log_form, kf_binding x) {
    kf_kernel *k = r->k;
    kf_var regs[KF__ROWS_MAX_CHUNKS];
    kf__rows_load(r, x, regs);
    /* every chunk holds real elements of the row (a ragged one repeats the row's last unit), so
     * the lane's max needs no masking */
    kf_val m = kf__rows_lane(k, kf_read(k, regs[0]), 0);
    for (uint32_t c = 0; c < r->chunks; c++) {
        kf_val v = kf_read(k, regs[c]);
        for (uint32_t j = c ? 0 : 1; j < r->width; j++) {
            m = kf_let(k, "m", kf__max_nan(k, m, kf__rows_lane(k, v, j)));
        }
    }
    kf_val row_m = kf__rows_max(r, m);
    kf_val acc = kf_lit_f32(k, 0);
    for (uint32_t c = 0; c < r->chunks; c++) {
        kf_val e = kf_let(k, "e", kf_call1(k, KF_FN_EXP, kf_sub(k, kf_read(k, regs[c]), row_m)));
        if (!log_form) {
            kf_assign(k, regs[c], e); /* softmax yields e / s: one exp per element */
        }
        kf_val term = kf__rows_hsum(k, e);
        kf_val inside = kf__rows_unit_inside(r, c);
        if (inside.id) {
            term = kf_select(k, kf_lit_f32(k, 0), term, inside);
        }
        acc = kf_let(k, "exp_sum", kf_add(k, acc, term));
    }
    kf_val s = kf__rows_sum(r, acc);
    kf_val log_s = log_form ? kf_let(k, "log_s", kf_call1(k, KF_FN_LOG, s)) : s;
    kf_val ys[KF__ROWS_MAX_CHUNKS];
    for (uint32_t c = 0; c < r->chunks; c++) {
        kf_val v = kf_read(k, regs[c]);
        kf_val y = log_form ? kf_sub(k, kf_sub(k, v, row_m), log_s) : kf_div(k, v, s);
        ys[c] = kf_let(k, "y", y);
    }
    kf__rows_yield_all(r, ys);
}

/* softmax: y = exp(x - m) / s; log_softmax: y = (x - m) - log(s); m the row's max, s the sum of
 * exp(x - m). Rows that fit in registers are read once (softmax_regs); longer ones take two
 * passes over the row before the yielding one (x is re-read). */
static kf_kernel *softmax_kernel_forward_build(const char *name, bool log_form, const kf_shape *in,
                                               kf_dtype dtype) {
    kf__rows r;
    kf_kernel *k = kf__rows_begin_regs(&r, name, &in[0], dtype, true);
    if (!k) {
        return NULL;
    }
    kf_binding x = kf__rows_bind(&r, "x");
    if (r.chunks > 0) {
        softmax_regs(&r, log_form, x);
        return k;
    }
    kf_val m = row_max(&r, x);
    kf_var acc = kf_declare(k, "acc", kf_type_scalar(KF_SCALAR_F32), kf_lit_f32(k, 0));
    kf_val i = kf__rows_for(&r, "i");
    kf_val v = kf__load_f32(k, x, kf_add(k, r.base, i), dtype);
    kf_assign(k, acc, kf_add(k, kf_read(k, acc), kf_call1(k, KF_FN_EXP, kf_sub(k, v, m))));
    kf_end(k);
    kf_val s = kf__rows_sum(&r, kf_read(k, acc));
    kf_val log_s = log_form ? kf_let(k, "log_s", kf_call1(k, KF_FN_LOG, s)) : s;
    kf_if(k, r.valid);
    kf_val j = kf__rows_for(&r, "j");
    kf_val at = kf_let(k, "at", kf_add(k, r.base, j));
    kf_val shifted = kf_sub(k, kf__load_f32(k, x, at, dtype), m);
    kf_val y = log_form ? kf_sub(k, shifted, log_s) : kf_div(k, kf_call1(k, KF_FN_EXP, shifted), s);
    kf__yield_f32(k, y, at, dtype);
    kf_end(k);
    kf_end(k);
    return k;
}

static kf_kernel *softmax_kernel_forward(const kf_shape *in, const kf_op_params *p,
                                         kf_dtype dtype) {
    (void)p;
    return softmax_kernel_forward_build("softmax", false, in, dtype);
}
static kf_kernel *log_softmax_kernel_forward(const kf_shape *in, const kf_op_params *p,
                                             kf_dtype dtype) {
    (void)p;
    return softmax_kernel_forward_build("log_softmax", true, in, dtype);
}

/* softmax:     dx = y * (dy - sum(dy * y))
 * log_softmax: dx = dy - y * sum(dy)
 * with y = softmax(x) recomputed from x in f32, as the spec recomputes it in float64: the stored
 * output may be f16 (2^-11 relative), and dy - s cancels, so reading it back would carry that
 * rounding into every gradient. Four passes over the row: max, sum of exp, the gradient's sum,
 * then the gradient. */
static kf_kernel *softmax_kernel_backward_build(const char *name, bool log_form, const kf_shape *in,
                                                kf_dtype dtype, bool producer) {
    kf__rows r;
    kf_kernel *k = kf__rows_begin(&r, name, &in[0], dtype, producer);
    if (!k) {
        return NULL;
    }
    unary_backward_bindings b = bind_unary_backward(k, dtype, producer);
    kf_val m = row_max(&r, b.x);
    kf_var e = kf_declare(k, "exp_acc", kf_type_scalar(KF_SCALAR_F32), kf_lit_f32(k, 0));
    kf_val i = kf__rows_for(&r, "i");
    kf_val v = kf__load_f32(k, b.x, kf_add(k, r.base, i), dtype);
    kf_assign(k, e, kf_add(k, kf_read(k, e), kf_call1(k, KF_FN_EXP, kf_sub(k, v, m))));
    kf_end(k);
    kf_val es = kf__rows_sum(&r, kf_read(k, e));
    kf_var acc = kf_declare(k, "acc", kf_type_scalar(KF_SCALAR_F32), kf_lit_f32(k, 0));
    kf_val i2 = kf__rows_for(&r, "i");
    kf_val at = kf_let(k, "at", kf_add(k, r.base, i2));
    kf_val dy = kf__load_f32(k, b.grad_out, at, dtype);
    kf_val term = dy;
    if (!log_form) {
        kf_val y =
            kf_div(k, kf_call1(k, KF_FN_EXP, kf_sub(k, kf__load_f32(k, b.x, at, dtype), m)), es);
        term = kf_mul(k, dy, y);
    }
    kf_assign(k, acc, kf_add(k, kf_read(k, acc), term));
    kf_end(k);
    kf_val s = kf__rows_sum(&r, kf_read(k, acc));
    kf_if(k, r.valid);
    kf_val j = kf__rows_for(&r, "j");
    kf_val at2 = kf_let(k, "at", kf_add(k, r.base, j));
    kf_val y2 = kf_let(
        k, "y",
        kf_div(k, kf_call1(k, KF_FN_EXP, kf_sub(k, kf__load_f32(k, b.x, at2, dtype), m)), es));
    kf_val dy2 = kf_let(k, "dy", kf__load_f32(k, b.grad_out, at2, dtype));
    kf_val dx = log_form ? kf_sub(k, dy2, kf_mul(k, y2, s)) : kf_mul(k, y2, kf_sub(k, dy2, s));
    kf__store_or_yield(k, b.grad_in, at2, dx, dtype);
    kf_end(k);
    kf_end(k);
    return k;
}

static kf_kernel *softmax_kernel_backward(const kf_shape *in, const kf_op_params *p, kf_dtype dtype,
                                          uint32_t which) {
    (void)p;
    (void)which;
    return softmax_kernel_backward_build("softmax_backward", false, in, dtype, false);
}
static kf_kernel *log_softmax_kernel_backward(const kf_shape *in, const kf_op_params *p,
                                              kf_dtype dtype, uint32_t which) {
    (void)p;
    (void)which;
    return softmax_kernel_backward_build("log_softmax_backward", true, in, dtype, false);
}

/* The backward kernels as backward operators build them (reduce_backward.c): x, dy, then the
 * yielded gradient. */
kf_kernel *kf__reduce_grad_kernel(const char *name, uint32_t kind, const kf_shape *x,
                                  kf_dtype dtype) {
    if (kind == KF__REDUCE_MAX) {
        return max_kernel_backward_build(name, x, dtype, true);
    }
    return broadcast_kernel_backward(name, kind == KF__REDUCE_MEAN, x, dtype, true);
}

kf_kernel *kf__softmax_grad_kernel(const char *name, bool log_form, const kf_shape *x,
                                   kf_dtype dtype) {
    return softmax_kernel_backward_build(name, log_form, x, dtype, true);
}

/* ---------------------------------------------------------------------------------------- */
/* Verification tables and operator records                                                 */
/* ---------------------------------------------------------------------------------------- */

/* Rows of every width class the row kernels distinguish: one lane (cols 1), a partial lane tree
 * (13, 17), more than 256 lanes with a ragged end (300), a last workgroup with spare rows (33 rows
 * of 17: 8 rows per workgroup), rank 1 and 3, the register bounds of softmax's forward kernel
 * (rowwise.h: 8192 as vec4, 4096 as scalars) and just past them, and 2^22 elements. */
static const kf_op_case reduce_cases[] = {
    {.shapes = {SHAPE2(1, 1)}, .note = "1x1"},
    {.shapes = {SHAPE2(7, 13)}, .note = "primes"},
    {.shapes = {SHAPE2(257, 129)}, .note = "primes past a workgroup"},
    {.shapes = {SHAPE2(33, 17)}, .note = "spare rows in the last workgroup"},
    {.shapes = {SHAPE2(5, 300)}, .note = "rows longer than 256 lanes"},
    {.shapes = {SHAPE2(1031, 1)}, .note = "rows of one"},
    {.shapes = {SHAPE1(1000)}, .note = "rank 1"},
    {.shapes = {SHAPE3(3, 5, 7)}, .note = "rank 3"},
    {.shapes = {SHAPE2(2, 8192)}, .note = "registers: 8 vec4 per lane"},
    {.shapes = {SHAPE2(3, 4093)}, .note = "registers: 16 scalars per lane, ragged"},
    {.shapes = {SHAPE2(3, 8200)}, .note = "past the registers (vec4): loops"},
    {.shapes = {SHAPE2(2, 4099)}, .note = "past the registers (scalars): loops"},
    {.shapes = {SHAPE2(1024, 4096)}, .note = "large: 2^22 elements"},
};
#define REDUCE_CASE_COUNT ((uint32_t)(sizeof reduce_cases / sizeof reduce_cases[0]))

/* Tolerances: relative error against max(|spec|, 1% of the spec's rms) (f16: at least 2^-14), as
 * kf_op_verify measures it; measured maxima on llvmpipe over 6 seeds are in docs/operators.md.
 * sum, mean: a row of up to 4096 terms is summed in f32, a strided loop per lane (up to 16 terms)
 * then a 256-way tree: ~8-10 roundings of partial sums of size ~sqrt(cols) / 3, i.e. ~1e-6 of the
 * row's rms scale, which is ~1e-5 against the floor (measured 2.8e-5): 1e-4. Their gradients
 * are copies (mean: one division).
 * max: a selection, exact in both directions and both dtypes (the f16 max is an f16 input):
 * 1e-6, so that any arithmetic creeping in shows.
 * softmax, log_softmax: exp in WGSL is good to 3 + 2|x| ulp (11 ulp at |x - max| = 4); the
 * backward subtracts the row's sum s = sum(dy * y) (or sum(dy)) from dy, and s's f32 tree error,
 * ~ulp(|s|) with |s| up to ~sqrt(cols), is what remains against the floor (measured 2.3e-5): 1e-4.
 * f16 for all: the spec computes from the same f16 inputs and its output is rounded to f16 (the
 * forward's), so what remains is the gradient's rounding to f16 (2^-11 = 4.9e-4) and a one-ulp
 * flip where the f32 result sits next to a rounding boundary (2^-10 = 9.8e-4): 2e-3. */
const kf_operator kf__op_sum = {
    .name = "sum",
    .about = "sum over the last axis (drops it; a vector gives a scalar)",
    .op_class = KF_OP_CLASS_ROW_REDUCTION,
    .arity = 1,
    .shape = sum_shape,
    .spec_forward = sum_spec_forward,
    .spec_backward = sum_spec_backward,
    .kernel_forward = sum_kernel_forward,
    .kernel_backward = sum_kernel_backward,
    .tolerance_f32 = 1e-4,
    .tolerance_f16 = 2e-3,
    .input_lo = -1.0f,
    .input_hi = 1.0f,
    .grid = broadcast_grid,
    .cases = reduce_cases,
    .case_count = REDUCE_CASE_COUNT,
};

const kf_operator kf__op_mean = {
    .name = "mean",
    .about = "mean over the last axis (drops it; a vector gives a scalar)",
    .op_class = KF_OP_CLASS_ROW_REDUCTION,
    .arity = 1,
    .shape = mean_shape,
    .spec_forward = mean_spec_forward,
    .spec_backward = mean_spec_backward,
    .kernel_forward = mean_kernel_forward,
    .kernel_backward = mean_kernel_backward,
    .tolerance_f32 = 1e-4,
    .tolerance_f16 = 2e-3,
    .input_lo = -1.0f,
    .input_hi = 1.0f,
    .grid = broadcast_grid,
    .cases = reduce_cases,
    .case_count = REDUCE_CASE_COUNT,
};

const kf_operator kf__op_max = {
    .name = "max",
    .about = "max over the last axis (drops it; NaN propagates; gradient to the first argmax)",
    .op_class = KF_OP_CLASS_ROW_REDUCTION,
    .arity = 1,
    .shape = max_shape,
    .spec_forward = max_spec_forward,
    .spec_backward = max_spec_backward,
    .kernel_forward = max_kernel_forward,
    .kernel_backward = max_kernel_backward,
    .tolerance_f32 = 1e-6,
    .tolerance_f16 = 1e-6,
    .input_lo = -1.0f,
    .input_hi = 1.0f,
    .grid = reduce_grid,
    .cases = reduce_cases,
    .case_count = REDUCE_CASE_COUNT,
};

const kf_operator kf__op_softmax = {
    .name = "softmax",
    .about = "softmax over the last axis (stable: exp(x - max) / sum)",
    .op_class = KF_OP_CLASS_ROW_REDUCTION,
    .arity = 1,
    .shape = softmax_shape,
    .spec_forward = softmax_spec_forward,
    .spec_backward = softmax_spec_backward,
    .kernel_forward = softmax_kernel_forward,
    .kernel_backward = softmax_kernel_backward,
    .tolerance_f32 = 1e-4,
    .tolerance_f16 = 2e-3,
    .input_lo = -4.0f,
    .input_hi = 4.0f,
    .grid = softmax_grid,
    .cases = reduce_cases,
    .case_count = REDUCE_CASE_COUNT,
};

const kf_operator kf__op_log_softmax = {
    .name = "log_softmax",
    .about = "log of softmax over the last axis ((x - max) - log sum exp(x - max))",
    .op_class = KF_OP_CLASS_ROW_REDUCTION,
    .arity = 1,
    .shape = log_softmax_shape,
    .spec_forward = log_softmax_spec_forward,
    .spec_backward = log_softmax_spec_backward,
    .kernel_forward = log_softmax_kernel_forward,
    .kernel_backward = log_softmax_kernel_backward,
    .tolerance_f32 = 1e-4,
    .tolerance_f16 = 2e-3,
    .input_lo = -4.0f,
    .input_hi = 4.0f,
    .grid = softmax_grid,
    .cases = reduce_cases,
    .case_count = REDUCE_CASE_COUNT,
};
