/* attention_grad_sgmat.c's dk / dv kernel in the interpreter (which emulates subgroup matrices)
 * against a float64 backward of the f16-rounded inputs: T of 16, 48 (a workgroup's second
 * subgroup past T, 16-query tiles) and 96, D 16, 64 and 128, causal and not, dk and dv alone and
 * as the pair; every element, outputs poisoned, a guard band after each; and the same on the GPU
 * where the device has subgroup matrices (T 1024 too). */
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
} grad_data;

static double h2d(uint16_t x) {
    return kf__half_to_float(x);
}

static grad_data make_data(const grad_case *c, float scale) {
    const uint32_t t = c->t, d = c->d;
    const uint64_t n = (uint64_t)c->bh * t * d;
    grad_data g = {malloc(2 * n), malloc(2 * n),
                   malloc(2 * n), malloc(4 * (uint64_t)c->bh * t * (d + 2)),
                   calloc(n, 8),  calloc(n, 8)};
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
            gr[d + 1] = (float)delta;
            /* the backward with g's (f32) lse and delta */
            for (uint32_t j = 0; j <= last; j++) {
                double pij = exp(p[j] - (double)gr[d]), dp = 0;
                for (uint32_t e = 0; e < d; e++) {
                    dp += (double)gr[e] * h2d(g.v[(base + j) * d + e]);
                }
                double ds = pij * (dp - (double)gr[d + 1]);
                for (uint32_t e = 0; e < d; e++) {
                    g.dv[(base + j) * d + e] += pij * gr[e];
                    g.dk[(base + j) * d + e] += scale * ds * h2d(g.q[(base + i) * d + e]);
                }
            }
        }
    }
    free(p);
    free(o);
    return g;
}

