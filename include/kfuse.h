/* kfuse: composable, fused and verified GPU compute kernels on WebGPU.
 *
 * A short tour: a fused matmul + bias + GELU built, run and verified (it compiles and runs as
 * tests/unit/test_header_tour.c; docs/builder.md and docs/graph-language.md go further):
 *
 * static kf_val relu(kf_kernel *k, kf_val x, void *user) { // the body of an element-wise stage
 *     (void)user;
 *     return kf_call2(k, KF_FN_MAX, x, kf_lit_f32(k, 0.0f));
 * }
 *
 * static int tour(void) {
 *     kf_context *ctx;
 *     kf_context_desc desc = {0}; // zero means default everywhere
 *     if (kf_context_create(&desc, &ctx) != KF_OK) {
 *         return 1; // desc.error_out, when given, says what to install
 *     }
 *     // Kernels are values: an operator's kernel composed with a stage is one kernel.
 *     kf_shape mm_shapes[2] = {kf_shape_2d(64, 128), kf_shape_2d(128, 256)};
 *     kf_kernel *mm = kf_op_kernel_forward(kf_op_find("matmul"), mm_shapes, NULL, KF_DTYPE_F32);
 *     uint32_t wg[3];
 *     kf_kernel_workgroup_size(mm, wg);
 *     kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
 *     kf_kernel *act = kf_kernel_map("relu", f32, f32, wg, relu, NULL);
 *     kf_kernel *fused = kf_kernel_then(mm, act); // matmul |> relu, one kernel
 *     char *wgsl = kf_kernel_emit_wgsl(fused);    // or kf_kernel_run(ctx, fused, &launch)
 *
 *     // Or let the planner fuse a lazy graph, run it, and prove it against the CPU specs.
 *     kf_graph *g = kf_graph_create();
 *     kf_shape xs = kf_shape_2d(64, 128), ws = kf_shape_2d(128, 256), bs = kf_shape_1d(256);
 *     kf_node x = kf_graph_input(g, "x", &xs, KF_DTYPE_F32);
 *     kf_node w = kf_graph_input(g, "w", &ws, KF_DTYPE_F32);
 *     kf_node b = kf_graph_input(g, "b", &bs, KF_DTYPE_F32);
 *     kf_node h = kf_graph_add(g, kf_graph_matmul(g, x, w), b);
 *     kf_graph_output(g, "y", kf_graph_unary(g, "gelu", h));
 *     kf_plan *plan = NULL;
 *     kf_status st = kf_graph_compile(ctx, g, NULL, &plan); // gelu runs in the store phase
 *     kf_plan_report report;
 *     if (st == KF_OK) {
 *         st = kf_plan_verify(plan, 42, &report); // fresh inputs, outputs poisoned, all compared
 *     }
 *     // Then run it on your data as often as you like.
 *     kf_tensor *xt = NULL, *y = NULL;
 *     kf_shape ys = kf_shape_2d(64, 256);
 *     if (st == KF_OK) {
 *         st = kf_plan_random_input(plan, "x", 1, &xt); // stands for your tensor
 *     }
 *     if (st == KF_OK) {
 *         st = kf_plan_set_input(plan, "x", xt); // w and b keep the values verify drew
 *     }
 *     if (st == KF_OK) {
 *         st = kf_plan_run(plan);
 *     }
 *     if (st == KF_OK && (st = kf_tensor_create(&ys, &y)) == KF_OK) {
 *         st = kf_plan_get_output(plan, "y", y);
 *     }
 *     if (st != KF_OK) {
 *         fprintf(stderr, "%s: %s\n", kf_status_str(st), kf_context_last_error(ctx));
 *     }
 *     kf_tensor_destroy(xt);
 *     kf_tensor_destroy(y);
 *     kf_plan_destroy(plan);
 *     kf_graph_destroy(g);
 *     kf_free(wgsl);
 *     kf_kernel_destroy(fused);
 *     kf_kernel_destroy(act);
 *     kf_kernel_destroy(mm);
 *     kf_context_destroy(ctx);
 *     return st == KF_OK && wgsl ? 0 : 1;
 * }
 *
 * Threading: contexts are independent of each other; one context, and every object made from it,
 * is used by one thread at a time. Kernels (kf_kernel) need no context and follow the same rule.
 *
 * Ownership: every _create has a _destroy; destroying NULL is a no-op. Strings the library
 * returns as `char *` are the caller's, freed with kf_free().
 *
 * Errors: fallible calls return kf_status; kf_status_str() names it and the message on the
 * object you hold (kf_context_last_error for a context and everything made from one,
 * kf_kernel_error, kf_graph_error; docs/errors.md) names the culprit and what to do. The library
 * never aborts or exits on user input.
 */
#ifndef KFUSE_H
#define KFUSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header; kf_version() says which library is loaded (libuv's scheme). */
#define KF_VERSION_MAJOR 0
#define KF_VERSION_MINOR 1
#define KF_VERSION_PATCH 0
#define KF_VERSION_HEX ((KF_VERSION_MAJOR << 16) | (KF_VERSION_MINOR << 8) | KF_VERSION_PATCH)

/* Marks the public API: libkfuse.so is built with hidden visibility and exports only these. */
#if defined(_WIN32) && defined(KF_BUILDING_SHARED)
#define KF_API __declspec(dllexport)
#elif defined(_WIN32) && defined(KF_USING_SHARED)
#define KF_API __declspec(dllimport)
#elif defined(__GNUC__)
#define KF_API __attribute__((visibility("default")))
#else
#define KF_API
#endif

/* ======================================================================================== */
/* Status                                                                                    */
/* ======================================================================================== */

typedef enum kf_status {
    KF_OK = 0,
    KF_ERROR_INVALID_ARGUMENT, /* NULL where a value is needed, out-of-range parameter */
    KF_ERROR_NO_LIBRARY,       /* no WebGPU implementation could be loaded */
    KF_ERROR_NO_ADAPTER,       /* the implementation found no adapter (GPU or CPU driver) */
    KF_ERROR_NO_DEVICE,        /* the adapter refused to create a device */
    KF_ERROR_LIMIT,            /* a size or count above the device's limits */
    KF_ERROR_OUT_OF_MEMORY,    /* host or device allocation failed */
    KF_ERROR_COMPILE,          /* WGSL failed to compile; the message has lines and text */
    KF_ERROR_VALIDATION,       /* WebGPU validation error */
    KF_ERROR_DEVICE_LOST,      /* the device was lost (or its context destroyed): recreate it */
    KF_ERROR_TYPE,             /* a kernel-builder type error */
    KF_ERROR_SHAPE,            /* tensor shapes do not fit the operation */
    KF_ERROR_PARSE,            /* the graph language could not be parsed */
    KF_ERROR_IO,               /* a file could not be read or written */
    KF_ERROR_UNSUPPORTED,      /* the device lacks a feature the request needs */
    KF_ERROR_MISMATCH,         /* verification found results outside tolerance */
    KF_ERROR_INTERNAL          /* a bug in kfuse: please report it with the message */
} kf_status;

/* The status's name in words ("compile error"). Never NULL. */
KF_API const char *kf_status_str(kf_status status);

/* The library's version, KF_VERSION_HEX as it was built ((major << 16) | (minor << 8) | patch),
 * and as text ("0.1.0"). A program may compare it with the header's KF_VERSION_HEX. */
KF_API uint32_t kf_version(void);
KF_API const char *kf_version_string(void);

/* Frees a string or array the library returned to the caller. NULL is a no-op. */
KF_API void kf_free(void *ptr);

/* ======================================================================================== */
/* Runtime: context, buffers, pipelines, dispatch, timing (src/runtime)                      */
/* ======================================================================================== */

typedef struct kf_context kf_context;
typedef struct kf_buffer kf_buffer;
typedef struct kf_pipeline kf_pipeline;

typedef enum kf_backend {
    KF_BACKEND_DEFAULT = 0, /* KF_BACKEND from the environment, else the best adapter */
    KF_BACKEND_VULKAN,
    KF_BACKEND_GLES, /* Dawn's OpenGL ES backend (compatibility mode) */
    KF_BACKEND_OPENGL,
    KF_BACKEND_METAL,
    KF_BACKEND_D3D12,
    KF_BACKEND_NULL
} kf_backend;

typedef struct kf_context_desc {
    /* Path of a webgpu.h implementation. NULL: the Dawn installed beside libkfuse
     * (lib/kfuse/), then $KF_WEBGPU_LIB, then the build tree's deps/dawn, then the system's
     * libwebgpu_dawn.so. Only Dawn is supported: another implementation (wgpu-native, ...) is
     * refused with KF_ERROR_NO_LIBRARY saying so (docs/runtime.md has what differs). */
    const char *library_path;
    kf_backend backend;
    bool disable_f16;        /* do not request shader-f16 even where present */
    bool disable_subgroups;  /* do not request subgroups even where present */
    bool disable_timestamps; /* time with the wall clock even where timestamps exist */
    /* Dawn's robustness pass (which clamps every storage and workgroup index into bounds) is off
     * by default now; this (and $KF_UNCHECKED=1) asks for that default explicitly and is kept
     * for the programs that set it. */
    bool unchecked_access;
    /* Turns Dawn's robustness pass back on (also $KF_CHECKED=1): every storage and workgroup
     * index is clamped into bounds at run time. Off by default, since every kernel built with
     * kfuse's IR is proved in bounds or guarded where it is not (docs/runtime.md); raw WGSL given
     * to kf_pipeline_get is the caller's to keep in bounds, or needs this. Wins over
     * unchecked_access and $KF_UNCHECKED. */
    bool checked_access;
    /* The persistent pipeline cache (Dawn's compiled shaders and pipeline caches, kept across
     * processes): its folder; NULL: $KF_PIPELINE_CACHE, else $XDG_CACHE_HOME/kfuse/pipelines,
     * else ~/.cache/kfuse/pipelines. "off" (here or in the variable) or disable_pipeline_cache
     * turns it off. Entries are partitioned by implementation, adapter and driver; a damaged or
     * truncated entry is a miss and is removed (docs/runtime.md). */
    const char *pipeline_cache_dir;
    bool disable_pipeline_cache;
    /* On NVIDIA's Vulkan driver this Dawn offers no shader-f16; where f16 is wanted
     * (disable_f16 false), kfuse then enables its vendor-mask Vulkan layer (tools/vkmask,
     * installed in lib/kfuse/vkmask) for the context's instance, so Dawn offers f16 and the f16
     * tensor-core matmul. true (or $KF_NO_VKMASK=1) leaves the layer off (docs/runtime.md). */
    bool disable_vendor_mask;
    /* Interprets every dispatch of a kernel built with kfuse's IR on the CPU (kf_kernel_interpret's
     * checks, on the dispatch's own buffers, grid and constants) before the GPU runs it; also
     * $KF_CHECK_BOUNDS=1, which the test runner sets. An out-of-bounds load or store fails
     * kf_context_run / kf_context_time with KF_ERROR_INVALID_ARGUMENT naming the kernel, the
     * binding, the index and the length, and nothing of that call runs. Slow (large dispatches
     * are sampled): for tests and debugging. Raw WGSL (kf_pipeline_get) is not checked
     * (docs/runtime.md, "The bounds check"). */
    bool check_bounds;
    /* Optional: receives the message when kf_context_create fails (there is no context then). */
    char *error_out;
    size_t error_out_size;
} kf_context_desc;

/* Loads the WebGPU library, picks an adapter (desc->backend, else $KF_BACKEND=vulkan|gles|opengl|
 * metal|d3d12|null, else the best one), creates a device with the adapter's full limits and the
 * optional features it has (shader-f16, subgroups, timestamp-query, subgroup matrices), and its
 * queue. desc NULL means all defaults. On failure *out is NULL and desc->error_out (if given)
 * says what to install or set: KF_ERROR_NO_LIBRARY, KF_ERROR_NO_ADAPTER, KF_ERROR_NO_DEVICE, or
 * KF_ERROR_INVALID_ARGUMENT for an unknown KF_BACKEND. docs/runtime.md has the details. */
KF_API kf_status kf_context_create(const kf_context_desc *desc, kf_context **out);
/* Destroys the context, its device and every WebGPU object made from it, in any order with its
 * objects (as a WebGPU device's destroy does): buffers, GPU tensors and plans still alive keep
 * their handles, every later call on them fails with KF_ERROR_DEVICE_LOST ("the context of this
 * object was destroyed"), and their destroy calls stay safe (the last one frees what is left of
 * the context). Pipelines die with the context. NULL is a no-op (docs/runtime.md, "Lifetimes"). */
