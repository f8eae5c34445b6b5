/* CPU and GPU tensors, shapes, broadcasting rules and the relative error every check reports. */
#include "harness.h"
#include "ops/ops_internal.h"
#include "core/half.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

KT_CPU_TEST(ops, tensor_shapes) {
    kf_shape s = kf_shape_2d(7, 13), t = kf_shape_1d(91);
    char buf[64];
    KT_CHECK(kf_shape_elements(&s) == 91, "7x13 has %llu elements",
             (unsigned long long)kf_shape_elements(&s));
    KT_CHECK(!kf_shape_eq(&s, &t), "7x13 == 91");
    KT_CHECK(!strcmp(kf_shape_str(&s, buf, sizeof buf), "7x13"), "got '%s'", buf);
    kf_shape four = {4, {2, 3, 5, 7}};
    KT_CHECK(!strcmp(kf_shape_str(&four, buf, sizeof buf), "2x3x5x7"), "got '%s'", buf);
    kf_shape scalar = {0, {0}};
    KT_CHECK(kf_shape_elements(&scalar) == 1, "a rank-0 shape is one element");
    uint64_t rows;
    uint32_t cols;
    kf__shape_rows_cols(&four, &rows, &cols);
    KT_CHECK(rows == 30 && cols == 7, "rows x cols of 2x3x5x7: %llu x %u", (unsigned long long)rows,
             cols);
    kf_shape zero = kf_shape_2d(0, 3);
    kf_tensor *z = NULL;
    KT_CHECK(kf_tensor_create(&zero, &z) == KF_ERROR_SHAPE && z == NULL, "0x3 must be refused");
}

KT_CPU_TEST(ops, tensor_create_get_set) {
    kf_shape s = kf_shape_2d(3, 5);
    kf_tensor *t = NULL, *c = NULL;
    KT_CHECK_OK(kf_tensor_create(&s, &t));
    for (uint64_t i = 0; i < kf_tensor_size(t); i++) {
        KT_CHECK(kf_tensor_get(t, i) == 0.0f, "element %llu of zeros is %g", (unsigned long long)i,
                 (double)kf_tensor_get(t, i));
    }
    KT_CHECK(kf_tensor_set(t, 14, 2.5f) == KF_OK && kf_tensor_get(t, 14) == 2.5f, "set/get");
    KT_CHECK(kf_tensor_set(t, 15, 1.0f) == KF_ERROR_INVALID_ARGUMENT, "set out of range");
    KT_CHECK(isnan(kf_tensor_get(t, 15)), "get out of range must be NaN");
    KT_CHECK_OK(kf_tensor_constant(&s, -1.5f, &c));
    KT_CHECK(c->data[0] == -1.5f && c->data[14] == -1.5f, "constant");
    KT_CHECK(!kf_tensor_approx_eq(t, c, 1e-3), "different tensors compare equal");
    kf_tensor_destroy(t);
    kf_tensor_destroy(c);
    kf_tensor_destroy(NULL);
}

KT_CPU_TEST(ops, tensor_fill_random) {
    kf_shape s = kf_shape_1d(10000);
    kf_tensor *a = NULL, *b = NULL;
    KT_CHECK_OK(kf_tensor_create(&s, &a));
    KT_CHECK_OK(kf_tensor_create(&s, &b));
    uint64_t seed = kt_rand_u64();
    kf_tensor_fill_random(a, seed, -2.0f, 3.0f);
    kf_tensor_fill_random(b, seed, -2.0f, 3.0f);
    double lo = 1e9, hi = -1e9, sum = 0;
    for (uint64_t i = 0; i < 10000; i++) {
        float v = a->data[i];
        KT_CHECK(v >= -2.0f && v < 3.0f, "element %llu = %g outside [-2, 3)", (unsigned long long)i,
                 (double)v);
        lo = fmin(lo, v), hi = fmax(hi, v), sum += v;
    }
    KT_CHECK(memcmp(a->data, b->data, 10000 * sizeof(float)) == 0, "same seed, other values");
    KT_CHECK(lo < -1.9 && hi > 2.9, "range not covered: [%g, %g]", lo, hi);
    KT_CHECK(fabs(sum / 10000 - 0.5) < 0.1, "mean %g is not near 0.5", sum / 10000);
    kf_tensor_fill_random(b, seed + 1, -2.0f, 3.0f);
    KT_CHECK(memcmp(a->data, b->data, 10000 * sizeof(float)) != 0, "other seed, same values");
    kf_tensor_destroy(a);
    kf_tensor_destroy(b);
}

