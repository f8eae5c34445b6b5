/* Reverse-mode autodiff on the lazy graph: a graph pass that appends, for a scalar loss, the
 * gradient nodes of chosen nodes. Every gradient is an ordinary operator node (the backward
 * operators of src/ops/..._backward.c, or forward operators where they already are the gradient:
 * mul, neg, scale, matmul with transposes), so the planner fuses the backward graph with the
 * rules it has and kf_plan_verify proves it like any other (docs/training.md).
 *
 * One rule per operator (tinygrad's gradient.py, ggml_compute_backward): given dy, the gradient
 * of the node's output, the gradient of each input that needs one. Nodes are visited from the
 * loss down in reverse id order, which is a reverse topological order since a node's inputs
 * always have smaller ids; a node's gradient is complete when it is visited, as everything that
 * reads it was visited before. A value read twice gets the sum of both gradients (add), and an
 * input an element-wise operator broadcast gets its gradient summed back to its shape (sum_leading
 * for a bias row, sum_to otherwise). */
#include "fuse/fuse_internal.h"
#include "ops/operator.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void grad_fail(kf_graph *g, kf_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void grad_fail(kf_graph *g, kf_status st, const char *fmt, ...) {
    if (g->status != KF_OK) {
        return;
    }
    g->status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->error, sizeof g->error, fmt, ap);
    va_end(ap);
}

typedef struct grad_pass {
    kf_graph *g;
    uint32_t count; /* nodes before the pass: only they can need gradients */
    uint32_t *grad; /* node id -> its gradient's node id (0: none yet) */
    bool *needs;    /* node id -> some wrt node reaches it */
    uint32_t node;  /* the node whose rule runs (rules get a copy of it) */
} grad_pass;

static kf_node node_of(uint32_t id) {
    return (kf_node){id};
}

static kf_node call(grad_pass *s, const char *op, const kf_node *in, uint32_t n,
                    const kf_op_params *p) {
    return kf_graph_op(s->g, op, in, n, p);
}

static kf_node call1(grad_pass *s, const char *op, kf_node a, const kf_op_params *p) {
    return call(s, op, &a, 1, p);
}

static kf_node call2(grad_pass *s, const char *op, kf_node a, kf_node b, const kf_op_params *p) {
    kf_node in[2] = {a, b};
    return call(s, op, in, 2, p);
}

/* g (the forward output's shape) summed back to the shape of input node `input`. */
static kf_node reduce_to(grad_pass *s, kf_node g, uint32_t input) {
    kf_shape gs = kf_graph_shape(s->g, g), is = kf_graph_shape(s->g, node_of(input));
    if (!g.id || kf_shape_eq(&gs, &is)) {
        return g;
    }
    if (is.rank == 1 && gs.rank >= 1 && gs.dims[gs.rank - 1] == is.dims[0]) {
        return call1(s, "sum_leading", g, NULL); /* a bias row */
    }
    return call2(s, "sum_to", g, node_of(input), NULL);
}

static void accumulate(grad_pass *s, uint32_t id, kf_node g) {
    if (!g.id || s->g->status != KF_OK) {
        return;
    }
    g = reduce_to(s, g, id);
    s->grad[id] = s->grad[id] ? kf_graph_add(s->g, node_of(s->grad[id]), g).id : g.id;
}

/* The element-wise rules: linear ops by forward ops, the others by NAME_grad (unary) or
 * NAME_grad_a / NAME_grad_b (binary), the forward inputs followed by dy. */
