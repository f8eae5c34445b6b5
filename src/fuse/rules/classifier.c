/* Fused classifier (llm.c's): a loss and its gradient in one kernel. For loss =
 * cross_entropy(logits, labels), autodiff adds dlogits = cross_entropy_grad(logits, labels, dy)
 * with dy = broadcast_to(1, loss), a constant; both read the same logits and each computes every
 * row's max and sum of exp. The forward operator's kernel_with_grad computes both in one pass
 * (dlogits = (softmax - onehot) / rows * dy), one dispatch instead of two, and the gradient no
 * longer waits for the loss.
 *
 * A plan-wide pass (after prologues, before the bias gradient, which may then take the column
 * sums of dlogits into the dW matmul that reads them): a group that is a backward operator G
 * alone (no tail; a prologue on dy at most) becomes a side result (kf__group.sides) of the group
 * rooted at the forward node F it differentiates, when
 *   - G reads exactly F's inputs (with F's params) and then dy;
 *   - dy is a constant: an element-wise chain reading nothing but scalars and shape-only inputs
 *     (broadcast_to's like), either G's prologue or a group of its own that nothing else reads.
 *     It is evaluated by the CPU specs when the plan is built and baked into the kernel; its
 *     nodes become the group's side inputs, so verification evaluates them as well;
 *   - F's kernel_with_grad builds for these shapes (cross_entropy: up to
 *     KF__CLASSIFIER_MAX_LOGITS logits, where one workgroup is no slower than two dispatches);
 *   - F's group (its tail, a scaled loss, composes as ever) stays within the binding budget. */
#include <stdlib.h>
#include <string.h>

#include "fuse/rules/rule.h"
#include "ops/ops_internal.h"

/* The element-wise group computing dy for G (G's prologue on its dy input, or dy's own group
 * when only G reads it), or NULL. */
static kf__group *dy_group(const kf_plan *p, const kf__group *gg, uint32_t dy_index) {
    uint32_t dy = p->graph->nodes[gg->root].inputs[dy_index];
    if (gg->prologue[dy_index]) {
        return &p->groups[gg->prologue[dy_index] - 1];
    }
    int32_t di = p->group_of[dy];
    if (di < 0 || p->uses[dy] != 1 || p->is_output[dy]) {
        return NULL;
    }
    kf__group *grp = &p->groups[di];
    bool lone = grp->kind == KF__GROUP_ELEMENTWISE && !grp->absorbed && grp->result == dy;
    return lone ? grp : NULL;
}

/* The value of the element-wise group dg when it reads nothing but scalars and shape-only
 * inputs (a constant; *value its first element), by the CPU specs. */
static bool constant_value(const kf_plan *p, const kf__group *dg, float *value) {
    const kf_graph *g = p->graph;
    kf_tensor **t = calloc(dg->node_count ? dg->node_count : 1, sizeof *t);
    kf_tensor *scratch[KF_NODE_MAX_INPUTS] = {0};
    bool ok = t != NULL;
    for (uint32_t i = 0; ok && i < dg->node_count; i++) {
        const kf__node *n = &g->nodes[dg->nodes[i]];
        const kf_tensor *in[KF_NODE_MAX_INPUTS] = {0};
        for (uint32_t j = 0; ok && j < n->input_count; j++) {
            uint32_t a = n->inputs[j];
            const kf__node *an = &g->nodes[a];
            for (uint32_t q = 0; q < i && !in[j]; q++) {
                in[j] = dg->nodes[q] == a ? t[q] : NULL;
            }
            if (in[j]) {
                continue;
            }
            bool shape_only = (n->op->shape_inputs >> j & 1u) != 0;
            ok = an->kind == KF__NODE_SCALAR || shape_only;
            if (ok) {
                /* a scalar as a tensor of its shape; a shape-only input's values are never read */
                ok = kf_tensor_constant(&an->shape, an->kind == KF__NODE_SCALAR ? an->scalar : 0.0f,
                                        &scratch[j]) == KF_OK;
                in[j] = scratch[j];
            }
        }
        ok = ok && kf_tensor_create(&n->shape, &t[i]) == KF_OK &&
             n->op->spec_forward(in, &n->params, t[i]) == KF_OK;
        for (uint32_t j = 0; j < KF_NODE_MAX_INPUTS; j++) {
            kf_tensor_destroy(scratch[j]);
            scratch[j] = NULL;
        }
    }
    if (ok && dg->node_count && kf_tensor_size(t[dg->node_count - 1]) >= 1) {
        *value = t[dg->node_count - 1]->data[0];
    } else {
        ok = false;
    }
    for (uint32_t i = 0; t && i < dg->node_count; i++) {
        kf_tensor_destroy(t[i]);
    }
    free(t);
    return ok;
}

