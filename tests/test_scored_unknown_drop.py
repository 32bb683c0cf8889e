"""A scored long file with a code the hierarchy lacks, under ``unknown_codes: drop``.

DuckDB 2 refuses to register a table while a query's result is still open, and the scores'
step read the count of unknown documents with ``fetchone()`` just before registering the known
codes: every scored file evaluated with ``--unknown-codes drop`` crashed with a traceback.
Checked here against the same file with the unknown code's rows removed by hand, which must
give the same metrics (dropping a code is removing its rows)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from hieval.cli import main

GOLD = "doc_id,code\n1,401.9\n2,250.00\n2,401.9\n3,428.0\n"
SCORED = [
    ("1", "401.9", 0.9),
    ("1", "250.00", 0.2),
    ("1", "999.99", 0.7),  # not an ICD-9-CM code of the package hierarchy
    ("2", "250.00", 0.8),
    ("2", "401.9", 0.6),
    ("2", "999.99", 0.4),
    ("3", "428.0", 0.3),
    ("3", "401.9", 0.55),
]


def _write(path: Path, rows) -> Path:
    lines = ["doc_id,code,score", *(f"{d},{c},{s}" for d, c, s in rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_scored_file_with_unknown_code_dropped(tmp_path: Path, suffix: str) -> None:
    gold = tmp_path / "gold.csv"
    gold.write_text(GOLD)
    with_unknown = _write(tmp_path / "with.csv", SCORED)
    without = _write(tmp_path / "without.csv", [r for r in SCORED if r[1] != "999.99"])
    if suffix == ".parquet":
        for path in (with_unknown, without):
            pl.read_csv(
                path, schema_overrides={"doc_id": pl.String, "code": pl.String}
            ).write_parquet(path.with_suffix(".parquet"))
        with_unknown, without = (p.with_suffix(".parquet") for p in (with_unknown, without))
    outs = {}
    for name, path in (("with", with_unknown), ("without", without)):
        out = tmp_path / f"out_{name}"
        args = ["evaluate", "--gold", str(gold), "--pred", f"m={path}", "--out", str(out)]
        assert main([*args, "--unknown-codes", "drop", "--permutations", "0"]) == 0
        outs[name] = pl.read_parquet(out / "metrics.parquet")
    assert outs["with"].equals(outs["without"])
    ranking = outs["with"].filter(pl.col("family") == "ranking")
    assert ranking.height > 0  # the scores were kept and ranked
