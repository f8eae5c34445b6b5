/* A 2-layer MLP forward as two chained plans, its weights on the GPU.
 *
 *   layer 1: h = gelu(x @ w1 + b1)      layer 2: y = h @ w2 + b2
 *
 * The weights are uploaded once as GPU tensors and bound to the plans; h lives only on the
 * device (layer 1's output tensor is layer 2's input tensor); the two plans run as one
 * submission. Each of the 100 iterations uploads x and downloads y, and nothing else: the
 * context's byte counters prove it. The first run creates no pipeline (kf_graph_compile did).
 *
 * Uses only the public header: build it against an installed kfuse with
 *     cc mlp_chain.c $(pkg-config --cflags --libs kfuse) -o mlp_chain
 * Exits 0 when every check holds. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <kfuse.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { BATCH = 64, D_IN = 128, HIDDEN = 256, D_OUT = 32, ITERATIONS = 100 };

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int fail(kf_context *ctx, const char *what, kf_status st) {
    fprintf(stderr, "mlp_chain: %s: %s: %s\n", what, kf_status_str(st),
            ctx ? kf_context_last_error(ctx) : "");
    return 1;
}

#define CHECK(what, expr)                                                                          \
    do {                                                                                           \
        kf_status st_ = (expr);                                                                    \
        if (st_ != KF_OK) {                                                                        \
            return fail(ctx, what, st_);                                                           \
        }                                                                                          \
    } while (0)

static kf_status compile(kf_context *ctx, const char *text, kf_plan **out) {
    kf_graph *g = NULL;
    kf_spec_error err;
    kf_status st = kf_spec_parse(text, strlen(text), &g, &err);
    if (st == KF_OK) {
        st = kf_graph_compile(ctx, g, NULL, out);
    } else {
        fprintf(stderr, "mlp_chain: %u:%u: %s\n", err.line, err.column, err.message);
    }
    kf_graph_destroy(g);
    return st;
}

static kf_status gpu_random(kf_context *ctx, kf_shape shape, uint64_t seed, kf_gpu_tensor **out) {
    kf_tensor *t = NULL;
    kf_status st = kf_tensor_create(&shape, &t);
    if (st == KF_OK) {
        kf_tensor_fill_random(t, seed, -0.5f, 0.5f);
        st = kf_gpu_tensor_from(ctx, t, KF_DTYPE_F32, out);
    }
    kf_tensor_destroy(t);
    return st;
}

int main(void) {
    kf_context *ctx = NULL;
    char msg[512] = "";
    kf_context_desc desc = {.error_out = msg, .error_out_size = sizeof msg};
    if (kf_context_create(&desc, &ctx) != KF_OK) {
        fprintf(stderr, "mlp_chain: no context: %s\n", msg);
        return 1;
    }
    char text1[256], text2[256];
    snprintf(text1, sizeof text1,
             "x: f32[%d, %d]\nw1: f32[%d, %d]\nb1: f32[%d]\n"
             "h = matmul(x, w1) |> add(b1) |> gelu\nout h\n",
             BATCH, D_IN, D_IN, HIDDEN, HIDDEN);
    snprintf(text2, sizeof text2,
             "h: f32[%d, %d]\nw2: f32[%d, %d]\nb2: f32[%d]\ny = matmul(h, w2) |> add(b2)\nout y\n",
             BATCH, HIDDEN, HIDDEN, D_OUT, D_OUT);
    kf_plan *layer1 = NULL, *layer2 = NULL;
    double t0 = now_ms();
    CHECK("compile layer 1", compile(ctx, text1, &layer1));
    CHECK("compile layer 2", compile(ctx, text2, &layer2));
    double compile_ms = now_ms() - t0;

    /* Weights: uploaded once, then only ever read by the plans. */
    kf_gpu_tensor *w1, *b1, *w2, *b2, *h, *y;
    CHECK("w1", gpu_random(ctx, (kf_shape){2, {D_IN, HIDDEN}}, 1, &w1));
    CHECK("b1", gpu_random(ctx, (kf_shape){1, {HIDDEN}}, 2, &b1));
    CHECK("w2", gpu_random(ctx, (kf_shape){2, {HIDDEN, D_OUT}}, 3, &w2));
    CHECK("b2", gpu_random(ctx, (kf_shape){1, {D_OUT}}, 4, &b2));
    CHECK("h", kf_gpu_tensor_create(ctx, &(kf_shape){2, {BATCH, HIDDEN}}, KF_DTYPE_F32, &h));
    CHECK("y", kf_gpu_tensor_create(ctx, &(kf_shape){2, {BATCH, D_OUT}}, KF_DTYPE_F32, &y));
    CHECK("bind w1", kf_plan_bind_input(layer1, "w1", w1));
    CHECK("bind b1", kf_plan_bind_input(layer1, "b1", b1));
    CHECK("bind h out", kf_plan_bind_output(layer1, "h", h));
    CHECK("bind h in", kf_plan_bind_input(layer2, "h", h));
    CHECK("bind w2", kf_plan_bind_input(layer2, "w2", w2));
    CHECK("bind b2", kf_plan_bind_input(layer2, "b2", b2));
    CHECK("bind y", kf_plan_bind_output(layer2, "y", y));

    kf_tensor *x = NULL, *out = NULL;
    CHECK("x", kf_tensor_create(&(kf_shape){2, {BATCH, D_IN}}, &x));
    CHECK("out", kf_tensor_create(&(kf_shape){2, {BATCH, D_OUT}}, &out));
    kf_context_stats before, first, after;
    CHECK("stats", kf_context_stats_get(ctx, &before));
    kf_plan *both[] = {layer1, layer2};
    double first_ms = 0.0, checksum = 0.0;
    for (int it = 0; it < ITERATIONS; it++) {
        kf_tensor_fill_random(x, 100 + (uint64_t)it, -1.0f, 1.0f);
        double t = now_ms();
        CHECK("set x", kf_plan_set_input(layer1, "x", x));
        CHECK("run", kf_plan_run_sequence(both, 2));
        CHECK("get y", kf_gpu_tensor_to(y, out));
        if (it == 0) {
            first_ms = now_ms() - t;
            CHECK("stats", kf_context_stats_get(ctx, &first));
        }
        for (uint64_t i = 0; i < kf_tensor_size(out); i++) {
            checksum += out->data[i];
        }
    }
    CHECK("stats", kf_context_stats_get(ctx, &after));

    uint64_t up = after.upload_bytes - before.upload_bytes;
    uint64_t down = after.download_bytes - before.download_bytes;
    uint64_t want_up = (uint64_t)ITERATIONS * BATCH * D_IN * 4;
    uint64_t want_down = (uint64_t)ITERATIONS * BATCH * D_OUT * 4;
    uint64_t first_pipelines = first.pipelines_compiled - before.pipelines_compiled;
    uint64_t submissions = after.submissions - before.submissions;
    printf("compile %.1f ms (both plans), first run %.1f ms, %d runs\n", compile_ms, first_ms,
           ITERATIONS);
    printf("uploaded %llu bytes (x: %llu), downloaded %llu bytes (y: %llu), pipelines created "
           "by the first run: %llu, checksum %.6g\n",
           (unsigned long long)up, (unsigned long long)want_up, (unsigned long long)down,
           (unsigned long long)want_down, (unsigned long long)first_pipelines, checksum);
    int rc = 0;
    if (up != want_up || down != want_down) {
        fprintf(stderr, "mlp_chain: bytes moved other than x and y\n");
        rc = 1;
    }
    if (first_pipelines != 0) {
        fprintf(stderr, "mlp_chain: the first run created pipelines\n");
        rc = 1;
    }
    /* One submission per run for both plans, plus the downloads' copies. */
    if (submissions > 2u * ITERATIONS) {
        fprintf(stderr, "mlp_chain: %llu submissions for %d runs\n",
                (unsigned long long)submissions, ITERATIONS);
        rc = 1;
    }
    if (!isfinite(checksum)) {
        fprintf(stderr, "mlp_chain: non-finite output\n");
        rc = 1;
    }
    kf_tensor_destroy(x);
    kf_tensor_destroy(out);
    kf_plan_destroy(layer1);
    kf_plan_destroy(layer2);
    kf_gpu_tensor_destroy(w1);
    kf_gpu_tensor_destroy(b1);
    kf_gpu_tensor_destroy(w2);
    kf_gpu_tensor_destroy(b2);
    kf_gpu_tensor_destroy(h);
    kf_gpu_tensor_destroy(y);
    kf_context_destroy(ctx);
    return rc;
}
