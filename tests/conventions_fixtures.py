"""Shared fixtures of the conventions' oracle tests: a random scored zoo in hieval's
normalised long tables, and the same data as the dense matrices the reference tools hold,
built here by plain loops (independently of hieval.conventions.matrix)."""

from __future__ import annotations

import numpy as np
import polars as pl

#: ICD-9 codes of every written form results_by_type tells apart: dotted and undotted
#: diagnoses, V codes, dotted and undotted E codes, procedures.
CODES = (
    "401.9", "428.0", "250.00", "427.31", "584.9", "V45.81", "V58.61", "E849.7", "E879",
    "E878.1", "038.9", "518.81", "285.9", "276.2", "496", "486", "311", "99.04", "38.93",
    "96.71", "96.04", "88.72", "39.95", "45.13", "36.15", "V10.3", "272.4", "244.9",
)  # fmt: skip
THRESHOLD = 0.5


def zoo(seed: int, *, documents: int = 40, ties: bool = False, empty_docs: int = 2):
    """``(gold, decided, scores)``: gold ``doc_id, code`` (documents without labels as a null
    code), scores ``doc_id, code, score`` over a random subset of codes per document (a few
    exactly at the threshold; with ``ties``, scores on a coarse grid so that many tie),
    decided = ``score >= THRESHOLD`` (hieval's rule)."""
    rng = np.random.default_rng(seed)
    gold_rows, score_rows = [], []
    for i in range(documents):
        doc = f"D{i:03d}"
        if i < empty_docs:
            gold_rows.append((doc, None))
        else:
            for code in rng.choice(CODES, size=rng.integers(1, 7), replace=False):
                gold_rows.append((doc, str(code)))
        for code in rng.choice(CODES, size=rng.integers(8, 20), replace=False):
            score = float(rng.random())
            if ties:
                score = round(score * 5) / 5
            elif rng.random() < 0.05:
                score = THRESHOLD
            score_rows.append((doc, str(code), score))
    gold = pl.DataFrame(gold_rows, schema={"doc_id": pl.String, "code": pl.String}, orient="row")
    scores = pl.DataFrame(
        score_rows,
        schema={"doc_id": pl.String, "code": pl.String, "score": pl.Float64},
        orient="row",
    )
    # a gold code scored high where it is gold, so the ranking metrics are not noise
    gold_pairs = set(gold.drop_nulls().iter_rows())
    scores = scores.with_columns(
        score=pl.struct("doc_id", "code", "score").map_elements(
            lambda r: (
                min(1.0, r["score"] + 0.4)
                if (r["doc_id"], r["code"]) in gold_pairs and r["score"] != THRESHOLD
                else r["score"]
            ),
            return_dtype=pl.Float64,
        )
    ).sort("doc_id", "code")
    decided = scores.filter(pl.col("score") >= THRESHOLD)
    return gold, decided, scores


def dense(gold, decided, scores, labels):
    """``(docs, y, yhat, raw)`` over the gold's sorted documents and ``labels``: 0/1 float
    matrices and the scores (0 where unscored), by loops over the rows."""
    docs = sorted(set(gold["doc_id"]))
    row = {d: i for i, d in enumerate(docs)}
    col = {c: j for j, c in enumerate(labels)}
    y = np.zeros((len(docs), len(labels)))
    yhat = np.zeros_like(y)
    raw = np.zeros_like(y)
    for doc, code in gold.iter_rows():
        if code is not None and code in col:
            y[row[doc], col[code]] = 1
    for doc, code, _ in decided.iter_rows():
        if code in col:
            yhat[row[doc], col[code]] = 1
    for doc, code, score in scores.iter_rows():
        if code in col:
            raw[row[doc], col[code]] = score
    return docs, y, yhat, raw


def observed(gold, decided) -> list[str]:
    return sorted({c for c in gold["code"] if c} | set(decided["code"]))


def rows_of(table: pl.DataFrame, convention: str) -> dict[str, float]:
    part = table.filter(pl.col("convention") == convention)
    return dict(zip(part["metric"], part["value"], strict=True))


def assert_same(ours: dict[str, float], theirs: dict[str, float], tol: float = 1e-9) -> None:
    """Same names, and every value within ``tol`` (NaN where theirs is NaN)."""
    assert sorted(ours) == sorted(theirs)
    for name, value in theirs.items():
        if np.isnan(value):
            assert np.isnan(ours[name]), name
        else:
            assert abs(ours[name] - value) <= tol, (name, ours[name], value)
