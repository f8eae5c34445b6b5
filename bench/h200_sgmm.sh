#!/usr/bin/env bash
# The f16 subgroup-matrix matmul on one GPU (issue 15 item 2), in two parts:
#
#   OUT=bench-out bench/h200_sgmm.sh [sweep|confirm|limits|staging]   (default: confirm)
#
# sweep: the tile configurations and the three ways of filling the workgroup tiles (staging 0
# halves stored in lane order, 1 rows and store order chosen against bank conflicts, 2 16x16
# blocks copied by subgroup matrices), alone and with a fused bias + GELU, at 1024^3, 4096^3,
# 8192^3 and 4095x4097x4093; the transposed products (a^T b, a b^T: the backward's); then the
# default plan (`kfuse bench`) beside PyTorch eager f16 (session 5's first H200 run).
# confirm (session 6): the registers two steps ahead (order 2) beside the defaults at 4096^3,
# 8192^3 and the ragged shape, the transposed products on the new tile against the old, then the
# default plan at all four sizes beside PyTorch eager f16.
# limits (session 6): the probes on the default and on a k-major a tile (layout 1), the variants
# (k-major a, staging 3, 16 subgroups, 48-deep tiles, 128x128 single-buffered, two stages with the
# registers a step ahead: order 1, 16-byte fetches: vector 1), the store phase's share (K of 128 and 256), each at the sizes
# of the targets; PyTorch eager alone at 4096^3 and 8192^3 for the ratio. 139 s of limits in all.
# staging (session 6, after limits): the staging split (fetches against stores), 16-byte fetches,
# 16 subgroups in four shapes, at the four sizes; the plan at 4096^3 by default and with 2x8 subgroups
# forced. 139 s of limits, no PyTorch (its eager times are in limits' run).
#
# Needs what bench/h200.sh needs: the kfuse binary ($KFUSE, default build/release/kfuse), Dawn's
# library (deps/dawn, or $KF_WEBGPU_LIB), the Vulkan loader and the NVIDIA driver, python3 with
# torch. Each part has its own time limit: sweep 236 s in all, confirm 90 s, limits 139 s,
# staging 139 s.
# Writes three files under $OUT: sgmm-sweep.txt (every kfuse sgmat table and each part's exit
# status), sgmm-bench.jsonl (kfuse bench's cases) and sgmm-compare.md (those beside PyTorch).
# Environment: OUT, KFUSE, PYTHON, REPEAT (runs per kernel, median; 10), WARMUP_MS (200).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
KFUSE=${KFUSE:-build/release/kfuse}
PYTHON=${PYTHON:-python3}
REPEAT=${REPEAT:-10}
WARMUP_MS=${WARMUP_MS:-200}
export KF_WEBGPU_LIB=${KF_WEBGPU_LIB:-$PWD/deps/dawn/libwebgpu_wrapper.so}
mkdir -p "$OUT"
VKMASK_DIR=$(dirname "$KFUSE")/vkmask
if [ "${VKMASK:-1}" != 0 ] && [ -f "$VKMASK_DIR/VkLayer_kfuse_vendor_mask.json" ]; then
    export VK_LAYER_PATH=$(cd "$VKMASK_DIR" && pwd) VK_INSTANCE_LAYERS=VK_LAYER_KFUSE_vendor_mask
fi
SWEEP=$OUT/sgmm-sweep.txt
: >"$SWEEP"

sgmat() { # limit, title, kfuse sgmat arguments...
    local limit=$1 title=$2
    shift 2
    echo "## $title: kfuse sgmat $*" >>"$SWEEP"
    local t0=$SECONDS
    timeout "$limit" "$KFUSE" sgmat --repeat "$REPEAT" --warmup-ms "$WARMUP_MS" "$@" >>"$SWEEP" 2>&1
    echo "## exit $? after $((SECONDS - t0)) s" >>"$SWEEP"
    echo >>"$SWEEP"
}

