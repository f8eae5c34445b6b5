/* kfuse_bench_gpt: a transformer block's forward + backward and a character-GPT training step,
 * timed on this device, with the fields bench/torch_gpt_step.py prints for PyTorch (eager and
 * torch.compile), so the two run side by side (bench/h200_gpt.sh):
 *
 *   kfuse_bench_gpt (--block SPEC | --step SPEC) [--name NAME] [--repeat N] [--seed S]
 *                   [--no-unfused] [--json]
 *
 * --block: SPEC is a graph whose outputs are the block's value and its gradients
 * (bench/torch_gpt_step.py --write-specs writes it); params start from their initialisers, other
 * inputs uniform in [-1, 1). The fused plan is timed whole (kf_plan_time), then its dispatches
 * as one pass and one by one (kf_context_time_each: each dispatch's device time from GPU
 * timestamps, as PyTorch's profiler gives each kernel's), each row with its operators, bytes and
 * bandwidth, summed in three classes, the ones bench/torch_gpt_step.py gives PyTorch's kernels:
 * matmul (a matmul root, whatever epilogue or prologue it carries), attention (its forward and
 * backward kernels) and other (norms, views, element-wise, reductions, the loss, the optimizer);
 * non-matmul = attention + other. Without --no-unfused an unfused plan
 * runs the same inputs and every output is compared (max relative difference against 1% of each
 * output's largest value), so a fast wrong plan does not pass unnoticed.
 *
 * --step: SPEC is a model with params and a `loss` (gpt_spec.py --batch 64): kf_trainer with AdamW
 * (lr 1e-3), the batch (x, y: i32 ids drawn from the seed) uploaded once and kept on the device
 * as a PyTorch loop's CUDA tensors are; the time is the wall clock of a whole step (submission of
 * forward, backward and update, and the wait). The step's dispatches (the plan's and one
 * AdamW update's; not the one-invocation loss record) are timed as above. Without
 * --no-unfused an unfused trainer takes the same steps and the losses are compared. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fuse/plan_internal.h"
#include "kfuse.h"

/* One dispatch of the timed sequence: its class, what it runs, its device time and bytes. */
typedef enum dclass { D_MATMUL, D_ATTENTION, D_OTHER } dclass;
static const char *const g_class_names[] = {"matmul", "attention", "other"};

typedef struct drow {
    dclass cls;
    char root[32];
    char label[256];
    uint64_t bytes;
    double ms;
} drow;

typedef struct split {
    double all_ms, sum_ms; /* the sequence as one pass; the sum of its dispatches' times */
    double floor_ms;       /* a one-invocation dispatch timed the same way: each row's share of
                            * the pass and timestamps around it rather than of its work */
    double class_ms[3];
    uint32_t all, class_count[3];
    bool timestamps;
    drow *rows;
} split;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int usage(void) {
    fprintf(stderr, "usage: kfuse_bench_gpt (--block SPEC | --step SPEC) [--name NAME] "
                    "[--repeat N] [--seed S] [--no-unfused] [--json]\n");
    return 2;
}

/* What dispatch d of plan p runs (p NULL: a dispatch of the optimizer's, named `other`). The
 * classes are the ones bench/torch_gpt_step.py gives PyTorch's kernels: dense products (a matmul
 * root, whatever epilogue or prologue it carries), attention (forward and backward kernels), the
 * rest (norms, element-wise, reductions, views, embedding, loss, optimizer). A split-K product's
 * sum of partial products counts as the product's (cuBLAS sums its split-K slices inside its
 * matmul kernels, which the profiler counts as matmul). */
