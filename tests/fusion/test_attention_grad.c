/* Attention's backward kernels (src/ops/attention_grad.c) beyond the verification tables: the
 * dk + dv kernel (kf__attention_grad_kv_kernel) run on its own into poisoned outputs against the
 * specs of attention_grad_k and _v, over edge sequence lengths (1, 15, 17, 65: below, at and past
 * the tiles), head dimensions 8, 64, 128, causal and not, f32 and f16; and the planner pairing
 * attention_grad_k with attention_grad_v into that kernel (src/fuse/rules/companion.c): one
 * dispatch fewer, kf_plan_verify of every output (the companion dv on its own), the same numbers as
 * the unfused plan, and the cases where it must not pair. */
#include "harness.h"
#include "core/half.h"
#include "ops/attention.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POISON_F32 0x7fc00001u /* a NaN: an element the kernel forgot stays NaN */
#define POISON_F16 0x7e017e01u
#define GUARD 64u /* elements after each output that must keep their poison */

static kf_buffer *upload(kf_context *ctx, const kf_tensor *t, kf_dtype dtype) {
    uint64_t n = kf_tensor_size(t);
    kf_buffer *b = NULL;
    if (dtype == KF_DTYPE_F32) {
        if (kf_buffer_create(ctx, n * 4, &b) == KF_OK) {
            kf_buffer_upload(b, 0, t->data, n * 4);
        }
        return b;
    }
    uint16_t *h = malloc(n * 2 + 2);
    for (uint64_t i = 0; h && i < n; i++) {
        h[i] = kf__half_from_float(t->data[i]);
    }
    uint64_t bytes = (n * 2 + 3) / 4 * 4;
    if (h && kf_buffer_create(ctx, bytes, &b) == KF_OK) {
        kf_buffer_upload(b, 0, h, bytes);
    }
    free(h);
    return b;
}

static kf_buffer *poisoned(kf_context *ctx, uint64_t n, kf_dtype dtype) {
    kf_buffer *b = NULL;
    uint64_t bytes = (n + GUARD) * kf_dtype_size(dtype);
    if (kf_buffer_create(ctx, (bytes + 3) / 4 * 4, &b) == KF_OK) {
        kf_buffer_fill_u32(b, dtype == KF_DTYPE_F16 ? POISON_F16 : POISON_F32);
    }
    return b;
}

/* The n elements of b as floats, and whether the guard after them kept its poison. */
static bool download(kf_buffer *b, uint64_t n, kf_dtype dtype, float *out) {
    uint32_t size = kf_dtype_size(dtype);
    uint64_t bytes = (n + GUARD) * size;
    unsigned char *raw = malloc((bytes + 3) / 4 * 4);
    bool ok = raw && kf_buffer_download(b, 0, raw, (bytes + 3) / 4 * 4) == KF_OK;
    for (uint64_t i = 0; ok && i < n + GUARD; i++) {
        uint32_t bits = 0;
        memcpy(&bits, raw + i * size, size);
        float f = 0;
        if (dtype == KF_DTYPE_F16) {
            f = kf__half_to_float((uint16_t)bits);
            ok = i < n || bits == (POISON_F16 & 0xffffu);
        } else {
            memcpy(&f, &bits, 4);
            ok = i < n || bits == POISON_F32;
        }
        if (i < n) {
            out[i] = f;
        }
    }
    free(raw);
    return ok;
}

static float round_to(kf_dtype dtype, float v) {
    return dtype == KF_DTYPE_F16 ? kf__half_to_float(kf__half_from_float(v)) : v;
}

/* One case of the pair kernel: dk ("out") and dv (the side binding) against the specs, every
 * element, from inputs the device and the spec hold alike. */
