/* The benchmark's driver: the case list at both sizes, the references measured at the start, the
 * filter, and the two outputs (a table for people, JSON lines for bench/plot.sh and
 * bench/torch_compare.py). */
#include "bench.h"

#include <regex.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CASES 64

static const char *family_name(kf_bench_family f) {
    switch (f) {
    case KF_BENCH_COPY:
        return "copy";
    case KF_BENCH_CHAIN:
        return "chain";
    case KF_BENCH_MATMUL:
        return "matmul";
    case KF_BENCH_MATMUL_BIAS_GELU:
        return "matmul_bias_gelu";
    case KF_BENCH_SOFTMAX:
        return "softmax";
    case KF_BENCH_RMSNORM_WEIGHT:
        return "rmsnorm_weight";
    case KF_BENCH_LAYERNORM_AFFINE:
        return "layernorm_affine";
    case KF_BENCH_FFN_SAVE:
        return "ffn_save";
    case KF_BENCH_TRAIN_STEP:
        return "train_step";
    case KF_BENCH_RMSNORM_MATMUL:
        return "rmsnorm_matmul";
    }
    return "?";
}

/* The sizes: issue 6's at full size; at small size the same shapes scaled down so the whole run
 * takes seconds on lavapipe, keeping the ragged matmul ragged and ffn_dim a multiple of 4. */
typedef struct bench_sizes {
    uint64_t chain_elements;
    uint32_t matmul[3];
    uint32_t ragged[3]; /* m, n, k */
    uint32_t norm_rows, norm_cols;
    uint32_t ffn_dim, dim, tokens;
    uint32_t reference_matmul; /* the rate reference's m = n = k */
    uint32_t wide[4];          /* the wide MLP step: tokens, dim, ffn_dim, classes */
} bench_sizes;

static const bench_sizes full_sizes = {
    .chain_elements = 1ull << 28,
    .matmul = {1024, 4096, 8192},
    .ragged = {4095, 4097, 4093},
    .norm_rows = 4096,
    .norm_cols = 8192,
    .ffn_dim = 14336,
    .dim = 4096,
    .tokens = 4096,
    .reference_matmul = 4096,
    .wide = {4096, 4096, 16384, 4096},
};

static const bench_sizes small_sizes = {
    .chain_elements = 1ull << 20,
    .matmul = {64, 128, 256},
    .ragged = {255, 257, 253},
    .norm_rows = 256,
    .norm_cols = 1024,
    .ffn_dim = 1436,
    .dim = 512,
    .tokens = 64,
    .reference_matmul = 256,
    .wide = {256, 256, 1024, 256}, /* the full step's shape divided by 16 */
};

