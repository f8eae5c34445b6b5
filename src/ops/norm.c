/* Normalizations over the last axis: rmsnorm and layernorm, each with an optional weight row and
 * an optional bias row (params.has_weight, params.has_bias; inputs x, then weight, then bias).
 *
 *   rmsnorm(x)   = x * r * w + b,          r = 1 / sqrt(mean(x^2) + eps)
 *   layernorm(x) = (x - mu) * r * w + b,   mu = mean(x), r = 1 / sqrt(mean((x - mu)^2) + eps)
 *
 * with the variance biased (divided by cols), eps = params.eps or 1e-5, and w = 1, b = 0 where
 * absent. x is rows x cols; weight and bias are [cols]. The output has x's shape.
 *
 * Gradients, with g = dy * w and xhat = (x - mu) * r (rmsnorm: xhat = x * r):
 *   rmsnorm:   dx = r * (g - xhat * mean(g * xhat))
 *   layernorm: dx = r * (g - mean(g) - xhat * mean(g * xhat))
 *   dw = sum over rows of dy * xhat,  db = sum over rows of dy.
 *
 * NaN and infinity propagate through the arithmetic: a NaN or infinite x makes its row NaN.
 */
#include "ops/rowwise.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define NORM_DEFAULT_EPS 1e-5f

typedef struct norm_kind {
    const char *name;
    bool center; /* layernorm subtracts the mean; rmsnorm does not */
} norm_kind;

static const norm_kind RMSNORM = {"rmsnorm", false};
static const norm_kind LAYERNORM = {"layernorm", true};

static const kf__param norm_params[] = {
    {.name = "eps",
     .about = "added to the mean square (variance) under the root",
     .type = KF_PARAM_TYPE_FLOAT,
     KF__FIELD(eps, EPS),
     .default_value = NORM_DEFAULT_EPS,
     .min = 0.0,
     .min_exclusive = true,
     .max = 3.4028234663852886e38},
};
/* x, then the optional weight and bias rows: rmsnorm(x, w, b), layernorm(x, bias=b). */
static const kf__input norm_inputs[] = {
    {.name = "x"},
    {.name = "weight", KF__OPTIONAL(has_weight)},
    {.name = "bias", KF__OPTIONAL(has_bias)},
};

static float norm_eps(const kf_op_params *p) {
    kf_op_params none = {0};
    return (float)kf__param_value(p ? p : &none, &norm_params[0]);
}

/* Input positions of weight and bias (0: absent). */
static uint32_t weight_index(const kf_op_params *p) {
    return p && p->has_weight ? 1u : 0u;
}
static uint32_t bias_index(const kf_op_params *p) {
    return p && p->has_bias ? 1u + weight_index(p) : 0u;
}

static kf_status norm_shape(const norm_kind *kind, const kf_shape *in, const kf_op_params *p,
                            kf_shape *out, char *msg, size_t msg_size) {
    char a[64], b[64];
    if (!kf__shape_valid(&in[0])) {
        return kf__shape_error(msg, msg_size, "%s: invalid input shape %s", kind->name,
                               kf_shape_str(&in[0], a, sizeof a));
    }
    uint64_t rows;
    uint32_t cols;
    kf__shape_rows_cols(&in[0], &rows, &cols);
    const uint32_t rows_of[2] = {weight_index(p), bias_index(p)};
    const char *what[2] = {"weight", "bias"};
    for (int i = 0; i < 2; i++) {
        if (!rows_of[i]) {
            continue;
        }
        const kf_shape *s = &in[rows_of[i]];
        if (s->rank != 1 || s->dims[0] != cols) {
            return kf__shape_error(msg, msg_size, "%s: %s must be [%u] (x is %s), got %s",
                                   kind->name, what[i], cols, kf_shape_str(&in[0], a, sizeof a),
                                   kf_shape_str(s, b, sizeof b));
        }
    }
    *out = in[0];
    return KF_OK;
}

static kf_status rmsnorm_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out, char *msg,
                               size_t msg_size) {
    return norm_shape(&RMSNORM, in, p, out, msg, msg_size);
}
static kf_status layernorm_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out,
                                 char *msg, size_t msg_size) {
    return norm_shape(&LAYERNORM, in, p, out, msg, msg_size);
}

/* ---------------------------------------------------------------------------------------- */
/* Specifications                                                                           */
/* ---------------------------------------------------------------------------------------- */

/* mu (0 for rmsnorm) and r of one row, in float64. */
static void spec_row_stats(const norm_kind *kind, const float *x, uint32_t cols, double eps,
                           double *mu, double *r) {
    double m = 0;
    if (kind->center) {
        for (uint32_t c = 0; c < cols; c++) {
            m += x[c];
        }
        m /= cols;
    }
    double ss = 0;
    for (uint32_t c = 0; c < cols; c++) {
        ss += (x[c] - m) * (x[c] - m);
    }
    *mu = m;
    *r = 1.0 / sqrt(ss / cols + eps);
}

