#!/usr/bin/python3
"""The character GPT (examples/chargpt) in kfuse against the same model in PyTorch (Debian's
python3-torch, CPU).

From one initialisation (numpy, seed 0, each matrix uniform(+-1/sqrt(fan_in)) as kfuse's default
initialiser draws it; written as .npy for --init and loaded into torch) and the same batches:

1. the first batch's loss and the gradient of every param: `kfuse run` on the spec with
   `grad(loss, ...)` outputs and `--save`, against torch.autograd in float64; every element
   within 1e-3 relative to max(|torch|, 1% of the gradient's rms);
2. `kfuse train --json` with AdamW for STEPS steps (batches in order, as kfuse train takes them
   without --shuffle) against torch.optim.AdamW in float32: every step's loss within 1e-3
   relative;
3. `kfuse sample` from the params kfuse trained (--save) against the same draws in torch.

The model is examples/chargpt/gpt_spec.py's at --size small (CI: context 16, width 32, 2 heads,
2 layers, batch 4: seconds) or --size full (gpt.kf's sizes). Either way it first checks that
examples/chargpt/gpt.kf is what gpt_spec.py writes at its defaults, so the model tested is the
example's.

    /usr/bin/python3 tests/train/torch_gpt.py KFUSE_BINARY WORK_DIR [--size small|full]
        [--steps N] [--lr LR]
"""
import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "chargpt")
sys.path.insert(0, EXAMPLE)
import gpt_spec  # noqa: E402

SIZES = {
    "small": dict(vocab=76, context=16, width=32, heads=2, layers=2, batch=4, ffn=128),
    "full": dict(gpt_spec.DEFAULTS),
}
LOSS_TOLERANCE = 1e-3
GRAD_TOLERANCE = 1e-3
EPS = 1e-5  # rmsnorm's default eps in kfuse


def init_params(cfg):
    """kfuse's default initialiser's ranges (uniform(1/sqrt(fan_in)), fan_in the product of every
    dim but the last), drawn by numpy."""
    rng = np.random.default_rng(0)
    params = {}
    for name, shape in gpt_spec.param_shapes(**cfg):
        bound = 1.0 / math.sqrt(int(np.prod(shape[:-1])))
        params[name] = rng.uniform(-bound, bound, size=shape).astype(np.float32)
    return params


def rmsnorm(x):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS)


def forward(p, x, y, cfg):
    """The loss of gpt.kf, op for op."""
    b, t = x.shape
    logits = forward_logits(p, x, cfg)
    return F.cross_entropy(logits.reshape(b * t, -1), y.reshape(-1))


def forward_logits(p, x, cfg):
    """gpt.kf's logits [B, T, V]."""
    b, t = x.shape
    c, h = cfg["width"], cfg["heads"]
    d = c // h
    tok = p["wte"][x]
    hid = (tok + p["wpe"]).reshape(b * t, c)
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    for i in range(cfg["layers"]):
        qkv = rmsnorm(hid) @ p[f"l{i}_qkv"]
        q, k, v = (qkv[:, j * c:(j + 1) * c].reshape(b, t, h, d).permute(0, 2, 1, 3)
                   for j in range(3))
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
        scores = scores.masked_fill(~mask, float("-inf"))
        att = (scores.softmax(dim=-1) @ v).permute(0, 2, 1, 3).reshape(b * t, c)
        hid = att @ p[f"l{i}_proj"] + hid
        ffn = F.gelu(rmsnorm(hid) @ p[f"l{i}_up"], approximate="tanh") @ p[f"l{i}_down"]
        hid = ffn + hid
    return (rmsnorm(hid) @ p["head"]).reshape(b, t, -1)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)}\nexited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r.stdout


def check_example_is_generated():
    with open(os.path.join(EXAMPLE, "gpt.kf")) as f:
        if f.read() != gpt_spec.spec(**gpt_spec.DEFAULTS):
            sys.exit("examples/chargpt/gpt.kf is not what gpt_spec.py writes: regenerate it "
                     "(/usr/bin/python3 examples/chargpt/gpt_spec.py > examples/chargpt/gpt.kf)")


