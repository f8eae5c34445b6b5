/* Mutants of kernels, made in the IR (mutate.h): each kind's sites, counted in one order (nodes,
 * then statements, by index) so that site n names the same place in every kernel built the same
 * way. */
#include "ir/mutate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir_internal.h"

const char *kf__mutant_kind_str(kf__mutant_kind kind) {
    static const char *names[KF__MUTANT_KIND_COUNT] = {
        "literal+1%", "literal+10%",  "+/-",        "min/max",
        "index+1",    "loop-bound-1", "no-barrier", "epilogue-twice"};
    return kind < KF__MUTANT_KIND_COUNT ? names[kind] : "?";
}

static bool is_pure(const kf__ir_node *n) {
    return n->kind >= KF__NODE_LIT && n->kind <= KF__NODE_LOOP_VAR && !n->materialized;
}

/* A pure node computed from other values (not a leaf: literals, builtins, inputs ...). */
static bool is_inner(const kf__ir_node *n) {
    switch ((kf__ir_node_kind)n->kind) {
    case KF__NODE_UNARY:
    case KF__NODE_BINARY:
    case KF__NODE_CALL:
    case KF__NODE_CAST:
    case KF__NODE_BITCAST:
    case KF__NODE_SPLAT:
    case KF__NODE_VEC:
    case KF__NODE_EXTRACT:
        return is_pure(n) && n->nargs > 0;
    default:
        return false;
    }
}

static bool literal_site(const kf__ir_node *n) {
    if (n->kind != KF__NODE_LIT || n->type.lanes > 1 || n->type.count ||
        (n->type.scalar != KF_SCALAR_F32 && n->type.scalar != KF_SCALAR_F16)) {
        return false;
    }
    float f;
    memcpy(&f, &n->bits, sizeof f);
    return f != 0.0f && isfinite(f);
}

/* The value an epilogue carries: down the first operands of the yielded expression to its leaf,
 * which must have the yielded value's type to take its place. 0 when there is none. */
static uint32_t carried_leaf(const kf_kernel *k, uint32_t value) {
    const kf__ir_node *v = &k->nodes[value];
    if (!is_inner(v)) {
        return 0;
    }
    uint32_t id = value;
    while (is_inner(&k->nodes[id])) {
        id = k->nodes[id].args[0];
    }
    return kf_type_eq(k->nodes[id].type, v->type) ? id : 0;
}

static bool node_site(const kf_kernel *k, const kf__ir_node *n, kf__mutant_kind kind) {
    switch (kind) {
    case KF__MUTANT_LITERAL_1:
    case KF__MUTANT_LITERAL_10:
        return literal_site(n);
    case KF__MUTANT_ADD_SUB:
        return n->kind == KF__NODE_BINARY && (n->op == KF_OP_ADD || n->op == KF_OP_SUB);
    case KF__MUTANT_MIN_MAX:
        return n->kind == KF__NODE_CALL && (n->op == KF_FN_MIN || n->op == KF_FN_MAX);
    case KF__MUTANT_INDEX:
        return (n->kind == KF__NODE_LOAD || n->kind == KF__NODE_SHARED_LOAD) && n->nargs &&
               n->args[0] && k->nodes[n->args[0]].type.lanes <= 1;
    default:
        return false;
    }
}

static bool stmt_site(const kf_kernel *k, const kf__stmt *s, kf__mutant_kind kind) {
    switch (kind) {
    case KF__MUTANT_LOOP_BOUND:
        return s->kind == KF__STMT_FOR;
    case KF__MUTANT_BARRIER:
        /* (not the one a uniform load holds: its WGSL would keep it) */
        return s->kind == KF__STMT_BARRIER && !(s->flags & KF__BARRIER_OF_UNIFORM_LOAD);
    case KF__MUTANT_EPILOGUE:
        return s->kind == KF__STMT_YIELD && carried_leaf(k, s->a) != 0;
    default:
        return false;
    }
}

