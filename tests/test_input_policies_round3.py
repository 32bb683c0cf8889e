"""Issue 30, round three: hints in the entry point's own syntax, per-file code types, dev/test
overlap refused, and the warnings that numbers are not what they seem (partial coverage, a
threshold ignored, tuning that found no signal), logged and shown in the report."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from hieval import hints
from hieval.cli import main
from hieval.errors import HievalError, InputError
from hieval.inputs.policies import check_unknown_docs
from hieval.resources import Resources
from hieval.workflow_script import run_rule

GOLD = "doc_id,code\nd1,401.9\nd1,96.04\nd2,364.11\n"


def _evaluate(tmp_path: Path, gold: str, pred: str, *extra: str) -> tuple[int, Path]:
    (tmp_path / "gold.csv").write_text(gold)
    (tmp_path / "pred.csv").write_text(pred)
    out = tmp_path / "out"
    argv = ["evaluate", "--gold", str(tmp_path / "gold.csv"), "--pred"]
    argv += [f"m={tmp_path / 'pred.csv'}", "--out", str(out), "--bootstrap", "0", *extra]
    return main(argv), out


def _err(capsys) -> str:
    return " ".join(capsys.readouterr().err.split())  # undo terminal wrapping


# --- hints in the syntax of the entry point -------------------------------------------------


@pytest.mark.parametrize(
    ("pred", "extra", "cli_hint", "config_hint"),
    [
        ("doc_id,code\nd1,401.9\nd9,401.9\n", (), "--unknown-docs drop", "unknown_docs: drop"),
        (
            "doc_id,code\nd1,401.99\n",
            ("--unknown-codes", "error"),
            "--unknown-codes place",
            "unknown_codes: place",
        ),
        ("doc_id,code\nd1,4019\n", (), "--code-type", "code_type:"),
    ],
)
def test_cli_hints_name_the_cli_flag(tmp_path, capsys, pred, extra, cli_hint, config_hint):
    code, out = _evaluate(tmp_path, GOLD, pred, *extra)
    err = _err(capsys)
    assert code == 1 and "Traceback" not in err
    assert cli_hint in err
    assert config_hint not in err
    assert not (out / "metrics.parquet").exists()


def test_workflow_script_hints_name_the_config_key(caplog):
    def failing(_smk):
        check_unknown_docs(["d9"], policy="error", path=Path("p.csv"), name="m")

    smk = SimpleNamespace(rule="normalize_predictions", log=[])
    with caplog.at_level(logging.ERROR, logger="hieval"), pytest.raises(SystemExit):
        run_rule(smk, failing)
    assert "set unknown_docs: drop" in caplog.text
    assert "--unknown-docs" not in caplog.text


@pytest.mark.parametrize(
    ("style", "expected"),
    [
        (hints.CLI, "raise --memory-limit to 3GB or more"),
        (hints.WORKFLOW, "set shards: 2 (or more)"),
    ],
)
def test_memory_advice_offers_what_the_entry_point_has(style, expected):
    """The CLI has no shards: it is told to raise its memory limit instead."""
    resources = Resources(memory_limit="2GB", threads=2)
    with hints.entry_point(style), pytest.raises(HievalError) as info:
        resources.check_budget(100_000_000)
    assert expected in str(info.value)
    assert ("engine.memory_limit" in str(info.value)) == (style == hints.WORKFLOW)


@pytest.mark.parametrize(
    ("key", "value", "file", "cli", "workflow"),
    [
        ("code_type", "proc", "gold", "--code-type gold=proc", "gold_code_type: proc"),
        ("code_type", "dx", "dev_gold", "--code-type gold=dx", "gold_code_type: dx"),
        ("code_type", "dx", "m (dev)", "--code-type m=dx", "code_type dx in model m's row"),
        ("format", "long", "m", "--format m=long", "format long in model m's row"),
        (
            "allow_dev_test_overlap",
            True,
            None,
            "--allow-dev-test-overlap",
            "tuning.allow_dev_test_overlap: true",
        ),
    ],
)
def test_setting_renders_per_entry_point(key, value, file, cli, workflow):
    for style, expected in ((hints.CLI, cli), (hints.WORKFLOW, workflow)):
        with hints.entry_point(style):
            assert expected in hints.setting(key, value, file=file)


def test_entry_point_restores_the_previous_style():
    before = hints.style()
    with pytest.raises(InputError), hints.entry_point(hints.CLI):
        raise InputError("inside")
    assert hints.style() == before


# --- shared helpers for the runs below -------------------------------------------------------

CODES = ["401.9", "428.0", "250.00", "96.04"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One hierarchy cache for the module's CLI runs."""
    return tmp_path_factory.mktemp("cache")


