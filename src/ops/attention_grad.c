/* Attention's gradients from the packed statistics g = [dy | lse | delta]
 * (attention_grad_prep's output; src/ops/attention.c's header has the formulas):
 *
 *   attention_grad_q(q, k, v, g)  -> dq
 *   attention_grad_k(q, k, v, g)  -> dk   (with attention_grad_v as its companion: both)
 *   attention_grad_v(q, k, v, g)  -> dv
 *   attention_grad_stats(q, k, v, g) -> g' (g with each row's exact lse and delta; dq's
 *                                        kernel writes it on the way: its companion)
 *
 * g and g' are f32 whatever q, k and v are (attention.c's header says why).
 * One generator, FlashAttention-2's backward on FMA units with register tiles. A workgroup owns
 * br rows of one (batch, head): queries for dq, keys for dk and dv. It stages its rows' two
 * operands once (q and dy, or k and v) and walks the other side bc columns at a time (k and v,
 * or q and dy with their lse and delta), all as vec4 rows in workgroup memory, padded by one
 * vec4 so rows read at one offset fall in different banks:
 *   1. every invocation owns rr rows x rc columns of the tile's scores: rr + rc vec4 loads give
 *      rr rc dot products of 4 terms (twice: s = row . col, and dP with the second operands);
 *   2. it turns them into P = exp(scale s - lse) and dS = P (dP - delta), zero where the query
 *      does not see the key, into workgroup memory, transposed: a column's values for the
 *      invocation's rr rows side by side (one vec4 when rr is 4);
 *   3. it accumulates its rows' results over the tile's columns, vec4 columns tx, tx + wx, ...:
 *      dk += dS q and dv += P dy (or dq's two sums), a scalar P or dS times a vec4 of the tile;
 *      per column one load of P (and of dS) for its rr rows, and each vec4 of the tile loaded
 *      feeds rr FMAs.
 * The tiling (rr, rc, wx, wy) is the first of a short list whose workgroup memory fits the
 * device's (kernel_choose; kernel_forward assumes WebGPU's 16 KB): on lavapipe (32 KB) 32 x 16
 * for D <= 64 and 16 x 8 for D <= 128; with 48 KB 32 x 32 (128 invocations: on the H200 1.5-1.75x
 * the 64-invocation 32 x 32 tiling) and 32 x 8; for measuring, $KF_ATTN_GRAD_TILES (or _Q, _KV for
 * dq's or dk's kernels alone) picks another and $KF_ATTN_GRAD_LAYOUT the layout (GRAD_LAYOUT_*). dk
 * and dv need the same P, so attention_grad_k's kernel_with_companion computes both
 * (FlashAttention-2 does the same), and the planner pairs the two operators when they read the same
 * inputs (src/fuse/rules/companion.c): one pass over the scores instead of two. Causal column tiles
 * a workgroup's rows cannot see are never visited; the loop bounds depend only on the workgroup, so
 * the barriers stay in uniform control flow. Rows past T are computed from row T - 1 and not
 * written. Accumulation is in f32 for f16 tensors too. For f16 on a device with subgroup matrices,
 * every role runs on them instead where T and D are multiples of 16 (attention_grad_sgmat.c: dk
 * and dv since session 13, dq and g' since session 14; $KF_ATTN_GRAD_SGMAT=0 keeps this kernel
 * for all, $KF_ATTN_GRAD_Q_SGMAT=0 for dq's side). They read q, k and v row-major, so
 * grad_kernel_strided refuses views there and the planner copies them. */
#include "ops/attention.h"
#include "ops/attention_sgmat.h"
#include "ops/ops_internal.h"
#include "ops/rowwise.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const kf__input grad_inputs[] = {{.name = "q"}, {.name = "k"}, {.name = "v"}, {.name = "g"}};

/* ---------------------------------------------------------------------------------------- */
/* Shapes and specifications                                                                */
/* ---------------------------------------------------------------------------------------- */

static kf_status grad_shape(const char *name, uint32_t which, const kf_shape *in, kf_shape *out,
                            char *msg, size_t msg_size) {
    char a[64], b[64];
    kf_status st = kf__attn_qkv_check(name, in, msg, msg_size);
    kf_shape want = st == KF_OK ? kf__attn_packed_shape(&in[0]) : in[0];
    if (st == KF_OK && !kf_shape_eq(&in[3], &want)) {
        return kf__shape_error(msg, msg_size,
                               "%s: g must be %s (attention_grad_prep's output), got %s", name,
                               kf_shape_str(&want, a, sizeof a), kf_shape_str(&in[3], b, sizeof b));
    }
    if (st == KF_OK) {
        *out = in[which];
    }
    return st;
}

/* The keys query i sees: 0..last(i). */
static uint32_t last_key(uint32_t i, uint32_t t, bool causal) {
    return causal ? i : t - 1;
}

/* One head's backward: do_i at dout + i * dout_stride; lse_i and delta_i at stats + i *
 * dout_stride (+ 1), or recomputed from q, k, v and do when stats is NULL; into the float64
 * accumulators dq, dk, dv (those not NULL), which the caller zeroes. */
typedef struct spec_grad {
    const float *q, *k, *v;
    const float *dout; /* do rows, `dout_stride` apart */
    uint32_t dout_stride;
    const float *stats;
    double *dq, *dk, *dv;
} spec_grad;

static void spec_head_backward(const spec_grad *s, kf__attn_dims a, double scale, bool causal,
                               double *p, double *dp) {
    for (uint32_t i = 0; i < a.t; i++) {
        uint32_t last = last_key(i, a.t, causal);
        const float *dout = s->dout + (uint64_t)i * s->dout_stride;
        if (s->stats) {
            /* P from the given lse, exp(s - lse), not normalised again; delta as given */
            double lse = s->stats[(uint64_t)i * s->dout_stride];
            for (uint32_t j = 0; j < a.t; j++) {
                double sc = 0;
                for (uint32_t d = 0; j <= last && d < a.d; d++) {
                    sc += (double)s->q[(uint64_t)i * a.d + d] * s->k[(uint64_t)j * a.d + d];
                }
                p[j] = j <= last ? exp(sc * scale - lse) : 0.0;
            }
        } else {
            kf__attn_spec_row(s->q, s->k, a, scale, causal, i, p);
        }
        double delta = 0;
        for (uint32_t j = 0; j <= last; j++) {
            dp[j] = 0;
            for (uint32_t d = 0; d < a.d; d++) {
                dp[j] += (double)dout[d] * s->v[(uint64_t)j * a.d + d];
            }
            delta += p[j] * dp[j];
        }
        if (s->stats) {
            delta = s->stats[(uint64_t)i * s->dout_stride + 1];
        }
        for (uint32_t j = 0; j <= last; j++) {
            double ds = p[j] * (dp[j] - delta);
            for (uint32_t d = 0; d < a.d; d++) {
                if (s->dq) {
                    s->dq[(uint64_t)i * a.d + d] += scale * ds * s->k[(uint64_t)j * a.d + d];
                }
                if (s->dk) {
                    s->dk[(uint64_t)j * a.d + d] += scale * ds * s->q[(uint64_t)i * a.d + d];
                }
                if (s->dv) {
                    s->dv[(uint64_t)j * a.d + d] += p[j] * dout[d];
                }
            }
        }
    }
}

