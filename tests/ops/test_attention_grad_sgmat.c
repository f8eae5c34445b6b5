/* attention_grad_sgmat.c's dk / dv kernel in the interpreter (which emulates subgroup matrices)
 * against a float64 backward of the f16-rounded inputs: T of 16, 48 (a workgroup's second
 * subgroup past T, 16-query tiles) and 96, D 16, 64 and 128, causal and not, dk and dv alone and
 * as the pair; every element, outputs poisoned, a guard band after each; and the same on the GPU
 * where the device has subgroup matrices (T 1024 too). The dq kernel of the same file (dq, g' and
 * the pair) likewise. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "ops/attention_sgmat.h"
#include "ops/matmul_sgmat.h"

enum { GUARD = 32 };
static const uint16_t POISON = 0x7e00u; /* an f16 NaN */

typedef struct grad_case {
    uint32_t bh, t, d;
    bool causal;
    /* g's lse 2 below the true one, so P reaches e^2 (the operator takes g as given: kfuse
     * verify draws it at random) */
    bool low_lse;
} grad_case;

/* The inputs: q, k, v (f16) and g = [dy | lse | delta] (f32) with lse and delta exact for q, k,
 * v and dy; and dk, dv in float64 from them, taking g's lse and delta as the kernel does. */
typedef struct grad_data {
    uint16_t *q, *k, *v;
    float *g;
    double *dk, *dv;
    double *dq;    /* exact whatever g's lse and delta are (attention_grad_q's spec) */
    double *stats; /* each row's exact lse and delta (g' of attention_grad_stats) */
} grad_data;

static double h2d(uint16_t x) {
    return kf__half_to_float(x);
}

static grad_data make_data(const grad_case *c, float scale) {
    const uint32_t t = c->t, d = c->d;
    const uint64_t n = (uint64_t)c->bh * t * d;
    grad_data g = {
        malloc(2 * n), malloc(2 * n), malloc(2 * n), malloc(4 * (uint64_t)c->bh * t * (d + 2)),
        calloc(n, 8),  calloc(n, 8),  calloc(n, 8),  calloc(2 * (uint64_t)c->bh * t, 8)};
    for (uint64_t i = 0; i < n; i++) {
        g.q[i] = kf__half_from_float(kt_rand_f32(-2.0f, 2.0f));
        g.k[i] = kf__half_from_float(kt_rand_f32(-2.0f, 2.0f));
        g.v[i] = kf__half_from_float(kt_rand_f32(-1.0f, 1.0f));
    }
    double *p = malloc(sizeof(double) * t), *o = malloc(sizeof(double) * d);
    for (uint32_t h = 0; h < c->bh; h++) {
        const uint64_t base = (uint64_t)h * t;
        for (uint32_t i = 0; i < t; i++) {
            float *gr = g.g + (base + i) * (d + 2);
            for (uint32_t e = 0; e < d; e++) {
                gr[e] = kt_rand_f32(-1.0f, 1.0f);
            }
            uint32_t last = c->causal ? i : t - 1;
            double m = -INFINITY, l = 0;
            for (uint32_t j = 0; j <= last; j++) {
                double s = 0;
                for (uint32_t e = 0; e < d; e++) {
                    s += h2d(g.q[(base + i) * d + e]) * h2d(g.k[(base + j) * d + e]);
                }
                p[j] = s * scale;
                m = fmax(m, p[j]);
            }
            for (uint32_t j = 0; j <= last; j++) {
                l += exp(p[j] - m);
            }
            double lse = m + log(l), delta = 0;
            for (uint32_t e = 0; e < d; e++) {
                o[e] = 0;
                for (uint32_t j = 0; j <= last; j++) {
                    o[e] += exp(p[j] - lse) * h2d(g.v[(base + j) * d + e]);
                }
                delta += (double)gr[e] * o[e];
            }
            gr[d] = (float)(c->low_lse ? lse - 2 : lse);
            gr[d + 1] = (float)(c->low_lse ? delta + 0.25 : delta);
            g.stats[2 * (base + i)] = lse;
            g.stats[2 * (base + i) + 1] = delta;
            /* dk and dv with g's (f32) lse and delta; dq with the exact ones */
            for (uint32_t j = 0; j <= last; j++) {
                double pij = exp(p[j] - (double)gr[d]), dp = 0, pex = exp(p[j] - lse);
                for (uint32_t e = 0; e < d; e++) {
                    dp += (double)gr[e] * h2d(g.v[(base + j) * d + e]);
                }
                double ds = pij * (dp - (double)gr[d + 1]), dsex = pex * (dp - delta);
                for (uint32_t e = 0; e < d; e++) {
                    g.dv[(base + j) * d + e] += pij * gr[e];
                    g.dk[(base + j) * d + e] += scale * ds * h2d(g.q[(base + i) * d + e]);
                    g.dq[(base + i) * d + e] += scale * dsex * h2d(g.k[(base + j) * d + e]);
                }
            }
        }
    }
    free(p);
    free(o);
    return g;
}

