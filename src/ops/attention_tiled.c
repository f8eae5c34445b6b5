/* Attention forward on FMA units with register tiles (FlashAttention's structure on CUDA cores),
 * for f32 and f16 storage, f32 compute.
 *
 * A workgroup of tx x ty invocations (default 16 x 16) owns br = ty rm query rows of one head
 * (64); invocation (x, y) owns rows rm y .. rm y + rm - 1 and, of each tile of bc = tx cn keys
 * (32), keys x, x + tx, ...: an rm x cn block (4 x 2) of the scores S = q k^T, accumulated in
 * registers over D in chunks of C (32, or 16 when D > 64; D itself when D <= 32; in another
 * tiling than the default, one chunk stages q once for all key tiles) staged in workgroup memory
 * (q's br x C and k's bc x C), so each FMA costs (rm + cn) / (rm cn) workgroup loads instead of
 * 2. The block goes, scaled and masked,
 * to a br x bc tile in workgroup memory, where one invocation per row runs the online softmax
 * over the tile's columns (the running max and sum, the rescale alpha for the row, P in place of
 * S). Then every invocation rescales and accumulates its rm rows x D / tx output columns,
 * O = alpha O + P V, from P and v's tile (bc x D, staged beside the scores). Causal tiles past
 * the workgroup's last row are never visited (the loop bound is uniform over the workgroup);
 * rows past T compute row T - 1 and are not written. The default tiling takes 29 KiB of
 * workgroup memory at D 64 (within lavapipe's 32); $KF_ATTN_TILED picks another for measuring,
 * with vec4 rows (vec) or the softmax run by the scores' owners (dist: kf__attn_tiled_config).
 */
#include "ops/attention_sgmat.h"
#include "ops/ops_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RM 8u  /* rows per invocation */
#define MAX_CN 4u  /* keys per invocation per tile */
#define MIN_TX 8u  /* invocations along keys / output columns */
#define MAX_D 128u /* the largest head dimension */
#define MAX_OC (MAX_D / MIN_TX)
#define NEG_BIG -3.0e38f

static kf_val u32(kf_kernel *k, uint32_t v) {
    return kf_lit_u32(k, v);
}

/* The staging's fixed parts: a head's rows, the width of a staged element (1: f32, 4: vec4),
 * the workgroup. */
typedef struct stage_geometry {
    uint32_t t, d, w, threads;
    kf_val lid;
} stage_geometry;

/* The operand of input i (row over all heads): q, k or v's binding and its layout, NULL where it
 * is row-major, else a strided view read in place (kf__attn_desc.layouts). */
typedef struct tiled_operand {
    kf_binding b;
    const kf__strided *layout;
} tiled_operand;

static tiled_operand operand_of(const kf__attn_desc *a, uint32_t i, kf_binding b) {
    return (tiled_operand){b, a->layouts && a->layouts[i].rank ? &a->layouts[i] : NULL};
}

/* Rows first .. first + rows - 1 of one head (clamped to its last row), columns d0 .. d0 + cols
 * - 1 (d0 0: none; clamped to D where `clamp`, zero past D where `ragged`), of operand o into sh
 * as elements of g->w columns at stride `stride` elements a row; every invocation takes a
 * share. */
