/* Composition (the seeds' `a |> b`, mapK) and lowering, both built on one copier that replays a
 * kernel's body into another kernel, mapping handles as it goes:
 *   - kf_kernel_then copies a, and at each of a's yields copies b with b's In and index bound to
 *     the yielded value and index;
 *   - kf__kernel_prepare copies a kernel into its runnable form: a stage wrapped in its
 *     bounds-checked 1-D loop, yields turned into stores to "out", shared pure values named. */
#include "ir/ir_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct copier copier;
typedef void (*yield_fn)(copier *c, uint32_t value, uint32_t index);

struct copier {
    kf_kernel *dst;
    const kf_kernel *src;
    uint32_t *nodes;           /* src node -> dst node */
    uint32_t *vars;            /* src variable -> dst variable */
    const uint32_t *bindings;  /* src binding -> dst binding */
    const uint32_t *shareds;   /* src workgroup array -> dst */
    const uint32_t *overrides; /* src override -> dst */
    uint32_t input, index;     /* dst values for src's In and index; 0: dst's placeholders */
    yield_fn on_yield;         /* NULL: copy the yield */
    void *user;
    /* kf_kernel_prologue: loads of src binding load_binding become on_load's value (index: the
     * load's index, already copied) */
    uint32_t load_binding;
    uint32_t (*on_load)(copier *c, uint32_t src_node, uint32_t index);
};

static uint32_t copy_node(copier *c, uint32_t id);

static bool copier_init(copier *c, kf_kernel *dst, const kf_kernel *src) {
    memset(c, 0, sizeof *c);
    c->dst = dst;
    c->src = src;
    c->nodes = calloc(src->node_count, sizeof *c->nodes);
    c->vars = calloc(src->var_count, sizeof *c->vars);
    if (!c->nodes || !c->vars) {
        free(c->nodes);
        free(c->vars);
        kf__fail(dst, KF_ERROR_OUT_OF_MEMORY, "out of memory while copying '%s'", src->name);
        return false;
    }
    return true;
}

static void copier_free(copier *c) {
    free(c->nodes);
    free(c->vars);
}

static uint32_t placeholder(kf_kernel *dst, kf__ir_node_kind kind) {
    uint32_t *slot = kind == KF__NODE_STAGE_IN ? &dst->input_node : &dst->index_node;
    if (!*slot) {
        kf_type t = kind == KF__NODE_STAGE_IN ? dst->input : kf_type_scalar(KF_SCALAR_U32);
        *slot = kf__pure(dst, kind, 0, t, NULL, 0);
    }
    return *slot;
}

static uint32_t copy_node(copier *c, uint32_t id) {
    if (id == 0 || !kf__ok(c->dst)) {
        return 0;
    }
    if (c->nodes[id]) {
        return c->nodes[id];
    }
    const kf__ir_node *n = &c->src->nodes[id];
    uint32_t r = 0;
    switch ((kf__ir_node_kind)n->kind) {
    case KF__NODE_STAGE_IN:
        r = c->input ? c->input : placeholder(c->dst, KF__NODE_STAGE_IN);
        break;
    case KF__NODE_INDEX:
        r = c->index ? c->index : placeholder(c->dst, KF__NODE_INDEX);
        break;
    case KF__NODE_LIT:
    case KF__NODE_UNARY:
    case KF__NODE_BINARY:
    case KF__NODE_CALL:
    case KF__NODE_CAST:
    case KF__NODE_BITCAST:
    case KF__NODE_SPLAT:
    case KF__NODE_VEC:
    case KF__NODE_EXTRACT:
    case KF__NODE_BUILTIN:
    case KF__NODE_OVERRIDE: {
        uint32_t args[4] = {0};
        for (uint32_t i = 0; i < n->nargs; i++) {
            args[i] = copy_node(c, n->args[i]);
            if (!args[i]) {
                return 0;
            }
        }
        /* n points into src, which does not move; dst's arrays may, as nodes are added */
        kf__ir_node_kind kind = (kf__ir_node_kind)n->kind;
        uint32_t ref = kind == KF__NODE_OVERRIDE ? c->overrides[n->ref] : n->ref;
        uint32_t bits = n->bits;
        const char *hint = n->name ? kf__str(c->src, n->name) : NULL;
        r = kf__pure(c->dst, kind, n->op, n->type, args, n->nargs);
        if (r) {
            c->dst->nodes[r].ref = ref;
            c->dst->nodes[r].bits = bits;
            if (hint) {
                uint32_t nm = kf__string_add(c->dst, hint);
                c->dst->nodes[r].name = nm;
            }
        }
        break;
    }
    default:
        /* loop variables and materialized values are mapped where their statement is copied */
        kf__fail(c->dst, KF_ERROR_INTERNAL,
                 "copying '%s': value %u (kind %d) used before its definition", c->src->name,
                 (unsigned)id, (int)n->kind);
        return 0;
    }
    c->nodes[id] = r;
    return r;
}

static void copy_block(copier *c, uint32_t block);

static void copy_let(copier *c, const kf__stmt *s) {
    const kf__ir_node *n = &c->src->nodes[s->ref];
    if (!n->materialized || n->kind < KF__NODE_NAMED) {
        copy_node(c, s->ref); /* a hoisted pure value: the copy decides anew */
        return;
    }
    uint32_t args[4] = {0};
    for (uint32_t i = 0; i < n->nargs; i++) {
        args[i] = copy_node(c, n->args[i]);
        if (!args[i]) {
            return;
        }
    }
    if (c->on_load && n->kind == KF__NODE_LOAD && n->ref == c->load_binding) {
        c->nodes[s->ref] = c->on_load(c, s->ref, args[0]);
        return;
    }
    uint32_t ref = 0;
    switch ((kf__ir_node_kind)n->kind) {
    case KF__NODE_LOAD:
    case KF__NODE_LENGTH:
        ref = c->bindings[n->ref];
        break;
    case KF__NODE_SHARED_LOAD:
        ref = c->shareds[n->ref];
        break;
    case KF__NODE_READ:
        ref = c->vars[n->ref];
        break;
    default:
        break;
    }
    uint32_t r = kf__materialize(c->dst, (kf__ir_node_kind)n->kind, n->op, n->type, args, n->nargs,
                                 ref, n->name ? kf__str(c->src, n->name) : NULL);
    c->nodes[s->ref] = r;
}

