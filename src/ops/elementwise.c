/* Element-wise operators: the generic kernel and spec builders with broadcasting, and every unary
 * and binary op as four small functions (double spec, its derivative, f32 IR forward and
 * backward). Semantics, tolerances and NaN behaviour are tabled in docs/operators.md.
 *
 * NaN: WGSL leaves min/max/clamp of NaN to the implementation and lets compilers assume NaN
 * never occurs, so kernels never use min/max on data: they select on comparisons (false for NaN)
 * and test NaN by its bits (kf__isnan), and the spec is written with the same rules, so both sides
 * agree: relu, leaky_relu and maximum propagate NaN (maximum: NaN when either is). Backward is
 * derivative * grad_out on both sides, so 0 * inf is NaN on both. */
#include "ops/ops_internal.h"
#include "ops/rowwise.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------- */
/* Generic kernels                                                                          */
/* ---------------------------------------------------------------------------------------- */

static const char *const input_names[4] = {"a", "b", "c", "d"};

static kf_dtype input_dtype(const kf_operator *op, uint32_t i, kf_dtype dtype) {
    return (op->index_inputs >> i) & 1u ? KF_DTYPE_I32 : dtype;
}

/* The element of an input read for output element i. */
static kf_val bcast_index(kf_kernel *k, kf__bcast kind, kf_val i, uint32_t cols) {
    switch (kind) {
    case KF__BCAST_SCALAR:
        return kf__u32(k, 0);
    case KF__BCAST_ROW:
        return kf_binary(k, KF_OP_MOD, i, kf__u32(k, cols));
    case KF__BCAST_COL:
        return kf_div(k, i, kf__u32(k, cols));
    case KF__BCAST_FULL:
    case KF__BCAST_NONE:
        break;
    }
    return i;
}

static uint64_t bcast_offset(kf__bcast kind, uint64_t i, uint32_t cols) {
    switch (kind) {
    case KF__BCAST_SCALAR:
        return 0;
    case KF__BCAST_ROW:
        return i % cols;
    case KF__BCAST_COL:
        return i / cols;
    case KF__BCAST_FULL:
    case KF__BCAST_NONE:
        break;
    }
    return i;
}

/* Shapes, arity and broadcast kinds of an element-wise op on these inputs; false if they do not
 * fit (the builders then return NULL: callers check shapes with op->shape first). */
static bool ew_layout(const kf_operator *op, const kf_shape *in, const kf_op_params *p,
                      uint32_t *arity, kf_shape *out, kf__bcast kinds[4]) {
    *arity = kf_op_arity(op, p);
    if (*arity == 0 || *arity > 4 || op->shape(in, p, out, NULL, 0) != KF_OK) {
        return false;
    }
    for (uint32_t i = 0; i < *arity; i++) {
        kinds[i] = kf__broadcast_kind(&in[i], out);
        if (kinds[i] == KF__BCAST_NONE) {
            return false;
        }
    }
    return true;
}

/* Loads every input at output element i, as f32. */
static void load_inputs(kf_kernel *k, const kf_operator *op, const kf_binding *b,
                        const kf__bcast *kinds, uint32_t arity, kf_val i, uint32_t cols,
                        kf_dtype dtype, kf_val *x) {
    for (uint32_t j = 0; j < arity; j++) {
        x[j] = kf__load_f32(k, b[j], bcast_index(k, kinds[j], i, cols), input_dtype(op, j, dtype));
    }
}

kf_kernel *kf__ew_kernel_forward(const kf_operator *op, const kf_shape *in, const kf_op_params *p,
                                 kf_dtype dtype) {
    uint32_t arity;
    kf_shape out;
    kf__bcast kinds[4];
    if (!op->expr || !ew_layout(op, in, p, &arity, &out, kinds)) {
        return NULL;
    }
    uint64_t n = kf_shape_elements(&out);
    uint32_t cols;
    kf__shape_rows_cols(&out, NULL, &cols);

    kf_kernel_desc desc = {0};
    desc.name = op->name;
    desc.workgroup_size[0] = KF__WORKGROUP;
    desc.output = kf__dtype_type(dtype);
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    uint32_t groups[3];
    kf__ew_grid(in, arity, -1, groups);
    kf_kernel_set_grid(k, groups);
    kf_binding b[4];
    for (uint32_t j = 0; j < arity; j++) {
        b[j] = kf__bind(k, input_names[j], input_dtype(op, j, dtype), KF_ACCESS_READ);
    }
    kf_val i = kf_let(k, "i", kf_global_linear(k));
    kf_if(k, kf_binary(k, KF_OP_LT, i, kf__u32(k, n)));
    kf_val x[4];
    load_inputs(k, op, b, kinds, arity, i, cols, dtype, x);
    kf__yield_f32(k, op->expr(k, x, p), i, dtype);
    kf_end(k);
    return k;
}

