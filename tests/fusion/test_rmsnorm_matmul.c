/* rmsnorm into matmul (src/fuse/rules/rmsnorm_matmul.c): `matmul(rmsnorm(x, g), w)` as one kernel
 * that sums each row's squares from the a tiles it loads, scales w's rows by the gain and each
 * result row by r in the store phase. Each case: the fused plan one dispatch fewer than it would
 * be with the normed tensor written, kf_plan_verify of the fused and the unfused plan with one
 * seed (NaN-poisoned outputs, every element against the CPU specs), and the fused outputs against
 * the unfused plan's on the same inputs, within the output's tolerance. */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kf_graph *parse(const char *text) {
    kf_graph *g = NULL;
    kf_spec_error err = {0};
    if (kf_spec_parse(text, strlen(text), &g, &err) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "parse: %u:%u: %s\n%s", err.line, err.column, err.message,
                text);
        return NULL;
    }
    return g;
}

/* Compiles program fused (with a binding budget, 0: the device's) and unfused, verifies both,
 * compares their outputs and returns the fused plan's dispatches (0 on failure); *explained says
 * whether the fused plan's explain names the rule. */
static uint32_t check_program(const char *program, uint32_t max_bindings, bool *explained) {
    kf_context *ctx = kt_context();
    kf_graph *g = ctx ? parse(program) : NULL;
    *explained = false;
    if (!g) {
        if (!ctx) {
            kt_fail(__FILE__, __LINE__, "no WebGPU adapter: run scripts/setup.sh");
        }
        return 0;
    }
    kf_plan *pf = NULL, *pu = NULL;
    kf_compile_options fo = {.max_storage_buffers = max_bindings}, uo = {.no_fuse = true};
    kf_status st = kf_graph_compile(ctx, g, &fo, &pf);
    st = st == KF_OK ? kf_graph_compile(ctx, g, &uo, &pu) : st;
    uint32_t dispatches = 0;
    char *text = NULL;
    if (st != KF_OK) {
        kt_fail(__FILE__, __LINE__, "compile: %s: %s\n%s", kf_status_str(st),
                kf_context_last_error(ctx), program);
        goto done;
    }
    uint64_t seed = kt_rand_u64();
    kf_plan_report rf, ru;
    kf_status sf = kf_plan_verify(pf, seed, &rf), su = kf_plan_verify(pu, seed, &ru);
    text = kf_plan_explain(pf, false);
    if (sf != KF_OK || su != KF_OK) {
        kt_fail(__FILE__, __LINE__, "verify fused: %s, unfused: %s (seed %llu)\n%s\n%s",
                kf_status_str(sf), kf_status_str(su), (unsigned long long)seed, program,
                text ? text : "");
        for (uint32_t i = 0; i < rf.group_count; i++) {
            fprintf(stderr, "    group %u (%s -> %s): err %.3g tol %.3g%s\n", rf.groups[i].dispatch,
                    rf.groups[i].ops, rf.groups[i].result, rf.groups[i].max_rel_error,
                    rf.groups[i].tolerance, rf.groups[i].passed ? "" : " FAILED");
        }
        goto done;
    }
    for (uint32_t o = 0; o < kf_graph_output_count(g); o++) {
        const char *name;
        kf_shape shape;
        kf_graph_output_info(g, o, &name, &shape, NULL);
        kf_tensor *a = NULL, *b = NULL;
        kf_tensor_create(&shape, &a);
        kf_tensor_create(&shape, &b);
        bool got = a && b && kf_plan_get_output(pf, name, a) == KF_OK &&
                   kf_plan_get_output(pu, name, b) == KF_OK;
        uint64_t count = got ? kf_tensor_size(b) : 0;
        double rms = 0.0;
        for (uint64_t i = 0; i < count; i++) {
            rms += (double)b->data[i] * b->data[i];
        }
        rms = count ? sqrt(rms / (double)count) : 0.0;
        double err = got ? kf_max_rel_error(a->data, b->data, count, 0.01 * rms) : INFINITY;
        double tol = INFINITY;
        for (uint32_t r = 0; r < rf.output_count; r++) {
            tol = rf.outputs[r].index == o ? rf.outputs[r].tolerance : tol;
        }
        if (!got || !(err <= tol)) {
            kt_fail(__FILE__, __LINE__,
                    "%s: output %s, fused against unfused: %.3g (tolerance %.3g)", program, name,
                    err, tol);
        }
        kf_tensor_destroy(a);
        kf_tensor_destroy(b);
    }
    kf_plan_summary s = {0}, u = {0};
    kf_plan_summary_get(pf, &s);
    kf_plan_summary_get(pu, &u);
    if (s.bytes > u.bytes) {
        kt_fail(__FILE__, __LINE__, "%s: fused moves more bytes than unfused", program);
    }
    dispatches = s.dispatches;
    *explained = text && strstr(text, "rmsnorm into matmul");
done:
    kf_free(text);
    kf_plan_destroy(pf);
    kf_plan_destroy(pu);
    kf_graph_destroy(g);
    return dispatches;
}

