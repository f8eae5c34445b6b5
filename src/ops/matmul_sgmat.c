/* A matmul on subgroup matrices (tensor cores): c[M,N] = a[M,K] * b[K,N], row-major, f16 storage,
 * f32 accumulation.
 *
 * Each workgroup computes a bm x bn tile of c. The K axis is walked bk at a time: every
 * invocation fetches vec4s of a's and b's tiles from global memory into registers (zero outside
 * the matrices, so any M, N, K works), then stores them as f16 into two row-major tiles in
 * workgroup memory, a's rows padded by 8 halves, b's too, so the rows of a 16x16 matrix fall in
 * different banks. The next tiles are fetched while the current ones are multiplied, and with
 * two stages the tiles are double-buffered (one barrier per step). Each subgroup owns a block of
 * tm x tn result matrices (16x16, f32) and, per 16-deep slice of the tile, loads tm left and tn
 * right matrices from workgroup memory and runs tm * tn multiply-accumulates.
 *
 * The store phase: subgroup matrices cannot be read element by element, so each subgroup stores
 * its results, a row of tn matrices at a time (or one, where workgroup memory is short), into
 * its own f32 scratch in workgroup memory; after a barrier every invocation reads its elements
 * of the scratch, neighbours reading neighbouring columns, and hands each one (rounded to f16)
 * to kf_kernel_yield under a bounds check: the epilogue hook, where a fused bias, activation or
 * residual runs.
 */
#include "ops/matmul_sgmat.h"

#include "ops/matmul_blocked.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LANES 4u
#define MAT 16u          /* the subgroup matrices are 16x16 (left 16x16, right 16x16: K = 16) */
#define PAD 8u           /* halves of padding after each tile row */
#define WG_MEMORY 49152u /* workgroup memory every device with subgroup matrices offers */

static uint32_t threads_of(const kf__sgmat_config *c, uint32_t sg) {
    return c->wm * c->wn * sg;
}

/* Result matrices per round of the store phase: a row of tn, or one if workgroup memory is
 * short; 0 when even one does not fit. staged_a, staged_b: which tiles workgroup memory holds,
 * in `stages` copies. */
static uint32_t store_cols(const kf__sgmat_config *c, uint32_t stages, bool staged_a,
                           bool staged_b) {
    uint32_t tiles =
        stages *
        ((staged_a ? c->bm * (c->bk + PAD) : 0u) + (staged_b ? c->bk * (c->bn + PAD) : 0u)) * 2u;
    uint32_t tn = c->bn / c->wn / MAT;
    uint32_t per_round = c->wm * c->wn * MAT * MAT * 4u; /* bytes of one matrix per subgroup */
    if (tiles + per_round * tn <= WG_MEMORY) {
        return tn;
    }
    return tiles + per_round <= WG_MEMORY ? 1u : 0u;
}

/* The stages a kernel staging these tiles uses: the configuration's, or one where a
 * configuration meant for direct operands stages both (a ragged shape) and two do not fit. */
static uint32_t stages_for(const kf__sgmat_config *c, bool staged_a, bool staged_b) {
    uint32_t stages = c->stages ? c->stages : 1;
    if (c->direct && stages == 2 && !store_cols(c, 2, staged_a, staged_b)) {
        stages = 1;
    }
    return stages;
}

bool kf__sgmat_config_valid(const kf__sgmat_config *c, uint32_t sg) {
    if (!c || !sg || (sg & (sg - 1)) || sg > 128) {
        return false;
    }
    if (!c->bm || !c->bn || !c->bk || !c->wm || !c->wn || c->stages > 2) {
        return false;
    }
    if (c->bm % (MAT * c->wm) || c->bn % (MAT * c->wn) || c->bk % MAT) {
        return false;
    }
    uint32_t threads = threads_of(c, sg);
    if (threads > 1024 || (c->bm / c->wm / MAT) * (c->bn / c->wn / MAT) > 32) {
        return false; /* at most 32 result matrices per subgroup */
    }
    if (c->bm / c->wm / MAT > 8 || c->bn / c->wn / MAT > 8) {
        return false; /* at most 8 left and 8 right matrices per slice of K */
    }
    uint32_t loads_a = c->bm * c->bk, loads_b = c->bk * c->bn;
    if (loads_a % (LANES * threads) || loads_b % (LANES * threads) ||
        loads_a / (LANES * threads) > KF__MM_MAX_LOADS ||
        loads_b / (LANES * threads) > KF__MM_MAX_LOADS) {
        return false; /* whole vec4s per invocation, at most 16 of each tile */
    }
    return c->direct <= 3 && store_cols(c, stages_for(c, true, true), true, true) > 0;
}

