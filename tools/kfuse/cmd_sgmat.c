/* kfuse sgmat: times the subgroup-matrix (tensor core) f16 matmul's tile configurations on this
 * device, with and without a fused bias + GELU tail, and checks sampled elements of every result
 * against a float64 product of the f16-rounded inputs. A measuring tool for choosing the
 * defaults in src/ops/matmul_sgmat.c; nothing is cached. */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/matmul_sgmat.h"
#include "core/half.h"

/* The default (the fastest on an H200 in session 6, bench/results/h200-s6-sgmm-*.txt: 2x8
 * subgroups), the default before it (2x4), the default for scalar rows (256x128 of 4x4), then
 * variants of session 6 (two steps of registers ahead, 16-byte fetches, two stages with the
 * registers a step ahead, staging 3) and the small default. Staging 1 and 2 and reading a or b
 * straight from their buffers measured slower in session 5 and are left out. */
static const kf__sgmat_config candidates[] = {
    {128, 256, 32, 2, 8, 1, 8, 0, 0, 0, 0, 0, 0, 0, 0},
    {128, 256, 32, 2, 4, 1, 8, 0, 0, 0, 0, 0, 0, 0, 0},
    {256, 128, 32, 4, 4, 1, 8, 0, 0, 0, 0, 0, 0, 0, 0},
    {128, 256, 32, 2, 8, 1, 8, 0, 0, 0, 0, 0, 2, 0, 0},
    {128, 256, 32, 2, 8, 1, 8, 0, 0, 0, 0, 0, 0, 1, 0},
    {128, 256, 16, 2, 8, 2, 8, 0, 0, 0, 0, 0, 1, 0, 0},
    {128, 256, 32, 2, 8, 1, 8, 0, 3, 0, 0, 0, 0, 0, 0},
    {64, 64, 32, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0},
};

static void usage(FILE *f) {
    fprintf(f, "usage: kfuse sgmat [--shape MxKxN]... [--config "
               "BMxBNxBK/WMxWN/S/G[/D[/T[/R[/P[/L[/O[/V[/B]]]]]]]]]...\n"
               "                   [--repeat N] [--warmup-ms MS] [--no-tail] [--transpose-a]\n"
               "                   [--transpose-b]\n\n"
               "Times the subgroup-matrix f16 matmul (f32 accumulation) per tile configuration,\n"
               "alone and with a fused bias + GELU, in TFLOP/s (2MNK / time), and checks 512\n"
               "sampled elements against float64. Default shapes 4096^3, 8192^3, 4095x4093x4097;\n"
               "default configurations: a built-in list (BM x BN x BK workgroup tile, WM x WN\n"
               "subgroups, S stages, G tile rows per group, D operands read directly: 1 a, 2 b,\n"
               "3 both; T how the tiles are filled: 0 halves stored in lane order, 1 rows and\n"
               "store order chosen against bank conflicts, 2 16x16 blocks copied by subgroup\n"
               "matrices, 3 lane order with rows chosen against conflicts of 8-byte stores;\n"
               "R result matrices per subgroup per store round, 0 the most that fit;\n"
               "P a probe, wrong results, for measuring what limits the kernel: 1 tiles staged\n"
               "once before the K loop, 2 matrices loaded once before it, 3 both;\n"
               "L a's tile layout: 0 as stored, 1 k-major, transposed while staged;\n"
               "O with two stages: 1 keeps the fetched registers a step ahead of the tiles;\n"
               "V 1 fetches 16 bytes at a time where the tiles are whole;\n"
               "B 1 puts no branch around the K loop's staging).\n"
               "--transpose-a / --transpose-b: a stored KxM / b stored NxK (the backward's\n"
               "products). Each kernel first runs for MS ms (default 400) so the clocks are up.\n"
               "Needs subgroup matrices and shader-f16 (on NVIDIA with the pinned Dawn: the\n"
               "vendor-mask layer, tools/vkmask).\n");
}

typedef struct shape3 {
    uint32_t m, k, n;
} shape3;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd_u32(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 32);
}

static float rnd(void) { /* uniform in [-1, 1) */
    return (float)(rnd_u32() >> 8) / 8388608.0f - 1.0f;
}

