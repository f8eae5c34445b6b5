/* The fusion planner: groups a graph's operators into kernels, compiles them and runs them.
 *
 * Rules, in the order the planner applies them while walking the graph in topological order:
 *   1. element-wise chains: an element-wise op joins the group of an operand whose value is that
 *      group's result, read by nothing else, not an output, of the same shape and dtype;
 *   2. matmul epilogue and 3. reduction tails: the same, where the group is a matmul or a row
 *      reduction: the element-wise ops run in its store phase (kf_kernel_then on its yield);
 *   4. horizontal fusion: independent element-wise groups of one level (copies included) share
 *      one dispatch, split only where the device's storage-buffer limit forces it.
 * What must be kept is kept: a value read twice, an output, or one broadcast into another shape
 * ends its group and is written to memory.
 */
#include "fuse/plan_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/mutate.h"
#include "ops/matmul_blocked.h"
#include "ops/matmul_sgmat.h"
#include "util/half.h"

#define KF_WORKGROUP 256u

static void plan_fail(kf_plan *p, kf_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void plan_fail(kf_plan *p, kf_status st, const char *fmt, ...) {
    if (p->status != KF_OK) {
        return;
    }
    p->status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->error, sizeof p->error, fmt, ap);
    va_end(ap);
}

static uint64_t node_bytes(const kf__node *n) {
    return kf_shape_elements(&n->shape) * kf_dtype_size(n->dtype);
}

static kf__group *new_group(kf_plan *p, kf__group_kind kind) {
    if (p->group_count == p->group_capacity) {
        uint32_t cap = p->group_capacity ? p->group_capacity * 2 : 8;
        kf__group *gs = realloc(p->groups, sizeof *gs * cap);
        if (!gs) {
            plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory planning groups");
            return NULL;
        }
        p->groups = gs;
        p->group_capacity = cap;
    }
    kf__group *grp = &p->groups[p->group_count++];
    memset(grp, 0, sizeof *grp);
    grp->kind = kind;
    return grp;
}

static bool group_push_node(kf_plan *p, kf__group *grp, uint32_t node) {
    if (grp->node_count == KF_GROUP_MAX_NODES) {
        return false;
    }
    grp->nodes[grp->node_count++] = node;
    p->group_of[node] = (int32_t)(grp - p->groups);
    return true;
}

/* May an element-wise node join the group whose result is its operand `operand`? */
static bool can_extend(const kf_plan *p, uint32_t operand, uint32_t node) {
    const kf_graph *g = p->graph;
    const kf__node *a = &g->nodes[operand], *n = &g->nodes[node];
    if (a->kind != KF__NODE_OP || p->group_of[operand] < 0) {
        return false;
    }
    const kf__group *grp = &p->groups[p->group_of[operand]];
    if (grp->kind == KF__GROUP_DEAD || grp->result != operand) {
        return false;
    }
    if (p->uses[operand] != 1 || p->is_output[operand]) {
        return false; /* read twice or needed later: it must reach memory */
    }
    if (!kf_shape_eq(&a->shape, &n->shape) || a->dtype != n->dtype) {
        return false; /* a broadcast that changes the shape ends the group */
    }
    if (grp->node_count == KF_GROUP_MAX_NODES) {
        return false;
    }
    if (grp->kind == KF__GROUP_PRODUCER) {
        kf_op_class c = g->nodes[grp->root].op->op_class;
        return c == KF_OP_CLASS_MATMUL || c == KF_OP_CLASS_ROW_REDUCTION;
    }
    return true;
}

static void plan_vertical(kf_plan *p) {
    const kf_graph *g = p->graph;
    for (uint32_t id = 1; id < g->node_count && p->status == KF_OK; id++) {
        const kf__node *n = &g->nodes[id];
        if (n->kind != KF__NODE_OP) {
            continue;
        }
        if (!kf__op_is_elementwise(n->op)) {
            kf__group *grp = new_group(p, KF__GROUP_PRODUCER);
            if (!grp) {
                return;
            }
            grp->root = id;
            grp->result = id;
            p->group_of[id] = (int32_t)(grp - p->groups);
            snprintf(grp->rule, sizeof grp->rule, "%s",
                     n->op->op_class == KF_OP_CLASS_MATMUL          ? "matmul"
                     : n->op->op_class == KF_OP_CLASS_ROW_REDUCTION ? "reduction"
                                                                    : "layout");
            continue;
        }
        int32_t base = -1;
        int32_t merge[KF_NODE_MAX_INPUTS];
        uint32_t merge_count = 0;
        if (!p->no_fuse) {
            for (uint32_t i = 0; i < n->input_count; i++) {
                uint32_t a = n->inputs[i];
                if (!can_extend(p, a, id)) {
                    continue;
                }
                int32_t gi = p->group_of[a];
                if (p->groups[gi].kind == KF__GROUP_PRODUCER) {
                    if (base < 0 || p->groups[base].kind != KF__GROUP_PRODUCER) {
                        if (base >= 0) {
                            merge[merge_count++] = base;
                        }
                        base = gi;
                    } /* a second producer stays separate: its result is written */
                } else if (base < 0) {
                    base = gi;
                } else {
                    merge[merge_count++] = gi;
                }
            }
        }
        if (base < 0) {
            kf__group *grp = new_group(p, KF__GROUP_ELEMENTWISE);
            if (!grp) {
                return;
            }
            snprintf(grp->rule, sizeof grp->rule, "element-wise");
            group_push_node(p, grp, id);
            grp->result = id;
            continue;
        }
        kf__group *grp = &p->groups[base];
        for (uint32_t m = 0; m < merge_count; m++) {
            kf__group *other = &p->groups[merge[m]];
            if (grp->node_count + other->node_count >= KF_GROUP_MAX_NODES) {
                continue; /* too big to merge: the other group's result stays in memory */
            }
            for (uint32_t j = 0; j < other->node_count; j++) {
                group_push_node(p, grp, other->nodes[j]);
            }
            other->kind = KF__GROUP_DEAD;
            other->node_count = 0;
        }
        if (!group_push_node(p, grp, id)) {
            plan_fail(p, KF_ERROR_INTERNAL, "group overflow at node %u", id);
            return;
        }
        grp->result = id;
    }
}

