/* Operator parameters as the operators describe them: the language and kf_graph_call validate
 * them, a given parameter is used (zero included), and kf_graph_format prints back what parses
 * to the same graph. No GPU needed. */
#include "fuse/fuse_internal.h"
#include "fusion/graph_equal.h"
#include "harness.h"
#include "ops/operator.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static kf_status parse(const char *src, kf_graph **g, kf_spec_error *err) {
    return kf_spec_parse(src, strlen(src), g, err);
}

/* Each wrong parameter is refused with its status, at its call, by a message that names the
 * op, the parameter and what is valid (needles, not sentences). */
KT_CPU_TEST(unit, params_wrong_ones_are_errors_naming_op_and_parameter) {
    static const struct {
        const char *src;
        kf_status status;
        const char *needles[3];
    } cases[] = {
        {"x: f32[4]\ny = relu(x, eps=1)\n",
         KF_ERROR_INVALID_ARGUMENT,
         {"relu", "'eps'", "no parameters"}},
        {"x: f32[4]\ny = gelu(x, alpha=3)\n",
         KF_ERROR_INVALID_ARGUMENT,
         {"gelu", "'alpha'", "exact"}},
        {"x: f32[2, 4]\ny = rmsnorm(x, eps=-1)\n",
         KF_ERROR_INVALID_ARGUMENT,
         {"rmsnorm", "eps = -1", "eps > 0"}},
        {"x: f32[2, 4]\ny = layernorm(x, 0)\n",
         KF_ERROR_INVALID_ARGUMENT,
         {"layernorm", "eps = 0", "eps > 0"}},
        {"a: f32[2, 2]\ny = matmul(a, a, transpose_b=0.5)\n",
         KF_ERROR_INVALID_ARGUMENT,
         {"matmul", "transpose_b = 0.5", "0 or 1"}},
        {"a: f32[2, 2]\ny = matmul(a, a, 1, 2)\n",
         KF_ERROR_INVALID_ARGUMENT,
         {"matmul", "transpose_b = 2", "0 or 1"}},
        {"x: f32[4]\ny = gelu(x, exact=2)\n",
         KF_ERROR_INVALID_ARGUMENT,
         {"gelu", "exact = 2", "0 or 1"}},
        {"x: f32[4]\ny = leaky_relu(x, 0.1, 0.2)\n",
         KF_ERROR_INVALID_ARGUMENT,
         {"leaky_relu", "unexpected number argument 0.2", "takes alpha"}},
        {"x: f32[4]\ny = leaky_relu(x, 0.1, alpha=0.2)\n",
         KF_ERROR_INVALID_ARGUMENT,
         {"leaky_relu", "'alpha'", "twice"}},
        {"x: f32[4]\ny = relu(x, 1)\n",
         KF_ERROR_INVALID_ARGUMENT,
         {"relu", "unexpected number argument 1", "no parameters"}},
        {"x: f32[2, 4]\nb: f32[4]\ny = layernorm(x, eps=b)\n",
         KF_ERROR_INVALID_ARGUMENT,
         {"layernorm", "'eps'", "a number, not a tensor"}},
        {"x: f32[2, 4]\ny = layernorm(x, bias=1)\n",
         KF_ERROR_INVALID_ARGUMENT,
         {"layernorm", "'bias'", "tensor input"}},
        {"x: f32[2, 4]\nb: f32[4]\ny = layernorm(x, bais=b)\n",
         KF_ERROR_INVALID_ARGUMENT,
         {"layernorm", "'bais'", "x, weight, bias"}},
        {"x: f32[2, 4]\nb: f32[4]\ny = rmsnorm(x, b, weight=b)\n",
         KF_ERROR_INVALID_ARGUMENT,
         {"rmsnorm", "weight", "twice"}},
        {"x: f32[2, 4]\nb: f32[4]\ny = rmsnorm(x, b, b, b)\n",
         KF_ERROR_INVALID_ARGUMENT,
         {"rmsnorm", "at most 3", "x, weight, bias"}},
        {"x: f32[4]\ny = add(x)\n", KF_ERROR_INVALID_ARGUMENT, {"add", "input b", "missing"}},
        {"x: f32[2, 4]\nl: f32[2]\ny = cross_entropy(x, l)\n",
         KF_ERROR_TYPE,
         {"cross_entropy", "labels", "i32"}},
        {"x: i32[4]\ny = relu(x)\n", KF_ERROR_TYPE, {"relu", "input a", "not i32"}},
        /* list parameters, views, embedding */
        {"x: f32[2, 4]\ny = reshape(x)\n", KF_ERROR_SHAPE, {"reshape", "shape=[...]", "required"}},
        {"x: f32[2, 4]\ny = reshape(x, shape=[3, -1])\n",
         KF_ERROR_SHAPE,
         {"reshape", "2x4", "shape=[3, -1]"}},
        {"x: f32[2, 4]\ny = reshape(x, shape=[-1, -1])\n",
         KF_ERROR_SHAPE,
         {"reshape", "at most one -1", "[-1, -1]"}},
        {"x: f32[2, 4]\ny = permute(x, axes=[0, 0])\n",
         KF_ERROR_SHAPE,
         {"permute", "[0, 0]", "permutation"}},
        {"x: f32[2, 4]\ny = permute(x, axes=[0, 5])\n",
         KF_ERROR_INVALID_ARGUMENT,
         {"permute", "axes[1] = 5", "out of range"}},
        {"x: f32[2, 4]\ny = reshape(x, shape=3)\n",
         KF_ERROR_INVALID_ARGUMENT,
         {"reshape", "shape", "is a list"}},
        {"x: f32[2, 4]\ny = scale(x, alpha=[1])\n",
         KF_ERROR_INVALID_ARGUMENT,
         {"scale", "alpha", "not a list"}},
        {"x: f32[2, 4]\ny = reshape(x, shape=[1, 2, 2, 2, 1])\n",
         KF_ERROR_PARSE,
         {"list", "at most 4", "entries"}},
        {"x: f32[2, 4]\ny = reshape(x, shape=[2.5])\n",
         KF_ERROR_PARSE,
         {"list entry", "2.5", "whole number"}},
        {"x: f32[2, 4]\ny = reshape([8], x)\n",
         KF_ERROR_PARSE,
         {"list argument", "reshape", "after its tensor"}},
        {"x: f32[2, 4]\ny = slice(x, axis=1, start=2, length=3)\n",
         KF_ERROR_SHAPE,
         {"slice", "start 2 + length 3", "2x4"}},
        {"x: f32[2, 4]\ny = slice(x, axis=2, length=1)\n",
         KF_ERROR_SHAPE,
         {"slice", "axis 2", "2x4"}},
        {"x: f32[2, 4]\ny = slice(x, axis=1, start=4)\n",
         KF_ERROR_SHAPE,
         {"slice", "start 4 + length 0", "runs past"}},
        {"x: f32[2, 4]\nz: f32[3, 4]\ny = concat(x, z, axis=1)\n",
         KF_ERROR_SHAPE,
         {"concat", "2x4", "3x4"}},
        {"t: f32[5, 3]\nl: f32[2]\ny = embedding(t, l)\n",
         KF_ERROR_TYPE,
         {"embedding", "ids", "i32"}},
        {"t: f32[5]\nl: i32[2]\ny = embedding(t, l)\n",
         KF_ERROR_SHAPE,
         {"embedding", "[V, C]", "5"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kf_graph *g = NULL;
        kf_spec_error err;
        kf_status st = parse(cases[i].src, &g, &err);
        KT_CHECK(st == cases[i].status && g == NULL, "case %zu: %s, want %s:\n%s", i,
                 kf_status_str(st), kf_status_str(cases[i].status), cases[i].src);
        KT_CHECK(err.line == 2 || err.line == 3, "case %zu placed at line %u", i, err.line);
        for (int n = 0; n < 3; n++) {
            KT_CHECK(strstr(err.message, cases[i].needles[n]), "case %zu: '%s' not in: %s", i,
                     cases[i].needles[n], err.message);
        }
    }
}

/* The C API checks what the language checks: kf_graph_call and kf_graph_op. */
KT_CPU_TEST(unit, params_c_api_validates) {
    kf_shape s = kf_shape_2d(3, 5);
    kf_graph *g = kf_graph_create();
    kf_node x = kf_graph_input(g, "x", &s, KF_DTYPE_F32);
    kf_graph_arg nan_alpha = {.name = "alpha", .number = NAN};
    KT_CHECK(kf_graph_call(g, "scale", &x, 1, &nan_alpha, 1).id == 0, "NaN alpha accepted");
    KT_CHECK(kf_graph_status(g) == KF_ERROR_INVALID_ARGUMENT &&
                 strstr(kf_graph_error(g), "scale") && strstr(kf_graph_error(g), "alpha"),
             "%s", kf_graph_error(g));
    kf_graph_destroy(g);

    g = kf_graph_create();
    x = kf_graph_input(g, "x", &s, KF_DTYPE_F32);
    kf_op_params bad_eps = {.eps = -1.0f};
    KT_CHECK(kf_graph_op(g, "rmsnorm", &x, 1, &bad_eps).id == 0, "eps -1 accepted");
    KT_CHECK(kf_graph_status(g) == KF_ERROR_INVALID_ARGUMENT &&
                 strstr(kf_graph_error(g), "rmsnorm") && strstr(kf_graph_error(g), "eps"),
             "%s", kf_graph_error(g));
    kf_graph_destroy(g);

    g = kf_graph_create();
    x = kf_graph_input(g, "x", &s, KF_DTYPE_F32);
    kf_op_params stray = {.given = KF_PARAM_EPS, .eps = 0.5f};
    KT_CHECK(kf_graph_op(g, "relu", &x, 1, &stray).id == 0, "eps given to relu accepted");
    KT_CHECK(kf_graph_status(g) == KF_ERROR_INVALID_ARGUMENT && strstr(kf_graph_error(g), "relu"),
             "%s", kf_graph_error(g));
    kf_graph_destroy(g);

    /* The count is right, the array is missing: say that, not "takes 2, got 2". */
    g = kf_graph_create();
    KT_CHECK(kf_graph_op(g, "add", NULL, 2, NULL).id == 0, "NULL inputs accepted");
    KT_CHECK(strstr(kf_graph_error(g), "add") && strstr(kf_graph_error(g), "NULL"), "%s",
             kf_graph_error(g));
    kf_graph_destroy(g);

    /* Reserved words cannot name tensors: kf_graph_format could not write them. */
    g = kf_graph_create();
    KT_CHECK(kf_graph_input(g, "out", &s, KF_DTYPE_F32).id == 0 &&
                 kf_graph_status(g) == KF_ERROR_INVALID_ARGUMENT &&
                 strstr(kf_graph_error(g), "'out'"),
             "%s", kf_graph_error(g));
    kf_graph_destroy(g);
    g = kf_graph_create();
    x = kf_graph_input(g, "x", &s, KF_DTYPE_F32);
    kf_node y = kf_graph_input(g, "y", &s, KF_DTYPE_F32);
    KT_CHECK(kf_graph_output(g, "y", kf_graph_unary(g, "relu", x)) == KF_ERROR_INVALID_ARGUMENT &&
                 strstr(kf_graph_error(g), "input y"),
             "an output named like another input: %s", kf_graph_error(g));
    (void)y;
    kf_graph_destroy(g);
}

/* kf_op_param_set and the descriptions: every op's parameters, their defaults valid, a value out
 * of range refused without touching the params. */
KT_CPU_TEST(unit, params_descriptions_and_setter) {
    uint32_t described = 0;
    for (uint32_t o = 0; o < kf_op_count(); o++) {
        const kf_operator *op = kf_op_at(o);
        for (uint32_t i = 0; i < kf_op_param_count(op); i++) {
            kf_op_param_info info;
            KT_CHECK_OK(kf_op_param_info_at(op, i, &info));
            described++;
            KT_CHECK(info.name && info.about && info.given && info.type >= KF_PARAM_TYPE_FLOAT,
                     "%s param %u", kf_op_name(op), i);
            kf_op_params p = {0};
            char msg[256];
            KT_CHECK(kf_op_param_value(op, &p, i) == info.default_value, "%s.%s default",
                     kf_op_name(op), info.name);
            if (info.type == KF_PARAM_TYPE_INT_LIST) {
                /* a list: set through kf_op_param_set_list, each entry in range */
                int32_t ok_list[2] = {(int32_t)info.min, (int32_t)info.max};
                KT_CHECK_OK(kf_op_param_set_list(op, &p, info.name, ok_list, 2, msg, sizeof msg));
                KT_CHECK(p.given == info.given && p.list_count == 2, "%s.%s marked given",
                         kf_op_name(op), info.name);
                KT_CHECK_OK(kf_op_params_check(op, &p, msg, sizeof msg));
                kf_op_params before = p;
                int32_t bad_list[2] = {0, (int32_t)info.min - 1};
                KT_CHECK(kf_op_param_set_list(op, &p, info.name, bad_list, 2, msg, sizeof msg) ==
                                 KF_ERROR_INVALID_ARGUMENT &&
                             strstr(msg, kf_op_name(op)) && strstr(msg, "[1]"),
                         "%s.%s[1] = %d: %s", kf_op_name(op), info.name, (int)bad_list[1], msg);
                int32_t five[KF_MAX_DIMS + 1] = {0};
                KT_CHECK(kf_op_param_set_list(op, &p, info.name, five, KF_MAX_DIMS + 1, msg,
                                              sizeof msg) == KF_ERROR_INVALID_ARGUMENT,
                         "%s.%s: more than %d entries", kf_op_name(op), info.name, KF_MAX_DIMS);
                KT_CHECK(kf_op_param_set(op, &p, info.name, 1.0, msg, sizeof msg) ==
                                 KF_ERROR_INVALID_ARGUMENT &&
                             strstr(msg, "list"),
                         "%s.%s: a number for a list: %s", kf_op_name(op), info.name, msg);
                KT_CHECK(!memcmp(&p, &before, sizeof p), "a refused list changed params");
                continue;
            }
            KT_CHECK_OK(kf_op_param_set(op, &p, info.name, info.default_value, msg, sizeof msg));
            KT_CHECK(p.given == info.given, "%s.%s marked given", kf_op_name(op), info.name);
            KT_CHECK_OK(kf_op_params_check(op, &p, msg, sizeof msg));
            kf_op_params before = p;
            double bad = info.type == KF_PARAM_TYPE_BOOL ? 0.5 : info.min - 1.0;
            if (info.min > -1e38) {
                KT_CHECK(kf_op_param_set(op, &p, info.name, bad, msg, sizeof msg) ==
                                 KF_ERROR_INVALID_ARGUMENT &&
                             strstr(msg, kf_op_name(op)) && strstr(msg, info.name),
                         "%s.%s = %g: %s", kf_op_name(op), info.name, bad, msg);
                KT_CHECK(!memcmp(&p, &before, sizeof p), "a refused value changed params");
            }
            KT_CHECK(kf_op_param_set(op, &p, info.name, NAN, msg, sizeof msg) ==
                         KF_ERROR_INVALID_ARGUMENT,
                     "%s.%s = NaN accepted", kf_op_name(op), info.name);
        }
        KT_CHECK(kf_op_param_info_at(op, kf_op_param_count(op), &(kf_op_param_info){0}) ==
                     KF_ERROR_INVALID_ARGUMENT,
                 "past the count");
    }
    KT_CHECK(described >= 7, "%u parameters described", described);
    const kf_operator *relu = kf_op_find("relu");
    kf_op_params p = {0};
    char msg[256];
    KT_CHECK(kf_op_param_set(relu, &p, "eps", 1.0, msg, sizeof msg) == KF_ERROR_INVALID_ARGUMENT &&
                 strstr(msg, "relu") && strstr(msg, "eps"),
             "%s", msg);
}

/* A given zero is used: scale(x, 0) computes zeros and prints back as given. */
KT_CPU_TEST(unit, params_given_zero_is_used) {
    kf_graph *g = NULL;
    kf_spec_error err;
    KT_CHECK_OK(
        parse("x: f32[3, 7]\ny = scale(x, 0)\nz = affine(x, alpha=0, beta=0.5)\n", &g, &err));
    const kf__node *y = kf__graph_node(g, g->outputs[0].node);
    const kf__node *z = kf__graph_node(g, g->outputs[1].node);
    KT_CHECK(kf_op_param_value(y->op, &y->params, 0) == 0.0, "scale's alpha");
    KT_CHECK(kf_op_param_value(z->op, &z->params, 0) == 0.0, "affine's alpha");
    kf_shape s = kf_shape_2d(3, 7);
    kf_tensor *x = NULL, *out = NULL;
    KT_CHECK_OK(kf_tensor_create(&s, &x));
    KT_CHECK_OK(kf_tensor_create(&s, &out));
    for (uint32_t i = 0; i < 21; i++) {
        x->data[i] = kt_rand_f32(0.5f, 2.0f);
    }
    const kf_tensor *in[1] = {x};
    KT_CHECK_OK(kf_op_spec_forward(y->op, in, &y->params, out));
    for (uint32_t i = 0; i < 21; i++) {
        KT_CHECK(out->data[i] == 0.0f, "scale(x, 0)[%u] = %g", i, (double)out->data[i]);
    }
    KT_CHECK_OK(kf_op_spec_forward(z->op, in, &z->params, out));
    for (uint32_t i = 0; i < 21; i++) {
        KT_CHECK(out->data[i] == 0.5f, "affine(x, 0, 0.5)[%u] = %g", i, (double)out->data[i]);
    }
    /* and the kernel expression reads the same description (the planner inlines it) */
    kf_kernel *k = kf_op_kernel_forward(y->op, &s, &y->params, KF_DTYPE_F32);
    char *wgsl = kf_kernel_emit_wgsl(k);
    KT_CHECK(wgsl && strstr(wgsl, "= 0.0f * "), "scale by 0:\n%s", wgsl ? wgsl : "(null)");
    kf_free(wgsl);
    kf_kernel_destroy(k);
    char *text = kf_graph_format(g);
    KT_CHECK(text && strstr(text, "scale(x, alpha=0)") && strstr(text, "alpha=0, beta=0.5"),
             "format:\n%s", text ? text : "(null)");
    kf_free(text);
    kf_tensor_destroy(x);
    kf_tensor_destroy(out);
    kf_graph_destroy(g);
}

/* format -> parse -> the same graph, and format again gives the same text. */
static bool round_trip(const kf_graph *g, char *why, size_t why_size) {
    char *text = kf_graph_format(g);
    if (!text) {
        snprintf(why, why_size, "kf_graph_format returned NULL");
        return false;
    }
    kf_graph *back = NULL;
    kf_spec_error err;
    kf_status st = kf_spec_parse(text, strlen(text), &back, &err);
    bool same = st == KF_OK;
    if (!same) {
        snprintf(why, why_size, "%u:%u: %s in:\n%s", err.line, err.column, err.message, text);
    } else if (!kt_graph_equal(g, back, why, why_size)) {
        same = false;
        size_t n = strlen(why);
        snprintf(why + n, why_size - n, " in:\n%s", text);
    } else {
        char *again = kf_graph_format(back);
        same = again && !strcmp(again, text);
        if (!same) {
            snprintf(why, why_size, "formats differ:\n%s\n---\n%s", text, again ? again : "");
        }
        kf_free(again);
    }
    kf_graph_destroy(back);
    kf_free(text);
    return same;
}

KT_CPU_TEST(unit, params_format_parses_back_to_the_same_graph) {
    static const char *programs[] = {
        /* a bias-only norm must not come back as a weight; rmsnorm takes a bias too */
        "x: f32[3, 8]\nb: f32[8]\ny = layernorm(x, bias=b)\n",
        "x: f32[3, 8]\nw: f32[8]\nb: f32[8]\ny = rmsnorm(x, w, b, eps=0.001)\n",
        "x: f32[3, 8]\nb: f32[8]\ny = x |> rmsnorm(bias=b, eps=1e-6)\n",
        "x: f32[3, 8]\nw: f32[8]\ny = layernorm(x, w)\n",
        /* i32 labels */
        "x: f32[8, 5]\nlabels: i32[8]\nloss = cross_entropy(x, labels)\n",
        /* parameters at their defaults, given; zero, given */
        "x: f32[4]\ny = leaky_relu(x, 0.01) |> scale(0) |> gelu(exact=false)\n",
        "a: f32[4, 3]\nb: f32[5, 3]\nc = matmul(a, b, transpose_b=true)\n",
        "a: f32[3, 4]\nb: f32[5, 3]\nc = matmul(a, b, true, true)\n",
        /* scalars, negative and tiny, on either side */
        "x: f16[2, 3]\ny = sub(-0.25, x) |> add(1.5e-7) |> maximum(0)\n",
        /* outputs: an input, an alias of an input, one tensor under two names */
        "x: f32[4]\ny = relu(x)\nz = y\nw = x\nout y, x, z, w\n",
        /* intermediate names that clash with inputs */
        "t1: f32[4]\nt2: f32[4]\nh = add(t1, t2) |> exp |> neg\nk = h |> abs\nout k, h\n",
        /* shared intermediates, read twice */
        "x: f32[4, 4]\nh = relu(x)\ny = add(h, h) |> mul(h)\n",
        /* list parameters (a positional list, an empty one), ints, index inputs */
        "x: f32[2, 3, 4]\ny = reshape(x, shape=[4, -1, 2]) |> permute([2, 0, 1])\n",
        "x: f32[1, 1]\ny = reshape(x, shape=[])\n",
        "x: f32[2, 9]\nq = slice(x, axis=-1, start=3, length=3)\nk = slice(x, start=1)\n"
        "y = concat(q, x, axis=1)\nout y, k\n",
        "t: f32[7, 5]\nids: i32[2, 3]\ny = embedding(t, ids)\n",
    };
    char why[2048];
    for (size_t i = 0; i < sizeof programs / sizeof programs[0]; i++) {
        kf_graph *g = NULL;
        kf_spec_error err;
        kf_status st = parse(programs[i], &g, &err);
        KT_CHECK(st == KF_OK, "program %zu: %u:%u: %s", i, err.line, err.column, err.message);
        KT_CHECK(round_trip(g, why, sizeof why), "program %zu: %s", i, why);
        kf_graph_destroy(g);
    }
    /* graphs only the C API makes: parameters set without `given`, a bias-only norm */
    kf_shape s = kf_shape_2d(3, 8), row = kf_shape_1d(8);
    kf_graph *g = kf_graph_create();
    kf_node x = kf_graph_input(g, "x", &s, KF_DTYPE_F32);
    kf_node b = kf_graph_input(g, "b", &row, KF_DTYPE_F32);
    kf_op_params bias_only = {.has_bias = true, .eps = 0.25f};
    kf_node in[2] = {x, b};
    kf_node n = kf_graph_op(g, "layernorm", in, 2, &bias_only);
    kf_op_params slope = {.alpha = 0.5f};
    n = kf_graph_op(g, "leaky_relu", &n, 1, &slope);
    KT_CHECK_OK(kf_graph_output(g, "y", n));
    KT_CHECK_OK(kf_graph_output(g, "again", n));
    KT_CHECK(round_trip(g, why, sizeof why), "C graph: %s", why);
    char *text = kf_graph_format(g);
    KT_CHECK(strstr(text, "layernorm(x, bias=b, eps=0.25)") && strstr(text, "alpha=0.5"), "%s",
             text);
    kf_free(text);
    kf_graph_destroy(g);
}

/* Breaking the round trip must be caught: a graph differing in one parameter is not equal. */
KT_CPU_TEST(unit, params_graph_equal_sees_differences) {
    static const char *pairs[][2] = {
        {"x: f32[2, 8]\nb: f32[8]\ny = layernorm(x, b)\n",
         "x: f32[2, 8]\nb: f32[8]\ny = layernorm(x, bias=b)\n"},
        {"x: f32[4]\ny = scale(x, 0)\n", "x: f32[4]\ny = scale(x)\n"},
        {"x: f32[4]\ny = gelu(x)\n", "x: f32[4]\ny = gelu(x, exact=true)\n"},
        {"x: f32[4]\ny = add(x, 1)\n", "x: f32[4]\ny = add(1, x)\n"},
        {"x: f32[4]\nh = relu(x)\ny = add(h, h)\n", "x: f32[4]\ny = add(relu(x), relu(x))\n"},
    };
    char why[512];
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        kf_graph *a = NULL, *b = NULL;
        kf_spec_error err;
        KT_CHECK_OK(parse(pairs[i][0], &a, &err));
        KT_CHECK_OK(parse(pairs[i][1], &b, &err));
        KT_CHECK(!kt_graph_equal(a, b, why, sizeof why), "pair %zu compared equal", i);
        KT_CHECK(kt_graph_equal(a, a, why, sizeof why), "pair %zu: %s", i, why);
        kf_graph_destroy(a);
        kf_graph_destroy(b);
    }
}

/* The int type, which no registered operator uses yet: a test operator with one int parameter in
 * [1, 8] (held in the alpha slot, which only this test reads) set, read back and refused. */
static const kf__param int_params[] = {
    {.name = "ways",
     .about = "a count",
     .type = KF_PARAM_TYPE_INT,
     .offset = offsetof(kf_op_params, alpha),
     .given = KF_PARAM_ALPHA,
     .default_value = 2,
     .min = 1,
     .max = 8},
};
static const kf_operator int_op = {.name = "counted", .arity = 1, KF__PARAMS(int_params)};

KT_CPU_TEST(unit, params_int_type) {
    kf_op_params p = {0};
    char msg[256];
    KT_CHECK(kf_op_param_value(&int_op, &p, 0) == 2.0, "default");
    KT_CHECK_OK(kf_op_param_set(&int_op, &p, "ways", 5, msg, sizeof msg));
    KT_CHECK(kf_op_param_value(&int_op, &p, 0) == 5.0 && (p.given & KF_PARAM_ALPHA), "set 5");
    KT_CHECK_OK(kf_op_params_check(&int_op, &p, msg, sizeof msg));
    static const double bad[] = {2.5, 0, 9, -1};
    static const char *why[] = {"not a whole number", "out of range", "out of range",
                                "out of range"};
    for (int i = 0; i < 4; i++) {
        kf_status st = kf_op_param_set(&int_op, &p, "ways", bad[i], msg, sizeof msg);
        KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT && strstr(msg, "counted") && strstr(msg, "ways") &&
                     strstr(msg, why[i]) && strstr(msg, "8"),
                 "ways = %g: %s", bad[i], msg);
        KT_CHECK(kf_op_param_value(&int_op, &p, 0) == 5.0, "a refused value was stored");
    }
}
