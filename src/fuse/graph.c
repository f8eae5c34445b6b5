/* The lazy graph: operators recorded on tensors, shapes checked as they are recorded. */
#include "fuse/fuse_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void graph_fail(kf_graph *g, kf_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void graph_fail(kf_graph *g, kf_status st, const char *fmt, ...) {
    if (g->status != KF_OK) {
        return; /* the first error is the one worth reading */
    }
    g->status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->error, sizeof g->error, fmt, ap);
    va_end(ap);
}

/* A query on a graph that failed (an index past the end): its message, without making the graph
 * failed, and never over a build error (kf_graph_error gives the first build error, else this). */
static kf_status query_fail(const kf_graph *g, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static kf_status query_fail(const kf_graph *g, const char *fmt, ...) {
    if (g && g->status == KF_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(((kf_graph *)g)->error, sizeof g->error, fmt, ap); /* the caller's object */
        va_end(ap);
    }
    return KF_ERROR_INVALID_ARGUMENT;
}

kf_graph *kf_graph_create(void) {
    kf_graph *g = calloc(1, sizeof *g);
    if (!g) {
        return NULL;
    }
    g->node_capacity = 16;
    g->nodes = calloc(g->node_capacity, sizeof *g->nodes);
    if (!g->nodes) {
        free(g);
        return NULL;
    }
    g->node_count = 1; /* id 0 is the invalid node */
    return g;
}

void kf_graph_destroy(kf_graph *g) {
    if (!g) {
        return;
    }
    free(g->nodes);
    free(g->outputs);
    free(g);
}

kf_status kf_graph_status(const kf_graph *g) {
    return g ? g->status : KF_ERROR_INVALID_ARGUMENT;
}

const char *kf_graph_error(const kf_graph *g) {
    return g ? g->error : "graph is NULL";
}

kf_graph *kf__graph_copy(const kf_graph *g) {
    kf_graph *c = calloc(1, sizeof *c);
    if (!c) {
        return NULL;
    }
    *c = *g;
    c->nodes = malloc(sizeof *c->nodes * g->node_capacity);
    c->outputs = g->output_capacity ? malloc(sizeof *c->outputs * g->output_capacity) : NULL;
    if (!c->nodes || (g->output_capacity && !c->outputs)) {
        kf_graph_destroy(c);
        return NULL;
    }
    memcpy(c->nodes, g->nodes, sizeof *c->nodes * g->node_count);
    if (g->output_count) {
        memcpy(c->outputs, g->outputs, sizeof *c->outputs * g->output_count);
    }
    return c;
}

const kf__node *kf__graph_node(const kf_graph *g, uint32_t id) {
    return id > 0 && id < g->node_count ? &g->nodes[id] : NULL;
}

bool kf__op_is_elementwise(const kf_operator *op) {
    return op && op->op_class == KF_OP_CLASS_ELEMENTWISE && op->expr != NULL;
}

static uint32_t add_node(kf_graph *g, const kf__node *n) {
    if (g->node_count == g->node_capacity) {
        uint32_t cap = g->node_capacity * 2;
        kf__node *nodes = realloc(g->nodes, sizeof *nodes * cap);
        if (!nodes) {
            graph_fail(g, KF_ERROR_OUT_OF_MEMORY, "out of memory recording node %u", g->node_count);
            return 0;
        }
        g->nodes = nodes;
        g->node_capacity = cap;
    }
    g->nodes[g->node_count] = *n;
    return g->node_count++;
}

/* A name the graph language can write: letters, digits and '_', not a reserved word (so that
 * kf_graph_format's text parses back). */
static bool valid_name(const char *name) {
    if (!name || !*name || strlen(name) >= KF_NAME_MAX) {
        return false;
    }
    if (!strcmp(name, "out") || !strcmp(name, "true") || !strcmp(name, "false")) {
        return false;
    }
    for (const char *c = name; *c; c++) {
        bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '_' ||
                  (c != name && *c >= '0' && *c <= '9');
        if (!ok) {
            return false;
        }
    }
    return true;
}

kf_node kf_graph_input(kf_graph *g, const char *name, const kf_shape *shape, kf_dtype dtype) {
    kf_node none = {0};
    if (!g || g->status != KF_OK) {
        return none;
    }
    if (!valid_name(name)) {
        graph_fail(g, KF_ERROR_INVALID_ARGUMENT,
                   "input: '%s' is not a valid name (letters, digits, '_'; at most %d chars; "
                   "not out, true or false)",
                   name ? name : "(null)", KF_NAME_MAX - 1);
        return none;
    }
    if (!shape || shape->rank > KF_MAX_DIMS) {
        graph_fail(g, KF_ERROR_SHAPE, "input %s: shape missing or rank above %d", name,
                   KF_MAX_DIMS);
        return none;
    }
    for (uint32_t d = 0; d < shape->rank; d++) {
        if (shape->dims[d] == 0) {
            graph_fail(g, KF_ERROR_SHAPE, "input %s: dimension %u is zero", name, d);
            return none;
        }
    }
    if (kf_shape_elements(shape) > (1ull << 32) - 1) {
        graph_fail(g, KF_ERROR_LIMIT, "input %s: more than 2^32-1 elements", name);
        return none;
    }
    if (dtype != KF_DTYPE_F32 && dtype != KF_DTYPE_F16 && dtype != KF_DTYPE_I32) {
        graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "input %s: unknown dtype %d", name, (int)dtype);
        return none;
    }
    for (uint32_t i = 1; i < g->node_count; i++) {
        if (g->nodes[i].kind == KF__NODE_INPUT && !strcmp(g->nodes[i].name, name)) {
            graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "input %s: declared twice", name);
            return none;
        }
    }
    kf__node n = {.kind = KF__NODE_INPUT, .shape = *shape, .dtype = dtype};
    snprintf(n.name, sizeof n.name, "%s", name);
    return (kf_node){add_node(g, &n)};
}

