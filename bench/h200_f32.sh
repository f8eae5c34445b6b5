#!/usr/bin/env bash
# Issue 15 items 3 and 4 on one GPU in one run (under 4 minutes), side by side with PyTorch:
#   1. the f32 1024^3 anomaly (slower with Dawn's robustness off than on, in one run): the case
#      alone with robustness off and on, alternated (off, on, on, off), and with the plan 20
#      times back to back per timed submission (kfuse bench --batch 20; PyTorch the same); the
#      bare kernel of both settings timed one dispatch per submission and 20 back to back;
#      which kernel each chose;
#      the tuning cache; the GPU's clocks sampled every 100 ms all along (the third file);
#   2. the register-blocked f32 matmul's variants (src/ops/matmul_blocked.c: tile, raster
#      order, the edge path for ragged shapes) side by side at 1024^3, 4096^3, 8192^3 and
#      4095x4093x4097 (kfuse_matmul_sweep, bare product, each checked at 300 elements), then
#      matmul + bias + GELU in `kfuse bench` with the default and with the candidates forced
#      ($KF_MM_CONFIG), and PyTorch eager (cuBLAS SGEMM, TF32 off) on the same cases;
#   3. the 8-operator chain: kfuse's kernel in `kfuse bench`, hand-written variants of it
#      (kfuse_chain_variants: kfuse's tanh against tanh through exp, 1/2/4 vec4s per
#      invocation), and softmax / rmsnorm / layernorm; PyTorch eager for all, torch.compile
#      for the chain.
#
#   bench/h200_f32.sh [explore|confirm|s6|s6b]
#
# s6b (under 90 s): the rows with their yields exchanged through workgroup memory
# ($KF_ROWS_EXCHANGE=1: contiguous scalar stores, where s6 found the 16-byte-apart ones cost
# rmsnorm * w 0.111 against 0.075 ms by hand) against the default, then torch.compile of the
# rows, all in one run.
#
# s6 (under 150 s; session 6, issue 15 items 3 and 4): first the side by side that the targets
# are read from (kfuse bench's chain_8, rows and f32 matmuls at 4096^3 and 8192^3, then
# PyTorch eager for all and torch.compile for the chain and the rows, same GPU, same run), then
# the variants, in the order of the targets' distance: the row kernels with 512 and 1024 lanes
# a row ($KF_ROWS_LANES; and 1024 lanes of scalars, $KF_ROWS_WIDTH=1) in kfuse bench, hand-written rmsnorm * w variants
# (kfuse_row_variants: vec4 against scalar stores and weight loads, subgroupAdd against the
# workgroup-memory gather, 128-1024 lanes, a row per subgroup, a row copy on the same grid; each
# checked against a CPU rmsnorm), kfuse's chain_8 with its reciprocals by Newton's iteration
# instead of the special-function units ($KF_EW_NEWTON), the hand-written chain with 1, 2 or 4
# reciprocals or 1-2 exps moved to the FMA pipes (kfuse_chain_variants c8r*, c8x*), and the
# f32 matmul's tiles not measured before (kfuse_matmul_sweep) at 4096^3 and 8192^3.
#
# explore (the default) is all of the above; confirm times the built-in choices only: the
# anomaly part, the new built-in tiles against the previous ones (bare product, ragged and
# aligned, 4096 and ~1000), kfuse bench's f32 matmuls, chain_8 and the rows, kfuse's tanh in
# the hand-written chain, and PyTorch eager plus torch.compile for the chain and the rows.
#
# Needs a release build with its bench tools (cmake --preset release && cmake --build --preset
# release: kfuse, kfuse_matmul_sweep, kfuse_chain_variants in build/release), Dawn (deps/dawn or
# $KF_WEBGPU_LIB), the NVIDIA Vulkan driver (VK_DRIVER_FILES), python3 with torch, nvidia-smi.
# Writes three files to $OUT (default bench-out/): h200_f32.log (every table, in order, each
# section stamped with the wall clock), h200_f32.jsonl (every kfuse bench and torch JSON line,
# each tagged with its section) and h200_f32-clocks.csv (nvidia-smi, every 100 ms).
# Environment: OUT, BUILD (build/release), KFUSE, SWEEP, CHAINV, ROWV, PYTHON, BUDGET (seconds;
# 225, confirm 195, s6 145),
# SIZE (full; small tries the whole script on a CPU adapter).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
BUILD=${BUILD:-build/release}
KFUSE=${KFUSE:-$BUILD/kfuse}
SWEEP=${SWEEP:-$BUILD/kfuse_matmul_sweep}
CHAINV=${CHAINV:-$BUILD/kfuse_chain_variants}
ROWV=${ROWV:-$BUILD/kfuse_row_variants}
PYTHON=${PYTHON:-python3}
# SIZE=small: the same steps at sizes a CPU adapter runs in minutes (a try of the script itself)
SIZE=${SIZE:-full}
PART=${1:-explore}
case "$PART" in
explore | confirm | s6 | s6b) ;;
*)
    echo "usage: bench/h200_f32.sh [explore|confirm|s6|s6b]" >&2
    exit 2
    ;;
