"""Blocked exact ROC-AUC of a dense matrix (hieval.metrics.blocked, issue 36): equal to the
last bit to today's ranking rows (hieval.metrics.ranking, from long pairs), to scikit-learn
within rounding, and to hand-worked values, whatever the block size."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from sklearn.metrics import roc_auc_score

from hieval.metrics.blocked import (
    Pooling,
    SharedPooling,
    blocked_aucs,
    blocked_calibration,
    blocked_document_ranks,
    blocked_levels,
    document_values,
)
from hieval.metrics.ranking import DEFAULT_KS, score_rows


def _matrix(seed: int, docs: int, labels: int, *, decimals: int = 1, rate: float = 0.2):
    """Scores rounded to ``decimals`` (many ties) and a boolean gold of about ``rate``."""
    rng = np.random.default_rng(seed)
    scores = np.round(rng.random((docs, labels)), decimals).astype(np.float32)
    gold = rng.random((docs, labels)) < rate
    return scores, gold


def _sklearn(scores: np.ndarray, gold: np.ndarray) -> tuple[float, float]:
    micro = roc_auc_score(gold.ravel(), scores.ravel())
    usable = [c for c in range(gold.shape[1]) if 0 < gold[:, c].sum() < gold.shape[0]]
    macro = float(np.mean([roc_auc_score(gold[:, c], scores[:, c]) for c in usable]))
    return float(micro), macro


def _todays_ranking(
    scores: np.ndarray,
    gold: np.ndarray,
    node_of: np.ndarray | None = None,
    codes: list[str] | None = None,
) -> dict[tuple[str, str], float]:
    """Today's path after normalisation: long string-keyed frames into ranking.score_rows;
    every ranking row of the leaves, or with ``node_of`` of the level ``grp`` whose nodes are
    ``n{node}`` (codes with -1 have none there). ``codes`` names the columns (default in code
    order)."""
    docs = [f"d{i:03d}" for i in range(scores.shape[0])]
    codes = codes or [f"c{j:03d}" for j in range(scores.shape[1])]
    di, ci = np.indices(scores.shape).reshape(2, -1)
    score_frame = pl.DataFrame(
        {
            "doc_id": [docs[i] for i in di],
            "code": [codes[j] for j in ci],
            "score": scores.reshape(-1).astype(np.float64),
        }
    )
    rows, cols = np.nonzero(gold)
    empty = [docs[i] for i in np.flatnonzero(~gold.any(axis=1))]  # a null code declares one
    gold_frame = pl.DataFrame(
        {
            "doc_id": [docs[i] for i in rows] + empty,
            "code": [codes[j] for j in cols] + [None] * len(empty),
        },
        schema={"doc_id": pl.String, "code": pl.String},
    )
    if node_of is None:
        tidy, _notes = score_rows(gold_frame, score_frame, model="m")
    else:
        placed = [(codes[j], "grp", f"n{node:03d}") for j, node in enumerate(node_of) if node >= 0]
        ancestors = pl.DataFrame(placed, schema=["code", "level", "ancestor"], orient="row")
        tidy, _notes = score_rows(
            gold_frame, score_frame, model="m", ancestors=ancestors, levels=["grp"]
        )
    level = "leaf" if node_of is None else "grp"
    ranking = tidy.filter((pl.col("family") == "ranking") & (pl.col("level") == level))
    return {(a, m): v for a, m, v in ranking.select("average", "metric", "value").iter_rows()}


def _todays_rows(
    scores: np.ndarray, gold: np.ndarray, node_of: np.ndarray | None = None
) -> dict[str, float]:
    """Today's AUC rows by average (micro, macro)."""
    return {a: v for (a, m), v in _todays_ranking(scores, gold, node_of).items() if m == "auc"}


