/* GPU tensors bound to plans: chained plans in one submission, shared weights, in-place updates
 * (legal and refused), shape and dtype checks, destroying a bound tensor, byte counters, and a
 * first run that creates no pipeline. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static kf_graph *parse(const char *text) {
    kf_graph *g = NULL;
    kf_spec_error err;
    if (kf_spec_parse(text, strlen(text), &g, &err) != KF_OK) {
        fprintf(stderr, "parse: %u:%u: %s\n", err.line, err.column, err.message);
        return NULL;
    }
    return g;
}

static kf_plan *compile(kf_context *ctx, const char *text) {
    kf_graph *g = parse(text);
    kf_plan *p = NULL;
    if (g && kf_graph_compile(ctx, g, NULL, &p) != KF_OK) {
        fprintf(stderr, "compile: %s\n", kf_context_last_error(ctx));
        p = NULL;
    }
    kf_graph_destroy(g);
    return p;
}

static kf_tensor *random_tensor(kf_shape shape) {
    kf_tensor *t = NULL;
    if (kf_tensor_create(&shape, &t) != KF_OK) {
        return NULL;
    }
    for (uint64_t i = 0; i < kf_tensor_size(t); i++) {
        t->data[i] = kt_rand_f32(-1.0f, 1.0f);
    }
    return t;
}

static kf_gpu_tensor *upload(kf_context *ctx, const kf_tensor *t) {
    kf_gpu_tensor *g = NULL;
    return kf_gpu_tensor_from(ctx, t, KF_DTYPE_F32, &g) == KF_OK ? g : NULL;
}

/* A GPU tensor full of NaN: whatever a plan leaves unwritten shows. */
static kf_gpu_tensor *poisoned(kf_context *ctx, kf_shape shape) {
    kf_gpu_tensor *g = NULL;
    if (kf_gpu_tensor_create(ctx, &shape, KF_DTYPE_F32, &g) != KF_OK) {
        return NULL;
    }
    kf_buffer_fill_u32(g->buffer, 0x7fc00000u);
    return g;
}

/* Relative error with a floor of 1% of b's rms, as kf_plan_verify measures: a dot product that
 * cancels to nearly zero differs from the float64 answer in its last bits, which is no error. */
static double max_err(const kf_tensor *a, const kf_tensor *b) {
    double rms = 0.0;
    for (uint64_t i = 0; i < kf_tensor_size(a); i++) {
        if (!isfinite(a->data[i])) {
            return INFINITY; /* poison left: an element was never written */
        }
        rms += (double)b->data[i] * b->data[i];
    }
    rms = sqrt(rms / (double)kf_tensor_size(b));
    return kf_max_rel_error(a->data, b->data, kf_tensor_size(a), rms > 0.1 ? 0.01 * rms : 1e-3);
}

#define MLP_TEXT(B, D, H, O)                                                                       \
    "x: f32[" #B ", " #D "]\nw1: f32[" #D ", " #H "]\nb1: f32[" #H "]\nw2: f32[" #H ", " #O "]\n"  \
    "b2: f32[" #O "]\n"
static const char *mlp_whole = MLP_TEXT(
    37, 29, 67, 13) "h = matmul(x, w1) |> add(b1) |> gelu\ny = matmul(h, w2) |> add(b2)\nout y\n";
static const char *mlp_layer1 =
    "x: f32[37, 29]\nw1: f32[29, 67]\nb1: f32[67]\nh = matmul(x, w1) |> add(b1) |> gelu\nout h\n";
static const char *mlp_layer2 =
    "h: f32[37, 67]\nw2: f32[67, 13]\nb2: f32[13]\ny = matmul(h, w2) |> add(b2)\nout y\n";

