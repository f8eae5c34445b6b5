/* The register-blocked matmul: every configuration on aligned and ragged shapes, plain and with
 * transposed operands (a stored [k, m], b stored [n, k]), against a float64 product, with
 * outputs poisoned and guard elements checked; and with a fused tail. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/matmul_blocked.h"

/* The built-in choices first (and the previous ragged one, every load tested): they run every
 * shape; the others a third of them, a different third for neighbouring configurations (each
 * (configuration, shape) pair is a kernel of its own for the driver to compile). */
static const kf__mm_config configs[] = {
    {128, 128, 8, 8, 8, 2, 4, 1},
    {64, 64, 16, 8, 8, 2, 0, 1},
    {128, 128, 16, 8, 8, 1, 0, 0},
    {128, 128, 8, 8, 8, 0, 0, 0},
    {64, 64, 16, 4, 4, 0, 0, 0},
    {64, 128, 16, 4, 8, 2, 0, 0},
    {32, 32, 8, 4, 4, 0, 0, 0},
    {64, 32, 8, 8, 4, 2, 0, 0},
    {64, 32, 8, 16, 8, 2, 0, 0},
    {32, 64, 8, 8, 16, 1, 0, 0},
    /* the edge path (clamped rows and columns, unguarded whole K steps) and raster orders,
     * with a partial last group where the tile rows do not divide */
    {32, 32, 8, 4, 4, 2, 3, 1},
    {64, 32, 8, 8, 4, 1, 2, 1},
    {32, 64, 16, 4, 8, 2, 4, 0},
};
enum { BUILTIN_CONFIGS = 3 };

static const uint32_t shapes[][3] = {
    {1, 1, 1},     {7, 13, 5},     {64, 64, 64}, {65, 33, 17}, {128, 256, 128},
    {130, 70, 36}, {257, 129, 65}, {33, 100, 4}, {5, 7, 129},
};

static kf_val gelu_like(kf_kernel *k, kf_val x, void *user) {
    (void)user; /* any element-wise tail: x * sigmoid(x) */
    kf_val one = kf_lit_f32(k, 1.0f);
    return kf_div(k, x, kf_add(k, one, kf_call1(k, KF_FN_EXP, kf_unary(k, KF_OP_NEG, x))));
}

/* op(a)[i, q] and op(b)[q, j] of a product whose a is stored [k, m] where ta, b [n, k] where tb. */
static double elem_a(const float *a, uint32_t m, uint32_t kd, bool ta, uint32_t i, uint32_t q) {
    return ta ? a[q * m + i] : a[i * kd + q];
}

static double elem_b(const float *b, uint32_t kd, uint32_t n, bool tb, uint32_t q, uint32_t j) {
    return tb ? b[j * kd + q] : b[q * n + j];
}