def check_gradients(kfuse, work, cfg, spec_text, init, x, y):
    names = [n for n, _ in gpt_spec.param_shapes(**cfg)]
    grads = [f"d_{n}" for n in names]
    grad_spec = os.path.join(work, "gpt_grad.kf")
    with open(grad_spec, "w") as f:
        f.write(spec_text)
        f.write(f"{', '.join(grads)} = grad(loss, {', '.join(names)})\n")
        f.write(f"out {', '.join(grads)}\n")
    batch_dir = os.path.join(work, "batch")
    os.makedirs(batch_dir, exist_ok=True)
    np.save(os.path.join(batch_dir, "x.npy"), x)
    np.save(os.path.join(batch_dir, "y.npy"), y)
    out_dir = os.path.join(work, "grads")
    cmd = [kfuse, "run", grad_spec, "--repeat", "1", "--save", out_dir,
           "--input", f"x={batch_dir}/x.npy", "--input", f"y={batch_dir}/y.npy"]
    for n in names:
        cmd += ["--input", f"{n}={work}/init/{n}.npy"]
    run(cmd)

    p = {n: torch.tensor(v, dtype=torch.float64, requires_grad=True) for n, v in init.items()}
    loss = forward(p, torch.tensor(x).long(), torch.tensor(y).long(), cfg)
    loss.backward()
    ours_loss = float(np.load(os.path.join(out_dir, "loss.npy")))
    loss_err = abs(ours_loss - loss.item()) / abs(loss.item())
    worst, worst_at = 0.0, ""
    for n, g in zip(names, grads):
        ours = np.load(os.path.join(out_dir, g + ".npy")).astype(np.float64)
        theirs = p[n].grad.numpy()
        if ours.shape != theirs.shape:
            sys.exit(f"{g}: kfuse's is {ours.shape}, torch's {theirs.shape}")
        floor = 0.01 * math.sqrt(float((theirs ** 2).mean()))
        err = np.abs(ours - theirs) / np.maximum(np.abs(theirs), floor)
        at = np.unravel_index(int(err.argmax()), err.shape)
        if err[at] > worst:
            worst = float(err[at])
            worst_at = f"{g}{list(at)}: kfuse {ours[at]:.9g}, torch {theirs[at]:.9g}"
    print(f"first batch: loss {ours_loss:.6f} (kfuse), {loss.item():.6f} (torch float64), "
          f"relative difference {loss_err:.3g}; {len(names)} gradients, worst element "
          f"{worst:.3g} relative ({worst_at})")
    if not loss_err <= LOSS_TOLERANCE:
        sys.exit(f"the first loss differs by {loss_err:.3g} relative (tolerance {LOSS_TOLERANCE})")
    if not worst <= GRAD_TOLERANCE:
        sys.exit(f"a gradient differs by {worst:.3g} relative (tolerance {GRAD_TOLERANCE}): "
                 f"{worst_at}")
    return worst


def check_training(kfuse, work, cfg, spec_path, data, init, steps, lr):
    out = run([kfuse, "train", spec_path, "--data", os.path.join(data, "train"), "--steps",
               str(steps), "--lr", str(lr), "--optimizer", "adamw", "--init",
               os.path.join(work, "init"), "--save", os.path.join(work, "trained"), "--json"])
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    ours = [o["loss"] for o in lines if "step" in o]
    summary = lines[-1]
    if len(ours) != steps:
        sys.exit(f"{len(ours)} losses from kfuse train, not {steps}")

    x = np.load(os.path.join(data, "train", "x.npy"))
    y = np.load(os.path.join(data, "train", "y.npy"))
    p = {n: torch.tensor(v, requires_grad=True) for n, v in init.items()}
    names = [n for n, _ in gpt_spec.param_shapes(**cfg)]
    opt = torch.optim.AdamW([p[n] for n in names], lr=lr, weight_decay=0.0)
    batch, n = cfg["batch"], len(x)
    theirs = []
    for step in range(steps):
        rows = [(step * batch + r) % n for r in range(batch)]
        loss = forward(p, torch.tensor(x[rows]).long(), torch.tensor(y[rows]).long(), cfg)
        opt.zero_grad()
        loss.backward()
        opt.step()
        theirs.append(loss.item())
    errs = [abs(a - b) / abs(b) for a, b in zip(ours, theirs)]
    worst = max(errs)
    at = errs.index(worst)
    print(f"training: {steps} AdamW steps (lr {lr}), loss {theirs[0]:.6f} -> {theirs[-1]:.6f} "
          f"(torch), {ours[0]:.6f} -> {ours[-1]:.6f} (kfuse); worst relative difference "
          f"{worst:.3g} at step {at + 1}; kfuse {summary['dispatches_per_step']} dispatches, "
          f"{summary['time_ms_per_step']:.1f} ms per step")
    if not worst <= LOSS_TOLERANCE:
        for i in range(steps):
            print(f"  step {i + 1}: kfuse {ours[i]:.9g} torch {theirs[i]:.9g}")
        sys.exit(f"losses differ by {worst:.3g} relative (tolerance {LOSS_TOLERANCE})")
    return worst


