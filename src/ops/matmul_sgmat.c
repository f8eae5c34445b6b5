/* A matmul on subgroup matrices (tensor cores): c[M,N] = op(a)[M,K] * op(b)[K,N], f16 storage,
 * f32 accumulation; op(x) = x^T where the product says so (a stored [K, M], b stored [N, K]).
 *
 * Each workgroup computes a bm x bn tile of c. The K axis is walked bk at a time through two
 * tiles in workgroup memory, each kept in its operand's stored orientation (a^T's tile is bk x bm),
 * rows padded by 8 halves so the rows of a 16x16 matrix fall in different banks; the multiply
 * loads a transposed operand's matrices column-major. How the tiles are filled (the
 * configuration's `staging`): 0, every invocation fetches vec4s of the tiles from global memory
 * into registers (zero outside the matrices, so any M, N, K works), then stores their halves one
 * at a time in lane order; 1, the same with the rows each subgroup covers and the order of each
 * invocation's four stores chosen (by a model of 32 four-byte banks) so that a subgroup's 2-byte
 * stores fall in distinct banks: WGSL cannot store vectors into the array<f16> that
 * subgroupMatrixLoad reads, so the count of stores stays and only their conflicts go; 2, each
 * subgroup copies whole 16x16 blocks with subgroupMatrixLoad from storage and subgroupMatrixStore
 * into the tile (the driver's wide stores), where the shape is a multiple of the tile (else 1);
 * 3, as 0 (the halves in lane order, which a compiler can merge into one 8-byte store) with the
 * rows each subgroup covers chosen by the bank model for such 8-byte stores.
 * The configuration's `layout` 1 keeps a's tile k-major (as a^T's) where a is stored [m, k]:
 * each invocation fetches 4x4 blocks of a and stores them transposed.
 * The next tiles are fetched while the current ones are multiplied, and with two stages the
 * tiles are double-buffered (one barrier per step); `order` 1 then keeps the registers a step
 * ahead of the tiles (the tiles of step k + 1 stored at the top of step k). Each subgroup owns a
 * block of tm x tn result matrices (16x16, f32) and, per 16-deep slice of the tile, loads tm left
 * and tn right matrices from workgroup memory and runs tm * tn multiply-accumulates.
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
#define MAX_LOADS KF__MM_MAX_LOADS
#define MAX_BLOCKS 16u /* 16x16 blocks of one tile a subgroup copies per step (staging 2) */
#define BANKS 32u      /* the bank model of staging 1: 32 banks of 4 bytes, 32 lanes a wave */

static uint32_t threads_of(const kf__sgmat_config *c, uint32_t sg) {
    return c->wm * c->wn * sg;
}

/* Whether a's tile is kept k-major although a is stored [m, k] (the configuration's layout 1):
 * where a is staged and each invocation's vec4s of it make whole 4x4 blocks, and bm is a
 * multiple of 32 (the block order below covers 8 blocks of rows a subgroup half). */
static bool kmajor_a(const kf__sgmat_config *c, uint32_t sg, bool ta, bool direct) {
    uint32_t loads = c->bm * c->bk / (LANES * threads_of(c, sg));
    return c->layout == 1 && !ta && !direct && c->bm % 32 == 0 && loads % 4 == 0;
}

/* Halves of one stage of a's tile and of b's, in the tile's orientation (ka: a's tile
 * k-major, as for a^T). */
static uint32_t tile_halves_a(const kf__sgmat_config *c, bool ka) {
    return ka ? c->bk * (c->bm + PAD) : c->bm * (c->bk + PAD);
}
static uint32_t tile_halves_b(const kf__sgmat_config *c, bool tb) {
    return tb ? c->bn * (c->bk + PAD) : c->bk * (c->bn + PAD);
}

/* Result matrices per round of the store phase (each subgroup's scratch holds that many of a
 * row of its tn): the configuration's `scratch`, or where it is 0 the most that fit, a divisor of
 * tn; 0 when the configuration's, or even one, does not fit. tiles: halves of workgroup memory
 * the tiles take. */
static uint32_t store_cols(const kf__sgmat_config *c, uint32_t tiles) {
    uint32_t tn = c->bn / c->wn / MAT;
    uint32_t per_matrix = c->wm * c->wn * MAT * MAT * 4u; /* bytes of one matrix per subgroup */
    for (uint32_t cols = c->scratch ? c->scratch : tn; cols >= 1; cols--) {
        if (tn % cols == 0 && tiles * 2u + per_matrix * cols <= WG_MEMORY) {
            return cols;
        }
        if (c->scratch) {
            break;
        }
    }
    return 0;
}

/* The stages a kernel staging these tiles (halves per stage) uses: the configuration's, or one
 * where two do not fit (a configuration meant for direct operands staging both on a ragged
 * shape, or a transposed operand's tile taking more room). */
static uint32_t stages_for(const kf__sgmat_config *c, uint32_t per_stage) {
    uint32_t stages = c->stages ? c->stages : 1;
    if (stages == 2 && !store_cols(c, 2 * per_stage)) {
        stages = 1;
    }
    return stages;
}

bool kf__sgmat_config_valid(const kf__sgmat_config *c, uint32_t sg) {
    if (!c || !sg || (sg & (sg - 1)) || sg > 128) {
        return false;
    }
    if (!c->bm || !c->bn || !c->bk || !c->wm || !c->wn || c->stages > 2 || c->staging > 3 ||
        c->layout > 1 || c->order > 2 || c->vector > 1 || c->straight > 1) {
        return false;
    }
    if (c->scratch && (c->scratch > c->bn / c->wn / MAT || (c->bn / c->wn / MAT) % c->scratch)) {
        return false; /* the store rounds split a subgroup's row of result matrices evenly */
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
        loads_a / (LANES * threads) > MAX_LOADS || loads_b / (LANES * threads) > MAX_LOADS) {
        return false; /* whole vec4s per invocation, at most 16 of each tile */
    }
    if (c->direct > 3 || (c->probe > 3 && c->probe != 4 && c->probe != 8) ||
        (c->probe && c->direct)) {
        return false;
    }
    if (c->order == 2 && (c->stages > 1 || c->probe || c->direct || c->staging == 2)) {
        return false; /* two steps of registers ahead of one stage, staged in lane order */
    }
    if ((c->probe == 4 || c->probe == 8) && (c->stages > 1 || c->staging == 2 || c->layout)) {
        return false; /* the staging probes split a single stage's stores in lane order */
    }
    /* Two stages that do not fit are refused here; a kernel falls back to one only where the
     * configuration stages less than both tiles on an aligned shape. */
    uint32_t per_stage =
        tile_halves_a(c, kmajor_a(c, sg, false, c->direct & 1u)) + tile_halves_b(c, false);
    uint32_t stages = c->stages ? c->stages : 1;
    if (stages == 2 && !c->direct && !store_cols(c, 2 * per_stage)) {
        return false;
    }
    return store_cols(c, stages_for(c, per_stage) * per_stage) > 0;
}

