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
/* The bounds check's default work per dispatch (docs/runtime.md, "The bounds check"). */
#define KF__CHECK_BUDGET 20000ull

struct kf_buffer {
    kf_context *ctx;
    wg_buffer handle; /* NULL once the context was destroyed (kf_context_destroy releases it) */
    struct kf_buffer *prev_live, *next_live; /* the context's live buffers */
    uint64_t size;                           /* as asked */
    uint64_t alloc_size;                     /* size rounded up to 4 bytes, as WebGPU copies need */
    /* Holds by plans bound to it (kf__buffer_hold): kf_buffer_destroy then only marks it
     * destroyed, and the last kf__buffer_drop frees it. */
    uint32_t holds;
    bool destroyed;
    /* A view (kf_buffer_view): handle is NULL and the memory is view_of's (held), from
     * view_offset on. NULL for a buffer of its own. */
    struct kf_buffer *view_of;
    uint64_t view_offset;
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
    /* The check of its dispatches (the bounds check, set by the IR layer for the kernel this
     * WGSL was emitted from: kf__pipeline_attach_kernel); NULL: raw WGSL, not checked. */
    void *check;
    const struct kf__dispatch_check *check_ops;
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

/* A webgpu.h implementation: what differs between them, one row each (impl.c). */
typedef struct kf__wgpu_impl {
    const char *name;   /* "Dawn" */
    const char *marker; /* a symbol only this implementation exports */
    bool supported;     /* implemented and tested; others are refused when loaded */
    const char *why;    /* why it is not supported (what differs) */
    /* WGPUFeatureName values */
    uint32_t feature_timestamp_query, feature_shader_f16, feature_subgroups,
        feature_subgroup_matrix;
    size_t limits_size;         /* sizeof WGPULimits, whose layout is wg_limits */
    bool work_done_has_message; /* the queue's work-done callback has a message argument */
    bool timed_wait_any;        /* wgpuInstanceWaitAny takes a timeout */
    /* wgpuDeviceCreateComputePipelineAsync with wg_create_compute_pipeline_callback_info's
     * layout (measured); false: pipelines are created one after another */
    bool async_pipelines;
    /* extension structs (0: none): Dawn's toggles, its fake out-of-memory test hook, and its
     * cache interface (load/store callbacks: the persistent pipeline cache, disk_cache.c) */
    uint32_t stype_toggles, stype_fake_buffer_oom, stype_cache_device;
} kf__wgpu_impl;

/* The implementation of an opened library (NULL: none kfuse knows). */
const kf__wgpu_impl *kf__wgpu_impl_identify(bool (*has_symbol)(void *library, const char *name),
                                            void *library);
/* The names of the supported implementations, ", "-separated. */
void kf__wgpu_impl_supported(char *out, size_t size);

/* What kf__wgpu_load found. */
typedef struct kf__wgpu_loaded {
    kf__wgpu_api api;
    void *library; /* dlopen handle */
    const kf__wgpu_impl *impl;
    char path[512]; /* resolved */
    char why[128];  /* which step of the search order found it */
} kf__wgpu_loaded;

/* What the bounds check of a context's dispatches did (kf__context_bounds_check_stats). */
typedef struct kf__bounds_check_stats {
    uint64_t dispatches;       /* checked with the interpreter */
    uint64_t repeats;          /* data-independent launches checked before, not run again */
    uint64_t unchecked;        /* raw WGSL (kf_pipeline_get) or mutants: nothing to interpret */
    uint64_t sampled;          /* of `dispatches`, those with some workgroups left out */
    uint64_t workgroups;       /* of the checked dispatches */
    uint64_t workgroups_run;   /* of them, interpreted */
    uint64_t data_dispatches;  /* of `dispatches`, those read back first (indices from data) */
    uint64_t guards_fired;     /* accesses out of bounds where the emitted guard clamps/skips */
    uint64_t violations;       /* failed checks */
    double seconds;            /* CPU time spent checking (read back + interpreter) */
    char last[KF__ERROR_SIZE]; /* the latest failure's message */
} kf__bounds_check_stats;

struct kf_context {
    kf__wgpu_api api;
    void *library; /* dlopen handle */
    char library_path[512];
    const kf__wgpu_impl *impl; /* the loaded implementation's row (impl.c) */
    bool unchecked;          /* Dawn's robustness pass is off (kf_context_desc.unchecked_access) */
    bool vendor_masked;      /* the vendor-mask layer is on (NVIDIA, for shader-f16) */
    uint32_t true_vendor_id; /* the vendor before the mask */