KF_API void kf_context_destroy(kf_context *ctx);
/* The message of the most recent failed call on this context ("" before any failure). Valid
 * until the next call on ctx. Once the device is lost, every call fails with
 * KF_ERROR_DEVICE_LOST and this says why (docs/errors.md). */
KF_API const char *kf_context_last_error(const kf_context *ctx);

typedef struct kf_adapter_info {
    char vendor[128];
    char architecture[128];
    char device[256];
    char description[256];
    char backend[32];      /* "vulkan", "opengles", ... */
    char library[512];     /* path of the webgpu.h library in use */
    char adapter_type[32]; /* "discrete GPU", "integrated GPU", "CPU", "unknown" */
    uint32_t vendor_id;
    uint32_t device_id;
    bool has_f16;             /* shader-f16 requested and enabled */
    bool has_subgroups;       /* subgroups requested and enabled */
    bool has_timestamps;      /* timestamp queries requested and enabled */
    bool has_subgroup_matrix; /* chromium_experimental_subgroup_matrix enabled */
    bool unchecked_access;    /* Dawn's robustness (bounds clamping) is off: the default; on with
                               * kf_context_desc.checked_access or $KF_CHECKED=1 */
    /* kfuse's vendor-mask layer is on (an NVIDIA Vulkan adapter, for f16): Dawn saw vendor
     * 0xffff; vendor_id is still the true one. */
    bool vendor_masked;
    uint32_t subgroup_min_size;
    uint32_t subgroup_max_size;
    uint64_t max_buffer_size;
    uint64_t max_storage_buffer_binding_size;
    /* A buffer view (kf_buffer_view, kf_plan_bind_input_at) starts at a multiple of this. */
    uint32_t min_storage_buffer_offset_alignment;
    uint32_t max_storage_buffers_per_stage;
    uint32_t max_compute_workgroup_storage_size;
    uint32_t max_compute_invocations_per_workgroup;
    uint32_t max_compute_workgroup_size[3];
    uint32_t max_compute_workgroups_per_dimension;
    char pipeline_cache[1024]; /* the pipeline cache's folder for this adapter, "" when off */
    /* Why that library (the search order, docs/runtime.md): "installed beside libkfuse",
     * "KF_WEBGPU_LIB", "kf_context_desc.library_path", "the build tree's deps/dawn", ... */
    char library_source[128];
} kf_adapter_info;

KF_API kf_status kf_context_adapter_info(const kf_context *ctx, kf_adapter_info *out);

/* What the device does with subnormal (denormal) numbers, which WGSL lets it flush to zero:
 * measured by running a one-invocation kernel (a subnormal times 1; the smallest normal times
 * 0.5), not assumed. Lavapipe keeps f32 subnormals; the H200 flushes them, so there 1 / 1e-40 is
 * inf and a subnormal input counts as 0 (kfuse's log is exact on subnormals either way). */
typedef struct kf_float_behaviour {
    bool f32_subnormal_inputs_kept;  /* false: a subnormal operand is read as 0 */
    bool f32_subnormal_results_kept; /* false: a result below 2^-126 is rounded to 0 */
    bool f16_measured;              /* the device has shader-f16, so the two below mean something */
    bool f16_subnormal_inputs_kept; /* the same for f16 (below 2^-14) */
    bool f16_subnormal_results_kept;
} kf_float_behaviour;

/* Measures kf_float_behaviour on ctx's device (a few milliseconds: a pipeline and a dispatch).
 * *out is zeroed on failure, whose message is on the context. */
KF_API kf_status kf_context_float_behaviour(kf_context *ctx, kf_float_behaviour *out);

typedef struct kf_context_stats {
    uint64_t pipelines_compiled; /* shader modules + pipelines actually created */
    uint64_t pipeline_cache_hits;
    /* Of pipelines_compiled, those created in parallel on the implementation's threads
     * (CreateComputePipelineAsync: kf_graph_compile requests a plan's pipelines together). */
    uint64_t pipelines_async;
    uint64_t dispatches;  /* compute dispatches recorded */
    uint64_t submissions; /* queue submissions */
    /* Bytes moved between host and device by kf_buffer_upload / kf_buffer_fill_u32 (and
     * everything built on them: kf_plan_set_input, kf_gpu_tensor_from) and by
     * kf_buffer_download (kf_plan_get_output, kf_gpu_tensor_to): the sizes asked for. Plans
     * move nothing on their own: a run of a plan whose inputs are already on the device adds 0. */
    uint64_t upload_bytes;
    uint64_t download_bytes;
    /* The persistent pipeline cache: entries Dawn found on disk, entries written, and damaged
     * entries ignored and removed. */
    uint64_t disk_cache_loads;
    uint64_t disk_cache_stores;
    uint64_t disk_cache_rejected;
} kf_context_stats;

KF_API kf_status kf_context_stats_get(const kf_context *ctx, kf_context_stats *out);

/* A device buffer usable as storage, uniform, copy source and destination. Any byte size >= 1
 * (rounded up to 4 internally); above the device limit -> KF_ERROR_LIMIT with the limit named.
 * Its contents start as zeros. Destroying NULL is a no-op; after kf_context_destroy, calls on the
 * buffer fail with KF_ERROR_DEVICE_LOST and kf_buffer_destroy is still needed (and safe). */
KF_API kf_status kf_buffer_create(kf_context *ctx, uint64_t size, kf_buffer **out);
KF_API void kf_buffer_destroy(kf_buffer *buf);
KF_API uint64_t kf_buffer_size(const kf_buffer *buf); /* the size asked for */
/* A view: bytes [offset, offset + size) of buf as a buffer of their own, for a dispatch's binding
 * (or a plan's input or output, see kf_plan_bind_input_at) and for transfers, whose offsets are
 * then the view's. offset must be a multiple of the device's minStorageBufferOffsetAlignment
 * (kf_adapter_info.min_storage_buffer_offset_alignment; KF_ERROR_INVALID_ARGUMENT naming it
 * otherwise) and the range must lie inside buf. The view keeps buf's memory alive (buf may be
 * destroyed first); destroy it with kf_buffer_destroy. A view of a view is a view of its
 * buffer. */
KF_API kf_status kf_buffer_view(kf_buffer *buf, uint64_t offset, uint64_t size, kf_buffer **out);
/* Copies bytes host -> device. Any offset and size inside the buffer (no alignment needed). */
KF_API kf_status kf_buffer_upload(kf_buffer *buf, uint64_t offset, const void *data, uint64_t size);
/* Copies bytes device -> host and waits for them. */
KF_API kf_status kf_buffer_download(kf_buffer *buf, uint64_t offset, void *data, uint64_t size);
/* Fills the whole buffer with a repeated 32-bit pattern (0x7fc00000 poisons f32 with NaN). */
KF_API kf_status kf_buffer_fill_u32(kf_buffer *buf, uint32_t pattern);

typedef enum kf_binding_kind {
    KF_BINDING_STORAGE_READ = 0, /* var<storage, read> */
    KF_BINDING_STORAGE_READ_WRITE,
    KF_BINDING_UNIFORM
} kf_binding_kind;

typedef struct kf_constant {
    const char *name; /* an `override` declared in the WGSL */
    double value;
} kf_constant;

typedef struct kf_pipeline_desc {
    const char *wgsl;
    const char *entry_point; /* NULL: "main" */
    const kf_constant *constants;
    uint32_t constant_count;
    /* Binding i of group 0 has kind bindings[i]. */
    const kf_binding_kind *bindings;
    uint32_t binding_count;
} kf_pipeline_desc;

/* Compiles (or finds in the context's cache, keyed by a hash of WGSL, entry, constants and
 * bindings) a compute pipeline. The pipeline belongs to the context. A compile error is
 * KF_ERROR_COMPILE with the compiler's message, line and column, on the context; so is WGSL that
 * compiles but makes no pipeline (no such entry point, bindings unlike `bindings`). The WGSL's
 * accesses are the caller's to keep in bounds: the device runs without Dawn's robustness pass
 * unless the context was created with checked_access (or $KF_CHECKED=1). */
KF_API kf_status kf_pipeline_get(kf_context *ctx, const kf_pipeline_desc *desc, kf_pipeline **out);

typedef struct kf_dispatch {
    kf_pipeline *pipeline;
    kf_buffer *const *buffers; /* binding i = buffers[i] */
    uint32_t buffer_count;
    /* Workgroups per dimension (0 means 1). groups[0] may exceed the per-dimension limit when
     * groups[1] == groups[2] == 1: the runtime folds it into y, and kernels derive their linear
     * workgroup index as workgroup_id.x + workgroup_id.y * num_workgroups.x (and check bounds). */
    uint32_t groups[3];
} kf_dispatch;

/* Records the dispatches in order into one compute pass and one submission and waits for it to
 * finish (each dispatch sees the writes of those before it). Every dispatch is checked first:
 * one buffer of this context per binding (else KF_ERROR_INVALID_ARGUMENT), each within the
 * binding size limit and the grid within the workgroup limits (else KF_ERROR_LIMIT). WebGPU
 * validation errors come back as KF_ERROR_VALIDATION with its message. */
KF_API kf_status kf_context_run(kf_context *ctx, const kf_dispatch *dispatches, uint32_t count);

typedef struct kf_timing {
    double median_ms; /* of `repeat` submissions of the whole sequence */
    double min_ms;
    bool gpu_timestamps; /* true: GPU timestamp queries; false: wall clock around a queue sync */
} kf_timing;

/* Runs the sequence to warm up (at least once and for at least 50 ms, so a GPU's clocks are up;
 * at most 200 runs), then `repeat` times (0 means 10), each its own
 * submission, and times each: GPU timestamps around the pass where the device has them, else
 * the wall clock from submission to completion. Never a substitute for checking results. */
KF_API kf_status kf_context_time(kf_context *ctx, const kf_dispatch *dispatches, uint32_t count,
                                 uint32_t repeat, kf_timing *out);
/* kf_context_time per dispatch, for attributing a sequence's time kernel by kernel: after the
 * same warm-up, `repeat` submissions of the whole sequence (0 means 10), each dispatch in a
 * compute pass of its own bracketed by GPU timestamps; ms[i] (count entries, the caller's) is
 * dispatch i's median device time and *sum the per-submission sum of them (median, min). Where
 * the device has no usable timestamps, each dispatch is timed alone by the wall clock around
 * its own submission (sum->gpu_timestamps false: each then includes a submission's overhead).
 * KF_ERROR_LIMIT past 2048 dispatches (a query set holds 4096 timestamps). */
KF_API kf_status kf_context_time_each(kf_context *ctx, const kf_dispatch *dispatches,
                                      uint32_t count, uint32_t repeat, double *ms, kf_timing *sum);

/* ======================================================================================== */
/* Kernel IR: typed values, statements, bindings, workgroup memory (src/ir)                  */
/* ======================================================================================== */

/* A kernel is a value: a workgroup size, bindings, workgroup memory and a body of statements,
 * built with the calls below (docs/builder.md has a complete example). Values are small handles
 * into the kernel's arena; a handle from another kernel, or any type error, makes the kernel
 * remember its first error (kf_kernel_error) and every later call return an invalid handle, so
 * building code needs no check per line.
 *
 * Statements run in order: a value that reads state (kf_load, kf_shared_load, kf_read,
 * kf_subgroup, kf_binding_length) is read where it is created; a pure value (arithmetic, calls,
 * casts) may be used anywhere its operands are visible. A value created inside an if, for or
 * while may only be used inside it (a type error otherwise: keep it in a kf_declare'd variable).
 *
 * Composition (the seeds' `a |> b`). A kernel has an input type and an output type:
 *   - input: non-void for an element-wise "stage" (kf_kernel_input() is its In value, and
 *     kf_kernel_index() the element's linear index); void for a producer (matmul, reduction).
 *   - output: the kernel hands values to its store phase with kf_kernel_yield(value, index).
 * Run on its own, a kernel's store phase writes out[index] = value (binding "out"), and a stage
 * reads In = in[index] over a 1-D grid:
 *     let idx = <global linear id>; if (idx < kf_elements) { let x = in[idx]; ...body... }
 * where `override kf_elements: u32` is set by kf_kernel_run (and the interpreter) from the
 * launch's element count. A stage therefore cannot use barriers or subgroup operations (they
 * need uniform control flow). kf_kernel_then(a, b) inlines b at every yield of a: one kernel, no
 * round trip through memory.
 *
 * Binding order (group 0, binding i = the i-th of): "in" (stages only), then the bindings
 * declared with kf_kernel_storage / kf_kernel_uniform in declaration order, then "out" (kernels
 * with an output). kf_kernel_binding_count / kf_kernel_binding_info list exactly these.
 *
 * WGSL checks constant expressions when it compiles, where x / 0u or x << 40u is an error
 * rather than its run-time result. kfuse folds constant expressions itself with the run-time
 * semantics (the interpreter's), so a kernel means the same whatever is constant: integer
 * x / 0 == x, x % 0 == 0, INT_MIN / -1 == INT_MIN, shifts use the low 5 bits of the amount,
 * float-to-int conversions clamp ([-2^31, 2^31 - 128] for i32, [0, 2^32 - 256] for u32; NaN
 * gives 0 in the interpreter). clamp(x, lo, hi) with lo > hi is undefined on GPUs when lo and
 * hi are not constants.
 */
