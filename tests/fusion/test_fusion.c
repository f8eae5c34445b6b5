/* Fusion: each rule's canonical case (fewer dispatches, same numbers as the unfused plan and the
 * CPU specs), the planner's legality limits, manual composition, and random graphs. */
#include "fusion/graph_equal.h"
#include "harness.h"
#include "ops/operator.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Compiles g fused and unfused, verifies both against the CPU specs with one seed, checks the
 * fused outputs equal the unfused ones within the verification tolerance, and returns the fused
 * and unfused dispatch counts. */
static bool check_graph(kf_context *ctx, const kf_graph *g, uint32_t *fused, uint32_t *unfused) {
    kf_plan *pf = NULL, *pu = NULL;
    kf_compile_options no_fuse = {.no_fuse = true};
    kf_status st = kf_graph_compile(ctx, g, NULL, &pf);
    if (st != KF_OK) {
        kt_fail(__FILE__, __LINE__, "compile fused: %s: %s", kf_status_str(st),
                kf_context_last_error(ctx));
        return false;
    }
    st = kf_graph_compile(ctx, g, &no_fuse, &pu);
    if (st != KF_OK) {
        kt_fail(__FILE__, __LINE__, "compile unfused: %s: %s", kf_status_str(st),
                kf_context_last_error(ctx));
        kf_plan_destroy(pf);
        return false;
    }
    uint64_t seed = kt_rand_u64();
    kf_plan_report rf, ru;
    kf_status sf = kf_plan_verify(pf, seed, &rf);
    kf_status su = kf_plan_verify(pu, seed, &ru);
    bool ok = sf == KF_OK && su == KF_OK;
    if (!ok) {
        char *text = kf_plan_explain(pf, true);
        kt_fail(__FILE__, __LINE__, "verify fused: %s, unfused: %s (%s)\n%s", kf_status_str(sf),
                kf_status_str(su), kf_context_last_error(ctx), text ? text : "");
        kf_free(text);
        for (uint32_t o = 0; o < rf.output_count; o++) {
            fprintf(stderr, "    fused %s: err %.3g tol %.3g\n", rf.outputs[o].name,
                    rf.outputs[o].max_rel_error, rf.outputs[o].tolerance);
        }
    }
    /* Same inputs (same seed): the fused and unfused answers must agree with each other too. */
    for (uint32_t o = 0; ok && o < kf_graph_output_count(g); o++) {
        const char *name;
        kf_shape shape;
        kf_graph_output_info(g, o, &name, &shape, NULL);
        kf_tensor *a = NULL, *b = NULL;
        kf_tensor_create(&shape, &a);
        kf_tensor_create(&shape, &b);
        ok = a && b && kf_plan_get_output(pf, name, a) == KF_OK &&
             kf_plan_get_output(pu, name, b) == KF_OK;
        /* Relative to max(|unfused|, 1% of its rms), as kf_plan_verify measures: an output
         * that cancels to near zero (x * 0.5 + b + c) differs in its last bits between two
         * evaluation orders, which is no error. */
        double rms = 0.0;
        uint64_t count = ok ? kf_tensor_size(b) : 0;
        for (uint64_t i = 0; i < count; i++) {
            rms += (double)b->data[i] * b->data[i];
        }
        rms = count && isfinite(rms) ? sqrt(rms / (double)count) : 0.0;
        double err = ok ? kf_max_rel_error(a->data, b->data, count, 0.01 * rms) : INFINITY;
        if (!(err <= rf.outputs[o].tolerance)) {
            kt_fail(__FILE__, __LINE__, "output %s: fused vs unfused differ by %.3g", name, err);
            ok = false;
        }
        kf_tensor_destroy(a);
        kf_tensor_destroy(b);
    }
    kf_plan_summary s;
    kf_plan_summary_get(pf, &s);
    *fused = s.dispatches;
    *unfused = s.unfused_dispatches;
    kf_plan_summary su_;
    kf_plan_summary_get(pu, &su_);
    if (su_.dispatches != s.unfused_dispatches) {
        kt_fail(__FILE__, __LINE__, "unfused plan ran %u dispatches, expected one per op (%u)",
                su_.dispatches, s.unfused_dispatches);
        ok = false;
    }
    if (s.bytes > s.unfused_bytes) {
        kt_fail(__FILE__, __LINE__, "fused plan moves more bytes (%llu) than unfused (%llu)",
                (unsigned long long)s.bytes, (unsigned long long)s.unfused_bytes);
        ok = false;
    }
    kf_plan_destroy(pf);
    kf_plan_destroy(pu);
    return ok;
}

static kf_graph *parse(const char *text) {
    kf_graph *g = NULL;
    kf_spec_error err = {0};
    kf_status st = kf_spec_parse(text, strlen(text), &g, &err);
    if (st != KF_OK) {
        kt_fail(__FILE__, __LINE__, "parse: %u:%u: %s", err.line, err.column, err.message);
        return NULL;
    }
    return g;
}

static void expect_dispatches(const char *program, uint32_t want_fused, uint32_t want_unfused) {
    kf_context *ctx = kt_context();
    if (!ctx) {
        kt_fail(__FILE__, __LINE__, "no WebGPU adapter: run scripts/setup.sh");
        return;
    }
    kf_graph *g = parse(program);
    if (!g) {
        return;
    }
    uint32_t fused = 0, unfused = 0;
    if (check_graph(ctx, g, &fused, &unfused)) {
        if (fused != want_fused || unfused != want_unfused) {
            kt_fail(__FILE__, __LINE__,
                    "%s\n    dispatches: fused %u (want %u), unfused %u (want %u)", program, fused,
                    want_fused, unfused, want_unfused);
        }
    }
    kf_graph_destroy(g);
}

