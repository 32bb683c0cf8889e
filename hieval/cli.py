"""The ``hieval`` command line: single evaluations without Snakemake, same code, same tables.

``hieval evaluate`` runs the workflow's stages in order (hierarchy, normalisation, counting,
metrics, reports) into one output folder; ``hieval hierarchy`` only builds the level tables.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import math
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from hieval import __version__, hints
from hieval.atomic import staged_folder
from hieval.background import PendingFile
from hieval.codes import CODE_TYPES
from hieval.codesystem import DEFAULT_MAX_LEVEL, SYSTEMS
from hieval.config import (
    TUNE,
    ModelSpec,
    check_model_name,
    check_tuning,
    gold_options,
    icm_params,
    ranking_ks,
    report_settings,
    tuning_options,
    uncertainty_settings,
)
from hieval.engine.icm import EMPTY_GOLD, IcmParams
from hieval.errors import HievalError, preview_value
from hieval.formats import FORMATS, GOLD, PREDICTIONS
from hieval.hierarchy.sources import DOWNLOADS, describe, download
from hieval.label_options import (
    CODE_FORMATS,
    DEFAULT_THRESHOLD,
    DEFAULT_UNKNOWN_CODES,
    DEFAULT_UNKNOWN_DOCS,
    UNKNOWN_CODE_POLICIES,
    UNKNOWN_DOC_POLICIES,
    LabelOptions,
)
from hieval.metrics.ranking import DEFAULT_KS
from hieval.metrics.suite import DEFAULT_LABEL_SET, LABEL_SETS
from hieval.metrics.tuning import DEFAULT_MIN_SUPPORT
from hieval.metrics.uncertainty_settings import Settings
from hieval.pipeline import (
    ModelFiles,
    build_hierarchy,
    count_and_score,
    final_reports,
    normalize_file,
    publish_reports,
    tune_threshold,
    uncertainty,
)
from hieval.reports import figures
from hieval.resources import Resources, memory_limit_problem
from hieval.signals import StopSignals

console = Console(stderr=True, highlight=False, soft_wrap=True)


def _named_path(text: str) -> tuple[str, Path]:
    """NAME=PATH where NAME is a model or ``gold`` (checked against the models later)."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, got {preview_value(text)}")
    return name, Path(path)


def _model_path(text: str) -> tuple[str, Path]:
    """--pred NAME=PATH: NAME follows the model sheet's rule (hieval.config.check_model_name)."""
    name, path = _named_path(text)
    try:
        check_model_name(name)
    except HievalError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return name, path


def _finite(text: str) -> float:
    """A finite number: a NaN or infinite ICM weight would make every ICM value NaN or inf."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {preview_value(text)}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {preview_value(text)}")
    return value


def _named_format(text: str) -> tuple[str, str]:
    name, sep, fmt = text.partition("=")
    if not sep or not name or fmt not in FORMATS:
        raise argparse.ArgumentTypeError(
            f"expected NAME=FORMAT with FORMAT one of {', '.join(FORMATS)}, got "
            f"{preview_value(text)}"
        )
    return name, fmt


def _code_type(text: str) -> tuple[str | None, str]:
    """--code-type dx|proc (every file: name None) or NAME=dx|proc (one file), as --format."""
    name, sep, kind = text.rpartition("=")
    if kind not in CODE_TYPES or (sep and not name):
        raise argparse.ArgumentTypeError(
            f"expected {' or '.join(CODE_TYPES)}, or NAME={'|'.join(CODE_TYPES)}, got {text!r}"
        )
    return (name or None), kind


def _threshold(text: str) -> float | str:
    """--threshold: a number in [0, 1], or ``tune`` (tuned on the dev set)."""
    return TUNE if text == TUNE else _fraction(text)


def _fraction(text: str) -> float:
    value = _finite(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"threshold must be in [0, 1], got {value}")
    return value


def _at_least_one(what: str):
    """An argument type: a whole number of at least 1, named ``what`` in the message."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a whole number, got {preview_value(text)}"
            ) from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{what} must be at least 1, got {value}")
        return value

    return parse


