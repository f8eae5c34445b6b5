/* kfuse run: plan a graph, feed it, run it, check it against the CPU specs, time it. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_GIVEN 32

kf_graph *kf_cli_load_spec(const char *arg, bool is_text) {
    kf_graph *g = NULL;
    kf_spec_error err = {0};
    kf_status st;
    const char *where = arg;
    if (is_text) {
        where = "-e";
        st = kf_spec_parse(arg, strlen(arg), &g, &err);
    } else if (!strcmp(arg, "-")) {
        where = "<stdin>";
        size_t cap = 4096, len = 0;
        char *buf = malloc(cap);
        size_t n;
        while (buf && (n = fread(buf + len, 1, cap - len, stdin)) > 0) {
            len += n;
            if (len == cap) {
                char *bigger = realloc(buf, cap * 2);
                if (!bigger) {
                    free(buf);
                    buf = NULL;
                    break;
                }
                buf = bigger;
                cap *= 2;
            }
        }
        if (!buf) {
            fprintf(stderr, "kfuse: out of memory reading standard input\n");
            return NULL;
        }
        st = kf_spec_parse(buf, len, &g, &err);
        free(buf);
    } else {
        st = kf_spec_parse_file(arg, &g, &err);
    }
    if (st != KF_OK) {
        if (err.line) {
            fprintf(stderr, "%s:%u:%u: error: %s\n", where, err.line, err.column, err.message);
        } else if (err.message[0] && strstr(err.message, where)) {
            fprintf(stderr, "kfuse: error: %s\n", err.message); /* it names the file already */
        } else {
            fprintf(stderr, "%s: error: %s\n", where,
                    err.message[0] ? err.message : kf_status_str(st));
        }
        kf_graph_destroy(g);
        return NULL;
    }
    return g;
}

/* Wall-clock milliseconds, for the compile and first-run times --json reports. */
static double wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void run_usage(FILE *f) {
    fprintf(f, "usage: kfuse run SPEC [--no-fuse] [--check] [--repeat N] [--seed S] [--json]\n"
               "                 [--input NAME=FILE.npy]... [--save DIR]\n\n"
               "Plans and runs the graph in SPEC (a file, '-' for standard input, or -e 'TEXT').\n"
               "Inputs are random (from the seed) unless given as .npy files (f32 or f16).\n\n"
               "  --no-fuse          one dispatch per operator, for comparison\n"
               "  --check            compare every output with the unfused CPU specs\n"
               "  --repeat N         time N runs and print the median (default 10)\n"
               "  --seed S           seed of the random inputs (default: fresh, printed)\n"
               "  --input NAME=FILE  read input NAME from a .npy file\n"
               "  --save DIR         write every output to DIR/NAME.npy (all or none)\n"
               "  --json             one JSON object: dispatches, unfused_dispatches, bytes,\n"
               "                     unfused_bytes, time_ms, upload_bytes and download_bytes\n"
               "                     (moved by the timed runs), compile_ms and first_run_ms\n"
               "                     (wall clock), max_rel_err (with --check)\n");
}

typedef struct run_args {
    const char *spec;
    bool spec_is_text;
    kf_compile_options opts;
    bool check;
    bool json;
    uint32_t repeat;
    uint64_t seed;
    const char *save_dir;
    const char *given_names[MAX_GIVEN];
    const char *given_files[MAX_GIVEN];
    uint32_t given_count;
} run_args;

