"""Reading, validating and normalising gold and prediction label files."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from hieval.checksums import sha256_file
from hieval.errors import InputError
from hieval.inputs.normalize import normalize_labels
from hieval.inputs.options import LabelOptions


@pytest.fixture(scope="module")
def codes(icd9) -> set[str]:
    return set(icd9.frame["code"])


def _role(kwargs: dict) -> dict:
    """The keyword arguments with the file's role: predictions when a gold is given."""
    return {"role": "predictions" if kwargs.get("gold_docs") else "gold", **kwargs}


@pytest.fixture
def run(codes, icd9, tmp_path, caplog):
    """normalize_labels with the package hierarchy; returns (record, output rows, log lines)."""

    def _run(path, name="model", out=None, **kwargs):
        out = out or tmp_path / f"{name}.parquet"
        caplog.set_level("INFO", logger="hieval")
        caplog.clear()
        record = normalize_labels(path, name=name, out=out, hierarchy=icd9, **_role(kwargs))
        logs = [r.getMessage() for r in caplog.records if r.name.startswith("hieval")]
        frame = pl.read_parquet(out)
        # Predictions keep each decision's score (issue 14); the rows compared are the pairs.
        scored = ["score"] if _role(kwargs)["role"] == "predictions" else []
        assert frame.columns == ["doc_id", "code", *scored]
        assert frame.schema["doc_id"] == pl.String and frame.schema["code"] == pl.String
        return record, frame.select("doc_id", "code").rows(), logs

    return _run


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def gold(run, tmp_path) -> Path:
    """A normalised gold with documents d1, d2, d3."""
    src = write(tmp_path / "gold.csv", "doc_id,code\nd1,401.9\nd1,364.11\nd2,96.04\nd3,412\n")
    run(src, name="gold", out=tmp_path / "gold.parquet")
    return tmp_path / "gold.parquet"


# --- what normalisation does ------------------------------------------------------------------


def test_undotted_with_code_type_column(run, tmp_path):
    src = write(
        tmp_path / "gold.csv",
        "doc_id,code,code_type\n"
        "d1,4019,dx\n"
        "d1,4019,proc\n"
        "d1,36411,dx\n"
        "d2,E8497,dx\n"
        "d2,V5861,DX\n"
        "d2,0010,dx\n"
        "d2,0010,proc\n"
        " d1 , 4019 , dx \n",
    )
    record, rows, logs = run(src, name="gold")
    assert rows == [
        ("d1", "364.11"),
        ("d1", "40.19"),
        ("d1", "401.9"),
        ("d2", "00.10"),
        ("d2", "001.0"),
        ("d2", "E849.7"),
        ("d2", "V58.61"),
    ]
    assert record.code_format == "undotted"
    assert record.rows == 8
    assert record.duplicates_removed == 1
    assert record.labels == 7 and record.documents == 2
    assert record.sha256 == sha256_file(src)
    assert any("duplicate" in line and "401.9" in line for line in logs)


def test_file_level_code_type(run, tmp_path):
    src = write(tmp_path / "procs.tsv", "doc_id\tcode\nd1\t0010\nd1\t9604\n")
    record, rows, _ = run(src, options=LabelOptions(code_type="proc"))
    assert rows == [("d1", "00.10"), ("d1", "96.04")]
    assert record.code_format == "undotted"


def test_duplicates_counted_once_and_recorded(run, tmp_path):
    src = write(
        tmp_path / "gold.csv",
        "doc_id,code\nd1,401.9\nd1,401.9\nd1,401.9\nd2,412\nd2, 412\nd2,96.04\n",
    )
    record, rows, logs = run(src, name="gold")
    assert rows == [("d1", "401.9"), ("d2", "412"), ("d2", "96.04")]
    assert record.duplicates_removed == 3
    assert record.labels == 3
    assert any("3 duplicate" in line for line in logs)
    assert json.loads(record.to_json())["duplicates_removed"] == 3


def test_document_without_labels_is_kept(run, tmp_path):
    src = write(tmp_path / "gold.csv", "doc_id,code\nd1,401.9\nd2,\n")
    record, rows, _ = run(src, name="gold")
    assert rows == [("d1", "401.9"), ("d2", None)]
    assert record.documents == 2 and record.labels == 1


def test_parquet_input(run, tmp_path):
    src = tmp_path / "gold.parquet.in.parquet"
    pl.DataFrame({"doc_id": [2, 1, 1], "code": ["412", "001.0", "00.10"]}).write_parquet(src)
    record, rows, _ = run(src, name="gold")
    assert rows == [("1", "00.10"), ("1", "001.0"), ("2", "412")]
    assert record.code_format == "dotted"


