/* Element-wise and layout operators: specs by hand, gradients against finite differences, every
 * op's GPU kernels against its spec over its table (f32 and f16), NaN and infinity, and proof
 * that verification fails when a kernel or a spec is broken. */
#include "core/half.h"
#include "harness.h"
#include "ops/ops_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* Views and embedding (layout ops with parameters or index inputs) have their own tests
 * (tests/ops/test_ops_view.c). */
static bool is_mine(const kf_operator *op) {
    return op->op_class == KF_OP_CLASS_ELEMENTWISE ||
           (op->op_class == KF_OP_CLASS_LAYOUT && !op->view_index && !op->index_inputs);
}

/* The 2^22-element cases run for one op of each kind; the rest of the table runs for every op
 * (lavapipe on two cores is slow, and the large case exercises the grid, not the formula). */
static bool run_case(const kf_operator *op, const kf_op_case *c) {
    if (!c->note || !strstr(c->note, "large")) {
        return true;
    }
    return !strcmp(op->name, "gelu") || !strcmp(op->name, "add") || !strcmp(op->name, "transpose");
}

/* Runs spec_forward of op on the given input values (shapes from the case). */
static kf_status spec_on(const kf_operator *op, const kf_op_params *p, const kf_shape *shapes,
                         const float *const *values, kf_tensor **out) {
    uint32_t arity = kf_op_arity(op, p);
    kf_tensor *in[4] = {0};
    kf_shape os;
    kf_status st = op->shape(shapes, p, &os, NULL, 0);
    for (uint32_t i = 0; i < arity && st == KF_OK; i++) {
        st = kf_tensor_create(&shapes[i], &in[i]);
        if (st == KF_OK) {
            memcpy(in[i]->data, values[i], (size_t)kf_tensor_size(in[i]) * sizeof(float));
        }
    }
    if (st == KF_OK) {
        st = kf_tensor_create(&os, out);
    }
    if (st == KF_OK) {
        st = op->spec_forward((const kf_tensor *const *)in, p, *out);
    }
    for (uint32_t i = 0; i < arity; i++) {
        kf_tensor_destroy(in[i]);
    }
    return st;
}

static bool close_to(float got, double want) {
    return fabs((double)got - want) <= 1e-6 * fmax(1.0, fabs(want));
}

