/* Internals of fusion plans: groups, their compiled kernels, buffers and dispatches. */
#ifndef KF_PLAN_INTERNAL_H
#define KF_PLAN_INTERNAL_H

#include "fuse/fuse_internal.h"
#include "runtime/runtime.h"

/* A group holds at most this many element-wise nodes, so each kernel's size (and its shader
 * compilation time) stays bounded: a longer chain splits into groups of this size, and those that
 * compute the same share one pipeline. */
#define KF_GROUP_MAX_NODES 64
/* The most storage bindings a planned kernel has, whatever the device allows (execution sizes its
 * lists of binding kinds with it). Not the size of any planner array: those grow. */
#define KF_GROUP_MAX_SLOTS 64
/* The most side results (kf__group.sides) and values computed for them a group has. */
#define KF_GROUP_MAX_SIDES 8

typedef enum kf__group_kind {
    KF__GROUP_DEAD = 0,    /* merged into another group */
    KF__GROUP_ELEMENTWISE, /* element-wise nodes over one shape */
    KF__GROUP_PRODUCER,    /* matmul / reduction / layout root, element-wise tail in its store */
    KF__GROUP_HORIZONTAL   /* independent element-wise groups in one dispatch */
} kf__group_kind;

typedef struct kf__compiled {
    kf_kernel *kernel;
    char *wgsl;
    uint32_t *slots; /* binding i reads/writes the buffer of node slots[i] */
    uint32_t slot_count;
    uint32_t slot_capacity;
    kf_buffer **buffers;  /* slot_count entries, set when the dispatches are made */
    uint32_t *read_nodes; /* bindings declared while emitting, and the node each reads */
    kf_binding *read_bindings;
    kf_type *read_elems; /* each binding's element type: a node read as vec4 and as a scalar in
                          * one kernel (a horizontal group) gets two bindings */
    uint32_t read_count;
    uint32_t read_capacity;
    uint32_t grid[3];
    uint64_t bytes; /* compulsory bytes read and written */
} kf__compiled;

struct kf__fusion_rule; /* src/fuse/rules/rule.h */

typedef struct kf__group {
    kf__group_kind kind;
    const struct kf__fusion_rule *fuser; /* the rule that owns the group: builds and names it */
    char rule[32];                       /* its name, for messages */
    uint32_t root;                       /* producer node, 0 for element-wise groups */
    uint32_t *nodes;                     /* element-wise nodes, in evaluation order */
    uint32_t node_count;
    uint32_t node_capacity;
    /* What its element-wise nodes read from memory (graph inputs, other groups' results), each
     * once; a root's own inputs are the root node's. */
    uint32_t *reads;
    uint32_t read_count;
    uint32_t read_capacity;
    uint32_t result; /* the node this group writes to memory */
    /* Side results: other nodes the group's kernel writes to memory as well (a multi-output
     * group), in binding order; each has group_of pointing here and a buffer of its own, is read
     * by later groups like a result, and is checked on its own by kf_plan_verify. A side that is
     * not one of grp->nodes is computed by the root's kernel, which declares its binding right
     * after the root's inputs (kf__build_rooted adds the slots there). kf__group_add_side. */
    uint32_t *sides;
    uint32_t side_count;
    uint32_t side_capacity;
    /* Element-wise nodes (of DEAD groups) the kernel computes in registers as inputs of its
     * sides, in evaluation order: a value that reads nothing but scalars and shape-only inputs,
     * such as autodiff's seed broadcast_to(1, loss). */
    uint32_t *side_inputs;
    uint32_t side_input_count;
    uint32_t side_input_capacity;
    uint32_t level; /* 1 + the deepest level it reads from; inputs are level 0 */
    bool absorbed;  /* a member of a horizontal group */
    /* Prologues (src/fuse/rules/prologue.c), per input of the root: 1 + the element-wise group
     * composed into the root kernel's loads of that input (0: none; that group is DEAD but keeps
     * its nodes and reads), and the node the load reads instead (the prologue's In). */
    uint32_t prologue[KF_NODE_MAX_INPUTS];
    uint32_t prologue_in[KF_NODE_MAX_INPUTS];
    /* Strided views (src/fuse/rules/strided.c), per input of the root: 1 + the views group
     * whose result the root's kernel reads in place through layout[i] from that group's one
     * read, bound in the input's place (0: none; the group is DEAD but keeps its nodes and its
     * read). */
    uint32_t strided[KF_NODE_MAX_INPUTS];
    kf__strided layout[KF_NODE_MAX_INPUTS];
    /* rmsnorm into matmul (src/fuse/rules/rmsnorm_matmul.c): the rmsnorm node the root reads as
     * its a, computed by the root's kernel from the norm's x (0: none). Its group is DEAD; the
     * norm's x and weight are in `reads`, the kernel binds x where the root's a would be. */
    uint32_t row_norm;
    uint32_t *members; /* horizontal groups: the groups they run */
    uint32_t member_count;
    uint32_t member_capacity;
    kf__compiled *compiled;
    /* Activation saves (src/fuse/rules/activation_save.c): a pre-activation later groups read
     * is a side of its producer's group (a tail node the store phase also writes: cuBLASLt's
     * GELU_AUX), or `recompute`: a node of another group (`recompute_from`, a group index) that
     * is not written, so this group's tail computes it again from that group's reads. The costs
     * the choice compared, in bytes (nonzero on both groups concerned). */
    uint32_t recompute;
    uint32_t recompute_from;
    uint64_t save_cost, recompute_cost;
} kf__group;

