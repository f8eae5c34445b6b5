/* Row kernels shared by the reductions over the last axis (see rowwise.h). */
#include "ops/rowwise.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kf__rows_layout(uint32_t cols, uint32_t *threads, uint32_t *rows_per_group) {
    uint32_t t = 1;
    while (t < cols && t < KF__ROWS_MAX_THREADS) {
        t *= 2;
    }
    *threads = t;
    *rows_per_group = KF__ROWS_MAX_THREADS / t;
}

void kf__rows_grid(const kf_shape *x, uint32_t groups[3]) {
    uint64_t rows;
    uint32_t cols, threads, per_group;
    kf__shape_rows_cols(x, &rows, &cols);
    kf__rows_layout(cols, &threads, &per_group);
    kf__grid_1d(rows, per_group, groups);
}

/* Lanes a row may take in the register layout: 256, or $KF_ROWS_LANES (a power of two from 32
 * to 1024) for measuring other shapes of the same kernels (bench/h200_f32.sh); the grid and the
 * kernel read it alike, so a process sees one layout. */
static uint32_t regs_lanes(void) {
    const char *env = getenv("KF_ROWS_LANES");
    long v = env ? strtol(env, NULL, 10) : 0;
    if (v >= 32 && v <= 1024 && (v & (v - 1)) == 0) {
        return (uint32_t)v;
    }
    return KF__ROWS_MAX_THREADS;
}

void kf__rows_regs_layout(uint32_t cols, uint32_t *width, uint32_t *chunks, uint32_t *threads,
                          uint32_t *rows_per_group) {
    /* $KF_ROWS_WIDTH=1 (for measuring) holds scalars even where vec4s fit: neighbouring lanes
     * then yield neighbouring elements, so the tail's scalar stores coalesce as the loads do */
    const char *width_env = getenv("KF_ROWS_WIDTH");
    uint32_t w = cols % 4 == 0 && !(width_env && strcmp(width_env, "1") == 0) ? 4 : 1;
    uint32_t units = cols / w;
    uint32_t lanes = regs_lanes();
    uint32_t t = 1;
    while (t < units && t < lanes) {
        t *= 2;
    }
    *threads = t;
    *rows_per_group = t >= KF__ROWS_MAX_THREADS ? 1 : KF__ROWS_MAX_THREADS / t;
    uint32_t c = (units + t - 1) / t;
    /* the same rows fit registers whatever the lanes: fewer lanes hold more chunks each */
    uint32_t budget = w == 4 ? KF__ROWS_MAX_VEC_CHUNKS : KF__ROWS_MAX_SCALAR_CHUNKS;
    if (lanes < KF__ROWS_MAX_THREADS) {
        budget = budget * (KF__ROWS_MAX_THREADS / lanes);
        budget = budget > KF__ROWS_MAX_CHUNKS ? KF__ROWS_MAX_CHUNKS : budget;
    }
    if (c > budget) {
        /* too long for registers: the loop layout */
        kf__rows_layout(cols, threads, rows_per_group);
        w = 1;
        c = 0;
    }
    *width = w;
    *chunks = c;
}

void kf__rows_regs_grid(const kf_shape *x, uint32_t groups[3]) {
    uint64_t rows;
    uint32_t cols, width, chunks, threads, per_group;
    kf__shape_rows_cols(x, &rows, &cols);
    kf__rows_regs_layout(cols, &width, &chunks, &threads, &per_group);
    kf__grid_1d(rows, per_group, groups);
}

/* The row-dependent values, at the top of the body. */
static void rows_prologue(kf__rows *r) {
    kf_kernel *k = r->k;
    kf_val local = kf_builtin_get(k, KF_BUILTIN_LOCAL_ID);
    r->lane = kf_let(k, "lane", kf_extract(k, local, 0));
    kf_val ly = kf_extract(k, local, 1);
    kf_val group = kf_workgroup_linear(k);
    kf_val row =
        kf_let(k, "row_unclamped", kf_add(k, kf_mul(k, group, kf__u32(k, r->rows_per_group)), ly));
    r->valid = kf_let(k, "valid", kf_binary(k, KF_OP_LT, row, kf__u32(k, r->rows)));
    r->row = kf_let(k, "row", kf_call2(k, KF_FN_MIN, row, kf__u32(k, r->rows - 1)));
    r->base = kf_let(k, "base", kf_mul(k, r->row, kf__u32(k, r->cols)));
    r->slot = kf_let(k, "slot", kf_mul(k, ly, kf__u32(k, r->threads)));
    r->mine = kf_let(k, "mine", kf_add(k, r->slot, r->lane));
    r->base_units =
        r->width == 4 ? kf_let(k, "base_units", kf_mul(k, r->row, kf__u32(k, r->units))) : r->base;
}