kf_status kf__attn_spec_backward(const kf_tensor *const *in, const kf_tensor *dy,
                                 const kf_tensor *g, bool own_stats, const kf_op_params *p,
                                 kf_tensor *const *grads) {
    kf__attn_dims a = kf__attn_dims_of(&in[0]->shape);
    uint64_t head_elems = (uint64_t)a.t * a.d;
    double *acc[3] = {0};
    double *prob = malloc(a.t * sizeof *prob), *dp = malloc(a.t * sizeof *dp);
    kf_status st = prob && dp ? KF_OK : KF_ERROR_OUT_OF_MEMORY;
    for (int w = 0; w < 3 && st == KF_OK; w++) {
        if (grads[w]) {
            acc[w] = malloc(head_elems * sizeof *acc[w]);
            st = acc[w] ? KF_OK : KF_ERROR_OUT_OF_MEMORY;
        }
    }
    double scale = kf__attn_scale(p, a.d);
    for (uint32_t h = 0; h < a.bh && st == KF_OK; h++) {
        uint64_t head = (uint64_t)h * head_elems;
        for (int w = 0; w < 3; w++) {
            if (acc[w]) {
                memset(acc[w], 0, head_elems * sizeof *acc[w]);
            }
        }
        spec_grad s = {.q = in[0]->data + head,
                       .k = in[1]->data + head,
                       .v = in[2]->data + head,
                       .dq = acc[0],
                       .dk = acc[1],
                       .dv = acc[2]};
        if (g) {
            uint64_t ghead = (uint64_t)h * a.t * (a.d + 2);
            s.dout = g->data + ghead;
            s.dout_stride = a.d + 2;
            s.stats = own_stats ? NULL : g->data + ghead + a.d;
        } else {
            s.dout = dy->data + head;
            s.dout_stride = a.d;
        }
        spec_head_backward(&s, a, scale, kf__attn_causal(p), prob, dp);
        for (int w = 0; w < 3; w++) {
            for (uint64_t e = 0; acc[w] && e < head_elems; e++) {
                grads[w]->data[head + e] = (float)acc[w][e];
            }
        }
    }
    for (int w = 0; w < 3; w++) {
        free(acc[w]);
    }
    free(prob);
    free(dp);
    return st;
}
/* dq (WHICH 0) normalises P itself and sums its own delta (attn_kernel says why): its spec is the
 * exact gradient from g's dy alone; dk and dv use g's lse and delta as given. */
