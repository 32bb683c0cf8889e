"""A long scored file that scores most (document, code) pairs but not all (issue 36: a model
writing its scores above a floor, or its top codes a document) is pivoted into a matrix whose
unscored cells are ``-inf`` and read by blocks, with the long path's outputs bit for bit: the
same file evaluated with the long path forced (``HIEVAL_DENSE_LONG=1``) and by blocks, every
output file and the input record compared, with decisions by threshold and top k, the
bootstrap, tuning on a partial dev file and the hierarchy's max-pooled ranking levels. The long
path is the independent reference: it ranks each scored pair from its own rows, the unscored
pairs by :mod:`hieval.metrics.ranking`'s rules. Files the blocks must not take (a non-finite
score, a repeated pair, too few pairs scored) give the long path's outputs or refusal."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from hieval.inputs import dense_long
from hieval.inputs.dense_scores import read_reference
from hieval.metrics.blocked_rows import BLOCK_DOCS_VARIABLE
from tests.test_dense_wiring import _same_when_both_ran, _unknown_code
from tests.test_long_blocks import _both_ways, _compare, _files

SHARES = (0.7, 0.8, 0.95)


def _partial(pred: pl.DataFrame, share: float, *, seed: int = 11) -> pl.DataFrame:
    """``pred`` with a random ``share`` of its rows kept, and the first document scoring one
    code only (its other codes unscored, gold ones among them), in the rows' order."""
    rng = np.random.default_rng(seed)
    keep = rng.random(pred.height) < share
    first = pred["doc_id"][0]
    alone = (pred["doc_id"] == first).to_numpy()
    keep[alone] = False
    keep[np.flatnonzero(alone)[0]] = True
    return pred.filter(pl.Series(keep))


def _compare_partial(monkeypatch, folder, path, *extra):
    """:func:`tests.test_long_blocks._compare`, and the blocks read the matrix with its
    unscored cells (the long path none), which are the file's missing pairs."""
    long_out, blocked_out = _compare(monkeypatch, folder, path, *extra)
    notes = "work/ranking/m.json"  # the scored and unscored pairs, the label space's size
    assert json.loads((blocked_out / notes).read_text()) == json.loads(
        (long_out / notes).read_text()
    )
    reference = read_reference(blocked_out / "work/inputs/scores/m.parquet")
    assert reference is not None and reference.path.endswith("m.matrix.npy")
    assert reference.unscored > 0
    assert read_reference(long_out / "work/inputs/scores/m.parquet") is None
    metrics = pl.read_parquet(long_out / "metrics.parquet")
    assert metrics.filter(pl.col("family") == "ranking").height > 20  # the levels too
    assert metrics.filter(pl.col("family") == "calibration").height == 4
    return long_out, blocked_out


@pytest.mark.parametrize(
    ("share", "dtype", "order", "extra"),
    [
        (0.8, pl.Float32, ("doc_id", "code"), ()),
        (0.7, pl.Float64, ("code", "doc_id"), ("--top-k", "4")),
        (0.95, pl.Float32, ("code", "doc_id"), ("--threshold", "0.45", "--top-k", "6")),
        (0.8, pl.Float64, ("doc_id", "code"), ("--threshold", "0.3")),
        (0.7, pl.Float32, ("doc_id", "code"), ("--bootstrap", "20", "--permutations", "20")),
    ],
)
def test_a_partial_long_file_by_blocks_equals_the_long_path(
    tmp_path, monkeypatch, icd9_leaves, share, dtype, order, extra
):
    monkeypatch.setenv(BLOCK_DOCS_VARIABLE, "5")
    monkeypatch.setattr(dense_long, "BATCH_ROWS", 100)  # documents straddle batches
    pred = _partial(_files(tmp_path, icd9_leaves, dtype=dtype, order=order), share)
    pred.write_parquet(tmp_path / "pred.parquet", row_group_size=64)
    _compare_partial(monkeypatch, tmp_path, tmp_path / "pred.parquet", *extra)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_shares_and_ties_equal_the_long_path(tmp_path, monkeypatch, icd9_leaves, seed):
    """Random shares of 70-95 %, in blocks of 1-9 documents, scores on a coarse grid (many
    ties, unscored gold pairs tied at the bottom with the other unscored ones)."""
    rng = np.random.default_rng(seed)
    monkeypatch.setenv(BLOCK_DOCS_VARIABLE, str(int(rng.integers(1, 10))))
    pred = _files(tmp_path, icd9_leaves, seed=seed)
    pred = pred.with_columns((pl.col("score") * 4).round() / 4)
    pred = _partial(pred, float(rng.uniform(0.7, 0.95)), seed=seed)
    pred.write_parquet(tmp_path / "pred.parquet")
    _compare_partial(monkeypatch, tmp_path, tmp_path / "pred.parquet", "--top-k", "5")


