"""The gold normalised beside the predictions (hieval.pending_file, hieval evaluate): nothing reads
the gold before it is written, the numbers are those of the sequential run, the gold's own error
is the one reported, and the overlap happens only where memory allows it."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import polars as pl
import pytest

from hieval import cli, run
from hieval.pending_file import PendingFile
from hieval.resources import Resources


def test_a_pending_file_is_its_path_only_once_written(tmp_path):
    written: Future = Future()
    pending = PendingFile(tmp_path / "gold.parquet", written)
    seen: list[tuple[str, float]] = []

    def reader():
        seen.append((os.fspath(pending), time.monotonic()))

    thread = threading.Thread(target=reader)
    thread.start()
    time.sleep(0.2)
    assert seen == []  # still waiting for the writer
    done = time.monotonic()
    written.set_result(None)
    thread.join(5)
    assert seen[0][0] == str(tmp_path / "gold.parquet") and seen[0][1] >= done
    assert str(pending) == str(tmp_path / "gold.parquet")
    assert Path(pending) == tmp_path / "gold.parquet"


def test_a_pending_file_raises_its_writers_error(tmp_path):
    written: Future = Future()
    written.set_exception(ValueError("the gold is broken"))
    pending = PendingFile(tmp_path / "gold.parquet", written)
    with pytest.raises(ValueError, match="the gold is broken"):
        os.fspath(pending)
    with pytest.raises(ValueError, match="the gold is broken"):
        str(pending)


GOLD = [("a", "364.11"), ("a", "364.24"), ("a", "364.9"), ("b", "401.9"), ("b", "250.00")]
PRED = [("a", "364.11"), ("a", "364.21"), ("a", "364.3"), ("b", "401.9"), ("b", "428.0")]


def labels(path: Path, rows: list[tuple[str, str]]) -> Path:
    pl.DataFrame(rows, schema=["doc_id", "code"], orient="row").write_parquet(path)
    return path


@pytest.fixture
def overlap(monkeypatch):
    """Records whether each evaluate normalised the gold beside the predictions."""
    taken: list[bool] = []
    real = run._gold_beside_predictions

    def spy(*args, **kwargs):
        taken.append(real(*args, **kwargs))
        return taken[-1]

    monkeypatch.setattr(run, "_gold_beside_predictions", spy)
    return taken


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One hierarchy cache for the module's runs: the first builds the ICD-9 tables."""
    return tmp_path_factory.mktemp("cache")


def evaluate(tmp_path: Path, cache: Path, gold: Path, pred: Path, out: str, *extra: str) -> int:
    return cli.main(
        [
            "evaluate",
            "--gold",
            str(gold),
            "--pred",
            f"m={pred}",
            "--out",
            str(tmp_path / out),
            "--cache",
            str(cache),
            *extra,
        ]
    )


def test_the_overlapped_run_gives_the_sequential_runs_outputs(tmp_path, overlap, cache):
    gold = labels(tmp_path / "gold.parquet", GOLD)
    pred = labels(tmp_path / "pred.parquet", PRED)
    assert evaluate(tmp_path, cache, gold, pred, "both", "--threads", "2") == 0
    assert evaluate(tmp_path, cache, gold, pred, "one", "--threads", "1") == 0
    assert overlap == [True, False]
    for name in (
        "metrics.parquet",
        "work/inputs/gold.parquet",
        "work/inputs/predictions/m.parquet",
    ):
        both, one = (pl.read_parquet(tmp_path / run / name) for run in ("both", "one"))
        assert both.equals(one), name
    for name in ("work/inputs/gold.json", "work/inputs/predictions/m.json", "tables.md"):
        both, one = ((tmp_path / run / name).read_text() for run in ("both", "one"))
        assert both.replace("both", "one") == one, name
    tidy = pl.read_parquet(tmp_path / "both" / "metrics.parquet")
    leaf = tidy.filter(
        (pl.col("family") == "flat") & (pl.col("level") == "leaf") & (pl.col("average") == "micro")
    )
    assert dict(zip(leaf["metric"], leaf["value"], strict=True))["tp"] == 2  # 364.11, 401.9


def test_the_golds_error_is_reported_when_both_files_are_bad(tmp_path, overlap, cache, capsys):
    gold = labels(tmp_path / "gold.parquet", [*GOLD, ("c", "999.99")])  # a code ICD-9 lacks
    # The predictions fail first (their bad code is found before the gold is needed).
    pred = labels(tmp_path / "pred.parquet", [*PRED, ("a", "999.98")])
    strict = ("--unknown-codes", "error", "--unknown-docs", "error")
    code = evaluate(tmp_path, cache, gold, pred, "out", "--threads", "2", *strict)
    assert overlap == [True]
    err = capsys.readouterr().err
    assert code == 1
    assert "gold: 1 code(s) in" in err and "999.99" in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_bad_prediction_file_is_reported_after_a_good_gold(tmp_path, overlap, cache, capsys):
    gold = labels(tmp_path / "gold.parquet", GOLD)
    pred = labels(tmp_path / "pred.parquet", [*PRED, ("z", "401.9")])
    code = evaluate(tmp_path, cache, gold, pred, "out", "--threads", "2", "--unknown-docs", "error")
    assert overlap == [True]
    err = capsys.readouterr().err
    assert code == 1
    assert "m:" in err and "'z'" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_overlap_needs_two_threads_and_no_more_memory_than_the_count_job():
    small, large = 10_800_000, 108_000_000  # 100x and 1000x MIMIC-III, gold and predictions
    plan = {rows: 400 * 2**20 + 40 * rows for rows in (small, large)}  # parquet_fast's plan
    assert Resources(threads=2).allows_overlap(plan[small], labels=small)
    assert not Resources(threads=1).allows_overlap(plan[small], labels=small)
    assert not Resources(threads=2).allows_overlap(plan[large], labels=large)
    assert not Resources(threads=2, memory_limit="700MB").allows_overlap(plan[small], labels=small)


