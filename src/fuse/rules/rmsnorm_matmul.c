/* rmsnorm into matmul: `matmul(rmsnorm(x, g), w)` (with any epilogue) is one kernel that never
 * writes the normed tensor. Since
 *
 *   rmsnorm(x, g) w = diag(r) (x diag(g) w),   r_i = 1 / sqrt(mean_k x_ik^2 + eps),
 *
 * the product runs on the raw x: the gain scales w's rows as the kernel stages them, and r_i is
 * accumulated during the K loop from the same a tiles the matmul loads (the tiled kernel sums
 * the squares from workgroup memory, the register-blocked one as it stages a's vec4s there),
 * then scales the row in the store phase, before the epilogue
 * (src/ops/matmul_rownorm.h). Against rmsnorm then matmul this drops a dispatch and 2 M K
 * elements of traffic (the normed tensor written and read back); r costs nothing. A row
 * statistics kernel first (r written, M values) would keep the dispatch and still read x twice,
 * so the K-loop sum is what this rule does.
 *
 * A plan-wide pass after prologues. Legal when
 *   - the norm has no bias (rmsnorm(x, g, b) w would need b w added per column) and is a group of
 *     its own (no tail, no prologue of its own, no side), not an output, read by nothing but this
 *     matmul: a second reader needs the normed tensor in memory anyway, and then the matmul
 *     reading it costs the same bytes as reading x. (In a training graph the weight gradient
 *     h^T dY reads it too; see docs/fusion.md for what that leaves.)
 *   - the matmul reads it as a, not transposed, with b one matrix (a batch folds into the rows),
 *     no prologue and no side, in f32 or f16, and is not an f16 product the matmul runs on
 *     subgroup matrices (kf__matmul_rownorm_fits: tensor cores are worth more than the bytes);
 *   - the kernel stays within the binding budget (x, w, the gain, the epilogue's reads, out).
 * The matmul's group records the norm (kf__group.row_norm) and reads x and g; the norm's group
 * turns DEAD. kf_plan_verify evaluates the group as rmsnorm then matmul then the epilogue, from
 * the x, g and w the kernel read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse/rules/rule.h"
#include "ops/matmul_rownorm.h"
#include "ops/ops_internal.h"

static bool push_read(kf_plan *p, kf__group *grp, uint32_t id) {
    for (uint32_t i = 0; i < grp->read_count; i++) {
        if (grp->reads[i] == id) {
            return true;
        }
    }
    if (grp->read_count == grp->read_capacity) {
        uint32_t cap = grp->read_capacity ? grp->read_capacity * 2 : 8;
        uint32_t *grown = realloc(grp->reads, sizeof *grown * cap);
        if (!grown) {
            kf__plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory planning rmsnorm into matmul");
            return false;
        }
        grp->reads = grown;
        grp->read_capacity = cap;
    }
    grp->reads[grp->read_count++] = id;
    return true;
}

/* The norm node h the matmul group gi could fold in, or 0. */
static uint32_t foldable_norm(const kf_plan *p, uint32_t gi) {
    const kf_graph *g = p->graph;
    const kf__group *grp = &p->groups[gi];
    if (grp->kind != KF__GROUP_PRODUCER || grp->fuser != &kf__rule_matmul_epilogue ||
        grp->absorbed || grp->side_count || grp->recompute || grp->row_norm ||
        kf__group_has_prologue(grp)) {
        return 0;
    }
    const kf__node *mm = &g->nodes[grp->root];
    if (mm->op->op_class != KF_OP_CLASS_MATMUL || mm->op->grad_of || mm->input_count != 2 ||
        mm->params.transpose_a) {
        return 0;
    }
    uint32_t h = mm->inputs[0];
    const kf__node *hn = &g->nodes[h];
    if (hn->kind != KF__NODE_OP || hn->op != &kf__op_rmsnorm || hn->params.has_bias ||
        p->uses[h] != 1 || p->is_output[h] || p->group_of[h] < 0 || hn->dtype != mm->dtype) {
        return 0;
    }
    const kf__group *hg = &p->groups[p->group_of[h]];
    if (hg->kind != KF__GROUP_PRODUCER || hg->root != h || hg->result != h || hg->node_count ||
        hg->side_count || hg->absorbed || hg->recompute || kf__group_has_prologue(hg)) {
        return 0;
    }
    kf_shape shapes[2] = {hn->shape, g->nodes[mm->inputs[1]].shape};
    if (!kf__matmul_rownorm_fits(p->ctx, shapes, &mm->params, mm->dtype)) {
        return 0;
    }
    /* x takes a's binding; the gain is one more */
    uint32_t gain = hn->params.has_weight ? 1u : 0u;
    if (kf__group_bindings(p, grp) + gain > p->max_storage_buffers) {
        return 0;
    }
    return h;
}

