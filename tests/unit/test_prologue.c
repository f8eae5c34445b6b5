/* Composition on loads: kf_kernel_prologue. Each operator kernel that takes a prologue (the tiled
 * and register-blocked matmuls, f32 and f16, with scalar and vec4 tile loads; softmax, rmsnorm,
 * layernorm and sum with rows held in registers as scalars or vec4s, and past the registers) is
 * run fused with an element-wise kernel on one operand and compared with the two kernels run one
 * after the other: bit for bit in the interpreter, closely on the GPU, and the fused kernel on the
 * GPU against the interpreter. The prologues are a GELU and a scale by a broadcast row (so their
 * index must be the element's own). Then the laws (identity, prologue then epilogue, two
 * prologues) and every way composition refuses. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/examples.h"
#include "ir_testing.h"
#include "ops/matmul_sgmat.h"
#include "core/half.h"

enum { PRO_GELU, PRO_SCALE };

static kf_type dtype_type(kf_dtype d) {
    return kf_type_scalar(d == KF_DTYPE_F16 ? KF_SCALAR_F16 : KF_SCALAR_F32);
}

static uint32_t elem_size(kf_dtype d) {
    return d == KF_DTYPE_F16 ? 2u : 4u;
}

/* The element-wise kernel: gelu(x), or x * m[index % cols] + 0.25 with m a [cols] row (a
 * broadcast input) named "b", so it clashes with the matmul's b. f16 computes in f32, as the
 * planner's element-wise kernels do. */
static kf_kernel *make_prologue(int kind, kf_dtype dtype, uint32_t cols) {
    kf_type t = dtype_type(dtype), f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_kernel_desc desc = {.name = kind == PRO_GELU ? "gelu" : "scale",
                           .workgroup_size = {64, 1, 1},
                           .input = t,
                           .output = t};
    kf_kernel *k = kf_kernel_create(&desc);
    kf_val x = kf_kernel_input(k);
    kf_val idx = kf_kernel_index(k);
    if (dtype == KF_DTYPE_F16) {
        x = kf_cast(k, f32, x);
    }
    kf_val y;
    if (kind == PRO_GELU) {
        y = kf__example_gelu_tanh(k, x, NULL);
    } else {
        kf_binding m = kf_kernel_storage(k, "b", t, KF_ACCESS_READ);
        kf_val mv = kf_load(k, m, kf_binary(k, KF_OP_MOD, idx, kf_lit_u32(k, cols)));
        if (dtype == KF_DTYPE_F16) {
            mv = kf_cast(k, f32, mv);
        }
        y = kf_add(k, kf_mul(k, x, mv), kf_lit_f32(k, 0.25f));
    }
    if (dtype == KF_DTYPE_F16) {
        y = kf_cast(k, t, y);
    }
    kf_kernel_yield(k, y, idx);
    return k;
}

/* Random values in [lo, hi) stored as the dtype. */
static void *rand_data(uint64_t n, kf_dtype dtype, float lo, float hi) {
    float *f = malloc(n * 4);
    kt_fill_f32(f, n, lo, hi);
    if (dtype == KF_DTYPE_F32) {
        return f;
    }
    uint16_t *h = malloc(n * 2);
    for (uint64_t i = 0; i < n; i++) {
        h[i] = kf__half_from_float(f[i]);
    }
    free(f);
    return h;
}

static bool run_kernel(kf_context *ctx, kf_kernel *k, kf_host_buffer *bufs, uint32_t count,
                       uint64_t elements) {
    kt_launch l = {.elements = elements};
    return ctx ? kt_ir_gpu(ctx, k, bufs, count, &l) : kt_ir_interp(k, bufs, count, &l);
}

static bool all_finite(const void *p, uint64_t n, kf_dtype dtype, const char *what) {
    for (uint64_t i = 0; i < n; i++) {
        float v = dtype == KF_DTYPE_F16 ? kf__half_to_float(((const uint16_t *)p)[i])
                                        : ((const float *)p)[i];
        if (!isfinite(v)) {
            kt_fail(__FILE__, __LINE__, "%s: element %llu is %g (not written?)", what,
                    (unsigned long long)i, (double)v);
            return false;
        }
    }
    return true;
}

/* |a - b| <= tol * max(|b|, the largest |b|): outputs that cancel to near zero are judged at
 * the scale of the output. */
