/* What backward reads from forward (src/fuse/rules/activation_save.c): the pre-activation of
 * matmul |> add |> gelu saved as a second output of the forward kernel (GELU_AUX) or recomputed
 * in the backward kernel that reads it; the dispatch counts, the same numbers as the unfused
 * plan, kf_plan_verify (the saved pre-activation checked on its own), and explain. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define OUTPUTS 5
static const char *const output_names[OUTPUTS] = {"loss", "d_w1", "d_b1", "d_w2", "d_b2"};

/* An MLP training graph at edge sizes (primes; K = 13 is not a multiple of any tile):
 * x [37, 13] -> w1 [13, 29] + b1 -> gelu -> w2 [29, 7] + b2 -> cross_entropy, and the
 * gradients of the four parameters. */
static kf_graph *mlp(void) {
    kf_graph *g = kf_graph_create();
    kf_shape xs = kf_shape_2d(37, 13), w1s = kf_shape_2d(13, 29), b1s = kf_shape_1d(29);
    kf_shape w2s = kf_shape_2d(29, 7), b2s = kf_shape_1d(7), ls = kf_shape_1d(37);
    kf_node x = kf_graph_input(g, "x", &xs, KF_DTYPE_F32);
    kf_node labels = kf_graph_input(g, "labels", &ls, KF_DTYPE_I32);
    kf_node params[4] = {
        kf_graph_input(g, "w1", &w1s, KF_DTYPE_F32), kf_graph_input(g, "b1", &b1s, KF_DTYPE_F32),
        kf_graph_input(g, "w2", &w2s, KF_DTYPE_F32), kf_graph_input(g, "b2", &b2s, KF_DTYPE_F32)};
    kf_node h =
        kf_graph_unary(g, "gelu", kf_graph_add(g, kf_graph_matmul(g, x, params[0]), params[1]));
    kf_node logits = kf_graph_add(g, kf_graph_matmul(g, h, params[2]), params[3]);
    kf_node in[2] = {logits, labels};
    kf_node loss = kf_graph_op(g, "cross_entropy", in, 2, NULL);
    kf_graph_output(g, "loss", loss);
    kf_node grads[4];
    kf_graph_grad(g, loss, params, 4, grads);
    for (int i = 0; i < 4; i++) {
        kf_graph_output(g, output_names[i + 1], grads[i]);
    }
    return g;
}

typedef struct variant {
    const char *name;
    kf_compile_options opts;
    uint32_t dispatches; /* expected */
    const char *explain; /* a line explain must show, or NULL */
    const char *absent;  /* one it must not */
} variant;

