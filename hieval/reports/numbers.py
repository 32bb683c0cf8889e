"""Numbers as reports print them: shares in percent with one decimal, never rounded into a
perfect score they are not."""

from __future__ import annotations


def percent(value: float) -> str:
    """A share in percent with one decimal that never rounds to 100.0 (or 0.0) unless it is
    exactly 1 (or 0): an AUC of 0.9998 reads "> 99.9", not a perfect "100.0"."""
    shown = f"{100 * value:.1f}"
    if shown == "100.0" and value < 1:
        return "> 99.9"
    if shown in ("0.0", "-0.0") and value > 0:
        return "< 0.1"
    return shown