static uint32_t make_cases(const bench_sizes *s, kf_bench_case *out) {
    uint32_t n = 0;
    for (uint32_t ops = 1; ops <= 8; ops++) {
        kf_bench_case *c = &out[n++];
        *c = (kf_bench_case){.family = KF_BENCH_CHAIN, .elements = s->chain_elements, .ops = ops};
        snprintf(c->name, sizeof c->name, "chain_%u", ops);
    }
    for (kf_dtype d = KF_DTYPE_F32; d <= KF_DTYPE_F16; d++) {
        for (uint32_t i = 0; i < 4; i++) {
            kf_bench_case *c = &out[n++];
            *c = (kf_bench_case){.family = KF_BENCH_MATMUL_BIAS_GELU, .dtype = d};
            if (i < 3) {
                c->m = c->n = c->k = s->matmul[i];
                snprintf(c->name, sizeof c->name, "matmul_bias_gelu_%s_%u", kf_dtype_str(d), c->m);
            } else {
                c->m = s->ragged[0];
                c->n = s->ragged[1];
                c->k = s->ragged[2];
                snprintf(c->name, sizeof c->name, "matmul_bias_gelu_%s_ragged", kf_dtype_str(d));
            }
        }
    }
    /* rmsnorm into the matmul that reads it (src/fuse/rules/rmsnorm_matmul.c): a transformer's
     * tokens x dim -> dim projection, and a narrow one, where the normed tensor's bytes weigh
     * more against the product's arithmetic */
    for (kf_dtype d = KF_DTYPE_F32; d <= KF_DTYPE_F16; d++) {
        for (uint32_t i = 0; i < 2; i++) {
            kf_bench_case *c = &out[n++];
            *c = (kf_bench_case){.family = KF_BENCH_RMSNORM_MATMUL,
                                 .dtype = d,
                                 .m = s->reference_matmul,
                                 .k = s->reference_matmul,
                                 .n = i ? s->reference_matmul / 16 : s->reference_matmul};
            snprintf(c->name, sizeof c->name, "rmsnorm_matmul_%s_%u%s", kf_dtype_str(d), c->m,
                     i ? "_narrow" : "");
        }
    }
    const kf_bench_family rows[3] = {KF_BENCH_SOFTMAX, KF_BENCH_RMSNORM_WEIGHT,
                                     KF_BENCH_LAYERNORM_AFFINE};
    for (uint32_t i = 0; i < 3; i++) {
        kf_bench_case *c = &out[n++];
        *c = (kf_bench_case){.family = rows[i], .rows = s->norm_rows, .cols = s->norm_cols};
        snprintf(c->name, sizeof c->name, "%s", family_name(rows[i]));
    }
    /* One token, as the seeds save it (a few hundred KiB: dispatch cost dominates), and a batch
     * of tokens (memory-bound). */
    for (uint32_t i = 0; i < 2; i++) {
        kf_bench_case *c = &out[n++];
        *c = (kf_bench_case){.family = KF_BENCH_FFN_SAVE,
                             .ffn_dim = s->ffn_dim,
                             .dim = s->dim,
                             .tokens = i ? s->tokens : 1};
        snprintf(c->name, sizeof c->name, i ? "ffn_save_batch" : "ffn_save");
    }
    /* The digits MLP's step (examples/digits/mlp.kf) at every size: it is the model of issue 13. */
    kf_bench_case *t = &out[n++];
    *t = (kf_bench_case){
        .family = KF_BENCH_TRAIN_STEP, .tokens = 64, .dim = 64, .ffn_dim = 128, .cols = 10};
    snprintf(t->name, sizeof t->name, "train_step_digits_mlp");
    /* The wide MLP step of issue 13 (4096 tokens, 4096 -> 16384 -> gelu -> 4096 classes,
     * cross_entropy, AdamW); KFUSE_BENCH_WIDE=TxDxFxC sets its size (lavapipe cannot run the
     * full one in reasonable time). */
    uint32_t wide[4] = {s->wide[0], s->wide[1], s->wide[2], s->wide[3]};
    const char *env = getenv("KFUSE_BENCH_WIDE");
    uint32_t asked[4];
    if (env && sscanf(env, "%ux%ux%ux%u", &asked[0], &asked[1], &asked[2], &asked[3]) == 4 &&
        asked[0] && asked[1] && asked[2] && asked[3]) {
        memcpy(wide, asked, sizeof wide);
    }
    t = &out[n++];
    *t = (kf_bench_case){.family = KF_BENCH_TRAIN_STEP,
                         .tokens = wide[0],
                         .dim = wide[1],
                         .ffn_dim = wide[2],
                         .cols = wide[3],
                         .ops = 1 /* the batch stays on the device between steps */};
    snprintf(t->name, sizeof t->name, "train_step_wide_mlp");
    return n;
}

