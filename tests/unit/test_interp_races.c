/* The interpreter's race detector on workgroup memory (kf_kernel_interpret, $KF_CHECK_RACES):
 * a read of an element another invocation wrote, a write after another's read, two writes and a
 * subgroup-matrix store read back by one invocation, each with no barrier between, fail the run
 * naming the array, the element and both invocations; the same kernels with a barrier, and an
 * invocation reading back what it wrote, pass. And kf_interp_desc.f16_casts_unrounded. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

#include "core/half.h"

enum { LANES = 64 };

/* out[l] = shared[(l + 1) % 64] after shared[l] = l + 100 (kind 0), a write of shared[l] after
 * that read (kind 1), shared[(l + 1) % 64] = l after shared[l] = l + 100 (kind 2), or the
 * invocation's own element only (kind 3); a barrier between the two accesses where asked. */
static kf_kernel *neighbour_kernel(int kind, bool barrier) {
    kf_kernel_desc desc = {.name = "neighbours", .workgroup_size = {LANES, 1, 1}};
    kf_kernel *k = kf_kernel_create(&desc);
    kf_type u = kf_type_scalar(KF_SCALAR_U32);
    kf_binding out = kf_kernel_storage(k, "out", u, KF_ACCESS_READ_WRITE);
    kf_shared s = kf_kernel_workgroup(k, "cells", u, LANES);
    kf_val l = kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX);
    kf_val next = kf_binary(k, KF_OP_MOD, kf_add(k, l, kf_lit_u32(k, 1)), kf_lit_u32(k, LANES));
    kf_val mine = kind == 3 ? l : next;
    if (kind != 1) {
        kf_shared_store(k, s, l, kf_add(k, l, kf_lit_u32(k, 100)));
    }
    if (barrier) {
        kf_barrier(k);
    }
    if (kind == 2) {
        kf_shared_store(k, s, next, l);
        kf_store(k, out, l, l);
    } else {
        kf_store(k, out, l, kf_shared_load(k, s, mine));
    }
    if (kind == 1) {
        if (barrier) {
            kf_barrier(k);
        }
        kf_shared_store(k, s, l, l);
    }
    return k;
}

static kf_status run_neighbours(kf_kernel *k, uint32_t *out) {
    kf_host_buffer b = {out, LANES * sizeof *out};
    kf_interp_desc d = {.buffers = &b, .buffer_count = 1, .groups = {2, 1, 1}};
    return kf_kernel_interpret(k, &d);
}

KT_CPU_TEST(unit, interp_races_between_invocations) {
    static const char *const want[] = {
        "data race on workgroup array 'cells' (u32), element 1: read by invocation 0 after "
        "invocation 1 wrote it with no workgroupBarrier between",
        "element 0: written by invocation 0 after invocation 63 read it",
        "element 1: written by invocation 0 and by invocation 1",
    };
    for (int kind = 0; kind < 3; kind++) {
        uint32_t out[LANES];
        kf_kernel *k = neighbour_kernel(kind, false);
        KT_CHECK(run_neighbours(k, out) == KF_ERROR_INVALID_ARGUMENT, "kind %d: no race found",
                 kind);
        KT_CHECK(strstr(kf_kernel_error(k), want[kind]) &&
                     strstr(kf_kernel_error(k), "kernel 'neighbours'") &&
                     strstr(kf_kernel_error(k), "(workgroup 0,0,0)"),
                 "kind %d: %s", kind, kf_kernel_error(k));
        kf_kernel_destroy(k);
        /* with the barrier: no race, and the values are there */
        k = neighbour_kernel(kind, true);
        for (int i = 0; i < LANES; i++) {
            out[i] = 0xdeadu;
        }
        KT_CHECK(run_neighbours(k, out) == KF_OK, "kind %d with a barrier: %s", kind,
                 kf_kernel_error(k));
        for (uint32_t i = 0; kind == 0 && i < LANES; i++) {
            KT_CHECK(out[i] == (i + 1) % LANES + 100, "out[%u] = %u", i, out[i]);
        }
        kf_kernel_destroy(k);
    }
    /* an invocation reading back its own element needs no barrier */
    uint32_t out[LANES];
    kf_kernel *k = neighbour_kernel(3, false);
    KT_CHECK(run_neighbours(k, out) == KF_OK, "%s", kf_kernel_error(k));
    for (uint32_t i = 0; i < LANES; i++) {
        KT_CHECK(out[i] == i + 100, "out[%u] = %u", i, out[i]);
    }
    kf_kernel_destroy(k);
    /* $KF_CHECK_RACES=0 turns the check off */
    const char *was = getenv("KF_CHECK_RACES");
    char *saved = was ? strdup(was) : NULL;
    setenv("KF_CHECK_RACES", "0", 1);
    k = neighbour_kernel(0, false);
    KT_CHECK(run_neighbours(k, out) == KF_OK, "KF_CHECK_RACES=0: %s", kf_kernel_error(k));
    kf_kernel_destroy(k);
    if (saved) {
        setenv("KF_CHECK_RACES", saved, 1);
        free(saved);
    } else {
        unsetenv("KF_CHECK_RACES");
    }
}