KT_TEST(fusion, chain_of_five_is_one_dispatch) {
    expect_dispatches("x: f32[257,129]\n"
                      "y = x |> scale(2) |> add(1) |> relu |> gelu |> tanh\n",
                      1, 5);
}

KT_TEST(fusion, chain_with_scalar_row_and_column_broadcasts) {
    expect_dispatches("x: f32[33,65]\nb: f32[65]\nc: f32[33,1]\n"
                      "y = x |> mul(0.5) |> add(b) |> sub(c) |> sigmoid |> maximum(0.25)\n",
                      1, 5);
}

/* Large enough (2^19 elements, 2^17 vec4s) for the kernel to compute two vec4s per invocation
 * (n/2 apart): both halves, with row and column broadcasts, checked against the CPU specs. */
KT_TEST(fusion, large_chain_two_vec4s_per_invocation) {
    const char *program = "x: f32[1024,512]\nb: f32[512]\nc: f32[1024,1]\n"
                          "y = x |> mul(0.5) |> add(b) |> sub(c) |> tanh |> gelu\n";
    kt_setenv("KF_EW_VEC4S", NULL); /* the default */
    expect_dispatches(program, 1, 5);
    kf_context *ctx = kt_context();
    kf_graph *g = ctx ? parse(program) : NULL;
    kf_plan *plan = NULL;
    if (g && kf_graph_compile(ctx, g, NULL, &plan) == KF_OK) {
        char *text = kf_plan_explain(plan, true);
        KT_CHECK(text && strstr(text, "vidx2"), "the kernel does not take two vec4s:\n%s",
                 text ? text : "");
        kf_free(text);
    }
    kf_plan_destroy(plan);
    kf_graph_destroy(g);
}

/* $KF_EW_VEC4S=4 at vec4 counts that 4 does not divide: 257 x 132 is 8481 vec4s (2121
 * invocations; the fourth slot's last 3 past the end, under its guard), 5 x 4 is 5 (2
 * invocations; the third slot guarded, the fourth wholly past the end and left out). Row and
 * column broadcasts index every slot; all against the CPU specs and the unfused plan. */
KT_TEST(fusion, ragged_chain_four_vec4s_per_invocation) {
    kt_setenv("KF_EW_VEC4S", "4");
    static const char *const programs[] = {
        "x: f32[257,132]\nb: f32[132]\nc: f32[257,1]\n"
        "y = x |> mul(0.5) |> add(b) |> sub(c) |> tanh |> silu\n",
        "x: f32[5,4]\nb: f32[4]\nc: f32[5,1]\n"
        "y = x |> mul(0.5) |> add(b) |> sub(c) |> tanh |> silu\n"};
    static const char *const guards[] = {"if (vidx4 < 8481u)", "if (vidx3 < 5u)"};
    for (uint32_t i = 0; i < 2; i++) {
        expect_dispatches(programs[i], 1, 5);
        kf_context *ctx = kt_context();
        kf_graph *g = ctx ? parse(programs[i]) : NULL;
        kf_plan *plan = NULL;
        if (g && kf_graph_compile(ctx, g, NULL, &plan) == KF_OK) {
            char *text = kf_plan_explain(plan, true);
            KT_CHECK(text && strstr(text, guards[i]) && (i == 0 || !strstr(text, "vidx4")),
                     "not 4 vec4s an invocation with the tail guarded (%s):\n%s", guards[i],
                     text ? text : "");
            kf_free(text);
        }
        kf_plan_destroy(plan);
        kf_graph_destroy(g);
    }
}

KT_TEST(fusion, matmul_bias_gelu_is_one_dispatch) {
    expect_dispatches("x: f32[67,129]\nw: f32[129,93]\nb: f32[93]\n"
                      "y = matmul(x, w) |> add(b) |> gelu\n",
                      1, 3);
}

/* Batched matmul (rank 3 and 4): the bias and activation in the store phase, and element-wise
 * producers in the loads, for a weight shared by the batch (one [B*M, K] x [K, N] product), one
 * product per batch element (tiled, and the register-blocked kernel from 64x64 outputs), a
 * broadcast batch, and attention's q k^T. */
KT_TEST(fusion, batched_matmul_epilogue_and_prologue) {
    expect_dispatches("x: f32[3,37,53]\nw: f32[53,29]\nb: f32[29]\n"
                      "y = matmul(x, w) |> add(b) |> gelu\n",
                      1, 3);
    expect_dispatches("x: f32[2,70,40]\nw: f32[2,40,72]\nb: f32[72]\n"
                      "y = matmul(x, w) |> add(b) |> gelu\n",
                      1, 3);
    expect_dispatches("x: f32[3,19,23]\nw: f32[2,1,23,17]\nr: f32[2,3,19,17]\n"
                      "y = matmul(x, w) |> add(r) |> relu\n",
                      1, 3);
    expect_dispatches("x: f32[3,37,53]\nw: f32[53,29]\ny = matmul(gelu(x), w)\n", 1, 2);
    expect_dispatches("x: f32[2,70,40]\nw: f32[2,40,72]\ny = matmul(gelu(x), w)\n", 1, 2);
    expect_dispatches("q: f32[2,3,17,8]\nk: f32[2,3,17,8]\n"
                      "s = matmul(q, tanh(k), transpose_b=true) |> scale(0.35)\n",
                      1, 3);
    expect_dispatches("x: f16[2,65,68]\nw: f16[68,64]\nb: f16[64]\n"
                      "y = matmul(gelu(x), w) |> add(b)\n",
                      1, 3);
}

/* A batched linear layer's db = sum_leading(dY) rides in its dW = matmul_grad_b(X, W, dY) (the
 * weight shared by the batch: one product over every row of dY, folded or summed per batch
 * element when X is transposed): one dispatch, explained as the bias gradient. */
