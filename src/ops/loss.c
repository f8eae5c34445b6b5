/* cross_entropy(logits, labels): the mean over rows of logsumexp(row) - row[label].
 *
 * Shapes: logits are rows x C (C = the last dim; [N, C] in the usual case), labels hold one class
 * index per row, shaped as logits without their last axis ([N]). The loss is a rank-0 scalar,
 * like sum and mean of a vector.
 *
 * Labels are an index input (kf_operator.index_inputs): i32 on the GPU, integral floats on the
 * CPU. A label that is not an integer in [0, C) makes its row's loss NaN, and so the mean; the
 * spec and the kernel agree on this rather than reading out of bounds. Labels get no gradient:
 * their grad_in is zeros.
 *
 * Gradient w.r.t. logits: (softmax(row) - onehot(label)) * grad_out / N, NaN in a row whose label
 * is invalid. NaN and infinity in logits propagate as in softmax: the row's loss is NaN.
 */
#include "ops/rowwise.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

static kf_status ce_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out, char *msg,
                          size_t msg_size) {
    (void)p;
    char a[64], b[64], c[64];
    if (!kf__shape_valid(&in[0]) || in[0].rank == 0) {
        return kf__shape_error(msg, msg_size,
                               "cross_entropy: logits must be [N, C] (or any rank >= 1), got %s",
                               kf_shape_str(&in[0], a, sizeof a));
    }
    kf_shape want = kf__shape_drop_last(&in[0]);
    if (!kf_shape_eq(&want, &in[1])) {
        return kf__shape_error(msg, msg_size,
                               "cross_entropy: labels must be %s (one per row of logits %s), "
                               "got %s",
                               kf_shape_str(&want, a, sizeof a), kf_shape_str(&in[0], b, sizeof b),
                               kf_shape_str(&in[1], c, sizeof c));
    }
    *out = (kf_shape){0};
    return KF_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Specification                                                                            */
/* ---------------------------------------------------------------------------------------- */

/* The label as a class index, or -1 when it is not an integer in [0, classes). */
static int64_t spec_label(float value, uint32_t classes) {
    if (!(value >= 0.0f) || value >= (float)classes || floorf(value) != value) {
        return -1;
    }
    return (int64_t)value;
}

/* The row's max (NaN-propagating) and sum of exp(x - max), in float64. */
static void spec_row_lse(const float *x, uint32_t cols, double *m, double *s) {
    *m = x[0];
    for (uint32_t c = 0; c < cols; c++) {
        *m = kf__spec_max(*m, x[c]);
    }
    *s = 0;
    for (uint32_t c = 0; c < cols; c++) {
        *s += exp(x[c] - *m);
    }
}

static kf_status ce_spec_forward(const kf_tensor *const *in, const kf_op_params *p,
                                 kf_tensor *out) {
    kf_status st = kf__spec_check_out(&kf__op_cross_entropy, in, p, out);
    if (st != KF_OK) {
        return st;
    }
    uint64_t rows;
    uint32_t cols;
    kf__shape_rows_cols(&in[0]->shape, &rows, &cols);
    double total = 0;
    for (uint64_t r = 0; r < rows; r++) {
        const float *x = in[0]->data + r * cols;
        int64_t label = spec_label(in[1]->data[r], cols);
        double m, s;
        spec_row_lse(x, cols, &m, &s);
        total += label < 0 ? NAN : m + log(s) - x[label];
    }
    out->data[0] = (float)(total / (double)rows);
    return KF_OK;
}

static kf_status ce_spec_backward(const kf_tensor *const *in, const kf_tensor *out,
                                  const kf_tensor *grad_out, const kf_op_params *p,
                                  kf_tensor *const *grad_in) {
    (void)out;
    kf_status st = kf__spec_check_out(&kf__op_cross_entropy, in, p, grad_out);
    if (st != KF_OK || !grad_in) {
        return st != KF_OK ? st : KF_ERROR_INVALID_ARGUMENT;
    }
    uint64_t rows;
    uint32_t cols;
    kf__shape_rows_cols(&in[0]->shape, &rows, &cols);
    double scale = grad_out->data[0] / (double)rows;
    for (uint64_t r = 0; r < rows && grad_in[0]; r++) {
        const float *x = in[0]->data + r * cols;
        float *dx = grad_in[0]->data + r * cols;
        int64_t label = spec_label(in[1]->data[r], cols);
        double m, s;
        spec_row_lse(x, cols, &m, &s);
        for (uint32_t c = 0; c < cols; c++) {
            double softmax = exp(x[c] - m) / s;
            double onehot = (int64_t)c == label ? 1.0 : 0.0;
            dx[c] = label < 0 ? NAN : (float)((softmax - onehot) * scale);
        }
    }
    if (grad_in[1]) {
        for (uint64_t r = 0; r < rows; r++) {
            grad_in[1]->data[r] = 0.0f;
        }
    }
    return KF_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Kernels                                                                                  */
/* ---------------------------------------------------------------------------------------- */

typedef struct ce_bindings {
    kf_binding logits, labels, out, grad_out, grad_in;
} ce_bindings;

static ce_bindings bind_ce(kf_kernel *k, kf_dtype dtype, bool backward) {
    ce_bindings b = {0};
    b.logits = kf__bind(k, "logits", dtype, KF_ACCESS_READ);
    b.labels = kf__bind(k, "labels", KF_DTYPE_I32, KF_ACCESS_READ);
    if (backward) {
        b.out = kf__bind(k, "out", dtype, KF_ACCESS_READ);
        b.grad_out = kf__bind(k, "grad_out", dtype, KF_ACCESS_READ);
        b.grad_in = kf__bind(k, "grad_in", dtype, KF_ACCESS_READ_WRITE);
    }
    return b;
}

/* Whether a label (i32) is a class index, and the index clamped into range for the loads. */
static kf_val label_valid(kf_kernel *k, kf_val label, uint32_t classes) {
    kf_val lo = kf_binary(k, KF_OP_GE, label, kf_lit_i32(k, 0));
    kf_val hi = kf_binary(k, KF_OP_LT, label, kf_lit_i32(k, (int32_t)classes));
    return kf_let(k, "label_ok", kf_binary(k, KF_OP_AND, lo, hi));
}

static kf_val label_index(kf_kernel *k, kf_val label, uint32_t classes) {
    kf_val clamped =
        kf_call3(k, KF_FN_CLAMP, label, kf_lit_i32(k, 0), kf_lit_i32(k, (int32_t)classes - 1));
    return kf_let(k, "label_at", kf_cast(k, kf_type_scalar(KF_SCALAR_U32), clamped));
}

/* A one-workgroup kernel of KF__WORKGROUP invocations with the loss's bindings (the forward and
 * the fused loss + gradient share this opening; void_input: the forward declares no stage input).
 */
static kf_kernel *ce_kernel_open(const char *name, kf_dtype dtype, bool void_input,
                                 ce_bindings *b) {
    kf_kernel_desc desc = {0};
    desc.name = name;
    desc.workgroup_size[0] = KF__WORKGROUP;
    if (void_input) {
        desc.input = kf_type_scalar(KF_SCALAR_VOID);
    }
    desc.output = kf__dtype_type(dtype);
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    const uint32_t one_group[3] = {1, 1, 1};
    kf_kernel_set_grid(k, one_group);
    *b = bind_ce(k, dtype, false);
    return k;
}

/* Forward: one workgroup of 256 invocations, each taking rows lane, lane + 256, ..., CE_ROWS of
 * them at a time: per row one pass of the online log-sum-exp (max and sum of exp together, the
 * sum rescaled once per CE_COLS columns), then the loss; a tree over the workgroup sums the
 * per-invocation losses and lane 0 yields the mean. One workgroup is latency-bound (each
 * invocation's loads wait in turn), so a step loads CE_ROWS x CE_COLS logits that do not depend
 * on each other. The two-pass version, one row and one column at a time, ran the GPT step's
 * 4096 x 76 logits in 0.0775 ms on an H100 (16 GB/s, docs/PERFORMANCE.md, seventeenth session);
 * on lavapipe this one takes 0.37-0.43 ms against its 0.66. A very wide row (C in the millions) is
 * slow here, which is the performance issue's concern, not correctness. */
enum { CE_ROWS = 4, CE_COLS = 4 };

/* The elements v[0..n) into the running max m and sum s of exp(x - m): m' = max(m, v...),
 * s' = s exp(m - m') + sum exp(v_i - m'), one rescale per n elements. From m = the lowest finite
 * f32 (WGSL has no infinite constants) and s = 0: a -inf element adds exp(-inf) = 0, a row of
 * them leaves s = 0 and a NaN loss, as the spec's; NaN propagates; a +inf gives exp(inf - inf) =
 * NaN, as the spec's. */
static void lse_update(kf_kernel *k, kf_var m, kf_var s, const kf_val *v, uint32_t n) {
    kf_val old = kf_read(k, m);
    kf_val mx = old;
    for (uint32_t i = 0; i < n; i++) {
        mx = kf__max_nan(k, mx, v[i]);
    }
    mx = kf_let(k, "mx", mx);
    kf_val sum = kf_call1(k, KF_FN_EXP, kf_sub(k, v[0], mx));
    for (uint32_t i = 1; i < n; i++) {
        sum = kf_add(k, sum, kf_call1(k, KF_FN_EXP, kf_sub(k, v[i], mx)));
    }
    kf_val alpha = kf_call1(k, KF_FN_EXP, kf_sub(k, old, mx));
    kf_assign(k, s, kf_call3(k, KF_FN_FMA, kf_read(k, s), alpha, sum));
    kf_assign(k, m, mx);
}

static kf_kernel *ce_kernel_forward(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {
    (void)p;
    uint64_t rows;
    uint32_t cols;
    kf__shape_rows_cols(&in[0], &rows, &cols);
    const uint32_t lanes = KF__WORKGROUP;
    ce_bindings b;
    kf_kernel *k = ce_kernel_open("cross_entropy", dtype, true, &b);
    if (!k) {
        return NULL;
    }
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    /* Rows per step: fewer where there are fewer rows than lanes, so no step is mostly empty. */
    uint32_t at_once = rows >= (uint64_t)lanes * CE_ROWS ? CE_ROWS : 1;

    kf_val lane = kf_let(k, "lane", kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX));
    kf_var total = kf_declare(k, "total", f32, kf_lit_f32(k, 0));
    kf_val first = kf_for(k, "first", lane, kf__u32(k, rows), kf__u32(k, lanes * at_once));
    kf_val row[CE_ROWS], valid[CE_ROWS] = {{0}}, base[CE_ROWS];
    kf_var m[CE_ROWS], s[CE_ROWS];
    for (uint32_t j = 0; j < at_once; j++) {
        kf_val r = j ? kf_add(k, first, kf__u32(k, j * lanes)) : first;
        row[j] = r;
        if (j) { /* a row past the end reads the last row, and its loss is not added */
            valid[j] = kf_let(k, "valid", kf_binary(k, KF_OP_LT, r, kf__u32(k, rows)));
            row[j] = kf_let(k, "row", kf_call2(k, KF_FN_MIN, r, kf__u32(k, rows - 1)));
        }
        base[j] = kf_let(k, "base", kf_mul(k, row[j], kf__u32(k, cols)));
        m[j] = kf_declare(k, "m", f32, kf_lit_f32(k, -FLT_MAX));
        s[j] = kf_declare(k, "s", f32, kf_lit_f32(k, 0));
    }
    /* CE_COLS columns a step (every load of the step independent), then the rest one by one */
    uint32_t whole = cols / CE_COLS * CE_COLS;
    for (uint32_t pass = 0; pass < 2; pass++) {
        uint32_t width = pass ? 1 : CE_COLS, from = pass ? whole : 0, to = pass ? cols : whole;
        if (from == to) {
            continue;
        }
        kf_val c = kf_for(k, "c", kf__u32(k, from), kf__u32(k, to), kf__u32(k, width));
        kf_val v[CE_ROWS][CE_COLS];
        for (uint32_t j = 0; j < at_once; j++) {
            for (uint32_t i = 0; i < width; i++) {
                kf_val at = kf_add(k, kf_add(k, base[j], c), kf__u32(k, i));
                v[j][i] = kf_let(k, "v", kf__load_f32(k, b.logits, at, dtype));
            }
        }
        for (uint32_t j = 0; j < at_once; j++) {
            lse_update(k, m[j], s[j], v[j], width);
        }
        kf_end(k);
    }
    for (uint32_t j = 0; j < at_once; j++) {
        kf_val label = kf_let(k, "label", kf_load(k, b.labels, row[j]));
        kf_val ok = label_valid(k, label, cols);
        kf_val picked =
            kf__load_f32(k, b.logits, kf_add(k, base[j], label_index(k, label, cols)), dtype);
        kf_val loss = kf_sub(
            k, kf_add(k, kf_read(k, m[j]), kf_call1(k, KF_FN_LOG, kf_read(k, s[j]))), picked);
        loss =
            kf_select(k, kf__nan(k, kf_bitcast(k, kf_type_scalar(KF_SCALAR_U32), label)), loss, ok);
        if (j) {
            loss = kf_select(k, kf_lit_f32(k, 0), loss, valid[j]);
        }
        kf_assign(k, total, kf_add(k, kf_read(k, total), loss));
    }
    kf_end(k);

    kf_shared partial = kf_kernel_workgroup(k, "partial", f32, lanes);
    kf_shared_store(k, partial, lane, kf_read(k, total));
    kf_barrier(k);
    for (uint32_t stride = lanes / 2; stride >= 1; stride /= 2) {
        kf_if(k, kf_binary(k, KF_OP_LT, lane, kf__u32(k, stride)));
        kf_val a = kf_shared_load(k, partial, lane);
        kf_val o = kf_shared_load(k, partial, kf_add(k, lane, kf__u32(k, stride)));
        kf_shared_store(k, partial, lane, kf_add(k, a, o));
        kf_end(k);
        kf_barrier(k);
    }
    kf_if(k, kf_binary(k, KF_OP_EQ, lane, kf__u32(k, 0)));
    kf_val sum = kf_shared_load(k, partial, kf__u32(k, 0));
    kf__yield_f32(k, kf_div(k, sum, kf_lit_f32(k, (float)rows)), kf__u32(k, 0), dtype);
    kf_end(k);
    return k;
}

/* The forward kernel's work and, in the same pass over each row, d logits = (softmax(row) -
 * onehot(label)) * dy / N for a constant dy (autodiff's seed, 1): llm.c's fused classifier, the
 * loss and its gradient in one dispatch, each row's max and sum of exp computed once for both.
 * One workgroup as the forward (rows lane, lane + 256, ...), so the planner asks for it only on
 * small logits (KF__CLASSIFIER_MAX_LOGITS): past that the parallel gradient kernel beats one
 * workgroup doing a third pass. Bindings: logits, labels, the gradient (read_write), "out". */
static kf_kernel *ce_kernel_with_grad(const kf_shape *in, const kf_op_params *p, kf_dtype dtype,
                                      uint32_t which, float dy) {
    (void)p;
    if (which != 0 || kf_shape_elements(&in[0]) > KF__CLASSIFIER_MAX_LOGITS) {
        return NULL;
    }
    uint64_t rows;
    uint32_t cols;
    kf__shape_rows_cols(&in[0], &rows, &cols);
    const uint32_t lanes = KF__WORKGROUP;
    ce_bindings b;
    kf_kernel *k = ce_kernel_open("cross_entropy_with_grad", dtype, false, &b);
    if (!k) {
        return NULL;
    }
    b.grad_in = kf__bind(k, "grad", dtype, KF_ACCESS_READ_WRITE);
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);

    kf_val lane = kf_let(k, "lane", kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX));
    kf_val scale = kf_let(k, "scale", kf_lit_f32(k, (float)((double)dy / (double)rows)));
    kf_var total = kf_declare(k, "total", f32, kf_lit_f32(k, 0));
    kf_val row = kf_for(k, "row", lane, kf__u32(k, rows), kf__u32(k, lanes));
    kf_val base = kf_let(k, "base", kf_mul(k, row, kf__u32(k, cols)));
    kf_var m = kf_declare(k, "m", f32, kf__load_f32(k, b.logits, base, dtype));
    kf_val c = kf_for(k, "c", kf__u32(k, 1), kf__u32(k, cols), kf__u32(k, 1));
    kf_val v = kf_let(k, "v", kf__load_f32(k, b.logits, kf_add(k, base, c), dtype));
    kf_assign(k, m, kf__max_nan(k, kf_read(k, m), v));
    kf_end(k);
    kf_val mx = kf_let(k, "mx", kf_read(k, m));
    kf_var s = kf_declare(k, "s", f32, kf_lit_f32(k, 0));
    kf_val c2 = kf_for(k, "c", kf__u32(k, 0), kf__u32(k, cols), kf__u32(k, 1));
    kf_val v2 = kf__load_f32(k, b.logits, kf_add(k, base, c2), dtype);
    kf_assign(k, s, kf_add(k, kf_read(k, s), kf_call1(k, KF_FN_EXP, kf_sub(k, v2, mx))));
    kf_end(k);
    kf_val sum = kf_let(k, "sum", kf_read(k, s));
    kf_val label = kf_let(k, "label", kf_load(k, b.labels, row));
    kf_val ok = label_valid(k, label, cols);
    kf_val at_label = label_index(k, label, cols);
    kf_val nan = kf_let(k, "nan", kf__nan(k, kf_bitcast(k, kf_type_scalar(KF_SCALAR_U32), label)));
    kf_val picked = kf__load_f32(k, b.logits, kf_add(k, base, at_label), dtype);
    kf_val loss = kf_sub(k, kf_add(k, mx, kf_call1(k, KF_FN_LOG, sum)), picked);
    kf_assign(k, total, kf_add(k, kf_read(k, total), kf_select(k, nan, loss, ok)));
    kf_val j = kf_for(k, "j", kf__u32(k, 0), kf__u32(k, cols), kf__u32(k, 1));
    kf_val at = kf_let(k, "at", kf_add(k, base, j));
    kf_val prob =
        kf_div(k, kf_call1(k, KF_FN_EXP, kf_sub(k, kf__load_f32(k, b.logits, at, dtype), mx)), sum);
    kf_val onehot =
        kf_select(k, kf_lit_f32(k, 0), kf_lit_f32(k, 1), kf_binary(k, KF_OP_EQ, j, at_label));
    kf_val dx = kf_mul(k, kf_sub(k, prob, onehot), scale);
    kf__store_f32(k, b.grad_in, at, kf_select(k, nan, dx, ok), dtype);
    kf_end(k);
    kf_end(k);

    kf_shared partial = kf_kernel_workgroup(k, "partial", f32, lanes);
    kf_shared_store(k, partial, lane, kf_read(k, total));
    kf_barrier(k);
    for (uint32_t stride = lanes / 2; stride >= 1; stride /= 2) {
        kf_if(k, kf_binary(k, KF_OP_LT, lane, kf__u32(k, stride)));
        kf_val a = kf_shared_load(k, partial, lane);
        kf_val o = kf_shared_load(k, partial, kf_add(k, lane, kf__u32(k, stride)));
        kf_shared_store(k, partial, lane, kf_add(k, a, o));
        kf_end(k);
        kf_barrier(k);
    }
    kf_if(k, kf_binary(k, KF_OP_EQ, lane, kf__u32(k, 0)));
    kf_val mean = kf_div(k, kf_shared_load(k, partial, kf__u32(k, 0)), kf_lit_f32(k, (float)rows));
    kf__yield_f32(k, mean, kf__u32(k, 0), dtype);
    kf_end(k);
    return k;
}

