"""Bad input, end to end through the CLI: a precise message (file, line or row, offending value,
what to do), a non-zero exit, and no result file that looks complete."""

from __future__ import annotations

import pytest

from hieval.cli import main

GOLD = "doc_id,code\nd1,401.9\nd1,96.04\nd2,364.11\n"
OUTPUTS = ("metrics.parquet", "metrics.csv", "summary.csv", "summary.md")


def run(tmp_path, gold_text, pred_text, pred_name="pred.csv", extra=()):
    gold = tmp_path / "gold.csv"
    gold.write_text(gold_text)
    pred = tmp_path / pred_name
    if isinstance(pred_text, bytes):
        pred.write_bytes(pred_text)
    elif pred_text is not None:
        pred.write_text(pred_text)
    out = tmp_path / "out"
    code = main(["evaluate", "--gold", str(gold), "--pred", f"m={pred}", "--out", str(out), *extra])
    return code, out


CASES = {
    "missing file": (GOLD, None, "pred.csv", (), ["pred.csv does not exist", "check the path"]),
    "empty file": (GOLD, "", "pred.csv", (), ["pred.csv is empty"]),
    "missing column": (
        GOLD,
        "doc_id,label\nd1,401.9\n",
        "pred.csv",
        (),
        ["lacks column(s) ['code']", "doc_id,code"],
    ),
    "duplicated header": (
        GOLD,
        "doc_id,code,code\nd1,401.9,96.04\n",
        "pred.csv",
        (),
        ["pred.csv, line 1", "'code' appears more than once"],
    ),
    "non-numeric score": (
        GOLD,
        "doc_id,code,score\nd1,401.9,0.9\nd2,364.11,high\n",
        "pred.csv",
        (),
        ["pred.csv, line 3", "score 'high' is not a finite number"],
    ),
    "NaN score": (
        GOLD,
        "doc_id,code,score\nd1,401.9,NaN\n",
        "pred.csv",
        (),
        ["pred.csv, line 2", "score 'NaN'"],
    ),
    "document not in gold": (
        GOLD,
        "doc_id,code\nd1,401.9\nd9,401.9\n",
        "pred.csv",
        (),
        ["not in the gold: 'd9'", "--unknown-docs drop"],
    ),
    "unknown code, error policy": (
        GOLD,
        "doc_id,code\nd1,401.99\n",
        "pred.csv",
        ("--unknown-codes", "error"),
        ["not in the hierarchy: '401.99'", "--unknown-codes place"],
    ),
    "malformed code": (
        GOLD,
        "doc_id,code\nd1,4O1.9\n",
        "pred.csv",
        (),
        ["pred.csv, line 2", "malformed code '4O1.9'"],
    ),
    "ambiguous undotted code": (
        GOLD,
        "doc_id,code\nd1,4019\n",
        "pred.csv",
        (),
        ["ambiguous undotted code '4019'", "code_type"],
    ),
    "numeric code column": (
        GOLD,
        None,
        "pred.parquet",
        (),
        ["is BIGINT, not text", "leading zeros"],
    ),
    "corrupt parquet": (
        GOLD,
        b"PAR1garbage",
        "pred.parquet",
        (),
        ["pred.parquet is not a readable Parquet file", "re-export"],
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_refused_cleanly(tmp_path, capsys, case):
    gold_text, pred_text, pred_name, extra, messages = CASES[case]
    if case == "numeric code column":
        import polars as pl

        pl.DataFrame({"doc_id": ["d1"], "code": [4019]}).write_parquet(tmp_path / pred_name)
    code, out = run(tmp_path, gold_text, pred_text, pred_name, extra)
    err = " ".join(capsys.readouterr().err.split())  # undo terminal wrapping
    assert code == 1
    for message in messages:
        assert message in err, f"{message!r} not in {err!r}"
    assert "Traceback" not in err
    for name in OUTPUTS:
        assert not (out / name).exists(), f"{name} left behind"
    assert not (out / "work/inputs/predictions/m.parquet").exists()


def test_threshold_outside_unit_interval(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run(tmp_path, GOLD, "doc_id,code,score\nd1,401.9,0.9\n", extra=("--threshold", "1.5"))
    assert exit_info.value.code == 2
    assert "threshold must be in [0, 1], got 1.5" in capsys.readouterr().err


def test_duplicates_warned_and_counted_once(tmp_path, capsys):
    code, out = run(tmp_path, GOLD, "doc_id,code\nd1,401.9\nd1,401.9\nd1, 401.9 \n")
    assert code == 0
    assert "2 duplicate (doc_id, code) rows counted once" in capsys.readouterr().err
    summary = (out / "summary.md").read_text()
    assert "2 duplicate rows counted once" in summary
    import polars as pl

    tidy = pl.read_parquet(out / "metrics.parquet")
    tp = tidy.filter(
        (pl.col("family") == "flat") & (pl.col("average") == "micro") & (pl.col("metric") == "tp")
    )["value"].item()
    assert tp == 1


@pytest.mark.parametrize(("policy", "expected_fp"), [("place", 1), ("drop", 0)])
def test_unknown_code_policies(tmp_path, capsys, policy, expected_fp):
    import polars as pl

    code, out = run(
        tmp_path, GOLD, "doc_id,code\nd1,401.9\nd1,401.99\n", extra=("--unknown-codes", policy)
    )
    assert code == 0
    assert "401.99" in " ".join(capsys.readouterr().err.split())
    tidy = pl.read_parquet(out / "metrics.parquet")
    fp = tidy.filter(
        (pl.col("family") == "flat") & (pl.col("average") == "micro") & (pl.col("metric") == "fp")
    )["value"].item()
    assert fp == expected_fp
    assert "401.99" in (out / "summary.md").read_text()
    if policy == "place":  # placed where its syntax says: under 401.9, 401, 401-405
        cophe_e1 = tidy.filter(
            (pl.col("family") == "cophe")
            & (pl.col("level") == "e1")
            & (pl.col("average") == "micro")
            & (pl.col("metric") == "fp")
        )
        assert cophe_e1["value"].item() == 1
