"""Numbers as reports print them: shares in percent with one decimal, never rounded into a
perfect score they are not.

One unit per metric in every text a report writes (summary.md, the HTML report, the paper
tables): P, R, F1, AUC, the ranking metrics and the suite's other shares (label-based,
example-based, propensity, hierarchical, LCA-F: all in [0, 1]) in percent, as papers print
them; ICM in bits; ICM-Norm, Brier, ECE and thresholds as they are. The tables hieval
writes for programs (the tidy ``metrics.parquet``, ``summary.csv``, ``intervals.parquet``,
...) keep fractions.
"""

from __future__ import annotations

#: The families whose values are shares in [0, 1], shown in percent.
PERCENT_FAMILIES = ("flat", "set", "cophe", "ranking", "label", "example", "propensity",
                    "hierarchical", "lca")  # fmt: skip


def in_percent(family: str) -> bool:
    """Whether a family's values are printed in percent (the per-kind ``flat_dx`` and
    ``cophe_proc`` families as their parents)."""
    return family in PERCENT_FAMILIES or family.startswith(("flat_", "cophe_"))


def percent(value: float) -> str:
    """A share in percent with one decimal that never rounds to 100.0 (or 0.0) unless it is
    exactly 1 (or 0): an AUC of 0.9998 reads "> 99.9", not a perfect "100.0"."""
    shown = f"{100 * value:.1f}"
    if shown == "100.0" and value < 1:
        return "> 99.9"
    if shown in ("0.0", "-0.0") and value > 0:
        return "< 0.1"
    return shown