KT_CPU_TEST(ops, max_rel_error_rules) {
    float a[4] = {1.0f, 2.0f, -3.0f, 0.0f};
    float b[4] = {1.0f, 2.002f, -3.0f, 1e-9f};
    double e = kf_max_rel_error(a, b, 3, 0);
    KT_CHECK(fabs(e - 0.002 / 2.002) < 1e-6, "rel error %g", e);
    /* near zero the floor decides: 1e-9 against 0 with floor 1e-6 is 1e-3 */
    e = kf_max_rel_error(a + 3, b + 3, 1, 0);
    KT_CHECK(fabs(e - 1e-3) < 1e-6, "floored error %g", e);
    e = kf_max_rel_error(a + 3, b + 3, 1, 1.0);
    KT_CHECK(e < 1e-8, "with floor 1: %g", e);
    float nan_a[2] = {NAN, 1.0f}, nan_b[2] = {NAN, 1.0f}, num[2] = {0.5f, 1.0f};
    KT_CHECK(kf_max_rel_error(nan_a, nan_b, 2, 0) == 0, "NaN against NaN counts as equal");
    KT_CHECK(isinf(kf_max_rel_error(nan_a, num, 2, 0)), "NaN against a number is infinite");
    KT_CHECK(isinf(kf_max_rel_error(num, nan_a, 2, 0)), "a number against NaN is infinite");
    float inf_a[1] = {INFINITY}, inf_b[1] = {INFINITY}, ninf[1] = {-INFINITY}, big[1] = {3e38f};
    KT_CHECK(kf_max_rel_error(inf_a, inf_b, 1, 0) == 0, "equal infinities are equal");
    KT_CHECK(isinf(kf_max_rel_error(inf_a, ninf, 1, 0)), "+inf against -inf");
    KT_CHECK(isinf(kf_max_rel_error(inf_a, big, 1, 0)), "inf against a finite number");
    /* the verification floor is 1% of the rms of the expected values */
    float ex[4] = {3.0f, -4.0f, 0.0f, 0.0f};
    KT_CHECK(fabs(kf__verify_floor(ex, 4) - 0.025) < 1e-9, "floor %g", kf__verify_floor(ex, 4));
}

KT_CPU_TEST(ops, broadcast_rules) {
    kf_shape out = kf_shape_2d(257, 129);
    kf_shape row = kf_shape_1d(129), row2 = kf_shape_2d(1, 129), col = kf_shape_2d(257, 1);
    kf_shape one = kf_shape_1d(1), bad = kf_shape_1d(257), bad2 = kf_shape_2d(129, 257);
    KT_CHECK(kf__broadcast_kind(&out, &out) == KF__BCAST_FULL, "full");
    KT_CHECK(kf__broadcast_kind(&one, &out) == KF__BCAST_SCALAR, "scalar");
    KT_CHECK(kf__broadcast_kind(&row, &out) == KF__BCAST_ROW, "row [129]");
    KT_CHECK(kf__broadcast_kind(&row2, &out) == KF__BCAST_ROW, "row [1,129]");
    KT_CHECK(kf__broadcast_kind(&col, &out) == KF__BCAST_COL, "column [257,1]");
    KT_CHECK(kf__broadcast_kind(&bad, &out) == KF__BCAST_NONE, "[257] is not a row of 257x129");
    KT_CHECK(kf__broadcast_kind(&bad2, &out) == KF__BCAST_NONE, "129x257 against 257x129");

    kf_shape in[2] = {row, out}, res;
    char msg[256];
    KT_CHECK_OK(kf__broadcast_shape(in, 2, "add", &res, msg, sizeof msg));
    KT_CHECK(kf_shape_eq(&res, &out), "row + matrix gives the matrix");
    in[0] = kf_shape_1d(7);
    in[1] = kf_shape_2d(1, 7);
    KT_CHECK_OK(kf__broadcast_shape(in, 2, "add", &res, msg, sizeof msg));
    KT_CHECK(kf_shape_eq(&res, &in[1]), "[7] with [1,7] gives [1,7]");
    in[0] = out;
    in[1] = bad;
    KT_CHECK(kf__broadcast_shape(in, 2, "add", &res, msg, sizeof msg) == KF_ERROR_SHAPE,
             "257x129 + [257] must fail");
    KT_CHECK(strstr(msg, "257x129") && strstr(msg, "add"), "message names op and shapes: %s", msg);
    const kf_operator *add = kf_op_find("add");
    KT_CHECK(add && kf_op_shape(add, in, NULL, &res, msg, sizeof msg) == KF_ERROR_SHAPE,
             "kf_op_shape refuses");
}