/* A group's materialized operands: nodes read from memory (graph inputs, other groups' results). */
static bool node_in_group(const kf__group *grp, uint32_t id) {
    if (grp->root == id) {
        return true;
    }
    for (uint32_t i = 0; i < grp->node_count; i++) {
        if (grp->nodes[i] == id) {
            return true;
        }
    }
    return false;
}

static uint32_t group_reads(const kf_plan *p, const kf__group *grp, uint32_t *out, uint32_t cap) {
    const kf_graph *g = p->graph;
    uint32_t count = 0;
    uint32_t list[KF_GROUP_MAX_NODES + 1];
    uint32_t list_count = 0;
    if (grp->root) {
        list[list_count++] = grp->root;
    }
    for (uint32_t i = 0; i < grp->node_count; i++) {
        list[list_count++] = grp->nodes[i];
    }
    for (uint32_t i = 0; i < list_count; i++) {
        const kf__node *n = &g->nodes[list[i]];
        for (uint32_t j = 0; j < n->input_count; j++) {
            uint32_t a = n->inputs[j];
            if (g->nodes[a].kind == KF__NODE_SCALAR || node_in_group(grp, a)) {
                continue;
            }
            bool seen = false;
            for (uint32_t k = 0; k < count; k++) {
                seen |= out[k] == a;
            }
            if (!seen && count < cap) {
                out[count++] = a;
            }
        }
    }
    return count;
}

static void plan_levels(kf_plan *p) {
    /* A group can grow after later groups were created (an element-wise node joining it reads
     * their results), so creation order is not dependency order: settle levels to a fixed point.
     * Dependencies are acyclic (a group's value leaves it only through its result), so this ends
     * within one pass per level. */
    for (uint32_t gi = 0; gi < p->group_count; gi++) {
        p->groups[gi].level = 1;
    }
    bool changed = true;
    for (uint32_t pass = 0; changed && pass <= p->group_count; pass++) {
        changed = false;
        for (uint32_t gi = 0; gi < p->group_count; gi++) {
            kf__group *grp = &p->groups[gi];
            if (grp->kind == KF__GROUP_DEAD) {
                continue;
            }
            uint32_t reads[KF_GROUP_MAX_SLOTS];
            uint32_t n = group_reads(p, grp, reads, KF_GROUP_MAX_SLOTS);
            for (uint32_t i = 0; i < n; i++) {
                int32_t src = p->group_of[reads[i]];
                if (src >= 0 && p->groups[src].level + 1 > grp->level) {
                    grp->level = p->groups[src].level + 1;
                    changed = true;
                }
            }
        }
    }
}

static void plan_horizontal(kf_plan *p) {
    uint32_t limit = p->max_storage_buffers;
    uint32_t max_level = 0;
    for (uint32_t gi = 0; gi < p->group_count; gi++) {
        if (p->groups[gi].level > max_level) {
            max_level = p->groups[gi].level;
        }
    }
    for (uint32_t level = 1; level <= max_level && p->status == KF_OK; level++) {
        int32_t open = -1;
        uint32_t open_slots = 0;
        uint32_t count = p->group_count; /* groups added below are horizontal: not candidates */
        for (uint32_t gi = 0; gi < count; gi++) {
            kf__group *grp = &p->groups[gi];
            if (grp->kind != KF__GROUP_ELEMENTWISE || grp->level != level) {
                continue;
            }
            uint32_t reads[KF_GROUP_MAX_SLOTS];
            uint32_t need = group_reads(p, grp, reads, KF_GROUP_MAX_SLOTS) + 1;
            if (open >= 0 && (open_slots + need > limit ||
                              p->groups[open].member_count == KF_GROUP_MAX_MEMBERS)) {
                open = -1;
            }
            if (open < 0) {
                /* Start a batch only when another candidate exists at this level. */
                bool another = false;
                for (uint32_t gj = gi + 1; gj < count; gj++) {
                    another |=
                        p->groups[gj].kind == KF__GROUP_ELEMENTWISE && p->groups[gj].level == level;
                }
                if (!another || need >= limit) {
                    continue;
                }
                kf__group *h = new_group(p, KF__GROUP_HORIZONTAL);
                if (!h) {
                    return;
                }
                grp = &p->groups[gi]; /* new_group may have moved the array */
                h->level = level;
                snprintf(h->rule, sizeof h->rule, "horizontal");
                open = (int32_t)(h - p->groups);
                open_slots = 0;
            }
            kf__group *h = &p->groups[open];
            h->members[h->member_count++] = gi;
            grp->absorbed = true;
            open_slots += need;
        }
    }
    /* A batch that ended up with one member gives it back. */
    for (uint32_t gi = 0; gi < p->group_count; gi++) {
        kf__group *h = &p->groups[gi];
        if (h->kind == KF__GROUP_HORIZONTAL && h->member_count == 1) {
            p->groups[h->members[0]].absorbed = false;
            h->kind = KF__GROUP_DEAD;
        }
    }
}

/* ---- code generation ---- */

static kf_type scalar_type(kf_dtype d) {
    return kf_type_scalar(d == KF_DTYPE_F16   ? KF_SCALAR_F16
                          : d == KF_DTYPE_I32 ? KF_SCALAR_I32
                                              : KF_SCALAR_F32);
}

