/* The error model (docs/errors.md): every public fallible call, given a bad argument, returns a
 * status and leaves a message naming the culprit on the object the caller holds (the context
 * for everything made from one, the kernel while building it, the graph while building it, the
 * out-parameter of the few calls that have no object). Each message is cleared before its call,
 * so an old message cannot pass for a new one. */
#include "harness.h"
#include "runtime/runtime.h"

#include <stdlib.h>
#include <string.h>

static const char *g_where; /* the message the last CHECK read */

/* Clears the context's message so that the next one is the call's own. */
static void clear(kf_context *ctx) {
    kf__context_set_error(ctx, KF_OK, "%s", "");
}

#define EXPECT(ctx, want, call, message, culprit)                                                  \
    do {                                                                                           \
        clear(ctx);                                                                                \
        kf_status st_ = (call);                                                                    \
        g_where = (message);                                                                       \
        if (st_ != (want)) {                                                                       \
            kt_fail(__FILE__, __LINE__, "%s: %s, want %s (message '%s')", #call,                   \
                    kf_status_str(st_), kf_status_str(want), g_where ? g_where : "(null)");        \
        } else if (!g_where || !strstr(g_where, culprit)) {                                        \
            kt_fail(__FILE__, __LINE__, "%s: the message does not name '%s': '%s'", #call,         \
                    culprit, g_where ? g_where : "(null)");                                        \
        } else {                                                                                   \
            checked++;                                                                             \
        }                                                                                          \
    } while (0)

static kf_graph *parse(const char *text) {
    kf_graph *g = NULL;
    kf_spec_error err;
    return kf_spec_parse(text, strlen(text), &g, &err) == KF_OK ? g : NULL;
}

KT_TEST(unit, error_model_context_buffers_pipelines_dispatch) {
    KT_NEED_GPU(ctx);
    uint32_t checked = 0;
    const char *(*last)(const kf_context *) = kf_context_last_error;
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_context_adapter_info(ctx, NULL), last(ctx), "out");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_context_float_behaviour(ctx, NULL), last(ctx), "out");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_context_stats_get(ctx, NULL), last(ctx), "out");
    kf_buffer *b = NULL, *v = NULL;
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_buffer_create(ctx, 0, &b), last(ctx), "size");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_buffer_create(ctx, 4, NULL), last(ctx), "out");
    KT_CHECK_OK(kf_buffer_create(ctx, 64, &b));
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_buffer_view(b, 2, 4, &v), last(ctx),
           "minStorageBufferOffsetAlignment");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_buffer_view(b, 0, 4, NULL), last(ctx), "out");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_buffer_upload(b, 0, NULL, 4), last(ctx), "data");
    uint32_t word;
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_buffer_download(b, 62, &word, 4), last(ctx),
           "offset 62");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_buffer_download(b, 0, NULL, 4), last(ctx), "data");
    kf_pipeline_desc pd = {0};
    kf_pipeline *pipe = NULL;
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_pipeline_get(ctx, &pd, &pipe), last(ctx), "wgsl");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_pipeline_get(ctx, NULL, &pipe), last(ctx), "desc");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_context_run(ctx, NULL, 1), last(ctx), "dispatches");
    kf_dispatch d = {0};
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_context_run(ctx, &d, 1), last(ctx), "pipeline");
    kf_timing timing;
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_context_time(ctx, &d, 0, 1, &timing), last(ctx),
           "count");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_context_time(ctx, &d, 1, 1, NULL), last(ctx), "out");
    kf_copy_pair pair = {b, b, 6};
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_save_activations(ctx, &pair, 1, NULL), last(ctx),
           "pair 0: src and dst");
    kf_buffer *b2 = NULL;
    KT_CHECK_OK(kf_buffer_create(ctx, 64, &b2));
    pair.dst = b2;
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_save_activations(ctx, &pair, 1, NULL), last(ctx),
           "size 6");
    kf_buffer_destroy(b2);
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_save_activations(ctx, NULL, 1, NULL), last(ctx),
           "pairs");
    kf_dispatch rec[1];
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT,
           kf_save_activations_record(ctx, &pair, 1, NULL, rec, NULL), last(ctx), "bindings");
    kf_buffer_destroy(b);
    /* No context yet: the message goes to desc.error_out. */
    char err[512] = "";
    kf_context_desc bad = {.library_path = "/nonexistent/libkfuse-test-webgpu.so",
                           .error_out = err,
                           .error_out_size = sizeof err};
    kf_context *none = NULL;
    kf_status st = kf_context_create(&bad, &none);
    KT_CHECK(st == KF_ERROR_NO_LIBRARY && none == NULL && strstr(err, "libkfuse-test-webgpu"),
             "kf_context_create: %s: '%s'", kf_status_str(st), err);
    KT_CHECK(checked == 20, "%u checks", checked);
}

