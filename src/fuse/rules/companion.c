/* A companion as a second output: an operator's result that another operator's kernel computes
 * on the way (kf_operator.companion: attention's row statistics, attention_lse, which the
 * forward's online softmax has in registers at its end) is written by that kernel
 * (kernel_with_companion) instead of a kernel of its own that walks the keys again. So in a
 * training graph the forward writes o and lse in one dispatch, and attention's backward starts
 * from them (attention_grad_pack) rather than from a second forward pass; a graph without the
 * backward has no attention_lse and the forward writes o alone.
 *
 * A plan-wide pass (after prologues, before horizontal fusion): a group that is the companion
 * C(x...) alone (no tail, no prologue, no side) becomes a side result (kf__group.sides) of the
 * group rooted at F(x...) where F.companion is C's operator, when F reads the same nodes with
 * the same params and dtype, F's group has no side and no prologue, does not read C's result
 * (no cycle), and its kernel's bindings stay within the plan's budget. */
#include <string.h>

#include "fuse/rules/rule.h"
#include "ops/ops_internal.h"

/* Whether group gi is one operator node alone, and then that node. */
static uint32_t lone_root(const kf_plan *p, uint32_t gi) {
    const kf__group *grp = &p->groups[gi];
    if (grp->kind != KF__GROUP_PRODUCER || grp->absorbed || grp->node_count || grp->side_count ||
        kf__group_has_prologue(grp) || grp->result != grp->root) {
        return 0;
    }
    return grp->root;
}

/* Whether node f computes node c on the way: f's operator names c's as its companion, and both
 * read the same nodes with the same params, their kernels taking one dtype (attention_lse's
 * output is f32 whatever it is). */
static bool computes_on_the_way(const kf_graph *g, uint32_t f, uint32_t c) {
    const kf__node *nf = &g->nodes[f], *nc = &g->nodes[c];
    if (nf->kind != KF__NODE_OP || !nf->op->companion || nf->op->companion != nc->op ||
        !nf->op->kernel_with_companion ||
        kf__node_kernel_dtype(g, nf) != kf__node_kernel_dtype(g, nc) ||
        nf->input_count != nc->input_count ||
        memcmp(&nf->params, &nc->params, sizeof nf->params) != 0) {
        return false;
    }
    for (uint32_t i = 0; i < nf->input_count; i++) {
        if (nf->inputs[i] != nc->inputs[i]) {
            return false;
        }
    }
    return true;
}

static kf_kernel *companion_kernel(kf_plan *p, const kf__group *grp) {
    const kf__node *root = &p->graph->nodes[grp->root];
    kf_shape shapes[KF_NODE_MAX_INPUTS];
    for (uint32_t i = 0; i < root->input_count; i++) {
        shapes[i] = p->graph->nodes[root->inputs[i]].shape;
    }
    kf_dtype dtype = kf__node_kernel_dtype(p->graph, root);
    if (kf__group_has_strided(grp)) { /* q, k, v read in place (strided.c) */
        return root->op->kernel_strided(p->ctx, shapes, &root->params, dtype, grp->layout, true);
    }
    return root->op->kernel_with_companion(p->ctx, shapes, &root->params, dtype);
}

static void companion_pass(kf_plan *p) {
    const kf_graph *g = p->graph;
    bool moved = false;
    for (uint32_t ci = 0; ci < p->group_count && p->status == KF_OK; ci++) {
        uint32_t c = lone_root(p, ci);
        if (!c) {
            continue;
        }
        for (uint32_t fi = 0; fi < p->group_count; fi++) {
            kf__group *fg = &p->groups[fi];
            if (fi == ci || fg->kind != KF__GROUP_PRODUCER || fg->absorbed || fg->side_count ||
                kf__group_has_prologue(fg) || !computes_on_the_way(g, fg->root, c) ||
                kf__group_bindings(p, fg) + 1 > p->max_storage_buffers ||
                kf__group_depends_on(p, fi, ci)) {
                continue;
            }
            kf_kernel *probe = companion_kernel(p, fg);
            bool fits = probe && kf_kernel_status(probe) == KF_OK;
            kf_kernel_destroy(probe);
            if (!fits) {
                continue;
            }
            if (!kf__group_add_side(p, &p->groups[fi], c)) {
                return;
            }
            p->groups[fi].fuser = &kf__rule_companion;
            moved = true;
            break;
        }
    }
    if (moved) {
        kf__plan_settle_levels(p);
    }
}

static kf_kernel *companion_build(kf_plan *p, kf__group *grp, kf__compiled *c) {
    kf_kernel *base = companion_kernel(p, grp);
    if (!base) {
        kf__plan_fail(p, KF_ERROR_INTERNAL, "%s: no kernel with its companion",
                      p->graph->nodes[grp->root].op->name);
        return NULL;
    }
    return kf__build_rooted(p, grp, c, base);
}

static const char *companion_explain(const kf_plan *p, const kf__group *grp) {
    (void)p, (void)grp;
    return "reduction + second output";
}

const kf__fusion_rule kf__rule_companion = {
    .name = "companion",
    .pass = companion_pass,
    .build = companion_build,
    .explain = companion_explain,
};
