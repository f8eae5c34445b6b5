/* Attention's row statistics as the forward's second output (src/fuse/rules/companion.c): a
 * graph with attention and attention_lse of the same inputs runs them in one dispatch, a graph
 * without attention_lse keeps the forward writing o alone, and autodiff's backward reads the
 * forward's o and lse (attention_grad_pack) instead of running the forward again
 * (attention_grad_prep); each plan against the specs (kf_plan_verify: every group's outputs,
 * the side included). */
#include "harness.h"

#include <string.h>

static kf_plan *compile(kf_context *ctx, const char *text, kf_graph **g) {
    kf_spec_error err;
    if (kf_spec_parse(text, strlen(text), g, &err) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "parse: %s", err.message);
        return NULL;
    }
    kf_plan *p = NULL;
    if (kf_graph_compile(ctx, *g, NULL, &p) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "compile: %s", kf_context_last_error(ctx));
    }
    return p;
}

static uint32_t dispatches(const kf_plan *p) {
    kf_plan_summary s = {0};
    kf_plan_summary_get(p, &s);
    return s.dispatches;
}

KT_TEST(fusion, attention_lse_is_the_forward_s_second_output) {
    KT_NEED_GPU(ctx);
    /* ragged T (37: three 16-row tiles, the last of 5; 130: the register-tiled kernel's three
     * 64-row tiles), f32 and f16, causal and not, a tail on o */
    static const char *const texts[] = {
        "q: f32[2, 3, 37, 24]\nk: f32[2, 3, 37, 24]\nv: f32[2, 3, 37, 24]\n"
        "o = attention(q, k, v) |> scale(0.5)\nlse = attention_lse(q, k, v)\nout o, lse\n",
        "q: f16[1, 2, 130, 64]\nk: f16[1, 2, 130, 64]\nv: f16[1, 2, 130, 64]\n"
        "o = attention(q, k, v, causal=false)\nlse = attention_lse(q, k, v, causal=false)\n"
        "out o, lse\n",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        kf_graph *g = NULL;
        kf_plan *p = compile(ctx, texts[i], &g);
        if (!p) {
            kf_graph_destroy(g);
            return;
        }
        KT_CHECK(dispatches(p) == 1, "case %zu: %u dispatches", i, dispatches(p));
        char *explain = kf_plan_explain(p, false);
        KT_CHECK(explain && strstr(explain, "second output: attention") &&
                     strstr(explain, "+ attention_lse"),
                 "explain: %s", explain ? explain : "");
        kf_free(explain);
        kf_plan_report rep;
        KT_CHECK_OK(kf_plan_verify(p, kt_rand_u64(), &rep));
        KT_CHECK(rep.passed, "case %zu: %u outputs failed", i, rep.failed_outputs);
        kf_plan_destroy(p);
        kf_graph_destroy(g);
    }
    /* params differ (one causal, one not): two kernels, each its own */
    kf_graph *g = NULL;
    kf_plan *p = compile(ctx,
                         "q: f32[1, 1, 20, 8]\nk: f32[1, 1, 20, 8]\nv: f32[1, 1, 20, 8]\n"
                         "o = attention(q, k, v)\nlse = attention_lse(q, k, v, causal=false)\n"
                         "out o, lse\n",
                         &g);
    KT_CHECK(p && dispatches(p) == 2, "different params: %u dispatches", p ? dispatches(p) : 0);
    kf_plan_destroy(p);
    kf_graph_destroy(g);
}

KT_TEST(fusion, attention_backward_reads_the_forward_s_statistics) {
    KT_NEED_GPU(ctx);
    const char *train = "q: f32[1, 2, 33, 16]\nk: f32[1, 2, 33, 16]\nv: f32[1, 2, 33, 16]\n"
                        "o = attention(q, k, v)\nloss = sum(sum(sum(sum(o |> square))))\n"
                        "dq, dk, dv = grad(loss, q, k, v)\nout o, dq, dk, dv\n";
    kf_graph *g = NULL;
    kf_plan *p = compile(ctx, train, &g);
    if (!p) {
        kf_graph_destroy(g);
        return;
    }
    char *explain = kf_plan_explain(p, false);
    KT_CHECK(explain && strstr(explain, "attention + attention_lse -> o") &&
                 strstr(explain, "attention_grad_pack") && !strstr(explain, "attention_grad_prep"),
             "explain: %s", explain ? explain : "");
    /* dq's kernel writes g' (the exact statistics dk and dv read) on the way */
    KT_CHECK(explain && strstr(explain, "attention_grad_q + attention_grad_stats") &&
                 strstr(explain, "attention_grad_k + attention_grad_v") &&
                 !strstr(explain, "reduction: attention_grad_stats"),
             "explain: %s", explain ? explain : "");
    /* no kernel walks the keys for the forward but the forward's own */
    const char *lse = explain ? strstr(explain, "attention_lse") : NULL;
    KT_CHECK(lse && !strstr(lse + 1, "reduction: attention_lse"), "a dispatch of attention_lse");
    kf_free(explain);
    kf_plan_report rep;
    KT_CHECK_OK(kf_plan_verify(p, kt_rand_u64(), &rep));
    KT_CHECK(rep.passed, "%u outputs failed", rep.failed_outputs);
    kf_plan_destroy(p);
    kf_graph_destroy(g);
    /* the forward alone: o only, one dispatch, no statistics written */
    p = compile(ctx,
                "q: f32[1, 2, 33, 16]\nk: f32[1, 2, 33, 16]\nv: f32[1, 2, 33, 16]\n"
                "o = attention(q, k, v)\nout o\n",
                &g);
    explain = p ? kf_plan_explain(p, false) : NULL;
    KT_CHECK(p && dispatches(p) == 1 && explain && !strstr(explain, "attention_lse"),
             "forward alone: %s", explain ? explain : "");
    kf_free(explain);
    kf_plan_destroy(p);
    kf_graph_destroy(g);
}
