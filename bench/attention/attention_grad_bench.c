/* kfuse_bench_attention_grad: attention's backward, timed in parts on this device, with the
 * fields bench/torch_attention.py prints for PyTorch's backward (bwd_ms, bwd_tflops):
 *
 *   kfuse_bench_attention_grad [--T N]... [--D N]... [--dtype f16|f32]... [--B N] [--H N]
 *                              [--no-causal] [--repeat N] [--json] [--train-only]
 *
 * Default: T 1024 and 4096, D 64 and 128, f16 and f32, H 16, B = 8192 / T, causal (the cases of
 * kfuse_bench_attention and torch_attention.py). Per case, three plans from the graph
 * g = attention_grad_prep(q, k, v, dy); dq, dk, dv = attention_grad_q / _k / _v(q, k, v, g):
 *   bwd_ms       the whole backward as planned: prep, dq, and dk + dv in one kernel (3 dispatches)
 *   unpaired_ms  the same with dk and dv in kernels of their own (4 dispatches: what the planner
 *                did before dk + dv became companions; a binding budget of 5 keeps them apart)
 *   prep_ms      attention_grad_prep alone (a forward pass: attention.c's kernel)
 * grads_ms = bwd_ms - prep_ms is the gradient kernels' share; and the backward autodiff emits,
 * from the forward's o and lse (run once before):
 *   train_ms     attention_grad_pack, dq writing g2 = attention_grad_stats on the way, dk + dv
 *                from g2 (3 dispatches: what a training step's backward spends on attention);
 *                pack_ms, dq_ms, dkv_ms: each of them timed on its own (kf_context_time_each)
 * with its own errors (err_dq_tr: dq's, row scale; err_dk_tr: dk's against 1% of dk's rms). FLOPs
 * as kfuse_bench_attention counts them (2.5 times the forward's 4 B H T^2 D, halved when causal),
 * over bwd_ms. Each case checks 8 rows of dq and 8 of dk (keys among the last 64: the causal ones
 * cost little) against float64 on the host, so a fast wrong kernel shows: err_dk against each row's
 * own scale, err_dk_tensor against 1% of the rms of all of dk (kfuse verify's floor), and the
 * largest |dk| checked (f16 holds below 6.1e-5 as subnormals, 2^-24 apart). The cases, inputs and
 * timing are attention_common.c's, shared with kfuse_bench_attention. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_common.h"

/* float64 dq row qi and dk row ki of one head (rows of D floats, T per head); dk sums over the
 * queries that see key ki (causal: ki .. T - 1, cheap for a key near the end). */
/* g (the device's prep output, or NULL): the worst |lse - g's lse| of the rows visited into
 * *lse_err; from_g: P and delta from g's lse and delta instead (what the kernels compute from),
 * which tells the statistics' rounding in g (f16) from the kernels' own error. */
