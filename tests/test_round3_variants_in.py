"""Issue 30, second reading: new variants of the input cases that broke after round three.

A matrix, a wide table and a CAML score file give each (document, code) one cell, so a repeat
that only shows once ids are trimmed and codes read (``V10.0`` beside ``v10.0``, a JSON document
`` 1`` beside ``1``, a wide table's ``_id`` on two rows) is two scores for one label: refused,
never merged by their maximum. Damaged ``.npz`` files are said to be damaged, not a traceback;
a blank JSON score is an empty score, as an empty cell is in every other format.
"""

from __future__ import annotations

import gzip
import io
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

from hieval.cli import main
from hieval.errors import InputError

GOLD = "doc_id,code\n1,401.9\n1,96.04\n2,364.11\n3,V10.0\n"
OUTPUTS = ("metrics.parquet", "metrics.csv", "summary.csv", "summary.md")


@pytest.fixture
def gold(tmp_path) -> Path:
    path = tmp_path / "gold.csv"
    path.write_text(GOLD)
    return path


def evaluate(tmp_path: Path, gold: Path, pred: Path, *extra: str) -> tuple[int, Path]:
    out = tmp_path / "out"
    code = main(["evaluate", "--gold", str(gold), "--pred", f"m={pred}", "--out", str(out), *extra])
    return code, out


def refused(capsys, code: int, out: Path, *messages: str) -> None:
    """Exit 1, the last line holds every message, no traceback, no result files."""
    err = capsys.readouterr().err
    assert code == 1, err
    assert "Traceback" not in err
    last = [line for line in err.splitlines() if line.strip()][-1]
    for message in messages:
        assert message in last, f"{message!r} not in {last!r}"
    for name in OUTPUTS:
        assert not (out / name).exists(), f"{name} left behind"


def dense(folder: Path, matrix, docs: list[str], codes: list[str], suffix: str = "npy") -> Path:
    path = folder / f"m.{suffix}"
    if suffix == "npz":
        np.savez_compressed(path, scores=np.asarray(matrix))
    else:
        np.save(path, np.asarray(matrix))
    (folder / "m.docs.txt").write_text("\n".join(docs) + "\n")
    (folder / "m.codes.txt").write_text("\n".join(codes) + "\n")
    return path


# --- One cell per (document, code): repeats after normalisation are refused ----------------------


@pytest.mark.parametrize("scored", [True, False], ids=["scores", "decisions"])
def test_dense_columns_that_read_as_one_code_are_refused(tmp_path, gold, capsys, scored):
    # No document has both columns set: the two columns still claim one code.
    matrix = [[0.9, 0.1], [0.2, 0.0], [0.0, 0.8]] if scored else [[1, 0], [0, 0], [0, 1]]
    pred = dense(tmp_path, matrix, ["1", "2", "3"], ["V10.0", "v10.0"])
    code, out = evaluate(tmp_path, gold, pred)
    refused(capsys, code, out, "m.npy: columns 'V10.0', 'v10.0' are all code 'V10.0'")


def test_a_dense_gold_with_two_columns_of_one_code_is_refused(tmp_path, capsys):
    gold = dense(tmp_path, [[1, 0], [0, 1]], ["1", "2"], ["V10.0", "v10.0"])
    pred = tmp_path / "pred.csv"
    pred.write_text("doc_id,code\n1,V10.0\n")
    code, out = evaluate(tmp_path, gold, pred)
    refused(capsys, code, out, "gold:", "columns 'V10.0', 'v10.0' are all code 'V10.0'")


def wide_table(ids, columns: dict) -> pa.Table:
    targets = [["401.9"]] * len(ids)
    return pa.table({"_id": ids, "target": targets, **columns})


