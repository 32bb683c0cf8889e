"""Each input adapter on a fixture written in its real layout, read through normalize_labels,
and the errors that protect users from silent miscounts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.feather as feather
import pytest

from hieval.errors import InputError
from hieval.inputs.normalize import normalize_labels
from hieval.inputs.options import LabelOptions

GOLD_ROWS = {"100": ["401.9", "96.04"], "200": ["364.11"], "300": []}


@pytest.fixture(scope="module")
def codes(icd9):
    return set(icd9.frame["code"].to_list())


@pytest.fixture
def read(tmp_path, codes, icd9):
    """Normalise a file; return {doc: sorted codes} (empty list for declared empty docs)."""

    def _read(path: Path, gold_docs: Path | None = None, **options) -> dict[str, list[str]]:
        out = tmp_path / f"out_{path.stem}_{len(list(tmp_path.iterdir()))}.parquet"
        normalize_labels(
            path,
            name="m",
            role="gold" if gold_docs is None else "predictions",
            out=out,
            hierarchy=icd9,
            options=LabelOptions(**options),
            gold_docs=gold_docs,
        )
        frame = pl.read_parquet(out)
        result: dict[str, list[str]] = {}
        for doc, code in frame.select("doc_id", "code").iter_rows():
            result.setdefault(doc, [])
            if code is not None:
                result[doc].append(code)
        return {d: sorted(c) for d, c in result.items()}

    return _read


@pytest.fixture
def gold(tmp_path, read):
    path = tmp_path / "gold.csv"
    path.write_text("doc_id,code\n100,401.9\n100,96.04\n200,364.11\n300,\n")
    out = tmp_path / "gold.parquet"
    read(path)  # sanity: the long gold itself
    pl.DataFrame(
        {"doc_id": ["100", "100", "200", "300"], "code": ["401.9", "96.04", "364.11", None]}
    ).write_parquet(out)
    return out


def test_caml_psv(tmp_path, read, gold):
    path = tmp_path / "preds_test.psv"
    # CAML's layout: no header, hadm_id|code|..., procedure codes with a trailing dot, and a
    # document without predictions written as `hadm_id|`.
    path.write_text("100|401.9|96.04\n200|364.1|364.11|34.\n300|\n")
    assert read(path, gold) == {
        "100": ["401.9", "96.04"],
        "200": ["34", "364.1", "364.11"],
        "300": [],
    }


def test_caml_psv_bad_line_is_named(tmp_path, read, gold):
    path = tmp_path / "preds_test.psv"
    path.write_text("100|401.9\njust some text\n")
    with pytest.raises(InputError, match=r"preds_test.psv, line 2: expected 'hadm_id\|code"):
        read(path, gold)


def test_caml_scores_threshold_and_top_k(tmp_path, read, gold):
    path = tmp_path / "pred_100_scores_test.json"
    path.write_text(
        json.dumps(
            {
                "100": {"401.9": 0.9, "96.04": 0.6, "250.00": 0.4},
                "200": {"364.11": 0.7, "364.9": 0.7, "401.9": 0.1},
                "300": {},
            }
        )
    )
    assert read(path, gold) == {"100": ["401.9", "96.04"], "200": ["364.11", "364.9"], "300": []}
    # top-1: ties broken by code (364.11 < 364.9)
    assert read(path, gold, top_k=1) == {"100": ["401.9"], "200": ["364.11"], "300": []}


def test_caml_scores_bad_value(tmp_path, read, gold):
    path = tmp_path / "pred_100_scores_test.json"
    path.write_text(json.dumps({"100": {"401.9": "high"}}))
    with pytest.raises(InputError, match=r"pred_100_scores_test.json, record 1: score '\"high\"'"):
        read(path, gold)


def test_caml_gold_csv_streams_past_the_text(tmp_path, read):
    path = tmp_path / "test_full.csv"
    path.write_text(
        "SUBJECT_ID,HADM_ID,TEXT,LABELS\n"
        '1,100,"admission date: ... the patient, a 70 year old, was\nintubated",401.9;96.04\n'
        '2,200,"short ""quoted"" note",364.11\n'
        "3,300,nothing coded,\n"
    )
    assert read(path) == GOLD_ROWS


def test_caml_gold_missing_column(tmp_path, read):
    path = tmp_path / "test_full.csv"
    path.write_text("SUBJECT_ID,HADM_ID,TEXT,CODES\n1,100,x,401.9\n")
    # Without LABELS the file is not recognised as CAML gold; named explicitly it is refused.
    with pytest.raises(InputError, match=r"lacks column\(s\) \['LABELS'\]"):
        read(path, format="caml_gold")


def wide_table() -> pa.Table:
    return pa.table(
        {
            "_id": pa.array([100, 200, 300], pa.int64()),
            "target": pa.array([["401.9", "96.04"], ["364.11"], []], pa.list_(pa.string())),
            "401.9": pa.array([0.8, 0.2, 0.1], pa.float32()),
            "96.04": pa.array([0.3, 0.1, 0.0], pa.float32()),
            "364.11": pa.array([0.1, 0.9, 0.6], pa.float32()),
        }
    )


@pytest.mark.parametrize("suffix", [".feather", ".parquet"])
def test_wide_table_as_gold_and_predictions(tmp_path, read, gold, suffix):
    path = tmp_path / f"predictions_test{suffix}"
    if suffix == ".feather":
        feather.write_feather(wide_table(), path)
    else:
        pl.from_arrow(wide_table()).write_parquet(path)
    assert read(path) == GOLD_ROWS  # a gold read takes `target`
    assert read(path, gold) == {"100": ["401.9"], "200": ["364.11"], "300": ["364.11"]}


def test_dense_scores_with_sidecar_lists(tmp_path, read, gold):
    path = tmp_path / "scores.npy"
    np.save(path, np.array([[0.9, 0.2, 0.7], [0.1, 0.8, 0.0], [0.0, 0.0, 0.4]], np.float32))
    (tmp_path / "scores.codes.txt").write_text("401.9\n364.11\n96.04\n")
    (tmp_path / "scores.docs.txt").write_text("100\n200\n300\n")
    assert read(path, gold) == {"100": ["401.9", "96.04"], "200": ["364.11"], "300": []}


def test_dense_binary_npz_with_named_lists(tmp_path, read, gold):
    path = tmp_path / "decisions.npz"
    np.savez(path, scores=np.array([[1, 0], [0, 1], [0, 0]], np.int8))
    (tmp_path / "c.txt").write_text("96.04\n364.11\n")
    (tmp_path / "d.txt").write_text("100\n200\n300\n")
    got = read(path, gold, code_list=str(tmp_path / "c.txt"), doc_list=str(tmp_path / "d.txt"))
    assert got == {"100": ["96.04"], "200": ["364.11"], "300": []}


def test_dense_shape_mismatch(tmp_path, read, gold):
    path = tmp_path / "scores.npy"
    np.save(path, np.zeros((3, 2)))
    (tmp_path / "scores.codes.txt").write_text("401.9\n364.11\n96.04\n")
    (tmp_path / "scores.docs.txt").write_text("100\n200\n300\n")
    with pytest.raises(
        InputError,
        match=r"is 3 x 2 .* the code list .*scores.codes.txt holds 3 codes for its 2 col",
    ):
        read(path, gold)


def test_dense_never_unpickles(tmp_path, read, gold):
    path = tmp_path / "objects.npy"
    np.save(path, np.array([{"401.9": 1.0}], dtype=object), allow_pickle=True)
    with pytest.raises(InputError, match="never unpickles"):
        read(path, gold)


def test_duplicated_header(tmp_path, read):
    path = tmp_path / "gold.csv"
    path.write_text("doc_id,code,code\n100,401.9,96.04\n")
    with pytest.raises(InputError, match=r"gold.csv, line 1: column 'code' appears more than once"):
        read(path)


def test_corrupt_parquet(tmp_path, read):
    path = tmp_path / "gold.parquet"
    path.write_bytes(b"PAR1 this is not really parquet")
    with pytest.raises(InputError, match=r"gold\.parquet is not a readable Parquet file"):
        read(path)


def test_format_is_recorded(tmp_path, codes, icd9, gold):
    path = tmp_path / "preds_test.psv"
    path.write_text("100|401.9\n")
    record = normalize_labels(
        path,
        name="m",
        role="predictions",
        out=tmp_path / "o.parquet",
        hierarchy=icd9,
        gold_docs=gold,
    )
    assert record.format == "caml_psv"
