"""Writes the golden zoo's inputs (committed beside this file; run again only to change them).

A scored, tuned, bootstrapped zoo on the package ICD-9 tree: the demo generator's four models on
a test split, the scored two also on a dev split (tuned there), a training gold for the
frequency bands. Small enough to run in a few seconds, rich enough that every family, the
tuning, the intervals and the paired tests write rows.

    python tests/golden/make_inputs.py
"""

from __future__ import annotations

from pathlib import Path

from hieval.experiments.demo import make_demo
from hieval.hierarchy.sources import load_source

HERE = Path(__file__).parent / "inputs"


def main() -> None:
    levels = load_source("package")[0].frame
    HERE.mkdir(exist_ok=True)
    test_gold, test_predictions = make_demo(levels, seed=11, documents=150, pool_size=400)
    dev_gold, dev_predictions = make_demo(levels, seed=12, documents=80, pool_size=400)
    train_gold, _ = make_demo(levels, seed=13, documents=200, pool_size=400)
    dev_gold = dev_gold.with_columns(dev_gold["doc_id"].str.replace("D", "V"))
    train_gold = train_gold.with_columns(train_gold["doc_id"].str.replace("D", "T"))
    test_gold.write_csv(HERE / "test_gold.csv")
    dev_gold.write_csv(HERE / "dev_gold.csv")
    train_gold.write_csv(HERE / "train_gold.csv")
    for name, frame in test_predictions.items():
        frame.write_csv(HERE / f"test_{name}.csv", float_precision=6)
    for name, frame in dev_predictions.items():
        if "score" in frame.columns:
            frame = frame.with_columns(frame["doc_id"].str.replace("D", "V"))
            frame.write_csv(HERE / f"dev_{name}.csv", float_precision=6)


if __name__ == "__main__":
    main()
