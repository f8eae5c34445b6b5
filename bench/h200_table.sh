#!/usr/bin/env bash
# The headline table of docs/PERFORMANCE.md regenerated with main's defaults, side by side with
# PyTorch on one GPU, in three device commands (each under 10 minutes), best on one warm machine
# (part 2 finds part 1's kfuse.jsonl in /tmp/kfuse-bench; else join them later with
# bench/torch_compare.py):
#
#   OUT=bench-out bench/h200_table.sh 1   kfuse verify --quick, then bench/h200.sh kfuse (every
#                                         bench case at full size, the matmuls again with
#                                         KF_CHECKED=1)
#   OUT=bench-out bench/h200_table.sh 2   the same cases in PyTorch (eager, torch.compile)
#   OUT=bench-out bench/h200_table.sh 3   attention (bench/h200_attention.sh: forward and
#                                         backward, T 1024 and 4096, D 64 and 128, f16 and f32,
#                                         eager, SDPA, torch.compile), the f16 backward beside
#                                         SDPA (bench/h200_attn_bwd.sh, SWEEP=0), the block and
#                                         the GPT step (bench/h200_gpt.sh)
#
# Each part's log, exit status and seconds go to $OUT/summary.txt; the parts' own files land in
# $OUT/partN.tgz (one folder a step). kfuse's defaults: no variable but the driver's ICD and where
# Dawn is (bench/h200_env.sh with VKMASK=0). The vendor-mask layer is not set by hand: the context
# enables it itself on NVIDIA (docs/runtime.md); if `kfuse info` says it did not, the script sets
# it by hand and says so in the summary. BUILD (default build/release) is the release build
# carried over.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
case "${1:-}" in
1 | 2 | 3) ;;
*)
    echo "usage: bench/h200_table.sh 1|2|3" >&2
    exit 2
    ;;
esac
OUT=${OUT:-bench-out}
BUILD=${BUILD:-build/release}
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
. bench/h200_env.sh && VKMASK=0 h200_env "$BUILD"
export VKMASK=0 # the scripts below leave the layer to the context
if "$BUILD/kfuse" info 2>&1 | grep -q 'vendor-mask layer (f16 on NVIDIA) *on'; then
    echo "== the context enabled the vendor-mask layer itself" | tee -a "$SUMMARY"
else
    h200_env "$BUILD"
    echo "== the context did not enable the vendor-mask layer: set by hand (VK_LAYER_PATH)" |
        tee -a "$SUMMARY"
fi
start=$(date +%s)
step() { # name, limit in seconds, command...
    local name=$1 limit=$2 t0 rc
    shift 2
    t0=$(date +%s)
    mkdir -p "$OUT/$name"
    OUT=$OUT/$name timeout "$limit" "$@" >"$OUT/$name/log.txt" 2>&1
    rc=$?
    echo "== $name: exit $rc after $(($(date +%s) - t0)) s (at $(($(date +%s) - start)) s)" |
        tee -a "$SUMMARY"
}
{ git log -1 --format='%h %cI' 2>/dev/null || true; nvidia-smi -L || true; "$BUILD/kfuse" info; } \
    >"$OUT/info.txt" 2>&1
case "${1:-}" in
1)
    step verify 130 "$BUILD/kfuse" verify --quick --seed 20261205
    tail -n 1 "$OUT/verify/log.txt" | tee -a "$SUMMARY"
    PART_LIMIT=200 step kfuse 420 bench/h200.sh kfuse
    ;;
2)
    PART_LIMIT=200 step torch-chains 210 bench/h200.sh torch-chains
    PART_LIMIT=250 step torch-rest 260 bench/h200.sh torch-rest
    ;;
3)
    step attention 260 bench/h200_attention.sh
    SWEEP=0 step attn-bwd 150 bench/h200_attn_bwd.sh
    step gpt 120 bench/h200_gpt.sh
    ;;
esac
# The device tool brings back only a few files: the parts' folders travel as one archive.
tgz=$(mktemp --suffix=.tgz)
(cd "$OUT" && tar czf "$tgz" --exclude=summary.txt --exclude=info.txt . &&
    find . -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +)
mv "$tgz" "$OUT/part${1}.tgz"
cat "$SUMMARY"