static bool run_case(kf_context *ctx, uint32_t m, uint32_t kd, uint32_t n, const kf__mm_config *cfg,
                     bool tail, bool ta, bool tb) {
    kf_kernel *mm = ta || tb
                        ? kf__matmul_blocked_transposed(m, kd, n, cfg, KF_DTYPE_F32, NULL, ta, tb)
                        : kf__matmul_blocked(m, kd, n, cfg);
    if (!mm) {
        kt_fail(__FILE__, __LINE__, "no kernel for %ux%ux%u", m, kd, n);
        return false;
    }
    kf_kernel *k = mm;
    if (tail) {
        uint32_t wg[3];
        kf_kernel_workgroup_size(mm, wg);
        kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
        kf_kernel *t = kf_kernel_map("silu", f32, f32, wg, gelu_like, NULL);
        k = kf_kernel_then(mm, t);
        kf_kernel_destroy(t);
    }
    bool ok = kf_kernel_status(k) == KF_OK;
    if (!ok) {
        kt_fail(__FILE__, __LINE__, "kernel: %s", kf_kernel_error(k));
    }
    float *a = malloc(sizeof(float) * m * kd), *b = malloc(sizeof(float) * kd * n);
    const uint32_t guard = 64;
    float *c = malloc(sizeof(float) * (m * n + guard));
    for (uint32_t i = 0; i < m * kd; i++) {
        a[i] = kt_rand_f32(-1.0f, 1.0f);
    }
    for (uint32_t i = 0; i < kd * n; i++) {
        b[i] = kt_rand_f32(-1.0f, 1.0f);
    }
    kf_buffer *bufs[3] = {0};
    ok = ok && kf_buffer_create(ctx, 4ull * m * kd, &bufs[0]) == KF_OK &&
         kf_buffer_create(ctx, 4ull * kd * n, &bufs[1]) == KF_OK &&
         kf_buffer_create(ctx, 4ull * (m * n + guard), &bufs[2]) == KF_OK &&
         kf_buffer_upload(bufs[0], 0, a, 4ull * m * kd) == KF_OK &&
         kf_buffer_upload(bufs[1], 0, b, 4ull * kd * n) == KF_OK &&
         kf_buffer_fill_u32(bufs[2], 0x7fc00000u) == KF_OK;
    kf_kernel_launch launch = {.buffers = bufs, .buffer_count = 3};
    if (ok && kf_kernel_run(ctx, k, &launch) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "run %ux%ux%u: %s / %s", m, kd, n, kf_context_last_error(ctx),
                kf_kernel_error(k));
        ok = false;
    }
    ok = ok && kf_buffer_download(bufs[2], 0, c, 4ull * (m * n + guard)) == KF_OK;
    double worst = 0.0;
    for (uint32_t i = 0; ok && i < m; i++) {
        for (uint32_t j = 0; j < n; j++) {
            double ref = 0.0, mag = 0.0;
            for (uint32_t q = 0; q < kd; q++) {
                double prod = elem_a(a, m, kd, ta, i, q) * elem_b(b, kd, n, tb, q, j);
                ref += prod;
                mag += fabs(prod);
            }
            if (tail) {
                ref = ref / (1.0 + exp(-ref));
            }
            /* f32 accumulation: the error scales with the sum of |products|, not the result. */
            double err = fabs(c[i * n + j] - ref) / (mag + 1e-30);
            if (!(err <= 1e-5)) {
                char tile[48];
                kf__mm_config_str(cfg, tile, sizeof tile);
                kt_fail(__FILE__, __LINE__, "%ux%ux%u%s%s cfg %s%s: c[%u,%u] = %g, want %g", m, kd,
                        n, ta ? " ta" : "", tb ? " tb" : "", tile, tail ? " |> silu" : "", i, j,
                        (double)c[i * n + j], ref);
                ok = false;
                break;
            }
            worst = err > worst ? err : worst;
        }
        if (!ok) {
            break;
        }
    }
    for (uint32_t g = 0; ok && g < guard; g++) {
        uint32_t bits;
        memcpy(&bits, &c[m * n + g], 4);
        if (bits != 0x7fc00000u) {
            kt_fail(__FILE__, __LINE__, "%ux%ux%u: wrote past the end (guard %u)", m, kd, n, g);
            ok = false;
        }
    }
    for (int i = 0; i < 3; i++) {
        kf_buffer_destroy(bufs[i]);
    }
    free(a);
    free(b);
    free(c);
    if (k != mm) {
        kf_kernel_destroy(k);
    }
    kf_kernel_destroy(mm);
    return ok;
}

KT_TEST(ops, matmul_blocked_every_config_and_shape) {
    KT_NEED_GPU(ctx);
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            if (c >= BUILTIN_CONFIGS && (s + c) % 3 != 0) {
                continue;
            }
            if (!run_case(ctx, shapes[s][0], shapes[s][1], shapes[s][2], &configs[c], s % 3 == 1,
                          false, false)) {
                return;
            }
        }
    }
}

/* transpose_a, transpose_b, both: each built-in configuration on ragged and prime shapes, a
 * different transpose for neighbours, and every transpose on an aligned shape (unchecked loads).
 * Few kernels: lavapipe takes seconds to compile each. */
