/* The subgroup-matrix matmul: every configuration (each way of staging the tiles included) on
 * aligned and ragged shapes in the interpreter against a float64 product of the f16-rounded
 * inputs, with and without transposed operands, outputs poisoned and a guard band checked; its
 * WGSL; the fused tail; and the same on the GPU where the device has subgroup matrices. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/matmul_sgmat.h"
#include "core/half.h"

static const kf__sgmat_config configs[] = {
    {32, 32, 16, 2, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}, /* one matrix per subgroup, single-buffered */
    {64, 64, 32, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0}, /* the small default */
    {64, 128, 32, 1, 4, 1, 2, 0, 0, 0, 0, 0, 0, 0,
     0}, /* 4x2 matrices per subgroup, grouped tile order */
    {128, 64, 64, 4, 1, 1, 3, 0, 0, 0, 0, 0, 0, 0,
     0}, /* 2x4 matrices per subgroup; a row of them per round */
    {128, 128, 32, 2, 4, 2, 8, 0, 0, 0, 0, 0, 0, 0,
     0}, /* double-buffered; one matrix per store round */
    {128, 256, 32, 2, 4, 1, 8, 0, 0, 0, 0, 0, 0, 0,
     0}, /* the large tile, two matrices per store round */
    {32, 32, 16, 2, 2, 2, 0, 3, 0, 0, 0, 0, 0, 0,
     0}, /* a and b read directly where the shape allows */
    {64, 64, 32, 2, 2, 1, 2, 1, 0, 0, 0, 0, 0, 0, 0}, /* a read directly, b staged */
    {64, 64, 32, 2, 2, 2, 0, 2, 0, 0, 0, 0, 0, 0, 0}, /* b read directly, a staged */
    /* staging 1: rows and store order against bank conflicts */
    {64, 64, 32, 2, 2, 2, 0, 0, 1, 0, 0, 0, 0, 0, 0}, /* double-buffered */
    {128, 256, 32, 2, 4, 1, 8, 0, 1, 0, 0, 0, 0, 0,
     0}, /* the large tile: rows permuted in a, stores swapped */
    {64, 128, 16, 1, 4, 2, 2, 0, 1, 0, 0, 0, 0, 0, 0}, /* 16 deep */
    /* staging 2: 16x16 blocks copied by subgroup matrices where the shape is whole */
    {64, 64, 32, 2, 2, 2, 0, 0, 2, 0, 0, 0, 0, 0, 0},  /* double-buffered */
    {128, 64, 64, 4, 1, 1, 3, 0, 2, 0, 0, 0, 0, 0, 0}, /* a's 8 blocks over 4 subgroups, b's 16 */
    {32, 32, 16, 2, 2, 1, 0, 1, 2, 0, 0, 0, 0, 0, 0},  /* b copied by matrices, a read directly */
    /* staging 3: lane order, rows chosen against conflicts of 8-byte stores */
    {128, 256, 32, 2, 4, 1, 8, 0, 3, 0, 0, 0, 0, 0, 0},
    /* scratch: result matrices per subgroup per store round */
    {128, 256, 32, 2, 4, 1, 8, 0, 0, 1, 0, 0, 0, 0, 0}, /* one of four (the large default) */
    {64, 128, 32, 1, 4, 1, 2, 0, 1, 2, 0, 0, 0, 0, 0},  /* the whole row of two */
    {128, 64, 64, 4, 1, 1, 3, 0, 2, 2, 0, 0, 0, 0, 0},  /* two of four */
    /* layout 1: a's tile k-major, 4x4 blocks of a stored transposed */
    {128, 256, 32, 2, 4, 1, 8, 0, 0, 0, 0, 1, 0, 0, 0}, /* the large tile */
    {64, 64, 32, 2, 2, 2, 0, 0, 3, 0, 0, 1, 0, 0, 0},   /* double-buffered, b's rows by staging 3 */
    {64, 128, 64, 2, 2, 1, 2, 0, 2, 0, 0, 1, 0, 0,
     0}, /* 8 blocks an invocation; b copied by matrices */
    {32, 32, 16, 2, 2, 1, 0, 0, 0, 0, 0, 1, 0, 0,
     0}, /* one vec4 of a an invocation: a stays row-major */
    /* order 1: the registers a step ahead of the two stages */
    {64, 64, 32, 2, 2, 2, 0, 0, 0, 0, 0, 1, 1, 0, 0},  /* with a k-major */
    {64, 128, 16, 1, 4, 2, 2, 0, 1, 0, 0, 0, 1, 0, 0}, /* 16 deep, staging 1 */
    /* vector 1: 16-byte fetches where the tiles are whole (else 8) */
    {128, 256, 32, 2, 4, 1, 8, 0, 0, 0, 0, 0, 0, 1, 0}, /* the large tile */
    {64, 64, 32, 2, 2, 2, 0, 0, 0, 0, 0, 1, 1, 1, 0},   /* b only (a k-major), registers ahead */
    /* straight 1: no branch around the staging */
    {128, 256, 32, 2, 8, 1, 8, 0, 0, 0, 0, 0, 0, 0, 1}, /* one stage, 16 subgroups */
    {64, 64, 32, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 1},   /* two stages */
    {64, 128, 16, 1, 4, 2, 2, 0, 0, 0, 0, 0, 1, 1, 1},  /* two stages, registers ahead */
    /* order 2: one stage, two sets of registers two steps ahead */
    {64, 64, 32, 2, 2, 1, 0, 0, 0, 0, 0, 0, 2, 0, 0},   /* small */
    {128, 256, 32, 2, 8, 1, 8, 0, 0, 0, 0, 0, 2, 1, 0}, /* 16 subgroups, 16-byte fetches */
    {64, 64, 16, 2, 2, 1, 0, 0, 3, 0, 0, 1, 2, 0, 0},   /* a k-major, b's rows by staging 3 */
};