/* bias then tanh-form GELU on an f16 input, computed in f32 */
static kf_val bias_gelu(kf_kernel *k, kf_val x, void *user) {
    kf_binding bias = *(const kf_binding *)user;
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_val col = kf_binary(k, KF_OP_MOD, kf_kernel_index(k),
                           kf_kernel_override(k, "cols", kf_type_scalar(KF_SCALAR_U32), 1));
    kf_val v = kf_add(k, kf_cast(k, f32, x), kf_cast(k, f32, kf_load(k, bias, col)));
    kf_val u =
        kf_mul(k, kf_lit_f32(k, 0.7978845608f),
               kf_add(k, v, kf_mul(k, kf_lit_f32(k, 0.044715f), kf_mul(k, v, kf_mul(k, v, v)))));
    kf_val y = kf_div(
        k, v,
        kf_add(k, kf_lit_f32(k, 1.0f), kf_call1(k, KF_FN_EXP, kf_mul(k, kf_lit_f32(k, -2.0f), u))));
    return kf_cast(k, kf_type_scalar(KF_SCALAR_F16), y);
}

static kf_kernel *tail_kernel(const uint32_t wg[3]) {
    kf_type h = kf_type_scalar(KF_SCALAR_F16);
    kf_kernel_desc desc = {.name = "bias_gelu", .input = h, .output = h};
    memcpy(desc.workgroup_size, wg, sizeof desc.workgroup_size);
    kf_kernel *t = kf_kernel_create(&desc);
    kf_binding bias = kf_kernel_storage(t, "bias", h, KF_ACCESS_READ);
    kf_kernel_yield(t, bias_gelu(t, kf_kernel_input(t), &bias), kf_kernel_index(t));
    return t;
}

static double gelu_ref(double v) {
    return 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
}