/* The registry as src/ops/op_list.h declares it, read here the way registry.c reads it: line
 * KF__OP(NAME) is the record kf__op_NAME, named "NAME". A new operator needs no edit here. */
typedef struct listed_op {
    const char *name;
    const kf_operator *op;
} listed_op;
#define KF__OP(NAME) {#NAME, &kf__op_##NAME},
static const listed_op listed_ops[] = {
#include "ops/op_list.h"
};
#undef KF__OP

KT_CPU_TEST(ops, registry_lists_every_op) {
    uint32_t n = (uint32_t)(sizeof listed_ops / sizeof listed_ops[0]);
    KT_CHECK(kf_op_count() == n, "%u operators, op_list.h has %u", kf_op_count(), n);
    for (uint32_t i = 0; i < n; i++) {
        KT_CHECK(kf_op_at(i) == listed_ops[i].op, "entry %u is not op_list.h's line %u (%s)", i, i,
                 listed_ops[i].name);
        KT_CHECK(!strcmp(listed_ops[i].op->name, listed_ops[i].name),
                 "kf__op_%s is named '%s': a record's name is its registry line's",
                 listed_ops[i].name, listed_ops[i].op->name);
        KT_CHECK(kf_op_find(listed_ops[i].name) == listed_ops[i].op, "kf_op_find('%s')",
                 listed_ops[i].name);
        for (uint32_t j = 0; j < i; j++) {
            KT_CHECK(strcmp(listed_ops[i].name, listed_ops[j].name) != 0, "%s listed twice",
                     listed_ops[i].name);
        }
        /* a backward operator's forward operator is registered too (so a forward operator whose
         * line was dropped is seen through its gradient) */
        const kf_operator *fwd = listed_ops[i].op->grad_of;
        KT_CHECK(!fwd || kf_op_find(fwd->name) == fwd, "%s's grad_of (%s) is not registered",
                 listed_ops[i].name, fwd ? fwd->name : "");
    }
    for (uint32_t i = 0; i < n; i++) {
        const kf_operator *op = listed_ops[i].op;
        const char *name = listed_ops[i].name;
        /* a backward operator's gradient check is its forward's differences (grad_of); sum_to
         * has a spec_backward but no backward kernel (autodiff uses broadcast_to) */
        bool backward_op = op->grad_of != NULL;
        /* attention's gradient is three operators after attention_grad_prep (autodiff), not one
         * kernel_backward; the prep and gradient operators have only a forward */
        bool attention_part = !strncmp(name, "attention", 9);
        KT_CHECK(
            op->spec_forward &&
                (op->spec_backward || backward_op ||
                 (attention_part && i > 0 && strcmp(name, "attention"))) &&
                op->kernel_forward &&
                (op->kernel_backward || backward_op || attention_part || !strcmp(name, "sum_to")) &&
                op->shape && op->cases && op->case_count,
            "%s lacks part of its record", name);
        KT_CHECK(!backward_op || (!op->kernel_backward && !op->spec_backward &&
                                  op->grad_input < kf_op_arity(op->grad_of, &op->cases[0].params)),
                 "%s: a backward operator's record", name);
        KT_CHECK(op->tolerance_f16 >= op->tolerance_f32, "%s: f16 tolerance below f32's", name);
        if (op->op_class == KF_OP_CLASS_ELEMENTWISE) {
            KT_CHECK(op->expr && (op->expr_backward || backward_op), "element-wise %s has no expr",
                     name);
        }
        /* 2^22 elements in an input or in the output */
        bool large = false;
        for (uint32_t c = 0; c < op->case_count; c++) {
            const kf_op_case *oc = &op->cases[c];
            kf_shape os;
            KT_CHECK_OK(kf_op_shape(op, oc->shapes, &oc->params, &os, NULL, 0));
            large = large || kf_shape_elements(&os) >= (1u << 22);
            for (uint32_t j = 0; j < kf_op_arity(op, &oc->params); j++) {
                large = large || kf_shape_elements(&oc->shapes[j]) >= (1u << 22);
            }
        }
        KT_CHECK(large, "%s has no case of 2^22 elements or more", name);
    }
    KT_CHECK(kf_op_find("nope") == NULL && kf_op_at(n) == NULL, "past the end");
    KT_CHECK(kf_op_arity(kf_op_find("add"), NULL) == 2, "add is binary");
}

