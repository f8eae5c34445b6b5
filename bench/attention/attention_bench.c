/* kfuse_bench_attention: fused causal attention, forward and forward + backward, timed on this
 * device, with the fields bench/torch_attention.py prints for PyTorch (eager, torch.compile and
 * F.scaled_dot_product_attention), so the two run side by side (bench/h200_attention.sh):
 *
 *   kfuse_bench_attention [--T N]... [--D N]... [--dtype f16|f32]... [--B N] [--H N]
 *                         [--no-causal] [--repeat N] [--json] [--impl NAME] [--explain]
 *                         [--fwd-only]
 *
 * Default: T 1024 and 4096, D 64 and 128, f16 and f32, H 16, B = 8192 / T (8192 tokens a case),
 * causal. Forward is the graph `o = attention(q, k, v)` (one dispatch); forward + backward is the
 * graph autodiff makes of it for a given dy (the forward with its row statistics lse as a second
 * output, attention_grad_pack, then attention_grad_q / _k / _v: five dispatches), timed as one
 * plan, so fwdbwd_ms
 * and bwd_ms = fwdbwd_ms - fwd_ms are what a training step spends. FLOPs count FlashAttention's
 * convention: 4 B H T^2 D forward (halved when causal), 2.5 times that backward, whatever a
 * kernel recomputes. Each case checks 8 rows of o and of dq against a float64 reference on the
 * host (from the inputs as the device holds them), so a fast wrong kernel does not pass
 * unnoticed (--fwd-only: the forward alone, fwdbwd_ms 0). --impl names the rows (default "kfuse";
 * bench/h200_attention.sh runs f16 again with KF_NO_SGMAT=1 as "kfuse-fma"); --explain prints both
 * plans. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "kfuse.h"

typedef struct bench_case {
    uint32_t b, h, t, d;
    kf_dtype dtype;
    bool causal;
} bench_case;

/* The float64 o and dq of row i of head `head`: rows of q, k, v, dy are D floats, T per head. */
static void reference_row(const float *q, const float *k, const float *v, const float *dy,
                          const bench_case *c, uint64_t head, uint32_t i, double *o, double *dq) {
    uint32_t t = c->t, d = c->d, last = c->causal ? i : t - 1;
    double scale = 1.0 / sqrt((double)d);
    const float *qi = q + (head * t + i) * d, *dyi = dy + (head * t + i) * d;
    double *p = malloc((size_t)t * sizeof *p), *dp = malloc((size_t)t * sizeof *dp);
    double m = -INFINITY, l = 0, delta = 0;
    for (uint32_t j = 0; p && dp && j <= last; j++) {
        const float *kj = k + (head * t + j) * d, *vj = v + (head * t + j) * d;
        double s = 0, pv = 0;
        for (uint32_t e = 0; e < d; e++) {
            s += (double)qi[e] * kj[e];
            pv += (double)dyi[e] * vj[e];
        }
        p[j] = s * scale;
        dp[j] = pv;
        m = p[j] > m ? p[j] : m;
    }
    for (uint32_t j = 0; p && dp && j <= last; j++) {
        p[j] = exp(p[j] - m);
        l += p[j];
    }
    for (uint32_t e = 0; e < d; e++) {
        o[e] = dq[e] = 0;
    }
    for (uint32_t j = 0; p && dp && j <= last; j++) {
        p[j] /= l;
        delta += p[j] * dp[j];
        for (uint32_t e = 0; e < d; e++) {
            o[e] += p[j] * v[(head * t + j) * d + e];
        }
    }
    for (uint32_t j = 0; p && dp && j <= last; j++) {
        double ds = p[j] * (dp[j] - delta) * scale;
        for (uint32_t e = 0; e < d; e++) {
            dq[e] += ds * k[(head * t + j) * d + e];
        }
    }
    free(p);
    free(dp);
}

/* The worst |got - ref| / max(|ref|, 1% of the row's rms) over a row. */
static double row_error(const float *got, const double *ref, uint32_t d) {
    double ss = 0, worst = 0;
    for (uint32_t e = 0; e < d; e++) {
        ss += ref[e] * ref[e];
    }
    double floor = fmax(0.01 * sqrt(ss / d), 1e-12);
    for (uint32_t e = 0; e < d; e++) {
        double err = fabs(got[e] - ref[e]) / fmax(fabs(ref[e]), floor);
        worst = err > worst || err != err ? err : worst;
    }
    return worst;
}

static kf_plan *compile_text(kf_context *ctx, const char *text) {
    kf_graph *g = NULL;
    kf_spec_error err;
    if (kf_spec_parse(text, strlen(text), &g, &err) != KF_OK) {
        fprintf(stderr, "spec: %s\n", err.message);
        return NULL;
    }
    kf_plan *p = NULL;
    if (kf_graph_compile(ctx, g, NULL, &p) != KF_OK) {
        fprintf(stderr, "compile: %s\n", kf_context_last_error(ctx));
    }
    kf_graph_destroy(g);
    return p;
}

