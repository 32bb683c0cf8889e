"""The matrix conventions (caml, edin) hold dense documents x label space matrices: beyond
MAX_DEFAULT_CELLS a default run leaves them out (said in the log and summary.md) instead of
exhausting the machine's memory; named by the user, they run at any size."""

from __future__ import annotations

import polars as pl

from hieval.cli import main
from hieval.conventions import table


def _zoo(folder):
    gold = pl.DataFrame(
        {"doc_id": ["a", "a", "b", "c"], "code": ["401.9", "428.0", "250.00", "584.9"]}
    )
    pred = pl.DataFrame(
        {"doc_id": ["a", "b", "c"], "code": ["401.9", "250.00", "599.0"], "score": [0.9, 0.8, 0.7]}
    )
    gold.write_csv(folder / "gold.csv")
    pred.write_csv(folder / "pred.csv")


def _run(folder, out, *extra):
    args = ["evaluate", "--gold", str(folder / "gold.csv"), "--pred", f"m={folder / 'pred.csv'}"]
    return main([*args, "--out", str(out), "--cache", str(folder / "cache"), *extra])


def test_default_run_leaves_large_matrix_conventions_out(tmp_path, monkeypatch, caplog):
    _zoo(tmp_path)
    monkeypatch.setattr(table, "MAX_DEFAULT_CELLS", 5)  # 3 documents x 5 codes = 15 cells
    assert _run(tmp_path, tmp_path / "out") == 0
    rows = pl.read_parquet(tmp_path / "out" / "conventions.parquet")
    assert set(rows["convention"]) == {"hieval"}
    assert "caml, edin, edin_mullenbach left out" in caplog.text
    assert (
        "left out: their dense matrices would hold 15 cells"
        in (tmp_path / "out" / "summary.md").read_text()
    )


def test_named_conventions_run_at_any_size(tmp_path, monkeypatch):
    _zoo(tmp_path)
    monkeypatch.setattr(table, "MAX_DEFAULT_CELLS", 5)
    assert _run(tmp_path, tmp_path / "out", "--conventions", "hieval", "caml") == 0
    rows = pl.read_parquet(tmp_path / "out" / "conventions.parquet")
    assert set(rows["convention"]) == {"hieval", "caml"}


def test_small_default_run_computes_every_convention(tmp_path):
    _zoo(tmp_path)
    assert _run(tmp_path, tmp_path / "out") == 0
    rows = pl.read_parquet(tmp_path / "out" / "conventions.parquet")
    assert set(rows["convention"]) == {"hieval", "caml", "edin", "edin_mullenbach"}
