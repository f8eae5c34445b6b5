/* Random expression trees, depth up to 8, over every scalar type (f32, f16, i32, u32, bool) and
 * vectors of 2 to 4 lanes: the interpreter and the GPU must agree, floats within a tolerance
 * (transcendental functions are not correctly rounded on GPUs), integers and bools exactly.
 *
 * Float trees are built so values stay in about [-4, 4] and no operation amplifies an error by
 * much (a + b is (a + b) * 0.5, a / b is a / (|b| + 2), exp takes a clamped argument, ...), and
 * discontinuous operations (comparisons, floor, float-to-int casts) only see inputs, never
 * computed floats, so a last-bit difference cannot flip a branch. Integer trees use everything,
 * including division by zero, INT_MIN / -1 and over-wide shifts, whose results WGSL defines. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir_testing.h"
#include "core/half.h"

#define N_ELEMS 777u /* not a multiple of any workgroup size */

typedef struct gen {
    kf_kernel *k;
    bool f16;
    kf_val leaf[KF_SCALAR_BOOL + 1][4]; /* scalars loaded for this element, by scalar type */
    uint32_t nodes;
} gen;

static uint32_t rnd(uint32_t n) {
    return (uint32_t)(kt_rand_u64() % n);
}

static kf_type T(kf_scalar s, uint32_t lanes) {
    return lanes > 1 ? kf_type_vec(s, lanes) : kf_type_scalar(s);
}

static kf_val lit_scalar(gen *g, kf_scalar s, double v) {
    switch (s) {
    case KF_SCALAR_F32:
        return kf_lit_f32(g->k, (float)v);
    case KF_SCALAR_F16:
        return kf_lit_f16(g->k, (float)v);
    case KF_SCALAR_I32:
        return kf_lit_i32(g->k, (int32_t)v);
    case KF_SCALAR_U32:
        return kf_lit_u32(g->k, (uint32_t)v);
    default:
        return kf_lit_bool(g->k, v != 0);
    }
}

/* A constant of type s x lanes. */
static kf_val cst(gen *g, kf_scalar s, uint32_t lanes, double v) {
    kf_val c = lit_scalar(g, s, v);
    return lanes > 1 ? kf_splat(g->k, T(s, lanes), c) : c;
}

static kf_val gen_expr(gen *g, kf_scalar s, uint32_t lanes, int depth);

/* A leaf: an input lane or a literal (a vector of them for lanes > 1). */
static kf_val leaf(gen *g, kf_scalar s, uint32_t lanes) {
    if (lanes > 1) {
        kf_val parts[4];
        if (rnd(4) == 0) {
            return kf_splat(g->k, T(s, lanes), leaf(g, s, 1));
        }
        for (uint32_t i = 0; i < lanes; i++) {
            parts[i] = leaf(g, s, 1);
        }
        return kf_vec(g->k, T(s, lanes), parts, lanes);
    }
    if (s == KF_SCALAR_BOOL) {
        if (rnd(3) == 0) {
            return kf_lit_bool(g->k, rnd(2));
        }
        kf_val a = g->leaf[KF_SCALAR_F32][rnd(4)], b = g->leaf[KF_SCALAR_F32][rnd(4)];
        return kf_binary(g->k, KF_OP_LT + rnd(4), a, b);
    }
    if (rnd(4) == 0) {
        static const double ints[] = {0, 1, -1, 7, 31, 32, 33, -2147483648.0, 2147483647.0, 1000};
        static const double uints[] = {0, 1, 31, 32, 33, 4294967295.0, 65536, 12345};
        switch (s) {
        case KF_SCALAR_I32:
            return lit_scalar(g, s, ints[rnd(10)]);
        case KF_SCALAR_U32:
            return lit_scalar(g, s, uints[rnd(8)]);
        default:
            return lit_scalar(g, s, kt_rand_f32(-4.0f, 4.0f));
        }
    }
    return g->leaf[s][rnd(4)];
}

static kf_val scaled(gen *g, kf_scalar s, uint32_t lanes, kf_val v, double f) {
    return kf_mul(g->k, v, cst(g, s, lanes, f));
}

