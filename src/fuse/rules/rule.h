/* A fusion rule: one record per rule (one file each in src/fuse/rules/), registered in table.c.
 *
 * The planner (src/fuse/plan.c) walks the graph in topological order. For each operator node it
 * first asks the groups of the node's operands whether the node may join them (`accepts`); when
 * none does, it asks the rules in table order to open a group at the node (`open`). Once every
 * node has a group and the groups have levels, it runs each rule's plan-wide `pass` (horizontal
 * fusion batches independent groups). Each group is then built into one kernel by the rule that
 * owns it (`build`), and kf_plan_explain names it with `explain`.
 *
 * Rules decide from what operators say about themselves (their class, their hooks), never from
 * their names. A new rule is a new file defining a kf__fusion_rule plus one line in table.c.
 */
#ifndef KF_FUSE_RULES_RULE_H
#define KF_FUSE_RULES_RULE_H

#include "fuse/plan_internal.h"

typedef struct kf__fusion_rule {
    /* The group's name in messages ("group 3 (matmul): ..."): a word or two. */
    const char *name;
    /* Opens a group at operator node `node` when this rule owns such nodes, and returns it
     * (made with kf__plan_open_group); NULL when the rule does not apply (or on failure, with the
     * plan's status set). NULL hook: the rule opens no groups (a plan-wide rule). */
    kf__group *(*open)(kf_plan *p, uint32_t node);
    /* Before planning, on the plan's own copy of the graph (p->graph; no groups or per-node
     * arrays yet): rewrites or appends nodes this rule will plan (split_k's partial products),
     * keeping ids in evaluation order (inputs before their readers) and the caller's inputs and
     * outputs by name; kf_plan.graph_nodes is where nodes appended for a pass begin. Skipped when
     * fusion is off. NULL: none. */
    void (*rewrite)(kf_plan *p);
    /* Legality: may `node` join grp, whose result is one of node's operands? The planner has
     * already checked what every rule needs (the operand is the group's result, read by nothing
     * else, not an output, of node's shape and dtype) and counts the binding budget itself
     * (kf__group_bindings). NULL: nothing joins this rule's groups. */
    bool (*accepts)(const kf_plan *p, const kf__group *grp, uint32_t node);
    /* Plan-wide work after every node has its group and every group its level (horizontal
     * fusion); skipped when fusion is off. NULL: none. */
    void (*pass)(kf_plan *p);
    /* Builds the group's kernel: records in c the node of each binding, in binding order
     * (c->slots), and the grid. Returns NULL out of memory (a failing kernel keeps its error). */
    kf_kernel *(*build)(kf_plan *p, kf__group *grp, kf__compiled *c);
    /* The group's rule as kf_plan_explain prints it ("matmul epilogue"). */
    const char *(*explain)(const kf_plan *p, const kf__group *grp);
} kf__fusion_rule;

/* The registered rules, in the order the planner asks them to open a group (table.c). */
extern const kf__fusion_rule *const kf__fusion_rules[];
extern const uint32_t kf__fusion_rule_count;

extern const kf__fusion_rule kf__rule_matmul_epilogue;
extern const kf__fusion_rule kf__rule_reduction_tail;
extern const kf__fusion_rule kf__rule_layout;
extern const kf__fusion_rule kf__rule_gather_tail;
extern const kf__fusion_rule kf__rule_elementwise;
extern const kf__fusion_rule kf__rule_horizontal;
extern const kf__fusion_rule kf__rule_prologue;
extern const kf__fusion_rule kf__rule_strided;
extern const kf__fusion_rule kf__rule_classifier;
extern const kf__fusion_rule kf__rule_bias_grad;
extern const kf__fusion_rule kf__rule_activation_save;
extern const kf__fusion_rule kf__rule_companion;
extern const kf__fusion_rule kf__rule_rmsnorm_matmul;
extern const kf__fusion_rule kf__rule_split_k;

/* ---- planning helpers (plan.c) ---- */

