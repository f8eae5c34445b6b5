/* The bounds check of every dispatch (kf_context_desc.check_bounds, $KF_CHECK_BOUNDS;
 * docs/runtime.md, "The bounds check"): the pipelines of IR kernels get a checker
 * (kf__checker, interp.c), which the runtime runs on each of their dispatches before the GPU
 * does, through the hook it offers (kf__dispatch_check: the runtime knows no kernels).
 *
 * One pipeline (one WGSL text) can serve kernels proved for different lengths and grids: the
 * attention gradients' WGSL does not depend on the number of heads, which only sets the grid, so
 * a plan over 6 heads and a verification over 2 compile to one pipeline. Each such kernel adds
 * its checker to the pipeline's set (up to SET_MAX), and a dispatch is checked by the latest one
 * whose lengths its buffers meet. */
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

#define SET_MAX 16u
#define KEY_BINDINGS 16u /* bindings a key records; a kernel with more is keyed by its first */

typedef struct check_key {
    uint64_t lengths[KEY_BINDINGS]; /* as proved: the launch's, else the kernel's declared ones */
    uint32_t grid[3];
} check_key;

/* The checkers of one pipeline, in the order their kernels attached, each with its key. */
typedef struct check_set {
    kf__checker *items[SET_MAX];
    check_key keys[SET_MAX];
    uint32_t count;
} check_set;

static check_key key_of(const kf_kernel *k, const uint64_t *lengths, const uint32_t grid[3]) {
    check_key key;
    memset(&key, 0, sizeof key);
    uint32_t n = kf_kernel_binding_count(k);
    for (uint32_t i = 0; i < n && i < KEY_BINDINGS; i++) {
        key.lengths[i] = lengths ? lengths[i] : kf__kernel_binding_length(k, i);
    }
    if (grid) {
        memcpy(key.grid, grid, sizeof key.grid);
    } else {
        kf_kernel_grid(k, key.grid);
    }
    return key;
}

/* The latest checker whose proved lengths d's buffers meet; the first where none does (its run
 * reports the shortfall). */
static kf__checker *checker_for(const check_set *set, const kf_dispatch *d) {
    uint64_t small[8], *sizes = d->buffer_count <= 8 ? small : malloc(d->buffer_count * 8u);
    kf__checker *c = set->items[0];
    for (uint32_t i = 0; sizes && i < d->buffer_count; i++) {
        sizes[i] = kf_buffer_size(d->buffers[i]);
    }
    for (uint32_t j = set->count; sizes && j-- > 0;) {
        if (kf__checker_fits(set->items[j], sizes, d->buffer_count)) {
            c = set->items[j];
            break;
        }
    }
    if (sizes != small) {
        free(sizes);
    }
    return c;
}

/* Interprets dispatch `index` on host copies of its buffers: read back from the device
 * (with_data), or zeros for storage that no address depends on (uniforms are always read). */
static kf_status check_run(void *check, kf_context *ctx, const kf_dispatch *d,
                           const uint32_t groups[3], uint32_t index, bool with_data) {
    double t0 = seconds_now();
    const kf_pipeline *p = d->pipeline;
    uint32_t n = d->buffer_count;
    kf__checker *c = checker_for(check, d);
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
    const check_set *set = check;
    return kf__checker_needs_data(set->items[0]); /* one WGSL: the same for every item */
}

static void check_free(void *check) {
    check_set *set = check;
    for (uint32_t i = 0; i < set->count; i++) {
        kf__checker_free(set->items[i]);
    }
    free(set);
}

static const kf__dispatch_check g_bounds_check = {check_needs_data, check_run, check_free};

void kf__pipeline_attach_kernel(kf_pipeline *p, const kf_kernel *k, const uint64_t *lengths,
                                const uint32_t grid[3]) {
    if (!p || !k || !p->ctx || !p->ctx->check_bounds || p->ctx->kernel_transform ||
        (p->check && p->check_ops != &g_bounds_check)) {
        return;
    }
    check_set *set = p->check;
    check_key key = key_of(k, lengths, grid);
    for (uint32_t i = 0; set && i < set->count; i++) {
        if (!memcmp(&set->keys[i], &key, sizeof key)) {
            return; /* proved for these lengths and this grid already */
        }
    }
    if (set && set->count == SET_MAX) {
        return; /* the first SET_MAX shapes are checked exactly; later ones by the latest fit */
    }
    kf__checker *c = kf__checker_new(k, lengths, grid);
    if (!c) {
        return;
    }
    if (set) {
        set->keys[set->count] = key;
        set->items[set->count++] = c;
        return;
    }
    set = calloc(1, sizeof *set);
    if (!set) {
        kf__checker_free(c);
        return;
    }
    set->keys[0] = key;
    set->items[set->count++] = c;
    kf__pipeline_set_check(p, set, &g_bounds_check);
}
