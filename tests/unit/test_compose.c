/* Composition: kf_kernel_then (the seeds' |>), kf_kernel_map (mapK) and kf_kernel_identity.
 * The laws on random inputs, in the interpreter (bit for bit) and on the GPU: map f |> map g ==
 * map (g . f); identity is neutral on both sides; |> is associative, for stages and for a
 * producer whose store phase yields in a loop. Then how bindings and overrides merge, and every
 * way composition refuses. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/examples.h"
#include "ir_testing.h"

static const uint32_t WG[3] = {64, 1, 1};

static kf_type f32t(void) {
    return kf_type_scalar(KF_SCALAR_F32);
}

/* element functions f32 -> f32 */
static kf_val fn_affine(kf_kernel *k, kf_val x, void *u) {
    return kf__example_affine(k, x, u);
}
static kf_val fn_relu(kf_kernel *k, kf_val x, void *u) {
    return kf__example_relu(k, x, u);
}
static kf_val fn_gelu(kf_kernel *k, kf_val x, void *u) {
    return kf__example_gelu_tanh(k, x, u);
}
static kf_val fn_square(kf_kernel *k, kf_val x, void *u) {
    (void)u;
    return kf_mul(k, kf_mul(k, x, x), kf_lit_f32(k, 0.25f));
}
static kf_val fn_tanh(kf_kernel *k, kf_val x, void *u) {
    (void)u;
    return kf_call1(k, KF_FN_TANH, x);
}
static kf_val fn_exp(kf_kernel *k, kf_val x, void *u) {
    (void)u;
    kf_val c = kf_call3(k, KF_FN_CLAMP, x, kf_lit_f32(k, -3), kf_lit_f32(k, 3));
    return kf_call1(k, KF_FN_EXP, c);
}
static kf_val fn_erf(kf_kernel *k, kf_val x, void *u) {
    (void)u;
    return kf_call1(k, KF_FN_ERF, x);
}

static const kf_map_fn fns[] = {fn_affine, fn_relu, fn_gelu, fn_square, fn_tanh, fn_exp, fn_erf};
#define FN_COUNT (sizeof fns / sizeof fns[0])

typedef struct chain {
    kf_map_fn f[3];
    int n;
} chain;

static kf_val fn_chain(kf_kernel *k, kf_val x, void *u) {
    const chain *c = u;
    for (int i = 0; i < c->n; i++) {
        x = c->f[i](k, x, NULL);
    }
    return x;
}

static kf_kernel *map_of(const char *name, kf_map_fn f) {
    return kf_kernel_map(name, f32t(), f32t(), WG, f, NULL);
}

/* Runs a stage over x (n elements) into y, on the GPU (ctx) or in the interpreter (NULL). */
static bool run_stage(kf_context *ctx, kf_kernel *k, const float *x, float *y, uint64_t n) {
    kt_fill_poison(y, n * 4);
    kf_host_buffer b[2] = {{(void *)x, n * 4}, {y, n * 4}};
    kt_launch l = {.elements = n};
    return ctx ? kt_ir_gpu(ctx, k, b, 2, &l) : kt_ir_interp(k, b, 2, &l);
}

static bool same_bits(const float *a, const float *b, uint64_t n, const char *what) {
    return kt_equal_u32((const uint32_t *)a, (const uint32_t *)b, n, what);
}

static const uint64_t sizes[] = {1, 97, 1000, 4099};

/* Checks that two stages agree on random inputs: bit for bit in the interpreter, within a last
 * bit or two on the GPU (whose compiler may contract differently across the two shapes). */