/* A subtree of the given depth, or sometimes shallower, for the second operand of an op. */
static kf_val sub(gen *g, kf_scalar s, uint32_t lanes, int depth) {
    return gen_expr(g, s, lanes, rnd(3) == 0 ? (int)rnd((uint32_t)depth + 1) : depth);
}

static kf_val gen_float(gen *g, kf_scalar s, uint32_t lanes, int d) {
    kf_kernel *k = g->k;
    kf_type t = T(s, lanes);
    kf_scalar other = s == KF_SCALAR_F32 ? KF_SCALAR_F16 : KF_SCALAR_F32;
    for (;;) {
        switch (rnd(26)) {
        case 0: { /* (a + b) / 2, sometimes vector + scalar */
            kf_val b = lanes > 1 && rnd(3) == 0 ? sub(g, s, 1, d) : sub(g, s, lanes, d);
            return scaled(g, s, lanes, kf_add(k, gen_expr(g, s, lanes, d), b), 0.5);
        }
        case 1:
            return scaled(g, s, lanes, kf_sub(k, gen_expr(g, s, lanes, d), sub(g, s, lanes, d)),
                          0.5);
        case 2: {
            kf_val b = lanes > 1 && rnd(3) == 0 ? sub(g, s, 1, d) : sub(g, s, lanes, d);
            return scaled(g, s, lanes, kf_mul(k, gen_expr(g, s, lanes, d), b), 0.25);
        }
        case 3: {
            kf_val den =
                kf_add(k, kf_call1(k, KF_FN_ABS, sub(g, s, lanes, d)), cst(g, s, lanes, 2));
            return kf_div(k, gen_expr(g, s, lanes, d), den);
        }
        case 4:
            return kf_unary(k, KF_OP_NEG, gen_expr(g, s, lanes, d));
        case 5:
            return kf_call1(k, KF_FN_ABS, gen_expr(g, s, lanes, d));
        case 6:
            return kf_call2(k, KF_FN_MIN, gen_expr(g, s, lanes, d), sub(g, s, lanes, d));
        case 7:
            return kf_call2(k, KF_FN_MAX, gen_expr(g, s, lanes, d), sub(g, s, lanes, d));
        case 8: {
            double c = kt_rand_f32(0.5f, 3.0f);
            return kf_call3(k, KF_FN_CLAMP, gen_expr(g, s, lanes, d), cst(g, s, lanes, -c),
                            cst(g, s, lanes, c));
        }
        case 9: {
            kf_val b = scaled(g, s, lanes, sub(g, s, lanes, d), 0.25);
            return scaled(g, s, lanes,
                          kf_call3(k, KF_FN_FMA, gen_expr(g, s, lanes, d), b, sub(g, s, lanes, d)),
                          0.5);
        }
        case 10: { /* select on a condition from inputs only */
            kf_val cond = leaf(g, KF_SCALAR_BOOL, rnd(2) ? lanes : 1);
            return kf_select(k, gen_expr(g, s, lanes, d), sub(g, s, lanes, d), cond);
        }
        case 11: {
            kf_val a = kf_call3(k, KF_FN_CLAMP, gen_expr(g, s, lanes, d), cst(g, s, lanes, -2),
                                cst(g, s, lanes, 2));
            return scaled(g, s, lanes, kf_call1(k, KF_FN_EXP, a), 0.5);
        }
        case 12:
            return kf_call1(
                k, KF_FN_LOG,
                kf_add(k, kf_call1(k, KF_FN_ABS, gen_expr(g, s, lanes, d)), cst(g, s, lanes, 1)));
        case 13:
            return kf_call1(k, KF_FN_TANH, gen_expr(g, s, lanes, d));
        case 14:
            return kf_call1(k, KF_FN_SQRT,
                            kf_add(k, kf_call1(k, KF_FN_ABS, gen_expr(g, s, lanes, d)),
                                   cst(g, s, lanes, 0.25)));
        case 15:
            return kf_call1(
                k, KF_FN_INVERSE_SQRT,
                kf_add(k, kf_call1(k, KF_FN_ABS, gen_expr(g, s, lanes, d)), cst(g, s, lanes, 1)));
        case 16:
            return kf_call1(k, KF_FN_SIN, gen_expr(g, s, lanes, d));
        case 17:
            return kf_call1(k, KF_FN_COS, gen_expr(g, s, lanes, d));
        case 18:
            return kf_call1(k, KF_FN_ERF, gen_expr(g, s, lanes, d));
        case 19: {
            kf_val base = kf_add(
                k, scaled(g, s, lanes, kf_call1(k, KF_FN_ABS, gen_expr(g, s, lanes, d)), 0.25),
                cst(g, s, lanes, 0.5));
            kf_val e = kf_call3(k, KF_FN_CLAMP, sub(g, s, lanes, d), cst(g, s, lanes, -1),
                                cst(g, s, lanes, 1));
            return kf_call2(k, KF_FN_POW, base, e);
        }
        case 20:
            return kf_call1(k, KF_FN_FLOOR, leaf(g, s, lanes));
        case 21: /* from the other float type: f16 trees take f32 trees; f32 trees take f16
                  * inputs only, since an f16 tree is only as close as f16 allows */
            if (!g->f16) {
                continue;
            }
            return kf_cast(
                k, t, s == KF_SCALAR_F16 ? gen_expr(g, other, lanes, d) : leaf(g, other, lanes));
        case 22: { /* from an integer tree, scaled into range in f32 first */
            kf_scalar is = rnd(2) ? KF_SCALAR_I32 : KF_SCALAR_U32;
            kf_val f = kf_cast(k, T(KF_SCALAR_F32, lanes), gen_expr(g, is, lanes, d));
            f = scaled(g, KF_SCALAR_F32, lanes, f, 1.0 / 1073741824.0);
            return kf_cast(k, t, f);
        }
        case 23: /* a lane of a vector tree */
            if (lanes > 1) {
                continue;
            }
            {
                uint32_t vl = 2 + rnd(3);
                return kf_extract(k, gen_expr(g, s, vl, d), rnd(vl));
            }
        case 24: /* dot, scaled */
            if (lanes > 1) {
                continue;
            }
            {
                uint32_t vl = 2 + rnd(3);
                kf_val dot = kf_call2(k, KF_FN_DOT, gen_expr(g, s, vl, d), sub(g, s, vl, d));
                return scaled(g, s, 1, dot, 0.25 / vl);
            }
        case 25: /* built from scalar trees */
            if (lanes == 1) {
                continue;
            }
            if (rnd(2)) {
                return kf_splat(k, t, gen_expr(g, s, 1, d));
            } else {
                kf_val parts[4];
                for (uint32_t i = 0; i < lanes; i++) {
                    parts[i] = sub(g, s, 1, d);
                }
                return kf_vec(k, t, parts, lanes);
            }
        }
    }
}

