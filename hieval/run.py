"""One evaluation, composed once: the stages of ``hieval evaluate`` in order (hierarchy,
normalisation, tuning, counting, metrics, uncertainty, reports) into one folder.

The command line and the Python API (:func:`hieval.evaluate`) both call :func:`evaluate_into`
with an :class:`EvaluateOptions`; they differ only in how they get the options (arguments or
keywords) and where the folder goes (staged into ``--out``, or kept for an
:class:`hieval.Evaluation`). So a number from either is the same number, and there is no second
composition of the stages to drift.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from hieval import hints
from hieval.analysis.groups import read_doc_groups
from hieval.analysis.parts import ErrorPart
from hieval.analysis_stage import Encodings, error_analysis, group_analysis
from hieval.atomic import atomic_path
from hieval.codesystem import DEFAULT_MAX_LEVEL
from hieval.config import (
    TUNE,
    ModelSpec,
    check_tuning,
    gold_options,
    icm_params,
    other_gold_options,
    ranking_ks,
    report_settings,
    tuning_options,
    uncertainty_settings,
)
from hieval.conventions.registry import DEFAULT_PAPER_TABLE
from hieval.conventions.stage import write_conventions
from hieval.conventions.table import check_names, check_paper_table
from hieval.engine.counts import evaluated_levels
from hieval.engine.groups import default_threads
from hieval.engine.icm import IcmParams
from hieval.engine.keys import Source
from hieval.engine.lca import COMPILED_FROM_LABELS, prefetch_compiled
from hieval.errors import HievalError, preview_value
from hieval.hierarchy.cache import ANCESTORS_FILE, LEVELS_FILE
from hieval.hierarchy.sources import DOWNLOADS, describe, download
from hieval.hints import DEV_SUFFIX, setting
from hieval.inputs import handoff
from hieval.inputs.formats import GOLD, PREDICTIONS
from hieval.inputs.options import (
    DEFAULT_MALFORMED_CODES,
    DEFAULT_THRESHOLD,
    DEFAULT_UNKNOWN_CODES,
    DEFAULT_UNKNOWN_DOCS,
    LENIENT,
    LabelOptions,
)
from hieval.metrics.ranking import DEFAULT_KS
from hieval.metrics.suite import DEFAULT_LABEL_SET
from hieval.metrics.tuning import DEFAULT_METHOD, DEFAULT_MIN_SUPPORT
from hieval.metrics.uncertainty.settings import Settings
from hieval.pending_file import PendingFile
from hieval.pipeline import (
    ModelFiles,
    NormalizeJob,
    ReportJob,
    TuningJob,
    UncertaintyJob,
    build_hierarchy,
    count_and_score,
    final_reports,
    normalize_file,
    publish_reports,
    tune_threshold,
    uncertainty,
)
from hieval.reports import drawing, figures
from hieval.resources import Resources, input_rows, prefetch_duckdb_limit

log = logging.getLogger(__name__)

#: Where a stage's progress goes: ``(subject, stage)`` such as ``("m", " (1/2): counting")``,
#: a heading per model and stage (the CLI draws a rule with the subject in bold).
Progress = Callable[[str, str], None]


@dataclasses.dataclass
class EvaluateOptions:
    """Everything ``hieval evaluate`` takes, under its options' names (argparse's ``dest``):
    the command line's parsed arguments have these attributes, and the API builds one from its
    keywords, so both read their settings through the same :func:`config_from_args`.

    Pairs name a file: ``pred`` and ``dev_pred`` are ``(model, path)``; ``format``,
    ``code_list``, ``doc_list`` are ``(model or "gold", value)``; ``code_type`` is
    ``(model or "gold", kind)``, or ``(None, kind)`` for every file.
    """

    gold: list[Path]
    pred: list[tuple[str, Path]]
    train_gold: Path | None = None
    doc_groups: Path | None = None
    hierarchy: str | BuiltTables = "package"
    hierarchy_sha256: str | None = None
    cache: Path = Path("resources")
    max_level: str | None = DEFAULT_MAX_LEVEL
    unknown_codes: str = DEFAULT_UNKNOWN_CODES
    malformed_codes: str = DEFAULT_MALFORMED_CODES
    unknown_docs: str = DEFAULT_UNKNOWN_DOCS
    threshold: float | str | None = None
    dev_gold: Path | None = None
    dev_pred: list[tuple[str, Path]] = dataclasses.field(default_factory=list)
    k: list[int] = dataclasses.field(default_factory=lambda: list(DEFAULT_KS))
    tuning_per_code: bool = False
    tuning_min_support: int = DEFAULT_MIN_SUPPORT
    tuning_method: str = DEFAULT_METHOD
    allow_dev_test_overlap: bool = False
    top_k: int | None = None
    code_format: str = LabelOptions.code_format
    code_type: list[tuple[str | None, str]] = dataclasses.field(default_factory=list)
    icm_empty_gold: str = IcmParams.empty_gold
    icm_alpha1: float = IcmParams.alpha1
    icm_alpha2: float = IcmParams.alpha2
    icm_beta: float = IcmParams.beta
    propensity_a: float = IcmParams.propensity_a
    propensity_b: float = IcmParams.propensity_b
    label_set: str = DEFAULT_LABEL_SET
    format: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    code_list: list[tuple[str, Path]] = dataclasses.field(default_factory=list)
    doc_list: list[tuple[str, Path]] = dataclasses.field(default_factory=list)
    bootstrap: int = Settings.bootstrap
    confidence: float = Settings.confidence
    seed: int = Settings.seed
    permutations: int = Settings.permutations
    memory_limit: str | None = None
    temp_directory: Path | None = None
    threads: int | None = None
    #: Named conventions of conventions.parquet (None: every one) and each model's label
    #: space for them, ``(model, path)``.
    conventions: list[str] | None = None
    #: The layout of tables.tex/.md (config report.paper_table).
    paper_table: str = DEFAULT_PAPER_TABLE
    label_space: list[tuple[str, Path]] = dataclasses.field(default_factory=list)
    #: Filled by :func:`evaluate_into` from ``format``, ``code_list``, ``doc_list``, ``code_type``.
    per_file: dict[str, dict] = dataclasses.field(default_factory=dict)
    #: How records and reports name an input file the user never saw (the API's in-memory
    #: inputs, written to private files), by the file's path.
    shown: dict[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_namespace(cls, namespace: object) -> EvaluateOptions:
        """The options of parsed ``hieval evaluate`` arguments (extra attributes ignored)."""
        fields = [f.name for f in dataclasses.fields(cls) if f.name not in ("per_file", "shown")]
        return cls(**{name: getattr(namespace, name) for name in fields})


def _log_progress(subject: str, stage: str) -> None:
    """The default progress: a log line (quiet unless the caller configured logging)."""
    log.info("%s%s", subject, stage)


def hierarchy_config(args: EvaluateOptions) -> dict:
    """``--hierarchy`` and ``--hierarchy-sha256`` as the config's ``hierarchy`` section."""
    if isinstance(args.hierarchy, BuiltTables):
        return dict(args.hierarchy.config)
    known = args.hierarchy in ("package", "icd10", *DOWNLOADS)
    return {
        "source": args.hierarchy if known else "file",
        "path": None if known else args.hierarchy,
        "sha256": args.hierarchy_sha256,
    }


