/* Subgroup matrices in the IR: the builder's checks, the WGSL they emit, and the interpreter's
 * semantics (a whole matrix per subgroup) against a float64 product. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "ops/matmul_sgmat.h"

/* c (f32, 16 x 16 per subgroup) = a (f16 storage, row-major) * b (f16 through workgroup memory,
 * column-major): two subgroups, each its own 16-row block of a. Accumulated twice (c = 2 a b);
 * with mul_last then multiplied afresh (kf_sgmat_mul: c = a b, the sum before it dropped). */
static kf_kernel *two_subgroup_product(bool mul_last) {
    kf_kernel_desc desc = {.name = "sgmat_product", .workgroup_size = {64, 1, 1}};
    kf_kernel *k = kf_kernel_create(&desc);
    kf_type h = kf_type_scalar(KF_SCALAR_F16), f = kf_type_scalar(KF_SCALAR_F32);
    kf_binding a = kf_kernel_storage(k, "a", h, KF_ACCESS_READ);
    kf_binding b = kf_kernel_storage(k, "b", h, KF_ACCESS_READ);
    kf_binding c = kf_kernel_storage(k, "c", f, KF_ACCESS_READ_WRITE);
    kf_shared bt = kf_kernel_workgroup(k, "bt", h, 256);
    kf_val local = kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX);
    /* b into workgroup memory transposed: bt[col * 16 + row] = b[row * 16 + col] */
    kf_val i = kf_for(k, "i", local, kf_lit_u32(k, 256), kf_lit_u32(k, 64));
    kf_val row = kf_div(k, i, kf_lit_u32(k, 16)),
           col = kf_binary(k, KF_OP_MOD, i, kf_lit_u32(k, 16));
    kf_shared_store(k, bt, kf_add(k, kf_mul(k, col, kf_lit_u32(k, 16)), row), kf_load(k, b, i));
    kf_end(k);
    kf_barrier(k);
    kf_val sg = kf_let(k, "sg", kf_div(k, local, kf_lit_u32(k, 32)));
    kf_sgmat acc = kf_sgmat_declare(k, "acc", KF_SGMAT_RESULT, KF_SCALAR_F32, 16, 16);
    kf_sgmat l = kf_sgmat_declare(k, "l", KF_SGMAT_LEFT, KF_SCALAR_F16, 16, 16);
    kf_sgmat r = kf_sgmat_declare(k, "r", KF_SGMAT_RIGHT, KF_SCALAR_F16, 16, 16);
    kf_sgmat_load_storage(k, l, a, kf_mul(k, sg, kf_lit_u32(k, 256)), false, kf_lit_u32(k, 16));
    kf_sgmat_load(k, r, bt, kf_lit_u32(k, 0), true, kf_lit_u32(k, 16));
    kf_sgmat_mma(k, acc, l, r);
    kf_sgmat_mma(k, acc, l, r); /* twice: acc = 2 a b */
    if (mul_last) {
        kf_sgmat_mul(k, acc, l, r);
    }
    kf_sgmat_store_storage(k, c, kf_mul(k, sg, kf_lit_u32(k, 256)), acc, false, kf_lit_u32(k, 16));
    return k;
}

