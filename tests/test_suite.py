"""The comparison metrics (LB-*, EB-*, PROP-F, HF) against scikit-learn and naive formulas."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from sklearn.metrics import (
    accuracy_score,
    f1_score,
    hamming_loss,
    jaccard_score,
    precision_score,
    recall_score,
)
from sklearn.preprocessing import MultiLabelBinarizer

from hieval.engine.driver import evaluate
from hieval.engine.icm import IcmParams
from hieval.hierarchy.sources import edge_list_table
from hieval.metrics.suite import suite_rows
from hieval.metrics.tidy import score_all


def problem(seed: int):
    rng = np.random.default_rng(seed)
    edges = {}
    for t in range(4):
        edges[f"T{t}"] = None
        for c in range(3):
            edges[f"T{t}C{c}"] = f"T{t}"
            for leaf in range(int(rng.integers(1, 4))):
                edges[f"T{t}C{c}L{leaf}"] = f"T{t}C{c}"
    table, leaves = edge_list_table(
        pl.DataFrame({"child": list(edges), "parent": list(edges.values())}), "t"
    )
    leaves = sorted(leaves)
    gold = {
        f"d{i}": sorted(rng.choice(leaves, int(rng.integers(0, 4)), replace=False))
        for i in range(30)
    }
    pred = {d: sorted(rng.choice(leaves, int(rng.integers(0, 4)), replace=False)) for d in gold}
    return table, leaves, edges, gold, pred


def frame(labels):
    rows = [(d, c) for d, cs in labels.items() for c in (list(cs) or [None])]
    return pl.DataFrame(rows, schema={"doc_id": pl.String, "code": pl.String}, orient="row")


def ours(table, gold, pred, label_set="observed", n_labels=None):
    params = IcmParams()
    g, p, anc = frame(gold), frame(pred), table.ancestors()
    result = evaluate(g, p, anc, levels=table.levels, evaluated=table.levels[:-1], params=params)
    rows = suite_rows(
        result.nodes,
        result.docs,
        result.item_sums,
        params=params,
        label_set=label_set,
        n_labels=n_labels,
    )
    return {(r["family"], r["metric"]): r["value"] for r in rows.iter_rows(named=True)}


@pytest.mark.parametrize("seed", range(4))
def test_example_and_label_based_match_sklearn(seed):
    table, _, _, gold, pred = problem(seed)
    docs = sorted(gold)
    binarizer = MultiLabelBinarizer().fit([gold[d] for d in docs] + [pred[d] for d in docs])
    y_true = binarizer.transform([gold[d] for d in docs])
    y_pred = binarizer.transform([pred[d] for d in docs])
    got = ours(table, gold, pred)
    assert got["example", "f1"] == pytest.approx(
        f1_score(y_true, y_pred, average="samples", zero_division=1)
    )
    assert got["example", "jaccard"] == pytest.approx(
        jaccard_score(y_true, y_pred, average="samples", zero_division=1)
    )
    assert got["example", "subset_accuracy"] == pytest.approx(accuracy_score(y_true, y_pred))
    assert got["example", "hamming_loss"] == pytest.approx(hamming_loss(y_true, y_pred))
    assert got["label", "f1"] == pytest.approx(
        f1_score(y_true, y_pred, average="macro", zero_division=1)
    )
    assert got["label", "accuracy"] == pytest.approx((y_true == y_pred).mean(axis=0).mean())


@pytest.mark.parametrize("seed", range(4))
def test_example_based_precision_and_recall_match_sklearn_samples(seed):
    """EB-P and EB-R, added to the registry alone: scikit-learn's ``average='samples'`` with
    0/0 = 1 (an item with nothing predicted has precision 1, nothing gold recall 1)."""
    table, _, _, gold, pred = problem(seed)
    pred["d0"], gold["d1"] = [], []  # both zero divisions occur
    pred["d2"], gold["d2"] = [], []  # and an item with nothing to find and nothing found
    docs = sorted(gold)
    binarizer = MultiLabelBinarizer().fit([gold[d] for d in docs] + [pred[d] for d in docs])
    y_true = binarizer.transform([gold[d] for d in docs])
    y_pred = binarizer.transform([pred[d] for d in docs])
    got = ours(table, gold, pred)
    assert got["example", "precision"] == pytest.approx(
        precision_score(y_true, y_pred, average="samples", zero_division=1), abs=1e-12
    )
    assert got["example", "recall"] == pytest.approx(
        recall_score(y_true, y_pred, average="samples", zero_division=1), abs=1e-12
    )
    assert got["example", "precision"] != got["example", "recall"]  # not vacuous


def test_hierarchy_label_set_counts_unseen_labels_as_perfect():
    table, leaves, _, gold, pred = problem(7)
    docs = sorted(gold)
    binarizer = MultiLabelBinarizer(classes=leaves).fit([leaves])
    y_true = binarizer.transform([gold[d] for d in docs])
    y_pred = binarizer.transform([pred[d] for d in docs])
    got = ours(table, gold, pred, "hierarchy", len(leaves))
    assert got["label", "f1"] == pytest.approx(
        f1_score(y_true, y_pred, average="macro", zero_division=1)
    )
    assert got["example", "hamming_loss"] == pytest.approx(hamming_loss(y_true, y_pred))
    assert got["label", "accuracy"] == pytest.approx((y_true == y_pred).mean(axis=0).mean())


@pytest.mark.parametrize("seed", range(3))
def test_propensity_f_and_hf_match_naive_formulas(seed):
    table, _, edges, gold, pred = problem(seed)
    n = len(gold)
    a, b = 0.55, 1.5
    c = (math.log(n) - 1) * (b + 1) ** a

    def inv_p(label):
        n_l = sum(1 for d in gold if label in gold[d])
        return 1 + c * (n_l + b) ** -a

    w_empty = 1 + c * (n + b) ** -a

    def ancestors(label):
        out = set()
        while label is not None:
            out.add(label)
            label = edges[label]
        return out

    prop, hier = [], []
    for d in gold:
        p, g = set(pred[d]), set(gold[d])
        both = sum(inv_p(x) for x in p & g)
        prop.append(
            2
            * (both + w_empty)
            / (sum(inv_p(x) for x in p) + sum(inv_p(x) for x in g) + 2 * w_empty)
        )
        ap = set().union(*(ancestors(x) for x in p)) if p else set()
        ag = set().union(*(ancestors(x) for x in g)) if g else set()
        hier.append(2 * len(ap & ag) / (len(ap) + len(ag)) if ap or ag else 1.0)
    got = ours(table, gold, pred)
    assert got["propensity", "f1"] == pytest.approx(sum(prop) / n)
    assert got["hierarchical", "f1"] == pytest.approx(sum(hier) / n)


def test_score_all_names_every_metric_and_perfect_output_is_perfect():
    table, _, _, gold, _ = problem(1)
    scores = score_all(frame(gold), frame(gold), table.ancestors(), table.levels)
    assert set(scores) == {
        "ICM",
        "ICM-Norm",
        "LB-ACC",
        "LB-F",
        "FPR-macro",
        "FPR-micro",
        "EB-HAMM",
        "EB-JACC",
        "EB-SUBACC",
        "EM",
        "EB-P",
        "EB-R",
        "EB-F",
        "PROP-F",
        "HF",
        "LCA-F",
        "F-flat",
        "F-set",
        "F-CoPHE",
    }
    assert scores["EB-HAMM"] == 0.0
    assert scores["FPR-micro"] == scores["FPR-macro"] == 0.0
    for name in (
        "ICM-Norm",
        "LB-ACC",
        "LB-F",
        "EB-JACC",
        "EB-SUBACC",
        "EM",
        "EB-P",
        "EB-R",
        "EB-F",
        "PROP-F",
        "HF",
        "LCA-F",
        "F-flat",
        "F-set",
        "F-CoPHE",
    ):
        assert scores[name] == pytest.approx(1.0), name