esac
BUDGET=${BUDGET:-$(case "$PART" in explore) echo 225 ;; confirm) echo 195 ;; s6) echo 145 ;; *) echo 88 ;; esac)}
if [ "$SIZE" = small ]; then
    S1024=64x64x64 S4096=128x128x128 S8192=256x256x256 SRAG=255x253x257 M1=64 MBIG='(128|256)'
    SMID=100x100x100 SMID2=99x101x97
    export KFUSE_CHAIN_ELEMENTS=1048576 KFUSE_ROWS=64x4096
else
    S1024=1024x1024x1024 S4096=4096x4096x4096 S8192=8192x8192x8192 SRAG=4095x4093x4097 M1=1024
    MBIG='(4096|8192)' SMID=1000x1000x1000 SMID2=1023x1021x1025
fi
export KF_WEBGPU_LIB=${KF_WEBGPU_LIB:-$PWD/deps/dawn/libwebgpu_wrapper.so}
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/kfuse-inductor-cache}
mkdir -p "$OUT"
LOG=$OUT/h200_f32.log
JSON=$OUT/h200_f32.jsonl
CLOCKS=$OUT/h200_f32-clocks.csv
TMP=$(mktemp -d)
: >"$LOG"
: >"$JSON"
START=$(date +%s)

left() { echo $((BUDGET - ($(date +%s) - START))); }
section() { printf '\n== %s [%s, %d s]\n' "$1" "$(date -u +%H:%M:%S.%N | cut -c1-12)" \
    $(($(date +%s) - START)) >>"$LOG"; }
# Runs a command with at most `cap` seconds, and never past the budget; its output to the log.
run() { # cap, command...
    local cap=$1 t
    shift
    t=$(left)
    [ "$t" -gt "$cap" ] && t=$cap
    if [ "$t" -le 2 ]; then
        echo "(skipped, out of time: $*)" >>"$LOG"
        return 1
    fi
    timeout "$t" "$@" >>"$LOG" 2>&1
    local rc=$?
    [ $rc -ne 0 ] && echo "(exit $rc: $*)" >>"$LOG"
    return $rc
}
# Appends a JSON-lines file to $JSON, each object tagged with the section.
keep_json() { # file, tag
    [ -s "$1" ] && sed "s/^{/{\"tag\": \"$2\", /" "$1" >>"$JSON"
    rm -f "$1"
}
kbench() { # tag, cap, kfuse bench arguments...
    local tag=$1 cap=$2
    shift 2
    echo "-- $tag: KF_CHECKED=${KF_CHECKED:-} KF_MM_CONFIG=${KF_MM_CONFIG:-} kfuse bench $*" >>"$LOG"
    run "$cap" "$KFUSE" bench --size "$SIZE" "$@" --json-file "$TMP/k.jsonl"
    keep_json "$TMP/k.jsonl" "$tag"
}

SMI_PID=
if command -v nvidia-smi >/dev/null; then
    # The throttle reasons' field has had two names; without either, the clocks alone.
    for reasons in clocks_event_reasons.active clocks_throttle_reasons.active ""; do
        nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,pstate,utilization.gpu${reasons:+,$reasons} \
            --format=csv -lms 100 >"$CLOCKS" 2>&1 &
        SMI_PID=$!
        sleep 1
        kill -0 "$SMI_PID" 2>/dev/null && break
        SMI_PID=
    done