static const uint32_t shapes[][3] = {
    {1, 1, 1},   {7, 13, 5},   {16, 16, 16},  {33, 17, 31},   {65, 33, 17},   {130, 70, 36},
    {5, 7, 129}, {64, 64, 64}, {200, 48, 40}, {128, 96, 192}, {128, 64, 256},
};
/* transposed operands: a few of the shapes above, on a few configurations */
static const uint32_t transposed_shapes[][3] = {
    {1, 1, 1}, {17, 15, 33}, {64, 64, 64}, {61, 97, 67}, {96, 32, 64},
};
static const size_t transposed_configs[] = {0, 4, 9, 10, 12, 14};

/* An element-wise tail on f16: x * sigmoid(x) computed in f32. */
static kf_val silu_f16(kf_kernel *k, kf_val x, void *user) {
    (void)user;
    kf_val f = kf_cast(k, kf_type_scalar(KF_SCALAR_F32), x);
    kf_val one = kf_lit_f32(k, 1.0f);
    kf_val y = kf_div(k, f, kf_add(k, one, kf_call1(k, KF_FN_EXP, kf_unary(k, KF_OP_NEG, f))));
    return kf_cast(k, kf_type_scalar(KF_SCALAR_F16), y);
}

enum { GUARD = 64 };
static const uint16_t POISON = 0x7e00u; /* an f16 NaN */

/* Runs c = a * b (optionally |> silu) on the GPU (ctx) or in the interpreter (ctx NULL) and
 * checks every element against float64 and the guard band. */
