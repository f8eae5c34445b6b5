#!/usr/bin/env python3
"""Runs kfuse's benchmark cases in PyTorch on the same GPU and prints them side by side.

    kfuse bench --json > kfuse.jsonl                     # on the GPU machine
    python3 bench/torch_compare.py kfuse.jsonl --json torch.jsonl

With a kfuse JSON file (the output of `kfuse bench --json`), the cases and their sizes are read
from it, so both sides run exactly the same shapes; without one, the built-in list (the same as
bench/bench.c's, --size small|full) is used. Each case runs in PyTorch eager and under
torch.compile (default mode, static shapes), timed with CUDA events: warm-up runs first (the
first compiled call compiles), then the median of --repeat runs.

What each case computes, on both sides:
  chain_L           x |> scale(1.5) |> add(0.25) |> relu |> tanh |> sigmoid |> mul(2) |> gelu
                    |> silu, its first L operators (gelu is the tanh approximation in both)
  matmul_bias_gelu  gelu(a @ b + bias); f32 with TF32 off (fp32_precision "ieee", or
                    allow_tf32 False before PyTorch 2.9), f16 inputs with f32 accumulation
                    (reduced-precision reductions off)
  softmax           softmax over the last axis
  rmsnorm_weight    rmsnorm(x) * w (PyTorch: F.rms_norm with the weight, eps 1e-5)
  layernorm_affine  layernorm(x) * w + b (PyTorch: F.layer_norm with weight and bias, eps 1e-5)
  ffn_save          copies of gate, up, hidden (tokens x ffn_dim each) and residual
                    (tokens x dim): eager is one copy_ per pair
PyTorch eager gets the call a PyTorch user would write (one F.layer_norm, not three operators).

Throughput is counted as kfuse counts it (compulsory bytes, or 2*m*n*k flops). A ratio
kfuse/torch is kfuse's throughput over PyTorch's (= torch ms / kfuse fused ms): above 1, kfuse is
faster. Runs without torch too: then it prints the kfuse results alone (a way to turn the JSON
into a Markdown table).
"""

import argparse
import json
import math
import os
import re
import statistics
import sys
import time

# bench/cases.c's chain_steps, in order.
CHAIN_STEPS = [
    ("scale", 1.5),
    ("add", 0.25),
    ("relu", None),
    ("tanh", None),
    ("sigmoid", None),
    ("mul", 2.0),
    ("gelu", None),
    ("silu", None),
]

# bench/bench.c's full_sizes and small_sizes.
SIZES = {
    "full": dict(chain=1 << 28, matmul=[1024, 4096, 8192], ragged=(4095, 4097, 4093),
                 rows=4096, cols=8192, ffn_dim=14336, dim=4096, tokens=4096),
    "small": dict(chain=1 << 20, matmul=[64, 128, 256], ragged=(255, 257, 253),
                  rows=256, cols=1024, ffn_dim=1436, dim=512, tokens=64),
}

DTYPE_SIZE = {"f32": 4, "f16": 2}


def builtin_cases(size):
    s = SIZES[size]
    cases = []
    for ops in range(1, 9):
        cases.append(dict(case="chain_%d" % ops, family="chain", dtype="f32",
                          elements=s["chain"], ops=ops))
    for dtype in ("f32", "f16"):
        for m in s["matmul"]:
            cases.append(dict(case="matmul_bias_gelu_%s_%d" % (dtype, m),
                              family="matmul_bias_gelu", dtype=dtype, m=m, n=m, k=m))
        m, n, k = s["ragged"]
        cases.append(dict(case="matmul_bias_gelu_%s_ragged" % dtype, family="matmul_bias_gelu",
                          dtype=dtype, m=m, n=n, k=k))
    for family in ("softmax", "rmsnorm_weight", "layernorm_affine"):
        cases.append(dict(case=family, family=family, dtype="f32", rows=s["rows"],
                          cols=s["cols"]))
    for name, tokens in (("ffn_save", 1), ("ffn_save_batch", s["tokens"])):
        cases.append(dict(case=name, family="ffn_save", dtype="f32", ffn_dim=s["ffn_dim"],
                          dim=s["dim"], tokens=tokens))
    for c in cases:
        c["size"] = size_str(c)
    return cases