KT_CPU_TEST(unit, ir_sgmat_wgsl) {
    kf_kernel *k = two_subgroup_product(true);
    KT_CHECK(kf_kernel_status(k) == KF_OK, "%s", kf_kernel_error(k));
    char *w = kf_kernel_emit_wgsl(k);
    KT_CHECK(w != NULL, "no WGSL: %s", kf_kernel_error(k));
    const char *want[] = {
        "enable f16;\nenable subgroups;\nenable chromium_experimental_subgroup_matrix;\n"
        "diagnostic(off, chromium.subgroup_matrix_uniformity);\n",
        "var acc: subgroup_matrix_result<f32, 16, 16>;\n",
        "var l: subgroup_matrix_left<f16, 16, 16>;\n",
        "var r: subgroup_matrix_right<f16, 16, 16>;\n",
        "l = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(&a, ",
        "r = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>>(&bt, 0u, true, 16u);\n",
        "acc = subgroupMatrixMultiplyAccumulate(l, r, acc);\n",
        "acc = subgroupMatrixMultiply<f32>(l, r);\n",
        "subgroupMatrixStore(&c, ",
        ", acc, false, 16u);\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        if (!strstr(w, want[i])) {
            kt_fail(__FILE__, __LINE__, "missing <%s> in\n%s", want[i], w);
            break;
        }
    }
    kf_free(w);
    kf_kernel_destroy(k);

    /* a kernel without subgroup matrices says nothing of them */
    kf_kernel *plain = kf_kernel_create(NULL);
    kf_val x = kf_add(plain, kf_lit_u32(plain, 1), kf_builtin_get(plain, KF_BUILTIN_LOCAL_INDEX));
    kf_binding o =
        kf_kernel_storage(plain, "o", kf_type_scalar(KF_SCALAR_U32), KF_ACCESS_READ_WRITE);
    kf_store(plain, o, kf_lit_u32(plain, 0), x);
    w = kf_kernel_emit_wgsl(plain);
    KT_CHECK(w && !strstr(w, "subgroup_matrix") && !strstr(w, "diagnostic"), "%s", w ? w : "");
    kf_free(w);
    kf_kernel_destroy(plain);
}

KT_CPU_TEST(unit, ir_sgmat_interpreter) {
    for (int mul_last = 0; mul_last < 2; mul_last++) {
        kf_kernel *k = two_subgroup_product(mul_last != 0);
        uint16_t a[512], b[256];
        float fa[512], fb[256], c[512 + 8];
        for (int i = 0; i < 512; i++) {
            a[i] = kf__half_from_float(kt_rand_f32(-1.0f, 1.0f));
            fa[i] = kf__half_to_float(a[i]);
        }
        for (int i = 0; i < 256; i++) {
            b[i] = kf__half_from_float(kt_rand_f32(-1.0f, 1.0f));
            fb[i] = kf__half_to_float(b[i]);
        }
        for (int i = 0; i < 512 + 8; i++) {
            c[i] = -7.0f;
        }
        kf_host_buffer bufs[3] = {{a, sizeof a}, {b, sizeof b}, {c, sizeof c}};
        kf_interp_desc d = {.buffers = bufs, .buffer_count = 3, .groups = {1, 1, 1}};
        KT_CHECK(kf_kernel_interpret(k, &d) == KF_OK, "%s", kf_kernel_error(k));
        for (int r = 0; r < 32; r++) {
            for (int col = 0; col < 16; col++) {
                double ref = 0;
                for (int q = 0; q < 16; q++) {
                    ref += (double)fa[r * 16 + q] * fb[q * 16 + col];
                }
                /* acc = round(round(ab) + ab): two roundings to f32; mul_last: round(ab) */
                double got = c[r * 16 + col], want = (mul_last ? 1 : 2) * ref;
                KT_CHECK(fabs(got - want) <= 1e-6 * (1 + fabs(ref)), "c[%d,%d] = %g, want %g", r,
                         col, got, want);
            }
        }
        for (int g = 512; g < 520; g++) {
            KT_CHECK(c[g] == -7.0f, "wrote past the end at %d", g);
        }
        /* subgroups larger than the workgroup are not whole subgroups */
        d.subgroup_size = 128;
        KT_CHECK(kf_kernel_interpret(k, &d) == KF_ERROR_INVALID_ARGUMENT, "partial subgroup run");
        KT_CHECK(strstr(kf_kernel_error(k), "subgroups of 128") != NULL, "%s", kf_kernel_error(k));
        kf_kernel_destroy(k);
    }
}