@pytest.mark.parametrize("block_docs", [1, 3, 7, 1024])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equal_to_todays_rows_bit_for_bit_and_to_sklearn(seed, block_docs):
    scores, gold = _matrix(seed, 41, 13)
    rows, cols = np.nonzero(gold)
    result = blocked_aucs(scores, rows, cols, block_docs=block_docs)
    today = _todays_rows(scores, gold)
    assert result.micro == today["micro"]  # the same bits, not merely close
    assert result.macro == today["macro"]
    micro, macro = _sklearn(scores, gold)
    assert result.micro == pytest.approx(micro, abs=1e-12)
    assert result.macro == pytest.approx(macro, abs=1e-12)


def test_hand_worked_with_ties():
    """2 documents x 2 codes. Cells: (0,0)=0.9 gold, (0,1)=0.5, (1,0)=0.5 gold, (1,1)=0.1.
    Micro: positives 0.9 and 0.5, negatives 0.5 and 0.1: 0.9 beats both (2), 0.5 beats 0.1
    and ties 0.5 (1.5): 3.5 / 4. Code 0: both documents gold, no negative: undefined; code 1:
    no positive: undefined. So no macro."""
    scores = np.array([[0.9, 0.5], [0.5, 0.1]], dtype=np.float32)
    result = blocked_aucs(scores, np.array([0, 1]), np.array([0, 0]), block_docs=1)
    assert result.micro == 3.5 / 4
    assert np.isnan(result.per_label).all()
    assert result.macro is None


def test_per_code_hand_worked():
    """Code 0 over 3 documents: scores 0.2 (gold), 0.2, 0.7: the positive ties one negative
    and loses to the other: 0.5 / 2 = 0.25. Code 1: 0.1, 0.3 (gold), 0.3 (gold): both beat
    the one negative: 1.0."""
    scores = np.array([[0.2, 0.1], [0.2, 0.3], [0.7, 0.3]], dtype=np.float64)
    result = blocked_aucs(scores, np.array([0, 1, 2]), np.array([0, 1, 1]), block_docs=2)
    assert result.per_label.tolist() == [0.25, 1.0]
    assert result.macro == 0.625


def test_a_memory_mapped_npy_gives_the_same_bits(tmp_path):
    scores, gold = _matrix(5, 57, 19, decimals=2)
    path = tmp_path / "s.npy"
    np.save(path, scores)
    rows, cols = np.nonzero(gold)
    mapped = blocked_aucs(np.load(path, mmap_mode="r"), rows, cols, block_docs=8)
    whole = blocked_aucs(scores, rows, cols, block_docs=10_000)
    assert mapped.micro == whole.micro
    assert np.array_equal(mapped.per_label, whole.per_label, equal_nan=True)


def test_gold_order_and_repeats_do_not_matter():
    scores, gold = _matrix(3, 20, 6)
    rows, cols = np.nonzero(gold)
    once = blocked_aucs(scores, rows, cols)
    order = np.random.default_rng(0).permutation(len(rows))
    twice = blocked_aucs(
        scores, np.concatenate([rows[order], rows]), np.concatenate([cols[order], cols])
    )
    assert once.micro == twice.micro
    assert np.array_equal(once.per_label, twice.per_label, equal_nan=True)


def test_without_positives_nothing_is_defined():
    result = blocked_aucs(np.zeros((3, 2)), np.array([], dtype=int), np.array([], dtype=int))
    assert result.micro is None and result.macro is None


@pytest.mark.parametrize(
    ("rows", "cols", "words"),
    [([3], [0], "outside"), ([0], [-1], "outside"), ([0, 1], [0], "one length")],
)
def test_bad_gold_is_refused(rows, cols, words):
    with pytest.raises(ValueError, match=words):
        blocked_aucs(np.zeros((3, 2)), np.array(rows), np.array(cols))


def test_non_finite_scores_are_refused():
    scores = np.zeros((4, 2))
    scores[3, 1] = math.nan
    with pytest.raises(ValueError, match="finite"):
        blocked_aucs(scores, np.array([0]), np.array([0]), block_docs=2)


