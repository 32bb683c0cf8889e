"""hieval.Evaluator reduces each batch as it comes (issue 31): over random zoos (hard and scored
models; DataFrame, mapping and dense batches; uneven batches, 1-document batches, batches where a
model predicts nothing), k batches give :func:`hieval.evaluate` over all documents at once, bit
for bit (metrics, intervals, comparisons, node counts), and the Evaluator keeps no rows of a
batch once it is counted."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import hieval
from hieval.experiments.demo import make_demo

BOOTSTRAP = {"bootstrap": 20, "permutations": 50}


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


def random_zoo(levels: pl.DataFrame, seed: int, documents: int):
    """The demo's hard models and a scored one; a mapping holds a (document, code) once, so
    the frames do too."""
    gold, predictions = make_demo(levels, seed=seed, documents=documents, codes_per_document=4)
    rng = np.random.default_rng(seed)
    over = predictions["over_predictor"]
    predictions["scored"] = over.with_columns(score=pl.Series(np.round(rng.random(over.height), 3)))
    models = {n: predictions[n] for n in ("over_predictor", "cautious_coder", "scored")}
    # One model leaves a third of the documents without a row (empty predictions).
    docs = gold["doc_id"].unique().sort()
    models["cautious_coder"] = models["cautious_coder"].filter(
        ~pl.col("doc_id").is_in(docs.gather_every(3).implode())
    )
    return gold, {
        n: f.unique(["doc_id", "code"], keep="first", maintain_order=True)
        for n, f in models.items()
    }


def uneven_parts(docs: list[str], seed: int) -> list[list[str]]:
    """Batches of 1, 1, then random sizes: at least one document each."""
    rng = np.random.default_rng(seed)
    rest = docs[2:]
    cuts = sorted(rng.choice(np.arange(1, len(rest)), size=4, replace=False).tolist())
    return [docs[:1], docs[1:2], *(list(p) for p in np.split(np.array(rest, dtype=object), cuts))]


def as_mapping(frame: pl.DataFrame, docs: list[str]) -> dict:
    """``doc -> codes`` (or ``doc -> {code: score}``), every document of ``docs`` that has
    rows; an empty mapping when none has."""
    part = frame.filter(pl.col("doc_id").is_in(docs))
    grouped = part.group_by("doc_id", maintain_order=True)
    if "score" in frame.columns:
        rows = grouped.agg("code", "score").iter_rows()
        return {d: dict(zip(c, s, strict=True)) for d, c, s in rows}
    return {d: list(c) for d, c in grouped.agg("code").iter_rows()}


def same(ours: hieval.Evaluation, whole: hieval.Evaluation) -> None:
    assert_frame_equal(ours.metrics, whole.metrics, check_exact=True)
    assert_frame_equal(ours.nodes, whole.nodes, check_exact=True)
    for table in ("intervals", "comparisons"):
        theirs = getattr(whole, table)
        if theirs is None:
            assert getattr(ours, table) is None
        else:
            assert_frame_equal(getattr(ours, table), theirs, check_exact=True)
    # The analysis tables read the pooled normalised labels: equal too, file for file.
    tables = sorted(
        p.relative_to(whole._folder)
        for sub in ("", "codes", "confusions")
        for p in (whole._folder / sub).glob("*.parquet")
    )
    assert {"errors.parquet", "conventions.parquet"} <= {t.as_posix() for t in tables}
    for table in tables:
        assert_frame_equal(
            pl.read_parquet(ours._folder / table), pl.read_parquet(whole._folder / table)
        )


@pytest.mark.parametrize(
    ("seed", "kind", "options"),
    [
        (1, "frame", BOOTSTRAP),
        (2, "mapping", BOOTSTRAP),
        (3, "frame", {"label_set": "observed", "icm_empty_gold": "drop", "max_level": "c"}),
        (4, "mapping", {"top_k": 3, "k": (1, 3)}),
    ],
)
def test_random_zoo_in_batches_equals_one_evaluate(icd9, cache, seed, kind, options):
    gold, models = random_zoo(icd9.frame, seed, documents=36)
    docs = gold["doc_id"].unique(maintain_order=True).to_list()
    parts = uneven_parts(docs, seed)
    assert min(map(len, parts)) == 1 and len(parts) == 7
    evaluator = hieval.Evaluator(cache=cache, **options)
    for part in parts:
        if kind == "frame":
            gold_batch = gold.filter(pl.col("doc_id").is_in(part))
            batch = {n: f.filter(pl.col("doc_id").is_in(part)) for n, f in models.items()}
        else:
            gold_batch = as_mapping(gold, part)
            batch = {n: as_mapping(f, part) for n, f in models.items()}
        evaluator.update(gold_batch, batch)
    # The first batch's document has no row of cautious_coder: a batch it predicts nothing in.
    assert not models["cautious_coder"].filter(pl.col("doc_id") == parts[0][0]).height
    whole = hieval.evaluate(gold, models, cache=cache, **options)
    ours = evaluator.compute()
    same(ours, whole)
    assert ours.records["scored"]["labels"] == whole.records["scored"]["labels"]
    assert ours.records["cautious_coder"]["warnings"] == whole.records["cautious_coder"]["warnings"]


@pytest.mark.parametrize("order", ["interleaved", "reversed"])
def test_batches_in_any_document_order_equal_one_evaluate(icd9, cache, order):
    """Batches whose documents interleave (pooled by a sort) or come in reverse order (pooled
    by concatenating the batches in document order) give the same tables as one evaluate."""
    gold, models = random_zoo(icd9.frame, 5, documents=30)
    docs = sorted(gold["doc_id"].unique().to_list())
    if order == "interleaved":
        parts = [docs[i::4] for i in range(4)]
    else:
        parts = [docs[i : i + 7] for i in range(0, len(docs), 7)][::-1]
    evaluator = hieval.Evaluator(cache=cache, **BOOTSTRAP)
    for part in parts:
        keep = pl.col("doc_id").is_in(part)
        evaluator.update(gold.filter(keep), {n: f.filter(keep) for n, f in models.items()})
    ours, whole = evaluator.compute(), hieval.evaluate(gold, models, cache=cache, **BOOTSTRAP)
    same(ours, whole)
    # The pooled normalised tables are sorted as normalisation sorts a whole input.
    inputs = Path("work", "inputs")
    tables = sorted(
        p.relative_to(whole._folder) for p in (whole._folder / inputs).rglob("*.parquet")
    )
    assert len(tables) == 1 + 2 * len(models)
    for table in tables:
        assert_frame_equal(
            pl.read_parquet(ours._folder / table), pl.read_parquet(whole._folder / table)
        )


def test_dense_score_batches_equal_one_evaluate(cache):
    codes = ["401.9", "428.0", "250.00", "V10.3", "038.9"]
    rng = np.random.default_rng(8)
    docs = [f"d{i:02d}" for i in range(23)]
    scores = np.round(rng.random((len(docs), len(codes))), 2)
    gold = {d: [codes[i % 5], codes[(i * 3) % 5]] for i, d in enumerate(docs)}
    evaluator = hieval.Evaluator(cache=cache, **BOOTSTRAP)
    for rows in (slice(0, 1), slice(1, 9), slice(9, 10), slice(10, 23)):
        part = docs[rows]
        evaluator.update(
            {d: gold[d] for d in part},
            {"m": hieval.dense(scores[rows], codes=codes, doc_ids=part)},
        )
    whole = hieval.evaluate(
        gold, {"m": hieval.dense(scores, codes=codes, doc_ids=docs)}, cache=cache, **BOOTSTRAP
    )
    same(evaluator.compute(), whole)


def test_a_document_in_two_batches_is_refused_naming_it_and_earlier_batches_stand(cache):
    gold = {"a": ["401.9"], "b": ["250.00", "428.0"], "c": ["V10.3"]}
    pred = {"a": ["401.9", "428.0"], "b": ["250.00"], "c": ["038.9"]}
    # Every batch its own chunk, reduced at its update (tests/test_evaluator_chunks.py: an
    # error found in a chunk of earlier batches).
    evaluator = hieval.Evaluator(cache=cache, reduce_rows=1)
    evaluator.update({d: gold[d] for d in "ab"}, {"m": {d: pred[d] for d in "ab"}})
    with pytest.raises(hieval.InputError, match=r"gold: batch 2: document 'b' came in an earl"):
        evaluator.update({"b": ["401.9"], "c": gold["c"]}, {"m": {"c": pred["c"]}})
    # A batch refused by normalisation (an unknown code) leaves no trace either, with the
    # message hieval.evaluate gives for the same input.
    bogus = {"c": ["bogus"]}
    with pytest.raises(hieval.HievalError) as whole_error:
        hieval.evaluate(bogus, {"m": {"c": ["401.9"]}}, cache=cache)
    with pytest.raises(hieval.HievalError) as batch_error:
        evaluator.update(bogus, {"m": {"c": ["401.9"]}})
    assert str(batch_error.value) == str(whole_error.value)
    assert "bogus" in str(batch_error.value)
    evaluator.update({"c": gold["c"]}, {"m": {"c": pred["c"]}})
    same(evaluator.compute(), hieval.evaluate(gold, {"m": pred}, cache=cache))


def test_predictions_for_documents_outside_the_batch_gold(cache):
    """``unknown_docs`` judges a batch's predictions against the batch's gold."""
    gold = {"a": ["401.9"], "b": ["250.00"]}
    evaluator = hieval.Evaluator(cache=cache)
    with pytest.raises(hieval.InputError, match="zz") as batch_error:
        evaluator.update(gold, {"m": {"a": ["401.9"], "zz": ["428.0"]}})
    with pytest.raises(hieval.InputError) as whole_error:
        hieval.evaluate(gold, {"m": {"a": ["401.9"], "zz": ["428.0"]}}, cache=cache)
    assert str(batch_error.value) == str(whole_error.value)
    dropping = hieval.Evaluator(cache=cache, unknown_docs="drop")
    dropping.update({"a": gold["a"]}, {"m": {"a": ["401.9"], "zz": ["428.0"]}})
    dropping.update({"b": gold["b"]}, {"m": {}})
    whole = hieval.evaluate(
        gold, {"m": {"a": ["401.9"], "zz": ["428.0"]}}, cache=cache, unknown_docs="drop"
    )
    ours = dropping.compute()
    same(ours, whole)
    assert ours.records["m"]["unknown_documents_dropped"] == 1


def _state(value: object, seen: set[int] | None = None):
    """Every object reachable from an Evaluator's attributes (its own state, not modules)."""
    seen = set() if seen is None else seen
    if id(value) in seen or isinstance(value, type) or callable(value):
        return
    seen.add(id(value))
    yield value
    children = []
    if isinstance(value, dict):
        children = [*value.keys(), *value.values()]
    elif isinstance(value, list | tuple | set):
        children = list(value)
    elif hasattr(value, "__dict__") and type(value).__module__.startswith("hieval"):
        children = list(vars(value).values())
    for child in children:
        yield from _state(child, seen)


