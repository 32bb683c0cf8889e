"""Thresholds tuned on a dense dev matrix by blocks (issue 36) are the long path's to the last
bit: :func:`hieval.metrics.tuning.tune` on the matrix's long rows (threshold, dev F1, the dev
curve, the per-code thresholds), at blocks of 1, 7 and more than the matrix, for the exact
sweep (curve whole and sampled) and the grid; and the chosen thresholds are checked against a
naive sweep written here (F1 at every distinct score, by scikit-learn's ``f1_score``)."""

from __future__ import annotations

import hashlib

import numpy as np
import polars as pl
import pytest
from sklearn.metrics import f1_score

from hieval.inputs.dense_scores import DenseScores, long_frame
from hieval.metrics import blocked_tuning, tuning
from hieval.metrics.ranking import encode


def _case(tmp_path, *, seed=0, n_docs=40, n_codes=12, grid=0.05, dtype=np.float32):
    """A dev matrix on a coarse grid (ties), columns listed out of code order, a dropped row
    and column, a gold with a code outside the matrix and a document without a row."""
    rng = np.random.default_rng(seed)
    matrix = (np.round(rng.random((n_docs, n_codes)) / grid) * grid).astype(dtype)
    path = tmp_path / f"dev{seed}.npy"
    np.save(path, matrix)
    codes = [f"C{j:02d}" for j in rng.permutation(n_codes)]
    docs = [f"v{i:03d}" for i in rng.permutation(n_docs)]
    gold = [(docs[i], codes[j]) for i in range(n_docs - 1) for j in range(n_codes)
            if rng.random() < 0.25 + 0.5 * matrix[i, j]]  # fmt: skip
    gold += [(docs[0], "X99"), (docs[1], "X99"), ("v_no_row", codes[0]), ("v_no_row", "X98")]
    frame = (
        pl.DataFrame(gold, schema=["doc_id", "code"], orient="row").unique().sort("doc_id", "code")
    )
    kept_docs = [None if i == n_docs - 1 else d for i, d in enumerate(docs)]  # not in the gold
    kept_codes = [None if j == 3 else c for j, c in enumerate(codes)]  # dropped by a policy
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    scores = DenseScores(path=str(path), sha256=digest, docs=kept_docs, codes=kept_codes)
    return frame, scores


def _same(ours: tuning.Tuned, theirs: tuning.Tuned) -> None:
    assert np.float64(ours.threshold).view(np.int64) == np.float64(theirs.threshold).view(np.int64)
    assert np.float64(ours.f1).view(np.int64) == np.float64(theirs.f1).view(np.int64)
    for a, b in ((ours.curve, theirs.curve), (ours.per_code, theirs.per_code)):
        assert a.schema == b.schema and a.height == b.height
        for column, dtype in a.schema.items():
            if dtype == pl.Float64:
                x, y = a[column].to_numpy(), b[column].to_numpy()
                assert np.array_equal(x.view(np.int64), y.view(np.int64)), column
            else:
                assert a[column].equals(b[column]), column


