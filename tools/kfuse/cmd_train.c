/* kfuse train: train a graph's params on a dataset of .npy files (kf_trainer). */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <spawn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_DATA 16

extern char **environ;

static void train_usage(FILE *f) {
    fprintf(f, "usage: kfuse train SPEC --data DIR --steps N --lr LR [--optimizer sgd|adamw]\n"
               "                   [--momentum M] [--weight-decay WD] [--init DIR] [--seed S]\n"
               "                   [--eval DIR] [--shuffle SEED] [--save DIR] [--plot FILE.png]\n"
               "                   [--no-fuse] [--json]\n\n"
               "Trains the params of SPEC (declared `param w: f32[...]`) to minimise its output\n"
               "`loss` (rank 0). Every other input is data: DIR/NAME.npy holds it, a row per\n"
               "example; the input's leading dimension is the batch. One step (forward, backward,\n"
               "update) is one submission; only the batch goes to the device.\n\n"
               "  --data DIR         NAME.npy per data input (labels: int32)\n"
               "  --steps N          training steps (batches)\n"
               "  --lr LR            learning rate\n"
               "  --optimizer O      sgd (default) or adamw (betas 0.9, 0.999, eps 1e-8)\n"
               "  --momentum M       SGD momentum (default 0)\n"
               "  --weight-decay WD  SGD: L2 on the gradient; AdamW: decoupled (default 0)\n"
               "  --init DIR         NAME.npy per param (default: each param's initialiser)\n"
               "  --seed S           seed of the initialisers (default 0)\n"
               "  --eval DIR         held-out data: its loss, and accuracy for cross_entropy\n"
               "  --shuffle SEED     a fresh order every epoch (default: in order, wrapping)\n"
               "  --save DIR         write the trained params to DIR/NAME.npy\n"
               "  --plot FILE.png    the loss curve, drawn by gnuplot\n"
               "  --no-fuse          one dispatch per operator (for comparison)\n"
               "  --activations A    what backward reads from forward: auto (by bytes, default),\n"
               "                     save, recompute or split (docs/training.md)\n"
               "  --explain          print the training plan (forward and backward groups) and\n"
               "                     exit: no data needed\n"
               "  --json             one object per step (step, loss), then a summary\n");
}

typedef struct train_args {
    const char *spec, *data, *init, *eval, *save, *plot;
    uint64_t steps, seed, shuffle_seed;
    bool shuffle, json, no_fuse, explain;
    kf_activation_policy activations;
    kf_optimizer_desc opt;
} train_args;

static bool parse_double(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno || !(v >= lo && v <= hi)) {
        return false;
    }
    *out = v;
    return true;
}

static bool parse_u64(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (*end || errno || s[0] == '-' || !s[0]) {
        return false;
    }
    *out = v;
    return true;
}

