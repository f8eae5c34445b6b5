/* attention_grad_k and attention_grad_v (each alone, or the pair: dk yielded, dv stored) on
 * subgroup matrices (tensor cores): f16 q, k, v, the f32 statistics g = [dy | lse | delta],
 * f32 accumulation. FlashAttention-2's key-side backward (attention_grad.c's header has the
 * formulas and the FMA kernel this one replaces where it builds).
 *
 * A workgroup of W subgroups owns 16 W keys of one head; each subgroup owns 16 of them and holds
 * their k and v rows as D / 16 left matrices each (16x16 f16) for the whole kernel, and dk's and
 * dv's 16 x D sums as D / 16 result matrices each (f32). The queries are walked in tiles of C
 * (16 or 32: the most subgroups that fit first, see below), from the tile of the workgroup's first
 * key on when causal (earlier queries see none of its keys). Per tile:
 *   1. the whole workgroup stages q's C rows (f16) and dy's (f32 in g, as f16 hi and lo)
 *      in workgroup memory, row-major, rows padded by 8 halves, and their lse and delta;
 *                                                                                      barrier
 *   2. each subgroup computes S^T = k q^T and dP^T = v dy^T (16 x C, keys by queries: q's and
 *      dy's tiles read column-major are q^T and dy^T) and stores them, f32, to its scratch;
 *                                                                                      barrier
 *   3. its invocations read them element by element (a subgroup matrix cannot be read so):
 *      P^T = exp(scale S^T - lse), zero where the query does not see the key, and
 *      dS^T = P^T (dP^T - delta), and store both as f16 left matrices (below);          barrier
 *   4. dv += P^T dy and dk += dS^T q on the subgroup matrices (the tiles read row-major);
 *                                                                                      barrier
 *      (before the next tile's staging overwrites q's and dy's).
 * At the end dk is scaled by `scale` (and dS's scale undone), dv by P's, and both go through
 * the scratch to coalesced stores.
 *
 * Precision. Every f16 operand past k, v and q is split into two f16 matrices, hi and
 * lo = x - hi (store_split), so the products carry it to 2^-22 of itself where x is at least
 * 2^-3 (lo is then in f16's normal range; on the H200 a smaller lo apparently counts for
 * nothing, as if f16 subnormals were flushed: with P unscaled, dv's error was 2.4e-3 at T 1024,
 * D 128, not causal, where P is near 2^-10, against 4.9e-4 in the interpreter); an f16
 * overflows past 65504:
 *   - P^T scaled by 2^10: P near 1/T keeps its 2^-22 to T 8192. P <= 1 where g's lse is the
 *     row's (attention_grad_prep's); the operator takes g as given, and a P past 64 (an lse more
 *     than 4.1 below the row's) overflows (kfuse verify's random g gives P up to about 10);
 *   - dS^T scaled by 2^4: it has no bound (it grows with |dy| |v|), and past 4096 it overflows;
 *     below 2^-18 (2^-14 where its hi is subnormal) the H200 may lose it. Gradients that
 *     small need the loss scaled, as f16 training does anyway (or f32);
 *   - dy (f32 in g): dP^T = v dy^T - delta cancels, so dy's hi alone (2^-12 of each element)
 *     gave errors of 3e-3 in dk; dv takes P's hi times dy's lo as a third product.
 * tests/ops/test_attention_grad_sgmat.c measures each against float64: worst 4.9e-4 in the
 * interpreter (the f16 output's own rounding), 1.3e-3 on the H200.
 *
 * T a multiple of the query tile (so of 16) and D of 16; kf__attention_grad_kv_sgmat returns
 * NULL otherwise, and attention_grad.c's FMA kernel runs. */
#include "ops/attention_sgmat.h"

#include "ops/matmul_sgmat.h"
#include "ops/ops_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAT 16u         /* 16x16x16 f16 -> f32 matrices */
#define PAD 8u          /* halves after each staged row */
#define SPAD 4u         /* floats after each scratch row */
#define P_SCALE 1024.0f /* P's scale in its f16 matrices (2^10) */
#define DS_SCALE 16.0f  /* dS's (2^4) */

static kf_val u32(kf_kernel *k, uint32_t v) {
    return kf_lit_u32(k, v);
}

/* Floats of a subgroup's scratch: S^T and dP^T (16 x (C + 4) each), or dk's or dv's 16 x (D + 4)
 * at the end. */