typedef struct emit_state {
    kf_plan *p;
    kf_kernel *k;
    kf__group *grp; /* the group being emitted (a member, inside horizontal kernels) */
    kf__compiled *c;
    kf_val in;    /* the producer's yielded value (tails) */
    kf_val index; /* the element's linear index */
    uint32_t computed_ids[KF_GROUP_MAX_NODES];
    kf_val computed[KF_GROUP_MAX_NODES];
    uint32_t computed_count;
    /* Vectorized element-wise kernels: each invocation owns KF_LANES consecutive elements,
     * loads and stores them as one vec4 and computes lane by lane. */
    bool vectorized;
    uint32_t lane;
    kf_val vindex; /* the vec4's index */
    uint32_t wide_ids[KF_GROUP_MAX_SLOTS];
    kf_val wide[KF_GROUP_MAX_SLOTS]; /* vec4 loads made so far */
    uint32_t wide_count;
} emit_state;

#define KF_LANES 4u

static kf_binding binding_for(emit_state *s, uint32_t node, kf_type elem) {
    kf__compiled *c = s->c;
    for (uint32_t i = 0; i < c->read_count; i++) {
        if (c->read_nodes[i] == node) {
            return c->read_bindings[i];
        }
    }
    const kf__node *n = &s->p->graph->nodes[node];
    char name[KF_NAME_MAX + 16];
    if (n->kind == KF__NODE_INPUT) {
        snprintf(name, sizeof name, "%s", n->name);
    } else {
        snprintf(name, sizeof name, "%s_%u", n->op->name, node);
    }
    kf_binding b = kf_kernel_storage(s->k, name, elem, KF_ACCESS_READ);
    if (c->read_count < KF_GROUP_MAX_SLOTS) {
        c->read_nodes[c->read_count] = node;
        c->read_bindings[c->read_count] = b;
        c->read_count++;
        c->slots[c->slot_count++] = node;
    }
    return b;
}

/* The operand's linear index for an output element, numpy-style right-aligned broadcasting. */
static kf_val broadcast_index(kf_kernel *k, const kf_shape *out, const kf_shape *in, kf_val idx) {
    uint64_t in_elems = kf_shape_elements(in);
    if (kf_shape_eq(out, in) || in_elems == kf_shape_elements(out)) {
        return idx;
    }
    if (in_elems == 1) {
        return kf_lit_u32(k, 0);
    }
    kf_val result = {0};
    uint64_t out_stride = 1, in_stride = 1;
    uint32_t r_out = out->rank, r_in = in->rank;
    for (uint32_t d = 0; d < r_out; d++) {
        uint32_t od = out->dims[r_out - 1 - d];
        uint32_t id = d < r_in ? in->dims[r_in - 1 - d] : 1;
        if (id != 1) {
            kf_val coord = idx;
            if (out_stride != 1) {
                coord = kf_div(k, coord, kf_lit_u32(k, (uint32_t)out_stride));
            }
            if (out_stride * od < kf_shape_elements(out)) {
                coord = kf_binary(k, KF_OP_MOD, coord, kf_lit_u32(k, od));
            }
            kf_val term =
                in_stride == 1 ? coord : kf_mul(k, coord, kf_lit_u32(k, (uint32_t)in_stride));
            result = result.id ? kf_add(k, result, term) : term;
            in_stride *= id;
        }
        out_stride *= od;
    }
    return result.id ? result : kf_lit_u32(k, 0);
}

static kf_val to_f32(kf_kernel *k, kf_val v) {
    kf_type t = kf_val_type(k, v);
    if (t.scalar == KF_SCALAR_F32) {
        return v;
    }
    return kf_cast(k, kf_type_scalar(KF_SCALAR_F32), v);
}

static kf_val operand_value(emit_state *s, uint32_t id, const kf_shape *out_shape) {
    const kf__node *n = &s->p->graph->nodes[id];
    if (id == s->grp->root) {
        return to_f32(s->k, s->in);
    }
    for (uint32_t i = 0; i < s->computed_count; i++) {
        if (s->computed_ids[i] == id) {
            return s->computed[i];
        }
    }
    if (n->kind == KF__NODE_SCALAR) {
        return kf_lit_f32(s->k, n->scalar);
    }
    if (s->vectorized && kf_shape_elements(&n->shape) == kf_shape_elements(out_shape)) {
        /* A full-size operand: one vec4 load per invocation, shared by the lanes. */
        kf_val wide = {0};
        for (uint32_t i = 0; i < s->wide_count; i++) {
            if (s->wide_ids[i] == id) {
                wide = s->wide[i];
            }
        }
        if (!wide.id) {
            kf_binding b = binding_for(s, id, kf_type_vec(KF_SCALAR_F32, KF_LANES));
            wide = kf_load(s->k, b, s->vindex);
            s->wide_ids[s->wide_count] = id;
            s->wide[s->wide_count++] = wide;
        }
        return kf_extract(s->k, wide, s->lane);
    }
    kf_binding b = binding_for(s, id, scalar_type(n->dtype));
    kf_val at = broadcast_index(s->k, out_shape, &n->shape, s->index);
    return to_f32(s->k, kf_load(s->k, b, at));
}

/* Emits the group's element-wise nodes for one element; returns the result (f32). */
static kf_val emit_elementwise(emit_state *s) {
    const kf_graph *g = s->p->graph;
    kf_val v = s->in.id ? to_f32(s->k, s->in) : (kf_val){0};
    for (uint32_t i = 0; i < s->grp->node_count; i++) {
        uint32_t id = s->grp->nodes[i];
        const kf__node *n = &g->nodes[id];
        kf_val args[KF_NODE_MAX_INPUTS];
        for (uint32_t j = 0; j < n->input_count; j++) {
            args[j] = operand_value(s, n->inputs[j], &n->shape);
        }
        v = n->op->expr(s->k, args, &n->params);
        s->computed_ids[s->computed_count] = id;
        s->computed[s->computed_count++] = v;
    }
    return v;
}

static kf_val from_f32(kf_kernel *k, kf_val v, kf_dtype d) {
    return d == KF_DTYPE_F16 ? kf_cast(k, kf_type_scalar(KF_SCALAR_F16), v) : v;
}

static void grid_for(uint64_t elements, uint32_t wg, uint32_t out[3]) {
    uint64_t groups = (elements + wg - 1) / wg;
    out[0] = (uint32_t)(groups ? groups : 1);
    out[1] = 1;
    out[2] = 1;
}

