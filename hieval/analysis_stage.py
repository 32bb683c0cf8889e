"""The error-analysis stage (issue 34), composed once for the CLI, the API and the workflow:
it reads a run's normalised labels and hierarchy tables and writes ``errors.parquet``,
``confusions/{model}.parquet`` and ``codes/{model}.parquet``.

A stage of its own beside :mod:`hieval.pipeline` (same layer, same conventions: keyword paths as
the workflow's rule declares them), so that the analysis reads only finished inputs and no
count or metric changes with it.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from hieval import codesystem, paths
from hieval.analysis.confusions import confusion_table
from hieval.analysis.errors import ModelErrors, error_distance, errors_of, model_errors
from hieval.analysis.groups import (
    MISSING,
    GroupIcm,
    assignment,
    group_icm,
    group_rows,
    headline_counts,
    icm_recount,
    read_doc_groups,
)
from hieval.analysis.parts import ErrorPart, error_part, joined_rows
from hieval.analysis.per_code import code_table, node_counts
from hieval.analysis.tree import Tree, tree_of
from hieval.atomic import write_parquet
from hieval.codesystem import placed_codes
from hieval.engine.counts import evaluated_levels
from hieval.engine.driver import evaluate as count_labels
from hieval.engine.icm import IcmParams
from hieval.engine.keys import Labels
from hieval.hierarchy.table import read_level_table
from hieval.inputs.counted import counted_codes, counted_statuses
from hieval.metrics.uncertainty.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Encoded:
    """A model's gold and predicted labels as its count encoded them (:func:`hieval.pipeline.
    count_model`'s ``on_encoded``), and the distinct codes the encoder read (those the code
    space was built for, as it hands them to :func:`~hieval.analysis.errors.model_errors`'
    tree). Why: the error analysis finds the errors in these keys instead of reading and
    encoding the labels a second time beside the count (:func:`errors_of`: any code space of
    the hierarchy that places the codes serves)."""

    labels: Labels
    codes: pl.Series


#: A model's :class:`Encoded` labels once its count has encoded them (the call waits until
#: then); None: the count did not hand them on, and the analysis reads the labels itself.
PendingEncoding = Callable[[], Encoded | None]


class Encodings:
    """Each model's labels as its count encoded them, handed to the error analysis running
    beside the counts (:func:`error_analysis`' ``encoded``).

    At most one waits to be taken: a count that finds the analysis behind (an earlier model's
    labels not taken yet) hands none, and the analysis reads that model's files as it always
    could, so a zoo's keys are never all held at once; each is let go once taken."""

    def __init__(self, names: list[str]):
        self._lock = threading.Lock()
        self._handed: dict[str, Future] = {name: Future() for name in names}
        self._waiting = 0  # handed, not taken yet
        self._closed = False  # the analysis has ended: nothing handed now would be taken

    def hand(self, name: str) -> Callable[[Labels, pl.Series], None]:
        """The count's ``on_encoded`` for model ``name``."""

        def handed(labels: Labels, codes: pl.Series) -> None:
            with self._lock:
                keep = self._waiting == 0 and not self._closed
                self._waiting += int(keep)
            self._handed[name].set_result([Encoded(labels, codes)] if keep else [])

        return handed

    def close(self) -> None:
        """The analysis has ended (done, or failed on an earlier model): an encoding handed
        but not taken is let go, and the counts still to come hand none (their keys would
        otherwise be held, unread, until the run ends)."""
        with self._lock:
            self._closed = True
            for handed in self._handed.values():
                if handed.done() and not handed.exception():
                    handed.result().clear()

    def counted(self, name: str) -> None:
        """Model ``name`` is counted: if its count handed nothing, the analysis reads it."""
        if not self._handed[name].done():
            self._handed[name].set_result([])

    def failed(self, error: BaseException) -> None:
        """The counts stopped: the analysis waiting for an encoding meets ``error``."""
        for handed in self._handed.values():
            if not handed.done():
                handed.set_exception(error)

    def pending(self, name: str) -> PendingEncoding:
        """Model ``name``'s encoding, to wait for (:data:`PendingEncoding`)."""
        return functools.partial(self._take, name)

    def _take(self, name: str) -> Encoded | None:
        box = self._handed[name].result()  # the count's error, if it failed
        if not box:
            return None
        with self._lock:
            self._waiting -= 1
        return box.pop()


def model_error_analysis(  # noqa: PLR0913 (rule model_errors' inputs, params and outputs, one keyword each (scripts/model_errors.py))
    *,
    model: str,
    gold: str | Path | list[Path],
    labels: str | Path | list[Path],
    nodes: str | Path,
    levels_file: str | Path,
    ancestors: str | Path,
    max_level: str | None,
    distance_out: str | Path,
    confusions_out: str | Path,
    codes_out: str | Path,
    train_gold: str | Path | None = None,
    settings: Settings | None = None,
    parts: list[ErrorPart] | None = None,
    encoded: PendingEncoding | None = None,
) -> None:
    """One model's error distance rows (with ``settings.bootstrap`` replicates, each share's
    interval), near-miss confusions and per-code table (with ``train_frequency`` given
    ``train_gold``): a job of its own per model, so a changed model reruns alone. The per-code
    counts are the count engine's, read from the model's ``nodes`` table. ``gold`` and
    ``labels`` may each be a table in parts (:data:`hieval.engine.keys.Source`); with the
    ``parts`` of the analysis taken already, in document order (:mod:`hieval.analysis.parts`:
    the Evaluator's chunks), the labels are not read again (their counted codes are); nor when
    ``encoded`` gives them as the model's count encoded them (:class:`Encoded`): the errors
    are found in its keys (the same outputs, byte for byte)."""
    table = read_level_table(levels_file)
    system = codesystem.of_table(table)
    levels = evaluated_levels(table.levels, system.resolve_max_level(table.levels, max_level))
    train = paths.read_parquet(train_gold, columns=["doc_id", "code"]) if train_gold else None
    counted = counted_statuses(labels)
    hierarchy = paths.read_parquet(ancestors)
    train_codes = [] if train is None else [train["code"]]

    def tree_for(codes: pl.Series) -> Tree:  # the codes of the gold and the predictions
        return tree_of(table, hierarchy, pl.concat([codes, *train_codes]), counted)

    if parts is None:
        errors = _model_errors(gold, labels, tree_for, encoded)
        tree, parts = errors.tree, [error_part(errors, errors.tree.statuses["code"])]
    else:
        tree = tree_for(pl.concat([part.codes for part in parts]))
    rows, doc_ids = joined_rows(parts)
    distance = error_distance(rows, tree, model=model, doc_ids=doc_ids, settings=settings)
    write_parquet(distance, distance_out)
    write_parquet(confusion_table([part.pairs for part in parts], tree), confusions_out)
    counts = node_counts(paths.read_parquet(nodes), counted=tuple(counted))
    write_parquet(code_table(counts, tree, levels=levels, train_gold=train), codes_out)
    log.info("%s: %d errors analysed", model, rows.height)


def _model_errors(
    gold: str | Path | list[Path],
    labels: str | Path | list[Path],
    tree_for: Callable[[pl.Series], Tree],
    encoded: PendingEncoding | None,
) -> ModelErrors:
    """The model's errors from its count's encoding when it hands one (let go on return: only
    the errors are kept while the analysis waits for the node counts), else from its files."""
    taken = encoded() if encoded is not None else None
    if taken is None:
        return model_errors(gold, labels, tree_for)
    # The tree model_errors builds for the codes the encoder read.
    return errors_of(taken.labels, tree_for(taken.codes))


def gather_errors(parts: list[str | Path], errors_out: str | Path) -> None:
    """``errors.parquet``: the models' error distance rows, in the order given."""
    write_parquet(pl.concat([paths.read_parquet(p) for p in parts], how="diagonal"), errors_out)


def error_analysis(  # noqa: PLR0913 (rule error_distance's and the CLI's inputs and outputs, one keyword each (hieval/run.py))
    *,
    gold: str | Path | list[Path],
    labels: dict[str, str | Path | list[Path]],
    nodes: dict[str, str | Path],
    levels_file: str | Path,
    ancestors: str | Path,
    max_level: str | None,
    work: str | Path,
    errors_out: str | Path,
    confusions_out: dict[str, str | Path],
    codes_out: dict[str, str | Path],
    train_gold: str | Path | None = None,
    settings: Settings | None = None,
    parts: dict[str, list[ErrorPart]] | None = None,
    encoded: dict[str, PendingEncoding] | None = None,
) -> None:
    """Every model's :func:`model_error_analysis` (distance rows in ``work``; with its
    ``parts``, when given, or its labels as its count ``encoded`` them, waited for model by
    model), then :func:`gather_errors`: the workflow's jobs, in one process."""
    distances = []
    for model, path in labels.items():
        distances.append(Path(work) / f"{model}.parquet")
        model_error_analysis(
            model=model,
            gold=gold,
            labels=path,
            nodes=nodes[model],
            levels_file=levels_file,
            ancestors=ancestors,
            max_level=max_level,
            distance_out=distances[-1],
            confusions_out=confusions_out[model],
            codes_out=codes_out[model],
            train_gold=train_gold,
            settings=settings,
            parts=None if parts is None else parts[model],
            encoded=None if encoded is None else encoded[model],
        )
    gather_errors(distances, errors_out)


def group_analysis(  # noqa: PLR0913 (rule group_analysis' inputs, params and outputs, one keyword each (scripts/group_analysis.py))
    *,
    gold: str | Path,
    docs: dict[str, str | Path],
    labels: dict[str, str | Path],
    levels_file: str | Path,
    ancestors: str | Path,
    params: IcmParams,
    doc_groups: str | Path,
    settings: Settings,
    groups_out: str | Path,
    gaps_out: str | Path,
) -> None:
    """Headline P/R/F1 of every model per group of every attribute of ``doc_groups``
    (:mod:`hieval.analysis.groups`), from each model's per-document count table ``docs``, and
    ICM from each group's gold and ``labels`` evaluated alone; with ``settings.bootstrap``
    replicates, intervals, and the largest gap per attribute with its interval and permutation
    p-value (ICM's recounting each shuffled group)."""
    table = read_doc_groups(doc_groups)
    doc_ids = paths.read_parquet(gold, columns=["doc_id"])["doc_id"].unique().sort()
    assigned = assignment(doc_ids, table)
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
    icm, recounts = _group_icm(
        assigned,
        gold=gold,
        labels=labels,
        doc_ids=doc_ids,
        levels_file=levels_file,
        ancestors=ancestors,
        params=params,
    )
    groups, gaps = group_rows(assigned, counts, doc_ids, settings, icm, recounts)
    write_parquet(groups, groups_out)
    write_parquet(gaps, gaps_out)
    log.info("%d group rows over %d attribute(s)", groups.height, table.width - 1)


def _group_icm(
    assigned: pl.DataFrame,
    *,
    gold: str | Path,
    labels: dict[str, str | Path],
    doc_ids: pl.Series,
    levels_file: str | Path,
    ancestors: str | Path,
    params: IcmParams,
) -> tuple[dict[str, dict[tuple[str, str], GroupIcm]], dict[str, Callable[[np.ndarray], float]]]:
    """Per model, each group's ICM with the group's own information content: the count
    engine's item sums over the group's documents alone, codes outside the hierarchy placed
    as a count of the model places them (a model's counted codes nowhere); and the same
    recount of any set of documents, for ICM's permutation test."""
    table = read_level_table(levels_file)
    hierarchy = paths.read_parquet(ancestors)
    truth = paths.read_parquet(gold, columns=["doc_id", "code"])
    out, recounts = {}, {}
    for model, path in labels.items():
        item_sums = functools.partial(
            _item_sums,
            hierarchy=hierarchy,
            levels=table.levels,
            params=params,
            placed=functools.partial(placed_codes, table=table, counted=counted_codes(path)),
        )
        predicted = paths.read_parquet(path, columns=["doc_id", "code"])
        out[model] = group_icm(
            assigned, truth, predicted, doc_ids, item_sums=item_sums, params=params
        )
        recounts[model] = icm_recount(truth, predicted, doc_ids, item_sums=item_sums, params=params)
    return out, recounts


def _item_sums(
    gold: pl.DataFrame, predicted: pl.DataFrame, *, hierarchy, levels, params, placed
) -> pl.DataFrame:
    """The count engine's per-item sums (IC of P, G, P ∪ G) of these labels alone."""
    return count_labels(
        gold, predicted, hierarchy, levels=levels, evaluated=(), params=params, placed=placed
    ).item_sums
