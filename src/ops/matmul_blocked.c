/* A register-blocked matmul kernel: c[M,N] = a[M,K] * b[K,N], row-major, f32 or f16 storage
 * (f16 widened on load, stored rounded), f32 accumulation.
 *
 * Each workgroup computes a bm x bn tile of c; each invocation a tm x tn block of it, kept in
 * tm * tn/4 vec4 registers. The K axis is walked bk at a time through two tiles in workgroup
 * memory: a's tile stored transposed (k-major, so an invocation's tm values of one k are
 * consecutive), b's as vec4 rows. Global loads are vec4 where the row length allows (K % 4 for a,
 * N % 4 for b), bounds-checked only where the shapes are ragged, and double-buffered in
 * registers: the next tile is fetched while the current one is multiplied. Every element of c
 * goes to kf_kernel_yield, the store phase, so element-wise tails fuse into every variant.
 * Transposed operands (a stored [K, M], b stored [N, K]) change only the global loads: scalar,
 * a row apart, into the same staging registers and tiles.
 */
#include "ops/matmul_blocked.h"

#include <stdio.h>

#define LANES 4u
#define MAX_T 16u /* the most rows (columns) of c one invocation computes */

bool kf__matmul_blocked_valid(const kf__mm_config *c) {
    if (!c->bm || !c->bn || !c->bk || !c->tm || !c->tn) {
        return false;
    }
    if (c->bm % c->tm || c->bn % c->tn || c->tm % LANES || c->tn % LANES || c->bk % LANES ||
        c->stages > 2 || c->raster > 64 || c->edge > 1) {
        return false;
    }
    uint32_t threads = (c->bm / c->tm) * (c->bn / c->tn);
    if (threads == 0 || threads > 1024 || c->tm > MAX_T || c->tn > MAX_T ||
        c->tm * c->tn > MAX_T * 8) {
        return false;
    }
    if (c->bm * c->bk > 8 * LANES * threads || c->bk * c->bn > 8 * LANES * threads) {
        return false; /* at most 8 vec4 loads of each tile per invocation */
    }
    /* Each invocation loads whole vec4s of both tiles. */
    return (c->bm * c->bk) % (LANES * threads) == 0 && (c->bk * c->bn) % (LANES * threads) == 0;
}

const kf__mm_config *kf__mm_default_config(uint32_t m, uint32_t k, uint32_t n) {
    /* Measured on an H200 with robustness off (bench/results/s5/h200_f32-explore.log, every tile
     * side by side): the double-buffered 128x128x8 tile of 8x8 reaches 45.6 TFLOP/s at 4096^3 and
     * 46.2 at 8192^3, 45.7 and 46.7 with tiles in groups of 4 tile rows; at 1024^3 it leaves
     * multiprocessors idle, and 64x64x16 tiles of 8x8 do best there (30.2 TFLOP/s). On the
     * ragged 4095x4093x4097 (scalar loads: K and N are not multiples of 4) that tile on the
     * edge path runs at 41.8 TFLOP/s, the previous choice (128x128x16 single-buffered, every
     * load tested) at 36.6.
     * A shape of whole tiles has no edge: its kernel is the same with edge set or not. */
    static const kf__mm_config big = {128, 128, 8, 8, 8, 2, 4, 1};
    static const kf__mm_config small = {64, 64, 16, 8, 8, 2, 0, 1};
    (void)k;
    return (uint64_t)m * n >= 2048ull * 2048ull ? &big : &small;
}

bool kf__mm_config_parse(const char *text, kf__mm_config *out) {
    kf__mm_config c = {0};
    char end = 0;
    int got = text ? sscanf(text, "%ux%ux%u/%ux%u/%u/%u/%u%c", &c.bm, &c.bn, &c.bk, &c.tm, &c.tn,
                            &c.stages, &c.raster, &c.edge, &end)
                   : 0;
    if (got < 6 || got > 8 || !kf__matmul_blocked_valid(&c)) {
        return false;
    }
    *out = c;
    return true;
}

void kf__mm_config_str(const kf__mm_config *c, char *buf, size_t size) {
    int n = snprintf(buf, size, "%ux%ux%u/%ux%u/%u", c->bm, c->bn, c->bk, c->tm, c->tn,
                     c->stages ? c->stages : 1);
    if (n > 0 && (size_t)n < size && (c->raster > 1 || c->edge)) {
        snprintf(buf + n, size - (size_t)n, "/%u/%u", c->raster, c->edge);
    }
}

static kf_val u32(kf_kernel *k, uint32_t v) {
    return kf_lit_u32(k, v);
}

