/* Strided views read in place: a group of views only (slice, reshape, permute) whose result is
 * a strided view of the one tensor it reads (element e at offset + sum_k i_k stride_k of it) is
 * not copied when every reader is an input its kernel can read through such a layout
 * (kf_operator.kernel_strided): each reader binds the view's source in the input's place and
 * folds the layout into its index math. The GPT's q, k and v, slices of the qkv product
 * reshaped to [B, T, H, D] and permuted to [B, H, T, D], are read so by attention's forward and
 * by its backward kernels (the copy cost a dispatch and two tensors of traffic, and each reader
 * reads the same bytes either way).
 *
 * A plan-wide pass, before prologues and companions. Legality, for a views group with result a:
 *   - it reads one tensor, its nodes a chain from it to a, each a strided view of the one
 *     before (kf__view_strided: a reshape that would need a copy, a concat or a slice_grad is
 *     not), of a's dtype, and a is not a graph output;
 *   - every use of a is an input of a root in that root's strided_inputs, with no prologue
 *     there; any other reader (an element-wise tail, a matmul) keeps the copy, as does one
 *     whose kernel for the layouts refuses them (attention's subgroup-matrix kernels, forward
 *     and backward, load q, k and v row-major): the view is materialised where a kernel cannot
 *     read it.
 * The views group turns DEAD but keeps its nodes and its read: kf_plan_verify evaluates them
 * before the root, as a prologue's (kf__group.strided). $KF_VIEW_COPIES=1 turns the rule off,
 * and the prologue rule's reach through a reshape with it (the benches' before). */
#include "fuse/rules/rule.h"

#include <stdlib.h>
#include <string.h>

#include "ops/ops_internal.h"

/* The layout of views group grp's result over its one read: false where it is not a strided
 * view of it. */
static bool views_layout(const kf_plan *p, const kf__group *grp, kf__strided *l) {
    const kf_graph *g = p->graph;
    if (grp->read_count != 1 || !grp->node_count) {
        return false;
    }
    uint32_t from = grp->reads[0];
    const kf__node *src = &g->nodes[from];
    if (src->shape.rank == 0 || src->dtype != g->nodes[grp->result].dtype ||
        kf_shape_elements(&src->shape) > UINT32_MAX) {
        return false;
    }
    kf__strided_contiguous(&src->shape, l);
    for (uint32_t i = 0; i < grp->node_count; i++) {
        const kf__node *n = &g->nodes[grp->nodes[i]];
        if (n->input_count != 1 || n->inputs[0] != from ||
            !kf__view_strided(n->op, &g->nodes[from].shape, &n->params, l)) {
            return false;
        }
        from = grp->nodes[i];
    }
    return from == grp->result;
}

/* Whether group grp's root kernel, with its strided inputs as grp says, exists. */
static bool root_reads_strided(kf_plan *p, const kf__group *grp) {
    const kf_graph *g = p->graph;
    const kf__node *root = &g->nodes[grp->root];
    kf_shape shapes[KF_NODE_MAX_INPUTS];
    for (uint32_t i = 0; i < root->input_count; i++) {
        shapes[i] = g->nodes[root->inputs[i]].shape;
    }
    kf_kernel *k = root->op->kernel_strided(p->ctx, shapes, &root->params,
                                            kf__node_kernel_dtype(g, root), grp->layout, false);
    bool ok = k && kf_kernel_status(k) == KF_OK;
    kf_kernel_destroy(k);
    return ok;
}

/* Reader input `i` of group gi's root reads a through a layout, or stops doing so. */
static void set_reader(kf__group *grp, uint32_t i, uint32_t views, const kf__strided *l) {
    grp->strided[i] = views;
    if (l) {
        grp->layout[i] = *l;
    } else {
        memset(&grp->layout[i], 0, sizeof grp->layout[i]);
    }
}

static void take_views(kf_plan *p, uint32_t ei) {
    const kf_graph *g = p->graph;
    const kf__group *views = &p->groups[ei];
    uint32_t a = views->result;
    kf__strided l;
    if (p->is_output[a] || !p->uses[a] || !views_layout(p, views, &l)) {
        return;
    }
    uint32_t found = 0;
    for (uint32_t gi = 0; gi < p->group_count; gi++) {
        const kf__group *grp = &p->groups[gi];
        const kf__node *root = grp->root ? &g->nodes[grp->root] : NULL;
        for (uint32_t i = 0; root && i < root->input_count && i < KF_NODE_MAX_INPUTS; i++) {
            if (root->inputs[i] != a) {
                continue;
            }
            if (grp->kind != KF__GROUP_PRODUCER || grp->absorbed || grp->prologue[i] ||
                grp->strided[i] || !root->op->kernel_strided ||
                !(root->op->strided_inputs >> i & 1u)) {
                return;
            }
            found++;
        }
    }
    if (found != p->uses[a]) {
        return; /* another reader needs a in memory */
    }
    /* take every reader, then undo all if one's kernel cannot read the layout */
    bool fits = true;
    for (uint32_t pass = 0; pass < 2; pass++) {
        for (uint32_t gi = 0; gi < p->group_count; gi++) {
            kf__group *grp = &p->groups[gi];
            const kf__node *root = grp->root ? &g->nodes[grp->root] : NULL;
            bool reads = false;
            for (uint32_t i = 0; root && i < root->input_count && i < KF_NODE_MAX_INPUTS; i++) {
                if (root->inputs[i] == a) {
                    reads = true;
                    if (pass == 0) {
                        set_reader(grp, i, ei + 1, &l);
                    } else if (!fits) {
                        set_reader(grp, i, 0, NULL);
                    }
                }
            }
            if (pass == 0 && reads && fits) {
                fits = root_reads_strided(p, grp);
            }
        }
    }
    if (fits) {
        p->groups[ei].kind = KF__GROUP_DEAD; /* its readers' kernels read its source in place */
    }
}

static void strided_pass(kf_plan *p) {
    if (kf__view_copies_asked()) {
        return;
    }
    for (uint32_t gi = 0; gi < p->group_count && p->status == KF_OK; gi++) {
        const kf__group *grp = &p->groups[gi];
        if (grp->kind == KF__GROUP_ELEMENTWISE && !grp->absorbed && kf__group_is_views(p, grp)) {
            take_views(p, gi);
        }
    }
}

bool kf__view_copies_asked(void) {
    const char *v = getenv("KF_VIEW_COPIES");
    return v && *v && strcmp(v, "0") != 0;
}

bool kf__group_has_strided(const kf__group *grp) {
    for (uint32_t i = 0; i < KF_NODE_MAX_INPUTS; i++) {
        if (grp->strided[i]) {
            return true;
        }
    }
    return false;
}

uint32_t kf__group_input_node(const kf_plan *p, const kf__group *grp, uint32_t i) {
    if (grp->strided[i]) {
        return p->groups[grp->strided[i] - 1].reads[0];
    }
    return p->graph->nodes[grp->root].inputs[i];
}

const kf__fusion_rule kf__rule_strided = {
    .name = "strided views",
    .pass = strided_pass,
};
