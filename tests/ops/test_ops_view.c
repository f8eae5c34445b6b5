/* Views (reshape, permute, slice, concat, slice_grad) and embedding (with embedding_grad): specs
 * against values worked out by hand, the spec's backward against finite differences, and every
 * kernel against its spec on the GPU over each verification table, f32 and f16, forward and
 * backward; invalid ids on the device. */
#include "harness.h"
#include "ops/ops_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static kf_tensor *tensor_of(kf_shape s, const float *values) {
    kf_tensor *t = NULL;
    if (kf_tensor_create(&s, &t) != KF_OK) {
        return NULL;
    }
    memcpy(t->data, values, sizeof(float) * kf_tensor_size(t));
    return t;
}

static bool run_spec(const char *name, const kf_tensor *const *in, const kf_op_params *p,
                     const float *want, uint64_t n) {
    const kf_operator *op = kf_op_find(name);
    kf_shape shapes[4] = {{0}};
    for (uint32_t i = 0; i < kf_op_arity(op, p); i++) {
        shapes[i] = in[i]->shape;
    }
    kf_shape out_shape;
    char msg[256];
    if (kf_op_shape(op, shapes, p, &out_shape, msg, sizeof msg) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "%s: %s", name, msg);
        return false;
    }
    kf_tensor *out = NULL;
    bool ok = kf_tensor_create(&out_shape, &out) == KF_OK && kf_tensor_size(out) == n &&
              kf_op_spec_forward(op, in, p, out) == KF_OK;
    for (uint64_t i = 0; ok && i < n; i++) {
        ok = isnan(want[i]) ? isnan(out->data[i]) : out->data[i] == want[i];
        if (!ok) {
            kt_fail(__FILE__, __LINE__, "%s: element %llu is %g, want %g", name,
                    (unsigned long long)i, (double)out->data[i], (double)want[i]);
        }
    }
    kf_tensor_destroy(out);
    return ok;
}

#define LIST_PARAMS(...)                                                                           \
    (kf_op_params) {                                                                               \
        .list = {__VA_ARGS__}, .list_count = sizeof((int32_t[]){__VA_ARGS__}) / sizeof(int32_t),   \
        .given = KF_PARAM_LIST                                                                     \
    }

KT_CPU_TEST(ops, view_specs_by_hand) {
    /* x = [[0 1 2], [3 4 5]] */
    const float x6[] = {0, 1, 2, 3, 4, 5};
    kf_tensor *x = tensor_of(kf_shape_2d(2, 3), x6);
    const kf_tensor *in[2] = {x, NULL};
    kf_op_params p = LIST_PARAMS(3, -1);
    KT_CHECK(run_spec("reshape", in, &p, x6, 6), "reshape keeps the order");
    p = LIST_PARAMS(1, 0);
    const float xt[] = {0, 3, 1, 4, 2, 5};
    KT_CHECK(run_spec("permute", in, &p, xt, 6), "permute [1, 0] is a transpose");
    p = (kf_op_params){.axis = 1, .start = 1, .length = 2};
    const float cols[] = {1, 2, 4, 5};
    KT_CHECK(run_spec("slice", in, &p, cols, 4), "slice of columns 1..2");
    p = (kf_op_params){.axis = -1, .start = 2};
    const float last[] = {2, 5};
    KT_CHECK(run_spec("slice", in, &p, last, 2), "slice to the end of the last axis");
    const float y2[] = {9, 8};
    kf_tensor *y = tensor_of(kf_shape_2d(2, 1), y2);
    const kf_tensor *ab[2] = {x, y};
    p = (kf_op_params){.axis = 1};
    const float joined[] = {0, 1, 2, 9, 3, 4, 5, 8};
    KT_CHECK(run_spec("concat", ab, &p, joined, 8), "concat of columns");
    /* a rank-3 rotation: [2, 3] as [1, 2, 3] -> axes [2, 0, 1] gives [3, 1, 2] */
    kf_tensor *x3 = tensor_of((kf_shape){3, {1, 2, 3, 0}}, x6);
    const kf_tensor *in3[2] = {x3, NULL};
    p = LIST_PARAMS(2, 0, 1);
    KT_CHECK(run_spec("permute", in3, &p, xt, 6), "permute [2, 0, 1]");
    /* embedding: rows 2, 0, 2 and an invalid id (NaN row) of a [3, 2] table */
    const float t6[] = {10, 11, 20, 21, 30, 31};
    kf_tensor *table = tensor_of(kf_shape_2d(3, 2), t6);
    const float id4[] = {2, 0, 2, 3};
    kf_tensor *ids = tensor_of(kf_shape_1d(4), id4);
    const kf_tensor *te[2] = {table, ids};
    const float rows[] = {30, 31, 10, 11, 30, 31, NAN, NAN};
    p = (kf_op_params){0};
    KT_CHECK(run_spec("embedding", te, &p, rows, 8), "embedding rows, NaN for id 3");
    /* dtable: row 2 gets dy rows 0 and 2, row 0 gets row 1, the invalid id adds nothing */
    const float dy8[] = {1, 2, 3, 4, 5, 6, 7, 8};
    kf_tensor *dy = tensor_of(kf_shape_2d(4, 2), dy8);
    const kf_tensor *tg[3] = {table, ids, dy};
    const float dtable[] = {3, 4, 0, 0, 6, 8};
    KT_CHECK(run_spec("embedding_grad", tg, &p, dtable, 6), "embedding_grad sums rows by id");
    kf_tensor_destroy(x);
    kf_tensor_destroy(y);
    kf_tensor_destroy(x3);
    kf_tensor_destroy(table);
    kf_tensor_destroy(ids);
    kf_tensor_destroy(dy);
}

