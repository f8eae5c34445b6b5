/* Fused attention, rope and swiglu: every kernel against its spec over the verification tables
 * (f32 and f16; the 2^22-element cases once, f32 forward), the specs' backward against finite
 * differences, attention's gradient helpers (prep, then grad_q / _k / _v) against attention's
 * own spec_backward, the masking rules on values worked out by hand, shape errors, and the
 * forward of a graph with attention as one dispatch. */
#include "harness.h"
#include "ops/ops_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static kf_shape shape4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    kf_shape s = {4, {a, b, c, d}};
    return s;
}

static const char *const family[] = {"attention",
                                     "attention_grad_prep",
                                     "attention_grad_q",
                                     "attention_grad_k",
                                     "attention_grad_v",
                                     "attention_grad_stats",
                                     "rope",
                                     "rope_grad",
                                     "swiglu",
                                     "swiglu_grad_a",
                                     "swiglu_grad_b"};
#define FAMILY_COUNT (sizeof family / sizeof family[0])

static bool large_case(const kf_op_case *c) {
    return c->note && strstr(c->note, "large");
}

static void verify_family(kf_dtype dtype) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    if (dtype == KF_DTYPE_F16 && !info.has_f16) {
        printf("    (no shader-f16: f16 skipped)\n");
        return;
    }
    uint32_t checked = 0;
    for (size_t o = 0; o < FAMILY_COUNT; o++) {
        const kf_operator *op = kf_op_find(family[o]);
        KT_CHECK(op && op->case_count > 0, "%s has a verification table", family[o]);
        for (uint32_t i = 0; op && i < op->case_count; i++) {
            const kf_op_case *tc = &op->cases[i];
            /* the large cases cost seconds each on two CPU cores: attention's forward only */
            if (large_case(tc) && (dtype != KF_DTYPE_F32 || strcmp(family[o], "attention"))) {
                continue;
            }
            for (int backward = 0; backward < (kf_op_has_backward(op) ? 2 : 1); backward++) {
                kf_verify_case vc = {.op = op,
                                     .params = tc->params,
                                     .dtype = dtype,
                                     .backward = backward != 0,
                                     .seed = kt_rand_u64()};
                memcpy(vc.shapes, tc->shapes, sizeof vc.shapes);
                kf_verify_result res;
                kf_status st = kf_op_verify(ctx, &vc, &res);
                KT_CHECK(st == KF_OK && res.passed,
                         "%s %s %s (%s): %s (error %.3g, tolerance %.3g, seed %llu)", family[o],
                         backward ? "backward" : "forward", kf_dtype_str(dtype),
                         tc->note ? tc->note : "", res.message, res.max_rel_error, res.tolerance,
                         (unsigned long long)vc.seed);
                checked++;
            }
        }
    }
    printf("    %u checks\n", checked);
}

KT_TEST(ops, attention_family_verify_f32) {
    verify_family(KF_DTYPE_F32);
}

KT_TEST(ops, attention_family_verify_f16) {
    verify_family(KF_DTYPE_F16);
}

/* spec_backward against central differences (attention, rope), and the backward operators
 * (rope_grad, swiglu_grad_a / _b) against their forward's differences. */
KT_CPU_TEST(ops, attention_rope_swiglu_gradients_match_finite_differences) {
    static const char *const ops[] = {"attention", "rope",          "rope_grad",
                                      "swiglu",    "swiglu_grad_a", "swiglu_grad_b"};
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        const kf_operator *op = kf_op_find(ops[o]);
        for (uint32_t i = 0; op && i < op->case_count; i++) {
            const kf_op_case *tc = &op->cases[i];
            if (kf_shape_elements(&tc->shapes[0]) > 4096) {
                continue;
            }
            kf_verify_case vc = {.op = op, .params = tc->params, .seed = kt_rand_u64()};
            memcpy(vc.shapes, tc->shapes, sizeof vc.shapes);
            kf_verify_result res;
            kf_status st = kf_op_check_gradient(&vc, &res);
            KT_CHECK(st == KF_OK && res.passed, "%s %s: %s (error %.3g)", ops[o],
                     tc->note ? tc->note : "", res.message, res.max_rel_error);
        }
    }
}

static kf_tensor *random_tensor(const kf_shape *s) {
    kf_tensor *t = NULL;
    if (kf_tensor_create(s, &t) == KF_OK) {
        kf_tensor_fill_random(t, kt_rand_u64(), -1.0f, 1.0f);
    }
    return t;
}

