"""The readers, end to end through the CLI, on the inputs that used to give silent wrong numbers,
a crash or a message without its reason (issue 11): what is valid gives the right numbers
(worked out by hand here), what is not gives one line naming the file, the line or document,
and the value, a non-zero exit, no traceback and no result files."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hieval.cli import main
from hieval.inputs.formats import caml

REPO = Path(__file__).resolve().parents[1]
GOLD = "doc_id,code\nd1,401.9\nd1,96.04\nd2,364.11\n"  # 3 labels over 2 documents
OUTPUTS = ("metrics.parquet", "metrics.csv", "summary.csv", "summary.md")
BOM = b"\xef\xbb\xbf"


def write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def evaluate(tmp_path: Path, gold: Path, pred: Path, *extra: str) -> tuple[int, Path]:
    out = tmp_path / "out"
    code = main(["evaluate", "--gold", str(gold), "--pred", f"m={pred}", "--out", str(out), *extra])
    return code, out


def flat(out: Path) -> dict[str, float]:
    """The flat micro counts and recall of the one model."""
    tidy = pl.read_parquet(out / "metrics.parquet")
    rows = tidy.filter((pl.col("family") == "flat") & (pl.col("average") == "micro"))
    return {m: v for m, v in rows.select("metric", "value").iter_rows() if m in TP_FP_FN}


TP_FP_FN = ("tp", "fp", "fn", "recall")


def assert_refused(capsys, code: int, out: Path, *messages: str) -> str:
    err = " ".join(capsys.readouterr().err.split())  # undo terminal wrapping
    assert code == 1, err
    for message in messages:
        assert message in err, f"{message!r} not in {err!r}"
    assert "Traceback" not in err
    for name in OUTPUTS:
        assert not (out / name).exists(), f"{name} left behind"
    return err


# --- 1. A dense gold is 0/1 whatever its dtype ------------------------------------------------

DENSE_CODES = ["401.9", "96.04", "364.11", "250.00", "428.0", "38.93"]
DENSE_GOLD = [  # d1: 401.9, 96.04; d2: 364.11; d3: 428.0 -> 4 labels
    [1, 1, 0, 0, 0, 0],
    [0, 0, 1, 0, 0, 0],
    [0, 0, 0, 0, 1, 0],
]
# d1 401.9 hit; d2 364.11 hit; d3 250.00 is a false positive -> tp 2, fp 1, fn 4 - 2 = 2
DENSE_PRED = "doc_id,code\nd1,401.9\nd2,364.11\nd3,250.00\n"


def dense_gold(tmp_path: Path, matrix: np.ndarray) -> Path:
    path = tmp_path / "gold.npy"
    np.save(path, matrix)
    (tmp_path / "gold.codes.txt").write_text("\n".join(DENSE_CODES) + "\n")
    (tmp_path / "gold.docs.txt").write_text("d1\nd2\nd3\n")
    return path


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.int64, bool])
def test_dense_gold_is_decisions_whatever_its_dtype(tmp_path, dtype):
    gold = dense_gold(tmp_path, np.array(DENSE_GOLD, dtype=dtype))
    code, out = evaluate(tmp_path, gold, write(tmp_path / "pred.csv", DENSE_PRED))
    assert code == 0
    assert flat(out) == {"tp": 2, "fp": 1, "fn": 2, "recall": 0.5}


@pytest.mark.parametrize(("value", "shown"), [(0.5, "0.5"), (2.0, "2.0"), (np.nan, "nan")])
def test_dense_gold_refuses_values_other_than_0_and_1(tmp_path, capsys, value, shown):
    matrix = np.array(DENSE_GOLD, dtype=np.float32)
    matrix[1, 2] = value  # document d2, code 364.11
    gold = dense_gold(tmp_path, matrix)
    code, out = evaluate(tmp_path, gold, write(tmp_path / "pred.csv", DENSE_PRED))
    assert_refused(
        capsys,
        code,
        out,
        "gold.npy, row 2 (document 'd2'), column 3 (code '364.11')",
        f"value {shown} is not 0 or 1",
    )


def test_dense_predictions_keep_float_scores(tmp_path):
    """Predictions are still scores when not 0/1 integers: 0.7 passes the 0.5 threshold."""
    pred = tmp_path / "pred.npy"
    np.save(pred, np.array([[0.7, 0.2, 0.0], [0.0, 0.0, 0.9]], np.float32))
    (tmp_path / "pred.codes.txt").write_text("401.9\n96.04\n364.11\n")
    (tmp_path / "pred.docs.txt").write_text("d1\nd2\n")
    code, out = evaluate(tmp_path, write(tmp_path / "gold.csv", GOLD), pred)
    assert code == 0
    assert flat(out) == {"tp": 2, "fp": 0, "fn": 1, "recall": 2 / 3}


# --- 2. Repeated keys in a JSON score file ----------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            '{"d1": {"401.9": 0.9}, "d2": {"364.11": 0.8}, "d1": {"96.04": 0.9}}',
            "document 'd1' appears more than once",
        ),
        (
            '{"d1": {"401.9": 0.9, "96.04": 0.7, "401.9": 0.1}}',
            "document 'd1' lists code '401.9' more than once",
        ),
    ],
)
def test_caml_scores_repeated_keys_are_refused(tmp_path, capsys, content, message):
    gold = write(tmp_path / "gold.csv", GOLD)
    code, out = evaluate(tmp_path, gold, write(tmp_path / "scores.json", content))
    assert_refused(capsys, code, out, "scores.json", message)


# --- 3. A UTF-8 byte-order mark is dropped everywhere -----------------------------------------

CAML_GOLD = (
    "SUBJECT_ID,HADM_ID,TEXT,LABELS\n"
    '1,d1,"a note, with a comma",401.9;96.04\n'
    "2,d2,another note,364.11\n"
)


@pytest.mark.parametrize(
    ("gold_name", "gold_text", "pred_name", "pred_text"),
    [
        ("test_full.csv", CAML_GOLD, "pred.csv", "doc_id,code\nd1,401.9\nd2,364.11\n"),
        ("gold.csv", GOLD, "preds_test.psv", "d1|401.9\nd2|364.11\n"),
        ("gold.csv", GOLD, "pred.csv", "doc_id,code\nd1,401.9\nd2,364.11\n"),
        ("gold.tsv", GOLD.replace(",", "\t"), "pred.csv", "doc_id,code\nd1,401.9\nd2,364.11\n"),
    ],
)
def test_byte_order_mark_changes_nothing(tmp_path, gold_name, gold_text, pred_name, pred_text):
    plain, marked = tmp_path / "plain", tmp_path / "marked"
    results = {}
    for folder, prefix in ((plain, b""), (marked, BOM)):
        folder.mkdir()
        gold = write(folder / gold_name, prefix + gold_text.encode())
        pred = write(folder / pred_name, prefix + pred_text.encode())
        code, out = evaluate(folder, gold, pred)
        assert code == 0
        results[folder] = pl.read_parquet(out / "metrics.parquet")
    # 2 of the 3 gold labels found, nothing wrong
    assert flat(marked / "out") == {"tp": 2, "fp": 0, "fn": 1, "recall": 2 / 3}
    assert results[plain].equals(results[marked])


def test_byte_order_mark_does_not_hide_a_caml_gold(tmp_path):
    path = write(tmp_path / "gold.csv", BOM + b"HADM_ID,SUBJECT_ID,TEXT,LABELS\nd1,1,x,401.9\n")
    assert caml.looks_like_gold(path, "gold")


# --- 4. A model that predicts nothing; a gold without labels ----------------------------------


def _empty_dense(tmp_path: Path) -> Path:
    path = tmp_path / "pred.npy"
    np.save(path, np.zeros((2, 3), np.int8))
    (tmp_path / "pred.codes.txt").write_text("401.9\n96.04\n364.11\n")
    (tmp_path / "pred.docs.txt").write_text("d1\nd2\n")
    return path


def _empty_parquet(tmp_path: Path) -> Path:
    path = tmp_path / "pred.parquet"
    pl.DataFrame(schema={"doc_id": pl.String, "code": pl.String}).write_parquet(path)
    return path


EMPTY_MODELS = {
    "header-only CSV": lambda t: write(t / "pred.csv", "doc_id,code\n"),
    "PSV of empty documents": lambda t: write(t / "preds_test.psv", "d1|\nd2|\n"),
    "PSV of bare ids": lambda t: write(t / "preds_test.psv", "d1\nd2\n"),
    "empty JSON": lambda t: write(t / "scores.json", "{}"),
    "JSON of empty documents": lambda t: write(t / "scores.json", '{"d1": {}, "d2": {}}'),
    "0-row Parquet": _empty_parquet,
    "all-zero dense matrix": _empty_dense,
}


@pytest.mark.parametrize("case", EMPTY_MODELS)
def test_a_model_that_predicts_nothing_misses_every_label(tmp_path, case):
    gold = write(tmp_path / "gold.csv", GOLD)
    code, out = evaluate(tmp_path, gold, EMPTY_MODELS[case](tmp_path))
    assert code == 0
    assert flat(out) == {"tp": 0, "fp": 0, "fn": 3, "recall": 0.0}


def test_a_gold_without_labels_is_refused(tmp_path, capsys):
    gold = write(tmp_path / "gold.csv", "doc_id,code\nd1,\nd2,\n")
    code, out = evaluate(tmp_path, gold, write(tmp_path / "pred.csv", "doc_id,code\nd1,401.9\n"))
    assert_refused(capsys, code, out, "the gold holds no labels", "gold.csv")


# --- 5. CAML's bare `hadm_id` line ------------------------------------------------------------


def test_caml_psv_bare_id_is_an_empty_document(tmp_path):
    pred = write(tmp_path / "preds_test.psv", "d1|401.9\nd2\n")
    code, out = evaluate(tmp_path, write(tmp_path / "gold.csv", GOLD), pred)
    assert code == 0
    assert flat(out) == {"tp": 1, "fp": 0, "fn": 2, "recall": 1 / 3}


def test_caml_psv_line_of_words_is_still_refused(tmp_path, capsys):
    pred = write(tmp_path / "preds_test.psv", "d1|401.9\njust some text\n")
    code, out = evaluate(tmp_path, write(tmp_path / "gold.csv", GOLD), pred)
    assert_refused(capsys, code, out, "preds_test.psv, line 2", "'just some text'")


# --- 6. Unreadable inputs ---------------------------------------------------------------------


_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_CAPBSET_DROP, _CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 24, 1, 2


def _drop_file_override() -> None:
    """In the child before exec: give up root's power to ignore file permissions."""
    for capability in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if _LIBC.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def run_cli_bound_by_permissions(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """Run the CLI in a process that file permissions bind.

    The tests run as root (here and in CI), and root reads any file. Switching to another user
    fails when the interpreter lives under root's private home, so root instead drops the
    capabilities that override permissions; any other user is bound already.
    """
    command = [sys.executable, "-c", "import sys; from hieval.cli import main; sys.exit(main())"]
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        cwd=folder,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(folder), "PYTHONPATH": str(REPO)},
        timeout=300,
        preexec_fn=_drop_file_override if os.geteuid() == 0 else None,
    )