static int parse_args(int argc, char **argv, train_args *a) {
    bool have_lr = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        double v;
        if (kf_cli_is_help(arg)) {
            train_usage(stdout);
            return 0;
        } else if (!strcmp(arg, "--json")) {
            a->json = true;
        } else if (!strcmp(arg, "--no-fuse")) {
            a->no_fuse = true;
        } else if (!strcmp(arg, "--explain")) {
            a->explain = true;
        } else if (!next || arg[0] != '-' || arg[1] != '-') {
            if (arg[0] == '-' || a->spec) {
                fprintf(stderr, "kfuse train: unknown or incomplete option '%s'\n", arg);
                train_usage(stderr);
                return 2;
            }
            a->spec = arg;
        } else if (!strcmp(arg, "--activations")) {
            const char *name = argv[++i];
            static const char *const names[] = {"auto", "save", "recompute", "split"};
            uint32_t k = 0;
            while (k < 4 && strcmp(name, names[k])) {
                k++;
            }
            if (k == 4) {
                fprintf(stderr,
                        "kfuse train: --activations takes auto, save, recompute or split\n");
                return 2;
            }
            a->activations = (kf_activation_policy)k;
        } else if (!strcmp(arg, "--data")) {
            a->data = argv[++i];
        } else if (!strcmp(arg, "--init")) {
            a->init = argv[++i];
        } else if (!strcmp(arg, "--eval")) {
            a->eval = argv[++i];
        } else if (!strcmp(arg, "--save")) {
            a->save = argv[++i];
        } else if (!strcmp(arg, "--plot")) {
            a->plot = argv[++i];
        } else if (!strcmp(arg, "--steps")) {
            if (!parse_u64(argv[++i], &a->steps) || a->steps == 0 || a->steps > 100000000) {
                fprintf(stderr, "kfuse train: --steps takes a count from 1 to 100000000\n");
                return 2;
            }
        } else if (!strcmp(arg, "--seed")) {
            if (!parse_u64(argv[++i], &a->seed)) {
                fprintf(stderr, "kfuse train: --seed takes a whole number\n");
                return 2;
            }
        } else if (!strcmp(arg, "--shuffle")) {
            if (!parse_u64(argv[++i], &a->shuffle_seed)) {
                fprintf(stderr, "kfuse train: --shuffle takes a seed (a whole number)\n");
                return 2;
            }
            a->shuffle = true;
        } else if (!strcmp(arg, "--lr")) {
            if (!parse_double(argv[++i], 1e-30, 1e6, &v)) {
                fprintf(stderr, "kfuse train: --lr takes a number above 0\n");
                return 2;
            }
            a->opt.lr = (float)v;
            have_lr = true;
        } else if (!strcmp(arg, "--momentum")) {
            if (!parse_double(argv[++i], 0.0, 0.999999, &v)) {
                fprintf(stderr, "kfuse train: --momentum takes a number in [0, 1)\n");
                return 2;
            }
            a->opt.momentum = (float)v;
        } else if (!strcmp(arg, "--weight-decay")) {
            if (!parse_double(argv[++i], 0.0, 1e6, &v)) {
                fprintf(stderr, "kfuse train: --weight-decay takes a number, at least 0\n");
                return 2;
            }
            a->opt.weight_decay = (float)v;
        } else if (!strcmp(arg, "--optimizer")) {
            const char *o = argv[++i];
            if (!strcmp(o, "sgd")) {
                a->opt.kind = KF_OPTIMIZER_SGD;
            } else if (!strcmp(o, "adamw")) {
                a->opt.kind = KF_OPTIMIZER_ADAMW;
            } else {
                fprintf(stderr, "kfuse train: --optimizer is sgd or adamw, not '%s'\n", o);
                return 2;
            }
        } else {
            fprintf(stderr, "kfuse train: unknown option '%s'\n", arg);
            train_usage(stderr);
            return 2;
        }
    }
    if (a->spec && a->explain) {
        return -1;
    }
    if (!a->spec || !a->data || !a->steps || !have_lr) {
        fprintf(stderr, "kfuse train: SPEC, --data, --steps and --lr are required\n");
        train_usage(stderr);
        return 2;
    }
    if (a->opt.momentum > 0.0f && a->opt.kind != KF_OPTIMIZER_SGD) {
        fprintf(stderr, "kfuse train: --momentum is SGD's (AdamW has its betas)\n");
        return 2;
    }
    return -1;
}

/* A dataset: one tensor of rows per data input, all with the same number of rows. */
typedef struct dataset {
    uint32_t count;
    const char *names[MAX_DATA];
    kf_tensor *rows[MAX_DATA];
    kf_tensor *batch[MAX_DATA];
    uint64_t row_floats[MAX_DATA];
    uint64_t examples;
} dataset;

static void dataset_free(dataset *d) {
    for (uint32_t i = 0; i < d->count; i++) {
        kf_tensor_destroy(d->rows[i]);
        kf_tensor_destroy(d->batch[i]);
    }
}

/* Reads DIR/NAME.npy for every non-param input of g; checks each is [N, the input's shape
 * after its leading dim] with one N for all. */
