/* Backward operators of the element-wise operators: NAME_grad(x, dy) for a unary op,
 * NAME_grad_a / NAME_grad_b(a, b, dy) for a binary one, each the forward op's expr_backward at
 * the element (the forward value recomputed inline where the derivative reads it), so they are
 * element-wise expressions themselves and inline into any element-wise chain, matmul epilogue or
 * reduction tail. Their output has the forward output's shape: a broadcast input's gradient is
 * summed back to its shape by sum_leading or sum_to (reduce_backward.c), which autodiff adds.
 *
 * Linear ops need none: add, sub, neg, mul, scale, affine, copy and div's first input have
 * gradients that are forward ops (dy, neg(dy), mul(dy, b), scale(dy, alpha), div(dy, b)).
 *
 * Tolerances are the forward op's where its derivative runs through the same functions (exp,
 * tanh, erf), since there is no sum; f16 as everywhere: the result's rounding and a one-ulp flip.
 */
#include "ops/ops_internal.h"

/* Shapes {x, dy}: one element, primes below and past a workgroup, rank 4, 2^22 elements. */
#define UNARY_GRAD_CASES(...)                                                                      \
    {{SHAPE1(1), SHAPE1(1)}, {__VA_ARGS__}, "one element"},                                        \
        {{SHAPE2(7, 13), SHAPE2(7, 13)}, {__VA_ARGS__}, "primes"},                                 \
        {{SHAPE2(257, 129), SHAPE2(257, 129)}, {__VA_ARGS__}, "primes"},                           \
        {{SHAPE4(3, 5, 7, 11), SHAPE4(3, 5, 7, 11)}, {__VA_ARGS__}, "rank 4"}, {                   \
        {SHAPE2(2048, 2049), SHAPE2(2048, 2049)}, {__VA_ARGS__}, "large"                           \
    }

static const kf_op_case unary_grad_cases[] = {UNARY_GRAD_CASES(.alpha = 0)};
static const kf_op_case leaky_relu_grad_cases[] = {
    UNARY_GRAD_CASES(.alpha = 0), {{SHAPE2(7, 13), SHAPE2(7, 13)}, {.alpha = 0.2f}, "alpha 0.2"}};
static const kf_op_case gelu_grad_cases[] = {
    UNARY_GRAD_CASES(.alpha = 0),
    {{SHAPE2(257, 129), SHAPE2(257, 129)}, {.exact = true}, "erf form"}};

/* Shapes {a, b, dy}: equal, and every broadcast of either input (the gradient stays full). */
static const kf_op_case binary_grad_cases[] = {
    {{SHAPE1(1), SHAPE1(1), SHAPE1(1)}, {.alpha = 0}, "one element"},
    {{SHAPE2(7, 13), SHAPE2(7, 13), SHAPE2(7, 13)}, {.alpha = 0}, "primes"},
    {{SHAPE2(7, 13), SHAPE1(1), SHAPE2(7, 13)}, {.alpha = 0}, "scalar b"},
    {{SHAPE2(257, 129), SHAPE1(129), SHAPE2(257, 129)}, {.alpha = 0}, "row b (bias)"},
    {{SHAPE2(1, 129), SHAPE2(257, 129), SHAPE2(257, 129)}, {.alpha = 0}, "row a"},
    {{SHAPE2(257, 129), SHAPE2(257, 1), SHAPE2(257, 129)}, {.alpha = 0}, "column b"},
    {{SHAPE4(3, 5, 7, 11), SHAPE4(3, 5, 7, 11), SHAPE4(3, 5, 7, 11)}, {.alpha = 0}, "rank 4"},
    {{SHAPE2(2048, 2049), SHAPE1(2049), SHAPE2(2048, 2049)}, {.alpha = 0}, "large, row b"},
};

#define CASES(table) .cases = table, .case_count = sizeof table / sizeof table[0]

#define EW_GRAD_OP(NAME, FWD, WHICH, ARITY, ABOUT, TOL32, TABLE, LO, HI, NONZERO)                  \
    const kf_operator kf__op_##NAME = {.name = #NAME,                                              \
                                       .about = ABOUT,                                             \
                                       .op_class = KF_OP_CLASS_ELEMENTWISE,                        \
                                       .arity = ARITY + 1,                                         \
                                       .shape = NAME##_shape,                                      \
                                       .spec_forward = NAME##_spec,                                \
                                       .kernel_forward = NAME##_kernel,                            \
                                       .expr = NAME##_expr,                                        \
                                       .tolerance_f32 = TOL32,                                     \
                                       .tolerance_f16 = 2e-3,                                      \
                                       .input_lo = LO,                                             \
                                       .input_hi = HI,                                             \
                                       .nonzero_inputs = NONZERO,                                  \
                                       .grid = NAME##_grid,                                        \
                                       CASES(TABLE),                                               \
                                       .grad_of = &kf__op_##FWD,                                   \
                                       .grad_input = WHICH}

