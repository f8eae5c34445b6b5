/* kfuse's own description of the part of the webgpu.h C ABI it calls.
 *
 * No package ships webgpu.h, and the library is loaded at run time (see loader.c), so kfuse
 * declares the handful of types, structs and entry points it needs here, under its own names
 * (wg_*). Layouts and enum values follow the ABI of the Dawn build that scripts/setup.sh pins
 * (npm bun-webgpu-linux-x64@0.1.7). Where that build differs from older published headers, the
 * value here was measured against the binary itself (docs/runtime.md has the method):
 *
 *   - feature numbers: shader-f16 0x0A, subgroups 0x11, timestamp-query 0x03,
 *     chromium-experimental-subgroup-matrix 0x50037 (older headers say 0x50038);
 *   - wg_limits ends with max_immediate_size (152 bytes; no per-stage storage fields);
 *   - wg_bind_group_layout_entry has binding_array_size after visibility;
 *   - the queue's work-done callback receives a message before the user pointers.
 *
 * Only plain C types appear here; nothing in this file is part of kfuse's public API.
 */
#ifndef KF_RUNTIME_WGPU_ABI_H
#define KF_RUNTIME_WGPU_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef uint32_t wg_bool;
typedef uint64_t wg_flags;

/* Opaque handles. */
typedef struct wg_instance_impl *wg_instance;
typedef struct wg_adapter_impl *wg_adapter;
typedef struct wg_device_impl *wg_device;
typedef struct wg_queue_impl *wg_queue;
typedef struct wg_buffer_impl *wg_buffer;
typedef struct wg_shader_module_impl *wg_shader_module;
typedef struct wg_bind_group_layout_impl *wg_bind_group_layout;
typedef struct wg_bind_group_impl *wg_bind_group;
typedef struct wg_pipeline_layout_impl *wg_pipeline_layout;
typedef struct wg_compute_pipeline_impl *wg_compute_pipeline;
typedef struct wg_command_encoder_impl *wg_command_encoder;
typedef struct wg_command_buffer_impl *wg_command_buffer;
typedef struct wg_compute_pass_impl *wg_compute_pass;
typedef struct wg_query_set_impl *wg_query_set;

/* Strings are (pointer, length); WG_STRLEN as length means NUL-terminated. */
#define WG_STRLEN SIZE_MAX
#define WG_WHOLE_SIZE UINT64_MAX
#define WG_WHOLE_MAP_SIZE SIZE_MAX
#define WG_QUERY_INDEX_NONE UINT32_MAX

typedef struct wg_string {
    const char *data;
    size_t length;
} wg_string;

/* Extension structs chain through `next`, tagged by `stype`. */
typedef struct wg_chain {
    struct wg_chain *next;
    uint32_t stype;
} wg_chain;

enum {
    WG_STYPE_SHADER_SOURCE_WGSL = 0x00000002,
    WG_STYPE_DAWN_TOGGLES = 0x0005000A,
    WG_STYPE_DAWN_FAKE_BUFFER_OOM = 0x00050040,         /* measured: Dawn names it when misplaced */
    WG_STYPE_DAWN_CACHE_DEVICE_DESCRIPTOR = 0x00050007, /* measured the same way */
};

typedef struct wg_future {
    uint64_t id;
} wg_future;

typedef struct wg_future_wait {
    wg_future future;
    wg_bool completed;
} wg_future_wait;

