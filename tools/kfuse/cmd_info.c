/* kfuse info: the adapter kfuse would use, its features and the limits kfuse cares about. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f, "usage: kfuse info [--help]\n\n"
               "Show the WebGPU adapter kfuse picks (KF_BACKEND=vulkan|gles|... to choose a "
               "backend),\nthe features kfuse uses and the device limits that bound its kernels.\n"
               "Exits 1 when no adapter is found, saying what to install.\n");
}

static const char *yes_no(bool b) {
    return b ? "yes" : "no";
}

/* How subnormal numbers fare, in words (docs/operators.md says what each op then gives). */
static const char *subnormals(bool inputs_kept, bool results_kept) {
    if (inputs_kept && results_kept) {
        return "kept (gradual underflow, as IEEE 754)";
    }
    if (!inputs_kept && !results_kept) {
        return "flushed to zero (as inputs and as results)";
    }
    return inputs_kept ? "kept as inputs, results flushed to zero"
                       : "read as zero as inputs, results kept";
}

static void print_bytes(const char *name, uint64_t bytes) {
    if (bytes >= (1ull << 30)) {
        printf("  %-38s %llu (%.1f GiB)\n", name, (unsigned long long)bytes,
               (double)bytes / (double)(1ull << 30));
    } else if (bytes >= (1ull << 20)) {
        printf("  %-38s %llu (%.1f MiB)\n", name, (unsigned long long)bytes,
               (double)bytes / (double)(1ull << 20));
    } else {
        printf("  %-38s %llu\n", name, (unsigned long long)bytes);
    }
}

int kf_cmd_info(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (kf_cli_is_help(argv[i])) {
            usage(stdout);
            return 0;
        }
        fprintf(stderr, "kfuse info: unknown argument '%s'\n\n", argv[i]);
        usage(stderr);
        return 2;
    }
    kf_context *ctx = kf_cli_context();
    if (!ctx) {
        return 1;
    }
    kf_adapter_info info;
    kf_context_adapter_info(ctx, &info);
    printf("adapter:      %s\n", info.device);
    printf("vendor:       %s (0x%04x)%s%s\n", info.vendor[0] ? info.vendor : "unknown",
           info.vendor_id, info.architecture[0] ? ", architecture " : "", info.architecture);
    printf("device id:    0x%04x\n", info.device_id);
    printf("type:         %s\n", info.adapter_type);
    printf("backend:      %s\n", info.backend);
    printf("driver:       %s\n", info.description);
    printf("library:      %s (%s)\n", info.library, info.library_source);
    printf("cache:        %s (pipelines; KF_PIPELINE_CACHE=DIR moves it, =off turns it off)\n",
           info.pipeline_cache[0] ? info.pipeline_cache : "off");
    printf("features:\n");
    printf("  %-38s %s\n", "shader-f16", yes_no(info.has_f16));
    if (info.has_subgroups) {
        printf("  %-38s yes (size %u..%u)\n", "subgroups", info.subgroup_min_size,
               info.subgroup_max_size);
    } else {
        printf("  %-38s no\n", "subgroups");
    }
    printf("  %-38s %s\n", "timestamp-query", yes_no(info.has_timestamps));
    printf("  %-38s %s\n", "chromium-experimental-subgroup-matrix",
           yes_no(info.has_subgroup_matrix));
    printf("  %-38s %s\n", "robustness (bounds clamping)",
           info.unchecked_access ? "off (kernels proved in bounds; KF_CHECKED=1 turns it on)"
                                 : "on (KF_CHECKED=1 or checked_access)");
    if (info.vendor_masked) {
        printf("  %-38s %s\n", "vendor-mask layer (f16 on NVIDIA)", "on (KF_NO_VKMASK=1: off)");
    }
    printf("limits:\n");
    print_bytes("maxBufferSize", info.max_buffer_size);
    print_bytes("maxStorageBufferBindingSize", info.max_storage_buffer_binding_size);
    printf("  %-38s %u\n", "maxStorageBuffersPerShaderStage", info.max_storage_buffers_per_stage);
    print_bytes("maxComputeWorkgroupStorageSize", info.max_compute_workgroup_storage_size);
    printf("  %-38s %u\n", "maxComputeInvocationsPerWorkgroup",
           info.max_compute_invocations_per_workgroup);
    printf("  %-38s %u x %u x %u\n", "maxComputeWorkgroupSize", info.max_compute_workgroup_size[0],
           info.max_compute_workgroup_size[1], info.max_compute_workgroup_size[2]);
    printf("  %-38s %u\n", "maxComputeWorkgroupsPerDimension",
           info.max_compute_workgroups_per_dimension);
    kf_float_behaviour fb;
    kf_status st = kf_context_float_behaviour(ctx, &fb);
    printf("floats (measured on the device):\n");
    if (st != KF_OK) {
        printf("  %-38s %s: %s\n", "subnormals", kf_status_str(st), kf_context_last_error(ctx));
    } else {
        printf("  %-38s %s\n", "f32 subnormals",
               subnormals(fb.f32_subnormal_inputs_kept, fb.f32_subnormal_results_kept));
        printf("  %-38s %s\n", "f16 subnormals",
               fb.f16_measured
                   ? subnormals(fb.f16_subnormal_inputs_kept, fb.f16_subnormal_results_kept)
                   : "not measured (no shader-f16)");
    }
    kf_context_destroy(ctx);
    return st == KF_OK ? 0 : 1;
}
