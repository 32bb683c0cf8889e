"""McNemar's test with a Bonferroni correction: the ``edin`` convention's significance test,
offered beside hieval's paired randomization test (``comparisons.parquet``), never instead.

Edin et al. (SIGIR 2023; ``reports/plots/*/mcnemars_test.py`` of
JoakimEdin/medical-coding-reproducibility) test each pair of models on their per code-document
decisions: a decision (``score > threshold``) is an error when it is a false positive or a
false negative, the 2 x 2 table counts the cells where both models, one or neither err, and
statsmodels' ``mcnemar(table, exact=False, correction=True)`` gives the p-value; their tables
are "significant after a Bonferroni correction", the p-value times the number of pairs tested.

Only the discordant cells enter the statistic, and a cell is discordant exactly when one model
decides the code and the other does not, so the counts come from the long decided tables
without building the documents x label space matrix: this is the same test at any scale.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import polars as pl

SCHEMA = {
    "model_a": pl.String,
    "model_b": pl.String,
    "only_a_correct": pl.Int64,
    "only_b_correct": pl.Int64,
    "statistic": pl.Float64,
    "p_value": pl.Float64,
    "p_bonferroni": pl.Float64,
}


def discordant(
    gold: pl.DataFrame, decided_a: pl.DataFrame, decided_b: pl.DataFrame
) -> tuple[int, int]:
    """``(only_a_correct, only_b_correct)``: the code-document cells where model A decides
    right and B wrong, and the reverse. A cell A decides and B does not is right for A when
    the gold has it, else right for B; and symmetrically."""
    g, a, b = (_pairs(f) for f in (gold, decided_a, decided_b))
    a_only = a.join(b, on=["doc_id", "code"], how="anti")
    b_only = b.join(a, on=["doc_id", "code"], how="anti")
    a_only_gold = a_only.join(g, on=["doc_id", "code"], how="semi").height
    b_only_gold = b_only.join(g, on=["doc_id", "code"], how="semi").height
    only_a = a_only_gold + (b_only.height - b_only_gold)
    only_b = b_only_gold + (a_only.height - a_only_gold)
    return only_a, only_b


def _pairs(frame: pl.DataFrame) -> pl.DataFrame:
    codes = pl.col("code")
    return frame.filter(codes.is_not_null() & (codes != "")).select("doc_id", "code").unique()


def mcnemar(only_a: int, only_b: int) -> tuple[float, float]:
    """``(statistic, p_value)`` of McNemar's chi-square test with the continuity correction,
    as statsmodels' ``mcnemar(exact=False, correction=True)``: ``(|b - c| - 1)^2 / (b + c)``
    against chi-square with one degree of freedom. Without a discordant cell statsmodels
    divides by zero (an infinite statistic, p = 0); here there is no evidence of a
    difference: statistic 0, p = 1."""
    n = only_a + only_b
    if n == 0:
        return 0.0, 1.0
    statistic = (abs(only_a - only_b) - 1.0) ** 2 / n
    # The chi-square survival function scipy.stats' chi2.sf(statistic, 1) calls, bit for bit,
    # without loading scipy.stats (about a second of the conventions job's start-up). Here, not
    # at the top: `import hieval.cli` stays light.
    from scipy.special import chdtrc

    return statistic, float(chdtrc(1, statistic))


def mcnemar_table(gold: pl.DataFrame, decided: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """Every pair of models (in ``decided``'s order) tested; ``p_bonferroni`` is the p-value
    times the number of pairs, at most 1."""
    rows = []
    pairs: Sequence[tuple[str, str]] = list(combinations(decided, 2))
    for a, b in pairs:
        only_a, only_b = discordant(gold, decided[a], decided[b])
        statistic, p = mcnemar(only_a, only_b)
        rows.append((a, b, only_a, only_b, statistic, p, min(1.0, p * len(pairs))))
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")
