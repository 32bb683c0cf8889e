"""The metrics the field uses that hieval lacked (issue 33), against independent oracles:
exact match against scikit-learn's ``accuracy_score`` on multilabel indicator matrices, FPR
micro and macro against scikit-learn's ``multilabel_confusion_matrix`` and a naive count, and
the proof that Kiritchenko et al.'s hierarchical P/R/F (HiClass's ``hiclass.metrics``) is the
set-based ``overall`` micro row (and its per-example mean the ``hierarchical`` HF row), so
that it is documented instead of added."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from sklearn.metrics import accuracy_score, multilabel_confusion_matrix
from sklearn.preprocessing import MultiLabelBinarizer
from test_suite import frame, problem

from hieval.engine.driver import evaluate
from hieval.engine.icm import IcmParams
from hieval.hierarchy.sources import edge_list_table
from hieval.metrics.prf import metrics_table
from hieval.metrics.registry import OVERALL
from hieval.metrics.suite import suite_rows


def suite_values(table, gold, pred, label_set="observed", n_labels=None) -> dict:
    """hieval's suite rows by (family, average, metric)."""
    params = IcmParams()
    result = evaluate(
        frame(gold), frame(pred), table.ancestors(), levels=table.levels,
        evaluated=table.levels[:-1], params=params,
    )  # fmt: skip
    rows = suite_rows(
        result.nodes, result.docs, result.item_sums, params=params, label_set=label_set,
        n_labels=n_labels,
    )  # fmt: skip
    return {
        (r["family"], r["average"], r["metric"]): r["value"] for r in rows.iter_rows(named=True)
    }


def indicator(gold: dict, pred: dict, classes=None) -> tuple[np.ndarray, np.ndarray]:
    """Multilabel indicator matrices (documents x labels) of the gold and the predictions,
    over ``classes`` or the labels seen in either (scikit-learn's binarizer fitted on both)."""
    docs = sorted(gold)
    binarizer = MultiLabelBinarizer(classes=classes)
    binarizer.fit([gold[d] for d in docs] + [pred[d] for d in docs] if classes is None else [])
    return (
        binarizer.transform([gold[d] for d in docs]),
        binarizer.transform([pred[d] for d in docs]),
    )


# -- exact match ------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_exact_match_matches_sklearn_accuracy_score(seed):
    """exact_match is scikit-learn's accuracy_score on multilabel indicator matrices (subset
    accuracy): the share of documents whose decided set is the gold; a document with nothing
    gold and nothing predicted matches."""
    table, _, _, gold, pred = problem(seed)
    for d in ("d0", "d1", "d2"):  # exact matches occur (random sets rarely match)
        pred[d] = list(gold[d])
    pred["d3"], gold["d3"] = [], []
    y_true, y_pred = indicator(gold, pred)
    got = suite_values(table, gold, pred)
    expected = accuracy_score(y_true, y_pred)
    assert got["example", "mean", "exact_match"] == pytest.approx(expected, abs=1e-15)
    assert 0 < expected < 1  # not vacuous
    assert got["example", "mean", "exact_match"] == got["example", "mean", "subset_accuracy"]


def test_exact_match_hand_worked():
    """Three documents: {a} for {a} matches, {a, b} for {a} does not, {} for {} matches: 2/3."""
    edges = pl.DataFrame({"child": ["T", "a", "b"], "parent": [None, "T", "T"]})
    table, _ = edge_list_table(edges, "t")
    gold = {"x": ["a"], "y": ["a"], "z": []}
    pred = {"x": ["a"], "y": ["a", "b"], "z": []}
    assert suite_values(table, gold, pred)["example", "mean", "exact_match"] == 2 / 3


# -- false positive rate ----------------------------------------------------------------------


def naive_fpr(gold: dict, pred: dict, labels) -> tuple[float, float]:
    """Micro and macro FPR by counting (document, label) cells one by one: a cell is a
    negative when the label is not gold for the document, a false positive when it is also
    predicted. Macro: the mean over labels of FP / negatives (0 for a label gold everywhere)."""
    fp_all = neg_all = 0
    per_label = []
    for label in labels:
        fp = sum(1 for d in gold if label not in gold[d] and label in pred[d])
        neg = sum(1 for d in gold if label not in gold[d])
        fp_all, neg_all = fp_all + fp, neg_all + neg
        per_label.append(fp / neg if neg else 0.0)
    return fp_all / neg_all, sum(per_label) / len(per_label)


@pytest.mark.parametrize("seed", range(4))
def test_fpr_matches_sklearn_confusion_matrix_and_naive_count(seed):
    """FPR micro and macro over the observed label set (labels in the gold or the
    predictions) against scikit-learn's multilabel_confusion_matrix and a naive count; with
    ``label_set: hierarchy`` the label space is every leaf of the tree (unseen leaves: all TN)."""
    table, leaves, _, gold, pred = problem(seed)
    for labels in (gold, pred):  # a leaf nobody holds: the label spaces differ
        for d in labels:
            labels[d] = [c for c in labels[d] if c != leaves[0]]
    got = suite_values(table, gold, pred)
    y_true, y_pred = indicator(gold, pred)
    cm = multilabel_confusion_matrix(y_true, y_pred)  # per label [[TN, FP], [FN, TP]]
    tn, fp = cm[:, 0, 0], cm[:, 0, 1]
    assert got["label", "micro", "fpr"] == pytest.approx(fp.sum() / (fp + tn).sum(), abs=1e-15)
    assert got["label", "macro", "fpr"] == pytest.approx(np.mean(fp / (fp + tn)), abs=1e-15)
    observed = sorted({c for d in gold for c in [*gold[d], *pred[d]]})
    micro, macro = naive_fpr(gold, pred, observed)
    assert got["label", "micro", "fpr"] == pytest.approx(micro, abs=1e-15)
    assert got["label", "macro", "fpr"] == pytest.approx(macro, abs=1e-15)
    assert got["label", "micro", "fpr"] != got["label", "macro", "fpr"]  # not one number

    wide = suite_values(table, gold, pred, "hierarchy", len(leaves))
    micro, macro = naive_fpr(gold, pred, leaves)
    assert wide["label", "micro", "fpr"] == pytest.approx(micro, abs=1e-15)
    assert wide["label", "macro", "fpr"] == pytest.approx(macro, abs=1e-15)
    assert wide["label", "macro", "fpr"] < got["label", "macro", "fpr"]  # an all-TN label