def size_str(c):
    f = c["family"]
    if f == "chain":
        return str(c["elements"])
    if f == "matmul_bias_gelu":
        return "%dx%dx%d" % (c["m"], c["n"], c["k"])
    if f == "ffn_save":
        return "%dx(3x%d+%d)" % (c["tokens"], c["ffn_dim"], c["dim"])
    return "%dx%d" % (c["rows"], c["cols"])


def work_of(c):
    """(work, is_flops): compulsory bytes or flops, as bench/cases.c counts them."""
    f = c["family"]
    e = DTYPE_SIZE.get(c.get("dtype", "f32"), 4)
    if f == "chain":
        return 2.0 * c["elements"] * e, False
    if f == "matmul_bias_gelu":
        return 2.0 * c["m"] * c["n"] * c["k"], True
    if f == "softmax":
        return 2.0 * c["rows"] * c["cols"] * e, False
    if f == "rmsnorm_weight":
        return (2.0 * c["rows"] * c["cols"] + c["cols"]) * e, False
    if f == "layernorm_affine":
        return (2.0 * c["rows"] * c["cols"] + 2 * c["cols"]) * e, False
    if f == "ffn_save":
        return 2.0 * 4 * c["tokens"] * (3 * c["ffn_dim"] + c["dim"]), False
    raise ValueError("unknown family " + f)


def read_kfuse(path):
    """The device line, the references and the cases of a `kfuse bench --json` file."""
    device, refs, cases = None, {}, []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line.startswith("{"):
                continue  # a stray message, or a table line if --json was forgotten
            try:
                obj = json.loads(line)
            except ValueError as e:
                sys.exit("%s:%d: not JSON: %s" % (path, number, e))
            kind = obj.get("kind")
            if kind == "device":
                device = obj
            elif kind == "reference":
                refs[obj.get("reference")] = obj
            elif kind == "case" and obj.get("family") in (
                    "chain", "matmul_bias_gelu", "softmax", "rmsnorm_weight", "layernorm_affine",
                    "ffn_save"):
                cases.append(obj)
    if not cases:
        sys.exit("%s: no kfuse cases in it (make it with `kfuse bench --json > FILE`)" % path)
    return device, refs, cases


# --------------------------------------------------------------------------------------------
# PyTorch
# --------------------------------------------------------------------------------------------

