#!/usr/bin/env bash
# rmsnorm into matmul (src/fuse/rules/rmsnorm_matmul.c) on one GPU, under 4 minutes: kfuse bench's
# rmsnorm_matmul cases at full size (x 4096x4096 with a gain, times w 4096x4096 and a narrow
# 4096x256), fused (one kernel: r summed in the K loop) against unfused (rmsnorm, then matmul), f32
# and f16; then the f16 cases again with $KF_NO_SGMAT=1 (on a GPU with subgroup matrices the f16
# product stays on them, unfused, so the fused f16 kernel is only seen that way).
#
#   bench/h200_rmsmm.sh
#
# Needs a release build (cmake --preset release && cmake --build --preset release: build/release/
# kfuse), Dawn (deps/dawn or $KF_WEBGPU_LIB) and the GPU's Vulkan driver. Writes three files to $OUT
# (default bench-out/): rmsmm.txt (the tables, each section stamped), rmsmm.jsonl and
# rmsmm-nosgmat.jsonl (kfuse bench's JSON lines of each run). Environment: OUT, KFUSE, SIZE (full; small tries it on a CPU adapter).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
KFUSE=${KFUSE:-build/release/kfuse}
SIZE=${SIZE:-full}
export KF_WEBGPU_LIB=${KF_WEBGPU_LIB:-$PWD/deps/dawn/libwebgpu_wrapper.so}
mkdir -p "$OUT"
# kfuse's vendor-mask Vulkan layer (docs/runtime.md): with it Dawn offers shader-f16 on NVIDIA
VKMASK_DIR=$(dirname "$KFUSE")/vkmask
if [ -f "$VKMASK_DIR/VkLayer_kfuse_vendor_mask.json" ]; then
    export VK_LAYER_PATH=$(cd "$VKMASK_DIR" && pwd) VK_INSTANCE_LAYERS=VK_LAYER_KFUSE_vendor_mask
fi
TXT=$OUT/rmsmm.txt
JSON=$OUT/rmsmm.jsonl
: >"$TXT"
section() { echo "== $(date -u +%H:%M:%S) $*" >>"$TXT"; }
section "kfuse bench rmsnorm_matmul, size $SIZE"
timeout 150 "$KFUSE" bench --filter '^rmsnorm_matmul' --size "$SIZE" --json-file "$JSON" \
    >>"$TXT" 2>&1 || echo "exit $?" >>"$TXT"
section "the f16 cases with KF_NO_SGMAT=1 (the fused f16 kernel against the unfused FMA one)"
KF_NO_SGMAT=1 timeout 70 "$KFUSE" bench --filter '^rmsnorm_matmul_f16' --size "$SIZE" \
    --json-file "$OUT/rmsmm-nosgmat.jsonl" >>"$TXT" 2>&1 || echo "exit $?" >>"$TXT"
section done