static int dataset_load(const kf_graph *g, const char *dir, dataset *d) {
    memset(d, 0, sizeof *d);
    for (uint32_t i = 0; i < kf_graph_input_count(g); i++) {
        const char *name;
        kf_shape shape;
        kf_graph_input_info(g, i, &name, &shape, NULL);
        if (kf_graph_input_is_param(g, i, NULL)) {
            continue;
        }
        if (d->count == MAX_DATA) {
            fprintf(stderr, "kfuse train: at most %d data inputs\n", MAX_DATA);
            return 1;
        }
        if (shape.rank == 0) {
            fprintf(stderr,
                    "kfuse train: data input %s is a scalar: it needs a leading batch "
                    "dimension\n",
                    name);
            return 1;
        }
        char path[4096], msg[512] = {0};
        snprintf(path, sizeof path, "%s/%s.npy", dir, name);
        uint32_t k = d->count++;
        d->names[k] = name;
        if (kf_npy_read(path, &d->rows[k], msg, sizeof msg) != KF_OK) {
            fprintf(stderr, "kfuse train: data input %s: %s\n", name, msg);
            return 1;
        }
        const kf_shape *rs = &d->rows[k]->shape;
        bool fits = rs->rank == shape.rank;
        for (uint32_t dd = 1; fits && dd < shape.rank; dd++) {
            fits = rs->dims[dd] == shape.dims[dd];
        }
        if (!fits) {
            char a[64], b[64];
            kf_shape want = shape;
            want.dims[0] = rs->rank ? rs->dims[0] : 1;
            fprintf(stderr,
                    "kfuse train: %s is %s, but input %s (%s) needs rows shaped as its trailing "
                    "dimensions: [N%s...]\n",
                    path, kf_shape_str(rs, a, sizeof a), name, kf_shape_str(&shape, b, sizeof b),
                    shape.rank > 1 ? ", " : "");
            (void)want;
            return 1;
        }
        if (k > 0 && rs->dims[0] != d->examples) {
            fprintf(stderr, "kfuse train: %s has %u rows, %s.npy has %llu: one row per example\n",
                    path, rs->dims[0], d->names[0], (unsigned long long)d->examples);
            return 1;
        }
        d->examples = rs->dims[0];
        d->row_floats[k] = kf_shape_elements(rs) / rs->dims[0];
        if (kf_tensor_create(&shape, &d->batch[k]) != KF_OK) {
            fprintf(stderr, "kfuse train: out of memory\n");
            return 1;
        }
    }
    return 0;
}

