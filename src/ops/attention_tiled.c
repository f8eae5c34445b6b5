/* Attention forward on FMA units with register tiles (FlashAttention's structure on CUDA cores),
 * for f32 and f16 storage, f32 compute; within 32 KiB of workgroup memory.
 *
 * A workgroup of 16 x 16 invocations owns 64 query rows of one head; invocation (x, y) owns rows
 * 4y .. 4y + 3 and, of each tile of 32 keys, keys x and x + 16: a 4 x 2 block of the scores
 * S = q k^T, accumulated in registers over D in chunks of C (32, or 16 when D > 64) staged in
 * workgroup memory (q's 64 x C and k's 32 x C), so each FMA costs 0.75 workgroup loads instead of
 * 2. The block goes, scaled and masked, to a 64 x 32 tile in workgroup memory, where one
 * invocation per row runs the online softmax over the tile's 32 columns (the running max and
 * sum, the rescale alpha for the row, P in place of S). Then every invocation rescales and
 * accumulates its 4 rows x D / 16 output columns, O = alpha O + P V, from P and v's tile (32 x D,
 * staged beside the scores). Causal tiles past the workgroup's last row are never visited (the
 * loop bound is uniform over the workgroup); rows past T compute row T - 1 and are not written.
 */
#include "ops/attention_sgmat.h"
#include "ops/ops_internal.h"

#include <stdio.h>

#define TX 16u       /* invocations along keys / output columns */
#define TY 16u       /* invocations along rows */
#define RM 4u        /* rows per invocation */
#define CN 2u        /* keys per invocation per tile */
#define BR (TY * RM) /* rows per workgroup: 64 */
#define BC (TX * CN) /* keys per tile: 32 */
#define MAX_D 128u   /* the largest head dimension */
#define MAX_OC (MAX_D / TX)
#define NEG_BIG -3.0e38f

static kf_val u32(kf_kernel *k, uint32_t v) {
    return kf_lit_u32(k, v);
}

/* The index of element (row, col) of input i (row over all heads): row-major, or where its
 * layout puts it (a strided view read in place: kf__attn_desc.layouts). */
static kf_val operand_at(kf_kernel *k, const kf__attn_desc *a, uint32_t i, kf_val row, kf_val col) {
    if (a->layouts && a->layouts[i].rank) {
        return kf__strided_at(k, &a->layouts[i], row, col);
    }
    return kf_add(k, kf_mul(k, row, u32(k, a->d)), col);
}