/* --- enums (only the values kfuse uses) --- */
/* WGPUStatus */
enum { WG_STATUS_SUCCESS = 1 };
/* WGPUWaitStatus */
enum { WG_WAIT_SUCCESS = 1, WG_WAIT_TIMED_OUT = 2, WG_WAIT_ERROR = 3 };
/* WGPUCallbackMode */
enum {
    WG_CALLBACK_WAIT_ANY_ONLY = 1,
    WG_CALLBACK_ALLOW_PROCESS_EVENTS = 2,
    WG_CALLBACK_ALLOW_SPONTANEOUS = 3
};
/* WGPURequestAdapterStatus, WGPURequestDeviceStatus, WGPUMapAsyncStatus, ... */
enum { WG_REQUEST_SUCCESS = 1 };
/* WGPUCreatePipelineAsyncStatus (measured: an entry point the module lacks gives 3) */
enum {
    WG_CREATE_PIPELINE_SUCCESS = 1,
    WG_CREATE_PIPELINE_CANCELLED = 2,
    WG_CREATE_PIPELINE_VALIDATION_ERROR = 3,
    WG_CREATE_PIPELINE_INTERNAL_ERROR = 4
};
/* WGPUBackendType */
enum {
    WG_BACKEND_UNDEFINED = 0,
    WG_BACKEND_NULL = 1,
    WG_BACKEND_WEBGPU = 2,
    WG_BACKEND_D3D11 = 3,
    WG_BACKEND_D3D12 = 4,
    WG_BACKEND_METAL = 5,
    WG_BACKEND_VULKAN = 6,
    WG_BACKEND_OPENGL = 7,
    WG_BACKEND_OPENGLES = 8
};
/* WGPUAdapterType */
enum {
    WG_ADAPTER_DISCRETE_GPU = 1,
    WG_ADAPTER_INTEGRATED_GPU = 2,
    WG_ADAPTER_CPU = 3,
    WG_ADAPTER_UNKNOWN = 4
};
/* WGPUFeatureLevel */
enum {
    WG_FEATURE_LEVEL_UNDEFINED = 0,
    WG_FEATURE_LEVEL_COMPATIBILITY = 1,
    WG_FEATURE_LEVEL_CORE = 2
};
/* WGPUPowerPreference */
enum { WG_POWER_HIGH_PERFORMANCE = 2 };
/* WGPUFeatureName, as numbered by the pinned Dawn (measured, see above) */
enum {
    WG_FEATURE_TIMESTAMP_QUERY = 0x00000003,
    WG_FEATURE_SHADER_F16 = 0x0000000A,
    WG_FEATURE_SUBGROUPS = 0x00000011,
    WG_FEATURE_SUBGROUP_MATRIX = 0x00050037
};
/* WGPUErrorFilter */
enum { WG_FILTER_VALIDATION = 1, WG_FILTER_OUT_OF_MEMORY = 2, WG_FILTER_INTERNAL = 3 };
/* WGPUErrorType */
enum {
    WG_ERROR_NONE = 1,
    WG_ERROR_VALIDATION = 2,
    WG_ERROR_OUT_OF_MEMORY = 3,
    WG_ERROR_INTERNAL = 4,
    WG_ERROR_UNKNOWN = 5
};
/* WGPUDeviceLostReason */
enum {
    WG_LOST_UNKNOWN = 1,
    WG_LOST_DESTROYED = 2,
    WG_LOST_CALLBACK_CANCELLED = 3,
    WG_LOST_FAILED_CREATION = 4
};
/* WGPUCompilationMessageType */
enum { WG_MESSAGE_ERROR = 1, WG_MESSAGE_WARNING = 2, WG_MESSAGE_INFO = 3 };
/* WGPUBufferBindingType */
enum { WG_BINDING_UNIFORM = 2, WG_BINDING_STORAGE = 3, WG_BINDING_READ_ONLY_STORAGE = 4 };
/* WGPUQueryType */
enum { WG_QUERY_TIMESTAMP = 2 };

/* WGPUBufferUsage, WGPUMapMode, WGPUShaderStage flags */
#define WG_USAGE_MAP_READ ((wg_flags)0x0001)
#define WG_USAGE_MAP_WRITE ((wg_flags)0x0002)
#define WG_USAGE_COPY_SRC ((wg_flags)0x0004)
#define WG_USAGE_COPY_DST ((wg_flags)0x0008)
#define WG_USAGE_UNIFORM ((wg_flags)0x0040)
#define WG_USAGE_STORAGE ((wg_flags)0x0080)
#define WG_USAGE_QUERY_RESOLVE ((wg_flags)0x0200)
#define WG_MAP_READ ((wg_flags)0x0001)
#define WG_STAGE_COMPUTE ((wg_flags)0x0004)

/* --- callbacks: each takes two user pointers; each *_callback_info says when it may run --- */
typedef void (*wg_request_adapter_fn)(uint32_t status, wg_adapter adapter, wg_string message,
                                      void *user1, void *user2);
typedef void (*wg_request_device_fn)(uint32_t status, wg_device device, wg_string message,
                                     void *user1, void *user2);
typedef void (*wg_device_lost_fn)(const wg_device *device, uint32_t reason, wg_string message,
                                  void *user1, void *user2);