KT_TEST(fusion, activation_save_gelu_aux_or_recompute) {
    KT_NEED_GPU(ctx);
    kf_graph *g = mlp();
    KT_CHECK(kf_graph_status(g) == KF_OK, "%s", kf_graph_error(g));
    /* forward: matmul |> add |> gelu (pre-activation saved, or not written), matmul |> add;
     * backward as in autodiff_mlp_training_graph_dispatches. SPLIT is the plan before the rule:
     * matmul |> add, then gelu on its own. */
    variant vs[] = {
        {"unfused", {.no_fuse = true}, 14, NULL, "pre-activation"},
        {"auto", {0}, 6, "saves:  pre-activation add#", "recomputes:"},
        {"save", {.activations = KF_ACTIVATIONS_SAVE}, 6, "(save forced)", "recomputes:"},
        {"recompute",
         {.activations = KF_ACTIVATIONS_RECOMPUTE},
         6,
         "recomputes: pre-activation add#",
         "saves:"},
        {"split", {.activations = KF_ACTIVATIONS_SPLIT}, 7, NULL, "pre-activation"},
    };
    const uint32_t nv = sizeof vs / sizeof vs[0];
    /* one set of inputs for every variant */
    const char *inputs[] = {"x", "labels", "w1", "b1", "w2", "b2"};
    kf_tensor *values[6] = {0};
    kf_plan *plans[5] = {0};
    for (uint32_t v = 0; v < nv; v++) {
        KT_CHECK_OK(kf_graph_compile(ctx, g, &vs[v].opts, &plans[v]));
        kf_plan_summary s;
        KT_CHECK_OK(kf_plan_summary_get(plans[v], &s));
        char *text = kf_plan_explain(plans[v], false);
        KT_CHECK(text, "explain");
        KT_CHECK(s.dispatches == vs[v].dispatches, "%s: %u dispatches, want %u\n%s", vs[v].name,
                 s.dispatches, vs[v].dispatches, text);
        KT_CHECK(!vs[v].explain || strstr(text, vs[v].explain), "%s: explain lacks '%s':\n%s",
                 vs[v].name, vs[v].explain, text);
        KT_CHECK(!strstr(text, vs[v].absent), "%s: explain shows '%s':\n%s", vs[v].name,
                 vs[v].absent, text);
        kf_free(text);
        kf_plan_report rep;
        kf_status st = kf_plan_verify(plans[v], kt_rand_u64(), &rep);
        KT_CHECK(st == KF_OK, "%s: verify: %s (%u of %u groups failed)", vs[v].name,
                 kf_status_str(st), rep.failed_groups, rep.total_groups);
        /* the saved pre-activation is checked as a value of its own group */
        bool saves = v == 1 || v == 2, checked = false;
        for (uint32_t i = 0; i < rep.group_count; i++) {
            checked |= !strcmp(rep.groups[i].ops, "matmul |> add |> gelu") &&
                       !strncmp(rep.groups[i].result, "add_", 4);
        }
        KT_CHECK(checked == saves, "%s: the pre-activation %s checked", vs[v].name,
                 checked ? "is" : "is not");
    }
    for (uint32_t i = 0; i < 6; i++) {
        KT_CHECK_OK(kf_plan_random_input(plans[0], inputs[i], kt_rand_u64(), &values[i]));
    }
    float *ref[OUTPUTS] = {0};
    for (uint32_t v = 0; v < nv; v++) {
        for (uint32_t i = 0; i < 6; i++) {
            KT_CHECK_OK(kf_plan_set_input(plans[v], inputs[i], values[i]));
        }
        KT_CHECK_OK(kf_plan_run(plans[v]));
        for (uint32_t o = 0; o < OUTPUTS; o++) {
            kf_shape os;
            KT_CHECK_OK(kf_graph_output_info(g, o, NULL, &os, NULL));
            kf_tensor *t = NULL;
            KT_CHECK_OK(kf_tensor_create(&os, &t));
            uint64_t n = kf_tensor_size(t);
            for (uint64_t e = 0; e < n; e++) {
                t->data[e] = NAN; /* poison: every element must be written */
            }
            KT_CHECK_OK(kf_plan_get_output(plans[v], output_names[o], t));
            if (v == 0) {
                ref[o] = malloc(n * sizeof *ref[o]);
                memcpy(ref[o], t->data, n * sizeof *ref[o]);
            } else {
                double rms = 0.0;
                for (uint64_t e = 0; e < n; e++) {
                    rms += (double)ref[o][e] * ref[o][e];
                }
                double floor = 0.01 * sqrt(rms / (double)n) + 1e-30;
                for (uint64_t e = 0; e < n; e++) {
                    double d =
                        fabs((double)t->data[e] - ref[o][e]) / fmax(fabs((double)ref[o][e]), floor);
                    KT_CHECK(d <= 1e-4, "%s: %s[%llu] = %.9g, unfused %.9g", vs[v].name,
                             output_names[o], (unsigned long long)e, (double)t->data[e],
                             (double)ref[o][e]);
                }
            }
            kf_tensor_destroy(t);
        }
    }
    for (uint32_t o = 0; o < OUTPUTS; o++) {
        free(ref[o]);
    }
    for (uint32_t i = 0; i < 6; i++) {
        kf_tensor_destroy(values[i]);
    }
    for (uint32_t v = 0; v < nv; v++) {
        kf_plan_destroy(plans[v]);
    }
    kf_graph_destroy(g);
}

/* Forward tensors both overwritten in place and read by backward: tanh(a) and sigmoid(b) are
 * written into the tensors of a and b (in-place activations), while backward's tanh_grad and
 * sigmoid_grad read a and b afterwards. Binding them was refused before; now a and b are saved
 * first, both in one dispatch (kf_save_activations' horizontal copy), and the later readers read
 * the copies. */