static void copy_stmt(copier *c, uint32_t sid) {
    const kf__stmt *s = &c->src->stmts[sid];
    kf_kernel *d = c->dst;
    switch ((kf__stmt_kind)s->kind) {
    case KF__STMT_LET:
        copy_let(c, s);
        break;
    case KF__STMT_VAR: {
        const kf__var *v = &c->src->vars[s->ref];
        uint32_t init = s->a ? copy_node(c, s->a) : 0;
        if (s->a && !init) {
            return;
        }
        uint32_t nv = v->sgmat
                          ? kf__sgmat_var_new(d, kf__str(c->src, v->name), (kf_sgmat_kind)v->sgmat,
                                              v->type.scalar, v->cols, v->rows)
                          : kf__var_new(d, kf__str(c->src, v->name), v->type);
        c->vars[s->ref] = nv;
        kf__emit_stmt(d, KF__STMT_VAR, nv, init, 0, 0);
        break;
    }
    case KF__STMT_ASSIGN: {
        uint32_t v = copy_node(c, s->a);
        kf__emit_stmt(d, KF__STMT_ASSIGN, c->vars[s->ref], v, 0, 0);
        break;
    }
    case KF__STMT_STORE:
    case KF__STMT_SHARED_STORE: {
        uint32_t i = copy_node(c, s->a);
        uint32_t v = copy_node(c, s->b);
        uint32_t lane = s->c ? copy_node(c, s->c) : 0;
        uint32_t ref = s->kind == KF__STMT_STORE ? c->bindings[s->ref] : c->shareds[s->ref];
        kf__emit_stmt(d, (kf__stmt_kind)s->kind, ref, i, v, lane);
        break;
    }
    case KF__STMT_IF: {
        uint32_t cond = copy_node(c, s->a);
        uint32_t body = s->body, else_body = s->else_body;
        uint32_t is = cond ? kf__open_if(d, cond) : 0;
        if (!is) {
            return;
        }
        copy_block(c, body);
        if (else_body) {
            kf__open_else(d, is);
            copy_block(c, else_body);
        }
        kf__close(d);
        break;
    }
    case KF__STMT_FOR: {
        uint32_t a = copy_node(c, s->a), b = copy_node(c, s->b), st = copy_node(c, s->c);
        uint32_t var = s->ref, body = s->body;
        if (!a || !b || !st) {
            return;
        }
        uint32_t fs = kf__open_for(d, kf__str(c->src, c->src->nodes[var].name), a, b, st);
        if (!fs) {
            return;
        }
        c->nodes[var] = d->stmts[fs].ref;
        copy_block(c, body);
        kf__close(d);
        break;
    }
    case KF__STMT_LOOP: {
        uint32_t body = s->body;
        if (!kf__open_loop(d)) {
            return;
        }
        copy_block(c, body);
        kf__close(d);
        break;
    }
    case KF__STMT_BREAK_UNLESS:
        kf__emit_stmt(d, KF__STMT_BREAK_UNLESS, 0, copy_node(c, s->a), 0, 0);
        break;
    case KF__STMT_BREAK:
    case KF__STMT_CONTINUE:
    case KF__STMT_BARRIER: {
        uint32_t b = kf__emit_stmt(d, (kf__stmt_kind)s->kind, 0, 0, 0, 0);
        if (b) {
            d->stmts[b].flags = s->flags;
        }
        break;
    }
    case KF__STMT_YIELD: {
        uint32_t v = copy_node(c, s->a);
        uint32_t i = copy_node(c, s->b);
        if (!v || !i) {
            return;
        }
        if (c->on_yield) {
            c->on_yield(c, v, i);
        } else {
            kf__emit_stmt(d, KF__STMT_YIELD, 0, v, i, 0);
        }
        break;
    }
    case KF__STMT_SGMAT_LOAD:
    case KF__STMT_SGMAT_STORE: {
        uint32_t offset = copy_node(c, s->a), stride = copy_node(c, s->b);
        uint32_t mem = s->flags & KF__SGMAT_STORAGE ? c->bindings[s->d] : c->shareds[s->d];
        uint32_t ref = c->vars[s->ref], flags = s->flags;
        uint32_t ns =
            offset && stride ? kf__emit_stmt(d, (kf__stmt_kind)s->kind, ref, offset, stride, 0) : 0;
        if (ns) {
            d->stmts[ns].d = mem;
            d->stmts[ns].flags = (uint8_t)flags;
        }
        break;
    }
    case KF__STMT_SGMAT_MMA: {
        uint32_t left = c->vars[s->d], right = c->vars[s->e];
        uint32_t ns = kf__emit_stmt(d, KF__STMT_SGMAT_MMA, c->vars[s->ref], 0, 0, 0);
        if (ns) {
            d->stmts[ns].d = left;
            d->stmts[ns].e = right;
            d->stmts[ns].flags = s->flags;
        }
        break;
    }
    case KF__STMT_NONE:
        break;
    }
}

static void copy_block(copier *c, uint32_t block) {
    for (uint32_t s = c->src->blocks[block].first; s && kf__ok(c->dst); s = c->src->stmts[s].next) {
        copy_stmt(c, s);
    }
}

static bool is_trivial(const kf_kernel *k, uint32_t id) {
    const kf__ir_node *n = &k->nodes[id];
    if (n->materialized) {
        return true;
    }
    switch ((kf__ir_node_kind)n->kind) {
    case KF__NODE_LIT:
    case KF__NODE_BUILTIN:
    case KF__NODE_OVERRIDE:
    case KF__NODE_LOOP_VAR:
    case KF__NODE_STAGE_IN:
    case KF__NODE_INDEX:
        return true;
    case KF__NODE_EXTRACT:
        return is_trivial(k, n->args[0]) && k->nodes[n->args[0]].kind != KF__NODE_LIT;
    case KF__NODE_SPLAT:
    case KF__NODE_VEC: /* vectors of literals: written where used */
        for (uint32_t i = 0; i < n->nargs; i++) {
            if (k->nodes[n->args[i]].kind != KF__NODE_LIT) {
                return false;
            }
        }
        return true;
    default:
        return false;
    }
}

/* ======================================================================================== */
/* kf_kernel_then                                                                           */
/* ======================================================================================== */

typedef struct then_ctx {
    const kf_kernel *b;
    const uint32_t *bindings, *overrides, *shareds;
} then_ctx;

static void inline_b(copier *ca, uint32_t value, uint32_t index) {
    then_ctx *t = ca->user;
    kf_kernel *r = ca->dst;
    /* Name a computed value and index before b uses them: composed chains stay readable and
     * shallow. */
    if (!is_trivial(r, value)) {
        value = kf__materialize(r, KF__NODE_NAMED, 0, r->nodes[value].type, &value, 1, 0, "y");
        if (!value) {
            return;
        }
    }
    if (!is_trivial(r, index)) {
        index = kf__materialize(r, KF__NODE_NAMED, 0, r->nodes[index].type, &index, 1, 0, "index");
        if (!index) {
            return;
        }
    }
    copier cb;
    if (!copier_init(&cb, r, t->b)) {
        return;
    }
    cb.bindings = t->bindings;
    cb.overrides = t->overrides;
    cb.shareds = t->shareds;
    cb.input = value;
    cb.index = index;
    copy_block(&cb, 1);
    copier_free(&cb);
}

static void wg_str(const kf_kernel *k, char *buf, size_t size) {
    snprintf(buf, size, "%ux%ux%u", (unsigned)k->workgroup[0], (unsigned)k->workgroup[1],
             (unsigned)k->workgroup[2]);
}