static bool close_out(const void *a, const void *b, uint64_t n, kf_dtype dtype, double tol,
                      const char *what) {
    double scale = 0;
    for (uint64_t i = 0; i < n; i++) {
        double v = dtype == KF_DTYPE_F16 ? kf__half_to_float(((const uint16_t *)b)[i])
                                         : ((const float *)b)[i];
        scale = fmax(scale, fabs(v));
    }
    return dtype == KF_DTYPE_F16 ? kt_close_f16(a, b, n, tol, scale, what)
                                 : kt_close_f32(a, b, n, tol, scale, what);
}

static bool same_out(const void *a, const void *b, uint64_t n, kf_dtype dtype, const char *what) {
    if (dtype == KF_DTYPE_F32) {
        return kt_equal_u32(a, b, n, what);
    }
    for (uint64_t i = 0; i < n; i++) {
        uint16_t x = ((const uint16_t *)a)[i], y = ((const uint16_t *)b)[i];
        if (x != y) {
            kt_fail(__FILE__, __LINE__, "%s: half %llu is 0x%04x, expected 0x%04x", what,
                    (unsigned long long)i, x, y);
            return false;
        }
    }
    return true;
}

typedef struct pro_case {
    const char *op;
    kf_op_params params;
    uint32_t inputs;
    kf_shape shapes[3];
    uint32_t target; /* the input the prologue applies to */
    int kind;
    kf_dtype dtype;
    const char *note;
} pro_case;

static kf_kernel *op_kernel(const kf_operator *op, const kf_shape *shapes, const kf_op_params *p,
                            kf_dtype dtype) {
    return kf_op_kernel_forward(op, shapes, p, dtype);
}

