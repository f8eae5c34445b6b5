/* Prologues: an element-wise group whose result is an input of a matmul or of a row reduction
 * runs in that kernel's loads of the input, composed with kf_kernel_prologue, instead of being
 * written to memory and read back: `matmul(gelu(x), w)`, `matmul(x * m, w)`, `softmax(x * s)`,
 * `rmsnorm(gelu(x), w)`, the backward matmul `(dY * gelu'(pre)) W^T` (cuBLASLt's DGELU). With
 * an epilogue too, the whole `matmul(gelu(x), w) |> add(b) |> relu` is one kernel.
 *
 * A plan-wide pass (after the groups and their levels, before horizontal fusion) moves such a
 * group into the consumer's group: the element-wise group turns DEAD but keeps its nodes and
 * reads, the consumer records it per input (kf__group.prologue) and becomes this rule's, which
 * builds it like any rooted group (kf__build_rooted composes the prologues into the root's kernel
 * before the epilogue) and names it. Legality:
 *   - the value has no other reader and is not a graph output. Recomputing it for the consumer
 *     while writing it for the others is never chosen: it is written anyway, reading it back
 *     costs the consumer no more bytes than recomputing it from the group's own reads (at least
 *     one tensor of its size), and a matmul would redo the arithmetic for each tile that loads
 *     the element;
 *   - the input is not an index input (cross-entropy's labels);
 *   - one of the group's reads has the value's size: the consumer's load of the input becomes a
 *     load of that read (the prologue's In), and the group's other reads become the kernel's
 *     own bindings, read at their broadcast index from the loaded element's index;
 *   - the kernel's bindings stay within the plan's budget (the root's inputs, each prologue's
 *     other reads, the epilogue's reads, out).
 * A group of views only (permute |> reshape: no arithmetic, so reading it in place twice redoes
 * nothing) may have several readers, if every one is a matmul or row-reduction input that takes
 * it: each reads the view in place, and nothing writes it. In a training graph that is the
 * attention output, read by the output projection and by its weight's gradient (docs/training.md:
 * the copy the views rule would make costs a dispatch and two tensors of traffic). */
#include <stdio.h>
#include <stdlib.h>

#include "fuse/rules/rule.h"

bool kf__group_has_prologue(const kf__group *grp) {
    for (uint32_t i = 0; i < KF_NODE_MAX_INPUTS; i++) {
        if (grp->prologue[i]) {
            return true;
        }
    }
    return false;
}

/* The bindings grp's kernel has with its prologues: kf__group_bindings, plus each prologue's reads
 * but its In (which the root's own input binding loads). */
static uint32_t bindings_with_prologues(const kf_plan *p, const kf__group *grp) {
    uint32_t count = kf__group_bindings(p, grp);
    for (uint32_t i = 0; i < KF_NODE_MAX_INPUTS; i++) {
        if (grp->prologue[i]) {
            /* a strided view (a permute) loads In's node at its own elements: a binding of the
             * stage's own besides the root's */
            const kf__group *pro = &p->groups[grp->prologue[i] - 1];
            count += pro->read_count - (kf__group_has_strided_view(p, pro) ? 0u : 1u);
        }
    }
    return count;
}

/* The value `in` a prologue of group ei (whose result is a) loads in place of a: one of its reads
 * of a's size; 0 when none is. */
static uint32_t prologue_in(const kf_plan *p, uint32_t ei, uint32_t a) {
    const kf__group *pro = &p->groups[ei];
    for (uint32_t r = 0; r < pro->read_count; r++) {
        const kf__node *rn = &p->graph->nodes[pro->reads[r]];
        if (kf_shape_elements(&rn->shape) == kf_shape_elements(&p->graph->nodes[a].shape)) {
            return pro->reads[r];
        }
    }
    return 0;
}

/* Whether root input x is a, or a reshape of a that aliases a's buffer (plan_free_views):
 * split-K's reshape of the attention output for its partial products. A reshape keeps the
 * linear order, so a's prologue, which yields a's element at the loaded index, yields it too. */
static bool reads_through_reshape(const kf_plan *p, uint32_t x, uint32_t a) {
    if (x == a) {
        return true;
    }
    if (kf__view_copies_asked()) {
        return false;
    }
    const kf__node *n = &p->graph->nodes[x];
    return n->kind == KF__NODE_OP && n->op->view_linear && n->input_count == 1 &&
           n->inputs[0] == a && p->alias_of[x] && !p->is_output[x];
}

/* Whether root input i of group grp may take a prologue of a shared views group. */
static bool takes_shared(const kf_plan *p, const kf__group *grp, uint32_t i) {
    const kf__node *root = &p->graph->nodes[grp->root];
    kf_op_class cls = root->op->op_class;
    return grp->kind == KF__GROUP_PRODUCER && !grp->prologue[i] && !grp->strided[i] &&
           (cls == KF_OP_CLASS_MATMUL || cls == KF_OP_CLASS_ROW_REDUCTION) &&
           !(root->op->index_inputs >> i & 1u);
}