/* What a stage composed into another kernel's invocations (an epilogue or a prologue) may not
 * use, in words, or NULL: it runs per element inside the host kernel's own invocations. */
static const char *stage_forbidden_use(uint32_t uses) {
    if (uses & KF__USES_WORKGROUP) {
        return "workgroup memory";
    }
    if (uses & KF__USES_BARRIER) {
        return "barriers";
    }
    if (uses & KF__USES_SUBGROUP) {
        return "subgroup operations";
    }
    if (uses & KF__USES_BUILTIN) {
        return "invocation builtins (ids)";
    }
    return NULL;
}

static bool then_check(kf_kernel *r, const kf_kernel *a, const kf_kernel *b) {
    char s0[48], s1[48];
    const char *an = a->name, *bn = b->name;
    if (a->status != KF_OK || b->status != KF_OK) {
        const kf_kernel *bad = a->status != KF_OK ? a : b;
        kf__fail(r, bad->status, "kf_kernel_then: '%s' is invalid: %s", bad->name, bad->error);
        return false;
    }
    if (a->cur_block != 1 || b->cur_block != 1) {
        kf__fail(r, KF_ERROR_INVALID_ARGUMENT,
                 "kf_kernel_then: '%s' still has an open if, for or while (close it with kf_end)",
                 a->cur_block != 1 ? an : bn);
        return false;
    }
    if (a->output.scalar == KF_SCALAR_VOID) {
        kf__fail(r, KF_ERROR_TYPE,
                 "kf_kernel_then: '%s' has no output (no store phase) to feed '%s'", an, bn);
        return false;
    }
    if (b->input.scalar == KF_SCALAR_VOID) {
        kf__fail(r, KF_ERROR_TYPE,
                 "kf_kernel_then: '%s' is not a stage (its input is void), so it cannot run on "
                 "the values '%s' yields",
                 bn, an);
        return false;
    }
    if (!kf_type_eq(a->output, b->input)) {
        kf__fail(r, KF_ERROR_TYPE, "kf_kernel_then: '%s' yields %s but '%s' takes %s", an,
                 kf_type_str(a->output, s0, sizeof s0), bn, kf_type_str(b->input, s1, sizeof s1));
        return false;
    }
    if (memcmp(a->workgroup, b->workgroup, sizeof a->workgroup) != 0) {
        wg_str(a, s0, sizeof s0);
        wg_str(b, s1, sizeof s1);
        kf__fail(r, KF_ERROR_TYPE, "kf_kernel_then: workgroup sizes differ: '%s' is %s, '%s' is %s",
                 an, s0, bn, s1);
        return false;
    }
    const char *what = stage_forbidden_use(b->uses);
    if (what) {
        kf__fail(r, KF_ERROR_TYPE,
                 "kf_kernel_then: '%s' uses %s; a stage composed after '%s' runs inside its "
                 "invocations and may only use its In value, its index and its own bindings",
                 bn, what, an);
        return false;
    }
    return true;
}

/* A binding name not yet used in r ("bias", else "bias_1", "bias_2", ...). */
static void unique_binding_name(const kf_kernel *r, const char *base, char *out, size_t size) {
    snprintf(out, size, "%s", base);
    for (unsigned i = 1;
         kf__binding_find(r, out) || (r->input.scalar != KF_SCALAR_VOID && !strcmp(out, "in")) ||
         (r->output.scalar != KF_SCALAR_VOID && !strcmp(out, "out"));
         i++) {
        snprintf(out, size, "%s_%u", base, i);
    }
}

/* Declares src's bindings, overrides and workgroup arrays in r, filling the maps. `fn` names the
 * caller in messages; binding `retype` (0: none) is declared with type `as` instead of its own. */
static bool copy_decls(kf_kernel *r, const kf_kernel *src, uint32_t *bmap, uint32_t *omap,
                       uint32_t *smap, bool merge_overrides, const char *fn, uint32_t retype,
                       kf_type as) {
    char name[300];
    for (uint32_t i = 1; i < src->binding_count && kf__ok(r); i++) {
        const kf__binding *b = &src->bindings[i];
        unique_binding_name(r, kf__str(src, b->name), name, sizeof name);
        bmap[i] = kf__binding_new(r, name, (kf_binding_kind)b->kind, i == retype ? as : b->type,
                                  KF__ROLE_DECLARED);
    }
    for (uint32_t i = 1; i < src->override_count && kf__ok(r); i++) {
        const kf__override *o = &src->overrides[i];
        const char *nm = kf__str(src, o->name);
        uint32_t found = merge_overrides ? kf__override_find(r, nm) : 0;
        if (found) {
            char s0[48], s1[48];
            if (!kf_type_eq(r->overrides[found].type, o->type)) {
                kf__fail(r, KF_ERROR_TYPE, "%s: override '%s' is %s in one kernel and %s in '%s'",
                         fn, nm, kf_type_str(r->overrides[found].type, s0, sizeof s0),
                         kf_type_str(o->type, s1, sizeof s1), src->name);
                return false;
            }
            omap[i] = found; /* same name and type: one constant for both */
        } else {
            omap[i] = kf__override_new(r, nm, o->type, o->has_default, o->value);
        }
    }
    for (uint32_t i = 1; i < src->shared_count && kf__ok(r); i++) {
        const kf__shared *s = &src->shareds[i];
        smap[i] = kf__shared_new(r, kf__str(src, s->name), s->elem, s->count);
    }
    return kf__ok(r);
}

kf_kernel *kf_kernel_then(const kf_kernel *a, const kf_kernel *b) {
    char name[256];
    snprintf(name, sizeof name, "%s |> %s", a ? a->name : "(null)", b ? b->name : "(null)");
    kf_kernel_desc desc = {0};
    desc.name = name;
    if (a) {
        memcpy(desc.workgroup_size, a->workgroup, sizeof desc.workgroup_size);
        desc.input = a->input;
    }
    if (b) {
        desc.output = b->output;
    }
    kf_kernel *r = kf__kernel_new(&desc);
    if (!r) {
        return NULL;
    }
    if (!a || !b) {
        kf__fail(r, KF_ERROR_INVALID_ARGUMENT, "kf_kernel_then: %s is NULL", !a ? "a" : "b");
        return r;
    }
    if (!kf__ok(r) || !then_check(r, a, b)) {
        return r;
    }
    memcpy(r->grid, a->grid, sizeof r->grid);
    r->uses |= a->uses | b->uses;
    uint32_t *maps = calloc((size_t)a->binding_count + a->override_count + a->shared_count +
                                b->binding_count + b->override_count + b->shared_count,
                            sizeof *maps);
    if (!maps) {
        kf_kernel_destroy(r);
        return NULL;
    }
    uint32_t *ab = maps, *ao = ab + a->binding_count, *as = ao + a->override_count;
    uint32_t *bb = as + a->shared_count, *bo = bb + b->binding_count, *bs = bo + b->override_count;
    kf_type none = kf_type_scalar(KF_SCALAR_VOID);
    if (copy_decls(r, a, ab, ao, as, false, "kf_kernel_then", 0, none) &&
        copy_decls(r, b, bb, bo, bs, true, "kf_kernel_then", 0, none)) {
        then_ctx t = {b, bb, bo, bs};
        copier ca;
        if (copier_init(&ca, r, a)) {
            ca.bindings = ab;
            ca.overrides = ao;
            ca.shareds = as;
            ca.on_yield = inline_b;
            ca.user = &t;
            copy_block(&ca, 1);
            copier_free(&ca);
        }
    }
    free(maps);
    if (r->status == KF_ERROR_OUT_OF_MEMORY) {
        kf_kernel_destroy(r);
        return NULL;
    }
    return r;
}