kf_node kf_graph_param(kf_graph *g, const char *name, const kf_shape *shape,
                       const kf_param_init *init) {
    if (!g || g->status != KF_OK) {
        return (kf_node){0};
    }
    kf_param_init how = init ? *init : (kf_param_init){0};
    if ((how.kind != KF_INIT_DEFAULT && how.kind != KF_INIT_ZEROS && how.kind != KF_INIT_UNIFORM) ||
        (how.kind == KF_INIT_UNIFORM && !(how.bound > 0.0f && how.bound < 1e30f))) {
        graph_fail(g, KF_ERROR_INVALID_ARGUMENT,
                   "param %s: the initialiser is zeros or uniform(bound) with a bound above 0",
                   name ? name : "(null)");
        return (kf_node){0};
    }
    kf_node n = kf_graph_input(g, name, shape, KF_DTYPE_F32);
    if (n.id) {
        g->nodes[n.id].param = true;
        g->nodes[n.id].init = how;
    }
    return n;
}

bool kf_graph_input_is_param(const kf_graph *g, uint32_t index, kf_param_init *init) {
    uint32_t seen = 0;
    for (uint32_t i = 1; g && i < g->node_count; i++) {
        const kf__node *n = &g->nodes[i];
        if (n->kind == KF__NODE_INPUT && seen++ == index) {
            if (n->param && init) {
                *init = n->init;
            }
            return n->param;
        }
    }
    return false;
}

kf_status kf_param_init_fill(const kf_param_init *init, uint64_t seed, uint32_t index,
                             kf_tensor *t) {
    if (!t) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_param_init how = init ? *init : (kf_param_init){0};
    float bound = how.bound;
    if (how.kind == KF_INIT_DEFAULT) {
        uint64_t fan_in = 1;
        for (uint32_t d = 0; d + 1 < t->shape.rank; d++) {
            fan_in *= t->shape.dims[d];
        }
        bound = t->shape.rank >= 2 ? (float)(1.0 / sqrt((double)fan_in)) : 0.0f;
    } else if (how.kind == KF_INIT_ZEROS) {
        bound = 0.0f;
    } else if (how.kind != KF_INIT_UNIFORM || !(bound > 0.0f)) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (bound == 0.0f) {
        memset(t->data, 0, sizeof *t->data * kf_tensor_size(t));
    } else {
        kf_tensor_fill_random(t, seed + index, -bound, bound);
    }
    return KF_OK;
}