/* docs/architecture.md's worked example of a new operator, leaky_relu (src/ops/elementwise.c
 * and its line in op_list.h), doing what the page says its record gives it without another
 * edit: its parameter in the language, the setter and the printer, its float64 spec, its IR run
 * by the interpreter, its gradient against differences, and its backward operator. */
KT_CPU_TEST(ops, registry_worked_example_leaky_relu) {
    const kf_operator *op = kf_op_find("leaky_relu");
    KT_CHECK(op == &kf__op_leaky_relu && op->expr && op->expr_backward, "found by its line");
    kf_op_param_info info;
    KT_CHECK(kf_op_param_count(op) == 1 && kf_op_param_info_at(op, 0, &info) == KF_OK &&
                 !strcmp(info.name, "alpha") && info.type == KF_PARAM_TYPE_FLOAT &&
                 info.default_value == 0.01,
             "one float parameter, alpha, default 0.01");
    kf_op_params p = {0};
    KT_CHECK_OK(kf_op_param_set(op, &p, "alpha", 0.25, NULL, 0));

    /* the spec and the interpreted kernel on 7 elements either side of 0 */
    enum { N = 7 };
    kf_shape shape = kf_shape_1d(N);
    kf_tensor *x = NULL, *y = NULL;
    KT_CHECK_OK(kf_tensor_create(&shape, &x));
    KT_CHECK_OK(kf_tensor_create(&shape, &y));
    for (uint32_t i = 0; i < N; i++) {
        x->data[i] = kt_rand_f32(0.5f, 4.0f) * (i % 2 ? -1.0f : 1.0f);
    }
    KT_CHECK_OK(kf_op_spec_forward(op, (const kf_tensor *const *)&x, &p, y));
    float got[N];
    for (uint32_t i = 0; i < N; i++) {
        got[i] = NAN; /* poisoned */
    }
    kf_kernel *k = op->kernel_forward(&shape, &p, KF_DTYPE_F32);
    kf_host_buffer bufs[2] = {{x->data, sizeof(float) * N}, {got, sizeof got}};
    kf_interp_desc d = {.buffers = bufs, .buffer_count = 2};
    KT_CHECK(k && kf_kernel_interpret(k, &d) == KF_OK, "interpreted: %s",
             k ? kf_kernel_error(k) : "no kernel");
    kf_kernel_destroy(k);
    for (uint32_t i = 0; i < N; i++) {
        float want = x->data[i] < 0 ? 0.25f * x->data[i] : x->data[i];
        KT_CHECK(fabsf(y->data[i] - want) <= 1e-6f * fabsf(want), "spec at %u: %g, want %g", i,
                 (double)y->data[i], (double)want);
        KT_CHECK(fabsf(got[i] - want) <= 1e-6f * fabsf(want), "kernel at %u: %g, want %g", i,
                 (double)got[i], (double)want);
    }
    kf_tensor_destroy(x);
    kf_tensor_destroy(y);

    /* the language takes the parameter by position or name, and the printer shows it */
    const char *text = "x: f32[3, 5]\ny = leaky_relu(x, alpha=0.25)\nz = leaky_relu(y, 0.5)\n"
                       "out z";
    kf_graph *g = NULL;
    kf_spec_error err;
    KT_CHECK(kf_spec_parse(text, strlen(text), &g, &err) == KF_OK, "parses: %s", err.message);
    char *printed = kf_graph_format(g);
    KT_CHECK(printed && strstr(printed, "alpha=0.25") && strstr(printed, "alpha=0.5"),
             "printed with its parameter:\n%s", printed ? printed : "");
    kf_free(printed);
    kf_graph_destroy(g);

    /* spec_backward against differences, and leaky_relu_grad as its backward operator */
    kf_verify_case vc = {.op = op, .params = op->cases[0].params, .seed = kt_rand_u64()};
    memcpy(vc.shapes, op->cases[0].shapes, sizeof vc.shapes);
    kf_verify_result r;
    KT_CHECK(kf_op_check_gradient(&vc, &r) == KF_OK, "gradient: %s", r.message);
    uint32_t input = 9;
    const kf_operator *grad = kf_op_find("leaky_relu_grad");
    KT_CHECK(grad && kf_op_grad_of(grad, &input) == op && input == 0, "leaky_relu_grad");
}

