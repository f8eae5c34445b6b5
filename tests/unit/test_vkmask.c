/* The vendor-mask Vulkan layer (tools/vkmask), on the machine's own adapter: masked as NVIDIA,
 * Dawn must drop shader-f16 (its NVIDIA rule) and report vendor 0x10de; masked as 0xffff it must
 * keep whatever f16 the adapter has. Only meaningful on a Vulkan adapter with f16 (lavapipe). */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Creates a context with the layer on, masking the vendor as `vendor`, and restores the three
 * environment variables to what they were (set or unset) afterwards. */
static bool masked_context_with(const char *vendor, const kf_context_desc *desc,
                                kf_adapter_info *info);

static bool masked_context(const char *vendor, kf_adapter_info *info) {
    kf_context_desc desc = {0};
    desc.disable_vendor_mask = true; /* the layer by hand only */
    return masked_context_with(vendor, &desc, info);
}

static bool masked_context_with(const char *vendor, const kf_context_desc *desc,
                                kf_adapter_info *info) {
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
    bool ok = kf_context_create(desc, &ctx) == KF_OK && kf_context_adapter_info(ctx, info) == KF_OK;
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

/* The context enables the layer itself on NVIDIA when f16 is wanted (kf_context_desc
 * .disable_vendor_mask). Tested in reverse: lavapipe masked as NVIDIA by hand (the layer with
 * KF_VKMASK_VENDOR=0x10de, so Dawn drops f16, as on an H200) must come back with f16, the
 * context saying the mask is on and the vendor still NVIDIA; with the option, or KF_NO_VKMASK=1,
 * it stays without f16. */
KT_TEST(unit, vkmask_context_enables_the_layer_on_nvidia) {
    KT_NEED_GPU(ctx);
    kf_adapter_info plain;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &plain));
    if (strcmp(plain.backend, "vulkan") != 0 || !plain.has_f16 || plain.vendor_id == 0x10de) {
        printf("    (skipped: needs a non-NVIDIA Vulkan adapter with f16; this is %s on %s)\n",
               plain.device, plain.backend);
        return;
    }
    kf_context_desc automatic = {0};
    kf_adapter_info info;
    KT_CHECK(masked_context_with("0x10DE", &automatic, &info), "no context as NVIDIA");
    KT_CHECK(info.vendor_masked, "the context did not turn the layer on for NVIDIA");
    KT_CHECK(info.has_f16, "no shader-f16 with the layer on");
    KT_CHECK(info.vendor_id == 0x10de, "vendor 0x%x, want the true 0x10de", info.vendor_id);

    kf_context_desc off = {0};
    off.disable_vendor_mask = true;
    KT_CHECK(masked_context_with("0x10DE", &off, &info), "no context as NVIDIA (mask off)");
    KT_CHECK(!info.vendor_masked && !info.has_f16, "disable_vendor_mask: masked %d, f16 %d",
             info.vendor_masked, info.has_f16);

    setenv("KF_NO_VKMASK", "1", 1);
    bool made = masked_context_with("0x10DE", &automatic, &info);
    unsetenv("KF_NO_VKMASK");
    KT_CHECK(made, "no context as NVIDIA (KF_NO_VKMASK=1)");
    KT_CHECK(!info.vendor_masked && !info.has_f16, "KF_NO_VKMASK=1: masked %d, f16 %d",
             info.vendor_masked, info.has_f16);

    kf_context_desc no_f16 = {0};
    no_f16.disable_f16 = true;
    KT_CHECK(masked_context_with("0x10DE", &no_f16, &info), "no context as NVIDIA (no f16)");
    KT_CHECK(!info.vendor_masked, "the layer went on though f16 is not wanted");
}
