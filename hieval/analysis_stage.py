"""The error-analysis stage (issue 34), composed once for the CLI, the API and the workflow:
it reads a run's normalised labels and hierarchy tables and writes ``errors.parquet``,
``confusions/{model}.parquet`` and ``codes/{model}.parquet``.

A stage of its own beside :mod:`hieval.pipeline` (same layer, same conventions: keyword paths as
the workflow's rule declares them), so that the analysis reads only finished inputs and no
count or metric changes with it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import polars as pl

from hieval import codesystem, paths
from hieval.analysis.confusions import confusions
from hieval.analysis.errors import error_distance, error_rows
from hieval.analysis.groups import MISSING, assignment, group_rows, headline_counts, read_doc_groups
from hieval.analysis.per_code import code_table
from hieval.analysis.tree import tree_of
from hieval.atomic import write_parquet
from hieval.engine.counts import evaluated_levels
from hieval.hierarchy.table import read_level_table
from hieval.inputs.counted import counted_statuses
from hieval.metrics.uncertainty.settings import Settings

log = logging.getLogger(__name__)


def model_error_analysis(
    *,
    model: str,
    gold: str | Path,
    labels: str | Path,
    levels_file: str | Path,
    ancestors: str | Path,
    max_level: str | None,
    distance_out: str | Path,
    confusions_out: str | Path,
    codes_out: str | Path,
    train_gold: str | Path | None = None,
    settings: Settings | None = None,
) -> None:
    """One model's error distance rows (with ``settings.bootstrap`` replicates, each share's
    interval), near-miss confusions and per-code table (with ``train_frequency`` given
    ``train_gold``): a job of its own per model, so a changed model reruns alone."""
    table = read_level_table(levels_file)
    system = codesystem.of_table(table)
    levels = evaluated_levels(table.levels, system.resolve_max_level(table.levels, max_level))
    truth = paths.read_parquet(gold, columns=["doc_id", "code"])
    predicted = paths.read_parquet(labels, columns=["doc_id", "code"])
    train = paths.read_parquet(train_gold, columns=["doc_id", "code"]) if train_gold else None
    every = [truth, predicted, *([] if train is None else [train])]
    codes = pl.concat([f["code"] for f in every])
    tree = tree_of(table, paths.read_parquet(ancestors), codes, counted_statuses(labels))
    rows = error_rows(truth, predicted, tree)
    write_parquet(error_distance(rows, tree, model=model, settings=settings), distance_out)
    write_parquet(confusions(truth, predicted, tree), confusions_out)
    write_parquet(code_table(truth, predicted, tree, levels=levels, train_gold=train), codes_out)
    log.info("%s: %d errors analysed", model, rows.height)


def gather_errors(parts: list[str | Path], errors_out: str | Path) -> None:
    """``errors.parquet``: the models' error distance rows, in the order given."""
    write_parquet(pl.concat([paths.read_parquet(p) for p in parts], how="diagonal"), errors_out)


def error_analysis(
    *,
    gold: str | Path,
    labels: dict[str, str | Path],
    levels_file: str | Path,
    ancestors: str | Path,
    max_level: str | None,
    work: str | Path,
    errors_out: str | Path,
    confusions_out: dict[str, str | Path],
    codes_out: dict[str, str | Path],
    train_gold: str | Path | None = None,
    settings: Settings | None = None,
) -> None:
    """Every model's :func:`model_error_analysis` (distance rows in ``work``), then
    :func:`gather_errors`: the workflow's jobs, in one process."""
    parts = []
    for model, path in labels.items():
        parts.append(Path(work) / f"{model}.parquet")
        model_error_analysis(
            model=model,
            gold=gold,
            labels=path,
            levels_file=levels_file,
            ancestors=ancestors,
            max_level=max_level,
            distance_out=parts[-1],
            confusions_out=confusions_out[model],
            codes_out=codes_out[model],
            train_gold=train_gold,
            settings=settings,
        )
    gather_errors(parts, errors_out)


def group_analysis(
    *,
    gold: str | Path,
    docs: dict[str, str | Path],
    doc_groups: str | Path,
    settings: Settings,
    groups_out: str | Path,
    gaps_out: str | Path,
) -> None:
    """Headline P/R/F1 of every model per group of every attribute of ``doc_groups``
    (:mod:`hieval.analysis.groups`), from each model's per-document count table ``docs``;
    with ``settings.bootstrap`` replicates, intervals, and the largest gap per attribute with
    its interval and permutation p-value."""
    table = read_doc_groups(doc_groups)
    doc_ids = paths.read_parquet(gold, columns=["doc_id"])["doc_id"].unique().sort()
    labels = assignment(doc_ids, table)
    unlisted = doc_ids.filter(~doc_ids.is_in(table["doc_id"].implode())).len()
    if unlisted:
        log.warning(
            "warning: %d of %d gold documents are not in doc_groups %s: they form the group %s",
            unlisted,
            doc_ids.len(),
            doc_groups,
            MISSING,
        )
    counts = {
        model: headline_counts(paths.read_parquet(path), doc_ids) for model, path in docs.items()
    }
    groups, gaps = group_rows(labels, counts, doc_ids, settings)
    write_parquet(groups, groups_out)
    write_parquet(gaps, gaps_out)
    log.info("%d group rows over %d attribute(s)", groups.height, table.width - 1)