typedef struct kf_kernel kf_kernel;

typedef enum kf_scalar {
    KF_SCALAR_VOID = 0,
    KF_SCALAR_F32,
    KF_SCALAR_F16,
    KF_SCALAR_I32,
    KF_SCALAR_U32,
    KF_SCALAR_BOOL
} kf_scalar;

/* A scalar, a vector (lanes 2..4) or a fixed-size array of either (count > 0). */
typedef struct kf_type {
    kf_scalar scalar;
    uint32_t lanes; /* 0 or 1: scalar */
    uint32_t count; /* 0: not an array */
} kf_type;

KF_API kf_type kf_type_scalar(kf_scalar scalar);
KF_API kf_type kf_type_vec(kf_scalar scalar, uint32_t lanes);
KF_API kf_type kf_type_array(kf_type elem, uint32_t count);
KF_API bool kf_type_eq(kf_type a, kf_type b);
/* "f32", "vec4<f16>", "array<u32, 8>" into buf; returns buf. */
KF_API const char *kf_type_str(kf_type type, char *buf, size_t size);

/* Handles: id 0 is invalid; `kernel` ties the handle to its kernel. */
typedef struct kf_val {
    uint32_t id;
    uint32_t kernel;
} kf_val;
typedef struct kf_binding {
    uint32_t id;
    uint32_t kernel;
} kf_binding;
typedef struct kf_var {
    uint32_t id;
    uint32_t kernel;
} kf_var;
typedef struct kf_shared {
    uint32_t id;
    uint32_t kernel;
} kf_shared;

typedef struct kf_kernel_desc {
    const char *name;           /* used in WGSL comments and messages; NULL: "kernel" */
    uint32_t workgroup_size[3]; /* 0 means 1; all zero: {256, 1, 1} */
    kf_type input;              /* KF_SCALAR_VOID: a producer */
    kf_type output;             /* KF_SCALAR_VOID: no store phase */
} kf_kernel_desc;

/* A new kernel (desc NULL: every default). NULL only when out of memory; a bad desc (a bool
 * input or output, a workgroup above 1024 invocations) is the kernel's first error. */
KF_API kf_kernel *kf_kernel_create(const kf_kernel_desc *desc);
KF_API void kf_kernel_destroy(kf_kernel *k);
/* A deep copy (bindings, body, first error). The copy has handles of its own: values, bindings
 * and variables of k are not valid in it. */
KF_API kf_kernel *kf_kernel_clone(const kf_kernel *k);
/* KF_OK, or the first error met while building (or emitting: an if, for or while left open). */
KF_API kf_status kf_kernel_status(const kf_kernel *k);
/* The first build error's message; if none, the message of the last failed kf_kernel_run,
 * kf_kernel_dispatch, kf_kernel_interpret or query (kf_kernel_binding_info) on k, none of which
 * makes the kernel failed; "" when none. Valid until the next call on k. */
KF_API const char *kf_kernel_error(const kf_kernel *k);
KF_API const char *kf_kernel_name(const kf_kernel *k);
KF_API kf_type kf_kernel_input_type(const kf_kernel *k);
KF_API kf_type kf_kernel_output_type(const kf_kernel *k);
KF_API void kf_kernel_workgroup_size(const kf_kernel *k, uint32_t out[3]);

/* --- values --- */
KF_API kf_val kf_lit_f32(kf_kernel *k, float v);
KF_API kf_val kf_lit_f16(kf_kernel *k, float v);
KF_API kf_val kf_lit_i32(kf_kernel *k, int32_t v);
KF_API kf_val kf_lit_u32(kf_kernel *k, uint32_t v);
KF_API kf_val kf_lit_bool(kf_kernel *k, bool v);
KF_API kf_type kf_val_type(const kf_kernel *k, kf_val v);

typedef enum kf_op {
    KF_OP_NONE = 0,
    /* binary arithmetic (numeric, same type; a scalar may pair with a vector) */
    KF_OP_ADD,
    KF_OP_SUB,
    KF_OP_MUL,
    KF_OP_DIV,
    KF_OP_MOD,
    /* comparisons -> bool (or vecN<bool>) */
    KF_OP_EQ,
    KF_OP_NE,
    KF_OP_LT,
    KF_OP_LE,
    KF_OP_GT,
    KF_OP_GE,
    /* logic on bool */
    KF_OP_AND,
    KF_OP_OR,
    /* bitwise on integers */
    KF_OP_BIT_AND,
    KF_OP_BIT_OR,
    KF_OP_BIT_XOR,
    KF_OP_SHL,
    KF_OP_SHR,
    /* unary */
    KF_OP_NEG,
    KF_OP_NOT,
    KF_OP_BIT_NOT
} kf_op;

KF_API kf_val kf_binary(kf_kernel *k, kf_op op, kf_val a, kf_val b);
KF_API kf_val kf_unary(kf_kernel *k, kf_op op, kf_val a);
KF_API kf_val kf_add(kf_kernel *k, kf_val a, kf_val b);
KF_API kf_val kf_sub(kf_kernel *k, kf_val a, kf_val b);
KF_API kf_val kf_mul(kf_kernel *k, kf_val a, kf_val b);
KF_API kf_val kf_div(kf_kernel *k, kf_val a, kf_val b);

typedef enum kf_fn {
    KF_FN_NONE = 0,
    KF_FN_EXP,
    KF_FN_LOG,
    KF_FN_TANH,
    KF_FN_SQRT,
    KF_FN_INVERSE_SQRT,
    KF_FN_ABS,
    KF_FN_MIN,
    KF_FN_MAX,
    KF_FN_CLAMP,
    KF_FN_FMA,
    KF_FN_POW,
    KF_FN_FLOOR,
    KF_FN_SIN,
    KF_FN_COS,
    /* erf has no WGSL builtin: kfuse emits a helper, a Taylor series below |x| = 0.7 and
     * Abramowitz & Stegun 7.1.26 above, in f32 (f16 rounds the f32 result). Measured max abs
     * error against libm: 2.5e-7 in the interpreter, 2.8e-7 on lavapipe (docs/builder.md). */
    KF_FN_ERF,
    KF_FN_DOT,
    KF_FN_SELECT /* select(f, t, cond): t where cond */
} kf_fn;

KF_API kf_val kf_call(kf_kernel *k, kf_fn fn, const kf_val *args, uint32_t count);
KF_API kf_val kf_call1(kf_kernel *k, kf_fn fn, kf_val a);
KF_API kf_val kf_call2(kf_kernel *k, kf_fn fn, kf_val a, kf_val b);
KF_API kf_val kf_call3(kf_kernel *k, kf_fn fn, kf_val a, kf_val b, kf_val c);
KF_API kf_val kf_select(kf_kernel *k, kf_val if_false, kf_val if_true, kf_val cond);
KF_API kf_val kf_cast(kf_kernel *k, kf_type to, kf_val v);    /* value conversion, f32(x) */
KF_API kf_val kf_bitcast(kf_kernel *k, kf_type to, kf_val v); /* bitcast<T>(x) */
KF_API kf_val kf_splat(kf_kernel *k, kf_type vec, kf_val scalar);
KF_API kf_val kf_vec(kf_kernel *k, kf_type vec, const kf_val *lanes, uint32_t count);
KF_API kf_val kf_extract(kf_kernel *k, kf_val vec_or_array, uint32_t lane);

typedef enum kf_builtin {
    KF_BUILTIN_NONE = 0,
    KF_BUILTIN_GLOBAL_ID,              /* vec3<u32> */
    KF_BUILTIN_LOCAL_ID,               /* vec3<u32> */
    KF_BUILTIN_LOCAL_INDEX,            /* u32 */
    KF_BUILTIN_WORKGROUP_ID,           /* vec3<u32> */
    KF_BUILTIN_NUM_WORKGROUPS,         /* vec3<u32> */
    KF_BUILTIN_SUBGROUP_INVOCATION_ID, /* u32; needs subgroups */
    KF_BUILTIN_SUBGROUP_SIZE           /* u32; needs subgroups */
} kf_builtin;

KF_API kf_val kf_builtin_get(kf_kernel *k, kf_builtin which);
/* The linear workgroup index (workgroup_id.x + workgroup_id.y * num_workgroups.x), which stays
 * right when the runtime folds a large 1-D grid into 2-D, and the matching global linear id. */
KF_API kf_val kf_workgroup_linear(kf_kernel *k);
KF_API kf_val kf_global_linear(kf_kernel *k);

typedef enum kf_subgroup_op {
    KF_SUBGROUP_NONE = 0,
    KF_SUBGROUP_ADD,      /* subgroupAdd(v) */
    KF_SUBGROUP_MAX,      /* subgroupMax(v) */
    KF_SUBGROUP_SHUFFLE,  /* subgroupShuffle(v, lane) */
    KF_SUBGROUP_BROADCAST /* subgroupBroadcast(v, lane); lane must be a literal */
} kf_subgroup_op;
/* lane is ignored (pass an invalid handle) for ADD and MAX. Producers only (see above); the
 * device needs subgroups (kf_adapter_info.has_subgroups) for the kernel to compile. */
KF_API kf_val kf_subgroup(kf_kernel *k, kf_subgroup_op op, kf_val v, kf_val lane);

/* --- bindings (group 0, numbered in the order declared) --- */
typedef enum kf_access { KF_ACCESS_READ = 0, KF_ACCESS_READ_WRITE } kf_access;
/* var<storage, ...> name: array<elem>. */
KF_API kf_binding kf_kernel_storage(kf_kernel *k, const char *name, kf_type elem, kf_access access);
/* var<uniform> name: type (a scalar, vector or array of vec4 as WGSL's layout rules allow). */
KF_API kf_binding kf_kernel_uniform(kf_kernel *k, const char *name, kf_type type);
/* `override name: type = default;` -> its value. */
KF_API kf_val kf_kernel_override(kf_kernel *k, const char *name, kf_type type,
                                 double default_value);
/* storage: b[index]; uniform: the whole of b when index is the invalid handle {0, 0}, else
 * b[index] for a uniform array. */
KF_API kf_val kf_load(kf_kernel *k, kf_binding b, kf_val index);
KF_API void kf_store(kf_kernel *k, kf_binding b, kf_val index, kf_val value);
KF_API kf_val kf_binding_length(kf_kernel *k, kf_binding b); /* arrayLength(&b), u32 */
/* The bindings in emission order ("in", declared ones, "out"; see above). */
KF_API uint32_t kf_kernel_binding_count(const kf_kernel *k);

typedef struct kf_binding_info {
    const char *name;
    kf_binding_kind kind;
    kf_type elem;
} kf_binding_info;
/* out->name is valid until k changes or is destroyed. */
KF_API kf_status kf_kernel_binding_info(const kf_kernel *k, uint32_t index, kf_binding_info *out);

/* --- workgroup memory --- */
KF_API kf_shared kf_kernel_workgroup(kf_kernel *k, const char *name, kf_type elem, uint32_t count);
KF_API kf_val kf_shared_load(kf_kernel *k, kf_shared s, kf_val index);
KF_API void kf_shared_store(kf_kernel *k, kf_shared s, kf_val index, kf_val value);
/* Stores a scalar into one lane of the vector element at index: `s[index][lane] = value`; lane
 * is a u32 or i32 value (0..lanes-1; outside, the store is undefined as WGSL's is). */
KF_API void kf_shared_store_lane(kf_kernel *k, kf_shared s, kf_val index, kf_val lane,
                                 kf_val value);
KF_API void kf_barrier(kf_kernel *k); /* workgroupBarrier() */
/* workgroupUniformLoad(&s[index]): a barrier, then s[index], one value for the whole workgroup
 * that WGSL's uniformity analysis knows is uniform, so an if or a loop on it may hold barriers
 * (and subgroup operations). index must be a literal; not in a stage (a barrier). */
KF_API kf_val kf_shared_load_uniform(kf_kernel *k, kf_shared s, kf_val index);

