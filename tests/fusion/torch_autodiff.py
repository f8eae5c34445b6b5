"""kfuse's graph gradients against torch.autograd (run by tests/fusion/test_autodiff.c).

usage: torch_autodiff.py SPEC DIR LOSS WRT...

SPEC is the forward graph in kfuse's graph language (kf_graph_format's output); DIR holds one
NAME.npy per input and d_NAME.npy per WRT name: the gradients kfuse computed (on the GPU, fused).
The graph is evaluated in float64 by torch, the loss differentiated by torch.autograd, and every
gradient element compared: relative error against max(|torch|, 1% of the gradient's rms), at
most 1e-3 (kfuse computes in f32), with 1e-5 as an absolute floor. Prints the torch version it used. Exit 0 when all agree.
"""
import re
import sys

import numpy as np
import torch
import torch.nn.functional as F


def main():
    spec_path, folder, loss_name = sys.argv[1], sys.argv[2], sys.argv[3]
    wrt = sys.argv[4:]
    print(f"torch {torch.__version__}, numpy {np.__version__}")
    env = {}
    for raw in open(spec_path).read().splitlines():
        line = raw.split("#")[0].strip()
        if not line or line.startswith("out "):
            continue
        m = re.match(r"(\w+): (f32|f16|i32)\[(.*)\]$", line)
        if m:
            name, dtype = m.group(1), m.group(2)
            data = np.load(f"{folder}/{name}.npy")
            if dtype == "i32":
                env[name] = torch.tensor(data.astype(np.int64))
            else:
                env[name] = torch.tensor(data.astype(np.float64), requires_grad=name in wrt)
            continue
        m = re.match(r"(\w+) = (\w+)\((.*)\)$", line)
        if not m:
            raise SystemExit(f"cannot read: {line}")
        name, op, argtext = m.groups()
        args, kw = [], {}
        for a in split_args(argtext):
            if "=" in a:
                k, v = a.split("=")
                kw[k] = value_of(v)
            elif re.match(r"^[A-Za-z_]", a):
                args.append(env[a])
            else:
                args.append(torch.tensor(float(a), dtype=torch.float64))
        env[name] = apply(op, args, kw)
    loss = env[loss_name]
    loss.backward()
    worst = 0.0
    ok = True
    for w in wrt:
        grad = env[w].grad  # None where the loss does not depend on it: zeros
        ref = grad.numpy() if grad is not None else np.zeros(tuple(env[w].shape))
        got = np.load(f"{folder}/d_{w}.npy").astype(np.float64)
        # 1e-5 absolute: a gradient that is zero in exact arithmetic (layernorm over two columns)
        # is f32 rounding noise in kfuse and float64 noise in torch
        floor = max(0.01 * float(np.sqrt(np.mean(ref * ref))), 1e-5)
        err = float(np.max(np.abs(got - ref) / np.maximum(np.abs(ref), floor)))
        worst = max(worst, err)
        if not err <= 1e-3:
            i = int(np.argmax(np.abs(got - ref) / np.maximum(np.abs(ref), floor)))
            print(f"d {w}: element {i}: kfuse {got.flat[i]:.9g}, torch {ref.flat[i]:.9g} "
                  f"(rel error {err:.3g})")
            ok = False
    print(f"{len(wrt)} gradients, worst rel error {worst:.3g}: {'ok' if ok else 'MISMATCH'}")
    return 0 if ok else 1


def split_args(text):
    """Arguments at commas outside brackets (shape=[2, -1] is one argument)."""
    parts, depth, cur = [], 0, ""
    for c in text:
        depth += c == "["
        depth -= c == "]"
        if c == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += c
    return parts + [cur.strip()] if cur.strip() else parts


def value_of(text):
    text = text.strip()
    if text.startswith("["):
        return [int(v) for v in text[1:-1].split(",") if v.strip()]
    if text in ("true", "false"):
        return 1.0 if text == "true" else 0.0
    return float(text)


def apply(op, a, kw):
    alpha = kw.get("alpha", 0.0)
    eps = kw.get("eps", 0.0) or 1e-5
    unary = {
        "relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "silu": F.silu,
        "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": torch.log,
        "sqrt": torch.sqrt, "reciprocal": torch.reciprocal,
        "square": lambda x: x * x,
        "gelu_exact": lambda x: F.gelu(x),
        "softmax": lambda x: torch.softmax(x, -1),
        "log_softmax": lambda x: torch.log_softmax(x, -1),
        "sum": lambda x: x.sum(-1), "mean": lambda x: x.mean(-1),
    }
    if op in unary:
        return unary[op](a[0])
    if op == "gelu":
        return F.gelu(a[0], approximate="none" if kw.get("exact") else "tanh")
    if op == "leaky_relu":
        return F.leaky_relu(a[0], alpha or 0.01)
    if op == "scale":
        return (alpha or 1.0) * a[0]
    if op == "affine":
        return (alpha or 1.0) * a[0] + kw.get("beta", 0.0)
    binary = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
              "maximum": torch.maximum}
    if op in binary:
        return binary[op](a[0], a[1])
    if op == "matmul":
        # the last two axes; batch dims broadcast as numpy's (and torch's) matmul does
        x = a[0].transpose(-1, -2) if kw.get("transpose_a") else a[0]
        y = a[1].transpose(-1, -2) if kw.get("transpose_b") else a[1]
        return x @ y
    if op == "rmsnorm":
        y = a[0] * torch.rsqrt((a[0] * a[0]).mean(-1, keepdim=True) + eps)
        y = y * a[1] if len(a) > 1 else y
        return y + a[2] if len(a) > 2 else y
    if op == "layernorm":
        n = a[0].shape[-1]
        return F.layer_norm(a[0], (n,), a[1] if len(a) > 1 else None,
                            a[2] if len(a) > 2 else None, eps)
    if op == "attention":
        # the explicit formula (torch 1.13 has no F.scaled_dot_product_attention)
        q, k, v = a
        t, d = q.shape[-2], q.shape[-1]
        scores = (q @ k.transpose(-1, -2)) * (kw.get("scale", 0.0) or d ** -0.5)
        if kw.get("causal", 1.0):
            mask = torch.ones(t, t, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        return torch.softmax(scores, -1) @ v
    if op == "rope":
        x = a[0]
        t, d = x.shape[-2], x.shape[-1]
        base = kw.get("base", 0.0) or 10000.0
        freq = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        theta = torch.arange(t, dtype=torch.float64)[:, None] * freq[None, :]
        c, s = torch.cos(theta), torch.sin(theta)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), -1).reshape(x.shape)
    if op == "swiglu":
        return F.silu(a[0]) * a[1]
    if op == "reshape":
        return a[0].reshape(kw["shape"])
    if op == "permute":
        return a[0].permute(kw["axes"])
    if op == "slice":
        axis, start = int(kw.get("axis", 0)), int(kw.get("start", 0))
        length = int(kw.get("length", 0)) or a[0].shape[axis] - start
        return a[0].narrow(axis, start, length)
    if op == "concat":
        return torch.cat([a[0], a[1]], dim=int(kw.get("axis", 0)))
    if op == "embedding":
        return F.embedding(a[1], a[0])
    if op == "cross_entropy":
        return F.cross_entropy(a[0].reshape(-1, a[0].shape[-1]), a[1].reshape(-1))
    raise SystemExit(f"torch_autodiff.py: no torch form for {op}")


if __name__ == "__main__":
    sys.exit(main())
