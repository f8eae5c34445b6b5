#include "harness.h"
#include "runtime/runtime.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KT_MAX_CASES 1024

static kt_case g_cases[KT_MAX_CASES];
static int g_case_count;
static int g_failures_in_case;
static uint64_t g_seed;
static uint64_t g_rng;
static kf_context *g_ctx;
static bool g_ctx_tried;
static const kt_case *g_current;
static bool g_probe_cpu; /* --probe-cpu: every test runs as if it were a KT_CPU_TEST */
static bool g_candidate[KT_MAX_CASES]; /* a KT_TEST that passed under --probe-cpu */

/* What kt_setenv changed in the running test, restored when it ends. */
#define KT_MAX_ENV 8
static struct {
    char *name;
    char *saved; /* NULL: was unset */
} g_env[KT_MAX_ENV];
static int g_env_count;

void kt_setenv(const char *name, const char *value) {
    int i = 0;
    while (i < g_env_count && strcmp(g_env[i].name, name) != 0) {
        i++;
    }
    if (i == g_env_count) {
        if (g_env_count == KT_MAX_ENV) {
            kt_fail(__FILE__, __LINE__, "kt_setenv: more than %d variables in one test",
                    KT_MAX_ENV);
            return;
        }
        const char *now = getenv(name);
        g_env[i].name = strdup(name);
        g_env[i].saved = now ? strdup(now) : NULL;
        g_env_count++;
    }
    if (value) {
        setenv(name, value, 1);
    } else {
        unsetenv(name);
    }
}

static void restore_env(void) {
    for (int i = g_env_count - 1; i >= 0; i--) {
        if (g_env[i].saved) {
            setenv(g_env[i].name, g_env[i].saved, 1);
        } else {
            unsetenv(g_env[i].name);
        }
        free(g_env[i].saved);
        free(g_env[i].name);
    }
    g_env_count = 0;
}

void kt_register(const char *suite, const char *name, kt_fn fn, kt_need need) {
    if (g_case_count < KT_MAX_CASES) {
        g_cases[g_case_count++] = (kt_case){suite, name, fn, need};
    } else {
        fprintf(stderr, "harness: more than %d tests; raise KT_MAX_CASES\n", KT_MAX_CASES);
        exit(2);
    }
}

void kt_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "    FAIL %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    g_failures_in_case++;
}

uint64_t kt_seed(void) {
    return g_seed;
}

uint64_t kt_rand_u64(void) {
    /* splitmix64: small, good enough for test data, reproducible from the printed seed */
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void kt_reseed(uint64_t seed) {
    g_rng = seed;
}

float kt_rand_f32(float lo, float hi) {
    double u = (double)(kt_rand_u64() >> 11) * (1.0 / 9007199254740992.0);
    return (float)(lo + (hi - lo) * u);
}

double kt_fuzz_seconds(double share) {
    const char *env = getenv("KFUSE_FUZZ_SECONDS");
    char *end = NULL;
    double total = env ? strtod(env, &end) : 10.0;
    if (env && (end == env || *end || !(total >= 0.0))) {
        fprintf(stderr, "harness: KFUSE_FUZZ_SECONDS='%s' is not a number of seconds; using 10\n",
                env);
        total = 10.0;
    }
    return total * share;
}

double kt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *kt_last_error(void) {
    const char *e = g_ctx ? kf_context_last_error(g_ctx) : NULL;
    return e && *e ? e : "none";
}

kf_context *kt_context(void) {
    if (g_current && (g_current->need == KT_NEEDS_CPU || g_probe_cpu)) {
        kt_fail(__FILE__, __LINE__, "%s/%s %s asked for the GPU context%s", g_current->suite,
                g_current->name, g_probe_cpu ? "(probed as a CPU test)" : "is a KT_CPU_TEST but",
                g_probe_cpu ? "" : ": declare it KT_TEST");
        return NULL;
    }
    if (!g_ctx_tried) {
        g_ctx_tried = true;
        char err[1024] = {0};
        kf_context_desc desc = {0};
        desc.error_out = err;
        desc.error_out_size = sizeof err;
        if (kf_context_create(&desc, &g_ctx) != KF_OK) {
            fprintf(stderr, "no GPU context: %s\n", err);
            g_ctx = NULL;
        } else {
            kf_adapter_info info;
            if (kf_context_adapter_info(g_ctx, &info) == KF_OK) {
                printf("adapter: %s (%s, %s)\n", info.device, info.backend, info.description);
            }
        }
    }
    return g_ctx;
}

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) {
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    }
    return h;
}