def _hierarchy_source(hierarchy: dict, cache: Path) -> tuple[str, Path | None]:
    """The hierarchy source and its file (a pinned download, fetched when missing)."""
    source = hierarchy["source"]
    if source in DOWNLOADS:
        spec = DOWNLOADS[source]
        path = cache / "hierarchy" / source / spec.filename
        if not path.exists():
            log.info("downloading %s", spec.url)
            download(spec, path, hierarchy["sha256"])
        return source, path
    return source, Path(hierarchy["path"]) if hierarchy["path"] else None


@dataclasses.dataclass(frozen=True)
class BuiltTables:
    """A hierarchy's tables built once into ``folder`` (``levels.parquet``,
    ``ancestors.parquet``), so later runs copy them instead of building them again
    (:func:`hieval.load_hierarchy`). ``config`` is the ``hierarchy`` section it was built from,
    ``name`` its name in reports, ``levels`` its level names (deepest first)."""

    folder: Path
    config: dict
    name: str
    levels: tuple[str, ...]


def build_tables(
    args: EvaluateOptions, out: Path, max_level: str | None = None
) -> tuple[Path, Path, str]:
    """Build the hierarchy's tables into ``out``; also return its name for reports."""
    levels, ancestors = out / "levels.parquet", out / "ancestors.parquet"
    if isinstance(args.hierarchy, BuiltTables):
        built = args.hierarchy
        if max_level is not None:  # checked as build_hierarchy checks it
            evaluated_levels(built.levels, max_level)
        for name, target in ((LEVELS_FILE, levels), (ANCESTORS_FILE, ancestors)):
            with atomic_path(target) as tmp:
                shutil.copyfile(built.folder / name, tmp)
        return levels, ancestors, built.name
    hierarchy = hierarchy_config(args)
    source, path = _hierarchy_source(hierarchy, args.cache)
    build_hierarchy(
        source,
        path,
        levels_out=levels,
        ancestors_out=ancestors,
        sha256=hierarchy["sha256"],
        max_level=max_level,
        cache_dir=args.cache / "hierarchy" / "icd10",
        tables_cache=args.cache / "hierarchy" / "built",
    )
    return levels, ancestors, describe(source, path)


