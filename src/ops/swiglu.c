/* swiglu(gate, up) = silu(gate) * up = gate sigmoid(gate) up, the gated unit of llama-style
 * feed-forward blocks, as one element-wise operator so it fuses like the others (into the
 * matmul's epilogue that produced gate or up, or with its neighbours in one chain).
 *
 *   d/dgate = up s (1 + gate (1 - s)),  d/dup = gate s,  s = sigmoid(gate)
 *
 * Its backward operators swiglu_grad_a and swiglu_grad_b (gate, up, dy) are the same derivatives
 * times dy as element-wise expressions, glued as elementwise_backward.c's are (KF__EW_GRAD_GLUE),
 * so autodiff finds them by name and the planner inlines them. Broadcasting as for every binary
 * element-wise operator. */
#include "ops/ops_internal.h"

#include <math.h>

static kf_val lit(kf_kernel *k, double v) {
    return kf_lit_f32(k, (float)v);
}

static kf_val sigmoid(kf_kernel *k, kf_val x) {
    return kf_div(k, lit(k, 1.0),
                  kf_add(k, lit(k, 1.0), kf_call1(k, KF_FN_EXP, kf_unary(k, KF_OP_NEG, x))));
}

static double swiglu_f(const double *x, const kf_op_params *p) {
    (void)p;
    return x[0] / (1.0 + exp(-x[0])) * x[1];
}
static double swiglu_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    (void)y, (void)p;
    double s = 1.0 / (1.0 + exp(-x[0]));
    return which == 0 ? x[1] * s * (1.0 + x[0] * (1.0 - s)) : x[0] * s;
}
static kf_val swiglu_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    (void)p;
    return kf_mul(k, kf_mul(k, x[0], sigmoid(k, x[0])), x[1]);
}
static kf_val swiglu_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g,
                                   uint32_t which, const kf_op_params *p) {
    (void)y, (void)p;
    kf_val s = kf_let(k, "s", sigmoid(k, x[0]));
    if (which == 1) {
        return kf_mul(k, kf_mul(k, x[0], s), g);
    }
    kf_val d = kf_mul(k, s, kf_add(k, lit(k, 1.0), kf_mul(k, x[0], kf_sub(k, lit(k, 1.0), s))));
    return kf_mul(k, kf_mul(k, d, x[1]), g);
}

KF__EW_GLUE(swiglu, 2)

static const kf__input swiglu_inputs[] = {{.name = "gate"}, {.name = "up"}};
static const kf__input swiglu_grad_inputs[] = {{.name = "gate"}, {.name = "up"}, {.name = "dy"}};

/* Equal shapes, a row (bias-like) and a scalar up, rank 4, and 2^22 elements. */
static const kf_op_case swiglu_cases[] = {
    {{SHAPE1(1), SHAPE1(1)}, {.alpha = 0}, "one element"},
    {{SHAPE2(7, 13), SHAPE2(7, 13)}, {.alpha = 0}, "primes"},
    {{SHAPE2(257, 129), SHAPE1(129)}, {.alpha = 0}, "row up"},
    {{SHAPE2(7, 13), SHAPE1(1)}, {.alpha = 0}, "scalar up"},
    {{SHAPE4(3, 5, 7, 11), SHAPE4(3, 5, 7, 11)}, {.alpha = 0}, "rank 4"},
    {{SHAPE2(2048, 2049), SHAPE2(2048, 2049)}, {.alpha = 0}, "large"},
};
static const kf_op_case swiglu_grad_cases[] = {
    {{SHAPE1(1), SHAPE1(1), SHAPE1(1)}, {.alpha = 0}, "one element"},
    {{SHAPE2(7, 13), SHAPE2(7, 13), SHAPE2(7, 13)}, {.alpha = 0}, "primes"},
    {{SHAPE2(257, 129), SHAPE1(129), SHAPE2(257, 129)}, {.alpha = 0}, "row up"},
    {{SHAPE4(3, 5, 7, 11), SHAPE4(3, 5, 7, 11), SHAPE4(3, 5, 7, 11)}, {.alpha = 0}, "rank 4"},
    {{SHAPE2(2048, 2049), SHAPE2(2048, 2049), SHAPE2(2048, 2049)}, {.alpha = 0}, "large"},
};

#define CASES(table) .cases = table, .case_count = sizeof table / sizeof table[0]

/* silu's accuracy (5e-5: GPU exp) times one more rounding; the backward of a broadcast input is
 * a sum over up to 257 rows, as for the binary operators (2e-4). f16: as every element-wise op. */
const kf_operator kf__op_swiglu = {.name = "swiglu",
                                   .about = "silu(gate) * up",
                                   .arity = 2,
                                   KF__INPUTS(swiglu_inputs),
                                   KF__EW_FIELDS(swiglu),
                                   .tolerance_f32 = 2e-4,
                                   .tolerance_f16 = 2e-3,
                                   .input_lo = -4.0f,
                                   .input_hi = 4.0f,
                                   CASES(swiglu_cases)};

#define SWIGLU_GRAD(NAME, WHICH, ABOUT)                                                            \
    KF__EW_GRAD_GLUE(NAME, swiglu, WHICH, 2, false)                                                \
    const kf_operator kf__op_##NAME = {.name = #NAME,                                              \
                                       .about = ABOUT,                                             \
                                       .op_class = KF_OP_CLASS_ELEMENTWISE,                        \
                                       .arity = 3,                                                 \
                                       KF__INPUTS(swiglu_grad_inputs),                             \
                                       .shape = NAME##_shape,                                      \
                                       .spec_forward = NAME##_spec,                                \
                                       .kernel_forward = NAME##_kernel,                            \
                                       .expr = NAME##_expr,                                        \
                                       .tolerance_f32 = 1e-4,                                      \
                                       .tolerance_f16 = 2e-3,                                      \
                                       .input_lo = -4.0f,                                          \
                                       .input_hi = 4.0f,                                           \
                                       .grid = NAME##_grid,                                        \
                                       CASES(swiglu_grad_cases),                                   \
                                       .grad_of = &kf__op_swiglu,                                  \
                                       .grad_input = WHICH};

SWIGLU_GRAD(swiglu_grad_a, 0, "swiglu's gradient for gate: dy up s (1 + gate (1 - s))")
SWIGLU_GRAD(swiglu_grad_b, 1, "swiglu's gradient for up: dy silu(gate)")