void kf__mutant_sites(const kf_kernel *k, uint32_t *counts) {
    memset(counts, 0, sizeof *counts * KF__MUTANT_KIND_COUNT);
    if (!k || k->status != KF_OK) {
        return;
    }
    for (uint32_t kind = 0; kind < KF__MUTANT_KIND_COUNT; kind++) {
        for (uint32_t i = 1; i < k->node_count; i++) {
            counts[kind] += node_site(k, &k->nodes[i], (kf__mutant_kind)kind);
        }
        for (uint32_t i = 1; i < k->stmt_count; i++) {
            counts[kind] += stmt_site(k, &k->stmts[i], (kf__mutant_kind)kind);
        }
    }
}

/* New pure nodes go where `like` was created, so a let kf__kernel_prepare gives one (when used
 * twice) stands where its operands exist. */
static uint32_t pure_like(kf_kernel *k, uint32_t like, kf__ir_node_kind kind, uint8_t op,
                          kf_type type, const uint32_t *args, uint32_t nargs) {
    uint32_t id = kf__pure(k, kind, op, type, args, nargs);
    if (id) {
        k->nodes[id].at_block = k->nodes[like].at_block;
        k->nodes[id].at_stmt = k->nodes[like].at_stmt;
    }
    return id;
}

static uint32_t lit_one(kf_kernel *k, kf_type t) {
    return kf__lit_bits(k, t.scalar, 1u);
}

/* The expression rooted at id with `carried` replaced by `with`; copies[] memoizes (DAGs stay
 * DAGs). */
static uint32_t copy_tree(kf_kernel *k, uint32_t id, uint32_t carried, uint32_t with,
                          uint32_t *copies, uint32_t limit) {
    if (id == carried) {
        return with;
    }
    if (id >= limit || !is_inner(&k->nodes[id])) {
        return id;
    }
    if (copies[id]) {
        return copies[id];
    }
    kf__ir_node n = k->nodes[id];
    uint32_t args[4];
    for (uint32_t i = 0; i < n.nargs; i++) {
        args[i] = copy_tree(k, n.args[i], carried, with, copies, limit);
        if (!args[i]) {
            return 0;
        }
    }
    uint32_t c = pure_like(k, with, (kf__ir_node_kind)n.kind, n.op, n.type, args, n.nargs);
    if (c) {
        k->nodes[c].ref = n.ref;
        k->nodes[c].bits = n.bits;
        copies[id] = c;
    }
    return c;
}

static bool mutate_node(kf_kernel *k, uint32_t id, kf__mutant_kind kind) {
    kf__ir_node *n = &k->nodes[id];
    switch (kind) {
    case KF__MUTANT_LITERAL_1:
    case KF__MUTANT_LITERAL_10: {
        float f;
        memcpy(&f, &n->bits, sizeof f);
        f *= kind == KF__MUTANT_LITERAL_1 ? 1.01f : 1.1f;
        memcpy(&n->bits, &f, sizeof f);
        return true;
    }
    case KF__MUTANT_ADD_SUB:
        n->op = n->op == KF_OP_ADD ? KF_OP_SUB : KF_OP_ADD;
        return true;
    case KF__MUTANT_MIN_MAX:
        n->op = n->op == KF_FN_MIN ? KF_FN_MAX : KF_FN_MIN;
        return true;
    case KF__MUTANT_INDEX: {
        uint32_t index = n->args[0];
        kf_type t = k->nodes[index].type;
        uint32_t args[2] = {index, lit_one(k, t)};
        uint32_t shifted =
            args[1] ? pure_like(k, index, KF__NODE_BINARY, KF_OP_ADD, t, args, 2) : 0;
        if (!shifted) {
            return false;
        }
        k->nodes[id].args[0] = shifted;
        return true;
    }
    default:
        return false;
    }
}

/* Unlinks statement s from its block; what was created after it now counts as created after
 * the statement before it. */
