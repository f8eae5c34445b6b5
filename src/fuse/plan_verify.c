/* Proof of a plan: the fused GPU run against the unfused composition of the CPU specifications. */
#include "fuse/plan_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse/rules/rule.h"
#include "ops/ops_internal.h"
#include "core/half.h"

/* The range random data for input `id` is drawn from: the narrowest range its consumers ask for
 * (log, sqrt and reciprocal want positive numbers). */
static void input_range(const kf_graph *g, uint32_t id, float *lo, float *hi) {
    *lo = -1.0f;
    *hi = 1.0f;
    for (uint32_t c = 1; c < g->node_count; c++) {
        const kf__node *n = &g->nodes[c];
        for (uint32_t i = 0; n->kind == KF__NODE_OP && i < n->input_count; i++) {
            if (n->inputs[i] != id || n->op->input_lo >= n->op->input_hi) {
                continue;
            }
            if (n->op->input_lo > *lo) {
                *lo = n->op->input_lo;
            }
            if (n->op->input_hi < *hi) {
                *hi = n->op->input_hi;
            }
        }
    }
    if (*lo >= *hi) {
        *hi = *lo + 1.0f;
    }
}

/* Index inputs (class labels) get whole numbers below the class count: the last dimension of
 * the operator's first input. */
static bool label_input(const kf_graph *g, uint32_t id, uint32_t *classes) {
    for (uint32_t c = 1; c < g->node_count; c++) {
        const kf__node *n = &g->nodes[c];
        for (uint32_t i = 0; n->kind == KF__NODE_OP && i < n->input_count; i++) {
            if (n->inputs[i] == id && (n->op->index_inputs & (1u << i))) {
                kf_shape shapes[KF_NODE_MAX_INPUTS] = {{0}};
                for (uint32_t j = 0; j < n->input_count; j++) {
                    shapes[j] = g->nodes[n->inputs[j]].shape;
                }
                *classes = kf__op_index_classes(n->op, shapes);
                return true;
            }
        }
    }
    return false;
}

static double op_tolerance(const kf__node *n) {
    return n->dtype == KF_DTYPE_F16 ? n->op->tolerance_f16 : n->op->tolerance_f32;
}

/* The tolerance of an output: four times the sum of the tolerances of the ops it depends on.
 * Relative errors of well-conditioned steps add up to first order; the factor covers ops meeting
 * inputs outside the range their own tolerance was measured on (a softmax fed by a gelu chain
 * measured 2.2x its table tolerance on lavapipe). A wrong kernel misses by orders of magnitude. */
static double cone_tolerance(const kf_graph *g, uint32_t node) {
    bool *seen = calloc(g->node_count, sizeof *seen);
    uint32_t *stack = malloc(sizeof *stack * g->node_count);
    double tol = 0.0;
    if (!seen || !stack) {
        free(seen);
        free(stack);
        return 0.0;
    }
    uint32_t top = 0;
    stack[top++] = node;
    seen[node] = true;
    while (top) {
        const kf__node *n = &g->nodes[stack[--top]];
        if (n->kind != KF__NODE_OP) {
            continue;
        }
        tol += op_tolerance(n);
        for (uint32_t i = 0; i < n->input_count; i++) {
            if (!seen[n->inputs[i]]) {
                seen[n->inputs[i]] = true;
                stack[top++] = n->inputs[i];
            }
        }
    }
    free(seen);
    free(stack);
    return 4.0 * tol;
}

static void round_to_half(kf_tensor *t) {
    uint64_t n = kf_tensor_size(t);
    for (uint64_t i = 0; i < n; i++) {
        t->data[i] = kf__half_to_float(kf__half_from_float(t->data[i]));
    }
}

/* Evaluates every operator's spec_forward in graph order into values[] (inputs and scalars must
 * be there). With a nonzero `shake`, each op's output is then multiplied by (1 + u * tolerance),
 * u uniform in [-1, 1]: the spec's own sensitivity to errors of the size each op may make. */
/* A backward operator's error is at the scale of its dy, not of its result: its result is dy times
 * derivative terms of order one, which cancel to nearly nothing in places (layernorm_grad_x of a
 * two-element row is zero but for eps). The floor its error is measured against, as kf_op_verify
 * measures it (docs/operators.md, "Errors"): 1% of the rms of dy, its last input, in values[];
 * 0 for a forward operator. */
static double grad_floor(const kf__node *n, kf_tensor *const *values) {
    if (!n->op || !n->op->grad_of || !n->input_count) {
        return 0.0;
    }
    const kf_tensor *dy = values[n->inputs[n->input_count - 1]];
    return dy ? kf__verify_floor(dy->data, kf_tensor_size(dy)) : 0.0;
}

static kf_status run_specs(const kf_graph *g, kf_tensor **values, uint64_t shake) {
    for (uint32_t id = 1; id < g->node_count; id++) {
        const kf__node *n = &g->nodes[id];
        if (n->kind != KF__NODE_OP) {
            continue;
        }
        kf_status st = kf_tensor_create(&n->shape, &values[id]);
        if (st != KF_OK) {
            return st;
        }
        const kf_tensor *in[KF_NODE_MAX_INPUTS];
        for (uint32_t i = 0; i < n->input_count; i++) {
            in[i] = values[n->inputs[i]];
        }
        st = n->op->spec_forward(in, &n->params, values[id]);
        if (st != KF_OK) {
            return st;
        }
        uint64_t count = kf_tensor_size(values[id]);
        if (shake) {
            kf_tensor *noise = NULL;
            st = kf_tensor_create(&n->shape, &noise);
            if (st != KF_OK) {
                return st;
            }
            kf_tensor_fill_random(noise, shake + id, -1.0f, 1.0f);
            /* the whole tolerance with a random sign, not a uniform fraction of it: a fraction
             * can be so small that the f16 rounding below undoes it, and an output of a few
             * elements then sees no amplification at all (fuzz graph 96 of seed 20261130:
             * y = log(|x| + 0.5) of one f16 element near 1.006, where the spec's rounding of
             * |x| + 0.5 to f16 alone is 8% of y) */
            double tol = op_tolerance(n), floor = grad_floor(n, values);
            for (uint64_t i = 0; i < count; i++) {
                double v = values[id]->data[i], sign = noise->data[i] < 0.0f ? -1.0 : 1.0;
                values[id]->data[i] = (float)(v + tol * sign * fmax(fabs(v), floor));
            }
            kf_tensor_destroy(noise);
        }
        if (n->dtype == KF_DTYPE_F16) {
            round_to_half(values[id]); /* the GPU stores every f16 intermediate */
        }
    }
    return KF_OK;
}