kf_node kf_graph_scalar(kf_graph *g, float value) {
    if (!g || g->status != KF_OK) {
        return (kf_node){0};
    }
    kf__node n = {.kind = KF__NODE_SCALAR, .scalar = value, .dtype = KF_DTYPE_F32};
    n.shape.rank = 0;
    return (kf_node){add_node(g, &n)};
}

/* The tensor inputs op takes under p, for messages: "x, weight". */
static const char *input_names(const kf_operator *op, const kf_op_params *p, char *buf,
                               size_t size) {
    size_t used = 0;
    buf[0] = '\0';
    for (uint32_t i = 0, n = 0; i < kf_op_input_count(op) && used < size; i++) {
        const char *name = NULL;
        kf_op_input_info(op, i, &name, NULL);
        if (!p || kf__input_present(op, i, p)) {
            used += (size_t)snprintf(buf + used, size - used, "%s%s", n++ ? ", " : "", name);
        }
    }
    return buf;
}

/* The name of the index-th input present under p. */
static const char *present_input_name(const kf_operator *op, const kf_op_params *p,
                                      uint32_t index) {
    for (uint32_t i = 0, n = 0; i < kf_op_input_count(op); i++) {
        if (kf__input_present(op, i, p) && n++ == index) {
            const char *name = NULL;
            kf_op_input_info(op, i, &name, NULL);
            return name;
        }
    }
    return "?";
}

kf_node kf_graph_op(kf_graph *g, const char *op_name, const kf_node *inputs, uint32_t count,
                    const kf_op_params *params) {
    kf_node none = {0};
    if (!g || g->status != KF_OK) {
        return none;
    }
    const kf_operator *op = op_name ? kf_op_find(op_name) : NULL;
    if (!op) {
        graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "unknown operator '%s'",
                   op_name ? op_name : "(null)");
        return none;
    }
    kf_op_params p = {0};
    if (params) {
        p = *params;
    }
    char msg[256] = {0};
    kf_status st = kf_op_params_check(op, &p, msg, sizeof msg);
    if (st != KF_OK) {
        graph_fail(g, st, "%s", msg);
        return none;
    }
    uint32_t arity = kf_op_arity(op, &p);
    if (count && !inputs) {
        graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "%s: inputs is NULL with a count of %u", op->name,
                   count);
        return none;
    }
    if (count != arity || count > KF_NODE_MAX_INPUTS) {
        char names[128];
        graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "%s: takes %u tensor input%s (%s), got %u",
                   op->name, arity, arity == 1 ? "" : "s", input_names(op, &p, names, sizeof names),
                   count);
        return none;
    }
    kf__node n = {.kind = KF__NODE_OP, .op = op, .params = p, .input_count = count};
    kf_shape shapes[KF_NODE_MAX_INPUTS];
    bool have_dtype = false;
    for (uint32_t i = 0; i < count; i++) {
        const kf__node *in = kf__graph_node(g, inputs[i].id);
        if (!in) {
            graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "%s: input %s is not a node of this graph",
                       op->name, present_input_name(op, &p, i));
            return none;
        }
        n.inputs[i] = inputs[i].id;
        shapes[i] = in->shape;
        if (in->kind != KF__NODE_SCALAR && !((op->index_inputs | op->f32_inputs) & (1u << i))) {
            if (have_dtype && in->dtype != n.dtype) {
                graph_fail(g, KF_ERROR_TYPE, "%s: inputs mix f32 and f16", op->name);
                return none;
            }
            n.dtype = in->dtype;
            have_dtype = true;
        }
    }
    if (!have_dtype) {
        graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "%s: needs at least one tensor (not a scalar)",
                   op->name);
        return none;
    }
    for (uint32_t i = 0; i < count; i++) {
        const kf__node *in = &g->nodes[inputs[i].id];
        bool index = (op->index_inputs & (1u << i)) != 0;
        if (index != (in->dtype == KF_DTYPE_I32) || (index && in->kind == KF__NODE_SCALAR)) {
            graph_fail(g, KF_ERROR_TYPE, "%s: input %s must be %s", op->name,
                       present_input_name(op, &p, i),
                       index ? "an i32 tensor of class indices" : "f32 or f16, not i32");
            return none;
        }
        if ((op->f32_inputs & (1u << i)) && in->dtype != KF_DTYPE_F32) {
            graph_fail(g, KF_ERROR_TYPE, "%s: input %s must be f32 (it holds row statistics)",
                       op->name, present_input_name(op, &p, i));
            return none;
        }
    }
    n.dtype = kf__op_output_dtype(op, n.dtype);
    st = kf_op_shape(op, shapes, &p, &n.shape, msg, sizeof msg);
    if (st != KF_OK) {
        graph_fail(g, st, "%s", msg[0] ? msg : kf_status_str(st));
        return none;
    }
    return (kf_node){add_node(g, &n)};
}

