/* Dispatch and timing: a sequence of kf_dispatch recorded into one compute pass and one
 * submission, optionally bracketed by GPU timestamp queries. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/runtime.h"

/* A dispatch as it will be recorded: the grid after folding. */
typedef struct planned {
    const kf_dispatch *d;
    uint32_t groups[3];
} planned;

static kf_status plan_one(kf_context *ctx, const kf_dispatch *d, uint32_t index, planned *out) {
    const kf_pipeline *p = d->pipeline;
    if (!p) {
        return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT, "dispatch %u: pipeline is NULL",
                                index);
    }
    if (p->ctx != ctx) {
        return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT,
                                "dispatch %u: the pipeline belongs to another context", index);
    }
    if (d->buffer_count != p->binding_count) {
        return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT,
                                "dispatch %u: %u buffers given for a pipeline with %u bindings",
                                index, d->buffer_count, p->binding_count);
    }
    if (d->buffer_count && !d->buffers) {
        return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT, "dispatch %u: buffers is NULL",
                                index);
    }
    for (uint32_t i = 0; i < d->buffer_count; i++) {
        const kf_buffer *b = d->buffers[i];
        if (!b) {
            return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT,
                                    "dispatch %u: buffer %u is NULL", index, i);
        }
        if (b->ctx != ctx) {
            return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT,
                                    "dispatch %u: buffer %u belongs to another context", index, i);
        }
        bool uniform = p->bindings[i] == KF_BINDING_UNIFORM;
        uint32_t align = ctx->limits.min_uniform_buffer_offset_alignment;
        if (uniform && align > 1 && b->view_offset % align) {
            return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT,
                                    "dispatch %u: binding %u is a uniform view at offset %llu, not "
                                    "a multiple of this device's minUniformBufferOffsetAlignment "
                                    "(%u bytes)",
                                    index, i, (unsigned long long)b->view_offset, align);
        }
        uint64_t limit = uniform ? ctx->limits.max_uniform_buffer_binding_size
                                 : ctx->limits.max_storage_buffer_binding_size;
        if (b->alloc_size > limit) {
            return kf__context_fail(ctx, KF_ERROR_LIMIT,
                                    "dispatch %u: binding %u is a buffer of %llu bytes, above this "
                                    "device's %s (%llu bytes)",
                                    index, i, (unsigned long long)b->size,
                                    uniform ? "maxUniformBufferBindingSize"
                                            : "maxStorageBufferBindingSize",
                                    (unsigned long long)limit);
        }
    }
    uint32_t max = ctx->limits.max_compute_workgroups_per_dimension;
    uint32_t g[3];
    for (int k = 0; k < 3; k++) {
        g[k] = d->groups[k] ? d->groups[k] : 1;
    }
    if (g[0] > max && g[1] == 1 && g[2] == 1) {
        /* Fold a long 1-D grid into x * y >= groups[0]; kernels index workgroups linearly as
         * workgroup_id.x + workgroup_id.y * num_workgroups.x and skip the extra ones. */
        uint32_t y = (uint32_t)(((uint64_t)g[0] + max - 1) / max);
        uint32_t x = (uint32_t)(((uint64_t)g[0] + y - 1) / y);
        g[0] = x;
        g[1] = y;
    }
    for (int k = 0; k < 3; k++) {
        if (g[k] > max) {
            return kf__context_fail(
                ctx, KF_ERROR_LIMIT,
                "dispatch %u: %u x %u x %u workgroups; dimension %d is above this "
                "device's maxComputeWorkgroupsPerDimension (%u), and only a 1-D grid "
                "is folded",
                index, d->groups[0], d->groups[1], d->groups[2], k, max);
        }
    }
    out->d = d;
    memcpy(out->groups, g, sizeof g);
    return KF_OK;
}