KT_TEST(fusion, activation_save_inputs_overwritten_in_place_in_one_dispatch) {
    KT_NEED_GPU(ctx);
    const char *text = "a: f32[37, 29]\n"
                       "b: f32[37, 29]\n"
                       "w: f32[29, 13]\n"
                       "ha = tanh(a)\n"
                       "hb = sigmoid(b)\n"
                       "z = matmul(add(ha, hb), w)\n"
                       "loss = mean(mean(square(z)))\n"
                       "da, db, dw = grad(loss, a, b, w)\n"
                       "out loss, ha, hb, da, db, dw\n";
    kf_graph *g = NULL;
    kf_spec_error err;
    KT_CHECK(kf_spec_parse(text, strlen(text), &g, &err) == KF_OK, "%u:%u: %s", err.line,
             err.column, err.message);
    kf_plan *ref = NULL, *p = NULL;
    KT_CHECK_OK(kf_graph_compile(ctx, g, NULL, &ref));
    KT_CHECK_OK(kf_graph_compile(ctx, g, NULL, &p));
    const char *names[3] = {"a", "b", "w"};
    kf_tensor *in[3] = {0};
    kf_gpu_tensor *dev[2] = {0};
    for (uint32_t i = 0; i < 3; i++) {
        KT_CHECK_OK(kf_plan_random_input(ref, names[i], kt_rand_u64(), &in[i]));
        KT_CHECK_OK(kf_plan_set_input(ref, names[i], in[i]));
    }
    KT_CHECK_OK(kf_plan_run(ref));
    kf_plan_summary before;
    KT_CHECK_OK(kf_plan_summary_get(p, &before));
    KT_CHECK_OK(kf_plan_set_input(p, "w", in[2]));
    for (uint32_t i = 0; i < 2; i++) {
        KT_CHECK_OK(kf_gpu_tensor_from(ctx, in[i], KF_DTYPE_F32, &dev[i]));
        KT_CHECK_OK(kf_plan_bind_input(p, names[i], dev[i]));
        kf_status st = kf_plan_bind_output(p, i ? "hb" : "ha", dev[i]);
        KT_CHECK(st == KF_OK, "binding %s in place: %s: %s", i ? "hb" : "ha", kf_status_str(st),
                 kf_context_last_error(ctx));
    }
    kf_plan_summary after;
    KT_CHECK_OK(kf_plan_summary_get(p, &after));
    char *explained = kf_plan_explain(p, false);
    KT_CHECK(after.dispatches == before.dispatches + 1,
             "one save dispatch for both inputs: %u dispatches, %u before\n%s", after.dispatches,
             before.dispatches, explained ? explained : "");
    KT_CHECK(explained && strstr(explained, "dispatch 1  activation save: a f32[37x29], b f32["),
             "explain names the save:\n%s", explained ? explained : "");
    KT_CHECK(strstr(explained, "saves:  a, overwritten in place by ha"), "%s", explained);
    const char *save = strstr(explained, "dispatch 1  activation save");
    const char *next = save ? strstr(save, "\ndispatch 2") : NULL;
    printf("    %.*s\n", next ? (int)(next - save) : 0, save ? save : "");
    kf_free(explained);
    KT_CHECK_OK(kf_plan_run(p)); /* once: afterwards a's and b's tensors hold ha and hb */
    const char *outs[] = {"loss", "da", "db", "dw", "ha", "hb"};
    for (uint32_t o = 0; o < 6; o++) {
        uint32_t idx = 0;
        kf_shape os;
        const char *name = NULL;
        while (kf_graph_output_info(g, idx, &name, &os, NULL) == KF_OK && strcmp(name, outs[o])) {
            idx++;
        }
        kf_tensor *want = NULL, *got = NULL;
        KT_CHECK_OK(kf_tensor_create(&os, &want));
        KT_CHECK_OK(kf_tensor_create(&os, &got));
        KT_CHECK_OK(kf_plan_get_output(ref, outs[o], want));
        uint64_t n = kf_tensor_size(got);
        for (uint64_t e = 0; e < n; e++) {
            got->data[e] = NAN;
        }
        if (o < 4) {
            KT_CHECK_OK(kf_plan_get_output(p, outs[o], got));
        } else {
            KT_CHECK_OK(kf_gpu_tensor_to(dev[o - 4], got)); /* the in-place result */
        }
        for (uint64_t e = 0; e < n; e++) {
            /* both plans run the same kernels on the same values: bit for bit */
            KT_CHECK(got->data[e] == want->data[e], "%s[%llu] = %.9g, unbound %.9g", outs[o],
                     (unsigned long long)e, (double)got->data[e], (double)want->data[e]);
        }
        kf_tensor_destroy(want);
        kf_tensor_destroy(got);
    }
    kf_plan_destroy(p);
    kf_plan_destroy(ref);
    for (uint32_t i = 0; i < 3; i++) {
        kf_tensor_destroy(in[i]);
    }
    kf_gpu_tensor_destroy(dev[0]);
    kf_gpu_tensor_destroy(dev[1]);
    kf_graph_destroy(g);
}