static kf_status norm_spec_forward(const kf_operator *op, const norm_kind *kind,
                                   const kf_tensor *const *in, const kf_op_params *p,
                                   kf_tensor *out) {
    kf_status st = kf__spec_check_out(op, in, p, out);
    if (st != KF_OK) {
        return st;
    }
    uint64_t rows;
    uint32_t cols;
    kf__shape_rows_cols(&in[0]->shape, &rows, &cols);
    const float *w = weight_index(p) ? in[weight_index(p)]->data : NULL;
    const float *b = bias_index(p) ? in[bias_index(p)]->data : NULL;
    for (uint64_t row = 0; row < rows; row++) {
        const float *x = in[0]->data + row * cols;
        double mu, r;
        spec_row_stats(kind, x, cols, norm_eps(p), &mu, &r);
        for (uint32_t c = 0; c < cols; c++) {
            double y = (x[c] - mu) * r;
            y = y * (w ? w[c] : 1.0) + (b ? b[c] : 0.0);
            out->data[row * cols + c] = (float)y;
        }
    }
    return KF_OK;
}

static kf_status norm_spec_backward(const kf_operator *op, const norm_kind *kind,
                                    const kf_tensor *const *in, const kf_tensor *grad_out,
                                    const kf_op_params *p, kf_tensor *const *grad_in) {
    kf_status st = kf__spec_check_out(op, in, p, grad_out);
    if (st != KF_OK || !grad_in) {
        return st != KF_OK ? st : KF_ERROR_INVALID_ARGUMENT;
    }
    uint64_t rows;
    uint32_t cols;
    kf__shape_rows_cols(&in[0]->shape, &rows, &cols);
    uint32_t wi = weight_index(p), bi = bias_index(p);
    const float *w = wi ? in[wi]->data : NULL;
    double *dw = calloc(cols, sizeof *dw);
    double *db = calloc(cols, sizeof *db);
    if (!dw || !db) {
        free(dw);
        free(db);
        return KF_ERROR_OUT_OF_MEMORY;
    }
    for (uint64_t row = 0; row < rows; row++) {
        const float *x = in[0]->data + row * cols;
        const float *dy = grad_out->data + row * cols;
        double mu, r;
        spec_row_stats(kind, x, cols, norm_eps(p), &mu, &r);
        double mean_g = 0, mean_g_xhat = 0;
        for (uint32_t c = 0; c < cols; c++) {
            double g = dy[c] * (w ? w[c] : 1.0);
            double xhat = (x[c] - mu) * r;
            mean_g += g / cols;
            mean_g_xhat += g * xhat / cols;
            dw[c] += dy[c] * xhat;
            db[c] += dy[c];
        }
        if (!kind->center) {
            mean_g = 0; /* rmsnorm has no mean to differentiate through */
        }
        if (grad_in[0]) {
            for (uint32_t c = 0; c < cols; c++) {
                double g = dy[c] * (w ? w[c] : 1.0);
                double xhat = (x[c] - mu) * r;
                grad_in[0]->data[row * cols + c] = (float)(r * (g - mean_g - xhat * mean_g_xhat));
            }
        }
    }
    for (uint32_t c = 0; c < cols; c++) {
        if (wi && grad_in[wi]) {
            grad_in[wi]->data[c] = (float)dw[c];
        }
        if (bi && grad_in[bi]) {
            grad_in[bi]->data[c] = (float)db[c];
        }
    }
    free(dw);
    free(db);
    return KF_OK;
}

static kf_status rmsnorm_spec_forward(const kf_tensor *const *in, const kf_op_params *p,
                                      kf_tensor *out) {
    return norm_spec_forward(&kf__op_rmsnorm, &RMSNORM, in, p, out);
}
static kf_status layernorm_spec_forward(const kf_tensor *const *in, const kf_op_params *p,
                                        kf_tensor *out) {
    return norm_spec_forward(&kf__op_layernorm, &LAYERNORM, in, p, out);
}
static kf_status rmsnorm_spec_backward(const kf_tensor *const *in, const kf_tensor *out,
                                       const kf_tensor *grad_out, const kf_op_params *p,
                                       kf_tensor *const *grad_in) {
    (void)out;
    return norm_spec_backward(&kf__op_rmsnorm, &RMSNORM, in, grad_out, p, grad_in);
}
static kf_status layernorm_spec_backward(const kf_tensor *const *in, const kf_tensor *out,
                                         const kf_tensor *grad_out, const kf_op_params *p,
                                         kf_tensor *const *grad_in) {
    (void)out;
    return norm_spec_backward(&kf__op_layernorm, &LAYERNORM, in, grad_out, p, grad_in);
}

/* ---------------------------------------------------------------------------------------- */
/* Kernels                                                                                  */
/* ---------------------------------------------------------------------------------------- */

typedef struct norm_bindings {
    kf_binding x, weight, bias;        /* weight, bias: id 0 when absent */
    kf_binding out, grad_out, grad_in; /* backward only */
} norm_bindings;

/* backward: the old kernel_backward convention (out, grad_out, grad_in after the inputs); with
 * producer, a backward operator's (norm_backward.c): the inputs, then dy, and the gradient is
 * yielded. */