KT_TEST(fusion, chained_plans_match_one_plan_of_the_whole_graph) {
    KT_NEED_GPU(ctx);
    kf_plan *whole = compile(ctx, mlp_whole);
    kf_plan *l1 = compile(ctx, mlp_layer1);
    kf_plan *l2 = compile(ctx, mlp_layer2);
    KT_CHECK(whole && l1 && l2, "compile: %s", kf_context_last_error(ctx));
    const char *names[] = {"x", "w1", "b1", "w2", "b2"};
    kf_shape shapes[] = {{2, {37, 29}}, {2, {29, 67}}, {1, {67}}, {2, {67, 13}}, {1, {13}}};
    kf_tensor *host[5];
    kf_gpu_tensor *dev[5];
    for (int i = 0; i < 5; i++) {
        host[i] = random_tensor(shapes[i]);
        dev[i] = upload(ctx, host[i]);
        KT_CHECK(host[i] && dev[i], "tensor %s", names[i]);
        KT_CHECK_OK(kf_plan_set_input(whole, names[i], host[i]));
    }
    kf_gpu_tensor *h = poisoned(ctx, (kf_shape){2, {37, 67}});
    kf_gpu_tensor *y = poisoned(ctx, (kf_shape){2, {37, 13}});
    KT_CHECK(h && y, "gpu tensors");
    for (int i = 0; i < 3; i++) {
        KT_CHECK_OK(kf_plan_bind_input(l1, names[i], dev[i]));
    }
    KT_CHECK_OK(kf_plan_bind_output(l1, "h", h));
    KT_CHECK_OK(kf_plan_bind_input(l2, "h", h));
    KT_CHECK_OK(kf_plan_bind_input(l2, "w2", dev[3]));
    KT_CHECK_OK(kf_plan_bind_input(l2, "b2", dev[4]));
    KT_CHECK_OK(kf_plan_bind_output(l2, "y", y));

    kf_context_stats s0, s1;
    KT_CHECK_OK(kf_context_stats_get(ctx, &s0));
    kf_plan *seq[] = {l1, l2};
    KT_CHECK_OK(kf_plan_run_sequence(seq, 2));
    KT_CHECK_OK(kf_context_stats_get(ctx, &s1));
    KT_CHECK(s1.submissions - s0.submissions == 1, "%llu submissions for the chained plans",
             (unsigned long long)(s1.submissions - s0.submissions));
    KT_CHECK(s1.upload_bytes == s0.upload_bytes && s1.download_bytes == s0.download_bytes,
             "a run on bound tensors moved bytes");
    /* The caller's batch: both plans' dispatches in one kf_context_run. */
    const kf_dispatch *d1, *d2;
    uint32_t n1, n2;
    KT_CHECK_OK(kf_plan_dispatches(l1, &d1, &n1));
    KT_CHECK_OK(kf_plan_dispatches(l2, &d2, &n2));
    KT_CHECK(n1 == 1 && n2 == 1, "%u + %u dispatches, want 1 + 1", n1, n2);
    kf_dispatch batch[2] = {d1[0], d2[0]};
    KT_CHECK_OK(kf_context_run(ctx, batch, 2));
    kf_timing timing;
    KT_CHECK_OK(kf_plan_time_sequence(seq, 2, 2, &timing));
    KT_CHECK(timing.median_ms > 0.0, "timing");
    KT_CHECK_OK(kf_plan_run(whole));

    kf_tensor *got = NULL, *want = NULL;
    KT_CHECK_OK(kf_tensor_create(&y->shape, &got));
    KT_CHECK_OK(kf_tensor_create(&y->shape, &want));
    KT_CHECK_OK(kf_gpu_tensor_to(y, got));
    KT_CHECK_OK(kf_plan_get_output(whole, "y", want));
    double err = max_err(got, want);
    /* The same kernels on the same data: the chain is the whole graph cut at h. */
    KT_CHECK(err <= 1e-6, "chained y differs from the whole graph's: %.3g", err);
    /* The output is still readable through the plan that wrote it. */
    kf_tensor_fill_random(got, 1, -1.0f, 1.0f);
    KT_CHECK_OK(kf_plan_get_output(l2, "y", got));
    KT_CHECK(max_err(got, want) <= 1e-6, "kf_plan_get_output of a bound output");

    kf_tensor_destroy(got);
    kf_tensor_destroy(want);
    kf_plan_destroy(whole);
    kf_plan_destroy(l1);
    kf_plan_destroy(l2);
    for (int i = 0; i < 5; i++) {
        kf_tensor_destroy(host[i]);
        kf_gpu_tensor_destroy(dev[i]);
    }
    kf_gpu_tensor_destroy(h);
    kf_gpu_tensor_destroy(y);
}