static const char *size_str(const kf_bench_case *c, char *buf, size_t size) {
    switch (c->family) {
    case KF_BENCH_COPY:
    case KF_BENCH_CHAIN:
        snprintf(buf, size, "%llu", (unsigned long long)c->elements);
        break;
    case KF_BENCH_MATMUL:
    case KF_BENCH_MATMUL_BIAS_GELU:
    case KF_BENCH_RMSNORM_MATMUL:
        snprintf(buf, size, "%ux%ux%u", c->m, c->n, c->k);
        break;
    case KF_BENCH_SOFTMAX:
    case KF_BENCH_RMSNORM_WEIGHT:
    case KF_BENCH_LAYERNORM_AFFINE:
        snprintf(buf, size, "%ux%u", c->rows, c->cols);
        break;
    case KF_BENCH_FFN_SAVE:
        snprintf(buf, size, "%ux(3x%u+%u)", c->tokens, c->ffn_dim, c->dim);
        break;
    case KF_BENCH_TRAIN_STEP:
        snprintf(buf, size, "%ux%u-%u-%u", c->tokens, c->dim, c->ffn_dim, c->cols);
        break;
    }
    return buf;
}

/* ---------------------------------------------------------------------------------------- */
/* Timing                                                                                   */
/* ---------------------------------------------------------------------------------------- */

static int compare_ms(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

kf_status kf_bench_interleave(uint32_t variants, uint32_t repeat, kf_bench_time_fn time_one,
                              void *user, kf_timing *out) {
    if (variants == 0 || variants > 4 || repeat == 0 || !time_one || !out) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    double *samples = calloc((size_t)variants * repeat, sizeof *samples);
    if (!samples) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    bool gpu[4] = {true, true, true, true};
    kf_status st = KF_OK;
    for (uint32_t r = 0; r < repeat && st == KF_OK; r++) {
        for (uint32_t i = 0; i < variants && st == KF_OK; i++) {
            uint32_t v = r % 2 ? variants - 1 - i : i;
            kf_timing one = {0};
            st = time_one(user, v, &one);
            samples[v * repeat + r] = one.median_ms;
            gpu[v] &= one.gpu_timestamps;
        }
    }
    for (uint32_t v = 0; v < variants && st == KF_OK; v++) {
        double *s = samples + (size_t)v * repeat;
        qsort(s, repeat, sizeof *s, compare_ms);
        out[v].min_ms = s[0];
        out[v].median_ms = repeat % 2 ? s[repeat / 2] : 0.5 * (s[repeat / 2 - 1] + s[repeat / 2]);
        out[v].gpu_timestamps = gpu[v];
    }
    free(samples);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Output                                                                                   */
/* ---------------------------------------------------------------------------------------- */

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            fprintf(f, "\\%c", ch);
        } else if (ch < 0x20) {
            fprintf(f, "\\u%04x", ch);
        } else {
            fputc(ch, f);
        }
    }
    fputc('"', f);
}

/* JSON has no NaN or infinity: a value that is not finite is written as null. */
static void json_number(FILE *f, const char *key, double v) {
    if (v == v && v - v == 0.0) {
        fprintf(f, ", \"%s\": %.6g", key, v);
    } else {
        fprintf(f, ", \"%s\": null", key);
    }
}

typedef struct reference {
    const char *name; /* "copy", "matmul_f32", "matmul_f16" */
    double value;     /* GB/s or TFLOP/s; 0 when not measured */
} reference;

static double metric(const kf_bench_result *r, double ms) {
    if (!(ms > 0.0)) {
        return 0.0;
    }
    return r->work / (ms * 1e-3) / (r->flops ? 1e12 : 1e9);
}