/* Both kernels: K = 1, 17 (a tile and one), 127; M prime (1, 7, 31, 37, 61, 131, 257); the tiled
 * kernel (fewer than 64x64 outputs) and the register-blocked one (ragged tiles, scalar loads of a
 * where K is odd, vec4 ones of b), with and without the gain, w transposed or not, an epilogue or
 * none; f32 and f16. Two products only are large enough for the register-blocked kernel: its
 * shaders take lavapipe 10-20 s each to compile, and both kernels' code is shape-independent
 * but for constants. A device with subgroup matrices keeps the f16 131x64 product on them,
 * unfused (lavapipe has none). */
KT_TEST(fusion, rmsnorm_into_matmul_is_one_dispatch) {
    static const struct {
        uint32_t m, k, n;
        const char *dtype;
        bool gain, transposed;
        const char *tail; /* the epilogue, "" for none */
    } cases[] = {
        {1, 1, 1, "f32", true, false, ""},
        {7, 17, 5, "f32", true, false, " |> gelu"},
        {31, 1, 97, "f32", false, false, ""},
        {37, 127, 29, "f32", true, true, " |> add(b)"},
        {61, 17, 64, "f32", true, false, " |> add(b) |> relu"},
        {257, 127, 13, "f32", false, true, ""},
        {131, 127, 64, "f32", true, false, " |> gelu"}, /* blocked: scalar a, vec4 b loads */
        {13, 17, 5, "f16", true, false, ""},
        {7, 127, 33, "f16", false, true, " |> relu"},
        {131, 68, 64, "f16", true, false, " |> add(b)"}, /* blocked f16 (or subgroup matrices) */
    };
    char program[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *t = cases[i].dtype;
        uint32_t m = cases[i].m, k = cases[i].k, n = cases[i].n;
        char w[64];
        if (cases[i].transposed) {
            snprintf(w, sizeof w, "w: %s[%u,%u]\n", t, n, k);
        } else {
            snprintf(w, sizeof w, "w: %s[%u,%u]\n", t, k, n);
        }
        snprintf(program, sizeof program,
                 "x: %s[%u,%u]\ng: %s[%u]\n%sb: %s[%u]\ny = rmsnorm(x%s) |> matmul(w%s)%s\n", t, m,
                 k, t, k, w, t, n, cases[i].gain ? ", g" : "",
                 cases[i].transposed ? ", transpose_b=true" : "", cases[i].tail);
        kf_adapter_info info = {0};
        kf_context_adapter_info(kt_context(), &info);
        bool sgmat = info.has_subgroup_matrix && !strcmp(t, "f16") && m * n >= 64 * 64;
        uint32_t want = sgmat ? 2u : 1u;
        bool explained = false;
        uint32_t got = check_program(program, 0, &explained);
        KT_CHECK(got == want && explained == !sgmat, "%s: %u dispatches (want %u), rule %s",
                 program, got, want, explained ? "applied" : "not applied");
    }
}

/* A batch folds into the rows ([B, T, C] x [C, N], the transformer's shape), and the eps is the
 * norm's own. */
KT_TEST(fusion, rmsnorm_into_matmul_batched_rows_and_eps) {
    bool explained = false;
    uint32_t got = check_program("x: f32[3,29,40]\nw: f32[40,37]\n"
                                 "y = rmsnorm(x, eps=0.5) |> matmul(w) |> silu\n",
                                 0, &explained);
    KT_CHECK(got == 1 && explained, "batched: %u dispatches", got);
}

/* Where the rule does not apply, the normed tensor is written as before (and the plan stays
 * right): read twice, an output, a bias, a transposed a, the binding budget. */
