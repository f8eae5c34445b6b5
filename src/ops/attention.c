/* Fused attention: softmax(q k^T * scale + causal mask) v in one kernel that never holds the
 * T x T scores, and its backward from row statistics.
 *
 *   attention(q, k, v)                -> o   [..., T, D]
 *   attention_lse(q, k, v)            -> lse [..., T, 1]
 *   attention_grad_pack(dy, o, lse)   -> g   [..., T, D + 2] = [dy | lse | delta]
 *   attention_grad_prep(q, k, v, dy)  -> g   (the same g, lse from a pass of its own)
 *   attention_grad_q(q, k, v, g)      -> dq  (likewise _k -> dk, _v -> dv)
 *   attention_grad_stats(q, k, v, g)  -> g'  (g with lse and delta exact: attention_grad.c)
 *
 * q, k and v have one shape [..., T, D] (rank 2 to 4; the leading dims are batch and heads),
 * D <= 128. scale (params.alpha, 0 meaning 1/sqrt(D)) multiplies the scores; with causal (the
 * default) query i sees keys 0..i. With s_ij = scale q_i . k_j, P_ij = softmax_j(s_ij) over the
 * keys query i sees, lse_i = log sum_j exp(s_ij), and do = dy:
 *   o_i = sum_j P_ij v_j
 *   dP_ij = do_i . v_j,  delta_i = sum_j P_ij dP_ij = do_i . o_i,  dS_ij = P_ij (dP_ij - delta_i)
 *   dq_i = scale sum_j dS_ij k_j,  dk_j = scale sum_i dS_ij q_i,  dv_j = sum_i P_ij do_i
 * (FlashAttention-2's backward). The gradient kernels recompute P_ij = exp(s_ij - lse_i) tile by
 * tile from the saved row statistics instead of reading a T x T matrix.
 *
 * The statistics are stored in f32 whatever q, k and v are (lse, g and g' are f32 tensors in an
 * f16 graph: kf_operator.f32_output, f32_inputs): in f16, lse (about log T + the largest score)
 * would carry 2^-11 of itself, a relative error of every P of that size, which put dk and dv
 * 40-60% of their rms off at T 1024 against a float64 gradient. g's delta = dy . o is from o as
 * the forward stored it (f16: 2^-12 of each element), still 1.4% of dk's rms off; so dq, which
 * sums P and dP over all of its row's keys anyway, uses g's lse and delta only as shifts
 * (normalising P itself) and writes g' with the row's exact lse and delta on the way, which dk
 * and dv read (autodiff; src/fuse/autodiff.c).
 *
 * Where the statistics come from: an operator has at most 4 inputs, so the gradient kernels,
 * which need q, k, v, dy, lse and delta, take dy, lse and delta packed in one tensor g. In a
 * training graph autodiff emits attention_lse(q, k, v) (the forward's row statistics, which the
 * planner makes a second output of the forward's kernel: src/fuse/rules/companion.c) and
 * attention_grad_pack(dy, o, lse), a row kernel writing g with delta = dy . o.
 * attention_grad_prep(q, k, v, dy) writes the same g by a pass over the keys of its own (the
 * forward's cost): what autodiff emitted before multi-output groups, kept for graphs naming it.
 *
 * The forward's other kernels: attention_sgmat.c (f16 on subgroup matrices) and
 * attention_tiled.c (register tiles, from T 128), chosen by attention_choose.
 *
 * This file's kernel (one generator, two roles: o, with lse beside it or alone, and
 * attention_grad_prep's g; the gradients' kernels are attention_grad.c's): a workgroup of 16 x 16
 * invocations owns 16 query rows of one (batch, head), 16 invocations per row. It walks the keys
 * in tiles of C = 16 columns (8 when D > 64, so the tiles stay in 16 KB of workgroup memory),
 * staged in workgroup memory with a padded stride (D + 1, no bank conflicts):
 *   1. the tile's k and v are loaded, clamped to the last row;
 *   2. each invocation computes a slice of the dot products of its row with one key (16 / C
 *      invocations share a dot product, each over D * C / 16 terms);
 *   3. one invocation per (row, key) turns the scores into P (the running max and sum: online
 *      softmax);
 *   4. each invocation accumulates D / 16 of its row's output columns over the tile.
 * Causal tiles past the diagonal are never visited: the loop bounds depend only on the
 * workgroup, so the barriers stay in uniform control flow. Rows past T are computed as row T - 1
 * and not yielded. Accumulation is in f32 for f16 tensors too.
 */
#include "ops/attention.h"
#include "ops/attention_sgmat.h"
#include "ops/ops_internal.h"
#include "ops/rowwise.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROWS 16u         /* rows per workgroup */
#define LANES 16u        /* invocations per row */
#define ATTN_MAX_D 128u  /* the largest head dimension */
#define NEG_BIG -3.0e38f /* the running max before any key: exp(NEG_BIG - m) is 0 */
#define MAX_COL_REGS (ATTN_MAX_D / LANES)

/* What attn_kernel computes: o (attention; attention_lse: lse alone), or g (attention_grad_prep).
 */
typedef enum attn_role { ROLE_OUT = 0, ROLE_PREP } attn_role;

const kf__param kf__attn_params[KF__ATTN_PARAM_COUNT] = {
    {.name = "causal",
     .about = "query i attends to keys 0..i only",
     KF__BOOL,
     KF__FIELD(causal, CAUSAL),
     .default_value = 1},
    {.name = "scale",
     .about = "multiplies q k^T (0: 1/sqrt(D))",
     .type = KF_PARAM_TYPE_FLOAT,
     KF__FIELD(alpha, ALPHA),
     .default_value = 0,
     KF__ANY_FLOAT},
};

static const kf__input attn_inputs[] = {{.name = "q"}, {.name = "k"}, {.name = "v"}};
static const kf__input prep_inputs[] = {
    {.name = "q"}, {.name = "k"}, {.name = "v"}, {.name = "dy"}};

static bool attn_causal(const kf_op_params *p) {
    kf_op_params none = {0};
    return kf__param_value(p ? p : &none, &kf__attn_params[0]) != 0;
}

static double attn_scale(const kf_op_params *p, uint32_t d) {
    kf_op_params none = {0};
    double s = kf__param_value(p ? p : &none, &kf__attn_params[1]);
    return s != 0 ? s : 1.0 / sqrt((double)d);
}

/* [..., T, D] viewed as bh heads of T rows of D. */
typedef struct attn_dims {
    uint32_t bh, t, d;
} attn_dims;

static attn_dims dims_of(const kf_shape *q) {
    attn_dims a = {1, q->dims[q->rank - 2], q->dims[q->rank - 1]};
    for (uint32_t i = 0; i + 2 < q->rank; i++) {
        a.bh *= q->dims[i];
    }
    return a;
}

/* ---------------------------------------------------------------------------------------- */
/* Shapes                                                                                   */
/* ---------------------------------------------------------------------------------------- */