/* "leaky_relu takes alpha" or "relu takes no parameters", for messages. */
static const char *param_names(const kf_operator *op, char *buf, size_t size) {
    uint32_t count = kf_op_param_count(op);
    if (!count) {
        snprintf(buf, size, "%s takes no parameters", op->name);
        return buf;
    }
    size_t used = (size_t)snprintf(buf, size, "%s takes", op->name);
    for (uint32_t i = 0; i < count && used < size; i++) {
        kf_op_param_info info;
        kf_op_param_info_at(op, i, &info);
        used += (size_t)snprintf(buf + used, size - used, "%s %s", i ? "," : "", info.name);
    }
    return buf;
}

/* The index of op's input `name`, or -1. */
static int32_t find_input(const kf_operator *op, const char *name) {
    for (uint32_t i = 0; i < kf_op_input_count(op); i++) {
        const char *in = NULL;
        kf_op_input_info(op, i, &in, NULL);
        if (!strcmp(in, name)) {
            return (int32_t)i;
        }
    }
    return -1;
}

/* Parameter d of op set from an argument, once. */
static bool call_set_param(kf_graph *g, const kf_operator *op, kf_op_params *p, const kf__param *d,
                           double value) {
    if (p->given & d->given) {
        graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "%s: parameter '%s' is given twice", op->name,
                   d->name);
        return false;
    }
    char msg[256];
    kf_status st = kf_op_param_set(op, p, d->name, value, msg, sizeof msg);
    if (st != KF_OK) {
        graph_fail(g, st, "%s", msg);
        return false;
    }
    return true;
}

/* List parameter d of op set from an argument, once. */
static bool call_set_list(kf_graph *g, const kf_operator *op, kf_op_params *p, const kf__param *d,
                          const kf_graph_arg *a) {
    if (p->given & d->given) {
        graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "%s: parameter '%s' is given twice", op->name,
                   d->name);
        return false;
    }
    char msg[256];
    kf_status st = kf_op_param_set_list(op, p, d->name, a->list, a->list_count, msg, sizeof msg);
    if (st != KF_OK) {
        graph_fail(g, st, "%s", msg);
        return false;
    }
    return true;
}