def _at_least_zero(what: str):
    """An argument type: a whole number of at least 0, named ``what`` in the message."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a whole number, got {preview_value(text)}"
            ) from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"{what} must be at least 0, got {value}")
        return value

    return parse


def _confidence(text: str) -> float:
    value = _finite(text)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"confidence must be between 0 and 1, got {value}")
    return value


def _memory_limit(text: str) -> str:
    problem = memory_limit_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used to document every option in ``--help``)."""
    parser = argparse.ArgumentParser(
        prog="hieval",
        description="Flat, set-based and count-preserving hierarchical (CoPHE) evaluation of "
        "multi-label coding models (ICD-9, ICD-10 or your own tree).",
    )
    parser.add_argument("--version", action="version", version=f"hieval {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    ev = sub.add_parser(
        "evaluate",
        help="evaluate one or more prediction files against a gold file",
        description="Writes OUT/metrics.parquet (tidy: model, family, level, average, metric, "
        "value), OUT/metrics.csv, OUT/summary.csv, OUT/summary.md, OUT/nodes/NAME.csv and, with "
        "--bootstrap N > 0, OUT/intervals.parquet and OUT/comparisons.parquet. "
        "Intermediate tables go to OUT/work/. Exit code 0 only when everything was written.",
    )
    ev.add_argument(
        "--gold",
        required=True,
        action="append",
        type=Path,
        help="gold labels, long format doc_id,code (Parquet, CSV or TSV) or another gold format; "
        "repeat to pool several files (MIMIC-IV diagnoses_icd.csv.gz and procedures_icd.csv.gz)",
    )
    ev.add_argument(
        "--pred",
        required=True,
        action="append",
        type=_model_path,
        metavar="NAME=PATH",
        help="a model's predictions doc_id,code[,score]; repeat for several models",
    )
    ev.add_argument(
        "--out",
        required=True,
        type=Path,
        help="output folder, replaced whole by the run: refused when it holds anything an "
        "earlier run did not write (see OUT/.hieval-manifest.json) or an input of this run",
    )
    ev.add_argument(
        "--train-gold",
        type=Path,
        default=None,
        help="training-set gold, read like --gold: the report shows flat F1 per training "
        "frequency of the codes (config train_gold)",
    )
    _hierarchy_options(ev)
    ev.add_argument(
        "--max-level",
        default=DEFAULT_MAX_LEVEL,
        help="highest level evaluated; `overall` pools the levels up to it (default: the code "
        f"system's: {SYSTEMS['icd9'].default_max_level} for ICD-9, as in the CoPHE paper; "
        f"{SYSTEMS['icd10'].default_max_level} for ICD-10; the highest level below the root "
        "for your own tree)",
    )
    ev.add_argument(
        "--unknown-codes",
        choices=UNKNOWN_CODE_POLICIES,
        default=DEFAULT_UNKNOWN_CODES,
        help="codes not in the hierarchy: error, place by ICD syntax, or drop (default: place "
        "for ICD-9 and ICD-10, error for your own tree, where place is refused)",
    )
    ev.add_argument(
        "--unknown-docs",
        choices=UNKNOWN_DOC_POLICIES,
        default=DEFAULT_UNKNOWN_DOCS,
        help="predicted documents absent from the gold: error (default) or drop",
    )
    ev.add_argument(
        "--threshold",
        type=_threshold,
        default=None,
        help=f"predict a scored code when score >= THRESHOLD (default {DEFAULT_THRESHOLD} when a "
        "score column exists and --top-k is not given); `tune`: tune each model's threshold on "
        "its --dev-pred against --dev-gold (maximising dev flat micro-F1)",
    )
    ev.add_argument(
        "--dev-gold",
        type=Path,
        default=None,
        help="the validation gold thresholds are tuned on (config dev_gold; never the test gold)",
    )
    ev.add_argument(
        "--dev-pred",
        action="append",
        default=[],
        type=_model_path,
        metavar="NAME=PATH",
        help="a model's predictions on the dev set, for --threshold tune; repeat per model",
    )
    ev.add_argument(
        "--k",
        nargs="+",
        type=_at_least_one("k"),
        default=list(DEFAULT_KS),
        metavar="K",
        help="the K of precision@K and recall@K (config ranking.k; default "
        + " ".join(map(str, DEFAULT_KS))
        + ")",
    )
    ev.add_argument(
        "--tuning-per-code",
        action="store_true",
        default=False,
        help="tuned thresholds: codes with at least --tuning-min-support positive dev documents "
        "get their own (config tuning.per_code)",
    )
    ev.add_argument(
        "--tuning-min-support",
        type=_at_least_one("tuning-min-support"),
        default=DEFAULT_MIN_SUPPORT,
        help=f"see --tuning-per-code (config tuning.min_support; default {DEFAULT_MIN_SUPPORT})",
    )
    ev.add_argument(
        "--allow-dev-test-overlap",
        action="store_true",
        default=False,
        help="tune even when --dev-gold shares documents (doc_id) with the test gold, with a "
        "warning in the report; otherwise that is an error (config tuning.allow_dev_test_overlap)",
    )
    ev.add_argument(
        "--top-k",
        type=_at_least_one("top-k"),
        default=None,
        help="keep the K highest-scored codes per document (with --threshold, both must hold)",
    )
    ev.add_argument(
        "--code-format",
        choices=CODE_FORMATS,
        default=LabelOptions.code_format,
        help="how files write codes: auto (dotted if any code has a dot), dotted, undotted",
    )
    ev.add_argument(
        "--code-type",
        action="append",
        default=[],
        type=_code_type,
        metavar="[NAME=]dx|proc",
        help="the kind of the undotted codes that are valid as both a diagnosis and a procedure "
        "(ICD-9 4019: 401.9 or 40.19) in files without a code_type column; it never changes a "
        "code whose form tells its kind (a dotted 401.9 stays a diagnosis). dx or proc: every "
        "file; NAME=dx|proc: one file, NAME a model (also its --dev-pred) or `gold` (also "
        "--dev-gold and --train-gold); repeat per file",
    )
    ev.add_argument(
        "--icm-empty-gold",
        choices=EMPTY_GOLD,
        default=IcmParams.empty_gold,
        help="ICM: gold documents without labels count and score -IC(P) (keep, default) or "
        "are left out (drop, as the pyevall package does)",
    )
    for name in ("alpha1", "alpha2", "beta"):
        default = getattr(IcmParams, name)
        ev.add_argument(
            f"--icm-{name}",
            type=_finite,
            default=default,
            help=f"ICM weight {name} (default {default:g}): "
            "ICM_i = alpha1 IC(P_i) + alpha2 IC(G_i) - beta IC(P_i u G_i)",
        )
    for name in ("a", "b"):
        default = getattr(IcmParams, f"propensity_{name}")
        ev.add_argument(
            f"--propensity-{name}",
            type=_finite,
            default=default,
            help=f"PROP-F: Jain et al.'s propensity parameter {name.upper()} (default {default:g})",
        )
    ev.add_argument(
        "--label-set",
        choices=LABEL_SETS,
        default=DEFAULT_LABEL_SET,
        help="labels of LB-ACC, LB-F and EB-HAMM: observed in gold or predictions (default) or "
        "every leaf of the hierarchy",
    )
    ev.add_argument(
        "--format",
        action="append",
        default=[],
        type=_named_format,
        metavar="NAME=FORMAT",
        help="the format of a file, NAME being a model name or `gold`: "
        + "; ".join(f"{n} = {f.summary}" for n, f in FORMATS.items())
        + ". By default detected where the file says so unambiguously",
    )
    ev.add_argument(
        "--code-list",
        action="append",
        default=[],
        type=_named_path,
        metavar="NAME=PATH",
        help="dense arrays: the code of each column (default: NAME.codes.txt beside the matrix)",
    )
    ev.add_argument(
        "--doc-list",
        action="append",
        default=[],
        type=_named_path,
        metavar="NAME=PATH",
        help="dense arrays: the document of each row (default: NAME.docs.txt beside the matrix)",
    )

    ev.add_argument(
        "--bootstrap",
        type=_at_least_zero("bootstrap"),
        default=Settings.bootstrap,
        metavar="N",
        help="bootstrap replicates of every metric (documents resampled with Poisson(1) "
        "weights); 0 turns OUT/intervals.parquet and OUT/comparisons.parquet off "
        f"(default {Settings.bootstrap})",
    )
    ev.add_argument(
        "--confidence",
        type=_confidence,
        default=Settings.confidence,
        help=f"confidence level of the percentile intervals (default {Settings.confidence})",
    )
    ev.add_argument(
        "--seed",
        type=_at_least_zero("seed"),
        default=Settings.seed,
        help=f"seed of the bootstrap weights and randomization swaps (default {Settings.seed})",
    )
    ev.add_argument(
        "--permutations",
        type=_at_least_zero("permutations"),
        default=Settings.permutations,
        metavar="R",
        help="permutations of the paired randomization test per pair of models; 0 = no test "
        f"(default {Settings.permutations})",
    )
    ev.add_argument(
        "--memory-limit",
        type=_memory_limit,
        default=None,
        help="bound the memory of normalisation (DuckDB) and of each count, e.g. 2GB "
        "(config engine.memory_limit)",
    )
    ev.add_argument(
        "--temp-directory",
        type=Path,
        default=None,
        help="DuckDB's spill folder in normalisation (config engine.temp_directory)",
    )
    ev.add_argument(
        "--threads",
        type=_at_least_one("threads"),
        default=None,
        help="threads of the count (default: the cores this process may use); with two or "
        "more, the gold may be normalised beside the first model's predictions",
    )

    hi = sub.add_parser(
        "hierarchy",
        help="build the level tables of a hierarchy",
        description="Writes OUT/levels.parquet and OUT/ancestors.parquet.",
    )
    hi.add_argument(
        "--out", required=True, type=Path, help="output folder, replaced whole as evaluate's"
    )
    _hierarchy_options(hi)
    return parser


