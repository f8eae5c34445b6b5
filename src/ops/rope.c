/* Rotary position embedding: rope(x, base) over x [..., T, D], D even, the position of a row its
 * index along axis -2. Pairs of neighbouring elements (2i, 2i + 1) of each row are rotated by
 * theta = pos * base^(-2i / D) (the interleaved convention of GPT-J and Meta's llama code; GPT-NeoX
 * and Hugging Face rotate the halves (i, i + D/2) instead):
 *
 *   y[2i]     = x[2i] cos(theta) - x[2i+1] sin(theta)
 *   y[2i + 1] = x[2i] sin(theta) + x[2i+1] cos(theta)
 *
 * A rotation is orthogonal, so the gradient is the rotation by -theta applied to dy
 * (rope_grad(x, dy), which reads dy only). Not element-wise in the planner's sense (an element
 * needs its pair's value), so it has a kernel of its own: one invocation per element, reading the
 * element and its partner (index ^ 1) and yielding, so element-wise work after it fuses into its
 * store phase and element-wise producers into its loads (a row operator to the planner).
 *
 * The kernel computes theta's fraction of a turn nearly exactly for D <= 128 and positions below
 * 4096 (rope_kernel says how), and sin and cos by series, not by the GPU's builtins; past D 128
 * the phase error grows with pos * freq, about 3e-7 rad per radian of theta.
 */
#include "ops/ops_internal.h"
#include "ops/rowwise.h"

#include <math.h>

#define ROPE_DEFAULT_BASE 10000.0

static const kf__param rope_params[] = {
    {.name = "base",
     .about = "pair i turns at pos * base^(-2i/D) radians",
     .type = KF_PARAM_TYPE_FLOAT,
     KF__FIELD(alpha, ALPHA),
     .default_value = ROPE_DEFAULT_BASE,
     .min = 1.0,
     .min_exclusive = true,
     .max = 3.4028234663852886e38},
};
static const kf__input rope_inputs[] = {{.name = "x"}};
static const kf__input rope_grad_inputs[] = {{.name = "x"}, {.name = "dy"}};

static double rope_base(const kf_op_params *p) {
    kf_op_params none = {0};
    return kf__param_value(p ? p : &none, &rope_params[0]);
}

static kf_status rope_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out, char *msg,
                            size_t msg_size) {
    (void)p;
    char a[64];
    if (!kf__shape_valid(&in[0]) || in[0].rank < 2 || in[0].dims[in[0].rank - 1] % 2) {
        return kf__shape_error(msg, msg_size, "rope: x must be [..., T, D] with D even, got %s",
                               kf_shape_str(&in[0], a, sizeof a));
    }
    *out = in[0];
    return KF_OK;
}

/* y = R(sign * theta) x over every row; sign -1 is the gradient's rotation. */
static void spec_rotate(const kf_tensor *x, double base, double sign, kf_tensor *y) {
    const kf_shape *s = &x->shape;
    uint32_t d = s->dims[s->rank - 1], t = s->dims[s->rank - 2];
    uint64_t rows = kf_shape_elements(s) / d;
    for (uint64_t r = 0; r < rows; r++) {
        double pos = (double)(r % t);
        for (uint32_t i = 0; i < d / 2; i++) {
            double theta = sign * pos * pow(base, -2.0 * i / d);
            double c = cos(theta), sn = sin(theta);
            double x0 = x->data[r * d + 2 * i], x1 = x->data[r * d + 2 * i + 1];
            y->data[r * d + 2 * i] = (float)(x0 * c - x1 * sn);
            y->data[r * d + 2 * i + 1] = (float)(x0 * sn + x1 * c);
        }
    }
}

static kf_status rope_spec_forward(const kf_tensor *const *in, const kf_op_params *p,
                                   kf_tensor *out) {
    kf_status st = kf__spec_check_out(&kf__op_rope, in, p, out);
    if (st == KF_OK) {
        spec_rotate(in[0], rope_base(p), 1.0, out);
    }
    return st;
}

static kf_status rope_spec_backward(const kf_tensor *const *in, const kf_tensor *out,
                                    const kf_tensor *grad_out, const kf_op_params *p,
                                    kf_tensor *const *grad_in) {
    (void)out;
    kf_status st = kf__spec_check_out(&kf__op_rope, in, p, grad_out);
    if (st != KF_OK || !grad_in) {
        return st != KF_OK ? st : KF_ERROR_INVALID_ARGUMENT;
    }
    if (grad_in[0]) {
        spec_rotate(grad_out, rope_base(p), -1.0, grad_in[0]);
    }
    return KF_OK;
}

