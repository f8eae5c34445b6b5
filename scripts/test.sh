#!/usr/bin/env bash
# The whole test suite, as CI runs it: the format check, then the debug and asan-ubsan presets
# built with -Werror and run through CTest, against the real WebGPU library (scripts/setup.sh
# fetches it). Then the second shader path: the debug build's `kfuse verify --quick` and suite
# gles (random programs against Vulkan) on Dawn's OpenGL ES backend, where Tint writes GLSL
# instead of SPIR-V (llvmpipe through EGL, no display needed). Prints a summary and exits
# non-zero if any step failed.
#
#   scripts/test.sh            everything
#   scripts/test.sh debug      only the named presets (debug, asan-ubsan, release)
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PRESETS=()
for arg in "$@"; do
    case "$arg" in
    debug | asan-ubsan | release) PRESETS+=("$arg") ;;
    -h | --help)
        sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "test.sh: unknown argument '$arg' (presets: debug, asan-ubsan, release)" >&2
        exit 2
        ;;
    esac
done
[ "${#PRESETS[@]}" = 0 ] && PRESETS=(debug asan-ubsan)
JOBS="$(nproc 2>/dev/null || echo 2)"

SUMMARY=()
FAILED=0
record() { # name, status, detail
    SUMMARY+=("$(printf '  %-22s %s' "$1" "$2${3:+ ($3)}")")
    [ "$2" = ok ] || FAILED=1
}
banner() { printf '\n==== %s ====\n' "$1"; }

if [ ! -f deps/dawn/.package ] && [ -z "${KF_WEBGPU_LIB:-}" ]; then
    echo "test.sh: no WebGPU library in deps/dawn; run scripts/setup.sh first (or set KF_WEBGPU_LIB)" >&2
    exit 1
fi

banner "format check (clang-format-14)"
if scripts/format.sh --check; then
    record "format check" ok
else
    record "format check" FAILED "scripts/format.sh --fix"
fi

mkdir -p build
for preset in "${PRESETS[@]}"; do
    log="build/test-$preset.log"
    banner "build $preset (-Werror)"
    if cmake --preset "$preset" -DKF_WERROR=ON >"$log" 2>&1 &&
        cmake --build --preset "$preset" -j "$JOBS" >>"$log" 2>&1; then
        record "build $preset" ok
    else
        tail -n 40 "$log"
        record "build $preset" FAILED "$log"
        record "tests $preset" skipped
        continue
    fi
    banner "tests $preset"
    ctest_out="build/test-$preset-ctest.log"
    ctest --preset "$preset" -j "$JOBS" 2>&1 | tee "$ctest_out"
    status=${PIPESTATUS[0]}
    counts="$(grep -E 'tests passed|tests failed' "$ctest_out" | tail -n 1 | sed 's/^ *//')"
    if [ "$status" = 0 ]; then
        record "tests $preset" ok "$counts"
    else
        record "tests $preset" FAILED "$counts"
    fi
done

# The GLES path: the same checks through Tint's GLSL output (a miscompile on one path shows as a
# difference from the other). Needs the debug build above.
if [[ " ${PRESETS[*]} " == *" debug "* ]] && [ -x build/debug/kfuse ]; then
    banner "tests gles (KF_BACKEND=gles, debug build)"
    gles_log="build/test-gles.log"
    # The two halves are separate processes, run side by side (one per core).
    export EGL_PLATFORM="${EGL_PLATFORM:-surfaceless}"
    KF_BACKEND=gles build/debug/kfuse verify --quick ${KFUSE_TEST_SEED:+--seed "$KFUSE_TEST_SEED"} \
        >"$gles_log" 2>&1 &
    verify_pid=$!
    build/debug/kfuse_tests --suite gles >"$gles_log.suite" 2>&1
    suite_status=$?
    wait "$verify_pid"
    verify_status=$?
    cat "$gles_log.suite" >>"$gles_log"
    if [ "$verify_status" = 0 ] && [ "$suite_status" = 0 ]; then
        record "tests gles" ok "$(grep -E 'checks,' "$gles_log" | tail -n 1); $(tail -n 1 "$gles_log")"
    else
        tail -n 40 "$gles_log"
        record "tests gles" FAILED "$gles_log"
    fi
fi

printf '\n==== summary ====\n'
printf '%s\n' "${SUMMARY[@]}"
if [ "$FAILED" = 0 ]; then
    echo "test.sh: all passed"
else
    echo "test.sh: FAILED"
fi
exit "$FAILED"