def _hierarchy_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--hierarchy",
        default="package",
        metavar="SOURCE_OR_FILE",
        help="package (ICD-9-CM v32, offline; default), cms or cophe (pinned downloads), icd10 "
        "(ICD-10-CM and ICD-10-PCS, offline, built once into the cache), or the path of your own "
        "tree, labels read verbatim: a child,parent edge list (.csv/.tsv/.parquet) or a "
        "CoPHE-style .json",
    )
    parser.add_argument(
        "--hierarchy-sha256",
        default=None,
        metavar="SHA256",
        help="pin of a downloaded source (cms: the CMS zip's sha256; config hierarchy.sha256)",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path("resources"),
        help="folder for downloaded hierarchy sources and the built ICD-10 and ICD-9 trees "
        "(default: resources)",
    )


def hierarchy_config(args: argparse.Namespace) -> dict:
    """``--hierarchy`` and ``--hierarchy-sha256`` as the config's ``hierarchy`` section."""
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
            console.print(f"downloading {escape(spec.url)}")
            download(spec, path, hierarchy["sha256"])
        return source, path
    return source, Path(hierarchy["path"]) if hierarchy["path"] else None


def _hierarchy(
    args: argparse.Namespace, out: Path, max_level: str | None = None
) -> tuple[Path, Path, str]:
    """Build the hierarchy's tables into ``out``; also return its name for reports."""
    hierarchy = hierarchy_config(args)
    source, path = _hierarchy_source(hierarchy, args.cache)
    levels, ancestors = out / "levels.parquet", out / "ancestors.parquet"
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


