"""The ``hieval`` command line: single evaluations without Snakemake, same code, same tables.

``hieval evaluate`` runs the workflow's stages in order (hierarchy, normalisation, counting,
metrics, reports) into one output folder; ``hieval hierarchy`` only builds the level tables.
"""

from __future__ import annotations

import sys as _sys

if __name__ == "__main__":  # first: the figure workers' imports overlap this module's
    from hieval.reports import drawing as _drawing

    _drawing.start_early(_sys.argv)

import argparse
import logging
import math
import re
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from hieval import __version__, hints, run
from hieval.atomic import staged_folder
from hieval.codes.icd9 import CODE_TYPES
from hieval.codesystem import DEFAULT_MAX_LEVEL, SYSTEMS
from hieval.config import (
    TUNE,
    check_model_name,
)
from hieval.conventions.registry import DEFAULT_PAPER_TABLE, PAPER_TABLES
from hieval.conventions.registry import NAMES as CONVENTION_NAMES
from hieval.engine.icm import EMPTY_GOLD, IcmParams
from hieval.errors import VALUE_CHARS, HievalError, preview_value
from hieval.inputs.formats import FORMATS
from hieval.inputs.options import (
    CODE_FORMATS,
    DEFAULT_MALFORMED_CODES,
    DEFAULT_THRESHOLD,
    DEFAULT_UNKNOWN_CODES,
    DEFAULT_UNKNOWN_DOCS,
    MALFORMED_CODE_POLICIES,
    UNKNOWN_CODE_POLICIES,
    UNKNOWN_DOC_POLICIES,
    LabelOptions,
)
from hieval.metrics.ranking import DEFAULT_KS
from hieval.metrics.suite import DEFAULT_LABEL_SET, LABEL_SETS
from hieval.metrics.tuning import DEFAULT_METHOD, DEFAULT_MIN_SUPPORT, TUNING_METHODS
from hieval.metrics.uncertainty.settings import Settings
from hieval.resources import memory_limit_problem
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
            f"expected {' or '.join(CODE_TYPES)}, or NAME={'|'.join(CODE_TYPES)}, got "
            f"{preview_value(text)}"
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


#: A value argparse quotes whole in its own messages ("invalid choice: '...'").
_QUOTED = re.compile(rf"'[^'\n]{{{VALUE_CHARS + 1},}}'")


