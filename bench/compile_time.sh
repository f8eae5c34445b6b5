#!/usr/bin/env bash
# kf_graph_compile's time on this machine's adapter, pipelines created together
# (CreateComputePipelineAsync) against one after another, cold and warm:
#   cold: kfuse's disk cache off (KF_PIPELINE_CACHE=off) and Mesa's shader cache in a fresh folder;
#   warm: a second process on the same folders, both caches on (kfuse's in its own fresh folder).
# Plans: the demo's MLP layer (examples/mlp.kf), the 2-layer MLP (examples/mlp_2layer.kf) and a
# many-kernel plan (N matmul + bias + GELU layers of different widths, N distinct pipelines).
# Prints one JSON line per measurement (bench/compile/compile_time.c). Usage:
#   bench/compile_time.sh [BUILD_DIR (default build/debug)] [N (default 12)]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build/debug}"
MANY="${2:-12}"
BIN="$BUILD/compile_time"
cc -std=c11 -O1 -D_GNU_SOURCE -I"$ROOT/include" -I"$ROOT/src" "$ROOT/bench/compile/compile_time.c" \
    "$BUILD/libkfuse.a" -lm -ldl -lpthread -o "$BIN"
for plan in "$ROOT/examples/mlp.kf" "$ROOT/examples/mlp_2layer.kf" "--many $MANY"; do
    for mode in async sync; do
        kc=$(mktemp -d)
        mc=$(mktemp -d)
        # shellcheck disable=SC2086
        KF_PIPELINE_CACHE=off MESA_SHADER_CACHE_DIR=$mc "$BIN" $plan $mode | sed 's/^{/{"cache": "cold", /'
        KF_PIPELINE_CACHE=$kc MESA_SHADER_CACHE_DIR=$mc "$BIN" $plan $mode >/dev/null # fills kfuse's
        # shellcheck disable=SC2086
        KF_PIPELINE_CACHE=$kc MESA_SHADER_CACHE_DIR=$mc "$BIN" $plan $mode | sed 's/^{/{"cache": "warm", /'
        rm -rf "$kc" "$mc"
    done
done
