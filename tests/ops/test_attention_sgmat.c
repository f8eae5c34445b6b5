/* The attention forward kernels of attention_sgmat.h in the interpreter (which emulates subgroup
 * matrices) against a float64 attention of the f16-rounded inputs: edge T (1, 15, 17, 65: one
 * row, a ragged tile, one past a tile, one past a workgroup), D 8, 64 and 128 (and 24: padded to
 * the matrices' 16), causal and not, with and without the lse output; every element of o and lse,
 * outputs poisoned, a guard band after each; the kernel's WGSL; and the same on the GPU where the
 * device has subgroup matrices. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "ops/attention_sgmat.h"
#include "ops/matmul_sgmat.h"

enum { GUARD = 32 };
static const uint16_t POISON = 0x7e00u;         /* an f16 NaN */
static const uint32_t LSE_POISON = 0x7fc00000u; /* an f32 NaN */

/* o and lse of every row in float64 from the f16 inputs. */
static void reference(const kf__attn_desc *a, const uint16_t *q, const uint16_t *k,
                      const uint16_t *v, double *o, double *lse) {
    uint32_t t = a->t, d = a->d;
    double *s = malloc(sizeof(double) * t);
    for (uint32_t h = 0; h < a->bh; h++) {
        for (uint32_t i = 0; i < t; i++) {
            uint64_t qi = ((uint64_t)h * t + i) * d;
            uint32_t last = a->causal ? i : t - 1;
            double m = -INFINITY, l = 0;
            for (uint32_t j = 0; j <= last; j++) {
                uint64_t kj = ((uint64_t)h * t + j) * d;
                double dot = 0;
                for (uint32_t e = 0; e < d; e++) {
                    dot += (double)kf__half_to_float(q[qi + e]) * kf__half_to_float(k[kj + e]);
                }
                s[j] = dot * a->scale;
                m = fmax(m, s[j]);
            }
            for (uint32_t j = 0; j <= last; j++) {
                s[j] = exp(s[j] - m);
                l += s[j];
            }
            lse[(uint64_t)h * t + i] = m + log(l);
            for (uint32_t e = 0; e < d; e++) {
                double acc = 0;
                for (uint32_t j = 0; j <= last; j++) {
                    acc += s[j] / l * kf__half_to_float(v[((uint64_t)h * t + j) * d + e]);
                }
                o[qi + e] = acc;
            }
        }
    }
    free(s);
}

/* How run_config interprets: f16 casts kept wide (kf_interp_desc.f16_casts_unrounded), and
 * quiet (a mismatch returns false without failing the test). */
typedef struct run_opts {
    bool f16_wide, quiet;
    /* k's row j scaled by 0.2 + 1.6 j / T (in head order), so each row's maximum score keeps
     * growing over the keys: the lazy kernel's rescales happen in the middle of the walk */
    bool growing_k;
} run_opts;

/* The register-tiled kernel in its default tiling, or in $KF_ATTN_TILED's (the variants the
 * H200 sweeps measure, checked here by setting it). */
static kf_kernel *tiled_kernel(const kf__attn_desc *a) {
    kf__attn_tiled_config c;
    if (kf__attention_tiled_config_parse(getenv("KF_ATTN_TILED"), &c)) {
        return kf__attention_tiled_config(a, KF_DTYPE_F16, &c, 0);
    }
    return kf__attention_tiled(a, KF_DTYPE_F16);
}

/* Runs the kernel for a on the GPU (ctx) or in the interpreter, checks every element. Subgroup
 * size 0: the register-tiled FMA kernel (f16 storage) instead. */