sweep() {
    # The large tiles, one shape at a time (a time limit each, so a slow part loses only its own
    # rows). .../T/R: staging T, R result matrices per store round (left out: the most that fit);
    # 128x256x32/2x4/1/8/0/0/1 is the default before this session. Staging 0 of the 128x128 and
    # 16-deep tiles was measured before (docs/PERFORMANCE.md) and is left out for time. The ragged
    # shape has no whole tiles, so staging 2 is 1 there.
    big=() ragged=()
    for c in 128x256x32/2x4/1/8/0/0/1 128x256x32/2x4/1/8/0/1/1 128x256x32/2x4/1/8/0/2/1 \
        128x256x32/2x4/1/8/0/0 128x256x32/2x4/1/8/0/1 128x256x32/2x4/1/8/0/2 \
        256x128x32/4x2/1/8/0/0 256x128x32/4x2/1/8/0/1 256x128x32/4x2/1/8/0/2 \
        128x128x32/2x4/2/8/0/1 128x128x32/2x4/2/8/0/2 128x128x32/2x2/2/8/0/1 \
        128x128x32/2x2/2/8/0/2 128x256x16/2x4/2/8/0/1 128x256x16/2x4/2/8/0/2 \
        128x128x64/2x2/1/8/0/1 128x128x64/2x2/1/8/0/2; do
        big+=(--config "$c")
    done
    for c in 128x256x32/2x4/1/8/0/0/1 128x256x32/2x4/1/8/0/1/1 128x256x32/2x4/1/8/0/0 \
        128x256x32/2x4/1/8/0/1 256x128x32/4x2/1/8/0/0 256x128x32/4x2/1/8/0/1 \
        128x128x32/2x4/2/8/0/1 128x128x32/2x2/2/8/0/1 128x256x16/2x4/2/8/0/1; do
        ragged+=(--config "$c")
    done
    sgmat 55 "4096^3" --shape 4096x4096x4096 "${big[@]}"
    sgmat 65 "8192^3" --shape 8192x8192x8192 "${big[@]}"
    sgmat 30 "ragged 4095x4097x4093 (MxKxN 4095x4093x4097)" --shape 4095x4093x4097 "${ragged[@]}"
    # 1024^3: the small default tile (64x64) and two mid-sized ones.
    sgmat 12 "1024^3" --shape 1024x1024x1024 --config 64x64x32/2x2/2/0/0/0 \
        --config 64x64x32/2x2/2/0/0/1 --config 64x64x32/2x2/2/0/0/2 --config 128x128x32/2x2/2/8/0/1 \
        --config 128x128x32/2x2/2/8/0/2 --config 128x128x32/2x4/2/8/0/2
    # The backward's products: a^T b (x^T dy) and a b^T (dy w^T) at 4096^3.
    for t in --transpose-a --transpose-b; do
        sgmat 12 "transposed ($t)" "$t" --no-tail --shape 4096x4096x4096 \
            --config 128x256x32/2x4/1/8/0/0 --config 128x256x32/2x4/1/8/0/1 \
            --config 128x256x32/2x4/1/8/0/2 --config 128x128x32/2x2/2/8/0/2
    done
}

# The default plan (what a user gets) beside PyTorch eager in the same run; limits $1, $2 s.
versus_torch() {
    echo "## kfuse bench --size full --filter '^matmul_bias_gelu_f16'" >>"$SWEEP"
    timeout "$1" "$KFUSE" bench --size full --filter '^matmul_bias_gelu_f16' --repeat "$REPEAT" \
        --json-file "$OUT/sgmm-bench.jsonl" >>"$SWEEP" 2>&1
    echo "## exit $?" >>"$SWEEP"
    echo "## torch_compare.py (eager f16): $OUT/sgmm-compare.md" >>"$SWEEP"
    # kfuse's cases beside torch's where kfuse bench finished; torch alone where it did not
    kfuse_json=()
    grep -q '"case"' "$OUT/sgmm-bench.jsonl" 2>/dev/null && kfuse_json=("$OUT/sgmm-bench.jsonl")
    timeout "$2" "$PYTHON" bench/torch_compare.py "${kfuse_json[@]}" --size full \
        --filter '^matmul_bias_gelu_f16' --no-compile --repeat 20 >"$OUT/sgmm-compare.md" \
        2>>"$SWEEP"
    echo "## exit $?" >>"$SWEEP"
}

confirm() {
    # The registers two steps ahead (order 2) beside the defaults (2x8; 256x128 of 4x4 on the
    # ragged shape), the backward's transposed products on 2x8 against 2x4, then the default
    # plan at all four sizes beside PyTorch eager in one run.
    local d=128x256x32/2x4/1/8/0/0/0 e=128x256x32/2x8/1/8/0/0/0 r=256x128x32/4x4/1/8/0/0/0
    sgmat 7 "4096^3, order 2" --shape 4096x4096x4096 --no-tail --config $e --config $e/0/0/2 \
        --config $e/0/0/2/1 --config $r/0/0/2
    sgmat 10 "8192^3, order 2" --shape 8192x8192x8192 --no-tail --config $e --config $e/0/0/2
    sgmat 10 "ragged (MxKxN 4095x4093x4097), order 2" --shape 4095x4093x4097 --config $r \
        --config $r/0/0/2
    for t in --transpose-a --transpose-b; do
        sgmat 5 "transposed ($t)" "$t" --no-tail --shape 4096x4096x4096 --config $d --config $e
    done
    versus_torch 35 18
}

