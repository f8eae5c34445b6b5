/* kf_context: the WebGPU instance, adapter, device and queue, and how WebGPU's asynchronous
 * results and errors become kf_status values and messages. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <dlfcn.h>
#include <pthread.h>

#include "runtime/runtime.h"

/* How long kfuse waits for one GPU operation before it gives up and reports it. */
#define KF__WAIT_SLICE_NS 1000000000ull
#define KF__WAIT_LIMIT_S 600

#define KF__NO_ADAPTER_HELP                                                                        \
    "On Debian 12, Dawn's Vulkan backend needs Mesa >= 23 (lavapipe for CPUs): "                   \
    "apt-get install -t bookworm-backports mesa-vulkan-drivers libvulkan1 (scripts/setup.sh "      \
    "does this); with an NVIDIA GPU, install its driver with the Vulkan ICD. With an older Mesa, " \
    "try KF_BACKEND=gles and EGL_PLATFORM=surfaceless."

/* Dawn refuses experimental features (subgroup matrices, timestamps inside passes) without
 * allow_unsafe_apis, and by default rounds timestamps to 100 us, which would blur kernel times.
 * Its Vulkan backend offers subgroup matrices (cooperative matrices) only with
 * use_vulkan_memory_model. Integer range analysis lets the robustness pass leave out the clamps
 * of indices it proves in bounds, where the pass runs. disable_robustness (last, so it can be
 * left out) drops the bounds clamps Tint adds to every storage and workgroup access: the default,
 * since kfuse's kernels are proved in bounds or guarded by their emitter (src/ir/bounds.c). */
static const char *const g_enabled_toggles[] = {"allow_unsafe_apis", "use_vulkan_memory_model",
                                                "enable_integer_range_analysis_in_robustness",
                                                "disable_robustness"};
static const char *const g_disabled_toggles[] = {"timestamp_quantization"};

static bool env_on(const char *name);

/* Robustness off unless desc->checked_access or $KF_CHECKED (anything but "" or "0") asks for it
 * back: every kernel kfuse emits is proved in bounds or guarded (docs/runtime.md). */
static bool want_unchecked(const kf_context_desc *desc) {
    return !(desc->checked_access || env_on("KF_CHECKED"));
}

kf_status kf__context_fail(kf_context *ctx, kf_status status, const char *fmt, ...) {
    if (ctx) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->error, sizeof ctx->error, fmt, ap);
        va_end(ap);
    }
    return status;
}

void kf__context_set_error(kf_context *ctx, kf_status status, const char *fmt, ...) {
    (void)status;
    if (ctx) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->error, sizeof ctx->error, fmt, ap);
        va_end(ap);
    }
}

void kf__wg_string_copy(char *dst, size_t dst_size, wg_string src) {
    if (dst_size == 0) {
        return;
    }
    size_t n = 0;
    if (src.data) {
        n = src.length == WG_STRLEN ? strlen(src.data) : src.length;
    }
    if (n >= dst_size) {
        n = dst_size - 1;
    }
    if (n) {
        memcpy(dst, src.data, n);
    }
    dst[n] = '\0';
}

kf_status kf__context_check(kf_context *ctx) {
    if (ctx->released) {
        return kf__context_fail(
            ctx, KF_ERROR_DEVICE_LOST,
            "the context of this object was destroyed (kf_context_destroy), and its device with "
            "it; destroy the object, and make new ones from a new context");
    }
    if (atomic_load(&ctx->lost)) {
        return kf__context_fail(
            ctx, KF_ERROR_DEVICE_LOST,
            "the WebGPU device was lost: %s. Destroy this context and create a new one.",
            ctx->lost_message);
    }
    if (atomic_exchange(&ctx->uncaptured, false)) {
        return kf__context_fail(ctx, KF_ERROR_VALIDATION, "an earlier WebGPU operation failed: %s",
                                ctx->uncaptured_message);
    }
    return KF_OK;
}

kf_status kf__context_wait(kf_context *ctx, wg_future future, const char *what) {
    wg_future_wait wait = {future, 0};
    for (int waited_s = 0; waited_s < KF__WAIT_LIMIT_S; waited_s++) {
        uint32_t status = ctx->api.instance_wait_any(ctx->instance, 1, &wait, KF__WAIT_SLICE_NS);
        if (status == WG_WAIT_SUCCESS && wait.completed) {
            return KF_OK;
        }
        if (status != WG_WAIT_TIMED_OUT && status != WG_WAIT_SUCCESS) {
            return kf__context_fail(ctx, KF_ERROR_INTERNAL,
                                    "%s: waiting for WebGPU failed (status %u)", what, status);
        }
        if (atomic_load(&ctx->lost)) {
            return kf__context_check(ctx);
        }
    }
    return kf__context_fail(ctx, KF_ERROR_INTERNAL, "%s: the GPU did not finish within %d s", what,
                            KF__WAIT_LIMIT_S);
}

/* --- memory callbacks write into --- */

typedef struct kf__callback_block {
    struct kf__callback_block *next;
    max_align_t data[];
} kf__callback_block;

void *kf__callback_alloc(size_t size) {
    kf__callback_block *b = calloc(1, sizeof *b + size);
    return b ? (void *)b->data : NULL;
}

void kf__callback_release(kf_context *ctx, void *data, bool completed) {
    if (!data) {
        return;
    }
    kf__callback_block *b =
        (kf__callback_block *)((char *)data - offsetof(kf__callback_block, data));
    if (completed) {
        free(b);
    } else {
        b->next = ctx->orphans;
        ctx->orphans = b;
    }
}

