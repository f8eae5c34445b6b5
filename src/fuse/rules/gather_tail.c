/* Gather -> element-wise: an operator that picks rows by integer ids (embedding: table[ids],
 * and its gradient's sums by id) with the element-wise operators after it in its store phase:
 * a GPT's token embedding plus its position embedding, wte[x] + wpe, in one dispatch instead of
 * a gather and an add (one write and one read of the activations fewer). Such a kernel yields
 * each output element at its index from an invocation of its own, as a matmul's does, so the
 * tail is composed onto it with kf_kernel_then; a transpose, which writes tiles through
 * workgroup memory, stays with the layout rule. */
#include "fuse/rules/rule.h"

static kf__group *gather_open(kf_plan *p, uint32_t node) {
    const kf_operator *op = p->graph->nodes[node].op;
    if (op->op_class != KF_OP_CLASS_LAYOUT || !op->index_inputs || op->view_index) {
        return NULL;
    }
    return kf__plan_open_group(p, &kf__rule_gather_tail, KF__GROUP_PRODUCER, node);
}

/* Element-wise operators, and reshapes (a linear view: the element's index is the same), which
 * the GPT's sum of embeddings goes through ([B, T, C] as [B, T*C] to broadcast the position
 * table, and back). */
static bool gather_accepts(const kf_plan *p, const kf__group *grp, uint32_t node) {
    (void)grp;
    const kf_operator *op = p->graph->nodes[node].op;
    return kf__op_is_elementwise(op) || (op->view_index && op->view_linear);
}

static kf_kernel *gather_build(kf_plan *p, kf__group *grp, kf__compiled *c) {
    return kf__build_rooted(p, grp, c, kf__root_kernel(p, grp));
}

static const char *gather_explain(const kf_plan *p, const kf__group *grp) {
    (void)p;
    return grp->node_count ? "gather -> element-wise" : "gather";
}

const kf__fusion_rule kf__rule_gather_tail = {
    .name = "gather",
    .open = gather_open,
    .accepts = gather_accepts,
    .build = gather_build,
    .explain = gather_explain,
};
