"""The report's figures drawn cheaply (issue 36): the garbage collector paused while a figure
is built and drawn, and back as it was afterwards (also when drawing fails)."""

from __future__ import annotations

import gc

import polars as pl
import pytest

from hieval.reports import changes, error_sections, figures


@pytest.fixture
def collector_on():
    """The collector enabled for the test, and left as the test found it."""
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_the_collector_is_paused_inside_and_back_after(collector_on):
    with figures.collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_the_collector_is_back_after_a_failure(collector_on):
    with pytest.raises(RuntimeError, match="drawing failed"), figures.collector_paused():
        raise RuntimeError("drawing failed")
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled(collector_on):
    gc.disable()
    with figures.collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def _tidy() -> pl.DataFrame:
    rows = [
        {"model": m, "family": f, "level": lv, "average": "micro", "metric": k, "value": v}
        for m, v in (("a", 0.5), ("b", 0.7))
        for f in ("set", "cophe")
        for lv in ("e0", "e1")
        for k in ("precision", "recall", "f1")
    ]
    return pl.DataFrame(rows)


def _draw_each(monkeypatch) -> dict[str, bool]:
    """Every figure of the report drawn, with whether the collector was enabled when each
    reached :func:`figures._svg` (the end of its building, the start of its drawing)."""
    seen: dict[str, bool] = {}
    original = figures._svg

    def spy(fig, **options):
        seen[fig.get_label() or str(len(seen))] = gc.isenabled()
        return original(fig, **options)

    monkeypatch.setattr(figures, "_svg", spy)
    monkeypatch.setattr(error_sections.figures, "_svg", spy)
    monkeypatch.setattr(changes, "_svg", spy)
    figures.per_level(_tidy(), levels=("e0", "e1"), models=["a", "b"])
    counts = pl.DataFrame(
        {"model": ["a", "b"], "group": ["g", "g"], "over": [1, 2], "under": [3, 0]}
    )
    figures.disagreement_heatmap(counts, groups=["g"], models=["a", "b"], titles={})
    bins = pl.DataFrame({"model": ["a", "b"], "bin": ["1-10", "1-10"], "f1": [0.2, 0.4]})
    figures.frequency_bins(bins, bins=["1-10"], models=["a", "b"])
    curve = pl.DataFrame(
        {"threshold": [0.1, 0.5], "precision": [0.2, 0.6], "recall": [0.9, 0.4],
         "f1": [0.33, 0.48], "chosen": [False, True]}
    )  # fmt: skip
    figures.threshold_curves({"a": curve})
    errors = pl.DataFrame(
        {"model": ["a", "a"], "kind": ["fn", "fp"], "lca_level": ["e1", "none"],
         "share": [1.0, 1.0]}
    )  # fmt: skip
    error_sections.distance_figure(errors, models=["a"], levels=["e1", "none"])
    wide = pl.DataFrame(
        {"timestamp": ["2026-01-01T00:00", "2026-01-02T00:00"]}
        | {m: [0.5, 0.6] for m in changes.HISTORY_METRICS}
        | {f"{m} low": [None, None] for m in changes.HISTORY_METRICS}
        | {f"{m} high": [None, None] for m in changes.HISTORY_METRICS},
        schema_overrides={
            c: pl.Float64 for m in changes.HISTORY_METRICS for c in (f"{m} low", f"{m} high")
        },
    )
    changes.history_figure("a", wide)
    return seen


def test_every_figure_is_drawn_with_the_collector_paused(collector_on, monkeypatch):
    seen = _draw_each(monkeypatch)
    assert len(seen) == 6
    assert not any(seen.values()), seen
    assert gc.isenabled()