static const char *need_name(kt_need need) {
    return need == KT_NEEDS_CPU ? "cpu" : "gpu";
}

/* The whole of s as a number, or false: an empty string, a sign or trailing junk is an error. */
static bool parse_seed(const char *s, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    if (!s || s[0] < '0' || s[0] > '9') {
        return false;
    }
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || *end) {
        return false;
    }
    *out = v;
    return true;
}

/* The bounds check of the shared context so far (zeros before it exists). */
static kf__bounds_check_stats check_stats(void) {
    const kf__bounds_check_stats *s = kf__context_bounds_check_stats(g_ctx);
    kf__bounds_check_stats none = {0};
    return s ? *s : none;
}

static void print_check_summary(const kf__bounds_check_stats *s) {
    if (!getenv("KF_CHECK_BOUNDS") || !strcmp(getenv("KF_CHECK_BOUNDS"), "0")) {
        printf("bounds check: off (KF_CHECK_BOUNDS=0)\n");
        return;
    }
    printf("bounds check (shared context): %llu dispatches interpreted (%llu read back first, "
           "%llu sampled), %llu of their %llu workgroups run, %llu repeats of a checked launch "
           "skipped, %llu raw-WGSL dispatches unchecked, %llu accesses out of bounds where the "
           "emitted guard clamps or skips them, %llu violations, %.1f s of CPU\n",
           (unsigned long long)s->dispatches, (unsigned long long)s->data_dispatches,
           (unsigned long long)s->sampled, (unsigned long long)s->workgroups_run,
           (unsigned long long)s->workgroups, (unsigned long long)s->repeats,
           (unsigned long long)s->unchecked, (unsigned long long)s->guards_fired,
           (unsigned long long)s->violations, s->seconds);
}

