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
from hieval.input_policies import check_unknown_docs
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
        ("allow_test_overlap", True, None, "--allow-dev-test-overlap", "allow_test_overlap: true"),
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