const kf__sgmat_config *kf__sgmat_default_config(uint32_t m, uint32_t k, uint32_t n, bool checked) {
    /* Measured on an H200 (bench/results/h200-sgmat-*.txt). Robustness off: 128x256 tiles of
     * 2x4 subgroups (64x64 each, 16 result matrices) single-buffered reach 221 TFLOP/s at 4096^3
     * and 231 at 8192^3, against 185 for 128x128 double-buffered (64x32 each); two stages of
     * 128x256x32 tiles do not fit in 48 KiB beside the scratch. Robustness on, Tint wraps every
     * subgroup-matrix load in a bounds test, and fewer matrices per subgroup do better: 128x128
     * double-buffered 73 TFLOP/s, 128x256 53. Below 2048x2048 outputs, 64x64 tiles keep every
     * multiprocessor busy. */
    static const kf__sgmat_config big = {128, 256, 32, 2, 4, 1, 8, 0};
    static const kf__sgmat_config big_checked = {128, 128, 32, 2, 4, 2, 8, 0};
    static const kf__sgmat_config small = {64, 64, 32, 2, 2, 2, 0, 0};
    (void)k;
    if ((uint64_t)m * n < 2048ull * 2048ull) {
        return &small;
    }
    return checked ? &big_checked : &big;
}

static kf_val u32(kf_kernel *k, uint32_t v) {
    return kf_lit_u32(k, v);
}

/* vec4<f16> of the row-major rows x cols matrix bound at b, at (r, c..c+3), into `into`. `wide`:
 * b is array<vec4<f16>> (cols % 4 == 0). Unchecked: the caller knows it is inside. */
static void fetch4_inside(kf_kernel *k, kf_binding b, kf_val offset, bool wide, kf_val r, kf_val c,
                          uint32_t cols, kf_var into) {
    kf_type h4 = kf_type_vec(KF_SCALAR_F16, LANES);
    kf_val base = kf_add(k, kf_mul(k, r, u32(k, cols)), c);
    if (offset.id) {
        base = kf_add(k, offset, base);
    }
    if (wide) {
        kf_assign(k, into, kf_load(k, b, kf_div(k, base, u32(k, LANES))));
        return;
    }
    kf_val vals[LANES];
    for (uint32_t l = 0; l < LANES; l++) {
        vals[l] = kf_load(k, b, l ? kf_add(k, base, u32(k, l)) : base);
    }
    kf_assign(k, into, kf_vec(k, h4, vals, LANES));
}

/* Fetches one vec4 of a tile: checked only where the tile crosses the matrix's edge (`interior`,
 * a bool uniform over the workgroup, says it does not; the invalid handle: it may). */
static void fetch4(kf_kernel *k, kf_binding b, kf_val offset, bool wide, bool checked,
                   kf_val interior, kf_val r, kf_val c, uint32_t rows, uint32_t cols, kf_var into) {
    if (!checked) {
        fetch4_inside(k, b, offset, wide, r, c, cols, into);
        return;
    }
    kf_if(k, interior);
    fetch4_inside(k, b, offset, wide, r, c, cols, into);
    kf_else(k);
    kf__mm_load4(k, b, offset, wide, true, r, c, rows, cols, into, KF_SCALAR_F16, false);
    kf_end(k);
}

kf_kernel *kf__matmul_sgmat(uint32_t m, uint32_t kdim, uint32_t n, const kf__sgmat_config *cfg,
                            uint32_t sg) {
    return kf__matmul_sgmat_batched(m, kdim, n, cfg, sg, NULL);
}