typedef void (*wg_uncaptured_error_fn)(const wg_device *device, uint32_t type, wg_string message,
                                       void *user1, void *user2);
typedef void (*wg_pop_error_scope_fn)(uint32_t status, uint32_t type, wg_string message,
                                      void *user1, void *user2);
typedef void (*wg_map_fn)(uint32_t status, wg_string message, void *user1, void *user2);
/* This Dawn passes a message to the work-done callback (older headers do not; measured). */
typedef void (*wg_work_done_fn)(uint32_t status, wg_string message, void *user1, void *user2);
struct wg_compilation_info;
typedef void (*wg_compilation_info_fn)(uint32_t status, const struct wg_compilation_info *info,
                                       void *user1, void *user2);

/* The shape shared by every callback info that has a mode. */
#define WG_CALLBACK_INFO(name, fn_type)                                                            \
    typedef struct name {                                                                          \
        wg_chain *next;                                                                            \
        uint32_t mode;                                                                             \
        fn_type callback;                                                                          \
        void *user1;                                                                               \
        void *user2;                                                                               \
    } name
WG_CALLBACK_INFO(wg_request_adapter_callback_info, wg_request_adapter_fn);
WG_CALLBACK_INFO(wg_request_device_callback_info, wg_request_device_fn);
WG_CALLBACK_INFO(wg_device_lost_callback_info, wg_device_lost_fn);
WG_CALLBACK_INFO(wg_pop_error_scope_callback_info, wg_pop_error_scope_fn);
WG_CALLBACK_INFO(wg_map_callback_info, wg_map_fn);
WG_CALLBACK_INFO(wg_work_done_callback_info, wg_work_done_fn);
WG_CALLBACK_INFO(wg_compilation_info_callback_info, wg_compilation_info_fn);
/* Measured like the work-done callback (docs/runtime.md): (status, pipeline, message, user1,
 * user2), status WGPUCreatePipelineAsyncStatus. */
typedef void (*wg_create_compute_pipeline_fn)(uint32_t status, wg_compute_pipeline pipeline,
                                              wg_string message, void *user1, void *user2);
WG_CALLBACK_INFO(wg_create_compute_pipeline_callback_info, wg_create_compute_pipeline_fn);
#undef WG_CALLBACK_INFO

/* The uncaptured-error callback has no mode: it runs whenever the error happens. */
typedef struct wg_uncaptured_error_callback_info {
    wg_chain *next;
    wg_uncaptured_error_fn callback;
    void *user1;
    void *user2;
} wg_uncaptured_error_callback_info;

/* --- instance and adapter --- */
typedef struct wg_dawn_toggles {
    wg_chain chain; /* stype WG_STYPE_DAWN_TOGGLES */
    size_t enabled_count;
    const char *const *enabled;
    size_t disabled_count;
    const char *const *disabled;
} wg_dawn_toggles;

typedef struct wg_instance_capabilities {
    wg_chain *next;
    wg_bool timed_wait_any_enable; /* lets wgpuInstanceWaitAny take a timeout */
    size_t timed_wait_any_max_count;
} wg_instance_capabilities;

typedef struct wg_instance_desc {
    wg_chain *next;
    wg_instance_capabilities capabilities;
} wg_instance_desc;

typedef struct wg_request_adapter_options {
    wg_chain *next;
    uint32_t feature_level;
    uint32_t power_preference;
    wg_bool force_fallback_adapter;
    uint32_t backend_type;
    void *compatible_surface;
} wg_request_adapter_options;

typedef struct wg_adapter_info {
    wg_chain *next;
    wg_string vendor;
    wg_string architecture;
    wg_string device;
    wg_string description;
    uint32_t backend_type;
    uint32_t adapter_type;
    uint32_t vendor_id;
    uint32_t device_id;
    uint32_t subgroup_min_size;
    uint32_t subgroup_max_size;
} wg_adapter_info;

