/* Layout operators (transpose), and any other operator no rule before this one opens and that is
 * not element-wise: a group of its own. A transpose writes whole tiles through workgroup memory,
 * so nothing joins its store phase. */
#include "fuse/rules/rule.h"

static kf__group *layout_open(kf_plan *p, uint32_t node) {
    const kf_operator *op = p->graph->nodes[node].op;
    if (kf__op_is_elementwise(op) || op->view_index) {
        return NULL; /* views: read in place by the element-wise rule */
    }
    return kf__plan_open_group(p, &kf__rule_layout, KF__GROUP_PRODUCER, node);
}

static kf_kernel *layout_build(kf_plan *p, kf__group *grp, kf__compiled *c) {
    return kf__build_rooted(p, grp, c, kf__root_kernel(p, grp));
}

static const char *layout_explain(const kf_plan *p, const kf__group *grp) {
    (void)p;
    (void)grp;
    return "layout";
}

const kf__fusion_rule kf__rule_layout = {
    .name = "layout",
    .open = layout_open,
    .build = layout_build,
    .explain = layout_explain,
};