@pytest.mark.parametrize("block", [1, 7, 1000])
@pytest.mark.parametrize("method", ["exact", "grid"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tuned_by_blocks_equals_the_long_path(tmp_path, block, method, seed):
    gold, scores = _case(tmp_path, seed=seed)
    options = {"per_code": True, "min_support": 2, "method": method}
    theirs = tuning.tune(encode(gold, long_frame(scores)), **options)
    ours = blocked_tuning.dense_tune(gold, scores, block=block, **options)
    assert theirs.per_code.height > 5
    _same(ours, theirs)


@pytest.mark.parametrize("block", [1, 5, 64])
def test_a_sampled_curve_is_the_long_paths(tmp_path, monkeypatch, block):
    """Continuous scores: more distinct scores than the curve keeps (lowered to 50 here),
    so the curve is sampled, with the chosen threshold added, on both paths alike."""
    monkeypatch.setattr(tuning, "CURVE_POINTS", 50)
    monkeypatch.setattr(blocked_tuning, "CURVE_POINTS", 50)
    gold, scores = _case(tmp_path, grid=1e-6, dtype=np.float64)
    theirs = tuning.tune(encode(gold, long_frame(scores)), per_code=True, min_support=1)
    ours = blocked_tuning.dense_tune(gold, scores, block=block, per_code=True, min_support=1)
    assert ours.curve.height in (50, 51)
    _same(ours, theirs)


def test_without_a_scored_gold_pair_the_highest_score_wins(tmp_path):
    """No dev gold pair has a cell (gold documents without rows, or codes outside the list):
    F1 is 0 at every threshold and the highest score is chosen, on both paths."""
    gold, scores = _case(tmp_path)
    gold = gold.filter(pl.col("code").is_in(["X98", "X99"]) | (pl.col("doc_id") == "v_no_row"))
    options = {"per_code": True, "min_support": 1}
    arrays = encode(gold, long_frame(scores))
    theirs = tuning.tune(arrays, **options)
    ours = blocked_tuning.dense_tune(gold, scores, block=3, **options)
    assert ours.f1 == 0 and ours.threshold == float(arrays.score.max())  # the gold's rows
    assert ours.per_code.height == 1 and ours.per_code["f1"][0] == 0
    _same(ours, theirs)


def test_the_chosen_thresholds_are_a_naive_sweeps(tmp_path):
    """Independent of both paths: F1 (scikit-learn) of the decisions ``score >= t`` at every
    distinct score, the highest t among the best; the gold pairs without a cell are false
    negatives."""
    gold, scores = _case(tmp_path, seed=4)
    ours = blocked_tuning.dense_tune(gold, scores, block=7, per_code=True, min_support=3)
    frame = long_frame(scores)
    truth_pairs = set(gold.drop_nulls("code").iter_rows())
    truth = np.array([(d, c) in truth_pairs for d, c in frame.select("doc_id", "code").iter_rows()])
    missed = len(truth_pairs) - int(truth.sum())  # gold pairs without a cell

    def naive(score: np.ndarray, positive: np.ndarray, missed: int) -> tuple[float, float]:
        best = (-1.0, 0.0)
        for t in np.unique(score):
            y_true = np.r_[positive, np.ones(missed, bool)]
            y_pred = np.r_[score >= t, np.zeros(missed, bool)]
            f1 = f1_score(y_true, y_pred, zero_division=0.0)
            if f1 >= best[0] - 1e-12:
                best = (f1, float(t))
        return best

    f1, threshold = naive(frame["score"].to_numpy(), truth, missed)
    assert ours.threshold == threshold and ours.f1 == pytest.approx(f1, abs=1e-12)
    assert ours.per_code.height > 3
    for code, threshold, support, f1 in ours.per_code.iter_rows():
        own = frame.with_columns(pl.Series("truth", truth)).filter(pl.col("code") == code)
        missed = support - int(own["truth"].sum())
        expected_f1, expected = naive(own["score"].to_numpy(), own["truth"].to_numpy(), missed)
        assert (threshold, f1) == (expected, pytest.approx(expected_f1, abs=1e-12)), code


def test_a_tie_in_f1_goes_to_the_highest_threshold_hand_worked(tmp_path):
    """One code, 9 documents: gold scores 0.9, 0.2, 0.2 and six others at 0.5. At 0.9: TP 1,
    FP 0, FN 2, F1 2/4; at 0.5: TP 1, FP 6, FN 2, F1 2/10; at 0.2: TP 3, FP 6, FN 0, F1 6/12.
    0.9 and 0.2 tie at 1/2: the highest, 0.9, is chosen."""
    matrix = np.array([[0.9], [0.2], [0.2], *[[0.5]] * 6], dtype=np.float64)
    path = tmp_path / "tie.npy"
    np.save(path, matrix)
    docs = [f"d{i}" for i in range(9)]
    gold = pl.DataFrame({"doc_id": docs, "code": ["A", "A", "A", *[None] * 6]})
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    scores = DenseScores(path=str(path), sha256=digest, docs=docs, codes=["A"])
    ours = blocked_tuning.dense_tune(gold, scores, block=2, per_code=True, min_support=1)
    assert (ours.threshold, ours.f1) == (0.9, 0.5)
    assert ours.per_code.rows() == [("A", 0.9, 3, 0.5)]
    assert ours.curve["f1"].to_list() == [0.5, 0.2, 0.5]


def test_the_cli_tunes_a_dense_dev_matrix_by_grid_from_its_blocks(tmp_path, monkeypatch):
    """``--tuning-method grid`` on a dense dev matrix: the tuned JSON, the dev curve and the
    per-code thresholds the CLI writes are the long path's (``HIEVAL_DENSE_LONG=1``), and the
    blocked run never built the long rows."""
    from hieval import cli
    from hieval.inputs import dense_scores
    from hieval.inputs.dense_normalize import LONG_PATH_VARIABLE

    rng = np.random.default_rng(11)
    codes = ["401.9", "428.0", "427.31", "584.9", "250.00", "272.4", "414.01", "599.0"]
    for name, prefix in (("test", "t"), ("dev", "v")):
        matrix = np.round(rng.random((30, len(codes))) * 40) / 40
        np.save(tmp_path / f"{name}.npy", matrix.astype(np.float32))
        docs = [f"{prefix}{i}" for i in range(30)]
        (tmp_path / f"{name}.codes.txt").write_text("\n".join(codes) + "\n")
        (tmp_path / f"{name}.docs.txt").write_text("\n".join(docs) + "\n")
        gold = [(d, c) for i, d in enumerate(docs) for j, c in enumerate(codes)
                if rng.random() < matrix[i, j] * 0.6]  # fmt: skip
        pl.DataFrame(gold, schema=["doc_id", "code"], orient="row").write_csv(
            tmp_path / f"{name}.csv"
        )
    found = {}
    for long in (True, False):
        if long:
            monkeypatch.setenv(LONG_PATH_VARIABLE, "1")
        else:
            monkeypatch.delenv(LONG_PATH_VARIABLE, raising=False)
            monkeypatch.setattr(dense_scores, "long_frame", lambda *a: 1 / 0)
        out = tmp_path / ("long" if long else "blocked")
        argv = ["evaluate", "--gold", str(tmp_path / "test.csv"), "--pred",
                f"m={tmp_path / 'test.npy'}", "--dev-gold", str(tmp_path / "dev.csv"),
                "--dev-pred", f"m={tmp_path / 'dev.npy'}", "--threshold", "tune",
                "--tuning-method", "grid", "--tuning-per-code", "--tuning-min-support", "2",
                "--unknown-docs", "drop", "--out", str(out),
                "--cache", str(tmp_path / "cache")]  # fmt: skip
        assert cli.main(argv) == 0
        found[long] = {p.name: pl.read_parquet(p) for p in (out / "work").rglob("*.parquet")
                       if "tun" in str(p) or "threshold" in str(p)}  # fmt: skip
        found[long]["metrics"] = pl.read_parquet(out / "metrics.parquet")
    assert set(found[True]) == set(found[False]) and len(found[True]) >= 3
    for name, frame in found[True].items():
        assert frame.equals(found[False][name]), name
