/* The in-bounds proof (src/ir/bounds.c) and its guards: what is proved, what is guarded and how
 * the guard is written, the launch checks that keep the proof's assumptions true, every
 * operator's kernels proved in bounds for their verification shapes (by op class), and a
 * guarded kernel run on the GPU with robustness off. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ops/matmul_blocked.h"
#include "ops/matmul_sgmat.h"
#include "ops/operator.h"
#include "ops/ops_internal.h"

static kf_type u32t(void) {
    return kf_type_scalar(KF_SCALAR_U32);
}

static kf_type f32t(void) {
    return kf_type_scalar(KF_SCALAR_F32);
}

/* y[i] = x[i] for i < n (proved against declared lengths), x[ids[i]] (data-dependent: guarded),
 * and z[i + 1] past the end of z (guarded: skipped). */
static kf_kernel *mixed(uint32_t n) {
    kf_kernel_desc d = {0};
    d.name = "mixed";
    d.workgroup_size[0] = 64;
    kf_kernel *k = kf_kernel_create(&d);
    kf_binding x = kf_kernel_storage(k, "x", f32t(), KF_ACCESS_READ);
    kf_binding ids = kf_kernel_storage(k, "ids", u32t(), KF_ACCESS_READ);
    kf_binding y = kf_kernel_storage(k, "y", f32t(), KF_ACCESS_READ_WRITE);
    kf_binding z = kf_kernel_storage(k, "z", f32t(), KF_ACCESS_READ_WRITE);
    kf_val i = kf_let(k, "i", kf_global_linear(k));
    kf_if(k, kf_binary(k, KF_OP_LT, i, kf_lit_u32(k, n)));
    kf_val id = kf_load(k, ids, i);
    kf_store(k, y, i, kf_add(k, kf_load(k, x, i), kf_load(k, x, id)));
    kf_store(k, z, kf_add(k, i, kf_lit_u32(k, 1)), kf_load(k, x, i));
    kf_end(k);
    uint32_t grid[3] = {(n + 63) / 64, 1, 1};
    kf_kernel_set_grid(k, grid);
    for (uint32_t b = 0; b < 4; b++) {
        kf_kernel_set_binding_length(k, b, n);
    }
    return k;
}

KT_CPU_TEST(unit, bounds_proves_what_it_can_and_guards_the_rest) {
    kf_kernel *k = mixed(100);
    kf_bounds_report r;
    char *text = NULL;
    KT_CHECK_OK(kf_kernel_bounds(k, &r, &text));
    /* loads x[i] (twice: one let), ids[i], x[id]; stores y[i], z[i + 1] */
    KT_CHECK(r.accesses == r.proved + r.guarded, "counts %u %u %u", r.accesses, r.proved,
             r.guarded);
    KT_CHECK(r.guarded == 2, "guarded %u (want x[id] and z[i + 1])\n%s", r.guarded, text);
    KT_CHECK(strstr(text, "load 'x': guarded: index in [0, 4294967295]"), "%s", text);
    KT_CHECK(strstr(text, "store 'z': guarded: index in [1, 100], 100 elements"), "%s", text);
    KT_CHECK(strstr(text, "store 'y': proved: index in [0, 99], 100 elements"), "%s", text);
    kf_free(text);
    char *wgsl = kf_kernel_emit_wgsl(k);
    KT_CHECK(wgsl, "%s", kf_kernel_error(k));
    /* the guarded load is clamped, the guarded store skipped, the proved ones left alone */
    KT_CHECK(strstr(wgsl, "x[min(ids_v, arrayLength(&x) - 1u)]"), "%s", wgsl);
    KT_CHECK(strstr(wgsl, "if (i + 1u < arrayLength(&z)) {"), "%s", wgsl);
    KT_CHECK(strstr(wgsl, "y[i] = "), "%s", wgsl);
    KT_CHECK(strstr(wgsl, "ids[i]"), "%s", wgsl);
    kf_free(wgsl);
    kf_kernel_destroy(k);
}