/* y[i] = sum_k x[i,k] w[k,j] in float64, then f(y + b). */
static void cpu_layer(const kf_tensor *x, const kf_tensor *w, uint32_t m, uint32_t k, uint32_t n,
                      bool relu, float *out) {
    for (uint32_t i = 0; i < m; i++) {
        for (uint32_t j = 0; j < n; j++) {
            double acc = 0.0;
            for (uint32_t q = 0; q < k; q++) {
                acc += (double)x->data[i * k + q] * w->data[q * n + j];
            }
            out[i * n + j] = relu && acc < 0.0 ? 0.0f : (float)acc;
        }
    }
}

KT_TEST(fusion, one_weight_tensor_shared_by_two_plans) {
    KT_NEED_GPU(ctx);
    kf_plan *a = compile(ctx, "x: f32[5, 31]\nw: f32[31, 7]\ny = matmul(x, w)\nout y\n");
    kf_plan *b = compile(ctx, "x: f32[3, 31]\nw: f32[31, 7]\ny = matmul(x, w) |> relu\nout y\n");
    KT_CHECK(a && b, "compile: %s", kf_context_last_error(ctx));
    kf_tensor *xa = random_tensor((kf_shape){2, {5, 31}});
    kf_tensor *xb = random_tensor((kf_shape){2, {3, 31}});
    kf_tensor *w = random_tensor((kf_shape){2, {31, 7}});
    kf_gpu_tensor *wd = upload(ctx, w);
    KT_CHECK(xa && xb && w && wd, "tensors");
    KT_CHECK_OK(kf_plan_bind_input(a, "w", wd));
    KT_CHECK_OK(kf_plan_bind_input(b, "w", wd));
    KT_CHECK_OK(kf_plan_set_input(a, "x", xa));
    KT_CHECK_OK(kf_plan_set_input(b, "x", xb));
    kf_tensor *ya = NULL, *yb = NULL, *want_a = NULL, *want_b = NULL;
    KT_CHECK_OK(kf_tensor_create(&(kf_shape){2, {5, 7}}, &ya));
    KT_CHECK_OK(kf_tensor_create(&(kf_shape){2, {3, 7}}, &yb));
    KT_CHECK_OK(kf_tensor_create(&(kf_shape){2, {5, 7}}, &want_a));
    KT_CHECK_OK(kf_tensor_create(&(kf_shape){2, {3, 7}}, &want_b));
    for (int round = 0; round < 2; round++) {
        /* Round 1 changes the one weight tensor: both plans must see the new values. */
        if (round == 1) {
            for (uint64_t i = 0; i < kf_tensor_size(w); i++) {
                w->data[i] = kt_rand_f32(-2.0f, 2.0f);
            }
            KT_CHECK_OK(kf_buffer_upload(wd->buffer, 0, w->data, kf_tensor_size(w) * 4));
        }
        kf_plan *both[] = {a, b};
        KT_CHECK_OK(kf_plan_run_sequence(both, 2));
        KT_CHECK_OK(kf_plan_get_output(a, "y", ya));
        KT_CHECK_OK(kf_plan_get_output(b, "y", yb));
        cpu_layer(xa, w, 5, 31, 7, false, want_a->data);
        cpu_layer(xb, w, 3, 31, 7, true, want_b->data);
        KT_CHECK(max_err(ya, want_a) < 1e-4, "round %d: plan a: %.3g", round, max_err(ya, want_a));
        KT_CHECK(max_err(yb, want_b) < 1e-4, "round %d: plan b: %.3g", round, max_err(yb, want_b));
    }
    /* A bound input refuses host data (it would overwrite the shared tensor). */
    KT_CHECK(kf_plan_set_input(a, "w", w) == KF_ERROR_INVALID_ARGUMENT, "set_input on bound w");
    KT_CHECK(strstr(kf_context_last_error(ctx), "w") != NULL, "message names w");
    /* So does verification, which would fill it with random data. */
    kf_plan_report report;
    KT_CHECK(kf_plan_verify(a, 1, &report) == KF_ERROR_INVALID_ARGUMENT, "verify on bound w");
    /* Unbound, the plan needs the input again, then works from host data as before. */
    KT_CHECK_OK(kf_plan_bind_input(a, "w", NULL));
    KT_CHECK(kf_plan_run(a) == KF_ERROR_INVALID_ARGUMENT, "run with w unbound and unset");
    KT_CHECK_OK(kf_plan_set_input(a, "w", w));
    KT_CHECK_OK(kf_plan_set_input(a, "x", xa)); /* the refused verification drew its own x */
    KT_CHECK_OK(kf_plan_run(a));
    KT_CHECK_OK(kf_plan_get_output(a, "y", ya));
    KT_CHECK(max_err(ya, want_a) < 1e-4, "after unbinding: %.3g", max_err(ya, want_a));
    kf_tensor_destroy(ya);
    kf_tensor_destroy(yb);
    kf_tensor_destroy(want_a);
    kf_tensor_destroy(want_b);
    kf_tensor_destroy(xa);
    kf_tensor_destroy(xb);
    kf_tensor_destroy(w);
    kf_plan_destroy(a);
    kf_plan_destroy(b);
    kf_gpu_tensor_destroy(wd);
}