static bool run_config_opts(kf_context *ctx, uint32_t sg, const kf__attn_desc *a,
                            const kf__attn_sgmat_config *cfg, run_opts opts) {
    kf_kernel *k = sg == 0 ? tiled_kernel(a) : kf__attention_sgmat_config(a, sg, 0, cfg);
    if (!k || kf_kernel_status(k) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "no kernel for T %u D %u: %s", a->t, a->d,
                k ? kf_kernel_error(k) : "NULL");
        kf_kernel_destroy(k);
        return false;
    }
    const uint64_t n = (uint64_t)a->bh * a->t * a->d, rows = (uint64_t)a->bh * a->t;
    uint16_t *in[3], *out = malloc(2 * (n + GUARD));
    uint32_t *lse = malloc(4 * (rows + GUARD)); /* f32 whatever q is (src/ops/attention.c) */
    for (int b = 0; b < 3; b++) {
        in[b] = malloc(2 * n);
        for (uint64_t i = 0; i < n; i++) {
            /* q and k in [-2, 2]: scores of a few units, so the softmax is not flat */
            float x = kt_rand_f32(b < 2 ? -2.0f : -1.0f, b < 2 ? 2.0f : 1.0f);
            if (b == 1 && opts.growing_k) {
                x *= 0.2f + 1.6f * (float)(i / a->d % a->t) / (float)a->t;
            }
            in[b][i] = kf__half_from_float(x);
        }
    }
    for (uint64_t i = 0; i < n + GUARD; i++) {
        out[i] = POISON;
    }
    for (uint64_t i = 0; i < rows + GUARD; i++) {
        lse[i] = LSE_POISON;
    }
    bool ok = true;
    const char *where = ctx ? "GPU" : "interpreter";
    uint32_t count = a->with_lse ? 5 : 4;
    if (ctx) {
        kf_buffer *bufs[5] = {0};
        for (uint32_t b = 0; b < 3; b++) {
            ok = ok && kf_buffer_create(ctx, 2 * n, &bufs[b]) == KF_OK &&
                 kf_buffer_upload(bufs[b], 0, in[b], 2 * n) == KF_OK;
        }
        uint32_t o_at = a->with_lse ? 4 : 3;
        ok = ok && kf_buffer_create(ctx, 2 * (n + GUARD), &bufs[o_at]) == KF_OK &&
             kf_buffer_upload(bufs[o_at], 0, out, 2 * (n + GUARD)) == KF_OK;
        if (a->with_lse) {
            ok = ok && kf_buffer_create(ctx, 4 * (rows + GUARD), &bufs[3]) == KF_OK &&
                 kf_buffer_upload(bufs[3], 0, lse, 4 * (rows + GUARD)) == KF_OK;
        }
        kf_kernel_launch launch = {.buffers = bufs, .buffer_count = count};
        if (ok && kf_kernel_run(ctx, k, &launch) != KF_OK) {
            kt_fail(__FILE__, __LINE__, "run: %s / %s", kf_context_last_error(ctx),
                    kf_kernel_error(k));
            ok = false;
        }
        ok = ok && kf_buffer_download(bufs[o_at], 0, out, 2 * (n + GUARD)) == KF_OK;
        if (a->with_lse) {
            ok = ok && kf_buffer_download(bufs[3], 0, lse, 4 * (rows + GUARD)) == KF_OK;
        }
        for (uint32_t b = 0; b < count; b++) {
            kf_buffer_destroy(bufs[b]);
        }
    } else {
        kf_host_buffer host[5] = {{in[0], 2 * n}, {in[1], 2 * n}, {in[2], 2 * n}};
        if (a->with_lse) {
            host[3] = (kf_host_buffer){lse, 4 * (rows + GUARD)};
        }
        host[count - 1] = (kf_host_buffer){out, 2 * (n + GUARD)};
        kf_interp_desc d = {.buffers = host,
                            .buffer_count = count,
                            .subgroup_size = sg,
                            .f16_casts_unrounded = opts.f16_wide};
        if (kf_kernel_interpret(k, &d) != KF_OK) {
            kt_fail(__FILE__, __LINE__, "interpret T %u D %u: %s", a->t, a->d, kf_kernel_error(k));
            ok = false;
        }
    }
    double *ro = malloc(sizeof(double) * n), *rl = malloc(sizeof(double) * rows);
    reference(a, in[0], in[1], in[2], ro, rl);
    /* P rounded to f16 (2^-11 relative), sums in f32, o rounded to f16: 2e-3 relative to
     * max(|o|, 1% of the row's rms), as verification measures f16 attention */
    for (uint64_t r = 0; ok && r < rows; r++) {
        double ss = 0;
        for (uint32_t e = 0; e < a->d; e++) {
            ss += ro[r * a->d + e] * ro[r * a->d + e];
        }
        double floor = fmax(0.01 * sqrt(ss / a->d), 1e-6);
        for (uint32_t e = 0; ok && e < a->d; e++) {
            double want = ro[r * a->d + e], got = kf__half_to_float(out[r * a->d + e]);
            if (!(fabs(got - want) / fmax(fabs(want), floor) <= 2e-3)) {
                if (!opts.quiet) {
                    kt_fail(__FILE__, __LINE__, "%s T %u D %u%s: o[row %llu][%u] = %g, want %g",
                            where, a->t, a->d, a->causal ? " causal" : "", (unsigned long long)r, e,
                            got, want);
                }
                ok = false;
            }
        }
        if (ok && a->with_lse) {
            /* lse in f32, from f32 sums of the f16 inputs */
            float got_f;
            memcpy(&got_f, &lse[r], sizeof got_f);
            double got = got_f;
            if (!(fabs(got - rl[r]) <= 2e-4 * fmax(fabs(rl[r]), 1.0))) {
                kt_fail(__FILE__, __LINE__, "%s T %u D %u: lse[%llu] = %g, want %g", where, a->t,
                        a->d, (unsigned long long)r, got, rl[r]);
                ok = false;
            }
        }
    }
    for (uint32_t g = 0; ok && g < GUARD; g++) {
        if (out[n + g] != POISON || (a->with_lse && lse[rows + g] != LSE_POISON)) {
            kt_fail(__FILE__, __LINE__, "%s T %u D %u: wrote past the end", where, a->t, a->d);
            ok = false;
        }
    }
    free(ro);
    free(rl);
    for (int b = 0; b < 3; b++) {
        free(in[b]);
    }
    free(out);
    free(lse);
    kf_kernel_destroy(k);
    return ok;
}