const kf__sgmat_config *kf__sgmat_default_config(uint32_t m, uint32_t k, uint32_t n, bool checked) {
    /* Measured on an H200 (bench/results/h200-sgmat-*.txt, h200-s5-sgmm-sweep.txt,
     * h200-s6-sgmm-*.txt). Robustness off: 128x256 tiles of 2x8 subgroups (64x32 each, 8 result
     * matrices) single-buffered, one result matrix a store round (the most that fit beside the
     * tiles), reach 244 TFLOP/s at 4096^3 and 251 at 8192^3 in session 6, against 227 / 237 for
     * 2x4 subgroups of 64x64 (the default before): the staging's global fetches are the largest
     * cost the K loop does not hide (probes: fetched once 335 TFLOP/s, stored once 245, tiles
     * staged once 349, multiplies and barriers alone 511), and twice the warps, each with half
     * the registers, hide more of them. Where a or b has rows that are not whole vec4s (K or N
     * not a multiple of 4: scalar fetches), 256x128 tiles of 4x4 subgroups do best (4095 x 4097
     * x 4093: 118.5 TFLOP/s against 110.2 for 2x8 and 93.3 for 2x4). Every variant that adds
     * registers to the 2x4 tile loses (48-deep tiles 98 TFLOP/s); two stages lose at any depth
     * and fetch order; staging 1 (bank-conflict-free stores) measured 176 / 178 and staging 2
     * (blocks copied by subgroup matrices) 154 / 160, so the tiles keep their halves in lane
     * order. Robustness on, Tint wraps every subgroup-matrix load in a bounds test, and fewer
     * matrices per subgroup do better: 128x128 double-buffered 73 TFLOP/s, 128x256 53. Below
     * 2048x2048 outputs, 64x64 tiles keep every multiprocessor busy (1024^3: 80 TFLOP/s, against
     * 49 for 128x128). */
    static const kf__sgmat_config big = {128, 256, 32, 2, 8, 1, 8, 0, 0, 0, 0, 0, 0, 0, 0};
    static const kf__sgmat_config scalar_rows = {256, 128, 32, 4, 4, 1, 8, 0, 0, 0, 0, 0, 0, 0, 0};
    static const kf__sgmat_config big_checked = {128, 128, 32, 2, 4, 2, 8, 0, 0, 0, 0, 0, 0, 0, 0};
    static const kf__sgmat_config small = {64, 64, 32, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    if ((uint64_t)m * n < 2048ull * 2048ull) {
        return &small;
    }
    if (checked) {
        return &big_checked;
    }
    return m % 4 || k % 4 || n % 4 ? &scalar_rows : &big;
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

/* ---- staging 1: which rows each invocation fetches, and in which order it stores ---- */

/* An assignment of vec4s to invocations: vec4 `flat` of the tile is row perm(flat / per_row),
 * columns 4 * (flat % per_row)..+3, where perm permutes the three low bits of the row (bit i
 * goes to bit perm[i]); invocations whose `swap` bit is set store their halves 2, 3 first and
 * then 0, 1 (the other word of the vec4 first). swap_bit < 0: none; swap_on_row: a bit of the
 * row, else of the vec4's column. */
typedef struct spread {
    uint8_t perm[3];
    int swap_bit;
    bool swap_on_row;
} spread;

static uint32_t spread_row(const spread *sp, uint32_t q) {
    uint32_t h = q & 7u, low = 0;
    for (uint32_t i = 0; i < 3; i++) {
        low |= ((h >> i) & 1u) << sp->perm[i];
    }
    return (q & ~7u) | low;
}

static bool spread_swaps(const spread *sp, uint32_t row, uint32_t j) {
    return sp->swap_bit >= 0 && (((sp->swap_on_row ? row : j) >> sp->swap_bit) & 1u);
}

/* Wavefronts the stores of one stage take in the bank model: per store instruction of 32
 * consecutive invocations, the most distinct 4-byte words any bank is asked for. wide: each
 * invocation's four halves as one 8-byte store (what a compiler can merge in-order halves at
 * aligned addresses into), else four 2-byte stores. */
static uint32_t spread_cost(const spread *sp, uint32_t threads, uint32_t loads, uint32_t tcols,
                            uint32_t ld, bool wide) {
    const uint32_t per_row = tcols / LANES;
    uint32_t total = 0;
    for (uint32_t v = 0; v < loads; v++) {
        for (uint32_t t0 = 0; t0 < threads; t0 += BANKS) {
            for (uint32_t l = 0; l < (wide ? 1u : LANES); l++) {
                uint32_t words[BANKS][2 * BANKS], count[BANKS] = {0}, worst = 0;
                for (uint32_t t = t0; t < t0 + BANKS && t < threads; t++) {
                    uint32_t flat = t + v * threads, j = flat % per_row;
                    uint32_t row = spread_row(sp, flat / per_row);
                    uint32_t half = row * ld + j * LANES + (spread_swaps(sp, row, j) ? l ^ 2u : l);
                    for (uint32_t w = 0; w < (wide ? 2u : 1u); w++) {
                        uint32_t word = half / 2u + w, bank = word % BANKS, seen = 0;
                        while (seen < count[bank] && words[bank][seen] != word) {
                            seen++;
                        }
                        if (seen == count[bank]) {
                            words[bank][count[bank]++] = word;
                            worst = count[bank] > worst ? count[bank] : worst;
                        }
                    }
                }
                total += worst;
            }
        }
    }
    return total;
}

/* The assignment with the fewest wavefronts (the identity, in lane order, where none beats it);
 * wide: for 8-byte stores, rows only (in-order halves). */
static spread spread_choose(uint32_t threads, uint32_t loads, uint32_t tcols, uint32_t ld,
                            bool wide) {
    static const uint8_t perms[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                        {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    const uint32_t per_row = tcols / LANES;
    spread best = {{0, 1, 2}, -1, false};
    uint32_t best_cost = spread_cost(&best, threads, loads, tcols, ld, wide);
    for (uint32_t p = 0; p < 6; p++) {
        for (int s = -1; s < (wide ? 0 : 8); s++) {
            spread sp = {{perms[p][0], perms[p][1], perms[p][2]}, s < 3 ? s : s - 3, s < 3};
            if (sp.swap_bit >= 0 && !sp.swap_on_row && (1u << sp.swap_bit) >= per_row) {
                continue; /* no such column bit */
            }
            uint32_t cost = spread_cost(&sp, threads, loads, tcols, ld, wide);
            if (cost < best_cost) {
                best = sp, best_cost = cost;
            }
        }
    }
    return best;
}

/* ---- the operands ---- */

/* One operand as the kernel reads it: the matrix as stored (rows x cols), its tile in workgroup
 * memory in the same orientation (trows x tcols, ld halves a row), and how the tile is filled. */
typedef struct operand {
    kf_binding bind;
    kf_val offset; /* of this product in a batch; the invalid handle: 0 */
    uint32_t rows, cols;
    uint32_t trows, tcols, ld, stage; /* stage: halves per stage */
    bool k_on_rows;                   /* the tile's rows walk K (else its columns do) */
    bool wide, checked, direct;
    bool transposing; /* a stored [m, k], its tile k-major: 4x4 blocks stored transposed */
    uint32_t width;   /* halves per fetch: 4 (vec4<f16>), or 8 (vec4<u32>, the vector field) */
    uint32_t staging; /* 0, 1 or 2, as the configuration's (2 only where it applies) */
    uint32_t loads;   /* vec4s per invocation (staging 0 and 1) */
    uint32_t blocks;  /* 16x16 blocks per subgroup (staging 2) */
    spread sp;
    kf_val row[MAX_LOADS], col[MAX_LOADS], swap[MAX_LOADS], shift[MAX_LOADS];
    kf_val block_base[MAX_LOADS / 4]; /* transposing: where each 4x4 block starts in the tile */
    kf_var next[MAX_LOADS];
    kf_var next2[MAX_LOADS]; /* order 2: the second set of registers (the step after next's) */
    bool deep;               /* order 2: next2 declared */
    kf_val block_tile[MAX_BLOCKS], block_at[MAX_BLOCKS];
    kf_sgmat block[MAX_BLOCKS];
    kf_shared tile;
} operand;

/* Where each invocation's vec4s (or each subgroup's blocks) of the tile come from. outer0: the
 * first row (a) or column (b) of c the tile serves. */
static void operand_init(kf_kernel *k, operand *o, const char *name, kf_val local, kf_val sgi,
                         uint32_t threads, uint32_t subgroups, kf_val outer0) {
    char nm[24];
    kf_type h4 = kf_type_vec(KF_SCALAR_F16, LANES);
    if (o->staging == 2) {
        const uint32_t per_row = o->tcols / MAT;
        for (uint32_t i = 0; i < o->blocks; i++) {
            kf_val g = kf_add(k, sgi, u32(k, i * subgroups));
            kf_val br = kf_mul(k, kf_div(k, g, u32(k, per_row)), u32(k, MAT));
            kf_val bc = kf_mul(k, kf_binary(k, KF_OP_MOD, g, u32(k, per_row)), u32(k, MAT));
            snprintf(nm, sizeof nm, "%s_block", name);
            o->block_tile[i] = kf_let(k, nm, kf_add(k, kf_mul(k, br, u32(k, o->ld)), bc));
            /* in storage, less the K offset of the step */
            kf_val at = o->k_on_rows
                            ? kf_add(k, kf_mul(k, br, u32(k, o->cols)), kf_add(k, outer0, bc))
                            : kf_add(k, kf_mul(k, kf_add(k, outer0, br), u32(k, o->cols)), bc);
            snprintf(nm, sizeof nm, "%s_from", name);
            o->block_at[i] = kf_let(k, nm, o->offset.id ? kf_add(k, o->offset, at) : at);
            snprintf(nm, sizeof nm, "%s_next", name);
            o->block[i] = kf_sgmat_declare(k, nm, KF_SGMAT_LEFT, KF_SCALAR_F16, MAT, MAT);
        }
        return;
    }
    const uint32_t per_row = o->tcols / o->width;
    const bool permuted = o->sp.perm[0] != 0 || o->sp.perm[1] != 1 || o->sp.perm[2] != 2;
    /* Transposing: block f of the tile (4 rows of a by 4 of K) is rows 4 mg.., K 4 kg.., with
     * mg's low 3 bits and kg's low 2 bits from f's low 5. The 16 invocations of a subgroup half
     * then store 8-byte rows of their blocks into 16 distinct pairs of banks (tile rows 4 kg + q
     * lie 16 kg words apart modulo 32 at bm + 8 halves a row) and each fetch reads 32 bytes
     * from each of 8 rows of a (whole sectors). */
    for (uint32_t v = 0; o->transposing && v < o->loads / 4; v++) {
        const uint32_t k_hi = o->trows / 16; /* values of kg above its low 2 bits */
        kf_val f = kf_add(k, local, u32(k, v * threads));
        kf_val rest = kf_binary(k, KF_OP_SHR, f, u32(k, 5));
        kf_val mg = kf_add(k, kf_binary(k, KF_OP_BIT_AND, f, u32(k, 7)),
                           kf_mul(k, kf_div(k, rest, u32(k, k_hi)), u32(k, 8)));
        kf_val kg =
            kf_add(k, kf_binary(k, KF_OP_BIT_AND, kf_binary(k, KF_OP_SHR, f, u32(k, 3)), u32(k, 3)),
                   kf_mul(k, kf_binary(k, KF_OP_MOD, rest, u32(k, k_hi)), u32(k, 4)));
        snprintf(nm, sizeof nm, "%s_m", name);
        kf_val m4 = kf_let(k, nm, kf_mul(k, mg, u32(k, LANES)));
        snprintf(nm, sizeof nm, "%s_k", name);
        kf_val k4 = kf_let(k, nm, kf_mul(k, kg, u32(k, LANES)));
        for (uint32_t q = 0; q < LANES; q++) {
            o->row[4 * v + q] = q ? kf_add(k, m4, u32(k, q)) : m4;
            o->col[4 * v + q] = k4;
            o->swap[4 * v + q] = (kf_val){0};
        }
        snprintf(nm, sizeof nm, "%s_at", name);
        o->block_base[v] = kf_let(k, nm, kf_add(k, kf_mul(k, k4, u32(k, o->ld)), m4));
    }
    for (uint32_t v = 0; !o->transposing && v < o->loads; v++) {
        kf_val flat = kf_add(k, local, u32(k, v * threads));
        kf_val q = kf_div(k, flat, u32(k, per_row));
        if (permuted) {
            q = kf_let(k, "q", q);
            kf_val low = {0};
            for (uint32_t i = 0; i < 3; i++) {
                kf_val bit =
                    kf_binary(k, KF_OP_BIT_AND, kf_binary(k, KF_OP_SHR, q, u32(k, i)), u32(k, 1));
                kf_val moved =
                    o->sp.perm[i] ? kf_binary(k, KF_OP_SHL, bit, u32(k, o->sp.perm[i])) : bit;
                low = low.id ? kf_binary(k, KF_OP_BIT_OR, low, moved) : moved;
            }
            q = kf_binary(k, KF_OP_BIT_OR, kf_binary(k, KF_OP_BIT_AND, q, u32(k, ~7u)), low);
        }
        snprintf(nm, sizeof nm, "%s_r", name);
        o->row[v] = kf_let(k, nm, q);
        kf_val j = kf_binary(k, KF_OP_MOD, flat, u32(k, per_row));
        snprintf(nm, sizeof nm, "%s_c", name);
        o->col[v] = kf_let(k, nm, kf_mul(k, j, u32(k, o->width)));
        o->swap[v] = (kf_val){0};
        if (o->sp.swap_bit >= 0) {
            kf_val of = o->sp.swap_on_row ? o->row[v] : j;
            kf_val bit =
                kf_binary(k, KF_OP_BIT_AND,
                          kf_binary(k, KF_OP_SHR, of, u32(k, (uint32_t)o->sp.swap_bit)), u32(k, 1));
            snprintf(nm, sizeof nm, "%s_swap", name);
            o->swap[v] = kf_let(k, nm, kf_binary(k, KF_OP_NE, bit, u32(k, 0)));
            snprintf(nm, sizeof nm, "%s_shift", name);
            o->shift[v] = kf_let(k, nm, kf_select(k, u32(k, 0), u32(k, 2), o->swap[v]));
        }
    }
    kf_type u4 = kf_type_vec(KF_SCALAR_U32, LANES);
    for (uint32_t v = 0; v < o->loads; v++) {
        snprintf(nm, sizeof nm, "next_%s", name);
        o->next[v] = kf_declare(k, nm, o->width == 8 ? u4 : h4, (kf_val){0});
    }
    for (uint32_t v = 0; o->deep && v < o->loads; v++) {
        snprintf(nm, sizeof nm, "later_%s", name);
        o->next2[v] = kf_declare(k, nm, o->width == 8 ? u4 : h4, (kf_val){0});
    }
}

/* Fetches the operand's part of the tile at step k0 into registers (or subgroup matrices).
 * interior: the tile lies inside the matrix (uniform over the workgroup). */
static void operand_fetch(kf_kernel *k, const operand *o, kf_val k0, kf_val outer0,
                          kf_val interior) {
    if (o->staging == 2) {
        for (uint32_t i = 0; i < o->blocks; i++) {
            kf_val step = o->k_on_rows ? kf_mul(k, k0, u32(k, o->cols)) : k0;
            kf_sgmat_load_storage(k, o->block[i], o->bind, kf_add(k, o->block_at[i], step), false,
                                  u32(k, o->cols));
        }
        return;
    }
    for (uint32_t v = 0; v < o->loads; v++) {
        kf_val r = kf_add(k, o->k_on_rows ? k0 : outer0, o->row[v]);
        kf_val c = kf_add(k, o->k_on_rows ? outer0 : k0, o->col[v]);
        if (o->width == 8) { /* 16 bytes, never checked (whole tiles only) */
            kf_val at = kf_add(k, kf_mul(k, r, u32(k, o->cols)), c);
            kf_assign(k, o->next[v], kf_load(k, o->bind, kf_div(k, at, u32(k, 8))));
            continue;
        }
        fetch4(k, o->bind, o->offset, o->wide, o->checked, interior, r, c, o->rows, o->cols,
               o->next[v]);
    }
}

/* Registers -> the tile of the stage starting at half `at0`. */
static void operand_store(kf_kernel *k, const operand *o, kf_val at0) {
    if (o->transposing) {
        /* row q of each block is a vec4 along K; the tile takes its column q' (four rows of a
         * at one k) as four halves in lane order */
        for (uint32_t v = 0; v < o->loads / 4; v++) {
            kf_val got[LANES];
            for (uint32_t q = 0; q < LANES; q++) {
                got[q] = kf_read(k, o->next[4 * v + q]);
            }
            kf_val base = kf_add(k, at0, o->block_base[v]);
            for (uint32_t q2 = 0; q2 < LANES; q2++) {
                kf_val at = q2 ? kf_add(k, base, u32(k, q2 * o->ld)) : base;
                for (uint32_t q = 0; q < LANES; q++) {
                    kf_shared_store(k, o->tile, q ? kf_add(k, at, u32(k, q)) : at,
                                    kf_extract(k, got[q], q2));
                }
            }
        }
        return;
    }
    if (o->staging == 2) {
        for (uint32_t i = 0; i < o->blocks; i++) {
            kf_sgmat_store(k, o->tile, kf_add(k, at0, o->block_tile[i]), o->block[i], false,
                           u32(k, o->ld));
        }
        return;
    }
    if (o->width == 8) {
        /* each u32 of the fetch is two halves: eight stores in lane order */
        kf_type h2 = kf_type_vec(KF_SCALAR_F16, 2);
        for (uint32_t v = 0; v < o->loads; v++) {
            kf_val got = kf_read(k, o->next[v]);
            kf_val at = kf_add(k, at0, kf_add(k, kf_mul(k, o->row[v], u32(k, o->ld)), o->col[v]));
            for (uint32_t w = 0; w < LANES; w++) {
                kf_val pair = kf_bitcast(k, h2, kf_extract(k, got, w));
                for (uint32_t l = 0; l < 2; l++) {
                    uint32_t h = 2 * w + l;
                    kf_shared_store(k, o->tile, h ? kf_add(k, at, u32(k, h)) : at,
                                    kf_extract(k, pair, l));
                }
            }
        }
        return;
    }
    for (uint32_t v = 0; v < o->loads; v++) {
        kf_val got = kf_read(k, o->next[v]);
        kf_val at = kf_add(k, at0, kf_add(k, kf_mul(k, o->row[v], u32(k, o->ld)), o->col[v]));
        if (!o->swap[v].id) {
            for (uint32_t l = 0; l < LANES; l++) {
                kf_shared_store(k, o->tile, l ? kf_add(k, at, u32(k, l)) : at,
                                kf_extract(k, got, l));
            }
            continue;
        }
        /* halves 0, 1 at +shift, 2, 3 at +2-shift: the swapped invocations store the other
         * word of the vec4 first */
        kf_val s = o->swap[v];
        kf_val lo = kf_add(k, at, o->shift[v]);
        kf_val hi = kf_sub(k, kf_add(k, at, u32(k, 2)), o->shift[v]);
        for (uint32_t l = 0; l < LANES; l++) {
            kf_val base = l < 2 ? lo : hi;
            kf_val mine = kf_extract(k, got, l), other = kf_extract(k, got, l ^ 2u);
            kf_shared_store(k, o->tile, l & 1u ? kf_add(k, base, u32(k, 1)) : base,
                            kf_select(k, mine, other, s));
        }
    }
}

/* Order 2: the other set of registers becomes the one fetched into and stored from. */
static void swap_sets(operand *o) {
    for (uint32_t v = 0; o->deep && v < o->loads; v++) {
        kf_var t = o->next[v];
        o->next[v] = o->next2[v];
        o->next2[v] = t;
    }
}

/* The K offset `ahead` steps on from k0; straight: no further than the last step's, klast. */
static kf_val next_k(kf_kernel *k, kf_val k0, uint32_t ahead, uint32_t klast, bool straight) {
    kf_val at = kf_add(k, k0, u32(k, ahead));
    return straight ? kf_call2(k, KF_FN_MIN, at, u32(k, klast)) : at;
}

/* Probe 4 (measuring only): the registers of the step folded (xor) into one vector, stored where
 * the first goes, so the step keeps its fetches and pays one store. */
static void operand_store_folded(kf_kernel *k, const operand *o, kf_val at0) {
    kf_type u2 = kf_type_vec(KF_SCALAR_U32, 2), h2 = kf_type_vec(KF_SCALAR_F16, 2);
    kf_type h4 = kf_type_vec(KF_SCALAR_F16, LANES);
    const bool w8 = o->width == 8;
    kf_val fold = {0};
    for (uint32_t v = 0; v < o->loads; v++) {
        kf_val got = kf_read(k, o->next[v]);
        got = w8 ? got : kf_bitcast(k, u2, got);
        fold = v ? kf_binary(k, KF_OP_BIT_XOR, fold, got) : got;
    }
    kf_val at = kf_add(k, at0, kf_add(k, kf_mul(k, o->row[0], u32(k, o->ld)), o->col[0]));
    kf_val halves = w8 ? (kf_val){0} : kf_bitcast(k, h4, fold);
    for (uint32_t h = 0; h < o->width; h++) {
        kf_val x = w8 ? kf_extract(k, kf_bitcast(k, h2, kf_extract(k, fold, h / 2)), h % 2)
                      : kf_extract(k, halves, h);
        kf_shared_store(k, o->tile, h ? kf_add(k, at, u32(k, h)) : at, x);
    }
}

kf_kernel *kf__matmul_sgmat(uint32_t m, uint32_t kdim, uint32_t n, const kf__sgmat_config *cfg,
                            uint32_t sg) {
    return kf__matmul_sgmat_transposed(m, kdim, n, cfg, sg, NULL, false, false);
}

kf_kernel *kf__matmul_sgmat_batched(uint32_t m, uint32_t kdim, uint32_t n,
                                    const kf__sgmat_config *cfg, uint32_t sg,
                                    const kf__mm_batch *batch) {
    return kf__matmul_sgmat_transposed(m, kdim, n, cfg, sg, batch, false, false);
}

kf_kernel *kf__matmul_sgmat_transposed(uint32_t m, uint32_t kdim, uint32_t n,
                                       const kf__sgmat_config *cfg, uint32_t sg,
                                       const kf__mm_batch *batch, bool ta, bool tb) {
    const uint32_t count = kf__mm_batch_count(batch);
    if (!cfg) {
        cfg = kf__sgmat_default_config(m, kdim, n, false);
    }
    if (!kf__sgmat_config_valid(cfg, sg) || !m || !kdim || !n) {
        return NULL;
    }
    const uint32_t bm = cfg->bm, bn = cfg->bn, bk = cfg->bk, wm = cfg->wm, wn = cfg->wn;
    const uint32_t threads = threads_of(cfg, sg), subgroups = wm * wn;
    const uint32_t tm = bm / wm / MAT, tn = bn / wn / MAT; /* result matrices per subgroup */
    const bool ragged_m = m % bm != 0, ragged_n = n % bn != 0, ragged_k = kdim % bk != 0;
    /* Operands read straight from their buffers (no tile): only where no tile crosses an edge. */
    const bool whole =
        !ragged_m && !ragged_n && !ragged_k && kdim % 8 == 0 && n % 8 == 0 && count <= 1;
    const bool a_direct = whole && !ta && (cfg->direct & 1u);
    /* a's tile k-major: a^T's as stored, or a's transposed while staged (layout 1) */
    const bool transposing = kmajor_a(cfg, sg, ta, a_direct), ka = ta || transposing;
    operand A = {.rows = ta ? kdim : m,
                 .cols = ta ? m : kdim,
                 .trows = ka ? bk : bm,
                 .tcols = ka ? bm : bk,
                 .k_on_rows = ta,
                 .transposing = transposing,
                 .checked = ragged_m || ragged_k};
    operand B = {.rows = tb ? n : kdim,
                 .cols = tb ? kdim : n,
                 .trows = tb ? bn : bk,
                 .tcols = tb ? bk : bn,
                 .k_on_rows = !tb,
                 .checked = ragged_k || ragged_n};
    A.direct = a_direct;
    B.direct = whole && !tb && (cfg->direct & 2u);
    operand *ops[2] = {&A, &B};
    uint32_t per_stage = 0;
    for (int i = 0; i < 2; i++) {
        operand *o = ops[i];
        o->ld = o->tcols + PAD;
        o->stage = o->direct ? 0 : o->trows * o->ld;
        per_stage += o->stage;
        o->staging = o->transposing ? 0 : cfg->staging;
        uint32_t blocks = (o->trows / MAT) * (o->tcols / MAT);
        if (o->staging == 2 && (ragged_m || ragged_n || ragged_k || o->cols % 8 != 0 ||
                                blocks % subgroups || blocks / subgroups > MAX_BLOCKS)) {
            o->staging = 1; /* blocks that cross an edge, or misaligned rows */
        }
        o->blocks = o->direct || o->staging != 2 ? 0 : blocks / subgroups;
        /* 16-byte fetches (the vector field) where the operand is staged in lane order, no
         * fetch crosses an edge, its rows are whole 8-half vectors and the fetches divide */
        o->width = cfg->vector == 1 && !o->direct && o->staging == 0 && !o->transposing &&
                           !o->checked && o->cols % 8 == 0 && count <= 1 &&
                           (o->trows * o->tcols) % (8 * threads) == 0
                       ? 8
                       : LANES;
        o->loads = o->direct || o->staging == 2 ? 0 : o->trows * o->tcols / (o->width * threads);
        o->wide = !o->direct && o->staging != 2 && o->cols % LANES == 0;
        o->sp = (spread){{0, 1, 2}, -1, false};
        if (o->staging == 1 || o->staging == 3) {
            o->sp = spread_choose(threads, o->loads, o->tcols, o->ld, o->staging == 3);
        }
    }
    const uint32_t stages = stages_for(cfg, per_stage);
    const bool staged = !A.direct || !B.direct;
    /* the scratch's row length, in floats */
    const uint32_t cols_per_round = store_cols(cfg, stages * per_stage);
    if (!cols_per_round) {
        return NULL; /* a transposed operand's tile does not fit beside the scratch */
    }
    const uint32_t ecols = cols_per_round * MAT;
    const uint32_t tiles_m = (m + bm - 1) / bm, tiles_n = (n + bn - 1) / bn;
    kf_type h = kf_type_scalar(KF_SCALAR_F16), h4 = kf_type_vec(KF_SCALAR_F16, LANES);

    char name[160];
    const char *staging_name[4] = {"", "_spread", "_sgcopy", "_rows"};
    snprintf(name, sizeof name, "matmul_sgmat_%ux%ux%u_%ux%u%s%s%s%s%s%s%s%s%s%s%s%s", bm, bn, bk,
             wm, wn, stages == 2 && staged ? "_db" : "", cfg->straight ? "_straight" : "",
             cfg->order == 1 && stages == 2 && staged   ? "_ahead"
             : cfg->order == 2 && stages == 1 && staged ? "_deep"
                                                        : "",
             A.direct ? "_direct_a" : "", B.direct ? "_direct_b" : "",
             staging_name[A.staging > B.staging ? A.staging : B.staging], transposing ? "_ka" : "",
             A.width == 8 || B.width == 8 ? "_v8" : "", ta ? "_ta" : "", tb ? "_tb" : "",
             count > 1 ? "_batched" : "",
             cfg->probe == 1   ? "_probe_staged_once"
             : cfg->probe == 2 ? "_probe_loaded_once"
             : cfg->probe == 3 ? "_probe_mma_only"
             : cfg->probe == 4 ? "_probe_fetch_only"
             : cfg->probe == 8 ? "_probe_store_only"
                               : "");
    kf_kernel_desc desc = {.name = name, .workgroup_size = {threads, 1, 1}, .output = h};
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    kf_type u4 = kf_type_vec(KF_SCALAR_U32, LANES);
    A.bind = kf_kernel_storage(k, "a", A.width == 8 ? u4 : A.wide ? h4 : h, KF_ACCESS_READ);
    B.bind = kf_kernel_storage(k, "b", B.width == 8 ? u4 : B.wide ? h4 : h, KF_ACCESS_READ);
    if (!A.direct) {
        A.tile = kf_kernel_workgroup(k, "tile_a", h, stages * A.stage);
    }
    if (!B.direct) {
        B.tile = kf_kernel_workgroup(k, "tile_b", h, stages * B.stage);
    }
    kf_shared scratch =
        kf_kernel_workgroup(k, "scratch", kf_type_scalar(KF_SCALAR_F32), wm * wn * MAT * ecols);

    kf_val local = kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX);
    kf_val sgi = kf_let(k, "sgi", kf_div(k, local, u32(k, sg)));
    kf_val lane = kf_let(k, "lane", kf_binary(k, KF_OP_MOD, local, u32(k, sg)));
    kf_val tile = kf_let(k, "tile", kf_workgroup_linear(k));
    kf_val off_c = {0};
    if (count > 1) {
        /* this workgroup's product of the batch, and its tile of that product */
        kf_val which = kf_let(k, "product", kf_div(k, tile, u32(k, tiles_m * tiles_n)));
        tile = kf_let(k, "tile_of", kf_binary(k, KF_OP_MOD, tile, u32(k, tiles_m * tiles_n)));
        A.offset = kf__mm_batch_offset(k, batch, which, batch->a_step);
        B.offset = kf__mm_batch_offset(k, batch, which, batch->b_step);
        off_c = kf__mm_batch_offset(k, batch, which, batch->c_step);
        A.offset = A.offset.id ? kf_let(k, "a_at", A.offset) : A.offset;
        B.offset = B.offset.id ? kf_let(k, "b_at", B.offset) : B.offset;
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

    const bool deep = cfg->order == 2 && stages == 1 && !A.direct && !B.direct;
    A.deep = B.deep = deep;
    if (!A.direct) {
        operand_init(k, &A, "a", local, sgi, threads, subgroups, row0);
    }
    if (!B.direct) {
        operand_init(k, &B, "b", local, sgi, threads, subgroups, col0);
    }
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
#define FETCH(k0)                                                                                  \
    do {                                                                                           \
        kf_val k_inside = !ragged_k   ? kf_lit_bool(k, true)                                       \
                          : kdim < bk ? kf_lit_bool(k, false)                                      \
                                      : kf_binary(k, KF_OP_LE, (k0), u32(k, kdim - bk));           \
        if (!A.direct) {                                                                           \
            operand_fetch(k, &A, (k0), row0, kf_binary(k, KF_OP_AND, rows_inside, k_inside));      \
        }                                                                                          \
        if (!B.direct) {                                                                           \
            operand_fetch(k, &B, (k0), col0, kf_binary(k, KF_OP_AND, k_inside, cols_inside));      \
        }                                                                                          \
    } while (0)
#define STORE_TILES(oa, ob)                                                                        \
    do {                                                                                           \
        if (!A.direct) {                                                                           \
            operand_store(k, &A, (oa));                                                            \
        }                                                                                          \
        if (!B.direct) {                                                                           \
            operand_store(k, &B, (ob));                                                            \
        }                                                                                          \
    } while (0)
    /* probe (measuring only, wrong results): 1 stages the tiles once, before the loop; 2 loads
     * the matrices once, before the loop (so the loop multiplies and stages only); 4 fetches
     * every step but stores one vector an operand (the fetched ones folded into it); 8 stores
     * every step what was fetched once */
    const bool probe_stage = cfg->probe == 1 || cfg->probe == 3;
    const bool probe_loads = cfg->probe == 2 || cfg->probe == 3;
    const bool probe_fold = cfg->probe == 4, probe_nofetch = cfg->probe == 8;
    /* ahead (order 1, two stages): the registers run a step ahead of the tiles. Step k stores
     * the tiles of step k + 1 (fetched during step k - 1) into the stage step k - 1 read, fetches
     * those of step k + 2, then multiplies: a global load has a whole step to arrive, and the
     * step's one barrier also orders the next step's stores after this step's reads. */
    const bool ahead = cfg->order == 1 && stages == 2 && staged;
    const bool straight = cfg->straight == 1;
    const uint32_t klast = (kdim - 1) / bk * bk; /* where the last step starts */
    FETCH(u32(k, 0));
    if ((stages == 2 && staged) || cfg->probe) {
        STORE_TILES(u32(k, 0), u32(k, 0));
        if (ahead && kdim > bk) {
            FETCH(u32(k, bk));
        }
        kf_barrier(k);
    }
    if (probe_loads) {
        kf_val a0 = ka ? sub_row : kf_mul(k, sub_row, u32(k, A.ld));
        kf_val b0 = tb ? kf_mul(k, sub_col, u32(k, B.ld)) : sub_col;
        for (uint32_t j = 0; j < tn; j++) {
            kf_sgmat_load(k, right[j], B.tile, kf_add(k, b0, u32(k, tb ? j * MAT * B.ld : j * MAT)),
                          tb, u32(k, B.ld));
        }
        for (uint32_t i = 0; i < tm; i++) {
            kf_sgmat_load(k, left[i], A.tile, kf_add(k, a0, u32(k, ka ? i * MAT : i * MAT * A.ld)),
                          ka, u32(k, A.ld));
        }
    }
    /* The multiplies of one step: this subgroup's matrices from the tiles at oa, ob (or from a
     * and b at k0), into its result matrices. */
#define MULTIPLY(k0, oa, ob)                                                                       \
    do {                                                                                           \
        /* Where this subgroup's matrices start: in the tiles, or in a and b themselves. In a      \
         * transposed operand's tile the matrices lie column-major. */                             \
        kf_val a_base, b_base;                                                                     \
        uint32_t a_stride = A.ld, b_stride = B.ld;                                                 \
        if (A.direct) {                                                                            \
            a_stride = kdim;                                                                       \
            a_base = kf_let(k, "a_base",                                                           \
                            kf_add(k, kf_mul(k, kf_add(k, row0, sub_row), u32(k, kdim)), k0));     \
        } else if (ka) {                                                                           \
            a_base = kf_let(k, "a_base", kf_add(k, oa, sub_row));                                  \
        } else {                                                                                   \
            a_base = kf_let(k, "a_base", kf_add(k, oa, kf_mul(k, sub_row, u32(k, A.ld))));         \
        }                                                                                          \
        if (B.direct) {                                                                            \
            b_stride = n;                                                                          \
            b_base = kf_let(k, "b_base",                                                           \
                            kf_add(k, kf_mul(k, k0, u32(k, n)), kf_add(k, col0, sub_col)));        \
        } else if (tb) {                                                                           \
            b_base = kf_let(k, "b_base", kf_add(k, ob, kf_mul(k, sub_col, u32(k, B.ld))));         \
        } else {                                                                                   \
            b_base = kf_let(k, "b_base", kf_add(k, ob, sub_col));                                  \
        }                                                                                          \
        for (uint32_t kk = 0; kk < bk; kk += MAT) {                                                \
            for (uint32_t j = 0; j < tn && !probe_loads; j++) {                                    \
                uint32_t rel = tb ? j * MAT * b_stride + kk : kk * b_stride + j * MAT;             \
                kf_val at = kf_add(k, b_base, u32(k, rel));                                        \
                if (B.direct) {                                                                    \
                    kf_sgmat_load_storage(k, right[j], B.bind, at, false, u32(k, b_stride));       \
                } else {                                                                           \
                    kf_sgmat_load(k, right[j], B.tile, at, tb, u32(k, b_stride));                  \
                }                                                                                  \
            }                                                                                      \
            for (uint32_t i = 0; i < tm; i++) {                                                    \
                uint32_t rel = ka ? kk * a_stride + i * MAT : i * MAT * a_stride + kk;             \
                kf_val at = kf_add(k, a_base, u32(k, rel));                                        \
                if (A.direct) {                                                                    \
                    kf_sgmat_load_storage(k, left[i], A.bind, at, false, u32(k, a_stride));        \
                } else if (!probe_loads) {                                                         \
                    kf_sgmat_load(k, left[i], A.tile, at, ka, u32(k, a_stride));                   \
                }                                                                                  \
                for (uint32_t j = 0; j < tn; j++) {                                                \
                    kf_sgmat_mma(k, acc[i * tn + j], left[i], right[j]);                           \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    } while (0)
    if (deep) {
        /* Order 2: two sets of registers, each fetched two steps before its tiles are stored
         * (a global load has two steps to arrive); the loop takes the steps in pairs, one set
         * each, and an odd last step after it. */
        swap_sets(&A);
        swap_sets(&B);
        FETCH(u32(k, bk < kdim ? bk : klast));
        swap_sets(&A);
        swap_sets(&B);
        const uint32_t steps = (kdim + bk - 1) / bk;
        kf_val kp = kf_for(k, "k0", u32(k, 0), u32(k, steps / 2 * 2 * bk), u32(k, 2 * bk));
        for (uint32_t half = 0; half < 2; half++) {
            if (half) {
                swap_sets(&A);
                swap_sets(&B);
            }
            kf_val zero = u32(k, 0), kh = half ? kf_add(k, kp, u32(k, bk)) : kp;
            STORE_TILES(zero, zero);
            kf_barrier(k);
            FETCH(next_k(k, kh, 2 * bk, klast, true));
            MULTIPLY(kh, zero, zero);
            kf_barrier(k);
            if (half) {
                swap_sets(&A);
                swap_sets(&B);
            }
        }
        kf_end(k);
        if (steps % 2) {
            kf_val zero = u32(k, 0), klv = u32(k, klast);
            STORE_TILES(zero, zero);
            kf_barrier(k);
            MULTIPLY(klv, zero, zero);
            kf_barrier(k);
        }
    } else {
        kf_val k0 = kf_for(k, "k0", u32(k, 0), u32(k, kdim), u32(k, bk));
        {
            kf_val more =
                kf_let(k, "more", kf_binary(k, KF_OP_LT, kf_add(k, k0, u32(k, bk)), u32(k, kdim)));
            kf_val oa = u32(k, 0), ob = u32(k, 0);
            if (stages == 2 && staged) {
                kf_val cur = kf_binary(k, KF_OP_BIT_AND, kf_div(k, k0, u32(k, bk)), u32(k, 1));
                oa = kf_let(k, "oa", kf_mul(k, cur, u32(k, A.stage)));
                ob = kf_let(k, "ob", kf_mul(k, cur, u32(k, B.stage)));
            } else if (staged) {
                if (probe_fold) { /* no direct operand with a probe */
                    operand_store_folded(k, &A, oa);
                    operand_store_folded(k, &B, ob);
                } else if (!probe_stage) {
                    STORE_TILES(oa, ob);
                }
                kf_barrier(k);
            }
            /* The next tiles travel while this one is multiplied. Straight: no branch around the
             * staging, so the driver can schedule it among the multiplies; the fetches past the
             * last step read the last tile again and the stores past it fill a stage no step
             * reads. */
            if (ahead && !probe_stage) {
                if (!straight) {
                    kf_if(k, more);
                }
                STORE_TILES(kf_sub(k, u32(k, A.stage), oa), kf_sub(k, u32(k, B.stage), ob));
                if (!straight) {
                    kf_if(k, kf_binary(k, KF_OP_LT, kf_add(k, k0, u32(k, 2 * bk)), u32(k, kdim)));
                }
                FETCH(next_k(k, k0, 2 * bk, klast, straight));
                if (!straight) {
                    kf_end(k);
                    kf_end(k);
                }
            } else if (staged && !probe_stage && !probe_nofetch) {
                if (!straight) {
                    kf_if(k, more);
                }
                FETCH(next_k(k, k0, bk, klast, straight));
                if (!straight) {
                    kf_end(k);
                }
            }
            MULTIPLY(k0, oa, ob);
            if (stages == 2 && staged && !probe_stage && !ahead) {
                if (!straight) {
                    kf_if(k, more);
                }
                STORE_TILES(kf_sub(k, u32(k, A.stage), oa), kf_sub(k, u32(k, B.stage), ob));
                if (!straight) {
                    kf_end(k);
                }
            }
            if (staged) {
                kf_barrier(k);
            }
        }
        kf_end(k);
    }
#undef MULTIPLY
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
    int got = text ? sscanf(text, "%ux%ux%u/%ux%u/%u/%u/%u/%u/%u/%u/%u/%u/%u/%u%c", &c.bm, &c.bn,
                            &c.bk, &c.wm, &c.wn, &c.stages, &c.group_m, &c.direct, &c.staging,
                            &c.scratch, &c.probe, &c.layout, &c.order, &c.vector, &c.straight, &end)
                   : 0;
    if (got < 7 || got > 15) {
        return false;
    }
    *out = c;
    return true;
}

kf_kernel *kf__matmul_sgmat_for(kf_context *ctx, uint32_t m, uint32_t k, uint32_t n) {
    return kf__matmul_sgmat_transposed_for(ctx, m, k, n, NULL, false, false);
}

kf_kernel *kf__matmul_sgmat_batched_for(kf_context *ctx, uint32_t m, uint32_t k, uint32_t n,
                                        const kf__mm_batch *batch) {
    return kf__matmul_sgmat_transposed_for(ctx, m, k, n, batch, false, false);
}

kf_kernel *kf__matmul_sgmat_transposed_for(kf_context *ctx, uint32_t m, uint32_t k, uint32_t n,
                                           const kf__mm_batch *batch, bool ta, bool tb) {
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
    return kf__matmul_sgmat_transposed(
        m, k, n, forced ? &chosen : kf__sgmat_default_config(m, k, n, checked), sg, batch, ta, tb);
}
