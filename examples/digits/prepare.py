#!/usr/bin/python3
"""The UCI handwritten digits (1797 8x8 images, 10 classes) that Debian's python3-sklearn ships,
as kfuse train reads them: OUT/train/{x,labels}.npy and OUT/test/{x,labels}.npy.

x is float32 [N, 64], the pixel counts 0..16 scaled to [0, 1]; labels is int32 [N]. The split is
fixed and needs no random numbers: every fifth example (index % 5 == 0) is held out for test
(360 examples), the other 1437 train.

    /usr/bin/python3 examples/digits/prepare.py [OUT]      (default: build/digits)
"""
import gzip
import os
import sys

import numpy as np

CSV = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "build/digits"
    if not os.path.exists(CSV):
        sys.exit(f"prepare.py: {CSV} is missing: apt-get install python3-sklearn "
                 "(scripts/setup.sh installs it)")
    with gzip.open(CSV, "rt") as f:
        data = np.loadtxt(f, delimiter=",", dtype=np.float64)
    if data.shape != (1797, 65):
        sys.exit(f"prepare.py: {CSV}: expected 1797 rows of 65 values, got {data.shape}")
    x = (data[:, :64] / 16.0).astype(np.float32)
    labels = data[:, 64].astype(np.int32)
    test = np.arange(len(x)) % 5 == 0
    for name, rows in (("train", ~test), ("test", test)):
        os.makedirs(os.path.join(out, name), exist_ok=True)
        np.save(os.path.join(out, name, "x.npy"), x[rows])
        np.save(os.path.join(out, name, "labels.npy"), labels[rows])
    print(f"{out}/train: {int((~test).sum())} examples, {out}/test: {int(test.sum())} examples")


if __name__ == "__main__":
    main()
