#!/usr/bin/env bash
# Sets up this machine to build and run kfuse, then builds it (build/release).
#
#   - Debian 12: installs what is missing (compiler, CMake, clang-format, the Vulkan loader, a
#     Mesa >= 23 Vulkan driver from bookworm-backports, Mesa's EGL and libEGL.so for the second
#     shader path (Dawn's OpenGL ES backend, which test.sh checks), npm only when there is none);
#   - fetches Dawn (npm package bun-webgpu-linux-x64@0.1.7) into deps/dawn, checking the
#     tarball against the pinned sha512;
#   - configures and builds the release preset, then checks that a WebGPU adapter is found.
#
# Safe to run again: each step does nothing when its work is already done, and the script is
# quiet then. On another distribution it lists what kfuse needs instead of guessing how to
# install it. Options: -v (show every command's output), --no-build, --bundle-vulkan-loader
# (copy this machine's libvulkan.so.1 into deps/dawn, where Dawn looks first, for carrying
# deps/dawn to a GPU machine that has the GPU's Vulkan driver but no Vulkan loader).
set -Eeuo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

DAWN_PACKAGE="bun-webgpu-linux-x64"
DAWN_VERSION="0.1.7"
DAWN_INTEGRITY="sha512-UEP7UZdEhx9otvkZczjsszL8ZVlrODANQvgl+C88/bNVmxDoFi7w1fWzGi1sZyakiETjmtFDq2/xCLhbSZxjqw=="
DAWN_DIR="$ROOT/deps/dawn"
DAWN_LIB="libwebgpu_wrapper.so"
MESA_MIN="23"
LOG="$ROOT/build/setup.log"

VERBOSE=0
BUILD=1
BUNDLE_LOADER=0
for arg in "$@"; do
    case "$arg" in
    -v | --verbose) VERBOSE=1 ;;
    --no-build) BUILD=0 ;;
    --bundle-vulkan-loader) BUNDLE_LOADER=1 ;;
    -h | --help)
        awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"
        exit 0
        ;;
    *)
        echo "setup.sh: unknown option '$arg' (try --help)" >&2
        exit 2
        ;;
    esac
done

STEP="starting"
HINT=""
mkdir -p "$ROOT/build"
: >"$LOG"

on_error() {
    local status=$?
    echo "setup.sh: step '$STEP' failed (exit $status)." >&2
    if [ -s "$LOG" ] && [ "$VERBOSE" = 0 ]; then
        echo "---- last lines of $LOG ----" >&2
        tail -n 25 "$LOG" >&2
        echo "----" >&2
    fi
    [ -n "$HINT" ] && echo "$HINT" >&2
    exit "$status"
}
trap on_error ERR
TMP=""
trap '[ -z "$TMP" ] || rm -rf "$TMP"' EXIT

say() { echo "setup: $*"; }
step() {
    STEP="$1"
    HINT="${2:-}"
}
# Runs a command; its output goes to the log unless -v.
run() {
    if [ "$VERBOSE" = 1 ]; then
        "$@"
    else
        "$@" >>"$LOG" 2>&1
    fi
}

have() { command -v "$1" >/dev/null 2>&1; }
# The dynamic loader's cache (ldconfig is in /sbin, outside a user's PATH on Debian).
ldconfig_p() { "$(command -v ldconfig || echo /sbin/ldconfig)" -p 2>/dev/null || true; }

is_debian12() {
    [ -r /etc/os-release ] || return 1
    # shellcheck disable=SC1091
    . /etc/os-release
    [ "${ID:-}" = debian ] && [ "${VERSION_ID:-}" = 12 ]
}

pkg_version() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || true; }
pkg_installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]; }

as_root() {
    if [ "$(id -u)" = 0 ]; then
        "$@"
    elif have sudo && sudo -n true 2>/dev/null; then
        sudo "$@"
    else
        echo "setup.sh: installing packages needs root. Run as root, or run:" >&2
        echo "  sudo $*" >&2
        return 1
    fi
}

# The Debian mirror this machine already uses for bookworm (so no host is assumed).
debian_mirror() {
    local uri=""
    if [ -r /etc/apt/sources.list.d/debian.sources ]; then
        uri="$(awk '/^URIs:/ {u=$2} /^Suites:/ && / bookworm( |$)/ {print u; exit}' \
            /etc/apt/sources.list.d/debian.sources)"
    fi
    if [ -z "$uri" ]; then
        uri="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
            awk '$1 == "deb" && $3 == "bookworm" && !found {print $2; found = 1}')"
    fi
    echo "$uri"
}

has_backports_source() {
    grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/
}

