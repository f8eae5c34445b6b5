/* The kernel builder: typed values and statements. Every public call checks its arguments and
 * types, records the first error on the kernel and returns the invalid handle after it, so that
 * building code reads straight without a check per line. */
#include "ir/ir_internal.h"
#include "core/half.h"
#include "wgsl/wgsl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static kf_val mkval(const kf_kernel *k, uint32_t id) {
    kf_val v = {id, id ? k->tag : 0};
    return v;
}

static const kf_val INVALID = {0, 0};

static const char *tstr(kf_type t, char *buf) {
    return kf_type_str(t, buf, 48);
}

static bool is_stage(const kf_kernel *k) {
    return k->input.scalar != KF_SCALAR_VOID;
}

/* Resolves a value handle; 0 (with the error recorded) when it is not usable here. */
static uint32_t val(kf_kernel *k, kf_val v, const char *fn, int arg) {
    if (!kf__ok(k)) {
        return 0;
    }
    if (v.id == 0 && v.kernel == 0) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT, "%s: argument %d is the invalid value", fn, arg);
        return 0;
    }
    if (v.kernel != k->tag) {
        kf__fail(k, KF_ERROR_TYPE, "%s: argument %d is a value from another kernel", fn, arg);
        return 0;
    }
    if (v.id == 0 || v.id >= k->node_count) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT, "%s: argument %d is not a value of this kernel", fn,
                 arg);
        return 0;
    }
    const kf__ir_node *n = &k->nodes[v.id];
    if (!kf__block_within(k, k->cur_block, n->scope)) {
        char t[48];
        kf__fail(k, KF_ERROR_TYPE,
                 "%s: argument %d (%s) is a value used outside the block that defines it (its "
                 "if, for or while was closed); keep it in a kf_declare'd variable instead",
                 fn, arg, tstr(n->type, t));
        return 0;
    }
    return v.id;
}

static kf_type ty(const kf_kernel *k, uint32_t id) {
    return k->nodes[id].type;
}

uint32_t kf__pure(kf_kernel *k, kf__ir_node_kind kind, uint8_t op, kf_type type,
                  const uint32_t *args, uint32_t nargs) {
    if (!kf__ok(k)) {
        return 0;
    }
    uint32_t id = kf__node_new(k, kind, type);
    if (!id) {
        return 0;
    }
    kf__ir_node *n = &k->nodes[id];
    n->op = op;
    n->nargs = (uint8_t)nargs;
    uint32_t scope = 0, depth = 1;
    for (uint32_t i = 0; i < nargs; i++) {
        n->args[i] = args[i];
        const kf__ir_node *a = &k->nodes[args[i]];
        scope = kf__block_deeper(k, scope, a->scope);
        if (a->depth + 1 > depth) {
            depth = a->depth + 1;
        }
    }
    n->scope = scope;
    n->depth = depth;
    n->at_block = k->cur_block;
    n->at_stmt = k->blocks[k->cur_block].last;
    if (kf__type_uses_f16(type)) {
        k->uses |= KF__USES_F16;
    }
    if (depth > KF__MAX_DEPTH) {
        kf__fail(k, KF_ERROR_LIMIT,
                 "expression nested %u deep (more than %u): name a part of it with kf_let",
                 (unsigned)depth, (unsigned)KF__MAX_DEPTH);
        return 0;
    }
    return id;
}

uint32_t kf__emit_stmt(kf_kernel *k, kf__stmt_kind kind, uint32_t ref, uint32_t a, uint32_t b,
                       uint32_t c) {
    if (!kf__ok(k)) {
        return 0;
    }
    uint32_t id = kf__stmt_new(k, kind);
    if (!id) {
        return 0;
    }
    kf__stmt *s = &k->stmts[id];
    s->ref = ref;
    s->a = a;
    s->b = b;
    s->c = c;
    return id;
}

uint32_t kf__materialize(kf_kernel *k, kf__ir_node_kind kind, uint8_t op, kf_type type,
                         const uint32_t *args, uint32_t nargs, uint32_t ref, const char *hint) {
    if (!kf__ok(k)) {
        return 0;
    }
    uint32_t name = kf__string_add(k, hint);
    uint32_t id = kf__node_new(k, kind, type);
    if (!id || !kf__ok(k)) {
        return 0;
    }
    kf__ir_node *n = &k->nodes[id];
    n->op = op;
    n->nargs = (uint8_t)nargs;
    for (uint32_t i = 0; i < nargs; i++) {
        n->args[i] = args[i];
    }
    n->ref = ref;
    n->name = name;
    n->materialized = 1;
    n->scope = k->cur_block;
    n->at_block = k->cur_block;
    n->at_stmt = k->blocks[k->cur_block].last;
    if (kf__type_uses_f16(type)) {
        k->uses |= KF__USES_F16;
    }
    if (!kf__emit_stmt(k, KF__STMT_LET, id, 0, 0, 0)) {
        return 0;
    }
    return id;
}

uint32_t kf__open_if(kf_kernel *k, uint32_t cond) {
    uint32_t s = kf__emit_stmt(k, KF__STMT_IF, 0, cond, 0, 0);
    if (!s) {
        return 0;
    }
    uint32_t body = kf__block_new(k, k->cur_block, s);
    if (!body) {
        return 0;
    }
    k->stmts[s].body = body;
    k->cur_block = body;
    return s;
}

void kf__open_else(kf_kernel *k, uint32_t if_stmt) {
    if (!kf__ok(k)) {
        return;
    }
    uint32_t parent = k->stmts[if_stmt].block;
    uint32_t eb = kf__block_new(k, parent, if_stmt);
    if (!eb) {
        return;
    }
    k->stmts[if_stmt].else_body = eb;
    k->cur_block = eb;
}

uint32_t kf__open_for(kf_kernel *k, const char *name, uint32_t start, uint32_t end, uint32_t step) {
    uint32_t s = kf__emit_stmt(k, KF__STMT_FOR, 0, start, end, step);
    if (!s) {
        return 0;
    }
    uint32_t body = kf__block_new(k, k->cur_block, s);
    uint32_t nm = kf__string_add(k, name && *name ? name : "i");
    uint32_t var = kf__node_new(k, KF__NODE_LOOP_VAR, k->nodes[start].type);
    if (!body || !var || !kf__ok(k)) {
        return 0;
    }
    kf__ir_node *n = &k->nodes[var];
    n->ref = s;
    n->name = nm;
    n->scope = body;
    n->at_block = body;
    k->stmts[s].ref = var;
    k->stmts[s].body = body;
    k->cur_block = body;
    return s;
}

uint32_t kf__open_loop(kf_kernel *k) {
    uint32_t s = kf__emit_stmt(k, KF__STMT_LOOP, 0, 0, 0, 0);
    if (!s) {
        return 0;
    }
    uint32_t body = kf__block_new(k, k->cur_block, s);
    if (!body) {
        return 0;
    }
    k->stmts[s].body = body;
    k->cur_block = body;
    return s;
}

void kf__close(kf_kernel *k) {
    if (k->cur_block > 1) {
        k->cur_block = k->blocks[k->cur_block].parent;
    }
}

uint32_t kf__lit_bits(kf_kernel *k, kf_scalar s, uint32_t bits) {
    uint32_t id = kf__pure(k, KF__NODE_LIT, 0, kf_type_scalar(s), NULL, 0);
    if (id) {
        k->nodes[id].bits = bits;
    }
    return id;
}

/* ======================================================================================== */
/* literals                                                                                 */
/* ======================================================================================== */

static uint32_t f32_bits(float v) {
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    return b;
}

kf_val kf_lit_f32(kf_kernel *k, float v) {
    if (!kf__ok(k)) {
        return INVALID;
    }
    return mkval(k, kf__lit_bits(k, KF_SCALAR_F32, f32_bits(v)));
}

kf_val kf_lit_f16(kf_kernel *k, float v) {
    if (!kf__ok(k)) {
        return INVALID;
    }
    float h = kf__half_to_float(kf__half_from_float(v));
    return mkval(k, kf__lit_bits(k, KF_SCALAR_F16, f32_bits(h)));
}

kf_val kf_lit_i32(kf_kernel *k, int32_t v) {
    if (!kf__ok(k)) {
        return INVALID;
    }
    return mkval(k, kf__lit_bits(k, KF_SCALAR_I32, (uint32_t)v));
}

kf_val kf_lit_u32(kf_kernel *k, uint32_t v) {
    if (!kf__ok(k)) {
        return INVALID;
    }
    return mkval(k, kf__lit_bits(k, KF_SCALAR_U32, v));
}

kf_val kf_lit_bool(kf_kernel *k, bool v) {
    if (!kf__ok(k)) {
        return INVALID;
    }
    return mkval(k, kf__lit_bits(k, KF_SCALAR_BOOL, v ? 1u : 0u));
}

kf_type kf_val_type(const kf_kernel *k, kf_val v) {
    if (!k || v.kernel != k->tag || v.id == 0 || v.id >= k->node_count) {
        return kf_type_scalar(KF_SCALAR_VOID);
    }
    return k->nodes[v.id].type;
}

