/* kfuse demo: the first fused kernel, written by hand on the runtime.
 *
 * y = gelu(relu(2x + 1)) over 2^22 random floats, run two ways: fused (one dispatch that keeps
 * every intermediate in registers) and unfused (three dispatches, one per operation, each
 * reading and writing global memory). Both results are checked against a float64 CPU loop, and
 * both ways are timed. (Until the fusion engine can build this kernel, the WGSL is written out
 * here.) */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

#define DEMO_TOLERANCE 1e-5 /* max relative error accepted, f32 against float64 */
#define DEMO_WORKGROUP 256

static void usage(FILE *f) {
    fprintf(f,
            "usage: kfuse demo [--elements N] [--repeat R] [--seed S] [--help]\n\n"
            "Run y = gelu(relu(2x + 1)) (GELU in its tanh form) on N random floats "
            "(default 2^22),\nonce fused into one dispatch and once as three dispatches; check "
            "both against a\nfloat64 CPU loop (max relative error <= %g) and time both (median of "
            "R runs after\na warm-up, default 20). Exits 1 when a result is off.\n",
            DEMO_TOLERANCE);
}

/* The kernels differ only in the expression stored; src/dst are bound at 0 and 1. The grid may
 * be folded into 2-D for large N, so the workgroup index is linearised and bounds-checked. */
static const char *const kernel_head =
    "@group(0) @binding(0) var<storage, read> src: array<f32>;\n"
    "@group(0) @binding(1) var<storage, read_write> dst: array<f32>;\n"
    "\n"
    "// GELU, tanh form: 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3), computed as\n"
    "// x / (1 + exp(-2u)) (the same function): GPUs' tanh may be a coarse approximation, exp is\n"
    "// accurate, and this form neither overflows nor cancels.\n"
    "fn gelu(x: f32) -> f32 {\n"
    "    let u = 0.7978845608028654 * (x + 0.044715 * x * x * x);\n"
    "    return x / (1.0 + exp(-2.0 * u));\n"
    "}\n"
    "\n"
    "@compute @workgroup_size(256)\n"
    "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n"
    "        @builtin(local_invocation_index) lid: u32) {\n"
    "    let i = (wid.x + wid.y * nwg.x) * 256u + lid;\n"
    "    if (i >= arrayLength(&dst)) {\n"
    "        return;\n"
    "    }\n"
    "    let x = src[i];\n";

static const char *const expr_fused = "gelu(max(2.0 * x + 1.0, 0.0))";
static const char *const expr_affine = "2.0 * x + 1.0";
static const char *const expr_relu = "max(x, 0.0)";
static const char *const expr_gelu = "gelu(x)";

static double gelu64(double x) {
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

static double reference(float x) {
    double a = 2.0 * (double)x + 1.0;
    return gelu64(a > 0.0 ? a : 0.0);
}

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* max |got - want| / max(|want|, 1e-6); a NaN where a number is wanted counts as infinite. */
static double max_rel_error(const float *got, const double *want, size_t n) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double g = (double)got[i];
        if (isnan(g) != isnan(want[i])) {
            return INFINITY;
        }
        double scale = fabs(want[i]) > 1e-6 ? fabs(want[i]) : 1e-6;
        double e = fabs(g - want[i]) / scale;
        worst = e > worst ? e : worst;
    }
    return worst;
}

static bool parse_u64(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end || s[0] == '-') {
        return false;
    }
    *out = v;
    return true;
}

typedef struct demo {
    kf_context *ctx;
    kf_pipeline *fused, *affine, *relu, *gelu;
    kf_buffer *x, *t1, *t2, *y_unfused, *y_fused;
} demo;

static kf_pipeline *compile(kf_context *ctx, const char *expr) {
    char wgsl[2048];
    snprintf(wgsl, sizeof wgsl, "%s    dst[i] = %s;\n}\n", kernel_head, expr);
    static const kf_binding_kind kinds[2] = {KF_BINDING_STORAGE_READ,
                                             KF_BINDING_STORAGE_READ_WRITE};
    kf_pipeline_desc desc = {0};
    desc.wgsl = wgsl;
    desc.bindings = kinds;
    desc.binding_count = 2;
    kf_pipeline *p = NULL;
    if (kf_pipeline_get(ctx, &desc, &p) != KF_OK) {
        fprintf(stderr, "kfuse demo: %s\n", kf_context_last_error(ctx));
        return NULL;
    }
    return p;
}