kf_status kf__plan_random_input(const kf_plan *p, uint32_t id, uint64_t seed, kf_tensor **out) {
    const kf_graph *g = p->graph;
    const kf__node *n = &g->nodes[id];
    kf_status st = kf_tensor_create(&n->shape, out);
    if (st != KF_OK) {
        return st;
    }
    kf_tensor *t = *out;
    uint32_t classes = 0;
    uint64_t input_seed = seed * 0x9e3779b97f4a7c15ULL + id;
    if (label_input(g, id, &classes)) {
        kf_tensor_fill_random(t, input_seed, 0.0f, (float)classes);
        for (uint64_t i = 0; i < kf_tensor_size(t); i++) {
            float v = (float)(int)t->data[i];
            t->data[i] = v >= (float)classes ? (float)classes - 1.0f : v;
        }
    } else {
        float lo, hi;
        input_range(g, id, &lo, &hi);
        kf_tensor_fill_random(t, input_seed, lo, hi);
    }
    if (n->dtype == KF_DTYPE_F16) {
        round_to_half(t);
    }
    return KF_OK;
}

kf_status kf_plan_verify(kf_plan *p, uint64_t seed, kf_plan_report *out) {
    return kf__plan_check(p, NULL, seed, out);
}

/* ---- each group on its own ---- */

/* The nodes a group computes, in evaluation order (its root first), and what it reads. */
typedef struct group_view {
    /* prologue or strided views groups' nodes (one per root input at most, and a reshape of
     * each), the root, its epilogue */
    uint32_t ops[(KF_GROUP_MAX_NODES + 1) * (KF_NODE_MAX_INPUTS + 1) + 1 + 2 * KF_GROUP_MAX_SIDES];
    uint32_t op_count;
    uint32_t reads[KF_GROUP_MAX_SLOTS]; /* graph inputs and other groups' results, not scalars */
    uint32_t read_count;
    uint32_t group;
} group_view;

static bool view_has(const group_view *v, uint32_t id) {
    for (uint32_t i = 0; i < v->op_count; i++) {
        if (v->ops[i] == id) {
            return true;
        }
    }
    return false;
}

static void group_view_of(const kf_plan *p, const kf__group *grp, group_view *v) {
    const kf_graph *g = p->graph;
    v->op_count = 0;
    v->read_count = 0;
    v->group = (uint32_t)(grp - p->groups);
    /* A prologue's element-wise group runs in the root kernel's loads: its operators are this
     * group's, evaluated before the root (src/fuse/rules/prologue.c). */
    for (uint32_t i = 0; grp->root && i < KF_NODE_MAX_INPUTS; i++) {
        /* likewise a view the root's kernel reads in place (src/fuse/rules/strided.c) */
        if (grp->strided[i] && grp->strided[i] != grp->prologue[i]) {
            const kf__group *views = &p->groups[grp->strided[i] - 1];
            for (uint32_t j = 0; j < views->node_count; j++) {
                if (!view_has(v, views->nodes[j])) {
                    v->ops[v->op_count++] = views->nodes[j];
                }
            }
        }
        if (grp->prologue[i]) {
            const kf__group *pro = &p->groups[grp->prologue[i] - 1];
            for (uint32_t j = 0; j < pro->node_count; j++) {
                if (!view_has(v, pro->nodes[j])) {
                    v->ops[v->op_count++] = pro->nodes[j];
                }
            }
            /* a reshape of the prologue's value the root reads (split-K's partial products):
             * it has no buffer of its own, so it is evaluated here too */
            uint32_t x = g->nodes[grp->root].inputs[i];
            if (x != pro->result && !view_has(v, x)) {
                v->ops[v->op_count++] = x;
            }
        }
    }
    /* A value recomputed in this group's tail (src/fuse/rules/activation_save.c): its producer's
     * operators up to it are this group's too, evaluated from that producer's reads. */
    if (grp->recompute) {
        const kf__group *from = &p->groups[grp->recompute_from];
        v->ops[v->op_count++] = from->root;
        uint32_t room = (uint32_t)(sizeof v->ops / sizeof v->ops[0]) - KF_GROUP_MAX_NODES - 1;
        for (uint32_t i = 0;
             from->root != grp->recompute && i < from->node_count && v->op_count < room; i++) {
            v->ops[v->op_count++] = from->nodes[i];
            if (from->nodes[i] == grp->recompute) {
                break;
            }
        }
    }
    /* An rmsnorm the root's kernel folds into its loads (src/fuse/rules/rmsnorm_matmul.c). */
    if (grp->row_norm) {
        v->ops[v->op_count++] = grp->row_norm;
    }
    if (grp->root) {
        v->ops[v->op_count++] = grp->root;
    }
    for (uint32_t i = 0; i < grp->node_count; i++) {
        v->ops[v->op_count++] = grp->nodes[i];
    }
    /* Sides the root's kernel computes, after what they read in registers (kf__group.sides):
     * they read the root's inputs and maybe the group's values (a seed's
     * shape), and nothing of the group reads them. */
    for (uint32_t i = 0; i < grp->side_input_count; i++) {
        v->ops[v->op_count++] = grp->side_inputs[i];
    }
    for (uint32_t i = 0; i < grp->side_count; i++) {
        if (!kf__group_side_in_store(grp, grp->sides[i])) {
            v->ops[v->op_count++] = grp->sides[i];
        }
    }
    for (uint32_t i = 0; i < v->op_count; i++) {
        const kf__node *n = &g->nodes[v->ops[i]];
        for (uint32_t j = 0; j < n->input_count; j++) {
            uint32_t a = n->inputs[j];
            bool seen = g->nodes[a].kind == KF__NODE_SCALAR || view_has(v, a);
            for (uint32_t k = 0; k < v->read_count; k++) {
                seen |= v->reads[k] == a;
            }
            if (!seen && v->read_count < KF_GROUP_MAX_SLOTS) {
                v->reads[v->read_count++] = a;
            }
        }
    }
}