static int parse_args(int argc, char **argv, run_args *a) {
    a->repeat = 10;
    a->seed = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)clock();
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        bool has_next = i + 1 < argc;
        if (kf_cli_is_help(arg)) {
            run_usage(stdout);
            return 0;
        } else if (!strcmp(arg, "--no-fuse")) {
            a->opts.no_fuse = true;
        } else if (!strcmp(arg, "--check")) {
            a->check = true;
        } else if (!strcmp(arg, "--json")) {
            a->json = true;
        } else if (!strcmp(arg, "--repeat") && has_next) {
            uint64_t v;
            if (!kf_cli_number("run", "--repeat", argv[++i], 1, 100000, &v)) {
                return 2;
            }
            a->repeat = (uint32_t)v;
        } else if (!strcmp(arg, "--seed") && has_next) {
            if (!kf_cli_number("run", "--seed", argv[++i], 0, UINT64_MAX, &a->seed)) {
                return 2;
            }
        } else if (!strcmp(arg, "--save") && has_next) {
            a->save_dir = argv[++i];
        } else if (!strcmp(arg, "--input") && has_next) {
            char *eq = strchr(argv[++i], '=');
            if (!eq || eq == argv[i] || !eq[1]) {
                fprintf(stderr, "kfuse run: --input takes NAME=FILE.npy, not '%s'\n", argv[i]);
                return 2;
            }
            if (a->given_count == MAX_GIVEN) {
                fprintf(stderr, "kfuse run: --input %s: at most %d inputs can be given as files\n",
                        argv[i], MAX_GIVEN);
                return 2;
            }
            *eq = '\0';
            a->given_names[a->given_count] = argv[i];
            a->given_files[a->given_count++] = eq + 1;
        } else if (!strcmp(arg, "-e") && has_next) {
            a->spec = argv[++i];
            a->spec_is_text = true;
        } else if (arg[0] == '-' && arg[1] != '\0') {
            fprintf(stderr, "kfuse run: unknown or incomplete option '%s'\n", arg);
            run_usage(stderr);
            return 2;
        } else if (!a->spec) {
            a->spec = arg;
        } else {
            fprintf(stderr, "kfuse run: one SPEC only ('%s' is extra)\n", arg);
            return 2;
        }
    }
    if (!a->spec) {
        run_usage(stderr);
        return 2;
    }
    return -1; /* go on */
}

