/* Bias gradient (cuBLASLt's BGRAD): db = sum_leading(dY), the column sums of dY, written by a
 * kernel that reads every row of dY anyway, as its second output, instead of a kernel of its own
 * that reads dY again. The kernel is the operator's (kf_operator.kernel_column_sums): the weight
 * gradient dW = X^T dY of a linear layer (src/ops/column_sums.c), a norm's weight gradient
 * (NAME_grad_w, src/ops/norm.c). So a linear layer's dW and db are one dispatch, and a norm's
 * backward (dx; dw and db) two.
 *
 * A plan-wide pass (after prologues, before horizontal fusion): a group that is sum_leading(D)
 * alone (no tail, no prologue) becomes a side result (kf__group.sides) of the group rooted at an
 * operator reading D whose kernel_column_sums builds for D's input, when
 *   - that group does not read, directly or through others, the sum (no cycle);
 *   - dtypes agree and the kernel's bindings stay within the plan's budget (the root's inputs,
 *     the sums, its prologues' and epilogue's reads, out).
 * The result is deterministic: the sums are the kernel's own blocked sums in a fixed order, no
 * atomics. */
#include <stdlib.h>

#include "fuse/rules/rule.h"
#include "ops/ops_internal.h"

/* The root's kernel with the column sums of input `which`, or NULL. */
static kf_kernel *sums_kernel(const kf_plan *p, const kf__group *grp, uint32_t which) {
    const kf__node *root = &p->graph->nodes[grp->root];
    if (!root->op->kernel_column_sums) {
        return NULL;
    }
    kf_shape shapes[KF_NODE_MAX_INPUTS];
    for (uint32_t i = 0; i < root->input_count; i++) {
        shapes[i] = p->graph->nodes[root->inputs[i]].shape;
    }
    return root->op->kernel_column_sums(shapes, &root->params, root->dtype, which);
}

/* The root's kernel with the column sums of D (the first of the root's inputs that is D and
 * whose sums the kernel can take: matmul(dy, dy) reads it twice), or NULL. */
static kf_kernel *kernel_summing(const kf_plan *p, const kf__group *grp, uint32_t d) {
    const kf__node *root = &p->graph->nodes[grp->root];
    for (uint32_t i = 0; i < root->input_count; i++) {
        kf_kernel *k = root->inputs[i] == d ? sums_kernel(p, grp, i) : NULL;
        if (k && kf_kernel_status(k) == KF_OK) {
            return k;
        }
        kf_kernel_destroy(k);
    }
    return NULL;
}

static uint32_t bindings_of(const kf_plan *p, const kf__group *grp) {
    uint32_t count = kf__group_bindings(p, grp);
    for (uint32_t i = 0; i < KF_NODE_MAX_INPUTS; i++) {
        if (grp->prologue[i]) {
            count += p->groups[grp->prologue[i] - 1].read_count - 1;
        }
    }
    return count;
}

/* Whether group gi is sum_leading(D) alone, and then the node. */
static uint32_t lone_sum(const kf_plan *p, uint32_t gi) {
    const kf__group *grp = &p->groups[gi];
    if (grp->kind != KF__GROUP_PRODUCER || grp->absorbed || grp->node_count || grp->side_count ||
        kf__group_has_prologue(grp) || grp->result != grp->root) {
        return 0;
    }
    const kf__node *n = &p->graph->nodes[grp->root];
    return n->op == &kf__op_sum_leading ? grp->root : 0;
}

static void bias_grad_pass(kf_plan *p) {
    const kf_graph *g = p->graph;
    bool moved = false;
    for (uint32_t si = 0; si < p->group_count && p->status == KF_OK; si++) {
        uint32_t sum = lone_sum(p, si);
        if (!sum) {
            continue;
        }
        uint32_t d = g->nodes[sum].inputs[0];
        /* a group rooted at another reader of D whose kernel can write D's column sums */
        for (uint32_t id = 1; id < g->node_count; id++) {
            const kf__node *n = &g->nodes[id];
            if (id == sum || n->kind != KF__NODE_OP || p->group_of[id] < 0 ||
                n->dtype != g->nodes[sum].dtype) {
                continue;
            }
            uint32_t mi = (uint32_t)p->group_of[id];
            kf__group *mg = &p->groups[mi];
            if (mg->kind != KF__GROUP_PRODUCER || mg->root != id || mg->absorbed) {
                continue;
            }
            /* one sum per input: a second sum_leading of the same D is CSE's business */
            if (mg->side_count || bindings_of(p, mg) + 1 > p->max_storage_buffers) {
                continue;
            }
            kf_kernel *probe = kernel_summing(p, mg, d);
            bool fits = probe != NULL;
            kf_kernel_destroy(probe);
            if (!fits || kf__group_depends_on(p, mi, si)) {
                continue;
            }
            if (!kf__group_add_side(p, &p->groups[mi], sum)) {
                return;
            }
            p->groups[mi].fuser = &kf__rule_bias_grad;
            moved = true;
            break;
        }
    }
    if (moved) {
        kf__plan_settle_levels(p);
    }
}

static kf_kernel *bias_grad_build(kf_plan *p, kf__group *grp, kf__compiled *c) {
    kf_kernel *base = kernel_summing(p, grp, p->graph->nodes[grp->sides[0]].inputs[0]);
    if (!base) {
        kf__plan_fail(p, KF_ERROR_INTERNAL, "%s: no kernel with column sums",
                      p->graph->nodes[grp->root].op->name);
        return NULL;
    }
    return kf__build_rooted(p, grp, c, base);
}

static const char *bias_grad_explain(const kf_plan *p, const kf__group *grp) {
    bool mm = p->graph->nodes[grp->root].op->op_class == KF_OP_CLASS_MATMUL;
    if (kf__group_has_prologue(grp)) {
        return mm ? "matmul prologue + bias gradient" : "reduction prologue + bias gradient";
    }
    return mm ? "matmul + bias gradient" : "reduction + bias gradient";
}

const kf__fusion_rule kf__rule_bias_grad = {
    .name = "bias_grad",
    .pass = bias_grad_pass,
    .build = bias_grad_build,
    .explain = bias_grad_explain,
};