kf_kernel *kf__matmul_sgmat_batched(uint32_t m, uint32_t kdim, uint32_t n,
                                    const kf__sgmat_config *cfg, uint32_t sg,
                                    const kf__mm_batch *batch) {
    const uint32_t count = kf__mm_batch_count(batch);
    if (!cfg) {
        cfg = kf__sgmat_default_config(m, kdim, n, false);
    }
    if (!kf__sgmat_config_valid(cfg, sg) || !m || !kdim || !n) {
        return NULL;
    }
    const uint32_t bm = cfg->bm, bn = cfg->bn, bk = cfg->bk, wm = cfg->wm, wn = cfg->wn;
    const uint32_t threads = threads_of(cfg, sg);
    const uint32_t tm = bm / wm / MAT, tn = bn / wn / MAT; /* result matrices per subgroup */
    const uint32_t lda = bk + PAD, ldb = bn + PAD;         /* tile row strides, in halves */
    const uint32_t stage_a = bm * lda, stage_b = bk * ldb; /* halves per stage */
    const bool ragged_m = m % bm != 0, ragged_n = n % bn != 0, ragged_k = kdim % bk != 0;
    /* Operands read straight from their buffers (no tile): only where no tile crosses an edge. */
    const bool whole =
        !ragged_m && !ragged_n && !ragged_k && kdim % 8 == 0 && n % 8 == 0 && count <= 1;
    const bool direct_a = whole && (cfg->direct & 1u), direct_b = whole && (cfg->direct & 2u);
    const uint32_t loads_a = direct_a ? 0 : bm * bk / (LANES * threads);
    const uint32_t loads_b = direct_b ? 0 : bk * bn / (LANES * threads);
    const uint32_t stages = stages_for(cfg, !direct_a, !direct_b);
    /* the scratch's row length, in floats */
    const uint32_t ecols = store_cols(cfg, stages, !direct_a, !direct_b) * MAT;
    const bool wide_a = kdim % LANES == 0 && !direct_a, wide_b = n % LANES == 0 && !direct_b;
    const bool staged = !direct_a || !direct_b;
    const uint32_t tiles_m = (m + bm - 1) / bm, tiles_n = (n + bn - 1) / bn;
    kf_type h = kf_type_scalar(KF_SCALAR_F16), h4 = kf_type_vec(KF_SCALAR_F16, LANES);

    char name[80];
    snprintf(name, sizeof name, "matmul_sgmat_%ux%ux%u_%ux%u%s%s%s%s", bm, bn, bk, wm, wn,
             stages == 2 && staged ? "_db" : "", direct_a ? "_direct_a" : "",
             direct_b ? "_direct_b" : "", count > 1 ? "_batched" : "");
    kf_kernel_desc desc = {.name = name, .workgroup_size = {threads, 1, 1}, .output = h};
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    kf_binding a = kf_kernel_storage(k, "a", wide_a ? h4 : h, KF_ACCESS_READ);
    kf_binding b = kf_kernel_storage(k, "b", wide_b ? h4 : h, KF_ACCESS_READ);
    kf_shared tile_a = {0}, tile_b = {0};
    if (!direct_a) {
        tile_a = kf_kernel_workgroup(k, "tile_a", h, stages * stage_a);
    }
    if (!direct_b) {
        tile_b = kf_kernel_workgroup(k, "tile_b", h, stages * stage_b);
    }
    kf_shared scratch =
        kf_kernel_workgroup(k, "scratch", kf_type_scalar(KF_SCALAR_F32), wm * wn * MAT * ecols);

    kf_val local = kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX);
    kf_val sgi = kf_let(k, "sgi", kf_div(k, local, u32(k, sg)));
    kf_val lane = kf_let(k, "lane", kf_binary(k, KF_OP_MOD, local, u32(k, sg)));
    kf_val tile = kf_let(k, "tile", kf_workgroup_linear(k));
    kf_val off_a = {0}, off_b = {0}, off_c = {0};
    if (count > 1) {
        /* this workgroup's product of the batch, and its tile of that product */
        kf_val which = kf_let(k, "product", kf_div(k, tile, u32(k, tiles_m * tiles_n)));
        tile = kf_let(k, "tile_of", kf_binary(k, KF_OP_MOD, tile, u32(k, tiles_m * tiles_n)));
        off_a = kf__mm_batch_offset(k, batch, which, batch->a_step);
        off_b = kf__mm_batch_offset(k, batch, which, batch->b_step);
        off_c = kf__mm_batch_offset(k, batch, which, batch->c_step);
        off_a = off_a.id ? kf_let(k, "a_at", off_a) : off_a;
        off_b = off_b.id ? kf_let(k, "b_at", off_b) : off_b;
        off_c = off_c.id ? kf_let(k, "c_at", off_c) : off_c;
    }
    kf_val tile_row, tile_col;
    if (cfg->group_m > 1 && tiles_m > cfg->group_m) {
        /* group_m tile rows at a time, down each column of the group before moving right */
        uint32_t per_group = cfg->group_m * tiles_n;
        kf_val first = kf_let(k, "first_row",
                              kf_mul(k, kf_div(k, tile, u32(k, per_group)), u32(k, cfg->group_m)));
        kf_val rows_here =
            kf_let(k, "group_rows",
                   kf_call2(k, KF_FN_MIN, u32(k, cfg->group_m), kf_sub(k, u32(k, tiles_m), first)));
        kf_val in_group = kf_let(k, "in_group", kf_binary(k, KF_OP_MOD, tile, u32(k, per_group)));
        tile_row = kf_add(k, first, kf_binary(k, KF_OP_MOD, in_group, rows_here));
        tile_col = kf_div(k, in_group, rows_here);
    } else {
        tile_row = kf_div(k, tile, u32(k, tiles_n));
        tile_col = kf_binary(k, KF_OP_MOD, tile, u32(k, tiles_n));
    }
    kf_val row0 = kf_let(k, "row0", kf_mul(k, tile_row, u32(k, bm)));
    kf_val col0 = kf_let(k, "col0", kf_mul(k, tile_col, u32(k, bn)));
    /* this subgroup's block of the tile: rows sub_row.., columns sub_col.. */
    kf_val sub_row = kf_let(k, "sub_row", kf_mul(k, kf_div(k, sgi, u32(k, wn)), u32(k, bm / wm)));
    kf_val sub_col =
        kf_let(k, "sub_col", kf_mul(k, kf_binary(k, KF_OP_MOD, sgi, u32(k, wn)), u32(k, bn / wn)));

    /* Where each invocation's vec4s of the two tiles come from: a along k, b along n. */
    kf__mm_staging st;
    kf__mm_staging_init(k, local, threads, bk, bn, loads_a, loads_b, h4, &st);
    kf_val *a_row = st.a_row, *a_k = st.a_k, *b_k = st.b_k, *b_col = st.b_col;
    kf_var *next_a = st.next_a, *next_b = st.next_b;
    const bool check_a = ragged_m || ragged_k, check_b = ragged_k || ragged_n;
    /* Whether this workgroup's row of tiles, and its column, lie inside m and n: only the
     * tiles at the edges (and the last step of K) need checked loads. */
    kf_val rows_inside =
        !ragged_m ? kf_lit_bool(k, true)
        : m < bm  ? kf_lit_bool(k, false)
                  : kf_let(k, "rows_inside", kf_binary(k, KF_OP_LE, row0, u32(k, m - bm)));
    kf_val cols_inside =
        !ragged_n ? kf_lit_bool(k, true)
        : n < bn  ? kf_lit_bool(k, false)
                  : kf_let(k, "cols_inside", kf_binary(k, KF_OP_LE, col0, u32(k, n - bn)));