def _write_gold(path: Path, docs: list[str]) -> Path:
    """Each document gets two codes (independent of the scores, so tuning has signal)."""
    rows = [f"{d},{CODES[i % 4]}\n{d},{CODES[(i + 1) % 4]}" for i, d in enumerate(docs)]
    path.write_text("doc_id,code\n" + "\n".join(rows) + "\n")
    return path


def _write_scores(path: Path, docs: list[str], codes: list[str] = CODES) -> Path:
    rows = [f"{d},{c},{(i * 7 + j * 3) % 10 / 10}" for i, d in enumerate(docs) for j, c in
            enumerate(codes)]  # fmt: skip
    path.write_text("doc_id,code,score\n" + "\n".join(rows) + "\n")
    return path


def _docs(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i:03d}" for i in range(n)]


def _run(tmp_path: Path, cache: Path, *argv: str) -> tuple[int, Path]:
    out = tmp_path / "out"
    code = main(["evaluate", "--out", str(out), "--cache", str(cache), "--bootstrap", "0", *argv])
    return code, out


# --- dev/test overlap ------------------------------------------------------------------------


def _tuning_args(tmp_path: Path, dev_docs: list[str]) -> list[str]:
    test_docs = _docs("t", 20)
    gold = _write_gold(tmp_path / "gold.csv", test_docs)
    dev_gold = _write_gold(tmp_path / "dev_gold.csv", dev_docs)
    return [
        "--gold", str(gold),
        "--pred", f"m={_write_scores(tmp_path / 'pred.csv', test_docs)}",
        "--dev-gold", str(dev_gold),
        "--dev-pred", f"m={_write_scores(tmp_path / 'dev.csv', dev_docs)}",
        "--threshold", "tune",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("dev_docs", "shared"),
    [
        (_docs("t", 20)[1:], 19),  # the test gold minus one document
        ([*_docs("t", 20), "extra"], 20),  # plus one
        ([*_docs("v", 30), "t007"], 1),  # a single shared document
    ],
)
def test_dev_gold_sharing_test_documents_is_refused(tmp_path, cache, capsys, dev_docs, shared):
    code, out = _run(tmp_path, cache, *_tuning_args(tmp_path, dev_docs))
    err = _err(capsys)
    assert code == 1 and "Traceback" not in err
    assert f"shares {shared} of its {len(set(dev_docs))} documents with the test gold" in err
    assert "t0" in err.split("shares", 1)[1]  # an example document is named
    assert "--allow-dev-test-overlap" in err and "tuning.allow" not in err
    assert not out.exists()


def test_overlap_allowed_explicitly_is_a_warning_in_the_report(tmp_path, cache, capsys):
    dev_docs = _docs("t", 20)[1:]
    argv = [*_tuning_args(tmp_path, dev_docs), "--allow-dev-test-overlap"]
    code, out = _run(tmp_path, cache, *argv)
    err = _err(capsys)
    assert code == 0, err
    expected = "shares 19 of its 19 documents with the test gold"
    assert err.count(expected) == 1  # logged once
    assert expected in " ".join((out / "summary.md").read_text().split())
    assert expected in (out / "report.html").read_text()


def test_dev_gold_without_test_documents_tunes_without_warning(tmp_path, cache, capsys):
    code, out = _run(tmp_path, cache, *_tuning_args(tmp_path, _docs("v", 30)))
    assert code == 0
    assert "warning" not in _err(capsys).lower()
    assert "warning" not in (out / "summary.md").read_text()


def test_workflow_config_takes_the_same_override():
    from hieval.config import tuning_options, validate_config

    schema = Path(__file__).resolve().parents[1] / "workflow/schemas/config.schema.yaml"
    base = {"gold": "g.csv", "models": "m.tsv"}
    assert tuning_options(validate_config(dict(base), schema))["allow_dev_test_overlap"] is False
    config = validate_config({**base, "tuning": {"allow_dev_test_overlap": True}}, schema)
    assert tuning_options(config)["allow_dev_test_overlap"] is True