static void kv_case(kf_context *ctx, uint32_t bh, uint32_t t, uint32_t d, bool causal,
                    kf_dtype dtype) {
    kf_shape s = {3, {bh, t, d}}, gs = {3, {bh, t, d + 2}};
    kf_op_params p = {.causal = causal, .given = KF_PARAM_CAUSAL};
    kf_tensor *in[4] = {0}, *dy = NULL, *want_k = NULL, *want_v = NULL;
    for (int i = 0; i < 3; i++) {
        kf_tensor_create(&s, &in[i]);
        kf_tensor_fill_random(in[i], kt_rand_u64(), -1.0f, 1.0f);
    }
    kf_tensor_create(&s, &dy);
    kf_tensor_fill_random(dy, kt_rand_u64(), -1.0f, 1.0f);
    kf_tensor_create(&gs, &in[3]);
    kf_tensor_create(&s, &want_k);
    kf_tensor_create(&s, &want_v);
    const kf_tensor *prep_in[4] = {in[0], in[1], in[2], dy};
    KT_CHECK_OK(kf_op_spec_forward(kf_op_find("attention_grad_prep"), prep_in, &p, in[3]));
    /* g (in[3]) is f32 whatever q is */
    for (int i = 0; i < 3; i++) {
        for (uint64_t e = 0; e < kf_tensor_size(in[i]); e++) {
            in[i]->data[e] = round_to(dtype, in[i]->data[e]);
        }
    }
    const kf_tensor *const *cin = (const kf_tensor *const *)in;
    KT_CHECK_OK(kf_op_spec_forward(kf_op_find("attention_grad_k"), cin, &p, want_k));
    KT_CHECK_OK(kf_op_spec_forward(kf_op_find("attention_grad_v"), cin, &p, want_v));

    kf_shape shapes[4] = {s, s, s, gs};
    kf_kernel *k = kf__attention_grad_kv_kernel(ctx, shapes, &p, dtype);
    KT_CHECK(k && kf_kernel_status(k) == KF_OK, "kernel: %s", k ? kf_kernel_error(k) : "none");
    uint64_t n = kf_tensor_size(want_k);
    kf_buffer *bufs[6] = {0};
    for (int i = 0; i < 4; i++) {
        bufs[i] = upload(ctx, in[i], i == 3 ? KF_DTYPE_F32 : dtype);
    }
    bufs[4] = poisoned(ctx, n, dtype);
    bufs[5] = poisoned(ctx, n, dtype);
    kf_kernel_launch launch = {.buffers = bufs, .buffer_count = 6};
    KT_CHECK(k && kf_kernel_run(ctx, k, &launch) == KF_OK, "run: %s", kf_context_last_error(ctx));
    float *got_k = malloc(n * sizeof *got_k), *got_v = malloc(n * sizeof *got_v);
    KT_CHECK(download(bufs[5], n, dtype, got_k), "dk: the guard after the output changed");
    KT_CHECK(download(bufs[4], n, dtype, got_v), "dv: the guard after the side output changed");
    double tol = dtype == KF_DTYPE_F16 ? kf__op_attention_grad_k.tolerance_f16
                                       : kf__op_attention_grad_k.tolerance_f32;
    const char *dt = kf_dtype_str(dtype);
    for (int w = 0; w < 2; w++) {
        const float *got = w ? got_v : got_k, *want = w ? want_v->data : want_k->data;
        double floor = kf__verify_floor(want, n);
        if (t == 1 && !w) {
            /* one key, P = 1: dk = (dP - delta) q with delta = dP, exactly 0 but for rounding
             * (the spec's too, from g's f32 delta): judged against 1e-3 of dv's scale */
            floor = fmax(floor, 1e-3 * kf__verify_floor(want_v->data, n) / 0.01);
        }
        for (uint64_t e = 0; e < n; e++) {
            double err = kf__rel_error(got[e], want[e], floor);
            if (!(err <= tol)) {
                KT_CHECK(false, "%s T %u D %u causal %d %s element %llu: %g, spec %g", dt, t, d,
                         causal, w ? "dv" : "dk", (unsigned long long)e, got[e], want[e]);
                break;
            }
        }
    }
    free(got_k);
    free(got_v);
    for (int i = 0; i < 6; i++) {
        kf_buffer_destroy(bufs[i]);
    }
    kf_kernel_destroy(k);
    for (int i = 0; i < 4; i++) {
        kf_tensor_destroy(in[i]);
    }
    kf_tensor_destroy(dy);
    kf_tensor_destroy(want_k);
    kf_tensor_destroy(want_v);
}

/* Each T with two of the head dimensions, causal and not, f16 for three: a covering set rather
 * than every combination, since each shape is a kernel of its own to compile. */
KT_TEST(fusion, attention_dk_dv_kernel_matches_the_specs) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    static const struct {
        uint32_t t, d;
        bool causal, f16;
    } cases[] = {
        {1, 8, true, true},    {1, 128, false, false}, {15, 64, true, false},
        {15, 8, false, false}, {17, 128, true, true},  {17, 64, false, false},
        {65, 8, false, false}, {65, 64, true, true},   {65, 128, true, false},
        {23, 97, true, false}, /* a ragged D: 24 vec4 and one lane */
    };
    uint32_t runs = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kv_case(ctx, 2, cases[i].t, cases[i].d, cases[i].causal, KF_DTYPE_F32);
        runs++;
        if (cases[i].f16 && info.has_f16) {
            kv_case(ctx, 2, cases[i].t, cases[i].d, cases[i].causal, KF_DTYPE_F16);
            runs++;
        }
    }
    printf("    %u cases\n", runs);
}