typedef struct wg_limits {
    wg_chain *next;
    uint32_t max_texture_dimension_1d;
    uint32_t max_texture_dimension_2d;
    uint32_t max_texture_dimension_3d;
    uint32_t max_texture_array_layers;
    uint32_t max_bind_groups;
    uint32_t max_bind_groups_plus_vertex_buffers;
    uint32_t max_bindings_per_bind_group;
    uint32_t max_dynamic_uniform_buffers_per_pipeline_layout;
    uint32_t max_dynamic_storage_buffers_per_pipeline_layout;
    uint32_t max_sampled_textures_per_shader_stage;
    uint32_t max_samplers_per_shader_stage;
    uint32_t max_storage_buffers_per_shader_stage;
    uint32_t max_storage_textures_per_shader_stage;
    uint32_t max_uniform_buffers_per_shader_stage;
    uint64_t max_uniform_buffer_binding_size;
    uint64_t max_storage_buffer_binding_size;
    uint32_t min_uniform_buffer_offset_alignment;
    uint32_t min_storage_buffer_offset_alignment;
    uint32_t max_vertex_buffers;
    uint64_t max_buffer_size;
    uint32_t max_vertex_attributes;
    uint32_t max_vertex_buffer_array_stride;
    uint32_t max_inter_stage_shader_variables;
    uint32_t max_color_attachments;
    uint32_t max_color_attachment_bytes_per_sample;
    uint32_t max_compute_workgroup_storage_size;
    uint32_t max_compute_invocations_per_workgroup;
    uint32_t max_compute_workgroup_size_x;
    uint32_t max_compute_workgroup_size_y;
    uint32_t max_compute_workgroup_size_z;
    uint32_t max_compute_workgroups_per_dimension;
    uint32_t max_immediate_size;
} wg_limits;

typedef struct wg_supported_features {
    size_t count;
    const uint32_t *features;
} wg_supported_features;

/* --- device --- */
typedef struct wg_queue_desc {
    wg_chain *next;
    wg_string label;
} wg_queue_desc;

typedef struct wg_device_desc {
    wg_chain *next;
    wg_string label;
    size_t required_feature_count;
    const uint32_t *required_features;
    const wg_limits *required_limits;
    wg_queue_desc default_queue;
    wg_device_lost_callback_info device_lost;
    wg_uncaptured_error_callback_info uncaptured_error;
} wg_device_desc;

/* Dawn's cache interface, chained on the device descriptor: Dawn asks `load` for a blob by key
 * (first with value NULL for its size, then with room for it; 0 is a miss) and gives new blobs
 * to `store`. The callbacks may run on Dawn's worker threads. */
typedef size_t (*wg_dawn_load_cache_fn)(const void *key, size_t key_size, void *value,
                                        size_t value_size, void *userdata);
typedef void (*wg_dawn_store_cache_fn)(const void *key, size_t key_size, const void *value,
                                       size_t value_size, void *userdata);
typedef struct wg_dawn_cache_device_desc {
    wg_chain chain; /* stype WG_STYPE_DAWN_CACHE_DEVICE_DESCRIPTOR */
    wg_string isolation_key;
    wg_dawn_load_cache_fn load;
    wg_dawn_store_cache_fn store;
    void *userdata;
} wg_dawn_cache_device_desc;

/* --- buffers --- */
typedef struct wg_buffer_desc {
    wg_chain *next;
    wg_string label;
    wg_flags usage;
    uint64_t size;
    wg_bool mapped_at_creation;
} wg_buffer_desc;

/* Dawn's test hook: the buffer's creation fails as if the device were out of memory. */
typedef struct wg_dawn_fake_buffer_oom {
    wg_chain chain; /* stype WG_STYPE_DAWN_FAKE_BUFFER_OOM */
    wg_bool at_wire_client_map;
    wg_bool at_native_map;
    wg_bool at_device;
} wg_dawn_fake_buffer_oom;

/* --- shaders --- */
typedef struct wg_shader_source_wgsl {
    wg_chain chain; /* stype WG_STYPE_SHADER_SOURCE_WGSL */
    wg_string code;
} wg_shader_source_wgsl;

typedef struct wg_shader_module_desc {
    wg_chain *next;
    wg_string label;
} wg_shader_module_desc;

typedef struct wg_compilation_message {
    wg_chain *next;
    wg_string message;
    uint32_t type;
    uint64_t line_num; /* 1-based; 0 when the message has no position */
    uint64_t line_pos; /* 1-based byte column */
    uint64_t offset;
    uint64_t length;
} wg_compilation_message;

typedef struct wg_compilation_info {
    wg_chain *next;
    size_t message_count;
    const wg_compilation_message *messages;
} wg_compilation_info;