/* ======================================================================================== */
/* operators                                                                                */
/* ======================================================================================== */

static bool is_numeric(kf_type t) {
    return t.count == 0 && t.scalar != KF_SCALAR_BOOL && t.scalar != KF_SCALAR_VOID;
}

static kf_val binary_op(kf_kernel *k, kf_op op, kf_val a, kf_val b, const char *fn) {
    uint32_t ia = val(k, a, fn, 1);
    uint32_t ib = ia ? val(k, b, fn, 2) : 0;
    if (!ia || !ib) {
        return INVALID;
    }
    kf_type ta = ty(k, ia), tb = ty(k, ib);
    char sa[48], sb[48];
    const char *sym = kf__op_str(op);
    kf_type result = ta;
    if (ta.count || tb.count) {
        kf__fail(k, KF_ERROR_TYPE, "%s: arrays have no operators: %s %s %s", fn, tstr(ta, sa), sym,
                 tstr(tb, sb));
        return INVALID;
    }
    uint32_t la = kf__type_lanes(ta), lb = kf__type_lanes(tb);
    switch (op) {
    case KF_OP_ADD:
    case KF_OP_SUB:
    case KF_OP_MUL:
    case KF_OP_DIV:
    case KF_OP_MOD:
        if (!is_numeric(ta) || !is_numeric(tb)) {
            kf__fail(k, KF_ERROR_TYPE, "%s: expects numbers, got %s %s %s", fn, tstr(ta, sa), sym,
                     tstr(tb, sb));
            return INVALID;
        }
        if (ta.scalar != tb.scalar || (la != lb && la != 1 && lb != 1)) {
            kf__fail(k, KF_ERROR_TYPE,
                     "%s: operand types differ: %s %s %s (convert one with kf_cast)", fn,
                     tstr(ta, sa), sym, tstr(tb, sb));
            return INVALID;
        }
        result = la >= lb ? ta : tb;
        break;
    case KF_OP_EQ:
    case KF_OP_NE:
    case KF_OP_LT:
    case KF_OP_LE:
    case KF_OP_GT:
    case KF_OP_GE:
        if (!kf_type_eq(ta, tb)) {
            kf__fail(k, KF_ERROR_TYPE, "%s: operand types differ: %s %s %s", fn, tstr(ta, sa), sym,
                     tstr(tb, sb));
            return INVALID;
        }
        if (ta.scalar == KF_SCALAR_BOOL && op != KF_OP_EQ && op != KF_OP_NE) {
            kf__fail(k, KF_ERROR_TYPE, "%s: bool values have no order: %s %s %s", fn, tstr(ta, sa),
                     sym, tstr(tb, sb));
            return INVALID;
        }
        result = kf__type_with_scalar(ta, KF_SCALAR_BOOL);
        break;
    case KF_OP_AND:
    case KF_OP_OR:
        if (ta.scalar != KF_SCALAR_BOOL || !kf_type_eq(ta, tb)) {
            kf__fail(k, KF_ERROR_TYPE, "%s: expects two bools of one type, got %s %s %s", fn,
                     tstr(ta, sa), sym, tstr(tb, sb));
            return INVALID;
        }
        break;
    case KF_OP_BIT_AND:
    case KF_OP_BIT_OR:
    case KF_OP_BIT_XOR:
        if (!kf__is_int(ta.scalar) || !kf_type_eq(ta, tb)) {
            kf__fail(k, KF_ERROR_TYPE, "%s: expects two integers of one type, got %s %s %s", fn,
                     tstr(ta, sa), sym, tstr(tb, sb));
            return INVALID;
        }
        break;
    case KF_OP_SHL:
    case KF_OP_SHR:
        if (!kf__is_int(ta.scalar) || tb.scalar != KF_SCALAR_U32 || la != lb) {
            kf__fail(k, KF_ERROR_TYPE,
                     "%s: expects an integer shifted by a u32 of as many lanes, got %s %s %s", fn,
                     tstr(ta, sa), sym, tstr(tb, sb));
            return INVALID;
        }
        break;
    default:
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT, "%s: %d is not a binary operator", fn, (int)op);
        return INVALID;
    }
    uint32_t args[2] = {ia, ib};
    return mkval(k, kf__pure(k, KF__NODE_BINARY, (uint8_t)op, result, args, 2));
}

kf_val kf_binary(kf_kernel *k, kf_op op, kf_val a, kf_val b) {
    char fn[32];
    snprintf(fn, sizeof fn, "kf_binary(%s)", kf__op_str(op));
    return binary_op(k, op, a, b, fn);
}

kf_val kf_add(kf_kernel *k, kf_val a, kf_val b) {
    return binary_op(k, KF_OP_ADD, a, b, "kf_add");
}

kf_val kf_sub(kf_kernel *k, kf_val a, kf_val b) {
    return binary_op(k, KF_OP_SUB, a, b, "kf_sub");
}

kf_val kf_mul(kf_kernel *k, kf_val a, kf_val b) {
    return binary_op(k, KF_OP_MUL, a, b, "kf_mul");
}

kf_val kf_div(kf_kernel *k, kf_val a, kf_val b) {
    return binary_op(k, KF_OP_DIV, a, b, "kf_div");
}

kf_val kf_unary(kf_kernel *k, kf_op op, kf_val a) {
    char fn[32];
    snprintf(fn, sizeof fn, "kf_unary(%s)", kf__op_str(op));
    uint32_t ia = val(k, a, fn, 1);
    if (!ia) {
        return INVALID;
    }
    kf_type t = ty(k, ia);
    char s[48];
    bool ok;
    const char *want;
    switch (op) {
    case KF_OP_NEG:
        ok = t.count == 0 && (kf__is_float(t.scalar) || t.scalar == KF_SCALAR_I32);
        want = "f32, f16 or i32 (WGSL cannot negate u32)";
        break;
    case KF_OP_NOT:
        ok = t.count == 0 && t.scalar == KF_SCALAR_BOOL;
        want = "bool";
        break;
    case KF_OP_BIT_NOT:
        ok = t.count == 0 && kf__is_int(t.scalar);
        want = "i32 or u32";
        break;
    default:
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT, "%s: %d is not a unary operator", fn, (int)op);
        return INVALID;
    }
    if (!ok) {
        kf__fail(k, KF_ERROR_TYPE, "%s: expects %s, got %s", fn, want, tstr(t, s));
        return INVALID;
    }
    return mkval(k, kf__pure(k, KF__NODE_UNARY, (uint8_t)op, t, &ia, 1));
}

/* ======================================================================================== */
/* builtin functions                                                                        */
/* ======================================================================================== */

static uint32_t fn_arity(kf_fn fn) {
    switch (fn) {
    case KF_FN_MIN:
    case KF_FN_MAX:
    case KF_FN_POW:
    case KF_FN_DOT:
        return 2;
    case KF_FN_CLAMP:
    case KF_FN_FMA:
    case KF_FN_SELECT:
        return 3;
    default:
        return 1;
    }
}

kf_val kf_call(kf_kernel *k, kf_fn fn, const kf_val *args, uint32_t count) {
    if (!kf__ok(k)) {
        return INVALID;
    }
    char name[40];
    if (fn <= KF_FN_NONE || fn > KF_FN_SELECT) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT, "kf_call: %d is not a kf_fn", (int)fn);
        return INVALID;
    }
    snprintf(name, sizeof name, "kf_call(%s)", kf__fn_str(fn));
    uint32_t arity = fn_arity(fn);
    if (count != arity || (!args && count)) {
        kf__fail(k, KF_ERROR_TYPE, "%s: expects %u argument%s, got %u", name, (unsigned)arity,
                 arity == 1 ? "" : "s", (unsigned)count);
        return INVALID;
    }
    uint32_t ids[3];
    kf_type t[3];
    for (uint32_t i = 0; i < count; i++) {
        ids[i] = val(k, args[i], name, (int)i + 1);
        if (!ids[i]) {
            return INVALID;
        }
        t[i] = ty(k, ids[i]);
    }
    char s0[48], s1[48], s2[48];
    kf_type result = t[0];
    switch (fn) {
    case KF_FN_EXP:
    case KF_FN_LOG:
    case KF_FN_TANH:
    case KF_FN_SQRT:
    case KF_FN_INVERSE_SQRT:
    case KF_FN_FLOOR:
    case KF_FN_SIN:
    case KF_FN_COS:
    case KF_FN_ERF:
        if (t[0].count || !kf__is_float(t[0].scalar)) {
            kf__fail(k, KF_ERROR_TYPE, "%s: expects a float (f32, f16 or a vector), got %s", name,
                     tstr(t[0], s0));
            return INVALID;
        }
        break;
    case KF_FN_ABS:
        if (!is_numeric(t[0])) {
            kf__fail(k, KF_ERROR_TYPE, "%s: expects a number, got %s", name, tstr(t[0], s0));
            return INVALID;
        }
        break;
    case KF_FN_MIN:
    case KF_FN_MAX:
    case KF_FN_CLAMP:
    case KF_FN_FMA:
    case KF_FN_POW: {
        bool float_only = fn == KF_FN_FMA || fn == KF_FN_POW;
        bool same = true;
        for (uint32_t i = 1; i < count; i++) {
            same = same && kf_type_eq(t[0], t[i]);
        }
        bool kind_ok =
            float_only ? (t[0].count == 0 && kf__is_float(t[0].scalar)) : is_numeric(t[0]);
        if (!same || !kind_ok) {
            kf__fail(k, KF_ERROR_TYPE, "%s: expects %s of one type, got (%s, %s%s%s)", name,
                     float_only ? "floats" : "numbers", tstr(t[0], s0), tstr(t[1], s1),
                     count > 2 ? ", " : "", count > 2 ? tstr(t[2], s2) : "");
            return INVALID;
        }
        break;
    }
    case KF_FN_DOT:
        if (!kf__type_is_vec(t[0]) || !is_numeric(t[0]) || !kf_type_eq(t[0], t[1])) {
            kf__fail(k, KF_ERROR_TYPE, "%s: expects two numeric vectors of one type, got (%s, %s)",
                     name, tstr(t[0], s0), tstr(t[1], s1));
            return INVALID;
        }
        result = kf_type_scalar(t[0].scalar);
        break;
    case KF_FN_SELECT: {
        bool ok = kf_type_eq(t[0], t[1]) && t[0].count == 0 && t[2].count == 0 &&
                  t[2].scalar == KF_SCALAR_BOOL &&
                  (kf__type_lanes(t[2]) == 1 || kf__type_lanes(t[2]) == kf__type_lanes(t[0]));
        if (!ok) {
            kf__fail(k, KF_ERROR_TYPE,
                     "%s: expects (if_false, if_true, cond) with if_false and if_true of one type "
                     "and cond a bool or a bool vector of as many lanes, got (%s, %s, %s)",
                     name, tstr(t[0], s0), tstr(t[1], s1), tstr(t[2], s2));
            return INVALID;
        }
        break;
    }
    default:
        break;
    }
    return mkval(k, kf__pure(k, KF__NODE_CALL, (uint8_t)fn, result, ids, count));
}

