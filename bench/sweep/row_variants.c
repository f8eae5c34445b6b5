/* kfuse_row_variants: hand-written WGSL variants of the benchmark's rmsnorm * w (4096 x 8192
 * f32, the row held in registers as vec4s), timed side by side with a row copy on the same grid,
 * to see what keeps kfuse's row kernels at ~55% of copy bandwidth at this size: how the results
 * are stored (four scalar stores per vec4, as kfuse's element-wise tail does, against one vec4
 * store), how the weight is read (scalar, as kfuse's tail does, against vec4), how the row's sum
 * is reduced (kfuse's workgroup-memory gather of 16 against subgroupAdd then one slot per
 * subgroup; a row per subgroup, read twice), and how many lanes share a row (128-1024).
 *   kfuse_row_variants [NAME ...]     (default: every variant; $KFUSE_ROWS="RxC": the shape)
 * A variant's name: LANES (lanes a row) + s|v (stores) + s|v (weight loads) + g|b (reduction:
 * gather, subgroup), e.g. 256ssg is kfuse's kernel today; x + LANES + g|b reads and writes
 * scalars (8 or 16 a lane, neighbouring lanes on neighbouring elements, so the stores coalesce
 * as the loads do); "copy256" copies the rows; "sg8" puts
 * a row on each subgroup, 8 rows a workgroup, the row read twice (the second from cache). Every
 * variant's output is checked against a CPU rmsnorm of random inputs (all elements). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kfuse.h"

static uint32_t ROWS = 4096, COLS = 8192;

typedef struct variant {
    uint32_t lanes;  /* lanes a row; 0: a row per subgroup (rows_per_group rows) */
    uint32_t per;    /* rows a workgroup */
    bool vec_store;  /* one vec4 store per vec4, not four scalar ones */
    bool vec_weight; /* the weight read as vec4 */
    bool subgroup;   /* subgroupAdd, then one workgroup slot per subgroup */
    bool copy;       /* no reduction: out = x (the bandwidth reference of this grid) */
    bool scalar;     /* x, w and out as f32: lanes read and write neighbouring elements */
} variant;

static bool parse(const char *name, variant *v) {
    *v = (variant){0};
    v->per = 1;
    unsigned n = 0;
    char a = 0, b = 0, c = 0;
    if (sscanf(name, "copy%u", &n) == 1) {
        v->lanes = n;
        v->copy = v->vec_store = true;
    } else if (sscanf(name, "sg%u", &n) == 1) {
        v->lanes = 0;
        v->per = n;
        v->vec_store = v->vec_weight = v->subgroup = true;
    } else if (sscanf(name, "x%u%c", &n, &c) == 2) {
        v->lanes = n;
        v->scalar = true;
        v->subgroup = c == 'b';
    } else if (sscanf(name, "%u%c%c%c", &n, &a, &b, &c) == 4) {
        v->lanes = n;
        v->vec_store = a == 'v';
        v->vec_weight = b == 'v';
        v->subgroup = c == 'b';
    } else {
        return false;
    }
    uint32_t units = v->scalar ? COLS : COLS / 4;
    if (v->lanes) {
        if (units % v->lanes || units / v->lanes > 16 || v->lanes > 1024) {
            return false;
        }
        if (v->lanes < 256) {
            v->per = 256 / v->lanes; /* kfuse's layout: 256 invocations a workgroup */
        }
    }
    return v->per * (v->lanes ? v->lanes : 32) <= 1024;
}