static kf_val gen_int(gen *g, kf_scalar s, uint32_t lanes, int d) {
    kf_kernel *k = g->k;
    kf_type t = T(s, lanes);
    for (;;) {
        uint32_t op = rnd(22);
        switch (op) {
        case 0:
        case 1:
        case 2:
        case 3:
        case 4: { /* + - * / %, sometimes vector with scalar */
            static const kf_op ops[] = {KF_OP_ADD, KF_OP_SUB, KF_OP_MUL, KF_OP_DIV, KF_OP_MOD};
            kf_val b = lanes > 1 && rnd(3) == 0 ? sub(g, s, 1, d) : sub(g, s, lanes, d);
            return kf_binary(k, ops[op], gen_expr(g, s, lanes, d), b);
        }
        case 5:
        case 6:
        case 7: {
            static const kf_op ops[] = {KF_OP_BIT_AND, KF_OP_BIT_OR, KF_OP_BIT_XOR};
            return kf_binary(k, ops[op - 5], gen_expr(g, s, lanes, d), sub(g, s, lanes, d));
        }
        case 8:
        case 9: /* shifts by any u32: WGSL masks the amount */
            return kf_binary(k, op == 8 ? KF_OP_SHL : KF_OP_SHR, gen_expr(g, s, lanes, d),
                             sub(g, KF_SCALAR_U32, lanes, d));
        case 10:
            return kf_unary(k, KF_OP_BIT_NOT, gen_expr(g, s, lanes, d));
        case 11:
            if (s != KF_SCALAR_I32) {
                continue;
            }
            return kf_unary(k, KF_OP_NEG, gen_expr(g, s, lanes, d));
        case 12:
            return kf_call1(k, KF_FN_ABS, gen_expr(g, s, lanes, d));
        case 13:
            return kf_call2(k, rnd(2) ? KF_FN_MIN : KF_FN_MAX, gen_expr(g, s, lanes, d),
                            sub(g, s, lanes, d));
        case 14: { /* clamp with lo <= hi (SPIR-V leaves lo > hi undefined) */
            kf_val b = sub(g, s, lanes, d), c = sub(g, s, lanes, d);
            return kf_call3(k, KF_FN_CLAMP, gen_expr(g, s, lanes, d), kf_call2(k, KF_FN_MIN, b, c),
                            kf_call2(k, KF_FN_MAX, b, c));
        }
        case 15: /* select on any integer comparison: exact, so safe at any depth */
            return kf_select(k, gen_expr(g, s, lanes, d), sub(g, s, lanes, d),
                             gen_expr(g, KF_SCALAR_BOOL, rnd(2) ? lanes : 1, d));
        case 16: /* i32 <-> u32 */
            return kf_cast(
                k, t, gen_expr(g, s == KF_SCALAR_I32 ? KF_SCALAR_U32 : KF_SCALAR_I32, lanes, d));
        case 17: { /* from a float input: truncation, saturating u32 at 0 */
            kf_scalar fs = g->f16 && rnd(2) ? KF_SCALAR_F16 : KF_SCALAR_F32;
            return kf_cast(k, t, scaled(g, fs, lanes, leaf(g, fs, lanes), 8));
        }
        case 18: { /* bitcasts */
            if (lanes == 1 && g->f16 && rnd(2)) {
                kf_val h[2] = {leaf(g, KF_SCALAR_F16, 1), leaf(g, KF_SCALAR_F16, 1)};
                return kf_bitcast(k, t, kf_vec(k, kf_type_vec(KF_SCALAR_F16, 2), h, 2));
            }
            if (rnd(2)) {
                return kf_bitcast(k, t, leaf(g, KF_SCALAR_F32, lanes));
            }
            return kf_bitcast(
                k, t, gen_expr(g, s == KF_SCALAR_I32 ? KF_SCALAR_U32 : KF_SCALAR_I32, lanes, d));
        }
        case 19:
            if (lanes > 1) {
                continue;
            }
            {
                uint32_t vl = 2 + rnd(3);
                return kf_extract(k, gen_expr(g, s, vl, d), rnd(vl));
            }
        case 20:
            if (lanes > 1) {
                continue;
            }
            {
                uint32_t vl = 2 + rnd(3);
                return kf_call2(k, KF_FN_DOT, gen_expr(g, s, vl, d), sub(g, s, vl, d));
            }
        case 21:
            if (lanes == 1) {
                continue;
            }
            {
                kf_val parts[4];
                for (uint32_t i = 0; i < lanes; i++) {
                    parts[i] = sub(g, s, 1, d);
                }
                return kf_vec(k, t, parts, lanes);
            }
        }
    }
}

