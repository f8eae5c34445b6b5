#!/usr/bin/env bash
# The subgroup-matrix attention kernel (src/ops/attention_sgmat.c) on the H200: is each
# configuration right (the hi/lo split's fix held in run 1 of session 6), and how fast. Two files
# land in $OUT:
#   attn-probe.txt   kfuse_probe_attention (bench/attention/attention_probe.c): the kernel's
#                    configurations (default, direct) on diagnostic inputs against float64 and
#                    the interpreter; the kernel's GPU test (kfuse_tests attention_sgmat_gpu)
#   attn-timing.txt  f16 forward at T 4096, D 64 and 128 (B 2, H 16, causal) for the sgmat
#                    kernel's configurations (KF_ATTN_SGMAT=WxC[/hi][/direct][/rq]; 1: the
#                    default; CONFIGS="..." replaces the list); then T 1024 (B 8), the default
#                    against the FMA kernel; PyTorch's SDPA on the same cases (SDPA=0: not)
#
#   OUT=bench-out bench/h200_attn_probe.sh
#
# Parts run 1 settled, on request: DIAGNOSE=1 (the probe's variants that found the failure: the
# cast split, hi only, lo only, ...), VERIFY=1 (kfuse verify attention attention_lse with
# KF_ATTN_SGMAT=1), FMA=1 (the register-tiled FMA kernel's times).
# Needs a release build (BUILD, default build/release: kfuse, kfuse_tests,
# kfuse_bench_attention, kfuse_probe_attention (built here if missing), vkmask), Dawn
# (deps/dawn or $KF_WEBGPU_LIB), the NVIDIA Vulkan driver. About 130 s; each part stops itself.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
BUILD=${BUILD:-build/release}
REPEAT=${REPEAT:-5}
mkdir -p "$OUT"
LOG=$OUT/attn-probe.txt
TIM=$OUT/attn-timing.txt
: >"$LOG" && : >"$TIM"

if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1' && ls .gl/*.deb >/dev/null 2>&1; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
NV_ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ] && [ -f "$NV_ICD" ]; then
    export VK_DRIVER_FILES=$NV_ICD
fi
export KF_WEBGPU_LIB=${KF_WEBGPU_LIB:-$PWD/deps/dawn/libwebgpu_wrapper.so}
# kfuse's vendor-mask layer (docs/runtime.md): with it this Dawn offers shader-f16 on NVIDIA
if [ "${VKMASK:-1}" != 0 ] && [ -f "$BUILD/vkmask/VkLayer_kfuse_vendor_mask.json" ]; then
    export VK_LAYER_PATH=$(cd "$BUILD/vkmask" && pwd) VK_INSTANCE_LAYERS=VK_LAYER_KFUSE_vendor_mask
fi
if [ ! -x "$BUILD/kfuse_probe_attention" ]; then
    cmake --build "$BUILD" --target kfuse_probe_attention -j 16 >>"$LOG" 2>&1
fi

say() { echo "== $*" | tee -a "$LOG"; }
{ nvidia-smi -L || true; git log -1 --format='commit %h %s' || true; } >>"$LOG" 2>&1

say "kfuse_probe_attention: configurations x inputs against float64 and the interpreter"
timeout 45 "$BUILD/kfuse_probe_attention" >>"$LOG" 2>&1
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

echo "== f16 forward, T 4096, B 2, H 16, causal: sgmat configurations (KF_ATTN_SGMAT) and FMA" >>"$TIM"
for cfg in ${CONFIGS:-1 8x16/direct 4x16/direct 4x32/direct 1x64/direct 4x16/direct/rq 4x32/direct/rq}; do
    KF_ATTN_SGMAT=$cfg timeout 20 "$BUILD/kfuse_bench_attention" --T 4096 --D 64 --D 128 \
        --B 2 --H 16 --dtype f16 --fwd-only --repeat "$REPEAT" --impl "sgmat-$cfg" >>"$TIM" 2>&1
    echo "sgmat-$cfg exit $?" >>"$TIM"
done
echo "== T 1024 (B 8, H 16): the default sgmat kernel and the FMA kernel" >>"$TIM"
KF_ATTN_SGMAT=1 timeout 20 "$BUILD/kfuse_bench_attention" --T 1024 --D 64 --D 128 --B 8 --H 16 \
    --dtype f16 --fwd-only --repeat "$REPEAT" --impl sgmat-1 >>"$TIM" 2>&1
KF_NO_SGMAT=1 timeout 20 "$BUILD/kfuse_bench_attention" --T 1024 --D 64 --D 128 --B 8 --H 16 \
    --dtype f16 --fwd-only --repeat "$REPEAT" --impl kfuse-fma >>"$TIM" 2>&1
if [ "${SDPA:-1}" != 0 ]; then # PyTorch's F.scaled_dot_product_attention on the same cases
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
