#!/usr/bin/env bash
# Makes a PNG of throughput against size from `kfuse bench --json` output (and, optionally, the
# --json output of bench/torch_compare.py for PyTorch's lines):
#
#   bench/plot.sh KFUSE.jsonl [TORCH.jsonl] [OUT.png]      (OUT defaults to docs/perf.png)
#
# Needs python3 and gnuplot (Debian: gnuplot-nox).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kfuse_json=${1:?usage: bench/plot.sh KFUSE.jsonl [TORCH.jsonl] [OUT.png]}
torch_json=""
out="$here/../docs/perf.png"
if [ $# -ge 2 ]; then
    case "$2" in
    *.png) out=$2 ;;
    *) torch_json=$2 ;;
    esac
fi
if [ $# -ge 3 ]; then
    out=$3
fi
command -v gnuplot >/dev/null || { echo "plot.sh: needs gnuplot (apt-get install gnuplot-nox)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

python3 - "$kfuse_json" "$torch_json" "$tmp" > "$tmp/title" <<'PY'
import json, math, sys

kfuse_path, torch_path, tmp = sys.argv[1], sys.argv[2], sys.argv[3]
device, refs, cases, torch_cases = {}, {}, {}, {}
for line in open(kfuse_path):
    if not line.startswith("{"):
        continue
    o = json.loads(line)
    if o.get("kind") == "device":
        device = o
    elif o.get("kind") == "reference" and o.get("status") == "ok":
        refs[o["reference"]] = o["value"]
    elif o.get("kind") == "case":
        cases[o["case"]] = o
if torch_path:
    for line in open(torch_path):
        if line.startswith("{"):
            o = json.loads(line)
            if o.get("kind") == "torch_case":
                torch_cases[o["case"]] = o

def val(v):
    return "NaN" if v is None or not math.isfinite(v) else "%.6g" % v

def kfuse(name, key):
    c = cases.get(name)
    return c.get(key) if c and c.get("status") == "ok" else None

def torch(name, key):
    t = torch_cases.get(name)
    ms = t.get(key) if t else None
    if not ms:
        return None
    return t["work"] / (ms * 1e-3) / (1e12 if t["metric"] == "TFLOP/s" else 1e9)

with open(tmp + "/chains.dat", "w") as f:
    for ops in range(1, 9):
        n = "chain_%d" % ops
        f.write("%d %s %s %s %s %s\n" % (ops, val(kfuse(n, "fused_value")),
                val(kfuse(n, "unfused_value")), val(refs.get("copy")),
                val(torch(n, "eager_ms")), val(torch(n, "compile_ms"))))

with open(tmp + "/matmul.dat", "w") as f:
    # The f32 cases in bench order (square sizes, then the ragged one), f16 alongside.
    for n32, c in cases.items():
        if c.get("family") != "matmul_bias_gelu" or c.get("dtype") != "f32":
            continue
        n16 = n32.replace("_f32_", "_f16_")
        f.write('"%s" %s\n' % (c["size"], " ".join(val(v) for v in (
            kfuse(n32, "fused_value"), kfuse(n32, "unfused_value"),
            kfuse(n16, "fused_value"), kfuse(n16, "unfused_value"),
            torch(n32, "eager_ms"), torch(n32, "compile_ms"),
            torch(n16, "eager_ms"), torch(n16, "compile_ms"),
            refs.get("matmul_f32"), refs.get("matmul_f16")))))

name = device.get("device") or device.get("description") or "unknown device"
print("kfuse bench on %s (%s), %s sizes" % (name, device.get("backend", "?"),
                                             device.get("size", "?")))
PY

title=$(sed 's/"/\\"/g' "$tmp/title")
# A series with no numbers at all (no torch file, no f16) is left out with a warning: expected.
gnuplot -e "chains='$tmp/chains.dat'; matmul='$tmp/matmul.dat'; out='$out'; title=\"$title\"" \
    "$here/plot.gp" 2>&1 | { grep -v "no valid points" || true; } >&2
echo "wrote $out"
