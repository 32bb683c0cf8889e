"""DuckDB runs on the run's threads (``--threads``, ``engine.threads``), else on the cores this
process may use: its own default is the host's core count, which a job pinned to part of a node
(a SLURM allocation, ``taskset``) must not take."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from hieval import cli
from hieval.inputs import normalize
from hieval.resources import Resources


def _applied(config: dict[str, str]) -> int:
    with duckdb.connect(config=config) as con:
        return int(con.execute("SELECT current_setting('threads')").fetchone()[0])


def test_the_runs_threads_bound_duckdb():
    assert _applied(Resources(threads=1).duckdb_config()) == 1
    assert _applied(Resources(threads=3).duckdb_config()) == 3


def test_without_threads_duckdb_takes_the_cores_this_process_may_use(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0}, raising=False)
    assert _applied(Resources().duckdb_config()) == 1


@pytest.mark.parametrize("threads", ["1", "2"])
def test_the_cli_normalises_under_threads(tmp_path: Path, monkeypatch, threads):
    """A CSV takes the general path: the DuckDB connections that normalise it (those bounded
    by the run's resources: ``memory_limit`` set) run on ``--threads`` threads."""
    seen: list[int] = []
    connect = duckdb.connect

    def spy(*args, **kwargs):
        con = connect(*args, **kwargs)
        if "memory_limit" not in kwargs.get("config", {}):
            return con
        seen.append(int(con.execute("SELECT current_setting('threads')").fetchall()[0][0]))
        return con

    monkeypatch.setattr(normalize.duckdb, "connect", spy)
    gold, pred = tmp_path / "gold.csv", tmp_path / "pred.csv"
    gold.write_text("doc_id,code\nd1,401.9\nd2,250.00\nd2,428.0\n")
    pred.write_text("doc_id,code\nd1,401.9\nd2,250.01\n")
    argv = ["evaluate", "--gold", str(gold), "--pred", f"m={pred}", "--out", str(tmp_path / "out")]
    argv += ["--cache", str(tmp_path / "cache"), "--threads", threads]
    assert cli.main(argv) == 0
    assert seen, "the CSV files were not normalised by DuckDB"
    assert set(seen) == {int(threads)}
