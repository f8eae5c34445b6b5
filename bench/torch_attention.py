#!/usr/bin/env python3
"""PyTorch's attention, forward and forward + backward, timed with the fields kfuse_bench_attention
prints (bench/attention/attention_bench.c), so the two run side by side on one GPU:

    python3 bench/torch_attention.py [--T N ...] [--D N ...] [--dtype f16 f32] [--B N] [--H N]
                                     [--no-causal] [--repeat N] [--json FILE] [--impl NAME ...]
                                     [--kfuse-json FILE ...] [--time-limit S]

Default: T 1024 and 4096, D 64 and 128, f16 and f32, H 16, B = 8192 / T, causal: the same cases
as kfuse_bench_attention's default. Implementations (--impl, default all three):
  eager    the math in PyTorch ops: softmax(q k^T * scale + causal mask) v, the T x T scores in
           memory;
  compile  torch.compile of that function (Inductor may rewrite the pattern into SDPA itself);
  sdpa     F.scaled_dot_product_attention (PyTorch picks its kernel: FlashAttention-2 or
           memory-efficient attention for f16, the memory-efficient or math path for f32).
Forward times the call; forward + backward times o = f(q, k, v); o.backward(dy), one step of
training. FLOPs as kfuse counts them: 4 B H T^2 D forward (halved when causal), 3.5 times that
forward + backward. CUDA events; median of --repeat runs after warm-up; TF32 off (f32 is f32).
--kfuse-json: after the runs, a side-by-side table of kfuse's rows (its JSON lines) and these,
with kfuse's throughput as a fraction of each PyTorch implementation's. --time-limit: cases that
would start after that many seconds are skipped (the device script's budget). Needs CUDA for
the runs; with --impl none it only joins the given files.
"""
import argparse
import json
import math
import statistics
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # joining files needs no torch
    torch = None


def math_attention(q, k, v, causal):
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    if causal:
        t = q.shape[-2]
        mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(mask, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v)


def sdpa(q, k, v, causal):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def timed(fn, repeat):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def run(impl, fn, b, h, t, d, dtype, causal, repeat):
    torch.manual_seed(1234)
    shape = (b, h, t, d)
    q, k, v = (torch.rand(shape, device="cuda", dtype=dtype) * 2 - 1 for _ in range(3))
    dy = torch.rand(shape, device="cuda", dtype=dtype) * 2 - 1
    with torch.no_grad():
        fwd_ms = timed(lambda: fn(q, k, v, causal), repeat)
    for x in (q, k, v):
        x.requires_grad_(True)

    def step():
        fn(q, k, v, causal).backward(dy)
        q.grad = k.grad = v.grad = None

    fwdbwd_ms = timed(step, repeat)
    flops = 4.0 * b * h * t * t * d * (0.5 if causal else 1.0)
    return {"impl": impl, "dtype": "f16" if dtype == torch.float16 else "f32", "B": b, "H": h,
            "T": t, "D": d, "causal": causal, "fwd_ms": round(fwd_ms, 4),
            "fwdbwd_ms": round(fwdbwd_ms, 4), "bwd_ms": round(fwdbwd_ms - fwd_ms, 4),
            "fwd_tflops": round(flops / (fwd_ms * 1e9), 3),
            "fwdbwd_tflops": round(3.5 * flops / (fwdbwd_ms * 1e9), 3)}


def key(r):
    return (r["dtype"], r["T"], r["D"], bool(r["causal"]))