static bool agree(kf_context *ctx, kf_kernel *a, kf_kernel *b, const char *law) {
    uint64_t n = sizes[kt_rand_u64() % 4];
    float *x = malloc(n * 4), *ya = malloc(n * 4), *yb = malloc(n * 4);
    kt_fill_f32(x, n, -3.0f, 3.0f);
    char what[160];
    snprintf(what, sizeof what, "%s (%s vs %s), interpreter", law, kf_kernel_name(a),
             kf_kernel_name(b));
    bool ok =
        run_stage(NULL, a, x, ya, n) && run_stage(NULL, b, x, yb, n) && same_bits(ya, yb, n, what);
    if (ok && ctx) {
        snprintf(what, sizeof what, "%s (%s vs %s), GPU", law, kf_kernel_name(a),
                 kf_kernel_name(b));
        ok = run_stage(ctx, a, x, ya, n) && run_stage(ctx, b, x, yb, n) &&
             kt_close_f32(ya, yb, n, 1e-6, 1e-3, what);
    }
    free(x);
    free(ya);
    free(yb);
    return ok;
}

KT_TEST(unit, compose_map_then_map_is_map_of_composition) {
    KT_NEED_GPU(ctx);
    for (int trial = 0; trial < 8; trial++) {
        chain c = {{fns[kt_rand_u64() % FN_COUNT], fns[kt_rand_u64() % FN_COUNT]}, 2};
        kf_kernel *f = map_of("f", c.f[0]);
        kf_kernel *g = map_of("g", c.f[1]);
        kf_kernel *fg = kf_kernel_then(f, g);
        kf_kernel *direct = kf_kernel_map("g_after_f", f32t(), f32t(), WG, fn_chain, &c);
        bool ok = kf_kernel_status(fg) == KF_OK && agree(ctx, fg, direct, "map f |> map g");
        KT_CHECK(kf_kernel_status(fg) == KF_OK, "then: %s", kf_kernel_error(fg));
        kf_kernel_destroy(f);
        kf_kernel_destroy(g);
        kf_kernel_destroy(fg);
        kf_kernel_destroy(direct);
        KT_CHECK(ok, "trial %d", trial);
    }
}

KT_TEST(unit, compose_identity_is_neutral) {
    KT_NEED_GPU(ctx);
    kf_kernel *id = kf_kernel_identity(f32t(), WG);
    for (int trial = 0; trial < 4; trial++) {
        kf_kernel *m = map_of("m", fns[kt_rand_u64() % FN_COUNT]);
        kf_kernel *left = kf_kernel_then(id, m);
        kf_kernel *right = kf_kernel_then(m, id);
        bool ok =
            agree(ctx, left, m, "identity |> m == m") && agree(ctx, right, m, "m |> identity == m");
        kf_kernel_destroy(m);
        kf_kernel_destroy(left);
        kf_kernel_destroy(right);
        KT_CHECK(ok, "trial %d", trial);
    }
    /* identity alone copies */
    uint64_t n = 1001;
    float *x = malloc(n * 4), *y = malloc(n * 4);
    kt_fill_f32(x, n, -10.0f, 10.0f);
    bool ok = run_stage(ctx, id, x, y, n) && same_bits(y, x, n, "identity on the GPU");
    free(x);
    free(y);
    kf_kernel_destroy(id);
    KT_CHECK(ok, "identity");
}

KT_TEST(unit, compose_then_is_associative) {
    KT_NEED_GPU(ctx);
    for (int trial = 0; trial < 6; trial++) {
        kf_kernel *a = map_of("a", fns[kt_rand_u64() % FN_COUNT]);
        kf_kernel *b = map_of("b", fns[kt_rand_u64() % FN_COUNT]);
        kf_kernel *c = map_of("c", fns[kt_rand_u64() % FN_COUNT]);
        kf_kernel *ab = kf_kernel_then(a, b), *bc = kf_kernel_then(b, c);
        kf_kernel *ab_c = kf_kernel_then(ab, c), *a_bc = kf_kernel_then(a, bc);
        bool ok = agree(ctx, ab_c, a_bc, "(a |> b) |> c == a |> (b |> c)");
        kf_kernel_destroy(a);
        kf_kernel_destroy(b);
        kf_kernel_destroy(c);
        kf_kernel_destroy(ab);
        kf_kernel_destroy(bc);
        kf_kernel_destroy(ab_c);
        kf_kernel_destroy(a_bc);
        KT_CHECK(ok, "trial %d", trial);
    }
}