/* --- error scopes --- */

typedef struct scope_result {
    bool done;
    uint32_t status;
    uint32_t type;
    char message[KF__ERROR_SIZE];
} scope_result;

static void on_scope_popped(uint32_t status, uint32_t type, wg_string message, void *user1,
                            void *user2) {
    (void)user2;
    scope_result *r = user1;
    r->done = true;
    r->status = status;
    r->type = type;
    kf__wg_string_copy(r->message, sizeof r->message, message);
}

void kf__context_scope_push(kf_context *ctx) {
    ctx->api.device_push_error_scope(ctx->device, WG_FILTER_INTERNAL);
    ctx->api.device_push_error_scope(ctx->device, WG_FILTER_OUT_OF_MEMORY);
    ctx->api.device_push_error_scope(ctx->device, WG_FILTER_VALIDATION);
}

kf_status kf__context_scope_pop(kf_context *ctx, kf_status validation_status, const char *what) {
    /* Popped in reverse order of kf__context_scope_push: validation, out of memory, internal. */
    static const kf_status statuses[3] = {0, KF_ERROR_OUT_OF_MEMORY, KF_ERROR_INTERNAL};
    scope_result *results = kf__callback_alloc(3 * sizeof *results);
    if (!results) {
        return kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY, "%s: out of host memory", what);
    }
    kf_status wait_status = KF_OK;
    for (int i = 0; i < 3; i++) {
        wg_pop_error_scope_callback_info info = {NULL, WG_CALLBACK_WAIT_ANY_ONLY, on_scope_popped,
                                                 &results[i], NULL};
        wg_future future = ctx->api.device_pop_error_scope(ctx->device, info);
        kf_status st = kf__context_wait(ctx, future, what);
        if (st != KF_OK && wait_status == KF_OK) {
            wait_status = st;
        }
    }
    kf_status result = wait_status;
    for (int i = 0; i < 3 && result == KF_OK; i++) {
        if (!results[i].done || results[i].status != WG_REQUEST_SUCCESS) {
            /* Popping fails only when the device is gone. */
            result = kf__context_check(ctx);
            if (result == KF_OK) {
                result = kf__context_fail(ctx, KF_ERROR_INTERNAL,
                                          "%s: reading WebGPU's error scope failed", what);
            }
        } else if (results[i].type != WG_ERROR_NONE) {
            kf_status st = i == 0 ? validation_status : statuses[i];
            if (results[i].type == WG_ERROR_OUT_OF_MEMORY) {
                st = KF_ERROR_OUT_OF_MEMORY;
            }
            result = kf__context_fail(ctx, st, "%s: %s", what, results[i].message);
        }
    }
    kf__callback_release(ctx, results, wait_status == KF_OK);
    if (result == KF_OK) {
        result = kf__context_check(ctx);
    }
    return result;
}

/* --- submission --- */

typedef struct work_done {
    bool done;
    uint32_t status;
} work_done;

static void on_work_done(uint32_t status, wg_string message, void *user1, void *user2) {
    (void)message;
    (void)user2;
    work_done *w = user1;
    w->done = true;
    w->status = status;
}

kf_status kf__context_submit(kf_context *ctx, wg_command_buffer commands, const char *what) {
    kf__context_scope_push(ctx);
    ctx->api.queue_submit(ctx->queue, 1, &commands);
    ctx->stats.submissions++;
    return kf__context_scope_pop(ctx, KF_ERROR_VALIDATION, what);
}

kf_status kf__context_submit_wait(kf_context *ctx, wg_command_buffer commands, const char *what) {
    kf_status st = kf__context_submit(ctx, commands, what);
    if (st != KF_OK) {
        return st;
    }
    work_done *done = kf__callback_alloc(sizeof *done);
    if (!done) {
        return kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY, "%s: out of host memory", what);
    }
    wg_work_done_callback_info info = {NULL, WG_CALLBACK_WAIT_ANY_ONLY, on_work_done, done, NULL};
    st = kf__context_wait(ctx, ctx->api.queue_on_submitted_work_done(ctx->queue, info), what);
    uint32_t status = done->status;
    kf__callback_release(ctx, done, st == KF_OK);
    if (st != KF_OK) {
        return st;
    }
    if (status != WG_REQUEST_SUCCESS) {
        st = kf__context_check(ctx);
        return st != KF_OK ? st
                           : kf__context_fail(ctx, KF_ERROR_INTERNAL,
                                              "%s: the queue reported failure (%u)", what, status);
    }
    return kf__context_check(ctx);
}

/* --- device callbacks --- */

static void on_device_lost(const wg_device *device, uint32_t reason, wg_string message, void *user1,
                           void *user2) {
    (void)device;
    (void)user2;
    kf_context *ctx = user1;
    /* A device that failed to be created is reported by the request itself. */
    if (atomic_load(&ctx->destroying) || reason == WG_LOST_DESTROYED ||
        reason == WG_LOST_CALLBACK_CANCELLED || reason == WG_LOST_FAILED_CREATION) {
        return;
    }
    char text[KF__ERROR_SIZE];
    kf__wg_string_copy(text, sizeof text, message);
    snprintf(ctx->lost_message, sizeof ctx->lost_message, "%s",
             text[0] ? text : "no reason given by the driver");
    atomic_store(&ctx->lost, true);
}