int main(int argc, char **argv) {
    const char *suite = NULL;
    const char *filter = NULL;
    const char *needs = NULL;
    int shard = 0, shards = 1; /* --shard K/N: the K-th of N interleaved parts (0-based here) */
    const char *env_seed = getenv("KFUSE_TEST_SEED");
    g_seed = (uint64_t)time(NULL) ^ (uint64_t)clock();
    if (env_seed && !parse_seed(env_seed, &g_seed)) {
        fprintf(stderr, "kfuse_tests: KFUSE_TEST_SEED='%s' is not a number\n", env_seed);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--suite") && i + 1 < argc) {
            suite = argv[++i];
        } else if (!strcmp(argv[i], "--needs") && i + 1 < argc) {
            needs = argv[++i];
            if (strcmp(needs, "cpu") != 0 && strcmp(needs, "gpu") != 0) {
                fprintf(stderr, "kfuse_tests: --needs takes cpu or gpu, not '%s'\n", needs);
                return 2;
            }
        } else if (!strcmp(argv[i], "--shard") && i + 1 < argc) {
            int k = 0, n = 0;
            char extra = 0;
            if (sscanf(argv[++i], "%d/%d%c", &k, &n, &extra) != 2 || n < 1 || k < 1 || k > n) {
                fprintf(stderr, "kfuse_tests: --shard takes K/N with 1 <= K <= N, not '%s'\n",
                        argv[i]);
                return 2;
            }
            shard = k - 1;
            shards = n;
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            if (!parse_seed(argv[++i], &g_seed)) {
                fprintf(stderr, "kfuse_tests: --seed takes a number, not '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--probe-cpu")) {
            g_probe_cpu = true;
        } else if (!strcmp(argv[i], "--list")) {
            for (int c = 0; c < g_case_count; c++) {
                printf("%s/%s %s\n", g_cases[c].suite, g_cases[c].name, need_name(g_cases[c].need));
            }
            return 0;
        } else if (!strcmp(argv[i], "--help")) {
            printf("usage: kfuse_tests [--suite NAME] [--needs cpu|gpu] [--shard K/N] [--seed S] "
                   "[--list] [--probe-cpu] [FILTER]\n"
                   "  --shard K/N  of the selected tests, run every N-th from the K-th (CTest\n"
                   "               splits the long suites this way)\n"
                   "  --probe-cpu  run the selected tests with the GPU context refused and list\n"
                   "               the KT_TESTs that passed: candidates for KT_CPU_TEST (run it\n"
                   "               with VK_DRIVER_FILES=/nonexistent to hide the driver too)\n");
            return 0;
        } else {
            filter = argv[i];
        }
    }
    printf("seed: %llu (rerun with --seed %llu)\n", (unsigned long long)g_seed,
           (unsigned long long)g_seed);
    /* Every dispatch of an IR kernel, on every context the tests make, is interpreted first and
     * any out-of-bounds access fails (docs/testing.md); KF_CHECK_BOUNDS=0 turns it off. */
    setenv("KF_CHECK_BOUNDS", "1", 0);
    int passed = 0, failed = 0, in_suite = 0, cpu_candidates = 0, selected = 0;
    for (int c = 0; c < g_case_count; c++) {
        kt_case *tc = &g_cases[c];
        if (suite && strcmp(suite, tc->suite) != 0) {
            continue;
        }
        in_suite++;
        if (needs && strcmp(needs, need_name(tc->need)) != 0) {
            continue;
        }
        if (filter && !strstr(tc->name, filter)) {
            continue;
        }
        if (selected++ % shards != shard) {
            continue;
        }
        g_rng = g_seed ^ hash_name(tc->name);
        g_failures_in_case = 0;
        g_current = tc;
        kf__bounds_check_stats before = check_stats();
        clock_t t0 = clock();
        tc->fn();
        double ms = 1000.0 * (double)(clock() - t0) / CLOCKS_PER_SEC;
        restore_env();
        g_current = NULL;
        kf__bounds_check_stats after = check_stats();
        if (after.violations > before.violations) {
            /* even where the test went on past the failed call */
            kt_fail(__FILE__, __LINE__, "%llu out-of-bounds dispatch%s; the last: %s",
                    (unsigned long long)(after.violations - before.violations),
                    after.violations - before.violations == 1 ? "" : "es", after.last);
        }
        double check_ms = 1000.0 * (after.seconds - before.seconds);
        if (g_failures_in_case) {
            failed++;
            printf("FAIL %s/%s (%.0f ms cpu, %.0f ms cpu in the bounds check)\n", tc->suite,
                   tc->name, ms, check_ms);
        } else {
            passed++;
            printf("ok   %s/%s (%.0f ms cpu, %.0f ms cpu in the bounds check)\n", tc->suite,
                   tc->name, ms, check_ms);
            if (g_probe_cpu && tc->need == KT_NEEDS_GPU) {
                g_candidate[c] = true;
                cpu_candidates++;
            }
        }
        fflush(stdout);
    }
    kf__bounds_check_stats checked = check_stats();
    kf_context_destroy(g_ctx);
    print_check_summary(&checked);
    printf("%d passed, %d failed\n", passed, failed);
    if (g_probe_cpu) {
        printf("%d KT_TEST%s passed without the GPU context%s\n", cpu_candidates,
               cpu_candidates == 1 ? "" : "s",
               cpu_candidates ? " (candidates for KT_CPU_TEST):" : "");
        for (int c = 0; c < g_case_count; c++) {
            if (g_candidate[c]) {
                printf("  %s/%s\n", g_cases[c].suite, g_cases[c].name);
            }
        }
    }
    if (passed + failed == 0) {
        /* A suite with no test of the need asked for is fine (CTest has an entry per suite and
         * need); a misspelt suite or a filter that matches nothing is a mistake. */
        bool empty_need = needs && !filter && in_suite > 0;
        bool empty_shard = shards > 1 && selected > 0; /* fewer tests than shards */
        printf("no test matched%s\n", empty_need ? " (none of this suite needs that)" : "");
        return empty_need || empty_shard || (!suite && !filter) ? 0 : 1;
    }
    return failed ? 1 : 0;
}