/* --- subgroup matrices (Dawn's chromium_experimental_subgroup_matrix) --- */
/* A subgroup matrix is a small matrix held jointly by the invocations of one subgroup (tensor
 * cores, simdgroup matrices): the subgroup loads it, multiplies with it and stores it as one.
 * kfuse keeps them in variables of their own kind:
 *   left   M rows x K cols, the A of C += A * B     (WGSL subgroup_matrix_left<T, K, M>)
 *   right  K rows x N cols, the B                   (subgroup_matrix_right<T, N, K>)
 *   result M rows x N cols, the C                   (subgroup_matrix_result<T, N, M>)
 * Which (component, result component, M, N, K) the device runs is the adapter's list of
 * configurations (an H200 under Dawn: f16 -> f16 or f32 at 16x16x16, 16x8x16, 16x8x8); a
 * kernel using another fails to compile. Every call must be reached by whole subgroups with
 * the same offset and stride in every invocation of the subgroup (the emitted WGSL turns off
 * Tint's workgroup-uniformity check, chromium.subgroup_matrix_uniformity, so offsets may depend
 * on the subgroup's index); the workgroup's x size must be a multiple of the subgroup size. Not
 * allowed in stages. The interpreter keeps each matrix whole per subgroup (subgroups of
 * desc.subgroup_size consecutive invocations) and refuses a call some invocations of a
 * subgroup skip or see with different offsets; its multiply-accumulate sums each element's K
 * products and the accumulator in double and rounds once to the result component. */
typedef enum kf_sgmat_kind {
    KF_SGMAT_NONE = 0,
    KF_SGMAT_LEFT,
    KF_SGMAT_RIGHT,
    KF_SGMAT_RESULT
} kf_sgmat_kind;

typedef struct kf_sgmat {
    uint32_t id;
    uint32_t kernel;
} kf_sgmat;

/* `var name: subgroup_matrix_<kind><component, cols, rows>;` in the current block, zero-filled.
 * component: f32, f16, i32 or u32; cols, rows 1..64. */
KF_API kf_sgmat kf_sgmat_declare(kf_kernel *k, const char *name, kf_sgmat_kind kind,
                                 kf_scalar component, uint32_t cols, uint32_t rows);
/* m = subgroupMatrixLoad(&src, offset, col_major, stride): element (r, c) of m is
 * src[offset + r * stride + c] (row-major) or src[offset + c * stride + r] (col_major). src holds
 * scalars of m's component type; offset and stride are u32 (stride at least m's cols, or rows
 * when col_major). _storage reads a storage binding instead of a workgroup array. */
KF_API void kf_sgmat_load(kf_kernel *k, kf_sgmat m, kf_shared src, kf_val offset, bool col_major,
                          kf_val stride);
KF_API void kf_sgmat_load_storage(kf_kernel *k, kf_sgmat m, kf_binding src, kf_val offset,
                                  bool col_major, kf_val stride);
/* subgroupMatrixStore(&dst, offset, m, col_major, stride): the layout of kf_sgmat_load. The
 * binding of _storage must be read_write. */
KF_API void kf_sgmat_store(kf_kernel *k, kf_shared dst, kf_val offset, kf_sgmat m, bool col_major,
                           kf_val stride);
KF_API void kf_sgmat_store_storage(kf_kernel *k, kf_binding dst, kf_val offset, kf_sgmat m,
                                   bool col_major, kf_val stride);
/* acc = subgroupMatrixMultiplyAccumulate(left, right, acc): acc += left * right. left is M x K,
 * right K x N of one component type, acc a result M x N. */
KF_API void kf_sgmat_mma(kf_kernel *k, kf_sgmat acc, kf_sgmat left, kf_sgmat right);
/* acc = subgroupMatrixMultiply<component>(left, right): acc = left * right, acc's previous value
 * not read (no zeroing load before a fresh sum). Shapes and types as kf_sgmat_mma. */
KF_API void kf_sgmat_mul(kf_kernel *k, kf_sgmat acc, kf_sgmat left, kf_sgmat right);

/* --- statements --- */
/* Names a value (`let name = ...;`); returns the named value. */
KF_API kf_val kf_let(kf_kernel *k, const char *name, kf_val v);
/* `var name: type = init;` (init the invalid handle {0, 0}: zero). */
KF_API kf_var kf_declare(kf_kernel *k, const char *name, kf_type type, kf_val init);
KF_API void kf_assign(kf_kernel *k, kf_var var, kf_val value);
KF_API kf_val kf_read(kf_kernel *k, kf_var var); /* the variable's value at this point */
KF_API void kf_if(kf_kernel *k, kf_val cond);    /* if cond { ... kf_else ... kf_end */
KF_API void kf_else(kf_kernel *k);
/* for (var name = start; name < end; name += step) { ... kf_end }; returns the loop variable. */
KF_API kf_val kf_for(kf_kernel *k, const char *name, kf_val start, kf_val end, kf_val step);
KF_API void kf_while(kf_kernel *k); /* loop { ... kf_while_cond(cond) ... kf_end } */
KF_API void kf_while_cond(kf_kernel *k, kf_val cond); /* leaves the loop when cond is false */
KF_API void kf_break(kf_kernel *k);
KF_API void kf_continue(kf_kernel *k);
KF_API void kf_end(kf_kernel *k); /* closes the innermost if, for or while */

/* --- composition --- */
KF_API kf_val kf_kernel_input(kf_kernel *k); /* the In value of a stage */
KF_API kf_val kf_kernel_index(kf_kernel *k); /* the element's linear index (u32) in a stage */
/* The store phase: out[index] = value, through whatever kernels were composed after this one. */
KF_API void kf_kernel_yield(kf_kernel *k, kf_val value, kf_val index);

/* a |> b: a new kernel running b on each value a yields, at the point it yields it. b must be a
 * stage whose input type is a's output type, with the same workgroup size, and must not use
 * workgroup memory, barriers or builtins other than its index (it runs inside a's invocations).
 * b's bindings follow a's (a clashing name gets a suffix: "bias" becomes "bias_1"); an override
 * both declare with one type is one constant. The result is a stage when a is, and keeps a's
 * grid; (a |> b) |> c and a |> (b |> c) compute the same. Neither a nor b is consumed. NULL only
 * when out of memory; otherwise check kf_kernel_status() of the result, which names the
 * mismatch. */
KF_API kf_kernel *kf_kernel_then(const kf_kernel *a, const kf_kernel *b);

/* The mirror of kf_kernel_then, on loads (a prologue): a new kernel that is `consumer` with every
 * kf_load of its storage binding named `binding` replaced by `prologue` applied to the loaded
 * value, at the point of the load; the prologue's index is the loaded element's index in the
 * binding. `prologue` is a stage that yields exactly once, outside any if or loop, at its own
 * kf_kernel_index, and stores nothing; like kf_kernel_then's b it may use no workgroup memory,
 * barriers, subgroups or builtins (its workgroup size does not matter). It yields the binding's
 * type, or, for a vector binding (the matmul's vec4 tile loads), its lane type: it then runs
 * once per lane, lane l of vector i at index i * lanes + l. In the result the binding keeps its
 * name and place and holds the prologue's input type (per lane for a vector binding); the
 * prologue's own bindings follow the consumer's declared ones, renamed on a clash as in
 * kf_kernel_then (broadcast inputs are the prologue's to index from its index), then "out". The
 * result keeps the consumer's input, output and grid; an identity prologue gives the consumer
 * back. Refused (the result's status): a binding that is missing, read_write or a uniform; one
 * loaded straight into subgroup matrices (KF_ERROR_UNSUPPORTED: stage it through workgroup
 * memory); a prologue of the wrong type or shape. Neither kernel is consumed. NULL only when out
 * of memory. */
KF_API kf_kernel *kf_kernel_prologue(const kf_kernel *consumer, const char *binding,
                                     const kf_kernel *prologue);

typedef kf_val (*kf_map_fn)(kf_kernel *k, kf_val x, void *user);
/* The seeds' mapK: a stage computing fn(In) for each element, in -> out. */
KF_API kf_kernel *kf_kernel_map(const char *name, kf_type input, kf_type output,
                                const uint32_t workgroup_size[3], kf_map_fn fn, void *user);
/* The stage that yields its input unchanged: neutral for kf_kernel_then. */
KF_API kf_kernel *kf_kernel_identity(kf_type type, const uint32_t workgroup_size[3]);

/* --- dispatch size --- */
/* A producer's builder records the grid (workgroups per dimension) its shapes need, so whoever
 * runs it (kf_kernel_run with zero groups, the planner, verification) launches it right.
 * kf_kernel_then keeps a's grid. All zero (the default) means: a stage or 1-D element-wise
 * producer covered by ceil(elements / workgroup size) groups. */
KF_API void kf_kernel_set_grid(kf_kernel *k, const uint32_t groups[3]);
KF_API void kf_kernel_grid(const kf_kernel *k, uint32_t out[3]);

/* --- emission and running --- */
/* Deterministic, readable WGSL; NULL (and the kernel's error set) if the kernel is invalid. The
 * caller frees it with kf_free. A stage is emitted as run on its own (bindings in, ..., out).
 * The entry point is "main"; `enable f16;` / `enable subgroups;` appear only when used, and so
 * does `enable chromium_experimental_subgroup_matrix;` (with its uniformity diagnostic off). */
KF_API char *kf_kernel_emit_wgsl(kf_kernel *k);
/* Declares that every launch binds at least `elements` elements (of the binding's element type)
 * at binding `index` (binding order: kf_kernel_binding_info; call it once the bindings are all
 * declared). The emitter proves each access of the kernel in bounds against these lengths and
 * guards only the accesses it cannot prove (docs/builder.md, "In bounds by construction");
 * kf_kernel_run, kf_kernel_dispatch and kf_kernel_interpret refuse a shorter buffer. A binding
 * without a declared length is proved against the buffer each launch gives it (kf_kernel_emit_wgsl
 * alone knows no length: it guards what only a length would prove). A wrong index or a uniform
 * binding is the kernel's error. */
KF_API kf_status kf_kernel_set_binding_length(kf_kernel *k, uint32_t index, uint64_t elements);

typedef struct kf_bounds_report {
    uint32_t accesses; /* storage, uniform-array, workgroup and subgroup-matrix accesses */
    uint32_t proved;   /* shown in bounds: emitted as they are */
    uint32_t guarded;  /* not shown: loads clamped into bounds, stores and moves skipped */
} kf_bounds_report;
/* The in-bounds proof of the kernel as kf_kernel_emit_wgsl emits it (declared binding lengths,
 * recorded grid). `text` (optional; free with kf_free) receives one line per access: what, the
 * index's range, the verdict. Fails only for an invalid kernel or out of memory. */
KF_API kf_status kf_kernel_bounds(kf_kernel *k, kf_bounds_report *out, char **text);
/* The binding kinds of the emitted kernel, in binding order (for kf_pipeline_desc). */
KF_API uint32_t kf_kernel_binding_kinds(const kf_kernel *k, kf_binding_kind *out,
                                        uint32_t capacity);

typedef struct kf_kernel_launch {
    kf_buffer *const *buffers; /* one per binding, in binding order */
    uint32_t buffer_count;
    uint32_t groups[3];           /* all zero: the kernel's recorded grid (kf_kernel_set_grid), else
                                     enough groups to cover `elements` */
    uint64_t elements;            /* stages: number of elements (0: the length of binding "in");
                                     producers with no grid: invocations (0: the length of "out") */
    const kf_constant *constants; /* values for the kernel's overrides (kf_elements is set) */
    uint32_t constant_count;
} kf_kernel_launch;

/* Emits, compiles (cached) and dispatches the kernel once, waiting for it. Refuses a buffer
 * count that differs from the binding count, a stage whose "in" or "out" holds fewer than
 * `elements`, and a constant that is not an override of the kernel (message: kf_kernel_error;
 * a compile or device error is also on kf_context_last_error). */
KF_API kf_status kf_kernel_run(kf_context *ctx, kf_kernel *k, const kf_kernel_launch *launch);
/* The same launch as a kf_dispatch (pipeline compiled and cached), for batching and timing.
 * The dispatch points into `launch->buffers`, which must outlive it. */
KF_API kf_status kf_kernel_dispatch(kf_context *ctx, kf_kernel *k, const kf_kernel_launch *launch,
                                    kf_dispatch *out);

/* --- the CPU interpreter --- */
typedef struct kf_host_buffer {
    void *data; /* bytes of the binding: array<elem> laid out as WGSL lays it out */
    uint64_t size;
} kf_host_buffer;