kf_kernel *kf__ew_kernel_backward(const kf_operator *op, const kf_shape *in, const kf_op_params *p,
                                  kf_dtype dtype, uint32_t which) {
    uint32_t arity;
    kf_shape out;
    kf__bcast kinds[4];
    if (!op->expr_backward || !ew_layout(op, in, p, &arity, &out, kinds) || which >= arity ||
        ((op->index_inputs >> which) & 1u)) {
        return NULL;
    }
    uint64_t rows, n = kf_shape_elements(&out);
    uint32_t cols;
    kf__shape_rows_cols(&out, &rows, &cols);

    kf_kernel_desc desc = {0};
    desc.name = op->name;
    desc.workgroup_size[0] = KF__WORKGROUP;
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    uint32_t groups[3];
    kf__ew_grid(in, arity, (int32_t)which, groups);
    kf_kernel_set_grid(k, groups);
    kf_binding b[4];
    for (uint32_t j = 0; j < arity; j++) {
        b[j] = kf__bind(k, input_names[j], input_dtype(op, j, dtype), KF_ACCESS_READ);
    }
    kf_binding b_out = kf__bind(k, "out", dtype, KF_ACCESS_READ);
    kf_binding b_grad_out = kf__bind(k, "grad_out", dtype, KF_ACCESS_READ);
    kf_binding b_grad_in = kf__bind(k, "grad_in", dtype, KF_ACCESS_READ_WRITE);
    kf_val x[4];
    kf__bcast kind = kinds[which];

    if (kind == KF__BCAST_FULL) {
        kf_val i = kf_let(k, "i", kf_global_linear(k));
        kf_if(k, kf_binary(k, KF_OP_LT, i, kf__u32(k, n)));
        load_inputs(k, op, b, kinds, arity, i, cols, dtype, x);
        kf_val y = kf__load_f32(k, b_out, i, dtype);
        kf_val g = kf__load_f32(k, b_grad_out, i, dtype);
        kf__store_f32(k, b_grad_in, i, op->expr_backward(k, x, y, g, which, p), dtype);
        kf_end(k);
        return k;
    }

    /* A broadcast input: grad_in[j] sums the per-element gradient over every output element that
     * read in[j]. One workgroup per j; its invocations stride over those elements, then a tree
     * in workgroup memory adds the partial sums. */
    uint64_t m = kf_shape_elements(&in[which]);
    kf_shared partial =
        kf_kernel_workgroup(k, "partial", kf_type_scalar(KF_SCALAR_F32), KF__WORKGROUP);
    kf_val j = kf_let(k, "j", kf_workgroup_linear(k));
    kf_val lid = kf_let(k, "lid", kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX));
    /* j is uniform over the workgroup, so the barriers below stay in uniform control flow */
    kf_if(k, kf_binary(k, KF_OP_LT, j, kf__u32(k, m)));
    kf_var acc = kf_declare(k, "acc", kf_type_scalar(KF_SCALAR_F32), kf_lit_f32(k, 0.0f));
    uint64_t count = kind == KF__BCAST_SCALAR ? n : kind == KF__BCAST_ROW ? rows : cols;
    kf_val t = kf_for(k, "t", lid, kf__u32(k, count), kf__u32(k, KF__WORKGROUP));
    kf_val i = t; /* SCALAR: every element */
    if (kind == KF__BCAST_ROW) {
        i = kf_add(k, kf_mul(k, t, kf__u32(k, cols)), j);
    } else if (kind == KF__BCAST_COL) {
        i = kf_add(k, kf_mul(k, j, kf__u32(k, cols)), t);
    }
    i = kf_let(k, "i", i);
    load_inputs(k, op, b, kinds, arity, i, cols, dtype, x);
    kf_val y = kf__load_f32(k, b_out, i, dtype);
    kf_val g = kf__load_f32(k, b_grad_out, i, dtype);
    kf_assign(k, acc, kf_add(k, kf_read(k, acc), op->expr_backward(k, x, y, g, which, p)));
    kf_end(k);
    kf_shared_store(k, partial, lid, kf_read(k, acc));
    kf_barrier(k);
    for (uint32_t s = KF__WORKGROUP / 2; s > 0; s /= 2) {
        kf_if(k, kf_binary(k, KF_OP_LT, lid, kf__u32(k, s)));
        kf_shared_store(k, partial, lid,
                        kf_add(k, kf_shared_load(k, partial, lid),
                               kf_shared_load(k, partial, kf_add(k, lid, kf__u32(k, s)))));
        kf_end(k);
        kf_barrier(k);
    }
    kf_if(k, kf_binary(k, KF_OP_EQ, lid, kf__u32(k, 0)));
    kf__store_f32(k, b_grad_in, j, kf_shared_load(k, partial, kf__u32(k, 0)), dtype);
    kf_end(k);
    kf_end(k);
    return k;
}

void kf__ew_grid(const kf_shape *in, uint32_t arity, int32_t which, uint32_t groups[3]) {
    kf_shape out;
    if (kf__broadcast_shape(in, arity, "", &out, NULL, 0) != KF_OK) {
        groups[0] = groups[1] = groups[2] = 1;
        return;
    }
    if (which >= 0 && (uint32_t)which < arity &&
        kf__broadcast_kind(&in[which], &out) != KF__BCAST_FULL) {
        /* one workgroup per element of the broadcast input's gradient */
        kf__grid_1d(kf_shape_elements(&in[which]), 1, groups);
        return;
    }
    kf__grid_1d(kf_shape_elements(&out), KF__WORKGROUP, groups);
}

/* ---------------------------------------------------------------------------------------- */
/* Generic specs                                                                            */
/* ---------------------------------------------------------------------------------------- */

kf_status kf__ew_spec_forward(kf__ew_scalar_fn f, uint32_t arity, const kf_tensor *const *in,
                              const kf_op_params *p, kf_tensor *out) {
    kf__bcast kinds[4];
    if (arity == 0 || arity > 4) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    for (uint32_t j = 0; j < arity; j++) {
        kinds[j] = kf__broadcast_kind(&in[j]->shape, &out->shape);
        if (kinds[j] == KF__BCAST_NONE) {
            return KF_ERROR_SHAPE;
        }
    }
    uint64_t n = kf_tensor_size(out);
    uint32_t cols;
    kf__shape_rows_cols(&out->shape, NULL, &cols);
    for (uint64_t i = 0; i < n; i++) {
        double x[4];
        for (uint32_t j = 0; j < arity; j++) {
            x[j] = in[j]->data[bcast_offset(kinds[j], i, cols)];
        }
        out->data[i] = (float)f(x, p);
    }
    return KF_OK;
}

