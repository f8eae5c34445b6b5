/* The CPU interpreter: WGSL's defined results (integer division by zero, INT_MIN / -1, masked
 * shifts, saturating float-to-int conversions, f16 rounding), workgroup memory and barriers,
 * loops with divergent break and continue, subgroups, uniforms, layouts; each against a C
 * reference and against the GPU. Then every way a run is refused, with the message naming the
 * binding and index. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir_internal.h"
#include "ir_testing.h"
#include "core/half.h"

static kf_type T(kf_scalar s) {
    return kf_type_scalar(s);
}

/* Runs k on the GPU and in the interpreter from the same buffers; the read_write ones must come
 * back bit-identical. bufs is left holding the interpreter's results. */
static bool gpu_equals_interp(kf_context *ctx, kf_kernel *k, kf_host_buffer *bufs, uint32_t n,
                              const kt_launch *l) {
    kf_host_buffer *gpu = kt_bufs_copy(bufs, n);
    bool ok = kt_ir_gpu(ctx, k, gpu, n, l) && kt_ir_interp(k, bufs, n, l);
    for (uint32_t i = 0; ok && i < n; i++) {
        kf_binding_info info;
        kf_kernel_binding_info(k, i, &info);
        if (info.kind == KF_BINDING_STORAGE_READ_WRITE) {
            char what[96];
            snprintf(what, sizeof what, "'%s' GPU vs interpreter", info.name);
            ok = kt_equal_u32(gpu[i].data, bufs[i].data, bufs[i].size / 4, what);
        }
    }
    kt_bufs_free(gpu, n);
    return ok;
}

/* ---- integer and conversion semantics ---- */

typedef struct int_case {
    kf_op op;
    int32_t a, b;
    int32_t want;
} int_case;

KT_TEST(unit, interp_integer_semantics_match_wgsl_and_gpu) {
    KT_NEED_GPU(ctx);
    static const int_case cases[] = {
        {KF_OP_DIV, 7, 0, 7},                  /* x / 0 = x */
        {KF_OP_MOD, 7, 0, 0},                  /* x % 0 = 0 */
        {KF_OP_DIV, INT32_MIN, -1, INT32_MIN}, /* overflow: x */
        {KF_OP_MOD, INT32_MIN, -1, 0},
        {KF_OP_DIV, -7, 2, -3}, /* truncation */
        {KF_OP_MOD, -7, 2, -1},
        {KF_OP_ADD, INT32_MAX, 1, INT32_MIN}, /* wrap */
        {KF_OP_MUL, 65536, 65536, 0},
        {KF_OP_SUB, INT32_MIN, 1, INT32_MAX},
        {KF_OP_SHL, 1, 33, 2},    /* shift amount masked to 5 bits */
        {KF_OP_SHR, -16, 34, -4}, /* arithmetic for i32 */
    };
    const uint32_t n = sizeof cases / sizeof cases[0];
    kf_kernel_desc d = {0};
    d.name = "ints";
    d.workgroup_size[0] = 16;
    kf_kernel *k = kf_kernel_create(&d);
    kf_binding in = kf_kernel_storage(k, "ab", kf_type_vec(KF_SCALAR_I32, 2), KF_ACCESS_READ);
    kf_binding out = kf_kernel_storage(k, "r", T(KF_SCALAR_I32), KF_ACCESS_READ_WRITE);
    kf_binding lits = kf_kernel_storage(k, "r_const", T(KF_SCALAR_I32), KF_ACCESS_READ_WRITE);
    kf_val i = kf_let(k, "i", kf_global_linear(k));
    for (uint32_t c = 0; c < n; c++) {
        /* from memory (run-time) and from literals (folded by kfuse, WGSL would refuse some) */
        kf_if(k, kf_binary(k, KF_OP_EQ, i, kf_lit_u32(k, c)));
        kf_val ab = kf_load(k, in, i);
        kf_val a = kf_extract(k, ab, 0), b = kf_extract(k, ab, 1);
        if (cases[c].op == KF_OP_SHL || cases[c].op == KF_OP_SHR) {
            b = kf_cast(k, T(KF_SCALAR_U32), b);
        }
        kf_store(k, out, i, kf_binary(k, cases[c].op, a, b));
        kf_val la = kf_lit_i32(k, cases[c].a);
        kf_val lb = cases[c].op == KF_OP_SHL || cases[c].op == KF_OP_SHR
                        ? kf_lit_u32(k, (uint32_t)cases[c].b)
                        : kf_lit_i32(k, cases[c].b);
        kf_store(k, lits, i, kf_binary(k, cases[c].op, la, lb));
        kf_end(k);
    }
    KT_CHECK(kf_kernel_status(k) == KF_OK, "%s", kf_kernel_error(k));
    int32_t ab[2 * 11], r[11], rc[11];
    for (uint32_t c = 0; c < n; c++) {
        ab[2 * c] = cases[c].a;
        ab[2 * c + 1] = cases[c].b;
    }
    kt_fill_poison(r, sizeof r);
    kt_fill_poison(rc, sizeof rc);
    kf_host_buffer bufs[3] = {{ab, sizeof ab}, {r, sizeof r}, {rc, sizeof rc}};
    kt_launch l = {.groups = {1, 1, 1}};
    bool ok = gpu_equals_interp(ctx, k, bufs, 3, &l);
    for (uint32_t c = 0; ok && c < n; c++) {
        ok = r[c] == cases[c].want && rc[c] == cases[c].want;
        if (!ok) {
            kt_fail(__FILE__, __LINE__, "%d %s %d = %d (constant: %d), WGSL says %d", cases[c].a,
                    kf__op_str(cases[c].op), cases[c].b, r[c], rc[c], cases[c].want);
        }
    }
    kf_kernel_destroy(k);
    KT_CHECK(ok, "integer semantics");
}

