/* Attention forward on subgroup matrices (tensor cores): f16 q, k, v, f32 accumulation.
 *
 * A workgroup of W subgroups owns 16 W query rows of one head; each subgroup owns 16 of them and
 * keeps its q rows as D / 16 left matrices (16x16 f16) for the whole kernel. The keys are walked
 * in tiles of C (64, or 32 and 16 where workgroup memory is short), staged as f16 in workgroup
 * memory (rows padded by 8 halves; columns past D and rows past T zero). Per tile, each subgroup
 * computes its 16 x C scores S = q k^T on subgroup matrices (k's tile read column-major: the right
 * matrix is k^T) and stores them, f32, to its scratch in workgroup memory, where its invocations
 * read them element by element (a subgroup matrix cannot be read so).
 *
 * Why two passes over the keys and not FlashAttention's one: the online softmax rescales the
 * output rows by exp(m_old - m_new) whenever a row's maximum grows, and a result matrix can
 * only be scaled row by row through a round trip to workgroup memory. So pass 1 computes, per
 * row, the maximum and the sum of exp (online, on scalars: each invocation over its share of the
 * tile's columns, combined once at the end) and so lse = m + log l; pass 2 computes S again and
 * P = exp(S - lse), final and at most 1, and accumulates O += P V on subgroup matrices (P's
 * 16 x C as left matrices, v's tile as right ones) with no rescale at all. The price: q k^T
 * twice and exp twice; lse falls out of pass 1, which is what the backward needs (written as a
 * second output on request).
 *
 * Why P goes in as two f16 matrices, hi = f16(P) and lo = f16(P - hi): one f16 rounding of P
 * (2^-12 of each term) makes an error of 2^-12 of o's rms in every element, which is 2.4% of an
 * element at 1% of the rms, where verification's f16 tolerance is 2e-3 of max(|o|, 1% of the
 * rms) (measured: 2.1e-3 at T 15, D 8). hi + lo carries P to 2^-22, for one more P V.
 *
 * Causal: the tiles past the workgroup's last row are never visited (the loop bound is uniform
 * over the workgroup, so barriers stay in uniform control flow), and within the last tiles the
 * columns past each row are masked. Rows past T compute row T - 1 and are not written.
 */
#include "ops/attention_sgmat.h"

#include "ops/matmul_sgmat.h"
#include "ops/ops_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAT 16u          /* 16x16x16 f16 -> f32 matrices */
#define PAD 8u           /* halves after each staged row */
#define SUBGROUPS 4u     /* per workgroup, by default */
#define MAX_D 128u       /* the largest head dimension */
#define WG_MEMORY 49152u /* workgroup memory every device with subgroup matrices offers */
#define NEG_BIG -3.0e38f /* the running max before any key */
#define P_SCALE 16384.0f /* P's scale in its f16 matrices (2^14) */

static kf_val u32(kf_kernel *k, uint32_t v) {
    return kf_lit_u32(k, v);
}

/* Bytes of workgroup memory for key tiles of c columns. */
static uint32_t memory_for(uint32_t w, uint32_t c, uint32_t dp, bool split, bool direct,
                           uint32_t sub_rows) {
    uint32_t ld = dp + PAD, rows = w * sub_rows;
    uint32_t tiles = 2 * c * ld > rows * ld ? 2 * c * ld : rows * ld; /* q is staged there first */
    if (direct) {
        return 2 * rows * c * 4 + (split ? 2 : 1) * rows * (c + PAD) * 2 + MAT * MAT * 4;
    }
    return tiles * 2 + rows * c * 4 + (split ? 2 : 1) * rows * (c + PAD) * 2 + MAT * MAT * 4;
}

/* Stages rows [first, first + rows) of head `head_row0` of binding b (t rows of d) as f16 into
 * tile at `at`, row stride ld, columns d..dp zero and rows clamped to the last (those past t are
 * masked or not written). */
static void stage(kf_kernel *k, kf_binding b, kf_shared tile, uint32_t at, kf_val local,
                  uint32_t threads, kf_val head_row0, kf_val first, uint32_t rows, uint32_t t,
                  uint32_t d, uint32_t dp) {
    kf_type h = kf_type_scalar(KF_SCALAR_F16);
    kf_val e = kf_for(k, "e", local, u32(k, rows * dp), u32(k, threads));
    kf_val r = kf_div(k, e, u32(k, dp)), c = kf_binary(k, KF_OP_MOD, e, u32(k, dp));
    kf_val row = kf_add(k, head_row0, kf_call2(k, KF_FN_MIN, kf_add(k, first, r), u32(k, t - 1)));
    kf_val col = dp == d ? c : kf_call2(k, KF_FN_MIN, c, u32(k, d - 1));
    kf_val x = kf_load(k, b, kf_add(k, kf_mul(k, row, u32(k, d)), col));
    if (dp != d) {
        x = kf_select(k, kf_lit_f16(k, 0), x, kf_binary(k, KF_OP_LT, c, u32(k, d)));
    }
    kf_val slot = kf_add(k, kf_mul(k, r, u32(k, dp + PAD)), c);
    kf_shared_store(k, tile, at ? kf_add(k, slot, u32(k, at)) : slot, kf_cast(k, h, x));
    kf_end(k);
}

/* --- the one-pass kernel (kf__attn_sgmat_config.online) ---
 *
 * FlashAttention's order on subgroup matrices: one walk over the keys, S = q k^T and O += P V in
 * the same tile, with the online softmax's rescale of O done where a result matrix cannot be
 * touched element by element: each tile's P V goes to a fresh result matrix
 * (subgroupMatrixMultiply, no zeroing load), through the subgroup's scratch in workgroup memory,
 * into f32 registers that each invocation keeps for its share of the subgroup's rows, O_reg = O_reg
 * * alpha + (P V). Two barriers a tile: (1) the scores and the previous tile's P V are stored; (2)
 * P is stored. Between them each invocation adds the previous tile's P V, then takes its row's new
 * maximum (the row's invocations combined by subgroup shuffles), alpha = exp(m_old - m_new), P =
 * exp(S - m_new) (so at most 1: the 2^14 scale and the hi + lo split of the two-pass kernel apply
 * unchanged) and its share of the row's sum. q k^T once and exp once, against twice each in the
 * two-pass kernel.
 *
 * k and v go through workgroup memory: a tile's rows fetched as vec4s by the whole workgroup
 * (coalesced) and stored where the subgroups load their matrices from. On the H200 (session 10,
 * bench/results/s10/) loading them as matrices straight from storage took 60% of the kernel's
 * time (2.82 ms at T 4096, D 64, against 1.10 with the loads from workgroup memory); "/direct"
 * keeps those loads, for measuring, and so does a configuration whose staged tiles do not fit
 * (4 subgroups at D 128). The fetches are issued between the two barriers, k's tile for
 * the next tile and v's for this one, and stored after the softmax, so their latency overlaps it:
 * k's tile is free once this tile's scores are stored (before barrier 1), v's once the previous
 * tile's P V is (before barrier 1 too), and each is read only after barrier 2. q is read as
 * matrices from storage, once. T a multiple of the key tile and D of 16
 * (kf__attention_sgmat_config returns NULL otherwise). Each invocation's columns of a row are
 * interleaved (column part + lanes_per_row * i) and rotated by 2 for rows 8 on, which puts the 32
 * invocations' reads of a padded row-major scratch in 32 different banks. */

/* its workgroup memory: per subgroup the scores (R x (C + 4) f32), one tile's P V (R x (D + 4)
 * f32) and P (R x (C + 8) f16, twice with lo) */
static uint32_t online_memory(uint32_t w, uint32_t rows, uint32_t c, uint32_t dp, bool split,
                              bool staged) {
    return w * rows * ((c + 4) * 4 + (dp + 4) * 4 + (split ? 2 : 1) * (c + PAD) * 2) +
           (staged ? 2 * c * (dp + PAD) * 2 : 0);
}

/* The one-pass kernel's key tile: the configuration's (64 by default) halved until its memory
 * fits budget and it divides t; 0 where none does, or (staged) a tile has more vec4s than
 * stage_fetch's 64 per invocation of `threads`. */
static uint32_t online_keys(const kf__attn_sgmat_config *cfg, uint32_t w, uint32_t rows, uint32_t t,
                            uint32_t dp, bool split, bool staged, uint32_t budget,
                            uint32_t threads) {
    uint32_t bc = cfg->keys ? cfg->keys : 64u;
    while (bc > MAT && (online_memory(w, rows, bc, dp, split, staged) > budget || t % bc)) {
        bc /= 2;
    }
    bool fits = online_memory(w, rows, bc, dp, split, staged) <= budget && t % bc == 0 &&
                !(staged && bc * dp / 4 > 64 * threads);
    return fits ? bc : 0;
}