@pytest.mark.parametrize("writer", ["parquet", "feather"])
@pytest.mark.parametrize("ids", [["1", "1", "3"], ["1", " 1", "3"], [1, 1, 3]])
def test_a_wide_table_with_a_document_on_two_rows_is_refused(tmp_path, gold, capsys, writer, ids):
    table = wide_table(ids, {"401.9": [0.9, 0.1, 0.2], "364.11": [0.1, 0.9, 0.8]})
    pred = tmp_path / f"wide.{writer}"
    (pq.write_table if writer == "parquet" else feather.write_feather)(table, pred)
    code, out = evaluate(tmp_path, gold, pred)
    refused(capsys, code, out, "rows 1 and 2: document '1' appears more than once")


def test_a_wide_gold_with_a_document_on_two_rows_is_refused(tmp_path, capsys):
    gold = tmp_path / "wide.parquet"
    pq.write_table(
        pa.table({"_id": ["1", "2", "1"], "target": [["401.9"], ["364.11"], ["96.04"]]}), gold
    )
    pred = tmp_path / "pred.csv"
    pred.write_text("doc_id,code\n1,401.9\n")
    code, out = evaluate(tmp_path, gold, pred, "--format", "gold=wide")
    refused(capsys, code, out, "rows 1 and 3: document '1' appears more than once")


def test_wide_score_columns_that_differ_in_case_are_refused_by_their_names(tmp_path, gold, capsys):
    pred = tmp_path / "wide.parquet"
    table = wide_table(["1", "2", "3"], {"V10.0": [0.9, 0.1, 0.2], "v10.0": [0.1, 0.9, 0.8]})
    pq.write_table(table, pred)
    code, out = evaluate(tmp_path, gold, pred)
    refused(capsys, code, out, "columns 'V10.0', 'v10.0' differ at most in case")


def test_wide_score_columns_that_read_as_one_code_are_refused(tmp_path, gold, capsys):
    pred = tmp_path / "wide.parquet"
    table = wide_table(["1", "2", "3"], {"401.9": [0.9, 0.1, 0.2], " 401.9": [0.1, 0.9, 0.8]})
    pq.write_table(table, pred)
    code, out = evaluate(tmp_path, gold, pred)
    refused(capsys, code, out, "document '1' has more than one score for code '401.9'")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            '{"1": {"V10.0": 0.9, "v10.0": 0.1}, "2": {"364.11": 0.8}}',
            "document '1' has more than one score for code 'V10.0' "
            "(codes written 'V10.0', 'v10.0')",
        ),
        (
            '{"1": {"401.9": 0.9, " 401.9": 0.1}}',
            "document '1' has more than one score for code '401.9'",
        ),
        (
            '{"1": {"401.9": 0.9}, "2": {"364.11": 0.8}, " 1": {"96.04": 0.7}}',
            "record 3: document '1' appears more than once (written '1', ' 1')",
        ),
    ],
    ids=["code-case", "code-space", "doc-space"],
)
def test_a_caml_score_file_repeat_after_normalisation_is_refused(
    tmp_path, gold, capsys, body, message
):
    pred = tmp_path / "scores.json"
    pred.write_text(body)
    code, out = evaluate(tmp_path, gold, pred)
    refused(capsys, code, out, message)


def test_long_files_still_count_a_repeat_once(tmp_path, gold):
    """A long file repeats a label (not a cell): counted once, as before."""
    pred = tmp_path / "pred.csv"
    pred.write_text("doc_id,code,score\n1,V10.0,0.9\n1,v10.0,0.1\n2,364.11,0.8\n")
    code, out = evaluate(tmp_path, gold, pred)
    assert code == 0
    assert (out / "summary.csv").exists()


# --- Damaged NumPy files are said to be damaged ----------------------------------------------


def _npz_bytes() -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, scores=np.linspace(0, 1, 60).reshape(3, 20))
    return buffer.getvalue()


@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_a_damaged_npz_is_refused_as_damaged(tmp_path, gold, capsys, damage):
    data = bytearray(_npz_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 3] ^= 0xFF  # inside the compressed member
    pred = dense(tmp_path, [[0.5]], ["1", "2", "3"], [f"401.{i}" for i in range(20)], "npz")
    pred.write_bytes(bytes(data))
    code, out = evaluate(tmp_path, gold, pred)
    refused(capsys, code, out, "m.npz is a truncated or damaged NumPy file")


