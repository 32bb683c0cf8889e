"""ICM speed: hieval's set-wise engine against the pyevall reference, and at ICD-9 scale.

Run from the repository root after `pip install -e ".[test]"` and
`pip install --no-deps pyevall==0.2.11`:

    python benchmarks/icm_benchmark.py [--items 1000] [--categories 300] [--seed 7]

Part 1 scores the same synthetic problem (a two-level tree, multi-label items) with both
implementations, checks that they agree, and prints the wall times and their ratio. Part 2 times
hieval alone on MIMIC-III-sized data (3,372 documents, ~16 codes each, the full ICD-9-CM v32
hierarchy), which the reference cannot run in reasonable time.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from hieval.engine.icm import IcmParams
from hieval.experiments.demo import make_demo
from hieval.hierarchy.sources import edge_list_table, load_source
from hieval.metrics.tidy import icm


def synthetic(items: int, categories: int, seed: int):
    """A tree of ~``categories`` nodes (10 internal) and Zipf-like multi-label items."""
    rng = np.random.default_rng(seed)
    internal = [f"I{i}" for i in range(10)]
    leaves = [f"L{i}" for i in range(categories - len(internal))]
    edges = {n: None for n in internal} | {leaf: internal[i % 10] for i, leaf in enumerate(leaves)}
    nested = {top: [leaf for leaf, p in edges.items() if p == top] for top in internal}
    weights = 1 / np.arange(1, len(leaves) + 1) ** 1.1
    weights /= weights.sum()

    def draw():
        return sorted(rng.choice(leaves, int(rng.integers(1, 5)), replace=False, p=weights))

    gold = {f"d{i}": draw() for i in range(items)}
    pred = {d: draw() for d in gold}
    return edges, nested, gold, pred


def frame(labels):
    rows = [(d, c) for d, cs in labels.items() for c in cs]
    return pl.DataFrame(rows, schema={"doc_id": pl.String, "code": pl.String}, orient="row")


def run_pyevall(nested, gold, pred) -> tuple[float, float]:
    from pyevall.evaluation import PyEvALLEvaluation
    from pyevall.metrics.metricfactory import MetricFactory
    from pyevall.utils.utils import PyEvALLUtils

    logging.disable(logging.INFO)
    with tempfile.TemporaryDirectory() as tmp:
        gold_file, pred_file = Path(tmp, "gold.json"), Path(tmp, "pred.json")
        gold_file.write_text(
            json.dumps([{"test_case": "B", "id": d, "value": v} for d, v in gold.items()])
        )
        pred_file.write_text(
            json.dumps([{"test_case": "B", "id": d, "value": v} for d, v in pred.items()])
        )
        start = time.perf_counter()
        report = PyEvALLEvaluation().evaluate(
            str(pred_file),
            str(gold_file),
            [MetricFactory.ICM.value],
            **{
                PyEvALLUtils.PARAM_REPORT: PyEvALLUtils.PARAM_OPTION_REPORT_DATAFRAME,
                PyEvALLUtils.PARAM_HIERARCHY: nested,
            },
        )
        seconds = time.perf_counter() - start
    return float(report.df_average.to_dict("records")[0]["ICM"]), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--categories", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    edges, nested, gold, pred = synthetic(args.items, args.categories, args.seed)
    table, _ = edge_list_table(
        pl.DataFrame({"child": list(edges), "parent": list(edges.values())}), "synthetic"
    )
    g, p, anc = frame(gold), frame(pred), table.ancestors()
    start = time.perf_counter()
    ours = icm(g, p, anc, table.levels, IcmParams(empty_gold="drop"))["icm"]
    hieval_seconds = time.perf_counter() - start
    reference, pyevall_seconds = run_pyevall(nested, gold, pred)
    print(f"\nICM on {args.items} items over {args.categories} categories")
    print("| implementation | ICM | wall s |")
    print("|---|---:|---:|")
    print(f"| pyevall 0.2.11 | {reference:.10f} | {pyevall_seconds:.2f} |")
    print(f"| hieval | {ours:.10f} | {hieval_seconds:.3f} |")
    print(
        f"agreement: |diff| = {abs(ours - reference):.2e}; "
        f"speed-up: {pyevall_seconds / hieval_seconds:.0f}x"
    )

    levels = load_source("package")[0]
    gold_icd, preds = make_demo(
        levels.frame, seed=args.seed, documents=3372, codes_per_document=15.9
    )
    anc_icd = levels.ancestors()
    for model in ("sibling_confuser", "distant_guesser"):
        start = time.perf_counter()
        value = icm(gold_icd, preds[model], anc_icd, levels.levels)["icm"]
        print(
            f"full ICD-9-CM, 3,372 documents, {gold_icd.height:,} gold codes, {model}: "
            f"ICM {value:.3f} in {time.perf_counter() - start:.2f} s"
        )


if __name__ == "__main__":
    main()