uint32_t kf__plan_group_reads(const kf_plan *p, uint32_t gi, uint32_t *reads, uint32_t cap) {
    group_view v;
    group_view_of(p, &p->groups[gi], &v);
    uint32_t n = v.read_count < cap ? v.read_count : cap;
    memcpy(reads, v.reads, n * sizeof *reads);
    return n;
}

/* The longest accumulation an operator's verification table exercises, forward or backward (a
 * matmul's K, M or N; a row reduction's row length): its documented tolerance was measured up to
 * there. 0 for operators that accumulate nothing. */
static uint64_t documented_length(const kf_operator *op) {
    uint64_t longest = 0;
    for (uint32_t c = 0; c < op->case_count; c++) {
        const kf_shape *s = op->cases[c].shapes;
        uint64_t len = 0;
        if (op->op_class == KF_OP_CLASS_MATMUL) {
            for (uint32_t i = 0; i < 2; i++) {
                for (uint32_t d = 0; d < s[i].rank; d++) {
                    len = s[i].dims[d] > len ? s[i].dims[d] : len;
                }
            }
        } else if (op->op_class == KF_OP_CLASS_ROW_REDUCTION && s[0].rank) {
            len = s[0].dims[s[0].rank - 1];
        }
        longest = len > longest ? len : longest;
    }
    return longest;
}

/* How long the sums of this node are: K for a matmul, the row for a row reduction, else 0. */
static uint64_t accumulation_length(const kf_graph *g, const kf__node *n) {
    const kf_shape *a = &g->nodes[n->inputs[0]].shape;
    if (n->op->op_class == KF_OP_CLASS_MATMUL && a->rank >= 2) {
        return n->params.transpose_a ? a->dims[a->rank - 2] : a->dims[a->rank - 1];
    }
    if (n->op->op_class == KF_OP_CLASS_ROW_REDUCTION && a->rank) {
        return a->dims[a->rank - 1];
    }
    return 0;
}

/* The error a node of a group may add, relative to max(|value|, floor) (docs/fusion.md): its
 * documented f32 tolerance, since a group computes in f32 registers, or its f16 tolerance where
 * the group rounds its value to f16 (the stored result, and a producer whose kernel yields f16
 * to the tail); grown as the square root of the accumulation length past the longest its table
 * measured, as rounding errors of a sum grow like a random walk. */
static double node_error(const kf_plan *p, const kf__group *grp, uint32_t id) {
    const kf__node *n = &p->graph->nodes[id];
    bool rounds_f16 = n->dtype == KF_DTYPE_F16 && (kf__group_writes(grp, id) || id == grp->root);
    double eps = rounds_f16 ? n->op->tolerance_f16 : n->op->tolerance_f32;
    uint64_t len = accumulation_length(p->graph, n);
    uint64_t doc = documented_length(n->op);
    if (len > doc && doc) {
        eps *= sqrt((double)len / (double)doc);
    }
    return eps;
}

typedef struct group_check {
    uint32_t group;
    uint32_t target; /* the value compared: the group's result or one of its sides */
    uint32_t dispatch;
    uint32_t op_count;
    double err, tol;
    bool passed;
    uint64_t element;
    float got, expected;
} group_check;

/* Values the GPU wrote for node id, downloaded once per check. */
static kf_status gpu_value(kf_plan *p, kf_tensor **gpu, uint32_t id, const kf_tensor **out) {
    if (!gpu[id]) {
        kf_status st = kf_tensor_create(&p->graph->nodes[id].shape, &gpu[id]);
        if (st == KF_OK) {
            st = kf__plan_download(p, id, gpu[id]->data);
        }
        if (st != KF_OK) {
            kf_tensor_destroy(gpu[id]);
            gpu[id] = NULL;
            return st;
        }
    }
    *out = gpu[id];
    return KF_OK;
}

/* Evaluates the group's operators from op `from` on, local[] holding every value they read
 * (earlier ops' results included). */
static kf_status eval_group(const kf_plan *p, const kf__group *grp, const group_view *v,
                            kf_tensor **local, uint32_t from) {
    const kf_graph *g = p->graph;
    for (uint32_t i = from; i < v->op_count; i++) {
        uint32_t id = v->ops[i];
        const kf__node *n = &g->nodes[id];
        if (!local[id]) {
            kf_status st = kf_tensor_create(&n->shape, &local[id]);
            if (st != KF_OK) {
                return st;
            }
        }
        const kf_tensor *in[KF_NODE_MAX_INPUTS];
        for (uint32_t j = 0; j < n->input_count; j++) {
            in[j] = local[n->inputs[j]];
        }
        kf_status st = n->op->spec_forward(in, &n->params, local[id]);
        if (st != KF_OK) {
            return st;
        }
        if (n->dtype == KF_DTYPE_F16 && (kf__group_writes(grp, id) || id == grp->root)) {
            round_to_half(local[id]); /* what the group's kernel stores (or yields) as f16 */
        }
    }
    return KF_OK;
}

