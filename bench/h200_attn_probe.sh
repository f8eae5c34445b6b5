#!/usr/bin/env bash
# The subgroup-matrix attention kernel (src/ops/attention_sgmat.c) on the H200: is each
# configuration right (the hi/lo split's fix held in run 1 of session 6), and how fast. Two files
# land in $OUT:
#   attn-probe.txt   kfuse_probe_attention (bench/attention/attention_probe.c; PROBE_ARGS,
#                    default --direct: the cases a direct configuration takes) on diagnostic
#                    inputs against float64 and the interpreter; the kernel's GPU test
#                    (kfuse_tests attention_sgmat_gpu); the times below at the end
#   attn-timing.txt  f16 forward, B 2, H 16, T 4096, causal: the sgmat kernel's configurations
#                    (KF_ATTN_SGMAT=WxC[/hi][/direct][/rq][/r2]; 1: the default) at D 64
#                    (CONFIGS64) and D 128 (CONFIGS128); the best at T 1024 (B 8; T1024=0: not);
#                    SDPA=1: PyTorch's SDPA on the same cases
#
#   OUT=bench-out bench/h200_attn_probe.sh
#
# Parts run 1 settled, on request: DIAGNOSE=1 (the probe's variants that found the failure: the
# cast split, hi only, lo only, ...), VERIFY=1 (kfuse verify attention attention_lse with
# KF_ATTN_SGMAT=1), FMA=1 (the register-tiled FMA kernel's times).
# Needs a release build (BUILD, default build/release: kfuse, kfuse_tests,
# kfuse_bench_attention, kfuse_probe_attention (built here if missing), vkmask), Dawn
# (deps/dawn or $KF_WEBGPU_LIB), the NVIDIA Vulkan driver. About 80 s; each part stops itself.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
BUILD=${BUILD:-build/release}
REPEAT=${REPEAT:-5}
mkdir -p "$OUT"
LOG=$OUT/attn-probe.txt
TIM=$OUT/attn-timing.txt
: >"$LOG" && : >"$TIM"

. bench/h200_env.sh && h200_env "$BUILD"
if [ ! -x "$BUILD/kfuse_probe_attention" ]; then
    cmake --build "$BUILD" --target kfuse_probe_attention -j 16 >>"$LOG" 2>&1
fi

say() { echo "== $*" | tee -a "$LOG"; }
{ nvidia-smi -L || true; git log -1 --format='commit %h %s' || true; } >>"$LOG" 2>&1

say "kfuse_probe_attention: configurations x inputs against float64 and the interpreter"
timeout 45 "$BUILD/kfuse_probe_attention" ${PROBE_ARGS:---direct} >>"$LOG" 2>&1
echo "probe exit $?" | tee -a "$LOG"
if [ "${DIAGNOSE:-0}" != 0 ]; then # the variants that found session 5's failure (run 1 of s6)
    timeout 60 "$BUILD/kfuse_probe_attention" --diagnose --quick >>"$LOG" 2>&1
    echo "probe --diagnose exit $?" | tee -a "$LOG"
fi
if [ "${VERIFY:-0}" != 0 ]; then # passed in run 1 of s6 (44/44)
    say "kfuse verify attention attention_lse with the sgmat kernel (KF_ATTN_SGMAT=1)"
    KF_ATTN_SGMAT=1 timeout 40 "$BUILD/kfuse" verify attention attention_lse --quick --seed 1 \
        >>"$LOG" 2>&1
    echo "verify exit $?" | tee -a "$LOG"
fi
timeout 30 "$BUILD/kfuse_tests" --suite ops attention_sgmat_gpu >>"$LOG" 2>&1
echo "attention_sgmat_gpu exit $?" | tee -a "$LOG"

echo "== f16 forward, T 4096, B 2, H 16, causal: sgmat configurations (KF_ATTN_SGMAT) per D" >>"$TIM"
bench() { # T B D config
    KF_ATTN_SGMAT=$4 timeout 20 "$BUILD/kfuse_bench_attention" --T "$1" --B "$2" --D "$3" \
        --H 16 --dtype f16 --fwd-only --repeat "$REPEAT" --impl "sgmat-$4" 2>&1 | grep -v '^NVIDIA\|^impl'
}
for cfg in ${CONFIGS64:-1 4x16/r2 2x16/r2 8x16/direct/r2 4x16/direct/r2 2x16/direct/r2}; do
    bench 4096 2 64 "$cfg" >>"$TIM"
done
for cfg in ${CONFIGS128:-4x16/direct 4x16/direct/r2 2x16/direct 2x16/direct/r2 2x16/r2}; do
    bench 4096 2 128 "$cfg" >>"$TIM"
done
if [ "${T1024:-1}" != 0 ]; then
    echo "== T 1024 (B 8, H 16): the best sgmat configurations of run 2" >>"$TIM"
    bench 1024 8 128 4x16/direct >>"$TIM"
    bench 1024 8 64 4x16/r2 >>"$TIM"
fi
if [ "${SDPA:-0}" != 0 ]; then # PyTorch's F.scaled_dot_product_attention on the same cases
    echo "== PyTorch SDPA, f16, T 4096 (B 2) and T 1024 (B 8), H 16, causal" >>"$TIM"
    timeout 45 "${PYTHON:-python3}" bench/torch_attention.py --T 4096 --D 64 128 --B 2 \
        --dtype f16 --impl sdpa --repeat "$REPEAT" >>"$TIM" 2>&1
    timeout 30 "${PYTHON:-python3}" bench/torch_attention.py --T 1024 --D 64 128 --B 8 \
        --dtype f16 --impl sdpa --repeat "$REPEAT" >>"$TIM" 2>&1
fi
if [ "${FMA:-0}" != 0 ]; then # run 1 of s6: 5.679 / 12.753 ms
    KF_NO_SGMAT=1 timeout 30 "$BUILD/kfuse_bench_attention" --T 4096 --D 64 --D 128 --B 2 \
        --H 16 --dtype f16 --fwd-only --repeat "$REPEAT" --impl kfuse-fma >>"$TIM" 2>&1
    echo "kfuse-fma exit $?" >>"$TIM"
fi
cat "$TIM" >>"$LOG"