KT_TEST(ops, matmul_blocked_transposed_every_config_and_shape) {
    KT_NEED_GPU(ctx);
    const bool trans[3][2] = {{true, false}, {false, true}, {true, true}};
    const uint32_t ragged[][3] = {{7, 13, 5}, {65, 33, 17}, {33, 100, 4}, {5, 7, 129}};
    for (size_t c = 0; c < BUILTIN_CONFIGS; c++) {
        for (size_t s = 0; s < sizeof ragged / sizeof ragged[0]; s++) {
            size_t t = (c + s) % 3;
            if (!run_case(ctx, ragged[s][0], ragged[s][1], ragged[s][2], &configs[c], s == 1,
                          trans[t][0], trans[t][1])) {
                return;
            }
        }
    }
    for (size_t t = 0; t < 3; t++) {
        if (!run_case(ctx, 64, 64, 64, &configs[1], t == 2, trans[t][0], trans[t][1])) {
            return;
        }
    }
}

KT_CPU_TEST(ops, matmul_blocked_transposed_refuses_f16) {
    KT_CHECK(kf__matmul_blocked_transposed(64, 64, 64, NULL, KF_DTYPE_F16, NULL, true, false) ==
                 NULL,
             "f16 with transpose_a accepted");
    kf_kernel *k = kf__matmul_blocked_transposed(64, 64, 64, NULL, KF_DTYPE_F32, NULL, true, true);
    KT_CHECK(k && kf_kernel_status(k) == KF_OK, "f32 with both transposes refused");
    kf_kernel_destroy(k);
}

KT_CPU_TEST(ops, matmul_blocked_refuses_bad_configs) {
    kf__mm_config bad[] = {{0, 64, 8, 4, 4, 0, 0, 0},   {64, 64, 6, 4, 4, 0, 0, 0},
                           {64, 64, 8, 4, 3, 0, 0, 0},  {256, 256, 8, 2, 4, 0, 0, 0},
                           {64, 64, 8, 32, 4, 0, 0, 0}, {64, 64, 8, 4, 4, 3, 0, 0},
                           {64, 64, 8, 2, 4, 0, 0, 0},  {256, 256, 8, 4, 4, 2, 0, 0}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kf_kernel *k = kf__matmul_blocked(64, 64, 64, &bad[i]);
        KT_CHECK(k == NULL, "config %zu accepted", i);
    }
    KT_CHECK(kf__matmul_blocked(0, 4, 4, NULL) == NULL, "zero size accepted");
}

/* A batch broadcast both ways: a [2, 1, m, k] and b [3, k, n] to a [2, 3] batch of products (a
 * read at step 0 along the second axis, b along the first), the 6 results checked element by
 * element against float64 and the guard band after them. */
