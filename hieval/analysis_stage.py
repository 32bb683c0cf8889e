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
from hieval.metrics.uncertainty_settings import Settings

log = logging.getLogger(__name__)


def error_analysis(
    *,
    gold: str | Path,
    labels: dict[str, str | Path],
    levels_file: str | Path,
    ancestors: str | Path,
    max_level: str | None,
    errors_out: str | Path,
    confusions_out: dict[str, str | Path],
    codes_out: dict[str, str | Path],
    train_gold: str | Path | None = None,
    settings: Settings | None = None,
) -> None:
    """Error distance of every model (one table, models in ``labels`` order; with
    ``settings.bootstrap`` replicates, each share's interval), and each model's near-miss
    confusions and per-code table (with ``train_frequency`` given ``train_gold``)."""
    table = read_level_table(levels_file)
    system = codesystem.of_table(table)
    levels = evaluated_levels(table.levels, system.resolve_max_level(table.levels, max_level))
    truth = paths.read_parquet(gold, columns=["doc_id", "code"])
    guesses = {m: paths.read_parquet(p, columns=["doc_id", "code"]) for m, p in labels.items()}
    train = paths.read_parquet(train_gold, columns=["doc_id", "code"]) if train_gold else None
    every = [truth, *guesses.values(), *([] if train is None else [train])]
    codes = pl.concat([frame["code"] for frame in every])
    tree = tree_of(table, paths.read_parquet(ancestors), codes)
    distances = []
    for model, predicted in guesses.items():
        rows = error_rows(truth, predicted, tree)
        distances.append(error_distance(rows, tree, model=model, settings=settings))
        write_parquet(confusions(truth, predicted, tree), confusions_out[model])
        write_parquet(
            code_table(truth, predicted, tree, levels=levels, train_gold=train), codes_out[model]
        )
    write_parquet(pl.concat(distances), errors_out)
    log.info("error analysis of %d model(s): distances, confusions, per-code tables", len(labels))


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