/* ======================================================================================== */
/* kf_kernel_prologue                                                                       */
/* ======================================================================================== */

typedef struct pro_ctx {
    const kf_kernel *p;
    const uint32_t *bindings, *overrides, *shareds;
    uint32_t binding; /* the retyped binding in the result */
    kf_type loaded;   /* what a load of it gives in the result */
    bool lanewise;    /* p runs once per lane of each vector loaded */
    uint32_t lanes;   /* of the binding's type */
    const char *hint; /* names p's result */
    uint32_t yielded; /* p's yielded value, set by capture_yield */
} pro_ctx;

static void capture_yield(copier *cp, uint32_t value, uint32_t index) {
    (void)index; /* checked to be p's own index before composing */
    pro_ctx *t = cp->user;
    t->yielded = value;
}

/* p's body, with In bound to `input` and its index to `index`, at the current point of r; returns
 * the value p yields (0 on failure). */
static uint32_t apply_p(kf_kernel *r, pro_ctx *t, uint32_t input, uint32_t index) {
    copier cp;
    if (!copier_init(&cp, r, t->p)) {
        return 0;
    }
    cp.bindings = t->bindings;
    cp.overrides = t->overrides;
    cp.shareds = t->shareds;
    cp.input = input;
    cp.index = index;
    cp.on_yield = capture_yield;
    cp.user = t;
    t->yielded = 0;
    copy_block(&cp, 1);
    copier_free(&cp);
    return kf__ok(r) ? t->yielded : 0;
}

static uint32_t u32_lit(kf_kernel *r, uint32_t v) {
    return kf__lit_bits(r, KF_SCALAR_U32, v);
}

/* A load of the prologue's binding: the load from the retyped binding, then p on what it gives
 * (lane by lane for a vector whose lanes p takes one at a time, each lane's index being the
 * vector's index times its lanes plus the lane: the element's own index). */
static uint32_t load_through_p(copier *ca, uint32_t src_node, uint32_t index) {
    pro_ctx *t = ca->user;
    kf_kernel *r = ca->dst;
    const kf__ir_node *n = &ca->src->nodes[src_node];
    const char *hint = n->name ? kf__str(ca->src, n->name) : NULL;
    uint32_t raw = kf__materialize(r, KF__NODE_LOAD, 0, t->loaded, &index, 1, t->binding, hint);
    if (!raw) {
        return 0;
    }
    kf_type u32 = kf_type_scalar(KF_SCALAR_U32);
    uint32_t at = index;
    if (r->nodes[at].type.scalar != KF_SCALAR_U32) {
        at = kf__pure(r, KF__NODE_CAST, 0, u32, &at, 1); /* p's index is a u32 */
    }
    uint32_t value = 0;
    if (!t->lanewise) {
        value = apply_p(r, t, raw, at);
    } else {
        uint32_t lanes[4] = {0};
        kf_type lane_type = kf__type_elem(t->loaded);
        uint32_t mul_args[2] = {at, u32_lit(r, t->lanes)};
        uint32_t first = kf__pure(r, KF__NODE_BINARY, KF_OP_MUL, u32, mul_args, 2);
        for (uint32_t l = 0; l < t->lanes && kf__ok(r); l++) {
            uint32_t in = kf__pure(r, KF__NODE_EXTRACT, 0, lane_type, &raw, 1);
            if (!in) {
                return 0;
            }
            r->nodes[in].ref = l;
            uint32_t add_args[2] = {first, u32_lit(r, l)};
            uint32_t idx = l ? kf__pure(r, KF__NODE_BINARY, KF_OP_ADD, u32, add_args, 2) : first;
            lanes[l] = idx ? apply_p(r, t, in, idx) : 0;
            if (!lanes[l]) {
                return 0;
            }
        }
        kf_type vt = kf_type_vec(t->p->output.scalar, t->lanes);
        /* p yielding its In unchanged gives back the loaded vector: an identity prologue leaves
         * the consumer as it was */
        bool same = kf_type_eq(vt, t->loaded);
        for (uint32_t l = 0; l < t->lanes && same; l++) {
            const kf__ir_node *ln = &r->nodes[lanes[l]];
            same = ln->kind == KF__NODE_EXTRACT && ln->args[0] == raw && ln->ref == l;
        }
        value = same ? raw : kf__pure(r, KF__NODE_VEC, 0, vt, lanes, t->lanes);
    }
    if (value && !is_trivial(r, value)) {
        value = kf__materialize(r, KF__NODE_NAMED, 0, r->nodes[value].type, &value, 1, 0, t->hint);
    }
    return value;
}

/* Why p cannot be composed into the loads of binding `bi` of c: 0 when it can; else the status,
 * with the message on r. Sets *lanewise and *as (the binding's type in the result). */
