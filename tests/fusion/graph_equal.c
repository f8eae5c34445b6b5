#include "graph_equal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse/fuse_internal.h"

typedef struct matcher {
    const kf_graph *a, *b;
    uint32_t *pair;  /* a's node id -> b's node id (0: not yet seen) */
    uint32_t *rpair; /* and back */
    char *why;
    size_t why_size;
} matcher;

static bool differ(matcher *m, const char *what, uint32_t ia, uint32_t ib) {
    snprintf(m->why, m->why_size, "%s (node %u of the first graph, %u of the second)", what, ia,
             ib);
    return false;
}

static bool same_node(matcher *m, uint32_t ia, uint32_t ib) {
    const kf__node *na = kf__graph_node(m->a, ia), *nb = kf__graph_node(m->b, ib);
    if (!na || !nb) {
        return differ(m, "a node id is invalid", ia, ib);
    }
    if (na->kind != nb->kind) {
        return differ(m, "node kinds differ", ia, ib);
    }
    if (na->kind == KF__NODE_SCALAR) {
        return memcmp(&na->scalar, &nb->scalar, sizeof na->scalar) == 0 ||
               differ(m, "scalar values differ", ia, ib);
    }
    if (m->pair[ia] || m->rpair[ib]) {
        return (m->pair[ia] == ib && m->rpair[ib] == ia) || differ(m, "sharing differs", ia, ib);
    }
    m->pair[ia] = ib;
    m->rpair[ib] = ia;
    if (!kf_shape_eq(&na->shape, &nb->shape) || na->dtype != nb->dtype) {
        return differ(m, "shapes or dtypes differ", ia, ib);
    }
    if (na->kind == KF__NODE_INPUT) {
        return !strcmp(na->name, nb->name) || differ(m, "input names differ", ia, ib);
    }
    if (na->op != nb->op || na->input_count != nb->input_count) {
        return differ(m, "operators or input counts differ", ia, ib);
    }
    for (uint32_t i = 0; i < kf_op_input_count(na->op); i++) {
        if (kf__input_present(na->op, i, &na->params) !=
            kf__input_present(nb->op, i, &nb->params)) {
            return differ(m, "optional inputs differ", ia, ib);
        }
    }
    for (uint32_t i = 0; i < kf_op_param_count(na->op); i++) {
        double va = kf_op_param_value(na->op, &na->params, i);
        double vb = kf_op_param_value(nb->op, &nb->params, i);
        if (memcmp(&va, &vb, sizeof va) != 0) {
            kf_op_param_info info;
            kf_op_param_info_at(na->op, i, &info);
            char what[128];
            snprintf(what, sizeof what, "%s: %s is %.9g against %.9g", na->op->name, info.name, va,
                     vb);
            return differ(m, what, ia, ib);
        }
        kf_op_param_info info;
        kf_op_param_info_at(na->op, i, &info);
        if (info.type == KF_PARAM_TYPE_INT_LIST &&
            memcmp(na->params.list, nb->params.list, sizeof(int32_t) * na->params.list_count)) {
            return differ(m, "list parameters differ", ia, ib);
        }
    }
    for (uint32_t i = 0; i < na->input_count; i++) {
        if (!same_node(m, na->inputs[i], nb->inputs[i])) {
            return false;
        }
    }
    return true;
}

bool kt_graph_equal(const kf_graph *a, const kf_graph *b, char *why, size_t why_size) {
    snprintf(why, why_size, "equal");
    uint32_t inputs = kf_graph_input_count(a);
    if (inputs != kf_graph_input_count(b) || a->output_count != b->output_count) {
        snprintf(why, why_size, "%u inputs and %u outputs against %u and %u", inputs,
                 a->output_count, kf_graph_input_count(b), b->output_count);
        return false;
    }
    for (uint32_t i = 0; i < inputs; i++) {
        const char *na, *nb;
        kf_shape sa, sb;
        kf_dtype da, db;
        kf_graph_input_info(a, i, &na, &sa, &da);
        kf_graph_input_info(b, i, &nb, &sb, &db);
        if (strcmp(na, nb) || !kf_shape_eq(&sa, &sb) || da != db) {
            snprintf(why, why_size, "input %u: %s against %s", i, na, nb);
            return false;
        }
    }
    uint32_t ops_a = 0, ops_b = 0;
    for (uint32_t i = 1; i < a->node_count; i++) {
        ops_a += a->nodes[i].kind == KF__NODE_OP;
    }
    for (uint32_t i = 1; i < b->node_count; i++) {
        ops_b += b->nodes[i].kind == KF__NODE_OP;
    }
    if (ops_a != ops_b) {
        snprintf(why, why_size, "%u operators against %u", ops_a, ops_b);
        return false;
    }
    matcher m = {a,
                 b,
                 calloc(a->node_count, sizeof(uint32_t)),
                 calloc(b->node_count, sizeof(uint32_t)),
                 why,
                 why_size};
    bool same = m.pair && m.rpair;
    for (uint32_t o = 0; same && o < a->output_count; o++) {
        if (strcmp(a->outputs[o].name, b->outputs[o].name)) {
            snprintf(why, why_size, "output %u: %s against %s", o, a->outputs[o].name,
                     b->outputs[o].name);
            same = false;
        } else {
            same = same_node(&m, a->outputs[o].node, b->outputs[o].node);
        }
    }
    free(m.pair);
    free(m.rpair);
    return same;
}