kf_val kf_call1(kf_kernel *k, kf_fn fn, kf_val a) {
    return kf_call(k, fn, &a, 1);
}

kf_val kf_call2(kf_kernel *k, kf_fn fn, kf_val a, kf_val b) {
    kf_val args[2] = {a, b};
    return kf_call(k, fn, args, 2);
}

kf_val kf_call3(kf_kernel *k, kf_fn fn, kf_val a, kf_val b, kf_val c) {
    kf_val args[3] = {a, b, c};
    return kf_call(k, fn, args, 3);
}

kf_val kf_select(kf_kernel *k, kf_val if_false, kf_val if_true, kf_val cond) {
    return kf_call3(k, KF_FN_SELECT, if_false, if_true, cond);
}

/* ======================================================================================== */
/* conversions and vectors                                                                  */
/* ======================================================================================== */

static bool check_target(kf_kernel *k, kf_type to, const char *fn) {
    char s[48];
    if (!kf__type_valid(to) || to.count) {
        kf__fail(k, KF_ERROR_TYPE, "%s: target type %s is not a scalar or vector type", fn,
                 tstr(to, s));
        return false;
    }
    return true;
}

kf_val kf_cast(kf_kernel *k, kf_type to, kf_val v) {
    uint32_t iv = val(k, v, "kf_cast", 1);
    if (!iv || !check_target(k, to, "kf_cast")) {
        return INVALID;
    }
    kf_type from = ty(k, iv);
    char s0[48], s1[48];
    if (from.count || kf__type_lanes(from) != kf__type_lanes(to)) {
        kf__fail(k, KF_ERROR_TYPE, "kf_cast: cannot convert %s to %s (lane counts differ)",
                 tstr(from, s0), tstr(to, s1));
        return INVALID;
    }
    if (kf_type_eq(from, to)) {
        return v;
    }
    return mkval(k, kf__pure(k, KF__NODE_CAST, 0, to, &iv, 1));
}

static uint32_t bit_size(kf_type t) {
    return kf__type_lanes(t) * (t.scalar == KF_SCALAR_F16 ? 16u : 32u);
}

kf_val kf_bitcast(kf_kernel *k, kf_type to, kf_val v) {
    uint32_t iv = val(k, v, "kf_bitcast", 1);
    if (!iv || !check_target(k, to, "kf_bitcast")) {
        return INVALID;
    }
    kf_type from = ty(k, iv);
    char s0[48], s1[48];
    bool ok = is_numeric(from) && is_numeric(to) && bit_size(from) == bit_size(to) &&
              (bit_size(to) % 32 == 0);
    if (!ok) {
        kf__fail(k, KF_ERROR_TYPE,
                 "kf_bitcast: cannot reinterpret %s as %s (both must be numeric and of one size, a "
                 "multiple of 32 bits)",
                 tstr(from, s0), tstr(to, s1));
        return INVALID;
    }
    if (kf_type_eq(from, to)) {
        return v;
    }
    return mkval(k, kf__pure(k, KF__NODE_BITCAST, 0, to, &iv, 1));
}

kf_val kf_splat(kf_kernel *k, kf_type vec, kf_val scalar) {
    uint32_t is = val(k, scalar, "kf_splat", 1);
    if (!is || !check_target(k, vec, "kf_splat")) {
        return INVALID;
    }
    kf_type from = ty(k, is);
    char s0[48], s1[48];
    if (!kf__type_is_vec(vec) || from.count || kf__type_lanes(from) != 1 ||
        from.scalar != vec.scalar) {
        kf__fail(k, KF_ERROR_TYPE,
                 "kf_splat: expects a vector type and a scalar of its lanes' "
                 "type, got %s and %s",
                 tstr(vec, s0), tstr(from, s1));
        return INVALID;
    }
    return mkval(k, kf__pure(k, KF__NODE_SPLAT, 0, vec, &is, 1));
}

kf_val kf_vec(kf_kernel *k, kf_type vec, const kf_val *lanes, uint32_t count) {
    if (!kf__ok(k) || !check_target(k, vec, "kf_vec")) {
        return INVALID;
    }
    char s0[48], s1[48];
    if (!kf__type_is_vec(vec) || count != vec.lanes || !lanes) {
        kf__fail(k, KF_ERROR_TYPE, "kf_vec: %s needs %u lanes, got %u", tstr(vec, s0),
                 (unsigned)kf__type_lanes(vec), (unsigned)count);
        return INVALID;
    }
    uint32_t ids[4];
    for (uint32_t i = 0; i < count; i++) {
        ids[i] = val(k, lanes[i], "kf_vec", (int)i + 1);
        if (!ids[i]) {
            return INVALID;
        }
        kf_type t = ty(k, ids[i]);
        if (!kf_type_eq(t, kf_type_scalar(vec.scalar))) {
            kf__fail(k, KF_ERROR_TYPE, "kf_vec: lane %u of %s is %s", (unsigned)i, tstr(vec, s0),
                     tstr(t, s1));
            return INVALID;
        }
    }
    return mkval(k, kf__pure(k, KF__NODE_VEC, 0, vec, ids, count));
}

kf_val kf_extract(kf_kernel *k, kf_val vec_or_array, uint32_t lane) {
    uint32_t iv = val(k, vec_or_array, "kf_extract", 1);
    if (!iv) {
        return INVALID;
    }
    kf_type t = ty(k, iv);
    char s[48];
    uint32_t size = t.count ? t.count : (kf__type_is_vec(t) ? kf__type_lanes(t) : 0);
    if (size == 0) {
        kf__fail(k, KF_ERROR_TYPE, "kf_extract: %s is not a vector or array", tstr(t, s));
        return INVALID;
    }
    if (lane >= size) {
        kf__fail(k, KF_ERROR_TYPE, "kf_extract: index %u is out of range for %s", (unsigned)lane,
                 tstr(t, s));
        return INVALID;
    }
    uint32_t id = kf__pure(k, KF__NODE_EXTRACT, 0, kf__type_elem(t), &iv, 1);
    if (id) {
        k->nodes[id].ref = lane;
    }
    return mkval(k, id);
}

/* ======================================================================================== */
/* builtins and subgroups                                                                   */
/* ======================================================================================== */

static uint32_t builtin_node(kf_kernel *k, kf_builtin which) {
    kf_type t = (which == KF_BUILTIN_LOCAL_INDEX || which == KF_BUILTIN_SUBGROUP_INVOCATION_ID ||
                 which == KF_BUILTIN_SUBGROUP_SIZE)
                    ? kf_type_scalar(KF_SCALAR_U32)
                    : kf_type_vec(KF_SCALAR_U32, 3);
    /* one node per builtin keeps the IR small and makes reuse obvious */
    if (k->builtin_nodes[which]) {
        return k->builtin_nodes[which];
    }
    k->uses |= KF__USES_BUILTIN;
    if (which == KF_BUILTIN_SUBGROUP_INVOCATION_ID || which == KF_BUILTIN_SUBGROUP_SIZE) {
        k->uses |= KF__USES_SUBGROUP;
    }
    k->builtin_nodes[which] = kf__pure(k, KF__NODE_BUILTIN, (uint8_t)which, t, NULL, 0);
    return k->builtin_nodes[which];
}