kf_status kf__ew_spec_backward(kf__ew_scalar_grad_fn df, uint32_t arity, const kf_tensor *const *in,
                               const kf_tensor *out, const kf_tensor *grad_out,
                               const kf_op_params *p, kf_tensor *const *grad_in) {
    kf__bcast kinds[4];
    double *sum[4] = {0};
    if (arity == 0 || arity > 4 || !kf_shape_eq(&out->shape, &grad_out->shape)) {
        return KF_ERROR_SHAPE;
    }
    kf_status st = KF_OK;
    for (uint32_t j = 0; j < arity; j++) {
        kinds[j] = kf__broadcast_kind(&in[j]->shape, &out->shape);
        if (kinds[j] == KF__BCAST_NONE ||
            (grad_in[j] && !kf_shape_eq(&grad_in[j]->shape, &in[j]->shape))) {
            st = KF_ERROR_SHAPE;
        } else if (grad_in[j]) {
            sum[j] = calloc((size_t)kf_tensor_size(in[j]), sizeof(double));
            if (!sum[j]) {
                st = KF_ERROR_OUT_OF_MEMORY;
            }
        }
    }
    if (st == KF_OK) {
        uint64_t n = kf_tensor_size(out);
        uint32_t cols;
        kf__shape_rows_cols(&out->shape, NULL, &cols);
        for (uint64_t i = 0; i < n; i++) {
            double x[4];
            for (uint32_t j = 0; j < arity; j++) {
                x[j] = in[j]->data[bcast_offset(kinds[j], i, cols)];
            }
            for (uint32_t j = 0; j < arity; j++) {
                if (sum[j]) {
                    sum[j][bcast_offset(kinds[j], i, cols)] +=
                        df(x, out->data[i], j, p) * grad_out->data[i];
                }
            }
        }
        for (uint32_t j = 0; j < arity; j++) {
            uint64_t m = sum[j] ? kf_tensor_size(in[j]) : 0;
            for (uint64_t e = 0; e < m; e++) {
                grad_in[j]->data[e] = (float)sum[j][e];
            }
        }
    }
    for (uint32_t j = 0; j < arity; j++) {
        free(sum[j]);
    }
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* IR shorthands                                                                            */
/* ---------------------------------------------------------------------------------------- */

static kf_val lit(kf_kernel *k, double v) {
    return kf_lit_f32(k, (float)v);
}

static kf_val neg(kf_kernel *k, kf_val a) {
    return kf_unary(k, KF_OP_NEG, a);
}

static kf_val lt(kf_kernel *k, kf_val a, kf_val b) {
    return kf_binary(k, KF_OP_LT, a, b);
}

static kf_val gt(kf_kernel *k, kf_val a, kf_val b) {
    return kf_binary(k, KF_OP_GT, a, b);
}

/* Whether $KF_EW_NEWTON (a comma-separated list of tanh, sigmoid, gelu, silu; for measuring,
 * see bench/sweep/chain_variants.c and bench/h200_s7_chain.sh) names `what`: its reciprocal of
 * 1 + exp(.) then goes through newton_div instead of a division. silu's sigmoid is named apart
 * from sigmoid's, as the hand-written chain that measured the mix (c8r2) has it. */
static bool newton_for(const char *what) {
    const char *env = getenv("KF_EW_NEWTON");
    size_t n = strlen(what);
    for (const char *at = env; at && *at;) {
        if (strncmp(at, what, n) == 0 && (at[n] == ',' || at[n] == 0)) {
            return true;
        }
        at = strchr(at, ',');
        at = at ? at + 1 : NULL;
    }
    return false;
}

/* num / d for d >= 1 without the special-function units' reciprocal (8 of them an element is
 * what the 8-operator chain costs on NVIDIA, about the units' rate at copy speed): the bit trick's
 * estimate (within 12%) and three Newton steps (2 FMA each, to f32 rounding). Past 1e30 (inf
 * included: exp's overflow) the quotient is num * 0, the limit of num / inf; a NaN d fails the
 * comparison, stays NaN through the steps and propagates. */
static kf_val newton_div(kf_kernel *k, kf_val num, kf_val d0) {
    kf_val huge = kf_let(k, "huge", gt(k, d0, lit(k, 1e30)));
    kf_val d = kf_let(k, "d", kf_select(k, d0, lit(k, 1.0), huge));
    /* scalars: the element-wise emission computes each lane of a vec4 on its own */
    kf_type u = kf_type_scalar(KF_SCALAR_U32), f = kf_type_scalar(KF_SCALAR_F32);
    kf_val y =
        kf_bitcast(k, f, kf_binary(k, KF_OP_SUB, kf_lit_u32(k, 0x7ef311c3u), kf_bitcast(k, u, d)));
    for (int i = 0; i < 3; i++) {
        y = kf_let(k, "r",
                   kf_call3(k, KF_FN_FMA, y, kf_call3(k, KF_FN_FMA, neg(k, d), y, lit(k, 1.0)), y));
    }
    return kf_select(k, kf_mul(k, num, y), kf_mul(k, num, lit(k, 0.0)), huge);
}

static kf_val div_one_plus(kf_kernel *k, const char *what, kf_val num, kf_val e) {
    kf_val d = kf_add(k, lit(k, 1.0), e);
    return newton_for(what) ? newton_div(k, num, d) : kf_div(k, num, d);
}

/* exp(-x) based sigmoid: exp overflows to inf for x < -88, and 1 / inf = 0 is the right limit.
 * `what` names the operator it serves for $KF_EW_NEWTON (sigmoid, silu). */
static kf_val ir_sigmoid(kf_kernel *k, kf_val x, const char *what) {
    return div_one_plus(k, what, lit(k, 1.0), kf_call1(k, KF_FN_EXP, neg(k, x)));
}

/* tanh as 2 sigmoid(2x) - 1 = 2 / (1 + exp(-2x)) - 1, not the builtin: exp's overflow gives
 * the limits (2 / inf - 1 = -1 below x = -44, and exp(-2x) = 0 gives 1 above), NaN propagates,
 * and NVIDIA's tanh builtin costs more than an exp and a reciprocal (H200, 2^28 f32: the
 * 8-operator chain written by hand at 88.5% of copy bandwidth with it, 93.4% with this form;
 * bench/sweep/chain_variants.c, bench/results/s5/h200_f32-explore.log). Below
 * |x| = 1/16, where 2 / (1 + e) - 1 cancels, the series x (1 - x^2/3 + 2 x^4/15) (relative error
 * < 4e-9 there); above it the ratio keeps a relative error below 3e-6 with a correctly rounded
 * exp. */
static kf_val ir_tanh(kf_kernel *k, kf_val x) {
    kf_val e = kf_call1(k, KF_FN_EXP, kf_mul(k, lit(k, -2.0), x));
    kf_val ratio = kf_sub(k, div_one_plus(k, "tanh", lit(k, 2.0), e), lit(k, 1.0));
    kf_val x2 = kf_mul(k, x, x);
    kf_val poly = kf_add(k, lit(k, -1.0 / 3.0), kf_mul(k, x2, lit(k, 2.0 / 15.0)));
    kf_val series = kf_add(k, x, kf_mul(k, x, kf_mul(k, x2, poly)));
    return kf_select(k, ratio, series, lt(k, kf_call1(k, KF_FN_ABS, x), lit(k, 0.0625)));
}

/* ---------------------------------------------------------------------------------------- */
/* Unary operators                                                                          */
/* ---------------------------------------------------------------------------------------- */

/* Inputs are drawn in [-4, 4) unless said otherwise: both sides of every kink and the curved
 * part of every activation, with outputs in f16's range. */

/* relu(x) = x < 0 ? 0 : x. relu(NaN) = NaN, relu(-0) = -0. d/dx = x > 0 ? 1 : 0 (0 at NaN).
 * The kernel re-selects x where it is NaN, so a compiler turning the select into max(x, 0) cannot
 * change the result. */
static double relu_f(const double *x, const kf_op_params *p) {
    (void)p;
    return x[0] < 0 ? 0.0 : x[0];
}
static double relu_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    (void)y, (void)which, (void)p;
    return x[0] > 0 ? 1.0 : 0.0;
}
static kf_val relu_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    (void)p;
    kf_val r = kf_select(k, x[0], lit(k, 0.0), lt(k, x[0], lit(k, 0.0)));
    return kf_select(k, r, x[0], kf__isnan(k, x[0]));
}
static kf_val relu_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g, uint32_t which,
                                 const kf_op_params *p) {
    (void)y, (void)which, (void)p;
    return kf_mul(k, kf_select(k, lit(k, 0.0), lit(k, 1.0), gt(k, x[0], lit(k, 0.0))), g);
}