def make_case(torch, c, dev, gen):
    """The case's tensors and a function running it once; the function keeps no state."""
    F = torch.nn.functional
    dtype = torch.float16 if c.get("dtype") == "f16" else torch.float32

    def rand(*shape, lo=-2.0, hi=2.0, dt=dtype):
        t = torch.empty(*shape, device=dev, dtype=torch.float32)
        t.uniform_(lo, hi, generator=gen)
        return t.to(dt)

    f = c["family"]
    if f == "chain":
        x = rand(c["elements"])
        steps = CHAIN_STEPS[: c["ops"]]

        def run():
            y = x
            for op, number in steps:
                if op == "scale" or op == "mul":
                    y = y * number
                elif op == "add":
                    y = y + number
                elif op == "relu":
                    y = torch.relu(y)
                elif op == "tanh":
                    y = torch.tanh(y)
                elif op == "sigmoid":
                    y = torch.sigmoid(y)
                elif op == "gelu":
                    y = F.gelu(y, approximate="tanh")
                elif op == "silu":
                    y = F.silu(y)
            return y
        return run

    if f == "matmul_bias_gelu":
        a = rand(c["m"], c["k"], lo=-1.0, hi=1.0)
        b = rand(c["k"], c["n"], lo=-1.0, hi=1.0)
        bias = rand(c["n"], lo=-1.0, hi=1.0)

        def run():
            return F.gelu(a @ b + bias, approximate="tanh")
        return run

    if f in ("softmax", "rmsnorm_weight", "layernorm_affine"):
        rows, cols = c["rows"], c["cols"]
        x = rand(rows, cols)
        w = rand(cols)
        bvec = rand(cols)
        if f == "softmax":
            return lambda: torch.softmax(x, dim=-1)
        if f == "layernorm_affine":
            return lambda: F.layer_norm(x, (cols,), w, bvec, eps=1e-5)
        if hasattr(F, "rms_norm"):
            return lambda: F.rms_norm(x, (cols,), weight=w, eps=1e-5)
        return lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    if f == "ffn_save":
        t = c["tokens"]
        shapes = [(t, c["ffn_dim"])] * 3 + [(t, c["dim"])]
        srcs = [rand(*s, dt=torch.float32) for s in shapes]
        dsts = [torch.empty(*s, device=dev, dtype=torch.float32) for s in shapes]

        def run():
            for s, d in zip(srcs, dsts):
                d.copy_(s)
            return dsts[0]
        return run

    raise ValueError("unknown family " + f)


def no_tf32(torch):
    """f32 means f32: no TF32 anywhere; f16 matmuls accumulate in f32. PyTorch 2.9 brought
    fp32_precision settings and deprecated allow_tf32; the two are not to be mixed, so a PyTorch
    that has the new ones gets only those."""
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
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False


def time_fn(torch, dev, fn, repeat, warmup, batch=1):
    """Median and minimum milliseconds of fn: CUDA events around each call on a GPU (around
    `batch` calls back to back, divided by batch: kfuse bench --batch), the wall clock on the
    CPU."""
    for _ in range(warmup):
        fn()
    times = []
    if dev.type == "cuda":
        torch.cuda.synchronize()
        for _ in range(repeat):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(batch):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / batch)
    else:
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), min(times)


