"""Normalisation's DuckDB bound when ``engine.memory_limit`` is unset, and the advice when
DuckDB runs out of memory anyway."""

from __future__ import annotations

import re

import duckdb
import pytest

from hieval.pipeline import _memory_advice
from hieval.resources import (
    DEFAULT_DUCKDB_BYTES,
    Resources,
    default_duckdb_limit,
    duckdb_default_limit,
    parse_bytes,
)


def test_unset_limit_is_at_most_the_default_and_duckdb_takes_it():
    limit = Resources().duckdb_config()["memory_limit"]
    assert limit == default_duckdb_limit()
    assert parse_bytes(limit) <= DEFAULT_DUCKDB_BYTES
    assert parse_bytes(limit) <= parse_bytes(duckdb_default_limit().replace(" ", ""))
    with duckdb.connect(config=Resources().duckdb_config()) as con:
        applied = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    assert abs(parse_bytes(applied.replace(" ", "")) - parse_bytes(limit)) < 2**20


def test_a_small_slurm_allocation_lowers_the_default(monkeypatch):
    """DuckDB's own default follows a SLURM job's memory (80 % of it): a job given 1,000 MB is
    never handed 1.5 GiB."""
    monkeypatch.setenv("SLURM_MEM_PER_NODE", "1000")
    limit = parse_bytes(default_duckdb_limit())
    assert limit < 1000 * 2**20
    assert limit > 500 * 2**20


def test_an_explicit_limit_is_kept():
    assert Resources(memory_limit="3GB").duckdb_config()["memory_limit"] == "3GB"


def test_the_advice_never_suggests_less_than_the_limit_that_failed(tmp_path):
    small = tmp_path / "gold.csv"
    small.write_text("doc_id,code\nd1,401.9\n")
    for limit in (None, "4GB"):
        text = _memory_advice("gold", small, limit)
        suggested = int(re.search(r"to about (\d+)MB", text).group(1)) * 10**6
        current = parse_bytes(limit or default_duckdb_limit())
        assert suggested >= 2 * current, text
    assert "the default limit" in _memory_advice("gold", small, None)


def _slow_answer(monkeypatch) -> list[tuple]:
    """DuckDB's default replaced by a slow, cached stand-in that records each time it is asked."""
    import functools
    import time

    from hieval import resources

    asked: list[tuple] = []

    @functools.lru_cache(maxsize=8)
    def slow(slurm: tuple) -> str:
        asked.append(slurm)
        time.sleep(0.2)
        return "12.5 GiB"

    monkeypatch.setattr(resources, "_duckdb_default_limit", slow)
    return asked


def test_callers_at_once_ask_duckdb_once(monkeypatch):
    """The gold's and a model's normalisations start together: the second waits for the
    first's answer instead of opening a database of its own."""
    import threading

    asked = _slow_answer(monkeypatch)
    answers: list[str] = []
    threads = [threading.Thread(target=lambda: answers.append(duckdb_default_limit()))]
    threads.append(threading.Thread(target=lambda: answers.append(duckdb_default_limit())))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == ["12.5 GiB", "12.5 GiB"]
    assert len(asked) == 1


def test_the_prefetch_answers_later_callers(monkeypatch):
    from hieval.resources import prefetch_duckdb_limit

    asked = _slow_answer(monkeypatch)
    prefetch_duckdb_limit().join()
    assert len(asked) == 1
    assert duckdb_default_limit() == "12.5 GiB"
    assert len(asked) == 1  # answered from the prefetch


def test_a_failed_prefetch_is_quiet_and_left_to_the_caller(monkeypatch, capsys):
    from hieval import resources

    def fail(slurm: tuple) -> str:
        raise duckdb.IOException("no database")

    monkeypatch.setattr(resources, "_duckdb_default_limit", fail)
    resources.prefetch_duckdb_limit().join()
    assert capsys.readouterr().err == ""
    with pytest.raises(duckdb.IOException, match="no database"):
        duckdb_default_limit()  # the caller meets the failure