/* One case: fused (interpreter and GPU) against unfused (prologue, then the op; both ways). */
static bool run_case(kf_context *ctx, const pro_case *c) {
    const kf_operator *op = kf_op_find(c->op);
    if (!op) {
        kt_fail(__FILE__, __LINE__, "no operator %s", c->op);
        return false;
    }
    kf_shape out_shape;
    char msg[256];
    if (kf_op_shape(op, c->shapes, &c->params, &out_shape, msg, sizeof msg) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "%s: %s", c->op, msg);
        return false;
    }
    const kf_shape *ts = &c->shapes[c->target];
    uint32_t cols = ts->dims[ts->rank - 1];
    uint64_t tn = kf_shape_elements(ts), on = kf_shape_elements(&out_shape);
    uint32_t es = elem_size(c->dtype);
    kf_kernel *consumer = op_kernel(op, c->shapes, &c->params, c->dtype);
    kf_kernel *pro = make_prologue(c->kind, c->dtype, cols);
    kf_binding_info info;
    kf_kernel_binding_info(consumer, c->target, &info);
    char binding[64];
    snprintf(binding, sizeof binding, "%s", info.name);
    kf_kernel *fused = kf_kernel_prologue(consumer, binding, pro);
    char what[200];
    snprintf(what, sizeof what, "%s %s prologue on %s (%s, %s)", c->op, kf_kernel_name(pro),
             binding, c->dtype == KF_DTYPE_F16 ? "f16" : "f32", c->note);
    bool ok = kf_kernel_status(fused) == KF_OK;
    if (!ok) {
        kt_fail(__FILE__, __LINE__, "%s: %s", what, kf_kernel_error(fused));
    }
    /* the result's bindings: the consumer's, then the prologue's (b renamed on a clash), out */
    uint32_t nc = kf_kernel_binding_count(consumer), np = c->kind == PRO_SCALE ? 1u : 0u;
    ok = ok && kf_kernel_binding_count(fused) == nc + np;
    if (ok && np) {
        kf_binding_info pi;
        kf_kernel_binding_info(fused, nc - 1, &pi);
        bool clash = false;
        for (uint32_t i = 0; i + 1 < nc; i++) {
            kf_binding_info ci;
            kf_kernel_binding_info(consumer, i, &ci);
            clash |= !strcmp(ci.name, "b");
        }
        ok = !strcmp(pi.name, clash ? "b_1" : "b");
        if (!ok) {
            kt_fail(__FILE__, __LINE__, "%s: the prologue's binding is '%s'", what, pi.name);
        }
    }

    void *in[3] = {NULL, NULL, NULL};
    for (uint32_t i = 0; i < c->inputs; i++) {
        in[i] = rand_data(kf_shape_elements(&c->shapes[i]), c->dtype, -2.0f, 2.0f);
    }
    void *m = rand_data(cols, c->dtype, -1.5f, 1.5f);
    void *staged = malloc(tn * es);
    void *outs[2][2]; /* [fused][device] */
    for (int f = 0; f < 2; f++) {
        for (int d = 0; d < 2; d++) {
            outs[f][d] = malloc(on * es);
        }
    }
    for (int d = 0; d < 2 && ok; d++) {
        kf_context *on_ctx = d ? ctx : NULL;
        /* unfused: the prologue over the operand, then the op on what it wrote */
        kf_host_buffer sb[3] = {{in[c->target], tn * es}, {m, (uint64_t)cols * es}, {0}};
        sb[1 + np] = (kf_host_buffer){staged, tn * es};
        kt_fill_poison(staged, tn * es);
        ok = run_kernel(on_ctx, pro, sb, 2 + np, tn);
        kf_host_buffer ub[4];
        for (uint32_t i = 0; i < c->inputs; i++) {
            uint64_t bytes = kf_shape_elements(&c->shapes[i]) * es;
            ub[i] = (kf_host_buffer){i == c->target ? staged : in[i], bytes};
        }
        ub[c->inputs] = (kf_host_buffer){outs[0][d], on * es};
        kt_fill_poison(outs[0][d], on * es);
        ok = ok && run_kernel(on_ctx, consumer, ub, c->inputs + 1, 0);
        /* fused: the op reading the raw operand, the prologue's row after its own bindings */
        kf_host_buffer fb[5];
        for (uint32_t i = 0; i < c->inputs; i++) {
            fb[i] = (kf_host_buffer){in[i], kf_shape_elements(&c->shapes[i]) * es};
        }
        if (np) {
            fb[c->inputs] = (kf_host_buffer){m, (uint64_t)cols * es};
        }
        fb[c->inputs + np] = (kf_host_buffer){outs[1][d], on * es};
        kt_fill_poison(outs[1][d], on * es);
        ok = ok && run_kernel(on_ctx, fused, fb, c->inputs + np + 1, 0);
        char w[300];
        snprintf(w, sizeof w, "%s: unfused, %s", what, d ? "GPU" : "interpreter");
        ok = ok && all_finite(outs[0][d], on, c->dtype, w);
        snprintf(w, sizeof w, "%s: fused against unfused, %s", what, d ? "GPU" : "interpreter");
        if (d == 0) {
            ok = ok && same_out(outs[1][0], outs[0][0], on, c->dtype, w);
        } else {
            /* two compilations may contract a * b + c differently */
            double tol = c->dtype == KF_DTYPE_F16 ? 4e-3 : 1e-5;
            ok = ok && close_out(outs[1][1], outs[0][1], on, c->dtype, tol, w);
            snprintf(w, sizeof w, "%s: fused, GPU against interpreter", what);
            ok = ok && close_out(outs[1][1], outs[1][0], on, c->dtype, 2 * tol, w);
        }
    }
    for (int f = 0; f < 2; f++) {
        for (int d = 0; d < 2; d++) {
            free(outs[f][d]);
        }
    }
    for (uint32_t i = 0; i < 3; i++) {
        free(in[i]);
    }
    free(m);
    free(staged);
    kf_kernel_destroy(consumer);
    kf_kernel_destroy(pro);
    kf_kernel_destroy(fused);
    return ok;
}

#define S2(r, c) kf_shape_2d(r, c)
#define F32 KF_DTYPE_F32
#define F16 KF_DTYPE_F16

static const kf_op_params P0 = {0};