static kf_node elementwise_rule(grad_pass *s, const kf__node *n, uint32_t i, kf_node dy,
                                bool *refused) {
    const char *name = n->op->name;
    kf_node a = node_of(n->inputs[0]);
    kf_node b = node_of(n->input_count > 1 ? n->inputs[1] : 0);
    if (!strcmp(name, "add") || !strcmp(name, "copy") || !strcmp(name, "broadcast_to")) {
        return i == 0 || !strcmp(name, "add") ? dy : (kf_node){0};
    }
    if (!strcmp(name, "sub")) {
        return i == 0 ? dy : kf_graph_unary(s->g, "neg", dy);
    }
    if (!strcmp(name, "neg")) {
        return kf_graph_unary(s->g, "neg", dy);
    }
    if (!strcmp(name, "mul")) {
        return kf_graph_mul(s->g, dy, i == 0 ? b : a);
    }
    if (!strcmp(name, "div") && i == 0) {
        return call2(s, "div", dy, b, NULL);
    }
    if (!strcmp(name, "scale") || !strcmp(name, "affine")) {
        kf_op_params p = n->params; /* alpha, given or not (scale(x, 0) is 0); beta unread */
        return call1(s, "scale", dy, &p);
    }
    char grad_name[KF_NAME_MAX];
    if (n->input_count == 1) {
        snprintf(grad_name, sizeof grad_name, "%s_grad", name);
    } else {
        snprintf(grad_name, sizeof grad_name, "%s_grad_%c", name, (char)('a' + i));
    }
    if (!kf_op_find(grad_name)) {
        *refused = true;
        return (kf_node){0};
    }
    kf_node in[KF_NODE_MAX_INPUTS + 1];
    for (uint32_t j = 0; j < n->input_count; j++) {
        in[j] = node_of(n->inputs[j]);
    }
    in[n->input_count] = dy;
    return call(s, grad_name, in, n->input_count + 1, &n->params);
}

/* The products of a tensor's batch dims (all but its last two). */
static uint64_t batch_count(const kf_shape *s) {
    uint64_t count = 1;
    for (uint32_t d = 0; d + 2 < s->rank; d++) {
        count *= s->dims[d];
    }
    return count;
}

/* d op(a) op(b): da = dy op(b)^T (stored transposed back when a is), db = op(a)^T dy, per
 * product of the batch. An input broadcast along the batch (b [K, N] shared by every product)
 * has its gradient summed over the products it was broadcast to, which a matmul node cannot
 * do: matmul_grad_a / matmul_grad_b sum it in their kernel. */
static kf_node matmul_rule(grad_pass *s, const kf__node *n, uint32_t i, kf_node dy) {
    kf_node a = node_of(n->inputs[0]), b = node_of(n->inputs[1]);
    bool ta = n->params.transpose_a, tb = n->params.transpose_b;
    const kf_shape *x = &s->g->nodes[n->inputs[i]].shape;
    if (batch_count(x) < batch_count(&n->shape)) {
        kf_node in[3] = {a, b, dy};
        return call(s, i == 0 ? "matmul_grad_a" : "matmul_grad_b", in, 3, &n->params);
    }
    kf_op_params p = {0};
    if (i == 0 && !ta) { /* da = dy op(b)^T */
        p.transpose_b = !tb;
        return call2(s, "matmul", dy, b, &p);
    }
    if (i == 0) { /* a^T's gradient transposed: op(b) dy^T */
        p.transpose_a = tb;
        p.transpose_b = true;
        return call2(s, "matmul", b, dy, &p);
    }
    if (!tb) { /* db = op(a)^T dy */
        p.transpose_a = !ta;
        return call2(s, "matmul", a, dy, &p);
    }
    p.transpose_a = true; /* b^T's gradient transposed: dy^T op(a) */
    p.transpose_b = ta;
    return call2(s, "matmul", dy, a, &p);
}

/* rmsnorm / layernorm: dx and dw by their backward operators (the bias is not an input of
 * either: it does not change them), db = sum_leading(dy). */
