/* Activation saves: what backward reads from a fused forward group, saved or recomputed.
 *
 * In a training graph the pre-activation P of `h = gelu(matmul(x, w) + b)` has two readers: the
 * forward gelu and the backward gelu_grad(P, dY). Read twice, P ends its group, so without this
 * rule the forward is two dispatches (`matmul |> add` writes P, `gelu` reads it and writes h).
 * P may be a matmul's own value too (`gelu(matmul(x, w))`, the GPT's FFN without a bias): the
 * store phase then writes the value the matmul's kernel yields to it.
 * This plan-wide pass (after levels, before prologues and horizontal fusion) merges the
 * element-wise group that continues P (the gelu) into P's producer group, and then either
 *   - saves P: the group's store phase writes P as a second output beside its result
 *     (cuBLASLt's CUBLASLT_EPILOGUE_GELU_AUX; a side of the group, kf__group_add_side), read
 *     by the other readers as before; or
 *   - recomputes P: P is not written; each other reader's kernel, which must be a rooted group
 *     reading P in its tail (the backward `matmul |> gelu_grad`), computes P again from the
 *     producer's reads (a dot product over K for the matmul, then the producer's element-wise
 *     nodes up to P).
 *
 * The choice is by bytes (KF_ACTIVATIONS_AUTO). Saving costs P written once and read once by
 * each other reader: 4|P| (1 + readers). Recomputing costs what the recomputation loads in each
 * reader: the store phase runs per element, with no tile sharing a row of x or a column of w,
 * so each element loads 2K values, 8K|P| bytes a reader, plus the producer's element-wise reads
 * (the bias) once. Recomputing a matmul's K-long dot product therefore never moves fewer bytes
 * than saving its result (K >= 1); kf_compile_options.activations forces either choice, and
 * KF_ACTIVATIONS_SPLIT keeps the old split. kf_plan_explain shows the choice and both costs. */
#include <stdlib.h>
#include <string.h>

#include "fuse/rules/rule.h"

static bool contains(const uint32_t *ids, uint32_t count, uint32_t id) {
    for (uint32_t i = 0; i < count; i++) {
        if (ids[i] == id) {
            return true;
        }
    }
    return false;
}

static bool push(kf_plan *p, uint32_t **ids, uint32_t *count, uint32_t *capacity, uint32_t id) {
    if (*count == *capacity) {
        uint32_t cap = *capacity ? *capacity * 2 : 8;
        uint32_t *grown = realloc(*ids, sizeof *grown * cap);
        if (!grown) {
            kf__plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory planning activation saves");
            return false;
        }
        *ids = grown;
        *capacity = cap;
    }
    (*ids)[(*count)++] = id;
    return true;
}

static bool push_read(kf_plan *p, kf__group *grp, uint32_t id) {
    return contains(grp->reads, grp->read_count, id) ||
           push(p, &grp->reads, &grp->read_count, &grp->read_capacity, id);
}

/* Whether value v will likely run in its only consumer's loads (src/fuse/rules/prologue.c):
 * read once, not an output, by a matmul or a row reduction as a value input. Merging its group
 * here would then add a write instead of saving a dispatch. */
static bool prologue_candidate(const kf_plan *p, uint32_t v) {
    const kf_graph *g = p->graph;
    if (p->uses[v] != 1 || p->is_output[v]) {
        return false;
    }
    for (uint32_t c = v + 1; c < g->node_count; c++) {
        const kf__node *n = &g->nodes[c];
        for (uint32_t i = 0; n->kind == KF__NODE_OP && i < n->input_count; i++) {
            if (n->inputs[i] == v) {
                kf_op_class cls = n->op->op_class;
                return (cls == KF_OP_CLASS_MATMUL || cls == KF_OP_CLASS_ROW_REDUCTION) &&
                       !(n->op->index_inputs >> i & 1u);
            }
        }
    }
    return false;
}

/* The element-wise group that continues P inside the forward: it reads P, computes over P's
 * shape, and reads nothing that is not ready before P's producer runs. -1 when none. */
