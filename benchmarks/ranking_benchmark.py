"""Ranking, calibration and threshold tuning on a dense MIMIC-III-full-sized score table,
against scikit-learn's micro and macro ROC-AUC on the same arrays.

Run from the repository root:

    python benchmarks/ranking_benchmark.py [--docs 3372] [--labels 8922] [--seed 7]
        [--skip-sklearn] [--json results/bench/ranking.json]

The table is what the reproducibility study (Edin et al., 2023) stores for MIMIC-III full:
3,372 test documents x 8,922 codes, every pair scored (float32 sigmoid outputs, so with ties),
about 16 gold codes per document drawn Zipf-like. Each side runs in its own child process on
arrays generated there from the seed (generation is not timed), so each peak RSS
(``ru_maxrss``) is its own:

- ``hieval``: the pairs as :class:`hieval.metrics.ranking.ScoreArrays`, every ranking metric at
  the leaves (micro/macro AUC, P@5/8/15, R@5/8/15, R-precision, MAP), the same at one pooled
  level (codes grouped ten by ten, max-pooled), Brier and ECE, and threshold tuning (the
  global sweep and per-code sweeps), the same arrays used as the dev set;
- ``scikit-learn``: ``roc_auc_score`` micro on the flattened arrays, and macro as the mean of
  ``roc_auc_score`` per code over the codes with a positive and a negative document (the codes
  hieval averages over), one call per contiguous column: ``average="macro"`` on the whole
  matrices gives the same number but is far slower (over 15 minutes here), so it is not used.

The two AUCs must agree within 1e-9; one Markdown table is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `hieval` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

THREADS = "2"
TOLERANCE = 1e-9


def make_arrays(docs: int, labels: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Gold (bool docs x labels) and scores (float64 of float32 sigmoids) for one seed."""
    rng = np.random.default_rng(seed)
    frequency = 1.0 / np.arange(1, labels + 1) ** 0.9
    frequency *= 15.9 / frequency.sum()  # ~15.9 gold codes per document, as MIMIC-III full
    gold = rng.random((docs, labels), dtype=np.float32) < frequency.astype(np.float32)
    logits = rng.normal(-4.0, 1.5, size=(docs, labels)).astype(np.float32) + 4.0 * gold
    scores = (1.0 / (1.0 + np.exp(-logits))).astype(np.float32).astype(np.float64)
    return gold, scores


def run_hieval(gold: np.ndarray, scores: np.ndarray) -> dict:
    from hieval.metrics.ranking import (
        DEFAULT_KS,
        arrays_from_pairs,
        calibration_values,
        point_values,
        pool,
    )
    from hieval.metrics.tuning import tune

    docs, labels = gold.shape
    times = {}
    start = time.perf_counter()
    arrays = arrays_from_pairs(
        docs,
        labels,
        np.arange(docs * labels, dtype=np.int64),
        scores.ravel(),
        np.flatnonzero(gold.ravel()),
        [f"c{i:05d}" for i in range(labels)],
    )
    times["arrays"] = time.perf_counter() - start
    t = time.perf_counter()
    values = point_values(arrays, DEFAULT_KS)
    times["ranking (leaf)"] = time.perf_counter() - t
    t = time.perf_counter()
    pooled = pool(arrays, np.arange(labels) // 10, (labels + 9) // 10)
    level = point_values(pooled, DEFAULT_KS)
    times["ranking (one pooled level)"] = time.perf_counter() - t
    t = time.perf_counter()
    calibration = calibration_values(arrays)
    times["calibration"] = time.perf_counter() - t
    t = time.perf_counter()
    tuned = tune(arrays, per_code=True, min_support=5)
    times["tuning (global + per code)"] = time.perf_counter() - t
    total = time.perf_counter() - start
    return {
        "times": times,
        "total": total,
        "micro_auc": values["micro", "auc"],
        "macro_auc": values["macro", "auc"],
        "p@8": values["mean", "precision@8"],
        "level_p@8": level["mean", "precision@8"],
        "brier": calibration["brier"],
        "threshold": tuned.threshold,
    }


def run_sklearn(gold: np.ndarray, scores: np.ndarray) -> dict:
    from sklearn.metrics import roc_auc_score

    start = time.perf_counter()
    micro = roc_auc_score(gold.ravel(), scores.ravel())
    micro_time = time.perf_counter() - start
    print(f"scikit-learn micro AUC: {micro_time:.1f} s", file=sys.stderr, flush=True)
    support = gold.sum(axis=0)
    usable = (support > 0) & (support < gold.shape[0])
    t = time.perf_counter()
    # One call per code on contiguous columns: roc_auc_score(Y, S, average="macro") on the
    # whole matrices gives the same number but took over 15 minutes here (its per-code cost
    # grows with the matrix), so it is not the baseline.
    gold_t = np.ascontiguousarray(gold[:, usable].T)
    scores_t = np.ascontiguousarray(scores[:, usable].T)
    macro = np.mean([roc_auc_score(g, s) for g, s in zip(gold_t, scores_t, strict=True)])
    macro_time = time.perf_counter() - t
    return {
        "times": {"micro AUC": micro_time, "macro AUC": macro_time},
        "total": micro_time + macro_time,
        "micro_auc": float(micro),
        "macro_auc": float(macro),
    }


def child(side: str, docs: int, labels: int, seed: int) -> None:
    gold, scores = make_arrays(docs, labels, seed)
    print(f"{side}: arrays generated", file=sys.stderr, flush=True)
    result = run_hieval(gold, scores) if side == "hieval" else run_sklearn(gold, scores)
    result["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(json.dumps(result))


def measure(side: str, args: argparse.Namespace) -> dict:
    env = {
        **os.environ,
        **{v: THREADS for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")},
    }
    command = [
        sys.executable,
        __file__,
        "--child",
        side,
        "--docs",
        str(args.docs),
        "--labels",
        str(args.labels),
        "--seed",
        str(args.seed),
    ]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=3372)
    parser.add_argument("--labels", type=int, default=8922)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--skip-sklearn", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--child", choices=["hieval", "sklearn"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.docs, args.labels, args.seed)
        return
    ours = measure("hieval", args)
    theirs = None if args.skip_sklearn else measure("sklearn", args)
    lines = [
        f"{args.docs:,} documents x {args.labels:,} codes ({args.docs * args.labels:,} scores), "
        f"seed {args.seed}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores",
        "",
        "| side | step | wall s |",
        "|---|---|---:|",
    ]
    for side, result in (("hieval", ours), ("scikit-learn", theirs)):
        if result is None:
            continue
        for step, seconds in result["times"].items():
            lines.append(f"| {side} | {step} | {seconds:.2f} |")
        lines.append(
            f"| {side} | **total** (peak RSS {result['peak_rss_gb']:.2f} GB) | "
            f"**{result['total']:.2f}** |"
        )
    if theirs is not None:
        micro = abs(ours["micro_auc"] - theirs["micro_auc"])
        macro = abs(ours["macro_auc"] - theirs["macro_auc"])
        lines += [
            "",
            f"micro AUC {ours['micro_auc']:.12f} (|diff| {micro:.1e}), macro AUC "
            f"{ours['macro_auc']:.12f} (|diff| {macro:.1e}); hieval's whole run is "
            f"{theirs['total'] / ours['total']:.1f}x faster than scikit-learn's two AUCs",
        ]
        if max(micro, macro) > TOLERANCE:
            print("\n".join(lines))
            sys.exit(f"AUCs disagree beyond {TOLERANCE}")
    print("\n".join(lines))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"hieval": ours, "sklearn": theirs}, indent=2))


if __name__ == "__main__":
    main()