/* Float-to-int conversions saturate; f16 arithmetic rounds to half after every operation. */
KT_TEST(unit, interp_conversions_and_f16_rounding) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    static const float xs[] = {-3.7f, -0.5f, 0.0f, 2.9f, 3e9f, -3e9f, 1e20f, 123456.7f};
    const uint32_t n = 8;
    kf_kernel_desc d = {0};
    d.name = "conv";
    d.workgroup_size[0] = 8;
    kf_kernel *k = kf_kernel_create(&d);
    kf_binding x = kf_kernel_storage(k, "x", T(KF_SCALAR_F32), KF_ACCESS_READ);
    kf_binding oi = kf_kernel_storage(k, "as_i32", T(KF_SCALAR_I32), KF_ACCESS_READ_WRITE);
    kf_binding ou = kf_kernel_storage(k, "as_u32", T(KF_SCALAR_U32), KF_ACCESS_READ_WRITE);
    kf_binding oh = kf_kernel_storage(k, "thirds", kf_type_vec(KF_SCALAR_F16, 2),
                                      info.has_f16 ? KF_ACCESS_READ_WRITE : KF_ACCESS_READ);
    kf_val i = kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX);
    kf_val v = kf_load(k, x, i);
    kf_store(k, oi, i, kf_cast(k, T(KF_SCALAR_I32), v));
    kf_store(k, ou, i, kf_cast(k, T(KF_SCALAR_U32), v));
    if (info.has_f16) {
        /* (1/3 in f16) * 3 - 1 in f16 steps, and (x * 1/3) rounded once */
        kf_val third =
            kf_div(k, kf_lit_f16(k, 1),
                   kf_cast(k, T(KF_SCALAR_F16),
                           kf_add(k, kf_cast(k, T(KF_SCALAR_F32), i), kf_lit_f32(k, 3))));
        kf_val back = kf_sub(k, kf_mul(k, third, kf_lit_f16(k, 3)), kf_lit_f16(k, 1));
        kf_val pair[2] = {third, back};
        kf_store(k, oh, i, kf_vec(k, kf_type_vec(KF_SCALAR_F16, 2), pair, 2));
    }
    KT_CHECK(kf_kernel_status(k) == KF_OK, "%s", kf_kernel_error(k));
    float xv[8];
    memcpy(xv, xs, sizeof xv);
    int32_t ri[8];
    uint32_t ru[8];
    uint16_t rh[16];
    kt_fill_poison(ri, sizeof ri);
    kt_fill_poison(ru, sizeof ru);
    kt_fill_poison(rh, sizeof rh);
    kf_host_buffer bufs[4] = {{xv, sizeof xv}, {ri, sizeof ri}, {ru, sizeof ru}, {rh, sizeof rh}};
    kt_launch l = {.groups = {1, 1, 1}};
    bool ok = info.has_f16 ? gpu_equals_interp(ctx, k, bufs, 4, &l) : kt_ir_interp(k, bufs, 4, &l);
    static const int32_t want_i[] = {-3, 0, 0, 2, 2147483520, INT32_MIN, 2147483520, 123456};
    static const uint32_t want_u[] = {0, 0, 0, 2, 3000000000u, 0, 4294967040u, 123456};
    for (uint32_t c = 0; ok && c < n; c++) {
        ok = ri[c] == want_i[c] && ru[c] == want_u[c];
        KT_CHECK(ok, "i32(%g) = %d (want %d), u32(%g) = %u (want %u)", (double)xs[c], ri[c],
                 want_i[c], (double)xs[c], ru[c], want_u[c]);
    }
    for (uint32_t c = 0; ok && info.has_f16 && c < n; c++) {
        /* each step rounded to half, computed here the same way */
        float den = kf__half_to_float(kf__half_from_float((float)c + 3.0f));
        float third = kf__half_to_float(kf__half_from_float(1.0f / den));
        float prod = kf__half_to_float(kf__half_from_float(third * 3.0f));
        float back = kf__half_to_float(kf__half_from_float(prod - 1.0f));
        ok = rh[2 * c] == kf__half_from_float(third) && rh[2 * c + 1] == kf__half_from_float(back);
        KT_CHECK(ok, "f16 steps for %u: got %04x %04x, want %04x %04x", c, rh[2 * c], rh[2 * c + 1],
                 kf__half_from_float(third), kf__half_from_float(back));
    }
    kf_kernel_destroy(k);
    KT_CHECK(ok, "conversions");
}