static kf_kernel *rows_create(kf__rows *r, const char *name, kf_dtype dtype, bool producer) {
    kf_kernel_desc desc = {0};
    desc.name = name;
    desc.workgroup_size[0] = r->threads;
    desc.workgroup_size[1] = r->rows_per_group;
    desc.workgroup_size[2] = 1;
    desc.input = kf_type_scalar(KF_SCALAR_VOID);
    desc.output = producer ? kf__dtype_type(dtype) : kf_type_scalar(KF_SCALAR_VOID);
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    r->k = k;
    uint32_t groups[3];
    kf__grid_1d(r->rows, r->rows_per_group, groups);
    kf_kernel_set_grid(k, groups);
    rows_prologue(r);
    return k;
}

kf_kernel *kf__rows_begin(kf__rows *r, const char *name, const kf_shape *x, kf_dtype dtype,
                          bool producer) {
    *r = (kf__rows){0};
    r->dtype = dtype;
    kf__shape_rows_cols(x, &r->rows, &r->cols);
    kf__rows_layout(r->cols, &r->threads, &r->rows_per_group);
    r->width = 1;
    r->units = r->cols;
    return rows_create(r, name, dtype, producer);
}

kf_kernel *kf__rows_begin_regs(kf__rows *r, const char *name, const kf_shape *x, kf_dtype dtype,
                               bool producer) {
    *r = (kf__rows){0};
    r->dtype = dtype;
    kf__shape_rows_cols(x, &r->rows, &r->cols);
    kf__rows_regs_layout(r->cols, &r->width, &r->chunks, &r->threads, &r->rows_per_group);
    r->units = r->cols / r->width;
    return rows_create(r, name, dtype, producer);
}

kf_val kf__rows_for(kf__rows *r, const char *name) {
    return kf_for(r->k, name, r->lane, kf__u32(r->k, r->cols), kf__u32(r->k, r->threads));
}

kf_binding kf__rows_bind(kf__rows *r, const char *name) {
    kf_type elem = kf__dtype_type(r->dtype);
    if (r->width > 1) {
        elem = kf_type_vec(elem.scalar, r->width);
    }
    return kf_kernel_storage(r->k, name, elem, KF_ACCESS_READ);
}

kf_val kf__rows_unit(kf__rows *r, uint32_t c) {
    kf_kernel *k = r->k;
    return c ? kf_add(k, r->lane, kf__u32(k, (uint64_t)c * r->threads)) : r->lane;
}

kf_val kf__rows_unit_inside(kf__rows *r, uint32_t c) {
    /* chunks before the last are inside for every lane: c * threads + lane < (chunks - 1) *
     * threads < units */
    if (c + 1 < r->chunks || (uint64_t)r->chunks * r->threads == r->units) {
        return (kf_val){0, 0};
    }
    return kf_binary(r->k, KF_OP_LT, kf__rows_unit(r, c), kf__u32(r->k, r->units));
}

kf_val kf__rows_load_unit(kf__rows *r, kf_binding b, kf_val first, uint32_t c) {
    kf_kernel *k = r->k;
    kf_val unit = kf__rows_unit(r, c);
    if (kf__rows_unit_inside(r, c).id) {
        unit = kf_call2(k, KF_FN_MIN, unit, kf__u32(k, r->units - 1));
    }
    kf_val v = kf_load(k, b, first.id ? kf_add(k, first, unit) : unit);
    if (r->dtype != KF_DTYPE_F32) {
        v = kf_cast(
            k, r->width > 1 ? kf_type_vec(KF_SCALAR_F32, r->width) : kf_type_scalar(KF_SCALAR_F32),
            v);
    }
    return v;
}

void kf__rows_load(kf__rows *r, kf_binding x, kf_var *regs) {
    kf_type t = r->width > 1 ? kf_type_vec(KF_SCALAR_F32, r->width) : kf_type_scalar(KF_SCALAR_F32);
    /* every load is issued before any is used: the chunks' latencies overlap */
    for (uint32_t c = 0; c < r->chunks && c < KF__ROWS_MAX_CHUNKS; c++) {
        regs[c] = kf_declare(r->k, "x", t, kf__rows_load_unit(r, x, r->base_units, c));
    }
}