#define FETCH(k0)                                                                                  \
    do {                                                                                           \
        kf_val k_inside = !ragged_k   ? kf_lit_bool(k, true)                                       \
                          : kdim < bk ? kf_lit_bool(k, false)                                      \
                                      : kf_binary(k, KF_OP_LE, (k0), u32(k, kdim - bk));           \
        kf_val in_a = kf_binary(k, KF_OP_AND, rows_inside, k_inside);                              \
        kf_val in_b = kf_binary(k, KF_OP_AND, k_inside, cols_inside);                              \
        for (uint32_t v = 0; v < loads_a; v++) {                                                   \
            fetch4(k, a, off_a, wide_a, check_a, in_a, kf_add(k, row0, a_row[v]),                  \
                   kf_add(k, (k0), a_k[v]), m, kdim, next_a[v]);                                   \
        }                                                                                          \
        for (uint32_t v = 0; v < loads_b; v++) {                                                   \
            fetch4(k, b, off_b, wide_b, check_b, in_b, kf_add(k, (k0), b_k[v]),                    \
                   kf_add(k, col0, b_col[v]), kdim, n, next_b[v]);                                 \
        }                                                                                          \
    } while (0)
    /* registers -> the tiles of the stage starting at halves oa, ob */
#define STORE_TILES(oa, ob)                                                                        \
    do {                                                                                           \
        for (uint32_t v = 0; v < loads_a; v++) {                                                   \
            kf_val got = kf_read(k, next_a[v]);                                                    \
            kf_val at = kf_add(k, (oa), kf_add(k, kf_mul(k, a_row[v], u32(k, lda)), a_k[v]));      \
            for (uint32_t l = 0; l < LANES; l++) {                                                 \
                kf_shared_store(k, tile_a, l ? kf_add(k, at, u32(k, l)) : at,                      \
                                kf_extract(k, got, l));                                            \
            }                                                                                      \
        }                                                                                          \
        for (uint32_t v = 0; v < loads_b; v++) {                                                   \
            kf_val got = kf_read(k, next_b[v]);                                                    \
            kf_val at = kf_add(k, (ob), kf_add(k, kf_mul(k, b_k[v], u32(k, ldb)), b_col[v]));      \
            for (uint32_t l = 0; l < LANES; l++) {                                                 \
                kf_shared_store(k, tile_b, l ? kf_add(k, at, u32(k, l)) : at,                      \
                                kf_extract(k, got, l));                                            \
            }                                                                                      \
        }                                                                                          \
    } while (0)

    kf_sgmat acc[32];
    for (uint32_t i = 0; i < tm * tn; i++) {
        acc[i] = kf_sgmat_declare(k, "acc", KF_SGMAT_RESULT, KF_SCALAR_F32, MAT, MAT);
    }
    kf_sgmat left[8], right[8];
    for (uint32_t i = 0; i < tm; i++) {
        left[i] = kf_sgmat_declare(k, "left", KF_SGMAT_LEFT, KF_SCALAR_F16, MAT, MAT);
    }
    for (uint32_t j = 0; j < tn; j++) {
        right[j] = kf_sgmat_declare(k, "right", KF_SGMAT_RIGHT, KF_SCALAR_F16, MAT, MAT);
    }
    FETCH(u32(k, 0));
    if (stages == 2 && staged) {
        STORE_TILES(u32(k, 0), u32(k, 0));
        kf_barrier(k);
    }
    kf_val k0 = kf_for(k, "k0", u32(k, 0), u32(k, kdim), u32(k, bk));
    {
        kf_val more =
            kf_let(k, "more", kf_binary(k, KF_OP_LT, kf_add(k, k0, u32(k, bk)), u32(k, kdim)));
        kf_val oa = u32(k, 0), ob = u32(k, 0);
        if (stages == 2 && staged) {
            kf_val cur = kf_binary(k, KF_OP_BIT_AND, kf_div(k, k0, u32(k, bk)), u32(k, 1));
            oa = kf_let(k, "oa", kf_mul(k, cur, u32(k, stage_a)));
            ob = kf_let(k, "ob", kf_mul(k, cur, u32(k, stage_b)));
        } else if (staged) {
            STORE_TILES(oa, ob);
            kf_barrier(k);
        }
        /* The next tiles travel while this one is multiplied. */
        if (staged) {
            kf_if(k, more);
            FETCH(kf_add(k, k0, u32(k, bk)));
            kf_end(k);
        }
        /* Where this subgroup's matrices start: in the tiles, or in a and b themselves. */
        kf_val a_base, b_base;
        uint32_t a_stride = lda, b_stride = ldb;
        if (direct_a) {
            a_stride = kdim;
            a_base = kf_let(k, "a_base",
                            kf_add(k, kf_mul(k, kf_add(k, row0, sub_row), u32(k, kdim)), k0));
        } else {
            a_base = kf_let(k, "a_base", kf_add(k, oa, kf_mul(k, sub_row, u32(k, lda))));
        }
        if (direct_b) {
            b_stride = n;
            b_base =
                kf_let(k, "b_base", kf_add(k, kf_mul(k, k0, u32(k, n)), kf_add(k, col0, sub_col)));
        } else {
            b_base = kf_let(k, "b_base", kf_add(k, ob, sub_col));
        }
        for (uint32_t kk = 0; kk < bk; kk += MAT) {
            for (uint32_t j = 0; j < tn; j++) {
                kf_val at = kf_add(k, b_base, u32(k, kk * b_stride + j * MAT));
                if (direct_b) {
                    kf_sgmat_load_storage(k, right[j], b, at, false, u32(k, b_stride));
                } else {
                    kf_sgmat_load(k, right[j], tile_b, at, false, u32(k, b_stride));
                }
            }
            for (uint32_t i = 0; i < tm; i++) {
                kf_val at = kf_add(k, a_base, u32(k, i * MAT * a_stride + kk));
                if (direct_a) {
                    kf_sgmat_load_storage(k, left[i], a, at, false, u32(k, a_stride));
                } else {
                    kf_sgmat_load(k, left[i], tile_a, at, false, u32(k, a_stride));
                }
                for (uint32_t j = 0; j < tn; j++) {
                    kf_sgmat_mma(k, acc[i * tn + j], left[i], right[j]);
                }
            }
        }
        if (stages == 2 && staged) {
            kf_if(k, more);
            STORE_TILES(kf_sub(k, u32(k, stage_a), oa), kf_sub(k, u32(k, stage_b), ob));
            kf_end(k);
        }
        if (staged) {
            kf_barrier(k);
        }
    }
    kf_end(k);
