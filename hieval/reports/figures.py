"""Figures for the HTML report, drawn with matplotlib and returned as inline SVG text.

The SVG is made reproducible (fixed hash salt, no date), so a report regenerates bit for bit;
text stays text (``svg.fonttype: none``), so the figures are small and searchable. Labels are
model names, node codes and titles, which may hold ``$``: matplotlib's mathtext is off
(``text.parse_math``), so ``$x$`` is drawn as written and an invalid ``$\\foo$`` cannot fail.
"""

from __future__ import annotations

import contextlib
import io
import re
import threading

import numpy as np
import polars as pl

from hieval.collector import background_paused, collector_paused
from hieval.metrics.registry import FAMILY_TITLES

_STYLE = {
    "svg.hashsalt": "hieval",
    "svg.fonttype": "none",
    "text.parse_math": False,  # labels are user text, never math
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
}


def _pyplot():
    """matplotlib's pyplot (Agg backend), imported on first use: it is a third of a second of
    start-up that only the jobs drawing a figure should pay."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def prefetch() -> threading.Thread:
    """Import pyplot in a background thread, for a process that will draw figures after long
    work (``hieval evaluate``): the third of a second of imports then overlaps the counting,
    whose numpy work leaves the interpreter mostly free. A later :func:`_pyplot` waits for the
    import to finish (Python's module locks), so nothing sees a half-imported module. Not a
    daemon: a run that fails early waits for the import to end rather than exiting during it.
    A failed import is left for that later call to report. In a command-line process the
    garbage collector is paused during the import (:func:`hieval.collector.background_paused`):
    the modules' objects all live on, and at the 100× benchmark the full collection they
    triggered held the interpreter 0.08–0.1 s in the middle of the reading."""

    def load() -> None:
        with contextlib.suppress(Exception), background_paused():
            _pyplot()

    thread = threading.Thread(target=load, name="import-matplotlib")
    thread.start()
    return thread


@collector_paused()
def warm() -> str:
    """A small figure in the house style drawn and dropped; returns "". Why: a process's first
    figure pays for what every later one reuses (the SVG writer, the font's metrics, matplotlib's
    text layout caches); a figure worker readied before the report
    (:func:`hieval.reports.drawing.ready`) pays it while the cores are least busy, not while
    the report waits for its figures."""
    plt = _pyplot()
    with plt.rc_context(_STYLE):
        fig, ax = plt.subplots(figsize=(2, 1.5))
        ax.plot([0, 1], [0, 1], marker="o", label="a")
        ax.imshow(np.eye(2), cmap="Reds")
        ax.text(0, 0, "0", fontsize=6.5)
        ax.set_title("warm")
        ax.legend()
        _svg(fig)
    return ""


def _svg(fig, *, crop: bool = True) -> str:
    """The figure as inline SVG, drawn once; ``crop`` trims it to what is drawn: needed where
    labels of unknown length may reach past the figure's edge.

    The crop is measured on that one drawing (its renderer, at its ``draw_event``) and applied
    as the SVG's ``viewBox``, padded by ``savefig.pad_inches`` as matplotlib's
    ``bbox_inches="tight"`` pads it: that option draws the whole figure twice (once to
    measure, once to write), which was most of a figure's time. The white background is
    stretched past the figure's edges first, so whatever the crop takes in stays on white."""
    measured: list = []
    if crop:
        fig.patch.set_bounds(-1, -1, 3, 3)  # in figure fractions: the figure and around it
        listener = fig.canvas.mpl_connect(
            "draw_event", lambda event: measured.append(fig.get_tightbbox(event.renderer))
        )
    buffer = io.StringIO()
    try:
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    finally:
        if crop:
            fig.canvas.mpl_disconnect(listener)
        _pyplot().close(fig)
    text = buffer.getvalue()
    text = text[text.index("<svg") :]  # inline: no XML declaration or doctype
    if crop:
        text = _cropped(text, measured[-1], height=fig.get_size_inches()[1])
    # matplotlib's RDF metadata block names its web site; an inline figure needs none of it.
    return re.sub(r"\s*<metadata>.*?</metadata>", "", text, flags=re.S)


#: SVG user units per inch (matplotlib writes its SVG at 72 dpi: one unit a point).
_UNITS = 72


def _cropped(text: str, bbox, *, height: float) -> str:
    """``text`` (an SVG from matplotlib) with its root's size and ``viewBox`` set to ``bbox``
    (inches from the figure's lower left, as ``Figure.get_tightbbox`` gives it) padded by
    ``savefig.pad_inches``; SVG's y axis points down, from the figure's top."""
    import matplotlib

    pad = matplotlib.rcParams["savefig.pad_inches"]
    box = bbox.padded(pad)
    x0, top = box.x0 * _UNITS, (height - box.y1) * _UNITS
    width, tall = box.width * _UNITS, box.height * _UNITS
    root = text[: text.index(">") + 1]
    size = (
        f'width="{_short(width)}pt" height="{_short(tall)}pt" '
        f'viewBox="{_short(x0)} {_short(top)} {_short(width)} {_short(tall)}"'
    )
    new_root, found = re.subn(r'width="[^"]*" height="[^"]*" viewBox="[^"]*"', size, root)
    if found != 1:
        raise ValueError(f"unexpected SVG root from matplotlib: {root!r}")
    return new_root + text[len(root) :]


def _short(value: float) -> str:
    """A coordinate as matplotlib's SVG writes them (six decimals, no trailing zeros; no -0)."""
    return f"{value + 0.0:f}".rstrip("0").rstrip(".")


#: A series of a figure: a name (a system or a model) and the models it stands for (a
#: system's runs: its line is their mean, its band their range).
Series = tuple[str, tuple[str, ...]]
#: Up to this many series each get a colour of their own (tab10) and a legend entry; more are
#: drawn thin and grey, with the best HIGHLIGHTED of them coloured and named.
MAX_COLOURED = 10
HIGHLIGHTED = 5
#: The smallest heatmap cell (inches): more columns make the figure wider (the page scrolls it
#: sideways) rather than the cells and their numbers smaller.
CELL_WIDTH, CELL_HEIGHT = 0.45, 0.28


def as_series(models: list[str], series: list[Series] | None) -> list[Series]:
    """The series drawn: ``series`` when given, else one per model."""
    return series if series else [(model, (model,)) for model in models]


def _colours(count: int) -> list:
    return [_pyplot().get_cmap("tab10")(i % 10) for i in range(count)]


def _highlight(series: list[Series], score: dict[str, float]) -> list[str]:
    """The series coloured and named: all of them up to :data:`MAX_COLOURED`, else the
    :data:`HIGHLIGHTED` best by ``score`` (name -> value; ties by name)."""
    names = [name for name, _ in series]
    if len(names) <= MAX_COLOURED:
        return names
    ranked = sorted(names, key=lambda n: (-score.get(n, float("-inf")), n))
    return ranked[:HIGHLIGHTED]


def _zoomed(values: list[float]) -> tuple[float, float]:
    """An axis range (in %) around ``values``: to the next 5 points outside them, within
    0–100, at least 10 points tall; the whole 0–100 without values."""
    finite = [v for v in values if np.isfinite(v)]
    if not finite:
        return 0.0, 100.0
    low = max(0.0, 5 * np.floor(min(finite) / 5 - 0.2))
    high = min(100.0, 5 * np.ceil(max(finite) / 5 + 0.2))
    if high - low < 10:
        high = min(100.0, low + 10)
        low = max(0.0, high - 10)
    return float(low), float(high)


@collector_paused()
def per_level(
    tidy: pl.DataFrame,
    *,
    levels: tuple[str, ...],
    models: list[str],
    series: list[Series] | None = None,
) -> str:
    """Micro P, R and F1 (%) per level, set-based beside CoPHE, one line per series (a system's
    line the mean of its runs, its band their range). Each row's axis is zoomed to its data
    (the range is in the row's label); many series are grey with the best named."""
    micro = tidy.filter(pl.col("average") == "micro")
    values = {
        (r["model"], r["family"], r["level"], r["metric"]): r["value"]
        for r in micro.iter_rows(named=True)
    }
    drawn = as_series(models, series)

    def points(runs: tuple[str, ...], family: str, metric: str) -> np.ndarray:
        return (
            np.array(
                [[values.get((m, family, lv, metric), np.nan) for lv in levels] for m in runs],
                dtype=float,
            )
            * 100
        )

    score = {}
    for name, runs in drawn:
        last = points(runs, "cophe", "f1")[:, -1]
        score[name] = float(np.nanmean(last)) if np.isfinite(last).any() else float("-inf")
    named = _highlight(drawn, score)
    colour = dict(zip(named, _colours(len(named)), strict=True))
    plt = _pyplot()
    with plt.rc_context(_STYLE):
        fig, axes = plt.subplots(3, 2, figsize=(8, 7), sharex=True, sharey="row")
        x = np.arange(len(levels))
        for row, (metric, label) in enumerate(
            (("precision", "precision"), ("recall", "recall"), ("f1", "F1"))
        ):
            everything = []
            for col, family in enumerate(("set", "cophe")):
                ax = axes[row][col]
                for name, runs in drawn:
                    grid = points(runs, family, metric)
                    everything += grid.ravel().tolist()
                    _series_line(
                        ax, x, grid, name=name, runs=runs, colour=colour,
                        markers=len(drawn) <= MAX_COLOURED,
                    )  # fmt: skip
                ax.grid(axis="y", alpha=0.3)
                if row == 0:
                    ax.set_title(FAMILY_TITLES[family])
                if row == 2:
                    ax.set_xticks(x, levels)
                    ax.set_xlabel("level (deepest first)")
            low, high = _zoomed(everything)
            pad = 0.03 * (high - low)  # a line at 100 % drawn whole, not cut by the frame
            axes[row][0].set_ylim(low - pad, high + pad)
            axes[row][0].set_ylabel(f"micro {label} (%)\naxis {low:.0f}–{high:.0f}")
        handles, labels = axes[0][0].get_legend_handles_labels()
        title = (
            None
            if len(drawn) <= MAX_COLOURED
            else f"best {len(named)} of {len(drawn)}\nby CoPHE F1 at {levels[-1]}\n(others grey)"
        )
        fig.subplots_adjust(left=0.1, right=0.97, top=0.95, bottom=0.08, wspace=0.06, hspace=0.12)
        fig.legend(
            handles, labels, loc="center left", bbox_to_anchor=(0.98, 0.5), frameon=False,
            title=title, fontsize=8, title_fontsize=8,
        )  # fmt: skip
        return _svg(fig)


def _series_line(ax, x, grid, *, name: str, runs: tuple, colour: dict, markers: bool) -> None:
    """One series of :func:`per_level` on ``ax``: its runs' mean, coloured when it is named
    (in ``colour``) and grey otherwise, and a named system's band (its runs' range)."""
    with np.errstate(all="ignore"), _quiet():
        mean = np.nanmean(grid, axis=0)
    shown = name in colour
    style = (
        {"color": colour[name], "linewidth": 1.6, "zorder": 3, "label": name}
        if shown
        else {"color": "#b0b0b0", "linewidth": 0.8, "zorder": 2}
    )
    if markers:
        style["marker"] = "o"
        style["markersize"] = 4
    ax.plot(x, mean, **style)
    if len(runs) > 1 and shown:
        with _quiet():
            low, high = np.nanmin(grid, axis=0), np.nanmax(grid, axis=0)
        ax.fill_between(x, low, high, color=colour[name], alpha=0.18, lw=0)


@contextlib.contextmanager
def _quiet():
    """numpy's warnings on an all-missing column (a level a model has no rows for) silenced:
    the mean is then missing, and drawn as a gap."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


@collector_paused()
def disagreement_heatmap(
    counts: pl.DataFrame,
    *,
    groups: list[str],
    models: list[str],
    titles: dict[str, str],
    series: list[Series] | None = None,
) -> str:
    """CoPHE over-prediction (FP) and under-prediction (FN) per group of codes (rows) and
    series (columns: a system's cell is the mean over its runs); ``counts`` has ``model,
    group, over, under``. Cells keep a minimum size (:data:`CELL_WIDTH`): many models make the
    figure wider, never the numbers smaller; each number is black on light cells and white on
    dark ones. Panels sit side by side for a few columns, one above the other for many."""
    lookup = {(r["model"], r["group"]): r for r in counts.iter_rows(named=True)}
    drawn = as_series(models, series)
    names = [name for name, _ in drawn]
    labels = [f"{g} {_shorten(titles.get(g, ''), 44)}".strip() for g in groups]
    stacked = len(drawn) > 8
    # Axes placed in inches, so a cell is CELL_WIDTH × CELL_HEIGHT whatever the count; the
    # crop on save takes in the labels around them (group titles left, model names below).
    panel_w, panel_h = CELL_WIDTH * len(drawn), CELL_HEIGHT * len(groups)
    bar_gap, bar_w, title_h, between = 0.12, 0.12, 0.35, 0.9
    if stacked:
        width, height = panel_w + bar_gap + bar_w, 2 * (panel_h + title_h) + 0.3
        frames = [(0, panel_h + title_h + 0.3), (0, 0)]
    else:
        width = 2 * (panel_w + bar_gap + bar_w) + between
        height = panel_h + title_h
        frames = [(0, 0), (panel_w + bar_gap + bar_w + between, 0)]
    plt = _pyplot()
    with plt.rc_context(_STYLE):
        fig = plt.figure(figsize=(width, height))
        for (left, bottom), (column, title) in zip(
            frames,
            (("over", "over-prediction (FP)"), ("under", "under-prediction (FN)")),
            strict=True,
        ):
            ax = fig.add_axes((left / width, bottom / height, panel_w / width, panel_h / height))
            bar = fig.add_axes(
                ((left + panel_w + bar_gap) / width, bottom / height, bar_w / width,
                 panel_h / height)
            )  # fmt: skip
            grid = np.array(
                [
                    [
                        np.mean([(lookup.get((m, g)) or {}).get(column, 0) for m in runs])
                        for _, runs in drawn
                    ]
                    for g in groups
                ],
                dtype=float,
            ).reshape(len(groups), len(drawn))
            top = grid.max() if grid.size and grid.max() > 0 else 1.0
            image = ax.imshow(grid, aspect="auto", cmap="Reds", vmin=0, vmax=top)
            ax.set_title(title)
            ax.set_xticks(range(len(drawn)), names if (stacked and bottom == 0) or not stacked
                          else [""] * len(drawn), rotation=90)  # fmt: skip
            ax.set_yticks(range(len(groups)), labels if stacked or left == 0 else [])
            for (i, j), value in np.ndenumerate(grid):
                ax.text(
                    j, i, f"{value:,.0f}", ha="center", va="center", fontsize=6.5,
                    color="white" if value > 0.55 * top else "black",
                )  # fmt: skip
            fig.colorbar(image, cax=bar)
        return _svg(fig)


def _shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters at a word's end, with an ellipsis, never mid-word."""
    if len(text) <= width:
        return text
    head = text[: width - 1]
    # a first word longer than the width is kept whole: a longer label, never half a word
    cut = head.rsplit(" ", 1)[0] if " " in head else text.split(" ", 1)[0]
    cut = cut.rstrip(" ,;:-")
    return text if cut == text else cut + "…"


@collector_paused()
def frequency_bins(
    rows: pl.DataFrame, *, bins: list[str], models: list[str], series: list[Series] | None = None
) -> str:
    """Flat micro F1 (%) per training-frequency bin of the codes: grouped bars for a few
    series (a system's bar the mean of its runs), lines for many (grey, the best named)."""
    lookup = {(r["model"], r["bin"]): r["f1"] for r in rows.iter_rows(named=True)}
    drawn = as_series(models, series)

    def heights(runs: tuple[str, ...]) -> list[float]:
        out = []
        for b in bins:
            found = [lookup[(m, b)] for m in runs if lookup.get((m, b)) is not None]
            out.append(100 * float(np.mean(found)) if found else np.nan)
        return out

    plt = _pyplot()
    with plt.rc_context(_STYLE):
        fig, ax = plt.subplots(figsize=(8, 3.2))
        x = np.arange(len(bins))
        if len(drawn) <= MAX_COLOURED:
            width = 0.8 / max(len(drawn), 1)
            for i, ((name, runs), colour) in enumerate(
                zip(drawn, _colours(len(drawn)), strict=True)
            ):
                ax.bar(x + i * width, heights(runs), width, label=name, color=colour)
            ax.set_xticks(x + width * (len(drawn) - 1) / 2, bins)
            title = None
        else:
            score = {name: np.nanmean(heights(runs)) for name, runs in drawn}
            named = _highlight(drawn, score)
            colour = dict(zip(named, _colours(len(named)), strict=True))
            for name, runs in drawn:
                if name in colour:
                    ax.plot(x, heights(runs), color=colour[name], lw=1.6, marker="o", ms=3,
                            label=name, zorder=3)  # fmt: skip
                else:
                    ax.plot(x, heights(runs), color="#b0b0b0", lw=0.8, zorder=2)
            ax.set_xticks(x, bins)
            title = f"best {len(named)} of {len(drawn)}\n(mean over bins; others grey)"
        ax.set_xlabel("occurrences of the code in the training gold")
        ax.set_ylabel("flat micro F1 (%)")
        ax.set_ylim(0, 100)
        ax.legend(fontsize=8, frameon=False, loc="center left", bbox_to_anchor=(1.01, 0.5),
                  title=title, title_fontsize=8)  # fmt: skip
        return _svg(fig)


#: Panels per row of the threshold figure (more tuned models wrap onto more rows).
CURVE_COLUMNS = 4


@collector_paused()
def threshold_curves(curves: dict[str, pl.DataFrame]) -> str:
    """Precision, recall and F1 against the threshold on each tuned model's dev sweep, the
    chosen threshold marked (``curves``: model -> the sweep, ``threshold, precision, recall,
    f1, chosen``); one small panel per model, :data:`CURVE_COLUMNS` to a row."""
    plt = _pyplot()
    columns = min(len(curves), CURVE_COLUMNS)
    rows = -(-len(curves) // columns)
    with plt.rc_context(_STYLE):
        fig, axes = plt.subplots(
            rows, columns, figsize=(3.6 * columns + 0.5, 3 * rows), squeeze=False, sharey=True
        )
        flat = axes.ravel()
        for ax, (model, curve) in zip(flat, curves.items(), strict=False):
            curve = curve.sort("threshold")
            for metric in ("precision", "recall", "f1"):
                ax.plot(curve["threshold"], curve[metric], label=metric)
            chosen = curve.filter(pl.col("chosen"))
            if chosen.height:
                ax.axvline(chosen["threshold"][0], color="black", linestyle="--", linewidth=1)
                ax.annotate(
                    f"t = {chosen['threshold'][0]:.3g}",
                    (chosen["threshold"][0], 0.05),
                    xytext=(4, 0),
                    textcoords="offset points",
                    fontsize=8,
                )
            ax.set_title(model)
            ax.set_xlabel("threshold (dev set)")
            ax.set_ylim(0, 1)
            ax.grid(alpha=0.3)
        for ax in flat[len(curves) :]:
            ax.set_visible(False)
        flat[0].legend(fontsize=8, frameon=False)
        fig.tight_layout()
        return _svg(fig)