KF__EW_GRAD_GLUE(relu_grad, relu, 0, 1, false)
KF__EW_GRAD_GLUE(leaky_relu_grad, leaky_relu, 0, 1, false)
KF__EW_GRAD_GLUE(sigmoid_grad, sigmoid, 0, 1, true)
KF__EW_GRAD_GLUE(tanh_grad, tanh, 0, 1, true)
KF__EW_GRAD_GLUE(gelu_grad, gelu, 0, 1, false)
KF__EW_GRAD_GLUE(gelu_exact_grad, gelu_exact, 0, 1, false)
KF__EW_GRAD_GLUE(silu_grad, silu, 0, 1, false)
KF__EW_GRAD_GLUE(exp_grad, exp, 0, 1, true)
KF__EW_GRAD_GLUE(log_grad, log, 0, 1, false)
KF__EW_GRAD_GLUE(abs_grad, abs, 0, 1, false)
KF__EW_GRAD_GLUE(sqrt_grad, sqrt, 0, 1, true)
KF__EW_GRAD_GLUE(square_grad, square, 0, 1, false)
KF__EW_GRAD_GLUE(reciprocal_grad, reciprocal, 0, 1, true)
KF__EW_GRAD_GLUE(div_grad_b, div, 1, 2, false)
KF__EW_GRAD_GLUE(maximum_grad_a, maximum, 0, 2, false)
KF__EW_GRAD_GLUE(maximum_grad_b, maximum, 1, 2, false)

EW_GRAD_OP(relu_grad, relu, 0, 1, "relu's gradient: dy where x > 0, else 0", 1e-6, unary_grad_cases,
           -4.0f, 4.0f, 0u);
EW_GRAD_OP(leaky_relu_grad, leaky_relu, 0, 1, "leaky_relu's gradient: dy, or alpha dy where x <= 0",
           1e-6, leaky_relu_grad_cases, -4.0f, 4.0f, 0u);
EW_GRAD_OP(sigmoid_grad, sigmoid, 0, 1, "sigmoid's gradient: dy s (1 - s), s = sigmoid(x)", 1e-5,
           unary_grad_cases, -4.0f, 4.0f, 0u);
/* 1 - tanh(x)^2 cancels near |tanh| = 1, where the GPU tanh's absolute error (the forward's
 * 1e-4 class) is magnified by up to 2 / (1 - tanh^2): measured 1.1e-4 on lavapipe */
EW_GRAD_OP(tanh_grad, tanh, 0, 1, "tanh's gradient: dy (1 - tanh(x)^2)", 5e-4, unary_grad_cases,
           -4.0f, 4.0f, 0u);
EW_GRAD_OP(gelu_grad, gelu, 0, 1, "gelu's gradient: dy gelu'(x) (params.exact: the erf form)", 1e-4,
           gelu_grad_cases, -8.0f, 8.0f, 0u);
EW_GRAD_OP(gelu_exact_grad, gelu_exact, 0, 1, "gelu_exact's gradient: dy gelu_exact'(x)", 3e-4,
           unary_grad_cases, -4.0f, 4.0f, 0u);
EW_GRAD_OP(silu_grad, silu, 0, 1, "silu's gradient: dy s (1 + x (1 - s)), s = sigmoid(x)", 5e-5,
           unary_grad_cases, -4.0f, 4.0f, 0u);
EW_GRAD_OP(exp_grad, exp, 0, 1, "exp's gradient: dy e^x", 1e-5, unary_grad_cases, -4.0f, 4.0f, 0u);
EW_GRAD_OP(log_grad, log, 0, 1, "log's gradient: dy / x", 1e-5, unary_grad_cases, 0.1f, 4.0f, 0u);
EW_GRAD_OP(abs_grad, abs, 0, 1, "abs's gradient: dy sign(x) (0 at 0)", 1e-6, unary_grad_cases,
           -4.0f, 4.0f, 0u);
EW_GRAD_OP(sqrt_grad, sqrt, 0, 1, "sqrt's gradient: dy 0.5 / sqrt(x)", 1e-5, unary_grad_cases, 0.1f,
           4.0f, 0u);
EW_GRAD_OP(square_grad, square, 0, 1, "square's gradient: dy 2x", 1e-6, unary_grad_cases, -4.0f,
           4.0f, 0u);
EW_GRAD_OP(reciprocal_grad, reciprocal, 0, 1, "reciprocal's gradient: -dy / x^2", 1e-5,
           unary_grad_cases, -4.0f, 4.0f, 1u);
EW_GRAD_OP(div_grad_b, div, 1, 2, "div's gradient for b: -dy a / b^2 (not summed over a broadcast)",
           1e-5, binary_grad_cases, -2.0f, 2.0f, 2u);
EW_GRAD_OP(maximum_grad_a, maximum, 0, 2, "maximum's gradient for a: dy where a wins (ties: a)",
           1e-6, binary_grad_cases, -4.0f, 4.0f, 0u);
EW_GRAD_OP(maximum_grad_b, maximum, 1, 2, "maximum's gradient for b: dy where b wins (or is NaN)",
           1e-6, binary_grad_cases, -4.0f, 4.0f, 0u);
