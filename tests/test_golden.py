"""Refactors change no number: the golden zoo (CLI: scored, tuned on a dev split, bootstrap
and permutation tests, training-frequency bands) and the workflow's demo write the same bytes
as the fixtures in tests/golden/ (see tests/golden_outputs.py for how they are made and when
to make them again)."""

from __future__ import annotations

from pathlib import Path

from golden_outputs import DEMO_FILES, GOLDEN, INPUTS, zoo_arguments, zoo_files
from helpers import small_demo_config, snakemake

from hieval.cli import main


def _same_bytes(files: list[str], run: Path, fixture: Path) -> list[str]:
    return [name for name in files if (run / name).read_bytes() != (fixture / name).read_bytes()]


def test_zoo_outputs_are_the_fixtures(tmp_path, monkeypatch):
    monkeypatch.chdir(INPUTS)
    out = tmp_path / "zoo"
    assert main(zoo_arguments(out, tmp_path / "cache")) == 0
    expected = sorted(
        str(p.relative_to(GOLDEN / "zoo")) for p in (GOLDEN / "zoo").rglob("*") if p.is_file()
    )
    assert zoo_files(out) == expected, "the run wrote other files than the fixture holds"
    assert len(expected) > 40
    assert _same_bytes(expected, out, GOLDEN / "zoo") == []


def test_demo_outputs_are_the_fixtures(tmp_path):
    small_demo_config(tmp_path)
    result = snakemake(tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert _same_bytes(list(DEMO_FILES), tmp_path, GOLDEN / "demo") == []
