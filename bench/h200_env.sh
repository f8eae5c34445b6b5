# Sourced by the H200 device scripts (bench/h200_*.sh), from the repository root:
#   . bench/h200_env.sh && h200_env BUILD_DIR
# The Vulkan loader and friends from .gl/*.deb where the machine lacks libvulkan, the NVIDIA
# driver's ICD (unless VK_DRIVER_FILES or VK_ICD_FILENAMES is set), Dawn's library
# (KF_WEBGPU_LIB, default deps/dawn) and, unless VKMASK=0, kfuse's vendor-mask layer from
# BUILD_DIR/vkmask (docs/runtime.md: with it this Dawn offers shader-f16 on NVIDIA).
h200_env() {
    local build=$1
    if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1' && ls .gl/*.deb >/dev/null 2>&1; then
        for f in .gl/*.deb; do dpkg -x "$f" /; done
        ldconfig
    fi
    local icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    if [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ] && [ -f "$icd" ]; then
        export VK_DRIVER_FILES=$icd
    fi
    export KF_WEBGPU_LIB=${KF_WEBGPU_LIB:-$PWD/deps/dawn/libwebgpu_wrapper.so}
    if [ "${VKMASK:-1}" != 0 ] && [ -f "$build/vkmask/VkLayer_kfuse_vendor_mask.json" ]; then
        VK_LAYER_PATH=$(cd "$build/vkmask" && pwd)
        export VK_LAYER_PATH VK_INSTANCE_LAYERS=VK_LAYER_KFUSE_vendor_mask
    fi
}