/* w = w - 0.125 * dw, `steps` times, in place, against the same loop on the CPU. n: elements of
 * each parameter; params: how many (two or more make a horizontal group). */
static void sgd_in_place(kf_context *ctx, uint32_t n, uint32_t params) {
    char text[1024] = "";
    size_t len = 0;
    for (uint32_t i = 0; i < params; i++) {
        len +=
            (size_t)snprintf(text + len, sizeof text - len,
                             "w%u: f32[%u]\ndw%u: f32[%u]\nnew%u = sub(w%u, scale(dw%u, 0.125))\n"
                             "out new%u\n",
                             i, n, i, n, i, i, i, i);
    }
    kf_plan *p = compile(ctx, text);
    KT_CHECK(p, "compile: %s", kf_context_last_error(ctx));
    kf_plan_summary summary;
    KT_CHECK_OK(kf_plan_summary_get(p, &summary));
    KT_CHECK(summary.dispatches == 1, "%u dispatches: the updates are not one horizontal group",
             summary.dispatches);
    kf_tensor *w[4], *dw[4];
    kf_gpu_tensor *wd[4], *dwd[4];
    for (uint32_t i = 0; i < params; i++) {
        w[i] = random_tensor((kf_shape){1, {n}});
        dw[i] = random_tensor((kf_shape){1, {n}});
        wd[i] = upload(ctx, w[i]);
        dwd[i] = upload(ctx, dw[i]);
        KT_CHECK(wd[i] && dwd[i], "tensors");
        char name[16];
        snprintf(name, sizeof name, "w%u", i);
        KT_CHECK_OK(kf_plan_bind_input(p, name, wd[i]));
        snprintf(name, sizeof name, "dw%u", i);
        KT_CHECK_OK(kf_plan_bind_input(p, name, dwd[i]));
        snprintf(name, sizeof name, "new%u", i);
        kf_status st = kf_plan_bind_output(p, name, wd[i]);
        KT_CHECK(st == KF_OK, "in-place bind of %s refused: %s", name, kf_context_last_error(ctx));
    }
    kf_context_stats s0, s1;
    KT_CHECK_OK(kf_context_stats_get(ctx, &s0));
    for (int step = 0; step < 3; step++) {
        KT_CHECK_OK(kf_plan_run(p));
        for (uint32_t i = 0; i < params; i++) {
            for (uint32_t e = 0; e < n; e++) {
                w[i]->data[e] = w[i]->data[e] - dw[i]->data[e] * 0.125f;
            }
        }
    }
    KT_CHECK_OK(kf_context_stats_get(ctx, &s1));
    KT_CHECK(s1.upload_bytes == s0.upload_bytes, "in-place steps uploaded bytes");
    kf_tensor *got = NULL;
    KT_CHECK_OK(kf_tensor_create(&(kf_shape){1, {n}}, &got));
    for (uint32_t i = 0; i < params; i++) {
        KT_CHECK_OK(kf_gpu_tensor_to(wd[i], got));
        double err = max_err(got, w[i]);
        KT_CHECK(err < 1e-5, "n %u param %u: w after 3 in-place steps off by %.3g", n, i, err);
    }
    /* Unbinding the input undoes the in-place kernel: from host data, one more step lands in
     * the output's tensor, w itself now a plan buffer. */
    KT_CHECK_OK(kf_plan_bind_input(p, "w0", NULL));
    KT_CHECK_OK(kf_plan_set_input(p, "w0", w[0]));
    KT_CHECK_OK(kf_plan_run(p));
    for (uint32_t e = 0; e < n; e++) {
        w[0]->data[e] = w[0]->data[e] - dw[0]->data[e] * 0.125f;
    }
    KT_CHECK_OK(kf_gpu_tensor_to(wd[0], got));
    KT_CHECK(max_err(got, w[0]) < 1e-5, "n %u: a step after unbinding off by %.3g", n,
             max_err(got, w[0]));
    kf_tensor_destroy(got);
    kf_plan_destroy(p);
    for (uint32_t i = 0; i < params; i++) {
        kf_tensor_destroy(w[i]);
        kf_tensor_destroy(dw[i]);
        kf_gpu_tensor_destroy(wd[i]);
        kf_gpu_tensor_destroy(dwd[i]);
    }
}

