/* Internals of the runtime (src/runtime): the objects behind kf_context, kf_buffer and
 * kf_pipeline, and the helpers the runtime's files share. Not part of the public API. */
#ifndef KF_RUNTIME_RUNTIME_H
#define KF_RUNTIME_RUNTIME_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kfuse.h"
#include "runtime/wgpu_abi.h"

#define KF__ERROR_SIZE 4096

struct kf_buffer {
    kf_context *ctx;
    wg_buffer handle;
    uint64_t size;       /* as asked */
    uint64_t alloc_size; /* size rounded up to 4 bytes, as WebGPU copies need */
    /* Holds by plans bound to it (kf__buffer_hold): kf_buffer_destroy then only marks it
     * destroyed, and the last kf__buffer_drop frees it. */
    uint32_t holds;
    bool destroyed;
};

struct kf_pipeline {
    kf_context *ctx;
    uint64_t hash;
    /* The key, kept whole so a hash collision can never return the wrong pipeline. */
    char *wgsl;
    char *entry_point;
    kf_constant *constants; /* names owned (allocated with the array) */
    uint32_t constant_count;
    kf_binding_kind *bindings;
    uint32_t binding_count;
    wg_shader_module module;
    wg_bind_group_layout bind_group_layout;
    wg_pipeline_layout layout;
    wg_compute_pipeline handle;
};

/* Open addressing, keyed by the pipeline hash; slots hold pipelines the context owns. */
typedef struct kf__pipeline_cache {
    kf_pipeline **slots;
    size_t capacity; /* a power of two, or 0 */
    size_t count;
} kf__pipeline_cache;

struct kf_context {
    kf__wgpu_api api;
    void *library; /* dlopen handle */
    char library_path[512];
    bool is_dawn;
    bool unchecked; /* Dawn's robustness pass is off (kf_context_desc.unchecked_access) */

    wg_instance instance;
    wg_adapter adapter;
    wg_device device;
    wg_queue queue;
    wg_limits limits; /* the device's, as granted */
    kf_adapter_info info;

    kf__pipeline_cache pipelines;
    kf_context_stats stats;

    /* A MapRead buffer reused by downloads, grown on demand. */
    wg_buffer staging;
    uint64_t staging_size;

    /* Timestamp queries: a set of 2, the buffer they resolve into, and a MapRead copy. */
    wg_query_set timestamps;
    wg_buffer timestamp_resolve;
    wg_buffer timestamp_readback;

    /* Set from WebGPU callbacks, which may run on another thread. */
    atomic_bool lost;
    atomic_bool destroying;
    char lost_message[KF__ERROR_SIZE];
    atomic_bool uncaptured;
    char uncaptured_message[KF__ERROR_SIZE];

    char error[KF__ERROR_SIZE]; /* kf_context_last_error */
    bool fake_oom; /* tests: the next buffer creation fails as out of memory (Dawn only) */
    /* Callback memory whose wait was abandoned (see kf__callback_release). */
    struct kf__callback_block *orphans;
    /* The persistent pipeline cache (disk_cache.c), NULL when off. */
    struct kf__disk_cache *disk_cache;
    /* Tuned matmul tiles (src/ops/matmul_tune.c), loaded from the cache file on first use. */
    struct kf__matmul_tuning *matmul_tuning;
};

/* Frees the matmul tuning table (src/ops/matmul_tune.c); NULL is a no-op. */
void kf__matmul_tuning_free(struct kf__matmul_tuning *t);

/* loader.c: finds and opens a webgpu.h library and resolves the entry points kfuse calls.
 * path: an explicit library (desc->library_path), or NULL for the search order documented at
 * kf_context_desc. On failure returns KF_ERROR_NO_LIBRARY with what was tried in err. */
kf_status kf__wgpu_load(const char *path, kf__wgpu_api *api, void **library, char *opened,
                        size_t opened_size, char *err, size_t err_size);

/* context.c */
/* Records a formatted message as the context's last error and returns status. */
kf_status kf__context_fail(kf_context *ctx, kf_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same for callers that keep their own status (the fusion layer; see plan_internal.h). */
void kf__context_set_error(kf_context *ctx, kf_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* KF_ERROR_DEVICE_LOST (with the message set) once the device is gone; KF_OK otherwise. */
kf_status kf__context_check(kf_context *ctx);
/* Waits for one future. what names the operation for the timeout message. */
kf_status kf__context_wait(kf_context *ctx, wg_future future, const char *what);
/* Error scopes around a group of WebGPU calls: push before, pop after. kf__context_scope_pop
 * returns KF_OK, or the first error as status (validation -> `validation_status`, out of memory ->
 * KF_ERROR_OUT_OF_MEMORY, internal -> KF_ERROR_INTERNAL) with the message prefixed by what. */
void kf__context_scope_push(kf_context *ctx);
kf_status kf__context_scope_pop(kf_context *ctx, kf_status validation_status, const char *what);
/* Memory for a WebGPU callback to write its result into (zeroed; NULL when out of memory). */
void *kf__callback_alloc(size_t size);
/* Frees it once its wait completed. A wait that did not complete (timeout, lost device) leaves
 * WebGPU owing the callback a call, at the latest when the instance is released: the context
 * then keeps the memory until after that. */
void kf__callback_release(kf_context *ctx, void *data, bool completed);
/* Submits the commands (checking them for errors) without waiting for the GPU. */
kf_status kf__context_submit(kf_context *ctx, wg_command_buffer commands, const char *what);
/* Submits the commands and waits until the GPU has finished them. */
kf_status kf__context_submit_wait(kf_context *ctx, wg_command_buffer commands, const char *what);
/* Copies a string view into a NUL-terminated buffer. */
void kf__wg_string_copy(char *dst, size_t dst_size, wg_string src);

/* pipeline.c */
void kf__pipeline_cache_destroy(kf_context *ctx);

/* disk_cache.c: Dawn's cache interface over a folder (see there). Returns the chain to put on
 * the device descriptor: next, preceded by the cache's descriptor where the cache is on. */
wg_chain *kf__disk_cache_chain(kf_context *ctx, const kf_context_desc *desc, wg_chain *next);
void kf__disk_cache_destroy(kf_context *ctx); /* after the device is released */
void kf__disk_cache_stats(const kf_context *ctx, kf_context_stats *out);
const char *kf__disk_cache_dir(const kf_context *ctx); /* "" when off */

/* dispatch.c */
void kf__context_timing_destroy(kf_context *ctx);

/* buffer.c */
void kf__context_staging_destroy(kf_context *ctx);
/* A plan bound to buf keeps it alive: the owner's kf_buffer_destroy (kf_gpu_tensor_destroy)
 * frees it only once every hold is dropped. NULL is a no-op. */
void kf__buffer_hold(kf_buffer *buf);
void kf__buffer_drop(kf_buffer *buf);

/* For tests: the next kf_buffer_create fails the way an exhausted device fails (Dawn only). */
kf_status kf__context_fake_oom(kf_context *ctx);
/* For tests: makes the device lost as a driver reset would (Dawn only). */
kf_status kf__context_force_loss(kf_context *ctx);

#endif