static void reference(const float *q, const float *k, const float *v, const float *dy,
                      const attn_case *c, uint64_t head, uint32_t qi, uint32_t ki, double *dq,
                      double *dk, const float *g, double *lse_err, bool from_g) {
    uint32_t t = c->t, d = c->d;
    double scale = 1.0 / sqrt((double)d);
    const float *Q = q + head * t * d, *K = k + head * t * d, *V = v + head * t * d;
    const float *DY = dy + head * t * d;
    double *p = malloc(t * sizeof *p), *dp = malloc(t * sizeof *dp);
    for (uint32_t e = 0; e < d; e++) {
        dq[e] = dk[e] = 0;
    }
    /* every query r that sees key i contributes to dk_i; query i gives dq_i */
    for (uint32_t r = 0; p && dp && r < t; r++) {
        uint32_t last = c->causal ? r : t - 1;
        if (r != qi && c->causal && r < ki) {
            continue;
        }
        double m = -INFINITY, l = 0, delta = 0;
        for (uint32_t j = 0; j <= last; j++) {
            double s = 0, pv = 0;
            for (uint32_t e = 0; e < d; e++) {
                s += (double)Q[r * d + e] * K[j * d + e];
                pv += (double)DY[r * d + e] * V[j * d + e];
            }
            p[j] = s * scale;
            dp[j] = pv;
            m = p[j] > m ? p[j] : m;
        }
        for (uint32_t j = 0; j <= last; j++) {
            p[j] = exp(p[j] - m);
            l += p[j];
        }
        if (g) {
            double got = g[(head * t + r) * (d + 2) + d];
            *lse_err = fmax(*lse_err, fabs(got - (m + log(l))));
        }
        for (uint32_t j = 0; j <= last; j++) {
            p[j] /= l;
            delta += p[j] * dp[j];
        }
        if (g && from_g) {
            /* P and delta from g's statistics, as the kernels read them */
            double lse = g[(head * t + r) * (d + 2) + d];
            for (uint32_t j = 0; j <= last; j++) {
                p[j] *= exp(m + log(l) - lse);
            }
            delta = g[(head * t + r) * (d + 2) + d + 1];
        }
        for (uint32_t j = 0; j <= last; j++) {
            double ds = p[j] * (dp[j] - delta) * scale;
            for (uint32_t e = 0; r == qi && e < d; e++) {
                dq[e] += ds * K[j * d + e];
            }
            for (uint32_t e = 0; j == ki && e < d; e++) {
                dk[e] += ds * Q[r * d + e];
            }
        }
    }
    free(p);
    free(dp);
}