kf_val kf_builtin_get(kf_kernel *k, kf_builtin which) {
    if (!kf__ok(k)) {
        return INVALID;
    }
    if (which <= KF_BUILTIN_NONE || which > KF_BUILTIN_SUBGROUP_SIZE) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT, "kf_builtin_get: %d is not a kf_builtin",
                 (int)which);
        return INVALID;
    }
    return mkval(k, builtin_node(k, which));
}

static uint32_t with_hint(kf_kernel *k, uint32_t id, const char *hint) {
    if (id) {
        uint32_t nm = kf__string_add(k, hint);
        k->nodes[id].name = nm;
    }
    return id;
}

static uint32_t workgroup_linear_node(kf_kernel *k) {
    uint32_t wid = builtin_node(k, KF_BUILTIN_WORKGROUP_ID);
    uint32_t nwg = builtin_node(k, KF_BUILTIN_NUM_WORKGROUPS);
    kf_type u = kf_type_scalar(KF_SCALAR_U32);
    uint32_t wx = kf__pure(k, KF__NODE_EXTRACT, 0, u, &wid, 1);
    uint32_t wy = kf__pure(k, KF__NODE_EXTRACT, 0, u, &wid, 1);
    uint32_t nx = kf__pure(k, KF__NODE_EXTRACT, 0, u, &nwg, 1);
    if (!kf__ok(k)) {
        return 0;
    }
    k->nodes[wy].ref = 1;
    uint32_t m[2] = {wy, nx};
    uint32_t prod = kf__pure(k, KF__NODE_BINARY, KF_OP_MUL, u, m, 2);
    uint32_t s[2] = {wx, prod};
    return with_hint(k, kf__pure(k, KF__NODE_BINARY, KF_OP_ADD, u, s, 2), "wg_linear");
}

uint32_t kf__global_linear_node(kf_kernel *k) {
    uint32_t wl = workgroup_linear_node(k);
    uint32_t li = builtin_node(k, KF_BUILTIN_LOCAL_INDEX);
    uint32_t size =
        kf__lit_bits(k, KF_SCALAR_U32, k->workgroup[0] * k->workgroup[1] * k->workgroup[2]);
    if (!kf__ok(k)) {
        return 0;
    }
    kf_type u = kf_type_scalar(KF_SCALAR_U32);
    uint32_t m[2] = {wl, size};
    uint32_t base = kf__pure(k, KF__NODE_BINARY, KF_OP_MUL, u, m, 2);
    uint32_t s[2] = {base, li};
    return with_hint(k, kf__pure(k, KF__NODE_BINARY, KF_OP_ADD, u, s, 2), "global_linear");
}

kf_val kf_workgroup_linear(kf_kernel *k) {
    if (!kf__ok(k)) {
        return INVALID;
    }
    return mkval(k, workgroup_linear_node(k));
}

kf_val kf_global_linear(kf_kernel *k) {
    if (!kf__ok(k)) {
        return INVALID;
    }
    return mkval(k, kf__global_linear_node(k));
}

static const char *stage_rule =
    "a stage runs per element under a bounds check, which is not uniform control flow; build a "
    "producer (input void) for workgroup-cooperative code";

kf_val kf_subgroup(kf_kernel *k, kf_subgroup_op op, kf_val v, kf_val lane) {
    if (!kf__ok(k)) {
        return INVALID;
    }
    if (op <= KF_SUBGROUP_NONE || op > KF_SUBGROUP_BROADCAST) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT, "kf_subgroup: %d is not a kf_subgroup_op", (int)op);
        return INVALID;
    }
    const char *fn = kf__subgroup_str(op);
    if (is_stage(k)) {
        kf__fail(k, KF_ERROR_TYPE, "%s: %s", fn, stage_rule);
        return INVALID;
    }
    uint32_t iv = val(k, v, fn, 1);
    if (!iv) {
        return INVALID;
    }
    kf_type t = ty(k, iv);
    char s0[48], s1[48];
    if (!is_numeric(t)) {
        kf__fail(k, KF_ERROR_TYPE, "%s: expects a number or numeric vector, got %s", fn,
                 tstr(t, s0));
        return INVALID;
    }
    uint32_t args[2] = {iv, 0};
    uint32_t nargs = 1;
    if (op == KF_SUBGROUP_SHUFFLE || op == KF_SUBGROUP_BROADCAST) {
        uint32_t il = val(k, lane, fn, 2);
        if (!il) {
            return INVALID;
        }
        kf_type lt = ty(k, il);
        if (!kf__is_int(lt.scalar) || lt.count || kf__type_lanes(lt) != 1) {
            kf__fail(k, KF_ERROR_TYPE, "%s: the lane must be an i32 or u32, got %s", fn,
                     tstr(lt, s1));
            return INVALID;
        }
        if (op == KF_SUBGROUP_BROADCAST && k->nodes[il].kind != KF__NODE_LIT) {
            kf__fail(k, KF_ERROR_TYPE,
                     "%s: the lane must be a literal (WGSL needs a constant); use "
                     "KF_SUBGROUP_SHUFFLE for a computed lane",
                     fn);
            return INVALID;
        }
        args[1] = il;
        nargs = 2;
    }
    static const char *const hints[] = {"", "sg_sum", "sg_max", "sg_shuffled", "sg_broadcast"};
    k->uses |= KF__USES_SUBGROUP;
    return mkval(k,
                 kf__materialize(k, KF__NODE_SUBGROUP, (uint8_t)op, t, args, nargs, 0, hints[op]));
}

/* ======================================================================================== */
/* bindings, overrides, workgroup memory                                                    */
/* ======================================================================================== */

static bool buffer_elem_ok(kf_type t) {
    return kf__type_valid(t) && t.scalar != KF_SCALAR_BOOL && t.count == 0;
}

static bool binding_name_ok(kf_kernel *k, const char *name, const char *fn) {
    if (!name || !*name) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT, "%s: a binding needs a name", fn);
        return false;
    }
    if (is_stage(k) && !strcmp(name, "in")) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT,
                 "%s: 'in' is the stage's input binding; choose another name", fn);
        return false;
    }
    if (k->output.scalar != KF_SCALAR_VOID && !strcmp(name, "out")) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT,
                 "%s: 'out' is the kernel's output binding (its store phase); choose another name",
                 fn);
        return false;
    }
    if (kf__binding_find(k, name)) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT, "%s: a binding named '%s' already exists", fn, name);
        return false;
    }
    return true;
}

static kf_binding mkbinding(const kf_kernel *k, uint32_t id) {
    kf_binding b = {id, id ? k->tag : 0};
    return b;
}

kf_binding kf_kernel_storage(kf_kernel *k, const char *name, kf_type elem, kf_access access) {
    kf_binding none = {0, 0};
    if (!kf__ok(k) || !binding_name_ok(k, name, "kf_kernel_storage")) {
        return none;
    }
    char s[48];
    if (!buffer_elem_ok(elem)) {
        kf__fail(k, KF_ERROR_TYPE,
                 "kf_kernel_storage: '%s': element type %s cannot be stored in a buffer (use a "
                 "scalar or vector of f32, f16, i32 or u32)",
                 name, tstr(elem, s));
        return none;
    }
    if (access != KF_ACCESS_READ && access != KF_ACCESS_READ_WRITE) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT, "kf_kernel_storage: '%s': %d is not a kf_access",
                 name, (int)access);
        return none;
    }
    if (kf__type_uses_f16(elem)) {
        k->uses |= KF__USES_F16;
    }
    kf_binding_kind kind =
        access == KF_ACCESS_READ ? KF_BINDING_STORAGE_READ : KF_BINDING_STORAGE_READ_WRITE;
    return mkbinding(k, kf__binding_new(k, name, kind, elem, KF__ROLE_DECLARED));
}

kf_binding kf_kernel_uniform(kf_kernel *k, const char *name, kf_type type) {
    kf_binding none = {0, 0};
    if (!kf__ok(k) || !binding_name_ok(k, name, "kf_kernel_uniform")) {
        return none;
    }
    char s[48];
    bool ok = kf__type_valid(type) && type.scalar != KF_SCALAR_BOOL &&
              type.scalar != KF_SCALAR_F16 && (type.count == 0 || kf__type_lanes(type) == 4);
    if (!ok) {
        kf__fail(k, KF_ERROR_TYPE,
                 "kf_kernel_uniform: '%s': type %s is not allowed in a uniform buffer (use a "
                 "scalar or vector of f32, i32 or u32, or an array of vec4: uniform arrays need "
                 "a 16-byte stride)",
                 name, tstr(type, s));
        return none;
    }
    return mkbinding(k, kf__binding_new(k, name, KF_BINDING_UNIFORM, type, KF__ROLE_DECLARED));
}

