/* Row reductions, norms and cross_entropy: the specs against values worked out by hand (and the
 * NaN rules the kernels must share), shape errors, spec_backward against finite differences, and
 * every kernel against its spec on the GPU over each op's verification table, f32 and f16, forward
 * and backward, plus NaN / infinity behaviour on the device. */
#include "harness.h"
#include "ops/ops_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------- */
/* Helpers                                                                                  */
/* ---------------------------------------------------------------------------------------- */

typedef struct spec_run {
    kf_tensor *in[4];
    kf_tensor *out;
    kf_tensor *grad_out;
    kf_tensor *grad_in[4];
    uint32_t arity;
} spec_run;

static void spec_run_free(spec_run *r) {
    for (int i = 0; i < 4; i++) {
        kf_tensor_destroy(r->in[i]);
        kf_tensor_destroy(r->grad_in[i]);
    }
    kf_tensor_destroy(r->out);
    kf_tensor_destroy(r->grad_out);
    memset(r, 0, sizeof *r);
}

/* Makes inputs of the given shapes and values (values[i] NULL: leave zeros), runs spec_forward
 * into a tensor of the op's output shape; with grad (non-NULL), also spec_backward. */
static kf_status spec_run_make(spec_run *r, const kf_operator *op, const kf_op_params *p,
                               const kf_shape *shapes, const float *const *values,
                               const float *grad) {
    memset(r, 0, sizeof *r);
    r->arity = kf_op_arity(op, p);
    for (uint32_t i = 0; i < r->arity; i++) {
        kf_status st = kf_tensor_create(&shapes[i], &r->in[i]);
        if (st != KF_OK) {
            return st;
        }
        if (values && values[i]) {
            memcpy(r->in[i]->data, values[i], sizeof(float) * kf_tensor_size(r->in[i]));
        }
    }
    kf_shape out_shape;
    char msg[256];
    kf_status st = kf_op_shape(op, shapes, p, &out_shape, msg, sizeof msg);
    if (st != KF_OK) {
        return st;
    }
    if ((st = kf_tensor_create(&out_shape, &r->out)) != KF_OK) {
        return st;
    }
    if ((st = op->spec_forward((const kf_tensor *const *)r->in, p, r->out)) != KF_OK) {
        return st;
    }
    if (!grad) {
        return KF_OK;
    }
    if ((st = kf_tensor_create(&out_shape, &r->grad_out)) != KF_OK) {
        return st;
    }
    memcpy(r->grad_out->data, grad, sizeof(float) * kf_tensor_size(r->grad_out));
    for (uint32_t i = 0; i < r->arity; i++) {
        if ((st = kf_tensor_create(&shapes[i], &r->grad_in[i])) != KF_OK) {
            return st;
        }
    }
    return op->spec_backward((const kf_tensor *const *)r->in, r->out, r->grad_out, p, r->grad_in);
}

static bool near(double got, double want, double tol) {
    if (isnan(want)) {
        return isnan(got);
    }
    return fabs(got - want) <= tol * fmax(1.0, fabs(want));
}

#define CHECK_NEAR(got, want, tol)                                                                 \
    KT_CHECK(near((got), (want), (tol)), "%s = %.9g, want %.9g", #got, (double)(got),              \
             (double)(want))

/* ---------------------------------------------------------------------------------------- */
/* Specs by hand                                                                            */
/* ---------------------------------------------------------------------------------------- */