/* ---- workgroup memory and barriers ---- */

/* Each workgroup reverses its slice of x through workgroup memory; the last one is partial. */
KT_TEST(unit, interp_workgroup_reversal_with_barrier) {
    KT_NEED_GPU(ctx);
    static const uint32_t counts[] = {1, 64, 100, 1000};
    for (int c = 0; c < 4; c++) {
        uint32_t n = counts[c], wg = 64, groups = (n + wg - 1) / wg;
        kf_kernel_desc d = {0};
        d.name = "reverse";
        d.workgroup_size[0] = wg;
        d.output = T(KF_SCALAR_F32);
        kf_kernel *k = kf_kernel_create(&d);
        kf_binding x = kf_kernel_storage(k, "x", T(KF_SCALAR_F32), KF_ACCESS_READ);
        kf_val n_v = kf_kernel_override(k, "n", T(KF_SCALAR_U32), 0);
        kf_shared tile = kf_kernel_workgroup(k, "tile", T(KF_SCALAR_F32), wg);
        kf_val li = kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX);
        kf_val base = kf_let(k, "base", kf_mul(k, kf_workgroup_linear(k), kf_lit_u32(k, wg)));
        kf_val gi = kf_let(k, "gi", kf_add(k, base, li));
        /* the slice this workgroup owns: min(wg, n - base) elements */
        kf_val len =
            kf_let(k, "len", kf_call2(k, KF_FN_MIN, kf_lit_u32(k, wg), kf_sub(k, n_v, base)));
        kf_if(k, kf_binary(k, KF_OP_LT, li, len));
        kf_shared_store(k, tile, li, kf_load(k, x, gi));
        kf_end(k);
        kf_barrier(k);
        kf_if(k, kf_binary(k, KF_OP_LT, li, len));
        kf_val j = kf_sub(k, kf_sub(k, len, kf_lit_u32(k, 1)), li);
        kf_kernel_yield(k, kf_shared_load(k, tile, j), gi);
        kf_end(k);
        KT_CHECK(kf_kernel_status(k) == KF_OK, "%s", kf_kernel_error(k));
        float *xv = malloc(n * 4), *out = malloc(n * 4);
        kt_fill_f32(xv, n, -5.0f, 5.0f);
        kt_fill_poison(out, n * 4);
        kf_host_buffer bufs[2] = {{xv, n * 4}, {out, n * 4}};
        kf_constant nc = {"n", n};
        kt_launch l = {.groups = {groups, 1, 1}, .constants = &nc, .constant_count = 1};
        bool ok = gpu_equals_interp(ctx, k, bufs, 2, &l);
        for (uint32_t i = 0; ok && i < n; i++) {
            uint32_t g = i / wg, part = n - g * wg < wg ? n - g * wg : wg;
            uint32_t src = g * wg + (part - 1 - i % wg);
            ok = out[i] == xv[src];
            KT_CHECK(ok, "n %u: out[%u] = %g, want x[%u] = %g", n, i, (double)out[i], src,
                     (double)xv[src]);
        }
        free(xv);
        free(out);
        kf_kernel_destroy(k);
        KT_CHECK(ok, "reversal of %u", n);
    }
}

/* Each workgroup of 64 transposes an 8 x 32 block through a vec4 workgroup array written one
 * lane at a time (kf_shared_store_lane with a per-invocation lane): out[c][r] = x[r][c]. */
