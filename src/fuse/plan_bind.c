/* GPU tensors bound to a plan's inputs and outputs (kf_plan_bind_input / kf_plan_bind_output).
 *
 * A bound node's buffer is the caller's tensor's: the plan reads or writes it where it would
 * have used a buffer of its own (which it frees while bound, so weights are not held twice), and
 * holds it (kf__buffer_hold) so that destroying the tensor first never leaves the plan with a
 * freed buffer. An output bound to the tensor of one of the plan's inputs is an in-place update;
 * it is accepted only where no element can be read after it was written:
 *   - every other dispatch that reads that input runs before the one that writes the output,
 *     or the input is saved: copied at the start of the plan into a buffer that those later
 *     dispatches read instead (an activation backward reads after an in-place forward wrote
 *     it; all such copies in one dispatch, kf_save_activations' horizontal copy: save.c);
 *   - the writing dispatch is an element-wise group that reads the input at exactly the index it
 *     writes (same shape and dtype, no broadcast), so each element is read by the invocation
 *     that then writes it, and no other member of a horizontal dispatch reads it.
 * That group is then compiled with one read-write binding for both (plan.c, inplace_binding).
 */
#include "fuse/plan_internal.h"
#include "fuse/rules/rule.h"
#include "runtime/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kf__plan_binds {
    bool *bound;       /* node id -> p->buffers[id] is a caller's tensor, held */
    uint32_t *inplace; /* result node id -> the input node computed in place, or 0 */
};

uint32_t kf__plan_inplace_input(const kf_plan *p, uint32_t result) {
    return p->binds && p->binds->inplace ? p->binds->inplace[result] : 0;
}

bool kf__plan_is_bound(const kf_plan *p, uint32_t id) {
    return p->binds && p->binds->bound[id];
}

void kf__plan_binds_destroy(kf_plan *p) {
    if (!p->binds) {
        return;
    }
    for (uint32_t id = 0; p->graph && id < p->graph->node_count; id++) {
        if (p->binds->bound[id]) {
            kf__buffer_drop(p->buffers[id]);
            p->buffers[id] = NULL;
        }
    }
    free(p->binds->bound);
    free(p->binds->inplace);
    free(p->binds);
    p->binds = NULL;
}

static kf_status binds_ensure(kf_plan *p) {
    if (p->binds) {
        return KF_OK;
    }
    uint32_t nn = p->graph->node_count;
    p->binds = calloc(1, sizeof *p->binds);
    if (p->binds) {
        p->binds->bound = calloc(nn, sizeof *p->binds->bound);
        p->binds->inplace = calloc(nn, sizeof *p->binds->inplace);
    }
    if (!p->binds || !p->binds->bound || !p->binds->inplace) {
        if (p->binds) {
            free(p->binds->bound);
            free(p->binds->inplace);
            free(p->binds);
            p->binds = NULL;
        }
        kf__context_set_error(p->ctx, KF_ERROR_OUT_OF_MEMORY, "binding a tensor: out of memory");
        return KF_ERROR_OUT_OF_MEMORY;
    }
    return KF_OK;
}

/* ---- in-place proof ---- */

static bool group_reads_node(const kf_plan *p, const kf__group *grp, uint32_t id) {
    const kf_graph *g = p->graph;
    if (grp->kind == KF__GROUP_HORIZONTAL) {
        for (uint32_t m = 0; m < grp->member_count; m++) {
            if (group_reads_node(p, &p->groups[grp->members[m]], id)) {
                return true;
            }
        }
        return false;
    }
    if (grp->root) {
        const kf__node *r = &g->nodes[grp->root];
        for (uint32_t j = 0; j < r->input_count; j++) {
            if (kf__plan_buffer_node(p, r->inputs[j]) == id) {
                return true; /* a free reshape of id reads id's buffer */
            }
        }
    }
    for (uint32_t i = 0; i < grp->node_count; i++) {
        const kf__node *n = &g->nodes[grp->nodes[i]];
        for (uint32_t j = 0; j < n->input_count; j++) {
            if (kf__plan_buffer_node(p, n->inputs[j]) == id) {
                return true;
            }
        }
    }
    for (uint32_t i = 0; i < grp->read_count; i++) {
        if (grp->reads[i] == id) {
            return true; /* read by no node of its own: a recomputed value's operand */
        }
    }
    return false;
}

