"""ICM against hand-worked values, a naive recursive reference, and the pyevall package."""

from __future__ import annotations

import json
import math
import random

import polars as pl
import pytest

from hieval.engine.icm import IcmParams
from hieval.hierarchy.sources import edge_list_table
from hieval.metrics.tidy import icm

# root -> A (a1, a2, a3), B (b1); a3 never appears in the gold.
EDGES = {"A": None, "B": None, "a1": "A", "a2": "A", "a3": "A", "b1": "B"}
GOLD = {"d1": ["a1"], "d2": ["a1", "b1"], "d3": ["a2"], "d4": ["b1"]}


def tree(edges=EDGES):
    table, _ = edge_list_table(
        pl.DataFrame({"child": list(edges), "parent": list(edges.values())}), "test"
    )
    return table


def frame(labels: dict[str, list[str | None]]) -> pl.DataFrame:
    rows = [(d, c) for d, cs in labels.items() for c in (cs or [None])]
    return pl.DataFrame(rows, schema={"doc_id": pl.String, "code": pl.String}, orient="row")


def run(gold, pred, edges=EDGES, **params):
    table = tree(edges)
    return icm(frame(gold), frame(pred), table.ancestors(), table.levels, IcmParams(**params))


# Hand-worked IC with N = 4 gold items: P(A) = 3/4, P(a1) = 2/4, P(a2) = 1/4, P(B) = 2/4,
# P(b1) = 2/4, P(a3) = 1/N (unseen). So IC(A) = log2(4/3), IC(a1) = 1, IC(a2) = 2, IC(B) = 1,
# IC(b1) = 1, IC(a3) = 2; and IC({a1, a2}) = IC(a1) + IC(a2) - IC(lso = A).
IC_A = math.log2(4 / 3)
IC_GOLD = {"d1": 1.0, "d2": 2.0, "d3": 2.0, "d4": 1.0}  # IC({a1, b1}) = 1 + 1 - IC(root) = 2


def test_identical_sets():
    result = run(GOLD, GOLD)
    expected = sum((2 + 2 - 3) * v for v in IC_GOLD.values()) / 4
    assert result["icm"] == pytest.approx(expected)
    assert result["icm_norm"] == pytest.approx(1.0)


def test_empty_prediction():
    result = run(GOLD, {})
    assert result["icm"] == pytest.approx(-sum(IC_GOLD.values()) / 4)  # (a2 - b)·IC(G) = -IC(G)
    assert result["icm_norm"] == 0.0


def test_sibling_error_beats_distant_error():
    sibling = run(GOLD, {**GOLD, "d3": ["a1"]})
    distant = run(GOLD, {**GOLD, "d3": ["b1"]})
    # d3: gold {a2}. Sibling a1: 2·1 + 2·2 - 3·(1 + 2 - IC_A); distant b1: 2·1 + 2·2 - 3·(2 + 1).
    sibling_d3 = 2 * 1 + 2 * 2 - 3 * (1 + 2 - IC_A)
    distant_d3 = 2 * 1 + 2 * 2 - 3 * 3
    base = IC_GOLD["d1"] + IC_GOLD["d2"] + IC_GOLD["d4"]
    assert sibling["icm"] == pytest.approx((base + sibling_d3) / 4)
    assert distant["icm"] == pytest.approx((base + distant_d3) / 4)
    assert sibling["icm"] > distant["icm"]


def test_multi_label_item():
    # d2: gold {a1, b1}, predicted {a1, a2}: IC(P) = 1 + 2 - IC_A, IC(G) = 2,
    # IC(P ∪ G) = Δ over {A, a1, a2, B, b1} = IC_A + (1 - IC_A) + (2 - IC_A) + 1 + 0.
    result = run(GOLD, {**GOLD, "d2": ["a1", "a2"]})
    ic_p, ic_u = 3 - IC_A, 4 - IC_A
    d2 = 2 * ic_p + 2 * 2 - 3 * ic_u
    assert result["icm"] == pytest.approx((1 + d2 + 2 + 1) / 4)


def test_unseen_category_gets_probability_one_over_n():
    # d1: gold {a1}, predicted {a3} (never in the gold): IC(a3) = log2(4) = 2.
    result = run(GOLD, {**GOLD, "d1": ["a3"]})
    d1 = 2 * 2 + 2 * 1 - 3 * (2 + 1 - IC_A)
    assert result["icm"] == pytest.approx((d1 + 2 + 2 + 1) / 4)


