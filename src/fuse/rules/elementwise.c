/* Element-wise chains: an element-wise operator joins the group of its operand (the planner
 * checks that the operand is that group's result, read once, not an output, of the same shape
 * and dtype); trees merge. The group is one kernel over the result's elements, vec4 where it can
 * be (kf__group_can_vectorize), reading other operands with numpy-style broadcasting. */
#include <stdlib.h>
#include <string.h>

#include "fuse/rules/rule.h"

/* From this many vec4s up, an element-wise kernel computes two vec4s per invocation. */
#define KF_TWO_PER_INVOCATION (1u << 16)
/* The most vec4s one invocation computes ($KF_EW_VEC4S). */
#define KF_MAX_PER_INVOCATION 4u

/* How many of the n vec4s one invocation computes: $KF_EW_VEC4S (1, 2 or 4; for measuring,
 * bench/h200_s7_chain.sh) at any size, else two for large even counts (both loaded before
 * either is stored, so twice the bytes are in flight per invocation: a long chain's arithmetic
 * then hides behind memory; measured on an H200, bench/results/h200-chainexp.txt) and one
 * otherwise. */
static uint32_t vec4s_per_invocation(uint64_t n) {
    const char *env = getenv("KF_EW_VEC4S");
    if (env && (strcmp(env, "1") == 0 || strcmp(env, "2") == 0 || strcmp(env, "4") == 0)) {
        return (uint32_t)(env[0] - '0');
    }
    return n % 2 == 0 && n >= 2u * KF_TWO_PER_INVOCATION ? 2u : 1u;
}

static kf__group *elementwise_open(kf_plan *p, uint32_t node) {
    const kf_operator *op = p->graph->nodes[node].op;
    if (!kf__op_is_elementwise(op) && !op->view_index) {
        return NULL;
    }
    return kf__plan_open_group(p, &kf__rule_elementwise, KF__GROUP_ELEMENTWISE, node);
}

/* Views join too (reshape, permute, slice, concat): each invocation reads the view's input in
 * place, at the element the view maps its own to (src/fuse/emit.c). One that reorders elements
 * joins only a group of views, whose values are loads at any element; a computed value exists
 * only at the invocation's own element, so only reshape (the same element) may follow one. */
static bool elementwise_accepts(const kf_plan *p, const kf__group *grp, uint32_t node) {
    const kf_operator *op = p->graph->nodes[node].op;
    if (kf__op_is_elementwise(op)) {
        return true;
    }
    return op->view_index && (op->view_linear || kf__group_is_views(p, grp));
}

static kf_kernel *elementwise_build(kf_plan *p, kf__group *grp, kf__compiled *c) {
    const kf__node *res = &p->graph->nodes[grp->result];
    bool vectorized = kf__group_can_vectorize(p, grp);
    uint32_t per = vectorized ? KF__PLAN_LANES : 1u;
    kf_type out_type =
        vectorized ? kf_type_vec(KF_SCALAR_F32, KF__PLAN_LANES) : kf__scalar_type_of(res->dtype);
    uint32_t alias = kf__plan_inplace_input(p, grp->result);
    kf_kernel_desc desc = {.name = "elementwise",
                           .workgroup_size = {KF__PLAN_WORKGROUP, 1, 1},
                           .output = alias ? kf_type_scalar(KF_SCALAR_VOID) : out_type};
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    kf__emit s;
    if (!kf__emit_init(&s, p, k, grp, c)) {
        kf_kernel_destroy(k);
        return NULL;
    }
    kf_binding rw = alias ? kf__emit_inplace_binding(&s, alias, out_type) : (kf_binding){0};
    uint64_t n = kf_shape_elements(&res->shape) / per;
    /* `slots` vectors an invocation, invocations apart, all loaded before any is stored. When
     * they do not divide n, the last invocations have fewer: a slot whose range passes n (known
     * here) computes and stores under a guard of its own, and one wholly past n is left out. */
    uint32_t slots = vectorized ? vec4s_per_invocation(n) : 1u;
    uint64_t invocations = (n + slots - 1) / slots;
    kf_val at = kf_let(k, vectorized ? "vidx" : "idx", kf_global_linear(k));
    kf_if(k, kf_binary(k, KF_OP_LT, at, kf_lit_u32(k, (uint32_t)invocations)));
    kf_val where[KF_MAX_PER_INVOCATION], value[KF_MAX_PER_INVOCATION];
    static const char *const names[KF_MAX_PER_INVOCATION] = {"vidx", "vidx2", "vidx3", "vidx4"};
    for (uint32_t j = 0; j < slots && (uint64_t)j * invocations < n; j++) {
        where[j] =
            j ? kf_let(k, names[j], kf_add(k, at, kf_lit_u32(k, (uint32_t)(j * invocations)))) : at;
    }
    for (uint32_t j = 0; j < slots && (j + 1) * invocations <= n; j++) {
        value[j] = kf__emit_invocation(&s, where[j], vectorized);
    }
    for (uint32_t j = 0; j < slots && (uint64_t)j * invocations < n; j++) {
        bool guarded = (j + 1) * invocations > n;
        if (guarded) {
            kf_if(k, kf_binary(k, KF_OP_LT, where[j], kf_lit_u32(k, (uint32_t)n)));
            value[j] = kf__emit_invocation(&s, where[j], vectorized);
        }
        if (alias) {
            kf_store(k, rw, where[j], value[j]);
        } else {
            kf_kernel_yield(k, value[j], where[j]);
        }
        if (guarded) {
            kf_end(k);
        }
    }
    kf_end(k);
    kf__emit_release(&s);
    kf__grid_for(invocations, KF__PLAN_WORKGROUP, c->grid);
    if (!alias && !kf__compiled_add_slot(p, c, grp->result)) {
        kf_kernel_destroy(k);
        return NULL;
    }
    return k;
}

static const char *elementwise_explain(const kf_plan *p, const kf__group *grp) {
    if (kf__group_is_views(p, grp)) {
        /* nothing computes on the view here: say why it is copied */
        if (p->is_output[grp->result]) {
            return "view copy (an output)";
        }
        if (p->uses[grp->result] > 1) {
            return "view copy (read more than once)";
        }
        const kf_graph *g = p->graph;
        for (uint32_t id = grp->result + 1; id < g->node_count; id++) {
            const kf__node *n = &g->nodes[id];
            for (uint32_t i = 0; n->kind == KF__NODE_OP && i < n->input_count; i++) {
                if (n->inputs[i] != grp->result) {
                    continue;
                }
                return n->op->op_class == KF_OP_CLASS_MATMUL
                           ? "view copy (a matmul loads it contiguously)"
                       : n->op->op_class == KF_OP_CLASS_ROW_REDUCTION
                           ? "view copy (a row reduction loads it contiguously)"
                           : "view copy (its reader loads it contiguously)";
            }
        }
        return "view copy";
    }
    if (kf__group_has_strided_view(p, grp)) {
        return "element-wise, views read in place";
    }
    return grp->node_count > 1 ? "element-wise chain" : "element-wise";
}

const kf__fusion_rule kf__rule_elementwise = {
    .name = "element-wise",
    .open = elementwise_open,
    .accepts = elementwise_accepts,
    .build = elementwise_build,
    .explain = elementwise_explain,
};
