"""The history of a zoo evaluated on a schedule: one row per model and headline metric per
distinct evaluation, in ``results/history/evaluations.parquet``.

An evaluation is keyed by the sha256 of the gold and of the model's input files, a hash of the
settings that change numbers (the model's reading options and the run's metric settings) and
hieval's version. A row is appended only when its key is new, so a rerun on unchanged inputs
adds nothing, and a model whose threshold changed gets new rows while the others do not. The
file lives outside Snakemake's outputs on purpose: it accumulates across runs, and a declared
output would be deleted before each run. For the same reason the workflow checks it
(:func:`check_history`) before any job starts: a damaged or foreign file, or one it cannot
write, is refused while the previous report is still there, since Snakemake deletes a job's
outputs before it runs.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from hieval import paths
from hieval.atomic import write_parquet
from hieval.errors import InputError
from hieval.metrics.registry import BY_PAPER, paper_level

#: The headline metrics kept per evaluation (paper names of the registry).
HISTORY_METRICS = ("F-flat", "F-set", "F-CoPHE", "ICM", "EB-F")
SCHEMA = {
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


def digest(value) -> str:
    """sha256 of a JSON-able value, keys sorted (so dict order never changes a key)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def history_rows(
    tidy: pl.DataFrame,
    *,
    records: list[dict],
    settings: dict,
    version: str,
    timestamp: str | None = None,
) -> pl.DataFrame:
    """This run's rows: per model, its headline metrics and the evaluation's key.

    ``settings`` holds ``run`` (settings shared by every model) and ``models`` (each model's
    own reading options); ``records`` the input records (gold first, then the models).
    """
    by_name = {r["name"]: r for r in records}
    gold = by_name["gold"]["sha256"]
    when = timestamp or datetime.now(UTC).isoformat(timespec="seconds")
    values = {
        (r["model"], r["family"], r["level"], r["average"], r["metric"]): r["value"]
        for r in tidy.iter_rows(named=True)
    }
    rows = []
    for model in dict.fromkeys(tidy["model"].to_list()):
        record = by_name.get(model, {})
        inputs = record.get("sha256", "")
        settings_sha = digest(
            {"run": settings.get("run"), "model": settings.get("models", {}).get(model)}
        )
        key = digest([gold, inputs, settings_sha, version])
        for name in HISTORY_METRICS:
            metric = BY_PAPER[name]
            value = values.get(
                (model, metric.family, paper_level(metric), metric.average, metric.metric)
            )
            if value is not None:
                rows.append((when, model, name, value, gold, inputs, settings_sha, version, key))
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


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


def append_history(path: str | Path, rows: pl.DataFrame) -> pl.DataFrame:
    """Add the rows whose key is new to the history at ``path``; return the whole history."""
    path = Path(path)
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