/* A stage changing type on the way: f32 -> vec2<f32> -> f32. */
static kf_val to_pair(kf_kernel *k, kf_val x, void *u) {
    (void)u;
    kf_val l[2] = {x, kf_mul(k, x, x)};
    return kf_vec(k, kf_type_vec(KF_SCALAR_F32, 2), l, 2);
}
static kf_val pair_sum(kf_kernel *k, kf_val p, void *u) {
    (void)u;
    return kf_add(k, kf_extract(k, p, 0), kf_extract(k, p, 1));
}

KT_TEST(unit, compose_through_other_types) {
    KT_NEED_GPU(ctx);
    kf_type v2 = kf_type_vec(KF_SCALAR_F32, 2);
    kf_kernel *a = kf_kernel_map("pair", f32t(), v2, WG, to_pair, NULL);
    kf_kernel *b = kf_kernel_map("sum", v2, f32t(), WG, pair_sum, NULL);
    kf_kernel *ab = kf_kernel_then(a, b);
    KT_CHECK(kf_kernel_status(ab) == KF_OK, "%s", kf_kernel_error(ab));
    KT_CHECK(kf_type_eq(kf_kernel_input_type(ab), f32t()) &&
                 kf_type_eq(kf_kernel_output_type(ab), f32t()),
             "types of pair |> sum");
    uint64_t n = 513;
    float *x = malloc(n * 4), *y = malloc(n * 4), *ref = malloc(n * 4);
    kt_fill_f32(x, n, -2.0f, 2.0f);
    for (uint64_t i = 0; i < n; i++) {
        ref[i] = (float)((double)x[i] + (double)x[i] * x[i]);
    }
    bool ok = run_stage(ctx, ab, x, y, n) && kt_close_f32(y, ref, n, 1e-6, 1.0, "pair |> sum");
    free(x);
    free(y);
    free(ref);
    kf_kernel_destroy(a);
    kf_kernel_destroy(b);
    kf_kernel_destroy(ab);
    KT_CHECK(ok, "pair |> sum");
}

/* naive-matmul |> bias |> relu: the stages run at each of the matmul's two yields per
 * invocation; both groupings give the same kernel results, and both match float64. */