static kf_val gen_bool(gen *g, uint32_t lanes, int d) {
    kf_kernel *k = g->k;
    kf_type t = T(KF_SCALAR_BOOL, lanes);
    for (;;) {
        uint32_t op = rnd(8);
        switch (op) {
        case 0:
        case 1:
            return kf_binary(k, op == 0 ? KF_OP_AND : KF_OP_OR,
                             gen_expr(g, KF_SCALAR_BOOL, lanes, d),
                             sub(g, KF_SCALAR_BOOL, lanes, d));
        case 2:
            return kf_unary(k, KF_OP_NOT, gen_expr(g, KF_SCALAR_BOOL, lanes, d));
        case 3:
            return kf_binary(k, rnd(2) ? KF_OP_EQ : KF_OP_NE, gen_expr(g, KF_SCALAR_BOOL, lanes, d),
                             sub(g, KF_SCALAR_BOOL, lanes, d));
        case 4:
        case 5: { /* integer comparisons, any depth */
            kf_scalar is = rnd(2) ? KF_SCALAR_I32 : KF_SCALAR_U32;
            return kf_binary(k, KF_OP_EQ + rnd(6), gen_expr(g, is, lanes, d), sub(g, is, lanes, d));
        }
        case 6:
            return kf_select(k, gen_expr(g, KF_SCALAR_BOOL, lanes, d),
                             sub(g, KF_SCALAR_BOOL, lanes, d),
                             gen_expr(g, KF_SCALAR_BOOL, rnd(2) ? lanes : 1, d));
        case 7:
            return kf_cast(k, t, gen_expr(g, rnd(2) ? KF_SCALAR_I32 : KF_SCALAR_U32, lanes, d));
        }
    }
}