def _naive_pooled(scores: np.ndarray, gold: np.ndarray, node_of: np.ndarray):
    """Max-pooling written out: a node's score is the maximum over its columns, its gold any."""
    nodes = int(node_of.max()) + 1
    pooled = np.stack([scores[:, node_of == n].max(axis=1) for n in range(nodes)], axis=1)
    pooled_gold = np.stack([gold[:, node_of == n].any(axis=1) for n in range(nodes)], axis=1)
    return pooled, pooled_gold


@pytest.mark.parametrize("block_docs", [1, 4, 1024])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_pooled_level_equals_todays_level_rows_and_sklearn(seed, block_docs):
    scores, gold = _matrix(seed, 37, 17)
    # nodes of three, two and one columns; column 16 has no node at the level
    node_of = np.array([0, 0, 0, 1, 1, 2, 3, 3, 3, 4, 5, 5, 6, 6, 6, 4, -1])
    rows, cols = np.nonzero(gold)
    result = blocked_aucs(scores, rows, cols, block_docs=block_docs, pooling=Pooling(node_of))
    today = _todays_rows(scores, gold, node_of)
    assert result.micro == today["micro"]
    assert result.macro == today["macro"]
    micro, macro = _sklearn(*_naive_pooled(scores, gold, node_of))
    assert result.micro == pytest.approx(micro, abs=1e-12)
    assert result.macro == pytest.approx(macro, abs=1e-12)


def test_a_node_without_columns_is_refused():
    with pytest.raises(ValueError, match="every node"):
        Pooling(np.array([0, 2, 2]))


def _mean_rows(today: dict[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    return {key: value for key, value in today.items() if key[0] == "mean"}


@pytest.mark.parametrize("block_docs", [1, 5, 1024])
@pytest.mark.parametrize(("seed", "decimals"), [(0, 1), (1, 1), (2, 3)])
def test_document_ranks_give_todays_mean_rows_bit_for_bit(seed, decimals, block_docs):
    """P@K, R@K, R-precision, MAP and nDCG@K from blocked document ranks equal today's rows;
    one decimal makes ties everywhere (ties by code, MAP's tied threshold)."""
    scores, gold = _matrix(seed, 33, 21, decimals=decimals, rate=0.15)
    rows, cols = np.nonzero(gold)
    ranks = blocked_document_ranks(scores, rows, cols, block_docs=block_docs)
    ours = document_values(ranks, scores.shape[0], DEFAULT_KS)
    today = _mean_rows(_todays_ranking(scores, gold))
    assert len(today) >= 8
    assert ours == {key: today[key] for key in ours} and set(ours) == set(today)


def test_document_ranks_order_ties_by_code_not_by_column():
    """Columns listed out of code order: ties are still broken by code, as today."""
    scores, gold = _matrix(4, 29, 15, decimals=1, rate=0.2)
    codes = [f"c{j:03d}" for j in np.random.default_rng(9).permutation(15)]
    code_order = np.argsort(np.argsort(codes))  # each column's rank in code order
    rows, cols = np.nonzero(gold)
    ranks = blocked_document_ranks(scores, rows, cols, block_docs=4, code_order=code_order)
    ours = document_values(ranks, scores.shape[0], DEFAULT_KS)
    today = _mean_rows(_todays_ranking(scores, gold, codes=codes))
    assert ours == today
    by_column = document_values(
        blocked_document_ranks(scores, rows, cols, block_docs=4), scores.shape[0], DEFAULT_KS
    )
    assert by_column != today  # the tie rule is visible here: the test can fail


def test_document_ranks_at_a_pooled_level():
    scores, gold = _matrix(6, 31, 17, decimals=1)
    node_of = np.array([0, 0, 0, 1, 1, 2, 3, 3, 3, 4, 5, 5, 6, 6, 6, 4, -1])
    rows, cols = np.nonzero(gold)
    ranks = blocked_document_ranks(scores, rows, cols, block_docs=6, pooling=Pooling(node_of))
    ours = document_values(ranks, scores.shape[0], DEFAULT_KS)
    assert ours == _mean_rows(_todays_ranking(scores, gold, node_of))


def test_document_ranks_hand_worked():
    """One document, codes 0..3 scored 0.5, 0.9, 0.5, 0.1; gold codes 2 and 3. Code 2 ties
    code 0 (0.5) and follows it by code: position 2 (0.9 and code 0 before it); code 3 is
    last: position 3. Precision at code 2's threshold (0.5: three codes, one gold) 1/3, at
    code 3's (all four, two gold) 2/4."""
    scores = np.array([[0.5, 0.9, 0.5, 0.1]])
    ranks = blocked_document_ranks(scores, np.array([0, 0]), np.array([3, 2]))
    assert ranks.doc.tolist() == [0, 0]
    assert ranks.position.tolist() == [2, 3]
    assert ranks.precision.tolist() == [1 / 3, 2 / 4]


#: Three nested levels over 17 columns (a tree: each sub node lies in one group, each group
#: in one chapter; column 16 is placed nowhere below the chapter) and one level that is not
#: nested (its node 0 spans columns of two groups: pooled on its own).
TREE = {
    "sub": np.array([0, 0, 1, 2, 2, 3, 4, 4, 5, 6, 7, 7, 8, 9, 9, 6, -1]),
    "grp": np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 4, 4, 5, 5, 5, 3, -1]),
    "chapter": np.array([0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 1, 2]),
    "odd": np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1]),
}


