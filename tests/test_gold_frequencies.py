"""ICM's gold pass as runs of sorted keys (hieval.engine.frequencies), against a plain-Python
count of the gold documents under every node and against the general group-by path, on ICD-9
codes of every depth, codes placed by their syntax, codes outside the hierarchy, repeated and
empty documents, documents cut across chunks, a code without a node between two under one, and
predicted labels (which must not count); and graphs whose levels are not contiguous runs of
codes, which take the general path."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import polars as pl
import pytest

from hieval.engine import driver, frequencies
from hieval.engine.frequencies import gold_frequencies
from hieval.engine.groups import slices
from hieval.engine.icm import IcmParams, gold_only, slice_frequencies
from hieval.engine.keys import CodeSpace, encode
from hieval.inputs.normalize import placed_ancestors
from tests.test_counts_reference import to_frame
from tests.test_engine import IRREGULAR, LEVELS, anc_frame, random_labels

#: Codes the CMS lists lack, placed by their syntax (401.7 under 401, E999.7 under E999).
PLACED_CODES = ["401.7", "401.77", "E999.7"]


def icd9_labels(icd9, icd9_ancestors, seed: int):
    """Random gold and predictions over ICD-9 codes of every depth, placed codes and codes
    outside the hierarchy; the ancestor rows include the placed codes'."""
    by_depth = icd9.frame.group_by("depth").agg(pl.col("code").head(120))
    codes = [c for row in by_depth["code"].to_list() for c in row] + ["ZZ1", "ZZ2"]
    gold, pred = random_labels(codes + PLACED_CODES, 300, seed=seed)
    gold["empty"] = []
    gold["repeats"] = ["401.9", "401.9", "401.1", "401.7"]  # one document, codes under 401
    gold["placed"] = ["401.77", "E999.7"]
    placed = placed_ancestors(PLACED_CODES, icd9)
    space = CodeSpace.build(icd9_ancestors, icd9.levels, placed)
    ancestors = pl.concat([icd9_ancestors, placed.select(icd9_ancestors.columns)])
    return gold, encode(to_frame(gold), to_frame(pred), space), ancestors


def plain_count(gold: dict[str, list[str]], ancestors: pl.DataFrame):
    """Per node, the documents whose gold reaches it (A(G): each code's own row and its
    ancestors'); per code, the documents holding it."""
    above: dict[str, set[str]] = {}
    for code, node in ancestors.select("code", "ancestor").iter_rows():
        above.setdefault(code, set()).add(node)
    nodes, codes = Counter(), Counter()
    for labels in gold.values():
        reached = set().union(*(above.get(code, set()) for code in labels))
        nodes.update(reached)
        codes.update(set(labels))
    return nodes, codes


def group_path(labels):
    freq = np.zeros(labels.space.tree_nodes.len(), dtype=np.int64)
    exact = np.zeros(labels.space.codes.len(), dtype=np.int64)
    for node_f, code_f in map(slice_frequencies, slices(gold_only(labels))):
        freq += node_f
        exact += code_f
    return freq, exact


@pytest.fixture(params=["vectorised", "compiled"])
def gold_pass(request, monkeypatch):
    """Each test of the run count on both its paths: vectorised chunk by chunk (the inputs
    here are small), and the compiled pass of large inputs, forced from the first label."""
    if request.param == "compiled":
        monkeypatch.setattr(frequencies, "COMPILED_FROM", 0)
    return request.param


@pytest.mark.parametrize("seed", range(3))
def test_run_count_equals_a_plain_count_and_the_group_path(icd9, icd9_ancestors, seed, gold_pass):
    gold, labels, ancestors = icd9_labels(icd9, icd9_ancestors, seed)
    freq, exact = gold_frequencies(labels)
    want_nodes, want_codes = plain_count(gold, ancestors)
    got_nodes = dict(zip(labels.space.tree_nodes.to_list(), freq.tolist(), strict=True))
    assert {n: c for n, c in got_nodes.items() if c} == dict(want_nodes)
    got_codes = dict(zip(labels.space.codes.to_list(), exact.tolist(), strict=True))
    assert {c: n for c, n in got_codes.items() if n} == dict(want_codes)
    assert max(want_nodes.values()) > 100  # nodes shared by many documents were counted
    assert got_nodes["401.7"] and got_nodes["E999"]  # placed codes reach their nodes
    general = group_path(labels)
    assert np.array_equal(freq, general[0]) and np.array_equal(exact, general[1])


