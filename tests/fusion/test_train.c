/* Training: `param` in the language (initialisers, printer round trip), kf_trainer's step as one
 * submission that uploads only the batch and downloads nothing, the loss history, the loss
 * falling, evaluation, and refusals. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static kf_graph *parse(const char *text) {
    kf_graph *g = NULL;
    kf_spec_error err;
    if (kf_spec_parse(text, strlen(text), &g, &err) != KF_OK) {
        fprintf(stderr, "parse: %u:%u: %s\n", err.line, err.column, err.message);
        return NULL;
    }
    return g;
}

static const char *mlp = "x: f32[13, 7]\n"
                         "labels: i32[13]\n"
                         "param w1: f32[7, 11]\n"
                         "param b1: f32[11] = uniform(0.25)\n"
                         "param w2: f32[11, 5]\n"
                         "param b2: f32[5] = zeros\n"
                         "h = matmul(x, w1) |> add(b1) |> gelu\n"
                         "logits = matmul(h, w2) |> add(b2)\n"
                         "loss = cross_entropy(logits, labels)\n"
                         "out loss\n";

KT_CPU_TEST(unit, param_declarations_initialisers_and_round_trip) {
    kf_graph *g = parse(mlp);
    KT_CHECK(g, "parse");
    uint32_t params = 0;
    kf_param_init init[4];
    for (uint32_t i = 0; i < kf_graph_input_count(g); i++) {
        kf_param_init in = {0};
        if (kf_graph_input_is_param(g, i, &in)) {
            init[params++] = in;
        }
    }
    KT_CHECK(params == 4, "%u params", params);
    KT_CHECK(init[0].kind == KF_INIT_DEFAULT && init[1].kind == KF_INIT_UNIFORM &&
                 init[1].bound == 0.25f && init[3].kind == KF_INIT_ZEROS,
             "initialisers");
    char *text = kf_graph_format(g);
    KT_CHECK(text && strstr(text, "param w1: f32[7, 11]\n") &&
                 strstr(text, "param b1: f32[11] = uniform(0.25)\n") &&
                 strstr(text, "param b2: f32[5] = zeros\n") &&
                 !strncmp(text, "x: f32[13, 7]\n", 14),
             "format: %s", text ? text : "(null)");
    kf_graph *again = parse(text);
    char *text2 = again ? kf_graph_format(again) : NULL;
    KT_CHECK(text2 && !strcmp(text, text2), "round trip");
    kf_free(text);
    kf_free(text2);
    kf_graph_destroy(again);
    /* the default: uniform(1/sqrt(fan_in)) for a matrix, zeros for a bias */
    kf_shape ws = kf_shape_2d(64, 128), bs = kf_shape_1d(9);
    kf_tensor *w = NULL, *b = NULL;
    KT_CHECK_OK(kf_tensor_create(&ws, &w));
    KT_CHECK_OK(kf_tensor_create(&bs, &b));
    KT_CHECK_OK(kf_param_init_fill(NULL, 7, 0, w));
    double lo = 1, hi = -1;
    for (uint64_t i = 0; i < kf_tensor_size(w); i++) {
        lo = fmin(lo, w->data[i]);
        hi = fmax(hi, w->data[i]);
    }
    KT_CHECK(lo >= -0.125 && hi < 0.125 && lo < -0.12 && hi > 0.12, "range [%g, %g]", lo, hi);
    KT_CHECK_OK(kf_param_init_fill(NULL, 7, 1, b));
    for (uint64_t i = 0; i < kf_tensor_size(b); i++) {
        KT_CHECK(b->data[i] == 0.0f, "bias default is zeros");
    }
    kf_tensor_destroy(w);
    kf_tensor_destroy(b);
    kf_graph_destroy(g);
    /* refusals */
    kf_graph *bad = NULL;
    kf_spec_error err;
    const char *texts[] = {"param w: i32[3]\ny = relu(w)\n", "param w f32[3]\n",
                           "param w: f32[3] = uniform(0)\ny = relu(w)\n",
                           "param w: f32[3] = ones\ny = relu(w)\n"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        KT_CHECK(kf_spec_parse(texts[i], strlen(texts[i]), &bad, &err) == KF_ERROR_PARSE && !bad,
                 "refused: %s", texts[i]);
        KT_CHECK(err.line == 1, "line of %s", texts[i]);
    }
    /* `param` stays usable as a name */
    const char *named = "param: f32[3]\ny = relu(param)\n";
    KT_CHECK(kf_spec_parse(named, strlen(named), &bad, &err) == KF_OK, "%s", err.message);
    kf_graph_destroy(bad);
}

