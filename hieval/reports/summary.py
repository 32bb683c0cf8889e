"""Reports over all models: the tidy table, a wide summary, a paper-style Markdown table, and
per-node over/under-prediction tables (the disagreements CoPHE exists to show)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from hieval.atomic import atomic_path, write_parquet, write_text
from hieval.codes.icd9 import CODE_TYPES
from hieval.metrics.registry import (
    FAMILY_TITLES,
    HEADLINE,
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
from hieval.reports.conventions import conventions_markdown
from hieval.reports.escaping import csv_safe
from hieval.reports.escaping import markdown as md
from hieval.reports.generative import rates_markdown
from hieval.reports.numbers import in_percent, percent


def write_csv(frame: pl.DataFrame, path: str | Path) -> None:
    """Write a CSV file atomically, its text cells safe to open in a spreadsheet
    (:func:`hieval.reports.escaping.csv_safe`)."""
    with atomic_path(path) as tmp:
        csv_safe(frame).write_csv(tmp)


def combine(
    tidy_frames: list[pl.DataFrame], levels: tuple[str, ...], models: list[str]
) -> pl.DataFrame:
    """All models' tidy rows in one table, in a stable order."""
    tidy = pl.concat(tidy_frames).cast(TIDY_SCHEMA)
    return sort_tidy(tidy, levels, models)


def _pct(value: float) -> str:
    """A share in percent as the HTML report prints it (never a perfect 100.0 it is not)."""
    return percent(value)