KT_TEST(unit, compose_producer_store_phase) {
    KT_NEED_GPU(ctx);
    kf_kernel *mm = kf__example_matmul();
    kf_kernel *bias = kf__example_bias();
    static const uint32_t wg16[3] = {16, 16, 1};
    kf_kernel *relu = kf_kernel_map("relu", f32t(), f32t(), wg16, kf__example_relu, NULL);
    kf_kernel *mb = kf_kernel_then(mm, bias), *br = kf_kernel_then(bias, relu);
    kf_kernel *left = kf_kernel_then(mb, relu), *right = kf_kernel_then(mm, br);
    KT_CHECK(kf_kernel_status(left) == KF_OK && kf_kernel_status(right) == KF_OK, "%s %s",
             kf_kernel_error(left), kf_kernel_error(right));
    /* bindings: a, b (matmul), bias (its stage), out; overrides m, n, k with n shared */
    static const char *const names[] = {"a", "b", "bias", "out"};
    KT_CHECK(kf_kernel_binding_count(left) == 4, "%u bindings", kf_kernel_binding_count(left));
    for (uint32_t i = 0; i < 4; i++) {
        kf_binding_info info;
        KT_CHECK_OK(kf_kernel_binding_info(left, i, &info));
        KT_CHECK(!strcmp(info.name, names[i]), "binding %u is %s", i, info.name);
    }
    uint32_t grid[3];
    kf_kernel_grid(left, grid);
    KT_CHECK(grid[0] == 4 && grid[1] == 2 && grid[2] == 1, "a's grid is kept");
    const uint32_t M = 64, N = 64, K = 64;
    float *a = malloc(M * K * 4), *b = malloc(K * N * 4), *bv = malloc(N * 4);
    float *ref = malloc(M * N * 4);
    kt_fill_f32(a, M * K, -1.0f, 1.0f);
    kt_fill_f32(b, K * N, -1.0f, 1.0f);
    kt_fill_f32(bv, N, -1.0f, 1.0f);
    for (uint32_t r = 0; r < M; r++) {
        for (uint32_t c = 0; c < N; c++) {
            double acc = 0;
            for (uint32_t i = 0; i < K; i++) {
                acc += (double)a[r * K + i] * b[i * N + c];
            }
            acc += bv[c];
            ref[r * N + c] = (float)(acc > 0 ? acc : 0);
        }
    }
    kf_kernel *ks[2] = {left, right};
    bool ok = true;
    float *outs[2][2] = {{NULL, NULL}, {NULL, NULL}};
    for (int v = 0; v < 2 && ok; v++) {
        for (int dev = 0; dev < 2 && ok; dev++) {
            float *out = malloc(M * N * 4);
            kt_fill_poison(out, M * N * 4);
            kf_host_buffer bufs[4] = {
                {a, M * K * 4}, {b, K * N * 4}, {bv, N * 4}, {out, M * N * 4}};
            kt_launch l = {0};
            ok = dev ? kt_ir_gpu(ctx, ks[v], bufs, 4, &l) : kt_ir_interp(ks[v], bufs, 4, &l);
            ok = ok && kt_close_f32(out, ref, M * N, 1e-5, 1.0,
                                    dev ? "matmul |> bias |> relu on the GPU"
                                        : "matmul |> bias |> relu interpreted");
            outs[v][dev] = out;
        }
    }
    if (ok) {
        ok = same_bits(outs[0][0], outs[1][0], M * N,
                       "(mm |> bias) |> relu vs mm |> (bias |> relu)");
    }
    for (int v = 0; v < 2; v++) {
        for (int dev = 0; dev < 2; dev++) {
            free(outs[v][dev]);
        }
    }
    free(a);
    free(b);
    free(bv);
    free(ref);
    kf_kernel_destroy(mm);
    kf_kernel_destroy(bias);
    kf_kernel_destroy(relu);
    kf_kernel_destroy(mb);
    kf_kernel_destroy(br);
    kf_kernel_destroy(left);
    kf_kernel_destroy(right);
    KT_CHECK(ok, "producer store phase");
}