def _per_file_options(args: EvaluateOptions, names: list[str]) -> dict[str, dict]:
    """--format / --code-list / --doc-list / --code-type NAME=... as per-file option
    overrides, checked by name."""
    per_file: dict[str, dict] = {}
    for key, pairs in (
        ("format", args.format),
        ("code_list", args.code_list),
        ("doc_list", args.doc_list),
        ("code_type", [(n, kind) for n, kind in args.code_type if n]),
    ):
        for name, value in pairs:
            if name != "gold" and name not in names:
                raise HievalError(
                    f"{setting(key, '...', file='NAME')}: no model {preview_value(name)} (models: "
                    f"{', '.join(names)}; or `gold`)"
                )
            given = per_file.setdefault(name, {})
            if given.get(key, str(value)) != str(value):
                # The last would win without a word, and with it one of two readings of a file.
                raise HievalError(
                    f"{hints.name(key)} is given twice for {name}: "
                    f"{preview_value(given[key])} and {preview_value(str(value))}; give it once"
                )
            given[key] = str(value)
    return per_file


def run_inputs(args: EvaluateOptions) -> list[tuple[str, Path]]:
    """Every file and folder ``hieval evaluate`` reads (or spills into), each with how a
    message names it: none may lie inside the output folder, which a run replaces whole."""
    named = [(f"--gold {path}", path) for path in args.gold]
    named += [(f"--pred {name}={path}", path) for name, path in args.pred]
    named += [(f"--dev-pred {name}={path}", path) for name, path in args.dev_pred]
    for flag, pairs in (
        ("--code-list", args.code_list),
        ("--doc-list", args.doc_list),
        ("--label-space", args.label_space),
    ):
        named += [(f"{flag} {name}={path}", path) for name, path in pairs]
    for flag, path in (
        ("--dev-gold", args.dev_gold),
        ("--train-gold", args.train_gold),
        ("--doc-groups", args.doc_groups),
        ("--temp-directory", args.temp_directory),
    ):
        if path is not None:
            named.append((f"{flag} {path}", path))
    return named + hierarchy_inputs(args)


def hierarchy_inputs(args: EvaluateOptions) -> list[tuple[str, Path]]:
    """The hierarchy's inputs (``--cache``, a tree file), named as :func:`run_inputs` does."""
    named = [(f"--cache {args.cache}", args.cache)]
    tree = hierarchy_config(args)["path"]
    return named + ([(f"--hierarchy {tree}", Path(tree))] if tree else [])


def config_from_args(args: EvaluateOptions) -> dict:
    """The workflow config these options amount to (same keys, same meaning), so that the CLI
    and the workflow derive reading options and parameters through the same functions."""
    gold_file = dict(args.per_file.get("gold", {}))
    return {
        "hierarchy": hierarchy_config(args),
        "gold": str(args.gold[0]) if len(args.gold) == 1 else [str(g) for g in args.gold],
        "train_gold": str(args.train_gold) if args.train_gold else None,
        "doc_groups": str(args.doc_groups) if args.doc_groups else None,
        "gold_format": gold_file.get("format", "auto"),
        "gold_code_list": gold_file.get("code_list"),
        "gold_doc_list": gold_file.get("doc_list"),
        # lenient reads predictions only: the gold's codes are read as codes
        "gold_code_format": "auto" if args.code_format == LENIENT else args.code_format,
        "gold_code_type": gold_file.get("code_type", _every_file_code_type(args)),
        "max_level": args.max_level,
        "unknown_codes": args.unknown_codes,
        "malformed_codes": args.malformed_codes,
        "unknown_docs": args.unknown_docs,
        "threshold": TUNE if args.threshold == TUNE else DEFAULT_THRESHOLD,
        "dev_gold": str(args.dev_gold) if args.dev_gold else None,
        "ranking": {"k": list(args.k)},
        "tuning": {
            "per_code": args.tuning_per_code,
            "min_support": args.tuning_min_support,
            "allow_dev_test_overlap": args.allow_dev_test_overlap,
            "method": args.tuning_method,
        },
        "icm": {
            "alpha1": args.icm_alpha1,
            "alpha2": args.icm_alpha2,
            "beta": args.icm_beta,
            "empty_gold": args.icm_empty_gold,
        },
        "comparison": {
            "label_set": args.label_set,
            "propensity_a": args.propensity_a,
            "propensity_b": args.propensity_b,
        },
        "uncertainty": {
            "bootstrap": args.bootstrap,
            "confidence": args.confidence,
            "seed": args.seed,
            "permutations": args.permutations,
        },
        "engine": {
            "memory_limit": args.memory_limit,
            "temp_directory": str(args.temp_directory) if args.temp_directory else None,
        },
        "conventions": list(args.conventions) if args.conventions is not None else None,
        "report": {"paper_table": args.paper_table},
    }


def model_names(args: EvaluateOptions) -> list[str]:
    """The models' names in order; a name given twice is refused (its outputs would collide)."""
    names = [name for name, _ in args.pred]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise HievalError(f"model name(s) given more than once: {', '.join(dupes)}")
    dev_names = [name for name, _ in args.dev_pred]
    dupes = sorted({n for n in dev_names if dev_names.count(n) > 1})
    if dupes:  # the last file would be tuned on without a word
        raise HievalError(
            f"{hints.name('dev_predictions')} given more than once for model(s): {', '.join(dupes)}"
        )
    return names