static kf_val widen(kf_kernel *k, kf_val v, bool to_f32) {
    if (!to_f32) {
        return v;
    }
    kf_type t = kf_val_type(k, v);
    return kf_cast(
        k, t.lanes > 1 ? kf_type_vec(KF_SCALAR_F32, t.lanes) : kf_type_scalar(KF_SCALAR_F32), v);
}

uint32_t kf__mm_batch_count(const kf__mm_batch *bt) {
    uint32_t count = 1;
    for (uint32_t i = 0; bt && i < bt->axes; i++) {
        count *= bt->dims[i];
    }
    return count;
}

kf_val kf__mm_batch_offset(kf_kernel *k, const kf__mm_batch *bt, kf_val index,
                           const uint32_t step[2]) {
    kf_val off = {0};
    uint32_t inner = 1, count = kf__mm_batch_count(bt);
    for (uint32_t i = bt ? bt->axes : 0; i-- > 0;) {
        if (step[i] && bt->dims[i] > 1) {
            kf_val coord = inner > 1 ? kf_div(k, index, u32(k, inner)) : index;
            if (inner * bt->dims[i] < count) {
                coord = kf_binary(k, KF_OP_MOD, coord, u32(k, bt->dims[i]));
            }
            kf_val term = step[i] > 1 ? kf_mul(k, coord, u32(k, step[i])) : coord;
            off = off.id ? kf_add(k, off, term) : term;
        }
        inner *= bt->dims[i];
    }
    return off;
}

void kf__mm_load4(kf_kernel *k, kf_binding b, kf_val offset, bool wide, bool checked, kf_val r,
                  kf_val c, uint32_t rows, uint32_t cols, kf_var into, kf_scalar stored,
                  bool to_f32) {
    const bool w = stored == KF_SCALAR_F16 && to_f32; /* f16 storage widened on load */
    const bool half_out = stored == KF_SCALAR_F16 && !to_f32;
    kf_type v4 = kf_type_vec(half_out ? KF_SCALAR_F16 : KF_SCALAR_F32, LANES);
    kf_val zero = half_out ? kf_lit_f16(k, 0.0f) : kf_lit_f32(k, 0.0f);
    kf_val base = kf_add(k, kf_mul(k, r, u32(k, cols)), c);
    kf_val wide_base = offset.id ? kf_add(k, offset, base) : base;
    if (wide) {
        if (checked) {
            kf_assign(k, into, kf_splat(k, v4, zero));
            kf_if(k, kf_binary(k, KF_OP_AND, kf_binary(k, KF_OP_LT, r, u32(k, rows)),
                               kf_binary(k, KF_OP_LT, c, u32(k, cols))));
            kf_assign(k, into, widen(k, kf_load(k, b, kf_div(k, wide_base, u32(k, LANES))), w));
            kf_end(k);
        } else {
            kf_assign(k, into, widen(k, kf_load(k, b, kf_div(k, wide_base, u32(k, LANES))), w));
        }
        return;
    }
    /* Scalar loads for rows whose length is not a multiple of 4: each from a clamped (always
     * valid) index, then zeroed outside the matrix by a select, with no branches. */
    kf_val vals[LANES];
    kf_val last = u32(k, rows * cols - 1u);
    for (uint32_t l = 0; l < LANES; l++) {
        kf_val cl = kf_add(k, c, u32(k, l));
        kf_val inside = kf_binary(k, KF_OP_AND, kf_binary(k, KF_OP_LT, r, u32(k, rows)),
                                  kf_binary(k, KF_OP_LT, cl, u32(k, cols)));
        kf_val at = kf_call2(k, KF_FN_MIN, kf_add(k, base, u32(k, l)), last);
        if (offset.id) {
            at = kf_add(k, offset, at);
        }
        vals[l] = kf_select(k, zero, widen(k, kf_load(k, b, at), w), inside);
    }
    kf_assign(k, into, kf_vec(k, v4, vals, LANES));
}

void kf__mm_staging_init(kf_kernel *k, kf_val local, uint32_t threads, uint32_t bk, uint32_t bn,
                         uint32_t loads_a, uint32_t loads_b, kf_type vec, kf__mm_staging *st) {
    for (uint32_t v = 0; v < loads_a && v < KF__MM_MAX_LOADS; v++) {
        kf_val flat = kf_add(k, local, u32(k, v * threads));
        st->a_row[v] = kf_let(k, "ar", kf_div(k, flat, u32(k, bk / LANES)));
        st->a_k[v] = kf_let(
            k, "ak", kf_mul(k, kf_binary(k, KF_OP_MOD, flat, u32(k, bk / LANES)), u32(k, LANES)));
    }
    for (uint32_t v = 0; v < loads_b && v < KF__MM_MAX_LOADS; v++) {
        kf_val flat = kf_add(k, local, u32(k, v * threads));
        st->b_k[v] = kf_let(k, "bkr", kf_div(k, flat, u32(k, bn / LANES)));
        st->b_col[v] = kf_let(
            k, "bc", kf_mul(k, kf_binary(k, KF_OP_MOD, flat, u32(k, bn / LANES)), u32(k, LANES)));
    }
    for (uint32_t v = 0; v < loads_a && v < KF__MM_MAX_LOADS; v++) {
        st->next_a[v] = kf_declare(k, "next_a", vec, (kf_val){0});
    }
    for (uint32_t v = 0; v < loads_b && v < KF__MM_MAX_LOADS; v++) {
        st->next_b[v] = kf_declare(k, "next_b", vec, (kf_val){0});
    }
}