fi

section "setup"
{
    git log -1 --format='commit %H %s' 2>/dev/null
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit \
        --format=csv 2>&1
    "$KFUSE" info 2>&1 | grep -E 'adapter|driver|robustness|vendor-mask'
    cache=${KF_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kfuse}
    echo "matmul tuning cache ($cache/matmul-tiles.txt):"
    cat "$cache/matmul-tiles.txt" 2>/dev/null || echo "  (none: built-in tiles)"
} >>"$LOG" 2>&1

finish() {
    section "done"
    [ -n "$SMI_PID" ] && kill "$SMI_PID" 2>/dev/null
    rm -rf "$TMP"
    ls -la "$OUT" >>"$LOG"
    cat "$LOG"
}

if [ "$PART" = s6b ]; then
    ROWS='^(softmax|rmsnorm_weight|layernorm_affine)$'
    section "s6b: the rows in kfuse bench: yields exchanged (KF_ROWS_EXCHANGE=1), then the default"
    KF_ROWS_EXCHANGE=1 kbench "rows-exchange" 30 --filter "$ROWS" --repeat 20
    kbench "rows" 25 --filter "$ROWS" --repeat 20
    section "s6b: PyTorch eager and torch.compile of the rows (kfuse columns: the exchanged rows)"
    grep -E '"tag": "rows-exchange"' "$JSON" | sed -E 's/^\{"tag": "[a-z-]+", /{/' >"$TMP/kd.jsonl"
    run 30 "$PYTHON" bench/torch_compare.py "$TMP/kd.jsonl" --filter "$ROWS" --repeat 20 \
        --size "$SIZE" --json "$TMP/t2.jsonl"
    keep_json "$TMP/t2.jsonl" "torch-compile"
    finish
    exit 0
fi

if [ "$PART" = s6 ]; then
    ROWS='^(softmax|rmsnorm_weight|layernorm_affine)$'
    section "s6: kfuse bench, the defaults: chain_8, the rows, f32 matmul + bias + GELU"
    kbench "rows" 30 --filter '^(chain_8|softmax|rmsnorm_weight|layernorm_affine)$' --repeat 20
    kbench "mm-default" 30 --filter "^matmul_bias_gelu_f32_$MBIG\$" --repeat 20
    section "s6: PyTorch eager (TF32 off) for all, torch.compile for chain_8 and the rows"
    grep -E '"tag": "(mm-default|rows)"' "$JSON" | sed -E 's/^\{"tag": "[a-z-]+", /{/' >"$TMP/kd.jsonl"
    run 25 "$PYTHON" bench/torch_compare.py "$TMP/kd.jsonl" --filter '^matmul' --no-compile \
        --repeat 20 --size "$SIZE" --json "$TMP/t1.jsonl"
    keep_json "$TMP/t1.jsonl" "torch-eager"
    run 40 "$PYTHON" bench/torch_compare.py "$TMP/kd.jsonl" --filter '^(chain_8|softmax|rmsnorm|layernorm)' \
        --repeat 20 --size "$SIZE" --json "$TMP/t2.jsonl"
    keep_json "$TMP/t2.jsonl" "torch-compile"
    section "s6: rows, hand-written rmsnorm * w variants (lanes a row, stores, weight loads, reduction)"
    run 20 "$ROWV"
    for lanes in 512 1024; do
        KF_ROWS_LANES=$lanes kbench "rows-lanes$lanes" 12 --filter "$ROWS" --repeat 20
    done
    echo "(KF_ROWS_WIDTH=1: scalars, not vec4s, in registers)" >>"$LOG"
    KF_ROWS_WIDTH=1 KF_ROWS_LANES=1024 kbench "rows-lanes1024-width1" 12 --filter "$ROWS" \
        --repeat 20
    section "s6: chain_8, hand-written: reciprocals (c8r*) and exps (c8x*) off the special-function units"
    run 15 "$CHAINV" ident c8e c8r1 c8r2 c8r4 c8x1 c8x2 c8rx
    section "s6: chain_8 in kfuse with its reciprocals by Newton (KF_EW_NEWTON)"
    for set in tanh,sigmoid,gelu; do
        KF_EW_NEWTON=$set kbench "chain-newton-$set" 12 --filter '^chain_8$' --repeat 20
    done
    section "s6: f32 matmul tiles not measured before, bare product (median of 10), 4096^3 and 8192^3"
    run 40 "$SWEEP" -c 128x128x8/8x8/2/4/1 -c 128x128x8/8x8/2/2/1 -c 128x128x16/8x8/2/4/1 \
        -c 128x128x32/8x8/1/4/1 -c 64x128x8/8x8/2/4/1 -c 128x64x8/8x8/2/4/1 \
        -c 128x128x8/16x8/2/4/1 -c 128x256x16/8x8/2/4/1 -c 128x128x8/8x8/2/32/1 $S4096 $S8192
    finish
    exit 0
