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


def load_split():
    """(X_train, X_test, y_train, y_test, fingerprint) of the digits data."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    X = digits.data / 16.0
    y = digits.target
    fingerprint = hashlib.sha256(digits.data.tobytes() + digits.target.tobytes()).hexdigest()
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=TEST_SIZE, random_state=SEED, stratify=y)
    return X_train, X_test, y_train, y_test, fingerprint


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