typedef enum rope_mode {
    ROPE_FORWARD = 0, /* x -> yield */
    ROPE_GRAD,        /* (x, dy) -> yield: rope_grad */
    ROPE_BACKWARD     /* (x, out, grad_out, grad_in): kernel_backward, stored */
} rope_mode;

static kf_kernel *rope_kernel(rope_mode mode, const kf_shape *in, const kf_op_params *p,
                              kf_dtype dtype) {
    uint32_t d = in[0].dims[in[0].rank - 1], t = in[0].dims[in[0].rank - 2];
    uint64_t n = kf_shape_elements(&in[0]);
    kf_kernel_desc desc = {.name = mode == ROPE_FORWARD ? "rope" : "rope_grad",
                           .workgroup_size = {KF__WORKGROUP, 1, 1},
                           .input = kf_type_scalar(KF_SCALAR_VOID),
                           .output = mode == ROPE_BACKWARD ? kf_type_scalar(KF_SCALAR_VOID)
                                                           : kf__dtype_type(dtype)};
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    uint32_t groups[3];
    kf__grid_1d(n, KF__WORKGROUP, groups);
    kf_kernel_set_grid(k, groups);
    kf_binding src = kf__bind(k, "x", dtype, KF_ACCESS_READ), grad_in = {0};
    if (mode == ROPE_GRAD) {
        src = kf__bind(k, "dy", dtype, KF_ACCESS_READ);
    } else if (mode == ROPE_BACKWARD) {
        kf__bind(k, "out", dtype, KF_ACCESS_READ);
        src = kf__bind(k, "grad_out", dtype, KF_ACCESS_READ);
        grad_in = kf__bind(k, "grad_in", dtype, KF_ACCESS_READ_WRITE);
    }
    kf_val idx = kf_let(k, "idx", kf_global_linear(k));
    kf_if(k, kf_binary(k, KF_OP_LT, idx, kf__u32(k, n)));
    kf_val col = kf_let(k, "col", kf_binary(k, KF_OP_MOD, idx, kf__u32(k, d)));
    kf_val pos = kf_binary(k, KF_OP_MOD, kf_div(k, idx, kf__u32(k, d)), kf__u32(k, t));
    kf_val pair = kf_let(k, "pair", kf_binary(k, KF_OP_SHR, col, kf__u32(k, 1)));
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    /* theta / (2 pi) = pos * rate, rate = q^pair / (2 pi), q = base^(-2/D), in turns: only its
     * fraction matters, and an f32 product pos * rate would lose ulp(pos * rate), up to 1e-4 rad
     * at pos 512. So rate (computed in float64) is split in three: r1 and r2 of 12 significant
     * bits each and the rest r3; for pos < 4096 the products pos r1 and pos r2 are exact in f32,
     * their fractions are exact, and only pos r3 (below 2^-24 of the total) and the sum round.
     * The three constants are picked per pair by a chain of selects for D <= 128; past that a
     * product of the f32 constants q^(2^b) (a few ulp of rate, so the phase error grows with
     * pos * rate). */
    double q = pow(rope_base(p), -2.0 / d);
    kf_val turns;
    kf_val posf = kf_let(k, "posf", kf_cast(k, f32, pos));
    if (d <= 128) {
        kf_val r[3] = {kf_lit_f32(k, 0), kf_lit_f32(k, 0), kf_lit_f32(k, 0)};
        for (uint32_t i = 0; i < d / 2; i++) {
            double rate = pow(q, (double)i) * (0.5 / M_PI), parts[3];
            for (int j = 0; j < 2; j++) {
                int e;
                double m = frexp(rate, &e);
                parts[j] = ldexp(trunc(ldexp(m, 12)), e - 12); /* 12 leading bits */
                rate -= parts[j];
            }
            parts[2] = rate;
            kf_val here = kf_binary(k, KF_OP_EQ, pair, kf__u32(k, i));
            for (int j = 0; j < 3; j++) {
                r[j] = kf_select(k, r[j], kf_lit_f32(k, (float)parts[j]), here);
            }
        }
        kf_val sum = kf_lit_f32(k, 0);
        for (int j = 0; j < 2; j++) {
            kf_val prod = kf_let(k, "prod", kf_mul(k, posf, r[j]));
            sum = kf_add(k, sum, kf_sub(k, prod, kf_call1(k, KF_FN_FLOOR, prod)));
        }
        turns = kf_let(k, "turns", kf_add(k, sum, kf_mul(k, posf, r[2])));
    } else {
        kf_val rate = kf_lit_f32(k, (float)(0.5 / M_PI));
        for (uint32_t b = 0; (1u << b) < d / 2; b++) {
            kf_val bit = kf_binary(
                k, KF_OP_NE, kf_binary(k, KF_OP_BIT_AND, pair, kf__u32(k, 1u << b)), kf__u32(k, 0));
            kf_val factor = kf_lit_f32(k, (float)pow(q, (double)(1u << b)));
            rate = kf_mul(k, rate, kf_select(k, kf_lit_f32(k, 1.0f), factor, bit));
        }
        turns = kf_let(k, "turns", kf_mul(k, posf, rate));
    }
    /* reduced to the nearest quarter turn: sin and cos of the remainder (at most pi/4) by their
     * Taylor series to x^9 / x^8 (error < 3e-9), then the quarter's symmetry. Not the GPU's sin
     * and cos, which Vulkan holds only to 2^-11 absolute on [-pi, pi] */
    kf_val quarters =
        kf_let(k, "quarters",
               kf_call1(k, KF_FN_FLOOR,
                        kf_add(k, kf_mul(k, turns, kf_lit_f32(k, 4.0f)), kf_lit_f32(k, 0.5f))));
    kf_val a = kf_let(k, "a",
                      kf_mul(k, kf_sub(k, turns, kf_mul(k, quarters, kf_lit_f32(k, 0.25f))),
                             kf_lit_f32(k, (float)(2.0 * M_PI))));
    kf_val a2 = kf_let(k, "a2", kf_mul(k, a, a));
    /* Horner: sin a = a (1 - a2/6 (1 - a2/20 (1 - a2/42 (1 - a2/72)))), cos likewise */
    kf_val ps = kf_lit_f32(k, 1.0f), pc = kf_lit_f32(k, 1.0f);
    static const double sin_div[] = {72, 42, 20, 6}, cos_div[] = {56, 30, 12, 2};
    for (int i = 0; i < 4; i++) {
        ps = kf_sub(k, kf_lit_f32(k, 1.0f),
                    kf_mul(k, kf_mul(k, a2, kf_lit_f32(k, (float)(1.0 / sin_div[i]))), ps));
        pc = kf_sub(k, kf_lit_f32(k, 1.0f),
                    kf_mul(k, kf_mul(k, a2, kf_lit_f32(k, (float)(1.0 / cos_div[i]))), pc));
    }
    kf_val sa = kf_let(k, "sin_a", kf_mul(k, a, ps)), ca = kf_let(k, "cos_a", pc);
    /* quadrant q = quarters mod 4: (sin, cos) = (s, c), (c, -s), (-s, -c), (-c, s) */
    kf_val qi =
        kf_let(k, "quadrant",
               kf_binary(k, KF_OP_BIT_AND, kf_cast(k, kf_type_scalar(KF_SCALAR_I32), quarters),
                         kf_lit_i32(k, 3)));
    kf_val odd_q =
        kf_binary(k, KF_OP_NE, kf_binary(k, KF_OP_BIT_AND, qi, kf_lit_i32(k, 1)), kf_lit_i32(k, 0));
    kf_val neg_s = kf_binary(k, KF_OP_GE, qi, kf_lit_i32(k, 2));
    kf_val neg_c = kf_binary(k, KF_OP_OR, kf_binary(k, KF_OP_EQ, qi, kf_lit_i32(k, 1)),
                             kf_binary(k, KF_OP_EQ, qi, kf_lit_i32(k, 2)));
    kf_val s0 = kf_select(k, sa, ca, odd_q), c0 = kf_select(k, ca, sa, odd_q);
    kf_val s = kf_let(k, "sn", kf_select(k, s0, kf_unary(k, KF_OP_NEG, s0), neg_s));
    kf_val c = kf_let(k, "c", kf_select(k, c0, kf_unary(k, KF_OP_NEG, c0), neg_c));
    kf_val self = kf__load_f32(k, src, idx, dtype);
    kf_val other = kf__load_f32(k, src, kf_binary(k, KF_OP_BIT_XOR, idx, kf__u32(k, 1)), dtype);
    /* even element: x0 c - x1 s; odd: x1 s + x0 c with x1 the even partner. The gradient turns
     * the other way (sin's sign flips). */
    kf_val even =
        kf_binary(k, KF_OP_EQ, kf_binary(k, KF_OP_BIT_AND, col, kf__u32(k, 1)), kf__u32(k, 0));
    bool reverse = mode != ROPE_FORWARD;
    kf_val minus = kf_lit_f32(k, -1.0f), plus = kf_lit_f32(k, 1.0f);
    kf_val sign = reverse ? kf_select(k, minus, plus, even) : kf_select(k, plus, minus, even);
    kf_val y = kf_call3(k, KF_FN_FMA, kf_mul(k, sign, other), s, kf_mul(k, self, c));
    kf__store_or_yield(k, grad_in, idx, y, dtype);
    kf_end(k);
    return k;
}

