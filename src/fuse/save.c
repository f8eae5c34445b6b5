/* The seeds' fused activation saves, for any number of copies of any sizes: horizontal fusion of
 * independent copies into as few dispatches as the storage-buffer limit allows. */
#include "fuse/plan_internal.h"

#include <stdio.h>
#include <stdlib.h>

#define KF_SAVE_WORKGROUP 256u

/* One kernel copying pairs[0..count) segment by segment over one linear index space. */
static kf_kernel *copy_kernel(const kf_copy_pair *pairs, uint32_t count, uint32_t lanes,
                              uint64_t *total) {
    kf_kernel_desc desc = {.name = "save_activations", .workgroup_size = {KF_SAVE_WORKGROUP, 1, 1}};
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    kf_type elem = lanes > 1 ? kf_type_vec(KF_SCALAR_U32, lanes) : kf_type_scalar(KF_SCALAR_U32);
    kf_val idx = kf_let(k, "idx", kf_global_linear(k));
    uint64_t offset = 0;
    for (uint32_t i = 0; i < count; i++) {
        char name[32];
        snprintf(name, sizeof name, "src%u", i);
        kf_binding src = kf_kernel_storage(k, name, elem, KF_ACCESS_READ);
        snprintf(name, sizeof name, "dst%u", i);
        kf_binding dst = kf_kernel_storage(k, name, elem, KF_ACCESS_READ_WRITE);
        uint64_t n = pairs[i].size / (4u * lanes);
        kf_val lo = kf_lit_u32(k, (uint32_t)offset);
        kf_val hi = kf_lit_u32(k, (uint32_t)(offset + n));
        kf_if(k, kf_binary(k, KF_OP_AND, kf_binary(k, KF_OP_GE, idx, lo),
                           kf_binary(k, KF_OP_LT, idx, hi)));
        kf_val at = offset ? kf_sub(k, idx, lo) : idx;
        kf_store(k, dst, at, kf_load(k, src, at));
        kf_end(k);
        offset += n;
    }
    *total = offset;
    return k;
}