KT_TEST(fusion, batched_bias_gradient_rides_in_matmul_grad_b) {
    const char *programs[] = {
        "x: f32[3,70,33]\nw: f32[33,40]\ndy: f32[3,70,40]\ndw = matmul_grad_b(x, w, dy)\n"
        "db = sum_leading(dy)\nout dw, db\n",
        "x: f32[2,3,33,7]\nw: f32[33,5]\ndy: f32[2,3,7,5]\n"
        "dw = matmul_grad_b(x, w, dy, transpose_a=true)\ndb = sum_leading(dy)\nout dw, db\n",
    };
    for (size_t i = 0; i < sizeof programs / sizeof programs[0]; i++) {
        expect_dispatches(programs[i], 1, 2);
        kf_context *ctx = kt_context();
        kf_graph *g = ctx ? parse(programs[i]) : NULL;
        kf_plan *plan = NULL;
        if (g && kf_graph_compile(ctx, g, NULL, &plan) == KF_OK) {
            char *text = kf_plan_explain(plan, false);
            KT_CHECK(text && strstr(text, "matmul + bias gradient"), "not the bias gradient:\n%s",
                     text ? text : "");
            kf_free(text);
        }
        kf_plan_destroy(plan);
        kf_graph_destroy(g);
    }
}

KT_TEST(fusion, matmul_residual_and_scale_in_the_epilogue) {
    expect_dispatches("x: f32[31,17]\nw: f32[17,45]\nr: f32[31,45]\n"
                      "y = matmul(x, w) |> scale(0.125) |> add(r) |> silu\n",
                      1, 4);
}

KT_TEST(fusion, softmax_then_scale_is_one_dispatch) {
    expect_dispatches("x: f32[19,300]\ny = softmax(x) |> scale(3)\n", 1, 2);
}

KT_TEST(fusion, norms_with_weight_and_tail) {
    expect_dispatches("x: f32[13,257]\nw: f32[257]\nb: f32[257]\n"
                      "y = rmsnorm(x) |> mul(w) |> relu\n"
                      "z = layernorm(x, w, b) |> gelu\n"
                      "out y, z\n",
                      2, 5);
}

/* ---- prologues: element-wise producers of a matmul's or a row reduction's input run in its
 * loads (kf_kernel_prologue) ---- */

KT_TEST(fusion, matmul_prologue_gelu_is_one_dispatch) {
    expect_dispatches("x: f32[37,53]\nw: f32[53,29]\ny = matmul(gelu(x), w)\n", 1, 2);
    /* register-blocked: vec4 tile loads (lane by lane) and scalar ones */
    expect_dispatches("x: f32[130,68]\nw: f32[68,96]\ny = matmul(gelu(x), w)\n", 1, 2);
    expect_dispatches("x: f32[23,29]\nw: f32[29,31]\ny = matmul(x, gelu(w))\n", 1, 2);
    expect_dispatches("x: f16[65,68]\nw: f16[68,64]\ny = matmul(gelu(x), w)\n", 1, 2);
}

KT_TEST(fusion, matmul_prologue_broadcast_and_chains) {
    /* x * m with m one row (broadcast), a chain, both operands, and an epilogue too */
    expect_dispatches("x: f32[67,68]\nm: f32[68]\nw: f32[68,97]\ny = matmul(mul(x, m), w)\n", 1, 2);
    expect_dispatches("x: f32[31,17]\nc: f32[31,1]\nw: f32[17,45]\n"
                      "y = matmul(x |> mul(c) |> add(1) |> tanh, w)\n",
                      1, 4);
    expect_dispatches("x: f32[40,24]\nw: f32[24,36]\ny = matmul(gelu(x), tanh(w))\n", 1, 3);
    expect_dispatches("x: f32[64,128]\nw: f32[128,256]\nb: f32[256]\n"
                      "y = matmul(gelu(x), w) |> add(b) |> relu\n",
                      1, 4);
}

/* cuBLASLt's DGELU: dX = (dY * gelu'(pre)) W^T, the derivative applied as the matmul loads dY */
KT_TEST(fusion, matmul_prologue_activation_derivative) {
    expect_dispatches("pre: f32[64,48]\ndy: f32[64,48]\nw: f32[32,48]\n"
                      "dx = matmul(gelu_grad(pre, dy), w, transpose_b=true)\n",
                      1, 2);
    expect_dispatches("pre: f32[67,93]\ndy: f32[67,93]\nw: f32[93,129]\n"
                      "dx = matmul(relu_grad(pre, dy), w)\n",
                      1, 2);
}

KT_TEST(fusion, row_reduction_prologues) {
    expect_dispatches("x: f32[19,300]\ns: f32[300]\ny = softmax(mul(x, s))\n", 1, 2);
    expect_dispatches("x: f32[13,37]\ny = softmax(x |> scale(0.5)) |> scale(3)\n", 1, 3);
    expect_dispatches("x: f32[13,257]\nw: f32[257]\ny = rmsnorm(gelu(x), w)\n", 1, 2);
    expect_dispatches("x: f32[11,100]\nm: f32[100]\nw: f32[100]\nb: f32[100]\n"
                      "y = layernorm(mul(x, m), w, b) |> gelu\n",
                      1, 3);
    expect_dispatches("x: f32[7,4099]\ny = sum(tanh(x))\n", 1, 2);
    expect_dispatches("x: f16[13,100]\ns: f16[100]\ny = softmax(mul(x, s))\n", 1, 2);
}