kf_kernel *kf__matmul_blocked(uint32_t m, uint32_t kdim, uint32_t n, const kf__mm_config *cfg) {
    return kf__matmul_blocked_typed(m, kdim, n, cfg, KF_DTYPE_F32);
}

kf_kernel *kf__matmul_blocked_typed(uint32_t m, uint32_t kdim, uint32_t n, const kf__mm_config *cfg,
                                    kf_dtype dtype) {
    return kf__matmul_blocked_batched(m, kdim, n, cfg, dtype, NULL);
}

/* One vec4 of op(x) = x^T, the rows x cols matrix stored as cols x rows: its (r, c..c+3) are 4
 * elements `rows` apart, so 4 scalar loads (each from a clamped index and zeroed outside the
 * matrix by a select where checked). */
static void load4_transposed(kf_kernel *k, kf_binding b, kf_val offset, bool checked, kf_val r,
                             kf_val c, uint32_t rows, uint32_t cols, kf_var into,
                             kf_scalar stored) {
    kf_val zero = kf_lit_f32(k, 0.0f), vals[LANES];
    for (uint32_t l = 0; l < LANES; l++) {
        kf_val cl = kf_add(k, c, u32(k, l));
        kf_val at = kf_add(k, kf_mul(k, cl, u32(k, rows)), r);
        kf_val inside = {0};
        if (checked) {
            inside = kf_binary(k, KF_OP_AND, kf_binary(k, KF_OP_LT, r, u32(k, rows)),
                               kf_binary(k, KF_OP_LT, cl, u32(k, cols)));
            at = kf_call2(k, KF_FN_MIN, at, u32(k, rows * cols - 1u));
        }
        if (offset.id) {
            at = kf_add(k, offset, at);
        }
        vals[l] = widen(k, kf_load(k, b, at), stored == KF_SCALAR_F16);
        if (checked) {
            vals[l] = kf_select(k, zero, vals[l], inside);
        }
    }
    kf_assign(k, into, kf_vec(k, kf_type_vec(KF_SCALAR_F32, LANES), vals, LANES));
}

/* The edge path (config edge 1): rows of a past M and columns of b past N are clamped once
 * before the K loop (they feed only outputs the store phase skips), so a whole K step loads
 * without a test; only the last, partial K step zeroes the lanes past K. */
typedef struct edge_gen {
    kf_binding a, b;
    kf_val off_a, off_b;
    bool ta, tb, wide_a, wide_b;
    uint32_t m, kdim, n, loads_a, loads_b;
    kf_val ra[KF__MM_MAX_LOADS];        /* a's row (m index) of each vec4, clamped below m */
    kf_val cb[KF__MM_MAX_LOADS][LANES]; /* b's column of each lane (wide: [0], below n - 3) */
    const kf__mm_staging *st;
    kf_scalar stored;
} edge_gen;

/* One vec4 into `into`: element indices at[] of its lanes (wide: at[0], a multiple of 4), k
 * index kl[] of each lane (same_k: kl[0] for all). `guard`: zero the lanes at k >= kdim, and
 * clamp their indices below len so they stay inside the matrix. */
static void edge_load(kf_kernel *k, kf_binding b, kf_val offset, bool wide, const kf_val *at,
                      const kf_val *kl, bool same_k, bool guard, uint32_t kdim, uint32_t len,
                      kf_var into, kf_scalar stored) {
    const bool w = stored == KF_SCALAR_F16;
    kf_type v4 = kf_type_vec(KF_SCALAR_F32, LANES);
    kf_val zero = kf_lit_f32(k, 0.0f);
    if (wide) {
        kf_val idx = kf_div(k, offset.id ? kf_add(k, offset, at[0]) : at[0], u32(k, LANES));
        if (guard) {
            kf_assign(k, into, kf_splat(k, v4, zero));
            kf_if(k, kf_binary(k, KF_OP_LT, kl[0], u32(k, kdim)));
        }
        kf_assign(k, into, widen(k, kf_load(k, b, idx), w));
        if (guard) {
            kf_end(k);
        }
        return;
    }
    kf_val vals[LANES];
    for (uint32_t l = 0; l < LANES; l++) {
        kf_val idx = guard ? kf_call2(k, KF_FN_MIN, at[l], u32(k, len - 1u)) : at[l];
        if (offset.id) {
            idx = kf_add(k, offset, idx);
        }
        vals[l] = widen(k, kf_load(k, b, idx), w);
        if (guard) {
            kf_val inside = kf_binary(k, KF_OP_LT, kl[same_k ? 0 : l], u32(k, kdim));
            vals[l] = kf_select(k, zero, vals[l], inside);
        }
    }
    kf_assign(k, into, kf_vec(k, v4, vals, LANES));
}