/* A copy of t with every element raised by eps * max(|value|, floor): the error an op whose
 * result t is may make. */
static kf_status nudged_copy(const kf_tensor *t, double eps, double min_floor, kf_tensor **out) {
    kf_status st = kf_tensor_create(&t->shape, out);
    if (st != KF_OK) {
        return st;
    }
    uint64_t count = kf_tensor_size(t);
    double floor = fmax(kf__verify_floor(t->data, count), min_floor);
    for (uint64_t e = 0; e < count; e++) {
        double x = t->data[e];
        (*out)->data[e] = (float)(x + eps * (fabs(x) > floor ? fabs(x) : floor));
    }
    return KF_OK;
}

/* Dispatch number (1-based) of group gi, or of the horizontal dispatch holding it. */
static uint32_t dispatch_of(const kf_plan *p, uint32_t gi) {
    for (uint32_t d = 0; d < p->dispatch_count; d++) {
        if (p->order[d] == UINT32_MAX) {
            continue; /* an activation save (save.c) */
        }
        const kf__group *h = &p->groups[p->order[d]];
        bool holds = p->order[d] == gi;
        for (uint32_t m = 0; h->kind == KF__GROUP_HORIZONTAL && m < h->member_count; m++) {
            holds |= h->members[m] == gi;
        }
        if (holds) {
            return d + 1;
        }
    }
    return 0;
}

/* Points local[] at what the group reads (values[] for graph inputs and scalars, the GPU's
 * values for intermediates) and evaluates its ops into local[] (owned by the caller). */
static kf_status group_reference(kf_plan *p, const group_view *v, kf_tensor **values,
                                 kf_tensor **gpu, kf_tensor **local) {
    const kf_graph *g = p->graph;
    kf_status st = KF_OK;
    for (uint32_t i = 0; i < v->op_count && st == KF_OK; i++) {
        const kf__node *n = &g->nodes[v->ops[i]];
        for (uint32_t j = 0; j < n->input_count; j++) {
            uint32_t a = n->inputs[j];
            if (view_has(v, a) || local[a]) {
                continue;
            }
            if (g->nodes[a].kind != KF__NODE_OP) {
                local[a] = values[a];
            } else {
                const kf_tensor *t = NULL;
                st = gpu_value(p, gpu, a, &t);
                local[a] = (kf_tensor *)t;
            }
        }
    }
    return st == KF_OK ? eval_group(p, &p->groups[v->group], v, local, 0) : st;
}

/* Relative size of the input perturbation standing for a kernel's rounding: 16 f32 ulps
 * (2^-20), room for the rounding of sums of a few thousand terms in a tree. */
#define KF_INPUT_ULPS 0x1p-20

/* Adds to bound[] what the group's result moves by when every value it reads (not scalars,
 * not class labels) is multiplied by 1 +- KF_INPUT_ULPS, the sign drawn per element. */
static kf_status nudge_reads(kf_plan *p, const kf__group *grp, const group_view *v, uint32_t target,
                             kf_tensor **local, kf_tensor **ref, double *bound, uint64_t count) {
    const kf_graph *g = p->graph;
    kf_tensor *saved[KF_GROUP_MAX_SLOTS] = {0};
    kf_status st = KF_OK;
    uint64_t state = 0x6b667573656e7564ULL ^ v->group;
    for (uint32_t r = 0; r < v->read_count && st == KF_OK; r++) {
        uint32_t a = v->reads[r];
        if (g->nodes[a].dtype == KF_DTYPE_I32) {
            continue;
        }
        kf_tensor *t = NULL;
        st = kf_tensor_create(&g->nodes[a].shape, &t);
        for (uint64_t e = 0; st == KF_OK && e < kf_tensor_size(t); e++) {
            double sign = (kf__splitmix64(&state) & 1u) ? 1.0 : -1.0;
            t->data[e] = (float)((double)local[a]->data[e] * (1.0 + sign * KF_INPUT_ULPS));
        }
        if (st == KF_OK) {
            saved[r] = local[a];
            local[a] = t;
        }
    }
    if (st == KF_OK) {
        st = eval_group(p, grp, v, local, 0);
    }
    const kf_tensor *moved = st == KF_OK ? local[target] : NULL;
    for (uint64_t e = 0; moved && e < count; e++) {
        double d = fabs((double)moved->data[e] - (double)ref[target]->data[e]);
        bound[e] += isfinite(d) ? d : 0.0;
    }
    for (uint32_t i = 0; i < v->op_count; i++) {
        kf_tensor_destroy(local[v->ops[i]]);
        local[v->ops[i]] = NULL;
    }
    for (uint32_t r = 0; r < v->read_count; r++) {
        if (saved[r]) {
            kf_tensor_destroy(local[v->reads[r]]);
            local[v->reads[r]] = saved[r];
        }
    }
    return st;
}

/* Checks group gi: the specs of its own ops on the values its kernel read, against what it
 * wrote; values[] holds graph inputs and scalars as uploaded. */