static kf_status qkv_check(const char *name, const kf_shape *in, char *msg, size_t msg_size) {
    char a[64], b[64], c[64];
    const kf_shape *q = &in[0];
    if (!kf__shape_valid(q) || q->rank < 2) {
        return kf__shape_error(msg, msg_size, "%s: q must be [..., T, D] (rank 2 to 4), got %s",
                               name, kf_shape_str(q, a, sizeof a));
    }
    if (!kf_shape_eq(q, &in[1]) || !kf_shape_eq(q, &in[2])) {
        return kf__shape_error(msg, msg_size, "%s: q, k and v must have one shape: %s, %s, %s",
                               name, kf_shape_str(q, a, sizeof a),
                               kf_shape_str(&in[1], b, sizeof b),
                               kf_shape_str(&in[2], c, sizeof c));
    }
    uint32_t d = q->dims[q->rank - 1];
    if (d > ATTN_MAX_D) {
        return kf__shape_error(msg, msg_size, "%s: head dimension %u is above %u (q is %s)", name,
                               d, ATTN_MAX_D, kf_shape_str(q, a, sizeof a));
    }
    return KF_OK;
}

/* g's shape for q's: the last dim D + 2. */
static kf_shape packed_shape(const kf_shape *q) {
    kf_shape g = *q;
    g.dims[g.rank - 1] += 2;
    return g;
}

static kf_status attention_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out,
                                 char *msg, size_t msg_size) {
    (void)p;
    kf_status st = qkv_check("attention", in, msg, msg_size);
    if (st == KF_OK) {
        *out = in[0];
    }
    return st;
}

/* lse's shape for q's: [..., T, 1]. */
static kf_shape lse_shape_of(const kf_shape *q) {
    kf_shape s = *q;
    s.dims[s.rank - 1] = 1;
    return s;
}

static kf_status lse_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out, char *msg,
                           size_t msg_size) {
    (void)p;
    kf_status st = qkv_check("attention_lse", in, msg, msg_size);
    if (st == KF_OK) {
        *out = lse_shape_of(&in[0]);
    }
    return st;
}

/* attention_grad_pack(dy, o, lse): dy and o of one shape [..., T, D], lse [..., T, 1]. */
static kf_status pack_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out, char *msg,
                            size_t msg_size) {
    (void)p;
    char a[64], b[64], c[64], e[64];
    const kf_shape *dy = &in[0];
    if (!kf__shape_valid(dy) || dy->rank < 2 || dy->dims[dy->rank - 1] > ATTN_MAX_D) {
        return kf__shape_error(msg, msg_size,
                               "attention_grad_pack: dy must be [..., T, D] (rank 2 to 4, D <= "
                               "%u), got %s",
                               ATTN_MAX_D, kf_shape_str(dy, a, sizeof a));
    }
    kf_shape want = lse_shape_of(dy);
    if (!kf_shape_eq(dy, &in[1]) || !kf_shape_eq(&want, &in[2])) {
        return kf__shape_error(msg, msg_size,
                               "attention_grad_pack: o must be dy's shape and lse %s: dy %s, o %s, "
                               "lse %s",
                               kf_shape_str(&want, a, sizeof a), kf_shape_str(dy, b, sizeof b),
                               kf_shape_str(&in[1], c, sizeof c),
                               kf_shape_str(&in[2], e, sizeof e));
    }
    *out = packed_shape(dy);
    return KF_OK;
}

