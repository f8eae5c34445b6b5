/* Reduction -> element-wise: a row reduction (softmax, norms, sum/mean/max, losses) with the
 * element-wise operators after it in its store phase: the reduction's kernel yields each output
 * element and the tail is composed onto it with kf_kernel_then. */
#include "fuse/rules/rule.h"

static kf__group *reduction_open(kf_plan *p, uint32_t node) {
    if (p->graph->nodes[node].op->op_class != KF_OP_CLASS_ROW_REDUCTION) {
        return NULL;
    }
    return kf__plan_open_group(p, &kf__rule_reduction_tail, KF__GROUP_PRODUCER, node);
}

static bool reduction_accepts(const kf_plan *p, const kf__group *grp, uint32_t node) {
    (void)grp;
    return kf__op_is_elementwise(p->graph->nodes[node].op);
}

static kf_kernel *reduction_build(kf_plan *p, kf__group *grp, kf__compiled *c) {
    return kf__build_rooted(p, grp, c, kf__root_kernel(p, grp));
}

static const char *reduction_explain(const kf_plan *p, const kf__group *grp) {
    (void)p;
    return grp->node_count ? "reduction -> element-wise" : "reduction";
}

const kf__fusion_rule kf__rule_reduction_tail = {
    .name = "reduction",
    .open = reduction_open,
    .accepts = reduction_accepts,
    .build = reduction_build,
    .explain = reduction_explain,
};