/* Fills the batch tensors with examples order[first .. first + batch) (indices wrap). */
static void dataset_batch(dataset *d, const uint64_t *order, uint64_t first, uint32_t batch) {
    for (uint32_t k = 0; k < d->count; k++) {
        uint64_t rf = d->row_floats[k];
        for (uint32_t r = 0; r < batch; r++) {
            uint64_t e = order[(first + r) % d->examples];
            memcpy(d->batch[k]->data + r * rf, d->rows[k]->data + e * rf, sizeof(float) * rf);
        }
    }
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The order of epoch e: 0, 1, ... without shuffling, else a Fisher-Yates shuffle seeded by
 * (seed, e). */
static void epoch_order(uint64_t *order, uint64_t n, bool shuffle, uint64_t seed, uint64_t e) {
    for (uint64_t i = 0; i < n; i++) {
        order[i] = i;
    }
    if (!shuffle) {
        return;
    }
    uint64_t s = seed * 0x2545f4914f6cdd1dull + e;
    for (uint64_t i = n - 1; i > 0; i--) {
        uint64_t j = splitmix(&s) % (i + 1);
        uint64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int load_init(kf_trainer *t, const char *dir) {
    for (uint32_t i = 0; i < kf_trainer_param_count(t); i++) {
        const char *name = kf_trainer_param_name(t, i);
        char path[4096], msg[512] = {0};
        snprintf(path, sizeof path, "%s/%s.npy", dir, name);
        kf_tensor *v = NULL;
        if (kf_npy_read(path, &v, msg, sizeof msg) != KF_OK) {
            fprintf(stderr, "kfuse train: --init: param %s: %s\n", name, msg);
            return 1;
        }
        kf_status st = kf_trainer_set_param(t, name, v);
        kf_tensor_destroy(v);
        if (st != KF_OK) {
            fprintf(stderr, "kfuse train: --init %s: %s\n", path, kf_status_str(st));
            return 1;
        }
    }
    return 0;
}

static int save_params(kf_trainer *t, const kf_graph *g, const char *dir) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "kfuse train: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    for (uint32_t i = 0; i < kf_graph_input_count(g); i++) {
        const char *name;
        kf_shape shape;
        kf_graph_input_info(g, i, &name, &shape, NULL);
        if (!kf_graph_input_is_param(g, i, NULL)) {
            continue;
        }
        kf_tensor *v = NULL;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.npy", dir, name);
        kf_status st = kf_tensor_create(&shape, &v);
        if (st == KF_OK) {
            st = kf_trainer_get_param(t, name, v);
        }
        if (st == KF_OK) {
            st = kf_npy_write(path, v, KF_DTYPE_F32);
        }
        kf_tensor_destroy(v);
        if (st != KF_OK) {
            fprintf(stderr, "kfuse train: writing %s: %s\n", path, kf_status_str(st));
            return 1;
        }
    }
    return 0;
}

/* Mean loss and accuracy over every example of the eval set, in batches (the last one padded
 * by wrapping; padded rows are not counted). */
static int evaluate(kf_trainer *t, dataset *d, bool want_accuracy, double *loss, double *accuracy) {
    uint32_t batch = d->batch[0]->shape.dims[0];
    uint64_t *order = malloc(sizeof *order * d->examples);
    if (!order) {
        return 1;
    }
    epoch_order(order, d->examples, false, 0, 0);
    double loss_sum = 0.0;
    uint64_t correct = 0;
    for (uint64_t first = 0; first < d->examples; first += batch) {
        dataset_batch(d, order, first, batch);
        uint32_t real = (uint32_t)(d->examples - first < batch ? d->examples - first : batch);
        float l = 0.0f;
        uint32_t c = 0;
        kf_status st = kf_trainer_evaluate(t, d->names, (const kf_tensor *const *)d->batch,
                                           d->count, real, &l, want_accuracy ? &c : NULL);
        if (st != KF_OK) {
            fprintf(stderr, "kfuse train: --eval: %s\n", kf_status_str(st));
            free(order);
            return 1;
        }
        loss_sum += (double)l * real;
        correct += c;
    }
    *loss = loss_sum / (double)d->examples;
    *accuracy = want_accuracy ? (double)correct / (double)d->examples : NAN;
    free(order);
    return 0;
}

/* s as a gnuplot single-quoted string ('' stands for a quote inside). */
static void gp_string(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        fputs(*s == '\'' ? "''" : (char[2]){*s, 0}, f);
    }
    fputc('\'', f);
}

/* The loss curve as a PNG, drawn by gnuplot (run without a shell) from a data file and a script
 * written next to it and removed afterwards. */
static int plot(const char *png, const float *losses, uint64_t count, const char *title) {
    char data[4096], script[4096];
    snprintf(data, sizeof data, "%s.dat", png);
    snprintf(script, sizeof script, "%s.gp", png);
    FILE *f = fopen(data, "w");
    FILE *g = f ? fopen(script, "w") : NULL;
    if (!f || !g) {
        fprintf(stderr, "kfuse train: --plot: cannot write next to %s: %s\n", png, strerror(errno));
        if (f) {
            fclose(f);
            remove(data);
        }
        return 1;
    }
    for (uint64_t i = 0; i < count; i++) {
        fprintf(f, "%llu %.9g\n", (unsigned long long)i + 1, (double)losses[i]);
    }
    fclose(f);
    fputs("set terminal pngcairo size 900,500\nset output ", g);
    gp_string(g, png);
    fputs("\nset title ", g);
    gp_string(g, title);
    fputs("\nset xlabel 'step'\nset ylabel 'loss'\nset logscale y\nset grid\nplot ", g);
    gp_string(g, data);
    fputs(" using 1:2 with lines title 'training loss'\n", g);
    fclose(g);
    pid_t pid;
    char *args[] = {"gnuplot", script, NULL};
    int status = -1;
    int err = posix_spawnp(&pid, "gnuplot", NULL, NULL, args, environ);
    if (err == 0 && waitpid(pid, &status, 0) < 0) {
        status = -1;
    }
    remove(data);
    remove(script);
    if (err != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "kfuse train: --plot: %s; install gnuplot-nox (scripts/setup.sh does)\n",
                err ? "gnuplot was not found" : "gnuplot failed");
        return 1;
    }
    return 0;
}

