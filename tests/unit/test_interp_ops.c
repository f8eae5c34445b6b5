/* The interpreter on real kernels: every operator's forward kernel (and backward kernels for one
 * case each), for the small cases of its verification table, run on the GPU and in the
 * interpreter from the same inputs. They must agree far inside the operator's tolerance: this is
 * what lets the interpreter check fusion rewrites without a GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir_testing.h"
#include "ops/operator.h"
#include "core/half.h"

#define MAX_ELEMENTS 20000u /* the interpreter is for small inputs */

/* Fills an input of `count` elements as verification would draw it, in the dtype's layout. */
static void fill_input(const kf_operator *op, uint32_t i, const kf_shape *in, void *data,
                       uint64_t count, kf_dtype dtype) {
    for (uint64_t e = 0; e < count; e++) {
        if (op->index_inputs & (1u << i)) {
            ((int32_t *)data)[e] = (int32_t)(kt_rand_u64() % kf__op_index_classes(op, in));
            continue;
        }
        float v;
        if (op->nonzero_inputs & (1u << i)) {
            float m = fmaxf(fabsf(op->input_lo), fabsf(op->input_hi));
            v = kt_rand_f32(m / 4, m) * (kt_rand_u64() & 1 ? 1.0f : -1.0f);
        } else {
            v = kt_rand_f32(op->input_lo, op->input_hi);
        }
        if (kf__op_input_dtype(op, i, dtype) == KF_DTYPE_F16) {
            ((uint16_t *)data)[e] = kf__half_from_float(v);
        } else {
            ((float *)data)[e] = v;
        }
    }
}

static uint32_t elem_bytes(const kf_operator *op, uint32_t i, kf_dtype dtype) {
    return kf_dtype_size(kf__op_input_dtype(op, i, dtype));
}

/* Compares an output of `count` elements (dtype layout) from the GPU and the interpreter. */
static bool compare(const void *gpu, const void *cpu, uint64_t count, kf_dtype dtype, double tol,
                    const char *what) {
    if (dtype == KF_DTYPE_F16) {
        return kt_close_f16(gpu, cpu, count, tol, 1.0, what);
    }
    return kt_close_f32(gpu, cpu, count, tol, 1.0, what);
}

/* One kernel over buffers bufs (the last n_out of them written); GPU vs interpreter, each
 * written binding in its element type. */
static bool run_both(kf_context *ctx, kf_kernel *k, kf_host_buffer *bufs, uint32_t n,
                     const uint32_t groups[3], const uint64_t *counts, double tol,
                     const char *what) {
    if (kf_kernel_status(k) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "%s: %s", what, kf_kernel_error(k));
        return false;
    }
    kf_host_buffer *gpu = kt_bufs_copy(bufs, n);
    kt_launch l = {{groups[0], groups[1], groups[2]}, 0, NULL, 0, 0};
    bool ok = kt_ir_gpu(ctx, k, gpu, n, &l) && kt_ir_interp(k, bufs, n, &l);
    for (uint32_t i = 0; ok && i < n; i++) {
        kf_binding_info info;
        kf_kernel_binding_info(k, i, &info);
        if (info.kind == KF_BINDING_STORAGE_READ_WRITE) {
            char w[160];
            snprintf(w, sizeof w, "%s, '%s'", what, info.name);
            kf_dtype stored = info.elem.scalar == KF_SCALAR_F16 ? KF_DTYPE_F16 : KF_DTYPE_F32;
            ok = compare(gpu[i].data, bufs[i].data, counts[i], stored, tol, w);
        }
    }
    kt_bufs_free(gpu, n);
    return ok;
}