typedef struct kf_interp_desc {
    kf_host_buffer *buffers; /* one per binding, in binding order */
    uint32_t buffer_count;
    uint32_t groups[3];     /* as kf_kernel_launch */
    uint64_t elements;      /* as kf_kernel_launch */
    uint32_t subgroup_size; /* emulated subgroup width; 0 means 32 */
    const kf_constant *constants;
    uint32_t constant_count;
    /* Emulates a shader compiler that keeps the value of an f32 -> f16 cast in f32 until a
     * store to memory rounds it, so f32(f16(x)) is x (the H200's Vulkan driver behaved so:
     * src/ops/attention_sgmat.c): for testing kernels that must not rely on the round trip.
     * false: every cast rounds, as WGSL says. */
    bool f16_casts_unrounded;
} kf_interp_desc;

/* Runs the kernel on the CPU: the same lowered IR the WGSL emitter writes, one workgroup at a
 * time with all its invocations in lockstep (so barriers hold), workgroup memory zeroed per
 * workgroup, subgroups of `subgroup_size` consecutive local indices. f32 uses the C library's
 * float functions; every f16 operation rounds to half (ties to even); integers wrap as in WGSL.
 * Workgroup memory is checked for data races (off with $KF_CHECK_RACES=0): two accesses of an
 * element by different invocations, one a write, with no workgroupBarrier between, fail the run
 * (a subgroup-matrix load or store counts as an access by its whole subgroup).
 * The read_write buffers receive the results. Refused with KF_ERROR_INVALID_ARGUMENT and a
 * message (kf_kernel_error) naming the binding and index: an out-of-bounds access (the GPU would
 * clamp or drop it), a barrier some invocations skip, a subgroup shuffle from an inactive or
 * absent lane, a loop past 2^22 iterations, a data race on workgroup memory. Meant for small inputs
 * (tens of thousands of elements): a way to check the emitter and every fusion rewrite without a
 * GPU. */
KF_API kf_status kf_kernel_interpret(kf_kernel *k, const kf_interp_desc *desc);

/* ======================================================================================== */
/* Tensors and verified operators (src/ops)                                                  */
/* ======================================================================================== */

#define KF_MAX_DIMS 4

typedef enum kf_dtype {
    KF_DTYPE_F32 = 0,
    KF_DTYPE_F16, /* storage only: kernels compute in f32; needs the device's shader-f16 */
    KF_DTYPE_I32  /* integer indices (cross_entropy labels); a CPU tensor holds them as floats */
} kf_dtype;

KF_API const char *kf_dtype_str(kf_dtype dtype); /* "f32", "f16", "i32" */
KF_API uint32_t kf_dtype_size(kf_dtype dtype);   /* bytes per element: 4, 2, 4 */

typedef struct kf_shape {
    uint32_t rank; /* 0..KF_MAX_DIMS; rank 0 is a scalar of one element */
    uint32_t dims[KF_MAX_DIMS];
} kf_shape;

KF_API kf_shape kf_shape_1d(uint32_t n);
KF_API kf_shape kf_shape_2d(uint32_t rows, uint32_t cols);
/* The element count; UINT64_MAX when it does not fit in 64 bits (so every size check refuses it
 * rather than seeing a product wrapped to 0). */
KF_API uint64_t kf_shape_elements(const kf_shape *s);
KF_API bool kf_shape_eq(const kf_shape *a, const kf_shape *b);
/* "64x128" into buf; returns buf. */
KF_API const char *kf_shape_str(const kf_shape *s, char *buf, size_t size);

/* A CPU tensor (the seeds' TensorData): row-major f32 data the tensor owns. */
typedef struct kf_tensor {
    kf_shape shape;
    float *data;
} kf_tensor;

/* A tensor of zeros. KF_ERROR_SHAPE for rank > 4, a dim of 0 or 2^32 elements or more (kernels
 * index in u32). */
KF_API kf_status kf_tensor_create(const kf_shape *shape, kf_tensor **out);
KF_API kf_status kf_tensor_constant(const kf_shape *shape, float value, kf_tensor **out);
KF_API void kf_tensor_destroy(kf_tensor *t);
KF_API uint64_t kf_tensor_size(const kf_tensor *t);
KF_API float kf_tensor_get(const kf_tensor *t, uint64_t index); /* NaN when out of range */
KF_API kf_status kf_tensor_set(kf_tensor *t, uint64_t index, float value);
/* Uniform random values in [lo, hi) from a seed (splitmix64); never all zeros. */
KF_API void kf_tensor_fill_random(kf_tensor *t, uint64_t seed, float lo, float hi);
/* max over elements of |a-b| / max(|b|, floor): the relative error kfuse reports everywhere. A
 * NaN where the other has a number counts as infinite error; NaN against NaN and equal
 * infinities as zero. floor defaults to 1e-6 when 0. */
KF_API double kf_max_rel_error(const float *a, const float *b, uint64_t n, double floor);
/* true when shapes are equal and kf_max_rel_error <= tolerance. */
KF_API bool kf_tensor_approx_eq(const kf_tensor *a, const kf_tensor *b, double tolerance);

/* A GPU tensor (the seeds' GPUHandle): a buffer with a shape and an element type. */
typedef struct kf_gpu_tensor {
    kf_context *ctx;
    kf_buffer *buffer;
    kf_shape shape;
    kf_dtype dtype;
} kf_gpu_tensor;

KF_API kf_status kf_gpu_tensor_create(kf_context *ctx, const kf_shape *shape, kf_dtype dtype,
                                      kf_gpu_tensor **out); /* zeros */
/* Uploads t as dtype: f16 rounds to nearest, ties to even (KF_ERROR_UNSUPPORTED without the
 * device's shader-f16); i32 needs every value to be an integer (KF_ERROR_INVALID_ARGUMENT naming
 * the first that is not). Failures leave a message on ctx. */
KF_API kf_status kf_gpu_tensor_from(kf_context *ctx, const kf_tensor *t, kf_dtype dtype,
                                    kf_gpu_tensor **out);
/* Downloads into t, whose shape must equal g's (the message names both shapes). */
KF_API kf_status kf_gpu_tensor_to(const kf_gpu_tensor *g, kf_tensor *t);
/* Frees the tensor. Bound to a plan (kf_plan_bind_input / _output), its memory stays until the
 * last such plan unbinds it or is destroyed. NULL is a no-op. */
KF_API void kf_gpu_tensor_destroy(kf_gpu_tensor *g);

/* Parameters an operator may read. Each operator describes the ones it takes (name, type, default,
 * valid range: kf_op_param_info_at); kf_op_param_set sets one by name, validated. A field whose
 * bit in `given` is clear and whose value is zero means the op's default (so `{0}` is every
 * default); a field whose bit is set is used as it is, zero included (scale by 0). */
typedef struct kf_op_params {
    float alpha;      /* leaky_relu slope (0.01), scale / affine factor (1), attention's score
                         scale (0: 1/sqrt(D)), rope's base (10000), */
    float beta;       /* affine offset (0) */
    float eps;        /* norms (1e-5) */
    bool exact;       /* gelu: the erf form instead of the tanh approximation */
    bool has_weight;  /* rmsnorm / layernorm: the optional input "weight" is there */
    bool has_bias;    /* rmsnorm / layernorm: the optional input "bias" is there */
    bool transpose_a; /* matmul: use a^T */
    bool transpose_b; /* matmul: use b^T */
    bool causal;      /* attention: key j masked for query i < j (default true) */
    /* slice, concat: the axis (negative counts from the end; default 0) */
    int32_t axis;
    int32_t start;  /* slice: the first index taken along the axis (0) */
    int32_t length; /* slice: how many indices it takes (required, >= 1) */
    /* A list parameter (KF_PARAM_TYPE_INT_LIST; set it with kf_op_param_set_list): reshape's
     * shape (one entry may be -1: inferred from the element count), permute's axes. list_count
     * entries of list are used; a count of 0 with KF_PARAM_LIST clear means not given. */
    int32_t list[KF_MAX_DIMS];
    uint32_t list_count;
    uint32_t given; /* KF_PARAM_* bits: the parameters set on purpose */
} kf_op_params;

#define KF_PARAM_ALPHA (1u << 0)
#define KF_PARAM_BETA (1u << 1)
#define KF_PARAM_EPS (1u << 2)
#define KF_PARAM_EXACT (1u << 3)
#define KF_PARAM_TRANSPOSE_A (1u << 4)
#define KF_PARAM_TRANSPOSE_B (1u << 5)
#define KF_PARAM_CAUSAL (1u << 6)
#define KF_PARAM_LIST (1u << 20) /* reshape's shape, permute's axes */
#define KF_PARAM_AXIS (1u << 21)
#define KF_PARAM_START (1u << 22)
#define KF_PARAM_LENGTH (1u << 23)

typedef enum kf_op_class {
    KF_OP_CLASS_ELEMENTWISE = 1, /* out[i] = f(in0[i'], in1[i''], ...) with broadcasting */
    KF_OP_CLASS_MATMUL,
    KF_OP_CLASS_ROW_REDUCTION, /* over the last axis: sum, mean, max, softmax, norms, loss */
    KF_OP_CLASS_LAYOUT         /* transpose (copy is element-wise) */
} kf_op_class;

typedef struct kf_operator kf_operator;

/* One entry of an operator's verification table: input shapes and parameters. `kfuse verify` and
 * the test suite run every entry, forward and backward, f32 and f16. */
typedef struct kf_op_case {
    kf_shape shapes[4]; /* one per input */
    kf_op_params params;
    const char *note; /* what the case is for: "prime", "bias row", "large" (NULL: none) */
} kf_op_case;

/* An operator is opaque (its table of functions is kfuse's own, src/ops/operator.h); these
 * accessors read what callers need. Every accessor takes NULL and then returns NULL, 0 or an
 * error status. */
KF_API const char *kf_op_name(const kf_operator *op);  /* "matmul", "gelu", ... */
KF_API const char *kf_op_about(const kf_operator *op); /* one line for --help and tables */
KF_API kf_op_class kf_op_class_of(const kf_operator *op);
/* The verification table (kf_op_case): `kfuse verify` and the test suite run every entry. */
KF_API uint32_t kf_op_case_count(const kf_operator *op);
KF_API const kf_op_case *kf_op_case_at(const kf_operator *op,
                                       uint32_t index); /* NULL out of range */
/* The relative error kf_op_verify accepts for this dtype (documented at each op). */
KF_API double kf_op_tolerance(const kf_operator *op, kf_dtype dtype);
/* The operator's forward kernel for these input shapes (kf_op_arity of them) and dtype: bindings
 * are the inputs in order, then "out"; every output element goes through kf_kernel_yield (its
 * store phase), so kf_kernel_then composes onto it, and the kernel records its grid. NULL when
 * the shapes do not fit (check them with kf_op_shape) or out of memory; destroy it with
 * kf_kernel_destroy. */
KF_API kf_kernel *kf_op_kernel_forward(const kf_operator *op, const kf_shape *in,
                                       const kf_op_params *p, kf_dtype dtype);
/* The operator's CPU specification (float64 loops) on tensors: out must have kf_op_shape's shape.
 */
KF_API kf_status kf_op_spec_forward(const kf_operator *op, const kf_tensor *const *in,
                                    const kf_op_params *p, kf_tensor *out);

KF_API uint32_t kf_op_count(void);
KF_API const kf_operator *kf_op_at(uint32_t index);
KF_API const kf_operator *kf_op_find(const char *name); /* NULL when unknown */
KF_API uint32_t kf_op_arity(const kf_operator *op, const kf_op_params *p);
typedef enum kf_param_type {
    KF_PARAM_TYPE_FLOAT = 1, /* any value in range, held as an f32 */
    KF_PARAM_TYPE_BOOL,      /* 0 or 1 (the language's false / true) */
    KF_PARAM_TYPE_INT,       /* a whole number in range */
    KF_PARAM_TYPE_INT_LIST   /* up to KF_MAX_DIMS whole numbers, each in range ([2, -1, 64]) */
} kf_param_type;

/* One parameter as its operator describes it: the language (positional numbers in index order,
 * keywords by name), kf_op_param_set, the messages and kf_graph_format all read this. */
typedef struct kf_op_param_info {
    const char *name; /* "alpha", "eps", ... (the keyword) */
    const char *about;
    kf_param_type type;
    double default_value;
    double min, max;    /* the valid range, inclusive, */
    bool min_exclusive; /* except min itself when set (eps > 0) */
    uint32_t given;     /* its KF_PARAM_* bit in kf_op_params.given */
} kf_op_param_info;

/* The operator's parameters, in the order the language takes them positionally. */
KF_API uint32_t kf_op_param_count(const kf_operator *op);
/* KF_ERROR_INVALID_ARGUMENT for an index past kf_op_param_count. */
KF_API kf_status kf_op_param_info_at(const kf_operator *op, uint32_t index, kf_op_param_info *out);
/* Sets parameter `name` of op in *p to value and marks it given. KF_ERROR_INVALID_ARGUMENT, with
 * msg (may be NULL) naming the op, the parameter and what is valid, for a name op does not take,
 * a value out of range, a bool other than 0 or 1, or an int that is not whole; *p is then
 * unchanged. */