static norm_bindings bind_norm(kf_kernel *k, const kf_op_params *p, kf_dtype dtype, bool backward,
                               bool producer) {
    norm_bindings b = {0};
    b.x = kf__bind(k, "x", dtype, KF_ACCESS_READ);
    if (weight_index(p)) {
        b.weight = kf__bind(k, "weight", dtype, KF_ACCESS_READ);
    }
    if (bias_index(p)) {
        b.bias = kf__bind(k, "bias", dtype, KF_ACCESS_READ);
    }
    if (backward && producer) {
        b.grad_out = kf__bind(k, "dy", dtype, KF_ACCESS_READ);
    } else if (backward) {
        b.out = kf__bind(k, "out", dtype, KF_ACCESS_READ);
        b.grad_out = kf__bind(k, "grad_out", dtype, KF_ACCESS_READ);
        b.grad_in = kf__bind(k, "grad_in", dtype, KF_ACCESS_READ_WRITE);
    }
    return b;
}

/* The row's mean (layernorm; 0 for rmsnorm) and a loop-free way to reach it. */
static kf_val row_mean(kf__rows *r, const norm_kind *kind, kf_binding x) {
    kf_kernel *k = r->k;
    if (!kind->center) {
        return kf_lit_f32(k, 0);
    }
    kf_var acc = kf_declare(k, "sum_acc", kf_type_scalar(KF_SCALAR_F32), kf_lit_f32(k, 0));
    kf_val i = kf__rows_for(r, "i");
    kf_assign(k, acc,
              kf_add(k, kf_read(k, acc), kf__load_f32(k, x, kf_add(k, r->base, i), r->dtype)));
    kf_end(k);
    kf_val s = kf__rows_sum(r, kf_read(k, acc));
    return kf_let(k, "mu", kf_div(k, s, kf_lit_f32(k, (float)r->cols)));
}

/* r = 1 / sqrt(sum_sq / cols + eps), from the row's sum of squared deviations. */
static kf_val row_rstd(kf__rows *r, kf_val sum_sq, float eps) {
    kf_kernel *k = r->k;
    kf_val var = kf_div(k, sum_sq, kf_lit_f32(k, (float)r->cols));
    return kf_let(k, "rstd", kf_call1(k, KF_FN_INVERSE_SQRT, kf_add(k, var, kf_lit_f32(k, eps))));
}

/* Chan et al.'s pairwise update of (count, mean, M2 = sum of squared deviations): exact in real
 * arithmetic, and free of the cancellation of sum(x^2) - n mu^2. An empty side (count 0) leaves
 * the other unchanged; max(n, 1) keeps two empty sides from dividing 0 by 0. */
static void combine_moments(kf_kernel *k, const kf_val *a, const kf_val *b, uint32_t n,
                            kf_val *out) {
    (void)n;
    kf_val count = kf_let(k, "count", kf_add(k, a[0], b[0]));
    kf_val delta = kf_let(k, "delta", kf_sub(k, b[1], a[1]));
    kf_val share =
        kf_let(k, "share", kf_div(k, b[0], kf_call2(k, KF_FN_MAX, count, kf_lit_f32(k, 1))));
    out[0] = count;
    out[1] = kf_add(k, a[1], kf_mul(k, delta, share));
    out[2] = kf_add(k, kf_add(k, a[2], b[2]),
                    kf_mul(k, kf_mul(k, delta, delta), kf_mul(k, a[0], share)));
}

/* The lane's sum over its chunks of f(chunk value), ragged chunks outside the row masked out. */
static kf_val lane_sum(kf__rows *r, const kf_var *regs, kf_val center, bool square) {
    kf_kernel *k = r->k;
    kf_val acc = kf_lit_f32(k, 0);
    for (uint32_t c = 0; c < r->chunks; c++) {
        kf_val v = kf_read(k, regs[c]);
        if (center.id) {
            v = kf_sub(k, v, center);
        }
        if (square) {
            v = kf_mul(k, v, v);
        }
        kf_val term = kf__rows_hsum(k, v);
        kf_val inside = kf__rows_unit_inside(r, c);
        if (inside.id) {
            term = kf_select(k, kf_lit_f32(k, 0), term, inside);
        }
        acc = kf_let(k, square ? "sq_sum" : "sum", kf_add(k, acc, term));
    }
    return acc;
}

/* A row held in registers (r->chunks > 0), read once. rmsnorm: the lane's sum of squares, one
 * reduction. layernorm: the lane's count, mean and squared deviations from its own mean (exact
 * two-pass over its registers), combined over the lanes in one reduction (combine_moments).
 * Then the yields, each chunk's weight and bias loaded as wide as x. */
