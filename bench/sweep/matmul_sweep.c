/* kfuse_matmul_sweep: times every tile configuration of the register-blocked matmul kernel at a
 * few sizes, side by side, each checked against a float64 product at 300 sampled elements.
 * The numbers behind the built-in tile choices (kf__mm_default_config) and the tuner's list.
 *
 *   kfuse_matmul_sweep [f32|f16] [-b N] [-c TILE ...] [MxKxN ...]
 *
 * (default: f32 at 1024^3, 4096^3, 8192^3 and 4095x4093x4097, every tile below). -c picks the
 * tiles instead, in kf__mm_config_parse's notation BMxBNxBK/TMxTN/S[/R[/E]] (R: tile rows per
 * raster group, E 1: the edge path). Each tile runs 10 timed submissions after warm-up; the
 * median and the fastest are printed. -b N puts N dispatches back to back in each submission
 * (times per dispatch): the GPU never idles between them, so short kernels run at the clocks
 * of steady work.
 * It runs with Dawn's bounds clamping off (the default); KF_CHECKED=1 turns it on. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kfuse.h"
#include "ops/matmul_blocked.h"

static const kf__mm_config g_configs[] = {
    {128, 128, 8, 8, 8, 1, 0, 0},  {128, 128, 8, 8, 8, 2, 0, 0},  {128, 128, 16, 8, 8, 1, 0, 0},
    {128, 128, 16, 8, 8, 2, 0, 0}, {128, 64, 16, 8, 4, 2, 0, 0},  {64, 128, 16, 4, 8, 2, 0, 0},
    {128, 64, 8, 8, 8, 2, 0, 0},   {64, 128, 8, 8, 8, 2, 0, 0},   {64, 64, 16, 4, 4, 2, 0, 0},
    {64, 64, 8, 8, 4, 2, 0, 0},    {32, 32, 16, 4, 4, 1, 0, 0},   {32, 32, 16, 4, 4, 2, 0, 0},
    {64, 64, 16, 8, 8, 2, 0, 0},   {128, 256, 8, 8, 16, 2, 0, 0}, {256, 128, 8, 16, 8, 2, 0, 0},
    {128, 256, 8, 8, 16, 1, 0, 0}, {256, 128, 8, 16, 8, 1, 0, 0}, {128, 128, 8, 16, 8, 2, 0, 0},
    {128, 128, 8, 8, 16, 2, 0, 0},
};

static float next_uniform(uint64_t *s) { /* in [-1, 1) */
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* The worst |c - ref| / sum |a * b| over 300 sampled elements (the last one always). */
static double sampled_error(const float *a, const float *b, const float *c, uint32_t m, uint32_t kd,
                            uint32_t n) {
    double worst = 0.0;
    uint64_t s = 7;
    for (int q = 0; q < 300; q++) {
        uint32_t i = q ? (uint32_t)((next_uniform(&s) + 1.0) * 0.5 * m) % m : m - 1;
        uint32_t j = q ? (uint32_t)((next_uniform(&s) + 1.0) * 0.5 * n) % n : n - 1;
        double ref = 0.0, mag = 0.0;
        for (uint32_t p = 0; p < kd; p++) {
            double t = (double)a[(size_t)i * kd + p] * b[(size_t)p * n + j];
            ref += t;
            mag += fabs(t);
        }
        double e = fabs(c[(size_t)i * n + j] - ref) / (mag > 1e-30 ? mag : 1.0);
        worst = e <= worst ? worst : (e == e ? e : INFINITY);
    }
    return worst;
}

/* A random m x k (or k x n) matrix on the device as dtype, and on the host as the values the
 * device holds (rounded to f16 by a round trip when dtype is f16). */
static kf_gpu_tensor *random_matrix(kf_context *ctx, uint32_t rows, uint32_t cols, kf_dtype dtype,
                                    uint64_t *seed, kf_tensor **host) {
    kf_shape shape = kf_shape_2d(rows, cols);
    kf_gpu_tensor *g = NULL;
    if (kf_tensor_create(&shape, host) != KF_OK) {
        return NULL;
    }
    for (uint64_t i = 0; i < kf_tensor_size(*host); i++) {
        (*host)->data[i] = next_uniform(seed);
    }
    if (kf_gpu_tensor_from(ctx, *host, dtype, &g) != KF_OK || kf_gpu_tensor_to(g, *host) != KF_OK) {
        kf_gpu_tensor_destroy(g);
        return NULL;
    }
    return g;
}