static kf_status plan(kf_context *ctx, const kf_dispatch *dispatches, uint32_t count,
                      planned **out) {
    *out = NULL;
    if (!dispatches && count) {
        return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT, "dispatches is NULL");
    }
    if (count == 0) {
        return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT,
                                "no dispatches to run (count is 0)");
    }
    planned *steps = calloc(count, sizeof *steps);
    if (!steps) {
        return kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    for (uint32_t i = 0; i < count; i++) {
        kf_status st = plan_one(ctx, &dispatches[i], i, &steps[i]);
        if (st != KF_OK) {
            free(steps);
            return st;
        }
    }
    *out = steps;
    return KF_OK;
}

/* Finishes `enc` (recorded inside an error scope kf__context_scope_push opened), frees the
 * bind-group entries `e` and hands out the command buffer of `count` dispatches. */
static kf_status finish_recording(kf_context *ctx, wg_command_encoder enc, wg_bind_group_entry *e,
                                  uint32_t count, wg_command_buffer *out) {
    wg_command_buffer commands = ctx->api.command_encoder_finish(enc, NULL);
    ctx->api.command_encoder_release(enc);
    free(e);
    kf_status st = kf__context_scope_pop(ctx, KF_ERROR_VALIDATION, "recording dispatches");
    if (st != KF_OK) {
        if (commands) {
            ctx->api.command_buffer_release(commands);
        }
        return st;
    }
    ctx->stats.dispatches += count;
    *out = commands;
    return KF_OK;
}

/* Binds one step's buffers (through the caller's entries `e`, room for its buffer count) and
 * dispatches it into `pass`. */
static void encode_step(kf_context *ctx, wg_compute_pass pass, const planned *step,
                        wg_bind_group_entry *e) {
    const kf_dispatch *d = step->d;
    const kf_pipeline *p = d->pipeline;
    for (uint32_t b = 0; b < d->buffer_count; b++) {
        memset(&e[b], 0, sizeof e[b]);
        e[b].binding = b;
        e[b].buffer = kf__buffer_handle(d->buffers[b], &e[b].offset);
        e[b].size = d->buffers[b]->alloc_size;
    }
    wg_bind_group_desc bd = {
        NULL, {"kfuse bind group", WG_STRLEN}, p->bind_group_layout, d->buffer_count, e};
    wg_bind_group group = ctx->api.device_create_bind_group(ctx->device, &bd);
    ctx->api.compute_pass_set_pipeline(pass, p->handle);
    ctx->api.compute_pass_set_bind_group(pass, 0, group, 0, NULL);
    ctx->api.compute_pass_dispatch(pass, step->groups[0], step->groups[1], step->groups[2]);
    if (group) {
        ctx->api.bind_group_release(group); /* the pass keeps what it uses alive */
    }
}

/* Records the whole sequence as one compute pass (WebGPU orders the dispatches of a pass and
 * makes each one's writes visible to the next). */