static bool run_config(kf_context *ctx, uint32_t sg, const kf__attn_desc *a,
                       const kf__attn_sgmat_config *cfg) {
    return run_config_opts(ctx, sg, a, cfg, (run_opts){0});
}

static bool run_case(kf_context *ctx, uint32_t sg, const kf__attn_desc *a) {
    return run_config(ctx, sg, a, NULL);
}

static kf__attn_desc desc_of(uint32_t bh, uint32_t t, uint32_t d, bool causal, bool with_lse) {
    kf__attn_desc a = {.bh = bh,
                       .t = t,
                       .d = d,
                       .causal = causal,
                       .scale = (float)(1.0 / sqrt((double)d)),
                       .with_lse = with_lse};
    return a;
}

static const uint32_t edge_t[] = {1, 15, 17, 65};
static const uint32_t edge_d[] = {8, 64, 128};

KT_CPU_TEST(ops, attention_sgmat_interpreter) {
    for (size_t ti = 0; ti < sizeof edge_t / sizeof edge_t[0]; ti++) {
        for (size_t di = 0; di < sizeof edge_d / sizeof edge_d[0]; di++) {
            for (int causal = 0; causal < 2; causal++) {
                /* two heads where the case is small, so the second head's offsets count */
                uint32_t bh = edge_t[ti] * edge_d[di] <= 2048 ? 2 : 1;
                kf__attn_desc a = desc_of(bh, edge_t[ti], edge_d[di], causal != 0,
                                          (ti + di + (size_t)causal) % 2 == 0);
                if (!run_case(NULL, 32, &a)) {
                    return;
                }
            }
        }
    }
    /* D 24 (padded to 32), a given scale, and subgroups of 16 (one invocation a row) */
    kf__attn_desc odd = desc_of(1, 33, 24, true, true);
    odd.scale = 0.3f;
    KT_CHECK(run_case(NULL, 32, &odd), "D 24");
    kf__attn_desc sg16 = desc_of(2, 40, 64, true, true);
    KT_CHECK(run_case(NULL, 16, &sg16), "subgroups of 16");
    /* other configurations: 2 subgroups with 64-key tiles, 1 with 16-key tiles, 8 with 16, and
     * two 16-row blocks a subgroup (T 70: the second workgroup's last rows past T) */
    static const char *const configs[] = {"2x64", "1x16", "8x16", "4x16/r2", "2x32/r2"};
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
        kf__attn_sgmat_config cfg;
        KT_CHECK(kf__attention_sgmat_config_parse(configs[c], &cfg), "%s", configs[c]);
        kf__attn_desc a = desc_of(2, 70, 24, c != 1, true);
        KT_CHECK(run_config(NULL, 32, &a, &cfg), "config %s", configs[c]);
    }
    /* the direct configurations (T and D multiples of 16; a subgroup past T recomputes the last
     * rows and writes nothing; 2x64 at T 80 shrinks its tile to 16, a divisor of T) */
    static const struct {
        const char *cfg;
        uint32_t t, d;
        bool causal;
    } direct[] = {{"4x16/direct", 80, 32, true},
                  {"2x64/direct", 80, 32, false},
                  {"1x32/direct/rq", 48, 16, true},
                  {"2x32/direct/rq", 32, 128, false},
                  /* two row blocks a subgroup: T 80 and 48 leave a subgroup clamped back over
                   * rows it must not write, and one past T */
                  {"2x16/direct/r2", 80, 32, true},
                  {"1x16/direct/r2/rq", 48, 64, false}};
    for (size_t c = 0; c < sizeof direct / sizeof direct[0]; c++) {
        kf__attn_sgmat_config cfg;
        KT_CHECK(kf__attention_sgmat_config_parse(direct[c].cfg, &cfg) && cfg.direct, "%s",
                 direct[c].cfg);
        kf__attn_desc a = desc_of(2, direct[c].t, direct[c].d, direct[c].causal, c % 2 == 0);
        KT_CHECK(run_config(NULL, 32, &a, &cfg), "config %s", direct[c].cfg);
    }
}