# --- warnings: numbers that are not what they seem -------------------------------------------


def test_tuning_without_any_shared_code_warns(tmp_path, cache, capsys):
    test_docs, dev_docs = _docs("t", 20), _docs("v", 20)
    dev_gold = tmp_path / "dev_gold.csv"
    dev_gold.write_text("doc_id,code\n" + "".join(f"{d},401.9\n" for d in dev_docs))
    argv = [
        "--gold", str(_write_gold(tmp_path / "gold.csv", test_docs)),
        "--pred", f"m={_write_scores(tmp_path / 'pred.csv', test_docs)}",
        "--dev-gold", str(dev_gold),
        "--dev-pred", f"m={_write_scores(tmp_path / 'dev.csv', dev_docs, ['428.0'])}",
        "--threshold", "tune",
    ]  # fmt: skip
    code, out = _run(tmp_path, cache, *argv)
    err = _err(capsys)
    assert code == 0
    assert err.count("dev F1 is 0 at every threshold") == 1
    assert "dev F1 is 0 at every threshold" in " ".join((out / "summary.md").read_text().split())


@pytest.mark.parametrize(
    ("extra", "named"),
    [(("--threshold", "0.3"), "--threshold 0.3"), (("--top-k", "2"), "--top-k 2")],
)
def test_a_selection_on_predictions_without_scores_is_said_to_be_ignored(
    tmp_path, cache, capsys, extra, named
):
    docs = _docs("t", 5)
    hard = tmp_path / "hard.csv"
    hard.write_text("doc_id,code\n" + "".join(f"{d},401.9\n" for d in docs))
    argv = ["--gold", str(_write_gold(tmp_path / "gold.csv", docs)), "--pred", f"h={hard}"]
    code, out = _run(tmp_path, cache, *argv, *extra)
    err = _err(capsys)
    assert code == 0
    assert err.count(f"{named} ignored") == 1
    assert f"{named} ignored" in " ".join((out / "summary.md").read_text().split())


def test_a_selection_on_scored_predictions_is_not_warned_of(tmp_path, cache, capsys):
    docs = _docs("t", 5)
    argv = ["--gold", str(_write_gold(tmp_path / "gold.csv", docs))]
    argv += ["--pred", f"m={_write_scores(tmp_path / 'pred.csv', docs)}", "--threshold", "0.3"]
    code, _out = _run(tmp_path, cache, *argv)
    assert code == 0 and "ignored" not in _err(capsys)


@pytest.mark.parametrize("scored", [False, True])
@pytest.mark.parametrize(("gold_docs", "covered"), [(200, 198), (200, 197)])
def test_partial_coverage_of_the_gold_is_warned_of(
    tmp_path, cache, capsys, gold_docs, covered, scored
):
    """More than 1 % of the gold's documents without a row: warned, with the coverage."""
    docs = _docs("t", gold_docs)
    pred = tmp_path / "pred.csv"
    if scored:
        _write_scores(pred, docs[:covered])
    else:
        pred.write_text("doc_id,code\n" + "".join(f"{d},401.9\n" for d in docs[:covered]))
    argv = ["--gold", str(_write_gold(tmp_path / "gold.csv", docs)), "--pred", f"m={pred}"]
    code, out = _run(tmp_path, cache, *argv)
    err = _err(capsys)
    assert code == 0
    missing = gold_docs - covered
    expected = (
        f"model m has no predictions for {missing:,} of {gold_docs:,} gold documents "
        f"({100 * missing / gold_docs:.1f} %)"
    )
    warned = missing / gold_docs > 0.01
    assert (expected in err) is warned
    assert err.count(expected) == (1 if warned else 0)
    assert (expected in " ".join((out / "summary.md").read_text().split())) is warned


def test_coverage_warning_threshold_is_exact():
    from hieval.inputs.policies import coverage_warning

    assert coverage_warning("m", missing=1, gold=100) == []
    assert coverage_warning("m", missing=2, gold=100) != []
    assert coverage_warning("m", missing=1_643, gold=3_372) == [
        "model m has no predictions for 1,643 of 3,372 gold documents (48.7 %)"
    ]


# --- code types: the file's setting decides ambiguous undotted codes only ----------------------