KT_TEST(fusion, in_place_update_of_a_parameter) {
    KT_NEED_GPU(ctx);
    sgd_in_place(ctx, 1, 1);
    sgd_in_place(ctx, 1031, 1);     /* prime: scalar loads and stores */
    sgd_in_place(ctx, 4096, 1);     /* vec4 */
    sgd_in_place(ctx, 1u << 19, 1); /* two vec4s per invocation (from 2^17 vec4s) */
    sgd_in_place(ctx, 997, 3);      /* a horizontal group of three updates */
}

KT_TEST(fusion, in_place_refused_where_an_element_could_be_read_after_its_write) {
    KT_NEED_GPU(ctx);
    /* A matmul reads whole rows and columns of w: writing its product into w would race. */
    kf_plan *p = compile(ctx, "w: f32[8, 8]\nv: f32[8, 8]\ny = matmul(w, v)\nout y\n");
    KT_CHECK(p, "compile: %s", kf_context_last_error(ctx));
    kf_tensor *wh = random_tensor((kf_shape){2, {8, 8}});
    kf_gpu_tensor *w = upload(ctx, wh);
    kf_gpu_tensor *v = upload(ctx, wh);
    KT_CHECK(w && v, "tensors");
    KT_CHECK_OK(kf_plan_bind_input(p, "w", w));
    KT_CHECK_OK(kf_plan_bind_input(p, "v", v));
    kf_status st = kf_plan_bind_output(p, "y", w);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT, "matmul into its own operand: %s", kf_status_str(st));
    const char *msg = kf_context_last_error(ctx);
    KT_CHECK(strstr(msg, "output y") && strstr(msg, "input w") && strstr(msg, "matmul"),
             "message should name y, w and the group: %s", msg);
    /* Refused in the other order too (output first, then the input onto its tensor). */
    kf_gpu_tensor *y = poisoned(ctx, (kf_shape){2, {8, 8}});
    KT_CHECK_OK(kf_plan_bind_input(p, "v", NULL));
    KT_CHECK_OK(kf_plan_bind_output(p, "y", y));
    st = kf_plan_bind_input(p, "v", y);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT, "input v onto output y's tensor: %s",
             kf_status_str(st));
    /* The refused bindings changed nothing: with v bound back, the plan computes w @ v. */
    KT_CHECK_OK(kf_plan_bind_input(p, "v", v));
    KT_CHECK_OK(kf_plan_run(p));
    kf_tensor *got = NULL, *want = NULL;
    KT_CHECK_OK(kf_tensor_create(&y->shape, &got));
    KT_CHECK_OK(kf_tensor_create(&y->shape, &want));
    KT_CHECK_OK(kf_gpu_tensor_to(y, got));
    cpu_layer(wh, wh, 8, 8, 8, false, want->data);
    KT_CHECK(max_err(got, want) < 1e-4, "after refusals: %.3g", max_err(got, want));
    kf_plan_destroy(p);

    /* Two inputs of the writing group on the tensor: one read-write binding can serve one. */
    p = compile(ctx, "a: f32[1, 8]\nb: f32[1, 8]\ny = add(a, b) |> relu\nz = add(y, a)\nout z\n");
    KT_CHECK(p, "compile: %s", kf_context_last_error(ctx));
    kf_tensor *row = random_tensor((kf_shape){2, {1, 8}});
    kf_gpu_tensor *rd = upload(ctx, row);
    KT_CHECK_OK(kf_plan_bind_input(p, "a", rd));
    KT_CHECK_OK(kf_plan_bind_input(p, "b", rd));
    st = kf_plan_bind_output(p, "z", rd);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT, "two inputs on the in-place tensor: %s",
             kf_status_str(st));
    kf_plan_destroy(p);

    /* A later group reads the input after the output's group wrote it. */
    p = compile(ctx, "w: f32[4, 4]\nu = relu(w)\ns = sum(w)\nout u, s\n");
    KT_CHECK(p, "compile: %s", kf_context_last_error(ctx));
    kf_tensor *sq = random_tensor((kf_shape){2, {4, 4}});
    kf_gpu_tensor *sd = upload(ctx, sq);
    KT_CHECK_OK(kf_plan_bind_input(p, "w", sd));
    st = kf_plan_bind_output(p, "u", sd);
    /* relu(w) and sum(w) are independent: whichever dispatch runs second reads w. Legal only
     * when sum runs first, which the planner decides; either answer must then compute right. */
    if (st == KF_OK) {
        KT_CHECK_OK(kf_plan_run(p));
        kf_tensor *s = NULL;
        KT_CHECK_OK(kf_tensor_create(&(kf_shape){1, {4}}, &s));
        KT_CHECK_OK(kf_plan_get_output(p, "s", s));
        for (uint32_t r = 0; r < 4; r++) {
            double acc = 0.0;
            for (uint32_t c = 0; c < 4; c++) {
                acc += sq->data[r * 4 + c];
            }
            KT_CHECK(fabs(s->data[r] - acc) < 1e-4, "sum read w after the in-place relu");
        }
        kf_tensor_destroy(s);
    } else {
        KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT && strstr(kf_context_last_error(ctx), "after"),
                 "%s: %s", kf_status_str(st), kf_context_last_error(ctx));
    }
    kf_plan_destroy(p);
    kf_tensor_destroy(sq);
    kf_gpu_tensor_destroy(sd);
    kf_tensor_destroy(row);
    kf_gpu_tensor_destroy(rd);
    kf_tensor_destroy(got);
    kf_tensor_destroy(want);
    kf_tensor_destroy(wh);
    kf_gpu_tensor_destroy(w);
    kf_gpu_tensor_destroy(v);
    kf_gpu_tensor_destroy(y);
}

