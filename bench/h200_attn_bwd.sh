#!/usr/bin/env bash
# Attention's f16 backward on subgroup matrices (src/ops/attention_grad_sgmat.c: dk + dv since
# session 13 (as bench/h200_s13_bwd.sh), dq + g' since session 14) against the FMA kernels they
# replace and PyTorch's SDPA, on one GPU in one run:
#   checks    kfuse_tests attention_grad_sgmat_gpu attention_grad_q_sgmat_gpu (every element
#             against float64), kfuse verify attention_grad_{k,v,q,stats} --dtype f16
#   sweep     kfuse_bench_attention_grad --train-only at T 4096, D 64 and 128, per tiling
#             (CONFIGS: 0 = the FMA kernel, WxC[/slots], - the default) of the kernels SWEEP
#             names: kv ($KF_ATTN_GRAD_SGMAT), q ($KF_ATTN_GRAD_Q_SGMAT) or "q kv"; SWEEP=0
#             none (default "q kv")
#   side      the whole backward (bwd_ms, train_ms, dq_ms, dkv_ms) at T 1024 and 4096, D 64 and
#             128: the FMA kernels (KF_ATTN_GRAD_SGMAT=0), dk + dv alone on subgroup matrices
#             (KF_ATTN_GRAD_Q_SGMAT=0) and the default, then SDPA's forward + backward less its
#             forward (bench/torch_attention.py --impl sdpa)
# Files in $OUT: bwd.txt (log and tables), bwd.jsonl (kfuse rows, "config" added), torch.jsonl.
#
#   OUT=bench-out bench/h200_attn_bwd.sh
#
# Needs a release build (BUILD, default build/release) with its vkmask layer, Dawn
# (deps/dawn), the NVIDIA Vulkan driver, python3 with torch + CUDA.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
B=${BUILD:-build/release}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
LOG=$OUT/bwd.txt
J=$OUT/bwd.jsonl
SWEEP=${SWEEP:-q kv}
: >"$LOG" && : >"$J"
. bench/h200_env.sh && h200_env "$B"
echo "== checks" >>"$LOG"
for t in attention_grad_sgmat_gpu attention_grad_q_sgmat_gpu; do # one filter a run
    timeout 90 "$B/kfuse_tests" "$t" >>"$LOG" 2>&1
    echo "$t: exit $?" >>"$LOG"
done
timeout 90 "$B/kfuse" verify attention_grad_k attention_grad_v attention_grad_q \
    attention_grad_stats --dtype f16 >>"$LOG" 2>&1
echo "verify: exit $?" >>"$LOG"
row() { # VAR=value ("-": none), the row's label, then the bench's options
    local env=$1 label=$2
    shift 2
    [ "$env" = - ] && env=KF_UNSET_=1
    env "$env" timeout 60 "$B/kfuse_bench_attention_grad" --json --repeat 5 "$@" \
        2>>"$LOG" | sed "s|^{|{\"config\": \"$label\", |" >>"$J"
}
echo "== sweep" >>"$LOG"
for kernel in $([ "$SWEEP" = 0 ] || echo "$SWEEP"); do
    VAR=KF_ATTN_GRAD_Q_SGMAT
    [ "$kernel" = kv ] && VAR=KF_ATTN_GRAD_SGMAT
    for D in 64 128; do
        for cfg in ${CONFIGS:-0 4x16/2 4x32/1 4x16/1 2x16/2 2x32/1 -}; do
            env=$VAR=$cfg
            [ "$cfg" = - ] && env=-
            row "$env" "$kernel:$cfg" --train-only --T 4096 --D "$D" --dtype f16
        done
    done
done
echo "== side by side" >>"$LOG"
row KF_ATTN_GRAD_SGMAT=0 side-fma --T 1024 --T 4096 --dtype f16
row KF_ATTN_GRAD_Q_SGMAT=0 side-kv --T 1024 --T 4096 --dtype f16
row - side-default --T 1024 --T 4096 --dtype f16
sed -i 's/"config": "side-\([a-z]*\)"/"config": "\1", "side": 1/' "$J"
timeout 60 "$PYTHON" bench/torch_attention.py --impl sdpa --time-limit 40 --T 1024 4096 \
    --dtype f16 --json "$OUT/torch.jsonl" >>"$LOG" 2>&1
"$PYTHON" - "$J" "$OUT/torch.jsonl" >>"$LOG" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
torch = {}
for l in open(sys.argv[2]):
    if l.startswith("{"):
        r = json.loads(l)
        torch[(r["T"], r["D"])] = r.get("bwd_ms")
print("== sweep (T 4096, f16, causal; ms)")
print("config       D   dkv_ms  dq_ms   train_ms  err_dq  err_dk  kernels")
for r in rows:
    if "side" not in r:
        k = [x for x in r.get("kernels", "").split(", ") if "_kv" in x or "_q" in x]
        print(f"{r['config']:11} {r['D']:4} {r.get('dkv_ms', 0):8.3f} {r.get('dq_ms', 0):7.3f} "
              f"{r.get('train_ms', 0):8.3f} {r.get('max_rel_err_dq_train', 0):7.2g} "
              f"{r.get('max_rel_err_dk_train_tensor', 0):7.2g}  {' '.join(k)}")
print("== side by side (f16, causal; ms; SDPA: forward + backward less forward)")
print("config     T    D   bwd_ms  grads_ms train_ms dq_ms   dkv_ms  err_dk_tensor  SDPA_bwd  train/SDPA")
for r in rows:
    if "side" in r:
        s = torch.get((r["T"], r["D"]))
        ratio = f"{r['train_ms'] / s:7.1f}x" if s else "-"
        print(f"{r['config']:8} {r['T']:5} {r['D']:4} {r['bwd_ms']:8.3f} {r['grads_ms']:8.3f} "
              f"{r['train_ms']:8.3f} {r.get('dq_ms', 0):7.3f} {r.get('dkv_ms', 0):7.3f} {r.get('max_rel_err_dk_tensor', 0):10.2g}"
              f"  {s if s else '-':>8}  {ratio}")
PY
tail -40 "$LOG"
