/* kfuse verify: every operator's GPU kernels against its CPU spec, forward and backward, over the
 * op's table of shapes, in f32 and (where the device has it) f16; and every spec's backward
 * against central differences of its forward. */
#include "cli.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef enum direction { DIR_FORWARD, DIR_BACKWARD, DIR_GRADIENT } direction;

static const char *const direction_names[] = {"forward", "backward", "gradient"};

typedef struct options {
    uint64_t seed;
    bool json;
    bool quick;         /* skip cases noted "large" */
    bool want_dir[3];   /* forward, backward, gradient */
    bool want_dtype[2]; /* f32, f16 */
    const char **ops;   /* names asked for; none: every op */
    int op_count;
} options;

static void usage(FILE *f) {
    fprintf(f,
            "usage: kfuse verify [OP ...] [--seed S] [--json] [--quick] [--dtype f32|f16]\n"
            "                    [--forward] [--backward] [--gradient] [--list]\n\n"
            "Checks every operator (or the named ones) over its table of shapes: the GPU kernel\n"
            "against the CPU spec, forward and backward, every element, outputs poisoned with NaN\n"
            "first; and the spec's backward against central differences of its forward\n"
            "(direction 'gradient', on the CPU). f16 runs where the device has shader-f16.\n\n"
            "  --seed S     inputs from seed S (default: a fresh one, printed)\n"
            "  --json       one JSON object per check, one per line\n"
            "  --quick      skip the large (>= 2^22 elements) cases\n"
            "  --dtype D    only f32 or only f16\n"
            "  --forward, --backward, --gradient   only these directions (default: all)\n"
            "  --list       list the operators and exit\n\n"
            "Exit status: 0 when every check passes, 1 when any fails, 2 on a usage error.\n");
}

static uint64_t fresh_seed(void) {
    uint64_t s = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ULL;
    s ^= (uint64_t)clock() << 20;
    s ^= (uint64_t)(uint32_t)getpid() * 0xbf58476d1ce4e5b9ULL;
    return (s ^ (s >> 29)) % 1000000000000ULL;
}

/* The seed of one check: the run's seed mixed with the op's name, the case, the direction and
 * the dtype, so rerunning a single op with the same --seed gives the same inputs. */
static uint64_t case_seed(uint64_t seed, const char *op, uint32_t index, int dir, int dtype) {
    uint64_t h = 1469598103934665603ULL;
    for (const char *c = op; *c; c++) {
        h = (h ^ (unsigned char)*c) * 1099511628211ULL;
    }
    h ^= seed + 0x9e3779b97f4a7c15ULL * (index + 1) + ((uint64_t)dir << 40) +
         ((uint64_t)dtype << 48);
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
    return h ^ (h >> 31);
}

static void shapes_str(const kf_operator *op, const kf_op_case *c, char *buf, size_t size) {
    uint32_t arity = kf_op_arity(op, &c->params);
    size_t used = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < arity && used + 1 < size; i++) {
        char s[64];
        int n = snprintf(buf + used, size - used, "%s%s", i ? "," : "",
                         kf_shape_str(&c->shapes[i], s, sizeof s));
        if (n < 0) {
            break;
        }
        used += (size_t)n;
    }
}

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

static void json_number(FILE *f, double v) {
    if (v != v || v > 1e308 || v < -1e308) {
        fprintf(f, "null"); /* JSON has no NaN or infinity */
    } else {
        fprintf(f, "%.6g", v);
    }
}