KT_TEST(fusion, prologue_legality) {
    /* t read twice, or an output: it is written, and the matmul reads it */
    expect_dispatches("x: f32[16,24]\nw: f32[24,8]\nt = gelu(x)\ny = matmul(t, w)\n"
                      "z = t |> exp\nout y, z\n",
                      3, 3);
    expect_dispatches("x: f32[16,24]\nw: f32[24,8]\nt = gelu(x)\ny = matmul(t, w)\nout t, y\n", 2,
                      2);
    /* the binding budget, 10 storage buffers: x, w, seven more rows and out fit in the matmul's
     * kernel; with an eighth row the sum is written and read back */
    const char *fits = "x: f32[16,24]\nw: f32[24,8]\na: f32[24]\nb: f32[24]\nc: f32[24]\n"
                       "d: f32[24]\ne: f32[24]\nf: f32[24]\ng: f32[24]\n"
                       "y = matmul(x |> add(a) |> add(b) |> add(c) |> add(d) |> add(e) |> add(f) "
                       "|> add(g), w)\n";
    const char *over = "x: f32[16,24]\nw: f32[24,8]\na: f32[24]\nb: f32[24]\nc: f32[24]\n"
                       "d: f32[24]\ne: f32[24]\nf: f32[24]\ng: f32[24]\nh: f32[24]\n"
                       "y = matmul(x |> add(a) |> add(b) |> add(c) |> add(d) |> add(e) |> add(f) "
                       "|> add(g) |> add(h), w)\n";
    const char *programs[2] = {fits, over};
    const uint32_t want[2] = {1, 2};
    for (int i = 0; i < 2; i++) {
        kf_graph *g = parse(programs[i]);
        KT_CHECK(g, "parse");
        kf_compile_options opts = {.max_storage_buffers = 10};
        kf_plan *plan = NULL;
        kf_plan_report report;
        kf_plan_summary sum = {0};
        kf_status st = kf_graph_compile(kt_context(), g, &opts, &plan);
        st = st == KF_OK ? kf_plan_verify(plan, kt_rand_u64(), &report) : st;
        if (plan) {
            kf_plan_summary_get(plan, &sum);
        }
        kf_plan_destroy(plan);
        kf_graph_destroy(g);
        KT_CHECK(st == KF_OK && sum.dispatches == want[i],
                 "budget 10, %s: %s, %u dispatches (want %u)", i ? "over" : "fits",
                 kf_status_str(st), sum.dispatches, want[i]);
    }
}

KT_TEST(fusion, prologue_explain_names_it) {
    kf_context *ctx = kt_context();
    KT_CHECK(ctx, "no WebGPU adapter");
    kf_graph *g = parse("x: f32[64,128]\nw: f32[128,256]\nb: f32[256]\n"
                        "y = matmul(gelu(x), w)\nz = matmul(gelu(x), w) |> add(b)\n"
                        "s = softmax(mul(x, 2))\nout y, z, s\n");
    KT_CHECK(g, "parse");
    kf_plan *plan = NULL;
    kf_status st = kf_graph_compile(ctx, g, NULL, &plan);
    char *text = st == KF_OK ? kf_plan_explain(plan, false) : NULL;
    bool ok = text && strstr(text, "matmul prologue: gelu |> matmul -> y") &&
              strstr(text, "matmul prologue + epilogue: gelu |> matmul |> add -> z") &&
              strstr(text, "reduction prologue: mul |> softmax -> s");
    kf_plan_destroy(plan);
    kf_graph_destroy(g);
    KT_CHECK(ok, "explain:\n%s", text ? text : kf_context_last_error(ctx));
    kf_free(text);
}

KT_TEST(fusion, ffn_save_is_one_dispatch) {
    /* The seeds' FFN save: gate, up, hidden (ffnDim) and residual1 (dim), copied in one dispatch
     * where the seeds needed two. */
    expect_dispatches("gate: f32[1000]\nup: f32[1000]\nhidden: f32[1000]\nresidual1: f32[300]\n"
                      "sg = copy(gate)\nsu = copy(up)\nsh = copy(hidden)\nsr = copy(residual1)\n"
                      "out sg, su, sh, sr\n",
                      1, 4);
}

KT_TEST(fusion, value_read_twice_is_kept) {
    /* t feeds two consumers: it must reach memory, so three groups remain. */
    expect_dispatches("x: f32[64,64]\nw: f32[64,64]\n"
                      "t = matmul(x, w) |> relu\n"
                      "a = t |> exp\nb = t |> neg\nout a, b\n",
                      2, 4);
}

KT_TEST(fusion, output_that_is_also_consumed_is_written) {
    expect_dispatches("x: f32[7,13]\n"
                      "h = x |> tanh\n"
                      "y = h |> square\n"
                      "out h, y\n",
                      2, 2);
}

KT_TEST(fusion, broadcast_into_a_larger_shape_ends_the_group) {
    /* s has one value per row; adding it to x changes the shape, so the sum's group ends. */
    expect_dispatches("x: f32[9,31]\nc: f32[9,1]\n"
                      "s = c |> exp\n"
                      "y = add(x, s) |> relu\n",
                      2, 3);
}

KT_TEST(fusion, output_that_is_an_input) {
    expect_dispatches("x: f32[5]\ny = x |> abs\nout x, y\n", 1, 1);
}