@dataclasses.dataclass
class _Run:
    """One evaluation's settings and files, as :func:`evaluate_into` works them out first;
    each stage below takes this one value."""

    args: EvaluateOptions
    out: Path
    names: list[str]
    config: dict
    params: IcmParams
    resources: Resources
    levels: Path
    ancestors: Path
    hierarchy: str
    common: dict
    spaces: dict[str, tuple[Path, str]]

    @property
    def work(self) -> Path:
        return self.out / "work"

    @property
    def gold(self) -> Path:
        return self.work / "inputs" / "gold.parquet"

    @property
    def labels(self) -> dict[str, Path]:
        return {
            name: self.work / "inputs" / "predictions" / f"{name}.parquet" for name in self.names
        }

    @property
    def scores(self) -> dict[str, Path]:
        return {name: self.work / "inputs" / "scores" / f"{name}.parquet" for name in self.names}

    @property
    def train_gold(self) -> Path | None:
        """The normalised training gold (:func:`_read_inputs` writes it), if config names one."""
        return self.work / "inputs" / "train_gold.parquet" if self.config["train_gold"] else None

    @property
    def records(self) -> list[Path]:
        """The input records: the gold's, then each model's."""
        gold = self.work / "inputs" / "gold.json"
        return [gold, *(self.labels[name].with_suffix(".json") for name in self.names)]


def evaluate_into(
    args: EvaluateOptions, out: Path, *, progress: Progress = _log_progress
) -> list[str]:
    """Run every stage for ``args`` into the folder ``out`` (which the caller owns: the CLI's
    staging folder, the API's private one): one call per stage, the same calls the workflow's
    scripts make. Returns the models' names.

    Every input is read and validated before anything is counted, so a bad file of the last
    model fails in seconds, not after the others were counted.
    """
    try:
        return _evaluate_into(args, out, progress=progress)
    finally:
        handoff.forget(out)  # counted and analysed (or failed): the kept keys serve no one now
        drawing.stop()  # the report's figure workers, if any


def _evaluate_into(args: EvaluateOptions, out: Path, *, progress: Progress) -> list[str]:
    run = _prepare(args, out)
    tuned = _read_inputs(run, progress)
    # The error analysis takes each model's labels as its count encodes them (no second
    # encoding), and its node counts only at its end (its per-code table): it runs beside the
    # counting, reading the nodes as a PendingFile that waits for them. The intervals,
    # conventions and tables never read its outputs: it runs beside them too (the reports
    # wait for it).
    counted: dict[str, Future] = {name: Future() for name in run.names}
    encodings = Encodings(run.names)
    with ThreadPoolExecutor(1, thread_name_prefix="errors") as beside:
        errors = beside.submit(_error_analysis, run, counted, encodings=encodings)
        errors.add_done_callback(lambda _: encodings.close())
        try:
            _count_models(run, progress, counted, encodings)
        except BaseException as error:
            for written in counted.values():  # the analysis stops at the nodes it waits for
                if not written.done():
                    written.set_exception(error)
            encodings.failed(error)  # or at the labels
            raise
        report_into(run, tuned=tuned, progress=progress, errors=errors)
    return run.names


def _prepare(args: EvaluateOptions, out: Path) -> _Run:
    """The run's config, resources and hierarchy tables (built or read from the cache)."""
    names = model_names(args)
    args.per_file = _per_file_options(args, names)
    spaces = _label_spaces(args, names)  # refused before anything is read
    config = config_from_args(args)
    check_names(config["conventions"])
    check_paper_table(config["report"]["paper_table"], config["conventions"])
    if config["doc_groups"]:
        read_doc_groups(config["doc_groups"])  # refused before anything is counted
    params = icm_params(config)
    resources = Resources(threads=args.threads, **config["engine"])
    if not resources.memory_limit:
        prefetch_duckdb_limit()  # the normalisations' DuckDB settings need it first thing
    # The report's figures come last; their imports need not wait: in workers of their own
    # (a command line's process), else in a thread of this one.
    if not drawing.start(threads=resources.threads or default_threads()):
        figures.prefetch()
    resources.check_bootstrap(config["uncertainty"]["bootstrap"], models=len(names))
    resources.check_inputs(_matrix_inputs(args))
    if _check_count_plans(args, resources) >= COMPILED_FROM_LABELS:
        prefetch_compiled()  # LCA-F's kernel loads while the inputs are read
    levels, ancestors, hierarchy = build_tables(
        args, out / "work" / "hierarchy", config["max_level"]
    )
    common = {
        "levels_file": levels,
        "unknown_codes": config["unknown_codes"],
        "malformed_codes": config["malformed_codes"],
        "resources": resources,
    }
    return _Run(
        args, out, names, config, params, resources, levels, ancestors, hierarchy, common, spaces
    )


def _matrix_inputs(args: EvaluateOptions) -> list[tuple[str, Path, str]]:
    """Every input file as ``(who, path, role)``, for the plans made from headers."""
    files = [("gold", path, "gold") for path in args.gold]
    files += [(f"model {name!r}", path, "predictions") for name, path in args.pred]
    files += [(f"model {name!r} (dev)", path, "dev") for name, path in args.dev_pred]
    return files


