"""The history of a zoo evaluated on a schedule: one row per model and headline metric per
distinct evaluation, in ``results/history/evaluations.parquet`` (docs/history.md: its schema).

An evaluation is keyed (``key``) by the sha256 of the gold and of the model's input files, the
code system, the sha256 of the hierarchy's level table, a hash of the settings that change
numbers (the model's reading options and the run's metric settings) and hieval's version. A
row is appended only when its key is new, so a rerun on unchanged inputs adds nothing, and a
model whose threshold changed gets new rows while the others do not. Evaluations of one model
that may be compared over time share a ``series``: the same model name, gold, code system,
hierarchy and settings; only the model's inputs (a retrained model) and hieval's version may
differ. A model's history is shown within its series only, so an ICD-9 and an ICD-10
evaluation of a model of the same name are never one line.

Every configuration shares the file, and runs of several may end at once: a writer holds an
exclusive lock (``.evaluations.parquet.lock`` beside it) while it reads, adds and atomically
replaces the file, so no run's rows are lost. A history of the first schema (without code
system, hierarchy, series and intervals, :data:`SCHEMA_V1`) is read with those columns empty
and rewritten in the current schema by the next run that adds rows; its rows are kept, in no
series (their code system was not recorded). The file lives outside Snakemake's outputs on
purpose: it accumulates across runs, and a declared output would be deleted before each run.
For the same reason the workflow checks it (:func:`check_history`) before any job starts: a
damaged or foreign file, or one it cannot write, is refused while the previous report is
still there, since Snakemake deletes a job's outputs before it runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from hieval import paths
from hieval.atomic import write_parquet
from hieval.errors import InputError
from hieval.metrics.registry import BY_PAPER, paper_level

if TYPE_CHECKING:
    import numpy as np

#: The headline metrics kept per evaluation (paper names of the registry).
HISTORY_METRICS = ("F-flat", "F-set", "F-CoPHE", "ICM", "EB-F")
#: The first schema (hieval before the history kept code systems): still read, see above.
SCHEMA_V1 = {
    "timestamp": pl.String,
    "model": pl.String,
    "metric": pl.String,
    "value": pl.Float64,
    "gold_sha256": pl.String,
    "inputs_sha256": pl.String,
    "settings_sha256": pl.String,
    "hieval_version": pl.String,
    "key": pl.String,
}
#: The second schema (hieval before the history kept bootstrap replicates): still read.
SCHEMA_V2 = {
    **SCHEMA_V1,
    "code_system": pl.String,
    "hierarchy_sha256": pl.String,
    "series": pl.String,
    "low": pl.Float64,
    "high": pl.Float64,
    "confidence": pl.Float64,
}
#: The history's columns (docs/history.md says what each holds): the second schema's, and the
#: bootstrap's seed and the value's replicates (one per bootstrap replicate, in replicate
#: order), from which the next evaluation of the same gold gets the paired interval of its
#: change (:mod:`hieval.reports.changes`).
SCHEMA = {
    **SCHEMA_V2,
    "bootstrap_seed": pl.Int64,
    "replicates": pl.List(pl.Float64),
}
#: The columns of the headline replicates table the uncertainty stage writes
#: (:func:`replicate_table`) and :func:`history_rows` reads.
REPLICATE_SCHEMA = {
    "model": pl.String,
    "family": pl.String,
    "level": pl.String,
    "average": pl.String,
    "metric": pl.String,
    "bootstrap_seed": pl.Int64,
    "replicates": pl.List(pl.Float64),
}


def headline_rows() -> list[tuple[str, str, str, str]]:
    """The tidy rows (family, level, average, metric) of :data:`HISTORY_METRICS`."""
    return [
        (m.family, paper_level(m), m.average, m.metric)
        for m in (BY_PAPER[name] for name in HISTORY_METRICS)
    ]


def replicate_table(
    replicates: dict[str, np.ndarray], tidy: dict[str, pl.DataFrame], *, seed: int
) -> pl.DataFrame:
    """The headline rows' bootstrap replicates per model (``replicates``: replicates x the
    model's ``tidy`` rows, in their order), with the bootstrap's ``seed``: the few KB the
    history keeps of a bootstrap."""
    wanted = set(headline_rows())
    rows = []
    for model, matrix in replicates.items():
        keys = tidy[model].select("family", "level", "average", "metric").rows()
        for column, key in enumerate(keys):
            if key in wanted:
                rows.append((model, *key, seed, matrix[:, column].tolist()))
    return pl.DataFrame(rows, schema=REPLICATE_SCHEMA, orient="row")


def digest(value) -> str:
    """sha256 of a JSON-able value, keys sorted (so dict order never changes a key)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def history_rows(
    tidy: pl.DataFrame,
    *,
    records: list[dict],
    settings: dict,
    version: str,
    code_system: str,
    hierarchy_sha256: str,
    bootstrap: tuple[pl.DataFrame, float] | tuple[pl.DataFrame, float, pl.DataFrame] | None = None,
    timestamp: str | None = None,
) -> pl.DataFrame:
    """This run's rows: per model, its headline metrics, the evaluation's key and series, and
    the bootstrap interval of each value when the run has one (``bootstrap``: its intervals
    table and their confidence, and optionally :func:`replicate_table`'s table, whose
    replicates and seed are kept with each value).

    ``settings`` holds ``run`` (settings shared by every model) and ``models`` (each model's
    own reading options); ``records`` the input records (gold first, then the models).
    """
    by_name = {r["name"]: r for r in records}
    gold = by_name["gold"]["sha256"]
    when = timestamp or datetime.now(UTC).isoformat(timespec="seconds")
    values = _by_row(tidy, "value")
    intervals, confidence, replicates = (*bootstrap, None)[:3] if bootstrap else (None,) * 3
    lows = _by_row(intervals, "low") if intervals is not None else {}
    highs = _by_row(intervals, "high") if intervals is not None else {}
    seeds = _by_row(replicates, "bootstrap_seed") if replicates is not None else {}
    draws = _by_row(replicates, "replicates") if replicates is not None else {}
    rows = []
    for model in dict.fromkeys(tidy["model"].to_list()):
        record = by_name.get(model, {})
        inputs = record.get("sha256", "")
        settings_sha = digest(
            {"run": settings.get("run"), "model": settings.get("models", {}).get(model)}
        )
        key = digest([gold, inputs, settings_sha, version, code_system, hierarchy_sha256])
        series = digest([model, gold, code_system, hierarchy_sha256, settings_sha])
        for name in HISTORY_METRICS:
            metric = BY_PAPER[name]
            row = (model, metric.family, paper_level(metric), metric.average, metric.metric)
            if (value := values.get(row)) is None:
                continue
            low, high = lows.get(row), highs.get(row)
            level = confidence if low is not None and high is not None else None
            identity = (gold, inputs, settings_sha, version, key, code_system, hierarchy_sha256)
            drawn = (seeds.get(row), draws.get(row))
            rows.append((when, model, name, value, *identity, series, low, high, level, *drawn))
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


