#!/usr/bin/python3
"""Score a trained digits model on the held-out split.

Writes metrics.json into FERRY_OUTPUT_DIR: accuracy and macro-averaged
precision, recall and f1 on images the model never saw, which the
workflow's gate checks before anything is registered.
"""
import argparse
import os
import pickle

from common import load_split, log, output_dir, write_json


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True, help="the model.pkl written by train.py")
    args = ap.parse_args()

    from sklearn.metrics import accuracy_score, confusion_matrix, precision_recall_fscore_support

    _, X_test, _, y_test, _ = load_split()
    with open(args.model, "rb") as f:
        model = pickle.load(f)
    pred = model.predict(X_test)
    precision, recall, f1, _ = precision_recall_fscore_support(y_test, pred, average="macro", zero_division=0)
    metrics = {
        "accuracy": float(accuracy_score(y_test, pred)),
        "precision": float(precision),
        "recall": float(recall),
        "f1": float(f1),
    }
    out = output_dir()
    write_json(os.path.join(out, "metrics.json"), metrics)
    log(f"held-out images: {len(y_test)}")
    log("confusion matrix (rows: true digit 0-9, columns: predicted):")
    for row in confusion_matrix(y_test, pred):
        log("  " + " ".join(f"{n:3d}" for n in row))
    log(" ".join(f"{k}={v:.4f}" for k, v in metrics.items()))


if __name__ == "__main__":
    main()
