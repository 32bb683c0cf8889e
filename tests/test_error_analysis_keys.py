"""The error analysis on the count engine's integer keys (issue 34, at scale), checked against a
naive pairing written here on a hand-made level table that is no tree (a node of one level
under two nodes of the level above, so the codes under it are not adjacent in the code space's
order: the sorted searches' fall-back) and on label tables with repeated rows."""

from __future__ import annotations

from collections import Counter

import polars as pl
import pytest

from hieval.analysis.confusions import confusions
from hieval.analysis.errors import FN, FP, KINDS, error_distance, error_rows, model_errors
from hieval.analysis.tree import Tree

LEVELS = ("leaf", "mid", "top", "root")
UP = {  # code -> {level: ancestor}; M1 sits under T1 (a1, a2) and under T2 (c1)
    "a1": {"leaf": "a1", "mid": "M1", "top": "T1"},
    "a2": {"leaf": "a2", "mid": "M1", "top": "T1"},
    "b1": {"leaf": "b1", "mid": "M2", "top": "T1"},
    "c1": {"leaf": "c1", "mid": "M1", "top": "T2"},
    "d1": {"leaf": "d1", "mid": "M3", "top": "T3"},
    "e1": {"leaf": "e1", "top": "T2"},  # no node at mid
}


def tree() -> Tree:
    rows = [(c, lv, a) for c, up in UP.items() for lv, a in up.items()]
    return Tree(
        ancestors=pl.DataFrame(rows, schema=["code", "level", "ancestor"], orient="row"),
        statuses=pl.DataFrame({"code": list(UP), "code_status": ["valid"] * len(UP)}),
        titles=pl.DataFrame({"code": list(UP), "title": list(UP)}),
        levels=LEVELS,
        category="mid",
    )


def lca(a: str, b: str) -> str:
    for level in LEVELS[:-1]:
        if level in UP[a] and UP[a].get(level) == UP[b].get(level):
            return level
    return "root"


# u's wrong codes b1 (M2) and c1 (M1) come in that order in code order, their mid nodes not.
GOLD = {"x": ["a1", "a1", "d1"], "y": ["c1", "b1"], "z": ["a2"], "w": ["e1", "a1"], "v": ["b1"]}
GOLD |= {"u": ["a2"]}
PRED = {"x": ["a2", "c1", "c1"], "y": ["a1", "b1"], "z": [], "w": ["c1"], "v": ["b1", "d1"]}
PRED |= {"u": ["b1", "c1"]}


def frame(sets: dict[str, list[str]]) -> pl.DataFrame:
    rows = [(d, c) for d, codes in sets.items() for c in codes]
    return pl.DataFrame(rows, schema=["doc_id", "code"], orient="row")


def naive():
    errors, pairs = Counter(), Counter()
    for doc in GOLD:
        gold, pred = set(GOLD[doc]), set(PRED[doc])
        for kind, own, other in ((FN, gold - pred, pred - gold), (FP, pred - gold, gold - pred)):
            for code in own:
                if not other:
                    errors[(kind, "none")] += 1
                    continue
                levels = [lca(code, o) for o in other]
                errors[(kind, min(levels, key=LEVELS.index))] += 1
        for g in gold - pred:
            for p in pred - gold:
                if LEVELS.index(lca(g, p)) <= LEVELS.index("mid"):
                    pairs[(g, p, lca(g, p))] += 1
    return errors, pairs


@pytest.mark.parametrize("repeat", [False, True])
def test_keys_match_the_naive_pairing_on_a_level_table_that_is_no_tree(repeat):
    gold, pred = frame(GOLD), frame(PRED)
    if repeat:
        gold, pred = pl.concat([gold, gold.head(2)]), pl.concat([pred, pred.tail(2)])
    errors = model_errors(gold, pred, tree())
    rows = error_rows(errors)
    table = error_distance(rows, tree(), model="m", doc_ids=errors.doc_ids)
    expected_errors, expected_pairs = naive()
    got = {(k, lv): n for k, lv, n in table.select("kind", "lca_level", "count").iter_rows()}
    assert got == dict(expected_errors)
    assert {kind for kind, _ in got} == set(KINDS)
    conf = confusions(errors)
    assert {(g, p, lv): n for g, p, lv, n in conf.iter_rows()} == dict(expected_pairs)
    assert ("c1", "a2", "mid") not in expected_pairs  # c1 is no gold code of x
    assert expected_pairs[("c1", "a1", "mid")] == 1  # M1 under T2 and under T1
    assert expected_pairs[("a2", "c1", "mid")] == 1  # u: found by the fall-back sort