/* Fetches (issues the loads of) rows [row0, row0 + c) of binding b (vec4s of f16, d / 4 a row)
 * into n values per invocation, the workgroup's `threads` invocations taking consecutive vec4s;
 * stage_put stores them into tile (rows of ld halves). Invocations past the tile's vec4s load its
 * last one and store nothing. */
typedef struct staged_rows {
    kf_val v[64];
    kf_val slot[64], inside[64];
    uint32_t n;
} staged_rows;

static staged_rows stage_fetch(kf_kernel *k, kf_binding b, kf_val local, uint32_t threads,
                               kf_val row0, uint32_t c, uint32_t d, uint32_t ld) {
    staged_rows r = {.n = (c * d / 4 + threads - 1) / threads};
    const uint32_t total = c * d / 4, per_row = d / 4;
    for (uint32_t i = 0; i < r.n; i++) {
        kf_val e = kf_add(k, local, u32(k, i * threads));
        r.inside[i] =
            (i + 1) * threads > total ? kf_binary(k, KF_OP_LT, e, u32(k, total)) : (kf_val){0, 0};
        kf_val ec = r.inside[i].id ? kf_call2(k, KF_FN_MIN, e, u32(k, total - 1)) : e;
        kf_val row = kf_div(k, ec, u32(k, per_row));
        kf_val col = kf_binary(k, KF_OP_MOD, ec, u32(k, per_row));
        r.v[i] = kf_let(k, "kv4", kf_load(k, b, kf_add(k, kf_mul(k, row0, u32(k, per_row)), ec)));
        r.slot[i] =
            kf_let(k, "kv_slot", kf_add(k, kf_mul(k, row, u32(k, ld)), kf_mul(k, col, u32(k, 4))));
    }
    return r;
}

static void stage_put(kf_kernel *k, const staged_rows *r, kf_shared tile) {
    for (uint32_t i = 0; i < r->n; i++) {
        if (r->inside[i].id) {
            kf_if(k, r->inside[i]);
        }
        for (uint32_t l = 0; l < 4; l++) {
            kf_val at = l ? kf_add(k, r->slot[i], u32(k, l)) : r->slot[i];
            kf_shared_store(k, tile, at, kf_extract(k, r->v[i], l));
        }
        if (r->inside[i].id) {
            kf_end(k);
        }
    }
}

/* The columns an invocation owns (see above), its i-th of n being part + lpr ((i + rot) % n):
 * base + lpr i for base = part + lpr rot, the last wrapping back to part where rot is 1. All
 * but the last are one value plus a constant, so their addresses need no register each (on the
 * H200 1-2% faster at D 128 than n values computed and held, the same at D 64:
 * bench/results/s12/run3). */
static void owned_cols(kf_kernel *k, kf_val part, kf_val rot, uint32_t n, uint32_t lpr, kf_val *out,
                       const char *name) {
    if (n == 1) {
        out[0] = part;
        return;
    }
    kf_val base = kf_let(k, name, kf_add(k, part, kf_mul(k, rot, u32(k, lpr))));
    for (uint32_t i = 0; i + 1 < n; i++) {
        out[i] = i ? kf_add(k, base, u32(k, lpr * i)) : base;
    }
    kf_val wraps = kf_binary(k, KF_OP_EQ, rot, u32(k, 1));
    out[n - 1] = kf_let(k, name, kf_select(k, kf_add(k, base, u32(k, lpr * (n - 1))), part, wraps));
}

/* lazy (kf__attn_sgmat_config.lazy): O stays in the subgroup's result matrices across key tiles,
 * P = exp(S - m_ref) with m_ref a row's maximum as of the subgroup's last rescale, which happens
 * only when some row of the subgroup has grown past its m_ref by more than LAZY_TAU (so P stays
 * below e^LAZY_TAU, 7.4, and P * LAZY_P_SCALE below f16's largest value): the tile then stores
 * O to pv and starts its result matrices again from its own P V, and the next tile (or the end)
 * adds pv to O_reg and scales it, O_reg = (O_reg + pv) alpha, between the barriers the loop has
 * anyway. The decision is a subgroup maximum of the rows' growth, so the same in the whole
 * subgroup, which is all its matrix operations need. l is rescaled with O. At the end,
 * o = (O_reg + O) / l. Where the maximum settles after the first tiles (a row's largest score
 * among its first keys is within LAZY_TAU of its largest overall), no tile after them goes
 * through workgroup memory for O. */
#define LAZY_TAU 2.0f
#define LAZY_P_SCALE 8192.0f /* 2^13: e^2 2^13 = 60531 < 65504 */

/* The matrices and layout of the one-pass kernel's P V (pv_keys). */
typedef struct pv_tile {
    const kf_sgmat *pl, *pl_lo, *ot;
    kf_sgmat vr;
    kf_shared probs, probs_lo, vtile;
    kf_binding bv;
    kf_val p_at, kv_at;
    uint32_t ldp, ldk, d, dm, rb, probe;
    bool split, staged;
} pv_tile;

/* O += P V for the 16 keys of block j of the tile (fresh: O = P V, the result matrices'
 * earlier values dropped). */
static void pv_keys(kf_kernel *k, const pv_tile *t, uint32_t j, bool fresh) {
    for (uint32_t b = 0; b < t->rb; b++) {
        kf_val pb = kf_add(k, t->p_at, u32(k, b * MAT * t->ldp + j * MAT));
        kf_sgmat_load(k, t->pl[b], t->probs, pb, false, u32(k, t->ldp));
        if (t->split) {
            kf_sgmat_load(k, t->pl_lo[b], t->probs_lo, pb, false, u32(k, t->ldp));
        }
    }
    for (uint32_t i = 0; i < t->dm; i++) {
        if (t->probe & KF__ATTN_PROBE_KV_SHARED) {
            kf_sgmat_load(k, t->vr, t->probs, u32(k, 0), false, u32(k, t->ldp));
        } else if (t->staged) {
            kf_sgmat_load(k, t->vr, t->vtile, u32(k, j * MAT * t->ldk + i * MAT), false,
                          u32(k, t->ldk));
        } else {
            kf_sgmat_load_storage(k, t->vr, t->bv,
                                  kf_add(k, t->kv_at, u32(k, j * MAT * t->d + i * MAT)), false,
                                  u32(k, t->d));
        }
        for (uint32_t b = 0; b < t->rb; b++) {
            (fresh ? kf_sgmat_mul : kf_sgmat_mma)(k, t->ot[b * t->dm + i], t->pl[b], t->vr);
            if (t->split) {
                kf_sgmat_mma(k, t->ot[b * t->dm + i], t->pl_lo[b], t->vr);
            }
        }
    }
}

/* The subgroup's n result matrices of O (dm along D) into its pv, rows of lo floats apart. */
static void store_o(kf_kernel *k, kf_shared pv, kf_val o_at, const kf_sgmat *ot, uint32_t n,
                    uint32_t dm, uint32_t lo) {
    for (uint32_t i = 0; i < n; i++) {
        kf_sgmat_store(k, pv, kf_add(k, o_at, u32(k, i / dm * MAT * lo + i % dm * MAT)), ot[i],
                       false, u32(k, lo));
    }
}

/* lazy: where pending, O_reg = (O_reg + pv) alpha for the invocation's columns of its row. */
static void pending_into_registers(kf_kernel *k, kf_val pending, kf_var alpha, kf_shared pv,
                                   kf_val o_row, const kf_val *ocol, const kf_var *o_reg,
                                   uint32_t ocn) {
    kf_if(k, pending);
    kf_val al = kf_read(k, alpha);
    for (uint32_t e = 0; e < ocn; e++) {
        kf_val x = kf_shared_load(k, pv, kf_add(k, o_row, ocol[e]));
        kf_assign(k, o_reg[e], kf_mul(k, kf_add(k, kf_read(k, o_reg[e]), x), al));
    }
    kf_end(k);
}