static kf_status prep_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out, char *msg,
                            size_t msg_size) {
    (void)p;
    char a[64], b[64];
    kf_status st = qkv_check("attention_grad_prep", in, msg, msg_size);
    if (st == KF_OK && !kf_shape_eq(&in[3], &in[0])) {
        return kf__shape_error(msg, msg_size, "attention_grad_prep: dy must be %s (q's), got %s",
                               kf_shape_str(&in[0], a, sizeof a),
                               kf_shape_str(&in[3], b, sizeof b));
    }
    if (st == KF_OK) {
        *out = packed_shape(&in[0]);
    }
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Specifications                                                                           */
/* ---------------------------------------------------------------------------------------- */

/* The keys query i sees: 0..last(i). */
static uint32_t last_key(uint32_t i, uint32_t t, bool causal) {
    return causal ? i : t - 1;
}

/* Row i of head h: P (into p, t entries; 0 past the last key) and lse, in float64. */
static double spec_row(const float *q, const float *k, attn_dims a, double scale, bool causal,
                       uint32_t i, double *p) {
    uint32_t last = last_key(i, a.t, causal);
    double m = -INFINITY;
    for (uint32_t j = 0; j <= last; j++) {
        double s = 0;
        for (uint32_t d = 0; d < a.d; d++) {
            s += (double)q[(uint64_t)i * a.d + d] * k[(uint64_t)j * a.d + d];
        }
        p[j] = s * scale;
        m = p[j] > m ? p[j] : m;
    }
    double l = 0;
    for (uint32_t j = 0; j < a.t; j++) {
        p[j] = j <= last ? exp(p[j] - m) : 0.0;
        l += p[j];
    }
    for (uint32_t j = 0; j <= last; j++) {
        p[j] /= l;
    }
    return m + log(l);
}

static kf_status attention_spec_forward(const kf_tensor *const *in, const kf_op_params *p,
                                        kf_tensor *out) {
    kf_status st = kf__spec_check_out(&kf__op_attention, in, p, out);
    if (st != KF_OK) {
        return st;
    }
    attn_dims a = dims_of(&in[0]->shape);
    double scale = attn_scale(p, a.d);
    double *prob = malloc(a.t * sizeof *prob);
    if (!prob) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    for (uint32_t h = 0; h < a.bh; h++) {
        uint64_t head = (uint64_t)h * a.t * a.d;
        const float *q = in[0]->data + head, *k = in[1]->data + head, *v = in[2]->data + head;
        for (uint32_t i = 0; i < a.t; i++) {
            spec_row(q, k, a, scale, attn_causal(p), i, prob);
            for (uint32_t d = 0; d < a.d; d++) {
                double o = 0;
                for (uint32_t j = 0; j < a.t; j++) {
                    o += prob[j] * v[(uint64_t)j * a.d + d];
                }
                out->data[head + (uint64_t)i * a.d + d] = (float)o;
            }
        }
    }
    free(prob);
    return KF_OK;
}

static kf_status attention_spec_backward(const kf_tensor *const *in, const kf_tensor *out,
                                         const kf_tensor *grad_out, const kf_op_params *p,
                                         kf_tensor *const *grad_in) {
    (void)out;
    kf_status st = kf__spec_check_out(&kf__op_attention, in, p, grad_out);
    if (st != KF_OK || !grad_in) {
        return st != KF_OK ? st : KF_ERROR_INVALID_ARGUMENT;
    }
    return kf__attn_spec_backward(in, grad_out, NULL, false, p, grad_in);
}

static kf_status lse_spec(const kf_tensor *const *in, const kf_op_params *p, kf_tensor *out) {
    kf_status st = kf__spec_check_out(&kf__op_attention_lse, in, p, out);
    if (st != KF_OK) {
        return st;
    }
    attn_dims a = dims_of(&in[0]->shape);
    double *prob = malloc(a.t * sizeof *prob);
    if (!prob) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    for (uint32_t h = 0; h < a.bh; h++) {
        uint64_t head = (uint64_t)h * a.t * a.d;
        for (uint32_t i = 0; i < a.t; i++) {
            out->data[(uint64_t)h * a.t + i] =
                (float)spec_row(in[0]->data + head, in[1]->data + head, a, attn_scale(p, a.d),
                                attn_causal(p), i, prob);
        }
    }
    free(prob);
    return KF_OK;
}

static kf_status pack_spec(const kf_tensor *const *in, const kf_op_params *p, kf_tensor *out) {
    kf_status st = kf__spec_check_out(&kf__op_attention_grad_pack, in, p, out);
    if (st != KF_OK) {
        return st;
    }
    attn_dims a = dims_of(&in[0]->shape);
    for (uint64_t r = 0; r < (uint64_t)a.bh * a.t; r++) {
        const float *dy = in[0]->data + r * a.d, *o = in[1]->data + r * a.d;
        float *row = out->data + r * (a.d + 2);
        double delta = 0;
        for (uint32_t d = 0; d < a.d; d++) {
            delta += (double)dy[d] * o[d];
            row[d] = dy[d];
        }
        row[a.d] = in[2]->data[r];
        row[a.d + 1] = (float)delta;
    }
    return KF_OK;
}

static kf_status prep_spec(const kf_tensor *const *in, const kf_op_params *p, kf_tensor *out) {
    kf_status st = kf__spec_check_out(&kf__op_attention_grad_prep, in, p, out);
    if (st != KF_OK) {
        return st;
    }
    attn_dims a = dims_of(&in[0]->shape);
    double scale = attn_scale(p, a.d);
    double *prob = malloc(a.t * sizeof *prob);
    if (!prob) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    for (uint32_t h = 0; h < a.bh; h++) {
        uint64_t head = (uint64_t)h * a.t * a.d;
        const float *q = in[0]->data + head, *k = in[1]->data + head, *v = in[2]->data + head;
        const float *dy = in[3]->data + head;
        for (uint32_t i = 0; i < a.t; i++) {
            float *row = out->data + ((uint64_t)h * a.t + i) * (a.d + 2);
            double lse = spec_row(q, k, a, scale, attn_causal(p), i, prob);
            double delta = 0;
            for (uint32_t d = 0; d < a.d; d++) {
                double o = 0;
                for (uint32_t j = 0; j < a.t; j++) {
                    o += prob[j] * v[(uint64_t)j * a.d + d];
                }
                delta += o * dy[(uint64_t)i * a.d + d];
                row[d] = dy[(uint64_t)i * a.d + d];
            }
            row[a.d] = (float)lse;
            row[a.d + 1] = (float)delta;
        }
    }
    free(prob);
    return KF_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* The kernel                                                                               */
/* ---------------------------------------------------------------------------------------- */

/* Columns per tile: 16, or 8 when D > 64 (two 16 x 129 f32 tiles would pass 16 KB). */
static uint32_t col_tile(uint32_t d) {
    return d <= 64 ? 16u : 8u;
}

/* A row-major operand read through its binding: element (row, d) at (row) * stride + offset + d,
 * row counted over all heads (head * T + row); or, with a layout (a strided view read in place:
 * kf_operator.kernel_strided), where the layout puts it. */
typedef struct attn_operand {
    kf_binding b;
    uint32_t stride, offset;
    const kf__strided *layout; /* NULL: row-major */
} attn_operand;

static kf_val operand_load(kf_kernel *k, attn_operand o, kf_val row, kf_val d, kf_dtype dtype) {
    if (o.layout) {
        return kf__load_f32(k, o.b, kf__strided_at(k, o.layout, row, d), dtype);
    }
    kf_val at = kf_add(k, kf_mul(k, row, kf__u32(k, o.stride)), d);
    if (o.offset) {
        at = kf_add(k, at, kf__u32(k, o.offset));
    }
    return kf__load_f32(k, o.b, at, dtype);
}

static const char *role_name(attn_role role) {
    return role == ROLE_PREP ? "attention_grad_prep" : "attention";
}

/* What the forward (ROLE_OUT) writes of the row statistics: nothing, lse beside o (a binding
 * "lse" after the inputs, read_write: attention's kernel_with_companion), or lse alone as its
 * output (attention_lse's kernel: no P V). */
typedef enum attn_lse { LSE_NONE = 0, LSE_SIDE, LSE_ONLY } attn_lse;

/* layouts[i] (layouts NULL or rank 0: row-major): how input i is read (kernel_strided). */
static const kf__strided *layout_of(const kf__strided *layouts, uint32_t i) {
    return layouts && layouts[i].rank ? &layouts[i] : NULL;
}

static kf_kernel *attn_kernel(attn_role role, const kf_shape *in, const kf_op_params *p,
                              kf_dtype dtype, attn_lse lse_mode, const kf__strided *layouts) {
    const attn_dims a = dims_of(&in[0]);
    const uint32_t t = a.t, d = a.d, bc = col_tile(d), split = LANES / bc;
    const uint32_t per = (d + split - 1) / split; /* dot-product terms per invocation */
    const uint32_t ncols = (d + LANES - 1) / LANES;
    const uint32_t stride = d + 1; /* padded tile rows */
    const uint32_t tiles = (t + ROWS - 1) / ROWS;
    const bool causal = attn_causal(p);
    const float scale = (float)attn_scale(p, d);
    /* what the kernel yields is row statistics, stored in f32 whatever q is (the header says
     * why): prep's g, attention_lse's lse */
    const bool stats = role == ROLE_PREP || lse_mode == LSE_ONLY;
    const kf_dtype out_dtype = stats ? KF_DTYPE_F32 : dtype;

    kf_kernel_desc desc = {.name = lse_mode == LSE_ONLY   ? "attention_lse"
                                   : lse_mode == LSE_SIDE ? "attention_with_lse"
                                                          : role_name(role),
                           .workgroup_size = {LANES, ROWS, 1},
                           .input = kf_type_scalar(KF_SCALAR_VOID),
                           .output = kf__dtype_type(stats ? KF_DTYPE_F32 : dtype)};
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    uint32_t groups[3] = {tiles * a.bh, 1, 1};
    kf_kernel_set_grid(k, groups);
    kf_binding bq = kf__bind(k, "q", dtype, KF_ACCESS_READ);
    kf_binding bk = kf__bind(k, "k", dtype, KF_ACCESS_READ);
    kf_binding bv = kf__bind(k, "v", dtype, KF_ACCESS_READ);
    kf_binding b4 = {0}, blse = {0};
    if (lse_mode == LSE_SIDE) {
        blse = kf__bind(k, "lse", KF_DTYPE_F32, KF_ACCESS_READ_WRITE);
    }
    if (role == ROLE_PREP) {
        b4 = kf__bind(k, "dy", dtype, KF_ACCESS_READ);
    }
    /* the row's operand (dot products with the tile's a), the tile's operands */
    attn_operand row1 = {bq, d, 0, layout_of(layouts, 0)};
    attn_operand tile_a = {bk, d, 0, layout_of(layouts, 1)},
                 tile_b = {bv, d, 0, layout_of(layouts, 2)};

    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_shared sa = kf_kernel_workgroup(k, "tile_a", f32, bc * stride);
    kf_shared sb = kf_kernel_workgroup(k, "tile_b", f32, bc * stride);
    kf_shared s_dot = kf_kernel_workgroup(k, "dots", f32, ROWS * LANES);
    kf_shared s_p = kf_kernel_workgroup(k, "probs", f32, ROWS * bc);

    kf_val local = kf_builtin_get(k, KF_BUILTIN_LOCAL_ID);
    kf_val lx = kf_let(k, "lx", kf_extract(k, local, 0));
    kf_val ly = kf_let(k, "ly", kf_extract(k, local, 1));
    kf_val lid = kf_let(k, "lid", kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX));
    kf_val wg = kf_let(k, "wg", kf_workgroup_linear(k));
    kf_val head = kf_let(k, "head", kf_div(k, wg, kf__u32(k, tiles)));
    kf_val r0 = kf_let(k, "r0",
                       kf_mul(k, kf_binary(k, KF_OP_MOD, wg, kf__u32(k, tiles)), kf__u32(k, ROWS)));
    kf_val row = kf_let(k, "row", kf_add(k, r0, ly));
    kf_val valid = kf_let(k, "valid", kf_binary(k, KF_OP_LT, row, kf__u32(k, t)));
    kf_val rowc = kf_let(k, "rowc", kf_call2(k, KF_FN_MIN, row, kf__u32(k, t - 1)));
    kf_val head_row0 = kf_let(k, "head_row0", kf_mul(k, head, kf__u32(k, t)));
    kf_val my_row = kf_let(k, "my_row", kf_add(k, head_row0, rowc));
    kf_val slot = kf_let(k, "slot", kf_add(k, kf_mul(k, ly, kf__u32(k, LANES)), lx));
    kf_val jcol = kf_let(k, "jcol", kf_binary(k, KF_OP_MOD, lx, kf__u32(k, bc)));
    kf_val part = kf_let(k, "part", kf_div(k, lx, kf__u32(k, bc)));
    /* the (row, column) pair this invocation turns into P or dS: lanes below bc */
    kf_val pcol = kf_let(k, "pcol", kf_call2(k, KF_FN_MIN, lx, kf__u32(k, bc - 1)));

    /* the row's running state: the online softmax's max and sum */
    kf_var m_run = kf_declare(k, "m_run", f32, kf_lit_f32(k, NEG_BIG));
    kf_var l_run = kf_declare(k, "l_run", f32, kf_lit_f32(k, 0));
    kf_var acc[MAX_COL_REGS];
    for (uint32_t c = 0; c < ncols; c++) {
        char name[16];
        snprintf(name, sizeof name, "acc%u", c);
        acc[c] = kf_declare(k, name, f32, kf_lit_f32(k, 0));
    }

    /* the columns this workgroup visits */
    kf_val start = kf__u32(k, 0), end = kf__u32(k, t);
    if (causal) {
        end = kf_let(k, "end",
                     kf_call2(k, KF_FN_MIN, kf_add(k, r0, kf__u32(k, ROWS)), kf__u32(k, t)));
    }
    kf_val c0 = kf_for(k, "c0", start, end, kf__u32(k, bc));
    {
        /* 1. stage the tile's operands (rows clamped into the head) */
        kf_val e = kf_for(k, "e", lid, kf__u32(k, bc * d), kf__u32(k, ROWS * LANES));
        kf_val tj = kf_let(k, "tj", kf_div(k, e, kf__u32(k, d)));
        kf_val td = kf_let(k, "td", kf_binary(k, KF_OP_MOD, e, kf__u32(k, d)));
        kf_val trow = kf_let(
            k, "trow",
            kf_add(k, head_row0, kf_call2(k, KF_FN_MIN, kf_add(k, c0, tj), kf__u32(k, t - 1))));
        kf_val at = kf_add(k, kf_mul(k, tj, kf__u32(k, stride)), td);
        kf_shared_store(k, sa, at, operand_load(k, tile_a, trow, td, dtype));
        kf_shared_store(k, sb, at, operand_load(k, tile_b, trow, td, dtype));
        kf_end(k);
        kf_barrier(k);

        /* 2. this invocation's slice of (row . column jcol) */
        kf_var dot = kf_declare(k, "dot", f32, kf_lit_f32(k, 0));
        kf_val first = kf_let(k, "first", kf_mul(k, part, kf__u32(k, per)));
        kf_val dd = kf_for(k, "dd", kf__u32(k, 0), kf__u32(k, per), kf__u32(k, 1));
        kf_val dim = kf_let(k, "dim", kf_add(k, first, dd));
        if (per * split != d) {
            kf_if(k, kf_binary(k, KF_OP_LT, dim, kf__u32(k, d)));
        }
        kf_val at2 = kf_let(k, "at", kf_add(k, kf_mul(k, jcol, kf__u32(k, stride)), dim));
        kf_assign(k, dot,
                  kf_call3(k, KF_FN_FMA, operand_load(k, row1, my_row, dim, dtype),
                           kf_shared_load(k, sa, at2), kf_read(k, dot)));
        if (per * split != d) {
            kf_end(k);
        }
        kf_end(k);
        kf_shared_store(k, s_dot, slot, kf_read(k, dot));
        kf_barrier(k);

        /* 3. scores -> P (online softmax); column j of the tile is key c0 + j */
        kf_val row_at = kf_mul(k, ly, kf__u32(k, LANES));
        /* the score of column j and whether it counts */
        kf_val score[LANES] = {{0, 0}}, keep[LANES] = {{0, 0}};
        for (uint32_t j = 0; j < bc; j++) {
            kf_val s = kf_lit_f32(k, 0);
            for (uint32_t h = 0; h < split; h++) {
                s = kf_add(k, s,
                           kf_shared_load(k, s_dot, kf_add(k, row_at, kf__u32(k, h * bc + j))));
            }
            score[j] = kf_mul(k, s, kf_lit_f32(k, scale));
            kf_val col = kf_add(k, c0, kf__u32(k, j));
            keep[j] = kf_binary(k, KF_OP_LT, col, kf__u32(k, t));
            if (causal) {
                keep[j] = kf_binary(k, KF_OP_AND, keep[j], kf_binary(k, KF_OP_LE, col, rowc));
            }
        }
        kf_val m_tile = kf_read(k, m_run);
        for (uint32_t j = 0; j < bc; j++) {
            m_tile = kf_call2(k, KF_FN_MAX, m_tile,
                              kf_select(k, kf_lit_f32(k, NEG_BIG), score[j], keep[j]));
        }
        kf_val m_new = kf_let(k, "m_new", m_tile);
        kf_val alpha =
            kf_let(k, "alpha", kf_call1(k, KF_FN_EXP, kf_sub(k, kf_read(k, m_run), m_new)));
        kf_assign(k, m_run, m_new);
        kf_if(k, kf_binary(k, KF_OP_LT, lx, kf__u32(k, bc)));
        {
            kf_val s = kf_lit_f32(k, 0);
            for (uint32_t h = 0; h < split; h++) {
                kf_val at3 = kf_add(k, row_at, kf_add(k, kf__u32(k, h * bc), pcol));
                s = kf_add(k, s, kf_shared_load(k, s_dot, at3));
            }
            s = kf_let(k, "s", kf_mul(k, s, kf_lit_f32(k, scale)));
            kf_val col = kf_add(k, c0, pcol);
            kf_val mine = kf_binary(k, KF_OP_LT, col, kf__u32(k, t));
            if (causal) {
                mine = kf_binary(k, KF_OP_AND, mine, kf_binary(k, KF_OP_LE, col, rowc));
            }
            kf_val pr = kf_call1(k, KF_FN_EXP, kf_sub(k, s, kf_read(k, m_run)));
            kf_val pslot = kf_add(k, kf_mul(k, ly, kf__u32(k, bc)), pcol);
            kf_shared_store(k, s_p, pslot, kf_select(k, kf_lit_f32(k, 0), pr, mine));
        }
        kf_end(k);
        kf_barrier(k);

        /* 4. accumulate the row's output columns over the tile */
        kf_val prow = kf_mul(k, ly, kf__u32(k, bc));
        kf_val ps[LANES];
        kf_val psum = kf_lit_f32(k, 0);
        for (uint32_t j = 0; j < bc; j++) {
            ps[j] = kf_shared_load(k, s_p, kf_add(k, prow, kf__u32(k, j)));
            psum = kf_add(k, psum, ps[j]);
        }
        kf_assign(k, l_run, kf_call3(k, KF_FN_FMA, kf_read(k, l_run), alpha, psum));
        for (uint32_t c = 0; c < (lse_mode == LSE_ONLY ? 0 : ncols); c++) {
            uint32_t colc = c * LANES;
            kf_val col = kf_call2(k, KF_FN_MIN, kf_add(k, lx, kf__u32(k, colc)), kf__u32(k, d - 1));
            kf_val sum = kf_lit_f32(k, 0);
            for (uint32_t j = 0; j < bc; j++) {
                kf_val x = kf_shared_load(k, sb, kf_add(k, kf__u32(k, j * stride), col));
                sum = kf_call3(k, KF_FN_FMA, ps[j], x, sum);
            }
            kf_val prev = kf_read(k, acc[c]);
            kf_assign(k, acc[c], kf_call3(k, KF_FN_FMA, prev, alpha, sum));
        }
        /* the next tile overwrites the tiles, the dots and P */
        kf_barrier(k);
    }
    kf_end(k);

    /* the results: row `row` of the output, D columns (prep: D + 2) */
    uint32_t out_cols = role == ROLE_PREP ? d + 2 : lse_mode == LSE_ONLY ? 1 : d;
    kf_val out_row = kf_mul(k, kf_add(k, head_row0, row), kf__u32(k, out_cols));
    kf_val inv_l = kf_let(k, "inv_l", kf_div(k, kf_lit_f32(k, 1), kf_read(k, l_run)));
    kf_val delta_part = kf_lit_f32(k, 0);
    kf_val yields[MAX_COL_REGS], inside[MAX_COL_REGS], cols[MAX_COL_REGS];
    for (uint32_t c = 0; c < ncols; c++) {
        kf_val v = kf_mul(k, kf_read(k, acc[c]), inv_l);
        cols[c] = kf_let(k, "ocol", kf_add(k, lx, kf__u32(k, c * LANES)));
        inside[c] =
            (c + 1) * LANES <= d ? (kf_val){0, 0} : kf_binary(k, KF_OP_LT, cols[c], kf__u32(k, d));
        if (role == ROLE_PREP) {
            /* prep yields dy in o's place, and o . dy feeds delta */
            kf_val colc = kf_call2(k, KF_FN_MIN, cols[c], kf__u32(k, d - 1));
            kf_val dyv = kf_let(k, "dyv",
                                operand_load(k, (attn_operand){b4, d, 0, layout_of(layouts, 3)},
                                             my_row, colc, dtype));
            kf_val term = kf_mul(k, v, dyv);
            if (inside[c].id) {
                term = kf_select(k, kf_lit_f32(k, 0), term, inside[c]);
            }
            delta_part = kf_add(k, delta_part, term);
            v = dyv;
        }
        yields[c] = kf_let(k, "result", v);
    }
    kf_val delta = {0, 0};
    if (role == ROLE_PREP) {
        /* the row's 16 lanes sum their parts of delta (the loop ended with a barrier) */
        kf_shared_store(k, s_dot, slot, delta_part);
        kf_barrier(k);
        kf_val sum = kf_lit_f32(k, 0);
        for (uint32_t i = 0; i < LANES; i++) {
            sum = kf_add(k, sum,
                         kf_shared_load(
                             k, s_dot, kf_add(k, kf_mul(k, ly, kf__u32(k, LANES)), kf__u32(k, i))));
        }
        delta = kf_let(k, "delta", sum);
    }
    kf_if(k, valid);
    if (lse_mode != LSE_NONE) {
        kf_if(k, kf_binary(k, KF_OP_EQ, lx, kf__u32(k, 0)));
        kf_val lse = kf_add(k, kf_read(k, m_run), kf_call1(k, KF_FN_LOG, kf_read(k, l_run)));
        if (lse_mode == LSE_SIDE) {
            kf__store_f32(k, blse, kf_add(k, head_row0, row), lse, KF_DTYPE_F32);
        } else {
            kf__yield_f32(k, lse, out_row, KF_DTYPE_F32);
        }
        kf_end(k);
    }
    for (uint32_t c = 0; c < (lse_mode == LSE_ONLY ? 0 : ncols); c++) {
        if (inside[c].id) {
            kf_if(k, inside[c]);
        }
        kf__yield_f32(k, yields[c], kf_add(k, out_row, cols[c]), out_dtype);
        if (inside[c].id) {
            kf_end(k);
        }
    }
    if (role == ROLE_PREP) {
        kf_if(k, kf_binary(k, KF_OP_EQ, lx, kf__u32(k, 0)));
        kf_val lse = kf_add(k, kf_read(k, m_run), kf_call1(k, KF_FN_LOG, kf_read(k, l_run)));
        kf__yield_f32(k, lse, kf_add(k, out_row, kf__u32(k, d)), out_dtype);
        kf__yield_f32(k, delta, kf_add(k, out_row, kf__u32(k, d + 1)), out_dtype);
        kf_end(k);
    }
    kf_end(k);
    return k;
}

static kf_kernel *attention_kernel(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {
    return attn_kernel(ROLE_OUT, in, p, dtype, LSE_NONE, NULL);
}
/* The forward's description for the other kernels (attention_sgmat.h). */
static kf__attn_desc attn_desc_of(const kf_shape *in, const kf_op_params *p, bool with_lse) {
    attn_dims a = dims_of(&in[0]);
    kf__attn_desc ad = {.bh = a.bh,
                        .t = a.t,
                        .d = a.d,
                        .causal = attn_causal(p),
                        .scale = (float)attn_scale(p, a.d),
                        .with_lse = with_lse};
    return ad;
}

/* Whether $KF_ATTN_LANES asks for this file's 16-lanes-a-row kernel in place of the register-tiled
 * one (for measuring the two on one device). */
static bool lanes_forced(void) {
    const char *e = getenv("KF_ATTN_LANES");
    return e && *e && strcmp(e, "0") != 0;
}

/* The device's workgroup memory in bytes (WebGPU's 16 KB without a context). */
static uint32_t workgroup_budget(kf_context *ctx) {
    kf_adapter_info info;
    if (ctx && kf_context_adapter_info(ctx, &info) == KF_OK &&
        info.max_compute_workgroup_storage_size >= 16384u) {
        return info.max_compute_workgroup_storage_size;
    }
    return 16384u;
}

/* The forward's kernel, with lse beside o or not: f16 on a device with subgroup matrices, the
 * subgroup-matrix kernel; else the register-tiled one (attention_tiled.c) from T 128. */
static kf_kernel *forward_choose(kf_context *ctx, const kf_shape *in, const kf_op_params *p,
                                 kf_dtype dtype, bool with_lse, const kf__strided *layouts) {
    kf__attn_desc ad = attn_desc_of(in, p, with_lse);
    kf_kernel *k = dtype == KF_DTYPE_F16 ? kf__attention_sgmat_for(ctx, &ad) : NULL;
    if (k && kf__strided_any(layouts, 3)) {
        /* it loads q, k and v row-major (into subgroup matrices): the planner copies the views */
        kf_kernel_destroy(k);
        return NULL;
    }
    ad.layouts = layouts;
    /* $KF_ATTN_TILED: the tiled kernel in that tiling at every T, where it fits */
    kf__attn_tiled_config forced;
    const char *env = getenv("KF_ATTN_TILED");
    if (!k && !lanes_forced() && env && kf__attention_tiled_config_parse(env, &forced)) {
        k = kf__attention_tiled_config(&ad, dtype, &forced, workgroup_budget(ctx));
    }
    /* the tiled kernel from 128 rows: below, the 16-lanes kernel is as fast and its pipeline
     * compiles several times faster on lavapipe (2.5 s against 9 at D 128, 22 at D 16), which
     * the verification tables' small shapes would pay in every CI run */
    if (!k && !lanes_forced() && ad.t >= 128) {
        k = kf__attention_tiled_config(&ad, dtype, &kf__attn_tiled_wide, workgroup_budget(ctx));
    }
    if (!k && !lanes_forced() && ad.t >= 128) {
        k = kf__attention_tiled(&ad, dtype);
    }
    return k ? k : attn_kernel(ROLE_OUT, in, p, dtype, with_lse ? LSE_SIDE : LSE_NONE, layouts);
}

static kf_kernel *attention_choose(kf_context *ctx, const kf_shape *in, const kf_op_params *p,
                                   kf_dtype dtype) {
    return forward_choose(ctx, in, p, dtype, false, NULL);
}

/* attention's kernel with lse beside o (kernel_with_companion), chosen as attention_choose
 * chooses. */
static kf_kernel *attention_with_lse(kf_context *ctx, const kf_shape *in, const kf_op_params *p,
                                     kf_dtype dtype) {
    return forward_choose(ctx, in, p, dtype, true, NULL);
}

/* attention's kernel_strided: q, k and v read in place through views (the FMA kernels). */
static kf_kernel *attention_strided(kf_context *ctx, const kf_shape *in, const kf_op_params *p,
                                    kf_dtype dtype, const kf__strided *layouts,
                                    bool with_companion) {
    return forward_choose(ctx, in, p, dtype, with_companion, layouts);
}

static kf_kernel *lse_strided(kf_context *ctx, const kf_shape *in, const kf_op_params *p,
                              kf_dtype dtype, const kf__strided *layouts, bool with_companion) {
    (void)ctx, (void)with_companion;
    return attn_kernel(ROLE_OUT, in, p, dtype, LSE_ONLY, layouts);
}

static kf_kernel *lse_kernel(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {
    return attn_kernel(ROLE_OUT, in, p, dtype, LSE_ONLY, NULL);
}

/* g = [dy | lse | dy . o], a row per 32 invocations: each copies dy's columns lx, lx + 32, ...
 * and sums its part of dy . o; the row's first sums the 32 parts (in a fixed order). */
#define PACK_ROWS 8u
#define PACK_LANES 32u
static kf_kernel *pack_kernel(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {
    (void)p;
    attn_dims a = dims_of(&in[0]);
    const uint32_t d = a.d, rows = a.bh * a.t;
    kf_kernel_desc desc = {.name = "attention_grad_pack",
                           .workgroup_size = {PACK_LANES, PACK_ROWS, 1},
                           .output = kf__dtype_type(KF_DTYPE_F32)}; /* g is f32 */
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    uint32_t groups[3];
    kf__grid_1d((uint64_t)(rows + PACK_ROWS - 1) / PACK_ROWS, 1, groups);
    kf_kernel_set_grid(k, groups);
    kf_binding bdy = kf__bind(k, "dy", dtype, KF_ACCESS_READ);
    kf_binding bo = kf__bind(k, "o", dtype, KF_ACCESS_READ);
    kf_binding blse = kf__bind(k, "lse", KF_DTYPE_F32, KF_ACCESS_READ);
    kf_shared parts =
        kf_kernel_workgroup(k, "parts", kf_type_scalar(KF_SCALAR_F32), PACK_ROWS * PACK_LANES);
    kf_val local = kf_builtin_get(k, KF_BUILTIN_LOCAL_ID);
    kf_val lx = kf_let(k, "lx", kf_extract(k, local, 0));
    kf_val ly = kf_let(k, "ly", kf_extract(k, local, 1));
    kf_val row =
        kf_let(k, "row", kf_add(k, kf_mul(k, kf_workgroup_linear(k), kf__u32(k, PACK_ROWS)), ly));
    kf_val valid = kf_let(k, "valid", kf_binary(k, KF_OP_LT, row, kf__u32(k, rows)));
    kf_val rowc = kf_let(k, "rowc", kf_call2(k, KF_FN_MIN, row, kf__u32(k, rows - 1)));
    kf_val out_row = kf_let(k, "out_row", kf_mul(k, row, kf__u32(k, d + 2)));
    kf_var part = kf_declare(k, "part", kf_type_scalar(KF_SCALAR_F32), kf_lit_f32(k, 0));
    kf_val c = kf_for(k, "c", lx, kf__u32(k, d), kf__u32(k, PACK_LANES));
    {
        kf_val at = kf_add(k, kf_mul(k, rowc, kf__u32(k, d)), c);
        kf_val dyv = kf_let(k, "dyv", kf__load_f32(k, bdy, at, dtype));
        kf_assign(k, part,
                  kf_call3(k, KF_FN_FMA, dyv, kf__load_f32(k, bo, at, dtype), kf_read(k, part)));
        kf_if(k, valid);
        kf__yield_f32(k, dyv, kf_add(k, out_row, c), KF_DTYPE_F32);
        kf_end(k);
    }
    kf_end(k);
    kf_shared_store(k, parts, kf_add(k, kf_mul(k, ly, kf__u32(k, PACK_LANES)), lx),
                    kf_read(k, part));
    kf_barrier(k);
    kf_if(k, kf_binary(k, KF_OP_AND, valid, kf_binary(k, KF_OP_EQ, lx, kf__u32(k, 0))));
    kf_val first = kf_let(k, "first", kf_mul(k, ly, kf__u32(k, PACK_LANES)));
    kf_val sum = kf_lit_f32(k, 0);
    for (uint32_t i = 0; i < PACK_LANES; i++) {
        sum = kf_add(k, sum, kf_shared_load(k, parts, i ? kf_add(k, first, kf__u32(k, i)) : first));
    }
    kf_val delta = kf_let(k, "delta", sum);
    kf__yield_f32(k, kf__load_f32(k, blse, rowc, KF_DTYPE_F32), kf_add(k, out_row, kf__u32(k, d)),
                  KF_DTYPE_F32);
    kf__yield_f32(k, delta, kf_add(k, out_row, kf__u32(k, d + 1)), KF_DTYPE_F32);
    kf_end(k);
    return k;
}

static kf_kernel *prep_kernel(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {
    return attn_kernel(ROLE_PREP, in, p, dtype, LSE_NONE, NULL);
}

static void attn_grid(const kf_shape *in, const kf_op_params *p, int32_t which,
                      uint32_t groups[3]) {
    (void)p, (void)which;
    attn_dims a = dims_of(&in[0]);
    groups[0] = (a.t + ROWS - 1) / ROWS * a.bh;
    groups[1] = 1;
    groups[2] = 1;
}

/* ---------------------------------------------------------------------------------------- */
/* Verification tables and operator records                                                 */
/* ---------------------------------------------------------------------------------------- */

#define NONCAUSAL                                                                                  \
    { .causal = false, .given = KF_PARAM_CAUSAL }
#define QKV(...) SHAPE4(__VA_ARGS__), SHAPE4(__VA_ARGS__), SHAPE4(__VA_ARGS__)

/* T of 1, 7 (one ragged tile), 64 (whole tiles) and 100 (a ragged last tile past several); D of
 * 8 (fewer columns than lanes), 64, 128 (8-column tiles, two lanes per dot product), 7 and 97
 * (ragged output columns; 97: a ragged dot-product split); causal and not; a given scale; rank 3;
 * and 2^22 elements (512 heads of 64 x 128). */
static const kf_op_case attn_cases[] = {
    {.shapes = {QKV(1, 1, 1, 8)}, .note = "T 1"},
    {.shapes = {QKV(1, 2, 7, 8)}, .note = "T 7, D 8"},
    {.shapes = {QKV(1, 2, 7, 8)}, .params = NONCAUSAL, .note = "T 7, not causal"},
    {.shapes = {QKV(2, 1, 64, 64)}, .note = "T 64, D 64"},
    {.shapes = {QKV(1, 2, 100, 8)}, .note = "T 100, D 8"},
    {.shapes = {QKV(1, 1, 100, 64)}, .params = NONCAUSAL, .note = "T 100, D 64, not causal"},
    {.shapes = {QKV(1, 1, 37, 128)}, .note = "D 128"},
    {.shapes = {QKV(1, 1, 23, 97)}, .params = {.alpha = 0.3f}, .note = "D 97, scale 0.3"},
    {.shapes = {SHAPE3(3, 19, 7), SHAPE3(3, 19, 7), SHAPE3(3, 19, 7)}, .note = "rank 3, D 7"},
    {.shapes = {QKV(1, 2, 150, 40)}, .note = "T 150, D 40: the register-tiled kernel"},
    {.shapes = {QKV(32, 16, 64, 128)}, .note = "large: 2^22 elements"},
};

#define PREP(B, H, T, D) QKV(B, H, T, D), SHAPE4(B, H, T, D)
static const kf_op_case prep_cases[] = {
    {.shapes = {PREP(1, 1, 1, 8)}, .note = "T 1"},
    {.shapes = {PREP(1, 2, 7, 8)}, .params = NONCAUSAL, .note = "T 7, not causal"},
    {.shapes = {PREP(2, 1, 64, 64)}, .note = "T 64, D 64"},
    {.shapes = {PREP(1, 2, 100, 8)}, .note = "T 100, D 8"},
    {.shapes = {PREP(1, 1, 37, 128)}, .note = "D 128"},
    {.shapes = {PREP(1, 1, 23, 97)}, .params = {.alpha = 0.3f}, .note = "D 97, scale 0.3"},
    {.shapes = {PREP(32, 16, 64, 128)}, .note = "large: 2^22 elements"},
};

#define CASES(table) .cases = table, .case_count = sizeof table / sizeof table[0]

/* Tolerances (relative to max(|spec|, 1% of the spec's rms), docs/operators.md): scores are f32
 * dot products of D terms, exp is the GPU's (3 + 2|x| ulp), the running max rescales partial
 * sums, and the outputs are f32 sums over up to T keys of terms of mixed sign; the gradients add
 * dP - delta, which cancels down to the gradient's size, and sums over up to T rows. Measured on
 * lavapipe over the tables (2^22 elements included): forward and prep 7.8e-5 (2e-4 allowed), dq
 * 1.8e-4, dk 1.1e-4, dv 6.3e-5 (5e-4). f16: the inputs are the spec's too and compute is f32, so
 * the output's rounding and a one-ulp flip remain (measured 9.8e-4): 2e-3 as for every op. */
const kf_operator kf__op_attention = {
    .name = "attention",
    .about = "softmax(q k^T * scale + causal mask) v over [..., T, D], one kernel, no T x T scores",
    .op_class = KF_OP_CLASS_ROW_REDUCTION,
    .arity = 3,
    KF__INPUTS(attn_inputs),
    KF__PARAMS(kf__attn_params),
    .shape = attention_shape,
    .spec_forward = attention_spec_forward,
    .spec_backward = attention_spec_backward,
    .kernel_forward = attention_kernel,
    .kernel_choose = attention_choose,
    .companion = &kf__op_attention_lse,
    .kernel_with_companion = attention_with_lse,
    .kernel_strided = attention_strided,
    .strided_inputs = 7u, /* q, k, v */
    .tolerance_f32 = 2e-4,
    .tolerance_f16 = 2e-3,
    .input_lo = -1.0f,
    .input_hi = 1.0f,
    .grid = attn_grid,
    CASES(attn_cases),
};

/* T 1, a ragged tile, whole tiles, a ragged last tile past several; D 8, 128 and 97; causal and
 * not; a given scale; rank 3; 2^22 input elements. */
static const kf_op_case lse_cases[] = {
    {.shapes = {QKV(1, 1, 1, 8)}, .note = "T 1"},
    {.shapes = {QKV(1, 2, 7, 8)}, .params = NONCAUSAL, .note = "T 7, not causal"},
    {.shapes = {QKV(2, 1, 64, 64)}, .note = "T 64, D 64"},
    {.shapes = {QKV(1, 2, 100, 8)}, .note = "T 100, D 8"},
    {.shapes = {QKV(1, 1, 37, 128)}, .note = "D 128"},
    {.shapes = {QKV(1, 1, 23, 97)}, .params = {.alpha = 0.3f}, .note = "D 97, scale 0.3"},
    {.shapes = {SHAPE3(3, 19, 7), SHAPE3(3, 19, 7), SHAPE3(3, 19, 7)}, .note = "rank 3, D 7"},
    {.shapes = {QKV(32, 16, 64, 128)}, .note = "large: 2^22 elements"},
};

#define PACKIN(B, H, T, D) SHAPE4(B, H, T, D), SHAPE4(B, H, T, D), SHAPE4(B, H, T, 1)
/* one row; D below, at and above the 32 lanes (8, 64, 97: ragged, 128); 7 heads of 100 rows
 * (8-row workgroups, a ragged last one); rank 3; 2^22 elements */
static const kf_op_case pack_cases[] = {
    {.shapes = {PACKIN(1, 1, 1, 8)}, .note = "one row"},
    {.shapes = {PACKIN(1, 7, 100, 8)}, .note = "700 rows, D 8"},
    {.shapes = {PACKIN(2, 1, 64, 64)}, .note = "D 64"},
    {.shapes = {PACKIN(1, 1, 23, 97)}, .note = "D 97"},
    {.shapes = {PACKIN(1, 1, 37, 128)}, .note = "D 128"},
    {.shapes = {SHAPE3(3, 19, 7), SHAPE3(3, 19, 7), SHAPE3(3, 19, 1)}, .note = "rank 3, D 7"},
    {.shapes = {PACKIN(32, 16, 64, 128)}, .note = "large: 2^22 elements"},
};

const kf_operator kf__op_attention_grad_prep = {
    .name = "attention_grad_prep",
    .about = "attention's backward statistics: [dy | lse | dy . o] over [..., T, D + 2]",
    .op_class = KF_OP_CLASS_ROW_REDUCTION,
    .arity = 4,
    KF__INPUTS(prep_inputs),
    KF__PARAMS(kf__attn_params),
    .shape = prep_shape,
    .spec_forward = prep_spec,
    .f32_output = true,
    .kernel_forward = prep_kernel,
    .tolerance_f32 = 2e-4,
    .tolerance_f16 = 2e-3,
    .input_lo = -1.0f,
    .input_hi = 1.0f,
    .grid = attn_grid,
    CASES(prep_cases),
};

static const kf__input pack_inputs[] = {{.name = "dy"}, {.name = "o"}, {.name = "lse"}};

static void pack_grid(const kf_shape *in, const kf_op_params *p, int32_t which,
                      uint32_t groups[3]) {
    (void)p, (void)which;
    attn_dims a = dims_of(&in[0]);
    kf__grid_1d(((uint64_t)a.bh * a.t + PACK_ROWS - 1) / PACK_ROWS, 1, groups);
}

/* The forward's row statistics on their own: a forward pass without P V (the planner makes it a
 * second output of attention's kernel where the graph has both: src/fuse/rules/companion.c).
 * Tolerances as attention's. */
const kf_operator kf__op_attention_lse = {
    .name = "attention_lse",
    .about = "attention's row statistics lse_i = log sum_j exp(s_ij) over [..., T, 1]",
    .op_class = KF_OP_CLASS_ROW_REDUCTION,
    .arity = 3,
    KF__INPUTS(attn_inputs),
    KF__PARAMS(kf__attn_params),
    .shape = lse_shape,
    .spec_forward = lse_spec,
    .f32_output = true,
    .kernel_forward = lse_kernel,
    .kernel_strided = lse_strided,
    .strided_inputs = 7u,
    .tolerance_f32 = 2e-4,
    .tolerance_f16 = 2e-3,
    .input_lo = -1.0f,
    .input_hi = 1.0f,
    .grid = attn_grid,
    CASES(lse_cases),
};

/* g from the forward's o and lse: what autodiff feeds attention_grad_q / _k / _v (the same g as
 * attention_grad_prep's, without its forward pass). delta is an f32 sum of D products: 2e-4
 * (f32) as the other row reductions. */
const kf_operator kf__op_attention_grad_pack = {
    .name = "attention_grad_pack",
    .about = "attention's backward statistics from the forward's: [dy | lse | dy . o]",
    .op_class = KF_OP_CLASS_ROW_REDUCTION,
    .arity = 3,
    KF__INPUTS(pack_inputs),
    .shape = pack_shape,
    .spec_forward = pack_spec,
    .f32_inputs = 1u << 2, /* lse */
    .f32_output = true,
    .kernel_forward = pack_kernel,
    .tolerance_f32 = 2e-4,
    .tolerance_f16 = 2e-3,
    .input_lo = -1.0f,
    .input_hi = 1.0f,
    .grid = pack_grid,
    CASES(pack_cases),
};

/* ---------------------------------------------------------------------------------------- */
/* Shared with attention_grad.c (attention.h)                                               */
/* ---------------------------------------------------------------------------------------- */

bool kf__attn_causal(const kf_op_params *p) {
    return attn_causal(p);
}

double kf__attn_scale(const kf_op_params *p, uint32_t d) {
    return attn_scale(p, d);
}

kf__attn_dims kf__attn_dims_of(const kf_shape *q) {
    attn_dims a = dims_of(q);
    return (kf__attn_dims){a.bh, a.t, a.d};
}

kf_status kf__attn_qkv_check(const char *name, const kf_shape *in, char *msg, size_t msg_size) {
    return qkv_check(name, in, msg, msg_size);
}

kf_shape kf__attn_packed_shape(const kf_shape *q) {
    return packed_shape(q);
}

double kf__attn_spec_row(const float *q, const float *k, kf__attn_dims a, double scale, bool causal,
                         uint32_t i, double *p) {
    return spec_row(q, k, (attn_dims){a.bh, a.t, a.d}, scale, causal, i, p);
}

void kf__attn_grid(const kf_shape *in, const kf_op_params *p, int32_t which, uint32_t groups[3]) {
    attn_grid(in, p, which, groups);
}