def _by_row(table: pl.DataFrame, column: str) -> dict[tuple, float]:
    """``column`` of a tidy-keyed table (intervals or metrics) by its row's identity."""
    return {
        (r["model"], r["family"], r["level"], r["average"], r["metric"]): r[column]
        for r in table.iter_rows(named=True)
    }


def upgraded(frame: pl.DataFrame) -> pl.DataFrame:
    """A history frame of an earlier schema in the current one: the new columns empty (the
    first schema's code system, hierarchy and intervals were not recorded, so its rows are in
    no series; the second's replicates were not kept, so its changes get the approximate
    interval)."""
    if dict(frame.schema) == SCHEMA:
        return frame
    return frame.with_columns(
        [pl.lit(None, dtype).alias(name) for name, dtype in SCHEMA.items() if name not in frame]
    ).select(list(SCHEMA))


def _unusable(path: Path, problem: str) -> InputError:
    return InputError(
        f"the history {path} {problem}; move it aside (mv {path} {path}.old) and rerun to start "
        "a new history (the old rows stay readable in the moved file if it is intact)"
    )


def read_history(path: str | Path) -> pl.DataFrame:
    """The history at ``path`` (empty when there is none yet), refused with one line naming the
    file and what to do when it is not a whole Parquet file with the history's columns: rows
    appended to a foreign table would be wrong, and a damaged file must not fail the report
    half-way."""
    path = Path(path)
    if not path.exists():
        return pl.DataFrame(schema=SCHEMA)
    if not path.is_file():  # a folder: Polars would read the Parquet files in it as one table
        raise _unusable(path, "is a folder, not a file")
    try:
        old = paths.read_parquet(path)
    # whatever a damaged file makes the reader raise (a Rust panic is no Exception)
    except (Exception, pl.exceptions.PanicException) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise _unusable(path, f"cannot be read as Parquet ({reason})") from None
    found = dict(old.schema)
    if found in (SCHEMA_V1, SCHEMA_V2):  # written by an earlier hieval: kept, in the current schema
        return upgraded(old)
    if found != SCHEMA:
        have = ", ".join(f"{name} {dtype}" for name, dtype in found.items())
        want = ", ".join(f"{name} {dtype}" for name, dtype in SCHEMA.items())
        raise _unusable(path, f"is not hieval's history (its columns: {have}; a history's: {want})")
    return old.select(list(SCHEMA))


def _cannot_write(path: Path, reason: str) -> InputError:
    return InputError(
        f"cannot write the history {path} ({reason}); make its folder writable, or move the "
        "results folder somewhere you can write, and rerun"
    )


def check_history(path: str | Path) -> None:
    """Refuse, before the workflow starts any job, a history the report job could not update:
    one :func:`read_history` refuses, or one in a folder this user cannot write (the job
    failing there would cost the previous report too)."""
    path = Path(path)
    read_history(path)
    folder = path.absolute().parent
    while not folder.exists():
        folder = folder.parent
    if not os.access(folder, os.W_OK | os.X_OK):
        raise _cannot_write(path, f"{folder} is not writable")


def lock_path(path: str | Path) -> Path:
    """The lock file writers of the history at ``path`` take turns on."""
    path = Path(path)
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold the history's lock (an exclusive ``flock``): another run's report job waits here
    until this one has replaced the file, then reads the grown file, so neither loses rows."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock_path(path), "a")  # noqa: SIM115 (held across the yield)
    except OSError as exc:
        raise _cannot_write(path, exc.strerror or str(exc)) from None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def append_history(path: str | Path, rows: pl.DataFrame) -> pl.DataFrame:
    """Add the rows whose key is new to the history at ``path`` (under its lock, so
    concurrent runs each add theirs); return the whole history."""
    path = Path(path)
    rows = upgraded(rows)
    with _locked(path):
        old = read_history(path)
        new = rows.filter(~pl.col("key").is_in(old["key"].implode()))
        history = pl.concat([old, new]) if new.height else old
        if new.height or not path.exists():
            try:
                write_parquet(history, path)
            except (OSError, pl.exceptions.PolarsError) as exc:
                reason = getattr(exc, "strerror", None) or (str(exc).splitlines() or ["?"])[0]
                raise _cannot_write(path, reason) from None
    return history