KT_TEST(unit, prologue_matmul_matches_unfused) {
    KT_NEED_GPU(ctx);
    kf_op_params ta = {.transpose_a = true};
    const pro_case cases[] = {
        {"matmul", P0, 2, {S2(37, 53), S2(53, 29)}, 0, PRO_GELU, F32, "tiled"},
        {"matmul", P0, 2, {S2(37, 53), S2(53, 29)}, 1, PRO_SCALE, F32, "tiled, b"},
        {"matmul", ta, 2, {S2(53, 37), S2(53, 29)}, 0, PRO_SCALE, F32, "tiled, a transposed"},
        {"matmul", P0, 2, {S2(65, 67), S2(67, 67)}, 0, PRO_SCALE, F32, "blocked, scalar loads"},
        {"matmul", P0, 2, {S2(65, 67), S2(67, 67)}, 1, PRO_GELU, F32, "blocked, scalar loads"},
        {"matmul", P0, 2, {S2(65, 68), S2(68, 64)}, 0, PRO_SCALE, F32, "blocked, vec4 loads"},
        {"matmul", P0, 2, {S2(65, 68), S2(68, 64)}, 1, PRO_SCALE, F32, "blocked, vec4 loads"},
        {"matmul", P0, 2, {S2(1, 1), S2(1, 7)}, 0, PRO_GELU, F32, "1x1"},
        {"matmul", P0, 2, {S2(37, 53), S2(53, 29)}, 0, PRO_GELU, F16, "tiled"},
        {"matmul", P0, 2, {S2(37, 53), S2(53, 29)}, 1, PRO_SCALE, F16, "tiled, b"},
        {"matmul", P0, 2, {S2(65, 68), S2(68, 64)}, 0, PRO_GELU, F16, "blocked, vec4 loads"},
        {"matmul", P0, 2, {S2(65, 68), S2(68, 64)}, 1, PRO_SCALE, F16, "blocked, vec4 loads"},
        {"matmul", P0, 2, {S2(65, 67), S2(67, 67)}, 0, PRO_SCALE, F16, "blocked, scalar loads"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        KT_CHECK(run_case(ctx, &cases[i]), "case %zu (%s)", i, cases[i].note);
    }
}

KT_TEST(unit, prologue_row_reductions_match_unfused) {
    KT_NEED_GPU(ctx);
    kf_op_params w = {.has_weight = true, .eps = 1e-5f};
    kf_op_params wb = {.has_weight = true, .has_bias = true, .eps = 1e-5f};
    const pro_case cases[] = {
        {"softmax", P0, 1, {S2(13, 37)}, 0, PRO_SCALE, F32, "scalar registers"},
        {"softmax", P0, 1, {S2(13, 100)}, 0, PRO_SCALE, F32, "vec4 registers"},
        {"softmax", P0, 1, {S2(3, 8200)}, 0, PRO_GELU, F32, "past the registers"},
        {"softmax", P0, 1, {S2(1, 1)}, 0, PRO_SCALE, F32, "1x1"},
        {"softmax", P0, 1, {S2(13, 100)}, 0, PRO_SCALE, F16, "vec4 registers"},
        {"rmsnorm", w, 2, {S2(13, 37), kf_shape_1d(37)}, 0, PRO_GELU, F32, "scalar registers"},
        {"rmsnorm", w, 2, {S2(7, 100), kf_shape_1d(100)}, 1, PRO_SCALE, F32, "on the weight"},
        {"rmsnorm", w, 2, {S2(7, 100), kf_shape_1d(100)}, 0, PRO_SCALE, F32, "vec4 registers"},
        {"layernorm",
         wb,
         3,
         {S2(13, 100), kf_shape_1d(100), kf_shape_1d(100)},
         0,
         PRO_SCALE,
         F32,
         "vec4 registers"},
        {"layernorm",
         wb,
         3,
         {S2(11, 37), kf_shape_1d(37), kf_shape_1d(37)},
         0,
         PRO_GELU,
         F32,
         "scalar registers"},
        {"layernorm", P0, 1, {S2(3, 4099)}, 0, PRO_SCALE, F32, "past the registers"},
        {"layernorm",
         wb,
         3,
         {S2(13, 100), kf_shape_1d(100), kf_shape_1d(100)},
         0,
         PRO_GELU,
         F16,
         "vec4 registers"},
        {"sum", P0, 1, {S2(13, 37)}, 0, PRO_GELU, F32, "prime rows"},
        {"sum", P0, 1, {S2(5, 100)}, 0, PRO_SCALE, F32, "cols % 4 == 0"},
        {"sum", P0, 1, {S2(5, 100)}, 0, PRO_SCALE, F16, "cols % 4 == 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        KT_CHECK(run_case(ctx, &cases[i]), "case %zu (%s %s)", i, cases[i].op, cases[i].note);
    }
}

/* ---- laws ---- */

static char *wgsl_body(kf_kernel *k) {
    char *w = kf_kernel_emit_wgsl(k);
    if (!w) {
        return NULL;
    }
    char *nl = strchr(w, '\n'); /* the first line names the kernel */
    char *body = strdup(nl ? nl : w);
    kf_free(w);
    return body;
}

static kf_kernel *matmul_kernel(uint32_t m, uint32_t k, uint32_t n) {
    kf_shape s[2] = {S2(m, k), S2(k, n)};
    return op_kernel(kf_op_find("matmul"), s, &P0, F32);
}

KT_CPU_TEST(unit, prologue_identity_gives_the_consumer_back) {
    const uint32_t shapes[][3] = {{37, 53, 29}, {65, 68, 64}, {65, 67, 67}};
    kf_kernel *id = kf_kernel_identity(kf_type_scalar(KF_SCALAR_F32), NULL);
    for (size_t i = 0; i < 3; i++) {
        kf_kernel *mm = matmul_kernel(shapes[i][0], shapes[i][1], shapes[i][2]);
        for (int which = 0; which < 2; which++) {
            kf_kernel *r = kf_kernel_prologue(mm, which ? "b" : "a", id);
            char *a = wgsl_body(mm), *b = wgsl_body(r);
            bool same = a && b && !strcmp(a, b);
            free(a);
            free(b);
            kf_kernel_destroy(r);
            KT_CHECK(same, "identity prologue on %s of %ux%ux%u changes the WGSL",
                     which ? "b" : "a", shapes[i][0], shapes[i][1], shapes[i][2]);
        }
        kf_kernel_destroy(mm);
    }
    kf_kernel_destroy(id);
}

/* An epilogue adding bias[index % n], in the consumer's workgroup size (kf_kernel_then's rule). */
static kf_kernel *bias_stage(const kf_kernel *consumer, uint32_t n) {
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_kernel_desc desc = {.name = "bias", .input = f32, .output = f32};
    kf_kernel_workgroup_size(consumer, desc.workgroup_size);
    kf_kernel *k = kf_kernel_create(&desc);
    kf_binding bias = kf_kernel_storage(k, "bias", f32, KF_ACCESS_READ);
    kf_val idx = kf_kernel_index(k);
    kf_val bv = kf_load(k, bias, kf_binary(k, KF_OP_MOD, idx, kf_lit_u32(k, n)));
    kf_kernel_yield(k, kf_add(k, kf_kernel_input(k), bv), idx);
    return k;
}

KT_CPU_TEST(unit, prologue_commutes_with_epilogue_and_composes) {
    const uint32_t m = 65, kk = 68, n = 64;
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_kernel *mm = matmul_kernel(m, kk, n);
    kf_kernel *scale = make_prologue(PRO_SCALE, F32, kk); /* binding b: renamed b_1 */
    kf_kernel *gelu = make_prologue(PRO_GELU, F32, kk);
    kf_kernel *bias = bias_stage(mm, n);
    kf_kernel *relu = kf_kernel_map("relu", f32, f32, NULL, kf__example_relu, NULL);
    /* (p into a) |> e  ==  p into (a |> e), for an epilogue with a binding of its own */
    kf_kernel *mb = kf_kernel_then(mm, bias);
    kf_kernel *left = kf_kernel_prologue(mb, "a", scale);
    kf_kernel *pa = kf_kernel_prologue(mm, "a", scale);
    kf_kernel *right = kf_kernel_then(pa, bias);
    /* q into (p into a) == (q |> p) into a */
    kf_kernel *twice = kf_kernel_prologue(pa, "a", gelu);
    kf_kernel *gs = kf_kernel_then(gelu, scale);
    kf_kernel *once = kf_kernel_prologue(mm, "a", gs);
    kf_kernel *relu_once = kf_kernel_prologue(mm, "b", relu);
    kf_kernel *relu_twice = kf_kernel_prologue(relu_once, "b", relu);
    kf_kernel *ks[] = {mb, left, pa, right, twice, gs, once, relu_once, relu_twice};
    bool ok = true;
    for (size_t i = 0; i < sizeof ks / sizeof ks[0] && ok; i++) {
        ok = kf_kernel_status(ks[i]) == KF_OK;
        if (!ok) {
            kt_fail(__FILE__, __LINE__, "%s: %s", kf_kernel_name(ks[i]), kf_kernel_error(ks[i]));
        }
    }
    /* bindings: left a, b, bias, b_1, out; right a, b, b_1, bias, out */
    kf_binding_info li = {0}, ri = {0};
    kf_kernel_binding_info(left, 3, &li);
    kf_kernel_binding_info(right, 3, &ri);
    if (ok && (!li.name || strcmp(li.name, "b_1") || !ri.name || strcmp(ri.name, "bias"))) {
        kt_fail(__FILE__, __LINE__, "bindings 3: left %s, right %s", li.name, ri.name);
        ok = false;
    }
    uint64_t an = (uint64_t)m * kk, bn = (uint64_t)kk * n, on = (uint64_t)m * n;
    float *a = malloc(an * 4), *b = malloc(bn * 4), *row = malloc(kk * 4), *bv = malloc(n * 4);
    float *o1 = malloc(on * 4), *o2 = malloc(on * 4);
    kt_fill_f32(a, an, -2, 2);
    kt_fill_f32(b, bn, -2, 2);
    kt_fill_f32(row, kk, -1, 1);
    kt_fill_f32(bv, n, -1, 1);
    kf_host_buffer bl[5] = {{a, an * 4}, {b, bn * 4}, {bv, n * 4}, {row, kk * 4}, {o1, on * 4}};
    kf_host_buffer br[5] = {{a, an * 4}, {b, bn * 4}, {row, kk * 4}, {bv, n * 4}, {o2, on * 4}};
    kt_fill_poison(o1, on * 4);
    kt_fill_poison(o2, on * 4);
    ok = ok && run_kernel(NULL, left, bl, 5, 0) && run_kernel(NULL, right, br, 5, 0) &&
         all_finite(o1, on, F32, "(p into a) |> bias") &&
         kt_equal_u32((uint32_t *)o1, (uint32_t *)o2, on, "(p into a) |> e == p into (a |> e)");
    /* twice and once: a, b, the scale's row, out */
    kf_host_buffer b3[4] = {{a, an * 4}, {b, bn * 4}, {row, kk * 4}, {o1, on * 4}};
    kf_host_buffer b4[4] = {{a, an * 4}, {b, bn * 4}, {row, kk * 4}, {o2, on * 4}};
    kt_fill_poison(o1, on * 4);
    kt_fill_poison(o2, on * 4);
    ok = ok && run_kernel(NULL, twice, b3, 4, 0) && run_kernel(NULL, once, b4, 4, 0) &&
         all_finite(o1, on, F32, "q into (p into a)") &&
         kt_equal_u32((uint32_t *)o1, (uint32_t *)o2, on, "q into (p into a) == (q |> p) into a");
    kf_host_buffer b5[3] = {{a, an * 4}, {b, bn * 4}, {o1, on * 4}};
    kf_host_buffer b6[3] = {{a, an * 4}, {b, bn * 4}, {o2, on * 4}};
    kt_fill_poison(o1, on * 4);
    kt_fill_poison(o2, on * 4);
    ok = ok && run_kernel(NULL, relu_twice, b5, 3, 0) && run_kernel(NULL, relu_once, b6, 3, 0) &&
         all_finite(o1, on, F32, "relu into (relu into b)") &&
         kt_equal_u32((uint32_t *)o1, (uint32_t *)o2, on, "relu twice == relu once (idempotent)");
    free(a);
    free(b);
    free(row);
    free(bv);
    free(o1);
    free(o2);
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        kf_kernel_destroy(ks[i]);
    }
    kf_kernel_destroy(mm);
    kf_kernel_destroy(scale);
    kf_kernel_destroy(gelu);
    kf_kernel_destroy(bias);
    kf_kernel_destroy(relu);
    KT_CHECK(ok, "laws");
}

/* The subgroup-matrix f16 matmul (interpreter: lavapipe has no subgroup matrices): an operand
 * staged through workgroup memory takes a prologue, bit for bit as unfused; one its matrices are
 * loaded from straight out of storage is refused, never miscompiled. */
KT_CPU_TEST(unit, prologue_subgroup_matrix_matmul) {
    const uint32_t m = 64, kk = 64, n = 64, sg = 32;
    const kf__sgmat_config staged = {64, 64, 32, 2, 2, 2, 0, 2,
                                     0,  0,  0,  0, 0, 0, 0}; /* a staged, b direct */
    kf_kernel *mm = kf__matmul_sgmat(m, kk, n, &staged, sg);
    kf_kernel *pro = make_prologue(PRO_SCALE, F16, kk);
    kf_kernel *fused = kf_kernel_prologue(mm, "a", pro);
    kf_kernel *refused = kf_kernel_prologue(mm, "b", pro);
    bool ok = kf_kernel_status(fused) == KF_OK;
    if (!ok) {
        kt_fail(__FILE__, __LINE__, "staged a: %s", kf_kernel_error(fused));
    }
    if (ok && (kf_kernel_status(refused) != KF_ERROR_UNSUPPORTED ||
               !strstr(kf_kernel_error(refused), "'b'") ||
               !strstr(kf_kernel_error(refused), "subgroup matri"))) {
        kt_fail(__FILE__, __LINE__, "direct b: %s: %s", kf_status_str(kf_kernel_status(refused)),
                kf_kernel_error(refused));
        ok = false;
    }
    uint64_t an = (uint64_t)m * kk, bn = (uint64_t)kk * n, on = (uint64_t)m * n;
    uint16_t *a = rand_data(an, F16, -2, 2), *b = rand_data(bn, F16, -2, 2);
    uint16_t *row = rand_data(kk, F16, -1, 1), *staged_a = malloc(an * 2);
    uint16_t *o1 = malloc(on * 2), *o2 = malloc(on * 2);
    kf_host_buffer sb[3] = {{a, an * 2}, {row, kk * 2}, {staged_a, an * 2}};
    kf_host_buffer ub[3] = {{staged_a, an * 2}, {b, bn * 2}, {o1, on * 2}};
    kf_host_buffer fb[4] = {{a, an * 2}, {b, bn * 2}, {row, kk * 2}, {o2, on * 2}};
    kt_launch stage = {.elements = an}, prod = {.subgroup_size = sg};
    kt_fill_poison(staged_a, an * 2);
    kt_fill_poison(o1, on * 2);
    kt_fill_poison(o2, on * 2);
    ok = ok && kt_ir_interp(pro, sb, 3, &stage) && kt_ir_interp(mm, ub, 3, &prod) &&
         kt_ir_interp(fused, fb, 4, &prod) && all_finite(o1, on, F16, "unfused") &&
         same_out(o2, o1, on, F16, "subgroup-matrix matmul, scale into a, against unfused");
    free(a);
    free(b);
    free(row);
    free(staged_a);
    free(o1);
    free(o2);
    kf_kernel_destroy(mm);
    kf_kernel_destroy(pro);
    kf_kernel_destroy(fused);
    kf_kernel_destroy(refused);
    KT_CHECK(ok, "subgroup-matrix matmul");
}

/* ---- refusals: the result's status says why, and the message names the culprit ---- */

static kf_kernel *stage_with(const char *name, int bad) {
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_kernel_desc desc = {.name = name, .input = f32, .output = f32};
    kf_kernel *k = kf_kernel_create(&desc);
    kf_val x = kf_kernel_input(k), idx = kf_kernel_index(k);
    switch (bad) {
    case 1: /* a builtin */
        x = kf_add(k, x, kf_cast(k, f32, kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX)));
        break;
    case 2: /* two yields */
        kf_kernel_yield(k, x, idx);
        break;
    case 3: /* a yield inside an if */
        kf_if(k, kf_binary(k, KF_OP_LT, idx, kf_lit_u32(k, 4)));
        kf_kernel_yield(k, x, idx);
        kf_end(k);
        return k;
    case 4: { /* a store */
        kf_binding w = kf_kernel_storage(k, "log", f32, KF_ACCESS_READ_WRITE);
        kf_store(k, w, idx, x);
        break;
    }
    case 5: /* yields at another index */
        kf_kernel_yield(k, x, kf_add(k, idx, kf_lit_u32(k, 1)));
        return k;
    default:
        break;
    }
    kf_kernel_yield(k, x, idx);
    return k;
}