KT_CPU_TEST(unit, ir_sgmat_interpreter_refuses_divergence) {
    /* an offset that differs inside a subgroup, and a load only half a subgroup reaches */
    for (int which = 0; which < 2; which++) {
        kf_kernel_desc desc = {.name = "bad", .workgroup_size = {32, 1, 1}};
        kf_kernel *k = kf_kernel_create(&desc);
        kf_shared t = kf_kernel_workgroup(k, "t", kf_type_scalar(KF_SCALAR_F32), 1024);
        kf_sgmat m = kf_sgmat_declare(k, "m", KF_SGMAT_RESULT, KF_SCALAR_F32, 16, 16);
        kf_val local = kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX);
        if (which == 0) {
            kf_sgmat_load(k, m, t, local, false, kf_lit_u32(k, 16));
        } else {
            kf_if(k, kf_binary(k, KF_OP_LT, local, kf_lit_u32(k, 16)));
            kf_sgmat_load(k, m, t, kf_lit_u32(k, 0), false, kf_lit_u32(k, 16));
            kf_end(k);
        }
        KT_CHECK(kf_kernel_status(k) == KF_OK, "%s", kf_kernel_error(k));
        kf_interp_desc d = {.groups = {1, 1, 1}};
        KT_CHECK(kf_kernel_interpret(k, &d) == KF_ERROR_INVALID_ARGUMENT, "case %d ran", which);
        const char *want = which == 0 ? "offset differs" : "16 of the 32 invocations";
        KT_CHECK(strstr(kf_kernel_error(k), want), "case %d: %s", which, kf_kernel_error(k));
        kf_kernel_destroy(k);
    }
    /* out of bounds */
    kf_kernel_desc desc = {.name = "oob", .workgroup_size = {32, 1, 1}};
    kf_kernel *k = kf_kernel_create(&desc);
    kf_shared t = kf_kernel_workgroup(k, "t", kf_type_scalar(KF_SCALAR_F32), 256);
    kf_sgmat m = kf_sgmat_declare(k, "m", KF_SGMAT_RESULT, KF_SCALAR_F32, 16, 16);
    kf_sgmat_store(k, t, kf_lit_u32(k, 1), m, false, kf_lit_u32(k, 16));
    kf_interp_desc d = {.groups = {1, 1, 1}};
    KT_CHECK(kf_kernel_interpret(k, &d) == KF_ERROR_INVALID_ARGUMENT, "out of bounds ran");
    KT_CHECK(strstr(kf_kernel_error(k), "(15, 15)") && strstr(kf_kernel_error(k), "index 256") &&
                 strstr(kf_kernel_error(k), "'t'"),
             "%s", kf_kernel_error(k));
    kf_kernel_destroy(k);
}

