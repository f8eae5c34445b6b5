/* The lazy graph: operators recorded on tensors, shapes checked as they are recorded. */
#include "fuse/fuse_internal.h"

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

static bool valid_name(const char *name) {
    if (!name || !*name || strlen(name) >= KF_NAME_MAX) {
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
                   "input: '%s' is not a valid name (letters, digits, '_'; at most %d chars)",
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

kf_node kf_graph_scalar(kf_graph *g, float value) {
    if (!g || g->status != KF_OK) {
        return (kf_node){0};
    }
    kf__node n = {.kind = KF__NODE_SCALAR, .scalar = value, .dtype = KF_DTYPE_F32};
    n.shape.rank = 0;
    return (kf_node){add_node(g, &n)};
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
    uint32_t arity = kf_op_arity(op, &p);
    if (count != arity || count > KF_NODE_MAX_INPUTS || (count && !inputs)) {
        graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "%s: takes %u tensor input%s, got %u", op->name,
                   arity, arity == 1 ? "" : "s", count);
        return none;
    }
    kf__node n = {.kind = KF__NODE_OP, .op = op, .params = p, .input_count = count};
    kf_shape shapes[KF_NODE_MAX_INPUTS];
    bool have_dtype = false;
    for (uint32_t i = 0; i < count; i++) {
        const kf__node *in = kf__graph_node(g, inputs[i].id);
        if (!in) {
            graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "%s: input %u is not a node of this graph",
                       op->name, i);
            return none;
        }
        n.inputs[i] = inputs[i].id;
        shapes[i] = in->shape;
        if (in->kind != KF__NODE_SCALAR && !(op->index_inputs & (1u << i))) {
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
    char msg[256] = {0};
    for (uint32_t i = 0; i < count; i++) {
        const kf__node *in = &g->nodes[inputs[i].id];
        bool index = (op->index_inputs & (1u << i)) != 0;
        if (index != (in->dtype == KF_DTYPE_I32) || (index && in->kind == KF__NODE_SCALAR)) {
            graph_fail(g, KF_ERROR_TYPE, "%s: input %u must be %s", op->name, i,
                       index ? "an i32 tensor of class indices" : "f32 or f16, not i32");
            return none;
        }
    }
    kf_status st = kf_op_shape(op, shapes, &p, &n.shape, msg, sizeof msg);
    if (st != KF_OK) {
        graph_fail(g, st, "%s", msg[0] ? msg : kf_status_str(st));
        return none;
    }
    return (kf_node){add_node(g, &n)};
}

/* The numeric parameters each operator takes positionally, in order. */
typedef struct param_slot {
    const char *op;
    const char *names[3];
} param_slot;

static const param_slot positional_params[] = {
    {"leaky_relu", {"alpha"}},
    {"scale", {"alpha"}},
    {"affine", {"alpha", "beta"}},
    {"rmsnorm", {"eps"}},
    {"layernorm", {"eps"}},
    {"gelu", {"exact"}},
    {"matmul", {"transpose_a", "transpose_b"}},
};

static bool set_param(kf_op_params *p, const char *name, double v) {
    if (!strcmp(name, "alpha")) {
        p->alpha = (float)v;
    } else if (!strcmp(name, "beta")) {
        p->beta = (float)v;
    } else if (!strcmp(name, "eps")) {
        p->eps = (float)v;
    } else if (!strcmp(name, "exact")) {
        p->exact = v != 0.0;
    } else if (!strcmp(name, "transpose_a")) {
        p->transpose_a = v != 0.0;
    } else if (!strcmp(name, "transpose_b")) {
        p->transpose_b = v != 0.0;
    } else {
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
    if (tensor_count > KF_NODE_MAX_INPUTS || number_count > 8) {
        graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "%s: too many arguments", op->name);
        return none;
    }
    kf_node args[KF_NODE_MAX_INPUTS + 1];
    for (uint32_t i = 0; i < tensor_count; i++) {
        args[i] = tensors[i];
    }
    uint32_t count = tensor_count;
    kf_op_params p = {0};
    /* Norms take their optional weight and bias as tensors: the count says which are there. */
    if (!strcmp(op->name, "rmsnorm")) {
        p.has_weight = tensor_count >= 2;
    } else if (!strcmp(op->name, "layernorm")) {
        p.has_weight = tensor_count >= 2;
        p.has_bias = tensor_count >= 3;
    }
    const param_slot *slot = NULL;
    for (size_t i = 0; i < sizeof positional_params / sizeof positional_params[0]; i++) {
        if (!strcmp(positional_params[i].op, op->name)) {
            slot = &positional_params[i];
        }
    }
    uint32_t next_param = 0;
    for (uint32_t i = 0; i < number_count; i++) {
        const kf_graph_arg *a = &numbers[i];
        if (a->name) {
            if (!set_param(&p, a->name, a->number)) {
                graph_fail(g, KF_ERROR_INVALID_ARGUMENT,
                           "%s: unknown parameter '%s' (known: alpha, beta, eps, exact, "
                           "transpose_a, transpose_b)",
                           op->name, a->name);
                return none;
            }
            continue;
        }
        if (count < kf_op_arity(op, &p) && kf__op_is_elementwise(op)) {
            args[count++] = kf_graph_scalar(g, (float)a->number);
            continue;
        }
        if (!slot || next_param >= 3 || !slot->names[next_param]) {
            graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "%s: unexpected number argument %g", op->name,
                       a->number);
            return none;
        }
        set_param(&p, slot->names[next_param++], a->number);
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
        graph_fail(g, KF_ERROR_INVALID_ARGUMENT, "output: '%s' is not a valid name",
                   name ? name : "(null)");
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
    return KF_ERROR_INVALID_ARGUMENT;
}

kf_status kf_graph_output_info(const kf_graph *g, uint32_t index, const char **name,
                               kf_shape *shape, kf_dtype *dtype) {
    if (!g || index >= g->output_count) {
        return KF_ERROR_INVALID_ARGUMENT;
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

static void append_operand(const kf_graph *g, uint32_t id, char **buf, size_t *len, size_t *cap) {
    const kf__node *n = &g->nodes[id];
    if (n->kind == KF__NODE_INPUT) {
        append(buf, len, cap, "%s", n->name);
    } else if (n->kind == KF__NODE_SCALAR) {
        append(buf, len, cap, "%.9g", (double)n->scalar);
    } else {
        for (uint32_t o = 0; o < g->output_count; o++) {
            if (g->outputs[o].node == id) {
                append(buf, len, cap, "%s", g->outputs[o].name);
                return;
            }
        }
        append(buf, len, cap, "t%u", id);
    }
}

char *kf_graph_format(const kf_graph *g) {
    if (!g) {
        return NULL;
    }
    size_t len = 0, cap = 1024;
    char *buf = malloc(cap);
    if (buf) {
        buf[0] = '\0';
    }
    static const char *dtypes[] = {"f32", "f16", "i32"};
    for (uint32_t id = 1; id < g->node_count; id++) {
        const kf__node *n = &g->nodes[id];
        if (n->kind == KF__NODE_INPUT) {
            append(&buf, &len, &cap, "%s: %s[", n->name, dtypes[n->dtype]);
            for (uint32_t d = 0; d < n->shape.rank; d++) {
                append(&buf, &len, &cap, "%s%u", d ? ", " : "", n->shape.dims[d]);
            }
            append(&buf, &len, &cap, "]\n");
        } else if (n->kind == KF__NODE_OP) {
            const kf_op_params *p = &n->params;
            append_operand(g, id, &buf, &len, &cap);
            append(&buf, &len, &cap, " = %s(", n->op->name);
            for (uint32_t i = 0; i < n->input_count; i++) {
                if (i) {
                    append(&buf, &len, &cap, ", ");
                }
                append_operand(g, n->inputs[i], &buf, &len, &cap);
            }
            if (p->alpha != 0.0f) {
                append(&buf, &len, &cap, ", alpha=%.9g", (double)p->alpha);
            }
            if (p->beta != 0.0f) {
                append(&buf, &len, &cap, ", beta=%.9g", (double)p->beta);
            }
            if (p->eps != 0.0f) {
                append(&buf, &len, &cap, ", eps=%.9g", (double)p->eps);
            }
            if (p->exact) {
                append(&buf, &len, &cap, ", exact=1");
            }
            if (p->transpose_a) {
                append(&buf, &len, &cap, ", transpose_a=1");
            }
            if (p->transpose_b) {
                append(&buf, &len, &cap, ", transpose_b=1");
            }
            append(&buf, &len, &cap, ")\n");
        }
    }
    for (uint32_t o = 0; o < g->output_count; o++) {
        /* The language names an output by its variable: a node output under a second name, or
         * an input output under another name, is noted in a comment. */
        const kf__node *n = &g->nodes[g->outputs[o].node];
        bool first = true;
        for (uint32_t e = 0; e < o; e++) {
            first &= g->outputs[e].node != g->outputs[o].node;
        }
        bool renamed = n->kind == KF__NODE_INPUT && strcmp(n->name, g->outputs[o].name) != 0;
        if (first && !renamed) {
            append(&buf, &len, &cap, "out ");
            append_operand(g, g->outputs[o].node, &buf, &len, &cap);
            append(&buf, &len, &cap, "\n");
        } else {
            append(&buf, &len, &cap, "# output %s is ", g->outputs[o].name);
            append_operand(g, g->outputs[o].node, &buf, &len, &cap);
            append(&buf, &len, &cap, "\n");
        }
    }
    return buf;
}