def join(rows):
    """A markdown table: per case, each implementation's forward and forward + backward ms, and
    each kfuse row's throughput as a fraction of every PyTorch one's."""
    cases = sorted({key(r) for r in rows}, key=lambda c: (c[0], c[1], c[2], c[3]))
    impls = []
    for r in rows:
        if r["impl"] not in impls:
            impls.append(r["impl"])
    kf = [i for i in impls if i.startswith("kfuse")]
    th = [i for i in impls if not i.startswith("kfuse")]
    by = {(r["impl"],) + key(r): r for r in rows}
    head = ["dtype", "T", "D"] + [f"{i} fwd ms" for i in impls] + [f"{i} f+b ms" for i in impls]
    head += [f"{a}/{b} fwd" for a in kf for b in th] + [f"{a}/{b} f+b" for a in kf for b in th]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in cases:
        cells = [c[0], str(c[1]), str(c[2])]
        for field in ("fwd_ms", "fwdbwd_ms"):
            for i in impls:
                r = by.get((i,) + c)
                cells.append(f"{r[field]:.4g}" if r else "-")
        for field in ("fwd_ms", "fwdbwd_ms"):
            for a in kf:
                for b in th:
                    ra, rb = by.get((a,) + c), by.get((b,) + c)
                    ok = ra and rb and ra[field] > 0
                    cells.append(f"{rb[field] / ra[field]:.3g}x" if ok else "-")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--T", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--D", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--dtype", nargs="+", default=["f16", "f32"], choices=["f16", "f32"])
    ap.add_argument("--B", type=int, default=0, help="batch (0: 8192 / T)")
    ap.add_argument("--H", type=int, default=16)
    ap.add_argument("--no-causal", action="store_true")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--json", help="also write the rows as JSON lines to this file")
    ap.add_argument("--impl", nargs="+", default=["eager", "compile", "sdpa"],
                    choices=["eager", "compile", "sdpa", "none"])
    ap.add_argument("--kfuse-json", nargs="*", default=[], help="kfuse rows to join")
    ap.add_argument("--time-limit", type=float, default=0)
    a = ap.parse_args()
    rows = []
    for path in a.kfuse_json:
        try:
            with open(path) as f:
                rows += [json.loads(line) for line in f if line.startswith("{")]
        except OSError as e:
            print(f"torch_attention.py: {e}", file=sys.stderr)
    impls = [i for i in a.impl if i != "none"]
    if impls:
        if torch is None or not torch.cuda.is_available():
            raise SystemExit("torch_attention.py: needs torch with CUDA")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        fns = {"eager": math_attention, "sdpa": sdpa}
        if "compile" in impls:
            torch._dynamo.config.cache_size_limit = 64
            fns["compile"] = torch.compile(math_attention, dynamic=False)
        print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
        print(f"{'impl':8} {'type':4} {'B':>3} {'H':>3} {'T':>5} {'D':>4} {'causal':6} "
              f"{'fwd_ms':>10} {'fwdbwd_ms':>10} {'fwd_TF/s':>8} {'fb_TF/s':>8}", flush=True)
        start = time.time()
        out = open(a.json, "a") if a.json else None
        for dt in a.dtype:
            dtype = torch.float16 if dt == "f16" else torch.float32
            for t in a.T:
                for d in a.D:
                    b = a.B or max(8192 // t, 1)
                    for name in impls:
                        if a.time_limit and time.time() - start > a.time_limit:
                            print(f"{name} {dt} T {t} D {d}: skipped (time limit)", flush=True)
                            continue
                        try:
                            r = run(name, fns[name], b, a.H, t, d, dtype, not a.no_causal,
                                    a.repeat)
                        except Exception as e:  # one failing case (memory) keeps the others
                            print(f"{name} {dt} T {t} D {d}: failed: {e}", flush=True)
                            torch.cuda.empty_cache()
                            continue
                        rows.append(r)
                        if out:
                            print(json.dumps(r), file=out, flush=True)
                        print(f"{r['impl']:8} {r['dtype']:4} {b:3} {a.H:3} {t:5} {d:4} "
                              f"{str(r['causal']).lower():6} {r['fwd_ms']:10.3f} "
                              f"{r['fwdbwd_ms']:10.3f} {r['fwd_tflops']:8.2f} "
                              f"{r['fwdbwd_tflops']:8.2f}", flush=True)
        if out:
            out.close()
    if a.kfuse_json:
        print()
        print(join(rows))


if __name__ == "__main__":
    main()
