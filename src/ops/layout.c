/* scale, affine and copy (element-wise, so the planner can inline them) and transpose (a layout
 * op: it reads another element than it writes, so it is not an element-wise expression). */
#include "ops/ops_internal.h"

#include <stdio.h>

/* ---------------------------------------------------------------------------------------- */
/* scale, affine, copy                                                                      */
/* ---------------------------------------------------------------------------------------- */

/* scale(x) = alpha x (alpha 1 by default; a given 0 scales by 0). */
static const kf__param scale_params[] = {
    {.name = "alpha",
     .about = "the factor",
     .type = KF_PARAM_TYPE_FLOAT,
     KF__FIELD(alpha, ALPHA),
     .default_value = 1.0,
     KF__ANY_FLOAT},
};
#define SCALE_ALPHA(p) ((float)kf__param_value(p, &scale_params[0]))
/* affine(x) = alpha x + beta (alpha default 1, beta default 0). */
static const kf__param affine_params[] = {
    {.name = "alpha",
     .about = "the factor",
     .type = KF_PARAM_TYPE_FLOAT,
     KF__FIELD(alpha, ALPHA),
     .default_value = 1.0,
     KF__ANY_FLOAT},
    {.name = "beta",
     .about = "the offset",
     .type = KF_PARAM_TYPE_FLOAT,
     KF__FIELD(beta, BETA),
     .default_value = 0.0,
     KF__ANY_FLOAT},
};
#define AFFINE_ALPHA(p) ((float)kf__param_value(p, &affine_params[0]))
#define AFFINE_BETA(p) ((float)kf__param_value(p, &affine_params[1]))

static double scale_f(const double *x, const kf_op_params *p) {
    return (double)SCALE_ALPHA(p) * x[0];
}
static double scale_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    (void)x, (void)y, (void)which;
    return (double)SCALE_ALPHA(p);
}
static kf_val scale_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    return kf_mul(k, kf_lit_f32(k, SCALE_ALPHA(p)), x[0]);
}
static kf_val scale_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g, uint32_t which,
                                  const kf_op_params *p) {
    (void)x, (void)y, (void)which;
    return kf_mul(k, kf_lit_f32(k, SCALE_ALPHA(p)), g);
}

static double affine_f(const double *x, const kf_op_params *p) {
    return (double)AFFINE_ALPHA(p) * x[0] + (double)AFFINE_BETA(p);
}
static double affine_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    (void)x, (void)y, (void)which;
    return (double)AFFINE_ALPHA(p);
}
static kf_val affine_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    kf_val ax = kf_mul(k, kf_lit_f32(k, AFFINE_ALPHA(p)), x[0]);
    return kf_add(k, ax, kf_lit_f32(k, AFFINE_BETA(p)));
}
static kf_val affine_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g,
                                   uint32_t which, const kf_op_params *p) {
    (void)x, (void)y, (void)which;
    return kf_mul(k, kf_lit_f32(k, AFFINE_ALPHA(p)), g);
}

/* copy(x) = x, bit for bit (NaN payloads aside). */
static double copy_f(const double *x, const kf_op_params *p) {
    (void)p;
    return x[0];
}
static double copy_df(const double *x, double y, uint32_t which, const kf_op_params *p) {
    (void)x, (void)y, (void)which, (void)p;
    return 1.0;
}
static kf_val copy_expr(kf_kernel *k, const kf_val *x, const kf_op_params *p) {
    (void)k, (void)p;
    return x[0];
}
static kf_val copy_expr_backward(kf_kernel *k, const kf_val *x, kf_val y, kf_val g, uint32_t which,
                                 const kf_op_params *p) {
    (void)k, (void)x, (void)y, (void)which, (void)p;
    return g;
}

KF__EW_GLUE(scale, 1)
KF__EW_GLUE(affine, 1)
KF__EW_GLUE(copy, 1)

/* ---------------------------------------------------------------------------------------- */
/* transpose: [..., r, c] -> [..., c, r]                                                     */
/* ---------------------------------------------------------------------------------------- */

typedef struct transpose_dims {
    uint64_t batch;
    uint32_t r, c;
} transpose_dims;

static transpose_dims transpose_view(const kf_shape *in) {
    transpose_dims d = {1, 1, 1};
    if (in->rank >= 2) {
        d.r = in->dims[in->rank - 2];
        d.c = in->dims[in->rank - 1];
        d.batch = kf_shape_elements(in) / ((uint64_t)d.r * d.c);
    }
    return d;
}

static kf_status transpose_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out,
                                 char *msg, size_t msg_size) {
    (void)p;
    char b[64];
    if (!kf__shape_valid(&in[0]) || in[0].rank < 2) {
        return kf__shape_error(msg, msg_size,
                               "transpose: needs a tensor of rank 2 to 4 (it swaps the last two "
                               "dims), got %s",
                               kf_shape_str(&in[0], b, sizeof b));
    }
    *out = in[0];
    out->dims[out->rank - 2] = in[0].dims[in[0].rank - 1];
    out->dims[out->rank - 1] = in[0].dims[in[0].rank - 2];
    return KF_OK;
}