static const char *const view_ops[] = {"reshape",   "permute",    "slice",         "concat",
                                       "embedding", "slice_grad", "embedding_grad"};

KT_CPU_TEST(ops, view_gradients_match_finite_differences) {
    uint32_t checked = 0;
    for (size_t o = 0; o < sizeof view_ops / sizeof view_ops[0]; o++) {
        const kf_operator *op = kf_op_find(view_ops[o]);
        for (uint32_t c = 0; c < op->case_count; c++) {
            if (strstr(op->cases[c].note, "large")) {
                continue; /* kfuse verify --gradient samples them */
            }
            kf_verify_case vc = {.op = op, .params = op->cases[c].params, .seed = kt_rand_u64()};
            memcpy(vc.shapes, op->cases[c].shapes, sizeof vc.shapes);
            kf_verify_result r;
            KT_CHECK(kf_op_check_gradient(&vc, &r) == KF_OK, "%s (%s): %s", op->name,
                     op->cases[c].note, r.message);
            checked++;
        }
    }
    KT_CHECK(checked >= 30, "%u checks", checked);
}

static void verify_views(kf_dtype dtype) {
    KT_NEED_GPU(ctx);
    if (dtype == KF_DTYPE_F16) {
        kf_adapter_info info;
        KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
        if (!info.has_f16) {
            printf("    (f16: the adapter has no shader-f16; skipped)\n");
            return;
        }
    }
    uint32_t checked = 0;
    for (size_t o = 0; o < sizeof view_ops / sizeof view_ops[0]; o++) {
        const kf_operator *op = kf_op_find(view_ops[o]);
        for (uint32_t c = 0; c < op->case_count; c++) {
            if (strstr(op->cases[c].note, "large") && strcmp(op->name, "permute") != 0) {
                continue; /* one large case (a strided gather) is enough on two CPU cores; kfuse
                           * verify runs them all */
            }
            for (int backward = 0; backward < (kf_op_has_backward(op) ? 2 : 1); backward++) {
                kf_verify_case vc = {.op = op,
                                     .params = op->cases[c].params,
                                     .dtype = dtype,
                                     .backward = backward != 0,
                                     .seed = kt_rand_u64()};
                memcpy(vc.shapes, op->cases[c].shapes, sizeof vc.shapes);
                kf_verify_result r;
                kf_status st = kf_op_verify(ctx, &vc, &r);
                KT_CHECK(st == KF_OK && r.passed, "%s %s (%s) %s: %s (%.3g > %.3g, seed %llu)",
                         op->name, backward ? "backward" : "forward", op->cases[c].note,
                         kf_dtype_str(dtype), r.message, r.max_rel_error, r.tolerance,
                         (unsigned long long)vc.seed);
                checked++;
            }
        }
    }
    printf("    %u checks of the views and embedding\n", checked);
}