static kf_val gen_expr(gen *g, kf_scalar s, uint32_t lanes, int depth) {
    g->nodes++;
    if (depth <= 0 || g->nodes > 400) {
        return leaf(g, s, lanes);
    }
    switch (s) {
    case KF_SCALAR_F32:
    case KF_SCALAR_F16:
        return gen_float(g, s, lanes, depth - 1);
    case KF_SCALAR_I32:
    case KF_SCALAR_U32:
        return gen_int(g, s, lanes, depth - 1);
    default:
        return gen_bool(g, lanes, depth - 1);
    }
}

/* Inputs per element: four f32 (the stage's In), four f16, four i32, four u32. */
static void fill_inputs(float *f, uint16_t *h, int32_t *i, uint32_t *u, uint32_t n) {
    for (uint32_t e = 0; e < 4 * n; e++) {
        f[e] = kt_rand_f32(-4.0f, 4.0f);
        h[e] = kf__half_from_float(kt_rand_f32(-4.0f, 4.0f));
        static const int32_t ispecial[] = {0, -1, 1, INT32_MIN, INT32_MAX, 3};
        static const uint32_t uspecial[] = {0, 1, 31, 32, 0xffffffffu, 0x80000000u};
        switch (kt_rand_u64() % 3) {
        case 0:
            i[e] = (int32_t)(kt_rand_u64() % 101) - 50;
            u[e] = (uint32_t)(kt_rand_u64() % 64);
            break;
        case 1:
            i[e] = (int32_t)(uint32_t)kt_rand_u64();
            u[e] = (uint32_t)kt_rand_u64();
            break;
        default:
            i[e] = ispecial[kt_rand_u64() % 6];
            u[e] = uspecial[kt_rand_u64() % 6];
            break;
        }
    }
}

typedef struct tree_case {
    kf_scalar scalar;
    uint32_t lanes;
} tree_case;

