#!/usr/bin/env bash
# Issue 15, "keep the lead": kfuse's 8-operator chain (2^28 f32) at >= 95% of copy bandwidth.
# Session 6 reached 96.6% of copy only by hand (bench/sweep/chain_variants.c c8r2: tanh's and
# sigmoid's reciprocals by Newton's iteration AND 4 vec4s an invocation); this measures the two
# knobs in kfuse's own emission, side by side in one process (kfuse_chain_knobs: one input, the
# plans timed in interleaved rounds, a copy of the same size as the baseline, every output
# compared with the first variant's), under 4 minutes:
#   1. chain_8 at 2^28: {1, 2, 4} vec4s an invocation ($KF_EW_VEC4S) x {no Newton, tanh and
#      sigmoid by Newton ($KF_EW_NEWTON=tanh,sigmoid)}, plus 4 vec4s with tanh alone and with
#      silu's sigmoid too; median of 30 rounds; then the same again in reverse order (drift);
#   2. the shorter chains 4-7 at 2^28 (where 2 vec4s already reach 98.5-99%): 2 or 4 vec4s,
#      Newton or not, so a new default does not regress them;
#   3. chain_8 at 2^24 and 2^20 (the default rule takes 2 vec4s from 2^17 vec4s up, 1 below):
#      the default against 4 vec4s, Newton or not;
#   4. kfuse bench's chain_8 (its own copy reference, median of 20) with the defaults and with
#      KF_EW_VEC4S=4 KF_EW_NEWTON=tanh,sigmoid, what docs/PERFORMANCE.md's table reads.
#
#   bench/h200_s7_chain.sh
#
# Needs a release build (cmake --preset release && cmake --build --preset release: kfuse and
# kfuse_chain_knobs in build/release), Dawn (deps/dawn or $KF_WEBGPU_LIB), the NVIDIA Vulkan
# driver, nvidia-smi. Writes $OUT/h200_s7_chain.log (every table, each section stamped with the
# wall clock and the seconds since the start), $OUT/h200_s7_chain.jsonl (kfuse bench's JSON,
# tagged) and $OUT/h200_s7_chain-clocks.csv (nvidia-smi every 100 ms); prints the log at the end.
# Environment: OUT (bench-out), BUILD (build/release), KFUSE, KNOBS, BUDGET (seconds, 220),
# SIZE (full; small tries the whole script on a CPU adapter in about a minute).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
BUILD=${BUILD:-build/release}
KFUSE=${KFUSE:-$BUILD/kfuse}
KNOBS=${KNOBS:-$BUILD/kfuse_chain_knobs}
BUDGET=${BUDGET:-220}
SIZE=${SIZE:-full}
if [ "$SIZE" = small ]; then
    N28=1048576 N24=262144 N20=65536 ROUNDS=5
else
    N28=268435456 N24=16777216 N20=1048576 ROUNDS=30
fi
export KF_WEBGPU_LIB=${KF_WEBGPU_LIB:-$PWD/deps/dawn/libwebgpu_wrapper.so}
unset KF_EW_VEC4S KF_EW_NEWTON
mkdir -p "$OUT"
LOG=$OUT/h200_s7_chain.log
JSON=$OUT/h200_s7_chain.jsonl
CLOCKS=$OUT/h200_s7_chain-clocks.csv
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
kbench() { # tag, cap, kfuse bench arguments...
    local tag=$1 cap=$2
    shift 2
    echo "-- $tag: KF_EW_VEC4S=${KF_EW_VEC4S:-} KF_EW_NEWTON=${KF_EW_NEWTON:-} kfuse bench $*" >>"$LOG"
    run "$cap" "$KFUSE" bench --size "$SIZE" "$@" --json-file "$TMP/k.jsonl"
    [ -s "$TMP/k.jsonl" ] && sed "s/^{/{\"tag\": \"$tag\", /" "$TMP/k.jsonl" >>"$JSON"
    rm -f "$TMP/k.jsonl"
}

SMI_PID=
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,pstate,utilization.gpu \
        --format=csv -lms 100 >"$CLOCKS" 2>&1 &
    SMI_PID=$!
fi

section "setup"
{
    git log -1 --format='commit %H %s' 2>/dev/null
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit \
        --format=csv 2>&1
    "$KFUSE" info 2>&1 | grep -E 'adapter|driver|robustness|vendor-mask'
} >>"$LOG" 2>&1

MAIN=(1/none 2/none 4/none 1/tanh,sigmoid 2/tanh,sigmoid 4/tanh,sigmoid 4/tanh 4/tanh,sigmoid,silu)
REVERSED=()
for ((i = ${#MAIN[@]} - 1; i >= 0; i--)); do REVERSED+=("${MAIN[$i]}"); done

section "1. chain_8 at $N28 f32: vec4s an invocation / Newton reciprocals (median of $ROUNDS)"
run 45 "$KNOBS" -n "$N28" -l 8 -r "$ROUNDS" "${MAIN[@]}"
section "1b. the same, variants in reverse order"
run 45 "$KNOBS" -n "$N28" -l 8 -r "$ROUNDS" "${REVERSED[@]}"
section "2. chains 4-7 at $N28 f32: 2 or 4 vec4s, Newton or not"
run 50 "$KNOBS" -n "$N28" -l 4,5,6,7 -r 20 2/none 4/none 2/tanh,sigmoid 4/tanh,sigmoid
section "3. chain_8 at $N24 and $N20 f32: the default rule (d) against 4 vec4s"
run 15 "$KNOBS" -n "$N24" -l 8 -r "$ROUNDS" d/none 4/none d/tanh,sigmoid 4/tanh,sigmoid
run 15 "$KNOBS" -n "$N20" -l 8 -r "$ROUNDS" d/none 4/none d/tanh,sigmoid 4/tanh,sigmoid
section "4. kfuse bench chain_8: the defaults, then 4 vec4s with tanh and sigmoid by Newton"
kbench "default" 35 --filter '^chain_8$' --repeat 20
KF_EW_VEC4S=4 KF_EW_NEWTON=tanh,sigmoid kbench "vec4s4-newton" 35 --filter '^chain_8$' --repeat 20

section "summary: chain_8 at $N28 (1 and 1b; % of copy: the copy's median over the chain's)"
awk '/^== 1\. /{r=1} /^== 1b\. /{r=2} /^== 2\. /{r=0}
     r && $1 == "chain_8" { v=$3; if (!(v in seen)) { seen[v]=1; order[++n]=v }
                            ms[v, r]=$5; pc[v, r]=$12 }
     END { printf "%-22s %10s %10s %9s %9s\n", "vec4s/newton", "ms (1)", "ms (1b)", "% (1)", "% (1b)"
           for (i = 1; i <= n; i++) { v=order[i]
               printf "%-22s %10s %10s %9s %9s\n", v, ms[v, 1], ms[v, 2], pc[v, 1], pc[v, 2] } }' \
    "$LOG" >"$TMP/sum"
grep -E '^(-- |reference copy|chain_8  +[0-9])' "$LOG" | grep -v vec4s/newton >>"$TMP/sum"
cat "$TMP/sum" >>"$LOG"
section "done"
[ -n "$SMI_PID" ] && kill "$SMI_PID" 2>/dev/null
rm -rf "$TMP"
cat "$LOG"