def test_a_truncated_npy_is_refused_as_damaged(tmp_path, gold, capsys):
    pred = dense(tmp_path, np.full((3, 2), 0.5), ["1", "2", "3"], ["401.9", "364.11"])
    pred.write_bytes(pred.read_bytes()[:-8])
    code, out = evaluate(tmp_path, gold, pred)
    refused(capsys, code, out, "m.npy is a truncated or damaged NumPy file")


# --- Empty score cells: a blank JSON string is an empty score ---------------------------------


@pytest.mark.parametrize("score", ['""', '"   "', "null"])
def test_a_blank_json_score_is_an_empty_score(tmp_path, gold, capsys, score):
    pred = tmp_path / "scores.json"
    pred.write_text(f'{{"1": {{"401.9": 0.9}}, "2": {{"364.11": {score}}}}}')
    code, out = evaluate(tmp_path, gold, pred)
    refused(capsys, code, out, "scores.json, record 2: empty score (document '2'")


# --- Long values are cut in every message, the command line's own included -------------------

LONG = "x" * 3000


def _one_cut_line(err: str) -> str:
    last = [line for line in err.splitlines() if line.strip()][-1]
    assert "(3000 characters)" in last, last
    assert len(last) < 400, last
    return last


@pytest.mark.parametrize(
    "option",
    [
        ["--code-type", LONG],  # a type function of hieval's
        ["--unknown-codes", LONG],  # argparse's own "invalid choice"
        ["--code-format", LONG],
    ],
    ids=["code-type", "unknown-codes", "code-format"],
)
def test_a_long_refused_option_value_is_cut(tmp_path, gold, capsys, option):
    with pytest.raises(SystemExit) as stop:
        evaluate(tmp_path, gold, gold, *option)
    assert stop.value.code == 2
    _one_cut_line(capsys.readouterr().err)


def test_a_long_max_level_is_cut(tmp_path, gold, capsys):
    code, _out = evaluate(tmp_path, gold, gold, "--max-level", LONG)
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert "--max-level 'xxx" in _one_cut_line(err)


def test_a_model_name_too_long_for_a_file_name_is_refused_up_front(tmp_path, gold, capsys):
    """300 characters pass the name's pattern but not the file system (255 bytes a name)."""
    out = tmp_path / "out"
    with pytest.raises(SystemExit):
        main(["evaluate", "--gold", str(gold), "--pred", f"{'m' * 300}={gold}", "--out", str(out)])
    err = capsys.readouterr().err
    assert "is longer than 128 characters" in err
    assert "(300 characters)" in err
    assert not out.exists()


def test_the_model_sheet_refuses_a_name_too_long_for_a_file_name(tmp_path):
    from hieval.config import load_model_sheet

    sheet = tmp_path / "models.tsv"
    sheet.write_text(f"model\tpredictions\n{'m' * 300}\tp.csv\n")
    schema = Path(__file__).resolve().parents[1] / "workflow/schemas/models.schema.yaml"
    with pytest.raises(InputError, match=r"line 2, column 'model'.*longer than 128 characters"):
        load_model_sheet(sheet, schema)


# --- A per-file setting given twice with two values is refused, not "the last wins" ----------


@pytest.mark.parametrize(
    "options",
    [
        ["--code-type", "m=dx", "--code-type", "m=proc"],
        ["--code-type", "gold=dx", "--code-type", "gold=proc"],
        ["--format", "m=long", "--format", "m=caml_psv"],
    ],
    ids=["code-type", "gold-code-type", "format"],
)
def test_a_per_file_setting_given_twice_is_refused(tmp_path, gold, capsys, options):
    pred = tmp_path / "pred.csv"
    pred.write_text("doc_id,code\n1,4019\n")
    code, out = evaluate(tmp_path, gold, pred, *options)
    flag = options[0]
    refused(capsys, code, out, f"{flag} is given twice for {options[1].split('=')[0]}")