@pytest.mark.parametrize(
    ("pred_name", "locked"),
    [("pred.csv", "pred.csv"), ("preds_test.psv", "preds_test.psv"), ("pred.npy", "codes.txt")],
)
def test_unreadable_file_is_named(tmp_path, pred_name, locked):
    gold = write(tmp_path / "gold.csv", GOLD)
    pred = tmp_path / pred_name
    if pred_name.endswith(".npy"):
        np.save(pred, np.ones((1, 1), np.int8))
        write(tmp_path / "pred.docs.txt", "d1\n")
        write(tmp_path / "codes.txt", "401.9\n")
        extra = ["--code-list", f"m={tmp_path / 'codes.txt'}"]
    else:
        write(pred, "doc_id,code\nd1,401.9\n")
        extra = []
    (tmp_path / locked).chmod(0o000)
    out = tmp_path / "out"
    result = run_cli_bound_by_permissions(
        tmp_path, "evaluate", "--gold", str(gold), "--pred", f"m={pred}", "--out", str(out), *extra
    )
    err = " ".join(result.stderr.split())
    assert result.returncode == 1, err
    assert f"cannot read {tmp_path / locked} (Permission denied)" in err
    assert "Traceback" not in err
    assert not any((out / name).exists() for name in OUTPUTS)