#define GRAD_SPEC(NAME, WHICH)                                                                     \
    static kf_status NAME##_spec(const kf_tensor *const *in, const kf_op_params *p,                \
                                 kf_tensor *out) {                                                 \
        kf_status st = kf__spec_check_out(&kf__op_##NAME, in, p, out);                             \
        if (st != KF_OK) {                                                                         \
            return st;                                                                             \
        }                                                                                          \
        kf_tensor *grads[3] = {0};                                                                 \
        grads[WHICH] = out;                                                                        \
        return kf__attn_spec_backward(in, NULL, in[3], WHICH == 0, p, grads);                      \
    }

GRAD_SPEC(attention_grad_q, 0)

/* g' = [dy | lse | delta] with lse and delta exact, from q, k, v and g's dy alone (g's lse and
 * delta are not read): attention_grad_prep's g for the dy that g holds. */
static kf_status attention_grad_stats_spec(const kf_tensor *const *in, const kf_op_params *p,
                                           kf_tensor *out) {
    kf_status st = kf__spec_check_out(&kf__op_attention_grad_stats, in, p, out);
    if (st != KF_OK) {
        return st;
    }
    kf__attn_dims a = kf__attn_dims_of(&in[0]->shape);
    double scale = kf__attn_scale(p, a.d);
    bool causal = kf__attn_causal(p);
    double *prob = malloc(a.t * sizeof *prob);
    if (!prob) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    for (uint32_t h = 0; h < a.bh; h++) {
        uint64_t head = (uint64_t)h * a.t * a.d, ghead = (uint64_t)h * a.t * (a.d + 2);
        const float *q = in[0]->data + head, *k = in[1]->data + head, *v = in[2]->data + head;
        for (uint32_t i = 0; i < a.t; i++) {
            const float *dy = in[3]->data + ghead + (uint64_t)i * (a.d + 2);
            float *row = out->data + ghead + (uint64_t)i * (a.d + 2);
            double lse = kf__attn_spec_row(q, k, a, scale, causal, i, prob), delta = 0;
            for (uint32_t j = 0; j <= last_key(i, a.t, causal); j++) {
                double dp = 0;
                for (uint32_t d = 0; d < a.d; d++) {
                    dp += (double)dy[d] * v[(uint64_t)j * a.d + d];
                }
                delta += prob[j] * dp;
            }
            memcpy(row, dy, a.d * sizeof *row);
            row[a.d] = (float)lse;
            row[a.d + 1] = (float)delta;
        }
    }
    free(prob);
    return KF_OK;
}
GRAD_SPEC(attention_grad_k, 1)
GRAD_SPEC(attention_grad_v, 2)

/* ---------------------------------------------------------------------------------------- */
/* The kernels                                                                              */
/* ---------------------------------------------------------------------------------------- */

/* A tiling: each invocation owns rr rows and, in the score phase, rc columns; wx * wy
 * invocations; a workgroup owns br = rr wy rows and walks the other side bc = rc wx columns at a
 * time. layout: GRAD_LAYOUT_* bits. */
typedef struct grad_tiles {
    uint32_t rr, rc, wx, wy, layout;
    bool named; /* from the environment: the kernel's name says the tiling */
} grad_tiles;

/* How an invocation's columns and P's slots lie in workgroup memory:
 *   INTERLEAVE  its rc columns of a tile are tx, tx + wx, ... (else rc tx .. rc tx + rc - 1,
 *               whose rows, rc sr vec4 apart, fall in fewer banks when rc > 1)
 *   PAD_P       P's and dS's column j at j (wy + 1) + ty (else j wy + ty: every tx of a row's
 *               store in one bank) */
enum { GRAD_LAYOUT_INTERLEAVE = 1u, GRAD_LAYOUT_PAD_P = 2u, GRAD_LAYOUT_ALL = 3u };

/* Preferred first: 4 rows an invocation where the memory allows (P and dS are read back as one
 * vec4 of the 4 rows, and each tile value loaded feeds 4 rows' FMAs), interleaved columns and
 * padded P slots (GRAD_LAYOUT_ALL: on the H200 in session 9, 2.16 ms against 2.49 for the
 * unpadded 32 x 32 at B 4, H 16, T 1024, D 64; bench/results/s9/). */
static const grad_tiles tile_choices[] = {
    {4, 2, 16, 8, GRAD_LAYOUT_ALL,
     false}, /* 32 x 32, 128 invocations (on the H200 1.5-1.75x faster than 4,4,8,8) */
    {4, 2, 8, 8, GRAD_LAYOUT_ALL, false}, /* 32 x 16 */
    {4, 1, 8, 8, GRAD_LAYOUT_ALL, false}, /* 32 x 8 */
    {4, 1, 8, 4, GRAD_LAYOUT_ALL, false}, /* 16 x 8, 32 invocations */
    {1, 1, 4, 8, GRAD_LAYOUT_ALL, false}, /* 8 x 4 */
    {1, 1, 2, 4, GRAD_LAYOUT_ALL, false}, /* 4 x 2 */
};

/* Where the preferred tiling leaves fewer workgroups than this, 16 x 16 tiles of 2 x 2 an
 * invocation (64 invocations) take the work: twice the workgroups, each with half the rows. On the
 * H200 (session 9) at the character GPT's shape (B 64, H 4, T 64, D 32: 512 workgroups of 32
 * rows) 0.0524 ms against 0.0666 for the 32 x 32 tiles; at the block's (2048 of them) the 32 x 32
 * tiles stay ahead. */
#define MAX_RC 4u
#define MAX_M 16u /* vec4 columns an invocation owns: 32 / wx, wx >= 2 */
#define FEW_WORKGROUPS 1024u
static const grad_tiles small_work = {2, 2, 8, 8, GRAD_LAYOUT_ALL, false};

/* vec4 columns of a staged row (D rounded up to 4); rows are staged one vec4 apart more, so rows
 * read at one offset fall in different banks. */
static uint32_t vec_cols(uint32_t d) {
    return (d + 3) / 4;
}

/* P's and dS's slots per column: wy, one more with GRAD_LAYOUT_PAD_P. */
static uint32_t p_stride(const grad_tiles *c) {
    return c->wy + (c->layout & GRAD_LAYOUT_PAD_P ? 1u : 0u);
}

static uint64_t tiles_bytes(const grad_tiles *c, uint32_t d) {
    uint64_t sr = vec_cols(d) + 1, br = c->rr * c->wy, bc = c->rc * c->wx;
    return 16u * (2u * br * sr + 2u * bc * sr) + 4u * (2u * c->rr * p_stride(c) * bc + 2u * bc);
}

/* A tiling from text "rr,rc,wx,wy[,layout]" (layout: `layout` where not given), for measuring
 * other tilings on one device: used where it parses, fits `budget` and the kernel's limits (rr
 * 1, 2 or 4; rc up to MAX_RC; at most MAX_M vec4 columns an invocation). */
static bool tiles_parse(const char *text, uint32_t d, uint32_t budget, uint32_t layout,
                        grad_tiles *out);

/* The tiling of dq's kernels (dq_side) or dk's and dv's over bh heads of t rows:
 * $KF_ATTN_GRAD_TILES_Q or _KV, else $KF_ATTN_GRAD_TILES, where one parses and fits; else the
 * first of tile_choices whose workgroup memory fits `budget` bytes, or small_work where that one
 * leaves fewer than FEW_WORKGROUPS workgroups. $KF_ATTN_GRAD_LAYOUT (bits) replaces the layout
 * where it fits. */
static grad_tiles tiles_for(uint32_t d, uint32_t t, uint32_t bh, uint32_t budget, bool dq_side) {
    grad_tiles c;
    const char *env_layout = getenv("KF_ATTN_GRAD_LAYOUT");
    unsigned forced_layout = 0;
    bool has_layout = env_layout && sscanf(env_layout, "%u", &forced_layout) == 1 &&
                      forced_layout <= GRAD_LAYOUT_ALL;
    size_t n = sizeof tile_choices / sizeof tile_choices[0], i = 0;
    while (i + 1 < n && tiles_bytes(&tile_choices[i], d) > budget) {
        i++;
    }
    c = tile_choices[i];
    const uint64_t br = c.rr * c.wy;
    if ((t + br - 1) / br * (uint64_t)bh < FEW_WORKGROUPS &&
        tiles_bytes(&small_work, d) <= budget &&
        (vec_cols(d) + small_work.wx - 1) / small_work.wx <= MAX_M) {
        c = small_work;
    }
    uint32_t layout = has_layout ? forced_layout : c.layout;
    if (tiles_parse(getenv(dq_side ? "KF_ATTN_GRAD_TILES_Q" : "KF_ATTN_GRAD_TILES_KV"), d, budget,
                    layout, &c) ||
        tiles_parse(getenv("KF_ATTN_GRAD_TILES"), d, budget, layout, &c)) {
        return c;
    }
    grad_tiles with = c;
    with.layout = layout;
    with.named = has_layout;
    return tiles_bytes(&with, d) <= budget ? with : c;
}

#define PORTABLE_BUDGET 16384u /* workgroup memory every WebGPU device offers */

/* What a kernel computes: dq, dk, dv, the pair (dk yielded, dv stored into the binding "dv"
 * declared after the inputs), g' (attention_grad_stats), or dq with g' stored into the binding
 * "stats" declared after the inputs. */
typedef enum grad_role {
    ROLE_DQ = 0,
    ROLE_DK,
    ROLE_DV,
    ROLE_DKV,
    ROLE_STATS,
    ROLE_DQ_STATS
} grad_role;

/* A row-major operand read through its binding (stored as dtype): element (row, d) at
 * row * stride + offset + d, row counted over all heads (head * T + row); or, with a layout (a
 * strided view read in place: kf_operator.kernel_strided), where the layout puts it. */
typedef struct attn_operand {
    kf_binding b;
    uint32_t stride, offset;
    kf_dtype dtype;
    const kf__strided *layout; /* NULL: row-major */
} attn_operand;

static kf_val operand_load(kf_kernel *k, attn_operand o, kf_val row, kf_val d) {
    if (o.layout) {
        return kf__load_f32(k, o.b, kf__strided_at(k, o.layout, row, d), o.dtype);
    }
    kf_val at = kf_add(k, kf_mul(k, row, kf__u32(k, o.stride)), d);
    if (o.offset) {
        at = kf_add(k, at, kf__u32(k, o.offset));
    }
    return kf__load_f32(k, o.b, at, o.dtype);
}

/* Stages rows first .. first + count - 1 of one head (clamped to its last row) of operand o as
 * vec4 rows (zero past D) at stride sr into s; every invocation takes a share. */
static void stage_rows(kf_kernel *k, kf_shared s, attn_operand o, kf_val head_row0, kf_val first,
                       uint32_t count, uint32_t t, uint32_t d, uint32_t sr, kf_val lid,
                       uint32_t threads) {
    uint32_t d4 = vec_cols(d);
    kf_val e = kf_for(k, "e", lid, kf__u32(k, count * d4), kf__u32(k, threads));
    kf_val r = kf_let(k, "sr_row", kf_div(k, e, kf__u32(k, d4)));
    kf_val c4 = kf_let(k, "sr_col", kf_binary(k, KF_OP_MOD, e, kf__u32(k, d4)));
    kf_val row = kf_let(
        k, "sr_at",
        kf_add(k, head_row0, kf_call2(k, KF_FN_MIN, kf_add(k, first, r), kf__u32(k, t - 1))));
    kf_val lanes[4];
    for (uint32_t i = 0; i < 4; i++) {
        kf_val dim = kf_add(k, kf_mul(k, c4, kf__u32(k, 4)), kf__u32(k, i));
        if (d % 4) {
            kf_val inside = kf_binary(k, KF_OP_LT, dim, kf__u32(k, d));
            kf_val v = operand_load(k, o, row, kf_call2(k, KF_FN_MIN, dim, kf__u32(k, d - 1)));
            lanes[i] = kf_select(k, kf_lit_f32(k, 0), v, inside);
        } else {
            lanes[i] = operand_load(k, o, row, dim);
        }
    }
    kf_val at = kf_add(k, kf_mul(k, r, kf__u32(k, sr)), c4);
    kf_shared_store(k, s, at, kf_vec(k, kf_type_vec(KF_SCALAR_F32, 4), lanes, 4));
    kf_end(k);
}

#define MAX_RR 4u

static bool tiles_parse(const char *text, uint32_t d, uint32_t budget, uint32_t layout,
                        grad_tiles *out) {
    unsigned rr, rc, wx, wy, lay = layout;
    int n = text ? sscanf(text, "%u,%u,%u,%u,%u", &rr, &rc, &wx, &wy, &lay) : 0;
    if (n < 4 || (rr != 1 && rr != 2 && rr != 4) || rc < 1 || rc > MAX_RC || wx < 2 || wy < 1 ||
        wx * wy > 256 || (vec_cols(d) + wx - 1) / wx > MAX_M || lay > GRAD_LAYOUT_ALL) {
        return false;
    }
    grad_tiles c = {rr, rc, wx, wy, lay, true};
    if (tiles_bytes(&c, d) > budget) {
        return false;
    }
    *out = c;
    return true;
}

static const char *grad_name(grad_role role) {
    static const char *const names[] = {"attention_grad_q",     "attention_grad_k",
                                        "attention_grad_v",     "attention_grad_kv",
                                        "attention_grad_stats", "attention_grad_q_stats"};
    return names[role];
}

static kf_kernel *grad_kernel(grad_role role, const grad_tiles *c, const kf_shape *in,
                              const kf_op_params *p, kf_dtype dtype, const kf__strided *layouts) {
    const kf__attn_dims a = kf__attn_dims_of(&in[0]);
    const uint32_t t = a.t, d = a.d, d4 = vec_cols(d), sr = d4 + 1;
    const uint32_t rr = c->rr, rc = c->rc, wx = c->wx, wy = c->wy;
    const uint32_t br = rr * wy, bc = rc * wx, threads = wx * wy;
    const uint32_t m_cols = (d4 + wx - 1) / wx;
    const uint32_t tiles = (t + br - 1) / br;
    const bool causal = kf__attn_causal(p);
    const float scale = (float)kf__attn_scale(p, d);
    /* dq: the kernel walks keys for its query rows (dq, g', or both) */
    const bool dq = role == ROLE_DQ || role == ROLE_STATS || role == ROLE_DQ_STATS;
    const bool want_stats = role == ROLE_STATS || role == ROLE_DQ_STATS;
    const bool want_dk = role == ROLE_DK || role == ROLE_DKV;
    const bool want_dv = role == ROLE_DV || role == ROLE_DKV;
    const bool needs_dp = dq || want_dk;

    /* a tiling other than the first that fits names itself (the benchmarks' tables) */
    char name[80];
    snprintf(name, sizeof name, "%s", grad_name(role));
    if (c->named) {
        snprintf(name, sizeof name, "%s_%ux%ux%ux%u_l%u", grad_name(role), rr, rc, wx, wy,
                 c->layout);
    }
    kf_kernel_desc desc = {.name = name,
                           .workgroup_size = {threads, 1, 1},
                           .input = kf_type_scalar(KF_SCALAR_VOID),
                           .output = kf__dtype_type(role == ROLE_STATS ? KF_DTYPE_F32 : dtype)};
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    uint32_t groups[3] = {tiles * a.bh, 1, 1};
    kf_kernel_set_grid(k, groups);
    kf_binding bq = kf__bind(k, "q", dtype, KF_ACCESS_READ);
    kf_binding bk = kf__bind(k, "k", dtype, KF_ACCESS_READ);
    kf_binding bv = kf__bind(k, "v", dtype, KF_ACCESS_READ);
    kf_binding bg = kf__bind(k, "g", KF_DTYPE_F32, KF_ACCESS_READ); /* f32 whatever q is */
    kf_binding bdv = {0}, bstats = {0};
    if (role == ROLE_DKV) {
        bdv = kf__bind(k, "dv", dtype, KF_ACCESS_READ_WRITE);
    }
    if (role == ROLE_DQ_STATS) {
        bstats = kf__bind(k, "stats", KF_DTYPE_F32, KF_ACCESS_READ_WRITE);
    }
    const kf__strided *lq = layouts && layouts[0].rank ? &layouts[0] : NULL;
    const kf__strided *lk = layouts && layouts[1].rank ? &layouts[1] : NULL;
    const kf__strided *lv = layouts && layouts[2].rank ? &layouts[2] : NULL;
    attn_operand oq = {bq, d, 0, dtype, lq}, ok = {bk, d, 0, dtype, lk}, ov = {bv, d, 0, dtype, lv};
    attn_operand odo = {bg, d + 2, 0, KF_DTYPE_F32, NULL},
                 olse = {bg, d + 2, d, KF_DTYPE_F32, NULL};
    attn_operand odelta = {bg, d + 2, d + 1, KF_DTYPE_F32, NULL};
    /* the owned rows' operands (scores with tile a, dP with tile b) and the walked side's */
    attn_operand r1 = dq ? oq : ok, r2 = dq ? odo : ov;
    attn_operand t1 = dq ? ok : oq, t2 = dq ? ov : odo;

    kf_type f32 = kf_type_scalar(KF_SCALAR_F32), v4 = kf_type_vec(KF_SCALAR_F32, 4);
    kf_shared s_r1 = kf_kernel_workgroup(k, "rows_a", v4, br * sr);
    kf_shared s_r2 = {0};
    if (needs_dp) {
        s_r2 = kf_kernel_workgroup(k, "rows_b", v4, br * sr);
    }
    kf_shared s_t1 = kf_kernel_workgroup(k, "tile_a", v4, bc * sr);
    kf_shared s_t2 = kf_kernel_workgroup(k, "tile_b", v4, bc * sr);
    /* P and dS transposed, the rr rows of an invocation side by side: column j's values of the
     * rows ty rr .. ty rr + rr - 1 are one vector at j wy + ty, one load in step 4 */
    kf_type vr = rr == 1 ? f32 : kf_type_vec(KF_SCALAR_F32, rr);
    const uint32_t ps = p_stride(c); /* P's and dS's slots per column */
    kf_shared s_p = kf_kernel_workgroup(k, "probs", vr, bc * ps);
    kf_shared s_ds = {0};
    if (needs_dp) {
        s_ds = kf_kernel_workgroup(k, "dscores", vr, bc * ps);
    }
    kf_shared s_lse = {0}, s_delta = {0};
    if (!dq) {
        s_lse = kf_kernel_workgroup(k, "tile_lse", f32, bc);
        s_delta = kf_kernel_workgroup(k, "tile_delta", f32, bc);
    }

    kf_val lid = kf_let(k, "lid", kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX));
    kf_val tx = kf_let(k, "tx", kf_binary(k, KF_OP_MOD, lid, kf__u32(k, wx)));
    kf_val ty = kf_let(k, "ty", kf_div(k, lid, kf__u32(k, wx)));
    kf_val wg = kf_let(k, "wg", kf_workgroup_linear(k));
    kf_val head = kf_let(k, "head", kf_div(k, wg, kf__u32(k, tiles)));
    kf_val r0 =
        kf_let(k, "r0", kf_mul(k, kf_binary(k, KF_OP_MOD, wg, kf__u32(k, tiles)), kf__u32(k, br)));
    kf_val head_row0 = kf_let(k, "head_row0", kf_mul(k, head, kf__u32(k, t)));

    /* this invocation's rows (in the workgroup, and in the head) and columns of a tile */
    kf_val lrow[MAX_RR], row[MAX_RR], lcol[MAX_RC];
    for (uint32_t i = 0; i < rr; i++) {
        lrow[i] = kf_let(k, "lrow", kf_add(k, kf_mul(k, ty, kf__u32(k, rr)), kf__u32(k, i)));
        row[i] = kf_let(k, "row", kf_add(k, r0, lrow[i]));
    }
    for (uint32_t j = 0; j < rc; j++) {
        lcol[j] = kf_let(k, "lcol",
                         c->layout & GRAD_LAYOUT_INTERLEAVE
                             ? kf_add(k, tx, kf__u32(k, j * wx))
                             : kf_add(k, kf_mul(k, tx, kf__u32(k, rc)), kf__u32(k, j)));
    }
    /* the vec4 columns of the result this invocation owns: tx + wx m (clamped for the loads) */
    kf_val ocol[MAX_M], ocol_c[MAX_M];
    for (uint32_t m = 0; m < m_cols; m++) {
        ocol[m] = kf_let(k, "ocol", kf_add(k, tx, kf__u32(k, wx * m)));
        ocol_c[m] = (m + 1) * wx <= d4
                        ? ocol[m]
                        : kf_let(k, "ocol_c", kf_call2(k, KF_FN_MIN, ocol[m], kf__u32(k, d4 - 1)));
    }

    /* dq reads its rows' lse and delta from g only as shifts: with P' = exp(s - lse) and
     * dS' = P' (dP - delta) it sums, per row, P' (psum) and dS' (shift) and, per column, dS' k
     * (acc1) and P' k (acc2), and at the end takes
     *   dq = scale (acc1 - (shift / psum) acc2) / psum,
     * exact whatever lse and delta are (so g's delta, from the forward's o stored in f16,
     * does not carry into dq); and the row's exact statistics on the way, g' of
     * attention_grad_stats: lse' = lse + log psum, delta' = delta + shift / psum */
    kf_val row_lse[MAX_RR] = {{0, 0}}, row_delta[MAX_RR] = {{0, 0}};
    kf_var psum[MAX_RR] = {{0}}, shift[MAX_RR] = {{0}};
    kf_var acc1[MAX_RR][MAX_M], acc2[MAX_RR][MAX_M]; /* dq: dS' k, P' k; else dk, dv */
    for (uint32_t i = 0; i < rr; i++) {
        if (dq) {
            kf_val at = kf_add(k, head_row0, kf_call2(k, KF_FN_MIN, row[i], kf__u32(k, t - 1)));
            row_lse[i] = kf_let(k, "row_lse", operand_load(k, olse, at, kf__u32(k, 0)));
            row_delta[i] = kf_let(k, "row_delta", operand_load(k, odelta, at, kf__u32(k, 0)));
            psum[i] = kf_declare(k, "psum", f32, kf_lit_f32(k, 0));
            shift[i] = kf_declare(k, "shift", f32, kf_lit_f32(k, 0));
        }
        for (uint32_t m = 0; role != ROLE_STATS && m < m_cols; m++) {
            acc1[i][m] = kf_declare(k, "acc1", v4, kf_splat(k, v4, kf_lit_f32(k, 0)));
            acc2[i][m] = kf_declare(k, "acc2", v4, kf_splat(k, v4, kf_lit_f32(k, 0)));
        }
    }

    /* the owned rows' operands, once */
    stage_rows(k, s_r1, r1, head_row0, r0, br, t, d, sr, lid, threads);
    if (needs_dp) {
        stage_rows(k, s_r2, r2, head_row0, r0, br, t, d, sr, lid, threads);
    }

    /* the columns this workgroup visits: a causal key block starts at the tile holding its
     * first key (earlier queries see none of its keys); a causal query block ends after its
     * last query. The bounds depend on the workgroup only: the barriers stay uniform. */
    kf_val start = kf__u32(k, 0), end = kf__u32(k, t);
    if (causal && !dq) {
        start = kf_let(k, "start", kf_mul(k, kf_div(k, r0, kf__u32(k, bc)), kf__u32(k, bc)));
    } else if (causal) {
        end =
            kf_let(k, "end", kf_call2(k, KF_FN_MIN, kf_add(k, r0, kf__u32(k, br)), kf__u32(k, t)));
    }
    kf_val c0 = kf_for(k, "c0", start, end, kf__u32(k, bc));
    {
        /* 1. stage the tile's operands (and, walking queries, their lse and delta) */
        stage_rows(k, s_t1, t1, head_row0, c0, bc, t, d, sr, lid, threads);
        stage_rows(k, s_t2, t2, head_row0, c0, bc, t, d, sr, lid, threads);
        if (!dq) {
            kf_if(k, kf_binary(k, KF_OP_LT, lid, kf__u32(k, bc)));
            kf_val at =
                kf_add(k, head_row0, kf_call2(k, KF_FN_MIN, kf_add(k, c0, lid), kf__u32(k, t - 1)));
            kf_shared_store(k, s_lse, lid, operand_load(k, olse, at, kf__u32(k, 0)));
            kf_shared_store(k, s_delta, lid, operand_load(k, odelta, at, kf__u32(k, 0)));
            kf_end(k);
        }
        kf_barrier(k);

        /* 2. the scores (and dP) of rr rows x rc columns: dot products of vec4s over D */
        kf_var sc[MAX_RR][MAX_RC], dp[MAX_RR][MAX_RC];
        for (uint32_t i = 0; i < rr; i++) {
            for (uint32_t j = 0; j < rc; j++) {
                sc[i][j] = kf_declare(k, "s", f32, kf_lit_f32(k, 0));
                if (needs_dp) {
                    dp[i][j] = kf_declare(k, "dp", f32, kf_lit_f32(k, 0));
                }
            }
        }
        kf_val e = kf_for(k, "e4", kf__u32(k, 0), kf__u32(k, d4), kf__u32(k, 1));
        {
            kf_val ra[MAX_RR], rb[MAX_RR], ta[MAX_RC], tb[MAX_RC];
            for (uint32_t i = 0; i < rr; i++) {
                kf_val at = kf_add(k, kf_mul(k, lrow[i], kf__u32(k, sr)), e);
                ra[i] = kf_let(k, "ra", kf_shared_load(k, s_r1, at));
                if (needs_dp) {
                    rb[i] = kf_let(k, "rb", kf_shared_load(k, s_r2, at));
                }
            }
            for (uint32_t j = 0; j < rc; j++) {
                kf_val at = kf_add(k, kf_mul(k, lcol[j], kf__u32(k, sr)), e);
                ta[j] = kf_let(k, "ta", kf_shared_load(k, s_t1, at));
                if (needs_dp) {
                    tb[j] = kf_let(k, "tb", kf_shared_load(k, s_t2, at));
                }
            }
            for (uint32_t i = 0; i < rr; i++) {
                for (uint32_t j = 0; j < rc; j++) {
                    kf_assign(
                        k, sc[i][j],
                        kf_add(k, kf_read(k, sc[i][j]), kf_call2(k, KF_FN_DOT, ra[i], ta[j])));
                    if (needs_dp) {
                        kf_assign(
                            k, dp[i][j],
                            kf_add(k, kf_read(k, dp[i][j]), kf_call2(k, KF_FN_DOT, rb[i], tb[j])));
                    }
                }
            }
        }
        kf_end(k);

        /* 3. P and dS of those pairs, zero where the query does not see the key */
        for (uint32_t j = 0; j < rc; j++) {
            kf_val col = kf_let(k, "col", kf_add(k, c0, lcol[j]));
            kf_val col_in = kf_binary(k, KF_OP_LT, col, kf__u32(k, t));
            kf_val lse = {0, 0}, delta = {0, 0};
            if (!dq) {
                lse = kf_shared_load(k, s_lse, lcol[j]);
                delta = kf_shared_load(k, s_delta, lcol[j]);
            }
            kf_val prs[MAX_RR], dss[MAX_RR];
            for (uint32_t i = 0; i < rr; i++) {
                kf_val keep = col_in;
                if (causal) {
                    kf_val sees = dq ? kf_binary(k, KF_OP_LE, col, row[i])
                                     : kf_binary(k, KF_OP_GE, col, row[i]);
                    keep = kf_binary(k, KF_OP_AND, keep, sees);
                }
                kf_val s = kf_mul(k, kf_read(k, sc[i][j]), kf_lit_f32(k, scale));
                kf_val pr = kf_call1(k, KF_FN_EXP, kf_sub(k, s, dq ? row_lse[i] : lse));
                prs[i] = kf_let(k, "p", kf_select(k, kf_lit_f32(k, 0), pr, keep));
                if (needs_dp) {
                    dss[i] = kf_mul(k, prs[i],
                                    kf_sub(k, kf_read(k, dp[i][j]), dq ? row_delta[i] : delta));
                }
            }
            kf_val slot = kf_add(k, kf_mul(k, lcol[j], kf__u32(k, ps)), ty);
            kf_shared_store(k, s_p, slot, rr == 1 ? prs[0] : kf_vec(k, vr, prs, rr));
            if (needs_dp) {
                kf_shared_store(k, s_ds, slot, rr == 1 ? dss[0] : kf_vec(k, vr, dss, rr));
            }
        }
        kf_barrier(k);

        /* 4. accumulate the owned rows' results over the tile's columns */
        kf_val cc = kf_for(k, "cc", kf__u32(k, 0), kf__u32(k, bc), kf__u32(k, 1));
        {
            kf_val x1[MAX_M], x2[MAX_M];
            for (uint32_t m = 0; role != ROLE_STATS && m < m_cols; m++) {
                kf_val at = kf_add(k, kf_mul(k, cc, kf__u32(k, sr)), ocol_c[m]);
                /* dq: k (tile a) for both sums; dk: q (tile a); dv: do (tile b) */
                if (dq || want_dk) {
                    x1[m] = kf_let(k, "x1", kf_shared_load(k, s_t1, at));
                }
                if (want_dv) {
                    x2[m] = kf_let(k, "x2", kf_shared_load(k, s_t2, at));
                }
            }
            kf_val slot = kf_add(k, kf_mul(k, cc, kf__u32(k, ps)), ty);
            kf_val pv = kf_let(k, "pp", kf_shared_load(k, s_p, slot)), dsv = {0, 0};
            if (needs_dp) {
                dsv = kf_let(k, "pds", kf_shared_load(k, s_ds, slot));
            }
            for (uint32_t i = 0; i < rr; i++) {
                kf_val pr = rr == 1 ? pv : kf_extract(k, pv, i);
                kf_val ds = {0, 0};
                if (needs_dp) {
                    ds = rr == 1 ? dsv : kf_extract(k, dsv, i);
                }
                if (dq) {
                    kf_assign(k, psum[i], kf_add(k, kf_read(k, psum[i]), pr));
                    kf_assign(k, shift[i], kf_add(k, kf_read(k, shift[i]), ds));
                }
                kf_val vp = kf_splat(k, v4, pr), vds = {0, 0};
                if (needs_dp) {
                    vds = kf_splat(k, v4, ds);
                }
                for (uint32_t m = 0; role != ROLE_STATS && m < m_cols; m++) {
                    if (dq) {
                        kf_assign(k, acc1[i][m],
                                  kf_call3(k, KF_FN_FMA, vds, x1[m], kf_read(k, acc1[i][m])));
                        kf_assign(k, acc2[i][m],
                                  kf_call3(k, KF_FN_FMA, vp, x1[m], kf_read(k, acc2[i][m])));
                        continue;
                    }
                    if (want_dk) {
                        kf_assign(k, acc1[i][m],
                                  kf_call3(k, KF_FN_FMA, vds, x1[m], kf_read(k, acc1[i][m])));
                    }
                    if (want_dv) {
                        kf_assign(k, acc2[i][m],
                                  kf_call3(k, KF_FN_FMA, vp, x2[m], kf_read(k, acc2[i][m])));
                    }
                }
            }
        }
        kf_end(k);
        /* the next tile overwrites the tiles and P */
        kf_barrier(k);
    }
    kf_end(k);

    /* the results: the owned rows' columns 4 ocol .. 4 ocol + 3 below D */
    for (uint32_t i = 0; i < rr; i++) {
        kf_val inv_p = {0, 0}, mean = {0, 0};
        if (dq) {
            inv_p = kf_let(k, "inv_p", kf_div(k, kf_lit_f32(k, 1), kf_read(k, psum[i])));
            mean = kf_let(k, "mean_ds", kf_mul(k, kf_read(k, shift[i]), inv_p));
        }
        kf_val out_row =
            kf_let(k, "out_row", kf_mul(k, kf_add(k, head_row0, row[i]), kf__u32(k, d)));
        kf_if(k, kf_binary(k, KF_OP_LT, row[i], kf__u32(k, t)));
        if (want_stats) {
            /* g' = [dy | lse' | delta'], dy as g has it (rows_b) */
            kf_val g_row =
                kf_let(k, "g_row", kf_mul(k, kf_add(k, head_row0, row[i]), kf__u32(k, d + 2)));
            for (uint32_t m = 0; m < m_cols; m++) {
                kf_val owned = (m + 1) * wx <= d4 ? (kf_val){0, 0}
                                                  : kf_binary(k, KF_OP_LT, ocol[m], kf__u32(k, d4));
                if (owned.id) {
                    kf_if(k, owned);
                }
                kf_val dyv =
                    kf_let(k, "dy4",
                           kf_shared_load(k, s_r2,
                                          kf_add(k, kf_mul(k, lrow[i], kf__u32(k, sr)), ocol[m])));
                for (uint32_t lane = 0; lane < 4; lane++) {
                    kf_val dim = kf_add(k, kf_mul(k, ocol[m], kf__u32(k, 4)), kf__u32(k, lane));
                    bool ragged = d % 4 && lane >= d % 4 && (m + 1) * wx * 4 > d;
                    if (ragged) {
                        kf_if(k, kf_binary(k, KF_OP_LT, dim, kf__u32(k, d)));
                    }
                    kf_val at = kf_add(k, g_row, dim), x = kf_extract(k, dyv, lane);
                    if (role == ROLE_STATS) {
                        kf__yield_f32(k, x, at, KF_DTYPE_F32);
                    } else {
                        kf__store_f32(k, bstats, at, x, KF_DTYPE_F32);
                    }
                    if (ragged) {
                        kf_end(k);
                    }
                }
                if (owned.id) {
                    kf_end(k);
                }
            }
            kf_if(k, kf_binary(k, KF_OP_EQ, tx, kf__u32(k, 0)));
            kf_val lse = kf_add(k, row_lse[i], kf_call1(k, KF_FN_LOG, kf_read(k, psum[i])));
            kf_val delta = kf_add(k, row_delta[i], mean);
            kf_val at_lse = kf_add(k, g_row, kf__u32(k, d)),
                   at_delta = kf_add(k, g_row, kf__u32(k, d + 1));
            if (role == ROLE_STATS) {
                kf__yield_f32(k, lse, at_lse, KF_DTYPE_F32);
                kf__yield_f32(k, delta, at_delta, KF_DTYPE_F32);
            } else {
                kf__store_f32(k, bstats, at_lse, lse, KF_DTYPE_F32);
                kf__store_f32(k, bstats, at_delta, delta, KF_DTYPE_F32);
            }
            kf_end(k);
        }
        for (uint32_t m = 0; role != ROLE_STATS && m < m_cols; m++) {
            kf_val owned = (m + 1) * wx <= d4 ? (kf_val){0, 0}
                                              : kf_binary(k, KF_OP_LT, ocol[m], kf__u32(k, d4));
            if (owned.id) {
                kf_if(k, owned);
            }
            kf_val v1 = kf_let(k, "res1", kf_read(k, acc1[i][m]));
            kf_val v2 = kf_let(k, "res2", kf_read(k, acc2[i][m]));
            for (uint32_t lane = 0; lane < 4; lane++) {
                kf_val dim = kf_add(k, kf_mul(k, ocol[m], kf__u32(k, 4)), kf__u32(k, lane));
                kf_val at = kf_add(k, out_row, dim);
                kf_val a1 = kf_extract(k, v1, lane), a2 = kf_extract(k, v2, lane);
                bool ragged = d % 4 && lane >= d % 4 && (m + 1) * wx * 4 > d;
                if (ragged) {
                    kf_if(k, kf_binary(k, KF_OP_LT, dim, kf__u32(k, d)));
                }
                if (dq) {
                    kf_val v = kf_mul(k, kf_sub(k, a1, kf_mul(k, mean, a2)), inv_p);
                    v = kf_mul(k, v, kf_lit_f32(k, scale));
                    /* a row that sees one key has P = 1 whatever q is: dq is exactly 0, where
                     * the form above keeps rounding (the first causal row, T = 1) */
                    if (t == 1) {
                        v = kf_lit_f32(k, 0);
                    } else if (causal) {
                        v = kf_select(k, v, kf_lit_f32(k, 0),
                                      kf_binary(k, KF_OP_EQ, row[i], kf__u32(k, 0)));
                    }
                    kf__yield_f32(k, v, at, dtype);
                } else if (role == ROLE_DV) {
                    kf__yield_f32(k, a2, at, dtype);
                } else {
                    kf__yield_f32(k, kf_mul(k, a1, kf_lit_f32(k, scale)), at, dtype);
                    if (role == ROLE_DKV) {
                        kf__store_f32(k, bdv, at, a2, dtype);
                    }
                }
                if (ragged) {
                    kf_end(k);
                }
            }
            if (owned.id) {
                kf_end(k);
            }
        }
        kf_end(k);
    }
    return k;
}