/* Vector loads and stores need f32 everywhere and a length the vector divides. */
static bool can_vectorize(const kf_plan *p, const kf__group *grp) {
    const kf__node *res = &p->graph->nodes[grp->result];
    uint64_t n = kf_shape_elements(&res->shape);
    if (res->dtype != KF_DTYPE_F32 || n % KF_LANES != 0) {
        return false;
    }
    uint32_t reads[KF_GROUP_MAX_SLOTS];
    uint32_t count = group_reads(p, grp, reads, KF_GROUP_MAX_SLOTS);
    for (uint32_t i = 0; i < count; i++) {
        if (p->graph->nodes[reads[i]].dtype != KF_DTYPE_F32) {
            return false;
        }
    }
    return true;
}

/* The group's value at one invocation: the element at `at`, or with `vectorized` the KF_LANES
 * elements of vec4 number `at` (loads and the store are vec4, the chain runs lane by lane).
 * Returns the value to store, in the stored type. */
static kf_val emit_invocation(emit_state *s, kf_val at, bool vectorized) {
    kf_kernel *k = s->k;
    kf_dtype dtype = s->p->graph->nodes[s->grp->result].dtype;
    if (!vectorized) {
        s->index = at;
        return from_f32(k, emit_elementwise(s), dtype);
    }
    s->vectorized = true;
    s->vindex = at;
    s->wide_count = 0;
    kf_val lanes[KF_LANES];
    kf_val first = kf_mul(k, at, kf_lit_u32(k, KF_LANES));
    for (uint32_t l = 0; l < KF_LANES; l++) {
        s->lane = l;
        s->index = l ? kf_add(k, first, kf_lit_u32(k, l)) : first;
        s->computed_count = 0; /* each lane computes its own chain */
        lanes[l] = emit_elementwise(s);
    }
    return kf_vec(k, kf_type_vec(KF_SCALAR_F32, KF_LANES), lanes, KF_LANES);
}

/* An in-place group (its result bound to the tensor of input `alias`; plan_bind.c proved that
 * each element is read only by the invocation that writes it, at the index it writes): one
 * read-write binding is the result's store and the input's loads, since WebGPU forbids binding
 * one buffer both read-only and writable in a dispatch. */
static kf_binding inplace_binding(emit_state *s, uint32_t alias, kf_type elem) {
    kf__compiled *c = s->c;
    char name[KF_NAME_MAX + 16];
    snprintf(name, sizeof name, "%s_inplace", s->p->graph->nodes[alias].name);
    kf_binding b = kf_kernel_storage(s->k, name, elem, KF_ACCESS_READ_WRITE);
    c->read_nodes[c->read_count] = alias;
    c->read_bindings[c->read_count] = b;
    c->read_count++;
    c->slots[c->slot_count++] = s->grp->result;
    return b;
}

/* From this many vec4s up, an element-wise kernel computes two vec4s per invocation. */
#define KF_TWO_PER_INVOCATION (1u << 16)

static kf_kernel *compile_elementwise(kf_plan *p, kf__group *grp, kf__compiled *c) {
    const kf__node *res = &p->graph->nodes[grp->result];
    char name[96];
    snprintf(name, sizeof name, "group%u_elementwise", (unsigned)(grp - p->groups));
    bool vectorized = can_vectorize(p, grp);
    uint32_t per = vectorized ? KF_LANES : 1u;
    kf_type out_type = vectorized ? kf_type_vec(KF_SCALAR_F32, KF_LANES) : scalar_type(res->dtype);
    uint32_t alias = kf__plan_inplace_input(p, grp->result);
    kf_kernel_desc desc = {.name = name,
                           .workgroup_size = {KF_WORKGROUP, 1, 1},
                           .output = alias ? kf_type_scalar(KF_SCALAR_VOID) : out_type};
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    emit_state s = {.p = p, .k = k, .grp = grp, .c = c};
    kf_binding rw = alias ? inplace_binding(&s, alias, out_type) : (kf_binding){0};
    uint64_t n = kf_shape_elements(&res->shape) / per;
    /* Large even vec4 counts: two vec4s per invocation, n/2 apart, both loaded before either
     * is stored, so twice the bytes are in flight per invocation (a long chain's arithmetic
     * then hides behind memory: measured on an H200, bench/results/h200-chainexp.txt). */
    uint32_t twice = vectorized && n % 2 == 0 && n >= 2u * KF_TWO_PER_INVOCATION ? 2u : 1u;
    uint64_t invocations = n / twice;
    kf_val at = kf_let(k, vectorized ? "vidx" : "idx", kf_global_linear(k));
    kf_if(k, kf_binary(k, KF_OP_LT, at, kf_lit_u32(k, (uint32_t)invocations)));
    if (twice == 2) {
        kf_val at2 = kf_let(k, "vidx2", kf_add(k, at, kf_lit_u32(k, (uint32_t)invocations)));
        kf_val first = emit_invocation(&s, at, true);
        kf_val second = emit_invocation(&s, at2, true);
        if (alias) {
            kf_store(k, rw, at, first);
            kf_store(k, rw, at2, second);
        } else {
            kf_kernel_yield(k, first, at);
            kf_kernel_yield(k, second, at2);
        }
    } else if (alias) {
        kf_store(k, rw, at, emit_invocation(&s, at, vectorized));
    } else {
        kf_kernel_yield(k, emit_invocation(&s, at, vectorized), at);
    }
    kf_end(k);
    grid_for(invocations, KF_WORKGROUP, c->grid);
    if (!alias) {
        c->slots[c->slot_count++] = grp->result;
    }
    return k;
}