static kf_kernel *online_kernel(const kf__attn_desc *a, uint32_t sg, uint32_t budget,
                                const kf__attn_sgmat_config *cfg) {
    const uint32_t w = cfg->subgroups ? cfg->subgroups : SUBGROUPS;
    const bool split = !cfg->hi_only, reload_q = cfg->reload_q, lazy = cfg->lazy;
    /* P's scale in its f16 matrices: lazy, P = exp(S - m_ref) reaches e^LAZY_TAU */
    const float p_scale = lazy ? LAZY_P_SCALE : P_SCALE;
    const uint32_t rb = cfg->row_blocks == 2 ? 2 : 1, R = MAT * rb, probe = cfg->probe;
    const uint32_t t = a->t, d = a->d, dp = d;
    if (w > 16 || w * sg > 1024 || sg < R || t < R || d % MAT || (cfg->keys && cfg->keys % MAT) ||
        cfg->keys > 64) {
        return NULL;
    }
    const uint32_t lpr = sg / R; /* invocations a row */
    /* staged where its tiles fit (or "/direct" says not): else k and v read from storage */
    bool staged = !cfg->direct;
    uint32_t bc = staged ? online_keys(cfg, w, R, t, dp, split, true, budget, w * sg) : 0;
    if (!bc) {
        staged = false;
        bc = online_keys(cfg, w, R, t, dp, split, false, budget, w * sg);
    }
    if (!bc || bc % lpr || dp % lpr) {
        return NULL;
    }
    const uint32_t per = bc / lpr, ocn = dp / lpr; /* a row's score and output columns each */
    if ((per & (per - 1)) || (ocn & (ocn - 1))) {
        return NULL; /* the rotation masks with n - 1 */
    }
    const uint32_t ls = bc + 4, lo_ = dp + 4, ldp = bc + PAD, rows = w * R;
    const uint32_t qtiles = (t + rows - 1) / rows, dm = dp / MAT, cm = bc / MAT;
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32), h = kf_type_scalar(KF_SCALAR_F16);
    kf_type u32t = kf_type_scalar(KF_SCALAR_U32);

    char name[88];
    snprintf(name, sizeof name, "attention_sgmat_%ux%u%s_online%s%s%s%s%s%s%s", rows, bc,
             split ? "" : "_hi", staged ? "" : "_direct", rb > 1 ? "_r2" : "",
             reload_q ? "_rq" : "", lazy ? "_lazy" : "", cfg->heavy_first && a->causal ? "_hf" : "",
             a->causal ? "_causal" : "", a->with_lse ? "_lse" : "");
    kf_kernel_desc desc = {.name = name, .workgroup_size = {w * sg, 1, 1}, .output = h};
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    uint32_t groups[3] = {qtiles * a->bh, 1, 1};
    kf_kernel_set_grid(k, groups);
    kf_binding bq = kf_kernel_storage(k, "q", h, KF_ACCESS_READ);
    /* staged: k and v read as vec4s (D % 16 == 0: whole rows of them) */
    kf_type kvt = staged ? kf_type_vec(KF_SCALAR_F16, 4) : h;
    kf_binding bk = kf_kernel_storage(k, "k", kvt, KF_ACCESS_READ);
    kf_binding bv = kf_kernel_storage(k, "v", kvt, KF_ACCESS_READ);
    kf_binding blse = {0};
    if (a->with_lse) {
        blse = kf_kernel_storage(k, "lse", f32, KF_ACCESS_READ_WRITE);
    }
    kf_shared scores = kf_kernel_workgroup(k, "scores", f32, rows * ls);
    kf_shared pv = kf_kernel_workgroup(k, "pv", f32, rows * lo_);
    const uint32_t ldk = dp + PAD; /* staged k and v rows, in halves */
    kf_shared ktile = {0}, vtile = {0};
    if (staged) {
        ktile = kf_kernel_workgroup(k, "ktile", h, bc * ldk);
        vtile = kf_kernel_workgroup(k, "vtile", h, bc * ldk);
    }
    kf_shared probs = kf_kernel_workgroup(k, "probs", h, rows * ldp);
    kf_shared probs_lo = {0};
    if (split) {
        probs_lo = kf_kernel_workgroup(k, "probs_lo", h, rows * ldp);
    }

    kf_val local = kf_let(k, "local", kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX));
    kf_val sgi = kf_let(k, "sgi", kf_div(k, local, u32(k, sg)));
    kf_val lane = kf_let(k, "lane", kf_binary(k, KF_OP_MOD, local, u32(k, sg)));
    kf_val wg = kf_let(k, "wg", kf_workgroup_linear(k));
    kf_val head = kf_let(k, "head", kf_div(k, wg, u32(k, qtiles)));
    /* heavy_first: causal rows past r0 see more keys, so the last tiles go first (the grid's
     * tail is then the light ones) */
    kf_val qtile = kf_binary(k, KF_OP_MOD, wg, u32(k, qtiles));
    if (cfg->heavy_first && a->causal) {
        qtile = kf_sub(k, u32(k, qtiles - 1), qtile);
    }
    kf_val r0 = kf_let(k, "r0", kf_mul(k, qtile, u32(k, rows)));
    kf_val head_row0 = kf_let(k, "head_row0", kf_mul(k, head, u32(k, t)));
    /* a subgroup reaching past T computes the last R rows again and writes none of them */
    kf_val sub_row0 = kf_let(k, "sub_row0", kf_add(k, r0, kf_mul(k, sgi, u32(k, R))));
    kf_val sub_base = kf_let(k, "sub_base", kf_call2(k, KF_FN_MIN, sub_row0, u32(k, t - R)));
    kf_val writes = kf_let(k, "writes", kf_binary(k, KF_OP_LT, sub_row0, u32(k, t)));
    kf_val rin = kf_let(k, "rin", kf_binary(k, KF_OP_MOD, lane, u32(k, R)));
    kf_val part = kf_let(k, "part", kf_div(k, lane, u32(k, R)));
    kf_val rot =
        kf_let(k, "rot", kf_binary(k, KF_OP_BIT_AND, kf_div(k, rin, u32(k, 8)), u32(k, 1)));
    kf_val row = kf_let(k, "row", kf_add(k, sub_base, rin));
    kf_val s_row =
        kf_let(k, "s_row", kf_mul(k, kf_add(k, kf_mul(k, sgi, u32(k, R)), rin), u32(k, ls)));
    kf_val o_row =
        kf_let(k, "o_row", kf_mul(k, kf_add(k, kf_mul(k, sgi, u32(k, R)), rin), u32(k, lo_)));
    kf_val p_row =
        kf_let(k, "p_row", kf_mul(k, kf_add(k, kf_mul(k, sgi, u32(k, R)), rin), u32(k, ldp)));
    kf_val s_at = kf_let(k, "s_at", kf_mul(k, sgi, u32(k, R * ls)));
    kf_val o_at = kf_let(k, "o_at", kf_mul(k, sgi, u32(k, R * lo_)));
    kf_val p_at = kf_let(k, "p_at", kf_mul(k, sgi, u32(k, R * ldp)));
    kf_val scol[64], ocol[128];
    owned_cols(k, part, rot, per, lpr, scol, "scol");
    owned_cols(k, part, rot, ocn, lpr, ocol, "ocol");

    /* q's matrices, held (or loaded again at each use: reload_q) */
    kf_sgmat ql[2 * MAX_D / MAT], sm[2 * 64 / MAT], ot[2 * MAX_D / MAT], pl[2], pl_lo[2] = {{0}};
    kf_val q_at = kf_let(k, "q_at", kf_mul(k, kf_add(k, head_row0, sub_base), u32(k, d)));
    for (uint32_t i = 0; i < (reload_q ? 1 : rb * dm); i++) {
        ql[i] = kf_sgmat_declare(k, "ql", KF_SGMAT_LEFT, KF_SCALAR_F16, MAT, MAT);
        if (!reload_q) {
            kf_sgmat_load_storage(k, ql[i], bq,
                                  kf_add(k, q_at, u32(k, i / dm * MAT * d + i % dm * MAT)), false,
                                  u32(k, d));
        }
    }
    kf_sgmat kr = kf_sgmat_declare(k, "kr", KF_SGMAT_RIGHT, KF_SCALAR_F16, MAT, MAT);
    kf_sgmat vr = kf_sgmat_declare(k, "vr", KF_SGMAT_RIGHT, KF_SCALAR_F16, MAT, MAT);
    kf_sgmat zero_l = {0}, zero_r = {0};
    if (lazy) {
        zero_l = kf_sgmat_declare(k, "zero_l", KF_SGMAT_LEFT, KF_SCALAR_F16, MAT, MAT);
        zero_r = kf_sgmat_declare(k, "zero_r", KF_SGMAT_RIGHT, KF_SCALAR_F16, MAT, MAT);
    }
    for (uint32_t j = 0; j < rb * cm; j++) {
        sm[j] = kf_sgmat_declare(k, "s", KF_SGMAT_RESULT, KF_SCALAR_F32, MAT, MAT);
    }
    for (uint32_t i = 0; i < rb * dm; i++) {
        ot[i] = kf_sgmat_declare(k, "ot", KF_SGMAT_RESULT, KF_SCALAR_F32, MAT, MAT);
    }
    for (uint32_t b = 0; b < rb; b++) {
        pl[b] = kf_sgmat_declare(k, "pl", KF_SGMAT_LEFT, KF_SCALAR_F16, MAT, MAT);
        if (split) {
            pl_lo[b] = kf_sgmat_declare(k, "pl_lo", KF_SGMAT_LEFT, KF_SCALAR_F16, MAT, MAT);
        }
    }
    kf_var m_run = kf_declare(k, "m_run", f32, kf_lit_f32(k, NEG_BIG));
    kf_var l_run = kf_declare(k, "l_run", f32, kf_lit_f32(k, 0));
    /* alpha of the tile whose P V is in the scratch (0 before the first: O_reg is 0 anyway) */
    kf_var alpha_v = kf_declare(k, "alpha", f32, kf_lit_f32(k, 0));
    kf_var o_reg[128];
    for (uint32_t e = 0; e < ocn; e++) {
        o_reg[e] = kf_declare(k, "o", f32, kf_lit_f32(k, 0));
    }
    kf_var first = kf_declare(k, "first", kf_type_scalar(KF_SCALAR_BOOL), kf_lit_bool(k, true));
    /* lazy: the maximum P is taken against (the row's, as of the subgroup's last rescale);
     * whether the tile rescales (the same in the whole subgroup), so that pv holds O as of then
     * from its P V on, until the next tile (or the end) adds it into O_reg (times alpha) */
    kf_var m_ref = {0}, pending = {0};
    if (lazy) {
        m_ref = kf_declare(k, "m_ref", f32, kf_lit_f32(k, NEG_BIG));
        pending = kf_declare(k, "pending", kf_type_scalar(KF_SCALAR_BOOL), kf_lit_bool(k, false));
    }

    kf_val end = u32(k, t);
    if (a->causal) {
        end = kf_let(k, "end", kf_call2(k, KF_FN_MIN, kf_add(k, r0, u32(k, rows)), u32(k, t)));
    }
    if (staged) { /* the first tile's k */
        staged_rows k0 = stage_fetch(k, bk, local, w * sg, head_row0, bc, d, ldk);
        stage_put(k, &k0, ktile);
        kf_barrier(k);
    }
    kf_val c0 = kf_for(k, "c0", u32(k, 0), end, u32(k, bc));
    {
        kf_val kv_at = kf_let(k, "kv_at", kf_mul(k, kf_add(k, head_row0, c0), u32(k, d)));
        /* S = q k^T, R x bc, into the subgroup's scores */
        for (uint32_t j = 0; j < (probe & KF__ATTN_PROBE_NO_QK ? 0 : cm); j++) {
            for (uint32_t i = 0; i < dm; i++) {
                if (probe & KF__ATTN_PROBE_KV_SHARED) {
                    kf_sgmat_load(k, kr, probs, u32(k, 0), true, u32(k, ldp));
                } else if (staged) {
                    kf_sgmat_load(k, kr, ktile, u32(k, j * MAT * ldk + i * MAT), true, u32(k, ldk));
                } else {
                    kf_sgmat_load_storage(k, kr, bk,
                                          kf_add(k, kv_at, u32(k, j * MAT * d + i * MAT)), true,
                                          u32(k, d));
                }
                for (uint32_t b = 0; b < rb; b++) {
                    if (reload_q) {
                        kf_sgmat_load_storage(k, ql[0], bq,
                                              kf_add(k, q_at, u32(k, b * MAT * d + i * MAT)), false,
                                              u32(k, d));
                    }
                    kf_sgmat q = ql[reload_q ? 0 : b * dm + i];
                    (i ? kf_sgmat_mma : kf_sgmat_mul)(k, sm[b * cm + j], q, kr);
                }
            }
            for (uint32_t b = 0; b < rb; b++) {
                kf_sgmat_store(k, scores, kf_add(k, s_at, u32(k, b * MAT * ls + j * MAT)),
                               sm[b * cm + j], false, u32(k, ls));
            }
        }
        if (!(probe & KF__ATTN_PROBE_NO_BARRIERS)) {
            kf_barrier(k); /* (1) the scores, and the previous tile's P V */
        }
        /* the next tile's k (the last tile fetches its own again, never read) and this tile's v */
        staged_rows kn = {0}, vn = {0};
        if (staged) {
            kf_val next = kf_call2(k, KF_FN_MIN, kf_add(k, c0, u32(k, bc)), u32(k, t - bc));
            kn = stage_fetch(k, bk, local, w * sg, kf_add(k, head_row0, next), bc, d, ldk);
            vn = stage_fetch(k, bv, local, w * sg, kf_add(k, head_row0, c0), bc, d, ldk);
        }
        if (!(probe & KF__ATTN_PROBE_NO_SOFTMAX)) {
            /* the previous tile's P V into the registers (lazy: O as of the last rescale, when
             * the previous tile rescaled) */
            if (lazy) {
                pending_into_registers(k, kf_read(k, pending), alpha_v, pv, o_row, ocol, o_reg,
                                       ocn);
            } else {
                kf_if(k, kf_unary(k, KF_OP_NOT, kf_read(k, first)));
                kf_val al = kf_read(k, alpha_v);
                for (uint32_t e = 0; e < ocn; e++) {
                    kf_val x = kf_shared_load(k, pv, kf_add(k, o_row, ocol[e]));
                    kf_assign(k, o_reg[e], kf_call3(k, KF_FN_FMA, kf_read(k, o_reg[e]), al, x));
                }
                kf_end(k);
                kf_assign(k, first, kf_lit_bool(k, false));
            }
            /* this invocation's scores: scaled, masked, its max, the row's (shuffles) */
            kf_val x[64], keep[64] = {{0, 0}};
            kf_val m = kf_read(k, m_run);
            for (uint32_t c = 0; c < per; c++) {
                x[c] = kf_mul(k, kf_shared_load(k, scores, kf_add(k, s_row, scol[c])),
                              kf_lit_f32(k, a->scale));
                if (a->causal) {
                    keep[c] = kf_binary(k, KF_OP_LE, kf_add(k, c0, scol[c]), row);
                    x[c] = kf_select(k, kf_lit_f32(k, NEG_BIG), x[c], keep[c]);
                }
                x[c] = kf_let(k, "x", x[c]);
                m = kf_call2(k, KF_FN_MAX, m, x[c]);
            }
            m = kf_let(k, "m_mine", m);
            for (uint32_t s = R; s < sg; s *= 2) {
                kf_val other = kf_subgroup(k, KF_SUBGROUP_SHUFFLE, m,
                                           kf_binary(k, KF_OP_BIT_XOR, lane, u32(k, s)));
                m = kf_let(k, "m_row", kf_call2(k, KF_FN_MAX, m, other));
            }
            /* P's reference: the new maximum; lazy: the one of the last rescale, unless a row
             * of the subgroup grew past it by more than LAZY_TAU, then the new one */
            kf_val ref = m, alpha;
            if (lazy) {
                kf_val old = kf_read(k, m_ref);
                kf_val growth = kf_subgroup(k, KF_SUBGROUP_MAX, kf_sub(k, m, old), (kf_val){0, 0});
                kf_val now = kf_let(k, "rescale_now",
                                    kf_binary(k, KF_OP_GT, growth, kf_lit_f32(k, LAZY_TAU)));
                ref = kf_let(k, "ref", kf_select(k, old, m, now));
                alpha = kf_let(k, "alpha_new", kf_call1(k, KF_FN_EXP, kf_sub(k, old, ref)));
                kf_assign(k, pending, now);
                kf_assign(k, m_ref, ref);
            } else {
                alpha =
                    kf_let(k, "alpha_new", kf_call1(k, KF_FN_EXP, kf_sub(k, kf_read(k, m_run), m)));
            }
            kf_val sum = kf_lit_f32(k, 0);
            for (uint32_t c = 0; c < per; c++) {
                kf_val pr = kf_call1(k, KF_FN_EXP, kf_sub(k, x[c], ref));
                if (a->causal) {
                    pr = kf_select(k, kf_lit_f32(k, 0), pr, keep[c]);
                }
                pr = kf_let(k, "p", pr);
                sum = kf_add(k, sum, pr);
                /* scaled by 2^14 (lazy: 2^13) and split as the two-pass kernel does (its
                 * comments say why) */
                pr = kf_mul(k, pr, kf_lit_f32(k, p_scale));
                kf_val hi, lo = {0, 0};
                if (split) {
                    kf_val bits =
                        kf_binary(k, KF_OP_BIT_AND, kf_bitcast(k, u32t, pr), u32(k, 0xffffe000u));
                    kf_val hi32 = kf_let(k, "p_hi32", kf_bitcast(k, f32, bits));
                    hi = kf_cast(k, h, hi32);
                    lo = kf_cast(k, h, kf_sub(k, pr, hi32));
                } else {
                    hi = kf_cast(k, h, pr);
                }
                kf_val at = kf_add(k, p_row, scol[c]);
                kf_shared_store(k, probs, at, hi);
                if (split) {
                    kf_shared_store(k, probs_lo, at, lo);
                }
            }
            kf_assign(k, l_run, kf_call3(k, KF_FN_FMA, kf_read(k, l_run), alpha, sum));
            kf_assign(k, m_run, m);
            kf_assign(k, alpha_v, alpha);
        }
        if (staged) {
            stage_put(k, &kn, ktile);
            stage_put(k, &vn, vtile);
        }
        if (!(probe & KF__ATTN_PROBE_NO_BARRIERS)) {
            kf_barrier(k); /* (2) P, and the next tile's k and this tile's v */
        }
        /* O_tile = P V into fresh result matrices, stored to the subgroup's pv; lazy: added to
         * O's result matrices, which go to pv first (and start again) where this tile rescales */
        const pv_tile pt = {.pl = pl,
                            .pl_lo = pl_lo,
                            .ot = ot,
                            .vr = vr,
                            .probs = probs,
                            .probs_lo = probs_lo,
                            .vtile = vtile,
                            .bv = bv,
                            .p_at = p_at,
                            .kv_at = kv_at,
                            .ldp = ldp,
                            .ldk = ldk,
                            .d = d,
                            .dm = dm,
                            .rb = rb,
                            .split = split,
                            .staged = staged,
                            .probe = probe};
        if (!(probe & KF__ATTN_PROBE_NO_PV)) {
            if (lazy) {
                /* O to pv and the result matrices zeroed (times the zero matrices, which are
                 * never loaded), under a condition the same in the whole subgroup */
                kf_if(k, kf_read(k, pending));
                store_o(k, pv, o_at, ot, rb * dm, dm, lo_);
                for (uint32_t i = 0; i < rb * dm; i++) {
                    kf_sgmat_mul(k, ot[i], zero_l, zero_r);
                }
                kf_end(k);
            }
            for (uint32_t j = 0; j < cm; j++) {
                pv_keys(k, &pt, j, j == 0 && !lazy);
            }
            if (!lazy) {
                store_o(k, pv, o_at, ot, rb * dm, dm, lo_);
            }
        }
    }
    kf_end(k);
    kf_barrier(k); /* the last tile's P V (lazy: O as of the last rescale) */
    if (lazy) {    /* then what accumulated since, through pv too */
        pending_into_registers(k, kf_read(k, pending), alpha_v, pv, o_row, ocol, o_reg, ocn);
        kf_barrier(k);
        store_o(k, pv, o_at, ot, rb * dm, dm, lo_);
        kf_barrier(k);
    }
    /* the row's sum over its invocations; O = O_reg / (l 2^14), into pv for a coalesced store */
    kf_val l = kf_read(k, l_run);
    for (uint32_t s = R; s < sg; s *= 2) {
        kf_val other =
            kf_subgroup(k, KF_SUBGROUP_SHUFFLE, l, kf_binary(k, KF_OP_BIT_XOR, lane, u32(k, s)));
        l = kf_let(k, "l_row", kf_add(k, l, other));
    }
    kf_val inv = kf_let(k, "inv", kf_div(k, kf_lit_f32(k, 1.0f / p_scale), l));
    {
        kf_val al = lazy ? kf_lit_f32(k, 1) : kf_read(k, alpha_v);
        for (uint32_t e = 0; e < ocn; e++) {
            kf_val at = kf_add(k, o_row, ocol[e]);
            kf_val o = kf_call3(k, KF_FN_FMA, kf_read(k, o_reg[e]), al, kf_shared_load(k, pv, at));
            kf_shared_store(k, pv, at, kf_mul(k, o, inv));
        }
    }
    kf_val own = kf_let(
        k, "own",
        rb > 1 ? kf_binary(k, KF_OP_AND, writes, kf_binary(k, KF_OP_GE, row, sub_row0)) : writes);
    if (a->with_lse) {
        kf_if(k, kf_binary(k, KF_OP_AND, kf_binary(k, KF_OP_EQ, part, u32(k, 0)), own));
        kf_store(k, blse, kf_add(k, head_row0, row),
                 kf_add(k, kf_read(k, lazy ? m_ref : m_run), kf_call1(k, KF_FN_LOG, l)));
        kf_end(k);
    }
    kf_barrier(k);
    /* the store phase: the subgroup's R x D rows, consecutive invocations along a row */
    for (uint32_t e = 0; e < R * dp / sg; e++) {
        kf_val flat = kf_add(k, lane, u32(k, e * sg));
        kf_val r = kf_div(k, flat, u32(k, dp)), c = kf_binary(k, KF_OP_MOD, flat, u32(k, dp));
        kf_val orow = kf_add(k, sub_base, r);
        kf_val inside =
            rb > 1 ? kf_binary(k, KF_OP_AND, writes, kf_binary(k, KF_OP_GE, orow, sub_row0))
                   : writes;
        kf_if(k, inside);
        kf_val value =
            kf_shared_load(k, pv, kf_add(k, o_at, kf_add(k, kf_mul(k, r, u32(k, lo_)), c)));
        kf_val index = kf_add(k, kf_mul(k, kf_add(k, head_row0, orow), u32(k, d)), c);
        kf_kernel_yield(k, kf_cast(k, h, value), index);
        kf_end(k);
    }
    return k;
}