setup_debian() {
    local missing=()
    local p
    # python3-torch and python3-numpy: the external-reference tests (autodiff against torch.autograd)
    # python3-sklearn: the digits dataset (examples/digits); gnuplot-nox: kfuse train --plot
    # libegl-dev: Dawn's GLES backend opens libEGL.so, a name only the -dev package provides.
    for p in gcc make libc6-dev cmake clang-format-14 libvulkan1 libegl-dev ca-certificates \
        python3-numpy python3-torch python3-sklearn gnuplot-nox; do
        pkg_installed "$p" || missing+=("$p")
    done
    if ! have npm; then
        missing+=(npm)
    fi
    local mesa
    mesa="$(pkg_version mesa-vulkan-drivers)"
    local need_mesa=0
    if [ -z "$mesa" ] || ! dpkg --compare-versions "$mesa" ge "$MESA_MIN"; then
        need_mesa=1
    fi
    # Mesa's EGL (llvmpipe through GLES) from the same Mesa as the Vulkan driver
    local egl
    egl="$(pkg_version libegl-mesa0)"
    if [ -z "$egl" ] || ! dpkg --compare-versions "$egl" ge "$MESA_MIN"; then
        need_mesa=1
    fi
    if [ "${#missing[@]}" = 0 ] && [ "$need_mesa" = 0 ]; then
        return 0
    fi

    if [ "$(id -u)" != 0 ] && ! { have sudo && sudo -n true 2>/dev/null; }; then
        echo "setup.sh: kfuse needs these Debian packages, and installing them needs root:" >&2
        echo "  ${missing[*]}$([ "$need_mesa" = 1 ] && echo " mesa-vulkan-drivers libegl-mesa0 (>= $MESA_MIN, from bookworm-backports)")" >&2
        echo "Run setup.sh as root (or with sudo), or install them and run it again." >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    if [ "$need_mesa" = 1 ] && ! has_backports_source; then
        step "add the bookworm-backports apt source" \
            "Dawn's Vulkan backend needs Mesa >= $MESA_MIN, which Debian 12 has in bookworm-backports. Add that suite to your apt sources and run setup.sh again."
        local mirror
        mirror="$(debian_mirror)"
        [ -n "$mirror" ] || {
            echo "setup.sh: found no bookworm entry in the apt sources to derive a mirror from" >&2
            false
        }
        say "adding bookworm-backports ($mirror) for Mesa >= $MESA_MIN"
        printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
            "$mirror" | as_root tee /etc/apt/sources.list.d/kfuse-backports.sources >/dev/null
    fi

    step "apt-get update" "Check the network and the apt sources, then run setup.sh again."
    local what=("${missing[@]}")
    [ "$need_mesa" = 1 ] && what+=("mesa-vulkan-drivers libegl-mesa0 (bookworm-backports)")
    say "installing: ${what[*]}"
    run as_root apt-get -o DPkg::Lock::Timeout=600 update -q
    if [ "${#missing[@]}" != 0 ]; then
        step "apt-get install ${missing[*]}"
        run as_root apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}"
    fi
    if [ "$need_mesa" = 1 ]; then
        step "apt-get install -t bookworm-backports mesa-vulkan-drivers" \
            "Dawn needs Mesa >= $MESA_MIN for its Vulkan backend (lavapipe on CPUs)."
        run as_root apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends -t bookworm-backports \
            mesa-vulkan-drivers libvulkan1 libegl-mesa0
        mesa="$(pkg_version mesa-vulkan-drivers)"
        dpkg --compare-versions "$mesa" ge "$MESA_MIN" || {
            echo "setup.sh: mesa-vulkan-drivers is $mesa after the install; kfuse needs >= $MESA_MIN" >&2
            false
        }
    fi
}

# Elsewhere: say what is needed and stop if it is missing.
check_other_system() {
    local missing=()
    have cc || have gcc || have clang || missing+=("a C11 compiler (gcc or clang)")
    have cmake || missing+=("CMake >= 3.20")
    have make || have ninja || missing+=("make or ninja")
    have npm || missing+=("npm (to fetch Dawn from the npm registry)")
    ldconfig_p | grep 'libvulkan\.so\.1' >/dev/null || missing+=("the Vulkan loader (libvulkan.so.1)")
    [ -n "${VK_ICD_FILENAMES:-}${VK_DRIVER_FILES:-}" ] ||
        compgen -G '/usr/share/vulkan/icd.d/*.json' >/dev/null ||
        compgen -G '/etc/vulkan/icd.d/*.json' >/dev/null ||
        compgen -G '/usr/local/share/vulkan/icd.d/*.json' >/dev/null ||
        missing+=("a Vulkan driver Dawn accepts: your GPU's, or Mesa >= $MESA_MIN (lavapipe) for CPUs")
    have clang-format-14 || echo "setup: note: the format check (scripts/format.sh) wants clang-format-14" >&2
    ldconfig_p | grep 'libEGL\.so ' >/dev/null ||
        echo "setup: note: the GLES shader path (test.sh) wants libEGL.so and Mesa's EGL driver" >&2
    if [ "${#missing[@]}" != 0 ]; then
        echo "setup.sh: this is not Debian 12, so setup.sh installs nothing; kfuse needs:" >&2
        printf '  - %s\n' "${missing[@]}" >&2
        echo "Install those with your system's package manager and run setup.sh again." >&2
        exit 1
    fi
}

