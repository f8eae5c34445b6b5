/* What differs between webgpu.h implementations, in one table (docs/runtime.md has it in words).
 *
 * webgpu.h is a C ABI that its implementations have not kept still: feature numbers were
 * renumbered, WGPULimits changed layout, callbacks gained arguments, and waiting differs. kfuse
 * declares the ABI once (wgpu_abi.h) and reads everything that differs from the loaded
 * implementation's row here. A library is recognised by a symbol only it exports. Only Dawn is
 * implemented and tested; any other library is refused when it is loaded (KF_ERROR_NO_LIBRARY,
 * naming what kfuse supports), never half-used with another implementation's numbers. A new
 * implementation is a new row, measured against its binary (docs/runtime.md says how). */
#include <stdio.h>

#include "runtime/runtime.h"

static const kf__wgpu_impl g_impls[] = {
    {
        .name = "Dawn",
        .marker = "wgpuDeviceTick",
        .supported = true,
        .feature_timestamp_query = WG_FEATURE_TIMESTAMP_QUERY,
        .feature_shader_f16 = WG_FEATURE_SHADER_F16,
        .feature_subgroups = WG_FEATURE_SUBGROUPS,
        .feature_subgroup_matrix = WG_FEATURE_SUBGROUP_MATRIX,
        .limits_size = sizeof(wg_limits),
        .work_done_has_message = true,
        .timed_wait_any = true,
        .async_pipelines = true,
        .stype_toggles = WG_STYPE_DAWN_TOGGLES,
        .stype_fake_buffer_oom = WG_STYPE_DAWN_FAKE_BUFFER_OOM,
        .stype_cache_device = WG_STYPE_DAWN_CACHE_DEVICE_DESCRIPTOR,
    },
    {
        .name = "wgpu-native",
        .marker = "wgpuGenerateReport",
        .supported = false,
        .why = "its feature numbers differ by release from Dawn's (shader-f16 is 0x08 or 0x0B "
               "there, 0x0A here), its WGPULimits has another layout, and it aborts on a timed "
               "wgpuInstanceWaitAny, which kfuse's waits use",
    },
};

#define IMPL_COUNT (sizeof g_impls / sizeof g_impls[0])

const kf__wgpu_impl *kf__wgpu_impl_identify(bool (*has_symbol)(void *library, const char *name),
                                            void *library) {
    for (size_t i = 0; i < IMPL_COUNT; i++) {
        if (has_symbol(library, g_impls[i].marker)) {
            return &g_impls[i];
        }
    }
    return NULL;
}

void kf__wgpu_impl_supported(char *out, size_t size) {
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < IMPL_COUNT; i++) {
        if (g_impls[i].supported && used < size) {
            used += (size_t)snprintf(out + used, size - used, "%s%s", used ? ", " : "",
                                     g_impls[i].name);
        }
    }
}
