"""LCA-F (Kosmopoulos et al. 2015, the LCA-P/R/F of BioASQ's HEMKit) against a naive
implementation written here from the paper's definition: plain Python over sets and parent
links, pair by pair, nothing shared with the engine's vectorised group-bys
(:mod:`hieval.engine.lca`); and hand-worked documents, one per designed case."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from test_suite import frame

from hieval.engine import keys
from hieval.engine.driver import evaluate
from hieval.engine.icm import IcmParams
from hieval.hierarchy.sources import edge_list_table
from hieval.metrics.suite import suite_rows

# -- the naive reference ----------------------------------------------------------------------


def chain(label: str, parent: dict) -> list[str]:
    """The label and its ancestors, upwards, the root (parent None of a top node) left out."""
    out = []
    while label is not None:
        out.append(label)
        label = parent[label]
    return out


def naive_lca_f(gold: set, pred: set, parent: dict) -> float:
    """LCA-F of one document, from the definition:

    1. drop a label that is an ancestor of another label of its own set;
    2. pair each label with the other set's labels at the least tree distance
       depth(x) + depth(y) - 2 depth(lca), the deepest LCA among equally near ones;
    3. augment each label with its ancestors up to and including that LCA (the root, depth 0,
       never counted; a label with no partner stays alone);
    4. F = 2 |P+ & G+| / (|P+| + |G+|), 1 when both are empty.
    """

    def reduced(labels: set) -> set:
        return {x for x in labels if not any(x in chain(y, parent)[1:] for y in labels)}

    def lca_depth(x: str, y: str) -> int:
        above_y = set(chain(y, parent))
        up = chain(x, parent)
        for i, node in enumerate(up):
            if node in above_y:
                return len(up) - i  # the depth of the first of x's chain above y
        return 0  # the root

    def augmented(labels: set, others: set) -> set:
        out = set()
        for x in labels:
            up = chain(x, parent)
            if not others:
                out.add(x)
                continue
            depth = len(up)
            nearest = min(
                (depth + len(chain(y, parent)) - 2 * lca_depth(x, y), -lca_depth(x, y))
                for y in others
            )
            top = max(-nearest[1], 1)
            out.update(up[: depth - top + 1])
        return out

    p, g = reduced(pred), reduced(gold)
    p_plus, g_plus = augmented(p, g), augmented(g, p)
    if not p_plus and not g_plus:
        return 1.0
    return 2 * len(p_plus & g_plus) / (len(p_plus) + len(g_plus))


# -- hieval's value ---------------------------------------------------------------------------


def tree(parent: dict):
    edges = pl.DataFrame({"child": list(parent), "parent": list(parent.values())})
    table, _ = edge_list_table(edges, "t")
    return table


def hieval_lca_f(table, gold: dict, pred: dict) -> float:
    params = IcmParams()
    result = evaluate(
        frame(gold), frame(pred), table.ancestors(), levels=table.levels,
        evaluated=table.levels[:-1], params=params,
    )  # fmt: skip
    rows = suite_rows(result.nodes, result.docs, result.item_sums, params=params)
    return rows.filter(pl.col("family") == "lca")["value"].item()


def random_tree(rng: np.random.Generator) -> dict:
    """Three or four top nodes, branches of random depth (1 to 4): leaves at many depths."""
    parent: dict = {}

    def grow(node: str, depth: int) -> None:
        if depth >= 4 or (depth > 1 and rng.random() < 0.3):
            return
        for i in range(int(rng.integers(1, 4))):
            child = f"{node}.{i}"
            parent[child] = node
            grow(child, depth + 1)

    for t in range(int(rng.integers(3, 5))):
        parent[f"T{t}"] = None
        grow(f"T{t}", 1)
    return parent


def random_labels(rng, nodes: list[str], n_docs: int) -> dict:
    """Label sets of 0 to 4 codes drawn from every node (internal ones too, so that a set can
    hold a code and its ancestor)."""
    return {
        f"d{i:02d}": sorted(rng.choice(nodes, int(rng.integers(0, 5)), replace=False))
        for i in range(n_docs)
    }


@pytest.mark.parametrize("seed", range(8))
def test_lca_f_matches_the_naive_reference(seed):
    """Random trees and random label sets (empty ones, codes with their ancestors, codes of
    different chapters): the mean over documents of the naive per-document LCA-F."""
    rng = np.random.default_rng(seed)
    parent = random_tree(rng)
    nodes = sorted(parent)
    gold, pred = random_labels(rng, nodes, 40), random_labels(rng, nodes, 40)
    for d in list(gold)[:4]:  # near misses: each gold code's sibling or child or parent
        pred[d] = sorted({c for c in gold[d]} | {parent[c] for c in gold[d] if parent[c]})
    gold["d00"], pred["d00"] = [], []
    expected = [naive_lca_f(set(gold[d]), set(pred[d]), parent) for d in gold]
    got = hieval_lca_f(tree(parent), gold, pred)
    assert got == pytest.approx(sum(expected) / len(expected), abs=1e-12)
    assert 0 < got < 1


def test_lca_f_is_the_same_in_small_slices(monkeypatch):
    """Slices cut between documents: per-document sums do not depend on where they are cut."""
    rng = np.random.default_rng(11)
    parent = random_tree(rng)
    nodes = sorted(parent)
    gold, pred = random_labels(rng, nodes, 60), random_labels(rng, nodes, 60)
    table = tree(parent)
    whole = hieval_lca_f(table, gold, pred)
    monkeypatch.setattr(keys, "LABELS_PER_CHUNK", 7)
    assert hieval_lca_f(table, gold, pred) == whole
    expected = [naive_lca_f(set(gold[d]), set(pred[d]), parent) for d in gold]
    assert whole == pytest.approx(sum(expected) / len(expected), abs=1e-12)


# -- hand-worked documents --------------------------------------------------------------------

#: A → A1 → {A1a, A1b → A1b1}, A → A2; B → B1. The root above A and B is never counted.
PARENT = {
    "A": None, "A1": "A", "A1a": "A1", "A1b": "A1", "A1b1": "A1b", "A2": "A",
    "B": None, "B1": "B",
}  # fmt: skip

HAND_WORKED = [
    # Siblings: P+ = {A1a, A1}, G+ = {A1b, A1}: 2·1 / 4.
    ("siblings", ["A1b"], ["A1a"], 1 / 2),
    # Cousins meet at A: P+ = {A2, A}, G+ = {A1a, A1, A}: 2·1 / 5.
    ("cousins", ["A1a"], ["A2"], 2 / 5),
    # Different chapters meet at the root only: P+ = {B1, B}, G+ = {A1, A}: nothing shared.
    ("chapters", ["A1"], ["B1"], 0.0),
    # Exact hit plus a gold code of another chapter: P+ = {A1a}; G+ = {A1a} ∪ {B1, B} (B1's
    # nearest prediction A1a meets it at the root): 2·1 / 4. (HF would give 6/8.)
    ("hit and miss", ["A1a", "B1"], ["A1a"], 2 / 4),
    # A gold code and its ancestor: A is dropped, A1a is hit: 1.
    ("ancestor in the set", ["A1a", "A"], ["A1a"], 1.0),
    # A tie: A2 and A1b1 are both 3 steps from A1a, through A and through A1; the deeper LCA
    # (A1) wins: P+ = {A1a, A1}; G+ = {A2, A} ∪ {A1b1, A1b, A1}: 2·1 / 7 (through A: 1/2).
    ("tie", ["A2", "A1b1"], ["A1a"], 2 / 7),
    # Nothing gold and nothing predicted: 1; one side empty: 0.
    ("both empty", [], [], 1.0),
    ("nothing predicted", ["A1"], [], 0.0),
    ("nothing gold", [], ["A1"], 0.0),
]


@pytest.mark.parametrize(("case", "gold", "pred", "expected"), HAND_WORKED, ids=lambda x: x)
def test_lca_f_hand_worked(case, gold, pred, expected):
    """One document per case; the naive reference agrees with each hand-worked value."""
    assert naive_lca_f(set(gold), set(pred), PARENT) == pytest.approx(expected)
    assert hieval_lca_f(tree(PARENT), {"x": gold}, {"x": pred}) == pytest.approx(expected)


def test_lca_f_is_the_mean_over_documents():
    """Every hand-worked document at once: the mean of their values."""
    gold = {f"d{i}": g for i, (_, g, _, _) in enumerate(HAND_WORKED)}
    pred = {f"d{i}": p for i, (_, _, p, _) in enumerate(HAND_WORKED)}
    expected = np.mean([e for *_, e in HAND_WORKED])
    assert hieval_lca_f(tree(PARENT), gold, pred) == pytest.approx(expected, abs=1e-15)