KT_CPU_TEST(unit, ir_sgmat_builder_errors) {
    struct {
        int what;
        const char *want;
    } cases[] = {
        {0, "expects a result, a left and a right matrix, got right 'r'"},
        {1, "does not fit"},
        {2, "is a subgroup matrix; use kf_sgmat_load"},
        {3, "'t' holds f32, the subgroup matrix 'l'"},
        {4, "stride 8 is less than the 16 cols"},
        {5, "a subgroup matrix holds f32, f16, i32 or u32, not bool"},
        {6, "a stage runs per element"},
        {7, "binding 'ro' is read-only"},
        {8, "the offset must be a u32"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        kf_kernel_desc desc = {.name = "e", .workgroup_size = {32, 1, 1}};
        if (cases[c].what == 6) {
            desc.input = kf_type_scalar(KF_SCALAR_F32);
            desc.output = desc.input;
        }
        kf_kernel *k = kf_kernel_create(&desc);
        kf_shared t = kf_kernel_workgroup(k, "t", kf_type_scalar(KF_SCALAR_F32), 1024);
        kf_binding ro = kf_kernel_storage(k, "ro", kf_type_scalar(KF_SCALAR_F32), KF_ACCESS_READ);
        kf_val zero = kf_lit_u32(k, 0), sixteen = kf_lit_u32(k, 16);
        kf_sgmat l = kf_sgmat_declare(k, "l", KF_SGMAT_LEFT, KF_SCALAR_F16, 16, 16);
        kf_sgmat r = kf_sgmat_declare(k, "r", KF_SGMAT_RIGHT, KF_SCALAR_F16, 8, 16);
        kf_sgmat x = kf_sgmat_declare(k, "x", KF_SGMAT_RESULT, KF_SCALAR_F32, 16, 16);
        switch (cases[c].what) {
        case 0: /* kinds in the wrong places */
            kf_sgmat_mma(k, r, l, x);
            break;
        case 1: /* 16x16 * 16x8 into 16x16 */
            kf_sgmat_mma(k, x, l, r);
            break;
        case 2:
            kf_read(k, (kf_var){x.id, x.kernel});
            break;
        case 3:
            kf_sgmat_load(k, l, t, zero, false, sixteen);
            break;
        case 4:
            kf_sgmat_store(k, t, zero, x, false, kf_lit_u32(k, 8));
            break;
        case 5:
            kf_sgmat_declare(k, "b", KF_SGMAT_LEFT, KF_SCALAR_BOOL, 16, 16);
            break;
        case 6: /* the stage refused the first declaration already */
            break;
        case 7:
            kf_sgmat_store_storage(k, ro, zero, x, false, sixteen);
            break;
        case 8:
            kf_sgmat_store(k, t, kf_lit_i32(k, 0), x, false, sixteen);
            break;
        default:
            break;
        }
        KT_CHECK(kf_kernel_status(k) != KF_OK, "case %zu: no error", c);
        KT_CHECK(strstr(kf_kernel_error(k), cases[c].want) != NULL, "case %zu: %s", c,
                 kf_kernel_error(k));
        kf_kernel_destroy(k);
    }
}

KT_CPU_TEST(unit, ir_sgmat_copies) {
    /* clone and composition keep subgroup matrices; a stage using them cannot be composed */
    kf_kernel *k = two_subgroup_product(true);
    kf_kernel *c = kf_kernel_clone(k);
    char *w0 = kf_kernel_emit_wgsl(k), *w1 = kf_kernel_emit_wgsl(c);
    KT_CHECK(w0 && w1 && !strcmp(w0, w1), "the clone emits different WGSL");
    KT_CHECK(w1 && strstr(w1, "acc = subgroupMatrixMultiply<f32>(l, r);"), "the clone lost mul");
    kf_free(w0);
    kf_free(w1);
    kf_kernel_destroy(c);
    kf_kernel_destroy(k);
}

/* A result matrix through workgroup memory and back, as the lazy attention kernel rescales O:
 * acc = a b stored (row-major), each invocation scaling the elements of row r by r + 1, loaded
 * back as a result matrix, then acc += a b: c = (r + 2) (a b)_rc. uniform: the round trip
 * under a branch on a kf_shared_load_uniform value (true), which one invocation writes to a
 * 1-element u32 array first. On the interpreter and, where the device has subgroup matrices, on
 * the GPU. On the H200 the uniform case failed (the matrix came back unscaled) until the
 * emitter padded that array to 16 bytes. */
static kf_kernel *result_round_trip(uint32_t sg, bool uniform) {
    kf_kernel_desc desc = {.name = "sgmat_round_trip", .workgroup_size = {2 * sg, 1, 1}};
    kf_kernel *k = kf_kernel_create(&desc);
    kf_type h = kf_type_scalar(KF_SCALAR_F16), f = kf_type_scalar(KF_SCALAR_F32);
    kf_binding a = kf_kernel_storage(k, "a", h, KF_ACCESS_READ);
    kf_binding b = kf_kernel_storage(k, "b", h, KF_ACCESS_READ);
    kf_binding c = kf_kernel_storage(k, "c", f, KF_ACCESS_READ_WRITE);
    kf_shared o = kf_kernel_workgroup(k, "o", f, 2 * 16 * 20);
    kf_shared flag = kf_kernel_workgroup(k, "flag", kf_type_scalar(KF_SCALAR_U32), 1);
    kf_val local = kf_let(k, "local", kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX));
    kf_val g = kf_let(k, "g", kf_div(k, local, kf_lit_u32(k, sg)));
    kf_val lane = kf_let(k, "lane", kf_binary(k, KF_OP_MOD, local, kf_lit_u32(k, sg)));
    kf_sgmat acc = kf_sgmat_declare(k, "acc", KF_SGMAT_RESULT, KF_SCALAR_F32, 16, 16);
    kf_sgmat l = kf_sgmat_declare(k, "l", KF_SGMAT_LEFT, KF_SCALAR_F16, 16, 16);
    kf_sgmat r = kf_sgmat_declare(k, "r", KF_SGMAT_RIGHT, KF_SCALAR_F16, 16, 16);
    kf_sgmat_load_storage(k, l, a, kf_mul(k, g, kf_lit_u32(k, 256)), false, kf_lit_u32(k, 16));
    kf_sgmat_load_storage(k, r, b, kf_lit_u32(k, 0), false, kf_lit_u32(k, 16));
    kf_sgmat_mul(k, acc, l, r);
    kf_val at = kf_let(k, "at", kf_mul(k, g, kf_lit_u32(k, 16 * 20)));
    if (uniform) {
        kf_if(k, kf_binary(k, KF_OP_EQ, local, kf_lit_u32(k, 0)));
        kf_shared_store(k, flag, kf_lit_u32(k, 0), kf_lit_u32(k, 1));
        kf_end(k);
        kf_val on = kf_shared_load_uniform(k, flag, kf_lit_u32(k, 0));
        kf_if(k, kf_binary(k, KF_OP_NE, on, kf_lit_u32(k, 0)));
    }
    kf_sgmat_store(k, o, at, acc, false, kf_lit_u32(k, 20));
    kf_barrier(k);
    kf_val e = kf_for(k, "e", lane, kf_lit_u32(k, 256), kf_lit_u32(k, sg));
    kf_val row = kf_div(k, e, kf_lit_u32(k, 16));
    kf_val i = kf_add(k, at,
                      kf_add(k, kf_mul(k, row, kf_lit_u32(k, 20)),
                             kf_binary(k, KF_OP_MOD, e, kf_lit_u32(k, 16))));
    kf_val scale = kf_cast(k, f, kf_add(k, row, kf_lit_u32(k, 1)));
    kf_shared_store(k, o, i, kf_mul(k, kf_shared_load(k, o, i), scale));
    kf_end(k);
    kf_barrier(k);
    kf_sgmat_load(k, acc, o, at, false, kf_lit_u32(k, 20));
    if (uniform) {
        kf_end(k);
    }
    kf_sgmat_mma(k, acc, l, r);
    kf_sgmat_store_storage(k, c, kf_mul(k, g, kf_lit_u32(k, 256)), acc, false, kf_lit_u32(k, 16));
    return k;
}

