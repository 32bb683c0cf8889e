"""The report's figures drawn cheaply (issue 36): the garbage collector paused while a figure
is built and drawn, and back as it was afterwards (also when drawing fails); the crop to what
is drawn measured on the one drawing, showing what matplotlib's own tight crop shows."""

from __future__ import annotations

import gc
import io
import re
import xml.etree.ElementTree as ET

import polars as pl
import pytest

from hieval import collector
from hieval.reports import changes, error_sections, figures

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def collector_on():
    """The collector enabled for the test, and left as the test found it."""
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_the_collector_is_paused_inside_and_back_after(collector_on):
    with collector.collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_the_collector_is_back_after_a_failure(collector_on):
    with pytest.raises(RuntimeError, match="drawing failed"), collector.collector_paused():
        raise RuntimeError("drawing failed")
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled(collector_on):
    gc.disable()
    with collector.collector_paused():
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


#: A group title long enough to reach well past the heatmap's left edge (its axes start there).
LONG = "a title long enough to reach well past the left edge of the figure"


def _draw_all(monkeypatch, wrap) -> None:
    """Every figure of the report drawn (with a long model name and a long group title, which
    reach past the figure's edges), :func:`figures._svg` replaced by ``wrap(original)``."""
    replacement = wrap(figures._svg)
    monkeypatch.setattr(figures, "_svg", replacement)
    monkeypatch.setattr(changes, "_svg", replacement)
    models = ["a", "a model with a long name"]
    figures.per_level(_tidy(), levels=("e0", "e1"), models=models)
    counts = pl.DataFrame({"model": models, "group": ["g", "h"], "over": [1, 20], "under": [3, 0]})
    figures.disagreement_heatmap(counts, groups=["g", "h"], models=models, titles={"g": LONG})
    bins = pl.DataFrame({"model": models, "bin": ["1-10", "1-10"], "f1": [0.2, 0.4]})
    figures.frequency_bins(bins, bins=["1-10"], models=models)
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


def _draw_each(monkeypatch) -> list[bool]:
    """Whether the collector was enabled when each figure reached :func:`figures._svg` (the
    end of its building, the start of its drawing)."""
    seen: list[bool] = []

    def wrap(original):
        def spy(fig, **options):
            seen.append(gc.isenabled())
            return original(fig, **options)

        return spy

    _draw_all(monkeypatch, wrap)
    return seen


def test_every_figure_is_drawn_with_the_collector_paused(collector_on, monkeypatch):
    seen = _draw_each(monkeypatch)
    assert len(seen) == 6
    assert not any(seen), seen
    assert gc.isenabled()


def _texts(svg: str) -> list[tuple[str, float, float]]:
    """Each text of an SVG from matplotlib (``svg.fonttype: none``): its words and where it is
    anchored, from its ``x``/``y`` or its ``translate(...)``."""
    out = []
    for element in ET.fromstring(svg).iter(f"{SVG}text"):
        if "x" in element.attrib:
            x, y = float(element.get("x")), float(element.get("y"))
        else:
            x, y = map(
                float, re.search(r"translate\(([^ ]+) ([^)]+)\)", element.get("transform")).groups()
            )
        out.append(("".join(element.itertext()), x, y))
    return out


def _frame(svg: str) -> tuple[float, float, float, float]:
    """The root's ``viewBox``: left, top, width, height (SVG units)."""
    return tuple(map(float, ET.fromstring(svg).get("viewBox").split()))


def _both_crops(monkeypatch) -> list[tuple[str, str]]:
    """Each figure drawn with matplotlib's own crop (``bbox_inches="tight"``, drawn twice)
    and with :func:`figures._svg`'s (one drawing, the crop in the viewBox)."""
    pairs = []

    def wrap(original):
        def both(fig, **options):
            buffer = io.StringIO()
            fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
            tight = buffer.getvalue()
            pairs.append((tight[tight.index("<svg") :], original(fig, **options)))
            return pairs[-1][1]

        return both

    _draw_all(monkeypatch, wrap)
    return pairs


def test_the_crop_shows_what_matplotlibs_tight_crop_shows(monkeypatch):
    """Independent reference: matplotlib's ``bbox_inches="tight"`` of the same figure. The
    same size, and every text (labels, titles, cell numbers, legend) with the same words at
    the same place once each SVG's own origin is taken away."""
    pairs = _both_crops(monkeypatch)
    assert len(pairs) == 6
    for tight, ours in pairs:
        left, top, width, height = _frame(ours)
        assert _frame(tight)[2:] == pytest.approx((width, height), abs=1e-3)
        expected = _texts(tight)
        found = [(words, x - left, y - top) for words, x, y in _texts(ours)]
        assert [w for w, *_ in found] == [w for w, *_ in expected]
        assert len(expected) > 5
        for (words, x, y), (_, x0, y0) in zip(found, expected, strict=True):
            assert (x, y) == pytest.approx((x0, y0), abs=0.01), words


def test_a_label_past_the_edge_is_inside_the_crop(monkeypatch):
    """The heatmap's axes start at the figure's left edge, so its group labels are drawn at
    negative x: the crop begins left of 0 and takes in the longest label's start."""
    heatmap = _both_crops(monkeypatch)[1][1]
    left = _frame(heatmap)[0]
    assert left < -100
    assert "g a title long enough to reach" in heatmap  # shortened at 44 characters
    assert 'style="fill: #ffffff"' in heatmap  # the background stretched under the crop


@pytest.mark.parametrize("owned", [True, False])
def test_matplotlibs_import_in_the_background_pauses_the_collector(
    collector_on, monkeypatch, owned
):
    """Paused in a command-line process only: a library call may return before the import
    ends, and must not leave its caller's collector off (hieval.collector)."""
    from hieval import collector

    monkeypatch.setattr(collector, "_owned", owned)
    seen = []
    monkeypatch.setattr(figures, "_pyplot", lambda: seen.append(gc.isenabled()))
    figures.prefetch().join()
    assert seen == [not owned]
    assert gc.isenabled()


def test_a_figure_failing_while_drawn_raises_and_leaves_nothing_behind(collector_on, monkeypatch):
    """A failure inside the drawing reaches the caller (the report is then not written), with
    the collector back on, the draw listener gone and the figure closed."""
    from matplotlib.text import Text

    plt = figures._pyplot()
    before = set(plt.get_fignums())

    def broken(self, renderer):
        raise RuntimeError("a text cannot be drawn")

    monkeypatch.setattr(Text, "draw", broken)
    with pytest.raises(RuntimeError, match="a text cannot be drawn"):
        figures.per_level(_tidy(), levels=("e0", "e1"), models=["a", "b"])
    assert gc.isenabled()
    assert set(plt.get_fignums()) == before