static bool run_case(kf_context *ctx, const attn_case *c, const attn_args *a) {
    bool json = a->json;
    const char *dt = c->dtype == KF_DTYPE_F16 ? "f16" : "f32";
    const char *causal = c->causal ? "true" : "false";
    char decl[128], lse_decl[128], bwd[2048], prep[1024], fwd[1024], train[2048];
    snprintf(decl, sizeof decl, "%s[%u, %u, %u, %u]", dt, c->b, c->h, c->t, c->d);
    snprintf(lse_decl, sizeof lse_decl, "f32[%u, %u, %u, 1]", c->b, c->h, c->t);
    /* the backward a training step runs (autodiff's graph, src/fuse/autodiff.c), from the
     * forward's o and lse: pack, dq writing g2 on the way, dk + dv from g2 */
    snprintf(fwd, sizeof fwd,
             "q: %s\nk: %s\nv: %s\no = attention(q, k, v, causal=%s)\n"
             "lse = attention_lse(q, k, v, causal=%s)\nout o, lse\n",
             decl, decl, decl, causal, causal);
    snprintf(train, sizeof train,
             "q: %s\nk: %s\nv: %s\ndy: %s\no: %s\nlse: %s\ng = attention_grad_pack(dy, o, lse)\n"
             "g2 = attention_grad_stats(q, k, v, g, causal=%s)\n"
             "dq = attention_grad_q(q, k, v, g, causal=%s)\n"
             "dk = attention_grad_k(q, k, v, g2, causal=%s)\n"
             "dv = attention_grad_v(q, k, v, g2, causal=%s)\nout dq, dk, dv\n",
             decl, decl, decl, decl, decl, lse_decl, causal, causal, causal, causal);
    snprintf(bwd, sizeof bwd,
             "q: %s\nk: %s\nv: %s\ndy: %s\ng = attention_grad_prep(q, k, v, dy, causal=%s)\n"
             "dq = attention_grad_q(q, k, v, g, causal=%s)\n"
             "dk = attention_grad_k(q, k, v, g, causal=%s)\n"
             "dv = attention_grad_v(q, k, v, g, causal=%s)\nout dq, dk, dv\n",
             decl, decl, decl, decl, causal, causal, causal, causal);
    snprintf(prep, sizeof prep,
             "q: %s\nk: %s\nv: %s\ndy: %s\ng = attention_grad_prep(q, k, v, dy, causal=%s)\n"
             "out g\n",
             decl, decl, decl, decl, causal);
    /* --train-only: the training backward alone (the other plans' fields 0) */
    const bool full = !a->train_only;
    kf_plan *plans[4] = {full ? attn_compile(ctx, bwd, 0) : NULL,
                         full ? attn_compile(ctx, bwd, 5) : NULL,
                         full ? attn_compile(ctx, prep, 0) : NULL, attn_compile(ctx, train, 0)};
    kf_plan *pf = attn_compile(ctx, fwd, 0);
    kf_shape s = {4, {c->b, c->h, c->t, c->d}}, ls = {4, {c->b, c->h, c->t, 1}};
    kf_tensor *in[4] = {0}, *dq = NULL, *dk = NULL, *o = NULL, *lse = NULL, *dq_t = NULL,
              *dk_t = NULL;
    static const char *const names[4] = {"q", "k", "v", "dy"};
    bool ok = (!full || (plans[0] && plans[1] && plans[2])) && plans[3] && pf &&
              kf_tensor_create(&s, &dq) == KF_OK && kf_tensor_create(&s, &dk) == KF_OK &&
              kf_tensor_create(&s, &o) == KF_OK && kf_tensor_create(&ls, &lse) == KF_OK &&
              kf_tensor_create(&s, &dq_t) == KF_OK && kf_tensor_create(&s, &dk_t) == KF_OK;
    ok = ok && attn_inputs(c, in);
    for (int i = 0; ok && i < 3; i++) {
        ok = kf_plan_set_input(pf, names[i], in[i]) == KF_OK;
    }
    ok = ok && kf_plan_run(pf) == KF_OK && kf_plan_get_output(pf, "o", o) == KF_OK &&
         kf_plan_get_output(pf, "lse", lse) == KF_OK &&
         kf_plan_set_input(plans[3], "o", o) == KF_OK &&
         kf_plan_set_input(plans[3], "lse", lse) == KF_OK;
    kf_timing tm[4] = {{0}};
    ok = ok && (full ? attn_time(plans, 4, in, names, 4, NULL, a->repeat, tm)
                     : attn_time(&plans[3], 1, in, names, 4, NULL, a->repeat, &tm[3]));
    /* the training backward's dispatches one by one: pack, dq (+ g2), dk + dv */
    double each[3] = {0, 0, 0};
    const kf_dispatch *ds = NULL;
    uint32_t nd = 0;
    if (ok && kf_plan_dispatches(plans[3], &ds, &nd) == KF_OK && nd <= 8) {
        double ms[8];
        kf_timing sum;
        if (kf_context_time_each(ctx, ds, nd, a->repeat, ms, &sum) == KF_OK) {
            for (uint32_t i = 0; i < nd; i++) {
                kf_plan_dispatch_info info;
                if (kf_plan_dispatch_info_get(plans[3], i, &info) != KF_OK) {
                    continue;
                }
                int at = !strcmp(info.root, "attention_grad_pack") ? 0
                         : !strcmp(info.root, "attention_grad_q")  ? 1
                         : !strcmp(info.root, "attention_grad_k")  ? 2
                                                                   : -1;
                if (at >= 0) {
                    each[at] += ms[i];
                }
            }
        }
    }
    kf_plan *grads = full ? plans[0] : plans[3];
    ok = ok && kf_plan_get_output(grads, "dq", dq) == KF_OK &&
         kf_plan_get_output(grads, "dk", dk) == KF_OK &&
         kf_plan_get_output(plans[3], "dq", dq_t) == KF_OK &&
         kf_plan_get_output(plans[3], "dk", dk_t) == KF_OK;
    /* dk of the last keys of a causal head is tiny (few queries see them, with small P): in f16
     * it lies among the subnormals, so beside the row's own scale its error is also judged
     * against 1% of the rms of the whole dk (kfuse verify's floor) */
    double err_dq = 0, err_dk = 0, err_dk_tensor = 0, dk_max = 0, dk_ss = 0, lse_err = 0,
           err_dk_g = 0, err_dq_t = 0, err_dk_t = 0, err_dk_t_tensor = 0;
    double *rq2 = malloc(c->d * sizeof *rq2), *rk2 = malloc(c->d * sizeof *rk2);
    kf_shape gs = s;
    gs.dims[3] += 2;
    kf_tensor *g = NULL;
    if (ok && full && kf_tensor_create(&gs, &g) == KF_OK &&
        kf_plan_get_output(plans[2], "g", g) != KF_OK) {
        kf_tensor_destroy(g);
        g = NULL;
    }
    for (uint64_t e = 0; ok && e < kf_tensor_size(dk); e++) {
        dk_ss += (double)dk->data[e] * dk->data[e];
    }
    double dk_floor = ok ? fmax(0.01 * sqrt(dk_ss / (double)kf_tensor_size(dk)), 1e-30) : 1;
    double *rq = malloc(c->d * sizeof *rq), *rk = malloc(c->d * sizeof *rk);
    for (uint32_t r = 0; ok && rq && rk && r < 8; r++) {
        uint64_t head = ((uint64_t)r * 2654435761u) % ((uint64_t)c->b * c->h);
        uint32_t qi = r == 0 ? c->t - 1 : (uint32_t)(((uint64_t)r * 40503u) % c->t);
        uint32_t ki = c->t - 1 - (uint32_t)(((uint64_t)r * 7u) % (c->t < 64 ? c->t : 64u));
        reference(in[0]->data, in[1]->data, in[2]->data, in[3]->data, c, head, qi, ki, rq, rk,
                  g ? g->data : NULL, &lse_err, false);
        uint64_t base = head * c->t * c->d;
        if (g) {
            double lse_unused = 0;
            reference(in[0]->data, in[1]->data, in[2]->data, in[3]->data, c, head, qi, ki, rq2, rk2,
                      g->data, &lse_unused, true);
            err_dk_g =
                fmax(err_dk_g, attn_row_error(dk->data + base + (uint64_t)ki * c->d, rk2, c->d, 0));
        }
        const float *got_dk = dk->data + base + (uint64_t)ki * c->d;
        err_dq = fmax(err_dq, attn_row_error(dq->data + base + (uint64_t)qi * c->d, rq, c->d, 0));
        err_dk = fmax(err_dk, attn_row_error(got_dk, rk, c->d, 0));
        err_dk_tensor = fmax(err_dk_tensor, attn_row_error(got_dk, rk, c->d, dk_floor));
        const float *got_dk_t = dk_t->data + base + (uint64_t)ki * c->d;
        err_dq_t =
            fmax(err_dq_t, attn_row_error(dq_t->data + base + (uint64_t)qi * c->d, rq, c->d, 0));
        err_dk_t = fmax(err_dk_t, attn_row_error(got_dk_t, rk, c->d, 0));
        err_dk_t_tensor = fmax(err_dk_t_tensor, attn_row_error(got_dk_t, rk, c->d, dk_floor));
        for (uint32_t e = 0; e < c->d; e++) {
            dk_max = fmax(dk_max, fabs(rk[e]));
        }
    }
    free(rq);
    free(rk);
    free(rq2);
    free(rk2);
    double flops = 2.5 * 4.0 * c->b * c->h * (double)c->t * c->t * c->d * (c->causal ? 0.5 : 1.0);
    double tf = ok && tm[0].median_ms > 0 ? flops / (tm[0].median_ms * 1e9) : 0;
    if (!ok) {
        fprintf(stderr, "%s B%u H%u T%u D%u: failed: %s\n", dt, c->b, c->h, c->t, c->d,
                kf_context_last_error(ctx));
    } else if (json) {
        char kernels[512];
        attn_kernel_names(plans[3], kernels, sizeof kernels);
        printf(
            "{\"impl\": \"kfuse\", \"dtype\": \"%s\", \"B\": %u, \"H\": %u, \"T\": %u, "
            "\"D\": %u, \"causal\": %s, \"bwd_ms\": %.4f, \"unpaired_ms\": %.4f, "
            "\"prep_ms\": %.4f, \"grads_ms\": %.4f, \"bwd_tflops\": %.3f, "
            "\"max_rel_err_dq\": %.3g, \"max_rel_err_dk\": %.3g, \"max_rel_err_dk_tensor\": %.3g, "
            "\"dk_checked_max\": %.3g, \"lse_max_abs_err\": %.3g, \"max_rel_err_dk_from_g\": "
            "%.3g, \"train_ms\": %.4f, \"train_tflops\": %.3f, \"max_rel_err_dq_train\": %.3g, "
            "\"max_rel_err_dk_train\": %.3g, \"max_rel_err_dk_train_tensor\": %.3g, \"pack_ms\": "
            "%.4f, "
            "\"dq_ms\": %.4f, \"dkv_ms\": %.4f, \"kernels\": \"%s\"}\n",
            dt, c->b, c->h, c->t, c->d, causal, tm[0].median_ms, tm[1].median_ms, tm[2].median_ms,
            tm[0].median_ms - tm[2].median_ms, tf, err_dq, err_dk, err_dk_tensor, dk_max, lse_err,
            err_dk_g, tm[3].median_ms, flops / (tm[3].median_ms * 1e9), err_dq_t, err_dk_t,
            err_dk_t_tensor, each[0], each[1], each[2], kernels);
    } else {
        printf("%-4s %3u %3u %5u %4u %-6s %10.3f %11.3f %9.3f %9.3f %8.2f %9.2g %9.2g %9.2g %9.2g "
               "%9.2g %9.2g %9.3f %9.2g %9.2g\n",
               dt, c->b, c->h, c->t, c->d, causal, tm[0].median_ms, tm[1].median_ms,
               tm[2].median_ms, tm[0].median_ms - tm[2].median_ms, tf, err_dq, err_dk,
               err_dk_tensor, dk_max, lse_err, err_dk_g, tm[3].median_ms, err_dq_t,
               err_dk_t_tensor);
    }
    fflush(stdout);
    attn_inputs_destroy(in);
    kf_tensor_destroy(dq);
    kf_tensor_destroy(dk);
    kf_tensor_destroy(g);
    kf_tensor_destroy(o);
    kf_tensor_destroy(lse);
    kf_tensor_destroy(dq_t);
    kf_tensor_destroy(dk_t);
    for (int p = 0; p < 4; p++) {
        kf_plan_destroy(plans[p]);
    }
    kf_plan_destroy(pf);
    return ok;
}

static void header(const kf_adapter_info *info) {
    printf("%s (%s)\n%-4s %3s %3s %5s %4s %-6s %10s %11s %9s %9s %8s %9s %9s %9s %9s %9s %9s "
           "%9s %9s %9s\n",
           info->device, info->backend, "type", "B", "H", "T", "D", "causal", "bwd_ms",
           "unpaired_ms", "prep_ms", "grads_ms", "bwd_TF/s", "err_dq", "err_dk", "err_dk_all",
           "dk_max", "lse_err", "dk_from_g", "train_ms", "err_dq_tr", "err_dk_tr");
}

int main(int argc, char **argv) {
    attn_args a;
    if (!attn_args_parse(argc, argv, ATTN_ARGS_GRAD,
                         "usage: kfuse_bench_attention_grad [--T N]... [--D N]... "
                         "[--dtype f16|f32]... [--B N] [--H N] [--no-causal] [--repeat N] "
                         "[--json] [--train-only]\n",
                         &a)) {
        return 2;
    }
    return attn_main("kfuse_bench_attention_grad", &a, header, run_case);
}