fi

# 1. The 1024^3 anomaly. Robustness is a device setting, so each setting is its own process;
# the order alternates so that neither always runs first.
if [ "$PART" = explore ]; then
section "anomaly: which kernel each setting runs"
SPEC='a: f32[1024,1024]; b: f32[1024,1024]; bias: f32[1024]; y = matmul(a, b) |> add(bias) |> gelu; out y'
for chk in 0 1; do
    echo "KF_CHECKED=$chk: $(KF_CHECKED=$chk timeout 30 "$KFUSE" explain -e "$SPEC" --wgsl 2>&1 |
        grep -E 'generated by|^dispatch' | tr '\n' ' ')" >>"$LOG"
done
fi
section "anomaly: matmul_bias_gelu_f32_1024 alone, robustness off (0) and on (1), alternated"
for rep in $([ "$PART" = explore ] && echo 1 2 || echo 1); do
    order="0 1"
    [ $((rep % 2)) -eq 0 ] && order="1 0"
    for chk in $order; do
        KF_CHECKED=$chk kbench "anomaly-rep$rep-checked$chk" 25 --filter "^matmul_bias_gelu_f32_$M1\$" \
            --repeat 20
    done
done
section "anomaly: the case with the plan 20 times back to back per timed submission (--batch 20)"
for chk in 0 1; do
    KF_CHECKED=$chk kbench "anomaly-batch20-checked$chk" 25 --filter "^matmul_bias_gelu_f32_$M1\$" \
        --repeat 20 --batch 20
done
if [ "$PART" = explore ]; then
section "anomaly: the bare 1024^3 kernel, one dispatch per submission (-b 1) and 20 back to back"
for chk in 0 1; do
    for b in 1 20; do
        echo "-- KF_CHECKED=$chk -b $b" >>"$LOG"
        KF_CHECKED=$chk run 20 "$SWEEP" -b $b -c 64x64x16/8x8/2 $S1024
    done
done

# 2. The f32 matmul's variants, bare (kfuse_matmul_sweep, robustness off: the default).
section "matmul variants: bare product (median of 10, min), aligned"
run 60 "$SWEEP" -c 128x128x8/8x8/2 -c 128x128x8/8x8/2/4/0 -c 128x128x8/8x8/2/8/0 \
    -c 128x128x8/8x8/2/16/0 -c 128x128x16/8x8/1 -c 128x128x16/8x8/1/8/0 -c 128x256x8/8x16/1 \
    -c 128x128x8/8x16/2 -c 128x256x16/8x8/1 -c 256x128x16/8x8/2 $S4096 $S8192
section "matmul variants: bare product, ragged 4095x4093x4097 (edge path /E=1)"
run 40 "$SWEEP" -c 128x128x16/8x8/1 -c 128x128x16/8x8/1/0/1 -c 128x128x8/8x8/2/0/1 \
    -c 128x128x16/8x8/2/0/1 -c 128x128x8/8x8/2/8/1 -c 128x128x16/8x8/1/8/1 \
    -c 128x256x8/8x16/1/0/1 -c 128x128x8/8x16/2/0/1 $SRAG
section "matmul variants: bare product, 1024^3"
run 20 "$SWEEP" -c 64x64x16/8x8/2 -c 64x64x8/8x8/2 -c 64x64x16/8x8/2/4/0 -c 64x64x8/8x4/2 \
    -c 64x128x8/8x8/2 -c 32x64x16/4x8/2 $S1024