/* The one-pass configurations (kf__attn_sgmat_config.online), k and v staged (a tile of fewer
 * vec4s than invocations at D 16) and read from storage (direct, and where the staged tiles do not
 * fit: 4 subgroups at D 128): T 128 (two 64-row workgroups,
 * two 64-key tiles), T 80 (a workgroup past T: its subgroups recompute the last rows and write
 * none; tiles shrink to 16), two row blocks a subgroup (a subgroup clamped back over rows it
 * must not write), q loaded again for each tile, D 128, P as hi only, subgroups of 16 and 64
 * (one and four invocations a row: no shuffle, two rounds of them). */
KT_CPU_TEST(ops, attention_sgmat_online_interpreter) {
    static const struct {
        const char *cfg;
        uint32_t t, d, sg;
        bool causal;
    } cases[] = {{"4x64/on", 128, 64, 32, true},       {"4x64/on", 128, 64, 32, false},
                 {"4x32/on", 80, 32, 32, true},        {"2x16/on/r2", 80, 32, 32, true},
                 {"1x32/on/rq", 48, 16, 32, false},    {"2x32/on", 64, 128, 32, true},
                 {"2x64/on/r2", 64, 64, 32, false},    {"4x32/on", 64, 32, 16, true},
                 {"2x32/on", 64, 64, 64, true},        {"4x16/on", 64, 16, 32, true},
                 {"2x32/on/direct", 64, 64, 32, true}, {"2x16/on/direct/r2", 80, 32, 32, false},
                 {"4x16/on", 64, 128, 32, false},      {"2x16/on/hf", 80, 32, 32, true},
                 {"4x32/on", 64, 32, 16, false}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        kf__attn_sgmat_config cfg;
        KT_CHECK(kf__attention_sgmat_config_parse(cases[c].cfg, &cfg) && cfg.online, "%s",
                 cases[c].cfg);
        kf__attn_desc a = desc_of(2, cases[c].t, cases[c].d, cases[c].causal, c % 2 == 0);
        if (!run_config(NULL, cases[c].sg, &a, &cfg)) {
            KT_CHECK(false, "config %s at T %u D %u, subgroups of %u", cases[c].cfg, a.t, a.d,
                     cases[c].sg);
            return;
        }
    }
    /* T not a multiple of 16, or D not of 16: no one-pass kernel (the caller keeps another) */
    kf__attn_sgmat_config cfg = {.online = true};
    kf__attn_desc odd = desc_of(1, 40, 64, true, false), odd_d = desc_of(1, 64, 24, true, false);
    KT_CHECK(kf__attention_sgmat_config(&odd, 32, 0, &cfg) == NULL, "T 40 accepted");
    KT_CHECK(kf__attention_sgmat_config(&odd_d, 32, 0, &cfg) == NULL, "D 24 accepted");
}