class _Parser(argparse.ArgumentParser):
    """argparse's parser, its messages quoting a long value cut as every hieval message cuts
    one (a 10,000-character ``--unknown-codes`` value would flood the one line)."""

    def error(self, message: str):
        super().error(_QUOTED.sub(lambda m: preview_value(m.group()[1:-1]), message))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used to document every option in ``--help``)."""
    parser = _Parser(
        prog="hieval",
        description="Flat, set-based and count-preserving hierarchical (CoPHE) evaluation of "
        "multi-label coding models (ICD-9, ICD-10 or your own tree).",
    )
    parser.add_argument("--version", action="version", version=f"hieval {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    ev = sub.add_parser(
        "evaluate",
        help="evaluate one or more prediction files against a gold file",
        # Raw, so the list of files keeps one file per line (tests/test_docs.py checks it
        # against what a run writes).
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Evaluates every --pred against the --gold. Writes the folder OUT, replaced "
        "whole\nonly when everything was written (exit code 0), holding:\n\n"
        "  metrics.parquet, metrics.csv  the tidy table: model, family, level, average, metric, "
        "value\n"
        "  summary.csv                   the same, wide: a column per metric\n"
        "  summary.md                    paper-style tables, with the input notes\n"
        "  report.html                   the HTML report, self-contained (opens offline)\n"
        "  tables.tex, tables.md         P/R/F1 in the CoPHE paper's Table 2 layout, F1 per "
        "level (--paper-table: CAML's or Edin et al.'s table)\n"
        "  figures/*.svg                 the report's figures\n"
        "  nodes/NAME.csv                per-node over- and under-prediction of each model\n"
        "  errors.parquet                error distance: how near each FN and FP is to one of "
        "the other kind\n"
        "  confusions/NAME.parquet       the near misses of a model: gold code, predicted code\n"
        "  codes/NAME.parquet            per code and ancestor node: support, TP, FP, FN, P/R/F1\n"
        "  groups.parquet                with --doc-groups: headline P/R/F1 per group\n"
        "  group_gaps.parquet            with --doc-groups: the largest gap per attribute\n"
        "  intervals.parquet             with --bootstrap N > 0: every tidy row's interval\n"
        "  comparisons.parquet           with --bootstrap N > 0: every pair of models compared\n"
        "  conventions.parquet           headline metrics under each named convention (caml, "
        "edin, ...)\n"
        "  conventions_tests.parquet     McNemar's test of each pair of models with Bonferroni "
        "(Edin et al.'s, beside comparisons.parquet)\n"
        "  thresholds/NAME.json          with --threshold tune: the tuned threshold of a model\n"
        "  thresholds/NAME.parquet       with --threshold tune: its dev sweep\n"
        "  thresholds/NAME.codes.parquet with --threshold tune: its per-code thresholds\n"
        "  work/                         intermediate tables (hierarchy, inputs, counts, "
        "metrics)\n"
        "  .hieval-manifest.json         the list of the run's files, written last",
    )
    _file_options(ev)
    _hierarchy_options(ev)
    _policy_options(ev)
    _selection_options(ev)
    _code_options(ev)
    _metric_options(ev)
    _format_options(ev)
    _uncertainty_options(ev)
    _engine_options(ev)

    hi = sub.add_parser(
        "hierarchy",
        help="build the level tables of a hierarchy",
        description="Writes OUT/levels.parquet and OUT/ancestors.parquet (and "
        "OUT/.hieval-manifest.json, the list of the run's files).",
    )
    hi.add_argument(
        "--out", required=True, type=Path, help="output folder, replaced whole as evaluate's"
    )
    _hierarchy_options(hi)
    return parser


def _file_options(ev: argparse.ArgumentParser) -> None:
    """The files: the gold, each model's predictions, the output folder, the training gold."""
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
        "frequency of the codes, and scored models get psp@K and psndcg@K (propensities "
        "from it; config train_gold)",
    )
    ev.add_argument(
        "--doc-groups",
        type=Path,
        default=None,
        metavar="PATH",
        help="a table doc_id,<attribute>... (CSV, TSV or Parquet; e.g. sex, age_band): headline "
        "P/R/F1 per group of each attribute and the largest gap between groups, in "
        "groups.parquet and group_gaps.parquet (config doc_groups)",
    )


def _policy_options(ev: argparse.ArgumentParser) -> None:
    """What is evaluated: the deepest level, and what to do with codes and documents the
    hierarchy or the gold lacks."""
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
        help="codes not in the hierarchy: error, place by ICD syntax, drop, or count "
        "(predictions only: kept, placed nowhere, a false positive at the leaf level only) "
        "(default: place for ICD-9 and ICD-10, error for your own tree, where place is refused)",
    )
    ev.add_argument(
        "--malformed-codes",
        choices=MALFORMED_CODE_POLICIES,
        default=DEFAULT_MALFORMED_CODES,
        help="predictions that are not codes at all (a generative coder's 'hypertension'): "
        "error (default), or count (a false positive at the leaf level, code_status invalid); "
        "malformed gold is always an error",
    )
    ev.add_argument(
        "--unknown-docs",
        choices=UNKNOWN_DOC_POLICIES,
        default=DEFAULT_UNKNOWN_DOCS,
        help="predicted documents absent from the gold: error (default) or drop",
    )


def _selection_options(ev: argparse.ArgumentParser) -> None:
    """How scores become predictions (threshold, tuning on a dev set, top-k) and the ranking
    cut-offs, in ``--help``'s order."""
    _threshold_and_ranking_options(ev)
    _tuning_options(ev)


def _threshold_and_ranking_options(ev: argparse.ArgumentParser) -> None:
    """The threshold, the dev set it is tuned on, the ranking cut-offs and the conventions."""
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
        "--conventions",
        nargs="+",
        choices=CONVENTION_NAMES,
        default=None,
        metavar="NAME",
        help="the named conventions of conventions.parquet: "
        + ", ".join(CONVENTION_NAMES)
        + " (config conventions; default: every one)",
    )
    ev.add_argument(
        "--paper-table",
        choices=tuple(PAPER_TABLES),
        default=DEFAULT_PAPER_TABLE,
        help="the layout of tables.tex and tables.md: cophe (the CoPHE paper's Table 2; "
        "default), caml (Mullenbach et al.'s) or edin (Edin et al.'s), every cell under that "
        "paper's convention (config report.paper_table)",
    )
    ev.add_argument(
        "--label-space",
        action="append",
        type=_named_path,
        default=[],
        metavar="NAME=PATH",
        help="model NAME's label space for the caml and edin conventions, one code per line "
        "(default: the codes in the gold and its predictions)",
    )