kf_node kf_graph_call(kf_graph *g, const char *op_name, const kf_node *tensors,
                      uint32_t tensor_count, const kf_graph_arg *numbers, uint32_t number_count) {
    kf_node none = {0};
    if (!g || g->status != KF_OK) {
        return none;
    }
    const kf_operator *op = op_name ? kf_op_find(op_name) : NULL;
    if (!op) {
        graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "unknown operator '%s'",
                   op_name ? op_name : "(null)");
        return none;
    }
    if ((tensor_count && !tensors) || (number_count && !numbers)) {
        graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "%s: %s is NULL with a count", op->name,
                   tensor_count && !tensors ? "tensors" : "numbers");
        return none;
    }
    /* The op's inputs by position: positional tensors fill them in order, named ones by name,
     * and an element-wise op takes a positional number as a scalar operand in the next slot. */
    uint32_t slots_total = kf_op_input_count(op);
    kf_node slots[KF_NODE_MAX_INPUTS] = {{0}};
    kf_op_params p = {0};
    char names[128];
    if (tensor_count > slots_total || slots_total > KF_NODE_MAX_INPUTS) {
        graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "%s: takes at most %u tensor input%s (%s), got %u",
                   op->name, slots_total, slots_total == 1 ? "" : "s",
                   input_names(op, NULL, names, sizeof names), tensor_count);
        return none;
    }
    for (uint32_t i = 0; i < tensor_count; i++) {
        slots[i] = tensors[i];
        kf__input_set_present(op, i, &p);
    }
    uint32_t next_slot = tensor_count, next_param = 0;
    for (uint32_t i = 0; i < number_count; i++) {
        const kf_graph_arg *a = &numbers[i];
        if (a->name && a->tensor.id) {
            int32_t s = find_input(op, a->name);
            if (s < 0 && kf__param_find(op, a->name)) {
                graph_fail(g, KF_ERROR_INVALID_ARGUMENT,
                           "%s: parameter '%s' takes a number, not a tensor", op->name, a->name);
                return none;
            }
            if (s < 0) {
                graph_fail(g, KF_ERROR_INVALID_ARGUMENT,
                           "%s: no tensor input named '%s' (its inputs: %s)", op->name, a->name,
                           input_names(op, NULL, names, sizeof names));
                return none;
            }
            if (slots[s].id) {
                graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "%s: input %s is given twice", op->name,
                           a->name);
                return none;
            }
            slots[s] = a->tensor;
            kf__input_set_present(op, (uint32_t)s, &p);
            continue;
        }
        if (a->name) {
            const kf__param *d = kf__param_find(op, a->name);
            if (!d) {
                char known[256];
                graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "%s: unknown parameter '%s' (%s)%s",
                           op->name, a->name, param_names(op, known, sizeof known),
                           find_input(op, a->name) >= 0 ? "; it is a tensor input" : "");
                return none;
            }
            if (!(a->list ? call_set_list(g, op, &p, d, a)
                          : call_set_param(g, op, &p, d, a->number))) {
                return none;
            }
            continue;
        }
        if (a->list) {
            if (next_param >= kf_op_param_count(op)) {
                char known[256];
                graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "%s: unexpected list argument (%s)",
                           op->name, param_names(op, known, sizeof known));
                return none;
            }
            if (!call_set_list(g, op, &p, &op->params[next_param++], a)) {
                return none;
            }
            continue;
        }
        if (kf__op_is_elementwise(op) && next_slot < kf_op_arity(op, &p)) {
            slots[next_slot++] = kf_graph_scalar(g, (float)a->number);
            continue;
        }
        if (next_param >= kf_op_param_count(op)) {
            char known[256];
            graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "%s: unexpected number argument %g (%s)",
                       op->name, a->number, param_names(op, known, sizeof known));
            return none;
        }
        if (!call_set_param(g, op, &p, &op->params[next_param++], a->number)) {
            return none;
        }
    }
    kf_node args[KF_NODE_MAX_INPUTS];
    uint32_t count = 0;
    for (uint32_t i = 0; i < slots_total; i++) {
        if (slots[i].id) {
            args[count++] = slots[i];
        } else if (kf__input_present(op, i, &p)) {
            const char *name = NULL;
            kf_op_input_info(op, i, &name, NULL);
            graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "%s: input %s is missing (%s takes %s)",
                       op->name, name, op->name, input_names(op, &p, names, sizeof names));
            return none;
        }
    }
    return kf_graph_op(g, op->name, args, count, &p);
}

static kf_node binary(kf_graph *g, const char *op, kf_node a, kf_node b) {
    kf_node in[2] = {a, b};
    return kf_graph_op(g, op, in, 2, NULL);
}

kf_node kf_graph_matmul(kf_graph *g, kf_node a, kf_node b) {
    return binary(g, "matmul", a, b);
}

kf_node kf_graph_add(kf_graph *g, kf_node a, kf_node b) {
    return binary(g, "add", a, b);
}

kf_node kf_graph_mul(kf_graph *g, kf_node a, kf_node b) {
    return binary(g, "mul", a, b);
}