/* The group that dispatches group gi: itself, or the horizontal group that absorbed it. */
static uint32_t dispatched_as(const kf_plan *p, uint32_t gi) {
    if (!p->groups[gi].absorbed) {
        return gi;
    }
    for (uint32_t h = 0; h < p->group_count; h++) {
        const kf__group *grp = &p->groups[h];
        if (grp->kind != KF__GROUP_HORIZONTAL) {
            continue;
        }
        for (uint32_t m = 0; m < grp->member_count; m++) {
            if (grp->members[m] == gi) {
                return h;
            }
        }
    }
    return gi;
}

static uint32_t dispatch_position(const kf_plan *p, uint32_t gi) {
    for (uint32_t k = 0; k < p->dispatch_count; k++) {
        if (p->order[k] == gi) {
            return k;
        }
    }
    return UINT32_MAX;
}

static const char *node_label(const kf_plan *p, uint32_t id, char *buf, size_t size) {
    const kf__node *n = &p->graph->nodes[id];
    if (n->kind == KF__NODE_INPUT) {
        return n->name;
    }
    for (uint32_t o = 0; o < p->graph->output_count; o++) {
        if (p->graph->outputs[o].node == id) {
            return p->graph->outputs[o].name;
        }
    }
    snprintf(buf, size, "%s_%u", n->op->name, id);
    return buf;
}

/* Whether output node o may be written into the tensor that input node i reads. On success
 * *inplace is i when o's own dispatch reads i (it must then be compiled in place), else 0, and
 * *save is set when later dispatches read i, which then read a copy saved before (only where o
 * and i are the same bytes: a copy of a region o overlaps only in part is not made). */
static kf_status check_inplace(kf_plan *p, uint32_t o, uint32_t i, bool same, uint32_t *inplace,
                               bool *save) {
    char ob[96], ib[96];
    const char *oname = node_label(p, o, ob, sizeof ob);
    const char *iname = node_label(p, i, ib, sizeof ib);
    uint32_t gi = (uint32_t)p->group_of[o];
    uint32_t writer = dispatched_as(p, gi);
    uint32_t at = dispatch_position(p, writer);
    *inplace = 0;
    *save = false;
    const kf__node *input = &p->graph->nodes[i];
    uint64_t bytes = kf_shape_elements(&input->shape) * kf_dtype_size(input->dtype);
    for (uint32_t k = 0; k < p->dispatch_count; k++) {
        uint32_t other = p->order[k];
        if (k == at || other == UINT32_MAX || !group_reads_node(p, &p->groups[other], i)) {
            continue;
        }
        if (k > at && same && bytes % 4 == 0 && bytes / 4 <= UINT32_MAX) {
            *save = true; /* it reads the copy */
        } else if (k > at) {
            kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "output %s cannot be written into the tensor of input %s: "
                                  "group %u (%s) reads %s after group %u (%s) writes %s",
                                  oname, iname, other, p->groups[other].rule, iname, writer,
                                  p->groups[writer].rule, oname);
            return KF_ERROR_INVALID_ARGUMENT;
        }
    }
    const kf__group *w = &p->groups[writer];
    if (w->kind == KF__GROUP_HORIZONTAL) {
        for (uint32_t m = 0; m < w->member_count; m++) {
            if (w->members[m] != gi && group_reads_node(p, &p->groups[w->members[m]], i)) {
                kf__context_set_error(
                    p->ctx, KF_ERROR_INVALID_ARGUMENT,
                    "output %s cannot be written into the tensor of input %s: group %u "
                    "(horizontal) writes %s while other invocations of it read %s",
                    oname, iname, writer, oname, iname);
                return KF_ERROR_INVALID_ARGUMENT;
            }
        }
    }
    const kf__group *grp = &p->groups[gi];
    if (!group_reads_node(p, grp, i)) {
        return KF_OK; /* the input is read only by earlier dispatches */
    }
    if (!same) {
        kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                              "output %s cannot be written into the tensor of input %s: their "
                              "regions of it overlap without being the same bytes, and group %u "
                              "(%s) reads %s while it writes %s",
                              oname, iname, gi, grp->rule, iname, oname);
        return KF_ERROR_INVALID_ARGUMENT;
    }
    const kf__node *on = &p->graph->nodes[o], *in = &p->graph->nodes[i];
    if (grp->kind != KF__GROUP_ELEMENTWISE || kf__group_has_strided_view(p, grp) ||
        !kf_shape_eq(&on->shape, &in->shape) || on->dtype != in->dtype) {
        char a[64], b[64];
        kf__context_set_error(
            p->ctx, KF_ERROR_INVALID_ARGUMENT,
            "output %s cannot be written into the tensor of input %s: group %u (%s) reads %s "
            "(%s %s) at other elements than the one it writes (%s %s), so an element could be "
            "read after it was overwritten; bind %s to a tensor of its own",
            oname, iname, gi, grp->rule, iname, kf_dtype_str(in->dtype),
            kf_shape_str(&in->shape, a, sizeof a), kf_dtype_str(on->dtype),
            kf_shape_str(&on->shape, b, sizeof b), oname);
        return KF_ERROR_INVALID_ARGUMENT;
    }
    *inplace = i;
    return KF_OK;
}