def test_the_same_per_file_setting_repeated_alike_is_accepted(tmp_path, gold):
    pred = tmp_path / "pred.csv"
    pred.write_text("doc_id,code\n1,4019\n")
    code, _out = evaluate(tmp_path, gold, pred, "--code-type", "m=dx", "--code-type", "m=dx")
    assert code == 0


def test_dev_predictions_given_twice_for_a_model_are_refused(tmp_path, gold, capsys):
    pred = tmp_path / "pred.csv"
    pred.write_text("doc_id,code,score\n1,401.9,0.9\n")
    dev_gold = tmp_path / "dev.csv"
    dev_gold.write_text("doc_id,code\n9,401.9\n")
    code, out = evaluate(
        tmp_path,
        gold,
        pred,
        *("--threshold", "tune", "--dev-gold", str(dev_gold)),
        *("--dev-pred", f"m={pred}", "--dev-pred", f"m={dev_gold}"),
    )
    refused(capsys, code, out, "--dev-pred given more than once for model(s): m")


# --- A user's tree file that cannot be read: one line, no reader's own advice ----------------


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"child,parent\na1,A\nb1,B,extra,more\n", "more fields"),
        (b'child,parent\n"a1,A\nb1,B\n', "could not parse"),
        (b"child," + b"p" * 3000 + b"\na1,A\n", "(3000 characters)"),
    ],
    ids=["ragged", "open-quote", "long-header"],
)
def test_an_unreadable_tree_file_is_one_line(tmp_path, gold, capsys, body, reason):
    tree = tmp_path / "tree.csv"
    tree.write_bytes(body)
    code, out = evaluate(tmp_path, gold, gold, "--hierarchy", str(tree))
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith("hieval: error:"), lines[-1]  # the message is the last line
    assert reason in lines[-1] and f"hierarchy file {tree}" in lines[-1]
    assert len(lines[-1]) < 400 and "truncate_ragged_lines" not in err
    assert not (out / "summary.csv").exists()


# --- MIMIC-IV tables: a missing column is named, an empty icd_code is refused ------------------


@pytest.mark.parametrize(
    ("name", "header", "missing"),
    [
        ("diagnoses_icd.csv.gz", "subject_id,hadm_id,seq_num,icd_code", "'icd_version' column"),
        ("diagnoses_icd.csv", "subject_id,hadm_id,seq_num,icd_version", "'icd_code' column"),
        ("diagnoses_icd.tsv", "subject_id\thadm_id\tseq_num\ticd_code", "'icd_version' column"),
    ],
    ids=["gzip", "no-icd_code", "tsv"],
)
def test_a_mimic_table_missing_a_column_is_named_as_one(tmp_path, capsys, name, header, missing):
    gold = tmp_path / name
    separator = "\t" if name.endswith(".tsv") else ","
    body = (header + "\n" + separator.join(["1", "100", "1", "4019"]) + "\n").encode()
    gold.write_bytes(gzip.compress(body) if name.endswith(".gz") else body)
    pred = tmp_path / "pred.csv"
    pred.write_text("doc_id,code\n100,401.9\n")
    code, out = evaluate(tmp_path, gold, pred)
    refused(capsys, code, out, "looks like a MIMIC-IV", f"without its {missing}")


def test_an_empty_icd_code_in_a_mimic_table_is_refused(tmp_path, capsys):
    """Every MIMIC-IV row is one code: an empty one is not an admission without codes (which
    would add an empty document to the gold)."""
    gold = tmp_path / "diagnoses_icd.csv"
    gold.write_text(
        "subject_id,hadm_id,seq_num,icd_code,icd_version\n1,100,1,4019,9\n1,101,1, ,9\n"
    )
    pred = tmp_path / "pred.csv"
    pred.write_text("doc_id,code\n100,401.9\n")
    code, out = evaluate(tmp_path, gold, pred, "--format", "gold=mimic4_icd9")
    refused(capsys, code, out, "diagnoses_icd.csv, row 2: empty icd_code")