static kf_status pro_check(kf_kernel *r, const kf_kernel *c, const char *name, const kf_kernel *p,
                           uint32_t *bi, bool *lanewise, kf_type *as) {
    const char *cn = c->name, *pn = p->name;
    char s0[48], s1[48];
    if (c->status != KF_OK || p->status != KF_OK) {
        const kf_kernel *bad = c->status != KF_OK ? c : p;
        kf__fail(r, bad->status, "kf_kernel_prologue: '%s' is invalid: %s", bad->name, bad->error);
        return bad->status;
    }
    if (c->cur_block != 1 || p->cur_block != 1) {
        kf__fail(r, KF_ERROR_INVALID_ARGUMENT,
                 "kf_kernel_prologue: '%s' still has an open if, for or while (close it with "
                 "kf_end)",
                 c->cur_block != 1 ? cn : pn);
        return KF_ERROR_INVALID_ARGUMENT;
    }
    *bi = kf__binding_find(c, name);
    if (!*bi) {
        bool in = c->input.scalar != KF_SCALAR_VOID && !strcmp(name, "in");
        kf__fail(r, KF_ERROR_INVALID_ARGUMENT,
                 in ? "kf_kernel_prologue: '%s' is a stage: compose onto its In with "
                      "kf_kernel_then(prologue, stage) (binding '%s')"
                    : "kf_kernel_prologue: '%s' has no binding '%s' (declared with "
                      "kf_kernel_storage)",
                 cn, name);
        return KF_ERROR_INVALID_ARGUMENT;
    }
    const kf__binding *b = &c->bindings[*bi];
    if (b->kind != KF_BINDING_STORAGE_READ) {
        kf__fail(r, KF_ERROR_TYPE,
                 "kf_kernel_prologue: binding '%s' of '%s' is %s; a prologue applies to a "
                 "read-only storage binding",
                 name, cn, b->kind == KF_BINDING_UNIFORM ? "a uniform" : "read_write");
        return KF_ERROR_TYPE;
    }
    for (uint32_t s = 1; s < c->stmt_count; s++) {
        const kf__stmt *st = &c->stmts[s];
        if ((st->kind == KF__STMT_SGMAT_LOAD || st->kind == KF__STMT_SGMAT_STORE) &&
            (st->flags & KF__SGMAT_STORAGE) && st->d == *bi) {
            kf__fail(r, KF_ERROR_UNSUPPORTED,
                     "kf_kernel_prologue: '%s' loads binding '%s' straight into subgroup "
                     "matrices (kf_sgmat_load_storage), whose elements no element-wise kernel "
                     "can reach; stage that operand through workgroup memory",
                     cn, name);
            return KF_ERROR_UNSUPPORTED;
        }
    }
    if (p->input.scalar == KF_SCALAR_VOID || p->output.scalar == KF_SCALAR_VOID) {
        kf__fail(r, KF_ERROR_TYPE,
                 "kf_kernel_prologue: '%s' is not a stage with an output (its input or output "
                 "is void), so it cannot transform the values '%s' loads",
                 pn, cn);
        return KF_ERROR_TYPE;
    }
    const char *what = stage_forbidden_use(p->uses);
    if (what) {
        kf__fail(r, KF_ERROR_TYPE,
                 "kf_kernel_prologue: '%s' uses %s; a prologue runs at each load of '%s' and may "
                 "only use its In value, its index and its own bindings",
                 pn, what, cn);
        return KF_ERROR_TYPE;
    }
    uint32_t yields = 0, top = 0;
    for (uint32_t s = 1; s < p->stmt_count; s++) {
        const kf__stmt *st = &p->stmts[s];
        if (st->kind == KF__STMT_YIELD) {
            yields++;
            top += st->block == 1 && st->b == p->index_node;
        }
        if (st->kind == KF__STMT_STORE) {
            kf__fail(r, KF_ERROR_TYPE,
                     "kf_kernel_prologue: '%s' stores to memory; a prologue runs at every load "
                     "(some elements are loaded many times) and may only yield",
                     pn);
            return KF_ERROR_TYPE;
        }
    }
    if (yields != 1 || top != 1) {
        kf__fail(r, KF_ERROR_TYPE,
                 "kf_kernel_prologue: '%s' yields %u time(s)%s; a prologue yields one value per "
                 "element, once, outside any if or loop, at its own index (kf_kernel_index)",
                 pn, (unsigned)yields, yields == 1 ? " but not once at its own index" : "");
        return KF_ERROR_TYPE;
    }
    /* p yields what the binding held, element by element or lane by lane */
    kf_type t = b->type;
    if (kf_type_eq(p->output, t)) {
        *lanewise = false;
        *as = p->input;
    } else if (kf__type_is_vec(t) && kf_type_eq(p->output, kf__type_elem(t)) &&
               kf__type_lanes(p->input) == 1) {
        *lanewise = true;
        *as = kf_type_vec(p->input.scalar, kf__type_lanes(t));
    } else {
        kf__fail(r, KF_ERROR_TYPE,
                 "kf_kernel_prologue: '%s' yields %s but binding '%s' of '%s' holds %s (a "
                 "prologue yields the binding's type, or its lane type for a vector binding)",
                 pn, kf_type_str(p->output, s0, sizeof s0), name, cn,
                 kf_type_str(t, s1, sizeof s1));
        return KF_ERROR_TYPE;
    }
    if (as->count || !kf__type_valid(*as)) {
        kf__fail(r, KF_ERROR_TYPE, "kf_kernel_prologue: '%s' takes %s, which a binding cannot hold",
                 pn, kf_type_str(p->input, s0, sizeof s0));
        return KF_ERROR_TYPE;
    }
    return KF_OK;
}

kf_kernel *kf_kernel_prologue(const kf_kernel *consumer, const char *binding,
                              const kf_kernel *prologue) {
    const kf_kernel *c = consumer, *p = prologue;
    char name[256];
    snprintf(name, sizeof name, "%s |> %s.%s", p ? p->name : "(null)", c ? c->name : "(null)",
             binding ? binding : "(null)");
    kf_kernel_desc desc = {0};
    desc.name = name;
    if (c) {
        memcpy(desc.workgroup_size, c->workgroup, sizeof desc.workgroup_size);
        desc.input = c->input;
        desc.output = c->output;
    }
    kf_kernel *r = kf__kernel_new(&desc);
    if (!r) {
        return NULL;
    }
    if (!c || !p || !binding) {
        kf__fail(r, KF_ERROR_INVALID_ARGUMENT, "kf_kernel_prologue: %s is NULL",
                 !c   ? "consumer"
                 : !p ? "prologue"
                      : "binding");
        return r;
    }
    uint32_t bi = 0;
    bool lanewise = false;
    kf_type as = {0};
    if (!kf__ok(r) || pro_check(r, c, binding, p, &bi, &lanewise, &as) != KF_OK) {
        return r;
    }
    memcpy(r->grid, c->grid, sizeof r->grid);
    r->uses |= c->uses | p->uses;
    uint32_t *maps = calloc((size_t)c->binding_count + c->override_count + c->shared_count +
                                p->binding_count + p->override_count + p->shared_count,
                            sizeof *maps);
    if (!maps) {
        kf_kernel_destroy(r);
        return NULL;
    }
    uint32_t *cb = maps, *co = cb + c->binding_count, *cs = co + c->override_count;
    uint32_t *pb = cs + c->shared_count, *po = pb + p->binding_count, *ps = po + p->override_count;
    const char *fn = "kf_kernel_prologue";
    if (copy_decls(r, c, cb, co, cs, false, fn, bi, as) &&
        copy_decls(r, p, pb, po, ps, true, fn, 0, as)) {
        char hint[300];
        snprintf(hint, sizeof hint, "%s_in", binding);
        pro_ctx t = {p, pb, po, ps, cb[bi], as, lanewise, kf__type_lanes(as), hint, 0};
        copier ca;
        if (copier_init(&ca, r, c)) {
            ca.bindings = cb;
            ca.overrides = co;
            ca.shareds = cs;
            ca.load_binding = bi;
            ca.on_load = load_through_p;
            ca.user = &t;
            copy_block(&ca, 1);
            copier_free(&ca);
        }
    }
    free(maps);
    if (r->status == KF_ERROR_OUT_OF_MEMORY) {
        kf_kernel_destroy(r);
        return NULL;
    }
    return r;
}

