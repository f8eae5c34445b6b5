#!/usr/bin/env bash
# Session 7's attention sweep on the H200: the f32 attention kernels' tunings side by side at the
# transformer block's shape (B 4, H 16, T 1024, D 64, causal) and the character GPT's (B 64, H 4,
# T 64, D 32), with PyTorch's SDPA as the baseline, in one run:
#   forward    kfuse_bench_attention --fwd-only per variant: the default, the 16-lanes kernel
#              (KF_ATTN_LANES=1), the register-tiled kernel in other tilings
#              (KF_ATTN_TILED=tx,ty,rm,cn[,chunk][/v][/d]: src/ops/attention_tiled.c)
#   backward   kfuse_bench_attention_grad --train-only per variant (what a training step runs:
#              pack, dq + g2, dk + dv), each dispatch timed on its own (pack_ms, dq_ms, dkv_ms):
#              KF_ATTN_GRAD_TILES=rr,rc,wx,wy[,layout] and KF_ATTN_GRAD_LAYOUT
#              (src/ops/attention_grad.c)
#   f16        the forward at T 4096 (B 2, H 16), D 64 and 128: the default (subgroup matrices)
#              and the vec4 tiled FMA kernel (KF_ATTN_SGMAT=0)
#   checks     kfuse verify of the forward and the gradients (f32, quick) in the variants listed
#              in VERIFY_FWD / VERIFY_BWD, on this GPU
# Each row of the benchmarks checks 8 rows of o (or dq and dk) against float64 (err columns) and
# names the kernels that ran (a tiling the device cannot fit falls back to the default, and the
# kernel's name shows it). Files in $OUT: s7-attn.txt (everything, the tables at the end),
# s7-attn.jsonl (every row, with "part", "shape" and "variant").
#
#   OUT=bench-out bench/h200_s7_attn.sh        (from the repository root or anywhere)
#
# Needs a release build (BUILD, default build/release: kfuse, kfuse_bench_attention,
# kfuse_bench_attention_grad, vkmask), Dawn (deps/dawn or $KF_WEBGPU_LIB), the NVIDIA Vulkan
# driver, python3 with torch + CUDA. About 3.5 minutes; each run stops itself (timeouts), and the
# whole stops starting runs after LIMIT seconds (default 270). Variants: FWD_BLOCK, FWD_GPT,
# BWD_BLOCK, BWD_GPT (space-separated; "-" is the default), REPEAT (10); the shapes: BLOCK,
# GPT, F16 (the benchmarks' options).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
BUILD=${BUILD:-build/release}
PYTHON=${PYTHON:-python3}
REPEAT=${REPEAT:-10}
LIMIT=${LIMIT:-270}
mkdir -p "$OUT"
LOG=$OUT/s7-attn.txt
J=$OUT/s7-attn.jsonl
: >"$LOG" && : >"$J"
START=$(date +%s)

. bench/h200_env.sh && h200_env "$BUILD"
say() { echo "== $*" | tee -a "$LOG"; }
{ nvidia-smi -L || true; git log -1 --format='commit %h %s' || true; } >>"$LOG" 2>&1

BLOCK=${BLOCK:-"--T 1024 --D 64 --B 4 --H 16"}
GPT=${GPT:-"--T 64 --D 32 --B 64 --H 4"}
F16=${F16:-"--T 4096 --D 64 --D 128 --B 2 --H 16"}
FWD_BLOCK=${FWD_BLOCK:-"- lanes 16,16,4,2/v 8,16,4,2/v 8,16,8,2/v 8,16,4,4/v 16,16,4,2/v/d 8,16,4,2/v/d 8,16,4,4/v/d 16,8,4,2/v/d 8,32,4,2/v/d 8,16,4,2,64/v/d 8,16,4,4,64/v/d 8,32,4,4,16/v/d 16,16,2,2/v/d"}
FWD_GPT=${FWD_GPT:-"- 16,16,4,2 16,16,4,2/v 8,16,4,2/v 8,8,4,2/v 16,4,4,2/v 16,16,4,2/v/d 8,16,4,2/v/d 8,8,4,2/v/d 16,4,4,2/v/d 8,4,4,2/v/d 8,8,2,2/v/d 8,16,2,2/v/d"}
BWD_BLOCK=${BWD_BLOCK:-"- L3 2,2,16,16,3 4,4,8,8,3 2,4,8,16,3 4,1,16,8,3 4,2,8,8,3 2,2,16,8,3 4,2,16,4,3 1,2,16,16,3"}
BWD_GPT=${BWD_GPT:-"- L3 4,2,8,8,3 4,4,8,8,3 2,2,8,16,3 4,2,8,4,3 2,4,8,8,3 1,4,8,16,3 2,2,8,8,3 4,1,8,8,3 2,4,8,16,3"}
VERIFY_FWD=${VERIFY_FWD:-"16,16,4,2/v/d 8,16,4,4/v/d"}
VERIFY_BWD=${VERIFY_BWD:-"L3 2,4,8,16,3"}