KT_TEST(fusion, binding_checks_shape_and_dtype) {
    KT_NEED_GPU(ctx);
    kf_plan *p = compile(ctx, "x: f32[4, 6]\ny = relu(x)\nout y\n");
    KT_CHECK(p, "compile");
    kf_gpu_tensor *wrong_shape = NULL, *wrong_dtype = NULL;
    KT_CHECK_OK(kf_gpu_tensor_create(ctx, &(kf_shape){2, {6, 4}}, KF_DTYPE_F32, &wrong_shape));
    KT_CHECK_OK(kf_gpu_tensor_create(ctx, &(kf_shape){2, {4, 6}}, KF_DTYPE_I32, &wrong_dtype));
    KT_CHECK(kf_plan_bind_input(p, "x", wrong_shape) == KF_ERROR_SHAPE, "shape");
    const char *msg = kf_context_last_error(ctx);
    KT_CHECK(strstr(msg, "4x6") && strstr(msg, "6x4"), "names both shapes: %s", msg);
    KT_CHECK(kf_plan_bind_output(p, "y", wrong_dtype) == KF_ERROR_TYPE, "dtype");
    msg = kf_context_last_error(ctx);
    KT_CHECK(strstr(msg, "f32") && strstr(msg, "i32"), "names both dtypes: %s", msg);
    KT_CHECK(kf_plan_bind_input(p, "nope", wrong_shape) == KF_ERROR_INVALID_ARGUMENT, "name");
    KT_CHECK(kf_plan_bind_output(p, "x", wrong_shape) == KF_ERROR_INVALID_ARGUMENT, "no output x");
    kf_plan_destroy(p);
    kf_gpu_tensor_destroy(wrong_shape);
    kf_gpu_tensor_destroy(wrong_dtype);
}

