/* Every kernel a plan dispatches, proved in bounds (src/ir/bounds.c) and run through the
 * interpreter, which checks every access, on buffers of exactly its nodes' sizes. Index inputs
 * (labels) get any int32 at all: the kernels must keep a wild label in bounds themselves. */
#include <stdlib.h>
#include <string.h>

#include "fuse/plan_internal.h"
#include "harness.h"
#include "plan_bounds.h"

static void fill(void *data, uint64_t bytes, kf_dtype dtype) {
    if (dtype == KF_DTYPE_I32) {
        int32_t *v = data;
        for (uint64_t i = 0; i < bytes / 4; i++) {
            v[i] = (int32_t)(uint32_t)kt_rand_u64();
        }
    } else if (dtype == KF_DTYPE_F16) {
        uint16_t *v = data;
        for (uint64_t i = 0; i < bytes / 2; i++) {
            v[i] = (uint16_t)(0x3000u + kt_rand_u64() % 0x0c00u); /* 0.125 .. 2 */
        }
    } else {
        float *v = data;
        for (uint64_t i = 0; i < bytes / 4; i++) {
            v[i] = kt_rand_f32(-2.0f, 2.0f);
        }
    }
}

bool kt_plan_in_bounds(const kf_plan *p, uint64_t max_elements, kt_plan_bounds *tally, char *msg,
                       size_t msg_size) {
    for (uint32_t gi = 0; gi < p->group_count; gi++) {
        const kf__group *grp = &p->groups[gi];
        if (grp->kind == KF__GROUP_DEAD || grp->absorbed || !grp->compiled) {
            continue;
        }
        const kf__compiled *c = grp->compiled;
        kf_bounds_report r;
        if (kf_kernel_bounds(c->kernel, &r, NULL) != KF_OK) {
            snprintf(msg, msg_size, "group %u (%s): %s", gi, grp->rule, kf_kernel_error(c->kernel));
            return false;
        }
        tally->kernels++;
        tally->accesses += r.accesses;
        tally->proved += r.proved;
        tally->guarded += r.guarded;
        uint64_t elements = 0;
        for (uint32_t s = 0; s < c->slot_count; s++) {
            elements += kf_shape_elements(&p->graph->nodes[c->slots[s]].shape);
        }
        if (elements > max_elements) {
            continue;
        }
        kf_host_buffer *bufs = calloc(c->slot_count ? c->slot_count : 1, sizeof *bufs);
        bool ok = bufs != NULL;
        for (uint32_t s = 0; ok && s < c->slot_count; s++) {
            const kf__node *n = &p->graph->nodes[c->slots[s]];
            bufs[s].size = kf_shape_elements(&n->shape) * kf_dtype_size(n->dtype);
            bufs[s].data = malloc(bufs[s].size ? bufs[s].size : 1);
            ok = bufs[s].data != NULL;
            if (ok) {
                fill(bufs[s].data, bufs[s].size, n->dtype);
            }
        }
        kf_interp_desc d = {0};
        d.buffers = bufs;
        d.buffer_count = c->slot_count;
        memcpy(d.groups, c->grid, sizeof d.groups);
        kf_status st = ok ? kf_kernel_interpret(c->kernel, &d) : KF_ERROR_OUT_OF_MEMORY;
        for (uint32_t s = 0; bufs && s < c->slot_count; s++) {
            free(bufs[s].data);
        }
        free(bufs);
        tally->interpreted += st == KF_OK;
        if (st != KF_OK && st != KF_ERROR_OUT_OF_MEMORY) {
            snprintf(msg, msg_size, "group %u (%s, %u of %u accesses proved): %s", gi, grp->rule,
                     r.proved, r.accesses, kf_kernel_error(c->kernel));
            return false;
        }
    }
    return true;
}
