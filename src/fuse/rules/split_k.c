/* Split-K: a product with few output tiles and a long K (a weight gradient dW = X^T dY, M x N
 * = 128 x 512, K = every token of the batch) runs as S partial products over K slices and a
 * column sum of the partials, as cuBLAS does: one workgroup per output tile looping over all of K
 * leaves most of a GPU idle (16 workgroups for 132 SMs at 128 x 512; measured on an H200 at
 * 0.25-0.29 ms each, against 0.02-0.06 ms for the same-size products of the forward pass).
 *
 * A rewrite of the plan's own graph before planning (kf__fusion_rule.rewrite):
 *
 *   matmul(a [K, M], b [K, N], transpose_a)
 *     -> P = matmul(reshape(a, [S, K/S, M]), reshape(b, [S, K/S, N]), transpose_a)  [S, M, N]
 *        reshape(sum_leading(reshape(P, [S, M N])), [M, N])
 *
 * Every node is a verified operator and each reshape is read in place: a and b's reshapes are
 * free views (or join the views a prologue composes into the product's loads: the GPT's
 * permute |> reshape), P's reshape aliases P's buffer, and the last reshape with whatever
 * element-wise work followed the product (its epilogue) is the sum's store phase (this rule's
 * group, opened at the sum). Two dispatches instead of one, S M N partials written and read back
 * (4 MB at 128 x 512, S 16).
 *
 * Deterministic: the partials are fixed slices of K, summed in slice order by sum_leading's
 * column kernel; no atomics. Only f32 rounding moves (K/S-term sums then S-term sums), which
 * kf_plan_verify's tolerances (the product's and the sum's) cover.
 *
 * When: f32, a is read transposed and b not, both rank 2 (the layout whose K slices are
 * contiguous: reshapes, no copies), K >= SPLIT_K_MIN_K, and the output has few tiles: S is the
 * largest divisor of K with S <= SPLIT_K_TARGET / tiles (64 x 64 tiles, device-agnostic: about
 * 2x the SMs of today's large GPUs) and K / S >= SPLIT_K_MIN_SLICE; none when S < 2.
 * $KF_NO_SPLIT_K=1 turns the rule off (before/after runs); $KF_SPLIT_K_SLICES=S asks for S
 * slices wherever S divides K and K / S >= 64 (benches). Off when fusion is off, so the unfused
 * plan is the original graph.
 *
 * Composition: rmsnorm_matmul folds a norm into a product that reads it directly; a split
 * product reads the norm through a reshape, so that fold does not apply to it (split-K takes
 * those dW products). A product whose operand a sum_leading also reads is not split: bias_grad
 * computes that db = sum_leading(dY) in the dW kernel, one dispatch for both. */
#include <stdlib.h>
#include <string.h>

#include "fuse/rules/rule.h"
#include "ops/ops_internal.h"

#define SPLIT_K_MIN_K 1024u
#define SPLIT_K_TILE 64u
#define SPLIT_K_TARGET 256u
#define SPLIT_K_MIN_SLICE 256u

