#!/usr/bin/python3
"""Write a batch of new labelled digit images (CSV: p0..p63,label) for the
retraining story: images of the training split shifted by one pixel (new
handwriting the model has not seen, correctly labelled), or with
--mislabelled, every 3 of the training split labelled 8 (a bad batch:
the gate must keep the model trained on it out of production).

    python3 workflows/digits/new_batch.py --count 300 > batch.csv
"""
import argparse
import sys

import numpy as np

from common import SEED, TEST_SIZE


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mislabelled", action="store_true", help="label every image wrongly")
    args = ap.parse_args()

    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    X_train, _, y_train, _ = train_test_split(digits.data, digits.target, test_size=TEST_SIZE,
                                              random_state=SEED, stratify=digits.target)
    rng = np.random.default_rng(args.seed)
    out = sys.stdout
    out.write(",".join([f"p{i}" for i in range(64)] + ["label"]) + "\n")
    if args.mislabelled:
        # every 3 of the training split, as written and moved by a pixel each way, labelled 8
        for i in np.flatnonzero(y_train == 3):
            for dx, dy in [(0, 0), (1, 0), (-1, 0), (0, 1), (0, -1)]:
                img = np.roll(np.roll(X_train[i].reshape(8, 8), dx, axis=1), dy, axis=0)
                out.write(",".join(str(int(v)) for v in img.flatten()) + ",8\n")
        return
    pick = rng.choice(len(X_train), size=min(args.count, len(X_train)), replace=False)
    for i in pick:  # new handwriting: an image moved by a pixel, correctly labelled
        dx, dy = rng.choice([-1, 1]), rng.choice([-1, 1])
        img = np.roll(np.roll(X_train[i].reshape(8, 8), dx, axis=1), dy, axis=0)
        out.write(",".join(str(int(v)) for v in img.flatten()) + f",{int(y_train[i])}\n")


if __name__ == "__main__":
    main()
