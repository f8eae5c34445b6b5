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

const char *kf__scalar_str(kf_scalar s) {
    switch (s) {
    case KF_SCALAR_VOID:
        return "void";
    case KF_SCALAR_F32:
        return "f32";
    case KF_SCALAR_F16:
        return "f16";
    case KF_SCALAR_I32:
        return "i32";
    case KF_SCALAR_U32:
        return "u32";
    case KF_SCALAR_BOOL:
        return "bool";
    }
    return "?";
}

const char *kf_type_str(kf_type type, char *buf, size_t size) {
    if (!buf || size == 0) {
        return "";
    }
    if (type.scalar < KF_SCALAR_VOID || type.scalar > KF_SCALAR_BOOL || type.lanes > 4) {
        snprintf(buf, size, "<invalid type>");
        return buf;
    }
    char elem[32];
    if (norm_lanes(type.lanes) > 1) {
        snprintf(elem, sizeof elem, "vec%u<%s>", (unsigned)type.lanes, kf__scalar_str(type.scalar));
    } else {
        snprintf(elem, sizeof elem, "%s", kf__scalar_str(type.scalar));
    }
    if (type.count > 0) {
        snprintf(buf, size, "array<%s, %u>", elem, (unsigned)type.count);
    } else {
        snprintf(buf, size, "%s", elem);
    }
    return buf;
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

uint32_t kf__type_lanes(kf_type t) {
    return norm_lanes(t.lanes);
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

bool kf__type_uses_f16(kf_type t) {
    return t.scalar == KF_SCALAR_F16;
}

const char *kf__op_str(kf_op op) {
    switch (op) {
    case KF_OP_ADD:
        return "+";
    case KF_OP_SUB:
        return "-";
    case KF_OP_MUL:
        return "*";
    case KF_OP_DIV:
        return "/";
    case KF_OP_MOD:
        return "%";
    case KF_OP_EQ:
        return "==";
    case KF_OP_NE:
        return "!=";
    case KF_OP_LT:
        return "<";
    case KF_OP_LE:
        return "<=";
    case KF_OP_GT:
        return ">";
    case KF_OP_GE:
        return ">=";
    case KF_OP_AND:
        return "&&";
    case KF_OP_OR:
        return "||";
    case KF_OP_BIT_AND:
        return "&";
    case KF_OP_BIT_OR:
        return "|";
    case KF_OP_BIT_XOR:
        return "^";
    case KF_OP_SHL:
        return "<<";
    case KF_OP_SHR:
        return ">>";
    case KF_OP_NEG:
        return "-";
    case KF_OP_NOT:
        return "!";
    case KF_OP_BIT_NOT:
        return "~";
    case KF_OP_NONE:
        break;
    }
    return "?";
}

const char *kf__fn_str(kf_fn fn) {
    switch (fn) {
    case KF_FN_EXP:
        return "exp";
    case KF_FN_LOG:
        return "log";
    case KF_FN_TANH:
        return "tanh";
    case KF_FN_SQRT:
        return "sqrt";
    case KF_FN_INVERSE_SQRT:
        return "inverseSqrt";
    case KF_FN_ABS:
        return "abs";
    case KF_FN_MIN:
        return "min";
    case KF_FN_MAX:
        return "max";
    case KF_FN_CLAMP:
        return "clamp";
    case KF_FN_FMA:
        return "fma";
    case KF_FN_POW:
        return "pow";
    case KF_FN_FLOOR:
        return "floor";
    case KF_FN_SIN:
        return "sin";
    case KF_FN_COS:
        return "cos";
    case KF_FN_ERF:
        return "erf";
    case KF_FN_DOT:
        return "dot";
    case KF_FN_SELECT:
        return "select";
    case KF_FN_NONE:
        break;
    }
    return "?";
}

const char *kf__builtin_str(kf_builtin b) {
    switch (b) {
    case KF_BUILTIN_GLOBAL_ID:
        return "global_invocation_id";
    case KF_BUILTIN_LOCAL_ID:
        return "local_invocation_id";
    case KF_BUILTIN_LOCAL_INDEX:
        return "local_invocation_index";
    case KF_BUILTIN_WORKGROUP_ID:
        return "workgroup_id";
    case KF_BUILTIN_NUM_WORKGROUPS:
        return "num_workgroups";
    case KF_BUILTIN_SUBGROUP_INVOCATION_ID:
        return "subgroup_invocation_id";
    case KF_BUILTIN_SUBGROUP_SIZE:
        return "subgroup_size";
    case KF_BUILTIN_NONE:
        break;
    }
    return "?";
}

const char *kf__subgroup_str(kf_subgroup_op op) {
    switch (op) {
    case KF_SUBGROUP_ADD:
        return "subgroupAdd";
    case KF_SUBGROUP_MAX:
        return "subgroupMax";
    case KF_SUBGROUP_SHUFFLE:
        return "subgroupShuffle";
    case KF_SUBGROUP_BROADCAST:
        return "subgroupBroadcast";
    case KF_SUBGROUP_NONE:
        break;
    }
    return "?";
}