def _check_count_plans(args: EvaluateOptions, resources: Resources) -> int:
    """Refuse, before anything is read, a model whose count job cannot fit the memory budget,
    planned from its files' Parquet footers (rows, at least as many as labels); files of other
    formats are planned once normalised (:func:`hieval.pipeline.count_model`). Returns the
    most rows of one model's files (0 when not known)."""
    gold = input_rows(args.gold)
    if gold is None:
        return 0
    most = 0
    for name, path in args.pred:
        pred = input_rows([path])
        if pred is not None:
            resources.check_budget(gold + pred, what=f"model {name!r}: its files have")
            most = max(most, gold + pred)
    return most


def _read_inputs(run: _Run, progress: Progress) -> dict[str, Path]:
    """Normalise the gold, every model's predictions and the training gold; the models whose
    threshold was tuned. The gold may be normalised in the background beside the first predictions
    (:func:`_gold_beside_predictions`)."""
    args, resources = run.args, run.resources
    gold_job = _gold_job(run)
    with ThreadPoolExecutor(1, thread_name_prefix="gold") as background:
        written, wait_turn = None, None
        if _gold_beside_predictions(args, resources):
            # The predictions are read beside the gold, and sorted once the gold is known to
            # take the in-memory path (a gold DuckDB reads is read beside no sort, as the
            # memory plan assumes; only the predictions' read indices are held meanwhile);
            # see hieval.pending_file.
            started = threading.Event()

            def gold_in_background():
                try:
                    return normalize_file(gold_job(on_fast_path=started.set))
                finally:
                    started.set()

            written = background.submit(gold_in_background)
            wait_turn = started.wait
        else:
            normalize_file(gold_job())
        try:
            tuned = _normalize_predictions(
                run,
                gold=run.gold if written is None else PendingFile(run.gold, written),
                progress=progress,
                wait_turn=wait_turn,
            )
        except BaseException:
            if written is not None:
                written.result()  # the gold's own error first, as when it is read first
            raise
        if written is not None:
            written.result()
    if run.train_gold is not None:  # read before counting: its weights score the rankings
        _other_gold(run.args, run.config, run.common, key="train_gold", out=run.train_gold)
    return tuned


def _count_models(
    run: _Run,
    progress: Progress,
    counted: dict[str, Future] | None = None,
    encodings: Encodings | None = None,
) -> None:
    """Count and score each model in turn: node counts, per-document rows, ICM sums, tidy
    metrics, ranking and calibration; each model's ``counted`` future (when given) is set once
    its files are written, and its encoded labels handed to ``encodings`` (when given)."""
    names, work, config = run.names, run.work, run.config
    settings = uncertainty_settings(config)  # a dense model's bootstrap units come with its rows
    for number, name in enumerate(names, start=1):
        progress(name, f" ({number}/{len(names)}): counting")
        counts = work / "counts" / name
        count_and_score(
            model=name,
            gold=run.gold,
            labels=run.labels[name],
            scores=run.scores[name],
            record=work / "inputs" / "predictions" / f"{name}.json",
            levels_file=run.levels,
            ancestors=run.ancestors,
            max_level=config["max_level"],
            params=run.params,
            label_set=config["comparison"]["label_set"],
            ks=ranking_ks(config),
            out=ModelFiles(
                nodes=counts / "nodes.parquet",
                docs=counts / "docs.parquet",
                item_sums=counts / "item_sums.parquet",
                metrics=work / "metrics" / f"{name}.parquet",
                nodes_report=run.out / "nodes" / f"{name}.csv",
                ranking=work / "ranking" / f"{name}.parquet",
                notes=work / "ranking" / f"{name}.json",
                dense_units=_dense_units(work, name),
            ),
            resources=run.resources,
            train_gold=run.train_gold,
            bootstrap=settings if settings.bootstrap else None,
            on_encoded=None if encodings is None else encodings.hand(name),
            # The figure workers are readied once the last model is counted, ahead of the
            # report (for label files the rest, rows, conventions and tables, leaves a core
            # free; a dense model's ranking follows, which two warm-ups hardly slow).
            on_counted=drawing.ready if number == len(names) else None,
        )
        if encodings is not None:
            encodings.counted(name)
        if counted is not None:
            counted[name].set_result(None)


