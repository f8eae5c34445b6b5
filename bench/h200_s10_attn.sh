#!/usr/bin/env bash
# Session 10: the one-pass subgroup-matrix attention forward (kf__attn_sgmat_config.online,
# src/ops/attention_sgmat.c) against the two-pass default and PyTorch's SDPA, f16, causal, on one
# GPU in one run:
#   torch     SDPA f16 at T 4096 (B 2, H 16) and T 1024 (B 4, H 16), D 64 and 128
#   fwd       kfuse_bench_attention --fwd-only per configuration ($KF_ATTN_SGMAT; "-": the
#             default), each D on its own (a configuration that does not fit falls back to
#             another kernel, whose name the row shows)
#   checks    kfuse_tests attention_sgmat_gpu (every element of o and lse against float64, the
#             one-pass configurations at T 1024 included)
# Files in $OUT: s10-attn.txt (log and table), s10-attn.jsonl (rows with "config").
#
#   OUT=bench-out bench/h200_s10_attn.sh
#
# Needs a release build (BUILD, default build/release), Dawn, the NVIDIA Vulkan driver, python3
# with torch + CUDA. Stops starting runs after LIMIT seconds (default 300).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
BUILD=${BUILD:-build/release}
PYTHON=${PYTHON:-python3}
REPEAT=${REPEAT:-10}
LIMIT=${LIMIT:-300}
mkdir -p "$OUT"
LOG=$OUT/s10-attn.txt
J=$OUT/s10-attn.jsonl
: >"$LOG" && : >"$J"
START=$(date +%s)
. bench/h200_env.sh && h200_env "$BUILD"
say() { echo "== $*" | tee -a "$LOG"; }
{ nvidia-smi -L || true; git log -1 --format='commit %h %s' || true; } >>"$LOG" 2>&1
over() { [ $(($(date +%s) - START)) -ge "$LIMIT" ]; }
tag() { sed -n "s#^{#{\"config\": \"$1\", #p" >>"$J"; }

SHAPES=${SHAPES:-"4096:2 1024:4"}
CFG64=${CFG64:-"- 4x32/on 4x16/on 2x64/on 2x32/on 8x16/on 2x32/on/r2 4x16/on/r2 4x32/on/hi 1x64/on/r2 2x32/on/rq"}
CFG128=${CFG128:-"- 4x16/on 2x32/on 2x64/on 4x16/on/rq 2x64/on/rq 2x32/on/r2 1x64/on/r2 2x32/on/hi"}

say "PyTorch SDPA f16"
for s in $SHAPES; do
    timeout 60 "$PYTHON" bench/torch_attention.py --impl sdpa --dtype f16 --T "${s%%:*}" --D 64 128 \
        --B "${s##*:}" --H 16 --repeat "$REPEAT" --json "$OUT/s10-torch-${s%%:*}.jsonl" >>"$LOG" 2>&1
    [ -f "$OUT/s10-torch-${s%%:*}.jsonl" ] && tag sdpa <"$OUT/s10-torch-${s%%:*}.jsonl"
done
for s in $SHAPES; do
    T=${s%%:*} B=${s##*:}
    for D in 64 128; do
        if [ "$D" = 64 ]; then cl=$CFG64; else cl=$CFG128; fi
        say "forward f16 T $T B $B D $D"
        for c in $cl; do
            over && { echo "time limit: $T $D $c skipped" | tee -a "$LOG"; continue; }
            if [ "$c" = - ]; then e="KF_S10=1"; else e="KF_ATTN_SGMAT=$c"; fi
            # shellcheck disable=SC2086
            env $e timeout 25 "$BUILD/kfuse_bench_attention" --T "$T" --D "$D" --B "$B" --H 16 \
                --dtype f16 --fwd-only --repeat "$REPEAT" --json 2>>"$LOG" | tag "$c"
        done
    done
done
say "checks: kfuse_tests attention_sgmat_gpu"
if ! over && [ -x "$BUILD/kfuse_tests" ]; then
    timeout 120 "$BUILD/kfuse_tests" attention_sgmat_gpu 2>&1 | tail -8 >>"$LOG"
fi
say "table (ms; err: worst relative error of the rows checked against float64)"
"$PYTHON" - "$J" <<'PY' | tee -a "$LOG"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
sdpa = {(r["T"], r["D"]): r for r in rows if r["config"] == "sdpa"}
print("config            T    D    fwd_ms  SDPA_ms  kfuse/SDPA  TF/s    err_o   kernel")
for r in rows:
    if r["config"] == "sdpa":
        continue
    b = sdpa.get((r["T"], r["D"]))
    ratio = f"{r['fwd_ms'] / b['fwd_ms']:.2f}x" if b else "-"
    bs = f"{b['fwd_ms']:.4f}" if b else "-"
    print(f"{r['config']:14} {r['T']:5} {r['D']:4} {r['fwd_ms']:9.4f} {bs:>8} {ratio:>9} "
          f"{r.get('fwd_TF/s', r.get('fwd_tflops', 0)):7.2f} {r['max_rel_err_o']:8.2g}  {r.get('kernels', '')}")
PY
echo "total $(($(date +%s) - START)) s" | tee -a "$LOG"
