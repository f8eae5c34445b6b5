/* IR -> WGSL text. Deterministic (the same kernel always gives the same bytes) and readable:
 * names come from the user (bindings, kf_let, kf_declare, loops) or from what a value is
 * (`a_v` for a load from a, `sg_sum`, `idx`), made valid and unique; pure values are written
 * inline with only the parentheses WGSL needs; `enable` lines appear only for what is used. */
#include "wgsl/wgsl.h"
#include "core/half.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kf_type vec_type(kf_scalar scalar, uint32_t lanes) {
    kf_type t = {scalar, lanes, 0};
    return t;
}

/* The extension Dawn wants for subgroup operations and builtins. */
#define KF_WGSL_SUBGROUPS "subgroups"
/* The extension for subgroup matrices, and the diagnostic of its uniformity analysis. */
#define KF_WGSL_SGMAT "chromium_experimental_subgroup_matrix"
#define KF_WGSL_SGMAT_UNIFORMITY "chromium.subgroup_matrix_uniformity"

/* ---- a growing string ---- */

typedef struct sb {
    char *buf;
    size_t len, cap;
    bool oom;
} sb;

static void sb_vprintf(sb *s, const char *fmt, va_list ap) {
    if (s->oom) {
        return;
    }
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(s->buf ? s->buf + s->len : NULL, s->buf ? s->cap - s->len : 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) {
        s->oom = true;
        return;
    }
    if (!s->buf || s->len + (size_t)n + 1 > s->cap) {
        size_t ncap = s->cap ? s->cap : 1024;
        while (ncap < s->len + (size_t)n + 1) {
            ncap *= 2;
        }
        char *p = realloc(s->buf, ncap);
        if (!p) {
            s->oom = true;
            return;
        }
        s->buf = p;
        s->cap = ncap;
        vsnprintf(s->buf + s->len, s->cap - s->len, fmt, ap);
    }
    s->len += (size_t)n;
}

static void sb_printf(sb *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sb *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(s, fmt, ap);
    va_end(ap);
}

/* ---- names ---- */

typedef struct name_set {
    char **slots;
    size_t cap, count;
    bool oom;
} name_set;

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) {
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    }
    return h;
}

static bool set_has(const name_set *ns, const char *name) {
    if (!ns->cap) {
        return false;
    }
    for (size_t i = hash_str(name) & (ns->cap - 1);; i = (i + 1) & (ns->cap - 1)) {
        if (!ns->slots[i]) {
            return false;
        }
        if (!strcmp(ns->slots[i], name)) {
            return true;
        }
    }
}

static bool set_put(name_set *ns, char *owned) {
    if ((ns->count + 1) * 2 > ns->cap) {
        size_t ncap = ns->cap ? ns->cap * 2 : 256;
        char **slots = calloc(ncap, sizeof *slots);
        if (!slots) {
            ns->oom = true;
            return false;
        }
        for (size_t i = 0; i < ns->cap; i++) {
            if (ns->slots[i]) {
                size_t j = hash_str(ns->slots[i]) & (ncap - 1);
                while (slots[j]) {
                    j = (j + 1) & (ncap - 1);
                }
                slots[j] = ns->slots[i];
            }
        }
        free(ns->slots);
        ns->slots = slots;
        ns->cap = ncap;
    }
    size_t i = hash_str(owned) & (ns->cap - 1);
    while (ns->slots[i]) {
        i = (i + 1) & (ns->cap - 1);
    }
    ns->slots[i] = owned;
    ns->count++;
    return true;
}

static void set_free(name_set *ns) {
    for (size_t i = 0; i < ns->cap; i++) {
        free(ns->slots[i]);
    }
    free(ns->slots);
}

typedef struct emitter {
    const kf_kernel *w;
    sb out;
    name_set names;
    char **node_names; /* materialized values and loop variables */
    char **binding_names;
    char **var_names;
    char **shared_names;
    char **override_names;
    const char *builtin_names[KF_BUILTIN_SUBGROUP_SIZE + 1];
    uint32_t erf_used; /* bit (f16 ? 4 : 0) + lanes - 1 */
    /* the identity function on u32 through which non-finite literals are written, or NULL:
     * WGSL has no infinite or NaN constants, and Tint rejects `bitcast<f32>(0xff800000u)` as a
     * constant expression whose value f32 cannot represent; a function call is not constant */
    const char *bits_name;
    int indent;
    const kf__bounds *bounds; /* which accesses get a guard; NULL: none */
} emitter;

/* A valid, unreserved, unused identifier from `want` (or `fallback`), recorded as used. The
 * returned string is owned by the name set. */
static char *claim(emitter *e, const char *want, const char *fallback) {
    char base[128];
    size_t n = 0;
    const char *src = want && *want ? want : fallback;
    for (const char *p = src; *p && n < 100; p++) {
        char c = *p;
        bool ok =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        base[n++] = ok ? c : '_';
    }
    base[n] = '\0';
    /* no leading digit, no leading "__", not "_" alone */
    char fixed[140];
    const char *b = base;
    while (b[0] == '_' && b[1] == '_') {
        b++;
    }
    if (!*b || !strcmp(b, "_")) {
        snprintf(fixed, sizeof fixed, "%s", fallback);
    } else if (b[0] >= '0' && b[0] <= '9') {
        snprintf(fixed, sizeof fixed, "v%s", b);
    } else {
        snprintf(fixed, sizeof fixed, "%s", b);
    }
    if (kf__wgsl_reserved(fixed)) {
        size_t l = strlen(fixed);
        fixed[l] = '_';
        fixed[l + 1] = '\0';
    }
    char cand[160];
    snprintf(cand, sizeof cand, "%s", fixed);
    for (unsigned i = 1; set_has(&e->names, cand); i++) {
        snprintf(cand, sizeof cand, "%s_%u", fixed, i);
    }
    char *owned = malloc(strlen(cand) + 1);
    if (!owned) {
        e->names.oom = true;
        return NULL;
    }
    strcpy(owned, cand);
    if (!set_put(&e->names, owned)) {
        free(owned);
        return NULL;
    }
    return owned;
}