# sha512 of a file in npm's integrity form (sha512-<base64>).
integrity_of() {
    node -e 'const c=require("crypto"),f=require("fs");process.stdout.write("sha512-"+c.createHash("sha512").update(f.readFileSync(process.argv[1])).digest("base64"))' "$1"
}

fetch_dawn() {
    local stamp="$DAWN_DIR/.package"
    local want="$DAWN_PACKAGE@$DAWN_VERSION $DAWN_INTEGRITY"
    if [ -f "$DAWN_DIR/$DAWN_LIB" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        return 0
    fi
    step "fetch Dawn ($DAWN_PACKAGE@$DAWN_VERSION from npm)" \
        "setup.sh fetches Dawn with 'npm pack'; check that npm can reach its registry (npm ping)."
    say "fetching Dawn ($DAWN_PACKAGE@$DAWN_VERSION)"
    TMP="$(mktemp -d)"
    local tmp="$TMP"
    run npm pack --silent --pack-destination "$tmp" "$DAWN_PACKAGE@$DAWN_VERSION"
    local tarball
    tarball="$(ls "$tmp"/*.tgz)"

    step "check Dawn's integrity" \
        "The tarball npm returned does not match the pinned sha512; nothing was installed."
    local got
    got="$(integrity_of "$tarball")"
    if [ "$got" != "$DAWN_INTEGRITY" ]; then
        echo "setup.sh: $DAWN_PACKAGE@$DAWN_VERSION has integrity $got, expected $DAWN_INTEGRITY" >&2
        false
    fi

    step "unpack Dawn into deps/dawn"
    mkdir -p "$tmp/x"
    tar -xzf "$tarball" -C "$tmp/x"
    [ -f "$tmp/x/package/$DAWN_LIB" ] || {
        echo "setup.sh: the package has no $DAWN_LIB" >&2
        false
    }
    rm -rf "$DAWN_DIR"
    mkdir -p "$DAWN_DIR"
    cp "$tmp/x/package/$DAWN_LIB" "$tmp/x/package/LICENSE" "$DAWN_DIR/"
    echo "$want" >"$stamp"
    rm -rf "$TMP"
    TMP=""
}

build() {
    step "configure (cmake --preset release)" "See $LOG for CMake's output."
    run cmake --preset release
    step "build (cmake --build --preset release)" "See $LOG for the compiler's output."
    run cmake --build --preset release -j "$(nproc 2>/dev/null || echo 2)"
}

check_adapter() {
    step "find a WebGPU adapter (build/release/kfuse info)"
    local out
    if ! out="$("$ROOT/build/release/kfuse" info 2>&1)"; then
        echo "$out" >&2
        false
    fi
    ADAPTER="$(echo "$out" | awk -F': *' '/^adapter/ && !found {print $2; found = 1}')"
    BACKEND="$(echo "$out" | awk -F': *' '/^backend/ && !found {print $2; found = 1}')"
}

if is_debian12; then
    setup_debian
else
    step "check the system"
    check_other_system
fi
have npm || {
    echo "setup.sh: npm is needed to fetch Dawn" >&2
    exit 1
}
fetch_dawn
if [ "$BUNDLE_LOADER" = 1 ]; then
    step "copy the Vulkan loader into deps/dawn" "Install libvulkan1 on this machine first."
    loader="$(ldconfig_p | awk '/libvulkan\.so\.1 .*x86-64/ && !found {print $NF; found = 1}')"
    [ -n "$loader" ] || {
        echo "setup.sh: no libvulkan.so.1 on this machine to copy" >&2
        false
    }
    cp -L "$loader" "$DAWN_DIR/libvulkan.so.1"
    say "copied $loader into deps/dawn"
fi
ADAPTER="(not checked)"
BACKEND=""
if [ "$BUILD" = 1 ]; then
    build
    check_adapter
fi
trap - ERR
if [ "$BUILD" = 1 ]; then
    say "ready: Dawn $DAWN_VERSION in deps/dawn, build/release/kfuse, adapter: $ADAPTER${BACKEND:+ ($BACKEND)}"
else
    say "ready: Dawn $DAWN_VERSION in deps/dawn (not built: --no-build)"
fi