kf_kernel *kf__attention_sgmat(const kf__attn_desc *a, uint32_t sg, uint32_t wg_bytes) {
    return kf__attention_sgmat_config(a, sg, wg_bytes, NULL);
}

bool kf__attention_sgmat_config_parse(const char *text, kf__attn_sgmat_config *out) {
    kf__attn_sgmat_config c = {0};
    int used = 0;
    if (!text || sscanf(text, "%ux%u%n", &c.subgroups, &c.keys, &used) != 2) {
        return false;
    }
    for (const char *p = text + used; *p;) {
        if (!strncmp(p, "/hi", 3) && (!p[3] || p[3] == '/') && !c.hi_only) {
            c.hi_only = true;
            p += 3;
        } else if (!strncmp(p, "/direct", 7) && (!p[7] || p[7] == '/') && !c.direct) {
            c.direct = true;
            p += 7;
        } else if (!strncmp(p, "/rq", 3) && (!p[3] || p[3] == '/') && !c.reload_q) {
            c.reload_q = true;
            p += 3;
        } else if (!strncmp(p, "/hf", 3) && (!p[3] || p[3] == '/') && !c.heavy_first) {
            c.heavy_first = true;
            p += 3;
        } else if (!strncmp(p, "/lz", 3) && (!p[3] || p[3] == '/') && !c.lazy) {
            c.lazy = true;
            p += 3;
        } else if (!strncmp(p, "/r2", 3) && (!p[3] || p[3] == '/') && !c.row_blocks) {
            c.row_blocks = 2;
            p += 3;
        } else if (p[0] == '/' && p[1] == 'p' && !c.probe &&
                   sscanf(p, "/p%u%n", &c.probe, &used) == 1 && (!p[used] || p[used] == '/')) {
            p += used;
        } else if (!strncmp(p, "/on", 3) && (!p[3] || p[3] == '/') && !c.online) {
            c.online = true;
            p += 3;
        } else {
            return false;
        }
    }
    *out = c;
    return true;
}

