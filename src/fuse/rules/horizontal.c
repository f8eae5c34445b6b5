/* Horizontal fusion: independent element-wise groups of one level (neither reads the other's
 * result) share one dispatch, each owning a range of the invocation index space. A batch closes
 * where the device's storage-buffer limit would be exceeded, so a larger set splits into as few
 * dispatches as the limit allows. */
#include <stdio.h>

#include "fuse/rules/rule.h"

static void horizontal_pass(kf_plan *p) {
    uint32_t limit = p->max_storage_buffers;
    uint32_t max_level = 0;
    for (uint32_t gi = 0; gi < p->group_count; gi++) {
        if (p->groups[gi].level > max_level) {
            max_level = p->groups[gi].level;
        }
    }
    for (uint32_t level = 1; level <= max_level && p->status == KF_OK; level++) {
        int32_t open = -1;
        uint32_t open_slots = 0;
        uint32_t count = p->group_count; /* groups added below are horizontal: not candidates */
        for (uint32_t gi = 0; gi < count; gi++) {
            kf__group *grp = &p->groups[gi];
            if (grp->kind != KF__GROUP_ELEMENTWISE || grp->level != level) {
                continue;
            }
            uint32_t reads[KF_GROUP_MAX_SLOTS];
            uint32_t need = kf__group_reads(p, grp, reads, KF_GROUP_MAX_SLOTS) + 1;
            if (open >= 0 && (open_slots + need > limit ||
                              p->groups[open].member_count == KF_GROUP_MAX_MEMBERS)) {
                open = -1;
            }
            if (open < 0) {
                /* Start a batch only when another candidate exists at this level. */
                bool another = false;
                for (uint32_t gj = gi + 1; gj < count; gj++) {
                    another |=
                        p->groups[gj].kind == KF__GROUP_ELEMENTWISE && p->groups[gj].level == level;
                }
                if (!another || need >= limit) {
                    continue;
                }
                kf__group *h = kf__plan_new_group(p, &kf__rule_horizontal, KF__GROUP_HORIZONTAL);
                if (!h) {
                    return;
                }
                grp = &p->groups[gi]; /* a new group may have moved the array */
                h->level = level;
                open = (int32_t)(h - p->groups);
                open_slots = 0;
            }
            kf__group *h = &p->groups[open];
            h->members[h->member_count++] = gi;
            grp->absorbed = true;
            open_slots += need;
        }
    }
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
    char name[96];
    snprintf(name, sizeof name, "group%u_horizontal", (unsigned)(h - p->groups));
    kf_kernel_desc desc = {.name = name, .workgroup_size = {KF__PLAN_WORKGROUP, 1, 1}};
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
        kf__emit s = {.p = p, .k = k, .grp = grp, .c = c};
        kf_val at = offset ? kf_let(k, "local", kf_sub(k, idx, lo)) : idx;
        kf_val v = kf__emit_invocation(&s, at, vectorized);
        char out_name[KF_NAME_MAX + 16];
        snprintf(out_name, sizeof out_name, "%s_%u", res->op->name, grp->result);
        kf_type elem = vectorized ? kf_type_vec(KF_SCALAR_F32, KF__PLAN_LANES)
                                  : kf__scalar_type_of(res->dtype);
        kf_binding out = kf_kernel_storage(k, out_name, elem, KF_ACCESS_READ_WRITE);
        c->slots[c->slot_count++] = grp->result;
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