static uint32_t scratch_floats(uint32_t c, uint32_t d) {
    uint32_t tiles = 2 * MAT * (c + SPAD), out = MAT * (d + SPAD);
    return tiles > out ? tiles : out;
}

/* Bytes of workgroup memory: q's and dy's tiles (dy as hi and lo), the tile's lse and delta, per
 * subgroup its scratch and P^T and dS^T (hi and lo each, 16 x (C + 8) f16). */
uint32_t kf__attention_grad_kv_sgmat_bytes(uint32_t w, uint32_t c, uint32_t d) {
    return 3 * c * (d + PAD) * 2 + 2 * c * 4 +
           w * (scratch_floats(c, d) * 4 + 4 * MAT * (c + PAD) * 2);
}

/* Stages rows [row0, row0 + c) of q (vec4s of f16) into tile, rows of ld halves. */
static void stage_q(kf_kernel *k, kf_binding bq, kf_shared tile, kf_val local, uint32_t threads,
                    kf_val row0, uint32_t c, uint32_t d, uint32_t ld) {
    const uint32_t per_row = d / 4;
    kf_val e = kf_for(k, "e", local, u32(k, c * per_row), u32(k, threads));
    kf_val r = kf_div(k, e, u32(k, per_row)), c4 = kf_binary(k, KF_OP_MOD, e, u32(k, per_row));
    kf_val x = kf_let(k, "q4", kf_load(k, bq, kf_add(k, kf_mul(k, row0, u32(k, per_row)), e)));
    kf_val slot =
        kf_let(k, "q_slot", kf_add(k, kf_mul(k, r, u32(k, ld)), kf_mul(k, c4, u32(k, 4))));
    for (uint32_t l = 0; l < 4; l++) {
        kf_shared_store(k, tile, l ? kf_add(k, slot, u32(k, l)) : slot, kf_extract(k, x, l));
    }
    kf_end(k);
}

static void store_split(kf_kernel *k, kf_shared hi_arr, kf_shared lo_arr, kf_val at, kf_val x);

/* Stages dy's rows [row0, row0 + c) from g (rows of d + 2 floats) as f16 hi and lo into tile and
 * tile_lo, and their lse and delta into stats (lse at r, delta at c + r). */
static void stage_dy(kf_kernel *k, kf_binding bg, kf_shared tile, kf_shared tile_lo,
                     kf_shared stats, kf_val local, uint32_t threads, kf_val row0, uint32_t c,
                     uint32_t d, uint32_t ld) {
    kf_val e = kf_for(k, "e", local, u32(k, c * d), u32(k, threads));
    kf_val r = kf_div(k, e, u32(k, d)), col = kf_binary(k, KF_OP_MOD, e, u32(k, d));
    kf_val x = kf_load(k, bg, kf_add(k, kf_mul(k, kf_add(k, row0, r), u32(k, d + 2)), col));
    store_split(k, tile, tile_lo, kf_let(k, "dy_slot", kf_add(k, kf_mul(k, r, u32(k, ld)), col)),
                x);
    kf_end(k);
    kf_val s = kf_for(k, "s", local, u32(k, 2 * c), u32(k, threads));
    kf_val which = kf_div(k, s, u32(k, c)), sr = kf_binary(k, KF_OP_MOD, s, u32(k, c));
    kf_val at =
        kf_add(k, kf_mul(k, kf_add(k, row0, sr), u32(k, d + 2)), kf_add(k, which, u32(k, d)));
    kf_shared_store(k, stats, s, kf_load(k, bg, at));
    kf_end(k);
}

/* hi and lo (f16) into hi_arr and lo_arr at `at` with hi + lo = x (already scaled) to 2^-22 of
 * it: hi is x with its low 13 mantissa bits cleared, which f16 holds exactly where x is in f16's
 * normal range, and lo = x - hi. Not f16(x) and f16(x - f32(f16(x))): the H200's driver keeps
 * f16(x) in f32 until a store rounds it (kf_interp_desc.f16_casts_unrounded), so lo came out 0
 * there and the products carried f16's 2^-11 of P, dS and dy (errors to 10% in dk). */
static void store_split(kf_kernel *k, kf_shared hi_arr, kf_shared lo_arr, kf_val at, kf_val x) {
    kf_type h = kf_type_scalar(KF_SCALAR_F16), f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_type u32t = kf_type_scalar(KF_SCALAR_U32);
    kf_val bits = kf_binary(k, KF_OP_BIT_AND, kf_bitcast(k, u32t, x), u32(k, 0xffffe000u));
    kf_val hi32 = kf_let(k, "hi32", kf_bitcast(k, f32, bits));
    kf_shared_store(k, hi_arr, at, kf_cast(k, h, hi32));
    kf_shared_store(k, lo_arr, at, kf_cast(k, h, kf_sub(k, x, hi32)));
}