static kf_status transpose_spec_forward(const kf_tensor *const *in, const kf_op_params *p,
                                        kf_tensor *out) {
    (void)p;
    transpose_dims d = transpose_view(&in[0]->shape);
    for (uint64_t b = 0; b < d.batch; b++) {
        const float *x = in[0]->data + b * d.r * d.c;
        float *y = out->data + b * d.r * d.c;
        for (uint32_t i = 0; i < d.r; i++) {
            for (uint32_t j = 0; j < d.c; j++) {
                y[(uint64_t)j * d.r + i] = x[(uint64_t)i * d.c + j];
            }
        }
    }
    return KF_OK;
}

/* The gradient of a transpose is the transpose of the gradient. */
static kf_status transpose_spec_backward(const kf_tensor *const *in, const kf_tensor *out,
                                         const kf_tensor *grad_out, const kf_op_params *p,
                                         kf_tensor *const *grad_in) {
    (void)out, (void)p;
    transpose_dims d = transpose_view(&in[0]->shape);
    for (uint64_t b = 0; b < d.batch; b++) {
        const float *g = grad_out->data + b * d.r * d.c;
        float *gi = grad_in[0]->data + b * d.r * d.c;
        for (uint32_t i = 0; i < d.r; i++) {
            for (uint32_t j = 0; j < d.c; j++) {
                gi[(uint64_t)i * d.c + j] = g[(uint64_t)j * d.r + i];
            }
        }
    }
    return KF_OK;
}

/* Element e of a tensor of planes whose rows have `len` elements, mapped to the index of the
 * same value in the transposed planes, whose rows have `other` elements. */
static kf_val transposed_index(kf_kernel *k, kf_val e, uint32_t len, uint32_t other) {
    kf_val plane = kf__u32(k, (uint64_t)len * other);
    kf_val base = kf_mul(k, kf_div(k, e, plane), plane);
    kf_val rem = kf_binary(k, KF_OP_MOD, e, plane);
    kf_val i = kf_div(k, rem, kf__u32(k, len));
    kf_val j = kf_binary(k, KF_OP_MOD, rem, kf__u32(k, len));
    return kf_add(k, base, kf_add(k, kf_mul(k, j, kf__u32(k, other)), i));
}

/* One invocation per output element, reading across rows: simple rather than fast (a tiled
 * transpose through workgroup memory is the performance work's). */
static kf_kernel *transpose_kernel_forward(const kf_shape *in, const kf_op_params *p,
                                           kf_dtype dtype) {
    kf_shape out;
    if (transpose_shape(in, p, &out, NULL, 0) != KF_OK) {
        return NULL;
    }
    transpose_dims d = transpose_view(&in[0]);
    kf_kernel *k = kf__kernel_1d("transpose", kf__dtype_type(dtype), kf_shape_elements(&out));
    if (!k) {
        return NULL;
    }
    kf_binding a = kf__bind(k, "a", dtype, KF_ACCESS_READ);
    kf_val e = kf__each_element(k, "e", kf_shape_elements(&out));
    /* out is [batch, c, r]: element e of out holds in[batch, e % r, e / r] */
    kf_val src = kf_let(k, "src", transposed_index(k, e, d.r, d.c));
    kf__yield_f32(k, kf__load_f32(k, a, src, dtype), e, dtype);
    kf_end(k);
    return k;
}

static kf_kernel *transpose_kernel_backward(const kf_shape *in, const kf_op_params *p,
                                            kf_dtype dtype, uint32_t which) {
    kf_shape out;
    if (which != 0 || transpose_shape(in, p, &out, NULL, 0) != KF_OK) {
        return NULL;
    }
    transpose_dims d = transpose_view(&in[0]);
    kf_kernel *k = kf__kernel_1d("transpose_backward", kf_type_scalar(KF_SCALAR_VOID),
                                 kf_shape_elements(&in[0]));
    if (!k) {
        return NULL;
    }
    kf__bind(k, "a", dtype, KF_ACCESS_READ);
    kf__bind(k, "out", dtype, KF_ACCESS_READ);
    kf_binding grad_out = kf__bind(k, "grad_out", dtype, KF_ACCESS_READ);
    kf_binding grad_in = kf__bind(k, "grad_in", dtype, KF_ACCESS_READ_WRITE);
    kf_val e = kf__each_element(k, "e", kf_shape_elements(&in[0]));
    /* grad_in is [batch, r, c]: element e reads grad_out[batch, e % c, e / c] */
    kf_val src = kf_let(k, "src", transposed_index(k, e, d.c, d.r));
    kf__store_f32(k, grad_in, e, kf__load_f32(k, grad_out, src, dtype), dtype);
    kf_end(k);
    return k;
}

static void transpose_grid(const kf_shape *in, const kf_op_params *p, int32_t which,
                           uint32_t groups[3]) {
    (void)p, (void)which;
    kf__grid_1d(kf_shape_elements(&in[0]), KF__WORKGROUP, groups);
}