static uint32_t budget_of(kf_context *ctx) {
    kf_adapter_info info;
    if (ctx && kf_context_adapter_info(ctx, &info) == KF_OK &&
        info.max_compute_workgroup_storage_size >= PORTABLE_BUDGET) {
        return info.max_compute_workgroup_storage_size;
    }
    return PORTABLE_BUDGET;
}

static kf_kernel *grad_kernel_strided(kf_context *ctx, grad_role role, const kf_shape *in,
                                      const kf_op_params *p, kf_dtype dtype,
                                      const kf__strided *layouts) {
    const kf__attn_dims a = kf__attn_dims_of(&in[0]);
    const bool dq_side = role == ROLE_DQ || role == ROLE_STATS || role == ROLE_DQ_STATS;
    if (ctx && dtype == KF_DTYPE_F16) {
        /* f16 where the device has subgroup matrices: on them (attention_grad_sgmat.c) */
        kf__attn_desc ad = {.bh = a.bh,
                            .t = a.t,
                            .d = a.d,
                            .causal = kf__attn_causal(p),
                            .scale = (float)kf__attn_scale(p, a.d)};
        kf_kernel *k =
            dq_side ? kf__attention_grad_q_sgmat_for(ctx, &ad, role != ROLE_STATS, role != ROLE_DQ)
                    : kf__attention_grad_kv_sgmat_for(ctx, &ad, role != ROLE_DV, role != ROLE_DK);
        if (k && kf__strided_any(layouts, 3)) {
            /* they load q, k and v row-major: the planner copies the views (the copy costs far
             * less than the FMA kernel reading them in place: 3-6x slower on the H200) */
            kf_kernel_destroy(k);
            return NULL;
        }
        if (k) {
            return k;
        }
    }
    grad_tiles c = tiles_for(a.d, a.t, a.bh, budget_of(ctx), dq_side);
    return grad_kernel(role, &c, in, p, dtype, layouts);
}

