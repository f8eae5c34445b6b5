#!/usr/bin/env bash
# Batched matmul on the GPU: time (GPU timestamps, median of $REPEAT runs) and TFLOP/s of the
# shapes a transformer runs, through `kfuse run --json` (the planner's kernel choice, so the
# register-blocked, tuned and subgroup-matrix kernels where they apply), each beside the same
# work as one rank-2 product where there is one (b shared: [B*T, C] x [C, N], which kfuse runs
# as exactly that kernel), and, when python3 has torch with CUDA, torch.matmul on the same shapes.
#
#   bench/bmm.sh              # KFUSE (default build/release/kfuse), REPEAT (default 20)
#
# Needs what bench/h200.sh needs (Dawn's library, the NVIDIA Vulkan driver). Prints one line per
# case: name, dtype, shapes, kfuse ms, kfuse TFLOP/s[, torch ms, torch TFLOP/s].
set -uo pipefail
cd "$(dirname "$0")/.."
KFUSE=${KFUSE:-build/release/kfuse}
REPEAT=${REPEAT:-20}
export KF_WEBGPU_LIB=${KF_WEBGPU_LIB:-$PWD/deps/dawn/libwebgpu_wrapper.so}
PYTHON=${PYTHON:-python3}

# name dtype a-shape b-shape transpose_b flops
cases=(
  "linear-shared-w f32 16,128,768 768,3072 false"
  "linear-flat f32 2048,768 768,3072 false"
  "linear-shared-w f16 16,128,768 768,3072 false"
  "linear-flat f16 2048,768 768,3072 false"
  "scores-T1024-D64 f32 4,8,1024,64 4,8,1024,64 true"
  "scores-T1024-D64 f16 4,8,1024,64 4,8,1024,64 true"
  "pv-T1024-D64 f32 4,8,1024,1024 4,8,1024,64 false"
  "pv-T1024-D64 f16 4,8,1024,1024 4,8,1024,64 false"
  "scores-T4096-D128 f16 1,8,4096,128 1,8,4096,128 true"
  "broadcast-b f32 8,1,256,512 4,512,256 false"
)

flops() { # a b tb -> 2*batch*M*N*K
  "$PYTHON" - "$1" "$2" "$3" <<'PY'
import sys
a = [int(x) for x in sys.argv[1].split(",")]
b = [int(x) for x in sys.argv[2].split(",")]
tb = sys.argv[3] == "true"
m, k = a[-2], a[-1]
n = b[-2] if tb else b[-1]
ba, bb = a[:-2], b[:-2]
r = max(len(ba), len(bb))
ba, bb = [1] * (r - len(ba)) + ba, [1] * (r - len(bb)) + bb
batch = 1
for x, y in zip(ba, bb):
    batch *= max(x, y)
print(2 * batch * m * n * k)
PY
}

torch_ms() { # dtype a b tb -> ms or empty
  "$PYTHON" - "$@" <<'PY' 2>/dev/null
import sys
try:
    import torch
    if not torch.cuda.is_available():
        raise SystemExit(0)
except ImportError:
    raise SystemExit(0)
dt = {"f32": torch.float32, "f16": torch.float16}[sys.argv[1]]
a = torch.randn([int(x) for x in sys.argv[2].split(",")], device="cuda", dtype=dt)
b = torch.randn([int(x) for x in sys.argv[3].split(",")], device="cuda", dtype=dt)
tb = sys.argv[4] == "true"
f = (lambda: a @ b.transpose(-1, -2)) if tb else (lambda: a @ b)
for _ in range(5):
    f()
torch.cuda.synchronize()
times = []
for _ in range(20):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); f(); e.record(); torch.cuda.synchronize()
    times.append(s.elapsed_time(e))
times.sort()
print(f"{times[len(times) // 2]:.4f}")
PY
}

for c in "${cases[@]}"; do
  read -r name dt ashape bshape tb <<<"$c"
  prog="a: ${dt}[${ashape}]
b: ${dt}[${bshape}]
y = matmul(a, b, transpose_b=${tb})
out y"
  json=$("$KFUSE" run -e "$prog" --repeat "$REPEAT" --json 2>&1 | tail -1)
  ms=$(printf '%s' "$json" | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["time_ms"])' 2>/dev/null)
  f=$(flops "$ashape" "$bshape" "$tb")
  line="$name $dt a[$ashape] b[$bshape] tb=$tb"
  if [ -n "$ms" ]; then
    line="$line kfuse $ms ms $("$PYTHON" -c "print(f'{$f / ($ms * 1e9):.1f}')") TFLOP/s"
  else
    line="$line kfuse FAILED: $json"
  fi
  tms=$(torch_ms "$dt" "$ashape" "$bshape" "$tb")
  if [ -n "$tms" ]; then
    line="$line | torch $tms ms $("$PYTHON" -c "print(f'{$f / ($tms * 1e9):.1f}')") TFLOP/s"
  fi
  echo "$line"
done