kf_status kf__plan_check_usage(const kf_plan *p) {
    if (!p->binds) {
        return KF_OK; /* the plan's own buffers are all distinct */
    }
    for (uint32_t k = 0; k < p->dispatch_count; k++) {
        if (p->order[k] == UINT32_MAX) {
            continue; /* an activation save: it copies into a buffer of its own */
        }
        const kf__group *grp = &p->groups[p->order[k]];
        const kf__compiled *c = grp->compiled;
        kf_binding_kind kinds[KF_GROUP_MAX_SLOTS];
        uint32_t nk = kf_kernel_binding_kinds(c->kernel, kinds, KF_GROUP_MAX_SLOTS);
        for (uint32_t w = 0; w < nk && w < c->slot_count; w++) {
            if (kinds[w] != KF_BINDING_STORAGE_READ_WRITE) {
                continue;
            }
            for (uint32_t r = 0; r < nk && r < c->slot_count; r++) {
                if (kinds[r] == KF_BINDING_STORAGE_READ_WRITE ||
                    kf__buffer_base(c->buffers[r]) != kf__buffer_base(c->buffers[w])) {
                    continue;
                }
                char wb[96], rb[96];
                kf__context_set_error(
                    p->ctx, KF_ERROR_INVALID_ARGUMENT,
                    "output %s and input %s are regions of one tensor that group %u (%s) writes "
                    "and reads in one dispatch, which WebGPU forbids (one buffer bound read-write "
                    "and read-only at once): bind the output over exactly the input's region (in "
                    "place), or one of them to another tensor",
                    node_label(p, c->slots[w], wb, sizeof wb),
                    node_label(p, c->slots[r], rb, sizeof rb), p->order[k], grp->rule);
                return KF_ERROR_INVALID_ARGUMENT;
            }
        }
    }
    return KF_OK;
}

/* The buffer node id would have with node `over` bound to `over_buf`. */
static kf_buffer *buffer_with(const kf_plan *p, uint32_t id, uint32_t over, kf_buffer *over_buf,
                              bool *bound) {
    if (id == over) {
        *bound = over_buf != NULL;
        return over_buf;
    }
    *bound = kf__plan_is_bound(p, id);
    return p->buffers[id];
}

/* Checks every aliasing that binding `over` to over_buf (NULL: unbinding) would make; fills
 * inplace (node id -> input computed in place) and save (node id -> an input to save first). */