KT_CPU_TEST(unit, compose_bindings_and_overrides_merge) {
    kf_kernel_desc d = {0};
    d.name = "s";
    d.input = d.output = f32t();
    kf_kernel *a = kf_kernel_create(&d);
    kf_kernel *b = kf_kernel_create(&d);
    kf_kernel *c = kf_kernel_create(&d);
    kf_kernel *all[3] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        kf_kernel *k = all[i];
        kf_binding bias = kf_kernel_storage(k, "bias", f32t(), KF_ACCESS_READ);
        kf_val scale = kf_kernel_override(k, "scale", f32t(), 2.0);
        kf_val y =
            kf_mul(k, kf_add(k, kf_kernel_input(k), kf_load(k, bias, kf_kernel_index(k))), scale);
        kf_kernel_yield(k, y, kf_kernel_index(k));
    }
    kf_kernel *ab = kf_kernel_then(a, b);
    kf_kernel *abc = kf_kernel_then(ab, c);
    KT_CHECK(kf_kernel_status(abc) == KF_OK, "%s", kf_kernel_error(abc));
    static const char *const names[] = {"in", "bias", "bias_1", "bias_2", "out"};
    KT_CHECK(kf_kernel_binding_count(abc) == 5, "%u bindings", kf_kernel_binding_count(abc));
    for (uint32_t i = 0; i < 5; i++) {
        kf_binding_info info;
        KT_CHECK_OK(kf_kernel_binding_info(abc, i, &info));
        KT_CHECK(!strcmp(info.name, names[i]), "binding %u is %s, expected %s", i, info.name,
                 names[i]);
    }
    char *w = kf_kernel_emit_wgsl(abc);
    KT_CHECK(w, "emit");
    /* one override "scale" shared by the three */
    const char *first = strstr(w, "override scale: f32");
    KT_CHECK(first && !strstr(first + 1, "override scale"), "scale declared once:\n%s", w);
    kf_free(w);
    /* run with scale = 0.5 and check: ((x + b0) s + b1) s + b2) s */
    uint64_t n = 300;
    float *x = malloc(n * 4), *bias[3], *y = malloc(n * 4), *ref = malloc(n * 4);
    kt_fill_f32(x, n, -1.0f, 1.0f);
    for (int i = 0; i < 3; i++) {
        bias[i] = malloc(n * 4);
        kt_fill_f32(bias[i], n, -1.0f, 1.0f);
    }
    for (uint64_t i = 0; i < n; i++) {
        float v = x[i];
        for (int j = 0; j < 3; j++) {
            v = (v + bias[j][i]) * 0.5f;
        }
        ref[i] = v;
    }
    kt_fill_poison(y, n * 4);
    kf_host_buffer bufs[5] = {
        {x, n * 4}, {bias[0], n * 4}, {bias[1], n * 4}, {bias[2], n * 4}, {y, n * 4}};
    kf_constant scale = {"scale", 0.5};
    kt_launch l = {.elements = n, .constants = &scale, .constant_count = 1};
    bool ok = kt_ir_interp(abc, bufs, 5, &l) && same_bits(y, ref, n, "three biases, one scale");
    free(x);
    free(y);
    free(ref);
    for (int i = 0; i < 3; i++) {
        free(bias[i]);
    }
    for (int i = 0; i < 3; i++) {
        kf_kernel_destroy(all[i]);
    }
    kf_kernel_destroy(ab);
    kf_kernel_destroy(abc);
    KT_CHECK(ok, "merged kernel");
}

static bool then_fails(kf_kernel *a, kf_kernel *b, kf_status status, const char *f1, const char *f2,
                       int line) {
    kf_kernel *r = kf_kernel_then(a, b);
    bool ok = r && kf_kernel_status(r) == status && strstr(kf_kernel_error(r), f1) &&
              (!f2 || strstr(kf_kernel_error(r), f2));
    if (!ok) {
        kt_fail(__FILE__, line, "expected %s with '%s', got %s: %s", kf_status_str(status), f1,
                r ? kf_status_str(kf_kernel_status(r)) : "NULL", r ? kf_kernel_error(r) : "");
    }
    kf_kernel_destroy(r);
    return ok;
}

#define THEN_FAILS(a, b, st, f1, f2)                                                               \
    do {                                                                                           \
        if (!then_fails((a), (b), (st), (f1), (f2), __LINE__))                                     \
            goto done;                                                                             \
    } while (0)

