/* Code generation the fusion rules share: a group's element-wise nodes as IR (scalar or vec4,
 * with numpy-style broadcast loads), and a rooted group's kernel (the root's kernel with the
 * element-wise nodes in its store phase). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse/rules/rule.h"
#include "ops/ops_internal.h"

kf_type kf__scalar_type_of(kf_dtype d) {
    return kf_type_scalar(d == KF_DTYPE_F16   ? KF_SCALAR_F16
                          : d == KF_DTYPE_I32 ? KF_SCALAR_I32
                                              : KF_SCALAR_F32);
}

void kf__grid_for(uint64_t elements, uint32_t wg, uint32_t out[3]) {
    uint64_t groups = (elements + wg - 1) / wg;
    out[0] = (uint32_t)(groups ? groups : 1);
    out[1] = 1;
    out[2] = 1;
}

bool kf__group_can_vectorize(const kf_plan *p, const kf__group *grp) {
    const kf__node *res = &p->graph->nodes[grp->result];
    uint64_t n = kf_shape_elements(&res->shape);
    if (res->dtype != KF_DTYPE_F32 || n % KF__PLAN_LANES != 0) {
        return false;
    }
    for (uint32_t i = 0; i < grp->read_count; i++) {
        if (p->graph->nodes[grp->reads[i]].dtype != KF_DTYPE_F32) {
            return false;
        }
    }
    return true;
}

bool kf__emit_init(kf__emit *s, kf_plan *p, kf_kernel *k, kf__group *grp, kf__compiled *c) {
    memset(s, 0, sizeof *s);
    s->p = p;
    s->k = k;
    s->grp = grp;
    s->c = c;
    s->computed = calloc((size_t)grp->node_count + grp->read_count + 1, sizeof *s->computed);
    if (!s->computed) {
        kf__plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory compiling a group");
        return false;
    }
    s->wide = s->computed + grp->node_count;
    return true;
}

void kf__emit_release(kf__emit *s) {
    free(s->computed);
    s->computed = s->wide = NULL;
}

/* Records that binding b of the kernel reads `node` (later loads of node use it) and is the
 * buffer of node `slot` (node itself, or the group's result for an in-place binding). */
static void record_read(kf__emit *s, uint32_t node, kf_binding b, kf_type elem, uint32_t slot) {
    kf__compiled *c = s->c;
    if (c->read_count == c->read_capacity) {
        uint32_t cap = c->read_capacity ? c->read_capacity * 2 : 8;
        uint32_t *nodes = realloc(c->read_nodes, sizeof *nodes * cap);
        if (nodes) {
            c->read_nodes = nodes;
        }
        kf_binding *bindings = nodes ? realloc(c->read_bindings, sizeof *bindings * cap) : NULL;
        if (bindings) {
            c->read_bindings = bindings;
        }
        kf_type *elems = bindings ? realloc(c->read_elems, sizeof *elems * cap) : NULL;
        if (elems) {
            c->read_elems = elems;
            c->read_capacity = cap;
        }
    }
    if (c->read_count < c->read_capacity && kf__compiled_add_slot(s->p, c, slot)) {
        c->read_nodes[c->read_count] = node;
        c->read_bindings[c->read_count] = b;
        c->read_elems[c->read_count] = elem;
        c->read_count++;
    } else {
        kf__plan_fail(s->p, KF_ERROR_OUT_OF_MEMORY, "out of memory compiling a group");
    }
}

static kf_binding binding_for(kf__emit *s, uint32_t node, kf_type elem) {
    kf__compiled *c = s->c;
    for (uint32_t i = 0; i < c->read_count; i++) {
        /* The same node read with another element type (a horizontal group whose members load
         * it as vec4 and as a broadcast scalar) needs a binding of its own. */
        if (c->read_nodes[i] == node && kf_type_eq(c->read_elems[i], elem)) {
            return c->read_bindings[i];
        }
    }
    /* Named by position, never by node or input name: kernels that compute the same are the
     * same text, so they share one pipeline (kf_pipeline_get keys on the WGSL). */
    char name[32];
    snprintf(name, sizeof name, "in%u", c->read_count);
    kf_binding b = kf_kernel_storage(s->k, name, elem, KF_ACCESS_READ);
    record_read(s, node, b, elem, node);
    return b;
}

