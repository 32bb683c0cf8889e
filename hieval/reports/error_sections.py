"""The HTML report's error-analysis sections (issue 34): "How the errors fall" (error distance
per model, FN and FP side by side, and the top near-miss confusions with code titles), the
per-code table (searchable, sortable) and "Who it fails" (metrics per group, and the gaps).

Drawn from the tables the error-analysis stage wrote (:mod:`hieval.analysis_stage`), read back
by :func:`read_tables`, so the report shows exactly the numbers of the files.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from hieval import paths
from hieval.collector import collector_paused
from hieval.reports import drawing, figures
from hieval.reports.drawing import Draw

#: Confusions and codes shown per model (the files hold them all).
TOP_CONFUSIONS = 10
TOP_CODES = 300
#: The search box of the per-code tables: rows whose text lacks the query are hidden.
SEARCH_JS = """
document.querySelectorAll("input.search").forEach(function (box) {
  box.addEventListener("input", function () {
    var q = box.value.toLowerCase();
    var table = document.getElementById(box.dataset.table);
    Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
      row.style.display = row.textContent.toLowerCase().indexOf(q) >= 0 ? "" : "none";
    });
  });
});
"""


@dataclass(frozen=True)
class ErrorTables:
    """The error-analysis tables of a run: ``errors`` over all models, ``confusions`` and
    ``codes`` per model, ``groups`` and ``gaps`` (None without ``doc_groups``)."""

    errors: pl.DataFrame
    confusions: dict[str, pl.DataFrame]
    codes: dict[str, pl.DataFrame]
    groups: pl.DataFrame | None = None
    gaps: pl.DataFrame | None = None


def read_tables(folder: str | Path, models: list[str]) -> ErrorTables | None:
    """The tables in a report folder (``errors.parquet``, ``confusions/``, ``codes/``,
    ``groups.parquet``, ``group_gaps.parquet``); None when the run wrote none."""
    folder = Path(folder)
    if not (folder / "errors.parquet").exists():
        return None

    def optional(name: str) -> pl.DataFrame | None:
        path = folder / name
        return paths.read_parquet(path) if path.exists() else None

    return ErrorTables(
        errors=paths.read_parquet(folder / "errors.parquet"),
        confusions={m: paths.read_parquet(folder / "confusions" / f"{m}.parquet") for m in models},
        codes={m: paths.read_parquet(folder / "codes" / f"{m}.parquet") for m in models},
        groups=optional("groups.parquet"),
        gaps=optional("group_gaps.parquet"),
    )


def _esc(value) -> str:
    return html.escape(str(value))


def _pct(value: float | None) -> str:
    return "–" if value is None or value != value else f"{100 * value:.1f}"


def _num(value: float | None) -> str:
    """ICM (bits, unbounded): two decimals."""
    return "–" if value is None or value != value else f"{value:.2f}"


def _p(value: float | None) -> str:
    return "–" if value is None or value != value else f"{value:.3g}"


def _table(headers: list[str], rows: list[list[str]], *, table_id: str | None = None) -> str:
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(cells) + "</tr>" for cells in rows)
    ident = f' id="{table_id}"' if table_id else ""
    return (
        f'<div class="scroll"><table class="sortable"{ident}><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


@collector_paused()
def distance_figure(errors: pl.DataFrame, *, models: list[str], levels: list[str]) -> str:
    """Stacked bars: each model's FN and FP (side by side) split by the level at which they
    meet the nearest error of the other kind (statuses pooled)."""
    shares = errors.group_by("model", "kind", "lca_level").agg(pl.col("share").sum())
    lookup = {(m, k, lv): s for m, k, lv, s in shares.iter_rows()}
    plt = figures._pyplot()
    with plt.rc_context(figures._STYLE):
        fig, ax = plt.subplots(figsize=(8, 0.5 + 0.55 * max(len(models), 1) * 2))
        labels = [f"{m} · {k.upper()}" for m in models for k in ("fn", "fp")]
        y = np.arange(len(labels))[::-1]
        left = np.zeros(len(labels))
        colours = plt.get_cmap("viridis")(np.linspace(0.05, 0.95, len(levels)))
        for level, colour in zip(levels, colours, strict=True):
            widths = np.array(
                [lookup.get((m, k, level), 0.0) for m in models for k in ("fn", "fp")]
            )
            ax.barh(y, widths, left=left, color=colour, label=level, height=0.7)
            left += widths
        ax.set_yticks(y, labels)
        ax.set_xlim(0, 1)
        ax.set_xlabel("share of the model's errors of that kind")
        ax.legend(
            title="meets the nearest other error at",
            fontsize=8,
            frameon=False,
            ncols=min(len(levels), 7),
            loc="upper center",
            bbox_to_anchor=(0.5, -0.25),
        )
        fig.tight_layout()
        return figures._svg(fig)


def how_errors_fall(
    tables: ErrorTables, *, models: list[str], levels: list[str], titles: dict[str, str],
    drawn: dict[str, str], draw: Draw = drawing.here,
) -> str:  # fmt: skip
    """The error distance figure and table, and each model's top confusions (the figure drawn
    by ``draw``: see :mod:`hieval.reports.drawing`)."""
    if not tables.errors.height:
        return "<h2 id='error-distance'>How the errors fall</h2><p class='note'>No errors.</p>"
    present = [lv for lv in levels if lv in set(tables.errors["lca_level"])]
    svg = draw(distance_figure, tables.errors, models=models, levels=present)
    drawn["error_distance"] = svg
    parts = [
        "<h2 id='error-distance'>How the errors fall</h2><p class='note'>Each missed gold code "
        "(FN) and each wrong predicted code (FP) by the level at which it meets the nearest "
        "error of the other kind in its document: the deeper, the nearer the miss; "
        "<code>none</code>: the document has no error of the other kind. Shares in %; "
        "<code>placed</code> codes are not in the release (placed by syntax).</p>"
        f"<figure>{svg}</figure>"
    ]
    has_bounds = "low" in tables.errors.columns
    rows = []
    for r in tables.errors.iter_rows(named=True):
        cells = [
            f"<td>{_esc(r['model'])}</td>",
            f"<td>{_esc(r['kind'].upper())}</td>",
            f"<td>{_esc(r['lca_level'])}</td>",
            f"<td>{_esc(r['code_status'])}</td>",
            f"<td>{r['count']:,}</td>",
            f"<td>{_pct(r['share'])}</td>",
        ]
        if has_bounds:
            cells.append(f"<td>[{_pct(r['low'])}, {_pct(r['high'])}]</td>")
        rows.append(cells)
    headers = ["Model", "Kind", "Meets at", "Code", "Errors", "Share"]
    parts.append(
        "<details><summary>The table (errors.parquet)</summary>"
        + _table(headers + (["Interval"] if has_bounds else []), rows)
        + "</details>"
    )
    for model in models:
        top = tables.confusions[model].head(TOP_CONFUSIONS)
        if not top.height:
            continue
        rows = [
            [
                f"<td>{_esc(g)}</td>",
                f"<td class='text'>{_esc(titles.get(g) or '')}</td>",
                f"<td>{_esc(p)}</td>",
                f"<td class='text'>{_esc(titles.get(p) or '')}</td>",
                f"<td>{_esc(level)}</td>",
                f"<td>{n:,}</td>",
            ]
            for g, p, level, n in top.iter_rows()
        ]
        parts.append(
            f"<h3>{_esc(model)}: the most frequent near misses</h3>"
            + _table(["Gold code", "Title", "Predicted", "Title", "Meet at", "Documents"], rows)
        )
    return "".join(parts)


def per_code(tables: ErrorTables, *, models: list[str]) -> str:
    """Each model's per-code table (the codes with most support), searchable and sortable."""
    parts = [
        "<h2 id='codes'>Per code</h2><p class='note'>Documents per code and ancestor node "
        f"(P/R/F1 in %); the {TOP_CODES} nodes with most support per model, all of them in "
        "codes/NAME.parquet. Click a heading to sort; type to filter.</p>"
    ]
    for number, model in enumerate(models):
        table = tables.codes[model].sort(["support", "code"], descending=[True, False])
        table = table.head(TOP_CODES)
        frequency = "train_frequency" in table.columns
        rows = []
        for r in table.iter_rows(named=True):
            cells = [
                f"<td>{_esc(r['code'])}</td>",
                f"<td class='text'>{_esc(r['title'] or '')}</td>",
                f"<td>{_esc(r['level'])}</td>",
                *(f"<td>{r[c]:,}</td>" for c in ("support", "tp", "fp", "fn")),
                *(f"<td>{_pct(r[c])}</td>" for c in ("precision", "recall", "f1")),
            ]
            if frequency:
                cells.append(f"<td>{r['train_frequency']:,}</td>")
            rows.append(cells)
        headers = ["Code", "Title", "Level", "Support", "TP", "FP", "FN", "P", "R", "F1"]
        ident = f"codes-{number}"
        parts.append(
            f"<details><summary>{_esc(model)}</summary>"
            f"<input class='search' type='search' placeholder='filter' data-table='{ident}'>"
            + _table(headers + (["Train docs"] if frequency else []), rows, table_id=ident)
            + "</details>"
        )
    return "".join(parts)