static void norm_regs(kf__rows *r, const norm_kind *kind, const kf_op_params *p, kf_binding x,
                      kf_binding weight, kf_binding bias) {
    kf_kernel *k = r->k;
    kf_var regs[KF__ROWS_MAX_CHUNKS];
    kf__rows_load(r, x, regs);
    kf_val mu = {0, 0}, sum_sq; /* rmsnorm: no centre */
    if (kind->center) {
        /* this lane's element count: `width` per chunk inside the row */
        uint32_t full = r->chunks;
        kf_val ragged = kf__rows_unit_inside(r, r->chunks - 1);
        if (ragged.id) {
            full--;
        }
        kf_val count = kf_lit_f32(k, (float)(full * r->width));
        if (ragged.id) {
            count = kf_add(k, count,
                           kf_select(k, kf_lit_f32(k, 0), kf_lit_f32(k, (float)r->width), ragged));
        }
        count = kf_let(k, "lane_count", count);
        kf_val lane_mean = kf_let(k, "lane_mean",
                                  kf_div(k, lane_sum(r, regs, (kf_val){0, 0}, false),
                                         kf_call2(k, KF_FN_MAX, count, kf_lit_f32(k, 1))));
        kf_val partial[3] = {count, lane_mean, lane_sum(r, regs, lane_mean, true)};
        kf_val moments[3];
        kf__rows_reduce(r, 3, partial, combine_moments, moments);
        mu = moments[1];
        sum_sq = moments[2];
    } else {
        sum_sq = kf__rows_sum(r, lane_sum(r, regs, (kf_val){0, 0}, true));
    }
    kf_val rstd = row_rstd(r, sum_sq, norm_eps(p));
    kf_val ys[KF__ROWS_MAX_CHUNKS];
    for (uint32_t c = 0; c < r->chunks; c++) {
        kf_val v = kf_read(k, regs[c]);
        kf_val y = kf_mul(k, mu.id ? kf_sub(k, v, mu) : v, rstd);
        if (weight.id) {
            y = kf_mul(k, y, kf__rows_load_unit(r, weight, (kf_val){0, 0}, c));
        }
        if (bias.id) {
            y = kf_add(k, y, kf__rows_load_unit(r, bias, (kf_val){0, 0}, c));
        }
        ys[c] = kf_let(k, "y", y);
    }
    kf__rows_yield_all(r, ys);
}

static kf_kernel *norm_kernel_forward(const norm_kind *kind, const kf_shape *in,
                                      const kf_op_params *p, kf_dtype dtype) {
    kf__rows r;
    kf_kernel *k = kf__rows_begin_regs(&r, kind->name, &in[0], dtype, true);
    if (!k) {
        return NULL;
    }
    /* inputs in the op's order; wide (vec4) where the row is */
    norm_bindings b = {0};
    b.x = kf__rows_bind(&r, "x");
    if (weight_index(p)) {
        b.weight = kf__rows_bind(&r, "weight");
    }
    if (bias_index(p)) {
        b.bias = kf__rows_bind(&r, "bias");
    }
    if (r.chunks > 0) {
        norm_regs(&r, kind, p, b.x, b.weight, b.bias);
        return k;
    }
    kf_val mu = row_mean(&r, kind, b.x);
    kf_var acc = kf_declare(k, "sq_acc", kf_type_scalar(KF_SCALAR_F32), kf_lit_f32(k, 0));
    kf_val i = kf__rows_for(&r, "i");
    kf_val d = kf_let(k, "d", kf_sub(k, kf__load_f32(k, b.x, kf_add(k, r.base, i), dtype), mu));
    kf_assign(k, acc, kf_add(k, kf_read(k, acc), kf_mul(k, d, d)));
    kf_end(k);
    kf_val rstd = row_rstd(&r, kf__rows_sum(&r, kf_read(k, acc)), norm_eps(p));
    kf_if(k, r.valid);
    kf_val j = kf__rows_for(&r, "j");
    kf_val at = kf_let(k, "at", kf_add(k, r.base, j));
    kf_val y = kf_mul(k, kf_sub(k, kf__load_f32(k, b.x, at, dtype), mu), rstd);
    if (b.weight.id) {
        y = kf_mul(k, y, kf__load_f32(k, b.weight, j, dtype));
    }
    if (b.bias.id) {
        y = kf_add(k, y, kf__load_f32(k, b.bias, j, dtype));
    }
    kf__yield_f32(k, y, at, dtype);
    kf_end(k);
    kf_end(k);
    return k;
}

static void combine_sum3(kf_kernel *k, const kf_val *a, const kf_val *b, uint32_t n, kf_val *out) {
    for (uint32_t v = 0; v < n; v++) {
        out[v] = kf_add(k, a[v], b[v]);
    }
}

/* dx: one row per lane group; the mean first (layernorm), then one pass summing (x - mu)^2,
 * g and g * (x - mu) together, then the element-wise formula. */