static kf_graph *parse(const char *text) {
    kf_graph *g = NULL;
    kf_spec_error err = {0};
    if (kf_spec_parse(text, strlen(text), &g, &err) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "parse: %u:%u: %s\n%s", err.line, err.column, err.message,
                text);
    }
    return g;
}

/* Compiles program fused (within max_bindings, 0: the device's) and unfused, verifies both,
 * compares every output, and checks the fused dispatch count and whether explain says
 * "second output". */
static void expect_plan(const char *program, uint32_t fused, uint32_t unfused, bool paired,
                        uint32_t max_bindings) {
    kf_context *ctx = kt_context();
    kf_graph *g = parse(program);
    if (!ctx || !g) {
        kf_graph_destroy(g);
        return;
    }
    kf_plan *pf = NULL, *pu = NULL;
    kf_compile_options fo = {.max_storage_buffers = max_bindings}, uo = {.no_fuse = true};
    KT_CHECK_OK(kf_graph_compile(ctx, g, &fo, &pf));
    KT_CHECK_OK(kf_graph_compile(ctx, g, &uo, &pu));
    uint64_t seed = kt_rand_u64();
    kf_plan_report rf, ru;
    KT_CHECK(pf && kf_plan_verify(pf, seed, &rf) == KF_OK, "verify fused: %s\n%s",
             kf_context_last_error(ctx), program);
    KT_CHECK(pu && kf_plan_verify(pu, seed, &ru) == KF_OK, "verify unfused\n%s", program);
    for (uint32_t o = 0; pf && pu && o < kf_graph_output_count(g); o++) {
        const char *name;
        kf_shape shape;
        kf_graph_output_info(g, o, &name, &shape, NULL);
        kf_tensor *a = NULL, *b = NULL;
        kf_tensor_create(&shape, &a);
        kf_tensor_create(&shape, &b);
        KT_CHECK_OK(kf_plan_get_output(pf, name, a));
        KT_CHECK_OK(kf_plan_get_output(pu, name, b));
        double err = kf_max_rel_error(a->data, b->data, kf_tensor_size(a),
                                      kf__verify_floor(b->data, kf_tensor_size(b)));
        KT_CHECK(err <= 5e-4, "%s: fused against unfused: %.3g", name, err);
        kf_tensor_destroy(a);
        kf_tensor_destroy(b);
    }
    kf_plan_summary s = {0}, su = {0};
    kf_plan_summary_get(pf, &s);
    kf_plan_summary_get(pu, &su);
    char *text = kf_plan_explain(pf, false);
    KT_CHECK(s.dispatches == fused && su.dispatches == unfused,
             "dispatches: fused %u (want %u), unfused %u (want %u)\n%s", s.dispatches, fused,
             su.dispatches, unfused, text ? text : "");
    KT_CHECK(paired == (text && strstr(text, "second output") != NULL),
             "explain %s 'second output':\n%s", paired ? "lacks" : "has", text ? text : "");
    kf_free(text);
    kf_plan_destroy(pf);
    kf_plan_destroy(pu);
    kf_graph_destroy(g);
}

#define DECL(T, D)                                                                                 \
    "q: f32[2, 3, " #T ", " #D "]\nk: f32[2, 3, " #T ", " #D "]\nv: f32[2, 3, " #T ", " #D         \
    "]\ndy: f32[2, 3, " #T ", " #D "]\n"

/* prep, dq, then dk and dv in one kernel; dk's store phase still takes a tail (scale); with
 * params that differ, one of the two, or a binding budget one short, they stay apart. */
KT_TEST(fusion, attention_dk_and_dv_share_one_kernel) {
    KT_NEED_GPU(ctx);
    (void)ctx;
    expect_plan(DECL(17, 8) "g = attention_grad_prep(q, k, v, dy)\n"
                            "dq = attention_grad_q(q, k, v, g)\ndk = attention_grad_k(q, k, v, g)\n"
                            "dv = attention_grad_v(q, k, v, g)\nout dq, dk, dv\n",
                3, 4, true, 0);
    expect_plan(DECL(17, 8) "g = attention_grad_prep(q, k, v, dy, causal=false)\n"
                            "dk = attention_grad_k(q, k, v, g, causal=false) |> scale(0.5)\n"
                            "dv = attention_grad_v(q, k, v, g, causal=false)\nout dk, dv\n",
                2, 4, true, 0);
    expect_plan(DECL(17, 8) "g = attention_grad_prep(q, k, v, dy)\n"
                            "dk = attention_grad_k(q, k, v, g)\n"
                            "dv = attention_grad_v(q, k, v, g, causal=false)\nout dk, dv\n",
                3, 3, false, 0);
    expect_plan(DECL(17, 8) "g = attention_grad_prep(q, k, v, dy)\n"
                            "dv = attention_grad_v(q, k, v, g)\nout dv\n",
                2, 2, false, 0);
    expect_plan(DECL(17, 8) "g = attention_grad_prep(q, k, v, dy)\n"
                            "dk = attention_grad_k(q, k, v, g)\n"
                            "dv = attention_grad_v(q, k, v, g)\nout dk, dv\n",
                3, 3, false, 5);
}

