#!/usr/bin/env bash
# Split-K for products with few output tiles and a long K (src/fuse/rules/split_k.c), with and
# without, on one GPU, in about 60 s: the character GPT's training step (gpt_spec.py at batch 64,
# whose ten weight gradients x^T dy are 128 x 76 .. 512 x 128 over K = 4096 tokens) timed by
# kfuse_bench_gpt --step with the rule (the default) and with $KF_NO_SPLIT_K=1, alternately twice;
# then the isolated product [4096 x 128]^T [4096 x 512] (kfuse_bench_gpt --block: its dispatches
# timed, the output compared with the unfused plan's) both ways and with forced slice counts
# ($KF_SPLIT_K_SLICES = 4, 8, 32, 64; the rule picks 16 there).
#
#   bench/h200_splitk.sh
#
# Needs a release build with kfuse_bench_gpt (cmake --preset release && cmake --build --preset
# release --target kfuse_bench_gpt), python3 (no torch), Dawn (deps/dawn or $KF_WEBGPU_LIB) and
# the GPU's Vulkan driver. Writes two files to $OUT (default bench-out/): splitk.txt (the tables,
# each run stamped, exit codes) and splitk.jsonl (the JSON lines; "case" names the size and the
# mode; per_dispatch lists each dispatch's device time). Environment: OUT, BENCH, REPEAT (20),
# LIMIT (seconds per run, 20), BATCH (64; BATCH=4 REPEAT=3 LIMIT=300 tries it on lavapipe).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
BENCH=${BENCH:-build/release/kfuse_bench_gpt}
REPEAT=${REPEAT:-20}
LIMIT=${LIMIT:-20}
BATCH=${BATCH:-64}
export KF_WEBGPU_LIB=${KF_WEBGPU_LIB:-$PWD/deps/dawn/libwebgpu_wrapper.so}
mkdir -p "$OUT"
VKMASK_DIR=$(dirname "$BENCH")/vkmask
if [ -f "$VKMASK_DIR/VkLayer_kfuse_vendor_mask.json" ]; then
    export VK_LAYER_PATH=$(cd "$VKMASK_DIR" && pwd) VK_INSTANCE_LAYERS=VK_LAYER_KFUSE_vendor_mask
fi
SPECS=$(mktemp -d)
trap 'rm -rf "$SPECS"' EXIT
TXT=$OUT/splitk.txt
JSON=$OUT/splitk.jsonl
: >"$TXT"
: >"$JSON"
echo "# bench/h200_splitk.sh $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null)" >>"$TXT"
python3 examples/chargpt/gpt_spec.py --batch "$BATCH" >"$SPECS/gpt.kf"
printf 'x: f32[4096,128]\ndy: f32[4096,512]\nw = matmul(x, dy, transpose_a=true)\n' \
    >"$SPECS/dw.kf"
run() { # name, env assignment, then kfuse_bench_gpt's arguments
    local name=$1 env=$2
    shift 2
    echo "== $(date -u +%H:%M:%S) $name ($env)" >>"$TXT"
    env $env timeout "$LIMIT" "$BENCH" "$@" --name "$name" --repeat "$REPEAT" --json \
        >>"$JSON" 2>>"$TXT"
    echo "exit $?" >>"$TXT"
}
for mode in split before split before; do
    off=0
    [ "$mode" = before ] && off=1
    run "gpt_b${BATCH}_$mode" "KF_NO_SPLIT_K=$off" --step "$SPECS/gpt.kf" --no-unfused
done
run dw_128x4096x512_split KF_NO_SPLIT_K=0 --block "$SPECS/dw.kf"
run dw_128x4096x512_before KF_NO_SPLIT_K=1 --block "$SPECS/dw.kf" --no-unfused
for s in 4 8 32 64; do
    run "dw_128x4096x512_s$s" "KF_SPLIT_K_SLICES=$s" --block "$SPECS/dw.kf" --no-unfused
done
# a compact table: each case's plan time and its matmul / split-K sum dispatches
python3 - "$JSON" >>"$TXT" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if "case" not in r:
        continue
    print(f"{r['case']:28s} ms {r.get('ms', 0):8.4f} plan_ms {r.get('plan_ms', r.get('ms', 0)):8.4f} "
          f"matmul_ms {r.get('matmul_ms', 0):7.4f} dispatches {r.get('dispatches', 0)}")
    for d in r.get("per_dispatch", []):
        lab = d.get("label", "")
        if "kf_grad" in lab or "split-K" in lab or lab.endswith("f32[128x512]") or "16x128x512" in lab:
            print(f"    {d['ms']:8.4f} ms  {lab[:110]}")
PY
cat "$TXT"