def test_shared_pooling_pools_every_level_as_its_own_pooling():
    scores, _gold = _matrix(8, 9, 17, decimals=2)
    shared = SharedPooling(TREE)
    assert set(shared.runs) == {"sub", "grp", "chapter"}  # "odd" is no tree level
    permuted = shared.permute(scores)
    for level, node_of in TREE.items():
        expected = Pooling(node_of).block(scores)
        assert np.array_equal(shared.block(level, scores, permuted), expected)


@pytest.mark.parametrize("block_docs", [1, 6, 1024])
def test_every_level_in_two_reads_equals_the_one_level_functions(block_docs):
    scores, gold = _matrix(9, 31, 17, decimals=1)
    rows, cols = np.nonzero(gold)
    code_order = np.argsort(np.argsort([f"c{j:03d}" for j in np.arange(17)[::-1]]))
    results = blocked_levels(
        scores, rows, cols, node_of=TREE, code_order=code_order, block_docs=block_docs
    )
    assert list(results) == ["leaf", *TREE]
    for level, (aucs, ranks) in results.items():
        pooling = Pooling(TREE[level]) if level != "leaf" else None
        order = code_order if level == "leaf" else None
        alone = blocked_aucs(scores, rows, cols, pooling=pooling, block_docs=4)
        assert aucs.micro == alone.micro
        assert np.array_equal(aucs.per_label, alone.per_label, equal_nan=True)
        alone_ranks = blocked_document_ranks(
            scores, rows, cols, pooling=pooling, code_order=order, block_docs=5
        )
        for field in ("doc", "position", "precision"):
            assert np.array_equal(getattr(ranks, field), getattr(alone_ranks, field))


def test_every_level_equals_todays_rows_at_a_level():
    scores, gold = _matrix(10, 29, 17, decimals=1)
    rows, cols = np.nonzero(gold)
    aucs, ranks = blocked_levels(scores, rows, cols, node_of=TREE)["grp"]
    today = _todays_ranking(scores, gold, TREE["grp"])
    assert (aucs.micro, aucs.macro) == (today["micro", "auc"], today["macro", "auc"])
    assert document_values(ranks, scores.shape[0], DEFAULT_KS) == _mean_rows(today)


def _unscored_case(seed: int):
    """13 matrix rows of 17 documents, 11 matrix columns of 16 codes: gold codes outside the
    matrix (each in the gold at least once) and documents without a row are unscored pairs,
    as they are when the gold is larger than a model's label space or document list."""
    rng = np.random.default_rng(seed)
    codes = [f"c{j:03d}" for j in range(16)]
    in_matrix = np.sort(rng.choice(16, 11, replace=False))
    extra = np.setdiff1d(np.arange(16), in_matrix)
    columns = [*in_matrix, *extra]  # full label ids: the matrix's columns, then the others
    scores = np.round(rng.random((13, 11)), 1)
    gold = rng.random((17, 16)) < 0.2
    gold[rng.integers(0, 17, len(extra)), extra] = True
    gold[16] = False  # a document without a row and without a gold code
    full_gold = gold[:, columns]  # rows: documents; columns: full label ids
    return scores, full_gold, codes, columns