int kf_cmd_train(int argc, char **argv) {
    train_args a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) {
        return rc;
    }
    kf_graph *g = kf_cli_load_spec(a.spec, false);
    if (!g) {
        return 1;
    }
    dataset data = {0}, eval = {0};
    kf_trainer *t = NULL;
    uint64_t *order = NULL;
    rc = 1;
    kf_context *ctx = NULL;
    if (a.explain) {
        ctx = kf_cli_context();
        kf_trainer_desc desc = {
            .optimizer = a.opt, .seed = a.seed, .no_fuse = a.no_fuse, .activations = a.activations};
        kf_status st = ctx ? kf_trainer_create(ctx, g, &desc, &t) : KF_ERROR_NO_ADAPTER;
        char *text = st == KF_OK ? kf_plan_explain(kf_trainer_plan(t), false) : NULL;
        if (text) {
            printf("%s", text);
            printf("per step: the plan's dispatches, 1 optimizer update of every param and 1 "
                   "loss record: %u dispatches\n",
                   kf_trainer_dispatches_per_step(t));
            rc = 0;
        } else if (ctx) {
            fprintf(stderr, "kfuse train: %s: %s\n", kf_status_str(st), kf_context_last_error(ctx));
        }
        kf_free(text);
        goto done;
    }
    if (dataset_load(g, a.data, &data) != 0 || (a.eval && dataset_load(g, a.eval, &eval) != 0)) {
        goto done;
    }
    if (data.count == 0) {
        fprintf(stderr, "kfuse train: %s has no data inputs (every input is a param)\n", a.spec);
        goto done;
    }
    ctx = kf_cli_context();
    if (!ctx) {
        goto done;
    }
    kf_trainer_desc desc = {
        .optimizer = a.opt, .seed = a.seed, .no_fuse = a.no_fuse, .activations = a.activations};
    kf_status st = kf_trainer_create(ctx, g, &desc, &t);
    if (st != KF_OK) {
        fprintf(stderr, "kfuse train: %s: %s\n", kf_status_str(st), kf_context_last_error(ctx));
        goto done;
    }
    if (a.init && load_init(t, a.init) != 0) {
        goto done;
    }
    uint32_t batch = data.batch[0]->shape.dims[0];
    order = malloc(sizeof *order * data.examples);
    if (!order) {
        goto done;
    }
    bool progress = !a.json && isatty(STDOUT_FILENO);
    kf_context_stats before = {0}, after = {0};
    kf_context_stats_get(ctx, &before);
    double t0 = now_ms(), last_print = t0;
    uint64_t epoch = UINT64_MAX, printed = 0;
    const float *losses = NULL;
    uint64_t loss_count = 0;
    for (uint64_t step = 0; step < a.steps; step++) {
        uint64_t first = step * batch;
        /* an epoch's order covers the examples from first % examples onwards; a batch crossing
         * into the next epoch takes the rest of its rows from that epoch's order */
        for (uint32_t k = 0; k < data.count; k++) {
            uint64_t rf = data.row_floats[k];
            for (uint32_t r = 0; r < batch; r++) {
                uint64_t q = first + r, e = q / data.examples;
                if (e != epoch) {
                    epoch_order(order, data.examples, a.shuffle, a.shuffle_seed, e);
                    epoch = e;
                }
                uint64_t ex = order[q % data.examples];
                memcpy(data.batch[k]->data + r * rf, data.rows[k]->data + ex * rf,
                       sizeof(float) * rf);
            }
            epoch = a.shuffle ? UINT64_MAX : epoch; /* the next input replays the same order */
        }
        st = kf_trainer_step(t, data.names, (const kf_tensor *const *)data.batch, data.count);
        if (st != KF_OK) {
            fprintf(stderr, "kfuse train: step %llu: %s: %s\n", (unsigned long long)step + 1,
                    kf_status_str(st), kf_context_last_error(ctx));
            goto done;
        }
        double now = now_ms();
        bool last = step + 1 == a.steps;
        if ((progress && (now - last_print > 200.0 || last)) ||
            (a.json && (step % 256 == 255 || last))) {
            if (kf_trainer_losses(t, &losses, &loss_count) != KF_OK) {
                fprintf(stderr, "kfuse train: %s\n", kf_context_last_error(ctx));
                goto done;
            }
            last_print = now;
            if (progress) {
                printf("\rstep %llu/%llu  loss %.5f  %.0f examples/s   ",
                       (unsigned long long)step + 1, (unsigned long long)a.steps,
                       (double)losses[loss_count - 1],
                       (double)(step + 1) * batch / ((now - t0) / 1e3));
                fflush(stdout);
            }
            for (; a.json && printed < loss_count; printed++) {
                printf("{\"step\": %llu, \"loss\": %.9g}\n", (unsigned long long)printed + 1,
                       (double)losses[printed]);
            }
        }
    }
    double elapsed = now_ms() - t0;
    if (kf_trainer_losses(t, &losses, &loss_count) != KF_OK || loss_count != a.steps) {
        fprintf(stderr, "kfuse train: %s\n", kf_context_last_error(ctx));
        goto done;
    }
    kf_context_stats_get(ctx, &after);
    if (progress) {
        printf("\n");
    }
    double eval_loss = NAN, accuracy = NAN;
    bool want_accuracy = kf_trainer_has_accuracy(t);
    if (a.eval && evaluate(t, &eval, want_accuracy, &eval_loss, &accuracy) != 0) {
        goto done;
    }
    kf_plan_summary sum = {0};
    kf_plan_summary_get(kf_trainer_plan(t), &sum);
    double per_step = elapsed / (double)a.steps;
    if (a.json) {
        printf("{\"final_loss\": %.9g, \"time_ms_per_step\": %.6f, \"steps\": %llu, "
               "\"dispatches_per_step\": %u, \"submissions\": %llu, \"upload_bytes\": %llu, "
               "\"download_bytes\": %llu",
               (double)losses[loss_count - 1], per_step, (unsigned long long)a.steps,
               kf_trainer_dispatches_per_step(t),
               (unsigned long long)(after.submissions - before.submissions),
               (unsigned long long)(after.upload_bytes - before.upload_bytes),
               (unsigned long long)(after.download_bytes - before.download_bytes));
        if (a.eval) {
            printf(", \"eval_loss\": %.9g", eval_loss);
            if (want_accuracy) {
                printf(", \"accuracy\": %.6f", accuracy);
            }
        }
        printf("}\n");
    } else {
        printf("%llu steps of %u examples: final loss %.5f, %.3f ms per step (%u dispatches)\n",
               (unsigned long long)a.steps, batch, (double)losses[loss_count - 1], per_step,
               kf_trainer_dispatches_per_step(t));
        if (a.eval) {
            printf("eval (%llu examples): loss %.5f", (unsigned long long)eval.examples, eval_loss);
            if (want_accuracy) {
                printf(", accuracy %.2f%%", 100.0 * accuracy);
            }
            printf("\n");
        }
    }
    if (a.plot && plot(a.plot, losses, loss_count, a.spec) != 0) {
        goto done;
    }
    if (a.save && save_params(t, g, a.save) != 0) {
        goto done;
    }
    rc = 0;
done:
    free(order);
    dataset_free(&data);
    dataset_free(&eval);
    kf_trainer_destroy(t);
    kf_context_destroy(ctx);
    kf_graph_destroy(g);
    return rc;
}