/* ---- types and literals ---- */

static const char *type_name(kf_type t, char *buf, size_t size) {
    return kf__wgsl_type_str(t, buf, size);
}

static void emit_literal(emitter *e, const kf__ir_node *n) {
    switch (n->type.scalar) {
    case KF_SCALAR_F32:
    case KF_SCALAR_F16: {
        float v;
        memcpy(&v, &n->bits, sizeof v);
        bool half = n->type.scalar == KF_SCALAR_F16;
        if (!isfinite(v)) {
            uint32_t bits = half ? kf__half_from_float(v) : n->bits;
            const char *open = e->bits_name ? e->bits_name : "";
            sb_printf(&e->out, "bitcast<%s>(%s(0x%0*xu))%s", half ? "vec2<f16>" : "f32", open,
                      half ? 4 : 8, (unsigned)bits, half ? ".x" : "");
            return;
        }
        char buf[96];
        if (half) {
            /* Tint reads an f16 literal by truncating to 10 mantissa bits, not rounding: write
             * the value's exact decimal expansion (a half has one of at most 25 digits) */
            snprintf(buf, sizeof buf, "%.26f", (double)v);
            char *end = buf + strlen(buf) - 1;
            while (*end == '0') {
                *end-- = '\0';
            }
            if (*end == '.') {
                strcpy(end, ".0");
            }
        } else {
            /* the shortest decimal that reads back as v (Tint rounds f32 literals correctly)
             * and is within f32's range: Tint rejects 3.4028235e38, whose decimal value is
             * above FLT_MAX though it rounds to it */
            for (int prec = 1; prec <= 17; prec++) {
                snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
                if (strtof(buf, NULL) == v && fabs(strtod(buf, NULL)) <= (double)FLT_MAX) {
                    break;
                }
            }
            if (!strchr(buf, '.') && !strchr(buf, 'e')) {
                strcat(buf, ".0");
            }
        }
        sb_printf(&e->out, "%s%s", buf, half ? "h" : "f");
        return;
    }
    case KF_SCALAR_I32:
        if (n->bits == 0x80000000u) {
            sb_printf(&e->out, "bitcast<i32>(0x80000000u)");
        } else {
            sb_printf(&e->out, "%di", (int)(int32_t)n->bits);
        }
        return;
    case KF_SCALAR_U32:
        sb_printf(&e->out, "%uu", (unsigned)n->bits);
        return;
    case KF_SCALAR_BOOL:
        sb_printf(&e->out, "%s", n->bits ? "true" : "false");
        return;
    default:
        sb_printf(&e->out, "<?>");
        return;
    }
}

static bool negative_literal(const kf__ir_node *n) {
    if (n->kind != KF__NODE_LIT) {
        return false;
    }
    if (n->type.scalar == KF_SCALAR_F32 || n->type.scalar == KF_SCALAR_F16) {
        float v;
        memcpy(&v, &n->bits, sizeof v);
        return isfinite(v) && signbit(v);
    }
    return n->type.scalar == KF_SCALAR_I32 && (int32_t)n->bits < 0 && n->bits != 0x80000000u;
}

/* ---- expressions ---- */

static bool shown_by_name(const kf__ir_node *n) {
    return n->materialized || n->kind == KF__NODE_LOOP_VAR;
}

enum { PREC_OTHER = 0, PREC_REL = 1, PREC_ADD = 2, PREC_MUL = 3 };

static int prec_of(kf_op op) {
    switch (op) {
    case KF_OP_ADD:
    case KF_OP_SUB:
        return PREC_ADD;
    case KF_OP_MUL:
    case KF_OP_DIV:
    case KF_OP_MOD:
        return PREC_MUL;
    case KF_OP_EQ:
    case KF_OP_NE:
    case KF_OP_LT:
    case KF_OP_LE:
    case KF_OP_GT:
    case KF_OP_GE:
        return PREC_REL;
    default:
        return PREC_OTHER;
    }
}

/* Does child need parentheses as an operand of binary `parent` (left side or right)? Only what
 * WGSL's grammar requires, plus whatever keeps the tree's shape. */
static bool binary_child_parens(const kf_kernel *w, const kf__ir_node *parent, uint32_t child,
                                bool left) {
    const kf__ir_node *c = &w->nodes[child];
    if (shown_by_name(c)) {
        return false;
    }
    if (c->kind != KF__NODE_BINARY) {
        /* calls, names, literals and constructors are primary expressions, and a unary
         * expression is what every binary operator takes as an operand */
        return false;
    }
    kf_op pop = (kf_op)parent->op, cop = (kf_op)c->op;
    int pp = prec_of(pop), cp = prec_of(cop);
    if (pp == PREC_ADD || pp == PREC_MUL) {
        return !(cp > pp || (cp == pp && left && cp != PREC_OTHER));
    }
    if (pp == PREC_REL) {
        return !(cp == PREC_ADD || cp == PREC_MUL);
    }
    if (pop == KF_OP_AND || pop == KF_OP_OR) {
        bool vec = kf__type_lanes(parent->type) > 1;
        if (vec) {
            return !(cop == pop && left);
        }
        return !(cp == PREC_REL || (cop == pop && left));
    }
    if (pop == KF_OP_BIT_AND || pop == KF_OP_BIT_OR || pop == KF_OP_BIT_XOR) {
        return !(cop == pop && left);
    }
    return true; /* shifts take unary operands only */
}