static void print_case_json(FILE *f, const kf_bench_case *c, const kf_bench_result *r,
                            const reference *ref, uint32_t repeat) {
    char buf[512];
    fprintf(f, "{\"kind\": \"case\", \"case\": ");
    json_string(f, c->name);
    fprintf(f, ", \"family\": \"%s\", \"dtype\": \"%s\", \"size\": \"%s\"", family_name(c->family),
            kf_dtype_str(c->dtype), size_str(c, buf, sizeof buf));
    switch (c->family) {
    case KF_BENCH_COPY:
    case KF_BENCH_CHAIN:
        fprintf(f, ", \"elements\": %llu, \"ops\": %u", (unsigned long long)c->elements, c->ops);
        break;
    case KF_BENCH_MATMUL:
    case KF_BENCH_MATMUL_BIAS_GELU:
    case KF_BENCH_RMSNORM_MATMUL:
        fprintf(f, ", \"m\": %u, \"n\": %u, \"k\": %u", c->m, c->n, c->k);
        break;
    case KF_BENCH_SOFTMAX:
    case KF_BENCH_RMSNORM_WEIGHT:
    case KF_BENCH_LAYERNORM_AFFINE:
        fprintf(f, ", \"rows\": %u, \"cols\": %u", c->rows, c->cols);
        break;
    case KF_BENCH_FFN_SAVE:
        fprintf(f, ", \"ffn_dim\": %u, \"dim\": %u, \"tokens\": %u", c->ffn_dim, c->dim, c->tokens);
        break;
    case KF_BENCH_TRAIN_STEP:
        fprintf(f, ", \"batch\": %u, \"in\": %u, \"hidden\": %u, \"classes\": %u", c->tokens,
                c->dim, c->ffn_dim, c->cols);
        break;
    }
    kf_bench_spec(c, buf, sizeof buf);
    if (buf[0]) {
        fprintf(f, ", \"spec\": ");
        json_string(f, buf);
    }
    fprintf(f, ", \"status\": \"%s\"", r->failed ? "failed" : r->skipped ? "skipped" : "ok");
    if (r->note[0]) {
        fprintf(f, ", \"note\": ");
        json_string(f, r->note);
    }
    if (r->skipped || r->dispatches_fused == 0) {
        fprintf(f, "}\n");
        return;
    }
    double fused = metric(r, r->fused.median_ms), unfused = metric(r, r->unfused.median_ms);
    json_number(f, "fused_ms", r->fused.median_ms);
    json_number(f, "unfused_ms", r->unfused.median_ms);
    json_number(f, "fused_min_ms", r->fused.min_ms);
    json_number(f, "unfused_min_ms", r->unfused.min_ms);
    json_number(f, "speedup", r->unfused.median_ms / r->fused.median_ms);
    fprintf(f, ", \"dispatches_fused\": %u, \"dispatches_unfused\": %u", r->dispatches_fused,
            r->dispatches_unfused);
    fprintf(f, ", \"bytes_fused\": %llu, \"bytes_unfused\": %llu",
            (unsigned long long)r->bytes_fused, (unsigned long long)r->bytes_unfused);
    fprintf(f, ", \"metric\": \"%s\"", r->flops ? "TFLOP/s" : "GB/s");
    json_number(f, r->flops ? "flops" : "compulsory_bytes", r->work);
    json_number(f, "fused_value", fused);
    json_number(f, "unfused_value", unfused);
    if (ref && ref->value > 0.0) {
        fprintf(f, ", \"reference\": \"%s\"", ref->name);
        json_number(f, "reference_value", ref->value);
        json_number(f, "fraction", fused / ref->value);
        json_number(f, "unfused_fraction", unfused / ref->value);
    }
    json_number(f, "max_rel_diff", r->max_rel_diff);
    if (c->family != KF_BENCH_FFN_SAVE && c->family != KF_BENCH_TRAIN_STEP) {
        json_number(f, "sample_rel_err", r->sample_rel_err);
    }
    fprintf(f, ", \"timer\": \"%s\", \"repeat\": %u}\n", r->fused.gpu_timestamps ? "gpu" : "wall",
            repeat);
}

static void print_table_header(FILE *f) {
    fprintf(f, "%-28s %-20s %10s %10s %8s %6s %14s %14s  %s\n", "case", "size", "fused ms",
            "unfused ms", "speedup", "disp", "fused", "unfused", "fused / reference");
}