kf_val kf__rows_hsum(kf_kernel *k, kf_val v) {
    kf_type t = kf_val_type(k, v);
    if (t.lanes <= 1) {
        return v;
    }
    if (t.lanes == 4) {
        return kf_add(k, kf_add(k, kf_extract(k, v, 0), kf_extract(k, v, 1)),
                      kf_add(k, kf_extract(k, v, 2), kf_extract(k, v, 3)));
    }
    kf_val s = kf_extract(k, v, 0);
    for (uint32_t i = 1; i < t.lanes; i++) {
        s = kf_add(k, s, kf_extract(k, v, i));
    }
    return s;
}

kf_val kf__rows_lane(kf_kernel *k, kf_val v, uint32_t j) {
    return kf_val_type(k, v).lanes > 1 ? kf_extract(k, v, j) : v;
}

void kf__rows_yield(kf__rows *r, kf_val y, uint32_t c) {
    kf_kernel *k = r->k;
    kf_val unit = kf__rows_unit(r, c);
    kf_val first = kf_add(k, r->base, r->width > 1 ? kf_mul(k, unit, kf__u32(k, r->width)) : unit);
    if (r->width > 1) {
        first = kf_let(k, "at", first);
    }
    for (uint32_t j = 0; j < r->width; j++) {
        kf_val at = j ? kf_add(k, first, kf__u32(k, j)) : first;
        kf__yield_f32(k, kf__rows_lane(k, y, j), at, r->dtype);
    }
}

void kf__rows_yield_all(kf__rows *r, const kf_val *ys) {
    kf_kernel *k = r->k;
    const char *env = getenv("KF_ROWS_EXCHANGE");
    if (r->width != 4 || (env && strcmp(env, "0") == 0)) {
        kf_if(k, r->valid);
        for (uint32_t c = 0; c < r->chunks; c++) {
            kf_val inside = kf__rows_unit_inside(r, c);
            if (inside.id) {
                kf_if(k, inside);
            }
            kf__rows_yield(r, ys[c], c);
            if (inside.id) {
                kf_end(k);
            }
        }
        kf_end(k);
        return;
    }
    /* Rounds of `per` chunks: a round's vec4s as scalars, in the row's order, within 16 KiB of
     * workgroup memory (WebGPU's default limit) for the whole workgroup */
    uint32_t per = 4096 / (r->threads * 4 * r->rows_per_group);
    per = per == 0 ? 1 : per > r->chunks ? r->chunks : per;
    uint32_t span = per * r->threads * 4;
    kf_shared row_out =
        kf_kernel_workgroup(k, "row_out", kf_type_scalar(KF_SCALAR_F32), span * r->rows_per_group);
    kf_val first = kf_let(k, "row_first", kf_mul(k, r->slot, kf__u32(k, (uint64_t)per * 4)));
    for (uint32_t c0 = 0; c0 < r->chunks; c0 += per) {
        uint32_t n = r->chunks - c0 < per ? r->chunks - c0 : per;
        if (c0) {
            kf_barrier(k); /* the previous round has been read */
        }
        for (uint32_t c = 0; c < n; c++) {
            kf_val unit = kf__u32(k, (uint64_t)c * r->threads);
            kf_val at = kf_let(
                k, "at", kf_add(k, first, kf_mul(k, kf_add(k, r->lane, unit), kf__u32(k, 4))));
            for (uint32_t j = 0; j < 4; j++) {
                kf_shared_store(k, row_out, j ? kf_add(k, at, kf__u32(k, j)) : at,
                                kf__rows_lane(k, ys[c0 + c], j));
            }
        }
        kf_barrier(k);
        kf_if(k, r->valid);
        uint64_t round_first = (uint64_t)c0 * r->threads * 4; /* the round's first element */
        for (uint32_t i = 0; i < n * 4; i++) {
            /* element round_first + i * threads + lane of the row */
            uint64_t off = (uint64_t)i * r->threads;
            kf_val e = kf_let(k, "e", off ? kf_add(k, r->lane, kf__u32(k, off)) : r->lane);
            bool past = round_first + off + r->threads > r->cols;
            if (past) {
                kf_if(k, kf_binary(k, KF_OP_LT, e, kf__u32(k, r->cols - round_first)));
            }
            kf_val at = kf_add(k, r->base, round_first ? kf_add(k, e, kf__u32(k, round_first)) : e);
            kf__yield_f32(k, kf_shared_load(k, row_out, kf_add(k, first, e)), at, r->dtype);
            if (past) {
                kf_end(k);
            }
        }
        kf_end(k);
    }
}