/* Records the first failure on the plan. */
void kf__plan_fail(kf_plan *p, kf_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A new group of `kind` owned by rule (NULL out of memory, with the plan's status set). May move
 * p->groups: take group pointers again afterwards. */
kf__group *kf__plan_new_group(kf_plan *p, const kf__fusion_rule *rule, kf__group_kind kind);
/* A new group at operator node `node`: its root for KF__GROUP_PRODUCER, its first element-wise
 * node for KF__GROUP_ELEMENTWISE; node is its result. */
kf__group *kf__plan_open_group(kf_plan *p, const kf__fusion_rule *rule, kf__group_kind kind,
                               uint32_t node);
/* The storage bindings grp's kernel has: its root's inputs, what its element-wise nodes read from
 * memory (grp->reads), its result. The planner keeps every vertical group within
 * p->max_storage_buffers. */
uint32_t kf__group_bindings(const kf_plan *p, const kf__group *grp);
/* Makes node `side` a side result of grp: either the root and result of a group of its own
 * (which turns DEAD; it must have no tail or side; a prologue it had must be taken over by the
 * caller, as side inputs), or one of grp's own element-wise nodes (a value its store phase
 * writes as well, before its result: that store is the emitter's, kf__emit_elementwise). Then
 * grp's kernel writes it too (a multi-output group, kf__group.sides). The caller's rule computes it
 * in grp's kernel and has checked that nothing grp reads depends on it; levels are settled again by
 * kf__plan_settle_levels. False out of memory (the plan's status set). */
bool kf__group_add_side(kf_plan *p, kf__group *grp, uint32_t side);
/* Records that grp's kernel computes element-wise node `node` in registers as an input of a side
 * (kf__group.side_inputs; its own group stays DEAD). False out of memory. */
bool kf__group_add_side_input(kf_plan *p, kf__group *grp, uint32_t node);
/* Whether grp writes node id (its result or one of its sides). */
bool kf__group_writes(const kf__group *grp, uint32_t id);
/* Whether grp's store phase writes node id (a side): one of its element-wise nodes, or its root's
 * own value as the tail receives it (a matmul's pre-activation, activation_save.c), rather than a
 * value the root's kernel computes beside its own (kf__build_rooted). */
bool kf__group_side_in_store(const kf__group *grp, uint32_t id);
/* Whether group `gi`'s kernel reads, directly or through earlier groups, what group `from`
 * writes. */
bool kf__group_depends_on(const kf_plan *p, uint32_t gi, uint32_t from);
/* Gives every group its level again (1 + the deepest level it reads from): after a plan-wide
 * pass moved nodes between groups. */
void kf__plan_settle_levels(kf_plan *p);
/* Appends a member to a horizontal group (false out of memory, with the plan's status set). */
bool kf__group_add_member(kf_plan *p, kf__group *h, uint32_t member);
/* Appends binding `node` to c->slots (false out of memory, with the plan's status set). */
bool kf__compiled_add_slot(kf_plan *p, kf__compiled *c, uint32_t node);

/* ---- code generation the rules share (emit.c) ---- */

#define KF__PLAN_WORKGROUP 256u
#define KF__PLAN_LANES 4u

kf_type kf__scalar_type_of(kf_dtype d);
/* out[0] = the workgroups that cover `elements` invocations in workgroups of wg. */
void kf__grid_for(uint64_t elements, uint32_t wg, uint32_t out[3]);
/* Element-wise groups whose loads and stores can be vec4<f32>: f32 everywhere and a length the
 * vector divides. */
bool kf__group_can_vectorize(const kf_plan *p, const kf__group *grp);

/* Emission of a group's element-wise nodes into kernel k: operands it reads from memory are
 * declared as bindings of k the first time (and recorded in c's slots). */
typedef struct kf__emit {
    kf_plan *p;
    kf_kernel *k;
    kf__group *grp; /* the group being emitted (a member, inside horizontal kernels) */
    kf__compiled *c;
    kf_val in;        /* the producer's yielded value (tails) */
    kf_val index;     /* the element's linear index */
    kf_val *computed; /* computed[i]: the value of grp->nodes[i], once emitted */
    uint32_t computed_count;
    /* Vectorized element-wise kernels: each invocation owns KF__PLAN_LANES consecutive elements,
     * loads and stores them as one vec4 and computes lane by lane. */
    bool vectorized;
    uint32_t lane;
    kf_val vindex; /* the vec4's index */
    kf_val *wide;  /* wide[j]: the vec4 load of grp->reads[j] made so far in this invocation */
} kf__emit;

/* Starts emitting grp into k (false out of memory, with the plan's status set); end with
 * kf__emit_release. */
bool kf__emit_init(kf__emit *s, kf_plan *p, kf_kernel *k, kf__group *grp, kf__compiled *c);
void kf__emit_release(kf__emit *s);
/* An in-place group (its result bound to the tensor of input `alias`; plan_bind.c proved that
 * each element is read only by the invocation that writes it, at the index it writes): one
 * read-write binding is the result's store and the input's loads, since WebGPU forbids binding
 * one buffer both read-only and writable in a dispatch. Declare it before emitting the loads. */
kf_binding kf__emit_inplace_binding(kf__emit *s, uint32_t alias, kf_type elem);
/* Emits the group's element-wise nodes for one element; returns the result (f32). */
kf_val kf__emit_elementwise(kf__emit *s);
/* The group's value at one invocation: the element at `at`, or with `vectorized` the KF__PLAN_LANES
 * elements of vec4 number `at` (loads and the store are vec4, the chain runs lane by lane).
 * Returns the value to store, in the stored type. */
kf_val kf__emit_invocation(kf__emit *s, kf_val at, bool vectorized);
/* A rooted group's kernel: the root operator's kernel (its inputs bound in order) with the
 * group's element-wise nodes composed into its store phase (kf_kernel_then). */
kf_kernel *kf__build_rooted(kf_plan *p, kf__group *grp, kf__compiled *c, kf_kernel *base);
/* Whether grp has a view that reorders elements (permute, slice, concat: kf_operator.view_index,
 * not view_linear), whose loads go to other elements than the one an invocation writes. */
bool kf__group_has_strided_view(const kf_plan *p, const kf__group *grp);
/* Whether every node of element-wise group grp is a view: its value at any element is loads
 * through the views' mappings, so another view may follow it in the group. */
bool kf__group_is_views(const kf_plan *p, const kf__group *grp);
/* ---- strided views (rules/strided.c) ---- */

/* Whether $KF_VIEW_COPIES asks for the views copied as before strided.c (benches). */
bool kf__view_copies_asked(void);
/* Whether grp's root reads an input through a strided view in place (kf__group.strided). */
bool kf__group_has_strided(const kf__group *grp);
/* The node bound for input i of grp's root: the input, or the source of the view it reads in
 * place. */
uint32_t kf__group_input_node(const kf_plan *p, const kf__group *grp, uint32_t i);

/* ---- prologues (rules/prologue.c) ---- */

/* Whether any input of grp's root has a prologue. */
bool kf__group_has_prologue(const kf__group *grp);
/* base (consumed) with each of grp's prologues composed into its loads of that input
 * (kf_kernel_prologue), called by kf__build_rooted once the root's inputs are c's first slots:
 * an input's slot becomes its prologue's In, and each prologue's other reads follow the root's
 * inputs. Where the chosen kernel refuses (it loads the input straight into subgroup matrices),
 * the operator's own kernel is used. NULL with the plan's status set on failure. */
kf_kernel *kf__compose_prologues(kf_plan *p, kf__group *grp, kf__compiled *c, kf_kernel *base);

/* The root operator's kernel for the group, as the operator chooses it for the plan's context
 * and the root's input shapes (kf__op_kernel_for); NULL with the plan's status set when there is
 * none. */
kf_kernel *kf__root_kernel(kf_plan *p, const kf__group *grp);

#endif