def test_no_rows_of_a_batch_are_kept(icd9, cache):
    """After update, the Evaluator holds no table of label rows (``doc_id, code``) nor
    scores in memory, and its folder no staged copy of the batch: only counts, per-document
    rows and the engine's integer keys (and, for ranking, the normalised scores on disk)."""
    gold, models = random_zoo(icd9.frame, 9, documents=30)
    evaluator = hieval.Evaluator(cache=cache)
    evaluator.update(gold, models)
    evaluator._settle()  # its counting, in the background until the next update or compute
    found = list(_state(evaluator))
    frames = [v for v in found if isinstance(v, pl.DataFrame)]
    assert frames  # the counts are kept as frames
    rows = [f.columns for f in frames if {"doc_id", "code"} <= set(f.columns)]
    assert not rows and not [f.columns for f in frames if "score" in f.columns]
    arrays = [v for v in found if isinstance(v, np.ndarray)]
    assert arrays and all(a.dtype.kind in "biu" for a in arrays)  # keys and flags, no scores
    kept = {p.relative_to(evaluator._folder).as_posix() for p in evaluator._folder.rglob("*")}
    batch = {p for p in kept if p.startswith("chunk-1/")}
    assert not [p for p in batch if p.startswith("chunk-1/inputs")]
    # The normalised decided labels stay on disk: the conventions and the error analysis read them.
    assert "chunk-1/work/inputs/predictions/cautious_coder.parquet" in batch
    assert "chunk-1/work/inputs/scores/scored.parquet" in batch
    assert "chunk-1/work/inputs/scores/cautious_coder.parquet" not in batch  # hard: nothing ranked


