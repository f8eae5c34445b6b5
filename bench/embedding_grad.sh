#!/usr/bin/env bash
# embedding_grad (src/ops/embedding.c) on one device, under 60 s: the kernel's shapes
# ($KF_EMBGRAD_CONFIG=lanes,ids per lane,columns per lane,partial sums; "walk" is the V*C*N kernel
# it replaced) at the character GPT's sizes (V 65-256, C 128-256, N 4096-8192), ids uniform in
# [0, V) and Zipf-skewed (p(v) ~ 1/(v+1): a text's spaces and e's, where one row takes 1/5 of the
# ids), timed by `kfuse run` (GPU timestamps, median of 20); then kfuse verify of the default and
# of the other shapes at the quick sizes.
#
#   bench/embedding_grad.sh
#
# Needs a release build (build/release/kfuse; KFUSE overrides), Dawn (deps/dawn or
# $KF_WEBGPU_LIB) and python3 (standard library only: it writes the ids as .npy). Writes two files
# to $OUT (default bench-out/): embgrad.txt (the table, then verify's summaries) and embgrad.jsonl
# (one line per run: config, sizes, ids, kfuse run's JSON).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
KFUSE=${KFUSE:-build/release/kfuse}
export KF_WEBGPU_LIB=${KF_WEBGPU_LIB:-$PWD/deps/dawn/libwebgpu_wrapper.so}
mkdir -p "$OUT"
TXT=$OUT/embgrad.txt
JSON=$OUT/embgrad.jsonl
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
: >"$TXT"
: >"$JSON"
CONFIGS=${CONFIGS:-"default walk cpu 64,32,4,8 128,16,2,8 256,8,1,4 256,8,2,8 256,8,4,4"}
# V C N ids
SIZES=${SIZES:-"65,128,4096,uniform 65,128,4096,zipf 65,256,8192,zipf 256,256,8192,uniform"}

ids_npy() { # V N kind path
    python3 - "$@" <<'EOF'
import random, struct, sys
v, n, kind, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
rng = random.Random(20261202)
w = [1.0 / (i + 1) for i in range(v)] if kind == "zipf" else [1.0] * v
ids = rng.choices(range(v), weights=w, k=n)
head = "{'descr': '<i4', 'fortran_order': False, 'shape': (%d,), }" % n
head += " " * (63 - (len(head) + 10) % 64) + "\n"
with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode())
    f.write(struct.pack("<%di" % n, *ids))
EOF
}

echo "== $(date -u +%H:%M:%S) embedding_grad, ms (median of 20, GPU timestamps); $("$KFUSE" info 2>&1 | grep -m1 "^adapter:" | sed "s/^adapter: *//")" >>"$TXT"
printf '%-12s' config >>"$TXT"
for s in $SIZES; do printf ' %24s' "$s" >>"$TXT"; done
echo >>"$TXT"
for cfg in $CONFIGS; do
    printf '%-12s' "$cfg" >>"$TXT"
    for s in $SIZES; do
        IFS=, read -r V C N kind <<<"$s"
        spec=$TMP/eg.kf
        printf 'table: f32[%s, %s]; ids: i32[%s]; dy: f32[%s, %s]\ndt = embedding_grad(table, ids, dy)\nout dt\n' \
            "$V" "$C" "$N" "$N" "$C" >"$spec"
        [ -f "$TMP/ids-$V-$N-$kind.npy" ] || ids_npy "$V" "$N" "$kind" "$TMP/ids-$V-$N-$kind.npy"
        if [ "$cfg" = default ]; then unset KF_EMBGRAD_CONFIG; else export KF_EMBGRAD_CONFIG=$cfg; fi
        line=$(timeout 20 "$KFUSE" run "$spec" --input "ids=$TMP/ids-$V-$N-$kind.npy" --repeat 20 \
            --seed 7 --check --json 2>&1 | tail -n 1)
        echo "{\"config\": \"$cfg\", \"size\": \"$s\", \"run\": ${line:-null}}" >>"$JSON"
        ms=$(echo "$line" | sed -n 's/.*"time_ms": \([0-9.e+-]*\).*/\1/p')
        ok=$(echo "$line" | sed -n 's/.*"passed": \([a-z]*\).*/\1/p')
        printf ' %24s' "${ms:-?}${ok:+ $ok}" >>"$TXT"
    done
    echo >>"$TXT"
done
unset KF_EMBGRAD_CONFIG
echo "== $(date -u +%H:%M:%S) kfuse verify embedding embedding_grad --quick, per config" >>"$TXT"
for cfg in $CONFIGS; do
    [ "$cfg" = walk ] && continue
    if [ "$cfg" = default ]; then unset KF_EMBGRAD_CONFIG; else export KF_EMBGRAD_CONFIG=$cfg; fi
    echo "$cfg: $(timeout 30 "$KFUSE" verify embedding embedding_grad --quick 2>&1 | grep -E 'checks,|failed:' | tr '\n' ' ')" >>"$TXT"
done
echo "== $(date -u +%H:%M:%S) done" >>"$TXT"