static kf_tensor *batch_tensor(kf_shape s, bool labels, uint32_t classes) {
    kf_tensor *t = NULL;
    if (kf_tensor_create(&s, &t) != KF_OK) {
        return NULL;
    }
    for (uint64_t i = 0; i < kf_tensor_size(t); i++) {
        t->data[i] = labels ? (float)(kt_rand_u64() % classes) : kt_rand_f32(-1.0f, 1.0f);
    }
    return t;
}

KT_TEST(fusion, trainer_step_is_one_submission_moving_only_the_batch) {
    KT_NEED_GPU(ctx);
    kf_graph *g = parse(mlp);
    KT_CHECK(g, "parse");
    kf_optimizer_desc kinds[2] = {{.kind = KF_OPTIMIZER_SGD, .lr = 0.2f, .momentum = 0.9f},
                                  {.kind = KF_OPTIMIZER_ADAMW, .lr = 0.02f}};
    for (int k = 0; k < 2; k++) {
        kf_trainer_desc desc = {.optimizer = kinds[k], .seed = kt_rand_u64()};
        kf_trainer *t = NULL;
        KT_CHECK_OK(kf_trainer_create(ctx, g, &desc, &t));
        KT_CHECK(kf_trainer_param_count(t) == 4 && !strcmp(kf_trainer_param_name(t, 2), "w2"),
                 "params");
        kf_tensor *x = batch_tensor(kf_shape_2d(13, 7), false, 0);
        kf_tensor *y = batch_tensor(kf_shape_1d(13), true, 5);
        const char *names[2] = {"x", "labels"};
        const kf_tensor *batch[2] = {x, y};
        const uint64_t batch_bytes = (13 * 7 + 13) * 4;
        float before_loss = 0.0f;
        KT_CHECK_OK(kf_trainer_evaluate(t, names, batch, 2, 13, &before_loss, NULL));
        kf_context_stats s0, s1;
        const uint32_t steps = 40;
        for (uint32_t i = 0; i < steps; i++) {
            kf_context_stats_get(ctx, &s0);
            KT_CHECK_OK(kf_trainer_step(t, names, batch, 2));
            kf_context_stats_get(ctx, &s1);
            KT_CHECK(s1.submissions - s0.submissions == 1, "step %u: %llu submissions", i,
                     (unsigned long long)(s1.submissions - s0.submissions));
            KT_CHECK(s1.upload_bytes - s0.upload_bytes == batch_bytes,
                     "step %u uploaded %llu bytes, the batch is %llu", i,
                     (unsigned long long)(s1.upload_bytes - s0.upload_bytes),
                     (unsigned long long)batch_bytes);
            KT_CHECK(s1.download_bytes == s0.download_bytes, "step %u downloaded", i);
            KT_CHECK(s1.dispatches - s0.dispatches == kf_trainer_dispatches_per_step(t),
                     "dispatches");
        }
        /* the losses come down in one download: 4 bytes a step (and the count) */
        const float *losses = NULL;
        uint64_t n = 0;
        kf_context_stats_get(ctx, &s0);
        KT_CHECK_OK(kf_trainer_losses(t, &losses, &n));
        kf_context_stats_get(ctx, &s1);
        KT_CHECK(n == steps && s1.download_bytes - s0.download_bytes == 4 * (steps + 1),
                 "%llu losses, %llu bytes", (unsigned long long)n,
                 (unsigned long long)(s1.download_bytes - s0.download_bytes));
        KT_CHECK(fabsf(losses[0] - before_loss) <= 1e-5f * fabsf(before_loss),
                 "first step's loss %g, evaluated %g", (double)losses[0], (double)before_loss);
        /* one fixed batch: the loss must fall a long way */
        KT_CHECK(losses[steps - 1] < 0.5f * losses[0], "%s: loss %g -> %g", k ? "adamw" : "sgd",
                 (double)losses[0], (double)losses[steps - 1]);
        uint32_t correct = 0;
        float after_loss = 0.0f;
        KT_CHECK_OK(kf_trainer_evaluate(t, names, batch, 2, 13, &after_loss, &correct));
        KT_CHECK(correct >= 10, "memorised %u of 13", correct);
        /* the params changed on the device, and come back */
        kf_shape ws = kf_shape_2d(7, 11);
        kf_tensor *w = NULL;
        KT_CHECK_OK(kf_tensor_create(&ws, &w));
        KT_CHECK_OK(kf_trainer_get_param(t, "w1", w));
        KT_CHECK(kf_trainer_set_param(t, "w1", x) == KF_ERROR_SHAPE, "shape checked");
        KT_CHECK_OK(kf_trainer_set_param(t, "w1", w));
        kf_tensor_destroy(w);
        kf_tensor_destroy(x);
        kf_tensor_destroy(y);
        kf_trainer_destroy(t);
    }
    kf_graph_destroy(g);
}