/* --- binding layouts and bind groups --- */
typedef struct wg_buffer_binding_layout {
    wg_chain *next;
    uint32_t type;
    wg_bool has_dynamic_offset;
    uint64_t min_binding_size;
} wg_buffer_binding_layout;

/* kfuse binds buffers only; the other kinds are here for the layout's size and must be zero. */
typedef struct wg_sampler_binding_layout {
    wg_chain *next;
    uint32_t type;
} wg_sampler_binding_layout;

typedef struct wg_texture_binding_layout {
    wg_chain *next;
    uint32_t sample_type;
    uint32_t view_dimension;
    wg_bool multisampled;
} wg_texture_binding_layout;

typedef struct wg_storage_texture_binding_layout {
    wg_chain *next;
    uint32_t access;
    uint32_t format;
    uint32_t view_dimension;
} wg_storage_texture_binding_layout;

typedef struct wg_bind_group_layout_entry {
    wg_chain *next;
    uint32_t binding;
    wg_flags visibility;
    uint32_t binding_array_size; /* 0: not an array */
    wg_buffer_binding_layout buffer;
    wg_sampler_binding_layout sampler;
    wg_texture_binding_layout texture;
    wg_storage_texture_binding_layout storage_texture;
} wg_bind_group_layout_entry;

typedef struct wg_bind_group_layout_desc {
    wg_chain *next;
    wg_string label;
    size_t entry_count;
    const wg_bind_group_layout_entry *entries;
} wg_bind_group_layout_desc;

typedef struct wg_bind_group_entry {
    wg_chain *next;
    uint32_t binding;
    wg_buffer buffer;
    uint64_t offset;
    uint64_t size;
    void *sampler;
    void *texture_view;
} wg_bind_group_entry;

typedef struct wg_bind_group_desc {
    wg_chain *next;
    wg_string label;
    wg_bind_group_layout layout;
    size_t entry_count;
    const wg_bind_group_entry *entries;
} wg_bind_group_desc;

typedef struct wg_pipeline_layout_desc {
    wg_chain *next;
    wg_string label;
    size_t bind_group_layout_count;
    const wg_bind_group_layout *bind_group_layouts;
    uint32_t immediate_size;
} wg_pipeline_layout_desc;

/* --- compute pipelines --- */
typedef struct wg_constant_entry {
    wg_chain *next;
    wg_string key;
    double value;
} wg_constant_entry;

typedef struct wg_compute_state {
    wg_chain *next;
    wg_shader_module module;
    wg_string entry_point;
    size_t constant_count;
    const wg_constant_entry *constants;
} wg_compute_state;

typedef struct wg_compute_pipeline_desc {
    wg_chain *next;
    wg_string label;
    wg_pipeline_layout layout;
    wg_compute_state compute;
} wg_compute_pipeline_desc;

/* --- commands and queries --- */
typedef struct wg_command_encoder_desc {
    wg_chain *next;
    wg_string label;
} wg_command_encoder_desc;

typedef struct wg_pass_timestamp_writes {
    wg_chain *next;
    wg_query_set query_set;
    uint32_t beginning_index;
    uint32_t end_index;
} wg_pass_timestamp_writes;

typedef struct wg_compute_pass_desc {
    wg_chain *next;
    wg_string label;
    const wg_pass_timestamp_writes *timestamp_writes;
} wg_compute_pass_desc;

typedef struct wg_query_set_desc {
    wg_chain *next;
    wg_string label;
    uint32_t type;
    uint32_t count;
} wg_query_set_desc;

/* The entry points kfuse calls, resolved by name from the loaded library. The list drives both
 * this table and the loader (X-macro): X(return type, table field, symbol, parameters). */
