"""The MIMIC-IV diagnoses_icd / procedures_icd reader on small tables written here in the real
layout, plain and gzip-compressed: rows of the other ICD version skipped and counted, the code
type taken from the columns, and the errors that stop a wrong file."""

from __future__ import annotations

import gzip
from pathlib import Path

import duckdb
import polars as pl
import pytest

from hieval.errors import InputError
from hieval.inputs.formats import detect, open_source
from hieval.inputs.formats.mimic4 import other_version_rows
from hieval.inputs.normalize import normalize_labels
from hieval.inputs.options import LabelOptions

DIAGNOSES = [
    # subject_id, hadm_id, seq_num, icd_code, icd_version
    ("10000032", "22595853", "1", "5723", "9"),
    ("10000032", "22595853", "2", "78959", "9"),
    ("10000032", "22841357", "1", "4019", "9"),
    ("10000068", "25022803", "1", "E119", "10"),
    ("10000068", "25022803", "2", "T360X1A", "10"),
    ("10000068", "25022803", "3", "I10", "10"),
    ("10000084", "23052089", "1", "G3183", "10"),
]
PROCEDURES = [
    # subject_id, hadm_id, seq_num, chartdate, icd_code, icd_version
    ("10000032", "22595853", "1", "2180-05-07", "5491", "9"),
    ("10000068", "25022803", "1", "2160-03-04", "0DTJ4ZZ", "10"),
    ("10000068", "25022803", "2", "2160-03-04", "3893", "9"),
]
DX_HEADER = "subject_id,hadm_id,seq_num,icd_code,icd_version"
PROC_HEADER = "subject_id,hadm_id,seq_num,chartdate,icd_code,icd_version"


def write(path: Path, header: str, rows, *, bom: bool = False) -> Path:
    body = (header + "\n" + "".join(",".join(r) + "\n" for r in rows)).encode()
    body = b"\xef\xbb\xbf" + body if bom else body
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(body))
    else:
        path.write_bytes(body)
    return path


def src(path: Path, fmt: str) -> tuple[list[tuple], int]:
    """Rows of the registered view (sorted by _line) and the skipped count."""
    con = duckdb.connect()
    assert open_source(con, path, "gold", "gold", fmt=fmt) == fmt
    rows = con.sql("SELECT _line, doc_id, code, code_type FROM src ORDER BY _line").fetchall()
    return rows, other_version_rows(con, int(fmt.removeprefix("mimic4_icd")))


def expected(rows, version: str, code_type: str, code_at: int) -> list[tuple]:
    return [
        (line, r[1], r[code_at], code_type)
        for line, r in enumerate(rows, start=1)
        if r[-1] == version
    ]


@pytest.mark.parametrize("name", ["diagnoses_icd.csv", "diagnoses_icd.csv.gz"])
def test_diagnoses_keep_one_version_and_count_the_other(tmp_path, name):
    path = write(tmp_path / name, DX_HEADER, DIAGNOSES)
    rows, skipped = src(path, "mimic4_icd10")
    assert rows == expected(DIAGNOSES, "10", "dx", 3)
    assert [r[0] for r in rows] == [4, 5, 6, 7]  # rows of the file, counted before skipping
    assert skipped == sum(r[-1] == "9" for r in DIAGNOSES) == 3
    rows9, skipped9 = src(path, "mimic4_icd9")
    assert rows9 == expected(DIAGNOSES, "9", "dx", 3)
    assert skipped9 == 4


@pytest.mark.parametrize("name", ["procedures_icd.csv", "procedures_icd.csv.gz", "proc.csv.gz"])
def test_procedures_are_told_by_chartdate(tmp_path, name):
    path = write(tmp_path / name, PROC_HEADER, PROCEDURES)
    rows, skipped = src(path, "mimic4_icd10")
    assert rows == [(2, "25022803", "0DTJ4ZZ", "proc")]
    assert skipped == 2
    rows9, _ = src(path, "mimic4_icd9")
    assert rows9 == expected(PROCEDURES, "9", "proc", 4)


def test_header_with_bom_and_other_case(tmp_path):
    header = DX_HEADER.upper()
    for name in ("d.csv", "d.csv.gz"):
        path = write(tmp_path / name, header, DIAGNOSES, bom=True)
        rows, _ = src(path, "mimic4_icd10")
        assert [r[2] for r in rows] == ["E119", "T360X1A", "I10", "G3183"]