/* d logits: a row kernel (rowwise.h): the row's max and sum of exp(x - max), then
 * (exp(x - max) / sum - onehot) * grad_out / N per element. */
static kf_kernel *ce_kernel_backward_logits(const kf_shape *in, kf_dtype dtype, bool producer) {
    kf__rows r;
    kf_kernel *k =
        kf__rows_begin(&r, producer ? "cross_entropy_grad" : "cross_entropy_backward_logits",
                       &in[0], dtype, producer);
    if (!k) {
        return NULL;
    }
    /* a backward operator (reduce_backward.c) binds logits, labels, dy and yields the gradient */
    ce_bindings b = bind_ce(k, dtype, !producer);
    if (producer) {
        b.grad_out = kf__bind(k, "dy", dtype, KF_ACCESS_READ);
    }
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_var m = kf_declare(k, "max_acc", f32, kf__load_f32(k, b.logits, r.base, dtype));
    kf_val i = kf__rows_for(&r, "i");
    kf_val v = kf_let(k, "v", kf__load_f32(k, b.logits, kf_add(k, r.base, i), dtype));
    kf_assign(k, m, kf__max_nan(k, kf_read(k, m), v));
    kf_end(k);
    kf_val mx = kf__rows_max(&r, kf_read(k, m));
    kf_var s = kf_declare(k, "acc", f32, kf_lit_f32(k, 0));
    kf_val i2 = kf__rows_for(&r, "i");
    kf_val v2 = kf__load_f32(k, b.logits, kf_add(k, r.base, i2), dtype);
    kf_assign(k, s, kf_add(k, kf_read(k, s), kf_call1(k, KF_FN_EXP, kf_sub(k, v2, mx))));
    kf_end(k);
    kf_val sum = kf__rows_sum(&r, kf_read(k, s));
    kf_val label = kf_let(k, "label", kf_load(k, b.labels, r.row));
    kf_val ok = label_valid(k, label, r.cols);
    kf_val at_label = label_index(k, label, r.cols);
    kf_val scale = kf_let(
        k, "scale",
        kf_div(k, kf__load_f32(k, b.grad_out, kf__u32(k, 0), dtype), kf_lit_f32(k, (float)r.rows)));
    kf_val nan = kf_let(k, "nan", kf__nan(k, kf_bitcast(k, kf_type_scalar(KF_SCALAR_U32), label)));
    kf_if(k, r.valid);
    kf_val j = kf__rows_for(&r, "j");
    kf_val at = kf_let(k, "at", kf_add(k, r.base, j));
    kf_val p =
        kf_div(k, kf_call1(k, KF_FN_EXP, kf_sub(k, kf__load_f32(k, b.logits, at, dtype), mx)), sum);
    kf_val onehot =
        kf_select(k, kf_lit_f32(k, 0), kf_lit_f32(k, 1), kf_binary(k, KF_OP_EQ, j, at_label));
    kf_val dx = kf_mul(k, kf_sub(k, p, onehot), scale);
    kf__store_or_yield(k, b.grad_in, at, kf_select(k, nan, dx, ok), dtype);
    kf_end(k);
    kf_end(k);
    return k;
}