static int32_t continuation(const kf_plan *p, uint32_t gi, uint32_t P) {
    const kf__group *grp = &p->groups[gi];
    const kf__node *pn = &p->graph->nodes[P];
    for (uint32_t ei = 0; ei < p->group_count; ei++) {
        const kf__group *e = &p->groups[ei];
        if (e->kind != KF__GROUP_ELEMENTWISE || e->absorbed || ei == gi ||
            !contains(e->reads, e->read_count, P)) {
            continue;
        }
        if (prologue_candidate(p, e->result)) {
            continue; /* the prologue rule takes it into its consumer's loads for nothing */
        }
        const kf__node *en = &p->graph->nodes[e->result];
        if (!kf_shape_eq(&en->shape, &pn->shape) || en->dtype != KF_DTYPE_F32 ||
            grp->node_count + e->node_count >= KF_GROUP_MAX_NODES) {
            continue;
        }
        bool ready = true;
        for (uint32_t r = 0; r < e->read_count && ready; r++) {
            int32_t src = p->group_of[e->reads[r]];
            ready = e->reads[r] == P || src < 0 || p->groups[src].level < grp->level;
        }
        if (ready) {
            return (int32_t)ei;
        }
    }
    return -1;
}

/* The reads grp would have if it recomputed P from group `from` instead of loading it: P's
 * producer's root inputs and its element-wise reads, into out (which starts as grp's reads
 * without P). Returns the count, or UINT32_MAX when it does not fit cap. */
static uint32_t recompute_reads(const kf_plan *p, const kf__group *grp, const kf__group *from,
                                uint32_t P, uint32_t *out, uint32_t cap) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < grp->read_count; i++) {
        if (grp->reads[i] != P && n < cap) {
            out[n++] = grp->reads[i];
        }
    }
    const kf__node *root = &p->graph->nodes[from->root];
    for (uint32_t i = 0; i < root->input_count + from->read_count; i++) {
        uint32_t r = i < root->input_count ? root->inputs[i] : from->reads[i - root->input_count];
        if (!contains(out, n, r)) {
            if (n == cap) {
                return UINT32_MAX;
            }
            out[n++] = r;
        }
    }
    return n;
}