/* Fetches the tiles starting at k0 into the staging registers, on the edge path. */
static void edge_fetch(kf_kernel *k, const edge_gen *g, kf_val k0, bool guard) {
    const kf__mm_staging *st = g->st;
    for (uint32_t v = 0; v < g->loads_a; v++) {
        kf_val kc = kf_add(k, k0, st->a_k[v]), at[LANES], kl[LANES];
        for (uint32_t l = 0; l < LANES; l++) {
            kl[l] = l ? kf_add(k, kc, u32(k, l)) : kc;
        }
        if (!g->ta) {
            kf_val base = kf_add(k, kf_mul(k, g->ra[v], u32(k, g->kdim)), kc);
            for (uint32_t l = 0; l < LANES; l++) {
                at[l] = l ? kf_add(k, base, u32(k, l)) : base;
            }
        } else {
            for (uint32_t l = 0; l < LANES; l++) {
                at[l] = kf_add(k, kf_mul(k, kl[l], u32(k, g->m)), g->ra[v]);
            }
        }
        edge_load(k, g->a, g->off_a, g->wide_a, at, kl, false, guard, g->kdim, g->m * g->kdim,
                  st->next_a[v], g->stored);
    }
    for (uint32_t v = 0; v < g->loads_b; v++) {
        kf_val kr = kf_add(k, k0, st->b_k[v]), at[LANES];
        for (uint32_t l = 0; l < (g->wide_b ? 1u : LANES); l++) {
            at[l] = g->tb ? kf_add(k, kf_mul(k, g->cb[v][l], u32(k, g->kdim)), kr)
                          : kf_add(k, kf_mul(k, kr, u32(k, g->n)), g->cb[v][l]);
        }
        edge_load(k, g->b, g->off_b, g->wide_b, at, &kr, true, guard, g->kdim, g->kdim * g->n,
                  st->next_b[v], g->stored);
    }
}

kf_kernel *kf__matmul_blocked_batched(uint32_t m, uint32_t kdim, uint32_t n,
                                      const kf__mm_config *cfg, kf_dtype dtype,
                                      const kf__mm_batch *batch) {
    return kf__matmul_blocked_transposed(m, kdim, n, cfg, dtype, batch, false, false);
}

/* gain[r] for b's row r, fetched into `into` beside the row: the rmsnorm's gain on the logical
 * K axis, whatever b's layout, applied when the row is staged (STORE_TILES), so that no
 * arithmetic waits on the fetch before the tile's products. Rows past K are zero already;
 * their gain index is clamped. */
static void fetch_gain(kf_kernel *k, kf_binding gain, kf_val r, uint32_t kdim, kf_var into,
                       bool half) {
    kf_val at = kf_call2(k, KF_FN_MIN, r, u32(k, kdim - 1u));
    kf_assign(k, into, widen(k, kf_load(k, gain, at), half));
}

static kf_kernel *blocked_kernel(uint32_t m, uint32_t kdim, uint32_t n, const kf__mm_config *cfg,
                                 kf_dtype dtype, const kf__mm_batch *batch, bool ta, bool tb,
                                 const kf__mm_rownorm *rn);

kf_kernel *kf__matmul_blocked_transposed(uint32_t m, uint32_t kdim, uint32_t n,
                                         const kf__mm_config *cfg, kf_dtype dtype,
                                         const kf__mm_batch *batch, bool ta, bool tb) {
    return blocked_kernel(m, kdim, n, cfg, dtype, batch, ta, tb, NULL);
}

kf_kernel *kf__matmul_blocked_rownorm(uint32_t m, uint32_t kdim, uint32_t n,
                                      const kf__mm_config *cfg, kf_dtype dtype, bool tb,
                                      const kf__mm_rownorm *rn) {
    return rn ? blocked_kernel(m, kdim, n, cfg, dtype, NULL, false, tb, rn) : NULL;
}