#undef STORE_TILES
#undef FETCH

    /* The store phase, a round per row of result matrices (or per matrix): each subgroup's
     * matrices into its scratch, then every invocation yields its elements of it. */
    const uint32_t per_round = ecols / MAT, rounds_per_row = tn / per_round;
    const uint32_t elems = MAT * ecols / sg; /* per invocation per round */
    kf_val scratch0 = kf_let(k, "scratch0", kf_mul(k, sgi, u32(k, MAT * ecols)));
    for (uint32_t i = 0; i < tm; i++) {
        for (uint32_t rr = 0; rr < rounds_per_row; rr++) {
            for (uint32_t j = 0; j < per_round; j++) {
                kf_sgmat_store(k, scratch, kf_add(k, scratch0, u32(k, j * MAT)),
                               acc[i * tn + rr * per_round + j], false, u32(k, ecols));
            }
            kf_barrier(k);
            for (uint32_t e = 0; e < elems; e++) {
                kf_val flat = kf_add(k, lane, u32(k, e * sg));
                kf_val r = kf_div(k, flat, u32(k, ecols)),
                       c = kf_binary(k, KF_OP_MOD, flat, u32(k, ecols));
                kf_val row = kf_add(k, kf_add(k, row0, sub_row), kf_add(k, r, u32(k, i * MAT)));
                kf_val col =
                    kf_add(k, kf_add(k, col0, sub_col), kf_add(k, c, u32(k, rr * per_round * MAT)));
                kf_val inside = kf_lit_bool(k, true);
                if (ragged_m) {
                    inside = kf_binary(k, KF_OP_LT, row, u32(k, m));
                }
                if (ragged_n) {
                    kf_val in_n = kf_binary(k, KF_OP_LT, col, u32(k, n));
                    inside = ragged_m ? kf_binary(k, KF_OP_AND, inside, in_n) : in_n;
                }
                if (ragged_m || ragged_n) {
                    kf_if(k, inside);
                }
                kf_val value = kf_shared_load(k, scratch, kf_add(k, scratch0, flat));
                kf_val index = kf_add(k, kf_mul(k, row, u32(k, n)), col);
                kf_kernel_yield(k, kf_cast(k, h, value),
                                off_c.id ? kf_add(k, off_c, index) : index);
                if (ragged_m || ragged_n) {
                    kf_end(k);
                }
            }
            kf_barrier(k); /* the next round overwrites the scratch */
        }
    }
    uint32_t groups[3] = {tiles_m * tiles_n * count, 1, 1};
    kf_kernel_set_grid(k, groups);
    return k;
}

