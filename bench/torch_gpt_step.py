#!/usr/bin/env python3
"""A transformer block's forward + backward and a character-GPT training step in PyTorch (eager,
torch.compile, and the block with F.scaled_dot_product_attention), beside kfuse's
(bench/gpt/gpt_bench.c, kfuse_bench_gpt), for docs/PERFORMANCE.md. bench/h200_gpt.sh runs both.

The block is one pre-norm layer of examples/chargpt/gpt.kf at a size (BxTxCxHxF: batch, context,
width, heads, FFN): x [B*T, C], qkv = rmsnorm(x) @ wqkv split into heads, causal attention,
h1 = a @ wproj + x, h2 = gelu(rmsnorm(h1) @ wup) @ wdown + h1, loss = sum(h2 * r) (r a fixed
random tensor, so backward starts from dh2 = r), backward to x and the four weights. The step is
the character GPT of gpt_spec.py --batch 64 with AdamW (lr 1e-3), the batch on the device.
f32 means f32 (TF32 off). Times: CUDA events around each whole call after warm-up, median.

The block's non-matmul work (issue 14's target: at least torch.compile's speed) comes out two
ways for every implementation: `nonmatmul_ms` = the block's time minus its dense products alone
(the four projections forward, their dX and dW backward: 12 products, timed on their own in the
same framework; for kfuse the matmul-rooted dispatches, epilogues included), and, on CUDA,
`profile_nonmatmul_ms` = the device time of the kernels the profiler does not name as GEMMs
(cuBLAS / CUTLASS names; an eager math attention's batched products count as GEMMs there).

  python3 bench/torch_gpt_step.py --write-specs DIR [--blocks 64x64x128x4x512,...] [--batch 64]
  python3 bench/torch_gpt_step.py [--blocks ...] [--batch 64] [--repeat N] [--json FILE]
      [--kfuse-json kfuse.jsonl] [--no-compile] [--no-step] [--device cuda|cpu]
  python3 bench/torch_gpt_step.py --table-only --json torch.jsonl --kfuse-json kfuse.jsonl
"""
import argparse
import json
import math
import os
import re
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "chargpt"))
import gpt_spec  # noqa: E402

DEFAULT_BLOCKS = "64x64x128x4x512,4x1024x1024x16x4096"
EPS = 1e-5
GEMM = re.compile(r"gemm|gemv|xmma|cutlass|splitKreduce|cublas|triton_tem", re.I)


def parse_block(text):
    b, t, c, h, f = (int(v) for v in text.split("x"))
    if c % h:
        raise SystemExit(f"block {text}: width {c} is not a multiple of heads {h}")
    return b, t, c, h, f


def block_name(b, t, c, h, f):
    return f"block_{b}x{t}x{c}x{h}x{f}"


def block_spec(b, t, c, h, f):
    """The block in kfuse's graph language: gpt.kf's layer, its value and its gradients."""
    d, rows = c // h, b * t
    heads = f"reshape(shape=[{b}, {t}, {h}, {d}]) |> permute(axes=[0, 2, 1, 3])"
    lines = [
        f"# one pre-norm layer of examples/chargpt/gpt.kf (bench/torch_gpt_step.py)",
        f"x: f32[{rows}, {c}]",
        f"r: f32[{rows}, {c}]",
        f"param wqkv: f32[{c}, {3 * c}]",
        f"param wproj: f32[{c}, {c}]",
        f"param wup: f32[{c}, {f}]",
        f"param wdown: f32[{f}, {c}]",
        "qkv = rmsnorm(x) |> matmul(wqkv)",
    ]
    for j, part in enumerate("qkv"):
        lines.append(f"{part} = slice(qkv, axis=-1, start={j * c}, length={c}) |> {heads}")
    lines += [
        "a = attention(q, k, v, causal=true) |> permute(axes=[0, 2, 1, 3]) "
        f"|> reshape(shape=[{rows}, {c}])",
        "h1 = matmul(a, wproj) |> add(x)",
        "h2 = rmsnorm(h1) |> matmul(wup) |> gelu |> matmul(wdown) |> add(h1)",
        "loss = mul(h2, r) |> sum |> sum",
        "dx, dwqkv, dwproj, dwup, dwdown = grad(loss, x, wqkv, wproj, wup, wdown)",
        "out h2, dx, dwqkv, dwproj, dwup, dwdown",
    ]
    return "\n".join(lines) + "\n"