/* `safe`: nothing follows the expression before a delimiter that ends WGSL's template-list
 * search (`;`, `)`, `]`, `{`, `&&`, `||`). Elsewhere `a < b` is written `(a < b)`, or a later `>`
 * would make the parser read `b ... >` as a template list. */
static void emit_expr(emitter *e, uint32_t id, bool safe);

static void emit_args(emitter *e, const kf__ir_node *n) {
    for (uint32_t i = 0; i < n->nargs; i++) {
        if (i) {
            sb_printf(&e->out, ", ");
        }
        emit_expr(e, n->args[i], false);
    }
}

static const char *erf_name(kf_type t, char *buf, size_t size) {
    uint32_t lanes = kf__type_lanes(t);
    const char *s = t.scalar == KF_SCALAR_F16 ? "f16" : "f32";
    if (lanes == 1) {
        snprintf(buf, size, "kf_erf_%s", s);
    } else {
        snprintf(buf, size, "kf_erf_vec%u_%s", (unsigned)lanes, s);
    }
    return buf;
}

/* An index as u32 (an i32 one converted: a negative index becomes a large one). */
static void emit_index_u32(emitter *e, uint32_t index) {
    bool i32 = e->w->nodes[index].type.scalar == KF_SCALAR_I32;
    sb_printf(&e->out, "%s", i32 ? "u32(" : "");
    emit_expr(e, index, true);
    sb_printf(&e->out, "%s", i32 ? ")" : "");
}

/* How many elements memory holds, as WGSL: a storage binding's arrayLength, a workgroup or
 * uniform array's count. */
static void emit_extent(emitter *e, uint32_t binding, uint32_t shared) {
    const kf_kernel *w = e->w;
    if (shared) {
        sb_printf(&e->out, "%uu", (unsigned)w->shareds[shared].count);
    } else if (w->bindings[binding].kind == KF_BINDING_UNIFORM) {
        kf_type t = w->bindings[binding].type;
        sb_printf(&e->out, "%uu", (unsigned)(t.count ? t.count : kf__type_lanes(t)));
    } else {
        sb_printf(&e->out, "arrayLength(&%s)", e->binding_names[binding]);
    }
}

/* The index of load `load`: as it is where the proof holds, clamped into bounds where the proof
 * could not show it (the load then reads the last element instead of memory past the end). */
static void emit_index(emitter *e, uint32_t load, uint32_t index, uint32_t binding,
                       uint32_t shared) {
    if (!e->bounds || e->bounds->node_verdict[load] != KF__ACCESS_GUARDED) {
        emit_expr(e, index, true);
        return;
    }
    sb_printf(&e->out, "min(");
    emit_index_u32(e, index);
    sb_printf(&e->out, ", ");
    emit_extent(e, binding, shared);
    sb_printf(&e->out, " - 1u)");
}

/* The condition under which guarded statement s (a store or a subgroup-matrix move) runs. */
static void emit_guard(emitter *e, const kf__stmt *s) {
    const kf_kernel *w = e->w;
    if (s->kind == KF__STMT_STORE || s->kind == KF__STMT_SHARED_STORE) {
        bool shared = s->kind == KF__STMT_SHARED_STORE;
        emit_index_u32(e, s->a);
        sb_printf(&e->out, " < ");
        emit_extent(e, shared ? 0 : s->ref, shared ? s->ref : 0);
        if (shared && s->c) {
            sb_printf(&e->out, " && ");
            emit_index_u32(e, s->c);
            sb_printf(&e->out, " < %uu", (unsigned)kf__type_lanes(w->shareds[s->ref].elem));
        }
        return;
    }
    /* a subgroup matrix covers offset + (n - 1) * stride + m elements: the stride small enough
     * for that not to wrap, and the span inside the memory */
    const kf__var *v = &w->vars[s->ref];
    bool col = s->flags & KF__SGMAT_COL_MAJOR;
    uint32_t n = col ? v->cols : v->rows, m = col ? v->rows : v->cols;
    bool storage = s->flags & KF__SGMAT_STORAGE;
    uint32_t limit = n > 1 ? (uint32_t)((0xffffffffu - m) / (n - 1)) : 0xffffffffu;
    sb_printf(&e->out, "u32(");
    emit_expr(e, s->b, true);
    sb_printf(&e->out, ") <= %uu && ", (unsigned)limit);
    emit_extent(e, storage ? s->d : 0, storage ? 0 : s->d);
    sb_printf(&e->out, " >= %uu * u32(", (unsigned)(n - 1));
    emit_expr(e, s->b, true);
    sb_printf(&e->out, ") + %uu && u32(", (unsigned)m);
    emit_expr(e, s->a, true);
    sb_printf(&e->out, ") <= ");
    emit_extent(e, storage ? s->d : 0, storage ? 0 : s->d);
    sb_printf(&e->out, " - (%uu * u32(", (unsigned)(n - 1));
    emit_expr(e, s->b, true);
    sb_printf(&e->out, ") + %uu)", (unsigned)m);
}