/* F's kernel with the gradient G computes, dy baked in; NULL where F declines. */
static kf_kernel *fused_kernel(const kf_plan *p, const kf__node *f, const kf__node *gn, float dy) {
    if (!f->op->kernel_with_grad) {
        return NULL;
    }
    kf_shape shapes[KF_NODE_MAX_INPUTS];
    for (uint32_t i = 0; i < f->input_count; i++) {
        shapes[i] = p->graph->nodes[f->inputs[i]].shape;
    }
    return f->op->kernel_with_grad(shapes, &f->params, f->dtype, gn->op->grad_input, dy);
}

/* Whether backward node gn differentiates forward node f: f's inputs and params, then dy. */
static bool differentiates(const kf__node *gn, const kf__node *f) {
    if (f->kind != KF__NODE_OP || gn->op->grad_of != f->op ||
        gn->input_count != f->input_count + 1 || gn->dtype != f->dtype) {
        return false;
    }
    for (uint32_t i = 0; i < f->input_count; i++) {
        if (gn->inputs[i] != f->inputs[i]) {
            return false;
        }
    }
    return memcmp(&gn->params, &f->params, sizeof f->params) == 0;
}

static void classifier_pass(kf_plan *p) {
    const kf_graph *g = p->graph;
    bool moved = false;
    for (uint32_t gi = 0; gi < p->group_count && p->status == KF_OK; gi++) {
        kf__group *gg = &p->groups[gi];
        if (gg->kind != KF__GROUP_PRODUCER || gg->absorbed || gg->node_count || gg->side_count ||
            gg->result != gg->root || !g->nodes[gg->root].op->grad_of) {
            continue;
        }
        const kf__node *gn = &g->nodes[gg->root];
        uint32_t dy_index = gn->input_count - 1;
        bool other_prologue = false;
        for (uint32_t i = 0; i < dy_index; i++) {
            other_prologue |= gg->prologue[i] != 0;
        }
        /* the forward node: a reader of G's first input with G's inputs and params */
        uint32_t fid = 0;
        for (uint32_t id = 1; id < g->node_count && !fid && !other_prologue; id++) {
            fid = id != gg->root && differentiates(gn, &g->nodes[id]) ? id : 0;
        }
        int32_t fi = fid ? p->group_of[fid] : -1;
        if (fi < 0) {
            continue;
        }
        kf__group *fg = &p->groups[fi];
        kf__group *dg = dy_group(p, gg, dy_index);
        float dy = 0.0f;
        if (fg->kind != KF__GROUP_PRODUCER || fg->root != fid || fg->absorbed || fg->side_count ||
            kf__group_has_prologue(fg) || !dg || !constant_value(p, dg, &dy) ||
            kf__group_bindings(p, fg) + 1 > p->max_storage_buffers) {
            continue;
        }
        kf_kernel *probe = fused_kernel(p, &g->nodes[fid], gn, dy);
        bool fits = probe && kf_kernel_status(probe) == KF_OK;
        kf_kernel_destroy(probe);
        if (!fits) {
            continue;
        }
        /* dy's nodes run in registers now: the group computing them (a prologue, already DEAD,
         * or a group of its own) no longer writes them */
        uint32_t di = (uint32_t)(dg - p->groups);
        for (uint32_t i = 0; i < dg->node_count; i++) {
            if (!kf__group_add_side_input(p, &p->groups[fi], p->groups[di].nodes[i])) {
                return;
            }
        }
        p->groups[di].kind = KF__GROUP_DEAD;
        if (!kf__group_add_side(p, &p->groups[fi], gg->root)) {
            return;
        }
        p->groups[fi].fuser = &kf__rule_classifier;
        moved = true;
    }
    if (moved) {
        kf__plan_settle_levels(p);
    }
}

/* dy as the side inputs compute it (they read only scalars and shape-only inputs). */
static bool side_input_value(const kf_plan *p, const kf__group *grp, float *dy) {
    kf__group view = {.kind = KF__GROUP_ELEMENTWISE,
                      .nodes = grp->side_inputs,
                      .node_count = grp->side_input_count};
    return constant_value(p, &view, dy);
}

static kf_kernel *classifier_build(kf_plan *p, kf__group *grp, kf__compiled *c) {
    const kf__node *f = &p->graph->nodes[grp->root];
    const kf__node *gn = &p->graph->nodes[grp->sides[0]];
    float dy = 0.0f;
    kf_kernel *base = side_input_value(p, grp, &dy) ? fused_kernel(p, f, gn, dy) : NULL;
    if (!base) {
        kf__plan_fail(p, KF_ERROR_INTERNAL, "%s: no kernel with its gradient", f->op->name);
        return NULL;
    }
    return kf__build_rooted(p, grp, c, base);
}

static const char *classifier_explain(const kf_plan *p, const kf__group *grp) {
    (void)p;
    (void)grp;
    return "loss + gradient";
}

const kf__fusion_rule kf__rule_classifier = {
    .name = "classifier",
    .pass = classifier_pass,
    .build = classifier_build,
    .explain = classifier_explain,
};
