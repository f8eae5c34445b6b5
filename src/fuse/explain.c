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
    put(t, " %s[%s]", kf_dtype_str(n->dtype), kf_shape_str(&n->shape, shape, sizeof shape));
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
        if (!kf__group_side_in_store(grp, grp->sides[i])) {
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
        if (grp->strided[i] && p->groups[grp->strided[i] - 1].reads[0] == id) {
            return true; /* the source of a view read in place */
        }
    }
    return false;
}

/* The views the root's kernel reads in place through strides (src/fuse/rules/strided.c): "in
 * place: permute#11 f32[2x2x13x12] = slice |> reshape |> permute of matmul#8". */
static void put_strided(text *t, const kf_plan *p, const kf__group *grp) {
    bool any = false;
    for (uint32_t i = 0; grp->root && i < KF_NODE_MAX_INPUTS; i++) {
        if (!grp->strided[i]) {
            continue;
        }
        const kf__group *views = &p->groups[grp->strided[i] - 1];
        put(t, "%s", any ? ", " : "  in place: ");
        put_tensor(t, p, views->result);
        put(t, " = ");
        for (uint32_t j = 0; j < views->node_count; j++) {
            put(t, "%s%s", j ? " |> " : "", p->graph->nodes[views->nodes[j]].op->name);
        }
        put(t, " of ");
        put_node(t, p, views->reads[0]);
        any = true;
    }
    if (any) {
        put(t, "\n");
    }
}

/* The activation-save lines (src/fuse/rules/activation_save.c): what the group writes beside its
 * result, or recomputes instead of reading, and the bytes each choice costs. */