KF_API kf_status kf_op_param_set(const kf_operator *op, kf_op_params *p, const char *name,
                                 double value, char *msg, size_t msg_size);
/* Sets list parameter `name` of op (KF_PARAM_TYPE_INT_LIST: reshape's shape, permute's axes) to
 * values[0..count) and marks it given. KF_ERROR_INVALID_ARGUMENT, with msg as kf_op_param_set,
 * for a name op does not take or that is not a list, more than KF_MAX_DIMS values, values NULL
 * with a count, or a value out of range; *p is then unchanged. (kf_op_param_set refuses a list
 * parameter.) */
KF_API kf_status kf_op_param_set_list(const kf_operator *op, kf_op_params *p, const char *name,
                                      const int32_t *values, uint32_t count, char *msg,
                                      size_t msg_size);
/* The value op uses for parameter `index` under p: the field when given or nonzero, else the
 * default (NaN for a bad index; for a list parameter, its entry count). */
KF_API double kf_op_param_value(const kf_operator *op, const kf_op_params *p, uint32_t index);
/* Checks every parameter p gives or sets for op (range, type) and that p gives none op lacks:
 * KF_ERROR_INVALID_ARGUMENT with msg as kf_op_param_set. kf_graph_op runs it. */
KF_API kf_status kf_op_params_check(const kf_operator *op, const kf_op_params *p, char *msg,
                                    size_t msg_size);

/* The operator's tensor inputs, in order: all of them (kf_op_input_count), of which those marked
 * optional are there only when p says so (a norm's "weight" and "bias": has_weight, has_bias);
 * kf_op_arity counts those present. The present inputs are passed in this order. */
KF_API uint32_t kf_op_input_count(const kf_operator *op);
/* Name ("x", "weight", ...) and whether the input is optional. KF_ERROR_INVALID_ARGUMENT past
 * the count. */
KF_API kf_status kf_op_input_info(const kf_operator *op, uint32_t index, const char **name,
                                  bool *optional);
/* Backward operators (gelu_grad, softmax_grad, ...; docs/training.md) compute the gradient of
 * another operator for one of its inputs: kf_op_grad_of returns that forward operator (NULL for
 * a forward operator) and *input (optional) the input's index. Their inputs are the forward's
 * inputs followed by dy. kf_op_has_backward: whether the operator has a backward kernel of its
 * own (kf_op_verify with backward); backward operators and sum_to have none. */
KF_API const kf_operator *kf_op_grad_of(const kf_operator *op, uint32_t *input);
KF_API bool kf_op_has_backward(const kf_operator *op);
/* Whether kf_op_check_gradient applies to the operator: it has a spec_backward or is a backward
 * operator. The attention backward's helpers (attention_grad_prep, attention_grad_q/k/v) are
 * neither: their relation to attention's differences is checked through autodiff (tests). */
KF_API bool kf_op_has_gradient_check(const kf_operator *op);

/* The output shape of op on these inputs; KF_ERROR_SHAPE with the reason in msg. */
KF_API kf_status kf_op_shape(const kf_operator *op, const kf_shape *in, const kf_op_params *p,
                             kf_shape *out, char *msg, size_t msg_size);

/* The matmul autotuner. Times the register-blocked f32 kernel's tile configurations on this
 * device for an m x k x n product and remembers the fastest for that shape class (powers of two
 * of m*n and of k, and whether K and N are multiples of 4): in the context, and in a cache file
 * keyed by the adapter (vendor, device, driver, backend): $KF_CACHE_DIR/matmul-tiles.txt, else
 * $XDG_CACHE_HOME/kfuse/..., else
 * ~/.cache/kfuse/.... Plans compiled afterwards (kf_graph_compile) use the tuned tiles for
 * matmuls of that class, in this and later processes; untuned classes use built-in choices
 * measured on an H200. A cache that cannot be written is not an error (the context keeps it). */
typedef struct kf_matmul_tuning {
    uint32_t bm, bn, bk, tm, tn; /* the chosen tile: bm x bn per workgroup, tm x tn per lane */
    uint32_t stages;             /* 2: double-buffered workgroup tiles, else 1 */
    uint32_t raster;             /* > 1: tiles in groups of this many tile rows (the built-in's) */
    uint32_t edge;               /* 1: ragged shapes on the edge path (the built-in's) */
    double best_ms;              /* its median time */
    double default_ms;           /* the built-in choice's median time, for comparison */
    uint32_t candidates;         /* configurations timed */
    bool saved;                  /* written to the cache file */
} kf_matmul_tuning;

KF_API kf_status kf_matmul_tune(kf_context *ctx, uint32_t m, uint32_t k, uint32_t n,
                                kf_matmul_tuning *out);

/* Runs the forward kernel now: out must have the op's output shape. */
KF_API kf_status kf_op_run_forward(kf_context *ctx, const kf_operator *op, const kf_op_params *p,
                                   const kf_gpu_tensor *const *in, kf_gpu_tensor *out);

typedef struct kf_verify_result {
    double max_rel_error;
    double tolerance;
    bool passed;
    char message[256]; /* what failed, when it did */
} kf_verify_result;

typedef struct kf_verify_case {
    const kf_operator *op;
    kf_op_params params;
    kf_shape shapes[4]; /* one per input */
    kf_dtype dtype;
    bool backward; /* false: forward; true: kernel_backward vs spec_backward for every input */
    uint64_t seed;
} kf_verify_case;

/* The seeds' verify_consistency, for real: fresh random inputs from the seed (rounded to f16 for
 * f16, so the spec sees what the kernel reads), outputs poisoned with NaN and followed by a
 * poisoned guard band, the GPU kernel against the spec, every element compared. Errors are
 * relative to max(|expected|, 1% of the expected tensor's rms) (docs/operators.md). Returns
 * KF_OK when it passed, KF_ERROR_MISMATCH when it ran and failed (out->message names the element
 * and both values), another status when it could not run (out->message says why). */
KF_API kf_status kf_op_verify(kf_context *ctx, const kf_verify_case *c, kf_verify_result *out);
/* spec_backward against central finite differences of spec_forward, in float64, on the CPU (the
 * case's dtype is ignored): every element of small inputs, a sample of large ones, each within
 * the differences' own error bound plus a relative 1e-2. Returns as kf_op_verify. */
KF_API kf_status kf_op_check_gradient(const kf_verify_case *c, kf_verify_result *out);

/* ======================================================================================== */
/* Lazy graphs and fusion plans (src/fuse)                                                   */
/* ======================================================================================== */

/* Operators recorded on tensors without running. kf_graph_compile plans fusion groups (element-
 * wise chains, matmul epilogues, reduction tails, horizontal groups), kf_plan_run runs the plan
 * on new data as often as asked, kf_plan_verify proves it against the unfused CPU specs. */
typedef struct kf_graph kf_graph;
typedef struct kf_plan kf_plan;

typedef struct kf_node {
    uint32_t id; /* 0 is invalid */
} kf_node;

/* A graph records its first error like a kernel does; later calls return invalid nodes.
 * kf_graph_error: that error's message; if none, the last failed query's (kf_graph_input_info
 * or kf_graph_output_info past the end), which leaves the graph usable. */
KF_API kf_graph *kf_graph_create(void);
KF_API void kf_graph_destroy(kf_graph *g);
KF_API kf_status kf_graph_status(const kf_graph *g);
KF_API const char *kf_graph_error(const kf_graph *g);

KF_API kf_node kf_graph_input(kf_graph *g, const char *name, const kf_shape *shape, kf_dtype dtype);
/* A scalar constant, broadcast by element-wise operators. */
KF_API kf_node kf_graph_scalar(
    kf_graph *g,
    float
        value); /* A trainable parameter (the language's `param w: f32[64, 32]`): an f32 input that
                 * `kfuse train` (and kf_trainer) keeps on the device and updates; everywhere else
                 * (run, verify, explain) it is an input like any other. Its initial value, unless
                 * given (--init DIR), is `init` (NULL: the default) drawn by kf_param_init_fill. */
typedef enum kf_init_kind {
    KF_INIT_DEFAULT = 0, /* rank >= 2: uniform(1/sqrt(fan_in)), fan_in the product of every dim
                            but the last (w of matmul(x, w): its rows, PyTorch Linear's
                            in_features); rank 0 and 1 (biases): zeros */
    KF_INIT_ZEROS,
    KF_INIT_UNIFORM /* uniform in [-bound, bound) (PyTorch's Linear bias: 1/sqrt(in_features)) */
} kf_init_kind;
typedef struct kf_param_init {
    kf_init_kind kind;
    float bound; /* KF_INIT_UNIFORM: > 0 */
} kf_param_init;
KF_API kf_node kf_graph_param(kf_graph *g, const char *name, const kf_shape *shape,
                              const kf_param_init *init);
/* Whether input `index` (kf_graph_input_info's numbering) is a param; *init (optional) receives
 * its initialiser. */
KF_API bool kf_graph_input_is_param(const kf_graph *g, uint32_t index, kf_param_init *init);
/* Fills t with the initial value `init` gives a parameter of t's shape: uniform draws from
 * kf_tensor_fill_random(t, seed + index, -bound, bound), index being the parameter's position
 * among the graph's params (0 for the first declared), so each parameter has its own stream. */
KF_API kf_status kf_param_init_fill(const kf_param_init *init, uint64_t seed, uint32_t index,
                                    kf_tensor *t);

/* Any registered operator (kf_op_find) on nodes; params may be NULL. */
KF_API kf_node kf_graph_op(kf_graph *g, const char *op, const kf_node *inputs, uint32_t count,
                           const kf_op_params *params);

/* A named or positional argument of kf_graph_call after its tensors. name NULL: a positional
 * number. Otherwise by name: a parameter of the op (kf_op_param_info: alpha, eps, exact, ...)
 * set to `number`, or, when tensor.id is not 0, one of the op's tensor inputs by its name
 * (layernorm(x, bias=b): an optional input without the ones before it). */
typedef struct kf_graph_arg {
    const char *name;
    double number;
    kf_node tensor;
    /* Not NULL: a list of list_count numbers for a list parameter (reshape(x, shape=[2, -1]);
     * positional like a number), instead of `number`. */
    const int32_t *list;
    uint32_t list_count;
} kf_graph_arg;
/* An operator call as the graph language writes it: tensors first (the op's inputs in order,
 * kf_op_input_info), then numbers and named arguments. A positional number becomes a scalar
 * operand where an element-wise op takes one more tensor (add(x, 1)), else the op's next
 * parameter in its described order (leaky_relu(x, 0.1), affine(x, 2, 1), rmsnorm(x, w, 1e-6)).
 * Every parameter given is validated (kf_op_param_set's rules) and marked given; an unknown
 * name, a parameter given twice or a number the op does not take is KF_ERROR_INVALID_ARGUMENT
 * naming the op and the argument. */
KF_API kf_node kf_graph_call(kf_graph *g, const char *op, const kf_node *tensors,
                             uint32_t tensor_count, const kf_graph_arg *numbers,
                             uint32_t number_count);

KF_API kf_node kf_graph_matmul(kf_graph *g, kf_node a, kf_node b);
KF_API kf_node kf_graph_add(kf_graph *g, kf_node a, kf_node b);
KF_API kf_node kf_graph_mul(kf_graph *g, kf_node a, kf_node b);
KF_API kf_node kf_graph_unary(kf_graph *g, const char *op, kf_node x); /* relu, gelu, exp, ... */

/* Marks a node as an output under a name (a node may be output under several names). */
KF_API kf_status kf_graph_output(kf_graph *g, const char *name, kf_node node);
/* Reverse-mode autodiff (docs/training.md): appends to g the nodes that compute the gradient of
 * `loss` with respect to each of the `count` nodes wrt[i] (inputs or intermediate values), and
 * writes those gradient nodes to grads_out[i] (shaped as wrt[i]; zeros where the loss does not
 * depend on it). loss must be a rank-0 tensor (sum(sum(x)), mean(...), cross_entropy(...)).
 * Gradients of a value read twice are summed; an input an element-wise op broadcast gets its
 * gradient summed back to its shape. The gradient nodes are ordinary operator nodes (backward
 * operators such as gelu_grad, or mul, matmul with transposes, ...): mark them as outputs, then
 * compile, explain, run and verify g as any graph. Fails with the graph's error set (and every
 * grads_out[i] invalid): KF_ERROR_SHAPE for a loss that is not rank 0, KF_ERROR_INVALID_ARGUMENT
 * for a wrt that is a constant, an i32 tensor or not a node of g, KF_ERROR_UNSUPPORTED naming an
 * operator on the path from wrt to loss that has no gradient (a backward operator: no second
 * derivatives). */