/* Builds one random kernel of result type s x lanes and compares GPU and interpreter. */
static bool run_tree(kf_context *ctx, bool f16, kf_scalar s, uint32_t lanes, int depth,
                     uint32_t index) {
    static const uint32_t wgs[] = {64, 128, 256};
    uint32_t wg[3] = {wgs[rnd(3)], 1, 1};
    kf_scalar out_s = s == KF_SCALAR_BOOL ? KF_SCALAR_U32 : s;
    kf_kernel_desc desc = {0};
    char name[64];
    char sname[8];
    snprintf(name, sizeof name, "tree_%s%u_%u", kf_type_str(kf_type_scalar(s), sname, sizeof sname),
             (unsigned)lanes, (unsigned)index);
    desc.name = name;
    memcpy(desc.workgroup_size, wg, sizeof wg);
    desc.input = kf_type_vec(KF_SCALAR_F32, 4);
    desc.output = T(out_s, lanes);
    kf_kernel *k = kf_kernel_create(&desc);
    gen g = {0};
    g.k = k;
    g.f16 = f16;
    kf_binding hb = f16 ? kf_kernel_storage(k, "h", kf_type_vec(KF_SCALAR_F16, 4), KF_ACCESS_READ)
                        : (kf_binding){0, 0};
    kf_binding ib = kf_kernel_storage(k, "i", kf_type_vec(KF_SCALAR_I32, 4), KF_ACCESS_READ);
    kf_binding ub = kf_kernel_storage(k, "u", kf_type_vec(KF_SCALAR_U32, 4), KF_ACCESS_READ);
    kf_val idx = kf_kernel_index(k);
    kf_val fv = kf_kernel_input(k);
    kf_val hv = f16 ? kf_load(k, hb, idx) : (kf_val){0, 0};
    kf_val iv = kf_load(k, ib, idx);
    kf_val uv = kf_load(k, ub, idx);
    for (uint32_t l = 0; l < 4; l++) {
        g.leaf[KF_SCALAR_F32][l] = kf_extract(k, fv, l);
        g.leaf[KF_SCALAR_F16][l] = f16 ? kf_extract(k, hv, l) : g.leaf[KF_SCALAR_F32][l];
        g.leaf[KF_SCALAR_I32][l] = kf_extract(k, iv, l);
        g.leaf[KF_SCALAR_U32][l] = kf_extract(k, uv, l);
    }
    kf_val r = gen_expr(&g, s, lanes, depth);
    if (s == KF_SCALAR_BOOL) {
        r = kf_cast(k, T(KF_SCALAR_U32, lanes), r);
    }
    kf_kernel_yield(k, r, idx);
    if (kf_kernel_status(k) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "building %s: %s", name, kf_kernel_error(k));
        kf_kernel_destroy(k);
        return false;
    }

    uint32_t n = N_ELEMS;
    float *f = malloc(n * 16);
    uint16_t *h = malloc(n * 8);
    int32_t *iw = malloc(n * 16);
    uint32_t *uw = malloc(n * 16);
    fill_inputs(f, h, iw, uw, n);
    uint32_t out_stride = (out_s == KF_SCALAR_F16 ? 2u : 4u) * (lanes == 3 ? 4u : lanes);
    uint64_t out_bytes = (uint64_t)n * out_stride;
    kf_host_buffer bufs[5];
    uint32_t nb = 0;
    bufs[nb++] = (kf_host_buffer){f, n * 16};
    if (f16) {
        bufs[nb++] = (kf_host_buffer){h, n * 8};
    }
    bufs[nb++] = (kf_host_buffer){iw, n * 16};
    bufs[nb++] = (kf_host_buffer){uw, n * 16};
    void *out = malloc(out_bytes);
    kt_fill_poison(out, out_bytes);
    bufs[nb++] = (kf_host_buffer){out, out_bytes};
    kf_host_buffer *cpu = kt_bufs_copy(bufs, nb);
    kt_launch l = {.elements = n};
    bool ok = kt_ir_gpu(ctx, k, bufs, nb, &l) && kt_ir_interp(k, cpu, nb, &l);
    if (ok) {
        char what[128];
        snprintf(what, sizeof what, "%s (depth %d): GPU vs interpreter", name, depth);
        uint64_t comps = out_bytes / (out_s == KF_SCALAR_F16 ? 2 : 4);
        /* vec3 has a padding lane per element, never written: compare the real lanes */
        if (out_s == KF_SCALAR_F32) {
            ok = kt_close_f32(out, cpu[nb - 1].data, comps, 2e-4, 1.0, what);
        } else if (out_s == KF_SCALAR_F16) {
            ok = kt_close_f16(out, cpu[nb - 1].data, comps, 2e-2, 1.0, what);
        } else {
            ok = kt_equal_u32(out, cpu[nb - 1].data, comps, what);
        }
        if (!ok) {
            char *w = kf_kernel_emit_wgsl(k);
            fprintf(stderr, "%s\n", w ? w : "");
            kf_free(w);
        }
    }
    kt_bufs_free(cpu, nb);
    free(out);
    free(f);
    free(h);
    free(iw);
    free(uw);
    kf_kernel_destroy(k);
    return ok;
}

static void trees_of(kf_scalar s) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    bool f16 = info.has_f16;
    if (s == KF_SCALAR_F16 && !f16) {
        printf("    note: f16 trees skipped: the device has no shader-f16\n");
        return;
    }
    uint32_t index = 0;
    for (uint32_t lanes = 1; lanes <= 4; lanes++) {
        for (int rep = 0; rep < 3; rep++) {
            int depth = rep == 0 ? 8 : 2 + (int)rnd(7);
            if (!run_tree(ctx, f16, s, lanes, depth, index++)) {
                return;
            }
        }
    }
}

KT_TEST(unit, ir_random_trees_f32) {
    trees_of(KF_SCALAR_F32);
}

KT_TEST(unit, ir_random_trees_f16) {
    trees_of(KF_SCALAR_F16);
}

KT_TEST(unit, ir_random_trees_i32) {
    trees_of(KF_SCALAR_I32);
}

KT_TEST(unit, ir_random_trees_u32) {
    trees_of(KF_SCALAR_U32);
}

KT_TEST(unit, ir_random_trees_bool) {
    trees_of(KF_SCALAR_BOOL);
}