def _per_file_options(args: argparse.Namespace, names: list[str]) -> dict[str, dict]:
    """--format / --code-list / --doc-list / --code-type NAME=... as per-file option
    overrides, checked by name."""
    per_file: dict[str, dict] = {}
    for flag, key, pairs in (
        ("--format", "format", args.format),
        ("--code-list", "code_list", args.code_list),
        ("--doc-list", "doc_list", args.doc_list),
        ("--code-type", "code_type", [(n, kind) for n, kind in args.code_type if n]),
    ):
        for name, value in pairs:
            if name != "gold" and name not in names:
                raise HievalError(
                    f"{flag} NAME=...: no model {preview_value(name)} (models: "
                    f"{', '.join(names)}; or `gold`)"
                )
            per_file.setdefault(name, {})[key] = str(value)
    return per_file


def _run_inputs(args: argparse.Namespace) -> list[tuple[str, Path]]:
    """Every file and folder ``hieval evaluate`` reads (or spills into), each with how a
    message names it: none may lie inside the output folder, which a run replaces whole."""
    named = [(f"--gold {path}", path) for path in args.gold]
    named += [(f"--pred {name}={path}", path) for name, path in args.pred]
    named += [(f"--dev-pred {name}={path}", path) for name, path in args.dev_pred]
    for flag, pairs in (("--code-list", args.code_list), ("--doc-list", args.doc_list)):
        named += [(f"{flag} {name}={path}", path) for name, path in pairs]
    for flag, path in (
        ("--dev-gold", args.dev_gold),
        ("--train-gold", args.train_gold),
        ("--temp-directory", args.temp_directory),
    ):
        if path is not None:
            named.append((f"{flag} {path}", path))
    return named + _hierarchy_inputs(args)