/* Runs the round trip on ctx (NULL: the interpreter) and checks c. */
static bool round_trip_ok(kf_context *ctx, uint32_t sg, bool uniform) {
    kf_kernel *k = result_round_trip(sg, uniform);
    uint16_t a[512], b[256];
    float fa[512], fb[256], c[512];
    for (int i = 0; i < 512; i++) {
        a[i] = kf__half_from_float(kt_rand_f32(-1.0f, 1.0f));
        fa[i] = kf__half_to_float(a[i]);
    }
    for (int i = 0; i < 256; i++) {
        b[i] = kf__half_from_float(kt_rand_f32(-1.0f, 1.0f));
        fb[i] = kf__half_to_float(b[i]);
    }
    for (int i = 0; i < 512; i++) {
        c[i] = -7.0f;
    }
    bool ok = kf_kernel_status(k) == KF_OK;
    if (ctx) {
        kf_buffer *bufs[3] = {0};
        ok = ok && kf_buffer_create(ctx, sizeof a, &bufs[0]) == KF_OK &&
             kf_buffer_upload(bufs[0], 0, a, sizeof a) == KF_OK &&
             kf_buffer_create(ctx, sizeof b, &bufs[1]) == KF_OK &&
             kf_buffer_upload(bufs[1], 0, b, sizeof b) == KF_OK &&
             kf_buffer_create(ctx, sizeof c, &bufs[2]) == KF_OK &&
             kf_buffer_upload(bufs[2], 0, c, sizeof c) == KF_OK;
        kf_kernel_launch launch = {.buffers = bufs, .buffer_count = 3};
        if (ok && kf_kernel_run(ctx, k, &launch) != KF_OK) {
            kt_fail(__FILE__, __LINE__, "run: %s", kf_context_last_error(ctx));
            ok = false;
        }
        ok = ok && kf_buffer_download(bufs[2], 0, c, sizeof c) == KF_OK;
        for (int i = 0; i < 3; i++) {
            kf_buffer_destroy(bufs[i]);
        }
    } else {
        kf_host_buffer bufs[3] = {{a, sizeof a}, {b, sizeof b}, {c, sizeof c}};
        kf_interp_desc d = {.buffers = bufs, .buffer_count = 3, .subgroup_size = sg};
        ok = ok && kf_kernel_interpret(k, &d) == KF_OK;
    }
    if (!ok) {
        kt_fail(__FILE__, __LINE__, "round trip (sg %u%s): %s", sg, uniform ? ", uniform" : "",
                kf_kernel_error(k));
    }
    for (int rr = 0; ok && rr < 32; rr++) {
        for (int col = 0; ok && col < 16; col++) {
            double ab = 0;
            for (int q = 0; q < 16; q++) {
                ab += (double)fa[rr * 16 + q] * fb[q * 16 + col];
            }
            double want = (rr % 16 + 2) * ab, got = c[rr * 16 + col];
            if (!(fabs(got - want) <= 1e-5 * (1 + fabs(want)))) {
                kt_fail(__FILE__, __LINE__, "%s%s: c[%d][%d] = %g, want %g", ctx ? "GPU" : "interp",
                        uniform ? " uniform" : "", rr, col, got, want);
                ok = false;
            }
        }
    }
    kf_kernel_destroy(k);
    return ok;
}