def _intervals(run: _Run, progress: Progress) -> dict[str, Path]:
    """Bootstrap intervals and paired comparisons, when the config asks for replicates; the
    two files, as :func:`final_reports` and :func:`publish_reports` take them."""
    settings = uncertainty_settings(run.config)
    if not settings.bootstrap:
        return {}
    names, work, out, config = run.names, run.work, run.out, run.config
    progress("uncertainty", f": {settings.bootstrap} replicates")
    uncertainty(
        UncertaintyJob(
            gold=run.gold,
            predictions=run.labels,
            item_sums={name: work / "counts" / name / "item_sums.parquet" for name in names},
            metrics={name: work / "metrics" / f"{name}.parquet" for name in names},
            levels_file=run.levels,
            ancestors=run.ancestors,
            max_level=config["max_level"],
            params=run.params,
            label_set=config["comparison"]["label_set"],
            settings=settings,
            intervals_out=out / "intervals.parquet",
            comparisons_out=out / "comparisons.parquet",
            resources=run.resources,
            scores=run.scores,
            ranking={name: work / "ranking" / f"{name}.parquet" for name in names},
            ks=ranking_ks(config),
            train_gold=run.train_gold,
            dense_units={name: _dense_units(work, name) for name in names},
        )
    )
    return {
        "intervals": out / "intervals.parquet",
        "comparisons": out / "comparisons.parquet",
    }


def _dense_units(work: Path, name: str) -> Path:
    """Where a dense model's bootstrap units go from the score stage to the intervals."""
    return work / "ranking" / f"{name}.units.npz"


def _error_analysis(
    run: _Run,
    counted: dict[str, Future] | None = None,
    *,
    inputs: tuple[Source, dict[str, Source]] | None = None,
    parts: dict[str, list[ErrorPart]] | None = None,
    encodings: Encodings | None = None,
) -> None:
    """Each model's error distance rows, near-miss confusions and per-code table (its node
    counts read once ``counted``, the count's future, is done; without it, they are written
    already). ``inputs``: the gold and each model's labels to read instead of the run's
    normalised files (the Evaluator's chunks, as tables in parts, before they are pooled);
    ``parts``: each model's analysis of those chunks, taken already (then only their counted
    codes are read); ``encodings``: each model's labels as its count encodes them (the
    errors found in its keys, not in a second encoding of the files)."""
    names, work, out = run.names, run.work, run.out
    nodes = {name: work / "counts" / name / "nodes.parquet" for name in names}
    error_analysis(
        gold=run.gold if inputs is None else inputs[0],
        labels=run.labels if inputs is None else inputs[1],
        nodes=nodes
        if counted is None
        else {name: PendingFile(nodes[name], counted[name]) for name in names},
        levels_file=run.levels,
        ancestors=run.ancestors,
        max_level=run.config["max_level"],
        work=work / "errors",
        errors_out=out / "errors.parquet",
        confusions_out={name: out / "confusions" / f"{name}.parquet" for name in names},
        codes_out={name: out / "codes" / f"{name}.parquet" for name in names},
        train_gold=run.train_gold,
        settings=uncertainty_settings(run.config),
        parts=parts,
        encoded=None if encodings is None else {name: encodings.pending(name) for name in names},
    )


def _reports(
    run: _Run, *, tuned: dict[str, Path], uncertain: dict[str, Path], errors: Future
) -> None:
    """The tables over all models, then (once the error analysis, ``errors``, is done) the
    reports people read (with the training gold's frequencies when one is given)."""
    args, names, work, out, config = run.args, run.names, run.work, run.out, run.config
    model_options = {name: _model_options(args, name) for name in names}
    final_reports(
        **uncertain,
        conventions=out / "conventions.parquet",
        metrics=[
            work / sub / f"{name}.parquet" for name in names for sub in ("metrics", "ranking")
        ],
        notes=[work / "ranking" / f"{name}.json" for name in names],
        records=run.records,
        levels_file=run.levels,
        max_level=config["max_level"],
        models=names,
        hierarchy=run.hierarchy,
        out_dir=out,
    )
    train_gold = run.train_gold
    settings = uncertainty_settings(config)
    errors.result()  # its error, if any, is raised here
    if config["doc_groups"]:
        group_analysis(
            gold=run.gold,
            docs={name: work / "counts" / name / "docs.parquet" for name in names},
            labels=run.labels,
            levels_file=run.levels,
            ancestors=run.ancestors,
            params=run.params,
            doc_groups=config["doc_groups"],
            settings=settings,
            groups_out=out / "groups.parquet",
            gaps_out=out / "group_gaps.parquet",
        )
    publish_reports(
        ReportJob(
            tidy=out / "metrics.parquet",
            nodes={name: work / "counts" / name / "nodes.parquet" for name in names},
            records=run.records,
            levels_file=run.levels,
            max_level=config["max_level"],
            hierarchy=run.hierarchy,
            settings=report_settings(config, model_options),
            html_out=out / "report.html",
            tex_out=out / "tables.tex",
            markdown_out=out / "tables.md",
            figures_out=out / "figures",
            train_gold=train_gold,
            curves={name: out / "thresholds" / f"{name}.parquet" for name in tuned},
            notes=[work / "ranking" / f"{name}.json" for name in names],
            analysis_dir=out,
            paper_table=config["report"]["paper_table"],
            conventions=out / "conventions.parquet",
            conventions_tests=out / "conventions_tests.parquet",
            **uncertain,
        )
    )