def test_documents_cut_across_chunks_count_once(icd9, icd9_ancestors, monkeypatch):
    _, labels, _ = icd9_labels(icd9, icd9_ancestors, seed=5)
    whole = gold_frequencies(labels)
    monkeypatch.setattr(frequencies, "CHUNK_KEYS", 5)  # a chunk per document or two
    assert sum(1 for _ in labels.chunks(5)) > 100
    chunked = gold_frequencies(labels)
    assert np.array_equal(whole[0], chunked[0]) and np.array_equal(whole[1], chunked[1])


def test_a_code_without_a_node_between_two_under_it_leaves_one_pair(gold_pass):
    """A level whose node's codes are contiguous once codes without a node there are left out
    (the level's contiguity ignores those): in document order c1 (node n), c4 (no node at L),
    c2 (node n), which is one (document, n) pair, as the group path counts it."""
    rows = [
        (code, level, node)
        for code, nodes in {
            "c1": {"L": "n", "M": "a"},
            "c2": {"L": "n", "M": "b"},
            "c3": {"M": "a"},
            "c4": {"M": "b"},
        }.items()
        for level, node in {"leaf_": code, **nodes, "root": "r"}.items()
    ]
    ancestors = pl.DataFrame(rows, schema=["code", "level", "ancestor"], orient="row")
    space = CodeSpace.build(ancestors, ("leaf_", "L", "M", "root"))
    assert space.tree_slots is not None and all(space.contiguous.values())
    assert space.codes.to_list() == ["c3", "c1", "c4", "c2"]  # c4 sits between c1 and c2
    gold = {"d1": ["c1", "c4", "c2"], "d2": ["c3", "c2"]}
    labels = encode(to_frame(gold), to_frame({"d1": ["c3"]}), space)
    freq, exact = gold_frequencies(labels)
    got = dict(zip(space.tree_nodes.to_list(), freq.tolist(), strict=True))
    want_nodes, want_codes = plain_count(gold, ancestors)
    assert {n: c for n, c in got.items() if c} == dict(want_nodes)
    codes = dict(zip(space.codes.to_list(), exact.tolist(), strict=True))
    assert {c: n for c, n in codes.items() if n} == dict(want_codes)
    assert got["n"] == 2 and got["a"] == 2 and got["r"] == 2
    assert np.array_equal(freq, group_path(labels)[0])


def test_weights_through_runs_equal_the_weights_through_groups(icd9, icd9_ancestors, monkeypatch):
    _, labels, _ = icd9_labels(icd9, icd9_ancestors, seed=7)
    levels, params = icd9.levels, IcmParams()
    taken = []

    def spy(found_labels):
        taken.append(gold_frequencies(found_labels))
        return taken[-1]

    monkeypatch.setattr(driver, "gold_frequencies", spy)
    runs = driver.labels_weights(labels, levels=levels, params=params)
    assert taken and taken[0] is not None
    monkeypatch.setattr(driver, "gold_frequencies", lambda _: None)
    groups = driver.labels_weights(labels, levels=levels, params=params)
    assert runs.equals(groups)
    assert runs["ic"].n_unique() > 10  # the comparison is not vacuous


def test_levels_that_are_not_runs_of_codes_take_the_general_path():
    space = CodeSpace.build(anc_frame(IRREGULAR), LEVELS)
    gold, pred = random_labels(sorted(IRREGULAR), 40, seed=2)
    labels = encode(to_frame(gold), to_frame(pred), space)
    assert space.tree_slots is not None and not space.contiguous["e0"]
    assert gold_frequencies(labels) is None  # refused, not miscounted
    regular = dataclasses.replace(labels, space=dataclasses.replace(space, tree_slots=None))
    assert gold_frequencies(regular) is None


def test_both_paths_count_alike(icd9, icd9_ancestors, monkeypatch):
    _, labels, _ = icd9_labels(icd9, icd9_ancestors, seed=11)
    vectorised = gold_frequencies(labels)
    monkeypatch.setattr(frequencies, "COMPILED_FROM", 0)
    compiled = gold_frequencies(labels)
    assert np.array_equal(vectorised[0], compiled[0])
    assert np.array_equal(vectorised[1], compiled[1])
    assert compiled[0].dtype == compiled[1].dtype == np.int64