#define KF_WGPU_PROCS(X)                                                                           \
    X(wg_instance, create_instance, wgpuCreateInstance, (const wg_instance_desc *desc))            \
    X(wg_future, instance_request_adapter, wgpuInstanceRequestAdapter,                             \
      (wg_instance instance, const wg_request_adapter_options *options,                            \
       wg_request_adapter_callback_info info))                                                     \
    X(uint32_t, instance_wait_any, wgpuInstanceWaitAny,                                            \
      (wg_instance instance, size_t count, wg_future_wait * futures, uint64_t timeout_ns))         \
    X(void, instance_process_events, wgpuInstanceProcessEvents, (wg_instance instance))            \
    X(void, instance_release, wgpuInstanceRelease, (wg_instance instance))                         \
    X(uint32_t, adapter_get_info, wgpuAdapterGetInfo,                                              \
      (wg_adapter adapter, wg_adapter_info * info))                                                \
    X(void, adapter_info_free_members, wgpuAdapterInfoFreeMembers, (wg_adapter_info info))         \
    X(uint32_t, adapter_get_limits, wgpuAdapterGetLimits,                                          \
      (wg_adapter adapter, wg_limits * limits))                                                    \
    X(void, adapter_get_features, wgpuAdapterGetFeatures,                                          \
      (wg_adapter adapter, wg_supported_features * features))                                      \
    X(void, supported_features_free_members, wgpuSupportedFeaturesFreeMembers,                     \
      (wg_supported_features features))                                                            \
    X(wg_future, adapter_request_device, wgpuAdapterRequestDevice,                                 \
      (wg_adapter adapter, const wg_device_desc *desc, wg_request_device_callback_info info))      \
    X(void, adapter_release, wgpuAdapterRelease, (wg_adapter adapter))                             \
    X(uint32_t, device_get_limits, wgpuDeviceGetLimits, (wg_device device, wg_limits * limits))    \
    X(wg_bool, device_has_feature, wgpuDeviceHasFeature, (wg_device device, uint32_t feature))     \
    X(wg_queue, device_get_queue, wgpuDeviceGetQueue, (wg_device device))                          \
    X(void, device_push_error_scope, wgpuDevicePushErrorScope,                                     \
      (wg_device device, uint32_t filter))                                                         \
    X(wg_future, device_pop_error_scope, wgpuDevicePopErrorScope,                                  \
      (wg_device device, wg_pop_error_scope_callback_info info))                                   \
    X(wg_buffer, device_create_buffer, wgpuDeviceCreateBuffer,                                     \
      (wg_device device, const wg_buffer_desc *desc))                                              \
    X(wg_shader_module, device_create_shader_module, wgpuDeviceCreateShaderModule,                 \
      (wg_device device, const wg_shader_module_desc *desc))                                       \
    X(wg_bind_group_layout, device_create_bind_group_layout, wgpuDeviceCreateBindGroupLayout,      \
      (wg_device device, const wg_bind_group_layout_desc *desc))                                   \
    X(wg_bind_group, device_create_bind_group, wgpuDeviceCreateBindGroup,                          \
      (wg_device device, const wg_bind_group_desc *desc))                                          \
    X(wg_pipeline_layout, device_create_pipeline_layout, wgpuDeviceCreatePipelineLayout,           \
      (wg_device device, const wg_pipeline_layout_desc *desc))                                     \
    X(wg_compute_pipeline, device_create_compute_pipeline, wgpuDeviceCreateComputePipeline,        \
      (wg_device device, const wg_compute_pipeline_desc *desc))                                    \
    X(wg_command_encoder, device_create_command_encoder, wgpuDeviceCreateCommandEncoder,           \
      (wg_device device, const wg_command_encoder_desc *desc))                                     \
    X(wg_query_set, device_create_query_set, wgpuDeviceCreateQuerySet,                             \
      (wg_device device, const wg_query_set_desc *desc))                                           \
    X(void, device_destroy, wgpuDeviceDestroy, (wg_device device))                                 \
    X(void, device_release, wgpuDeviceRelease, (wg_device device))                                 \
    X(void, queue_submit, wgpuQueueSubmit,                                                         \
      (wg_queue queue, size_t count, const wg_command_buffer *commands))                           \
    X(void, queue_write_buffer, wgpuQueueWriteBuffer,                                              \
      (wg_queue queue, wg_buffer buffer, uint64_t offset, const void *data, size_t size))          \
    X(wg_future, queue_on_submitted_work_done, wgpuQueueOnSubmittedWorkDone,                       \
      (wg_queue queue, wg_work_done_callback_info info))                                           \
    X(void, queue_release, wgpuQueueRelease, (wg_queue queue))                                     \
    X(wg_future, buffer_map_async, wgpuBufferMapAsync,                                             \
      (wg_buffer buffer, wg_flags mode, size_t offset, size_t size, wg_map_callback_info info))    \
    X(const void *, buffer_get_const_mapped_range, wgpuBufferGetConstMappedRange,                  \
      (wg_buffer buffer, size_t offset, size_t size))                                              \
    X(void, buffer_unmap, wgpuBufferUnmap, (wg_buffer buffer))                                     \
    X(void, buffer_destroy, wgpuBufferDestroy, (wg_buffer buffer))                                 \
    X(void, buffer_release, wgpuBufferRelease, (wg_buffer buffer))                                 \
    X(wg_future, shader_module_get_compilation_info, wgpuShaderModuleGetCompilationInfo,           \
      (wg_shader_module module, wg_compilation_info_callback_info info))                           \
    X(void, shader_module_release, wgpuShaderModuleRelease, (wg_shader_module module))             \
    X(void, bind_group_layout_release, wgpuBindGroupLayoutRelease, (wg_bind_group_layout layout))  \
    X(void, bind_group_release, wgpuBindGroupRelease, (wg_bind_group group))                       \
    X(void, pipeline_layout_release, wgpuPipelineLayoutRelease, (wg_pipeline_layout layout))       \
    X(void, compute_pipeline_release, wgpuComputePipelineRelease, (wg_compute_pipeline pipeline))  \
    X(wg_compute_pass, command_encoder_begin_compute_pass, wgpuCommandEncoderBeginComputePass,     \
      (wg_command_encoder encoder, const wg_compute_pass_desc *desc))                              \
    X(void, command_encoder_copy_buffer_to_buffer, wgpuCommandEncoderCopyBufferToBuffer,           \
      (wg_command_encoder encoder, wg_buffer source, uint64_t source_offset,                       \
       wg_buffer destination, uint64_t destination_offset, uint64_t size))                         \
    X(void, command_encoder_resolve_query_set, wgpuCommandEncoderResolveQuerySet,                  \
      (wg_command_encoder encoder, wg_query_set query_set, uint32_t first, uint32_t count,         \
       wg_buffer destination, uint64_t destination_offset))                                        \
    X(wg_command_buffer, command_encoder_finish, wgpuCommandEncoderFinish,                         \
      (wg_command_encoder encoder, const void *desc))                                              \
    X(void, command_encoder_release, wgpuCommandEncoderRelease, (wg_command_encoder encoder))      \
    X(void, command_buffer_release, wgpuCommandBufferRelease, (wg_command_buffer commands))        \
    X(void, compute_pass_set_pipeline, wgpuComputePassEncoderSetPipeline,                          \
      (wg_compute_pass pass, wg_compute_pipeline pipeline))                                        \
    X(void, compute_pass_set_bind_group, wgpuComputePassEncoderSetBindGroup,                       \
      (wg_compute_pass pass, uint32_t index, wg_bind_group group, size_t dynamic_offset_count,     \
       const uint32_t *dynamic_offsets))                                                           \
    X(void, compute_pass_dispatch, wgpuComputePassEncoderDispatchWorkgroups,                       \
      (wg_compute_pass pass, uint32_t x, uint32_t y, uint32_t z))                                  \
    X(void, compute_pass_end, wgpuComputePassEncoderEnd, (wg_compute_pass pass))                   \
    X(void, compute_pass_release, wgpuComputePassEncoderRelease, (wg_compute_pass pass))           \
    X(void, query_set_destroy, wgpuQuerySetDestroy, (wg_query_set query_set))                      \
    X(void, query_set_release, wgpuQuerySetRelease, (wg_query_set query_set))

#define KF_WGPU_FIELD(ret, field, symbol, params) ret(*field) params;
typedef struct kf__wgpu_api {
    KF_WGPU_PROCS(KF_WGPU_FIELD)
    /* Optional (NULL when the library lacks it): Dawn's test hook, used by kfuse's tests. */
    void (*device_force_loss)(wg_device device, uint32_t reason, wg_string message);
    /* Optional: pipelines created on the implementation's worker threads (kf_graph_compile asks
     * for a plan's all at once); without it pipelines are created one after another. */
    wg_future (*device_create_compute_pipeline_async)(
        wg_device device, const wg_compute_pipeline_desc *desc,
        wg_create_compute_pipeline_callback_info info);
    /* Present only in Dawn; its presence tells kfuse the library is Dawn. */
    void (*device_tick)(wg_device device);
} kf__wgpu_api;
#undef KF_WGPU_FIELD

#endif