/* ---------------------------------------------------------------------------------------- */
/* Operator objects                                                                         */
/* ---------------------------------------------------------------------------------------- */

#define CASES(table) .cases = table, .case_count = sizeof table / sizeof table[0]

static const kf_op_case scale_cases[] = {
    {{SHAPE1(1)}, {.alpha = 2.5f}, "one element"},
    {{SHAPE2(1, 1)}, {.alpha = -3.0f}, "1x1"},
    {{SHAPE2(7, 13)}, {.alpha = 2.5f}, "primes"},
    {{SHAPE2(257, 129)}, {.alpha = -0.75f}, "primes"},
    {{SHAPE4(3, 5, 7, 11)}, {.alpha = 0}, "rank 4, alpha 1"},
    {{SHAPE2(2048, 2049)}, {.alpha = 1.5f}, "large"},
};
static const kf_op_case affine_cases[] = {
    {{SHAPE1(1)}, {.alpha = 2.5f, .beta = 0.5f}, "one element"},
    {{SHAPE2(1, 1)}, {.alpha = -3.0f, .beta = 1.0f}, "1x1"},
    {{SHAPE2(7, 13)}, {.alpha = 2.5f, .beta = -0.25f}, "primes"},
    {{SHAPE2(257, 129)}, {.alpha = -1.5f, .beta = 0.25f}, "primes"},
    {{SHAPE4(3, 5, 7, 11)}, {.beta = 2.0f}, "rank 4, alpha 1"},
    {{SHAPE2(2048, 2049)}, {.alpha = 0.5f, .beta = -1.0f}, "large"},
};
static const kf_op_case copy_cases[] = {
    {{SHAPE1(1)}, {.alpha = 0}, "one element"},      {{SHAPE2(1, 1)}, {.alpha = 0}, "1x1"},
    {{SHAPE2(7, 13)}, {.alpha = 0}, "primes"},       {{SHAPE2(257, 129)}, {.alpha = 0}, "primes"},
    {{SHAPE4(3, 5, 7, 11)}, {.alpha = 0}, "rank 4"}, {{SHAPE2(2048, 2049)}, {.alpha = 0}, "large"},
};
static const kf_op_case transpose_cases[] = {
    {{SHAPE2(1, 1)}, {.alpha = 0}, "1x1"},
    {{SHAPE2(1, 7)}, {.alpha = 0}, "one row"},
    {{SHAPE2(7, 1)}, {.alpha = 0}, "one column"},
    {{SHAPE2(7, 13)}, {.alpha = 0}, "primes"},
    {{SHAPE2(257, 129)}, {.alpha = 0}, "primes"},
    {{SHAPE4(3, 5, 7, 11)}, {.alpha = 0}, "batched, rank 4"},
    {{SHAPE2(2048, 2049)}, {.alpha = 0}, "large"},
};

/* scale and affine: one f32 multiply (and add) against a double spec rounded once: 1e-6.
 * copy and transpose move values unchanged: they must match exactly, in f16 too (an f16 value
 * survives f16 -> f32 -> f16). */
const kf_operator kf__op_scale = {.name = "scale",
                                  .about = "alpha x (alpha 1)",
                                  .arity = 1,
                                  KF__EW_FIELDS(scale),
                                  KF__PARAMS(scale_params),
                                  .tolerance_f32 = 1e-6,
                                  .tolerance_f16 = 2e-3,
                                  .input_lo = -4.0f,
                                  .input_hi = 4.0f,
                                  CASES(scale_cases)};

const kf_operator kf__op_affine = {.name = "affine",
                                   .about = "alpha x + beta (alpha 1, beta 0)",
                                   .arity = 1,
                                   KF__EW_FIELDS(affine),
                                   KF__PARAMS(affine_params),
                                   .tolerance_f32 = 1e-6,
                                   .tolerance_f16 = 2e-3,
                                   .input_lo = -4.0f,
                                   .input_hi = 4.0f,
                                   CASES(affine_cases)};

const kf_operator kf__op_copy = {.name = "copy",
                                 .about = "x, unchanged",
                                 .arity = 1,
                                 KF__EW_FIELDS(copy),
                                 .tolerance_f32 = 0.0,
                                 .tolerance_f16 = 0.0,
                                 .input_lo = -4.0f,
                                 .input_hi = 4.0f,
                                 CASES(copy_cases)};

const kf_operator kf__op_transpose = {.name = "transpose",
                                      .about = "swap the last two dims: [..., r, c] -> [..., c, r]",
                                      .op_class = KF_OP_CLASS_LAYOUT,
                                      .arity = 1,
                                      .shape = transpose_shape,
                                      .spec_forward = transpose_spec_forward,
                                      .spec_backward = transpose_spec_backward,
                                      .kernel_forward = transpose_kernel_forward,
                                      .kernel_backward = transpose_kernel_backward,
                                      .tolerance_f32 = 0.0,
                                      .tolerance_f16 = 0.0,
                                      .input_lo = -4.0f,
                                      .input_hi = 4.0f,
                                      .grid = transpose_grid,
                                      CASES(transpose_cases)};