/* The subgroup's 16 x D result matrices mats (D / 16) through its scratch at o_at (rows of
 * D + 4) into storage: yielded (out true) or stored into b, times `mul`, as dtype f16; the
 * scratch is free again when it returns. */
static void store_rows(kf_kernel *k, const kf_sgmat *mats, uint32_t dm, kf_shared scratch,
                       kf_val o_at, kf_val lane, uint32_t sg, kf_val key0, kf_val writes,
                       uint32_t d, float mul, bool out, kf_binding b) {
    const uint32_t lo = d + SPAD;
    for (uint32_t i = 0; i < dm; i++) {
        kf_sgmat_store(k, scratch, kf_add(k, o_at, u32(k, i * MAT)), mats[i], false, u32(k, lo));
    }
    kf_barrier(k);
    kf_if(k, writes);
    for (uint32_t e = 0; e < MAT * d / sg; e++) {
        kf_val flat = kf_add(k, lane, u32(k, e * sg));
        kf_val r = kf_div(k, flat, u32(k, d)), c = kf_binary(k, KF_OP_MOD, flat, u32(k, d));
        kf_val x =
            kf_shared_load(k, scratch, kf_add(k, o_at, kf_add(k, kf_mul(k, r, u32(k, lo)), c)));
        if (mul != 1.0f) {
            x = kf_mul(k, x, kf_lit_f32(k, mul));
        }
        kf_val index = kf_add(k, kf_mul(k, kf_add(k, key0, r), u32(k, d)), c);
        if (out) {
            kf__yield_f32(k, x, index, KF_DTYPE_F16);
        } else {
            kf__store_f32(k, b, index, x, KF_DTYPE_F16);
        }
    }
    kf_end(k);
    kf_barrier(k);
}

