"""What changed since the last evaluation, and each model's history, from the zoo's history
(:mod:`hieval.reports.history`): the sections that open the report and summary.md, and the
History section near the report's end.

A model's *last evaluation* is the latest evaluation recorded in its series (same model name,
gold, code system, hierarchy and settings) with another key than this run's (other inputs or
another hieval version). A change is *beyond its interval* when the bootstrap interval of the
difference (at the evaluations' confidence) does not hold 0. Two ways to get that interval:

- **paired** (exact): both evaluations kept their headline replicates, drew them with the same
  seed and the same number of replicates, on the same gold (the series says so). A replicate's
  document weights depend only on (seed, document id, replicate), so replicate r of both
  evaluations resampled the same documents, and the replicate-wise difference *is* the paired
  bootstrap of the difference: its percentile interval is the interval of the change.
- **approximate** otherwise (an evaluation by an earlier hieval, another seed or count): the
  change ± ``sqrt(h_before² + h_now²)`` from the half-widths ``h = (high - low) / 2`` of the
  two evaluations' own intervals, the interval of a difference of two independent estimates.
  Both resample the same documents, so their errors are positively correlated and the paired
  interval is narrower: this test is conservative (a move called beyond it is one; a smaller
  move may be real). The report says which rows used it.

Without intervals in both evaluations (bootstrap off), or at different confidences, no verdict
is given.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np
import polars as pl

from hieval.atomic import write_text
from hieval.collector import collector_paused
from hieval.reports import drawing
from hieval.reports.drawing import Draw
from hieval.reports.escaping import markdown as md

# the figure conventions of the report's other figures (one style, reproducible SVG)
from hieval.reports.figures import _STYLE, _pyplot, _svg
from hieval.reports.history import HISTORY_METRICS

#: Headline metrics shown as percentages; ICM has no fixed range and is shown as it is.
RAW_METRICS = ("ICM",)
#: The columns of :func:`last_changes`: ``low`` and ``high`` bound the interval of the
#: change, ``half_width`` is half its width, ``method`` says how it was had (:data:`PAIRED`,
#: :data:`APPROXIMATE` or None without an interval).
CHANGE_COLUMNS = (
    "model",
    "metric",
    "before",
    "now",
    "change",
    "half_width",
    "beyond",
    "before_timestamp",
    "low",
    "high",
    "method",
)
PAIRED = "paired"
APPROXIMATE = "approximate"


def _series_rows(history: pl.DataFrame, current: pl.DataFrame, model: str) -> pl.DataFrame:
    """The history's rows of ``model``'s current series, in the order they were recorded."""
    series = current.filter(pl.col("model") == model)["series"][0]
    return history.with_row_index("order").filter(
        (pl.col("model") == model) & (pl.col("series") == series)
    )


def _evaluations(rows: pl.DataFrame) -> list[str]:
    """The keys of a series' evaluations, in the order they were first recorded."""
    return list(dict.fromkeys(rows.sort("order")["key"].to_list()))


def _half_width(row: dict) -> float | None:
    if row["low"] is None or row["high"] is None:
        return None
    return (row["high"] - row["low"]) / 2


def paired_interval(old: dict, now: dict) -> tuple[float, float] | None:
    """The percentile interval of the replicate-wise differences now - before, at the
    evaluations' confidence, when both kept replicates of one seed and count (the paired
    bootstrap of the difference: module docstring); None otherwise. Replicates in which a
    value is undefined (NaN) are left out, as in the intervals themselves."""
    before, after = old.get("replicates"), now.get("replicates")
    if before is None or after is None or len(before) != len(after) or not len(after):
        return None
    if old.get("bootstrap_seed") is None or old["bootstrap_seed"] != now.get("bootstrap_seed"):
        return None
    differences = np.asarray(after, dtype=float) - np.asarray(before, dtype=float)
    differences = differences[~np.isnan(differences)]
    if not differences.size:
        return None
    tail = (1 - now["confidence"]) / 2
    low, high = np.quantile(differences, [tail, 1 - tail])
    return float(low), float(high)