kf_val kf_kernel_override(kf_kernel *k, const char *name, kf_type type, double default_value) {
    if (!kf__ok(k)) {
        return INVALID;
    }
    char s[48];
    if (!name || !kf__wgsl_identifier_ok(name) || !strncmp(name, "kf_", 3)) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT,
                 "kf_kernel_override: '%s' is not usable as an override name (a WGSL identifier, "
                 "not a reserved word, not starting with kf_)",
                 name ? name : "(null)");
        return INVALID;
    }
    if (!kf__type_valid(type) || type.count || kf__type_lanes(type) != 1) {
        kf__fail(k, KF_ERROR_TYPE, "kf_kernel_override: '%s': type %s is not a scalar", name,
                 tstr(type, s));
        return INVALID;
    }
    if (kf__override_find(k, name)) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT, "kf_kernel_override: '%s' is declared twice", name);
        return INVALID;
    }
    double v = default_value;
    bool in_range = true;
    switch (type.scalar) {
    case KF_SCALAR_U32:
        in_range = v == floor(v) && v >= 0 && v <= 4294967295.0;
        break;
    case KF_SCALAR_I32:
        in_range = v == floor(v) && v >= -2147483648.0 && v <= 2147483647.0;
        break;
    case KF_SCALAR_F32:
        in_range = isfinite(v) && fabs(v) <= 3.4028234663852886e38;
        break;
    case KF_SCALAR_F16:
        in_range = isfinite(v) && fabs(v) <= 65504.0;
        break;
    default:
        break;
    }
    if (!in_range) {
        kf__fail(k, KF_ERROR_TYPE, "kf_kernel_override: '%s': default %g is not a %s", name, v,
                 tstr(type, s));
        return INVALID;
    }
    uint32_t o = kf__override_new(k, name, type, true, v);
    if (!o) {
        return INVALID;
    }
    uint32_t id = kf__pure(k, KF__NODE_OVERRIDE, 0, type, NULL, 0);
    if (id) {
        k->nodes[id].ref = o;
    }
    return mkval(k, id);
}

static uint32_t binding_id(kf_kernel *k, kf_binding b, const char *fn) {
    if (!kf__ok(k)) {
        return 0;
    }
    if (b.kernel != k->tag || b.id == 0 || b.id >= k->binding_count) {
        kf__fail(k,
                 b.kernel == k->tag || (b.id == 0 && b.kernel == 0) ? KF_ERROR_INVALID_ARGUMENT
                                                                    : KF_ERROR_TYPE,
                 "%s: %s", fn,
                 b.id == 0 && b.kernel == 0 ? "the binding is the invalid handle"
                                            : "a binding from another kernel");
        return 0;
    }
    return b.id;
}

static bool index_ok(kf_kernel *k, uint32_t idx, const char *fn, const char *what) {
    kf_type t = ty(k, idx);
    char s[48];
    if (t.count || kf__type_lanes(t) != 1 || !kf__is_int(t.scalar)) {
        kf__fail(k, KF_ERROR_TYPE, "%s: the index into %s must be an i32 or u32, got %s", fn, what,
                 tstr(t, s));
        return false;
    }
    return true;
}

/* WGSL refuses a constant index past a fixed-size array when it compiles: say so here. */
static bool const_index_ok(kf_kernel *k, uint32_t idx, uint32_t count, const char *fn,
                           const char *what) {
    const kf__ir_node *n = &k->nodes[idx];
    if (n->kind != KF__NODE_LIT) {
        return true;
    }
    int64_t i = n->type.scalar == KF_SCALAR_I32 ? (int64_t)(int32_t)n->bits : (int64_t)n->bits;
    if (i < 0 || i >= (int64_t)count) {
        kf__fail(k, KF_ERROR_TYPE, "%s: index %lld is out of range for %s (%u elements)", fn,
                 (long long)i, what, (unsigned)count);
        return false;
    }
    return true;
}

static char *hint_with(char *buf, size_t size, const char *base, const char *suffix) {
    snprintf(buf, size, "%s%s", base, suffix);
    return buf;
}

kf_val kf_load(kf_kernel *k, kf_binding b, kf_val index) {
    uint32_t ib = binding_id(k, b, "kf_load");
    if (!ib) {
        return INVALID;
    }
    const kf__binding *bd = &k->bindings[ib];
    char what[160], hint[80];
    snprintf(what, sizeof what, "'%s'", kf__str(k, bd->name));
    hint_with(hint, sizeof hint, kf__str(k, bd->name), "_v");
    kf_type type = bd->type;
    uint32_t ii = 0;
    if (bd->kind == KF_BINDING_UNIFORM && index.id == 0 && index.kernel == 0) {
        /* the whole uniform */
    } else {
        if (bd->kind == KF_BINDING_UNIFORM && type.count == 0) {
            kf__fail(k, KF_ERROR_TYPE,
                     "kf_load: uniform %s is not an array: pass the invalid index {0, 0} to read "
                     "it whole",
                     what);
            return INVALID;
        }
        ii = val(k, index, "kf_load", 2);
        if (!ii || !index_ok(k, ii, "kf_load", what) ||
            (bd->kind == KF_BINDING_UNIFORM &&
             !const_index_ok(k, ii, bd->type.count, "kf_load", what))) {
            return INVALID;
        }
        if (bd->kind == KF_BINDING_UNIFORM) {
            type = kf__type_elem(type); /* an element of the uniform array */
        }
    }
    return mkval(k, kf__materialize(k, KF__NODE_LOAD, 0, type, &ii, ii ? 1u : 0u, ib, hint));
}

void kf_store(kf_kernel *k, kf_binding b, kf_val index, kf_val value) {
    uint32_t ib = binding_id(k, b, "kf_store");
    if (!ib) {
        return;
    }
    const kf__binding *bd = &k->bindings[ib];
    const char *name = kf__str(k, bd->name);
    if (bd->kind != KF_BINDING_STORAGE_READ_WRITE) {
        kf__fail(k, KF_ERROR_TYPE, "kf_store: binding '%s' is %s", name,
                 bd->kind == KF_BINDING_UNIFORM ? "a uniform (read-only)"
                                                : "read-only (declared KF_ACCESS_READ)");
        return;
    }
    char what[160];
    snprintf(what, sizeof what, "'%s'", name);
    uint32_t ii = val(k, index, "kf_store", 2);
    if (!ii || !index_ok(k, ii, "kf_store", what)) {
        return;
    }
    uint32_t iv = val(k, value, "kf_store", 3);
    if (!iv) {
        return;
    }
    char s0[48], s1[48];
    if (!kf_type_eq(ty(k, iv), bd->type)) {
        kf__fail(k, KF_ERROR_TYPE, "kf_store: '%s' holds %s, the value is %s", name,
                 tstr(bd->type, s0), tstr(ty(k, iv), s1));
        return;
    }
    kf__emit_stmt(k, KF__STMT_STORE, ib, ii, iv, 0);
}

kf_val kf_binding_length(kf_kernel *k, kf_binding b) {
    uint32_t ib = binding_id(k, b, "kf_binding_length");
    if (!ib) {
        return INVALID;
    }
    const kf__binding *bd = &k->bindings[ib];
    if (bd->kind == KF_BINDING_UNIFORM) {
        kf__fail(k, KF_ERROR_TYPE,
                 "kf_binding_length: '%s' is a uniform; only storage arrays have a length",
                 kf__str(k, bd->name));
        return INVALID;
    }
    char hint[80];
    hint_with(hint, sizeof hint, kf__str(k, bd->name), "_len");
    return mkval(k, kf__materialize(k, KF__NODE_LENGTH, 0, kf_type_scalar(KF_SCALAR_U32), NULL, 0,
                                    ib, hint));
}

static kf_shared mkshared(const kf_kernel *k, uint32_t id) {
    kf_shared s = {id, id ? k->tag : 0};
    return s;
}

kf_shared kf_kernel_workgroup(kf_kernel *k, const char *name, kf_type elem, uint32_t count) {
    if (!kf__ok(k)) {
        return mkshared(k, 0);
    }
    char s[48];
    const char *nm = name && *name ? name : "wg_mem";
    if (!kf__type_valid(elem) || elem.count) {
        kf__fail(k, KF_ERROR_TYPE,
                 "kf_kernel_workgroup: '%s': element type %s is not a scalar or vector", nm,
                 tstr(elem, s));
        return mkshared(k, 0);
    }
    if (count == 0 || count > (1u << 20)) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT,
                 "kf_kernel_workgroup: '%s': %u elements (must be 1 to 1048576)", nm,
                 (unsigned)count);
        return mkshared(k, 0);
    }
    if (kf__type_uses_f16(elem)) {
        k->uses |= KF__USES_F16;
    }
    return mkshared(k, kf__shared_new(k, nm, elem, count));
}

static uint32_t shared_id(kf_kernel *k, kf_shared s, const char *fn) {
    if (!kf__ok(k)) {
        return 0;
    }
    if (s.kernel != k->tag || s.id == 0 || s.id >= k->shared_count) {
        kf__fail(k, s.id == 0 && s.kernel == 0 ? KF_ERROR_INVALID_ARGUMENT : KF_ERROR_TYPE,
                 "%s: %s", fn,
                 s.id == 0 && s.kernel == 0 ? "the workgroup array is the invalid handle"
                                            : "a workgroup array from another kernel");
        return 0;
    }
    return s.id;
}