/* leaky_relu(x) = x < 0 ? alpha x : x, alpha = 0.01 by default. */
static const kf__param leaky_relu_params[] = {
    {.name = "alpha",
     .about = "slope for x < 0",
     .type = KF_PARAM_TYPE_FLOAT,
     KF__FIELD(alpha, ALPHA),
     .default_value = 0.01,
     KF__ANY_FLOAT},
};
#define LEAKY_ALPHA(p) ((float)kf__param_value(p, &leaky_relu_params[0]))
static double leaky_relu_f(const double *x, const kf_op_params *p) {
    return x[0] < 0 ? (double)LEAKY_ALPHA(p) * x[0] : x[0];
}
static double leaky_relu_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    (void)y, (void)which;
    return x[0] > 0 ? 1.0 : (double)LEAKY_ALPHA(p);
}
static kf_val leaky_relu_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    kf_val a = kf_lit_f32(k, LEAKY_ALPHA(p));
    return kf_select(k, x[0], kf_mul(k, a, x[0]), lt(k, x[0], lit(k, 0.0)));
}
static kf_val leaky_relu_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g,
                                       uint32_t which, const kf_op_params *p) {
    (void)y, (void)which;
    kf_val a = kf_lit_f32(k, LEAKY_ALPHA(p));
    return kf_mul(k, kf_select(k, a, lit(k, 1.0), gt(k, x[0], lit(k, 0.0))), g);
}

/* sigmoid(x) = 1 / (1 + exp(-x)); d/dx = y (1 - y). */
static double sigmoid_f(const double *x, const kf_op_params *p) {
    (void)p;
    return 1.0 / (1.0 + exp(-x[0]));
}
static double sigmoid_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    (void)x, (void)which, (void)p;
    return y * (1.0 - y);
}
static kf_val sigmoid_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    (void)p;
    return ir_sigmoid(k, x[0], "sigmoid");
}
static kf_val sigmoid_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g,
                                    uint32_t which, const kf_op_params *p) {
    (void)x, (void)which, (void)p;
    return kf_mul(k, kf_mul(k, y, kf_sub(k, lit(k, 1.0), y)), g);
}

/* tanh; d/dx = 1 - y^2. */
static double tanh_f(const double *x, const kf_op_params *p) {
    (void)p;
    return tanh(x[0]);
}
static double tanh_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    (void)x, (void)which, (void)p;
    return 1.0 - y * y;
}
static kf_val tanh_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    (void)p;
    return ir_tanh(k, x[0]);
}
static kf_val tanh_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g, uint32_t which,
                                 const kf_op_params *p) {
    (void)x, (void)which, (void)p;
    return kf_mul(k, kf_sub(k, lit(k, 1.0), kf_mul(k, y, y)), g);
}

/* gelu: the tanh approximation 0.5 x (1 + tanh(c (x + 0.044715 x^3))), c = sqrt(2/pi); with
 * params.exact (or as gelu_exact) the erf form 0.5 x (1 + erf(x / sqrt 2)). */
#define GELU_C 0.7978845608028654 /* sqrt(2 / pi) */
#define GELU_K 0.044715
#define INV_SQRT2 0.7071067811865476
#define INV_SQRT_2PI 0.3989422804014327

/* 1 + erf(z) without cancellation: erfc(-z) for z < 0, 2 - erfc(z) otherwise, with erfc from
 * the Chebyshev-fitted form of Numerical Recipes (erfcc: fractional error below 1.2e-7 for every
 * argument). 1 + erf(z) computed as written keeps only rounding noise below z = -3, where
 * gelu_exact's values are still well inside f32's range. */
static kf_val one_plus_erf(kf_kernel *k, kf_val z) {
    static const double coef[] = {-1.26551223, 1.00002368,  0.37409196, 0.09678418,  -0.18628806,
                                  0.27886807,  -1.13520398, 1.48851587, -0.82215223, 0.17087277};
    kf_val a = kf_let(k, "a", kf_call1(k, KF_FN_ABS, z));
    kf_val t =
        kf_let(k, "t", kf_div(k, lit(k, 1.0), kf_add(k, lit(k, 1.0), kf_mul(k, lit(k, 0.5), a))));
    kf_val poly = lit(k, coef[9]);
    for (int i = 8; i >= 0; i--) {
        poly = kf_add(k, lit(k, coef[i]), kf_mul(k, t, poly));
    }
    kf_val erfc_a =
        kf_let(k, "erfc_a", kf_mul(k, t, kf_call1(k, KF_FN_EXP, kf_sub(k, poly, kf_mul(k, a, a)))));
    kf_val negative = kf_binary(k, KF_OP_LT, z, lit(k, 0.0));
    return kf_select(k, kf_sub(k, lit(k, 2.0), erfc_a), erfc_a, negative);
}

/* The specs avoid cancellation too, in float64: 1 + erf(z) = erfc(-z), and with
 * s = 1 / (1 + exp(-2u)), 1 + tanh(u) = 2 s and 1 - tanh(u)^2 = 4 s (1 - s) where
 * 1 - s = exp(-2u) s. Written as 1 + tanh(u), a double keeps only 1e-16 / (1 + tanh u) of
 * relative precision: 8e-4 at x = -6.3, more than the kernels' tolerance (a verify case found
 * the spec, not the kernel, wrong there). */