/* attention_grad_prep then attention_grad_q / _k / _v give what attention's spec_backward gives
 * (itself checked against finite differences above): the helpers' specs are the gradient, up to
 * lse and delta rounded to f32 in g (1e-4 against 1% of the gradient's rms); and
 * attention_grad_stats of a g whose lse and delta are wrong gives prep's g back. */
KT_CPU_TEST(ops, attention_helpers_compose_to_the_gradient) {
    static const kf_op_params params[3] = {
        {0}, {.causal = false, .given = KF_PARAM_CAUSAL}, {.alpha = 0.7f}};
    kf_shape s = shape4(2, 1, 21, 6), gs = shape4(2, 1, 21, 8);
    for (int c = 0; c < 3; c++) {
        kf_tensor *in[4] = {random_tensor(&s), random_tensor(&s), random_tensor(&s),
                            random_tensor(&s)};
        kf_tensor *out = random_tensor(&s), *g = random_tensor(&gs);
        kf_tensor *want[3] = {random_tensor(&s), random_tensor(&s), random_tensor(&s)};
        kf_tensor *got = random_tensor(&s);
        const kf_tensor *const *cin = (const kf_tensor *const *)in;
        KT_CHECK_OK(kf_op_spec_forward(kf_op_find("attention"), cin, &params[c], out));
        KT_CHECK_OK(kf__op_attention.spec_backward(cin, out, in[3], &params[c], want));
        KT_CHECK_OK(kf_op_spec_forward(kf_op_find("attention_grad_prep"), cin, &params[c], g));
        const kf_tensor *packed[4] = {in[0], in[1], in[2], g};
        kf_tensor *bent = random_tensor(&gs), *fixed = random_tensor(&gs);
        for (uint64_t r = 0; r < kf_tensor_size(g) / 8; r++) {
            memcpy(bent->data + r * 8, g->data + r * 8, 6 * sizeof(float)); /* dy; stats random */
        }
        const kf_tensor *bent_in[4] = {in[0], in[1], in[2], bent};
        KT_CHECK_OK(
            kf_op_spec_forward(kf_op_find("attention_grad_stats"), bent_in, &params[c], fixed));
        for (uint64_t e = 0; e < kf_tensor_size(g); e++) {
            KT_CHECK(fabs(fixed->data[e] - g->data[e]) <= 1e-6 * fmax(1.0, fabs(g->data[e])),
                     "case %d, g' element %llu: %g, prep's g %g", c, (unsigned long long)e,
                     fixed->data[e], g->data[e]);
        }
        kf_tensor_destroy(bent);
        kf_tensor_destroy(fixed);
        static const char *const names[3] = {"attention_grad_q", "attention_grad_k",
                                             "attention_grad_v"};
        for (int w = 0; w < 3; w++) {
            KT_CHECK_OK(kf_op_spec_forward(kf_op_find(names[w]), packed, &params[c], got));
            double floor = kf__verify_floor(want[w]->data, kf_tensor_size(got));
            for (uint64_t e = 0; e < kf_tensor_size(got); e++) {
                double err = kf__rel_error(got->data[e], want[w]->data[e], floor);
                KT_CHECK(err < 1e-4, "case %d, %s, element %llu: %g, spec_backward %g", c, names[w],
                         (unsigned long long)e, got->data[e], want[w]->data[e]);
                if (err >= 1e-4) {
                    break;
                }
            }
        }
        for (int i = 0; i < 4; i++) {
            kf_tensor_destroy(in[i]);
        }
        for (int w = 0; w < 3; w++) {
            kf_tensor_destroy(want[w]);
        }
        kf_tensor_destroy(out);
        kf_tensor_destroy(g);
        kf_tensor_destroy(got);
    }
}

/* Worked by hand: q = 0 makes every score 0, so causal row i is the mean of v_0..v_i, and the
 * unmasked one the mean of all rows; rope turns (1, 0) at position 1 by base^0 = 1 radian. */