/* The smallest kernel using the configuration the generator needs, for a compile check. */
static const char probe_wgsl[] =
    "enable f16;\n"
    "enable subgroups;\n"
    "enable chromium_experimental_subgroup_matrix;\n"
    "diagnostic(off, chromium.subgroup_matrix_uniformity);\n"
    "var<workgroup> t: array<f16, 256>;\n"
    "var<workgroup> r: array<f32, 256>;\n"
    "@group(0) @binding(0) var<storage, read_write> out: array<f32>;\n"
    "@compute @workgroup_size(%u, 1, 1)\n"
    "fn main(@builtin(local_invocation_index) i: u32) {\n"
    "    var a: subgroup_matrix_left<f16, 16, 16>;\n"
    "    var b: subgroup_matrix_right<f16, 16, 16>;\n"
    "    var c: subgroup_matrix_result<f32, 16, 16>;\n"
    "    a = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(&t, 0u, false, 16u);\n"
    "    b = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>>(&t, 0u, false, 16u);\n"
    "    c = subgroupMatrixMultiplyAccumulate(a, b, c);\n"
    "    subgroupMatrixStore(&r, 0u, c, false, 16u);\n"
    "    workgroupBarrier();\n"
    "    out[i] = r[i];\n"
    "}\n";

bool kf__sgmat_usable(kf_context *ctx, uint32_t *sg) {
    const char *off = getenv("KF_NO_SGMAT");
    if (!ctx || (off && *off && strcmp(off, "0") != 0)) {
        return false;
    }
    kf_adapter_info info;
    if (kf_context_adapter_info(ctx, &info) != KF_OK || !info.has_subgroup_matrix ||
        !info.has_f16 || !info.subgroup_max_size ||
        info.subgroup_min_size != info.subgroup_max_size) {
        return false;
    }
    /* The pipeline cache keeps the probe, so this compiles once per context. */
    char wgsl[sizeof probe_wgsl + 16];
    snprintf(wgsl, sizeof wgsl, probe_wgsl, (unsigned)info.subgroup_max_size);
    kf_binding_kind kinds[1] = {KF_BINDING_STORAGE_READ_WRITE};
    kf_pipeline_desc pd = {.wgsl = wgsl, .bindings = kinds, .binding_count = 1};
    kf_pipeline *pipe = NULL;
    if (kf_pipeline_get(ctx, &pd, &pipe) != KF_OK) {
        return false;
    }
    if (sg) {
        *sg = info.subgroup_max_size;
    }
    return true;
}