struct kf_plan {
    kf_context *ctx;
    kf_graph *graph; /* the plan's own copy */
    /* where nodes a rule appended (kf__fusion_rule.rewrite) begin: the graph's count before
     * them (after split_k's renumbering) */
    uint32_t graph_nodes;
    /* The caller's graph where a rewrite replaced its nodes (split_k), or NULL: kf_plan_verify
     * checks the outputs against its specs too, so a wrong rewrite fails there. */
    kf_graph *source;
    bool no_fuse;
    kf_status status;
    char error[4096]; /* as long as a context's: a compile lists each failing pipeline */
    kf__group *groups;
    uint32_t group_count;
    uint32_t group_capacity;
    int32_t *group_of;   /* node id -> group index, -1 for inputs and scalars */
    uint32_t *uses;      /* node id -> number of operand uses */
    bool *is_output;     /* node id -> named as an output */
    kf_buffer **buffers; /* node id -> buffer, for materialized nodes */
    /* node id -> the node whose buffer it is (a reshape of a value in memory: its bytes are the
     * same, so it has no buffer and no dispatch of its own); 0: its own. kf__plan_buffer_node. */
    uint32_t *alias_of;
    bool *folded; /* node id -> read in place by its readers' kernels (a matmul's transpose
                   * flag): planned into no group */
    bool *inputs_set;
    bool has_run; /* kf_plan_run or kf_plan_time has succeeded: outputs hold results */
    uint32_t max_storage_buffers; /* the binding budget of one kernel */
    uint32_t *scratch;            /* planning: a node list, grown on demand */
    uint32_t scratch_capacity;
    kf_activation_policy activations; /* kf_compile_options.activations */
    kf_dispatch *dispatches;
    uint32_t *order; /* dispatch i runs group order[i] */
    uint32_t dispatch_count;
    uint32_t unfused_dispatches;
    uint64_t bytes;
    uint64_t unfused_bytes;
    struct kf__plan_binds *binds; /* GPU tensors bound to inputs and outputs (plan_bind.c) */
    /* Activation saves (save.c): node id -> the copy of an input that an output overwrites in
     * place while later dispatches still read it (plan_bind.c decides), or NULL. The copies are
     * made by the plan's first dispatches (save_count of them, kf_save_activations' horizontal
     * copy: one dispatch for all, split only at the binding limit); every group that reads such
     * an input reads its copy. */
    kf_buffer **saved;
    kf_buffer **save_bindings;
    uint32_t save_count;
};

