"""The bootstrap's ROC-AUC replicates above the exact plan's cap for a matrix with unscored
cells (``-inf``: a long file scoring most pairs but not all, issue 36), from the blocks
instead of the long rows. Checked against the weighted Mann-Whitney written in
tests/test_auc_uncapped.py (every pair compared, unscored pairs tied below every score) and the
exact plan fed the scored pairs alone (macro to the last bit, micro within its bound), and end
to end against the forced long path: every output bit for bit but the micro AUC intervals,
binned on other first chunks (as for a full matrix above the cap)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from hieval.metrics.ranking import ScoreArrays
from hieval.metrics.uncertainty.auc import auc_pairs, auc_plan, auc_replicates
from hieval.metrics.uncertainty.ranking import RankingUnits
from tests.test_auc_uncapped import _case, _weighted_mann_whitney, new_accumulator
from tests.test_dense_wiring import _outputs, _same_bits
from tests.test_long_blocks import _evaluate, _files
from tests.test_long_partial_blocks import _partial


def _by_blocks(scores, gold, scored, full_gold, weights, *, bins: int, rows: int):
    """The accumulator fed the matrix by blocks of ``rows`` documents, its unscored cells
    ``-inf`` among them, and the weight of every document (each has a row)."""
    docs, labels = scores.shape
    acc, pos_doc, pos_col = new_accumulator(scores, gold, scored, full_gold, weights, bins=bins)
    matrix = np.where(scored, scores, -np.inf)
    for start in range(0, docs, rows):
        block = matrix[start : start + rows]
        local = (pos_doc >= start) & (pos_doc < start + rows)
        acc.add_block(block, start, pos_doc[local] - start, pos_col[local])
    every_row = np.repeat(weights.sum(axis=1)[:, None], labels, axis=1)
    return acc.finish(every_row)


@pytest.mark.parametrize(
    ("seed", "grid", "bins", "rows"), [(1, False, 64, 7), (2, True, 16, 50), (3, False, 8, 1)]
)
def test_blocks_with_unscored_cells_against_the_definition(seed, grid, bins, rows):
    scores, gold, scored, full_scores, full_gold, weights = _case(seed, grid=grid)
    assert (~scored).any() and (gold & ~scored).any()  # unscored cells, gold ones among them
    out = _by_blocks(scores, gold, scored, full_gold, weights, bins=bins, rows=rows)
    micro, macro = _weighted_mann_whitney(full_scores, full_gold, weights)
    np.testing.assert_allclose(out.macro, macro, rtol=0, atol=1e-12)
    gap = np.abs(out.micro - micro)
    assert np.all(gap <= out.bound + 1e-12), (gap, out.bound)
    assert np.all(out.bound < 0.5)


def test_blocks_with_unscored_cells_equal_the_exact_plan_on_the_scored_pairs():
    """The scored pairs alone through the exact plan (what the long rows feed it): macro
    replicates bit for bit, micro within the bound."""
    scores, gold, scored, _full_scores, full_gold, weights = _case(5, grid=True)
    docs, total = scores.shape[0], full_gold.shape[1]
    doc, label = np.nonzero(scored)
    gold_doc, gold_label = np.nonzero(full_gold)
    arrays = ScoreArrays(
        n_docs=docs, n_labels=total, key=doc * total + label, score=scores[doc, label],
        gold_key=np.sort(gold_doc * total + gold_label),
        labels=tuple(f"L{j:02d}" for j in range(total)),
    )  # fmt: skip
    exact = auc_replicates(auc_plan([auc_pairs(arrays)]), [weights])
    out = _by_blocks(scores, gold, scored, full_gold, weights, bins=32, rows=9)
    assert np.array_equal(out.macro.view(np.int64), exact["macro"].view(np.int64))
    assert np.all(np.abs(out.micro - exact["micro"]) <= out.bound + 1e-12)


@pytest.mark.parametrize(("share", "extra"), [(0.8, ()), (0.7, ("--top-k", "4"))])
def test_a_partial_file_above_the_cap_gets_its_auc_replicates_from_the_blocks(
    tmp_path, monkeypatch, icd9_leaves, share, extra
):
    """Above the cap (lowered to 10 scored pairs) the units of a partial file come from the
    blocks: every output equals the long path's, but the micro AUC intervals (binned on
    other first chunks either way)."""
    from hieval.metrics import blocked_rows
    from hieval.metrics.blocked_rows import BLOCK_DOCS_VARIABLE
    from hieval.metrics.uncertainty import ranking as uncertainty_ranking

    monkeypatch.setenv(BLOCK_DOCS_VARIABLE, "6")
    monkeypatch.setattr(uncertainty_ranking, "AUC_MAX_SCORED_PAIRS", 10)
    monkeypatch.setattr(blocked_rows, "AUC_MAX_SCORED_PAIRS", 10)
    built = []
    monkeypatch.setattr(
        blocked_rows, "RankingUnits", lambda *a: built.append(1) or RankingUnits(*a)
    )
    pred = _partial(_files(tmp_path, icd9_leaves, seed=6), share, seed=6)
    pred.write_parquet(tmp_path / "pred.parquet")
    flags = ("--bootstrap", "30", *extra)
    code, long_out = _evaluate(monkeypatch, tmp_path, tmp_path / "pred.parquet", *flags, long=True)
    assert code == 0 and not built
    code, blocked_out = _evaluate(
        monkeypatch, tmp_path, tmp_path / "pred.parquet", *flags, long=False
    )
    assert code == 0 and built  # the blocked units were used
    long, blocked = _outputs(long_out), _outputs(blocked_out)
    assert blocked.pop("record") == long.pop("record")
    intervals = blocked["intervals.parquet"]
    auc = pl.col("metric") == "auc"
    micro_auc = auc & (pl.col("average") == "micro")
    assert intervals.filter(auc & (pl.col("average") == "macro")).height > 3  # the levels too
    assert intervals.filter(auc)["low"].null_count() == 0
    for name, frame in long.items():
        ours = blocked[name]
        if name == "intervals.parquet":
            ours, frame = ours.filter(~micro_auc), frame.filter(~micro_auc)
            close = blocked[name].filter(micro_auc).join(
                long[name].filter(micro_auc), on=["model", "family", "level", "average",
                                                  "metric"], suffix="_long",
            )  # fmt: skip
            assert close.height > 3
            for column in ("low", "high"):
                gap = (close[column] - close[f"{column}_long"]).abs().max()
                assert gap < 0.02, (column, gap)  # two bins' errors, each a fraction of it
        _same_bits(ours, frame, name)


def test_a_zoo_of_partial_files_above_the_cap_compares_as_the_long_path(
    tmp_path, monkeypatch, icd9_leaves
):
    """Two partial files (70 % and 85 % scored) above a lowered cap, with the bootstrap and
    the paired tests: metrics, intervals and comparisons equal the long path's bit for bit
    but the micro AUC rows (binned either way), which stay close."""
    from hieval import cli
    from hieval.inputs.dense_normalize import LONG_PATH_VARIABLE
    from hieval.metrics import blocked_rows
    from hieval.metrics.uncertainty import ranking as uncertainty_ranking
    from hieval.metrics.uncertainty import tables

    for module in (uncertainty_ranking, blocked_rows, tables):
        monkeypatch.setattr(module, "AUC_MAX_SCORED_PAIRS", 10)
    built = []
    monkeypatch.setattr(
        blocked_rows, "RankingUnits", lambda *a: built.append(1) or RankingUnits(*a)
    )
    pred = _files(tmp_path, icd9_leaves, seed=9)
    _partial(pred, 0.7, seed=1).write_parquet(tmp_path / "m.parquet")
    noisy = pred.with_columns((pl.col("score") * 0.7 + 0.15).round(2).cast(pl.Float32))
    _partial(noisy, 0.85, seed=2).write_parquet(tmp_path / "n.parquet")
    runs = {}
    for long in (True, False):
        if long:
            monkeypatch.setenv(LONG_PATH_VARIABLE, "1")
        else:
            monkeypatch.delenv(LONG_PATH_VARIABLE, raising=False)
        out = tmp_path / ("long" if long else "blocked")
        argv = ["evaluate", "--gold", str(tmp_path / "gold.csv"), "--pred",
                f"m={tmp_path / 'm.parquet'}", "--pred", f"n={tmp_path / 'n.parquet'}",
                "--out", str(out), "--cache", str(tmp_path / "cache"), "--unknown-docs",
                "drop", "--bootstrap", "40", "--permutations", "49"]  # fmt: skip
        assert cli.main(argv) == 0
        assert len(built) == (0 if long else 2)  # each model's units from its blocks
        runs[long] = {n: pl.read_parquet(out / f"{n}.parquet") for n in
                      ("metrics", "intervals", "comparisons")}  # fmt: skip
    micro_auc = (pl.col("metric") == "auc") & (pl.col("average") == "micro")
    macro_auc = (pl.col("metric") == "auc") & (pl.col("average") == "macro")
    assert runs[False]["comparisons"].filter(macro_auc).height > 3  # the levels' tests too
    assert runs[False]["comparisons"].filter(micro_auc).height > 3
    for name in ("metrics", "intervals", "comparisons"):
        long, blocked = runs[True][name], runs[False][name]
        _same_bits(blocked.filter(~micro_auc), long.filter(~micro_auc), name)
        assert blocked.filter(micro_auc).height == long.filter(micro_auc).height
        for column, dtype in long.schema.items():
            if dtype == pl.Float64 and name != "metrics":
                gap = (blocked.filter(micro_auc)[column] - long.filter(micro_auc)[column]).abs()
                assert (gap.max() or 0) < 0.05, (name, column)