static const char *kernel(const variant *v) {
    static char text[65536];
    char body[49152] = "";
    size_t o = 0;
#define P(...) (o += (size_t)snprintf(body + o, sizeof body - o, __VA_ARGS__))
    uint32_t units = v->scalar ? COLS : COLS / 4;
    if (!v->lanes) {
        /* a row per subgroup: the sum over a strided loop, then the same loop again */
        P("    let bu = row * %uu;\n    var s = 0.0f;\n", units);
        P("    for (var i = sl; i < %uu; i += ss) { let t = x[bu + i]; s += dot(t, t); }\n", units);
        P("    let r = inverseSqrt(subgroupAdd(s) / %.1ff + 1e-5f);\n", (double)COLS);
        P("    for (var i = sl; i < %uu; i += ss) { out[bu + i] = x[bu + i] * r * w[i]; }\n",
          units);
    } else {
        uint32_t chunks = units / v->lanes;
        P("    let bu = row * %uu;\n", units);
        for (uint32_t c = 0; c < chunks; c++) {
            P("    let v%u = x[bu + lane + %uu];\n", c, c * v->lanes);
        }
        if (v->copy) {
            for (uint32_t c = 0; c < chunks; c++) {
                P("    out[bu + lane + %uu] = v%u;\n", c * v->lanes, c);
            }
            goto done;
        }
        P("    var s = 0.0f;\n");
        for (uint32_t c = 0; c < chunks; c++) {
            if (v->scalar) {
                P("    s += v%u * v%u;\n", c, c);
            } else {
                P("    { let t = v%u * v%u; s += t.x + t.y + (t.z + t.w); }\n", c, c);
            }
        }
        if (v->subgroup) {
            P("    let ssum = subgroupAdd(s);\n    if (sl == 0u) { part[slot + lane / ss] = ssum; "
              "}\n"
              "    workgroupBarrier();\n    var total = 0.0f;\n"
              "    for (var j = 0u; j < %uu / ss; j++) { total += part[slot + j]; }\n",
              v->lanes);
        } else {
            uint32_t gather = v->lanes < 16 ? v->lanes : 16, fan = v->lanes / gather;
            P("    part[slot + lane] = s;\n    workgroupBarrier();\n");
            if (fan > 1) {
                P("    if (lane < %uu) { var g = 0.0f;\n", gather);
                for (uint32_t j = 0; j < fan; j++) {
                    P("        g += part[slot + lane + %uu];\n", j * gather);
                }
                P("        part[slot + lane] = g; }\n    workgroupBarrier();\n");
            }
            P("    var total = 0.0f;\n");
            for (uint32_t j = 0; j < gather; j++) {
                P("    total += part[slot + %uu];\n", j);
            }
        }
        P("    let r = inverseSqrt(total / %.1ff + 1e-5f);\n", (double)COLS);
        for (uint32_t c = 0; c < chunks; c++) {
            if (v->scalar) {
                P("    out[bu + lane + %uu] = v%u * r * w[lane + %uu];\n", c * v->lanes, c,
                  c * v->lanes);
            } else if (v->vec_store && v->vec_weight) {
                P("    out[bu + lane + %uu] = v%u * r * w[lane + %uu];\n", c * v->lanes, c,
                  c * v->lanes);
            } else if (v->vec_store) {
                P("    out[bu + lane + %uu] = v%u * r * ws((lane + %uu) * 4u);\n", c * v->lanes, c,
                  c * v->lanes);
            } else {
                P("    { let y = v%u * r; let at = (bu + lane + %uu) * 4u;\n", c, c * v->lanes);
                for (uint32_t j = 0; j < 4; j++) {
                    const char *comp = "xyzw" + j;
                    if (v->vec_weight) {
                        P("      out[at + %uu] = y.%.1s * w[lane + %uu].%.1s;\n", j, comp,
                          c * v->lanes, comp);
                    } else {
                        P("      out[at + %uu] = y.%.1s * w[(at + %uu) %% %uu];\n", j, comp, j,
                          COLS);
                    }
                }
                P("    }\n");
            }
        }
    }
done:
#undef P
    bool sg = v->subgroup;
    uint32_t wx = v->lanes ? v->lanes : 32;
    snprintf(text, sizeof text,
             "%s@group(0) @binding(0) var<storage, read> x: array<%s>;\n"
             "@group(0) @binding(1) var<storage, read> w: array<%s>;\n"
             "@group(0) @binding(2) var<storage, read_write> out: array<%s>;\n"
             "var<workgroup> part: array<f32, %u>;\n"
             "%s"
             "@compute @workgroup_size(%u, %u, 1) fn main(@builtin(local_invocation_id) lid: "
             "vec3<u32>, @builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: "
             "vec3<u32>%s) {\n"
             "    let lane = lid.x;\n    let slot = lid.y * %uu;\n"
             "    let row = min((wg.x + wg.y * nw.x) * %uu + lid.y, %uu);\n%s}\n",
             sg ? "enable subgroups;\n" : "", v->scalar ? "f32" : "vec4<f32>",
             v->vec_weight ? "vec4<f32>" : "f32", v->vec_store ? "vec4<f32>" : "f32", wx * v->per,
             v->vec_weight ? ""
                           : "fn ws(i: u32) -> vec4<f32> { return vec4<f32>(w[i], w[i + 1u], "
                             "w[i + 2u], w[i + 3u]); }\n",
             wx, v->per,
             sg ? ", @builtin(subgroup_invocation_id) sl: u32, @builtin(subgroup_size) ss: u32"
                : "",
             wx, v->per, ROWS - 1, body);
    return text;
}

/* 32-bit xorshift: inputs in [-2, 2) */
static float next(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return (float)(*s >> 8) / 4194304.0f - 2.0f;
}

