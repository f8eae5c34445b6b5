#!/usr/bin/env bash
# Where folding rmsnorm into the matmul (src/fuse/rules/rmsnorm_matmul.c) pays, on one GPU, in
# about 5 minutes: `kfuse run` of rmsnorm(x, g) |> matmul(w), f32, fused (one kernel) and
# --no-fuse (rmsnorm, then matmul), side by side in one process per pair, over the output width
# N (the fold's cost grows with the product, its saving with M x K only), on the default tile
# and on each tile of TILES (KF_MM_CONFIG, which forces both plans' products); then
# `kfuse run --check` of the fused and unfused plans at 4096 x 4096 x 256, f32 and f16.
#
#   OUT=dir bench/h200_rmsmm_sweep.sh
#
# Needs build/release/kfuse, Dawn and the GPU's Vulkan driver (bench/h200_env.sh). Writes
# $OUT/rmsmm_sweep.tsv (m k n tile plan time_ms dispatches) and $OUT/rmsmm_sweep.txt (each
# run's JSON and the checks). Environment: OUT, KFUSE, SHAPES ("m,k,n ..."), TILES, REPEAT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
KFUSE=${KFUSE:-build/release/kfuse}
REPEAT=${REPEAT:-20}
SHAPES=${SHAPES:-"4096,4096,256 4096,4096,512 4096,4096,1024 4096,4096,2048 4096,4096,4096 1024,4096,4096 4096,1024,4096 16384,1024,1024"}
TILES=${TILES:-"64x64x16/8x8/2/0/1 128x128x8/8x8/2/4/1 128x64x8/8x8/2/4/1"}
mkdir -p "$OUT"
TSV=$OUT/rmsmm_sweep.tsv
TXT=$OUT/rmsmm_sweep.txt
printf 'm\tk\tn\ttile\tplan\ttime_ms\tdispatches\n' >"$TSV"
: >"$TXT"
graph() { # m k n dtype
    printf 'x: %s[%s, %s]\ng: %s[%s]\nw: %s[%s, %s]\ny = rmsnorm(x, g) |> matmul(w)\nout y\n' \
        "$4" "$1" "$2" "$4" "$2" "$4" "$2" "$3"
}
field() { sed -n "s/.*\"$1\": \\([0-9.e+-]*\\).*/\\1/p"; }
for shape in $SHAPES; do
    IFS=, read -r m k n <<<"$shape"
    graph "$m" "$k" "$n" f32 >"$OUT/g.kf"
    for tile in default $TILES; do
        for plan in fused unfused; do
            flag=""
            [ "$plan" = unfused ] && flag=--no-fuse
            if [ "$tile" = default ]; then
                json=$(timeout 60 "$KFUSE" run "$OUT/g.kf" $flag --repeat "$REPEAT" --seed 1 --json 2>&1)
            else
                json=$(KF_MM_CONFIG=$tile timeout 60 "$KFUSE" run "$OUT/g.kf" $flag --repeat "$REPEAT" --seed 1 --json 2>&1)
            fi
            echo "$m $k $n $tile $plan: $json" >>"$TXT"
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$m" "$k" "$n" "$tile" "$plan" \
                "$(echo "$json" | field time_ms)" "$(echo "$json" | field dispatches)" >>"$TSV"
        done
    done
done
for dtype in f32 f16; do
    graph 4096 4096 256 "$dtype" >"$OUT/g.kf"
    for flag in "" --no-fuse; do
        echo "== check $dtype 4096x4096x256 ${flag:-fused}" >>"$TXT"
        timeout 120 "$KFUSE" run "$OUT/g.kf" $flag --check --repeat 1 --seed 2 --json >>"$TXT" 2>&1 ||
            echo "exit $?" >>"$TXT"
    done
done
echo "== done" >>"$TXT"