static kf_kernel *norm_kernel_backward_x(const norm_kind *kind, const kf_shape *in,
                                         const kf_op_params *p, kf_dtype dtype, bool producer) {
    char name[64];
    snprintf(name, sizeof name, producer ? "%s_grad_x" : "%s_backward_x", kind->name);
    kf__rows r;
    kf_kernel *k = kf__rows_begin(&r, name, &in[0], dtype, producer);
    if (!k) {
        return NULL;
    }
    norm_bindings b = bind_norm(k, p, dtype, true, producer);
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_val mu = row_mean(&r, kind, b.x);
    kf_var sq = kf_declare(k, "sq_acc", f32, kf_lit_f32(k, 0));
    kf_var gs = kf_declare(k, "g_acc", f32, kf_lit_f32(k, 0));
    kf_var gd = kf_declare(k, "gd_acc", f32, kf_lit_f32(k, 0));
    kf_val i = kf__rows_for(&r, "i");
    kf_val at = kf_let(k, "at", kf_add(k, r.base, i));
    kf_val d = kf_let(k, "d", kf_sub(k, kf__load_f32(k, b.x, at, dtype), mu));
    kf_val g = kf__load_f32(k, b.grad_out, at, dtype);
    if (b.weight.id) {
        g = kf_mul(k, g, kf__load_f32(k, b.weight, i, dtype));
    }
    g = kf_let(k, "g", g);
    kf_assign(k, sq, kf_add(k, kf_read(k, sq), kf_mul(k, d, d)));
    kf_assign(k, gs, kf_add(k, kf_read(k, gs), g));
    kf_assign(k, gd, kf_add(k, kf_read(k, gd), kf_mul(k, g, d)));
    kf_end(k);
    kf_val partial[3] = {kf_read(k, sq), kf_read(k, gs), kf_read(k, gd)};
    kf_val sums[3];
    kf__rows_reduce(&r, 3, partial, combine_sum3, sums);
    kf_val rstd = row_rstd(&r, sums[0], norm_eps(p));
    kf_val inv_cols = kf_lit_f32(k, 1.0f / (float)r.cols);
    kf_val mean_g =
        kind->center ? kf_let(k, "mean_g", kf_mul(k, sums[1], inv_cols)) : kf_lit_f32(k, 0);
    /* mean(g * xhat) = r * sum(g * (x - mu)) / cols */
    kf_val mean_g_xhat = kf_let(k, "mean_g_xhat", kf_mul(k, kf_mul(k, sums[2], inv_cols), rstd));
    kf_if(k, r.valid);
    kf_val j = kf__rows_for(&r, "j");
    kf_val at2 = kf_let(k, "at", kf_add(k, r.base, j));
    kf_val xhat =
        kf_let(k, "xhat", kf_mul(k, kf_sub(k, kf__load_f32(k, b.x, at2, dtype), mu), rstd));
    kf_val g2 = kf__load_f32(k, b.grad_out, at2, dtype);
    if (b.weight.id) {
        g2 = kf_mul(k, g2, kf__load_f32(k, b.weight, j, dtype));
    }
    kf_val dx;
    if (kind->center && r.cols == 1) {
        /* One column, centred: x - mean is exactly 0, so the output does not depend on x and
         * dx is exactly 0; the general form would keep rstd (1/sqrt(eps)) times a rounding
         * residual, which a GPU contracting g - mean_g into an fma leaves non-zero (seen on an
         * H200). */
        dx = kf_lit_f32(k, 0.0f);
    } else if (!kind->center && r.cols == 1) {
        /* One column: xhat^2 = x^2 / (x^2 + eps), so g - xhat * g * xhat = g * eps * r^2 exactly;
         * the general form would subtract two nearly equal numbers and keep only rounding. */
        kf_val r3 = kf_mul(k, kf_mul(k, rstd, rstd), rstd);
        dx = kf_mul(k, kf_mul(k, g2, kf_lit_f32(k, norm_eps(p))), r3);
    } else {
        kf_val inner = kf_sub(k, kf_sub(k, g2, mean_g), kf_mul(k, xhat, mean_g_xhat));
        dx = kf_mul(k, rstd, inner);
    }
    kf__store_or_yield(k, b.grad_in, at2, dx, dtype);
    kf_end(k);
    kf_end(k);
    return k;
}

/* A serial sum over 0..n in blocks of 64: `for (b = 0; b < n; b += 64) { part = 0; for (c = b;
 * c < min(b + 64, n); c++) { ... } total += part; }`. Rounding then grows with 64 + n / 64
 * additions instead of n, which keeps a 4096-wide row's statistics at f32's accuracy. Opens both
 * loops and declares *part; returns c. The caller accumulates into *part, then closes. */
#define BLOCK 64u
static kf_val blocked_sum_open(kf_kernel *k, uint32_t n, kf_var *part) {
    kf_val block = kf_for(k, "block", kf__u32(k, 0), kf__u32(k, n), kf__u32(k, BLOCK));
    *part = kf_declare(k, "part", kf_type_scalar(KF_SCALAR_F32), kf_lit_f32(k, 0));
    kf_val end = kf_call2(k, KF_FN_MIN, kf_add(k, block, kf__u32(k, BLOCK)), kf__u32(k, n));
    return kf_for(k, "c", block, end, kf__u32(k, 1));
}

static void blocked_sum_close(kf_kernel *k, kf_var total, kf_var part) {
    kf_end(k);
    kf_assign(k, total, kf_add(k, kf_read(k, total), kf_read(k, part)));
    kf_end(k);
}

/* dweight (sum over rows of dy * xhat) or dbias (sum over rows of dy): a column reduction. A
 * workgroup owns 256 columns, one per invocation, and walks the rows in chunks of 256: for
 * dweight each invocation first computes one row's mu and r of the chunk (a serial pass over that
 * row, no barriers) into workgroup memory, then every invocation accumulates its column over the
 * chunk's rows. Row statistics are recomputed once per 256 columns. */