KF_API kf_status kf_graph_grad(kf_graph *g, kf_node loss, const kf_node *wrt, uint32_t count,
                               kf_node *grads_out);
/* The graph written in the graph language (parseable by kf_spec_parse): for bug reports and
 * reproducing a failing case. Caller frees with kf_free. */
KF_API char *kf_graph_format(const kf_graph *g);
KF_API kf_shape kf_graph_shape(const kf_graph *g, kf_node node);
KF_API kf_dtype kf_graph_dtype(const kf_graph *g, kf_node node);
KF_API uint32_t kf_graph_input_count(const kf_graph *g);
KF_API uint32_t kf_graph_output_count(const kf_graph *g);
/* Name, shape and dtype of input / output i. */
KF_API kf_status kf_graph_input_info(const kf_graph *g, uint32_t i, const char **name,
                                     kf_shape *shape, kf_dtype *dtype);
KF_API kf_status kf_graph_output_info(const kf_graph *g, uint32_t i, const char **name,
                                      kf_shape *shape, kf_dtype *dtype);

typedef enum kf_activation_policy {
    KF_ACTIVATIONS_AUTO = 0,  /* save or recompute, by bytes */
    KF_ACTIVATIONS_SAVE,      /* always save (a second output of the forward group) */
    KF_ACTIVATIONS_RECOMPUTE, /* recompute where every reader can (else save) */
    KF_ACTIVATIONS_SPLIT      /* neither: the value ends its group (the planner before issue 13) */
} kf_activation_policy;

typedef struct kf_compile_options {
    bool no_fuse; /* one dispatch per operator (the baseline fusion is compared against) */
    /* The storage bindings one fused kernel may use. 0: the device's
     * maxStorageBuffersPerShaderStage. A lower value splits groups sooner, as a device with that
     * limit would (a test of small devices on a large one); a higher one is the device's. Every
     * operator needs its inputs plus one: a value below what some operator of the graph needs is
     * KF_ERROR_INVALID_ARGUMENT naming it. */
    uint32_t max_storage_buffers;
    /* Skip running each dispatch once at compile (for a plan only explained or printed). By
     * default kf_graph_compile does, so that a driver that compiles at the first dispatch
     * (lavapipe) has done so before the first kf_plan_run; with no_prime that run pays. */
    bool no_prime;
    /* What backward reads from a fused forward group (the pre-activation of matmul |> add |>
     * gelu, which gelu's gradient reads): written by the group's store phase as a second output
     * (cuBLASLt's GELU_AUX), or recomputed by each kernel that reads it from the group's own
     * reads. 0 (KF_ACTIVATIONS_AUTO): whichever moves fewer bytes (docs/training.md states the
     * cost model); kf_plan_explain says which was chosen and why. */
    kf_activation_policy activations;
} kf_compile_options;

/* Plans and compiles the graph for ctx. The plan copies what it needs from g. Every pipeline
 * of the plan is created here, all requested together (CreateComputePipelineAsync, where the
 * implementation has it and KF_PIPELINE_ASYNC is not "off"), so the first run creates none. A
 * kernel whose pipeline fails is KF_ERROR_COMPILE, the message listing each failing one by its
 * group and kernel name. */
KF_API kf_status kf_graph_compile(kf_context *ctx, const kf_graph *g,
                                  const kf_compile_options *opts, kf_plan **out);
KF_API void kf_plan_destroy(kf_plan *p);

typedef struct kf_plan_summary {
    uint32_t groups; /* fusion groups = dispatches of one run */
    uint32_t dispatches;
    uint32_t unfused_dispatches; /* one per operator */
    uint64_t bytes;              /* bytes read + written by the plan's kernels (compulsory) */
    uint64_t unfused_bytes;      /* the same for one kernel per operator */
} kf_plan_summary;

KF_API kf_status kf_plan_summary_get(const kf_plan *p, kf_plan_summary *out);
/* The plan in words: each group, its rule, its ops, its bytes; with_wgsl adds each group's
 * WGSL. Caller frees with kf_free. */
KF_API char *kf_plan_explain(const kf_plan *p, bool with_wgsl);
/* One dispatch of the plan in a line, for per-dispatch tables (kfuse_bench_gpt): what
 * kf_plan_explain says of it. index is 0-based (explain numbers from 1). */
typedef struct kf_plan_dispatch_info {
    char label[256]; /* "rule: op |> op -> result" (a horizontal group: its members, "; ") */
    char root[32];   /* the root operator ("matmul", "attention", "rmsnorm_grad"); "" for an
                      * element-wise group, "save" for an activation-save copy */
    bool matmul;     /* the root is a dense product (KF_OP_CLASS_MATMUL), epilogue included */
    uint64_t bytes;  /* compulsory bytes read and written */
    uint32_t grid[3];
} kf_plan_dispatch_info;
/* KF_ERROR_INVALID_ARGUMENT for an index past the plan's dispatches. */
KF_API kf_status kf_plan_dispatch_info_get(const kf_plan *p, uint32_t index,
                                           kf_plan_dispatch_info *out);

/* Inputs by name (shapes must match the graph's: the message names both). */
KF_API kf_status kf_plan_set_input(kf_plan *p, const char *name, const kf_tensor *value);
/* Runs every group once (one submission) and waits. */
KF_API kf_status kf_plan_run(kf_plan *p);
/* Times `repeat` runs (0 means 10) of the whole plan. */
KF_API kf_status kf_plan_time(kf_plan *p, uint32_t repeat, kf_timing *out);
/* Downloads output `name` into out (shape checked). KF_ERROR_INVALID_ARGUMENT before the plan
 * has run (kf_plan_run, kf_plan_time or kf_plan_verify): there is no result yet. */
KF_API kf_status kf_plan_get_output(const kf_plan *p, const char *name, kf_tensor *out);

/* GPU tensors in and out of plans (docs/runtime.md, "Binding tensors to plans").
 *
 * kf_plan_bind_input makes the plan read input `name` straight from t, and kf_plan_bind_output
 * makes it write output `name` straight into t: nothing is copied, each run uses the tensor's
 * current contents. Shape and dtype must equal the graph's (KF_ERROR_SHAPE / KF_ERROR_TYPE, the
 * message names both). One tensor may be bound to any number of plans (shared weights) and to
 * several inputs of one plan. t NULL unbinds: the plan gets a zeroed buffer of its own again
 * (an input must then be set or bound before the next run). While bound, kf_plan_set_input on
 * that input fails (upload into the tensor instead); kf_plan_get_output still reads the output.
 *
 * In place: an output bound to the tensor of one of the plan's inputs (w = w - lr * dw) is
 * accepted only where every element is read before it is written, by the invocation that writes
 * it: the output's group is element-wise, reads the input at the index it writes (same shape,
 * no broadcast), and no later group reads the input; the group is then recompiled (at bind
 * time) with one read-write binding. Anything else is KF_ERROR_INVALID_ARGUMENT, the message
 * naming the output, the input and the group that breaks the rule. Two outputs may not share a
 * tensor.
 *
 * Ownership: a plan keeps the buffer of every tensor bound to it alive. kf_gpu_tensor_destroy
 * on a bound tensor is safe: the tensor's handle is gone, its memory is freed when the last plan
 * unbinds it or is destroyed (until then the plan keeps reading and writing it). Bindings are
 * checked when made; a plan never rebinds on its own. */
KF_API kf_status kf_plan_bind_input(kf_plan *p, const char *name, kf_gpu_tensor *t);
KF_API kf_status kf_plan_bind_output(kf_plan *p, const char *name, kf_gpu_tensor *t);
/* The same for a region of t: the input or output is the graph's shape, stored from byte_offset
 * of t's buffer on (several parameters packed in one tensor, an output written into part of
 * one). t's dtype must be the graph's; t's shape only bounds the region: one that does not fit
 * in t is KF_ERROR_INVALID_ARGUMENT naming both sizes. byte_offset must be a multiple of
 * kf_adapter_info.min_storage_buffer_offset_alignment (the message names it). Regions of one
 * tensor that overlap count as one tensor for the rules above (an output's region is an
 * in-place update of an input's only when it is exactly that region). */
KF_API kf_status kf_plan_bind_input_at(kf_plan *p, const char *name, kf_gpu_tensor *t,
                                       uint64_t byte_offset);
KF_API kf_status kf_plan_bind_output_at(kf_plan *p, const char *name, kf_gpu_tensor *t,
                                        uint64_t byte_offset);

/* Runs plans[0], plans[1], ... in order as one compute pass and one submission, then waits once:
 * no host synchronisation between them, each plan sees the writes of those before it (chain
 * them through tensors bound to one's output and the next one's input). All plans belong to one
 * context; every input of each must be set or bound. */
KF_API kf_status kf_plan_run_sequence(kf_plan *const *plans, uint32_t count);
/* kf_plan_time for a sequence: times `repeat` submissions of the whole sequence (0 means 10). */
KF_API kf_status kf_plan_time_sequence(kf_plan *const *plans, uint32_t count, uint32_t repeat,
                                       kf_timing *out);
/* The plan's dispatches, to record into a caller's own batch (kf_context_run / kf_context_time
 * with others' dispatches). Valid until the plan is destroyed or a binding changes. Fails like
 * kf_plan_run when an input is neither set nor bound. */
KF_API kf_status kf_plan_dispatches(const kf_plan *p, const kf_dispatch **out, uint32_t *count);

#define KF_PLAN_MAX_REPORTED 16
/* One fused group checked on its own (kf_plan_report.groups): the GPU's values of what it reads
 * (graph inputs and the results of earlier groups, downloaded) through the CPU specs of its own
 * operators, against what it wrote. */
typedef struct kf_plan_group_report {
    uint32_t dispatch;    /* 1-based, as kf_plan_explain numbers the plan's dispatches */
    char rule[32];        /* the rule that made it: "element-wise", "matmul", "reduction", ... */
    char ops[192];        /* its operators in evaluation order: "matmul |> add |> gelu" */
    char result[64];      /* the value it writes: an output's name, else "op_<node>" */
    double max_rel_error; /* measured as for outputs */
    double tolerance;     /* from its operators' documented errors (docs/fusion.md) */
    bool passed;
    uint64_t element;    /* the first element outside tolerance (row-major index) */
    float got, expected; /* that element as the GPU wrote it and as the specs compute it */
} kf_plan_group_report;

typedef struct kf_plan_report {
    uint32_t output_count; /* entries in outputs[]: min(total_outputs, KF_PLAN_MAX_REPORTED) */
    struct {
        char name[64];
        double max_rel_error;
        double tolerance;
        bool passed;
        uint32_t index;              /* the output's number in the graph (kf_graph_output_info) */
    } outputs[KF_PLAN_MAX_REPORTED]; /* failed outputs first, then the others in graph order */
    bool passed;                     /* every output and every group within its tolerance */
    uint32_t total_outputs;          /* the plan's outputs: every element of each is compared */
    uint32_t failed_outputs;         /* how many of them failed, listed or not */
    uint32_t group_count;            /* entries in groups[]: min(total_groups, MAX_REPORTED) */
    kf_plan_group_report groups[KF_PLAN_MAX_REPORTED]; /* failed first, then by dispatch */
    uint32_t total_groups;  /* groups checked (each member of a horizontal dispatch counts) */
    uint32_t failed_groups; /* how many of them failed, listed or not */
    /* The smallest failing group as a graph of its own (kf_graph_format: the language), its
     * inputs named as the graph names them or "op_<node>" for intermediate values; "" when every
     * group passed (or the text did not fit). */
    char failing_graph[2048];
} kf_plan_report;

/* Fills the inputs with fresh random data from seed, runs the plan (outputs poisoned first) and
 * runs the unfused composition of CPU specs in float64-accumulating loops. Then checks, first,
 * every fused group on its own: the specs of the group's own operators on the values the GPU
 * read (its inputs downloaded), every element, against a tolerance derived from those
 * operators' documented errors (docs/fusion.md); second, every element of every output against
 * the whole unfused composition. KF_ERROR_MISMATCH when any group or output is outside its
 * tolerance; the report names it (group: its rule, operators, first element off). */
KF_API kf_status kf_plan_verify(kf_plan *p, uint64_t seed, kf_plan_report *out);

/* kf_plan_verify with chosen inputs: values[i] for the input named names[i]; inputs not named
 * are drawn at random from seed. */
KF_API kf_status kf_plan_check(kf_plan *p, const char *const *names, const kf_tensor *const *values,
                               uint32_t count, uint64_t seed, kf_plan_report *out);
/* Random data for input `name` as verification draws it: the range its consumers accept (log:
 * positive), whole class indices for labels, rounded to f16 for f16 inputs. Caller destroys. */
