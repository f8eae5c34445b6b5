#!/usr/bin/env bash
# Session 7, issue 14 item 2 (views without copies): the block and the GPT step with the views
# read in place (src/fuse/rules/strided.c: q, k, v straight from the qkv product in attention's
# kernels; the attention output's permute |> reshape in the projection's and its dW's loads)
# against the same build with them copied as before ($KF_VIEW_COPIES=1), on one GPU in one run.
#   after/   bench/h200_gpt.sh as is (kfuse and PyTorch: gpt-compare.md, gpt-kfuse.jsonl, ...)
#   before/  its kfuse part with KF_VIEW_COPIES=1 (PyTorch not rerun)
#   views.txt  the compact table below
#
#   OUT=bench-out bench/h200_s7_views.sh
#
# Needs what bench/h200_gpt.sh needs (build/release/kfuse_bench_gpt, Dawn, python3 with torch).
# About 2 minutes: h200_gpt.sh's 90 s at most, then the kfuse part again (30 s at most).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT/after" "$OUT/before"
OUT=$OUT/after bench/h200_gpt.sh >/dev/null 2>&1
echo "after: h200_gpt.sh exit $?"
KF_VIEW_COPIES=1 OUT=$OUT/before VARIANTS=none TORCH_LIMIT=2 bench/h200_gpt.sh >/dev/null 2>&1
echo "before: h200_gpt.sh exit $?"
"$PYTHON" - "$OUT" <<'EOF' | tee "$OUT/views.txt"
import json, sys
out = sys.argv[1]
def rows(path):
    r = {}
    try:
        for line in open(path):
            line = line.strip()
            if line.startswith("{"):
                j = json.loads(line)
                r[j["case"]] = j
    except OSError:
        pass
    return r
before, after = rows(out + "/before/gpt-kfuse.jsonl"), rows(out + "/after/gpt-kfuse.jsonl")
print("%-28s %-7s %9s %9s %9s %9s %9s %5s %11s" % ("case", "views", "ms", "plan_ms", "matmul",
      "attention", "other", "disp", "rel_diff"))
for case in sorted(set(before) | set(after)):
    for tag, r in (("copied", before.get(case)), ("inplace", after.get(case))):
        if not r:
            print("%-28s %-7s missing" % (case, tag))
            continue
        print("%-28s %-7s %9.4f %9.4f %9.4f %9.4f %9.4f %5d %11s" % (case, tag, r["ms"],
              r.get("plan_ms", 0), r.get("matmul_ms", 0), r.get("attention_ms", 0),
              r.get("other_ms", 0), r.get("dispatches", 0), r.get("max_rel_diff_unfused", "-")))
EOF
grep -E "^\| (block|gpt)" "$OUT/after/gpt-compare.md" | head -12