static void put_activation(text *t, const kf_plan *p, const kf__group *grp) {
    for (uint32_t k = 0; grp->save_cost && k < grp->side_count; k++) {
        uint32_t pre = grp->sides[k];
        if (!kf__group_side_in_store(grp, pre)) {
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

/* ---- what backward reads from forward, by part of the forward ---- */

/* bw[id]: node id is computed by backward (autodiff's nodes): a backward operator, autodiff's seed
 * (broadcast_to of a scalar: d loss / d loss = 1), or a node reading one of those. */
static bool *backward_nodes(const kf_graph *g) {
    bool *bw = calloc(g->node_count ? g->node_count : 1, sizeof *bw);
    for (uint32_t id = 1; bw && id < g->node_count; id++) {
        const kf__node *n = &g->nodes[id];
        if (n->kind != KF__NODE_OP) {
            continue;
        }
        bw[id] =
            kf_op_grad_of(n->op, NULL) != NULL || (!strcmp(n->op->name, "broadcast_to") &&
                                                   g->nodes[n->inputs[0]].kind == KF__NODE_SCALAR);
        for (uint32_t i = 0; i < n->input_count; i++) {
            bw[id] |= bw[n->inputs[i]];
        }
    }
    return bw;
}

/* Whether dispatch d is backward work (what its group, or a member of it, writes is). */
static bool dispatch_is_backward(const kf_plan *p, const bool *bw, uint32_t d) {
    if (p->order[d] == UINT32_MAX) {
        return false; /* a save */
    }
    const kf__group *grp = &p->groups[p->order[d]];
    bool backward = grp->kind != KF__GROUP_HORIZONTAL && bw[grp->result];
    for (uint32_t m = 0; m < grp->member_count; m++) {
        backward |= bw[p->groups[grp->members[m]].result];
    }
    return backward;
}

/* Whether dispatch d's kernel binds node id to read it (a binding it does not write), or
 * recomputes it (the activation-save rule's recompute). */
static bool dispatch_reads(const kf_plan *p, uint32_t d, uint32_t id) {
    if (p->order[d] == UINT32_MAX) {
        return false;
    }
    const kf__group *grp = &p->groups[p->order[d]];
    const kf__compiled *c = grp->compiled;
    bool written = kf__group_writes(grp, id), bound = grp->recompute == id;
    for (uint32_t m = 0; m < grp->member_count; m++) {
        written |= kf__group_writes(&p->groups[grp->members[m]], id);
    }
    for (uint32_t s = 0; c && s < c->slot_count; s++) {
        bound |= c->slots[s] == id;
    }
    return bound && !written;
}

/* The forward's parts, split after each residual add: an `add` of two values of its shape, one
 * of which a forward row reduction (the next norm) also reads (the skip path). part_of[id] is the
 * part of forward node id (by its id: nodes are in topological order); returns the part count. */
static uint32_t forward_parts(const kf_graph *g, const bool *bw, uint32_t *part_of) {
    bool *normed = calloc(g->node_count ? g->node_count : 1, sizeof *normed);
    uint32_t part = 0;
    for (uint32_t id = 1; normed && id < g->node_count; id++) {
        const kf__node *n = &g->nodes[id];
        for (uint32_t i = 0; n->kind == KF__NODE_OP && !bw[id] && i < n->input_count; i++) {
            normed[n->inputs[i]] |= n->op->op_class == KF_OP_CLASS_ROW_REDUCTION;
        }
    }
    for (uint32_t id = 1; id < g->node_count; id++) {
        const kf__node *n = &g->nodes[id];
        part_of[id] = part;
        if (!normed || bw[id] || n->kind != KF__NODE_OP || strcmp(n->op->name, "add") ||
            n->input_count != 2) {
            continue;
        }
        const kf__node *a = &g->nodes[n->inputs[0]], *b = &g->nodes[n->inputs[1]];
        if (kf_shape_eq(&a->shape, &n->shape) && kf_shape_eq(&b->shape, &n->shape) &&
            (normed[n->inputs[0]] || normed[n->inputs[1]])) {
            part++; /* the add closes its part */
        }
    }
    free(normed);
    return part + 1;
}

/* A part's name: "block 2 attention", "block 2 FFN", "head" (after the last residual add) or
 * "forward" (a graph without residual adds). */
static void put_part_name(text *t, const kf_graph *g, const bool *bw, const uint32_t *part_of,
                          uint32_t parts, uint32_t part) {
    uint32_t block = 0;
    const char *kind = "forward";
    for (uint32_t q = 0; q <= part; q++) {
        bool attention = false, activation = false;
        for (uint32_t id = 1; id < g->node_count; id++) {
            const kf__node *n = &g->nodes[id];
            if (part_of[id] == q && !bw[id] && n->kind == KF__NODE_OP) {
                attention |= !strcmp(n->op->name, "attention");
                activation |= kf__op_is_elementwise(n->op) && n->input_count <= 2 &&
                              (!strcmp(n->op->name, "gelu") || !strcmp(n->op->name, "relu") ||
                               !strcmp(n->op->name, "silu") || !strcmp(n->op->name, "swiglu") ||
                               !strcmp(n->op->name, "gelu_erf"));
            }
        }
        if (attention) {
            block++, kind = "attention";
        } else if (activation) {
            block += !strcmp(kind, "attention") ? 0u : 1u;
            kind = "FFN";
        } else {
            kind = parts == 1 ? "forward" : q + 1 == parts ? "head" : "other";
        }
    }
    if (block && (!strcmp(kind, "attention") || !strcmp(kind, "FFN"))) {
        put(t, "block %u %s", block, kind);
    } else {
        put(t, "%s", kind);
    }
}

/* Lists, for a training graph (one with autodiff's nodes), every forward value a backward
 * dispatch loads or recomputes, by part of the forward, and how the plan keeps it: in the buffer
 * the forward writes anyway, as a side output of the forward kernel that computes it, copied by a
 * save dispatch (an input overwritten in place, save.c), or recomputed. */
static void put_backward_reads(text *t, const kf_plan *p) {
    const kf_graph *g = p->graph;
    bool *bw = backward_nodes(g);
    uint32_t *part_of = calloc(g->node_count ? g->node_count : 1, sizeof *part_of);
    uint32_t *first_reader = calloc(g->node_count ? g->node_count : 1, sizeof *first_reader);
    bool any_bw = false;
    for (uint32_t d = 0; bw && d < p->dispatch_count; d++) {
        any_bw |= dispatch_is_backward(p, bw, d);
    }
    if (!bw || !part_of || !first_reader || !any_bw || p->no_fuse) {
        free(bw), free(part_of), free(first_reader);
        return;
    }
    uint32_t parts = forward_parts(g, bw, part_of);
    for (uint32_t id = g->node_count; id-- > 1;) {
        const kf__node *n = &g->nodes[id];
        for (uint32_t i = 0; n->kind == KF__NODE_OP && !bw[id] && i < n->input_count; i++) {
            first_reader[n->inputs[i]] = id;
        }
    }
    uint32_t saves = 0, first_save = 0;
    for (uint32_t d = 0; d < p->dispatch_count; d++) {
        first_save = !first_save && p->order[d] == UINT32_MAX ? d + 1 : first_save;
        saves += p->order[d] == UINT32_MAX;
    }
    /* the values, and the totals */
    uint32_t values = 0, kept = 0, sides = 0, copied = 0, recomputed = 0;
    uint64_t bytes = 0;
    bool *listed = calloc(g->node_count, sizeof *listed);
    for (uint32_t id = 1; listed && id < g->node_count; id++) {
        const kf__node *n = &g->nodes[id];
        bool saved_input = n->kind == KF__NODE_INPUT && p->saved && p->saved[id];
        if (bw[id] || (n->kind != KF__NODE_OP && !saved_input)) {
            continue;
        }
        bool loaded = false, recomputes = false;
        for (uint32_t d = 0; d < p->dispatch_count; d++) {
            if (dispatch_is_backward(p, bw, d) && dispatch_reads(p, d, id)) {
                recomputes |= p->groups[p->order[d]].recompute == id;
                loaded |= p->groups[p->order[d]].recompute != id;
            }
        }
        if (!loaded && !recomputes) {
            continue;
        }
        listed[id] = true;
        values++;
        bytes += kf_shape_elements(&n->shape) * (n->dtype == KF_DTYPE_F16 ? 2u : 4u);
        int32_t wg = n->kind == KF__NODE_OP ? p->group_of[kf__plan_buffer_node(p, id)] : -1;
        if (saved_input) {
            copied++;
        } else if (recomputes && !loaded) {
            recomputed++;
        } else if (wg >= 0 && p->groups[wg].result != id && kf__group_writes(&p->groups[wg], id)) {
            sides++;
        } else {
            kept++;
        }
    }
    if (values == 0 && saves == 0) {
        free(listed), free(bw), free(part_of), free(first_reader);
        return; /* backward operators alone (a graph of embedding_grad): nothing of a forward */
    }
    put(t, "\nbackward reads from forward: %u value%s, ", values, values == 1 ? "" : "s");
    put_bytes(t, bytes);
    put(t,
        "; %u kept where the forward writes them, %u side output%s of forward kernels, %u "
        "recomputed, %u copied (%u save dispatch%s)\n",
        kept, sides, sides == 1 ? "" : "s", recomputed, copied, saves, saves == 1 ? "" : "es");
    for (uint32_t part = 0; listed && part < parts; part++) {
        bool header = false;
        for (uint32_t id = 1; id < g->node_count; id++) {
            /* a value no forward node reads (attention's lse, written beside o for backward, a
             * node made after the forward's) belongs with its latest input */
            uint32_t reader = first_reader[id];
            for (uint32_t i = 0; !first_reader[id] && i < g->nodes[id].input_count; i++) {
                reader = g->nodes[id].inputs[i] > reader ? g->nodes[id].inputs[i] : reader;
            }
            reader = reader ? reader : id;
            if (!listed[id] || part_of[reader] != part) {
                continue;
            }
            if (!header) {
                put(t, "  ");
                put_part_name(t, g, bw, part_of, parts, part);
                put(t, ":\n");
                header = true;
            }
            const kf__node *n = &g->nodes[id];
            put(t, "    ");
            put_tensor(t, p, id);
            put(t, " (");
            put_bytes(t, kf_shape_elements(&n->shape) * (n->dtype == KF_DTYPE_F16 ? 2u : 4u));
            put(t, "): ");
            int32_t wg = n->kind == KF__NODE_OP ? p->group_of[kf__plan_buffer_node(p, id)] : -1;
            bool loaded = false;
            for (uint32_t d = 0; d < p->dispatch_count; d++) {
                loaded |= dispatch_is_backward(p, bw, d) && dispatch_reads(p, d, id) &&
                          p->groups[p->order[d]].recompute != id;
            }
            if (n->kind == KF__NODE_INPUT) {
                put(t,
                    "copied by save dispatch %u (it is overwritten in place); the copy is read "
                    "by dispatch",
                    first_save);
            } else if (!loaded) {
                put(t, "not written: recomputed by dispatch");
            } else if (wg >= 0 && p->groups[wg].result != id &&
                       kf__group_writes(&p->groups[wg], id)) {
                put(t, "a side output of dispatch %u (", dispatch_number(p, (uint32_t)wg));
                put_ops(t, p, &p->groups[wg]);
                put(t, "), no dispatch of its own; read by dispatch");
            } else if (wg >= 0) {
                put(t, "kept: dispatch %u writes it, read by dispatch",
                    dispatch_number(p, (uint32_t)wg));
            } else {
                put(t, "read by dispatch");
            }
            bool first = true;
            for (uint32_t d = 0; d < p->dispatch_count; d++) {
                if (dispatch_is_backward(p, bw, d) && dispatch_reads(p, d, id)) {
                    put(t, "%s %u", first ? "" : ",", d + 1);
                    first = false;
                }
            }
            put(t, "\n");
        }
    }
    free(listed);
    free(bw);
    free(part_of);
    free(first_reader);
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
                written |= kf__group_writes(&p->groups[grp->members[m]], c->slots[s]);
            }
            bool listed = false; /* a prologue's view binds what the root's input binds */
            for (uint32_t e = 0; e < s; e++) {
                listed |= c->slots[e] == c->slots[s];
            }
            if (kf__group_writes(grp, c->slots[s]) || written || listed) {
                continue;
            }
            put(&t, "%s", any ? ", " : "");
            put_tensor(&t, p, c->slots[s]);
            any = true;
        }
        put(&t, "%s\n", any ? "" : "(nothing)");
        put_strided(&t, p, grp);
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
    put_backward_reads(&t, p);
    if (t.failed) {
        free(t.buf);
        return NULL;
    }
    return t.buf;
}

kf_status kf_plan_dispatch_info_get(const kf_plan *p, uint32_t index, kf_plan_dispatch_info *out) {
    if (!p || !out || index >= p->dispatch_count) {
        if (p) {
            kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "kf_plan_dispatch_info_get: %s",
                                  !out ? "out is NULL" : "no such dispatch");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    memset(out, 0, sizeof *out);
    text t = {0};
    if (p->order[index] == UINT32_MAX) {
        snprintf(out->root, sizeof out->root, "save");
        put(&t, "activation save: ");
        for (uint32_t id = 0; id < p->graph->node_count; id++) {
            if (p->saved[id]) {
                put(&t, "%s", out->bytes ? ", " : "");
                put_node(&t, p, id);
                out->bytes += 2u * kf_buffer_size(p->saved[id]);
            }
        }
        out->grid[0] = p->dispatches[index].groups[0];
        out->grid[1] = p->dispatches[index].groups[1];
        out->grid[2] = p->dispatches[index].groups[2];
    } else {
        const kf__group *grp = &p->groups[p->order[index]];
        const kf__compiled *c = grp->compiled;
        if (grp->kind == KF__GROUP_HORIZONTAL) {
            put(&t, "horizontal: ");
            for (uint32_t m = 0; m < grp->member_count; m++) {
                put(&t, "%s", m ? "; " : "");
                put_group_line(&t, p, &p->groups[grp->members[m]]);
            }
        } else {
            put_group_line(&t, p, grp);
        }
        if (grp->root) {
            const kf__node *root = &p->graph->nodes[grp->root];
            snprintf(out->root, sizeof out->root, "%s", root->op->name);
            out->matmul = root->op->op_class == KF_OP_CLASS_MATMUL;
        }
        out->bytes = c ? c->bytes : 0;
        for (int k = 0; c && k < 3; k++) {
            out->grid[k] = c->grid[k];
        }
    }
    /* put_group_line ends each group with a newline: one line here */
    size_t n = 0;
    for (size_t i = 0; t.buf && i < t.len && n + 1 < sizeof out->label; i++) {
        if (t.buf[i] != '\n') {
            out->label[n++] = t.buf[i];
        }
    }
    out->label[n] = '\0';
    free(t.buf);
    return KF_OK;
}
