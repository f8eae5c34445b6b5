#!/usr/bin/python3
"""The GNU GPL version 3 (/usr/share/common-licenses/GPL-3, on every Debian machine) as windows of
character ids for a character-level language model, as kfuse train reads them:

    OUT/vocab.json           the vocabulary: a JSON list of strings, entry i is character id i
    OUT/train/x.npy, y.npy   int32 [N, T]: x a window of T character ids, y the next character
    OUT/val/x.npy, y.npy     of each (y[:, t] = the id after x[:, t]), for the held-out text

The vocabulary is every character of the whole text, sorted (so the held-out text has no unknown
character). The split is fixed and needs no random numbers: the first 90% of the characters are
training text, the rest validation text. Training windows start every STRIDE characters (they
overlap: train with --shuffle); validation windows do not overlap, so each held-out character is
predicted once. It prints the unigram entropy of the training text (the loss of a model that
knows only the character frequencies) and its bigram conditional entropy (the loss of a model
that knows the previous character), in nats as kfuse's cross_entropy reports them.

    /usr/bin/python3 examples/chargpt/prepare.py [OUT] [--context T] [--stride S] [--text FILE]
    (defaults: build/chargpt, 64, 8, /usr/share/common-licenses/GPL-3)
"""
import argparse
import json
import math
import os
import sys

import numpy as np

TEXT = "/usr/share/common-licenses/GPL-3"
VALIDATION_SHARE = 0.1


def entropies(ids, vocab_size):
    """Unigram entropy and bigram conditional entropy H(next | previous) of ids, in nats."""
    counts = np.bincount(ids, minlength=vocab_size).astype(np.float64)
    p = counts[counts > 0] / counts.sum()
    unigram = float(-(p * np.log(p)).sum())
    pairs = np.zeros((vocab_size, vocab_size), dtype=np.float64)
    np.add.at(pairs, (ids[:-1], ids[1:]), 1.0)
    rows = pairs.sum(axis=1, keepdims=True)
    nz = pairs > 0
    cond = np.where(nz, pairs / np.maximum(rows, 1.0), 1.0)
    bigram = float(-(pairs[nz] * np.log(cond[nz])).sum() / pairs.sum())
    return unigram, bigram


def windows(ids, context, stride):
    """x, y: every window ids[s : s + context] with s a multiple of stride, and its shift by one."""
    starts = np.arange(0, len(ids) - context, stride)
    x = np.stack([ids[s:s + context] for s in starts]).astype(np.int32)
    y = np.stack([ids[s + 1:s + 1 + context] for s in starts]).astype(np.int32)
    return x, y


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", default="build/chargpt")
    ap.add_argument("--context", type=int, default=64, help="characters per window (T)")
    ap.add_argument("--stride", type=int, default=8, help="characters between training windows")
    ap.add_argument("--text", default=TEXT)
    args = ap.parse_args()
    if args.context < 1 or args.stride < 1:
        sys.exit("prepare.py: --context and --stride are at least 1")
    if not os.path.exists(args.text):
        sys.exit(f"prepare.py: {args.text} is missing (Debian's base-files ships "
                 "/usr/share/common-licenses/GPL-3)")
    with open(args.text, encoding="utf-8") as f:
        text = f.read()
    vocab = sorted(set(text))
    index = {c: i for i, c in enumerate(vocab)}
    ids = np.array([index[c] for c in text], dtype=np.int64)
    split = int(len(ids) * (1.0 - VALIDATION_SHARE))
    train_ids, val_ids = ids[:split], ids[split:]
    if len(val_ids) <= args.context:
        sys.exit(f"prepare.py: {args.text} is too short for windows of {args.context}")

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f)
        f.write("\n")
    for name, part, stride in (("train", train_ids, args.stride), ("val", val_ids, args.context)):
        x, y = windows(part, args.context, stride)
        os.makedirs(os.path.join(args.out, name), exist_ok=True)
        np.save(os.path.join(args.out, name, "x.npy"), x)
        np.save(os.path.join(args.out, name, "y.npy"), y)
        print(f"{args.out}/{name}: {len(x)} windows of {args.context} characters "
              f"({len(part)} characters)")
    unigram, bigram = entropies(train_ids, len(vocab))
    print(f"{args.out}/vocab.json: {len(vocab)} characters")
    print(f"training text: unigram entropy {unigram:.4f} nats ({unigram / math.log(2):.4f} bits), "
          f"bigram conditional entropy {bigram:.4f} nats ({bigram / math.log(2):.4f} bits)")


if __name__ == "__main__":
    main()
