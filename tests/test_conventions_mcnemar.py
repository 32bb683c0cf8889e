"""Edin et al.'s McNemar test with Bonferroni (conventions_tests.parquet): the discordant counts
against a dense documents x codes error matrix built in the test as their
``mcnemars_test.py`` builds it (errors = false positives or false negatives of
``score > threshold``), the statistic and p-value against the formula with scipy's chi-square
(and statsmodels' ``mcnemar`` when it is installed), a hand-worked example, and the file
through the CLI beside comparisons.parquet."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy.stats import chi2

from hieval.cli import main
from hieval.conventions.mcnemar import SCHEMA, discordant, mcnemar, mcnemar_table


def _frame(pairs) -> pl.DataFrame:
    return pl.DataFrame(
        [(d, c) for d, c in pairs], schema={"doc_id": pl.String, "code": pl.String}, orient="row"
    )


def _dense_reference(gold, a, b, docs, codes) -> tuple[int, int]:
    """Their contingency table's off-diagonal cells from dense error matrices."""
    index = {(d, c): (i, j) for i, d in enumerate(docs) for j, c in enumerate(codes)}

    def matrix(pairs):
        m = np.zeros((len(docs), len(codes)), dtype=bool)
        for p in pairs:
            m[index[p]] = True
        return m

    y, p1, p2 = matrix(gold), matrix(a), matrix(b)
    errors1 = (p1 & ~y) | (~p1 & y)
    errors2 = (p2 & ~y) | (~p2 & y)
    return int((~errors1 & errors2).sum()), int((errors1 & ~errors2).sum())


def test_hand_worked_example():
    # gold: a:x, a:y, b:x. Model A decides a:x, b:z; model B decides a:x, a:y, b:x, b:z, c:w.
    # Cells decided by one only: a:y (B right), b:x (B right), c:w (A right: not in gold).
    gold = _frame([("a", "x"), ("a", "y"), ("b", "x")])
    a = _frame([("a", "x"), ("b", "z")])
    b = _frame([("a", "x"), ("a", "y"), ("b", "x"), ("b", "z"), ("c", "w")])
    assert discordant(gold, a, b) == (1, 2)
    statistic, p = mcnemar(1, 2)
    assert statistic == pytest.approx((abs(1 - 2) - 1) ** 2 / 3)  # 0: the correction
    assert p == pytest.approx(1.0)
    statistic, p = mcnemar(20, 5)
    assert statistic == pytest.approx(14**2 / 25)  # 7.84
    assert p == pytest.approx(0.005110, abs=1e-6)  # chi-square(1) tail of 7.84


def test_no_discordant_cell_is_no_evidence():
    assert mcnemar(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize("seed", range(5))
def test_counts_match_dense_error_matrices(seed):
    rng = np.random.default_rng(seed)
    docs = [f"d{i}" for i in range(30)]
    codes = [f"c{j}" for j in range(12)]
    cells = [(d, c) for d in docs for c in codes]

    def draw(p):
        return [cell for cell in cells if rng.random() < p]

    gold, a, b = draw(0.2), draw(0.25), draw(0.15)
    got = discordant(_frame(gold), _frame(a), _frame(b))
    assert got == _dense_reference(gold, a, b, docs, codes)
    statistic, p = mcnemar(*got)
    n = sum(got)
    assert statistic == pytest.approx((abs(got[0] - got[1]) - 1) ** 2 / n, rel=1e-12)
    assert p == pytest.approx(chi2.sf(statistic, 1), rel=1e-12)


@pytest.mark.parametrize(("only_a", "only_b"), [(3, 9), (40, 12), (7, 7), (1, 0)])
def test_agrees_with_statsmodels(only_a, only_b):
    contingency = pytest.importorskip("statsmodels.stats.contingency_tables")
    ref = contingency.mcnemar([[100, only_a], [only_b, 50]], exact=False, correction=True)
    statistic, p = mcnemar(only_a, only_b)
    assert statistic == pytest.approx(ref.statistic, rel=1e-12)
    assert p == pytest.approx(ref.pvalue, rel=1e-12)


def test_bonferroni_multiplies_by_the_pairs_and_stops_at_one():
    gold = _frame([(f"d{i}", "x") for i in range(40)])
    decided = {
        "all": gold,
        "none": _frame([]),
        "half": _frame([(f"d{i}", "x") for i in range(20)]),
    }
    table = mcnemar_table(gold, decided)
    assert table.schema == pl.Schema(SCHEMA)
    assert table.select("model_a", "model_b").rows() == [
        ("all", "none"),
        ("all", "half"),
        ("none", "half"),
    ]
    for row in table.iter_rows(named=True):
        assert row["p_bonferroni"] == pytest.approx(min(1.0, 3 * row["p_value"]))
    first = table.row(0, named=True)
    assert (first["only_a_correct"], first["only_b_correct"]) == (40, 0)
    assert first["p_bonferroni"] < 1e-8


def test_cli_writes_the_tests_beside_the_randomization_comparisons(tmp_path):
    gold = tmp_path / "gold.csv"
    gold.write_text("doc_id,code\na,401.9\na,428.0\nb,250.00\nc,486\nd,401.9\n")
    one = tmp_path / "one.csv"
    # decided with --threshold 0.5; b:250.00 scores exactly 0.5: in hieval's decided set
    # (>=), out of Edin et al.'s (>), so it counts as a miss in the test
    one.write_text("doc_id,code,score\na,401.9,0.9\na,428.0,0.8\nb,250.00,0.5\nc,486,0.7\n")
    two = tmp_path / "two.csv"
    two.write_text("doc_id,code,score\na,401.9,0.9\nb,250.00,0.9\nc,486,0.2\nd,401.9,0.6\n")
    out = tmp_path / "out"
    argv = ["evaluate", "--gold", str(gold), "--pred", f"one={one}", "--pred", f"two={two}"]
    argv += ["--out", str(out), "--cache", str(tmp_path / "cache"), "--threshold", "0.5"]
    assert main([*argv, "--bootstrap", "20", "--permutations", "20"]) == 0
    tests = pl.read_parquet(out / "conventions_tests.parquet")
    assert (out / "comparisons.parquet").exists()  # beside, never instead
    row = tests.row(0, named=True)
    # one right alone: a:428.0, c:486; two right alone: b:250.00 (one's is not > 0.5), d:401.9
    assert (row["model_a"], row["model_b"]) == ("one", "two")
    assert (row["only_a_correct"], row["only_b_correct"]) == (2, 2)
    assert row["p_value"] == pytest.approx(chi2.sf(1 / 4, 1))
    assert row["p_bonferroni"] == row["p_value"]  # one pair


def test_cli_without_edin_writes_an_empty_table(tmp_path):
    gold = tmp_path / "gold.csv"
    gold.write_text("doc_id,code\na,401.9\n")
    pred = tmp_path / "p.csv"
    pred.write_text("doc_id,code\na,401.9\n")
    out = tmp_path / "out"
    argv = ["evaluate", "--gold", str(gold), "--pred", f"m={pred}", "--pred", f"n={pred}"]
    argv += ["--out", str(out), "--cache", str(tmp_path / "cache"), "--conventions", "caml"]
    assert main(argv) == 0
    assert pl.read_parquet(out / "conventions_tests.parquet").height == 0