def test_fpr_hand_worked():
    """Labels a, b over three documents. a: gold in x, predicted in x and y: FP 1 of 2
    negatives (y, z). b: gold in every document: no negatives, FPR 0 by convention.
    Micro 1 / 2; macro (1/2 + 0) / 2 = 1/4."""
    edges = pl.DataFrame({"child": ["T", "a", "b"], "parent": [None, "T", "T"]})
    table, _ = edge_list_table(edges, "t")
    gold = {"x": ["a", "b"], "y": ["b"], "z": ["b"]}
    pred = {"x": ["a"], "y": ["a", "b"], "z": []}
    got = suite_values(table, gold, pred)
    assert got["label", "micro", "fpr"] == 1 / 2
    assert got["label", "macro", "fpr"] == 1 / 4


# -- Kiritchenko et al.'s hierarchical P/R/F is an existing row ---------------------------------


def kiritchenko_problem(seed: int):
    """A tree whose labels sit at different depths (leaves at depth 2 and 3), random gold and
    predictions (never empty: HiClass rejects an empty label list)."""
    rng = np.random.default_rng(seed)
    edges = {}
    for t in range(3):
        edges[f"T{t}"] = None
        for c in range(3):
            edges[f"T{t}C{c}"] = f"T{t}"
            for leaf in range(int(rng.integers(0, 3))):
                edges[f"T{t}C{c}L{leaf}"] = f"T{t}C{c}"
    parents = set(edges.values())
    labels = sorted(n for n in edges if n not in parents)
    table, _ = edge_list_table(
        pl.DataFrame({"child": list(edges), "parent": list(edges.values())}), "t"
    )
    gold = {
        f"d{i}": sorted(rng.choice(labels, int(rng.integers(1, 4)), replace=False))
        for i in range(40)
    }
    pred = {d: sorted(rng.choice(labels, int(rng.integers(1, 4)), replace=False)) for d in gold}
    for d in ("d0", "d1"):
        pred[d] = list(gold[d])
    return table, edges, gold, pred


def hiclass_paths(labels: dict, edges: dict) -> list:
    """HiClass's multi-label input: per document, its labels' paths from the top (padded with
    "" to one depth and one number of labels)."""

    def path(label):
        out = []
        while label is not None:
            out.insert(0, label)
            label = edges[label]
        return out

    rows = [[path(c) for c in labels[d]] for d in sorted(labels)]
    width = max(len(p) for row in rows for p in row)
    count = max(len(row) for row in rows)
    return [
        [p + [""] * (width - len(p)) for p in row] + [[""] * width] * (count - len(row))
        for row in rows
    ]


@pytest.mark.filterwarnings("ignore:F-score is ill-defined")  # a document without overlap: 0
@pytest.mark.parametrize("seed", range(3))
def test_kiritchenko_hierarchical_prf_is_set_based_overall_micro(seed):
    """Kiritchenko et al.'s hP = Σ|A(P) ∩ A(G)| / Σ|A(P)|, hR = Σ|A(P) ∩ A(G)| / Σ|A(G)|
    and hF (label sets augmented with their ancestors, the root excluded), as HiClass's
    ``hiclass.metrics.precision/recall/f1(average='micro')`` compute them, are the set-based
    family's ``overall`` micro P, R and F1 with every level below the root evaluated; HiClass's
    ``average='macro'`` F1 (the per-example mean) is the ``hierarchical`` HF row."""
    import hiclass.metrics as hiclass_metrics  # the test extra's; never skipped

    table, edges, gold, pred = kiritchenko_problem(seed)
    result = evaluate(
        frame(gold), frame(pred), table.ancestors(), levels=table.levels,
        evaluated=table.levels[:-1], params=IcmParams(),
    )  # fmt: skip
    tidy = metrics_table(result.nodes, "m")
    got = {
        (r["family"], r["level"], r["average"], r["metric"]): r["value"]
        for r in tidy.iter_rows(named=True)
    }
    y_true, y_pred = hiclass_paths(gold, edges), hiclass_paths(pred, edges)
    for ours, theirs in (("precision", "precision"), ("recall", "recall"), ("f1", "f1")):
        expected = getattr(hiclass_metrics, theirs)(y_true, y_pred, average="micro")
        assert got["set", OVERALL, "micro", ours] == pytest.approx(expected, abs=1e-12), ours
    assert got["set", OVERALL, "micro", "precision"] != got["set", OVERALL, "micro", "recall"]
    per_example = hiclass_metrics.f1(y_true, y_pred, average="macro")
    hf = suite_values(table, gold, pred)["hierarchical", "mean", "f1"]
    assert hf == pytest.approx(per_example, abs=1e-12)
    # The flat row is not the hierarchical one (the test could tell them apart).
    assert got["flat", "leaf", "micro", "f1"] != pytest.approx(got["set", OVERALL, "micro", "f1"])