/* The i-th scratch array of this scalar type, declared on first use. */
static kf_shared scratch(kf__rows *r, kf_scalar scalar, uint32_t i) {
    kf_kernel *k = r->k;
    uint32_t size = r->threads * r->rows_per_group;
    bool u32 = scalar == KF_SCALAR_U32;
    kf_shared *arrays = u32 ? r->scratch_u32 : r->scratch_f32;
    uint32_t *count = u32 ? &r->scratch_u32_count : &r->scratch_f32_count;
    while (*count <= i) {
        char name[32];
        snprintf(name, sizeof name, "scratch_%c%u", u32 ? 'u' : 'f', *count);
        arrays[*count] =
            kf_kernel_workgroup(k, name, kf_type_scalar(u32 ? KF_SCALAR_U32 : KF_SCALAR_F32), size);
        (*count)++;
    }
    return arrays[i];
}

/* Combines m tuples (m a power of two) pairwise, level by level: vals[i] holds tuple i. */
static void combine_pairwise(kf_kernel *k, uint32_t n, kf_val (*vals)[KF__ROWS_MAX_SCRATCH],
                             uint32_t m, kf__combine_fn combine) {
    for (; m > 1; m /= 2) {
        for (uint32_t i = 0; i < m / 2; i++) {
            kf_val c[KF__ROWS_MAX_SCRATCH];
            combine(k, vals[2 * i], vals[2 * i + 1], n, c);
            for (uint32_t v = 0; v < n; v++) {
                /* named: a combine may read its operands more than once */
                vals[i][v] = kf_let(k, "c", c[v]);
            }
        }
    }
}

/* Lanes of a row that each combine a strided group of the row's partials in the first step. */
#define GATHER_LANES 16u
/* The most lanes a row takes ($KF_ROWS_LANES) */
#define KF__ROWS_MAX_LANES 1024u

void kf__rows_reduce(kf__rows *r, uint32_t n, const kf_val *partials, kf__combine_fn combine,
                     kf_val *out) {
    kf_kernel *k = r->k;
    if (r->threads == 1) {
        /* one lane per row: its partial is the row's result */
        for (uint32_t v = 0; v < n; v++) {
            out[v] = partials[v];
        }
        return;
    }
    if (n > KF__ROWS_MAX_SCRATCH) {
        n = KF__ROWS_MAX_SCRATCH; /* internal misuse; the tuple is capped, not overrun */
    }
    /* Each value gets a scratch array of its type that no earlier reduction used (see
     * rowwise.h: a read moved past a barrier must find nothing overwritten), while there are
     * fresh ones; then they are shared from the first, and a barrier ends each call. */
    uint32_t f32_needed = 0, u32_needed = 0;
    for (uint32_t v = 0; v < n; v++) {
        if (kf_val_type(k, partials[v]).scalar == KF_SCALAR_U32) {
            u32_needed++;
        } else {
            f32_needed++;
        }
    }
    bool fresh = r->scratch_f32_count + f32_needed <= KF__ROWS_MAX_SCRATCH_ARRAYS &&
                 r->scratch_u32_count + u32_needed <= KF__ROWS_MAX_SCRATCH_ARRAYS;
    uint32_t next_f32 = fresh ? r->scratch_f32_count : 0;
    uint32_t next_u32 = fresh ? r->scratch_u32_count : 0;
    kf_shared arrays[KF__ROWS_MAX_SCRATCH];
    for (uint32_t v = 0; v < n; v++) {
        if (kf_val_type(k, partials[v]).scalar == KF_SCALAR_U32) {
            arrays[v] = scratch(r, KF_SCALAR_U32, next_u32++);
        } else {
            arrays[v] = scratch(r, KF_SCALAR_F32, next_f32++);
        }
    }
    if (!fresh) {
        kf_barrier(k); /* earlier calls ended without one */
    }
    kf_val mine = r->mine;
    for (uint32_t v = 0; v < n; v++) {
        kf_shared_store(k, arrays[v], mine, partials[v]);
    }
    kf_barrier(k);
    /* A tree in workgroup memory needs a barrier per level (9 for 256 lanes); two gathers need
     * two. Lane g < 16 combines slots g, g + 16, g + 32, ... and writes slot g, which only it
     * reads, so the step needs no barrier inside. */
    uint32_t gather = r->threads < GATHER_LANES ? r->threads : GATHER_LANES;
    if (r->threads / gather > GATHER_LANES) {
        gather = r->threads / GATHER_LANES; /* more than 256 lanes: each gathers 16 still */
    }
    uint32_t fan = r->threads / gather;
    kf_val vals[KF__ROWS_MAX_LANES / GATHER_LANES][KF__ROWS_MAX_SCRATCH];
    if (fan > 1) {
        kf_if(k, kf_binary(k, KF_OP_LT, r->lane, kf__u32(k, gather)));
        for (uint32_t j = 0; j < fan; j++) {
            kf_val at = j ? kf_add(k, mine, kf__u32(k, j * gather)) : mine;
            for (uint32_t v = 0; v < n; v++) {
                vals[j][v] = kf_shared_load(k, arrays[v], at); /* named where read */
            }
        }
        combine_pairwise(k, n, vals, fan, combine);
        for (uint32_t v = 0; v < n; v++) {
            kf_shared_store(k, arrays[v], mine, vals[0][v]);
        }
        kf_end(k);
        kf_barrier(k);
    }
    /* every lane combines the row's gathered partials itself, in the same order, so all lanes
     * hold the same result */
    for (uint32_t j = 0; j < gather; j++) {
        kf_val at = j ? kf_add(k, r->slot, kf__u32(k, j)) : r->slot;
        for (uint32_t v = 0; v < n; v++) {
            vals[j][v] = kf_shared_load(k, arrays[v], at); /* named where read */
        }
    }
    combine_pairwise(k, n, vals, gather, combine);
    for (uint32_t v = 0; v < n; v++) {
        char name[32];
        snprintf(name, sizeof name, "reduced%u", r->reductions++);
        out[v] = kf_let(k, name, vals[0][v]);
    }
    if (!fresh) {
        /* the next reduction overwrites these arrays: everyone must have read them first */
        kf_barrier(k);
    }
}

