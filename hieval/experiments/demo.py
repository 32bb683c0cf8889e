"""A deterministic synthetic test set and model zoo, so the workflow runs with no data at all.

Real ICD-9-CM leaf codes are drawn Zipf-like (a few frequent codes, a long tail), about 15 per
document. The models make different kinds of error, chosen so that flat and hierarchical metrics
rank them differently:

- ``sibling_confuser``: swaps many codes for a sibling in the same category (flat punishes it,
  hierarchical metrics forgive it);
- ``over_predictor``: keeps the gold but adds extra codes within the same category (with
  scores; CoPHE sees the over-count that set-based evaluation hides);
- ``cautious_coder``: precise but misses 40% of the codes;
- ``distant_guesser``: replaces codes with random codes from anywhere (with scores, top-k).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from hieval import paths
from hieval.inputs import write_parquet

MODELS = ("sibling_confuser", "over_predictor", "cautious_coder", "distant_guesser")


def _siblings(leaves: pl.DataFrame) -> dict[str, list[str]]:
    families = leaves.group_by("e0").agg(pl.col("code").sort()).sort("e0")
    out: dict[str, list[str]] = {}
    for members in families["code"].to_list():
        for code in members:
            out[code] = [m for m in members if m != code]
    return out


def make_demo(
    levels: pl.DataFrame,
    seed: int = 20211107,
    documents: int = 2000,
    codes_per_document: float = 15.0,
    pool_size: int = 3000,
) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
    """Gold labels and one prediction table per model, all long format."""
    rng = np.random.default_rng(seed)
    depth = pl.col("depth")
    internal = pl.concat(
        [levels.filter(depth == "e2")["e1"], levels.filter(depth.is_in(["e1", "e2"]))["e0"]]
    ).unique()
    leaves = (
        levels.filter(
            pl.col("kind").is_in(["dx", "proc"]) & ~pl.col("code").is_in(internal.implode())
        )
        .select("code", "e0")
        .sort("code")
    )
    all_codes = leaves["code"].to_numpy()
    pool = rng.permutation(all_codes)[:pool_size]
    weights = 1.0 / np.arange(1, pool_size + 1) ** 1.1
    weights /= weights.sum()
    siblings = _siblings(leaves)

    gold_docs: list[list[str]] = []
    for _ in range(documents):
        n = int(np.clip(rng.poisson(codes_per_document), 1, 60))
        gold_docs.append(sorted(rng.choice(pool, size=n, replace=False, p=weights).tolist()))
    doc_ids = [f"D{i:05d}" for i in range(documents)]

    def sibling(code: str) -> str | None:
        options = siblings.get(code) or []
        return options[rng.integers(len(options))] if options else None

    rows: dict[str, list[tuple]] = {m: [] for m in MODELS}
    for doc, codes in zip(doc_ids, gold_docs, strict=True):
        for code in codes:
            swap = sibling(code) if rng.random() < 0.4 else None
            if rng.random() > 0.05:
                rows["sibling_confuser"].append((doc, swap or code))
            rows["over_predictor"].append((doc, code, float(rng.uniform(0.5, 1.0))))
            if rng.random() < 0.5 and (extra := sibling(code)):
                rows["over_predictor"].append((doc, extra, float(rng.uniform(0.5, 1.0))))
            if rng.random() < 0.5:  # noise below the threshold, removed by it
                noise = all_codes[rng.integers(len(all_codes))]
                rows["over_predictor"].append((doc, noise, float(rng.uniform(0.0, 0.5))))
            if rng.random() > 0.4:
                rows["cautious_coder"].append((doc, code))
            guess = code if rng.random() < 0.6 else all_codes[rng.integers(len(all_codes))]
            rows["distant_guesser"].append((doc, guess, float(rng.uniform(0.3, 1.0))))
            rows["distant_guesser"].append(
                (doc, all_codes[rng.integers(len(all_codes))], float(rng.uniform(0.0, 0.6)))
            )

    gold = pl.DataFrame(
        [(d, c) for d, cs in zip(doc_ids, gold_docs, strict=True) for c in cs],
        schema=["doc_id", "code"],
        orient="row",
    )
    schemas = {
        m: ["doc_id", "code"] if len(rows[m][0]) == 2 else ["doc_id", "code", "score"]
        for m in MODELS
    }
    predictions = {m: pl.DataFrame(rows[m], schema=schemas[m], orient="row") for m in MODELS}
    return gold, predictions


def write_demo(
    levels_path: str | Path,
    gold_out: str | Path,
    prediction_dir: str | Path,
    seed: int,
    documents: int,
) -> None:
    """Generate the demo from a level table and write it as Parquet."""
    gold, predictions = make_demo(paths.read_parquet(levels_path), seed, documents)
    write_parquet(gold, gold_out)
    for model, frame in predictions.items():
        write_parquet(frame, Path(prediction_dir) / f"{model}.parquet")