KT_TEST(ops, view_verify_f32) {
    verify_views(KF_DTYPE_F32);
}

KT_TEST(ops, view_verify_f16) {
    verify_views(KF_DTYPE_F16);
}

/* An id outside [0, V) gives a NaN row on the device as in the spec, and adds nothing to dtable;
 * the kernel's loads stay in bounds (a guard band would catch a stray write, the poison an
 * unwritten element). */
KT_TEST(ops, embedding_invalid_ids_on_device) {
    KT_NEED_GPU(ctx);
    kf_shape ts = kf_shape_2d(3, 4), is = kf_shape_1d(5);
    kf_tensor *table = NULL, *ids = NULL, *out = NULL;
    KT_CHECK_OK(kf_tensor_create(&ts, &table));
    kf_tensor_fill_random(table, kt_rand_u64(), -1.0f, 1.0f);
    KT_CHECK_OK(kf_tensor_create(&is, &ids));
    const float id5[] = {1, -1, 3, 0, 2};
    memcpy(ids->data, id5, sizeof id5);
    kf_gpu_tensor *gt = NULL, *gi = NULL, *go = NULL;
    KT_CHECK_OK(kf_gpu_tensor_from(ctx, table, KF_DTYPE_F32, &gt));
    KT_CHECK_OK(kf_gpu_tensor_from(ctx, ids, KF_DTYPE_I32, &gi));
    kf_shape os = kf_shape_2d(5, 4);
    KT_CHECK_OK(kf_gpu_tensor_create(ctx, &os, KF_DTYPE_F32, &go));
    const kf_gpu_tensor *in[2] = {gt, gi};
    KT_CHECK_OK(kf_op_run_forward(ctx, kf_op_find("embedding"), NULL, in, go));
    KT_CHECK_OK(kf_tensor_create(&os, &out));
    KT_CHECK_OK(kf_gpu_tensor_to(go, out));
    for (uint32_t r = 0; r < 5; r++) {
        for (uint32_t c = 0; c < 4; c++) {
            float got = out->data[r * 4 + c];
            bool bad = id5[r] < 0 || id5[r] >= 3;
            KT_CHECK(bad ? isnan(got) : got == table->data[(uint32_t)id5[r] * 4 + c],
                     "row %u col %u: %g", r, c, (double)got);
        }
    }
    kf_gpu_tensor_destroy(gt);
    kf_gpu_tensor_destroy(gi);
    kf_gpu_tensor_destroy(go);
    kf_tensor_destroy(table);
    kf_tensor_destroy(ids);
    kf_tensor_destroy(out);
}