def test_a_partial_csv_file_by_blocks_equals_the_long_path(tmp_path, monkeypatch, icd9_leaves):
    monkeypatch.setenv(BLOCK_DOCS_VARIABLE, "7")
    pred = _partial(_files(tmp_path, icd9_leaves, dtype=pl.Float64), 0.85)
    pred.write_csv(tmp_path / "pred.csv")
    _compare_partial(monkeypatch, tmp_path, tmp_path / "pred.csv", "--top-k", "3")


@pytest.mark.parametrize("per_code", [(), ("--tuning-per-code", "--tuning-min-support", "1")])
def test_tuning_on_a_partial_dev_file_equals_the_long_path(
    tmp_path, monkeypatch, icd9_leaves, per_code
):
    """A partial dev file is tuned from its blocks (tests/test_partial_dev_tuning_blocks.py);
    the test file's decisions by the tuned threshold (per code: a code's own where it has
    one), by blocks."""
    pred = _partial(_files(tmp_path, icd9_leaves, seed=4), 0.8, seed=4)
    pred.write_parquet(tmp_path / "pred.parquet")
    (tmp_path / "dev").mkdir()
    dev = _partial(_files(tmp_path / "dev", icd9_leaves, seed=4), 0.75, seed=5)
    renamed = pl.col("doc_id").str.replace("^", "v")  # its own documents, the test's codes
    dev.with_columns(renamed).write_parquet(tmp_path / "dev" / "pred.parquet")
    dev_gold = pl.read_csv(tmp_path / "dev" / "gold.csv").with_columns(renamed)
    dev_gold.write_csv(tmp_path / "dev" / "gold.csv")
    long_out, _blocked_out = _compare_partial(
        monkeypatch, tmp_path, tmp_path / "pred.parquet", "--threshold", "tune", "--dev-gold",
        str(tmp_path / "dev" / "gold.csv"), "--dev-pred",
        f"m={tmp_path / 'dev' / 'pred.parquet'}", *per_code,
    )  # fmt: skip
    record = json.loads((long_out / "work/inputs/predictions/m.json").read_text())
    assert (record["tuned_threshold"]["per_code"] > 3) == bool(per_code)


@pytest.mark.parametrize("oddity", ["nan score", "infinite score", "repeated pair", "sparse"])
def test_partial_files_the_blocks_refuse_go_the_long_way(
    tmp_path, monkeypatch, capsys, icd9_leaves, oddity
):
    pred = _partial(_files(tmp_path, icd9_leaves, dtype=pl.Float64), 0.8)
    if oddity.endswith("score"):
        bad = np.nan if oddity == "nan score" else -np.inf
        pred = pred.with_columns(score=pl.when(pl.int_range(pl.len()) == 5).then(bad)
                                 .otherwise(pl.col("score")))  # fmt: skip
    elif oddity == "repeated pair":
        pred = pl.concat([pred, pred.slice(3, 1)])
    else:  # scores below the share the blocks take
        pred = _partial(pred, 0.25, seed=3)  # 20 % of the pairs
    path = tmp_path / "pred.parquet"
    pred.write_parquet(path)
    assert dense_long.score_matrix(path, out=tmp_path / "copy.npy") is None
    assert not (tmp_path / "copy.npy").exists()
    results = _both_ways(monkeypatch, capsys, tmp_path, path)
    assert results[0] == results[1]
    assert (results[0][0] != 0) == oddity.endswith("score")  # a repeat keeps its highest
    _same_when_both_ran(tmp_path, results)