/* save.c, for plan.c: records the copies of p->saved into out (room for every input node),
 * setting *count; 0 when there is none. */
kf_status kf__plan_record_saves(kf_plan *p, kf_dispatch *out, uint32_t *count);
/* The number of dispatches kf__plan_record_saves makes at most (an upper bound for arrays). */
uint32_t kf__plan_save_capacity(const kf_plan *p);
/* Frees the saved copies (kf_plan_destroy). */
void kf__plan_saves_destroy(kf_plan *p);

/* plan.c, for plan_bind.c: (re)compiles one group (grp->compiled must be NULL; free an old one
 * with kf__plan_free_compiled), and builds the dispatch list anew from the groups and p->buffers
 * (freeing the old one). */
void kf__plan_compile_group(kf_plan *p, kf__group *grp);
void kf__plan_free_compiled(kf__compiled *c); /* NULL: nothing */
kf_status kf__plan_make_dispatches(kf_plan *p);
/* KF_OK when every input was set or bound; else the message names the first that was not. */
kf_status kf__plan_check_inputs(const kf_plan *p);
/* KF_ERROR_INVALID_ARGUMENT (naming both nodes) when a dispatch would bind one buffer read-only
 * and read-write (regions of one tensor bound to an input and an output of one group), which
 * WebGPU refuses; checked at run since a second binding may yet make it in place (plan_bind.c). */
kf_status kf__plan_check_usage(const kf_plan *p);

/* plan_bind.c */
/* The input node whose tensor the group result `result` is computed into, in place (an output
 * bound to an input's tensor), or 0. */
uint32_t kf__plan_inplace_input(const kf_plan *p, uint32_t result);
/* Whether node id's buffer is a caller's tensor (kf_plan_bind_input/_output). */
bool kf__plan_is_bound(const kf_plan *p, uint32_t id);
/* Drops the plan's holds on bound tensors and forgets them (before its buffers are freed). */
void kf__plan_binds_destroy(kf_plan *p);
/* Runs every dispatch of the plan once (one workgroup each) so that a driver that compiles its
 * pipelines lazily at their first dispatch (lavapipe) has done so before the first run. */
kf_status kf__plan_prime(kf_plan *p);

/* The node whose buffer holds node id's bytes: id itself, or what a free reshape aliases. */
uint32_t kf__plan_buffer_node(const kf_plan *p, uint32_t id);

kf_status kf__plan_upload(kf_plan *p, uint32_t node, const float *data);
kf_status kf__plan_download(const kf_plan *p, uint32_t node, float *data);
uint32_t kf__plan_output_node(const kf_plan *p, const char *name);
/* Random data for input node `id` as verification draws it (labels: whole class indices). */
kf_status kf__plan_random_input(const kf_plan *p, uint32_t id, uint64_t seed, kf_tensor **out);
/* kf_plan_verify with chosen inputs: given[id] (by node id; NULL entries, or given NULL, are
 * drawn at random from seed). */
kf_status kf__plan_check(kf_plan *p, const kf_tensor *const *given, uint64_t seed,
                         kf_plan_report *out);
/* What group gi reads from memory (graph inputs and other groups' results; scalars not), up to
 * cap node ids into reads; returns how many (plan_verify.c). */
uint32_t kf__plan_group_reads(const kf_plan *p, uint32_t gi, uint32_t *reads, uint32_t cap);

/* A plan holds its context from compile to destroy (kf__context_hold, runtime/runtime.h): after
 * kf_context_destroy its calls fail with KF_ERROR_DEVICE_LOST. Messages go to the context too
 * (kf__context_set_error). */

#endif
