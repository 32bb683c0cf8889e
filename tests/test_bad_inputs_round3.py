"""Bad inputs, round three (issue 30): the readers' silent wrong numbers and misleading messages.

Each refusal is checked end to end where it is cheap (the CLI in process: one line naming the
file and the line or value, exit 1, no traceback, no result files), otherwise at the reader.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import polars as pl
import pytest

from hieval.cli import main
from hieval.errors import InputError
from hieval.formats import caml, long, mimic4, text
from hieval.inputs import normalize_labels
from hieval.label_options import LabelOptions

GOLD = "doc_id,code\nd1,401.9\nd1,96.04\nd2,364.11\n"
OUTPUTS = ("metrics.parquet", "metrics.csv", "summary.csv", "summary.md")
MIMIC_HEADER = "subject_id,hadm_id,seq_num,icd_code,icd_version"


def evaluate(tmp_path: Path, gold: Path, pred: Path, *extra: str) -> tuple[int, Path]:
    out = tmp_path / "out"
    code = main(["evaluate", "--gold", str(gold), "--pred", f"m={pred}", "--out", str(out), *extra])
    return code, out


def assert_refused(capsys, code: int, out: Path, *messages: str) -> str:
    """One line (no traceback) holding every message, exit 1 and no result files."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1, err
    assert "Traceback" not in err
    flat = " ".join(err.split())
    for message in messages:
        assert message in flat, f"{message!r} not in {flat!r}"
    for name in OUTPUTS:
        assert not (out / name).exists(), f"{name} left behind"
    return lines[-1]


def normalize(path: Path, hierarchy, fmt: str = "auto", role: str = "gold") -> pl.DataFrame:
    """The file normalised as an evaluation normalises it (rows sorted by doc_id, code)."""
    out = path.with_name(path.name + ".out.parquet")
    normalize_labels(
        path,
        name=role,
        role=role,
        out=out,
        hierarchy=hierarchy,
        options=LabelOptions(format=fmt),
    )
    return pl.read_parquet(out)


# --- An over-long record is refused wherever it is, the last one too ---------------------------

# DuckDB drops, without a word, a last line longer than its read buffer (32 MB).
OVER_BUFFER = 33 * text.MB


def test_an_over_long_last_line_of_the_gold_is_refused_at_the_real_size(tmp_path, capsys):
    gold = tmp_path / "gold.csv"
    with gold.open("w") as handle:
        handle.write(GOLD)
        handle.write("d3," + "4" * OVER_BUFFER + "\n")
    pred = tmp_path / "pred.csv"
    pred.write_text(GOLD)
    code, out = evaluate(tmp_path, gold, pred)
    assert_refused(capsys, code, out, f"{gold}, line 5: the record is 33.0 MB", "2 MB")


def test_an_over_long_last_line_of_a_gzip_mimic_table_is_refused(tmp_path, icd9):
    path = tmp_path / "diagnoses_icd.csv.gz"
    body = f"{MIMIC_HEADER}\n1,100,1,4019,9\n1,101,1," + "4" * OVER_BUFFER + ",9"
    path.write_bytes(gzip.compress(body.encode(), compresslevel=1))
    with pytest.raises(InputError, match=r"diagnoses_icd.csv.gz, line 3: the record is 33.0 MB"):
        normalize(path, icd9, "mimic4_icd9")


def _lines(big: str, position: str) -> list[str]:
    rows = [f"d{i},401.9" for i in range(8)]
    at = {"first": 0, "middle": 4, "last": len(rows)}[position]
    return [*rows[:at], big, *rows[at:]]


@pytest.fixture
def small_limits(monkeypatch):
    """Record limits of 1 kB, so that files of a few kB hold over-long records."""
    for module, attribute in (
        (long, "MAX_LINE_SIZE"),
        (caml, "GOLD_MAX_LINE_SIZE"),
        (mimic4, "MAX_LINE_SIZE"),
    ):
        monkeypatch.setattr(module, attribute, 1000)


@pytest.mark.parametrize("position", ["first", "middle", "last"])
@pytest.mark.parametrize("ending", ["\n", "", "\r\n", "\n\n  \n"])
def test_an_over_long_long_record_is_refused_anywhere(
    tmp_path, icd9, small_limits, position, ending
):
    lines = ["doc_id,code", *_lines("dbig," + "4" * 5000, position)]
    path = tmp_path / "gold.csv"
    path.write_bytes(("\n".join(lines) + ending).encode())
    line = lines.index(next(x for x in lines if x.startswith("dbig"))) + 1
    with pytest.raises(InputError, match=rf"gold.csv, line {line}: the record is 0.0 MB"):
        normalize(path, icd9)


@pytest.mark.parametrize("position", ["first", "last"])
def test_an_over_long_caml_gold_record_is_refused(tmp_path, icd9, small_limits, position):
    rows = [f'1,{i},"note",401.9;96.04' for i in range(5)]
    big = '1,99,"' + "word " * 1000 + '",401.9'
    rows = [big, *rows] if position == "first" else [*rows, big]
    path = tmp_path / "test_full.csv"
    path.write_text("SUBJECT_ID,HADM_ID,TEXT,LABELS\n" + "\n".join(rows))
    line = 2 if position == "first" else 7
    with pytest.raises(InputError, match=rf"test_full.csv, line {line}: the record is"):
        normalize(path, icd9, "caml_gold")


@pytest.mark.parametrize("position", ["first", "middle", "last"])
def test_an_over_long_mimic_row_is_refused_in_gzip(tmp_path, icd9, small_limits, position):
    rows = [f"1,{100 + i},1,4019,9" for i in range(8)]
    at = {"first": 0, "middle": 4, "last": 8}[position]
    rows.insert(at, "1,99,1," + "4" * 5000 + ",9")
    path = tmp_path / "diagnoses_icd.csv.gz"
    path.write_bytes(gzip.compress((MIMIC_HEADER + "\n" + "\n".join(rows) + "\n").encode()))
    with pytest.raises(InputError, match=rf"line {at + 2}: the record is .* MIMIC-IV"):
        normalize(path, icd9, "mimic4_icd9")


def test_records_within_the_limit_are_all_read(tmp_path, icd9, small_limits):
    note = "word " * 190  # a last record of 990 bytes: within the limit of 1000
    rows = [f'1,{i},"note",401.9' for i in range(5)] + [f'1,99,"{note}",96.04']
    path = tmp_path / "test_full.csv"
    path.write_text("SUBJECT_ID,HADM_ID,TEXT,LABELS\n" + "\n".join(rows))
    gold = normalize(path, icd9, "caml_gold")
    assert gold.rows() == [*((str(i), "401.9") for i in range(5)), ("99", "96.04")]