static kf_kernel *compile_producer(kf_plan *p, kf__group *grp, kf__compiled *c) {
    const kf_graph *g = p->graph;
    const kf__node *root = &g->nodes[grp->root];
    kf_shape shapes[KF_NODE_MAX_INPUTS];
    for (uint32_t i = 0; i < root->input_count; i++) {
        shapes[i] = g->nodes[root->inputs[i]].shape;
    }
    kf_kernel *base = NULL;
    if (!strcmp(root->op->name, "matmul") && root->dtype == KF_DTYPE_F32 &&
        !root->params.transpose_a && !root->params.transpose_b) {
        /* A tile the autotuner measured on this adapter (kf_matmul_tune) beats the built-in
         * choice; same bindings, same store phase. */
        uint32_t m = shapes[0].dims[0], k = shapes[0].dims[1], n = shapes[1].dims[1];
        const kf__mm_config *tuned = kf__matmul_config_for(p->ctx, m, k, n);
        if (tuned && (uint64_t)m * n >= 64u * 64u) {
            base = kf__matmul_blocked(m, k, n, tuned);
        }
    }
    if (!strcmp(root->op->name, "matmul") && root->dtype == KF_DTYPE_F16 &&
        !root->params.transpose_a && !root->params.transpose_b) {
        /* Tensor cores where the device has subgroup matrices ($KF_NO_SGMAT=1: never); same
         * bindings, same store phase. */
        base =
            kf__matmul_sgmat_for(p->ctx, shapes[0].dims[0], shapes[0].dims[1], shapes[1].dims[1]);
    }
    if (!base) {
        base = root->op->kernel_forward(shapes, &root->params, root->dtype);
    }
    if (!base) {
        plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "%s: no kernel", root->op->name);
        return NULL;
    }
    if (kf_kernel_status(base) != KF_OK) {
        plan_fail(p, kf_kernel_status(base), "%s kernel: %s", root->op->name,
                  kf_kernel_error(base));
        kf_kernel_destroy(base);
        return NULL;
    }
    for (uint32_t i = 0; i < root->input_count; i++) {
        c->slots[c->slot_count++] = root->inputs[i];
    }
    kf_kernel *k = base;
    if (grp->node_count > 0) {
        uint32_t wg[3];
        kf_kernel_workgroup_size(base, wg);
        char name[96];
        snprintf(name, sizeof name, "group%u_tail", (unsigned)(grp - p->groups));
        kf_type t = kf_kernel_output_type(base);
        kf_kernel_desc desc = {
            .name = name, .workgroup_size = {wg[0], wg[1], wg[2]}, .input = t, .output = t};
        kf_kernel *tail = kf_kernel_create(&desc);
        if (!tail) {
            kf_kernel_destroy(base);
            return NULL;
        }
        emit_state s = {.p = p, .k = tail, .grp = grp, .c = c};
        s.in = kf_kernel_input(tail);
        s.index = kf_kernel_index(tail);
        kf_val v = emit_elementwise(&s);
        kf_kernel_yield(tail, from_f32(tail, v, g->nodes[grp->result].dtype), s.index);
        k = kf_kernel_then(base, tail);
        kf_kernel_destroy(base);
        kf_kernel_destroy(tail);
        if (!k) {
            return NULL;
        }
    }
    c->slots[c->slot_count++] = grp->result;
    kf_kernel_grid(k, c->grid);
    if (!c->grid[0] && !c->grid[1] && !c->grid[2]) {
        uint32_t wg[3];
        kf_kernel_workgroup_size(k, wg);
        grid_for(kf_shape_elements(&g->nodes[grp->result].shape), wg[0] * wg[1] * wg[2], c->grid);
    }
    return k;
}

/* Independent element-wise groups side by side over one index space: member m owns the range
 * [offset_m, offset_m + n_m) of invocations (n_m in vec4s where it vectorizes). */
static kf_kernel *compile_horizontal(kf_plan *p, kf__group *h, kf__compiled *c) {
    char name[96];
    snprintf(name, sizeof name, "group%u_horizontal", (unsigned)(h - p->groups));
    kf_kernel_desc desc = {.name = name, .workgroup_size = {KF_WORKGROUP, 1, 1}};
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    kf_val idx = kf_let(k, "idx", kf_global_linear(k));
    uint64_t offset = 0;
    for (uint32_t m = 0; m < h->member_count; m++) {
        kf__group *grp = &p->groups[h->members[m]];
        const kf__node *res = &p->graph->nodes[grp->result];
        bool vectorized = can_vectorize(p, grp);
        uint64_t n = kf_shape_elements(&res->shape) / (vectorized ? KF_LANES : 1u);
        kf_val lo = kf_lit_u32(k, (uint32_t)offset);
        kf_val hi = kf_lit_u32(k, (uint32_t)(offset + n));
        kf_if(k, kf_binary(k, KF_OP_AND, kf_binary(k, KF_OP_GE, idx, lo),
                           kf_binary(k, KF_OP_LT, idx, hi)));
        emit_state s = {.p = p, .k = k, .grp = grp, .c = c};
        kf_val at = offset ? kf_let(k, "local", kf_sub(k, idx, lo)) : idx;
        kf_type elem = vectorized ? kf_type_vec(KF_SCALAR_F32, KF_LANES) : scalar_type(res->dtype);
        uint32_t alias = kf__plan_inplace_input(p, grp->result);
        kf_binding out = alias ? inplace_binding(&s, alias, elem) : (kf_binding){0};
        kf_val v = emit_invocation(&s, at, vectorized);
        if (!alias) {
            char out_name[KF_NAME_MAX + 16];
            snprintf(out_name, sizeof out_name, "%s_%u", res->op->name, grp->result);
            out = kf_kernel_storage(k, out_name, elem, KF_ACCESS_READ_WRITE);
            c->slots[c->slot_count++] = grp->result;
        }
        kf_store(k, out, at, v);
        kf_end(k);
        offset += n;
    }
    grid_for(offset, KF_WORKGROUP, c->grid);
    return k;
}

