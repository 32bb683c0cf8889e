"""Every scored format keeps its scores through normalisation (issue 14): long with ``score``,
CAML score JSON, wide Feather/Parquet and dense ``.npy``; thresholds decide without destroying
them, and hard predictions keep a null score."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.feather as feather
import pytest

from hieval.inputs.dense_scores import read_scores
from hieval.inputs.normalize import normalize_labels
from hieval.inputs.options import LabelOptions, TunedThresholds

#: (document, code) -> score, written in each format below.
SCORES = {
    ("100", "401.9"): 0.8,
    ("100", "96.04"): 0.25,
    ("200", "364.11"): 0.875,
    ("200", "401.9"): 0.125,
    ("300", "364.11"): 0.5,
}


@pytest.fixture
def gold(tmp_path, icd9):
    path = tmp_path / "gold.csv"
    path.write_text("doc_id,code\n100,401.9\n200,364.11\n300,\n")
    out = tmp_path / "gold.parquet"
    normalize_labels(path, name="gold", role="gold", out=out, hierarchy=icd9)
    return out


def write_long(tmp_path):
    path = tmp_path / "long.csv"
    rows = "".join(f"{d},{c},{s}\n" for (d, c), s in SCORES.items())
    path.write_text("doc_id,code,score\n" + rows)
    return path


def write_caml(tmp_path):
    path = tmp_path / "pred_100_scores_test.json"
    data: dict = {}
    for (d, c), s in SCORES.items():
        data.setdefault(d, {})[c] = s
    path.write_text(json.dumps(data))
    return path


CODES = ["401.9", "96.04", "364.11"]
DOCS = ["100", "200", "300"]


def write_wide(tmp_path, suffix):
    path = tmp_path / f"wide{suffix}"
    columns = {c: pa.array([SCORES.get((d, c), 0.0) for d in DOCS], pa.float64()) for c in CODES}
    table = pa.table(
        {
            "_id": pa.array([int(d) for d in DOCS], pa.int64()),
            "target": pa.array([[], [], []], pa.list_(pa.string())),
            **columns,
        }
    )
    if suffix == ".feather":
        feather.write_feather(table, path)
    else:
        pl.from_arrow(table).write_parquet(path)
    return path


def write_dense(tmp_path):
    path = tmp_path / "scores.npy"
    np.save(path, np.array([[SCORES.get((d, c), 0.0) for c in CODES] for d in DOCS]))
    (tmp_path / "scores.codes.txt").write_text("\n".join(CODES) + "\n")
    (tmp_path / "scores.docs.txt").write_text("\n".join(DOCS) + "\n")
    return path


@pytest.mark.parametrize("kind", ["long", "caml", "wide.feather", "wide.parquet", "dense"])
def test_scores_survive_normalisation(tmp_path, icd9, gold, kind):
    if kind == "long":
        path, fmt, full = write_long(tmp_path), "auto", False
    elif kind == "caml":
        path, fmt, full = write_caml(tmp_path), "caml_scores", False
    elif kind == "dense":
        path, fmt, full = write_dense(tmp_path), "dense", True
    else:
        path, fmt, full = write_wide(tmp_path, "." + kind.split(".")[1]), "wide", True
    out, scores_out = tmp_path / "p.parquet", tmp_path / "s.parquet"
    record = normalize_labels(
        path,
        name="m",
        role="predictions",
        out=out,
        hierarchy=icd9,
        gold_docs=gold,
        options=LabelOptions(format=fmt, threshold=0.5),
        scores_out=scores_out,
    )
    kept = {(d, c): s for d, c, s in read_scores(scores_out).iter_rows()}  # dense: its matrix
    expected = dict(SCORES)
    if full:  # wide and dense tables score every code of every document
        expected |= {(d, c): 0.0 for d in DOCS for c in CODES if (d, c) not in SCORES}
    assert kept == pytest.approx(expected)
    assert record.scored_pairs == len(expected)
    decisions = pl.read_parquet(out).drop_nulls("code")
    assert {(d, c): s for d, c, s in decisions.iter_rows()} == {
        k: v for k, v in expected.items() if v >= 0.5
    }


def test_hard_predictions_have_null_scores_and_no_score_table(tmp_path, icd9, gold):
    path = tmp_path / "hard.csv"
    path.write_text("doc_id,code\n100,401.9\n200,364.11\n")
    out, scores_out = tmp_path / "p.parquet", tmp_path / "s.parquet"
    normalize_labels(
        path,
        name="m",
        role="predictions",
        out=out,
        hierarchy=icd9,
        gold_docs=gold,
        scores_out=scores_out,
    )
    assert pl.read_parquet(out)["score"].null_count() == 2
    assert pl.read_parquet(scores_out).height == 0


def test_tuned_thresholds_decide_per_code(tmp_path, icd9, gold):
    """Global 0.6, 364.11 at 0.4: keeps 401.9 .8, 364.11 .875 and .5; drops 96.04 .25 and
    401.9 .125. The record names the tuning."""
    out, scores_out = tmp_path / "p.parquet", tmp_path / "s.parquet"
    record = normalize_labels(
        write_long(tmp_path),
        name="m",
        role="predictions",
        out=out,
        hierarchy=icd9,
        gold_docs=gold,
        scores_out=scores_out,
        tuned=TunedThresholds(0.6, {"364.11": 0.4}, {"dev_gold_sha256": "ab"}),
    )
    pairs = pl.read_parquet(out).drop_nulls("code").select("doc_id", "code").rows()
    assert sorted(pairs) == [("100", "401.9"), ("200", "364.11"), ("300", "364.11")]
    assert record.below_threshold == 2
    assert record.tuned_threshold == {"dev_gold_sha256": "ab", "threshold": 0.6}
    assert read_scores(scores_out).height == len(SCORES)  # 5 of 12 cells: kept as a matrix