static void activation_pass(kf_plan *p) {
    const kf_graph *g = p->graph;
    if (p->activations == KF_ACTIVATIONS_SPLIT) {
        return;
    }
    for (uint32_t gi = 0; gi < p->group_count && p->status == KF_OK; gi++) {
        kf__group *grp = &p->groups[gi];
        if (grp->kind != KF__GROUP_PRODUCER || grp->side_count || kf__group_has_prologue(grp)) {
            continue; /* the group not multi-output */
        }
        const kf__node *root = &g->nodes[grp->root];
        kf_op_class cls = root->op->op_class;
        uint32_t P = grp->result;
        const kf__node *pn = &g->nodes[P];
        if ((cls != KF_OP_CLASS_MATMUL && cls != KF_OP_CLASS_ROW_REDUCTION) ||
            pn->dtype != KF_DTYPE_F32 || p->uses[P] < 2) {
            continue;
        }
        if (grp->node_count == 0 && cls != KF_OP_CLASS_MATMUL) {
            continue; /* a row reduction's own value stays its own dispatch's: the rmsnorm-matmul
                       * rule (rmsnorm_matmul.c) wants the norm alone */
        }
        if (grp->node_count == 0) {
            const kf__node *a = &g->nodes[root->inputs[0]];
            if (a->kind == KF__NODE_OP && a->op->op_class == KF_OP_CLASS_ROW_REDUCTION &&
                p->uses[root->inputs[0]] == 1) {
                continue; /* rmsnorm_matmul.c folds a norm read once into this matmul, which
                           * must have no side then: that saves the norm's tensor, more */
            }
        }
        if (root->op->companion) {
            continue; /* a side here would keep its companion (attention's lse) out of the kernel
                       * (companion.c takes a group without sides), costing a second forward pass */
        }
        int32_t ei = continuation(p, gi, P);
        if (ei < 0) {
            continue;
        }
        const kf__group *e = &p->groups[ei];
        /* the merged kernel: the producer's bindings, the continuation's other reads, P's */
        uint32_t extra = 0;
        for (uint32_t r = 0; r < e->read_count; r++) {
            extra += e->reads[r] != P && !contains(grp->reads, grp->read_count, e->reads[r]);
        }
        if (kf__group_bindings(p, grp) + extra + 1 > p->max_storage_buffers) {
            continue;
        }
        /* The other readers, and whether each could recompute P in its tail. */
        uint64_t bytes = kf_shape_elements(&pn->shape) * 4u;
        uint32_t readers = 0, tail_readers = 0;
        bool can_recompute = cls == KF_OP_CLASS_MATMUL && root->dtype == KF_DTYPE_F32 &&
                             g->nodes[root->inputs[0]].shape.rank == 2 &&
                             g->nodes[root->inputs[1]].shape.rank == 2 && !p->is_output[P];
        uint32_t scratch[KF_GROUP_MAX_SLOTS];
        for (uint32_t ri = 0; ri < p->group_count; ri++) {
            const kf__group *r = &p->groups[ri];
            if (r->kind == KF__GROUP_DEAD || ri == gi || ri == (uint32_t)ei) {
                continue;
            }
            const kf__node *rr = r->root ? &g->nodes[r->root] : NULL;
            bool in_root = false;
            for (uint32_t i = 0; rr && i < rr->input_count; i++) {
                in_root |= rr->inputs[i] == P;
            }
            bool in_tail = contains(r->reads, r->read_count, P);
            if (!in_root && !in_tail) {
                continue;
            }
            readers++;
            if (in_root || !in_tail || r->kind != KF__GROUP_PRODUCER || r->recompute) {
                can_recompute = false;
                continue;
            }
            uint32_t n = recompute_reads(p, r, grp, P, scratch, KF_GROUP_MAX_SLOTS);
            uint32_t r_root = rr->input_count;
            if (n == UINT32_MAX || r_root + n + 1 > p->max_storage_buffers) {
                can_recompute = false;
            }
            tail_readers++;
        }
        if (p->is_output[P]) {
            readers++; /* an output is read back by the caller */
        }
        uint32_t K = can_recompute
                         ? (root->params.transpose_a ? g->nodes[root->inputs[0]].shape.dims[0]
                                                     : g->nodes[root->inputs[0]].shape.dims[1])
                         : 0;
        uint64_t small = 0; /* the producer's element-wise reads (bias rows), once */
        for (uint32_t r = 0; r < grp->read_count; r++) {
            small += kf_shape_elements(&g->nodes[grp->reads[r]].shape) * 4u;
        }
        grp->save_cost = bytes * (1u + readers);
        grp->recompute_cost = can_recompute ? tail_readers * (bytes * 2u * K + small) : 0;
        bool recompute =
            can_recompute && tail_readers == readers &&
            (p->activations == KF_ACTIVATIONS_RECOMPUTE ||
             (p->activations == KF_ACTIVATIONS_AUTO && grp->recompute_cost < grp->save_cost));
        /* Merge the continuation into the producer's store phase. */
        kf__group *eg = &p->groups[ei];
        for (uint32_t j = 0; j < eg->node_count && p->status == KF_OK; j++) {
            if (push(p, &grp->nodes, &grp->node_count, &grp->node_capacity, eg->nodes[j])) {
                p->group_of[eg->nodes[j]] = (int32_t)gi;
            }
        }
        for (uint32_t r = 0; r < eg->read_count && p->status == KF_OK; r++) {
            if (eg->reads[r] != P) {
                push_read(p, grp, eg->reads[r]);
            }
        }
        uint32_t producer_reads = grp->read_count - extra; /* before the continuation's */
        grp->result = eg->result;
        eg->kind = KF__GROUP_DEAD;
        free(eg->nodes);
        free(eg->reads);
        free(eg->members);
        eg->nodes = eg->reads = eg->members = NULL;
        eg->node_count = eg->read_count = eg->member_count = 0;
        eg->node_capacity = eg->read_capacity = eg->member_capacity = 0;
        if (readers == 0) {
            continue; /* the continuation read P twice (mul(P, P)): nothing else needs it */
        }
        if (!recompute) {
            kf__group_add_side(p, grp, P); /* the store phase writes P too (GELU_AUX) */
            continue;
        }
        kf__group from = *grp; /* P's recomputation reads the producer's reads up to P only */
        from.read_count = producer_reads;
        for (uint32_t ri = 0; ri < p->group_count && p->status == KF_OK; ri++) {
            kf__group *r = &p->groups[ri];
            if (r->kind == KF__GROUP_DEAD || ri == gi || !contains(r->reads, r->read_count, P)) {
                continue;
            }
            uint32_t n = recompute_reads(p, r, &from, P, scratch, KF_GROUP_MAX_SLOTS);
            r->read_count = 0;
            for (uint32_t i = 0; i < n && p->status == KF_OK; i++) {
                push_read(p, r, scratch[i]);
            }
            r->recompute = P;
            r->recompute_from = gi;
            r->save_cost = grp->save_cost;
            r->recompute_cost = grp->recompute_cost;
        }
    }
}

static void activation_pass_and_settle(kf_plan *p) {
    activation_pass(p);
    kf__plan_settle_levels(p); /* what read the continuation's result now reads the producer */
}

const kf__fusion_rule kf__rule_activation_save = {
    .name = "activation save",
    .pass = activation_pass_and_settle,
};