KT_CPU_TEST(unit, compose_errors) {
    kf_kernel *relu = map_of("relu", fn_relu);
    kf_kernel_desc d = {0};
    d.name = "sink";
    kf_kernel *sink = kf_kernel_create(&d); /* producer without output */
    d.name = "producer";
    d.output = f32t();
    kf_kernel *producer = kf_kernel_create(&d);
    static const uint32_t wg128[3] = {128, 1, 1};
    kf_kernel *wide = kf_kernel_map("wide", f32t(), f32t(), wg128, fn_relu, NULL);
    kf_kernel_desc sd = {0};
    sd.name = "tiled";
    sd.input = sd.output = f32t();
    memcpy(sd.workgroup_size, WG, sizeof WG);
    kf_kernel *tiled = kf_kernel_create(&sd);
    kf_kernel_workgroup(tiled, "tile", f32t(), 64);
    kf_kernel_yield(tiled, kf_kernel_input(tiled), kf_kernel_index(tiled));
    sd.name = "ids";
    kf_kernel *ids = kf_kernel_create(&sd);
    kf_val gid = kf_extract(ids, kf_builtin_get(ids, KF_BUILTIN_GLOBAL_ID), 0);
    kf_kernel_yield(ids, kf_add(ids, kf_kernel_input(ids), kf_cast(ids, f32t(), gid)),
                    kf_kernel_index(ids));
    sd.name = "broken";
    kf_kernel *broken = kf_kernel_create(&sd);
    kf_add(broken, kf_kernel_input(broken), kf_lit_u32(broken, 1));
    sd.name = "open";
    kf_kernel *open = kf_kernel_create(&sd);
    kf_if(open, kf_lit_bool(open, true));
    kf_kernel_desc vd = {0};
    vd.name = "vec";
    vd.input = vd.output = kf_type_vec(KF_SCALAR_F32, 4);
    memcpy(vd.workgroup_size, WG, sizeof WG);
    kf_kernel *vec = kf_kernel_create(&vd);
    kf_kernel_desc od = {0};
    od.name = "u32scale";
    od.input = od.output = f32t();
    memcpy(od.workgroup_size, WG, sizeof WG);
    kf_kernel *u32scale = kf_kernel_create(&od);
    kf_kernel_override(u32scale, "factor", kf_type_scalar(KF_SCALAR_U32), 2);
    kf_kernel_yield(u32scale, kf_kernel_input(u32scale), kf_kernel_index(u32scale));
    od.name = "f32scale";
    kf_kernel *f32scale = kf_kernel_create(&od);
    kf_kernel_override(f32scale, "factor", f32t(), 2);
    kf_kernel_yield(f32scale, kf_kernel_input(f32scale), kf_kernel_index(f32scale));

    THEN_FAILS(sink, relu, KF_ERROR_TYPE, "'sink' has no output", "'relu'");
    THEN_FAILS(relu, producer, KF_ERROR_TYPE, "'producer' is not a stage", NULL);
    THEN_FAILS(relu, vec, KF_ERROR_TYPE, "'relu' yields f32 but 'vec' takes vec4<f32>", NULL);
    THEN_FAILS(relu, wide, KF_ERROR_TYPE, "workgroup sizes differ",
               "'relu' is 64x1x1, 'wide' is 128x1x1");
    THEN_FAILS(relu, tiled, KF_ERROR_TYPE, "'tiled' uses workgroup memory", NULL);
    THEN_FAILS(relu, ids, KF_ERROR_TYPE, "'ids' uses invocation builtins", NULL);
    THEN_FAILS(relu, broken, KF_ERROR_TYPE, "'broken' is invalid", "f32 + u32");
    THEN_FAILS(open, relu, KF_ERROR_INVALID_ARGUMENT, "'open' still has an open if", NULL);
    THEN_FAILS(u32scale, f32scale, KF_ERROR_TYPE, "override 'factor' is u32", "f32 in 'f32scale'");
    THEN_FAILS(NULL, relu, KF_ERROR_INVALID_ARGUMENT, "a is NULL", NULL);
done:
    kf_kernel_destroy(relu);
    kf_kernel_destroy(sink);
    kf_kernel_destroy(producer);
    kf_kernel_destroy(wide);
    kf_kernel_destroy(tiled);
    kf_kernel_destroy(ids);
    kf_kernel_destroy(broken);
    kf_kernel_destroy(open);
    kf_kernel_destroy(vec);
    kf_kernel_destroy(u32scale);
    kf_kernel_destroy(f32scale);
}
