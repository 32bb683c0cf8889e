"""The ``caml`` convention: Mullenbach et al. 2018, ``evaluation.py`` of
jamesmullenbach/caml-mimic (MIT), written from its definitions (the tests run that file).

- Macro: per label of the label space, ``tp / (predicted + 1e-10)`` (precision),
  ``tp / (gold + 1e-10)`` (recall), ``tp / (union + 1e-10)`` (accuracy), each averaged over
  every label; ``f1_macro`` is the harmonic mean of macro P and macro R (0 when both are 0),
  not the mean of per-label F1 (hieval's ``macro``; its ``macro_hm`` is the same idea over the
  observed labels).
- Micro: the same ratios over the flattened matrix, without guards (NaN on 0/0, as numpy gives).
- ``prec_at_k``, ``rec_at_k``: the K columns numpy's ``argsort`` of the scores puts last,
  reversed; recall over the document's gold count (a document without gold: 0), precision over
  K; each averaged over every document. ``f1_at_k`` is their harmonic mean.
- ``auc_macro``: the mean ROC-AUC of the labels with a positive (and a defined AUC);
  ``auc_micro`` over the flattened matrix, unscored pairs scoring 0.
- ``f1_diag``, ``f1_proc``: ``results_by_type``: codes split by their written form (dot at 3,
  or at 4 for predicted E codes, or 3 characters undotted: diagnosis; dot at 2: procedure),
  micro-F1 of each kind over the documents with a diagnosis in both the gold and the
  predictions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from hieval.conventions.matrix import Matrices

GUARD = 1e-10


def _harmonic(p: float, r: float) -> float:
    """``2pr/(p+r)``, 0 when p + r is 0 (NaN stays NaN: NaN + NaN == 0 is false)."""
    return 0.0 if p + r == 0 else 2 * (p * r) / (p + r)


def _ratio(num: float, den: float) -> float:
    """``num / den`` as numpy divides (NaN or inf, without a warning)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float64(num) / np.float64(den))


def set_metrics(y: np.ndarray, yhat: np.ndarray) -> dict[str, float]:
    """``acc/prec/rec/f1`` ``_macro`` and ``_micro`` of decided ``yhat`` against ``y``."""
    tp = (y & yhat).sum(axis=0).astype(float)
    union = (y | yhat).sum(axis=0).astype(float)
    predicted = yhat.sum(axis=0).astype(float)
    gold = y.sum(axis=0).astype(float)
    with np.errstate(invalid="ignore"):
        macro = {
            "acc": float(np.mean(tp / (union + GUARD))),
            "prec": float(np.mean(tp / (predicted + GUARD))),
            "rec": float(np.mean(tp / (gold + GUARD))),
        }
    macro["f1"] = _harmonic(macro["prec"], macro["rec"])
    micro = {
        "acc": _ratio(tp.sum(), union.sum()),
        "prec": _ratio(tp.sum(), predicted.sum()),
        "rec": _ratio(tp.sum(), gold.sum()),
    }
    micro["f1"] = _harmonic(micro["prec"], micro["rec"])
    out = {f"{name}_macro": value for name, value in macro.items()}
    out.update({f"{name}_micro": value for name, value in micro.items()})
    return out


def at_k(order: np.ndarray, y: np.ndarray, k: int) -> tuple[float, float]:
    """``(prec_at_k, rec_at_k)`` from ``order``, each row's columns as CAML sorts them
    (numpy's default ``argsort`` of the scores, reversed, so ties fall where that sort puts
    them): its first K columns are the top K."""
    top = order[:, :k]
    hits = np.take_along_axis(y, top, axis=1).sum(axis=1).astype(float)
    gold = y.sum(axis=1).astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        recall = hits / gold
    recall[np.isnan(recall)] = 0.0
    precision = hits / top.shape[1] if top.shape[1] else np.full(len(hits), np.nan)
    return float(np.mean(precision)), float(np.mean(recall))


def caml_metrics(m: Matrices, ks: Sequence[int]) -> dict[str, float]:
    """``all_metrics`` of the matrices: set metrics, and with scores the @K and AUC ones (AUC
    only for more than one document, as CAML)."""
    out = set_metrics(m.y, m.yhat)
    if m.raw is None:
        return out
    order = np.argsort(m.raw)[:, ::-1]  # one sort for every K
    for k in ks:
        precision, recall = at_k(order, m.y, k)
        out[f"rec_at_{k}"] = recall
        out[f"prec_at_{k}"] = precision
        out[f"f1_at_{k}"] = _harmonic_nan(precision, recall)
    if m.raw.shape[0] > 1:
        out.update(m.aucs)
    return out


def _harmonic_nan(p: float, r: float) -> float:
    """``2pr/(p+r)`` without CAML's zero case (its ``f1_at_k`` has none): NaN on 0/0."""
    return _ratio(2 * (p * r), p + r)


# ---- results_by_type -------------------------------------------------------------------------

DIAG, PROC = "diag", "proc"


def code_kind(code: str, *, gold: bool) -> str | None:
    """The kind ``results_by_type`` gives a code by its written form (None: neither). A dotted
    E code (``E849.7``) is a diagnosis when predicted but neither in the gold: the reference
    checks for the E code's dot at 4 on the predictions only, and so does this."""
    if not code:
        return None
    dot = code.find(".")
    if dot < 0:
        return DIAG if len(code) == 3 or (code[0] == "E" and len(code) == 4) else None
    if dot == 3 or (not gold and code[0] == "E" and dot == 4):
        return DIAG
    return PROC if dot == 2 else None


def by_type(gold: pl.DataFrame, decided: pl.DataFrame) -> dict[str, float]:
    """``f1_diag`` and ``f1_proc``: micro-F1 of each kind over the documents that have a
    diagnosis code in both the gold and the predictions (``results_by_type``'s ``hadm_ids``)."""
    kinds = {}
    for name, frame in (("gold", gold), ("pred", decided)):
        frame = frame.filter(pl.col("code").is_not_null() & (pl.col("code") != ""))
        kind = pl.Series(
            [code_kind(c, gold=name == "gold") for c in frame["code"]], dtype=pl.String
        )
        kinds[name] = frame.select("doc_id", "code").with_columns(kind=kind).unique()
    with_diag = [set(f.filter(pl.col("kind") == DIAG)["doc_id"]) for f in kinds.values()]
    docs = pl.Series(sorted(with_diag[0] & with_diag[1]), dtype=pl.String)
    out = {}
    for kind in (DIAG, PROC):
        g, p = (
            f.filter((pl.col("kind") == kind) & pl.col("doc_id").is_in(docs.implode()))
            for f in kinds.values()
        )
        tp = g.join(p, on=["doc_id", "code"], maintain_order="none").height
        precision, recall = _ratio(tp, p.height), _ratio(tp, g.height)
        out[f"f1_{kind}"] = _harmonic(precision, recall)
    return out
