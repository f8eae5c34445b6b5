/* Kernel-building helpers every operator shares: dtype-aware bindings, loads, stores and yields
 * (storage may be f16; compute is always f32), literals and 1-D grids. */
#include "ops/ops_internal.h"

kf_type kf__dtype_type(kf_dtype dtype) {
    switch (dtype) {
    case KF_DTYPE_F16:
        return kf_type_scalar(KF_SCALAR_F16);
    case KF_DTYPE_I32:
        return kf_type_scalar(KF_SCALAR_I32);
    case KF_DTYPE_F32:
        break;
    }
    return kf_type_scalar(KF_SCALAR_F32);
}

kf_binding kf__bind(kf_kernel *k, const char *name, kf_dtype dtype, kf_access access) {
    return kf_kernel_storage(k, name, kf__dtype_type(dtype), access);
}

kf_val kf__load_f32(kf_kernel *k, kf_binding b, kf_val index, kf_dtype dtype) {
    kf_val v = kf_load(k, b, index);
    return dtype == KF_DTYPE_F32 ? v : kf_cast(k, kf_type_scalar(KF_SCALAR_F32), v);
}

void kf__store_f32(kf_kernel *k, kf_binding b, kf_val index, kf_val value, kf_dtype dtype) {
    if (dtype != KF_DTYPE_F32) {
        value = kf_cast(k, kf__dtype_type(dtype), value);
    }
    kf_store(k, b, index, value);
}

void kf__yield_f32(kf_kernel *k, kf_val value, kf_val index, kf_dtype dtype) {
    if (dtype != KF_DTYPE_F32) {
        value = kf_cast(k, kf__dtype_type(dtype), value);
    }
    kf_kernel_yield(k, value, index);
}

kf_val kf__u32(kf_kernel *k, uint64_t v) {
    return kf_lit_u32(k, (uint32_t)v);
}

void kf__grid_1d(uint64_t invocations, uint32_t workgroup, uint32_t groups[3]) {
    uint64_t n = (invocations + workgroup - 1) / workgroup;
    groups[0] = (uint32_t)(n ? n : 1);
    groups[1] = 1;
    groups[2] = 1;
}

kf_kernel *kf__kernel_1d(const char *name, kf_type output, uint64_t invocations) {
    kf_kernel_desc desc = {0};
    desc.name = name;
    desc.workgroup_size[0] = KF__WORKGROUP;
    desc.output = output;
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    uint32_t groups[3];
    kf__grid_1d(invocations, KF__WORKGROUP, groups);
    kf_kernel_set_grid(k, groups);
    return k;
}

kf_val kf__each_element(kf_kernel *k, const char *name, uint64_t n) {
    kf_val e = kf_let(k, name, kf_global_linear(k));
    kf_if(k, kf_binary(k, KF_OP_LT, e, kf__u32(k, n)));
    return e;
}

/* The row's part is summed in units of g, the gcd of the row strides and the offset, and
 * multiplied by g once: the index is then visibly a multiple of g plus the column's part, as
 * row * D + col is, so a compiler can see 4 adjacent columns' loads as one aligned vector load
 * (the H200 ran attention 1.5x slower on q, k, v read in place before: session 10,
 * bench/results/s10/). */
kf_val kf__strided_at(kf_kernel *k, const kf__strided *l, kf_val row, kf_val col) {
    uint32_t last = l->rank - 1;
    uint64_t g = l->offset;
    for (uint32_t d = 0; d < last; d++) {
        if (l->dims[d] != 1 && l->strides[d]) {
            g = kf__gcd_u64(g, l->strides[d]);
        }
    }
    if (!g) {
        g = 1;
    }
    kf_val at = {0, 0};
    kf_val rest = row;
    for (uint32_t d = last; d-- > 0;) {
        /* the coordinate along dim d; the first takes what is left (row is in range) */
        kf_val c = d == 0 ? rest : kf_binary(k, KF_OP_MOD, rest, kf__u32(k, l->dims[d]));
        if (l->dims[d] != 1 && l->strides[d]) {
            uint64_t s = l->strides[d] / g;
            kf_val term = s == 1 ? c : kf_mul(k, c, kf__u32(k, s));
            at = at.id ? kf_add(k, at, term) : term;
        }
        if (d > 0) {
            rest = kf_div(k, rest, kf__u32(k, l->dims[d]));
        }
    }
    if (l->offset) {
        at = at.id ? kf_add(k, at, kf__u32(k, l->offset / g)) : kf__u32(k, l->offset / g);
    }
    if (at.id && g != 1) {
        at = kf_mul(k, at, kf__u32(k, g));
    }
    kf_val cpart = l->strides[last] == 1 ? col : kf_mul(k, col, kf__u32(k, l->strides[last]));
    return at.id ? kf_add(k, at, cpart) : cpart;
}

bool kf__strided_any(const kf__strided *layouts, uint32_t count) {
    for (uint32_t i = 0; layouts && i < count; i++) {
        if (layouts[i].rank) {
            return true;
        }
    }
    return false;
}