kf_status kf_save_activations_record(kf_context *ctx, const kf_copy_pair *pairs, uint32_t count,
                                     kf_buffer **bindings, kf_dispatch *out, uint32_t *dispatches) {
    if (dispatches) {
        *dispatches = 0;
    }
    if (!ctx || (count && (!pairs || !bindings || !out))) {
        kf__context_set_error(ctx, KF_ERROR_INVALID_ARGUMENT, "save_activations: %s is NULL",
                              !pairs      ? "pairs"
                              : !bindings ? "bindings"
                                          : "out");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    uint32_t lanes = 4;
    for (uint32_t i = 0; i < count; i++) {
        const kf_copy_pair *c = &pairs[i];
        if (!c->src || !c->dst || c->size % 4 != 0 || c->size > kf_buffer_size(c->src) ||
            c->size > kf_buffer_size(c->dst) || c->src == c->dst) {
            const char *what = !c->src                            ? "src is NULL"
                               : !c->dst                          ? "dst is NULL"
                               : c->src == c->dst                 ? "src and dst are one buffer"
                               : c->size % 4 != 0                 ? "size is not a multiple of 4"
                               : c->size > kf_buffer_size(c->src) ? "size exceeds src"
                                                                  : "size exceeds dst";
            kf__context_set_error(ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "save_activations: pair %u: %s (size %llu; need distinct src "
                                  "and dst buffers and a size that is a multiple of 4 and fits "
                                  "both)",
                                  i, what, (unsigned long long)c->size);
            return KF_ERROR_INVALID_ARGUMENT;
        }
        if (c->size / 4 > UINT32_MAX) {
            kf__context_set_error(ctx, KF_ERROR_LIMIT, "save_activations: pair %u too large", i);
            return KF_ERROR_LIMIT;
        }
        if (c->size % 16 != 0) {
            lanes = 1; /* vec4 copies only where every size allows them */
        }
    }
    kf_adapter_info info;
    uint32_t limit = 8;
    if (kf_context_adapter_info(ctx, &info) == KF_OK && info.max_storage_buffers_per_stage) {
        limit = info.max_storage_buffers_per_stage;
    }
    uint32_t per_dispatch = limit / 2 < KF_GROUP_MAX_SLOTS / 2 ? limit / 2 : KF_GROUP_MAX_SLOTS / 2;
    if (per_dispatch == 0) {
        return KF_ERROR_LIMIT;
    }
    uint32_t batches = (count + per_dispatch - 1) / per_dispatch;
    for (uint32_t b = 0; b < batches; b++) {
        uint32_t first = b * per_dispatch;
        uint32_t n = count - first < per_dispatch ? count - first : per_dispatch;
        uint64_t total = 0;
        kf_kernel *k = copy_kernel(pairs + first, n, lanes, &total);
        if (!k) {
            return KF_ERROR_OUT_OF_MEMORY;
        }
        for (uint32_t i = 0; i < n; i++) {
            bindings[2 * (first + i)] = pairs[first + i].src;
            bindings[2 * (first + i) + 1] = pairs[first + i].dst;
        }
        kf_kernel_launch launch = {.buffers = bindings + 2 * first, .buffer_count = 2 * n};
        uint64_t groups = (total + KF_SAVE_WORKGROUP - 1) / KF_SAVE_WORKGROUP;
        launch.groups[0] = (uint32_t)(groups ? groups : 1);
        launch.groups[1] = launch.groups[2] = 1;
        kf_status st = kf_kernel_dispatch(ctx, k, &launch, &out[b]);
        kf_kernel_destroy(k);
        if (st != KF_OK) {
            return st;
        }
    }
    if (dispatches) {
        *dispatches = batches;
    }
    return KF_OK;
}

kf_status kf_save_activations(kf_context *ctx, const kf_copy_pair *pairs, uint32_t count,
                              uint32_t *dispatches) {
    if (dispatches) {
        *dispatches = 0;
    }
    if (!ctx || (count && !pairs)) {
        kf__context_set_error(ctx, KF_ERROR_INVALID_ARGUMENT, "save_activations: pairs is NULL");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_dispatch *ds = calloc(count ? count : 1, sizeof *ds);
    kf_buffer **bindings = calloc(count ? 2u * count : 1, sizeof *bindings);
    if (!ds || !bindings) {
        free(ds);
        free(bindings);
        return KF_ERROR_OUT_OF_MEMORY;
    }
    uint32_t made = 0;
    kf_status st = kf_save_activations_record(ctx, pairs, count, bindings, ds, &made);
    if (st == KF_OK && made) {
        st = kf_context_run(ctx, ds, made);
    }
    if (st == KF_OK && dispatches) {
        *dispatches = made;
    }
    free(ds);
    free(bindings);
    return st;
}

/* ---- activation saves in plans ---- */

uint32_t kf__plan_save_capacity(const kf_plan *p) {
    uint32_t n = 0;
    for (uint32_t id = 0; p->saved && id < p->graph->node_count; id++) {
        n += p->saved[id] != NULL;
    }
    return n;
}

kf_status kf__plan_record_saves(kf_plan *p, kf_dispatch *out, uint32_t *count) {
    *count = 0;
    uint32_t n = kf__plan_save_capacity(p);
    free(p->save_bindings);
    p->save_bindings = NULL;
    if (!n) {
        return KF_OK;
    }
    kf_copy_pair *pairs = calloc(n, sizeof *pairs);
    p->save_bindings = calloc(2u * n, sizeof *p->save_bindings);
    if (!pairs || !p->save_bindings) {
        free(pairs);
        return KF_ERROR_OUT_OF_MEMORY;
    }
    uint32_t k = 0;
    for (uint32_t id = 0; id < p->graph->node_count; id++) {
        if (p->saved[id]) {
            pairs[k++] = (kf_copy_pair){p->buffers[id], p->saved[id], kf_buffer_size(p->saved[id])};
        }
    }
    kf_status st = kf_save_activations_record(p->ctx, pairs, n, p->save_bindings, out, count);
    free(pairs);
    return st;
}

void kf__plan_saves_destroy(kf_plan *p) {
    for (uint32_t id = 0; p->saved && id < p->graph->node_count; id++) {
        kf_buffer_destroy(p->saved[id]);
    }
    free(p->saved);
    free(p->save_bindings);
    p->saved = NULL;
    p->save_bindings = NULL;
}
