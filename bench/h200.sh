#!/usr/bin/env bash
# The GPU run behind docs/PERFORMANCE.md: kfuse bench at full size, then the same cases in PyTorch
# (eager and torch.compile), then the plot. Everything lands in $OUT (default bench-out/).
#
#   bench/h200.sh [all|kfuse|torch|torch-chains|torch-rest|plot]
#
# Needs on the GPU machine: the kfuse binary ($KFUSE, default build/release/kfuse), Dawn's library
# (deps/dawn, or $KF_WEBGPU_LIB), libvulkan1 and the NVIDIA Vulkan driver; python3 with torch for
# the comparison; gnuplot for the plot (else run bench/plot.sh on the files later, anywhere). No
# network. Each part stops itself before 9.5 minutes, so one part fits one 10-minute command;
# `torch` is split in two parts for that reason (compiling each case takes a while).
# Environment: OUT, KFUSE, KF_WEBGPU_LIB, PYTHON, SIZE (full; small for a quick try), PART_LIMIT,
# STATE. Parts run in separate commands can always be joined afterwards, anywhere:
#   python3 bench/torch_compare.py kfuse.jsonl --torch-json torch-chains.jsonl \
#       --torch-json torch-rest.jsonl
#   bench/plot.sh kfuse.jsonl torch.jsonl docs/perf.png   (torch.jsonl: the two cat together)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
KFUSE=${KFUSE:-build/release/kfuse}
export KF_WEBGPU_LIB=${KF_WEBGPU_LIB:-$PWD/deps/dawn/libwebgpu_wrapper.so}
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/kfuse-inductor-cache}
PART_LIMIT=${PART_LIMIT:-570}
SIZE=${SIZE:-full}     # SIZE=small: a quick try of the whole path
PYTHON=${PYTHON:-python3}
# $OUT may be new for each command on the GPU machine: kfuse's results are also kept here, where
# the torch parts look for them when $OUT has none (a later command on the same machine).
STATE=${STATE:-/tmp/kfuse-bench}
mkdir -p "$OUT" "$STATE"
part=${1:-all}

# kfuse's vendor-mask Vulkan layer (docs/runtime.md), built beside the binary: with it this Dawn
# offers shader-f16 on NVIDIA, so the f16 cases run (VKMASK=0 leaves it out).
VKMASK_DIR=$(dirname "$KFUSE")/vkmask
if [ "${VKMASK:-1}" != 0 ] && [ -f "$VKMASK_DIR/VkLayer_kfuse_vendor_mask.json" ]; then
    export VK_LAYER_PATH=$(cd "$VKMASK_DIR" && pwd) VK_INSTANCE_LAYERS=VK_LAYER_KFUSE_vendor_mask
fi

run_kfuse() {
    { nvidia-smi || true; } >"$OUT/nvidia-smi.txt" 2>&1
    "$KFUSE" info >"$OUT/kfuse-info.txt" 2>&1
    echo "kfuse bench --size $SIZE (table: $OUT/kfuse.txt, JSON: $OUT/kfuse.jsonl)"
    # Full sizes explicitly: the CPU-adapter default would pick small ones if Dawn fell back to
    # a software adapter, and the numbers would silently mean something else.
    timeout "$PART_LIMIT" "$KFUSE" bench --size "$SIZE" --json-file "$OUT/kfuse.jsonl" \
        >"$OUT/kfuse.txt" 2>"$OUT/kfuse.err"
    echo "kfuse bench exit $?"
    cp "$OUT/kfuse.jsonl" "$OUT/kfuse.txt" "$STATE/" 2>/dev/null || true
    cat "$OUT/kfuse.txt" "$OUT/kfuse.err"
    # The default runs with Dawn's bounds clamping off (kernels proved in bounds, docs/runtime.md);
    # the matmuls again with it on (KF_CHECKED=1), for what the clamps cost.
    KF_CHECKED=1 timeout "$PART_LIMIT" "$KFUSE" bench --size "$SIZE" --filter '^matmul' \
        --json-file "$OUT/kfuse-checked.jsonl" >"$OUT/kfuse-checked.txt" 2>&1
    echo "kfuse bench (checked) exit $?"
    cat "$OUT/kfuse-checked.txt"
}

run_torch() { # name, extra torch_compare.py arguments...
    local name=$1
    shift
    echo "torch_compare.py $* (table: $OUT/compare-$name.md, log: $OUT/torch-$name.err)"
    local kfuse_json=()
    if [ ! -s "$OUT/kfuse.jsonl" ] && [ -s "$STATE/kfuse.jsonl" ]; then
        cp "$STATE/kfuse.jsonl" "$STATE/kfuse.txt" "$OUT/" 2>/dev/null || true
    fi
    [ -s "$OUT/kfuse.jsonl" ] && kfuse_json=("$OUT/kfuse.jsonl")
    timeout "$PART_LIMIT" "$PYTHON" bench/torch_compare.py "${kfuse_json[@]}" --size "$SIZE" \
        --json "$OUT/torch-$name.jsonl" "$@" >"$OUT/compare-$name.md" 2>"$OUT/torch-$name.err"
    echo "torch_compare.py exit $?"
    cat "$OUT/compare-$name.md"
}

run_plot() {
    cat "$OUT"/torch-*.jsonl >"$OUT/torch.jsonl" 2>/dev/null || true
    if command -v gnuplot >/dev/null; then
        bench/plot.sh "$OUT/kfuse.jsonl" "$OUT/torch.jsonl" "$OUT/perf.png"
    else
        echo "no gnuplot here: run bench/plot.sh $OUT/kfuse.jsonl $OUT/torch.jsonl docs/perf.png elsewhere"
    fi
}

case "$part" in
kfuse) run_kfuse ;;
torch-chains) run_torch chains --filter '^chain_' ;;
torch-rest) run_torch rest --filter '^(matmul|softmax|rmsnorm|layernorm|ffn)' ;;
torch)
    run_torch chains --filter '^chain_'
    run_torch rest --filter '^(matmul|softmax|rmsnorm|layernorm|ffn)'
    ;;
plot) run_plot ;;
all)
    run_kfuse
    run_torch chains --filter '^chain_'
    run_torch rest --filter '^(matmul|softmax|rmsnorm|layernorm|ffn)'
    run_plot
    ;;
*)
    echo "usage: bench/h200.sh [all|kfuse|torch|torch-chains|torch-rest|plot]" >&2
    exit 2
    ;;
esac
ls -la "$OUT"
