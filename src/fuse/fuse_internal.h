/* Internals of the lazy graph and the fusion planner (src/fuse). */
#ifndef KF_FUSE_INTERNAL_H
#define KF_FUSE_INTERNAL_H

#include "kfuse.h"
#include "ops/operator.h"

#define KF_NODE_MAX_INPUTS 4
#define KF_NAME_MAX 64

typedef enum kf__node_kind { KF__NODE_INPUT = 1, KF__NODE_SCALAR, KF__NODE_OP } kf__node_kind;

typedef struct kf__node {
    kf__node_kind kind;
    char name[KF_NAME_MAX]; /* inputs: the input's name; ops: "" */
    const kf_operator *op;  /* KF__NODE_OP */
    kf_op_params params;
    uint32_t inputs[KF_NODE_MAX_INPUTS]; /* node ids */
    uint32_t input_count;
    float scalar; /* KF__NODE_SCALAR */
    kf_shape shape;
    kf_dtype dtype;
    bool param;         /* KF__NODE_INPUT: a trainable parameter (kf_graph_param) */
    kf_param_init init; /* its initialiser */
} kf__node;

typedef struct kf__output {
    char name[KF_NAME_MAX];
    uint32_t node;
} kf__output;

struct kf_graph {
    kf__node *nodes; /* nodes[0] unused: id 0 is invalid */
    uint32_t node_count;
    uint32_t node_capacity;
    kf__output *outputs;
    uint32_t output_count;
    uint32_t output_capacity;
    kf_status status;
    char error[512];
};

/* Deep copy, used by plans so they outlive the graph they came from. */
kf_graph *kf__graph_copy(const kf_graph *g);
const kf__node *kf__graph_node(const kf_graph *g, uint32_t id);
bool kf__op_is_elementwise(const kf_operator *op);
/* The dtype op node n's kernels take: its output's, or, for an operator that stores its output
 * or some inputs as f32 whatever the dtype (kf_operator.f32_output, f32_inputs), its other
 * inputs'. */
kf_dtype kf__node_kernel_dtype(const kf_graph *g, const kf__node *n);

#endif
