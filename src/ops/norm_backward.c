/* Backward operators of rmsnorm and layernorm (kf_operator.grad_of): NAME_grad_x and NAME_grad_w,
 * each taking the forward's inputs (x, then the weight and bias rows its params name) and dy.
 * The bias's gradient is sum_leading(dy) (reduce_backward.c), so it needs no operator of its own.
 *
 *   grad_x: dx = r * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w (rmsnorm: no mean(g))
 *   grad_w: dw = sum over rows of dy * xhat (needs params.has_weight; w itself is not read)
 *
 * The kernels are norm.c's backward kernels with the gradient yielded: a row kernel for dx, a
 * column kernel for dw. The weight's kernel can also write sum_leading(dy) from the same loads
 * (kernel_column_sums): the planner's bias-gradient rule (src/fuse/rules/bias_grad.c) then makes
 * a norm's whole backward (dx, dw, db) two kernels. Tolerances are the forward operators' (3e-4;
 * norm.c says why). */
#include "ops/ops_internal.h"
#include "ops/rowwise.h"

/* The forward's inputs (x, then the optional weight and bias rows), then dy. */
static const kf__input norm_grad_inputs[] = {
    {.name = "x"},
    {.name = "weight", KF__OPTIONAL(has_weight)},
    {.name = "bias", KF__OPTIONAL(has_bias)},
    {.name = "dy"},
};
/* The forward's eps (norm.c), described again for these operators. */
static const kf__param norm_grad_params[] = {
    {.name = "eps",
     .about = "added to the mean square (variance) under the root",
     .type = KF_PARAM_TYPE_FLOAT,
     KF__FIELD(eps, EPS),
     .default_value = 1e-5,
     .min = 0.0,
     .min_exclusive = true,
     .max = 3.4028234663852886e38},
};

#define NORM_GRAD_GLUE(NAME, CENTER, WEIGHT)                                                       \
    static kf_status NAME##_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out,        \
                                  char *msg, size_t msg_size) {                                    \
        if (WEIGHT && !(p && p->has_weight)) {                                                     \
            return kf__shape_error(msg, msg_size, "%s: needs a weight (params.has_weight)",        \
                                   #NAME);                                                         \
        }                                                                                          \
        return kf__grad_shape(&kf__op_##NAME, in, p, out, msg, msg_size);                          \
    }                                                                                              \
    static kf_status NAME##_spec(const kf_tensor *const *in, const kf_op_params *p,                \
                                 kf_tensor *out) {                                                 \
        return kf__grad_spec_forward(&kf__op_##NAME, in, p, out);                                  \
    }                                                                                              \
    static kf_kernel *NAME##_kernel(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {   \
        return kf__norm_grad_kernel(CENTER, in, p, dtype, WEIGHT);                                 \
    }                                                                                              \
    static kf_kernel *NAME##_sums(const kf_shape *in, const kf_op_params *p, kf_dtype dtype,       \
                                  uint32_t which) {                                                \
        uint32_t dy = 1u + (p && p->has_weight ? 1u : 0u) + (p && p->has_bias ? 1u : 0u);          \
        if (!WEIGHT || which != dy) {                                                              \
            return NULL;                                                                           \
        }                                                                                          \
        return kf__norm_grad_w_with_dy_sums(CENTER, in, p, dtype);                                 \
    }                                                                                              \
    static void NAME##_grid(const kf_shape *in, const kf_op_params *p, int32_t which,              \
                            uint32_t groups[3]) {                                                  \
        (void)p, (void)which;                                                                      \
        if (WEIGHT) {                                                                              \
            uint32_t cols = in[0].rank ? in[0].dims[in[0].rank - 1] : 1;                           \
            kf__grid_1d(cols, KF__WORKGROUP, groups);                                              \
        } else {                                                                                   \
            kf__rows_grid(&in[0], groups);                                                         \
        }                                                                                          \
    }

NORM_GRAD_GLUE(rmsnorm_grad_x, false, false)
NORM_GRAD_GLUE(rmsnorm_grad_w, false, true)
NORM_GRAD_GLUE(layernorm_grad_x, true, false)
NORM_GRAD_GLUE(layernorm_grad_w, true, true)

#define WEIGHT                                                                                     \
    { .has_weight = true }
#define BOTH                                                                                       \
    { .has_weight = true, .has_bias = true }

/* {x, [w], [b], dy}: the row kernel's width classes (one lane, a partial tree, more than 256
 * lanes, spare rows), the column kernel's (more than one chunk of 256 rows), eps, 2^22 elements. */
