/* The bounds check of every dispatch (kf_context_desc.check_bounds, $KF_CHECK_BOUNDS;
 * docs/runtime.md, "The bounds check"): the pipelines of IR kernels get a checker
 * (kf__checker, interp.c), which the runtime runs on each of their dispatches before the GPU
 * does, through the hook it offers (kf__dispatch_check: the runtime knows no kernels). */
#include "ir/ir_internal.h"
#include "runtime/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* CPU time of this thread (the check's cost, whatever else shares the machine) */
static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The subgroup width the interpreter emulates: the device's smallest (the most subgroups per
 * workgroup), 32 where it reports none. */
static uint32_t check_subgroup_size(const kf_context *ctx) {
    uint32_t s = ctx->info.has_subgroups ? ctx->info.subgroup_min_size : 0;
    return s && s <= 128 && !(s & (s - 1)) ? s : 32;
}

/* Interprets dispatch `index` on host copies of its buffers: read back from the device
 * (with_data), or zeros for storage that no address depends on (uniforms are always read). */
static kf_status check_run(void *check, kf_context *ctx, const kf_dispatch *d,
                           const uint32_t groups[3], uint32_t index, bool with_data) {
    double t0 = seconds_now();
    const kf_pipeline *p = d->pipeline;
    kf__checker *c = check;
    uint32_t n = d->buffer_count;
    kf_host_buffer *hb = calloc(n ? n : 1, sizeof *hb);
    kf_status st = hb ? KF_OK : KF_ERROR_OUT_OF_MEMORY;
    for (uint32_t i = 0; st == KF_OK && i < n; i++) {
        uint64_t size = kf_buffer_size(d->buffers[i]);
        bool read = with_data || p->bindings[i] == KF_BINDING_UNIFORM;
        hb[i].size = size;
        hb[i].data = read ? malloc(size ? size : 1) : calloc(size ? size : 1, 1);
        if (!hb[i].data) {
            st = KF_ERROR_OUT_OF_MEMORY;
        } else if (read && size) {
            st = kf_buffer_download(d->buffers[i], 0, hb[i].data, size);
            if (st != KF_OK) {
                free(hb[i].data);
                hb[i].data = NULL;
                for (uint32_t j = 0; j < i; j++) {
                    free(hb[j].data);
                }
                free(hb);
                return st; /* its message is the context's */
            }
        }
    }
    kf__check_result res = {0};
    if (st == KF_OK) {
        kf_interp_desc id = {0};
        id.buffers = hb;
        id.buffer_count = n;
        memcpy(id.groups, groups, sizeof id.groups);
        id.subgroup_size = check_subgroup_size(ctx);
        id.constants = p->constants;
        id.constant_count = p->constant_count;
        st = kf__checker_run(c, &id, ctx->check_budget, &res);
    }
    for (uint32_t i = 0; hb && i < n; i++) {
        free(hb[i].data);
    }
    free(hb);
    kf__bounds_check_stats *cs = &ctx->check;
    if (res.repeat) {
        cs->repeats++;
    } else {
        cs->dispatches++;
        cs->workgroups += res.workgroups;
        cs->workgroups_run += res.checked;
        cs->sampled += res.checked < res.workgroups;
        cs->data_dispatches += with_data;
        cs->guards_fired += res.guards_fired;
    }
    if (st != KF_OK) {
        cs->violations++;
        kf__context_fail(ctx, st == KF_ERROR_OUT_OF_MEMORY ? st : KF_ERROR_INVALID_ARGUMENT,
                         "bounds check (KF_CHECK_BOUNDS): dispatch %u, kernel '%s': %s",
                         (unsigned)index, kf__checker_kernel_name(c),
                         st == KF_ERROR_OUT_OF_MEMORY ? "out of host memory"
                                                      : kf__checker_message(c));
        snprintf(cs->last, sizeof cs->last, "%s", ctx->error);
        st = st == KF_ERROR_OUT_OF_MEMORY ? st : KF_ERROR_INVALID_ARGUMENT;
    }
    cs->seconds += seconds_now() - t0;
    return st;
}

static bool check_needs_data(const void *check) {
    return kf__checker_needs_data(check);
}

static void check_free(void *check) {
    kf__checker_free(check);
}

static const kf__dispatch_check g_bounds_check = {check_needs_data, check_run, check_free};

void kf__pipeline_attach_kernel(kf_pipeline *p, const kf_kernel *k, const uint64_t *lengths,
                                const uint32_t grid[3]) {
    if (p && k && p->ctx && p->ctx->check_bounds && !p->check && !p->ctx->kernel_transform) {
        kf__checker *c = kf__checker_new(k, lengths, grid);
        if (c) {
            kf__pipeline_set_check(p, c, &g_bounds_check);
        }
    }
}