KT_TEST(fusion, save_activations_any_pairs_any_sizes) {
    KT_NEED_GPU(ctx);
    /* The seeds' attention save (2 pairs of dim, 1 of attnSize) and FFN save (3 of ffnDim, 1 of
     * dim), plus an odd mix, each in as few dispatches as the storage limit allows. */
    const uint32_t sets[3][6] = {
        {3, 4096, 4096, 1000}, {4, 1436, 1436, 1436, 4096}, {5, 3, 17, 1, 4099, 64}};
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    for (int s = 0; s < 3; s++) {
        uint32_t n = sets[s][0];
        kf_copy_pair pairs[8];
        float *host[8];
        for (uint32_t i = 0; i < n; i++) {
            uint32_t count = sets[s][1 + i];
            host[i] = malloc(count * sizeof(float));
            for (uint32_t j = 0; j < count; j++) {
                host[i][j] = kt_rand_f32(-10.0f, 10.0f);
            }
            KT_CHECK_OK(kf_buffer_create(ctx, count * 4, &pairs[i].src));
            KT_CHECK_OK(kf_buffer_create(ctx, count * 4, &pairs[i].dst));
            KT_CHECK_OK(kf_buffer_upload(pairs[i].src, 0, host[i], count * 4));
            KT_CHECK_OK(kf_buffer_fill_u32(pairs[i].dst, 0x7fc00000u));
            pairs[i].size = count * 4ull;
        }
        uint32_t dispatches = 0;
        KT_CHECK_OK(kf_save_activations(ctx, pairs, n, &dispatches));
        uint32_t per = info.max_storage_buffers_per_stage / 2;
        KT_CHECK(dispatches == (n + per - 1) / per, "set %d: %u dispatches for %u pairs (limit %u)",
                 s, dispatches, n, info.max_storage_buffers_per_stage);
        for (uint32_t i = 0; i < n; i++) {
            uint32_t count = sets[s][1 + i];
            float *back = malloc(count * sizeof(float));
            KT_CHECK_OK(kf_buffer_download(pairs[i].dst, 0, back, count * 4));
            KT_CHECK(memcmp(back, host[i], count * 4) == 0, "set %d pair %u: copy differs", s, i);
            free(back);
            free(host[i]);
            kf_buffer_destroy(pairs[i].src);
            kf_buffer_destroy(pairs[i].dst);
        }
    }
}

KT_TEST(fusion, save_activations_rejects_bad_pairs) {
    KT_NEED_GPU(ctx);
    kf_buffer *a = NULL, *b = NULL;
    KT_CHECK_OK(kf_buffer_create(ctx, 64, &a));
    KT_CHECK_OK(kf_buffer_create(ctx, 32, &b));
    kf_copy_pair too_big = {a, b, 64};
    KT_CHECK(kf_save_activations(ctx, &too_big, 1, NULL) == KF_ERROR_INVALID_ARGUMENT,
             "a copy larger than its destination was accepted");
    KT_CHECK(strstr(kf_context_last_error(ctx), "pair 0") != NULL, "message: %s",
             kf_context_last_error(ctx));
    kf_copy_pair odd = {a, b, 6};
    KT_CHECK(kf_save_activations(ctx, &odd, 1, NULL) == KF_ERROR_INVALID_ARGUMENT,
             "a size that is not a multiple of 4 was accepted");
    KT_CHECK(kf_save_activations(NULL, &odd, 1, NULL) == KF_ERROR_INVALID_ARGUMENT, "NULL ctx");
    kf_buffer_destroy(a);
    kf_buffer_destroy(b);
}

static kf_val relu_expr(kf_kernel *k, kf_val x, void *user) {
    (void)user;
    const kf_operator *relu = kf_op_find("relu");
    kf_op_params p = {0};
    return relu->expr(k, &x, &p);
}

KT_TEST(fusion, manual_composition_matches_the_planner) {
    KT_NEED_GPU(ctx);
    const uint32_t M = 37, K = 29, N = 41;
    kf_graph *g = parse("x: f32[37,29]\nw: f32[29,41]\ny = matmul(x, w) |> relu\n");
    KT_CHECK(g != NULL, "parse");
    kf_plan *plan = NULL;
    KT_CHECK_OK(kf_graph_compile(ctx, g, NULL, &plan));
    kf_plan_summary s;
    kf_plan_summary_get(plan, &s);
    KT_CHECK(s.dispatches == 1, "planner: %u dispatches", s.dispatches);

    /* By hand: the matmul operator's kernel |> a map of relu. */
    const kf_operator *mm = kf_op_find("matmul");
    kf_shape shapes[2] = {kf_shape_2d(M, K), kf_shape_2d(K, N)};
    kf_op_params params = {0};
    kf_kernel *a = kf_op_kernel_forward(mm, shapes, &params, KF_DTYPE_F32);
    uint32_t wg[3];
    kf_kernel_workgroup_size(a, wg);
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_kernel *b = kf_kernel_map("relu", f32, f32, wg, relu_expr, NULL);
    kf_kernel *fused = kf_kernel_then(a, b);
    KT_CHECK_OK(kf_kernel_status(fused));

    kf_tensor *x = NULL, *w = NULL, *by_plan = NULL, *by_hand = NULL;
    KT_CHECK_OK(kf_plan_random_input(plan, "x", kt_rand_u64(), &x));
    KT_CHECK_OK(kf_plan_random_input(plan, "w", kt_rand_u64(), &w));
    KT_CHECK_OK(kf_plan_set_input(plan, "x", x));
    KT_CHECK_OK(kf_plan_set_input(plan, "w", w));
    KT_CHECK_OK(kf_plan_run(plan));
    kf_shape out_shape = kf_shape_2d(M, N);
    KT_CHECK_OK(kf_tensor_create(&out_shape, &by_plan));
    KT_CHECK_OK(kf_tensor_create(&out_shape, &by_hand));
    KT_CHECK_OK(kf_plan_get_output(plan, "y", by_plan));

    kf_buffer *bufs[3] = {0};
    KT_CHECK_OK(kf_buffer_create(ctx, M * K * 4, &bufs[0]));
    KT_CHECK_OK(kf_buffer_create(ctx, K * N * 4, &bufs[1]));
    KT_CHECK_OK(kf_buffer_create(ctx, M * N * 4, &bufs[2]));
    KT_CHECK_OK(kf_buffer_upload(bufs[0], 0, x->data, M * K * 4));
    KT_CHECK_OK(kf_buffer_upload(bufs[1], 0, w->data, K * N * 4));
    KT_CHECK_OK(kf_buffer_fill_u32(bufs[2], 0x7fc00000u));
    kf_kernel_launch launch = {.buffers = bufs, .buffer_count = 3};
    KT_CHECK_OK(kf_kernel_run(ctx, fused, &launch));
    KT_CHECK_OK(kf_buffer_download(bufs[2], 0, by_hand->data, M * N * 4));
    KT_CHECK(memcmp(by_hand->data, by_plan->data, M * N * 4) == 0,
             "manual matmul |> relu and the planner's kernel disagree (max rel err %.3g)",
             kf_max_rel_error(by_hand->data, by_plan->data, M * N, 0.0));
    for (int i = 0; i < 3; i++) {
        kf_buffer_destroy(bufs[i]);
    }
    kf_tensor_destroy(x);
    kf_tensor_destroy(w);
    kf_tensor_destroy(by_plan);
    kf_tensor_destroy(by_hand);
    kf_kernel_destroy(a);
    kf_kernel_destroy(b);
    kf_kernel_destroy(fused);
    kf_plan_destroy(plan);
    kf_graph_destroy(g);
}