def _todays_unscored(scores, full_gold, codes, columns, node_of=None):
    docs = [f"d{i:03d}" for i in range(full_gold.shape[0])]
    names = [codes[c] for c in columns]
    di, ci = np.indices(scores.shape).reshape(2, -1)
    score_frame = pl.DataFrame(
        {"doc_id": [docs[i] for i in di], "code": [names[j] for j in ci],
         "score": scores.reshape(-1).astype(np.float64)}
    )  # fmt: skip
    rows, cols = np.nonzero(full_gold)
    empty = [docs[i] for i in np.flatnonzero(~full_gold.any(axis=1))]
    gold_frame = pl.DataFrame(
        {"doc_id": [docs[i] for i in rows] + empty,
         "code": [names[j] for j in cols] + [None] * len(empty)},
        schema={"doc_id": pl.String, "code": pl.String},
    )  # fmt: skip
    levels = {}
    if node_of is not None:
        placed = [(names[j], "grp", f"n{n:03d}") for j, n in enumerate(node_of) if n >= 0]
        levels = {
            "ancestors": pl.DataFrame(placed, schema=["code", "level", "ancestor"], orient="row"),
            "levels": ["grp"],
        }
    tidy, _notes = score_rows(gold_frame, score_frame, model="m", **levels)
    level = "grp" if node_of is not None else "leaf"
    ranking = tidy.filter((pl.col("family") == "ranking") & (pl.col("level") == level))
    return {(a, m): v for a, m, v in ranking.select("average", "metric", "value").iter_rows()}


def _ours_unscored(scores, full_gold, codes, columns, node_of=None, block_docs=4):
    rows, cols = np.nonzero(full_gold)
    names = [codes[c] for c in columns]
    code_order = np.argsort(np.argsort(names))
    levels = {"grp": node_of} if node_of is not None else None
    results = blocked_levels(
        scores, rows, cols, node_of=levels, code_order=code_order,
        n_docs=full_gold.shape[0], extra_labels=full_gold.shape[1] - scores.shape[1],
        block_docs=block_docs,
    )  # fmt: skip
    aucs, ranks = results["grp" if node_of is not None else "leaf"]
    values = {("micro", "auc"): aucs.micro, ("macro", "auc"): aucs.macro}
    return values | document_values(ranks, full_gold.shape[0], DEFAULT_KS)


@pytest.mark.parametrize("block_docs", [1, 4, 1024])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_unscored_codes_and_documents_as_today(seed, block_docs):
    case = _unscored_case(seed)
    today = _todays_unscored(*case)
    assert _ours_unscored(*case, block_docs=block_docs) == today
    assert len(today) == 13