def report_into(
    run: _Run,
    *,
    tuned: dict[str, Path],
    progress: Progress = _log_progress,
    errors: Future | None = None,
) -> None:
    """The stages after each model's metric rows (in ``work/metrics``, ``ranking`` and
    ``counts``): uncertainty, the conventions, the tables, the analyses and the reports.
    :func:`evaluate_into` (whose error analysis, ``errors``, started beside the counting) and
    :meth:`hieval.Evaluator.compute` (whose counts are its batches' reduced) both end here."""
    # The error analysis reads only the inputs and the counts, and the intervals, conventions
    # and tables never read its outputs: it runs beside them (the reports wait for it).
    with ThreadPoolExecutor(1, thread_name_prefix="errors") as beside:
        if errors is None:
            errors = beside.submit(_error_analysis, run)
        uncertain = _intervals(run, progress)
        _conventions(run)
        _reports(run, tuned=tuned, uncertain=uncertain, errors=errors)


def _gold_job(run: _Run) -> Callable[..., NormalizeJob]:
    """The gold's normalisation to ``run.gold`` (its record beside it): a
    :class:`NormalizeJob` once given what is left (``on_fast_path``)."""
    args = run.args
    return functools.partial(
        NormalizeJob,
        path=args.gold,
        name="gold",
        role=GOLD,
        out=run.gold,
        record_out=run.records[0],
        options=gold_options(run.config),
        shown_as=args.shown.get(str(args.gold[0])) if len(args.gold) == 1 else None,
        **run.common,
    )


def normalize_batch(run: _Run) -> None:
    """One batch of documents of :class:`hieval.Evaluator` normalised into ``run.work /
    "inputs"`` as :func:`evaluate_into` normalises whole inputs (the same calls): the gold,
    and each model's decided labels and scores, records beside."""
    normalize_file(_gold_job(run)())
    _normalize_predictions(run, gold=run.gold, progress=lambda subject, stage: None)


def _conventions(run: _Run) -> None:
    """OUT/conventions.parquet: every model's headline metrics under each named convention;
    OUT/conventions_tests.parquet: Edin et al.'s McNemar test of each pair of models."""
    args, names, config, out, labels = run.args, run.names, run.config, run.out, run.labels
    work = run.work
    write_conventions(
        models=names,
        gold=run.gold,
        labels=labels,
        scores=run.scores,
        records={name: labels[name].with_suffix(".json") for name in names},
        tidy={
            name: [work / s / f"{name}.parquet" for s in ("metrics", "ranking")] for name in names
        },
        levels_file=run.levels,
        conventions=config["conventions"],
        ks=ranking_ks(config),
        selections={
            name: (_model_options(args, name).threshold, _model_options(args, name).top_k)
            for name in names
        },
        default_threshold=config["threshold"],
        label_spaces=run.spaces,
        out=out / "conventions.parquet",
        tests_out=out / "conventions_tests.parquet",
    )


def _label_spaces(args: EvaluateOptions, names: list[str]) -> dict[str, tuple[Path, str]]:
    """``--label-space NAME=PATH`` by model, with how messages name it; checked by name."""
    spaces = {}
    for name, path in args.label_space:
        if name not in names:
            raise HievalError(
                f"--label-space {preview_value(name)}=...: no model {preview_value(name)} "
                f"(models: {', '.join(names)})"
            )
        if name in spaces:
            raise HievalError(f"--label-space is given twice for {name}; give it once")
        spaces[name] = (path, f"--label-space {name}={path}")
    return spaces


def _gold_beside_predictions(args: EvaluateOptions, resources: Resources) -> bool:
    """Whether the gold may be normalised in the background while the first model's
    predictions are: one gold file, both files of the kind the in-memory path takes
    (:mod:`hieval.inputs.parquet_fast`), and holding both fits :meth:`Resources.allows_overlap`.
    Whichever of them that path then declines is read by DuckDB alone (the predictions wait
    for a gold DuckDB reads, and DuckDB reads predictions only once the gold is written).
    Later models overlap nothing."""
    from hieval.inputs.parquet_fast import planned_together  # here: it imports pyarrow

    if not args.pred or len(args.gold) > 1:  # several gold files are pooled in DuckDB
        return False
    plan = planned_together([*args.gold, args.pred[0][1]])
    return plan is not None and resources.allows_overlap(plan[0], labels=plan[1])


def _normalize_predictions(
    run: _Run,
    *,
    gold: Path | PendingFile,
    progress: Progress,
    wait_turn: Callable[[], object] | None = None,
) -> dict[str, Path]:
    """Tune thresholds where asked (tuning waits for the whole gold), then normalise each
    model's predictions to ``labels`` and ``scores`` (records beside the labels; ``wait_turn``:
    see :func:`hieval.inputs.normalize.normalize_labels`); returns the tuned JSON per model."""
    args, config, common = run.args, run.config, run.common
    labels, scores = run.labels, run.scores
    tuned = _tune_thresholds(run, gold=gold, progress=progress)
    for number, (name, path) in enumerate(args.pred, start=1):
        progress(name, f" ({number}/{len(args.pred)}): reading")
        normalize_file(
            NormalizeJob(
                path=path,
                name=name,
                role=PREDICTIONS,
                out=labels[name],
                record_out=labels[name].with_suffix(".json"),
                options=_model_options(args, name),
                gold=gold,
                unknown_docs=config["unknown_docs"],
                default_threshold=config["threshold"],
                scores_out=scores[name],
                tuned=tuned.get(name),
                shown_as=args.shown.get(str(path)),
                wait_turn=wait_turn,
                **common,
            )
        )
    return tuned