def test_icd9_rows_normalise_through_the_inputs(tmp_path, icd9):
    """End to end with the ICD-9 hierarchy: the code_type makes 4019 a diagnosis (401.9) in
    diagnoses_icd and 3893 a procedure (38.93) in procedures_icd."""
    result = {}
    for name, header, rows in (
        ("diagnoses_icd.csv.gz", DX_HEADER, DIAGNOSES),
        ("procedures_icd.csv", PROC_HEADER, PROCEDURES),
    ):
        path = write(tmp_path / name, header, rows)
        out = tmp_path / f"{name}.parquet"
        record = normalize_labels(
            path,
            name="gold",
            role="gold",
            out=out,
            hierarchy=icd9,
            options=LabelOptions(format="mimic4_icd9"),
        )
        assert record.format == "mimic4_icd9"
        assert record.rows == sum(r[-1] == "9" for r in rows)
        frame = pl.read_parquet(out)
        result[name] = sorted(frame.select("doc_id", "code").iter_rows())
    assert result["diagnoses_icd.csv.gz"] == [
        ("22595853", "572.3"),
        ("22595853", "789.59"),
        ("22841357", "401.9"),
    ]
    assert result["procedures_icd.csv"] == [("22595853", "54.91"), ("25022803", "38.93")]


@pytest.mark.parametrize("name", ["diagnoses_icd.csv", "diagnoses_icd.csv.gz"])
def test_auto_detection_asks_for_the_version(tmp_path, name):
    path = write(tmp_path / name, DX_HEADER, DIAGNOSES)
    with pytest.raises(InputError, match=r"MIMIC-IV .* mimic4_icd9 or mimic4_icd10"):
        detect(path, "gold")
    with pytest.raises(InputError, match="mimic4_icd9 or mimic4_icd10"):
        open_source(duckdb.connect(), path, "gold", "gold")


def test_a_long_csv_is_still_long(tmp_path):
    path = tmp_path / "gold.csv"
    path.write_text("doc_id,code\n1,401.9\n")
    assert detect(path, "gold") == "long"


def test_no_rows_of_the_version(tmp_path):
    path = write(tmp_path / "diagnoses_icd.csv", DX_HEADER, [r for r in DIAGNOSES if r[-1] == "9"])
    with pytest.raises(InputError, match=r"no ICD-10 rows \(3 rows of ICD-9\).*mimic4_icd9"):
        src(path, "mimic4_icd10")


def test_bad_version_names_the_row(tmp_path):
    rows = [*DIAGNOSES[:2], ("1", "2", "1", "E119", "11"), *DIAGNOSES[2:]]
    path = write(tmp_path / "diagnoses_icd.csv.gz", DX_HEADER, rows)
    with pytest.raises(InputError, match=r"row 3: icd_version '11' must be 9 or 10"):
        src(path, "mimic4_icd10")


def test_file_name_contradicting_the_columns(tmp_path):
    path = write(tmp_path / "diagnoses_icd.csv", PROC_HEADER, PROCEDURES)
    with pytest.raises(InputError, match=r"named like a diagnosis table.*procedures_icd"):
        src(path, "mimic4_icd10")


def test_missing_columns(tmp_path):
    path = write(tmp_path / "d.csv", "subject_id,hadm_id,icd_code", [("1", "2", "E119")])
    with pytest.raises(InputError, match=r"lacks column\(s\) \['icd_version'\]"):
        src(path, "mimic4_icd10")


def test_corrupt_gzip(tmp_path):
    path = tmp_path / "diagnoses_icd.csv.gz"
    path.write_bytes(gzip.compress((DX_HEADER + "\n").encode())[:8] + b"garbage")
    with pytest.raises(InputError, match="corrupt or truncated gzip file"):
        src(path, "mimic4_icd10")


def test_other_suffix_refused(tmp_path):
    path = write(tmp_path / "diagnoses_icd.parquet", DX_HEADER, DIAGNOSES)
    with pytest.raises(InputError, match=r"must be \.csv or \.csv\.gz"):
        src(path, "mimic4_icd10")