# Session 6: where the K loop's time goes, and the variants built to move it. No torch run but
# eager alone at the two large sizes (for the ratio in the same run); 140 s of limits in all.
limits() {
    local d=128x256x32/2x4/1/8/0/0/0 # the default; then /P/L/O/V: probe, layout, order, vector
    # Bounds (probes: wrong results, times only): tiles staged once (/1), matrices loaded once
    # (/2), both (/3: multiplies and barriers only), on the default and on the k-major a tile.
    sgmat 15 "4096^3 bounds" --shape 4096x4096x4096 --no-tail \
        --config $d --config $d/1 --config $d/2 --config $d/3 \
        --config $d/0/1 --config $d/1/1 --config $d/2/1 --config $d/3/1
    # The variants: staging 3 (both layouts); 16 subgroups; one result matrix a store round so
    # 48-deep tiles fit (and the same round at 32 deep); 128x128 single-buffered (two
    # workgroups a multiprocessor); two stages with the registers a step ahead (O 1) beside the
    # order before (O 0), with and without the k-major a; 16-byte fetches (V 1; b's only where a
    # is k-major).
    sgmat 36 "4096^3 variants" --shape 4096x4096x4096 --no-tail \
        --config $d/0/0/0/1 --config $d/0/1/0/1 \
        --config 128x256x32/2x4/1/8/0/3/0 --config 128x256x32/2x4/1/8/0/3/0/0/1 \
        --config 128x256x32/4x4/1/8/0/0/0 --config 128x256x32/2x8/1/8/0/0/0 \
        --config 256x128x32/4x4/1/8/0/0/0 --config 256x128x32/4x4/1/8/0/0/0/0/1 \
        --config 128x256x32/2x4/1/8/0/0/1 --config 128x256x48/2x4/1/8/0/0/1 \
        --config 128x128x32/2x4/1/8/0/0/0 --config 128x128x32/2x4/1/8/0/0/0/0/1 \
        --config 128x128x64/2x4/1/8/0/0/0/0/1 \
        --config 128x256x16/2x4/2/8/0/0/0 --config 128x256x16/2x4/2/8/0/0/0/0/0/1 \
        --config 128x128x32/2x4/2/8/0/0/0 --config 128x128x32/2x4/2/8/0/0/0/0/0/1 \
        --config 128x128x32/2x4/2/8/0/0/0/0/1/1 --config 64x256x32/1x4/2/8/0/0/0/0/1/1 \
        --config 128x256x16/2x4/2/8/0/0/0/0/0/1/1 --config 128x128x32/2x4/2/8/0/0/0/0/0/1/1
    # The store phase and the tail: K of 4 and 8 steps (the store phase and launch are the rest).
    sgmat 9 "store phase (K 128, 256)" --shape 4096x128x4096 --shape 4096x256x4096 --config $d
    sgmat 28 "8192^3" --shape 8192x8192x8192 --no-tail --config $d --config $d/0/1 \
        --config $d/0/0/0/1 \
        --config $d/3 --config 128x256x32/4x4/1/8/0/0/0 --config 128x256x48/2x4/1/8/0/0/1 \
        --config 128x256x16/2x4/2/8/0/0/0/0/0/1 --config 128x128x32/2x4/2/8/0/0/0/0/1/1
    sgmat 20 "ragged (MxKxN 4095x4093x4097)" --shape 4095x4093x4097 --config $d --config $d/0/1 \
        --config 128x128x32/2x4/2/8/0/0/0/0/1/1
    sgmat 9 "1024^3" --shape 1024x1024x1024 --config 64x64x32/2x2/2/0/0/0 \
        --config 64x64x32/2x2/2/0/0/0/0/0/1 --config 64x64x32/2x2/2/0/0/0/0/0/1/1 \
        --config 64x64x32/2x2/2/0/0/0/0/0/0/1
    echo "## torch_compare.py (eager f16 alone, 4096^3 and 8192^3): $OUT/sgmm-compare.md" >>"$SWEEP"
    timeout 22 "$PYTHON" bench/torch_compare.py --size full \
        --filter '^matmul_bias_gelu_f16_(4096|8192)' --no-compile --repeat 20 \
        >"$OUT/sgmm-compare.md" 2>>"$SWEEP"
    echo "## exit $?" >>"$SWEEP"
}