static kf_kernel *blocked_kernel(uint32_t m, uint32_t kdim, uint32_t n, const kf__mm_config *cfg,
                                 kf_dtype dtype, const kf__mm_batch *batch, bool ta, bool tb,
                                 const kf__mm_rownorm *rn) {
    if (dtype != KF_DTYPE_F32 && dtype != KF_DTYPE_F16) {
        return NULL;
    }
    const bool half = dtype == KF_DTYPE_F16;
    if (half && (ta || tb)) {
        return NULL; /* no caller: f16 transposed products run on the tiled kernel */
    }
    if (!cfg) {
        cfg = kf__mm_default_config(m, kdim, n);
    }
    if (!kf__matmul_blocked_valid(cfg) || !m || !kdim || !n) {
        return NULL;
    }
    const uint32_t bm = cfg->bm, bn = cfg->bn, bk = cfg->bk, tm = cfg->tm, tn = cfg->tn;
    const uint32_t stages = cfg->stages ? cfg->stages : 1;
    const uint32_t wx = bn / tn, wy = bm / tm, threads = wx * wy;
    const uint32_t loads_a = bm * bk / (LANES * threads), loads_b = bk * bn / (LANES * threads);
    /* vec4s of one stage of each tile, and of one k-row of it */
    const uint32_t stage_a = bk * bm / LANES, stage_b = bk * bn / LANES;
    const uint32_t row_a = bm / LANES, row_b = bn / LANES;
    /* A transposed operand has no 4 contiguous elements along the direction its tile is
     * fetched in (k for a, n for b): scalar loads. */
    const bool wide_a = !ta && kdim % LANES == 0, wide_b = !tb && n % LANES == 0;
    const bool ragged_m = m % bm != 0, ragged_n = n % bn != 0, ragged_k = kdim % bk != 0;
    kf_type v4 = kf_type_vec(KF_SCALAR_F32, LANES);
    /* An aligned shape has no edge: its kernel is the same either way. The edge path does not
     * scale b's rows by an rmsnorm's gain: those kernels keep the tested loads. */
    const bool edge = cfg->edge != 0 && !rn && (ragged_m || ragged_n || ragged_k);

    char name[128];
    char raster[16] = "";
    if (cfg->raster > 1) {
        snprintf(raster, sizeof raster, "_r%u", cfg->raster);
    }
    snprintf(name, sizeof name, "%smatmul_%ux%ux%u_%ux%u%s%s%s%s%s%s%s", rn ? "rmsnorm_" : "", bm,
             bn, bk, tm, tn, stages == 2 ? "_db" : "", raster, edge ? "_e" : "", half ? "_f16" : "",
             kf__mm_batch_count(batch) > 1 ? "_batched" : "", ta ? "_ta" : "", tb ? "_tb" : "");
    kf_scalar stored = half ? KF_SCALAR_F16 : KF_SCALAR_F32;
    kf_type elem = kf_type_scalar(stored), elem4 = kf_type_vec(stored, LANES);
    kf_kernel_desc desc = {.name = name, .workgroup_size = {wx, wy, 1}, .output = elem};
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    kf_binding a = kf_kernel_storage(k, "a", wide_a ? elem4 : elem, KF_ACCESS_READ);
    kf_binding b = kf_kernel_storage(k, "b", wide_b ? elem4 : elem, KF_ACCESS_READ);
    kf_binding gain =
        rn && rn->has_gain ? kf_kernel_storage(k, "gain", elem, KF_ACCESS_READ) : (kf_binding){0};
    /* Both tiles k-major, as vec4s along m (a) and n (b). */
    kf_shared tile_a = kf_kernel_workgroup(k, "tile_a", v4, stages * stage_a);
    kf_shared tile_b = kf_kernel_workgroup(k, "tile_b", v4, stages * stage_b);

    uint32_t tiles_n = (n + bn - 1) / bn, tiles_m = (m + bm - 1) / bm;
    kf_val local = kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX);
    kf_val tx = kf_let(k, "tx", kf_binary(k, KF_OP_MOD, local, u32(k, wx)));
    kf_val ty = kf_let(k, "ty", kf_div(k, local, u32(k, wx)));
    const uint32_t count = kf__mm_batch_count(batch);
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
    if (cfg->raster > 1 && tiles_m > 1) {
        /* Groups of g tile rows, each walked down its columns: the workgroups running together
         * read a few panels of b instead of all of them. The last group may hold fewer rows. */
        const uint32_t g = cfg->raster < tiles_m ? cfg->raster : tiles_m;
        kf_val group = kf_let(k, "group", kf_div(k, tile, u32(k, g * tiles_n)));
        kf_val within = kf_let(k, "within", kf_binary(k, KF_OP_MOD, tile, u32(k, g * tiles_n)));
        kf_val rows_here = u32(k, g);
        if (tiles_m % g) {
            rows_here = kf_let(k, "group_rows",
                               kf_select(k, u32(k, g), u32(k, tiles_m % g),
                                         kf_binary(k, KF_OP_EQ, group, u32(k, tiles_m / g))));
        }
        tile_row = kf_call2(
            k, KF_FN_MIN,
            kf_add(k, kf_mul(k, group, u32(k, g)), kf_binary(k, KF_OP_MOD, within, rows_here)),
            u32(k, tiles_m - 1));
        tile_col = kf_call2(k, KF_FN_MIN, kf_div(k, within, rows_here), u32(k, tiles_n - 1));
    } else {
        tile_row = kf_div(k, tile, u32(k, tiles_n));
        tile_col = kf_binary(k, KF_OP_MOD, tile, u32(k, tiles_n));
    }
    kf_val row0 = kf_let(k, "row0", kf_mul(k, tile_row, u32(k, bm)));
    kf_val col0 = kf_let(k, "col0", kf_mul(k, tile_col, u32(k, bn)));

    kf__mm_staging st;
    kf__mm_staging_init(k, local, threads, bk, bn, loads_a, loads_b, v4, &st);
    kf_val *a_row = st.a_row, *a_k = st.a_k, *b_k = st.b_k, *b_col = st.b_col;
    kf_var *next_a = st.next_a, *next_b = st.next_b;
    bool check_a = ragged_m || ragged_k, check_b = ragged_k || ragged_n;
    edge_gen eg = {.a = a,
                   .b = b,
                   .off_a = off_a,
                   .off_b = off_b,
                   .ta = ta,
                   .tb = tb,
                   .wide_a = wide_a,
                   .wide_b = wide_b,
                   .m = m,
                   .kdim = kdim,
                   .n = n,
                   .loads_a = loads_a,
                   .loads_b = loads_b,
                   .st = &st,
                   .stored = stored};
    for (uint32_t v = 0; edge && v < loads_a; v++) {
        kf_val r = kf_add(k, row0, a_row[v]);
        eg.ra[v] = kf_let(k, "ra", ragged_m ? kf_call2(k, KF_FN_MIN, r, u32(k, m - 1)) : r);
    }
    for (uint32_t v = 0; edge && v < loads_b; v++) {
        kf_val c = kf_add(k, col0, b_col[v]);
        if (wide_b) {
            eg.cb[v][0] =
                ragged_n ? kf_let(k, "cb", kf_call2(k, KF_FN_MIN, c, u32(k, n - LANES))) : c;
            continue;
        }
        for (uint32_t l = 0; l < LANES; l++) {
            kf_val cl = l ? kf_add(k, c, u32(k, l)) : c;
            eg.cb[v][l] =
                ragged_n ? kf_let(k, "cb", kf_call2(k, KF_FN_MIN, cl, u32(k, n - 1))) : cl;
        }
    }
    /* rmsnorm folded in: the sums of squares of a's rows, taken from the vec4s each invocation
     * stages into workgroup memory (one dot product per staged vec4: every element of the
     * tile's rows once, in no register of the product's loop), added up per row after the loop
     * (row_squares). Summed from the tile in the k loop instead (tm / 4 vector FMAs per k by
     * every invocation of a row), the fused f32 plan ran at 0.79x of rmsnorm-then-matmul at
     * 4096^3 on an H100 and 0.81x at 4096 x 4096 x 256; this way 0.84x and 1.09x
     * (docs/PERFORMANCE.md, seventeenth session). */
    kf_var squares[KF__MM_MAX_LOADS];
    for (uint32_t v = 0; rn && v < loads_a; v++) {
        squares[v] = kf_declare(k, "squares", kf_type_scalar(KF_SCALAR_F32), kf_lit_f32(k, 0.0f));
    }
    kf_var next_g[KF__MM_MAX_LOADS]; /* the gain of each b row in flight */
    for (uint32_t v = 0; gain.id && v < loads_b; v++) {
        next_g[v] = kf_declare(k, "next_g", kf_type_scalar(KF_SCALAR_F32), kf_lit_f32(k, 0.0f));
    }
    /* Fetches the tiles starting at k0 into the next_* registers. */