def test_empty_gold_keep_and_drop():
    gold = {**GOLD, "d5": []}  # a gold document declared with no labels
    pred = {**GOLD, "d5": ["b1"]}
    dropped = run(gold, pred, empty_gold="drop")
    assert dropped["icm"] == pytest.approx(run(GOLD, GOLD)["icm"])  # as if d5 were absent
    kept = run(gold, pred, empty_gold="keep")
    # N = 5: IC(A) = log2(5/3), IC(a1) = log2(5/2), IC(a2) = log2(5), IC(B) = IC(b1) = log2(5/2)
    ic = {"a1": math.log2(5 / 2), "a2": math.log2(5), "b1": math.log2(5 / 2)}
    per_item = [ic["a1"], ic["a1"] + ic["b1"], ic["a2"], ic["b1"], -ic["b1"]]
    assert kept["icm"] == pytest.approx(sum(per_item) / 5)


def test_weights_change_the_score():
    pred = {**GOLD, "d3": ["a1"]}
    default = run(GOLD, pred)["icm"]
    assert run(GOLD, pred, alpha1=1, alpha2=1, beta=1)["icm"] != pytest.approx(default)


# --- a naive reference: the paper's recursion with deepest common ancestors ----------------


def naive_icm(gold, pred, edges, alpha1=2.0, alpha2=2.0, beta=3.0):
    parent = dict(edges)

    def path(c):  # ancestors-or-self, root side first
        out = []
        while c is not None:
            out.insert(0, c)
            c = parent[c]
        return out

    items = list(gold)
    n = len(items)
    freq = {c: sum(1 for d in items if any(c in path(g) for g in gold[d])) for c in parent}
    ic = {c: -math.log2((freq[c] or 1) / n) for c in parent}

    def lso(a, b):
        common = [x for x in path(a) if x in path(b)]
        return common[-1] if common else None

    def ic_set(classes):
        classes = list(classes)
        if not classes:
            return 0.0
        head, rest = classes[0], classes[1:]
        dca = {lso(head, r) for r in rest} - {None}
        return ic[head] + ic_set(rest) - ic_set(sorted(dca))

    scores = []
    for d in items:
        p, g = set(pred.get(d, [])), set(gold[d])
        scores.append(
            alpha1 * ic_set(sorted(p)) + alpha2 * ic_set(sorted(g)) - beta * ic_set(sorted(p | g))
        )
    return sum(scores) / n


def random_problem(seed: int):
    rng = random.Random(seed)
    edges, nested = {}, {}
    for t in range(rng.randint(2, 4)):
        top = f"T{t}"
        edges[top], nested[top] = None, {}
        for c in range(rng.randint(1, 3)):
            child = f"{top}C{c}"
            edges[child] = top
            leaves = [f"{child}L{k}" for k in range(rng.randint(0, 3))]
            for leaf in leaves:
                edges[leaf] = child
            nested[top][child] = leaves
    nodes = list(edges)
    gold = {f"d{i}": rng.sample(nodes, rng.randint(1, 3)) for i in range(rng.randint(5, 15))}
    pred = {d: rng.sample(nodes, rng.randint(0, 3)) for d in gold}
    return edges, nested, gold, pred


@pytest.mark.parametrize("seed", range(8))
def test_matches_naive_recursion(seed):
    edges, _, gold, pred = random_problem(seed)
    assert run(gold, pred, edges)["icm"] == pytest.approx(naive_icm(gold, pred, edges), abs=1e-9)


@pytest.mark.parametrize("seed", range(5))
def test_matches_pyevall(tmp_path, seed):
    """Agreement with the reference implementation to 1e-9 (empty_gold = drop, as it does)."""
    from pyevall.evaluation import PyEvALLEvaluation
    from pyevall.metrics.metricfactory import MetricFactory
    from pyevall.utils.utils import PyEvALLUtils

    edges, nested, gold, pred = random_problem(seed)
    gold_file, pred_file = tmp_path / "gold.json", tmp_path / "pred.json"
    gold_file.write_text(
        json.dumps([{"test_case": "T", "id": d, "value": v} for d, v in gold.items()])
    )
    pred_file.write_text(
        json.dumps([{"test_case": "T", "id": d, "value": v} for d, v in pred.items() if v])
    )
    report = PyEvALLEvaluation().evaluate(
        str(pred_file),
        str(gold_file),
        [MetricFactory.ICM.value, MetricFactory.ICMNorm.value],
        **{
            PyEvALLUtils.PARAM_REPORT: PyEvALLUtils.PARAM_OPTION_REPORT_DATAFRAME,
            PyEvALLUtils.PARAM_HIERARCHY: nested,
        },
    )
    reference = report.df_average.to_dict("records")[0]
    ours = run(gold, pred, edges, empty_gold="drop")
    assert ours["icm"] == pytest.approx(float(reference["ICM"]), abs=1e-9)
    assert ours["icm_norm"] == pytest.approx(float(reference["ICM-Norm"]), abs=1e-9)