static kf_status record(kf_context *ctx, const planned *steps, uint32_t count, bool timestamps,
                        wg_command_buffer *out) {
    *out = NULL;
    uint32_t most = 1;
    for (uint32_t i = 0; i < count; i++) {
        most = steps[i].d->buffer_count > most ? steps[i].d->buffer_count : most;
    }
    wg_bind_group_entry *e = calloc(most, sizeof *e);
    if (!e) {
        return kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    kf__context_scope_push(ctx);
    wg_command_encoder enc = ctx->api.device_create_command_encoder(ctx->device, NULL);
    wg_pass_timestamp_writes writes = {NULL, ctx->timestamps, 0, 1};
    wg_compute_pass_desc pd = {NULL, {"kfuse pass", WG_STRLEN}, timestamps ? &writes : NULL};
    wg_compute_pass pass = ctx->api.command_encoder_begin_compute_pass(enc, &pd);
    for (uint32_t i = 0; i < count; i++) {
        encode_step(ctx, pass, &steps[i], e);
    }
    ctx->api.compute_pass_end(pass);
    ctx->api.compute_pass_release(pass);
    if (timestamps) {
        ctx->api.command_encoder_resolve_query_set(enc, ctx->timestamps, 0, 2,
                                                   ctx->timestamp_resolve, 0);
        ctx->api.command_encoder_copy_buffer_to_buffer(enc, ctx->timestamp_resolve, 0,
                                                       ctx->timestamp_readback, 0, 16);
    }
    return finish_recording(ctx, enc, e, count, out);
}

static kf_status run_planned(kf_context *ctx, const planned *steps, uint32_t count,
                             bool timestamps) {
    wg_command_buffer commands;
    kf_status st = record(ctx, steps, count, timestamps, &commands);
    if (st != KF_OK) {
        return st;
    }
    st = kf__context_submit_wait(ctx, commands, "running dispatches");
    ctx->api.command_buffer_release(commands);
    return st;
}

/* --- the bounds check (kf_context_desc.check_bounds; docs/runtime.md, "The bounds check") --- */

const kf__bounds_check_stats *kf__context_bounds_check_stats(const kf_context *ctx) {
    return ctx ? &ctx->check : NULL;
}

void kf__pipeline_set_check(kf_pipeline *p, void *check, const kf__dispatch_check *ops) {
    if (p && !p->check) {
        p->check = check;
        p->check_ops = ops;
    } else if (ops && check) {
        ops->free(check);
    }
}

/* Checks dispatch `index`; the check itself is the layer above's (src/ir/check.c). */
static kf_status check_one(kf_context *ctx, const planned *step, uint32_t index, bool with_data) {
    const kf_pipeline *p = step->d->pipeline;
    return p->check_ops->run(p->check, ctx, step->d, step->groups, index, with_data);
}

/* Runs the sequence with every dispatch of an IR kernel checked first: those whose addresses do
 * not depend on data before anything runs, the others each on its buffers as the dispatches
 * before it left them (the sequence is split there). The statistics count it as one
 * submission and no download, as an unchecked run. */
static kf_status run_checked(kf_context *ctx, const planned *steps, uint32_t count) {
    uint64_t submissions = ctx->stats.submissions, downloads = ctx->stats.download_bytes;
    kf_status st = KF_OK;
    bool later = false;
    for (uint32_t i = 0; st == KF_OK && i < count; i++) {
        const kf_pipeline *p = steps[i].d->pipeline;
        if (!p->check) {
            ctx->check.unchecked++;
        } else if (!p->check_ops->needs_data(p->check)) {
            st = check_one(ctx, &steps[i], i, false);
        } else {
            later = true;
        }
    }
    uint32_t start = 0;
    for (uint32_t i = 0; later && st == KF_OK && i < count; i++) {
        const kf_pipeline *p = steps[i].d->pipeline;
        if (!p->check || !p->check_ops->needs_data(p->check)) {
            continue;
        }
        if (i > start) {
            st = run_planned(ctx, steps + start, i - start, false);
            start = i;
        }
        if (st == KF_OK) {
            st = check_one(ctx, &steps[i], i, true);
        }
    }
    if (st == KF_OK) {
        st = run_planned(ctx, steps + start, count - start, false);
    }
    if (ctx->stats.submissions > submissions) {
        ctx->stats.submissions = submissions + 1;
    }
    ctx->stats.download_bytes = downloads;
    return st;
}

kf_status kf_context_run(kf_context *ctx, const kf_dispatch *dispatches, uint32_t count) {
    if (!ctx) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_status st = kf__context_check(ctx);
    if (st != KF_OK) {
        return st;
    }
    planned *steps;
    st = plan(ctx, dispatches, count, &steps);
    if (st != KF_OK) {
        return st;
    }
    st = ctx->check_bounds ? run_checked(ctx, steps, count) : run_planned(ctx, steps, count, false);
    free(steps);
    return st;
}

/* --- timing --- */

void kf__context_timing_destroy(kf_context *ctx) {
    if (ctx->timestamps) {
        ctx->api.query_set_destroy(ctx->timestamps);
        ctx->api.query_set_release(ctx->timestamps);
        ctx->timestamps = NULL;
    }
    wg_buffer *buffers[2] = {&ctx->timestamp_resolve, &ctx->timestamp_readback};
    for (int i = 0; i < 2; i++) {
        if (*buffers[i]) {
            ctx->api.buffer_destroy(*buffers[i]);
            ctx->api.buffer_release(*buffers[i]);
            *buffers[i] = NULL;
        }
    }
}

static kf_status ensure_timestamps(kf_context *ctx) {
    if (ctx->timestamps) {
        return KF_OK;
    }
    kf__context_scope_push(ctx);
    wg_query_set_desc qd = {NULL, {"kfuse timestamps", WG_STRLEN}, WG_QUERY_TIMESTAMP, 2};
    ctx->timestamps = ctx->api.device_create_query_set(ctx->device, &qd);
    wg_buffer_desc rd = {NULL,
                         {"kfuse timestamp resolve", WG_STRLEN},
                         WG_USAGE_QUERY_RESOLVE | WG_USAGE_COPY_SRC,
                         16,
                         0};
    ctx->timestamp_resolve = ctx->api.device_create_buffer(ctx->device, &rd);
    wg_buffer_desc bd = {NULL,
                         {"kfuse timestamp readback", WG_STRLEN},
                         WG_USAGE_MAP_READ | WG_USAGE_COPY_DST,
                         16,
                         0};
    ctx->timestamp_readback = ctx->api.device_create_buffer(ctx->device, &bd);
    kf_status st = kf__context_scope_pop(ctx, KF_ERROR_VALIDATION, "creating timestamp queries");
    if (st != KF_OK) {
        kf__context_timing_destroy(ctx);
    }
    return st;
}

typedef struct map_done {
    bool done;
    uint32_t status;
} map_done;

static void on_mapped(uint32_t status, wg_string message, void *user1, void *user2) {
    (void)message;
    (void)user2;
    map_done *m = user1;
    m->done = true;
    m->status = status;
}

/* Elapsed GPU time of the last timestamped run, in ms; a negative value when the timestamps
 * make no sense (some drivers return zeros). */
static kf_status read_timestamps(kf_context *ctx, double *ms) {
    map_done *m = kf__callback_alloc(sizeof *m);
    if (!m) {
        return kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY, "reading timestamps: out of memory");
    }
    wg_map_callback_info info = {NULL, WG_CALLBACK_WAIT_ANY_ONLY, on_mapped, m, NULL};
    kf_status st = kf__context_wait(
        ctx, ctx->api.buffer_map_async(ctx->timestamp_readback, WG_MAP_READ, 0, 16, info),
        "reading timestamps");
    uint32_t status = m->status;
    kf__callback_release(ctx, m, st == KF_OK);
    if (st != KF_OK) {
        return st;
    }
    if (status != WG_REQUEST_SUCCESS) {
        st = kf__context_check(ctx);
        return st != KF_OK ? st
                           : kf__context_fail(ctx, KF_ERROR_INTERNAL,
                                              "mapping the timestamp buffer failed");
    }
    const uint64_t *t = ctx->api.buffer_get_const_mapped_range(ctx->timestamp_readback, 0, 16);
    *ms = -1.0;
    if (t && t[1] > t[0]) {
        *ms = (double)(t[1] - t[0]) * 1e-6;
    }
    ctx->api.buffer_unmap(ctx->timestamp_readback);
    return KF_OK;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static kf_status measure(kf_context *ctx, const planned *steps, uint32_t count, uint32_t repeat,
                         bool timestamps, double *samples, bool *timestamps_ok) {
    *timestamps_ok = true;
    for (uint32_t r = 0; r < repeat; r++) {
        wg_command_buffer commands;
        kf_status st = record(ctx, steps, count, timestamps, &commands);
        if (st != KF_OK) {
            return st;
        }
        double t0 = now_ms();
        st = kf__context_submit_wait(ctx, commands, "timing dispatches");
        double t1 = now_ms();
        ctx->api.command_buffer_release(commands);
        if (st != KF_OK) {
            return st;
        }
        samples[r] = t1 - t0;
        if (timestamps) {
            st = read_timestamps(ctx, &samples[r]);
            if (st != KF_OK) {
                return st;
            }
            if (samples[r] <= 0.0) {
                *timestamps_ok = false;
                return KF_OK;
            }
        }
    }
    return KF_OK;
}

kf_status kf_context_time(kf_context *ctx, const kf_dispatch *dispatches, uint32_t count,
                          uint32_t repeat, kf_timing *out) {
    if (!ctx || !out) {
        return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT, "kf_context_time: %s is NULL",
                                ctx ? "out" : "ctx");
    }
    memset(out, 0, sizeof *out);
    kf_status st = kf__context_check(ctx);
    if (st != KF_OK) {
        return st;
    }
    if (repeat == 0) {
        repeat = 10;
    }
    planned *steps;
    st = plan(ctx, dispatches, count, &steps);
    if (st != KF_OK) {
        return st;
    }
    if (ctx->check_bounds) {
        /* checked once, run as the first warm-up */
        st = run_checked(ctx, steps, count);
        if (st != KF_OK) {
            free(steps);
            return st;
        }
    }
    double *samples = calloc(repeat, sizeof *samples);
    if (!samples) {
        free(steps);
        return kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY, "kf_context_time: out of host memory");
    }
    bool timestamps = ctx->info.has_timestamps && ensure_timestamps(ctx) == KF_OK;
    /* Warm-up: caches, page faults, and a GPU's clocks, which idle low and take some
     * milliseconds of steady work to rise; short kernels need many runs for that. */
    double warm_start = now_ms();
    for (uint32_t w = 0; st == KF_OK && w < 200 && (w < 1 || now_ms() - warm_start < 50.0); w++) {
        st = run_planned(ctx, steps, count, false);
    }
    bool timestamps_ok = false;
    if (st == KF_OK) {
        st = measure(ctx, steps, count, repeat, timestamps, samples, &timestamps_ok);
    }
    if (st == KF_OK && timestamps && !timestamps_ok) {
        /* The driver gave unusable timestamps: time with the wall clock instead. */
        timestamps = false;
        st = measure(ctx, steps, count, repeat, false, samples, &timestamps_ok);
    }
    if (st == KF_OK) {
        qsort(samples, repeat, sizeof *samples, compare_double);
        out->min_ms = samples[0];
        out->median_ms = repeat % 2 ? samples[repeat / 2]
                                    : 0.5 * (samples[repeat / 2 - 1] + samples[repeat / 2]);
        out->gpu_timestamps = timestamps;
    }
    free(samples);
    free(steps);
    return st;
}