void kf__plan_compile_group(kf_plan *p, kf__group *grp) {
    kf__compiled *c = calloc(1, sizeof *c);
    if (!c) {
        plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory compiling a group");
        return;
    }
    grp->compiled = c;
    kf_kernel *k = NULL;
    switch (grp->kind) {
    case KF__GROUP_ELEMENTWISE:
        k = compile_elementwise(p, grp, c);
        break;
    case KF__GROUP_PRODUCER:
        k = compile_producer(p, grp, c);
        break;
    case KF__GROUP_HORIZONTAL:
        k = compile_horizontal(p, grp, c);
        break;
    case KF__GROUP_DEAD:
        return;
    }
    if (!k) {
        plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory building group %s", grp->rule);
        return;
    }
    c->kernel = k;
    if (kf_kernel_status(k) != KF_OK) {
        plan_fail(p, kf_kernel_status(k), "group %u (%s): %s", (unsigned)(grp - p->groups),
                  grp->rule, kf_kernel_error(k));
        return;
    }
    if (kf_kernel_binding_count(k) != c->slot_count) {
        plan_fail(p, KF_ERROR_INTERNAL, "group %u: kernel has %u bindings, plan tracked %u",
                  (unsigned)(grp - p->groups), kf_kernel_binding_count(k), c->slot_count);
        return;
    }
    c->wgsl = kf__kernel_emit_for(p->ctx, k); /* the context's kernel transform, if any */
    if (!c->wgsl) {
        plan_fail(p, KF_ERROR_INTERNAL, "group %u: %s", (unsigned)(grp - p->groups),
                  kf_kernel_error(k));
    }
}

/* ---- buffers, dispatches, run ---- */

static kf_status make_buffers(kf_plan *p) {
    const kf_graph *g = p->graph;
    for (uint32_t id = 1; id < g->node_count; id++) {
        const kf__node *n = &g->nodes[id];
        bool needed =
            n->kind == KF__NODE_INPUT || (n->kind == KF__NODE_OP && p->group_of[id] >= 0 &&
                                          p->groups[p->group_of[id]].result == id &&
                                          p->groups[p->group_of[id]].kind != KF__GROUP_DEAD);
        if (!needed) {
            continue;
        }
        kf_status st = kf_buffer_create(p->ctx, node_bytes(n), &p->buffers[id]);
        if (st != KF_OK) {
            plan_fail(p, st, "buffer for %s: %s", n->kind == KF__NODE_INPUT ? n->name : n->op->name,
                      kf_context_last_error(p->ctx));
            return st;
        }
    }
    return KF_OK;
}

kf_status kf__plan_make_dispatches(kf_plan *p) {
    free(p->dispatches);
    free(p->order);
    p->dispatch_count = 0;
    p->dispatches = calloc(p->group_count ? p->group_count : 1, sizeof *p->dispatches);
    p->order = calloc(p->group_count ? p->group_count : 1, sizeof *p->order);
    if (!p->dispatches || !p->order) {
        plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory");
        return p->status;
    }
    uint32_t max_level = 0;
    for (uint32_t gi = 0; gi < p->group_count; gi++) {
        if (p->groups[gi].level > max_level) {
            max_level = p->groups[gi].level;
        }
    }
    for (uint32_t level = 1; level <= max_level; level++) {
        for (uint32_t gi = 0; gi < p->group_count; gi++) {
            kf__group *grp = &p->groups[gi];
            if (grp->kind == KF__GROUP_DEAD || grp->absorbed || grp->level != level) {
                continue;
            }
            kf__compiled *c = grp->compiled;
            for (uint32_t s = 0; s < c->slot_count; s++) {
                c->buffers[s] = p->buffers[c->slots[s]];
            }
            kf_binding_kind kinds[KF_GROUP_MAX_SLOTS];
            uint32_t nk = kf_kernel_binding_kinds(c->kernel, kinds, KF_GROUP_MAX_SLOTS);
            kf_pipeline_desc pd = {.wgsl = c->wgsl, .bindings = kinds, .binding_count = nk};
            kf_pipeline *pipe = NULL;
            kf_status st = kf_pipeline_get(p->ctx, &pd, &pipe);
            if (st != KF_OK) {
                plan_fail(p, st, "group %u (%s): %s", gi, grp->rule, kf_context_last_error(p->ctx));
                return st;
            }
            kf_dispatch *d = &p->dispatches[p->dispatch_count];
            d->pipeline = pipe;
            d->buffers = c->buffers;
            d->buffer_count = c->slot_count;
            memcpy(d->groups, c->grid, sizeof d->groups);
            p->order[p->dispatch_count++] = gi;
        }
    }
    return KF_OK;
}

static void count_bytes(kf_plan *p) {
    const kf_graph *g = p->graph;
    for (uint32_t id = 1; id < g->node_count; id++) {
        const kf__node *n = &g->nodes[id];
        if (n->kind != KF__NODE_OP) {
            continue;
        }
        p->unfused_dispatches++;
        p->unfused_bytes += node_bytes(n);
        for (uint32_t i = 0; i < n->input_count; i++) {
            bool repeat = false;
            for (uint32_t j = 0; j < i; j++) {
                repeat |= n->inputs[j] == n->inputs[i];
            }
            const kf__node *a = &g->nodes[n->inputs[i]];
            if (!repeat && a->kind != KF__NODE_SCALAR) {
                p->unfused_bytes += node_bytes(a);
            }
        }
    }
    for (uint32_t gi = 0; gi < p->group_count; gi++) {
        kf__group *grp = &p->groups[gi];
        if (grp->kind == KF__GROUP_DEAD || grp->absorbed || !grp->compiled) {
            continue;
        }
        kf__compiled *c = grp->compiled;
        uint64_t bytes = 0;
        for (uint32_t s = 0; s < c->slot_count; s++) {
            bool repeat = false;
            for (uint32_t t = 0; t < s; t++) {
                repeat |= c->slots[t] == c->slots[s];
            }
            if (!repeat) {
                bytes += node_bytes(&g->nodes[c->slots[s]]);
            }
        }
        c->bytes = bytes;
        p->bytes += bytes;
    }
}