static kf_node norm_rule(grad_pass *s, const kf__node *n, uint32_t i, kf_node dy) {
    bool has_w = n->params.has_weight;
    uint32_t bias_at = has_w ? 2u : 1u;
    if (n->params.has_bias && i == bias_at) {
        return call1(s, "sum_leading", dy, NULL);
    }
    kf_op_params p = n->params;
    p.has_bias = false;
    kf_node in[3] = {node_of(n->inputs[0]), has_w ? node_of(n->inputs[1]) : dy, dy};
    char grad_name[KF_NAME_MAX];
    snprintf(grad_name, sizeof grad_name, "%s_grad_%s", n->op->name, i == 0 ? "x" : "w");
    return call(s, grad_name, in, has_w ? 3u : 2u, &p);
}

/* attention: dq, dk and dv by attention_grad_q / _k / _v from one g = [dy | lse | dy . o] (the
 * packed statistics; src/ops/attention.c says why), made for the first input asked and found
 * again for the others: attention_grad_pack(dy, o, lse) from the forward's own o and its row
 * statistics attention_lse(q, k, v), which the planner makes a second output of the forward's
 * kernel (src/fuse/rules/companion.c), so the backward does not run the forward again. dq takes
 * g; dk and dv take g' = attention_grad_stats(q, k, v, g), whose delta is exact where g's comes
 * from o as stored (f16: 2^-12 of it, 1.4% of dk's rms at T 1024), and which dq's kernel writes
 * on the way (its companion). */
static kf_node attention_rule(grad_pass *s, const kf__node *n, uint32_t i, kf_node dy) {
    kf_node in[4] = {node_of(n->inputs[0]), node_of(n->inputs[1]), node_of(n->inputs[2]), dy};
    kf_node o = node_of(s->node);
    const kf_op_params params = n->params;
    kf_node pack = {0}, stats = {0};
    for (uint32_t id = s->count; id < s->g->node_count && !pack.id; id++) {
        const kf__node *m = &s->g->nodes[id];
        bool same = m->kind == KF__NODE_OP && !strcmp(m->op->name, "attention_grad_pack") &&
                    m->input_count == 3 && m->inputs[0] == dy.id && m->inputs[1] == o.id;
        pack.id = same ? id : 0;
    }
    for (uint32_t id = pack.id + 1; pack.id && id < s->g->node_count && !stats.id; id++) {
        const kf__node *m = &s->g->nodes[id];
        bool same = m->kind == KF__NODE_OP && !strcmp(m->op->name, "attention_grad_stats") &&
                    m->inputs[3] == pack.id;
        stats.id = same ? id : 0;
    }
    if (!pack.id) {
        kf_node lse = call(s, "attention_lse", in, 3, &params);
        kf_node pin[3] = {dy, o, lse};
        kf_op_params none = {0};
        pack = call(s, "attention_grad_pack", pin, 3, &none);
    }
    in[3] = pack;
    if (i != 0 && !stats.id) {
        stats = call(s, "attention_grad_stats", in, 4, &params);
    }
    static const char *const names[3] = {"attention_grad_q", "attention_grad_k",
                                         "attention_grad_v"};
    in[3] = i == 0 ? pack : stats;
    return call(s, names[i], in, 4, &params);
}

/* Views: reshape's gradient is dy reshaped back, permute's dy permuted by the inverse axes,
 * concat's the two slices of dy (slice's is its backward operator, slice_grad, found by name). */
static kf_node view_rule(grad_pass *s, const kf__node *n, uint32_t i, kf_node dy) {
    const kf_shape in = kf_graph_shape(s->g, node_of(n->inputs[i]));
    kf_op_params p = {0};
    if (!strcmp(n->op->name, "reshape")) {
        p.list_count = in.rank;
        p.given = KF_PARAM_LIST;
        for (uint32_t d = 0; d < in.rank; d++) {
            p.list[d] = (int32_t)in.dims[d];
        }
        return call1(s, "reshape", dy, &p);
    }
    if (!strcmp(n->op->name, "permute")) {
        p.list_count = in.rank;
        p.given = KF_PARAM_LIST;
        for (uint32_t d = 0; d < in.rank; d++) {
            int32_t a = n->params.list[d];
            p.list[a < 0 ? a + (int32_t)in.rank : a] = (int32_t)d;
        }
        return call1(s, "permute", dy, &p);
    }
    /* concat: dy along the axis, [0, A) for a, [A, A + B) for b */
    const kf_shape a = kf_graph_shape(s->g, node_of(n->inputs[0]));
    int32_t axis = n->params.axis < 0 ? n->params.axis + (int32_t)a.rank : n->params.axis;
    p.axis = axis;
    p.start = i == 0 ? 0 : (int32_t)a.dims[axis];
    p.length = (int32_t)in.dims[axis];
    p.given = KF_PARAM_AXIS | KF_PARAM_START | KF_PARAM_LENGTH;
    return call1(s, "slice", dy, &p);
}