/* The lazy one-pass kernel (/lz: O rescaled only when a row's maximum grows by more than 2): the
 * default inputs (rescales mostly in the first tiles) and k growing along the keys (rescales all
 * along the walk, and in the last tile, whose pending O the end takes), causal and not, staged and
 * from storage, two row blocks, D 128, subgroups of 16. */
KT_CPU_TEST(ops, attention_sgmat_lazy_interpreter) {
    static const struct {
        const char *cfg;
        uint32_t t, d, sg;
        bool causal;
    } cases[] = {{"4x32/on/lz", 128, 64, 32, true},        {"4x32/on/lz", 128, 64, 32, false},
                 {"2x16/on/lz/r2", 80, 32, 32, true},      {"2x32/on/lz", 64, 128, 32, true},
                 {"2x32/on/lz/direct", 64, 64, 32, false}, {"4x32/on/lz", 64, 32, 16, true},
                 {"2x16/on/lz/hf", 80, 32, 32, true}};
    for (int grow = 0; grow < 2; grow++) {
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            kf__attn_sgmat_config cfg;
            KT_CHECK(kf__attention_sgmat_config_parse(cases[c].cfg, &cfg) && cfg.lazy, "%s",
                     cases[c].cfg);
            kf__attn_desc a = desc_of(2, cases[c].t, cases[c].d, cases[c].causal, c % 2 == 0);
            if (!run_config_opts(NULL, cases[c].sg, &a, &cfg, (run_opts){.growing_k = grow != 0})) {
                KT_CHECK(false, "config %s at T %u D %u, subgroups of %u%s", cases[c].cfg, a.t, a.d,
                         cases[c].sg, grow ? ", k growing" : "");
                return;
            }
        }
    }
}

/* Under a compiler that folds f32(f16(x)) to x (the interpreter's f16_casts_unrounded), as the
 * H200's did: session 5's kernel, which split P into hi = f16(P) and lo = f16(P - f32(hi)), lost
 * lo there and failed the f16 tolerance (o bit for bit the hi-only kernel's); the split by the
 * mantissa's bits does not rely on the round trip. Both kernels are run: the old split must fail
 * here (else this emulation no longer shows the H200's failure), the kernel must pass. */