kf_status kf_graph_compile(kf_context *ctx, const kf_graph *g, const kf_compile_options *opts,
                           kf_plan **out) {
    if (!out) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    *out = NULL;
    if (!ctx || !g) {
        if (ctx) {
            kf__context_set_error(ctx, KF_ERROR_INVALID_ARGUMENT, "kf_graph_compile: g is NULL");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (g->status != KF_OK) {
        kf__context_set_error(ctx, g->status, "kf_graph_compile: the graph has an error: %s",
                              g->error);
        return g->status;
    }
    if (g->output_count == 0) {
        kf__context_set_error(ctx, KF_ERROR_INVALID_ARGUMENT,
                              "kf_graph_compile: the graph has no outputs (kf_graph_output)");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_plan *p = calloc(1, sizeof *p);
    if (!p) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    p->ctx = ctx;
    kf__context_hold(ctx); /* let go in kf_plan_destroy: a plan outliving its context fails */
    p->no_fuse = opts && opts->no_fuse;
    p->graph = kf__graph_copy(g);
    uint32_t nn = g->node_count;
    p->group_of = malloc(sizeof *p->group_of * nn);
    p->uses = calloc(nn, sizeof *p->uses);
    p->is_output = calloc(nn, sizeof *p->is_output);
    p->buffers = calloc(nn, sizeof *p->buffers);
    p->inputs_set = calloc(nn, sizeof *p->inputs_set);
    if (!p->graph || !p->group_of || !p->uses || !p->is_output || !p->buffers || !p->inputs_set) {
        kf_plan_destroy(p);
        return KF_ERROR_OUT_OF_MEMORY;
    }
    for (uint32_t i = 0; i < nn; i++) {
        p->group_of[i] = -1;
    }
    for (uint32_t id = 1; id < nn; id++) {
        const kf__node *n = &g->nodes[id];
        for (uint32_t i = 0; i < n->input_count; i++) {
            p->uses[n->inputs[i]]++;
        }
    }
    for (uint32_t o = 0; o < g->output_count; o++) {
        p->is_output[g->outputs[o].node] = true;
    }
    kf_adapter_info info;
    p->max_storage_buffers = 8;
    if (kf_context_adapter_info(ctx, &info) == KF_OK && info.max_storage_buffers_per_stage) {
        p->max_storage_buffers = info.max_storage_buffers_per_stage;
    }
    if (p->max_storage_buffers > KF_GROUP_MAX_SLOTS) {
        p->max_storage_buffers = KF_GROUP_MAX_SLOTS;
    }
    plan_vertical(p);
    plan_levels(p);
    if (!p->no_fuse) {
        plan_horizontal(p);
    }
    for (uint32_t gi = 0; gi < p->group_count && p->status == KF_OK; gi++) {
        kf__group *grp = &p->groups[gi];
        if (grp->kind != KF__GROUP_DEAD && !grp->absorbed) {
            kf__plan_compile_group(p, grp);
        }
    }
    if (p->status == KF_OK) {
        make_buffers(p);
    }
    if (p->status == KF_OK) {
        kf__plan_make_dispatches(p);
    }
    if (p->status == KF_OK && !(opts && opts->no_prime)) {
        kf_status primed = kf__plan_prime(p);
        if (primed != KF_OK) {
            plan_fail(p, primed, "priming the pipelines: %s", kf_context_last_error(ctx));
        }
    }
    if (p->status != KF_OK) {
        kf_status st = p->status;
        kf__context_set_error(ctx, st, "%s", p->error);
        kf_plan_destroy(p);
        return st;
    }
    count_bytes(p);
    *out = p;
    return KF_OK;
}

void kf_plan_destroy(kf_plan *p) {
    if (!p) {
        return;
    }
    for (uint32_t gi = 0; gi < p->group_count; gi++) {
        kf__compiled *c = p->groups[gi].compiled;
        if (c) {
            kf_kernel_destroy(c->kernel);
            kf_free(c->wgsl);
            free(c);
        }
    }
    kf__plan_binds_destroy(p);
    if (p->graph && p->buffers) {
        for (uint32_t id = 0; id < p->graph->node_count; id++) {
            kf_buffer_destroy(p->buffers[id]);
        }
    }
    free(p->groups);
    free(p->group_of);
    free(p->uses);
    free(p->is_output);
    free(p->buffers);
    free(p->inputs_set);
    free(p->dispatches);
    free(p->order);
    kf_graph_destroy(p->graph);
    kf_context *ctx = p->ctx;
    free(p);
    kf__context_let_go(ctx);
}

kf_status kf_plan_summary_get(const kf_plan *p, kf_plan_summary *out) {
    if (!p || !out) {
        if (p) {
            kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "kf_plan_summary_get: out is NULL");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    out->groups = p->dispatch_count;
    out->dispatches = p->dispatch_count;
    out->unfused_dispatches = p->unfused_dispatches;
    out->bytes = p->bytes;
    out->unfused_bytes = p->unfused_bytes;
    return KF_OK;
}

static uint32_t find_input(const kf_plan *p, const char *name) {
    const kf_graph *g = p->graph;
    for (uint32_t id = 1; name && id < g->node_count; id++) {
        if (g->nodes[id].kind == KF__NODE_INPUT && !strcmp(g->nodes[id].name, name)) {
            return id;
        }
    }
    return 0;
}

kf_status kf__plan_upload(kf_plan *p, uint32_t id, const float *data) {
    const kf__node *n = &p->graph->nodes[id];
    if (kf__plan_is_bound(p, id)) {
        /* Verification and host inputs would overwrite the caller's tensor. */
        kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                              "input %s is bound to a GPU tensor: upload into that tensor, or "
                              "unbind it first (kf_plan_bind_input(p, \"%s\", NULL))",
                              n->name, n->name);
        return KF_ERROR_INVALID_ARGUMENT;
    }
    uint64_t count = kf_shape_elements(&n->shape);
    if (n->dtype == KF_DTYPE_F32) {
        return kf_buffer_upload(p->buffers[id], 0, data, count * 4);
    }
    void *staged = malloc(count * kf_dtype_size(n->dtype));
    if (!staged) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    for (uint64_t i = 0; i < count; i++) {
        if (n->dtype == KF_DTYPE_F16) {
            ((uint16_t *)staged)[i] = kf__half_from_float(data[i]);
        } else {
            /* Class indices. What int32 cannot hold exactly (NaN, 1e10, 2.5) becomes -1, which
             * no class has, so its row's loss is NaN as the CPU spec says (docs/operators.md);
             * converting such a float to int would be undefined behaviour. */
            float v = data[i];
            bool whole = v >= -2147483648.0f && v < 2147483648.0f && v == floorf(v);
            ((int32_t *)staged)[i] = whole ? (int32_t)v : -1;
        }
    }
    kf_status st = kf_buffer_upload(p->buffers[id], 0, staged, count * kf_dtype_size(n->dtype));
    free(staged);
    return st;
}

kf_status kf_plan_set_input(kf_plan *p, const char *name, const kf_tensor *value) {
    if (!p || !value || !value->data) {
        if (p) {
            kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "kf_plan_set_input: input %s: %s", name ? name : "(null)",
                                  value ? "the tensor has no data" : "value is NULL");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    uint32_t id = find_input(p, name);
    if (!id) {
        kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT, "plan has no input named '%s'",
                              name ? name : "(null)");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    const kf__node *n = &p->graph->nodes[id];
    if (!kf_shape_eq(&n->shape, &value->shape)) {
        char a[64], b[64];
        kf__context_set_error(p->ctx, KF_ERROR_SHAPE, "input %s: the graph says %s, got %s", name,
                              kf_shape_str(&n->shape, a, sizeof a),
                              kf_shape_str(&value->shape, b, sizeof b));
        return KF_ERROR_SHAPE;
    }
    kf_status st = kf__plan_upload(p, id, value->data);
    if (st == KF_OK) {
        p->inputs_set[id] = true;
    }
    return st;
}

kf_status kf__plan_check_inputs(const kf_plan *p) {
    const kf_graph *g = p->graph;
    for (uint32_t id = 1; id < g->node_count; id++) {
        if (g->nodes[id].kind == KF__NODE_INPUT && !p->inputs_set[id]) {
            kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "input %s was never set (kf_plan_set_input) nor bound "
                                  "(kf_plan_bind_input)",
                                  g->nodes[id].name);
            return KF_ERROR_INVALID_ARGUMENT;
        }
    }
    return KF_OK;
}

kf_status kf_plan_run(kf_plan *p) {
    if (!p) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_status st = kf__plan_check_inputs(p);
    if (st != KF_OK) {
        return st;
    }
    if (p->dispatch_count > 0) { /* none when every output is an input */
        st = kf_context_run(p->ctx, p->dispatches, p->dispatch_count);
    }
    p->has_run |= st == KF_OK;
    return st;
}

kf_status kf_plan_time(kf_plan *p, uint32_t repeat, kf_timing *out) {
    if (!p || !out) {
        if (p) {
            kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT, "kf_plan_time: out is NULL");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_status st = kf__plan_check_inputs(p);
    if (st != KF_OK) {
        return st;
    }
    if (p->dispatch_count == 0) {
        memset(out, 0, sizeof *out);
        p->has_run = true;
        return KF_OK;
    }
    st = kf_context_time(p->ctx, p->dispatches, p->dispatch_count, repeat, out);
    p->has_run |= st == KF_OK;
    return st;
}

uint32_t kf__plan_output_node(const kf_plan *p, const char *name) {
    for (uint32_t o = 0; name && o < p->graph->output_count; o++) {
        if (!strcmp(p->graph->outputs[o].name, name)) {
            return p->graph->outputs[o].node;
        }
    }
    return 0;
}

kf_status kf__plan_download(const kf_plan *p, uint32_t id, float *data) {
    const kf__node *n = &p->graph->nodes[id];
    uint64_t count = kf_shape_elements(&n->shape);
    if (n->dtype == KF_DTYPE_F32) {
        return kf_buffer_download(p->buffers[id], 0, data, count * 4);
    }
    void *staged = malloc(count * kf_dtype_size(n->dtype));
    if (!staged) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    kf_status st = kf_buffer_download(p->buffers[id], 0, staged, count * kf_dtype_size(n->dtype));
    for (uint64_t i = 0; st == KF_OK && i < count; i++) {
        data[i] = n->dtype == KF_DTYPE_F16 ? kf__half_to_float(((uint16_t *)staged)[i])
                                           : (float)((int32_t *)staged)[i];
    }
    free(staged);
    return st;
}

kf_status kf_plan_get_output(const kf_plan *p, const char *name, kf_tensor *out) {
    if (!p || !out || !out->data) {
        if (p) {
            kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "kf_plan_get_output: output %s: %s", name ? name : "(null)",
                                  out ? "the tensor has no data" : "out is NULL");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    uint32_t id = kf__plan_output_node(p, name);
    if (!id) {
        kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT, "plan has no output named '%s'",
                              name ? name : "(null)");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (!p->has_run) {
        /* the buffers hold whatever the allocator gave (zeros): no result to hand out */
        kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                              "output %s: the plan has not run yet (kf_plan_run first)", name);
        return KF_ERROR_INVALID_ARGUMENT;
    }
    const kf__node *n = &p->graph->nodes[id];
    if (!kf_shape_eq(&n->shape, &out->shape)) {
        char a[64], b[64];
        kf__context_set_error(p->ctx, KF_ERROR_SHAPE, "output %s is %s, the tensor given is %s",
                              name, kf_shape_str(&n->shape, a, sizeof a),
                              kf_shape_str(&out->shape, b, sizeof b));
        return KF_ERROR_SHAPE;
    }
    return kf__plan_download(p, id, out->data);
}
