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
 * the scratch, a 16 x 16 block at a time (store_blocks), to storage.
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
 * NULL otherwise, and attention_grad.c's FMA kernel runs.
 *
 * dq and g' (kf__attention_grad_q_sgmat, the second half of this file) mirror it: a subgroup owns
 * 16 queries and holds q and dy (hi and lo) as left matrices, and the keys are walked in tiles
 * of C with k and v staged (f16, exact). As attention_grad.c's dq kernel it reads g's lse and
 * delta as shifts only: with P' = exp(scale S - lse) and dS' = P' (dP - delta) it sums per row
 * psum = sum P' and shift = sum dS' (f32, from the unrounded values) and on the matrices
 * dS' k and P' k (P' and dS' as hi + lo, scaled as above), and at the end takes
 *   dq = scale (dS' k - (shift / psum) P' k) / psum,  lse' = lse + log psum,
 *   delta' = delta + shift / psum,
 * exact whatever g's lse and delta are. Per tile: stage k, v | S = q k^T, dP = dy v^T into the
 * scratch | P', dS' into their f16 slots | the two products (4 barriers; 2 for g' alone). The
 * results leave through 16 x 16 blocks of the scratch (store_blocks), so the scratch never
 * holds a 16 x D tile and 4 subgroups fit 48 KiB at D 128 for both kernels (H200, T 4096 D 128
 * causal: dk + dv 16.7 -> 6.7 ms from 2 subgroups to 4; dq 32.0 ms on FMA units, 4.7 here).
 * Either kernel may keep P and dS in one pair of f16 slots, in turns (the tiling's slots 1: the
 * second kept in registers while the first's products run, two barriers more a tile): less
 * workgroup memory, and on the H200 faster even where the tile stays (choose_tiling). */
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

/* Floats of a subgroup's scratch: S^T and dP^T (16 x (C + 4) each), or at the end two 16 x 20
 * blocks of the results (store_blocks). */
static uint32_t scratch_floats(uint32_t c) {
    return 2 * MAT * (c + SPAD);
}

/* Bytes of workgroup memory: q's and dy's tiles (dy as hi and lo), the tile's lse and delta, per
 * subgroup its scratch and P^T and dS^T (hi and lo each, 16 x (C + 8) f16; `slots` pairs of
 * them: 2, or 1 where P and dS take turns). */
uint32_t kf__attention_grad_kv_sgmat_bytes(uint32_t w, uint32_t c, uint32_t d, uint32_t slots) {
    return 3 * c * (d + PAD) * 2 + 2 * c * 4 +
           w * (scratch_floats(c) * 4 + 2 * slots * MAT * (c + PAD) * 2);
}

bool kf__attn_grad_tiling_parse(const char *text, kf__attn_grad_tiling *out) {
    unsigned w = 0, c = 0;
    int used = 0;
    if (!text || sscanf(text, "%ux%u%n", &w, &c, &used) != 2 || !w || !c) {
        return false;
    }
    kf__attn_grad_tiling t = {w, c, 0};
    if (!strcmp(text + used, "/1")) {
        t.slots = 1;
    } else if (!strcmp(text + used, "/2")) {
        t.slots = 2;
    } else if (text[used]) {
        return false;
    }
    *out = t;
    return true;
}

/* The tiling: those asked, else the most subgroups (4, 2, 1) whose tiles fit, then the shorter
 * tile (16, 32), then one pair of slots before two (turns) or two before one; false if none
 * fits. Measured on the H200 (f16 causal T 4096, ms; bench/results/s14/run3):
 *   dk + dv  D 64:  4x16/1 2.65, 4x32/1 4.12, 4x16/2 4.88, 2x16/2 5.61, 2x32/1 9.18
 *            D 128: 4x16/1 6.41, 4x16/2 6.69, 2x16/2 8.62, 2x32/1 15.7
 *   dq + g'  D 64:  4x16/1 2.27, 4x32/2 2.69, 2x16/2 2.82, 4x32/1 2.88, 4x16/2 3.52
 *            D 128: 4x16/2 4.65, 4x32/1 4.67, 4x16/1 5.07, 2x16/2 5.75
 * Subgroups first: each staged tile then serves more rows. One pair of slots is faster but for
 * dq at D 128 (which keeps P' in 8 more registers per invocation beside q's, dy's and two sums'
 * 40 matrices); the FMA kernels take 7.24 / 32.5 (dk + dv) and 7.44 / 32.0 (dq). */
static bool choose_tiling(const kf__attn_grad_tiling *ask, uint32_t t, uint32_t d, uint32_t sg,
                          uint32_t budget, bool turns_first,
                          uint32_t (*bytes)(uint32_t, uint32_t, uint32_t, uint32_t, uint32_t),
                          kf__attn_grad_tiling *out) {
    const kf__attn_grad_tiling none = {0, 0, 0}, *a = ask ? ask : &none;
    for (uint32_t w = 4; w >= 1; w /= 2) {
        for (uint32_t c = MAT; c <= 32; c *= 2) {
            for (uint32_t n = 0; n < 2; n++) {
                uint32_t slots = turns_first ? 1 + n : 2 - n;
                if ((!a->subgroups || w == a->subgroups) && (!a->tile || c == a->tile) &&
                    (!a->slots || slots == a->slots) && t % c == 0 && w * sg <= 256 &&
                    c % (sg / MAT) == 0 && bytes(w, c, d, sg, slots) <= budget) {
                    *out = (kf__attn_grad_tiling){w, c, slots};
                    return true;
                }
            }
        }
    }
    return false;
}

static uint32_t kv_bytes(uint32_t w, uint32_t c, uint32_t d, uint32_t sg, uint32_t slots) {
    (void)sg;
    return kf__attention_grad_kv_sgmat_bytes(w, c, d, slots);
}

/* Stages rows [row0, row0 + c) of b (vec4s of f16: q, or k and v) into tile, rows of ld
 * halves. */
static void stage_f16(kf_kernel *k, kf_binding b, kf_shared tile, kf_val local, uint32_t threads,
                      kf_val row0, uint32_t c, uint32_t d, uint32_t ld) {
    const uint32_t per_row = d / 4;
    kf_val e = kf_for(k, "e", local, u32(k, c * per_row), u32(k, threads));
    kf_val r = kf_div(k, e, u32(k, per_row)), c4 = kf_binary(k, KF_OP_MOD, e, u32(k, per_row));
    kf_val x = kf_let(k, "x4", kf_load(k, b, kf_add(k, kf_mul(k, row0, u32(k, per_row)), e)));
    kf_val slot =
        kf_let(k, "x_slot", kf_add(k, kf_mul(k, r, u32(k, ld)), kf_mul(k, c4, u32(k, 4))));
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

/* Where store_blocks puts a subgroup's results: yielded (out) or stored into b, as f16, at
 * rows row0 .. row0 + 15 (of D halves) when `writes`. */
typedef struct result_dst {
    bool out;
    kf_binding b;
    kf_val row0, writes;
} result_dst;

/* The subgroup's 16 x D results a (D / 16 matrices) through its scratch at s_at, a 16 x 16
 * block at a time, into dst: a times mul, or, with b and coef (a row's two coefficients at
 * coef_at + 2 r in workgroup memory), a ca_r - b cb_r. The scratch is free again after it. */
static void store_blocks(kf_kernel *k, const kf_sgmat *a, const kf_sgmat *b, uint32_t d,
                         kf_shared scratch, kf_val s_at, float mul, kf_shared coef, kf_val coef_at,
                         kf_val lane, uint32_t sg, result_dst dst) {
    const uint32_t lo = MAT + SPAD;
    for (uint32_t i = 0; i < d / MAT; i++) {
        kf_sgmat_store(k, scratch, s_at, a[i], false, u32(k, lo));
        if (b) {
            kf_sgmat_store(k, scratch, kf_add(k, s_at, u32(k, MAT * lo)), b[i], false, u32(k, lo));
        }
        kf_barrier(k);
        kf_if(k, dst.writes);
        for (uint32_t e = 0; e < MAT * MAT / sg; e++) {
            kf_val flat = kf_add(k, lane, u32(k, e * sg));
            kf_val r = kf_div(k, flat, u32(k, MAT)),
                   col = kf_binary(k, KF_OP_MOD, flat, u32(k, MAT));
            kf_val at = kf_add(k, s_at, kf_add(k, kf_mul(k, r, u32(k, lo)), col));
            kf_val x = kf_shared_load(k, scratch, at);
            if (b) {
                kf_val x2 = kf_shared_load(k, scratch, kf_add(k, at, u32(k, MAT * lo)));
                kf_val cat = kf_add(k, coef_at, kf_mul(k, r, u32(k, 2)));
                x = kf_sub(k, kf_mul(k, x, kf_shared_load(k, coef, cat)),
                           kf_mul(k, x2, kf_shared_load(k, coef, kf_add(k, cat, u32(k, 1)))));
            } else if (mul != 1.0f) {
                x = kf_mul(k, x, kf_lit_f32(k, mul));
            }
            kf_val index = kf_add(k, kf_mul(k, kf_add(k, dst.row0, r), u32(k, d)),
                                  kf_add(k, col, u32(k, i * MAT)));
            if (dst.out) {
                kf__yield_f32(k, x, index, KF_DTYPE_F16);
            } else {
                kf__store_f32(k, dst.b, index, x, KF_DTYPE_F16);
            }
        }
        kf_end(k);
        kf_barrier(k);
    }
}

/* What both kernels need: T and D multiples of 16, D <= 128, subgroups of 16 to 128 (a power
 * of two). */
static bool shapes_fit(const kf__attn_desc *a, uint32_t sg) {
    return a->d % MAT == 0 && a->d <= 128 && a->t % MAT == 0 && sg >= MAT && sg <= 128 &&
           (sg & (sg - 1)) == 0;
}

/* A kernel "attention_grad_<role>_sgmat_<rows>x<c>[_1][_causal]" (_1: one pair of slots) of
 * `threads` invocations a workgroup, output type out, `groups` workgroups. */
static kf_kernel *create(const char *role, uint32_t rows, uint32_t c, bool turns, bool causal,
                         uint32_t threads, kf_type out, uint32_t groups) {
    char name[80];
    snprintf(name, sizeof name, "attention_grad_%s_sgmat_%ux%u%s%s", role, rows, c,
             turns ? "_1" : "", causal ? "_causal" : "");
    kf_kernel_desc desc = {.name = name,
                           .workgroup_size = {threads, 1, 1},
                           .input = kf_type_scalar(KF_SCALAR_VOID),
                           .output = out};
    kf_kernel *k = kf_kernel_create(&desc);
    if (k) {
        uint32_t grid[3] = {groups, 1, 1};
        kf_kernel_set_grid(k, grid);
    }
    return k;
}

/* The two products of a tile on the held rows, S = A X^T and dP = B Y^T (16 x C each; A, B the
 * held left matrices, X, Y the staged tiles, read column-major), dy split as hi + lo in one of
 * them: as held left matrices (b_lo: the dq kernel) or as a second staged tile (y_lo: dk's). */
typedef struct two_products {
    const kf_sgmat *a;
    kf_shared x;
    const kf_sgmat *b, *b_lo;
    kf_shared y, y_lo;
} two_products;

/* S (and dP where want_dp) for the tile's cm 16-column blocks over dm 16-deep slices, tiles of
 * rows of ld halves, into the subgroup's scratch at s_at (S's 16 rows of ls, dP's after them);
 * sr and right are the caller's result and right matrices. */
static void scores_and_dp(kf_kernel *k, const two_products *m, bool want_dp, uint32_t cm,
                          uint32_t dm, uint32_t ld, kf_sgmat sr, kf_sgmat right, kf_shared scratch,
                          kf_val s_at, uint32_t ls) {
    for (uint32_t j = 0; j < cm; j++) {
        for (uint32_t pass = 0; pass < (want_dp ? 2u : 1u); pass++) {
            for (uint32_t i = 0; i < dm; i++) {
                kf_val at = u32(k, j * MAT * ld + i * MAT);
                kf_sgmat_load(k, right, pass ? m->y : m->x, at, true, u32(k, ld));
                (i ? kf_sgmat_mma : kf_sgmat_mul)(k, sr, pass ? m->b[i] : m->a[i], right);
                if (pass && m->b_lo) { /* dP - delta cancels, so dP to 2^-22 */
                    kf_sgmat_mma(k, sr, m->b_lo[i], right);
                } else if (pass) {
                    kf_sgmat_load(k, right, m->y_lo, at, true, u32(k, ld));
                    kf_sgmat_mma(k, sr, m->b[i], right);
                }
            }
            kf_sgmat_store(k, scratch, kf_add(k, s_at, u32(k, pass * MAT * ls + j * MAT)), sr,
                           false, u32(k, ls));
        }
    }
}

/* Where a workgroup's invocations work, for both kernels: W subgroups of sg (subgroup sgi,
 * its lane), the workgroup's head (head_row0: its first row of all heads') and its first owned
 * row (first: key or query, `tiles` workgroups a head of `rows` rows each); the subgroup's 16
 * rows from sub_base (clamped so a subgroup past T computes the last 16 again, and `writes`
 * nothing; T % 16 == 0), the invocation's row rin of them (row: in the head) and part (its
 * columns part + lpr e); and the subgroup's scratch (s_at: S's 16 rows of ls, dP's after them)
 * and f16 slots (p_at, rows of ldp), at its row (s_row, dp_row, p_row). */
typedef struct place {
    kf_val local, sgi, lane, head_row0, first, sub_base, writes, rin, part, row;
    kf_val s_at, s_row, dp_row, p_at, p_row;
} place;

static place place_subgroups(kf_kernel *k, uint32_t sg, uint32_t tiles, uint32_t rows, uint32_t t,
                             uint32_t sf, uint32_t ls, uint32_t ldp, bool keys) {
    place p;
    p.local = kf_let(k, "local", kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX));
    p.sgi = kf_let(k, "sgi", kf_div(k, p.local, u32(k, sg)));
    p.lane = kf_let(k, "lane", kf_binary(k, KF_OP_MOD, p.local, u32(k, sg)));
    kf_val wg = kf_let(k, "wg", kf_workgroup_linear(k));
    kf_val head = kf_let(k, "head", kf_div(k, wg, u32(k, tiles)));
    p.first = kf_let(k, keys ? "k0" : "q0",
                     kf_mul(k, kf_binary(k, KF_OP_MOD, wg, u32(k, tiles)), u32(k, rows)));
    p.head_row0 = kf_let(k, "head_row0", kf_mul(k, head, u32(k, t)));
    kf_val sub0 = kf_let(k, "sub0", kf_add(k, p.first, kf_mul(k, p.sgi, u32(k, MAT))));
    p.sub_base = kf_let(k, "sub_base", kf_call2(k, KF_FN_MIN, sub0, u32(k, t - MAT)));
    p.writes = kf_let(k, "writes", kf_binary(k, KF_OP_LT, sub0, u32(k, t)));
    p.rin = kf_let(k, "rin", kf_binary(k, KF_OP_MOD, p.lane, u32(k, MAT)));
    p.part = kf_let(k, "part", kf_div(k, p.lane, u32(k, MAT)));
    p.row = kf_let(k, keys ? "key" : "query", kf_add(k, p.sub_base, p.rin));
    p.s_at = kf_let(k, "s_at", kf_mul(k, p.sgi, u32(k, sf)));
    p.s_row = kf_let(k, "s_row", kf_add(k, p.s_at, kf_mul(k, p.rin, u32(k, ls))));
    p.dp_row = kf_let(k, "dp_row", kf_add(k, p.s_row, u32(k, MAT * ls)));
    p.p_at = kf_let(k, "p_at", kf_mul(k, p.sgi, u32(k, MAT * ldp)));
    p.p_row = kf_let(k, "p_row", kf_add(k, p.p_at, kf_mul(k, p.rin, u32(k, ldp))));
    return p;
}

kf_kernel *kf__attention_grad_kv_sgmat(const kf__attn_desc *a, uint32_t sg, uint32_t wg_bytes,
                                       bool want_dk, bool want_dv,
                                       const kf__attn_grad_tiling *tiling) {
    const uint32_t t = a->t, d = a->d, dm = d / MAT;
    const uint32_t budget = wg_bytes ? wg_bytes : 49152u;
    if ((!want_dk && !want_dv) || !shapes_fit(a, sg)) {
        return NULL;
    }
    kf__attn_grad_tiling tl;
    if (!choose_tiling(tiling, t, d, sg, budget, true, kv_bytes, &tl)) {
        return NULL;
    }
    const uint32_t w = tl.subgroups, c = tl.tile;
    /* one pair of slots: P^T's, then dS^T's (dk alone or dv alone need one anyway) */
    const bool turns = tl.slots == 1 && want_dk && want_dv;
    const uint32_t lpr = sg / MAT, per = c / lpr, cm = c / MAT, rows = w * MAT;
    const uint32_t ktiles = (t + rows - 1) / rows, threads = w * sg;
    const uint32_t ldq = d + PAD, ls = c + SPAD, ldp = c + PAD, sf = scratch_floats(c);
    const bool causal = a->causal;
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32), h = kf_type_scalar(KF_SCALAR_F16);

    kf_kernel *k = create(want_dk && want_dv ? "kv"
                          : want_dk          ? "k"
                                             : "v",
                          rows, c, turns, causal, threads, h, ktiles * a->bh);
    if (!k) {
        return NULL;
    }
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
    kf_shared ds_hi = p_hi, ds_lo = p_lo; /* dk alone, or in turns: P's slots */
    if (want_dk && want_dv && !turns) {
        ds_hi = kf_kernel_workgroup(k, "ds_hi", h, rows * ldp);
        ds_lo = kf_kernel_workgroup(k, "ds_lo", h, rows * ldp);
    }

    const place pl = place_subgroups(k, sg, ktiles, rows, t, sf, ls, ldp, true);
    const kf_val local = pl.local, lane = pl.lane, k0 = pl.first, head_row0 = pl.head_row0;
    const kf_val sub_base = pl.sub_base, writes = pl.writes, part = pl.part, key = pl.row;
    const kf_val s_at = pl.s_at, s_row = pl.s_row, dp_row = pl.dp_row, p_at = pl.p_at;
    const kf_val p_row = pl.p_row;

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
        stage_f16(k, bq, qtile, local, threads, row0, c, d, ldq);
        stage_dy(k, bg, dytile, dylo, stats, local, threads, row0, c, d, ldq);
        kf_barrier(k); /* (1) the tiles */
        /* S^T = k q^T and dP^T = v dy^T (dy as hi and lo), 16 x C, into the scratch */
        const two_products kv_products = {kl, qtile, vl, NULL, dytile, dylo};
        scores_and_dp(k, &kv_products, want_dk, cm, dm, ldq, sr, right, scratch, s_at, ls);
        kf_barrier(k); /* (2) the scores */
        /* P^T and dS^T, the invocation's columns part + lpr e of its key's row (dS^T kept in
         * registers while P^T has the slots, in turns) */
        kf_val ds_kept[32];
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
            if (want_dv) {
                store_split(k, p_hi, p_lo, at, kf_mul(k, p, kf_lit_f32(k, P_SCALE)));
            }
            if (want_dk) {
                kf_val dpv = kf_shared_load(k, scratch, kf_add(k, dp_row, col));
                kf_val delta = kf_shared_load(k, stats, kf_add(k, col, u32(k, c)));
                kf_val ds = kf_mul(k, kf_mul(k, p, kf_sub(k, dpv, delta)), kf_lit_f32(k, DS_SCALE));
                if (turns) {
                    ds_kept[e] = kf_let(k, "ds", ds);
                } else {
                    store_split(k, ds_hi, ds_lo, at, ds);
                }
            }
        }
        kf_barrier(k); /* (3) P^T and dS^T */
        /* dv += P^T dy, dk += dS^T q over the tile's 16-query blocks (in turns: dv's over all
         * blocks, then dS^T into the slots, then dk's) */
        for (uint32_t round = 0; round < (turns ? 2u : 1u); round++) {
            if (round) {
                kf_barrier(k); /* P^T read */
                for (uint32_t e = 0; e < per; e++) {
                    kf_val col = e ? kf_add(k, part, u32(k, lpr * e)) : part;
                    store_split(k, ds_hi, ds_lo, kf_add(k, p_row, col), ds_kept[e]);
                }
                kf_barrier(k); /* dS^T */
            }
            for (uint32_t j = 0; j < cm; j++) {
                kf_val pb = kf_add(k, p_at, u32(k, j * MAT));
                for (uint32_t pass = 0; pass < 2; pass++) {
                    bool dk_pass = pass == 1;
                    if ((dk_pass && !want_dk) || (!dk_pass && !want_dv) ||
                        (turns && dk_pass != (round == 1))) {
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
        }
        kf_barrier(k); /* (4) before the next tile's staging */
    }
    kf_end(k);
    kf_val key0 = kf_let(k, "key0", kf_add(k, head_row0, sub_base));
    kf_val none = u32(k, 0);
    if (want_dk) {
        result_dst dst = {true, {0}, key0, writes};
        store_blocks(k, dk, NULL, d, scratch, s_at, a->scale / DS_SCALE, (kf_shared){0}, none, lane,
                     sg, dst);
    }
    if (want_dv) {
        result_dst dst = {!want_dk, bdv, key0, writes};
        store_blocks(k, dv, NULL, d, scratch, s_at, 1.0f / P_SCALE, (kf_shared){0}, none, lane, sg,
                     dst);
    }
    return k;
}

/* ctx's subgroup size and workgroup memory where its device has subgroup matrices and none of
 * the variables names "0", and into *tl the tiling $var names ("WxC[/1|/2]": *asked), for the
 * two kernels' _for functions; false where they build nothing. */
static bool sgmat_setup(kf_context *ctx, const char *var, uint32_t *sg, uint32_t *bytes,
                        kf__attn_grad_tiling *tl, bool *asked) {
    const char *all = getenv("KF_ATTN_GRAD_SGMAT"), *env = getenv(var);
    if ((all && !strcmp(all, "0")) || (env && !strcmp(env, "0"))) {
        return false;
    }
    *asked = env && kf__attn_grad_tiling_parse(env, tl);
    kf_adapter_info info;
    if (!kf__sgmat_usable(ctx, sg) || kf_context_adapter_info(ctx, &info) != KF_OK) {
        return false;
    }
    *bytes = info.max_compute_workgroup_storage_size;
    return true;
}

kf_kernel *kf__attention_grad_kv_sgmat_for(kf_context *ctx, const kf__attn_desc *a, bool want_dk,
                                           bool want_dv) {
    uint32_t sg = 0, bytes = 0;
    kf__attn_grad_tiling tl;
    bool asked = false;
    if (!sgmat_setup(ctx, "KF_ATTN_GRAD_SGMAT", &sg, &bytes, &tl, &asked)) {
        return NULL;
    }
    return kf__attention_grad_kv_sgmat(a, sg, bytes, want_dk, want_dv, asked ? &tl : NULL);
}

/* ---------------------------------------------------------------------------------------- */
/* dq and g' (attention_grad_q, attention_grad_stats, the pair)                             */
/* ---------------------------------------------------------------------------------------- */

/* Floats of the row sums' workgroup slots: lpr partial sums (P' and dS') of each of a
 * subgroup's 16 rows, later two coefficients a row. */
static uint32_t sums_floats(uint32_t sg) {
    return 2 * MAT * (sg / MAT);
}

uint32_t kf__attention_grad_q_sgmat_bytes(uint32_t w, uint32_t c, uint32_t d, uint32_t sg,
                                          uint32_t slots) {
    return 2 * c * (d + PAD) * 2 +
           w * (scratch_floats(c) * 4 + 2 * slots * MAT * (c + PAD) * 2 + sums_floats(sg) * 4);
}

/* The subgroup's 16 rows of dy (f32 in g, rows of d + 2) as D / 16 hi and lo left matrices
 * each, split through its P' slots (p_hi, p_lo at p_at: 16 x 16 blocks, rows of ldp). */
static void load_dy(kf_kernel *k, kf_binding bg, kf_val g_row0, kf_shared p_hi, kf_shared p_lo,
                    kf_val p_at, uint32_t ldp, kf_val lane, uint32_t sg, uint32_t d, kf_sgmat *hi,
                    kf_sgmat *lo) {
    for (uint32_t i = 0; i < d / MAT; i++) {
        for (uint32_t e = 0; e < MAT * MAT / sg; e++) {
            kf_val flat = kf_add(k, lane, u32(k, e * sg));
            kf_val r = kf_div(k, flat, u32(k, MAT)), c = kf_binary(k, KF_OP_MOD, flat, u32(k, MAT));
            kf_val at = kf_add(k, kf_add(k, g_row0, kf_mul(k, r, u32(k, d + 2))), c);
            kf_val x = kf_load(k, bg, i ? kf_add(k, at, u32(k, i * MAT)) : at);
            store_split(k, p_hi, p_lo, kf_add(k, p_at, kf_add(k, kf_mul(k, r, u32(k, ldp)), c)), x);
        }
        kf_barrier(k);
        hi[i] = kf_sgmat_declare(k, "dyh", KF_SGMAT_LEFT, KF_SCALAR_F16, MAT, MAT);
        lo[i] = kf_sgmat_declare(k, "dyl", KF_SGMAT_LEFT, KF_SCALAR_F16, MAT, MAT);
        kf_sgmat_load(k, hi[i], p_hi, p_at, false, u32(k, ldp));
        kf_sgmat_load(k, lo[i], p_lo, p_at, false, u32(k, ldp));
        kf_barrier(k); /* before the next block overwrites the slots */
    }
}

kf_kernel *kf__attention_grad_q_sgmat(const kf__attn_desc *a, uint32_t sg, uint32_t wg_bytes,
                                      bool want_dq, bool want_stats,
                                      const kf__attn_grad_tiling *tiling) {
    const uint32_t t = a->t, d = a->d, dm = d / MAT;
    const uint32_t budget = wg_bytes ? wg_bytes : 49152u;
    if ((!want_dq && !want_stats) || !shapes_fit(a, sg)) {
        return NULL;
    }
    kf__attn_grad_tiling tl;
    if (!choose_tiling(tiling, t, d, sg, budget, d <= 64, kf__attention_grad_q_sgmat_bytes, &tl)) {
        return NULL;
    }
    const uint32_t w = tl.subgroups, c = tl.tile;
    /* one pair of slots: dS' in them, then P' (g' alone stores neither) */
    const bool turns = tl.slots == 1 && want_dq;
    const uint32_t lpr = sg / MAT, per = c / lpr, cm = c / MAT, rows = w * MAT;
    const uint32_t qtiles = (t + rows - 1) / rows, threads = w * sg;
    const uint32_t ldk = d + PAD, ls = c + SPAD, ldp = c + PAD, sf = scratch_floats(c);
    const uint32_t sums = sums_floats(sg);
    const bool causal = a->causal;
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32), h = kf_type_scalar(KF_SCALAR_F16);

    kf_kernel *k = create(want_dq && want_stats ? "q_stats"
                          : want_dq             ? "q"
                                                : "stats",
                          rows, c, turns, causal, threads, want_dq ? h : f32, qtiles * a->bh);
    if (!k) {
        return NULL;
    }
    /* attention_grad.c's bindings: q, k, v, g[, stats], out */
    kf_binding bq = kf_kernel_storage(k, "q", h, KF_ACCESS_READ);
    kf_binding bk = kf_kernel_storage(k, "k", kf_type_vec(KF_SCALAR_F16, 4), KF_ACCESS_READ);
    kf_binding bv = kf_kernel_storage(k, "v", kf_type_vec(KF_SCALAR_F16, 4), KF_ACCESS_READ);
    kf_binding bg = kf_kernel_storage(k, "g", f32, KF_ACCESS_READ);
    kf_binding bstats = {0};
    if (want_dq && want_stats) {
        bstats = kf_kernel_storage(k, "stats", f32, KF_ACCESS_READ_WRITE);
    }
    kf_shared ktile = kf_kernel_workgroup(k, "ktile", h, c * ldk);
    kf_shared vtile = kf_kernel_workgroup(k, "vtile", h, c * ldk);
    kf_shared scratch = kf_kernel_workgroup(k, "scratch", f32, w * sf);
    kf_shared p_hi = kf_kernel_workgroup(k, "p_hi", h, rows * ldp);
    kf_shared p_lo = kf_kernel_workgroup(k, "p_lo", h, rows * ldp);
    kf_shared ds_hi = p_hi, ds_lo = p_lo; /* in turns: P's slots */
    if (want_dq && !turns) {
        ds_hi = kf_kernel_workgroup(k, "ds_hi", h, rows * ldp);
        ds_lo = kf_kernel_workgroup(k, "ds_lo", h, rows * ldp);
    }
    kf_shared red = kf_kernel_workgroup(k, "row_sums", f32, w * sums);

    const place pl = place_subgroups(k, sg, qtiles, rows, t, sf, ls, ldp, false);
    const kf_val local = pl.local, sgi = pl.sgi, lane = pl.lane, q0 = pl.first;
    const kf_val head_row0 = pl.head_row0, sub_base = pl.sub_base, writes = pl.writes;
    const kf_val rin = pl.rin, part = pl.part, query = pl.row, s_at = pl.s_at, s_row = pl.s_row;
    const kf_val dp_row = pl.dp_row, p_at = pl.p_at, p_row = pl.p_row;
    kf_val sum_at = kf_let(k, "sum_at", kf_mul(k, sgi, u32(k, sums)));
    kf_val sub_row0 = kf_let(k, "sub_row0", kf_add(k, head_row0, sub_base));
    kf_val g_row0 = kf_let(k, "g_row0", kf_mul(k, sub_row0, u32(k, d + 2)));
    kf_val g_row = kf_let(k, "g_row", kf_add(k, g_row0, kf_mul(k, rin, u32(k, d + 2))));
    kf_val row_lse = kf_let(k, "row_lse", kf_load(k, bg, kf_add(k, g_row, u32(k, d))));
    kf_val row_delta = kf_let(k, "row_delta", kf_load(k, bg, kf_add(k, g_row, u32(k, d + 1))));

    /* q's and dy's rows as left matrices, held; dS' k and P' k, zeroed by a product of two
     * matrices never loaded */
    kf_sgmat ql[128 / MAT], dyh[128 / MAT], dyl[128 / MAT], acc1[128 / MAT], acc2[128 / MAT];
    kf_sgmat zl = kf_sgmat_declare(k, "zero_l", KF_SGMAT_LEFT, KF_SCALAR_F16, MAT, MAT);
    kf_sgmat zr = kf_sgmat_declare(k, "zero_r", KF_SGMAT_RIGHT, KF_SCALAR_F16, MAT, MAT);
    for (uint32_t i = 0; i < dm; i++) {
        ql[i] = kf_sgmat_declare(k, "ql", KF_SGMAT_LEFT, KF_SCALAR_F16, MAT, MAT);
        kf_sgmat_load_storage(k, ql[i], bq,
                              kf_add(k, kf_mul(k, sub_row0, u32(k, d)), u32(k, i * MAT)), false,
                              u32(k, d));
        if (want_dq) {
            acc1[i] = kf_sgmat_declare(k, "dsk", KF_SGMAT_RESULT, KF_SCALAR_F32, MAT, MAT);
            acc2[i] = kf_sgmat_declare(k, "pk", KF_SGMAT_RESULT, KF_SCALAR_F32, MAT, MAT);
            kf_sgmat_mul(k, acc1[i], zl, zr);
            kf_sgmat_mul(k, acc2[i], zl, zr);
        }
    }
    load_dy(k, bg, g_row0, p_hi, p_lo, p_at, ldp, lane, sg, d, dyh, dyl);
    kf_var psum = kf_declare(k, "psum", f32, kf_lit_f32(k, 0));
    kf_var shift = kf_declare(k, "shift", f32, kf_lit_f32(k, 0));
    kf_sgmat sr = kf_sgmat_declare(k, "s", KF_SGMAT_RESULT, KF_SCALAR_F32, MAT, MAT);
    kf_sgmat right = kf_sgmat_declare(k, "rt", KF_SGMAT_RIGHT, KF_SCALAR_F16, MAT, MAT);
    kf_sgmat l[4];
    for (uint32_t i = 0; want_dq && i < 4; i++) {
        l[i] = kf_sgmat_declare(k, "lf", KF_SGMAT_LEFT, KF_SCALAR_F16, MAT, MAT);
    }

    /* causal: keys past the workgroup's last query are seen by none of its queries */
    kf_val end =
        causal ? kf_let(k, "end", kf_call2(k, KF_FN_MIN, kf_add(k, q0, u32(k, rows)), u32(k, t)))
               : u32(k, t);
    kf_val c0 = kf_for(k, "c0", u32(k, 0), end, u32(k, c));
    {
        kf_val row0 = kf_let(k, "row0", kf_add(k, head_row0, c0));
        stage_f16(k, bk, ktile, local, threads, row0, c, d, ldk);
        stage_f16(k, bv, vtile, local, threads, row0, c, d, ldk);
        kf_barrier(k); /* (1) the tiles */
        /* S = q k^T and dP = dy v^T (dy as hi and lo), 16 x C, into the scratch */
        const two_products q_products = {ql, ktile, dyh, dyl, vtile, (kf_shared){0}};
        scores_and_dp(k, &q_products, true, cm, dm, ldk, sr, right, scratch, s_at, ls);
        kf_barrier(k); /* (2) the scores */
        /* P' = exp(scale S - lse) and dS' = P' (dP - delta), the invocation's columns part +
         * lpr e of its query's row; their sums over the row (P' kept in registers while dS' has
         * the slots, in turns) */
        kf_val p_kept[32];
        for (uint32_t e = 0; e < per; e++) {
            kf_val col = e ? kf_add(k, part, u32(k, lpr * e)) : part;
            kf_val s = kf_shared_load(k, scratch, kf_add(k, s_row, col));
            kf_val p =
                kf_call1(k, KF_FN_EXP, kf_sub(k, kf_mul(k, s, kf_lit_f32(k, a->scale)), row_lse));
            if (causal) {
                kf_val sees = kf_binary(k, KF_OP_LE, kf_add(k, c0, col), query);
                p = kf_select(k, kf_lit_f32(k, 0), p, sees);
            }
            p = kf_let(k, "p", p);
            kf_val dpv = kf_shared_load(k, scratch, kf_add(k, dp_row, col));
            kf_val ds = kf_let(k, "ds", kf_mul(k, p, kf_sub(k, dpv, row_delta)));
            kf_assign(k, psum, kf_add(k, kf_read(k, psum), p));
            kf_assign(k, shift, kf_add(k, kf_read(k, shift), ds));
            if (want_dq) {
                kf_val at = kf_add(k, p_row, col);
                store_split(k, ds_hi, ds_lo, at, kf_mul(k, ds, kf_lit_f32(k, DS_SCALE)));
                if (turns) {
                    p_kept[e] = p;
                } else {
                    store_split(k, p_hi, p_lo, at, kf_mul(k, p, kf_lit_f32(k, P_SCALE)));
                }
            }
        }
        for (uint32_t round = 0; want_dq && round < (turns ? 2u : 1u); round++) {
            if (round) {
                kf_barrier(k); /* dS' read */
                for (uint32_t e = 0; e < per; e++) {
                    kf_val col = e ? kf_add(k, part, u32(k, lpr * e)) : part;
                    store_split(k, p_hi, p_lo, kf_add(k, p_row, col),
                                kf_mul(k, p_kept[e], kf_lit_f32(k, P_SCALE)));
                }
            }
            kf_barrier(k); /* (3) P' and dS' */
            /* dS' k and P' k over the tile's 16-key blocks (in turns: dS' k, then P' k) */
            for (uint32_t j = 0; j < cm; j++) {
                kf_val pb = kf_add(k, p_at, u32(k, j * MAT));
                kf_shared from[4] = {ds_hi, ds_lo, p_hi, p_lo};
                uint32_t f0 = turns && round ? 2 : 0, f1 = turns && !round ? 2 : 4;
                for (uint32_t f = f0; f < f1; f++) {
                    kf_sgmat_load(k, l[f], from[f], pb, false, u32(k, ldp));
                }
                for (uint32_t i = 0; i < dm; i++) {
                    kf_sgmat_load(k, right, ktile, u32(k, j * MAT * ldk + i * MAT), false,
                                  u32(k, ldk));
                    if (f0 == 0) {
                        kf_sgmat_mma(k, acc1[i], l[0], right);
                        kf_sgmat_mma(k, acc1[i], l[1], right);
                    }
                    if (f1 == 4) {
                        kf_sgmat_mma(k, acc2[i], l[2], right);
                        kf_sgmat_mma(k, acc2[i], l[3], right);
                    }
                }
            }
        }
        if (want_dq) { /* (4) before the next tile's staging (g' alone reads the tiles before 2) */
            kf_barrier(k);
        }
    }
    kf_end(k);

    /* the rows' sums from their lpr invocations' parts */
    kf_shared_store(k, red, kf_add(k, sum_at, kf_mul(k, lane, u32(k, 2))), kf_read(k, psum));
    kf_shared_store(k, red, kf_add(k, sum_at, kf_add(k, kf_mul(k, lane, u32(k, 2)), u32(k, 1))),
                    kf_read(k, shift));
    kf_barrier(k);
    kf_val tot_p = {0, 0}, tot_s = {0, 0};
    for (uint32_t pp = 0; pp < lpr; pp++) {
        kf_val at = kf_add(k, sum_at, kf_mul(k, kf_add(k, rin, u32(k, pp * MAT)), u32(k, 2)));
        kf_val xp = kf_shared_load(k, red, at),
               xs = kf_shared_load(k, red, kf_add(k, at, u32(k, 1)));
        tot_p = pp ? kf_add(k, tot_p, xp) : xp;
        tot_s = pp ? kf_add(k, tot_s, xs) : xs;
    }
    tot_p = kf_let(k, "row_psum", tot_p);
    kf_val inv_p = kf_let(k, "inv_p", kf_div(k, kf_lit_f32(k, 1), tot_p));
    kf_val mean = kf_let(k, "mean_ds", kf_mul(k, tot_s, inv_p));
    if (want_stats) {
        /* g' = [dy | lse + log psum | delta + shift / psum] (attention_grad.c's dq kernel) */
        kf_if(k, writes);
        for (uint32_t e = 0; e < MAT * d / sg; e++) {
            kf_val flat = kf_add(k, lane, u32(k, e * sg));
            kf_val r = kf_div(k, flat, u32(k, d)), col = kf_binary(k, KF_OP_MOD, flat, u32(k, d));
            kf_val at = kf_add(k, kf_add(k, g_row0, kf_mul(k, r, u32(k, d + 2))), col);
            kf_val x = kf_load(k, bg, at);
            if (want_dq) {
                kf__store_f32(k, bstats, at, x, KF_DTYPE_F32);
            } else {
                kf__yield_f32(k, x, at, KF_DTYPE_F32);
            }
        }
        kf_if(k, kf_binary(k, KF_OP_EQ, part, u32(k, 0)));
        kf_val lse = kf_add(k, row_lse, kf_call1(k, KF_FN_LOG, tot_p));
        kf_val delta = kf_add(k, row_delta, mean);
        kf_val at_lse = kf_add(k, g_row, u32(k, d)), at_delta = kf_add(k, g_row, u32(k, d + 1));
        if (want_dq) {
            kf__store_f32(k, bstats, at_lse, lse, KF_DTYPE_F32);
            kf__store_f32(k, bstats, at_delta, delta, KF_DTYPE_F32);
        } else {
            kf__yield_f32(k, lse, at_lse, KF_DTYPE_F32);
            kf__yield_f32(k, delta, at_delta, KF_DTYPE_F32);
        }
        kf_end(k);
        kf_end(k);
    }
    if (!want_dq) {
        return k;
    }
    /* dq = scale (dS' k - mean P' k) / psum, each row's coefficients (dS's and P's scales
     * undone) in its sums' slots; the first causal query sees one key: its dq is exactly 0 */
    kf_val ca = kf_mul(k, inv_p, kf_lit_f32(k, a->scale / DS_SCALE));
    kf_val cb = kf_mul(k, kf_mul(k, mean, inv_p), kf_lit_f32(k, a->scale / P_SCALE));
    if (causal) {
        kf_val first = kf_binary(k, KF_OP_EQ, query, u32(k, 0));
        ca = kf_select(k, ca, kf_lit_f32(k, 0), first);
        cb = kf_select(k, cb, kf_lit_f32(k, 0), first);
    }
    ca = kf_let(k, "coef_a", ca);
    cb = kf_let(k, "coef_b", cb);
    kf_barrier(k); /* every part read */
    kf_if(k, kf_binary(k, KF_OP_EQ, part, u32(k, 0)));
    kf_shared_store(k, red, kf_add(k, sum_at, kf_mul(k, rin, u32(k, 2))), ca);
    kf_shared_store(k, red, kf_add(k, sum_at, kf_add(k, kf_mul(k, rin, u32(k, 2)), u32(k, 1))), cb);
    kf_end(k);
    result_dst dst = {true, {0}, sub_row0, writes};
    store_blocks(k, acc1, acc2, d, scratch, s_at, 1.0f, red, sum_at, lane, sg, dst);
    return k;
}

kf_kernel *kf__attention_grad_q_sgmat_for(kf_context *ctx, const kf__attn_desc *a, bool want_dq,
                                          bool want_stats) {
    uint32_t sg = 0, bytes = 0;
    kf__attn_grad_tiling tl;
    bool asked = false;
    if (!sgmat_setup(ctx, "KF_ATTN_GRAD_Q_SGMAT", &sg, &bytes, &tl, &asked)) {
        return NULL;
    }
    return kf__attention_grad_q_sgmat(a, sg, bytes, want_dq, want_stats, asked ? &tl : NULL);
}
