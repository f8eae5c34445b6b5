/* WGSL's names: the words a WGSL identifier must not be, and how WGSL spells the IR's types,
 * operators, functions and builtins.
 *
 * Words a WGSL identifier must not be: keywords, reserved words (WGSL 1.0, section 15.2 and
 * 15.3), predeclared types and aliases, and builtin functions (shadowing those is legal in a
 * function, but a let named `max` would break a later call to max()). */
#include "wgsl/wgsl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const reserved[] = {
    /* keywords */
    "alias", "break", "case", "const", "const_assert", "continue", "continuing", "default",
    "diagnostic", "discard", "else", "enable", "false", "fn", "for", "if", "let", "loop",
    "override", "requires", "return", "struct", "switch", "true", "var", "while",
    /* reserved words */
    "NULL", "Self", "abstract", "active", "alignas", "alignof", "as", "asm", "asm_fragment",
    "async", "attribute", "auto", "await", "become", "binding_array", "cast", "catch", "class",
    "co_await", "co_return", "co_yield", "coherent", "column_major", "common", "compile",
    "compile_fragment", "concept", "const_cast", "consteval", "constexpr", "constinit", "crate",
    "debugger", "decltype", "delete", "demote", "demote_to_helper", "do", "dynamic_cast", "enum",
    "explicit", "export", "extends", "extern", "external", "fallthrough", "filter", "final",
    "finally", "friend", "from", "fxgroup", "get", "goto", "groupshared", "highp", "impl",
    "implements", "import", "inline", "instanceof", "interface", "layout", "lowp", "macro",
    "macro_rules", "match", "mediump", "meta", "mod", "module", "move", "mut", "mutable",
    "namespace", "new", "nil", "noexcept", "noinline", "nointerpolation", "noperspective", "null",
    "nullptr", "of", "operator", "package", "packoffset", "partition", "pass", "patch",
    "pixelfragment", "precise", "precision", "premerge", "priv", "protected", "pub", "public",
    "readonly", "ref", "regardless", "register", "reinterpret_cast", "require", "resource",
    "restrict", "self", "set", "shared", "signed", "sizeof", "smooth", "snorm", "static",
    "static_assert", "static_cast", "std", "subroutine", "super", "target", "template", "this",
    "thread_local", "throw", "trait", "try", "type", "typedef", "typeid", "typename", "typeof",
    "union", "unless", "unorm", "unsafe", "unsized", "use", "using", "varying", "virtual",
    "volatile", "wgsl", "where", "with", "writeonly", "yield",
    /* predeclared types, aliases and enumerants */
    "bool", "f16", "f32", "i32", "u32", "vec2", "vec3", "vec4", "mat2x2", "mat2x3", "mat2x4",
    "mat3x2", "mat3x3", "mat3x4", "mat4x2", "mat4x3", "mat4x4", "array", "atomic", "ptr", "sampler",
    "sampler_comparison", "texture_1d", "texture_2d", "texture_2d_array", "texture_3d",
    "texture_cube", "texture_cube_array", "texture_multisampled_2d", "texture_storage_1d",
    "texture_storage_2d", "texture_storage_2d_array", "texture_storage_3d", "texture_depth_2d",
    "texture_depth_2d_array", "texture_depth_cube", "texture_depth_cube_array",
    "texture_depth_multisampled_2d", "texture_external", "vec2i", "vec3i", "vec4i", "vec2u",
    "vec3u", "vec4u", "vec2f", "vec3f", "vec4f", "vec2h", "vec3h", "vec4h", "mat2x2f", "mat2x3f",
    "mat2x4f", "mat3x2f", "mat3x3f", "mat3x4f", "mat4x2f", "mat4x3f", "mat4x4f", "mat2x2h",
    "mat2x3h", "mat2x4h", "mat3x2h", "mat3x3h", "mat3x4h", "mat4x2h", "mat4x3h", "mat4x4h", "read",
    "write", "read_write", "function", "private", "workgroup", "uniform", "storage",
    /* builtin functions */
    "abs", "acos", "acosh", "all", "any", "arrayLength", "asin", "asinh", "atan", "atan2", "atanh",
    "bitcast", "ceil", "clamp", "cos", "cosh", "countLeadingZeros", "countOneBits",
    "countTrailingZeros", "cross", "degrees", "determinant", "distance", "dot", "dot4I8Packed",
    "dot4U8Packed", "dpdx", "dpdxCoarse", "dpdxFine", "dpdy", "dpdyCoarse", "dpdyFine", "exp",
    "exp2", "extractBits", "faceForward", "firstLeadingBit", "firstTrailingBit", "floor", "fma",
    "fract", "frexp", "fwidth", "insertBits", "inverseSqrt", "ldexp", "length", "log", "log2",
    "max", "min", "mix", "modf", "normalize", "pow", "quantizeToF16", "radians", "reflect",
    "refract", "reverseBits", "round", "saturate", "select", "sign", "sin", "sinh", "smoothstep",
    "sqrt", "step", "storageBarrier", "tan", "tanh", "transpose", "trunc", "workgroupBarrier",
    "workgroupUniformLoad", "textureBarrier", "pack4x8snorm", "pack4x8unorm", "pack2x16snorm",
    "pack2x16unorm", "pack2x16float", "unpack4x8snorm", "unpack4x8unorm", "unpack2x16snorm",
    "unpack2x16unorm", "unpack2x16float", "subgroupAdd", "subgroupMax", "subgroupMin",
    "subgroupMul", "subgroupAnd", "subgroupOr", "subgroupXor", "subgroupAll", "subgroupAny",
    "subgroupBroadcast", "subgroupBroadcastFirst", "subgroupShuffle", "subgroupShuffleUp",
    "subgroupShuffleDown", "subgroupShuffleXor", "subgroupBallot", "subgroupElect",
    "subgroupExclusiveAdd", "subgroupInclusiveAdd", "subgroupExclusiveMul", "subgroupInclusiveMul",
    "atomicLoad", "atomicStore", "atomicAdd", "atomicSub", "atomicMax", "atomicMin", "atomicAnd",
    "atomicOr", "atomicXor", "atomicExchange", "atomicCompareExchangeWeak",
    /* the entry point */
    "main"};

