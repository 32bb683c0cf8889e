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
    A failed import is left for that later call to report."""

    def load() -> None:
        with contextlib.suppress(Exception):
            _pyplot()

    thread = threading.Thread(target=load, name="import-matplotlib")
    thread.start()
    return thread


def _svg(fig, *, crop: bool = True) -> str:
    """The figure as inline SVG; ``crop`` trims it to what is drawn (``bbox_inches="tight"``,
    which draws the figure once more to measure it): needed where labels of unknown length may
    reach past the figure's edge."""
    buffer = io.StringIO()
    fig.savefig(
        buffer, format="svg", bbox_inches="tight" if crop else None, metadata={"Date": None}
    )
    _pyplot().close(fig)
    text = buffer.getvalue()
    text = text[text.index("<svg") :]  # inline: no XML declaration or doctype
    # matplotlib's RDF metadata block names its web site; an inline figure needs none of it.
    return re.sub(r"\s*<metadata>.*?</metadata>", "", text, flags=re.S)


def per_level(tidy: pl.DataFrame, *, levels: tuple[str, ...], models: list[str]) -> str:
    """Micro P, R and F1 per level, set-based beside CoPHE, one line per model."""
    micro = tidy.filter(pl.col("average") == "micro")
    values = {
        (r["model"], r["family"], r["level"], r["metric"]): r["value"]
        for r in micro.iter_rows(named=True)
    }
    plt = _pyplot()
    with plt.rc_context(_STYLE):
        fig, axes = plt.subplots(3, 2, figsize=(8, 7), sharex=True, sharey="row")
        x = np.arange(len(levels))
        for col, family in enumerate(("set", "cophe")):
            for row, (metric, label) in enumerate(
                (("precision", "precision"), ("recall", "recall"), ("f1", "F1"))
            ):
                ax = axes[row][col]
                for model in models:
                    y = [values.get((model, family, level, metric), np.nan) for level in levels]
                    ax.plot(x, y, marker="o", label=model)
                ax.set_ylim(0, 1)
                ax.grid(axis="y", alpha=0.3)
                if row == 0:
                    ax.set_title(FAMILY_TITLES[family])
                if col == 0:
                    ax.set_ylabel(f"micro {label}")
                if row == 2:
                    ax.set_xticks(x, levels)
                    ax.set_xlabel("level (deepest first)")
        handles, labels = axes[0][0].get_legend_handles_labels()
        # Fixed margins, no cropping: every label here is short and known, so there is nothing
        # to measure, and each measuring draw (tight_layout's, then savefig's crop) was about a
        # quarter of the figure's time (0.157 -> 0.120 -> 0.093 s).
        fig.subplots_adjust(left=0.09, right=0.99, top=0.95, bottom=0.14, wspace=0.06, hspace=0.12)
        fig.legend(handles, labels, loc="lower center", ncols=min(len(models), 4), frameon=False)
        return _svg(fig, crop=False)


def disagreement_heatmap(
    counts: pl.DataFrame, *, groups: list[str], models: list[str], titles: dict[str, str]
) -> str:
    """CoPHE over-prediction (FP) and under-prediction (FN) per group of codes (rows) and model
    (columns); ``counts`` has ``model, group, over, under``."""
    lookup = {(r["model"], r["group"]): r for r in counts.iter_rows(named=True)}
    plt = _pyplot()
    with plt.rc_context(_STYLE):
        fig, axes = plt.subplots(
            1, 2, figsize=(4 + 1.2 * len(models), 1.5 + 0.28 * len(groups)), sharey=True
        )
        for ax, (column, title) in zip(
            axes,
            (("over", "over-prediction (FP)"), ("under", "under-prediction (FN)")),
            strict=True,
        ):
            grid = np.array(
                [[(lookup.get((m, g)) or {}).get(column, 0) for m in models] for g in groups],
                dtype=float,
            ).reshape(len(groups), len(models))
            image = ax.imshow(grid, aspect="auto", cmap="Reds")
            ax.set_title(title)
            ax.set_xticks(range(len(models)), models, rotation=30, ha="right")
            ax.set_yticks(range(len(groups)), [f"{g} {titles.get(g, '')}"[:48] for g in groups])
            for (i, j), value in np.ndenumerate(grid):
                ax.text(j, i, f"{int(value):,}", ha="center", va="center", fontsize=7)
            fig.colorbar(image, ax=ax, shrink=0.6)
        # No tight_layout: the crop on save takes in the group labels, however long, left of
        # the axes; only the gap between the panels (the first one's colour bar) is set here.
        # tight_layout's measuring draw was a third of the figure's time.
        fig.subplots_adjust(left=0.02, right=0.98, top=0.9, bottom=0.15, wspace=0.15)
        return _svg(fig)


def frequency_bins(rows: pl.DataFrame, *, bins: list[str], models: list[str]) -> str:
    """Flat micro F1 per training-frequency bin of the codes, one bar per model."""
    lookup = {(r["model"], r["bin"]): r["f1"] for r in rows.iter_rows(named=True)}
    plt = _pyplot()
    with plt.rc_context(_STYLE):
        fig, ax = plt.subplots(figsize=(8, 3.2))
        width = 0.8 / max(len(models), 1)
        x = np.arange(len(bins))
        for i, model in enumerate(models):
            ax.bar(
                x + i * width,
                [lookup.get((model, b), np.nan) for b in bins],
                width,
                label=model,
            )
        ax.set_xticks(x + width * (len(models) - 1) / 2, bins)
        ax.set_xlabel("occurrences of the code in the training gold")
        ax.set_ylabel("flat micro F1")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=8, frameon=False, ncols=2)
        fig.tight_layout()
        return _svg(fig)


def threshold_curves(curves: dict[str, pl.DataFrame]) -> str:
    """Precision, recall and F1 against the threshold on each tuned model's dev sweep, the
    chosen threshold marked (``curves``: model -> the sweep, ``threshold, precision, recall,
    f1, chosen``)."""
    plt = _pyplot()
    with plt.rc_context(_STYLE):
        fig, axes = plt.subplots(
            1, len(curves), figsize=(3.6 * len(curves) + 0.5, 3), squeeze=False, sharey=True
        )
        for ax, (model, curve) in zip(axes[0], curves.items(), strict=True):
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
        axes[0][0].legend(fontsize=8, frameon=False)
        fig.tight_layout()
        return _svg(fig)
