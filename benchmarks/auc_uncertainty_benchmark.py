"""Bootstrap replicates and randomization permutations of ROC-AUC (micro and macro) for a
MIMIC-III-full-sized scored model (:mod:`hieval.metrics.uncertainty.auc`).

Run from the repository root:

    python benchmarks/auc_uncertainty_benchmark.py [--top 100] [--replicates 1000]
        [--permutations 999] [--docs 3372] [--labels 8922] [--seed 7]

Two models' score tables come from :func:`benchmarks.ranking_benchmark.make_arrays` (3,372
documents x 8,922 codes, about 16 gold codes per document drawn Zipf-like, float32 sigmoid
outputs), truncated to each document's ``--top`` highest scores as CAML's files are (0: every
pair scored). Timed, at one level: sorting one model's pairs (the bootstrap's plan) and
``--replicates`` Poisson replicates of micro and macro AUC, then sorting both models' pairs
together and ``--permutations`` swaps (both swapped models, as the randomization test
computes them), in blocks as :func:`hieval.metrics.uncertainty.weights.blocks` cuts them. A
replicate with weights all 1 must equal the point estimate within 1e-12.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `hieval` and `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from benchmarks.ranking_benchmark import make_arrays
from hieval.metrics.ranking import ScoreArrays, arrays_from_pairs, micro_auc, per_label_auc
from hieval.metrics.uncertainty.auc import auc_pairs, auc_plan, auc_replicates
from hieval.metrics.uncertainty.weights import blocks, doc_keys, poisson_weights, swaps


def scored(gold: np.ndarray, scores: np.ndarray, top: int) -> ScoreArrays:
    """The model's pairs, each document's ``top`` highest scores kept (0: all)."""
    docs, labels = gold.shape
    keys = np.arange(docs * labels, dtype=np.int64).reshape(docs, labels)
    if 0 < top < labels:
        kept = np.argpartition(-scores, top, axis=1)[:, :top]
        keep = np.zeros(gold.shape, dtype=bool)
        np.put_along_axis(keep, kept, True, axis=1)
    else:
        keep = np.ones(gold.shape, dtype=bool)
    names = [f"c{i:05d}" for i in range(labels)]
    return arrays_from_pairs(docs, labels, keys[keep], scores[keep], keys[gold], names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=3372)
    parser.add_argument("--labels", type=int, default=8922)
    parser.add_argument("--top", type=int, default=100)
    parser.add_argument("--replicates", type=int, default=1000)
    parser.add_argument("--permutations", type=int, default=999)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    gold, scores_a = make_arrays(args.docs, args.labels, args.seed)
    _, scores_b = make_arrays(args.docs, args.labels, args.seed + 1)
    a, b = scored(gold, scores_a, args.top), scored(gold, scores_b, args.top)
    key = doc_keys([f"doc{d:05d}" for d in range(args.docs)])
    rows = [("scored pairs per model", f"{len(a.key):,}"), ("gold pairs", f"{len(a.gold_key):,}")]

    start = time.perf_counter()
    pairs_a = auc_pairs(a)
    plan = auc_plan([pairs_a])
    rows.append(("one model's plan (sort)", f"{time.perf_counter() - start:.2f} s"))
    ones = auc_replicates(plan, [np.ones((1, args.docs))])
    assert ones["micro"][0] == micro_auc(a)  # one definition: bit for bit
    assert abs(ones["macro"][0] - float(np.nanmean(per_label_auc(a)))) < 1e-12
    start = time.perf_counter()
    for first, count in blocks(args.replicates, args.docs):
        auc_replicates(plan, [poisson_weights(key, seed=1, first=first, count=count)])
    rows.append((f"{args.replicates} bootstrap replicates", f"{time.perf_counter() - start:.2f} s"))

    start = time.perf_counter()
    pair = auc_plan([pairs_a, auc_pairs(b)])
    rows.append(("a pair's plan (sort)", f"{time.perf_counter() - start:.2f} s"))
    start = time.perf_counter()
    for first, count in blocks(args.permutations, args.docs):
        s = swaps(key, seed=1, first=first, count=count)
        # as hieval's randomization test runs them: sums in numpy's order (exact=False)
        auc_replicates(pair, [1.0 - s, s], exact=False)
        auc_replicates(pair, [s, 1.0 - s], exact=False)
    rows.append((f"{args.permutations} permutations", f"{time.perf_counter() - start:.2f} s"))
    print("| step | value |\n|---|---:|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