kf_val kf_shared_load(kf_kernel *k, kf_shared s, kf_val index) {
    uint32_t is = shared_id(k, s, "kf_shared_load");
    if (!is) {
        return INVALID;
    }
    const char *name = kf__str(k, k->shareds[is].name);
    char what[160], hint[80];
    snprintf(what, sizeof what, "'%s'", name);
    uint32_t ii = val(k, index, "kf_shared_load", 2);
    if (!ii || !index_ok(k, ii, "kf_shared_load", what) ||
        !const_index_ok(k, ii, k->shareds[is].count, "kf_shared_load", what)) {
        return INVALID;
    }
    hint_with(hint, sizeof hint, name, "_v");
    return mkval(
        k, kf__materialize(k, KF__NODE_SHARED_LOAD, 0, k->shareds[is].elem, &ii, 1, is, hint));
}

/* kf_shared_store (lane 0: the whole element) and kf_shared_store_lane (lane: a u32/i32
 * value choosing the vector lane). */
static void shared_store(kf_kernel *k, const char *fn, kf_shared s, kf_val index, kf_val lane,
                         kf_val value) {
    uint32_t is = shared_id(k, s, fn);
    if (!is) {
        return;
    }
    const char *name = kf__str(k, k->shareds[is].name);
    char what[160];
    snprintf(what, sizeof what, "'%s'", name);
    uint32_t ii = val(k, index, fn, 2);
    if (!ii || !index_ok(k, ii, fn, what) ||
        !const_index_ok(k, ii, k->shareds[is].count, fn, what)) {
        return;
    }
    kf_type want = k->shareds[is].elem;
    char s0[48], s1[48];
    uint32_t il = 0;
    if (lane.id) {
        il = val(k, lane, fn, 3);
        if (!il) {
            return;
        }
        if (want.lanes < 2) {
            kf__fail(k, KF_ERROR_TYPE, "%s: '%s' holds %s, which has no lanes", fn, name,
                     tstr(want, s0));
            return;
        }
        snprintf(what, sizeof what, "the lanes of '%s'", name);
        if (!index_ok(k, il, fn, what) || !const_index_ok(k, il, want.lanes, fn, what)) {
            return;
        }
        want.lanes = 1;
    }
    uint32_t iv = val(k, value, fn, il ? 4 : 3);
    if (!iv) {
        return;
    }
    if (!kf_type_eq(ty(k, iv), want)) {
        kf__fail(k, KF_ERROR_TYPE, "%s: '%s' %s %s, the value is %s", fn, name,
                 il ? "has lanes of" : "holds", tstr(want, s0), tstr(ty(k, iv), s1));
        return;
    }
    kf__emit_stmt(k, KF__STMT_SHARED_STORE, is, ii, iv, il);
}

void kf_shared_store(kf_kernel *k, kf_shared s, kf_val index, kf_val value) {
    shared_store(k, "kf_shared_store", s, index, (kf_val){0}, value);
}

void kf_shared_store_lane(kf_kernel *k, kf_shared s, kf_val index, kf_val lane, kf_val value) {
    if (!lane.id && kf__ok(k)) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT,
                 "kf_shared_store_lane: argument 3 (lane) is invalid");
        return;
    }
    shared_store(k, "kf_shared_store_lane", s, index, lane, value);
}

kf_val kf_shared_load_uniform(kf_kernel *k, kf_shared s, kf_val index) {
    static const char fn[] = "kf_shared_load_uniform";
    uint32_t is = shared_id(k, s, fn);
    if (!is) {
        return INVALID;
    }
    if (is_stage(k)) {
        kf__fail(k, KF_ERROR_TYPE, "%s: %s", fn, stage_rule);
        return INVALID;
    }
    const char *name = kf__str(k, k->shareds[is].name);
    char what[160], hint[80];
    snprintf(what, sizeof what, "'%s'", name);
    uint32_t ii = val(k, index, fn, 2);
    if (!ii || !index_ok(k, ii, fn, what) ||
        !const_index_ok(k, ii, k->shareds[is].count, fn, what)) {
        return INVALID;
    }
    if (k->nodes[ii].kind != KF__NODE_LIT) {
        kf__fail(k, KF_ERROR_TYPE,
                 "%s: argument 2 (index) must be a literal (WGSL needs the pointer uniform)", fn);
        return INVALID;
    }
    k->uses |= KF__USES_BARRIER;
    uint32_t b = kf__emit_stmt(k, KF__STMT_BARRIER, 0, 0, 0, 0);
    if (b) {
        k->stmts[b].flags = KF__BARRIER_OF_UNIFORM_LOAD;
    }
    hint_with(hint, sizeof hint, name, "_u");
    return mkval(k, kf__materialize(k, KF__NODE_SHARED_LOAD, KF__SHARED_LOAD_UNIFORM,
                                    k->shareds[is].elem, &ii, 1, is, hint));
}

void kf_barrier(kf_kernel *k) {
    if (!kf__ok(k)) {
        return;
    }
    if (is_stage(k)) {
        kf__fail(k, KF_ERROR_TYPE, "kf_barrier: %s", stage_rule);
        return;
    }
    k->uses |= KF__USES_BARRIER;
    kf__emit_stmt(k, KF__STMT_BARRIER, 0, 0, 0, 0);
}

/* ======================================================================================== */
/* subgroup matrices                                                                        */
/* ======================================================================================== */

static const char *sgmat_kind_str(uint32_t kind) {
    static const char *const kinds[] = {"?", "left", "right", "result"};
    return kinds[kind <= KF_SGMAT_RESULT ? kind : 0];
}

static kf_sgmat mksgmat(const kf_kernel *k, uint32_t id) {
    kf_sgmat m = {id, id ? k->tag : 0};
    return m;
}

kf_sgmat kf_sgmat_declare(kf_kernel *k, const char *name, kf_sgmat_kind kind, kf_scalar component,
                          uint32_t cols, uint32_t rows) {
    if (!kf__ok(k)) {
        return mksgmat(k, 0);
    }
    const char *nm = name && *name ? name : "mat";
    if (is_stage(k)) {
        kf__fail(k, KF_ERROR_TYPE, "kf_sgmat_declare: '%s': %s", nm, stage_rule);
        return mksgmat(k, 0);
    }
    if (kind <= KF_SGMAT_NONE || kind > KF_SGMAT_RESULT) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT, "kf_sgmat_declare: '%s': %d is not a kf_sgmat_kind",
                 nm, (int)kind);
        return mksgmat(k, 0);
    }
    if (component != KF_SCALAR_F32 && component != KF_SCALAR_F16 && component != KF_SCALAR_I32 &&
        component != KF_SCALAR_U32) {
        kf__fail(k, KF_ERROR_TYPE,
                 "kf_sgmat_declare: '%s': a subgroup matrix holds f32, f16, i32 or u32, not %s", nm,
                 kf__scalar_str(component));
        return mksgmat(k, 0);
    }
    if (cols == 0 || rows == 0 || cols > 64 || rows > 64) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT,
                 "kf_sgmat_declare: '%s': %u cols x %u rows (each must be 1 to 64)", nm,
                 (unsigned)cols, (unsigned)rows);
        return mksgmat(k, 0);
    }
    if (component == KF_SCALAR_F16) {
        k->uses |= KF__USES_F16;
    }
    k->uses |= KF__USES_SUBGROUP;
    uint32_t id = kf__sgmat_var_new(k, nm, kind, component, cols, rows);
    if (!id) {
        return mksgmat(k, 0);
    }
    kf__emit_stmt(k, KF__STMT_VAR, id, 0, 0, 0);
    return mksgmat(k, kf__ok(k) ? id : 0);
}

static uint32_t sgmat_id(kf_kernel *k, kf_sgmat m, const char *fn, int arg) {
    if (!kf__ok(k)) {
        return 0;
    }
    if (m.kernel != k->tag || m.id == 0 || m.id >= k->var_count || !k->vars[m.id].sgmat) {
        kf__fail(k, m.id == 0 && m.kernel == 0 ? KF_ERROR_INVALID_ARGUMENT : KF_ERROR_TYPE,
                 "%s: argument %d is %s", fn, arg,
                 m.id == 0 && m.kernel == 0 ? "the invalid subgroup matrix"
                 : m.kernel != k->tag       ? "a subgroup matrix from another kernel"
                                            : "not a subgroup matrix of this kernel");
        return 0;
    }
    if (!kf__block_within(k, k->cur_block, k->vars[m.id].scope)) {
        kf__fail(k, KF_ERROR_TYPE,
                 "%s: subgroup matrix '%s' is used outside the block that declares it", fn,
                 kf__str(k, k->vars[m.id].name));
        return 0;
    }
    if (is_stage(k)) {
        kf__fail(k, KF_ERROR_TYPE, "%s: %s", fn, stage_rule);
        return 0;
    }
    return m.id;
}