kf_binding kf__emit_inplace_binding(kf__emit *s, uint32_t alias, kf_type elem) {
    char name[32];
    snprintf(name, sizeof name, "inplace%u", s->c->read_count);
    kf_binding b = kf_kernel_storage(s->k, name, elem, KF_ACCESS_READ_WRITE);
    record_read(s, alias, b, elem, s->grp->result);
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

static kf_val from_f32(kf_kernel *k, kf_val v, kf_dtype d) {
    return d == KF_DTYPE_F16 ? kf_cast(k, kf_type_scalar(KF_SCALAR_F16), v) : v;
}

static kf_val recomputed_value(kf__emit *s, uint32_t id);
static kf_val view_value(kf__emit *s, uint32_t id, kf_val index);

/* The position of node id among the group's nodes emitted so far, or -1. */
static int32_t computed_at(const kf__emit *s, uint32_t id) {
    for (uint32_t i = 0; i < s->computed_count; i++) {
        if (s->grp->nodes[i] == id) {
            return (int32_t)i;
        }
    }
    return -1;
}

/* The value of node id at element `index` (a u32) of its own shape: a view of the group is
 * evaluated through its mapping, a value read from memory is loaded there, and any other value
 * of the group exists only at the invocation's own element (the planner lets only a view that
 * keeps the linear order, reshape, follow one). */
static kf_val node_at(kf__emit *s, uint32_t id, kf_val index) {
    const kf__node *n = &s->p->graph->nodes[id];
    int32_t at = computed_at(s, id);
    bool here = index.id == s->index.id;
    if (id == s->grp->root && !here) {
        /* a prologue's In read at another element (a permute in a matmul's loads): the stage
         * loads it through a binding of its own */
        kf_binding b = binding_for(s, id, kf__scalar_type_of(n->dtype));
        return to_f32(s->k, kf_load(s->k, b, index));
    }
    if (id == s->grp->root || (at >= 0 && !n->op->view_index)) {
        if (!here) {
            kf__plan_fail(s->p, KF_ERROR_INTERNAL, "node %u read at another element in its group",
                          id);
            return kf_lit_f32(s->k, 0.0f);
        }
        return id == s->grp->root ? to_f32(s->k, s->in) : s->computed[at];
    }
    if (at >= 0) {
        return view_value(s, id, index);
    }
    if (n->kind == KF__NODE_SCALAR) {
        return kf_lit_f32(s->k, n->scalar);
    }
    kf_binding b = binding_for(s, id, kf__scalar_type_of(n->dtype));
    return to_f32(s->k, kf_load(s->k, b, index));
}

/* View node id (kf_operator.view_index) of the group at element `index`: its input's value at
 * the element the view maps it to, read in place (a strided load) rather than copied first. */
static kf_val view_value(kf__emit *s, uint32_t id, kf_val index) {
    const kf__node *n = &s->p->graph->nodes[id];
    kf_shape shapes[KF_NODE_MAX_INPUTS];
    for (uint32_t i = 0; i < n->input_count; i++) {
        shapes[i] = s->p->graph->nodes[n->inputs[i]].shape;
    }
    kf_val v = {0};
    for (uint32_t i = 0; i < n->input_count; i++) {
        kf_val take = {0};
        kf_val at = n->op->view_index(s->k, shapes, &n->params, index, i, &take);
        if (!at.id) {
            continue; /* an input read for its shape only (slice_grad's x) */
        }
        kf_val vi = node_at(s, n->inputs[i], at);
        v = !take.id ? vi : kf_select(s->k, v.id ? v : kf_lit_f32(s->k, 0.0f), vi, take);
    }
    return v.id ? v : kf_lit_f32(s->k, 0.0f);
}

bool kf__group_has_strided_view(const kf_plan *p, const kf__group *grp) {
    for (uint32_t i = 0; i < grp->node_count; i++) {
        const kf_operator *op = p->graph->nodes[grp->nodes[i]].op;
        if (op->view_index && !op->view_linear) {
            return true;
        }
    }
    return false;
}

bool kf__group_is_views(const kf_plan *p, const kf__group *grp) {
    for (uint32_t i = 0; i < grp->node_count; i++) {
        if (!p->graph->nodes[grp->nodes[i]].op->view_index) {
            return false;
        }
    }
    return grp->node_count > 0 && !grp->root;
}

static kf_val operand_value(kf__emit *s, uint32_t id, const kf_shape *out_shape) {
    const kf__node *n = &s->p->graph->nodes[id];
    if (id == s->grp->root) {
        return to_f32(s->k, s->in);
    }
    if (id == s->grp->recompute) {
        return recomputed_value(s, id);
    }
    int32_t at = computed_at(s, id);
    if (at >= 0) {
        /* a view of the group is evaluated where it is read (kf__emit_elementwise) */
        return n->op->view_index ? view_value(s, id, s->index) : s->computed[at];
    }
    if (n->kind == KF__NODE_SCALAR) {
        return kf_lit_f32(s->k, n->scalar);
    }
    if (s->vectorized && kf_shape_elements(&n->shape) == kf_shape_elements(out_shape)) {
        /* A full-size operand: one vec4 load per invocation, shared by the lanes. */
        uint32_t j = 0;
        while (j < s->grp->read_count && s->grp->reads[j] != id) {
            j++;
        }
        kf_val wide = j < s->grp->read_count ? s->wide[j] : (kf_val){0};
        if (!wide.id) {
            kf_binding b = binding_for(s, id, kf_type_vec(KF_SCALAR_F32, KF__PLAN_LANES));
            wide = kf_load(s->k, b, s->vindex);
            if (j < s->grp->read_count) {
                s->wide[j] = wide;
            }
        }
        return kf_extract(s->k, wide, s->lane);
    }
    kf_binding b = binding_for(s, id, kf__scalar_type_of(n->dtype));
    kf_val where = broadcast_index(s->k, out_shape, &n->shape, s->index);
    return to_f32(s->k, kf_load(s->k, b, where));
}

kf_val kf__emit_elementwise(kf__emit *s) {
    const kf_graph *g = s->p->graph;
    kf_val v = s->in.id ? to_f32(s->k, s->in) : (kf_val){0};
    for (uint32_t i = 0; i < s->grp->node_count; i++) {
        uint32_t id = s->grp->nodes[i];
        const kf__node *n = &g->nodes[id];
        if (n->op->view_index) {
            /* Evaluated where it is read: the next node reads it at this element, a view after
             * it at the element its own mapping says (view_value), so nothing is loaded at an
             * element the view does not have. */
            bool last = i + 1 == s->grp->node_count;
            v = last ? view_value(s, id, s->index) : (kf_val){0};
            s->computed[s->computed_count++] = v;
            continue;
        }
        kf_val args[KF_NODE_MAX_INPUTS];
        for (uint32_t j = 0; j < n->input_count; j++) {
            args[j] = operand_value(s, n->inputs[j], &n->shape);
        }
        v = n->op->expr(s->k, args, &n->params);
        s->computed[s->computed_count++] = v;
    }
    return v;
}

kf_val kf__emit_invocation(kf__emit *s, kf_val at, bool vectorized) {
    kf_kernel *k = s->k;
    kf_dtype dtype = s->p->graph->nodes[s->grp->result].dtype;
    if (!vectorized) {
        s->index = at;
        return from_f32(k, kf__emit_elementwise(s), dtype);
    }
    s->vectorized = true;
    s->vindex = at;
    memset(s->wide, 0, sizeof *s->wide * s->grp->read_count);
    kf_val lanes[KF__PLAN_LANES];
    kf_val first = kf_mul(k, at, kf_lit_u32(k, KF__PLAN_LANES));
    for (uint32_t l = 0; l < KF__PLAN_LANES; l++) {
        s->lane = l;
        s->index = l ? kf_add(k, first, kf_lit_u32(k, l)) : first;
        s->computed_count = 0; /* each lane computes its own chain */
        lanes[l] = kf__emit_elementwise(s);
    }
    return kf_vec(k, kf_type_vec(KF_SCALAR_F32, KF__PLAN_LANES), lanes, KF__PLAN_LANES);
}

/* A value of another group that this group's tail recomputes instead of loading
 * (src/fuse/rules/activation_save.c): the producer's matmul as a K-long dot product for this
 * element, then the producer's element-wise nodes up to the value. The element's index is the
 * value's own (it has the shape of this group's result). */
static kf_val recomputed_value(kf__emit *s, uint32_t id) {
    kf_plan *p = s->p;
    kf_kernel *k = s->k;
    const kf_graph *g = p->graph;
    kf__group from = p->groups[s->grp->recompute_from];
    const kf__node *root = &g->nodes[from.root];
    const kf_shape *as = &g->nodes[root->inputs[0]].shape, *bs = &g->nodes[root->inputs[1]].shape;
    bool ta = root->params.transpose_a, tb = root->params.transpose_b;
    uint32_t M = ta ? as->dims[1] : as->dims[0], K = ta ? as->dims[0] : as->dims[1];
    uint32_t N = tb ? bs->dims[0] : bs->dims[1];
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_binding a = binding_for(s, root->inputs[0], f32);
    kf_binding b = binding_for(s, root->inputs[1], f32);
    kf_val row = kf_let(k, "rrow", kf_div(k, s->index, kf_lit_u32(k, N)));
    kf_val col = kf_let(k, "rcol", kf_binary(k, KF_OP_MOD, s->index, kf_lit_u32(k, N)));
    kf_var acc = kf_declare(k, "racc", f32, kf_lit_f32(k, 0.0f));
    kf_val kk = kf_for(k, "rk", kf_lit_u32(k, 0), kf_lit_u32(k, K), kf_lit_u32(k, 1));
    kf_val a_at = ta ? kf_add(k, kf_mul(k, kk, kf_lit_u32(k, M)), row)
                     : kf_add(k, kf_mul(k, row, kf_lit_u32(k, K)), kk);
    kf_val b_at = tb ? kf_add(k, kf_mul(k, col, kf_lit_u32(k, K)), kk)
                     : kf_add(k, kf_mul(k, kk, kf_lit_u32(k, N)), col);
    kf_assign(k, acc,
              kf_add(k, kf_read(k, acc), kf_mul(k, kf_load(k, a, a_at), kf_load(k, b, b_at))));
    kf_end(k);
    kf_val v = kf_read(k, acc);
    if (id == from.root) {
        return v;
    }
    from.node_count = 0;
    while (from.node_count < p->groups[s->grp->recompute_from].node_count &&
           from.nodes[from.node_count] != id) {
        from.node_count++;
    }
    from.node_count++; /* up to and including the value */
    from.recompute = 0;
    kf__emit sub;
    if (!kf__emit_init(&sub, p, k, &from, s->c)) {
        return v;
    }
    sub.in = v;
    sub.index = s->index;
    v = kf__emit_elementwise(&sub);
    kf__emit_release(&sub);
    return v;
}

kf_kernel *kf__root_kernel(kf_plan *p, const kf__group *grp) {
    const kf_graph *g = p->graph;
    const kf__node *root = &g->nodes[grp->root];
    kf_shape shapes[KF_NODE_MAX_INPUTS];
    for (uint32_t i = 0; i < root->input_count; i++) {
        shapes[i] = g->nodes[root->inputs[i]].shape;
    }
    kf_dtype dtype = kf__node_kernel_dtype(g, root);
    kf_kernel *base =
        kf__group_has_strided(grp)
            ? root->op->kernel_strided(p->ctx, shapes, &root->params, dtype, grp->layout, false)
            : kf__op_kernel_for(p->ctx, root->op, shapes, &root->params, dtype);
    if (!base) {
        kf__plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "%s: no kernel", root->op->name);
    }
    return base;
}