over() { [ $(($(date +%s) - START)) -ge "$LIMIT" ]; }
# tag PART SHAPE VARIANT: the JSON lines of stdin with those fields added, into $J
tag() { sed -n "s#^{#{\"part\": \"$1\", \"shape\": \"$2\", \"variant\": \"$3\", #p" >>"$J"; }
# the environment of a forward variant ("-": none; "lanes": the 16-lanes kernel)
fwd_env() {
    case "$1" in
    -) echo "KF_S7=1" ;;
    lanes) echo "KF_ATTN_LANES=1" ;;
    *) echo "KF_ATTN_TILED=$1" ;;
    esac
}
# ... of a backward variant ("Ln": the default tiling in layout n)
bwd_env() {
    case "$1" in
    -) echo "KF_S7=1" ;;
    L*) echo "KF_ATTN_GRAD_LAYOUT=${1#L}" ;;
    *) echo "KF_ATTN_GRAD_TILES=$1" ;;
    esac
}

say "PyTorch SDPA (f32: block and GPT shapes; f16: T 4096 B 2 and the block's shape)"
timeout 60 "$PYTHON" bench/torch_attention.py --impl sdpa --dtype f32 $BLOCK --repeat "$REPEAT" \
    --json "$OUT/s7-torch-block.jsonl" >>"$LOG" 2>&1
timeout 30 "$PYTHON" bench/torch_attention.py --impl sdpa --dtype f32 $GPT --repeat "$REPEAT" \
    --json "$OUT/s7-torch-gpt.jsonl" >>"$LOG" 2>&1
timeout 40 "$PYTHON" bench/torch_attention.py --impl sdpa --dtype f16 --T 4096 --D 64 128 --B 2 \
    --H 16 --repeat "$REPEAT" --json "$OUT/s7-torch-f16.jsonl" >>"$LOG" 2>&1
echo "torch exit $?" | tee -a "$LOG"
[ -f "$OUT/s7-torch-block.jsonl" ] && tag torch block sdpa <"$OUT/s7-torch-block.jsonl"
[ -f "$OUT/s7-torch-gpt.jsonl" ] && tag torch gpt sdpa <"$OUT/s7-torch-gpt.jsonl"
[ -f "$OUT/s7-torch-f16.jsonl" ] && tag torch f16 sdpa <"$OUT/s7-torch-f16.jsonl"

for shape in block gpt; do
    if [ $shape = block ]; then args=$BLOCK fl=$FWD_BLOCK bl=$BWD_BLOCK; else args=$GPT fl=$FWD_GPT bl=$BWD_GPT; fi
    say "forward variants (f32, $shape: $args)"
    for v in $fl; do
        over && { echo "time limit: forward $shape $v skipped" | tee -a "$LOG"; continue; }
        # shellcheck disable=SC2086
        env $(fwd_env "$v") timeout 20 "$BUILD/kfuse_bench_attention" $args --dtype f32 \
            --fwd-only --repeat "$REPEAT" --json --impl "kfuse" 2>>"$LOG" | tag fwd $shape "$v"
    done
    say "backward variants (f32, $shape; the training backward: pack, dq + g2, dk + dv)"
    for v in $bl; do
        over && { echo "time limit: backward $shape $v skipped" | tee -a "$LOG"; continue; }
        # shellcheck disable=SC2086
        env $(bwd_env "$v") timeout 25 "$BUILD/kfuse_bench_attention_grad" $args --dtype f32 \
            --train-only --repeat "$REPEAT" --json 2>>"$LOG" | tag bwd $shape "$v"
    done