/* ======================================================================================== */
/* mapK and identity                                                                        */
/* ======================================================================================== */

kf_kernel *kf_kernel_map(const char *name, kf_type input, kf_type output,
                         const uint32_t workgroup_size[3], kf_map_fn fn, void *user) {
    kf_kernel_desc desc = {0};
    desc.name = name && *name ? name : "map";
    desc.input = input;
    desc.output = output;
    if (workgroup_size) {
        memcpy(desc.workgroup_size, workgroup_size, sizeof desc.workgroup_size);
    }
    kf_kernel *k = kf__kernel_new(&desc);
    if (!k || !kf__ok(k)) {
        return k;
    }
    if (input.scalar == KF_SCALAR_VOID || output.scalar == KF_SCALAR_VOID) {
        kf__fail(k, KF_ERROR_TYPE, "kf_kernel_map: the input and output types must not be void");
        return k;
    }
    if (!fn) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT, "kf_kernel_map: the map function is NULL");
        return k;
    }
    kf_val y = fn(k, kf_kernel_input(k), user);
    if (kf__ok(k) && k->cur_block != 1) {
        kf__fail(k, KF_ERROR_INVALID_ARGUMENT,
                 "kf_kernel_map: the map function left an if, for or while open");
        return k;
    }
    kf_kernel_yield(k, y, kf_kernel_index(k));
    return k;
}

static kf_val identity_fn(kf_kernel *k, kf_val x, void *user) {
    (void)k;
    (void)user;
    return x;
}

kf_kernel *kf_kernel_identity(kf_type type, const uint32_t workgroup_size[3]) {
    return kf_kernel_map("identity", type, type, workgroup_size, identity_fn, NULL);
}

/* ======================================================================================== */
/* lowering: the kernel as emitted and interpreted                                          */
/* ======================================================================================== */

typedef struct prep_ctx {
    uint32_t out;
} prep_ctx;

static void store_out(copier *c, uint32_t value, uint32_t index) {
    prep_ctx *p = c->user;
    kf__emit_stmt(c->dst, KF__STMT_STORE, p->out, index, value, 0);
}

static void count_use(const kf_kernel *w, uint32_t id, uint32_t *uses, uint8_t *seen) {
    if (!id) {
        return;
    }
    uses[id]++;
    const kf__ir_node *n = &w->nodes[id];
    if (seen[id] || n->materialized) {
        return;
    }
    seen[id] = 1;
    for (uint32_t i = 0; i < n->nargs; i++) {
        count_use(w, n->args[i], uses, seen);
    }
}

/* Links a new let of `node` into block `blk` after statement `after` (0: at the start), after the
 * shared-value lets already placed there, so they stay in creation order. */
static void insert_let(kf_kernel *w, uint32_t blk, uint32_t after, uint32_t node) {
    uint32_t saved = w->cur_block;
    w->cur_block = 0; /* allocate into the unused block 0, then relink */
    uint32_t s = kf__stmt_new(w, KF__STMT_LET);
    w->cur_block = saved;
    if (!s) {
        return;
    }
    w->blocks[0].first = w->blocks[0].last = 0;
    kf__stmt *st = &w->stmts[s];
    st->ref = node;
    st->hoisted = 1;
    st->block = blk;
    kf__block *b = &w->blocks[blk];
    uint32_t prev = after;
    uint32_t next = prev ? w->stmts[prev].next : b->first;
    while (next && w->stmts[next].hoisted) {
        prev = next;
        next = w->stmts[next].next;
    }
    st->next = next;
    if (prev) {
        w->stmts[prev].next = s;
    } else {
        b->first = s;
    }
    if (!next) {
        b->last = s;
    }
}

static void hoist_shared_values(kf_kernel *w) {
    uint32_t *uses = calloc(w->node_count, sizeof *uses);
    uint8_t *seen = calloc(w->node_count, 1);
    if (!uses || !seen) {
        free(uses);
        free(seen);
        kf__fail(w, KF_ERROR_OUT_OF_MEMORY, "out of memory while preparing the kernel");
        return;
    }
    for (uint32_t s = 1; s < w->stmt_count; s++) {
        const kf__stmt *st = &w->stmts[s];
        if (st->kind == KF__STMT_LET) {
            const kf__ir_node *n = &w->nodes[st->ref];
            for (uint32_t i = 0; i < n->nargs; i++) {
                count_use(w, n->args[i], uses, seen);
            }
            continue;
        }
        count_use(w, st->a, uses, seen);
        if (st->kind == KF__STMT_STORE || st->kind == KF__STMT_SHARED_STORE ||
            st->kind == KF__STMT_FOR || st->kind == KF__STMT_YIELD ||
            st->kind == KF__STMT_SGMAT_LOAD || st->kind == KF__STMT_SGMAT_STORE) {
            count_use(w, st->b, uses, seen);
        }
        if (st->kind == KF__STMT_FOR || (st->kind == KF__STMT_SHARED_STORE && st->c)) {
            count_use(w, st->c, uses, seen);
        }
    }
    uint32_t count = w->node_count;
    for (uint32_t id = 1; id < count && kf__ok(w); id++) {
        if (uses[id] < 2 || is_trivial(w, id)) {
            continue;
        }
        const kf__ir_node *n = &w->nodes[id];
        uint32_t scope = n->scope ? n->scope : 1;
        uint32_t blk = n->at_block, after = n->at_stmt;
        if (blk != scope) {
            /* created in a nested block: the let goes before the statement holding that block */
            while (w->blocks[blk].parent != scope) {
                blk = w->blocks[blk].parent;
            }
            uint32_t holder = w->blocks[blk].owner;
            after = 0;
            for (uint32_t s = w->blocks[scope].first; s && s != holder; s = w->stmts[s].next) {
                after = s;
            }
        }
        w->nodes[id].materialized = 1;
        insert_let(w, scope, after, id);
    }
    free(uses);
    free(seen);
}

/* ---- constants ---- */

/* WGSL evaluates expressions of literals when it compiles (and of overrides when it creates the
 * pipeline), where an overflow, a division by zero, a shift by 32 or more, or an out-of-range
 * conversion is an error instead of the defined run-time result. So kfuse folds constant
 * expressions itself, with the interpreter's (run-time) semantics; reads overrides through a let
 * where they meet other constants; and rewrites run-time operations whose constant operand WGSL
 * would reject (x << 40u is x << 8u at run time, x / 0u is x, clamp(x, 2, 1) is min(max(...))). */

enum { K_RUNTIME = 0, K_CONST, K_OVERRIDE };

static bool literal_form(const kf_kernel *w, uint32_t id) {
    const kf__ir_node *n = &w->nodes[id];
    if (n->kind == KF__NODE_LIT) {
        return true;
    }
    if (n->kind != KF__NODE_SPLAT && n->kind != KF__NODE_VEC) {
        return false;
    }
    for (uint32_t i = 0; i < n->nargs; i++) {
        if (w->nodes[n->args[i]].kind != KF__NODE_LIT) {
            return false;
        }
    }
    return true;
}