KT_TEST(fusion, plan_api_refuses_bad_use) {
    KT_NEED_GPU(ctx);
    kf_plan *plan = NULL;
    KT_CHECK(kf_graph_compile(ctx, NULL, NULL, &plan) == KF_ERROR_INVALID_ARGUMENT, "NULL graph");
    kf_graph *empty = kf_graph_create();
    KT_CHECK(kf_graph_compile(ctx, empty, NULL, &plan) == KF_ERROR_INVALID_ARGUMENT,
             "graph with no outputs");
    kf_graph_destroy(empty);
    kf_graph *g = parse("x: f32[4,8]\ny = x |> relu\n");
    KT_CHECK(g != NULL, "parse");
    KT_CHECK_OK(kf_graph_compile(ctx, g, NULL, &plan));
    KT_CHECK(kf_plan_run(plan) == KF_ERROR_INVALID_ARGUMENT, "ran with an input never set");
    KT_CHECK(strstr(kf_context_last_error(ctx), "x") != NULL, "message: %s",
             kf_context_last_error(ctx));
    kf_shape wrong = kf_shape_2d(8, 4);
    kf_tensor *t = NULL;
    KT_CHECK_OK(kf_tensor_create(&wrong, &t));
    KT_CHECK(kf_plan_set_input(plan, "x", t) == KF_ERROR_SHAPE, "wrong shape accepted");
    KT_CHECK(strstr(kf_context_last_error(ctx), "4x8") != NULL, "message names the shape: %s",
             kf_context_last_error(ctx));
    KT_CHECK(kf_plan_set_input(plan, "nope", t) == KF_ERROR_INVALID_ARGUMENT, "unknown input");
    KT_CHECK(kf_plan_get_output(plan, "x", t) == KF_ERROR_INVALID_ARGUMENT, "unknown output");
    kf_tensor_destroy(t);
    kf_plan_destroy(plan);
    kf_graph_destroy(g);
}

KT_CPU_TEST(fusion, graph_errors_name_the_problem) {
    kf_graph *g = kf_graph_create();
    kf_shape s1 = kf_shape_2d(4, 8), s2 = kf_shape_2d(5, 8);
    kf_node a = kf_graph_input(g, "a", &s1, KF_DTYPE_F32);
    kf_node b = kf_graph_input(g, "b", &s2, KF_DTYPE_F32);
    kf_node m = kf_graph_matmul(g, a, b);
    KT_CHECK(m.id == 0, "matmul of 4x8 by 5x8 was accepted");
    KT_CHECK(kf_graph_status(g) == KF_ERROR_SHAPE, "status %s", kf_status_str(kf_graph_status(g)));
    KT_CHECK(strstr(kf_graph_error(g), "4x8") && strstr(kf_graph_error(g), "5x8"),
             "message names both shapes: %s", kf_graph_error(g));
    kf_node later = kf_graph_unary(g, "relu", a);
    KT_CHECK(later.id == 0, "calls after an error pass an invalid node");
    kf_graph_destroy(g);

    g = kf_graph_create();
    kf_node x = kf_graph_input(g, "x", &s1, KF_DTYPE_F32);
    kf_node bad = kf_graph_unary(g, "gleu", x);
    KT_CHECK(bad.id == 0 && strstr(kf_graph_error(g), "gleu"), "unknown op: %s", kf_graph_error(g));
    kf_graph_destroy(g);
    kf_graph_destroy(NULL);
}

/* ---- random graphs ---- */

static const char *unary_ops[] = {"relu", "sigmoid", "tanh", "gelu",
                                  "silu", "neg",     "abs",  "leaky_relu"};
static const char *binary_ops[] = {"add", "mul", "maximum"};
static const uint32_t dims[] = {1, 2, 7, 13, 32, 33};

static uint32_t pick(uint32_t n) {
    return (uint32_t)(kt_rand_u64() % n);
}

/* A random graph of up to 10 operators over 1-3 inputs, with shared inputs, broadcasts, matmuls,
 * row reductions and several outputs. */