def test_a_files_code_type_never_overrides_a_codes_own_form():
    from hieval.codes.icd9 import parse_code
    from hieval.codes.icd10 import normalize_icd10
    from hieval.errors import CodeError

    assert parse_code("401.9", default_type="proc").code == "401.9"  # dotted: a diagnosis
    assert parse_code("V10.05", default_type="proc").kind == "dx"
    assert parse_code("4019", code_format="undotted", default_type="proc").code == "40.19"
    assert parse_code("4019", code_format="undotted", default_type="dx").code == "401.9"
    assert parse_code("V1005", code_format="undotted", default_type="proc").code == "V10.05"
    with pytest.raises(CodeError):  # a row's own code_type column still has to agree
        parse_code("401.9", code_type="proc")
    assert normalize_icd10("E11.9", default_type="proc") == ("E11.9", "dx")
    assert normalize_icd10("0DTJ4ZZ", default_type="dx") == ("0DTJ4ZZ", "proc")


def _kinds_run(tmp_path, cache, gold_text, pred_text, *extra, hierarchy="package"):
    (tmp_path / "gold.csv").write_text(gold_text)
    (tmp_path / "pred.csv").write_text(pred_text)
    argv = ["--gold", str(tmp_path / "gold.csv"), "--pred", f"m={tmp_path / 'pred.csv'}"]
    return _run(tmp_path, cache, *argv, "--hierarchy", hierarchy, *extra)


def _codes(path: Path) -> list[str]:
    import polars as pl

    return sorted(pl.read_parquet(path)["code"].drop_nulls().to_list())


@pytest.mark.parametrize("flag", [("--code-type", "proc"), ("--code-type", "gold=proc")])
def test_code_type_proc_leaves_dotted_diagnoses_alone(tmp_path, cache, capsys, flag):
    gold = "doc_id,code\nd1,401.9\nd1,96.04\nd2,428.0\n"  # the fast reader
    pred = "doc_id,code,score\nd1,401.9,0.9\nd2,96.04,0.8\n"  # the DuckDB reader (scores)
    code, out = _kinds_run(tmp_path, cache, gold, pred, *flag)
    assert code == 0, _err(capsys)
    assert _codes(out / "work/inputs/gold.parquet") == ["401.9", "428.0", "96.04"]
    assert _codes(out / "work/inputs/predictions/m.parquet") == ["401.9", "96.04"]


def test_icd10_system_keeps_dotted_diagnoses_in_a_file_set_to_proc():
    """The ICD-10 code system (both readers call it) under a file's ``proc``: a dotted or
    short CM code stays a diagnosis; an undotted string valid as both is a procedure."""
    from hieval.codesystem import SYSTEMS

    icd10 = SYSTEMS["icd10"]
    for fmt in ("dotted", "undotted"):
        assert icd10.normalize("E11.9", None, fmt, default_type="proc") == ("E11.9", "dx")
        assert icd10.normalize("I10", None, fmt, default_type="proc") == ("I10", "dx")
    assert icd10.normalize("B200ZZZ", None, "undotted", default_type="proc")[1] == "proc"
    assert icd10.normalize("B200ZZZ", None, "undotted", default_type="dx")[1] == "dx"


def test_code_type_per_file(tmp_path, cache, capsys):
    """4019 is diagnosis 401.9 in the gold and procedure 40.19 in the model's file: one
    setting for every file, overridden for the gold by name."""
    gold, pred = "doc_id,code\nd1,4019\nd2,4280\n", "doc_id,code\nd1,4019\nd2,4280\n"
    code, out = _kinds_run(
        tmp_path, cache, gold, pred, "--code-type", "proc", "--code-type", "gold=dx"
    )
    assert code == 0, _err(capsys)
    assert _codes(out / "work/inputs/gold.parquet") == ["401.9", "428.0"]
    assert _codes(out / "work/inputs/predictions/m.parquet") == ["40.19", "42.80"]


def test_code_type_per_model_wins_over_every_file(tmp_path, cache, capsys):
    gold, pred = "doc_id,code\nd1,4019\n", "doc_id,code\nd1,4019\n"
    code, out = _kinds_run(
        tmp_path, cache, gold, pred, "--code-type", "dx", "--code-type", "m=proc"
    )
    assert code == 0, _err(capsys)
    assert _codes(out / "work/inputs/gold.parquet") == ["401.9"]
    assert _codes(out / "work/inputs/predictions/m.parquet") == ["40.19"]


