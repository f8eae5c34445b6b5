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

Non-matmul work (issue 14's target: the block's at least torch.compile's speed) is defined the
same way for both: the device time of each kernel (PyTorch: torch.profiler's CUDA kernels over
PROFILE_CALLS calls, per call; kfuse: each dispatch's GPU timestamps, kfuse_bench_gpt), in three
classes: matmul (dense products: cuBLAS / CUTLASS GEMM names; kfuse's matmul-rooted dispatches,
epilogues included), attention (PyTorch's fused attention kernels, fmha / flash; kfuse's
attention forward and backward dispatches) and other (everything else: norms, element-wise,
reductions, copies, the loss, the optimizer). non-matmul = attention + other. The attention runs
as SDPA in the _sdpa variants (the default ones), so its kernels are attention's by name; an
eager math attention's batched products would count as GEMMs. The old split (the block's time
minus its 12 dense products timed alone) is kept as `rest_ms`. The table lists each case's
kernels / dispatches one by one, so the gap is attributed kernel by kernel.

  python3 bench/torch_gpt_step.py --write-specs DIR [--blocks 64x64x128x4x512,...] [--batch 64]
  python3 bench/torch_gpt_step.py [--blocks ...] [--batch 64] [--repeat N] [--json FILE]
      [--kfuse-json kfuse.jsonl] [--variants torch_eager_sdpa,torch_compile_sdpa,...]
      [--no-compile] [--no-step] [--device cuda|cpu]
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
ATTENTION = re.compile(r"fmha|flash|attention|sdpa", re.I)  # checked before GEMM (fmha_cutlass)
VARIANTS = ("torch_eager", "torch_eager_sdpa", "torch_compile", "torch_compile_sdpa")
DEFAULT_VARIANTS = "torch_eager_sdpa,torch_compile_sdpa"
PROFILE_CALLS = 5


def kernel_class(name):
    return "attention" if ATTENTION.search(name) else "matmul" if GEMM.search(name) else "other"


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
        "out loss, h2, dx, dwqkv, dwproj, dwup, dwdown",  # the loss too, as PyTorch's call returns it
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
    """Each kernel's device time per call (PROFILE_CALLS calls profiled), by name and class:
    {kernels, class_ms: {matmul, attention, other}, by_name: [[class, name, calls, ms], ...]};
    None on a CPU or without a profiler."""
    if device != "cuda":
        return None
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(PROFILE_CALLS):
                fn()
            torch.cuda.synchronize()
        by_name = {}
        kernels = 0
        for e in prof.events():
            if not str(getattr(e, "device_type", "")).endswith("CUDA"):
                continue
            kernels += 1
            us = getattr(e, "device_time", None)
            if us is None:
                us = getattr(e, "cuda_time", 0.0)
            k = by_name.setdefault(e.name, [kernel_class(e.name), e.name, 0, 0.0])
            k[2] += 1
            k[3] += us / 1e3
        rows = sorted(([c, n, calls / PROFILE_CALLS, ms / PROFILE_CALLS]
                       for c, n, calls, ms in by_name.values()), key=lambda r: -r[3])
        class_ms = {c: sum(r[3] for r in rows if r[0] == c) for c in ("matmul", "attention",
                                                                        "other")}
        return {"kernels": kernels / PROFILE_CALLS, "class_ms": class_ms, "by_name": rows}
    except Exception as exc:  # the profiler is optional
        print(f"(profile unavailable: {exc})", file=sys.stderr)
        return None


def profile_fields(prof):
    if not prof:
        return {}
    cm = prof["class_ms"]
    return {"kernels": prof["kernels"], "profile_gemm_ms": cm["matmul"],
            "profile_attention_ms": cm["attention"], "profile_other_ms": cm["other"],
            "profile_nonmatmul_ms": cm["attention"] + cm["other"],
            "kernels_by_name": prof["by_name"]}


def profile_text(prof):
    if not prof:
        return ""
    cm = prof["class_ms"]
    return (f"; profile: {prof['kernels']:g} kernels, matmul {cm['matmul']:.3f} ms, attention "
            f"{cm['attention']:.3f} ms, other {cm['other']:.3f} ms")


def bench_block(torch, F, blk, device, repeat, variants, seed):
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
    for impl in variants:
        compiled, sdpa = "compile" in impl, impl.endswith("_sdpa")

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
               "min_ms": min_ms, "dense_matmul_ms": dense_ms, "rest_ms": ms - dense_ms}
        row.update(profile_fields(prof))
        rows.append(row)
        print(f"{row['case']:28s} {impl:18s} {ms:9.3f} ms (min {min_ms:.3f})  dense products "
              f"{dense_ms:.3f} ms, the rest {ms - dense_ms:.3f} ms" + profile_text(prof),
              flush=True)
    return rows