def who_it_fails(tables: ErrorTables, *, models: list[str]) -> str:
    """Micro F1 and ICM per group (with intervals), and the largest gap per attribute."""
    if tables.groups is None or not tables.groups.height:
        return ""
    f1 = tables.groups.filter(pl.col("metric") == "f1")
    icm = {
        (r["attribute"], r["group"], r["model"]): r
        for r in tables.groups.filter(pl.col("metric") == "icm").iter_rows(named=True)
    }
    families = list(dict.fromkeys(zip(f1["family"], f1["level"], strict=True)))
    lookup = {
        (r["attribute"], r["group"], r["model"], r["family"], r["level"]): r
        for r in f1.iter_rows(named=True)
    }
    keys = list(dict.fromkeys(zip(f1["attribute"], f1["group"], f1["model"], strict=True)))
    rows = []
    for attribute, group, model in keys:
        cells = [
            f"<td>{_esc(attribute)}</td>",
            f"<td>{_esc(group)}</td>",
            f"<td>{_esc(model)}</td>",
        ]
        documents = 0
        for family, level in families:
            r = lookup[(attribute, group, model, family, level)]
            documents = r["documents"]
            bounds = f" [{_pct(r['low'])}, {_pct(r['high'])}]" if r["low"] is not None else ""
            cells.append(f"<td data-value='{r['value']}'>{_pct(r['value'])}{bounds}</td>")
        if icm:
            r = icm[(attribute, group, model)]
            bounds = f" [{_num(r['low'])}, {_num(r['high'])}]" if r["low"] is not None else ""
            cells.append(f"<td data-value='{r['value']}'>{_num(r['value'])}{bounds}</td>")
        cells.append(f"<td>{documents:,}</td>")
        rows.append(cells)
    headers = ["Attribute", "Group", "Model"]
    headers += [f"{_esc(f)} F1 ({_esc(lv)})" for f, lv in families]
    headers += ["ICM"] * bool(icm) + ["Documents"]
    parts = [
        "<h2 id='groups'>Who it fails</h2><p class='note'>Micro F1 (%) of each group's "
        "documents, and ICM with the group's own information content, with bootstrap "
        "intervals when the run had them; "
        "<code>(missing)</code>: documents the doc_groups table does not list.</p>",
        _table(headers, rows),
    ]
    if tables.gaps is not None and tables.gaps.height:
        gap_rows = [
            [
                f"<td>{_esc(r['attribute'])}</td>",
                f"<td>{_esc(r['model'])}</td>",
                f"<td>{_esc(r['family'])}</td>",
                f"<td>{_esc(r['high_group'])} − {_esc(r['low_group'])}</td>",
                f"<td>{fmt(r['gap'])}</td>",
                f"<td>[{fmt(r['low'])}, {fmt(r['high'])}]</td>"
                if r["low"] is not None
                else "<td>–</td>",
                f"<td>{_p(r['p_adjusted'])}</td>",
            ]
            for r in tables.gaps.filter(pl.col("metric").is_in(["f1", "icm"])).iter_rows(named=True)
            for fmt in [_num if r["metric"] == "icm" else _pct]
        ]
        parts.append(
            "<h3>The largest gap per attribute</h3>"
            + _table(["Attribute", "Model", "Family", "Groups", "Gap", "Interval", "p (Holm)"],
                     gap_rows)
        )  # fmt: skip
    return "".join(parts)


def render(
    tables: ErrorTables | None, *, models: list[str], levels: list[str],
    titles: dict[str, str], drawn: dict[str, str], draw: Draw = drawing.here,
) -> str:  # fmt: skip
    """The three sections ("" without the tables)."""
    if tables is None:
        return ""
    return (
        how_errors_fall(tables, models=models, levels=levels, titles=titles, drawn=drawn, draw=draw)
        + per_code(tables, models=models)
        + who_it_fails(tables, models=models)
        + f"<script>{SEARCH_JS}</script>"
    )
