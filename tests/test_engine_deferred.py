"""The count pass that keeps the item sums' groups (hieval.engine.deferred), as the Evaluator
runs it on each chunk: its counts, gold counts and item sums (weighed later) must equal the
engine's own passes over the same labels bit for bit (:func:`count_labels`,
:func:`labels_gold_counts`, :func:`labels_item_sums`, which regroup the labels), and the
weight-free sums a plain-Python count of each document's ancestor sets; on ICD-9 codes of every
depth with placed and unknown codes, on a graph whose levels are not runs of codes (groups
sorted, and the gold pass's general path), with ``empty_gold`` keep and drop, slices cut
across documents, and the compiled kernels as well as the vectorised sums."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from hieval.engine import counts, deferred, keys
from hieval.engine.deferred import count_keeping_items, weighed_item_sums
from hieval.engine.driver import count_labels, labels_gold_counts, labels_item_sums
from hieval.engine.frequencies import gold_frequencies
from hieval.engine.icm import FIXED_POINT, IcmParams, node_weights
from hieval.engine.keys import CodeSpace, encode
from hieval.engine.lca import node_depths
from tests.test_counts_reference import to_frame
from tests.test_engine import IRREGULAR, LEVELS, anc_frame, random_labels
from tests.test_gold_frequencies import icd9_labels


def irregular_labels(seed: int):
    """Labels over a graph whose levels are not runs of codes (no level slots)."""
    ancestors = anc_frame(IRREGULAR)
    gold, pred = random_labels([*IRREGULAR, "zz"], 60, seed=seed)
    space = CodeSpace.build(ancestors, LEVELS)
    return gold, pred, encode(to_frame(gold), to_frame(pred), space), ancestors


def both_ways(labels, levels, params, *, threads=1, evaluated=None):
    """The deferred pass and the engine's own passes over ``labels`` (``evaluated``: every
    level but the root unless given)."""
    evaluated = evaluated or tuple(levels[:-1])
    kept = count_keeping_items(
        labels,
        evaluated=evaluated,
        params=params,
        depth=node_depths(labels.space),
        threads=threads,
    )
    gold = labels_gold_counts(labels, params=params)
    weights = node_weights(
        gold.ancestors, gold.nodes, gold.items, levels=tuple(levels), params=params
    )
    want = {
        "counts": count_labels(labels, evaluated=evaluated),
        "gold": gold,
        "items": labels_item_sums(labels, weights, params=params),
    }
    got = {
        "counts": (kept.sums, kept.docs),
        "gold": kept.gold,
        "items": weighed_item_sums(kept.kept, weights, threads=threads),
    }
    return got, want, weights


def assert_same(got, want):
    got_sums, got_docs = got["counts"]
    want_sums, want_docs = want["counts"]
    assert got_sums.keys() == want_sums.keys()
    for level in want_sums:
        assert np.array_equal(got_sums[level], want_sums[level])
    assert got_docs.equals(want_docs)
    assert got["gold"].items == want["gold"].items
    assert got["gold"].nodes.equals(want["gold"].nodes)
    assert got["gold"].ancestors.equals(want["gold"].ancestors)
    assert got["items"].equals(want["items"])  # every column, bit for bit


def plain_sets(labels_by_doc: dict[str, list[str]], ancestors: pl.DataFrame, root: str):
    """Per document, its ancestor-augmented set (the root left out), in Python."""
    above: dict[str, set[str]] = {}
    for code, node in ancestors.select("code", "ancestor").iter_rows():
        if node != root:
            above.setdefault(code, set()).add(node)
    return {
        doc: set().union(*(above.get(c, set()) for c in codes))
        for doc, codes in labels_by_doc.items()
    }


@pytest.mark.parametrize("empty_gold", ["keep", "drop"])
@pytest.mark.parametrize("compiled_from", [counts.COMPILED_FROM_LABELS, 1])
@pytest.mark.parametrize("seed", range(2))
def test_icd9_chunk_equals_the_engine_passes(
    icd9, icd9_ancestors, monkeypatch, seed, compiled_from, empty_gold
):
    monkeypatch.setattr(keys, "LABELS_PER_CHUNK", 97)  # many slices, cut between documents
    monkeypatch.setattr(deferred, "COMPILED_FROM_LABELS", compiled_from)
    gold, labels, ancestors = icd9_labels(icd9, icd9_ancestors, seed)
    params = IcmParams(empty_gold=empty_gold)
    got, want, weights = both_ways(labels, icd9.levels, params, threads=2)
    assert_same(got, want)
    # Counted up to the deepest level only: the gold counts of the levels above come from the
    # kept groups, not from the counts.
    assert_same(*both_ways(labels, icd9.levels, params, evaluated=icd9.levels[:1])[:2])
    assert len(list(labels.chunks())) > 5
    # Independently: HF's set sizes and IC(G) from each document's ancestor sets in Python.
    items = got["items"]
    sets = plain_sets(gold, ancestors, root=icd9.levels[-1])
    delta = dict(zip(weights["node"].to_list(), weights["delta"].to_list(), strict=True))
    for doc_id, anc_gold, ic_gold in items.select("doc_id", "anc_gold", "ic_gold").iter_rows():
        assert anc_gold == len(sets[doc_id])
        fixed = sum(round(delta[node] * FIXED_POINT) for node in sets[doc_id])
        assert ic_gold == fixed / FIXED_POINT
    assert set(items["doc_id"]) == {doc for doc, codes in gold.items() if codes}


@pytest.mark.parametrize("seed", range(3))
def test_general_grouping_path_equals_the_engine_passes(monkeypatch, seed):
    monkeypatch.setattr(keys, "LABELS_PER_CHUNK", 23)
    _, _, labels, _ = irregular_labels(seed)
    # Groups sorted from the labels (not runs of codes); the gold pass's general path.
    assert not labels.space.unbroken["e0"] and gold_frequencies(labels) is None
    got, want, _ = both_ways(labels, LEVELS, IcmParams())
    assert_same(got, want)


def test_no_labels(icd9_ancestors, icd9):
    space = CodeSpace.build(icd9_ancestors, icd9.levels)
    empty = pl.DataFrame(schema={"doc_id": pl.String, "code": pl.String})
    labels = encode(empty, empty, space)
    got, want, _ = both_ways(labels, icd9.levels, IcmParams())
    assert_same(got, want)
    assert got["items"].height == 0