KT_TEST(unit, interp_workgroup_lane_stores) {
    KT_NEED_GPU(ctx);
    const uint32_t rows = 8, cols = 32, wg = 64, groups = 3, n = groups * rows * cols;
    kf_kernel_desc d = {0};
    d.name = "lane_transpose";
    d.workgroup_size[0] = wg;
    d.output = T(KF_SCALAR_F32);
    kf_kernel *k = kf_kernel_create(&d);
    kf_binding x = kf_kernel_storage(k, "x", T(KF_SCALAR_F32), KF_ACCESS_READ);
    kf_type v4 = kf_type_vec(KF_SCALAR_F32, 4);
    kf_shared tile = kf_kernel_workgroup(k, "tile", v4, rows * cols / 4);
    kf_val li = kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX);
    kf_val base = kf_let(k, "base", kf_mul(k, kf_workgroup_linear(k), kf_lit_u32(k, rows * cols)));
    for (uint32_t pass = 0; pass < rows * cols / wg; pass++) {
        /* element e = (r, c) of the block goes to lane r % 4 of tile[c * 2 + r / 4] */
        kf_val e = kf_add(k, li, kf_lit_u32(k, pass * wg));
        kf_val r = kf_div(k, e, kf_lit_u32(k, cols));
        kf_val c = kf_binary(k, KF_OP_MOD, e, kf_lit_u32(k, cols));
        kf_val at =
            kf_add(k, kf_mul(k, c, kf_lit_u32(k, rows / 4)), kf_div(k, r, kf_lit_u32(k, 4)));
        kf_shared_store_lane(k, tile, at, kf_binary(k, KF_OP_MOD, r, kf_lit_u32(k, 4)),
                             kf_load(k, x, kf_add(k, base, e)));
    }
    kf_barrier(k);
    for (uint32_t pass = 0; pass < rows * cols / 4 / wg; pass++) {
        kf_val q = kf_add(k, li, kf_lit_u32(k, pass * wg));
        kf_val got = kf_shared_load(k, tile, q);
        for (uint32_t l = 0; l < 4; l++) {
            kf_kernel_yield(
                k, kf_extract(k, got, l),
                kf_add(k, base, kf_add(k, kf_mul(k, q, kf_lit_u32(k, 4)), kf_lit_u32(k, l))));
        }
    }
    KT_CHECK(kf_kernel_status(k) == KF_OK, "%s", kf_kernel_error(k));
    float *xv = malloc(n * 4), *out = malloc(n * 4);
    kt_fill_f32(xv, n, -5.0f, 5.0f);
    kt_fill_poison(out, n * 4);
    kf_host_buffer bufs[2] = {{xv, n * 4}, {out, n * 4}};
    kt_launch l = {.groups = {groups, 1, 1}};
    bool ok = gpu_equals_interp(ctx, k, bufs, 2, &l);
    for (uint32_t g = 0; ok && g < groups; g++) {
        for (uint32_t i = 0; ok && i < rows * cols; i++) {
            uint32_t c = i / rows, r = i % rows;
            ok = out[g * rows * cols + i] == xv[g * rows * cols + r * cols + c];
            KT_CHECK(ok, "group %u: out[%u] = %g, want x[%u][%u]", g, i,
                     (double)out[g * rows * cols + i], r, c);
        }
    }
    free(xv);
    free(out);
    kf_kernel_destroy(k);
}

/* ---- loops with divergent exits ---- */

/* Collatz steps (capped), with a while loop, break, continue and a for loop of varying length:
 * every invocation leaves at its own time. */
KT_TEST(unit, interp_divergent_loops) {
    KT_NEED_GPU(ctx);
    uint32_t n = 777;
    kf_kernel_desc d = {0};
    d.name = "collatz";
    d.input = T(KF_SCALAR_U32);
    d.output = kf_type_vec(KF_SCALAR_U32, 2);
    d.workgroup_size[0] = 64;
    kf_kernel *k = kf_kernel_create(&d);
    kf_type u = T(KF_SCALAR_U32);
    kf_var v = kf_declare(k, "v", u, kf_kernel_input(k));
    kf_var steps = kf_declare(k, "steps", u, kf_lit_u32(k, 0));
    kf_while(k);
    {
        kf_val cur = kf_read(k, v);
        kf_while_cond(k, kf_binary(k, KF_OP_GT, cur, kf_lit_u32(k, 1)));
        kf_val s = kf_read(k, steps);
        kf_if(k, kf_binary(k, KF_OP_GE, s, kf_lit_u32(k, 200)));
        kf_break(k);
        kf_end(k);
        kf_assign(k, steps, kf_add(k, s, kf_lit_u32(k, 1)));
        kf_if(k, kf_binary(k, KF_OP_EQ, kf_binary(k, KF_OP_BIT_AND, cur, kf_lit_u32(k, 1)),
                           kf_lit_u32(k, 0)));
        kf_assign(k, v, kf_binary(k, KF_OP_SHR, cur, kf_lit_u32(k, 1)));
        kf_continue(k);
        kf_end(k);
        kf_assign(k, v, kf_add(k, kf_mul(k, cur, kf_lit_u32(k, 3)), kf_lit_u32(k, 1)));
    }
    kf_end(k);
    /* sum of odd i below (x % 37), skipping multiples of 5, stopping past 300 */
    kf_var sum = kf_declare(k, "sum", u, kf_lit_u32(k, 0));
    kf_val end = kf_binary(k, KF_OP_MOD, kf_kernel_input(k), kf_lit_u32(k, 37));
    kf_val i = kf_for(k, "i", kf_lit_u32(k, 1), end, kf_lit_u32(k, 2));
    {
        kf_if(k, kf_binary(k, KF_OP_EQ, kf_binary(k, KF_OP_MOD, i, kf_lit_u32(k, 5)),
                           kf_lit_u32(k, 0)));
        kf_continue(k);
        kf_end(k);
        kf_val total = kf_add(k, kf_read(k, sum), i);
        kf_assign(k, sum, total);
        kf_if(k, kf_binary(k, KF_OP_GT, total, kf_lit_u32(k, 300)));
        kf_break(k);
        kf_end(k);
    }
    kf_end(k);
    kf_val pair[2] = {kf_read(k, steps), kf_read(k, sum)};
    kf_kernel_yield(k, kf_vec(k, kf_type_vec(KF_SCALAR_U32, 2), pair, 2), kf_kernel_index(k));
    KT_CHECK(kf_kernel_status(k) == KF_OK, "%s", kf_kernel_error(k));
    uint32_t *x = malloc(n * 4), *out = malloc(n * 8);
    for (uint32_t e = 0; e < n; e++) {
        x[e] = (uint32_t)(kt_rand_u64() % 100000) + 1;
    }
    kt_fill_poison(out, n * 8);
    kf_host_buffer bufs[2] = {{x, n * 4}, {out, n * 8}};
    kt_launch l = {.elements = n};
    bool ok = gpu_equals_interp(ctx, k, bufs, 2, &l);
    for (uint32_t e = 0; ok && e < n; e++) {
        uint32_t c = x[e], s = 0;
        while (c > 1 && s < 200) {
            s++;
            c = (c & 1) ? 3 * c + 1 : c >> 1;
        }
        uint32_t total = 0;
        for (uint32_t j = 1; j < x[e] % 37; j += 2) {
            if (j % 5 == 0) {
                continue;
            }
            total += j;
            if (total > 300) {
                break;
            }
        }
        ok = out[2 * e] == s && out[2 * e + 1] == total;
        KT_CHECK(ok, "x = %u: steps %u (want %u), sum %u (want %u)", x[e], out[2 * e], s,
                 out[2 * e + 1], total);
    }
    free(x);
    free(out);
    kf_kernel_destroy(k);
}