KT_CPU_TEST(ops, attention_sgmat_without_the_f16_round_trip) {
    const run_opts wide = {.f16_wide = true}, wide_quiet = {.f16_wide = true, .quiet = true};
    kf__attn_sgmat_config cast = {.probe = KF__ATTN_PROBE_LO_CAST};
    static const uint32_t cases[][3] = {{15, 8, 0}, {65, 64, 1}, {37, 128, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kf__attn_desc a = desc_of(1, cases[i][0], cases[i][1], cases[i][2] != 0, true);
        KT_CHECK(run_config_opts(NULL, 32, &a, NULL, wide), "T %u D %u", a.t, a.d);
        /* (hi-only's errors exceed the tolerance in a few % of o's elements: at T 15, D 8 all
         * 120 may pass by chance, at the other two not) */
        KT_CHECK(a.t * a.d < 2048 || !run_config_opts(NULL, 32, &a, &cast, wide_quiet),
                 "T %u D %u: the f16 round-trip split passed with the round trip folded", a.t, a.d);
    }
}

/* The register-tiled FMA kernel (subgroup size 0 in run_config) on the same edge cases, and on
 * T 130 (three 64-row workgroups, five 32-key tiles) and D 33 (a ragged chunk and ragged output
 * columns). */
KT_CPU_TEST(ops, attention_tiled_interpreter) {
    for (size_t ti = 0; ti < sizeof edge_t / sizeof edge_t[0]; ti++) {
        for (size_t di = 0; di < sizeof edge_d / sizeof edge_d[0]; di++) {
            for (int causal = 0; causal < 2; causal++) {
                /* one head (the interpreter runs its 256 invocations in lockstep: seconds) */
                kf__attn_desc a = desc_of(1, edge_t[ti], edge_d[di], causal != 0,
                                          (ti + di + (size_t)causal) % 2 == 1);
                if (!run_case(NULL, 0, &a)) {
                    return;
                }
            }
        }
    }
    kf__attn_desc a = desc_of(1, 130, 33, true, true);
    a.scale = 0.3f;
    KT_CHECK(run_case(NULL, 0, &a), "T 130, D 33");
}

KT_CPU_TEST(ops, attention_sgmat_wgsl_and_limits) {
    kf__attn_desc a = desc_of(32, 4096, 128, true, false);
    kf_kernel *k = kf__attention_sgmat(&a, 32, 0);
    KT_CHECK(k && kf_kernel_status(k) == KF_OK, "%s", k ? kf_kernel_error(k) : "NULL");
    char *w = k ? kf_kernel_emit_wgsl(k) : NULL;
    const char *want[] = {
        "// attention_sgmat_64x32_causal: generated by kfuse (workgroup 128x1x1)\n",
        "enable chromium_experimental_subgroup_matrix;\n",
        "var<workgroup> tiles: array<f16, 8704>;\n", /* q's 64 rows x (128 + 8) */
        "subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>>(&tiles, ",
        "subgroupMatrixMultiplyAccumulate(",
        /* the scores' matrices reset from zeros in workgroup memory each tile, not by their
         * declaration (which on the H200 kept the last tile's sums) */
        "s = subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>>(&zeros, 0u, false, 16u);",
    };
    for (size_t i = 0; w && i < sizeof want / sizeof want[0]; i++) {
        KT_CHECK(strstr(w, want[i]) != NULL, "missing <%s>", want[i]);
    }
    kf_free(w);
    /* every access proved in bounds (so robustness off costs nothing) once lengths are known */
    for (uint32_t b = 0; k && b < 4; b++) {
        KT_CHECK_OK(kf_kernel_set_binding_length(k, b, 32ull * 4096 * 128));
    }
    kf_bounds_report br = {0};
    char *text = NULL;
    KT_CHECK(k && kf_kernel_bounds(k, &br, &text) == KF_OK && br.guarded == 0,
             "%u of %u accesses guarded:\n%s", br.guarded, br.accesses, text ? text : "");
    kf_free(text);
    kf_kernel_destroy(k);
    /* D 64 takes 8 subgroups and 16-key tiles (the default measured fastest); too little memory or
     * a bad subgroup size: no kernel */
    kf__attn_desc b = desc_of(1, 100, 64, false, true);
    k = kf__attention_sgmat(&b, 32, 0);
    KT_CHECK(k && strcmp(kf_kernel_name(k), "attention_sgmat_128x16_lse") == 0, "%s",
             k ? kf_kernel_name(k) : "NULL");
    kf_kernel_destroy(k);
    KT_CHECK(kf__attention_sgmat(&b, 32, 8192) == NULL, "8 KiB accepted");
    KT_CHECK(kf__attention_sgmat(&b, 8, 0) == NULL, "subgroups of 8 accepted");
    KT_CHECK(kf__attention_sgmat(&b, 24, 0) == NULL, "subgroups of 24 accepted");
    kf__attn_sgmat_config cfg;
    KT_CHECK(kf__attention_sgmat_config_parse("4x64/hi", &cfg) && cfg.hi_only && cfg.keys == 64,
             "4x64/hi");
    KT_CHECK(!kf__attention_sgmat_config_parse("4x64/lo", &cfg) &&
                 !kf__attention_sgmat_config_parse("4", &cfg),
             "bad configurations parse");
    k = kf__attention_sgmat_config(&b, 32, 0, &cfg);
    KT_CHECK(k && strcmp(kf_kernel_name(k), "attention_sgmat_64x64_hi_lse") == 0, "%s",
             k ? kf_kernel_name(k) : "NULL");
    kf_kernel_destroy(k);
    cfg = (kf__attn_sgmat_config){.subgroups = 4, .keys = 24};
    KT_CHECK(kf__attention_sgmat_config(&b, 32, 0, &cfg) == NULL, "24-key tiles accepted");
    /* direct: T 100 is no multiple of 16 */
    KT_CHECK(kf__attention_sgmat_config_parse("4x16/direct/rq", &cfg) && cfg.direct &&
                 cfg.reload_q && !cfg.hi_only,
             "4x16/direct/rq");
    KT_CHECK(kf__attention_sgmat_config(&b, 32, 0, &cfg) == NULL, "direct at T 100 accepted");
    KT_CHECK(!kf__attention_sgmat_config_parse("4x16/direct/direct", &cfg) &&
                 !kf__attention_sgmat_config_parse("4x16/directx", &cfg),
             "bad direct configurations parse");
    /* the one-pass kernel stages k and v where the tiles fit (the defaults at D 64 and 128),
     * reads them from storage where they do not (4 subgroups at D 128), refuses T % 16 */
    static const struct {
        const char *cfg;
        uint32_t d;
        const char *name;
    } online[] = {{"4x32/on", 64, "attention_sgmat_64x32_online_causal"},
                  {"2x32/on", 128, "attention_sgmat_32x32_online_causal"},
                  {"4x32/on", 128, "attention_sgmat_64x16_online_direct_causal"}};
    for (size_t i = 0; i < sizeof online / sizeof online[0]; i++) {
        kf__attn_desc c = desc_of(2, 4096, online[i].d, true, false);
        KT_CHECK(kf__attention_sgmat_config_parse(online[i].cfg, &cfg), "%s", online[i].cfg);
        k = kf__attention_sgmat_config(&c, 32, 0, &cfg);
        KT_CHECK(k && strcmp(kf_kernel_name(k), online[i].name) == 0, "%s at D %u: %s",
                 online[i].cfg, online[i].d, k ? kf_kernel_name(k) : "NULL");
        kf_kernel_destroy(k);
    }
    KT_CHECK(kf__attention_sgmat_config(&b, 32, 0, &cfg) == NULL, "one pass at T 100 accepted");
    b.d = 129;
    KT_CHECK(kf__attention_sgmat(&b, 32, 0) == NULL, "D 129 accepted");
}

KT_TEST(ops, attention_sgmat_gpu) {
    KT_NEED_GPU(ctx);
    uint32_t sg = 0;
    if (!kf__sgmat_usable(ctx, &sg)) {
        printf("    (no subgroup matrices: skipped)\n");
        return;
    }
    for (size_t ti = 0; ti < sizeof edge_t / sizeof edge_t[0]; ti++) {
        for (size_t di = 0; di < sizeof edge_d / sizeof edge_d[0]; di++) {
            for (int causal = 0; causal < 2; causal++) {
                kf__attn_desc a = desc_of(3, edge_t[ti], edge_d[di], causal != 0, causal == 1);
                if (!run_case(ctx, sg, &a)) {
                    return;
                }
            }
        }
    }
    kf__attn_desc big = desc_of(4, 1000, 64, true, true);
    KT_CHECK(run_case(ctx, sg, &big), "T 1000");
    /* the one-pass configurations at the benchmarks' head dimensions */
    static const char *const online[] = {"4x64/on", "4x32/on", "2x64/on/r2", "4x16/on/rq"};
    for (size_t c = 0; c < sizeof online / sizeof online[0]; c++) {
        kf__attn_sgmat_config cfg;
        KT_CHECK(kf__attention_sgmat_config_parse(online[c], &cfg), "%s", online[c]);
        for (uint32_t d = 64; d <= 128; d += 64) {
            kf__attn_desc a = desc_of(2, 1024, d, true, c % 2 == 0);
            KT_CHECK(run_config(ctx, sg, &a, &cfg), "config %s at D %u", online[c], d);
        }
    }
    /* the lazy one, with k growing along the keys too (rescales all along the walk) */
    static const char *const lazy[] = {"4x32/on/lz", "2x32/on/lz"};
    for (size_t c = 0; c < sizeof lazy / sizeof lazy[0]; c++) {
        kf__attn_sgmat_config cfg;
        KT_CHECK(kf__attention_sgmat_config_parse(lazy[c], &cfg), "%s", lazy[c]);
        for (uint32_t d = 64; d <= 128; d += 64) {
            for (int grow = 0; grow < 2; grow++) {
                kf__attn_desc a = desc_of(2, 1024, d, true, grow == 0);
                KT_CHECK(run_config_opts(ctx, sg, &a, &cfg, (run_opts){.growing_k = grow != 0}),
                         "config %s at D %u%s", lazy[c], d, grow ? ", k growing" : "");
            }
        }
    }
}