static void print_case_row(FILE *f, const kf_bench_case *c, const kf_bench_result *r,
                           const reference *ref) {
    char size[64];
    fprintf(f, "%-28s %-20s", c->name, size_str(c, size, sizeof size));
    if (r->skipped || r->dispatches_fused == 0) {
        fprintf(f, " %s: %s\n", r->failed ? "FAILED" : "skipped", r->note);
        return;
    }
    double fused = metric(r, r->fused.median_ms), unfused = metric(r, r->unfused.median_ms);
    const char *unit = r->flops ? "TF/s" : "GB/s";
    char disp[16];
    snprintf(disp, sizeof disp, "%u/%u", r->dispatches_fused, r->dispatches_unfused);
    fprintf(f, " %10.4f %10.4f %7.2fx %6s %9.4g %s %9.4g %s", r->fused.median_ms,
            r->unfused.median_ms, r->unfused.median_ms / r->fused.median_ms, disp, fused, unit,
            unfused, unit);
    if (ref && ref->value > 0.0) {
        fprintf(f, "  %5.1f%% of %s", 100.0 * fused / ref->value, ref->name);
    }
    fprintf(f, "\n");
    if (r->failed) {
        fprintf(f, "    FAILED: %s\n", r->note);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Running                                                                                  */
/* ---------------------------------------------------------------------------------------- */

/* A reason not to run the case on this device, or NULL. */
static const char *unfit(const kf_bench_case *c, const kf_adapter_info *info, char *buf,
                         size_t size) {
    if (c->dtype == KF_DTYPE_F16 && !info->has_f16) {
        return "the adapter has no shader-f16";
    }
    uint64_t largest = kf_bench_largest_buffer(c);
    if (info->max_storage_buffer_binding_size && largest > info->max_storage_buffer_binding_size) {
        snprintf(buf, size,
                 "a %llu-byte buffer is above this device's maxStorageBufferBindingSize (%llu)",
                 (unsigned long long)largest,
                 (unsigned long long)info->max_storage_buffer_binding_size);
        return buf;
    }
    if (info->max_buffer_size && largest > info->max_buffer_size) {
        snprintf(buf, size, "a %llu-byte buffer is above this device's maxBufferSize (%llu)",
                 (unsigned long long)largest, (unsigned long long)info->max_buffer_size);
        return buf;
    }
    return NULL;
}

static void run_case(kf_context *ctx, const kf_bench_case *c, const kf_adapter_info *info,
                     uint32_t repeat, uint64_t seed, kf_bench_result *r) {
    memset(r, 0, sizeof *r);
    char why[256];
    const char *reason = unfit(c, info, why, sizeof why);
    if (reason) {
        r->skipped = true;
        snprintf(r->note, sizeof r->note, "%s", reason);
    } else if (c->family == KF_BENCH_FFN_SAVE) {
        kf_bench_run_ffn_save(ctx, c, repeat, seed, r);
    } else if (c->family == KF_BENCH_TRAIN_STEP) {
        kf_bench_run_train_step(ctx, c, repeat, seed, r);
    } else {
        kf_bench_run_graph_case(ctx, c, repeat, seed, r);
    }
}

/* The reference a case's throughput is compared with. */
static const reference *reference_for(const kf_bench_case *c, const reference *refs) {
    if (c->family == KF_BENCH_MATMUL || c->family == KF_BENCH_MATMUL_BIAS_GELU ||
        c->family == KF_BENCH_RMSNORM_MATMUL) {
        return &refs[c->dtype == KF_DTYPE_F16 ? 2 : 1];
    }
    return &refs[0];
}

/* Measures one reference: the fastest run of both variants (fused and unfused plans of one
 * operator are the same plan). The best run, not the median, because a reference stands for what
 * the device can do: a run slowed by something else on the machine says nothing about that. */
static void measure_reference(kf_context *ctx, const kf_bench_case *c, const kf_adapter_info *info,
                              uint32_t repeat, uint64_t seed, FILE *table, FILE *json,
                              reference *ref, bool *failed) {
    kf_bench_result r;
    run_case(ctx, c, info, repeat, seed, &r);
    char size[64];
    if (r.skipped || r.failed || r.dispatches_fused == 0) {
        *failed |= r.failed;
        if (json) {
            fprintf(json, "{\"kind\": \"reference\", \"reference\": \"%s\", \"status\": \"%s\"",
                    ref->name, r.failed ? "failed" : "skipped");
            fprintf(json, ", \"note\": ");
            json_string(json, r.note);
            fprintf(json, "}\n");
            fflush(json);
        }
        if (table) {
            fprintf(table, "reference %-10s %s: %s (fractions of it are left out)\n", ref->name,
                    r.failed ? "FAILED" : "skipped", r.note);
            fflush(table);
        }
        return;
    }
    double ms = r.fused.min_ms < r.unfused.min_ms ? r.fused.min_ms : r.unfused.min_ms;
    ref->value = metric(&r, ms);
    const char *unit = r.flops ? "TFLOP/s" : "GB/s";
    if (json) {
        fprintf(json, "{\"kind\": \"reference\", \"reference\": \"%s\", \"status\": \"ok\"",
                ref->name);
        fprintf(json, ", \"dtype\": \"%s\", \"size\": \"%s\", \"metric\": \"%s\"",
                kf_dtype_str(c->dtype), size_str(c, size, sizeof size), unit);
        json_number(json, "best_ms", ms);
        json_number(json, "value", ref->value);
        fprintf(json, "}\n");
        fflush(json);
    }
    if (table) {
        fprintf(table, "reference %-10s %s %s: %.4f ms (best run), %.4g %s\n", ref->name,
                kf_dtype_str(c->dtype), size_str(c, size, sizeof size), ms, ref->value, unit);
        fflush(table);
    }
}

int kf_bench_run(kf_context *ctx, const kf_bench_options *opts) {
    FILE *out = opts->out ? opts->out : stdout;
    /* Where the table and the JSON lines go (either may be NULL). */
    FILE *table = opts->json ? NULL : out;
    FILE *json = opts->json ? out : opts->json_also;
    kf_adapter_info info;
    memset(&info, 0, sizeof info);
    kf_status st = ctx ? kf_context_adapter_info(ctx, &info) : KF_ERROR_INVALID_ARGUMENT;
    if (st != KF_OK && !(opts->list && !ctx)) {
        fprintf(stderr, "kfuse bench: adapter info: %s\n", kf_status_str(st));
        return 1;
    }
    bool small = opts->size == KF_BENCH_SIZE_SMALL ||
                 (opts->size == KF_BENCH_SIZE_DEFAULT && !strcmp(info.adapter_type, "CPU"));
    uint32_t repeat = opts->repeat ? opts->repeat : small ? 5 : 10;

    regex_t re;
    if (opts->filter) {
        int err = regcomp(&re, opts->filter, REG_EXTENDED | REG_NOSUB);
        if (err != 0) {
            char msg[256];
            regerror(err, &re, msg, sizeof msg);
            fprintf(stderr, "kfuse bench: --filter '%s': %s\n", opts->filter, msg);
            return 2;
        }
    }
    kf_bench_case all[MAX_CASES], cases[MAX_CASES];
    uint32_t all_count = make_cases(small ? &small_sizes : &full_sizes, all), count = 0;
    for (uint32_t i = 0; i < all_count; i++) {
        if (!opts->filter || regexec(&re, all[i].name, 0, NULL, 0) == 0) {
            cases[count++] = all[i];
        }
    }
    if (opts->filter) {
        regfree(&re);
    }
    if (opts->list) {
        for (uint32_t i = 0; i < count; i++) {
            char size[64], spec[512];
            kf_bench_spec(&cases[i], spec, sizeof spec);
            fprintf(out, "%-28s %s %-18s %s\n", cases[i].name, kf_dtype_str(cases[i].dtype),
                    size_str(&cases[i], size, sizeof size),
                    spec[0] ? spec : "(buffer copies: kf_save_activations)");
        }
        return 0;
    }
    if (count == 0) {
        fprintf(stderr, "kfuse bench: no case matches '%s' (kfuse bench --list shows them)\n",
                opts->filter ? opts->filter : "");
        return 2;
    }

    if (json) {
        fprintf(json, "{\"kind\": \"device\", \"device\": ");
        json_string(json, info.device);
        fprintf(json, ", \"description\": ");
        json_string(json, info.description);
        fprintf(json, ", \"vendor\": ");
        json_string(json, info.vendor);
        fprintf(json, ", \"backend\": ");
        json_string(json, info.backend);
        fprintf(json, ", \"adapter_type\": ");
        json_string(json, info.adapter_type);
        fprintf(json,
                ", \"has_f16\": %s, \"has_timestamps\": %s, \"size\": \"%s\", \"repeat\": %u, "
                "\"batch\": %u, \"seed\": %llu}\n",
                info.has_f16 ? "true" : "false", info.has_timestamps ? "true" : "false",
                small ? "small" : "full", repeat, opts->batch ? opts->batch : 1,
                (unsigned long long)opts->seed);
        fflush(json);
    }
    if (table) {
        fprintf(table,
                "kfuse bench on %s (%s, %s, %s); %s sizes; median of %u runs%s%.0u%s, timed by "
                "%s; seed %llu\n",
                info.device[0] ? info.device : info.description, info.vendor, info.backend,
                info.adapter_type, small ? "small" : "full", repeat,
                opts->batch > 1 ? " (each the plan " : "", opts->batch > 1 ? opts->batch : 0,
                opts->batch > 1 ? " times back to back, per run)" : "",
                info.has_timestamps ? "GPU timestamps" : "the wall clock",
                (unsigned long long)opts->seed);
        fflush(table);
    }

    /* The references, only where a selected case is compared with them. */
    reference refs[3] = {{"copy", 0.0}, {"matmul_f32", 0.0}, {"matmul_f16", 0.0}};
    bool need[3] = {false, false, false};
    for (uint32_t i = 0; i < count; i++) {
        need[reference_for(&cases[i], refs) - refs] = true;
    }
    const bench_sizes *sizes = small ? &small_sizes : &full_sizes;
    bool failed = false;
    if (need[0]) {
        /* The largest chain's size, halved until one buffer fits the device. */
        kf_bench_case copy = {.family = KF_BENCH_COPY, .elements = sizes->chain_elements};
        snprintf(copy.name, sizeof copy.name, "copy");
        char why[256];
        while (copy.elements > 1024 && unfit(&copy, &info, why, sizeof why)) {
            copy.elements /= 2;
        }
        measure_reference(ctx, &copy, &info, repeat, opts->seed, table, json, &refs[0], &failed);
    }
    for (uint32_t d = 0; d < 2; d++) {
        if (!need[1 + d]) {
            continue;
        }
        uint32_t m = sizes->reference_matmul;
        kf_bench_case mm = {.family = KF_BENCH_MATMUL,
                            .dtype = d ? KF_DTYPE_F16 : KF_DTYPE_F32,
                            .m = m,
                            .n = m,
                            .k = m};
        snprintf(mm.name, sizeof mm.name, "matmul");
        measure_reference(ctx, &mm, &info, repeat, opts->seed, table, json, &refs[1 + d], &failed);
    }

    if (table) {
        print_table_header(table);
    }
    uint32_t ran = 0, skipped = 0, case_failures = 0;
    for (uint32_t i = 0; i < count; i++) {
        kf_bench_result r;
        cases[i].batch = opts->batch;
        run_case(ctx, &cases[i], &info, repeat, opts->seed + i + 1, &r);
        failed |= r.failed;
        case_failures += r.failed;
        skipped += r.skipped && !r.failed;
        ran += !r.skipped && !r.failed;
        const reference *ref = reference_for(&cases[i], refs);
        if (json) {
            print_case_json(json, &cases[i], &r, ref, repeat);
            fflush(json);
        }
        if (table) {
            print_case_row(table, &cases[i], &r, ref);
            fflush(table);
        }
    }
    if (table) {
        fprintf(table, "%u case%s: %u ran, %u skipped, %u failed\n", count, count == 1 ? "" : "s",
                ran, skipped, case_failures);
    }
    return failed ? 1 : 0;
}
