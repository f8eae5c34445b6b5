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
 * output, attention_grad_pack, attention_grad_q writing attention_grad_stats's g2 on the way,
 * then attention_grad_k + _v from g2: four dispatches), timed as one plan, so fwdbwd_ms
 * and bwd_ms = fwdbwd_ms - fwd_ms are what a training step spends. FLOPs count FlashAttention's
 * convention: 4 B H T^2 D forward (halved when causal), 2.5 times that backward, whatever a
 * kernel recomputes. Each case checks 8 rows of o and of dq against a float64 reference on the
 * host (from the inputs as the device holds them), so a fast wrong kernel does not pass
 * unnoticed (--fwd-only: the forward alone, fwdbwd_ms 0). --impl names the rows (default "kfuse";
 * bench/h200_attention.sh runs f16 again with KF_NO_SGMAT=1 as "kfuse-fma"); --explain prints both
 * plans. The cases, inputs and timing are attention_common.c's, shared with
 * kfuse_bench_attention_grad. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_common.h"

/* The float64 o and dq of row i of head `head`: rows of q, k, v, dy are D floats, T per head. */
static void reference_row(const float *q, const float *k, const float *v, const float *dy,
                          const attn_case *c, uint64_t head, uint32_t i, double *o, double *dq) {
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

/* Runs one case; prints a table row or a JSON line. Returns false when it failed. */
static bool run_case(kf_context *ctx, const attn_case *c, const attn_args *a) {
    const char *impl = a->impl;
    bool explain = a->explain, fwd_only = a->fwd_only, json = a->json;
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
             "g2 = attention_grad_stats(q, k, v, g, causal=%s)\n"
             "dq = attention_grad_q(q, k, v, g, causal=%s)\n"
             "dk = attention_grad_k(q, k, v, g2, causal=%s)\n"
             "dv = attention_grad_v(q, k, v, g2, causal=%s)\nout o, dq, dk, dv\n",
             decl, decl, decl, decl, causal, causal, causal, causal, causal, causal);
    kf_plan *pf = attn_compile(ctx, fwd, 0), *pb = pf ? attn_compile(ctx, bwd, 0) : NULL;
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
    ok = ok && attn_inputs(c, in);
    /* the forward has no dy; with --fwd-only the backward is not timed */
    kf_plan *plans[2] = {pf, pb};
    const uint32_t skip[2] = {1u << 3, 0};
    kf_timing tm[2] = {{0}};
    ok = ok && attn_time(plans, fwd_only ? 1 : 2, in, names, 4, skip, a->repeat, tm);
    kf_timing tf = tm[0], tb = tm[1];
    ok = ok && kf_plan_get_output(pf, "o", o) == KF_OK &&
         (fwd_only || kf_plan_get_output(pb, "dq", dq) == KF_OK);
    double err_o = 0, err_dq = 0;
    double *ro = malloc(c->d * sizeof *ro), *rdq = malloc(c->d * sizeof *rdq);
    for (uint32_t r = 0; ok && ro && rdq && r < 8; r++) {
        uint64_t head = ((uint64_t)r * 2654435761u) % ((uint64_t)c->b * c->h);
        uint32_t i = r == 0 ? c->t - 1 : (uint32_t)(((uint64_t)r * 40503u) % c->t);
        reference_row(in[0]->data, in[1]->data, in[2]->data, in[3]->data, c, head, i, ro, rdq);
        uint64_t at = (head * c->t + i) * c->d;
        err_o = fmax(err_o, attn_row_error(o->data + at, ro, c->d, 0));
        err_dq = fwd_only ? 0 : fmax(err_dq, attn_row_error(dq->data + at, rdq, c->d, 0));
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
        char kernels[512];
        attn_kernel_names(pf, kernels, sizeof kernels);
        printf("{\"impl\": \"%s\", \"dtype\": \"%s\", \"B\": %u, \"H\": %u, \"T\": %u, "
               "\"D\": %u, \"causal\": %s, \"fwd_ms\": %.4f, \"fwdbwd_ms\": %.4f, "
               "\"bwd_ms\": %.4f, \"fwd_tflops\": %.3f, \"fwdbwd_tflops\": %.3f, "
               "\"fwd_dispatches\": %u, \"fwdbwd_dispatches\": %u, \"max_rel_err_o\": %.3g, "
               "\"max_rel_err_dq\": %.3g, \"kernels\": \"%s\"}\n",
               impl, dt, c->b, c->h, c->t, c->d, causal, tf.median_ms, tb.median_ms, bwd_ms, tf_f,
               tf_fb, sf.dispatches, sb.dispatches, err_o, err_dq, kernels);
    } else {
        printf("%-9s %-4s %3u %3u %5u %4u %-6s %10.3f %10.3f %10.3f %8.2f %8.2f %5u %5u %9.2g "
               "%9.2g\n",
               impl, dt, c->b, c->h, c->t, c->d, causal, tf.median_ms, tb.median_ms, bwd_ms, tf_f,
               tf_fb, sf.dispatches, sb.dispatches, err_o, err_dq);
    }
    fflush(stdout);
    attn_inputs_destroy(in);
    kf_tensor_destroy(o);
    kf_tensor_destroy(dq);
    kf_plan_destroy(pf);
    kf_plan_destroy(pb);
    return ok;
}

static void header(const kf_adapter_info *info) {
    printf("%s (%s)\n%-9s %-4s %3s %3s %5s %4s %-6s %10s %10s %10s %8s %8s %5s %5s %9s %9s\n",
           info->device, info->backend, "impl", "type", "B", "H", "T", "D", "causal", "fwd_ms",
           "fwdbwd_ms", "bwd_ms", "fwd_TF/s", "fb_TF/s", "disp", "dispb", "err_o", "err_dq");
}

int main(int argc, char **argv) {
    attn_args a;
    if (!attn_args_parse(argc, argv, ATTN_ARGS_FORWARD,
                         "usage: kfuse_bench_attention [--T N]... [--D N]... [--dtype f16|f32]... "
                         "[--B N] [--H N] [--no-causal] [--repeat N] [--json] [--impl NAME] "
                         "[--explain] [--fwd-only]\n",
                         &a)) {
        return 2;
    }
    return attn_main("kfuse_bench_attention", &a, header, run_case);
}