static kf_kernel *rope_kernel_forward(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {
    return rope_kernel(ROPE_FORWARD, in, p, dtype);
}
static kf_kernel *rope_kernel_backward(const kf_shape *in, const kf_op_params *p, kf_dtype dtype,
                                       uint32_t which) {
    return which == 0 ? rope_kernel(ROPE_BACKWARD, in, p, dtype) : NULL;
}
static kf_kernel *rope_grad_kernel(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {
    return rope_kernel(ROPE_GRAD, in, p, dtype);
}
static void rope_grid(const kf_shape *in, const kf_op_params *p, int32_t which,
                      uint32_t groups[3]) {
    (void)p, (void)which;
    kf__grid_1d(kf_shape_elements(&in[0]), KF__WORKGROUP, groups);
}

static kf_status rope_grad_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out,
                                 char *msg, size_t msg_size) {
    return kf__grad_shape(&kf__op_rope_grad, in, p, out, msg, msg_size);
}
static kf_status rope_grad_spec(const kf_tensor *const *in, const kf_op_params *p, kf_tensor *out) {
    return kf__grad_spec_forward(&kf__op_rope_grad, in, p, out);
}

/* Rows of 2 (one pair), T of 1 and 7, D of 8, 64 and 126, rank 2 to 4, a base of 500, and 2^22
 * elements (positions up to 511). */
static const kf_op_case rope_cases[] = {
    {.shapes = {SHAPE2(1, 2)}, .note = "one pair"},
    {.shapes = {SHAPE3(3, 7, 8)}, .note = "T 7, D 8"},
    {.shapes = {SHAPE4(2, 3, 100, 64)}, .note = "T 100, D 64"},
    {.shapes = {SHAPE2(13, 126)}, .params = {.alpha = 500.0f}, .note = "base 500"},
    {.shapes = {SHAPE4(16, 4, 512, 128)}, .note = "large: 2^22 elements"},
};
static const kf_op_case rope_grad_cases[] = {
    {.shapes = {SHAPE2(1, 2), SHAPE2(1, 2)}, .note = "one pair"},
    {.shapes = {SHAPE3(3, 7, 8), SHAPE3(3, 7, 8)}, .note = "T 7, D 8"},
    {.shapes = {SHAPE4(2, 3, 100, 64), SHAPE4(2, 3, 100, 64)}, .note = "T 100, D 64"},
    {.shapes = {SHAPE2(13, 126), SHAPE2(13, 126)}, .params = {.alpha = 500.0f}, .note = "base 500"},
    {.shapes = {SHAPE4(16, 4, 512, 128), SHAPE4(16, 4, 512, 128)}, .note = "large: 2^22 elements"},
};

#define CASES(table) .cases = table, .case_count = sizeof table / sizeof table[0]

/* Tolerances: two products and a sum (cancellation is bounded: |y| is |x|'s pair norm), sin and
 * cos of an f32 theta whose error grows with pos (see above: at pos 511, ~2e-4 rad at worst
 * against a float64 theta); f32 2e-4 over positions below 512. f16 as element-wise ops. */
const kf_operator kf__op_rope = {
    .name = "rope",
    .about =
        "rotary position embedding: pairs (2i, 2i+1) of [..., T, D] turned by pos base^(-2i/D)",
    .op_class = KF_OP_CLASS_ROW_REDUCTION,
    .arity = 1,
    KF__INPUTS(rope_inputs),
    KF__PARAMS(rope_params),
    .shape = rope_shape,
    .spec_forward = rope_spec_forward,
    .spec_backward = rope_spec_backward,
    .kernel_forward = rope_kernel_forward,
    .kernel_backward = rope_kernel_backward,
    .tolerance_f32 = 2e-4,
    .tolerance_f16 = 2e-3,
    .input_lo = -2.0f,
    .input_hi = 2.0f,
    .grid = rope_grid,
    CASES(rope_cases),
};

const kf_operator kf__op_rope_grad = {
    .name = "rope_grad",
    .about = "rope's gradient: dy turned back by -theta",
    .op_class = KF_OP_CLASS_ROW_REDUCTION,
    KF__INPUTS(rope_grad_inputs),
    KF__PARAMS(rope_params),
    .shape = rope_grad_shape,
    .spec_forward = rope_grad_spec,
    .kernel_forward = rope_grad_kernel,
    .tolerance_f32 = 2e-4,
    .tolerance_f16 = 2e-3,
    .input_lo = -2.0f,
    .input_hi = 2.0f,
    .grid = rope_grid,
    CASES(rope_grad_cases),
    .grad_of = &kf__op_rope,
    .grad_input = 0,
};