static void describe(const kf_plan *p, uint32_t d, const kf_dispatch *ds, const char *other,
                     drow *row) {
    memset(row, 0, sizeof *row);
    kf_plan_dispatch_info info;
    if (p && kf_plan_dispatch_info_get(p, d, &info) == KF_OK) {
        snprintf(row->root, sizeof row->root, "%s", info.root);
        snprintf(row->label, sizeof row->label, "%s", info.label);
        row->bytes = info.bytes;
        bool split_k_sum = !strncmp(info.label, "split-K sum", 11);
        row->cls = info.matmul || split_k_sum            ? D_MATMUL
                   : !strncmp(info.root, "attention", 9) ? D_ATTENTION
                                                         : D_OTHER;
        return;
    }
    /* not the plan's: the bytes its bindings bind, read-write ones twice */
    snprintf(row->root, sizeof row->root, "%s", other);
    snprintf(row->label, sizeof row->label, "%s: %u bindings", other, ds->buffer_count);
    row->cls = D_OTHER;
    for (uint32_t b = 0; b < ds->buffer_count; b++) {
        bool rw = ds->pipeline->bindings[b] == KF_BINDING_STORAGE_READ_WRITE;
        row->bytes += (rw ? 2u : 1u) * kf_buffer_size(ds->buffers[b]);
    }
}

/* A dispatch of one invocation storing one value, timed as each dispatch of the sequence is:
 * what a row of the per-dispatch table costs whatever its kernel does. */
static kf_status time_floor(kf_context *ctx, uint32_t repeat, double *ms) {
    kf_kernel_desc kd = {.name = "floor", .workgroup_size = {1, 1, 1}};
    kf_kernel *k = kf_kernel_create(&kd);
    kf_buffer *buf = NULL;
    kf_status st = k ? KF_OK : KF_ERROR_OUT_OF_MEMORY;
    if (st == KF_OK) {
        kf_binding out =
            kf_kernel_storage(k, "out", kf_type_scalar(KF_SCALAR_F32), KF_ACCESS_READ_WRITE);
        kf_store(k, out, kf_lit_u32(k, 0), kf_lit_f32(k, 1.0f));
        st = kf_kernel_status(k);
    }
    if (st == KF_OK) {
        st = kf_buffer_create(ctx, 4, &buf);
    }
    kf_dispatch d;
    kf_kernel_launch launch = {.buffers = &buf, .buffer_count = 1, .groups = {1, 1, 1}};
    if (st == KF_OK) {
        st = kf_kernel_dispatch(ctx, k, &launch, &d);
    }
    kf_timing t;
    if (st == KF_OK) {
        st = kf_context_time_each(ctx, &d, 1, repeat, ms, &t);
    }
    kf_buffer_destroy(buf);
    kf_kernel_destroy(k);
    return st;
}

/* The dispatches (p's first `planned`, then extra ones: an optimizer's update) timed as one
 * pass, then one by one (kf_context_time_each), and summed by class. */
static kf_status time_split(kf_context *ctx, const kf_plan *p, const kf_dispatch *ds, uint32_t n,
                            uint32_t planned, uint32_t repeat, split *out) {
    memset(out, 0, sizeof *out);
    out->all = n;
    out->rows = calloc(n ? n : 1, sizeof *out->rows);
    double *ms = calloc(n ? n : 1, sizeof *ms);
    if (!out->rows || !ms) {
        free(ms);
        return KF_ERROR_OUT_OF_MEMORY;
    }
    kf_timing t = {0};
    kf_status st = kf_context_time(ctx, ds, n, repeat, &t);
    out->all_ms = t.median_ms;
    if (st == KF_OK) {
        st = kf_context_time_each(ctx, ds, n, repeat, ms, &t);
        out->sum_ms = t.median_ms;
        out->timestamps = t.gpu_timestamps;
    }
    if (st == KF_OK) {
        st = time_floor(ctx, repeat, &out->floor_ms);
    }
    for (uint32_t d = 0; st == KF_OK && d < n; d++) {
        describe(d < planned ? p : NULL, d, &ds[d], "optimizer", &out->rows[d]);
        out->rows[d].ms = ms[d];
        out->class_ms[out->rows[d].cls] += ms[d];
        out->class_count[out->rows[d].cls]++;
    }
    free(ms);
    return st;
}

