"""A dev file that scores most (document, code) pairs but not all, pivoted into a matrix whose
unscored cells are ``-inf`` (issue 36), is tuned from its blocks
(:func:`hieval.metrics.blocked_tuning.dense_tune`), not from its long rows: the same tuned
threshold, dev curve and per-code thresholds as the long path to the last bit. The long path
(``HIEVAL_DENSE_LONG=1``: the dev file's long rows, :func:`hieval.metrics.tuning.tune`) is the
independent reference: it has no row for an unscored pair, so never counts it at or above a
threshold nor as a candidate; every output file and the input record are compared."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from hieval.inputs.dense_scores import DenseScores, _sha256, read_reference
from hieval.metrics import blocked_tuning
from hieval.metrics.blocked_rows import BLOCK_DOCS_VARIABLE
from tests.test_long_blocks import _files
from tests.test_long_partial_blocks import _compare_partial, _partial


def _dev_case(folder, icd9_leaves, *, share: float, seed: int, grid: float | None) -> str:
    """The test file (80 % scored) and a dev file (``share`` scored, its own documents, the
    test's codes; on a coarse ``grid`` of scores, many ties), with two oddities: one gold code
    whose dev gold cells are all unscored (its own threshold, if any, from its other scores)
    and one code no dev row scores (not a label of the dev matrix)."""
    pred = _partial(_files(folder, icd9_leaves, seed=seed), 0.8, seed=seed)
    pred.write_parquet(folder / "pred.parquet")
    (folder / "dev").mkdir()
    dev = _files(folder / "dev", icd9_leaves, seed=seed)
    if grid:
        dev = dev.with_columns((pl.col("score") / grid).round() * grid)
    dev = _partial(dev, share, seed=seed + 1)
    renamed = pl.col("doc_id").str.replace("^", "v")  # its own documents, the test's codes
    dev_gold = pl.read_csv(folder / "dev" / "gold.csv").with_columns(renamed)
    codes = dev["code"].unique(maintain_order=True).to_list()
    gone, unscored_gold = codes[0], codes[1]
    gold_of = dev_gold.filter(pl.col("code") == unscored_gold).select(
        pl.col("doc_id").str.replace("^v", "")
    )["doc_id"]
    dev = dev.filter(
        (pl.col("code") != gone)
        & ~((pl.col("code") == unscored_gold) & pl.col("doc_id").is_in(gold_of.to_list()))
    )
    dev.with_columns(renamed).write_parquet(folder / "dev" / "pred.parquet")
    dev_gold.write_csv(folder / "dev" / "gold.csv")
    return str(folder / "dev" / "pred.parquet")


@pytest.mark.parametrize(
    ("share", "grid", "extra"),
    [
        (0.8, None, ()),
        (0.7, 0.25, ("--tuning-per-code", "--tuning-min-support", "1")),
        (0.9, 0.1, ("--tuning-method", "grid")),
        (0.75, 0.05, ("--tuning-per-code", "--tuning-min-support", "2")),
    ],
)
def test_a_partial_dev_file_is_tuned_by_blocks_as_the_long_path_tunes_it(
    tmp_path, monkeypatch, icd9_leaves, share, grid, extra
):
    monkeypatch.setenv(BLOCK_DOCS_VARIABLE, "6")
    dev = _dev_case(tmp_path, icd9_leaves, share=share, seed=4, grid=grid)
    tuned = []
    dense_tune = blocked_tuning.dense_tune

    def spy(gold, scores, **kwargs):
        tuned.append(scores.unscored)
        return dense_tune(gold, scores, **kwargs)

    monkeypatch.setattr(blocked_tuning, "dense_tune", spy)
    long_out, blocked_out = _compare_partial(
        monkeypatch, tmp_path, tmp_path / "pred.parquet", "--threshold", "tune", "--dev-gold",
        str(tmp_path / "dev" / "gold.csv"), "--dev-pred", f"m={dev}", *extra,
    )  # fmt: skip
    assert len(tuned) == 1 and tuned[0] > 0  # the blocks' run tuned the partial matrix
    record = json.loads((long_out / "work/inputs/predictions/m.json").read_text())
    assert record["tuned_threshold"]["threshold"] > 0
    if "--tuning-per-code" in extra:
        assert record["tuned_threshold"]["per_code"] > 3
    references = [read_reference(p) for p in blocked_out.rglob("*.parquet") if "dev" in str(p)]
    assert any(r is not None and r.unscored > 0 for r in references)


def test_unscored_cells_are_no_candidates_nor_counted(tmp_path, icd9_leaves):
    """:func:`dense_tune` itself on a tiny partial matrix, against the sweep done by hand:
    the candidates are the scored gold cells' scores, the cells counted at or above a
    threshold the scored ones, and the curve's thresholds the distinct scored values."""
    matrix = np.array([[0.9, -np.inf, 0.2], [-np.inf, 0.6, 0.6], [0.3, 0.8, -np.inf]])
    np.save(tmp_path / "m.npy", matrix)
    scores = DenseScores(
        path=str(tmp_path / "m.npy"), sha256=_sha256(tmp_path / "m.npy"), docs=["a", "b", "c"],
        codes=["401.9", "250.00", "V10.0"], counted={}, unscored=3,
    )  # fmt: skip
    # gold: a-401.9 (0.9), b-401.9 (unscored), c-250.00 (0.8), c-V10.0 (unscored)
    gold = pl.DataFrame({"doc_id": ["a", "b", "c", "c"], "code": ["401.9", "401.9", "250.00",
                                                                   "V10.0"]})  # fmt: skip
    tuned = blocked_tuning.dense_tune(gold, scores, block=1)
    # scored cells 0.2, 0.3, 0.6, 0.6, 0.8, 0.9; 4 gold pairs; candidates 0.8 and 0.9:
    # at 0.8: tp 2, fp 0, fn 2 -> F1 2/3; at 0.9: tp 1, fp 0, fn 3 -> F1 0.4
    assert tuned.threshold == 0.8
    assert tuned.f1 == 2 * 2 / (2 * 2 + 0 + 2)
    curve = tuned.curve
    assert curve["threshold"].to_list() == [0.2, 0.3, 0.6, 0.8, 0.9]
    assert curve["tp"].to_list() == [2, 2, 2, 2, 1]
    assert curve["fp"].to_list() == [4, 3, 2, 0, 0]