kf_node kf_graph_unary(kf_graph *g, const char *op, kf_node x) {
    return kf_graph_op(g, op, &x, 1, NULL);
}

kf_status kf_graph_output(kf_graph *g, const char *name, kf_node node) {
    if (!g) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (g->status != KF_OK) {
        return g->status;
    }
    const kf__node *n = kf__graph_node(g, node.id);
    if (!n) {
        graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "output %s: not a node of this graph",
                   name ? name : "(null)");
        return g->status;
    }
    if (!valid_name(name)) {
        graph_fail(g, KF_ERROR_INVALID_ARGUMENT,
                   "output: '%s' is not a valid name (letters, digits, '_'; at most %d chars; "
                   "not out, true or false)",
                   name ? name : "(null)", KF_NAME_MAX - 1);
        return g->status;
    }
    if (n->kind == KF__NODE_SCALAR) {
        graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "output %s: a bare scalar is not a tensor", name);
        return g->status;
    }
    for (uint32_t i = 0; i < g->output_count; i++) {
        if (!strcmp(g->outputs[i].name, name)) {
            graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "output %s: named twice", name);
            return g->status;
        }
    }
    /* One name, one tensor: an output may share an input's name only by being that input. */
    for (uint32_t i = 1; i < g->node_count; i++) {
        if (g->nodes[i].kind == KF__NODE_INPUT && i != node.id && !strcmp(g->nodes[i].name, name)) {
            graph_fail(g, KF_ERROR_INVALID_ARGUMENT,
                       "output %s: the name of another tensor (input %s)", name, name);
            return g->status;
        }
    }
    if (g->output_count == g->output_capacity) {
        uint32_t cap = g->output_capacity ? g->output_capacity * 2 : 4;
        kf__output *outs = realloc(g->outputs, sizeof *outs * cap);
        if (!outs) {
            graph_fail(g, KF_ERROR_OUT_OF_MEMORY, "out of memory adding output %s", name);
            return g->status;
        }
        g->outputs = outs;
        g->output_capacity = cap;
    }
    kf__output *o = &g->outputs[g->output_count++];
    snprintf(o->name, sizeof o->name, "%s", name);
    o->node = node.id;
    return KF_OK;
}

kf_shape kf_graph_shape(const kf_graph *g, kf_node node) {
    const kf__node *n = g ? kf__graph_node(g, node.id) : NULL;
    kf_shape none = {0};
    return n ? n->shape : none;
}

kf_dtype kf__node_kernel_dtype(const kf_graph *g, const kf__node *n) {
    if (n->kind != KF__NODE_OP || (!n->op->f32_output && !n->op->f32_inputs)) {
        return n->dtype;
    }
    for (uint32_t i = 0; i < n->input_count; i++) {
        const kf__node *in = &g->nodes[n->inputs[i]];
        if (in->kind != KF__NODE_SCALAR && !((n->op->index_inputs | n->op->f32_inputs) >> i & 1u)) {
            return in->dtype;
        }
    }
    return n->dtype;
}

kf_dtype kf_graph_dtype(const kf_graph *g, kf_node node) {
    const kf__node *n = g ? kf__graph_node(g, node.id) : NULL;
    return n ? n->dtype : KF_DTYPE_F32;
}

uint32_t kf_graph_input_count(const kf_graph *g) {
    uint32_t count = 0;
    for (uint32_t i = 1; g && i < g->node_count; i++) {
        count += g->nodes[i].kind == KF__NODE_INPUT;
    }
    return count;
}

uint32_t kf_graph_output_count(const kf_graph *g) {
    return g ? g->output_count : 0;
}

kf_status kf_graph_input_info(const kf_graph *g, uint32_t index, const char **name, kf_shape *shape,
                              kf_dtype *dtype) {
    uint32_t seen = 0;
    for (uint32_t i = 1; g && i < g->node_count; i++) {
        const kf__node *n = &g->nodes[i];
        if (n->kind != KF__NODE_INPUT) {
            continue;
        }
        if (seen++ == index) {
            if (name) {
                *name = n->name;
            }
            if (shape) {
                *shape = n->shape;
            }
            if (dtype) {
                *dtype = n->dtype;
            }
            return KF_OK;
        }
    }
    return query_fail(g, "kf_graph_input_info: input %u of a graph with %u inputs", index, seen);
}