@pytest.mark.parametrize(
    "flags",
    [
        ("--unknown-codes", "place", "--malformed-codes", "count"),
        ("--unknown-codes", "drop", "--malformed-codes", "count"),
        ("--unknown-codes", "count", "--malformed-codes", "count"),
        (),  # the defaults: the malformed code refused
    ],
)
def test_odd_codes_in_a_partial_file_as_on_the_long_path(
    tmp_path, monkeypatch, capsys, icd9, icd9_leaves, flags
):
    """A code the release lacks and one that is no code, each scored for most documents."""
    pred = _partial(_files(tmp_path, icd9_leaves), 0.85)
    docs = pred["doc_id"].unique(maintain_order=True)
    odd = pl.DataFrame(
        {
            "doc_id": pl.concat([docs, docs]),
            "code": [_unknown_code(icd9)] * len(docs) + ["hypertension"] * len(docs),
            "score": np.linspace(0, 1, 2 * len(docs)),
        }
    ).with_columns(pl.col("score").cast(pl.Float32))
    odd = odd.filter(pl.int_range(pl.len()) % 5 != 2)  # some unscored
    path = tmp_path / "pred.parquet"
    pl.concat([pred, odd]).sort("doc_id", "code").write_parquet(path)
    results = _both_ways(monkeypatch, capsys, tmp_path, path, *flags)
    assert results[0] == results[1]
    assert (results[0][0] != 0) == (flags == ())
    _same_when_both_ran(tmp_path, results, reference=True)


def test_a_document_without_a_decision_is_no_prediction_document(
    tmp_path, monkeypatch, icd9_leaves
):
    """A long file has no row of its own for a document: one whose scores all fall below the
    threshold is not among the predictions' documents on the long path, nor by blocks (a
    full matrix and a partial one)."""
    pred = _files(tmp_path, icd9_leaves, dtype=pl.Float64)
    low = pred["doc_id"][0]
    pred = pred.with_columns(
        score=pl.when(pl.col("doc_id") == low).then(pl.col("score") * 0.4).otherwise("score")
    )
    pred.write_parquet(tmp_path / "full.parquet")
    _partial(pred, 0.9).write_parquet(tmp_path / "partial.parquet")
    for name in ("full", "partial"):
        _long_out, blocked_out = _compare(monkeypatch, tmp_path, tmp_path / f"{name}.parquet")
        assert read_reference(blocked_out / "work/inputs/scores/m.parquet") is not None
        decided = pl.read_parquet(blocked_out / "work/inputs/predictions/m.parquet")
        assert low not in decided["doc_id"].to_list()


def test_a_code_scored_only_outside_the_gold_is_no_label(tmp_path, monkeypatch, icd9_leaves):
    """A code the file scores only for a document the gold lacks (dropped) is no label of the
    space on the long path, so it is none by blocks either: AUC's negatives, the @K ranks and
    calibration's pairs count without it."""
    pred = _partial(_files(tmp_path, icd9_leaves, dtype=pl.Float64), 0.9)
    gold_docs = set(pl.read_csv(tmp_path / "gold.csv")["doc_id"].to_list())
    outside = next(d for d in pred["doc_id"].unique().sort() if d not in gold_docs)
    used = set(pred["code"].to_list()) | set(pl.read_csv(tmp_path / "gold.csv")["code"])
    code = next(c for c in icd9_leaves if c not in used)
    extra = pl.DataFrame({"doc_id": [outside], "code": [code], "score": [0.5]})
    pl.concat([pred, extra]).write_parquet(tmp_path / "pred.parquet")
    _compare_partial(monkeypatch, tmp_path, tmp_path / "pred.parquet")