/* --- timing each dispatch (kf_context_time_each) --- */

#define KF__EACH_MAX 2048u /* a query set holds at most 4096 timestamps */

typedef struct each_queries {
    wg_query_set set;
    wg_buffer resolve, readback;
    uint64_t bytes;
} each_queries;

static void each_destroy(kf_context *ctx, each_queries *q) {
    if (q->set) {
        ctx->api.query_set_destroy(q->set);
        ctx->api.query_set_release(q->set);
    }
    wg_buffer *buffers[2] = {&q->resolve, &q->readback};
    for (int i = 0; i < 2; i++) {
        if (*buffers[i]) {
            ctx->api.buffer_destroy(*buffers[i]);
            ctx->api.buffer_release(*buffers[i]);
        }
    }
    memset(q, 0, sizeof *q);
}

static kf_status each_create(kf_context *ctx, uint32_t count, each_queries *q) {
    memset(q, 0, sizeof *q);
    q->bytes = 16ull * count;
    kf__context_scope_push(ctx);
    wg_query_set_desc qd = {
        NULL, {"kfuse timestamps each", WG_STRLEN}, WG_QUERY_TIMESTAMP, 2 * count};
    q->set = ctx->api.device_create_query_set(ctx->device, &qd);
    wg_buffer_desc rd = {NULL,
                         {"kfuse timestamp each resolve", WG_STRLEN},
                         WG_USAGE_QUERY_RESOLVE | WG_USAGE_COPY_SRC,
                         q->bytes,
                         0};
    q->resolve = ctx->api.device_create_buffer(ctx->device, &rd);
    wg_buffer_desc bd = {NULL,
                         {"kfuse timestamp each readback", WG_STRLEN},
                         WG_USAGE_MAP_READ | WG_USAGE_COPY_DST,
                         q->bytes,
                         0};
    q->readback = ctx->api.device_create_buffer(ctx->device, &bd);
    kf_status st = kf__context_scope_pop(ctx, KF_ERROR_VALIDATION, "creating timestamp queries");
    if (st != KF_OK) {
        each_destroy(ctx, q);
    }
    return st;
}

