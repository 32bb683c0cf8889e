"""The HTML report: one self-contained file (inline CSS, inline SVG figures, a few lines of
inline script to sort tables), readable offline on a laptop screen.

Everything shown comes from files the run wrote: the tidy table, each model's per-node CoPHE
counts, the level table (titles, which chapter a block is in), the input records (sha256 of
every input, what normalisation did) and the run's settings — so each number is traceable to
its inputs. No timestamp is written, so a rerun on the same inputs gives the same bytes.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field

import polars as pl

from hieval.metrics.registry import (
    FAMILY_TITLES,
    LEADERBOARD,
    LEAF,
    OVERALL,
    SPLIT_FAMILIES,
    SUITE,
    paper_level,
)
from hieval.reports import (
    changes,
    conventions_html,
    drawing,
    error_sections,
    figures,
    leaderboard,
)
from hieval.reports.drawing import Draw
from hieval.reports.generative import rates_html

#: Levels whose nodes are code families (categories), where over- and under-prediction is
#: read most easily; other trees use the level above their deepest.
FAMILY_LEVELS = ("e0", "category")
#: Up to this many models, each model's table of families is shown open; more are folded.
MODELS_OPEN = 6
#: Up to this many rows, the table of paired differences is shown open; more are folded.
COMPARISONS_OPEN = 60

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#222}
main{max-width:1320px;margin:0 auto;padding:1rem 1.5rem 3rem}
h1{font-size:1.6rem;margin:.5rem 0}h2{font-size:1.25rem;margin-top:2rem;
border-bottom:1px solid #ddd;padding-bottom:.2rem}h3{font-size:1.05rem}
.scroll{overflow-x:auto}table{border-collapse:collapse;margin:.5rem 0;font-size:13px}
th,td{padding:.25rem .55rem;border-bottom:1px solid #eee;text-align:right;white-space:nowrap}
th:first-child,td:first-child{text-align:left}td.text{text-align:left;white-space:normal}
th{background:#f6f6f6;position:sticky;top:0}th.sortable{cursor:pointer}
th.sortable:after{content:" \\2195";color:#aaa}td.best{font-weight:700}
.note{color:#555;font-size:13px}code{font-size:12px}
figure{margin:.5rem 0}figure svg{max-width:100%;height:auto}
figure.wide{overflow-x:auto}figure.wide svg{max-width:none}
details{margin:.5rem 0}pre{background:#f6f6f6;padding:.6rem;overflow-x:auto;font-size:12px}
"""

