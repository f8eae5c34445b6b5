/* Horizontal fusion: independent element-wise groups of one level (neither reads the other's
 * result) share one dispatch, each owning a range of the invocation index space. A batch closes
 * where the device's storage-buffer limit would be exceeded, so a larger set splits into as few
 * dispatches as the limit allows. */
#include <stdio.h>
#include <stdlib.h>

#include "fuse/rules/rule.h"

static void horizontal_pass(kf_plan *p) {
    uint32_t limit = p->max_storage_buffers;
    uint32_t count = p->group_count; /* groups added below are horizontal: not candidates */
    uint32_t max_level = 0;
    for (uint32_t gi = 0; gi < count; gi++) {
        if (p->groups[gi].kind == KF__GROUP_ELEMENTWISE && p->groups[gi].level > max_level) {
            max_level = p->groups[gi].level;
        }
    }
    /* The candidates of each level, in group order: by_level[first[l] .. first[l + 1]). */
    uint32_t *first = calloc((size_t)max_level + 2, sizeof *first);
    uint32_t *by_level = malloc(sizeof *by_level * (count ? count : 1));
    if (!first || !by_level) {
        free(first);
        free(by_level);
        kf__plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory planning groups");
        return;
    }
    for (uint32_t gi = 0; gi < count; gi++) {
        if (p->groups[gi].kind == KF__GROUP_ELEMENTWISE) {
            first[p->groups[gi].level + 1]++;
        }
    }
    for (uint32_t l = 1; l <= max_level + 1; l++) {
        first[l] += first[l - 1];
    }
    uint32_t *fill = calloc((size_t)max_level + 1, sizeof *fill);
    for (uint32_t gi = 0; fill && gi < count; gi++) {
        const kf__group *grp = &p->groups[gi];
        if (grp->kind == KF__GROUP_ELEMENTWISE) {
            by_level[first[grp->level] + fill[grp->level]++] = gi;
        }
    }
    if (!fill) {
        kf__plan_fail(p, KF_ERROR_OUT_OF_MEMORY, "out of memory planning groups");
    }
    free(fill);
    for (uint32_t level = 1; level <= max_level && p->status == KF_OK; level++) {
        int32_t open = -1;
        uint32_t open_slots = 0;
        for (uint32_t c = first[level]; c < first[level + 1] && p->status == KF_OK; c++) {
            uint32_t gi = by_level[c];
            uint32_t need = kf__group_bindings(p, &p->groups[gi]);
            if (open >= 0 && open_slots + need > limit) {
                open = -1;
            }
            if (open < 0) {
                /* Start a batch only when another candidate exists at this level. */
                bool another = c + 1 < first[level + 1];
                if (!another || need >= limit) {
                    continue;
                }
                kf__group *h = kf__plan_new_group(p, &kf__rule_horizontal, KF__GROUP_HORIZONTAL);
                if (!h) {
                    break;
                }
                h->level = level;
                open = (int32_t)(h - p->groups);
                open_slots = 0;
            }
            if (kf__group_add_member(p, &p->groups[open], gi)) {
                p->groups[gi].absorbed = true;
                open_slots += need;
            }
        }
    }
    free(first);
    free(by_level);
    /* A batch that ended up with one member gives it back. */
    for (uint32_t gi = 0; gi < p->group_count; gi++) {
        kf__group *h = &p->groups[gi];
        if (h->kind == KF__GROUP_HORIZONTAL && h->member_count == 1) {
            p->groups[h->members[0]].absorbed = false;
            h->kind = KF__GROUP_DEAD;
        }
    }
}

/* Member m owns the range [offset_m, offset_m + n_m) of invocations (n_m in vec4s where it
 * vectorizes). */
static kf_kernel *horizontal_build(kf_plan *p, kf__group *h, kf__compiled *c) {
    kf_kernel_desc desc = {.name = "horizontal", .workgroup_size = {KF__PLAN_WORKGROUP, 1, 1}};
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    kf_val idx = kf_let(k, "idx", kf_global_linear(k));
    uint64_t offset = 0;
    for (uint32_t m = 0; m < h->member_count; m++) {
        kf__group *grp = &p->groups[h->members[m]];
        const kf__node *res = &p->graph->nodes[grp->result];
        bool vectorized = kf__group_can_vectorize(p, grp);
        uint64_t n = kf_shape_elements(&res->shape) / (vectorized ? KF__PLAN_LANES : 1u);
        kf_val lo = kf_lit_u32(k, (uint32_t)offset);
        kf_val hi = kf_lit_u32(k, (uint32_t)(offset + n));
        kf_if(k, kf_binary(k, KF_OP_AND, kf_binary(k, KF_OP_GE, idx, lo),
                           kf_binary(k, KF_OP_LT, idx, hi)));
        kf__emit s;
        if (!kf__emit_init(&s, p, k, grp, c)) {
            kf_kernel_destroy(k);
            return NULL;
        }
        kf_val at = offset ? kf_let(k, "local", kf_sub(k, idx, lo)) : idx;
        kf_type elem = vectorized ? kf_type_vec(KF_SCALAR_F32, KF__PLAN_LANES)
                                  : kf__scalar_type_of(res->dtype);
        uint32_t alias = kf__plan_inplace_input(p, grp->result);
        kf_binding out = alias ? kf__emit_inplace_binding(&s, alias, elem) : (kf_binding){0};
        kf_val v = kf__emit_invocation(&s, at, vectorized);
        kf__emit_release(&s);
        if (!alias) {
            char out_name[32];
            snprintf(out_name, sizeof out_name, "out%u", m);
            out = kf_kernel_storage(k, out_name, elem, KF_ACCESS_READ_WRITE);
            if (!kf__compiled_add_slot(p, c, grp->result)) {
                kf_kernel_destroy(k);
                return NULL;
            }
        }
        kf_store(k, out, at, v);
        kf_end(k);
        offset += n;
    }
    kf__grid_for(offset, KF__PLAN_WORKGROUP, c->grid);
    return k;
}

static const char *horizontal_explain(const kf_plan *p, const kf__group *grp) {
    (void)p;
    (void)grp;
    return "horizontal fusion";
}

const kf__fusion_rule kf__rule_horizontal = {
    .name = "horizontal",
    .pass = horizontal_pass,
    .build = horizontal_build,
    .explain = horizontal_explain,
};