/* One submission: dispatch i in a pass of its own writing timestamps 2i and 2i + 1. */
static kf_status record_each(kf_context *ctx, const planned *steps, uint32_t count,
                             const each_queries *q, wg_command_buffer *out) {
    *out = NULL;
    uint32_t most = 1;
    for (uint32_t i = 0; i < count; i++) {
        most = steps[i].d->buffer_count > most ? steps[i].d->buffer_count : most;
    }
    wg_bind_group_entry *e = calloc(most, sizeof *e);
    if (!e) {
        return kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    kf__context_scope_push(ctx);
    wg_command_encoder enc = ctx->api.device_create_command_encoder(ctx->device, NULL);
    for (uint32_t i = 0; i < count; i++) {
        wg_pass_timestamp_writes writes = {NULL, q->set, 2 * i, 2 * i + 1};
        wg_compute_pass_desc pd = {NULL, {"kfuse pass", WG_STRLEN}, &writes};
        wg_compute_pass pass = ctx->api.command_encoder_begin_compute_pass(enc, &pd);
        encode_step(ctx, pass, &steps[i], e);
        ctx->api.compute_pass_end(pass);
        ctx->api.compute_pass_release(pass);
    }
    ctx->api.command_encoder_resolve_query_set(enc, q->set, 0, 2 * count, q->resolve, 0);
    ctx->api.command_encoder_copy_buffer_to_buffer(enc, q->resolve, 0, q->readback, 0, q->bytes);
    return finish_recording(ctx, enc, e, count, out);
}

/* Each dispatch's device time of the last submission into ms; *ok false when a pair of
 * timestamps makes no sense (some drivers return zeros). */
static kf_status read_each(kf_context *ctx, const each_queries *q, uint32_t count, double *ms,
                           bool *ok) {
    map_done *m = kf__callback_alloc(sizeof *m);
    if (!m) {
        return kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY, "reading timestamps: out of memory");
    }
    wg_map_callback_info info = {NULL, WG_CALLBACK_WAIT_ANY_ONLY, on_mapped, m, NULL};
    kf_status st = kf__context_wait(
        ctx, ctx->api.buffer_map_async(q->readback, WG_MAP_READ, 0, q->bytes, info),
        "reading timestamps");
    uint32_t status = m->status;
    kf__callback_release(ctx, m, st == KF_OK);
    if (st != KF_OK) {
        return st;
    }
    if (status != WG_REQUEST_SUCCESS) {
        st = kf__context_check(ctx);
        return st != KF_OK ? st
                           : kf__context_fail(ctx, KF_ERROR_INTERNAL,
                                              "mapping the timestamp buffer failed");
    }
    const uint64_t *t = ctx->api.buffer_get_const_mapped_range(q->readback, 0, q->bytes);
    *ok = t != NULL;
    for (uint32_t i = 0; t && i < count; i++) {
        ms[i] = t[2 * i + 1] >= t[2 * i] ? (double)(t[2 * i + 1] - t[2 * i]) * 1e-6 : -1.0;
        *ok &= t[2 * i + 1] >= t[2 * i] && t[2 * i + 1] != 0;
    }
    ctx->api.buffer_unmap(q->readback);
    return KF_OK;
}