SCORED = (
    "doc_id\tcode\tscore\n"
    "d1\t401.9\t0.9\n"
    "d1\t40.19\t0.5\n"
    "d1\t364.11\t0.49\n"
    "d2\tV58.61\t0.7\n"
    "d2\tE849.7\t0.7\n"
    "d2\t401.9\t0.7\n"
    "d2\t412\t0.1\n"
)


def test_default_threshold(run, gold, tmp_path):
    src = write(tmp_path / "pred.tsv", SCORED)
    record, rows, _ = run(src, gold_docs=gold)
    # score >= 0.5 kept
    assert rows == [
        ("d1", "40.19"),
        ("d1", "401.9"),
        ("d2", "401.9"),
        ("d2", "E849.7"),
        ("d2", "V58.61"),
    ]
    assert record.below_threshold == 2


def test_explicit_threshold(run, gold, tmp_path):
    src = write(tmp_path / "pred.tsv", SCORED)
    record, rows, _ = run(src, gold_docs=gold, options=LabelOptions(threshold=0.8))
    assert rows == [("d1", "401.9")]
    assert record.below_threshold == 6


def test_top_k_ties_broken_by_code(run, gold, tmp_path):
    src = write(tmp_path / "pred.tsv", SCORED)
    record, rows, _ = run(src, gold_docs=gold, options=LabelOptions(top_k=2))
    # d2 has three codes tied at 0.7: the two smallest codes win.
    assert rows == [("d1", "40.19"), ("d1", "401.9"), ("d2", "401.9"), ("d2", "E849.7")]
    assert record.outside_top_k == 3
    assert record.below_threshold == 0  # top_k alone applies no threshold
    # The selection does not depend on row order.
    lines = SCORED.splitlines()
    shuffled = write(tmp_path / "shuffled.tsv", "\n".join([lines[0], *reversed(lines[1:])]) + "\n")
    _, rows2, _ = run(shuffled, gold_docs=gold, options=LabelOptions(top_k=2))
    assert rows2 == rows


def test_threshold_and_top_k(run, gold, tmp_path):
    src = write(tmp_path / "pred.tsv", SCORED)
    _, rows, _ = run(src, gold_docs=gold, options=LabelOptions(top_k=2, threshold=0.6))
    assert rows == [("d1", "401.9"), ("d2", "401.9"), ("d2", "E849.7")]


def test_unknown_document_dropped(run, gold, tmp_path):
    src = write(tmp_path / "pred.csv", "doc_id,code\nd1,401.9\nd9,412\nd8,96.04\n")
    record, rows, logs = run(src, gold_docs=gold, unknown_docs="drop")
    assert rows == [("d1", "401.9")]
    assert record.unknown_documents_dropped == 2
    assert any("'d9'" in line for line in logs)


def test_unknown_code_dropped(run, tmp_path):
    src = write(tmp_path / "gold.csv", "doc_id,code\nd1,401.9\nd1,364.99\nd2,364.99\n")
    record, rows, _ = run(src, name="gold", unknown_codes="drop")
    assert rows == [("d1", "401.9")]
    assert record.unknown_codes == {"364.99": 2}
    assert record.unknown_code_policy == "drop"


def test_unknown_code_placed(run, tmp_path):
    src = write(tmp_path / "gold.csv", "doc_id,code\nd1,401.9\nd2,364.99\n")
    record, rows, _ = run(src, name="gold", unknown_codes="place")
    assert rows == [("d1", "401.9"), ("d2", "364.99")]
    assert record.unknown_codes == {"364.99": 1}


# --- what normalisation refuses ---------------------------------------------------------------


@pytest.fixture
def refuses(codes, icd9, tmp_path):
    """Assert that normalising ``path`` raises an InputError naming the file and ``values``,
    and leaves no output (nor temporary file) behind."""

    def _refuses(path: Path, *values: str, **kwargs) -> str:
        out = tmp_path / "out" / "labels.parquet"
        with pytest.raises(InputError) as err:
            normalize_labels(path, name="model", out=out, hierarchy=icd9, **_role(kwargs))
        message = str(err.value)
        assert str(path) in message, message
        for value in values:
            assert value in message, message
        assert not out.exists()
        assert not out.parent.exists() or list(out.parent.iterdir()) == []
        return message

    return _refuses