def _hierarchy_inputs(args: argparse.Namespace) -> list[tuple[str, Path]]:
    """The hierarchy's inputs (``--cache``, a tree file), named as :func:`_run_inputs` does."""
    named = [(f"--cache {args.cache}", args.cache)]
    tree = hierarchy_config(args)["path"]
    return named + ([(f"--hierarchy {tree}", Path(tree))] if tree else [])


def _run_hierarchy(args: argparse.Namespace) -> None:
    """Build the level tables into ``--out``, replaced whole like ``evaluate``'s folder (a
    user's ``levels.parquet`` there is refused, not overwritten)."""
    with staged_folder(args.out, inputs=_hierarchy_inputs(args)) as staging:
        _hierarchy(args, staging)


def _run_evaluate(args: argparse.Namespace) -> None:
    """Run every stage for the given gold and prediction files.

    Everything is written into a staging folder that replaces ``--out`` only when complete, so
    the folder holds this run's outputs alone, and a failure leaves no partial set behind;
    ``--out`` is replaced only when it holds nothing but an earlier run's unchanged outputs
    and none of this run's inputs (:func:`hieval.atomic.staged_folder`).
    """
    names = [name for name, _ in args.pred]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise HievalError(f"model name(s) given more than once: {', '.join(dupes)}")
    with staged_folder(args.out, inputs=_run_inputs(args)) as staging:
        _evaluate_into(args, names, staging)
    console.print(
        f"[green]wrote[/green] {escape(str(args.out))}/metrics.parquet, summary.csv, summary.md "
        f"and nodes/ for {len(names)} model(s)"
    )