static void round_to_dtype(kf_tensor *t, kf_dtype dtype) {
    for (uint64_t i = 0; dtype == KF_DTYPE_F16 && i < kf_tensor_size(t); i++) {
        t->data[i] = kf__half_to_float(kf__half_from_float(t->data[i]));
    }
}

/* Runs one case; prints a table row or a JSON line. Returns false when it failed. */
static bool run_case(kf_context *ctx, const bench_case *c, uint32_t repeat, bool json,
                     const char *impl, bool explain, bool fwd_only) {
    const char *dt = c->dtype == KF_DTYPE_F16 ? "f16" : "f32";
    char decl[128], fwd[1024], bwd[2048];
    snprintf(decl, sizeof decl, "%s[%u, %u, %u, %u]", dt, c->b, c->h, c->t, c->d);
    const char *causal = c->causal ? "true" : "false";
    snprintf(fwd, sizeof fwd, "q: %s\nk: %s\nv: %s\no = attention(q, k, v, causal=%s)\nout o\n",
             decl, decl, decl, causal);
    /* what autodiff emits for attention's gradient (src/fuse/autodiff.c), with dy given */
    snprintf(bwd, sizeof bwd,
             "q: %s\nk: %s\nv: %s\ndy: %s\no = attention(q, k, v, causal=%s)\n"
             "lse = attention_lse(q, k, v, causal=%s)\ng = attention_grad_pack(dy, o, lse)\n"
             "dq = attention_grad_q(q, k, v, g, causal=%s)\n"
             "dk = attention_grad_k(q, k, v, g, causal=%s)\n"
             "dv = attention_grad_v(q, k, v, g, causal=%s)\nout o, dq, dk, dv\n",
             decl, decl, decl, decl, causal, causal, causal, causal, causal);
    kf_plan *pf = compile_text(ctx, fwd), *pb = pf ? compile_text(ctx, bwd) : NULL;
    for (int i = 0; explain && pb && i < 2; i++) {
        char *text = kf_plan_explain(i ? pb : pf, false);
        printf("%s\n", text ? text : "");
        kf_free(text);
    }
    kf_plan_summary sf = {0}, sb = {0};
    if (pb) {
        kf_plan_summary_get(pf, &sf);
        kf_plan_summary_get(pb, &sb);
    }
    kf_shape s = {4, {c->b, c->h, c->t, c->d}};
    kf_tensor *in[4] = {0}, *o = NULL, *dq = NULL;
    static const char *const names[4] = {"q", "k", "v", "dy"};
    bool ok = pf && pb && kf_tensor_create(&s, &o) == KF_OK && kf_tensor_create(&s, &dq) == KF_OK;
    for (int i = 0; ok && i < 4; i++) {
        ok = kf_tensor_create(&s, &in[i]) == KF_OK;
        if (ok) {
            kf_tensor_fill_random(in[i], 1234u + (uint64_t)i, -1.0f, 1.0f);
            round_to_dtype(in[i], c->dtype);
            ok = (i == 3 || kf_plan_set_input(pf, names[i], in[i]) == KF_OK) &&
                 kf_plan_set_input(pb, names[i], in[i]) == KF_OK;
        }
    }
    kf_timing tf = {0}, tb = {0};
    ok = ok && kf_plan_time(pf, repeat, &tf) == KF_OK &&
         (fwd_only || kf_plan_time(pb, repeat, &tb) == KF_OK);
    ok = ok && kf_plan_get_output(pf, "o", o) == KF_OK &&
         (fwd_only || kf_plan_get_output(pb, "dq", dq) == KF_OK);
    double err_o = 0, err_dq = 0;
    double *ro = malloc(c->d * sizeof *ro), *rdq = malloc(c->d * sizeof *rdq);
    for (uint32_t r = 0; ok && ro && rdq && r < 8; r++) {
        uint64_t head = ((uint64_t)r * 2654435761u) % ((uint64_t)c->b * c->h);
        uint32_t i = r == 0 ? c->t - 1 : (uint32_t)(((uint64_t)r * 40503u) % c->t);
        reference_row(in[0]->data, in[1]->data, in[2]->data, in[3]->data, c, head, i, ro, rdq);
        uint64_t at = (head * c->t + i) * c->d;
        err_o = fmax(err_o, row_error(o->data + at, ro, c->d));
        err_dq = fwd_only ? 0 : fmax(err_dq, row_error(dq->data + at, rdq, c->d));
    }
    free(ro);
    free(rdq);
    double flops = 4.0 * c->b * c->h * (double)c->t * c->t * c->d * (c->causal ? 0.5 : 1.0);
    double bwd_ms = fwd_only ? 0 : tb.median_ms - tf.median_ms;
    double tf_f = ok ? flops / (tf.median_ms * 1e9) : 0,
           tf_fb = ok && !fwd_only ? 3.5 * flops / (tb.median_ms * 1e9) : 0;
    if (!ok) {
        fprintf(stderr, "%s B%u H%u T%u D%u: failed: %s\n", dt, c->b, c->h, c->t, c->d,
                kf_context_last_error(ctx));
    } else if (json) {
        printf("{\"impl\": \"%s\", \"dtype\": \"%s\", \"B\": %u, \"H\": %u, \"T\": %u, "
               "\"D\": %u, \"causal\": %s, \"fwd_ms\": %.4f, \"fwdbwd_ms\": %.4f, "
               "\"bwd_ms\": %.4f, \"fwd_tflops\": %.3f, \"fwdbwd_tflops\": %.3f, "
               "\"fwd_dispatches\": %u, \"fwdbwd_dispatches\": %u, \"max_rel_err_o\": %.3g, "
               "\"max_rel_err_dq\": %.3g}\n",
               impl, dt, c->b, c->h, c->t, c->d, causal, tf.median_ms, tb.median_ms, bwd_ms, tf_f,
               tf_fb, sf.dispatches, sb.dispatches, err_o, err_dq);
    } else {
        printf("%-9s %-4s %3u %3u %5u %4u %-6s %10.3f %10.3f %10.3f %8.2f %8.2f %5u %5u %9.2g "
               "%9.2g\n",
               impl, dt, c->b, c->h, c->t, c->d, causal, tf.median_ms, tb.median_ms, bwd_ms, tf_f,
               tf_fb, sf.dispatches, sb.dispatches, err_o, err_dq);
    }
    fflush(stdout);
    for (int i = 0; i < 4; i++) {
        kf_tensor_destroy(in[i]);
    }
    kf_tensor_destroy(o);
    kf_tensor_destroy(dq);
    kf_plan_destroy(pf);
    kf_plan_destroy(pb);
    return ok;
}