# Session 6, second run: run 1 (limits) put 44% of the default's time in staging (tiles staged
# once: 0.616 -> 0.347 ms at 4096^3), 14% in the matrix loads, and the multiplies with their
# barriers at 508 TF/s; 16 subgroups of 64x32 (2x8) were the fastest variant (241.7 against
# 223.2). This splits the staging (probe 4: fetches kept, one store; 8: stores kept, fetched
# once), times 16-byte fetches (V 1), no branch around the staging (B 1: the driver may then
# schedule it among the multiplies), other 16-subgroup shapes, and the plan with 2x8 at
# 4096^3. (32 subgroups do not fit: the store phase's scratch holds a matrix per subgroup.)
staging() {
    local d=128x256x32/2x4/1/8/0/0/0 e=128x256x32/2x8/1/8/0/0/0 # the default; 2x8 subgroups
    sgmat 40 "4096^3 staging split, vectors, subgroups" --shape 4096x4096x4096 --no-tail \
        --config $d --config $d/4 --config $d/8 --config $d/0/0/0/1 --config $d/4/0/0/1 \
        --config $d/8/0/0/1 --config $e --config $e/1 --config $e/2 --config $e/3 \
        --config $e/4 --config $e/8 --config $e/0/0/0/1 --config $e/4/0/0/1 \
        --config 128x256x32/2x8/1/8/0/0/1 --config 128x256x32/2x8/1/8/0/3/0 \
        --config 256x128x32/8x2/1/8/0/0/0 --config 128x256x32/2x8/1/8/0/0/1/0/0/0/1 \
        --config 256x128x32/4x4/1/8/0/0/0/0/0/0/1 --config 128x128x32/4x4/1/8/0/0/0 \
        --config 128x256x16/2x8/2/8/0/0/0/0/0/1 --config 128x256x16/2x8/2/8/0/0/0/0/0/1/1 \
        --config $d/0/0/0/0/1 --config $e/0/0/0/0/1 --config $e/0/0/0/1/1 \
        --config 128x256x16/2x8/2/8/0/0/0/0/0/1/0/1 --config 128x256x16/2x4/2/8/0/0/0/0/0/1/0/1 \
        --config 128x128x32/2x4/2/8/0/0/0/0/0/0/0/1
    sgmat 30 "8192^3" --shape 8192x8192x8192 --no-tail --config $d --config $d/0/0/0/1 \
        --config $e --config $e/0/0/0/1 --config 256x128x32/8x2/1/8/0/0/0 \
        --config 256x128x32/4x4/1/8/0/0/0 --config 128x256x16/2x8/2/8/0/0/0/0/0/1 \
        --config $e/0/0/0/0/1 --config 128x256x16/2x8/2/8/0/0/0/0/0/1/0/1
    sgmat 25 "ragged (MxKxN 4095x4093x4097)" --shape 4095x4093x4097 --config $d --config $e \
        --config 256x128x32/8x2/1/8/0/0/0 --config 256x128x32/4x4/1/8/0/0/0 \
        --config 128x256x16/2x8/2/8/0/0/0/0/0/1 --config $e/0/0/0/0/1
    sgmat 8 "1024^3" --shape 1024x1024x1024 --config 64x64x32/2x2/2/0/0/0 \
        --config 64x64x32/2x2/2/0/0/0/0/0/0/0/1 --config 64x64x32/2x4/2/0/0/0
    # The plan (kfuse bench: matmul + bias + GELU fused, f16) by default and with 2x8 forced.
    for cfg in default $e; do
        echo "## kfuse bench --size full --filter '^matmul_bias_gelu_f16_4096' ($cfg)" >>"$SWEEP"
        if [ "$cfg" = default ]; then
            timeout 18 "$KFUSE" bench --size full --filter '^matmul_bias_gelu_f16_4096' \
                --repeat "$REPEAT" >>"$SWEEP" 2>&1
        else
            KF_SGMAT_CONFIG=$cfg timeout 18 "$KFUSE" bench --size full \
                --filter '^matmul_bias_gelu_f16_4096' --repeat "$REPEAT" >>"$SWEEP" 2>&1
        fi
        echo "## exit $?" >>"$SWEEP"
    done
}

case ${1:-confirm} in
limits) limits ;;
staging) staging ;;
sweep)
    sweep
    versus_torch 25 25
    ;;
confirm) confirm ;;
*)
    echo "usage: bench/h200_sgmm.sh [sweep|confirm]" >&2
    exit 2
    ;;
esac
cat "$SWEEP"
[ ! -f "$OUT/sgmm-compare.md" ] || cat "$OUT/sgmm-compare.md"