/* Inputs of g: params from their initialisers, the rest uniform in [-1, 1). */
static kf_status set_inputs(kf_plan *p, const kf_graph *g, uint64_t seed) {
    kf_status st = KF_OK;
    uint32_t param = 0;
    for (uint32_t i = 0; i < kf_graph_input_count(g) && st == KF_OK; i++) {
        const char *name = NULL;
        kf_shape shape;
        kf_dtype dtype;
        kf_param_init init;
        kf_tensor *t = NULL;
        st = kf_graph_input_info(g, i, &name, &shape, &dtype);
        if (st == KF_OK) {
            st = kf_tensor_create(&shape, &t);
        }
        if (st == KF_OK && kf_graph_input_is_param(g, i, &init)) {
            st = kf_param_init_fill(&init, seed, param++, t);
        } else if (st == KF_OK) {
            kf_tensor_fill_random(t, seed + 1000u + i, -1.0f, 1.0f);
        }
        if (st == KF_OK) {
            st = kf_plan_set_input(p, name, t);
        }
        kf_tensor_destroy(t);
    }
    return st;
}

/* The largest relative difference between the two plans' outputs (against 1% of each output's
 * largest magnitude). */
static kf_status compare_outputs(const kf_plan *a, const kf_plan *b, const kf_graph *g,
                                 double *worst) {
    *worst = 0;
    kf_status st = KF_OK;
    for (uint32_t o = 0; o < kf_graph_output_count(g) && st == KF_OK; o++) {
        const char *name = NULL;
        kf_shape shape;
        kf_dtype dtype;
        kf_tensor *ta = NULL, *tb = NULL;
        st = kf_graph_output_info(g, o, &name, &shape, &dtype);
        if (st == KF_OK) {
            st = kf_tensor_create(&shape, &ta);
        }
        if (st == KF_OK) {
            st = kf_tensor_create(&shape, &tb);
        }
        if (st == KF_OK) {
            st = kf_plan_get_output(a, name, ta);
        }
        if (st == KF_OK) {
            st = kf_plan_get_output(b, name, tb);
        }
        uint64_t n = st == KF_OK ? kf_tensor_size(ta) : 0;
        double big = 0;
        for (uint64_t e = 0; e < n; e++) {
            big = fmax(big, fabs((double)tb->data[e]));
        }
        for (uint64_t e = 0; e < n; e++) {
            double d = fabs((double)ta->data[e] - tb->data[e]) /
                       fmax(fabs((double)tb->data[e]), fmax(0.01 * big, 1e-30));
            *worst = d > *worst || isnan(d) ? d : *worst;
        }
        kf_tensor_destroy(ta);
        kf_tensor_destroy(tb);
    }
    return st;
}

static void put_json_string(const char *v) {
    putchar('"');
    for (const char *c = v; *c; c++) {
        if (*c == '"' || *c == '\\') {
            putchar('\\');
        }
        putchar(*c >= ' ' ? *c : ' ');
    }
    putchar('"');
}

/* step_ms: a step's wall clock (a block's: the plan timed whole); the split's per-dispatch rows
 * with their bytes and achieved bandwidth. */
