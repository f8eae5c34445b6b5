/* Row kernels shared by the reductions over the last axis (see rowwise.h). */
#include "ops/rowwise.h"

#include <math.h>
#include <stdio.h>

void kf__rows_layout(uint32_t cols, uint32_t *threads, uint32_t *rows_per_group) {
    uint32_t t = 1;
    while (t < cols && t < KF__ROWS_MAX_THREADS) {
        t *= 2;
    }
    *threads = t;
    *rows_per_group = KF__ROWS_MAX_THREADS / t;
}

void kf__rows_grid(const kf_shape *x, uint32_t groups[3]) {
    uint64_t rows;
    uint32_t cols, threads, per_group;
    kf__shape_rows_cols(x, &rows, &cols);
    kf__rows_layout(cols, &threads, &per_group);
    kf__grid_1d(rows, per_group, groups);
}

/* The row-dependent values, at the top of the body. */
static void rows_prologue(kf__rows *r) {
    kf_kernel *k = r->k;
    kf_val local = kf_builtin_get(k, KF_BUILTIN_LOCAL_ID);
    r->lane = kf_let(k, "lane", kf_extract(k, local, 0));
    kf_val ly = kf_extract(k, local, 1);
    kf_val group = kf_workgroup_linear(k);
    kf_val row =
        kf_let(k, "row_unclamped", kf_add(k, kf_mul(k, group, kf__u32(k, r->rows_per_group)), ly));
    r->valid = kf_let(k, "valid", kf_binary(k, KF_OP_LT, row, kf__u32(k, r->rows)));
    r->row = kf_let(k, "row", kf_call2(k, KF_FN_MIN, row, kf__u32(k, r->rows - 1)));
    r->base = kf_let(k, "base", kf_mul(k, r->row, kf__u32(k, r->cols)));
    r->slot = kf_let(k, "slot", kf_mul(k, ly, kf__u32(k, r->threads)));
    r->mine = kf_let(k, "mine", kf_add(k, r->slot, r->lane));
}

kf_kernel *kf__rows_begin(kf__rows *r, const char *name, const kf_shape *x, kf_dtype dtype,
                          bool producer) {
    *r = (kf__rows){0};
    r->dtype = dtype;
    kf__shape_rows_cols(x, &r->rows, &r->cols);
    kf__rows_layout(r->cols, &r->threads, &r->rows_per_group);

    kf_kernel_desc desc = {0};
    desc.name = name;
    desc.workgroup_size[0] = r->threads;
    desc.workgroup_size[1] = r->rows_per_group;
    desc.workgroup_size[2] = 1;
    desc.input = kf_type_scalar(KF_SCALAR_VOID);
    desc.output = producer ? kf__dtype_type(dtype) : kf_type_scalar(KF_SCALAR_VOID);
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    r->k = k;
    uint32_t groups[3];
    kf__rows_grid(x, groups);
    kf_kernel_set_grid(k, groups);
    rows_prologue(r);
    return k;
}

kf_val kf__rows_for(kf__rows *r, const char *name) {
    return kf_for(r->k, name, r->lane, kf__u32(r->k, r->cols), kf__u32(r->k, r->threads));
}

static kf_shared scratch(kf__rows *r, kf_scalar scalar, uint32_t i) {
    kf_kernel *k = r->k;
    uint32_t size = r->threads * r->rows_per_group;
    char name[32];
    if (scalar == KF_SCALAR_U32) {
        while (r->scratch_u32_count <= i) {
            snprintf(name, sizeof name, "scratch_u%u", r->scratch_u32_count);
            r->scratch_u32[r->scratch_u32_count++] =
                kf_kernel_workgroup(k, name, kf_type_scalar(KF_SCALAR_U32), size);
        }
        return r->scratch_u32[i];
    }
    while (r->scratch_f32_count <= i) {
        snprintf(name, sizeof name, "scratch_f%u", r->scratch_f32_count);
        r->scratch_f32[r->scratch_f32_count++] =
            kf_kernel_workgroup(k, name, kf_type_scalar(KF_SCALAR_F32), size);
    }
    return r->scratch_f32[i];
}