static void on_uncaptured_error(const wg_device *device, uint32_t type, wg_string message,
                                void *user1, void *user2) {
    (void)device;
    (void)type;
    (void)user2;
    kf_context *ctx = user1;
    if (atomic_load(&ctx->uncaptured)) {
        return; /* keep the first until it is reported */
    }
    kf__wg_string_copy(ctx->uncaptured_message, sizeof ctx->uncaptured_message, message);
    atomic_store(&ctx->uncaptured, true);
}

/* --- creation --- */

typedef struct adapter_request {
    bool done;
    uint32_t status;
    wg_adapter adapter;
    char message[1024];
} adapter_request;

static void on_adapter(uint32_t status, wg_adapter adapter, wg_string message, void *user1,
                       void *user2) {
    (void)user2;
    adapter_request *r = user1;
    r->done = true;
    r->status = status;
    r->adapter = adapter;
    kf__wg_string_copy(r->message, sizeof r->message, message);
}

typedef struct device_request {
    bool done;
    uint32_t status;
    wg_device device;
    char message[KF__ERROR_SIZE];
} device_request;

static void on_device(uint32_t status, wg_device device, wg_string message, void *user1,
                      void *user2) {
    (void)user2;
    device_request *r = user1;
    r->done = true;
    r->status = status;
    r->device = device;
    kf__wg_string_copy(r->message, sizeof r->message, message);
}

static const char *backend_name(uint32_t backend) {
    switch (backend) {
    case WG_BACKEND_NULL:
        return "null";
    case WG_BACKEND_WEBGPU:
        return "webgpu";
    case WG_BACKEND_D3D11:
        return "d3d11";
    case WG_BACKEND_D3D12:
        return "d3d12";
    case WG_BACKEND_METAL:
        return "metal";
    case WG_BACKEND_VULKAN:
        return "vulkan";
    case WG_BACKEND_OPENGL:
        return "opengl";
    case WG_BACKEND_OPENGLES:
        return "opengles";
    default:
        return "unknown";
    }
}

static const char *adapter_type_name(uint32_t type) {
    switch (type) {
    case WG_ADAPTER_DISCRETE_GPU:
        return "discrete GPU";
    case WG_ADAPTER_INTEGRATED_GPU:
        return "integrated GPU";
    case WG_ADAPTER_CPU:
        return "CPU";
    default:
        return "unknown";
    }
}

/* Dawn's OpenGL ES backend reports no adapter type; Mesa's and Google's software renderers are
 * known by name (the renderer string), so a CPU is still called one and sizes chosen by type
 * (kfuse demo, bench) fit it. A GL adapter on real hardware stays "unknown". */
static const char *infer_adapter_type(const char *type, const char *device, const char *driver) {
    static const char *const software[] = {"llvmpipe", "softpipe", "lavapipe", "SwiftShader"};
    if (strcmp(type, "unknown") != 0) {
        return type;
    }
    for (size_t i = 0; i < sizeof software / sizeof software[0]; i++) {
        if (strstr(device, software[i]) || strstr(driver, software[i])) {
            return "CPU";
        }
    }
    return type;
}

static uint32_t wg_backend_of(kf_backend backend) {
    switch (backend) {
    case KF_BACKEND_VULKAN:
        return WG_BACKEND_VULKAN;
    case KF_BACKEND_GLES:
        return WG_BACKEND_OPENGLES;
    case KF_BACKEND_OPENGL:
        return WG_BACKEND_OPENGL;
    case KF_BACKEND_METAL:
        return WG_BACKEND_METAL;
    case KF_BACKEND_D3D12:
        return WG_BACKEND_D3D12;
    case KF_BACKEND_NULL:
        return WG_BACKEND_NULL;
    default:
        return WG_BACKEND_UNDEFINED;
    }
}

/* desc->backend, else $KF_BACKEND, else default. An unknown name is the user's to fix. */
static kf_status pick_backend(kf_context *ctx, kf_backend asked, kf_backend *out) {
    static const struct {
        const char *name;
        kf_backend backend;
    } names[] = {
        {"vulkan", KF_BACKEND_VULKAN},   {"vk", KF_BACKEND_VULKAN},   {"gles", KF_BACKEND_GLES},
        {"opengles", KF_BACKEND_GLES},   {"gl", KF_BACKEND_OPENGL},   {"opengl", KF_BACKEND_OPENGL},
        {"metal", KF_BACKEND_METAL},     {"d3d12", KF_BACKEND_D3D12}, {"null", KF_BACKEND_NULL},
        {"default", KF_BACKEND_DEFAULT}, {"", KF_BACKEND_DEFAULT},
    };
    if ((int)asked < (int)KF_BACKEND_DEFAULT || (int)asked > (int)KF_BACKEND_NULL) {
        return kf__context_fail(ctx, KF_ERROR_INVALID_ARGUMENT,
                                "kf_context_desc.backend %d is not a kf_backend", (int)asked);
    }
    *out = asked;
    const char *env = getenv("KF_BACKEND");
    if (asked != KF_BACKEND_DEFAULT || !env) {
        return KF_OK;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!strcasecmp(env, names[i].name)) {
            *out = names[i].backend;
            return KF_OK;
        }
    }
    return kf__context_fail(
        ctx, KF_ERROR_INVALID_ARGUMENT,
        "KF_BACKEND=%s is not a backend kfuse knows; use one of vulkan, gles, opengl, "
        "metal, d3d12, null (or leave it unset for the best adapter)",
        env);
}