kf_kernel *kf__attention_grad_kv_sgmat(const kf__attn_desc *a, uint32_t sg, uint32_t wg_bytes,
                                       bool want_dk, bool want_dv, uint32_t subgroups,
                                       uint32_t queries) {
    const uint32_t t = a->t, d = a->d, dm = d / MAT;
    const uint32_t budget = wg_bytes ? wg_bytes : 49152u;
    if ((!want_dk && !want_dv) || d % MAT || d > 128 || t % MAT || sg < MAT || sg > 128 ||
        (sg & (sg - 1))) {
        return NULL;
    }
    /* the most subgroups that fit (4, 2, 1), then the longer query tile (32, 16), or those
     * asked. Subgroups first: each staged tile then serves more keys (H200, f16 causal T 4096,
     * dk + dv: D 64 4x16 4.84 ms, 2x32 10.05, 2x16 5.55; D 128 2x16 16.8, 1x32 60.8; the FMA
     * kernel 7.26 and 32.6: bench/results/s13/run2) */
    uint32_t w = 0, c = 0;
    for (uint32_t ww = 4; ww >= 1 && !w; ww /= 2) {
        for (uint32_t cc = 32; cc >= MAT && !w; cc /= 2) {
            if ((!subgroups || ww == subgroups) && (!queries || cc == queries) && t % cc == 0 &&
                ww * sg <= 256 && kf__attention_grad_kv_sgmat_bytes(ww, cc, d) <= budget &&
                cc % (sg / MAT) == 0) {
                w = ww, c = cc;
            }
        }
    }
    if (!w) {
        return NULL;
    }
    const uint32_t lpr = sg / MAT, per = c / lpr, cm = c / MAT, rows = w * MAT;
    const uint32_t ktiles = (t + rows - 1) / rows, threads = w * sg;
    const uint32_t ldq = d + PAD, ls = c + SPAD, ldp = c + PAD, sf = scratch_floats(c, d);
    const bool causal = a->causal;
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32), h = kf_type_scalar(KF_SCALAR_F16);

    char name[80];
    snprintf(name, sizeof name, "attention_grad_%s_sgmat_%ux%u%s",
             want_dk && want_dv ? "kv"
             : want_dk          ? "k"
                                : "v",
             rows, c, causal ? "_causal" : "");
    kf_kernel_desc desc = {.name = name,
                           .workgroup_size = {threads, 1, 1},
                           .input = kf_type_scalar(KF_SCALAR_VOID),
                           .output = h};
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    uint32_t groups[3] = {ktiles * a->bh, 1, 1};
    kf_kernel_set_grid(k, groups);
    /* the bindings of attention_grad.c's kernels: q, k, v, g[, dv], out */
    kf_binding bq = kf_kernel_storage(k, "q", kf_type_vec(KF_SCALAR_F16, 4), KF_ACCESS_READ);
    kf_binding bk = kf_kernel_storage(k, "k", h, KF_ACCESS_READ);
    kf_binding bv = kf_kernel_storage(k, "v", h, KF_ACCESS_READ);
    kf_binding bg = kf_kernel_storage(k, "g", f32, KF_ACCESS_READ);
    kf_binding bdv = {0};
    if (want_dk && want_dv) {
        bdv = kf_kernel_storage(k, "dv", h, KF_ACCESS_READ_WRITE);
    }
    kf_shared qtile = kf_kernel_workgroup(k, "qtile", h, c * ldq);
    kf_shared dytile = kf_kernel_workgroup(k, "dytile", h, c * ldq);
    kf_shared dylo = kf_kernel_workgroup(k, "dylo", h, c * ldq);
    kf_shared stats = kf_kernel_workgroup(k, "stats", f32, 2 * c);
    kf_shared scratch = kf_kernel_workgroup(k, "scratch", f32, w * sf);
    kf_shared p_hi = kf_kernel_workgroup(k, "p_hi", h, rows * ldp);
    kf_shared p_lo = kf_kernel_workgroup(k, "p_lo", h, rows * ldp);
    kf_shared ds_hi = {0}, ds_lo = {0};
    if (want_dk) {
        ds_hi = kf_kernel_workgroup(k, "ds_hi", h, rows * ldp);
        ds_lo = kf_kernel_workgroup(k, "ds_lo", h, rows * ldp);
    }

    kf_val local = kf_let(k, "local", kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX));
    kf_val sgi = kf_let(k, "sgi", kf_div(k, local, u32(k, sg)));
    kf_val lane = kf_let(k, "lane", kf_binary(k, KF_OP_MOD, local, u32(k, sg)));
    kf_val wg = kf_let(k, "wg", kf_workgroup_linear(k));
    kf_val head = kf_let(k, "head", kf_div(k, wg, u32(k, ktiles)));
    kf_val k0 =
        kf_let(k, "k0", kf_mul(k, kf_binary(k, KF_OP_MOD, wg, u32(k, ktiles)), u32(k, rows)));
    kf_val head_row0 = kf_let(k, "head_row0", kf_mul(k, head, u32(k, t)));
    /* a subgroup past T computes the last 16 keys again and writes nothing (T % 16 == 0) */
    kf_val sub_key0 = kf_let(k, "sub_key0", kf_add(k, k0, kf_mul(k, sgi, u32(k, MAT))));
    kf_val sub_base = kf_let(k, "sub_base", kf_call2(k, KF_FN_MIN, sub_key0, u32(k, t - MAT)));
    kf_val writes = kf_let(k, "writes", kf_binary(k, KF_OP_LT, sub_key0, u32(k, t)));
    kf_val rin = kf_let(k, "rin", kf_binary(k, KF_OP_MOD, lane, u32(k, MAT)));
    kf_val part = kf_let(k, "part", kf_div(k, lane, u32(k, MAT)));
    kf_val key = kf_let(k, "key", kf_add(k, sub_base, rin));
    kf_val s_at = kf_let(k, "s_at", kf_mul(k, sgi, u32(k, sf)));
    kf_val s_row = kf_let(k, "s_row", kf_add(k, s_at, kf_mul(k, rin, u32(k, ls))));
    kf_val dp_row = kf_let(k, "dp_row", kf_add(k, s_row, u32(k, MAT * ls)));
    kf_val p_at = kf_let(k, "p_at", kf_mul(k, sgi, u32(k, MAT * ldp)));
    kf_val p_row = kf_let(k, "p_row", kf_add(k, p_at, kf_mul(k, rin, u32(k, ldp))));

    /* k's and v's rows as left matrices, held; dk's and dv's sums, zeroed by a product of two
     * matrices never loaded (WGSL zero-initialises them) */
    kf_sgmat kl[128 / MAT], vl[128 / MAT], dk[128 / MAT], dv[128 / MAT];
    kf_val kv_at = kf_let(k, "kv_at", kf_mul(k, kf_add(k, head_row0, sub_base), u32(k, d)));
    kf_sgmat zl = kf_sgmat_declare(k, "zero_l", KF_SGMAT_LEFT, KF_SCALAR_F16, MAT, MAT);
    kf_sgmat zr = kf_sgmat_declare(k, "zero_r", KF_SGMAT_RIGHT, KF_SCALAR_F16, MAT, MAT);
    for (uint32_t i = 0; i < dm; i++) {
        kf_val at = kf_add(k, kv_at, u32(k, i * MAT));
        if (want_dk) {
            kl[i] = kf_sgmat_declare(k, "kl", KF_SGMAT_LEFT, KF_SCALAR_F16, MAT, MAT);
            kf_sgmat_load_storage(k, kl[i], bk, at, false, u32(k, d));
            dk[i] = kf_sgmat_declare(k, "dk", KF_SGMAT_RESULT, KF_SCALAR_F32, MAT, MAT);
            kf_sgmat_mul(k, dk[i], zl, zr);
        }
        vl[i] = kf_sgmat_declare(k, "vl", KF_SGMAT_LEFT, KF_SCALAR_F16, MAT, MAT);
        if (want_dk) {
            kf_sgmat_load_storage(k, vl[i], bv, at, false, u32(k, d));
        }
        if (want_dv) {
            dv[i] = kf_sgmat_declare(k, "dv", KF_SGMAT_RESULT, KF_SCALAR_F32, MAT, MAT);
            kf_sgmat_mul(k, dv[i], zl, zr);
        }
    }
    if (!want_dk) { /* dv alone needs P only, so k: as left matrices for S */
        for (uint32_t i = 0; i < dm; i++) {
            kl[i] = kf_sgmat_declare(k, "kl", KF_SGMAT_LEFT, KF_SCALAR_F16, MAT, MAT);
            kf_sgmat_load_storage(k, kl[i], bk, kf_add(k, kv_at, u32(k, i * MAT)), false,
                                  u32(k, d));
        }
    }
    kf_sgmat sr = kf_sgmat_declare(k, "s_t", KF_SGMAT_RESULT, KF_SCALAR_F32, MAT, MAT);
    kf_sgmat right = kf_sgmat_declare(k, "rt", KF_SGMAT_RIGHT, KF_SCALAR_F16, MAT, MAT);
    kf_sgmat lh = kf_sgmat_declare(k, "lh", KF_SGMAT_LEFT, KF_SCALAR_F16, MAT, MAT);
    kf_sgmat ll = kf_sgmat_declare(k, "ll", KF_SGMAT_LEFT, KF_SCALAR_F16, MAT, MAT);

    /* causal: queries before the workgroup's first key see none of its keys */
    kf_val start =
        causal ? kf_let(k, "start", kf_mul(k, kf_div(k, k0, u32(k, c)), u32(k, c))) : u32(k, 0);
    kf_val c0 = kf_for(k, "c0", start, u32(k, t), u32(k, c));
    {
        kf_val row0 = kf_let(k, "row0", kf_add(k, head_row0, c0));
        stage_q(k, bq, qtile, local, threads, row0, c, d, ldq);
        stage_dy(k, bg, dytile, dylo, stats, local, threads, row0, c, d, ldq);
        kf_barrier(k); /* (1) the tiles */
        /* S^T = k q^T and dP^T = v dy^T, 16 x C, into the subgroup's scratch */
        for (uint32_t j = 0; j < cm; j++) {
            for (uint32_t pass = 0; pass < (want_dk ? 2u : 1u); pass++) {
                for (uint32_t i = 0; i < dm; i++) {
                    kf_val at = u32(k, j * MAT * ldq + i * MAT);
                    kf_sgmat_load(k, right, pass ? dytile : qtile, at, true, u32(k, ldq));
                    (i ? kf_sgmat_mma : kf_sgmat_mul)(k, sr, pass ? vl[i] : kl[i], right);
                    if (pass) { /* dy's lo: dP - delta cancels, so dP to 2^-22 */
                        kf_sgmat_load(k, right, dylo, at, true, u32(k, ldq));
                        kf_sgmat_mma(k, sr, vl[i], right);
                    }
                }
                kf_sgmat_store(k, scratch, kf_add(k, s_at, u32(k, pass * MAT * ls + j * MAT)), sr,
                               false, u32(k, ls));
            }
        }
        kf_barrier(k); /* (2) the scores */
        /* P^T and dS^T, the invocation's columns part + lpr e of its key's row */
        for (uint32_t e = 0; e < per; e++) {
            kf_val col = e ? kf_add(k, part, u32(k, lpr * e)) : part;
            kf_val s = kf_shared_load(k, scratch, kf_add(k, s_row, col));
            kf_val x =
                kf_sub(k, kf_mul(k, s, kf_lit_f32(k, a->scale)), kf_shared_load(k, stats, col));
            kf_val p = kf_call1(k, KF_FN_EXP, x);
            if (causal) {
                kf_val sees = kf_binary(k, KF_OP_GE, kf_add(k, c0, col), key);
                p = kf_select(k, kf_lit_f32(k, 0), p, sees);
            }
            p = kf_let(k, "p", p);
            kf_val at = kf_add(k, p_row, col);
            store_split(k, p_hi, p_lo, at, kf_mul(k, p, kf_lit_f32(k, P_SCALE)));
            if (want_dk) {
                kf_val dpv = kf_shared_load(k, scratch, kf_add(k, dp_row, col));
                kf_val delta = kf_shared_load(k, stats, kf_add(k, col, u32(k, c)));
                kf_val ds = kf_mul(k, p, kf_sub(k, dpv, delta));
                store_split(k, ds_hi, ds_lo, at, kf_mul(k, ds, kf_lit_f32(k, DS_SCALE)));
            }
        }
        kf_barrier(k); /* (3) P^T and dS^T */
        /* dv += P^T dy, dk += dS^T q over the tile's 16-query blocks */
        for (uint32_t j = 0; j < cm; j++) {
            kf_val pb = kf_add(k, p_at, u32(k, j * MAT));
            for (uint32_t pass = 0; pass < 2; pass++) {
                bool dk_pass = pass == 1;
                if ((dk_pass && !want_dk) || (!dk_pass && !want_dv)) {
                    continue;
                }
                kf_sgmat_load(k, lh, dk_pass ? ds_hi : p_hi, pb, false, u32(k, ldp));
                kf_sgmat_load(k, ll, dk_pass ? ds_lo : p_lo, pb, false, u32(k, ldp));
                for (uint32_t i = 0; i < dm; i++) {
                    kf_sgmat_load(k, right, dk_pass ? qtile : dytile,
                                  u32(k, j * MAT * ldq + i * MAT), false, u32(k, ldq));
                    kf_sgmat acc = dk_pass ? dk[i] : dv[i];
                    kf_sgmat_mma(k, acc, lh, right);
                    kf_sgmat_mma(k, acc, ll, right);
                    if (!dk_pass) { /* and P's hi times dy's lo (lo times lo is below 2^-22) */
                        kf_sgmat_load(k, right, dylo, u32(k, j * MAT * ldq + i * MAT), false,
                                      u32(k, ldq));
                        kf_sgmat_mma(k, acc, lh, right);
                    }
                }
            }
        }
        kf_barrier(k); /* (4) before the next tile's staging */
    }
    kf_end(k);
    kf_val key0 = kf_let(k, "key0", kf_add(k, head_row0, sub_base));
    kf_val o_at = s_at;
    if (want_dk) {
        store_rows(k, dk, dm, scratch, o_at, lane, sg, key0, writes, d, a->scale / DS_SCALE, true,
                   (kf_binding){0});
    }
    if (want_dv) {
        store_rows(k, dv, dm, scratch, o_at, lane, sg, key0, writes, d, 1.0f / P_SCALE, !want_dk,
                   bdv);
    }
    return k;
}

kf_kernel *kf__attention_grad_kv_sgmat_for(kf_context *ctx, const kf__attn_desc *a, bool want_dk,
                                           bool want_dv) {
    const char *env = getenv("KF_ATTN_GRAD_SGMAT");
    unsigned w = 0, c = 0;
    if (env && !strcmp(env, "0")) {
        return NULL;
    }
    if (env && *env && sscanf(env, "%ux%u", &w, &c) != 2) {
        w = c = 0;
    }
    uint32_t sg = 0;
    kf_adapter_info info;
    if (!kf__sgmat_usable(ctx, &sg) || kf_context_adapter_info(ctx, &info) != KF_OK) {
        return NULL;
    }
    return kf__attention_grad_kv_sgmat(a, sg, info.max_compute_workgroup_storage_size, want_dk,
                                       want_dv, w, c);
}