KT_TEST(ops, gpu_tensor_round_trip) {
    KT_NEED_GPU(ctx);
    kf_shape s = kf_shape_2d(7, 13);
    kf_tensor *t = NULL, *back = NULL;
    KT_CHECK_OK(kf_tensor_create(&s, &t));
    KT_CHECK_OK(kf_tensor_create(&s, &back));
    kf_tensor_fill_random(t, kt_rand_u64(), -100.0f, 100.0f);
    t->data[0] = NAN;
    t->data[1] = INFINITY;
    t->data[2] = 1e-7f;    /* an f16 subnormal */
    t->data[3] = 70000.0f; /* past f16's range: infinity */
    kf_gpu_tensor *g = NULL;
    KT_CHECK_OK(kf_gpu_tensor_from(ctx, t, KF_DTYPE_F32, &g));
    KT_CHECK_OK(kf_gpu_tensor_to(g, back));
    KT_CHECK(memcmp(t->data, back->data, 91 * sizeof(float)) == 0, "f32 round trip changed bits");
    kf_gpu_tensor_destroy(g);

    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    if (info.has_f16) {
        KT_CHECK_OK(kf_gpu_tensor_from(ctx, t, KF_DTYPE_F16, &g));
        KT_CHECK_OK(kf_gpu_tensor_to(g, back));
        for (int i = 0; i < 91; i++) {
            float want = kf__half_to_float(kf__half_from_float(t->data[i]));
            KT_CHECK((isnan(want) && isnan(back->data[i])) || want == back->data[i],
                     "f16 element %d: %g became %g, expected %g", i, (double)t->data[i],
                     (double)back->data[i], (double)want);
        }
        KT_CHECK(isinf(back->data[3]), "70000 must round to f16 infinity");
        kf_gpu_tensor_destroy(g);
    }

    /* i32 holds class indices; a fraction is refused */
    for (int i = 0; i < 91; i++) {
        t->data[i] = (float)(i % 13);
    }
    KT_CHECK_OK(kf_gpu_tensor_from(ctx, t, KF_DTYPE_I32, &g));
    KT_CHECK_OK(kf_gpu_tensor_to(g, back));
    KT_CHECK(back->data[90] == 12.0f, "i32 round trip");
    kf_gpu_tensor_destroy(g);
    t->data[5] = 0.5f;
    KT_CHECK(kf_gpu_tensor_from(ctx, t, KF_DTYPE_I32, &g) == KF_ERROR_INVALID_ARGUMENT,
             "0.5 is not an index");

    /* shapes must agree, and the context's message says how they differ */
    kf_shape other = kf_shape_2d(13, 7);
    kf_tensor *wrong = NULL;
    KT_CHECK_OK(kf_tensor_create(&other, &wrong));
    KT_CHECK_OK(kf_gpu_tensor_create(ctx, &s, KF_DTYPE_F32, &g));
    KT_CHECK(kf_gpu_tensor_to(g, wrong) == KF_ERROR_SHAPE, "7x13 into 13x7 must fail");
    const char *msg = kf_context_last_error(ctx);
    KT_CHECK(strstr(msg, "7x13") && strstr(msg, "13x7"), "message: '%s'", msg);
    kf_gpu_tensor_destroy(g);
    kf_tensor_destroy(wrong);
    kf_tensor_destroy(t);
    kf_tensor_destroy(back);
}