KT_CPU_TEST(unit, bounds_uses_guards_lengths_and_workgroup_sizes) {
    /* if (i < arrayLength(&x)) x[i] needs no declared length; a workgroup array indexed by the
     * local index is proved by the workgroup size, and past it guarded */
    kf_kernel_desc d = {0};
    d.name = "sym";
    d.workgroup_size[0] = 32;
    kf_kernel *k = kf_kernel_create(&d);
    kf_binding x = kf_kernel_storage(k, "x", f32t(), KF_ACCESS_READ_WRITE);
    kf_shared t = kf_kernel_workgroup(k, "t", f32t(), 32);
    kf_val li = kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX);
    kf_val i = kf_let(k, "i", kf_global_linear(k));
    kf_shared_store(k, t, li, kf_lit_f32(k, 1.0f));
    kf_shared_store(k, t, kf_add(k, li, kf_lit_u32(k, 1)), kf_lit_f32(k, 2.0f));
    kf_if(k, kf_binary(k, KF_OP_LT, i, kf_binding_length(k, x)));
    kf_store(k, x, i, kf_shared_load(k, t, li));
    kf_end(k);
    kf_bounds_report r;
    char *text = NULL;
    KT_CHECK_OK(kf_kernel_bounds(k, &r, &text));
    KT_CHECK(r.accesses == 4 && r.proved == 3 && r.guarded == 1, "%u %u %u\n%s", r.accesses,
             r.proved, r.guarded, text);
    KT_CHECK(strstr(text, "workgroup store 't': guarded: index in [1, 32], 32 elements"), "%s",
             text);
    kf_free(text);
    char *wgsl = kf_kernel_emit_wgsl(k);
    KT_CHECK(wgsl && strstr(wgsl, "if (local_index + 1u < 32u) {"), "%s", wgsl);
    kf_free(wgsl);
    kf_kernel_destroy(k);
}

KT_CPU_TEST(unit, bounds_declared_lengths_are_checked_at_launch) {
    kf_kernel *k = mixed(10);
    float x[10] = {0}, y[10], z[10];
    uint32_t ids[10] = {0};
    kf_host_buffer bufs[4] = {{x, sizeof x}, {ids, sizeof ids}, {y, sizeof y}, {z, 4 * 9}};
    kf_interp_desc d = {0};
    d.buffers = bufs;
    d.buffer_count = 4;
    KT_CHECK(kf_kernel_interpret(k, &d) == KF_ERROR_INVALID_ARGUMENT, "a short buffer ran");
    KT_CHECK(strstr(kf_kernel_error(k), "buffer 3 ('z') holds 9 elements; the kernel is proved "
                                        "in bounds for 10"),
             "%s", kf_kernel_error(k));
    KT_CHECK(kf_kernel_set_binding_length(k, 4, 1) == KF_ERROR_INVALID_ARGUMENT, "binding 4");
    KT_CHECK(strstr(kf_kernel_error(k), "binding 4 does not exist (the kernel has 4)"), "%s",
             kf_kernel_error(k));
    kf_kernel_destroy(k);
}

/* ---- every operator's kernels ---- */

typedef struct class_tally {
    uint32_t kernels, accesses, proved, guarded;
} class_tally;

/* Lengths of a backward kernel: inputs, out, grad_out (out's shape), grad_in (input which's). */
static void backward_lengths(kf_kernel *k, const kf_operator *op, const kf_shape *in,
                             uint32_t arity, const kf_shape *out, uint32_t which, kf_dtype dtype) {
    for (uint32_t i = 0; i < arity + 3; i++) {
        kf_binding_info info;
        if (kf_kernel_binding_info(k, i, &info) != KF_OK) {
            return;
        }
        const kf_shape *s = i < arity ? &in[i] : (i < arity + 2 ? out : &in[which]);
        kf_dtype stored = i < arity ? kf__op_input_dtype(op, i, dtype) : dtype;
        uint64_t bytes = kf_shape_elements(s) * kf_dtype_size(stored);
        uint64_t stride = (info.elem.scalar == KF_SCALAR_F16 ? 2u : 4u) *
                          (info.elem.lanes == 3 ? 4u : (info.elem.lanes ? info.elem.lanes : 1u));
        kf_kernel_set_binding_length(k, i, bytes / stride);
    }
}