static void free_data(grad_data *g) {
    free(g->q), free(g->k), free(g->v), free(g->g), free(g->dk), free(g->dv), free(g->dq);
    free(g->stats);
}

/* Every element of got (f16) against want: 2e-3 relative to max(|want|, 1% of the tensor's
 * rms), as verification measures f16 operators (src/ops/verify.c: a key row that only the last
 * queries see has a dk near f16's subnormals, which no f16 result carries to 2e-3 of itself);
 * the guard band untouched. */
static bool check(const char *what, const char *where, const grad_case *c, const uint16_t *got,
                  const double *want) {
    const uint64_t n = (uint64_t)c->bh * c->t * c->d;
    double ss = 0;
    for (uint64_t i = 0; i < n; i++) {
        ss += want[i] * want[i];
    }
    const double floor = ss > 0 ? 0.01 * sqrt(ss / (double)n) : 1e-6;
    double worst = 0;
    uint64_t bad = 0, first = 0;
    for (uint64_t i = 0; i < n; i++) {
        double w = want[i], x = h2d(got[i]), err = fabs(x - w) / fmax(fabs(w), floor);
        worst = err > worst || err != err ? err : worst;
        if (!(err <= 2e-3) && !bad++) {
            first = i;
        }
    }
    if (bad) {
        kt_fail(__FILE__, __LINE__,
                "%s T %u D %u%s: %s wrong in %llu of %llu elements (worst error %.2g), the "
                "first [row %llu][%llu] = %g, want %g",
                where, c->t, c->d, c->causal ? " causal" : "", what, (unsigned long long)bad,
                (unsigned long long)n, worst, (unsigned long long)(first / c->d),
                (unsigned long long)(first % c->d), h2d(got[first]), want[first]);
        return false;
    }
    printf("    %s T %u D %u%s: %s worst error %.2g\n", where, c->t, c->d,
           c->causal ? " causal" : "", what, worst);
    for (uint64_t i = n; i < n + GUARD; i++) {
        if (got[i] != POISON) {
            kt_fail(__FILE__, __LINE__, "%s: %s's guard band written at %llu", where, what,
                    (unsigned long long)i);
            return false;
        }
    }
    return true;
}

/* Runs k with the buffers bufs (sizes in bytes; the first four the inputs q, k, v, g, the rest
 * outputs, read back into bufs) on ctx, or with ctx NULL in the interpreter with subgroups of
 * sg and f16 casts rounded or kept wide. */
static bool execute(kf_context *ctx, kf_kernel *k, uint32_t sg, bool unrounded, void *const *bufs,
                    const uint64_t *sizes, uint32_t count) {
    bool ok = true;
    if (ctx) {
        kf_buffer *gpu[6] = {0};
        for (uint32_t b = 0; b < count; b++) {
            ok = ok && kf_buffer_create(ctx, sizes[b], &gpu[b]) == KF_OK &&
                 kf_buffer_upload(gpu[b], 0, bufs[b], sizes[b]) == KF_OK;
        }
        kf_kernel_launch launch = {.buffers = gpu, .buffer_count = count};
        if (ok && kf_kernel_run(ctx, k, &launch) != KF_OK) {
            kt_fail(__FILE__, __LINE__, "run: %s / %s", kf_context_last_error(ctx),
                    kf_kernel_error(k));
            ok = false;
        }
        for (uint32_t b = 4; ok && b < count; b++) {
            ok = kf_buffer_download(gpu[b], 0, bufs[b], sizes[b]) == KF_OK;
        }
        for (uint32_t b = 0; b < count; b++) {
            kf_buffer_destroy(gpu[b]);
        }
        return ok;
    }
    kf_host_buffer host[6];
    for (uint32_t b = 0; b < count; b++) {
        host[b] = (kf_host_buffer){bufs[b], sizes[b]};
    }
    kf_interp_desc d = {.buffers = host,
                        .buffer_count = count,
                        .subgroup_size = sg,
                        .f16_casts_unrounded = unrounded};
    if (kf_kernel_interpret(k, &d) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "interpret %s: %s", kf_kernel_name(k), kf_kernel_error(k));
        ok = false;
    }
    return ok;
}