static uint32_t adapter_backend(kf_context *ctx, wg_adapter adapter) {
    wg_adapter_info ai;
    memset(&ai, 0, sizeof ai);
    if (ctx->api.adapter_get_info(adapter, &ai) != WG_STATUS_SUCCESS) {
        return WG_BACKEND_UNDEFINED;
    }
    uint32_t backend = ai.backend_type;
    ctx->api.adapter_info_free_members(ai);
    return backend;
}

static bool adapter_has(const wg_supported_features *features, uint32_t feature) {
    for (size_t i = 0; i < features->count; i++) {
        if (features->features[i] == feature) {
            return true;
        }
    }
    return false;
}

/* One requestAdapter; *out stays NULL when there is none. */
static kf_status try_adapter(kf_context *ctx, wg_dawn_toggles *toggles, uint32_t feature_level,
                             uint32_t backend, wg_adapter *out, char *message, size_t size) {
    *out = NULL;
    wg_request_adapter_options options = {0};
    options.next = toggles ? &toggles->chain : NULL;
    options.feature_level = feature_level;
    options.power_preference = WG_POWER_HIGH_PERFORMANCE;
    options.backend_type = backend;
    adapter_request *r = kf__callback_alloc(sizeof *r);
    if (!r) {
        return kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    wg_request_adapter_callback_info info = {NULL, WG_CALLBACK_WAIT_ANY_ONLY, on_adapter, r, NULL};
    kf_status st = kf__context_wait(
        ctx, ctx->api.instance_request_adapter(ctx->instance, &options, info), "requestAdapter");
    if (st == KF_OK && r->status == WG_REQUEST_SUCCESS && r->adapter) {
        *out = r->adapter;
    } else if (st == KF_OK && r->message[0] && !message[0]) {
        snprintf(message, size, "%s", r->message);
    }
    kf__callback_release(ctx, r, st == KF_OK);
    return st;
}

static kf_status request_adapter(kf_context *ctx, kf_backend backend, wg_dawn_toggles *toggles) {
    char message[1024] = "";
    kf_status st;
    if (backend != KF_BACKEND_DEFAULT) {
        /* Dawn offers OpenGL adapters only at the compatibility feature level. */
        bool gl = backend == KF_BACKEND_GLES || backend == KF_BACKEND_OPENGL;
        st = try_adapter(ctx, toggles, gl ? WG_FEATURE_LEVEL_COMPATIBILITY : WG_FEATURE_LEVEL_CORE,
                         wg_backend_of(backend), &ctx->adapter, message, sizeof message);
    } else {
        /* The best real adapter: Dawn's first choice at the core level, unless that is its Null
         * backend (which computes nothing); then OpenGL ES, which older Mesa drivers can offer
         * when their Vulkan driver is refused. Null only when asked for by name. */
        st = try_adapter(ctx, toggles, WG_FEATURE_LEVEL_CORE, WG_BACKEND_UNDEFINED, &ctx->adapter,
                         message, sizeof message);
        if (st == KF_OK && ctx->adapter && adapter_backend(ctx, ctx->adapter) == WG_BACKEND_NULL) {
            ctx->api.adapter_release(ctx->adapter);
            ctx->adapter = NULL;
        }
        if (st == KF_OK && !ctx->adapter) {
            st = try_adapter(ctx, toggles, WG_FEATURE_LEVEL_COMPATIBILITY, WG_BACKEND_OPENGLES,
                             &ctx->adapter, message, sizeof message);
        }
    }
    if (st != KF_OK) {
        return st;
    }
    if (!ctx->adapter) {
        bool named = backend != KF_BACKEND_DEFAULT;
        return kf__context_fail(
            ctx, KF_ERROR_NO_ADAPTER, "%s found no %s%sadapter%s%s. %s", ctx->library_path,
            named ? backend_name(wg_backend_of(backend)) : "", named ? " " : "usable GPU or CPU ",
            message[0] ? ": " : "", message, KF__NO_ADAPTER_HELP);
    }
    return KF_OK;
}

static kf_status request_device(kf_context *ctx, const kf_context_desc *desc,
                                wg_dawn_toggles *toggles) {
    wg_supported_features features = {0, NULL};
    ctx->api.adapter_get_features(ctx->adapter, &features);
    uint32_t wanted[4];
    size_t wanted_count = 0;
    /* Feature numbers are those of the pinned Dawn; other libraries number them differently,
     * so kfuse asks them for none rather than for the wrong ones. */
    const kf__wgpu_impl *impl = ctx->impl;
    if (!desc->disable_f16 && adapter_has(&features, impl->feature_shader_f16)) {
        wanted[wanted_count++] = impl->feature_shader_f16;
    }
    if (!desc->disable_subgroups && adapter_has(&features, impl->feature_subgroups)) {
        wanted[wanted_count++] = impl->feature_subgroups;
    }
    if (!desc->disable_timestamps && adapter_has(&features, impl->feature_timestamp_query)) {
        wanted[wanted_count++] = impl->feature_timestamp_query;
    }
    if (!desc->disable_subgroups && adapter_has(&features, impl->feature_subgroup_matrix)) {
        wanted[wanted_count++] = impl->feature_subgroup_matrix;
    }
    ctx->api.supported_features_free_members(features);

    /* The adapter's full limits, not WebGPU's conservative defaults. */
    wg_limits limits;
    memset(&limits, 0, sizeof limits);
    bool have_limits = impl->limits_size == sizeof limits &&
                       ctx->api.adapter_get_limits(ctx->adapter, &limits) == WG_STATUS_SUCCESS;
    limits.next = NULL;

    wg_device_desc dd;
    memset(&dd, 0, sizeof dd);
    dd.next = toggles ? &toggles->chain : NULL;
    dd.next = kf__disk_cache_chain(ctx, desc, dd.next);
    dd.label = (wg_string){"kfuse", WG_STRLEN};
    dd.required_features = wanted;
    dd.default_queue.label = (wg_string){"kfuse queue", WG_STRLEN};
    dd.device_lost = (wg_device_lost_callback_info){NULL, WG_CALLBACK_ALLOW_SPONTANEOUS,
                                                    on_device_lost, ctx, NULL};
    dd.uncaptured_error = (wg_uncaptured_error_callback_info){NULL, on_uncaptured_error, ctx, NULL};

    /* A driver may list a feature and still refuse it (experimental ones first): then ask for
     * less rather than fail, and let kf_adapter_info say what was granted. */
    bool matrix = wanted_count && wanted[wanted_count - 1] == impl->feature_subgroup_matrix;
    const struct {
        size_t features;
        bool limits;
    } attempts[4] = {{wanted_count, have_limits},
                     {wanted_count - (matrix ? 1 : 0), have_limits},
                     {0, have_limits},
                     {0, false}};
    device_request *r = kf__callback_alloc(sizeof *r);
    char *first_message = calloc(1, KF__ERROR_SIZE);
    if (!r || !first_message) {
        kf__callback_release(ctx, r, true);
        free(first_message);
        return kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    kf_status st = KF_ERROR_NO_DEVICE;
    for (int i = 0; i < 4 && !ctx->device; i++) {
        if (i > 0 && attempts[i].features == attempts[i - 1].features &&
            attempts[i].limits == attempts[i - 1].limits) {
            continue;
        }
        dd.required_feature_count = attempts[i].features;
        dd.required_limits = attempts[i].limits ? &limits : NULL;
        memset(r, 0, sizeof *r);
        wg_request_device_callback_info info = {NULL, WG_CALLBACK_WAIT_ANY_ONLY, on_device, r,
                                                NULL};
        st = kf__context_wait(ctx, ctx->api.adapter_request_device(ctx->adapter, &dd, info),
                              "requestDevice");
        if (st != KF_OK) {
            kf__callback_release(ctx, r, false);
            r = NULL;
            break;
        }
        if (r->status == WG_REQUEST_SUCCESS && r->device) {
            ctx->device = r->device;
        } else if (!first_message[0]) {
            snprintf(first_message, KF__ERROR_SIZE, "%s",
                     r->message[0] ? r->message : "no reason given");
        }
    }
    if (st == KF_OK && !ctx->device) {
        st = kf__context_fail(ctx, KF_ERROR_NO_DEVICE, "the adapter refused to create a device: %s",
                              first_message);
    }
    kf__callback_release(ctx, r, true);
    free(first_message);
    return st;
}

/* Compiles a tiny shader: whether the device really accepts an `enable` directive. */
static bool accepts_wgsl(kf_context *ctx, const char *code) {
    wg_shader_source_wgsl source = {{NULL, WG_STYPE_SHADER_SOURCE_WGSL}, {code, WG_STRLEN}};
    wg_shader_module_desc md = {&source.chain, {"kfuse feature probe", WG_STRLEN}};
    kf__context_scope_push(ctx);
    wg_shader_module module = ctx->api.device_create_shader_module(ctx->device, &md);
    kf_status st = kf__context_scope_pop(ctx, KF_ERROR_COMPILE, "feature probe");
    if (module) {
        ctx->api.shader_module_release(module);
    }
    ctx->error[0] = '\0';
    return st == KF_OK;
}

static void fill_info(kf_context *ctx) {
    kf_adapter_info *info = &ctx->info;
    wg_adapter_info ai;
    memset(&ai, 0, sizeof ai);
    if (ctx->api.adapter_get_info(ctx->adapter, &ai) == WG_STATUS_SUCCESS) {
        kf__wg_string_copy(info->vendor, sizeof info->vendor, ai.vendor);
        kf__wg_string_copy(info->architecture, sizeof info->architecture, ai.architecture);
        kf__wg_string_copy(info->device, sizeof info->device, ai.device);
        kf__wg_string_copy(info->description, sizeof info->description, ai.description);
        snprintf(info->backend, sizeof info->backend, "%s", backend_name(ai.backend_type));
        snprintf(info->adapter_type, sizeof info->adapter_type, "%s",
                 infer_adapter_type(adapter_type_name(ai.adapter_type), info->device,
                                    info->description));
        info->vendor_id = ai.vendor_id;
        info->device_id = ai.device_id;
        info->subgroup_min_size = ai.subgroup_min_size;
        info->subgroup_max_size = ai.subgroup_max_size;
        ctx->api.adapter_info_free_members(ai);
    }
    snprintf(info->library, sizeof info->library, "%s", ctx->library_path);

    wg_device dev = ctx->device;
    const kf__wgpu_impl *impl = ctx->impl;
    info->has_f16 = ctx->api.device_has_feature(dev, impl->feature_shader_f16) &&
                    accepts_wgsl(ctx, "enable f16;\n"
                                      "@compute @workgroup_size(1) fn main() {\n"
                                      "    var h: f16 = 1.5h;\n    h = h * 2.0h;\n}\n");
    info->has_subgroups = ctx->api.device_has_feature(dev, impl->feature_subgroups) &&
                          accepts_wgsl(ctx, "enable subgroups;\n"
                                            "@compute @workgroup_size(64)\n"
                                            "fn main(@builtin(subgroup_size) n: u32) {\n"
                                            "    _ = subgroupAdd(n);\n}\n");
    info->has_timestamps = ctx->api.device_has_feature(dev, impl->feature_timestamp_query);
    info->has_subgroup_matrix = ctx->api.device_has_feature(dev, impl->feature_subgroup_matrix) &&
                                accepts_wgsl(ctx, "enable chromium_experimental_subgroup_matrix;\n"
                                                  "@compute @workgroup_size(64) fn main() {}\n");
    info->unchecked_access = ctx->unchecked;
    info->vendor_masked = ctx->vendor_masked;
    if (ctx->vendor_masked) {
        info->vendor_id = ctx->true_vendor_id;
        snprintf(info->vendor, sizeof info->vendor, "nvidia");
    }
    if (!info->has_subgroups) {
        info->subgroup_min_size = info->subgroup_max_size = 0;
    }

    const wg_limits *l = &ctx->limits;
    info->max_buffer_size = l->max_buffer_size;
    info->max_storage_buffer_binding_size = l->max_storage_buffer_binding_size;
    info->min_storage_buffer_offset_alignment = l->min_storage_buffer_offset_alignment;
    info->max_storage_buffers_per_stage = l->max_storage_buffers_per_shader_stage;
    info->max_compute_workgroup_storage_size = l->max_compute_workgroup_storage_size;
    info->max_compute_invocations_per_workgroup = l->max_compute_invocations_per_workgroup;
    info->max_compute_workgroup_size[0] = l->max_compute_workgroup_size_x;
    info->max_compute_workgroup_size[1] = l->max_compute_workgroup_size_y;
    info->max_compute_workgroup_size[2] = l->max_compute_workgroup_size_z;
    info->max_compute_workgroups_per_dimension = l->max_compute_workgroups_per_dimension;
}

/* --- the vendor-mask layer (tools/vkmask) on NVIDIA --- */

#define KF__VENDOR_NVIDIA 0x10deu
#define KF__VKMASK_LAYER "VK_LAYER_KFUSE_vendor_mask"

static bool env_on(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

/* The Vulkan loader reads its layer settings from the environment when Dawn creates its
 * VkInstance (at requestAdapter), so the layer is switched on by setting them around that call
 * and putting them back after. The environment is the process's: kfuse contexts created at the
 * same time on other threads wait for this lock around their own instance and adapter, so none
 * sees another's settings (other code of the process reading the environment then might). */
static pthread_mutex_t g_layer_env_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct saved_var {
    const char *name;
    char *value; /* NULL: was unset */
} saved_var;

static void save_and_set(saved_var *v, const char *name, const char *value) {
    const char *old = getenv(name);
    v->name = name;
    v->value = old ? strdup(old) : NULL;
    setenv(name, value, 1);
}

static void restore(saved_var *v) {
    if (v->value) {
        setenv(v->name, v->value, 1);
        free(v->value);
    } else {
        unsetenv(v->name);
    }
}

/* A path list with `first` ahead of the current value of `name` (if any). */
static void prepend(char *out, size_t size, const char *first, const char *name, char sep) {
    const char *old = getenv(name);
    if (old && *old) {
        snprintf(out, size, "%s%c%s", first, sep, old);
    } else {
        snprintf(out, size, "%s", first);
    }
}

/* Where the adapter is NVIDIA's Vulkan driver without shader-f16 and f16 is wanted: makes a new
 * instance and adapter with the vendor-mask layer on (see kf_context_desc.disable_vendor_mask).
 * Called with g_layer_env_lock held.
 * Not finding the layer, or the mask not bringing f16, is no error: the context goes on without
 * f16, as it would have. */
static kf_status maybe_vendor_mask(kf_context *ctx, const kf_context_desc *desc, kf_backend backend,
                                   wg_dawn_toggles *chain, const wg_instance_desc *id) {
    if (desc->disable_f16 || desc->disable_vendor_mask || env_on("KF_NO_VKMASK")) {
        return KF_OK;
    }
    wg_adapter_info ai;
    memset(&ai, 0, sizeof ai);
    if (ctx->api.adapter_get_info(ctx->adapter, &ai) != WG_STATUS_SUCCESS) {
        return KF_OK;
    }
    bool nvidia_vulkan = ai.backend_type == WG_BACKEND_VULKAN && ai.vendor_id == KF__VENDOR_NVIDIA;
    ctx->api.adapter_info_free_members(ai);
    wg_supported_features features = {0, NULL};
    ctx->api.adapter_get_features(ctx->adapter, &features);
    bool f16 = adapter_has(&features, ctx->impl->feature_shader_f16);
    ctx->api.supported_features_free_members(features);
    char dir[1024];
    if (!nvidia_vulkan || f16 || !kf__vkmask_dir(dir, sizeof dir)) {
        return KF_OK;
    }
    char layer_path[2200], add_path[2200], layers[1200];
    saved_var vars[4];
    int saved = 0;
    prepend(add_path, sizeof add_path, dir, "VK_ADD_LAYER_PATH", ':');
    save_and_set(&vars[saved++], "VK_ADD_LAYER_PATH", add_path);
    if (getenv("VK_LAYER_PATH")) { /* it overrides the search paths, VK_ADD_LAYER_PATH too */
        prepend(layer_path, sizeof layer_path, dir, "VK_LAYER_PATH", ':');
        save_and_set(&vars[saved++], "VK_LAYER_PATH", layer_path);
    }
    prepend(layers, sizeof layers, KF__VKMASK_LAYER, "VK_INSTANCE_LAYERS", ':');
    save_and_set(&vars[saved++], "VK_INSTANCE_LAYERS", layers);
    save_and_set(&vars[saved++], "KF_VKMASK_VENDOR", "0xffff");

    ctx->api.adapter_release(ctx->adapter);
    ctx->adapter = NULL;
    ctx->api.instance_release(ctx->instance);
    ctx->instance = ctx->api.create_instance(id);
    kf_status st = ctx->instance ? request_adapter(ctx, backend, chain)
                                 : kf__context_fail(ctx, KF_ERROR_NO_ADAPTER,
                                                    "%s could not create a WebGPU instance",
                                                    ctx->library_path);
    for (int i = saved - 1; i >= 0; i--) {
        restore(&vars[i]);
    }
    if (st == KF_OK && ctx->adapter) {
        /* on only if Dawn now sees another vendor (a loader that ignored the layer: still NVIDIA)
         */
        memset(&ai, 0, sizeof ai);
        if (ctx->api.adapter_get_info(ctx->adapter, &ai) == WG_STATUS_SUCCESS) {
            ctx->vendor_masked = ai.vendor_id != KF__VENDOR_NVIDIA;
            ctx->api.adapter_info_free_members(ai);
        }
        ctx->true_vendor_id = KF__VENDOR_NVIDIA;
    }
    return st;
}

static kf_status create(kf_context *ctx, const kf_context_desc *desc) {
    kf__wgpu_loaded *loaded = calloc(1, sizeof *loaded);
    if (!loaded) {
        return kf__context_fail(ctx, KF_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    kf_status st = kf__wgpu_load(desc->library_path, loaded, ctx->error, sizeof ctx->error);
    if (st == KF_OK) {
        ctx->api = loaded->api;
        ctx->library = loaded->library;
        ctx->impl = loaded->impl;
        snprintf(ctx->library_path, sizeof ctx->library_path, "%s", loaded->path);
        snprintf(ctx->info.library_source, sizeof ctx->info.library_source, "%s", loaded->why);
    }
    free(loaded);
    if (st != KF_OK) {
        return st;
    }
    kf_backend backend;
    st = pick_backend(ctx, desc->backend, &backend);
    if (st != KF_OK) {
        return st;
    }

    bool toggles_chain = ctx->impl->stype_toggles != 0;
    ctx->unchecked = toggles_chain && want_unchecked(desc); /* a Dawn toggle */
    /* disable_robustness is the last of the enabled toggles: left out unless asked for. */
    size_t enabled = sizeof g_enabled_toggles / sizeof g_enabled_toggles[0] - !ctx->unchecked;
    wg_dawn_toggles toggles = {
        {NULL, ctx->impl->stype_toggles}, enabled, g_enabled_toggles, 1, g_disabled_toggles};
    wg_dawn_toggles *chain = toggles_chain ? &toggles : NULL;
    wg_instance_desc id;
    memset(&id, 0, sizeof id);
    id.next = chain ? &chain->chain : NULL;
    id.capabilities.timed_wait_any_enable = ctx->impl->timed_wait_any;
    id.capabilities.timed_wait_any_max_count = 1;
    pthread_mutex_lock(&g_layer_env_lock);
    ctx->instance = ctx->api.create_instance(&id);
    if (!ctx->instance) {
        pthread_mutex_unlock(&g_layer_env_lock);
        return kf__context_fail(
            ctx, KF_ERROR_NO_ADAPTER,
            "%s could not create a WebGPU instance (is it a webgpu.h library of the "
            "version scripts/setup.sh pins?)",
            ctx->library_path);
    }
    st = request_adapter(ctx, backend, chain);
    if (st == KF_OK) {
        st = maybe_vendor_mask(ctx, desc, backend, chain, &id);
    }
    pthread_mutex_unlock(&g_layer_env_lock);
    if (st != KF_OK) {
        return st;
    }
    st = request_device(ctx, desc, chain);
    if (st != KF_OK) {
        return st;
    }
    ctx->queue = ctx->api.device_get_queue(ctx->device);
    if (ctx->api.device_get_limits(ctx->device, &ctx->limits) != WG_STATUS_SUCCESS) {
        return kf__context_fail(ctx, KF_ERROR_NO_DEVICE, "the device did not report its limits");
    }
    fill_info(ctx);
    snprintf(ctx->info.pipeline_cache, sizeof ctx->info.pipeline_cache, "%s",
             kf__disk_cache_dir(ctx));
    return kf__context_check(ctx);
}

/* The bounds check: desc->check_bounds or $KF_CHECK_BOUNDS (anything but "" or "0"); the work
 * per dispatch, $KF_CHECK_BOUNDS_WORK (statements x invocations; 0: every workgroup). */
static void check_bounds_setup(kf_context *ctx, const kf_context_desc *desc) {
    ctx->check_bounds = desc->check_bounds || env_on("KF_CHECK_BOUNDS");
    ctx->check_budget = KF__CHECK_BUDGET;
    const char *work = getenv("KF_CHECK_BOUNDS_WORK");
    char *end = NULL;
    unsigned long long v = work && *work ? strtoull(work, &end, 10) : 0;
    if (work && *work && end && !*end) {
        ctx->check_budget = v;
    }
}

kf_status kf_context_create(const kf_context_desc *desc, kf_context **out) {
    kf_context_desc defaults = {0};
    if (!desc) {
        desc = &defaults;
    }
    if (desc->error_out && desc->error_out_size) {
        desc->error_out[0] = '\0';
    }
    if (!out) {
        if (desc->error_out && desc->error_out_size) {
            snprintf(desc->error_out, desc->error_out_size, "kf_context_create: out is NULL");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    *out = NULL;
    kf_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        if (desc->error_out && desc->error_out_size) {
            snprintf(desc->error_out, desc->error_out_size, "out of host memory");
        }
        return KF_ERROR_OUT_OF_MEMORY;
    }
    atomic_init(&ctx->lost, false);
    atomic_init(&ctx->destroying, false);
    atomic_init(&ctx->uncaptured, false);
    check_bounds_setup(ctx, desc);
    kf_status st = create(ctx, desc);
    if (st != KF_OK) {
        if (desc->error_out && desc->error_out_size) {
            snprintf(desc->error_out, desc->error_out_size, "%s", ctx->error);
        }
        kf_context_destroy(ctx);
        return st;
    }
    ctx->error[0] = '\0';
    *out = ctx;
    return KF_OK;
}

/* What is left of a context once its WebGPU objects are gone: the struct and the host memory
 * its pipelines' keys and names take. */
static void context_free(kf_context *ctx) {
    kf__pipeline_cache_destroy(ctx);
    free(ctx);
}

void kf__context_hold(kf_context *ctx) {
    if (ctx) {
        ctx->holders++;
    }
}

void kf__context_let_go(kf_context *ctx) {
    if (ctx && --ctx->holders == 0 && ctx->released) {
        context_free(ctx);
    }
}

bool kf__context_released(const kf_context *ctx) {
    return ctx->released;
}

void kf_context_destroy(kf_context *ctx) {
    if (!ctx || ctx->released) {
        return;
    }
    atomic_store(&ctx->destroying, true);
    kf__context_extensions_release(ctx);
    if (ctx->device) {
        /* Objects still alive lose their WebGPU objects now, while the device exists; their
         * structs stay until their destroy calls (see struct kf_context). */
        kf__context_buffers_release(ctx);
        kf__pipeline_cache_release(ctx);
        kf__context_timing_destroy(ctx);
        kf__context_staging_destroy(ctx);
    }
    if (ctx->queue) {
        ctx->api.queue_release(ctx->queue);
    }
    if (ctx->device) {
        /* The lost callback (reason: destroyed) runs here, while ctx is still alive. */
        ctx->api.device_destroy(ctx->device);
        ctx->api.device_release(ctx->device);
    }
    if (ctx->instance) {
        ctx->api.instance_process_events(ctx->instance);
    }
    if (ctx->adapter) {
        ctx->api.adapter_release(ctx->adapter);
    }
    if (ctx->instance) {
        ctx->api.instance_release(ctx->instance);
    }
    kf__disk_cache_destroy(ctx);
    /* WebGPU has called every callback it owed by now. */
    while (ctx->orphans) {
        kf__callback_block *next = ctx->orphans->next;
        free(ctx->orphans);
        ctx->orphans = next;
    }
    if (ctx->library) {
        dlclose(ctx->library);
    }
    ctx->queue = NULL;
    ctx->device = NULL;
    ctx->adapter = NULL;
    ctx->instance = NULL;
    ctx->library = NULL;
    ctx->released = true;
    if (ctx->holders == 0) {
        context_free(ctx);
    }
}

const char *kf_context_last_error(const kf_context *ctx) {
    return ctx ? ctx->error : "kf_context_last_error: the context is NULL";
}

kf_status kf_context_adapter_info(const kf_context *ctx, kf_adapter_info *out) {
    if (!ctx || !out) {
        /* the context's message is the caller's even through a const handle (errors.md) */
        return kf__context_fail((kf_context *)ctx, KF_ERROR_INVALID_ARGUMENT,
                                "kf_context_adapter_info: out is NULL");
    }
    *out = ctx->info;
    return KF_OK;
}

kf_status kf_context_stats_get(const kf_context *ctx, kf_context_stats *out) {
    if (!ctx || !out) {
        return kf__context_fail((kf_context *)ctx, KF_ERROR_INVALID_ARGUMENT,
                                "kf_context_stats_get: out is NULL");
    }
    *out = ctx->stats;
    kf__disk_cache_stats(ctx, out);
    return KF_OK;
}

kf_status kf__context_force_loss(kf_context *ctx) {
    if (!ctx || !ctx->api.device_force_loss) {
        return KF_ERROR_UNSUPPORTED;
    }
    ctx->api.device_force_loss(ctx->device, WG_LOST_UNKNOWN,
                               (wg_string){"forced by a kfuse test", WG_STRLEN});
    ctx->api.instance_process_events(ctx->instance);
    return atomic_load(&ctx->lost) ? KF_OK : KF_ERROR_INTERNAL;
}

kf_status kf__context_fake_oom(kf_context *ctx) {
    if (!ctx || !ctx->impl->stype_fake_buffer_oom) {
        return KF_ERROR_UNSUPPORTED;
    }
    ctx->fake_oom = true;
    return KF_OK;
}

void kf__context_set_kernel_transform(kf_context *ctx, kf__kernel_transform_fn fn, void *user) {
    if (ctx) {
        ctx->kernel_transform = fn;
        ctx->kernel_transform_user = user;
    }
}

kf_kernel *kf__context_transform_kernel(kf_context *ctx, const kf_kernel *k) {
    return ctx && ctx->kernel_transform ? ctx->kernel_transform(ctx->kernel_transform_user, k)
                                        : NULL;
}

void kf__context_forget_pipelines(kf_context *ctx) {
    if (ctx) {
        kf__pipeline_cache_destroy(ctx);
    }
}