def bench_step(torch, F, batch, device, repeat, variants, seed):
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

    def loss_fn(x, y, p, sdpa):
        b, t = x.shape
        hid = (p["wte"][x] + p["wpe"]).reshape(b * t, c)
        for i in range(cfg["layers"]):
            hid = layer(torch, F, hid, p[f"l{i}_qkv"], p[f"l{i}_proj"], p[f"l{i}_up"],
                        p[f"l{i}_down"], b, t, h, sdpa)
        logits = rmsnorm(torch, hid) @ p["head"]
        return F.cross_entropy(logits, y.reshape(-1))

    rows = []
    for impl in variants:
        compiled, sdpa = "compile" in impl, impl.endswith("_sdpa")
        ps = {k: v.detach().clone().requires_grad_() for k, v in params.items()}
        opt = torch.optim.AdamW(list(ps.values()), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=0.0)
        if compiled and not hasattr(torch, "compile"):
            print(f"gpt_step_b{batch} {impl}: torch {torch.__version__} has no torch.compile",
                  file=sys.stderr)
            continue
        fn = torch.compile(loss_fn) if compiled else loss_fn
        fn = (lambda f, sd: lambda x, y, p: f(x, y, p, sd))(fn, sdpa)
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
        row.update(profile_fields(prof))
        rows.append(row)
        print(f"{row['case']:28s} {impl:18s} {ms:9.3f} ms (min {min_ms:.3f})  loss "
              f"{row['loss']:.4f}" + profile_text(prof), flush=True)
    return rows


def read_kfuse(path):
    kf = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                obj = json.loads(line)
                kf[obj["case"]] = obj
    return kf


def ratio(a, b):
    return f"{a / b:.2f}x" if a is not None and b else ""


def fmt(v):
    return f"{v:.3f}" if v is not None else ""


