/* Split-K (src/fuse/rules/split_k.c): a product with few output tiles and a long K runs as
 * partial products over K slices and their column sum, its epilogue in the sum's store phase.
 * Each case: the plan's dispatches and explain, kf_plan_verify (every group against the CPU
 * specs), and the outputs against the unfused plan (the original product, one dispatch) on the
 * same inputs; the weight-gradient case also against a float64 product computed here. */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct split_case {
    const char *program;
    uint32_t dispatches; /* of the fused plan */
    const char *explain; /* what its explain says (NULL: no split-K) */
} split_case;

/* Random inputs from the test's stream, set on both plans. */
static bool set_inputs(const kf_graph *g, kf_plan *a, kf_plan *b, kf_tensor **keep) {
    for (uint32_t i = 0; i < kf_graph_input_count(g); i++) {
        const char *name;
        kf_shape shape;
        kf_graph_input_info(g, i, &name, &shape, NULL);
        if (kf_tensor_create(&shape, &keep[i]) != KF_OK) {
            return false;
        }
        for (uint64_t e = 0; e < kf_tensor_size(keep[i]); e++) {
            keep[i]->data[e] = kt_rand_f32(-1.0f, 1.0f);
        }
        if (kf_plan_set_input(a, name, keep[i]) != KF_OK ||
            kf_plan_set_input(b, name, keep[i]) != KF_OK) {
            return false;
        }
    }
    return true;
}

/* The fused plan's first output (y), or NULL; fails the test where a check does not hold. */
static kf_tensor *check_case(const split_case *sc, kf_tensor **inputs, uint32_t input_cap) {
    kf_context *ctx = kt_context();
    if (!ctx) {
        kt_fail(__FILE__, __LINE__, "no WebGPU adapter: run scripts/setup.sh");
        return NULL;
    }
    kf_graph *g = NULL;
    kf_spec_error err = {0};
    if (kf_spec_parse(sc->program, strlen(sc->program), &g, &err) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "parse: %u:%u: %s", err.line, err.column, err.message);
        return NULL;
    }
    kf_plan *pf = NULL, *pu = NULL;
    kf_compile_options uo = {.no_fuse = true};
    kf_tensor *y = NULL, *ref = NULL;
    char *text = NULL;
    kf_status st = kf_graph_compile(ctx, g, NULL, &pf);
    st = st == KF_OK ? kf_graph_compile(ctx, g, &uo, &pu) : st;
    if (st != KF_OK) {
        kt_fail(__FILE__, __LINE__, "compile: %s: %s\n%s", kf_status_str(st),
                kf_context_last_error(ctx), sc->program);
        goto done;
    }
    text = kf_plan_explain(pf, false);
    kf_plan_summary s = {0};
    kf_plan_summary_get(pf, &s);
    bool named = text && sc->explain && strstr(text, sc->explain);
    bool none = text && !strstr(text, "split-K");
    if (s.dispatches != sc->dispatches || !(sc->explain ? named : none)) {
        kt_fail(__FILE__, __LINE__, "%s: %u dispatches (want %u), explain:\n%s", sc->program,
                s.dispatches, sc->dispatches, text ? text : "");
    }
    uint64_t seed = kt_rand_u64();
    kf_plan_report rep;
    kf_status sv = kf_plan_verify(pf, seed, &rep);
    if (sv != KF_OK) {
        kt_fail(__FILE__, __LINE__, "verify: %s (seed %llu)\n%s\n%s", kf_status_str(sv),
                (unsigned long long)seed, sc->program, text ? text : "");
        for (uint32_t i = 0; i < rep.group_count; i++) {
            fprintf(stderr, "    group %u (%s -> %s): err %.3g tol %.3g%s\n",
                    rep.groups[i].dispatch, rep.groups[i].ops, rep.groups[i].result,
                    rep.groups[i].max_rel_error, rep.groups[i].tolerance,
                    rep.groups[i].passed ? "" : " FAILED");
        }
        goto done;
    }
    if (kf_graph_input_count(g) > input_cap || !set_inputs(g, pf, pu, inputs) ||
        kf_plan_run(pf) != KF_OK || kf_plan_run(pu) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "%s: running: %s", sc->program, kf_context_last_error(ctx));
        goto done;
    }
    const char *name;
    kf_shape shape;
    kf_graph_output_info(g, 0, &name, &shape, NULL);
    if (kf_tensor_create(&shape, &y) != KF_OK || kf_tensor_create(&shape, &ref) != KF_OK) {
        goto done;
    }
    for (uint64_t e = 0; e < kf_tensor_size(y); e++) {
        y->data[e] = NAN; /* poisoned: an element the plan does not write fails */
    }
    if (kf_plan_get_output(pf, name, y) != KF_OK || kf_plan_get_output(pu, name, ref) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "%s: reading %s", sc->program, name);
        goto done;
    }
    uint64_t n = kf_tensor_size(ref);
    double rms = 0.0;
    for (uint64_t e = 0; e < n; e++) {
        rms += (double)ref->data[e] * ref->data[e];
    }
    rms = sqrt(rms / (double)n);
    double diff = kf_max_rel_error(y->data, ref->data, n, 0.01 * rms);
    /* f32 sums of a few thousand terms in two orders: the output's tolerance as verify has it */
    double tol = 0.0;
    for (uint32_t r = 0; r < rep.output_count; r++) {
        tol = rep.outputs[r].index == 0 ? rep.outputs[r].tolerance : tol;
    }
    if (!(diff <= tol)) {
        kt_fail(__FILE__, __LINE__, "%s: split against unfused: %.3g (tolerance %.3g)", sc->program,
                diff, tol);
    }