static bool run_case_t(kf_context *ctx, uint32_t sg, uint32_t m, uint32_t kd, uint32_t n,
                       const kf__sgmat_config *cfg, bool tail, bool ta, bool tb) {
    kf_kernel *mm = kf__matmul_sgmat_transposed(m, kd, n, cfg, sg, NULL, ta, tb);
    if (!mm) {
        kt_fail(__FILE__, __LINE__, "no kernel for %ux%ux%u%s%s", m, kd, n, ta ? " a^T" : "",
                tb ? " b^T" : "");
        return false;
    }
    kf_kernel *k = mm;
    if (tail) {
        uint32_t wg[3];
        kf_kernel_workgroup_size(mm, wg);
        kf_type h = kf_type_scalar(KF_SCALAR_F16);
        kf_kernel *t = kf_kernel_map("silu", h, h, wg, silu_f16, NULL);
        k = kf_kernel_then(mm, t);
        kf_kernel_destroy(t);
    }
    bool ok = kf_kernel_status(k) == KF_OK;
    if (!ok) {
        kt_fail(__FILE__, __LINE__, "kernel: %s", kf_kernel_error(k));
    }
    uint16_t *a = malloc(2ull * m * kd), *b = malloc(2ull * kd * n);
    uint16_t *c = malloc(2ull * (m * n + GUARD));
    double *fa = malloc(sizeof(double) * m * kd), *fb = malloc(sizeof(double) * kd * n);
    for (uint32_t i = 0; i < m * kd; i++) {
        a[i] = kf__half_from_float(kt_rand_f32(-1.0f, 1.0f));
        fa[i] = kf__half_to_float(a[i]);
    }
    for (uint32_t i = 0; i < kd * n; i++) {
        b[i] = kf__half_from_float(kt_rand_f32(-1.0f, 1.0f));
        fb[i] = kf__half_to_float(b[i]);
    }
    for (uint32_t i = 0; i < m * n + GUARD; i++) {
        c[i] = POISON;
    }
    const char *where = ctx ? "GPU" : "interpreter";
    if (ok && ctx) {
        kf_buffer *bufs[3] = {0};
        ok = kf_buffer_create(ctx, 2ull * m * kd, &bufs[0]) == KF_OK &&
             kf_buffer_create(ctx, 2ull * kd * n, &bufs[1]) == KF_OK &&
             kf_buffer_create(ctx, 2ull * (m * n + GUARD), &bufs[2]) == KF_OK &&
             kf_buffer_upload(bufs[0], 0, a, 2ull * m * kd) == KF_OK &&
             kf_buffer_upload(bufs[1], 0, b, 2ull * kd * n) == KF_OK &&
             kf_buffer_fill_u32(bufs[2], 0x7e007e00u) == KF_OK;
        kf_kernel_launch launch = {.buffers = bufs, .buffer_count = 3};
        if (ok && kf_kernel_run(ctx, k, &launch) != KF_OK) {
            kt_fail(__FILE__, __LINE__, "run %ux%ux%u: %s / %s", m, kd, n,
                    kf_context_last_error(ctx), kf_kernel_error(k));
            ok = false;
        }
        ok = ok && kf_buffer_download(bufs[2], 0, c, 2ull * (m * n + GUARD)) == KF_OK;
        for (int i = 0; i < 3; i++) {
            kf_buffer_destroy(bufs[i]);
        }
    } else if (ok) {
        kf_host_buffer host[3] = {
            {a, 2ull * m * kd}, {b, 2ull * kd * n}, {c, 2ull * (m * n + GUARD)}};
        kf_interp_desc d = {.buffers = host, .buffer_count = 3, .subgroup_size = sg};
        if (kf_kernel_interpret(k, &d) != KF_OK) {
            kt_fail(__FILE__, __LINE__, "interpret %ux%ux%u: %s", m, kd, n, kf_kernel_error(k));
            ok = false;
        }
    }
    /* f32 accumulation, then one rounding to f16 (2^-11 relative) and, with the tail, its f16
     * rounding again: relative to the result, or to the sum of |products| where the sum
     * cancels, or to f16's smallest normal where the result is subnormal in f16 (a 1x1x1
     * product of two small inputs: the H200 found one). */
    for (uint32_t i = 0; ok && i < m; i++) {
        for (uint32_t j = 0; j < n; j++) {
            double ref = 0.0, mag = 0.0;
            for (uint32_t q = 0; q < kd; q++) {
                /* a^T is stored kd x m, b^T n x kd */
                double t = fa[ta ? (size_t)q * m + i : (size_t)i * kd + q] *
                           fb[tb ? (size_t)j * kd + q : (size_t)q * n + j];
                ref += t;
                mag += fabs(t);
            }
            /* 2^-14, f16's smallest normal: below it the rounding step is absolute */
            double scale = fmax(fmax(fabs(ref), 1e-3 * mag), 0x1p-14);
            if (tail) { /* near silu's zeros: relative to its input (rounded to f16 first) */
                scale = fmax(scale, fabs(ref));
                ref = ref / (1.0 + exp(-ref));
            }
            double got = kf__half_to_float(c[(size_t)i * n + j]);
            double err = fabs(got - ref) / scale;
            if (!(err <= 2e-3)) {
                kt_fail(__FILE__, __LINE__,
                        "%s %ux%ux%u%s%s cfg %ux%ux%u/%ux%u/%u/%u/%u/%u%s: c[%u,%u] = %g, want %g "
                        "(err %.3g)",
                        where, m, kd, n, ta ? " a^T" : "", tb ? " b^T" : "", cfg->bm, cfg->bn,
                        cfg->bk, cfg->wm, cfg->wn, cfg->stages, cfg->group_m, cfg->direct,
                        cfg->staging, tail ? " |> silu" : "", i, j, got, ref, err);
                ok = false;
                break;
            }
        }
    }
    for (uint32_t g = 0; ok && g < GUARD; g++) {
        if (c[m * n + g] != POISON) {
            kt_fail(__FILE__, __LINE__, "%s %ux%ux%u: wrote past the end (guard %u)", where, m, kd,
                    n, g);
            ok = false;
        }
    }
    free(a);
    free(b);
    free(c);
    free(fa);
    free(fb);
    if (k != mm) {
        kf_kernel_destroy(k);
    }
    kf_kernel_destroy(mm);
    return ok;
}

static bool run_case(kf_context *ctx, uint32_t sg, uint32_t m, uint32_t kd, uint32_t n,
                     const kf__sgmat_config *cfg, bool tail) {
    return run_case_t(ctx, sg, m, kd, n, cfg, tail, false, false);
}

/* Every transpose combination on the transposed shapes and configurations. */
static bool run_transposed(kf_context *ctx, uint32_t sg) {
    for (uint32_t t = 1; t < 4; t++) {
        for (size_t c = 0; c < sizeof transposed_configs / sizeof transposed_configs[0]; c++) {
            for (size_t s = 0; s < sizeof transposed_shapes / sizeof transposed_shapes[0]; s++) {
                const uint32_t *sh = transposed_shapes[s];
                if (!run_case_t(ctx, sg, sh[0], sh[1], sh[2], &configs[transposed_configs[c]],
                                s % 2 == 1, t & 1u, t & 2u)) {
                    return false;
                }
            }
        }
    }
    return true;
}

KT_CPU_TEST(ops, matmul_sgmat_transposed_interpreter) {
    KT_CHECK(run_transposed(NULL, 32), "transposed operands");
    /* the large defaults (2x8 subgroups; 256x128 of 4x4 for scalar rows) with each transpose */
    const kf__sgmat_config *big = kf__sgmat_default_config(4096, 4096, 4096, false);
    const kf__sgmat_config *rows = kf__sgmat_default_config(4095, 4093, 4097, false);
    for (uint32_t t = 1; t < 4; t++) {
        KT_CHECK(run_case_t(NULL, 32, 200, 48, 300, big, t == 2, t & 1u, t & 2u), "2x8, %u", t);
        KT_CHECK(run_case_t(NULL, 32, 261, 37, 129, rows, t == 1, t & 1u, t & 2u), "4x4, %u", t);
    }
}