static kf_status check_group(kf_plan *p, uint32_t gi, uint32_t target, kf_tensor **values,
                             kf_tensor **gpu, group_check *r) {
    const kf_graph *g = p->graph;
    const kf__group *grp = &p->groups[gi];
    group_view v;
    group_view_of(p, grp, &v);
    memset(r, 0, sizeof *r);
    r->group = gi;
    r->target = target;
    r->dispatch = dispatch_of(p, gi);
    r->op_count = v.op_count;
    r->passed = true;
    /* local[id]: the group's view of node id. Reads and scalars point into values[] / gpu[]
     * (not owned); the group's own nodes are owned (ref[]: the reference, moved there before
     * the nudged runs). */
    kf_tensor **local = calloc(g->node_count, sizeof *local);
    kf_tensor **ref = calloc(g->node_count, sizeof *ref);
    double *bound = NULL;
    kf_status st =
        local && ref ? group_reference(p, &v, values, gpu, local) : KF_ERROR_OUT_OF_MEMORY;
    const kf_tensor *got = NULL;
    if (st == KF_OK) {
        st = gpu_value(p, gpu, target, &got);
    }
    uint64_t count = kf_shape_elements(&g->nodes[target].shape);
    if (st == KF_OK) {
        bound = calloc(count, sizeof *bound);
        st = bound ? KF_OK : KF_ERROR_OUT_OF_MEMORY;
    }
    for (uint32_t i = 0; i < v.op_count && st == KF_OK; i++) {
        ref[v.ops[i]] = local[v.ops[i]];
        local[v.ops[i]] = NULL;
    }
    /* The tolerance, to first order: each op's allowed error in turn, pushed through the ops
     * after it; the effects add up per element (docs/fusion.md, "Tolerances"). */
    for (uint32_t i = 0; i < v.op_count && st == KF_OK; i++) {
        for (uint32_t j = 0; j < i; j++) {
            local[v.ops[j]] = ref[v.ops[j]]; /* earlier ops as computed */
        }
        st = nudged_copy(ref[v.ops[i]], node_error(p, grp, v.ops[i]),
                         grad_floor(&g->nodes[v.ops[i]], local), &local[v.ops[i]]);
        if (st == KF_OK) {
            st = eval_group(p, grp, &v, local, i + 1);
        }
        const kf_tensor *nudged = local[target];
        for (uint64_t e = 0; st == KF_OK && e < count; e++) {
            double d = fabs((double)nudged->data[e] - (double)ref[target]->data[e]);
            bound[e] += isfinite(d) ? d : 0.0;
        }
        for (uint32_t j = i; j < v.op_count; j++) {
            kf_tensor_destroy(local[v.ops[j]]);
        }
        for (uint32_t j = 0; j < v.op_count; j++) {
            local[v.ops[j]] = NULL;
        }
    }
    /* The kernel's own f32 arithmetic, as backward error: everything the group reads moved by
     * KF_INPUT_ULPS in random directions, through the whole group. Documented errors were
     * measured on well-conditioned inputs; this is what an operator that cancels (layernorm of a
     * nearly constant row) makes of the last bits of its input. */
    if (st == KF_OK) {
        st = nudge_reads(p, grp, &v, target, local, ref, bound, count);
    }
    if (st == KF_OK) {
        const float *want = ref[target]->data;
        double floor = kf__verify_floor(want, count);
        if (g->nodes[target].dtype == KF_DTYPE_F16 && floor < 0x1p-14) {
            floor = 0x1p-14; /* below f16's normal range the format has absolute precision */
        }
        for (uint64_t e = 0; e < count; e++) {
            double scale = fabs((double)want[e]) > floor ? fabs((double)want[e]) : floor;
            double t = bound[e] / scale;
            r->tol = t > r->tol ? t : r->tol;
        }
        for (uint64_t e = 0; e < count; e++) {
            double err = kf__rel_error(got->data[e], want[e], floor);
            if (err > r->tol && r->passed) {
                r->passed = false;
                r->element = e;
                r->got = got->data[e];
                r->expected = want[e];
            }
            r->err = err > r->err ? err : r->err;
        }
    }
    for (uint32_t i = 0; i < v.op_count; i++) {
        kf_tensor_destroy(ref ? ref[v.ops[i]] : NULL);
    }
    free(bound);
    free(local);
    free(ref);
    return st;
}

static const char *node_label(const kf_graph *g, uint32_t id, char *buf, size_t size) {
    const kf__node *n = &g->nodes[id];
    for (uint32_t o = 0; o < g->output_count; o++) {
        if (g->outputs[o].node == id) {
            snprintf(buf, size, "%s", g->outputs[o].name);
            return buf;
        }
    }
    if (n->kind == KF__NODE_INPUT) {
        snprintf(buf, size, "%s", n->name);
    } else {
        snprintf(buf, size, "%s_%u", n->op->name, id);
    }
    return buf;
}

static void describe_group(const kf_plan *p, const group_check *c, kf_plan_group_report *r) {
    const kf_graph *g = p->graph;
    const kf__group *grp = &p->groups[c->group];
    group_view v;
    group_view_of(p, grp, &v);
    memset(r, 0, sizeof *r);
    r->dispatch = c->dispatch;
    snprintf(r->rule, sizeof r->rule, "%s", grp->rule);
    size_t len = 0;
    for (uint32_t i = 0; i < v.op_count && len < sizeof r->ops; i++) {
        int n = snprintf(r->ops + len, sizeof r->ops - len, "%s%s", i ? " |> " : "",
                         g->nodes[v.ops[i]].op->name);
        len += n > 0 ? (size_t)n : 0;
    }
    node_label(g, c->target, r->result, sizeof r->result);
    r->max_rel_error = c->err;
    r->tolerance = c->tol;
    r->passed = c->passed;
    r->element = c->element;
    r->got = c->got;
    r->expected = c->expected;
}