/* Runs one case; *ran says whether it was small enough to run. */
static bool op_case(kf_context *ctx, const kf_operator *op, const kf_op_case *c, kf_dtype dtype,
                    bool backward, bool *ran) {
    *ran = false;
    const kf_op_params *p = &c->params;
    uint32_t arity = kf_op_arity(op, p);
    kf_shape out_shape;
    char msg[256];
    if (kf_op_shape(op, c->shapes, p, &out_shape, msg, sizeof msg) != KF_OK) {
        return true; /* a case for shape errors */
    }
    uint64_t total = kf_shape_elements(&out_shape);
    for (uint32_t i = 0; i < arity; i++) {
        total += kf_shape_elements(&c->shapes[i]);
    }
    if (total > MAX_ELEMENTS || (c->note && strstr(c->note, "large"))) {
        return true;
    }
    *ran = true;
    char what[160];
    char sh[32];
    snprintf(what, sizeof what, "%s %s (%s) %s", op->name, kf_shape_str(&c->shapes[0], sh, 32),
             c->note ? c->note : "", dtype == KF_DTYPE_F16 ? "f16" : "f32");
    double tol = dtype == KF_DTYPE_F16 ? 4e-3 : 1e-5;
    /* inputs, then out */
    kf_host_buffer bufs[8];
    uint64_t counts[8];
    uint32_t n = 0;
    for (uint32_t i = 0; i < arity; i++) {
        counts[n] = kf_shape_elements(&c->shapes[i]);
        bufs[n].size = counts[n] * elem_bytes(op, i, dtype);
        bufs[n].data = malloc(bufs[n].size);
        fill_input(op, i, &c->shapes[0], bufs[n].data, counts[n], dtype);
        n++;
    }
    uint32_t ob = dtype == KF_DTYPE_F16 ? 2 : 4;
    counts[n] = kf_shape_elements(&out_shape);
    bufs[n].size = counts[n] * kf_dtype_size(kf__op_output_dtype(op, dtype));
    bufs[n].data = malloc(bufs[n].size);
    kt_fill_poison(bufs[n].data, bufs[n].size);
    n++;
    uint32_t groups[3];
    op->grid(c->shapes, p, -1, groups);
    kf_kernel *k = op->kernel_forward(c->shapes, p, dtype);
    char fw[200];
    snprintf(fw, sizeof fw, "%s forward", what);
    bool ok = run_both(ctx, k, bufs, n, groups, counts, tol, fw);
    kf_kernel_destroy(k);
    /* backward: inputs, out (the forward's, as the interpreter computed it), grad_out, grad_in */
    for (uint32_t which = 0; ok && backward && op->kernel_backward && which < arity; which++) {
        if (op->index_inputs & (1u << which)) {
            continue;
        }
        kf_host_buffer bb[10];
        uint64_t bc[10];
        uint32_t m = 0;
        for (uint32_t i = 0; i < n; i++) {
            bb[m] = bufs[i];
            bc[m++] = counts[i];
        }
        bc[m] = counts[n - 1];
        bb[m].size = bufs[n - 1].size;
        bb[m].data = malloc(bb[m].size);
        fill_input(op, 0, &c->shapes[0], bb[m].data, bc[m], dtype); /* grad_out */
        m++;
        bc[m] = kf_shape_elements(&c->shapes[which]);
        bb[m].size = bc[m] * ob;
        bb[m].data = malloc(bb[m].size);
        kt_fill_poison(bb[m].data, bb[m].size);
        m++;
        op->grid(c->shapes, p, (int32_t)which, groups);
        kf_kernel *kb = op->kernel_backward(c->shapes, p, dtype, which);
        char bw[200];
        snprintf(bw, sizeof bw, "%s backward %u", what, which);
        ok = run_both(ctx, kb, bb, m, groups, bc, tol, bw);
        kf_kernel_destroy(kb);
        free(bb[m - 2].data);
        free(bb[m - 1].data);
    }
    for (uint32_t i = 0; i < n; i++) {
        free(bufs[i].data);
    }
    return ok;
}

static void ops_in(kf_dtype dtype) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    if (dtype == KF_DTYPE_F16 && !info.has_f16) {
        printf("    note: f16 skipped: the device has no shader-f16\n");
        return;
    }
    uint32_t kernels = 0;
    for (uint32_t o = 0; o < kf_op_count(); o++) {
        const kf_operator *op = kf_op_at(o);
        bool backward_done = false;
        for (uint32_t c = 0; c < op->case_count; c++) {
            bool ran;
            bool ok = op_case(ctx, op, &op->cases[c], dtype, !backward_done, &ran);
            backward_done = backward_done || ran;
            kernels += ran;
            KT_CHECK(ok, "%s case %u", op->name, c);
        }
    }
    printf("    %u operator cases, GPU and interpreter agree\n", kernels);
}

KT_TEST(unit, interp_matches_gpu_on_every_operator_f32) {
    ops_in(KF_DTYPE_F32);
}

KT_TEST(unit, interp_matches_gpu_on_every_operator_f16) {
    ops_in(KF_DTYPE_F16);
}