/* The expression that defines node id (ignoring a name it may have). */
static void emit_def(emitter *e, uint32_t id, bool safe) {
    const kf_kernel *w = e->w;
    const kf__ir_node *n = &w->nodes[id];
    char tb[48];
    switch ((kf__ir_node_kind)n->kind) {
    case KF__NODE_LIT:
        emit_literal(e, n);
        return;
    case KF__NODE_UNARY: {
        const kf__ir_node *a = &w->nodes[n->args[0]];
        bool paren = !shown_by_name(a) && (a->kind == KF__NODE_BINARY ||
                                           a->kind == KF__NODE_UNARY || negative_literal(a));
        sb_printf(&e->out, "%s%s", kf__op_str((kf_op)n->op), paren ? "(" : "");
        emit_expr(e, n->args[0], paren);
        sb_printf(&e->out, "%s", paren ? ")" : "");
        return;
    }
    case KF__NODE_BINARY: {
        const char *sym = kf__op_str((kf_op)n->op);
        bool logical = n->op == KF_OP_AND || n->op == KF_OP_OR;
        if (logical && kf__type_lanes(n->type) > 1) {
            sym = n->op == KF_OP_AND ? "&" : "|"; /* && and || are for scalars only */
            logical = false;
        }
        bool wrap = !safe && (n->op == KF_OP_LT || n->op == KF_OP_LE);
        bool pl = binary_child_parens(w, n, n->args[0], true);
        bool pr = binary_child_parens(w, n, n->args[1], false);
        sb_printf(&e->out, "%s%s", wrap ? "(" : "", pl ? "(" : "");
        emit_expr(e, n->args[0], pl || logical);
        sb_printf(&e->out, "%s %s %s", pl ? ")" : "", sym, pr ? "(" : "");
        emit_expr(e, n->args[1], pr || (logical && (safe || wrap)));
        sb_printf(&e->out, "%s%s", pr ? ")" : "", wrap ? ")" : "");
        return;
    }
    case KF__NODE_CALL:
        if (n->op == KF_FN_ERF) {
            sb_printf(&e->out, "%s(", erf_name(n->type, tb, sizeof tb));
        } else {
            sb_printf(&e->out, "%s(", kf__fn_str((kf_fn)n->op));
        }
        emit_args(e, n);
        sb_printf(&e->out, ")");
        return;
    case KF__NODE_CAST:
    case KF__NODE_SPLAT:
    case KF__NODE_VEC:
        sb_printf(&e->out, "%s(", type_name(n->type, tb, sizeof tb));
        emit_args(e, n);
        sb_printf(&e->out, ")");
        return;
    case KF__NODE_BITCAST:
        sb_printf(&e->out, "bitcast<%s>(", type_name(n->type, tb, sizeof tb));
        emit_args(e, n);
        sb_printf(&e->out, ")");
        return;
    case KF__NODE_EXTRACT: {
        const kf__ir_node *a = &w->nodes[n->args[0]];
        bool paren = !shown_by_name(a) && (a->kind == KF__NODE_BINARY ||
                                           a->kind == KF__NODE_UNARY || negative_literal(a));
        sb_printf(&e->out, "%s", paren ? "(" : "");
        emit_expr(e, n->args[0], paren);
        if (a->type.count) {
            sb_printf(&e->out, "%s[%u]", paren ? ")" : "", (unsigned)n->ref);
        } else {
            sb_printf(&e->out, "%s.%c", paren ? ")" : "", "xyzw"[n->ref & 3]);
        }
        return;
    }
    case KF__NODE_BUILTIN:
        sb_printf(&e->out, "%s", e->builtin_names[n->op]);
        return;
    case KF__NODE_OVERRIDE:
        sb_printf(&e->out, "%s", e->override_names[n->ref]);
        return;
    case KF__NODE_NAMED:
        emit_expr(e, n->args[0], safe);
        return;
    case KF__NODE_LOAD:
        if (n->nargs) {
            sb_printf(&e->out, "%s[", e->binding_names[n->ref]);
            emit_index(e, id, n->args[0], n->ref, 0);
            sb_printf(&e->out, "]");
        } else {
            sb_printf(&e->out, "%s", e->binding_names[n->ref]);
        }
        return;
    case KF__NODE_SHARED_LOAD:
        sb_printf(&e->out, n->op == KF__SHARED_LOAD_UNIFORM ? "workgroupUniformLoad(&%s[" : "%s[",
                  e->shared_names[n->ref]);
        emit_index(e, id, n->args[0], 0, n->ref);
        sb_printf(&e->out, n->op == KF__SHARED_LOAD_UNIFORM ? "])" : "]");
        return;
    case KF__NODE_READ:
        sb_printf(&e->out, "%s", e->var_names[n->ref]);
        return;
    case KF__NODE_SUBGROUP:
        sb_printf(&e->out, "%s(", kf__subgroup_str((kf_subgroup_op)n->op));
        emit_args(e, n);
        sb_printf(&e->out, ")");
        return;
    case KF__NODE_LENGTH:
        sb_printf(&e->out, "arrayLength(&%s)", e->binding_names[n->ref]);
        return;
    case KF__NODE_LOOP_VAR:
        sb_printf(&e->out, "%s", e->node_names[id]);
        return;
    default:
        sb_printf(&e->out, "<?>");
        return;
    }
}

static void emit_expr(emitter *e, uint32_t id, bool safe) {
    const kf__ir_node *n = &e->w->nodes[id];
    if (shown_by_name(n)) {
        sb_printf(&e->out, "%s", e->node_names[id] ? e->node_names[id] : "<?>");
        return;
    }
    emit_def(e, id, safe);
}