static bool run_batched(kf_context *ctx, uint32_t m, uint32_t kd, uint32_t n,
                        const kf__mm_config *cfg, bool ta, bool tb) {
    const uint32_t mk = m * kd, kn = kd * n, mn = m * n, guard = 64;
    const kf__mm_batch batch = {
        .axes = 2, .dims = {2, 3}, .a_step = {mk, 0}, .b_step = {0, kn}, .c_step = {3 * mn, mn}};
    kf_kernel *k = ta || tb
                       ? kf__matmul_blocked_transposed(m, kd, n, cfg, KF_DTYPE_F32, &batch, ta, tb)
                       : kf__matmul_blocked_batched(m, kd, n, cfg, KF_DTYPE_F32, &batch);
    if (!k || kf_kernel_status(k) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "no batched kernel for %ux%ux%u: %s", m, kd, n,
                k ? kf_kernel_error(k) : "NULL");
        kf_kernel_destroy(k);
        return false;
    }
    float *a = malloc(sizeof(float) * 2 * mk), *b = malloc(sizeof(float) * 3 * kn);
    float *c = malloc(sizeof(float) * (6 * mn + guard));
    for (uint32_t i = 0; i < 2 * mk; i++) {
        a[i] = kt_rand_f32(-1.0f, 1.0f);
    }
    for (uint32_t i = 0; i < 3 * kn; i++) {
        b[i] = kt_rand_f32(-1.0f, 1.0f);
    }
    kf_buffer *bufs[3] = {0};
    bool ok = kf_buffer_create(ctx, 8ull * mk, &bufs[0]) == KF_OK &&
              kf_buffer_create(ctx, 12ull * kn, &bufs[1]) == KF_OK &&
              kf_buffer_create(ctx, 4ull * (6 * mn + guard), &bufs[2]) == KF_OK &&
              kf_buffer_upload(bufs[0], 0, a, 8ull * mk) == KF_OK &&
              kf_buffer_upload(bufs[1], 0, b, 12ull * kn) == KF_OK &&
              kf_buffer_fill_u32(bufs[2], 0x7fc00000u) == KF_OK;
    kf_kernel_launch launch = {.buffers = bufs, .buffer_count = 3};
    if (ok && kf_kernel_run(ctx, k, &launch) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "run batched %ux%ux%u: %s", m, kd, n,
                kf_context_last_error(ctx));
        ok = false;
    }
    ok = ok && kf_buffer_download(bufs[2], 0, c, 4ull * (6 * mn + guard)) == KF_OK;
    for (uint32_t p = 0; ok && p < 6; p++) {
        const float *ap = a + (p / 3) * mk, *bp = b + (p % 3) * kn;
        for (uint32_t e = 0; ok && e < mn; e++) {
            uint32_t i = e / n, j = e % n;
            double ref = 0.0, mag = 0.0;
            for (uint32_t q = 0; q < kd; q++) {
                double prod = elem_a(ap, m, kd, ta, i, q) * elem_b(bp, kd, n, tb, q, j);
                ref += prod;
                mag += fabs(prod);
            }
            double err = fabs(c[p * mn + e] - ref) / (mag + 1e-30);
            if (!(err <= 1e-5)) {
                kt_fail(__FILE__, __LINE__,
                        "batched %ux%ux%u%s%s cfg %ux%ux%u: product %u c[%u,%u] = "
                        "%g, want %g",
                        m, kd, n, ta ? " ta" : "", tb ? " tb" : "", cfg->bm, cfg->bn, cfg->bk, p, i,
                        j, (double)c[p * mn + e], ref);
                ok = false;
            }
        }
    }
    for (uint32_t g = 0; ok && g < guard; g++) {
        uint32_t bits;
        memcpy(&bits, &c[6 * mn + g], 4);
        if (bits != 0x7fc00000u) {
            kt_fail(__FILE__, __LINE__, "batched %ux%ux%u: wrote past the end", m, kd, n);
            ok = false;
        }
    }
    for (int i = 0; i < 3; i++) {
        kf_buffer_destroy(bufs[i]);
    }
    free(a);
    free(b);
    free(c);
    kf_kernel_destroy(k);
    return ok;
}

KT_TEST(ops, matmul_blocked_batched_broadcast) {
    KT_NEED_GPU(ctx);
    /* aligned (vec4 loads, no checks), ragged (scalar loads, checked), and one of each kind */
    const uint32_t batched_shapes[][3] = {{64, 64, 64}, {65, 33, 17}, {7, 13, 5}};
    for (size_t c = 0; c < BUILTIN_CONFIGS; c++) {
        for (size_t s = 0; s < sizeof batched_shapes / sizeof batched_shapes[0]; s++) {
            if (!run_batched(ctx, batched_shapes[s][0], batched_shapes[s][1], batched_shapes[s][2],
                             &configs[c], false, false)) {
                return;
            }
        }
    }
}

/* The batch broadcast both ways with transposed operands: a's matrices stored [k, m], b's
 * [n, k], at the same steps. */
KT_TEST(ops, matmul_blocked_batched_transposed) {
    KT_NEED_GPU(ctx);
    const bool trans[3][2] = {{true, false}, {false, true}, {true, true}};
    for (size_t t = 0; t < 3; t++) {
        if (!run_batched(ctx, 65, 33, 17, &configs[1], trans[t][0], trans[t][1])) {
            return;
        }
    }
    if (!run_batched(ctx, 64, 64, 64, &configs[1], true, true)) {
        return;
    }
}