static bool refused(kf_kernel *r, kf_status want, const char *needle) {
    bool ok = r && kf_kernel_status(r) == want && strstr(kf_kernel_error(r), needle);
    if (!ok) {
        kt_fail(__FILE__, __LINE__, "expected %s naming %s, got %s: %s", kf_status_str(want),
                needle, r ? kf_status_str(kf_kernel_status(r)) : "NULL",
                r ? kf_kernel_error(r) : "");
    }
    kf_kernel_destroy(r);
    return ok;
}

KT_CPU_TEST(unit, prologue_refusals) {
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32), f16 = kf_type_scalar(KF_SCALAR_F16);
    kf_kernel *mm = matmul_kernel(37, 53, 29);
    kf_kernel *ok_stage = stage_with("fine", 0);
    /* a consumer with a read_write binding, a uniform, and one loaded into subgroup matrices */
    kf_kernel_desc cd = {.name = "odd", .output = f32};
    kf_kernel *odd = kf_kernel_create(&cd);
    kf_binding acc = kf_kernel_storage(odd, "acc", f32, KF_ACCESS_READ_WRITE);
    kf_binding u = kf_kernel_uniform(odd, "params", kf_type_vec(KF_SCALAR_F32, 4));
    kf_binding tiles = kf_kernel_storage(odd, "tiles", f16, KF_ACCESS_READ);
    kf_val i0 = kf_lit_u32(odd, 0);
    kf_sgmat lm = kf_sgmat_declare(odd, "lm", KF_SGMAT_LEFT, KF_SCALAR_F16, 16, 16);
    kf_sgmat_load_storage(odd, lm, tiles, i0, false, kf_lit_u32(odd, 16));
    kf_val v = kf_add(odd, kf_load(odd, acc, i0), kf_extract(odd, kf_load(odd, u, (kf_val){0}), 0));
    kf_kernel_yield(odd, v, i0);
    KT_CHECK(kf_kernel_status(odd) == KF_OK, "%s", kf_kernel_error(odd));
    kf_kernel *stage = kf_kernel_identity(f32, NULL);
    kf_kernel *half = kf_kernel_identity(f16, NULL);
    kf_kernel *producer = matmul_kernel(4, 4, 4);
    kf_kernel *bads[5];
    for (int i = 0; i < 5; i++) {
        bads[i] = stage_with("bad", i + 1);
    }
    bool ok =
        refused(kf_kernel_prologue(mm, "nope", ok_stage), KF_ERROR_INVALID_ARGUMENT, "'nope'") &&
        refused(kf_kernel_prologue(stage, "in", ok_stage), KF_ERROR_INVALID_ARGUMENT,
                "kf_kernel_then") &&
        refused(kf_kernel_prologue(odd, "acc", ok_stage), KF_ERROR_TYPE, "read_write") &&
        refused(kf_kernel_prologue(odd, "params", ok_stage), KF_ERROR_TYPE, "uniform") &&
        refused(kf_kernel_prologue(odd, "tiles", half), KF_ERROR_UNSUPPORTED, "'tiles'") &&
        refused(kf_kernel_prologue(mm, "a", producer), KF_ERROR_TYPE, "not a stage") &&
        refused(kf_kernel_prologue(mm, "a", bads[0]), KF_ERROR_TYPE, "builtins") &&
        refused(kf_kernel_prologue(mm, "a", bads[1]), KF_ERROR_TYPE, "2 time") &&
        refused(kf_kernel_prologue(mm, "a", bads[2]), KF_ERROR_TYPE, "outside any if") &&
        refused(kf_kernel_prologue(mm, "a", bads[3]), KF_ERROR_TYPE, "stores") &&
        refused(kf_kernel_prologue(mm, "a", bads[4]), KF_ERROR_TYPE, "own index") &&
        refused(kf_kernel_prologue(mm, "a", half), KF_ERROR_TYPE, "yields f16") &&
        refused(kf_kernel_prologue(NULL, "a", half), KF_ERROR_INVALID_ARGUMENT, "NULL") &&
        refused(kf_kernel_prologue(mm, NULL, half), KF_ERROR_INVALID_ARGUMENT, "NULL");
    /* an invalid input passes its error on */
    kf_kernel *broken = stage_with("broken", 0);
    kf_add(broken, kf_kernel_input(broken), kf_lit_u32(broken, 1));
    ok = ok && refused(kf_kernel_prologue(mm, "a", broken), KF_ERROR_TYPE, "'broken'");
    kf_kernel_destroy(broken);
    for (int i = 0; i < 5; i++) {
        kf_kernel_destroy(bads[i]);
    }
    kf_kernel_destroy(mm);
    kf_kernel_destroy(ok_stage);
    kf_kernel_destroy(odd);
    kf_kernel_destroy(stage);
    kf_kernel_destroy(half);
    kf_kernel_destroy(producer);
    KT_CHECK(ok, "refusals");
}