#define FETCH(k0)                                                                                  \
    do {                                                                                           \
        for (uint32_t v = 0; v < loads_a; v++) {                                                   \
            kf_val r_ = kf_add(k, row0, a_row[v]), c_ = kf_add(k, (k0), a_k[v]);                   \
            if (ta) {                                                                              \
                load4_transposed(k, a, off_a, check_a, r_, c_, m, kdim, next_a[v], stored);        \
            } else {                                                                               \
                kf__mm_load4(k, a, off_a, wide_a, check_a, r_, c_, m, kdim, next_a[v], stored,     \
                             true);                                                                \
            }                                                                                      \
        }                                                                                          \
        for (uint32_t v = 0; v < loads_b; v++) {                                                   \
            kf_val r_ = kf_add(k, (k0), b_k[v]), c_ = kf_add(k, col0, b_col[v]);                   \
            if (tb) {                                                                              \
                load4_transposed(k, b, off_b, check_b, r_, c_, kdim, n, next_b[v], stored);        \
            } else {                                                                               \
                kf__mm_load4(k, b, off_b, wide_b, check_b, r_, c_, kdim, n, next_b[v], stored,     \
                             true);                                                                \
            }                                                                                      \
            if (gain.id) {                                                                         \
                fetch_gain(k, gain, r_, kdim, next_g[v], half);                                    \
            }                                                                                      \
        }                                                                                          \
    } while (0)
    /* Registers -> workgroup memory at the stage whose offsets (in vec4s) are oa, ob: a's vec4
     * along k is spread over four k-rows, one lane each (its row's lane of the m vec4). */
