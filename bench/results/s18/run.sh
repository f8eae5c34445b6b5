#!/usr/bin/env bash
# Session 18's one device command (kept with its results): the cross-entropy forward before
# (build/old/kfuse: main at 3dfaef2's loss.c) and after (one pass, 4 rows x 4 columns a step),
# the rmsnorm_matmul bench cases (bench/h200_rmsmm.sh: the tolerances of 1b807df), the fold's
# sweep over N and tiles (bench/h200_rmsmm_sweep.sh), the block and the GPT step against PyTorch
# (bench/h200_gpt.sh). Each part capped, in this order of importance; everything under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. bench/h200_env.sh && VKMASK=0 h200_env build/release
(nvidia-smi -L; git log --oneline -1; build/release/kfuse info) >"$OUT/info.txt" 2>&1
CE='x: f32[4096, 76]
y: i32[4096]
l = cross_entropy(x, y)'
CE_WIDE='x: f32[16384, 512]
y: i32[16384]
l = cross_entropy(x, y)'
{
    for rep in 1 2; do
        for bin in build/old/kfuse build/release/kfuse; do
            for g in "$CE" "$CE_WIDE"; do
                echo "$rep $bin $(echo "$g" | head -1): $(timeout 60 $bin run -e "$g" --repeat 50 --seed 3 --json --check 2>&1)"
            done
        done
    done
} >"$OUT/ce.txt" 2>&1
OUT=$OUT timeout 200 bench/h200_rmsmm.sh
TILES="64x64x16/8x8/2/0/1 128x128x8/8x8/2/4/1" \
    SHAPES="4096,4096,256 4096,4096,512 4096,4096,1024 4096,4096,2048 4096,4096,4096 1024,4096,4096" \
    OUT=$OUT timeout 200 bench/h200_rmsmm_sweep.sh
PYTHON=${PYTHON:-python3} OUT=$OUT timeout 110 bench/h200_gpt.sh >"$OUT/gpt.log" 2>&1
echo done >"$OUT/done.txt"