/* The gradient of input i of node n given dy, or {0} with *refused set when n's operator has no
 * rule. */
static kf_node rule(grad_pass *s, const kf__node *n, uint32_t i, kf_node dy, bool *refused) {
    const kf_operator *op = n->op;
    const char *name = op->name;
    if (op->grad_of) {
        *refused = true; /* second derivatives: no backward operator has a backward */
        return (kf_node){0};
    }
    if (op->op_class == KF_OP_CLASS_ELEMENTWISE) {
        return elementwise_rule(s, n, i, dy, refused);
    }
    if (!strcmp(name, "matmul")) {
        return matmul_rule(s, n, i, dy);
    }
    if (!strcmp(name, "transpose")) {
        return kf_graph_unary(s->g, "transpose", dy);
    }
    if (!strcmp(name, "reshape") || !strcmp(name, "permute") || !strcmp(name, "concat")) {
        return view_rule(s, n, i, dy);
    }
    if (!strcmp(name, "rmsnorm") || !strcmp(name, "layernorm")) {
        return norm_rule(s, n, i, dy);
    }
    if (!strcmp(name, "attention")) {
        return attention_rule(s, n, i, dy);
    }
    if (!strcmp(name, "sum_leading") || (!strcmp(name, "sum_to") && i == 0)) {
        return call2(s, "broadcast_to", dy, node_of(n->inputs[0]), NULL);
    }
    if (!strcmp(name, "sum_to")) {
        return (kf_node){0}; /* like is read for its shape only */
    }
    char grad_name[KF_NAME_MAX];
    snprintf(grad_name, sizeof grad_name, "%s_grad", name);
    const kf_operator *g = kf_op_find(grad_name);
    if (!g || g->grad_of != op || g->grad_input != i) {
        *refused = true;
        return (kf_node){0};
    }
    kf_node in[KF_NODE_MAX_INPUTS + 1];
    for (uint32_t j = 0; j < n->input_count; j++) {
        in[j] = node_of(n->inputs[j]);
    }
    in[n->input_count] = dy;
    return call(s, grad_name, in, n->input_count + 1, &n->params);
}

static kf_status check_args(kf_graph *g, kf_node loss, const kf_node *wrt, uint32_t count,
                            kf_node *grads_out) {
    if (g->status != KF_OK) {
        return g->status;
    }
    if ((count && (!wrt || !grads_out))) {
        grad_fail(g, KF_ERROR_INVALID_ARGUMENT, "grad: wrt and grads_out are needed");
        return g->status;
    }
    const kf__node *l = kf__graph_node(g, loss.id);
    if (!l) {
        grad_fail(g, KF_ERROR_INVALID_ARGUMENT, "grad: the loss is not a node of this graph");
        return g->status;
    }
    if (l->shape.rank != 0 || l->kind == KF__NODE_SCALAR) {
        char buf[64];
        grad_fail(g, KF_ERROR_SHAPE,
                  "grad: the loss must be a rank-0 tensor, got %s: reduce it to one with sum or "
                  "mean (sum(sum(x)) for a matrix) or use cross_entropy",
                  l->kind == KF__NODE_SCALAR ? "a constant"
                                             : kf_shape_str(&l->shape, buf, sizeof buf));
        return g->status;
    }
    for (uint32_t i = 0; i < count; i++) {
        const kf__node *w = kf__graph_node(g, wrt[i].id);
        if (!w || w->kind == KF__NODE_SCALAR || w->dtype == KF_DTYPE_I32) {
            grad_fail(g, KF_ERROR_INVALID_ARGUMENT, "grad: argument %u %s", i + 1,
                      !w                           ? "is not a node of this graph"
                      : w->kind == KF__NODE_SCALAR ? "is a constant, which has no gradient"
                                                   : "is an i32 tensor (class indices have "
                                                     "no gradient)");
            return g->status;
        }
    }
    return KF_OK;
}