/* ---- subgroups ---- */

static kf_kernel *subgroup_kernel(uint32_t wg) {
    kf_kernel_desc d = {0};
    d.name = "subgroups";
    d.workgroup_size[0] = wg;
    kf_kernel *k = kf_kernel_create(&d);
    kf_type f = T(KF_SCALAR_F32);
    kf_binding x = kf_kernel_storage(k, "x", f, KF_ACCESS_READ);
    kf_binding out =
        kf_kernel_storage(k, "out", kf_type_vec(KF_SCALAR_F32, 4), KF_ACCESS_READ_WRITE);
    kf_val gi = kf_let(k, "gi", kf_global_linear(k));
    kf_val v = kf_load(k, x, gi);
    kf_val lane = kf_builtin_get(k, KF_BUILTIN_SUBGROUP_INVOCATION_ID);
    kf_val size = kf_builtin_get(k, KF_BUILTIN_SUBGROUP_SIZE);
    kf_val none = {0, 0};
    kf_val sum = kf_subgroup(k, KF_SUBGROUP_ADD, v, none);
    kf_val mx = kf_subgroup(k, KF_SUBGROUP_MAX, v, none);
    /* the next lane's value, wrapping inside the subgroup */
    kf_val next = kf_binary(k, KF_OP_MOD, kf_add(k, lane, kf_lit_u32(k, 1)), size);
    kf_val shuffled = kf_subgroup(k, KF_SUBGROUP_SHUFFLE, v, next);
    kf_val first = kf_subgroup(k, KF_SUBGROUP_BROADCAST, v, kf_lit_u32(k, 0));
    kf_val all[4] = {sum, mx, shuffled, first};
    kf_store(k, out, gi, kf_vec(k, kf_type_vec(KF_SCALAR_F32, 4), all, 4));
    return k;
}

static bool check_subgroups(const float *x, const float *out, uint32_t n, uint32_t sg) {
    for (uint32_t i = 0; i < n; i++) {
        uint32_t g0 = i / sg * sg;
        double sum = 0;
        float mx = -INFINITY;
        for (uint32_t j = g0; j < g0 + sg; j++) {
            sum += x[j];
            mx = x[j] > mx ? x[j] : mx;
        }
        float nxt = x[g0 + (i - g0 + 1) % sg], first = x[g0];
        const float *o = out + 4 * i;
        if (fabs(o[0] - sum) > 1e-5 * sg || o[1] != mx || o[2] != nxt || o[3] != first) {
            kt_fail(__FILE__, __LINE__,
                    "subgroup size %u, invocation %u: add %g (want %g), max %g (%g), shuffle %g "
                    "(%g), broadcast %g (%g)",
                    sg, i, (double)o[0], sum, (double)o[1], (double)mx, (double)o[2], (double)nxt,
                    (double)o[3], (double)first);
            return false;
        }
    }
    return true;
}