static kf_kernel *grad_kernel_for(kf_context *ctx, grad_role role, const kf_shape *in,
                                  const kf_op_params *p, kf_dtype dtype) {
    return grad_kernel_strided(ctx, role, in, p, dtype, NULL);
}

kf_kernel *kf__attention_grad_kv_kernel(kf_context *ctx, const kf_shape *in, const kf_op_params *p,
                                        kf_dtype dtype) {
    return grad_kernel_for(ctx, ROLE_DKV, in, p, dtype);
}

kf_kernel *kf__attention_grad_kernel_tiled(bool dq_side, const char *tiles, const kf_shape *in,
                                           const kf_op_params *p, kf_dtype dtype,
                                           const kf__strided *layouts) {
    const kf__attn_dims a = kf__attn_dims_of(&in[0]);
    grad_tiles c;
    if (!tiles_parse(tiles, a.d, UINT32_MAX, 0, &c)) {
        return NULL;
    }
    return grad_kernel(dq_side ? ROLE_DQ_STATS : ROLE_DKV, &c, in, p, dtype, layouts);
}

/* attention_grad_q's kernel_with_companion: dq, and attention_grad_stats's g' into "stats". */
static kf_kernel *grad_q_with_stats(kf_context *ctx, const kf_shape *in, const kf_op_params *p,
                                    kf_dtype dtype) {
    return grad_kernel_for(ctx, ROLE_DQ_STATS, in, p, dtype);
}