/* ---- statements ---- */

static void indent(emitter *e) {
    sb_printf(&e->out, "%*s", e->indent * 4, "");
}

static void emit_block(emitter *e, uint32_t block);

/* A store, workgroup store or subgroup-matrix move (after its indentation). */
static void emit_access(emitter *e, uint32_t sid) {
    const kf_kernel *w = e->w;
    const kf__stmt *s = &w->stmts[sid];
    if (s->kind == KF__STMT_STORE || s->kind == KF__STMT_SHARED_STORE) {
        sb_printf(&e->out, "%s[",
                  s->kind == KF__STMT_STORE ? e->binding_names[s->ref] : e->shared_names[s->ref]);
        emit_expr(e, s->a, true);
        if (s->kind == KF__STMT_SHARED_STORE && s->c) {
            sb_printf(&e->out, "][");
            emit_expr(e, s->c, true);
        }
        sb_printf(&e->out, "] = ");
        emit_expr(e, s->b, true);
        sb_printf(&e->out, ";\n");
        return;
    }
    const char *mem = s->flags & KF__SGMAT_STORAGE ? e->binding_names[s->d] : e->shared_names[s->d];
    const char *major = s->flags & KF__SGMAT_COL_MAJOR ? "true" : "false";
    if (s->kind == KF__STMT_SGMAT_LOAD) {
        char mt[80];
        sb_printf(&e->out, "%s = subgroupMatrixLoad<%s>(&%s, ", e->var_names[s->ref],
                  kf__sgmat_type_str(&w->vars[s->ref], mt, sizeof mt), mem);
        emit_expr(e, s->a, true);
        sb_printf(&e->out, ", %s, ", major);
    } else {
        sb_printf(&e->out, "subgroupMatrixStore(&%s, ", mem);
        emit_expr(e, s->a, true);
        sb_printf(&e->out, ", %s, %s, ", e->var_names[s->ref], major);
    }
    emit_expr(e, s->b, true);
    sb_printf(&e->out, ");\n");
}

static void emit_stmt(emitter *e, uint32_t sid) {
    const kf_kernel *w = e->w;
    const kf__stmt *s = &w->stmts[sid];
    char tb[48];
    if (s->kind == KF__STMT_BARRIER && (s->flags & KF__BARRIER_OF_UNIFORM_LOAD)) {
        return; /* the load that follows is the barrier */
    }
    indent(e);
    if (e->bounds && e->bounds->stmt_verdict[sid] == KF__ACCESS_GUARDED) {
        /* not proved in bounds: skipped where it would be out of them */
        sb_printf(&e->out, "if (");
        emit_guard(e, s);
        sb_printf(&e->out, ") {\n");
        e->indent++;
        indent(e);
        emit_access(e, sid);
        e->indent--;
        indent(e);
        sb_printf(&e->out, "}\n");
        return;
    }
    switch ((kf__stmt_kind)s->kind) {
    case KF__STMT_LET:
        sb_printf(&e->out, "let %s = ", e->node_names[s->ref]);
        emit_def(e, s->ref, true);
        sb_printf(&e->out, ";\n");
        break;
    case KF__STMT_VAR:
        if (w->vars[s->ref].sgmat) { /* zero-filled, as every WGSL var without initializer */
            char mt[80];
            sb_printf(&e->out, "var %s: %s;\n", e->var_names[s->ref],
                      kf__sgmat_type_str(&w->vars[s->ref], mt, sizeof mt));
            break;
        }
        sb_printf(&e->out, "var %s: %s", e->var_names[s->ref],
                  type_name(w->vars[s->ref].type, tb, sizeof tb));
        if (s->a) {
            sb_printf(&e->out, " = ");
            emit_expr(e, s->a, true);
        }
        sb_printf(&e->out, ";\n");
        break;
    case KF__STMT_ASSIGN:
        sb_printf(&e->out, "%s = ", e->var_names[s->ref]);
        emit_expr(e, s->a, true);
        sb_printf(&e->out, ";\n");
        break;
    case KF__STMT_STORE:
    case KF__STMT_SHARED_STORE:
    case KF__STMT_SGMAT_LOAD:
    case KF__STMT_SGMAT_STORE:
        emit_access(e, sid);
        break;
    case KF__STMT_IF:
        sb_printf(&e->out, "if (");
        emit_expr(e, s->a, true);
        sb_printf(&e->out, ") {\n");
        emit_block(e, s->body);
        if (s->else_body) {
            indent(e);
            sb_printf(&e->out, "} else {\n");
            emit_block(e, s->else_body);
        }
        indent(e);
        sb_printf(&e->out, "}\n");
        break;
    case KF__STMT_FOR: {
        const char *v = e->node_names[s->ref];
        sb_printf(&e->out, "for (var %s: %s = ", v,
                  type_name(w->nodes[s->ref].type, tb, sizeof tb));
        emit_expr(e, s->a, true);
        sb_printf(&e->out, "; %s < ", v);
        emit_expr(e, s->b, true);
        sb_printf(&e->out, "; %s += ", v);
        emit_expr(e, s->c, true);
        sb_printf(&e->out, ") {\n");
        emit_block(e, s->body);
        indent(e);
        sb_printf(&e->out, "}\n");
        break;
    }
    case KF__STMT_LOOP:
        sb_printf(&e->out, "loop {\n");
        emit_block(e, s->body);
        indent(e);
        sb_printf(&e->out, "}\n");
        break;
    case KF__STMT_BREAK_UNLESS:
        sb_printf(&e->out, "if (!(");
        emit_expr(e, s->a, true);
        sb_printf(&e->out, ")) { break; }\n");
        break;
    case KF__STMT_BREAK:
        sb_printf(&e->out, "break;\n");
        break;
    case KF__STMT_CONTINUE:
        sb_printf(&e->out, "continue;\n");
        break;
    case KF__STMT_BARRIER:
        sb_printf(&e->out, "workgroupBarrier();\n");
        break;
    case KF__STMT_SGMAT_MMA:
        if (s->flags & KF__SGMAT_FRESH) {
            sb_printf(&e->out, "%s = subgroupMatrixMultiply<%s>(%s, %s);\n", e->var_names[s->ref],
                      kf__scalar_str(e->w->vars[s->ref].type.scalar), e->var_names[s->d],
                      e->var_names[s->e]);
        } else {
            sb_printf(&e->out, "%s = subgroupMatrixMultiplyAccumulate(%s, %s, %s);\n",
                      e->var_names[s->ref], e->var_names[s->d], e->var_names[s->e],
                      e->var_names[s->ref]);
        }
        break;
    case KF__STMT_YIELD:
    case KF__STMT_NONE:
        sb_printf(&e->out, "// (unlowered statement)\n");
        break;
    }
}