static void input_label(const kf_graph *g, uint32_t id, char *buf, size_t size) {
    const kf__node *n = &g->nodes[id];
    if (n->kind == KF__NODE_INPUT) {
        snprintf(buf, size, "%s", n->name);
    } else {
        snprintf(buf, size, "%s_%u", n->op->name, id);
    }
}

/* Ops ops[0..count) (in evaluation order) as a graph of their own: what they read from outside
 * becomes inputs (named by input_label), the last op's value the output (named by node_label).
 * reads/read_count (optional) receive the nodes that became inputs, in input order. */
static kf_graph *sub_graph(const kf_plan *p, const uint32_t *ops, uint32_t count, uint32_t *reads,
                           uint32_t *read_count) {
    const kf_graph *g = p->graph;
    kf_graph *sub = kf_graph_create();
    kf_node *map = calloc(g->node_count, sizeof *map);
    bool *mine = calloc(g->node_count, sizeof *mine);
    if (!sub || !map || !mine) {
        kf_graph_destroy(sub);
        free(map);
        free(mine);
        return NULL;
    }
    for (uint32_t i = 0; i < count; i++) {
        mine[ops[i]] = true;
    }
    uint32_t nr = 0;
    char name[KF_NAME_MAX + 16];
    for (uint32_t i = 0; i < count; i++) {
        const kf__node *n = &g->nodes[ops[i]];
        kf_node in[KF_NODE_MAX_INPUTS];
        for (uint32_t j = 0; j < n->input_count; j++) {
            uint32_t a = n->inputs[j];
            const kf__node *an = &g->nodes[a];
            if (!map[a].id && an->kind == KF__NODE_SCALAR) {
                map[a] = kf_graph_scalar(sub, an->scalar);
            } else if (!map[a].id && !mine[a]) {
                input_label(g, a, name, sizeof name);
                map[a] = kf_graph_input(sub, name, &an->shape, an->dtype);
                if (reads && nr < KF_GROUP_MAX_SLOTS) {
                    reads[nr] = a;
                }
                nr++;
            }
            in[j] = map[a];
        }
        map[ops[i]] = kf_graph_op(sub, n->op->name, in, n->input_count, &n->params);
    }
    char out_name[KF_NAME_MAX];
    node_label(g, ops[count - 1], out_name, sizeof out_name);
    kf_graph_output(sub, out_name, map[ops[count - 1]]);
    if (read_count) {
        *read_count = nr < KF_GROUP_MAX_SLOTS ? nr : KF_GROUP_MAX_SLOTS;
    }
    free(map);
    free(mine);
    return sub;
}

/* Does op `id` fail on its own, compiled alone and fed with the values local[] holds for its
 * inputs (the group's reference for what it computes before it)? */
static bool fails_alone(kf_plan *p, uint32_t id, kf_tensor **local, uint64_t seed, kf_graph **out) {
    uint32_t reads[KF_GROUP_MAX_SLOTS], nr = 0;
    kf_graph *sub = sub_graph(p, &id, 1, reads, &nr);
    kf_plan *sp = NULL;
    bool fails = false;
    if (sub && kf_graph_compile(p->ctx, sub, NULL, &sp) == KF_OK) {
        char names[KF_GROUP_MAX_SLOTS][KF_NAME_MAX + 16];
        const char *name_of[KF_GROUP_MAX_SLOTS];
        const kf_tensor *given[KF_GROUP_MAX_SLOTS];
        for (uint32_t i = 0; i < nr; i++) {
            input_label(p->graph, reads[i], names[i], sizeof names[i]);
            name_of[i] = names[i];
            given[i] = local[reads[i]];
        }
        kf_plan_report rep;
        fails = kf_plan_check(sp, name_of, given, nr, seed, &rep) == KF_ERROR_MISMATCH;
    }
    kf_plan_destroy(sp);
    if (fails) {
        *out = sub;
    } else {
        kf_graph_destroy(sub);
    }
    return fails;
}

/* The smallest failing subgraph of failing group gi: the first of its ops that fails alone on
 * the values the group feeds it, else the whole group (the fusion itself is wrong). */
static kf_graph *smallest_failing(kf_plan *p, uint32_t gi, kf_tensor **values, kf_tensor **gpu,
                                  uint64_t seed) {
    group_view v;
    group_view_of(p, &p->groups[gi], &v);
    kf_graph *found = NULL;
    kf_tensor **local = v.op_count > 1 ? calloc(p->graph->node_count, sizeof *local) : NULL;
    if (local && group_reference(p, &v, values, gpu, local) == KF_OK) {
        for (uint32_t i = 0; i < v.op_count && !found; i++) {
            fails_alone(p, v.ops[i], local, seed, &found);
        }
    }
    for (uint32_t i = 0; local && i < v.op_count; i++) {
        kf_tensor_destroy(local[v.ops[i]]);
    }
    free(local);
    return found ? found : sub_graph(p, v.ops, v.op_count, NULL, NULL);
}

static int compare_checks(const group_check *a, const group_check *b) {
    if (a->passed != b->passed) {
        return a->passed ? 1 : -1;
    }
    return a->dispatch < b->dispatch ? -1 : a->dispatch > b->dispatch ? 1 : 0;
}

/* Checks every group that writes a value (each member of a horizontal dispatch on its own) and
 * fills the report's group part. */
