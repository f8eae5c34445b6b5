#!/usr/bin/env bash
# The install stands on its own (CTest "install"): `cmake --install` into a temporary prefix,
# then a consumer program built against that prefix only, both ways (the CMake package and
# pkg-config), must find the Dawn installed beside libkfuse and run. The build tree's Dawn is
# switched off for the run (KF_NO_BUILD_TREE_DAWN=1, KF_WEBGPU_LIB unset), so a pass cannot come
# from deps/dawn; deps/dawn itself is never touched.
#
#   tests/install/test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD="$1"
SRC="$2"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
PREFIX="$TMP/prefix"

cmake --install "$BUILD" --prefix "$PREFIX" >"$TMP/install.log" 2>&1 || {
    cat "$TMP/install.log"
    exit 1
}
LIBDIR="$(dirname "$(find "$PREFIX" -name 'libkfuse.so' | head -n 1)")"
for f in "$PREFIX/include/kfuse.h" "$LIBDIR/kfuse/libwebgpu_wrapper.so" \
    "$LIBDIR/kfuse/vkmask/VkLayer_kfuse_vendor_mask.json" "$LIBDIR/pkgconfig/kfuse.pc" \
    "$LIBDIR/cmake/kfuse/kfuseConfig.cmake" "$PREFIX/bin/kfuse"; do
    [ -e "$f" ] || {
        echo "install: $f is missing" >&2
        exit 1
    }
done

unset KF_WEBGPU_LIB
export KF_NO_BUILD_TREE_DAWN=1
check() { # name, output file
    grep -q "installed beside" "$2" || {
        echo "install: $1 did not load the installed Dawn:" >&2
        cat "$2" >&2
        exit 1
    }
    echo "install: $1: $(grep -m1 'library' "$2")"
}

# the installed command-line program (statically linked: finds <bin>/../lib/kfuse)
"$PREFIX/bin/kfuse" info >"$TMP/info.txt" 2>&1 || {
    cat "$TMP/info.txt" >&2
    exit 1
}
check "kfuse info" "$TMP/info.txt"
# the installed vendor-mask layer: on a Vulkan adapter with f16 (lavapipe), masked as NVIDIA by
# hand, the context must turn the installed layer on itself and get f16 back
if grep -q "^backend: *vulkan" "$TMP/info.txt" && grep -q "shader-f16 *yes" "$TMP/info.txt"; then
    VK_LAYER_PATH="$LIBDIR/kfuse/vkmask" VK_INSTANCE_LAYERS=VK_LAYER_KFUSE_vendor_mask \
        KF_VKMASK_VENDOR=0x10de "$PREFIX/bin/kfuse" info >"$TMP/masked.txt" 2>&1 || {
        cat "$TMP/masked.txt" >&2
        exit 1
    }
    grep -q "vendor-mask layer.* on" "$TMP/masked.txt" && grep -q "shader-f16 *yes" "$TMP/masked.txt" || {
        echo "install: the installed vendor-mask layer was not enabled on a (masked) NVIDIA adapter:" >&2
        cat "$TMP/masked.txt" >&2
        exit 1
    }
    echo "install: vendor-mask layer enabled from $LIBDIR/kfuse/vkmask"
fi

# the CMake package
cp -r "$SRC/tests/install/consumer" "$TMP/consumer"
cmake -S "$TMP/consumer" -B "$TMP/consumer/build" -DCMAKE_PREFIX_PATH="$PREFIX" \
    >"$TMP/cmake.log" 2>&1 && cmake --build "$TMP/consumer/build" >>"$TMP/cmake.log" 2>&1 || {
    cat "$TMP/cmake.log" >&2
    exit 1
}
"$TMP/consumer/build/consumer" >"$TMP/cmake-run.txt" 2>&1 || {
    cat "$TMP/cmake-run.txt" >&2
    exit 1
}
check "find_package(kfuse) consumer" "$TMP/cmake-run.txt"

# pkg-config
export PKG_CONFIG_PATH="$LIBDIR/pkgconfig"
# shellcheck disable=SC2046
cc -o "$TMP/consumer-pc" "$TMP/consumer/main.c" $(pkg-config --cflags --libs kfuse) \
    -Wl,-rpath,"$LIBDIR" || exit 1
"$TMP/consumer-pc" >"$TMP/pc-run.txt" 2>&1 || {
    cat "$TMP/pc-run.txt" >&2
    exit 1
}
check "pkg-config consumer" "$TMP/pc-run.txt"
echo "install: ok"