static const char *where_of(kf_context *ctx, bool unrounded) {
    return ctx ? "GPU" : unrounded ? "interpreter (casts kept wide)" : "interpreter";
}

/* The dk kernel (dk: want_a, dv: want_b) or the dq kernel (dq, g') for case c in tiling (NULL:
 * its default), its description into *a; NULL (a failure reported) where it does not build. */
static kf_kernel *build(const grad_case *c, uint32_t sg, const char *tiling, bool q_side,
                        bool want_a, bool want_b, kf__attn_desc *a) {
    *a = (kf__attn_desc){.bh = c->bh, .t = c->t, .d = c->d, .causal = c->causal};
    a->scale = 1.0f / sqrtf((float)c->d);
    kf__attn_grad_tiling tl = {0, 0, 0};
    if (tiling && !kf__attn_grad_tiling_parse(tiling, &tl)) {
        kt_fail(__FILE__, __LINE__, "tiling %s does not parse", tiling);
        return NULL;
    }
    kf_kernel *k = q_side ? kf__attention_grad_q_sgmat(a, sg, 0, want_a, want_b, &tl)
                          : kf__attention_grad_kv_sgmat(a, sg, 0, want_a, want_b, &tl);
    if (!k || kf_kernel_status(k) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "no kernel for T %u D %u (%s): %s", c->t, c->d,
                tiling ? tiling : "default", k ? kf_kernel_error(k) : "NULL");
        kf_kernel_destroy(k);
        return NULL;
    }
    return k;
}

static uint16_t *poisoned_f16(uint64_t n) {
    uint16_t *x = malloc(2 * (n + GUARD));
    for (uint64_t i = 0; i < n + GUARD; i++) {
        x[i] = POISON;
    }
    return x;
}

/* Builds the kernel (dk, dv or both; tiling "WxC[/slots]", NULL: its default), runs it on ctx
 * (NULL: the interpreter with subgroups of sg) and checks what it computes. */
static bool run_case_casts(kf_context *ctx, uint32_t sg, const grad_case *c, bool want_dk,
                           bool want_dv, const char *tiling, bool unrounded) {
    kf__attn_desc a;
    kf_kernel *k = build(c, sg, tiling, false, want_dk, want_dv, &a);
    if (!k) {
        return false;
    }
    grad_data g = make_data(c, a.scale);
    const uint64_t n = (uint64_t)c->bh * c->t * c->d, gn = (uint64_t)c->bh * c->t * (c->d + 2);
    uint16_t *out[2] = {poisoned_f16(n), poisoned_f16(n)};
    const bool both = want_dk && want_dv;
    /* the bindings: q, k, v, g, [dv], out */
    void *bufs[6] = {g.q, g.k, g.v, g.g, out[0], out[1]};
    const uint64_t sizes[6] = {2 * n, 2 * n, 2 * n, 4 * gn, 2 * (n + GUARD), 2 * (n + GUARD)};
    const char *where = where_of(ctx, unrounded);
    bool ok = execute(ctx, k, sg, unrounded, bufs, sizes, both ? 6 : 5);
    /* with both, dv is the binding before out (out[0]) and dk is out (out[1]) */
    if (ok && want_dk) {
        ok = check("dk", where, c, out[both ? 1 : 0], g.dk);
    }
    if (ok && want_dv) {
        ok = check("dv", where, c, out[0], g.dv);
    }
    free(out[0]);
    free(out[1]);
    free_data(&g);
    kf_kernel_destroy(k);
    return ok;
}

/* g' (f32, rows of d + 2) against g's dy (copied exactly) and the exact lse and delta: lse to
 * 1e-5 absolute, delta to 1e-4 of max(|delta|, the rows' rms); the guard band untouched. */
