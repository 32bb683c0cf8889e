"""Paper-ready tables: the CoPHE paper's Table 2 layout and a per-level table, in LaTeX
(booktabs) and Markdown, with the best value of each column in bold.

Values are micro-averaged percentages with one decimal, as the paper prints them. "Best" is
decided on the unrounded values (higher is better for every column here); every model that
reaches the best value is bold, so ties are visible.

When the model sheet groups rows into systems (its ``system`` column: runs or seeds of one
system), a row is a system and every cell the mean over its runs, as the paper's Table 2
averages 10 runs of CAML, BGLWAN and HLAN; models without a system stay rows of their own.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import polars as pl

from hieval.metrics.registry import FAMILY_TITLES, HEADLINE_FAMILIES
from hieval.reports.escaping import latex, markdown
from hieval.reports.summary import system_table

PRF_COLUMNS = (("precision", "P"), ("recall", "R"), ("f1", "F1"))


@dataclass(frozen=True)
class Table:
    """A table of numbers: a caption, grouped column headings, one row per model. Every text
    is plain (``%``, not ``\\%``): each writer escapes it for its format."""

    caption: str
    groups: list[tuple[str, int]]  # (heading, columns under it)
    columns: list[str]
    rows: list[tuple[str, list[float | None]]]
    #: How a value is printed: times ``scale``, with ``decimals`` decimals (the CoPHE paper's
    #: percentages with one decimal by default; CAML's paper prints fractions with three).
    scale: float = 100.0
    decimals: int = 1
    #: Each row's standard deviations over its runs, printed ``mean ± sd`` (None: no sd).
    sds: list[list[float | None]] | None = None

    def best(self) -> list[float | None]:
        """The best (highest) value of each column."""
        out = []
        for i in range(len(self.columns)):
            values = [v[i] for _, v in self.rows if v[i] is not None]
            out.append(max(values) if values else None)
        return out


def _micro(tidy: pl.DataFrame) -> dict[tuple[str, str, str, str], float]:
    micro = tidy.filter(pl.col("average") == "micro")
    return {
        (r["model"], r["family"], r["level"], r["metric"]): r["value"]
        for r in micro.iter_rows(named=True)
    }


def _rows_by_system(
    tidy: pl.DataFrame, models: list[str], systems: dict[str, str]
) -> tuple[pl.DataFrame, list[str], str]:
    """``tidy`` with each system's runs replaced by one row per metric holding their mean (the
    row's ``model`` is the system; a model without a system is a row of its own), the row names
    in sheet order, and the caption's note. The means are
    :func:`hieval.reports.summary.system_table`'s, the ones systems.parquet holds."""
    row_of = {model: systems.get(model) or model for model in models}
    means = system_table(tidy, row_of).select(
        pl.col("system").alias("model"), "family", "level", "average", "metric",
        pl.col("mean").alias("value"),
    )  # fmt: skip
    runs = Counter(row_of.values())
    named = {row: n for row, n in runs.items() if row in set(systems.values())}
    note = (
        f"; mean over {next(iter(named.values()))} runs of each system"
        if len(set(named.values())) == 1
        else "; mean over each system's runs ("
        + ", ".join(f"{row}: {n}" for row, n in named.items())
        + ")"
    )
    return means, list(runs), note