KT_CPU_TEST(ops, matmul_sgmat_interpreter) {
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
        KT_CHECK(kf__sgmat_config_valid(&configs[c], 32), "config %zu is invalid", c);
        /* The staging and scratch variants (from the tenth configuration on) on five shapes
         * (the interpreter takes about 0.1 s per workgroup of a large tile): 1x1x1, ragged, a
         * tail, whole tiles with and without one. */
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            if (c >= 9 && s != 0 && s != 3 && s != 4 && s != 7 && s != 10) {
                continue;
            }
            if (!run_case(NULL, 32, shapes[s][0], shapes[s][1], shapes[s][2], &configs[c],
                          s % 3 == 1)) {
                return;
            }
        }
    }
    /* the registers a step ahead over seven steps of K, the last one partial */
    KT_CHECK(run_case(NULL, 32, 70, 200, 50, &configs[23], true), "order 1, 7 steps");
    KT_CHECK(run_case(NULL, 32, 64, 80, 128, &configs[24], false), "order 1, 5 steps");
    /* 16-byte fetches on whole tiles over several steps */
    KT_CHECK(run_case(NULL, 32, 128, 96, 256, &configs[25], true), "vector 1, large tile");
    KT_CHECK(run_case(NULL, 32, 128, 160, 64, &configs[26], false), "vector 1, small tile");
    /* no branch around the staging: whole and ragged K over several steps */
    KT_CHECK(run_case(NULL, 32, 128, 96, 256, &configs[27], false), "straight, one stage");
    KT_CHECK(run_case(NULL, 32, 70, 200, 50, &configs[28], true), "straight, two stages");
    KT_CHECK(run_case(NULL, 32, 64, 80, 128, &configs[29], false), "straight, ahead, whole");
    KT_CHECK(run_case(NULL, 32, 65, 83, 129, &configs[29], true), "straight, ahead, ragged");
    /* two steps of registers ahead: even and odd step counts, ragged K, one step */
    KT_CHECK(run_case(NULL, 32, 70, 200, 50, &configs[30], true), "order 2, 7 steps, ragged");
    KT_CHECK(run_case(NULL, 32, 64, 256, 64, &configs[30], false), "order 2, 8 steps");
    KT_CHECK(run_case(NULL, 32, 33, 17, 31, &configs[30], false), "order 2, 1 step");
    KT_CHECK(run_case(NULL, 32, 128, 96, 256, &configs[31], true), "order 2, 16 subgroups");
    KT_CHECK(run_case(NULL, 32, 65, 80, 70, &configs[32], false), "order 2, a k-major");
    /* the grouped tile order with a last group of one tile row (9 rows of tiles, groups of 8) */
    KT_CHECK(run_case(NULL, 32, 1100, 20, 20, &configs[4], false), "grouped order");
    /* subgroups of 16: the same kernel shape on another subgroup size */
    KT_CHECK(run_case(NULL, 16, 70, 40, 50, &configs[1], true), "subgroups of 16");
}

/* A batch broadcast both ways in the interpreter: a [2, 1, m, k] and b [3, k, n] to a [2, 3]
 * batch (a at step 0 along the second axis, b along the first), every element of the 6 results
 * against float64 of the f16 inputs, the guard band after them. */