@pytest.mark.parametrize(
    ("pred_name", "content", "where"),
    [
        ("preds_test.psv", b"d1|401.9\nd2|364.11\xe9\n", "preds_test.psv, line 2"),
        ("pred.csv", b"doc_id,code\nd1,401.9\nd2,364.11\xe9\n", "pred.csv, line 3"),
        ("pred.tsv", b"doc_id\tcode\n\nd1\t401.9\xe9\n", "pred.tsv, line 3"),
    ],
)
def test_latin1_byte_is_named_not_utf8(tmp_path, capsys, pred_name, content, where):
    gold = write(tmp_path / "gold.csv", GOLD)
    code, out = evaluate(tmp_path, gold, write(tmp_path / pred_name, content))
    assert_refused(capsys, code, out, where, "byte 0xe9", "is not UTF-8")


def test_latin1_byte_in_caml_gold_labels_is_named(tmp_path, capsys):
    gold = write(
        tmp_path / "test_full.csv",
        b'SUBJECT_ID,HADM_ID,TEXT,LABELS\n1,d1,"two\nlines",401.9\n2,d2,y,364.11\xe9\n',
    )
    code, out = evaluate(tmp_path, gold, write(tmp_path / "pred.csv", "doc_id,code\nd1,401.9\n"))
    assert_refused(capsys, code, out, "test_full.csv, line 4", "byte 0xe9", "is not UTF-8")