KT_CPU_TEST(ops, reduce_spec_sum_mean_max) {
    const kf_operator *sum = kf_op_find("sum"), *mean = kf_op_find("mean"),
                      *max = kf_op_find("max");
    KT_CHECK(sum && mean && max, "sum, mean and max are registered");
    kf_op_params p = {0};
    kf_shape s = kf_shape_2d(2, 3);
    const float x[] = {1, 2, 3, 4, -5, 6};
    const float *v[] = {x};
    const float g[] = {10, 20};
    spec_run r;

    KT_CHECK_OK(spec_run_make(&r, sum, &p, &s, v, g));
    KT_CHECK(r.out->shape.rank == 1 && r.out->shape.dims[0] == 2, "sum drops the last axis");
    CHECK_NEAR(r.out->data[0], 6, 0);
    CHECK_NEAR(r.out->data[1], 5, 0);
    for (int i = 0; i < 6; i++) {
        CHECK_NEAR(r.grad_in[0]->data[i], g[i / 3], 0);
    }
    spec_run_free(&r);

    KT_CHECK_OK(spec_run_make(&r, mean, &p, &s, v, g));
    CHECK_NEAR(r.out->data[0], 2, 1e-7);
    CHECK_NEAR(r.out->data[1], 5.0 / 3, 1e-7);
    for (int i = 0; i < 6; i++) {
        CHECK_NEAR(r.grad_in[0]->data[i], g[i / 3] / 3.0, 1e-7);
    }
    spec_run_free(&r);

    KT_CHECK_OK(spec_run_make(&r, max, &p, &s, v, g));
    CHECK_NEAR(r.out->data[0], 3, 0);
    CHECK_NEAR(r.out->data[1], 6, 0);
    const float want_grad[] = {0, 0, 10, 0, 0, 20};
    for (int i = 0; i < 6; i++) {
        CHECK_NEAR(r.grad_in[0]->data[i], want_grad[i], 0);
    }
    spec_run_free(&r);

    /* a vector reduces to a rank-0 scalar */
    kf_shape vec = kf_shape_1d(4);
    const float xv[] = {1, 2, 3, 4};
    const float *vv[] = {xv};
    KT_CHECK_OK(spec_run_make(&r, sum, &p, &vec, vv, NULL));
    KT_CHECK(r.out->shape.rank == 0, "sum of a vector is rank 0, got rank %u", r.out->shape.rank);
    CHECK_NEAR(r.out->data[0], 10, 0);
    spec_run_free(&r);
}