KT_CPU_TEST(ops, elementwise_specs_by_hand) {
    kf_op_params p = {0};
    kf_shape s5 = kf_shape_1d(5);
    const float x[5] = {-1.0f, 0.0f, 1.0f, NAN, 2.0f};
    const float *v[1] = {x};
    struct {
        const char *op;
        double want[5];
    } rows[] = {
        {"relu", {0, 0, 1, NAN, 2}},
        {"leaky_relu", {-0.01, 0, 1, NAN, 2}},
        {"sigmoid", {0.2689414213699951, 0.5, 0.7310585786300049, NAN, 0.8807970779778823}},
        {"gelu", {-0.15880800939172324, 0, 0.8411919906082768, NAN, 1.9545976940871754}},
        {"gelu_exact", {-0.15865525393145707, 0, 0.8413447460685429, NAN, 1.9544997361036416}},
        {"silu", {-0.2689414213699951, 0, 0.7310585786300049, NAN, 1.7615941559557646}},
        {"abs", {1, 0, 1, NAN, 2}},
        {"square", {1, 0, 1, NAN, 4}},
        {"neg", {1, -0.0, -1, NAN, -2}},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        const kf_operator *op = kf_op_find(rows[r].op);
        kf_tensor *out = NULL;
        KT_CHECK(op != NULL, "no %s", rows[r].op);
        KT_CHECK_OK(spec_on(op, &p, &s5, v, &out));
        for (int i = 0; i < 5; i++) {
            double w = rows[r].want[i];
            KT_CHECK(isnan(w) ? isnan(out->data[i]) : close_to(out->data[i], w),
                     "%s(%g) = %.9g, expected %.9g", rows[r].op, (double)x[i], (double)out->data[i],
                     w);
        }
        kf_tensor_destroy(out);
    }

    /* maximum: NaN wins from either side; otherwise the larger */
    const float a[4] = {NAN, 1.0f, 2.0f, -3.0f}, b[4] = {1.0f, NAN, 5.0f, -4.0f};
    const float *ab[2] = {a, b};
    kf_shape s4[2] = {kf_shape_1d(4), kf_shape_1d(4)};
    kf_tensor *m = NULL;
    KT_CHECK_OK(spec_on(kf_op_find("maximum"), &p, s4, ab, &m));
    KT_CHECK(isnan(m->data[0]) && isnan(m->data[1]) && m->data[2] == 5.0f && m->data[3] == -3.0f,
             "maximum: %g %g %g %g", (double)m->data[0], (double)m->data[1], (double)m->data[2],
             (double)m->data[3]);
    kf_tensor_destroy(m);

    /* broadcasting: a bias row, a column, a scalar, scalar first */
    const float mat[6] = {1, 2, 3, 4, 5, 6}, row[3] = {10, 20, 30}, col[2] = {100, 200},
                one[1] = {0.5f};
    kf_shape ms = kf_shape_2d(2, 3);
    struct {
        kf_shape sa, sb;
        const float *va, *vb;
        const char *op;
        float want[6];
    } bc[] = {
        {ms, kf_shape_1d(3), mat, row, "add", {11, 22, 33, 14, 25, 36}},
        {ms, kf_shape_2d(2, 1), mat, col, "sub", {-99, -98, -97, -196, -195, -194}},
        {ms, kf_shape_1d(1), mat, one, "mul", {0.5f, 1, 1.5f, 2, 2.5f, 3}},
        {kf_shape_1d(1), ms, one, mat, "div", {0.5f, 0.25f, 0.5f / 3, 0.125f, 0.1f, 0.5f / 6}},
    };
    for (size_t r = 0; r < sizeof bc / sizeof bc[0]; r++) {
        kf_shape sh[2] = {bc[r].sa, bc[r].sb};
        const float *vv[2] = {bc[r].va, bc[r].vb};
        kf_tensor *out = NULL;
        KT_CHECK_OK(spec_on(kf_op_find(bc[r].op), &p, sh, vv, &out));
        KT_CHECK(kf_shape_eq(&out->shape, &ms), "%s: output shape", bc[r].op);
        for (int i = 0; i < 6; i++) {
            KT_CHECK(close_to(out->data[i], bc[r].want[i]), "%s case %zu element %d: %g vs %g",
                     bc[r].op, r, i, (double)out->data[i], (double)bc[r].want[i]);
        }
        kf_tensor_destroy(out);
    }

    /* backward of a bias is the column sums of grad_out; of a column, the row sums */
    const kf_operator *add = kf_op_find("add");
    kf_shape sh[2] = {ms, kf_shape_1d(3)};
    kf_tensor *in[2] = {0}, *out = NULL, *g = NULL, *gin[2] = {0};
    KT_CHECK_OK(kf_tensor_create(&sh[0], &in[0]));
    KT_CHECK_OK(kf_tensor_create(&sh[1], &in[1]));
    KT_CHECK_OK(kf_tensor_create(&ms, &out));
    KT_CHECK_OK(kf_tensor_create(&ms, &g));
    KT_CHECK_OK(kf_tensor_create(&sh[0], &gin[0]));
    KT_CHECK_OK(kf_tensor_create(&sh[1], &gin[1]));
    memcpy(g->data, mat, sizeof mat);
    KT_CHECK_OK(add->spec_backward((const kf_tensor *const *)in, out, g, &p, gin));
    KT_CHECK(gin[1]->data[0] == 5 && gin[1]->data[1] == 7 && gin[1]->data[2] == 9,
             "bias grad %g %g %g", (double)gin[1]->data[0], (double)gin[1]->data[1],
             (double)gin[1]->data[2]);
    KT_CHECK(memcmp(gin[0]->data, mat, sizeof mat) == 0, "full input's grad is grad_out");
    for (int i = 0; i < 2; i++) {
        kf_tensor_destroy(in[i]);
        kf_tensor_destroy(gin[i]);
    }
    kf_tensor_destroy(out);
    kf_tensor_destroy(g);

    /* transpose of a 2x3 */
    kf_tensor *t = NULL;
    const float *tv[1] = {mat};
    KT_CHECK_OK(spec_on(kf_op_find("transpose"), &p, &ms, tv, &t));
    const float tw[6] = {1, 4, 2, 5, 3, 6};
    KT_CHECK(t->shape.dims[0] == 3 && t->shape.dims[1] == 2 && !memcmp(t->data, tw, sizeof tw),
             "transpose 2x3");
    kf_tensor_destroy(t);
}