    wg_instance instance;
    wg_adapter adapter;
    wg_device device;
    wg_queue queue;
    wg_limits limits; /* the device's, as granted */
    kf_adapter_info info;

    kf__pipeline_cache pipelines;
    /* kf__pipeline_get_many: 0 as $KF_PIPELINE_ASYNC says (on unless "0" or "off"), 1 async
     * where the implementation has it, -1 one after another (kf__context_set_pipeline_async) */
    int pipeline_async;
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
    /* Objects that outlive kf_context_destroy (docs/runtime.md, "Lifetimes"): destroying the
     * context releases every WebGPU object at once, and the kf_context itself stays as a shell
     * while objects that hold it (`holders`) live, so their calls fail with
     * KF_ERROR_DEVICE_LOST and their destroy calls are safe; the last one frees it. */
    bool released;
    uint32_t holders;
    struct kf_buffer *live_buffers;
    /* State layers above the runtime keep per context (extension.c). */
    struct kf__context_extension *extensions;
    uint32_t extension_count;
    /* Mutation testing (kf__context_set_kernel_transform): consulted for every kernel before its
     * WGSL is emitted for a pipeline of this context; NULL: kernels run as built. */
    kf_kernel *(*kernel_transform)(void *user, const kf_kernel *k);
    void *kernel_transform_user;
    /* The bounds check of every dispatch (kf_context_desc.check_bounds, $KF_CHECK_BOUNDS):
     * on, the work budget per dispatch (0: no limit), and what it did so far. */
    bool check_bounds;
    uint64_t check_budget;
    kf__bounds_check_stats check;
};

/* extension.c: per-context state that a layer above the runtime keeps (the matmul tuner's table),
 * without the runtime knowing what it is. Each slot is found by its key, the address of an object
 * the owner defines; data is freed with free_data when the context is destroyed. */
void *kf__context_extension(const kf_context *ctx, const void *key); /* NULL: none yet */
/* Sets the key's slot (KF_ERROR_OUT_OF_MEMORY leaves it unset; data is not freed then). */
kf_status kf__context_extension_set(kf_context *ctx, const void *key, void *data,
                                    void (*free_data)(void *data));
/* Frees every slot's data (kf_context_destroy). */
void kf__context_extensions_release(kf_context *ctx);

/* loader.c: finds and opens a webgpu.h library, identifies its implementation and resolves
 * the entry points kfuse calls. path: an explicit library (desc->library_path), or NULL for the
 * search order of loader.c. On failure returns KF_ERROR_NO_LIBRARY with what was tried, or why
 * the library was refused, in err. */
kf_status kf__wgpu_load(const char *path, kf__wgpu_loaded *out, char *err, size_t err_size);

/* The folder of the vendor-mask Vulkan layer (tools/vkmask: its manifest and library): beside
 * libkfuse as installed (<libdir>/kfuse/vkmask), else the build tree's; false when neither. */
bool kf__vkmask_dir(char *out, size_t size);

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
/* An object that keeps ctx as a pointer (a buffer, a plan, ...) holds it from creation to its
 * destroy call: the kf_context stays allocated (as a released shell, see struct kf_context)
 * until every holder let go, so the holder's calls after kf_context_destroy see
 * KF_ERROR_DEVICE_LOST through kf__context_check instead of freed memory. Release last, after
 * the holder's own clean-up. NULL is a no-op for both. */
void kf__context_hold(kf_context *ctx);
void kf__context_let_go(kf_context *ctx);
/* Whether kf_context_destroy was called: every WebGPU handle of the context is gone then, and
 * a holder's clean-up must not call WebGPU (its handles were released with the device). */
bool kf__context_released(const kf_context *ctx);
/* Submits the commands (checking them for errors) without waiting for the GPU. */
kf_status kf__context_submit(kf_context *ctx, wg_command_buffer commands, const char *what);
/* Submits the commands and waits until the GPU has finished them. */
kf_status kf__context_submit_wait(kf_context *ctx, wg_command_buffer commands, const char *what);
/* Copies a string view into a NUL-terminated buffer. */
void kf__wg_string_copy(char *dst, size_t dst_size, wg_string src);

/* pipeline.c */
/* Gets count pipelines as kf_pipeline_get does, but creates the ones not cached all at once:
 * each is requested with CreateComputePipelineAsync where the implementation has it (and
 * pipeline_async allows), then all are waited for together; otherwise they are created one
 * after another. Identical descriptors get one pipeline. labels[i] names descs[i] in messages
 * (a kernel's name). On failure, returns the first failure's status, with the context's last
 * error listing every pipeline that failed by its label, and out[i] NULL for those (the others
 * are cached and set). */
kf_status kf__pipeline_get_many(kf_context *ctx, const kf_pipeline_desc *descs,
                                const char *const *labels, uint32_t count, kf_pipeline **out);
/* For tests and measurements: 1 async where the implementation allows, -1 one after another,
 * 0 as $KF_PIPELINE_ASYNC says. Whether pipelines will be created in parallel is returned. */
bool kf__context_set_pipeline_async(kf_context *ctx, int mode);
/* Releases every cached pipeline's WebGPU objects (kf_context_destroy), keeping the structs. */
void kf__pipeline_cache_release(kf_context *ctx);
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
/* The WebGPU buffer holding buf's bytes and where they start in it (a view's is its buffer's). */
wg_buffer kf__buffer_handle(const kf_buffer *buf, uint64_t *offset);
/* Whether a and b share a byte of device memory (views of one buffer that overlap, or one
 * buffer); *same: they are exactly the same bytes. */
bool kf__buffer_overlap(const kf_buffer *a, const kf_buffer *b, bool *same);
/* The buffer whose memory buf is (itself, or the buffer it is a view of). */
const kf_buffer *kf__buffer_base(const kf_buffer *buf);
/* Releases the WebGPU buffer of every live kf_buffer (kf_context_destroy). */
void kf__context_buffers_release(kf_context *ctx);

/* The per-context hook (context.c), for mutation testing (src/ir/mutate.h): fn(user, k) returns a
 * kernel to run instead of k (the caller destroys it) or NULL to run k as built. NULL fn: none. */
typedef kf_kernel *(*kf__kernel_transform_fn)(void *user, const kf_kernel *k);
void kf__context_set_kernel_transform(kf_context *ctx, kf__kernel_transform_fn fn, void *user);
/* What the context's transform makes of k: NULL when it has none or it leaves k as built. */
kf_kernel *kf__context_transform_kernel(kf_context *ctx, const kf_kernel *k);
/* Drops the context's cached pipelines (mutants' are used once); no plan may be alive. */
void kf__context_forget_pipelines(kf_context *ctx);

/* A check run on each dispatch of a pipeline before the GPU runs it, when its context checks
 * bounds; the layer above provides it (src/ir/check.c: the runtime knows no kernels).
 * `with_data`: the dispatches before it have run, so its buffers hold what it will read. A
 * failure is the context's error and stops the run. */
typedef struct kf__dispatch_check {
    bool (*needs_data)(const void *check); /* else: checked on zeros, before anything runs */
    kf_status (*run)(void *check, kf_context *ctx, const kf_dispatch *d, const uint32_t groups[3],
                     uint32_t index, bool with_data);
    void (*free)(void *check);
} kf__dispatch_check;
/* Gives p its check (owned by p from then on; freed at once when p already has one). */
void kf__pipeline_set_check(kf_pipeline *p, void *check, const kf__dispatch_check *ops);
/* What the check did on ctx so far; NULL when ctx is NULL. */
const kf__bounds_check_stats *kf__context_bounds_check_stats(const kf_context *ctx);

/* For tests: the next kf_buffer_create fails the way an exhausted device fails (Dawn only). */
kf_status kf__context_fake_oom(kf_context *ctx);
/* For tests: makes the device lost as a driver reset would (Dawn only). */
kf_status kf__context_force_loss(kf_context *ctx);

#endif
