"""The ``hieval`` command line: single evaluations without Snakemake, same code, same tables.

``hieval evaluate`` runs the workflow's stages in order (hierarchy, normalisation, counting,
metrics, reports) into one output folder; ``hieval hierarchy`` only builds the level tables.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from rich.console import Console

from hieval import __version__, paths
from hieval.atomic import staged_folder
from hieval.config import check_model_name
from hieval.engine.counts import evaluated_levels
from hieval.engine.icm import EMPTY_GOLD, IcmParams
from hieval.errors import HievalError
from hieval.formats import FORMATS
from hieval.hierarchy.sources import DOWNLOADS, download
from hieval.hierarchy.table import read_level_table
from hieval.inputs import (
    CODE_FORMATS,
    UNKNOWN_CODE_POLICIES,
    UNKNOWN_DOC_POLICIES,
    LabelOptions,
)
from hieval.metrics.suite import LABEL_SETS
from hieval.pipeline import build_hierarchy, count_model, model_metrics, normalize, read_records
from hieval.report import combine, node_report, write_csv, write_reports

console = Console(stderr=True, highlight=False, soft_wrap=True)


def _named_path(text: str) -> tuple[str, Path]:
    """NAME=PATH where NAME is a model or ``gold`` (checked against the models later)."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, got {text!r}")
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
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _named_format(text: str) -> tuple[str, str]:
    name, sep, fmt = text.partition("=")
    if not sep or not name or fmt not in FORMATS:
        raise argparse.ArgumentTypeError(
            f"expected NAME=FORMAT with FORMAT one of {', '.join(FORMATS)}, got {text!r}"
        )
    return name, fmt


