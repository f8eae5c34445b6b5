#!/usr/bin/env bash
# Attention's backward on the GPU, side by side with PyTorch's SDPA backward: the same cases
# (T 4096 (ARGS="--T 1024 --T 4096" for both), D 64 and 128, f16 and f32, H 16, B = 8192 / T,
# causal) through
#   build/release/kfuse_bench_attention_grad   bwd_ms (prep + dq + dk/dv paired), unpaired_ms
#                                              (dk and dv in two kernels), prep_ms, grads_ms,
#                                              train_ms (what autodiff runs from the forward's o
#                                              and lse: pack + dq/g2 + dk/dv) and its errors
#   bench/torch_attention.py --impl sdpa       F.scaled_dot_product_attention: bwd_ms = its
#                                              forward + backward step less its forward
# and a joined table; then, on this GPU, `kfuse verify attention_grad_stats attention_grad_k`
# and the pair kernel's tests (kfuse_tests --suite fusion attention_dk), where
# the binaries are built. Three files in $OUT (default bench-out/): attention_bwd_kfuse.jsonl,
# attention_bwd_torch.jsonl, attention_bwd.txt (the table, the checks, the logs). At most 90 s
# (each part has its own timeout: 45 + 20 + 2 x 8 (tilings besides the default 4,4,8,8 / 4,1,8,8;
# one the device's workgroup memory does not fit runs the default) + 7 + 2; the benchmark prints
# a line a case, so a cut run still tables the cases it finished). T 4096 only by default.
#
#   bench/attention_bwd.sh            (from the repository root or anywhere)
#
# Needs: a release build (cmake --preset release && cmake --build --preset release), Dawn's
# library (deps/dawn or $KF_WEBGPU_LIB), the NVIDIA Vulkan driver, python3 with torch + CUDA.
# Environment: OUT, BENCH (the binary), KF_WEBGPU_LIB, PYTHON, ARGS (extra options for both, e.g.
# "--T 1024 --D 64"), VKMASK=0 to leave kfuse's vendor-mask layer out (with it this Dawn offers
# shader-f16 on NVIDIA, so the f16 cases run).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
BENCH=${BENCH:-build/release/kfuse_bench_attention_grad}
BIN=$(dirname "$BENCH")
PYTHON=${PYTHON:-python3}
ARGS=${ARGS:---T 4096} # the device queue's 90 s: T 4096 only unless asked
export KF_WEBGPU_LIB=${KF_WEBGPU_LIB:-$PWD/deps/dawn/libwebgpu_wrapper.so}
mkdir -p "$OUT"
VKMASK_DIR=$(dirname "$BENCH")/vkmask
if [ "${VKMASK:-1}" != 0 ] && [ -f "$VKMASK_DIR/VkLayer_kfuse_vendor_mask.json" ]; then
    export VK_LAYER_PATH=$(cd "$VKMASK_DIR" && pwd) VK_INSTANCE_LAYERS=VK_LAYER_KFUSE_vendor_mask
fi

# shellcheck disable=SC2086
timeout 45 "$BENCH" --json --repeat 3 $ARGS >"$OUT/attention_bwd_kfuse.jsonl" 2>"$OUT/attention_bwd.txt"
echo "kfuse: exit $?" >>"$OUT/attention_bwd.txt"
# shellcheck disable=SC2086
timeout 20 "$PYTHON" bench/torch_attention.py --impl sdpa --time-limit 15 \
    --json "$OUT/attention_bwd_torch.jsonl" $ARGS >>"$OUT/attention_bwd.txt" 2>&1
echo "torch: exit $?" >>"$OUT/attention_bwd.txt"

"$PYTHON" - "$OUT/attention_bwd_kfuse.jsonl" "$OUT/attention_bwd_torch.jsonl" \
    >>"$OUT/attention_bwd.txt" <<'PY'
import json, sys
def rows(path):
    out = {}
    try:
        lines = open(path).readlines()
    except OSError:
        return out
    for line in lines:
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            out[(r["dtype"], r["T"], r["D"])] = r
    return out
k, t = rows(sys.argv[1]), rows(sys.argv[2])
print(f"{'type':4} {'T':>5} {'D':>4} {'kfuse bwd':>10} {'unpaired':>9} {'prep':>8} {'grads':>8} "
      f"{'SDPA bwd':>9} {'kfuse/SDPA':>10} {'err_dq':>8} {'err_dk':>8} {'train':>8} "
      f"{'train/SDPA':>10} {'err_dq_tr':>9} {'err_dk_tr':>9}   (ms)")
for key in sorted(set(k) | set(t)):
    a, b = k.get(key), t.get(key)
    f = lambda r, n: f"{r[n]:.3f}" if r and n in r else "-"
    ratio = f"{a['bwd_ms'] / b['bwd_ms']:.1f}x" if a and b else "-"
    train = f"{a['train_ms'] / b['bwd_ms']:.1f}x" if a and b and "train_ms" in a else "-"
    g = lambda n, w: f"{(a or {}).get(n, '-'):>{w}}"
    print(f"{key[0]:4} {key[1]:5} {key[2]:4} {f(a, 'bwd_ms'):>10} {f(a, 'unpaired_ms'):>9} "
          f"{f(a, 'prep_ms'):>8} {f(a, 'grads_ms'):>8} {f(b, 'bwd_ms'):>9} {ratio:>10} "
          f"{g('max_rel_err_dq', 8)} {g('max_rel_err_dk', 8)} {f(a, 'train_ms'):>8} {train:>10} "
          f"{g('max_rel_err_dq_train', 9)} {g('max_rel_err_dk_train_tensor', 9)}")
PY

# other tilings of the gradient kernels ($KF_ATTN_GRAD_TILES = rr,rc,wx,wy: rows and columns an
# invocation owns, invocations across and down; src/ops/attention_grad.c) at T 4096, f16: train_ms
echo "== tilings (KF_ATTN_GRAD_TILES), f16 T 4096, train_ms" >>"$OUT/attention_bwd.txt"
for tiles in 4,2,16,8 2,2,16,16; do
    KF_ATTN_GRAD_TILES=$tiles timeout 8 "$BENCH" --json --T 4096 --D 64 --D 128 --dtype f16 \
        --repeat 3 2>/dev/null | "$PYTHON" -c '
import json, sys
for line in sys.stdin:
    if line.startswith("{"):
        r = json.loads(line)
        print("tiles %-10s D %4d train_ms %9.3f err_dk_tr %s" % (sys.argv[1], r["D"],
              r["train_ms"], r["max_rel_err_dk_train_tensor"]))' "$tiles" >>"$OUT/attention_bwd.txt"
done

if [ -x "$BIN/kfuse" ]; then
    echo "== kfuse verify attention_grad_stats attention_grad_k (dq's and dk's kernels)" \
        >>"$OUT/attention_bwd.txt"
    timeout 7 "$BIN/kfuse" verify attention_grad_stats attention_grad_k \
        >>"$OUT/attention_bwd.txt" 2>&1
    echo "verify: exit $?" >>"$OUT/attention_bwd.txt"
fi
if [ -x "$BIN/kfuse_tests" ]; then
    echo "== kfuse_tests --suite fusion attention_dk" >>"$OUT/attention_bwd.txt"
    timeout 2 "$BIN/kfuse_tests" --suite fusion attention_dk >>"$OUT/attention_bwd.txt" 2>&1
    echo "tests: exit $?" >>"$OUT/attention_bwd.txt"
fi