# --- Hints in the entry point's syntax: codes that cannot be placed -------------------------


def test_an_unplaceable_icd9_code_hints_the_cli_flag(tmp_path, capsys):
    gold = tmp_path / "gold.csv"
    gold.write_text("doc_id,code\n1,401.9\n2,000.1\n")  # 000.1 falls in no ICD-9-CM chapter
    code, out = evaluate(tmp_path, gold, gold)
    refused(capsys, code, out, "'000.1'; set --unknown-codes drop or fix the codes")


@pytest.mark.parametrize(
    ("style", "hint"),
    [
        ("cli", "set --unknown-codes drop or --unknown-codes error"),
        ("workflow", "unknown_codes: drop"),
    ],
)
def test_codes_placed_in_the_wrong_system_hint_in_the_entry_points_syntax(icd9, style, hint):
    from hieval import hints
    from hieval.errors import CodeError
    from hieval.hierarchy.icd10 import placed_icd10_ancestors

    with hints.entry_point(style), pytest.raises(CodeError, match=re.escape(hint)):
        placed_icd10_ancestors(["A00.0"], icd9)


@pytest.mark.parametrize(
    ("style", "hint"),
    [("cli", "set --hierarchy icd10, or"), ("workflow", "set hierarchy.source: icd10, or")],
)
def test_codes_of_the_other_system_hint_in_the_entry_points_syntax(style, hint):
    from hieval import hints
    from hieval.codes.icd10 import system_mismatch_hint

    with hints.entry_point(style):
        assert hint in system_mismatch_hint(["A00.0", "I10", "S72.001A"], "icd9")


def test_a_scipy_sparse_npz_is_named_as_one(tmp_path, gold, capsys):
    """scipy.sparse.save_npz's layout (written here with NumPy alone): renaming an array to
    'scores', as the generic message advised, would not help."""
    pred = dense(tmp_path, [[0.5]], ["1", "2"], ["401.9"])
    pred = pred.with_suffix(".npz")
    np.savez(
        pred,
        data=np.array([0.9]),
        indices=np.array([0]),
        indptr=np.array([0, 1, 1]),
        format=np.array("csr"),
        shape=np.array([2, 1]),
    )
    code, out = evaluate(tmp_path, gold, pred)
    refused(capsys, code, out, "m.npz is a SciPy sparse matrix", "toarray()")


# --- A wide table's score column exported as text beside numeric ones ---------------------------


@pytest.mark.parametrize(
    ("cell", "message"),
    [(" ", "row 2: empty score (document '2', code '401.9')"), ("nan", "row 2: score 'nan'")],
    ids=["blank", "nan"],
)
def test_a_bad_text_score_in_a_wide_table_is_named(tmp_path, gold, capsys, cell, message):
    pred = tmp_path / "wide.parquet"
    columns = {"401.9": ["0.9", cell, "0.2"], "364.11": [0.1, 0.9, 0.8]}
    pq.write_table(wide_table(["1", "2", "3"], columns), pred)
    code, out = evaluate(tmp_path, gold, pred)
    refused(capsys, code, out, message)


def test_a_text_score_column_reads_as_its_numbers(tmp_path, gold):
    numeric = tmp_path / "numeric" / "wide.parquet"
    mixed = tmp_path / "mixed" / "wide.parquet"
    for path, first in ((numeric, [0.9, 0.4, 0.6]), (mixed, ["0.9", "0.4", "0.6"])):
        path.parent.mkdir()
        pq.write_table(
            wide_table(["1", "2", "3"], {"401.9": first, "364.11": [0.1, 0.9, 0.8]}), path
        )
    summaries = []
    for path in (numeric, mixed):
        code, out = evaluate(path.parent, gold, path)
        assert code == 0
        summaries.append((out / "summary.csv").read_text())
    assert summaries[0] == summaries[1]


# --- Paths the system cannot look up, and the model sheet's own limits ---------------------------