/* The offset or stride of a load or store: a u32 value usable here. */
static uint32_t sgmat_u32(kf_kernel *k, kf_val v, const char *fn, int arg, const char *what) {
    uint32_t id = val(k, v, fn, arg);
    if (!id) {
        return 0;
    }
    char s[48];
    if (!kf_type_eq(ty(k, id), kf_type_scalar(KF_SCALAR_U32))) {
        kf__fail(k, KF_ERROR_TYPE, "%s: the %s must be a u32, got %s", fn, what,
                 tstr(ty(k, id), s));
        return 0;
    }
    return id;
}

/* Shared checks of loads and stores; mem is the workgroup array or binding already resolved. */
static void sgmat_access(kf_kernel *k, const char *fn, bool store, uint32_t im, bool storage,
                         uint32_t mem, kf_val offset, bool col_major, kf_val stride) {
    const kf__var *mv = &k->vars[im];
    kf_type elem = storage ? k->bindings[mem].type : k->shareds[mem].elem;
    const char *mname = kf__str(k, mv->name);
    const char *src = kf__str(k, storage ? k->bindings[mem].name : k->shareds[mem].name);
    char s0[48], s1[80];
    if (!kf_type_eq(elem, mv->type)) {
        kf__fail(k, KF_ERROR_TYPE, "%s: '%s' holds %s, the subgroup matrix '%s' (%s) needs %s", fn,
                 src, tstr(elem, s0), mname, kf__sgmat_type_str(mv, s1, sizeof s1),
                 kf__scalar_str(mv->type.scalar));
        return;
    }
    if (storage && store && k->bindings[mem].kind != KF_BINDING_STORAGE_READ_WRITE) {
        kf__fail(k, KF_ERROR_TYPE, "%s: binding '%s' is read-only (declared KF_ACCESS_READ)", fn,
                 src);
        return;
    }
    if (storage && k->bindings[mem].kind == KF_BINDING_UNIFORM) {
        kf__fail(k, KF_ERROR_TYPE, "%s: '%s' is a uniform; subgroup matrices use storage arrays",
                 fn, src);
        return;
    }
    uint32_t io = sgmat_u32(k, offset, fn, store ? 2 : 4, "offset");
    uint32_t is = io ? sgmat_u32(k, stride, fn, store ? 5 : 6, "stride") : 0;
    if (!is) {
        return;
    }
    uint32_t least = col_major ? mv->rows : mv->cols;
    const kf__ir_node *sn = &k->nodes[is];
    if (sn->kind == KF__NODE_LIT && sn->bits < least) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT, "%s: stride %u is less than the %u %s of '%s' (%s)",
                 fn, (unsigned)sn->bits, (unsigned)least, col_major ? "rows" : "cols", mname,
                 col_major ? "column-major" : "row-major");
        return;
    }
    uint32_t st =
        kf__emit_stmt(k, store ? KF__STMT_SGMAT_STORE : KF__STMT_SGMAT_LOAD, im, io, is, 0);
    if (st) {
        k->stmts[st].d = mem;
        k->stmts[st].flags =
            (uint8_t)((col_major ? KF__SGMAT_COL_MAJOR : 0u) | (storage ? KF__SGMAT_STORAGE : 0u));
    }
}

void kf_sgmat_load(kf_kernel *k, kf_sgmat m, kf_shared src, kf_val offset, bool col_major,
                   kf_val stride) {
    uint32_t im = sgmat_id(k, m, "kf_sgmat_load", 2);
    uint32_t is = im ? shared_id(k, src, "kf_sgmat_load") : 0;
    if (is) {
        sgmat_access(k, "kf_sgmat_load", false, im, false, is, offset, col_major, stride);
    }
}

void kf_sgmat_load_storage(kf_kernel *k, kf_sgmat m, kf_binding src, kf_val offset, bool col_major,
                           kf_val stride) {
    uint32_t im = sgmat_id(k, m, "kf_sgmat_load_storage", 2);
    uint32_t ib = im ? binding_id(k, src, "kf_sgmat_load_storage") : 0;
    if (ib) {
        sgmat_access(k, "kf_sgmat_load_storage", false, im, true, ib, offset, col_major, stride);
    }
}

void kf_sgmat_store(kf_kernel *k, kf_shared dst, kf_val offset, kf_sgmat m, bool col_major,
                    kf_val stride) {
    uint32_t im = sgmat_id(k, m, "kf_sgmat_store", 4);
    uint32_t is = im ? shared_id(k, dst, "kf_sgmat_store") : 0;
    if (is) {
        sgmat_access(k, "kf_sgmat_store", true, im, false, is, offset, col_major, stride);
    }
}

void kf_sgmat_store_storage(kf_kernel *k, kf_binding dst, kf_val offset, kf_sgmat m, bool col_major,
                            kf_val stride) {
    uint32_t im = sgmat_id(k, m, "kf_sgmat_store_storage", 4);
    uint32_t ib = im ? binding_id(k, dst, "kf_sgmat_store_storage") : 0;
    if (ib) {
        sgmat_access(k, "kf_sgmat_store_storage", true, im, true, ib, offset, col_major, stride);
    }
}

static void sgmat_product(kf_kernel *k, kf_sgmat acc, kf_sgmat left, kf_sgmat right, bool fresh) {
    const char *fn = fresh ? "kf_sgmat_mul" : "kf_sgmat_mma";
    uint32_t ia = sgmat_id(k, acc, fn, 2);
    uint32_t il = ia ? sgmat_id(k, left, fn, 3) : 0;
    uint32_t ir = il ? sgmat_id(k, right, fn, 4) : 0;
    if (!ir) {
        return;
    }
    const kf__var *a = &k->vars[ia], *l = &k->vars[il], *r = &k->vars[ir];
    char s0[80], s1[80], s2[80];
    if (a->sgmat != KF_SGMAT_RESULT || l->sgmat != KF_SGMAT_LEFT || r->sgmat != KF_SGMAT_RIGHT) {
        kf__fail(k, KF_ERROR_TYPE,
                 "%s: expects a result, a left and a right matrix, got %s '%s', %s '%s', %s '%s'",
                 fn, sgmat_kind_str(a->sgmat), kf__str(k, a->name), sgmat_kind_str(l->sgmat),
                 kf__str(k, l->name), sgmat_kind_str(r->sgmat), kf__str(k, r->name));
        return;
    }
    bool shapes = l->rows == a->rows && r->cols == a->cols && l->cols == r->rows;
    if (!shapes || l->type.scalar != r->type.scalar) {
        kf__fail(k, KF_ERROR_TYPE,
                 "%s: %s += %s * %s does not fit (M x K times K x N into M x N, "
                 "left and right of one component type)",
                 fn, kf__sgmat_type_str(a, s0, sizeof s0), kf__sgmat_type_str(l, s1, sizeof s1),
                 kf__sgmat_type_str(r, s2, sizeof s2));
        return;
    }
    uint32_t st = kf__emit_stmt(k, KF__STMT_SGMAT_MMA, ia, 0, 0, 0);
    if (st) {
        k->stmts[st].d = il;
        k->stmts[st].e = ir;
        k->stmts[st].flags = fresh ? KF__SGMAT_FRESH : 0;
    }
}

void kf_sgmat_mma(kf_kernel *k, kf_sgmat acc, kf_sgmat left, kf_sgmat right) {
    sgmat_product(k, acc, left, right, false);
}

void kf_sgmat_mul(kf_kernel *k, kf_sgmat acc, kf_sgmat left, kf_sgmat right) {
    sgmat_product(k, acc, left, right, true);
}

/* ======================================================================================== */
/* statements                                                                               */
/* ======================================================================================== */

kf_val kf_let(kf_kernel *k, const char *name, kf_val v) {
    uint32_t iv = val(k, v, "kf_let", 1);
    if (!iv) {
        return INVALID;
    }
    return mkval(
        k, kf__materialize(k, KF__NODE_NAMED, 0, ty(k, iv), &iv, 1, 0, name && *name ? name : "t"));
}

static kf_var mkvar(const kf_kernel *k, uint32_t id) {
    kf_var v = {id, id ? k->tag : 0};
    return v;
}

kf_var kf_declare(kf_kernel *k, const char *name, kf_type type, kf_val init) {
    if (!kf__ok(k)) {
        return mkvar(k, 0);
    }
    char s0[48], s1[48];
    if (!kf__type_valid(type)) {
        kf__fail(k, KF_ERROR_TYPE, "kf_declare: '%s': %s is not a value type", name ? name : "var",
                 tstr(type, s0));
        return mkvar(k, 0);
    }
    uint32_t ii = 0;
    if (init.id != 0 || init.kernel != 0) {
        ii = val(k, init, "kf_declare", 2);
        if (!ii) {
            return mkvar(k, 0);
        }
        if (!kf_type_eq(ty(k, ii), type)) {
            kf__fail(k, KF_ERROR_TYPE, "kf_declare: '%s' is %s, its initial value is %s",
                     name ? name : "var", tstr(type, s0), tstr(ty(k, ii), s1));
            return mkvar(k, 0);
        }
    }
    if (kf__type_uses_f16(type)) {
        k->uses |= KF__USES_F16;
    }
    uint32_t id = kf__var_new(k, name && *name ? name : "v", type);
    if (!id) {
        return mkvar(k, 0);
    }
    kf__emit_stmt(k, KF__STMT_VAR, id, ii, 0, 0);
    return mkvar(k, kf__ok(k) ? id : 0);
}