def _prf_table(
    title: str, columns: list[tuple[str, str, str]], models: list[str], lookup: dict
) -> list[str]:
    """A Markdown table of micro P / R / F1 cells: one row per model, one column per
    (heading, family, level)."""
    lines = [
        "",
        f"## {title}",
        "",
        "| Model | " + " | ".join(md(heading) for heading, _, _ in columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for model in models:
        cells = []
        for _, family, level in columns:
            row = lookup.get((model, family, level))
            cells.append(
                " / ".join(_pct(row[m]) for m in ("precision", "recall", "f1")) if row else "-"
            )
        lines.append(f"| {md(model)} | " + " | ".join(cells) + " |")
    return lines


def summary_markdown(  # noqa: PLR0913 (write_reports' keywords, handed on)
    tidy: pl.DataFrame,
    *,
    levels: tuple[str, ...],
    models: list[str],
    records: list[dict],
    hierarchy: str,
    code_system: str = "",
    intervals: pl.DataFrame | None = None,
    comparisons: pl.DataFrame | None = None,
    systems: dict[str, str] | None = None,
    notes: list[dict] = (),
    conventions: tuple[pl.DataFrame, dict] | None = None,
) -> str:
    """A paper-style table (one row per model) plus per-level tables and input notes; with
    ``intervals``/``comparisons`` the headline scores' intervals and significant differences,
    with ``systems`` (model → system) the mean ± sd over each system's runs.

    ``code_system`` names how labels were read (``icd9``, ``icd10``, ``verbatim``): the same
    file scores differently under another system, so the header says which one it was."""
    micro = wide(tidy.filter(pl.col("average") == "micro"))
    lookup = {(r["model"], r["family"], r["level"]): r for r in micro.iter_rows(named=True)}
    lines = [
        "# Evaluation summary",
        "",
        f"Hierarchy: {md(hierarchy)}."
        + (f" Code system: {md(code_system)}." if code_system else ""),
        f"Levels evaluated: {', '.join(map(md, levels))}; `overall` pools them.",
        "Scores are percentages, micro-averaged unless named macro; flat compares leaf codes "
        "only. Documents and labels: what the model's file holds after normalisation.",
        "",
        *_headline_table(tidy, lookup, models, records),
    ]
    for family in ("set", "cophe"):
        lines += _prf_table(
            f"{FAMILY_TITLES[family]} per level (P / R / F1, micro)",
            [(level, family, level) for level in levels],
            models,
            lookup,
        )
    if any(family in SPLIT_FAMILIES for family in micro["family"].unique()):
        lines += _prf_table(
            "Diagnoses and procedures (overall, P / R / F1, micro)", _SPLIT, models, lookup
        )
    lines += _suite_table(tidy, models)
    lines += _score_table(tidy, models, notes)
    if intervals is not None:
        lines += uncertainty_markdown(intervals, comparisons, models)
    if systems:
        lines += systems_markdown(tidy, systems)
    if conventions is not None:
        lines += conventions_markdown(*conventions, models)
    lines += rates_markdown(records, md)
    lines_notes = _collapse_notes(
        [(r["name"], "", _record_note(r)) for r in records]
        + [(n["model"], " (scores)", _score_note(n)) for n in notes]
    )
    if lines_notes:
        lines += ["", "## Input notes", "", *lines_notes]
    return "\n".join(lines) + "\n"


#: The diagnoses/procedures table's columns: (title, family, level).
_SPLIT = [
    (
        f"{FAMILY_TITLES[family]} {kind}",
        f"{family}_{kind}",
        LEAF if family == "flat" else OVERALL,
    )
    for family in ("flat", "cophe")
    for kind in CODE_TYPES
]


def _headline_table(
    tidy: pl.DataFrame, lookup: dict, models: list[str], records: list[dict]
) -> list[str]:
    """One row per model: its documents and labels, the headline P / R / F1, the macro F1s
    and how its predictions were selected."""
    headline = [("flat", LEAF), ("set", OVERALL), ("cophe", OVERALL)]
    lines = [
        "| Model | Documents | Labels | "
        + " | ".join(
            f"{FAMILY_TITLES[f].split('-')[0]} {m}" for f, _ in headline for m in ("P", "R", "F1")
        )
        + " | Flat macro F1 | CoPHE macro F1 | Decision |",
        "|---|" + "---:|" * (3 * len(headline) + 4) + "---|",
    ]
    by_name = {r["name"]: r for r in records}
    macro = {
        (r["model"], r["family"]): r["value"]
        for r in tidy.filter(
            (pl.col("average") == "macro")
            & (pl.col("metric") == "f1")
            & pl.col("level").is_in([LEAF, OVERALL])
        ).iter_rows(named=True)
    }
    for model in models:
        record = by_name.get(model, {})
        cells = [f"{record['documents']:,}" if "documents" in record else "-"]
        cells.append(f"{record['labels']:,}" if "labels" in record else "-")
        for family, level in headline:
            row = lookup.get((model, family, level))
            cells += [_pct(row[m]) if row else "-" for m in ("precision", "recall", "f1")]
        for family in ("flat", "cophe"):
            value = macro.get((model, family))
            cells.append(_pct(value) if value is not None else "-")
        cells.append(md(record.get("selection") or "-"))
        lines.append(f"| {md(model)} | " + " | ".join(cells) + " |")
    return lines


def _suite_table(tidy: pl.DataFrame, models: list[str]) -> list[str]:
    """ICM and the comparison metrics, one row per model (nothing when none was computed)."""
    suite = tidy.filter(pl.col("family").is_in([m.family for m in SUITE]))
    if not suite.height:
        return []
    values = {
        (r["model"], r["family"], r["level"], r["average"], r["metric"]): r["value"]
        for r in suite.iter_rows(named=True)
    }
    lines = [
        "",
        "## ICM and the comparison metrics (Amigó & Delgado, 2022)",
        "",
        "EB-HAMM and FPR are losses (lower is better); ICM is in bits, ICM-Norm in [0, 1], the "
        "others in percent.",
        "",
        f"| Model | {' | '.join(m.paper for m in SUITE)} |",
        "|---|" + "---:|" * len(SUITE),
    ]
    for model in models:
        keys = [(model, m.family, paper_level(m), m.average, m.metric) for m in SUITE]
        cells = [
            (percent(values[key]) if in_percent(key[1]) else f"{values[key]:.4g}")
            if key in values
            else "-"
            for key in keys
        ]
        lines.append(f"| {md(model)} | " + " | ".join(cells) + " |")
    return lines


def _score_table(tidy: pl.DataFrame, models: list[str], notes: list[dict] = ()) -> list[str]:
    """Ranking, calibration and tuned thresholds at the leaves (one column per tidy metric),
    ranking in percent as the other scores; with the share of pairs each model's scores cover
    (a truncated score file's unscored pairs weigh on its AUC, Brier and ECE)."""
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
    covered = {
        n["model"]: 1 - n["unscored_pairs"] / n["label_space_pairs"]
        for n in notes
        if n.get("label_space_pairs") and n.get("unscored_pairs") is not None
    }
    heads = [f"{metric} ({average})" for _, average, metric in columns]
    lines = [
        "",
        "## Scores: ranking, calibration and tuned thresholds (leaf codes)",
        "",
        "Models without scores have no ranking rows (see the notes). Ranking metrics in percent; "
        "Brier and ECE are losses. Pairs scored: the share of the label space's (document, "
        "code) pairs the score file scores; the others rank tied below every scored pair (AUC) "
        "and score zero (Brier, ECE micro); the scored rows leave them out.",
        "",
        f"| Model | Pairs scored (%) | {' | '.join(heads)} |",
        "|---|---:|" + "---:|" * len(heads),
    ]
    for model in models:
        cells = [percent(covered[model]) if model in covered else "-"]
        cells += [
            (percent(values[key]) if in_percent(column[0]) else f"{values[key]:.4g}")
            if (key := (model, *column)) in values
            else "-"
            for column in columns
        ]
        lines.append(f"| {md(model)} | " + " | ".join(cells) + " |")
    return lines


def _collapse_notes(notes: list[tuple[str, str, str]]) -> list[str]:
    """One bullet per distinct note (name, kind, text), naming every model it is about: thirty
    runs of hard predictions give one "no scores" line, not thirty identical ones."""
    names: dict[tuple[str, str], list[str]] = {}
    for name, kind, text in notes:
        if text:
            names.setdefault((kind, text), []).append(name)
    return [
        "- " + ", ".join(f"**{md(name)}**" for name in named) + f"{kind}: " + md(text) + "."
        for (kind, text), named in names.items()
    ]


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
    return "; ".join(parts)


#: Holm-adjusted p-values below this are marked significant in summary.md.
SIGNIFICANCE = 0.05


def _score(value: float | None, metric: str) -> str:
    """A score as the summary prints it; "–" for a bound no bootstrap replicate defines."""
    if value is None:
        return "–"
    return f"{value:.2f}" if metric == "icm" else _pct(value)


def uncertainty_markdown(
    intervals: pl.DataFrame, comparisons: pl.DataFrame | None, models: list[str]
) -> list[str]:
    """Headline scores with their bootstrap intervals, and the pairs of models whose
    difference is significant after Holm's correction (``intervals``/``comparisons.parquet``
    hold every metric)."""
    if intervals.height == 0:
        return []
    key = ("family", "level", "average", "metric")
    rows = {(r["model"], *(r[k] for k in key)): r for r in intervals.iter_rows(named=True)}
    replicates = intervals["replicates"].max()  # a row undefined in some replicates has fewer
    lines = [
        "",
        "## How sure are we",
        "",
        f"Bootstrap intervals over documents ({replicates} replicates; percentile, centred "
        "on the estimate for macro averages and the other means over the labels a test set "
        "contains: `intervals.parquet` has every metric and its `method`). F1 in percent, ICM "
        "in bits.",
        "",
        "| Model | " + " | ".join(h for h, *_ in HEADLINE) + " |",
        "|---|" + "---:|" * len(HEADLINE),
    ]
    for model in models:
        cells = []
        for _, *metric in HEADLINE:
            row = rows.get((model, *metric))
            cells.append(
                f"{_score(row['value'], metric[3])} "
                f"[{_score(row['low'], metric[3])}, {_score(row['high'], metric[3])}]"
                if row
                else "-"
            )
        lines.append(f"| {md(model)} | " + " | ".join(cells) + " |")
    if comparisons is None or comparisons.height == 0:
        return lines
    tested = comparisons["p_adjusted"].is_not_null().any()
    lines += [
        "",
        "Differences A − B with their paired bootstrap interval"
        + (
            f"; **bold**: significant (paired randomization test, "
            f"{comparisons['permutations'].max()} permutations, Holm-adjusted p < {SIGNIFICANCE})."
            if tested
            else "; no test (permutations: 0), so no p."
        ),
        "",
        "| A | B | " + " | ".join(h for h, *_ in HEADLINE) + " |",
        "|---|---|" + "---:|" * len(HEADLINE),
    ]
    pairs = {
        (r["model_a"], r["model_b"], *(r[k] for k in key)): r
        for r in comparisons.iter_rows(named=True)
    }
    for a, b in dict.fromkeys((r["model_a"], r["model_b"]) for r in pairs.values()):
        cells = []
        for _, *metric in HEADLINE:
            row = pairs.get((a, b, *metric))
            if row is None:
                cells.append("-")
                continue
            m = metric[3]
            cell = (
                f"{_score(row['difference'], m)} "
                f"[{_score(row['low'], m)}, {_score(row['high'], m)}]"
            )
            p = row["p_adjusted"]
            if p is not None:
                cell = f"**{cell}** p={p:.2g}" if p < SIGNIFICANCE else f"{cell} p={p:.2g}"
            cells.append(cell)
        lines.append(f"| {md(a)} | {md(b)} | " + " | ".join(cells) + " |")
    return lines


def system_table(tidy: pl.DataFrame, systems: dict[str, str]) -> pl.DataFrame:
    """Mean and standard deviation (n − 1) of every tidy row over the runs of each system:
    ``system, family, level, average, metric, runs, mean, sd`` (sd null for a single run)."""
    mapping = pl.DataFrame(
        {"model": list(systems), "system": list(systems.values())},
        schema={"model": pl.String, "system": pl.String},
    )
    return (
        tidy.join(mapping, on="model", how="inner", maintain_order="left")  # groups in tidy order
        .group_by("system", "family", "level", "average", "metric", maintain_order=True)
        .agg(
            pl.len().cast(pl.Int64).alias("runs"),
            pl.col("value").mean().alias("mean"),
            pl.col("value").std(ddof=1).alias("sd"),
        )
    )


def systems_markdown(tidy: pl.DataFrame, systems: dict[str, str]) -> list[str]:
    """Headline scores as mean ± sd over each system's runs (the CoPHE paper's Table 2
    averages 10 runs of each model)."""
    table = system_table(tidy, systems)
    rows = {
        (r["system"], r["family"], r["level"], r["average"], r["metric"]): r
        for r in table.iter_rows(named=True)
    }
    lines = [
        "",
        "## Runs of one system",
        "",
        "Mean ± standard deviation over the runs (sheet rows) of each system.",
        "",
        "| System | Runs | " + " | ".join(h for h, *_ in HEADLINE) + " |",
        "|---|---:|" + "---:|" * len(HEADLINE),
    ]
    for system in dict.fromkeys(systems.values()):
        cells, runs = [], 0
        for _, *metric in HEADLINE:
            row = rows.get((system, *metric))
            if row is None:
                cells.append("-")
                continue
            runs = row["runs"]
            sd = "-" if row["sd"] is None else _score(row["sd"], metric[3])
            cells.append(f"{_score(row['mean'], metric[3])} ± {sd}")
        lines.append(f"| {md(system)} | {runs} | " + " | ".join(cells) + " |")
    return lines


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
    if record.get("other_version_rows"):
        other = {"icd9": "ICD-10", "icd10": "ICD-9"}.get(record.get("code_system", ""), "other")
        parts.append(f"{record['other_version_rows']} rows of {other} skipped")
    if record.get("unknown_documents_dropped"):
        parts.append(f"{record['unknown_documents_dropped']} documents not in the gold dropped")
    parts += [f"warning: {warning}" for warning in record.get("warnings") or ()]
    return "; ".join(parts)


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
        .join(
            levels_frame.select(pl.col("code").alias("node"), "title"),
            on="node",
            how="left",
            maintain_order="left",
        )
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


def write_reports(  # noqa: PLR0913 (final_reports' tables and the summary's inputs)
    tidy: pl.DataFrame,
    out_dir: str | Path,
    *,
    levels: tuple[str, ...],
    models: list[str],
    records: list[dict],
    hierarchy: str,
    code_system: str = "",
    intervals: pl.DataFrame | None = None,
    comparisons: pl.DataFrame | None = None,
    systems: dict[str, str] | None = None,
    notes: list[dict] = (),
    conventions: tuple[pl.DataFrame, dict] | None = None,
) -> None:
    """Write metrics.parquet/.csv, summary.csv and summary.md into ``out_dir`` (and, with
    ``systems``, systems.parquet: :func:`system_table`)."""
    out = Path(out_dir)
    write_parquet(tidy, out / "metrics.parquet")
    write_csv(tidy, out / "metrics.csv")
    write_csv(wide(tidy), out / "summary.csv")
    if systems:
        write_parquet(system_table(tidy, systems), out / "systems.parquet")
    write_text(
        out / "summary.md",
        summary_markdown(
            tidy,
            levels=levels,
            models=models,
            records=records,
            hierarchy=hierarchy,
            code_system=code_system,
            intervals=intervals,
            comparisons=comparisons,
            systems=systems,
            notes=notes,
            conventions=conventions,
        ),
    )
