#!/usr/bin/env bash
# The training-step comparison of docs/PERFORMANCE.md ("Training steps"): kfuse's digits and wide
# MLP steps (forward, backward, AdamW; fused and unfused), then the wide step in PyTorch eager and
# torch.compile on the same GPU, then both side by side. Everything lands in $OUT.
#
#   OUT=bench-out bench/h200_train.sh
#
# Needs what bench/h200.sh needs: the kfuse binary ($KFUSE, default build/release/kfuse), Dawn's
# library (deps/dawn, or $KF_WEBGPU_LIB), the Vulkan loader and driver, python3 with torch.
# Environment: OUT, KFUSE, PYTHON, SIZE (full: 4096 tokens, 4096 -> 16384 -> 4096; small, or
# TxDxFxC), REPEAT (10), PART_LIMIT (seconds per part, 270: the two fit one 10-minute command).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
KFUSE=${KFUSE:-build/release/kfuse}
PYTHON=${PYTHON:-python3}
SIZE=${SIZE:-full}
REPEAT=${REPEAT:-10}
PART_LIMIT=${PART_LIMIT:-270}
export KF_WEBGPU_LIB=${KF_WEBGPU_LIB:-$PWD/deps/dawn/libwebgpu_wrapper.so}
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/kfuse-inductor-cache}
mkdir -p "$OUT"
VKMASK_DIR=$(dirname "$KFUSE")/vkmask
if [ "${VKMASK:-1}" != 0 ] && [ -f "$VKMASK_DIR/VkLayer_kfuse_vendor_mask.json" ]; then
    export VK_LAYER_PATH=$(cd "$VKMASK_DIR" && pwd) VK_INSTANCE_LAYERS=VK_LAYER_KFUSE_vendor_mask
fi
case $SIZE in
full) BENCH_SIZE=full ;;
small) BENCH_SIZE=small ;;
*) BENCH_SIZE=full; export KFUSE_BENCH_WIDE=$SIZE ;;
esac
{ nvidia-smi || true; } >"$OUT/nvidia-smi.txt" 2>&1
echo "kfuse bench --filter '^train_step' --size $BENCH_SIZE (table: $OUT/train-kfuse.txt)"
timeout "$PART_LIMIT" "$KFUSE" bench --size "$BENCH_SIZE" --filter '^train_step' \
    --repeat "$REPEAT" --json-file "$OUT/train-kfuse.jsonl" >"$OUT/train-kfuse.txt" \
    2>"$OUT/train-kfuse.err"
echo "kfuse bench exit $?"
cat "$OUT/train-kfuse.txt" "$OUT/train-kfuse.err"
echo "torch_train_step.py --size $SIZE (table: $OUT/train-compare.md)"
timeout "$PART_LIMIT" "$PYTHON" bench/torch_train_step.py --size "$SIZE" --repeat "$REPEAT" \
    --json "$OUT/train-torch.jsonl" --kfuse-json "$OUT/train-kfuse.jsonl" \
    >"$OUT/train-compare.md" 2>"$OUT/train-torch.err"
echo "torch_train_step.py exit $?"
cat "$OUT/train-compare.md" "$OUT/train-torch.err"