bool kf__sgmat_config_parse(const char *text, kf__sgmat_config *out) {
    kf__sgmat_config c = {0};
    char end = 0;
    int got = text ? sscanf(text, "%ux%ux%u/%ux%u/%u/%u/%u%c", &c.bm, &c.bn, &c.bk, &c.wm, &c.wn,
                            &c.stages, &c.group_m, &c.direct, &end)
                   : 0;
    if (got != 7 && got != 8) {
        return false;
    }
    *out = c;
    return true;
}

kf_kernel *kf__matmul_sgmat_for(kf_context *ctx, uint32_t m, uint32_t k, uint32_t n) {
    return kf__matmul_sgmat_batched_for(ctx, m, k, n, NULL);
}

kf_kernel *kf__matmul_sgmat_batched_for(kf_context *ctx, uint32_t m, uint32_t k, uint32_t n,
                                        const kf__mm_batch *batch) {
    uint32_t sg = 0;
    if ((uint64_t)m * n < 64u * 64u || !kf__sgmat_usable(ctx, &sg)) {
        return NULL;
    }
    kf__sgmat_config chosen;
    const char *env = getenv("KF_SGMAT_CONFIG");
    bool forced =
        env && *env && kf__sgmat_config_parse(env, &chosen) && kf__sgmat_config_valid(&chosen, sg);
    kf_adapter_info info;
    bool checked = kf_context_adapter_info(ctx, &info) != KF_OK || !info.unchecked_access;
    return kf__matmul_sgmat_batched(
        m, k, n, forced ? &chosen : kf__sgmat_default_config(m, k, n, checked), sg, batch);
}