static const kf_op_case grad_x_cases[] = {
    {.shapes = {SHAPE2(1, 1), SHAPE2(1, 1)}, .note = "1x1"},
    {.shapes = {SHAPE2(7, 13), SHAPE2(7, 13)}, .note = "primes"},
    {.shapes = {SHAPE2(7, 13), SHAPE1(13), SHAPE2(7, 13)}, .params = WEIGHT, .note = "weight"},
    {.shapes = {SHAPE2(257, 129), SHAPE1(129), SHAPE1(129), SHAPE2(257, 129)},
     .params = BOTH,
     .note = "weight and bias"},
    {.shapes = {SHAPE2(33, 17), SHAPE1(17), SHAPE2(33, 17)},
     .params = WEIGHT,
     .note = "spare rows"},
    {.shapes = {SHAPE2(5, 300), SHAPE2(5, 300)}, .note = "rows longer than 256 lanes"},
    {.shapes = {SHAPE3(3, 5, 7), SHAPE1(7), SHAPE3(3, 5, 7)},
     .params = {.has_weight = true, .eps = 0.1f},
     .note = "rank 3, eps 0.1"},
    {.shapes = {SHAPE2(1024, 4096), SHAPE1(4096), SHAPE2(1024, 4096)},
     .params = WEIGHT,
     .note = "large: 2^22 elements"},
};

static const kf_op_case grad_w_cases[] = {
    {.shapes = {SHAPE2(1, 1), SHAPE1(1), SHAPE2(1, 1)}, .params = WEIGHT, .note = "1x1"},
    {.shapes = {SHAPE2(7, 13), SHAPE1(13), SHAPE2(7, 13)}, .params = WEIGHT, .note = "primes"},
    {.shapes = {SHAPE2(257, 129), SHAPE1(129), SHAPE1(129), SHAPE2(257, 129)},
     .params = BOTH,
     .note = "weight and bias"},
    {.shapes = {SHAPE2(600, 7), SHAPE1(7), SHAPE2(600, 7)},
     .params = WEIGHT,
     .note = "three chunks of rows"},
    {.shapes = {SHAPE2(3, 300), SHAPE1(300), SHAPE2(3, 300)},
     .params = WEIGHT,
     .note = "more columns than a workgroup"},
    {.shapes = {SHAPE3(3, 5, 7), SHAPE1(7), SHAPE3(3, 5, 7)},
     .params = {.has_weight = true, .eps = 0.1f},
     .note = "rank 3, eps 0.1"},
    {.shapes = {SHAPE2(1024, 4096), SHAPE1(4096), SHAPE2(1024, 4096)},
     .params = WEIGHT,
     .note = "large: 2^22 elements"},
};

#define CASES(table) .cases = table, .case_count = sizeof table / sizeof table[0]

#define NORM_GRAD_OP(NAME, FWD, ABOUT, INPUT, TABLE)                                               \
    const kf_operator kf__op_##NAME = {.name = #NAME,                                              \
                                       .about = ABOUT,                                             \
                                       .op_class = KF_OP_CLASS_ROW_REDUCTION,                      \
                                       KF__INPUTS(norm_grad_inputs),                               \
                                       KF__PARAMS(norm_grad_params),                               \
                                       .shape = NAME##_shape,                                      \
                                       .spec_forward = NAME##_spec,                                \
                                       .kernel_forward = NAME##_kernel,                            \
                                       .kernel_column_sums = NAME##_sums,                          \
                                       .tolerance_f32 = 3e-4,                                      \
                                       .tolerance_f16 = 2e-3,                                      \
                                       .input_lo = -2.0f,                                          \
                                       .input_hi = 2.0f,                                           \
                                       .grid = NAME##_grid,                                        \
                                       CASES(TABLE),                                               \
                                       .grad_of = &kf__op_##FWD,                                   \
                                       .grad_input = INPUT}

NORM_GRAD_OP(rmsnorm_grad_x, rmsnorm,
             "rmsnorm's gradient for x: r (g - xhat mean(g xhat)), g = dy w", 0, grad_x_cases);
NORM_GRAD_OP(rmsnorm_grad_w, rmsnorm, "rmsnorm's gradient for the weight: sum over rows of dy xhat",
             1, grad_w_cases);
NORM_GRAD_OP(layernorm_grad_x, layernorm,
             "layernorm's gradient for x: r (g - mean(g) - xhat mean(g xhat)), g = dy w", 0,
             grad_x_cases);
NORM_GRAD_OP(layernorm_grad_w, layernorm,
             "layernorm's gradient for the weight: sum over rows of dy xhat", 1, grad_w_cases);
