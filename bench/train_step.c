/* A training step of an MLP: forward, backward and an AdamW update through kf_trainer, as
 * `kfuse train` runs it: one submission, waited for. Two cases: the digits model of
 * examples/digits/mlp.kf (the batch uploaded every step, as `kfuse train` does), and the wide MLP
 * of issue 13 (4096 tokens, 4096 -> 16384 -> gelu -> 4096, cross_entropy), whose batch is
 * uploaded once and stays on the device, as a PyTorch loop's CUDA tensors do
 * (bench/torch_train_step.py times the same step). Fused and unfused (kf_trainer_desc.no_fuse)
 * trainers start from the same params and see the same batches; their losses are compared, so a
 * fast wrong step cannot pass unnoticed. Time is the wall clock of a whole step (upload where
 * there is one, submission, wait). */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct train_bench {
    kf_trainer *t[2];
    const char *names[2];
    const kf_tensor *batch[2];
    bool batch_once;  /* upload the batch at the first step only */
    bool uploaded[2]; /* per trainer */
} train_bench;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static kf_status time_step(void *user, uint32_t which, kf_timing *out) {
    train_bench *b = user;
    double t0 = now_ms();
    uint32_t count = b->batch_once && b->uploaded[which] ? 0u : 2u;
    kf_status st = kf_trainer_step(b->t[which], b->names, b->batch, count);
    b->uploaded[which] = true;
    out->median_ms = out->min_ms = now_ms() - t0;
    out->gpu_timestamps = false;
    return st;
}

void kf_bench_run_train_step(kf_context *ctx, const kf_bench_case *c, uint32_t repeat,
                             uint64_t seed, kf_bench_result *r) {
    char spec[1024];
    kf_bench_spec(c, spec, sizeof spec);
    kf_graph *g = NULL;
    kf_spec_error err;
    kf_status st = kf_spec_parse(spec, strlen(spec), &g, &err);
    train_bench b = {.names = {"x", "labels"}, .batch_once = c->ops == 1};
    kf_tensor *x = NULL, *labels = NULL;
    kf_shape xs = kf_shape_2d(c->tokens, c->dim), ls = kf_shape_1d(c->tokens);
    if (st == KF_OK) {
        st = kf_tensor_create(&xs, &x);
    }
    if (st == KF_OK) {
        st = kf_tensor_create(&ls, &labels);
    }
    if (st == KF_OK) {
        kf_tensor_fill_random(x, seed, 0.0f, 1.0f);
        for (uint32_t i = 0; i < c->tokens; i++) {
            labels->data[i] = (float)((seed + i * 7919u) % c->cols);
        }
    }
    b.batch[0] = x;
    b.batch[1] = labels;
    for (uint32_t v = 0; v < 2 && st == KF_OK; v++) {
        kf_trainer_desc desc = {
            .optimizer = {.kind = KF_OPTIMIZER_ADAMW, .lr = 1e-3f}, .seed = seed, .no_fuse = v};
        st = kf_trainer_create(ctx, g, &desc, &b.t[v]);
        if (st == KF_OK) {
            kf_plan_summary s;
            kf_plan_summary_get(kf_trainer_plan(b.t[v]), &s);
            *(v ? &r->dispatches_unfused : &r->dispatches_fused) =
                kf_trainer_dispatches_per_step(b.t[v]);
            *(v ? &r->bytes_unfused : &r->bytes_fused) = s.bytes;
        }
    }
    if (st == KF_OK) {
        kf_timing tm[2] = {{0}};
        st = kf_bench_interleave(2, repeat ? repeat : 10, time_step, &b, tm);
        r->fused = tm[0];
        r->unfused = tm[1];
    }
    const float *lf = NULL, *lu = NULL;
    uint64_t nf = 0, nu = 0;
    if (st == KF_OK) {
        st = kf_trainer_losses(b.t[0], &lf, &nf);
    }
    if (st == KF_OK) {
        st = kf_trainer_losses(b.t[1], &lu, &nu);
    }
    if (st == KF_OK && nf == nu) {
        for (uint64_t i = 0; i < nf; i++) {
            double d = fabs((double)lf[i] - lu[i]) / fmax(fabs((double)lu[i]), 1e-6);
            r->max_rel_diff = d > r->max_rel_diff ? d : r->max_rel_diff;
        }
        /* the plan's bytes (fused) and the update's: p, g, m, v read and p, m, v written */
        uint64_t params =
            (uint64_t)c->dim * c->ffn_dim + c->ffn_dim + (uint64_t)c->ffn_dim * c->cols + c->cols;
        r->work = (double)r->bytes_fused + 28.0 * (double)params;
        if (r->max_rel_diff > 1e-3) {
            r->failed = true;
            snprintf(r->note, sizeof r->note, "fused and unfused losses differ by %.3g",
                     r->max_rel_diff);
        }
    }
    if (st != KF_OK) {
        /* a step that does not fit the device (a buffer above its binding limit) is skipped with
         * the reason, as every case is */
        r->skipped = st == KF_ERROR_LIMIT || st == KF_ERROR_OUT_OF_MEMORY;
        r->failed = !r->skipped;
        snprintf(r->note, sizeof r->note, "%s: %s", kf_status_str(st),
                 g ? kf_context_last_error(ctx) : err.message);
    }
    kf_trainer_destroy(b.t[0]);
    kf_trainer_destroy(b.t[1]);
    kf_tensor_destroy(x);
    kf_tensor_destroy(labels);
    kf_graph_destroy(g);
}