#define STORE_TILES(oa, ob)                                                                        \
    do {                                                                                           \
        for (uint32_t v = 0; v < loads_a; v++) {                                                   \
            kf_val got = kf_read(k, next_a[v]);                                                    \
            if (rn) {                                                                              \
                kf_assign(k, squares[v],                                                           \
                          kf_add(k, kf_read(k, squares[v]), kf_call2(k, KF_FN_DOT, got, got)));    \
            }                                                                                      \
            kf_val quad = kf_div(k, a_row[v], u32(k, LANES));                                      \
            kf_val lane = kf_binary(k, KF_OP_MOD, a_row[v], u32(k, LANES));                        \
            for (uint32_t l = 0; l < LANES; l++) {                                                 \
                kf_val krow = kf_mul(k, kf_add(k, a_k[v], u32(k, l)), u32(k, row_a));              \
                kf_shared_store_lane(k, tile_a, kf_add(k, (oa), kf_add(k, krow, quad)), lane,      \
                                     kf_extract(k, got, l));                                       \
            }                                                                                      \
        }                                                                                          \
        for (uint32_t v = 0; v < loads_b; v++) {                                                   \
            kf_val at =                                                                            \
                kf_add(k, kf_mul(k, b_k[v], u32(k, row_b)), kf_div(k, b_col[v], u32(k, LANES)));   \
            kf_val row_ = kf_read(k, next_b[v]);                                                   \
            if (gain.id) {                                                                         \
                row_ = kf_mul(k, row_, kf_splat(k, v4, kf_read(k, next_g[v])));                    \
            }                                                                                      \
            kf_shared_store(k, tile_b, kf_add(k, (ob), at), row_);                                 \
        }                                                                                          \
    } while (0)

    /* Invocation (tx, ty) owns rows g*4*wy + ty*4 + 0..3 and columns h*4*wx + tx*4 + 0..3 for
     * each group g < tm/4, h < tn/4: neighbours read neighbouring vec4s of the tiles, so the
     * workgroup-memory reads of a subgroup are conflict-free, and its stores are contiguous. */
    kf_var acc[MAX_T][MAX_T / LANES];
    for (uint32_t i = 0; i < tm; i++) {
        for (uint32_t j = 0; j < tn / LANES; j++) {
            acc[i][j] = kf_declare(k, "acc", v4, (kf_val){0});
        }
    }
    if (edge) {
        edge_fetch(k, &eg, u32(k, 0), kdim < bk);
    } else {
        FETCH(u32(k, 0));
    }
    if (stages == 2) {
        STORE_TILES(u32(k, 0), u32(k, 0));
        kf_barrier(k);
    }
    kf_val k0 = kf_for(k, "k0", u32(k, 0), u32(k, kdim), u32(k, bk));
    {
        kf_val k1 = kf_let(k, "k1", kf_add(k, k0, u32(k, bk)));
        kf_val more = kf_let(k, "more", kf_binary(k, KF_OP_LT, k1, u32(k, kdim)));
        kf_val oa = u32(k, 0), ob = u32(k, 0);
        if (stages == 2) {
            kf_val cur = kf_binary(k, KF_OP_BIT_AND, kf_div(k, k0, u32(k, bk)), u32(k, 1));
            oa = kf_let(k, "oa", kf_mul(k, cur, u32(k, stage_a)));
            ob = kf_let(k, "ob", kf_mul(k, cur, u32(k, stage_b)));
        } else {
            STORE_TILES(oa, ob);
            kf_barrier(k);
        }
        /* The next tiles travel while this one is multiplied. */
        kf_if(k, more);
        if (!edge) {
            FETCH(k1);
        } else if (kdim % bk == 0) {
            edge_fetch(k, &eg, k1, false);
        } else if (kdim > bk) {
            /* whole steps unguarded; the last, partial one tests k */
            kf_if(k, kf_binary(k, KF_OP_LT, k1, u32(k, kdim - bk + 1)));
            edge_fetch(k, &eg, k1, false);
            kf_else(k);
            edge_fetch(k, &eg, k1, true);
            kf_end(k);
        } else {
            edge_fetch(k, &eg, k1, true);
        }
        kf_end(k);
        for (uint32_t kk = 0; kk < bk; kk++) {
            kf_val av[MAX_T / LANES], bv[MAX_T / LANES];
            for (uint32_t g = 0; g < tm / LANES; g++) {
                kf_val at = kf_add(k, kf_add(k, oa, ty), u32(k, kk * row_a + g * wy));
                av[g] = kf_shared_load(k, tile_a, at);
            }
            for (uint32_t h = 0; h < tn / LANES; h++) {
                kf_val at = kf_add(k, kf_add(k, ob, tx), u32(k, kk * row_b + h * wx));
                bv[h] = kf_shared_load(k, tile_b, at);
            }
            for (uint32_t i = 0; i < tm; i++) {
                kf_val splat = kf_splat(k, v4, kf_extract(k, av[i / LANES], i % LANES));
                for (uint32_t h = 0; h < tn / LANES; h++) {
                    kf_val sum = kf_call3(k, KF_FN_FMA, splat, bv[h], kf_read(k, acc[i][h]));
                    kf_assign(k, acc[i][h], sum);
                }
            }
        }
        if (stages == 2) {
            kf_if(k, more);
            STORE_TILES(kf_sub(k, u32(k, stage_a), oa), kf_sub(k, u32(k, stage_b), ob));
            kf_end(k);
        }
        kf_barrier(k);
    }
    kf_end(k);