KT_TEST(fusion, trainer_refusals) {
    KT_NEED_GPU(ctx);
    kf_trainer_desc desc = {.optimizer = {.kind = KF_OPTIMIZER_SGD, .lr = 0.1f}};
    kf_trainer *t = NULL;
    kf_graph *g = parse("x: f32[4, 3]\nw: f32[3, 2]\nloss = mean(mean(matmul(x, w)))\n");
    KT_CHECK(kf_trainer_create(ctx, g, &desc, &t) == KF_ERROR_INVALID_ARGUMENT && !t, "no param");
    KT_CHECK(strstr(kf_context_last_error(ctx), "param"), "%s", kf_context_last_error(ctx));
    kf_graph_destroy(g);
    g = parse("x: f32[4, 3]\nparam w: f32[3, 2]\ny = matmul(x, w)\n");
    KT_CHECK(kf_trainer_create(ctx, g, &desc, &t) == KF_ERROR_INVALID_ARGUMENT, "no loss");
    KT_CHECK(strstr(kf_context_last_error(ctx), "'loss'"), "%s", kf_context_last_error(ctx));
    kf_graph_destroy(g);
    g = parse("x: f32[4, 3]\nparam w: f32[3, 2]\nloss = matmul(x, w)\n");
    KT_CHECK(kf_trainer_create(ctx, g, &desc, &t) == KF_ERROR_SHAPE, "loss not rank 0");
    kf_graph_destroy(g);
    g = parse("x: f32[4, 3]\nparam w: f32[3, 2]\nloss = mean(mean(matmul(x, w)))\n");
    KT_CHECK_OK(kf_trainer_create(ctx, g, &desc, &t));
    uint32_t correct;
    const char *names[1] = {"x"};
    kf_tensor *x = batch_tensor(kf_shape_2d(4, 3), false, 0);
    const kf_tensor *batch[1] = {x};
    KT_CHECK(kf_trainer_evaluate(t, names, batch, 1, 4, NULL, &correct) ==
                 KF_ERROR_INVALID_ARGUMENT,
             "accuracy without cross_entropy");
    kf_tensor_destroy(x);
    kf_trainer_destroy(t);
    kf_graph_destroy(g);
}