def _compared(old: dict, now: dict) -> tuple:
    """One headline metric before and now: the values, the change, the half-width of the
    interval of the change, whether the change is beyond it, and that interval and how it
    was had (module docstring)."""
    change = now["value"] - old["value"]
    widths = (_half_width(old), _half_width(now))
    low = high = method = None
    if None not in widths and old["confidence"] == now["confidence"]:
        paired = paired_interval(old, now)
        if paired is not None:
            (low, high), method = paired, PAIRED
        else:
            half = math.hypot(*widths)
            low, high, method = change - half, change + half, APPROXIMATE
    beyond = None if method is None else not (low <= 0 <= high)
    half = None if method is None else (high - low) / 2
    return (old["value"], now["value"], change, half, beyond, old["timestamp"], low, high, method)


def _previous(history: pl.DataFrame, current: pl.DataFrame, model: str) -> dict[str, dict]:
    """The rows (by metric) of ``model``'s last evaluation: the latest recorded in its series
    with another key than this run's (empty when there is none). A rerun on the same inputs
    is thus compared with the evaluation before it, and a model put back to earlier
    predictions with the one it replaced."""
    rows = _series_rows(history, current, model)
    key = current.filter(pl.col("model") == model)["key"][0]
    others = [k for k in _evaluations(rows) if k != key]
    if not others:
        return {}
    last = rows.filter(pl.col("key") == others[-1])
    return {r["metric"]: r for r in last.iter_rows(named=True)}


def last_changes(history: pl.DataFrame, current: pl.DataFrame) -> pl.DataFrame:
    """Per model of this run (``current``: its history rows) with an earlier evaluation in its
    series, each headline metric before and now, the change, the half-width of the interval
    of the change and whether the change is beyond it (None when it cannot be said)."""
    out = []
    for model in dict.fromkeys(current["model"].to_list()):
        before = _previous(history, current, model)
        for now in current.filter(pl.col("model") == model).iter_rows(named=True):
            if (old := before.get(now["metric"])) is not None:
                out.append((model, now["metric"], *_compared(old, now)))
    schema = dict.fromkeys(CHANGE_COLUMNS, pl.Float64) | {
        "model": pl.String,
        "metric": pl.String,
        "beyond": pl.Boolean,
        "before_timestamp": pl.String,
        "method": pl.String,
    }
    return pl.DataFrame(out, schema=schema, orient="row")


def _value(metric: str, value: float | None, *, signed: bool = False) -> str:
    """A headline value as the report shows it: F-measures in %, ICM as it is."""
    if value is None:
        return "–"
    sign = "+" if signed else ""
    if metric in RAW_METRICS:
        return f"{value:{sign}.3g}"
    return f"{100 * value:{sign}.1f}"


def _range(metric: str, low: float | None, high: float | None) -> str:
    """The interval of a change as its two ends: a paired percentile interval need not be
    symmetric about the change, so a "± half-width" could contradict the verdict."""
    if low is None or high is None:
        return "–"
    return f"[{_value(metric, low, signed=True)}, {_value(metric, high, signed=True)}]"


def _verdict(beyond: bool | None) -> str:
    return {True: "yes", False: "no", None: "no interval"}[beyond]


_NOTE = (
    "Each model's headline metrics against its last evaluation on the same gold, code system, "
    "hierarchy and settings (F-measures in %, changes in points; ICM as it is). Beyond the "
    "interval: the bootstrap interval of the difference does not hold 0; ± interval is half "
    "its width. Paired: from the two evaluations' replicates, drawn with the same seed on the "
    "same documents (the paired bootstrap of the difference, exact); approximate: the change "
    "± sqrt(h_before² + h_now²) from the two evaluations' own intervals (an evaluation without "
    "kept replicates, or another seed or replicate count; conservative, since both resample "
    "the same documents); no interval: an evaluation without bootstrap."
)