section "matmul + bias + GELU: kfuse bench, built-in tiles and forced variants"
kbench "mm-default" 45 --filter '^matmul_bias_gelu_f32' --repeat 20
KF_MM_CONFIG=128x128x16/8x8/1/0/1 kbench "mm-ragged-edge-16s1" 20 \
    --filter '^matmul_bias_gelu_f32_ragged$' --repeat 20
KF_MM_CONFIG=128x128x8/8x8/2/0/1 kbench "mm-ragged-edge-8s2" 20 \
    --filter '^matmul_bias_gelu_f32_ragged$' --repeat 20
KF_MM_CONFIG=128x128x8/8x8/2/8/0 kbench "mm-raster8" 30 \
    --filter "^matmul_bias_gelu_f32_$MBIG\$" --repeat 20

# 3. The chain and the row kernels in kfuse (their lead over torch.compile must hold).
fi
if [ "$PART" = confirm ]; then
    section "the built-in tiles (edge path, raster order) against the previous ones, bare product"
    run 30 "$SWEEP" -c 128x128x8/8x8/2/4/1 -c 128x128x8/8x8/2 -c 128x128x16/8x8/1 $SRAG $S4096
    run 20 "$SWEEP" -c 64x64x16/8x8/2/0/1 -c 64x64x16/8x8/2 $SMID $SMID2
    section "matmul + bias + GELU: kfuse bench, built-in tiles, robustness off (the default)"
    kbench "mm-default" 45 --filter '^matmul_bias_gelu_f32' --repeat 20
fi
section "chain_8 and the row kernels: kfuse bench"
kbench "rows" 40 --filter '^(chain_8|softmax|rmsnorm_weight|layernorm_affine)$' --repeat 20
section "chain_8 variants: hand-written WGSL (2^28 f32, median of 20)"
if [ "$PART" = explore ]; then
    run 30 "$CHAINV" ident ftanh fth_k fth_e c8 c8k c8e c8m
else
    run 20 "$CHAINV" ident c8k c8e
fi

# PyTorch last: eager for everything (the matmul target is cuBLAS eager), then torch.compile
# for the chain (confirm: and the rows). Each reads kfuse's cases from the default runs above.
section "PyTorch eager: matmul + bias + GELU f32 (TF32 off), chain_8, rows; median of 20"
grep -E '"tag": "(mm-default|rows)"' "$JSON" | sed -E 's/^\{"tag": "[a-z-]+", /{/' >"$TMP/kd.jsonl"
run 60 "$PYTHON" bench/torch_compare.py "$TMP/kd.jsonl" --no-compile --repeat 20 \
    --size "$SIZE" --json "$TMP/t1.jsonl"
keep_json "$TMP/t1.jsonl" "torch-eager"
section "PyTorch: eager and torch.compile (chain_8; confirm: the rows too), median of 20"
COMPILED='^chain_8$'
[ "$PART" = confirm ] && COMPILED='^(chain_8|softmax|rmsnorm_weight|layernorm_affine)$'
run 90 "$PYTHON" bench/torch_compare.py "$TMP/kd.jsonl" --filter "$COMPILED" --repeat 20 \
    --size "$SIZE" --json "$TMP/t2.jsonl"
keep_json "$TMP/t2.jsonl" "torch-compile"

section "PyTorch eager: the 1024^3 case with 20 calls back to back per timed run (--batch 20)"
run 30 "$PYTHON" bench/torch_compare.py "$TMP/kd.jsonl" --filter "^matmul_bias_gelu_f32_$M1\$" \
    --no-compile --repeat 20 --batch 20 --size "$SIZE" --json "$TMP/t3.jsonl"
keep_json "$TMP/t3.jsonl" "torch-eager-batch20"
[ "$PART" = explore ] && section "anomaly again, at the end: robustness off, on"
for chk in $([ "$PART" = explore ] && echo 0 1); do
    KF_CHECKED=$chk kbench "anomaly-end-checked$chk" 25 --filter "^matmul_bias_gelu_f32_$M1\$" \
        --repeat 20
done

finish