kf_status kf_graph_grad(kf_graph *g, kf_node loss, const kf_node *wrt, uint32_t count,
                        kf_node *grads_out) {
    if (!g) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    for (uint32_t i = 0; grads_out && i < count; i++) {
        grads_out[i] = (kf_node){0};
    }
    kf_status st = check_args(g, loss, wrt, count, grads_out);
    if (st != KF_OK) {
        return st;
    }
    grad_pass s = {.g = g, .count = g->node_count};
    s.grad = calloc(s.count, sizeof *s.grad);
    s.needs = calloc(s.count, sizeof *s.needs);
    if (!s.grad || !s.needs) {
        free(s.grad);
        free(s.needs);
        grad_fail(g, KF_ERROR_OUT_OF_MEMORY, "grad: out of memory");
        return g->status;
    }
    for (uint32_t i = 0; i < count; i++) {
        s.needs[wrt[i].id] = true;
    }
    for (uint32_t id = 1; id < s.count; id++) {
        const kf__node *n = &g->nodes[id];
        for (uint32_t j = 0; n->kind == KF__NODE_OP && j < n->input_count; j++) {
            s.needs[id] = s.needs[id] || s.needs[n->inputs[j]];
        }
    }
    /* the seed: d loss / d loss = 1, a tensor of the loss's shape whatever the loss's value */
    s.grad[loss.id] =
        kf_graph_op(g, "broadcast_to", (kf_node[]){kf_graph_scalar(g, 1.0f), loss}, 2, NULL).id;
    for (uint32_t id = loss.id; id > 0 && g->status == KF_OK; id--) {
        if (!s.grad[id] || !s.needs[id] || g->nodes[id].kind != KF__NODE_OP) {
            continue;
        }
        kf__node n = g->nodes[id]; /* a copy: recording nodes may move the array */
        s.node = id;
        kf_node dy = node_of(s.grad[id]);
        for (uint32_t i = 0; i < n.input_count && g->status == KF_OK; i++) {
            uint32_t in = n.inputs[i];
            if (!s.needs[in] || (n.op->index_inputs >> i) & 1u) {
                continue;
            }
            bool refused = false;
            kf_node gi = rule(&s, &n, i, dy, &refused);
            if (refused) {
                grad_fail(g, KF_ERROR_UNSUPPORTED,
                          "grad: %s is not differentiable%s (docs/training.md lists the "
                          "operators autodiff supports)",
                          n.op->name,
                          n.op->grad_of ? " (a backward operator: second derivatives are not "
                                          "supported)"
                                        : "");
                break;
            }
            accumulate(&s, in, gi);
        }
    }
    for (uint32_t i = 0; i < count && g->status == KF_OK; i++) {
        uint32_t w = wrt[i].id;
        kf_node gw = node_of(s.grad[w]);
        if (!gw.id) {
            /* the loss does not depend on it: zeros of its shape */
            gw = kf_graph_op(g, "broadcast_to", (kf_node[]){kf_graph_scalar(g, 0.0f), node_of(w)},
                             2, NULL);
        }
        grads_out[i] = gw;
    }
    free(s.grad);
    free(s.needs);
    if (g->status != KF_OK) {
        for (uint32_t i = 0; i < count; i++) {
            grads_out[i] = (kf_node){0};
        }
    }
    return g->status;
}