static kf_status check_aliases(kf_plan *p, uint32_t over, kf_buffer *over_buf, uint32_t *inplace,
                               bool *save) {
    const kf_graph *g = p->graph;
    memset(inplace, 0, sizeof *inplace * g->node_count);
    memset(save, 0, sizeof *save * g->node_count);
    for (uint32_t o = 1; o < g->node_count; o++) {
        bool ob;
        kf_buffer *buf = buffer_with(p, o, over, over_buf, &ob);
        if (!ob || g->nodes[o].kind != KF__NODE_OP) {
            continue;
        }
        uint32_t readers = 0;
        for (uint32_t other = 1; other < g->node_count; other++) {
            bool b, same = false;
            kf_buffer *obuf = buffer_with(p, other, over, over_buf, &b);
            if (other == o || !b || kf__buffer_base(obuf) != kf__buffer_base(buf)) {
                continue;
            }
            char ob_[96], xb[96];
            if (!kf__buffer_overlap(obuf, buf, &same)) {
                continue; /* other bytes of one buffer (kf__plan_check_usage checks the rest) */
            }
            if (g->nodes[other].kind == KF__NODE_OP) {
                kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                                      "outputs %s and %s are bound to one tensor (or overlapping "
                                      "regions of one); each output needs bytes of its own",
                                      node_label(p, o, ob_, sizeof ob_),
                                      node_label(p, other, xb, sizeof xb));
                return KF_ERROR_INVALID_ARGUMENT;
            }
            uint32_t ip = 0;
            bool later = false;
            kf_status st = check_inplace(p, o, other, same, &ip, &later);
            if (st != KF_OK) {
                return st;
            }
            save[other] |= later;
            if (ip && ++readers > 1) {
                kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                                      "output %s is bound to a tensor that two of its group's "
                                      "inputs read (%s and %s); in place, one input can share it",
                                      node_label(p, o, ob_, sizeof ob_),
                                      node_label(p, inplace[o], xb, sizeof xb), g->nodes[ip].name);
                return KF_ERROR_INVALID_ARGUMENT;
            }
            if (ip) {
                inplace[o] = ip;
            }
        }
    }
    return KF_OK;
}

static void free_compiled(kf__group *grp) {
    kf__plan_free_compiled(grp->compiled);
    grp->compiled = NULL;
}

/* Takes the new in-place table: recompiles the dispatches whose in-place input changed, then
 * rebuilds the dispatch list over the current buffers. */
static kf_status apply(kf_plan *p, const uint32_t *inplace, const bool *save) {
    const kf_graph *g = p->graph;
    uint32_t *old = p->binds->inplace;
    /* The saved copies: made for new saves, freed for ended ones. */
    if (!p->saved) {
        p->saved = calloc(g->node_count, sizeof *p->saved);
        if (!p->saved) {
            kf__context_set_error(p->ctx, KF_ERROR_OUT_OF_MEMORY, "out of memory");
            return KF_ERROR_OUT_OF_MEMORY;
        }
    }
    for (uint32_t i = 1; i < g->node_count; i++) {
        if (save[i] && !p->saved[i]) {
            const kf__node *n = &g->nodes[i];
            kf_status st = kf_buffer_create(
                p->ctx, kf_shape_elements(&n->shape) * kf_dtype_size(n->dtype), &p->saved[i]);
            if (st != KF_OK) {
                return st;
            }
        } else if (!save[i] && p->saved[i]) {
            kf_buffer_destroy(p->saved[i]);
            p->saved[i] = NULL;
        }
    }
    for (uint32_t o = 1; o < g->node_count; o++) {
        if (old[o] == inplace[o]) {
            continue;
        }
        old[o] = inplace[o];
        kf__group *grp = &p->groups[dispatched_as(p, (uint32_t)p->group_of[o])];
        uint64_t bytes = grp->compiled ? grp->compiled->bytes : 0;
        free_compiled(grp);
        kf__plan_compile_group(p, grp);
        if (p->status != KF_OK) {
            kf__context_set_error(p->ctx, p->status, "recompiling group %u in place: %s",
                                  (unsigned)(grp - p->groups), p->error);
            return p->status;
        }
        grp->compiled->bytes = bytes;
    }
    return kf__plan_make_dispatches(p) == KF_OK ? KF_OK : p->status;
}

/* Checks t for node id as a whole tensor. */
static kf_status check_whole(kf_plan *p, uint32_t id, const char *what, const char *name,
                             const kf_gpu_tensor *t) {
    const kf__node *n = &p->graph->nodes[id];
    if (t->ctx != p->ctx || !t->buffer) {
        kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                              "%s %s: the tensor belongs to another context", what, name);
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (!kf_shape_eq(&n->shape, &t->shape) || n->dtype != t->dtype) {
        char a[64], b[64];
        kf__context_set_error(p->ctx,
                              kf_shape_eq(&n->shape, &t->shape) ? KF_ERROR_TYPE : KF_ERROR_SHAPE,
                              "%s %s: the graph says %s %s, the tensor is %s %s", what, name,
                              kf_dtype_str(n->dtype), kf_shape_str(&n->shape, a, sizeof a),
                              kf_dtype_str(t->dtype), kf_shape_str(&t->shape, b, sizeof b));
        return kf_shape_eq(&n->shape, &t->shape) ? KF_ERROR_TYPE : KF_ERROR_SHAPE;
    }
    return KF_OK;
}