@pytest.mark.parametrize(("seed", "block_docs"), [(0, 1), (1, 4), (2, 50)])
def test_unscored_cells_against_scikit_learn_and_a_naive_ranking(seed, block_docs):
    """:func:`hieval.metrics.blocked.blocked_levels` on a matrix with ``-inf`` cells, two
    documents without a row and two gold codes outside its columns, against independent
    computations over the whole label space with every unscored pair at -1 (below every
    score, all tied): scikit-learn's micro and per-code ROC-AUC, and each gold pair's place
    in its document sorted by score then code and the precision at its score (MAP's), at the
    leaves and at a max-pooled level."""
    from sklearn.metrics import roc_auc_score

    from hieval.metrics.blocked import blocked_levels

    rng = np.random.default_rng(seed)
    rows, width, n_docs, extra = 23, 9, 25, 2
    total = width + extra
    matrix = np.round(rng.random((rows, width)) * 8) / 8  # ties
    matrix[rng.random(matrix.shape) < 0.25] = -np.inf
    gold = rng.random((n_docs, total)) < 0.3
    gold[0, :] = False
    gold[0, 1] = True  # a document with one gold code
    code_order = rng.permutation(total)  # each label's rank in code order
    node_of = np.array([0, 0, 1, 1, 1, 2, 2, 0, 1, 2, 2])  # three nodes; extras among them
    full = np.full((n_docs, total), -1.0)
    full[:rows, :width] = np.where(np.isinf(matrix), -1.0, matrix)
    gold_rows, gold_cols = np.nonzero(gold)
    out = blocked_levels(
        matrix, gold_rows, gold_cols, node_of={"up": node_of}, code_order=code_order,
        n_docs=n_docs, extra_labels=extra, block_docs=block_docs,
    )  # fmt: skip
    pooled = np.column_stack([full[:, node_of == n].max(axis=1) for n in range(3)])
    pooled_gold = np.column_stack([gold[:, node_of == n].any(axis=1) for n in range(3)])
    for name, scores, truth, order in (
        ("leaf", full, gold, code_order),
        ("up", pooled, pooled_gold, np.arange(3)),
    ):
        aucs, ranks = out[name]
        assert aucs.micro == pytest.approx(roc_auc_score(truth.ravel(), scores.ravel()), abs=1e-12)
        for c in range(scores.shape[1]):
            if 0 < truth[:, c].sum() < n_docs:
                expected = roc_auc_score(truth[:, c], scores[:, c])
                assert aucs.per_label[c] == pytest.approx(expected, abs=1e-12)
        doc, label = np.nonzero(truth)
        for d, c, position in zip(doc, label, _naive_positions(scores, truth, order), strict=True):
            found = np.flatnonzero((ranks.doc == d) & (ranks.position == position))
            assert len(found) == 1, (name, d, c, position)
            at_least = scores[d] >= scores[d, c]  # its threshold (the unscored: every pair)
            expected = truth[d][at_least].sum() / at_least.sum()
            assert ranks.precision[found[0]] == pytest.approx(expected, abs=1e-15)


def _naive_positions(scores: np.ndarray, truth: np.ndarray, order: np.ndarray) -> list[int]:
    """Each gold pair's 0-based place in its document, by score descending then code order
    (the pairs in document, then column order)."""
    positions = []
    for d, c in zip(*np.nonzero(truth), strict=True):
        ahead = (scores[d] > scores[d, c]) | ((scores[d] == scores[d, c]) & (order < order[c]))
        positions.append(int(ahead.sum()))
    return positions