KT_TEST(unit, interp_subgroup_operations) {
    uint32_t wg = 64, groups = 3, n = wg * groups;
    float *x = malloc(n * 4), *out = malloc(n * 16);
    kt_fill_f32(x, n, -1.0f, 1.0f);
    kf_kernel *k = subgroup_kernel(wg);
    KT_CHECK(kf_kernel_status(k) == KF_OK, "%s", kf_kernel_error(k));
    bool ok = true;
    /* the interpreter at several stated sizes */
    static const uint32_t sizes[] = {4, 8, 32, 64};
    for (int s = 0; s < 4 && ok; s++) {
        kt_fill_poison(out, n * 16);
        kf_host_buffer bufs[2] = {{x, n * 4}, {out, n * 16}};
        kt_launch l = {.groups = {groups, 1, 1}, .subgroup_size = sizes[s]};
        ok = kt_ir_interp(k, bufs, 2, &l) && check_subgroups(x, out, n, sizes[s]);
    }
    /* the GPU, where it has subgroups of one size */
    kf_context *ctx = kt_context();
    kf_adapter_info info;
    if (ok && ctx && kf_context_adapter_info(ctx, &info) == KF_OK && info.has_subgroups) {
        if (info.subgroup_min_size == info.subgroup_max_size) {
            kt_fill_poison(out, n * 16);
            kf_host_buffer bufs[2] = {{x, n * 4}, {out, n * 16}};
            kt_launch l = {.groups = {groups, 1, 1}, .subgroup_size = info.subgroup_min_size};
            float *cpu = malloc(n * 16);
            kt_fill_poison(cpu, n * 16);
            kf_host_buffer cb[2] = {{x, n * 4}, {cpu, n * 16}};
            ok = kt_ir_gpu(ctx, k, bufs, 2, &l) &&
                 check_subgroups(x, out, n, info.subgroup_min_size) && kt_ir_interp(k, cb, 2, &l) &&
                 kt_close_f32(out, cpu, n * 4, 1e-6, 1.0, "subgroups: GPU vs interpreter");
            free(cpu);
        } else {
            printf("    note: GPU subgroup size varies (%u..%u): checked in the interpreter only\n",
                   info.subgroup_min_size, info.subgroup_max_size);
        }
    } else if (ok) {
        printf("    note: no GPU subgroups: checked in the interpreter only\n");
    }
    free(x);
    free(out);
    kf_kernel_destroy(k);
    KT_CHECK(ok, "subgroups");
}

/* ---- uniforms, layouts, lengths ---- */

KT_TEST(unit, interp_uniforms_layouts_and_lengths) {
    KT_NEED_GPU(ctx);
    kf_kernel_desc d = {0};
    d.name = "layouts";
    d.workgroup_size[0] = 32;
    kf_kernel *k = kf_kernel_create(&d);
    kf_type v3 = kf_type_vec(KF_SCALAR_F32, 3), v4 = kf_type_vec(KF_SCALAR_F32, 4);
    kf_binding p = kf_kernel_uniform(k, "params", v4);
    kf_binding table = kf_kernel_uniform(k, "table", kf_type_array(v4, 4));
    kf_binding xs = kf_kernel_storage(k, "xs", v3, KF_ACCESS_READ);
    kf_binding out = kf_kernel_storage(k, "out", v3, KF_ACCESS_READ_WRITE);
    kf_binding lens = kf_kernel_storage(k, "lens", T(KF_SCALAR_U32), KF_ACCESS_READ_WRITE);
    kf_val none = {0, 0};
    kf_val i = kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX);
    kf_val prm = kf_load(k, p, none);
    kf_val row = kf_load(k, table, kf_binary(k, KF_OP_MOD, i, kf_lit_u32(k, 4)));
    kf_val lanes[3] = {kf_extract(k, row, 0), kf_extract(k, row, 1), kf_extract(k, prm, 3)};
    kf_val add = kf_vec(k, v3, lanes, 3);
    kf_if(k, kf_binary(k, KF_OP_LT, i, kf_binding_length(k, xs)));
    kf_store(k, out, i, kf_add(k, kf_mul(k, kf_load(k, xs, i), kf_extract(k, prm, 0)), add));
    kf_end(k);
    kf_if(k, kf_binary(k, KF_OP_EQ, i, kf_lit_u32(k, 0)));
    kf_store(k, lens, kf_lit_u32(k, 0), kf_binding_length(k, xs));
    kf_store(k, lens, kf_lit_u32(k, 1), kf_binding_length(k, out));
    kf_end(k);
    KT_CHECK(kf_kernel_status(k) == KF_OK, "%s", kf_kernel_error(k));
    const uint32_t n = 21; /* vec3<f32> has a stride of 16 bytes */
    float prm_v[4] = {2.0f, 0, 0, 0.5f}, tab[16], xv[4 * 21], ov[4 * 21];
    uint32_t lv[2];
    kt_fill_f32(tab, 16, -1.0f, 1.0f);
    kt_fill_f32(xv, 4 * n, -1.0f, 1.0f);
    kt_fill_poison(ov, sizeof ov);
    kt_fill_poison(lv, sizeof lv);
    kf_host_buffer bufs[5] = {{prm_v, 16}, {tab, 64}, {xv, n * 16}, {ov, n * 16}, {lv, 8}};
    kt_launch l = {.groups = {1, 1, 1}};
    kf_host_buffer *gpu = kt_bufs_copy(bufs, 5);
    bool ok = kt_ir_interp(k, bufs, 5, &l) && kt_ir_gpu(ctx, k, gpu, 5, &l);
    for (uint32_t e = 0; ok && e < n; e++) {
        const float *row_v = tab + 4 * (e % 4);
        float want[3] = {xv[4 * e] * 2.0f + row_v[0], xv[4 * e + 1] * 2.0f + row_v[1],
                         xv[4 * e + 2] * 2.0f + 0.5f};
        const float *g = (const float *)gpu[3].data + 4 * e;
        for (uint32_t c = 0; c < 3; c++) {
            ok = ok && ov[4 * e + c] == want[c] && g[c] == want[c];
        }
        KT_CHECK(ok, "element %u: (%g %g %g), GPU (%g %g %g), want (%g %g %g)", e,
                 (double)ov[4 * e], (double)ov[4 * e + 1], (double)ov[4 * e + 2], (double)g[0],
                 (double)g[1], (double)g[2], (double)want[0], (double)want[1], (double)want[2]);
    }
    /* arrayLength: the interpreter sees the host size; the GPU the buffer's (plus guards) */
    KT_CHECK(!ok || (lv[0] == n && lv[1] == n), "lengths %u %u, want %u", lv[0], lv[1], n);
    kt_bufs_free(gpu, 5);
    kf_kernel_destroy(k);
}