MASK = (1 << 64) - 1


def splitmix(state):
    """kfuse sample's generator (cmd_sample.c): the new state and the next 64-bit draw."""
    state = (state + 0x9e3779b97f4a7c15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & MASK
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & MASK
    return state, z ^ (z >> 31)


def check_sampling(kfuse, work, cfg, data, prompt="This License", length=40, seed=7):
    """kfuse sample (temperature 1, a seed) from the params kfuse trained, with the training spec
    and with one written at batch 1, against the same draws in torch (float64 logits, the last T
    characters as the window, kfuse's generator and its inverse-CDF draw). A draw landing within
    1e-6 of a boundary of the cumulative softmax could go either way in f32; the comparison stops
    there."""
    with open(os.path.join(data, "vocab.json")) as f:
        vocab = json.load(f)
    ids = [vocab.index(c) for c in prompt]
    params = os.path.join(work, "trained")
    p = {n: torch.tensor(np.load(os.path.join(params, n + ".npy")), dtype=torch.float64)
         for n, _ in gpt_spec.param_shapes(**cfg)}
    t = cfg["context"]
    want, close, state = prompt, None, seed
    one = dict(cfg, batch=1)
    with torch.no_grad():
        for n in range(length):
            window = ids[-t:]
            x = torch.tensor([window + [0] * (t - len(window))])
            logits = forward_logits(p, x, one)[0, len(window) - 1].numpy()
            weights = np.exp(logits - logits.max())
            state, z = splitmix(state)
            u = (z >> 11) * 2.0 ** -53 * weights.sum()
            bounds = np.cumsum(weights)
            if close is None and np.abs(bounds - u).min() < 1e-6 * weights.sum():
                close = n
            ids.append(int(np.searchsorted(bounds, u, side="right")))
            want += vocab[ids[-1]]
    if close is not None:
        want = want[:len(prompt) + close]
    for batch in sorted({1, cfg["batch"]}):
        spec_path = os.path.join(work, f"gpt_b{batch}.kf")
        with open(spec_path, "w") as f:
            f.write(gpt_spec.spec(**dict(cfg, batch=batch)))
        got = run([kfuse, "sample", spec_path, "--params", params, "--vocab",
                   os.path.join(data, "vocab.json"), "--prompt", prompt, "--length", str(length),
                   "--seed", str(seed)])[:-1]
        if not got.startswith(want):
            sys.exit(f"kfuse sample (batch {batch}) printed {got!r}, torch {want!r}")
    print(f"sampling: kfuse sample (batch 1 and {cfg['batch']}, seed {seed}) drew the "
          f"{len(want) - len(prompt)} characters torch draws"
          + (f" (up to a draw at a boundary at character {close + 1})" if close is not None
             else "")
          + f": {want!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kfuse")
    ap.add_argument("work")
    ap.add_argument("--size", choices=sorted(SIZES), default="small")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=3e-3)
    args = ap.parse_args()
    print(f"torch {torch.__version__}, numpy {np.__version__}")
    torch.set_num_threads(1)
    check_example_is_generated()
    cfg = SIZES[args.size]
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, "data")
    run(["/usr/bin/python3", os.path.join(EXAMPLE, "prepare.py"), data, "--context",
         str(cfg["context"])])
    with open(os.path.join(data, "vocab.json")) as f:
        vocab = json.load(f)
    if len(vocab) != cfg["vocab"]:
        sys.exit(f"prepare.py's vocabulary has {len(vocab)} characters, the model {cfg['vocab']}")
    spec_text = gpt_spec.spec(**cfg)
    spec_path = os.path.join(work, "gpt.kf")
    with open(spec_path, "w") as f:
        f.write(spec_text)
    init = init_params(cfg)
    os.makedirs(os.path.join(work, "init"), exist_ok=True)
    for name, value in init.items():
        np.save(os.path.join(work, "init", name + ".npy"), value)

    x = np.load(os.path.join(data, "train", "x.npy"))[:cfg["batch"]]
    y = np.load(os.path.join(data, "train", "y.npy"))[:cfg["batch"]]
    grad_worst = check_gradients(args.kfuse, work, cfg, spec_text, init, x, y)
    loss_worst = check_training(args.kfuse, work, cfg, spec_path, data, init, args.steps,
                                args.lr)
    check_sampling(args.kfuse, work, cfg, data)
    print(f"ok ({args.size}: {cfg}): gradients within {grad_worst:.3g}, losses within "
          f"{loss_worst:.3g} relative of torch's (tolerances {GRAD_TOLERANCE}, "
          f"{LOSS_TOLERANCE})")


if __name__ == "__main__":
    main()