static int parse_args(int argc, char **argv, options *o) {
    memset(o, 0, sizeof *o);
    o->seed = fresh_seed();
    bool any_dir = false, any_dtype = false;
    o->ops = calloc((size_t)argc, sizeof *o->ops);
    if (!o->ops) {
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (kf_cli_is_help(a)) {
            usage(stdout);
            return -1;
        } else if (!strcmp(a, "--seed") && i + 1 < argc) {
            if (!kf_cli_number("verify", "--seed", argv[++i], 0, UINT64_MAX, &o->seed)) {
                return 2;
            }
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (!strcmp(a, "--quick")) {
            o->quick = true;
        } else if (!strcmp(a, "--forward") || !strcmp(a, "--backward") ||
                   !strcmp(a, "--gradient")) {
            o->want_dir[a[2] == 'f'   ? DIR_FORWARD
                        : a[2] == 'b' ? DIR_BACKWARD
                                      : DIR_GRADIENT] = true;
            any_dir = true;
        } else if (!strcmp(a, "--dtype") && i + 1 < argc) {
            const char *d = argv[++i];
            if (strcmp(d, "f32") != 0 && strcmp(d, "f16") != 0) {
                fprintf(stderr, "kfuse verify: --dtype is f32 or f16, got '%s'\n", d);
                return 2;
            }
            o->want_dtype[!strcmp(d, "f16")] = true;
            any_dtype = true;
        } else if (!strcmp(a, "--list")) {
            for (uint32_t k = 0; k < kf_op_count(); k++) {
                const kf_operator *op = kf_op_at(k);
                printf("%-14s %s\n", kf_op_name(op), kf_op_about(op));
            }
            return -1;
        } else if (a[0] == '-') {
            fprintf(stderr, "kfuse verify: unknown option '%s'\n\n", a);
            usage(stderr);
            return 2;
        } else if (!kf_op_find(a)) {
            fprintf(stderr,
                    "kfuse verify: no operator named '%s'; 'kfuse verify --list' lists "
                    "them\n",
                    a);
            return 2;
        } else {
            o->ops[o->op_count++] = a;
        }
    }
    for (int d = 0; d < 3; d++) {
        o->want_dir[d] = o->want_dir[d] || !any_dir;
    }
    for (int d = 0; d < 2; d++) {
        o->want_dtype[d] = o->want_dtype[d] || !any_dtype;
    }
    return 0;
}

static bool op_selected(const options *o, const kf_operator *op) {
    if (o->op_count == 0) {
        return true;
    }
    for (int i = 0; i < o->op_count; i++) {
        if (!strcmp(o->ops[i], kf_op_name(op))) {
            return true;
        }
    }
    return false;
}

static bool case_selected(const options *o, const kf_op_case *c) {
    return !(o->quick && c->note && strstr(c->note, "large"));
}

typedef struct run_state {
    const options *o;
    kf_context *ctx;
    bool progress; /* a terminal on stderr */
    uint32_t total, done, failed;
    char failures[2048]; /* "gelu (forward 7x13 f16), ..." */
} run_state;

static void note_failure(run_state *r, const kf_operator *op, direction dir, const char *shapes,
                         const char *dtype) {
    size_t used = strlen(r->failures);
    if (used + 128 < sizeof r->failures) {
        snprintf(r->failures + used, sizeof r->failures - used, "%s%s (%s %s %s)", used ? ", " : "",
                 kf_op_name(op), direction_names[dir], shapes, dtype);
    } else if (!strstr(r->failures, "...")) {
        snprintf(r->failures + used, sizeof r->failures - used, ", ...");
    }
}

static void report(run_state *r, const kf_operator *op, const kf_op_case *c, direction dir,
                   const char *dtype, uint64_t seed, kf_status st, const kf_verify_result *res) {
    char shapes[160];
    shapes_str(op, c, shapes, sizeof shapes);
    bool passed = st == KF_OK && res->passed;
    r->done++;
    if (!passed) {
        r->failed++;
        note_failure(r, op, dir, shapes, dtype);
    }
    if (r->progress) {
        fprintf(stderr, "\r\033[K");
    }
    if (r->o->json) {
        printf("{\"op\":");
        json_string(stdout, kf_op_name(op));
        printf(",\"direction\":\"%s\",\"shapes\":", direction_names[dir]);
        json_string(stdout, shapes);
        printf(",\"note\":");
        json_string(stdout, c->note ? c->note : "");
        printf(",\"dtype\":\"%s\",\"max_rel_error\":", dtype);
        json_number(stdout, res->max_rel_error);
        printf(",\"tolerance\":");
        json_number(stdout, res->tolerance);
        printf(",\"passed\":%s,\"seed\":%llu,\"status\":", passed ? "true" : "false",
               (unsigned long long)seed);
        json_string(stdout, kf_status_str(st));
        printf(",\"message\":");
        json_string(stdout, res->message);
        printf("}\n");
    } else {
        printf("%-13s %-9s %-24s %-4s %11.3g %9.3g  %-6s %s\n", kf_op_name(op),
               direction_names[dir], shapes, dtype, res->max_rel_error, res->tolerance,
               passed ? "pass" : "FAIL", c->note ? c->note : "");
        if (!passed) {
            printf("    %s (case seed %llu)\n", res->message[0] ? res->message : kf_status_str(st),
                   (unsigned long long)seed);
        }
    }
    fflush(stdout);
}

static void show_progress(run_state *r, const kf_operator *op, direction dir, const char *dtype,
                          const kf_op_case *c) {
    if (!r->progress) {
        return;
    }
    char shapes[160];
    shapes_str(op, c, shapes, sizeof shapes);
    fprintf(stderr, "\r\033[K[%u/%u] %s %s %s %s", r->done + 1, r->total, kf_op_name(op),
            direction_names[dir], shapes, dtype);
    fflush(stderr);
}

/* Runs (or, with count_only, counts) every selected check. */
static void run_all(run_state *r, bool has_f16, bool count_only) {
    const options *o = r->o;
    for (uint32_t k = 0; k < kf_op_count(); k++) {
        const kf_operator *op = kf_op_at(k);
        if (!op_selected(o, op)) {
            continue;
        }
        for (uint32_t ci = 0; ci < kf_op_case_count(op); ci++) {
            const kf_op_case *c = kf_op_case_at(op, ci);
            if (!case_selected(o, c)) {
                continue;
            }
            for (int dir = 0; dir < 3; dir++) {
                if (!o->want_dir[dir]) {
                    continue;
                }
                /* backward operators and sum_to have no backward kernel of their own (their
                 * gradient check compares them with their forward operator's differences) */
                if (dir == DIR_BACKWARD && !kf_op_has_backward(op)) {
                    continue;
                }
                if (dir == DIR_GRADIENT && !kf_op_has_gradient_check(op)) {
                    continue;
                }
                /* the gradient check is the spec against itself: once, in float64 */
                for (int dt = 0; dt < (dir == DIR_GRADIENT ? 1 : 2); dt++) {
                    if (dir != DIR_GRADIENT && (!o->want_dtype[dt] || (dt == 1 && !has_f16))) {
                        continue;
                    }
                    if (count_only) {
                        r->total++;
                        continue;
                    }
                    const char *dtype = dir == DIR_GRADIENT ? "f64" : dt ? "f16" : "f32";
                    kf_verify_case vc = {0};
                    vc.op = op;
                    vc.params = c->params;
                    memcpy(vc.shapes, c->shapes, sizeof vc.shapes);
                    vc.dtype = dt ? KF_DTYPE_F16 : KF_DTYPE_F32;
                    vc.backward = dir == DIR_BACKWARD;
                    vc.seed = case_seed(o->seed, kf_op_name(op), ci, dir, dt);
                    show_progress(r, op, (direction)dir, dtype, c);
                    kf_verify_result res;
                    kf_status st = dir == DIR_GRADIENT ? kf_op_check_gradient(&vc, &res)
                                                       : kf_op_verify(r->ctx, &vc, &res);
                    report(r, op, c, (direction)dir, dtype, vc.seed, st, &res);
                }
            }
        }
    }
}

int kf_cmd_verify(int argc, char **argv) {
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc != 0) {
        free(o.ops);
        return rc < 0 ? 0 : rc;
    }
    /* gradient checks are the specs against themselves: they need no device */
    kf_context *ctx = NULL;
    kf_adapter_info info = {0};
    snprintf(info.device, sizeof info.device, "none");
    snprintf(info.backend, sizeof info.backend, "gradient checks run on the CPU");
    if (o.want_dir[DIR_FORWARD] || o.want_dir[DIR_BACKWARD]) {
        ctx = kf_cli_context();
        if (!ctx) {
            free(o.ops);
            return 1;
        }
    }
    bool has_f16 = ctx && kf_context_adapter_info(ctx, &info) == KF_OK && info.has_f16;
    run_state r = {0};
    r.o = &o;
    r.ctx = ctx;
    r.progress = !o.json && isatty(STDERR_FILENO);
    fprintf(o.json ? stderr : stdout, "seed: %llu (rerun with --seed %llu)\nadapter: %s (%s)\n",
            (unsigned long long)o.seed, (unsigned long long)o.seed, info.device, info.backend);
    if (ctx && o.want_dtype[1] && !has_f16) {
        fprintf(o.json ? stderr : stdout,
                "f16: the device has no shader-f16; f16 checks are skipped\n");
    }
    if (!o.json) {
        printf("\n%-13s %-9s %-24s %-4s %11s %9s  %-6s %s\n", "op", "direction", "shapes", "type",
               "max rel err", "tolerance", "result", "case");
    }
    run_all(&r, has_f16, true);
    run_all(&r, has_f16, false);
    if (r.progress) {
        fprintf(stderr, "\r\033[K");
    }
    FILE *summary = o.json ? stderr : stdout;
    fprintf(summary, "\n%u checks, %u passed, %u failed\n", r.done, r.done - r.failed, r.failed);
    if (r.failed) {
        fprintf(summary, "failed: %s\n", r.failures);
    }
    kf_context_destroy(ctx);
    free(o.ops);
    return r.failed ? 1 : 0;
}
