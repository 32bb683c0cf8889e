"""The long-tail section's note on how many codes each bin holds: a bin holds the gold *or
predicted* codes of its training frequency, so the count differs between models, and the note
must not state one model's count as everyone's."""

from __future__ import annotations

import re

import polars as pl

from hieval.reports.frequency import BINS
from hieval.reports.html import _codes_per_bin
from tests.test_reports import evaluated  # noqa: F401 (the fixture: a small zoo with a training gold)


def _bins(counts: dict[str, dict[str, int]]) -> pl.DataFrame:
    rows = [
        {"model": m, "bin": b, "codes": n, "tp": 0, "fp": 0, "fn": 0, "f1": 0.0}
        for m, per_bin in counts.items()
        for b, n in per_bin.items()
    ]
    return pl.DataFrame(rows)


def test_one_number_when_the_models_agree():
    shown = _codes_per_bin(_bins({"a": {"unseen": 1200, "1-10": 7}, "b": {"unseen": 1200}}))
    assert shown == {"unseen": "1,200", "1-10": "7"}


def test_the_range_over_models_when_they_differ():
    # The last model's count (what the note showed before) is neither end of the range here.
    counts = {"a": {"unseen": 3}, "b": {"unseen": 40}, "c": {"unseen": 12}}
    assert _codes_per_bin(_bins(counts)) == {"unseen": "3\u201340"}


def test_the_report_note_against_each_models_own_bins(evaluated):  # noqa: F811 (the fixture)
    out, models, train = evaluated
    # A naive count per model: each flat node of the model's table in its training bin.
    train_docs = train.unique(["doc_id", "code"]).group_by("code").len()
    freq = dict(zip(train_docs["code"], train_docs["len"], strict=True))
    per_bin: dict[str, set[int]] = {}
    for model in models:
        nodes = pl.read_parquet(out / "work" / "counts" / model / "nodes.parquet")
        counted: dict[str, int] = {}
        for code in nodes.filter(pl.col("family") == "flat")["node"]:
            n = freq.get(code, 0)
            label = next(lb for lb, lo, hi in BINS if n >= lo and (hi is None or n <= hi))
            counted[label] = counted.get(label, 0) + 1
        for label, n in counted.items():
            per_bin.setdefault(label, set()).add(n)
    html = (out / "report.html").read_text()
    note = re.search(r"codes per bin: (.*?)\)", html[html.index("id='frequency'") :]).group(1)
    for label, ns in per_bin.items():
        low, high = min(ns), max(ns)
        text = f"{low:,}" if low == high else f"{low:,}\u2013{high:,}"
        assert f"{label}: {text}" in note.replace("&gt;", ">"), (label, note)
    assert any(len(ns) > 1 for ns in per_bin.values())  # the demo's models do differ