int kf_cmd_sgmat(int argc, char **argv) {
    shape3 shapes[16];
    kf__sgmat_config configs[32];
    uint32_t nshapes = 0, nconfigs = 0, repeat = 10;
    double warmup_ms = 400;
    bool with_tail = true, ta = false, tb = false;
    for (int i = 1; i < argc; i++) {
        if (kf_cli_is_help(argv[i])) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--shape") && i + 1 < argc && nshapes < 16) {
            shape3 *s = &shapes[nshapes++];
            const char *p = argv[++i];
            if (!kf_cli_dim(&p, 1, 65536, &s->m) || *p++ != 'x' ||
                !kf_cli_dim(&p, 1, 65536, &s->k) || *p++ != 'x' ||
                !kf_cli_dim(&p, 1, 65536, &s->n) || *p) {
                fprintf(stderr, "kfuse sgmat: bad shape '%s' (MxKxN)\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--config") && i + 1 < argc && nconfigs < 32) {
            if (!kf__sgmat_config_parse(argv[++i], &configs[nconfigs++])) {
                fprintf(stderr,
                        "kfuse sgmat: bad config '%s' "
                        "(BMxBNxBK/WMxWN/S/G[/D[/T[/R[/P[/L[/O[/V[/B]]]]]]]])\n",
                        argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) {
            uint64_t v;
            if (!kf_cli_number("sgmat", "--repeat", argv[++i], 1, 100000, &v)) {
                return 2;
            }
            repeat = (uint32_t)v;
        } else if (!strcmp(argv[i], "--warmup-ms") && i + 1 < argc) {
            if (!kf_cli_real("sgmat", "--warmup-ms", argv[++i], 0.0, 600000.0, &warmup_ms)) {
                return 2;
            }
        } else if (!strcmp(argv[i], "--no-tail")) {
            with_tail = false;
        } else if (!strcmp(argv[i], "--transpose-a")) {
            ta = true;
        } else if (!strcmp(argv[i], "--transpose-b")) {
            tb = true;
        } else {
            fprintf(stderr, "kfuse sgmat: unknown or incomplete option '%s'%s\n\n", argv[i],
                    !strcmp(argv[i], "--shape") || !strcmp(argv[i], "--config")
                        ? " (at most 16 shapes and 32 configs)"
                        : "");
            usage(stderr);
            return 2;
        }
    }
    if (!nshapes) {
        shapes[nshapes++] = (shape3){4096, 4096, 4096};
        shapes[nshapes++] = (shape3){8192, 8192, 8192};
        shapes[nshapes++] = (shape3){4095, 4093, 4097};
    }
    if (!nconfigs) {
        nconfigs = (uint32_t)(sizeof candidates / sizeof candidates[0]);
        memcpy(configs, candidates, sizeof candidates);
    }
    kf_context *ctx = kf_cli_context();
    if (!ctx) {
        return 1;
    }
    uint32_t sg = 0;
    if (!kf__sgmat_usable(ctx, &sg)) {
        fprintf(stderr, "kfuse sgmat: this device has no usable subgroup matrices (%s)\n",
                kf_context_last_error(ctx));
        kf_context_destroy(ctx);
        return 1;
    }
    kf_adapter_info info;
    kf_context_adapter_info(ctx, &info);
    printf("device: %s; subgroup size %u; robustness %s; %s\n", info.device, sg,
           info.unchecked_access ? "off" : "on",
           ta && tb ? "a^T b^T"
           : ta     ? "a^T b"
           : tb     ? "a b^T"
                    : "a b");
    printf("times: median of %u runs (best run in brackets)\n", repeat);
    printf("%-16s %-30s %10s %8s %8s %10s %8s %8s %9s\n", "shape MxKxN", "config", "ms", "TFLOP/s",
           "(best)", "+tail ms", "TFLOP/s", "(best)", "max err");
    int rc = 0;
    for (uint32_t si = 0; si < nshapes; si++) {
        shape3 s = shapes[si];
        uint64_t na = (uint64_t)s.m * s.k, nb = (uint64_t)s.k * s.n, nc = (uint64_t)s.m * s.n;
        uint16_t *a = malloc(2 * na), *b = malloc(2 * nb), *c = malloc(2 * nc),
                 *bias = malloc(2ull * s.n);
        for (uint64_t i = 0; i < na; i++) {
            a[i] = kf__half_from_float(rnd());
        }
        for (uint64_t i = 0; i < nb; i++) {
            b[i] = kf__half_from_float(rnd());
        }
        for (uint32_t i = 0; i < s.n; i++) {
            bias[i] = kf__half_from_float(rnd());
        }
        kf_buffer *buf[4] = {0};
        bool ok = kf_buffer_create(ctx, 2 * na, &buf[0]) == KF_OK &&
                  kf_buffer_create(ctx, 2 * nb, &buf[1]) == KF_OK &&
                  kf_buffer_create(ctx, 2ull * s.n, &buf[2]) == KF_OK &&
                  kf_buffer_create(ctx, 2 * nc, &buf[3]) == KF_OK &&
                  kf_buffer_upload(buf[0], 0, a, 2 * na) == KF_OK &&
                  kf_buffer_upload(buf[1], 0, b, 2 * nb) == KF_OK &&
                  kf_buffer_upload(buf[2], 0, bias, 2ull * s.n) == KF_OK;
        if (!ok) {
            fprintf(stderr, "kfuse sgmat: buffers: %s\n", kf_context_last_error(ctx));
            rc = 1;
        }
        double flops = 2.0 * s.m * s.k * s.n;
        for (uint32_t ci = 0; ok && ci < nconfigs; ci++) {
            const kf__sgmat_config *cfg = &configs[ci];
            char cname[64], sname[48];
            /* P, L, O, V, B: as far as the last one set */
            char tail_fields[24] = "";
            const uint32_t extra[5] = {cfg->probe, cfg->layout, cfg->order, cfg->vector,
                                       cfg->straight};
            int last = 4;
            while (last >= 0 && !extra[last]) {
                last--;
            }
            for (int e = 0, at = 0; e <= last; e++) {
                at += snprintf(tail_fields + at, sizeof tail_fields - (size_t)at, "/%u", extra[e]);
            }
            snprintf(cname, sizeof cname, "%ux%ux%u/%ux%u/%u/%u/%u/%u/%u%s", cfg->bm, cfg->bn,
                     cfg->bk, cfg->wm, cfg->wn, cfg->stages, cfg->group_m, cfg->direct,
                     cfg->staging, cfg->scratch, tail_fields);
            snprintf(sname, sizeof sname, "%ux%ux%u", s.m, s.k, s.n);
            kf_kernel *mm = kf__matmul_sgmat_transposed(s.m, s.k, s.n, cfg, sg, NULL, ta, tb);
            if (!mm) {
                printf("%-16s %-30s (invalid configuration)\n", sname, cname);
                continue;
            }
            double ms[2] = {NAN, NAN}, best[2] = {NAN, NAN}, worst = 0;
            for (int t = 0; t < (with_tail ? 2 : 1); t++) {
                kf_kernel *k = mm;
                kf_constant cols = {"cols", (double)s.n};
                if (t) {
                    uint32_t wg[3];
                    kf_kernel_workgroup_size(mm, wg);
                    kf_kernel *tk = tail_kernel(wg);
                    k = kf_kernel_then(mm, tk);
                    kf_kernel_destroy(tk);
                }
                kf_buffer *bound[4] = {buf[0], buf[1], t ? buf[2] : buf[3], buf[3]};
                kf_kernel_launch launch = {.buffers = bound,
                                           .buffer_count = t ? 4u : 3u,
                                           .constants = t ? &cols : NULL,
                                           .constant_count = t ? 1u : 0u};
                kf_dispatch d;
                kf_timing timing;
                kf_status st = kf_buffer_fill_u32(buf[3], 0x7e007e00u);
                if (st == KF_OK) {
                    st = kf_kernel_dispatch(ctx, k, &launch, &d);
                }
                /* Keep the GPU busy first: after a pipeline's compilation it idles long enough
                 * to drop its clocks, which the timing's own short warm-up does not restore
                 * (measured: the same kernel timed 3x slower late in a sweep). */
                for (double t0 = now_ms(); st == KF_OK && now_ms() - t0 < warmup_ms;) {
                    st = kf_context_run(ctx, &d, 1);
                }
                if (st == KF_OK) {
                    st = kf_context_time(ctx, &d, 1, repeat, &timing);
                }
                if (st == KF_OK) {
                    st = kf_buffer_download(buf[3], 0, c, 2 * nc);
                }
                if (st != KF_OK) {
                    printf("%-16s %-30s %s: %s %s\n", sname, cname, kf_status_str(st),
                           kf_context_last_error(ctx), kf_kernel_error(k));
                    rc = 1;
                } else {
                    ms[t] = timing.median_ms;
                    best[t] = timing.min_ms;
                    for (int e = 0; e < 512; e++) { /* corners and random elements */
                        uint32_t i = e == 0 ? s.m - 1 : rnd_u32() % s.m;
                        uint32_t j = e == 0 ? s.n - 1 : rnd_u32() % s.n;
                        double ref = 0, mag = 0;
                        for (uint32_t q = 0; q < s.k; q++) {
                            uint64_t ai = ta ? (uint64_t)q * s.m + i : (uint64_t)i * s.k + q;
                            uint64_t bi = tb ? (uint64_t)j * s.k + q : (uint64_t)q * s.n + j;
                            double p = (double)kf__half_to_float(a[ai]) * kf__half_to_float(b[bi]);
                            ref += p;
                            mag += fabs(p);
                        }
                        /* relative to the result, or to the sum of |products| where the sum
                         * cancels; with the tail, to |product| + |bias| where GELU or the bias
                         * add cancel (the product is rounded to f16 before the bias, as in the
                         * unfused plan) */
                        double scale = fmax(fabs(ref), 1e-3 * mag);
                        if (t) {
                            double bj = kf__half_to_float(bias[j]), y = gelu_ref(ref + bj);
                            scale = fmax(fmax(fabs(y), fabs(ref) + fabs(bj)), 1e-3 * mag);
                            ref = y;
                        }
                        double got = kf__half_to_float(c[(uint64_t)i * s.n + j]);
                        double err = fabs(got - ref) / fmax(scale, 0x1p-14);
                        worst = err > worst || err != err ? err : worst;
                    }
                }
                if (k != mm) {
                    kf_kernel_destroy(k);
                }
            }
            /* a probe's results are not the product: its error is not checked */
            char err[16] = "probe";
            if (!cfg->probe) {
                snprintf(err, sizeof err, "%.2g", worst);
            }
            printf("%-16s %-30s %10.4f %8.1f %8.1f %10.4f %8.1f %8.1f %9s\n", sname, cname, ms[0],
                   flops / ms[0] * 1e-9, flops / best[0] * 1e-9, ms[1], flops / ms[1] * 1e-9,
                   flops / best[1] * 1e-9, err);
            fflush(stdout);
            if (!cfg->probe && !(worst <= 5e-3)) {
                rc = 1;
            }
            kf_kernel_destroy(mm);
        }
        for (int i = 0; i < 4; i++) {
            kf_buffer_destroy(buf[i]);
        }
        free(a);
        free(b);
        free(c);
        free(bias);
    }
    kf_context_destroy(ctx);
    return rc;
}
