"""Intervals of the rows averaged over the labels a test set contains (macro averages, LB-*,
EB-HAMM with label_set observed): centred on the estimate, and why.

A bootstrap replicate holds ~63 % of the distinct documents, so it reaches fewer labels: on a
demo-like population (many rare codes, a model that rarely gets them right) the replicates of
LB-F sit above the estimate and the percentile interval misses it. The simulation draws test
sets from a known population and checks which interval covers the expected value of the
estimate (its estimand) — computed here by brute force over many test sets.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from test_uncertainty import flat_units

from hieval.engine.keys import LEAF
from hieval.metrics.uncertainty.replicates import replicate_values
from hieval.metrics.uncertainty.settings import Settings
from hieval.metrics.uncertainty.tables import (
    CENTRED,
    PERCENTILE,
    bootstrap_matrix,
    interval_bounds,
    interval_rows,
    label_set_rows,
)
from hieval.metrics.uncertainty.units import Layout
from hieval.metrics.uncertainty.weights import doc_keys

LB_F = ("label", LEAF, "macro", "f1")
MACRO_F1 = ("flat", LEAF, "macro", "f1")
MICRO_F1 = ("flat", LEAF, "micro", "f1")


class RarePopulation:
    """The demo's distant guesser in small: Zipf-like gold prevalences over ``codes`` codes, a
    model that finds 60 % of the gold codes and adds false codes drawn from a label space
    ``spread`` codes wider, so most of them are labels the test set holds once (F1 0)."""

    def __init__(self, codes: int, docs: int, spread: int = 4000):
        self.g = np.concatenate([0.3 / np.arange(1, codes + 1) ** 0.8, np.zeros(spread)])
        self.codes, self.docs = codes + spread, docs
        self.b = 2.0 / self.codes  # two false codes per document

    def draw(self, rng):
        gold = (rng.random((self.docs, self.codes)) < self.g).astype(np.int64)
        draw = rng.random(gold.shape)
        pred = np.where(gold == 1, draw < 0.6, draw < self.b).astype(np.int64)
        return gold, pred


def flat_layout(n_docs: int, n_codes: int) -> Layout:
    """A flat layout whose node names sort as their numbers (five digits)."""
    return Layout(
        doc_ids=pl.Series("doc_id", [f"d{i:06d}" for i in range(n_docs)]),
        levels=(),
        nodes={LEAF: pl.Series("node", [f"c{j:05d}" for j in range(n_codes)])},
        split_kinds=None,
    )


def test_which_rows_are_centred():
    keys = [
        MICRO_F1,
        MACRO_F1,
        ("set", "overall", "macro_hm", "precision"),
        ("cophe", "e0", "macro", "tp"),  # a sum, whatever its average
        LB_F,
        ("example", LEAF, "mean", "hamming_loss"),  # divides by the label count
        ("example", LEAF, "mean", "f1"),
        ("icm", LEAF, "mean", "icm"),
    ]
    observed = label_set_rows(keys, "observed")
    assert observed.tolist() == [False, True, True, False, True, True, False, False]
    # Over the hierarchy's leaves the label count is fixed: only the macro averages remain.
    assert label_set_rows(keys, "hierarchy").tolist() == [
        False, True, True, False, False, False, False, False,
    ]  # fmt: skip


def test_centred_bounds_are_the_percentile_bounds_moved_by_the_median_shift():
    replicates = np.array([[0.30, 0.1], [0.32, 0.2], [0.34, 0.3], [0.36, 0.4], [0.38, 0.5]])
    value = np.array([0.25, 0.3])
    low, high = interval_bounds(replicates, value, np.array([True, False]), 0.5)
    # Quartiles 0.32 and 0.36, median 0.34: moved down by 0.09; the second column untouched.
    assert low == pytest.approx([0.23, 0.2]) and high == pytest.approx([0.27, 0.4])


def test_demo_like_label_f1_interval_contains_its_estimate():
    population = RarePopulation(codes=300, docs=300)
    layout = flat_layout(population.docs, population.codes)
    gold, pred = population.draw(np.random.default_rng(4))
    units = flat_units(gold, pred, layout)
    keys = [MICRO_F1, MACRO_F1, LB_F]
    value = replicate_values([(units, np.ones((1, population.docs)))], layout)
    tidy = _tidy(keys, [value[k][0] for k in keys])
    settings = Settings(bootstrap=400, seed=1)
    replicates = bootstrap_matrix(
        units, keys, layout=layout, weights_key=doc_keys(layout.doc_ids.to_list()),
        settings=settings,
    )  # fmt: skip
    rows = interval_rows(tidy, replicates, settings, label_set="observed")
    assert rows["method"].to_list() == [PERCENTILE, CENTRED, CENTRED]
    # The percentile interval of LB-F misses the estimate (the case the centring is for) ...
    low, high = np.quantile(replicates[:, 2], [0.025, 0.975])
    assert not low <= value[LB_F][0] <= high
    # ... the centred one surrounds it, as wide as the percentile one.
    lb = rows.row(2, named=True)
    assert lb["low"] < lb["value"] < lb["high"]
    assert lb["high"] - lb["low"] == pytest.approx(high - low)
    micro = rows.row(0, named=True)
    assert (micro["low"], micro["high"]) == tuple(np.quantile(replicates[:, 0], [0.025, 0.975]))


def _tidy(keys, values):
    return pl.DataFrame(
        [("m", *k, v) for k, v in zip(keys, values, strict=True)],
        schema=["model", "family", "level", "average", "metric", "value"],
        orient="row",
    )


def test_centred_interval_covers_the_estimand_where_the_percentile_one_does_not():
    """Demo-like population: the 95 % centred interval of LB-F covers the expected value of
    the estimate in most test sets (0.80-0.99); the percentile interval in clearly fewer."""
    population = RarePopulation(codes=300, docs=250)
    layout = flat_layout(population.docs, population.codes)
    keys = doc_keys(layout.doc_ids.to_list())
    ones = np.ones((1, population.docs))
    rng = np.random.default_rng(2024)
    estimates = []
    for _ in range(300):
        gold, pred = population.draw(rng)
        estimates.append(replicate_values([(flat_units(gold, pred, layout), ones)], layout)[LB_F])
    truth = float(np.mean(estimates))
    trials, centred, percentile = 80, 0, 0
    for trial in range(trials):
        gold, pred = population.draw(rng)
        units = flat_units(gold, pred, layout)
        value = replicate_values([(units, ones)], layout)[LB_F]
        replicates = bootstrap_matrix(
            units, [LB_F], layout=layout, weights_key=keys,
            settings=Settings(bootstrap=200, seed=trial),
        )  # fmt: skip
        low, high = interval_bounds(replicates, value, np.array([True]), 0.95)
        centred += bool(low[0] <= truth <= high[0])
        p_low, p_high = np.quantile(replicates[:, 0], [0.025, 0.975])
        percentile += bool(p_low <= truth <= p_high)
    assert 0.80 <= centred / trials <= 0.99, centred / trials
    assert percentile / trials < centred / trials - 0.1, (percentile, centred)