/* A views-only group ei with several readers (its result a read by uses[a] root inputs of
 * matmul or row-reduction groups, directly or through a reshape aliasing a): a prologue of
 * every one of them, or of none. */
static void shared_views(kf_plan *p, uint32_t ei, uint32_t a) {
    const kf_graph *g = p->graph;
    uint32_t in = prologue_in(p, ei, a), found = 0;
    if (!in || !kf__group_is_views(p, &p->groups[ei])) {
        return;
    }
    /* a's uses: root inputs reading a, and reshapes of a each read only by such inputs */
    uint32_t *through = calloc(g->node_count, sizeof *through); /* reshape -> its root inputs */
    if (!through) {
        return;
    }
    for (uint32_t gi = 0; gi < p->group_count; gi++) {
        const kf__group *grp = &p->groups[gi];
        const kf__node *root = grp->root ? &g->nodes[grp->root] : NULL;
        for (uint32_t i = 0; root && i < root->input_count && i < KF_NODE_MAX_INPUTS; i++) {
            uint32_t x = root->inputs[i];
            if (!reads_through_reshape(p, x, a)) {
                continue;
            }
            if (!takes_shared(p, grp, i)) {
                free(through);
                return;
            }
            if (x == a) {
                found++;
            } else {
                through[x]++;
            }
        }
    }
    for (uint32_t x = 1; x < g->node_count; x++) {
        if (through[x]) {
            if (through[x] != p->uses[x]) {
                free(through);
                return; /* another reader of the reshape needs it in memory */
            }
            found++;
        }
    }
    free(through);
    if (found != p->uses[a]) {
        return; /* another reader (an element-wise tail) needs a in memory */
    }
    /* take them all, then undo all if a kernel's bindings exceed the budget */
    bool fits = true;
    for (uint32_t pass = 0; pass < 2; pass++) {
        for (uint32_t gi = 0; gi < p->group_count; gi++) {
            kf__group *grp = &p->groups[gi];
            const kf__node *root = grp->root ? &g->nodes[grp->root] : NULL;
            for (uint32_t i = 0; root && i < root->input_count && i < KF_NODE_MAX_INPUTS; i++) {
                if (!reads_through_reshape(p, root->inputs[i], a)) {
                    continue;
                }
                if (pass == 0) {
                    grp->prologue[i] = ei + 1;
                    grp->prologue_in[i] = in;
                } else if (!fits) {
                    grp->prologue[i] = 0;
                    grp->prologue_in[i] = 0;
                } else {
                    grp->fuser = &kf__rule_prologue;
                }
            }
            fits &= pass == 1 || !root || bindings_with_prologues(p, grp) <= p->max_storage_buffers;
        }
    }
    if (!fits) {
        return;
    }
    p->groups[ei].kind = KF__GROUP_DEAD; /* its nodes run in its readers' kernels now */
}

static void prologue_pass(kf_plan *p) {
    const kf_graph *g = p->graph;
    for (uint32_t gi = 0; gi < p->group_count; gi++) {
        kf__group *grp = &p->groups[gi];
        if (grp->kind != KF__GROUP_PRODUCER) {
            continue;
        }
        const kf__node *root = &g->nodes[grp->root];
        kf_op_class cls = root->op->op_class;
        if (cls != KF_OP_CLASS_MATMUL && cls != KF_OP_CLASS_ROW_REDUCTION) {
            continue;
        }
        for (uint32_t i = 0; i < root->input_count && i < KF_NODE_MAX_INPUTS; i++) {
            uint32_t a = root->inputs[i];
            const kf__node *an = &g->nodes[a];
            if (an->kind != KF__NODE_OP || p->group_of[a] < 0 || p->uses[a] == 0 ||
                p->is_output[a] || (root->op->index_inputs >> i & 1u)) {
                continue;
            }
            uint32_t ei = (uint32_t)p->group_of[a];
            const kf__group *pro = &p->groups[ei];
            if (pro->kind != KF__GROUP_ELEMENTWISE || pro->absorbed || pro->result != a) {
                continue;
            }
            if (p->uses[a] > 1) {
                shared_views(p, ei, a);
                grp = &p->groups[gi];
                continue;
            }
            uint32_t in = prologue_in(p, ei, a);
            if (!in) {
                continue;
            }
            grp->prologue[i] = ei + 1;
            grp->prologue_in[i] = in;
            if (bindings_with_prologues(p, grp) > p->max_storage_buffers) {
                grp->prologue[i] = 0; /* the value stays in memory */
                grp->prologue_in[i] = 0;
                continue;
            }
            p->groups[ei].kind = KF__GROUP_DEAD; /* its nodes run in grp's kernel now */
            grp->fuser = &kf__rule_prologue;
        }
    }
}

/* A prologue's stage: the nodes of the element-wise group composed into the loads of the root's
 * input i, In being the value loaded there; its other reads become the stage's own bindings,
 * appended to c's slots in order. */