/* The lanes of a literal-form node. */
static void literal_lanes(const kf_kernel *w, uint32_t id, uint32_t *out) {
    const kf__ir_node *n = &w->nodes[id];
    uint32_t lanes = kf__type_lanes(n->type);
    for (uint32_t c = 0; c < lanes; c++) {
        if (n->kind == KF__NODE_LIT) {
            out[c] = n->bits;
        } else {
            out[c] = w->nodes[n->args[n->kind == KF__NODE_SPLAT ? 0 : c]].bits;
        }
    }
}

/* A new literal-form node of type t with the given lanes. */
static uint32_t const_node(kf_kernel *w, kf_type t, const uint32_t *lanes) {
    uint32_t n = kf__type_lanes(t);
    if (n == 1) {
        return kf__lit_bits(w, t.scalar, lanes[0]);
    }
    bool same = true;
    for (uint32_t c = 1; c < n; c++) {
        same = same && lanes[c] == lanes[0];
    }
    uint32_t args[4];
    for (uint32_t c = 0; c < (same ? 1u : n); c++) {
        args[c] = kf__lit_bits(w, t.scalar, lanes[c]);
    }
    if (!kf__ok(w)) {
        return 0;
    }
    return kf__pure(w, same ? KF__NODE_SPLAT : KF__NODE_VEC, 0, t, args, same ? 1u : n);
}

static bool lt_bits(kf_scalar s, uint32_t a, uint32_t b) {
    if (kf__is_float(s)) {
        float x, y;
        memcpy(&x, &a, sizeof x);
        memcpy(&y, &b, sizeof y);
        return x < y;
    }
    return s == KF_SCALAR_I32 ? (int32_t)a < (int32_t)b : a < b;
}

/* `let m_v = m;` at the start of the body, once per override. */
static void insert_let(kf_kernel *w, uint32_t blk, uint32_t after, uint32_t node);

static uint32_t override_let(kf_kernel *w, uint32_t ov_node, uint32_t *lets) {
    uint32_t o = w->nodes[ov_node].ref;
    if (lets[o]) {
        return lets[o];
    }
    char hint[300];
    snprintf(hint, sizeof hint, "%s_v", kf__str(w, w->overrides[o].name));
    uint32_t nm = kf__string_add(w, hint);
    uint32_t id = kf__node_new(w, KF__NODE_NAMED, w->nodes[ov_node].type);
    if (!id || !kf__ok(w)) {
        return 0;
    }
    kf__ir_node *n = &w->nodes[id];
    n->args[0] = ov_node;
    n->nargs = 1;
    n->materialized = 1;
    n->scope = 1;
    n->at_block = 1;
    n->name = nm;
    insert_let(w, 1, 0, id);
    lets[o] = id;
    return id;
}

static void fold_constants(kf_kernel *w) {
    uint32_t count = w->node_count;
    uint8_t *kind = calloc(count, 1);
    uint32_t *lets = calloc(w->override_count, sizeof *lets);
    uint32_t *words = NULL;
    kf__folder *folder = kf__folder_new(w);
    if (!kind || !lets || !folder) {
        kf__fail(w, KF_ERROR_OUT_OF_MEMORY, "out of memory while preparing the kernel");
        goto done;
    }
    size_t total = 0;
    size_t *at = calloc(count, sizeof *at);
    for (uint32_t id = 1; at && id < count; id++) {
        at[id] = total;
        total += kf__type_words(w->nodes[id].type);
    }
    words = calloc(total ? total : 1, sizeof *words);
    if (!at || !words) {
        free(at);
        kf__fail(w, KF_ERROR_OUT_OF_MEMORY, "out of memory while preparing the kernel");
        goto done;
    }
    /* which nodes are constant, and their values (evaluated before anything changes) */
    bool *fold = calloc(count, sizeof *fold);
    if (!fold) {
        free(at);
        kf__fail(w, KF_ERROR_OUT_OF_MEMORY, "out of memory while preparing the kernel");
        goto done;
    }
    for (uint32_t id = 1; id < count; id++) {
        const kf__ir_node *n = &w->nodes[id];
        switch ((kf__ir_node_kind)n->kind) {
        case KF__NODE_LIT:
            kind[id] = K_CONST;
            break;
        case KF__NODE_OVERRIDE:
            kind[id] = K_OVERRIDE;
            break;
        case KF__NODE_UNARY:
        case KF__NODE_BINARY:
        case KF__NODE_CALL:
        case KF__NODE_CAST:
        case KF__NODE_BITCAST:
        case KF__NODE_SPLAT:
        case KF__NODE_VEC:
        case KF__NODE_EXTRACT: {
            uint8_t kd = K_CONST;
            for (uint32_t i = 0; i < n->nargs; i++) {
                uint8_t a = kind[n->args[i]];
                kd = a == K_RUNTIME ? K_RUNTIME : (kd == K_RUNTIME ? K_RUNTIME : (a > kd ? a : kd));
            }
            kind[id] = kd;
            fold[id] = kd == K_CONST && !literal_form(w, id) && n->type.count == 0 &&
                       kf__folder_eval(folder, id, words + at[id]);
            break;
        }
        default:
            kind[id] = K_RUNTIME;
            break;
        }
    }
    for (uint32_t id = 1; id < count && kf__ok(w); id++) {
        if (fold[id]) {
            kf_type t = w->nodes[id].type;
            uint32_t lanes = kf__type_lanes(t);
            if (lanes == 1) {
                kf__ir_node *n = &w->nodes[id];
                n->kind = KF__NODE_LIT;
                n->nargs = 0;
                n->bits = words[at[id]];
                n->scope = 0;
                n->depth = 1;
            } else {
                uint32_t c = const_node(w, t, words + at[id]);
                if (!c) {
                    break;
                }
                w->nodes[id] = w->nodes[c]; /* the same SPLAT or VEC of literals, in place */
            }
            continue;
        }
        if (kind[id] == K_OVERRIDE && w->nodes[id].kind != KF__NODE_OVERRIDE) {
            for (uint32_t i = 0; i < w->nodes[id].nargs; i++) {
                uint32_t a = w->nodes[id].args[i];
                if (w->nodes[a].kind == KF__NODE_OVERRIDE) {
                    uint32_t l = override_let(w, a, lets);
                    w->nodes[id].args[i] = l;
                    w->nodes[id].scope = kf__block_deeper(w, w->nodes[id].scope, 1);
                }
            }
        }
    }
    free(fold);
    free(at);
    /* run-time operations with a constant operand WGSL would refuse */
    uint32_t after_fold = w->node_count;
    for (uint32_t id = 1; id < after_fold && kf__ok(w); id++) {
        kf__ir_node n = w->nodes[id];
        uint32_t lanes[4], lo[4], hi[4];
        kf_scalar s = n.type.scalar;
        if (n.kind == KF__NODE_BINARY && (n.op == KF_OP_SHL || n.op == KF_OP_SHR) &&
            literal_form(w, n.args[1])) {
            kf_type bt = w->nodes[n.args[1]].type;
            literal_lanes(w, n.args[1], lanes);
            bool changed = false;
            for (uint32_t c = 0; c < kf__type_lanes(bt); c++) {
                changed = changed || lanes[c] > 31;
                lanes[c] &= 31u;
            }
            if (changed) {
                uint32_t r = const_node(w, bt, lanes);
                w->nodes[id].args[1] = r;
            }
        } else if (n.kind == KF__NODE_BINARY && (n.op == KF_OP_DIV || n.op == KF_OP_MOD) &&
                   kf__is_int(s) && literal_form(w, n.args[1])) {
            kf_type bt = w->nodes[n.args[1]].type;
            literal_lanes(w, n.args[1], lanes);
            bool changed = false;
            for (uint32_t c = 0; c < kf__type_lanes(bt); c++) {
                if (lanes[c] == 0) { /* x / 0 is x and x % 0 is 0: so are x / 1 and x % 1 */
                    lanes[c] = 1;
                    changed = true;
                }
            }
            if (changed) {
                uint32_t r = const_node(w, bt, lanes);
                w->nodes[id].args[1] = r;
            }
        } else if (n.kind == KF__NODE_CALL && n.op == KF_FN_CLAMP && literal_form(w, n.args[1]) &&
                   literal_form(w, n.args[2])) {
            literal_lanes(w, n.args[1], lo);
            literal_lanes(w, n.args[2], hi);
            bool inverted = false;
            for (uint32_t c = 0; c < kf__type_lanes(n.type); c++) {
                inverted = inverted || lt_bits(s, hi[c], lo[c]);
            }
            if (inverted) {
                uint32_t mx_args[2] = {n.args[0], n.args[1]};
                uint32_t mx = kf__pure(w, KF__NODE_CALL, KF_FN_MAX, n.type, mx_args, 2);
                if (!mx) {
                    break;
                }
                w->nodes[mx].at_block = n.at_block;
                w->nodes[mx].at_stmt = n.at_stmt;
                kf__ir_node *m = &w->nodes[id];
                m->op = KF_FN_MIN;
                m->nargs = 2;
                m->args[0] = mx;
                m->args[1] = n.args[2];
            }
        }
    }
done:
    free(kind);
    free(lets);
    free(words);
    kf__folder_free(folder);
}