done:
    kf_free(text);
    kf_tensor_destroy(ref);
    kf_plan_destroy(pf);
    kf_plan_destroy(pu);
    kf_graph_destroy(g);
    return y;
}

/* The GPT's largest weight gradient: [4096 x 128]^T [4096 x 512] as 16 products over 256-row
 * slices and their sum, against float64. */
KT_TEST(fusion, split_k_weight_gradient) {
    split_case sc = {"x: f32[4096,128]\ndy: f32[4096,512]\nw = matmul(x, dy, transpose_a=true)\n",
                     2, "split-K sum: sum_leading |> reshape -> w f32[128x512]"};
    kf_tensor *in[2] = {NULL, NULL};
    kf_tensor *y = check_case(&sc, in, 2);
    if (y && in[0] && in[1]) {
        const float *x = in[0]->data, *dy = in[1]->data;
        double worst = 0.0;
        for (uint32_t i = 0; i < 128; i++) {
            double acc[512] = {0};
            for (uint32_t k = 0; k < 4096; k++) {
                double xv = x[(size_t)k * 128 + i];
                const float *row = dy + (size_t)k * 512;
                for (uint32_t j = 0; j < 512; j++) {
                    acc[j] += xv * row[j];
                }
            }
            for (uint32_t j = 0; j < 512; j++) {
                /* against sqrt(K) / 3, the size of a sum of K products of uniform [-1, 1) */
                double e = fabs(y->data[i * 512 + j] - acc[j]) / (sqrt(4096.0) / 3.0);
                worst = e > worst || e != e ? e : worst;
            }
        }
        KT_CHECK(worst <= 1e-5, "split-K against float64: %.3g", worst);
    }
    kf_tensor_destroy(y);
    kf_tensor_destroy(in[0]);
    kf_tensor_destroy(in[1]);
}

/* The GPT's shapes in the small: the attention output's permute |> reshape read in place by the
 * partial products, an epilogue (a scale and a row add) in the sum's store phase, prime output
 * sizes (ragged tiles), and where the rule does not apply: K below its threshold, a K with no
 * divisor in range (a prime), a not-transposed a, a transposed b (K slices that are not
 * contiguous). */
KT_TEST(fusion, split_k_views_epilogue_and_legality) {
    static const split_case cases[] = {
        {"o: f32[2,4,128,16]\ndy: f32[256,64]\nb: f32[64]\n"
         "h = permute(o, axes=[0,2,1,3]) |> reshape(shape=[256,64])\n"
         "y = matmul(h, dy, transpose_a=true) |> scale(alpha=0.5) |> add(b)\n",
         1, NULL}, /* K 256: below the threshold */
        {"o: f32[2,4,512,16]\ndy: f32[1024,37]\nb: f32[37]\n"
         "h = permute(o, axes=[0,2,1,3]) |> reshape(shape=[1024,64])\n"
         "y = matmul(h, dy, transpose_a=true) |> scale(alpha=0.5) |> add(b)\n",
         2, "split-K sum + epilogue"},
        {"x: f32[1536,29]\ndy: f32[1536,7]\ny = matmul(x, dy, transpose_a=true)\n", 2,
         "split-K sum"},
        {"x: f32[1031,29]\ndy: f32[1031,7]\ny = matmul(x, dy, transpose_a=true)\n", 1, NULL},
        {"x: f32[29,1024]\nw: f32[1024,7]\ny = matmul(x, w)\n", 1, NULL},
        {"x: f32[1024,29]\ndy: f32[7,1024]\ny = matmul(x, dy, transpose_a=true, "
         "transpose_b=true)\n",
         1, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kf_tensor *in[3] = {NULL, NULL, NULL};
        kf_tensor *y = check_case(&cases[i], in, 3);
        kf_tensor_destroy(y);
        for (uint32_t j = 0; j < 3; j++) {
            kf_tensor_destroy(in[j]);
        }
    }
}

/* $KF_NO_SPLIT_K=1 plans the product as one dispatch again (the benches' before). */
KT_TEST(fusion, split_k_switch) {
    setenv("KF_NO_SPLIT_K", "1", 1);
    split_case sc = {"x: f32[2048,64]\ndy: f32[2048,64]\ny = matmul(x, dy, transpose_a=true)\n", 1,
                     NULL};
    kf_tensor *in[2] = {NULL, NULL};
    kf_tensor_destroy(check_case(&sc, in, 2));
    unsetenv("KF_NO_SPLIT_K");
    kf_tensor_destroy(in[0]);
    kf_tensor_destroy(in[1]);
    kf_tensor *again[2] = {NULL, NULL};
    sc.dispatches = 2;
    sc.explain = "split-K sum";
    kf_tensor_destroy(check_case(&sc, again, 2));
    kf_tensor_destroy(again[0]);
    kf_tensor_destroy(again[1]);
}