def run_torch(torch, c, args, dev):
    """{'eager': (median, min) or error string, 'compile': ...} for one case."""
    result = {}
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)
    try:
        fn = make_case(torch, c, dev, gen)
        result["eager"] = time_fn(torch, dev, fn, args.repeat, args.warmup, args.batch)
    except Exception as e:  # out of memory on a smaller GPU: report, go on
        result["eager"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
        fn = None
    if fn is None:
        pass  # no tensors: nothing to compile either
    elif not args.no_compile and not hasattr(torch, "compile"):
        result["compile"] = "torch %s has no torch.compile (2.0 or later has)" % torch.__version__
    elif not args.no_compile:
        try:
            torch._dynamo.reset()  # fresh compile per case: no recompile limit, no dynamic shapes
            compiled = torch.compile(fn, dynamic=False, mode=args.compile_mode)
            result["compile"] = time_fn(torch, dev, compiled, args.repeat, max(args.warmup, 2),
                                        args.batch)
        except Exception as e:
            msg = str(e).splitlines()[0] if str(e) else ""
            result["compile"] = "%s: %s" % (type(e).__name__, msg[:200])
    # Drop the case's tensors (the compiled function's guards hold them too) before the next.
    del fn
    if hasattr(torch, "_dynamo"):
        torch._dynamo.reset()
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return result


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------

def fmt(v, digits=4):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return "%.*g" % (digits, v)


def throughput(work, flops, ms):
    """'123.4 GB/s' or '56.78 TF/s'; '-' without a time."""
    if not ms or ms <= 0:
        return "-"
    return "%s %s" % (fmt(work / (ms * 1e-3) / (1e12 if flops else 1e9)),
                      "TF/s" if flops else "GB/s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kfuse_json", nargs="?", help="output of `kfuse bench --json` (optional)")
    ap.add_argument("--size", choices=["small", "full"], default=None,
                    help="built-in case sizes when no kfuse JSON is given (default full)")
    ap.add_argument("--filter", help="only cases whose name matches this regex (re.search)")
    ap.add_argument("--repeat", type=int, default=10, help="timed runs per variant (median)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed runs first")
    ap.add_argument("--batch", type=int, default=1,
                    help="calls back to back inside each timed run, time per call reported "
                         "(kfuse bench --batch)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--no-compile", action="store_true", help="eager only")
    ap.add_argument("--compile-mode", default=None,
                    help="torch.compile mode (default: PyTorch's default mode)")
    ap.add_argument("--json", metavar="PATH", help="write one JSON object per case to PATH")
    ap.add_argument("--device", default="cuda",
                    help="cuda (default), or cpu: PyTorch on the CPU, timed by the wall clock "
                         "(beside a kfuse run on a CPU adapter such as lavapipe)")
    ap.add_argument("--threads", type=int, default=0,
                    help="with --device cpu: PyTorch's threads (default: every core)")
    ap.add_argument("--torch-json", metavar="PATH", action="append", default=[],
                    help="take PyTorch's results from an earlier --json output (repeatable) "
                         "instead of running PyTorch: joins runs made apart")
    args = ap.parse_args()

    device = refs = None
    if args.kfuse_json:
        device, refs, cases = read_kfuse(args.kfuse_json)
    else:
        cases = builtin_cases(args.size or "full")
    if args.filter:
        cases = [c for c in cases if re.search(args.filter, c["case"])]

    stored = {}
    for path in args.torch_json:
        with open(path) as f:
            for line in f:
                if line.startswith("{"):
                    rec = json.loads(line)
                    if rec.get("kind") == "torch_case" and any(rec.get(k) is not None for k in (
                            "eager_ms", "compile_ms", "eager_error", "compile_error")):
                        stored[rec["case"]] = rec
    try:
        import torch
    except ImportError:
        torch = None
    if stored:
        torch = None  # the results are given
        first = next(iter(stored.values()))
        print("torch results from %s (torch %s on %s)" % (
            ", ".join(args.torch_json), first.get("torch", "?"), first.get("gpu", "?")))
    elif torch is None:
        print("no torch here: printing the kfuse results alone", file=sys.stderr)
    elif args.device == "cuda" and not torch.cuda.is_available():
        print("torch %s sees no CUDA device: printing the kfuse results alone" %
              torch.__version__, file=sys.stderr)
        torch = None

    dev = None
    header = []
    if device:
        header.append("kfuse: %s (%s, %s), %s sizes, median of %s" % (
            device.get("device") or device.get("description"), device.get("backend"),
            device.get("adapter_type"), device.get("size"), device.get("repeat")))
        for name, r in sorted(refs.items()):
            if r.get("status") == "ok":
                header.append("kfuse reference %s %s %s: %s %s" % (
                    name, r.get("dtype"), r.get("size"), fmt(r.get("value")), r.get("metric")))
    gpu_name = None
    if torch is not None:
        dev = torch.device(args.device)
        no_tf32(torch)
        if dev.type == "cuda":
            gpu_name = torch.cuda.get_device_name(dev)
        else:
            # Every core, as lavapipe uses them (OpenMP may start with fewer on a busy machine).
            torch.set_num_threads(args.threads or os.cpu_count() or 1)
            gpu_name = "CPU, %d threads" % torch.get_num_threads()
        header.append("torch %s on %s, median of %d%s (%s), torch.compile %s" % (
            torch.__version__, gpu_name, args.repeat,
            " (each %d calls back to back, per call)" % args.batch if args.batch > 1 else "",
            "CUDA events" if dev.type == "cuda" else "wall clock",
            "off" if args.no_compile else "mode " + (args.compile_mode or "default")))
    for line in header:
        print(line)
    print()

    out = open(args.json, "w") if args.json else None
    cols = ["case", "size", "dtype", "disp", "fused ms", "unfused ms", "speedup", "kfuse fused",
            "of ref", "eager ms", "compile ms", "kfuse/eager", "kfuse/compile"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "|".join("---" for _ in cols) + "|")
    for c in cases:
        work, flops = work_of(c)
        if c.get("flops"):
            work = c["flops"]
        elif c.get("compulsory_bytes"):
            work = c["compulsory_bytes"]
        kf_ms = c.get("fused_ms") if c.get("status", "ok") == "ok" else None
        kf_unfused = c.get("unfused_ms") if kf_ms else None
        res = {}
        if torch is not None:
            print("running %s ..." % c["case"], file=sys.stderr, flush=True)
            res = run_torch(torch, c, args, dev)
        if c["case"] in stored:
            rec = stored[c["case"]]
            for what in ("eager", "compile"):
                if rec.get(what + "_ms") is not None:
                    res[what] = (rec[what + "_ms"], rec.get(what + "_min_ms"))
                elif rec.get(what + "_error"):
                    res[what] = rec[what + "_error"]
        eager = res.get("eager")
        comp = res.get("compile")
        eager_ms = eager[0] if isinstance(eager, tuple) else None
        comp_ms = comp[0] if isinstance(comp, tuple) else None
        ratio_eager = eager_ms / kf_ms if kf_ms and eager_ms else None
        ratio_comp = comp_ms / kf_ms if kf_ms and comp_ms else None
        disp = ("%s/%s" % (c["dispatches_fused"], c["dispatches_unfused"])
                if kf_ms and "dispatches_fused" in c else "-")
        speedup = "%.2fx" % (kf_unfused / kf_ms) if kf_ms and kf_unfused else "-"
        frac = c.get("fraction") if kf_ms else None
        of_ref = "%.1f%% %s" % (100 * frac, c.get("reference", "")) if frac else "-"
        row = [c["case"], c.get("size") or size_str(c), c.get("dtype", "f32"), disp, fmt(kf_ms),
               fmt(kf_unfused), speedup, throughput(work, flops, kf_ms), of_ref,
               fmt(eager_ms), fmt(comp_ms), fmt(ratio_eager, 3), fmt(ratio_comp, 3)]
        print("| " + " | ".join(row) + " |", flush=True)
        for what, r in (("eager", eager), ("compile", comp)):
            if isinstance(r, str):
                print("    %s %s: %s" % (c["case"], what, r), file=sys.stderr)
        if c.get("status") not in (None, "ok"):
            print("    %s: kfuse %s: %s" % (c["case"], c.get("status"), c.get("note", "")),
                  file=sys.stderr)
        if out:
            rec = dict(kind="torch_case", case=c["case"], family=c["family"],
                       dtype=c.get("dtype", "f32"), size=c.get("size") or size_str(c),
                       metric="TFLOP/s" if flops else "GB/s", work=work,
                       kfuse_fused_ms=kf_ms, kfuse_unfused_ms=kf_unfused,
                       eager_ms=eager_ms, compile_ms=comp_ms,
                       eager_min_ms=eager[1] if isinstance(eager, tuple) else None,
                       compile_min_ms=comp[1] if isinstance(comp, tuple) else None,
                       kfuse_over_eager=ratio_eager, kfuse_over_compile=ratio_comp)
            if isinstance(eager, str):
                rec["eager_error"] = eager
            if isinstance(comp, str):
                rec["compile_error"] = comp
            if torch is not None:
                rec["torch"] = torch.__version__
                rec["gpu"] = gpu_name
            elif c["case"] in stored:
                rec["torch"] = stored[c["case"]].get("torch")
                rec["gpu"] = stored[c["case"]].get("gpu")
            out.write(json.dumps(rec) + "\n")
            out.flush()
    if out:
        out.close()


if __name__ == "__main__":
    main()