/* dw (or db) as column sums over the rows; with `dy_sums` (a producer only) the column sums of
 * dy as well, from the same loads, into a binding declared right after the inputs (the bias's
 * gradient riding along with the weight's: kf_operator.kernel_column_sums). */
static kf_kernel *norm_kernel_backward_param(const norm_kind *kind, const kf_shape *in,
                                             const kf_op_params *p, kf_dtype dtype, bool is_bias,
                                             bool producer, bool dy_sums) {
    uint64_t rows;
    uint32_t cols;
    kf__shape_rows_cols(&in[0], &rows, &cols);
    const uint32_t chunk = KF__WORKGROUP;
    char name[64];
    if (producer) {
        snprintf(name, sizeof name, "%s_grad_%s", kind->name, is_bias ? "b" : "w");
    } else {
        snprintf(name, sizeof name, "%s_backward_%s", kind->name, is_bias ? "bias" : "weight");
    }
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
    kf__grid_1d(cols, KF__WORKGROUP, groups);
    kf_kernel_set_grid(k, groups);
    norm_bindings b = bind_norm(k, p, dtype, true, producer);
    kf_binding sums =
        dy_sums ? kf__bind(k, "dy_sums", dtype, KF_ACCESS_READ_WRITE) : (kf_binding){0};
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);

    kf_val lane = kf_let(k, "lane", kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX));
    kf_val column = kf_let(k, "column", kf_global_linear(k));
    kf_val valid = kf_let(k, "valid", kf_binary(k, KF_OP_LT, column, kf__u32(k, cols)));
    kf_val col = kf_let(k, "col", kf_call2(k, KF_FN_MIN, column, kf__u32(k, cols - 1)));
    kf_var acc = kf_declare(k, "acc", f32, kf_lit_f32(k, 0));
    kf_var dy_acc = dy_sums ? kf_declare(k, "dy_acc", f32, kf_lit_f32(k, 0)) : (kf_var){0};
    kf_shared mu_s = {0}, rstd_s = {0};
    if (!is_bias) {
        mu_s = kf_kernel_workgroup(k, "chunk_mu", f32, chunk);
        rstd_s = kf_kernel_workgroup(k, "chunk_rstd", f32, chunk);
    }
    kf_val start = kf_for(k, "start", kf__u32(k, 0), kf__u32(k, rows), kf__u32(k, chunk));
    if (!is_bias) {
        /* this invocation's row of the chunk, clamped: spare invocations compute a real row's
         * statistics that nobody reads */
        kf_val my_row = kf_call2(k, KF_FN_MIN, kf_add(k, start, lane), kf__u32(k, rows - 1));
        kf_val my_base = kf_let(k, "my_base", kf_mul(k, my_row, kf__u32(k, cols)));
        kf_val mu = kf_lit_f32(k, 0);
        if (kind->center) {
            kf_var s = kf_declare(k, "s", f32, kf_lit_f32(k, 0));
            kf_var s_part;
            kf_val c = blocked_sum_open(k, cols, &s_part);
            kf_val v = kf__load_f32(k, b.x, kf_add(k, my_base, c), dtype);
            kf_assign(k, s_part, kf_add(k, kf_read(k, s_part), v));
            blocked_sum_close(k, s, s_part);
            mu = kf_let(k, "mu", kf_div(k, kf_read(k, s), kf_lit_f32(k, (float)cols)));
        }
        kf_var ss = kf_declare(k, "ss", f32, kf_lit_f32(k, 0));
        kf_var ss_part;
        kf_val c2 = blocked_sum_open(k, cols, &ss_part);
        kf_val d =
            kf_let(k, "d", kf_sub(k, kf__load_f32(k, b.x, kf_add(k, my_base, c2), dtype), mu));
        kf_assign(k, ss_part, kf_add(k, kf_read(k, ss_part), kf_mul(k, d, d)));
        blocked_sum_close(k, ss, ss_part);
        kf_val var = kf_div(k, kf_read(k, ss), kf_lit_f32(k, (float)cols));
        kf_val rstd = kf_call1(k, KF_FN_INVERSE_SQRT, kf_add(k, var, kf_lit_f32(k, norm_eps(p))));
        kf_shared_store(k, mu_s, lane, mu);
        kf_shared_store(k, rstd_s, lane, rstd);
        kf_barrier(k);
    }
    /* rows of this chunk: min(chunk, rows - start), the same for the whole workgroup. The chunk
     * is summed on its own and then added to the total (blocked summation: rounding grows with
     * chunk + rows / chunk additions, not rows). */
    kf_val count = kf_let(
        k, "count", kf_call2(k, KF_FN_MIN, kf__u32(k, chunk), kf_sub(k, kf__u32(k, rows), start)));
    kf_var part = kf_declare(k, "part", f32, kf_lit_f32(k, 0));
    kf_var dy_part = dy_sums ? kf_declare(k, "dy_part", f32, kf_lit_f32(k, 0)) : (kf_var){0};
    kf_val q = kf_for(k, "q", kf__u32(k, 0), count, kf__u32(k, 1));
    kf_val at = kf_let(k, "at", kf_add(k, kf_mul(k, kf_add(k, start, q), kf__u32(k, cols)), col));
    kf_val term = kf__load_f32(k, b.grad_out, at, dtype);
    if (dy_sums) {
        term = kf_let(k, "dy_v", term);
        kf_assign(k, dy_part, kf_add(k, kf_read(k, dy_part), term));
    }
    if (!is_bias) {
        kf_val xhat =
            kf_mul(k, kf_sub(k, kf__load_f32(k, b.x, at, dtype), kf_shared_load(k, mu_s, q)),
                   kf_shared_load(k, rstd_s, q));
        term = kf_mul(k, term, xhat);
    }
    kf_assign(k, part, kf_add(k, kf_read(k, part), term));
    kf_end(k);
    kf_assign(k, acc, kf_add(k, kf_read(k, acc), kf_read(k, part)));
    if (dy_sums) {
        kf_assign(k, dy_acc, kf_add(k, kf_read(k, dy_acc), kf_read(k, dy_part)));
    }
    if (!is_bias) {
        /* the next chunk overwrites the statistics */
        kf_barrier(k);
    }
    kf_end(k);
    kf_if(k, valid);
    if (dy_sums) {
        kf__store_f32(k, sums, col, kf_read(k, dy_acc), dtype);
    }
    kf__store_or_yield(k, b.grad_in, col, kf_read(k, acc), dtype);
    kf_end(k);
    return k;
}