/* Compiles text fused with `policy` and checks it verifies; returns its dispatch count (0 on
 * failure) and whether explain shows a saved pre-activation. */
static uint32_t plan_with(kf_context *ctx, const char *text, kf_activation_policy policy,
                          bool *saves) {
    kf_graph *g = NULL;
    kf_spec_error err;
    if (kf_spec_parse(text, strlen(text), &g, &err) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "%u:%u: %s", err.line, err.column, err.message);
        return 0;
    }
    kf_plan *p = NULL;
    kf_compile_options o = {.activations = policy};
    kf_status st = kf_graph_compile(ctx, g, &o, &p);
    kf_graph_destroy(g);
    if (st != KF_OK) {
        kt_fail(__FILE__, __LINE__, "compile: %s", kf_context_last_error(ctx));
        return 0;
    }
    kf_plan_report rep;
    st = kf_plan_verify(p, kt_rand_u64(), &rep);
    char *text_out = kf_plan_explain(p, false);
    *saves = text_out && strstr(text_out, "saves:  pre-activation");
    if (st != KF_OK) {
        kt_fail(__FILE__, __LINE__, "verify: %s\n%s", kf_status_str(st), text_out);
    }
    kf_free(text_out);
    kf_plan_summary s;
    kf_plan_summary_get(p, &s);
    kf_plan_destroy(p);
    return st == KF_OK ? s.dispatches : 0;
}

KT_TEST(fusion, activation_save_edge_cases) {
    KT_NEED_GPU(ctx);
    bool saves = false;
    /* the continuation reads the pre-activation twice and nothing else does: one kernel, nothing
     * saved */
    const char *twice = "x: f32[5, 7]\nw: f32[7, 3]\nb: f32[3]\n"
                        "y = matmul(x, w) |> add(b)\nz = mul(y, y)\nout z\n";
    uint32_t n = plan_with(ctx, twice, KF_ACTIVATIONS_AUTO, &saves);
    KT_CHECK(n == 1 && !saves, "mul(y, y): %u dispatches (want 1), saves %d", n, saves);
    KT_CHECK(plan_with(ctx, twice, KF_ACTIVATIONS_SPLIT, &saves) == 2, "split: 2 dispatches");
    /* a row reduction's pre-activation (layernorm |> add(b), then gelu) read by backward:
     * saved (recompute is for matmuls only, so forcing it saves too) */
    const char *norm = "x: f32[13, 24]\nb: f32[24]\n"
                       "h = layernorm(x) |> add(b) |> gelu\nloss = mean(mean(square(h)))\n"
                       "dx, db = grad(loss, x, b)\nout loss, dx, db\n";
    uint32_t split = plan_with(ctx, norm, KF_ACTIVATIONS_SPLIT, &saves);
    uint32_t fused = plan_with(ctx, norm, KF_ACTIVATIONS_AUTO, &saves);
    KT_CHECK(fused && fused + 1 == split && saves, "layernorm: %u dispatches, split %u, saves %d",
             fused, split, saves);
    fused = plan_with(ctx, norm, KF_ACTIVATIONS_RECOMPUTE, &saves);
    KT_CHECK(fused + 1 == split && saves, "layernorm, recompute asked: %u, saves %d", fused, saves);
    /* a continuation its consumer would take into its loads (a prologue) is left to that rule:
     * rmsnorm_grad_x's dy = tanh_grad(...) * w, with tanh_grad's value read twice */
    const char *pro = "x: f32[13, 24]\nw: f32[24]\n"
                      "h = rmsnorm(x) |> mul(w) |> tanh\nloss = mean(mean(square(h)))\n"
                      "dx, dw = grad(loss, x, w)\nout loss, dx, dw\n";
    split = plan_with(ctx, pro, KF_ACTIVATIONS_SPLIT, &saves);
    fused = plan_with(ctx, pro, KF_ACTIVATIONS_AUTO, &saves);
    KT_CHECK(fused == split && !saves, "prologue left alone: %u dispatches, split %u, saves %d",
             fused, split, saves);
}