/* A subgroup stores a result matrix to workgroup memory and each of its invocations reads an
 * element back: a race within the subgroup without a barrier (WGSL has no subgroup-scoped one). */
static kf_kernel *matrix_readback(bool barrier) {
    kf_kernel_desc desc = {.name = "readback", .workgroup_size = {32, 1, 1}};
    kf_kernel *k = kf_kernel_create(&desc);
    kf_type f = kf_type_scalar(KF_SCALAR_F32);
    kf_binding out = kf_kernel_storage(k, "out", f, KF_ACCESS_READ_WRITE);
    kf_shared t = kf_kernel_workgroup(k, "scratch", f, 256);
    kf_sgmat m = kf_sgmat_declare(k, "m", KF_SGMAT_RESULT, KF_SCALAR_F32, 16, 16);
    kf_sgmat_store(k, t, kf_lit_u32(k, 0), m, false, kf_lit_u32(k, 16));
    if (barrier) {
        kf_barrier(k);
    }
    kf_val l = kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX);
    kf_store(k, out, l, kf_shared_load(k, t, kf_mul(k, l, kf_lit_u32(k, 8))));
    return k;
}

KT_CPU_TEST(unit, interp_races_subgroup_matrix_store_read_back) {
    for (int barrier = 0; barrier < 2; barrier++) {
        kf_kernel *k = matrix_readback(barrier != 0);
        float out[32];
        kf_host_buffer b = {out, sizeof out};
        kf_interp_desc d = {.buffers = &b, .buffer_count = 1, .groups = {1, 1, 1}};
        kf_status st = kf_kernel_interpret(k, &d);
        if (barrier) {
            KT_CHECK(st == KF_OK, "with a barrier: %s", kf_kernel_error(k));
        } else {
            KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT &&
                         strstr(kf_kernel_error(k),
                                "array 'scratch' (f32), element 0: read by invocation 0 after "
                                "subgroup 0 (invocations 0..31, a subgroup-matrix access) wrote"),
                     "%s", kf_kernel_error(k));
        }
        kf_kernel_destroy(k);
    }
}

/* lo = f16(x - f32(f16(x))): the rounding error of x in f16, or 0 where the compiler keeps f16
 * casts wide (f16_casts_unrounded), which a store to f16 memory rounds in the end. */
KT_CPU_TEST(unit, interp_f16_casts_unrounded) {
    kf_kernel_desc desc = {.name = "split", .workgroup_size = {64, 1, 1}};
    kf_kernel *k = kf_kernel_create(&desc);
    kf_type f = kf_type_scalar(KF_SCALAR_F32), h = kf_type_scalar(KF_SCALAR_F16);
    kf_binding in = kf_kernel_storage(k, "x", f, KF_ACCESS_READ);
    kf_binding hi = kf_kernel_storage(k, "hi", h, KF_ACCESS_READ_WRITE);
    kf_binding lo = kf_kernel_storage(k, "lo", h, KF_ACCESS_READ_WRITE);
    kf_val l = kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX);
    kf_val x = kf_load(k, in, l);
    kf_val xh = kf_let(k, "xh", kf_cast(k, h, x));
    kf_store(k, hi, l, xh);
    kf_store(k, lo, l, kf_cast(k, h, kf_sub(k, x, kf_cast(k, f, xh))));
    float xs[64];
    uint16_t his[64], los[64];
    for (int i = 0; i < 64; i++) {
        xs[i] = kt_rand_f32(0.5f, 1.0f);
    }
    kf_host_buffer b[3] = {{xs, sizeof xs}, {his, sizeof his}, {los, sizeof los}};
    for (int wide = 0; wide < 2; wide++) {
        kf_interp_desc d = {
            .buffers = b, .buffer_count = 3, .groups = {1, 1, 1}, .f16_casts_unrounded = wide};
        KT_CHECK(kf_kernel_interpret(k, &d) == KF_OK, "%s", kf_kernel_error(k));
        for (int i = 0; i < 64; i++) {
            float want_hi = kf__half_to_float(kf__half_from_float(xs[i]));
            float want_lo = wide ? 0.0f : kf__half_to_float(kf__half_from_float(xs[i] - want_hi));
            KT_CHECK(kf__half_to_float(his[i]) == want_hi && kf__half_to_float(los[i]) == want_lo,
                     "wide %d, x %.9g: hi %g lo %g, want %g %g", wide, (double)xs[i],
                     (double)kf__half_to_float(his[i]), (double)kf__half_to_float(los[i]),
                     (double)want_hi, (double)want_lo);
        }
    }
    kf_kernel_destroy(k);
}