static bool check_stats(const char *where, const grad_case *c, const float *got,
                        const grad_data *g) {
    const uint64_t rows = (uint64_t)c->bh * c->t, d = c->d;
    double ss = 0, worst_lse = 0, worst_delta = 0;
    for (uint64_t r = 0; r < rows; r++) {
        ss += g->stats[2 * r + 1] * g->stats[2 * r + 1];
    }
    const double floor = fmax(sqrt(ss / (double)rows), 1e-6);
    for (uint64_t r = 0; r < rows; r++) {
        const float *row = got + r * (d + 2), *dy = g->g + r * (d + 2);
        if (memcmp(row, dy, 4 * d)) {
            kt_fail(__FILE__, __LINE__, "%s T %u D %u: g' row %llu's dy is not g's", where, c->t,
                    c->d, (unsigned long long)r);
            return false;
        }
        double el = fabs(row[d] - g->stats[2 * r]);
        double ed = fabs(row[d + 1] - g->stats[2 * r + 1]) / fmax(fabs(g->stats[2 * r + 1]), floor);
        worst_lse = el > worst_lse || el != el ? el : worst_lse;
        worst_delta = ed > worst_delta || ed != ed ? ed : worst_delta;
    }
    if (!(worst_lse <= 1e-5) || !(worst_delta <= 1e-4)) {
        kt_fail(__FILE__, __LINE__, "%s T %u D %u%s: g' wrong: lse off by %.2g, delta by %.2g",
                where, c->t, c->d, c->causal ? " causal" : "", worst_lse, worst_delta);
        return false;
    }
    for (uint64_t i = rows * (d + 2); i < rows * (d + 2) + GUARD; i++) {
        if (!isnan(got[i])) {
            kt_fail(__FILE__, __LINE__, "%s: g's guard band written at %llu", where,
                    (unsigned long long)i);
            return false;
        }
    }
    printf("    %s T %u D %u%s: g' lse within %.2g, delta %.2g\n", where, c->t, c->d,
           c->causal ? " causal" : "", worst_lse, worst_delta);
    return true;
}

/* The dq kernel (dq, g' or both), as run_case_casts. */
static bool run_q_case_casts(kf_context *ctx, uint32_t sg, const grad_case *c, bool want_dq,
                             bool want_stats, const char *tiling, bool unrounded) {
    kf__attn_desc a;
    kf_kernel *k = build(c, sg, tiling, true, want_dq, want_stats, &a);
    if (!k) {
        return false;
    }
    grad_data g = make_data(c, a.scale);
    const uint64_t n = (uint64_t)c->bh * c->t * c->d, gn = (uint64_t)c->bh * c->t * (c->d + 2);
    uint16_t *dq = poisoned_f16(n);
    float *stats = malloc(4 * (gn + GUARD));
    for (uint64_t i = 0; i < gn + GUARD; i++) {
        stats[i] = NAN;
    }
    /* the bindings: q, k, v, g, [stats], out */
    void *bufs[6] = {g.q, g.k, g.v, g.g, want_dq ? (void *)dq : stats, dq};
    uint64_t sizes[6] = {2 * n, 2 * n, 2 * n, 4 * gn, 2 * (n + GUARD), 2 * (n + GUARD)};
    if (want_stats) {
        sizes[4] = 4 * (gn + GUARD);
        bufs[4] = stats;
    }
    const char *where = where_of(ctx, unrounded);
    bool ok = execute(ctx, k, sg, unrounded, bufs, sizes, want_dq && want_stats ? 6 : 5);
    if (ok && want_dq) {
        ok = check("dq", where, c, dq, g.dq);
        /* the first causal query sees one key (P = 1): its dq is exactly 0, as the FMA kernel
         * and the spec have it, not a rounding within the tolerance */
        for (uint32_t h = 0; ok && c->causal && h < c->bh; h++) {
            for (uint32_t e = 0; ok && e < c->d; e++) {
                uint16_t x = dq[(uint64_t)h * c->t * c->d + e];
                if (x != 0 && x != 0x8000u) {
                    kt_fail(__FILE__, __LINE__, "%s: head %u's first dq[%u] = %g, not 0", where, h,
                            e, h2d(x));
                    ok = false;
                }
            }
        }
    }
    if (ok && want_stats) {
        ok = check_stats(where, c, stats, &g);
    }
    free(dq);
    free(stats);
    free_data(&g);
    kf_kernel_destroy(k);
    return ok;
}

