/* Matmul epilogue: a matmul with the element-wise operators after it (bias, residual adds,
 * scales, activations, in any order) in its store phase: the matmul kernel yields each output
 * element and the tail is composed onto it with kf_kernel_then, as `matmul |> relu` by hand. */
#include "fuse/rules/rule.h"

static kf__group *matmul_open(kf_plan *p, uint32_t node) {
    if (p->graph->nodes[node].op->op_class != KF_OP_CLASS_MATMUL) {
        return NULL;
    }
    return kf__plan_open_group(p, &kf__rule_matmul_epilogue, KF__GROUP_PRODUCER, node);
}

static bool matmul_accepts(const kf_plan *p, const kf__group *grp, uint32_t node) {
    (void)grp;
    return kf__op_is_elementwise(p->graph->nodes[node].op);
}

/* Which matmul kernel runs (tiled, register-blocked, tuned, subgroup-matrix) is the operator's
 * choice (its kernel_choose hook); every one yields to the same store phase. */
static kf_kernel *matmul_build(kf_plan *p, kf__group *grp, kf__compiled *c) {
    return kf__build_rooted(p, grp, c, kf__root_kernel(p, grp));
}

static const char *matmul_explain(const kf_plan *p, const kf__group *grp) {
    (void)p;
    return grp->node_count ? "matmul epilogue" : "matmul";
}

const kf__fusion_rule kf__rule_matmul_epilogue = {
    .name = "matmul",
    .open = matmul_open,
    .accepts = matmul_accepts,
    .build = matmul_build,
    .explain = matmul_explain,
};
