/* The vendor-mask Vulkan layer (tools/vkmask), on the machine's own adapter: masked as NVIDIA,
 * Dawn must drop shader-f16 (its NVIDIA rule) and report vendor 0x10de; masked as 0xffff it must
 * keep whatever f16 the adapter has. Only meaningful on a Vulkan adapter with f16 (lavapipe). */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Creates a context with the layer on, masking the vendor as `vendor`, and restores the three
 * environment variables to what they were (set or unset) afterwards. */
static bool masked_context(const char *vendor, kf_adapter_info *info) {
    static const char *const names[3] = {"VK_LAYER_PATH", "VK_INSTANCE_LAYERS", "KF_VKMASK_VENDOR"};
    const char *values[3] = {KF_VKMASK_DIR, "VK_LAYER_KFUSE_vendor_mask", vendor};
    char saved[3][1024];
    bool had[3];
    for (int i = 0; i < 3; i++) {
        const char *old = getenv(names[i]);
        had[i] = old != NULL;
        snprintf(saved[i], sizeof saved[i], "%s", old ? old : "");
        setenv(names[i], values[i], 1);
    }
    kf_context *ctx = NULL;
    kf_context_desc desc = {0};
    bool ok =
        kf_context_create(&desc, &ctx) == KF_OK && kf_context_adapter_info(ctx, info) == KF_OK;
    kf_context_destroy(ctx);
    for (int i = 0; i < 3; i++) {
        if (had[i]) {
            setenv(names[i], saved[i], 1);
        } else {
            unsetenv(names[i]);
        }
    }
    return ok;
}

KT_TEST(unit, vkmask_layer_rewrites_the_vendor_dawn_sees) {
    KT_NEED_GPU(ctx);
    kf_adapter_info plain;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &plain));
    if (strcmp(plain.backend, "vulkan") != 0 || !plain.has_f16 || plain.vendor_id == 0x10de) {
        printf("    (skipped: needs a non-NVIDIA Vulkan adapter with f16; this is %s on %s)\n",
               plain.device, plain.backend);
        return;
    }
    kf_adapter_info as_nvidia, as_unknown;
    KT_CHECK(masked_context("0x10DE", &as_nvidia), "no context with the layer masking as NVIDIA");
    KT_CHECK(as_nvidia.vendor_id == 0x10de, "vendor 0x%x, want 0x10de", as_nvidia.vendor_id);
    KT_CHECK(!as_nvidia.has_f16, "Dawn kept shader-f16 on a device it takes for NVIDIA");
    KT_CHECK(masked_context("0xffff", &as_unknown), "no context with the layer masking as 0xffff");
    KT_CHECK(as_unknown.vendor_id == 0xffff, "vendor 0x%x, want 0xffff", as_unknown.vendor_id);
    KT_CHECK(as_unknown.has_f16, "shader-f16 lost under an unknown vendor");
}
