/* The fusion planner's driver: groups a graph's operators into kernels, compiles them and runs
 * them.
 *
 * The rules themselves are records in src/fuse/rules/ (rule.h says how the planner asks them).
 * Walking the graph in topological order, an operator joins the group of an operand when the
 * operand is that group's result, read by nothing else, not an output, of the same shape and
 * dtype, and the group's rule accepts it, and the group stays within the storage-binding budget
 * (the device's, or kf_compile_options'); otherwise the first rule that opens a group at it does.
 * Groups get levels (1 + the deepest level they read from), then plan-wide rules run (horizontal
 * fusion), then each group's rule builds its kernel.
 * What must be kept is kept: a value read twice, an output, or one broadcast into another shape
 * ends its group and is written to memory.
 */
#include "fuse/plan_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse/rules/rule.h"
#include "ir/ir_internal.h"
#include "ir/mutate.h"
#include "runtime/runtime.h"
#include "core/half.h"

static void plan_failv(kf_plan *p, kf_status st, const char *fmt, va_list ap) {
    if (p->status != KF_OK) {
        return;
    }
    p->status = st;
    vsnprintf(p->error, sizeof p->error, fmt, ap);
}

static void plan_fail(kf_plan *p, kf_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void plan_fail(kf_plan *p, kf_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    plan_failv(p, st, fmt, ap);
    va_end(ap);
}

void kf__plan_fail(kf_plan *p, kf_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    plan_failv(p, st, fmt, ap);
    va_end(ap);
}

static uint64_t node_bytes(const kf__node *n) {
    return kf_shape_elements(&n->shape) * kf_dtype_size(n->dtype);
}

/* Room for one more entry in a growing uint32_t list. */
static bool grow_ids(uint32_t **ids, uint32_t *capacity, uint32_t count) {
    if (count < *capacity) {
        return true;
    }
    uint32_t cap = *capacity ? *capacity * 2 : 8;
    uint32_t *grown = realloc(*ids, sizeof *grown * cap);
    if (!grown) {
        return false;
    }
    *ids = grown;
    *capacity = cap;
    return true;
}

static bool ids_contain(const uint32_t *ids, uint32_t count, uint32_t id) {
    for (uint32_t i = 0; i < count; i++) {
        if (ids[i] == id) {
            return true;
        }
    }
    return false;
}

kf__group *kf__plan_new_group(kf_plan *p, const kf__fusion_rule *rule, kf__group_kind kind) {
    if (p->group_count == p->group_capacity) {
        uint32_t cap = p->group_capacity ? p->group_capacity * 2 : 8;
        kf__group *gs = realloc(p->groups, sizeof *gs * cap);
        if (!gs) {
            plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory planning groups");
            return NULL;
        }
        p->groups = gs;
        p->group_capacity = cap;
    }
    kf__group *grp = &p->groups[p->group_count++];
    memset(grp, 0, sizeof *grp);
    grp->kind = kind;
    grp->fuser = rule;
    snprintf(grp->rule, sizeof grp->rule, "%s", rule->name);
    return grp;
}

static void group_release(kf__group *grp) {
    free(grp->nodes);
    free(grp->reads);
    free(grp->members);
    free(grp->sides);
    free(grp->side_inputs);
    grp->nodes = grp->reads = grp->members = grp->sides = grp->side_inputs = NULL;
    grp->node_count = grp->read_count = grp->member_count = grp->side_count = 0;
    grp->node_capacity = grp->read_capacity = grp->member_capacity = grp->side_capacity = 0;
    grp->side_input_count = grp->side_input_capacity = 0;
}

static bool group_push_node(kf_plan *p, kf__group *grp, uint32_t node) {
    if (!grow_ids(&grp->nodes, &grp->node_capacity, grp->node_count)) {
        plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory planning groups");
        return false;
    }
    grp->nodes[grp->node_count++] = node;
    p->group_of[node] = (int32_t)(grp - p->groups);
    return true;
}

/* Records that grp's element-wise nodes read `node` from memory (once). */
static bool group_add_read(kf_plan *p, kf__group *grp, uint32_t node) {
    if (ids_contain(grp->reads, grp->read_count, node)) {
        return true;
    }
    if (!grow_ids(&grp->reads, &grp->read_capacity, grp->read_count)) {
        plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory planning groups");
        return false;
    }
    grp->reads[grp->read_count++] = node;
    return true;
}

bool kf__group_add_member(kf_plan *p, kf__group *h, uint32_t member) {
    if (!grow_ids(&h->members, &h->member_capacity, h->member_count)) {
        plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory planning groups");
        return false;
    }
    h->members[h->member_count++] = member;
    return true;
}

/* The operands of element-wise node `node` that grp, with node in it, reads from memory. */
static bool group_add_operands(kf_plan *p, kf__group *grp, uint32_t node) {
    const kf__node *n = &p->graph->nodes[node];
    int32_t self = (int32_t)(grp - p->groups);
    for (uint32_t i = 0; i < n->input_count; i++) {
        uint32_t a = n->inputs[i];
        if (p->graph->nodes[a].kind != KF__NODE_SCALAR && p->group_of[a] != self &&
            !group_add_read(p, grp, a)) {
            return false;
        }
    }
    return true;
}

kf__group *kf__plan_open_group(kf_plan *p, const kf__fusion_rule *rule, kf__group_kind kind,
                               uint32_t node) {
    kf__group *grp = kf__plan_new_group(p, rule, kind);
    if (!grp) {
        return NULL;
    }
    if (kind == KF__GROUP_PRODUCER) {
        grp->root = node;
        p->group_of[node] = (int32_t)(grp - p->groups);
    } else if (!group_push_node(p, grp, node) || !group_add_operands(p, grp, node)) {
        return NULL;
    }
    grp->result = node;
    return grp;
}

uint32_t kf__group_bindings(const kf_plan *p, const kf__group *grp) {
    uint32_t root_inputs = grp->root ? p->graph->nodes[grp->root].input_count : 0;
    return root_inputs + grp->read_count + grp->side_count + 1;
}

bool kf__group_writes(const kf__group *grp, uint32_t id) {
    return grp->result == id || ids_contain(grp->sides, grp->side_count, id);
}

bool kf__group_side_in_store(const kf__group *grp, uint32_t id) {
    return (grp->root && id == grp->root) || ids_contain(grp->nodes, grp->node_count, id);
}

bool kf__group_add_side_input(kf_plan *p, kf__group *grp, uint32_t node) {
    if (ids_contain(grp->side_inputs, grp->side_input_count, node)) {
        return true;
    }
    if (grp->side_input_count >= KF_GROUP_MAX_SIDES) {
        plan_fail(p, KF_ERROR_INTERNAL, "a group has at most %u side inputs", KF_GROUP_MAX_SIDES);
        return false;
    }
    if (!grow_ids(&grp->side_inputs, &grp->side_input_capacity, grp->side_input_count)) {
        plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory planning groups");
        return false;
    }
    grp->side_inputs[grp->side_input_count++] = node;
    return true;
}

bool kf__group_add_side(kf_plan *p, kf__group *grp, uint32_t side) {
    int32_t from = p->group_of[side];
    if (grp->side_count >= KF_GROUP_MAX_SIDES) {
        plan_fail(p, KF_ERROR_INTERNAL, "a group has at most %u sides", KF_GROUP_MAX_SIDES);
        return false;
    }
    if (!grow_ids(&grp->sides, &grp->side_capacity, grp->side_count)) {
        plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory planning groups");
        return false;
    }
    grp->sides[grp->side_count++] = side;
    if (from >= 0 && &p->groups[from] != grp) {
        p->groups[from].kind = KF__GROUP_DEAD;
        group_release(&p->groups[from]);
        p->groups[from].result = 0;
        p->groups[from].root = 0;
    }
    p->group_of[side] = (int32_t)(grp - p->groups);
    return true;
}

/* What group grp's kernel reads from memory, in no particular order, through visit(node):
 * its root's inputs, its element-wise nodes' reads, the inputs of sides its root computes, its
 * prologues' reads. */
static void group_each_read(const kf_plan *p, const kf__group *grp,
                            void (*visit)(const kf_plan *, uint32_t, void *), void *user) {
    const kf_graph *g = p->graph;
    if (grp->root) {
        const kf__node *root = &g->nodes[grp->root];
        for (uint32_t i = 0; i < root->input_count; i++) {
            visit(p, root->inputs[i], user);
        }
    }
    for (uint32_t i = 0; i < grp->read_count; i++) {
        visit(p, grp->reads[i], user);
    }
    for (uint32_t s = 0; s < grp->side_count; s++) {
        const kf__node *n = &g->nodes[grp->sides[s]];
        for (uint32_t i = 0; !kf__group_side_in_store(grp, grp->sides[s]) && i < n->input_count;
             i++) {
            if (!ids_contain(grp->side_inputs, grp->side_input_count, n->inputs[i])) {
                visit(p, n->inputs[i], user);
            }
        }
    }
    for (uint32_t i = 0; i < KF_NODE_MAX_INPUTS; i++) {
        if (grp->prologue[i]) {
            const kf__group *pro = &p->groups[grp->prologue[i] - 1];
            for (uint32_t r = 0; r < pro->read_count; r++) {
                visit(p, pro->reads[r], user);
            }
        }
        if (grp->strided[i]) {
            visit(p, p->groups[grp->strided[i] - 1].reads[0], user);
        }
    }
}

typedef struct depends_walk {
    uint32_t from;
    bool *seen; /* per group */
    bool found;
} depends_walk;

static void depends_visit(const kf_plan *p, uint32_t node, void *user) {
    depends_walk *w = user;
    int32_t src = p->group_of[kf__plan_buffer_node(p, node)];
    if (w->found || src < 0 || w->seen[src]) {
        return;
    }
    w->seen[src] = true;
    if ((uint32_t)src == w->from) {
        w->found = true;
        return;
    }
    group_each_read(p, &p->groups[src], depends_visit, w);
}

bool kf__group_depends_on(const kf_plan *p, uint32_t gi, uint32_t from) {
    depends_walk w = {.from = from, .seen = calloc(p->group_count, sizeof(bool))};
    if (!w.seen) {
        return true; /* out of memory: the cautious answer */
    }
    w.seen[gi] = true;
    group_each_read(p, &p->groups[gi], depends_visit, &w);
    free(w.seen);
    return w.found;
}

/* The bindings base's kernel would have with `node` joined and the groups with[0..count) merged
 * into it: the root's inputs, each distinct operand read from memory, the result. */
static uint32_t joined_bindings(kf_plan *p, int32_t base, const int32_t *with, uint32_t count,
                                uint32_t node) {
    const kf__group *grp = &p->groups[base];
    uint32_t cap = grp->read_count + KF_NODE_MAX_INPUTS;
    for (uint32_t m = 0; m < count; m++) {
        cap += p->groups[with[m]].read_count;
    }
    if (cap > p->scratch_capacity) {
        uint32_t *grown = realloc(p->scratch, sizeof *grown * cap);
        if (!grown) {
            plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory planning groups");
            return UINT32_MAX;
        }
        p->scratch = grown;
        p->scratch_capacity = cap;
    }
    uint32_t *reads = p->scratch;
    uint32_t n = grp->read_count;
    if (n) {
        memcpy(reads, grp->reads, sizeof *reads * n);
    }
    for (uint32_t m = 0; m < count; m++) {
        const kf__group *other = &p->groups[with[m]];
        for (uint32_t i = 0; i < other->read_count; i++) {
            if (!ids_contain(reads, n, other->reads[i])) {
                reads[n++] = other->reads[i];
            }
        }
    }
    const kf__node *nd = &p->graph->nodes[node];
    for (uint32_t i = 0; i < nd->input_count; i++) {
        uint32_t a = nd->inputs[i];
        int32_t src = p->group_of[a];
        bool computed = src == base;
        for (uint32_t m = 0; m < count && !computed; m++) {
            computed = src == with[m];
        }
        if (p->graph->nodes[a].kind != KF__NODE_SCALAR && !computed && !ids_contain(reads, n, a)) {
            reads[n++] = a;
        }
    }
    uint32_t root_inputs = grp->root ? p->graph->nodes[grp->root].input_count : 0;
    return root_inputs + n + 1;
}

/* May node join the group whose result is its operand `operand`? What every rule needs, then
 * what the group's rule says. */
static bool can_extend(const kf_plan *p, uint32_t operand, uint32_t node) {
    const kf_graph *g = p->graph;
    const kf__node *a = &g->nodes[operand], *n = &g->nodes[node];
    if (a->kind != KF__NODE_OP || p->group_of[operand] < 0) {
        return false;
    }
    const kf__group *grp = &p->groups[p->group_of[operand]];
    if (grp->kind == KF__GROUP_DEAD || grp->result != operand) {
        return false;
    }
    if (p->uses[operand] != 1 || p->is_output[operand]) {
        return false; /* read twice or needed later: it must reach memory */
    }
    if ((!kf_shape_eq(&a->shape, &n->shape) && !n->op->view_index) || a->dtype != n->dtype) {
        return false; /* a broadcast that changes the shape ends the group (a view maps it) */
    }
    if (grp->node_count >= KF_GROUP_MAX_NODES) {
        return false;
    }
    return grp->fuser->accepts && grp->fuser->accepts(p, grp, node);
}

/* The first registered rule that opens a group at node. */
static void open_group(kf_plan *p, uint32_t node) {
    for (uint32_t r = 0; r < kf__fusion_rule_count; r++) {
        const kf__fusion_rule *rule = kf__fusion_rules[r];
        if (rule->open && (rule->open(p, node) || p->status != KF_OK)) {
            return;
        }
    }
    plan_fail(p, KF_ERROR_INTERNAL, "no fusion rule takes %s (node %u)",
              p->graph->nodes[node].op->name, node);
}

/* Node joins group `base`, merging as many of the groups others[0..count) as the node limit and
 * the binding budget allow (greedily, in order: the rest stay separate and their results are
 * read from memory). False when even the node alone does not fit. */
static bool try_join(kf_plan *p, int32_t base, const int32_t *others, uint32_t count,
                     uint32_t node) {
    int32_t with[KF_NODE_MAX_INPUTS];
    uint32_t with_count = 0;
    uint32_t nodes = p->groups[base].node_count;
    for (uint32_t m = 0; m < count; m++) {
        const kf__group *other = &p->groups[others[m]];
        if (nodes + other->node_count >= KF_GROUP_MAX_NODES) {
            continue; /* too big to merge: the other group's result stays in memory */
        }
        with[with_count] = others[m];
        if (joined_bindings(p, base, with, with_count + 1, node) > p->max_storage_buffers) {
            continue; /* over the binding budget: the same */
        }
        with_count++;
        nodes += other->node_count;
    }
    if (p->status != KF_OK ||
        joined_bindings(p, base, with, with_count, node) > p->max_storage_buffers) {
        return false;
    }
    kf__group *grp = &p->groups[base];
    for (uint32_t m = 0; m < with_count; m++) {
        kf__group *other = &p->groups[with[m]];
        for (uint32_t j = 0; j < other->node_count; j++) {
            group_push_node(p, grp, other->nodes[j]);
        }
        for (uint32_t j = 0; j < other->read_count; j++) {
            group_add_read(p, grp, other->reads[j]);
        }
        other->kind = KF__GROUP_DEAD;
        group_release(other);
    }
    if (group_push_node(p, grp, node)) {
        group_add_operands(p, grp, node);
    }
    grp->result = node;
    return true;
}

/* A matmul reading a permute that swaps its operand's last two axes reads the permute's input
 * through its transpose flag instead (the plan's own graph is rewritten, so verification checks
 * the matmul as it runs); a permute nothing else reads is then folded away. */
static void fold_matmul_transposes(kf_plan *p) {
    kf_graph *g = p->graph;
    for (uint32_t id = 1; id < g->node_count; id++) {
        kf__node *n = &g->nodes[id];
        if (n->kind != KF__NODE_OP || n->op->op_class != KF_OP_CLASS_MATMUL) {
            continue;
        }
        for (uint32_t i = 0; i < 2 && i < n->input_count; i++) {
            const kf__node *v = &g->nodes[n->inputs[i]];
            if (v->kind != KF__NODE_OP ||
                !kf__op_swaps_last_two(v->op, &v->params, v->shape.rank)) {
                continue;
            }
            kf__node folded = *n;
            folded.inputs[i] = v->inputs[0];
            bool *flag = i == 0 ? &folded.params.transpose_a : &folded.params.transpose_b;
            *flag = !*flag;
            folded.params.given |= i == 0 ? KF_PARAM_TRANSPOSE_A : KF_PARAM_TRANSPOSE_B;
            kf_shape shapes[KF_NODE_MAX_INPUTS], out;
            for (uint32_t j = 0; j < folded.input_count; j++) {
                shapes[j] = g->nodes[folded.inputs[j]].shape;
            }
            if (kf_op_shape(folded.op, shapes, &folded.params, &out, NULL, 0) != KF_OK ||
                !kf_shape_eq(&out, &n->shape)) {
                continue; /* the kernel takes no transpose of this operand */
            }
            p->uses[n->inputs[i]]--;
            p->uses[v->inputs[0]]++;
            if (p->uses[n->inputs[i]] == 0 && !p->is_output[n->inputs[i]]) {
                p->folded[n->inputs[i]] = true;
                p->uses[v->inputs[0]]--; /* the permute no longer reads it */
            }
            *n = folded;
        }
    }
}

/* An operator node no output depends on (autodiff's seed once a sum's gradient is a constant
 * broadcast in the kernel that reads it: docs/training.md) is planned into no group, like a
 * folded transpose; what it read loses the use. Ids are topological: one pass from the end. */
static void fold_dead_nodes(kf_plan *p) {
    const kf_graph *g = p->graph;
    for (uint32_t id = g->node_count - 1; id > 0; id--) {
        const kf__node *n = &g->nodes[id];
        if (n->kind != KF__NODE_OP || p->uses[id] || p->is_output[id] || p->folded[id]) {
            continue;
        }
        p->folded[id] = true;
        for (uint32_t i = 0; i < n->input_count; i++) {
            p->uses[n->inputs[i]]--;
        }
    }
}

static void plan_vertical(kf_plan *p) {
    const kf_graph *g = p->graph;
    for (uint32_t id = 1; id < g->node_count && p->status == KF_OK; id++) {
        const kf__node *n = &g->nodes[id];
        if (n->kind != KF__NODE_OP || p->folded[id]) {
            continue;
        }
        /* The group it joins: a rooted (producer) operand group first, since a group has one
         * root; the other operands' element-wise groups merge into it. */
        int32_t base = -1;
        int32_t merge[KF_NODE_MAX_INPUTS];
        uint32_t merge_count = 0;
        if (!p->no_fuse) {
            for (uint32_t i = 0; i < n->input_count; i++) {
                uint32_t a = n->inputs[i];
                if (!can_extend(p, a, id)) {
                    continue;
                }
                int32_t gi = p->group_of[a];
                if (p->groups[gi].kind == KF__GROUP_PRODUCER) {
                    if (base < 0 || p->groups[base].kind != KF__GROUP_PRODUCER) {
                        if (base >= 0) {
                            merge[merge_count++] = base;
                        }
                        base = gi;
                    } /* a second producer stays separate: its result is written */
                } else if (base < 0) {
                    base = gi;
                } else {
                    merge[merge_count++] = gi;
                }
            }
        }
        bool joined = base >= 0 && try_join(p, base, merge, merge_count, id);
        /* Over the binding budget: an element-wise operand group may still take it, with the
         * others' results read from memory. */
        for (uint32_t m = 0; !joined && m < merge_count && p->status == KF_OK; m++) {
            int32_t rest[KF_NODE_MAX_INPUTS];
            uint32_t rest_count = 0;
            for (uint32_t j = m + 1; j < merge_count; j++) {
                rest[rest_count++] = merge[j];
            }
            joined = try_join(p, merge[m], rest, rest_count, id);
        }
        if (!joined && p->status == KF_OK) {
            open_group(p, id);
        }
    }
}

typedef struct level_walk {
    uint32_t gi;
    bool changed;
} level_walk;

static void level_visit(const kf_plan *p, uint32_t read, void *user) {
    level_walk *w = user;
    int32_t src = p->group_of[kf__plan_buffer_node(p, read)];
    kf__group *grp = &((kf_plan *)p)->groups[w->gi];
    if (src >= 0 && src != (int32_t)w->gi && p->groups[src].level + 1 > grp->level) {
        grp->level = p->groups[src].level + 1;
        w->changed = true;
    }
}

void kf__plan_settle_levels(kf_plan *p) {
    /* A group can grow after later groups were created (an element-wise node joining it reads
     * their results), so creation order is not dependency order: settle levels to a fixed point.
     * Dependencies are acyclic (a group's value leaves it only through its result), so this ends
     * within one pass per level. */
    for (uint32_t gi = 0; gi < p->group_count; gi++) {
        p->groups[gi].level = 1;
    }
    bool changed = true;
    for (uint32_t pass = 0; changed && pass <= p->group_count; pass++) {
        changed = false;
        for (uint32_t gi = 0; gi < p->group_count; gi++) {
            kf__group *grp = &p->groups[gi];
            if (grp->kind == KF__GROUP_DEAD) {
                continue;
            }
            level_walk w = {.gi = gi};
            group_each_read(p, grp, level_visit, &w);
            changed |= w.changed;
        }
    }
}

/* The bindings one kernel may use: the device's (8, WebGPU's minimum, when it does not say), or
 * the caller's lower one, never above KF_GROUP_MAX_SLOTS; and enough for every operator alone. */
static void set_binding_budget(kf_plan *p, const kf_compile_options *opts) {
    kf_adapter_info info;
    uint32_t device = 8;
    if (kf_context_adapter_info(p->ctx, &info) == KF_OK && info.max_storage_buffers_per_stage) {
        device = info.max_storage_buffers_per_stage;
    }
    uint32_t asked = opts ? opts->max_storage_buffers : 0;
    p->max_storage_buffers = asked && asked < device ? asked : device;
    if (p->max_storage_buffers > KF_GROUP_MAX_SLOTS) {
        p->max_storage_buffers = KF_GROUP_MAX_SLOTS;
    }
    const kf_graph *g = p->graph;
    for (uint32_t id = 1; id < g->node_count; id++) {
        const kf__node *n = &g->nodes[id];
        uint32_t need = n->kind == KF__NODE_OP ? 1 : 0;
        for (uint32_t i = 0; need && i < n->input_count; i++) {
            need += g->nodes[n->inputs[i]].kind != KF__NODE_SCALAR;
        }
        if (need > p->max_storage_buffers) {
            plan_fail(p, asked ? KF_ERROR_INVALID_ARGUMENT : KF_ERROR_LIMIT,
                      "max_storage_buffers %u is below what %s (node %u) needs: %u bindings",
                      p->max_storage_buffers, n->op->name, id, need);
            return;
        }
    }
}

/* Plan-wide rules, in table order. */
static void plan_passes(kf_plan *p) {
    for (uint32_t r = 0; r < kf__fusion_rule_count && p->status == KF_OK; r++) {
        if (kf__fusion_rules[r]->pass) {
            kf__fusion_rules[r]->pass(p);
        }
    }
}

uint32_t kf__plan_buffer_node(const kf_plan *p, uint32_t id) {
    while (p->alias_of && p->alias_of[id]) {
        id = p->alias_of[id];
    }
    return id;
}

/* Groups of reshapes only, of a value in memory, that nothing needs as their own tensor (not an
 * output): the reshape is that value's buffer read with another shape, so the group is dropped
 * and its result aliases the buffer (kf__compiled_add_slot binds the source instead). */
static void plan_free_views(kf_plan *p) {
    for (uint32_t gi = 0; gi < p->group_count; gi++) {
        kf__group *grp = &p->groups[gi];
        bool linear = grp->kind == KF__GROUP_ELEMENTWISE && grp->read_count == 1 &&
                      !p->is_output[grp->result] && !kf__plan_inplace_input(p, grp->result);
        for (uint32_t i = 0; linear && i < grp->node_count; i++) {
            linear = p->graph->nodes[grp->nodes[i]].op->view_linear;
        }
        if (!linear) {
            continue;
        }
        uint32_t source = grp->reads[0];
        p->alias_of[grp->result] = source;
        /* no group: the ordering walks (levels, dependencies) go to the buffer's writer, which
         * later passes may still move (a side of another group) */
        p->group_of[grp->result] = -1;
        grp->kind = KF__GROUP_DEAD;
    }
}

bool kf__compiled_add_slot(kf_plan *p, kf__compiled *c, uint32_t node) {
    node = kf__plan_buffer_node(p, node);
    if (!grow_ids(&c->slots, &c->slot_capacity, c->slot_count)) {
        plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory compiling a group");
        return false;
    }
    c->slots[c->slot_count++] = node;
    return true;
}

void kf__plan_free_compiled(kf__compiled *c) {
    if (c) {
        kf_kernel_destroy(c->kernel);
        kf_free(c->wgsl);
        free(c->slots);
        free(c->buffers);
        free(c->read_nodes);
        free(c->read_bindings);
        free(c->read_elems);
        free(c);
    }
}

void kf__plan_compile_group(kf_plan *p, kf__group *grp) {
    kf__compiled *c = calloc(1, sizeof *c);
    if (!c) {
        plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory compiling a group");
        return;
    }
    grp->compiled = c;
    kf_kernel *k = grp->fuser->build(p, grp, c);
    if (!k) {
        plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory building group %s", grp->rule);
        return;
    }
    c->kernel = k;
    if (kf_kernel_status(k) != KF_OK) {
        plan_fail(p, kf_kernel_status(k), "group %u (%s): %s", (unsigned)(grp - p->groups),
                  grp->rule, kf_kernel_error(k));
        return;
    }
    if (kf_kernel_binding_count(k) != c->slot_count) {
        plan_fail(p, KF_ERROR_INTERNAL, "group %u: kernel has %u bindings, plan tracked %u",
                  (unsigned)(grp - p->groups), kf_kernel_binding_count(k), c->slot_count);
        return;
    }
    c->buffers = calloc(c->slot_count ? c->slot_count : 1, sizeof *c->buffers);
    if (!c->buffers) {
        plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory compiling a group");
        return;
    }
    /* Each binding holds its node's buffer, exactly: the emitter proves the kernel's accesses
     * against these lengths (docs/builder.md, "In bounds by construction"). */
    for (uint32_t s = 0; s < c->slot_count; s++) {
        kf_binding_info info;
        if (kf_kernel_binding_info(k, s, &info) == KF_OK && info.kind != KF_BINDING_UNIFORM) {
            uint64_t stride =
                (info.elem.scalar == KF_SCALAR_F16 ? 2u : 4u) *
                (info.elem.lanes == 3 ? 4u : (info.elem.lanes ? info.elem.lanes : 1u));
            kf_kernel_set_binding_length(k, s, node_bytes(&p->graph->nodes[c->slots[s]]) / stride);
        }
    }
    kf_kernel_set_grid(k, c->grid); /* the grid the plan dispatches it with, for the proof */
    c->wgsl = kf__kernel_emit_for(p->ctx, k); /* the context's kernel transform, if any */
    if (!c->wgsl) {
        plan_fail(p, KF_ERROR_INTERNAL, "group %u: %s", (unsigned)(grp - p->groups),
                  kf_kernel_error(k));
    }
}

/* Frees what planning made: groups, their lists, their compiled kernels. */
static void groups_free(kf_plan *p) {
    for (uint32_t gi = 0; gi < p->group_count; gi++) {
        kf__plan_free_compiled(p->groups[gi].compiled);
        group_release(&p->groups[gi]);
    }
    free(p->groups);
    free(p->scratch);
}

/* ---- buffers, dispatches, run ---- */

static kf_status make_buffers(kf_plan *p) {
    const kf_graph *g = p->graph;
    for (uint32_t id = 1; id < g->node_count; id++) {
        const kf__node *n = &g->nodes[id];
        bool needed =
            n->kind == KF__NODE_INPUT || (n->kind == KF__NODE_OP && p->group_of[id] >= 0 &&
                                          kf__group_writes(&p->groups[p->group_of[id]], id) &&
                                          p->groups[p->group_of[id]].kind != KF__GROUP_DEAD);
        if (!needed) {
            continue;
        }
        kf_status st = kf_buffer_create(p->ctx, node_bytes(n), &p->buffers[id]);
        if (st != KF_OK) {
            plan_fail(p, st, "buffer for %s: %s", n->kind == KF__NODE_INPUT ? n->name : n->op->name,
                      kf_context_last_error(p->ctx));
            return st;
        }
    }
    return KF_OK;
}

kf_status kf__plan_make_dispatches(kf_plan *p) {
    free(p->dispatches);
    free(p->order);
    p->dispatch_count = 0;
    uint32_t n = p->group_count + kf__plan_save_capacity(p);
    n = n ? n : 1;
    p->dispatches = calloc(n, sizeof *p->dispatches);
    p->order = calloc(n, sizeof *p->order);
    /* Every pipeline of the plan asked for at once, so they are created side by side. */
    kf_pipeline_desc *descs = calloc(n, sizeof *descs);
    kf_binding_kind(*kinds)[KF_GROUP_MAX_SLOTS] = calloc(n, sizeof *kinds);
    char(*labels)[160] = calloc(n, sizeof *labels);
    const char **label_of = calloc(n, sizeof *label_of);
    kf_pipeline **pipes = calloc(n, sizeof *pipes);
    if (!p->dispatches || !p->order || !descs || !kinds || !labels || !label_of || !pipes) {
        free(descs);
        free(kinds);
        free(labels);
        free(label_of);
        free(pipes);
        plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory");
        return p->status;
    }
    /* Activation saves first (save.c): copies of inputs that an in-place output overwrites
     * while later groups still read them; order UINT32_MAX (no group). Their pipelines come
     * with them. */
    kf_status st = kf__plan_record_saves(p, p->dispatches, &p->save_count);
    if (st != KF_OK) {
        free(descs);
        free(kinds);
        free(labels);
        free(label_of);
        free(pipes);
        plan_fail(p, st, "activation saves: %s", kf_context_last_error(p->ctx));
        return st;
    }
    for (; p->dispatch_count < p->save_count; p->dispatch_count++) {
        p->order[p->dispatch_count] = UINT32_MAX;
    }
    uint32_t max_level = 0;
    for (uint32_t gi = 0; gi < p->group_count; gi++) {
        if (p->groups[gi].level > max_level) {
            max_level = p->groups[gi].level;
        }
    }
    for (uint32_t level = 1; level <= max_level; level++) {
        for (uint32_t gi = 0; gi < p->group_count; gi++) {
            kf__group *grp = &p->groups[gi];
            if (grp->kind == KF__GROUP_DEAD || grp->absorbed || grp->level != level) {
                continue;
            }
            kf__compiled *c = grp->compiled;
            for (uint32_t s = 0; s < c->slot_count; s++) {
                uint32_t id = c->slots[s];
                c->buffers[s] = p->saved && p->saved[id] ? p->saved[id] : p->buffers[id];
            }
            uint32_t i = p->dispatch_count;
            uint32_t nk = kf_kernel_binding_kinds(c->kernel, kinds[i], KF_GROUP_MAX_SLOTS);
            descs[i] =
                (kf_pipeline_desc){.wgsl = c->wgsl, .bindings = kinds[i], .binding_count = nk};
            snprintf(labels[i], sizeof labels[i], "group %u (%s), kernel '%s'", gi, grp->rule,
                     kf_kernel_name(c->kernel));
            label_of[i] = labels[i];
            kf_dispatch *d = &p->dispatches[p->dispatch_count];
            d->buffers = c->buffers;
            d->buffer_count = c->slot_count;
            memcpy(d->groups, c->grid, sizeof d->groups);
            p->order[p->dispatch_count++] = gi;
        }
    }
    uint32_t first = p->save_count;
    st = kf__pipeline_get_many(p->ctx, descs + first, label_of + first, p->dispatch_count - first,
                               pipes + first);
    for (uint32_t i = first; i < p->dispatch_count; i++) {
        p->dispatches[i].pipeline = pipes[i];
        /* emitted for its declared lengths and grid (compile_group) */
        kf__pipeline_attach_kernel(pipes[i], p->groups[p->order[i]].compiled->kernel, NULL, NULL);
    }
    free(descs);
    free(kinds);
    free(labels);
    free(label_of);
    free(pipes);
    if (st != KF_OK) {
        plan_fail(p, st, "%s", kf_context_last_error(p->ctx));
        return st;
    }
    return KF_OK;
}

/* The unfused counts are the caller's graph's (g: without what the rules rewrote or appended),
 * the fused ones the plan's groups'. */
static void count_bytes(kf_plan *p, const kf_graph *caller) {
    const kf_graph *g = caller;
    for (uint32_t id = 1; id < g->node_count; id++) {
        const kf__node *n = &g->nodes[id];
        if (n->kind != KF__NODE_OP) {
            continue;
        }
        p->unfused_dispatches++;
        p->unfused_bytes += node_bytes(n);
        for (uint32_t i = 0; i < n->input_count; i++) {
            bool repeat = false;
            for (uint32_t j = 0; j < i; j++) {
                repeat |= n->inputs[j] == n->inputs[i];
            }
            const kf__node *a = &g->nodes[n->inputs[i]];
            if (!repeat && a->kind != KF__NODE_SCALAR) {
                p->unfused_bytes += node_bytes(a);
            }
        }
    }
    g = p->graph;
    for (uint32_t gi = 0; gi < p->group_count; gi++) {
        kf__group *grp = &p->groups[gi];
        if (grp->kind == KF__GROUP_DEAD || grp->absorbed || !grp->compiled) {
            continue;
        }
        kf__compiled *c = grp->compiled;
        uint64_t bytes = 0;
        for (uint32_t s = 0; s < c->slot_count; s++) {
            bool repeat = false;
            for (uint32_t t = 0; t < s; t++) {
                repeat |= c->slots[t] == c->slots[s];
            }
            if (!repeat) {
                bytes += node_bytes(&g->nodes[c->slots[s]]);
            }
        }
        c->bytes = bytes;
        p->bytes += bytes;
    }
}

kf_status kf_graph_compile(kf_context *ctx, const kf_graph *g, const kf_compile_options *opts,
                           kf_plan **out) {
    if (!out) {
        kf__context_set_error(ctx, KF_ERROR_INVALID_ARGUMENT, "kf_graph_compile: out is NULL");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    *out = NULL;
    if (!ctx || !g) {
        if (ctx) {
            kf__context_set_error(ctx, KF_ERROR_INVALID_ARGUMENT, "kf_graph_compile: g is NULL");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (g->status != KF_OK) {
        kf__context_set_error(ctx, g->status, "kf_graph_compile: the graph has an error: %s",
                              g->error);
        return g->status;
    }
    if (g->output_count == 0) {
        kf__context_set_error(ctx, KF_ERROR_INVALID_ARGUMENT,
                              "kf_graph_compile: the graph has no outputs (kf_graph_output)");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_plan *p = calloc(1, sizeof *p);
    if (!p) {
        kf__context_set_error(ctx, KF_ERROR_OUT_OF_MEMORY, "kf_graph_compile: out of host memory");
        return KF_ERROR_OUT_OF_MEMORY;
    }
    p->ctx = ctx;
    kf__context_hold(ctx); /* let go in kf_plan_destroy: a plan outliving its context fails */
    p->no_fuse = opts && opts->no_fuse;
    p->activations = opts ? opts->activations : KF_ACTIVATIONS_AUTO;
    p->graph = kf__graph_copy(g);
    p->graph_nodes = g->node_count;
    for (uint32_t r = 0; p->graph && !p->no_fuse && r < kf__fusion_rule_count; r++) {
        if (kf__fusion_rules[r]->rewrite) {
            kf__fusion_rules[r]->rewrite(p);
        }
    }
    if (p->graph && p->graph->status != KF_OK) {
        kf_status st = p->graph->status;
        kf__context_set_error(ctx, st, "kf_graph_compile: planning: %s", p->graph->error);
        kf_plan_destroy(p);
        return st;
    }
    uint32_t nn = p->graph ? p->graph->node_count : g->node_count;
    p->group_of = malloc(sizeof *p->group_of * nn);
    p->uses = calloc(nn, sizeof *p->uses);
    p->is_output = calloc(nn, sizeof *p->is_output);
    p->buffers = calloc(nn, sizeof *p->buffers);
    p->inputs_set = calloc(nn, sizeof *p->inputs_set);
    p->alias_of = calloc(nn, sizeof *p->alias_of);
    p->folded = calloc(nn, sizeof *p->folded);
    if (!p->graph || !p->group_of || !p->uses || !p->is_output || !p->buffers || !p->inputs_set ||
        !p->alias_of || !p->folded) {
        kf_plan_destroy(p);
        kf__context_set_error(ctx, KF_ERROR_OUT_OF_MEMORY, "kf_graph_compile: out of host memory");
        return KF_ERROR_OUT_OF_MEMORY;
    }
    for (uint32_t i = 0; i < nn; i++) {
        p->group_of[i] = -1;
    }
    for (uint32_t id = 1; id < nn; id++) {
        const kf__node *n = &p->graph->nodes[id]; /* the rules' nodes too */
        for (uint32_t i = 0; i < n->input_count; i++) {
            p->uses[n->inputs[i]]++;
        }
    }
    for (uint32_t o = 0; o < p->graph->output_count; o++) {
        p->is_output[p->graph->outputs[o].node] = true; /* renumbered by a rewrite */
    }
    set_binding_budget(p, opts);
    if (!p->no_fuse) {
        fold_matmul_transposes(p);
        fold_dead_nodes(p);
    }
    plan_vertical(p);
    if (!p->no_fuse && p->status == KF_OK) {
        plan_free_views(p);
    }
    kf__plan_settle_levels(p);
    if (!p->no_fuse) {
        plan_passes(p);
    }
    for (uint32_t gi = 0; gi < p->group_count && p->status == KF_OK; gi++) {
        kf__group *grp = &p->groups[gi];
        if (grp->kind != KF__GROUP_DEAD && !grp->absorbed) {
            kf__plan_compile_group(p, grp);
        }
    }
    if (p->status == KF_OK) {
        make_buffers(p);
    }
    if (p->status == KF_OK) {
        kf__plan_make_dispatches(p);
    }
    if (p->status == KF_OK && !(opts && opts->no_prime)) {
        kf_status primed = kf__plan_prime(p);
        if (primed != KF_OK) {
            plan_fail(p, primed, "priming the pipelines: %s", kf_context_last_error(ctx));
        }
    }
    if (p->status != KF_OK) {
        kf_status st = p->status;
        kf__context_set_error(ctx, st, "%s", p->error);
        kf_plan_destroy(p);
        return st;
    }
    count_bytes(p, g);
    *out = p;
    return KF_OK;
}

void kf_plan_destroy(kf_plan *p) {
    if (!p) {
        return;
    }
    kf__plan_binds_destroy(p);
    kf__plan_saves_destroy(p);
    if (p->graph && p->buffers) {
        for (uint32_t id = 0; id < p->graph->node_count; id++) {
            kf_buffer_destroy(p->buffers[id]);
        }
    }
    groups_free(p);
    free(p->group_of);
    free(p->uses);
    free(p->is_output);
    free(p->buffers);
    free(p->inputs_set);
    free(p->alias_of);
    free(p->folded);
    free(p->dispatches);
    free(p->order);
    kf_graph_destroy(p->graph);
    kf_graph_destroy(p->source);
    kf_context *ctx = p->ctx;
    free(p);
    kf__context_let_go(ctx);
}

kf_status kf_plan_summary_get(const kf_plan *p, kf_plan_summary *out) {
    if (!p || !out) {
        if (p) {
            kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "kf_plan_summary_get: out is NULL");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    out->groups = p->dispatch_count;
    out->dispatches = p->dispatch_count;
    out->unfused_dispatches = p->unfused_dispatches;
    out->bytes = p->bytes;
    out->unfused_bytes = p->unfused_bytes;
    return KF_OK;
}

static uint32_t find_input(const kf_plan *p, const char *name) {
    const kf_graph *g = p->graph;
    for (uint32_t id = 1; name && id < g->node_count; id++) {
        if (g->nodes[id].kind == KF__NODE_INPUT && !strcmp(g->nodes[id].name, name)) {
            return id;
        }
    }
    return 0;
}

kf_status kf__plan_upload(kf_plan *p, uint32_t id, const float *data) {
    const kf__node *n = &p->graph->nodes[id];
    if (kf__plan_is_bound(p, id)) {
        /* Verification and host inputs would overwrite the caller's tensor. */
        kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                              "input %s is bound to a GPU tensor: upload into that tensor, or "
                              "unbind it first (kf_plan_bind_input(p, \"%s\", NULL))",
                              n->name, n->name);
        return KF_ERROR_INVALID_ARGUMENT;
    }
    uint64_t count = kf_shape_elements(&n->shape);
    if (n->dtype == KF_DTYPE_F32) {
        return kf_buffer_upload(p->buffers[id], 0, data, count * 4);
    }
    void *staged = malloc(count * kf_dtype_size(n->dtype));
    if (!staged) {
        kf__context_set_error(p->ctx, KF_ERROR_OUT_OF_MEMORY, "%s: out of host memory",
                              n->kind == KF__NODE_INPUT ? n->name : "an output");
        return KF_ERROR_OUT_OF_MEMORY;
    }
    for (uint64_t i = 0; i < count; i++) {
        if (n->dtype == KF_DTYPE_F16) {
            ((uint16_t *)staged)[i] = kf__half_from_float(data[i]);
        } else {
            /* Class indices. What int32 cannot hold exactly (NaN, 1e10, 2.5) becomes -1, which
             * no class has, so its row's loss is NaN as the CPU spec says (docs/operators.md);
             * converting such a float to int would be undefined behaviour. */
            float v = data[i];
            bool whole = v >= -2147483648.0f && v < 2147483648.0f && v == floorf(v);
            ((int32_t *)staged)[i] = whole ? (int32_t)v : -1;
        }
    }
    kf_status st = kf_buffer_upload(p->buffers[id], 0, staged, count * kf_dtype_size(n->dtype));
    free(staged);
    return st;
}

kf_status kf_plan_set_input(kf_plan *p, const char *name, const kf_tensor *value) {
    if (!p || !value || !value->data) {
        if (p) {
            kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "kf_plan_set_input: input %s: %s", name ? name : "(null)",
                                  value ? "the tensor has no data" : "value is NULL");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    uint32_t id = find_input(p, name);
    if (!id) {
        kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT, "plan has no input named '%s'",
                              name ? name : "(null)");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    const kf__node *n = &p->graph->nodes[id];
    if (!kf_shape_eq(&n->shape, &value->shape)) {
        char a[64], b[64];
        kf__context_set_error(p->ctx, KF_ERROR_SHAPE, "input %s: the graph says %s, got %s", name,
                              kf_shape_str(&n->shape, a, sizeof a),
                              kf_shape_str(&value->shape, b, sizeof b));
        return KF_ERROR_SHAPE;
    }
    kf_status st = kf__plan_upload(p, id, value->data);
    if (st == KF_OK) {
        p->inputs_set[id] = true;
    }
    return st;
}

kf_status kf__plan_check_inputs(const kf_plan *p) {
    const kf_graph *g = p->graph;
    for (uint32_t id = 1; id < g->node_count; id++) {
        if (g->nodes[id].kind == KF__NODE_INPUT && !p->inputs_set[id]) {
            kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "input %s was never set (kf_plan_set_input) nor bound "
                                  "(kf_plan_bind_input)",
                                  g->nodes[id].name);
            return KF_ERROR_INVALID_ARGUMENT;
        }
    }
    return kf__plan_check_usage(p);
}

kf_status kf_plan_run(kf_plan *p) {
    if (!p) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_status st = kf__plan_check_inputs(p);
    if (st != KF_OK) {
        return st;
    }
    if (p->dispatch_count > 0) { /* none when every output is an input */
        st = kf_context_run(p->ctx, p->dispatches, p->dispatch_count);
    }
    p->has_run |= st == KF_OK;
    return st;
}

kf_status kf_plan_time(kf_plan *p, uint32_t repeat, kf_timing *out) {
    if (!p || !out) {
        if (p) {
            kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT, "kf_plan_time: out is NULL");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_status st = kf__plan_check_inputs(p);
    if (st != KF_OK) {
        return st;
    }
    if (p->dispatch_count == 0) {
        memset(out, 0, sizeof *out);
        p->has_run = true;
        return KF_OK;
    }
    st = kf_context_time(p->ctx, p->dispatches, p->dispatch_count, repeat, out);
    p->has_run |= st == KF_OK;
    return st;
}

uint32_t kf__plan_output_node(const kf_plan *p, const char *name) {
    for (uint32_t o = 0; name && o < p->graph->output_count; o++) {
        if (!strcmp(p->graph->outputs[o].name, name)) {
            return p->graph->outputs[o].node;
        }
    }
    return 0;
}

kf_status kf__plan_download(const kf_plan *p, uint32_t id, float *data) {
    const kf__node *n = &p->graph->nodes[id];
    uint64_t count = kf_shape_elements(&n->shape);
    id = kf__plan_buffer_node(p, id); /* a free reshape: its source's bytes */
    if (n->dtype == KF_DTYPE_F32) {
        return kf_buffer_download(p->buffers[id], 0, data, count * 4);
    }
    void *staged = malloc(count * kf_dtype_size(n->dtype));
    if (!staged) {
        kf__context_set_error(p->ctx, KF_ERROR_OUT_OF_MEMORY, "%s: out of host memory",
                              n->kind == KF__NODE_INPUT ? n->name : "an output");
        return KF_ERROR_OUT_OF_MEMORY;
    }
    kf_status st = kf_buffer_download(p->buffers[id], 0, staged, count * kf_dtype_size(n->dtype));
    for (uint64_t i = 0; st == KF_OK && i < count; i++) {
        data[i] = n->dtype == KF_DTYPE_F16 ? kf__half_to_float(((uint16_t *)staged)[i])
                                           : (float)((int32_t *)staged)[i];
    }
    free(staged);
    return st;
}

kf_status kf_plan_get_output(const kf_plan *p, const char *name, kf_tensor *out) {
    if (!p || !out || !out->data) {
        if (p) {
            kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "kf_plan_get_output: output %s: %s", name ? name : "(null)",
                                  out ? "the tensor has no data" : "out is NULL");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    uint32_t id = kf__plan_output_node(p, name);
    if (!id) {
        kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT, "plan has no output named '%s'",
                              name ? name : "(null)");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (!p->has_run) {
        /* the buffers hold whatever the allocator gave (zeros): no result to hand out */
        kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                              "output %s: the plan has not run yet (kf_plan_run first)", name);
        return KF_ERROR_INVALID_ARGUMENT;
    }
    const kf__node *n = &p->graph->nodes[id];
    if (!kf_shape_eq(&n->shape, &out->shape)) {
        char a[64], b[64];
        kf__context_set_error(p->ctx, KF_ERROR_SHAPE, "output %s is %s, the tensor given is %s",
                              name, kf_shape_str(&n->shape, a, sizeof a),
                              kf_shape_str(&out->shape, b, sizeof b));
        return KF_ERROR_SHAPE;
    }
    return kf__plan_download(p, id, out->data);
}