static void unlink_stmt(kf_kernel *k, uint32_t s) {
    uint32_t b = k->stmts[s].block, prev = 0;
    for (uint32_t i = k->blocks[b].first; i && i != s; i = k->stmts[i].next) {
        prev = i;
    }
    if (prev) {
        k->stmts[prev].next = k->stmts[s].next;
    } else {
        k->blocks[b].first = k->stmts[s].next;
    }
    if (k->blocks[b].last == s) {
        k->blocks[b].last = prev;
    }
    for (uint32_t i = 1; i < k->node_count; i++) {
        if (k->nodes[i].at_block == b && k->nodes[i].at_stmt == s) {
            k->nodes[i].at_stmt = prev;
        }
    }
    k->stmts[s].kind = KF__STMT_NONE;
    k->stmts[s].next = 0;
}

static bool mutate_stmt(kf_kernel *k, uint32_t s, kf__mutant_kind kind) {
    switch (kind) {
    case KF__MUTANT_LOOP_BOUND: {
        /* end' = max(end, step) - step: the last iteration dropped (end - 1 would change
         * nothing in a loop that steps by a tile), never a wrap below zero. */
        uint32_t end = k->stmts[s].b;
        kf_type t = k->nodes[end].type;
        uint32_t step = k->stmts[s].c ? k->stmts[s].c : lit_one(k, t);
        uint32_t margs[2] = {end, step};
        uint32_t at_least = step ? pure_like(k, end, KF__NODE_CALL, KF_FN_MAX, t, margs, 2) : 0;
        uint32_t sargs[2] = {at_least, step};
        uint32_t shorter =
            at_least ? pure_like(k, end, KF__NODE_BINARY, KF_OP_SUB, t, sargs, 2) : 0;
        if (!shorter) {
            return false;
        }
        k->stmts[s].b = shorter;
        return true;
    }
    case KF__MUTANT_BARRIER:
        unlink_stmt(k, s);
        return true;
    case KF__MUTANT_EPILOGUE: {
        uint32_t value = k->stmts[s].a;
        uint32_t carried = carried_leaf(k, value);
        uint32_t limit = k->node_count;
        uint32_t *copies = calloc(limit, sizeof *copies);
        if (!copies) {
            return false;
        }
        uint32_t twice = copy_tree(k, value, carried, value, copies, limit);
        free(copies);
        if (!twice) {
            return false;
        }
        k->stmts[s].a = twice;
        return true;
    }
    default:
        return false;
    }
}

kf_kernel *kf__mutant_apply(const kf_kernel *k, kf__mutant_kind kind, uint32_t site) {
    if (!k || k->status != KF_OK || kind >= KF__MUTANT_KIND_COUNT) {
        return NULL;
    }
    uint32_t seen = 0, node = 0, stmt = 0;
    for (uint32_t i = 1; i < k->node_count && !node; i++) {
        if (node_site(k, &k->nodes[i], kind) && seen++ == site) {
            node = i;
        }
    }
    for (uint32_t i = 1; i < k->stmt_count && !node && !stmt; i++) {
        if (stmt_site(k, &k->stmts[i], kind) && seen++ == site) {
            stmt = i;
        }
    }
    if (!node && !stmt) {
        return NULL;
    }
    kf_kernel *m = kf_kernel_clone(k);
    if (!m) {
        return NULL;
    }
    bool ok = node ? mutate_node(m, node, kind) : mutate_stmt(m, stmt, kind);
    if (!ok || m->status != KF_OK) {
        kf_kernel_destroy(m);
        return NULL;
    }
    m->version++; /* a cached WGSL of the original must not be reused */
    return m;
}

char *kf__kernel_emit_for(kf_context *ctx, kf_kernel *k) {
    kf_kernel *m = ctx ? kf__context_transform_kernel(ctx, k) : NULL;
    if (!m) {
        return kf_kernel_emit_wgsl(k);
    }
    char *text = kf_kernel_emit_wgsl(m);
    kf_kernel_destroy(m);
    return text;
}