KT_CPU_TEST(ops, elementwise_gradients_match_finite_differences) {
    int checked = 0;
    for (uint32_t k = 0; k < kf_op_count(); k++) {
        const kf_operator *op = kf_op_at(k);
        if (!is_mine(op)) {
            continue;
        }
        for (uint32_t c = 0; c < op->case_count; c++) {
            if (!run_case(op, &op->cases[c])) {
                continue;
            }
            kf_verify_case vc = {0};
            vc.op = op;
            vc.params = op->cases[c].params;
            memcpy(vc.shapes, op->cases[c].shapes, sizeof vc.shapes);
            vc.seed = kt_rand_u64();
            kf_verify_result res;
            kf_status st = kf_op_check_gradient(&vc, &res);
            if (st != KF_OK) {
                kt_fail(__FILE__, __LINE__, "%s case %u (%s): %s: %s (max rel error %.3g)",
                        op->name, c, op->cases[c].note, kf_status_str(st), res.message,
                        res.max_rel_error);
            }
            checked++;
        }
    }
    KT_CHECK(checked > 120, "only %d gradient checks ran", checked);
}

/* spec_backward deliberately wrong: the gradient check must notice. */
static kf_status wrong_gelu_backward(const kf_tensor *const *in, const kf_tensor *out,
                                     const kf_tensor *grad_out, const kf_op_params *p,
                                     kf_tensor *const *grad_in) {
    /* silu's derivative instead of gelu's: close in shape, wrong in value */
    return kf_op_find("silu")->spec_backward(in, out, grad_out, p, grad_in);
}

KT_CPU_TEST(ops, gradient_check_catches_a_wrong_spec) {
    kf_operator broken = *kf_op_find("gelu");
    broken.spec_backward = wrong_gelu_backward;
    kf_verify_case vc = {0};
    vc.op = &broken;
    vc.shapes[0] = kf_shape_2d(7, 13);
    vc.seed = kt_rand_u64();
    kf_verify_result res;
    kf_status st = kf_op_check_gradient(&vc, &res);
    KT_CHECK(st == KF_ERROR_MISMATCH && !res.passed, "a wrong derivative passed: %s (%.3g)",
             kf_status_str(st), res.max_rel_error);
    KT_CHECK(strstr(res.message, "input 0") != NULL, "message: %s", res.message);

    /* a binary op: div with mul's backward */
    broken = *kf_op_find("div");
    broken.spec_backward = kf_op_find("mul")->spec_backward;
    vc.op = &broken;
    vc.shapes[1] = kf_shape_1d(13);
    st = kf_op_check_gradient(&vc, &res);
    KT_CHECK(st == KF_ERROR_MISMATCH, "div with mul's backward passed");
}

/* --- GPU --- */

static void verify_table(kf_dtype dtype) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    if (dtype == KF_DTYPE_F16 && !info.has_f16) {
        printf("    (no shader-f16 on this device: f16 skipped)\n");
        return;
    }
    int checked = 0;
    for (uint32_t k = 0; k < kf_op_count(); k++) {
        const kf_operator *op = kf_op_at(k);
        if (!is_mine(op)) {
            continue;
        }
        for (uint32_t c = 0; c < op->case_count; c++) {
            if (!run_case(op, &op->cases[c])) {
                continue;
            }
            /* backward operators (gelu_grad, ...) have no backward kernel of their own */
            for (int backward = 0; backward < (kf_op_has_backward(op) ? 2 : 1); backward++) {
                kf_verify_case vc = {0};
                vc.op = op;
                vc.params = op->cases[c].params;
                memcpy(vc.shapes, op->cases[c].shapes, sizeof vc.shapes);
                vc.dtype = dtype;
                vc.backward = backward;
                vc.seed = kt_rand_u64();
                kf_verify_result res;
                kf_status st = kf_op_verify(ctx, &vc, &res);
                if (st != KF_OK) {
                    kt_fail(__FILE__, __LINE__, "%s %s case %u (%s) %s: %s: %s (%.3g > %.3g)",
                            op->name, backward ? "backward" : "forward", c, op->cases[c].note,
                            kf_dtype_str(dtype), kf_status_str(st), res.message, res.max_rel_error,
                            res.tolerance);
                }
                checked++;
            }
        }
    }
    KT_CHECK(checked > 100, "only %d checks ran", checked);
}

KT_TEST(ops, elementwise_verify_f32) {
    verify_table(KF_DTYPE_F32);
}

