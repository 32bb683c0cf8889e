"""Reports over all models: the tidy table, a wide summary, a paper-style Markdown table, and
per-node over/under-prediction tables (the disagreements CoPHE exists to show)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from hieval.atomic import atomic_path, write_text
from hieval.codes import CODE_TYPES
from hieval.inputs import write_parquet
from hieval.metrics.registry import (
    FAMILY_TITLES,
    LEAF,
    OVERALL,
    SCORE_METRICS,
    SPLIT_FAMILIES,
    SUITE,
    TIDY_SCHEMA,
    paper_level,
    sort_tidy,
    wide,
)


def write_csv(frame: pl.DataFrame, path: str | Path) -> None:
    """Write a CSV file atomically."""
    with atomic_path(path) as tmp:
        frame.write_csv(tmp)


def combine(
    tidy_frames: list[pl.DataFrame], levels: tuple[str, ...], models: list[str]
) -> pl.DataFrame:
    """All models' tidy rows in one table, in a stable order."""
    tidy = pl.concat(tidy_frames).cast(TIDY_SCHEMA)
    return sort_tidy(tidy, levels, models)


def _pct(value: float) -> str:
    return f"{100 * value:.1f}"


def _prf_table(
    title: str, columns: list[tuple[str, str, str]], models: list[str], lookup: dict
) -> list[str]:
    """A Markdown table of micro P / R / F1 cells: one row per model, one column per
    (heading, family, level)."""
    lines = [
        "",
        f"## {title}",
        "",
        "| Model | " + " | ".join(heading for heading, _, _ in columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for model in models:
        cells = []
        for _, family, level in columns:
            row = lookup.get((model, family, level))
            cells.append(
                " / ".join(_pct(row[m]) for m in ("precision", "recall", "f1")) if row else "-"
            )
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return lines


def summary_markdown(
    tidy: pl.DataFrame,
    *,
    levels: tuple[str, ...],
    models: list[str],
    records: list[dict],
    hierarchy: str,
    notes: list[dict] = (),
) -> str:
    """A paper-style table (one row per model) plus per-level tables, the score metrics and
    input notes."""
    micro = wide(tidy.filter(pl.col("average") == "micro"))
    lookup = {(r["model"], r["family"], r["level"]): r for r in micro.iter_rows(named=True)}
    headline = [("flat", LEAF), ("set", OVERALL), ("cophe", OVERALL)]
    lines = [
        "# Evaluation summary",
        "",
        f"Hierarchy: {hierarchy}. Levels evaluated: {', '.join(levels)}; `overall` pools them.",
        "Scores are micro-averaged percentages; flat compares leaf codes only.",
        "",
        "| Model | "
        + " | ".join(
            f"{FAMILY_TITLES[f].split('-')[0]} {m}" for f, _ in headline for m in ("P", "R", "F1")
        )
        + " |",
        "|---|" + "---:|" * (3 * len(headline)),
    ]
    for model in models:
        cells = []
        for family, level in headline:
            row = lookup.get((model, family, level))
            cells += [_pct(row[m]) if row else "-" for m in ("precision", "recall", "f1")]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    for family in ("set", "cophe"):
        lines += _prf_table(
            f"{FAMILY_TITLES[family]} per level (P / R / F1, micro)",
            [(level, family, level) for level in levels],
            models,
            lookup,
        )
    split = [
        (
            f"{FAMILY_TITLES[family]} {kind}",
            f"{family}_{kind}",
            LEAF if family == "flat" else OVERALL,
        )
        for family in ("flat", "cophe")
        for kind in CODE_TYPES
    ]
    if any(family in SPLIT_FAMILIES for family in micro["family"].unique()):
        lines += _prf_table(
            "Diagnoses and procedures (overall, P / R / F1, micro)", split, models, lookup
        )
    suite = tidy.filter(pl.col("family").is_in([m.family for m in SUITE]))
    if suite.height:
        values = {
            (r["model"], r["family"], r["level"], r["average"], r["metric"]): r["value"]
            for r in suite.iter_rows(named=True)
        }
        lines += [
            "",
            "## ICM and the comparison metrics (Amigó & Delgado, 2022)",
            "",
            "EB-HAMM is a loss (lower is better); ICM is in bits, the others in [0, 1].",
            "",
            f"| Model | {' | '.join(m.paper for m in SUITE)} |",
            "|---|" + "---:|" * len(SUITE),
        ]
        for model in models:
            keys = [(model, m.family, paper_level(m), m.average, m.metric) for m in SUITE]
            cells = [f"{values[key]:.4g}" if key in values else "-" for key in keys]
            lines.append(f"| {model} | " + " | ".join(cells) + " |")
    lines += _score_table(tidy, models)
    lines_notes = [_record_note(r) for r in records] + [_score_note(n) for n in notes]
    lines_notes = [n for n in lines_notes if n]
    if lines_notes:
        lines += ["", "## Input notes", "", *lines_notes]
    return "\n".join(lines) + "\n"


def _score_table(tidy: pl.DataFrame, models: list[str]) -> list[str]:
    """Ranking, calibration and tuned thresholds at the leaves (one column per tidy metric)."""
    score = tidy.filter(
        pl.col("family").is_in([m.family for m in SCORE_METRICS]) & (pl.col("level") == LEAF)
    )
    if not score.height:
        return []
    columns = score.select("family", "average", "metric").unique(maintain_order=True).rows()
    values = {
        (r["model"], r["family"], r["average"], r["metric"]): r["value"]
        for r in score.iter_rows(named=True)
    }
    heads = [f"{metric} ({average})" for _, average, metric in columns]
    lines = [
        "",
        "## Scores: ranking, calibration and tuned thresholds (leaf codes)",
        "",
        "Models without scores have no ranking rows (see the notes).",
        "",
        f"| Model | {' | '.join(heads)} |",
        "|---|" + "---:|" * len(heads),
    ]
    for model in models:
        cells = [
            f"{values[key]:.4g}" if (key := (model, *column)) in values else "-"
            for column in columns
        ]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return lines


def _score_note(note: dict) -> str:
    parts = []
    if note.get("ranking"):
        parts.append(note["ranking"])
    if note.get("unscored_pairs"):
        parts.append(
            f"{note['unscored_pairs']} of {note['label_space_pairs']} (document, code) pairs "
            "unscored (a truncated score file): they rank below every scored pair, so its AUC "
            "is a bound"
        )
    if note.get("calibration"):
        parts.append(note["calibration"])
    for level, count in (note.get("codes_without_node") or {}).items():
        parts.append(
            f"{count} code(s) of the label space have no node at level {level} (shallower "
            "leaves or unplaced codes; left out of its ranking rows, as of its set counts)"
        )
    return f"- **{note['model']}** (scores): " + "; ".join(parts) + "." if parts else ""


def _record_note(record: dict) -> str:
    parts = []
    if record.get("duplicates_removed"):
        parts.append(f"{record['duplicates_removed']} duplicate rows counted once")
    if record.get("unknown_codes"):
        codes = sorted(record["unknown_codes"])
        shown = ", ".join(codes[:10]) + (f" and {len(codes) - 10} more" if len(codes) > 10 else "")
        parts.append(
            f"{len(codes)} codes not in the hierarchy ({record['unknown_code_policy']}): {shown}"
        )
    if record.get("unknown_documents_dropped"):
        parts.append(f"{record['unknown_documents_dropped']} documents not in the gold dropped")
    return f"- **{record['name']}**: " + "; ".join(parts) + "." if parts else ""


def node_report(
    nodes: pl.DataFrame, levels_frame: pl.DataFrame, levels: tuple[str, ...]
) -> pl.DataFrame:
    """CoPHE per-node counts with titles, largest disagreement (FP + FN) first.

    ``over`` is predicted-but-not-gold leaves under the node (FP), ``under`` gold-but-missed
    leaves (FN); ``balance`` = n_pred - n_gold tells which way a family of codes leans.
    """
    rank = {level: i for i, level in enumerate(levels)}
    return (
        nodes.filter(pl.col("family") == "cophe")
        .join(levels_frame.select(pl.col("code").alias("node"), "title"), on="node", how="left")
        .select(
            "level",
            "node",
            "title",
            "n_gold",
            "n_pred",
            "tp",
            pl.col("fp").alias("over"),
            pl.col("fn").alias("under"),
            (pl.col("fp") + pl.col("fn")).alias("disagreement"),
            (pl.col("n_pred") - pl.col("n_gold")).alias("balance"),
        )
        .with_columns(
            pl.col("level")
            .replace_strict(rank, default=len(rank), return_dtype=pl.Int64)
            .alias("_rank")
        )
        .sort(["disagreement", "_rank", "node"], descending=[True, False, False])
        .drop("_rank")
    )


def write_reports(
    tidy: pl.DataFrame,
    out_dir: str | Path,
    *,
    levels: tuple[str, ...],
    models: list[str],
    records: list[dict],
    hierarchy: str,
    notes: list[dict] = (),
) -> None:
    """Write metrics.parquet/.csv, summary.csv and summary.md into ``out_dir``."""
    out = Path(out_dir)
    write_parquet(tidy, out / "metrics.parquet")
    write_csv(tidy, out / "metrics.csv")
    write_csv(wide(tidy), out / "summary.csv")
    write_text(
        out / "summary.md",
        summary_markdown(
            tidy,
            levels=levels,
            models=models,
            records=records,
            hierarchy=hierarchy,
            notes=notes,
        ),
    )