@pytest.mark.parametrize("role", ["gold", "pred"])
def test_an_input_whose_name_is_too_long_is_unreadable_not_a_failed_write(
    tmp_path, gold, capsys, role
):
    too_long = tmp_path / ("x" * 300 + ".csv")  # one name over 255 bytes
    args = (too_long, gold) if role == "gold" else (gold, too_long)
    code, out = evaluate(tmp_path, *args)
    refused(capsys, code, out, f"cannot read {too_long} (File name too long)")


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        ("p" * 200_000, "predictions 'ppp"),  # over the csv module's 128 kB field limit
        ("p" * 300 + ".csv", "is not a usable path (File name too long)"),
    ],
    ids=["200kB-cell", "long-name"],
)
def test_a_model_sheet_cell_the_system_cannot_use_is_named(tmp_path, cell, message):
    from hieval.config import load_model_sheet

    sheet = tmp_path / "models.tsv"
    sheet.write_text(f"model\tpredictions\nm\t{cell}\n")
    schema = Path(__file__).resolve().parents[1] / "workflow/schemas/models.schema.yaml"
    with pytest.raises(InputError, match=r"models.tsv, line 2") as refused_:
        load_model_sheet(sheet, schema)
    assert message in str(refused_.value) and len(str(refused_.value)) < 400


def test_wide_rows_without_an_id_are_empty_ids_not_a_repeated_document(tmp_path, gold, capsys):
    pred = tmp_path / "wide.parquet"
    pq.write_table(wide_table([None, None, "3"], {"401.9": [0.9, 0.1, 0.2]}), pred)
    code, out = evaluate(tmp_path, gold, pred)
    refused(capsys, code, out, "wide.parquet, row 1: empty doc_id")


def test_a_bad_code_of_a_matrix_is_placed_on_its_code_list_line(tmp_path, gold, capsys):
    """The fix is in the code list, so the message names its line (here after a blank line),
    not the first matrix row (a document) that holds the code."""
    pred = dense(tmp_path, [[0.9, 0.1], [0.2, 0.8], [0.3, 0.7]], ["1", "2", "3"], [])
    (tmp_path / "m.codes.txt").write_text("401.9\n\n4O1.9\n")
    code, out = evaluate(tmp_path, gold, pred)
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert f"{tmp_path / 'm.codes.txt'}, line 3: malformed code '4O1.9'" in err
    assert not (out / "summary.csv").exists()


@pytest.mark.parametrize(
    ("docs", "codes", "message"),
    [
        (
            ["1", "2"],
            ["401.9", "364.11"],
            "the document list {folder}/m.docs.txt holds 2 documents",
        ),
        (["1", "2", "3"], ["401.9"], "the code list {folder}/m.codes.txt holds 1 codes for its 2"),
    ],
    ids=["docs", "codes"],
)
def test_a_list_of_the_wrong_length_is_named(tmp_path, gold, capsys, docs, codes, message):
    pred = dense(tmp_path, [[0.9, 0.1], [0.2, 0.8], [0.3, 0.7]], docs, codes)
    code, out = evaluate(tmp_path, gold, pred)
    refused(capsys, code, out, message.format(folder=tmp_path))


def test_dev_predictions_outside_the_dev_gold_name_the_dev_gold(tmp_path, gold, capsys):
    pred = tmp_path / "pred.csv"
    pred.write_text("doc_id,code,score\n1,401.9,0.9\n")
    dev_gold = tmp_path / "dev.csv"
    dev_gold.write_text("doc_id,code\n9,401.9\n")
    dev_pred = tmp_path / "dev_pred.csv"
    dev_pred.write_text("doc_id,code,score\n9,401.9,0.9\n10,401.9,0.8\n")
    code, out = evaluate(
        tmp_path,
        gold,
        pred,
        *("--threshold", "tune", "--dev-gold", str(dev_gold), "--dev-pred", f"m={dev_pred}"),
    )
    refused(capsys, code, out, "m (dev): 1 document(s) in", "are not in the dev gold: '10'")