static void sweep(kf_context *ctx, uint32_t m, uint32_t kd, uint32_t n, bool half,
                  const kf__mm_config *configs, size_t config_count, uint32_t batch) {
    kf_dtype dtype = half ? KF_DTYPE_F16 : KF_DTYPE_F32;
    uint64_t seed = 42u + m + kd + n;
    kf_tensor *a = NULL, *b = NULL, *c = NULL;
    kf_gpu_tensor *ga = random_matrix(ctx, m, kd, dtype, &seed, &a);
    kf_gpu_tensor *gb = random_matrix(ctx, kd, n, dtype, &seed, &b);
    kf_gpu_tensor *gc = NULL;
    kf_shape cs = kf_shape_2d(m, n);
    bool ok = ga && gb && kf_tensor_create(&cs, &c) == KF_OK &&
              kf_gpu_tensor_create(ctx, &cs, dtype, &gc) == KF_OK;
    if (!ok) {
        printf("%ux%ux%u: could not set up (%s)\n", m, kd, n, kf_context_last_error(ctx));
    }
    kf_buffer *bufs[3] = {ga ? ga->buffer : NULL, gb ? gb->buffer : NULL, gc ? gc->buffer : NULL};
    for (size_t i = 0; ok && i < config_count; i++) {
        const kf__mm_config *cfg = &configs[i];
        char name[48];
        kf__mm_config_str(cfg, name, sizeof name);
        kf_kernel *k = kf__matmul_blocked_typed(m, kd, n, cfg, dtype);
        if (!k) {
            printf("%ux%ux%u %-20s invalid\n", m, kd, n, name);
            continue;
        }
        kf_kernel_launch launch = {.buffers = bufs, .buffer_count = 3};
        kf_dispatch d[64];
        kf_timing t;
        if (kf_buffer_fill_u32(bufs[2], 0x7fc07fc0u) != KF_OK || /* NaN in f32 and f16 */
            kf_kernel_dispatch(ctx, k, &launch, &d[0]) != KF_OK) {
            printf("%ux%ux%u %-20s failed: %s\n", m, kd, n, name, kf_context_last_error(ctx));
            kf_kernel_destroy(k);
            continue;
        }
        for (uint32_t r = 1; r < batch; r++) {
            d[r] = d[0];
        }
        if (kf_context_time(ctx, d, batch, 10, &t) != KF_OK || kf_gpu_tensor_to(gc, c) != KF_OK) {
            printf("%ux%ux%u %-20s failed: %s\n", m, kd, n, name, kf_context_last_error(ctx));
            kf_kernel_destroy(k);
            continue;
        }
        t.median_ms /= batch;
        t.min_ms /= batch;
        double err = sampled_error(a->data, b->data, c->data, m, kd, n);
        printf("%ux%ux%u %-20s %9.4f ms %7.2f TFLOP/s  min %9.4f ms  err %.2e%s\n", m, kd, n, name,
               t.median_ms, 2.0 * m * n * (double)kd / (t.median_ms * 1e9), t.min_ms, err,
               err > (half ? 2e-3 : 1e-5) ? "  WRONG" : "");
        fflush(stdout);
        kf_kernel_destroy(k);
    }
    kf_gpu_tensor_destroy(ga);
    kf_gpu_tensor_destroy(gb);
    kf_gpu_tensor_destroy(gc);
    kf_tensor_destroy(a);
    kf_tensor_destroy(b);
    kf_tensor_destroy(c);
}

int main(int argc, char **argv) {
    bool half = false;
    uint32_t shapes[16][3] = {
        {1024, 1024, 1024}, {4096, 4096, 4096}, {8192, 8192, 8192}, {4095, 4093, 4097}};
    int count = 4, given = 0;
    kf__mm_config picked[32];
    size_t picked_count = 0;
    uint32_t batch = 1;
    for (int i = 1; i < argc; i++) {
        uint32_t s[3];
        if (!strcmp(argv[i], "f16") || !strcmp(argv[i], "f32")) {
            half = argv[i][1] == '1';
        } else if (!strcmp(argv[i], "-b") && i + 1 < argc) {
            batch = (uint32_t)atoi(argv[++i]);
            batch = batch < 1 ? 1 : batch > 64 ? 64 : batch;
        } else if (!strcmp(argv[i], "-c") && i + 1 < argc && picked_count < 32) {
            if (!kf__mm_config_parse(argv[++i], &picked[picked_count++])) {
                fprintf(stderr, "kfuse_matmul_sweep: '%s' is not a valid tile\n", argv[i]);
                return 2;
            }
        } else if (sscanf(argv[i], "%ux%ux%u", &s[0], &s[1], &s[2]) == 3 && s[0] && s[1] && s[2] &&
                   given < 16) {
            memcpy(shapes[given++], s, sizeof s);
        } else {
            fprintf(stderr,
                    "usage: kfuse_matmul_sweep [f32|f16] [-b N] [-c TILE ...] [MxKxN ...]\n");
            return 2;
        }
    }
    count = given ? given : count;
    kf_context *ctx = NULL;
    kf_context_desc desc = {0};
    if (kf_context_create(&desc, &ctx) != KF_OK) {
        fprintf(stderr, "kfuse_matmul_sweep: no device\n");
        return 1;
    }
    kf_adapter_info info;
    kf_context_adapter_info(ctx, &info);
    printf("%s (%s), %s, bounds clamping %s\n", info.device, info.backend, half ? "f16" : "f32",
           info.unchecked_access ? "off" : "on");
    if (half && !info.has_f16) {
        printf("the device has no shader-f16\n");
    } else {
        for (int i = 0; i < count; i++) {
            if (picked_count) {
                sweep(ctx, shapes[i][0], shapes[i][1], shapes[i][2], half, picked, picked_count,
                      batch);
            } else {
                sweep(ctx, shapes[i][0], shapes[i][1], shapes[i][2], half, g_configs,
                      sizeof g_configs / sizeof g_configs[0], batch);
            }
        }
    }
    kf_context_destroy(ctx);
    return 0;
}