@pytest.mark.parametrize("seed", [0, 3])
def test_unscored_codes_at_a_level_as_today(seed):
    """Nodes in name order over the full label space; node 6 holds only codes outside the
    matrix (an unscored node), some codes have no node."""
    scores, full_gold, codes, columns = _unscored_case(seed)
    names = [codes[c] for c in columns]
    node_of = np.array([min(int(n[1:]) // 3, 5) for n in names])
    outside = np.arange(11, 16)
    node_of[outside[:3]] = 6
    node_of[[0, 12]] = -1
    today = _todays_unscored(scores, full_gold, codes, columns, node_of)
    assert _ours_unscored(scores, full_gold, codes, columns, node_of) == today


def _todays_calibration(scores, full_gold, codes, columns) -> dict[str, float]:
    docs = [f"d{i:03d}" for i in range(full_gold.shape[0])]
    names = [codes[c] for c in columns]
    di, ci = np.indices(scores.shape).reshape(2, -1)
    score_frame = pl.DataFrame(
        {"doc_id": [docs[i] for i in di], "code": [names[j] for j in ci],
         "score": scores.reshape(-1).astype(np.float64)}
    )  # fmt: skip
    rows, cols = np.nonzero(full_gold)
    empty = [docs[i] for i in np.flatnonzero(~full_gold.any(axis=1))]
    gold_frame = pl.DataFrame(
        {"doc_id": [docs[i] for i in rows] + empty,
         "code": [names[j] for j in cols] + [None] * len(empty)},
        schema={"doc_id": pl.String, "code": pl.String},
    )  # fmt: skip
    tidy, _notes = score_rows(gold_frame, score_frame, model="m")
    over_all_pairs = (pl.col("family") == "calibration") & (pl.col("average") == "micro")
    rows = tidy.filter(over_all_pairs).select("metric", "value").rows()
    return dict(rows)


def _calibration_case(seed: int):
    """The unscored case with its matrix columns in code order (today's pairs are in code
    order; one block is then today's array, cell for cell)."""
    codes = [f"c{j:03d}" for j in range(16)]
    rng = np.random.default_rng(seed)
    in_matrix = np.sort(rng.choice(16, 11, replace=False))
    columns = [*in_matrix, *np.setdiff1d(np.arange(16), in_matrix)]
    gold = rng.random((17, 16)) < 0.2
    return np.round(rng.random((13, 11)), 3), gold[:, columns], codes, columns


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_calibration_in_one_block_is_todays_to_the_last_bit(seed):
    scores, full_gold, codes, columns = _calibration_case(seed)
    rows, cols = np.nonzero(full_gold)
    ours = blocked_calibration(scores, rows, cols, n_docs=17, extra_labels=5, block_docs=1024)
    assert ours == _todays_calibration(scores, full_gold, codes, columns)


@pytest.mark.parametrize("block_docs", [1, 4])
def test_calibration_in_blocks_is_todays_within_ulps(block_docs):
    scores, full_gold, codes, columns = _calibration_case(3)
    rows, cols = np.nonzero(full_gold)
    ours = blocked_calibration(scores, rows, cols, n_docs=17, extra_labels=5, block_docs=block_docs)
    today = _todays_calibration(scores, full_gold, codes, columns)
    assert ours == pytest.approx(today, rel=1e-14)
    naive = float(np.mean(
        (np.pad(scores, ((0, 4), (0, 5))) - full_gold).astype(np.float64) ** 2
    ))  # fmt: skip
    assert ours["brier"] == pytest.approx(naive, rel=1e-14)


def test_calibration_refuses_scores_outside_0_1():
    scores = np.array([[0.2, 1.5]])
    assert blocked_calibration(scores, np.array([0]), np.array([0])) is None


@pytest.mark.parametrize("block_docs", [1, 5, 1024])
def test_levels_side_by_side_give_the_same_bits(block_docs, monkeypatch):
    """Every level of a block is located and counted on the run's threads at once (each
    level's blocks still in order): the same AUCs and ranks, bit for bit, as one thread."""
    import threading

    from hieval.metrics import blocked

    scores, gold = _matrix(23, 37, 17, decimals=1)
    rows, cols = np.nonzero(gold)
    alone = blocked_levels(scores, rows, cols, node_of=TREE, block_docs=block_docs, threads=1)
    where: set[str] = set()
    inner = blocked._count

    def count(state, block):
        where.add(threading.current_thread().name)
        inner(state, block)

    monkeypatch.setattr(blocked, "_count", count)
    beside = blocked_levels(scores, rows, cols, node_of=TREE, block_docs=block_docs, threads=2)
    assert {name.split("_")[0] for name in where} == {"levels"}  # not the caller's thread
    assert list(beside) == list(alone)
    for level, (aucs, ranks) in beside.items():
        aucs_alone, ranks_alone = alone[level]
        assert aucs.micro == aucs_alone.micro
        assert np.array_equal(aucs.per_label, aucs_alone.per_label, equal_nan=True)
        for field in ("doc", "position", "precision"):
            assert np.array_equal(getattr(ranks, field), getattr(ranks_alone, field))