static double median_of(double *v, uint32_t n) {
    qsort(v, n, sizeof *v, compare_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

kf_status kf_context_time_each(kf_context *ctx, const kf_dispatch *dispatches, uint32_t count,
                               uint32_t repeat, double *ms, kf_timing *sum) {
    if (!ctx || !ms || !sum) {
        return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT, "kf_context_time_each: %s is NULL",
                                !ctx  ? "ctx"
                                : !ms ? "ms"
                                      : "sum");
    }
    memset(sum, 0, sizeof *sum);
    kf_status st = kf__context_check(ctx);
    if (st != KF_OK) {
        return st;
    }
    if (count > KF__EACH_MAX) {
        return kf__context_fail(ctx, KF_ERROR_LIMIT,
                                "kf_context_time_each: %u dispatches, at most %u are timed one by "
                                "one",
                                count, KF__EACH_MAX);
    }
    repeat = repeat ? repeat : 10;
    planned *steps;
    st = plan(ctx, dispatches, count, &steps);
    if (st != KF_OK) {
        return st;
    }
    /* samples[r * count + i]: dispatch i in submission r; sums[r] their sum; column: repeat */
    double *samples = calloc((size_t)repeat * count + 2u * repeat, sizeof *samples);
    if (!samples) {
        free(steps);
        return kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY,
                                "kf_context_time_each: out of host memory");
    }
    double *sums = samples + (size_t)repeat * count, *column = sums + repeat;
    st = ctx->check_bounds ? run_checked(ctx, steps, count) : KF_OK;
    double warm_start = now_ms();
    for (uint32_t w = 0; st == KF_OK && w < 200 && (w < 1 || now_ms() - warm_start < 50.0); w++) {
        st = run_planned(ctx, steps, count, false);
    }
    each_queries q = {0};
    bool timestamps =
        st == KF_OK && ctx->info.has_timestamps && each_create(ctx, count, &q) == KF_OK;
    bool ok = timestamps;
    for (uint32_t r = 0; st == KF_OK && ok && r < repeat; r++) {
        wg_command_buffer commands;
        st = record_each(ctx, steps, count, &q, &commands);
        if (st == KF_OK) {
            st = kf__context_submit_wait(ctx, commands, "timing dispatches");
            ctx->api.command_buffer_release(commands);
        }
        if (st == KF_OK) {
            st = read_each(ctx, &q, count, samples + (size_t)r * count, &ok);
        }
    }
    each_destroy(ctx, &q);
    if (st == KF_OK && !ok) {
        /* no usable timestamps: each dispatch alone, the wall clock around its submission */
        timestamps = false;
        for (uint32_t i = 0; st == KF_OK && i < count; i++) {
            bool unused;
            st = measure(ctx, steps + i, 1, repeat, false, column, &unused);
            for (uint32_t r = 0; st == KF_OK && r < repeat; r++) {
                samples[(size_t)r * count + i] = column[r];
            }
        }
    }
    for (uint32_t r = 0; st == KF_OK && r < repeat; r++) {
        sums[r] = 0;
        for (uint32_t i = 0; i < count; i++) {
            sums[r] += samples[(size_t)r * count + i];
        }
    }
    for (uint32_t i = 0; st == KF_OK && i < count; i++) {
        for (uint32_t r = 0; r < repeat; r++) {
            column[r] = samples[(size_t)r * count + i];
        }
        ms[i] = median_of(column, repeat);
    }
    if (st == KF_OK) {
        sum->median_ms = median_of(sums, repeat);
        sum->min_ms = sums[0];
        sum->gpu_timestamps = timestamps;
    }
    free(samples);
    free(steps);
    return st;
}