def test_wide_gold_with_text_target_is_refused(tmp_path, capsys):
    path = tmp_path / "wide.parquet"
    table = {"_id": ["d1", "d2"], "target": ["401.9", "364.11"], "401.9": [0.9, 0.1]}
    pq.write_table(pa.table(table), path)
    code, out = evaluate(tmp_path, path, path)
    assert_refused(
        capsys, code, out, "wide.parquet: column `target` is VARCHAR, not a list of codes"
    )


def test_parquet_with_corrupt_pages_is_refused(tmp_path, capsys):
    path = tmp_path / "pred.parquet"
    n = 5000
    # distinct, incompressible ids so that the data pages are most of the file
    rng = np.random.default_rng(0)
    ids = [f"d{rng.integers(10**12)}" for _ in range(n)]
    frame = pa.table({"doc_id": ids, "code": ["401.9"] * n})
    pq.write_table(frame, path, compression="snappy")
    data = bytearray(path.read_bytes())
    start = len(data) // 4  # in the data pages; the footer with the schema is at the end
    data[start : start + 64] = bytes(range(64))
    path.write_bytes(bytes(data))
    assert pq.read_schema(path).names == ["doc_id", "code"]
    code, out = evaluate(tmp_path, write(tmp_path / "gold.csv", GOLD), path)
    assert_refused(capsys, code, out, "pred.parquet is not a readable Parquet file", "re-export")


def test_header_only_tree_is_refused(tmp_path, capsys):
    tree = write(tmp_path / "tree.csv", "child,parent\n")
    gold = write(tmp_path / "gold.csv", "doc_id,code\nd1,a\n")
    code, out = evaluate(tmp_path, gold, gold, "--hierarchy", str(tree))
    assert_refused(capsys, code, out, "tree.csv holds no edges")


# --- 7. Line numbers are physical lines -------------------------------------------------------


@pytest.mark.parametrize("separator", [",", "\t"])
def test_line_numbers_survive_blank_lines_and_multiline_fields(tmp_path, capsys, separator):
    rows = [
        "doc_id,code,comment",  # line 1
        'd1,401.9,"a comment',  # lines 2-3: one record
        'over two lines"',
        "",  # line 4, blank
        "d2,4O1.9,x",  # line 5: the bad code
        "",  # line 6, blank
        'd2,XYZ,"again',  # lines 7-9
        "",
        'three lines"',
        "d1,E99.99,x",  # line 10
    ]
    name = "pred.csv" if separator == "," else "pred.tsv"
    pred = write(tmp_path / name, "\n".join(r.replace(",", separator) for r in rows) + "\n")
    code, out = evaluate(tmp_path, write(tmp_path / "gold.csv", GOLD), pred)
    assert_refused(
        capsys,
        code,
        out,
        f"3 bad code(s) in {pred}",
        f"{name}, line 5: malformed code '4O1.9'",
        f"{name}, line 7: malformed code 'XYZ'",
        f"{name}, line 10: malformed code 'E99.99'",
    )


def test_caml_gold_line_numbers_count_note_lines(tmp_path, capsys):
    gold = write(
        tmp_path / "test_full.csv",
        "SUBJECT_ID,HADM_ID,TEXT,LABELS\n"  # line 1
        '1,d1,"admission note\n\nwith a blank line",401.9\n'  # lines 2-4
        "\n"  # line 5
        "2,d2,short,4O1.9\n",  # line 6
    )
    code, out = evaluate(tmp_path, gold, write(tmp_path / "pred.csv", "doc_id,code\nd1,401.9\n"))
    assert_refused(capsys, code, out, "test_full.csv, line 6: malformed code '4O1.9'")


def test_bad_score_names_its_physical_line(tmp_path, capsys):
    pred = write(tmp_path / "pred.csv", 'doc_id,code,score\n\n"d\n1",401.9,0.9\nd2,364.11,high\n')
    code, out = evaluate(tmp_path, write(tmp_path / "gold.csv", GOLD), pred)
    assert_refused(capsys, code, out, "pred.csv, line 5: score 'high' is not a finite number")