/* Runs `kfuse ARGS` and returns its standard output (caller frees), or NULL. */
static char *run_cli(const char *args, int *rc) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", KF_CLI_PATH, args);
    FILE *p = popen(cmd, "r");
    if (!p) {
        return NULL;
    }
    size_t cap = 1 << 16, len = 0, n;
    char *out = malloc(cap);
    while (out && (n = fread(out + len, 1, cap - 1 - len, p)) > 0) {
        len += n;
    }
    int status = pclose(p);
    *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (out) {
        out[len] = '\0';
    }
    return out;
}

/* The losses of `--json` lines ({"step": i, "loss": x}), in order. */
static uint32_t json_losses(const char *out, double *losses, uint32_t cap) {
    uint32_t n = 0;
    for (const char *at = out; (at = strstr(at, "\"loss\": ")) && n < cap; at++) {
        if (at > out && strstr(at - 20 > out ? at - 20 : out, "\"step\"") < at) {
            losses[n++] = strtod(at + 8, NULL);
        }
    }
    return n;
}

/* kfuse train end to end on a small dataset: step i takes rows i*B.. wrapping (its losses equal
 * a kf_trainer fed those rows), --shuffle is deterministic and changes the order, --eval gives an
 * accuracy, --save writes every param, and a missing data file is named. */