/* Binds node id to buf (NULL: unbinds), after the aliasing checks. */
static kf_status bind_buffer(kf_plan *p, uint32_t id, kf_buffer *buf) {
    const kf__node *n = &p->graph->nodes[id];
    kf_status st = binds_ensure(p);
    if (st != KF_OK) {
        return st;
    }
    if (buf == (kf__plan_is_bound(p, id) ? p->buffers[id] : NULL)) {
        return KF_OK; /* bound already as asked */
    }
    uint32_t *inplace = calloc(p->graph->node_count, sizeof *inplace);
    bool *save = calloc(p->graph->node_count, sizeof *save);
    if (!inplace || !save) {
        free(inplace);
        free(save);
        kf__context_set_error(p->ctx, KF_ERROR_OUT_OF_MEMORY, "binding a tensor: out of memory");
        return KF_ERROR_OUT_OF_MEMORY;
    }
    st = check_aliases(p, id, buf, inplace, save);
    kf_buffer *own = NULL;
    if (st == KF_OK && !buf) {
        /* Unbinding: the plan gets a buffer of its own again (zeros until set or run). */
        st = kf_buffer_create(p->ctx, kf_shape_elements(&n->shape) * kf_dtype_size(n->dtype), &own);
    }
    if (st != KF_OK) {
        free(inplace);
        free(save);
        return st;
    }
    if (kf__plan_is_bound(p, id)) {
        kf__buffer_drop(p->buffers[id]);
    } else {
        kf_buffer_destroy(p->buffers[id]); /* the tensor replaces it: no weight held twice */
    }
    p->buffers[id] = buf ? buf : own;
    p->binds->bound[id] = buf != NULL;
    kf__buffer_hold(buf);
    if (n->kind == KF__NODE_INPUT) {
        p->inputs_set[id] = buf != NULL;
    }
    st = apply(p, inplace, save);
    free(inplace);
    free(save);
    return st;
}

static kf_status bind(kf_plan *p, uint32_t id, const char *what, const char *name,
                      kf_gpu_tensor *t) {
    kf_status st = t ? check_whole(p, id, what, name, t) : KF_OK;
    return st == KF_OK ? bind_buffer(p, id, t ? t->buffer : NULL) : st;
}

/* Binds node id to the bytes of t from byte_offset on, through a view the plan owns. */
static kf_status bind_at(kf_plan *p, uint32_t id, const char *what, const char *name,
                         kf_gpu_tensor *t, uint64_t byte_offset) {
    const kf__node *n = &p->graph->nodes[id];
    if (!t) {
        kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                              "%s %s: the tensor is NULL (kf_plan_bind_%s(p, name, NULL) unbinds)",
                              what, name, what);
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (t->ctx != p->ctx || !t->buffer) {
        kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                              "%s %s: the tensor belongs to another context", what, name);
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (n->dtype != t->dtype) {
        kf__context_set_error(p->ctx, KF_ERROR_TYPE, "%s %s: the graph says %s, the tensor is %s",
                              what, name, kf_dtype_str(n->dtype), kf_dtype_str(t->dtype));
        return KF_ERROR_TYPE;
    }
    char a[64], b[64];
    uint64_t bytes = kf_shape_elements(&n->shape) * kf_dtype_size(n->dtype);
    uint64_t have = kf_shape_elements(&t->shape) * kf_dtype_size(t->dtype);
    if (byte_offset > have || bytes > have - byte_offset) {
        kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                              "%s %s: %s %s is %llu bytes, which do not fit at byte %llu of a "
                              "tensor %s %s of %llu bytes",
                              what, name, kf_dtype_str(n->dtype),
                              kf_shape_str(&n->shape, a, sizeof a), (unsigned long long)bytes,
                              (unsigned long long)byte_offset, kf_dtype_str(t->dtype),
                              kf_shape_str(&t->shape, b, sizeof b), (unsigned long long)have);
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (n->kind == KF__NODE_OP && bytes % 4) {
        /* kernels store f16 in pairs: the half after the last would be the next region's */
        kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                              "%s %s: %s %s is %llu bytes, not whole 4-byte words, so it cannot "
                              "be written into part of a tensor; bind a tensor of its own",
                              what, name, kf_dtype_str(n->dtype),
                              kf_shape_str(&n->shape, a, sizeof a), (unsigned long long)bytes);
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_buffer *view = NULL;
    kf_status st = kf_buffer_view(t->buffer, byte_offset, bytes, &view);
    if (st != KF_OK) {
        kf__context_set_error(p->ctx, st, "%s %s: %s", what, name, kf_context_last_error(p->ctx));
        return st;
    }
    st = bind_buffer(p, id, view);
    kf_buffer_destroy(view); /* the plan's hold keeps it until it unbinds; freed now on failure */
    return st;
}

