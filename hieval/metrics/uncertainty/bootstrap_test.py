"""The paired bootstrap test of a comparison whose randomization test is not run: ROC-AUC at a
level above :data:`~hieval.metrics.uncertainty.auc.AUC_MAX_SCORED_PAIRS` scored pairs
(issue 36), where each of the 999 permutations would pool both models' scored cells (314M
for two MIMIC-IV-sized matrices) and only the bootstrap's replicates exist
(:mod:`hieval.metrics.uncertainty.auc_blocks`).

**The test.** The two models' replicates come from the same Poisson weights (every model is
resampled with the same documents), so Δ*_b = A*_b − B*_b are replicates of the paired
difference, the very ones the comparison's interval is read from. From them, the
bootstrap's standard error of the difference and a two-sided z-test:

    se = sd(Δ*_1 … Δ*_B) (n − 1; the replicates where the row is defined),
    p  = 2 · Φ(−|Δ| / se),

Δ the observed difference of the point estimates (exact). This is the bootstrap test of
pROC's ``roc.test(method = "bootstrap")`` (Robin et al. 2011, BMC Bioinformatics 12:77;
Hanley & McNeil 1983 for the form), the usual paired test of two ROC-AUCs besides DeLong's
(DeLong et al. 1988), which is the same z-test with an analytic variance. AUC is a
(two-sample) U-statistic and asymptotically normal; at the sizes where the cap applies
(millions of scored pairs, thousands of documents) the normal approximation is the least of
the errors below, except in the far tail: z beyond 6 or so (p < 1e-9) says "far beyond every
replicate", not how far; beyond z ≈ 38 the normal tail underflows, and p is kept at the
smallest positive double (:data:`SMALLEST`) rather than 0, which no test of a finite sample
can give. Where Δ = 0 p is 1; where se = 0 and Δ ≠ 0, :data:`SMALLEST`.

**Why not count replicates.** The tail-count forms — the inversion of the percentile
interval, p = min(1, 2 (1 + min(#{Δ* ≤ 0}, #{Δ* ≥ 0})) / (1 + B)) (Efron & Tibshirani 1993),
or the shifted p = (1 + #{|Δ* − Δ| ≥ |Δ|}) / (1 + B) (Berg-Kirkpatrick et al. 2012) — cannot
go below 2 / (B + 1) or 1 / (B + 1): with the 200 replicates of the issue's target and 10
pairs of models, Holm's adjustment would lift every AUC row to at least 10 × 2 / 201 ≈ 0.1,
so no AUC difference could ever be significant, however large. The z-test has no such
floor. Its standard error is also unaffected by the shift that centres the interval of
macro AUC (:func:`~hieval.metrics.uncertainty.tables.label_set_rows`): the test is centred on
the estimate, as that interval is.

**Its error, stated.** (1) Monte Carlo: se from B replicates has a relative standard error of
about 1 / √(2 (B − 1)) (5 % at B = 200), so z = 3 reads as 2.85–3.15. (2) Binning: a micro
AUC replicate above the cap is within ``bound`` of its exact value
(:class:`~hieval.metrics.uncertainty.auc_blocks.AucReplicates`), so Δ*_b is within
e_b = bound_A,b + bound_B,b of the exact replicate's difference; the sd of the exact
replicates differs from the binned one by at most ε = √(Σ e_b² / (B − 1)) (the triangle
inequality on the centred vectors). ``p_value`` is the conservative end, computed with
se + ε: never below the p the exact replicates would give. The log reports, per pair, the
largest width of the range [p(se − ε), p(se + ε)] in which that p lies. Macro AUC is exact
(ε = 0).

**Holm.** Bootstrap-tested rows join the same family as the randomization-tested rows of
their metric (the pairs of models, per family, level, average and metric): Holm's
adjustment holds for any valid p-values, whatever their dependence or the test that gave
them. The comparisons table names each row's test (``test``: :data:`RANDOMIZATION` or
:data:`BOOTSTRAP`); a bootstrap-tested row has no ``permutations`` (null).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

#: ``test`` of a comparison row: the paired approximate randomization test ...
RANDOMIZATION = "randomization"
#: ... or this module's paired bootstrap z-test (ROC-AUC above the cap).
BOOTSTRAP = "bootstrap"
#: The smallest p reported: the normal tail underflows to 0 beyond z ≈ 38.
SMALLEST = float(np.finfo(np.float64).tiny)


@dataclass(frozen=True)
class BootstrapP:
    """Per row: ``p`` (the conservative end: se + ε), ``lowest`` (se − ε: the smallest p
    the exact replicates could give), ``se`` and ``epsilon``."""

    p: np.ndarray
    lowest: np.ndarray
    se: np.ndarray
    epsilon: np.ndarray


def _z_p(observed: np.ndarray, se: np.ndarray) -> np.ndarray:
    """2 Φ(−|Δ| / se), at least :data:`SMALLEST`: 1 where Δ = 0, NaN where se is."""
    gap = np.abs(observed)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.maximum(2.0 * ndtr(-gap / se), SMALLEST)
    p = np.where(gap == 0, 1.0, p)
    return np.where(np.isnan(se) | np.isnan(observed), np.nan, p)


def bootstrap_p(
    differences: np.ndarray, observed: np.ndarray, *, error: np.ndarray | None = None
) -> BootstrapP:
    """Two-sided p-values of the paired bootstrap z-test, per column of ``differences``
    (replicates × rows of Δ*_b, NaN where the row is undefined in the replicate), for the
    ``observed`` differences Δ; ``error`` (same shape, ≥ 0) bounds each replicate's
    difference's error (binned micro AUC; None: exact). NaN where fewer than two replicates
    are defined."""
    differences = np.asarray(differences, dtype=np.float64)
    observed = np.asarray(observed, dtype=np.float64)
    defined = ~np.isnan(differences)
    count = defined.sum(axis=0)
    with warnings.catch_warnings():  # a column with fewer than two replicates: NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        se = np.nanstd(differences, axis=0, ddof=1)
    se = np.where(count >= 2, se, np.nan)
    if error is None:
        epsilon = np.zeros_like(se)
    else:
        squared = np.where(defined, np.square(np.nan_to_num(error, nan=0.0)), 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            epsilon = np.sqrt(squared.sum(axis=0) / (count - 1))
        epsilon = np.where(count >= 2, epsilon, np.nan)
    return BootstrapP(
        p=_z_p(observed, se + epsilon),
        lowest=_z_p(observed, np.maximum(se - epsilon, 0.0)),
        se=se,
        epsilon=epsilon,
    )