def config_from_args(args: argparse.Namespace) -> dict:
    """The workflow config these options amount to (same keys, same meaning), so that the CLI
    and the workflow derive reading options and parameters through the same functions."""
    gold_file = dict(args.per_file.get("gold", {}))
    return {
        "hierarchy": hierarchy_config(args),
        "gold": str(args.gold[0]) if len(args.gold) == 1 else [str(g) for g in args.gold],
        "train_gold": str(args.train_gold) if args.train_gold else None,
        "gold_format": gold_file.get("format", "auto"),
        "gold_code_list": gold_file.get("code_list"),
        "gold_doc_list": gold_file.get("doc_list"),
        "gold_code_format": args.code_format,
        "gold_code_type": gold_file.get("code_type", _every_file_code_type(args)),
        "max_level": args.max_level,
        "unknown_codes": args.unknown_codes,
        "unknown_docs": args.unknown_docs,
        "threshold": TUNE if args.threshold == TUNE else DEFAULT_THRESHOLD,
        "dev_gold": str(args.dev_gold) if args.dev_gold else None,
        "ranking": {"k": list(args.k)},
        "tuning": {
            "per_code": args.tuning_per_code,
            "min_support": args.tuning_min_support,
            "allow_dev_test_overlap": args.allow_dev_test_overlap,
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
    }


def _evaluate_into(args: argparse.Namespace, names: list[str], out: Path) -> None:
    """The stages of :func:`_run_evaluate`, writing into ``out``: one call per stage, the
    same calls the workflow's scripts make.

    Every input is read and validated before anything is counted, so a bad file of the last
    model fails in seconds, not after the others were counted.
    """
    args.per_file = _per_file_options(args, names)
    config = config_from_args(args)
    figures.prefetch()  # the report's figures come last; their imports need not wait
    params = icm_params(config)
    resources = Resources(threads=args.threads, **config["engine"])
    resources.check_bootstrap(config["uncertainty"]["bootstrap"], models=len(names))
    work = out / "work"
    levels, ancestors, hierarchy = _hierarchy(args, work / "hierarchy", config["max_level"])
    common = {
        "levels_file": levels,
        "unknown_codes": config["unknown_codes"],
        "resources": resources,
    }
    gold = work / "inputs" / "gold.parquet"
    records = [work / "inputs" / "gold.json"]
    gold_job = functools.partial(
        normalize_file,
        args.gold,
        name="gold",
        role=GOLD,
        out=gold,
        record_out=records[0],
        options=gold_options(config),
        **common,
    )
    inputs = work / "inputs"
    labels = {name: inputs / "predictions" / f"{name}.parquet" for name in names}
    scores = {name: inputs / "scores" / f"{name}.parquet" for name in names}
    records += [labels[name].with_suffix(".json") for name in names]
    with ThreadPoolExecutor(1, thread_name_prefix="gold") as background:
        written = None
        if _gold_beside_predictions(args, resources):
            # The predictions start once the gold is known to take the in-memory path (a gold
            # DuckDB reads is read alone, as the memory plan assumes); see hieval.background.
            started = threading.Event()

            def gold_in_background():
                try:
                    return gold_job(on_fast_path=started.set)
                finally:
                    started.set()

            written = background.submit(gold_in_background)
            started.wait()
        else:
            gold_job()
        try:
            tuned = _normalize_predictions(
                args,
                names,
                config,
                gold=gold if written is None else PendingFile(gold, written),
                out=out,
                common=common,
                labels=labels,
                scores=scores,
            )
        except BaseException:
            if written is not None:
                written.result()  # the gold's own error first, as when it is read first
            raise
        if written is not None:
            written.result()
    model_options = {name: _model_options(args, name) for name in names}
    for number, name in enumerate(names, start=1):
        console.rule(f"[bold]{name}[/bold] ({number}/{len(names)}): counting")
        counts = work / "counts" / name
        count_and_score(
            model=name,
            gold=gold,
            labels=labels[name],
            scores=scores[name],
            record=work / "inputs" / "predictions" / f"{name}.json",
            levels_file=levels,
            ancestors=ancestors,
            max_level=config["max_level"],
            params=params,
            label_set=config["comparison"]["label_set"],
            ks=ranking_ks(config),
            out=ModelFiles(
                nodes=counts / "nodes.parquet",
                docs=counts / "docs.parquet",
                item_sums=counts / "item_sums.parquet",
                metrics=work / "metrics" / f"{name}.parquet",
                nodes_report=out / "nodes" / f"{name}.csv",
                ranking=work / "ranking" / f"{name}.parquet",
                notes=work / "ranking" / f"{name}.json",
            ),
            resources=resources,
        )
    settings = uncertainty_settings(config)
    uncertain = {}
    if settings.bootstrap:
        console.rule(f"[bold]uncertainty[/bold]: {settings.bootstrap} replicates")
        uncertainty(
            gold=gold,
            predictions=labels,
            item_sums={name: work / "counts" / name / "item_sums.parquet" for name in names},
            metrics={name: work / "metrics" / f"{name}.parquet" for name in names},
            levels_file=levels,
            ancestors=ancestors,
            max_level=config["max_level"],
            params=params,
            label_set=config["comparison"]["label_set"],
            settings=settings,
            intervals_out=out / "intervals.parquet",
            comparisons_out=out / "comparisons.parquet",
            resources=resources,
            scores=scores,
            ranking={name: work / "ranking" / f"{name}.parquet" for name in names},
            ks=ranking_ks(config),
        )
        uncertain = {
            "intervals": out / "intervals.parquet",
            "comparisons": out / "comparisons.parquet",
        }
    final_reports(
        **uncertain,
        metrics=[
            work / sub / f"{name}.parquet" for name in names for sub in ("metrics", "ranking")
        ],
        notes=[work / "ranking" / f"{name}.json" for name in names],
        records=records,
        levels_file=levels,
        max_level=config["max_level"],
        models=names,
        hierarchy=hierarchy,
        out_dir=out,
    )
    train_gold = None
    if config["train_gold"]:
        train_gold = work / "inputs" / "train_gold.parquet"
        normalize_file(
            config["train_gold"],
            name="train_gold",
            role=GOLD,
            out=train_gold,
            record_out=train_gold.with_suffix(".json"),
            options=gold_options(config),
            **common,
        )
    publish_reports(
        tidy=out / "metrics.parquet",
        nodes={name: work / "counts" / name / "nodes.parquet" for name in names},
        records=records,
        levels_file=levels,
        max_level=config["max_level"],
        hierarchy=hierarchy,
        settings=report_settings(config, model_options),
        html_out=out / "report.html",
        tex_out=out / "tables.tex",
        markdown_out=out / "tables.md",
        figures_out=out / "figures",
        train_gold=train_gold,
        curves={name: out / "thresholds" / f"{name}.parquet" for name in tuned},
        **uncertain,
    )


def _gold_beside_predictions(args: argparse.Namespace, resources: Resources) -> bool:
    """Whether the gold may be normalised in the background while the first model's
    predictions are: one gold file, both files of the kind the in-memory path takes
    (:mod:`hieval.normalize_ranks`), and holding both fits :meth:`Resources.allows_overlap`.
    Whichever of them that path then declines is read by DuckDB alone (the predictions wait
    for a gold DuckDB reads, and DuckDB reads predictions only once the gold is written).
    Later models overlap nothing."""
    from hieval.normalize_ranks import planned_together  # here: it imports pyarrow

    if not args.pred or len(args.gold) > 1:  # several gold files are pooled in DuckDB
        return False
    plan = planned_together([*args.gold, args.pred[0][1]])
    return plan is not None and resources.allows_overlap(plan[0], labels=plan[1])


def _normalize_predictions(
    args: argparse.Namespace,
    names: list[str],
    config: dict,
    *,
    gold: Path | PendingFile,
    out: Path,
    common: dict,
    labels: dict[str, Path],
    scores: dict[str, Path],
) -> dict[str, Path]:
    """Tune thresholds where asked, then normalise each model's predictions to ``labels`` and
    ``scores`` (records beside the labels); returns the tuned JSON per model."""
    tuned = _tune_thresholds(args, names, config, gold=gold, out=out, common=common)
    for number, (name, path) in enumerate(args.pred, start=1):
        console.rule(f"[bold]{name}[/bold] ({number}/{len(args.pred)}): reading")
        normalize_file(
            path,
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
            **common,
        )
    return tuned


def _every_file_code_type(args: argparse.Namespace) -> str | None:
    """The last ``--code-type dx|proc`` given without a NAME (None: none)."""
    plain = [kind for name, kind in args.code_type if name is None]
    return plain[-1] if plain else None


def _model_options(args: argparse.Namespace, name: str) -> LabelOptions:
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


def _tune_thresholds(
    args: argparse.Namespace,
    names: list[str],
    config: dict,
    *,
    gold: Path | PendingFile,
    out: Path,
    common: dict,
) -> dict[str, Path]:
    """Normalise the dev gold and each tuned model's dev predictions, tune, and return the
    tuned JSON of each tuned model (the curves go to OUT/thresholds/)."""
    dev = dict(args.dev_pred)
    strays = sorted(set(dev) - set(names))
    if strays:
        raise HievalError(
            f"--dev-pred NAME=...: no model {preview_value(strays[0])} (models: {', '.join(names)})"
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
            console.print(
                "[yellow]warning:[/yellow] --dev-pred given but no model tunes its threshold "
                "(--threshold tune): the dev predictions are not read"
            )
        return {}
    gold = Path(gold)  # tuning reads the gold's record too: a gold being written is waited for
    work = out / "work" / "inputs" / "dev"
    dev_gold = work / "gold.parquet"
    normalize_file(
        config["dev_gold"],
        name="dev_gold",
        role=GOLD,
        out=dev_gold,
        record_out=dev_gold.with_suffix(".json"),
        options=dataclasses.replace(gold_options(config), code_list=None, doc_list=None),
        **common,
    )
    tuned = {}
    for spec in tuned_specs:
        name = spec.model
        console.rule(f"[bold]{name}[/bold]: tuning its threshold on the dev set")
        dev_labels = work / "predictions" / f"{name}.parquet"
        dev_scores = work / "scores" / f"{name}.parquet"
        normalize_file(
            spec.dev_predictions,
            name=f"{name} (dev)",
            role=PREDICTIONS,
            out=dev_labels,
            record_out=dev_labels.with_suffix(".json"),
            options=_model_options(args, name),
            gold=dev_gold,
            unknown_docs=config["unknown_docs"],
            scores_out=dev_scores,
            **common,
        )
        tuned[name] = out / "thresholds" / f"{name}.json"
        tune_threshold(
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
    return tuned


def _configure_logging() -> logging.Handler:
    """The library's progress lines on stderr, as plain lines beside the CLI's own."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger("hieval")
    root.setLevel(logging.INFO)
    root.addHandler(handler)
    return handler


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (0 only when every output was written; 130 after
    Ctrl-C, 143 after SIGTERM, with the staging folder removed)."""
    args = build_parser().parse_args(argv)
    handler = _configure_logging()
    stop = StopSignals()
    try:
        with stop, hints.entry_point(hints.CLI):
            if args.command == "evaluate":
                _run_evaluate(args)
            else:
                _run_hierarchy(args)
    except BaseException as exc:
        stopped = stop.stopped(exc)
        if stopped is not None:
            what, code = stopped
            console.print(f"[red]hieval:[/red] {what}")
            return code
        if not isinstance(exc, HievalError):
            raise
        console.print(f"[red]hieval: error:[/red] {escape(str(exc))}")
        return 1
    finally:
        logging.getLogger("hieval").removeHandler(handler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
