"""Jain et al. (2016) inverse propensities of the labels, from a training gold, for the
propensity-scored ranking metrics (``psp@K``, ``psndcg@K``) as pyxclib computes them
(``compute_inv_propesity``): 1/p_l = 1 + C·(N_l + B)^(−A), C = (ln N − 1)·(B + 1)^A, with N
the training documents and N_l those holding code l.

Why a training gold: a label's propensity is how likely an annotator was to record it, which
the literature estimates from the training set's label frequencies; the test set's own
frequencies would reward a model for the test set's rarities. A code the training set never
holds has N_l = 0 (the highest weight), as in pyxclib's count over the train matrix's columns.
The formula itself is :meth:`hieval.engine.icm.IcmParams.inverse_propensity` (PROP-F's), with
its A and B (config ``comparison.propensity_a``/``propensity_b``, 0.55 and 1.5).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from hieval.engine.icm import IcmParams


@dataclass(frozen=True)
class TrainPropensities:
    """A training gold's document count ``n_docs`` and, per code, the training documents
    holding it (``frequency``), with the propensity parameters ``params``."""

    n_docs: int
    frequency: dict[str, int]
    params: IcmParams

    @classmethod
    def from_gold(cls, train_gold: pl.DataFrame, params: IcmParams) -> TrainPropensities:
        """From a normalised gold table (``doc_id, code``; a null code declares a document
        without codes, which counts in N as a row of pyxclib's label matrix does)."""
        frequency = (
            train_gold.filter(pl.col("code").is_not_null())
            .unique(["doc_id", "code"])
            .group_by("code")
            .agg(pl.len().alias("n"))
        )
        return cls(
            n_docs=train_gold["doc_id"].n_unique(),
            frequency=dict(zip(frequency["code"].to_list(), frequency["n"].to_list(), strict=True)),
            params=params,
        )

    def of(self, labels: Sequence[str]) -> np.ndarray:
        """The inverse propensity of each of ``labels``, in their order."""
        weight = self.params.inverse_propensity
        return np.array(
            [weight(float(self.frequency.get(code, 0)), self.n_docs) for code in labels],
            dtype=np.float64,
        )