static bool run_batched_t(kf_context *ctx, uint32_t sg, uint32_t m, uint32_t kd, uint32_t n,
                          const kf__sgmat_config *cfg, bool ta, bool tb) {
    const uint32_t mk = m * kd, kn = kd * n, mn = m * n;
    const kf__mm_batch batch = {
        .axes = 2, .dims = {2, 3}, .a_step = {mk, 0}, .b_step = {0, kn}, .c_step = {3 * mn, mn}};
    kf_kernel *k = kf__matmul_sgmat_transposed(m, kd, n, cfg, sg, &batch, ta, tb);
    if (!k || kf_kernel_status(k) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "no batched kernel for %ux%ux%u", m, kd, n);
        kf_kernel_destroy(k);
        return false;
    }
    uint16_t *a = malloc(4ull * mk), *b = malloc(6ull * kn), *c = malloc(2ull * (6 * mn + GUARD));
    for (uint32_t i = 0; i < 2 * mk; i++) {
        a[i] = kf__half_from_float(kt_rand_f32(-1.0f, 1.0f));
    }
    for (uint32_t i = 0; i < 3 * kn; i++) {
        b[i] = kf__half_from_float(kt_rand_f32(-1.0f, 1.0f));
    }
    for (uint32_t i = 0; i < 6 * mn + GUARD; i++) {
        c[i] = POISON;
    }
    bool ok = true;
    if (ctx) {
        kf_buffer *bufs[3] = {0};
        ok = kf_buffer_create(ctx, 4ull * mk, &bufs[0]) == KF_OK &&
             kf_buffer_create(ctx, 6ull * kn, &bufs[1]) == KF_OK &&
             kf_buffer_create(ctx, 2ull * (6 * mn + GUARD), &bufs[2]) == KF_OK &&
             kf_buffer_upload(bufs[0], 0, a, 4ull * mk) == KF_OK &&
             kf_buffer_upload(bufs[1], 0, b, 6ull * kn) == KF_OK &&
             kf_buffer_fill_u32(bufs[2], 0x7e007e00u) == KF_OK;
        kf_kernel_launch launch = {.buffers = bufs, .buffer_count = 3};
        ok = ok && kf_kernel_run(ctx, k, &launch) == KF_OK &&
             kf_buffer_download(bufs[2], 0, c, 2ull * (6 * mn + GUARD)) == KF_OK;
        for (int i = 0; i < 3; i++) {
            kf_buffer_destroy(bufs[i]);
        }
    } else {
        kf_host_buffer host[3] = {{a, 4ull * mk}, {b, 6ull * kn}, {c, 2ull * (6 * mn + GUARD)}};
        kf_interp_desc d = {.buffers = host, .buffer_count = 3, .subgroup_size = sg};
        ok = kf_kernel_interpret(k, &d) == KF_OK;
    }
    if (!ok) {
        kt_fail(__FILE__, __LINE__, "batched %ux%ux%u on the %s: %s / %s", m, kd, n,
                ctx ? "GPU" : "interpreter", ctx ? kf_context_last_error(ctx) : "",
                kf_kernel_error(k));
    }
    for (uint32_t p = 0; ok && p < 6; p++) {
        const uint16_t *ap = a + (p / 3) * mk, *bp = b + (p % 3) * kn;
        for (uint32_t e = 0; ok && e < mn; e++) {
            uint32_t i = e / n, j = e % n;
            double ref = 0.0, mag = 0.0;
            for (uint32_t q = 0; q < kd; q++) {
                double t = (double)kf__half_to_float(ap[ta ? q * m + i : i * kd + q]) *
                           kf__half_to_float(bp[tb ? j * kd + q : q * n + j]);
                ref += t;
                mag += fabs(t);
            }
            double scale = fmax(fmax(fabs(ref), 1e-3 * mag), 0x1p-14);
            double got = kf__half_to_float(c[p * mn + e]);
            if (!(fabs(got - ref) / scale <= 2e-3)) {
                kt_fail(__FILE__, __LINE__, "batched %ux%ux%u: product %u c[%u,%u] = %g, want %g",
                        m, kd, n, p, i, j, got, ref);
                ok = false;
            }
        }
    }
    for (uint32_t g = 0; ok && g < GUARD; g++) {
        if (c[6 * mn + g] != POISON) {
            kt_fail(__FILE__, __LINE__, "batched %ux%ux%u: wrote past the end", m, kd, n);
            ok = false;
        }
    }
    free(a);
    free(b);
    free(c);
    kf_kernel_destroy(k);
    return ok;
}

static bool run_batched(kf_context *ctx, uint32_t sg, uint32_t m, uint32_t kd, uint32_t n,
                        const kf__sgmat_config *cfg) {
    return run_batched_t(ctx, sg, m, kd, n, cfg, false, false);
}

KT_CPU_TEST(ops, matmul_sgmat_batched_interpreter) {
    /* ragged (checked loads), aligned with a direct-operand configuration (staged in a batch),
     * and the grouped tile order */
    KT_CHECK(run_batched(NULL, 32, 33, 17, 31, &configs[0]), "33x17x31");
    KT_CHECK(run_batched(NULL, 32, 64, 64, 64, &configs[6]), "64x64x64, direct configuration");
    KT_CHECK(run_batched(NULL, 32, 70, 40, 50, &configs[2]), "70x40x50, grouped order");
    KT_CHECK(run_batched(NULL, 32, 33, 17, 31, kf__sgmat_default_config(4096, 4096, 4096, false)),
             "33x17x31, the large default");
    /* transposed operands in a batch, ragged and whole (blocks copied by subgroup matrices) */
    KT_CHECK(run_batched_t(NULL, 32, 33, 17, 31, &configs[9], true, false), "a^T 33x17x31");
    KT_CHECK(run_batched_t(NULL, 32, 64, 64, 64, &configs[12], false, true), "b^T 64x64x64");
    KT_CHECK(run_batched_t(NULL, 32, 64, 32, 64, &configs[12], true, true), "a^T b^T 64x32x64");
}