static void free_data(grad_data *g) {
    free(g->q), free(g->k), free(g->v), free(g->g), free(g->dk), free(g->dv);
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
                "first [key %llu][%llu] = %g, want %g",
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

/* Builds the kernel (dk, dv or both; tiling w x queries, 0: its default), runs it on ctx (NULL:
 * the interpreter with subgroups of sg) and checks what it computes. */
static bool run_case_casts(kf_context *ctx, uint32_t sg, const grad_case *c, bool want_dk,
                           bool want_dv, uint32_t w, uint32_t queries, bool unrounded) {
    kf__attn_desc a = {.bh = c->bh, .t = c->t, .d = c->d, .causal = c->causal};
    a.scale = 1.0f / sqrtf((float)c->d);
    kf_kernel *k = kf__attention_grad_kv_sgmat(&a, sg, 0, want_dk, want_dv, w, queries);
    if (!k || kf_kernel_status(k) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "no kernel for T %u D %u: %s", c->t, c->d,
                k ? kf_kernel_error(k) : "NULL");
        kf_kernel_destroy(k);
        return false;
    }
    grad_data g = make_data(c, a.scale);
    const uint64_t n = (uint64_t)c->bh * c->t * c->d, gn = (uint64_t)c->bh * c->t * (c->d + 2);
    uint16_t *out[2] = {malloc(2 * (n + GUARD)), malloc(2 * (n + GUARD))};
    for (uint64_t i = 0; i < n + GUARD; i++) {
        out[0][i] = out[1][i] = POISON;
    }
    const bool both = want_dk && want_dv;
    /* the bindings: q, k, v, g, [dv], out */
    const void *ins[4] = {g.q, g.k, g.v, g.g};
    const uint64_t sizes[4] = {2 * n, 2 * n, 2 * n, 4 * gn};
    const uint32_t count = both ? 6 : 5;
    bool ok = true;
    const char *where = ctx ? "GPU" : unrounded ? "interpreter (casts kept wide)" : "interpreter";
    if (ctx) {
        kf_buffer *bufs[6] = {0};
        for (uint32_t b = 0; b < count; b++) {
            uint64_t size = b < 4 ? sizes[b] : 2 * (n + GUARD);
            const void *src = b < 4 ? ins[b] : out[b - 4];
            ok = ok && kf_buffer_create(ctx, size, &bufs[b]) == KF_OK &&
                 kf_buffer_upload(bufs[b], 0, src, size) == KF_OK;
        }
        kf_kernel_launch launch = {.buffers = bufs, .buffer_count = count};
        if (ok && kf_kernel_run(ctx, k, &launch) != KF_OK) {
            kt_fail(__FILE__, __LINE__, "run: %s / %s", kf_context_last_error(ctx),
                    kf_kernel_error(k));
            ok = false;
        }
        for (uint32_t b = 4; ok && b < count; b++) {
            ok = kf_buffer_download(bufs[b], 0, out[b - 4], 2 * (n + GUARD)) == KF_OK;
        }
        for (uint32_t b = 0; b < count; b++) {
            kf_buffer_destroy(bufs[b]);
        }
    } else {
        kf_host_buffer host[6];
        for (uint32_t b = 0; b < count; b++) {
            host[b] = b < 4 ? (kf_host_buffer){(void *)ins[b], sizes[b]}
                            : (kf_host_buffer){out[b - 4], 2 * (n + GUARD)};
        }
        kf_interp_desc d = {.buffers = host,
                            .buffer_count = count,
                            .subgroup_size = sg,
                            .f16_casts_unrounded = unrounded};
        if (kf_kernel_interpret(k, &d) != KF_OK) {
            kt_fail(__FILE__, __LINE__, "interpret T %u D %u: %s", c->t, c->d, kf_kernel_error(k));
            ok = false;
        }
    }
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

/* run_case_casts in the interpreter with f16 casts rounding (as WGSL says) and then kept wide
 * (as the H200's driver does: kf_interp_desc.f16_casts_unrounded); once on a GPU. */
static bool run_case(kf_context *ctx, uint32_t sg, const grad_case *c, bool want_dk, bool want_dv,
                     uint32_t w, uint32_t queries) {
    bool ok = run_case_casts(ctx, sg, c, want_dk, want_dv, w, queries, false);
    return ok && (ctx || run_case_casts(ctx, sg, c, want_dk, want_dv, w, queries, true));
}

static const grad_case interp_cases[] = {
    {1, 16, 16, true, false},  {2, 48, 64, true, false},  {1, 48, 64, false, false},
    {1, 96, 128, true, false}, {1, 64, 32, false, false}, {1, 64, 64, true, true},
};

KT_CPU_TEST(ops, attention_grad_sgmat_interpreter) {
    for (size_t i = 0; i < sizeof interp_cases / sizeof interp_cases[0]; i++) {
        const grad_case *c = &interp_cases[i];
        KT_CHECK(run_case(NULL, 32, c, true, true, 0, 0), "pair, case %zu", i);
    }
    const grad_case one = {1, 64, 64, true, false};
    KT_CHECK(run_case(NULL, 32, &one, true, false, 0, 0), "dk alone");
    KT_CHECK(run_case(NULL, 32, &one, false, true, 0, 0), "dv alone");
    KT_CHECK(run_case(NULL, 16, &one, true, true, 0, 0), "subgroups of 16");
    KT_CHECK(run_case(NULL, 32, &one, true, true, 1, 16), "1 subgroup, 16 queries");
    KT_CHECK(run_case(NULL, 32, &one, true, true, 4, 16), "4 subgroups, 16 queries");
}

KT_CPU_TEST(ops, attention_grad_sgmat_refuses) {
    kf__attn_desc a = {.bh = 1, .t = 40, .d = 64, .causal = true, .scale = 0.125f};
    KT_CHECK(!kf__attention_grad_kv_sgmat(&a, 32, 0, true, true, 0, 0), "T 40 built");
    a.t = 64, a.d = 24;
    KT_CHECK(!kf__attention_grad_kv_sgmat(&a, 32, 0, true, true, 0, 0), "D 24 built");
    a.d = 64;
    KT_CHECK(!kf__attention_grad_kv_sgmat(&a, 32, 0, false, false, 0, 0), "nothing asked built");
    KT_CHECK(!kf__attention_grad_kv_sgmat(&a, 32, 4096, true, true, 0, 0), "4 KB built");
}

KT_TEST(ops, attention_grad_sgmat_gpu) {
    KT_NEED_GPU(ctx);
    uint32_t sg = 0;
    if (!kf__sgmat_usable(ctx, &sg)) {
        printf("    (no subgroup matrices: skipped)\n");
        return;
    }
    /* every case runs (a failure does not hide the next) */
    static const grad_case cases[] = {
        {1, 16, 16, false, false},  {1, 16, 16, true, false},    {2, 64, 64, true, true},
        {2, 48, 64, true, false},   {1, 96, 128, true, false},   {1, 64, 64, false, false},
        {4, 1024, 64, true, false}, {2, 1024, 128, true, false}, {2, 1024, 128, false, false},
    };
    bool ok = true;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bool one = run_case(ctx, sg, &cases[i], true, true, 0, 0);
        if (!one) {
            printf("    case %zu (T %u D %u%s) failed\n", i, cases[i].t, cases[i].d,
                   cases[i].causal ? " causal" : "");
        }
        ok = ok && one;
    }
    const grad_case small = {1, 16, 16, false, false}, mid = {2, 256, 64, true, false};
    ok = run_case(ctx, sg, &small, true, false, 0, 0) && ok;
    ok = run_case(ctx, sg, &small, false, true, 0, 0) && ok;
    ok = run_case(ctx, sg, &mid, true, false, 0, 0) && ok;
    ok = run_case(ctx, sg, &mid, false, true, 0, 0) && ok;
    ok = run_case(ctx, sg, &mid, true, true, 1, 16) && ok;
    KT_CHECK(ok, "a case failed (above)");
}
