#!/usr/bin/python3
"""kfuse train against the same loop in PyTorch (Debian's python3-torch, CPU, float32).

The digits MLP (examples/digits/mlp.kf) from one initialisation (numpy, seed 0, written as .npy
for kfuse train --init and loaded into torch), 50 SGD steps (momentum 0.9, weight decay 1e-3)
and 50 AdamW steps (lr 0.01, weight decay 0.01), batches in order with wrap-around as kfuse
train takes them. Every step's loss must agree within 1e-4 relative.

    /usr/bin/python3 tests/train/torch_train.py KFUSE_BINARY WORK_DIR
"""
import json
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = os.path.join(ROOT, "examples", "digits", "mlp.kf")
STEPS = 50
TOLERANCE = 1e-4
CASES = [
    ("sgd", ["--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9", "--weight-decay", "1e-3"],
     lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-3)),
    ("adamw", ["--optimizer", "adamw", "--lr", "0.01", "--weight-decay", "0.01"],
     lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.01)),
]


def main():
    kfuse, work = sys.argv[1], sys.argv[2]
    print(f"torch {torch.__version__}, numpy {np.__version__}")
    torch.set_num_threads(1)
    data = os.path.join(work, "digits")
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "examples", "digits", "prepare.py"),
                    data], check=True)
    x = np.load(os.path.join(data, "train", "x.npy"))
    labels = np.load(os.path.join(data, "train", "labels.npy"))
    # PyTorch's nn.Linear initialisation: uniform(+-1/sqrt(fan_in)) for weight and bias
    rng = np.random.default_rng(0)
    init = {}
    for name, shape, fan_in in (("w1", (64, 128), 64), ("b1", (128,), 64),
                                ("w2", (128, 10), 128), ("b2", (10,), 128)):
        bound = 1.0 / np.sqrt(fan_in)
        init[name] = rng.uniform(-bound, bound, size=shape).astype(np.float32)
    init_dir = os.path.join(work, "init")
    os.makedirs(init_dir, exist_ok=True)
    for name, value in init.items():
        np.save(os.path.join(init_dir, name + ".npy"), value)

    batch, n = 64, len(x)
    worst_all = 0.0
    for case, flags, make_opt in CASES:
        out = subprocess.run([kfuse, "train", SPEC, "--data", os.path.join(data, "train"),
                              "--steps", str(STEPS), "--init", init_dir, "--json"] + flags,
                             check=True, capture_output=True, text=True).stdout
        lines = [json.loads(line) for line in out.splitlines() if line.strip()]
        ours = [o["loss"] for o in lines if "step" in o]
        summary = lines[-1]
        assert len(ours) == STEPS, f"{case}: {len(ours)} losses from kfuse train"
        ps = [torch.tensor(init[k], requires_grad=True) for k in ("w1", "b1", "w2", "b2")]
        opt = make_opt(ps)
        theirs = []
        for step in range(STEPS):
            rows = [(step * batch + r) % n for r in range(batch)]
            xb = torch.tensor(x[rows])
            yb = torch.tensor(labels[rows]).long()
            h = F.gelu(xb @ ps[0] + ps[1], approximate="tanh")
            loss = F.cross_entropy(h @ ps[2] + ps[3], yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            theirs.append(loss.item())
        worst, at = 0.0, 0
        for i, (a, b) in enumerate(zip(ours, theirs)):
            err = abs(a - b) / abs(b)
            if err > worst:
                worst, at = err, i
        worst_all = max(worst_all, worst)
        print(f"{case}: {STEPS} steps, loss {theirs[0]:.6f} -> {theirs[-1]:.6f} (torch), "
              f"{ours[-1]:.6f} (kfuse); worst relative difference {worst:.3g} at step {at + 1}; "
              f"kfuse {summary['dispatches_per_step']} dispatches, "
              f"{summary['submissions']} submissions")
        if not worst <= TOLERANCE:
            for i in range(STEPS):
                print(f"  step {i + 1}: kfuse {ours[i]:.9g} torch {theirs[i]:.9g}")
            sys.exit(f"{case}: losses differ by {worst:.3g} relative (tolerance {TOLERANCE})")
    print(f"ok: every loss within {worst_all:.3g} relative of torch's (tolerance {TOLERANCE})")


if __name__ == "__main__":
    main()
