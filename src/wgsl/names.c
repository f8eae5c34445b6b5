/* Words a WGSL identifier must not be: keywords, reserved words (WGSL 1.0, section 15.2 and
 * 15.3), predeclared types and aliases, and builtin functions (shadowing those is legal in a
 * function, but a let named `max` would break a later call to max()). */
#include "wgsl/wgsl.h"

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