void kf__rows_reduce(kf__rows *r, uint32_t n, const kf_val *partials, kf__combine_fn combine,
                     kf_val *out) {
    kf_kernel *k = r->k;
    if (r->threads == 1) {
        /* one lane per row: its partial is the row's result */
        for (uint32_t v = 0; v < n; v++) {
            out[v] = partials[v];
        }
        return;
    }
    /* Each value gets its own scratch array of its type: the i-th f32 of a tuple always uses
     * scratch_f<i>, so later reductions reuse the arrays. */
    kf_shared arrays[KF__ROWS_MAX_SCRATCH];
    uint32_t used_f32 = 0, used_u32 = 0;
    for (uint32_t v = 0; v < n && v < KF__ROWS_MAX_SCRATCH; v++) {
        kf_type t = kf_val_type(k, partials[v]);
        if (t.scalar == KF_SCALAR_U32) {
            arrays[v] = scratch(r, KF_SCALAR_U32, used_u32++);
        } else {
            arrays[v] = scratch(r, KF_SCALAR_F32, used_f32++);
        }
    }
    if (n > KF__ROWS_MAX_SCRATCH) {
        n = KF__ROWS_MAX_SCRATCH; /* internal misuse; the tuple is capped, not overrun */
    }
    kf_val mine = r->mine;
    for (uint32_t v = 0; v < n; v++) {
        kf_shared_store(k, arrays[v], mine, partials[v]);
    }
    kf_barrier(k);
    for (uint32_t stride = r->threads / 2; stride >= 1; stride /= 2) {
        kf_if(k, kf_binary(k, KF_OP_LT, r->lane, kf__u32(k, stride)));
        kf_val a[KF__ROWS_MAX_SCRATCH], b[KF__ROWS_MAX_SCRATCH], c[KF__ROWS_MAX_SCRATCH];
        kf_val other = kf_add(k, mine, kf__u32(k, stride));
        for (uint32_t v = 0; v < n; v++) {
            a[v] = kf_let(k, "a", kf_shared_load(k, arrays[v], mine));
            b[v] = kf_let(k, "b", kf_shared_load(k, arrays[v], other));
        }
        combine(k, a, b, n, c);
        for (uint32_t v = 0; v < n; v++) {
            kf_shared_store(k, arrays[v], mine, c[v]);
        }
        kf_end(k);
        kf_barrier(k);
    }
    for (uint32_t v = 0; v < n; v++) {
        char name[32];
        snprintf(name, sizeof name, "reduced%u", r->reductions++);
        out[v] = kf_let(k, name, kf_shared_load(k, arrays[v], r->slot));
    }
    /* the next reduction overwrites the scratch arrays: everyone must have read them first */
    kf_barrier(k);
}

static void combine_sum(kf_kernel *k, const kf_val *a, const kf_val *b, uint32_t n, kf_val *out) {
    for (uint32_t v = 0; v < n; v++) {
        out[v] = kf_add(k, a[v], b[v]);
    }
}

static void combine_max(kf_kernel *k, const kf_val *a, const kf_val *b, uint32_t n, kf_val *out) {
    for (uint32_t v = 0; v < n; v++) {
        out[v] = kf__max_nan(k, a[v], b[v]);
    }
}

kf_val kf__rows_sum(kf__rows *r, kf_val partial) {
    kf_val out;
    kf__rows_reduce(r, 1, &partial, combine_sum, &out);
    return out;
}

kf_val kf__rows_max(kf__rows *r, kf_val partial) {
    kf_val out;
    kf__rows_reduce(r, 1, &partial, combine_max, &out);
    return out;
}

kf_val kf__isnan(kf_kernel *k, kf_val x) {
    kf_val bits = kf_bitcast(k, kf_type_scalar(KF_SCALAR_U32), x);
    kf_val magnitude = kf_binary(k, KF_OP_BIT_AND, bits, kf_lit_u32(k, 0x7fffffffu));
    return kf_binary(k, KF_OP_GT, magnitude, kf_lit_u32(k, 0x7f800000u));
}

kf_val kf__max_nan(kf_kernel *k, kf_val a, kf_val b) {
    /* b wins when it is NaN or larger; a NaN a never loses (b > NaN is false) */
    kf_val take_b = kf_binary(k, KF_OP_OR, kf__isnan(k, b), kf_binary(k, KF_OP_GT, b, a));
    return kf_select(k, a, b, take_b);
}

kf_val kf__nan(kf_kernel *k, kf_val anchor) {
    kf_val zero = kf_binary(k, KF_OP_BIT_AND, anchor, kf_lit_u32(k, 0));
    kf_val bits = kf_binary(k, KF_OP_BIT_OR, zero, kf_lit_u32(k, 0x7fc00000u));
    return kf_bitcast(k, kf_type_scalar(KF_SCALAR_F32), bits);
}

double kf__spec_max(double a, double b) {
    if (isnan(a) || isnan(b)) {
        return NAN;
    }
    return b > a ? b : a;
}

kf_status kf__spec_check_out(const kf_operator *op, const kf_tensor *const *in,
                             const kf_op_params *p, const kf_tensor *out) {
    kf_shape shapes[4] = {{0}};
    uint32_t arity = kf_op_arity(op, p);
    if (!in || !out || arity > 4) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    for (uint32_t i = 0; i < arity; i++) {
        if (!in[i]) {
            return KF_ERROR_INVALID_ARGUMENT;
        }
        shapes[i] = in[i]->shape;
    }
    kf_shape want;
    char msg[160];
    kf_status st = op->shape(shapes, p, &want, msg, sizeof msg);
    if (st != KF_OK) {
        return st;
    }
    return kf_shape_eq(&want, &out->shape) ? KF_OK : KF_ERROR_SHAPE;
}