KT_TEST(fusion, destroying_a_bound_tensor_keeps_its_memory_for_the_plan) {
    KT_NEED_GPU(ctx);
    kf_plan *p = compile(ctx, "x: f32[1031]\ny = scale(x, 2)\nout y\n");
    KT_CHECK(p, "compile");
    kf_tensor *x = random_tensor((kf_shape){1, {1031}});
    kf_gpu_tensor *xd = upload(ctx, x);
    kf_gpu_tensor *yd = poisoned(ctx, (kf_shape){1, {1031}});
    KT_CHECK_OK(kf_plan_bind_input(p, "x", xd));
    KT_CHECK_OK(kf_plan_bind_output(p, "y", yd));
    /* The documented rule: the plan holds bound buffers; the tensors' handles go, the memory
     * stays until the plan lets go (ASan watches for a use after free here). */
    kf_gpu_tensor_destroy(xd);
    kf_gpu_tensor_destroy(yd);
    KT_CHECK_OK(kf_plan_run(p));
    kf_tensor *y = NULL;
    KT_CHECK_OK(kf_tensor_create(&x->shape, &y));
    KT_CHECK_OK(kf_plan_get_output(p, "y", y));
    for (uint32_t i = 0; i < 1031; i++) {
        KT_CHECK(y->data[i] == 2.0f * x->data[i], "y[%u] = %g, want %g", i, y->data[i],
                 2.0f * x->data[i]);
    }
    kf_plan_destroy(p); /* frees the two buffers */
    kf_tensor_destroy(x);
    kf_tensor_destroy(y);
}