kf_kernel *kf__build_rooted(kf_plan *p, kf__group *grp, kf__compiled *c, kf_kernel *base) {
    const kf_graph *g = p->graph;
    const kf__node *root = &g->nodes[grp->root];
    if (!base) {
        return NULL;
    }
    if (kf_kernel_status(base) != KF_OK) {
        kf__plan_fail(p, kf_kernel_status(base), "%s kernel: %s", root->op->name,
                      kf_kernel_error(base));
        kf_kernel_destroy(base);
        return NULL;
    }
    for (uint32_t i = 0; i < root->input_count; i++) {
        if (!kf__compiled_add_slot(p, c, kf__group_input_node(p, grp, i))) {
            kf_kernel_destroy(base);
            return NULL;
        }
    }
    /* Sides the root's kernel computes: declared right after its inputs (kf__group.sides). */
    for (uint32_t s = 0; s < grp->side_count; s++) {
        if (!kf__group_side_in_store(grp, grp->sides[s]) &&
            !kf__compiled_add_slot(p, c, grp->sides[s])) {
            kf_kernel_destroy(base);
            return NULL;
        }
    }
    if (kf__group_has_prologue(grp)) {
        base = kf__compose_prologues(p, grp, c, base);
        if (!base) {
            return NULL;
        }
    }
    kf_kernel *k = base;
    if (grp->node_count > 0) {
        uint32_t wg[3];
        kf_kernel_workgroup_size(base, wg);
        kf_type t = kf_kernel_output_type(base);
        kf_kernel_desc desc = {
            .name = "tail", .workgroup_size = {wg[0], wg[1], wg[2]}, .input = t, .output = t};
        kf_kernel *tail = kf_kernel_create(&desc);
        if (!tail) {
            kf_kernel_destroy(base);
            return NULL;
        }
        kf__emit s;
        if (!kf__emit_init(&s, p, tail, grp, c)) {
            kf_kernel_destroy(base);
            kf_kernel_destroy(tail);
            return NULL;
        }
        s.in = kf_kernel_input(tail);
        s.index = kf_kernel_index(tail);
        kf_val v = kf__emit_elementwise(&s);
        /* Sides that are tail nodes (a pre-activation saved for backward, cuBLASLt's
         * GELU_AUX): stored where the tail computes them, each its own binding. */
        for (uint32_t j = 0; j < grp->side_count; j++) {
            /* the root's own value: what the tail receives (a matmul's pre-activation) */
            kf_val side = grp->sides[j] == grp->root ? s.in : (kf_val){0};
            for (uint32_t i = 0; i < grp->node_count && !side.id; i++) {
                side = grp->nodes[i] == grp->sides[j] ? s.computed[i] : side;
            }
            if (!side.id) {
                continue; /* computed by the root's kernel */
            }
            kf_dtype dt = g->nodes[grp->sides[j]].dtype;
            kf_binding b =
                kf_kernel_storage(tail, "side", kf__scalar_type_of(dt), KF_ACCESS_READ_WRITE);
            kf_store(tail, b, s.index, from_f32(tail, side, dt));
            if (!kf__compiled_add_slot(p, c, grp->sides[j])) {
                kf__emit_release(&s);
                kf_kernel_destroy(base);
                kf_kernel_destroy(tail);
                return NULL;
            }
        }
        kf__emit_release(&s);
        kf_kernel_yield(tail, from_f32(tail, v, g->nodes[grp->result].dtype), s.index);
        k = kf_kernel_then(base, tail);
        kf_kernel_destroy(base);
        kf_kernel_destroy(tail);
        if (!k) {
            return NULL;
        }
    }
    if (!kf__compiled_add_slot(p, c, grp->result)) {
        kf_kernel_destroy(k);
        return NULL;
    }
    kf_kernel_grid(k, c->grid);
    if (!c->grid[0] && !c->grid[1] && !c->grid[2]) {
        uint32_t wg[3];
        kf_kernel_workgroup_size(k, wg);
        kf__grid_for(kf_shape_elements(&g->nodes[grp->result].shape), wg[0] * wg[1] * wg[2],
                     c->grid);
    }
    return k;
}