static void stage_chunk(kf_kernel *k, kf_shared sh, tiled_operand o, kf_dtype dtype,
                        kf_val head_row0, kf_val first, uint32_t rows, kf_val d0, uint32_t cols,
                        uint32_t stride, bool clamp, bool ragged, const stage_geometry *g) {
    const uint32_t units = (cols + g->w - 1) / g->w;
    kf_val e = kf_for(k, "e", g->lid, u32(k, rows * units), u32(k, g->threads));
    kf_val r = kf_div(k, e, u32(k, units)), c = kf_binary(k, KF_OP_MOD, e, u32(k, units));
    kf_val row =
        kf_add(k, head_row0, kf_call2(k, KF_FN_MIN, kf_add(k, first, r), u32(k, g->t - 1)));
    kf_val base = g->w == 1 ? c : kf_mul(k, c, u32(k, g->w));
    if (d0.id) {
        base = kf_add(k, d0, base);
    }
    kf_val lanes[4];
    for (uint32_t i = 0; i < g->w; i++) {
        kf_val col = i ? kf_add(k, base, u32(k, i)) : base;
        kf_val cc = clamp ? kf_call2(k, KF_FN_MIN, col, u32(k, g->d - 1)) : col;
        kf_val at = o.layout ? kf__strided_at(k, o.layout, row, cc)
                             : kf_add(k, kf_mul(k, row, u32(k, g->d)), cc);
        lanes[i] = kf__load_f32(k, o.b, at, dtype);
        if (ragged) {
            lanes[i] =
                kf_select(k, kf_lit_f32(k, 0), lanes[i], kf_binary(k, KF_OP_LT, col, u32(k, g->d)));
        }
    }
    kf_val x = g->w == 1 ? lanes[0] : kf_vec(k, kf_type_vec(KF_SCALAR_F32, 4), lanes, 4);
    kf_shared_store(k, sh, kf_add(k, kf_mul(k, r, u32(k, stride)), c), x);
    kf_end(k);
}

/* n lanes as one value: a vector of n, or the scalar itself when n is 1; lane i of it; x in
 * every lane. */
static kf_val lanes_of(kf_kernel *k, kf_type vr, const kf_val *v, uint32_t n) {
    return n == 1 ? v[0] : kf_vec(k, vr, v, n);
}
static kf_val lane_of(kf_kernel *k, kf_val v, uint32_t i, uint32_t n) {
    return n == 1 ? v : kf_extract(k, v, i);
}
static kf_val splat_of(kf_kernel *k, kf_type vr, kf_val x, uint32_t n) {
    return n == 1 ? x : kf_splat(k, vr, x);
}

/* D columns staged at a time: the configuration's, else D up to 32, 32 up to 64, 16 above. */
static uint32_t chunk_of(const kf__attn_tiled_config *c, uint32_t d) {
    if (c->chunk) {
        return c->chunk < d ? c->chunk : d;
    }
    return d <= 32 ? d : d <= 64 ? 32u : 16u;
}

uint32_t kf__attention_tiled_bytes(const kf__attn_tiled_config *c, uint32_t d) {
    uint32_t w = c->vec ? 4u : 1u, br = c->ty * c->rm, bc = c->tx * c->cn;
    uint32_t cs = (chunk_of(c, d) + w - 1) / w + 1, vs = (d + w - 1) / w + 1;
    uint32_t softmax =
        c->dist ? c->rm * (bc * (c->ty + 1) + 2u * c->ty * (c->tx + 1)) : br * (bc + 1) + br;
    return 4u * w * (br * cs + bc * cs + bc * vs) + 4u * softmax;
}

static bool config_valid(const kf__attn_tiled_config *c, uint32_t d) {
    return c->tx >= MIN_TX && c->tx <= 64 && c->ty >= 1 && c->tx * c->ty <= 256 && c->rm >= 1 &&
           c->rm <= MAX_RM && c->cn >= 1 && c->cn <= MAX_CN && c->tx * c->ty >= c->ty * c->rm &&
           (d + c->tx - 1) / c->tx <= MAX_OC &&
           (!c->vec || chunk_of(c, d) % 4 == 0 || chunk_of(c, d) == d) &&
           (!c->dist || c->rm == 1 || c->rm == 2 || c->rm == 4);
}

bool kf__attention_tiled_config_parse(const char *text, kf__attn_tiled_config *out) {
    unsigned tx, ty, rm, cn, chunk = 0;
    int n = text ? sscanf(text, "%u,%u,%u,%u,%u", &tx, &ty, &rm, &cn, &chunk) : 0;
    if (n < 4) {
        return false;
    }
    *out = (kf__attn_tiled_config){
        tx, ty, rm, cn, n == 5 ? chunk : 0, strstr(text, "/v") != NULL, strstr(text, "/d") != NULL};
    return true;
}