def paper_tables(
    tidy: pl.DataFrame,
    *,
    levels: tuple[str, ...],
    models: list[str],
    systems: dict[str, str] | None = None,
) -> list[Table]:
    """Table 2 of the CoPHE paper (flat / set-based / CoPHE P, R, F1 per model, ``overall``) and
    the set-based and CoPHE F1 per evaluated level; with ``systems`` (model → system, the
    sheet's column) one row per system holding the mean over its runs."""
    note = ""
    if systems:
        tidy, models, note = _rows_by_system(tidy, models, systems)
    values = _micro(tidy)
    headline = Table(
        caption="Micro-averaged precision, recall and F1 (%): flat on leaf codes, set-based "
        f"and CoPHE pooled over the evaluated levels{note}",
        groups=[(FAMILY_TITLES[f], 3) for f, _ in HEADLINE_FAMILIES],
        columns=[short for _ in HEADLINE_FAMILIES for _, short in PRF_COLUMNS],
        rows=[
            (
                model,
                [
                    values.get((model, f, lv, m))
                    for f, lv in HEADLINE_FAMILIES
                    for m, _ in PRF_COLUMNS
                ],
            )
            for model in models
        ],
    )
    per_level = Table(
        caption=f"Micro F1 (%) per level, set-based and CoPHE{note}",
        groups=[(level, 2) for level in levels],
        columns=["Set", "CoPHE"] * len(levels),
        rows=[
            (model, [values.get((model, f, lv, "f1")) for lv in levels for f in ("set", "cophe")])
            for model in models
        ],
    )
    return [headline, per_level]


def _cells(table: Table, bold: str, pm: str) -> list[list[str]]:
    """Every row's printed cells: the best value of a column in bold, ``mean{pm}sd`` when the
    table has standard deviations."""
    best = table.best()
    out = []
    for i, (_, values) in enumerate(table.rows):
        sds = table.sds[i] if table.sds is not None else [None] * len(values)
        out.append(
            [
                _cell(v, b, bold, sd=sd, table=table, pm=pm)
                for v, b, sd in zip(values, best, sds, strict=True)
            ]
        )
    return out


def _cell(
    value: float | None, best: float | None, bold: str, *, sd: float | None, table: Table, pm: str
) -> str:
    if value is None:
        return "--"
    text = f"{table.scale * value:.{table.decimals}f}"
    if sd is not None:
        text += f"{pm}{table.scale * sd:.{table.decimals}f}"
    return bold.format(text) if best is not None and value == best else text


def to_latex(tables: list[Table]) -> str:
    """booktabs tables (``\\usepackage{booktabs}``), one ``table`` environment each."""
    parts = ["% Generated by hieval; needs \\usepackage{booktabs}.", ""]
    for table in tables:
        spec = "l" + "r" * len(table.columns)
        heads = " & ".join(
            f"\\multicolumn{{{n}}}{{c}}{{{latex(name)}}}" for name, n in table.groups
        )
        rules, start = [], 2
        for _, n in table.groups:
            rules.append(f"\\cmidrule(lr){{{start}-{start + n - 1}}}")
            start += n
        parts += [
            "\\begin{table}[t]",
            "\\centering",
            f"\\begin{{tabular}}{{{spec}}}",
            "\\toprule",
            f" & {heads} \\\\",
            " ".join(rules),
            "Model & " + " & ".join(map(latex, table.columns)) + " \\\\",
            "\\midrule",
        ]
        for (model, _), cells in zip(
            table.rows, _cells(table, "\\textbf{{{}}}", "$\\pm$"), strict=True
        ):
            parts.append(f"{latex(model)} & " + " & ".join(cells) + " \\\\")
        parts += [
            "\\bottomrule",
            "\\end{tabular}",
            f"\\caption{{{latex(table.caption)}}}",
            "\\end{table}",
            "",
        ]
    return "\n".join(parts)


def to_markdown(tables: list[Table]) -> str:
    """The same tables in Markdown (best values in bold)."""
    parts = []
    for table in tables:
        headers = [
            markdown(f"{group} {column}".strip())
            for (group, n), columns in _grouped(table)
            for column in columns[:n]
        ]
        parts += [
            f"**{markdown(table.caption)}**",
            "",
            "| Model | " + " | ".join(headers) + " |",
            "|---|" + "---:|" * len(headers),
        ]
        for (model, _), cells in zip(table.rows, _cells(table, "**{}**", " ± "), strict=True):
            parts.append(f"| {markdown(model)} | " + " | ".join(cells) + " |")
        parts.append("")
    return "\n".join(parts)


def _grouped(table: Table):
    start = 0
    for group, n in table.groups:
        yield (group, n), table.columns[start : start + n]
        start += n