kf_kernel *kf__norm_grad_w_with_dy_sums(bool center, const kf_shape *in, const kf_op_params *p,
                                        kf_dtype dtype) {
    return norm_kernel_backward_param(center ? &LAYERNORM : &RMSNORM, in, p, dtype, false, true,
                                      true);
}

static kf_kernel *norm_kernel_backward(const norm_kind *kind, const kf_shape *in,
                                       const kf_op_params *p, kf_dtype dtype, uint32_t which) {
    if (which == 0) {
        return norm_kernel_backward_x(kind, in, p, dtype, false);
    }
    if (which >= 1u + weight_index(p) + (p && p->has_bias ? 1u : 0u)) {
        return NULL; /* no such input */
    }
    bool is_bias = which == bias_index(p);
    return norm_kernel_backward_param(kind, in, p, dtype, is_bias, false, false);
}

kf_kernel *kf__norm_grad_kernel(bool center, const kf_shape *in, const kf_op_params *p,
                                kf_dtype dtype, bool weight) {
    const norm_kind *kind = center ? &LAYERNORM : &RMSNORM;
    if (weight) {
        return norm_kernel_backward_param(kind, in, p, dtype, false, true, false);
    }
    return norm_kernel_backward_x(kind, in, p, dtype, true);
}

static kf_kernel *rmsnorm_kernel_forward(const kf_shape *in, const kf_op_params *p,
                                         kf_dtype dtype) {
    return norm_kernel_forward(&RMSNORM, in, p, dtype);
}
static kf_kernel *layernorm_kernel_forward(const kf_shape *in, const kf_op_params *p,
                                           kf_dtype dtype) {
    return norm_kernel_forward(&LAYERNORM, in, p, dtype);
}
static kf_kernel *rmsnorm_kernel_backward(const kf_shape *in, const kf_op_params *p, kf_dtype dtype,
                                          uint32_t which) {
    return norm_kernel_backward(&RMSNORM, in, p, dtype, which);
}
static kf_kernel *layernorm_kernel_backward(const kf_shape *in, const kf_op_params *p,
                                            kf_dtype dtype, uint32_t which) {
    return norm_kernel_backward(&LAYERNORM, in, p, dtype, which);
}

static void norm_grid(const kf_shape *in, const kf_op_params *p, int32_t which,
                      uint32_t groups[3]) {
    (void)p;
    if (which < 0) {
        kf__rows_regs_grid(&in[0], groups); /* the forward kernel holds rows in registers */
        return;
    }
    if (which == 0) {
        kf__rows_grid(&in[0], groups);
        return;
    }
    uint64_t rows;
    uint32_t cols;
    kf__shape_rows_cols(&in[0], &rows, &cols);
    kf__grid_1d(cols, KF__WORKGROUP, groups);
}

/* ---------------------------------------------------------------------------------------- */
/* Verification tables and operator records                                                 */
/* ---------------------------------------------------------------------------------------- */

#define WEIGHT                                                                                     \
    { .has_weight = true }
#define BIAS                                                                                       \
    { .has_bias = true }
#define BOTH                                                                                       \
    { .has_weight = true, .has_bias = true }

/* Every parameter combination, on the row kernels' width classes (one lane, a partial tree, more
 * than 256 lanes, spare rows in the last workgroup, the forward kernel's register bounds and
 * just past them) and the column kernels' (fewer and more than 256 columns, more than one chunk
 * of 256 rows), a large eps, and 2^22 elements. */