const kf__attn_tiled_config kf__attn_tiled_default = {16, 16, 4, 2, 0, false, false};
const kf__attn_tiled_config kf__attn_tiled_wide = {8, 16, 4, 4, 64, true, true};

kf_kernel *kf__attention_tiled(const kf__attn_desc *a, kf_dtype dtype) {
    return kf__attention_tiled_config(a, dtype, &kf__attn_tiled_default, 0);
}

kf_kernel *kf__attention_tiled_config(const kf__attn_desc *a, kf_dtype dtype,
                                      const kf__attn_tiled_config *cfg, uint32_t wg_bytes) {
    if (!a || !cfg || !a->bh || !a->t || !a->d || a->d > MAX_D ||
        (dtype != KF_DTYPE_F32 && dtype != KF_DTYPE_F16) || !config_valid(cfg, a->d) ||
        (wg_bytes && kf__attention_tiled_bytes(cfg, a->d) > wg_bytes)) {
        return NULL;
    }
    const uint32_t t = a->t, d = a->d;
    const uint32_t tx = cfg->tx, ty = cfg->ty, rm = cfg->rm, cn = cfg->cn;
    const uint32_t br = ty * rm, bc = tx * cn; /* rows a workgroup, keys a tile */
    const uint32_t chunk = chunk_of(cfg, d);
    const uint32_t chunks = (d + chunk - 1) / chunk;
    /* w columns an element of the staged rows (vec: 4) */
    const uint32_t w = cfg->vec ? 4u : 1u;
    const uint32_t cw = (chunk + w - 1) / w, dw = (d + w - 1) / w; /* elements a chunk, a row */
    const uint32_t cs = cw + 1, vs = dw + 1, ss = bc + 1;          /* padded rows, in elements */
    const uint32_t oc = (dw + tx - 1) / tx; /* output elements an invocation */
    /* another tiling than the default names itself (for the benchmarks' tables) */
    const kf__attn_tiled_config *def = &kf__attn_tiled_default;
    const bool named = tx != def->tx || ty != def->ty || rm != def->rm || cn != def->cn ||
                       cfg->chunk != def->chunk || cfg->vec != def->vec || cfg->dist != def->dist;
    /* one chunk: q's rows staged once, before the key tiles (not yet in the default tiling: to
     * be measured) */
    const bool q_once = chunks == 1 && named;
    const uint32_t qtiles = (t + br - 1) / br, threads = tx * ty;
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32), el = kf_type_vec(KF_SCALAR_F32, 4);
    if (w == 1) {
        el = f32;
    }

    char name[80], tiling[40] = "";
    if (named) {
        snprintf(tiling, sizeof tiling, "_%ux%ux%ux%u_c%u%s%s", tx, ty, rm, cn, chunk,
                 cfg->vec ? "_v" : "", cfg->dist ? "_d" : "");
    }
    snprintf(name, sizeof name, "attention_tiled%s%s%s", tiling, a->causal ? "_causal" : "",
             a->with_lse ? "_lse" : "");
    kf_kernel_desc desc = {
        .name = name, .workgroup_size = {tx, ty, 1}, .output = kf__dtype_type(dtype)};
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    uint32_t groups[3] = {qtiles * a->bh, 1, 1};
    kf_kernel_set_grid(k, groups);
    kf_binding bq = kf__bind(k, "q", dtype, KF_ACCESS_READ);
    kf_binding bk = kf__bind(k, "k", dtype, KF_ACCESS_READ);
    kf_binding bv = kf__bind(k, "v", dtype, KF_ACCESS_READ);
    const tiled_operand oq = operand_of(a, 0, bq), ok = operand_of(a, 1, bk),
                        ov = operand_of(a, 2, bv);
    kf_binding blse = {0};
    if (a->with_lse) {
        blse = kf__bind(k, "lse", KF_DTYPE_F32, KF_ACCESS_READ_WRITE); /* f32 whatever q is */
    }
    kf_shared sq = kf_kernel_workgroup(k, "q_chunk", el, br * cs);
    kf_shared sk = kf_kernel_workgroup(k, "k_chunk", el, bc * cs);
    kf_shared sv = kf_kernel_workgroup(k, "v_tile", el, bc * vs);
    /* the softmax: one invocation a row over the scores' tile (sp, salpha), or (dist) the scores'
     * owners, through their rows' partial maxima and sums (smax, ssum: [ty][tx + 1] vectors of
     * rm rows) into P transposed (spt: column j's rm rows of invocation row y at j (ty + 1) + y) */
    const bool dist = cfg->dist;
    const uint32_t ts = ty + 1, xs = tx + 1;
    kf_type vr = rm == 1 ? f32 : kf_type_vec(KF_SCALAR_F32, rm);
    kf_shared sp = {0}, salpha = {0}, spt = {0}, smax = {0}, ssum = {0};
    if (dist) {
        spt = kf_kernel_workgroup(k, "probs_t", vr, bc * ts);
        smax = kf_kernel_workgroup(k, "row_max", vr, ty * xs);
        ssum = kf_kernel_workgroup(k, "row_sum", vr, ty * xs);
    } else {
        sp = kf_kernel_workgroup(k, "scores", f32, br * ss);
        salpha = kf_kernel_workgroup(k, "alpha", f32, br);
    }

    kf_val local = kf_builtin_get(k, KF_BUILTIN_LOCAL_ID);
    kf_val lx = kf_let(k, "lx", kf_extract(k, local, 0));
    kf_val ly = kf_let(k, "ly", kf_extract(k, local, 1));
    kf_val lid = kf_let(k, "lid", kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX));
    kf_val wg = kf_let(k, "wg", kf_workgroup_linear(k));
    kf_val head = kf_let(k, "head", kf_div(k, wg, u32(k, qtiles)));
    kf_val r0 = kf_let(k, "r0", kf_mul(k, kf_binary(k, KF_OP_MOD, wg, u32(k, qtiles)), u32(k, br)));
    kf_val head_row0 = kf_let(k, "head_row0", kf_mul(k, head, u32(k, t)));
    kf_val my_r = kf_let(k, "my_r", kf_mul(k, ly, u32(k, rm))); /* first of my rows in the tile */
    kf_val rowc[MAX_RM];
    for (uint32_t i = 0; i < rm; i++) {
        rowc[i] = kf_let(
            k, "rowc",
            kf_call2(k, KF_FN_MIN, kf_add(k, r0, kf_add(k, my_r, u32(k, i))), u32(k, t - 1)));
    }
    /* the row whose softmax this invocation runs (lid < 64) */
    kf_val stat_rowc =
        kf_let(k, "stat_rowc", kf_call2(k, KF_FN_MIN, kf_add(k, r0, lid), u32(k, t - 1)));
    kf_val is_stat = kf_let(k, "is_stat", kf_binary(k, KF_OP_LT, lid, u32(k, br)));

    /* the running max and sum: of the row lid (dist: of my rm rows, the same in every lx) */
    kf_type run_t = dist ? vr : f32;
    kf_var m_run =
        kf_declare(k, "m_run", run_t, splat_of(k, vr, kf_lit_f32(k, NEG_BIG), dist ? rm : 1));
    kf_var l_run = kf_declare(k, "l_run", run_t, splat_of(k, vr, kf_lit_f32(k, 0), dist ? rm : 1));
    kf_var acc[MAX_RM][MAX_OC];
    for (uint32_t i = 0; i < rm; i++) {
        for (uint32_t c = 0; c < oc; c++) {
            kf_val zero = kf_lit_f32(k, 0);
            acc[i][c] = kf_declare(k, "acc", el, w == 1 ? zero : kf_splat(k, el, zero));
        }
    }
    kf_val end = u32(k, t);
    if (a->causal) {
        end = kf_let(k, "end", kf_call2(k, KF_FN_MIN, kf_add(k, r0, u32(k, br)), u32(k, t)));
    }
    const stage_geometry g = {t, d, w, threads, lid};
    const bool ragged = chunks * chunk != d || d % w != 0; /* columns past D staged as zeros */
    if (q_once) {
        stage_chunk(k, sq, oq, dtype, head_row0, r0, br, (kf_val){0, 0}, chunk, cs, true, ragged,
                    &g);
    }
    kf_val c0 = kf_for(k, "c0", u32(k, 0), end, u32(k, bc));
    {
        /* 1. S = q k^T for my rm x cn block, over D chunk by chunk */
        kf_var s[MAX_RM][MAX_CN];
        for (uint32_t i = 0; i < rm; i++) {
            for (uint32_t j = 0; j < cn; j++) {
                s[i][j] = kf_declare(k, "s", f32, kf_lit_f32(k, 0));
            }
        }
        kf_val d0 = kf_for(k, "d0", u32(k, 0), u32(k, chunks * chunk), u32(k, chunk));
        {
            if (!q_once) {
                stage_chunk(k, sq, oq, dtype, head_row0, r0, br, d0, chunk, cs, true, ragged, &g);
            }
            stage_chunk(k, sk, ok, dtype, head_row0, c0, bc, d0, chunk, cs, true, ragged, &g);
            kf_barrier(k);
            /* loops, not unrolled code: lavapipe's compile time grows with a kernel's size (15 s
             * unrolled at D 128), and GPU compilers unroll constant trip counts themselves */
            kf_val c = kf_for(k, "c", u32(k, 0), u32(k, cw), u32(k, 1));
            {
                kf_val qv[MAX_RM], kv[MAX_CN];
                for (uint32_t i = 0; i < rm; i++) {
                    qv[i] = kf_shared_load(
                        k, sq, kf_add(k, kf_mul(k, kf_add(k, my_r, u32(k, i)), u32(k, cs)), c));
                }
                for (uint32_t j = 0; j < cn; j++) {
                    kv[j] = kf_shared_load(
                        k, sk, kf_add(k, kf_mul(k, kf_add(k, lx, u32(k, j * tx)), u32(k, cs)), c));
                }
                for (uint32_t i = 0; i < rm; i++) {
                    for (uint32_t j = 0; j < cn; j++) {
                        kf_val prev = kf_read(k, s[i][j]);
                        kf_assign(k, s[i][j],
                                  w == 1 ? kf_call3(k, KF_FN_FMA, qv[i], kv[j], prev)
                                         : kf_add(k, prev, kf_call2(k, KF_FN_DOT, qv[i], kv[j])));
                    }
                }
            }
            kf_end(k);
            kf_barrier(k);
        }
        kf_end(k);

        /* 2. the block, scaled and masked, into the scores (dist: kept, its rows' maxima into
         * smax); v's tile beside it */
        kf_val xsc[MAX_RM][MAX_CN], keeps[MAX_RM][MAX_CN], pm[MAX_RM];
        for (uint32_t i = 0; dist && i < rm; i++) {
            for (uint32_t j = 0; j < cn; j++) {
                kf_val key = kf_add(k, c0, kf_add(k, lx, u32(k, j * tx)));
                kf_val keep = kf_binary(k, KF_OP_LT, key, u32(k, t));
                if (a->causal) {
                    keep = kf_binary(k, KF_OP_AND, keep, kf_binary(k, KF_OP_LE, key, rowc[i]));
                }
                keeps[i][j] = kf_let(k, "keep", keep);
                kf_val x = kf_mul(k, kf_read(k, s[i][j]), kf_lit_f32(k, a->scale));
                xsc[i][j] = kf_let(k, "x", kf_select(k, kf_lit_f32(k, NEG_BIG), x, keeps[i][j]));
                pm[i] = j ? kf_call2(k, KF_FN_MAX, pm[i], xsc[i][j]) : xsc[i][j];
            }
        }
        if (dist) {
            kf_shared_store(k, smax, kf_add(k, kf_mul(k, ly, u32(k, xs)), lx),
                            lanes_of(k, vr, pm, rm));
        }
        for (uint32_t i = 0; !dist && i < rm; i++) {
            for (uint32_t j = 0; j < cn; j++) {
                kf_val key = kf_add(k, c0, kf_add(k, lx, u32(k, j * tx)));
                kf_val keep = kf_binary(k, KF_OP_LT, key, u32(k, t));
                if (a->causal) {
                    keep = kf_binary(k, KF_OP_AND, keep, kf_binary(k, KF_OP_LE, key, rowc[i]));
                }
                kf_val x = kf_mul(k, kf_read(k, s[i][j]), kf_lit_f32(k, a->scale));
                kf_val at = kf_add(k, kf_mul(k, kf_add(k, my_r, u32(k, i)), u32(k, ss)),
                                   kf_add(k, lx, u32(k, j * tx)));
                kf_shared_store(k, sp, at, kf_select(k, kf_lit_f32(k, NEG_BIG), x, keep));
            }
        }
        stage_chunk(k, sv, ov, dtype, head_row0, c0, bc, (kf_val){0, 0}, d, vs, d % w != 0,
                    d % w != 0, &g);
        kf_barrier(k);

        /* 3. the online softmax over the tile's columns: (dist) every invocation for its rows
         * from the maxima in smax, P transposed into spt and its rows' partial sums into ssum;
         * else one invocation per row over the scores */
        kf_val alpha_d = {0, 0};
        if (dist) {
            kf_var mt = kf_declare(k, "m_tile", vr, kf_read(k, m_run));
            kf_val row_at = kf_let(k, "row_at", kf_mul(k, ly, u32(k, xs)));
            kf_val l1 = kf_for(k, "l", u32(k, 0), u32(k, tx), u32(k, 1));
            kf_assign(k, mt,
                      kf_call2(k, KF_FN_MAX, kf_read(k, mt),
                               kf_shared_load(k, smax, kf_add(k, row_at, l1))));
            kf_end(k);
            kf_val m_new = kf_let(k, "m_new", kf_read(k, mt));
            alpha_d =
                kf_let(k, "alpha", kf_call1(k, KF_FN_EXP, kf_sub(k, kf_read(k, m_run), m_new)));
            kf_val prs[MAX_RM][MAX_CN], ps[MAX_RM];
            for (uint32_t i = 0; i < rm; i++) {
                kf_val mi = lane_of(k, m_new, i, rm);
                for (uint32_t j = 0; j < cn; j++) {
                    kf_val pr = kf_call1(k, KF_FN_EXP, kf_sub(k, xsc[i][j], mi));
                    /* masked: 0 (where the row has seen no key yet its max is NEG_BIG too) */
                    prs[i][j] = kf_let(k, "p", kf_select(k, kf_lit_f32(k, 0), pr, keeps[i][j]));
                    ps[i] = j ? kf_add(k, ps[i], prs[i][j]) : prs[i][j];
                }
            }
            for (uint32_t j = 0; j < cn; j++) {
                kf_val col[MAX_RM];
                for (uint32_t i = 0; i < rm; i++) {
                    col[i] = prs[i][j];
                }
                kf_val at = kf_add(k, kf_mul(k, kf_add(k, lx, u32(k, j * tx)), u32(k, ts)), ly);
                kf_shared_store(k, spt, at, lanes_of(k, vr, col, rm));
            }
            kf_shared_store(k, ssum, kf_add(k, row_at, lx), lanes_of(k, vr, ps, rm));
            kf_assign(k, m_run, m_new);
        }
        if (!dist) {
            kf_if(k, is_stat);
        }
        if (!dist) {
            kf_val base = kf_let(k, "srow", kf_mul(k, lid, u32(k, ss)));
            kf_var mv = kf_declare(k, "m_tile", f32, kf_read(k, m_run));
            kf_val j1 = kf_for(k, "j", u32(k, 0), u32(k, bc), u32(k, 1));
            kf_assign(
                k, mv,
                kf_call2(k, KF_FN_MAX, kf_read(k, mv), kf_shared_load(k, sp, kf_add(k, base, j1))));
            kf_end(k);
            kf_val m_new = kf_let(k, "m_new", kf_read(k, mv));
            kf_var sum_v = kf_declare(k, "sum", f32, kf_lit_f32(k, 0));
            kf_val j2 = kf_for(k, "j", u32(k, 0), u32(k, bc), u32(k, 1));
            {
                kf_val at = kf_add(k, base, j2);
                kf_val xj = kf_shared_load(k, sp, at);
                kf_val pr = kf_call1(k, KF_FN_EXP, kf_sub(k, xj, m_new));
                /* a masked score is NEG_BIG: exp of it minus a real max is 0; but where the row
                 * has seen no key yet the max is NEG_BIG too, so mask explicitly */
                pr = kf_let(k, "p",
                            kf_select(k, pr, kf_lit_f32(k, 0),
                                      kf_binary(k, KF_OP_LE, xj, kf_lit_f32(k, NEG_BIG))));
                kf_assign(k, sum_v, kf_add(k, kf_read(k, sum_v), pr));
                kf_shared_store(k, sp, at, pr);
            }
            kf_end(k);
            kf_val sum = kf_read(k, sum_v);
            kf_val alpha =
                kf_let(k, "alpha", kf_call1(k, KF_FN_EXP, kf_sub(k, kf_read(k, m_run), m_new)));
            kf_shared_store(k, salpha, lid, alpha);
            kf_assign(k, l_run, kf_call3(k, KF_FN_FMA, kf_read(k, l_run), alpha, sum));
            kf_assign(k, m_run, m_new);
            kf_end(k);
        }
        kf_barrier(k);
        if (dist) {
            kf_var lt = kf_declare(k, "l_tile", vr, splat_of(k, vr, kf_lit_f32(k, 0), rm));
            kf_val l2 = kf_for(k, "l", u32(k, 0), u32(k, tx), u32(k, 1));
            kf_assign(k, lt,
                      kf_add(k, kf_read(k, lt),
                             kf_shared_load(k, ssum, kf_add(k, kf_mul(k, ly, u32(k, xs)), l2))));
            kf_end(k);
            kf_assign(k, l_run, kf_add(k, kf_mul(k, kf_read(k, l_run), alpha_d), kf_read(k, lt)));
        }

        /* 4. O = alpha O + P V for my rm rows x D / tx columns */
        kf_val cols[MAX_OC];
        for (uint32_t c = 0; c < oc; c++) {
            cols[c] = kf_call2(k, KF_FN_MIN, kf_add(k, lx, u32(k, c * tx)), u32(k, dw - 1));
        }
        for (uint32_t i = 0; i < rm; i++) {
            kf_val al = dist ? lane_of(k, alpha_d, i, rm)
                             : kf_shared_load(k, salpha, kf_add(k, my_r, u32(k, i)));
            for (uint32_t c = 0; c < oc; c++) {
                kf_assign(k, acc[i][c],
                          kf_mul(k, kf_read(k, acc[i][c]), w == 1 ? al : kf_splat(k, el, al)));
            }
        }
        kf_val j = kf_for(k, "j", u32(k, 0), u32(k, bc), u32(k, 1));
        {
            kf_val pv[MAX_RM], vv[MAX_OC];
            kf_val pcol = {0, 0};
            if (dist) {
                pcol = kf_let(k, "pcol",
                              kf_shared_load(k, spt, kf_add(k, kf_mul(k, j, u32(k, ts)), ly)));
            }
            for (uint32_t i = 0; i < rm; i++) {
                pv[i] = dist ? lane_of(k, pcol, i, rm)
                             : kf_shared_load(
                                   k, sp,
                                   kf_add(k, kf_mul(k, kf_add(k, my_r, u32(k, i)), u32(k, ss)), j));
                if (w != 1) {
                    pv[i] = kf_splat(k, el, pv[i]);
                }
            }
            for (uint32_t c = 0; c < oc; c++) {
                vv[c] = kf_shared_load(k, sv, kf_add(k, kf_mul(k, j, u32(k, vs)), cols[c]));
            }
            for (uint32_t i = 0; i < rm; i++) {
                for (uint32_t c = 0; c < oc; c++) {
                    kf_assign(k, acc[i][c],
                              kf_call3(k, KF_FN_FMA, pv[i], vv[c], kf_read(k, acc[i][c])));
                }
            }
        }
        kf_end(k);
        /* the next tile overwrites the chunks, v's tile, the scores and alpha */
        kf_barrier(k);
    }
    kf_end(k);

    /* each row's 1 / l through alpha's slots; lse from the row's own invocation (dist: both
     * from my own rows' statistics, lse from lx 0) */
    if (!dist) {
        kf_if(k, is_stat);
        kf_shared_store(k, salpha, lid, kf_div(k, kf_lit_f32(k, 1), kf_read(k, l_run)));
        if (a->with_lse) {
            kf_if(k, kf_binary(k, KF_OP_LT, kf_add(k, r0, lid), u32(k, t)));
            kf__store_f32(k, blse, kf_add(k, head_row0, stat_rowc),
                          kf_add(k, kf_read(k, m_run), kf_call1(k, KF_FN_LOG, kf_read(k, l_run))),
                          KF_DTYPE_F32);
            kf_end(k);
        }
        kf_end(k);
        kf_barrier(k);
    }
    kf_val m_fin = dist ? kf_let(k, "m_fin", kf_read(k, m_run)) : (kf_val){0, 0};
    kf_val l_fin = dist ? kf_let(k, "l_fin", kf_read(k, l_run)) : (kf_val){0, 0};
    for (uint32_t i = 0; dist && a->with_lse && i < rm; i++) {
        kf_val row = kf_add(k, r0, kf_add(k, my_r, u32(k, i)));
        kf_if(k, kf_binary(k, KF_OP_AND, kf_binary(k, KF_OP_LT, row, u32(k, t)),
                           kf_binary(k, KF_OP_EQ, lx, u32(k, 0))));
        kf__store_f32(
            k, blse, kf_add(k, head_row0, row),
            kf_add(k, lane_of(k, m_fin, i, rm), kf_call1(k, KF_FN_LOG, lane_of(k, l_fin, i, rm))),
            KF_DTYPE_F32);
        kf_end(k);
    }
    for (uint32_t i = 0; i < rm; i++) {
        kf_val row = kf_add(k, r0, kf_add(k, my_r, u32(k, i)));
        kf_val inv_l =
            dist ? kf_let(k, "inv_l", kf_div(k, kf_lit_f32(k, 1), lane_of(k, l_fin, i, rm)))
                 : kf_shared_load(k, salpha, kf_add(k, my_r, u32(k, i)));
        kf_if(k, kf_binary(k, KF_OP_LT, row, u32(k, t)));
        for (uint32_t c = 0; c < oc; c++) {
            kf_val col = kf_add(k, lx, u32(k, c * tx)); /* an element: w columns */
            bool part = (c + 1) * tx > dw;
            if (part) {
                kf_if(k, kf_binary(k, KF_OP_LT, col, u32(k, dw)));
            }
            kf_val at = kf_add(k, kf_mul(k, kf_add(k, head_row0, row), u32(k, d)),
                               w == 1 ? col : kf_mul(k, col, u32(k, w)));
            kf_val o = w == 1 ? kf_read(k, acc[i][c]) : kf_let(k, "o", kf_read(k, acc[i][c]));
            for (uint32_t lane = 0; lane < w; lane++) {
                kf_val x = w == 1 ? o : kf_extract(k, o, lane);
                /* the last element's lanes past D (D not a multiple of 4) */
                bool past = d % w && lane >= d % w && (c + 1) * tx >= dw;
                if (past) {
                    kf_if(k,
                          kf_binary(k, KF_OP_LT, kf_add(k, kf_mul(k, col, u32(k, w)), u32(k, lane)),
                                    u32(k, d)));
                }
                kf__yield_f32(k, kf_mul(k, x, inv_l), lane ? kf_add(k, at, u32(k, lane)) : at,
                              dtype);
                if (past) {
                    kf_end(k);
                }
            }
            if (part) {
                kf_end(k);
            }
        }
        kf_end(k);
    }
    return k;
}
