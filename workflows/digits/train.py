#!/usr/bin/python3
"""Train an RBF-kernel SVM on the digits data.

Writes into FERRY_OUTPUT_DIR:
  model.pkl     the fitted classifier (becomes {{steps.train.outputs.model}})
  outputs.json  the data fingerprint and the hyper-parameters
  metrics.json  training accuracy and cross-validated accuracy
A checkpoint of the cross-validation folds already scored is kept in
FERRY_CHECKPOINT_DIR, so a retried attempt resumes where the last one stopped.
Labelled samples in --incoming (CSV, p0..p63,label) are trained on as well.
Each fold's accuracy is appended to FERRY_METRICS_FILE as it is scored (the
job monitor's series, with the watch: rules of the step in digits.yaml).
"""
import argparse
import json
import os
import pickle

from common import load_split, log, output_dir, write_json


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--C", type=float, default=10.0)
    ap.add_argument("--gamma", type=float, default=0.05)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--incoming", help="a folder of new labelled samples (CSV) to train on as well")
    args = ap.parse_args()

    from sklearn.model_selection import StratifiedKFold
    from sklearn.svm import SVC

    X_train, _, y_train, _, fingerprint = load_split(args.incoming)
    log(f"digits: {len(X_train)} training images, data fingerprint {fingerprint[:12]}…")

    # cross-validation, one fold at a time, checkpointed
    ckpt_dir = os.environ.get("FERRY_CHECKPOINT_DIR")
    ckpt = os.path.join(ckpt_dir, "cv.pkl") if ckpt_dir else None
    scores = {}
    if ckpt and os.path.exists(ckpt):
        with open(ckpt, "rb") as f:
            saved = pickle.load(f)
        if saved.get("params") == (args.C, args.gamma, args.folds) and saved.get("data") == fingerprint:
            scores = saved["scores"]
            log(f"resuming from checkpoint: {len(scores)} of {args.folds} folds already scored")
    folds = StratifiedKFold(n_splits=args.folds, shuffle=True, random_state=0)
    for i, (tr, va) in enumerate(folds.split(X_train, y_train)):
        if i in scores:
            continue
        clf = SVC(C=args.C, gamma=args.gamma).fit(X_train[tr], y_train[tr])
        scores[i] = float(clf.score(X_train[va], y_train[va]))
        log(f"fold {i + 1}/{args.folds}: accuracy {scores[i]:.4f}")
        if os.environ.get("FERRY_METRICS_FILE"):
            with open(os.environ["FERRY_METRICS_FILE"], "a") as f:
                f.write(json.dumps({"step": i + 1, "fold_accuracy": scores[i]}) + "\n")
        if ckpt:
            with open(ckpt + ".tmp", "wb") as f:
                pickle.dump({"params": (args.C, args.gamma, args.folds), "data": fingerprint, "scores": scores}, f)
            os.replace(ckpt + ".tmp", ckpt)

    model = SVC(C=args.C, gamma=args.gamma).fit(X_train, y_train)
    out = output_dir()
    with open(os.path.join(out, "model.pkl"), "wb") as f:
        pickle.dump(model, f)
    cv = sum(scores.values()) / len(scores)
    write_json(os.path.join(out, "metrics.json"),
               {"train_accuracy": float(model.score(X_train, y_train)), "cv_accuracy": cv})
    write_json(os.path.join(out, "outputs.json"),
               {"data_fingerprint": "sha256:" + fingerprint, "C": args.C, "gamma": args.gamma})
    log(f"trained SVC(C={args.C}, gamma={args.gamma}): cross-validated accuracy {cv:.4f}")


if __name__ == "__main__":
    main()