static kf_status check_groups(kf_plan *p, kf_tensor **values, uint64_t seed, kf_plan_report *out) {
    const kf_graph *g = p->graph;
    kf_tensor **gpu = calloc(g->node_count, sizeof *gpu);
    uint32_t slots = p->group_count;
    for (uint32_t gi = 0; gi < p->group_count; gi++) {
        slots += p->groups[gi].side_count;
    }
    group_check *checks = calloc(slots ? slots : 1, sizeof *checks);
    kf_status st = gpu && checks ? KF_OK : KF_ERROR_OUT_OF_MEMORY;
    uint32_t n = 0;
    for (uint32_t gi = 0; gi < p->group_count && st == KF_OK; gi++) {
        const kf__group *grp = &p->groups[gi];
        if (grp->kind == KF__GROUP_DEAD || grp->kind == KF__GROUP_HORIZONTAL || !grp->result) {
            continue;
        }
        /* every value the group writes, each on its own (a multi-output group's sides too) */
        for (uint32_t t = 0; t <= grp->side_count && st == KF_OK; t++) {
            st = check_group(p, gi, t ? grp->sides[t - 1] : grp->result, values, gpu, &checks[n]);
            if (st == KF_OK) {
                n++;
            }
        }
    }
    if (st == KF_OK) {
        /* Insertion sort: failed first, then by dispatch; plans hold few groups. */
        for (uint32_t i = 1; i < n; i++) {
            group_check c = checks[i];
            uint32_t j = i;
            for (; j > 0 && compare_checks(&c, &checks[j - 1]) < 0; j--) {
                checks[j] = checks[j - 1];
            }
            checks[j] = c;
        }
        out->total_groups = n;
        int32_t smallest = -1;
        for (uint32_t i = 0; i < n; i++) {
            if (!checks[i].passed) {
                out->failed_groups++;
                if (smallest < 0 || checks[i].op_count < checks[smallest].op_count) {
                    smallest = (int32_t)i;
                }
            }
            if (i < KF_PLAN_MAX_REPORTED) {
                describe_group(p, &checks[i], &out->groups[i]);
                out->group_count = i + 1;
            }
        }
        if (smallest >= 0) {
            kf_graph *sub = smallest_failing(p, checks[smallest].group, values, gpu, seed);
            char *text = sub ? kf_graph_format(sub) : NULL;
            if (text && strlen(text) < sizeof out->failing_graph) {
                memcpy(out->failing_graph, text, strlen(text) + 1);
            }
            kf_free(text);
            kf_graph_destroy(sub);
        }
    }
    for (uint32_t id = 0; gpu && id < g->node_count; id++) {
        kf_tensor_destroy(gpu[id]);
    }
    free(gpu);
    free(checks);
    return st;
}

/* ---- the whole plan ---- */

typedef struct output_check {
    double err, tol;
    bool passed;
} output_check;

