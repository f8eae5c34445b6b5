/* The gather rule (src/fuse/rules/gather_tail.c): embedding with the element-wise operators
 * after it in its store phase, through reshapes (a GPT's wte[x] + wpe as one dispatch), forward
 * and in a training graph; the same numbers as the unfused plan and the CPU specs
 * (kf_plan_verify), and fewer dispatches. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static kf_graph *parse(const char *text) {
    kf_graph *g = NULL;
    kf_spec_error err = {0};
    if (kf_spec_parse(text, strlen(text), &g, &err) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "parse: %u:%u: %s", err.line, err.column, err.message);
        return NULL;
    }
    return g;
}

/* program's fused plan has `want` dispatches and `needle` in its explain; fused and unfused
 * plans verified on the same inputs, their outputs compared element by element. */
static void expect_gather(const char *program, uint32_t want, const char *needle) {
    KT_NEED_GPU(ctx);
    kf_graph *g = parse(program);
    if (!g) {
        return;
    }
    kf_plan *pf = NULL, *pu = NULL;
    kf_compile_options no_fuse = {.no_fuse = true};
    KT_CHECK_OK(kf_graph_compile(ctx, g, NULL, &pf));
    KT_CHECK_OK(kf_graph_compile(ctx, g, &no_fuse, &pu));
    char *text = kf_plan_explain(pf, false);
    KT_CHECK(text, "explain");
    uint64_t seed = kt_rand_u64();
    kf_plan_report rf, ru;
    KT_CHECK(kf_plan_verify(pf, seed, &rf) == KF_OK && rf.passed,
             "fused plan fails verification: %s\n%s", kf_context_last_error(ctx), text);
    KT_CHECK(kf_plan_verify(pu, seed, &ru) == KF_OK && ru.passed,
             "unfused plan fails verification: %s", kf_context_last_error(ctx));
    for (uint32_t o = 0; o < kf_graph_output_count(g); o++) {
        const char *name;
        kf_shape shape;
        kf_graph_output_info(g, o, &name, &shape, NULL);
        kf_tensor *a = NULL, *b = NULL;
        KT_CHECK_OK(kf_tensor_create(&shape, &a));
        KT_CHECK_OK(kf_tensor_create(&shape, &b));
        uint64_t n = kf_tensor_size(a);
        for (uint64_t e = 0; e < n; e++) {
            a->data[e] = NAN;
        }
        KT_CHECK_OK(kf_plan_get_output(pf, name, a));
        KT_CHECK_OK(kf_plan_get_output(pu, name, b));
        double err = kf_max_rel_error(a->data, b->data, n, 0.01);
        KT_CHECK(err <= rf.outputs[o].tolerance, "%s: fused and unfused differ by %.3g (tol %.3g)",
                 name, err, rf.outputs[o].tolerance);
        kf_tensor_destroy(a);
        kf_tensor_destroy(b);
    }
    kf_plan_summary s = {0};
    kf_plan_summary_get(pf, &s);
    KT_CHECK(s.dispatches == want && s.dispatches < s.unfused_dispatches,
             "%s\n    dispatches: fused %u (want %u), unfused %u\n%s", program, s.dispatches, want,
             s.unfused_dispatches, text);
    KT_CHECK(strstr(text, needle), "'%s' not in:\n%s", needle, text);
    kf_free(text);
    kf_plan_destroy(pf);
    kf_plan_destroy(pu);
    kf_graph_destroy(g);
}

/* gpt.kf's opening at edge sizes (vocab 13, width 7, 3 sequences of 5): the token rows plus the
 * position table broadcast over the batch, then an activation: one dispatch. */
KT_TEST(fusion, gather_tail_embedding_plus_positions_is_one_dispatch) {
    expect_gather("x: i32[3, 5]\nwte: f32[13, 7]\nwpe: f32[5, 7]\n"
                  "tok = embedding(wte, x) |> reshape(shape=[3, 35])\n"
                  "h = add(tok, reshape(wpe, shape=[35])) |> reshape(shape=[15, 7]) |> gelu\n"
                  "out h\n",
                  1, "gather -> element-wise: embedding |> reshape |> add |> reshape |> gelu");
    /* one row id (rank 0 ids), a scale and a residual of the same shape */
    expect_gather("i: i32[]\nt: f32[11, 33]\nr: f32[33]\n"
                  "y = embedding(t, i) |> mul(3) |> add(r)\nout y\n",
                  1, "gather -> element-wise: embedding |> mul |> add");
}

/* In a training graph: the forward's sum is one dispatch, and the gradients of both tables
 * (embedding_grad and the position table's column sums) match the unfused plan's. */
KT_TEST(fusion, gather_tail_in_a_training_graph) {
    expect_gather("x: i32[3, 5]\nr: f32[15, 7]\nparam wte: f32[13, 7]\nparam wpe: f32[5, 7]\n"
                  "tok = embedding(wte, x) |> reshape(shape=[3, 35])\n"
                  "h = add(tok, reshape(wpe, shape=[35])) |> reshape(shape=[15, 7])\n"
                  "loss = rmsnorm(h) |> mul(r) |> sum |> sum\n"
                  "dwte, dwpe = grad(loss, wte, wpe)\n"
                  "out loss, dwte, dwpe\n",
                  8, "gather -> element-wise: embedding |> reshape |> add |> reshape -> ");
}