/* In a kernel with subgroup matrices each workgroup array is declared a whole number of 16
 * bytes long (see shared_emitted_count in src/wgsl/emit.c); elsewhere as built. */
KT_CPU_TEST(unit, ir_sgmat_workgroup_arrays_padded_to_16_bytes) {
    kf_kernel *k = result_round_trip(32, true);
    char *w = kf_kernel_emit_wgsl(k);
    KT_CHECK(w && strstr(w, "var<workgroup> flag: array<u32, 4>;"), "flag not padded:\n%s",
             w ? w : "");
    KT_CHECK(w && strstr(w, "var<workgroup> o: array<f32, 640>;"), "o changed");
    kf_free(w);
    kf_kernel_destroy(k);
    kf_kernel_desc desc = {.name = "no_sgmat", .workgroup_size = {32, 1, 1}};
    k = kf_kernel_create(&desc);
    kf_binding out =
        kf_kernel_storage(k, "out", kf_type_scalar(KF_SCALAR_U32), KF_ACCESS_READ_WRITE);
    kf_shared one = kf_kernel_workgroup(k, "one", kf_type_scalar(KF_SCALAR_U32), 1);
    kf_val local = kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX);
    kf_if(k, kf_binary(k, KF_OP_EQ, local, kf_lit_u32(k, 0)));
    kf_shared_store(k, one, kf_lit_u32(k, 0), kf_lit_u32(k, 5));
    kf_end(k);
    kf_val n = kf_shared_load_uniform(k, one, kf_lit_u32(k, 0));
    kf_store(k, out, local, n);
    w = kf_kernel_emit_wgsl(k);
    KT_CHECK(w && strstr(w, "var<workgroup> one: array<u32, 1>;"), "padded without matrices");
    kf_free(w);
    kf_kernel_destroy(k);
}

KT_CPU_TEST(unit, ir_sgmat_result_round_trip_interpreter) {
    for (int u = 0; u < 2; u++) {
        KT_CHECK(round_trip_ok(NULL, 32, u != 0), "sg 32");
        KT_CHECK(round_trip_ok(NULL, 16, u != 0), "sg 16");
    }
}

KT_TEST(unit, ir_sgmat_result_round_trip_gpu) {
    KT_NEED_GPU(ctx);
    uint32_t sg = 0;
    if (!kf__sgmat_usable(ctx, &sg)) {
        printf("    (no subgroup matrices: skipped)\n");
        return;
    }
    for (int u = 0; u < 2; u++) {
        KT_CHECK(round_trip_ok(ctx, sg, u != 0), "sg %u", sg);
    }
}