static double gelu_f(const double *x, const kf_op_params *p) {
    double v = x[0];
    if (p->exact) {
        return 0.5 * v * erfc(-v * INV_SQRT2);
    }
    double u = GELU_C * (v + GELU_K * v * v * v);
    return v / (1.0 + exp(-2.0 * u));
}
static double gelu_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    (void)y, (void)which;
    double v = x[0];
    if (p->exact) {
        return 0.5 * erfc(-v * INV_SQRT2) + v * INV_SQRT_2PI * exp(-0.5 * v * v);
    }
    double u = GELU_C * (v + GELU_K * v * v * v);
    double e = exp(-2.0 * u), s = 1.0 / (1.0 + e);
    double one_minus_t2 = isinf(e) ? 0.0 : 4.0 * s * (e * s);
    return s + 0.5 * v * one_minus_t2 * GELU_C * (1.0 + 3.0 * GELU_K * v * v);
}
static kf_val gelu_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    kf_val v = x[0];
    if (p->exact) {
        kf_val e1 = one_plus_erf(k, kf_mul(k, v, lit(k, INV_SQRT2)));
        return kf_mul(k, kf_mul(k, lit(k, 0.5), v), e1);
    }
    /* 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)): the same function without the cancellation of
     * 1 + tanh(u) for negative u, where the tanh form keeps only rounding noise below x = -4
     * (exp's overflow to inf for very negative u gives the right limit, x / inf = -0). */
    kf_val v3 = kf_mul(k, kf_mul(k, v, v), v);
    kf_val u = kf_mul(k, lit(k, GELU_C), kf_add(k, v, kf_mul(k, lit(k, GELU_K), v3)));
    kf_val e = kf_call1(k, KF_FN_EXP, kf_mul(k, lit(k, -2.0), u));
    return div_one_plus(k, "gelu", v, e);
}
static kf_val gelu_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g, uint32_t which,
                                 const kf_op_params *p) {
    (void)y, (void)which;
    kf_val v = x[0];
    kf_val d;
    if (p->exact) {
        kf_val e1 = one_plus_erf(k, kf_mul(k, v, lit(k, INV_SQRT2)));
        kf_val pdf = kf_mul(k, lit(k, INV_SQRT_2PI),
                            kf_call1(k, KF_FN_EXP, kf_mul(k, lit(k, -0.5), kf_mul(k, v, v))));
        d = kf_add(k, kf_mul(k, lit(k, 0.5), e1), kf_mul(k, v, pdf));
    } else {
        kf_val v2 = kf_mul(k, v, v);
        kf_val u =
            kf_mul(k, lit(k, GELU_C), kf_add(k, v, kf_mul(k, lit(k, GELU_K), kf_mul(k, v2, v))));
        kf_val du =
            kf_mul(k, lit(k, GELU_C), kf_add(k, lit(k, 1.0), kf_mul(k, lit(k, 3.0 * GELU_K), v2)));
        /* Stable forms again: 0.5 (1 + tanh u) = 1 / (1 + exp(-2u)), and with e = exp(-2|u|)
         * in (0, 1], sech^2 u = 4e / (1 + e)^2, which neither cancels nor overflows. */
        kf_val half_1pt =
            kf_div(k, lit(k, 1.0),
                   kf_add(k, lit(k, 1.0), kf_call1(k, KF_FN_EXP, kf_mul(k, lit(k, -2.0), u))));
        kf_val ea = kf_let(
            k, "ea", kf_call1(k, KF_FN_EXP, kf_mul(k, lit(k, -2.0), kf_call1(k, KF_FN_ABS, u))));
        kf_val one_ea = kf_add(k, lit(k, 1.0), ea);
        kf_val sech2 = kf_div(k, kf_mul(k, lit(k, 4.0), ea), kf_mul(k, one_ea, one_ea));
        d = kf_add(k, half_1pt, kf_mul(k, kf_mul(k, kf_mul(k, lit(k, 0.5), v), sech2), du));
    }
    return kf_mul(k, d, g);
}

/* gelu_exact: gelu with params.exact forced on, for the graph language's name. */
static kf_op_params with_exact(const kf_op_params *p) {
    kf_op_params q = *p;
    q.exact = true;
    return q;
}
static double gelu_exact_f(const double *x, const kf_op_params *p) {
    kf_op_params q = with_exact(p);
    return gelu_f(x, &q);
}
static double gelu_exact_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    kf_op_params q = with_exact(p);
    return gelu_df(x, y, which, &q);
}
static kf_val gelu_exact_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    kf_op_params q = with_exact(p);
    return gelu_expr(k, x, &q);
}
static kf_val gelu_exact_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g,
                                       uint32_t which, const kf_op_params *p) {
    kf_op_params q = with_exact(p);
    return gelu_expr_backward(k, x, y, g, which, &q);
}

/* silu(x) = x sigmoid(x); d/dx = s (1 + x (1 - s)). */
static double silu_f(const double *x, const kf_op_params *p) {
    (void)p;
    return x[0] / (1.0 + exp(-x[0]));
}
static double silu_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    (void)y, (void)which, (void)p;
    double s = 1.0 / (1.0 + exp(-x[0]));
    return s * (1.0 + x[0] * (1.0 - s));
}
static kf_val silu_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    (void)p;
    return kf_mul(k, x[0], ir_sigmoid(k, x[0], "silu"));
}
static kf_val silu_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g, uint32_t which,
                                 const kf_op_params *p) {
    (void)y, (void)which, (void)p;
    kf_val s = kf_let(k, "s", ir_sigmoid(k, x[0], "silu"));
    kf_val d = kf_mul(k, s, kf_add(k, lit(k, 1.0), kf_mul(k, x[0], kf_sub(k, lit(k, 1.0), s))));
    return kf_mul(k, d, g);
}

/* exp; d/dx = y. */
static double exp_f(const double *x, const kf_op_params *p) {
    (void)p;
    return exp(x[0]);
}
static double exp_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    (void)x, (void)which, (void)p;
    return y;
}
static kf_val exp_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    (void)p;
    return kf_call1(k, KF_FN_EXP, x[0]);
}
static kf_val exp_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g, uint32_t which,
                                const kf_op_params *p) {
    (void)x, (void)which, (void)p;
    return kf_mul(k, y, g);
}

/* log (natural); inputs drawn in [0.1, 4). d/dx = 1/x. log(0) = -inf, log(x < 0) = NaN,
 * log(inf) = inf, log(NaN) = NaN. The kernel does not use WGSL's log, whose accuracy is only an
 * absolute 2^-21 near 1 (relative error 0.06 at 1 - 1e-6) and which sees subnormal inputs as 0
 * on a device that flushes them (the H200: log(1e-40) = -inf). Instead, fdlibm's logf
 * (FreeBSD e_logf.c): x = 2^k m with m in [sqrt(2)/2, sqrt(2)), f = m - 1 exactly (Sterbenz),
 * s = f / (2 + f) and log(1 + f) = f - f^2/2 + s (f^2/2 + R(s^2)) with a degree-4 polynomial R;
 * then k ln2 in two parts. Every step is integer work on the bits or arithmetic on normal
 * numbers: a subnormal x is rebuilt exactly as (its mantissa as an integer, converted) x
 * 2^-149, so flushing hardware gets it right too. Relative error within a few ulp everywhere,
 * near 1 included. */
static double log_f(const double *x, const kf_op_params *p) {
    (void)p;
    return log(x[0]);
}
static double log_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    (void)y, (void)which, (void)p;
    return 1.0 / x[0];
}
static kf_val u32_lit(kf_kernel *k, uint32_t v) {
    return kf_lit_u32(k, v);
}
static kf_val bit_and(kf_kernel *k, kf_val a, uint32_t mask) {
    return kf_binary(k, KF_OP_BIT_AND, a, u32_lit(k, mask));
}
static kf_val f32_from_bits(kf_kernel *k, kf_val bits) {
    return kf_bitcast(k, kf_type_scalar(KF_SCALAR_F32), bits);
}