def step_config(batch):
    cfg = dict(gpt_spec.DEFAULTS)
    cfg["batch"] = batch
    return cfg


def write_specs(directory, blocks, batch):
    os.makedirs(directory, exist_ok=True)
    for blk in blocks:
        with open(os.path.join(directory, block_name(*blk) + ".kf"), "w") as f:
            f.write(block_spec(*blk))
        print("block", block_name(*blk), os.path.join(directory, block_name(*blk) + ".kf"))
    path = os.path.join(directory, f"gpt_step_b{batch}.kf")
    with open(path, "w") as f:
        f.write(gpt_spec.spec(**step_config(batch)))
    print("step", f"gpt_step_b{batch}", path)


def no_tf32(torch):
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


def rmsnorm(torch, x):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS)


def attention(torch, F, q, k, v, sdpa):
    if sdpa:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t, d = q.shape[-2], q.shape[-1]
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
    return s.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v


def layer(torch, F, x, wqkv, wproj, wup, wdown, b, t, h, sdpa):
    c = x.shape[-1]
    d = c // h
    qkv = rmsnorm(torch, x) @ wqkv
    q, k, v = (qkv[:, j * c:(j + 1) * c].reshape(b, t, h, d).permute(0, 2, 1, 3)
               for j in range(3))
    a = attention(torch, F, q, k, v, sdpa).permute(0, 2, 1, 3).reshape(b * t, c)
    h1 = a @ wproj + x
    return F.gelu(rmsnorm(torch, h1) @ wup, approximate="tanh") @ wdown + h1


def timed(torch, fn, repeat, device):
    cuda = device == "cuda"
    for _ in range(3):  # warm-up (and compilation)
        fn()
    if cuda:
        torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), min(times)


def profile_split(torch, fn, device):
    """(kernels, gemm device ms, other device ms) of one call, by kernel name; None on a CPU."""
    if device != "cuda":
        return None
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        gemm = other = 0.0
        kernels = 0
        for e in prof.events():
            if not str(getattr(e, "device_type", "")).endswith("CUDA"):
                continue
            kernels += 1
            us = getattr(e, "device_time", None)
            if us is None:
                us = getattr(e, "cuda_time", 0.0)
            if GEMM.search(e.name):
                gemm += us / 1e3
            else:
                other += us / 1e3
        return kernels, gemm, other
    except Exception as exc:  # the profiler is optional
        print(f"(profile unavailable: {exc})", file=sys.stderr)
        return None