static void emit_block(emitter *e, uint32_t block) {
    e->indent++;
    for (uint32_t s = e->w->blocks[block].first; s; s = e->w->stmts[s].next) {
        emit_stmt(e, s);
    }
    e->indent--;
}

/* Names values in statement order, so names read top to bottom: x, x_1, ... */
static void name_block(emitter *e, uint32_t block) {
    const kf_kernel *w = e->w;
    for (uint32_t sid = w->blocks[block].first; sid; sid = w->stmts[sid].next) {
        const kf__stmt *s = &w->stmts[sid];
        switch ((kf__stmt_kind)s->kind) {
        case KF__STMT_LET: {
            const kf__ir_node *n = &w->nodes[s->ref];
            e->node_names[s->ref] = claim(e, kf__str(w, n->name), "t");
            break;
        }
        case KF__STMT_VAR:
            e->var_names[s->ref] = claim(e, kf__str(w, w->vars[s->ref].name), "v");
            break;
        case KF__STMT_FOR:
            e->node_names[s->ref] = claim(e, kf__str(w, w->nodes[s->ref].name), "i");
            name_block(e, s->body);
            break;
        case KF__STMT_IF:
            name_block(e, s->body);
            if (s->else_body) {
                name_block(e, s->else_body);
            }
            break;
        case KF__STMT_LOOP:
            name_block(e, s->body);
            break;
        default:
            break;
        }
    }
}

/* The length a workgroup array is declared with. In a kernel with subgroup matrices each array
 * is a whole number of 16 bytes long. On the H200 (driver 580, Dawn's Vulkan backend) a matrix
 * stored to and loaded from an f32 array beside a used array<u32, 1> came back as it was stored,
 * with the plain stores between lost, and the array read garbage; beside an array<u32, 2> or 4
 * it was right (session 13, tests/unit/test_ir_sgmat.c's round trip). So the driver's layout,
 * apparently, misaligns what follows a 4-byte variable for its matrix loads and stores. The padding
 * is never read; the bounds proofs and the interpreter keep the declared length. */
static uint32_t shared_emitted_count(const kf__shared *s, bool sgmat) {
    /* an element's bytes: a scalar's times its lanes, vec3 laid out as vec4 */
    uint32_t lanes = s->elem.lanes == 3 ? 4 : s->elem.lanes ? s->elem.lanes : 1;
    uint32_t size = (s->elem.scalar == KF_SCALAR_F16 ? 2u : 4u) * lanes;
    if (!sgmat || s->elem.count || size >= 16 || 16 % size) {
        return s->count;
    }
    uint32_t per = 16 / size;
    return (s->count + per - 1) / per * per;
}

static void emit_erf_helpers(emitter *e) {
    char name[48], f32name[48], tb[48];
    for (uint32_t half = 0; half < 2; half++) {
        for (uint32_t lanes = 1; lanes <= 4; lanes++) {
            if (!(e->erf_used & (1u << (half * 4 + lanes - 1)))) {
                continue;
            }
            kf_type t = vec_type(half ? KF_SCALAR_F16 : KF_SCALAR_F32, lanes);
            kf_type t32 = vec_type(KF_SCALAR_F32, lanes);
            erf_name(t, name, sizeof name);
            type_name(t, tb, sizeof tb);
            if (half) {
                char t32b[48];
                erf_name(t32, f32name, sizeof f32name);
                sb_printf(&e->out,
                          "// erf in f16: the f32 approximation, rounded once.\n"
                          "fn %s(x: %s) -> %s {\n    return %s(%s(%s(x)));\n}\n\n",
                          name, tb, tb, tb, f32name, type_name(t32, t32b, sizeof t32b));
            } else {
                sb_printf(&e->out,
                          "// erf: a Taylor series below 0.7, Abramowitz & Stegun 7.1.26 above "
                          "(max abs error\n"
                          "// in f32: see docs/builder.md).\n"
                          "fn %s(x: %s) -> %s {\n"
                          "    let x2 = x * x;\n"
                          "    let small = x * (1.1283791671 + x2 * (-0.3761263890 + x2 * "
                          "(0.1128379167 + x2 * (-0.0268661706\n"
                          "        + x2 * (0.0052239776 + x2 * (-0.0008548327 + x2 * "
                          "0.0001205533))))));\n"
                          "    let t = 1.0 / (1.0 + 0.3275911 * abs(x));\n"
                          "    let p = ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t "
                          "- 0.284496736) * t + 0.254829592) * t;\n"
                          "    let big = sign(x) * (1.0 - p * exp(-x2));\n"
                          "    return select(big, small, abs(x) < %s(0.7));\n"
                          "}\n\n",
                          name, tb, tb, tb);
            }
        }
    }
}