static kf_val log_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    (void)p;
    kf_type u32 = kf_type_scalar(KF_SCALAR_U32), f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_val bits = kf_let(k, "log_bits", kf_bitcast(k, u32, x[0]));
    kf_val mag = kf_let(k, "log_mag", bit_and(k, bits, 0x7fffffffu));
    kf_val tiny = kf_let(k, "log_sub", kf_binary(k, KF_OP_LT, mag, u32_lit(k, 0x00800000u)));
    /* a subnormal is mantissa x 2^-149: take the mantissa as a (normal) number instead */
    kf_val y = kf_select(k, x[0], kf_cast(k, f32, bit_and(k, bits, 0x007fffffu)), tiny);
    kf_val ybits = kf_let(k, "log_ybits", kf_bitcast(k, u32, y));
    kf_val hx = kf_let(k, "log_hx", bit_and(k, ybits, 0x007fffffu));
    /* i = 2^23 when the mantissa is at least sqrt(2): then m / 2, one more in k */
    kf_val i = kf_let(k, "log_i", bit_and(k, kf_add(k, hx, u32_lit(k, 0x004afb20u)), 0x00800000u));
    kf_val m = f32_from_bits(
        k, kf_binary(k, KF_OP_BIT_OR, hx, kf_binary(k, KF_OP_BIT_XOR, i, u32_lit(k, 0x3f800000u))));
    kf_val e = kf_add(k, kf_binary(k, KF_OP_SHR, ybits, u32_lit(k, 23)),
                      kf_binary(k, KF_OP_SHR, i, u32_lit(k, 23)));
    kf_val dk =
        kf_let(k, "log_k",
               kf_add(k, kf_cast(k, f32, e), kf_select(k, lit(k, -127.0), lit(k, -276.0), tiny)));
    kf_val f = kf_let(k, "log_f", kf_sub(k, m, lit(k, 1.0)));
    kf_val s = kf_let(k, "log_s", kf_div(k, f, kf_add(k, lit(k, 2.0), f)));
    kf_val z = kf_let(k, "log_z", kf_mul(k, s, s));
    kf_val w = kf_let(k, "log_w", kf_mul(k, z, z));
    kf_val t1 =
        kf_mul(k, w, kf_add(k, lit(k, 0xccce13.0p-25), kf_mul(k, w, lit(k, 0xf89e26.0p-26))));
    kf_val t2 =
        kf_mul(k, z, kf_add(k, lit(k, 0xaaaaaa.0p-24), kf_mul(k, w, lit(k, 0x91e9ee.0p-25))));
    kf_val r = kf_add(k, t2, t1);
    kf_val hfsq = kf_let(k, "log_hfsq", kf_mul(k, lit(k, 0.5), kf_mul(k, f, f)));
    /* k ln2_hi is exact for |k| <= 128 (ln2_hi ends in 7 zero bits) */
    kf_val low =
        kf_add(k, kf_mul(k, s, kf_add(k, hfsq, r)), kf_mul(k, dk, lit(k, 9.0580006145e-06)));
    kf_val result =
        kf_sub(k, kf_mul(k, dk, lit(k, 6.9313812256e-01)), kf_sub(k, kf_sub(k, hfsq, low), f));
    /* the edges, decided on the bits: +-0 -> -inf, inf -> inf, negative or NaN -> NaN */
    kf_val zero = kf_binary(k, KF_OP_EQ, mag, u32_lit(k, 0));
    /* -inf built from the bits at run time: WGSL refuses a constant that folds to infinity */
    kf_val minus_inf =
        f32_from_bits(k, kf_binary(k, KF_OP_BIT_OR, bit_and(k, bits, 0), u32_lit(k, 0xff800000u)));
    result = kf_select(k, result, minus_inf, zero);
    result = kf_select(k, result, x[0], kf_binary(k, KF_OP_EQ, bits, u32_lit(k, 0x7f800000u)));
    kf_val negative = kf_binary(k, KF_OP_GE, bits, u32_lit(k, 0x80000001u));
    kf_val nan =
        kf_binary(k, KF_OP_OR, negative, kf_binary(k, KF_OP_GT, mag, u32_lit(k, 0x7f800000u)));
    return kf_select(k, result, kf__nan(k, bits), nan);
}
static kf_val log_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g, uint32_t which,
                                const kf_op_params *p) {
    (void)y, (void)which, (void)p;
    return kf_div(k, g, x[0]);
}

/* neg(x) = -x; d/dx = -1. */
static double neg_f(const double *x, const kf_op_params *p) {
    (void)p;
    return -x[0];
}
static double neg_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    (void)x, (void)y, (void)which, (void)p;
    return -1.0;
}
static kf_val neg_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    (void)p;
    return neg(k, x[0]);
}
static kf_val neg_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g, uint32_t which,
                                const kf_op_params *p) {
    (void)x, (void)y, (void)which, (void)p;
    return kf_mul(k, lit(k, -1.0), g);
}

/* abs; d/dx = sign(x) (0 at 0 and for NaN). */
static double abs_f(const double *x, const kf_op_params *p) {
    (void)p;
    return fabs(x[0]);
}
static double abs_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    (void)y, (void)which, (void)p;
    return x[0] > 0 ? 1.0 : x[0] < 0 ? -1.0 : 0.0;
}
static kf_val abs_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    (void)p;
    return kf_call1(k, KF_FN_ABS, x[0]);
}
static kf_val abs_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g, uint32_t which,
                                const kf_op_params *p) {
    (void)y, (void)which, (void)p;
    kf_val zero = lit(k, 0.0);
    kf_val s = kf_select(k, kf_select(k, zero, lit(k, -1.0), lt(k, x[0], zero)), lit(k, 1.0),
                         gt(k, x[0], zero));
    return kf_mul(k, s, g);
}

/* sqrt; inputs drawn in [0.1, 4). d/dx = 0.5 / y. */
static double sqrt_f(const double *x, const kf_op_params *p) {
    (void)p;
    return sqrt(x[0]);
}
static double sqrt_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    (void)x, (void)which, (void)p;
    return 0.5 / y;
}
static kf_val sqrt_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    (void)p;
    return kf_call1(k, KF_FN_SQRT, x[0]);
}
static kf_val sqrt_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g, uint32_t which,
                                 const kf_op_params *p) {
    (void)x, (void)which, (void)p;
    return kf_div(k, kf_mul(k, lit(k, 0.5), g), y);
}

/* square(x) = x x; d/dx = 2x. */
static double square_f(const double *x, const kf_op_params *p) {
    (void)p;
    return x[0] * x[0];
}
static double square_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    (void)y, (void)which, (void)p;
    return 2.0 * x[0];
}
static kf_val square_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    (void)p;
    return kf_mul(k, x[0], x[0]);
}
static kf_val square_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g,
                                   uint32_t which, const kf_op_params *p) {
    (void)y, (void)which, (void)p;
    return kf_mul(k, kf_mul(k, lit(k, 2.0), x[0]), g);
}

/* reciprocal(x) = 1/x; inputs drawn with |x| in [1, 4), either sign. d/dx = -y^2. */
static double reciprocal_f(const double *x, const kf_op_params *p) {
    (void)p;
    return 1.0 / x[0];
}
static double reciprocal_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    (void)x, (void)which, (void)p;
    return -y * y;
}
static kf_val reciprocal_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    (void)p;
    return kf_div(k, lit(k, 1.0), x[0]);
}
static kf_val reciprocal_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g,
                                       uint32_t which, const kf_op_params *p) {
    (void)x, (void)which, (void)p;
    return kf_mul(k, neg(k, kf_mul(k, y, y)), g);
}