/* run_case_casts in the interpreter with f16 casts rounding (as WGSL says) and then kept wide
 * (as the H200's driver does: kf_interp_desc.f16_casts_unrounded); once on a GPU. */
static bool run_case(kf_context *ctx, uint32_t sg, const grad_case *c, bool want_dk, bool want_dv,
                     const char *tiling) {
    bool ok = run_case_casts(ctx, sg, c, want_dk, want_dv, tiling, false);
    return ok && (ctx || run_case_casts(ctx, sg, c, want_dk, want_dv, tiling, true));
}

static bool run_q_case(kf_context *ctx, uint32_t sg, const grad_case *c, bool want_dq,
                       bool want_stats, const char *tiling) {
    bool ok = run_q_case_casts(ctx, sg, c, want_dq, want_stats, tiling, false);
    return ok && (ctx || run_q_case_casts(ctx, sg, c, want_dq, want_stats, tiling, true));
}

static const grad_case interp_cases[] = {
    {1, 16, 16, true, false},  {2, 48, 64, true, false},  {1, 48, 64, false, false},
    {1, 96, 128, true, false}, {1, 64, 32, false, false}, {1, 64, 64, true, true},
};

KT_CPU_TEST(ops, attention_grad_sgmat_interpreter) {
    for (size_t i = 0; i < sizeof interp_cases / sizeof interp_cases[0]; i++) {
        const grad_case *c = &interp_cases[i];
        KT_CHECK(run_case(NULL, 32, c, true, true, NULL), "pair, case %zu", i);
    }
    const grad_case one = {1, 64, 64, true, false};
    KT_CHECK(run_case(NULL, 32, &one, true, false, NULL), "dk alone");
    KT_CHECK(run_case(NULL, 32, &one, false, true, NULL), "dv alone");
    KT_CHECK(run_case(NULL, 16, &one, true, true, NULL), "subgroups of 16");
    KT_CHECK(run_case(NULL, 32, &one, true, true, "1x16"), "1 subgroup, 16 queries");
    KT_CHECK(run_case(NULL, 32, &one, true, true, "4x16/2"), "4x16, two pairs of slots");
    /* P^T and dS^T taking turns in one pair of slots (as the pair, and alone) */
    const grad_case wide = {1, 96, 128, true, true};
    KT_CHECK(run_case(NULL, 32, &one, true, true, "4x32/1"), "4x32, one pair of slots");
    KT_CHECK(run_case(NULL, 32, &wide, true, true, "2x32/1"), "2x32 D 128, one pair");
    KT_CHECK(run_case(NULL, 32, &one, true, false, "4x32/1"), "dk alone, one pair");
    KT_CHECK(run_case(NULL, 32, &one, false, true, "4x32/1"), "dv alone, one pair");
}

KT_CPU_TEST(ops, attention_grad_sgmat_refuses) {
    kf__attn_desc a = {.bh = 1, .t = 40, .d = 64, .causal = true, .scale = 0.125f};
    KT_CHECK(!kf__attention_grad_kv_sgmat(&a, 32, 0, true, true, NULL), "T 40 built");
    a.t = 64, a.d = 24;
    KT_CHECK(!kf__attention_grad_kv_sgmat(&a, 32, 0, true, true, NULL), "D 24 built");
    a.d = 64;
    KT_CHECK(!kf__attention_grad_kv_sgmat(&a, 32, 0, false, false, NULL), "nothing asked built");
    KT_CHECK(!kf__attention_grad_kv_sgmat(&a, 32, 4096, true, true, NULL), "4 KB built");
}

/* The GPU tests' cases, each run whether or not the one before failed (the dq kernel's take
 * case 5 with a low lse instead). */
static const grad_case gpu_cases[] = {
    {1, 16, 16, false, false},  {1, 16, 16, true, false},    {2, 64, 64, true, true},
    {2, 48, 64, true, false},   {1, 96, 128, true, false},   {1, 64, 64, false, false},
    {4, 1024, 64, true, false}, {2, 1024, 128, true, false}, {2, 1024, 128, false, false},
};

