"""The stages of an evaluation, each composed once: the Snakemake scripts and the CLI both make
one call per stage, so a number from ``snakemake`` and from ``hieval evaluate`` is the same
number. Functions take the paths the workflow's rules declare, keyword by keyword.

Stages: :func:`build_hierarchy` → :func:`normalize_file` (gold, then each model) →
[:func:`split_by_document` → :func:`icm_weights`] → :func:`count_model` → [:func:`gather_counts`]
→ :func:`model_metrics` → :func:`final_reports`. The workflow runs the bracketed ones always (one
shard by default), so that a sharded and an unsharded run are the same jobs; the CLI counts
each model whole and skips them.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from hieval import __version__, codesystem, paths
from hieval.atomic import atomic_path, final_path, write_parquet, write_text
from hieval.checksums import sha256_file
from hieval.conventions.runs import system_rows
from hieval.conventions.stage import read_notes
from hieval.engine.counts import evaluated_levels
from hieval.engine.driver import (
    document_groups,
    encode_labels,
    evaluate_labels,
    gold_weights,
)
from hieval.engine.icm import IcmParams
from hieval.engine.keys import LEAF, ROWS_PER_SLICE, Labels, label_codes
from hieval.engine.lca import COMPILED_FROM_LABELS, prefetch_compiled
from hieval.errors import CodeError, HievalError, InputError, preview
from hieval.hierarchy.cache import ANCESTORS_FILE, CACHED_SOURCES, LEVELS_FILE, cached_tables
from hieval.hierarchy.icd10 import SOURCE as ICD10_SOURCE
from hieval.hierarchy.icd10 import cached_icd10_table
from hieval.hierarchy.sources import DOWNLOADS, check_cached, load_source
from hieval.hierarchy.table import (
    LevelTable,
    read_level_table,
    validate,
    write_level_table,
)
from hieval.hints import setting
from hieval.inputs.counted import COUNTED_CODES_KEY, counted_codes
from hieval.inputs.dense_scores import read_reference, read_scores
from hieval.inputs.handoff import distinct_values
from hieval.inputs.options import (
    DEFAULT_MALFORMED_CODES,
    DEFAULT_THRESHOLD,
    DEFAULT_UNKNOWN_DOCS,
    TUNE,
    LabelOptions,
    TunedThresholds,
)
from hieval.inputs.policies import coverage_warning
from hieval.inputs.record import UNSCORED_SELECTION
from hieval.metrics.propensity import TrainPropensities
from hieval.metrics.ranking import DEFAULT_KS, encode, score_rows
from hieval.metrics.tidy import model_rows
from hieval.metrics.tuning import DEFAULT_METHOD, DEFAULT_MIN_SUPPORT, tune
from hieval.metrics.uncertainty.settings import Settings
from hieval.reports import changes, html, paper_tables
from hieval.reports.error_sections import read_tables
from hieval.reports.frequency import frequency_bins, train_frequencies
from hieval.reports.history import append_history, history_rows, replicate_table
from hieval.reports.paper_layouts import layout_tables
from hieval.reports.summary import combine, node_report, write_csv, write_reports
from hieval.resources import Resources, default_duckdb_limit, label_rows, parse_bytes

if TYPE_CHECKING:
    import numpy as np

    from hieval.inputs.dense_scores import DenseScores
    from hieval.inputs.record import InputRecord
    from hieval.metrics.uncertainty.ranking import RankingUnits
    from hieval.metrics.uncertainty.units import Layout, Units

log = logging.getLogger(__name__)


def build_hierarchy(
    source: str,
    path: str | Path | None,
    *,
    levels_out: str | Path,
    ancestors_out: str | Path,
    sha256: str | None = None,
    max_level: str | None = None,
    cache_dir: str | Path | None = None,
    tables_cache: str | Path | None = None,
) -> LevelTable:
    """Load a hierarchy source, validate it, and write the level and ancestor tables.

    A downloaded source is re-checked against its pin first (``sha256``, else the download's
    own), so a cached file that was replaced or truncated is refused here, by the workflow and
    the CLI alike, instead of being read as a smaller tree. ``max_level``, when given, must be
    one of the hierarchy's levels: a user's tree has its levels known only now, and checking
    here stops the run before any file is normalised.

    The ``icd10`` tree (about 295,000 nodes) is built once into ``cache_dir`` (validated
    there) and its tables copied from it on every later run; without ``cache_dir`` it is
    built in memory.

    The ICD-9 sources (``package``, ``cms``, ``cophe``) are likewise built and validated once
    into ``tables_cache`` (:mod:`hieval.hierarchy.cache`: keyed by source, pin and builder code,
    each file checked against its sha256 on every read) and copied from there.
    """
    if path is not None and source in DOWNLOADS:
        check_cached(path, sha256 or DOWNLOADS[source].sha256)
    if source == ICD10_SOURCE and cache_dir is not None:
        table, _leaves, folder = cached_icd10_table(cache_dir)
        if max_level is not None:
            evaluated_levels(table.levels, max_level)
        for name, out in (("levels.parquet", levels_out), ("ancestors.parquet", ancestors_out)):
            with atomic_path(out) as tmp:
                shutil.copyfile(folder / name, tmp)
        log.info("ICD-10 hierarchy from the cache %s: %d nodes", folder, table.frame.height)
        return table
    if source in CACHED_SOURCES and tables_cache is not None:
        table, folder = cached_tables(
            tables_cache, source, path, lambda: _built_table(source, path)
        )
        if max_level is not None:
            evaluated_levels(table.levels, max_level)
        for name, out in ((LEVELS_FILE, levels_out), (ANCESTORS_FILE, ancestors_out)):
            with atomic_path(out) as tmp:
                shutil.copyfile(folder / name, tmp)
        return table
    table = _built_table(source, path, max_level=max_level)
    write_level_table(table, levels_out, ancestors_out)
    return table


def _built_table(source: str, path: str | Path | None, max_level: str | None = None) -> LevelTable:
    """Load and validate a hierarchy source (logging its warnings and size)."""
    log.info("loading hierarchy source %r%s", source, f" from {path}" if path else "")
    table, leaves = load_source(source, path)
    if max_level is not None:
        evaluated_levels(table.levels, max_level)
    # The published CoPHE graph and users' JSON graphs have known irregularities: warn, not stop.
    strict = source in ("package", "cms", ICD10_SOURCE) or (
        source == "file" and Path(path).suffix != ".json"
    )
    for warning in validate(table, leaves, strict=strict):
        log.warning("warning: %s", warning)
    depths = table.frame.group_by("depth").len().sort("depth").rows()
    log.info(
        "%d nodes, %d leaf codes; nodes per depth: %s",
        table.frame.height,
        len(leaves),
        dict(depths),
    )
    return table


@dataclass(frozen=True)
class NormalizeJob:
    """What :func:`normalize_file` reads and writes: one label file (``role`` gold or
    predictions; ``path`` may list several files, MIMIC-IV's ``diagnoses_icd`` and
    ``procedures_icd``, read and validated on their own with the same options and pooled, so
    the record sums them and keeps each file's own record under ``files``), normalised against
    the hierarchy in ``levels_file`` to ``out`` with its record at ``record_out``.

    Predictions are checked against the normalised ``gold`` (a path, or a
    :class:`hieval.pending_file.PendingFile`). ``scores_out`` receives every score of a
    prediction file (for ranking and tuning); ``tuned`` is the JSON of :func:`tune_threshold`,
    whose thresholds then decide. A ``default_threshold`` of ``tune`` with nothing tuned is an
    error for a scored file that has no threshold or top-k of its own: no threshold is silently
    assumed. ``on_fast_path`` (one file only) and ``wait_turn``: see
    :func:`hieval.inputs.normalize.normalize_labels`. ``shown_as`` is how the record (and so
    the reports) name one file the user never saw: an in-memory input of the Python API,
    written to a private file gone after the run. ``coverage=False`` leaves the coverage
    warning to the caller: the Evaluator's batches are judged over all of them at once, not one
    by one. ``levels_file`` may be a table already read (the Evaluator's batches share one).
    """

    path: str | Path | Sequence[str | Path]
    name: str
    role: str
    out: str | Path
    record_out: str | Path
    levels_file: str | Path | LevelTable
    options: LabelOptions
    unknown_codes: str | None
    malformed_codes: str = DEFAULT_MALFORMED_CODES
    gold: str | Path | None = None
    unknown_docs: str = DEFAULT_UNKNOWN_DOCS
    default_threshold: float | str = DEFAULT_THRESHOLD
    resources: Resources | None = None
    scores_out: str | Path | None = None
    tuned: str | Path | None = None
    on_fast_path: Callable[[], None] | None = None
    shown_as: str | None = None
    wait_turn: Callable[[], None] | None = None
    coverage: bool = True


def normalize_file(job: NormalizeJob) -> InputRecord:
    """Normalise one label file (or several pooled) as ``job`` says and write its record
    beside it (:class:`NormalizeJob`)."""
    hierarchy = (
        job.levels_file
        if isinstance(job.levels_file, LevelTable)
        else read_level_table(job.levels_file)
    )
    files = [job.path] if isinstance(job.path, str | Path) else list(job.path)
    if not files:
        raise HievalError(f"{job.name}: no file given")
    if len(files) > 1 and job.scores_out is not None:
        raise HievalError(f"{job.name}: scores are read from one prediction file, not several")
    options = job.options
    must_tune = (
        job.default_threshold == TUNE and options.threshold is None and options.top_k is None
    )
    default_threshold = (
        DEFAULT_THRESHOLD if job.default_threshold == TUNE else job.default_threshold
    )
    thresholds = read_tuned(job.tuned) if job.tuned is not None else None
    one = functools.partial(
        _normalize_one,
        job,
        hierarchy=hierarchy,
        default_threshold=default_threshold,
        thresholds=thresholds,
        fast_path=job.on_fast_path if len(files) == 1 else None,
    )
    if len(files) == 1:
        record = one(files[0], job.out)
        record.path = job.shown_as or record.path
    else:
        from hieval.inputs.normalize import pool_labels

        record = _pooled(one, files, out=job.out, name=job.name, pool=pool_labels)
    if must_tune and job.tuned is None and record.scored_pairs:
        _refuse_untuned(job.name, out=job.out, scores_out=job.scores_out)
    if job.gold is not None:  # predictions, checked against the gold
        found = [
            *_unscored_settings(record, options, default_threshold=default_threshold),
            *(
                _coverage(record, gold=job.gold, out=job.out, scores_out=job.scores_out)
                if job.coverage
                else ()
            ),
        ]
        for warning in found:
            log.warning("warning: %s", warning)
        # tuning logged its own warnings; the record carries them to the report
        record.warnings += [*(thresholds.warnings if thresholds else ()), *found]
    write_text(job.record_out, record.to_json())
    return record


def _normalize_one(
    job: NormalizeJob, file: str | Path, file_out: str | Path, *, hierarchy: LevelTable,
    default_threshold: float, thresholds: TunedThresholds | None,
    fast_path: Callable[[], None] | None,
) -> InputRecord:  # fmt: skip
    """One file of ``job`` normalised to ``file_out``; DuckDB running out of memory becomes
    advice on the memory limit to set."""
    # Here, not at the top: DuckDB, pyarrow and the readers are a tenth of a second of every
    # workflow job's start-up, and most jobs (counts, metrics, reports) read no label file.
    import duckdb

    from hieval.inputs.normalize import normalize_labels

    resources = job.resources or Resources()
    try:
        return normalize_labels(
            file,
            name=job.name,
            role=job.role,
            out=file_out,
            hierarchy=hierarchy,
            options=job.options,
            unknown_codes=job.unknown_codes,
            malformed_codes=job.malformed_codes,
            gold_docs=job.gold,
            unknown_docs=job.unknown_docs,
            default_threshold=default_threshold,
            duckdb_config=resources.duckdb_config(),
            scores_out=job.scores_out,
            tuned=thresholds,
            memory_budget=resources.memory_budget()[0],
            on_fast_path=fast_path,
            wait_turn=job.wait_turn,
        )
    except (duckdb.OutOfMemoryException, HievalError) as exc:
        if not _out_of_memory(exc):
            raise
        raise HievalError(_memory_advice(job.name, Path(file), resources.memory_limit)) from None


def _pooled(
    one: Callable[[str | Path, Path], InputRecord],
    files: list[str | Path],
    *,
    out: str | Path,
    name: str,
    pool: Callable[..., InputRecord],
) -> InputRecord:
    """Normalise each file with ``one`` into a private folder beside ``out``, then ``pool``
    them into ``out``."""
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".pool.", dir=Path(out).parent) as work:
        parts = [
            (one(f, Path(work) / f"{i}.parquet"), Path(work) / f"{i}.parquet")
            for i, f in enumerate(files)
        ]
        return pool(parts, out=out, name=name)


def _refuse_untuned(name: str, *, out: str | Path, scores_out: str | Path | None) -> None:
    """A scored file whose threshold is ``tune`` with nothing tuned: its outputs go, and the
    user hears what to add (no threshold is silently assumed)."""
    for written in (out, scores_out):
        if written is not None:
            Path(written).unlink(missing_ok=True)
    raise InputError(
        f"{name}: threshold is `tune` but no dev predictions were given to tune it on; add "
        f"{setting('dev_predictions', 'PATH', file=name)} with {setting('dev_gold', 'PATH')}, "
        f"or give the model {setting('threshold', 'VALUE', file=name)} or "
        f"{setting('top_k', 'K', file=name)}"
    )


def _unscored_settings(
    record: InputRecord, options: LabelOptions, *, default_threshold: float
) -> list[str]:
    """A threshold or top-k given for predictions without scores decides nothing: say so,
    rather than let the user believe the numbers reflect it."""
    if record.selection != UNSCORED_SELECTION:
        return []
    given = []
    if options.threshold is not None:
        given.append(setting("threshold", options.threshold, file=record.name))
    elif default_threshold != DEFAULT_THRESHOLD:
        given.append(setting("threshold", default_threshold))
    if options.top_k is not None:
        given.append(setting("top_k", options.top_k, file=record.name))
    if not given:
        return []
    return [
        f"{record.name}: {' and '.join(given)} ignored: {record.path} has no scores, so every "
        "code it lists is predicted"
    ]


def _coverage(
    record: InputRecord, *, gold: str | os.PathLike, out: str | Path, scores_out: str | Path | None
) -> list[str]:
    """Whether a model left more than ``COVERAGE_TOLERANCE_PERCENT`` % of the gold's documents
    without a single row (a top-50 file against the full gold): those count as empty
    predictions, and halve F1 without any error, so the report says how many."""
    gold_docs = _doc_ids(gold)
    covered = [_doc_ids(out)] + ([_doc_ids(scores_out)] if scores_out else [])
    missing = gold_docs.height - gold_docs.join(pl.concat(covered), on="doc_id", how="semi").height
    return coverage_warning(record.name, missing=missing, gold=gold_docs.height)


def _doc_ids(path: str | os.PathLike) -> pl.DataFrame:
    """The distinct documents of a normalised label file (one column, ``doc_id``); of a dense
    scores reference, its kept rows' documents."""
    dense = read_reference(path)
    if dense is not None:
        kept = [d for d in dense.docs if d is not None]
        return pl.DataFrame({"doc_id": kept}, schema={"doc_id": pl.String}).unique()
    return distinct_values(path, "doc_id").to_frame()


def read_tuned(path: str | Path) -> TunedThresholds:
    """The thresholds :func:`tune_threshold` wrote (its JSON, and the per-code file it names)."""
    tuned = json.loads(Path(path).read_text("utf-8"))
    per_code = {}
    if tuned["per_code"]:
        codes = paths.read_parquet(Path(path).parent / tuned["per_code_file"])
        per_code = dict(codes.select("code", "threshold").iter_rows())
    return TunedThresholds(
        threshold=tuned["threshold"],
        per_code=per_code,
        source={k: v for k, v in tuned.items() if k not in ("threshold", "warnings")},
        warnings=tuple(tuned.get("warnings", ())),
    )


@dataclass(frozen=True)
class TuningJob:
    """What :func:`tune_threshold` reads and writes for one model: its dev gold and dev
    scores with their records (``dev_records``: the gold's, the predictions'), the test gold
    and its record (to refuse tuning on the test set), the tuning settings (config
    ``tuning``: :func:`hieval.config.tuning_options`), and its three outputs, the per-code
    thresholds (``codes_out``) beside the tuned JSON (``tuned_out``)."""

    model: str
    dev_gold: str | Path
    dev_scores: str | Path
    dev_records: tuple[str | Path, str | Path]
    test_gold: str | Path
    test_record: str | Path
    curve_out: str | Path
    codes_out: str | Path
    tuned_out: str | Path
    per_code: bool = False
    min_support: int = DEFAULT_MIN_SUPPORT
    allow_dev_test_overlap: bool = False
    method: str = DEFAULT_METHOD


def tune_threshold(job: TuningJob) -> float:
    """Tune a model's threshold on its dev scores (:mod:`hieval.metrics.tuning`) and write the
    dev curve, the per-code thresholds and a JSON naming the dev files and their sha256
    (:class:`TuningJob`).

    Tuning on the test set is refused: a dev gold that shares any document (by ``doc_id``)
    with the test gold is an error that says how many and which, since even one shared document
    lets the threshold be chosen on labels it is then scored on. ``allow_dev_test_overlap``
    (the user's explicit choice) turns that into a warning, logged and kept in the tuned JSON's
    ``warnings`` for the report, as is a dev F1 of 0 at every threshold (no signal: the highest
    threshold is chosen by the tie rule, not by the data).
    """
    model, codes_out, tuned_out = job.model, job.codes_out, job.tuned_out
    if Path(codes_out).parent.resolve() != Path(tuned_out).parent.resolve():
        raise ValueError("the per-code thresholds must be written beside the tuned JSON")
    gold_record, pred_record = (json.loads(Path(p).read_text("utf-8")) for p in job.dev_records)
    test = json.loads(Path(job.test_record).read_text("utf-8"))
    dev_frame = paths.read_parquet(job.dev_gold).select("doc_id", "code").sort("doc_id", "code")
    test_frame = paths.read_parquet(job.test_gold).select("doc_id", "code").sort("doc_id", "code")
    overlap = _dev_test_overlap(
        dev_frame, test_frame, model=model, dev_path=gold_record["path"], test_path=test["path"],
        same_file=gold_record["sha256"] == test["sha256"],
    )  # fmt: skip
    warnings = []
    if overlap and not job.allow_dev_test_overlap:
        raise InputError(
            f"{overlap}; tuning a threshold on the test set chooses it on the labels it is "
            "scored on: give a validation split that shares no document with the test gold "
            f"as {setting('dev_gold', 'PATH')}, or set {setting('allow_dev_test_overlap', True)} "
            "to tune anyway"
        )
    if overlap:
        warnings.append(f"{overlap} ({setting('allow_dev_test_overlap', True)} is set)")
    per_code, min_support, method = job.per_code, job.min_support, job.method
    dense = read_reference(job.dev_scores)  # a dense dev matrix is tuned from its blocks
    scores = read_scores(job.dev_scores) if dense is None else None
    if scores is not None and scores.height == 0:
        raise InputError(
            f"{model}: the dev predictions {pred_record['path']} hold no scores; a threshold "
            "can only be tuned on scored predictions"
        )
    if dense is None:
        result = tune(
            encode(dev_frame, scores), per_code=per_code, min_support=min_support, method=method
        )
    else:  # imported here: its numba kernels cost every workflow job's start (~0.2 s)
        from hieval.metrics.blocked_tuning import dense_tune

        result = dense_tune(
            dev_frame, dense, per_code=per_code, min_support=min_support, method=method
        )
    if result.f1 == 0:
        warnings.append(
            f"{model}: dev F1 is 0 at every threshold (no dev prediction is a dev gold label), "
            f"so the threshold {result.threshold:g} is the highest score, not a tuned one; "
            "check that the dev predictions and the dev gold belong together"
        )
    for warning in warnings:
        log.warning("warning: %s", warning)
    write_parquet(result.curve, job.curve_out)
    write_parquet(result.per_code, codes_out)
    tuned = {
        "model": model,
        "threshold": result.threshold,
        "dev_f1": result.f1,
        "dev_gold": gold_record["path"],
        "dev_gold_sha256": gold_record["sha256"],
        "dev_predictions": pred_record["path"],
        "dev_predictions_sha256": pred_record["sha256"],
        "per_code": result.per_code.height,
        "per_code_file": Path(codes_out).name,  # beside this JSON
        "tuning": {"per_code": per_code, "min_support": min_support, "method": method},
        "warnings": warnings,
    }
    write_text(tuned_out, json.dumps(tuned, indent=2, sort_keys=True) + "\n")
    return result.threshold


def _dev_test_overlap(
    dev: pl.DataFrame, test: pl.DataFrame, *, model: str, dev_path: str, test_path: str,
    same_file: bool,
) -> str | None:  # fmt: skip
    """What the dev gold shares with the test gold, in words (None: no document): the same
    file content, the same labels, the same documents, or how many documents and which."""
    shared = sorted(set(dev["doc_id"].to_list()) & set(test["doc_id"].to_list()))
    if not shared:
        return None
    where = f"{model}: the dev gold {dev_path}"
    if same_file or dev.equals(test):
        return f"{where} has the same content as the test gold {test_path}"
    dev_docs, test_docs = dev["doc_id"].n_unique(), test["doc_id"].n_unique()
    if len(shared) == dev_docs == test_docs:
        return f"{where} holds the same {dev_docs} documents as the test gold {test_path}"
    return (
        f"{where} shares {len(shared)} of its {dev_docs} documents with the test gold "
        f"{test_path}: {preview(shared, 5)}"
    )


def _score_ancestors(
    gold: str | Path, scores: str | Path, table: LevelTable, anc: pl.DataFrame, *, scored: bool
) -> pl.DataFrame:
    """The ancestor table the ranking rows pool through: scored codes the hierarchy lacks
    are placed by syntax where that is possible, else left out of the levels."""
    try:
        placed = _placed(gold, scores, table) if scored else None
    except CodeError:
        placed = None  # left out of the levels (counted in the notes)
    return anc if placed is None else pl.concat([anc, placed.select(anc.columns)])


def _propensities(
    train_gold: str | Path | None, params: IcmParams | None
) -> TrainPropensities | None:
    """The training gold's inverse propensities (:mod:`hieval.metrics.propensity`), or None
    without a training gold."""
    if train_gold is None:
        return None
    frame = paths.read_parquet(train_gold, columns=["doc_id", "code"])
    return TrainPropensities.from_gold(frame, params or IcmParams())


def score_metrics(  # noqa: PLR0913 (rule score_metrics' inputs, params and outputs, one keyword each (scripts/score_metrics.py))
    *,
    model: str,
    gold: str | Path,
    scores: str | Path,
    record: str | Path,
    levels_file: str | Path,
    ancestors: str | Path,
    max_level: str | None,
    ks: tuple[int, ...] = DEFAULT_KS,
    metrics_out: str | Path,
    notes_out: str | Path,
    train_gold: str | Path | None = None,
    params: IcmParams | None = None,
    bootstrap: Settings | None = None,
    units_out: str | Path | None = None,
    threads: int | None = None,
) -> pl.DataFrame:
    """One model's rows from its scores: ranking (leaf and each evaluated level), calibration,
    and its tuned threshold (from its input ``record``); and the notes the report shows. With
    the normalised ``train_gold``, the propensity-scored rows too (propensity parameters from
    ``params``). With ``bootstrap`` settings (replicates > 0) and ``units_out``, a dense
    model's bootstrap units are computed in the same reads of its matrix and written there
    for :func:`uncertainty` (:mod:`hieval.metrics.uncertainty.unit_files`), on at most
    ``threads`` threads (None: the cores this process may use)."""
    table = read_level_table(levels_file)
    system = codesystem.of_table(table)
    levels = evaluated_levels(table.levels, system.resolve_max_level(table.levels, max_level))
    tuned = json.loads(Path(record).read_text("utf-8")).get("tuned_threshold") or {}
    dense = read_reference(scores)
    if dense is not None and train_gold is None:  # by blocks of the matrix, never made long
        from hieval.metrics.blocked_rows import dense_rows_and_units

        gold_frame = paths.read_parquet(gold)
        wanted = units_out is not None and bootstrap is not None and bootstrap.bootstrap > 0
        if units_out is not None:
            Path(units_out).unlink(missing_ok=True)  # an earlier run's: never left to be read
        doc_ids = gold_frame["doc_id"].unique().sort() if wanted else None
        tidy, notes, units = dense_rows_and_units(
            gold_frame, dense, model=model, ks=ks, levels=levels,
            ancestors=_score_ancestors(
                gold, scores, table, paths.read_parquet(ancestors), scored=True
            ),
            threshold=tuned.get("threshold"),
            weights=_bootstrap_weights(doc_ids, bootstrap) if wanted else None, threads=threads,
        )  # fmt: skip
        if units is not None:
            from hieval.metrics.uncertainty.unit_files import save_units

            plan = _dense_units_plan(dense, doc_ids, bootstrap, ks, levels)
            save_units(units_out, units, plan=plan)
        write_parquet(tidy, metrics_out)
        write_text(notes_out, json.dumps(notes, indent=2, sort_keys=True) + "\n")
        return tidy
    score_frame = read_scores(scores)
    if score_frame.height:
        gold_frame = paths.read_parquet(gold)
        anc = _score_ancestors(gold, scores, table, paths.read_parquet(ancestors), scored=True)
    else:  # hard predictions: nothing is ranked, so the gold (at 1000x, 0.4 GB) is not read
        gold_frame, anc = pl.DataFrame(schema={"doc_id": pl.String, "code": pl.String}), None
    tidy, notes = score_rows(
        gold_frame,
        score_frame,
        model=model,
        ks=ks,
        ancestors=anc,
        levels=levels,
        threshold=tuned.get("threshold"),
        propensities=_propensities(train_gold, params) if score_frame.height else None,
    )
    write_parquet(tidy, metrics_out)
    write_text(notes_out, json.dumps(notes, indent=2, sort_keys=True) + "\n")
    return tidy


def _dense_units_plan(
    dense: DenseScores,
    doc_ids: pl.Series,
    settings: Settings,
    ks: Sequence[int],
    levels: Sequence[str],
) -> dict:
    """The plan a dense model's kept units are checked against
    (:func:`hieval.metrics.uncertainty.unit_files.units_plan`)."""
    from hieval.metrics.uncertainty.unit_files import units_plan

    return units_plan(
        scores=dense.to_json(), doc_ids=doc_ids.to_list(), seed=settings.seed,
        bootstrap=settings.bootstrap, ks=ks, levels=levels,
    )  # fmt: skip


def _out_of_memory(exc: BaseException) -> bool:
    """Whether DuckDB ran out of memory, directly or behind a reader's own error message."""
    import duckdb  # loaded already: only DuckDB's work can run out of its memory

    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, duckdb.OutOfMemoryException):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _memory_advice(name: str, path: Path, limit: str | None) -> str:
    """One line for DuckDB running out of memory: the file, the limit, and a limit that fits.

    Normalising a CSV file of S bytes took about 16 MB + 3 S in DuckDB (24 MB for 2.6 MB,
    96 MB for 28 MB, 2 threads); the advice rounds that up to 64 MB + 4 S, more for Parquet,
    whose compression hides the rows' size, and never below twice the limit that failed (a
    file that should have fitted did not, so the estimate is not to be trusted for it).
    """
    size = path.stat().st_size if path.is_file() else 0
    factor = 4 if path.suffix.lower() not in (".parquet", ".npz", ".npy") else 12
    current = limit or default_duckdb_limit()
    need = max(64 * 10**6 + factor * size, 2 * parse_bytes(current))
    flag = setting("memory_limit")
    bound = f"{flag} {limit}" if limit else f"the default limit {current} ({flag} unset)"
    return (
        f"{name}: DuckDB ran out of memory normalising {path} ({size / 1e6:.1f} MB) under "
        f"{bound}; raise {flag}, to about {math.ceil(need / 1e6)}MB or more for this file"
    )


def _placed(gold: str | Path, predictions: str | Path, table: LevelTable) -> pl.DataFrame | None:
    """Ancestor rows for codes of these files that the hierarchy lacks (placed by syntax), but
    for the predictions' counted codes (:mod:`hieval.inputs.counted`), which are placed nowhere."""
    dense = read_reference(predictions)
    if dense is not None:  # a dense matrix's scores: its columns' codes
        listed = pl.Series([c for c in dense.codes if c is not None], dtype=pl.String)
        codes = pl.concat([label_codes(gold), listed])
        return codesystem.placed_codes(codes, table, counted=frozenset(dense.counted))
    codes = pl.concat([label_codes(path) for path in (gold, predictions)])  # the dictionaries
    return codesystem.placed_codes(codes, table, counted=counted_codes(predictions))


def icm_weights(
    gold: str | Path,
    predictions: str | Path,
    *,
    levels_file: str | Path,
    ancestors: str | Path,
    out: str | Path,
    params: IcmParams,
) -> pl.DataFrame:
    """ICM node weights (IC, Δ, inverse propensity) from the whole gold, written to ``out``.

    They depend on every gold document, so a sharded run computes them once per model (the
    model's own codes outside the hierarchy are placed first, so that they weigh too) and
    every shard reads them.
    """
    table = read_level_table(levels_file)
    weights = gold_weights(
        gold,
        ancestors,
        levels=table.levels,
        params=params,
        predictions=predictions,
        placed=_placed(gold, predictions, table),
    )
    write_parquet(weights, out)
    log.info("%d node weights", weights.height)
    return weights


def count_model(  # noqa: PLR0913 (rule count's inputs, params and outputs, one keyword each (scripts/count.py))
    gold: str | Path,
    predictions: str | Path,
    *,
    levels_file: str | Path,
    ancestors: str | Path,
    max_level: str | None,
    nodes_out: str | Path,
    docs_out: str | Path,
    item_sums_out: str | Path,
    params: IcmParams,
    weights: str | Path | None = None,
    resources: Resources | None = None,
    on_encoded: Callable[[Labels, pl.Series], None] | None = None,
) -> pl.DataFrame:
    """Count one model (or one shard of its documents); write the additive per-node,
    per-document and per-item tables.

    Per-item sums (ICM, HF, PROP-F) use the whole hierarchy up to the root and the node
    ``weights`` of :func:`icm_weights` (computed here from this gold when not given: right for
    an unsharded run only). ``on_encoded`` is handed the encoded labels and the distinct codes
    the encoder read, before they are counted (the CLI's error analysis takes its errors from
    them: :class:`hieval.analysis_stage.Encoded`).
    """
    table = read_level_table(levels_file)
    resources = resources or Resources()
    max_level = codesystem.of_table(table).resolve_max_level(table.levels, max_level)
    evaluated = evaluated_levels(table.levels, max_level)
    rows = label_rows(gold) + label_rows(predictions)
    resources.check_budget(rows)
    if rows >= COMPILED_FROM_LABELS:
        prefetch_compiled()  # LCA-F's kernel loads while the labels are encoded
    counted = counted_codes(predictions)
    read: list[pl.Series] = []  # the codes the encoder read, as it hands them to place

    def placed(codes: pl.Series) -> pl.DataFrame | None:
        read.append(codes)
        return codesystem.placed_codes(codes, table, counted=counted)

    labels = encode_labels(
        gold, predictions, ancestors, levels=table.levels, placed=placed, threads=resources.threads
    )
    if on_encoded is not None:
        on_encoded(labels, read[0])  # the first: those the kept tables name, if read from them
    result = evaluate_labels(
        labels,
        levels=table.levels,
        evaluated=evaluated,
        params=params,
        weights=paths.read_parquet(weights) if weights is not None else None,
        threads=resources.threads,
        docs_out=Path(docs_out),
    )
    write_parquet(result.nodes, nodes_out)
    write_parquet(result.item_sums, item_sums_out)
    log.info(
        "%d (family, level, node) rows over levels %s; %d documents; %d ICM items",
        result.nodes.height,
        evaluated,
        result.documents,
        result.item_sums.height,
    )
    return result.nodes


def split_by_document(source: str | Path, outputs: list[str | Path]) -> list[int]:
    """Split a label table into ``len(outputs)`` shards by a stable hash of ``doc_id``.

    md5 is fixed forever (unlike a library's internal hash), so a document lands in the same
    shard on every machine and version; all of a document's rows land together, which is what
    makes per-document counts add up exactly. The hash is taken once per distinct document (in
    DuckDB, as ``md5_number(doc_id) % n``); the table is streamed in slices, each appended to
    its shards' files, so memory stays bounded (the input's order, sorted for a normalised
    table, is kept). Returns the rows per shard. Each shard keeps the source's counted codes
    (:mod:`hieval.inputs.counted`), so that no shard's count places them.
    """
    import duckdb
    import pyarrow.parquet as pq

    con = duckdb.connect()
    shard_of = con.sql(
        "SELECT doc_id, (md5_number(doc_id) % $n::UHUGEINT)::BIGINT AS shard "
        "FROM (SELECT DISTINCT doc_id FROM read_parquet($source))",
        params={"n": len(outputs), "source": paths.duckdb_path(source)},
    ).pl()
    sizes = [0] * len(outputs)
    counted = pq.read_schema(source).metadata or {}
    counted = {k: v for k, v in counted.items() if k == COUNTED_CODES_KEY}
    with contextlib.ExitStack() as stack:
        tmps = [stack.enter_context(atomic_path(out)) for out in outputs]
        writers: list[pq.ParquetWriter | None] = [None] * len(outputs)
        scan = paths.scan_parquet(source)
        for batch in scan.collect_batches(chunk_size=ROWS_PER_SLICE):
            batch = batch.join(shard_of, on="doc_id", how="left", maintain_order="left")
            for index, part in batch.partition_by("shard", as_dict=True).items():
                table = part.drop("shard").to_arrow()
                if counted:
                    table = table.replace_schema_metadata(counted)
                shard = int(index[0])
                if writers[shard] is None:
                    writers[shard] = stack.enter_context(
                        pq.ParquetWriter(tmps[shard], table.schema, compression="zstd")
                    )
                writers[shard].write_table(table)
                sizes[shard] += part.height
        empty = scan.head(0).collect()
        for tmp, writer in zip(tmps, writers, strict=True):
            if writer is None and counted:  # an empty shard, with the columns and the codes
                pq.write_table(empty.to_arrow().replace_schema_metadata(counted), tmp)
            elif writer is None:  # no document hashed here: an empty shard, with the columns
                empty.write_parquet(tmp)
    return sizes


def gather_counts(
    *,
    nodes: list[str | Path],
    docs: list[str | Path],
    item_sums: list[str | Path],
    nodes_out: str | Path,
    docs_out: str | Path,
    item_sums_out: str | Path,
) -> None:
    """Reduce shard count tables exactly (:func:`reduce_counts`), as an unsharded run
    writes them."""
    node_table, doc_table, item_table = reduce_counts(
        [paths.read_parquet(p) for p in nodes],
        [paths.read_parquet(p) for p in docs],
        [paths.read_parquet(p) for p in item_sums],
    )
    write_parquet(node_table, nodes_out)
    write_parquet(doc_table, docs_out)
    write_parquet(item_table, item_sums_out)
    log.info("gathered %d shards", len(nodes))


def reduce_counts(
    nodes: list[pl.DataFrame],
    docs: list[pl.DataFrame],
    item_sums: list[pl.DataFrame],
    *,
    in_order: bool = False,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The count tables of disjoint sets of documents (shards, or the Evaluator's batches)
    as one: node counts summed, document and item rows concatenated, all sorted as an
    unsharded run sorts them. ``in_order``: the document and item parts are each sorted and
    given in document order, their documents apart, so their concatenation is sorted already
    (a sort of the Evaluator's 3M document rows at 100x took 0.2 s)."""
    node_table = (
        pl.concat(nodes)
        .group_by("family", "level", "node")
        .agg(pl.col("tp", "fp", "fn", "n_gold", "n_pred").sum())
        .sort("family", "level", "node")
    )
    if in_order:
        return node_table, pl.concat(docs), pl.concat(item_sums)
    return (
        node_table,
        pl.concat(docs).sort("doc_id", "family", "level"),
        pl.concat(item_sums).sort("doc_id"),
    )


def model_metrics(  # noqa: PLR0913 (rule metrics' inputs, params and outputs, one keyword each (scripts/metrics.py))
    *,
    model: str,
    nodes: str | Path,
    docs: str | Path,
    item_sums: str | Path,
    levels_file: str | Path,
    params: IcmParams,
    label_set: str,
    metrics_out: str | Path,
    nodes_report_out: str | Path,
) -> pl.DataFrame:
    """One model's tidy metric rows (count families, diagnoses and procedures apart for ICD-9
    hierarchies, ICM and the comparison metrics) and its per-node over/under-prediction
    report, from the count tables the rule declares."""
    table = read_level_table(levels_file)
    node_table = paths.read_parquet(nodes)
    # The comparison suite reads the flat rows of the per-document table alone: the other
    # families' rows are 8 of every 9 (at 1000x MIMIC-III, 30M rows and 2 GB read for nothing).
    flat_docs = (
        paths.scan_parquet(docs)
        .filter(pl.col("family") == "flat")
        .select("doc_id", "family", "tp", "fp", "fn")
        .collect()
    )
    tidy = model_rows(
        node_table,
        flat_docs,
        paths.read_parquet(item_sums),
        model=model,
        levels=table.levels[:-1],
        params=params,
        label_set=label_set,
        n_labels=leaf_count(table) if label_set == "hierarchy" else None,
        split_kinds=system.node_kind
        if (system := codesystem.of_table(table)).splits_kinds
        else None,
    )
    # A stable row order: the intermediate file is reproducible bit for bit, like the reports.
    write_parquet(tidy, metrics_out)
    write_csv(node_report(node_table, table.frame, table.levels), nodes_report_out)
    return tidy


@dataclass(frozen=True)
class ModelFiles:
    """Where one model's stages write, from its normalised labels to its metric rows: the same
    paths whether one job runs them all (``shards: 1``, the CLI) or each is a job of its own."""

    nodes: str | Path
    docs: str | Path
    item_sums: str | Path
    metrics: str | Path
    nodes_report: str | Path
    ranking: str | Path
    notes: str | Path
    #: A dense model's bootstrap units, computed by the score stage when the run has
    #: replicates (:func:`score_metrics`' ``units_out``); None: not kept.
    dense_units: str | Path | None = None


def count_and_score(  # noqa: PLR0913 (rule evaluate_model's inputs, params and outputs, one keyword each (scripts/evaluate_model.py))
    *,
    model: str,
    gold: str | Path,
    labels: str | Path,
    scores: str | Path,
    record: str | Path,
    levels_file: str | Path,
    ancestors: str | Path,
    max_level: str | None,
    params: IcmParams,
    label_set: str,
    ks: tuple[int, ...] = DEFAULT_KS,
    out: ModelFiles,
    resources: Resources | None = None,
    train_gold: str | Path | None = None,
    bootstrap: Settings | None = None,
    on_encoded: Callable[[Labels, pl.Series], None] | None = None,
    on_counted: Callable[[], object] | None = None,
) -> None:
    """One model's counts (:func:`count_model`), metric rows (:func:`model_metrics`) and
    score rows (:func:`score_metrics`) from its normalised ``labels``, ``scores`` and input
    ``record``: an unsharded evaluation, in one process (ICM's node weights computed here from
    the whole gold, as :func:`count_model` does without ``weights``); ``bootstrap``: the
    run's uncertainty settings (a dense model's units for them are kept in ``out``);
    ``on_encoded``: see :func:`count_model`; ``on_counted``: called once the counts are
    written, before the rows."""
    count_model(
        gold,
        labels,
        levels_file=levels_file,
        ancestors=ancestors,
        max_level=max_level,
        nodes_out=out.nodes,
        docs_out=out.docs,
        item_sums_out=out.item_sums,
        params=params,
        resources=resources,
        on_encoded=on_encoded,
    )
    if on_counted is not None:
        on_counted()
    model_rows_and_scores(
        model=model,
        gold=gold,
        scores=scores,
        record=record,
        levels_file=levels_file,
        ancestors=ancestors,
        max_level=max_level,
        params=params,
        label_set=label_set,
        ks=ks,
        out=out,
        train_gold=train_gold,
        bootstrap=bootstrap,
        threads=resources.threads if resources is not None else None,
    )


def model_rows_and_scores(  # noqa: PLR0913 (model_metrics's and score_metrics's inputs, one keyword each)
    *,
    model: str,
    gold: str | Path,
    scores: str | Path,
    record: str | Path,
    levels_file: str | Path,
    ancestors: str | Path,
    max_level: str | None,
    params: IcmParams,
    label_set: str,
    ks: tuple[int, ...] = DEFAULT_KS,
    out: ModelFiles,
    train_gold: str | Path | None = None,
    bootstrap: Settings | None = None,
    threads: int | None = None,
) -> None:
    """One model's metric rows (:func:`model_metrics`, from its count tables in ``out``) and
    score rows (:func:`score_metrics`): what :func:`count_and_score` does once counted, and
    :meth:`hieval.Evaluator.compute` once its batches' counts are reduced."""
    model_metrics(
        model=model,
        nodes=out.nodes,
        docs=out.docs,
        item_sums=out.item_sums,
        levels_file=levels_file,
        params=params,
        label_set=label_set,
        metrics_out=out.metrics,
        nodes_report_out=out.nodes_report,
    )
    score_metrics(
        model=model,
        gold=gold,
        scores=scores,
        record=record,
        levels_file=levels_file,
        ancestors=ancestors,
        max_level=max_level,
        ks=ks,
        metrics_out=out.ranking,
        notes_out=out.notes,
        train_gold=train_gold,
        params=params,
        bootstrap=bootstrap,
        units_out=out.dense_units,
        threads=threads,
    )


def final_reports(  # noqa: PLR0913 (rule report's inputs, params and outputs, one keyword each (scripts/report.py))
    *,
    metrics: list[str | Path],
    records: list[str | Path],
    levels_file: str | Path,
    max_level: str | None,
    models: list[str],
    hierarchy: str,
    out_dir: str | Path,
    intervals: str | Path | None = None,
    comparisons: str | Path | None = None,
    systems: dict[str, str] | None = None,
    notes: list[str | Path] = (),
    conventions: str | Path | None = None,
) -> pl.DataFrame:
    """The tables over all models (metrics.parquet/.csv, summary.csv, summary.md) in
    ``out_dir``, from each model's metric rows and every input record; ``intervals`` and
    ``comparisons`` (:func:`uncertainty`'s files) add intervals and significance marks to
    summary.md, ``systems`` (model → system, the sheet's column) the mean ± sd over runs and
    systems.parquet (and, with ``conventions``, conventions_systems.parquet); ``notes`` are
    the score notes of :func:`score_metrics`."""
    table = read_level_table(levels_file)
    system = codesystem.of_table(table)
    evaluated = evaluated_levels(table.levels, system.resolve_max_level(table.levels, max_level))
    tidy = combine([paths.read_parquet(p) for p in metrics], evaluated, models)
    write_reports(
        tidy,
        out_dir,
        levels=evaluated,
        models=models,
        records=[json.loads(Path(p).read_text("utf-8")) for p in records],
        hierarchy=hierarchy,
        code_system=f"{system.name} ({system.title})",
        intervals=paths.read_parquet(intervals) if intervals else None,
        comparisons=paths.read_parquet(comparisons) if comparisons else None,
        systems=systems or None,
        notes=[json.loads(Path(p).read_text("utf-8")) for p in notes],
        conventions=(paths.read_parquet(conventions), read_notes(conventions))
        if conventions
        else None,
    )
    if systems and conventions:
        # each convention's mean ± sd over a system's runs, with its paper's ddof
        write_parquet(
            system_rows(paths.read_parquet(conventions), systems),
            Path(out_dir) / "conventions_systems.parquet",
        )
    log.info("%d metric rows for %d models", tidy.height, len(models))
    return tidy


@dataclass(frozen=True)
class ReportJob:
    """What :func:`publish_reports` reads and writes: the tidy table of all models
    (``tidy``), each model's node table (``nodes``) and input records (``records``), the
    hierarchy (``levels_file``, its deepest evaluated level ``max_level`` and its description
    ``hierarchy``), the run's ``settings`` as the report shows them; the four outputs; and,
    when the run has them, the training gold (long-tail bins), intervals and comparisons,
    tuning curves, the zoo's history file, the model → system map, the score notes and the
    folder of the error-analysis tables."""

    tidy: str | Path
    nodes: dict[str, str | Path]
    records: list[str | Path]
    levels_file: str | Path
    max_level: str | None
    hierarchy: str
    settings: dict
    html_out: str | Path
    tex_out: str | Path
    markdown_out: str | Path
    figures_out: str | Path
    train_gold: str | Path | None = None
    intervals: str | Path | None = None
    comparisons: str | Path | None = None
    curves: dict[str, str | Path] | None = None
    history: str | Path | None = None
    systems: dict[str, str] | None = None
    notes: list[str | Path] = ()
    analysis_dir: str | Path | None = None
    confidence: float | None = None  # of the intervals, kept with them in the history
    replicates: str | Path | None = None  # the headline rows' replicates, kept in the history
    summary_md: str | Path | None = None  # opens with the changes since the last evaluation
    #: The layout of tables.tex/.md (``report.paper_table``: cophe, caml, edin) and the
    #: conventions.parquet the caml and edin layouts (and the report's Conventions) read.
    paper_table: str = "cophe"
    conventions: str | Path | None = None
    conventions_tests: str | Path | None = None


def publish_reports(job: ReportJob) -> None:
    """The reports people read, from the tidy table of all models: paper tables (LaTeX and
    Markdown; with ``systems``, model → system, one row per system holding the mean over its
    runs) and the self-contained HTML report; with ``history``, this run's headline rows are
    added to the zoo's history first (only evaluations with a new key); ``notes`` (the score
    notes of :func:`score_metrics`) put the share of pairs scored beside AUC, Brier and ECE."""
    table = read_level_table(job.levels_file)
    system = codesystem.of_table(table)
    evaluated = evaluated_levels(
        table.levels, system.resolve_max_level(table.levels, job.max_level)
    )
    metrics = paths.read_parquet(job.tidy)
    models = list(job.nodes)
    records = [json.loads(Path(p).read_text("utf-8")) for p in job.records]
    tables = _paper_tables(job, metrics, levels=evaluated, models=models)
    write_text(job.tex_out, paper_tables.to_latex(tables))
    write_text(job.markdown_out, paper_tables.to_markdown(tables))
    node_tables = {model: paths.read_parquet(path) for model, path in job.nodes.items()}
    past = current = None
    intervals = paths.read_parquet(job.intervals) if job.intervals else None
    if job.history is not None:
        current = history_rows(
            metrics,
            records=records,
            settings=job.settings,
            version=__version__,
            code_system=system.name,
            hierarchy_sha256=sha256_file(job.levels_file),
            bootstrap=_bootstrap(intervals, job),
        )
        past = append_history(job.history, current)
        if job.summary_md is not None:
            changes.open_summary(job.summary_md, past, current)
    bins = None
    if job.train_gold is not None:
        bins = frequency_bins(node_tables, train_frequencies(paths.read_parquet(job.train_gold)))
    page, drawn = html.render(
        html.ReportInputs(
            tidy=metrics,
            nodes={
                model: node_report(frame, table.frame, table.levels)
                for model, frame in node_tables.items()
            },
            levels_frame=table.frame,
            levels=evaluated,
            all_levels=table.levels,
            models=models,
            records=records,
            hierarchy=f"{job.hierarchy}; code system {system.name} ({system.title})",
            version=__version__,
            settings=job.settings,
            intervals=intervals,
            comparisons=paths.read_parquet(job.comparisons) if job.comparisons else None,
            frequency_bins=bins,
            history=past,
            current=current,
            curves={model: paths.read_parquet(path) for model, path in (job.curves or {}).items()},
            systems=job.systems or {},
            notes=[json.loads(Path(p).read_text("utf-8")) for p in job.notes],
            analysis=(
                read_tables(job.analysis_dir, models) if job.analysis_dir is not None else None
            ),
            conventions=(
                (paths.read_parquet(job.conventions), read_notes(job.conventions))
                if job.conventions is not None
                else None
            ),
            conventions_tests=(
                paths.read_parquet(job.conventions_tests) if job.conventions_tests else None
            ),
        )
    )
    write_text(job.html_out, page)
    for name, svg in drawn.items():
        write_text(Path(job.figures_out) / f"{name}.svg", svg)
    shown = (final_path(path) for path in (job.html_out, job.tex_out, job.markdown_out))
    log.info("wrote %s, %s, %s and %d figures", *shown, len(drawn))


def _paper_tables(
    job: ReportJob, metrics: pl.DataFrame, *, levels: tuple[str, ...], models: list[str]
) -> list[paper_tables.Table]:
    """tables.tex/.md's tables in the layout ``job.paper_table`` asks for: the CoPHE paper's
    from the tidy rows, CAML's or Edin et al.'s from conventions.parquet."""
    if job.paper_table == "cophe":
        return paper_tables.paper_tables(
            metrics, levels=levels, models=models, systems=job.systems or None
        )
    if job.conventions is None:
        raise HievalError(
            f"report.paper_table {job.paper_table} lays out conventions.parquet, which this run "
            "did not write; use paper_table cophe or run the conventions stage"
        )
    return layout_tables(
        paths.read_parquet(job.conventions),
        layout=job.paper_table,
        models=models,
        systems=job.systems or None,
    )


def _bootstrap(intervals: pl.DataFrame | None, job: ReportJob) -> tuple | None:
    """What the history keeps of the bootstrap: the intervals, their confidence and, when
    the uncertainty stage wrote them, the headline rows' replicates."""
    if intervals is None:
        return None
    if job.replicates is None:
        return (intervals, job.confidence)
    return (intervals, job.confidence, paths.read_parquet(job.replicates))


def leaf_count(table: LevelTable) -> int:
    """The number of leaves: nodes that are no other node's ancestor."""
    anc = table.ancestors()
    internal = anc.filter(pl.col("ancestor") != pl.col("code"))["ancestor"].unique()
    return table.frame.filter(~pl.col("code").is_in(internal.implode())).height


@dataclass(frozen=True)
class UncertaintyJob:
    """What :func:`uncertainty` reads and writes: the normalised ``gold`` and each model's
    ``predictions``, per-item ICM sums (``item_sums``) and tidy rows (``metrics``), in the
    models' order; the hierarchy (``levels_file``, ``ancestors``, ``max_level``), the ICM
    ``params`` and comparison ``label_set``; the bootstrap and permutation ``settings``; the
    two outputs; the thread bounds (``resources``); and, for scored models, their normalised
    score tables (``scores``), ranking rows (``ranking``), cut-offs (``ks``) and the normalised
    training gold (``train_gold``: the propensity-scored rows' weights)."""

    gold: str | Path
    predictions: dict[str, str | Path]
    item_sums: dict[str, str | Path]
    metrics: dict[str, str | Path]
    levels_file: str | Path
    ancestors: str | Path
    max_level: str | None
    params: IcmParams
    label_set: str
    settings: Settings
    intervals_out: str | Path
    comparisons_out: str | Path
    resources: Resources | None = None
    scores: dict[str, str | Path] | None = None
    ranking: dict[str, str | Path] | None = None
    ks: tuple[int, ...] = DEFAULT_KS
    train_gold: str | Path | None = None
    #: The headline rows' replicates (:func:`hieval.reports.history.replicate_table`), which
    #: the history keeps for the paired interval of the next evaluation's changes.
    replicates_out: str | Path | None = None
    #: Dense models' units kept by the score stage (:attr:`ModelFiles.dense_units`): used
    #: where they were computed for these inputs and settings, else computed again.
    dense_units: dict[str, str | Path] | None = None


def uncertainty(job: UncertaintyJob) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Bootstrap intervals of every model's tidy rows and paired comparisons of every pair of
    models (:mod:`hieval.metrics.uncertainty`), for the models in the order given.

    Reads the normalised labels (not the shards: a document's weight depends on its id alone,
    so the tables are the same for any shard count), each model's per-item sums and its tidy
    rows (the point estimates, exactly as reported). With ``scores`` (normalised score tables)
    and ``ranking`` (:func:`score_metrics`'s rows), a scored model's ranking and calibration
    rows get intervals and comparisons too, ROC-AUC included
    (:mod:`hieval.metrics.uncertainty.ranking`, :mod:`hieval.metrics.uncertainty.auc`).
    """
    # Imported here, as in zoo_units: the uncertainty modules (scipy, numba) load only in the
    # job that computes intervals, not in every job that imports this module.
    from hieval.metrics.uncertainty.tables import uncertainty_tables

    resources, settings = job.resources or Resources(), job.settings
    resources.check_bootstrap(settings.bootstrap, models=len(job.predictions))
    layout, units = zoo_units(
        gold=job.gold,
        predictions=job.predictions,
        item_sums=job.item_sums,
        levels_file=job.levels_file,
        ancestors=job.ancestors,
        max_level=job.max_level,
        params=job.params,
        label_set=job.label_set,
        threads=resources.threads,
    )
    tidy = {model: paths.read_parquet(job.metrics[model]) for model in job.predictions}
    scored = _scored_units(job, layout, tidy) if job.scores and job.ranking else {}
    replicates: dict = {}
    intervals, comparisons = uncertainty_tables(
        tidy,
        units,
        layout=layout,
        settings=settings,
        levels=layout.levels,
        threads=resources.threads,
        ranking=scored,
        replicates_out=replicates,
    )
    write_parquet(intervals, job.intervals_out)
    write_parquet(comparisons, job.comparisons_out)
    if job.replicates_out is not None:
        table = replicate_table(replicates, tidy, seed=settings.seed)
        write_parquet(table, job.replicates_out)
    log.info(
        "%d intervals (%d replicates), %d comparisons (%d permutations)",
        intervals.height,
        settings.bootstrap,
        comparisons.height,
        settings.permutations,
    )
    return intervals, comparisons


def _scored_units(job: UncertaintyJob, layout: Layout, tidy: dict[str, pl.DataFrame]) -> dict:
    """Each scored model's ranking units (:func:`hieval.metrics.uncertainty.ranking.ranking_units`);
    its ranking rows with units are added to its ``tidy`` rows."""
    from hieval.metrics.uncertainty.ranking import ranking_units

    scored = {}
    table = read_level_table(job.levels_file)
    gold_frame, anc = paths.read_parquet(job.gold), paths.read_parquet(job.ancestors)
    propensities = _propensities(job.train_gold, job.params)
    weights = _bootstrap_weights(layout.doc_ids, job.settings)
    for model in job.predictions:
        dense = read_reference(job.scores[model]) if propensities is None else None
        if dense is not None:  # by blocks of its matrix, unless AUC replicates need it long
            from hieval.metrics.blocked_rows import dense_ranking_units

            units = _kept_units(job, model, dense, layout) or dense_ranking_units(
                gold_frame, dense, doc_ids=layout.doc_ids, ks=job.ks, levels=layout.levels,
                ancestors=_score_ancestors(job.gold, job.scores[model], table, anc, scored=True),
                model=model, weights=weights, threads=(job.resources or Resources()).threads,
            )  # fmt: skip
            if units is not None:
                scored[model] = units
                tidy[model] = pl.concat([tidy[model], _with_units(job, model, units)])
                continue
        score_frame = read_scores(job.scores[model])
        if not score_frame.height:
            continue
        scored[model] = ranking_units(
            gold_frame,
            score_frame,
            doc_ids=layout.doc_ids,
            ks=job.ks,
            ancestors=_score_ancestors(job.gold, job.scores[model], table, anc, scored=True),
            levels=layout.levels,
            model=model,
            propensities=propensities,
            weights=weights,
        )
        tidy[model] = pl.concat([tidy[model], _with_units(job, model, scored[model])])
    return scored


def _kept_units(
    job: UncertaintyJob, model: str, dense: DenseScores, layout: Layout
) -> RankingUnits | None:
    """The dense model's units the score stage kept for these inputs and settings, or None."""
    path = (job.dense_units or {}).get(model)
    if path is None or not job.settings.bootstrap:
        return None
    from hieval.metrics.uncertainty.unit_files import load_units

    plan = _dense_units_plan(dense, layout.doc_ids, job.settings, job.ks, layout.levels)
    return load_units(path, plan=plan)


def _bootstrap_weights(doc_ids: pl.Series, settings: Settings) -> Callable[[], np.ndarray | None]:
    """The bootstrap's weights (replicates × ``doc_ids``, the gold's documents sorted), drawn
    on first use and kept: the AUC replicates of a level above the exact plan's cap are
    computed once for all of them (:mod:`hieval.metrics.uncertainty.auc_blocks`). None
    without a bootstrap."""
    from hieval.metrics.uncertainty.weights import doc_keys, poisson_weights

    drawn: list = []

    def weights() -> np.ndarray | None:
        if not settings.bootstrap:
            return None
        if not drawn:
            keys = doc_keys(doc_ids.to_list())
            drawn.append(
                poisson_weights(keys, seed=settings.seed, first=0, count=settings.bootstrap)
            )
        return drawn[0]

    return weights


def _with_units(job: UncertaintyJob, model: str, units) -> pl.DataFrame:
    """The model's ranking rows that have units (so replicates)."""
    rows = paths.read_parquet(job.ranking[model])
    wanted = set(units.keys)
    keys = rows.select("family", "level", "average", "metric").iter_rows()
    return rows.filter(pl.Series([key in wanted for key in keys], dtype=pl.Boolean))


def zoo_units(  # noqa: PLR0913 (the bootstrap's per-document tables from the count stage's files, one keyword each)
    *,
    gold: str | Path,
    predictions: dict[str, str | Path],
    item_sums: dict[str, str | Path],
    levels_file: str | Path,
    ancestors: str | Path,
    max_level: str | None,
    params: IcmParams,
    label_set: str,
    threads: int | None = None,
) -> tuple[Layout, dict[str, Units]]:
    """Every model's per-document tables (:class:`~hieval.metrics.uncertainty.Units`),
    aligned to the gold's documents and the nodes any model reaches: each model's labels are
    encoded and grouped again by the engine driver (the count tables hold sums over
    documents; a bootstrap needs each document apart)."""
    from hieval.metrics.uncertainty.units import Layout, build_units, node_table

    table = read_level_table(levels_file)
    system = codesystem.of_table(table)
    evaluated = evaluated_levels(table.levels, system.resolve_max_level(table.levels, max_level))
    doc_ids = paths.scan_parquet(gold).select(pl.col("doc_id").unique().sort()).collect()["doc_id"]
    tables = {}
    for model, path in predictions.items():
        labels = encode_labels(
            gold, path, ancestors, levels=table.levels, placed=_placed(gold, path, table)
        )
        doc_index = doc_ids.search_sorted(labels.doc_ids).cast(pl.Int64).to_numpy()
        if not doc_ids.gather(doc_index).equals(labels.doc_ids, check_names=False):
            raise HievalError(f"{path}: predictions for documents the gold lacks")
        groups = document_groups(labels, evaluated=evaluated, threads=threads)
        tables[model] = {
            level: node_table(g, labels.space.nodes[level], doc_index)
            for level, g in groups.items()
        }
    nodes = {
        level: pl.concat([t[level]["node"] for t in tables.values()]).unique().sort()
        for level in (LEAF, *evaluated)
    }
    layout = Layout(
        doc_ids=doc_ids,
        levels=evaluated,
        nodes=nodes,
        split_kinds=system.node_kind if system.splits_kinds else None,
        label_set=label_set,
        n_labels=leaf_count(table) if label_set == "hierarchy" else None,
    )
    units = {
        model: build_units(
            tables.pop(model), paths.read_parquet(item_sums[model]), layout=layout, params=params
        )
        for model in predictions
    }
    return layout, units