/* Views move bits: NaN, infinities and -0 come out of every view's kernel as they went in. */
KT_TEST(ops, views_move_nan_inf_and_signed_zero_unchanged) {
    KT_NEED_GPU(ctx);
    static const float specials[] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, 1.5f};
    kf_shape s = kf_shape_2d(4, 6);
    kf_tensor *x = NULL, *back = NULL;
    KT_CHECK_OK(kf_tensor_create(&s, &x));
    for (uint32_t e = 0; e < 24; e++) {
        x->data[e] = specials[(e * 5) % 6];
    }
    kf_gpu_tensor *gx = NULL;
    KT_CHECK_OK(kf_gpu_tensor_from(ctx, x, KF_DTYPE_F32, &gx));
    const char *names[] = {"reshape", "permute", "slice", "concat"};
    kf_op_params params[4] = {
        LIST_PARAMS(6, 4), LIST_PARAMS(1, 0), {.axis = 1, .start = 0}, {.axis = 0}};
    for (int o = 0; o < 4; o++) {
        const kf_operator *op = kf_op_find(names[o]);
        kf_shape shapes[2] = {s, s}, os;
        KT_CHECK_OK(kf_op_shape(op, shapes, &params[o], &os, NULL, 0));
        kf_gpu_tensor *gy = NULL;
        KT_CHECK_OK(kf_gpu_tensor_create(ctx, &os, KF_DTYPE_F32, &gy));
        const kf_gpu_tensor *in[2] = {gx, gx};
        KT_CHECK_OK(kf_op_run_forward(ctx, op, &params[o], in, gy));
        kf_tensor *want = NULL;
        KT_CHECK_OK(kf_tensor_create(&os, &want));
        KT_CHECK_OK(kf_tensor_create(&os, &back));
        const kf_tensor *tin[2] = {x, x};
        KT_CHECK_OK(kf_op_spec_forward(op, tin, &params[o], want));
        KT_CHECK_OK(kf_gpu_tensor_to(gy, back));
        KT_CHECK(!memcmp(want->data, back->data, sizeof(float) * kf_tensor_size(want)),
                 "%s changed the bits of a value", names[o]);
        kf_tensor_destroy(want);
        kf_tensor_destroy(back);
        kf_gpu_tensor_destroy(gy);
    }
    kf_gpu_tensor_destroy(gx);
    kf_tensor_destroy(x);
}

/* ---- embedding_grad's kernel: its summation order, and no workgroup read used past a barrier */

/* Runs body with $KF_EMBGRAD_CONFIG set to config (NULL: unset), then puts it back. */
#define WITH_EMBGRAD_CONFIG(config, body)                                                          \
    do {                                                                                           \
        const char *was_ = getenv("KF_EMBGRAD_CONFIG");                                            \
        char saved_[64] = "";                                                                      \
        if (was_) {                                                                                \
            snprintf(saved_, sizeof saved_, "%s", was_);                                           \
        }                                                                                          \
        if (config) {                                                                              \
            setenv("KF_EMBGRAD_CONFIG", config, 1);                                                \
        } else {                                                                                   \
            unsetenv("KF_EMBGRAD_CONFIG");                                                         \
        }                                                                                          \
        body;                                                                                      \
        if (was_) {                                                                                \
            setenv("KF_EMBGRAD_CONFIG", saved_, 1);                                                \
        } else {                                                                                   \
            unsetenv("KF_EMBGRAD_CONFIG");                                                         \
        }                                                                                          \
    } while (0)

/* A shape of embedding_grad's kernel as its summation order sees it (src/ops/embedding.c). */
typedef struct stated_shape {
    const char *config; /* KF_EMBGRAD_CONFIG */
    uint32_t tile, slices, unroll;
} stated_shape;

/* dtable[v, c] in f32, added in the order docs/operators.md states: per tile of ids, the matches
 * j = 0, 1, ... in id order go to slice j mod slices and, in it, to partial sum
 * (j / slices) mod unroll; the partial sums carry over the tiles; each slice adds its own in
 * order ((0 + 1) + 2) + ..., then the slices' are added in slice order. */