def bench_block(torch, F, blk, device, repeat, compile_too, seed):
    b, t, c, h, f = blk
    g = torch.Generator().manual_seed(seed)

    def uniform(shape, bound):
        return ((torch.rand(*shape, generator=g) * 2 - 1) * bound).to(device)

    x = uniform((b * t, c), 1.0).requires_grad_()
    r = uniform((b * t, c), 1.0)
    ws = [uniform((c, 3 * c), c ** -0.5), uniform((c, c), c ** -0.5), uniform((c, f), c ** -0.5),
          uniform((f, c), f ** -0.5)]
    ws = [w.requires_grad_() for w in ws]
    leaves = [x] + ws
    rows = []

    # the dense products alone: forward y = a @ w, backward da = dy w^T and dw = a^T dy
    mm_in = [(uniform((b * t, w.shape[0]), 1.0), w.detach(), uniform((b * t, w.shape[1]), 1.0))
             for w in ws]

    def dense():
        for a, w, dy in mm_in:
            a @ w
            dy @ w.t()
            a.t() @ dy

    dense_ms, _ = timed(torch, dense, repeat, device)
    variants = [("torch_eager", False, False), ("torch_eager_sdpa", False, True)]
    if compile_too:
        variants += [("torch_compile", True, False)]
    for impl, compiled, sdpa in variants:
        def loss_fn(x, wqkv, wproj, wup, wdown, sdpa=sdpa):
            return (layer(torch, F, x, wqkv, wproj, wup, wdown, b, t, h, sdpa) * r).sum()

        if compiled and not hasattr(torch, "compile"):
            print(f"{block_name(*blk)} {impl}: torch {torch.__version__} has no torch.compile",
                  file=sys.stderr)
            continue
        fwd = torch.compile(loss_fn) if compiled else loss_fn

        def call():
            for leaf in leaves:
                leaf.grad = None
            loss = fwd(*leaves)
            loss.backward()
            return loss

        try:
            ms, min_ms = timed(torch, call, repeat, device)
        except Exception as exc:
            print(f"{block_name(*blk)} {impl}: failed: {exc}", file=sys.stderr)
            continue
        prof = profile_split(torch, call, device)
        row = {"case": block_name(*blk), "mode": "block", "impl": impl, "ms": ms,
               "min_ms": min_ms, "dense_matmul_ms": dense_ms, "nonmatmul_ms": ms - dense_ms}
        if prof:
            row.update(kernels=prof[0], profile_gemm_ms=prof[1], profile_nonmatmul_ms=prof[2])
        rows.append(row)
        print(f"{row['case']:28s} {impl:18s} {ms:9.3f} ms (min {min_ms:.3f})  dense products "
              f"{dense_ms:.3f} ms, the rest {ms - dense_ms:.3f} ms"
              + (f"; profile: {prof[0]} kernels, GEMM {prof[1]:.3f} ms, other {prof[2]:.3f} ms"
                 if prof else ""), flush=True)
    return rows


def bench_step(torch, F, batch, device, repeat, compile_too, seed):
    cfg = step_config(batch)
    g = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in gpt_spec.param_shapes(**cfg):
        bound = 1.0 / math.sqrt(math.prod(shape[:-1]))
        params[name] = ((torch.rand(*shape, generator=g) * 2 - 1) * bound).to(device)
        params[name].requires_grad_()
    x = torch.randint(0, cfg["vocab"], (batch, cfg["context"]), generator=g).to(device)
    y = torch.roll(x.reshape(-1), -1).reshape(x.shape)
    c, h = cfg["width"], cfg["heads"]

    def loss_fn(x, y, p):
        b, t = x.shape
        hid = (p["wte"][x] + p["wpe"]).reshape(b * t, c)
        for i in range(cfg["layers"]):
            hid = layer(torch, F, hid, p[f"l{i}_qkv"], p[f"l{i}_proj"], p[f"l{i}_up"],
                        p[f"l{i}_down"], b, t, h, False)
        logits = rmsnorm(torch, hid) @ p["head"]
        return F.cross_entropy(logits, y.reshape(-1))

    rows = []
    for impl, compiled in [("torch_eager", False)] + ([("torch_compile", True)] if compile_too
                                                       else []):
        ps = {k: v.detach().clone().requires_grad_() for k, v in params.items()}
        opt = torch.optim.AdamW(list(ps.values()), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=0.0)
        if compiled and not hasattr(torch, "compile"):
            print(f"gpt_step_b{batch} {impl}: torch {torch.__version__} has no torch.compile",
                  file=sys.stderr)
            continue
        fn = torch.compile(loss_fn) if compiled else loss_fn
        opt_step = torch.compile(opt.step) if compiled else opt.step
        last = {}

        def step():
            opt.zero_grad(set_to_none=True)
            loss = fn(x, y, ps)
            loss.backward()
            opt_step()
            last["loss"] = loss

        try:
            ms, min_ms = timed(torch, step, repeat, device)
        except Exception as exc:
            print(f"gpt_step_b{batch} {impl}: failed: {exc}", file=sys.stderr)
            continue
        prof = profile_split(torch, step, device)
        row = {"case": f"gpt_step_b{batch}", "mode": "step", "impl": impl, "ms": ms,
               "min_ms": min_ms, "loss": float(last["loss"].detach())}
        if prof:
            row.update(kernels=prof[0], profile_gemm_ms=prof[1], profile_nonmatmul_ms=prof[2])
        rows.append(row)
        print(f"{row['case']:28s} {impl:18s} {ms:9.3f} ms (min {min_ms:.3f})  loss "
              f"{row['loss']:.4f}" + (f"; {prof[0]} kernels" if prof else ""), flush=True)
    return rows