/* ---- refusals ---- */

static bool refused(kf_kernel *k, kf_host_buffer *bufs, uint32_t n, const kt_launch *l,
                    const char *f1, const char *f2, int line) {
    kf_interp_desc d = {0};
    d.buffers = bufs;
    d.buffer_count = n;
    memcpy(d.groups, l->groups, sizeof d.groups);
    d.elements = l->elements;
    d.constants = l->constants;
    d.constant_count = l->constant_count;
    d.subgroup_size = l->subgroup_size;
    kf_status st = kf_kernel_interpret(k, &d);
    const char *msg = kf_kernel_error(k);
    if (st != KF_ERROR_INVALID_ARGUMENT || !strstr(msg, f1) || (f2 && !strstr(msg, f2))) {
        kt_fail(__FILE__, line, "expected a refusal with '%s'%s%s, got %s: %s", f1,
                f2 ? " and " : "", f2 ? f2 : "", kf_status_str(st), msg);
        return false;
    }
    /* a refused run leaves the kernel usable */
    if (kf_kernel_status(k) != KF_OK) {
        kt_fail(__FILE__, line, "a refused run made the kernel invalid");
        return false;
    }
    return true;
}

#define REFUSED(k, bufs, n, l, f1, f2)                                                             \
    KT_CHECK(refused((k), (bufs), (n), (l), (f1), (f2), __LINE__), "refusal")