static bool run_gpu_cases(kf_context *ctx, uint32_t sg, bool dq) {
    bool ok = true;
    for (size_t i = 0; i < sizeof gpu_cases / sizeof gpu_cases[0]; i++) {
        grad_case c = gpu_cases[i];
        c.low_lse = c.low_lse || (dq && i == 5);
        bool one = dq ? run_q_case(ctx, sg, &c, true, true, NULL)
                      : run_case(ctx, sg, &c, true, true, NULL);
        if (!one) {
            printf("    case %zu (T %u D %u%s) failed\n", i, c.t, c.d, c.causal ? " causal" : "");
        }
        ok = ok && one;
    }
    return ok;
}

KT_TEST(ops, attention_grad_sgmat_gpu) {
    KT_NEED_GPU(ctx);
    uint32_t sg = 0;
    if (!kf__sgmat_usable(ctx, &sg)) {
        printf("    (no subgroup matrices: skipped)\n");
        return;
    }
    bool ok = run_gpu_cases(ctx, sg, false);
    const grad_case small = {1, 16, 16, false, false}, mid = {2, 256, 64, true, false};
    ok = run_case(ctx, sg, &small, true, false, NULL) && ok;
    ok = run_case(ctx, sg, &small, false, true, NULL) && ok;
    ok = run_case(ctx, sg, &mid, true, false, NULL) && ok;
    ok = run_case(ctx, sg, &mid, false, true, NULL) && ok;
    ok = run_case(ctx, sg, &mid, true, true, "1x16") && ok;
    ok = run_case(ctx, sg, &mid, true, true, "4x16/2") && ok;
    ok = run_case(ctx, sg, &mid, true, true, "4x16/1") && ok;
    ok = run_case(ctx, sg, &mid, true, true, "4x32/1") && ok;
    KT_CHECK(ok, "a case failed (above)");
}

/* The dq kernel: dq with g' (the pair the planner runs), each alone, and the tilings; g's lse
 * and delta off the true ones (low_lse) where dq and g' must come out exact all the same. */
KT_CPU_TEST(ops, attention_grad_q_sgmat_interpreter) {
    for (size_t i = 0; i < sizeof interp_cases / sizeof interp_cases[0]; i++) {
        const grad_case *c = &interp_cases[i];
        KT_CHECK(run_q_case(NULL, 32, c, true, true, NULL), "pair, case %zu", i);
    }
    const grad_case one = {1, 64, 64, true, false}, low = {1, 64, 32, false, true};
    KT_CHECK(run_q_case(NULL, 32, &one, true, false, NULL), "dq alone");
    KT_CHECK(run_q_case(NULL, 32, &one, false, true, NULL), "g' alone");
    KT_CHECK(run_q_case(NULL, 32, &low, false, true, NULL), "g' alone, g's lse low");
    KT_CHECK(run_q_case(NULL, 16, &one, true, true, NULL), "subgroups of 16");
    KT_CHECK(run_q_case(NULL, 32, &one, true, true, "1x16"), "1 subgroup, 16 keys");
    KT_CHECK(run_q_case(NULL, 32, &one, true, true, "4x16/2"), "4x16, two pairs of slots");
    KT_CHECK(run_q_case(NULL, 32, &one, true, true, "2x32"), "2 subgroups, 32 keys");
    const grad_case wide = {1, 96, 128, true, true};
    KT_CHECK(run_q_case(NULL, 32, &wide, true, true, "4x32/1"), "4x32 D 128, one pair of slots");
    KT_CHECK(run_q_case(NULL, 32, &one, true, false, "2x16/1"), "dq alone, one pair");
}

