"""The HTML report's leaderboard: one row per system (the mean ± sd over its runs, the runs one
click away) or per model of its own, its columns in groups shown as tabs, so no group is wider
than a laptop screen however many metrics a run computed.

The tabs are radio buttons and CSS (no script): the page works offline and prints every group.
A row of a system is the mean of its runs (:func:`hieval.reports.summary.system_table`, the numbers
``systems.parquet`` holds), so the leaderboard, the paper tables and ``systems.parquet`` agree.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

import polars as pl

from hieval.metrics.registry import SCORE_METRICS, SUITE, lookup, paper_level
from hieval.reports.numbers import in_percent, percent
from hieval.reports.summary import system_table

_SUITE_FAMILIES = tuple(dict.fromkeys(m.family for m in SUITE))
#: The suite's families that judge each label or each document on its own (no tree).
_FLAT_SUITE = ("label", "example")

#: The groups of the leaderboard, in tab order: (title, families shown in it).
GROUPS = (
    ("Set-based and hierarchical", ("flat", "set", "cophe")),
    ("Ranking", ("ranking",)),
    # The suite of Amigó & Delgado is split in two so that each tab fits a 1,366 px screen:
    # the information-theoretic and hierarchical measures, then the label- and example-based.
    ("ICM and suite", ("icm", *(f for f in _SUITE_FAMILIES if f not in _FLAT_SUITE))),
    ("Label and example-based", _FLAT_SUITE),
    ("Calibration", ("calibration", "selection")),
)


@dataclass(frozen=True)
class Column:
    """A column of the leaderboard: its heading, the tidy row it shows, and how."""

    heading: str
    family: str
    level: str
    average: str
    metric: str

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.family, self.level, self.average, self.metric)

    @property
    def higher_is_better(self) -> bool:
        try:
            return lookup(self.family, self.average, self.metric).higher_is_better
        except KeyError:
            return True

    @property
    def percent(self) -> bool:
        """Shown in percent: P, R, F1, AUC, the ranking metrics and the suite's other shares
        (label-, example-based, propensity, hierarchical: all in [0, 1]), as papers print
        them; ICM (bits), ICM-Norm, Brier, ECE and thresholds as they are."""
        return in_percent(self.family)

    def text(self, value: float | None) -> str:
        if value is None:
            return "–"
        if self.percent:
            return percent(value)
        if self.family == "icm":
            return f"{value:.2f}"
        return f"{value:.3g}" if abs(value) >= 0.01 or value == 0 else f"{value:.2e}"


@dataclass(frozen=True)
class Row:
    """A row: a system and its runs, or a model of its own (one run, its own name)."""

    name: str
    runs: tuple[str, ...]

    @property
    def is_system(self) -> bool:
        return len(self.runs) > 1 or self.runs != (self.name,)


def rows(models: list[str], systems: dict[str, str]) -> list[Row]:
    """The leaderboard's rows in sheet order: each system once (where its first run is),
    each model without a system on its own."""
    members: dict[str, list[str]] = {}
    for model in models:
        members.setdefault(systems.get(model) or model, []).append(model)
    return [Row(name, tuple(runs)) for name, runs in members.items()]


def columns(
    tidy: pl.DataFrame, headline: tuple[tuple[str, str, str, str, str], ...]
) -> list[tuple[str, list[Column]]]:
    """The groups with the columns the tidy table has rows for: the ``headline`` columns
    (heading, family, level, average, metric) first, then the registry's suite and score
    metrics not among them, each in the group of its family."""
    present = set(tidy.select("family", "level", "average", "metric").unique().rows())
    candidates = [Column(*c) for c in headline]
    candidates += [Column(m.paper or m.metric, m.family, paper_level(m), m.average, m.metric)
                   for m in SUITE]  # fmt: skip
    score_rows = tidy.filter(pl.col("family").is_in(["calibration", "selection"]))
    for family, level, average, metric in (
        score_rows.select("family", "level", "average", "metric").unique(maintain_order=True).rows()
    ):
        registered = next((m for m in SCORE_METRICS if m.key == (family, average, metric)), None)
        if registered is not None and level == paper_level(registered):
            heading = registered.paper or "Tuned threshold"
            candidates.append(Column(heading, family, level, average, metric))
    seen: set[tuple] = set()
    groups = []
    for title, families in GROUPS:
        chosen = []
        for column in candidates:
            if column.family in families and column.key in present and column.key not in seen:
                seen.add(column.key)
                chosen.append(column)
        if chosen:
            groups.append((title, chosen))
    return groups


def _esc(value) -> str:
    return html.escape(str(value))


def _best(values: list[float | None], higher: bool) -> float | None:
    present = [v for v in values if v is not None]
    if not present:
        return None
    return max(present) if higher else min(present)


@dataclass(frozen=True)
class Numbers:
    """What the cells are made of: each model's values and intervals, each system's mean and
    standard deviation over its runs."""

    values: dict[tuple, float]  # (model, family, level, average, metric) -> value
    intervals: dict[tuple, tuple[float | None, float | None]]
    means: dict[tuple, tuple[float | None, float | None, int]]  # (system, ...) -> mean, sd, runs
    coverage: dict[str, float] = field(default_factory=dict)  # row name -> share of pairs scored

    @classmethod
    def of(
        cls,
        tidy: pl.DataFrame,
        intervals: pl.DataFrame | None,
        table_rows: list[Row],
        notes: list[dict] = (),
    ) -> Numbers:
        values = {
            (r["model"], r["family"], r["level"], r["average"], r["metric"]): r["value"]
            for r in tidy.iter_rows(named=True)
        }
        bounds = {}
        if intervals is not None:
            for r in intervals.iter_rows(named=True):
                key = (r["model"], r["family"], r["level"], r["average"], r["metric"])
                bounds[key] = (r["low"], r["high"])
        means = {}
        systems = {run: row.name for row in table_rows if row.is_system for run in row.runs}
        if systems:
            for r in system_table(tidy, systems).iter_rows(named=True):
                key = (r["system"], r["family"], r["level"], r["average"], r["metric"])
                means[key] = (r["mean"], r["sd"], r["runs"])
        return cls(values, bounds, means, coverage(notes, table_rows))

    def value(self, row: Row, column: Column) -> float | None:
        if row.is_system:
            return self.means.get((row.name, *column.key), (None, None, 0))[0]
        return self.values.get((row.name, *column.key))


def _cell(numbers: Numbers, row: Row, column: Column, best: float | None) -> str:
    value = numbers.value(row, column)
    text = column.text(value)
    if row.is_system and value is not None:
        _, sd, _ = numbers.means[(row.name, *column.key)]
        spread = "± –" if sd is None else f"± {column.text(sd)}"
        text += f'<span class="sub">{spread}</span>'
    elif (row.name, *column.key) in numbers.intervals:
        low, high = numbers.intervals[(row.name, *column.key)]
        text += f'<span class="sub">[{column.text(low)}, {column.text(high)}]</span>'
    share = numbers.coverage.get(row.name)
    if value is not None and share is not None and share < 1 and column.key in PARTIAL:
        # Unscored pairs rank tied below every scored pair (AUC) or score zero (Brier, ECE):
        # the number is then as much the truncation's as the model's, so the share of pairs
        # scored goes with it. (AUC is no strict bound: the tie among the unscored pairs
        # counts a half for each of their positive-negative pairs, which could go either way.)
        text += f'<span class="sub">scores for {_share(share)} of pairs</span>'
    cls = ' class="best"' if value is not None and value == best else ""
    data = "" if value is None else f' data-value="{value!r}"'
    return f"<td{cls}{data}>{text}</td>"


#: The score metrics whose value depends on the pairs a score file leaves out (they count as
#: scored zero): shown with the share of the label space's pairs that were scored.
PARTIAL = {
    ("ranking", "leaf", "micro", "auc"),
    ("ranking", "leaf", "macro", "auc"),
    ("calibration", "leaf", "micro", "brier"),
    ("calibration", "leaf", "micro", "ece"),
}


def coverage(notes: list[dict], table_rows: list[Row]) -> dict[str, float]:
    """The share of (document, code) pairs of the label space each row's scores cover, from
    the score notes (``scored_pairs``, ``unscored_pairs``); a system's is the mean of its runs'.
    Rows without scored pairs have none (they have no score metrics either)."""
    share = {}
    for note in notes:
        total = note.get("label_space_pairs")
        if total and note.get("unscored_pairs") is not None:
            share[note["model"]] = 1 - note["unscored_pairs"] / total
    out = {}
    for row in table_rows:
        runs = [share[m] for m in row.runs if m in share]
        if runs:
            out[row.name] = sum(runs) / len(runs)
    return out


def _share(value: float) -> str:
    """A share as a percentage that never reads as 0 or 100 when it is neither."""
    percent = 100 * value
    if 0 < percent < 0.1:
        return "< 0.1 %"
    if 99.9 < percent < 100:
        return "> 99.9 %"
    return f"{percent:.1f} %"


def _table(heads: list[str], body: list[str], *, caption: str = "") -> str:
    head = "".join(f"<th>{h}</th>" for h in heads)
    return (
        f'<div class="scroll lb">{caption}<table class="sortable"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _group_table(
    numbers: Numbers, table_rows: list[Row], group: list[Column], extra: dict[str, list[str]]
) -> str:
    """One group's table: a row per system or model, the best of each column in bold (the
    lowest for a loss); ``extra`` are leading cells per row name (documents, labels)."""
    best = [_best([numbers.value(r, c) for r in table_rows], c.higher_is_better) for c in group]
    body = []
    for row in table_rows:
        name = _esc(row.name)
        if row.is_system:
            name += f'<span class="sub">{len(row.runs)} runs</span>'
        cells = [f"<td>{name}</td>", *extra.get(row.name, [])]
        cells += [_cell(numbers, row, c, b) for c, b in zip(group, best, strict=True)]
        body.append("<tr>" + "".join(cells) + "</tr>")
    heads = ["System" if any(r.is_system for r in table_rows) else "Model"]
    heads += extra.get("", [])
    return _table(heads + [_esc(c.heading) for c in group], body)


def render(
    tidy: pl.DataFrame,
    *,
    headline: tuple[tuple[str, str, str, str, str], ...],
    models: list[str],
    systems: dict[str, str],
    intervals: pl.DataFrame | None,
    records: list[dict],
    notes: list[dict] = (),
) -> str:
    """The leaderboard section: a tab per group of columns, each a table of systems and
    models, and under it (one click away) the table of every run when systems have runs."""
    table_rows = rows(models, systems)
    run_rows = [Row(model, (model,)) for model in models]
    grouped = any(r.is_system for r in table_rows)
    numbers = Numbers.of(tidy, intervals, [*table_rows, *run_rows], notes)
    counts = _counts(records, table_rows if not grouped else [])
    groups = columns(tidy, headline)
    tabs, panels = [], []
    for number, (title, group) in enumerate(groups):
        checked = " checked" if number == 0 else ""
        tabs.append(
            f'<input type="radio" name="lb-tab" id="lb-tab-{number}"{checked}>'
            f'<label for="lb-tab-{number}">{_esc(title)}</label>'
        )
        extra = counts if number == 0 else {}
        panel = _group_table(numbers, table_rows, group, extra)
        if grouped:
            run_counts = _counts(records, run_rows) if number == 0 else {}
            panel += (
                f"<details><summary>Each run ({len(models)})</summary>"
                + _group_table(numbers, run_rows, group, run_counts)
                + "</details>"
            )
        panels.append(f'<div class="panel" id="lb-panel-{number}">{panel}</div>')
    note = (
        "<p class='note'>Micro averages unless named macro; P, R, F1, AUC, the ranking metrics "
        "and the suite's label- and example-based measures in %, ICM in bits, ICM-Norm, Brier "
        "and ECE as defined (EB-HAMM, Brier and ECE are losses: lower is better). Bold: best "
        "of the column. Click a heading to sort."
        + (
            " A system's cell is the mean over its runs, ± their standard deviation;"
            " each run's numbers are under the table."
            if grouped
            else ""
        )
        + (" Brackets: bootstrap intervals." if numbers.intervals else "")
        + (
            " A score file that leaves (document, code) pairs unscored (a top-k file) has them "
            "ranked tied below every scored pair for AUC and scored zero for Brier and ECE: "
            "those numbers then say as much about the truncation as about the model, so the "
            "share of pairs scored is beside them."
            if any(v < 1 for v in numbers.coverage.values())
            else ""
        )
        + "</p>"
    )
    return (
        "<h2 id='leaderboard'>Leaderboard</h2>"
        + note
        + f'<div class="tabs">{"".join(tabs)}{"".join(panels)}</div>'
    )


def _counts(records: list[dict], table_rows: list[Row]) -> dict[str, list[str]]:
    """The labels cell per model (how many labels its file holds after normalisation, beside
    its P and R), its heading under ``""``; empty without such rows (a system's runs differ).
    Documents and the rest of each input are in the provenance table."""
    if not table_rows:
        return {}
    by_name = {r["name"]: r for r in records}
    out: dict[str, list[str]] = {"": ["Labels"]}
    for row in table_rows:
        value = by_name.get(row.name, {}).get("labels")
        number = isinstance(value, int)
        out[row.name] = [f'<td data-value="{value}">{value:,}</td>' if number else "<td>–</td>"]
    return out


#: The CSS of the tabs and the cells' second lines (intervals, ± sd).
CSS = """
.tabs>input{position:absolute;opacity:0}.tabs>label{display:inline-block;padding:.35rem .8rem;
border:1px solid #ddd;border-bottom:none;border-radius:4px 4px 0 0;cursor:pointer;
background:#f6f6f6;margin-right:.2rem;font-size:13px}
.tabs>input:checked+label{background:#fff;font-weight:600;border-color:#bbb}
.tabs>input:focus-visible+label{outline:2px solid #4a7bd0}
.tabs .panel{display:none;border-top:1px solid #bbb}
""" + ",".join(f"#lb-tab-{i}:checked~#lb-panel-{i}" for i in range(len(GROUPS)))
CSS += """{display:block}
@media print{.tabs .panel{display:block}.tabs>label{display:none}}
.lb th,.lb td{padding:.25rem .4rem}.lb th{white-space:normal;vertical-align:bottom;max-width:5.5rem}
.lb td:first-child{white-space:normal;overflow-wrap:anywhere;min-width:8rem;max-width:16rem}
td .sub,th .sub{display:block;font-size:11px;color:#666;font-weight:400}
"""