KT_CPU_TEST(ops, reduce_spec_max_nan_and_ties) {
    const kf_operator *max = kf_op_find("max");
    kf_op_params p = {0};
    kf_shape s = kf_shape_2d(3, 4);
    /* row 0: ties -> first argmax; row 1: NaN -> NaN, gradient to the first NaN; row 2: -inf */
    const float x[] = {1, 7, 7, 2, 3, NAN, 9, NAN, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    const float *v[] = {x};
    const float g[] = {1, 2, 3};
    spec_run r;
    KT_CHECK_OK(spec_run_make(&r, max, &p, &s, v, g));
    CHECK_NEAR(r.out->data[0], 7, 0);
    KT_CHECK(isnan(r.out->data[1]), "NaN propagates through max, got %g", r.out->data[1]);
    KT_CHECK(r.out->data[2] == -INFINITY, "max of -inf is -inf, got %g", r.out->data[2]);
    const float want[] = {0, 1, 0, 0, 0, 2, 0, 0, 3, 0, 0, 0};
    for (int i = 0; i < 12; i++) {
        KT_CHECK(r.grad_in[0]->data[i] == want[i], "max grad[%d] = %g, want %g", i,
                 r.grad_in[0]->data[i], want[i]);
    }
    spec_run_free(&r);
}

KT_CPU_TEST(ops, reduce_spec_softmax) {
    const kf_operator *sm = kf_op_find("softmax"), *lsm = kf_op_find("log_softmax");
    KT_CHECK(sm && lsm, "softmax and log_softmax are registered");
    kf_op_params p = {0};
    kf_shape s = kf_shape_2d(3, 2);
    /* [0, ln 2] -> [1/3, 2/3]; [1000, 1000] must not overflow; a NaN poisons its row */
    const float x[] = {0, (float)log(2.0), 1000, 1000, 1, NAN};
    const float *v[] = {x};
    const float g[] = {1, 0, 0.5f, -0.5f, 1, 1};
    spec_run r;
    KT_CHECK_OK(spec_run_make(&r, sm, &p, &s, v, g));
    CHECK_NEAR(r.out->data[0], 1.0 / 3, 1e-7);
    CHECK_NEAR(r.out->data[1], 2.0 / 3, 1e-7);
    CHECK_NEAR(r.out->data[2], 0.5, 0);
    CHECK_NEAR(r.out->data[3], 0.5, 0);
    KT_CHECK(isnan(r.out->data[4]) && isnan(r.out->data[5]), "a NaN makes the softmax row NaN");
    /* dx = y * (dy - sum(dy * y)): row 0, dy = [1, 0]: sum = 1/3 -> [1/3 * 2/3, 2/3 * -1/3] */
    CHECK_NEAR(r.grad_in[0]->data[0], 2.0 / 9, 1e-7);
    CHECK_NEAR(r.grad_in[0]->data[1], -2.0 / 9, 1e-7);
    /* row 1: y = [.5, .5], dy = [.5, -.5]: sum = 0 -> [.25, -.25] */
    CHECK_NEAR(r.grad_in[0]->data[2], 0.25, 1e-7);
    CHECK_NEAR(r.grad_in[0]->data[3], -0.25, 1e-7);
    spec_run_free(&r);

    KT_CHECK_OK(spec_run_make(&r, lsm, &p, &s, v, g));
    CHECK_NEAR(r.out->data[0], log(1.0 / 3), 1e-7);
    CHECK_NEAR(r.out->data[1], log(2.0 / 3), 1e-7);
    CHECK_NEAR(r.out->data[2], log(0.5), 1e-7);
    /* dx = dy - softmax * sum(dy): row 0: [1 - 1/3, 0 - 2/3] */
    CHECK_NEAR(r.grad_in[0]->data[0], 2.0 / 3, 1e-7);
    CHECK_NEAR(r.grad_in[0]->data[1], -2.0 / 3, 1e-7);
    spec_run_free(&r);
}

KT_CPU_TEST(ops, reduce_spec_norms) {
    const kf_operator *rms = kf_op_find("rmsnorm"), *ln = kf_op_find("layernorm");
    KT_CHECK(rms && ln, "rmsnorm and layernorm are registered");
    kf_op_params p = {.has_weight = true, .has_bias = true};
    KT_CHECK(kf_op_arity(rms, &p) == 3 && kf_op_arity(ln, &(kf_op_params){0}) == 1 &&
                 kf_op_arity(ln, &(kf_op_params){.has_bias = true}) == 2,
             "norm arity follows has_weight / has_bias");
    kf_shape shapes[3] = {kf_shape_2d(1, 3), kf_shape_1d(3), kf_shape_1d(3)};
    const float x[] = {1, 2, 3}, w[] = {2, 1, -1}, b[] = {0.5f, 0, 1};
    const float *v[] = {x, w, b};
    const float g[] = {1, 1, 1};
    spec_run r;

    /* layernorm: mu = 2, var = 2/3 -> xhat = [-1, 0, 1] * sqrt(1.5) (eps 1e-5 aside) */
    KT_CHECK_OK(spec_run_make(&r, ln, &p, shapes, v, g));
    double rstd = 1.0 / sqrt(2.0 / 3 + 1e-5);
    CHECK_NEAR(r.out->data[0], -rstd * 2 + 0.5, 1e-6);
    CHECK_NEAR(r.out->data[1], 0, 1e-6);
    CHECK_NEAR(r.out->data[2], -rstd + 1, 1e-6);
    /* dbias = sum over rows of dy = 1; dweight = dy * xhat */
    CHECK_NEAR(r.grad_in[2]->data[0], 1, 0);
    CHECK_NEAR(r.grad_in[1]->data[0], -rstd, 1e-6);
    CHECK_NEAR(r.grad_in[1]->data[1], 0, 1e-6);
    /* dx sums to zero over the row: layernorm is invariant to adding a constant to x */
    double dsum = 0;
    for (int i = 0; i < 3; i++) {
        dsum += r.grad_in[0]->data[i];
    }
    CHECK_NEAR(dsum, 0, 1e-6);
    spec_run_free(&r);

    /* rmsnorm [3, 4] without weight or bias: r = 1 / sqrt(12.5 + eps) */
    kf_op_params none = {0};
    kf_shape s2 = kf_shape_2d(1, 2);
    const float x2[] = {3, 4};
    const float *v2[] = {x2};
    KT_CHECK_OK(spec_run_make(&r, rms, &none, &s2, v2, g));
    double r2 = 1.0 / sqrt(12.5 + 1e-5);
    CHECK_NEAR(r.out->data[0], 3 * r2, 1e-7);
    CHECK_NEAR(r.out->data[1], 4 * r2, 1e-7);
    /* rmsnorm is invariant to scaling x: dx is orthogonal to x */
    CHECK_NEAR(3 * r.grad_in[0]->data[0] + 4 * r.grad_in[0]->data[1], 0, 1e-5);
    spec_run_free(&r);

    /* eps from params */
    kf_op_params big_eps = {.eps = 1.0f};
    KT_CHECK_OK(spec_run_make(&r, rms, &big_eps, &s2, v2, NULL));
    CHECK_NEAR(r.out->data[0], 3 / sqrt(13.5), 1e-7);
    spec_run_free(&r);
}

KT_CPU_TEST(ops, reduce_spec_cross_entropy) {
    const kf_operator *ce = kf_op_find("cross_entropy");
    KT_CHECK(ce, "cross_entropy is registered");
    KT_CHECK(ce->index_inputs == 2u, "labels (input 1) are an index input");
    kf_op_params p = {0};
    kf_shape shapes[2] = {kf_shape_2d(2, 2), kf_shape_1d(2)};
    /* row 0: [0, ln 3], label 1: ln 4 - ln 3; row 1: [0, 0], label 0: ln 2 */
    const float x[] = {0, (float)log(3.0), 0, 0}, labels[] = {1, 0};
    const float *v[] = {x, labels};
    const float g[] = {2};
    spec_run r;
    KT_CHECK_OK(spec_run_make(&r, ce, &p, shapes, v, g));
    KT_CHECK(r.out->shape.rank == 0, "the loss is a scalar");
    CHECK_NEAR(r.out->data[0], (log(4.0 / 3) + log(2.0)) / 2, 1e-7);
    /* (softmax - onehot) * g / N: row 0 softmax [1/4, 3/4], label 1 */
    CHECK_NEAR(r.grad_in[0]->data[0], 0.25, 1e-7);
    CHECK_NEAR(r.grad_in[0]->data[1], -0.25, 1e-7);
    CHECK_NEAR(r.grad_in[0]->data[2], -0.5, 1e-7);
    CHECK_NEAR(r.grad_in[0]->data[3], 0.5, 1e-7);
    KT_CHECK(r.grad_in[1]->data[0] == 0 && r.grad_in[1]->data[1] == 0, "labels get no gradient");
    spec_run_free(&r);

    /* labels outside [0, C) or not integers make the loss NaN */
    const float bad[][2] = {{2, 0}, {-1, 0}, {0.5f, 0}, {NAN, 0}};
    for (int i = 0; i < 4; i++) {
        const float *vb[] = {x, bad[i]};
        KT_CHECK_OK(spec_run_make(&r, ce, &p, shapes, vb, g));
        KT_CHECK(isnan(r.out->data[0]), "label %g gives NaN loss, got %g", bad[i][0],
                 r.out->data[0]);
        KT_CHECK(isnan(r.grad_in[0]->data[0]) && !isnan(r.grad_in[0]->data[2]),
                 "label %g: its row's gradient is NaN, the other row's is not", bad[i][0]);
        spec_run_free(&r);
    }
}

KT_CPU_TEST(ops, reduce_shape_errors) {
    char msg[256];
    kf_shape out;
    const kf_operator *ln = kf_op_find("layernorm"), *ce = kf_op_find("cross_entropy");
    kf_op_params p = {.has_weight = true};
    kf_shape bad_w[2] = {kf_shape_2d(4, 8), kf_shape_1d(7)};
    KT_CHECK(kf_op_shape(ln, bad_w, &p, &out, msg, sizeof msg) == KF_ERROR_SHAPE,
             "a weight of the wrong length is a shape error");
    KT_CHECK(strstr(msg, "weight") && strstr(msg, "4x8") && strstr(msg, "7"),
             "the message names the weight and both shapes: %s", msg);
    kf_shape bad_labels[2] = {kf_shape_2d(4, 8), kf_shape_1d(8)};
    KT_CHECK(kf_op_shape(ce, bad_labels, &(kf_op_params){0}, &out, msg, sizeof msg) ==
                 KF_ERROR_SHAPE,
             "labels must have one entry per row");
    KT_CHECK(strstr(msg, "labels"), "the message names the labels: %s", msg);
}

/* ---------------------------------------------------------------------------------------- */
/* spec_backward against finite differences                                                 */
/* ---------------------------------------------------------------------------------------- */

static const char *const row_ops[] = {"sum",         "mean",    "max",       "softmax",
                                      "log_softmax", "rmsnorm", "layernorm", "cross_entropy"};
#define ROW_OP_COUNT (sizeof row_ops / sizeof row_ops[0])

/* Central differences cost two spec_forward runs per input element: the table's small cases
 * cover every code path of the specs, the large ones add nothing but time. */
static bool small_case(const kf_op_case *c) {
    return kf_shape_elements(&c->shapes[0]) <= 4096;
}

KT_CPU_TEST(ops, reduce_gradients_match_finite_differences) {
    for (size_t o = 0; o < ROW_OP_COUNT; o++) {
        const kf_operator *op = kf_op_find(row_ops[o]);
        KT_CHECK(op && op->case_count > 0, "%s has a verification table", row_ops[o]);
        for (uint32_t i = 0; i < op->case_count; i++) {
            const kf_op_case *tc = &op->cases[i];
            if (!small_case(tc)) {
                continue;
            }
            kf_verify_case vc = {.op = op, .params = tc->params, .seed = kt_rand_u64()};
            memcpy(vc.shapes, tc->shapes, sizeof vc.shapes);
            kf_verify_result res;
            kf_status st = kf_op_check_gradient(&vc, &res);
            KT_CHECK(st == KF_OK && res.passed, "%s %s: %s (error %.3g, tolerance %.3g)", op->name,
                     tc->note ? tc->note : "", res.message, res.max_rel_error, res.tolerance);
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Kernels against specs on the GPU                                                         */
/* ---------------------------------------------------------------------------------------- */

static void verify_table(const char *name, kf_dtype dtype) {
    KT_NEED_GPU(ctx);
    const kf_operator *op = kf_op_find(name);
    KT_CHECK(op && op->case_count > 0, "%s has a verification table", name);
    if (dtype == KF_DTYPE_F16) {
        kf_adapter_info info;
        KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
        if (!info.has_f16) {
            printf("    (%s f16: the adapter has no shader-f16; skipped)\n", name);
            return;
        }
    }
    for (uint32_t i = 0; i < op->case_count; i++) {
        const kf_op_case *tc = &op->cases[i];
        for (int backward = 0; backward < 2; backward++) {
            kf_verify_case vc = {.op = op,
                                 .params = tc->params,
                                 .dtype = dtype,
                                 .backward = backward != 0,
                                 .seed = kt_rand_u64()};
            memcpy(vc.shapes, tc->shapes, sizeof vc.shapes);
            kf_verify_result res;
            kf_status st = kf_op_verify(ctx, &vc, &res);
            KT_CHECK(st == KF_OK && res.passed,
                     "%s %s %s (%s): %s -> %s (error %.3g, tolerance %.3g, seed %llu)", name,
                     backward ? "backward" : "forward", kf_dtype_str(dtype),
                     tc->note ? tc->note : "", res.message, kf_status_str(st), res.max_rel_error,
                     res.tolerance, (unsigned long long)vc.seed);
        }
    }
}

#define VERIFY_TESTS(op)                                                                           \
    KT_TEST(ops, reduce_verify_##op##_f32) {                                                       \
        verify_table(#op, KF_DTYPE_F32);                                                           \
    }                                                                                              \
    KT_TEST(ops, reduce_verify_##op##_f16) {                                                       \
        verify_table(#op, KF_DTYPE_F16);                                                           \
    }

/* The register kernels (softmax, the norms' forward) with other lanes a row than 256, with
 * scalars instead of vec4s and with the yields exchanged through workgroup memory
 * ($KF_ROWS_LANES, $KF_ROWS_WIDTH, $KF_ROWS_EXCHANGE: the H200 bench measures them), on
 * the tables' rows longer than 256: past 256 lanes the reduction's gather must still fit its
 * partials (it overran them once). */
KT_TEST(ops, reduce_verify_register_rows_other_layouts) {
    KT_NEED_GPU(ctx);
    static const char *const ops[] = {"softmax", "rmsnorm", "layernorm"};
    static const struct {
        const char *lanes, *width, *exchange;
    } layouts[] = {{"512", NULL, NULL}, {"1024", NULL, NULL}, {"1024", "1", NULL},
                   {"64", NULL, NULL},  {"256", NULL, "1"},   {"64", NULL, "1"}};
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
        setenv("KF_ROWS_LANES", layouts[l].lanes, 1);
        if (layouts[l].width) {
            setenv("KF_ROWS_WIDTH", layouts[l].width, 1);
        }
        if (layouts[l].exchange) {
            setenv("KF_ROWS_EXCHANGE", layouts[l].exchange, 1);
        }
        for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
            const kf_operator *op = kf_op_find(ops[o]);
            KT_CHECK(op && op->case_count > 0, "%s has a verification table", ops[o]);
            for (uint32_t i = 0; op && i < op->case_count; i++) {
                const kf_op_case *tc = &op->cases[i];
                const kf_shape *x = &tc->shapes[0];
                if (x->rank == 0 || x->dims[x->rank - 1] <= 256 ||
                    kf_shape_elements(x) > (1u << 20)) {
                    continue;
                }
                kf_verify_case vc = {
                    .op = op, .params = tc->params, .dtype = KF_DTYPE_F32, .seed = kt_rand_u64()};
                memcpy(vc.shapes, tc->shapes, sizeof vc.shapes);
                kf_verify_result res;
                kf_status st = kf_op_verify(ctx, &vc, &res);
                KT_CHECK(st == KF_OK && res.passed,
                         "%s (%s) with %s lanes a row%s: %s -> %s (error %.3g, seed %llu)", ops[o],
                         tc->note ? tc->note : "", layouts[l].lanes,
                         layouts[l].width ? ", scalars" : "", res.message, kf_status_str(st),
                         res.max_rel_error, (unsigned long long)vc.seed);
            }
        }
        unsetenv("KF_ROWS_LANES");
        unsetenv("KF_ROWS_WIDTH");
        unsetenv("KF_ROWS_EXCHANGE");
    }
}

VERIFY_TESTS(sum)
VERIFY_TESTS(mean)
VERIFY_TESTS(max)
VERIFY_TESTS(softmax)
VERIFY_TESTS(log_softmax)
VERIFY_TESTS(rmsnorm)
VERIFY_TESTS(layernorm)
VERIFY_TESTS(cross_entropy)

/* ---------------------------------------------------------------------------------------- */
/* NaN, infinity and invalid labels on the device                                           */
/* ---------------------------------------------------------------------------------------- */

/* Runs kernel k with tensors[i] bound to binding i (f32, or i32 where is_index[i]); the last one
 * is the output: poisoned with NaN first, downloaded after. */
static kf_status run_bindings(kf_context *ctx, kf_kernel *k, kf_tensor *const *tensors,
                              const bool *is_index, uint32_t count) {
    kf_gpu_tensor *g[8] = {0};
    kf_buffer *buffers[8];
    kf_status st = k && kf_kernel_status(k) == KF_OK ? KF_OK : KF_ERROR_INTERNAL;
    for (uint32_t i = 0; i < count && st == KF_OK; i++) {
        st = kf_gpu_tensor_from(ctx, tensors[i], is_index[i] ? KF_DTYPE_I32 : KF_DTYPE_F32, &g[i]);
        buffers[i] = st == KF_OK ? g[i]->buffer : NULL;
    }
    if (st == KF_OK) {
        st = kf_buffer_fill_u32(g[count - 1]->buffer, 0x7fc00000u);
    }
    if (st == KF_OK) {
        kf_kernel_launch launch = {.buffers = buffers, .buffer_count = count};
        st = kf_kernel_run(ctx, k, &launch);
    }
    if (st == KF_OK) {
        st = kf_gpu_tensor_to(g[count - 1], tensors[count - 1]);
    }
    for (uint32_t i = 0; i < count; i++) {
        kf_gpu_tensor_destroy(g[i]);
    }
    return st;
}

/* Forward of op on the device and in the spec, on the given inputs; every element must agree
 * (NaN with NaN, equal infinities). want_nan[i] lists output elements that must be NaN. */
static void check_special_forward(const char *name, kf_shape *shapes, const float *const *values,
                                  const int *want_nan, int nan_count) {
    KT_NEED_GPU(ctx);
    const kf_operator *op = kf_op_find(name);
    kf_op_params p = {0};
    spec_run r;
    KT_CHECK_OK(spec_run_make(&r, op, &p, shapes, values, NULL));
    kf_tensor *got;
    KT_CHECK_OK(kf_tensor_create(&r.out->shape, &got));
    kf_tensor *tensors[5] = {0};
    bool is_index[5] = {0};
    for (uint32_t i = 0; i < r.arity; i++) {
        tensors[i] = r.in[i];
        is_index[i] = (op->index_inputs >> i) & 1u;
    }
    tensors[r.arity] = got;
    kf_kernel *k = op->kernel_forward(shapes, &p, KF_DTYPE_F32);
    kf_status st = run_bindings(ctx, k, tensors, is_index, r.arity + 1);
    kf_kernel_destroy(k);
    KT_CHECK_OK(st);
    uint64_t n = kf_tensor_size(got);
    double err = kf_max_rel_error(got->data, r.out->data, n, kf__verify_floor(r.out->data, n));
    KT_CHECK(err <= op->tolerance_f32, "%s: device and spec disagree on NaN / inf (error %.3g)",
             name, err);
    for (int i = 0; i < nan_count; i++) {
        KT_CHECK(isnan(got->data[want_nan[i]]), "%s: element %d should be NaN, is %g", name,
                 want_nan[i], got->data[want_nan[i]]);
    }
    kf_tensor_destroy(got);
    spec_run_free(&r);
}

KT_TEST(ops, reduce_nan_inf_on_device) {
    /* rows of 5: a NaN late in the row, a NaN first, -inf everywhere, a +inf, plain numbers */
    kf_shape s = kf_shape_2d(5, 5);
    const float x[] = {1,         2,         3,         NAN,       4,         /* */
                       NAN,       -1,        -2,        -3,        -4,        /* */
                       -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, /* */
                       0,         INFINITY,  1,         2,         3,         /* */
                       0.5f,      -0.25f,    2,         -INFINITY, 1};
    const float *v[] = {x};
    const int max_nan[] = {0, 1};
    check_special_forward("max", &s, v, max_nan, 2);
    check_special_forward("sum", &s, v, max_nan, 2);
    /* softmax: NaN rows, the all -inf row (-inf - -inf = NaN) and the +inf row are NaN; the last
     * row has one -inf, which is an exact 0 */
    const int softmax_nan[] = {0, 4, 5, 10, 16};
    check_special_forward("softmax", &s, v, softmax_nan, 5);
    check_special_forward("log_softmax", &s, v, softmax_nan, 5);
    const int norm_nan[] = {0, 5};
    check_special_forward("rmsnorm", &s, v, norm_nan, 2);
    check_special_forward("layernorm", &s, v, norm_nan, 2);
}

/* cross_entropy's one-pass log-sum-exp (src/ops/loss.c) against the spec's two passes, on rows
 * of special values, each alone (the mean of one row is that row's loss) at 5 rows (one row a
 * step) and at 1030 rows (four rows a step, the last step ragged), in each of the four slots. */
KT_TEST(ops, reduce_cross_entropy_special_rows_on_device) {
    enum { C = 5 };
    const float rows[][C] = {
        {-INFINITY, -INFINITY, 1, 2, 0.5f},                      /* leading -inf: finite loss */
        {0.5f, -0.25f, 2, -INFINITY, 1},                         /* one -inf: finite */
        {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY}, /* NaN */
        {0, INFINITY, 1, 2, 3},                                  /* +inf: NaN */
        {NAN, -1, -2, -3, -4},                                   /* NaN first */
        {1, 2, 3, NAN, 4},                                       /* NaN late */
        {80, 85, -90, 88.5f, 87},                                /* exp(x) overflows f32 */
    };
    const bool finite[] = {true, true, false, false, false, false, true};
    const uint32_t counts[] = {5, 1030};
    for (uint32_t ci = 0; ci < 2; ci++) {
        uint32_t n = counts[ci];
        float *logits = malloc((size_t)n * C * sizeof *logits);
        float *labels = malloc(n * sizeof *labels);
        for (uint32_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
            /* the special row at a position in slot r % 4 of its step, in the ragged tail too */
            uint32_t at = n == 5 ? r % n : (r % 2 ? 1024u + r % 4 : 256u * (r % 4) + 3);
            for (uint32_t i = 0; i < n * C; i++) {
                logits[i] = kt_rand_f32(-3, 3);
            }
            for (uint32_t i = 0; i < n; i++) {
                labels[i] = (float)(i % C);
            }
            memcpy(logits + (size_t)at * C, rows[r], sizeof rows[r]);
            labels[at] = 2; /* a finite logit in every row but the all -inf one */
            kf_shape shapes[2] = {kf_shape_2d(n, C), kf_shape_1d(n)};
            const float *v[] = {logits, labels};
            const int loss[] = {0};
            check_special_forward("cross_entropy", shapes, v, loss, finite[r] ? 0 : 1);
        }
        free(logits);
        free(labels);
    }
}

KT_TEST(ops, reduce_invalid_labels_on_device) {
    kf_shape shapes[2] = {kf_shape_2d(4, 5), kf_shape_1d(4)};
    float logits[20];
    for (int i = 0; i < 20; i++) {
        logits[i] = kt_rand_f32(-2, 2);
    }
    const float good[] = {0, 4, 2, 1}, too_big[] = {0, 5, 2, 1}, negative[] = {0, 4, -1, 1};
    const float *ok[] = {logits, good}, *big[] = {logits, too_big}, *neg[] = {logits, negative};
    check_special_forward("cross_entropy", shapes, ok, NULL, 0);
    const int loss[] = {0};
    check_special_forward("cross_entropy", shapes, big, loss, 1);
    check_special_forward("cross_entropy", shapes, neg, loss, 1);

    /* the gradient: NaN in the bad label's row only */
    KT_NEED_GPU(ctx);
    const kf_operator *ce = kf_op_find("cross_entropy");
    kf_op_params p = {0};
    const float g[] = {1.5f};
    spec_run r;
    KT_CHECK_OK(spec_run_make(&r, ce, &p, shapes, big, g));
    kf_tensor *got;
    KT_CHECK_OK(kf_tensor_create(&shapes[0], &got));
    kf_tensor *tensors[5] = {r.in[0], r.in[1], r.out, r.grad_out, got};
    const bool is_index[5] = {false, true, false, false, false};
    kf_kernel *k = ce->kernel_backward(shapes, &p, KF_DTYPE_F32, 0);
    kf_status st = run_bindings(ctx, k, tensors, is_index, 5);
    kf_kernel_destroy(k);
    KT_CHECK_OK(st);
    for (int i = 0; i < 20; i++) {
        bool bad_row = i / 5 == 1;
        KT_CHECK(isnan(got->data[i]) == bad_row, "d logits[%d] = %g (row %d)", i, got->data[i],
                 i / 5);
    }
    double err = kf_max_rel_error(got->data, r.grad_in[0]->data, 20, 1e-3);
    KT_CHECK(err <= ce->tolerance_f32, "d logits agree with the spec: error %.3g", err);
    kf_tensor_destroy(got);
    spec_run_free(&r);
}

/* max's gradient goes to the first maximal element, or to the first NaN: on the device too,
 * where lanes and the tree see the row out of order. */
KT_TEST(ops, reduce_max_gradient_ties_and_nan_on_device) {
    KT_NEED_GPU(ctx);
    const kf_operator *max = kf_op_find("max");
    kf_op_params p = {0};
    /* 300 columns: more than 256 lanes, so a tie across lanes and across the tree */
    kf_shape s = kf_shape_2d(3, 300);
    float x[900];
    for (int i = 0; i < 900; i++) {
        x[i] = kt_rand_f32(-1, 0.5f);
    }
    x[7] = x[200] = x[299] = 1;    /* row 0: ties, first at 7 */
    x[300 + 280] = NAN;            /* row 1: NaN late, beyond lane 255 ... */
    x[300 + 290] = NAN;            /* ... and a second one */
    x[300 + 3] = 2;                /* ... with a larger number first */
    x[600 + 257] = x[600 + 1] = 1; /* row 2: tie between lane 1 and lane 1's second element */
    const float *v[] = {x};
    float g[3] = {1, 2, 3};
    spec_run r;
    KT_CHECK_OK(spec_run_make(&r, max, &p, &s, v, g));
    kf_tensor *got;
    KT_CHECK_OK(kf_tensor_create(&s, &got));
    kf_tensor *tensors[4] = {r.in[0], r.out, r.grad_out, got};
    const bool is_index[4] = {0};
    kf_kernel *k = max->kernel_backward(&s, &p, KF_DTYPE_F32, 0);
    kf_status st = run_bindings(ctx, k, tensors, is_index, 4);
    kf_kernel_destroy(k);
    KT_CHECK_OK(st);
    for (int i = 0; i < 900; i++) {
        KT_CHECK(got->data[i] == r.grad_in[0]->data[i], "max grad[%d] = %g, the spec says %g", i,
                 got->data[i], r.grad_in[0]->data[i]);
    }
    KT_CHECK(got->data[7] == 1 && got->data[300 + 280] == 2 && got->data[600 + 1] == 3,
             "the gradient lands on the first maximum / first NaN");
    kf_tensor_destroy(got);
    spec_run_free(&r);
}