def _how(method: str | None) -> str:
    return method or "–"


def _moved(changes: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """The rows with a change, and the models compared whose headline metrics did not move."""
    moved = changes.filter(pl.col("change") != 0)
    still = [m for m in dict.fromkeys(changes["model"].to_list()) if m not in moved["model"]]
    return moved, still


def changes_markdown(changes: pl.DataFrame) -> str:
    """The "Changes since the last evaluation" section of summary.md ("" with no earlier
    evaluation of any model)."""
    if changes.is_empty():
        return ""
    moved, still = _moved(changes)
    lines = ["## Changes since the last evaluation", "", _NOTE, ""]
    if moved.height:
        lines += [
            "| Model | Metric | Last evaluated | Before | Now | Change | Its interval | Beyond "
            "| Interval |",
            "|---|---|---|---:|---:|---:|---:|---|---|",
        ]
        for r in moved.iter_rows(named=True):
            metric = r["metric"]
            lines.append(
                f"| {md(r['model'])} | {metric} | {r['before_timestamp']} "
                f"| {_value(metric, r['before'])} | {_value(metric, r['now'])} "
                f"| {_value(metric, r['change'], signed=True)} "
                f"| {_range(metric, r['low'], r['high'])} | {_verdict(r['beyond'])} "
                f"| {_how(r['method'])} |"
            )
        lines.append("")
    if still:
        lines += [f"Unchanged: {', '.join(md(m) for m in still)}.", ""]
    return "\n".join(lines) + "\n"


def open_summary(path: str | Path, history: pl.DataFrame, current: pl.DataFrame) -> None:
    """Open summary.md (written already) with the changes since the last evaluation, after
    its title; the file is left as it is when no model has an earlier evaluation."""
    section = changes_markdown(last_changes(history, current))
    if not section:
        return
    text = Path(path).read_text("utf-8")
    title, _, rest = text.partition("\n\n")
    write_text(path, f"{title}\n\n{section}{rest}")


def changes_html(history: pl.DataFrame | None, current: pl.DataFrame | None) -> str:
    """The report's opening "Changes since the last evaluation" section ("" without one)."""
    if history is None or current is None or current.is_empty():
        return ""
    changes = last_changes(history, current)
    if changes.is_empty():
        return ""
    moved, still = _moved(changes)
    esc = html.escape
    rows = "".join(
        "<tr>"
        f"<td>{esc(r['model'])}</td><td>{esc(r['metric'])}</td>"
        f"<td>{esc(r['before_timestamp'])}</td>"
        f"<td>{_value(r['metric'], r['before'])}</td><td>{_value(r['metric'], r['now'])}</td>"
        f"<td><b>{_value(r['metric'], r['change'], signed=True)}</b></td>"
        f"<td>{_range(r['metric'], r['low'], r['high'])}</td><td>{_verdict(r['beyond'])}</td>"
        f"<td>{_how(r['method'])}</td></tr>"
        for r in moved.iter_rows(named=True)
    )
    table = (
        '<div class="scroll"><table><thead><tr><th>Model</th><th>Metric</th>'
        "<th>Last evaluated</th><th>Before</th><th>Now</th><th>Change</th><th>Its interval</th>"
        f"<th>Beyond</th><th>Interval</th></tr></thead><tbody>{rows}</tbody></table></div>"
        if moved.height
        else ""
    )
    unchanged = f"<p>Unchanged: {esc(', '.join(still))}.</p>" if still else ""
    return (
        f"<h2 id='changes'>Changes since the last evaluation</h2><p class='note'>{esc(_NOTE)}"
        f"</p>{table}{unchanged}"
    )


def series_history(history: pl.DataFrame, current: pl.DataFrame, model: str) -> pl.DataFrame:
    """``model``'s evaluations in its current series, wide: one row per evaluation (oldest
    first) with its timestamp, key and each headline metric's value, low and high."""
    rows = _series_rows(history, current, model)
    first = rows.group_by("key").agg(pl.col("order").min(), pl.col("timestamp").first())
    wide = first.sort("order").select("key", "timestamp")
    for metric in HISTORY_METRICS:
        mine = rows.filter(pl.col("metric") == metric).unique("key", keep="first")
        wide = wide.join(
            mine.select(
                "key",
                pl.col("value").alias(metric),
                pl.col("low").alias(f"{metric} low"),
                pl.col("high").alias(f"{metric} high"),
            ),
            on="key",
            how="left",
            maintain_order="left",  # oldest evaluation first
        )
    return wide


@collector_paused()
def history_figure(model: str, wide: pl.DataFrame) -> str:
    """One model's headline F-measures (%) over its evaluations, oldest left, with their
    bootstrap intervals where recorded; ICM in a panel of its own (no fixed range)."""
    plt = _pyplot()
    x = np.arange(wide.height)
    with plt.rc_context(_STYLE):
        fig, (left, right) = plt.subplots(
            1, 2, figsize=(8, 2.6), gridspec_kw={"width_ratios": [3, 1]}
        )
        for metric in HISTORY_METRICS:
            ax, scale = (right, 1.0) if metric in RAW_METRICS else (left, 100.0)
            values = np.array(wide[metric].to_list(), dtype=float) * scale
            low = np.array(wide[f"{metric} low"].to_list(), dtype=float) * scale
            high = np.array(wide[f"{metric} high"].to_list(), dtype=float) * scale
            line = ax.plot(x, values, marker="o", markersize=4, label=metric)[0]
            if np.isfinite(low).any():
                ax.fill_between(x, low, high, color=line.get_color(), alpha=0.15, lw=0)
        labels = [t[:16].replace("T", " ") for t in wide["timestamp"].to_list()]
        for ax in (left, right):
            ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=7)
            ax.grid(axis="y", alpha=0.3)
        left.set_ylabel("%")
        left.set_title(f"{model}: F-measures", fontsize=9)
        right.set_title("ICM", fontsize=9)
        left.legend(fontsize=7, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
        fig.subplots_adjust(wspace=0.55)
        return _svg(fig)


def history_html(
    history: pl.DataFrame | None,
    current: pl.DataFrame | None,
    models: list[str],
    drawn: dict[str, str],
    draw: Draw = drawing.here,
) -> str:
    """The History section: per model with more than one evaluation in its series, a figure
    over time and the table of its evaluations (figures added to ``drawn`` as
    ``history_<model>``, drawn by ``draw``: see :mod:`hieval.reports.drawing`)."""
    if history is None or current is None or current.is_empty():
        return ""
    esc = html.escape
    parts = []
    for model in models:
        if model not in current["model"]:
            continue
        wide = series_history(history, current, model)
        if wide.height < 2:
            continue
        name = f"history_{model}"
        drawn[name] = draw(history_figure, model, wide)
        head = "".join(f"<th>{h}</th>" for h in ("When", "Key", *HISTORY_METRICS))
        body = "".join(
            "<tr>"
            f"<td>{esc(r['timestamp'])}</td><td><code>{esc(r['key'][:10])}</code></td>"
            + "".join(f"<td>{_value(m, r[m])}</td>" for m in HISTORY_METRICS)
            + "</tr>"
            for r in wide.iter_rows(named=True)
        )
        parts.append(
            f"<h3>{esc(model)}</h3><figure>{drawn[name]}</figure>"
            f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
            "</table></div>"
        )
    if not parts:
        return ""
    return (
        "<h2 id='history'>History</h2><p class='note'>Each model's evaluations on the same "
        "gold, code system, hierarchy and settings as this one (its series), oldest first: a "
        "new key is new inputs or another hieval version. F-measures in %, bands the bootstrap "
        "intervals where recorded.</p>" + "".join(parts)
    )