static bool env_set(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

/* The slices node id's product splits into, or 0. */
static uint32_t slices_for(const kf_graph *g, uint32_t id, uint32_t forced) {
    const kf__node *n = &g->nodes[id];
    if (n->kind != KF__NODE_OP || n->op != &kf__op_matmul || n->input_count != 2 ||
        n->dtype != KF_DTYPE_F32 || !n->params.transpose_a || n->params.transpose_b) {
        return 0;
    }
    const kf_shape *a = &g->nodes[n->inputs[0]].shape, *b = &g->nodes[n->inputs[1]].shape;
    if (a->rank != 2 || b->rank != 2 || a->dims[0] != b->dims[0] ||
        g->nodes[n->inputs[0]].dtype != KF_DTYPE_F32 ||
        g->nodes[n->inputs[1]].dtype != KF_DTYPE_F32) {
        return 0;
    }
    for (uint32_t c = 1; c < g->node_count; c++) {
        const kf__node *r = &g->nodes[c];
        if (r->kind == KF__NODE_OP && r->op == &kf__op_sum_leading && r->input_count == 1 &&
            (r->inputs[0] == n->inputs[0] || r->inputs[0] == n->inputs[1])) {
            return 0; /* db = sum_leading(dY) rides in this product's kernel (bias_grad.c) */
        }
    }
    uint64_t k = a->dims[0], m = a->dims[1], cols = b->dims[1];
    if (forced) {
        return forced >= 2 && k % forced == 0 && k / forced >= 64 ? forced : 0;
    }
    if (k < SPLIT_K_MIN_K) {
        return 0;
    }
    uint64_t tiles =
        ((m + SPLIT_K_TILE - 1) / SPLIT_K_TILE) * ((cols + SPLIT_K_TILE - 1) / SPLIT_K_TILE);
    uint64_t s = SPLIT_K_TARGET / tiles;
    if (s > k / SPLIT_K_MIN_SLICE) {
        s = k / SPLIT_K_MIN_SLICE;
    }
    while (s >= 2 && k % s) {
        s--;
    }
    return s >= 2 ? (uint32_t)s : 0;
}

typedef struct split_nodes {
    kf__node *nodes;
    uint32_t count;
    bool failed;
} split_nodes;

/* Appends an operator node (its shape and dtype from its inputs), returning its id, or 0. */
static uint32_t push_op(split_nodes *s, const kf_operator *op, const kf_op_params *params,
                        const uint32_t *inputs, uint32_t count) {
    if (s->failed) {
        return 0;
    }
    kf__node n = {.kind = KF__NODE_OP, .op = op, .params = *params, .input_count = count};
    kf_shape shapes[KF_NODE_MAX_INPUTS];
    for (uint32_t i = 0; i < count; i++) {
        n.inputs[i] = inputs[i];
        shapes[i] = s->nodes[inputs[i]].shape;
    }
    n.dtype = s->nodes[inputs[0]].dtype;
    if (kf_op_shape(op, shapes, params, &n.shape, NULL, 0) != KF_OK) {
        s->failed = true;
        return 0;
    }
    s->nodes[s->count] = n;
    return s->count++;
}

static uint32_t push_reshape(split_nodes *s, uint32_t x, uint32_t rank, const uint64_t *dims) {
    kf_op_params p = {.list_count = rank, .given = KF_PARAM_LIST};
    for (uint32_t d = 0; d < rank; d++) {
        p.list[d] = (int32_t)dims[d];
    }
    return push_op(s, &kf__op_reshape, &p, &x, 1);
}

/* The split form of product n (its inputs already renumbered) in s slices; returns the node
 * that stands for the product's value. */
static uint32_t push_split(split_nodes *s, const kf__node *n, uint32_t slices) {
    const kf_shape *a = &s->nodes[n->inputs[0]].shape, *b = &s->nodes[n->inputs[1]].shape;
    uint64_t k = a->dims[0], m = a->dims[1], cols = b->dims[1];
    uint64_t ad[3] = {slices, k / slices, m}, bd[3] = {slices, k / slices, cols};
    uint32_t in[2] = {push_reshape(s, n->inputs[0], 3, ad), push_reshape(s, n->inputs[1], 3, bd)};
    kf_op_params mp = {.transpose_a = true, .given = KF_PARAM_TRANSPOSE_A};
    uint32_t parts = push_op(s, &kf__op_matmul, &mp, in, 2);
    uint64_t rows[2] = {slices, m * cols}, out[2] = {m, cols};
    uint32_t flat = push_reshape(s, parts, 2, rows);
    kf_op_params none = {0};
    uint32_t sum = push_op(s, &kf__op_sum_leading, &none, &flat, 1);
    return push_reshape(s, sum, 2, out);
}

static void split_k_rewrite(kf_plan *p) {
    kf_graph *g = p->graph;
    if (env_set("KF_NO_SPLIT_K")) {
        return;
    }
    const char *forced_env = getenv("KF_SPLIT_K_SLICES");
    uint32_t forced = forced_env ? (uint32_t)strtoul(forced_env, NULL, 10) : 0;
    uint32_t nn = g->node_count, splits = 0;
    uint32_t *slices = calloc(nn, sizeof *slices);
    uint32_t *map = calloc(nn, sizeof *map);
    if (!slices || !map) {
        free(slices);
        free(map);
        kf__plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory planning split-K");
        return;
    }
    for (uint32_t id = 1; id < nn; id++) {
        slices[id] = slices_for(g, id, forced);
        splits += slices[id] != 0;
    }
    split_nodes s = {.nodes = splits ? calloc(nn + 6u * splits, sizeof *s.nodes) : NULL,
                     .count = 1};
    if (splits && !s.nodes) {
        kf__plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory planning split-K");
    }
    /* Renumbered so that ids stay in evaluation order (the planner and the specs walk them so):
     * each split product's nodes take its place, the nodes after it move up. */
    for (uint32_t id = 1; s.nodes && id < nn && !s.failed; id++) {
        kf__node n = g->nodes[id];
        for (uint32_t i = 0; n.kind == KF__NODE_OP && i < n.input_count; i++) {
            n.inputs[i] = map[n.inputs[i]];
        }
        if (slices[id]) {
            map[id] = push_split(&s, &n, slices[id]);
        } else {
            s.nodes[s.count] = n;
            map[id] = s.count++;
        }
    }
    if (s.nodes && !s.failed) {
        p->source = kf__graph_copy(g);
        if (!p->source) {
            kf__plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory planning split-K");
        }
        for (uint32_t o = 0; o < g->output_count; o++) {
            g->outputs[o].node = map[g->outputs[o].node];
        }
        free(g->nodes);
        g->nodes = s.nodes;
        g->node_capacity = nn + 6u * splits;
        g->node_count = s.count;
        p->graph_nodes = s.count; /* rules that append nodes after this one */
        s.nodes = NULL;
    } else if (s.failed) {
        kf__plan_fail(p, KF_ERROR_INTERNAL, "split-K: a rewritten node's shape does not check");
    }
    free(s.nodes);
    free(slices);
    free(map);
}

/* The sum of a split product: sum_leading(reshape(P)), P a batched matmul of transposed a. */
static bool is_split_sum(const kf_graph *g, uint32_t node) {
    const kf__node *n = &g->nodes[node];
    if (n->op != &kf__op_sum_leading || n->input_count != 1) {
        return false;
    }
    const kf__node *flat = &g->nodes[n->inputs[0]];
    if (flat->kind != KF__NODE_OP || flat->op != &kf__op_reshape) {
        return false;
    }
    const kf__node *parts = &g->nodes[flat->inputs[0]];
    return parts->kind == KF__NODE_OP && parts->op == &kf__op_matmul && parts->shape.rank == 3 &&
           parts->params.transpose_a && flat->shape.rank == 2 &&
           flat->shape.dims[0] == parts->shape.dims[0];
}

static kf__group *split_open(kf_plan *p, uint32_t node) {
    if (!is_split_sum(p->graph, node)) {
        return NULL;
    }
    return kf__plan_open_group(p, &kf__rule_split_k, KF__GROUP_PRODUCER, node);
}

/* The reshape back to [M, N] keeps the linear order (each invocation stores the column it
 * summed), so it and the product's epilogue after it are the sum's store phase. */
static bool split_accepts(const kf_plan *p, const kf__group *grp, uint32_t node) {
    (void)grp;
    const kf_operator *op = p->graph->nodes[node].op;
    return kf__op_is_elementwise(op) || (op->view_index && op->view_linear);
}

static kf_kernel *split_build(kf_plan *p, kf__group *grp, kf__compiled *c) {
    return kf__build_rooted(p, grp, c, kf__root_kernel(p, grp));
}

static const char *split_explain(const kf_plan *p, const kf__group *grp) {
    (void)p;
    return grp->node_count > 1 ? "split-K sum + epilogue" : "split-K sum";
}

const kf__fusion_rule kf__rule_split_k = {
    .name = "split-K",
    .rewrite = split_k_rewrite,
    .open = split_open,
    .accepts = split_accepts,
    .build = split_build,
    .explain = split_explain,
};