KT_CPU_TEST(ops, matmul_sgmat_wgsl) {
    /* the defaults: 2x8 subgroups on whole vec4 rows, 256x128 tiles of 4x4 where rows are
     * scalar, 64x64 below 2048x2048 outputs */
    const kf__sgmat_config *d1 = kf__sgmat_default_config(4096, 4096, 4096, false);
    const kf__sgmat_config *d2 = kf__sgmat_default_config(4095, 4093, 4097, false);
    const kf__sgmat_config *d3 = kf__sgmat_default_config(1024, 1024, 1024, false);
    KT_CHECK(d1->bm == 128 && d1->bn == 256 && d1->wm == 2 && d1->wn == 8, "default 4096^3");
    KT_CHECK(d2->bm == 256 && d2->bn == 128 && d2->wm == 4 && d2->wn == 4, "default ragged");
    KT_CHECK(d3->bm == 64 && d3->bn == 64, "default 1024^3");
    /* the 2x4 tile (the default before session 6) on the ragged shape */
    const kf__sgmat_config two_by_four = {128, 256, 32, 2, 4, 1, 8, 0, 0, 0, 0, 0, 0, 0, 0};
    kf_kernel *k = kf__matmul_sgmat(4095, 4093, 4097, &two_by_four, 32);
    KT_CHECK(k && kf_kernel_status(k) == KF_OK, "%s", k ? kf_kernel_error(k) : "NULL");
    char *w = kf_kernel_emit_wgsl(k);
    KT_CHECK(w != NULL, "%s", kf_kernel_error(k));
    const char *want[] = {
        "// matmul_sgmat_128x256x32_2x4: generated by kfuse (workgroup 256x1x1)\n",
        "enable chromium_experimental_subgroup_matrix;\n"
        "diagnostic(off, chromium.subgroup_matrix_uniformity);\n",
        "var<workgroup> tile_a: array<f16, 5120>;\n",  /* 128 rows x (32 + 8) */
        "var<workgroup> tile_b: array<f16, 8448>;\n",  /* 32 rows x (256 + 8) */
        "var<workgroup> scratch: array<f32, 4096>;\n", /* 8 subgroups x two 16x16 matrices */
        "var acc_15: subgroup_matrix_result<f32, 16, 16>;\n",
        "= subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(&tile_a, a_base + 640u, false, "
        "40u);\n",
        "acc_15 = subgroupMatrixMultiplyAccumulate(left_3, right_3, acc_15);\n",
        "subgroupMatrixStore(&scratch, scratch0 + 16u, acc_1, false, 32u);\n",
        "< 4095u && ", /* the store phase checks ragged rows and columns */
        "out[",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        if (!strstr(w, want[i])) {
            kt_fail(__FILE__, __LINE__, "missing <%s>", want[i]);
            break;
        }
    }
    /* the aligned product loads vec4s and checks no bounds */
    kf_kernel *aligned = kf__matmul_sgmat(256, 256, 256, NULL, 32);
    char *w2 = kf_kernel_emit_wgsl(aligned);
    KT_CHECK(w2 && strstr(w2, "var<storage, read> a: array<vec4<f16>>;") && !strstr(w2, "select("),
             "aligned kernel:\n%s", w2 ? w2 : "");
    /* both operands read directly: no tiles, no barrier before the store phase */
    const kf__sgmat_config direct = {32, 32, 16, 2, 2, 2, 0, 3, 0, 0, 0, 0, 0, 0, 0};
    kf_kernel *dk = kf__matmul_sgmat(64, 64, 64, &direct, 32);
    char *w3 = kf_kernel_emit_wgsl(dk);
    KT_CHECK(w3 && strstr(w3, "// matmul_sgmat_32x32x16_2x2_direct_a_direct_b:") &&
                 strstr(w3, "left = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(&a, "
                            "a_base + 0u, false, 64u);") &&
                 !strstr(w3, "tile_a") && !strstr(w3, "tile_b"),
             "direct kernel:\n%s", w3 ? w3 : "");
    const char *first_barrier = strstr(w3, "workgroupBarrier");
    KT_CHECK(first_barrier && strstr(w3, "subgroupMatrixStore") < first_barrier,
             "a barrier before the store phase");
    /* staging 1: a's rows permuted against bank conflicts (bits 1 and 2 swapped, so a subgroup
     * stores rows 0, 1, 4, 5), odd rows storing the vec4's second word first */
    const kf__sgmat_config spread = {128, 256, 32, 2, 4, 1, 8, 0, 1, 0, 0, 0, 0, 0, 0};
    kf_kernel *sk = kf__matmul_sgmat(4096, 4096, 4096, &spread, 32);
    char *w4 = kf_kernel_emit_wgsl(sk);
    KT_CHECK(w4 && strstr(w4, "// matmul_sgmat_128x256x32_2x4_spread:") &&
                 strstr(w4, "(((q >> 1u) & 1u) << 2u) | (((q >> 2u) & 1u) << 1u)") &&
                 strstr(w4, "let a_swap = ((a_r >> 0u) & 1u) != 0u;") &&
                 strstr(w4, "= select(next_a_v.x, next_a_v.z, a_swap);"),
             "spread kernel:\n%s", w4 ? w4 : "");
    /* staging 2: blocks copied by subgroup matrices from scalar bindings into the tiles */
    const kf__sgmat_config copy = {128, 256, 32, 2, 4, 1, 8, 0, 2, 0, 0, 0, 0, 0, 0};
    kf_kernel *ck = kf__matmul_sgmat(4096, 4096, 4096, &copy, 32);
    char *w5 = kf_kernel_emit_wgsl(ck);
    KT_CHECK(w5 && strstr(w5, "// matmul_sgmat_128x256x32_2x4_sgcopy:") &&
                 strstr(w5, "var<storage, read> a: array<f16>;") &&
                 strstr(w5, "a_next = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(&a, "
                            "a_from + 0u, false, 4096u);") &&
                 strstr(w5, "subgroupMatrixStore(&tile_b, 0u + b_block_3, b_next_3, false, 264u);"),
             "block-copy kernel:\n%s", w5 ? w5 : "");
    /* a transposed: its tile is bk x bm, its matrices loaded column-major */
    kf_kernel *tk = kf__matmul_sgmat_transposed(4096, 4096, 4096, NULL, 32, NULL, true, false);
    char *w6 = kf_kernel_emit_wgsl(tk);
    KT_CHECK(w6 && strstr(w6, "// matmul_sgmat_128x256x32_2x8_ta:") &&
                 strstr(w6, "var<workgroup> tile_a: array<f16, 4352>;") && /* 32 x (128 + 8) */
                 strstr(w6, "(&tile_a, a_base + 0u, true, 136u);"),
             "transposed kernel:\n%s", w6 ? w6 : "");
    /* staging 3: a's rows permuted as in staging 1, its halves stored in lane order */
    const kf__sgmat_config rows = {128, 256, 32, 2, 4, 1, 8, 0, 3, 0, 0, 0, 0, 0, 0};
    kf_kernel *rk = kf__matmul_sgmat(4096, 4096, 4096, &rows, 32);
    char *w7 = kf_kernel_emit_wgsl(rk);
    KT_CHECK(w7 && strstr(w7, "// matmul_sgmat_128x256x32_2x4_rows:") &&
                 strstr(w7, "(((q >> 1u) & 1u) << 2u) | (((q >> 2u) & 1u) << 1u)") &&
                 strstr(w7, "tile_a[t_12 + 1u] = next_a_v.y;") && !strstr(w7, "select("),
             "rows kernel:\n%s", w7 ? w7 : "");
    kf_free(w7);
    kf_kernel_destroy(rk);
    /* layout 1: a's tile k-major (as a^T's), a 4x4 block of a per invocation stored transposed:
     * four halves of four rows of a at one k in lane order */
    const kf__sgmat_config kmajor = {128, 256, 32, 2, 4, 1, 8, 0, 0, 0, 0, 1, 0, 0, 0};
    kf_kernel *kk = kf__matmul_sgmat(4096, 4096, 4096, &kmajor, 32);
    char *w8 = kf_kernel_emit_wgsl(kk);
    KT_CHECK(w8 && strstr(w8, "// matmul_sgmat_128x256x32_2x4_ka:") &&
                 strstr(w8, "var<workgroup> tile_a: array<f16, 4352>;") &&
                 strstr(w8, "tile_a[t_13 + 1u] = next_a_v_1.x;") &&
                 strstr(w8, "(&tile_a, a_base + 16u, true, 136u);"),
             "k-major kernel:\n%s", w8 ? w8 : "");
    kf_free(w8);
    kf_kernel_destroy(kk);
    /* the probes (measuring only): the K loop keeps its barriers and multiplies but neither
     * stages (1) nor loads matrices (2) */
    for (uint32_t probe = 1; probe <= 3; probe++) {
        const kf__sgmat_config pc = {128, 256, 32, 2, 4, 1, 8, 0, 0, 0, probe, 0, 0, 0, 0};
        kf_kernel *pk = kf__matmul_sgmat(4096, 4096, 4096, &pc, 32);
        char *pw = kf_kernel_emit_wgsl(pk);
        const char *loop = pw ? strstr(pw, "for (var k0") : NULL;
        const char *after = loop ? strstr(loop, "let scratch0") : NULL;
        bool ok = loop && after && strstr(loop, "subgroupMatrixMultiplyAccumulate") < after &&
                  strstr(loop, "workgroupBarrier") < after;
        const char *stage = loop ? strstr(loop, "tile_a[") : NULL;
        const char *load = loop ? strstr(loop, "subgroupMatrixLoad") : NULL;
        ok = ok && ((probe & 1u) ? !stage || stage > after : stage && stage < after);
        ok = ok && ((probe & 2u) ? !load || load > after : load && load < after);
        KT_CHECK(ok && strstr(pw, "_probe_"), "probe %u kernel:\n%s", probe, pw ? pw : "");
        kf_free(pw);
        kf_kernel_destroy(pk);
    }
    /* the staging probes: 4 keeps the fetches in the loop and folds them into one store an
     * operand, 8 keeps the stores and fetches once (16-byte fetches too) */
    for (uint32_t probe = 4; probe <= 8; probe += 4) {
        for (uint32_t vector = 0; vector < 2; vector++) {
            const kf__sgmat_config pc = {128, 256, 32, 2, 4, 1, 8, 0, 0, 0, probe, 0, 0, vector, 0};
            kf_kernel *pk = kf__matmul_sgmat(4096, 4096, 4096, &pc, 32);
            char *pw = kf_kernel_emit_wgsl(pk);
            const char *loop = pw ? strstr(pw, "for (var k0") : NULL;
            const char *after = loop ? strstr(loop, "let scratch0") : NULL;
            const char *fetch = loop ? strstr(loop, "= a[") : NULL;
            const char *fold = loop ? strstr(loop, " ^ ") : NULL;
            bool ok = after && strstr(loop, "subgroupMatrixMultiplyAccumulate") < after &&
                      strstr(loop, "tile_b[") < after;
            ok = ok && (probe == 4 ? fetch && fetch < after && fold && fold < after
                                   : (!fetch || fetch > after) && (!fold || fold > after));
            KT_CHECK(ok && strstr(pw, probe == 4 ? "_probe_fetch_only" : "_probe_store_only"),
                     "probe %u kernel:\n%s", probe, pw ? pw : "");
            kf_free(pw);
            kf_kernel_destroy(pk);
        }
    }
    /* and they run (their results are not the product) */
    const kf__sgmat_config fold = {64, 64, 32, 2, 2, 1, 0, 0, 0, 0, 4, 0, 0, 0, 0};
    kf_kernel *fk = kf__matmul_sgmat(64, 96, 64, &fold, 32);
    KT_CHECK(fk && kf_kernel_status(fk) == KF_OK, "fold probe");
    kf_kernel_destroy(fk);
    kf_free(w);
    kf_free(w2);
    kf_free(w3);
    kf_free(w4);
    kf_free(w5);
    kf_free(w6);
    kf_kernel_destroy(k);
    kf_kernel_destroy(aligned);
    kf_kernel_destroy(dk);
    kf_kernel_destroy(sk);
    kf_kernel_destroy(ck);
    kf_kernel_destroy(tk);
}