int main(int argc, char **argv) {
    const char *shape = getenv("KFUSE_ROWS");
    unsigned r = 0, c = 0;
    if (shape && sscanf(shape, "%ux%u", &r, &c) == 2 && r > 0 && c % 4096 == 0 && c > 0) {
        ROWS = r;
        COLS = c;
    }
    size_t n = (size_t)ROWS * COLS;
    float *x = malloc(4 * n), *y = malloc(4 * n), *w = malloc(4 * (size_t)COLS);
    kf_context *ctx = NULL;
    kf_context_desc desc = {0};
    kf_buffer *bufs[3] = {0};
    if (!x || !y || !w || kf_context_create(&desc, &ctx) != KF_OK ||
        kf_buffer_create(ctx, 4ull * n, &bufs[0]) || kf_buffer_create(ctx, 4ull * COLS, &bufs[1]) ||
        kf_buffer_create(ctx, 4ull * n, &bufs[2])) {
        fprintf(stderr, "kfuse_row_variants: no device or no memory\n");
        return 1;
    }
    uint32_t seed = 20261202;
    for (size_t i = 0; i < n; i++) {
        x[i] = next(&seed);
    }
    for (uint32_t i = 0; i < COLS; i++) {
        w[i] = next(&seed);
    }
    float *rstd = malloc(4 * (size_t)ROWS);
    for (uint32_t i = 0; rstd && i < ROWS; i++) {
        double s = 0;
        for (uint32_t j = 0; j < COLS; j++) {
            s += (double)x[(size_t)i * COLS + j] * x[(size_t)i * COLS + j];
        }
        rstd[i] = (float)(1.0 / sqrt(s / COLS + 1e-5));
    }
    if (!rstd || kf_buffer_upload(bufs[0], 0, x, 4 * n) ||
        kf_buffer_upload(bufs[1], 0, w, 4ull * COLS)) {
        fprintf(stderr, "kfuse_row_variants: upload failed\n");
        return 1;
    }
    static const char *const all[] = {"copy256", "copy512", "256ssg", "256vsg", "256svg",  "256vvg",
                                      "256vvb",  "128vvg",  "512vvg", "512vvb", "1024vvb", "512ssg",
                                      "sg8",     "x1024g",  "x1024b", "x512g"};
    const char *const *names = argc > 1 ? (const char *const *)argv + 1 : all;
    size_t count = argc > 1 ? (size_t)argc - 1 : sizeof all / sizeof all[0];
    kf_binding_kind kinds[3] = {KF_BINDING_STORAGE_READ, KF_BINDING_STORAGE_READ,
                                KF_BINDING_STORAGE_READ_WRITE};
    printf("rmsnorm * w, %ux%u f32, median of 20 (GB/s: 8 bytes an element)\n", ROWS, COLS);
    for (size_t i = 0; i < count; i++) {
        variant v;
        if (!parse(names[i], &v)) {
            printf("%-8s: not a variant of this shape\n", names[i]);
            continue;
        }
        kf_pipeline_desc pd = {.wgsl = kernel(&v), .bindings = kinds, .binding_count = 3};
        kf_pipeline *pipe = NULL;
        kf_timing t;
        kf_dispatch d = {
            .buffers = bufs, .buffer_count = 3, .groups = {(ROWS + v.per - 1) / v.per, 1, 1}};
        if (kf_buffer_fill_u32(bufs[2], 0x7fc00000u) || kf_pipeline_get(ctx, &pd, &pipe) != KF_OK ||
            (d.pipeline = pipe, kf_context_time(ctx, &d, 1, 20, &t)) != KF_OK ||
            kf_buffer_download(bufs[2], 0, y, 4 * n)) {
            printf("%-8s: %s\n", names[i], kf_context_last_error(ctx));
            continue;
        }
        size_t bad = 0;
        double worst = 0;
        for (size_t e = 0; e < n; e++) {
            float want = v.copy ? x[e] : x[e] * rstd[e / COLS] * w[e % COLS];
            double err = fabs((double)y[e] - want) / (1e-3 + fabs((double)want));
            if (!(err <= 1e-4)) {
                bad++;
            }
            if (!(err <= worst)) {
                worst = err;
            }
        }
        printf("%-8s %.4f ms  %5.0f GB/s  (min %.4f ms)  %s", names[i], t.median_ms,
               8.0 * (double)n / (t.median_ms * 1e6), t.min_ms, bad ? "WRONG" : "ok");
        if (bad) {
            printf(" (%zu elements, worst %.3g)", bad, worst);
        }
        printf("\n");
        fflush(stdout);
    }
    kf_buffer_destroy(bufs[0]);
    kf_buffer_destroy(bufs[1]);
    kf_buffer_destroy(bufs[2]);
    kf_context_destroy(ctx);
    free(x);
    free(y);
    free(w);
    free(rstd);
    return 0;
}
