"""Evaluation in batches, for validation loops: :class:`Evaluator` takes batches of documents
with :meth:`~Evaluator.update` and gives one :class:`~hieval.api.Evaluation` with
:meth:`~Evaluator.compute`, equal to one :func:`~hieval.api.evaluate` over every batch.

Batches are gathered and reduced in chunks, the way the sharded workflow reduces shards of
documents. :meth:`~Evaluator.update` does only what is cheap and must be immediate: it converts
the batch to frames, refuses a document of an earlier batch (naming both batches), and queues
the batch. Once the queued batches hold ``reduce_rows`` rows (:data:`REDUCE_ROWS`), they are
validated and normalised together as one chunk, exactly as a file (the same calls,
:func:`hieval.run.normalize_batch`, the same messages), and counted with the engine
(:mod:`hieval.engine.driver`), keeping only what adds up over documents; :meth:`~Evaluator.compute`
reduces what is still queued. So the per-file cost of normalising and counting (about 80 ms) is
paid per chunk, not per batch, and memory holds at most one chunk's rows besides the counts. A
chunk is counted in a background thread while the next one is gathered and normalised.

A batch is normalised alone, at its own ``update``, where a chunk could read it otherwise than
it would be read by itself: the first batch of each layout (columns, types, and whether a code
has a dot, which ``code_format="auto"`` reads per input), a batch predicting a document outside
its own gold (``unknown_docs`` judges within a batch), and a gold batch without any code (refused,
as such a gold file is). Any bound gives the same result, bit for bit.

An error found in a chunk of batches whose updates have returned (a bad code in batch 7, found
when batches 5-9 are normalised) is raised naming the batch of its document (``batch 7: ...``);
the chunk is dropped and the Evaluator refuses every later call: a result without those batches
would look complete. A batch refused at its own ``update`` (alone, or filling a chunk by itself)
leaves the earlier batches as they were, with the message :func:`~hieval.api.evaluate` gives.

What every chunk shares is built once, at the first: the level table, the whole tree's code
space (a chunk without codes placed by their syntax is encoded in it, and its node sums add up
as integer arrays), and each raw code's parse (kept by the fast path of normalisation).
:meth:`~Evaluator.compute` sums the node counts, concatenates the per-document tables
(:func:`hieval.pipeline.reduce_counts`) and runs the metric, score, uncertainty and report
stages once (:func:`hieval.run.report_into`, the tail of every evaluation).

What needs more than one batch, and how it is handled (exactly, never approximated):

- **ICM's node weights** come from the whole gold's frequencies. The frequencies add up per
  node (:class:`hieval.engine.icm.GoldCounts`), so each chunk keeps its own and the weights are
  computed once, at :meth:`~Evaluator.compute`. The per-item ICM, HF and PROP-F sums depend on
  those weights, so each chunk's count pass keeps the (document, node) groups they read
  (:mod:`hieval.engine.deferred`: about 3 bytes a group, the labels themselves are dropped)
  and takes LCA-F's sizes and the gold counts from the same groups; at compute the kept
  groups are weighed, chunk by chunk, with the final weights (looked up once): no label is
  decoded or grouped twice.
- **Scores** (ranking, ROC-AUC, calibration) and the **bootstrap** read the normalised score
  and label tables: exact ROC-AUC ranks every scored pair of all documents together. Each
  chunk's normalised tables (the stage's own Parquet output, not the rows given) stay in the
  Evaluator's private folder on disk, and are pooled in document order at
  :meth:`~Evaluator.compute`: the gold, each model's decided labels (the conventions and the
  error analysis read them too) and, for a scored model, its scores (a dense model's as long
  rows). Nothing of a chunk's rows stays in memory once it is counted.
- **Tuning** (``threshold="tune"``, ``dev_gold``, ``dev_predictions``) chooses one threshold
  from a dev set before any test document is decided, and ``train_gold``, ``doc_list`` and
  ``doc_groups`` name whole inputs: they are refused here (use :func:`hieval.evaluate`).
  So is ``code_format="lenient"``: a record counts the distinct codes read leniently in its
  input, and distinct codes do not add up over batches.
- **A generative coder's codes** (``unknown_codes="count"``, ``malformed_codes="count"``) are
  counted codes: each batch's normalised predictions list theirs (:mod:`hieval.inputs.counted`),
  its encoding places them nowhere (a leaf-level false positive, as one evaluation counts
  them), and :meth:`~Evaluator.compute` lists the union in the pooled file; the records'
  ``invalid_codes`` (rows per code) add up and their ``counted_codes`` are united.
- **Settings that look across documents** act within a batch, which holds each document's
  gold and predictions together: ``unknown_docs`` judges a batch's predicted documents against
  the batch's gold (a prediction for a document of another batch is unknown in this one), and
  a batch whose gold holds no code at all is refused as a gold file is (such batches are
  normalised alone, above); ``label_set="observed"`` is computed from the reduced node counts,
  over all batches. A document given in two batches is refused, naming it and both batches.
  One difference from one evaluation: a batch whose gold codes are all dropped as unknown
  (``unknown_codes="drop"``) is refused only if its chunk holds no other code.
- **Records**: each input's record sums its chunks' (rows, labels, duplicates, unknown and
  invalid codes, ...); the coverage warning is judged over all batches, as one evaluation
  judges it. Its ``sha256`` is of the chunks' own (so it changes with ``reduce_rows``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import os
import shutil
import weakref
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from hieval import api, codesystem, memory, paths, pipeline, run
from hieval.analysis.errors import errors_of
from hieval.analysis.parts import ErrorPart, error_part, in_document_order
from hieval.analysis.tree import tree_of
from hieval.atomic import write_parquet, write_text
from hieval.config import icm_params, ranking_ks
from hieval.conventions.table import check_names, check_paper_table
from hieval.engine.counts import evaluated_levels, node_frame
from hieval.engine.deferred import Kept, count_keeping_items, weighed_item_sums
from hieval.engine.driver import relevant_ancestors
from hieval.engine.icm import FixedWeights, GoldCounts, node_weights
from hieval.engine.keys import CodeSpace, Labels, encode
from hieval.engine.lca import COMPILED_FROM_LABELS, node_depths, prefetch_compiled
from hieval.errors import HievalError, InputError, preview_value
from hieval.hierarchy.table import LevelTable, read_level_table
from hieval.inputs import handoff
from hieval.inputs.counted import counted_codes, counted_statuses, mark_counted
from hieval.inputs.dense_scores import long_frame, read_reference
from hieval.inputs.options import LENIENT, TUNE
from hieval.inputs.policies import coverage_warning
from hieval.inputs.pooled import documents_in_order, pool_in_order
from hieval.reports import figures
from hieval.resources import Resources

#: The default ``reduce_rows``: batches are gathered until they hold this many rows (gold and
#: predicted rows, or a dense matrix's cells), then reduced as one chunk. Measured at 100x
#: (benchmarks/RESULTS.md): a chunk's fixed cost (about 80 ms) is then paid a few times over a
#: whole validation set, and its rows take a few hundred MB while they are normalised.
REDUCE_ROWS = 2_000_000

#: Options that need a whole input at once (see the module doc), refused by the Evaluator.
WHOLE_INPUT_OPTIONS = ("dev_gold", "dev_predictions", "train_gold", "doc_list", "doc_groups")


@dataclass
class _Model:
    """One model's reduced chunks: what adds up over documents, and what its item sums weigh.
    The node sums of chunks encoded in the whole tree's space add up as arrays (``sums``);
    a chunk with codes of its own keeps its node table (``nodes``)."""

    sums: dict[str, np.ndarray] | None = None
    nodes: list[pl.DataFrame] = field(default_factory=list)
    docs: list[pl.DataFrame] = field(default_factory=list)
    gold: list[GoldCounts] = field(default_factory=list)
    kept: list[Kept] = field(default_factory=list)  # each chunk's labels, for its item sums
    missing: int = 0  # gold documents without a row of this model
    codes: tuple[str, ...] | None = None  # a dense model's columns
    errors: list[Future] = field(default_factory=list)  # each chunk's ErrorPart, under way


@dataclass(frozen=True, eq=False)
class _Batch:
    """One accepted ``update`` waiting for its chunk: its inputs as frames (or dense
    matrices), its number (the update call's), its gold's documents and its size in rows."""

    number: int
    gold: pl.DataFrame | memory.Dense
    models: dict[str, pl.DataFrame | memory.Dense]
    docs: list[str]
    rows: int
    layout: tuple  # what the readers see (:func:`_facts`): batches alike are gathered
    alone: bool  # normalised alone, as it would be by itself (:func:`_facts`)


@dataclass(frozen=True)
class _Counting:
    """A chunk normalised and being counted in the background: its counts to come, the
    folder of its normalised tables, and the update calls it holds."""

    counting: Future
    data: Path
    numbers: tuple[int, ...]


class _BatchResources(Resources):
    """:class:`Resources` whose DuckDB settings are looked up once for every batch: without a
    ``memory_limit`` each lookup opens a DuckDB connection (25 ms, twice a batch)."""

    @functools.cached_property
    def _duckdb(self) -> dict[str, str]:
        return super().duckdb_config()

    def duckdb_config(self) -> dict[str, str]:
        return dict(self._duckdb)


@dataclass(frozen=True)
class _Setup:
    """What every batch shares: the hierarchy's tables (built once), the run's settings."""

    args: run.EvaluateOptions
    config: dict
    names: list[str]
    levels_file: Path
    ancestors_file: Path
    hierarchy: str
    table: LevelTable
    ancestors: pl.DataFrame
    codes: pl.Series  # the tree's codes (those of its ancestor rows)
    known: pl.Series  # the level table's codes (any other is placed by syntax, or not)
    space: CodeSpace  # the whole tree's code space, for every batch without placed codes
    depth: np.ndarray  # its nodes' depths (LCA-F's, node_depths), for every such batch
    evaluated: tuple[str, ...]
    resources: Resources
    spaces: dict[str, tuple[Path, str]]  # --label-space by model


class Evaluator:
    """Evaluate in batches of documents: :meth:`update` any number of times, then
    :meth:`compute`.

    Parameters
    ----------
    hierarchy
        As :func:`hieval.evaluate`'s ``hierarchy`` (a :class:`hieval.Hierarchy` is built once
        for all batches).
    reduce_rows
        How many rows (gold and predicted rows, or a dense matrix's cells) the queued batches
        hold before they are normalised and counted together as one chunk: it bounds the
        Evaluator's memory for rows not yet reduced (a few hundred MB at the default), never
        the whole data set's. Any value gives the same result; 1 reduces every batch at its
        own ``update`` (every error raised there), a larger one pays the per-chunk cost less
        often (measured in ``benchmarks/RESULTS.md``).
    **options
        Every other keyword of :func:`hieval.evaluate` (``max_level``, ``threshold``, ...),
        except those tuning a threshold or naming a whole input (``threshold="tune"``,
        ``dev_gold``, ``dev_predictions``, ``train_gold``, ``doc_list``).

    Examples
    --------
    >>> import hieval
    >>> evaluator = hieval.Evaluator(cache=cache)
    >>> evaluator.update({"a": ["401.9"]}, {"m": {"a": ["401.9"]}})
    >>> evaluator.update({"b": ["250.00"]}, {"m": {"b": ["428.0"]}})
    >>> evaluator.compute().metrics.filter(family="flat", average="micro", metric="f1")["value"]
    shape: (1,)
    Series: 'value' [f64]
    [
        0.5
    ]
    """

    def __init__(
        self,
        *,
        hierarchy: str | os.PathLike | api.Hierarchy = "package",
        reduce_rows: int = REDUCE_ROWS,
        **options,
    ):
        unknown = set(options) - set(api.evaluate.__kwdefaults__)
        if unknown:
            raise TypeError(f"Evaluator got unknown option(s): {', '.join(sorted(unknown))}")
        if isinstance(reduce_rows, bool) or not isinstance(reduce_rows, int) or reduce_rows < 1:
            raise InputError(
                f"Evaluator: reduce_rows must be a whole number of rows, 1 or more; got "
                f"{preview_value(reduce_rows)}"
            )
        whole = [name for name in WHOLE_INPUT_OPTIONS if options.get(name) is not None]
        if options.get("threshold") == TUNE:
            whole.insert(0, f"threshold={TUNE!r}")
        if whole:
            raise InputError(
                f"Evaluator: {', '.join(whole)} needs whole inputs at once (a threshold is "
                "tuned on a dev set before any document is decided); use hieval.evaluate"
            )
        if options.get("code_format") == LENIENT:
            raise InputError(
                f"Evaluator: code_format={LENIENT!r} is not reduced over batches (a record "
                "counts the distinct codes read leniently in its input, and distinct codes do "
                "not add up over batches); use hieval.evaluate"
            )
        self._keywords: dict[str, Any] = {
            **api.evaluate.__kwdefaults__,
            **options,
            "hierarchy": hierarchy,
        }
        self._reduce_rows = reduce_rows
        self._folder = api._Private(self, "hieval-evaluator-").path
        self._setup: _Setup | None = None
        self._models: dict[str, _Model] = {}
        self._names: tuple[str, ...] | None = None  # the models of the accepted batches
        self._chunks: list[Path] = []  # each reduced chunk's normalised tables
        self._seen: dict[str, int] = {}  # each accepted document -> its update call
        self._updates = 0  # update calls accepted
        self._queued: list[_Batch] = []
        self._queued_rows = 0
        self._schemas: set[tuple] = set()  # batch layouts normalised once already
        self._refused: str | None = None  # why no complete evaluation can be given
        self._counter: ThreadPoolExecutor | None = None
        self._analyst: ThreadPoolExecutor | None = None  # the chunks' error analyses
        self._pending: _Counting | None = None

    def update(self, gold_batch: object, predictions_batch: object) -> None:
        """Add a batch of documents: their gold and each model's predictions, in any input
        kind :func:`hieval.evaluate` takes in memory.

        The batch is checked at once: its kind, its columns' layout (a layout not seen before
        is normalised at once, alone), and its documents (one of an earlier batch is refused,
        naming it and both batches). It then waits with the batches after it until they hold
        ``reduce_rows`` rows, and the chunk is validated, normalised and counted as one; an
        error found then names the batch the document came from, and leaves the Evaluator
        refusing to :meth:`compute` (the chunk is dropped: a result without it would look
        complete). A batch refused at its own ``update`` leaves the earlier ones as they were."""
        self._check_usable()
        models = api._named(predictions_batch)
        if (
            self._names
            and isinstance(predictions_batch, Mapping)
            and set(predictions_batch) == set(self._names)
        ):
            models = dict(predictions_batch)  # {"m": {}}: a batch model m predicts nothing in
        number = self._updates + 1
        if self._names and set(models) != set(self._names):
            raise InputError(
                f"batch {number}: models {sorted(models)}, the earlier batches "
                f"{sorted(self._names)}; give every batch every model"
            )
        for name, value in {"gold": gold_batch, **models}.items():
            self._check_kind(name, value, number)
        batch = self._batch(gold_batch, models, number)
        layout = batch.layout
        if layout in self._schemas and not batch.alone:
            if self._queued and self._queued[0].layout != layout:
                self._flush()  # a chunk holds batches of one layout
            self._queued.append(batch)
            self._queued_rows += batch.rows
            if self._queued_rows >= self._reduce_rows:
                self._flush(current=batch)
            self._accept(batch)
            return
        # Alone, at once: a new layout (its columns checked before any batch joins it), or a
        # batch whose normalisation looks past its documents (see _facts). The queued
        # batches wait on: chunks may come in any order.
        self._reduce([batch], deferred=False)
        self._schemas.add(layout)
        self._accept(batch)

    def _batch(self, gold_batch: object, models: dict[str, object], number: int) -> _Batch:
        """The batch's inputs as frames (or dense matrices), and its documents, none of which
        may have come in an earlier batch."""
        with api._api_errors():
            gold = _as_frame(gold_batch, name="gold", role="gold")
            frames = {
                name: _as_frame(value, name=name, role="predictions")
                for name, value in models.items()
            }
        gold_layout, docs, alone = _facts(gold, gold_docs=None)
        seen = self._seen
        again = sorted(d for d in docs if d in seen)  # the batch's size, not all's
        if again:
            raise InputError(
                f"gold: batch {number}: document {preview_value(again[0])} came in an earlier "
                f"batch (batch {seen[again[0]]}; {len(again)} such document(s)); each "
                "document belongs to one batch"
            )
        layout = [gold_layout]
        for name, value in frames.items():
            model_layout, _, outside = _facts(value, gold_docs=docs)
            layout.append((name, model_layout))
            alone = alone or outside
        rows = sum(_size(value) for value in (gold, *frames.values()))
        return _Batch(number, gold, frames, docs, rows, tuple(layout), alone)

    def _accept(self, batch: _Batch) -> None:
        self._updates = batch.number
        self._names = self._names or tuple(batch.models)
        self._seen.update(dict.fromkeys(batch.docs, batch.number))
        for name, value in batch.models.items():
            model = self._models.setdefault(name, _Model())
            if isinstance(value, memory.Dense):
                model.codes = value.codes

    def _check_usable(self) -> None:
        if self._refused is not None:
            raise InputError(
                f"Evaluator: a chunk of earlier batches was refused ({self._refused}); the "
                "batches accepted so far would give an incomplete evaluation: correct the "
                "input and evaluate again with a new Evaluator"
            )

    def _flush(self, current: _Batch | None = None) -> None:
        """Reduce the queued batches as one chunk: deferred, unless it holds only the batch
        of the ``update`` under way (``current``), which may still be refused alone."""
        queued, self._queued, self._queued_rows = self._queued, [], 0
        if queued:
            self._reduce(queued, deferred=not (len(queued) == 1 and queued[0] is current))

    def _reduce(self, batches: list[_Batch], *, deferred: bool) -> None:
        """Validate and normalise ``batches`` together as one chunk, then count it in the
        background (the previous chunk's counts are settled first). An error names the batch
        of the document it names; if the batches' updates have returned (``deferred``), the
        Evaluator refuses from then on (:meth:`_check_usable`)."""
        folder = self._folder / f"chunk-{len(self._chunks) + 1}"
        gold = _joined_inputs([b.gold for b in batches])
        models = {n: _joined_inputs([b.models[n] for b in batches]) for n in batches[0].models}
        try:
            try:
                data, config = self._normalise(gold, models, folder=folder)
            except HievalError as exc:
                if not deferred:  # refused at its own update: the message evaluate gives
                    raise
                raise type(exc)(_naming_batch(str(exc), batches)) from None
            self._settle()  # the previous chunk, counted meanwhile
        except BaseException as exc:
            shutil.rmtree(folder, ignore_errors=True)
            if not self._chunks:  # the settings come again with the next first batch
                self._setup = None
            if deferred:
                self._refused = str(exc)
            raise
        self._chunks.append(data)
        if self._counter is None:
            self._counter = ThreadPoolExecutor(1, thread_name_prefix="hieval-evaluator")
            self._analyst = ThreadPoolExecutor(1, thread_name_prefix="hieval-analysis")
            # Not waiting: the last reference may go in the counting thread itself.
            for pool in (self._counter, self._analyst):
                weakref.finalize(self, functools.partial(pool.shutdown, wait=False))
        counting = self._counter.submit(self._count_chunk, config, data)
        self._pending = _Counting(counting, data, tuple(b.number for b in batches))

    def _settle(self) -> None:
        """Add the counts of the chunk counted in the background: a chunk is counted while
        the next one is gathered and normalised. Should its counting fail (past normalisation
        only the engine's limits can refuse it), its batches have returned from their
        updates: the Evaluator refuses from then on, and the error is raised here."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            counted = pending.counting.result()
        except BaseException as exc:
            self._chunks.remove(pending.data)
            shutil.rmtree(pending.data.parent.parent, ignore_errors=True)
            numbers = pending.numbers
            message = f"{_numbered(numbers)}: {exc}"
            self._refused = message
            if isinstance(exc, HievalError):
                raise type(exc)(message) from None
            raise
        for name, (sums, doc_rows, gold, kept, missing, errors) in counted.items():
            model = self._models[name]
            if kept.space is not self._setup.space:
                model.nodes.append(node_frame(sums, kept.space))
            elif model.sums is None:
                model.sums = sums
            else:
                for level, level_sums in sums.items():
                    model.sums[level] += level_sums
            model.docs.append(doc_rows)
            model.gold.append(gold)
            model.kept.append(kept)
            model.missing += missing
            model.errors.append(errors)

    def _check_kind(self, name: str, value: object, number: int) -> None:
        """Batches are held in memory; a dense model keeps its columns from batch to batch."""
        if isinstance(value, str | os.PathLike):
            raise InputError(
                f"{name}: batch {number} is a path ({value}); the Evaluator takes batches "
                "in memory (DataFrames, mappings, hieval.dense): for files, use hieval.evaluate"
            )
        earlier = self._models[name].codes if name in self._models else None
        if isinstance(value, memory.Dense) and earlier not in (None, value.codes):
            raise InputError(
                f"{name}: batch {number} is a dense matrix whose codes differ from the "
                "earlier batches'; give every batch the same codes, in the same order"
            )

    def _normalise(
        self, gold_batch: object, models: dict[str, object], *, folder: Path
    ) -> tuple[Path, dict]:
        """Normalise one chunk into ``folder`` (as :func:`hieval.evaluate` normalises its
        inputs); returns the folder of its normalised tables and the chunk's settings."""
        inputs = folder / "inputs"
        inputs.mkdir(parents=True)
        staged: list[memory.Staged] = []
        formats = dict(api._pairs(self._keywords["format"], "format"))

        def file_of(value: object, name: str, role: str) -> Path:
            item = memory.stage(value, name=name, role=role, folder=inputs)
            staged.append(item)
            if item.format is not None:
                formats.setdefault(name, item.format)
            return item.path

        with api._api_errors(staged):
            args = api._options(
                gold_batch,
                models,
                self._keywords,
                file_of=file_of,
                inputs=inputs,
                formats=formats,
                named=True,
            )
            args.shown = {str(item.path): item.what for item in staged}
            setup = self._setup or self._first(args)
            args.per_file = run._per_file_options(args, setup.names)
            config = run.config_from_args(args)
            common = {
                "levels_file": setup.table,
                "unknown_codes": config["unknown_codes"],
                "malformed_codes": config["malformed_codes"],
                "resources": setup.resources,
                "coverage": False,  # judged over all batches, at compute
            }
            batch = self._run(args, config, out=folder, common=common)
            run.normalize_batch(batch)
        for name in setup.names:  # a dense model's scores point at its staged matrix
            scores = batch.work / "inputs" / "scores" / f"{name}.parquet"
            reference = read_reference(scores) if scores.exists() else None
            if reference is not None:  # as long rows, which the pooled scores are
                write_parquet(long_frame(reference), scores)
        shutil.rmtree(inputs)  # the staged copies of the batch's rows: read, and gone
        return batch.work / "inputs", config

    def _count_chunk(self, config: dict, data: Path) -> dict[str, tuple]:
        """Each model's counts of one normalised chunk (:meth:`_count`); the chunk's kept
        keys (:mod:`hieval.inputs.handoff`) are let go once every model is counted."""
        try:
            return {name: self._count(name, config, folder=data) for name in self._setup.names}
        finally:
            handoff.forget(data)

    def _run(self, args: run.EvaluateOptions, config: dict, *, out: Path, common: dict) -> run._Run:
        """The run's settings and files (:class:`hieval.run._Run`) of a batch or of compute,
        whose stages write under ``out``."""
        setup = self._setup
        return run._Run(
            args,
            out,
            setup.names,
            config,
            icm_params(config),
            setup.resources,
            setup.levels_file,
            setup.ancestors_file,
            setup.hierarchy,
            common,
            setup.spaces,
        )

    def _first(self, args: run.EvaluateOptions) -> _Setup:
        """The hierarchy's tables and the settings, from the first batch (once)."""
        names = run.model_names(args)
        args.per_file = run._per_file_options(args, names)
        spaces = run._label_spaces(args, names)  # refused at the first batch, before any file
        config = run.config_from_args(args)
        check_names(config["conventions"])
        check_paper_table(config["report"]["paper_table"], config["conventions"])
        resources = _BatchResources(threads=args.threads, **config["engine"])
        resources.check_bootstrap(config["uncertainty"]["bootstrap"], models=len(names))
        levels, ancestors, hierarchy = run.build_tables(
            args, self._folder / "hierarchy", config["max_level"]
        )
        table = read_level_table(levels)
        tree = paths.read_parquet(ancestors)
        system_max = codesystem.of_table(table).resolve_max_level(table.levels, config["max_level"])
        space = CodeSpace.build(tree, tuple(table.levels))
        self._setup = _Setup(
            args=args,
            config=config,
            names=names,
            levels_file=levels,
            ancestors_file=ancestors,
            hierarchy=hierarchy,
            table=table,
            ancestors=tree,
            codes=tree["code"].unique(),
            known=table.frame["code"],
            space=space,
            depth=node_depths(space),
            evaluated=evaluated_levels(table.levels, system_max),
            resources=resources,
            spaces=spaces,
        )
        return self._setup

    def _count(self, name: str, config: dict, *, folder: Path) -> tuple:
        """Count one model's normalised batch: node counts, per-document rows, ICM's gold
        counts and the groups its item sums weigh; then drop what no later stage reads."""
        setup = self._setup
        gold = folder / "gold.parquet"
        labels_file = folder / "predictions" / f"{name}.parquet"
        scores_file = folder / "scores" / f"{name}.parquet"
        # The engine's threads: a chunk is counted while batches are gathered (cheap), and
        # only the next chunk's normalisation runs beside it.
        threads = setup.resources.threads
        counted = counted_codes(labels_file)  # a generative coder's codes, placed nowhere
        codes: list[pl.Series] = []  # the chunk's distinct codes, for its analysis's tree

        def space_for(distinct: pl.Series) -> CodeSpace:
            codes.append(distinct)
            return self._space_for(distinct, counted=counted)

        labels = encode(gold, labels_file, space_for)
        depth = setup.depth if labels.space is setup.space else node_depths(labels.space)
        # The counts, ICM's gold counts, LCA-F's sizes, and the groups the item sums weigh
        # once the whole gold's node weights are known (at compute), in one pass.
        result = count_keeping_items(
            labels,
            evaluated=setup.evaluated,
            params=icm_params(config),
            depth=depth,
            threads=threads,
        )
        # Counts (node_frame reads them as integers): kept as such, summed exactly.
        sums = {level: level_sums.astype(np.int64) for level, level_sums in result.sums.items()}
        gold_counts = result.gold
        # Of the ancestor rows, only the placed codes' are the batch's own (the tree's rows
        # are added once at compute; a union of every batch's rows took seconds). A batch in
        # the whole tree's space has no placed code: none of its rows is its own.
        ancestors = gold_counts.ancestors
        if labels.space is setup.space:
            placed = ancestors.clear()
        else:
            placed = ancestors.filter(~pl.col("code").is_in(setup.codes.implode()))
        gold_counts = dataclasses.replace(gold_counts, ancestors=placed)
        # The gold's documents are the encoded ones it lists (an empty-code row lists one too).
        gold_docs = labels.doc_ids.filter(pl.Series(labels.in_gold)).to_frame("doc_id")
        covered = [pipeline._doc_ids(labels_file)]
        if pq.read_metadata(scores_file).num_rows:
            covered.append(pipeline._doc_ids(scores_file))
        else:
            scores_file.unlink()  # hard predictions: nothing is ranked
        missing = (
            gold_docs.height - gold_docs.join(pl.concat(covered), on="doc_id", how="semi").height
        )
        # Beside the next chunk's count: the counting thread is the slower side of the updates.
        errors = self._analyst.submit(self._error_part, labels, codes[0], labels_file)
        return sums, result.docs, gold_counts, result.kept, missing, errors

    def _error_part(self, labels: Labels, codes: pl.Series, labels_file: Path) -> ErrorPart:
        """The chunk's error analysis (:mod:`hieval.analysis.parts`), from the count's own
        encoding of it: at ``compute()`` the analysis joins the chunks' parts instead of
        reading and encoding every label again."""
        setup = self._setup
        tree = tree_of(setup.table, setup.ancestors, codes, counted_statuses(labels_file))
        return error_part(errors_of(labels, tree), codes)

    def _space_for(self, codes: pl.Series, *, counted: frozenset[str]) -> CodeSpace:
        """The code space a batch's labels are encoded in: the whole tree's, built once, when
        the batch has no code placed by its syntax (node counts list only the nodes a label
        reaches, and ICM's weights of those nodes do not depend on the others); otherwise
        the part of the tree its codes reach, with the placed codes' rows, as one evaluation
        builds it (:func:`hieval.engine.driver.encode_labels`). The ``counted`` codes
        (:mod:`hieval.inputs.counted`) are placed nowhere: the encoder appends them, at the
        leaf level only, as one evaluation does."""
        setup = self._setup
        unknown = codes.filter(~codes.is_in(setup.known.implode()))
        if counted:
            unknown = unknown.filter(~unknown.is_in(pl.Series(sorted(counted)).implode()))
        if not unknown.len():
            return setup.space
        rows = codesystem.of_table(setup.table).placed_ancestors(unknown.to_list(), setup.table)
        if rows is None or not rows.height:
            return setup.space
        tree = relevant_ancestors(setup.ancestors, placed=rows, codes=codes)
        return CodeSpace.build(tree, tuple(setup.table.levels), rows)

    def compute(self) -> api.Evaluation:
        """One :class:`~hieval.api.Evaluation` of every batch so far: equal to
        :func:`hieval.evaluate` over all of them at once. The batches still queued are
        reduced first; should they be refused (or a chunk's count fail), the error is raised,
        naming the batch, and so is every later call."""
        self._check_usable()
        self._flush()
        self._settle()
        if self._setup is None:
            raise InputError("Evaluator.compute: no batch yet; call update(gold, predictions)")
        setup = self._setup
        # As one evaluate does: the imports of LCA-F's kernel (for a count large enough to
        # use it) and of pyplot (for the report's figures) overlap the reduction.
        keys = sum(kept.labels for model in self._models.values() for kept in model.kept)
        if keys >= COMPILED_FROM_LABELS:
            prefetch_compiled()
        figures.prefetch()
        evaluation = api.Evaluation.__new__(api.Evaluation)
        out = api._Private(evaluation, "hieval-evaluate-").path / "out"
        work = out / "work"
        hierarchy = work / "hierarchy"
        hierarchy.mkdir(parents=True)
        levels = Path(shutil.copy2(setup.levels_file, hierarchy / "levels.parquet"))
        ancestors = Path(shutil.copy2(setup.ancestors_file, hierarchy / "ancestors.parquet"))
        params = icm_params(setup.config)
        common = {
            "levels_file": levels,
            "unknown_codes": setup.config["unknown_codes"],
            "malformed_codes": setup.config["malformed_codes"],
            "resources": setup.resources,
        }
        whole = dataclasses.replace(
            self._run(setup.args, setup.config, out=out, common=common),
            levels=levels,
            ancestors=ancestors,
        )
        reduced = {name: self._reduced_files(name, work=work, out=out) for name in setup.names}
        # As one evaluate starts its error analysis beside the counting: it reads the
        # batches' tables beside the count reduction (ICM's item pass), which reads none of
        # them, and waits for each model's reduced node counts only at its end (its per-code
        # table). Where the chunks come in document order it reads them as they are, while
        # they are pooled here; otherwise it reads the pooled tables.
        counted: dict[str, Future] = {name: Future() for name in setup.names}
        pooled: Future = Future()
        chunks = self._chunk_inputs()
        with ThreadPoolExecutor(2, thread_name_prefix="hieval-pool") as beside:
            if chunks is None:
                errors = beside.submit(self._pool_then_errors, whole, pooled, counted)
            else:  # the chunks pooled beside their analysis, which joins their own
                errors = beside.submit(
                    run._error_analysis, whole, counted, inputs=chunks, parts=self._error_parts()
                )
                pooled = beside.submit(self._pool_inputs, whole.work / "inputs")
            try:
                for name, files in reduced.items():
                    self._reduced(name, params=params, out=files)
                    counted[name].set_result(files.nodes)
                pooled.result()
            except BaseException as error:
                for written in counted.values():  # the analysis stops at the nodes it waits for
                    if not written.done():
                        written.set_exception(error)
                raise
            self._model_rows(whole, reduced=reduced, params=params)
            with api._api_errors():
                run.report_into(whole, tuned={}, errors=errors)
        evaluation.__init__(out, setup.names, [])
        return evaluation

    def _error_parts(self) -> dict[str, list[ErrorPart]] | None:
        """Each model's chunks' error analyses in document order, or None where a model's
        chunks interleave (:func:`~hieval.analysis.parts.in_document_order`)."""
        parts = {
            name: in_document_order([part.result() for part in self._models[name].errors])
            for name in self._models
        }
        return None if any(p is None for p in parts.values()) else parts

    def _chunk_inputs(self) -> tuple[list[Path], dict[str, list[Path]]] | None:
        """The chunks' gold and each model's labels as tables in parts, when every one of
        them comes in document order (:func:`~hieval.inputs.pooled.documents_in_order`);
        None otherwise."""
        gold = documents_in_order([batch / "gold.parquet" for batch in self._chunks])
        labels = {
            name: documents_in_order(
                [batch / "predictions" / f"{name}.parquet" for batch in self._chunks]
            )
            for name in self._setup.names
        }
        if gold is None or any(parts is None for parts in labels.values()):
            return None
        return gold, labels

    def _pool_then_errors(
        self, whole: run._Run, pooled: Future, counted: dict[str, Future]
    ) -> None:
        """Pool the batches' tables (:meth:`_pool_inputs`; ``pooled`` says when), then run the
        error analysis over them (its node counts read once ``counted``)."""
        try:
            self._pool_inputs(whole.work / "inputs")
        except BaseException as exc:
            pooled.set_exception(exc)
            raise
        pooled.set_result(None)
        run._error_analysis(whole, counted)

    def _model_rows(
        self, whole: run._Run, *, reduced: dict[str, pipeline.ModelFiles], params: Any
    ) -> None:
        """The pooled records, then each model's metric, ranking and score rows (as one
        evaluation has them) from its reduced counts and the pooled tables."""
        setup, inputs = self._setup, whole.work / "inputs"
        gold = inputs / "gold.parquet"
        records = [gold.with_suffix(".json")]
        write_text(
            records[0], _pooled_record(self._records("gold.json"), "gold", batches=self._updates)
        )
        for name in setup.names:
            labels = inputs / "predictions" / f"{name}.parquet"
            scores = inputs / "scores" / f"{name}.parquet"
            records.append(labels.with_suffix(".json"))
            record = _pooled_record(
                self._records(f"predictions/{name}.json"),
                name,
                batches=self._updates,
                coverage=(self._models[name].missing, len(self._seen)),
            )
            write_text(records[-1], record)
            pipeline.model_rows_and_scores(
                model=name,
                gold=gold,
                scores=scores,
                record=records[-1],
                levels_file=whole.levels,
                ancestors=whole.ancestors,
                max_level=setup.config["max_level"],
                params=params,
                label_set=setup.config["comparison"]["label_set"],
                ks=ranking_ks(setup.config),
                out=reduced[name],
            )

    def _pool_inputs(self, inputs: Path) -> None:
        """The gold and each model's decided labels and scores, over all batches, into
        ``inputs`` as one evaluation normalises them."""
        self._pool("gold.parquet", inputs / "gold.parquet", ["doc_id", "code"])
        for name in self._setup.names:
            labels = inputs / "predictions" / f"{name}.parquet"
            scores = inputs / "scores" / f"{name}.parquet"
            self._pool(f"predictions/{name}.parquet", labels, ["doc_id", "code"])
            self._pool(f"scores/{name}.parquet", scores, ["doc_id", "code"], schema=_SCORES)
            statuses = counted_statuses(
                [batch / "predictions" / f"{name}.parquet" for batch in self._chunks]
            )
            if statuses:  # listed in the pooled file's metadata, as normalisation lists them
                mark_counted(labels, dict(sorted(statuses.items())))

    @staticmethod
    def _reduced_files(name: str, *, work: Path, out: Path) -> pipeline.ModelFiles:
        """Where one model's reduced counts and metric rows go, as one evaluation has them."""
        counts = work / "counts" / name
        return pipeline.ModelFiles(
            nodes=counts / "nodes.parquet",
            docs=counts / "docs.parquet",
            item_sums=counts / "item_sums.parquet",
            metrics=work / "metrics" / f"{name}.parquet",
            nodes_report=out / "nodes" / f"{name}.csv",
            ranking=work / "ranking" / f"{name}.parquet",
            notes=work / "ranking" / f"{name}.json",
        )

    def _reduced(self, name: str, *, params: Any, out: pipeline.ModelFiles) -> None:
        """One model's count tables over every batch: node counts summed, document rows
        concatenated, and the item sums of each chunk's kept groups over the node weights
        of the whole gold (its batches' gold counts added)."""
        model, setup = self._models[name], self._setup
        gold = GoldCounts.add(model.gold)
        # The whole tree's rows and the placed codes': each node's parent is found the same
        # as among the rows of the codes a batch reaches (they hold every row of those codes).
        ancestors = pl.concat([setup.ancestors.select(gold.ancestors.columns), gold.ancestors])
        weights = node_weights(
            ancestors, gold.nodes, gold.items, levels=setup.table.levels, params=params
        )
        threads = setup.resources.threads
        # Chunk by chunk (per-item sums do not depend on which documents are counted
        # together), from the groups each chunk's count pass kept; the chunks in the whole
        # tree's space share its weights, looked up once.
        fixed = FixedWeights.of(weights, setup.space, depth=setup.depth)
        items = [
            weighed_item_sums(
                kept,
                weights,
                threads=threads,
                fixed=fixed if kept.space is setup.space else None,
            )
            for kept in model.kept
        ]
        nodes = model.nodes
        if model.sums is not None:
            nodes = [*nodes, node_frame(model.sums, setup.space)]
        docs, item_rows = _in_document_order(model.docs), _in_document_order(items)
        if docs is not None and item_rows is not None:  # the usual case: no sort needed
            nodes, docs, item_sums = pipeline.reduce_counts(nodes, docs, item_rows, in_order=True)
        else:
            nodes, docs, item_sums = pipeline.reduce_counts(nodes, model.docs, items)
        write_parquet(nodes, out.nodes)
        write_parquet(docs, out.docs)
        write_parquet(item_sums, out.item_sums)

    def _records(self, name: str) -> list[dict]:
        return [json.loads((batch / name).read_text("utf-8")) for batch in self._chunks]

    def _pool(self, name: str, out: Path, order: list[str], schema: Mapping | None = None) -> None:
        """The batches' normalised tables ``name`` as one, sorted as normalisation sorts a
        whole input (documents are disjoint across batches, so nothing else changes): row
        groups copied in document order (:func:`~hieval.inputs.pooled.pool_in_order`) where
        the batches' documents do not interleave, sorted in Polars otherwise."""
        parts = [batch / name for batch in self._chunks if (batch / name).exists()]
        if pool_in_order(parts, out):  # the usual case: no string hashed again
            return
        frames = [paths.read_parquet(p) for p in parts]
        frames = [frame for frame in frames if frame.height] or frames[:1]
        if not frames:
            if schema is None:
                return
            frames = [pl.DataFrame(schema=schema)]
        in_order = _in_document_order(frames)
        if in_order is not None:  # each batch sorted, their documents apart: no sort needed
            pooled = pl.concat(in_order, how="vertical", rechunk=True)
        else:
            pooled = pl.concat(frames, how="vertical").sort(order, nulls_last=False)
        write_parquet(pooled, out)


def _in_document_order(frames: list[pl.DataFrame]) -> list[pl.DataFrame] | None:
    """The batches' normalised tables (each sorted by ``doc_id``, none empty) in an order
    whose concatenation is sorted, when their ranges of documents do not interleave (the
    usual case: a validation loop's batches come in document order, or in any order of
    contiguous runs of documents); None otherwise. Python orders strings by code point, as
    Polars sorts UTF-8 text by its bytes."""
    if not all(frame.height and frame.schema["doc_id"] == pl.String for frame in frames):
        return None
    bounds = sorted((frame["doc_id"][0], frame["doc_id"][-1], i) for i, frame in enumerate(frames))
    if any(last >= first for (_, last, _), (first, _, _) in itertools.pairwise(bounds)):
        return None
    return [frames[i] for _, _, i in bounds]


_SCORES = {"doc_id": pl.String, "code": pl.String, "score": pl.Float64}

#: Record fields that add up over batches (their documents are disjoint).
_SUMMED = (
    "rows",
    "documents",
    "labels",
    "duplicates_removed",
    "below_threshold",
    "outside_top_k",
    "unknown_documents_dropped",
    "other_version_rows",
    "scored_pairs",
)


def _pooled_record(
    records: list[dict], name: str, *, batches: int, coverage: tuple[int, int] | None = None
) -> str:
    """One input's record over its batches: counts summed, unknown codes added up, the
    batches' sha256 listed into one; ``coverage`` (documents without a row, gold documents)
    gives the coverage warning over all batches."""
    pooled = dict(records[0])
    for key in _SUMMED:
        pooled[key] = sum(r[key] for r in records)
    unknown: dict[str, int] = {}
    for record in records:
        for code, n in record["unknown_codes"].items():
            unknown[code] = unknown.get(code, 0) + n
    pooled["unknown_codes"] = dict(sorted(unknown.items()))
    # A generative coder's fields are written only when used (InputRecord.to_json).
    invalid: dict[str, int] = {}
    for record in records:
        for code, n in record.get("invalid_codes", {}).items():
            invalid[code] = invalid.get(code, 0) + n
    counted = sorted({code for r in records for code in r.get("counted_codes", ())})
    for key, value in (
        ("invalid_codes", dict(sorted(invalid.items()))),
        ("counted_codes", counted),
    ):
        pooled.pop(key, None)
        if value:
            pooled[key] = value
    if any("malformed_code_policy" in r for r in records):
        pooled["malformed_code_policy"] = next(
            r["malformed_code_policy"] for r in records if "malformed_code_policy" in r
        )
    pooled["path"] = f"{name} (in memory, {batches} batch{'es' if batches > 1 else ''})"
    listing = "".join(f"{r['sha256']}  {r['path']}\n" for r in records)
    pooled["sha256"] = hashlib.sha256(listing.encode()).hexdigest()
    warnings = dict.fromkeys(w for r in records for w in r["warnings"])
    if coverage is not None:
        warnings |= dict.fromkeys(coverage_warning(name, missing=coverage[0], gold=coverage[1]))
    pooled["warnings"] = list(warnings)
    return json.dumps(pooled, indent=2, sort_keys=True) + "\n"


def _as_frame(value: object, *, name: str, role: str) -> pl.DataFrame | memory.Dense:
    """A batch input as the frame it is staged from (a dense matrix as it is)."""
    if isinstance(value, memory.Dense):
        return value
    return memory._frame(value, name=name, role=role)


def _size(value: pl.DataFrame | memory.Dense) -> int:
    return value.matrix.size if isinstance(value, memory.Dense) else value.height


def _facts(
    value: pl.DataFrame | memory.Dense, *, gold_docs: list[str] | None
) -> tuple[tuple, list[str], bool]:
    """What one input of a batch looks like to the readers, its documents (of a gold: the
    distinct ids as text), and whether the batch must be normalised alone; one query a
    frame (a validation loop may call update thousands of times).

    The layout is the frame's columns and types, and whether any code has a dot
    (``code_format="auto"`` reads an input's codes as dotted if one has, as undotted
    otherwise: each batch must be read as it would be alone); a dense matrix's type (its codes
    are checked apart). The first batch of a layout is normalised alone, so that its columns
    are judged before any batch joins it. A batch goes alone too where normalisation looks
    past a document, which must see this batch only: ``unknown_docs`` judges the predicted
    documents against the gold's (``gold_docs``; a prediction for a document of another batch
    is unknown in this one), and a gold without any code is refused. So does a null document
    id (refused naming a row, no document)."""
    if isinstance(value, memory.Dense):
        layout = ("dense", value.matrix.dtype.str, value.matrix.ndim)
        if gold_docs is None:
            docs = list(dict.fromkeys(value.doc_ids))
            return layout, docs, not np.any(value.matrix)
        inside = set(gold_docs).issuperset(value.doc_ids)
        return layout, [], not inside
    columns = value.schema
    layout = tuple((column, str(dtype)) for column, dtype in columns.items())
    if "doc_id" not in columns or (gold_docs is None and "code" not in columns):
        return (*layout, None), [], True
    if value.height <= _SMALL and columns["doc_id"] == pl.String:
        return _small_facts(value, layout, gold_docs=gold_docs)
    doc = pl.col("doc_id").cast(pl.String, strict=False)
    query = {"null_docs": pl.col("doc_id").null_count()}
    if gold_docs is None:
        query["docs"] = doc.drop_nulls().unique(maintain_order=True).implode()
        query["coded"] = pl.col("code").is_not_null().any()
    else:
        query["inside"] = doc.is_in(pl.Series(gold_docs, dtype=pl.String).implode()).all()
    known: dict[str, bool] = {}
    if columns.get("code") == pl.String:
        # "Any code has a dot" and "any code is not blank" are settled by the first rows
        # that show one, usually the first few: the whole column is scanned only otherwise.
        head = [c for c in value.get_column("code").head(_HEAD).to_list() if c is not None]
        if any("." in c for c in head):
            known["dotted"] = True
        else:
            query["dotted"] = pl.col("code").str.contains(".", literal=True).any()
        if gold_docs is None:
            if any(c.strip() for c in head):
                known["coded"] = True
                del query["coded"]
            else:
                query["coded"] = (pl.col("code").str.strip_chars() != "").any()
    found = value.select(**query).row(0, named=True) | known
    alone = found["null_docs"] > 0 or not found.get("coded", found.get("inside"))
    return (*layout, found.get("dotted")), found.get("docs") or [], alone


#: The rows of a larger frame :func:`_facts` looks at first, in Python.
_HEAD = 64

#: A frame of at most this many rows is looked at in Python (:func:`_small_facts`): a Polars
#: query costs about 0.1 ms whatever its size, a batch of a few documents a few microseconds.
_SMALL = 2_000


def _small_facts(
    frame: pl.DataFrame, layout: tuple, *, gold_docs: list[str] | None
) -> tuple[tuple, list[str], bool]:
    """:func:`_facts` of a small frame whose ``doc_id`` is text, in Python: the same facts."""
    docs = frame.get_column("doc_id").to_list()
    codes = frame.get_column("code").to_list() if "code" in frame.schema else []
    text = frame.schema.get("code") == pl.String
    dotted = any(c is not None and "." in c for c in codes) if text else None
    null_docs = None in docs
    if gold_docs is not None:
        return (*layout, dotted), [], null_docs or not set(gold_docs).issuperset(docs)
    if text:
        coded = any(c is not None and c.strip() for c in codes)
    else:
        coded = any(c is not None for c in codes)
    distinct = [d for d in dict.fromkeys(docs) if d is not None]
    return (*layout, dotted), distinct, null_docs or not coded


def _joined_inputs(values: list[pl.DataFrame | memory.Dense]) -> pl.DataFrame | memory.Dense:
    """A chunk's batches of one input as one (their layouts are the same: :func:`_layout`)."""
    if len(values) == 1:
        return values[0]
    if isinstance(values[0], memory.Dense):
        return memory.Dense(
            np.concatenate([v.matrix for v in values]),
            values[0].codes,
            tuple(itertools.chain.from_iterable(v.doc_ids for v in values)),
        )
    return pl.concat(values, how="vertical")


def _naming_batch(message: str, batches: list[_Batch]) -> str:
    """A chunk's error naming the batch (update call) of the document it names: the first
    batch holding a document the message names, or every batch of the chunk."""
    if "document " in message:
        for batch in batches:
            if any(f"document {preview_value(d)}" in message for d in batch.docs):
                return f"batch {batch.number}: {message}"
    return f"{_numbered(tuple(b.number for b in batches))}: {message}"


def _numbered(numbers: tuple[int, ...]) -> str:
    if len(numbers) == 1:
        return f"batch {numbers[0]}"
    return f"batches {numbers[0]}-{numbers[-1]}"