static const kf_op_case norm_cases[] = {
    {.shapes = {SHAPE2(1, 1)}, .note = "1x1"},
    {.shapes = {SHAPE2(1, 1), SHAPE1(1), SHAPE1(1)}, .params = BOTH, .note = "1x1 weight bias"},
    {.shapes = {SHAPE2(7, 13)}, .note = "primes"},
    {.shapes = {SHAPE2(7, 13), SHAPE1(13)}, .params = WEIGHT, .note = "primes, weight"},
    {.shapes = {SHAPE2(7, 13), SHAPE1(13)}, .params = BIAS, .note = "primes, bias"},
    {.shapes = {SHAPE2(257, 129), SHAPE1(129), SHAPE1(129)},
     .params = BOTH,
     .note = "primes past a workgroup, weight and bias"},
    {.shapes = {SHAPE2(33, 17), SHAPE1(17)}, .params = WEIGHT, .note = "spare rows"},
    {.shapes = {SHAPE2(5, 300), SHAPE1(300), SHAPE1(300)},
     .params = BOTH,
     .note = "rows longer than 256 lanes"},
    {.shapes = {SHAPE2(600, 7), SHAPE1(7)}, .params = WEIGHT, .note = "three chunks of rows"},
    {.shapes = {SHAPE3(3, 5, 7), SHAPE1(7)},
     .params = {.has_weight = true, .eps = 0.1f},
     .note = "rank 3, eps 0.1"},
    {.shapes = {SHAPE2(2, 8192), SHAPE1(8192), SHAPE1(8192)},
     .params = BOTH,
     .note = "registers: 8 vec4 per lane"},
    {.shapes = {SHAPE2(3, 4093), SHAPE1(4093)},
     .params = WEIGHT,
     .note = "registers: 16 scalars per lane, ragged"},
    {.shapes = {SHAPE2(3, 8200), SHAPE1(8200), SHAPE1(8200)},
     .params = BOTH,
     .note = "past the registers (vec4): loops"},
    {.shapes = {SHAPE2(2, 4099)}, .note = "past the registers (scalars): loops"},
    {.shapes = {SHAPE2(1024, 4096), SHAPE1(4096), SHAPE1(4096)},
     .params = BOTH,
     .note = "large: 2^22 elements"},
};
#define NORM_CASE_COUNT ((uint32_t)(sizeof norm_cases / sizeof norm_cases[0]))

/* Tolerances: relative error against max(|spec|, 1% of the spec's rms) (f16: at least 2^-14), as
 * kf_op_verify measures it; measured maxima on llvmpipe are in docs/operators.md.
 * forward: r comes from an f32 sum of squares (lane loop, then tree) and inverseSqrt (2 ulp);
 * layernorm's x - mu carries mu's rounding, ulp(|mu|), which r multiplies: rows whose values
 * nearly coincide lose digits here as in any f32 layernorm (measured 7e-5 for rows of 3 drawn in
 * [-2, 2); the table uses 7 so that the check stays about the kernels).
 * backward: dx subtracts mean(g) and xhat * mean(g * xhat) from g, cancelling down to the
 * gradient's size, and dweight / dbias are f32 sums over up to 1024 rows (blocked by 256); each
 * term's xhat carries r's relative error from a 4096-wide f32 sum of squares. Measured 9.5e-5 at
 * 2^22 elements: 3e-4. f16: the gradient's rounding to f16 and a one-ulp flip (2^-10), 2e-3. */
const kf_operator kf__op_rmsnorm = {
    .name = "rmsnorm",
    .about = "x / sqrt(mean(x^2) + eps) over the last axis, optional weight and bias rows",
    .op_class = KF_OP_CLASS_ROW_REDUCTION,
    .arity = 1,
    KF__INPUTS(norm_inputs),
    KF__PARAMS(norm_params),
    .shape = rmsnorm_shape,
    .spec_forward = rmsnorm_spec_forward,
    .spec_backward = rmsnorm_spec_backward,
    .kernel_forward = rmsnorm_kernel_forward,
    .kernel_backward = rmsnorm_kernel_backward,
    .tolerance_f32 = 3e-4,
    .tolerance_f16 = 2e-3,
    .input_lo = -2.0f,
    .input_hi = 2.0f,
    .grid = norm_grid,
    .cases = norm_cases,
    .case_count = NORM_CASE_COUNT,
};

const kf_operator kf__op_layernorm = {
    .name = "layernorm",
    .about = "(x - mean) / sqrt(var + eps) over the last axis, optional weight and bias rows",
    .op_class = KF_OP_CLASS_ROW_REDUCTION,
    .arity = 1,
    KF__INPUTS(norm_inputs),
    KF__PARAMS(norm_params),
    .shape = layernorm_shape,
    .spec_forward = layernorm_spec_forward,
    .spec_backward = layernorm_spec_backward,
    .kernel_forward = layernorm_kernel_forward,
    .kernel_backward = layernorm_kernel_backward,
    .tolerance_f32 = 3e-4,
    .tolerance_f16 = 2e-3,
    .input_lo = -2.0f,
    .input_hi = 2.0f,
    .grid = norm_grid,
    .cases = norm_cases,
    .case_count = NORM_CASE_COUNT,
};