def _tuning_options(ev: argparse.ArgumentParser) -> None:
    """How thresholds are tuned, and top-k."""
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
        "--tuning-method",
        choices=TUNING_METHODS,
        default=DEFAULT_METHOD,
        help="exact: every distinct dev score is a candidate threshold (default); grid: Edin et "
        "al.'s 100 thresholds from 0 to 1, decisions score > t (config tuning.method)",
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


def _code_options(ev: argparse.ArgumentParser) -> None:
    """How files write codes."""
    ev.add_argument(
        "--code-format",
        choices=CODE_FORMATS,
        default=LabelOptions.code_format,
        help="how files write codes: auto (dotted if any code has a dot), dotted, undotted, or "
        "lenient (predictions only: '401.9 - Unspecified ...' read as 401.9; the gold as auto)",
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


def _metric_options(ev: argparse.ArgumentParser) -> None:
    """The parameters of ICM, PROP-F and the label-set metrics."""
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
            help=f"PROP-F, psp@K, psndcg@K: Jain et al.'s propensity parameter {name.upper()} "
            f"(default {default:g})",
        )
    ev.add_argument(
        "--label-set",
        choices=LABEL_SETS,
        default=DEFAULT_LABEL_SET,
        help="labels of LB-ACC, LB-F, FPR and EB-HAMM: observed in gold or predictions "
        "(default) or every leaf of the hierarchy",
    )


def _format_options(ev: argparse.ArgumentParser) -> None:
    """How a file is read: its format and a dense matrix's side lists."""
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


def _uncertainty_options(ev: argparse.ArgumentParser) -> None:
    """Bootstrap intervals and randomization tests."""
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


def _engine_options(ev: argparse.ArgumentParser) -> None:
    """Memory, spill folder and threads."""
    ev.add_argument(
        "--memory-limit",
        type=_memory_limit,
        default=None,
        help="bound the memory of normalisation (DuckDB) and of each count, e.g. 2GB "
        "(config engine.memory_limit; default: the SLURM allocation, the cgroup limit or 80%% "
        "of the machine's memory, whichever is tightest)",
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
        help="threads of the count and of DuckDB's queries (default: the cores this process "
        "may use); with two or more, the gold may be normalised beside the first model's "
        "predictions",
    )


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


def _run_hierarchy(args: argparse.Namespace) -> None:
    """Build the level tables into ``--out``, replaced whole like ``evaluate``'s folder (a
    user's ``levels.parquet`` there is refused, not overwritten)."""
    with staged_folder(args.out, inputs=run.hierarchy_inputs(args)) as staging:
        run.build_tables(args, staging)


def _run_evaluate(args: argparse.Namespace) -> None:
    """Run every stage for the given gold and prediction files.

    Everything is written into a staging folder that replaces ``--out`` only when complete, so
    the folder holds this run's outputs alone, and a failure leaves no partial set behind;
    ``--out`` is replaced only when it holds nothing but an earlier run's unchanged outputs
    and none of this run's inputs (:func:`hieval.atomic.staged_folder`).
    """
    options = run.EvaluateOptions.from_namespace(args)
    run.model_names(options)  # refused before the output folder is touched
    with staged_folder(args.out, inputs=run.run_inputs(options)) as staging:
        names = run.evaluate_into(options, staging, progress=_rule)
    console.print(
        f"[green]wrote[/green] {escape(str(args.out))}/metrics.parquet, summary.csv, summary.md "
        f"and nodes/ for {len(names)} model(s)"
    )


def _rule(subject: str, stage: str) -> None:
    """A stage's progress as a rule across the terminal, its subject (a model) in bold."""
    console.rule(f"[bold]{subject}[/bold]{stage}")


#: The workflow config the CLI's options amount to (kept here for callers of the CLI module).
config_from_args = run.config_from_args


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
    from hieval.console import finish, loaded

    loaded()
    finish(main())