KT_CPU_TEST(ops, attention_grad_sgmat_tilings_parse_and_fit) {
    kf__attn_grad_tiling t;
    KT_CHECK(kf__attn_grad_tiling_parse("4x32/1", &t) && t.subgroups == 4 && t.tile == 32 &&
                 t.slots == 1,
             "4x32/1");
    KT_CHECK(kf__attn_grad_tiling_parse("2x16", &t) && t.slots == 0, "2x16");
    KT_CHECK(!kf__attn_grad_tiling_parse("4x", &t) && !kf__attn_grad_tiling_parse("4x32/3", &t) &&
                 !kf__attn_grad_tiling_parse("0x16", &t) && !kf__attn_grad_tiling_parse("", &t),
             "bad tilings parsed");
    /* the defaults (within 48 KiB: 4 subgroups, 16-row tiles, the slots as measured) */
    kf__attn_desc a = {.bh = 1, .t = 4096, .d = 64, .causal = true, .scale = 0.125f};
    static const struct {
        bool dq;
        uint32_t d;
        const char *name;
    } defaults[] = {{false, 64, "kv_sgmat_64x16_1_causal"},
                    {false, 128, "kv_sgmat_64x16_1_causal"},
                    {true, 64, "q_stats_sgmat_64x16_1_causal"},
                    {true, 128, "q_stats_sgmat_64x16_causal"}};
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) {
        a.d = defaults[i].d;
        kf_kernel *k = defaults[i].dq ? kf__attention_grad_q_sgmat(&a, 32, 0, true, true, NULL)
                                      : kf__attention_grad_kv_sgmat(&a, 32, 0, true, true, NULL);
        KT_CHECK(k && strstr(kf_kernel_name(k), defaults[i].name), "D %u: %s, want %s",
                 defaults[i].d, k ? kf_kernel_name(k) : "none", defaults[i].name);
        kf_kernel_destroy(k);
    }
    KT_CHECK(kf__attention_grad_kv_sgmat_bytes(4, 32, 64, 1) <= 49152 &&
                 kf__attention_grad_kv_sgmat_bytes(4, 32, 64, 2) > 49152,
             "the slots' bytes");
}

/* The workgroup memory kernel k declares, from its WGSL ("var<workgroup> name: array<T, N>"). */
static uint32_t declared_bytes(kf_kernel *k) {
    char *wgsl = kf_kernel_emit_wgsl(k);
    uint32_t total = 0;
    for (const char *at = wgsl; at && (at = strstr(at, "var<workgroup>")) != NULL; at++) {
        const char *arr = strstr(at, "array<");
        const char *comma = arr ? strchr(arr, ',') : NULL;
        if (!comma) {
            break;
        }
        uint32_t elem = !strncmp(arr + 6, "f16", 3) ? 2 : 4, count = (uint32_t)atoi(comma + 1);
        if (!strncmp(arr + 6, "vec", 3)) {
            elem = (uint32_t)(arr[9] - '0') * (strstr(arr, "f16>") < comma ? 2 : 4);
        }
        total += elem * count;
    }
    kf_free(wgsl);
    return total;
}

/* Both kernels' bytes functions against what each role and tiling declares: never less (the
 * choice of tiling trusts them to stay within the device's 48 KiB), and within 48 KiB. */
KT_CPU_TEST(ops, attention_grad_sgmat_bytes_cover_the_kernels) {
    static const char *const tilings[] = {"4x16/1", "4x16/2", "4x32/1", "2x32/2", "1x16/2"};
    for (uint32_t d = 64; d <= 128; d += 64) {
        kf__attn_desc a = {.bh = 1, .t = 256, .d = d, .causal = true, .scale = 0.125f};
        for (size_t ti = 0; ti < sizeof tilings / sizeof tilings[0]; ti++) {
            kf__attn_grad_tiling tl;
            KT_CHECK(kf__attn_grad_tiling_parse(tilings[ti], &tl), "%s", tilings[ti]);
            for (uint32_t role = 0; role < 6; role++) {
                bool q_side = role >= 3, x = role % 3 != 1, y = role % 3 != 0;
                kf_kernel *k = q_side ? kf__attention_grad_q_sgmat(&a, 32, 0, x, y, &tl)
                                      : kf__attention_grad_kv_sgmat(&a, 32, 0, x, y, &tl);
                uint32_t want =
                    q_side
                        ? kf__attention_grad_q_sgmat_bytes(tl.subgroups, tl.tile, d, 32, tl.slots)
                        : kf__attention_grad_kv_sgmat_bytes(tl.subgroups, tl.tile, d, tl.slots);
                if (!k) { /* it does not fit: the bytes function said so */
                    KT_CHECK(want > 49152, "D %u %s role %u: no kernel, %u bytes counted", d,
                             tilings[ti], role, want);
                    continue;
                }
                uint32_t got = declared_bytes(k);
                KT_CHECK(got > 0 && got <= want && got <= 49152,
                         "D %u %s role %u (%s): %u bytes declared, %u counted", d, tilings[ti],
                         role, kf_kernel_name(k), got, want);
                kf_kernel_destroy(k);
            }
        }
    }
}