KT_TEST(unit, error_model_kernels_tensors_ops) {
    KT_NEED_GPU(ctx);
    uint32_t checked = 0;
    const char *(*last)(const kf_context *) = kf_context_last_error;
    /* kernels: the message is the kernel's (kf_kernel_error) */
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    uint32_t wg[3] = {64, 1, 1};
    kf_kernel *k = kf_kernel_identity(f32, wg);
    KT_CHECK(k, "identity kernel");
    kf_binding_info info;
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_kernel_binding_info(k, 99, &info), kf_kernel_error(k),
           "99");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_kernel_binding_info(k, 0, NULL), kf_kernel_error(k),
           "out");
    KT_CHECK(kf_kernel_status(k) == KF_OK, "a failed query made the kernel failed");
    kf_dispatch dd;
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_kernel_dispatch(ctx, NULL, NULL, &dd), last(ctx),
           "k is NULL");
    kf_kernel_destroy(k);
    k = kf_kernel_identity(f32, wg);
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_kernel_interpret(k, NULL), kf_kernel_error(k),
           "desc");
    kf_kernel_destroy(k);
    k = kf_kernel_identity(f32, wg);
    kf_kernel_launch launch = {0};
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_kernel_run(ctx, k, &launch), kf_kernel_error(k),
           "buffer");
    kf_kernel_destroy(k);
    k = kf_kernel_identity(f32, wg);
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_kernel_run(ctx, k, NULL), kf_kernel_error(k),
           "launch");
    kf_dispatch d;
    kf_kernel_destroy(k);
    k = kf_kernel_identity(f32, wg);
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_kernel_dispatch(ctx, k, &launch, NULL),
           kf_kernel_error(k), "out");
    (void)d;
    kf_kernel_destroy(k);

    /* GPU tensors: the context's */
    kf_gpu_tensor *gt = NULL;
    kf_shape zero = {2, {3, 0, 0, 0}};
    EXPECT(ctx, KF_ERROR_SHAPE, kf_gpu_tensor_create(ctx, &zero, KF_DTYPE_F32, &gt), last(ctx),
           "3x0");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_gpu_tensor_from(ctx, NULL, KF_DTYPE_F32, &gt),
           last(ctx), "t is NULL");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_gpu_tensor_create(ctx, NULL, KF_DTYPE_F32, &gt),
           last(ctx), "shape");
    kf_shape s23 = kf_shape_2d(2, 3), s32 = kf_shape_2d(3, 2);
    KT_CHECK_OK(kf_gpu_tensor_create(ctx, &s23, KF_DTYPE_F32, &gt));
    kf_tensor *host = NULL;
    KT_CHECK_OK(kf_tensor_create(&s32, &host));
    EXPECT(ctx, KF_ERROR_SHAPE, kf_gpu_tensor_to(gt, host), last(ctx), "3x2");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_gpu_tensor_to(gt, NULL), last(ctx), "t is NULL");

    /* operators run on a context: the context's */
    const kf_operator *relu = kf_op_find("relu");
    kf_gpu_tensor *in[1] = {gt};
    kf_gpu_tensor *wrong = NULL;
    KT_CHECK_OK(kf_gpu_tensor_create(ctx, &s32, KF_DTYPE_F32, &wrong));
    EXPECT(ctx, KF_ERROR_SHAPE,
           kf_op_run_forward(ctx, relu, NULL, (const kf_gpu_tensor **)in, wrong), last(ctx), "3x2");
    kf_verify_result vr;
    kf_verify_case vc = {.op = NULL};
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_op_verify(ctx, &vc, &vr), vr.message, "op");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_op_check_gradient(&vc, &vr), vr.message, "op");
    kf_matmul_tuning tuning;
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_matmul_tune(ctx, 0, 4, 4, &tuning), last(ctx), "m");
    /* operators without a context: their msg out-parameter */
    char msg[256] = "";
    kf_op_params params = {0};
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT,
           kf_op_param_set(kf_op_find("leaky_relu"), &params, "beta", 1.0, msg, sizeof msg), msg,
           "beta");
    msg[0] = '\0';
    params.alpha = -5.0f;
    params.given = 0;
    kf_op_params bad_eps = {0};
    kf_op_param_set(kf_op_find("rmsnorm"), &bad_eps, "eps", 1e-5, NULL, 0);
    bad_eps.eps = -1.0f;
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT,
           kf_op_params_check(kf_op_find("rmsnorm"), &bad_eps, msg, sizeof msg), msg, "eps");
    msg[0] = '\0';
    kf_shape two[2] = {kf_shape_2d(4, 5), kf_shape_2d(6, 7)};
    kf_shape out;
    EXPECT(ctx, KF_ERROR_SHAPE, kf_op_shape(kf_op_find("matmul"), two, NULL, &out, msg, sizeof msg),
           msg, "matmul");
    kf_gpu_tensor_destroy(gt);
    kf_gpu_tensor_destroy(wrong);
    kf_tensor_destroy(host);
    KT_CHECK(checked == 19, "%u checks", checked);
}