/* ---------------------------------------------------------------------------------------- */
/* Binary operators                                                                         */
/* ---------------------------------------------------------------------------------------- */

static double add_f(const double *x, const kf_op_params *p) {
    (void)p;
    return x[0] + x[1];
}
static double add_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    (void)x, (void)y, (void)which, (void)p;
    return 1.0;
}
static kf_val add_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    (void)p;
    return kf_add(k, x[0], x[1]);
}
static kf_val add_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g, uint32_t which,
                                const kf_op_params *p) {
    (void)k, (void)x, (void)y, (void)which, (void)p;
    return g;
}

static double sub_f(const double *x, const kf_op_params *p) {
    (void)p;
    return x[0] - x[1];
}
static double sub_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    (void)x, (void)y, (void)p;
    return which == 0 ? 1.0 : -1.0;
}
static kf_val sub_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    (void)p;
    return kf_sub(k, x[0], x[1]);
}
static kf_val sub_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g, uint32_t which,
                                const kf_op_params *p) {
    (void)x, (void)y, (void)p;
    return which == 0 ? g : neg(k, g);
}

static double mul_f(const double *x, const kf_op_params *p) {
    (void)p;
    return x[0] * x[1];
}
static double mul_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    (void)y, (void)p;
    return x[1 - which];
}
static kf_val mul_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    (void)p;
    return kf_mul(k, x[0], x[1]);
}
static kf_val mul_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g, uint32_t which,
                                const kf_op_params *p) {
    (void)y, (void)p;
    return kf_mul(k, x[1 - which], g);
}

/* div(a, b) = a / b; b drawn with |b| in [0.5, 2). d/da = 1/b, d/db = -a/b^2. */
static double div_f(const double *x, const kf_op_params *p) {
    (void)p;
    return x[0] / x[1];
}
static double div_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    (void)y, (void)p;
    return which == 0 ? 1.0 / x[1] : -x[0] / (x[1] * x[1]);
}
static kf_val div_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    (void)p;
    return kf_div(k, x[0], x[1]);
}
static kf_val div_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g, uint32_t which,
                                const kf_op_params *p) {
    (void)y, (void)p;
    if (which == 0) {
        return kf_div(k, g, x[1]);
    }
    return neg(k, kf_div(k, kf_mul(k, x[0], g), kf_mul(k, x[1], x[1])));
}

/* maximum(a, b): NaN when either is NaN, else b > a ? b : a (the rule of the max reduction,
 * kf__max_nan). The gradient goes to the winner; ties go to a, a NaN b wins. */
static bool maximum_b_wins(const double *x) {
    return isnan(x[1]) || x[1] > x[0];
}
static double maximum_f(const double *x, const kf_op_params *p) {
    (void)p;
    return kf__spec_max(x[0], x[1]);
}
static double maximum_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    (void)y, (void)p;
    return (which == 1) == maximum_b_wins(x) ? 1.0 : 0.0;
}
static kf_val maximum_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    (void)p;
    return kf__max_nan(k, x[0], x[1]);
}
static kf_val maximum_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g,
                                    uint32_t which, const kf_op_params *p) {
    (void)y, (void)p;
    kf_val b_wins = kf_binary(k, KF_OP_OR, kf__isnan(k, x[1]), gt(k, x[1], x[0]));
    kf_val one = lit(k, 1.0), zero = lit(k, 0.0);
    kf_val d = which == 1 ? kf_select(k, zero, one, b_wins) : kf_select(k, one, zero, b_wins);
    return kf_mul(k, d, g);
}

/* ---------------------------------------------------------------------------------------- */
/* Operator objects and their verification tables                                           */
/* ---------------------------------------------------------------------------------------- */

KF__EW_GLUE(relu, 1)
KF__EW_GLUE(leaky_relu, 1)
KF__EW_GLUE(sigmoid, 1)
KF__EW_GLUE(tanh, 1)
KF__EW_GLUE(gelu, 1)
KF__EW_GLUE(gelu_exact, 1)
KF__EW_GLUE(silu, 1)
KF__EW_GLUE(exp, 1)
KF__EW_GLUE(log, 1)
KF__EW_GLUE(neg, 1)
KF__EW_GLUE(abs, 1)
KF__EW_GLUE(sqrt, 1)
KF__EW_GLUE(square, 1)
KF__EW_GLUE(reciprocal, 1)
KF__EW_GLUE(add, 2)
KF__EW_GLUE(sub, 2)
KF__EW_GLUE(mul, 2)
KF__EW_GLUE(div, 2)
KF__EW_GLUE(maximum, 2)

/* The unary table: one element, 1x1, primes (7x13 is below one workgroup, 257x129 is not a
 * multiple of it), rank 4, and 2048x2049 >= 2^22 elements. */
#define UNARY_SHAPES(...)                                                                          \
    {{SHAPE1(1)}, {__VA_ARGS__}, "one element"}, {{SHAPE2(1, 1)}, {__VA_ARGS__}, "1x1"},           \
        {{SHAPE2(7, 13)}, {__VA_ARGS__}, "primes"}, {{SHAPE2(257, 129)}, {__VA_ARGS__}, "primes"}, \
        {{SHAPE4(3, 5, 7, 11)}, {__VA_ARGS__}, "rank 4"}, {                                        \
        {SHAPE2(2048, 2049)}, {__VA_ARGS__}, "large"                                               \
    }

static const kf_op_case unary_cases[] = {UNARY_SHAPES(.alpha = 0)};
static const kf_op_case leaky_relu_cases[] = {UNARY_SHAPES(.alpha = 0),
                                              {{SHAPE2(7, 13)}, {.alpha = 0.2f}, "alpha 0.2"}};
static const kf_op_case gelu_cases[] = {UNARY_SHAPES(.alpha = 0),
                                        {{SHAPE2(257, 129)}, {.exact = true}, "erf form"}};