static void stated_order_sums(const kf_tensor *ids, const kf_tensor *dy, uint32_t vocab,
                              uint32_t cols, const stated_shape *sh, float *dtable) {
    uint32_t parts = sh->slices * sh->unroll;
    float *part = calloc((size_t)vocab * cols * parts, sizeof *part);
    uint32_t *j = calloc(vocab, sizeof *j);
    uint64_t rows = kf_tensor_size(ids);
    for (uint64_t r = 0; part && j && r < rows; r++) {
        if (r % sh->tile == 0) {
            memset(j, 0, sizeof *j * vocab);
        }
        uint32_t v = (uint32_t)ids->data[r];
        uint32_t slot = (j[v] % sh->slices) * sh->unroll + (j[v] / sh->slices) % sh->unroll;
        for (uint32_t c = 0; c < cols; c++) {
            part[((size_t)v * cols + c) * parts + slot] += dy->data[r * cols + c];
        }
        j[v]++;
    }
    for (size_t e = 0; part && e < (size_t)vocab * cols; e++) {
        float whole = 0.0f;
        for (uint32_t s = 0; s < sh->slices; s++) {
            const float *p = part + e * parts + s * sh->unroll;
            float sum = p[0];
            for (uint32_t u = 1; u < sh->unroll; u++) {
                sum += p[u];
            }
            whole = s == 0 ? sum : whole + sum;
        }
        dtable[e] = whole;
    }
    free(part);
    free(j);
}

/* The same inputs give the same bits on two runs, and those bits are the stated order's, for the
 * CPU's kernel shape and the GPU's: ids skewed toward row 0 (a text's spaces: hundreds of matches
 * a tile), 3 tiles (the last of 3 ids), 300 columns (chunks of 256 and 44, or 128, 128 and 44). */
static void check_stated_order(kf_context *ctx, const stated_shape *sh) {
    const uint32_t vocab = 5, cols = 300, rows = 4099;
    kf_shape ts = kf_shape_2d(vocab, cols), is = kf_shape_1d(rows), ds = kf_shape_2d(rows, cols);
    kf_tensor *table = NULL, *ids = NULL, *dy = NULL, *got[2] = {NULL, NULL};
    KT_CHECK_OK(kf_tensor_create(&ts, &table));
    KT_CHECK_OK(kf_tensor_create(&is, &ids));
    KT_CHECK_OK(kf_tensor_create(&ds, &dy));
    kf_tensor_fill_random(table, kt_rand_u64(), -1.0f, 1.0f);
    kf_tensor_fill_random(dy, kt_rand_u64(), -1.0f, 1.0f);
    for (uint32_t r = 0; r < rows; r++) {
        uint64_t x = kt_rand_u64() % 8;
        ids->data[r] = (float)(x < 4 ? 0 : x - 3); /* row 0 half the time */
    }
    kf_gpu_tensor *gt = NULL, *gi = NULL, *gd = NULL, *go = NULL;
    KT_CHECK_OK(kf_gpu_tensor_from(ctx, table, KF_DTYPE_F32, &gt));
    KT_CHECK_OK(kf_gpu_tensor_from(ctx, ids, KF_DTYPE_I32, &gi));
    KT_CHECK_OK(kf_gpu_tensor_from(ctx, dy, KF_DTYPE_F32, &gd));
    KT_CHECK_OK(kf_gpu_tensor_create(ctx, &ts, KF_DTYPE_F32, &go));
    const kf_gpu_tensor *in[3] = {gt, gi, gd};
    for (int run = 0; run < 2; run++) {
        KT_CHECK_OK(kf_op_run_forward(ctx, kf_op_find("embedding_grad"), NULL, in, go));
        KT_CHECK_OK(kf_tensor_create(&ts, &got[run]));
        KT_CHECK_OK(kf_gpu_tensor_to(go, got[run]));
    }
    KT_CHECK(!memcmp(got[0]->data, got[1]->data, sizeof(float) * vocab * cols),
             "%s shape: two runs of the same inputs differ", sh->config);
    float *stated = calloc((size_t)vocab * cols, sizeof *stated);
    KT_CHECK(stated != NULL, "out of memory");
    stated_order_sums(ids, dy, vocab, cols, sh, stated);
    for (uint32_t v = 0; v < vocab; v++) {
        for (uint32_t c = 0; c < cols; c++) {
            float want = stated[v * cols + c];
            float have = got[0]->data[v * cols + c];
            KT_CHECK(!memcmp(&want, &have, sizeof want),
                     "%s shape: dtable[%u, %u] is %.9g, the stated order gives %.9g", sh->config, v,
                     c, (double)have, (double)want);
        }
    }
    kf_gpu_tensor_destroy(gt);
    kf_gpu_tensor_destroy(gi);
    kf_gpu_tensor_destroy(gd);
    kf_gpu_tensor_destroy(go);
    kf_tensor_destroy(table);
    kf_tensor_destroy(ids);
    kf_tensor_destroy(dy);
    kf_tensor_destroy(got[0]);
    kf_tensor_destroy(got[1]);
    free(stated);
}