static bool any_f16(const kf_kernel *w) {
    for (uint32_t i = 1; i < w->node_count; i++) {
        if (kf__type_uses_f16(w->nodes[i].type)) {
            return true;
        }
    }
    for (uint32_t i = 1; i < w->binding_count; i++) {
        if (kf__type_uses_f16(w->bindings[i].type)) {
            return true;
        }
    }
    for (uint32_t i = 1; i < w->var_count; i++) {
        if (kf__type_uses_f16(w->vars[i].type)) {
            return true;
        }
    }
    for (uint32_t i = 1; i < w->shared_count; i++) {
        if (kf__type_uses_f16(w->shareds[i].elem)) {
            return true;
        }
    }
    for (uint32_t i = 1; i < w->override_count; i++) {
        if (kf__type_uses_f16(w->overrides[i].type)) {
            return true;
        }
    }
    return false;
}

static void emit_override_default(emitter *e, const kf__override *o) {
    switch (o->type.scalar) {
    case KF_SCALAR_F32:
    case KF_SCALAR_F16: {
        kf__ir_node lit = {0};
        lit.kind = KF__NODE_LIT;
        lit.type = o->type;
        float f = (float)o->value;
        if (o->type.scalar == KF_SCALAR_F16) {
            f = kf__half_to_float(kf__half_from_float(f));
        }
        memcpy(&lit.bits, &f, sizeof f);
        const char *bits_name = e->bits_name; /* an override's default is a constant */
        e->bits_name = NULL;
        emit_literal(e, &lit);
        e->bits_name = bits_name;
        break;
    }
    case KF_SCALAR_I32:
        sb_printf(&e->out, "%.0fi", o->value);
        break;
    case KF_SCALAR_U32:
        sb_printf(&e->out, "%.0fu", o->value);
        break;
    case KF_SCALAR_BOOL:
        sb_printf(&e->out, "%s", o->value != 0 ? "true" : "false");
        break;
    default:
        break;
    }
}