static void rmsnorm_matmul_pass(kf_plan *p) {
    const kf_graph *g = p->graph;
    for (uint32_t gi = 0; gi < p->group_count && p->status == KF_OK; gi++) {
        uint32_t h = foldable_norm(p, gi);
        if (!h) {
            continue;
        }
        const kf__node *hn = &g->nodes[h];
        kf__group *grp = &p->groups[gi];
        /* what the kernel reads instead of h: levels and dependencies follow them */
        for (uint32_t i = 0; i < hn->input_count && p->status == KF_OK; i++) {
            push_read(p, grp, hn->inputs[i]);
        }
        if (p->status != KF_OK) {
            return;
        }
        grp->row_norm = h;
        grp->fuser = &kf__rule_rmsnorm_matmul;
        snprintf(grp->rule, sizeof grp->rule, "%s", kf__rule_rmsnorm_matmul.name);
        p->groups[p->group_of[h]].kind = KF__GROUP_DEAD; /* computed in grp's kernel now */
    }
    kf__plan_settle_levels(p);
}

static kf_kernel *rmsnorm_matmul_build(kf_plan *p, kf__group *grp, kf__compiled *c) {
    const kf_graph *g = p->graph;
    const kf__node *mm = &g->nodes[grp->root];
    const kf__node *hn = &g->nodes[grp->row_norm];
    kf_shape shapes[2] = {hn->shape, g->nodes[mm->inputs[1]].shape};
    const kf__param *eps = kf__param_find(hn->op, "eps");
    kf__mm_rownorm rn = {.eps = eps ? (float)kf__param_value(&hn->params, eps) : 1e-5f,
                         .has_gain = hn->params.has_weight};
    kf_kernel *base = kf__matmul_rownorm_kernel(p->ctx, shapes, &mm->params, mm->dtype, &rn);
    if (!base) {
        kf__plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "rmsnorm into matmul: no kernel");
        return NULL;
    }
    kf_kernel *k = kf__build_rooted(p, grp, c, base);
    if (!k) {
        return NULL;
    }
    /* kf__build_rooted bound the root's inputs (h, w) first: the kernel's a loads x, and its
     * gain binding follows b, before the epilogue's */
    c->slots[0] = kf__plan_buffer_node(p, hn->inputs[0]);
    if (rn.has_gain) {
        if (!kf__compiled_add_slot(p, c, hn->inputs[1])) {
            kf_kernel_destroy(k);
            return NULL;
        }
        uint32_t gain = c->slots[c->slot_count - 1];
        memmove(&c->slots[3], &c->slots[2], sizeof *c->slots * (c->slot_count - 3));
        c->slots[2] = gain;
    }
    return k;
}

static const char *rmsnorm_matmul_explain(const kf_plan *p, const kf__group *grp) {
    (void)p;
    return grp->node_count ? "rmsnorm into matmul + epilogue" : "rmsnorm into matmul";
}

const kf__fusion_rule kf__rule_rmsnorm_matmul = {
    .name = "rmsnorm matmul",
    .pass = rmsnorm_matmul_pass,
    .build = rmsnorm_matmul_build,
    .explain = rmsnorm_matmul_explain,
};