kf_status kf__plan_check(kf_plan *p, const kf_tensor *const *given, uint64_t seed,
                         kf_plan_report *out) {
    if (!p || !out) {
        if (p) {
            kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT, "plan check: report is NULL");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    memset(out, 0, sizeof *out);
    const kf_graph *g = p->graph;
    kf_tensor **values = calloc(g->node_count, sizeof *values);
    kf_tensor **shaken = calloc(g->node_count, sizeof *shaken);
    output_check *checks = calloc(g->output_count ? g->output_count : 1, sizeof *checks);
    if (!values || !shaken || !checks) {
        free(values);
        free(shaken);
        free(checks);
        return KF_ERROR_OUT_OF_MEMORY;
    }
    kf_status st = KF_OK;
    /* Fresh inputs, uploaded to the plan and kept for the CPU. */
    for (uint32_t id = 1; id < g->node_count && st == KF_OK; id++) {
        const kf__node *n = &g->nodes[id];
        if (n->kind == KF__NODE_INPUT) {
            if (given && given[id]) {
                st = kf_tensor_create(&n->shape, &values[id]);
                if (st == KF_OK) {
                    memcpy(values[id]->data, given[id]->data,
                           kf_tensor_size(values[id]) * sizeof(float));
                    if (n->dtype == KF_DTYPE_F16) {
                        round_to_half(values[id]);
                    }
                    st = kf__match_device_subnormals(p->ctx, n->dtype, values[id]);
                }
            } else {
                st = kf__plan_random_input(p, id, seed, &values[id]);
            }
            if (st != KF_OK) {
                break;
            }
            st = kf__plan_upload(p, id, values[id]->data);
            if (st == KF_OK) {
                p->inputs_set[id] = true;
            }
        } else if (n->kind == KF__NODE_SCALAR) {
            st = kf_tensor_constant(&n->shape, n->scalar, &values[id]);
        }
    }
    /* Poison every written buffer so an element the plan forgets shows up as NaN. */
    for (uint32_t id = 1; id < g->node_count && st == KF_OK; id++) {
        if (g->nodes[id].kind == KF__NODE_OP && p->buffers[id]) {
            st = kf_buffer_fill_u32(p->buffers[id], 0x7fc07fc0u);
        }
    }
    if (st == KF_OK) {
        st = kf_plan_run(p);
    }
    /* First line: each group on its own inputs, before values[] fills with the reference. */
    if (st == KF_OK) {
        st = check_groups(p, values, seed, out);
    }
    /* Second line, the unfused specification, one operator at a time; then again with every
     * intermediate nudged by its op's tolerance, to see how much this graph amplifies such
     * errors. */
    if (st == KF_OK) {
        st = run_specs(g, values, 0);
    }
    if (st == KF_OK) {
        for (uint32_t id = 1; id < g->node_count; id++) {
            shaken[id] = g->nodes[id].kind == KF__NODE_OP ? NULL : values[id];
        }
        st = run_specs(g, shaken, seed ^ 0x5bd1e995u);
    }
    /* A rewritten plan (split_k): the caller's graph's specs too, on the same inputs (by name),
     * so the outputs are held to the graph the caller wrote, not only to the rewrite's. */
    const kf_graph *src = p->source;
    kf_tensor **source = src ? calloc(src->node_count, sizeof *source) : NULL;
    bool *borrowed = src ? calloc(src->node_count, sizeof *borrowed) : NULL;
    if (src && (!source || !borrowed)) {
        st = st == KF_OK ? KF_ERROR_OUT_OF_MEMORY : st;
    }
    for (uint32_t id = 1; src && st == KF_OK && id < src->node_count; id++) {
        const kf__node *n = &src->nodes[id];
        if (n->kind == KF__NODE_SCALAR) {
            st = kf_tensor_constant(&n->shape, n->scalar, &source[id]);
        }
        for (uint32_t j = 1; n->kind == KF__NODE_INPUT && j < g->node_count; j++) {
            if (g->nodes[j].kind == KF__NODE_INPUT && !strcmp(g->nodes[j].name, n->name)) {
                source[id] = values[j];
                borrowed[id] = true;
            }
        }
    }
    if (src && st == KF_OK) {
        st = run_specs(src, source, 0);
    }
    /* Every element of every output; the report lists failures first. */
    for (uint32_t o = 0; o < g->output_count && st == KF_OK; o++) {
        uint32_t id = g->outputs[o].node;
        const kf__node *n = &g->nodes[id];
        kf_tensor *gpu = NULL;
        st = kf_tensor_create(&n->shape, &gpu);
        if (st == KF_OK) {
            st = kf__plan_download(p, id, gpu->data);
        }
        if (st == KF_OK) {
            /* The measure operator verification uses: relative to the larger of the value and
             * 1% of the output's rms, so values that cancel to nearly zero don't dominate. */
            uint64_t count = kf_tensor_size(gpu);
            double floor = kf__verify_floor(values[id]->data, count);
            double err = kf_max_rel_error(gpu->data, values[id]->data, count, floor);
            if (src) {
                const kf_tensor *want = source[src->outputs[o].node];
                double e2 = kf_max_rel_error(gpu->data, want->data, count, floor);
                err = e2 > err || e2 != e2 ? e2 : err;
            }
            double amplified = kf_max_rel_error(shaken[id]->data, values[id]->data, count, floor);
            double tol = cone_tolerance(g, id);
            tol = tol > 2.0 * amplified ? tol : 2.0 * amplified;
            checks[o] = (output_check){.err = err, .tol = tol, .passed = err <= tol};
        }
        kf_tensor_destroy(gpu);
    }
    if (st == KF_OK) {
        out->total_outputs = g->output_count;
        for (int pass = 0; pass < 2; pass++) {
            for (uint32_t o = 0; o < g->output_count; o++) {
                if (checks[o].passed != (pass == 1)) {
                    continue;
                }
                out->failed_outputs += pass == 0;
                if (out->output_count == KF_PLAN_MAX_REPORTED) {
                    continue;
                }
                uint32_t r = out->output_count++;
                snprintf(out->outputs[r].name, sizeof out->outputs[r].name, "%s",
                         g->outputs[o].name);
                out->outputs[r].index = o;
                out->outputs[r].max_rel_error = checks[o].err;
                out->outputs[r].tolerance = checks[o].tol;
                out->outputs[r].passed = checks[o].passed;
            }
        }
        out->passed = out->failed_outputs == 0 && out->failed_groups == 0;
    }
    for (uint32_t id = 0; id < g->node_count; id++) {
        if (shaken[id] != values[id]) {
            kf_tensor_destroy(shaken[id]);
        }
        kf_tensor_destroy(values[id]);
    }
    for (uint32_t id = 0; src && source && borrowed && id < src->node_count; id++) {
        if (!borrowed[id]) {
            kf_tensor_destroy(source[id]);
        }
    }
    free(source);
    free(borrowed);
    free(values);
    free(shaken);
    free(checks);
    if (st != KF_OK) {
        out->passed = false;
        return st;
    }
    return out->passed ? KF_OK : KF_ERROR_MISMATCH;
}

static uint32_t input_node(const kf_plan *p, const char *name) {
    const kf_graph *g = p->graph;
    for (uint32_t id = 1; name && id < g->node_count; id++) {
        if (g->nodes[id].kind == KF__NODE_INPUT && !strcmp(g->nodes[id].name, name)) {
            return id;
        }
    }
    return 0;
}

kf_status kf_plan_random_input(const kf_plan *p, const char *name, uint64_t seed, kf_tensor **out) {
    if (!p || !out) {
        if (p) {
            kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "kf_plan_random_input: out is NULL");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    *out = NULL;
    uint32_t id = input_node(p, name);
    if (!id) {
        kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT, "plan has no input named '%s'",
                              name ? name : "(null)");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    return kf__plan_random_input(p, id, seed, out);
}

kf_status kf_plan_check(kf_plan *p, const char *const *names, const kf_tensor *const *values,
                        uint32_t count, uint64_t seed, kf_plan_report *out) {
    if (!p || !out || (count && (!names || !values))) {
        if (p) {
            kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT, "kf_plan_check: %s is NULL",
                                  !out     ? "out"
                                  : !names ? "names"
                                           : "values");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    const kf_tensor **given = calloc(p->graph->node_count, sizeof *given);
    if (!given) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    for (uint32_t i = 0; i < count; i++) {
        uint32_t id = input_node(p, names[i]);
        const kf__node *n = id ? &p->graph->nodes[id] : NULL;
        if (!n || !values[i] || !kf_shape_eq(&n->shape, &values[i]->shape)) {
            kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "check: input '%s' is unknown or its shape differs",
                                  names[i] ? names[i] : "(null)");
            free(given);
            return KF_ERROR_INVALID_ARGUMENT;
        }
        given[id] = values[i];
    }
    kf_status st = kf__plan_check(p, given, seed, out);
    free(given);
    return st;
}
