"""Normalised tables kept in memory for the encoder (hieval.inputs.handoff): the encoder's labels
taken from the kept keys are the labels it reads from the written files (the file path, forced
by letting the kept tables go), for the inputs the common-case normaliser takes; a file changed
since it was written, or a code outside the space, is read from disk; what is kept is bounded.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hieval.engine import keys
from hieval.engine.driver import encode_labels
from hieval.hierarchy.table import read_level_table, write_level_table
from hieval.inputs import handoff, parquet_fast
from hieval.inputs.normalize import normalize_labels
from tests.test_normalize_onepass import KNOWN, UNKNOWN


@pytest.fixture(autouse=True)
def _nothing_kept_before_or_after():
    handoff.forget()
    yield
    handoff.forget()


@pytest.fixture
def tree(icd9, tmp_path):
    levels, ancestors = tmp_path / "levels.parquet", tmp_path / "ancestors.parquet"
    write_level_table(icd9, levels, ancestors)
    return read_level_table(levels), ancestors


# Document ids whose byte order differs from other orders (case, digits, non-ASCII, lengths).
NAMES = ["d1", "d10", "d2", "D3", "é4", "e5", "z", "Z9", "ö", "a b", "0", "00"]


def rows_of(rng: random.Random, docs: list, *, n: int) -> list[tuple]:
    rows = [(rng.choice(docs), rng.choice(KNOWN + UNKNOWN)) for _ in range(n)]
    return rows + rows[: rng.randint(0, 4)]  # a few duplicates


def write(path: Path, rows: list[tuple]) -> Path:
    docs = [d for d, _ in rows]
    pq.write_table(pa.table({"doc_id": docs, "code": [c for _, c in rows]}), path)
    return path


def normalise(tmp_path: Path, table, gold_rows, pred_rows, *, against_gold: bool = True):
    """Gold and predictions normalised (the predictions' documents outside the gold dropped,
    unless ``against_gold`` is false); the two output paths."""
    gold, pred = tmp_path / "gold.parquet", tmp_path / "pred.parquet"
    common = {"hierarchy": table, "unknown_codes": "drop"}
    normalize_labels(
        write(tmp_path / "gold_in.parquet", gold_rows), name="gold", role="gold", out=gold, **common
    )
    normalize_labels(
        write(tmp_path / "pred_in.parquet", pred_rows),
        name="m",
        role="predictions",
        out=pred,
        gold_docs=gold if against_gold else None,
        unknown_docs="drop",
        **common,
    )
    return gold, pred


def spy(function, taken: list[bool]):
    """``function``, recording whether each call returned something."""

    def called(*args, **kwargs):
        result = function(*args, **kwargs)
        taken.append(result is not None)
        return result

    return called


def assert_same_labels(a: keys.Labels, b: keys.Labels) -> None:
    assert np.array_equal(a.keys, b.keys)
    assert a.doc_ids.to_list() == b.doc_ids.to_list()
    assert a.doc_ids.dtype == b.doc_ids.dtype == pl.String
    assert np.array_equal(a.in_gold, b.in_gold)
    assert a.space.codes.to_list() == b.space.codes.to_list()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("case", ["same-documents", "fewer-predicted", "outside-gold", "integers"])
def test_kept_keys_encode_as_the_written_files_read(tree, tmp_path, monkeypatch, seed, case):
    rng = random.Random(f"{seed}-{case}")
    table, ancestors = tree
    docs = list(range(1, 13)) if case == "integers" else NAMES
    gold_rows = rows_of(rng, docs, n=60) + [(d, KNOWN[0]) for d in docs]  # every document
    pred_docs = docs[: len(docs) // 2] if case == "fewer-predicted" else docs
    pred_rows = rows_of(rng, pred_docs, n=60)
    if case == "outside-gold":  # documents the gold lacks (predictions not checked against it)
        pred_rows += [("only-predicted", KNOWN[1]), ("é-only", KNOWN[2])]
    against_gold = case != "outside-gold"
    gold, pred = normalise(tmp_path, table, gold_rows, pred_rows, against_gold=against_gold)
    assert handoff.kept(gold) is not None and handoff.kept(pred) is not None  # the rank path ran
    space = keys.CodeSpace.build(ancestors, table.levels)
    from_memory = keys._kept_labels(gold, pred, space)
    assert from_memory is not None
    handoff.forget()
    from_files = keys.encode(gold, pred, space)
    assert_same_labels(from_memory, from_files)
    if case == "outside-gold":
        assert not from_files.in_gold.all()
    # and through the driver, with the space built for the labels' codes
    normalise(tmp_path, table, gold_rows, pred_rows, against_gold=against_gold)
    taken = []
    monkeypatch.setattr(keys, "_kept_labels", spy(keys._kept_labels, taken))
    kept = encode_labels(gold, pred, ancestors, levels=table.levels)
    assert taken == [True]
    handoff.forget()
    assert_same_labels(kept, encode_labels(gold, pred, ancestors, levels=table.levels))


def test_a_file_changed_since_it_was_written_is_read_from_disk(tree, tmp_path):
    table, ancestors = tree
    gold_rows = [("d1", KNOWN[0]), ("d2", KNOWN[1]), ("d3", KNOWN[2])]
    gold, pred = normalise(tmp_path, table, gold_rows, gold_rows)
    written = pl.read_parquet(gold)
    written.head(2).write_parquet(gold)  # the user's (or another process's) new gold
    assert handoff.kept(gold) is None
    labels = encode_labels(gold, pred, ancestors, levels=table.levels)
    assert labels.in_gold.tolist() == [True, True, False]


def test_a_code_outside_the_space_leaves_the_labels_to_the_files(tree, tmp_path):
    table, ancestors = tree
    rows = [("d1", KNOWN[0]), ("d2", KNOWN[1]), ("d2", KNOWN[3])]
    gold, pred = normalise(tmp_path, table, rows, rows)
    anc = pl.read_parquet(ancestors)
    narrow = keys.CodeSpace.build(anc.filter(pl.col("code") != KNOWN[3]), table.levels)
    assert keys._kept_labels(gold, pred, narrow) is None  # appended codes: the files' order
    from_files = keys.encode(gold, pred, narrow)
    assert KNOWN[3] in from_files.space.codes.to_list()


def test_what_is_kept_is_bounded(tree, tmp_path, monkeypatch):
    table, _ = tree
    rows = [("d1", KNOWN[0]), ("d2", KNOWN[1])]
    (tmp_path / "a").mkdir()
    gold, pred = normalise(tmp_path / "a", table, rows, rows)
    size = max(handoff.kept(gold).nbytes, handoff.kept(pred).nbytes)
    monkeypatch.setattr(handoff, "MAX_BYTES", size + size // 2)  # one table at a time
    (tmp_path / "b").mkdir()
    gold, pred = normalise(tmp_path / "b", table, rows, rows)
    assert handoff.kept(gold) is None  # let go when the predictions came
    assert handoff.kept(pred) is not None
    monkeypatch.setattr(handoff, "MAX_BYTES", size // 2)
    (tmp_path / "c").mkdir()
    gold, pred = normalise(tmp_path / "c", table, rows, rows)
    assert handoff.kept(gold) is None and handoff.kept(pred) is None  # too large to keep


@pytest.mark.parametrize("column", ["doc_id", "code"])
def test_distinct_values_of_a_kept_table_are_its_files(tree, tmp_path, column):
    table, _ = tree
    rng = random.Random(column)
    gold_rows = rows_of(rng, NAMES, n=60)
    pred_rows = rows_of(rng, NAMES[:5], n=30)
    paths = normalise(tmp_path, table, gold_rows, pred_rows)
    kept = [sorted(handoff.distinct_values(path, column).to_list()) for path in paths]
    handoff.forget()
    assert kept == [sorted(handoff.distinct_values(path, column).to_list()) for path in paths]
    assert kept == [sorted(pl.read_parquet(path)[column].unique().to_list()) for path in paths]


@pytest.mark.parametrize("kept", [True, False])
def test_documents_outside_the_gold_whether_it_is_kept_or_read(tree, tmp_path, monkeypatch, kept):
    table, _ = tree
    gold_rows = [(d, KNOWN[0]) for d in NAMES[:8]]
    gold, _ = normalise(tmp_path, table, gold_rows, gold_rows)
    if kept:  # the gold's documents come from memory: its file is not opened
        assert handoff.kept(gold).doc_ranks is not None
        monkeypatch.setattr(pq, "ParquetFile", None)
    else:
        handoff.forget()
    for pred_docs in (NAMES[:8], NAMES[2:5], NAMES[4:], ["new", *NAMES[:3]]):
        docs = pa.array(sorted(pred_docs), pa.string())
        ranks = np.arange(len(pred_docs), dtype=np.int64)
        keys = np.sort(ranks << parquet_fast.RANK_BITS)
        names, outside = parquet_fast._outside_gold(keys, docs, gold)
        expected = sorted(set(pred_docs) - set(NAMES[:8]))
        assert names == expected
        assert [docs[int(r)].as_py() for r in outside] == expected


def test_a_run_lets_its_kept_tables_go(tree, tmp_path):
    table, _ = tree
    rows = [("d1", KNOWN[0]), ("d2", KNOWN[1])]
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        normalise(tmp_path / folder, table, rows, rows)
    handoff.forget(tmp_path / "a")
    assert handoff.kept(tmp_path / "a" / "gold.parquet") is None
    assert handoff.kept(tmp_path / "b" / "gold.parquet") is not None
    kept = handoff.kept(tmp_path / "b" / "pred.parquet")
    assert kept.nbytes > kept.keys.nbytes  # documents and codes count too


def test_evaluate_and_the_evaluator_keep_nothing_once_done(icd9, tmp_path):
    import hieval

    gold = pl.DataFrame(
        {"doc_id": ["a", "a", "b", "c"], "code": ["401.9", "428.0", "250.00", "584.9"]}
    )
    pred = pl.DataFrame({"doc_id": ["a", "b", "c"], "code": ["401.9", "250.00", "599.0"]})
    for frame, name in ((gold, "gold"), (pred, "pred")):
        frame.write_parquet(tmp_path / f"{name}.parquet")
    hieval.evaluate(tmp_path / "gold.parquet", {"m": tmp_path / "pred.parquet"}, cache=tmp_path)
    assert not handoff._kept
    evaluator = hieval.Evaluator(cache=tmp_path)
    for docs in (["a"], ["b", "c"]):
        chosen = pl.col("doc_id").is_in(docs)
        evaluator.update(gold.filter(chosen), {"m": pred.filter(chosen)})
    evaluator.compute()
    assert not handoff._kept


def test_a_kept_tables_used_ranks_are_computed_once_and_shared_read_only():
    """The encoder and the conventions' size check both ask for them (one pass over the keys
    each at 100x MIMIC-III): the second asker gets the first's answer, which no one may change."""
    bits = 20
    table = handoff.KeptLabels(
        np.array([0 << bits | 1, 0 << bits | 5, 2 << bits | 3], dtype=np.int64),
        pl.Series(["d0", "d1", "d2"]),
        pl.Series(list("abcdef")),
        bits,
    )
    assert table.code_positions.tolist() == [1, 3, 5]  # a naive reading: codes b, d, f
    assert table.doc_positions.tolist() == [0, 2]
    assert table.code_positions is table.code_positions
    assert table.doc_positions is table.doc_positions
    with pytest.raises(ValueError, match="read-only"):
        table.code_positions[0] = 4
    handed = handoff.KeptLabels(table.keys, table.docs, table.codes, bits, np.array([0, 2]),
                                np.array([1, 3, 5]))  # fmt: skip
    assert handed.code_positions.tolist() == [1, 3, 5]
    with pytest.raises(ValueError, match="read-only"):  # the normaliser's, shared as well
        handed.doc_positions[0] = 1