KT_TEST(unit, error_model_graphs_plans_training) {
    KT_NEED_GPU(ctx);
    uint32_t checked = 0;
    const char *(*last)(const kf_context *) = kf_context_last_error;
    /* graphs: the graph's (kf_graph_error) */
    kf_graph *g = kf_graph_create();
    kf_shape s = kf_shape_2d(3, 4);
    kf_node x = kf_graph_input(g, "x", &s, KF_DTYPE_F32);
    kf_graph_op(g, "no_such_op", &x, 1, NULL);
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_graph_status(g), kf_graph_error(g), "no_such_op");
    kf_graph_destroy(g);
    g = kf_graph_create();
    x = kf_graph_input(g, "x", &s, KF_DTYPE_F32);
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_graph_output(g, NULL, x), kf_graph_error(g), "name");
    kf_graph_destroy(g);
    g = kf_graph_create();
    x = kf_graph_input(g, "x", &s, KF_DTYPE_F32);
    const char *name;
    kf_shape shape;
    kf_dtype dtype;
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_graph_input_info(g, 7, &name, &shape, &dtype),
           kf_graph_error(g), "7");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_graph_output_info(g, 3, &name, &shape, &dtype),
           kf_graph_error(g), "3");
    kf_graph_destroy(g);
    /* compiling: the context's */
    g = parse("x: f32[3, 4]\ny = relu(x)\nout y\n");
    KT_CHECK(g, "parse");
    kf_plan *p = NULL;
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_graph_compile(ctx, NULL, NULL, &p), last(ctx), "g");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_graph_compile(ctx, g, NULL, NULL), last(ctx), "out");
    KT_CHECK_OK(kf_graph_compile(ctx, g, NULL, &p));
    /* plans: the context's */
    kf_tensor *t = NULL, *wrong = NULL;
    KT_CHECK_OK(kf_tensor_create(&s, &t));
    KT_CHECK_OK(kf_tensor_create(&(kf_shape){2, {4, 3}}, &wrong));
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_plan_run(p), last(ctx), "x");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_plan_set_input(p, "nope", t), last(ctx), "nope");
    EXPECT(ctx, KF_ERROR_SHAPE, kf_plan_set_input(p, "x", wrong), last(ctx), "4x3");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_plan_set_input(p, "x", NULL), last(ctx), "value");
    KT_CHECK_OK(kf_plan_set_input(p, "x", t));
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_plan_get_output(p, "y", t), last(ctx), "y");
    KT_CHECK_OK(kf_plan_run(p));
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_plan_get_output(p, "nope", t), last(ctx), "nope");
    EXPECT(ctx, KF_ERROR_SHAPE, kf_plan_get_output(p, "y", wrong), last(ctx), "4x3");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_plan_summary_get(p, NULL), last(ctx), "out");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_plan_time(p, 1, NULL), last(ctx), "out");
    uint32_t n;
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_plan_dispatches(p, NULL, &n), last(ctx), "out");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_plan_verify(p, 1, NULL), last(ctx), "report");
    kf_tensor *rnd = NULL;
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_plan_random_input(p, "nope", 1, &rnd), last(ctx),
           "nope");
    const char *names[1] = {"nope"};
    const kf_tensor *values[1] = {t};
    kf_plan_report rep;
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_plan_check(p, names, values, 1, 1, &rep), last(ctx),
           "nope");
    kf_gpu_tensor *gt = NULL;
    KT_CHECK_OK(kf_gpu_tensor_create(ctx, &(kf_shape){2, {4, 3}}, KF_DTYPE_F32, &gt));
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_plan_bind_input(p, "nope", gt), last(ctx), "nope");
    EXPECT(ctx, KF_ERROR_SHAPE, kf_plan_bind_output(p, "y", gt), last(ctx), "4x3");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_plan_bind_input_at(p, "x", gt, 1 << 20), last(ctx),
           "input x");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_plan_bind_output_at(p, "nope", gt, 0), last(ctx),
           "nope");
    kf_plan *seq[2] = {p, NULL};
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_plan_run_sequence(seq, 2), last(ctx), "plans[1]");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_plan_time_sequence(seq, 1, 1, NULL), last(ctx),
           "out");
    kf_plan_destroy(p);
    kf_graph_destroy(g);

    /* optimizers and trainers: the context's */
    kf_optimizer_desc od = {.kind = KF_OPTIMIZER_SGD, .lr = -1.0f};
    kf_gpu_tensor *params[1] = {gt}, *grads[1] = {gt};
    kf_optimizer *o = NULL;
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_optimizer_create(ctx, &od, params, grads, 1, &o),
           last(ctx), "lr");
    od.lr = 0.1f;
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_optimizer_create(ctx, &od, params, grads, 1, &o),
           last(ctx), "parameter 0");
    kf_gpu_tensor *gg = NULL;
    KT_CHECK_OK(kf_gpu_tensor_create(ctx, &(kf_shape){2, {4, 3}}, KF_DTYPE_F32, &gg));
    grads[0] = gg;
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_optimizer_create(ctx, &od, params, grads, 1, NULL),
           last(ctx), "out");
    KT_CHECK_OK(kf_optimizer_create(ctx, &od, params, grads, 1, &o));
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_optimizer_state_get(o, 5, 0, wrong), last(ctx), "5");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_optimizer_record(o, NULL, &n), last(ctx), "out");
    kf_optimizer_destroy(o);
    kf_verify_result vr;
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_optimizer_verify(ctx, &od, NULL, 1, 1, 1, &vr),
           vr.message, "shapes");
    g = parse("x: f32[3, 4]\nlabels: i32[3]\nparam w: f32[4, 2]\n"
              "y = cross_entropy(matmul(x, w), labels)\nout y\n");
    KT_CHECK(g, "parse a training graph");
    const char *bn[1] = {"nope"};
    const kf_tensor *bv[1] = {t};
    kf_trainer_desc td = {.optimizer = od, .loss = "not_an_output"};
    kf_trainer *tr = NULL;
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_trainer_create(ctx, g, &td, &tr), last(ctx),
           "not_an_output");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_trainer_create(ctx, NULL, &td, &tr), last(ctx),
           "g is NULL");
    td.loss = "y";
    KT_CHECK_OK(kf_trainer_create(ctx, g, &td, &tr));
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_trainer_set_param(tr, "w", NULL), last(ctx),
           "param w");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_trainer_step(tr, NULL, bv, 1), last(ctx), "names");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_trainer_set_param(tr, "nope", t), last(ctx), "nope");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_trainer_get_param(tr, "nope", t), last(ctx), "nope");
    EXPECT(ctx, KF_ERROR_SHAPE, kf_trainer_set_param(tr, "w", t), last(ctx), "3x4");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_trainer_step(tr, bn, bv, 1), last(ctx), "nope");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_trainer_losses(tr, NULL, NULL), last(ctx), "losses");
    EXPECT(ctx, KF_ERROR_INVALID_ARGUMENT, kf_trainer_evaluate(tr, bn, bv, 1, 1, NULL, NULL),
           last(ctx), "nope");
    kf_trainer_destroy(tr);
    kf_graph_destroy(g);

    /* the language and files: their out-parameters */
    kf_spec_error se;
    kf_graph *pg = NULL;
    const char *text = "x: f32[3]\ny = no_such_op(x)\nout y\n";
    EXPECT(ctx, KF_ERROR_PARSE, kf_spec_parse(text, strlen(text), &pg, &se), se.message,
           "no_such_op");
    EXPECT(ctx, KF_ERROR_IO, kf_spec_parse_file("/nonexistent/spec.kf", &pg, &se), se.message,
           "/nonexistent/spec.kf");
    char msg[256] = "";
    kf_tensor *read = NULL;
    EXPECT(ctx, KF_ERROR_IO, kf_npy_read("/nonexistent/a.npy", &read, msg, sizeof msg), msg,
           "/nonexistent/a.npy");
    kf_tensor_destroy(t);
    kf_tensor_destroy(wrong);
    kf_gpu_tensor_destroy(gt);
    kf_gpu_tensor_destroy(gg);
    KT_CHECK(checked == 44, "%u checks", checked);
}
