#!/usr/bin/env python3
"""The wide-MLP training step of `kfuse bench --filter train_step` in PyTorch, eager and
torch.compile, so the two can be read side by side (docs/PERFORMANCE.md).

The step is bench/train_step.c's: x [T, D] (uniform [0, 1)), labels [T] (int, (seed + 7919 i) % C),
h = gelu(x @ w1 + b1) (tanh form, as kfuse's gelu), logits = h @ w2 + b2,
loss = cross_entropy(logits, labels), backward, AdamW (lr 1e-3, betas 0.9/0.999, eps 1e-8,
weight decay 0, as kf_trainer's bench). f32 means f32: TF32 is off. The batch lives on the device
(kfuse's wide case uploads it once too). Times: CUDA events around each whole step (forward,
backward, update) after warm-up, median of --repeat; on the CPU the wall clock.

  python3 bench/torch_train_step.py [--size full|small|TxDxFxC] [--repeat N] [--device cuda|cpu]
      [--no-compile] [--json FILE] [--kfuse-json kfuse.jsonl]

It prints one line per variant (the fields of `kfuse bench`: case, size, ms, min_ms, kernels per
step, loss) and, with --kfuse-json (kfuse bench --json-file output), a Markdown table beside kfuse's
fused and unfused times.
"""
import argparse
import json
import statistics
import sys
import time

SIZES = {"full": (4096, 4096, 16384, 4096), "small": (256, 256, 1024, 256)}


def parse_size(text):
    if text in SIZES:
        return SIZES[text]
    parts = [int(v) for v in text.split("x")]
    if len(parts) != 4 or min(parts) < 1:
        raise SystemExit("--size takes full, small or TxDxFxC")
    return tuple(parts)


def make_step(torch, F, T, D, Fd, C, device, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(T, D, generator=g).to(device)
    labels = torch.tensor([(seed + 7919 * i) % C for i in range(T)], dtype=torch.long).to(device)
    bound1, bound2 = 1.0 / D**0.5, 1.0 / Fd**0.5
    params = [
        ((torch.rand(D, Fd, generator=g) * 2 - 1) * bound1),
        torch.zeros(Fd),
        ((torch.rand(Fd, C, generator=g) * 2 - 1) * bound2),
        torch.zeros(C),
    ]
    params = [p.to(device).requires_grad_() for p in params]
    w1, b1, w2, b2 = params

    def loss_fn(x, labels):
        h = F.gelu(x @ w1 + b1, approximate="tanh")
        return F.cross_entropy(h @ w2 + b2, labels)

    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    return x, labels, loss_fn, opt


def time_variant(torch, name, loss_fn, opt, x, labels, repeat, device, compiled):
    if compiled:
        loss_fn = torch.compile(loss_fn)
        opt_step = torch.compile(opt.step)
    else:
        opt_step = opt.step

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(x, labels)
        loss.backward()
        opt_step()
        return loss

    cuda = device == "cuda"
    for _ in range(3):  # warm-up (and compilation)
        loss = step()
    if cuda:
        torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            loss = step()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            loss = step()
            times.append((time.perf_counter() - t0) * 1e3)
    kernels = None
    if cuda:
        try:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                step()
                torch.cuda.synchronize()
            kernels = sum(
                1 for e in prof.events() if getattr(e, "device_type", None) is not None
                and str(e.device_type).endswith("CUDA")
            )
        except Exception as exc:  # the profiler is optional
            print(f"(kernel count unavailable: {exc})", file=sys.stderr)
    return {
        "case": "train_step_wide_mlp",
        "impl": name,
        "ms": statistics.median(times),
        "min_ms": min(times),
        "kernels_per_step": kernels,
        "loss": float(loss.detach()),
        "timer": "cuda_events" if cuda else "wall",
    }


def no_tf32(torch):
    """f32 means f32 (as bench/torch_compare.py): PyTorch 2.9's fp32_precision settings where
    they exist (not mixed with the deprecated allow_tf32), else allow_tf32 off."""
    if hasattr(torch.backends, "fp32_precision"):
        cudnn = torch.backends.cudnn
        for backend in (torch.backends, torch.backends.cuda.matmul, cudnn,
                        getattr(cudnn, "conv", None), getattr(cudnn, "rnn", None)):
            if backend is not None and hasattr(backend, "fp32_precision"):
                backend.fp32_precision = "ieee"
    else:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        if hasattr(torch, "set_float32_matmul_precision"):
            torch.set_float32_matmul_precision("highest")


def kfuse_rows(path):
    rows = {}
    with open(path) as f:
        for line in f:
            obj = json.loads(line)
            if obj.get("kind") == "case" and str(obj.get("case", "")).startswith("train_step"):
                rows[obj["case"]] = obj
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--size", default="full")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--device", default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--json", help="write the results as JSON lines here")
    ap.add_argument("--kfuse-json", help="kfuse bench --json-file output, for a side-by-side table")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    no_tf32(torch)
    T, D, Fd, C = parse_size(args.size)
    size = f"{T}x{D}-{Fd}-{C}"
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    print(f"torch {torch.__version__} on {name}; train_step_wide_mlp {size}; median of {args.repeat}")
    results = []
    for compiled in ([False] if args.no_compile else [False, True]):
        x, labels, loss_fn, opt = make_step(torch, F, T, D, Fd, C, device, args.seed)
        impl = "torch_compile" if compiled else "torch_eager"
        try:
            r = time_variant(torch, impl, loss_fn, opt, x, labels, args.repeat, device, compiled)
        except Exception as exc:
            print(f"{impl}: failed: {exc}", file=sys.stderr)
            continue
        r["size"] = size
        r["device"] = name
        r["torch"] = torch.__version__
        results.append(r)
        print(f"{impl:14s} {size:20s} {r['ms']:10.3f} ms (min {r['min_ms']:.3f})  "
              f"kernels {r['kernels_per_step']}  loss {r['loss']:.6g}")
        del x, labels, loss_fn, opt
        if device == "cuda":
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            for r in results:
                f.write(json.dumps(r) + "\n")
    if args.kfuse_json:
        k = kfuse_rows(args.kfuse_json).get("train_step_wide_mlp")
        if not k:
            print("no train_step_wide_mlp in " + args.kfuse_json)
            return
        print()
        print("| what | size | ms per step | dispatches / kernels | kfuse fused vs it |")
        print("|---|---|---|---|---|")
        fused = k["fused_ms"]
        print(f"| kfuse fused | {k.get('size', '')} | {fused:.3f} | {k['dispatches_fused']} | 1.00x |")
        print(f"| kfuse unfused | {k.get('size', '')} | {k['unfused_ms']:.3f} | "
              f"{k['dispatches_unfused']} | {k['unfused_ms'] / fused:.2f}x |")
        for r in results:
            print(f"| {r['impl']} | {r['size']} | {r['ms']:.3f} | {r['kernels_per_step']} | "
                  f"{r['ms'] / fused:.2f}x |")


if __name__ == "__main__":
    main()