static uint32_t var_id(kf_kernel *k, kf_var v, const char *fn) {
    if (!kf__ok(k)) {
        return 0;
    }
    if (v.kernel != k->tag || v.id == 0 || v.id >= k->var_count) {
        kf__fail(k, v.id == 0 && v.kernel == 0 ? KF_ERROR_INVALID_ARGUMENT : KF_ERROR_TYPE,
                 "%s: %s", fn,
                 v.id == 0 && v.kernel == 0 ? "the variable is the invalid handle"
                                            : "a variable from another kernel");
        return 0;
    }
    if (!kf__block_within(k, k->cur_block, k->vars[v.id].scope)) {
        kf__fail(k, KF_ERROR_TYPE, "%s: variable '%s' is used outside the block that declares it",
                 fn, kf__str(k, k->vars[v.id].name));
        return 0;
    }
    if (k->vars[v.id].sgmat) {
        kf__fail(k, KF_ERROR_TYPE,
                 "%s: '%s' is a subgroup matrix; use kf_sgmat_load, kf_sgmat_store and "
                 "kf_sgmat_mma",
                 fn, kf__str(k, k->vars[v.id].name));
        return 0;
    }
    return v.id;
}

void kf_assign(kf_kernel *k, kf_var var, kf_val value) {
    uint32_t id = var_id(k, var, "kf_assign");
    if (!id) {
        return;
    }
    uint32_t iv = val(k, value, "kf_assign", 2);
    if (!iv) {
        return;
    }
    char s0[48], s1[48];
    if (!kf_type_eq(ty(k, iv), k->vars[id].type)) {
        kf__fail(k, KF_ERROR_TYPE, "kf_assign: '%s' is %s, the value is %s",
                 kf__str(k, k->vars[id].name), tstr(k->vars[id].type, s0), tstr(ty(k, iv), s1));
        return;
    }
    kf__emit_stmt(k, KF__STMT_ASSIGN, id, iv, 0, 0);
}

kf_val kf_read(kf_kernel *k, kf_var var) {
    uint32_t id = var_id(k, var, "kf_read");
    if (!id) {
        return INVALID;
    }
    char hint[80];
    hint_with(hint, sizeof hint, kf__str(k, k->vars[id].name), "_v");
    return mkval(k, kf__materialize(k, KF__NODE_READ, 0, k->vars[id].type, NULL, 0, id, hint));
}

static bool cond_ok(kf_kernel *k, uint32_t c, const char *fn) {
    kf_type t = ty(k, c);
    char s[48];
    if (!kf_type_eq(t, kf_type_scalar(KF_SCALAR_BOOL))) {
        kf__fail(k, KF_ERROR_TYPE, "%s: the condition must be a bool, got %s", fn, tstr(t, s));
        return false;
    }
    return true;
}

void kf_if(kf_kernel *k, kf_val cond) {
    uint32_t c = val(k, cond, "kf_if", 1);
    if (!c || !cond_ok(k, c, "kf_if")) {
        return;
    }
    kf__open_if(k, c);
}

void kf_else(kf_kernel *k) {
    if (!kf__ok(k)) {
        return;
    }
    const kf__block *b = &k->blocks[k->cur_block];
    const kf__stmt *owner = &k->stmts[b->owner];
    if (k->cur_block == 1 || owner->kind != KF__STMT_IF) {
        char open[64];
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT, "kf_else: the innermost open block is %s, not an if",
                 k->cur_block == 1 ? "the kernel's body"
                                   : kf__open_block_str(k, open, sizeof open));
        return;
    }
    if (owner->else_body) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT, "kf_else: this if already has an else");
        return;
    }
    kf__open_else(k, b->owner);
}

kf_val kf_for(kf_kernel *k, const char *name, kf_val start, kf_val end, kf_val step) {
    uint32_t a = val(k, start, "kf_for", 2);
    uint32_t b = a ? val(k, end, "kf_for", 3) : 0;
    uint32_t c = b ? val(k, step, "kf_for", 4) : 0;
    if (!c) {
        return INVALID;
    }
    kf_type ta = ty(k, a), tb = ty(k, b), tc = ty(k, c);
    char s0[48], s1[48], s2[48];
    if (!kf_type_eq(ta, tb) || !kf_type_eq(ta, tc) || ta.count || kf__type_lanes(ta) != 1 ||
        !kf__is_int(ta.scalar)) {
        kf__fail(k, KF_ERROR_TYPE,
                 "kf_for: start, end and step must be integers of one type, got %s, %s, %s",
                 tstr(ta, s0), tstr(tb, s1), tstr(tc, s2));
        return INVALID;
    }
    uint32_t s = kf__open_for(k, name, a, b, c);
    return mkval(k, s ? k->stmts[s].ref : 0);
}

void kf_while(kf_kernel *k) {
    if (!kf__ok(k)) {
        return;
    }
    kf__open_loop(k);
}

static bool in_loop(const kf_kernel *k) {
    for (uint32_t b = k->cur_block; b > 1; b = k->blocks[b].parent) {
        uint8_t kind = k->stmts[k->blocks[b].owner].kind;
        if (kind == KF__STMT_FOR || kind == KF__STMT_LOOP) {
            return true;
        }
    }
    return false;
}

void kf_while_cond(kf_kernel *k, kf_val cond) {
    uint32_t c = val(k, cond, "kf_while_cond", 1);
    if (!c || !cond_ok(k, c, "kf_while_cond")) {
        return;
    }
    if (!in_loop(k)) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT, "kf_while_cond: not inside a while or for");
        return;
    }
    kf__emit_stmt(k, KF__STMT_BREAK_UNLESS, 0, c, 0, 0);
}

void kf_break(kf_kernel *k) {
    if (!kf__ok(k)) {
        return;
    }
    if (!in_loop(k)) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT, "kf_break: not inside a while or for");
        return;
    }
    kf__emit_stmt(k, KF__STMT_BREAK, 0, 0, 0, 0);
}

void kf_continue(kf_kernel *k) {
    if (!kf__ok(k)) {
        return;
    }
    if (!in_loop(k)) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT, "kf_continue: not inside a while or for");
        return;
    }
    kf__emit_stmt(k, KF__STMT_CONTINUE, 0, 0, 0, 0);
}

void kf_end(kf_kernel *k) {
    if (!kf__ok(k)) {
        return;
    }
    if (k->cur_block == 1) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT, "kf_end: no if, for or while is open");
        return;
    }
    kf__close(k);
}

/* ======================================================================================== */
/* the store phase                                                                          */
/* ======================================================================================== */

kf_val kf_kernel_input(kf_kernel *k) {
    if (!kf__ok(k)) {
        return INVALID;
    }
    if (!is_stage(k)) {
        kf__fail(k, KF_ERROR_TYPE,
                 "kf_kernel_input: the kernel is a producer (input void); only a stage has an In "
                 "value");
        return INVALID;
    }
    if (!k->input_node) {
        k->input_node = kf__pure(k, KF__NODE_STAGE_IN, 0, k->input, NULL, 0);
    }
    return mkval(k, k->input_node);
}

kf_val kf_kernel_index(kf_kernel *k) {
    if (!kf__ok(k)) {
        return INVALID;
    }
    if (!is_stage(k)) {
        kf__fail(k, KF_ERROR_TYPE,
                 "kf_kernel_index: the kernel is a producer (input void); only a stage has an "
                 "element index (a producer computes its own, e.g. kf_global_linear)");
        return INVALID;
    }
    if (!k->index_node) {
        k->index_node = kf__pure(k, KF__NODE_INDEX, 0, kf_type_scalar(KF_SCALAR_U32), NULL, 0);
    }
    return mkval(k, k->index_node);
}

void kf_kernel_yield(kf_kernel *k, kf_val value, kf_val index) {
    if (!kf__ok(k)) {
        return;
    }
    if (k->output.scalar == KF_SCALAR_VOID) {
        kf__fail(k, KF_ERROR_TYPE,
                 "kf_kernel_yield: the kernel's output type is void (no store phase); give "
                 "kf_kernel_desc.output a type");
        return;
    }
    uint32_t iv = val(k, value, "kf_kernel_yield", 1);
    uint32_t ii = iv ? val(k, index, "kf_kernel_yield", 2) : 0;
    if (!ii) {
        return;
    }
    char s0[48], s1[48];
    if (!kf_type_eq(ty(k, iv), k->output)) {
        kf__fail(k, KF_ERROR_TYPE, "kf_kernel_yield: the kernel outputs %s, the value is %s",
                 tstr(k->output, s0), tstr(ty(k, iv), s1));
        return;
    }
    if (!kf_type_eq(ty(k, ii), kf_type_scalar(KF_SCALAR_U32))) {
        kf__fail(k, KF_ERROR_TYPE, "kf_kernel_yield: the index must be a u32, got %s",
                 tstr(ty(k, ii), s0));
        return;
    }
    kf__emit_stmt(k, KF__STMT_YIELD, 0, iv, ii, 0);
}