static void demo_free(demo *d) {
    kf_buffer *buffers[] = {d->x, d->t1, d->t2, d->y_unfused, d->y_fused};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++) {
        kf_buffer_destroy(buffers[i]);
    }
    kf_context_destroy(d->ctx);
}

static int fail(demo *d, const char *what) {
    fprintf(stderr, "kfuse demo: %s: %s\n", what, kf_context_last_error(d->ctx));
    return 1;
}

static int run(demo *d, uint64_t n, uint32_t repeat, uint64_t seed) {
    kf_context *ctx = d->ctx;
    kf_adapter_info info;
    kf_context_adapter_info(ctx, &info);
    printf("kfuse demo: y = gelu(relu(2x + 1)) on %llu f32 (seed %llu)\n", (unsigned long long)n,
           (unsigned long long)seed);
    printf("adapter:    %s (%s, %s)\n", info.device, info.backend, info.adapter_type);

    d->fused = compile(ctx, expr_fused);
    d->affine = compile(ctx, expr_affine);
    d->relu = compile(ctx, expr_relu);
    d->gelu = compile(ctx, expr_gelu);
    if (!d->fused || !d->affine || !d->relu || !d->gelu) {
        return 1;
    }
    uint64_t bytes = n * sizeof(float);
    kf_buffer **buffers[] = {&d->x, &d->t1, &d->t2, &d->y_unfused, &d->y_fused};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++) {
        if (kf_buffer_create(ctx, bytes, buffers[i]) != KF_OK) {
            return fail(d, "creating buffers");
        }
    }

    float *x = malloc((size_t)bytes);
    float *y = malloc((size_t)bytes);
    double *want = malloc((size_t)n * sizeof(double));
    int rc = 1;
    if (!x || !y || !want) {
        fprintf(stderr, "kfuse demo: out of host memory for %llu elements\n",
                (unsigned long long)n);
        goto done;
    }
    uint64_t state = seed;
    for (uint64_t i = 0; i < n; i++) {
        double u = (double)(splitmix64(&state) >> 11) * (1.0 / 9007199254740992.0);
        x[i] = (float)(-3.0 + 6.0 * u);
        want[i] = reference(x[i]);
    }
    if (kf_buffer_upload(d->x, 0, x, bytes) != KF_OK) {
        fail(d, "uploading x");
        goto done;
    }
    /* NaN everywhere a kernel should write: an element it misses cannot pass the check. */
    kf_buffer *outputs[] = {d->t1, d->t2, d->y_unfused, d->y_fused};
    for (size_t i = 0; i < 4; i++) {
        if (kf_buffer_fill_u32(outputs[i], 0x7fc00000u) != KF_OK) {
            fail(d, "poisoning outputs");
            goto done;
        }
    }

    uint32_t groups = (uint32_t)((n + DEMO_WORKGROUP - 1) / DEMO_WORKGROUP);
    kf_buffer *fused_io[2] = {d->x, d->y_fused};
    kf_buffer *affine_io[2] = {d->x, d->t1};
    kf_buffer *relu_io[2] = {d->t1, d->t2};
    kf_buffer *gelu_io[2] = {d->t2, d->y_unfused};
    kf_dispatch fused[1] = {{d->fused, fused_io, 2, {groups, 1, 1}}};
    kf_dispatch unfused[3] = {{d->affine, affine_io, 2, {groups, 1, 1}},
                              {d->relu, relu_io, 2, {groups, 1, 1}},
                              {d->gelu, gelu_io, 2, {groups, 1, 1}}};

    kf_context_stats s0, s1, s2;
    kf_context_stats_get(ctx, &s0);
    if (kf_context_run(ctx, fused, 1) != KF_OK) {
        fail(d, "running the fused kernel");
        goto done;
    }
    kf_context_stats_get(ctx, &s1);
    if (kf_context_run(ctx, unfused, 3) != KF_OK) {
        fail(d, "running the unfused kernels");
        goto done;
    }
    kf_context_stats_get(ctx, &s2);

    if (kf_buffer_download(d->y_fused, 0, y, bytes) != KF_OK) {
        fail(d, "downloading y");
        goto done;
    }
    double err_fused = max_rel_error(y, want, (size_t)n);
    if (kf_buffer_download(d->y_unfused, 0, y, bytes) != KF_OK) {
        fail(d, "downloading y");
        goto done;
    }
    double err_unfused = max_rel_error(y, want, (size_t)n);

    kf_timing t_fused, t_unfused;
    if (kf_context_time(ctx, fused, 1, repeat, &t_fused) != KF_OK ||
        kf_context_time(ctx, unfused, 3, repeat, &t_unfused) != KF_OK) {
        fail(d, "timing");
        goto done;
    }
    /* Global memory each way moves: fused reads x and writes y; unfused does that three times. */
    double gb_fused = 2.0 * (double)bytes / 1e9, gb_unfused = 6.0 * (double)bytes / 1e9;
    printf("\n%-9s %10s %11s %9s %9s %15s\n", "", "dispatches", "median ms", "min ms", "GB/s",
           "max rel error");
    printf("%-9s %10llu %11.3f %9.3f %9.1f %15.2e\n", "fused",
           (unsigned long long)(s1.dispatches - s0.dispatches), t_fused.median_ms, t_fused.min_ms,
           gb_fused / (t_fused.median_ms * 1e-3), err_fused);
    printf("%-9s %10llu %11.3f %9.3f %9.1f %15.2e\n", "unfused",
           (unsigned long long)(s2.dispatches - s1.dispatches), t_unfused.median_ms,
           t_unfused.min_ms, gb_unfused / (t_unfused.median_ms * 1e-3), err_unfused);
    printf("\nspeedup:    %.2fx (unfused median / fused median)\n",
           t_unfused.median_ms / t_fused.median_ms);
    printf("timing:     %s, median of %u runs after a warm-up\n",
           t_fused.gpu_timestamps ? "GPU timestamp queries" : "wall clock around a queue sync",
           repeat);
    if (err_fused <= DEMO_TOLERANCE && err_unfused <= DEMO_TOLERANCE) {
        printf("result:     ok (max rel error %.2e <= %.0e against float64)\n",
               err_fused > err_unfused ? err_fused : err_unfused, DEMO_TOLERANCE);
        rc = 0;
    } else {
        printf("result:     MISMATCH (max rel error fused %.2e, unfused %.2e; tolerance %.0e)\n",
               err_fused, err_unfused, DEMO_TOLERANCE);
    }