KT_CPU_TEST(ops, matmul_sgmat_refuses_bad_configs) {
    kf__sgmat_config bad[] = {
        {0, 64, 32, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {64, 64, 24, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {48, 64, 32, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {64, 64, 32, 2, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {256, 256, 64, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {512, 512, 32, 4, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {16, 16, 16, 2, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0,
         0}, /* 16 rows cannot be split over two subgroups
              */
        {16, 64, 16, 1, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},  /* 128 invocations, a's 16x16 tile is 64
                                                            * vec4s
                                                            */
        {64, 64, 32, 2, 2, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0},  /* no such operand */
        {256, 32, 16, 1, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}, /* 16 left matrices per subgroup */
        {32, 256, 16, 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}, /* 16 right matrices per subgroup */
        {64, 64, 32, 2, 2, 2, 0, 0, 4, 0, 0, 0, 0, 0, 0},  /* no such staging */
        {64, 64, 32, 2, 2, 2, 0, 1, 0, 0, 1, 0, 0, 0, 0},  /* a probe of a direct operand */
        {64, 64, 32, 2, 2, 2, 0, 0, 0, 0, 4, 0, 0, 0, 0},  /* the staging probes need one stage */
        {64, 64, 32, 2, 2, 1, 0, 0, 0, 0, 5, 0, 0, 0, 0},  /* no such probe */
        {64, 64, 32, 2, 2, 2, 0, 0, 0, 0, 0, 2, 0, 0, 0},  /* no such layout */
        {64, 64, 32, 2, 2, 2, 0, 0, 0, 0, 0, 0, 2, 0, 0},  /* no such order */
        {64, 64, 32, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 2, 0},  /* no such vector */
        {64, 64, 32, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 2},  /* no such straight */
        {64, 64, 32, 2, 2, 2, 0, 0, 0, 0, 0, 0, 2, 0, 0},  /* order 2 of two stages */
        {64, 64, 32, 2, 2, 1, 0, 0, 0, 0, 0, 0, 3, 0, 0},  /* no such order */
        {128, 256, 32, 2, 4, 1, 8, 0, 0, 3, 0, 0, 0, 0,
         0}, /* 3 does not divide a row of 4 matrices */
        {128, 256, 32, 2, 4, 1, 8, 0, 0, 8, 0, 0, 0, 0, 0}, /* more than a row */
        {128, 256, 32, 2, 4, 1, 8, 0, 0, 4, 0, 0, 0, 0, 0}, /* a whole row's scratch does not fit
                                                             * beside the tiles
                                                             */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        KT_CHECK(!kf__sgmat_config_valid(&bad[i], 32), "config %zu accepted", i);
        KT_CHECK(kf__matmul_sgmat(64, 64, 64, &bad[i], 32) == NULL, "config %zu built", i);
    }
    KT_CHECK(kf__matmul_sgmat(0, 4, 4, NULL, 32) == NULL, "zero size accepted");
    KT_CHECK(kf__matmul_sgmat(4, 4, 4, NULL, 24) == NULL, "subgroup size 24 accepted");
}

KT_TEST(ops, matmul_sgmat_gpu) {
    KT_NEED_GPU(ctx);
    uint32_t sg = 0;
    if (!kf__sgmat_usable(ctx, &sg)) {
        kf_adapter_info info;
        kf_context_adapter_info(ctx, &info);
        printf("    (no subgroup matrices on %s (subgroup-matrix %s, shader-f16 %s): skipped)\n",
               info.device, info.has_subgroup_matrix ? "yes" : "no", info.has_f16 ? "yes" : "no");
        return;
    }
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            if (!run_case(ctx, sg, shapes[s][0], shapes[s][1], shapes[s][2], &configs[c],
                          s % 3 == 1)) {
                return;
            }
        }
    }
    KT_CHECK(run_transposed(ctx, sg), "transposed operands");
    /* large ragged products, one per default */
    KT_CHECK(run_case(ctx, sg, 1100, 513, 300, NULL, true), "1100x513x300");
    KT_CHECK(run_case(ctx, sg, 2049, 257, 2051, NULL, false), "2049x257x2051");
    /* a batch broadcast both ways, ragged and aligned */
    KT_CHECK(run_batched(ctx, sg, 130, 70, 36, NULL), "batched 130x70x36");
    KT_CHECK(run_batched(ctx, sg, 256, 128, 256, NULL), "batched 256x128x256");
    KT_CHECK(run_batched_t(ctx, sg, 130, 70, 36, NULL, true, true), "batched a^T b^T 130x70x36");
}