@pytest.mark.parametrize(
    "options",
    [{"threshold": "tune"}, {"dev_gold": {"a": ["401.9"]}}, {"train_gold": {"a": ["401.9"]}}],
)
def test_options_needing_whole_inputs_are_refused(cache, options):
    with pytest.raises(hieval.InputError, match=r"use hieval\.evaluate"):
        hieval.Evaluator(cache=cache, **options)


def test_lenient_code_format_is_refused_naming_it(cache):
    """A record counts the distinct codes read leniently in its input, which do not add up
    over batches: refused rather than reduced wrongly (the count policies are reduced:
    tests/test_evaluator_background.py)."""
    with pytest.raises(hieval.InputError, match=r"code_format='lenient'.*use hieval\.evaluate"):
        hieval.Evaluator(cache=cache, code_format="lenient")


def test_a_refused_first_batch_leaves_nothing_behind(cache):
    evaluator = hieval.Evaluator(cache=cache)
    with pytest.raises(hieval.HievalError, match="bogus"):
        evaluator.update({"a": ["bogus"]}, {"x": {"a": ["401.9"]}})
    evaluator.update({"a": ["401.9"]}, {"m": {"a": ["401.9"]}})
    assert evaluator.compute().models == ["m"]
    assert sorted(p.name for p in evaluator._folder.iterdir()) == ["chunk-1", "hierarchy"]


def test_codes_placed_by_their_syntax_in_some_batches(cache):
    """Codes the hierarchy lacks (428.09, 999.99) are placed by syntax batch by batch; ICM's
    node weights and the item sums still equal one evaluation's."""
    gold = {"a": ["401.9", "428.09"], "b": ["250.00"], "c": ["428.09", "V10.3"], "d": []}
    pred = {"a": ["401.9", "428.09", "999.99"], "b": ["250.0"], "c": ["428.0"], "d": ["038.9"]}
    evaluator = hieval.Evaluator(cache=cache, **BOOTSTRAP)
    for part in (["a"], ["b"], ["c", "d"]):
        evaluator.update({d: gold[d] for d in part}, {"m": {d: pred[d] for d in part}})
    ours = evaluator.compute()
    whole = hieval.evaluate(gold, {"m": pred}, cache=cache, **BOOTSTRAP)
    same(ours, whole)
    assert ours.records["m"]["unknown_codes"] == {"428.09": 1, "999.99": 1}
    assert ours.nodes.filter(node="428.09", family="flat")["tp"].item() == 1