/* d labels: zeros (labels are indices, not differentiable), one invocation per label. */
static kf_kernel *ce_kernel_backward_labels(const kf_shape *in, kf_dtype dtype) {
    uint64_t rows;
    uint32_t cols;
    kf__shape_rows_cols(&in[0], &rows, &cols);
    kf_kernel_desc desc = {0};
    desc.name = "cross_entropy_backward_labels";
    desc.workgroup_size[0] = KF__WORKGROUP;
    desc.input = kf_type_scalar(KF_SCALAR_VOID);
    desc.output = kf_type_scalar(KF_SCALAR_VOID);
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    uint32_t groups[3];
    kf__grid_1d(rows, KF__WORKGROUP, groups);
    kf_kernel_set_grid(k, groups);
    ce_bindings b = bind_ce(k, dtype, true);
    kf_val idx = kf_let(k, "idx", kf_global_linear(k));
    kf_if(k, kf_binary(k, KF_OP_LT, idx, kf__u32(k, rows)));
    kf__store_f32(k, b.grad_in, idx, kf_lit_f32(k, 0), dtype);
    kf_end(k);
    return k;
}

static kf_kernel *ce_kernel_backward(const kf_shape *in, const kf_op_params *p, kf_dtype dtype,
                                     uint32_t which) {
    (void)p;
    if (which == 0) {
        return ce_kernel_backward_logits(in, dtype, false);
    }
    return which == 1 ? ce_kernel_backward_labels(in, dtype) : NULL;
}