static void print_result(bool json, const char *name, const char *mode, const split *s,
                         double step_ms, double step_min_ms, uint32_t step_dispatches,
                         uint64_t bytes, double diff, const char *device) {
    double nonmm = s->class_ms[D_ATTENTION] + s->class_ms[D_OTHER];
    uint32_t nonmm_n = s->class_count[D_ATTENTION] + s->class_count[D_OTHER];
    if (json) {
        printf("{\"case\": \"%s\", \"mode\": \"%s\", \"impl\": \"kfuse\", \"device\": \"%s\", "
               "\"ms\": %.6f, \"min_ms\": %.6f, \"dispatches\": %u, \"plan_ms\": %.6f, "
               "\"plan_dispatches\": %u, \"sum_ms\": %.6f, \"floor_ms\": %.6f, \"timestamps\": %s, "
               "\"matmul_ms\": %.6f, \"matmul_dispatches\": %u, \"attention_ms\": %.6f, "
               "\"attention_dispatches\": %u, \"other_ms\": %.6f, \"other_dispatches\": %u, "
               "\"nonmatmul_ms\": %.6f, \"nonmatmul_dispatches\": %u, \"bytes\": %llu, "
               "\"max_rel_diff_unfused\": %.3g, \"per_dispatch\": [",
               name, mode, device, step_ms, step_min_ms, step_dispatches, s->all_ms, s->all,
               s->sum_ms, s->floor_ms, s->timestamps ? "true" : "false", s->class_ms[D_MATMUL],
               s->class_count[D_MATMUL], s->class_ms[D_ATTENTION], s->class_count[D_ATTENTION],
               s->class_ms[D_OTHER], s->class_count[D_OTHER], nonmm, nonmm_n,
               (unsigned long long)bytes, diff);
        for (uint32_t d = 0; d < s->all; d++) {
            const drow *r = &s->rows[d];
            printf("%s{\"class\": \"%s\", \"root\": ", d ? ", " : "", g_class_names[r->cls]);
            put_json_string(r->root);
            printf(", \"ms\": %.6f, \"bytes\": %llu, \"label\": ", r->ms,
                   (unsigned long long)r->bytes);
            put_json_string(r->label);
            putchar('}');
        }
        printf("]}\n");
    } else {
        printf("%-22s %-5s %9.3f ms (min %.3f) %3u dispatches | one pass %8.3f ms, dispatches "
               "summed %8.3f ms (%s; an empty one %.4f): matmul %.3f (%u), attention %.3f (%u), "
               "other %.3f (%u) | %.1f MiB | vs unfused %.2g\n",
               name, mode, step_ms, step_min_ms, step_dispatches, s->all_ms, s->sum_ms,
               s->timestamps ? "timestamps" : "wall clock each", s->floor_ms, s->class_ms[D_MATMUL],
               s->class_count[D_MATMUL], s->class_ms[D_ATTENTION], s->class_count[D_ATTENTION],
               s->class_ms[D_OTHER], s->class_count[D_OTHER], (double)bytes / (1024.0 * 1024.0),
               diff);
        printf("  %3s %-9s %9s %10s %8s  %s\n", "#", "class", "ms", "MB", "GB/s", "dispatch");
        for (uint32_t d = 0; d < s->all; d++) {
            const drow *r = &s->rows[d];
            printf("  %3u %-9s %9.4f %10.3f %8.1f  %s\n", d + 1, g_class_names[r->cls], r->ms,
                   (double)r->bytes / 1e6, r->ms > 0 ? (double)r->bytes / (r->ms * 1e6) : 0.0,
                   r->label);
        }
    }
    fflush(stdout);
}

static int run_block(kf_context *ctx, const kf_graph *g, const char *name, uint32_t repeat,
                     uint64_t seed, bool unfused, bool json, const char *device) {
    kf_plan *plan = NULL, *ref = NULL;
    kf_compile_options fo = {0}, uo = {.no_fuse = true};
    kf_status st = kf_graph_compile(ctx, g, &fo, &plan);
    if (st == KF_OK) {
        st = set_inputs(plan, g, seed);
    }
    if (st == KF_OK) {
        st = kf_plan_run(plan);
    }
    kf_timing whole = {0};
    if (st == KF_OK) {
        st = kf_plan_time(plan, repeat, &whole);
    }
    split s = {0};
    const kf_dispatch *ds = NULL;
    uint32_t n = 0;
    if (st == KF_OK) {
        st = kf_plan_dispatches(plan, &ds, &n);
    }
    if (st == KF_OK) {
        st = time_split(ctx, plan, ds, n, n, repeat, &s);
    }
    double diff = -1;
    if (st == KF_OK && unfused) {
        st = kf_graph_compile(ctx, g, &uo, &ref);
        if (st == KF_OK) {
            st = set_inputs(ref, g, seed);
        }
        if (st == KF_OK) {
            st = kf_plan_run(ref);
        }
        if (st == KF_OK) {
            st = kf_plan_run(plan); /* the timed subsets ran out of order: run it whole again */
        }
        if (st == KF_OK) {
            st = compare_outputs(plan, ref, g, &diff);
        }
    }
    int rc = 0;
    if (st != KF_OK) {
        fprintf(stderr, "%s: %s: %s\n", name, kf_status_str(st), kf_context_last_error(ctx));
        rc = 1;
    } else {
        kf_plan_summary sum;
        kf_plan_summary_get(plan, &sum);
        print_result(json, name, "block", &s, whole.median_ms, whole.min_ms, sum.dispatches,
                     sum.bytes, diff, device);
        if (diff > 1e-3 || diff != diff) {
            fprintf(stderr, "%s: fused and unfused outputs differ by %.3g\n", name, diff);
            rc = 1;
        }
    }
    free(s.rows);
    kf_plan_destroy(plan);
    kf_plan_destroy(ref);
    return rc;
}