static kf_graph *random_graph(char *desc, size_t desc_size) {
    kf_graph *g = kf_graph_create();
    kf_node nodes[16];
    uint32_t count = 0;
    uint32_t rows = dims[pick(6)], cols = dims[pick(6)];
    kf_shape full = kf_shape_2d(rows, cols);
    kf_shape row = kf_shape_1d(cols);
    nodes[count++] = kf_graph_input(g, "x", &full, KF_DTYPE_F32);
    if (pick(2)) {
        nodes[count++] = kf_graph_input(g, "y", &full, KF_DTYPE_F32);
    }
    kf_node bias = kf_graph_input(g, "b", &row, KF_DTYPE_F32);
    size_t used = (size_t)snprintf(desc, desc_size, "%ux%u:", rows, cols);
    uint32_t ops = 1 + pick(10);
    kf_node last = nodes[0];
    for (uint32_t i = 0; i < ops && count < 16; i++) {
        kf_node src = pick(3) ? last : nodes[pick(count)];
        kf_shape shape = kf_graph_shape(g, src);
        bool is_full = kf_shape_eq(&shape, &full);
        uint32_t kind = pick(10);
        kf_node out;
        const char *name;
        if (kind < 4) {
            name = unary_ops[pick(8)];
            out = kf_graph_unary(g, name, src);
        } else if (kind < 7) {
            name = binary_ops[pick(3)];
            kf_node other;
            uint32_t how = pick(3);
            if (how == 0 && is_full) {
                other = bias;
            } else if (how == 1) {
                other = kf_graph_scalar(g, kt_rand_f32(-1.0f, 1.0f));
            } else {
                other = nodes[pick(count)];
                kf_shape os = kf_graph_shape(g, other);
                if (!kf_shape_eq(&os, &shape)) {
                    other = src;
                }
            }
            kf_node in[2] = {src, other};
            out = kf_graph_op(g, name, in, 2, NULL);
        } else if (kind == 7 && is_full) {
            name = "matmul";
            char wname[16];
            snprintf(wname, sizeof wname, "w%u", i);
            kf_shape ws = kf_shape_2d(cols, cols);
            kf_node w = kf_graph_input(g, wname, &ws, KF_DTYPE_F32);
            out = kf_graph_matmul(g, src, w);
        } else if (kind == 8 && is_full) {
            const char *red[] = {"softmax", "rmsnorm", "layernorm", "log_softmax"};
            name = red[pick(4)];
            out = kf_graph_unary(g, name, src);
        } else {
            name = "scale";
            kf_graph_arg alpha = {.number = 0.5};
            out = kf_graph_call(g, name, &src, 1, &alpha, 1);
        }
        if (out.id == 0) {
            break;
        }
        used += (size_t)snprintf(desc + used, used < desc_size ? desc_size - used : 0, " %s", name);
        nodes[count++] = out;
        last = out;
    }
    kf_graph_output(g, "result", last);
    if (count > 3 && pick(2)) {
        kf_graph_output(g, "side", nodes[2 + pick(count - 2)]);
    }
    return g;
}

KT_TEST(fusion, random_graphs_match_the_cpu_specs) {
    KT_NEED_GPU(ctx);
    const char *env = getenv("KFUSE_RANDOM_GRAPHS");
    int total = env ? atoi(env) : 1000;
    int fewer = 0;
    /* The first half from a fixed stream (the same graphs every run, CI included), the second
     * from a fresh seed, printed (reproducible with KFUSE_GRAPH_SEED). */
    const char *graph_seed = getenv("KFUSE_GRAPH_SEED");
    uint64_t fresh = graph_seed ? strtoull(graph_seed, NULL, 0)
                                : (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)clock();
    printf("    fresh graphs from seed %llu (rerun with KFUSE_GRAPH_SEED=%llu)\n",
           (unsigned long long)fresh, (unsigned long long)fresh);
    kt_reseed(0x6b667573652d3031ULL);
    for (int i = 0; i < total; i++) {
        if (i == total / 2) {
            kt_reseed(fresh);
        }
        char desc[512];
        kf_graph *g = random_graph(desc, sizeof desc);
        if (kf_graph_status(g) != KF_OK) {
            kt_fail(__FILE__, __LINE__, "graph %d (%s): %s", i, desc, kf_graph_error(g));
            kf_graph_destroy(g);
            return;
        }
        uint32_t fused = 0, unfused = 0;
        bool ok = check_graph(ctx, g, &fused, &unfused);
        if (!ok) {
            char *text = kf_graph_format(g);
            fprintf(stderr, "    the failing graph, to reproduce with kfuse run -e:\n%s", text);
            kf_free(text);
        }
        kf_graph_destroy(g);
        KT_CHECK(ok, "random graph %d (%s stream) failed: %s", i, i < total / 2 ? "fixed" : "fresh",
                 desc);
        KT_CHECK(fused <= unfused, "graph %d (%s): fused %u > unfused %u dispatches", i, desc,
                 fused, unfused);
        fewer += fused < unfused;
    }
    printf("    %d random graphs, %d ran in fewer dispatches fused\n", total, fewer);
    KT_CHECK(fewer > total / 4, "fusion rarely happened (%d of %d)", fewer, total);
}

/* ---- kf_graph_format round trip ---- */

/* A random graph that uses what the operators describe: every parameter at random values
 * (zero and defaults given on purpose included), keyword and positional, and norms with each
 * combination of weight and bias. */