static void print_summary(const char *name, const kf_tensor *t) {
    uint64_t n = kf_tensor_size(t);
    double sum = 0.0, lo = INFINITY, hi = -INFINITY;
    uint64_t nonfinite = 0;
    for (uint64_t i = 0; i < n; i++) {
        double v = t->data[i];
        if (!isfinite(v)) {
            nonfinite++;
            continue;
        }
        sum += v;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    char shape[64];
    printf("%-12s f32[%s]  mean %.6g  min %.6g  max %.6g", name,
           kf_shape_str(&t->shape, shape, sizeof shape),
           n > nonfinite ? sum / (double)(n - nonfinite) : 0.0, lo, hi);
    if (nonfinite) {
        printf("  (%llu not finite)", (unsigned long long)nonfinite);
    }
    printf("\n             [");
    for (uint64_t i = 0; i < n && i < 6; i++) {
        printf("%s%.6g", i ? ", " : "", (double)t->data[i]);
    }
    printf("%s]\n", n > 6 ? ", ..." : "");
}

/* DIR/NAME.npy (staged: DIR/.NAME.npy.partial), or NULL (with a message) when out of memory. No
 * fixed buffer: a path too long for the system is refused by the system, with its reason, never cut
 * short here. */
static char *output_path(const char *dir, const char *name, bool staged) {
    const char *suffix = staged ? ".npy.partial" : ".npy";
    size_t size = strlen(dir) + strlen(name) + strlen(suffix) + 8;
    char *path = malloc(size);
    if (!path) {
        fprintf(stderr, "kfuse run: --save: out of memory\n");
        return NULL;
    }
    snprintf(path, size, "%s/%s%s%s", dir, staged ? "." : "", name, suffix);
    return path;
}

/* All or nothing: every output is first written whole beside its final name (kf_npy_write
 * itself writes a temporary file and renames it), then each is renamed into place. A failed
 * write removes what this run wrote and leaves DIR's earlier files as they were; a kill leaves
 * them as they were too, with at most hidden temporaries beside them (.NAME.npy.partial, which
 * the next --save replaces, or kf_npy_write's .kfuse-*.npy.tmp). */
static int save_outputs(const kf_graph *g, kf_tensor **outs, const char *dir) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "kfuse run: --save: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    struct stat sb;
    int problem = stat(dir, &sb) != 0 ? errno : !S_ISDIR(sb.st_mode) ? ENOTDIR : 0;
    if (problem) {
        fprintf(stderr, "kfuse run: --save: %s: %s\n", dir, strerror(problem));
        return 1;
    }
    uint32_t count = kf_graph_output_count(g);
    char **staged = calloc(count ? count : 1, sizeof *staged);
    if (!staged) {
        fprintf(stderr, "kfuse run: --save: out of memory\n");
        return 1;
    }
    int rc = 0;
    uint32_t written = 0;
    for (uint32_t o = 0; o < count && rc == 0; o++) {
        const char *name;
        kf_dtype dtype;
        kf_graph_output_info(g, o, &name, NULL, &dtype);
        staged[o] = output_path(dir, name, true);
        if (!staged[o]) {
            rc = 1;
            break;
        }
        char *final_path = output_path(dir, name, false);
        /* a directory in the way would fail the rename, after other outputs were replaced */
        errno = final_path && stat(final_path, &sb) == 0 && S_ISDIR(sb.st_mode) ? EISDIR : 0;
        kf_status st = errno ? KF_ERROR_IO
                             : kf_npy_write(staged[o], outs[o],
                                            dtype == KF_DTYPE_F16 ? KF_DTYPE_F16 : KF_DTYPE_F32);
        if (st != KF_OK) {
            fprintf(stderr, "kfuse run: --save: cannot write %s: %s; no output file was changed\n",
                    final_path ? final_path : name,
                    st == KF_ERROR_IO && errno ? strerror(errno) : kf_status_str(st));
            rc = 1;
        }
        free(final_path);
        if (rc) {
            break;
        }
        written = o + 1;
    }
    for (uint32_t o = 0; o < written && rc == 0; o++) {
        const char *name;
        kf_graph_output_info(g, o, &name, NULL, NULL);
        char *final_path = output_path(dir, name, false);
        if (!final_path || rename(staged[o], final_path) != 0) {
            fprintf(stderr,
                    "kfuse run: --save: cannot rename %s into place: %s (%u of %u outputs "
                    "were replaced)\n",
                    staged[o], final_path ? strerror(errno) : "out of memory", o, count);
            rc = 1;
        }
        free(final_path);
    }
    for (uint32_t o = 0; o < count; o++) {
        if (staged[o] && rc != 0) {
            unlink(staged[o]); /* gone already when renamed; ENOENT is fine */
        }
        free(staged[o]);
    }
    free(staged);
    return rc;
}