def table(torch_rows, kfuse_path):
    kf = {}
    with open(kfuse_path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                obj = json.loads(line)
                kf[obj["case"]] = obj
    cases = []
    for r in torch_rows:
        if r["case"] not in cases:
            cases.append(r["case"])
    for case in kf:
        if case not in cases:
            cases.append(case)
    print()
    print("| case | impl | ms | non-matmul ms | kernels / dispatches | kfuse vs it (total) | "
          "kfuse vs it (non-matmul) |")
    print("|---|---|---|---|---|---|---|")
    for case in cases:
        k = kf.get(case)
        if k:
            # a step's total is the trainer's wall clock; its split is of the plan's dispatches
            print(f"| {case} | kfuse | {k['ms']:.3f} | {k['nonmatmul_ms']:.3f} (matmul "
                  f"{k['matmul_ms']:.3f}, plan {k['plan_ms']:.3f}) | {k['dispatches']} | 1.00x | "
                  f"1.00x |")
        for r in (r for r in torch_rows if r["case"] == case):
            pnm = r.get("profile_nonmatmul_ms")
            nm = r.get("nonmatmul_ms", pnm)
            nm_text = (f"{nm:.3f}" if nm is not None else "") + (
                f" (profile {pnm:.3f})" if pnm is not None and "nonmatmul_ms" in r else "")
            ratio = f"{k['ms'] / r['ms']:.2f}x" if k else ""
            nm_ratio = ""
            if k and nm:
                nm_ratio = f"{k['nonmatmul_ms'] / nm:.2f}x"
            print(f"| {case} | {r['impl']} | {r['ms']:.3f} | {nm_text} | {r.get('kernels', '')} | "
                  f"{ratio} | {nm_ratio} |")
    print("\n(kfuse vs it: kfuse's time over its time, below 1 = kfuse faster; non-matmul: the "
          "block's time minus its dense products alone; a step's is the profile's non-GEMM "
          "kernels for torch and the plan's non-matmul dispatches for kfuse)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--blocks", default=DEFAULT_BLOCKS)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--device", default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--no-step", action="store_true")
    ap.add_argument("--write-specs", metavar="DIR")
    ap.add_argument("--json")
    ap.add_argument("--kfuse-json")
    ap.add_argument("--table-only", action="store_true",
                    help="print the table from --json (PyTorch's rows) and --kfuse-json; run nothing")
    args = ap.parse_args()
    blocks = [parse_block(b) for b in args.blocks.split(",") if b]
    if args.write_specs:
        write_specs(args.write_specs, blocks, args.batch)
        return
    if args.table_only:
        with open(args.json) as f:
            table([json.loads(line) for line in f if line.strip()], args.kfuse_json)
        return
    import torch
    import torch.nn.functional as F

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    no_tf32(torch)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    print(f"torch {torch.__version__} on {name}; median of {args.repeat}", flush=True)
    rows = []
    out = open(args.json, "w") if args.json else None

    def keep(new_rows):  # written as they come: a run cut short keeps what it measured
        for r in new_rows:
            r.update(device=name, torch=torch.__version__)
            if out:
                out.write(json.dumps(r) + "\n")
                out.flush()
        rows.extend(new_rows)

    for blk in blocks:
        keep(bench_block(torch, F, blk, device, args.repeat, not args.no_compile, args.seed))
        if device == "cuda":
            torch.cuda.empty_cache()
    if not args.no_step:
        keep(bench_step(torch, F, args.batch, device, args.repeat, not args.no_compile,
                        args.seed))
    if out:
        out.close()
    if args.kfuse_json and os.path.exists(args.kfuse_json):
        table(rows, args.kfuse_json)


if __name__ == "__main__":
    main()