KT_TEST(ops, embedding_grad_sums_in_its_stated_order) {
    KT_NEED_GPU(ctx);
    static const stated_shape shapes[] = {{"cpu", 64 * 32, 1, 4}, {"gpu", 256 * 8, 4, 4}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        WITH_EMBGRAD_CONFIG(shapes[s].config, check_stated_order(ctx, &shapes[s]));
    }
}

/* Whether embedding_grad passes its verification table, but the large case. */
static bool embedding_grad_table_passes(kf_context *ctx, char *failure, size_t size) {
    const kf_operator *op = kf_op_find("embedding_grad");
    uint32_t checked = 0;
    for (uint32_t c = 0; c < op->case_count; c++) {
        if (strstr(op->cases[c].note, "large")) {
            continue;
        }
        kf_verify_case vc = {.op = op, .dtype = KF_DTYPE_F32, .seed = kt_rand_u64()};
        memcpy(vc.shapes, op->cases[c].shapes, sizeof vc.shapes);
        kf_verify_result r;
        if (kf_op_verify(ctx, &vc, &r) != KF_OK || !r.passed) {
            snprintf(failure, size, "%s: %s (seed %llu)", op->cases[c].note, r.message,
                     (unsigned long long)vc.seed);
            return false;
        }
        checked++;
    }
    snprintf(failure, size, "%u checks", checked);
    return checked >= 6;
}

/* The GPU's shape of embedding_grad's kernel (256 lanes in 4 slices) over the verification
 * table, here where kernel_choose picks the CPU's (KF_EMBGRAD_CONFIG=gpu asks for it). */
KT_TEST(ops, embedding_grad_gpu_shape_matches_the_spec) {
    KT_NEED_GPU(ctx);
    char failure[512] = "";
    bool ok = false;
    WITH_EMBGRAD_CONFIG("gpu", ok = embedding_grad_table_passes(ctx, failure, sizeof failure));
    KT_CHECK(ok, "the GPU shape: %s", failure);
}

static bool is_name_char(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_';
}

/* Whether the line holds `name` as a whole word, followed by `next` when next is not 0. */
static bool has_word(const char *line, const char *end, const char *name, char next) {
    size_t n = strlen(name);
    for (const char *at = line; at + n <= end; at++) {
        if (!strncmp(at, name, n) && (at == line || !is_name_char(at[-1])) &&
            (at + n == end || !is_name_char(at[n])) && (!next || (at + n < end && at[n] == next))) {
            return true;
        }
    }
    return false;
}

#define MAX_VALUES 256
#define MAX_NAME 48

/* The first `let` or `var` (in the kernel's WGSL) whose value comes from workgroup memory
 * (directly, or through such values) and is first used after a workgroupBarrier() of its own
 * block, in *name; false when there is none. Mesa's GLSL compiler moves such a read, when its
 * value is read once, down to the use: past the barrier (src/ops/embedding.c). */