KT_TEST(fusion, first_run_after_compile_creates_no_pipeline) {
    KT_NEED_GPU(ctx);
    kf_context_stats s0, s1, s2;
    KT_CHECK_OK(kf_context_stats_get(ctx, &s0));
    kf_plan *p = compile(ctx, mlp_whole);
    KT_CHECK(p, "compile");
    KT_CHECK_OK(kf_context_stats_get(ctx, &s1));
    for (uint32_t i = 0; i < 5; i++) {
        const char *names[] = {"x", "w1", "b1", "w2", "b2"};
        kf_tensor *t = NULL;
        KT_CHECK_OK(kf_plan_random_input(p, names[i], kt_rand_u64(), &t));
        KT_CHECK_OK(kf_plan_set_input(p, names[i], t));
        kf_tensor_destroy(t);
    }
    KT_CHECK_OK(kf_plan_run(p));
    KT_CHECK_OK(kf_context_stats_get(ctx, &s2));
    KT_CHECK(s2.pipelines_compiled == s1.pipelines_compiled, "the first run created %llu pipelines",
             (unsigned long long)(s2.pipelines_compiled - s1.pipelines_compiled));
    KT_CHECK(s2.pipeline_cache_hits == s1.pipeline_cache_hits, "the first run looked pipelines up");
    KT_CHECK(s1.dispatches > s0.dispatches, "compile ran no dispatch to prime the driver");
    kf_plan_destroy(p);
    /* no_prime (kfuse explain): compile dispatches nothing. */
    kf_graph *g = parse(mlp_whole);
    kf_compile_options lazy = {.no_prime = true};
    KT_CHECK_OK(kf_context_stats_get(ctx, &s0));
    KT_CHECK_OK(kf_graph_compile(ctx, g, &lazy, &p));
    KT_CHECK_OK(kf_context_stats_get(ctx, &s1));
    KT_CHECK(s1.dispatches == s0.dispatches, "no_prime compile dispatched");
    kf_plan_destroy(p);
    kf_graph_destroy(g);
}

KT_TEST(fusion, byte_counters_count_what_moves_and_nothing_else) {
    KT_NEED_GPU(ctx);
    kf_plan *p = compile(ctx, "x: f32[7, 5]\nw: f32[5, 3]\ny = matmul(x, w)\nout y\n");
    KT_CHECK(p, "compile");
    kf_tensor *x = random_tensor((kf_shape){2, {7, 5}});
    kf_tensor *w = random_tensor((kf_shape){2, {5, 3}});
    kf_tensor *y = NULL;
    KT_CHECK_OK(kf_tensor_create(&(kf_shape){2, {7, 3}}, &y));
    kf_context_stats s0, s1, s2, s3;
    KT_CHECK_OK(kf_context_stats_get(ctx, &s0));
    kf_gpu_tensor *wd = upload(ctx, w);
    KT_CHECK_OK(kf_context_stats_get(ctx, &s1));
    KT_CHECK(s1.upload_bytes - s0.upload_bytes == 5 * 3 * 4, "uploading w: %llu bytes",
             (unsigned long long)(s1.upload_bytes - s0.upload_bytes));
    KT_CHECK_OK(kf_plan_bind_input(p, "w", wd));
    for (int r = 0; r < 10; r++) {
        KT_CHECK_OK(kf_plan_set_input(p, "x", x));
        KT_CHECK_OK(kf_plan_run(p));
        KT_CHECK_OK(kf_plan_get_output(p, "y", y));
    }
    KT_CHECK_OK(kf_context_stats_get(ctx, &s2));
    KT_CHECK(s2.upload_bytes - s1.upload_bytes == 10 * 7 * 5 * 4, "10 runs uploaded %llu bytes",
             (unsigned long long)(s2.upload_bytes - s1.upload_bytes));
    KT_CHECK(s2.download_bytes - s1.download_bytes == 10 * 7 * 3 * 4,
             "10 runs downloaded %llu bytes",
             (unsigned long long)(s2.download_bytes - s1.download_bytes));
    kf_timing t;
    KT_CHECK_OK(kf_plan_time(p, 3, &t));
    KT_CHECK_OK(kf_context_stats_get(ctx, &s3));
    KT_CHECK(s3.upload_bytes == s2.upload_bytes && s3.download_bytes == s2.download_bytes,
             "timing moved bytes");
    kf_plan_destroy(p);
    kf_gpu_tensor_destroy(wd);
    kf_tensor_destroy(x);
    kf_tensor_destroy(w);
    kf_tensor_destroy(y);
}