/* Counts a kernel's accesses into t; `strict`: a guarded one is a failure (forward kernels),
 * else it is printed (backward kernels: rmsnorm's weight gradient walks rows in chunks of
 * min(256, rows - start), a bound relating two values that intervals cannot express). */
static bool tally(kf_kernel *k, class_tally *t, const char *what, bool strict) {
    kf_bounds_report r;
    char *text = NULL;
    if (!k || kf_kernel_bounds(k, &r, &text) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "%s: %s", what, k ? kf_kernel_error(k) : "no kernel");
        return false;
    }
    t->kernels++;
    t->accesses += r.accesses;
    t->proved += r.proved;
    t->guarded += r.guarded;
    bool ok = r.accesses == r.proved + r.guarded;
    if (r.guarded && !strict) {
        printf("    %s: %u of %u accesses guarded\n", what, r.guarded, r.accesses);
    } else if (r.guarded) {
        kt_fail(__FILE__, __LINE__, "%s: %u of %u accesses not proved in bounds:\n%s", what,
                r.guarded, r.accesses, text ? text : "");
        ok = false;
    }
    kf_free(text);
    return ok;
}

/* Every forward kernel of every operator (f32 and f16, every shape of its verification table)
 * and the matmul variants a device may pick are proved in bounds: nothing guarded. Backward
 * kernels and backward operators are proved or guarded (the few guarded accesses are printed). */
KT_CPU_TEST(unit, bounds_every_operator_kernel_is_proved_in_bounds) {
    class_tally classes[KF_OP_CLASS_LAYOUT + 1];
    memset(classes, 0, sizeof classes);
    static const char *const names[] = {"", "element-wise", "matmul", "row reduction", "layout"};
    uint32_t failures = 0;
    for (uint32_t o = 0; o < kf_op_count() && failures < 5; o++) {
        const kf_operator *op = kf_op_at(o);
        class_tally *t = &classes[op->op_class <= KF_OP_CLASS_LAYOUT ? op->op_class : 0];
        for (uint32_t c = 0; c < op->case_count && failures < 5; c++) {
            const kf_op_case *cs = &op->cases[c];
            kf_shape out;
            if (!op->kernel_forward || kf_op_shape(op, cs->shapes, &cs->params, &out, NULL, 0)) {
                continue;
            }
            for (int half = 0; half < 2; half++) {
                kf_dtype dt = half ? KF_DTYPE_F16 : KF_DTYPE_F32;
                char what[128], sh[32];
                snprintf(what, sizeof what, "%s %s %s", op->name,
                         kf_shape_str(&cs->shapes[0], sh, sizeof sh), half ? "f16" : "f32");
                kf_kernel *k = op->kernel_forward(cs->shapes, &cs->params, dt);
                if (k && kf__op_kernel_lengths(k, op, cs->shapes, &cs->params, dt) != KF_OK) {
                    kt_fail(__FILE__, __LINE__, "%s: bindings are not inputs then out", what);
                    failures++;
                }
                failures += tally(k, t, what, !op->grad_of) ? 0 : 1;
                kf_kernel_destroy(k);
                uint32_t arity = kf_op_arity(op, &cs->params);
                for (uint32_t w = 0; op->kernel_backward && w < arity; w++) {
                    if ((op->index_inputs >> w) & 1u) {
                        continue;
                    }
                    kf_kernel *b = op->kernel_backward(cs->shapes, &cs->params, dt, w);
                    if (!b) {
                        continue;
                    }
                    backward_lengths(b, op, cs->shapes, arity, &out, w, dt);
                    char bw[160];
                    snprintf(bw, sizeof bw, "%s backward %u", what, w);
                    failures += tally(b, t, bw, false) ? 0 : 1;
                    kf_kernel_destroy(b);
                }
            }
        }
    }
    /* the matmul kernels kernel_choose picks on a device: register-blocked and subgroup-matrix */
    static const uint32_t mm[][3] = {{1, 1, 1},      {17, 33, 65},       {64, 64, 64},
                                     {128, 96, 257}, {4095, 4093, 4097}, {4096, 4096, 4096},
                                     {130, 36, 68}};
    for (uint32_t i = 0; i < sizeof mm / sizeof mm[0]; i++) {
        uint32_t m = mm[i][0], kd = mm[i][1], n = mm[i][2];
        /* the blocked kernel's edge path and raster order too (unguarded loads in whole K
         * steps, clamped rows and columns, tile indices clamped to the grid) */
        const kf__mm_config edge = {128, 128, 16, 8, 8, 1, 0, 1},
                            raster = {64, 64, 8, 8, 4, 2, 3, 1};
        kf_kernel *ks[5] = {
            kf__matmul_blocked(m, kd, n, kf__mm_default_config(m, kd, n)),
            kf__matmul_sgmat(m, kd, n, NULL, 32),
            kf__matmul_sgmat(m, kd, n, kf__sgmat_default_config(m, kd, n, true), 32),
            kf__matmul_blocked(m, kd, n, &edge), kf__matmul_blocked(m, kd, n, &raster)};
        for (int v = 0; v < 5; v++) {
            if (!ks[v]) {
                continue;
            }
            for (uint32_t b = 0; b < 3; b++) {
                kf_binding_info info;
                kf_kernel_binding_info(ks[v], b, &info);
                uint64_t elems =
                    b == 0 ? (uint64_t)m * kd : (b == 1 ? (uint64_t)kd * n : (uint64_t)m * n);
                uint32_t lanes = info.elem.lanes > 1 ? info.elem.lanes : 1;
                kf_kernel_set_binding_length(ks[v], b, elems / lanes);
            }
            char what[96];
            snprintf(what, sizeof what, "%s %ux%ux%u", kf_kernel_name(ks[v]), m, kd, n);
            failures += tally(ks[v], &classes[KF_OP_CLASS_MATMUL], what, true) ? 0 : 1;
            kf_kernel_destroy(ks[v]);
        }
    }
    for (int c = 1; c <= KF_OP_CLASS_LAYOUT; c++) {
        printf("    %-14s %4u kernels, %6u accesses: %6u proved, %u guarded\n", names[c],
               classes[c].kernels, classes[c].accesses, classes[c].proved, classes[c].guarded);
        KT_CHECK(classes[c].kernels > 0, "no %s kernel", names[c]);
    }
    KT_CHECK(failures == 0, "%u kernels not proved in bounds", failures);
}