KT_CPU_TEST(ops, attention_and_rope_by_hand) {
    kf_shape s = shape4(1, 1, 3, 2);
    kf_tensor *q = NULL, *v = NULL, *out = NULL;
    KT_CHECK_OK(kf_tensor_create(&s, &q));
    KT_CHECK_OK(kf_tensor_create(&s, &v));
    KT_CHECK_OK(kf_tensor_create(&s, &out));
    const float vv[6] = {1, 2, 3, 4, 5, 9};
    memcpy(v->data, vv, sizeof vv);
    const kf_tensor *in[3] = {q, q, v};
    KT_CHECK_OK(kf_op_spec_forward(kf_op_find("attention"), in, NULL, out));
    const float causal[6] = {1, 2, 2, 3, 3, 5};
    for (int i = 0; i < 6; i++) {
        KT_CHECK(fabsf(out->data[i] - causal[i]) < 1e-6f, "causal %d: %g", i, out->data[i]);
    }
    kf_op_params open = {.causal = false, .given = KF_PARAM_CAUSAL};
    KT_CHECK_OK(kf_op_spec_forward(kf_op_find("attention"), in, &open, out));
    for (int i = 0; i < 6; i++) {
        KT_CHECK(fabsf(out->data[i] - causal[4 + i % 2]) < 1e-6f, "open %d: %g", i, out->data[i]);
    }
    kf_shape rs = kf_shape_2d(2, 2);
    kf_tensor *x = NULL, *y = NULL;
    KT_CHECK_OK(kf_tensor_create(&rs, &x));
    KT_CHECK_OK(kf_tensor_create(&rs, &y));
    const float xv[4] = {1, 0, 1, 0};
    memcpy(x->data, xv, sizeof xv);
    KT_CHECK_OK(kf_op_spec_forward(kf_op_find("rope"), (const kf_tensor *const *)&x, NULL, y));
    KT_CHECK(y->data[0] == 1.0f && y->data[1] == 0.0f, "position 0 stays");
    KT_CHECK(fabsf(y->data[2] - cosf(1.0f)) < 1e-7f && fabsf(y->data[3] - sinf(1.0f)) < 1e-7f,
             "position 1 turns by 1 rad: %g %g", y->data[2], y->data[3]);
    kf_tensor_destroy(q);
    kf_tensor_destroy(v);
    kf_tensor_destroy(out);
    kf_tensor_destroy(x);
    kf_tensor_destroy(y);
}

KT_CPU_TEST(ops, attention_shape_errors) {
    const kf_operator *att = kf_op_find("attention");
    char msg[256];
    kf_shape out;
    kf_shape big[3] = {shape4(1, 1, 4, 129), shape4(1, 1, 4, 129), shape4(1, 1, 4, 129)};
    KT_CHECK(kf_op_shape(att, big, NULL, &out, msg, sizeof msg) == KF_ERROR_SHAPE, "D 129");
    KT_CHECK(strstr(msg, "129") && strstr(msg, "128"), "names D and the limit: %s", msg);
    kf_shape differ[3] = {shape4(1, 1, 4, 8), shape4(1, 1, 5, 8), shape4(1, 1, 4, 8)};
    KT_CHECK(kf_op_shape(att, differ, NULL, &out, msg, sizeof msg) == KF_ERROR_SHAPE, "T differs");
    kf_shape g[4] = {shape4(1, 1, 4, 8), shape4(1, 1, 4, 8), shape4(1, 1, 4, 8),
                     shape4(1, 1, 4, 8)};
    KT_CHECK(kf_op_shape(kf_op_find("attention_grad_q"), g, NULL, &out, msg, sizeof msg) ==
                 KF_ERROR_SHAPE,
             "g must have D + 2 columns");
    KT_CHECK(strstr(msg, "1x1x4x10"), "names the shape g must have: %s", msg);
    kf_shape odd = kf_shape_2d(4, 7);
    KT_CHECK(kf_op_shape(kf_op_find("rope"), &odd, NULL, &out, msg, sizeof msg) == KF_ERROR_SHAPE,
             "rope needs D even");
}

/* The forward of rope |> attention |> scale: rope's two kernels and one for attention with the
 * scale in its store phase; the T x T scores never reach memory (the plan moves only q, k, v,
 * the rotated q and k, and o). */
KT_TEST(ops, attention_forward_is_one_dispatch) {
    KT_NEED_GPU(ctx);
    const char *text = "q: f32[2, 4, 100, 32]\nk: f32[2, 4, 100, 32]\nv: f32[2, 4, 100, 32]\n"
                       "o = attention(q, k, v) |> scale(0.5)\nout o\n";
    kf_graph *g = NULL;
    kf_spec_error err;
    KT_CHECK(kf_spec_parse(text, strlen(text), &g, &err) == KF_OK, "%s", err.message);
    kf_plan *p = NULL;
    KT_CHECK_OK(kf_graph_compile(ctx, g, NULL, &p));
    kf_plan_summary s;
    kf_plan_summary_get(p, &s);
    KT_CHECK(s.dispatches == 1, "%u dispatches", s.dispatches);
    kf_plan_report rep;
    KT_CHECK_OK(kf_plan_verify(p, kt_rand_u64(), &rep));
    char *explain = kf_plan_explain(p, false);
    KT_CHECK(explain && strstr(explain, "attention |> scale"), "explain: %s", explain);
    kf_free(explain);
    kf_plan_destroy(p);
    kf_graph_destroy(g);
}