static int run_step(kf_context *ctx, const kf_graph *g, const char *name, uint32_t repeat,
                    uint64_t seed, bool unfused, bool json, const char *device) {
    kf_trainer *t[2] = {0};
    kf_tensor *x = NULL, *y = NULL;
    const char *names[2] = {"x", "y"};
    kf_shape xs = {0};
    kf_dtype xd = KF_DTYPE_F32;
    kf_status st = KF_ERROR_INVALID_ARGUMENT;
    uint32_t vocab = 0;
    for (uint32_t i = 0; i < kf_graph_input_count(g); i++) {
        const char *in = NULL;
        kf_shape shape;
        kf_dtype dtype;
        kf_graph_input_info(g, i, &in, &shape, &dtype);
        if (!strcmp(in, "x")) {
            xs = shape, xd = dtype, st = KF_OK;
        } else if (!strcmp(in, "wte")) {
            vocab = shape.dims[0];
        }
    }
    if (st != KF_OK || xd != KF_DTYPE_I32 || !vocab) {
        fprintf(stderr, "%s: the spec needs i32 inputs x, y and a param wte [V, C]\n", name);
        return 1;
    }
    st = kf_tensor_create(&xs, &x);
    if (st == KF_OK) {
        st = kf_tensor_create(&xs, &y);
    }
    uint64_t state = seed * 0x9e3779b97f4a7c15ULL + 1;
    for (uint64_t e = 0; st == KF_OK && e < kf_tensor_size(x); e++) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        x->data[e] = (float)((state >> 33) % vocab);
    }
    for (uint64_t e = 0; st == KF_OK && e < kf_tensor_size(x); e++) {
        /* the next character, as prepare.py's windows */
        y->data[e] = e + 1 < kf_tensor_size(x) ? x->data[e + 1] : x->data[0];
    }
    const kf_tensor *batch[2] = {x, y};
    double ms[2] = {0}, min_ms[2] = {1e30, 1e30};
    for (uint32_t v = 0; v < (unfused ? 2u : 1u) && st == KF_OK; v++) {
        kf_trainer_desc desc = {
            .optimizer = {.kind = KF_OPTIMIZER_ADAMW, .lr = 1e-3f}, .seed = seed, .no_fuse = v};
        st = kf_trainer_create(ctx, g, &desc, &t[v]);
        if (st == KF_OK) {
            st = kf_trainer_step(t[v], names, batch, 2); /* the batch stays on the device */
        }
        for (uint32_t w = 0; w < 2 && st == KF_OK; w++) {
            st = kf_trainer_step(t[v], names, batch, 0); /* warm-up */
        }
        double *times = calloc(repeat, sizeof *times);
        for (uint32_t r = 0; r < repeat && st == KF_OK && times; r++) {
            double t0 = now_ms();
            st = kf_trainer_step(t[v], names, batch, 0);
            times[r] = now_ms() - t0;
            min_ms[v] = fmin(min_ms[v], times[r]);
        }
        for (uint32_t i = 1; times && i < repeat; i++) { /* insertion sort for the median */
            for (uint32_t j = i; j > 0 && times[j] < times[j - 1]; j--) {
                double tmp = times[j];
                times[j] = times[j - 1];
                times[j - 1] = tmp;
            }
        }
        ms[v] = times && repeat ? times[repeat / 2] : 0;
        free(times);
    }
    double diff = -1;
    if (st == KF_OK && unfused) {
        const float *lf = NULL, *lu = NULL;
        uint64_t nf = 0, nu = 0;
        st = kf_trainer_losses(t[0], &lf, &nf);
        if (st == KF_OK) {
            st = kf_trainer_losses(t[1], &lu, &nu);
        }
        diff = 0;
        for (uint64_t i = 0; st == KF_OK && i < nf && i < nu; i++) {
            double d = fabs((double)lf[i] - lu[i]) / fmax(fabs((double)lu[i]), 1e-6);
            diff = d > diff || d != d ? d : diff;
        }
    }
    /* The step's dispatches but the loss record (one invocation; re-running it would overrun
     * the history the losses above were read from): the plan's, then one update's, timed as one
     * pass and one by one. Each timed run takes an update more: the params move, as in training. */
    split s = {0};
    const kf_dispatch *pd = NULL, *od = NULL;
    uint32_t pn = 0, on = 0;
    kf_dispatch *all = NULL;
    if (st == KF_OK) {
        st = kf_plan_dispatches(kf_trainer_plan(t[0]), &pd, &pn);
    }
    if (st == KF_OK) {
        st = kf_optimizer_record(kf_trainer_optimizer(t[0]), &od, &on);
    }
    if (st == KF_OK) {
        all = calloc(pn + on, sizeof *all);
        st = all ? KF_OK : KF_ERROR_OUT_OF_MEMORY;
    }
    if (st == KF_OK) {
        memcpy(all, pd, sizeof *all * pn);
        memcpy(all + pn, od, sizeof *all * on);
        st = time_split(ctx, kf_trainer_plan(t[0]), all, pn + on, pn, repeat, &s);
    }
    free(all);
    int rc = 0;
    if (st != KF_OK) {
        fprintf(stderr, "%s: %s: %s\n", name, kf_status_str(st), kf_context_last_error(ctx));
        rc = 1;
    } else {
        kf_plan_summary sum;
        kf_plan_summary_get(kf_trainer_plan(t[0]), &sum);
        print_result(json, name, "step", &s, ms[0], min_ms[0], kf_trainer_dispatches_per_step(t[0]),
                     sum.bytes, diff, device);
        if (unfused && !json) {
            printf("%-22s unfused step %.3f ms (min %.3f), %u dispatches\n", name, ms[1], min_ms[1],
                   kf_trainer_dispatches_per_step(t[1]));
        }
        if (diff > 1e-3 || diff != diff) {
            fprintf(stderr, "%s: fused and unfused losses differ by %.3g\n", name, diff);
            rc = 1;
        }
    }
    free(s.rows);
    kf_trainer_destroy(t[0]);
    kf_trainer_destroy(t[1]);
    kf_tensor_destroy(x);
    kf_tensor_destroy(y);
    return rc;
}