static int usage(void) {
    fprintf(stderr, "usage: kfuse_bench_attention [--T N]... [--D N]... [--dtype f16|f32]... "
                    "[--B N] [--H N] [--no-causal] [--repeat N] [--json] [--impl NAME] "
                    "[--explain] [--fwd-only]\n");
    return 2;
}

int main(int argc, char **argv) {
    uint32_t ts[8] = {1024, 4096}, ds[8] = {64, 128}, nt = 0, nd = 0, b = 0, h = 16, repeat = 10;
    kf_dtype dts[2] = {KF_DTYPE_F16, KF_DTYPE_F32};
    uint32_t ndt = 0;
    bool causal = true, json = false, explain = false, fwd_only = false;
    const char *impl = "kfuse";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        unsigned n = 0;
        bool num = v && sscanf(v, "%u", &n) == 1 && n > 0;
        if (!strcmp(a, "--T") && num && nt < 8) {
            ts[nt++] = n, i++;
        } else if (!strcmp(a, "--D") && num && nd < 8) {
            ds[nd++] = n, i++;
        } else if (!strcmp(a, "--B") && num) {
            b = n, i++;
        } else if (!strcmp(a, "--H") && num) {
            h = n, i++;
        } else if (!strcmp(a, "--repeat") && num) {
            repeat = n, i++;
        } else if (!strcmp(a, "--dtype") && v && (!strcmp(v, "f16") || !strcmp(v, "f32")) &&
                   ndt < 2) {
            dts[ndt++] = v[1] == '1' ? KF_DTYPE_F16 : KF_DTYPE_F32, i++;
        } else if (!strcmp(a, "--no-causal")) {
            causal = false;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--explain")) {
            explain = true;
        } else if (!strcmp(a, "--fwd-only")) {
            fwd_only = true;
        } else if (!strcmp(a, "--impl") && v) {
            impl = v, i++;
        } else {
            return usage();
        }
    }
    nt = nt ? nt : 2;
    nd = nd ? nd : 2;
    ndt = ndt ? ndt : 2;
    kf_context *ctx = NULL;
    kf_context_desc desc = {0};
    if (kf_context_create(&desc, &ctx) != KF_OK) {
        fprintf(stderr, "kfuse_bench_attention: no device\n");
        return 1;
    }
    kf_adapter_info info;
    kf_context_adapter_info(ctx, &info);
    if (!json) {
        printf("%s (%s)\n%-9s %-4s %3s %3s %5s %4s %-6s %10s %10s %10s %8s %8s %5s %5s %9s %9s\n",
               info.device, info.backend, "impl", "type", "B", "H", "T", "D", "causal", "fwd_ms",
               "fwdbwd_ms", "bwd_ms", "fwd_TF/s", "fb_TF/s", "disp", "dispb", "err_o", "err_dq");
    }
    int rc = 0;
    for (uint32_t x = 0; x < ndt; x++) {
        if (dts[x] == KF_DTYPE_F16 && !info.has_f16) {
            fprintf(stderr, "f16: the device has no shader-f16; skipped\n");
            continue;
        }
        for (uint32_t y = 0; y < nt; y++) {
            for (uint32_t z = 0; z < nd; z++) {
                bench_case c = {
                    b ? b : (8192 / ts[y] ? 8192 / ts[y] : 1), h, ts[y], ds[z], dts[x], causal};
                rc |= run_case(ctx, &c, repeat, json, impl, explain, fwd_only) ? 0 : 1;
            }
        }
    }
    kf_context_destroy(ctx);
    return rc;
}
