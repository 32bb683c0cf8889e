"""Bad inputs, round three (issue 30): the readers' silent wrong numbers and misleading messages.

Each refusal is checked end to end where it is cheap (the CLI in process: one line naming the
file and the line or value, exit 1, no traceback, no result files), otherwise at the reader.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from hieval.cli import main
from hieval.config import load_model_sheet, validate_config
from hieval.errors import HievalError, InputError
from hieval.inputs.formats import caml, long, mimic4, text
from hieval.inputs.normalize import normalize_labels
from hieval.inputs.options import LabelOptions

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


# --- A dense matrix's lists name each row and column once -------------------------------------

DENSE_CODES = ["401.9", "96.04", "364.11"]


def _dense(tmp_path: Path, stem: str, matrix, docs: list[str], codes: list[str]) -> Path:
    path = tmp_path / f"{stem}.npy"
    np.save(path, np.array(matrix))
    (tmp_path / f"{stem}.docs.txt").write_text("\n".join(docs) + "\n")
    (tmp_path / f"{stem}.codes.txt").write_text("\n".join(codes) + "\n")
    return path


@pytest.mark.parametrize(
    ("docs", "codes", "message"),
    [
        (["1", "2", "2"], DENSE_CODES, "pred.docs.txt, line 3: document '2' is listed again"),
        (["1", "2", " 1"], DENSE_CODES, "pred.docs.txt, line 3: document '1' is listed again"),
        (["1", "2", "3"], ["401.9", "96.04", "401.9"], "line 3: code '401.9' is listed again"),
        (["1", "\n2", "3", "3"], DENSE_CODES, "pred.docs.txt, line 5: document '3'"),
    ],
)
def test_dense_lists_with_a_repeat_are_refused(tmp_path, capsys, docs, codes, message):
    gold = tmp_path / "gold.csv"
    gold.write_text("doc_id,code\n1,401.9\n2,96.04\n3,364.11\n")
    matrix = [[0.9, 0.1, 0.0][: len(codes)]] * len(docs)
    pred = _dense(tmp_path, "pred", matrix, docs, codes)
    code, out = evaluate(tmp_path, gold, pred)
    line = assert_refused(capsys, code, out, message, "(first on line")
    assert "listed again" in line


def test_a_dense_gold_with_a_repeated_code_is_refused(tmp_path, capsys):
    gold = _dense(tmp_path, "gold", [[1, 0, 1], [0, 1, 0]], ["a", "b"], ["401.9", "96.04", "401.9"])
    pred = tmp_path / "pred.csv"
    pred.write_text("doc_id,code\na,401.9\n")
    code, out = evaluate(tmp_path, gold, pred)
    assert_refused(capsys, code, out, "gold.codes.txt, line 3: code '401.9' is listed again")


def test_dense_lists_without_repeats_are_read(tmp_path, capsys):
    gold = tmp_path / "gold.csv"
    gold.write_text("doc_id,code\n1,401.9\n2,96.04\n3,364.11\n")
    pred = _dense(tmp_path, "pred", np.eye(3, dtype=bool), ["1", "2", "3"], DENSE_CODES)
    code, out = evaluate(tmp_path, gold, pred)
    assert code == 0, capsys.readouterr().err
    tidy = pl.read_parquet(out / "metrics.parquet")
    micro = tidy.filter((pl.col("family") == "flat") & (pl.col("average") == "micro"))
    assert dict(micro.select("metric", "value").iter_rows())["f1"] == 1.0


# --- A corrupt gzip file is said to be corrupt ---------------------------------------------------


def _mimic_rows(n: int) -> str:
    return "".join(f"{i},{100 + i // 3},{i % 3 + 1},4019,9\n" for i in range(n))


@pytest.mark.parametrize("rows", [3, 200_000])  # cut within the header's block, or far after
@pytest.mark.parametrize("header", [MIMIC_HEADER, "doc_id,code"])
def test_a_truncated_gzip_file_is_said_to_be_corrupt(tmp_path, capsys, rows, header):
    data = gzip.compress(f"{header}\n{_mimic_rows(rows)}".encode())
    gold = tmp_path / "diagnoses_icd.csv.gz"
    gold.write_bytes(data[: len(data) // 2])
    pred = tmp_path / "pred.csv"
    pred.write_text("doc_id,code\n100,401.9\n")
    code, out = evaluate(tmp_path, gold, pred)
    line = assert_refused(capsys, code, out, f"{gold} is a corrupt or truncated gzip file")
    assert "cannot tell the format" not in line


# --- Messages name the user's columns, not the readers' -----------------------------------------


@pytest.mark.parametrize(
    "header", ["subject_id,hadm_id,seq_num,icd_code", "SUBJECT_ID,HADM_ID,SEQ_NUM,ICD_CODE"]
)
def test_a_mimic_table_without_icd_version_lists_its_own_columns(tmp_path, capsys, header):
    gold = tmp_path / "diagnoses_icd.csv"
    gold.write_text(f"{header}\n1,100,1,4019\n")
    pred = tmp_path / "pred.csv"
    pred.write_text("doc_id,code\n100,401.9\n")
    code, out = evaluate(tmp_path, gold, pred)
    found = ", ".join(repr(column) for column in header.split(","))
    line = assert_refused(capsys, code, out, f"(found {found})", "without its 'icd_version'")
    assert "_line" not in line


# --- An empty score is called empty --------------------------------------------------------------


def test_an_empty_score_cell_is_called_empty(tmp_path, capsys):
    gold = tmp_path / "gold.csv"
    gold.write_text(GOLD)
    pred = tmp_path / "pred.csv"
    pred.write_text("doc_id,code,score\nd1,401.9,0.9\nd2,364.11,\n")
    code, out = evaluate(tmp_path, gold, pred)
    line = assert_refused(capsys, code, out, "pred.csv, line 3: empty score")
    assert "None" not in line


def test_a_null_score_in_parquet_is_called_empty(tmp_path, capsys):
    gold = tmp_path / "gold.csv"
    gold.write_text(GOLD)
    pred = tmp_path / "pred.parquet"
    pl.DataFrame(
        {"doc_id": ["d1", "d2"], "code": ["401.9", "364.11"], "score": [0.9, None]}
    ).write_parquet(pred)
    code, out = evaluate(tmp_path, gold, pred)
    line = assert_refused(capsys, code, out, "pred.parquet, row 2: empty score")
    assert "None" not in line


def test_an_empty_cell_of_a_wide_table_is_called_empty(tmp_path, capsys):
    gold = tmp_path / "gold.csv"
    gold.write_text(GOLD)
    pred = tmp_path / "wide.parquet"
    pl.DataFrame(
        {"_id": ["d1", "d2"], "target": [["401.9"], ["364.11"]], "401.9": [0.9, None]}
    ).write_parquet(pred)
    code, out = evaluate(tmp_path, gold, pred)
    assert_refused(capsys, code, out, "wide.parquet, row 2: empty score (document 'd2'")


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("pred.tsv", "doc_id\tcode\tscore\nd1\t401.9\t  \n", "pred.tsv, line 2: empty score"),
        ("scores.json", '{"d1": {"401.9": 0.9, "96.04": null}}', "record 1: empty score"),
    ],
)
def test_blank_and_null_scores_are_called_empty(tmp_path, capsys, name, content, message):
    gold = tmp_path / "gold.csv"
    gold.write_text(GOLD)
    pred = tmp_path / name
    pred.write_text(content)
    code, out = evaluate(tmp_path, gold, pred)
    line = assert_refused(capsys, code, out, message)
    assert "score None" not in line and "score 'null'" not in line


# --- Messages cut the values they quote ------------------------------------------------------

LONG = "x" * 10_000


def _cut(line: str) -> None:
    """The value is quoted by its start, with its length, and the line stays short."""
    assert "(10000 characters)" in line
    assert LONG not in line
    assert len(line) < 600, line


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])  # the DuckDB path and the fast path
def test_a_long_document_id_is_cut(tmp_path, capsys, suffix):
    gold = tmp_path / "gold.csv"
    gold.write_text(GOLD)
    pred = tmp_path / f"pred{suffix}"
    frame = pl.DataFrame({"doc_id": ["d1", LONG], "code": ["401.9", "96.04"]})
    frame.write_csv(pred) if suffix == ".csv" else frame.write_parquet(pred)
    code, out = evaluate(tmp_path, gold, pred)
    _cut(assert_refused(capsys, code, out, "not in the gold: 'xxxxx"))


@pytest.mark.parametrize(
    ("header", "row", "message"),
    [
        ("doc_id,code", f"d1,{LONG}", "malformed code 'xxx"),
        ("doc_id,code,score", f"d1,401.9,{LONG}", "line 2: score 'xxx"),
        ("doc_id,code,code_type", f"d1,401.9,{LONG}", "line 2: code_type 'xxx"),
        (f"doc_id,code,{LONG}", "d1,401.9,x", "(found "),
    ],
)
def test_long_cells_are_cut(tmp_path, capsys, header, row, message):
    gold = tmp_path / "gold.csv"
    gold.write_text(GOLD)
    pred = tmp_path / "pred.csv"
    pred.write_text(f"{header}\n{row}\n")
    if header.endswith(LONG):  # a header without doc_id: the columns found are listed
        pred.write_text(f"id,code,{LONG}\n{row}\n")
    code, out = evaluate(tmp_path, gold, pred)
    _cut(assert_refused(capsys, code, out, message))


def test_a_long_document_id_in_json_scores_is_cut(tmp_path, capsys):
    gold = tmp_path / "gold.csv"
    gold.write_text(GOLD)
    pred = tmp_path / "scores.json"
    pred.write_text(f'{{"{LONG}": {{"401.9": 0.9}}, "{LONG}": {{"96.04": 0.8}}}}')
    code, out = evaluate(tmp_path, gold, pred)
    _cut(assert_refused(capsys, code, out, "appears more than once"))


def test_a_long_psv_line_and_model_name_are_cut(tmp_path, capsys):
    gold = tmp_path / "gold.csv"
    gold.write_text(GOLD)
    pred = tmp_path / "preds_test.psv"
    pred.write_text(f"d1|401.9\n{'word ' * 2000}\n")
    code, out = evaluate(tmp_path, gold, pred)
    line = assert_refused(capsys, code, out, "preds_test.psv, line 2: expected")
    assert "(10000 characters)" in line and len(line) < 600
    out = tmp_path / "out2"
    with pytest.raises(SystemExit):  # argparse refuses the option
        main(["evaluate", "--gold", str(gold), "--pred", f"{LONG}!={pred}", "--out", str(out)])
    err = capsys.readouterr().err
    assert "(10001 characters)" in err and LONG not in err


# --- Label indices (CAML's LR files) get the README's hint, once --------------------------------


def _indices(n: int, start: int) -> list[str]:
    return [str(start + 7 * i) for i in range(n)]


@pytest.mark.parametrize(
    ("values", "extra"),
    [
        (_indices(600, 100), []),  # many indices, all of 3+ digits: 'ambiguous undotted code'
        (_indices(600, 0), ["--code-type", "dx"]),  # after the old, wrong advice
        (["3", "7", "5"], []),  # CAML's top-50 LR model: small indices
        (["12", "100", "2041"], []),  # a few, one of two digits
    ],
)
@pytest.mark.parametrize("suffix", [".psv", ".parquet"])
def test_label_indices_get_one_line_with_the_hint(tmp_path, capsys, values, extra, suffix):
    gold = tmp_path / "gold.csv"
    gold.write_text("doc_id,code\nd1,401.9\nd2,364.11\n")  # diagnoses: valid with --code-type dx
    pred = tmp_path / f"preds_test{suffix}"
    docs = [f"d{i % 2 + 1}" for i in range(len(values))]
    if suffix == ".psv":
        pred.write_text("".join(f"{d}|{v}\n" for d, v in zip(docs, values, strict=True)))
    else:
        pl.DataFrame({"doc_id": docs, "code": values}).write_parquet(pred)
    code, out = evaluate(tmp_path, gold, pred, *extra)
    line = assert_refused(
        capsys,
        code,
        out,
        f"{pred}: its {len(set(values))} distinct codes are all whole numbers",
        caml.INDEX_HINT,
    )
    err_lines = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert not err_lines  # already read: the whole message was one line
    assert "code_type" not in line


def test_integer_codes_in_parquet_get_the_hint(tmp_path, capsys):
    gold = tmp_path / "gold.csv"
    gold.write_text(GOLD)
    pred = tmp_path / "preds.parquet"
    pl.DataFrame({"doc_id": ["d1", "d2"], "code": [100, 2041]}).write_parquet(pred)
    code, out = evaluate(tmp_path, gold, pred)
    assert_refused(capsys, code, out, "is BIGINT, not text", caml.INDEX_HINT)


def test_a_long_value_in_the_model_sheet_is_cut(tmp_path):
    sheet = tmp_path / "models.tsv"
    sheet.write_text(f"model\tpredictions\tthreshold\nm\tpred.csv\t{LONG}\n")
    schema = Path(__file__).resolve().parents[1] / "workflow/schemas/models.schema.yaml"
    with pytest.raises(InputError) as caught:
        load_model_sheet(sheet, schema)
    _cut(str(caught.value))


def test_a_long_string_in_the_config_is_cut():
    schema = Path(__file__).resolve().parents[1] / "workflow/schemas/config.schema.yaml"
    with pytest.raises(HievalError) as caught:
        validate_config({"gold": "gold.csv", "gold_format": LONG}, schema)
    _cut(str(caught.value))
