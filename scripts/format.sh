#!/usr/bin/env bash
# Checks (default, or --check) or fixes (--fix) the formatting of kfuse's C sources with
# clang-format-14 and the repository's .clang-format. Optional paths limit it to those files.
# Exit status: 0 when everything is formatted (or was fixed), 1 when files need formatting,
# 2 when clang-format-14 is missing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

MODE=check
FILES=()
for arg in "$@"; do
    case "$arg" in
    --check) MODE=check ;;
    --fix) MODE=fix ;;
    -h | --help)
        sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'
        echo "usage: scripts/format.sh [--check | --fix] [FILE...]"
        exit 0
        ;;
    -*)
        echo "format.sh: unknown option '$arg'" >&2
        exit 2
        ;;
    *) FILES+=("$arg") ;;
    esac
done

CLANG_FORMAT="${CLANG_FORMAT:-clang-format-14}"
if ! command -v "$CLANG_FORMAT" >/dev/null 2>&1; then
    echo "format.sh: $CLANG_FORMAT not found (Debian: apt-get install clang-format-14; scripts/setup.sh installs it)" >&2
    exit 2
fi

if [ "${#FILES[@]}" = 0 ]; then
    # Our sources: tracked and new files, never build output or fetched dependencies.
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        mapfile -t FILES < <(git ls-files --cached --others --exclude-standard -- '*.c' '*.h' |
            grep -v -E '^(build|deps)/' || true)
    else
        mapfile -t FILES < <(find include src tools tests bench examples -name '*.[ch]' 2>/dev/null | sort)
    fi
fi

bad=()
for f in "${FILES[@]}"; do
    [ -f "$f" ] || continue
    if [ "$MODE" = fix ]; then
        "$CLANG_FORMAT" -i --style=file "$f"
    elif ! "$CLANG_FORMAT" --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then
        bad+=("$f")
    fi
done

if [ "${#bad[@]}" != 0 ]; then
    echo "format.sh: ${#bad[@]} file(s) need formatting (scripts/format.sh --fix FILE):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
fi
[ "$MODE" = fix ] && echo "format.sh: formatted ${#FILES[@]} file(s)" || echo "format.sh: ${#FILES[@]} file(s) formatted correctly"