bool kf__wgsl_reserved(const char *name) {
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++) {
        if (!strcmp(reserved[i], name)) {
            return true;
        }
    }
    return false;
}

bool kf__wgsl_identifier_ok(const char *name) {
    if (!name || !*name || !strcmp(name, "_") || !strncmp(name, "__", 2)) {
        return false;
    }
    for (const char *p = name; *p; p++) {
        char c = *p;
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
        bool digit = c >= '0' && c <= '9';
        if (!alpha && !(digit && p != name)) {
            return false;
        }
    }
    return strlen(name) <= 255 && !kf__wgsl_reserved(name);
}

/* ---- WGSL spellings of the IR's types, operators, functions and builtins ---- */

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

const char *kf__wgsl_type_str(kf_type type, char *buf, size_t size) {
    if (!buf || size == 0) {
        return "";
    }
    if (type.scalar < KF_SCALAR_VOID || type.scalar > KF_SCALAR_BOOL || type.lanes > 4) {
        snprintf(buf, size, "<invalid type>");
        return buf;
    }
    char elem[32];
    if (kf__type_lanes(type) > 1) {
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

const char *kf__sgmat_type_str(const kf__var *v, char *buf, size_t size) {
    static const char *const kinds[] = {"", "left", "right", "result"};
    snprintf(buf, size, "subgroup_matrix_%s<%s, %u, %u>", kinds[v->sgmat & 3],
             kf__scalar_str(v->type.scalar), (unsigned)v->cols, (unsigned)v->rows);
    return buf;
}