kf_kernel *kf__attention_sgmat_config(const kf__attn_desc *a, uint32_t sg, uint32_t wg_bytes,
                                      const kf__attn_sgmat_config *cfg) {
    if (!a || !a->bh || !a->t || !a->d || a->d > MAX_D || sg < MAT || sg > 128 || (sg & (sg - 1))) {
        return NULL;
    }
    if (cfg && cfg->online) {
        return online_kernel(a, sg, wg_bytes && wg_bytes < WG_MEMORY ? wg_bytes : WG_MEMORY, cfg);
    }
    /* The default, from the one H200 sweep there is (bench/h200_attention.sh, taken with the
     * result matrices not yet reset per tile, so the numbers are indicative only): at D 64,
     * 16-key tiles ran 5x faster than 32 and 64 (8 subgroups 2.6 ms, 4: 3.0, against 13-14 at
     * T 4096); at D 128 the 32-key tile of 4 subgroups was the fastest (8.4 ms). */
    const uint32_t w = cfg && cfg->subgroups ? cfg->subgroups : a->d <= 64 ? 8u : SUBGROUPS;
    const bool split = !(cfg && cfg->hi_only);
    const uint32_t probe = cfg ? cfg->probe : 0;
    /* q, k and v read as matrices straight from storage (no staging, no barrier for it): whole
     * 16-row blocks only, so T a multiple of 16 (and of the key tile) and D of 16 */
    const bool direct = cfg && cfg->direct;
    /* direct: q's matrices loaded again for each tile instead of held (D / 16 left matrices
     * fewer live per subgroup: at D 128 the held ones and the output's result matrices seem to
     * spill on the H200, which takes 10x D 64's time there) */
    const bool reload_q = direct && cfg->reload_q;
    /* 16-row blocks of q per subgroup, 1 or 2 (two share each k and v matrix loaded) */
    const uint32_t rb = cfg && cfg->row_blocks == 2 ? 2 : 1, R = MAT * rb;
    if (w > 16 || w * sg > 1024 || (cfg && cfg->keys && (cfg->keys % MAT || cfg->keys > 64))) {
        return NULL;
    }
    const uint32_t t = a->t, d = a->d, dp = (d + MAT - 1) / MAT * MAT, ld = dp + PAD;
    const uint32_t budget = wg_bytes && wg_bytes < WG_MEMORY ? wg_bytes : WG_MEMORY;
    if (sg < R || (direct && t < R)) {
        return NULL;
    }
    const uint32_t lanes_per_row = sg / R, threads = w * sg, rows = w * R;
    uint32_t bc = cfg && cfg->keys ? cfg->keys : a->d <= 64 ? 16u : 64u;
    while (bc > MAT && (memory_for(w, bc, dp, split, direct, R) > budget || (direct && t % bc))) {
        bc /= 2;
    }
    if (memory_for(w, bc, dp, split, direct, R) > budget || bc % lanes_per_row ||
        (direct && (t % bc || d % MAT))) {
        return NULL;
    }
    const uint32_t per = bc / lanes_per_row; /* score columns per invocation */
    const uint32_t ldp = bc + PAD;
    const uint32_t qtiles = (t + rows - 1) / rows;
    const uint32_t dm = dp / MAT, cm = bc / MAT; /* matrices along D and along the tile */
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32), h = kf_type_scalar(KF_SCALAR_F16);
    kf_type u32t = kf_type_scalar(KF_SCALAR_U32);

    char name[64];
    snprintf(name, sizeof name, "attention_sgmat_%ux%u%s%s%s%s%s", rows, bc, split ? "" : "_hi",
             direct ? "_direct" : "", rb > 1 ? "_r2" : "", a->causal ? "_causal" : "",
             a->with_lse ? "_lse" : "");
    kf_kernel_desc desc = {.name = name, .workgroup_size = {threads, 1, 1}, .output = h};
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    uint32_t groups[3] = {qtiles * a->bh, 1, 1};
    kf_kernel_set_grid(k, groups);
    kf_binding bq = kf_kernel_storage(k, "q", h, KF_ACCESS_READ);
    kf_binding bk = kf_kernel_storage(k, "k", h, KF_ACCESS_READ);
    kf_binding bv = kf_kernel_storage(k, "v", h, KF_ACCESS_READ);
    kf_binding blse = {0};
    if (a->with_lse) {
        blse = kf_kernel_storage(k, "lse", kf_type_scalar(KF_SCALAR_F32), KF_ACCESS_READ_WRITE);
    }
    const uint32_t tiles_len = 2 * bc > rows ? 2 * bc * ld : rows * ld;
    kf_shared tiles = {0};
    if (!direct) {
        tiles = kf_kernel_workgroup(k, "tiles", h, tiles_len);
    }
    /* direct: two halves, a tile's scores in the one its parity picks, so the next tile's
     * store needs no barrier after this tile's reads */
    kf_shared scratch = kf_kernel_workgroup(k, "scores", f32, (direct ? 2 : 1) * rows * bc);
    kf_shared probs = kf_kernel_workgroup(k, "probs", h, rows * ldp);
    kf_shared probs_lo = {0};
    if (split) {
        probs_lo = kf_kernel_workgroup(k, "probs_lo", h, rows * ldp);
    }

    kf_val local = kf_let(k, "local", kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX));
    kf_val sgi = kf_let(k, "sgi", kf_div(k, local, u32(k, sg)));
    kf_val lane = kf_let(k, "lane", kf_binary(k, KF_OP_MOD, local, u32(k, sg)));
    kf_val wg = kf_let(k, "wg", kf_workgroup_linear(k));
    kf_val head = kf_let(k, "head", kf_div(k, wg, u32(k, qtiles)));
    kf_val r0 =
        kf_let(k, "r0", kf_mul(k, kf_binary(k, KF_OP_MOD, wg, u32(k, qtiles)), u32(k, rows)));
    kf_val head_row0 = kf_let(k, "head_row0", kf_mul(k, head, u32(k, t)));
    /* the subgroup's first row: direct, clamped to the last R rows (a subgroup reaching past T
     * computes rows before its own again and writes only its own, rows sub_row0 on) */
    kf_val sub_row0 = kf_let(k, "sub_row0", kf_add(k, r0, kf_mul(k, sgi, u32(k, R))));
    kf_val sub_base = sub_row0, writes = {0, 0};
    if (direct) {
        sub_base = kf_let(k, "sub_base", kf_call2(k, KF_FN_MIN, sub_row0, u32(k, t - R)));
        writes = kf_let(k, "writes", kf_binary(k, KF_OP_LT, sub_row0, u32(k, t)));
    }
    /* this invocation's row of the subgroup's R, and its share of a tile's columns */
    kf_val rin = kf_let(k, "rin", kf_binary(k, KF_OP_MOD, lane, u32(k, R)));
    kf_val part = kf_let(k, "part", kf_div(k, lane, u32(k, R)));
    kf_val row = kf_let(k, "row", kf_add(k, sub_base, rin));
    kf_val rowc = kf_let(k, "rowc", kf_call2(k, KF_FN_MIN, row, u32(k, t - 1)));
    kf_val my_scores = kf_let(k, "my_scores", kf_mul(k, sgi, u32(k, R * bc)));
    kf_val score_row = kf_let(k, "score_row", kf_add(k, my_scores, kf_mul(k, rin, u32(k, bc))));
    kf_val first_col = kf_let(k, "first_col", kf_mul(k, part, u32(k, per)));

    /* q's rows, once, through the tile memory */
    /* a 16x16 block of zeros to reset result matrices from (see the S loop) */
    kf_shared zeros = kf_kernel_workgroup(k, "zeros", f32, MAT * MAT);
    {
        kf_val e = kf_for(k, "z", local, u32(k, MAT * MAT), u32(k, threads));
        kf_shared_store(k, zeros, e, kf_lit_f32(k, 0));
        kf_end(k);
    }
    /* ql[b * dm + i]: row block b's i-th left matrix of q */
    kf_sgmat ql[2 * MAX_D / MAT], sm[2 * 64 / MAT], pl[2] = {{0}}, pl_lo[2] = {{0}}, vr = {0}, kr;
    kf_val q_at = {0, 0};
    if (direct) {
        q_at = kf_let(k, "q_at", kf_mul(k, kf_add(k, head_row0, sub_base), u32(k, d)));
        for (uint32_t i = 0; i < (reload_q ? 1 : rb * dm); i++) {
            ql[i] = kf_sgmat_declare(k, "ql", KF_SGMAT_LEFT, KF_SCALAR_F16, MAT, MAT);
            if (!reload_q) {
                uint32_t at = i / dm * MAT * d + i % dm * MAT;
                kf_sgmat_load_storage(k, ql[i], bq, kf_add(k, q_at, u32(k, at)), false, u32(k, d));
            }
        }
        kf_barrier(k); /* the zeros */
    } else {
        stage(k, bq, tiles, 0, local, threads, head_row0, r0, rows, t, d, dp);
        kf_barrier(k);
        kf_val qat = kf_let(k, "q_at", kf_mul(k, sgi, u32(k, R * ld)));
        for (uint32_t i = 0; i < rb * dm; i++) {
            ql[i] = kf_sgmat_declare(k, "ql", KF_SGMAT_LEFT, KF_SCALAR_F16, MAT, MAT);
            kf_sgmat_load(k, ql[i], tiles, kf_add(k, qat, u32(k, i / dm * MAT * ld + i % dm * MAT)),
                          false, u32(k, ld));
        }
        kf_barrier(k);
    }
    kr = kf_sgmat_declare(k, "kr", KF_SGMAT_RIGHT, KF_SCALAR_F16, MAT, MAT);
    for (uint32_t j = 0; j < rb * cm; j++) {
        sm[j] = kf_sgmat_declare(k, "s", KF_SGMAT_RESULT, KF_SCALAR_F32, MAT, MAT);
    }

    kf_val end = u32(k, t);
    if (a->causal) {
        end = kf_let(k, "end", kf_call2(k, KF_FN_MIN, kf_add(k, r0, u32(k, rows)), u32(k, t)));
    }
    kf_var m_run = kf_declare(k, "m_run", f32, kf_lit_f32(k, NEG_BIG));
    kf_var l_run = kf_declare(k, "l_run", f32, kf_lit_f32(k, 0));
    kf_val lse = {0, 0};
    kf_sgmat acc[2 * MAX_D / MAT]; /* acc[b * dm + i] */
    for (int pass = 1; pass <= 2; pass++) {
        if (pass == 2) {
            for (uint32_t i = 0; i < rb * dm; i++) {
                acc[i] = kf_sgmat_declare(k, "acc", KF_SGMAT_RESULT, KF_SCALAR_F32, MAT, MAT);
                kf_sgmat_load(k, acc[i], zeros, u32(k, 0), false, u32(k, MAT));
            }
            for (uint32_t b = 0; b < rb; b++) {
                pl[b] = kf_sgmat_declare(k, "pl", KF_SGMAT_LEFT, KF_SCALAR_F16, MAT, MAT);
                if (split) {
                    pl_lo[b] = kf_sgmat_declare(k, "pl_lo", KF_SGMAT_LEFT, KF_SCALAR_F16, MAT, MAT);
                }
            }
            vr = kf_sgmat_declare(k, "vr", KF_SGMAT_RIGHT, KF_SCALAR_F16, MAT, MAT);
        }
        kf_val c0 = kf_for(k, pass == 1 ? "c0" : "c1", u32(k, 0), end, u32(k, bc));
        {
            /* where this tile's scores go (direct: the half of the scratch its parity picks) */
            kf_val sc_at = my_scores, sc_row = score_row;
            kf_val kv_at = {0, 0};
            if (direct) {
                kf_val half = kf_let(
                    k, "half",
                    kf_mul(k, kf_binary(k, KF_OP_BIT_AND, kf_div(k, c0, u32(k, bc)), u32(k, 1)),
                           u32(k, rows * bc)));
                sc_at = kf_let(k, "sc_at", kf_add(k, my_scores, half));
                sc_row = kf_let(k, "sc_row", kf_add(k, score_row, half));
                kv_at = kf_let(k, "kv_at", kf_mul(k, kf_add(k, head_row0, c0), u32(k, d)));
            } else {
                stage(k, bk, tiles, 0, local, threads, head_row0, c0, bc, t, d, dp);
                if (pass == 2) {
                    stage(k, bv, tiles, bc * ld, local, threads, head_row0, c0, bc, t, d, dp);
                }
                kf_barrier(k);
            }
            /* S = q k^T, 16 x bc, into this subgroup's scratch */
            for (uint32_t j = 0; j < cm; j++) {
                /* zeroed by a load, not by its declaration: on the H200 a result matrix declared
                 * in the loop kept the previous tile's sums (Tint hoists the variable; the
                 * interpreter re-zeroes it at the declaration) */
                for (uint32_t b = 0; b < rb; b++) {
                    kf_sgmat_load(k, sm[b * cm + j], zeros, u32(k, 0), false, u32(k, MAT));
                }
                for (uint32_t i = 0; i < dm; i++) {
                    if (direct) {
                        kf_sgmat_load_storage(k, kr, bk,
                                              kf_add(k, kv_at, u32(k, j * MAT * d + i * MAT)), true,
                                              u32(k, d));
                    } else {
                        kf_sgmat_load(k, kr, tiles, u32(k, j * MAT * ld + i * MAT), true,
                                      u32(k, ld));
                    }
                    for (uint32_t b = 0; b < rb; b++) {
                        if (reload_q) {
                            kf_sgmat_load_storage(k, ql[0], bq,
                                                  kf_add(k, q_at, u32(k, b * MAT * d + i * MAT)),
                                                  false, u32(k, d));
                        }
                        kf_sgmat_mma(k, sm[b * cm + j], ql[reload_q ? 0 : b * dm + i], kr);
                    }
                }
                for (uint32_t b = 0; b < rb; b++) {
                    kf_sgmat_store(k, scratch, kf_add(k, sc_at, u32(k, b * MAT * bc + j * MAT)),
                                   sm[b * cm + j], false, u32(k, bc));
                }
            }
            kf_barrier(k);
            /* this invocation's columns of its row: scaled, masked */
            kf_val x[64], keep[64];
            for (uint32_t c = 0; c < per; c++) {
                kf_val col = kf_add(k, first_col, u32(k, c));
                kf_val key = kf_add(k, c0, col);
                x[c] = kf_mul(k, kf_shared_load(k, scratch, kf_add(k, sc_row, col)),
                              kf_lit_f32(k, a->scale));
                keep[c] = kf_binary(k, KF_OP_LT, key, u32(k, t));
                if (a->causal) {
                    keep[c] = kf_binary(k, KF_OP_AND, keep[c], kf_binary(k, KF_OP_LE, key, rowc));
                }
                x[c] = kf_let(k, "x", kf_select(k, kf_lit_f32(k, NEG_BIG), x[c], keep[c]));
            }
            if (pass == 1) {
                kf_val m = kf_read(k, m_run);
                for (uint32_t c = 0; c < per; c++) {
                    m = kf_call2(k, KF_FN_MAX, m, x[c]);
                }
                kf_val m_new = kf_let(k, "m_new", m);
                kf_val sum = kf_lit_f32(k, 0);
                for (uint32_t c = 0; c < per; c++) {
                    kf_val e = kf_call1(k, KF_FN_EXP, kf_sub(k, x[c], m_new));
                    sum = kf_add(k, sum, kf_select(k, kf_lit_f32(k, 0), e, keep[c]));
                }
                kf_val alpha = kf_call1(k, KF_FN_EXP, kf_sub(k, kf_read(k, m_run), m_new));
                kf_assign(k, l_run, kf_call3(k, KF_FN_FMA, kf_read(k, l_run), alpha, sum));
                kf_assign(k, m_run, m_new);
            } else {
                kf_val prow = kf_let(k, "prow",
                                     kf_add(k, kf_mul(k, sgi, u32(k, R * ldp)),
                                            kf_add(k, kf_mul(k, rin, u32(k, ldp)), first_col)));
                for (uint32_t c = 0; c < per; c++) {
                    kf_val pr = kf_call1(k, KF_FN_EXP, kf_sub(k, x[c], lse));
                    pr = kf_select(k, kf_lit_f32(k, 0), pr, keep[c]);
                    /* P scaled by 2^14 (at most 16384, below f16's 65504): the H200 flushes f16
                     * subnormals (below 2^-14), which would drop lo (2^-12 of P) for P under
                     * 0.25 and hi for P under 2^-14; scaled, only P under 2^-28 is lost */
                    if (!(probe & KF__ATTN_PROBE_NO_SCALE)) {
                        pr = kf_mul(k, pr, kf_lit_f32(k, P_SCALE));
                    }
                    kf_val hi, lo;
                    if (!split || (probe & KF__ATTN_PROBE_LO_CAST)) {
                        hi = kf_let(k, "p_hi", kf_cast(k, h, pr));
                        lo = kf_cast(k, h, kf_sub(k, pr, kf_cast(k, f32, hi)));
                    } else {
                        /* hi: pr with the 13 low bits of its f32 mantissa cleared, 11 bits that
                         * f16 holds exactly, so lo = pr - hi is exact in f32 whatever the
                         * compiler makes of f16 casts. Not f16(pr) and pr - f32(f16(pr)): on
                         * the H200 that lo was lost (session 5's failing element, o[0][3] of
                         * the GPU test at T 15, D 8, was bit for bit the interpreter's hi-only
                         * result: the round trip folded away), leaving P one f16 rounding */
                        kf_val bits = kf_binary(k, KF_OP_BIT_AND, kf_bitcast(k, u32t, pr),
                                                u32(k, 0xffffe000u));
                        kf_val hi32 = kf_let(k, "p_hi32", kf_bitcast(k, f32, bits));
                        hi = kf_cast(k, h, hi32);
                        lo = kf_cast(k, h, kf_sub(k, pr, hi32));
                    }
                    kf_val at = c ? kf_add(k, prow, u32(k, c)) : prow;
                    kf_shared_store(k, probs, at, hi);
                    if (split) {
                        kf_shared_store(k, probs_lo, at, lo);
                    }
                }
                kf_barrier(k);
                /* O += P V */
                kf_val pat = kf_let(k, "p_at", kf_mul(k, sgi, u32(k, R * ldp)));
                for (uint32_t j = 0; j < cm; j++) {
                    for (uint32_t b = 0; b < rb; b++) {
                        kf_val pb = kf_add(k, pat, u32(k, b * MAT * ldp + j * MAT));
                        kf_sgmat_load(k, pl[b], probs, pb, false, u32(k, ldp));
                        if (split) {
                            kf_sgmat_load(k, pl_lo[b], probs_lo, pb, false, u32(k, ldp));
                        }
                    }
                    for (uint32_t i = 0; i < dm; i++) {
                        if (direct) {
                            kf_sgmat_load_storage(k, vr, bv,
                                                  kf_add(k, kv_at, u32(k, j * MAT * d + i * MAT)),
                                                  false, u32(k, d));
                        } else {
                            kf_sgmat_load(k, vr, tiles, u32(k, bc * ld + j * MAT * ld + i * MAT),
                                          false, u32(k, ld));
                        }
                        for (uint32_t b = 0; b < rb; b++) {
                            if (!(probe & KF__ATTN_PROBE_LO_ONLY)) {
                                kf_sgmat_mma(k, acc[b * dm + i], pl[b], vr);
                            }
                            if (split) {
                                kf_sgmat_mma(k, acc[b * dm + i], pl_lo[b], vr);
                            }
                        }
                    }
                }
                /* the next tile overwrites k's and v's tiles and P (direct: P is stored after
                 * the next tile's first barrier, and its scores go to the other half) */
                if (!direct) {
                    kf_barrier(k);
                }
            }
        }
        kf_end(k);
        if (pass == 1) {
            /* every invocation's (max, sum) over its columns -> the row's lse */
            kf_barrier(k);
            if (lanes_per_row > 1) {
                kf_val at = kf_let(k, "stat_at", kf_mul(k, local, u32(k, 2)));
                kf_shared_store(k, scratch, at, kf_read(k, m_run));
                kf_shared_store(k, scratch, kf_add(k, at, u32(k, 1)), kf_read(k, l_run));
                kf_barrier(k);
                /* the row's first invocation: sgi * sg + rin */
                kf_val base =
                    kf_let(k, "stat_row",
                           kf_mul(k, kf_add(k, kf_mul(k, sgi, u32(k, sg)), rin), u32(k, 2)));
                kf_val ms[8], ls[8];
                kf_val m = kf_lit_f32(k, NEG_BIG);
                for (uint32_t q = 0; q < lanes_per_row; q++) {
                    kf_val at2 = kf_add(k, base, u32(k, q * R * 2));
                    ms[q] = kf_let(k, "mq", kf_shared_load(k, scratch, at2));
                    ls[q] = kf_let(k, "lq", kf_shared_load(k, scratch, kf_add(k, at2, u32(k, 1))));
                    m = kf_call2(k, KF_FN_MAX, m, ms[q]);
                }
                kf_val mt = kf_let(k, "m_row", m);
                kf_val l = kf_lit_f32(k, 0);
                for (uint32_t q = 0; q < lanes_per_row; q++) {
                    l = kf_call3(k, KF_FN_FMA, ls[q], kf_call1(k, KF_FN_EXP, kf_sub(k, ms[q], mt)),
                                 l);
                }
                lse = kf_let(k, "lse", kf_add(k, mt, kf_call1(k, KF_FN_LOG, l)));
                /* pass 2 stores its scores after its first barrier, when the scratch is free;
                 * direct, it has none before that store (the race detector found it) */
                if (direct) {
                    kf_barrier(k);
                }
            } else {
                lse =
                    kf_let(k, "lse",
                           kf_add(k, kf_read(k, m_run), kf_call1(k, KF_FN_LOG, kf_read(k, l_run))));
            }
        }
    }

    /* direct: this subgroup's own rows only (sub_row0 on, before T) */
    kf_val own = {0, 0};
    if (direct) {
        own = rb > 1
                  ? kf_let(k, "own",
                           kf_binary(k, KF_OP_AND, writes, kf_binary(k, KF_OP_GE, row, sub_row0)))
                  : writes;
    }
    if (a->with_lse) {
        kf_if(k, kf_binary(k, KF_OP_AND, kf_binary(k, KF_OP_EQ, part, u32(k, 0)),
                           direct ? own : kf_binary(k, KF_OP_LT, row, u32(k, t))));
        kf_store(k, blse, kf_add(k, head_row0, row), lse); /* f32: attention.c says why */
        kf_end(k);
    }

    /* the store phase: one 16x16 matrix of O per round through the scratch */
    const uint32_t elems = MAT * MAT / sg;
    for (uint32_t bi = 0; bi < rb * dm; bi++) {
        const uint32_t b = bi / dm, i = bi % dm;
        kf_sgmat_store(k, scratch, my_scores, acc[bi], false, u32(k, MAT));
        kf_barrier(k);
        for (uint32_t e = 0; e < elems; e++) {
            kf_val flat = kf_add(k, lane, u32(k, e * sg));
            kf_val r = kf_div(k, flat, u32(k, MAT)), c = kf_binary(k, KF_OP_MOD, flat, u32(k, MAT));
            kf_val orow = kf_add(k, sub_base, b ? kf_add(k, r, u32(k, b * MAT)) : r);
            kf_val ocol = kf_add(k, c, u32(k, i * MAT));
            kf_val inside =
                !direct  ? kf_binary(k, KF_OP_LT, orow, u32(k, t))
                : rb > 1 ? kf_binary(k, KF_OP_AND, writes, kf_binary(k, KF_OP_GE, orow, sub_row0))
                         : writes;
            if ((i + 1) * MAT > d) {
                inside = kf_binary(k, KF_OP_AND, inside, kf_binary(k, KF_OP_LT, ocol, u32(k, d)));
            }
            kf_if(k, inside);
            kf_val value = kf_shared_load(k, scratch, kf_add(k, my_scores, flat));
            kf_val index = kf_add(k, kf_mul(k, kf_add(k, head_row0, orow), u32(k, d)), ocol);
            if (!(probe & KF__ATTN_PROBE_NO_SCALE)) {
                value = kf_mul(k, value, kf_lit_f32(k, 1.0f / P_SCALE));
            }
            kf_kernel_yield(k, kf_cast(k, h, value), index);
            kf_end(k);
        }
        kf_barrier(k); /* the next round overwrites the scratch */
    }
    return k;
}