KT_TEST(fusion, kfuse_train_cli_batches_eval_save_and_errors) {
    KT_NEED_GPU(ctx);
    char dir[] = "/tmp/kfuse_train_XXXXXX";
    KT_CHECK(mkdtemp(dir), "mkdtemp");
    char path[512], args[2048];
    const char *spec = "x: f32[4, 3]\nlabels: i32[4]\nparam w: f32[3, 5]\nparam b: f32[5]\n"
                       "loss = cross_entropy(matmul(x, w) |> add(b), labels)\nout loss\n";
    snprintf(path, sizeof path, "%s/spec.kf", dir);
    FILE *f = fopen(path, "w");
    KT_CHECK(f, "spec file");
    fputs(spec, f);
    fclose(f);
    kf_tensor *x = batch_tensor(kf_shape_2d(10, 3), false, 0);
    kf_tensor *y = batch_tensor(kf_shape_1d(10), true, 5);
    snprintf(path, sizeof path, "%s/x.npy", dir);
    KT_CHECK_OK(kf_npy_write(path, x, KF_DTYPE_F32));
    snprintf(path, sizeof path, "%s/labels.npy", dir);
    KT_CHECK_OK(kf_npy_write(path, y, KF_DTYPE_I32));
    int rc = 0;
    snprintf(args, sizeof args,
             "train %s/spec.kf --data %s --eval %s --steps 7 --lr 0.5 --seed 3 --json --save "
             "%s/out",
             dir, dir, dir, dir);
    char *out = run_cli(args, &rc);
    KT_CHECK(out && rc == 0, "kfuse train: %s", out ? out : "(no output)");
    double cli[16];
    KT_CHECK(json_losses(out, cli, 16) == 7, "7 losses: %s", out);
    KT_CHECK(strstr(out, "\"final_loss\"") && strstr(out, "\"accuracy\"") &&
                 strstr(out, "\"time_ms_per_step\""),
             "summary: %s", out);
    free(out);
    /* the same steps through kf_trainer: batches of rows (4i + r) mod 10 */
    kf_graph *g = parse(spec);
    kf_trainer_desc desc = {.optimizer = {.kind = KF_OPTIMIZER_SGD, .lr = 0.5f}, .seed = 3};
    kf_trainer *t = NULL;
    KT_CHECK_OK(kf_trainer_create(ctx, g, &desc, &t));
    kf_tensor *bx = batch_tensor(kf_shape_2d(4, 3), false, 0);
    kf_tensor *by = batch_tensor(kf_shape_1d(4), true, 5);
    const char *names[2] = {"x", "labels"};
    const kf_tensor *batch[2] = {bx, by};
    for (uint32_t s = 0; s < 7; s++) {
        for (uint32_t r = 0; r < 4; r++) {
            uint32_t e = (4 * s + r) % 10;
            memcpy(bx->data + 3 * r, x->data + 3 * e, 3 * sizeof(float));
            by->data[r] = y->data[e];
        }
        KT_CHECK_OK(kf_trainer_step(t, names, batch, 2));
    }
    const float *losses;
    uint64_t n;
    KT_CHECK_OK(kf_trainer_losses(t, &losses, &n));
    for (uint32_t s = 0; s < 7; s++) {
        KT_CHECK(fabs(cli[s] - losses[s]) <= 1e-6 * fabs(losses[s]), "step %u: cli %.9g, %.9g", s,
                 cli[s], (double)losses[s]);
    }
    /* --save wrote the trained params */
    kf_shape ws = kf_shape_2d(3, 5);
    kf_tensor *w = NULL, *saved = NULL;
    KT_CHECK_OK(kf_tensor_create(&ws, &w));
    KT_CHECK_OK(kf_trainer_get_param(t, "w", w));
    snprintf(path, sizeof path, "%s/out/w.npy", dir);
    KT_CHECK_OK(kf_npy_read(path, &saved, NULL, 0));
    KT_CHECK(kf_tensor_approx_eq(saved, w, 1e-6), "saved w differs");
    snprintf(path, sizeof path, "%s/out/b.npy", dir);
    kf_tensor *sb = NULL;
    KT_CHECK_OK(kf_npy_read(path, &sb, NULL, 0));
    KT_CHECK(sb->shape.rank == 1 && sb->shape.dims[0] == 5, "saved b");
    /* --shuffle: the same seed gives the same losses, and another order than in-order */
    double s1[16], s2[16];
    snprintf(args, sizeof args,
             "train %s/spec.kf --data %s --steps 7 --lr 0.5 --seed 3 --json "
             "--shuffle 11",
             dir, dir);
    char *o1 = run_cli(args, &rc);
    char *o2 = run_cli(args, &rc);
    KT_CHECK(o1 && o2 && json_losses(o1, s1, 16) == 7 && json_losses(o2, s2, 16) == 7, "shuffle");
    bool differs = false;
    for (uint32_t s = 0; s < 7; s++) {
        KT_CHECK(s1[s] == s2[s], "shuffle is not deterministic at step %u", s);
        differs |= s1[s] != cli[s];
    }
    KT_CHECK(differs, "--shuffle took the examples in order");
    free(o1);
    free(o2);
    /* --explain shows the training plan, gradients included, and needs no data */
    snprintf(args, sizeof args, "train %s/spec.kf --explain", dir);
    out = run_cli(args, &rc);
    KT_CHECK(out && rc == 0 && strstr(out, "kf_grad_w") && strstr(out, "cross_entropy_grad") &&
                 strstr(out, "per step:"),
             "--explain: rc %d: %s", rc, out ? out : "");
    free(out);
    /* a missing data file is named */
    snprintf(path, sizeof path, "%s/x.npy", dir);
    remove(path);
    snprintf(args, sizeof args, "train %s/spec.kf --data %s --steps 2 --lr 0.5", dir, dir);
    out = run_cli(args, &rc);
    KT_CHECK(out && rc == 1 && strstr(out, "x.npy"), "missing x.npy: rc %d: %s", rc,
             out ? out : "");
    free(out);
    snprintf(args, sizeof args, "rm -rf '%s'", dir);
    KT_CHECK(system(args) == 0, "cleanup");
    kf_tensor_destroy(x);
    kf_tensor_destroy(y);
    kf_tensor_destroy(bx);
    kf_tensor_destroy(by);
    kf_tensor_destroy(w);
    kf_tensor_destroy(saved);
    kf_tensor_destroy(sb);
    kf_trainer_destroy(t);
    kf_graph_destroy(g);
}