def table(torch_rows, kfuse_path, top=24):
    kf = read_kfuse(kfuse_path)
    cases = []
    for r in torch_rows + list(kf.values()):
        if r["case"] not in cases:
            cases.append(r["case"])
    print()
    print("Per kernel device time (kfuse: each dispatch's GPU timestamps; PyTorch: the profiler's "
          "kernels, per call). non-matmul = attention + other. kfuse vs it: kfuse's time over "
          "its time, below 1 = kfuse faster. ms: kfuse's step = the trainer's wall clock, its "
          "block = the plan timed whole; PyTorch's = CUDA events around a call.")
    print()
    print("| case | impl | ms | matmul ms | attention ms | other ms | non-matmul ms | kernels | "
          "kfuse vs it: total | non-matmul | other |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for case in cases:
        k = kf.get(case)
        if k:
            print(f"| {case} | kfuse | {k['ms']:.3f} (one pass {k['plan_ms']:.3f}, dispatches "
                  f"summed {k.get('sum_ms', 0):.3f}) | {k['matmul_ms']:.3f} | "
                  f"{fmt(k.get('attention_ms'))} | {fmt(k.get('other_ms'))} | "
                  f"{k['nonmatmul_ms']:.3f} | {k['dispatches']} | 1.00x | 1.00x | 1.00x |")
        for r in (r for r in torch_rows if r["case"] == case):
            pnm, po = r.get("profile_nonmatmul_ms"), r.get("profile_other_ms")
            print(f"| {case} | {r['impl']} | {r['ms']:.3f} | {fmt(r.get('profile_gemm_ms'))} | "
                  f"{fmt(r.get('profile_attention_ms'))} | {fmt(po)} | {fmt(pnm)} | "
                  f"{r.get('kernels', '')} | {ratio(k and k['ms'], r['ms'])} | "
                  f"{ratio(k and k['nonmatmul_ms'], pnm)} | {ratio(k and k.get('other_ms'), po)} |")
    for case in cases:
        k = kf.get(case)
        if k and k.get("per_dispatch"):
            floor = k.get("floor_ms")
            print(f"\n### {case}: kfuse, {len(k['per_dispatch'])} dispatches "
                  f"({'GPU timestamps' if k.get('timestamps') else 'wall clock each'}"
                  + (f"; a one-invocation dispatch measures {floor:.4f} ms this way, so each "
                     f"row's first {floor:.4f} ms is the pass and timestamps around it: one pass "
                     f"of all is {k['plan_ms']:.3f} ms against {k.get('sum_ms', 0):.3f} summed"
                     if floor else "") + ")\n")
            print("| # | class | ms | MB | GB/s | dispatch |")
            print("|---|---|---|---|---|---|")
            for i, d in enumerate(k["per_dispatch"]):
                gbs = d["bytes"] / (d["ms"] * 1e6) if d["ms"] > 0 else 0
                print(f"| {i + 1} | {d['class']} | {d['ms']:.4f} | {d['bytes'] / 1e6:.2f} | "
                      f"{gbs:.0f} | {d['label'][:150]} |")
        for r in (r for r in torch_rows if r["case"] == case and "compile" in r["impl"]):
            ks = r.get("kernels_by_name") or []
            print(f"\n### {case}: {r['impl']}, {r.get('kernels', '')} kernels a call (the "
                  f"{min(top, len(ks))} longest by name; calls and ms per call)\n")
            print("| class | calls | ms | kernel |")
            print("|---|---|---|---|")
            for c, name, calls, ms in ks[:top]:
                print(f"| {c} | {calls:g} | {ms:.4f} | {name[:110]} |")
            rest = ks[top:]
            if rest:
                print(f"| (rest) | {sum(x[2] for x in rest):g} | {sum(x[3] for x in rest):.4f} | "
                      f"{len(rest)} more names |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--blocks", default=DEFAULT_BLOCKS)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--device", default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--variants", default=DEFAULT_VARIANTS,
                    help="PyTorch variants, of " + ", ".join(VARIANTS))
    ap.add_argument("--no-compile", action="store_true", help="leave out the compiled variants")
    ap.add_argument("--no-step", action="store_true")
    ap.add_argument("--write-specs", metavar="DIR")
    ap.add_argument("--json")
    ap.add_argument("--kfuse-json")
    ap.add_argument("--table-only", action="store_true",
                    help="print the table from --json (PyTorch's rows) and --kfuse-json; run nothing")
    args = ap.parse_args()
    blocks = [parse_block(b) for b in args.blocks.split(",") if b]
    variants = [v for v in args.variants.split(",") if v and not (args.no_compile and "compile" in v)]
    for v in variants:
        if v not in VARIANTS:
            raise SystemExit(f"unknown variant {v} (of {', '.join(VARIANTS)})")
    if args.write_specs:
        write_specs(args.write_specs, blocks, args.batch)
        return
    if args.table_only:
        rows = []
        if os.path.exists(args.json):  # PyTorch's part may have failed: kfuse's rows alone
            with open(args.json) as f:
                rows = [json.loads(line) for line in f if line.strip()]
        table(rows, args.kfuse_json)
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
        keep(bench_block(torch, F, blk, device, args.repeat, variants, args.seed))
        if device == "cuda":
            torch.cuda.empty_cache()
    if not args.no_step:
        keep(bench_step(torch, F, args.batch, device, args.repeat, variants, args.seed))
    if out:
        out.close()
    if args.kfuse_json and os.path.exists(args.kfuse_json):
        table(rows, args.kfuse_json)


if __name__ == "__main__":
    main()