done:
    free(x);
    free(y);
    free(want);
    return rc;
}

int kf_cmd_demo(int argc, char **argv) {
    uint64_t n = 1ull << 22;
    uint64_t repeat = 20;
    uint64_t seed = (uint64_t)time(NULL);
    int i = 1;
    while (i < argc) {
        if (kf_cli_is_help(argv[i])) {
            usage(stdout);
            return 0;
        }
        uint64_t *target = !strcmp(argv[i], "--elements") ? &n
                           : !strcmp(argv[i], "--repeat") ? &repeat
                           : !strcmp(argv[i], "--seed")   ? &seed
                                                          : NULL;
        if (!target) {
            fprintf(stderr, "kfuse demo: unknown argument '%s'\n\n", argv[i]);
            usage(stderr);
            return 2;
        }
        if (i + 1 >= argc || !parse_u64(argv[i + 1], target)) {
            fprintf(stderr, "kfuse demo: %s needs a non-negative integer\n", argv[i]);
            return 2;
        }
        i += 2;
    }
    if (n == 0 || n > (1ull << 30) || repeat == 0 || repeat > 100000) {
        fprintf(stderr, "kfuse demo: --elements must be 1..2^30 and --repeat 1..100000\n");
        return 2;
    }
    demo d = {0};
    d.ctx = kf_cli_context();
    if (!d.ctx) {
        return 1;
    }
    int rc = run(&d, n, (uint32_t)repeat, seed);
    demo_free(&d);
    return rc;
}