static void combine_sum(kf_kernel *k, const kf_val *a, const kf_val *b, uint32_t n, kf_val *out) {
    for (uint32_t v = 0; v < n; v++) {
        out[v] = kf_add(k, a[v], b[v]);
    }
}

static void combine_max(kf_kernel *k, const kf_val *a, const kf_val *b, uint32_t n, kf_val *out) {
    for (uint32_t v = 0; v < n; v++) {
        out[v] = kf__max_nan(k, a[v], b[v]);
    }
}

kf_val kf__rows_sum(kf__rows *r, kf_val partial) {
    kf_val out;
    kf__rows_reduce(r, 1, &partial, combine_sum, &out);
    return out;
}

kf_val kf__rows_max(kf__rows *r, kf_val partial) {
    kf_val out;
    kf__rows_reduce(r, 1, &partial, combine_max, &out);
    return out;
}

kf_val kf__isnan(kf_kernel *k, kf_val x) {
    kf_val bits = kf_bitcast(k, kf_type_scalar(KF_SCALAR_U32), x);
    kf_val magnitude = kf_binary(k, KF_OP_BIT_AND, bits, kf_lit_u32(k, 0x7fffffffu));
    return kf_binary(k, KF_OP_GT, magnitude, kf_lit_u32(k, 0x7f800000u));
}

kf_val kf__max_nan(kf_kernel *k, kf_val a, kf_val b) {
    /* b wins when it is NaN or larger; a NaN a never loses (b > NaN is false) */
    kf_val take_b = kf_binary(k, KF_OP_OR, kf__isnan(k, b), kf_binary(k, KF_OP_GT, b, a));
    return kf_select(k, a, b, take_b);
}

kf_val kf__nan(kf_kernel *k, kf_val anchor) {
    kf_val zero = kf_binary(k, KF_OP_BIT_AND, anchor, kf_lit_u32(k, 0));
    kf_val bits = kf_binary(k, KF_OP_BIT_OR, zero, kf_lit_u32(k, 0x7fc00000u));
    return kf_bitcast(k, kf_type_scalar(KF_SCALAR_F32), bits);
}

double kf__spec_max(double a, double b) {
    if (isnan(a) || isnan(b)) {
        return NAN;
    }
    return b > a ? b : a;
}

kf_status kf__spec_check_out(const kf_operator *op, const kf_tensor *const *in,
                             const kf_op_params *p, const kf_tensor *out) {
    kf_shape shapes[4] = {{0}};
    uint32_t arity = kf_op_arity(op, p);
    if (!in || !out || arity > 4) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    for (uint32_t i = 0; i < arity; i++) {
        if (!in[i]) {
            return KF_ERROR_INVALID_ARGUMENT;
        }
        shapes[i] = in[i]->shape;
    }
    kf_shape want;
    char msg[160];
    kf_status st = op->shape(shapes, p, &want, msg, sizeof msg);
    if (st != KF_OK) {
        return st;
    }
    return kf_shape_eq(&want, &out->shape) ? KF_OK : KF_ERROR_SHAPE;
}