/* The grid of a kernel built without a context (16 KB of workgroup memory); the kernels record
 * their own grid, which plans and verification use. dq's side (attention_grad_q, _stats) and
 * dk's (attention_grad_k, _v) may be tiled differently. */
static void grid_of(const kf_shape *in, bool dq_side, uint32_t groups[3]) {
    const kf__attn_dims a = kf__attn_dims_of(&in[0]);
    const grad_tiles c = tiles_for(a.d, a.t, a.bh, PORTABLE_BUDGET, dq_side);
    uint32_t br = c.rr * c.wy;
    groups[0] = (a.t + br - 1) / br * a.bh;
    groups[1] = 1;
    groups[2] = 1;
}

static void grad_grid_q(const kf_shape *in, const kf_op_params *p, int32_t which,
                        uint32_t groups[3]) {
    (void)p, (void)which;
    grid_of(in, true, groups);
}

static void grad_grid_kv(const kf_shape *in, const kf_op_params *p, int32_t which,
                         uint32_t groups[3]) {
    (void)p, (void)which;
    grid_of(in, false, groups);
}

/* The role of an operator's kernel_with_companion: dq with g', dk with dv. */
static grad_role with_companion_role(grad_role role) {
    return role == ROLE_DQ ? ROLE_DQ_STATS : role == ROLE_DK ? ROLE_DKV : role;
}

