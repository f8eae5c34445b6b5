#!/usr/bin/env bash
# Session 13: attention's f16 backward with dk and dv on subgroup matrices
# (src/ops/attention_grad_sgmat.c) against the FMA kernel it replaces and PyTorch's SDPA, on one
# GPU in one run:
#   checks    kfuse_tests attention_grad_sgmat_gpu (every element of dk and dv against float64),
#             kfuse verify attention_grad_k attention_grad_v attention_grad_q --dtype f16
#   sweep     kfuse_bench_attention_grad --train-only at T 4096, D 64 and 128, per tiling
#             ($KF_ATTN_GRAD_SGMAT: 0 = the FMA kernel, WxC, or the default)
#   side      the whole backward (bwd_ms, train_ms, dkv_ms) at T 1024 and 4096, D 64 and 128,
#             with the FMA kernel (KF_ATTN_GRAD_SGMAT=0) and by default, then SDPA's
#             forward + backward less its forward (bench/torch_attention.py --impl sdpa)
# SWEEP=0 leaves the sweep out. Files in $OUT: s13-bwd.txt (log and tables), s13-bwd.jsonl (kfuse rows, "config" added),
# s13-torch.jsonl.
#
#   OUT=bench-out bench/h200_s13_bwd.sh
#
# Needs a release build (BUILD, default build/release) with its vkmask layer, Dawn
# (deps/dawn), the NVIDIA Vulkan driver, python3 with torch + CUDA.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
B=${BUILD:-build/release}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
LOG=$OUT/s13-bwd.txt
J=$OUT/s13-bwd.jsonl
: >"$LOG" && : >"$J"
. bench/h200_env.sh && h200_env "$B"
echo "== checks" >>"$LOG"
timeout 90 "$B/kfuse_tests" attention_grad_sgmat_gpu >>"$LOG" 2>&1
timeout 60 "$B/kfuse" verify attention_grad_k attention_grad_v attention_grad_q --dtype f16 \
    >>"$LOG" 2>&1
echo "verify: exit $?" >>"$LOG"
row() { # $KF_ATTN_GRAD_SGMAT ("-": unset), the row's label, then the bench's options
    local cfg=$1 label=$2
    shift 2
    local env=KF_ATTN_GRAD_SGMAT=$cfg
    [ "$cfg" = - ] && env=KF_UNSET_=1
    env "$env" timeout 60 "$B/kfuse_bench_attention_grad" --json --repeat 5 "$@" \
        2>>"$LOG" | sed "s/^{/{\"config\": \"$label\", /" >>"$J"
}
echo "== sweep" >>"$LOG"
for D in $([ "${SWEEP:-1}" = 0 ] || echo 64 128); do
    for cfg in 0 4x16 2x16 2x32 1x32 -; do
        row "$cfg" "$cfg" --train-only --T 4096 --D "$D" --dtype f16
    done
done
echo "== side by side" >>"$LOG"
row 0 side-fma --T 1024 --T 4096 --dtype f16
row - side-default --T 1024 --T 4096 --dtype f16
sed -i 's/"config": "side-\([a-z]*\)"/"config": "\1", "side": 1/' "$J"
timeout 60 "$PYTHON" bench/torch_attention.py --impl sdpa --time-limit 40 --T 1024 4096 \
    --dtype f16 --json "$OUT/s13-torch.jsonl" >>"$LOG" 2>&1
"$PYTHON" - "$J" "$OUT/s13-torch.jsonl" >>"$LOG" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
torch = {}
for l in open(sys.argv[2]):
    if l.startswith("{"):
        r = json.loads(l)
        torch[(r["T"], r["D"])] = r.get("bwd_ms")
print("== sweep (T 4096, f16, causal; ms)")
print("config   D   dkv_ms  dq_ms   train_ms  kernel")
for r in rows:
    if "side" not in r:
        k = [x for x in r.get("kernels", "").split(", ") if "_kv" in x]
        print(f"{r['config']:7} {r['D']:4} {r.get('dkv_ms', 0):8.3f} {r.get('dq_ms', 0):7.3f} "
              f"{r.get('train_ms', 0):8.3f}  {k[0] if k else '?'}")
print("== side by side (f16, causal; ms; SDPA: forward + backward less forward)")
print("config     T    D   bwd_ms  grads_ms train_ms dkv_ms  err_dk_tensor  SDPA_bwd  train/SDPA")
for r in rows:
    if "side" in r:
        s = torch.get((r["T"], r["D"]))
        ratio = f"{r['train_ms'] / s:7.1f}x" if s else "-"
        print(f"{r['config']:8} {r['T']:5} {r['D']:4} {r['bwd_ms']:8.3f} {r['grads_ms']:8.3f} "
              f"{r['train_ms']:8.3f} {r.get('dkv_ms', 0):7.3f} {r.get('max_rel_err_dk_tensor', 0):10.2g}"
              f"  {s if s else '-':>8}  {ratio}")
PY
tail -40 "$LOG"
