/* A plan in words: what fuses, why, and what it saves. */
#include "fuse/plan_internal.h"
#include "fuse/rules/rule.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct text {
    char *buf;
    size_t len;
    size_t cap;
    bool failed;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(text *t, const char *fmt, ...) {
    if (t->failed) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        return;
    }
    if (t->len + (size_t)n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 1024;
        while (t->len + (size_t)n + 1 > cap) {
            cap *= 2;
        }
        char *b = realloc(t->buf, cap);
        if (!b) {
            t->failed = true;
            return;
        }
        t->buf = b;
        t->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

static const char *dtype_name(kf_dtype d) {
    return d == KF_DTYPE_F16 ? "f16" : "f32";
}

static void put_bytes(text *t, uint64_t bytes) {
    if (bytes >= 10ull << 20) {
        put(t, "%.1f MiB", (double)bytes / (1024.0 * 1024.0));
    } else if (bytes >= 10ull << 10) {
        put(t, "%.1f KiB", (double)bytes / 1024.0);
    } else {
        put(t, "%llu B", (unsigned long long)bytes);
    }
}

/* How a node is called in the plan: its input or output name, else op#id. */
static void put_node(text *t, const kf_plan *p, uint32_t id) {
    const kf_graph *g = p->graph;
    const kf__node *n = &g->nodes[id];
    if (n->kind == KF__NODE_INPUT) {
        put(t, "%s", n->name);
        return;
    }
    if (n->kind == KF__NODE_SCALAR) {
        put(t, "%g", (double)n->scalar);
        return;
    }
    for (uint32_t o = 0; o < g->output_count; o++) {
        if (g->outputs[o].node == id) {
            put(t, "%s", g->outputs[o].name);
            return;
        }
    }
    put(t, "%s#%u", n->op->name, id);
}

static void put_tensor(text *t, const kf_plan *p, uint32_t id) {
    const kf__node *n = &p->graph->nodes[id];
    char shape[64];
    put_node(t, p, id);
    put(t, " %s[%s]", dtype_name(n->dtype), kf_shape_str(&n->shape, shape, sizeof shape));
}

static void put_ops(text *t, const kf_plan *p, const kf__group *grp) {
    const kf_graph *g = p->graph;
    bool first = true;
    /* prologues first, one chain per input ("gelu |> matmul", "gelu, tanh |> matmul") */
    for (uint32_t i = 0; grp->root && i < KF_NODE_MAX_INPUTS; i++) {
        const kf__group *pro = grp->prologue[i] ? &p->groups[grp->prologue[i] - 1] : NULL;
        for (uint32_t j = 0; pro && j < pro->node_count; j++) {
            put(t, "%s%s", first ? "" : j ? " |> " : ", ", g->nodes[pro->nodes[j]].op->name);
            first = false;
        }
    }
    if (grp->row_norm) { /* folded into the root's loads: "rmsnorm |> matmul" */
        put(t, "%s%s", first ? "" : ", ", g->nodes[grp->row_norm].op->name);
        first = false;
    }
    if (!first) {
        put(t, " |> ");
        first = true;
    }
    if (grp->root) {
        put(t, "%s", g->nodes[grp->root].op->name);
        first = false;
    }
    for (uint32_t i = 0; i < grp->node_count; i++) {
        put(t, "%s%s", first ? "" : " |> ", g->nodes[grp->nodes[i]].op->name);
        first = false;
    }
    /* what the root's kernel computes beside its own value: "matmul + sum_leading",
     * "cross_entropy + broadcast_to |> cross_entropy_grad" */
    for (uint32_t i = 0; i < grp->side_input_count; i++) {
        put(t, "%s%s", i ? " |> " : " + ", g->nodes[grp->side_inputs[i]].op->name);
    }
    for (uint32_t i = 0; i < grp->side_count; i++) {
        bool in_tail = false;
        for (uint32_t j = 0; j < grp->node_count; j++) {
            in_tail |= grp->nodes[j] == grp->sides[i];
        }
        if (!in_tail) {
            put(t, "%s%s", grp->side_input_count ? " |> " : " + ",
                g->nodes[grp->sides[i]].op->name);
        }
    }
}

static const char *rule_of(const kf_plan *p, const kf__group *grp) {
    if (p->no_fuse) {
        return "unfused";
    }
    return grp->fuser->explain(p, grp);
}

static void put_group_line(text *t, const kf_plan *p, const kf__group *grp) {
    put(t, "%s: ", rule_of(p, grp));
    put_ops(t, p, grp);
    put(t, " -> ");
    put_tensor(t, p, grp->result);
    for (uint32_t i = 0; i < grp->side_count; i++) {
        put(t, ", ");
        put_tensor(t, p, grp->sides[i]);
    }
    put(t, "\n");
}

/* Dispatch number (1-based) that runs group gi, 0 if none. */
static uint32_t dispatch_number(const kf_plan *p, uint32_t gi) {
    for (uint32_t d = 0; d < p->dispatch_count; d++) {
        if (p->order[d] == UINT32_MAX) {
            continue; /* an activation save */
        }
        const kf__group *h = &p->groups[p->order[d]];
        bool holds = p->order[d] == gi;
        for (uint32_t m = 0; h->kind == KF__GROUP_HORIZONTAL && m < h->member_count; m++) {
            holds |= h->members[m] == gi;
        }
        if (holds) {
            return d + 1;
        }
    }
    return 0;
}

/* Whether group gi loads node id from memory (its root's inputs, its tail's reads). */
static bool group_loads(const kf_plan *p, uint32_t gi, uint32_t id) {
    const kf__group *grp = &p->groups[gi];
    const kf__node *root = grp->root ? &p->graph->nodes[grp->root] : NULL;
    for (uint32_t i = 0; root && i < root->input_count; i++) {
        if (root->inputs[i] == id) {
            return true;
        }
    }
    for (uint32_t i = 0; i < grp->read_count; i++) {
        if (grp->reads[i] == id) {
            return true;
        }
    }
    for (uint32_t i = 0; grp->root && i < KF_NODE_MAX_INPUTS; i++) {
        const kf__group *pro = grp->prologue[i] ? &p->groups[grp->prologue[i] - 1] : NULL;
        for (uint32_t r = 0; pro && r < pro->read_count; r++) {
            if (pro->reads[r] == id) {
                return true; /* in a prologue, read as the consumer loads its input */
            }
        }
    }
    return false;
}

/* The activation-save lines (src/fuse/rules/activation_save.c): what the group writes beside its
 * result, or recomputes instead of reading, and the bytes each choice costs. */
static void put_activation(text *t, const kf_plan *p, const kf__group *grp) {
    for (uint32_t k = 0; grp->save_cost && k < grp->side_count; k++) {
        uint32_t pre = grp->sides[k];
        bool in_tail = false;
        for (uint32_t i = 0; i < grp->node_count; i++) {
            in_tail |= grp->nodes[i] == pre;
        }
        if (!in_tail) {
            continue; /* a side of another rule (BGRAD's column sums) */
        }
        put(t, "  saves:  pre-activation ");
        put_tensor(t, p, pre);
        put(t, " (");
        put_bytes(t, kf_shape_elements(&p->graph->nodes[pre].shape) * 4u);
        put(t, ") as a second output, for dispatch");
        bool any = false;
        for (uint32_t gi = 0; gi < p->group_count; gi++) {
            if (p->groups[gi].kind != KF__GROUP_DEAD && &p->groups[gi] != grp &&
                group_loads(p, gi, pre)) {
                put(t, "%s %u", any ? "," : "", dispatch_number(p, gi));
                any = true;
            }
        }
        put(t, "\n          saving moves ");
        put_bytes(t, grp->save_cost);
        if (grp->recompute_cost) {
            put(t, ", recomputing would load ");
            put_bytes(t, grp->recompute_cost);
        } else {
            put(t, " (recomputing is not possible here)");
        }
        put(t, "%s\n", p->activations == KF_ACTIVATIONS_SAVE ? " (save forced)" : "");
    }
    if (grp->recompute) {
        const kf__group *from = &p->groups[grp->recompute_from];
        put(t, "  recomputes: pre-activation ");
        put_tensor(t, p, grp->recompute);
        put(t, " of dispatch %u (", dispatch_number(p, grp->recompute_from));
        put(t, "%s", p->graph->nodes[from->root].op->name);
        for (uint32_t i = 0; i < from->node_count; i++) {
            put(t, " |> %s", p->graph->nodes[from->nodes[i]].op->name);
            if (from->nodes[i] == grp->recompute) {
                break;
            }
        }
        put(t, ") in its store phase instead of reading it\n          recomputing loads ");
        put_bytes(t, grp->recompute_cost);
        put(t, ", saving would move ");
        put_bytes(t, grp->save_cost);
        put(t, "%s\n", p->activations == KF_ACTIVATIONS_RECOMPUTE ? " (recompute forced)" : "");
    }
}

/* An activation-save dispatch (save.c): the inputs it copies, who overwrites them in place and
 * who reads the copies. The plan's save dispatches share the copies in order, so each lists
 * all of them (there is more than one only past the binding limit). */
static void put_save(text *t, const kf_plan *p, uint32_t d) {
    const kf_graph *g = p->graph;
    put(t, "\ndispatch %u  activation save: ", d + 1);
    uint64_t bytes = 0;
    bool any = false;
    for (uint32_t id = 0; id < g->node_count; id++) {
        if (p->saved[id]) {
            put(t, "%s", any ? ", " : "");
            put_tensor(t, p, id);
            bytes += 2u * kf_buffer_size(p->saved[id]);
            any = true;
        }
    }
    put(t, " copied%s (kf_save_activations)\n", p->save_count > 1 ? "" : " in one dispatch");
    for (uint32_t id = 0; id < g->node_count; id++) {
        if (!p->saved[id]) {
            continue;
        }
        put(t, "  saves:  ");
        put_node(t, p, id);
        for (uint32_t o = 0; o < g->node_count; o++) {
            if (o != id && g->nodes[o].kind == KF__NODE_OP && p->buffers[o] == p->buffers[id]) {
                put(t, ", overwritten in place by ");
                put_node(t, p, o);
                put(t, " (dispatch %u)", dispatch_number(p, (uint32_t)p->group_of[o]));
            }
        }
        put(t, "; the copy is read by dispatch");
        bool first = true;
        for (uint32_t gi = 0; gi < p->group_count; gi++) {
            const kf__compiled *c = p->groups[gi].compiled;
            bool reads = false;
            for (uint32_t s = 0; c && s < c->slot_count; s++) {
                reads |= c->slots[s] == id;
            }
            if (reads && p->groups[gi].kind != KF__GROUP_DEAD) {
                put(t, "%s %u", first ? "" : ",", dispatch_number(p, gi));
                first = false;
            }
        }
        put(t, "\n");
    }
    put(t, "  bytes:  ");
    put_bytes(t, bytes);
    put(t, "\n");
}

char *kf_plan_explain(const kf_plan *p, bool with_wgsl) {
    if (!p) {
        return NULL;
    }
    text t = {0};
    double saved =
        p->unfused_bytes ? 100.0 * (1.0 - (double)p->bytes / (double)p->unfused_bytes) : 0.0;
    put(&t, "plan: %u dispatch%s (unfused: %u), ", p->dispatch_count,
        p->dispatch_count == 1 ? "" : "es", p->unfused_dispatches);
    put_bytes(&t, p->bytes);
    put(&t, " moved (unfused: ");
    put_bytes(&t, p->unfused_bytes);
    put(&t, ", %.0f%% less)\n", saved);
    for (uint32_t d = 0; d < p->dispatch_count; d++) {
        if (p->order[d] == UINT32_MAX) {
            put_save(&t, p, d);
            continue;
        }
        const kf__group *grp = &p->groups[p->order[d]];
        const kf__compiled *c = grp->compiled;
        put(&t, "\ndispatch %u  ", d + 1);
        if (grp->kind == KF__GROUP_HORIZONTAL) {
            put(&t, "horizontal fusion of %u independent groups\n", grp->member_count);
            for (uint32_t m = 0; m < grp->member_count; m++) {
                put(&t, "  - ");
                put_group_line(&t, p, &p->groups[grp->members[m]]);
            }
        } else {
            put_group_line(&t, p, grp);
        }
        put(&t, "  reads:  ");
        bool any = false;
        for (uint32_t s = 0; s < c->slot_count; s++) {
            bool written = false;
            for (uint32_t m = 0; m < grp->member_count; m++) {
                written |= p->groups[grp->members[m]].result == c->slots[s];
            }
            if (kf__group_writes(grp, c->slots[s]) || written) {
                continue;
            }
            put(&t, "%s", any ? ", " : "");
            put_tensor(&t, p, c->slots[s]);
            any = true;
        }
        put(&t, "%s\n", any ? "" : "(nothing)");
        put_activation(&t, p, grp);
        put(&t, "  bytes:  ");
        put_bytes(&t, c->bytes);
        put(&t, "\n  grid:   %ux%ux%u workgroups\n", c->grid[0], c->grid[1], c->grid[2]);
        kf_bounds_report br;
        if (kf_kernel_bounds(c->kernel, &br, NULL) == KF_OK) { /* docs/builder.md */
            put(&t, "  bounds: %u accesses, %u proved in bounds, %u guarded\n", br.accesses,
                br.proved, br.guarded);
        }
        if (with_wgsl && c->wgsl) {
            put(&t, "  wgsl:\n%s\n", c->wgsl);
        }
    }
    if (p->dispatch_count == 0) {
        put(&t, "\nnothing to run: every output is an input\n");
    }
    if (t.failed) {
        free(t.buf);
        return NULL;
    }
    return t.buf;
}
