/* Running plans together: several plans recorded into one compute pass and one submission
 * (kf_plan_run_sequence), and a plan's dispatches handed to a caller's own batch. */
#include "fuse/plan_internal.h"

#include <stdlib.h>
#include <string.h>

kf_status kf_plan_dispatches(const kf_plan *p, const kf_dispatch **out, uint32_t *count) {
    if (!p || !out || !count) {
        if (p) {
            kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "kf_plan_dispatches: %s is NULL", !out ? "out" : "count");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_status st = kf__plan_check_inputs(p);
    if (st != KF_OK) {
        return st;
    }
    *out = p->dispatches;
    *count = p->dispatch_count;
    return KF_OK;
}

static kf_status gather(kf_plan *const *plans, uint32_t count, kf_dispatch **out, uint32_t *total) {
    *out = NULL;
    *total = 0;
    if (!plans || count == 0 || !plans[0]) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_context *ctx = plans[0]->ctx;
    uint64_t n = 0;
    for (uint32_t i = 0; i < count; i++) {
        if (!plans[i]) {
            kf__context_set_error(ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "plan sequence: plans[%u] is NULL", i);
            return KF_ERROR_INVALID_ARGUMENT;
        }
        if (plans[i]->ctx != ctx) {
            kf__context_set_error(ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "plan sequence: plans[%u] belongs to another context", i);
            return KF_ERROR_INVALID_ARGUMENT;
        }
        kf_status st = kf__plan_check_inputs(plans[i]);
        if (st != KF_OK) {
            return st;
        }
        n += plans[i]->dispatch_count;
    }
    if (n > UINT32_MAX) {
        return KF_ERROR_LIMIT;
    }
    kf_dispatch *all = calloc(n ? (size_t)n : 1, sizeof *all);
    if (!all) {
        kf__context_set_error(ctx, KF_ERROR_OUT_OF_MEMORY, "plan sequence: out of memory");
        return KF_ERROR_OUT_OF_MEMORY;
    }
    uint32_t at = 0;
    for (uint32_t i = 0; i < count; i++) {
        memcpy(all + at, plans[i]->dispatches, sizeof *all * plans[i]->dispatch_count);
        at += plans[i]->dispatch_count;
    }
    *out = all;
    *total = at;
    return KF_OK;
}

/* After a successful run each plan's outputs hold results (kf_plan_get_output may read them). */
static void mark_run(kf_plan *const *plans, uint32_t count, kf_status st) {
    for (uint32_t i = 0; st == KF_OK && i < count; i++) {
        plans[i]->has_run = true;
    }
}

kf_status kf_plan_run_sequence(kf_plan *const *plans, uint32_t count) {
    kf_dispatch *all;
    uint32_t total;
    kf_status st = gather(plans, count, &all, &total);
    if (st == KF_OK && total > 0) {
        st = kf_context_run(plans[0]->ctx, all, total);
    }
    mark_run(plans, count, st);
    free(all);
    return st;
}

kf_status kf_plan_time_sequence(kf_plan *const *plans, uint32_t count, uint32_t repeat,
                                kf_timing *out) {
    if (!out) {
        if (plans && count && plans[0]) {
            kf__context_set_error(plans[0]->ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "kf_plan_time_sequence: out is NULL");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    memset(out, 0, sizeof *out);
    kf_dispatch *all;
    uint32_t total;
    kf_status st = gather(plans, count, &all, &total);
    if (st == KF_OK && total > 0) {
        st = kf_context_time(plans[0]->ctx, all, total, repeat, out);
    }
    mark_run(plans, count, st);
    free(all);
    return st;
}
