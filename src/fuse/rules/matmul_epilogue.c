/* Matmul epilogue: a matmul with the element-wise operators after it (bias, residual adds,
 * scales, activations, in any order) in its store phase: the matmul kernel yields each output
 * element and the tail is composed onto it with kf_kernel_then, as `matmul |> relu` by hand. */
#include "fuse/rules/rule.h"
#include "ops/matmul_blocked.h"
#include "ops/matmul_sgmat.h"

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

static kf_kernel *matmul_build(kf_plan *p, kf__group *grp, kf__compiled *c) {
    const kf_graph *g = p->graph;
    const kf__node *root = &g->nodes[grp->root];
    kf_shape shapes[KF_NODE_MAX_INPUTS];
    for (uint32_t i = 0; i < root->input_count; i++) {
        shapes[i] = g->nodes[root->inputs[i]].shape;
    }
    kf_kernel *base = NULL;
    if (root->dtype == KF_DTYPE_F32 && !root->params.transpose_a && !root->params.transpose_b) {
        /* A tile the autotuner measured on this adapter (kf_matmul_tune) beats the built-in
         * choice; same bindings, same store phase. */
        uint32_t m = shapes[0].dims[0], k = shapes[0].dims[1], n = shapes[1].dims[1];
        const kf__mm_config *tuned = kf__matmul_config_for(p->ctx, m, k, n);
        if (tuned && (uint64_t)m * n >= 64u * 64u) {
            base = kf__matmul_blocked(m, k, n, tuned);
        }
    }
    if (root->dtype == KF_DTYPE_F16 && !root->params.transpose_a && !root->params.transpose_b) {
        /* Tensor cores where the device has subgroup matrices ($KF_NO_SGMAT=1: never); same
         * bindings, same store phase. */
        base =
            kf__matmul_sgmat_for(p->ctx, shapes[0].dims[0], shapes[0].dims[1], shapes[1].dims[1]);
    }
    if (!base) {
        base = kf__root_kernel(p, grp);
    }
    return kf__build_rooted(p, grp, c, base);
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