/* f16 attention's backward at a long sequence, as a training graph runs it (autodiff: the
 * forward writing o and lse, attention_grad_pack, dq, then dk and dv paired), against the
 * float64 gradient of the same f16 inputs, every element by the relative error verification uses
 * and f16's tolerance. With lse and delta stored in f16, P = exp(s - lse) carries lse's rounding
 * (2^-11 of |lse|, about 7 at T 1024): dk and dv were off by about 2% of their rms. */
KT_TEST(fusion, attention_f16_backward_at_t_1024_matches_float64) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    if (!info.has_f16) {
        printf("    (no shader-f16: skipped)\n");
        return;
    }
    const uint32_t t = 1024, d = 32;
    const char *text = "q: f16[1, 2, 1024, 32]\nk: f16[1, 2, 1024, 32]\nv: f16[1, 2, 1024, 32]\n"
                       "w: f16[1, 2, 1024, 32]\n"
                       "o = attention(q, k, v)\nloss = sum(sum(sum(sum(mul(o, w)))))\n"
                       "dq, dk, dv = grad(loss, q, k, v)\nout dq, dk, dv\n";
    kf_graph *g = parse(text);
    kf_plan *p = NULL;
    KT_CHECK(g && kf_graph_compile(ctx, g, NULL, &p) == KF_OK, "compile: %s",
             kf_context_last_error(ctx));
    kf_shape s = {4, {1, 2, t, d}};
    static const char *const names[4] = {"q", "k", "v", "w"};
    kf_tensor *in[4] = {0}, *want[3] = {0}, *got = NULL;
    for (int i = 0; i < 4; i++) {
        kf_tensor_create(&s, &in[i]);
        kf_tensor_fill_random(in[i], kt_rand_u64(), -1.0f, 1.0f);
        for (uint64_t e = 0; e < kf_tensor_size(in[i]); e++) {
            in[i]->data[e] = round_to(KF_DTYPE_F16, in[i]->data[e]);
        }
        KT_CHECK(!p || kf_plan_set_input(p, names[i], in[i]) == KF_OK, "input %s", names[i]);
    }
    for (int w = 0; w < 3; w++) {
        kf_tensor_create(&s, &want[w]);
    }
    kf_tensor_create(&s, &got);
    kf_op_params params = {0};
    /* dy = w: the gradient of sum(o * w) */
    KT_CHECK_OK(
        kf__attn_spec_backward((const kf_tensor *const *)in, in[3], NULL, false, &params, want));
    KT_CHECK(p && kf_plan_run(p) == KF_OK, "run: %s", kf_context_last_error(ctx));
    double tol = kf_op_tolerance(&kf__op_attention_grad_k, KF_DTYPE_F16);
    static const char *const grads[3] = {"dq", "dk", "dv"};
    for (int w = 0; p && w < 3; w++) {
        KT_CHECK_OK(kf_plan_get_output(p, grads[w], got));
        uint64_t n = kf_tensor_size(got);
        double floor = kf__verify_floor(want[w]->data, n), worst = 0;
        uint64_t worst_at = 0;
        for (uint64_t e = 0; e < n; e++) {
            double err = kf__rel_error(got->data[e], want[w]->data[e], floor);
            if (!(err <= worst)) {
                worst = err;
                worst_at = e;
            }
        }
        printf("    %s: max relative error %.3g (tolerance %.3g)\n", grads[w], worst, tol);
        KT_CHECK(worst <= tol, "%s element %llu: %g, float64 %g (error %.3g > %.3g)", grads[w],
                 (unsigned long long)worst_at, got->data[worst_at], want[w]->data[worst_at], worst,
                 tol);
    }
    for (int i = 0; i < 4; i++) {
        kf_tensor_destroy(in[i]);
    }
    for (int w = 0; w < 3; w++) {
        kf_tensor_destroy(want[w]);
    }
    kf_tensor_destroy(got);
    kf_plan_destroy(p);
    kf_graph_destroy(g);
}