def test_missing_file(refuses, tmp_path):
    refuses(tmp_path / "nope.csv", "does not exist")


def test_empty_file(refuses, tmp_path):
    refuses(write(tmp_path / "empty.csv", ""), "empty")


def test_header_only_gold(refuses, tmp_path):
    refuses(write(tmp_path / "gold.csv", "doc_id,code\n"), "no rows")


def test_missing_column(refuses, tmp_path):
    refuses(write(tmp_path / "bad.csv", "document,code\nd1,401.9\n"), "'doc_id'", "document")


@pytest.mark.parametrize(
    ("score", "shown"), [("NaN", "'NaN'"), ("high", "'high'"), ("inf", "'inf'")]
)
def test_bad_score(refuses, gold, tmp_path, score, shown):
    src = write(tmp_path / "pred.csv", f"doc_id,code,score\nd1,401.9,0.9\nd1,412,{score}\n")
    message = refuses(src, shown, "line 3", gold_docs=gold)
    assert "finite number" in message


def test_nan_score_parquet(refuses, gold, tmp_path):
    src = tmp_path / "pred.parquet"
    pl.DataFrame(
        {"doc_id": ["d1", "d1"], "code": ["401.9", "412"], "score": [0.7, float("nan")]}
    ).write_parquet(src)
    refuses(src, "'nan'", "row 2", gold_docs=gold)


@pytest.mark.parametrize(("values", "dtype"), [([4019, 412], "BIGINT"), ([401.9, 412.0], "DOUBLE")])
def test_numeric_code_column(refuses, tmp_path, values, dtype):
    src = tmp_path / "gold.parquet"
    pl.DataFrame({"doc_id": ["d1", "d2"], "code": values}).write_parquet(src)
    refuses(src, "'code'", dtype, "leading zeros")


def test_prediction_document_not_in_gold(refuses, gold, tmp_path):
    src = write(tmp_path / "pred.csv", "doc_id,code\nd1,401.9\nd9,412\n")
    refuses(src, "'d9'", "unknown_docs", gold_docs=gold)


def test_unknown_code_error(refuses, tmp_path):
    src = write(tmp_path / "gold.csv", "doc_id,code\nd1,401.9\nd2,364.99\n")
    refuses(src, "'364.99'", "unknown_codes", unknown_codes="error")


def test_unplaceable_code(refuses, tmp_path):
    # V92 lies in no ICD-9-CM chapter, so unknown_codes: place cannot place it.
    src = write(tmp_path / "gold.csv", "doc_id,code\nd1,401.9\nd2,V92.1\n")
    refuses(src, "'V92.1'", unknown_codes="place")


def test_malformed_code(refuses, tmp_path):
    src = write(tmp_path / "gold.csv", "doc_id,code\nd1,401.9\nd2,4O1.9\n")
    refuses(src, "'4O1.9'", "line 3", "malformed")


def test_ambiguous_undotted_code(refuses, tmp_path):
    src = write(tmp_path / "gold.csv", "doc_id,code\nd1,4019\n")
    refuses(src, "'4019'", "code_type")


def test_bad_code_type_value(refuses, tmp_path):
    src = write(tmp_path / "gold.csv", "doc_id,code,code_type\nd1,4019,icd\n")
    refuses(src, "'icd'", "line 2")


def test_empty_doc_id(refuses, tmp_path):
    src = write(tmp_path / "gold.csv", "doc_id,code\nd1,401.9\n,412\n")
    refuses(src, "line 3", "empty doc_id")


def test_unknown_format(refuses, tmp_path):
    refuses(
        write(tmp_path / "gold.xlsx", "{}"),
        "cannot tell the format",
        "format FORMAT in model model's row",
    )


def test_prediction_only_format_as_gold(refuses, tmp_path):
    refuses(write(tmp_path / "gold.json", "{}"), "caml_scores", "predictions only")


def test_engine_bounds_leave_the_output_unchanged(run, tmp_path):
    """A memory limit and a spill folder bound DuckDB; they never change what is written."""
    src = write(tmp_path / "m.csv", "doc_id,code\nd2,401.9\nd1,364.11\nd1,364.11\nd3,\n")
    plain = run(src, out=tmp_path / "plain.parquet")
    spill = tmp_path / "spill"
    bounded = run(
        src,
        out=tmp_path / "bounded.parquet",
        duckdb_config={"memory_limit": "256MB", "temp_directory": str(spill)},
    )
    assert bounded[1] == plain[1] == [("d1", "364.11"), ("d2", "401.9"), ("d3", None)]