/* Binary: equal shapes as above, then every broadcast both ways round. */
static const kf_op_case binary_cases[] = {
    {{SHAPE1(1), SHAPE1(1)}, {.alpha = 0}, "one element"},
    {{SHAPE2(1, 1), SHAPE2(1, 1)}, {.alpha = 0}, "1x1"},
    {{SHAPE2(7, 13), SHAPE2(7, 13)}, {.alpha = 0}, "primes"},
    {{SHAPE2(257, 129), SHAPE2(257, 129)}, {.alpha = 0}, "primes"},
    {{SHAPE4(3, 5, 7, 11), SHAPE4(3, 5, 7, 11)}, {.alpha = 0}, "rank 4"},
    {{SHAPE2(7, 13), SHAPE1(1)}, {.alpha = 0}, "scalar b"},
    {{SHAPE1(1), SHAPE2(7, 13)}, {.alpha = 0}, "scalar a"},
    {{SHAPE2(257, 129), SHAPE1(129)}, {.alpha = 0}, "row b (bias)"},
    {{SHAPE2(1, 129), SHAPE2(257, 129)}, {.alpha = 0}, "row a"},
    {{SHAPE2(257, 129), SHAPE2(257, 1)}, {.alpha = 0}, "column b"},
    {{SHAPE2(257, 1), SHAPE2(257, 129)}, {.alpha = 0}, "column a"},
    {{SHAPE4(3, 5, 7, 11), SHAPE1(11)}, {.alpha = 0}, "rank 4, row b"},
    {{SHAPE4(3, 5, 7, 11), SHAPE4(3, 5, 7, 1)}, {.alpha = 0}, "rank 4, column b"},
    {{SHAPE2(2048, 2049), SHAPE2(2048, 2049)}, {.alpha = 0}, "large"},
    {{SHAPE2(2048, 2049), SHAPE1(2049)}, {.alpha = 0}, "large, row b (bias)"},
};

#define CASES(table) .cases = table, .case_count = sizeof table / sizeof table[0]

/* Tolerances: max relative error, where errors are relative to max(|expected|, 1% of the rms of
 * the expected tensor). docs/operators.md tables what lavapipe measured for each (over three
 * seeds, every case) and why each bound has the headroom it has.
 *   f32: exact arithmetic (one f32 rounding on each side; measured <= 4.3e-7) 1e-6. Ops built on
 *        GPU exp, tanh and erf inherit their WGSL accuracy: exp is 3 + 2|x| ulp (log is kfuse's
 *        own, within 1 ulp: see log_expr; its 1e-4 predates it), tanh follows sinh/cosh, erf
 *        is an approximation with 1.5e-7 absolute error; gelu's backward multiplies tanh's
 *        absolute error by up to ~5. Binary ops: the backward of a broadcast input is a sum of up
 *        to 2048 terms in f32 on the GPU, whose error is eps * sum|terms|, ~100 x eps * sqrt(m)
 *        against the floor (measured <= 3.3e-5): 2e-4.
 *   f16: the spec sees the same f16-rounded inputs as the kernel, so what remains is the output's
 *        rounding to f16 (2^-11 relative) and a one-ulp flip (2^-10, measured 9.7e-4) where f32
 *        compute lands next to a rounding boundary: 2e-3 for every op. */
#define UNARY(NAME, ABOUT, TOL32, LO, HI)                                                          \
    const kf_operator kf__op_##NAME = {.name = #NAME,                                              \
                                       .about = ABOUT,                                             \
                                       .arity = 1,                                                 \
                                       KF__EW_FIELDS(NAME),                                        \
                                       .tolerance_f32 = TOL32,                                     \
                                       .tolerance_f16 = 2e-3,                                      \
                                       .input_lo = LO,                                             \
                                       .input_hi = HI,                                             \
                                       CASES(unary_cases)}

UNARY(relu, "max(x, 0); relu(NaN) = NaN", 1e-6, -4.0f, 4.0f);
UNARY(sigmoid, "1 / (1 + exp(-x))", 1e-5, -4.0f, 4.0f);
UNARY(tanh, "tanh(x)", 1e-4, -4.0f, 4.0f);
UNARY(silu, "x * sigmoid(x)", 5e-5, -4.0f, 4.0f);
UNARY(exp, "e^x", 1e-5, -4.0f, 4.0f);
UNARY(log, "natural log; inputs > 0", 1e-4, 0.1f, 4.0f);
UNARY(neg, "-x", 1e-6, -4.0f, 4.0f);
UNARY(abs, "|x|", 1e-6, -4.0f, 4.0f);
UNARY(sqrt, "square root; inputs >= 0", 1e-5, 0.1f, 4.0f);
UNARY(square, "x * x", 1e-6, -4.0f, 4.0f);
UNARY(gelu_exact, "0.5 x (1 + erf(x / sqrt 2))", 3e-4, -4.0f, 4.0f);

const kf_operator kf__op_leaky_relu = {.name = "leaky_relu",
                                       .about = "x < 0 ? alpha x : x (alpha 0.01)",
                                       .arity = 1,
                                       KF__EW_FIELDS(leaky_relu),
                                       KF__PARAMS(leaky_relu_params),
                                       .tolerance_f32 = 1e-6,
                                       .tolerance_f16 = 2e-3,
                                       .input_lo = -4.0f,
                                       .input_hi = 4.0f,
                                       CASES(leaky_relu_cases)};

static const kf__param gelu_params[] = {
    {.name = "exact",
     .about = "the erf form instead of the tanh approximation",
     KF__BOOL,
     KF__FIELD(exact, EXACT)},
};

const kf_operator kf__op_gelu = {.name = "gelu",
                                 .about = "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); "
                                          "params.exact: the erf form",
                                 .arity = 1,
                                 KF__EW_FIELDS(gelu),
                                 KF__PARAMS(gelu_params),
                                 /* measured 3.6e-5 over [-8, 8) since the stable form */
                                 .tolerance_f32 = 1e-4,
                                 .tolerance_f16 = 2e-3,
                                 .input_lo = -8.0f,
                                 .input_hi = 8.0f,
                                 CASES(gelu_cases)};

const kf_operator kf__op_reciprocal = {.name = "reciprocal",
                                       .about = "1 / x",
                                       .arity = 1,
                                       KF__EW_FIELDS(reciprocal),
                                       .tolerance_f32 = 1e-5,
                                       .tolerance_f16 = 2e-3,
                                       .input_lo = -4.0f,
                                       .input_hi = 4.0f,
                                       .nonzero_inputs = 1u,
                                       CASES(unary_cases)};

#define BINARY(NAME, ABOUT, TOL32, NONZERO, LO, HI)                                                \
    const kf_operator kf__op_##NAME = {.name = #NAME,                                              \
                                       .about = ABOUT,                                             \
                                       .arity = 2,                                                 \
                                       KF__EW_FIELDS(NAME),                                        \
                                       .tolerance_f32 = TOL32,                                     \
                                       .tolerance_f16 = 2e-3,                                      \
                                       .input_lo = LO,                                             \
                                       .input_hi = HI,                                             \
                                       .nonzero_inputs = NONZERO,                                  \
                                       CASES(binary_cases)}

BINARY(add, "a + b (b or a broadcast: scalar, row, column)", 2e-4, 0u, -4.0f, 4.0f);
BINARY(sub, "a - b (broadcasting as add)", 2e-4, 0u, -4.0f, 4.0f);
BINARY(mul, "a * b (broadcasting as add)", 2e-4, 0u, -4.0f, 4.0f);
BINARY(div, "a / b (broadcasting as add)", 2e-4, 2u, -2.0f, 2.0f);
BINARY(maximum, "the larger of a and b; NaN if either is (broadcasting as add)", 2e-4, 0u, -4.0f,
       4.0f);