kf_kernel *kf__cross_entropy_grad_kernel(const kf_shape *in, kf_dtype dtype) {
    return ce_kernel_backward_logits(in, dtype, true);
}

static void ce_grid(const kf_shape *in, const kf_op_params *p, int32_t which, uint32_t groups[3]) {
    (void)p;
    if (which < 0) {
        groups[0] = groups[1] = groups[2] = 1;
    } else if (which == 0) {
        kf__rows_grid(&in[0], groups);
    } else {
        kf__grid_1d(kf_shape_elements(&in[1]), KF__WORKGROUP, groups);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Verification table and operator record                                                   */
/* ---------------------------------------------------------------------------------------- */

/* One class and one row; primes; more rows than the forward's 256 invocations (several rows
 * each, the last lanes idle); rows wider than 256 lanes; a vector of logits (rank 1, a scalar
 * label); and 2^22 logits. */
static const kf_op_case ce_cases[] = {
    {.shapes = {SHAPE2(1, 1), SHAPE1(1)}, .note = "1x1"},
    {.shapes = {SHAPE2(7, 13), SHAPE1(7)}, .note = "primes"},
    {.shapes = {SHAPE2(257, 129), SHAPE1(257)}, .note = "primes past a workgroup"},
    {.shapes = {SHAPE2(600, 3), SHAPE1(600)}, .note = "more rows than invocations"},
    {.shapes = {SHAPE2(1500, 7), SHAPE1(1500)},
     .note = "rows four at a time, the last step ragged"},
    {.shapes = {SHAPE2(5, 300), SHAPE1(5)}, .note = "rows longer than 256 lanes"},
    {.shapes = {SHAPE1(10), SHAPE0}, .note = "one row of logits"},
    {.shapes = {SHAPE2(4096, 1024), SHAPE1(4096)}, .note = "large: 2^22 logits"},
};

/* Tolerances: relative error against max(|spec|, 1% of the spec's rms) (f16: at least 2^-14), as
 * kf_op_verify measures it; measured maxima on llvmpipe are in docs/operators.md.
 * forward: each row's loss is max + log(sum) - picked in f32, terms of size |logits| <= 4, so a
 * few ulp of 4 (~1e-6) against a mean loss of order log(C) (0 only for C = 1, which is exact);
 * the mean adds an f32 sum of positive terms, no cancellation (measured 1.5e-7).
 * backward: softmax - onehot cancels for the label's class when its probability is near 1, an
 * absolute error ~ulp(1) / N against the floor (measured 2e-5): 1e-4. f16: the gradient's
 * rounding to f16 and a one-ulp flip (2^-10), 2e-3. */
static const kf__input ce_inputs[] = {{.name = "logits"}, {.name = "labels"}};

const kf_operator kf__op_cross_entropy = {
    .name = "cross_entropy",
    .about = "mean over rows of logsumexp(logits) - logits[label] (labels: class indices)",
    .op_class = KF_OP_CLASS_ROW_REDUCTION,
    .arity = 2,
    KF__INPUTS(ce_inputs),
    .shape = ce_shape,
    .spec_forward = ce_spec_forward,
    .spec_backward = ce_spec_backward,
    .kernel_forward = ce_kernel_forward,
    .kernel_backward = ce_kernel_backward,
    .kernel_with_grad = ce_kernel_with_grad,
    .tolerance_f32 = 1e-4,
    .tolerance_f16 = 2e-3,
    .input_lo = -4.0f,
    .input_hi = 4.0f,
    .grid = ce_grid,
    .index_inputs = 1u << 1,
    .cases = ce_cases,
    .case_count = (uint32_t)(sizeof ce_cases / sizeof ce_cases[0]),
};