#undef STORE_TILES
#undef FETCH
    /* The staged vec4 `flat` (local + v * threads) is tile row flat / (bk / 4)'s: each row's
     * bk / 4 partial sums lie side by side. The loop's last barrier ended every read of the
     * tiles; this one publishes the partial sums. */
    kf_shared row_squares = {0};
    if (rn) {
        row_squares =
            kf_kernel_workgroup(k, "row_squares", kf_type_scalar(KF_SCALAR_F32), loads_a * threads);
        for (uint32_t v = 0; v < loads_a; v++) {
            kf_shared_store(k, row_squares, kf_add(k, local, u32(k, v * threads)),
                            kf_read(k, squares[v]));
        }
        kf_barrier(k);
    }

    /* The store phase: every element through kf_kernel_yield. */
    for (uint32_t i = 0; i < tm; i++) {
        kf_val row = kf_add(
            k, row0,
            kf_add(k, kf_mul(k, ty, u32(k, LANES)), u32(k, (i / LANES) * LANES * wy + i % LANES)));
        if (ragged_m) {
            kf_if(k, kf_binary(k, KF_OP_LT, row, u32(k, m)));
        }
        kf_val r = {0};
        if (rn) {
            kf_val in_tile = kf_add(k, kf_mul(k, ty, u32(k, LANES)),
                                    u32(k, (i / LANES) * LANES * wy + i % LANES));
            kf_val first = kf_mul(k, in_tile, u32(k, bk / LANES));
            kf_val sum = kf_shared_load(k, row_squares, first);
            for (uint32_t j = 1; j < bk / LANES; j++) {
                sum = kf_add(k, sum, kf_shared_load(k, row_squares, kf_add(k, first, u32(k, j))));
            }
            kf_val mean = kf_mul(k, sum, kf_lit_f32(k, 1.0f / (float)kdim));
            r = kf_let(k, "r",
                       kf_call1(k, KF_FN_INVERSE_SQRT, kf_add(k, mean, kf_lit_f32(k, rn->eps))));
        }
        for (uint32_t h = 0; h < tn / LANES; h++) {
            kf_val sums = kf_read(k, acc[i][h]);
            if (r.id) {
                sums = kf_mul(k, sums, kf_splat(k, v4, r));
            }
            for (uint32_t l = 0; l < LANES; l++) {
                kf_val col = kf_add(
                    k, col0, kf_add(k, kf_mul(k, tx, u32(k, LANES)), u32(k, h * LANES * wx + l)));
                if (ragged_n) {
                    kf_if(k, kf_binary(k, KF_OP_LT, col, u32(k, n)));
                }
                kf_val index = kf_add(k, kf_mul(k, row, u32(k, n)), col);
                if (off_c.id) {
                    index = kf_add(k, off_c, index);
                }
                kf_val value = kf_extract(k, sums, l);
                kf_kernel_yield(k, half ? kf_cast(k, elem, value) : value, index);
                if (ragged_n) {
                    kf_end(k);
                }
            }
        }
        if (ragged_m) {
            kf_end(k);
        }
    }
    uint32_t groups[3] = {tiles_m * tiles_n * count, 1, 1};
    kf_kernel_set_grid(k, groups);
    return k;
}