def test_files_of_other_kinds_are_normalised_one_after_the_other(tmp_path, overlap, cache):
    gold = tmp_path / "gold.csv"
    gold.write_text("doc_id,code\n" + "".join(f"{d},{c}\n" for d, c in GOLD))
    pred = labels(tmp_path / "pred.parquet", PRED)
    assert evaluate(tmp_path, cache, gold, pred, "out", "--threads", "2") == 0
    scored = tmp_path / "scored.parquet"
    pl.DataFrame(
        [(d, c, 0.9) for d, c in PRED], schema=["doc_id", "code", "score"], orient="row"
    ).write_parquet(scored)
    gold = labels(tmp_path / "g.parquet", GOLD)
    assert evaluate(tmp_path, cache, gold, scored, "s", "--threads", "2") == 0
    assert overlap == [False, False]


class Timeline:
    """When each file's normalisation ran, and when DuckDB started reading each file; with the
    test gold's write slowed (not the dev gold's), so that whatever waits for it visibly
    waits."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, gold_delay: float = 0.0):
        from hieval.inputs import normalize as inputs
        from hieval.inputs import parquet_fast

        self.spans: dict[str, tuple[float, float]] = {}
        self.duckdb: dict[str, float] = {}
        real_labels, real_write, real_open = (
            inputs.normalize_labels,
            parquet_fast._write,
            inputs.open_source,
        )

        def normalize_labels(path, **kwargs):
            start = time.monotonic()
            try:
                return real_labels(path, **kwargs)
            finally:
                self.spans[kwargs["name"]] = (start, time.monotonic())

        def write(keys, docs, codes, out, **kwargs):
            if Path(out).name.startswith(".gold.") and Path(out).parent.name == "inputs":
                time.sleep(gold_delay)
            return real_write(keys, docs, codes, out, **kwargs)

        def open_source(con, path, name, *args, **kwargs):
            self.duckdb[name] = time.monotonic()
            return real_open(con, path, name, *args, **kwargs)

        monkeypatch.setattr(inputs, "normalize_labels", normalize_labels)
        monkeypatch.setattr(parquet_fast, "_write", write)
        monkeypatch.setattr(inputs, "open_source", open_source)


def test_a_gold_the_fast_path_declines_is_read_before_the_predictions(
    tmp_path, overlap, cache, monkeypatch
):
    timeline = Timeline(monkeypatch)
    gold = labels(tmp_path / "gold.parquet", [(" a", "364.11"), *GOLD])  # trimmed by DuckDB
    pred = labels(tmp_path / "pred.parquet", PRED)
    assert evaluate(tmp_path, cache, gold, pred, "out", "--threads", "2") == 0
    assert overlap == [True]  # planned beside, but the gold went to DuckDB: read alone
    assert "gold" in timeline.duckdb
    assert timeline.spans["m"][0] >= timeline.spans["gold"][1]


def test_predictions_the_fast_path_declines_wait_for_the_gold(
    tmp_path, overlap, cache, monkeypatch
):
    timeline = Timeline(monkeypatch, gold_delay=0.4)
    gold = labels(tmp_path / "gold.parquet", GOLD)
    pred = labels(tmp_path / "pred.parquet", [("a", "364.11 "), *PRED])  # trimmed by DuckDB
    assert evaluate(tmp_path, cache, gold, pred, "out", "--threads", "2") == 0
    assert overlap == [True]
    assert timeline.spans["m"][0] < timeline.spans["gold"][1]  # started beside the gold
    assert timeline.duckdb["m"] >= timeline.spans["gold"][1]  # but DuckDB read it after


def test_tuning_waits_for_a_gold_being_written(tmp_path, overlap, cache, monkeypatch):
    # Tuning reads the gold's record first: slowed well past the dev files' normalisation.
    Timeline(monkeypatch, gold_delay=1.0)
    gold = labels(tmp_path / "gold.parquet", GOLD)
    hard = labels(tmp_path / "hard.parquet", PRED)
    scored = [(d, c, 0.9) for d, c in PRED] + [("a", "401.9", 0.2)]
    frame = pl.DataFrame(scored, schema=["doc_id", "code", "score"], orient="row")
    frame.write_parquet(tmp_path / "scored.parquet")
    dev = frame.with_columns(("dev_" + pl.col("doc_id")).alias("doc_id"))  # a validation split
    dev.write_parquet(tmp_path / "dev.parquet")
    dev_gold = labels(tmp_path / "dev_gold.parquet", [(f"dev_{d}", c) for d, c in GOLD])
    code = cli.main(
        ["evaluate", "--gold", str(gold), "--pred", f"m={hard}",
         "--pred", f"t={tmp_path / 'scored.parquet'}", "--threshold", "tune",
         "--dev-gold", str(dev_gold), "--dev-pred", f"t={tmp_path / 'dev.parquet'}",
         "--out", str(tmp_path / "out"), "--cache", str(cache), "--threads", "2"]
    )  # fmt: skip
    assert code == 0
    assert overlap == [True]
    assert (tmp_path / "out" / "thresholds" / "t.json").exists()