#define GRAD_GLUE(NAME, WHICH, ROLE)                                                               \
    static kf_status NAME##_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out,        \
                                  char *msg, size_t msg_size) {                                    \
        (void)p;                                                                                   \
        return grad_shape(#NAME, WHICH, in, out, msg, msg_size);                                   \
    }                                                                                              \
    static kf_kernel *NAME##_kernel(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {   \
        return grad_kernel_for(NULL, ROLE, in, p, dtype);                                          \
    }                                                                                              \
    static kf_kernel *NAME##_choose(kf_context *ctx, const kf_shape *in, const kf_op_params *p,    \
                                    kf_dtype dtype) {                                              \
        return grad_kernel_for(ctx, ROLE, in, p, dtype);                                           \
    }                                                                                              \
    static kf_kernel *NAME##_strided(kf_context *ctx, const kf_shape *in, const kf_op_params *p,   \
                                     kf_dtype dtype, const kf__strided *layouts, bool with) {      \
        return grad_kernel_strided(ctx, with ? with_companion_role(ROLE) : ROLE, in, p, dtype,     \
                                   layouts);                                                       \
    }

GRAD_GLUE(attention_grad_q, 0, ROLE_DQ)
GRAD_GLUE(attention_grad_stats, 3, ROLE_STATS)
GRAD_GLUE(attention_grad_k, 1, ROLE_DK)
GRAD_GLUE(attention_grad_v, 2, ROLE_DV)