def _other_gold(args: EvaluateOptions, config: dict, common: dict, *, key: str, out: Path) -> Path:
    """Normalise the dev or the train gold (config ``key``) to ``out``: read as the gold is,
    but with its own code and document lists (:func:`hieval.config.other_gold_options`)."""
    normalize_file(
        NormalizeJob(
            path=config[key],
            name=key,
            role=GOLD,
            out=out,
            record_out=out.with_suffix(".json"),
            options=other_gold_options(config),
            shown_as=args.shown.get(str(config[key])),
            **common,
        )
    )
    return out


def _every_file_code_type(args: EvaluateOptions) -> str | None:
    """The ``--code-type dx|proc`` given without a NAME (None: none); two different ones are
    refused, as for one file (the last would win without a word)."""
    plain = sorted({kind for name, kind in args.code_type if name is None})
    if len(plain) > 1:
        raise HievalError(
            f"{hints.name('code_type')} is given twice for every file: "
            f"{' and '.join(map(repr, plain))}; give it once"
        )
    return plain[0] if plain else None


def _model_options(args: EvaluateOptions, name: str) -> LabelOptions:
    """How to read a model's predictions (and its dev predictions): ``--threshold tune``
    leaves the threshold to tuning; a model's own ``--code-type NAME=...`` wins over the
    one for every file."""
    every_file = {
        "code_type": _every_file_code_type(args),
        "code_format": args.code_format,
        "threshold": None if args.threshold == TUNE else args.threshold,
        "top_k": args.top_k,
    }
    return LabelOptions(**(every_file | args.per_file.get(name, {})))


def _tune_thresholds(run: _Run, *, gold: Path | PendingFile, progress: Progress) -> dict[str, Path]:
    """Normalise the dev gold and each tuned model's dev predictions, tune, and return the
    tuned JSON of each tuned model (the curves go to OUT/thresholds/)."""
    args, names, config, out, common = run.args, run.names, run.config, run.out, run.common
    dev = dict(args.dev_pred)
    strays = sorted(set(dev) - set(names))
    if strays:
        raise HievalError(
            f"{setting('dev_predictions', '...', file='NAME')}: no model "
            f"{preview_value(strays[0])} (models: {', '.join(names)})"
        )
    specs = [
        ModelSpec(
            model=name,
            predictions=str(path),
            threshold=None if args.threshold == TUNE else args.threshold,
            top_k=args.top_k,
            dev_predictions=str(dev[name]) if name in dev else None,
        )
        for name, path in args.pred
    ]
    check_tuning(config, specs)
    tuned_specs = [s for s in specs if s.tunes(config["threshold"])]
    if not tuned_specs:
        if dev:
            log.warning(
                "warning: %s given but no model tunes its threshold (%s): the dev "
                "predictions are not read",
                setting("dev_predictions", "PATH"),
                setting("threshold", TUNE),
            )
        return {}
    gold = Path(gold)  # tuning reads the gold's record too: a gold being written is waited for
    work = out / "work" / "inputs" / "dev"
    dev_gold = _other_gold(args, config, common, key="dev_gold", out=work / "gold.parquet")
    tuned = {}
    for spec in tuned_specs:
        name = spec.model
        progress(name, ": tuning its threshold on the dev set")
        dev_labels = work / "predictions" / f"{name}.parquet"
        dev_scores = work / "scores" / f"{name}.parquet"
        normalize_file(
            NormalizeJob(
                path=spec.dev_predictions,
                name=f"{name}{DEV_SUFFIX}",
                role=PREDICTIONS,
                out=dev_labels,
                record_out=dev_labels.with_suffix(".json"),
                options=_model_options(args, name),
                gold=dev_gold,
                unknown_docs=config["unknown_docs"],
                scores_out=dev_scores,
                shown_as=args.shown.get(str(spec.dev_predictions)),
                **common,
            )
        )
        tuned[name] = out / "thresholds" / f"{name}.json"
        tune_threshold(
            TuningJob(
                model=name,
                dev_gold=dev_gold,
                dev_scores=dev_scores,
                dev_records=(dev_gold.with_suffix(".json"), dev_labels.with_suffix(".json")),
                test_gold=gold,
                test_record=out / "work" / "inputs" / "gold.json",
                **tuning_options(config),
                curve_out=out / "thresholds" / f"{name}.parquet",
                codes_out=out / "thresholds" / f"{name}.codes.parquet",
                tuned_out=tuned[name],
            )
        )
    return tuned