int main(int argc, char **argv) {
    const char *spec = NULL, *mode = NULL, *name = NULL;
    uint32_t repeat = 20;
    unsigned long long seed = 1;
    bool unfused = true, json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        unsigned n = 0;
        if ((!strcmp(a, "--block") || !strcmp(a, "--step")) && v) {
            mode = a + 2, spec = v, i++;
        } else if (!strcmp(a, "--name") && v) {
            name = v, i++;
        } else if (!strcmp(a, "--repeat") && v && sscanf(v, "%u", &n) == 1 && n > 0) {
            repeat = n, i++;
        } else if (!strcmp(a, "--seed") && v && sscanf(v, "%llu", &seed) == 1) {
            i++;
        } else if (!strcmp(a, "--no-unfused")) {
            unfused = false;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else {
            return usage();
        }
    }
    if (!spec) {
        return usage();
    }
    kf_graph *g = NULL;
    kf_spec_error err;
    if (kf_spec_parse_file(spec, &g, &err) != KF_OK) {
        fprintf(stderr, "%s:%u:%u: %s\n", spec, err.line, err.column, err.message);
        return 1;
    }
    kf_context *ctx = NULL;
    kf_context_desc desc = {0};
    if (kf_context_create(&desc, &ctx) != KF_OK) {
        fprintf(stderr, "kfuse_bench_gpt: no device\n");
        kf_graph_destroy(g);
        return 1;
    }
    kf_adapter_info info;
    kf_context_adapter_info(ctx, &info);
    name = name ? name : spec;
    int rc = !strcmp(mode, "block")
                 ? run_block(ctx, g, name, repeat, seed, unfused, json, info.device)
                 : run_step(ctx, g, name, repeat, seed, unfused, json, info.device);
    kf_graph_destroy(g);
    kf_context_destroy(ctx);
    return rc;
}
