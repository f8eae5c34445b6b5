#!/usr/bin/env python3
"""PyTorch's causal attention, forward and backward, timed with the fields kfuse_bench_attention
prints (bench/attention/attention_bench.c), so the two run side by side on one GPU:

    python3 bench/torch_attention.py [--T N ...] [--D N ...] [--dtype f16 f32] [--B N] [--H N]
                                     [--no-causal] [--repeat N] [--json] [--no-compile]

Default: T 1024 and 4096, D 64 and 128, f16 and f32, H 16, B = 8192 / T, causal: the same cases
as kfuse_bench_attention's default. Implementations: "eager" is F.scaled_dot_product_attention
(PyTorch picks its kernel: FlashAttention-2 or memory-efficient attention for f16, the math or
memory-efficient path for f32); "compile" is torch.compile of the same function. Forward times
the call; backward times o.backward(dy) alone (the forward is run outside the timed region each
time). FLOPs as kfuse counts them: 4 B H T^2 D forward (halved when causal), 2.5 times that
backward. CUDA events; median of --repeat runs after warm-up. Needs CUDA.
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F


def attention(q, k, v, causal):
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
    for x in (q, k, v):
        x.requires_grad_(True)
    dy = torch.rand(shape, device="cuda", dtype=dtype) * 2 - 1
    fwd_ms = timed(lambda: fn(q, k, v, causal), repeat)

    # backward alone: the graph is rebuilt by an untimed forward before each timed backward
    def backward_once():
        o = fn(q, k, v, causal)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        o.backward(dy)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end)

    for _ in range(3):
        backward_once()
    bwd_ms = statistics.median(backward_once() for _ in range(repeat))
    flops = 4.0 * b * h * t * t * d * (0.5 if causal else 1.0)
    return {"impl": impl, "dtype": "f16" if dtype == torch.float16 else "f32", "B": b, "H": h,
            "T": t, "D": d, "causal": causal, "fwd_ms": round(fwd_ms, 4),
            "bwd_ms": round(bwd_ms, 4), "fwd_tflops": round(flops / (fwd_ms * 1e9), 3),
            "bwd_tflops": round(2.5 * flops / (bwd_ms * 1e9), 3)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--T", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--D", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--dtype", nargs="+", default=["f16", "f32"], choices=["f16", "f32"])
    ap.add_argument("--B", type=int, default=0, help="batch (0: 8192 / T)")
    ap.add_argument("--H", type=int, default=16)
    ap.add_argument("--no-causal", action="store_true")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-compile", action="store_true", help="eager only")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("torch_attention.py: needs CUDA")
    impls = [("eager", attention)]
    if not a.no_compile:
        impls.append(("compile", torch.compile(attention)))
    if not a.json:
        print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
        print(f"{'impl':8} {'type':4} {'B':>3} {'H':>3} {'T':>5} {'D':>4} {'causal':6} "
              f"{'fwd_ms':>10} {'bwd_ms':>10} {'fwd_TF/s':>8} {'bwd_TF/s':>8}")
    for dt in a.dtype:
        dtype = torch.float16 if dt == "f16" else torch.float32
        for t in a.T:
            for d in a.D:
                b = a.B or max(8192 // t, 1)
                for name, fn in impls:
                    r = run(name, fn, b, a.H, t, d, dtype, not a.no_causal, a.repeat)
                    if a.json:
                        print(json.dumps(r), flush=True)
                    else:
                        print(f"{r['impl']:8} {r['dtype']:4} {b:3} {a.H:3} {t:5} {d:4} "
                              f"{str(r['causal']).lower():6} {r['fwd_ms']:10.3f} "
                              f"{r['bwd_ms']:10.3f} {r['fwd_tflops']:8.2f} "
                              f"{r['bwd_tflops']:8.2f}", flush=True)


if __name__ == "__main__":
    main()