@pytest.mark.parametrize("case", ["all-known", "unknown-codes-dropped", "documents-dropped"])
def test_the_kept_code_ranks_are_the_codes_the_file_holds(tree, tmp_path, case):
    """The normaliser hands the encoder its code ranks when every code it read keeps a row;
    where codes or documents were dropped, the ranks are found from the keys. Either way they
    name exactly the codes of the written file."""
    table, _ = tree
    gold_rows = [(d, KNOWN[i % 4]) for i, d in enumerate(NAMES)]
    pred_rows = [(d, KNOWN[(i + 1) % 4]) for i, d in enumerate(NAMES)]
    if case == "unknown-codes-dropped":
        pred_rows.append((NAMES[0], UNKNOWN[0]))
    if case == "documents-dropped":  # its code goes with it
        pred_rows.append(("outside-the-gold", KNOWN[5]))
    _, pred = normalise(tmp_path, table, gold_rows, pred_rows)
    kept = handoff.kept(pred)
    assert (kept.code_ranks is not None) == (case == "all-known")
    named = kept.codes.gather(kept.code_positions).to_list()
    assert named == sorted(pl.read_parquet(pred)["code"].unique().to_list())
    assert KNOWN[5] not in named


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(
    "case", ["same-documents", "fewer-predicted", "later-predicted", "outside-gold", "one-document"]
)
def test_keys_remapped_in_two_parts_are_the_files_keys(tree, tmp_path, monkeypatch, seed, case):
    """A large encoding is remapped and sorted in two parts of documents side by side: cut
    anywhere (a table with no document in one part, a single document), the keys are those
    read from the files."""
    monkeypatch.setattr(keys, "_SPLIT_FROM", 0)  # two parts even for a handful of labels
    rng = random.Random(f"{seed}-{case}")
    table, ancestors = tree
    docs = NAMES[:1] if case == "one-document" else NAMES
    gold_rows = rows_of(rng, docs, n=60) + [(d, KNOWN[0]) for d in docs]
    pred_docs = {"fewer-predicted": docs[:3], "later-predicted": docs[-3:]}.get(case, docs)
    pred_rows = rows_of(rng, pred_docs, n=40)
    if case == "outside-gold":
        pred_rows += [("only-predicted", KNOWN[1]), ("0-only", KNOWN[2])]
    against_gold = case != "outside-gold"
    gold, pred = normalise(tmp_path, table, gold_rows, pred_rows, against_gold=against_gold)
    space = keys.CodeSpace.build(ancestors, table.levels)
    halves = keys._kept_labels(gold, pred, space, threads=2)
    whole = keys._kept_labels(gold, pred, space, threads=1)
    handoff.forget()
    from_files = keys.encode(gold, pred, space)
    assert_same_labels(halves, from_files)
    assert_same_labels(whole, from_files)
