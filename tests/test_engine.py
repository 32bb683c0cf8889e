"""The sorted-key engine's own paths, each against the plain-Python reference of
``test_counts_reference``: irregular graphs (levels whose nodes are not contiguous in code
order), tiny slices (documents cut across many slices), one or two threads, unsorted and
duplicated input rows, codes the hierarchy lacks, and the memory budget of a count job.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from hieval.engine import keys
from hieval.engine.driver import count
from hieval.engine.keys import CodeSpace
from hieval.errors import HievalError
from hieval.resources import Resources, parse_bytes
from tests.test_counts_reference import doc_dict, naive_counts, node_dict, to_frame

# A graph that is not a tree of levels: e0 node X sits under two blocks (B1 via a1, B2 via
# c1), so in any code order X's codes are not adjacent to each other at every level.
IRREGULAR = {
    "a1": {"e0": "X", "c": "B1"},
    "a2": {"e0": "Z", "c": "B1"},
    "b1": {"e0": "Y", "c": "B2"},
    "c1": {"e0": "X", "c": "B2"},
    "d1": {"e0": "Y", "c": "B1"},
}
LEVELS = ("e0", "c")


def anc_frame(anc: dict[str, dict[str, str]]) -> pl.DataFrame:
    rows = [(code, level, node) for code, levels in anc.items() for level, node in levels.items()]
    return pl.DataFrame(rows, schema=["code", "level", "ancestor"], orient="row")


def random_labels(codes: list[str], n_docs: int, seed: int) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    gold, pred = {}, {}
    for i in range(n_docs):
        doc = f"doc{i:04d}"
        gold[doc] = sorted(set(rng.choice(codes, size=rng.integers(0, 5))))
        pred[doc] = sorted(set(rng.choice(codes, size=rng.integers(0, 5))))
    return gold, pred


def assert_matches_reference(gold, pred, anc, nodes, docs, levels=LEVELS):
    want_nodes, want_docs = naive_counts(gold, pred, anc, levels)
    assert node_dict(nodes) == {k: v for k, v in want_nodes.items()}
    assert doc_dict(docs) == want_docs


def test_irregular_levels_are_detected_and_counted_exactly():
    space = CodeSpace.build(anc_frame(IRREGULAR), LEVELS)
    assert not space.contiguous["e0"]  # the sorted-run shortcut would be wrong here
    gold, pred = random_labels(sorted(IRREGULAR), 60, seed=1)
    nodes, docs = count(to_frame(gold), to_frame(pred), anc_frame(IRREGULAR), LEVELS)
    assert_matches_reference(gold, pred, IRREGULAR, nodes, docs)


@pytest.mark.parametrize("threads", [1, 2])
def test_tiny_slices_and_threads_give_the_same_counts(icd9, icd9_ancestors, monkeypatch, threads):
    from tests.test_counts_reference import naive_ancestor_map

    monkeypatch.setattr(keys, "LABELS_PER_CHUNK", 7)  # documents straddle many slice edges
    codes = icd9.frame.filter(pl.col("depth").is_in(["e2", "e1"]))["code"].head(400).to_list()
    gold, pred = random_labels(codes, 80, seed=2)
    levels = ("e2", "e1", "e0", "c")
    nodes, docs = count(to_frame(gold), to_frame(pred), icd9_ancestors, levels, threads=threads)
    anc = naive_ancestor_map(icd9.frame, codes)
    assert_matches_reference(gold, pred, anc, nodes, docs, levels)


def test_unsorted_and_duplicated_rows_count_once(icd9, icd9_ancestors):
    codes = icd9.frame.filter(pl.col("depth") == "e2")["code"].head(200).to_list()
    gold, pred = random_labels(codes, 50, seed=3)
    g, p = to_frame(gold), to_frame(pred)
    messy_g = pl.concat([g, g.head(30)]).sample(fraction=1.0, shuffle=True, seed=4)
    messy_p = pl.concat([p, p.tail(30)]).sample(fraction=1.0, shuffle=True, seed=5)
    levels = ("e2", "e1", "e0", "c")
    assert count(messy_g, messy_p, icd9_ancestors, levels)[0].equals(
        count(g, p, icd9_ancestors, levels)[0]
    )


def test_codes_outside_the_hierarchy_count_at_the_leaf_level_only():
    anc = {"a1": {"e0": "X", "c": "B1"}, "b1": {"e0": "Y", "c": "B1"}}
    gold = {"d1": ["a1", "zz9"], "d2": ["b1"]}
    pred = {"d1": ["zz9", "b1"], "d2": ["qq1"]}
    nodes, docs = count(to_frame(gold), to_frame(pred), anc_frame(anc), LEVELS)
    anc_all = {**anc, "zz9": {}, "qq1": {}}
    assert_matches_reference(gold, pred, anc_all, nodes, docs)


def test_memory_budget_refuses_with_the_shards_that_fit():
    # 550 MiB + 2 threads x 200 MiB + 20 bytes a label
    Resources(memory_limit="2GB", threads=2).check_budget(10_000_000)  # 1.2 GB: fits
    with pytest.raises(HievalError, match=r"needs about 3\.0 GB.*set shards: 2 "):
        Resources(memory_limit="2GB", threads=2).check_budget(100_000_000)
    with pytest.raises(HievalError, match=r"needs about 1\.8 GB"):  # more threads, more need
        Resources(memory_limit="1.7GB", threads=6).check_budget(10)
    with pytest.raises(HievalError, match=r"raise engine\.memory_limit"):
        Resources(memory_limit="100MB", threads=1).check_budget(10)
    assert parse_bytes("1.5GiB") == int(1.5 * 2**30) and parse_bytes("800MB") == 800 * 10**6
    with pytest.raises(HievalError, match="not a size"):
        parse_bytes("lots")


def test_progress_is_logged_every_tenth_on_large_jobs_only(caplog):
    from hieval.engine.driver import Progress

    caplog.set_level("INFO", logger="hieval")
    progress = Progress(20_000_000)
    for _ in range(40):
        progress.advance(500_000)
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split("(")[1].split(")")[0] for line in lines] == [
        f"{p}%" for p in range(10, 101, 10)
    ]
    caplog.clear()
    small = Progress(1_000)
    small.advance(1_000)
    assert caplog.records == []


def _both_paths(labels, levels, params):
    """Weights and item sums through the level slots and through the explicit expansion."""
    import dataclasses

    from hieval.engine.driver import evaluate_labels, labels_weights

    out = []
    for space in (labels.space, dataclasses.replace(labels.space, tree_slots=None)):
        encoded = dataclasses.replace(labels, space=space)
        weights = labels_weights(encoded, levels=levels, params=params)
        result = evaluate_labels(
            encoded, levels=levels, evaluated=(), params=params, weights=weights
        )
        out.append((weights, result.item_sums))
    return out


@pytest.mark.parametrize("seed", range(3))
def test_icm_level_slots_equal_the_ancestor_expansion(icd9, icd9_ancestors, seed):
    """ICD-9 is a regular tree of levels, so ICM takes the level-slot path; it must give the
    very numbers of the general path (each label expanded to its distinct ancestors). Labels
    include internal codes (e1, e0 and block depth) and codes outside the hierarchy."""
    from hieval.engine.icm import IcmParams
    from hieval.engine.keys import encode

    space = CodeSpace.build(icd9_ancestors, icd9.levels)
    assert space.tree_slots is not None
    by_depth = icd9.frame.group_by("depth").agg(pl.col("code").head(150))
    codes = [c for row in by_depth["code"].to_list() for c in row] + ["ZZ1", "ZZ2"]
    gold, pred = random_labels(codes, 120, seed=seed)
    gold["empty"] = []
    labels = encode(to_frame(gold), to_frame(pred), space)
    (w_fast, i_fast), (w_slow, i_slow) = _both_paths(labels, icd9.levels, IcmParams())
    assert w_fast.equals(w_slow) and i_fast.equals(i_slow)
    assert (i_fast["ic_union"] > 0).sum() > 50  # the comparison is not vacuous


def test_a_node_met_first_at_two_levels_takes_the_expansion_path():
    # B is a block (level c) for a1 but a category (e0) for b1: no single level to count it at.
    anc = anc_frame({"a1": {"e0": "X", "c": "B"}, "b1": {"e0": "B", "c": "B"}})
    assert CodeSpace.build(anc, LEVELS).tree_slots is None


def test_ancestor_tables_with_two_ancestors_at_a_level_are_refused():
    anc = pl.concat([anc_frame(IRREGULAR), anc_frame({"a1": {"e0": "Y"}})])
    with pytest.raises(ValueError, match=r"code 'a1' more than one ancestor at level 'e0'"):
        CodeSpace.build(anc, LEVELS)


def test_a_level_without_rows_counts_nothing_there():
    anc = {"a1": {"e0": "X"}, "b1": {"e0": "Y"}}  # no code has a block (level c)
    gold, pred = {"d1": ["a1", "b1"]}, {"d1": ["a1"]}
    nodes, docs = count(to_frame(gold), to_frame(pred), anc_frame(anc), LEVELS)
    assert_matches_reference(gold, pred, anc, nodes, docs)
    assert nodes.filter(pl.col("level") == "c").height == 0


def test_an_empty_ancestor_table_leaves_flat_counts_and_zero_icm():
    from hieval.metrics.tidy import icm

    empty = pl.DataFrame(schema={"code": pl.String, "level": pl.String, "ancestor": pl.String})
    gold, pred = {"d1": ["x", "y"], "d2": ["z"]}, {"d1": ["x"], "d2": ["q"]}
    nodes, docs = count(to_frame(gold), to_frame(pred), empty, LEVELS)
    assert_matches_reference(gold, pred, {c: {} for c in "xyzq"}, nodes, docs)
    assert icm(to_frame(gold), to_frame(pred), empty, (*LEVELS, "root"))["icm"] == 0.0