kf_status kf_graph_output_info(const kf_graph *g, uint32_t index, const char **name,
                               kf_shape *shape, kf_dtype *dtype) {
    if (!g || index >= g->output_count) {
        return query_fail(g, "kf_graph_output_info: output %u of a graph with %u outputs", index,
                          g ? g->output_count : 0);
    }
    const kf__node *n = &g->nodes[g->outputs[index].node];
    if (name) {
        *name = g->outputs[index].name;
    }
    if (shape) {
        *shape = n->shape;
    }
    if (dtype) {
        *dtype = n->dtype;
    }
    return KF_OK;
}

static void append(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void append(char **buf, size_t *len, size_t *cap, const char *fmt, ...) {
    if (!*buf) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        return;
    }
    while (*len + (size_t)n + 1 > *cap) {
        char *bigger = realloc(*buf, *cap * 2);
        if (!bigger) {
            free(*buf);
            *buf = NULL;
            return;
        }
        *buf = bigger;
        *cap *= 2;
    }
    va_start(ap, fmt);
    vsnprintf(*buf + *len, *cap - *len, fmt, ap);
    va_end(ap);
    *len += (size_t)n;
}

/* The prefix of kf_graph_format's names for unnamed intermediate results: "t", or "t_", "t__",
 * ... when an input or output is already called t<digits>. */
static void temp_prefix(const kf_graph *g, char *prefix, size_t size) {
    for (size_t len = 1; len + 1 < size; len++) {
        memset(prefix, '_', len);
        prefix[0] = 't';
        prefix[len] = '\0';
        bool clash = false;
        for (uint32_t i = 1; i < g->node_count + g->output_count && !clash; i++) {
            const char *name =
                i < g->node_count ? g->nodes[i].name : g->outputs[i - g->node_count].name;
            if (i < g->node_count && g->nodes[i].kind != KF__NODE_INPUT) {
                continue;
            }
            if (!strncmp(name, prefix, len) && name[len]) {
                const char *c = name + len;
                while (*c >= '0' && *c <= '9') {
                    c++;
                }
                clash = *c == '\0';
            }
        }
        if (!clash) {
            return;
        }
    }
}

typedef struct formatter {
    const kf_graph *g;
    char *buf;
    size_t len, cap;
    char prefix[16];
    uint32_t *name_of; /* node id -> output index + 1 naming it (0: none) */
} formatter;

static void append_operand(formatter *f, uint32_t id) {
    const kf__node *n = &f->g->nodes[id];
    if (n->kind == KF__NODE_INPUT) {
        append(&f->buf, &f->len, &f->cap, "%s", n->name);
    } else if (n->kind == KF__NODE_SCALAR) {
        append(&f->buf, &f->len, &f->cap, "%.9g", (double)n->scalar);
    } else if (f->name_of && f->name_of[id]) {
        append(&f->buf, &f->len, &f->cap, "%s", f->g->outputs[f->name_of[id] - 1].name);
    } else {
        append(&f->buf, &f->len, &f->cap, "%s%u", f->prefix, id);
    }
}

/* op(inputs..., params...): the inputs positionally while none before them is left out, by
 * name after a gap (layernorm(x, bias=b)); every parameter given or set by keyword. */