/* The default where measured faster than the FMA kernels, and correct. The one-pass kernel
 * (online_kernel) where it builds and the device has subgroups (H200, session 10,
 * bench/h200_s10_attn.sh, f16, causal, T 4096: D 64 4x32/on 1.27 ms against the two-pass 8x16
 * kernel's 2.77; D 128 2x32/on 3.36 against direct 4x16's 8.3; T 1024 B 4: 0.203 against 0.422
 * and 0.520 against 4.13). Else the two-pass kernels (H200, session 6, bench/h200_attn_probe.sh:
 * D 64 staged 8x16 2.77 ms against the register-tiled FMA kernel's 5.68; D 128 direct 4x16
 * 8.12 against 12.75) where T and D are multiples of 16 at D > 64, else the FMA kernels.
 * $KF_ATTN_SGMAT: "0" never (as KF_NO_SGMAT=1), "1" the two-pass default configuration at every
 * D, a configuration (WxC[/hi][/direct][/rq][/r2][/on][/hf][/pN]) that one. */
kf_kernel *kf__attention_sgmat_for(kf_context *ctx, const kf__attn_desc *a) {
    const char *env = getenv("KF_ATTN_SGMAT");
    bool asked = env && *env && strcmp(env, "0") != 0;
    kf__attn_sgmat_config cfg = {0};
    bool use_cfg = asked && kf__attention_sgmat_config_parse(env, &cfg);
    uint32_t sg = 0;
    if ((env && !strcmp(env, "0")) || !kf__sgmat_usable(ctx, &sg)) {
        return NULL;
    }
    kf_adapter_info info;
    if (kf_context_adapter_info(ctx, &info) != KF_OK) {
        return NULL;
    }
    const uint32_t budget = info.max_compute_workgroup_storage_size;
    /* the one-pass kernel combines a row's invocations by subgroup shuffles */
    if (use_cfg && cfg.online && !info.has_subgroups) {
        return NULL;
    }
    if (!asked && info.has_subgroups) {
        kf__attn_sgmat_config on = {.subgroups = a->d <= 64 ? 4 : 2, .keys = 32, .online = true};
        kf_kernel *k = kf__attention_sgmat_config(a, sg, budget, &on);
        if (k) {
            return k;
        }
    }
    if (!asked && a->d > 64) {
        if (a->t % MAT || a->d % MAT) {
            return NULL;
        }
        cfg = (kf__attn_sgmat_config){.subgroups = 4, .keys = 16, .direct = true};
        use_cfg = true;
    }
    return kf__attention_sgmat_config(a, sg, budget, use_cfg ? &cfg : NULL);
}