KT_TEST(ops, elementwise_verify_f16) {
    verify_table(KF_DTYPE_F16);
}

/* relu with leaky_relu's kernel: verification must fail and say where. */
static kf_kernel *leaky_kernel(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {
    kf_op_params q = *p;
    q.alpha = 0.5f;
    return kf_op_find("leaky_relu")->kernel_forward(in, &q, dtype);
}

/* A kernel that skips the last element. */
static kf_kernel *short_kernel(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {
    kf_shape fewer = kf_shape_1d((uint32_t)kf_shape_elements(&in[0]) - 1);
    return kf_op_find("relu")->kernel_forward(&fewer, p, dtype);
}

/* A kernel that writes every element one place too far: the last lands in the guard band. */
static kf_kernel *shifted_kernel(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {
    (void)p;
    uint64_t n = kf_shape_elements(&in[0]);
    kf_kernel_desc d = {0};
    d.name = "shifted";
    d.workgroup_size[0] = KF__WORKGROUP;
    d.output = kf__dtype_type(dtype);
    kf_kernel *k = kf_kernel_create(&d);
    uint32_t groups[3];
    kf__grid_1d(n, KF__WORKGROUP, groups);
    kf_kernel_set_grid(k, groups);
    kf_binding a = kf__bind(k, "a", dtype, KF_ACCESS_READ);
    kf_val i = kf_let(k, "i", kf_global_linear(k));
    kf_if(k, kf_binary(k, KF_OP_LT, i, kf__u32(k, n)));
    kf__yield_f32(k, kf__load_f32(k, a, i, dtype), kf_add(k, i, kf__u32(k, 1)), dtype);
    kf_end(k);
    return k;
}

/* A backward kernel for add's bias that forgets the reduction (takes row 0 only). */
static kf_kernel *bias_row0_backward(const kf_shape *in, const kf_op_params *p, kf_dtype dtype,
                                     uint32_t which) {
    if (which == 0) {
        return kf_op_find("add")->kernel_backward(in, p, dtype, which);
    }
    kf_shape one_row[2] = {kf_shape_2d(1, in[1].dims[in[1].rank - 1]), in[1]};
    return kf_op_find("add")->kernel_backward(one_row, p, dtype, 1);
}

KT_TEST(ops, verify_catches_broken_kernels) {
    KT_NEED_GPU(ctx);
    kf_verify_case vc = {0};
    kf_verify_result res;
    vc.shapes[0] = kf_shape_2d(7, 13);
    vc.seed = kt_rand_u64();

    kf_operator broken = *kf_op_find("relu");
    broken.kernel_forward = leaky_kernel;
    vc.op = &broken;
    kf_status st = kf_op_verify(ctx, &vc, &res);
    KT_CHECK(st == KF_ERROR_MISMATCH && !res.passed, "wrong formula passed: %s", kf_status_str(st));
    KT_CHECK(strstr(res.message, "forward: element") != NULL, "message: %s", res.message);

    broken.kernel_forward = short_kernel;
    st = kf_op_verify(ctx, &vc, &res);
    KT_CHECK(st == KF_ERROR_MISMATCH, "unwritten element passed: %s", kf_status_str(st));
    KT_CHECK(strstr(res.message, "element 90") && strstr(res.message, "NaN"), "message: %s",
             res.message);

    broken.kernel_forward = shifted_kernel;
    st = kf_op_verify(ctx, &vc, &res);
    KT_CHECK(st == KF_ERROR_MISMATCH, "shifted kernel passed: %s", kf_status_str(st));

    broken = *kf_op_find("add");
    broken.kernel_backward = bias_row0_backward;
    vc.op = &broken;
    vc.shapes[0] = kf_shape_2d(257, 129);
    vc.shapes[1] = kf_shape_1d(129);
    vc.backward = true;
    st = kf_op_verify(ctx, &vc, &res);
    KT_CHECK(st == KF_ERROR_MISMATCH, "bias grad without the reduction passed");
    KT_CHECK(strstr(res.message, "input 1") != NULL, "message: %s", res.message);
}

/* The reciprocals of tanh, sigmoid, gelu and silu by Newton's iteration ($KF_EW_NEWTON,
 * src/ops/elementwise.c newton_div) where the division would lean on IEEE rules: NaN, the
 * infinities, exp's overflow (1 + exp(.) past 1e30 and at inf: |x| around 35, 44, 70, 88 and
 * beyond), huge and tiny finite values, the series' edge |x| = 1/16, and a sweep; f32 and f16
 * (inputs rounded to f16 for the spec, as the kernel sees them), every element against the spec:
 * NaN and inf exactly, else within the NaN test's 1e-5 (f32) or the op's f16 tolerance. The
 * kernels are checked to have the Newton form, so the test cannot pass on the division. */
KT_TEST(ops, newton_reciprocals_at_the_extremes_on_device) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    const char *saved = getenv("KF_EW_NEWTON");
    char *kept = saved ? strdup(saved) : NULL;
    setenv("KF_EW_NEWTON", "tanh,sigmoid,gelu,silu", 1);
    static const float extremes[] = {
        NAN,     INFINITY, -INFINITY, 0.0f,     -0.0f,   1e-30f,  -1e-30f, 1e-8f,  -1e-8f,
        0.0625f, -0.0625f, 0.0624f,   -0.0624f, 1.0f,    -1.0f,   10.0f,   -10.0f, 35.0f,
        -35.0f,  44.0f,    -44.0f,    70.0f,    -70.0f,  88.0f,   -88.0f,  90.0f,  -90.0f,
        1e4f,    -1e4f,    1e30f,     -1e30f,   3.4e38f, -3.4e38f};
    enum { COUNT = 64, EXTREMES = sizeof extremes / sizeof extremes[0] };
    kf_shape s = kf_shape_1d(COUNT);
    static const char *const names[] = {"tanh", "sigmoid", "gelu", "silu"};
    for (uint32_t o = 0; o < 4; o++) {
        const kf_operator *op = kf_op_find(names[o]);
        kf_op_params p = {0};
        kf_kernel *k = op->kernel_forward(&s, &p, KF_DTYPE_F32);
        char *wgsl = k ? kf_kernel_emit_wgsl(k) : NULL;
        KT_CHECK(wgsl && strstr(wgsl, "2129859011u"), "%s: no Newton reciprocal in:\n%s", names[o],
                 wgsl ? wgsl : "(no kernel)");
        kf_free(wgsl);
        kf_kernel_destroy(k);
        for (kf_dtype dtype = KF_DTYPE_F32; dtype <= KF_DTYPE_F16; dtype++) {
            if (dtype == KF_DTYPE_F16 && !info.has_f16) {
                continue;
            }
            kf_tensor *in = NULL, *want = NULL, *got = NULL;
            kf_gpu_tensor *g_in = NULL, *g_out = NULL;
            KT_CHECK_OK(kf_tensor_create(&s, &in));
            KT_CHECK_OK(kf_tensor_create(&s, &want));
            KT_CHECK_OK(kf_tensor_create(&s, &got));
            for (int e = 0; e < COUNT; e++) {
                float v = e < EXTREMES ? extremes[e]
                                       : -12.0f + 24.0f * (float)(e - EXTREMES) /
                                                      (float)(COUNT - EXTREMES - 1);
                in->data[e] = dtype == KF_DTYPE_F16 ? kf__half_to_float(kf__half_from_float(v)) : v;
            }
            KT_CHECK_OK(op->spec_forward((const kf_tensor *const *)&in, &p, want));
            KT_CHECK_OK(kf_gpu_tensor_from(ctx, in, dtype, &g_in));
            KT_CHECK_OK(kf_gpu_tensor_create(ctx, &s, dtype, &g_out));
            KT_CHECK_OK(kf_buffer_fill_u32(g_out->buffer, 0x7fc07fc0u)); /* NaN in both */
            KT_CHECK_OK(kf_op_run_forward(ctx, op, &p, (const kf_gpu_tensor *const *)&g_in, g_out));
            KT_CHECK_OK(kf_gpu_tensor_to(g_out, got));
            /* f16: relative to 1e-4 at least, where the output's rounding (subnormals 6e-8
             * apart) is within the tolerance */
            double tol = dtype == KF_DTYPE_F16 ? kf_op_tolerance(op, dtype) : 1e-5;
            double floor = dtype == KF_DTYPE_F16 ? 1e-4 : 1e-6;
            for (int e = 0; e < COUNT; e++) {
                float a = got->data[e], b = want->data[e];
                bool ok = isnan(b)   ? isnan(a)
                          : isinf(b) ? a == b
                                     : kf__rel_error(a, b, floor) < tol;
                if (!ok) {
                    kt_fail(__FILE__, __LINE__, "%s %s element %d (input %g): got %g, spec %g",
                            names[o], kf_dtype_str(dtype), e, (double)in->data[e], (double)a,
                            (double)b);
                    break;
                }
            }
            kf_tensor_destroy(in);
            kf_tensor_destroy(want);
            kf_tensor_destroy(got);
            kf_gpu_tensor_destroy(g_in);
            kf_gpu_tensor_destroy(g_out);
        }
    }
    if (kept) {
        setenv("KF_EW_NEWTON", kept, 1);
    } else {
        unsetenv("KF_EW_NEWTON");
    }
    free(kept);
}

/* NaN and infinity go through every kernel as the spec says: NaN propagates through arithmetic,
 * relu and maximum; infinities behave as IEEE arithmetic does. */
KT_TEST(ops, elementwise_nan_and_inf_on_device) {
    KT_NEED_GPU(ctx);
    static const float specials[8] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1.5f, -2.5f, 3.0f};
    static const char *const with_inf[] = {"relu", "leaky_relu", "neg",    "abs",     "square",
                                           "add",  "sub",        "mul",    "maximum", "scale",
                                           "copy", "transpose",  "affine", "sigmoid", "tanh"};
    kf_shape s = kf_shape_2d(8, 8);
    for (uint32_t k = 0; k < kf_op_count(); k++) {
        const kf_operator *op = kf_op_at(k);
        /* backward operators (x, dy) and broadcast_to have their own tables (docs/training.md) */
        if (!is_mine(op) || kf_op_grad_of(op, NULL) || !strcmp(kf_op_name(op), "broadcast_to")) {
            continue;
        }
        bool inf_ok = false;
        for (size_t w = 0; w < sizeof with_inf / sizeof with_inf[0]; w++) {
            inf_ok = inf_ok || !strcmp(with_inf[w], op->name);
        }
        kf_op_params p = {0};
        uint32_t arity = kf_op_arity(op, &p);
        kf_tensor *in[2] = {0}, *want = NULL, *got = NULL;
        kf_gpu_tensor *g_in[2] = {0}, *g_out = NULL;
        kf_shape shapes[2] = {s, s}, os;
        KT_CHECK_OK(op->shape(shapes, &p, &os, NULL, 0));
        for (uint32_t i = 0; i < arity; i++) {
            KT_CHECK_OK(kf_tensor_create(&s, &in[i]));
            for (int e = 0; e < 64; e++) {
                /* every pair of specials meets once across the two inputs */
                float v = specials[i == 0 ? e % 8 : e / 8];
                /* outside an op's domain (log(-1), 1/0) WGSL leaves the result undefined */
                bool positive_only = op->input_lo > 0;
                bool nonzero = (op->nonzero_inputs >> i) & 1u;
                if ((!inf_ok && isinf(v)) || (positive_only && !(v > 0) && !isnan(v)) ||
                    (nonzero && v == 0.0f)) {
                    v = 0.75f;
                }
                in[i]->data[e] = v;
            }
        }
        KT_CHECK_OK(kf_tensor_create(&os, &want));
        KT_CHECK_OK(kf_tensor_create(&os, &got));
        KT_CHECK_OK(op->spec_forward((const kf_tensor *const *)in, &p, want));
        for (uint32_t i = 0; i < arity; i++) {
            KT_CHECK_OK(kf_gpu_tensor_from(ctx, in[i], KF_DTYPE_F32, &g_in[i]));
        }
        KT_CHECK_OK(kf_gpu_tensor_create(ctx, &os, KF_DTYPE_F32, &g_out));
        KT_CHECK_OK(kf_buffer_fill_u32(g_out->buffer, 0x7fc00000u));
        KT_CHECK_OK(kf_op_run_forward(ctx, op, &p, (const kf_gpu_tensor *const *)g_in, g_out));
        KT_CHECK_OK(kf_gpu_tensor_to(g_out, got));
        for (int e = 0; e < 64; e++) {
            float a = got->data[e], b = want->data[e];
            bool ok = isnan(b) ? isnan(a) : isinf(b) ? a == b : kf__rel_error(a, b, 1e-6) < 1e-5;
            if (!ok) {
                kt_fail(__FILE__, __LINE__, "%s element %d (inputs %g, %g): got %g, spec %g",
                        op->name, e, (double)in[0]->data[e],
                        arity > 1 ? (double)in[1]->data[e] : 0.0, (double)a, (double)b);
                break;
            }
        }
        for (uint32_t i = 0; i < arity; i++) {
            kf_tensor_destroy(in[i]);
            kf_gpu_tensor_destroy(g_in[i]);
        }
        kf_tensor_destroy(want);
        kf_tensor_destroy(got);
        kf_gpu_tensor_destroy(g_out);
    }
}

/* tanh keeps its relative accuracy (the op's 1e-4) for tiny arguments, where a driver computing
 * (e^2x - 1) / (e^2x + 1) loses it (lavapipe: 2.7e-3 near 1e-5; found by a random graph). */
KT_TEST(ops, tanh_is_accurate_for_tiny_arguments) {
    KT_NEED_GPU(ctx);
    const kf_operator *op = kf_op_find("tanh");
    enum { N = 4096 };
    kf_shape s = kf_shape_1d(N);
    kf_tensor *x = NULL, *y = NULL;
    kf_gpu_tensor *gx = NULL, *gy = NULL;
    KT_CHECK_OK(kf_tensor_create(&s, &x));
    KT_CHECK_OK(kf_tensor_create(&s, &y));
    for (int i = 0; i < N; i++) { /* |x| from 1e-7 to 0.3, both signs, log-spaced */
        double mag = pow(10.0, -7.0 + 6.5 * (double)(i / 2) / (N / 2));
        x->data[i] = (float)(i % 2 ? -mag : mag) * kt_rand_f32(0.9f, 1.1f);
    }
    KT_CHECK_OK(kf_gpu_tensor_from(ctx, x, KF_DTYPE_F32, &gx));
    KT_CHECK_OK(kf_gpu_tensor_create(ctx, &s, KF_DTYPE_F32, &gy));
    KT_CHECK_OK(kf_buffer_fill_u32(gy->buffer, 0x7fc00000u));
    const kf_gpu_tensor *in[1] = {gx};
    KT_CHECK_OK(kf_op_run_forward(ctx, op, NULL, in, gy));
    KT_CHECK_OK(kf_gpu_tensor_to(gy, y));
    double worst = 0.0;
    int at = 0;
    for (int i = 0; i < N; i++) {
        double want = tanh((double)x->data[i]);
        double e = fabs(y->data[i] - want) / fabs(want);
        if (!(e <= worst)) {
            worst = e;
            at = i;
        }
    }
    KT_CHECK(worst <= 1e-4, "tanh(%g) = %g: relative error %.3g (want <= 1e-4)",
             (double)x->data[at], (double)y->data[at], worst);
    kf_tensor_destroy(x);
    kf_tensor_destroy(y);
    kf_gpu_tensor_destroy(gx);
    kf_gpu_tensor_destroy(gy);
}

KT_TEST(ops, run_forward_checks_its_arguments) {
    KT_NEED_GPU(ctx);
    kf_shape a = kf_shape_2d(7, 13), b = kf_shape_2d(13, 7);
    kf_gpu_tensor *x = NULL, *y = NULL;
    KT_CHECK_OK(kf_gpu_tensor_create(ctx, &a, KF_DTYPE_F32, &x));
    KT_CHECK_OK(kf_gpu_tensor_create(ctx, &b, KF_DTYPE_F32, &y));
    const kf_gpu_tensor *in[1] = {x};
    KT_CHECK(kf_op_run_forward(ctx, kf_op_find("relu"), NULL, in, y) == KF_ERROR_SHAPE,
             "relu into the wrong shape must fail");
    KT_CHECK_OK(kf_op_run_forward(ctx, kf_op_find("transpose"), NULL, in, y));
    kf_gpu_tensor_destroy(x);
    kf_gpu_tensor_destroy(y);
}

/* The CLI: a subset passes with exit 0 and prints its table; an unknown op is a usage error. */
KT_TEST(ops, cli_verify_runs_a_subset) {
    KT_NEED_GPU(ctx);
    (void)ctx;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s verify relu transpose --quick --seed %llu --json > /dev/null",
             KF_CLI_PATH, (unsigned long long)kt_seed());
    int rc = system(cmd);
    KT_CHECK(rc == 0, "'%s' exited with %d", cmd, rc);
    snprintf(cmd, sizeof cmd, "%s verify no_such_op 2> /dev/null", KF_CLI_PATH);
    rc = system(cmd);
    KT_CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "unknown op: exit %d", rc);
}