kf_kernel *kf__kernel_prepare(const kf_kernel *k) {
    kf_kernel_desc desc = {0};
    desc.name = k->name;
    memcpy(desc.workgroup_size, k->workgroup, sizeof desc.workgroup_size);
    kf_kernel *w = kf__kernel_new(&desc);
    if (!w) {
        return NULL;
    }
    if (k->status != KF_OK) {
        w->status = k->status;
        memcpy(w->error, k->error, sizeof w->error);
        return w;
    }
    if (k->cur_block != 1) {
        char open[64];
        snprintf(w->error, sizeof w->error,
                 "kernel '%s': %u block(s) still open (the innermost: %s): close each with "
                 "kf_end",
                 k->name, (unsigned)k->blocks[k->cur_block].depth,
                 kf__open_block_str(k, open, sizeof open));
        w->status = KF_ERROR_INVALID_ARGUMENT;
        return w;
    }
    bool stage = k->input.scalar != KF_SCALAR_VOID;
    bool output = k->output.scalar != KF_SCALAR_VOID;
    w->uses = k->uses;
    memcpy(w->grid, k->grid, sizeof w->grid);
    uint32_t in = 0;
    if (stage) {
        in = kf__binding_new(w, "in", KF_BINDING_STORAGE_READ, k->input, KF__ROLE_IN);
    }
    uint32_t *maps =
        calloc((size_t)k->binding_count + k->override_count + k->shared_count, sizeof *maps);
    if (!maps) {
        kf_kernel_destroy(w);
        return NULL;
    }
    uint32_t *bm = maps, *om = bm + k->binding_count, *sm = om + k->override_count;
    for (uint32_t i = 1; i < k->binding_count; i++) {
        const kf__binding *b = &k->bindings[i];
        bm[i] = kf__binding_new(w, kf__str(k, b->name), (kf_binding_kind)b->kind, b->type,
                                KF__ROLE_DECLARED);
    }
    prep_ctx p = {0};
    if (output) {
        p.out = kf__binding_new(w, "out", KF_BINDING_STORAGE_READ_WRITE, k->output, KF__ROLE_OUT);
    }
    for (uint32_t i = 1; i < k->override_count; i++) {
        const kf__override *o = &k->overrides[i];
        om[i] = kf__override_new(w, kf__str(k, o->name), o->type, o->has_default, o->value);
    }
    for (uint32_t i = 1; i < k->shared_count; i++) {
        const kf__shared *s = &k->shareds[i];
        sm[i] = kf__shared_new(w, kf__str(k, s->name), s->elem, s->count);
    }
    copier c;
    if (kf__ok(w) && copier_init(&c, w, k)) {
        c.bindings = bm;
        c.overrides = om;
        c.shareds = sm;
        c.on_yield = store_out;
        c.user = &p;
        if (stage) {
            /* let idx = <global linear id>; if (idx < kf_elements) { let x = in[idx]; body } */
            uint32_t elems =
                kf__override_new(w, "kf_elements", kf_type_scalar(KF_SCALAR_U32), false, 0);
            uint32_t gl = kf__global_linear_node(w);
            uint32_t idx = gl ? kf__materialize(w, KF__NODE_NAMED, 0, kf_type_scalar(KF_SCALAR_U32),
                                                &gl, 1, 0, "idx")
                              : 0;
            uint32_t ov = kf__pure(w, KF__NODE_OVERRIDE, 0, kf_type_scalar(KF_SCALAR_U32), NULL, 0);
            if (ov) {
                w->nodes[ov].ref = elems;
            }
            uint32_t lt_args[2] = {idx, ov};
            uint32_t cond = idx && ov ? kf__pure(w, KF__NODE_BINARY, KF_OP_LT,
                                                 kf_type_scalar(KF_SCALAR_BOOL), lt_args, 2)
                                      : 0;
            if (cond && kf__open_if(w, cond)) {
                c.input = kf__materialize(w, KF__NODE_LOAD, 0, k->input, &idx, 1, in, "x");
                c.index = idx;
                if (c.input) {
                    copy_block(&c, 1);
                }
                kf__close(w);
            }
        } else {
            copy_block(&c, 1);
        }
        copier_free(&c);
    }
    free(maps);
    if (kf__ok(w)) {
        fold_constants(w);
    }
    if (kf__ok(w)) {
        hoist_shared_values(w);
    }
    if (w->status == KF_ERROR_OUT_OF_MEMORY) {
        kf_kernel_destroy(w);
        return NULL;
    }
    return w;
}