static uint32_t input_node(const kf_plan *p, const char *name) {
    const kf_graph *g = p->graph;
    for (uint32_t id = 1; name && id < g->node_count; id++) {
        if (g->nodes[id].kind == KF__NODE_INPUT && !strcmp(g->nodes[id].name, name)) {
            return id;
        }
    }
    return 0;
}

kf_status kf_plan_bind_input_at(kf_plan *p, const char *name, kf_gpu_tensor *t,
                                uint64_t byte_offset) {
    if (!p) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    uint32_t id = input_node(p, name);
    if (!id) {
        kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT, "plan has no input named '%s'",
                              name ? name : "(null)");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    return bind_at(p, id, "input", name, t, byte_offset);
}

/* The output node of name that bind may bind; 0 (with the message set) otherwise. */
static uint32_t bindable_output(kf_plan *p, const char *name) {
    uint32_t id = kf__plan_output_node(p, name);
    if (!id) {
        kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT, "plan has no output named '%s'",
                              name ? name : "(null)");
        return 0;
    }
    const kf__node *n = &p->graph->nodes[id];
    if (n->kind != KF__NODE_OP || !p->buffers[id]) {
        kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                              "output %s is the graph's input %s itself: bind the input instead",
                              name, n->kind == KF__NODE_INPUT ? n->name : "(a constant)");
        return 0;
    }
    return id;
}

kf_status kf_plan_bind_output_at(kf_plan *p, const char *name, kf_gpu_tensor *t,
                                 uint64_t byte_offset) {
    if (!p) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    uint32_t id = bindable_output(p, name);
    return id ? bind_at(p, id, "output", name, t, byte_offset) : KF_ERROR_INVALID_ARGUMENT;
}

kf_status kf_plan_bind_input(kf_plan *p, const char *name, kf_gpu_tensor *t) {
    if (!p) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    const kf_graph *g = p->graph;
    for (uint32_t id = 1; name && id < g->node_count; id++) {
        if (g->nodes[id].kind == KF__NODE_INPUT && !strcmp(g->nodes[id].name, name)) {
            return bind(p, id, "input", name, t);
        }
    }
    kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT, "plan has no input named '%s'",
                          name ? name : "(null)");
    return KF_ERROR_INVALID_ARGUMENT;
}

kf_status kf_plan_bind_output(kf_plan *p, const char *name, kf_gpu_tensor *t) {
    if (!p) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    uint32_t id = kf__plan_output_node(p, name);
    if (!id) {
        kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT, "plan has no output named '%s'",
                              name ? name : "(null)");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    const kf__node *n = &p->graph->nodes[id];
    if (n->kind != KF__NODE_OP || !p->buffers[id]) {
        kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                              "output %s is the graph's input %s itself: bind the input instead",
                              name, n->kind == KF__NODE_INPUT ? n->name : "(a constant)");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    return bind(p, id, "output", name, t);
}

kf_status kf__plan_prime(kf_plan *p) {
    if (p->dispatch_count == 0) {
        return KF_OK;
    }
    kf_dispatch *once = calloc(p->dispatch_count, sizeof *once);
    if (!once) {
        kf__context_set_error(p->ctx, KF_ERROR_OUT_OF_MEMORY, "out of memory");
        return KF_ERROR_OUT_OF_MEMORY;
    }
    /* One workgroup each: every kernel bound-checks, and the values written into the plan's own
     * buffers are overwritten by the first real run. */
    for (uint32_t i = 0; i < p->dispatch_count; i++) {
        once[i] = p->dispatches[i];
        once[i].groups[0] = once[i].groups[1] = once[i].groups[2] = 1;
    }
    kf_status st = kf_context_run(p->ctx, once, p->dispatch_count);
    free(once);
    return st;
}