/* ---------------------------------------------------------------------------------------- */
/* Verification tables and operator records                                                 */
/* ---------------------------------------------------------------------------------------- */

#define NONCAUSAL                                                                                  \
    { .causal = false, .given = KF_PARAM_CAUSAL }
#define QKV(...) SHAPE4(__VA_ARGS__), SHAPE4(__VA_ARGS__), SHAPE4(__VA_ARGS__)
#define PACK(B, H, T, D) QKV(B, H, T, D), SHAPE4(B, H, T, D + 2)

/* T of 1, 7, 17, 64, 65 and 100 (below, at and past the tiles: 32 x 16 and 16 x 8 on a 32 KB
 * device, 8 x 4 with 16 KB); D of 8, 64, 128 and 97 (a ragged vec4); causal and not; a given
 * scale; and 2^22 elements. */
static const kf_op_case grad_cases[] = {
    {.shapes = {PACK(1, 1, 1, 8)}, .note = "T 1"},
    {.shapes = {PACK(1, 2, 7, 8)}, .note = "T 7"},
    {.shapes = {PACK(1, 2, 7, 8)}, .params = NONCAUSAL, .note = "T 7, not causal"},
    {.shapes = {PACK(1, 2, 17, 8)}, .note = "T 17: one row past a 16-row tile"},
    {.shapes = {PACK(1, 1, 65, 128)}, .params = NONCAUSAL, .note = "T 65, D 128, not causal"},
    {.shapes = {PACK(2, 1, 64, 64)}, .note = "T 64, D 64"},
    {.shapes = {PACK(1, 2, 100, 8)}, .note = "T 100, D 8"},
    {.shapes = {PACK(1, 1, 100, 64)}, .params = NONCAUSAL, .note = "T 100, D 64, not causal"},
    {.shapes = {PACK(1, 1, 37, 128)}, .note = "D 128"},
    {.shapes = {PACK(1, 1, 23, 97)}, .params = {.alpha = 0.3f}, .note = "D 97, scale 0.3"},
    {.shapes = {PACK(32, 16, 64, 128)}, .note = "large: 2^22 elements"},
};

#define CASES(table) .cases = table, .case_count = sizeof table / sizeof table[0]

/* Tolerances (docs/operators.md): measured on lavapipe over the table (2^22 elements included):
 * dq 1.8e-4, dk 1.1e-4, dv 6.3e-5 (5e-4 allowed); f16 2e-3 as for every op. */
#define GRAD_OP(NAME, ABOUT, ...)                                                                  \
    const kf_operator kf__op_##NAME = {.name = #NAME,                                              \
                                       .about = ABOUT,                                             \
                                       .op_class = KF_OP_CLASS_ROW_REDUCTION,                      \
                                       .arity = 4,                                                 \
                                       KF__INPUTS(grad_inputs),                                    \
                                       KF__PARAMS(kf__attn_params),                                \
                                       .shape = NAME##_shape,                                      \
                                       .spec_forward = NAME##_spec,                                \
                                       .kernel_forward = NAME##_kernel,                            \
                                       .kernel_choose = NAME##_choose,                             \
                                       .kernel_strided = NAME##_strided,                           \
                                       .strided_inputs = 7u, /* q, k, v */                         \
                                       .tolerance_f32 = 5e-4,                                      \
                                       .tolerance_f16 = 2e-3,                                      \
                                       .input_lo = -1.0f,                                          \
                                       .input_hi = 1.0f,                                           \
                                       .f32_inputs = 1u << 3, /* g */                              \
                                       CASES(grad_cases),                                          \
                                       __VA_ARGS__}

GRAD_OP(attention_grad_q, "attention's gradient for q from attention_grad_prep's g",
        .grid = grad_grid_q, .companion = &kf__op_attention_grad_stats,
        .kernel_with_companion = grad_q_with_stats);
GRAD_OP(attention_grad_k, "attention's gradient for k from attention_grad_prep's g",
        .grid = grad_grid_kv, .companion = &kf__op_attention_grad_v,
        .kernel_with_companion = kf__attention_grad_kv_kernel);
GRAD_OP(attention_grad_v, "attention's gradient for v from attention_grad_prep's g",
        .grid = grad_grid_kv, .companion = NULL);
/* g' from g: lse' and delta' from the dq kernel's sums over up to T keys (psum, shift), as dq's
 * own; f16 inputs, f32 compute and output. */
GRAD_OP(attention_grad_stats,
        "attention's backward statistics made exact from g's dy: [dy | lse | delta] (f32)",
        .grid = grad_grid_q, .companion = NULL, .f32_output = true);