KF_API kf_status kf_plan_random_input(const kf_plan *p, const char *name, uint64_t seed,
                                      kf_tensor **out);

/* The seeds' fused activation saves: copies src[i] -> dst[i] for any number of pairs of any sizes
 * in as few dispatches as the device's storage-buffer limit allows (one for the seeds' attention
 * and FFN saves). Sizes in bytes, multiples of 4. *dispatches (optional) receives the count. */
typedef struct kf_copy_pair {
    kf_buffer *src;
    kf_buffer *dst;
    uint64_t size;
} kf_copy_pair;
KF_API kf_status kf_save_activations(kf_context *ctx, const kf_copy_pair *pairs, uint32_t count,
                                     uint32_t *dispatches);
/* The dispatches kf_save_activations would run, recorded but not run (to time them with
 * kf_context_time, or batch them with other work). `bindings` (2 * count entries, the caller's)
 * holds the buffers the dispatches point to and must outlive them; out needs room for count
 * dispatches; *dispatches receives how many were recorded. */
KF_API kf_status kf_save_activations_record(kf_context *ctx, const kf_copy_pair *pairs,
                                            uint32_t count, kf_buffer **bindings, kf_dispatch *out,
                                            uint32_t *dispatches);

/* ======================================================================================== */
/* Optimizers on the GPU (src/ops/optimizer.c; docs/training.md)                             */
/* ======================================================================================== */

/* PyTorch's update rules, applied in place to parameters that live on the device:
 *   SGD:   d = g + weight_decay * p; with momentum, buf = momentum * buf + d and d = buf (or
 *          d + momentum * buf with nesterov); p -= lr * d                      (torch.optim.SGD)
 *   AdamW: p *= 1 - lr * weight_decay; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
 *          p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)        (torch.optim.AdamW)
 * Every parameter is updated by one dispatch (a multi-tensor apply over one linear index space
 * covering parameters of any sizes), split into more only where the device's storage-buffer
 * limit forces it (2 bindings per parameter and one for the state: a 4-tensor model fits a
 * limit of 10). The state (momentum buffer; m and v; the bias corrections 1 - b^t, kept by the
 * recurrence c_t = (1 - b) + b c_{t-1}, which has no cancellation in f32) lives on the device:
 * a step moves no bytes between host and device. */
typedef enum kf_optimizer_kind { KF_OPTIMIZER_SGD = 0, KF_OPTIMIZER_ADAMW } kf_optimizer_kind;

typedef struct kf_optimizer_desc {
    kf_optimizer_kind kind;
    float lr;           /* > 0 (0: 0.01 for SGD, 0.001 for AdamW) */
    float momentum;     /* SGD: 0 (none) .. < 1 */
    bool nesterov;      /* SGD: Nesterov momentum (needs momentum > 0) */
    float weight_decay; /* SGD: L2 added to the gradient; AdamW: decoupled. 0: none (torch's
                           AdamW defaults to 0.01: pass it) */
    float beta1;        /* AdamW: 0 means 0.9 */
    float beta2;        /* AdamW: 0 means 0.999 */
    float eps;          /* AdamW: 0 means 1e-8 */
} kf_optimizer_desc;

typedef struct kf_optimizer kf_optimizer;

/* An optimizer for `count` f32 parameters, params[i] updated from grads[i] (same shape). It
 * keeps the tensors' buffers alive (as plans do) and allocates its state, zeroed, on the device.
 * KF_ERROR_INVALID_ARGUMENT (message on ctx) for a bad desc, a NULL tensor, a shape mismatch, a
 * parameter given twice or a gradient that is a parameter; KF_ERROR_TYPE for a non-f32 tensor. */
KF_API kf_status kf_optimizer_create(kf_context *ctx, const kf_optimizer_desc *desc,
                                     kf_gpu_tensor *const *params, kf_gpu_tensor *const *grads,
                                     uint32_t count, kf_optimizer **out);
KF_API void kf_optimizer_destroy(kf_optimizer *o);
/* Applies one update now (its own submission) and waits. */
KF_API kf_status kf_optimizer_step(kf_optimizer *o);
/* The dispatches of the next update, for a caller's batch (after the dispatches that write the
 * gradients, e.g. kf_plan_dispatches, in one kf_context_run): the step counts as taken, so run
 * them exactly once, before asking for the next. Valid until the next call on o. */
KF_API kf_status kf_optimizer_record(kf_optimizer *o, const kf_dispatch **out, uint32_t *count);
/* Updates taken so far, and dispatches per update. */
KF_API uint64_t kf_optimizer_steps(const kf_optimizer *o);
KF_API uint32_t kf_optimizer_dispatch_count(const kf_optimizer *o);
/* Downloads state `which` of parameter `index` into out (its shape): SGD 0 the momentum buffer;
 * AdamW 0 m, 1 v. KF_ERROR_INVALID_ARGUMENT for a state the optimizer does not keep. */
KF_API kf_status kf_optimizer_state_get(const kf_optimizer *o, uint32_t index, uint32_t which,
                                        kf_tensor *out);
/* The CPU specification: update number `step` (1 for the first) of one parameter in float64,
 * each result rounded once to f32; state0/state1 as kf_optimizer_state_get (NULL where the
 * rule keeps none). The bias corrections are computed as 1 - pow(b, step). */
KF_API kf_status kf_optimizer_spec_step(const kf_optimizer_desc *desc, uint64_t step,
                                        kf_tensor *param, const kf_tensor *grad, kf_tensor *state0,
                                        kf_tensor *state1);
/* Verification: parameters of these shapes with random values, random prior state, `steps`
 * updates each with fresh random gradients (seeded), on the GPU and with the spec; after every
 * step every element of every parameter and state is compared (count at most 64), relative to
 * max(|spec|, the tensor's rms) (m and momentum are sums that cancel; f32 rounds each term),
 * and a NaN guard band after each parameter and gradient must be left untouched.
 * Returns as kf_op_verify (out->message names the tensor, element and both values). */
KF_API kf_status kf_optimizer_verify(kf_context *ctx, const kf_optimizer_desc *desc,
                                     const kf_shape *shapes, uint32_t count, uint32_t steps,
                                     uint64_t seed, kf_verify_result *out);

/* ======================================================================================== */
/* Training a graph (src/fuse/train.c; docs/training.md)                                     */
/* ======================================================================================== */

/* A trainer holds a graph's params on the device (initialised by kf_param_init_fill from
 * desc->seed), the plan of its loss and gradients (kf_graph_grad over every param), and an
 * optimizer updating the params in place. A step uploads the batch (the graph's other inputs)
 * and runs forward, backward, update and a one-invocation kernel appending the loss to a
 * history on the device, as one submission; nothing else moves. kf_trainer_losses downloads the
 * recorded losses. `kfuse train` is built on it. */
typedef struct kf_trainer_desc {
    kf_optimizer_desc optimizer;
    const char *loss;                 /* the output to minimise, rank 0; NULL: "loss" */
    uint64_t seed;                    /* of the params' initialisers */
    bool no_fuse;                     /* one dispatch per operator (for comparison) */
    kf_activation_policy activations; /* kf_compile_options.activations of the training plan */
} kf_trainer_desc;
typedef struct kf_trainer kf_trainer;

/* KF_ERROR_INVALID_ARGUMENT (message on ctx) when g has no such output or no param; the
 * statuses of kf_graph_grad (a loss that is not rank 0: KF_ERROR_SHAPE), kf_graph_compile and
 * kf_optimizer_create otherwise. g is not changed; the trainer keeps what it needs. */
KF_API kf_status kf_trainer_create(kf_context *ctx, const kf_graph *g, const kf_trainer_desc *desc,
                                   kf_trainer **out);
KF_API void kf_trainer_destroy(kf_trainer *t);
KF_API uint32_t kf_trainer_param_count(const kf_trainer *t);
KF_API const char *kf_trainer_param_name(const kf_trainer *t, uint32_t index); /* NULL past it */
/* A param's value, host <-> device (shape checked: KF_ERROR_SHAPE naming both). */
KF_API kf_status kf_trainer_set_param(kf_trainer *t, const char *name, const kf_tensor *value);
KF_API kf_status kf_trainer_get_param(const kf_trainer *t, const char *name, kf_tensor *out);
/* One training step on a batch: batch[i] is the graph's input names[i] (every non-param input
 * must have been given once; inputs not given keep their last values). */
KF_API kf_status kf_trainer_step(kf_trainer *t, const char *const *names,
                                 const kf_tensor *const *batch, uint32_t count);
/* The loss of every step taken so far, in order (downloads those not yet downloaded: one
 * download for any number of steps). *losses is valid until the next call on t. */
KF_API kf_status kf_trainer_losses(kf_trainer *t, const float **losses, uint64_t *count);
/* The forward pass alone on a batch, params unchanged: *loss (optional) as the graph computes
 * it, and *correct (optional): of the batch's first `rows` rows (the rest may be padding), how
 * many have the argmax of the logits equal to their label, for a loss cross_entropy(logits,
 * labels) whose labels are an input (KF_ERROR_INVALID_ARGUMENT otherwise). */
KF_API kf_status kf_trainer_evaluate(kf_trainer *t, const char *const *names,
                                     const kf_tensor *const *batch, uint32_t count, uint32_t rows,
                                     float *loss, uint32_t *correct);
/* The training plan (for kf_plan_summary_get / kf_plan_explain), and the dispatches of a step
 * (the plan's, the optimizer's and the loss record). */
KF_API const kf_plan *kf_trainer_plan(const kf_trainer *t);
/* The trainer's optimizer (kf_optimizer_state_get; kf_optimizer_record for a benchmark timing
 * a step's dispatches itself: every record is an update taken). */
KF_API kf_optimizer *kf_trainer_optimizer(const kf_trainer *t);
KF_API uint32_t kf_trainer_dispatches_per_step(const kf_trainer *t);
/* Whether kf_trainer_evaluate can count correct answers (the loss is cross_entropy). */
KF_API bool kf_trainer_has_accuracy(const kf_trainer *t);

/* ======================================================================================== */
/* The graph language (src/spec; docs/graph-language.md)                                     */
/* ======================================================================================== */

/*     x: f32[64,128]
 *     w: f32[128,256]
 *     b: f32[256]
 *     y = matmul(x, w) |> add(b) |> gelu
 *     out y
 */
typedef struct kf_spec_error {
    uint32_t line;   /* 1-based; 0 when not a parse error */
    uint32_t column; /* 1-based */
    char message[256];
} kf_spec_error;

/* Parses `length` bytes of text (no NUL needed) into a new graph the caller destroys. On failure
 * *out is NULL and err (may be NULL) holds the first error: KF_ERROR_PARSE for the language,
 * or the graph's status (KF_ERROR_SHAPE, KF_ERROR_TYPE, ...) placed at the call that caused it.
 * Never crashes on malformed input. */
KF_API kf_status kf_spec_parse(const char *text, size_t length, kf_graph **out, kf_spec_error *err);
/* Reads and parses a file (KF_ERROR_IO with the path and the reason when unreadable, line 0). */
KF_API kf_status kf_spec_parse_file(const char *path, kf_graph **out, kf_spec_error *err);

/* ======================================================================================== */
/* .npy files (numpy's format; f32, f16 and i32, C order; src/util/npy.c)                   */
/* ======================================================================================== */

/* Reads a .npy file (format versions 1.0 to 3.0) into a new tensor the caller destroys: dtypes
 * '<f4', '<f2' (converted to f32 exactly) and '<i4' (integers within +-2^24, held as floats);
 * C order; rank 0 to 4; no empty dimension. A missing, damaged or unsupported file is
 * KF_ERROR_IO with msg (may be NULL) naming the path and what is wrong; *out is then NULL. */
KF_API kf_status kf_npy_read(const char *path, kf_tensor **out, char *msg, size_t msg_size);
/* Writes t as a .npy file byte-identical to numpy's np.save: dtype F32 '<f4', F16 '<f2' (round
 * to nearest even; overflow gives infinity), I32 '<i4' (values must be whole numbers in range,
 * else KF_ERROR_INVALID_ARGUMENT). KF_ERROR_IO when the file cannot be written (errno says why:
 * EISDIR when path is a directory, ENAMETOOLONG, EACCES...). The file appears whole or not at
 * all: it is written and synced under a temporary name in path's folder, then renamed over path,
 * so a previous file there stays intact until the new one is complete, even if the process is
 * killed; on failure the temporary file is removed. */
KF_API kf_status kf_npy_write(const char *path, const kf_tensor *t, kf_dtype dtype);

#ifdef __cplusplus
}
#endif

#endif /* KFUSE_H */