kf_kernel *kf__attention_tiled(const kf__attn_desc *a, kf_dtype dtype) {
    if (!a || !a->bh || !a->t || !a->d || a->d > MAX_D ||
        (dtype != KF_DTYPE_F32 && dtype != KF_DTYPE_F16)) {
        return NULL;
    }
    const uint32_t t = a->t, d = a->d;
    const uint32_t chunk = d <= 32 ? d : d <= 64 ? 32u : 16u;
    const uint32_t chunks = (d + chunk - 1) / chunk, cs = chunk + 1; /* padded chunk rows */
    const uint32_t oc = (d + TX - 1) / TX;                           /* output columns each */
    const uint32_t vs = d + 1, ss = BC + 1;                          /* padded v and S rows */
    const uint32_t qtiles = (t + BR - 1) / BR, threads = TX * TY;
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);

    char name[48];
    snprintf(name, sizeof name, "attention_tiled%s%s", a->causal ? "_causal" : "",
             a->with_lse ? "_lse" : "");
    kf_kernel_desc desc = {
        .name = name, .workgroup_size = {TX, TY, 1}, .output = kf__dtype_type(dtype)};
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    uint32_t groups[3] = {qtiles * a->bh, 1, 1};
    kf_kernel_set_grid(k, groups);
    kf_binding bq = kf__bind(k, "q", dtype, KF_ACCESS_READ);
    kf_binding bk = kf__bind(k, "k", dtype, KF_ACCESS_READ);
    kf_binding bv = kf__bind(k, "v", dtype, KF_ACCESS_READ);
    kf_binding blse = {0};
    if (a->with_lse) {
        blse = kf__bind(k, "lse", KF_DTYPE_F32, KF_ACCESS_READ_WRITE); /* f32 whatever q is */
    }
    kf_shared sq = kf_kernel_workgroup(k, "q_chunk", f32, BR * cs);
    kf_shared sk = kf_kernel_workgroup(k, "k_chunk", f32, BC * cs);
    kf_shared sv = kf_kernel_workgroup(k, "v_tile", f32, BC * vs);
    kf_shared sp = kf_kernel_workgroup(k, "scores", f32, BR * ss);
    kf_shared salpha = kf_kernel_workgroup(k, "alpha", f32, BR);

    kf_val local = kf_builtin_get(k, KF_BUILTIN_LOCAL_ID);
    kf_val lx = kf_let(k, "lx", kf_extract(k, local, 0));
    kf_val ly = kf_let(k, "ly", kf_extract(k, local, 1));
    kf_val lid = kf_let(k, "lid", kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX));
    kf_val wg = kf_let(k, "wg", kf_workgroup_linear(k));
    kf_val head = kf_let(k, "head", kf_div(k, wg, u32(k, qtiles)));
    kf_val r0 = kf_let(k, "r0", kf_mul(k, kf_binary(k, KF_OP_MOD, wg, u32(k, qtiles)), u32(k, BR)));
    kf_val head_row0 = kf_let(k, "head_row0", kf_mul(k, head, u32(k, t)));
    kf_val my_r = kf_let(k, "my_r", kf_mul(k, ly, u32(k, RM))); /* first of my rows in the tile */
    kf_val rowc[RM];
    for (uint32_t i = 0; i < RM; i++) {
        rowc[i] = kf_let(
            k, "rowc",
            kf_call2(k, KF_FN_MIN, kf_add(k, r0, kf_add(k, my_r, u32(k, i))), u32(k, t - 1)));
    }
    /* the row whose softmax this invocation runs (lid < 64) */
    kf_val stat_rowc =
        kf_let(k, "stat_rowc", kf_call2(k, KF_FN_MIN, kf_add(k, r0, lid), u32(k, t - 1)));
    kf_val is_stat = kf_let(k, "is_stat", kf_binary(k, KF_OP_LT, lid, u32(k, BR)));

    kf_var m_run = kf_declare(k, "m_run", f32, kf_lit_f32(k, NEG_BIG));
    kf_var l_run = kf_declare(k, "l_run", f32, kf_lit_f32(k, 0));
    kf_var acc[RM][MAX_OC];
    for (uint32_t i = 0; i < RM; i++) {
        for (uint32_t c = 0; c < oc; c++) {
            acc[i][c] = kf_declare(k, "acc", f32, kf_lit_f32(k, 0));
        }
    }
    kf_val end = u32(k, t);
    if (a->causal) {
        end = kf_let(k, "end", kf_call2(k, KF_FN_MIN, kf_add(k, r0, u32(k, BR)), u32(k, t)));
    }
    kf_val c0 = kf_for(k, "c0", u32(k, 0), end, u32(k, BC));
    {
        /* 1. S = q k^T for my 4 x 2 block, over D chunk by chunk */
        kf_var s[RM][CN];
        for (uint32_t i = 0; i < RM; i++) {
            for (uint32_t j = 0; j < CN; j++) {
                s[i][j] = kf_declare(k, "s", f32, kf_lit_f32(k, 0));
            }
        }
        kf_val d0 = kf_for(k, "d0", u32(k, 0), u32(k, chunks * chunk), u32(k, chunk));
        {
            for (int side = 0; side < 2; side++) {
                uint32_t rows = side ? BC : BR;
                kf_val first = side ? c0 : r0;
                kf_val e = kf_for(k, "e", lid, u32(k, rows * chunk), u32(k, threads));
                kf_val r = kf_div(k, e, u32(k, chunk)),
                       c = kf_binary(k, KF_OP_MOD, e, u32(k, chunk));
                kf_val col = kf_add(k, d0, c);
                kf_val row = kf_add(k, head_row0,
                                    kf_call2(k, KF_FN_MIN, kf_add(k, first, r), u32(k, t - 1)));
                kf_val at = operand_at(k, a, side ? 1u : 0u, row,
                                       kf_call2(k, KF_FN_MIN, col, u32(k, d - 1)));
                kf_val x = kf__load_f32(k, side ? bk : bq, at, dtype);
                if (chunks * chunk != d) {
                    x = kf_select(k, kf_lit_f32(k, 0), x, kf_binary(k, KF_OP_LT, col, u32(k, d)));
                }
                kf_shared_store(k, side ? sk : sq, kf_add(k, kf_mul(k, r, u32(k, cs)), c), x);
                kf_end(k);
            }
            kf_barrier(k);
            /* loops, not unrolled code: lavapipe's compile time grows with a kernel's size (15 s
             * unrolled at D 128), and GPU compilers unroll constant trip counts themselves */
            kf_val c = kf_for(k, "c", u32(k, 0), u32(k, chunk), u32(k, 1));
            {
                kf_val qv[RM], kv[CN];
                for (uint32_t i = 0; i < RM; i++) {
                    qv[i] = kf_shared_load(
                        k, sq, kf_add(k, kf_mul(k, kf_add(k, my_r, u32(k, i)), u32(k, cs)), c));
                }
                for (uint32_t j = 0; j < CN; j++) {
                    kv[j] = kf_shared_load(
                        k, sk, kf_add(k, kf_mul(k, kf_add(k, lx, u32(k, j * TX)), u32(k, cs)), c));
                }
                for (uint32_t i = 0; i < RM; i++) {
                    for (uint32_t j = 0; j < CN; j++) {
                        kf_assign(k, s[i][j],
                                  kf_call3(k, KF_FN_FMA, qv[i], kv[j], kf_read(k, s[i][j])));
                    }
                }
            }
            kf_end(k);
            kf_barrier(k);
        }
        kf_end(k);

        /* 2. the block, scaled and masked, into the scores; v's tile beside it */
        for (uint32_t i = 0; i < RM; i++) {
            for (uint32_t j = 0; j < CN; j++) {
                kf_val key = kf_add(k, c0, kf_add(k, lx, u32(k, j * TX)));
                kf_val keep = kf_binary(k, KF_OP_LT, key, u32(k, t));
                if (a->causal) {
                    keep = kf_binary(k, KF_OP_AND, keep, kf_binary(k, KF_OP_LE, key, rowc[i]));
                }
                kf_val x = kf_mul(k, kf_read(k, s[i][j]), kf_lit_f32(k, a->scale));
                kf_val at = kf_add(k, kf_mul(k, kf_add(k, my_r, u32(k, i)), u32(k, ss)),
                                   kf_add(k, lx, u32(k, j * TX)));
                kf_shared_store(k, sp, at, kf_select(k, kf_lit_f32(k, NEG_BIG), x, keep));
            }
        }
        {
            kf_val e = kf_for(k, "e", lid, u32(k, BC * d), u32(k, threads));
            kf_val r = kf_div(k, e, u32(k, d)), c = kf_binary(k, KF_OP_MOD, e, u32(k, d));
            kf_val row =
                kf_add(k, head_row0, kf_call2(k, KF_FN_MIN, kf_add(k, c0, r), u32(k, t - 1)));
            kf_shared_store(k, sv, kf_add(k, kf_mul(k, r, u32(k, vs)), c),
                            kf__load_f32(k, bv, operand_at(k, a, 2, row, c), dtype));
            kf_end(k);
        }
        kf_barrier(k);

        /* 3. one invocation per row: the online softmax over the tile's columns */
        kf_if(k, is_stat);
        {
            kf_val base = kf_let(k, "srow", kf_mul(k, lid, u32(k, ss)));
            kf_var mv = kf_declare(k, "m_tile", f32, kf_read(k, m_run));
            kf_val j1 = kf_for(k, "j", u32(k, 0), u32(k, BC), u32(k, 1));
            kf_assign(
                k, mv,
                kf_call2(k, KF_FN_MAX, kf_read(k, mv), kf_shared_load(k, sp, kf_add(k, base, j1))));
            kf_end(k);
            kf_val m_new = kf_let(k, "m_new", kf_read(k, mv));
            kf_var sum_v = kf_declare(k, "sum", f32, kf_lit_f32(k, 0));
            kf_val j2 = kf_for(k, "j", u32(k, 0), u32(k, BC), u32(k, 1));
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
        }
        kf_end(k);
        kf_barrier(k);

        /* 4. O = alpha O + P V for my 4 rows x D / 16 columns */
        kf_val cols[MAX_OC];
        for (uint32_t c = 0; c < oc; c++) {
            cols[c] = kf_call2(k, KF_FN_MIN, kf_add(k, lx, u32(k, c * TX)), u32(k, d - 1));
        }
        for (uint32_t i = 0; i < RM; i++) {
            kf_val al = kf_shared_load(k, salpha, kf_add(k, my_r, u32(k, i)));
            for (uint32_t c = 0; c < oc; c++) {
                kf_assign(k, acc[i][c], kf_mul(k, kf_read(k, acc[i][c]), al));
            }
        }
        kf_val j = kf_for(k, "j", u32(k, 0), u32(k, BC), u32(k, 1));
        {
            kf_val pv[RM], vv[MAX_OC];
            for (uint32_t i = 0; i < RM; i++) {
                pv[i] = kf_shared_load(
                    k, sp, kf_add(k, kf_mul(k, kf_add(k, my_r, u32(k, i)), u32(k, ss)), j));
            }
            for (uint32_t c = 0; c < oc; c++) {
                vv[c] = kf_shared_load(k, sv, kf_add(k, kf_mul(k, j, u32(k, vs)), cols[c]));
            }
            for (uint32_t i = 0; i < RM; i++) {
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

    /* each row's 1 / l through alpha's slots; lse from the row's own invocation */
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
    for (uint32_t i = 0; i < RM; i++) {
        kf_val row = kf_add(k, r0, kf_add(k, my_r, u32(k, i)));
        kf_val inv_l = kf_shared_load(k, salpha, kf_add(k, my_r, u32(k, i)));
        kf_if(k, kf_binary(k, KF_OP_LT, row, u32(k, t)));
        for (uint32_t c = 0; c < oc; c++) {
            kf_val col = kf_add(k, lx, u32(k, c * TX));
            bool ragged = (c + 1) * TX > d;
            if (ragged) {
                kf_if(k, kf_binary(k, KF_OP_LT, col, u32(k, d)));
            }
            kf__yield_f32(k, kf_mul(k, kf_read(k, acc[i][c]), inv_l),
                          kf_add(k, kf_mul(k, kf_add(k, head_row0, row), u32(k, d)), col), dtype);
            if (ragged) {
                kf_end(k);
            }
        }
        kf_end(k);
    }
    return k;
}
