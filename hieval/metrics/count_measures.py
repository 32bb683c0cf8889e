"""The measures of the count families (flat, set-based, CoPHE) from TP, FP and FN: declared
once, used for every average, for the reported value and for every bootstrap and permutation
replicate (:mod:`hieval.metrics.prf`, :mod:`hieval.metrics.uncertainty`).

Imports nothing of :mod:`hieval.metrics.registry`, which derives its count-family rows from
:data:`COUNT_MEASURES`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hieval.metrics.arithmetic import divide


@dataclass(frozen=True)
class CountMeasure:
    """A measure of the count families computed from TP, FP and FN.

    Its one declaration serves every average and both the reported value and the replicates:
    ``micro`` applies it to the counts summed over a level's nodes, ``macro`` averages it over
    the nodes (per-node counts), ``macro_hm`` applies ``of_pr`` to macro precision and macro
    recall (for F-beta the weighted harmonic mean; ``None`` for P and R themselves, whose
    ``macro_hm`` row is their ``macro`` one). Where ``denominator`` is 0 the measure is
    undefined (no prediction, no gold, neither) and is 0 by convention.
    """

    name: str
    formula: str
    numerator: Callable
    denominator: Callable
    of_pr: Callable | None = None

    def __call__(self, tp, fp, fn):
        return divide(self.numerator(tp, fp, fn), self.denominator(tp, fp, fn))


def f_beta(beta: float) -> CountMeasure:
    """F-beta = (1 + b²)TP / ((1 + b²)TP + FP + b²FN), b = ``beta``; of macro P and R,
    (1 + b²)PR / (b²P + R). F1 (b = 1) is ``2TP / (2TP + FP + FN)`` and ``2PR / (P + R)``, with
    the same float64 operations as those formulas (1 + 1 = 2, 1·x = x exactly)."""
    b2 = float(beta) ** 2
    name = f"f{beta:g}"
    c = f"{1 + b2:g}"
    label = f"{c}TP / ({c}TP + FP + {b2:g}FN)" if b2 != 1 else "2TP / (2TP + FP + FN)"
    return CountMeasure(
        name=name,
        formula=label,
        numerator=lambda tp, fp, fn: (1 + b2) * tp,
        denominator=lambda tp, fp, fn: (1 + b2) * tp + fp + (fn if b2 == 1 else b2 * fn),
        of_pr=lambda p, r: divide((1 + b2) * p * r, (p if b2 == 1 else b2 * p) + r),
    )


#: The measures of the count families (flat, set-based, CoPHE), in the tidy table's order: the
#: one place their formulas are written. A new measure here is a new row under every average,
#: in the tidy table, ``summary.csv``, the intervals and the comparisons.
COUNT_MEASURES: dict[str, CountMeasure] = {
    m.name: m
    for m in (
        CountMeasure(
            "precision", "TP / (TP + FP)", lambda tp, fp, fn: tp, lambda tp, fp, fn: tp + fp
        ),
        CountMeasure("recall", "TP / (TP + FN)", lambda tp, fp, fn: tp, lambda tp, fp, fn: tp + fn),
        f_beta(1),
        f_beta(2),
    )
}

#: The one F1 (tuning's sweeps, the frequency bands' F1 use it too).
F1 = COUNT_MEASURES["f1"]

#: Precision, recall and F1: the measures the per-code and per-group tables show (error
#: analysis), a subset of :data:`COUNT_MEASURES` so their formulas stay the one declaration.
PRF_MEASURES: dict[str, CountMeasure] = {
    n: COUNT_MEASURES[n] for n in ("precision", "recall", "f1")
}