KT_TEST(fusion, rmsnorm_into_matmul_legality) {
    static const struct {
        const char *program;
        uint32_t bindings, dispatches;
    } cases[] = {
        {"x: f32[16,24]\nw: f32[24,8]\nh = rmsnorm(x)\ny = matmul(h, w)\nz = exp(h)\nout y, z\n", 0,
         3},
        {"x: f32[16,24]\nw: f32[24,8]\nh = rmsnorm(x)\ny = matmul(h, w)\nout h, y\n", 0, 2},
        {"x: f32[16,24]\ng: f32[24]\nc: f32[24]\nw: f32[24,8]\n"
         "y = rmsnorm(x, g, c) |> matmul(w)\n",
         0, 2},
        {"x: f32[24,16]\nw: f32[24,8]\ny = rmsnorm(x) |> matmul(w, transpose_a=true)\n", 0, 2},
        /* x, w, g, four rows and out are 8 bindings: fits 8, not 7 */
        {"x: f32[16,24]\ng: f32[24]\nw: f32[24,8]\na: f32[8]\nb: f32[8]\nc: f32[8]\nd: f32[8]\n"
         "y = rmsnorm(x, g) |> matmul(w) |> add(a) |> add(b) |> add(c) |> add(d)\n",
         8, 1},
        {"x: f32[16,24]\ng: f32[24]\nw: f32[24,8]\na: f32[8]\nb: f32[8]\nc: f32[8]\nd: f32[8]\n"
         "y = rmsnorm(x, g) |> matmul(w) |> add(a) |> add(b) |> add(c) |> add(d)\n",
         7, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bool explained = false;
        uint32_t got = check_program(cases[i].program, cases[i].bindings, &explained);
        KT_CHECK(got == cases[i].dispatches && explained == (cases[i].dispatches == 1),
                 "%s(budget %u): %u dispatches (want %u), rule %s", cases[i].program,
                 cases[i].bindings, got, cases[i].dispatches,
                 explained ? "applied" : "not applied");
    }
}

/* In a training graph: rmsnorm's backward reads x (it recomputes r), not the normed tensor h, so
 * where nothing else needs h (the gradients of x and of the norm's gain through a fixed w) the
 * forward is one kernel, one dispatch fewer than the same graph with h an output (then written),
 * and the backward is unchanged; where the weight gradient h^T dY reads h too, it is written as
 * before. Verified group by group and against the unfused plan, f32 (the tiled kernel) and f16. */
KT_TEST(fusion, rmsnorm_into_matmul_in_a_training_graph) {
    static const struct {
        const char *inputs, *tail, *grads;
        bool fused;
    } cases[] = {
        {"x: f32[37,17]\ng: f32[17]\nw: f32[17,29]\n",
         "h = rmsnorm(x, g)\ny = h |> matmul(w) |> tanh",
         "dx, dg = grad(loss, x, g)\nout loss, dx, dg", true},
        {"x: f32[37,127]\nw: f32[127,64]\n", "h = rmsnorm(x)\ny = h |> matmul(w) |> gelu",
         "dx = grad(loss, x)\nout loss, dx", true},
        {"x: f16[13,17]\ng: f16[17]\nw: f16[17,5]\n", "h = rmsnorm(x, g)\ny = h |> matmul(w)",
         "dx, dg = grad(loss, x, g)\nout loss, dx, dg", true},
        {"x: f32[37,17]\ng: f32[17]\nw: f32[17,29]\n",
         "h = rmsnorm(x, g)\ny = h |> matmul(w) |> tanh",
         "dx, dg, dw = grad(loss, x, g, w)\nout loss, dx, dg, dw", false},
    };
    char program[1024];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint32_t got[2] = {0, 0};
        bool explained[2] = {false, false};
        for (int with_h = 0; with_h < 2; with_h++) {
            snprintf(program, sizeof program, "%s%s\nloss = mean(mean(square(y)))\n%s%s\n",
                     cases[i].inputs, cases[i].tail, cases[i].grads, with_h ? ", h" : "");
            got[with_h] = check_program(program, 0, &explained[with_h]);
        }
        KT_CHECK(got[0] && explained[0] == cases[i].fused && !explained[1] &&
                     got[0] + (cases[i].fused ? 1u : 0u) == got[1],
                 "%s\n%s: %u dispatches, with h an output %u; rule %s (want %s)", cases[i].tail,
                 cases[i].grads, got[0], got[1], explained[0] ? "applied" : "not applied",
                 cases[i].fused ? "applied" : "not");
    }
}
