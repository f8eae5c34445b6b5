/* sum's and mean's gradients as element-wise broadcasts (src/fuse/autodiff.c), a constant dy
 * folded (the seed: a sum loss's gradient is a constant, mul's then the other operand itself),
 * and nodes no output depends on planned into no dispatch (src/fuse/plan.c): the gradients
 * against closed forms computed here from the plan's own inputs, and fewer dispatches. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { ROWS = 7, COLS = 13 };

static kf_plan *compile_text(kf_context *ctx, const char *text, kf_graph **g) {
    kf_spec_error err = {0};
    if (kf_spec_parse(text, strlen(text), g, &err) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "parse: %u:%u: %s", err.line, err.column, err.message);
        return NULL;
    }
    kf_plan *p = NULL;
    if (kf_graph_compile(ctx, *g, NULL, &p) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "compile: %s", kf_context_last_error(ctx));
        return NULL;
    }
    return p;
}

/* loss = sum(square(R(x))) with R = sum or mean over the last axis: dy of R is 2 R(x), not a
 * constant, so the gradient goes through reshape + broadcast_to; dx[i][j] = 2 R_i (/ n). */
static void check_row_grad(const char *op) {
    KT_NEED_GPU(ctx);
    char text[256];
    snprintf(text, sizeof text,
             "x: f32[%d, %d]\nloss = %s(x) |> square |> sum\ndx = grad(loss, x)\nout loss, dx\n",
             ROWS, COLS, op);
    kf_graph *g = NULL;
    kf_plan *p = compile_text(ctx, text, &g);
    KT_CHECK(p, "compile");
    kf_shape xs = kf_shape_2d(ROWS, COLS), ls = {0};
    kf_tensor *x = NULL, *dx = NULL, *loss = NULL;
    KT_CHECK_OK(kf_tensor_create(&xs, &x));
    KT_CHECK_OK(kf_tensor_create(&xs, &dx));
    KT_CHECK_OK(kf_tensor_create(&ls, &loss));
    for (int i = 0; i < ROWS * COLS; i++) {
        x->data[i] = kt_rand_f32(-1, 1);
        dx->data[i] = NAN;
    }
    KT_CHECK_OK(kf_plan_set_input(p, "x", x));
    KT_CHECK_OK(kf_plan_run(p));
    KT_CHECK_OK(kf_plan_get_output(p, "dx", dx));
    KT_CHECK_OK(kf_plan_get_output(p, "loss", loss));
    bool mean = !strcmp(op, "mean");
    double want_loss = 0;
    for (int i = 0; i < ROWS; i++) {
        double r = 0;
        for (int j = 0; j < COLS; j++) {
            r += x->data[i * COLS + j];
        }
        r = mean ? r / COLS : r;
        want_loss += r * r;
        for (int j = 0; j < COLS; j++) {
            double want = 2 * r / (mean ? COLS : 1);
            double got = dx->data[i * COLS + j];
            KT_CHECK(fabs(got - want) <= 1e-5 * fmax(1.0, fabs(want)),
                     "%s: dx[%d][%d] = %.9g, want %.9g", op, i, j, got, want);
        }
    }
    KT_CHECK(fabs(loss->data[0] - want_loss) <= 1e-5 * fmax(1.0, want_loss),
             "%s: loss %.9g, want %.9g", op, (double)loss->data[0], want_loss);
    kf_plan_report rep;
    KT_CHECK(kf_plan_verify(p, kt_rand_u64(), &rep) == KF_OK && rep.passed, "%s: verify: %s", op,
             kf_context_last_error(ctx));
    char *ex = kf_plan_explain(p, false);
    KT_CHECK(ex && !strstr(ex, "sum_grad") && !strstr(ex, "mean_grad"),
             "%s: its gradient is a row kernel:\n%s", op, ex ? ex : "");
    kf_free(ex);
    kf_tensor_destroy(x);
    kf_tensor_destroy(dx);
    kf_tensor_destroy(loss);
    kf_plan_destroy(p);
    kf_graph_destroy(g);
}

KT_TEST(fusion, row_grads_sum_and_mean_are_broadcasts) {
    check_row_grad("sum");
    check_row_grad("mean");
}

/* A sum loss: d(sum(sum(y * r))) / dy is r itself, read by the next kernel; with the loss not
 * an output nothing of the forward loss runs either (one matmul for dx). The seed, the sums'
 * constant gradients and the dead loss: no dispatch; and a user's dead node neither. */
KT_TEST(fusion, row_grads_constant_seed_and_dead_nodes_make_no_dispatch) {
    KT_NEED_GPU(ctx);
    kf_graph *g = NULL;
    kf_plan *p = compile_text(ctx,
                              "x: f32[9, 5]\nw: f32[5, 3]\nr: f32[9, 3]\n"
                              "loss = matmul(x, w) |> mul(r) |> sum |> sum\n"
                              "unused = exp(x) |> neg\n"
                              "dx = grad(loss, x)\nout dx\n",
                              &g);
    KT_CHECK(p, "compile");
    kf_plan_summary s;
    KT_CHECK_OK(kf_plan_summary_get(p, &s));
    char *ex = kf_plan_explain(p, false);
    KT_CHECK(s.dispatches == 1 && ex && strstr(ex, "reads:  r f32[9x3], w f32[5x3]"),
             "%u dispatches (want 1: dx = r w^T):\n%s", s.dispatches, ex ? ex : "");
    kf_plan_report rep;
    KT_CHECK(kf_plan_verify(p, kt_rand_u64(), &rep) == KF_OK && rep.passed, "verify: %s",
             kf_context_last_error(ctx));
    kf_free(ex);
    kf_plan_destroy(p);
    kf_graph_destroy(g);
}
