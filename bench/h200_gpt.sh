#!/usr/bin/env bash
# Issue 14's performance section, the block and the step: a transformer block's forward +
# backward (one pre-norm layer of examples/chargpt/gpt.kf, at the GPT's batch-64 size and at a
# wider one) and a training step of the character GPT (gpt_spec.py --batch 64), kfuse
# (bench/gpt/gpt_bench.c) against PyTorch eager, eager with F.scaled_dot_product_attention and
# torch.compile (bench/torch_gpt_step.py; by default eager and compiled with
# F.scaled_dot_product_attention) on the same GPU in one run, with the non-matmul work (the
# issue's target: at least torch.compile's speed) defined the same way for both: each kernel's
# device time (kfuse: GPU timestamps per dispatch; PyTorch: torch.profiler), classed matmul /
# attention / other, and listed kernel by kernel (kfuse: each dispatch's ops, ms, bytes, GB/s).
# Three files in $OUT:
#   gpt-kfuse.jsonl  kfuse's rows (kfuse_bench_gpt --json, with per_dispatch)
#   gpt-torch.jsonl  PyTorch's rows (with kernels_by_name)
#   gpt-compare.md   the log of both, the side-by-side table and the per-kernel tables
#
#   OUT=bench-out bench/h200_gpt.sh
#
# Needs a release build (build/release/kfuse_bench_gpt; $BENCH), Dawn's library (deps/dawn, or
# $KF_WEBGPU_LIB), the Vulkan loader and driver, python3 with torch. Environment: OUT, BENCH,
# PYTHON, BLOCKS (BxTxCxHxF,...; default 64x64x128x4x512,4x1024x1024x16x4096), BATCH (64),
# REPEAT (20), VARIANTS (PyTorch's: torch_eager_sdpa,torch_compile_sdpa; torch_eager and
# torch_compile are the math attention), KFUSE_LIMIT and TORCH_LIMIT (seconds for each part: 30
# and 55, under 90 s in all: the H200 took 7 and 38 s; PyTorch's rows are written as they come,
# so a part cut short keeps what it measured).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
BENCH=${BENCH:-build/release/kfuse_bench_gpt}
PYTHON=${PYTHON:-python3}
BLOCKS=${BLOCKS:-64x64x128x4x512,4x1024x1024x16x4096}
BATCH=${BATCH:-64}
REPEAT=${REPEAT:-20}
VARIANTS=${VARIANTS:-torch_eager_sdpa,torch_compile_sdpa}
KFUSE_LIMIT=${KFUSE_LIMIT:-30}
TORCH_LIMIT=${TORCH_LIMIT:-55}
export KF_WEBGPU_LIB=${KF_WEBGPU_LIB:-$PWD/deps/dawn/libwebgpu_wrapper.so}
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/kfuse-inductor-cache}
mkdir -p "$OUT"
VKMASK_DIR=$(dirname "$BENCH")/vkmask
if [ "${VKMASK:-1}" != 0 ] && [ -f "$VKMASK_DIR/VkLayer_kfuse_vendor_mask.json" ]; then
    export VK_LAYER_PATH=$(cd "$VKMASK_DIR" && pwd) VK_INSTANCE_LAYERS=VK_LAYER_KFUSE_vendor_mask
fi
SPECS=$(mktemp -d)
trap 'rm -rf "$SPECS"' EXIT
LOG="$OUT/gpt-compare.md"
: >"$OUT/gpt-kfuse.jsonl"
{
    echo "# bench/h200_gpt.sh $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null)"
    echo '```'
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 || true
    "$PYTHON" bench/torch_gpt_step.py --write-specs "$SPECS" --blocks "$BLOCKS" --batch "$BATCH"
} >"$LOG"
# kfuse: every case in one part, each case a process of its own (a failure stops only that case)
start=$(date +%s)
while read -r mode name spec; do
    left=$((KFUSE_LIMIT - ($(date +%s) - start)))
    if [ "$left" -le 5 ]; then
        echo "kfuse $name: skipped, the part's $KFUSE_LIMIT s are spent" >>"$LOG"
        continue
    fi
    timeout "$left" "$BENCH" "--$mode" "$spec" --name "$name" --repeat "$REPEAT" --json \
        >>"$OUT/gpt-kfuse.jsonl" 2>>"$LOG"
    echo "kfuse $name: exit $?" >>"$LOG"
done < <(grep -E '^(block|step) ' "$LOG")
echo "kfuse part: $(($(date +%s) - start)) s" >>"$LOG"
start=$(date +%s)
timeout "$TORCH_LIMIT" "$PYTHON" bench/torch_gpt_step.py --blocks "$BLOCKS" --batch "$BATCH" \
    --repeat "$REPEAT" --variants "$VARIANTS" --json "$OUT/gpt-torch.jsonl" >>"$LOG" 2>&1
echo "torch_gpt_step.py exit $?, $(($(date +%s) - start)) s" >>"$LOG"
echo '```' >>"$LOG"
"$PYTHON" bench/torch_gpt_step.py --table-only --json "$OUT/gpt-torch.jsonl" \
    --kfuse-json "$OUT/gpt-kfuse.jsonl" >>"$LOG" 2>&1
cat "$LOG"