static bool carried_past_barrier(const char *wgsl, char *name, size_t size) {
    char shared[8][MAX_NAME];
    int shared_count = 0;
    for (const char *at = wgsl; (at = strstr(at, "var<workgroup> ")) != NULL && shared_count < 8;) {
        at += strlen("var<workgroup> ");
        size_t n = strcspn(at, ":");
        snprintf(shared[shared_count++], MAX_NAME, "%.*s", (int)n, at);
    }
    char values[MAX_VALUES][MAX_NAME];
    int value_count = 0;
    for (const char *line = wgsl; *line;
         line += strcspn(line, "\n") + (line[strcspn(line, "\n")] != 0)) {
        const char *end = line + strcspn(line, "\n");
        const char *s = line + strspn(line, " ");
        bool decl = !strncmp(s, "let ", 4) || !strncmp(s, "var ", 4);
        if (!decl || value_count == MAX_VALUES) {
            continue;
        }
        const char *eq = memchr(s, '=', (size_t)(end - s));
        if (!eq) {
            continue;
        }
        bool from_shared = false;
        for (int i = 0; i < shared_count && !from_shared; i++) {
            from_shared = has_word(eq, end, shared[i], '[');
        }
        for (int i = 0; i < value_count && !from_shared; i++) {
            from_shared = has_word(eq, end, values[i], 0);
        }
        if (!from_shared) {
            continue;
        }
        size_t n = strcspn(s + 4, " :=");
        snprintf(values[value_count], MAX_NAME, "%.*s", (int)n, s + 4);
        /* its first use, within its block (depth never below the declaration's) */
        int depth = 0;
        bool barrier = false;
        for (const char *l = end + (*end != 0); *l;
             l += strcspn(l, "\n") + (l[strcspn(l, "\n")] != 0)) {
            const char *e = l + strcspn(l, "\n");
            if (has_word(l, e, values[value_count], 0)) {
                if (barrier) {
                    snprintf(name, size, "%s", values[value_count]);
                    return true;
                }
                break;
            }
            for (const char *c = l; c < e; c++) {
                depth += *c == '{' ? 1 : *c == '}' ? -1 : 0;
            }
            if (depth < 0) {
                break; /* the block ended */
            }
            barrier = barrier || has_word(l, e, "workgroupBarrier", '(');
        }
        value_count++;
    }
    return false;
}

/* No GPU: e31370d's scan read scan[lane - off] before a barrier and added it into scan[lane]
 * after it, which Mesa's GLSL compiler turned into a read after the barrier (GLES counted a match
 * 6 times). Every value embedding_grad's kernels read from workgroup memory is used before the
 * next barrier, forward and backward, at the CPU's and the GPU's kernel shapes, at one tile,
 * three tiles and two chunks. */
KT_CPU_TEST(ops, embedding_grad_uses_workgroup_reads_before_the_next_barrier) {
    const kf_operator *grad = kf_op_find("embedding_grad"), *fwd = kf_op_find("embedding");
    static const uint32_t sizes[][3] = {{7, 13, 5}, {5, 300, 4099}, {65, 128, 4096}};
    static const char *const configs[] = {"cpu", "gpu"};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        kf_shape in[3] = {kf_shape_2d(sizes[s][0], sizes[s][1]), kf_shape_1d(sizes[s][2]),
                          kf_shape_2d(sizes[s][2], sizes[s][1])};
        for (int which = 0; which < 4; which++) {
            bool backward = which % 2 != 0;
            const char *config = configs[which / 2];
            kf_kernel *k = NULL;
            WITH_EMBGRAD_CONFIG(config,
                                k = backward ? fwd->kernel_backward(in, NULL, KF_DTYPE_F32, 0)
                                             : kf_op_kernel_forward(grad, in, NULL, KF_DTYPE_F32));
            KT_CHECK(k && kf_kernel_status(k) == KF_OK, "kernel: %s", k ? kf_kernel_error(k) : "");
            char *wgsl = kf_kernel_emit_wgsl(k);
            KT_CHECK(wgsl != NULL, "no WGSL");
            KT_CHECK(strstr(wgsl, "workgroupBarrier()") != NULL,
                     "no barrier: not the tiled kernel");
            char name[MAX_NAME] = "";
            bool carried = carried_past_barrier(wgsl, name, sizeof name);
            kf_free(wgsl);
            kf_kernel_destroy(k);
            KT_CHECK(!carried,
                     "%s %ux%u, %u ids, the %s shape: '%s' is read from workgroup memory and "
                     "used after a barrier",
                     backward ? "embedding backward" : "embedding_grad", sizes[s][0], sizes[s][1],
                     sizes[s][2], config, name);
        }
    }
}