int kf_cmd_run(int argc, char **argv) {
    run_args a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) {
        return rc;
    }
    kf_graph *g = kf_cli_load_spec(a.spec, a.spec_is_text);
    if (!g) {
        return 1;
    }
    kf_context *ctx = kf_cli_context();
    if (!ctx) {
        kf_graph_destroy(g);
        return 1;
    }
    kf_plan *plan = NULL;
    kf_tensor *given[MAX_GIVEN] = {0};
    uint32_t out_count = kf_graph_output_count(g);
    kf_tensor **outs = calloc(out_count ? out_count : 1, sizeof *outs);
    kf_plan_report report = {0};
    kf_timing timing = {0};
    kf_plan_summary summary = {0};
    rc = 1;
    double compile_start = wall_ms();
    kf_status st = kf_graph_compile(ctx, g, &a.opts, &plan);
    double compile_ms = wall_ms() - compile_start;
    if (st != KF_OK || !outs) {
        fprintf(stderr, "kfuse run: %s: %s\n", kf_status_str(st), kf_context_last_error(ctx));
        goto done;
    }
    kf_plan_summary_get(plan, &summary);
    for (uint32_t i = 0; i < a.given_count; i++) {
        char msg[256] = {0};
        st = kf_npy_read(a.given_files[i], &given[i], msg, sizeof msg);
        if (st != KF_OK) {
            /* kf_npy_read's message starts with the path */
            fprintf(stderr, "kfuse run: --input %s: %s\n", a.given_names[i],
                    msg[0] ? msg : kf_status_str(st));
            goto done;
        }
    }
    /* Every input: the given file or fresh random data from the seed. */
    for (uint32_t i = 0; i < kf_graph_input_count(g); i++) {
        const char *name;
        kf_graph_input_info(g, i, &name, NULL, NULL);
        const kf_tensor *value = NULL;
        kf_tensor *random = NULL;
        for (uint32_t j = 0; j < a.given_count; j++) {
            if (!strcmp(a.given_names[j], name)) {
                value = given[j];
            }
        }
        if (!value) {
            st = kf_plan_random_input(plan, name, a.seed, &random);
            value = random;
        }
        if (st == KF_OK) {
            st = kf_plan_set_input(plan, name, value);
        }
        kf_tensor_destroy(random);
        if (st != KF_OK) {
            const char *why = kf_context_last_error(ctx);
            char prefix[96];
            snprintf(prefix, sizeof prefix, "input %s:", name);
            /* the library's message usually names the input already */
            fprintf(stderr, "kfuse run: %s%s%s\n",
                    strncmp(why, prefix, strlen(prefix)) ? prefix : "",
                    strncmp(why, prefix, strlen(prefix)) ? " " : "", why);
            goto done;
        }
    }
    for (uint32_t j = 0; j < a.given_count; j++) {
        bool known = false;
        for (uint32_t i = 0; i < kf_graph_input_count(g); i++) {
            const char *name;
            kf_graph_input_info(g, i, &name, NULL, NULL);
            known |= !strcmp(name, a.given_names[j]);
        }
        if (!known) {
            fprintf(stderr, "kfuse run: --input %s: the graph has no input of that name\n",
                    a.given_names[j]);
            goto done;
        }
    }
    double first_start = wall_ms();
    st = kf_plan_run(plan);
    double first_run_ms = wall_ms() - first_start;
    /* What the timed runs move between host and device: inputs stay on the device, so 0. */
    kf_context_stats before = {0}, after = {0};
    kf_context_stats_get(ctx, &before);
    if (st == KF_OK) {
        st = kf_plan_time(plan, a.repeat, &timing);
    }
    kf_context_stats_get(ctx, &after);
    if (st != KF_OK) {
        fprintf(stderr, "kfuse run: %s: %s\n", kf_status_str(st), kf_context_last_error(ctx));
        goto done;
    }
    for (uint32_t o = 0; o < out_count; o++) {
        const char *name;
        kf_shape shape;
        kf_graph_output_info(g, o, &name, &shape, NULL);
        if (kf_tensor_create(&shape, &outs[o]) != KF_OK ||
            kf_plan_get_output(plan, name, outs[o]) != KF_OK) {
            fprintf(stderr, "kfuse run: output %s: %s\n", name, kf_context_last_error(ctx));
            goto done;
        }
    }
    if (a.check) {
        st = kf_plan_check(plan, a.given_names, (const kf_tensor *const *)given, a.given_count,
                           a.seed, &report);
        if (st != KF_OK && st != KF_ERROR_MISMATCH) {
            fprintf(stderr, "kfuse run: check: %s: %s\n", kf_status_str(st),
                    kf_context_last_error(ctx));
            goto done;
        }
    }
    rc = a.check && !report.passed ? 1 : 0;
    double worst = 0.0;
    for (uint32_t o = 0; o < report.output_count; o++) {
        worst = report.outputs[o].max_rel_error > worst ? report.outputs[o].max_rel_error : worst;
    }
    if (a.json) {
        printf("{\"dispatches\": %u, \"unfused_dispatches\": %u, \"bytes\": %llu, "
               "\"unfused_bytes\": %llu, \"time_ms\": %.6f, \"timer\": \"%s\", \"seed\": %llu",
               summary.dispatches, summary.unfused_dispatches, (unsigned long long)summary.bytes,
               (unsigned long long)summary.unfused_bytes, timing.median_ms,
               timing.gpu_timestamps ? "gpu" : "wall", (unsigned long long)a.seed);
        printf(", \"upload_bytes\": %llu, \"download_bytes\": %llu",
               (unsigned long long)(after.upload_bytes - before.upload_bytes),
               (unsigned long long)(after.download_bytes - before.download_bytes));
        printf(", \"compile_ms\": %.3f, \"first_run_ms\": %.3f, \"disk_cache_loads\": %llu",
               compile_ms, first_run_ms, (unsigned long long)after.disk_cache_loads);
        if (a.check) {
            printf(", \"max_rel_err\": %.6g, \"passed\": %s, \"outputs\": %u, "
                   "\"failed_outputs\": %u, \"groups\": %u, \"failed_groups\": %u",
                   worst, report.passed ? "true" : "false", report.total_outputs,
                   report.failed_outputs, report.total_groups, report.failed_groups);
        }
        printf("}\n");
    } else {
        printf("seed %llu; plan: %u dispatch%s (unfused: %u)\n", (unsigned long long)a.seed,
               summary.dispatches, summary.dispatches == 1 ? "" : "es", summary.unfused_dispatches);
        for (uint32_t o = 0; o < out_count; o++) {
            const char *name;
            kf_graph_output_info(g, o, &name, NULL, NULL);
            print_summary(name, outs[o]);
        }
        for (uint32_t i = 0; i < report.group_count; i++) {
            const kf_plan_group_report *gr = &report.groups[i];
            printf("check group %u (%s: %s -> %s) max_rel_err %.3g (tolerance %.3g) %s",
                   gr->dispatch, gr->rule, gr->ops, gr->result, gr->max_rel_error, gr->tolerance,
                   gr->passed ? "ok" : "FAILED");
            if (!gr->passed) {
                printf(": element %llu is %.9g, the specs say %.9g",
                       (unsigned long long)gr->element, (double)gr->got, (double)gr->expected);
            }
            printf("\n");
        }
        if (report.total_groups > report.group_count) {
            printf("check groups: %u more not listed; %u of %u failed\n",
                   report.total_groups - report.group_count, report.failed_groups,
                   report.total_groups);
        }
        for (uint32_t o = 0; o < report.output_count; o++) {
            printf("check %-6s max_rel_err %.3g (tolerance %.3g) %s\n", report.outputs[o].name,
                   report.outputs[o].max_rel_error, report.outputs[o].tolerance,
                   report.outputs[o].passed ? "ok" : "FAILED");
        }
        if (report.total_outputs > report.output_count) {
            printf("check outputs: %u more not listed (they passed unless counted here); %u of %u "
                   "failed\n",
                   report.total_outputs - report.output_count, report.failed_outputs,
                   report.total_outputs);
        }
        if (report.failing_graph[0]) {
            printf("smallest failing subgraph (its inputs as the group read them):\n%s",
                   report.failing_graph);
        }
        printf("time: %.4f ms median of %u runs (%s)\n", timing.median_ms, a.repeat,
               timing.gpu_timestamps ? "GPU timestamps" : "wall clock");
    }
    if (a.save_dir && save_outputs(g, outs, a.save_dir) != 0) {
        rc = 1;
    }
done:
    for (uint32_t i = 0; i < a.given_count; i++) {
        kf_tensor_destroy(given[i]);
    }
    for (uint32_t o = 0; outs && o < out_count; o++) {
        kf_tensor_destroy(outs[o]);
    }
    free(outs);
    kf_plan_destroy(plan);
    kf_context_destroy(ctx);
    kf_graph_destroy(g);
    return rc;
}