_SORT_JS = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, index) {
    th.classList.add("sortable");
    th.addEventListener("click", function () {
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var up = th.dataset.order !== "asc";
      th.dataset.order = up ? "asc" : "desc";
      rows.sort(function (a, b) {
        var x = a.cells[index].dataset.value || a.cells[index].textContent;
        var y = b.cells[index].dataset.value || b.cells[index].textContent;
        var nx = parseFloat(x), ny = parseFloat(y);
        var c = (isNaN(nx) || isNaN(ny)) ? x.localeCompare(y) : nx - ny;
        return up ? c : -c;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""


@dataclass(frozen=True)
class ReportInputs:
    """What the report is made of (all read from files the run wrote)."""

    tidy: pl.DataFrame
    nodes: dict[
        str, pl.DataFrame
    ]  # per model: the CoPHE node report (hieval.reports.summary.node_report)
    levels_frame: pl.DataFrame  # the level table (titles, ancestors per level)
    levels: tuple[str, ...]  # evaluated levels, deepest first
    all_levels: tuple[str, ...]  # every level of the tree, ending with the root
    models: list[str]
    records: list[dict]  # input records (hieval.inputs.normalize.InputRecord as dicts)
    hierarchy: str
    version: str
    settings: dict = field(default_factory=dict)
    intervals: pl.DataFrame | None = None  # model, family, level, average, metric, low, high
    comparisons: pl.DataFrame | None = None  # hieval.metrics.uncertainty's comparisons table
    frequency_bins: pl.DataFrame | None = None  # model, bin, tp, fp, fn, f1, codes
    history: pl.DataFrame | None = None  # hieval.reports.history.SCHEMA
    current: pl.DataFrame | None = None  # this run's history rows (their key and series)
    curves: dict[str, pl.DataFrame] = field(default_factory=dict)  # tuned models' dev sweeps
    systems: dict[str, str] = field(default_factory=dict)  # model -> system (the sheet's column)
    notes: list[dict] = field(default_factory=list)  # score notes (hieval.pipeline.score_metrics)
    analysis: error_sections.ErrorTables | None = None  # error distance, confusions, codes
    conventions: tuple[pl.DataFrame, dict] | None = None  # conventions.parquet and its notes
    conventions_tests: pl.DataFrame | None = None  # conventions_tests.parquet (McNemar)


def _esc(value) -> str:
    return html.escape(str(value))


def _num(value: float | None, digits: int = 1, percent: bool = True) -> str:
    if value is None:
        return "–"
    return f"{100 * value:.{digits}f}" if percent else f"{value:.4g}"


def _table(headers: list[str], rows: list[list[str]], *, sortable: bool = False) -> str:
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(cells) + "</tr>" for cells in rows)
    cls = ' class="sortable"' if sortable else ""
    return (
        f'<div class="scroll"><table{cls}><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def _values(tidy: pl.DataFrame) -> dict[tuple, float]:
    return {
        (r["model"], r["family"], r["level"], r["average"], r["metric"]): r["value"]
        for r in tidy.iter_rows(named=True)
    }


def _leaderboard(inputs: ReportInputs) -> str:
    """The leaderboard (:mod:`hieval.reports.leaderboard`): systems as systems, grouped tabs."""
    return leaderboard.render(
        inputs.tidy,
        headline=LEADERBOARD,
        models=inputs.models,
        systems=inputs.systems,
        intervals=inputs.intervals,
        records=inputs.records,
        notes=inputs.notes,
    )


def _comparisons(inputs: ReportInputs) -> str:
    """Paired differences on the leaderboard's metrics, significant ones in bold; without a
    randomization test (``permutations: 0``: p is null) the p columns say so."""
    if inputs.comparisons is None or inputs.comparisons.is_empty():
        return ""
    tested = inputs.comparisons["p_adjusted"].is_not_null().any()
    rows = []
    for heading, family, level, average, metric in LEADERBOARD:
        part = inputs.comparisons.filter(
            (pl.col("family") == family)
            & (pl.col("level") == level)
            & (pl.col("average") == average)
            & (pl.col("metric") == metric)
        )
        percent = family != "icm"
        for r in part.iter_rows(named=True):
            significant = r["p_adjusted"] is not None and r["p_adjusted"] < 0.05
            cls = ' class="best"' if significant else ""
            rows.append(
                [
                    f"<td>{_esc(heading)}</td>",
                    f"<td>{_esc(r['model_a'])} − {_esc(r['model_b'])}</td>",
                    f"<td{cls}>{_num(r['difference'], percent=percent)}</td>",
                    f"<td>[{_num(r['low'], percent=percent)}, {_num(r['high'], percent=percent)}]"
                    "</td>",
                    f"<td>{_p(r['p_value'])}</td>",
                    f"<td{cls}>{_p(r['p_adjusted'])}</td>",
                ]
            )
    if not rows:
        return ""
    test = (
        " and the paired randomization test's p, Holm-adjusted over the pairs of models; bold: "
        "adjusted p &lt; 0.05."
        if tested
        else "; no test (permutations: 0), so no p."
    )
    if tested and _bootstrap_tested(inputs.comparisons):
        test += (
            " ROC-AUC above the scored-pair cap (<code>test</code>: bootstrap in "
            "comparisons.parquet): the paired bootstrap z-test instead of the randomization test."
        )
    table = _table(["Metric", "Pair", "Difference", "Interval", "p", "Holm p"], rows, sortable=True)
    if len(rows) > COMPARISONS_OPEN:  # many models: a click away, so the page stays a page
        table = f"<details><summary>All {len(rows):,} differences</summary>{table}</details>"
    return (
        "<h2 id='comparisons'>Which differences are real</h2><p class='note'>Paired bootstrap "
        f"interval of each difference{test}</p>" + table
    )


def _bootstrap_tested(comparisons: pl.DataFrame) -> bool:
    """Whether a leaderboard row got the paired bootstrap test (ROC-AUC above the cap)."""
    if "test" not in comparisons.columns:
        return False
    keys = {tuple(key) for _, *key in LEADERBOARD}
    rows = comparisons.filter(pl.col("test") == "bootstrap")
    return any(row in keys for row in rows.select("family", "level", "average", "metric").rows())


def _p(value: float | None) -> str:
    """A p-value, or "no test" where none was run (``permutations: 0``)."""
    return "no test" if value is None else f"{value:.3g}"


def _suite(inputs: ReportInputs) -> str:
    """The definitions of ICM and the comparison metrics (their numbers are in the
    leaderboard's "ICM and suite" and "Label and example-based" tabs)."""
    values = _values(inputs.tidy)
    present = [
        m
        for m in SUITE
        if any(
            (model, m.family, paper_level(m), m.average, m.metric) in values
            for model in inputs.models
        )
    ]
    if not present:
        return ""
    formulas = "".join(
        f"<li><b>{_esc(m.paper)}</b> ({'higher' if m.higher_is_better else 'lower'} is better): "
        f"{_esc(m.formula)}</li>"
        for m in present
    )
    return (
        "<h2 id='icm'>ICM and the comparison metrics</h2><p class='note'>Their numbers are in "
        "the leaderboard's <a href='#leaderboard'>ICM and suite</a> tab.</p>"
        f"<details><summary>Definitions</summary><ul>{formulas}</ul></details>"
    )


def _kinds(inputs: ReportInputs) -> str:
    values = _values(inputs.tidy)
    families = [f for f in SPLIT_FAMILIES if f.split("_")[0] in ("flat", "cophe")]
    if not any(k[1] in families for k in values):
        return ""
    headers = ["Model"]
    keys = []
    for family in families:
        base, kind = family.split("_")
        level = LEAF if base == "flat" else OVERALL
        for metric, short in (("precision", "P"), ("recall", "R"), ("f1", "F1")):
            headers.append(f"{FAMILY_TITLES[base]} {kind} {short}")
            keys.append((family, level, "micro", metric))
    series = _series(inputs)
    grouped = any(len(runs) > 1 for _, runs in series)
    rows = []
    for name, runs in series:
        cells = [f"<td>{_esc(name)}</td>"]
        for key in keys:
            found = [values[(m, *key)] for m in runs if (m, *key) in values]
            cells.append(f"<td>{_num(sum(found) / len(found) if found else None)}</td>")
        rows.append(cells)
    if grouped:
        headers[0] = "System"
    note = "<p class='note'>A system's cells: the mean over its runs.</p>" if grouped else ""
    return (
        "<h2 id='kinds'>Diagnoses and procedures</h2>" + note + _table(headers, rows, sortable=True)
    )


def _series(inputs: ReportInputs) -> list[figures.Series]:
    """The figures' series: one per system (its runs) and per model without a system."""
    return [(row.name, row.runs) for row in leaderboard.rows(inputs.models, inputs.systems)]


def _in_systems(inputs: ReportInputs) -> str:
    """ ", runs of 3 systems" when the sheet groups models into systems, else nothing."""
    grouped = [runs for _, runs in _series(inputs) if len(runs) > 1]
    return f", runs of {len(grouped)} system(s)" if grouped else ""


def _family_level(inputs: ReportInputs) -> str:
    for level in FAMILY_LEVELS:
        if level in inputs.levels:
            return level
    return inputs.levels[min(1, len(inputs.levels) - 1)]


def _where_wrong(inputs: ReportInputs, drawn: dict[str, str], draw: Draw) -> str:
    frame = inputs.levels_frame
    titles = dict(zip(frame["code"].to_list(), frame["title"].fill_null("").to_list(), strict=True))
    parts = ["<h2 id='errors'>Where each model goes wrong (CoPHE)</h2>"]
    parts += _disagreement(inputs, titles, drawn, draw)
    parts += _family_tables(inputs, titles)
    return "".join(parts)


def _disagreement(
    inputs: ReportInputs, titles: dict[str, str], drawn: dict[str, str], draw: Draw
) -> list[str]:
    """Over- and under-prediction at the highest evaluated level, summed per top-level group:
    the heatmap (added to ``drawn``) and its note."""
    frame = inputs.levels_frame
    top_level = inputs.all_levels[-2]  # the level just below the root (chapters)
    block_level = inputs.levels[-1]  # the highest evaluated level (max_level)
    parts: list[str] = []
    if not (top_level in frame.columns or top_level == block_level):
        return parts
    group_of = (
        frame.select(pl.col("code").alias("node"), pl.col(top_level).alias("group"))
        if top_level in frame.columns
        else frame.select(pl.col("code").alias("node"), pl.col("code").alias("group"))
    )
    counts = pl.concat(
        [
            nodes.filter(pl.col("level") == block_level)
            .join(group_of, on="node", how="left", maintain_order="none")  # then grouped
            .with_columns(pl.col("group").fill_null(pl.col("node")))
            .group_by("group")
            .agg(pl.col("over", "under").sum())
            .with_columns(pl.lit(model).alias("model"))
            for model, nodes in inputs.nodes.items()
        ]
        or [
            pl.DataFrame(
                schema={
                    "group": pl.String,
                    "over": pl.Int64,
                    "under": pl.Int64,
                    "model": pl.String,
                }
            )
        ]
    )
    groups = (
        counts.group_by("group")
        .agg((pl.col("over") + pl.col("under")).sum().alias("total"))
        .sort(["total", "group"], descending=[True, False])
        .head(25)["group"]
        .to_list()
    )
    if groups:
        parts.append(
            f"<p class='note'>CoPHE false positives (over) and false negatives (under) at "
            f"level <code>{_esc(block_level)}</code>, summed per <code>{_esc(top_level)}"
            "</code>; the 25 groups with most disagreement.</p>"
        )
        svg = draw(
            figures.disagreement_heatmap,
            counts,
            groups=groups,
            models=inputs.models,
            titles={group: titles[group] for group in groups if group in titles},  # to a worker
            series=_series(inputs),
        )
        drawn["disagreement"] = svg
        parts.append(f"<figure class='wide'>{svg}</figure>")
    return parts


def _family_tables(inputs: ReportInputs, titles: dict[str, str]) -> list[str]:
    """Per model, the families most over- and under-predicted at the family level."""
    frame = inputs.levels_frame
    parts: list[str] = []
    level = _family_level(inputs)
    parent = inputs.levels[inputs.levels.index(level) + 1] if level != inputs.levels[-1] else None
    context = {}
    if parent is not None and parent in frame.columns:
        # Categories often have no title of their own: name the block they are in instead.
        context = dict(
            zip(
                frame["code"].to_list(),
                [titles.get(p or "", "") for p in frame[parent].to_list()],
                strict=True,
            )
        )
    for model in inputs.models:
        nodes = inputs.nodes.get(model)
        if nodes is None:
            continue
        at_level = nodes.filter(pl.col("level") == level)
        rows = []
        for column, label in (("over", "over-predicted"), ("under", "under-predicted")):
            top = (
                at_level.filter(pl.col(column) > 0)
                .sort([column, "node"], descending=[True, False])
                .head(8)
            )
            for r in top.iter_rows(named=True):
                rows.append(
                    [
                        f"<td>{label}</td>",
                        f"<td>{_esc(r['node'])}</td>",
                        f"<td class='text'>{_describe(r['node'], r['title'], context)}</td>",
                        f"<td>{r[column]:,}</td>",
                        f"<td>{r['n_gold']:,}</td>",
                        f"<td>{r['n_pred']:,}</td>",
                    ]
                )
        if rows:
            heading = (
                f"{_esc(model)}: families (level <code>{_esc(level)}</code>) most "
                "over- and under-predicted"
            )
            table = _table(
                ["", "Node", "Title", "FP or FN", "Gold leaves", "Predicted leaves"], rows
            )
            # Many models: each table one click away, so the page stays a page.
            parts.append(
                f"<h3>{heading}</h3>{table}"
                if len(inputs.models) <= MODELS_OPEN
                else f"<details><summary>{heading}</summary>{table}</details>"
            )
    return parts


def _describe(node: str, title: str | None, context: dict[str, str]) -> str:
    if title:
        return _esc(title)
    block = context.get(node)
    return f"<span class='note'>in: {_esc(block)}</span>" if block else ""


def _frequency(inputs: ReportInputs, drawn: dict[str, str], draw: Draw) -> str:
    if inputs.frequency_bins is None or inputs.frequency_bins.is_empty():
        return ""
    bins = list(dict.fromkeys(inputs.frequency_bins["bin"].to_list()))
    svg = draw(
        figures.frequency_bins,
        inputs.frequency_bins,
        bins=bins,
        models=inputs.models,
        series=_series(inputs),
    )
    drawn["frequency"] = svg
    lookup = {(r["model"], r["bin"]): r["f1"] for r in inputs.frequency_bins.iter_rows(named=True)}
    series = _series(inputs)
    grouped = any(len(runs) > 1 for _, runs in series)
    rows = []
    for name, runs in series:
        cells = [f"<td>{_esc(name)}</td>"]
        for b in bins:
            found = [lookup[(m, b)] for m in runs if lookup.get((m, b)) is not None]
            cells.append(f"<td>{_num(sum(found) / len(found) if found else None)}</td>")
        rows.append(cells)
    codes = _codes_per_bin(inputs.frequency_bins)
    return (
        "<h2 id='frequency'>Rare and frequent codes</h2><p class='note'>Flat micro F1 over the "
        "codes of each training-frequency bin (gold or predicted codes of the test set; codes "
        "per bin: "
        + ", ".join(f"{_esc(b)}: {codes[b]}" for b in bins)
        + (", from the fewest to the most over the models" if _ranges(codes) else "")
        + ")"
        + ("; a system's: the mean over its runs" if grouped else "")
        + ".</p>"
        f"<figure class='wide'>{svg}</figure>"
        + _table(["System" if grouped else "Model", *map(_esc, bins)], rows)
    )


def _codes_per_bin(bins: pl.DataFrame) -> dict[str, str]:
    """Each bin's number of codes: one number when every model has the same, else the range.

    A bin holds the gold *or predicted* codes of its frequency, so models that predict
    different codes have different counts; one model's count would misstate the others'.
    """
    counts = bins.group_by("bin").agg(
        pl.col("codes").min().alias("low"), pl.col("codes").max().alias("high")
    )
    return {
        r["bin"]: f"{r['low']:,}" if r["low"] == r["high"] else f"{r['low']:,}\u2013{r['high']:,}"
        for r in counts.iter_rows(named=True)
    }


def _ranges(codes: dict[str, str]) -> bool:
    return any("\u2013" in text for text in codes.values())


def _thresholds(inputs: ReportInputs, drawn: dict[str, str], draw: Draw) -> str:
    """The dev sweeps of the models whose threshold was tuned, the chosen one marked."""
    if not inputs.curves:
        return ""
    drawn["thresholds"] = draw(figures.threshold_curves, inputs.curves)
    return (
        "<h2 id='thresholds'>Thresholds tuned on the validation set</h2><p class='note'>"
        "Precision, recall and F1 on the dev predictions against the threshold; the dashed line "
        "is the threshold chosen (maximum dev micro F1, ties to the highest).</p>"
        f"<figure>{drawn['thresholds']}</figure>"
    )


def _provenance(inputs: ReportInputs) -> str:
    rows = []
    for r in inputs.records:
        selection = []
        if r.get("below_threshold"):
            selection.append(f"{r['below_threshold']:,} below the threshold")
        if r.get("outside_top_k"):
            selection.append(f"{r['outside_top_k']:,} outside the top k")
        rows.append(
            [
                f"<td>{_esc(r['name'])}</td>",
                f"<td class='text'><code>{_esc(r['path'])}</code></td>",
                f"<td class='text'><code>{_esc(r['sha256'])}</code></td>",
                f"<td>{_esc(r.get('format', ''))}</td>",
                f"<td>{r.get('rows', 0):,}</td>",
                f"<td>{r.get('documents', 0):,}</td>",
                f"<td>{r.get('labels', 0):,}</td>",
                f"<td class='text'>{_esc('; '.join(selection) or '–')}</td>",
                f"<td class='text'>{_esc(r.get('selection') or '–')}</td>",
            ]
        )
    settings = json.dumps(inputs.settings, indent=2, sort_keys=True, default=str)
    return (
        "<h2 id='provenance'>Provenance</h2>"
        f"<p>hieval {_esc(inputs.version)}; hierarchy: {_esc(inputs.hierarchy)}; levels "
        f"evaluated: {_esc(', '.join(inputs.levels))}.</p>"
        + _table(
            [
                "Input",
                "Path",
                "sha256",
                "Format",
                "Rows",
                "Documents",
                "Labels",
                "Removed",
                "Decision",
            ],
            rows,
        )
        + f"<details><summary>Settings</summary><pre>{_esc(settings)}</pre></details>"
    )


def _warnings(inputs: ReportInputs) -> str:
    """The input records' warnings (partial coverage, a setting ignored, tuning without
    signal), first: they say the numbers below are not what they seem."""
    warnings = [w for r in inputs.records for w in r.get("warnings") or ()]
    if not warnings:
        return ""
    items = "".join(f"<li>{_esc(w)}</li>" for w in warnings)
    return f"<h2 id='warnings'>Warnings</h2><ul>{items}</ul>"


def render(inputs: ReportInputs) -> tuple[str, dict[str, str]]:
    """The whole report as one HTML document, and its figures by name (SVG text) for those
    who want them as files. The figures are drawn beside the page where there are figure
    workers (:mod:`hieval.reports.drawing`), the same text either way."""
    figs = drawing.Figures()
    draw = figs.draw
    drawn = {
        "per_level": draw(
            figures.per_level,
            inputs.tidy,
            levels=inputs.levels,
            models=inputs.models,
            series=_series(inputs),
        )
    }
    sections = [
        changes.changes_html(inputs.history, inputs.current),
        _warnings(inputs),
        _leaderboard(inputs),
        _comparisons(inputs),
        "<h2 id='levels'>Per level</h2><p class='note'>Micro precision, recall and F1 (%) at "
        "each evaluated level: set-based counts a family once, CoPHE keeps the counts. Each "
        "row's axis is zoomed to its data (its range is in the row's label)"
        + (
            "; a system's line is the mean of its runs, the band their range"
            if any(len(runs) > 1 for _, runs in _series(inputs))
            else ""
        )
        + ".</p>"
        f"<figure>{drawn['per_level']}</figure>",
        _where_wrong(inputs, drawn, draw),
        rates_html(inputs.records),
        error_sections.render(
            inputs.analysis,
            models=inputs.models,
            levels=[*inputs.all_levels, "none"],
            titles=dict(inputs.levels_frame.select("code", "title").drop_nulls().iter_rows()),
            drawn=drawn,
            draw=draw,
        ),
        _thresholds(inputs, drawn, draw),
        _frequency(inputs, drawn, draw),
        _suite(inputs),
        _kinds(inputs),
        conventions_html.render(
            inputs.conventions, models=inputs.models, tests=inputs.conventions_tests
        ),
        changes.history_html(inputs.history, inputs.current, inputs.models, drawn, draw),
        _provenance(inputs),
    ]
    page = (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>hieval report</title><style>{_CSS}{leaderboard.CSS}</style></head><body><main>"
        f"<h1>hieval report</h1><p class='note'>{len(inputs.models)} model(s){_in_systems(inputs)}"
        f"; hierarchy: {_esc(inputs.hierarchy)}.</p>"
        + "".join(s for s in sections if s)
        + "</main>"
        f"<script>{_SORT_JS}</script></body></html>\n"
    )
    return figs.resolve(page), {name: figs.resolve(svg) for name, svg in drawn.items()}