# --- 8. CSV reader errors keep their reason; long notes work ----------------------------------


def test_caml_gold_with_a_3mb_note_works(tmp_path):
    note = "the patient was admitted, " * 120_000  # 3.1 MB
    gold = write(
        tmp_path / "test_full.csv",
        f'SUBJECT_ID,HADM_ID,TEXT,LABELS\n1,d1,"{note}",401.9;96.04\n2,d2,short,364.11\n',
    )
    assert gold.stat().st_size > 3_000_000
    code, out = evaluate(tmp_path, gold, write(tmp_path / "pred.csv", "doc_id,code\nd1,96.04\n"))
    assert code == 0
    assert flat(out) == {"tp": 1, "fp": 0, "fn": 2, "recall": 1 / 3}


def test_5mb_long_format_field_is_refused_with_its_reason(tmp_path, capsys):
    pred = write(tmp_path / "pred.csv", "doc_id,code\nd1,401.9\nd2," + "x" * 5_000_000 + "\n")
    code, out = evaluate(tmp_path, write(tmp_path / "gold.csv", GOLD), pred)
    err = assert_refused(capsys, code, out, "pred.csv, line 3: the record is 5.0 MB", "2 MB")
    assert "xxxxxxxxxx" not in err  # the field itself is not echoed


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("doc_id,code\nd1,401.9\nd2,364.11,0.3,x\n", "line 3: the row has 4 fields"),
        ("doc_id,code\nd1,401.9\nd2\n", "line 3: the row has 1 fields"),
    ],
)
def test_ragged_rows_are_named(tmp_path, capsys, content, message):
    pred = write(tmp_path / "pred.csv", content)
    code, out = evaluate(tmp_path, write(tmp_path / "gold.csv", GOLD), pred)
    assert_refused(capsys, code, out, f"pred.csv, {message} but the header has 2")


# --- 9. A bad score names its document and code -----------------------------------------------


def test_wide_nan_score_names_document_and_code(tmp_path, capsys):
    path = tmp_path / "wide.parquet"
    table = {
        "_id": ["d1", "d2", "d3"],
        "target": [["401.9"], ["364.11"], []],
        "401.9": [0.9, 0.1, 0.2],
        "364.11": [0.1, 0.8, float("nan")],
    }
    pq.write_table(pa.table(table), path)
    code, out = evaluate(tmp_path, path, path)
    assert_refused(
        capsys,
        code,
        out,
        "wide.parquet, row 3: score 'nan' is not a finite number (document 'd3', code '364.11')",
    )


def test_dense_nan_score_names_document_and_code(tmp_path, capsys):
    pred = tmp_path / "pred.npy"
    np.save(pred, np.array([[0.7, 0.2, 0.0], [0.0, np.nan, 0.9]], np.float32))
    (tmp_path / "pred.codes.txt").write_text("401.9\n96.04\n364.11\n")
    (tmp_path / "pred.docs.txt").write_text("d1\nd2\n")
    code, out = evaluate(tmp_path, write(tmp_path / "gold.csv", GOLD), pred)
    assert_refused(
        capsys, code, out, "row 2 (document 'd2'), column 2 (code '96.04'): score 'nan' is not"
    )


# --- 10. CAML's LR files hold label indices ---------------------------------------------------


def test_label_indices_are_refused_with_a_hint(tmp_path, capsys):
    pred = write(tmp_path / "preds_test.psv", "d1|3|7\nd2|5\n")
    code, out = evaluate(tmp_path, write(tmp_path / "gold.csv", GOLD), pred)
    assert_refused(
        capsys,
        code,
        out,
        "preds_test.psv: its 3 distinct codes are all whole numbers, 3 to 7 (e.g. line 1: '3')",
        "map them through the model's label list first",
    )


def test_scores_json_record_is_read(tmp_path):
    """Sanity for the pairs-based JSON reader: scores still select by threshold."""
    scores = {"d1": {"401.9": 0.9, "96.04": 0.2}, "d2": {"364.11": 0.6}}
    pred = write(tmp_path / "scores.json", json.dumps(scores))
    code, out = evaluate(tmp_path, write(tmp_path / "gold.csv", GOLD), pred)
    assert code == 0
    assert flat(out) == {"tp": 2, "fp": 0, "fn": 1, "recall": 2 / 3}
