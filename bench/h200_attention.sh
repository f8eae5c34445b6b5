#!/usr/bin/env bash
# Attention side by side with PyTorch on one GPU (docs/PERFORMANCE.md, "Attention"): kfuse's
# fused attention forward and forward + backward (f16 on subgroup matrices where the device has
# them, and again on FMA units with KF_NO_SGMAT=1 as "kfuse-fma": the register-tiled kernel; the
# forward of session 4's kernel as "kfuse-lanes", KF_ATTN_LANES=1), then PyTorch eager (the math
# with T x T scores), F.scaled_dot_product_attention and torch.compile, at T 1024 and 4096, D 64
# and 128, f16 and f32, causal; before the timings, the attention operators' checks on this GPU
# (kfuse verify and the subgroup-matrix kernel's tests, every element). Three files land in $OUT:
#   attention.txt          everything printed, ending with the side-by-side table
#   attention-kfuse.jsonl  kfuse's rows;  attention-torch.jsonl  PyTorch's rows
#
#   OUT=bench-out bench/h200_attention.sh
#
# Needs a release build (BUILD, default build/release: kfuse, kfuse_tests,
# kfuse_bench_attention, vkmask), Dawn (deps/dawn or $KF_WEBGPU_LIB), the Vulkan loader (the
# debs in .gl/ are unpacked when the machine has none) and the NVIDIA Vulkan driver, python3 with
# torch. About 3.5 minutes: each part stops itself (KFUSE_LIMIT, TORCH_LIMIT, COMPILE_LIMIT s).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
BUILD=${BUILD:-build/release}
PYTHON=${PYTHON:-python3}
REPEAT=${REPEAT:-10}
KFUSE_LIMIT=${KFUSE_LIMIT:-60}
TORCH_LIMIT=${TORCH_LIMIT:-50}
COMPILE_LIMIT=${COMPILE_LIMIT:-80}
CASES=${CASES:-} # e.g. "--T 64 --D 64 --B 1 --H 2" for a quick try of the whole path (both sides)
mkdir -p "$OUT"
LOG=$OUT/attention.txt
KJ=$OUT/attention-kfuse.jsonl
TJ=$OUT/attention-torch.jsonl
: >"$LOG" && : >"$KJ" && : >"$TJ"

. bench/h200_env.sh && h200_env "$BUILD"
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/kfuse-inductor-cache}

say() { echo "== $*" | tee -a "$LOG"; }
{ nvidia-smi -L || true; "$BUILD/kfuse" info || true; } >>"$LOG" 2>&1

say "checks: kfuse verify of the forward's operators (f16 and f32, quick), the sgmat and fusion attention tests"
timeout 60 "$BUILD/kfuse" verify attention attention_lse attention_grad_pack --quick --seed 1 \
    >>"$LOG" 2>&1
echo "verify exit $?" | tee -a "$LOG"
timeout 60 "$BUILD/kfuse_tests" --suite ops attention_sgmat >>"$LOG" 2>&1
echo "attention_sgmat tests exit $?" | tee -a "$LOG"
timeout 60 "$BUILD/kfuse_tests" --suite fusion attention_ >>"$LOG" 2>&1
echo "attention fusion tests exit $?" | tee -a "$LOG"

say "the plans (T 1024, D 64, f16): what explain shows"
"$BUILD/kfuse_bench_attention" --T 1024 --D 64 --dtype f16 --B 1 --H 1 --repeat 1 --explain \
    >>"$LOG" 2>&1

say "kfuse_bench_attention (default kernels, then f16 with KF_NO_SGMAT=1)"
timeout "$KFUSE_LIMIT" "$BUILD/kfuse_bench_attention" $CASES --repeat "$REPEAT" --json >>"$KJ" 2>>"$LOG"
echo "kfuse exit $?" | tee -a "$LOG"
KF_NO_SGMAT=1 timeout "$KFUSE_LIMIT" "$BUILD/kfuse_bench_attention" $CASES --repeat "$REPEAT" \
    --dtype f16 --impl kfuse-fma --json >>"$KJ" 2>>"$LOG"
echo "kfuse-fma exit $?" | tee -a "$LOG"
say "the subgroup-matrix kernel's configurations (KF_ATTN_SGMAT=WxC[/hi]), f16 forward, T 4096"
for cfg in 4x16 4x32 4x32/hi 2x64 8x16/hi; do
    KF_ATTN_SGMAT=$cfg timeout 20 "$BUILD/kfuse_bench_attention" --T 4096 --dtype f16 --fwd-only \
        --repeat "$REPEAT" --impl "sgmat-$cfg" >>"$LOG" 2>&1
done
KF_ATTN_LANES=1 KF_NO_SGMAT=1 timeout "$KFUSE_LIMIT" "$BUILD/kfuse_bench_attention" $CASES \
    --repeat "$REPEAT" --fwd-only --impl kfuse-lanes --json >>"$KJ" 2>>"$LOG"
echo "kfuse-lanes (the session-4 kernel, forward) exit $?" | tee -a "$LOG"
cat "$KJ" >>"$LOG"

say "torch_attention.py: eager and sdpa, then torch.compile"
timeout "$TORCH_LIMIT" "$PYTHON" bench/torch_attention.py $CASES --impl eager sdpa --repeat "$REPEAT" \
    --json "$TJ" --time-limit $((TORCH_LIMIT - 15)) >>"$LOG" 2>&1
echo "torch exit $?" | tee -a "$LOG"
timeout "$COMPILE_LIMIT" "$PYTHON" bench/torch_attention.py $CASES --impl compile --repeat "$REPEAT" \
    --json "$TJ" --time-limit $((COMPILE_LIMIT - 25)) >>"$LOG" 2>&1
echo "torch.compile exit $?" | tee -a "$LOG"

say "side by side (kfuse's throughput as a multiple of each PyTorch implementation's)"
"$PYTHON" bench/torch_attention.py --impl none --kfuse-json "$KJ" "$TJ" >>"$LOG" 2>&1
tail -n 20 "$LOG"
