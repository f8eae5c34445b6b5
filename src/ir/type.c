/* Value types of the kernel IR and their WGSL names, sizes and layouts. */
#include "ir/ir_internal.h"

#include <stdio.h>

kf_type kf_type_scalar(kf_scalar scalar) {
    kf_type t = {scalar, 0, 0};
    return t;
}

kf_type kf_type_vec(kf_scalar scalar, uint32_t lanes) {
    kf_type t = {scalar, lanes, 0};
    return t;
}

kf_type kf_type_array(kf_type elem, uint32_t count) {
    elem.count = count;
    return elem;
}

static uint32_t norm_lanes(uint32_t lanes) {
    return lanes <= 1 ? 1 : lanes;
}

bool kf_type_eq(kf_type a, kf_type b) {
    return a.scalar == b.scalar && norm_lanes(a.lanes) == norm_lanes(b.lanes) && a.count == b.count;
}

const char *kf_type_str(kf_type type, char *buf, size_t size) {
    return kf__wgsl_type_str(type, buf, size);
}

bool kf__type_valid(kf_type t) {
    return t.scalar > KF_SCALAR_VOID && t.scalar <= KF_SCALAR_BOOL && t.lanes <= 4;
}

bool kf__is_float(kf_scalar s) {
    return s == KF_SCALAR_F32 || s == KF_SCALAR_F16;
}

bool kf__is_int(kf_scalar s) {
    return s == KF_SCALAR_I32 || s == KF_SCALAR_U32;
}

uint32_t kf__type_words(kf_type t) {
    return norm_lanes(t.lanes) * (t.count ? t.count : 1);
}

bool kf__type_is_vec(kf_type t) {
    return t.count == 0 && norm_lanes(t.lanes) > 1;
}

bool kf__type_is_array(kf_type t) {
    return t.count > 0;
}

kf_type kf__type_elem(kf_type t) {
    if (t.count > 0) {
        t.count = 0;
        return t;
    }
    return kf_type_scalar(t.scalar);
}

kf_type kf__type_with_scalar(kf_type t, kf_scalar s) {
    t.scalar = s;
    return t;
}

static uint32_t scalar_bytes(kf_scalar s) {
    return s == KF_SCALAR_F16 ? 2u : 4u;
}

uint32_t kf__type_align(kf_type t) {
    uint32_t lanes = norm_lanes(t.lanes);
    uint32_t b = scalar_bytes(t.scalar);
    return lanes == 1 ? b : (lanes == 2 ? 2 * b : 4 * b);
}

static uint32_t elem_size(kf_type t) {
    return norm_lanes(t.lanes) * scalar_bytes(t.scalar);
}

uint32_t kf__type_stride(kf_type t) {
    t.count = 0;
    uint32_t align = kf__type_align(t);
    uint32_t size = elem_size(t);
    return (size + align - 1) / align * align;
}

uint32_t kf__type_size(kf_type t) {
    if (t.count > 0) {
        return t.count * kf__type_stride(t);
    }
    return elem_size(t);
}