static kf_kernel *prologue_stage(kf_plan *p, kf__group *grp, uint32_t i, kf__compiled *c) {
    const kf_graph *g = p->graph;
    kf__group view = p->groups[grp->prologue[i] - 1];
    view.kind = KF__GROUP_ELEMENTWISE;
    view.root = grp->prologue_in[i]; /* the emitter gives In for it */
    const kf__node *res = &g->nodes[view.result], *in = &g->nodes[view.root];
    /* named by what it is, like every planned kernel, so equal groups share a pipeline */
    kf_kernel_desc desc = {.name = "prologue",
                           .input = kf__scalar_type_of(in->dtype),
                           .output = kf__scalar_type_of(res->dtype)};
    kf_kernel *k = kf_kernel_create(&desc);
    kf__emit s;
    if (!k || !kf__emit_init(&s, p, k, &view, c)) {
        kf_kernel_destroy(k);
        return NULL;
    }
    c->read_count = 0; /* the stage's bindings are its own, even for a node read elsewhere */
    s.in = kf_kernel_input(k);
    s.index = kf_kernel_index(k);
    kf_val v = kf__emit_elementwise(&s);
    kf__emit_release(&s);
    if (res->dtype == KF_DTYPE_F16) {
        v = kf_cast(k, kf_type_scalar(KF_SCALAR_F16), v);
    }
    kf_kernel_yield(k, v, s.index);
    return k;
}

/* base (consumed) with every prologue composed; the slots after the root's inputs are the
 * stages' reads. NULL out of memory; otherwise check the kernel's status. */
static kf_kernel *compose_all(kf_plan *p, kf__group *grp, kf__compiled *c, kf_kernel *base) {
    const kf__node *root = &p->graph->nodes[grp->root];
    kf_kernel *k = base;
    for (uint32_t i = 0; i < root->input_count && k && kf_kernel_status(k) == KF_OK; i++) {
        if (!grp->prologue[i]) {
            continue;
        }
        c->slots[i] = grp->prologue_in[i];
        kf_binding_info info = {0};
        char binding[KF_NAME_MAX + 16] = "";
        if (kf_kernel_binding_info(k, i, &info) == KF_OK) {
            snprintf(binding, sizeof binding, "%s", info.name);
        }
        kf_kernel *stage = prologue_stage(p, grp, i, c);
        kf_kernel *r = stage ? kf_kernel_prologue(k, binding, stage) : NULL;
        kf_kernel_destroy(stage);
        kf_kernel_destroy(k);
        k = r;
    }
    c->read_count = 0; /* the epilogue's bindings are its own too */
    return k;
}

kf_kernel *kf__compose_prologues(kf_plan *p, kf__group *grp, kf__compiled *c, kf_kernel *base) {
    const kf_graph *g = p->graph;
    const kf__node *root = &g->nodes[grp->root];
    kf_kernel *k = compose_all(p, grp, c, base);
    if (k && kf_kernel_status(k) != KF_OK && kf_kernel_status(k) != KF_ERROR_OUT_OF_MEMORY) {
        /* A chosen kernel that loads an input otherwise than with plain loads (straight into
         * subgroup matrices: KF_ERROR_UNSUPPORTED): the operator's own kernel loads it plainly.
         * If that fails too, its error names the group. */
        kf_kernel_destroy(k);
        c->slot_count = root->input_count;
        for (uint32_t i = 0; i < root->input_count; i++) {
            c->slots[i] = kf__plan_buffer_node(p, kf__group_input_node(p, grp, i));
        }
        kf_shape shapes[KF_NODE_MAX_INPUTS];
        for (uint32_t i = 0; i < root->input_count; i++) {
            shapes[i] = g->nodes[root->inputs[i]].shape;
        }
        kf_dtype dtype = kf__node_kernel_dtype(g, root);
        kf_kernel *own =
            kf__group_has_strided(grp)
                ? root->op->kernel_strided(p->ctx, shapes, &root->params, dtype, grp->layout, false)
                : root->op->kernel_forward(shapes, &root->params, dtype);
        k = own ? compose_all(p, grp, c, own) : NULL;
    }
    if (!k) {
        kf__plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory composing prologues");
        return NULL;
    }
    if (kf_kernel_status(k) != KF_OK) {
        kf__plan_fail(p, kf_kernel_status(k), "%s prologue: %s", root->op->name,
                      kf_kernel_error(k));
        kf_kernel_destroy(k);
        return NULL;
    }
    return k;
}

static kf_kernel *prologue_build(kf_plan *p, kf__group *grp, kf__compiled *c) {
    return kf__build_rooted(p, grp, c, kf__root_kernel(p, grp));
}

static const char *prologue_explain(const kf_plan *p, const kf__group *grp) {
    bool mm = p->graph->nodes[grp->root].op->op_class == KF_OP_CLASS_MATMUL;
    if (grp->node_count) {
        return mm ? "matmul prologue + epilogue" : "reduction prologue + tail";
    }
    return mm ? "matmul prologue" : "reduction prologue";
}

const kf__fusion_rule kf__rule_prologue = {
    .name = "prologue",
    .pass = prologue_pass,
    .build = prologue_build,
    .explain = prologue_explain,
};
