"""The ``edin`` and ``edin_mullenbach`` conventions against Edin et al.'s ``src/metrics.py``
(JoakimEdin/medical-coding-reproducibility), reimplemented here from that code with plain loops
and scikit-learn (torch is no test dependency): its ``reproducibility`` metric configuration,
a ``MetricCollection`` with the test split's code indices.

Written reasons for the differences that remain with the torch code itself:
- torch computes in float32, so its values differ from these float64 ones by ~1e-7;
- torch's sort and topk leave the order of tied scores unspecified; hieval and this oracle
  order ties by code (label index).
"""

from __future__ import annotations

import numpy as np
import pytest
from conventions_fixtures import THRESHOLD, assert_same, dense, observed, rows_of, zoo
from sklearn.metrics import auc, roc_curve

from hieval.conventions.table import model_rows, strictly_above

PRECISION_KS, RECALL_KS = (1, 5, 8, 15), (10, 15)


def _topk(row: np.ndarray, k: int) -> list[int]:
    return sorted(range(len(row)), key=lambda j: (-row[j], j))[:k]


def batch_metrics(logits: np.ndarray, targets: np.ndarray) -> dict[str, float]:
    """The batch-updated metrics of one (already filtered or not) batch."""
    out = {}
    pred = (logits > THRESHOLD).astype(float)  # Edin et al.: logits > threshold, strict
    n_docs, n_codes = targets.shape
    tp = [sum(pred[i, j] * targets[i, j] for i in range(n_docs)) for j in range(n_codes)]
    fp = [sum(pred[i, j] * (1 - targets[i, j]) for i in range(n_docs)) for j in range(n_codes)]
    fn = [sum((1 - pred[i, j]) * targets[i, j] for i in range(n_docs)) for j in range(n_codes)]
    tn = [
        sum((1 - pred[i, j]) * (1 - targets[i, j]) for i in range(n_docs)) for j in range(n_codes)
    ]
    tp, fp, fn, tn = map(np.array, (tp, fp, fn, tn))
    out["f1_micro"] = tp.sum() / (tp.sum() + 0.5 * (fp.sum() + fn.sum()) + 1e-10)
    out["f1_macro"] = np.mean(tp / (tp + 0.5 * (fp + fn) + 1e-10))
    out["recall_micro"] = tp.sum() / (tp.sum() + fn.sum() + 1e-10)
    out["recall_macro"] = np.mean(tp / (tp + fn + 1e-10))
    out["precision_micro"] = tp.sum() / (tp.sum() + fp.sum() + 1e-10)
    out["precision_macro"] = np.mean(tp / (tp + fp + 1e-10))
    out["fpr_micro"] = fp.sum() / (fp.sum() + tn.sum() + 1e-10)
    out["fpr_macro"] = np.mean(fp / (fp + tn + 1e-10))
    out["exact_match_ratio"] = np.mean([all(pred[i] == targets[i]) for i in range(n_docs)])
    for k in PRECISION_KS:
        out[f"precision@{k}"] = np.mean(
            [sum(targets[i, j] for j in _topk(logits[i], k)) / (k + 1e-10) for i in range(n_docs)]
        )
    for k in RECALL_KS:
        out[f"recall@{k}"] = np.mean(
            [
                sum(targets[i, j] for j in _topk(logits[i], k)) / (targets[i].sum() + 1e-10)
                for i in range(n_docs)
            ]
        )
    ap, rp = [], []
    for i in range(n_docs):
        order = _topk(logits[i], n_codes)
        hits = np.cumsum([targets[i, j] for j in order])
        n = int(targets[i].sum())
        with np.errstate(all="ignore"):
            rp.append(hits[n - 1] / n if n else np.nan)
            precisions = [hits[r] / (r + 1) for r in range(n_codes)]
            ap.append(
                sum(p * targets[i, j] for p, j in zip(precisions, order, strict=True)) / n
                if n
                else np.nan
            )
    out["map"] = np.mean(ap)
    out["precision@recall"] = np.mean(rp)
    return out


def auc_metrics(logits: np.ndarray, targets: np.ndarray) -> dict[str, float]:
    fpr, tpr, _ = roc_curve(targets.ravel(), logits.ravel())
    per_code = []
    for j in range(targets.shape[1]):
        if targets[:, j].sum() == 0:
            continue
        with np.errstate(all="ignore"):
            f, t, _ = roc_curve(targets[:, j], logits[:, j])
        if np.any(np.isnan(f)) or np.any(np.isnan(t)):
            continue
        per_code.append(auc(f, t))
    return {"auc_micro": auc(fpr, tpr), "auc_macro": np.mean(per_code)}


def edin_oracle(logits, targets, *, filter_codes: bool) -> dict[str, float]:
    """MetricCollection.compute of the test split: filter_batch (the codes with a positive,
    then the documents with a target among them) for the batch metrics; the AUCs on the whole
    matrices (its last update recomputes them unfiltered)."""
    if filter_codes:
        codes = np.flatnonzero(targets.sum(axis=0) > 0)
        t, lg = targets[:, codes], logits[:, codes]
        keep = t.sum(axis=1) > 0
        out = batch_metrics(lg[keep], t[keep])
    else:
        out = batch_metrics(logits, targets)
    out.update(auc_metrics(logits, targets))
    if filter_codes:
        return out
    return {f"{name}_mullenbach": value for name, value in out.items()}


def ours(gold, decided, scores, convention, labels=None):
    table = model_rows(
        "m",
        gold=gold,
        decided=decided,
        scores=scores,
        tidy=None,
        conventions=[convention],
        ks=(5,),
        label_space=labels,
        label_space_name=None if labels is None else "codes.txt",
        threshold=THRESHOLD,
    )
    return rows_of(table, convention)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("convention", ["edin", "edin_mullenbach"])
def test_edin_rows_are_its_metrics(seed, ties, convention):
    gold, decided, scores = zoo(seed, ties=ties, documents=30)
    labels = observed(gold, decided)
    _, y, _, raw = dense(gold, decided, scores, labels)
    expected = edin_oracle(raw, y, filter_codes=convention == "edin")
    assert_same(ours(gold, decided, scores, convention), expected)


def test_edin_decides_strictly_above_the_threshold():
    """A score exactly at the threshold is predicted by hieval (>=) and not by Edin et al. (>)."""
    gold, decided, scores = zoo(5, documents=30)
    at = decided.filter(decided["score"] == THRESHOLD)
    assert at.height  # the fixture has such scores
    assert strictly_above(decided, THRESHOLD).height == decided.height - at.height
    labels = sorted({*observed(gold, decided), "001.0", "V01.1"})
    _, y, _, raw = dense(gold, decided, scores, labels)
    expected = edin_oracle(raw, y, filter_codes=False)
    assert_same(ours(gold, decided, scores, "edin_mullenbach", labels=labels), expected)