static void append_call(formatter *f, const kf__node *n) {
    const kf_operator *op = n->op;
    const kf_op_params *p = &n->params;
    append(&f->buf, &f->len, &f->cap, "%s(", op->name);
    bool gap = false;
    for (uint32_t i = 0, k = 0; i < kf_op_input_count(op) && k < n->input_count; i++) {
        if (!kf__input_present(op, i, p)) {
            gap = true;
            continue;
        }
        const char *name = NULL;
        kf_op_input_info(op, i, &name, NULL);
        append(&f->buf, &f->len, &f->cap, "%s%s%s", k ? ", " : "", gap ? name : "", gap ? "=" : "");
        append_operand(f, n->inputs[k++]);
    }
    for (uint32_t i = 0; i < op->param_count; i++) {
        const kf__param *d = &op->params[i];
        kf_op_params bare = *p;
        bare.given = 0;
        bool given = (p->given & d->given) != 0;
        double v = kf__param_value(given ? p : &bare, d);
        if (!given && v == d->default_value) {
            continue; /* a zero field meaning the default */
        }
        if (d->type == KF_PARAM_TYPE_INT_LIST) {
            append(&f->buf, &f->len, &f->cap, ", %s=[", d->name);
            for (uint32_t j = 0; j < p->list_count && j < KF_MAX_DIMS; j++) {
                append(&f->buf, &f->len, &f->cap, "%s%d", j ? ", " : "", (int)p->list[j]);
            }
            append(&f->buf, &f->len, &f->cap, "]");
        } else if (d->type == KF_PARAM_TYPE_BOOL) {
            append(&f->buf, &f->len, &f->cap, ", %s=%s", d->name, v != 0.0 ? "true" : "false");
        } else {
            append(&f->buf, &f->len, &f->cap, ", %s=%.9g", d->name, v);
        }
    }
    append(&f->buf, &f->len, &f->cap, ")");
}

char *kf_graph_format(const kf_graph *g) {
    if (!g) {
        return NULL;
    }
    formatter f = {.g = g, .cap = 1024};
    f.buf = malloc(f.cap);
    f.name_of = calloc(g->node_count, sizeof *f.name_of);
    if (!f.buf || !f.name_of) {
        free(f.buf);
        free(f.name_of);
        return NULL;
    }
    f.buf[0] = '\0';
    temp_prefix(g, f.prefix, sizeof f.prefix);
    /* An operator's result takes the name of its first output, so that `out` names it. */
    for (uint32_t o = 0; o < g->output_count; o++) {
        uint32_t id = g->outputs[o].node;
        if (g->nodes[id].kind == KF__NODE_OP && !f.name_of[id]) {
            f.name_of[id] = o + 1;
        }
    }
    static const char *dtypes[] = {"f32", "f16", "i32"};
    for (uint32_t id = 1; id < g->node_count; id++) {
        const kf__node *n = &g->nodes[id];
        if (n->kind == KF__NODE_INPUT) {
            append(&f.buf, &f.len, &f.cap, "%s%s: %s[", n->param ? "param " : "", n->name,
                   dtypes[n->dtype]);
            for (uint32_t d = 0; d < n->shape.rank; d++) {
                append(&f.buf, &f.len, &f.cap, "%s%u", d ? ", " : "", n->shape.dims[d]);
            }
            append(&f.buf, &f.len, &f.cap, "]");
            if (n->param && n->init.kind == KF_INIT_ZEROS) {
                append(&f.buf, &f.len, &f.cap, " = zeros");
            } else if (n->param && n->init.kind == KF_INIT_UNIFORM) {
                append(&f.buf, &f.len, &f.cap, " = uniform(%.9g)", (double)n->init.bound);
            }
            append(&f.buf, &f.len, &f.cap, "\n");
        } else if (n->kind == KF__NODE_OP) {
            append_operand(&f, id);
            append(&f.buf, &f.len, &f.cap, " = ");
            append_call(&f, n);
            append(&f.buf, &f.len, &f.cap, "\n");
        }
    }
    /* Every other output name is an alias of its tensor (y2 = y), then all are listed in order. */
    for (uint32_t o = 0; o < g->output_count; o++) {
        uint32_t id = g->outputs[o].node;
        const kf__node *n = &g->nodes[id];
        bool own = n->kind == KF__NODE_INPUT ? !strcmp(n->name, g->outputs[o].name)
                                             : f.name_of[id] == o + 1;
        if (!own) {
            append(&f.buf, &f.len, &f.cap, "%s = ", g->outputs[o].name);
            append_operand(&f, id);
            append(&f.buf, &f.len, &f.cap, "\n");
        }
    }
    for (uint32_t o = 0; o < g->output_count; o++) {
        append(&f.buf, &f.len, &f.cap, "out %s\n", g->outputs[o].name);
    }
    free(f.name_of);
    return f.buf;
}
