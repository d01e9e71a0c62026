"""Shared by train.py and evaluate.py: the digits data and its fixed split.

The data is scikit-learn's bundled copy of the UCI handwritten digits
(1,797 8x8 images), shipped inside Debian's python3-sklearn, so nothing is
downloaded. The held-out split is fixed by a seed, so evaluate.py scores the
model on exactly the images train.py never saw.
"""
import hashlib
import json
import os
import sys

SEED = 20261123
TEST_SIZE = 0.25


def load_incoming(directory):
    """(X, y, names) of the labelled samples in directory/*.csv: a header
    p0..p63,label and one 8x8 image (pixel values 0-16) per row; files whose
    names start with "." are copies in progress and are left out."""
    import numpy as np

    X, y, names = [], [], []
    if not directory or not os.path.isdir(directory):
        return np.zeros((0, 64)), np.zeros((0,), dtype=int), names
    for name in sorted(os.listdir(directory)):
        if name.startswith(".") or not name.endswith(".csv"):
            continue
        with open(os.path.join(directory, name)) as f:
            header = f.readline().strip().split(",")
            if header[-1] != "label" or len(header) != 65:
                raise SystemExit(f"{name}: expected a header p0..p63,label")
            for line in f:
                if line.strip():
                    row = [float(v) for v in line.split(",")]
                    X.append(row[:64])
                    y.append(int(row[64]))
        names.append(name)
    return np.array(X).reshape(-1, 64), np.array(y, dtype=int), names


def load_split(incoming=None):
    """(X_train, X_test, y_train, y_test, fingerprint) of the digits data.

    Labelled samples dropped into `incoming` (the data trigger's folder in
    digits.yaml) join the training images; the held-out images stay the
    same, so a retrained model is scored on exactly what production was.
    """
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    X = digits.data / 16.0
    y = digits.target
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=TEST_SIZE, random_state=SEED, stratify=y)
    X_new, y_new, _ = load_incoming(incoming)
    h = hashlib.sha256(digits.data.tobytes() + digits.target.tobytes())
    if len(y_new):
        h.update(X_new.tobytes() + y_new.tobytes())
        X_train = np.concatenate([X_train, X_new / 16.0])
        y_train = np.concatenate([y_train, y_new])
    return X_train, X_test, y_train, y_test, h.hexdigest()


def output_dir():
    """FERRY_OUTPUT_DIR (set by Ferry for every attempt), or ./out when run by hand."""
    d = os.environ.get("FERRY_OUTPUT_DIR", "out")
    os.makedirs(d, exist_ok=True)
    return d


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def log(msg):
    print(msg, flush=True)
    sys.stdout.flush()