char *kf__wgsl_emit(const kf_kernel *w, const char *title, const kf__bounds *bounds) {
    emitter e;
    memset(&e, 0, sizeof e);
    e.w = w;
    e.bounds = bounds;
    e.node_names = calloc(w->node_count, sizeof *e.node_names);
    e.binding_names = calloc(w->binding_count, sizeof *e.binding_names);
    e.var_names = calloc(w->var_count, sizeof *e.var_names);
    e.shared_names = calloc(w->shared_count, sizeof *e.shared_names);
    e.override_names = calloc(w->override_count, sizeof *e.override_names);
    char *result = NULL;
    if (!e.node_names || !e.binding_names || !e.var_names || !e.shared_names || !e.override_names) {
        goto done;
    }
    /* what is used */
    bool subgroups = false;
    bool builtins[KF_BUILTIN_SUBGROUP_SIZE + 1] = {false};
    for (uint32_t i = 1; i < w->node_count; i++) {
        const kf__ir_node *n = &w->nodes[i];
        if (n->kind == KF__NODE_BUILTIN) {
            builtins[n->op] = true;
            subgroups = subgroups || n->op == KF_BUILTIN_SUBGROUP_INVOCATION_ID ||
                        n->op == KF_BUILTIN_SUBGROUP_SIZE;
        } else if (n->kind == KF__NODE_SUBGROUP) {
            subgroups = true;
        } else if (n->kind == KF__NODE_LIT &&
                   (n->type.scalar == KF_SCALAR_F32 || n->type.scalar == KF_SCALAR_F16)) {
            float v;
            memcpy(&v, &n->bits, sizeof v);
            e.bits_name = isfinite(v) ? e.bits_name : "kf_bits"; /* claimed below */
        } else if (n->kind == KF__NODE_CALL && n->op == KF_FN_ERF) {
            uint32_t lanes = kf__type_lanes(n->type);
            if (n->type.scalar == KF_SCALAR_F16) {
                e.erf_used |= 1u << (4 + lanes - 1);
            }
            e.erf_used |= 1u << (lanes - 1); /* the f16 helpers call the f32 ones */
        }
    }
    /* names: fixed ones first (overrides are matched by name at pipeline creation) */
    for (uint32_t i = 1; i < w->override_count; i++) {
        e.override_names[i] = claim(&e, kf__str(w, w->overrides[i].name), "c");
    }
    static const char *const builtin_ids[] = {
        "",      "global_id", "local_id", "local_index", "workgroup_id", "num_workgroups",
        "sg_id", "sg_size"};
    for (int b = 1; b <= KF_BUILTIN_SUBGROUP_SIZE; b++) {
        if (builtins[b]) {
            e.builtin_names[b] = claim(&e, builtin_ids[b], "b");
        }
    }
    for (uint32_t half = 0; half < 2; half++) {
        for (uint32_t lanes = 1; lanes <= 4; lanes++) {
            char nm[48];
            erf_name(vec_type(half ? KF_SCALAR_F16 : KF_SCALAR_F32, lanes), nm, sizeof nm);
            if (e.erf_used & (1u << (half * 4 + lanes - 1))) {
                claim(&e, nm, "f");
            }
        }
    }
    if (e.bits_name) {
        e.bits_name = claim(&e, "kf_bits", "f");
    }
    for (uint32_t i = 1; i < w->binding_count; i++) {
        e.binding_names[i] = claim(&e, kf__str(w, w->bindings[i].name), "buf");
    }
    for (uint32_t i = 1; i < w->shared_count; i++) {
        e.shared_names[i] = claim(&e, kf__str(w, w->shareds[i].name), "wg_mem");
    }
    name_block(&e, 1);
    if (e.names.oom) {
        goto done;
    }

    /* header (the name on one line, whatever it holds) */
    char line[200];
    snprintf(line, sizeof line, "%s", title ? title : "kernel");
    for (char *c = line; *c; c++) {
        if ((unsigned char)*c < 0x20 || *c == 0x7f) {
            *c = ' ';
        }
    }
    sb_printf(&e.out, "// %s: generated by kfuse (workgroup %ux%ux%u)\n", line,
              (unsigned)w->workgroup[0], (unsigned)w->workgroup[1], (unsigned)w->workgroup[2]);
    bool f16 = any_f16(w);
    bool sgmat = false;
    for (uint32_t i = 1; i < w->var_count; i++) {
        sgmat = sgmat || w->vars[i].sgmat;
    }
    subgroups = subgroups || sgmat; /* the API side of subgroup matrices needs subgroups */
    if (f16 || subgroups) {
        sb_printf(&e.out, "\n");
    }
    if (f16) {
        sb_printf(&e.out, "enable f16;\n");
    }
    if (subgroups) {
        sb_printf(&e.out, "enable %s;\n", KF_WGSL_SUBGROUPS);
    }
    if (sgmat) {
        /* Offsets computed from the subgroup's index are uniform per subgroup, which is what the
         * hardware needs, but not per workgroup, which is what Tint's analysis can prove. */
        sb_printf(&e.out, "enable %s;\ndiagnostic(off, %s);\n", KF_WGSL_SGMAT,
                  KF_WGSL_SGMAT_UNIFORMITY);
    }
    char tb[48];
    if (w->override_count > 1) {
        sb_printf(&e.out, "\n");
    }
    for (uint32_t i = 1; i < w->override_count; i++) {
        const kf__override *o = &w->overrides[i];
        sb_printf(&e.out, "override %s: %s", e.override_names[i],
                  type_name(o->type, tb, sizeof tb));
        if (o->has_default) {
            sb_printf(&e.out, " = ");
            emit_override_default(&e, o);
        }
        sb_printf(&e.out, ";\n");
    }
    if (w->binding_count > 1) {
        sb_printf(&e.out, "\n");
    }
    for (uint32_t i = 1; i < w->binding_count; i++) {
        const kf__binding *b = &w->bindings[i];
        sb_printf(&e.out, "@group(0) @binding(%u) ", (unsigned)(i - 1));
        if (b->kind == KF_BINDING_UNIFORM) {
            sb_printf(&e.out, "var<uniform> %s: %s;\n", e.binding_names[i],
                      type_name(b->type, tb, sizeof tb));
        } else {
            sb_printf(&e.out, "var<storage, %s> %s: array<%s>;\n",
                      b->kind == KF_BINDING_STORAGE_READ ? "read" : "read_write",
                      e.binding_names[i], type_name(b->type, tb, sizeof tb));
        }
    }
    if (w->shared_count > 1) {
        sb_printf(&e.out, "\n");
    }
    for (uint32_t i = 1; i < w->shared_count; i++) {
        const kf__shared *s = &w->shareds[i];
        sb_printf(&e.out, "var<workgroup> %s: array<%s, %u>;\n", e.shared_names[i],
                  type_name(s->elem, tb, sizeof tb), (unsigned)shared_emitted_count(s, sgmat));
    }
    sb_printf(&e.out, "\n");
    if (e.bits_name) {
        sb_printf(&e.out,
                  "// non-finite constants are written as bitcasts of %s(bits): WGSL has no\n"
                  "// infinite or NaN constant, and a constant bitcast to one does not compile\n"
                  "fn %s(b: u32) -> u32 {\n    return b;\n}\n\n",
                  e.bits_name, e.bits_name);
    }
    emit_erf_helpers(&e);
    sb_printf(&e.out, "@compute @workgroup_size(%u, %u, %u)\nfn main(", (unsigned)w->workgroup[0],
              (unsigned)w->workgroup[1], (unsigned)w->workgroup[2]);
    bool first = true;
    for (int b = 1; b <= KF_BUILTIN_SUBGROUP_SIZE; b++) {
        if (!builtins[b]) {
            continue;
        }
        bool scalar = b == KF_BUILTIN_LOCAL_INDEX || b == KF_BUILTIN_SUBGROUP_INVOCATION_ID ||
                      b == KF_BUILTIN_SUBGROUP_SIZE;
        sb_printf(&e.out, "%s@builtin(%s) %s: %s", first ? "" : ",\n        ",
                  kf__builtin_str((kf_builtin)b), e.builtin_names[b], scalar ? "u32" : "vec3<u32>");
        first = false;
    }
    sb_printf(&e.out, ") {\n");
    emit_block(&e, 1);
    sb_printf(&e.out, "}\n");
    if (!e.out.oom) {
        result = e.out.buf;
        e.out.buf = NULL;
    }
done:
    free(e.out.buf);
    set_free(&e.names);
    free(e.node_names);
    free(e.binding_names);
    free(e.var_names);
    free(e.shared_names);
    free(e.override_names);
    return result;
}