done

say "f16 forward, T 4096, B 2, H 16: the default (subgroup matrices) and vec4 tiled FMA kernels"
FWD_F16=${FWD_F16:-"- 16,16,4,2/v/d 8,16,4,4/v/d 8,16,4,2,64/v/d"}
for v in $FWD_F16; do
    over && { echo "time limit: f16 $v skipped" | tee -a "$LOG"; continue; }
    e=$(fwd_env "$v")
    [ "$v" != - ] && e="$e KF_ATTN_SGMAT=0"
    # shellcheck disable=SC2086
    env $e timeout 25 "$BUILD/kfuse_bench_attention" $F16 --dtype f16 --fwd-only \
        --repeat "$REPEAT" --json 2>>"$LOG" | tag f16 f16 "$v"
done

say "checks on this GPU: kfuse verify (f32, quick) in the variants"
for v in $VERIFY_FWD; do
    over && break
    echo "-- forward $v" >>"$LOG"
    env $(fwd_env "$v") timeout 30 "$BUILD/kfuse" verify attention attention_lse --quick \
        --dtype f32 --forward --seed 7 2>&1 | tail -3 >>"$LOG"
done
for v in $VERIFY_BWD; do
    over && break
    echo "-- backward $v" >>"$LOG"
    env $(bwd_env "$v") timeout 30 "$BUILD/kfuse" verify attention_grad_q attention_grad_stats \
        attention_grad_k attention_grad_v --quick --dtype f32 --forward --seed 7 2>&1 |
        tail -3 >>"$LOG"
done

say "tables (ms; err: worst relative error of the rows checked against float64)"
"$PYTHON" - "$J" <<'PY' | tee -a "$LOG"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
sdpa = {(r["shape"], r["dtype"], r["T"], r["D"]): r for r in rows if r["part"] == "torch"}
def base(r):
    shape = "f16" if r["part"] == "f16" else r["shape"]
    return sdpa.get((shape, r["dtype"], r["T"], r["D"]))
for part, shape in (("fwd", "block"), ("fwd", "gpt"), ("f16", "f16")):
    sel = [r for r in rows if r["part"] == part and r["shape"] == shape]
    if not sel:
        continue
    print(f"\nforward {shape}: variant, T, D, fwd_ms, SDPA fwd_ms, kfuse/SDPA time, err_o, kernel")
    for r in sel:
        b = base(r)
        bs = f"{b['fwd_ms']:.4f}" if b else "-"
        ratio = f"{r['fwd_ms'] / b['fwd_ms']:.2f}x" if b and b["fwd_ms"] > 0 else "-"
        print(f"  {r['variant']:16} {r['T']:5} {r['D']:4} {r['fwd_ms']:9.4f} {bs:>9} {ratio:>7} "
              f"{r['max_rel_err_o']:9.2g}  {r.get('kernels', '')}")
for shape in ("block", "gpt"):
    sel = [r for r in rows if r["part"] == "bwd" and r["shape"] == shape]
    if not sel:
        continue
    b = sdpa.get((shape, "f32", sel[0]["T"], sel[0]["D"]))
    bs = f"SDPA bwd {b['bwd_ms']:.4f} ms" if b else "no SDPA row"
    print(f"\nbackward {shape} ({bs}): variant, train_ms, pack, dq, dkv, err_dq, err_dk, kernels")
    for r in sel:
        print(f"  {r['variant']:16} {r['train_ms']:9.4f} {r['pack_ms']:8.4f} {r['dq_ms']:8.4f} "
              f"{r['dkv_ms']:8.4f} {r['max_rel_err_dq_train']:9.2g} "
              f"{r['max_rel_err_dk_train_tensor']:9.2g}  {r.get('kernels', '')}")
PY
echo "total $(($(date +%s) - START)) s" | tee -a "$LOG"
