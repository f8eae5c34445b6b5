/* The fusion planner's driver: groups a graph's operators into kernels, compiles them and runs
 * them.
 *
 * The rules themselves are records in src/fuse/rules/ (rule.h says how the planner asks them).
 * Walking the graph in topological order, an operator joins the group of an operand when the
 * operand is that group's result, read by nothing else, not an output, of the same shape and
 * dtype, and the group's rule accepts it; otherwise the first rule that opens a group at it does.
 * Groups get levels (1 + the deepest level they read from), then plan-wide rules run (horizontal
 * fusion), then each group's rule builds its kernel.
 * What must be kept is kept: a value read twice, an output, or one broadcast into another shape
 * ends its group and is written to memory.
 */
#include "fuse/plan_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse/rules/rule.h"
#include "util/half.h"

static void plan_failv(kf_plan *p, kf_status st, const char *fmt, va_list ap) {
    if (p->status != KF_OK) {
        return;
    }
    p->status = st;
    vsnprintf(p->error, sizeof p->error, fmt, ap);
}

static void plan_fail(kf_plan *p, kf_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void plan_fail(kf_plan *p, kf_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    plan_failv(p, st, fmt, ap);
    va_end(ap);
}

void kf__plan_fail(kf_plan *p, kf_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    plan_failv(p, st, fmt, ap);
    va_end(ap);
}

static uint64_t node_bytes(const kf__node *n) {
    return kf_shape_elements(&n->shape) * kf_dtype_size(n->dtype);
}

kf__group *kf__plan_new_group(kf_plan *p, const kf__fusion_rule *rule, kf__group_kind kind) {
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
    grp->fuser = rule;
    snprintf(grp->rule, sizeof grp->rule, "%s", rule->name);
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

kf__group *kf__plan_open_group(kf_plan *p, const kf__fusion_rule *rule, kf__group_kind kind,
                               uint32_t node) {
    kf__group *grp = kf__plan_new_group(p, rule, kind);
    if (!grp) {
        return NULL;
    }
    if (kind == KF__GROUP_PRODUCER) {
        grp->root = node;
        p->group_of[node] = (int32_t)(grp - p->groups);
    } else {
        group_push_node(p, grp, node);
    }
    grp->result = node;
    return grp;
}

/* May node join the group whose result is its operand `operand`? What every rule needs, then
 * what the group's rule says. */
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
    return grp->fuser->accepts && grp->fuser->accepts(p, grp, node);
}

/* The first registered rule that opens a group at node. */
static void open_group(kf_plan *p, uint32_t node) {
    for (uint32_t r = 0; r < kf__fusion_rule_count; r++) {
        const kf__fusion_rule *rule = kf__fusion_rules[r];
        if (rule->open && (rule->open(p, node) || p->status != KF_OK)) {
            return;
        }
    }
    plan_fail(p, KF_ERROR_INTERNAL, "no fusion rule takes %s (node %u)",
              p->graph->nodes[node].op->name, node);
}

static void plan_vertical(kf_plan *p) {
    const kf_graph *g = p->graph;
    for (uint32_t id = 1; id < g->node_count && p->status == KF_OK; id++) {
        const kf__node *n = &g->nodes[id];
        if (n->kind != KF__NODE_OP) {
            continue;
        }
        /* The group it joins: a rooted (producer) operand group first, since a group has one
         * root; the other operands' element-wise groups merge into it. */
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
            open_group(p, id);
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

uint32_t kf__group_reads(const kf_plan *p, const kf__group *grp, uint32_t *out, uint32_t cap) {
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
            uint32_t n = kf__group_reads(p, grp, reads, KF_GROUP_MAX_SLOTS);
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

/* Plan-wide rules, in table order. */
static void plan_passes(kf_plan *p) {
    for (uint32_t r = 0; r < kf__fusion_rule_count && p->status == KF_OK; r++) {
        if (kf__fusion_rules[r]->pass) {
            kf__fusion_rules[r]->pass(p);
        }
    }
}

static void compile_group(kf_plan *p, kf__group *grp) {
    kf__compiled *c = calloc(1, sizeof *c);
    if (!c) {
        plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory compiling a group");
        return;
    }
    grp->compiled = c;
    kf_kernel *k = grp->fuser->build(p, grp, c);
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
    c->wgsl = kf_kernel_emit_wgsl(k);
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

static kf_status make_dispatches(kf_plan *p) {
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
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (g->status != KF_OK) {
        return g->status;
    }
    if (g->output_count == 0) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_plan *p = calloc(1, sizeof *p);
    if (!p) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    p->ctx = ctx;
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
        plan_passes(p);
    }
    for (uint32_t gi = 0; gi < p->group_count && p->status == KF_OK; gi++) {
        kf__group *grp = &p->groups[gi];
        if (grp->kind != KF__GROUP_DEAD && !grp->absorbed) {
            compile_group(p, grp);
        }
    }
    if (p->status == KF_OK) {
        make_buffers(p);
    }
    if (p->status == KF_OK) {
        make_dispatches(p);
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
    free(p);
}

kf_status kf_plan_summary_get(const kf_plan *p, kf_plan_summary *out) {
    if (!p || !out) {
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
            ((int32_t *)staged)[i] = (int32_t)data[i]; /* class indices: whole numbers */
        }
    }
    kf_status st = kf_buffer_upload(p->buffers[id], 0, staged, count * kf_dtype_size(n->dtype));
    free(staged);
    return st;
}

kf_status kf_plan_set_input(kf_plan *p, const char *name, const kf_tensor *value) {
    if (!p || !value || !value->data) {
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

static kf_status check_inputs(kf_plan *p) {
    const kf_graph *g = p->graph;
    for (uint32_t id = 1; id < g->node_count; id++) {
        if (g->nodes[id].kind == KF__NODE_INPUT && !p->inputs_set[id]) {
            kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "input %s was never set (kf_plan_set_input)", g->nodes[id].name);
            return KF_ERROR_INVALID_ARGUMENT;
        }
    }
    return KF_OK;
}

kf_status kf_plan_run(kf_plan *p) {
    if (!p) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_status st = check_inputs(p);
    if (st != KF_OK) {
        return st;
    }
    if (p->dispatch_count == 0) {
        return KF_OK; /* every output is an input */
    }
    return kf_context_run(p->ctx, p->dispatches, p->dispatch_count);
}

kf_status kf_plan_time(kf_plan *p, uint32_t repeat, kf_timing *out) {
    if (!p || !out) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_status st = check_inputs(p);
    if (st != KF_OK) {
        return st;
    }
    if (p->dispatch_count == 0) {
        memset(out, 0, sizeof *out);
        return KF_OK;
    }
    return kf_context_time(p->ctx, p->dispatches, p->dispatch_count, repeat, out);
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
        return KF_ERROR_INVALID_ARGUMENT;
    }
    uint32_t id = kf__plan_output_node(p, name);
    if (!id) {
        kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT, "plan has no output named '%s'",
                              name ? name : "(null)");
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