def _fraction(text: str) -> float:
    value = _finite(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"threshold must be in [0, 1], got {value}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"top-k must be at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used to document every option in ``--help``)."""
    parser = argparse.ArgumentParser(
        prog="hieval",
        description="Flat, set-based and count-preserving hierarchical (CoPHE) evaluation of "
        "multi-label ICD-9 coding models.",
    )
    parser.add_argument("--version", action="version", version=f"hieval {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    ev = sub.add_parser(
        "evaluate",
        help="evaluate one or more prediction files against a gold file",
        description="Writes OUT/metrics.parquet (tidy: model, family, level, average, metric, "
        "value), OUT/metrics.csv, OUT/summary.csv, OUT/summary.md and OUT/nodes/NAME.csv. "
        "Intermediate tables go to OUT/work/. Exit code 0 only when everything was written.",
    )
    ev.add_argument(
        "--gold",
        required=True,
        type=Path,
        help="gold labels, long format doc_id,code (Parquet, CSV or TSV)",
    )
    ev.add_argument(
        "--pred",
        required=True,
        action="append",
        type=_model_path,
        metavar="NAME=PATH",
        help="a model's predictions doc_id,code[,score]; repeat for several models",
    )
    ev.add_argument("--out", required=True, type=Path, help="output folder")
    _hierarchy_options(ev)
    ev.add_argument(
        "--max-level",
        default="c",
        help="highest level evaluated; `overall` pools the levels up to it "
        "(default: c, as in the CoPHE paper)",
    )
    ev.add_argument(
        "--unknown-codes",
        choices=UNKNOWN_CODE_POLICIES,
        default="place",
        help="codes not in the hierarchy: error, place by syntax (default), or drop",
    )
    ev.add_argument(
        "--unknown-docs",
        choices=UNKNOWN_DOC_POLICIES,
        default="error",
        help="predicted documents absent from the gold: error (default) or drop",
    )
    ev.add_argument(
        "--threshold",
        type=_fraction,
        default=None,
        help="predict a scored code when score >= THRESHOLD (default 0.5 when a "
        "score column exists and --top-k is not given)",
    )
    ev.add_argument(
        "--top-k",
        type=_positive,
        default=None,
        help="keep the K highest-scored codes per document (with --threshold, both must hold)",
    )
    ev.add_argument(
        "--code-format",
        choices=CODE_FORMATS,
        default="auto",
        help="how files write codes: auto (dotted if any code has a dot), dotted, undotted",
    )
    ev.add_argument(
        "--code-type",
        choices=("dx", "proc"),
        default=None,
        help="kind of undotted codes in files without a code_type column",
    )
    ev.add_argument(
        "--icm-empty-gold",
        choices=EMPTY_GOLD,
        default="keep",
        help="ICM: gold documents without labels count and score -IC(P) (keep, default) or "
        "are left out (drop, as the pyevall package does)",
    )
    for name, default in (("alpha1", 2.0), ("alpha2", 2.0), ("beta", 3.0)):
        ev.add_argument(
            f"--icm-{name}",
            type=_finite,
            default=default,
            help=f"ICM weight {name} (default {default:g}): "
            "ICM_i = alpha1 IC(P_i) + alpha2 IC(G_i) - beta IC(P_i u G_i)",
        )
    ev.add_argument(
        "--label-set",
        choices=LABEL_SETS,
        default="observed",
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

    hi = sub.add_parser(
        "hierarchy",
        help="build the level tables of a hierarchy",
        description="Writes OUT/levels.parquet and OUT/ancestors.parquet.",
    )
    hi.add_argument("--out", required=True, type=Path, help="output folder")
    _hierarchy_options(hi)
    return parser


def _hierarchy_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--hierarchy",
        default="package",
        metavar="SOURCE_OR_FILE",
        help="package (ICD-9-CM v32, offline; default), cms or cophe (pinned downloads), or the "
        "path of your own tree: a child,parent edge list (.csv/.tsv/.parquet) or a CoPHE-style "
        ".json",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path("resources"),
        help="folder for downloaded hierarchy sources (default: resources)",
    )


def _hierarchy(args: argparse.Namespace, out: Path) -> tuple[Path, Path]:
    source, path = args.hierarchy, None
    if source in DOWNLOADS:
        spec = DOWNLOADS[source]
        path = args.cache / "hierarchy" / source / spec.filename
        if not path.exists():
            console.print(f"downloading {spec.url}")
            download(spec, path)
    elif source != "package":
        source, path = "file", Path(args.hierarchy)
    levels, ancestors = out / "levels.parquet", out / "ancestors.parquet"
    build_hierarchy(source, path, levels, ancestors, log=console.print)
    return levels, ancestors


def _per_file_options(args: argparse.Namespace, names: list[str]) -> dict[str, dict]:
    """--format / --code-list / --doc-list as per-file option overrides, checked by name."""
    per_file: dict[str, dict] = {}
    for flag, key, pairs in (
        ("--format", "format", args.format),
        ("--code-list", "code_list", args.code_list),
        ("--doc-list", "doc_list", args.doc_list),
    ):
        for name, value in pairs:
            if name != "gold" and name not in names:
                raise HievalError(
                    f"{flag} {name}=...: no model {name!r} (models: {', '.join(names)}; or `gold`)"
                )
            per_file.setdefault(name, {})[key] = str(value)
    return per_file


#: Every entry ``hieval evaluate`` writes into OUT: an existing OUT holding nothing else is
#: replaced by the new run's outputs; any other folder is refused, never deleted.
OUTPUT_ENTRIES = frozenset(
    {"metrics.parquet", "metrics.csv", "summary.csv", "summary.md", "nodes", "work"}
)


def evaluate(args: argparse.Namespace) -> None:
    """Run every stage for the given gold and prediction files.

    Everything is written into a staging folder that replaces ``--out`` only when complete, so
    the folder holds this run's outputs alone, and a failure leaves no partial set behind.
    """
    names = [name for name, _ in args.pred]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise HievalError(f"model name(s) given more than once: {', '.join(dupes)}")
    with staged_folder(args.out, replaceable=OUTPUT_ENTRIES) as staging:
        _evaluate_into(args, names, staging)
    console.print(
        f"[green]wrote[/green] {args.out}/metrics.parquet, summary.csv, summary.md "
        f"and nodes/ for {len(names)} model(s)"
    )


def _evaluate_into(args: argparse.Namespace, names: list[str], out: Path) -> None:
    """The stages of :func:`evaluate`, writing into ``out``.

    Every input is read and validated before anything is counted, so a bad file of the last
    model fails in seconds, not after the others were counted.
    """
    work = out / "work"
    levels, ancestors = _hierarchy(args, work / "hierarchy")
    table = read_level_table(levels)
    try:
        evaluated = evaluated_levels(table.levels, args.max_level)
    except ValueError as exc:
        raise HievalError(str(exc)) from None
    try:
        icm_params = IcmParams(args.icm_alpha1, args.icm_alpha2, args.icm_beta, args.icm_empty_gold)
    except ValueError as exc:
        raise HievalError(str(exc)) from None

    log = console.print
    per_file = _per_file_options(args, names)

    def options_for(name: str, **scoring) -> LabelOptions:
        return LabelOptions(
            code_type=args.code_type,
            code_format=args.code_format,
            **scoring,
            **per_file.get(name, {}),
        )

    gold = work / "inputs" / "gold.parquet"
    records = [work / "inputs" / "gold.json"]
    normalize(
        args.gold,
        "gold",
        gold,
        records[0],
        levels,
        options_for("gold"),
        args.unknown_codes,
        log=log,
    )
    labels = {}
    for number, (name, path) in enumerate(args.pred, start=1):
        console.rule(f"[bold]{name}[/bold] ({number}/{len(args.pred)}): reading")
        labels[name] = work / "inputs" / "predictions" / f"{name}.parquet"
        records.append(labels[name].with_suffix(".json"))
        normalize(
            path,
            name,
            labels[name],
            records[-1],
            levels,
            options_for(name, threshold=args.threshold, top_k=args.top_k),
            args.unknown_codes,
            gold,
            args.unknown_docs,
            0.5,
            log,
        )
    tidy, reports = [], {}
    for number, name in enumerate(names, start=1):
        console.rule(f"[bold]{name}[/bold] ({number}/{len(names)}): counting")
        counts = work / "counts" / name
        count_model(
            gold,
            labels[name],
            levels,
            ancestors,
            args.max_level,
            counts / "nodes.parquet",
            counts / "docs.parquet",
            counts / "items.parquet",
            icm_params,
            log=log,
        )
        tidy.append(
            model_metrics(
                counts,
                name,
                work / "metrics" / f"{name}.parquet",
                levels,
                icm_params,
                args.label_set,
            )
        )
        reports[name] = node_report(
            paths.read_parquet(counts / "nodes.parquet"), table.frame, table.levels
        )
    for name, frame in reports.items():
        write_csv(frame, out / "nodes" / f"{name}.csv")
    hierarchy = args.hierarchy if args.hierarchy in ("package", *DOWNLOADS) else "your tree"
    write_reports(
        combine(tidy, evaluated, names),
        out,
        evaluated,
        names,
        read_records(records),
        f"{hierarchy} ({table.source})",
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (0 only when every output was written)."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "evaluate":
            evaluate(args)
        else:
            _hierarchy(args, args.out)
    except HievalError as exc:
        console.print(f"[red]hieval: error:[/red] {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