static kf_graph *random_param_graph(void) {
    kf_graph *g = kf_graph_create();
    uint32_t rows = dims[pick(6)], cols = dims[pick(6)];
    kf_shape full = kf_shape_2d(rows, cols), row = kf_shape_1d(cols), sq = kf_shape_2d(cols, cols);
    kf_node x = kf_graph_input(g, "x", &full, KF_DTYPE_F32);
    kf_node w = kf_graph_input(g, "w", &row, KF_DTYPE_F32);
    kf_node b = kf_graph_input(g, "b", &row, KF_DTYPE_F32);
    kf_node m = kf_graph_input(g, "m", &sq, KF_DTYPE_F32);
    static const char *ops[] = {"leaky_relu", "scale",     "affine", "gelu",
                                "rmsnorm",    "layernorm", "matmul"};
    kf_node last = x;
    uint32_t steps = 1 + pick(6);
    for (uint32_t i = 0; i < steps; i++) {
        const char *name = ops[pick(7)];
        const kf_operator *op = kf_op_find(name);
        kf_node tensors[3] = {last, m, w};
        uint32_t tensor_count = !strcmp(name, "matmul") ? 2 : 1;
        kf_graph_arg args[4];
        uint32_t arg_count = 0;
        if (!strcmp(name, "rmsnorm") || !strcmp(name, "layernorm")) {
            uint32_t which = pick(4); /* none, weight, bias only (by name), both */
            if (which == 1 || which == 3) {
                tensors[tensor_count++] = w;
            }
            if (which == 3) {
                tensors[tensor_count++] = b;
            }
            if (which == 2) {
                args[arg_count++] = (kf_graph_arg){.name = "bias", .tensor = b};
            }
        }
        for (uint32_t p = 0; p < kf_op_param_count(op); p++) {
            kf_op_param_info info;
            kf_op_param_info_at(op, p, &info);
            if (pick(3) == 0) {
                continue;
            }
            double v = info.type == KF_PARAM_TYPE_BOOL ? (double)pick(2)
                       : pick(4) == 0                  ? info.default_value
                                                       : (double)kt_rand_f32(0.0f, 2.0f);
            kf_shape ls = kf_graph_shape(g, last);
            if (!strcmp(info.name, "transpose_a") && ls.dims[0] != ls.dims[1]) {
                v = 0.0; /* a^T of a non-square [rows, cols] does not fit m [cols, cols] */
            }
            if (info.min_exclusive && v <= info.min) {
                v = 0.125;
            }
            if (info.type != KF_PARAM_TYPE_BOOL && pick(5) == 0 && !info.min_exclusive) {
                v = 0.0;
            }
            args[arg_count++] = (kf_graph_arg){.name = info.name, .number = v};
        }
        kf_node out = kf_graph_call(g, name, tensors, tensor_count, args, arg_count);
        if (kf_graph_status(g) != KF_OK) {
            break;
        }
        last = out;
    }
    kf_graph_output(g, "y", last);
    return g;
}

/* Everything a plan of g computes, run on the same inputs: outputs compared bit for bit. */
static bool same_plan_same_numbers(kf_context *ctx, const kf_graph *a, const kf_graph *b, char *why,
                                   size_t why_size) {
    kf_plan *pa = NULL, *pb = NULL;
    bool ok = kf_graph_compile(ctx, a, NULL, &pa) == KF_OK &&
              kf_graph_compile(ctx, b, NULL, &pb) == KF_OK;
    if (!ok) {
        snprintf(why, why_size, "compile: %s", kf_context_last_error(ctx));
    }
    char *ea = ok ? kf_plan_explain(pa, true) : NULL, *eb = ok ? kf_plan_explain(pb, true) : NULL;
    if (ok && (!ea || !eb || strcmp(ea, eb))) {
        snprintf(why, why_size, "the plans differ:\n%s\n---\n%s", ea ? ea : "", eb ? eb : "");
        ok = false;
    }
    kf_free(ea);
    kf_free(eb);
    uint64_t seed = kt_rand_u64();
    for (uint32_t i = 0; ok && i < kf_graph_input_count(a); i++) {
        const char *name;
        kf_graph_input_info(a, i, &name, NULL, NULL);
        kf_tensor *t = NULL;
        ok = kf_plan_random_input(pa, name, seed + i, &t) == KF_OK &&
             kf_plan_set_input(pa, name, t) == KF_OK && kf_plan_set_input(pb, name, t) == KF_OK;
        kf_tensor_destroy(t);
    }
    ok = ok && kf_plan_run(pa) == KF_OK && kf_plan_run(pb) == KF_OK;
    for (uint32_t o = 0; ok && o < kf_graph_output_count(a); o++) {
        const char *name;
        kf_shape shape;
        kf_graph_output_info(a, o, &name, &shape, NULL);
        kf_tensor *ta = NULL, *tb = NULL;
        kf_tensor_create(&shape, &ta);
        kf_tensor_create(&shape, &tb);
        kf_tensor_fill_random(ta, seed, -1.0f, 1.0f); /* poison: a download that fails shows */
        kf_tensor_fill_random(tb, seed + 1, -1.0f, 1.0f);
        ok = ta && tb && kf_plan_get_output(pa, name, ta) == KF_OK &&
             kf_plan_get_output(pb, name, tb) == KF_OK &&
             !memcmp(ta->data, tb->data, kf_shape_elements(&shape) * sizeof(float));
        if (!ok) {
            snprintf(why, why_size, "output %s differs", name);
        }
        kf_tensor_destroy(ta);
        kf_tensor_destroy(tb);
    }
    if (!ok && !why[0]) {
        snprintf(why, why_size, "running: %s", kf_context_last_error(ctx));
    }
    kf_plan_destroy(pa);
    kf_plan_destroy(pb);
    return ok;
}

KT_TEST(fusion, random_graphs_format_and_parse_back) {
    KT_NEED_GPU(ctx);
    const char *env = getenv("KFUSE_RANDOM_GRAPHS");
    int total = env ? atoi(env) / 10 : 120;
    kt_reseed(0x726f756e64747269ULL);
    for (int i = 0; i < total; i++) {
        char desc[512];
        kf_graph *g = i % 2 ? random_param_graph() : random_graph(desc, sizeof desc);
        KT_CHECK(kf_graph_status(g) == KF_OK, "graph %d: %s", i, kf_graph_error(g));
        char *text = kf_graph_format(g);
        kf_graph *back = NULL;
        kf_spec_error err;
        kf_status st = kf_spec_parse(text, strlen(text), &back, &err);
        char why[4096] = "";
        bool ok = st == KF_OK;
        if (!ok) {
            snprintf(why, sizeof why, "%u:%u: %s", err.line, err.column, err.message);
        }
        ok = ok && kt_graph_equal(g, back, why, sizeof why);
        ok = ok && same_plan_same_numbers(ctx, g, back, why, sizeof why);
        if (!ok) {
            fprintf(stderr, "    graph %d printed as:\n%s", i, text);
        }
        kf_free(text);
        kf_graph_destroy(back);
        kf_graph_destroy(g);
        KT_CHECK(ok, "graph %d: %s", i, why);
    }
    printf("    %d random graphs formatted, parsed back, planned and run the same\n", total);
}