/* A kernel with guarded accesses, on the GPU with robustness off (the default): the store past
 * z's end is skipped, the loads past x's end read its last element (clamped), and what the proof
 * showed in bounds is written as the interpreter would. */
KT_TEST(unit, bounds_guarded_store_is_skipped_on_the_gpu) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    enum { N = 300 };
    kf_kernel *k = mixed(N);
    float x[N], y[N], z[N + 1];
    uint32_t ids[N];
    for (uint32_t i = 0; i < N; i++) {
        x[i] = kt_rand_f32(-1, 1);
        ids[i] = (uint32_t)(kt_rand_u64() % (2 * N)); /* half of them past x's end: clamped */
    }
    kf_buffer *b[4] = {NULL, NULL, NULL, NULL};
    KT_CHECK_OK(kf_buffer_create(ctx, sizeof x, &b[0]));
    KT_CHECK_OK(kf_buffer_create(ctx, sizeof ids, &b[1]));
    KT_CHECK_OK(kf_buffer_create(ctx, sizeof y, &b[2]));
    KT_CHECK_OK(kf_buffer_create(ctx, sizeof x, &b[3]));
    KT_CHECK_OK(kf_buffer_upload(b[0], 0, x, sizeof x));
    KT_CHECK_OK(kf_buffer_upload(b[1], 0, ids, sizeof ids));
    KT_CHECK_OK(kf_buffer_fill_u32(b[2], 0x7fc00000u));
    KT_CHECK_OK(kf_buffer_fill_u32(b[3], 0x7fc00000u));
    kf_kernel_launch l = {0};
    l.buffers = b;
    l.buffer_count = 4;
    KT_CHECK(kf_kernel_run(ctx, k, &l) == KF_OK, "%s", kf_kernel_error(k));
    KT_CHECK_OK(kf_buffer_download(b[2], 0, y, sizeof y));
    KT_CHECK_OK(kf_buffer_download(b[3], 0, z, sizeof x));
    for (uint32_t i = 0; i < N; i++) {
        float want = x[i] + x[ids[i] < N ? ids[i] : N - 1];
        KT_CHECK(y[i] == want, "y[%u] = %g, want %g (robustness %s)", i, (double)y[i], (double)want,
                 info.unchecked_access ? "off" : "on");
        if (i > 0) {
            KT_CHECK(z[i] == x[i - 1], "z[%u] = %g, want %g", i, (double)z[i], (double)x[i - 1]);
        }
    }
    uint32_t z0;
    memcpy(&z0, &z[0], 4);
    KT_CHECK(z0 == 0x7fc00000u, "z[0] was written");
    for (int i = 0; i < 4; i++) {
        kf_buffer_destroy(b[i]);
    }
    kf_kernel_destroy(k);
}