def test_code_type_for_an_unknown_file_is_refused(tmp_path, cache, capsys):
    code, out = _kinds_run(tmp_path, cache, GOLD, GOLD, "--code-type", "nope=dx")
    err = _err(capsys)
    assert code == 1 and "--code-type NAME=...: no model 'nope'" in err
    assert "Traceback" not in err and not out.exists()


@pytest.mark.parametrize("value", ["gold=xx", "=dx", "cm"])
def test_code_type_syntax_is_checked(tmp_path, cache, capsys, value):
    with pytest.raises(SystemExit) as info:
        _kinds_run(tmp_path, cache, GOLD, GOLD, "--code-type", value)
    assert info.value.code == 2
    assert "NAME=dx|proc" in capsys.readouterr().err


def test_max_level_hint_names_the_cli_flag(tmp_path, cache, capsys):
    code, out = _kinds_run(tmp_path, cache, GOLD, GOLD, "--max-level", "d9")
    err = _err(capsys)
    assert code == 1 and "--max-level 'd9' is not a level" in err and not out.exists()


# --- lists that only a dense matrix reads ----------------------------------------------------


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])  # the DuckDB path and the fast path
@pytest.mark.parametrize(("flag", "name"), [("--code-list", "h"), ("--doc-list", "gold")])
def test_a_list_given_for_a_file_that_is_no_matrix_is_refused(
    tmp_path, cache, capsys, suffix, flag, name
):
    """A --code-list/--doc-list for a long file was ignored without a word (its path was not
    even opened); like a threshold on a model without scores, a setting that cannot apply is
    said, here refused: the user meant another file or another format."""
    import polars as pl

    docs = _docs("t", 5)
    hard = tmp_path / f"hard{suffix}"
    frame = pl.DataFrame({"doc_id": docs, "code": ["401.9"] * len(docs)})
    frame.write_csv(hard) if suffix == ".csv" else frame.write_parquet(hard)
    gold = _write_gold(tmp_path / "gold.csv", docs)
    argv = ["--gold", str(gold), "--pred", f"h={hard}", flag, f"{name}={tmp_path / 'list.txt'}"]
    code, out = _run(tmp_path, cache, *argv)
    err = _err(capsys)
    assert code == 1 and not out.exists()
    assert f"{flag} {name}=PATH applies to dense score matrices only" in err
    assert "is read as long" in err


def test_train_gold_matrix_is_read_with_its_own_lists(tmp_path, cache, capsys):
    """The train gold was read with the test gold's --code-list/--doc-list (the dev gold was
    not): a train matrix beside its own lists paired its rows with the test split's
    documents. Both read the gold's format and code options, never its lists."""
    import numpy as np
    import polars as pl

    codes = ["401.9", "250.00", "38.93"]
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "test_codes.txt").write_text("\n".join(codes) + "\n")
    (lists / "test_docs.txt").write_text("t1\nt2\n")
    np.save(tmp_path / "test.npy", np.array([[1, 0, 0], [0, 1, 1]], dtype=np.int8))
    (tmp_path / "train.codes.txt").write_text("\n".join(codes) + "\n")
    (tmp_path / "train.docs.txt").write_text("r1\nr2\nr3\n")
    np.save(tmp_path / "train.npy", np.array([[1, 0, 0], [1, 1, 0], [0, 0, 1]], dtype=np.int8))
    pred = tmp_path / "pred.csv"
    pred.write_text("doc_id,code\nt1,401.9\nt2,250.00\n")
    argv = [
        "--gold", str(tmp_path / "test.npy"),
        "--code-list", f"gold={lists / 'test_codes.txt'}",
        "--doc-list", f"gold={lists / 'test_docs.txt'}",
        "--train-gold", str(tmp_path / "train.npy"),
        "--pred", f"m={pred}",
    ]  # fmt: skip
    code, out = _run(tmp_path, cache, *argv)
    assert code == 0, _err(capsys)
    train = pl.read_parquet(out / "work" / "inputs" / "train_gold.parquet")
    assert sorted(set(train["doc_id"].to_list())) == ["r1", "r2", "r3"]
    assert train.height == 4