KT_CPU_TEST(ops, attention_grad_q_sgmat_refuses) {
    kf__attn_desc a = {.bh = 1, .t = 40, .d = 64, .causal = true, .scale = 0.125f};
    KT_CHECK(!kf__attention_grad_q_sgmat(&a, 32, 0, true, true, NULL), "T 40 built");
    a.t = 64, a.d = 24;
    KT_CHECK(!kf__attention_grad_q_sgmat(&a, 32, 0, true, true, NULL), "D 24 built");
    a.d = 64;
    KT_CHECK(!kf__attention_grad_q_sgmat(&a, 32, 0, false, false, NULL), "nothing asked built");
    KT_CHECK(!kf__attention_grad_q_sgmat(&a, 32, 4096, true, true, NULL), "4 KB built");
    KT_CHECK(!kf__attention_grad_q_sgmat(&a, 24, 0, true, true, NULL), "subgroups of 24 built");
}

KT_TEST(ops, attention_grad_q_sgmat_gpu) {
    KT_NEED_GPU(ctx);
    uint32_t sg = 0;
    if (!kf__sgmat_usable(ctx, &sg)) {
        printf("    (no subgroup matrices: skipped)\n");
        return;
    }
    bool ok = run_gpu_cases(ctx, sg, true);
    const grad_case mid = {2, 256, 64, true, false};
    ok = run_q_case(ctx, sg, &mid, true, false, NULL) && ok;
    ok = run_q_case(ctx, sg, &mid, false, true, NULL) && ok;
    ok = run_q_case(ctx, sg, &mid, true, true, "1x16") && ok;
    ok = run_q_case(ctx, sg, &mid, true, true, "4x16/2") && ok;
    ok = run_q_case(ctx, sg, &mid, true, true, "4x16/1") && ok;
    ok = run_q_case(ctx, sg, &mid, true, true, "4x32/1") && ok;
    KT_CHECK(ok, "a case failed (above)");
}

/* A graph's q, k and v as views of one qkv tensor (the GPT's slices, reshaped and permuted), f16,
 * with their gradient: where the device has subgroup matrices the planner copies the views
 * (the forward's and the backward's subgroup-matrix kernels load q, k, v row-major) and runs
 * dq + g' and dk + dv on them, and the plan verifies against the float64 specs. */
KT_TEST(ops, attention_grad_sgmat_views_are_copied_gpu) {
    KT_NEED_GPU(ctx);
    uint32_t sg = 0;
    if (!kf__sgmat_usable(ctx, &sg)) {
        printf("    (no subgroup matrices: skipped)\n");
        return;
    }
    static const char text[] =
        "qkv: f16[256, 192]\n"
        "q = slice(qkv, axis=-1, start=0, length=64) |> reshape(shape=[2, 128, 2, 32]) |> "
        "permute(axes=[0, 2, 1, 3])\n"
        "k = slice(qkv, axis=-1, start=64, length=64) |> reshape(shape=[2, 128, 2, 32]) |> "
        "permute(axes=[0, 2, 1, 3])\n"
        "v = slice(qkv, axis=-1, start=128, length=64) |> reshape(shape=[2, 128, 2, 32]) |> "
        "permute(axes=[0, 2, 1, 3])\n"
        "o = attention(q, k, v, causal=true)\n"
        "loss = sum(sum(sum(sum(o |> square))))\n"
        "dqkv = grad(loss, qkv)\n"
        "out o, dqkv\n";
    kf_graph *g = NULL;
    kf_spec_error err;
    KT_CHECK(kf_spec_parse(text, strlen(text), &g, &err) == KF_OK, "%u:%u: %s", err.line,
             err.column, err.message);
    kf_plan *p = NULL;
    KT_CHECK_OK(kf_graph_compile(ctx, g, NULL, &p));
    char *explain = kf_plan_explain(p, true); /* with the WGSL: the kernels' names */
    KT_CHECK(explain, "explain");
    KT_CHECK(strstr(explain, "attention_grad_q_stats_sgmat_") &&
                 strstr(explain, "attention_grad_kv_sgmat_"),
             "the backward is not on subgroup matrices:\n%s", explain);
    kf_free(explain);
    kf_plan_report rep;
    kf_status st = kf_plan_verify(p, kt_rand_u64(), &rep);
    KT_CHECK(st == KF_OK && rep.passed, "verify: %s (%u of %u groups failed)", kf_status_str(st),
             rep.failed_groups, rep.total_groups);
    kf_plan_destroy(p);
    kf_graph_destroy(g);
}