/* Raw WGSL storing and loading past its binding's end: on a checked context (robustness on) each
 * is made safe, clamped into the buffer (the store lands on the last element, the load reads it)
 * or, where Dawn leaves it to Vulkan's robust buffer access, dropped (the load reads 0). */
static bool robust_past_the_end(kf_context *ctx, bool *robust) {
    static const char *wgsl =
        "@group(0) @binding(0) var<storage, read_write> y: array<u32>;\n"
        "@compute @workgroup_size(1)\n"
        "fn main() { y[arrayLength(&y) + 100u] = 7u; y[0] = y[arrayLength(&y) + 50u]; }\n";
    kf_binding_kind kind = KF_BINDING_STORAGE_READ_WRITE;
    kf_pipeline_desc pd = {0};
    pd.wgsl = wgsl;
    pd.bindings = &kind;
    pd.binding_count = 1;
    kf_pipeline *pipe = NULL;
    kf_buffer *buf = NULL;
    uint32_t y[8] = {1, 2, 3, 4, 5, 6, 70, 8};
    bool ok = kf_pipeline_get(ctx, &pd, &pipe) == KF_OK &&
              kf_buffer_create(ctx, sizeof y, &buf) == KF_OK &&
              kf_buffer_upload(buf, 0, y, sizeof y) == KF_OK;
    kf_dispatch d = {pipe, &buf, 1, {1, 1, 1}};
    ok = ok && kf_context_run(ctx, &d, 1) == KF_OK &&
         kf_buffer_download(buf, 0, y, sizeof y) == KF_OK;
    bool same = y[1] == 2 && y[2] == 3 && y[3] == 4 && y[4] == 5 && y[5] == 6 && y[6] == 70;
    *robust = same && ((y[7] == 7u && y[0] == 7u) || (y[7] == 8u && y[0] == 0u));
    kf_buffer_destroy(buf);
    return ok;
}

KT_TEST(unit, bounds_robustness_is_off_by_default_and_kf_checked_turns_it_on) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    const char *env = getenv("KF_CHECKED");
    bool env_checked = env && *env && strcmp(env, "0") != 0;
    KT_CHECK(info.unchecked_access == !env_checked, "the shared context: robustness %s",
             info.unchecked_access ? "off" : "on");
    kf_context_desc cd = {0};
    cd.checked_access = true;
    kf_context *checked = NULL;
    KT_CHECK_OK(kf_context_create(&cd, &checked));
    kf_adapter_info ci;
    kf_context_adapter_info(checked, &ci);
    bool robust = false;
    bool ran = robust_past_the_end(checked, &robust);
    kf_context_destroy(checked);
    KT_CHECK(!ci.unchecked_access, "checked_access left robustness off");
    KT_CHECK(ran && robust, "on a checked context an access past the end was not made safe");
    /* $KF_CHECKED=1 does what checked_access does */
    char *saved = env ? strdup(env) : NULL;
    setenv("KF_CHECKED", "1", 1);
    kf_context *by_env = NULL;
    kf_status st = kf_context_create(NULL, &by_env);
    if (saved) {
        setenv("KF_CHECKED", saved, 1);
        free(saved);
    } else {
        unsetenv("KF_CHECKED");
    }
    KT_CHECK_OK(st);
    kf_context_adapter_info(by_env, &ci);
    kf_context_destroy(by_env);
    KT_CHECK(!ci.unchecked_access, "KF_CHECKED=1 left robustness off");
}