KT_CPU_TEST(unit, interp_refusals) {
    /* out of bounds: the GPU would clamp or drop it; the interpreter names it */
    kf_kernel_desc d = {0};
    d.name = "oob";
    d.workgroup_size[0] = 8;
    kf_kernel *k = kf_kernel_create(&d);
    kf_binding x = kf_kernel_storage(k, "x", T(KF_SCALAR_F32), KF_ACCESS_READ);
    kf_binding y = kf_kernel_storage(k, "y", T(KF_SCALAR_F32), KF_ACCESS_READ_WRITE);
    kf_val i = kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX);
    kf_store(k, y, i, kf_load(k, x, kf_add(k, i, kf_lit_u32(k, 2))));
    float xv[8], yv[8];
    kt_fill_f32(xv, 8, 0, 1);
    kf_host_buffer bufs[2] = {{xv, sizeof xv}, {yv, sizeof yv}};
    kt_launch l = {.groups = {1, 1, 1}};
    REFUSED(k, bufs, 2, &l, "load from 'x' at index 8 is out of bounds", "8 elements of f32");
    kf_host_buffer small[2] = {{xv, sizeof xv + 0}, {yv, 4 * 7}};
    kf_host_buffer big_x[2] = {{xv, sizeof xv}, {yv, sizeof yv}};
    (void)big_x;
    kf_kernel *k2 = kf_kernel_clone(k);
    kf_kernel_destroy(k);
    k = k2;
    /* x of 10 elements, y of 7: the store to y[7] is refused */
    float x10[10];
    kt_fill_f32(x10, 10, 0, 1);
    small[0] = (kf_host_buffer){x10, sizeof x10};
    REFUSED(k, small, 2, &l, "store to 'y' at index 7 is out of bounds", "7 elements");
    REFUSED(k, small, 1, &l, "the kernel has 2 bindings, 1 buffers given", NULL);
    kf_constant bogus = {"bogus", 1};
    kt_launch lc = {.groups = {1, 1, 1}, .constants = &bogus, .constant_count = 1};
    REFUSED(k, small, 2, &lc, "constant 'bogus' is not an override", NULL);
    kt_launch ls = {.groups = {1, 1, 1}, .subgroup_size = 6};
    REFUSED(k, small, 2, &ls, "subgroup size 6", NULL);
    kf_kernel_destroy(k);

    /* a barrier some invocations skip */
    d.name = "divergent";
    k = kf_kernel_create(&d);
    kf_if(k, kf_binary(k, KF_OP_LT, kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX), kf_lit_u32(k, 4)));
    kf_barrier(k);
    kf_end(k);
    REFUSED(k, NULL, 0, &l, "workgroupBarrier reached by only some invocations", NULL);
    kf_kernel_destroy(k);

    /* a loop without exit */
    d.name = "forever";
    k = kf_kernel_create(&d);
    kf_while(k);
    kf_end(k);
    REFUSED(k, NULL, 0, &l, "a loop ran more than", "exit condition");
    kf_kernel_destroy(k);

    /* a shuffle from an invocation that is not there */
    d.name = "shuffle";
    k = kf_kernel_create(&d);
    kf_val li = kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX);
    kf_if(k, kf_binary(k, KF_OP_LT, li, kf_lit_u32(k, 4)));
    kf_subgroup(k, KF_SUBGROUP_SHUFFLE, kf_lit_f32(k, 1), kf_lit_u32(k, 6));
    kf_end(k);
    kt_launch l8 = {.groups = {1, 1, 1}, .subgroup_size = 8};
    REFUSED(k, NULL, 0, &l8, "subgroupShuffle", "lane 6, which is not active");
    kf_kernel_destroy(k);

    /* an override without default needs a constant */
    d.name = "needs";
    k = kf_kernel_create(&d);
    kf_val n = kf_kernel_override(k, "n", T(KF_SCALAR_U32), 3);
    kf_let(k, "m", kf_add(k, n, kf_lit_u32(k, 1)));
    kf_status st = kf_kernel_interpret(k, NULL);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT && strstr(kf_kernel_error(k), "desc"), "NULL desc: %s",
             kf_kernel_error(k));
    kf_kernel_destroy(k);
    KT_CHECK(kf_kernel_interpret(NULL, NULL) == KF_ERROR_INVALID_ARGUMENT, "NULL kernel");
}

/* Expressions of overrides alone are evaluated when the pipeline is created, where n - 1u with
 * n = 0 is an error; kfuse reads them through lets so they keep their run-time meaning. */
KT_TEST(unit, interp_override_expressions_keep_runtime_meaning) {
    KT_NEED_GPU(ctx);
    kf_kernel_desc d = {0};
    d.name = "overrides";
    d.workgroup_size[0] = 1;
    kf_kernel *k = kf_kernel_create(&d);
    kf_val n = kf_kernel_override(k, "n", T(KF_SCALAR_U32), 5);
    kf_val m = kf_kernel_override(k, "m", T(KF_SCALAR_I32), 7);
    kf_val s = kf_kernel_override(k, "s", T(KF_SCALAR_F32), 1.5);
    kf_binding out = kf_kernel_storage(k, "out", T(KF_SCALAR_U32), KF_ACCESS_READ_WRITE);
    kf_store(k, out, kf_lit_u32(k, 0), kf_sub(k, n, kf_lit_u32(k, 1)));
    kf_store(k, out, kf_lit_u32(k, 1), kf_bitcast(k, T(KF_SCALAR_U32), kf_mul(k, m, m)));
    kf_store(k, out, kf_lit_u32(k, 2), kf_div(k, kf_lit_u32(k, 10), n));
    kf_store(k, out, kf_lit_u32(k, 3), kf_bitcast(k, T(KF_SCALAR_U32), kf_mul(k, s, s)));
    KT_CHECK(kf_kernel_status(k) == KF_OK, "%s", kf_kernel_error(k));
    kf_constant c[3] = {{"n", 0}, {"m", 65536}, {"s", 3.0}};
    uint32_t r[4];
    kt_fill_poison(r, sizeof r);
    kf_host_buffer bufs[1] = {{r, sizeof r}};
    kt_launch l = {.groups = {1, 1, 1}, .constants = c, .constant_count = 3};
    bool ok = gpu_equals_interp(ctx, k, bufs, 1, &l);
    float nine = 9.0f;
    uint32_t nine_bits;
    memcpy(&nine_bits, &nine, 4);
    KT_CHECK(!ok || (r[0] == 0xffffffffu && r[1] == 0 && r[2] == 10 && r[3] == nine_bits),
             "n - 1 = %u, m * m = %u, 10 / n = %u, s * s = 0x%08x", r[0], r[1], r[2], r[3]);
    kf_kernel_destroy(k);
}
