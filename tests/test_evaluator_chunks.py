"""hieval.Evaluator gathers batches and reduces them in chunks of ``reduce_rows`` rows (issue
31): whatever the bound (1 row: every batch its own chunk; one larger than everything: one
chunk), the result equals :func:`hieval.evaluate` over all documents at once, bit for bit. What
must be immediate is checked at ``update`` (a document of an earlier batch, naming both
batches; a layout not seen before); an error found in a chunk of earlier batches names the
batch of its document, and the Evaluator refuses from then on (the chunk is dropped, and a
result without it would look complete)."""

from __future__ import annotations

import polars as pl
import pytest
from test_evaluator_reduce import BOOTSTRAP, as_mapping, random_zoo, same, uneven_parts

import hieval

BOUNDS = [1, 60, 10**9]  # every batch alone; a few batches a chunk; one chunk


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def chunks(evaluator: hieval.Evaluator) -> int:
    return len([p for p in evaluator._folder.iterdir() if p.name.startswith("chunk-")])


@pytest.mark.parametrize("reduce_rows", BOUNDS)
@pytest.mark.parametrize(
    ("seed", "kind", "options"),
    [(11, "frame", BOOTSTRAP), (12, "mapping", {"top_k": 3, "k": (1, 3), "max_level": "c"})],
)
def test_any_chunk_bound_equals_one_evaluate(icd9, cache, reduce_rows, seed, kind, options):
    """Hard and scored models (a third of the documents without a row of one of them),
    batches of 1 document and larger, as frames or mappings."""
    gold, models = random_zoo(icd9.frame, seed, documents=36)
    parts = uneven_parts(gold["doc_id"].unique(maintain_order=True).to_list(), seed)
    evaluator = hieval.Evaluator(cache=cache, reduce_rows=reduce_rows, **options)
    for part in parts:
        if kind == "frame":
            keep = pl.col("doc_id").is_in(part)
            evaluator.update(gold.filter(keep), {n: f.filter(keep) for n, f in models.items()})
        else:
            batch = {n: as_mapping(f, part) for n, f in models.items()}
            evaluator.update(as_mapping(gold, part), batch)
    ours = evaluator.compute()
    # Batches of a layout not seen before go alone (the first; one where a model predicts
    # nothing has no code to read as dotted or not), so only bound 1's count is pinned.
    if reduce_rows == 1:
        assert chunks(evaluator) == len(parts)
    elif kind == "frame" and reduce_rows == 10**9:
        assert chunks(evaluator) < len(parts)
    whole = hieval.evaluate(gold, models, cache=cache, **options)
    same(ours, whole)
    for name in models:
        for key in ("labels", "rows", "documents", "unknown_codes", "warnings"):
            assert ours.records[name][key] == whole.records[name][key], (name, key)
    assert ours.records["scored"]["path"] == f"scored (in memory, {len(parts)} batches)"


@pytest.mark.parametrize("reduce_rows", BOUNDS)
def test_interleaved_batches_in_chunks_equal_one_evaluate(icd9, cache, reduce_rows):
    gold, models = random_zoo(icd9.frame, 13, documents=30)
    docs = sorted(gold["doc_id"].unique().to_list())
    evaluator = hieval.Evaluator(cache=cache, reduce_rows=reduce_rows, **BOOTSTRAP)
    for i in range(5):
        keep = pl.col("doc_id").is_in(docs[i::5])
        evaluator.update(gold.filter(keep), {n: f.filter(keep) for n, f in models.items()})
    same(evaluator.compute(), hieval.evaluate(gold, models, cache=cache, **BOOTSTRAP))


@pytest.mark.parametrize("reduce_rows", BOUNDS)
def test_dense_batches_in_chunks_equal_one_evaluate(cache, reduce_rows):
    import numpy as np

    codes = ["401.9", "428.0", "250.00", "V10.3", "038.9"]
    scores = np.round(np.random.default_rng(14).random((20, len(codes))), 2)
    docs = [f"d{i:02d}" for i in range(20)]
    gold = {d: [codes[i % 5], codes[(i * 2) % 5]] for i, d in enumerate(docs)}
    evaluator = hieval.Evaluator(cache=cache, reduce_rows=reduce_rows)
    for start in range(0, 20, 4):
        part = docs[start : start + 4]
        matrix = hieval.dense(scores[start : start + 4], codes=codes, doc_ids=part)
        evaluator.update({d: gold[d] for d in part}, {"m": matrix})
    whole = hieval.dense(scores, codes=codes, doc_ids=docs)
    same(evaluator.compute(), hieval.evaluate(gold, {"m": whole}, cache=cache))


@pytest.mark.parametrize("options", [{"unknown_codes": "count", "malformed_codes": "count"}, {}])
def test_counted_and_placed_codes_in_one_chunk_equal_one_evaluate(cache, options):
    gold = {"a": ["401.9", "428.0"], "b": ["250.00"], "c": ["038.9", "428.09"], "d": ["V10.3"]}
    pred = {"a": ["401.9", "999.99"], "b": ["250.00", "428.09"], "c": ["038.9"], "d": ["V10.3"]}
    if options:
        pred = {**pred, "a": [*pred["a"], "chest pain"], "d": ["V10.3", "not a code"]}
    evaluator = hieval.Evaluator(cache=cache, reduce_rows=10**9, **options)
    for doc in "abcd":
        evaluator.update({doc: gold[doc]}, {"m": {doc: pred[doc]}})
    assert chunks(evaluator) == 1  # the first batch; the other three wait for compute
    ours = evaluator.compute()
    assert chunks(evaluator) == 2
    whole = hieval.evaluate(gold, {"m": pred}, cache=cache, **options)
    same(ours, whole)
    assert ours.records["m"]["unknown_codes"] == whole.records["m"]["unknown_codes"]


def test_a_document_of_an_earlier_batch_is_refused_at_once_naming_both_batches(cache):
    """Even while the earlier batch waits for its chunk (nothing normalised yet)."""
    evaluator = hieval.Evaluator(cache=cache, reduce_rows=10**9)
    evaluator.update({"a": ["401.9"]}, {"m": {"a": ["401.9"]}})
    evaluator.update({"b": ["250.00"], "c": ["428.0"]}, {"m": {"b": ["250.00"]}})
    assert len(evaluator._queued) == 1
    with pytest.raises(
        hieval.InputError, match=r"^gold: batch 3: document 'c' came in an earlier batch \(batch 2"
    ):
        evaluator.update({"d": ["401.9"], "c": ["038.9"]}, {"m": {"d": ["401.9"]}})
    evaluator.update({"d": ["401.9"]}, {"m": {"d": ["428.0"]}})  # batch 3 again, accepted
    gold = {"a": ["401.9"], "b": ["250.00"], "c": ["428.0"], "d": ["401.9"]}
    pred = {"a": ["401.9"], "b": ["250.00"], "d": ["428.0"]}
    same(evaluator.compute(), hieval.evaluate(gold, {"m": pred}, cache=cache))


@pytest.mark.parametrize(
    ("bad", "said"),  # (?s): the lines of a message about bad codes
    [
        ({"gold": {"q": ["bo.gus"]}, "m": {"q": ["401.9"]}}, r"gold \(in memory\).*'q'.*bo\.gus"),
        ({"gold": {"q": ["401.9"]}, "m": {"q": ["non.sense"]}}, r"m \(in memory\).*'q'.*non\.se"),
    ],
)
def test_an_error_in_a_chunk_names_model_document_value_and_batch(cache, bad, said):
    """Batch 3 (of 4) is wrong; its chunk is reduced at compute: the error names it, the
    message is the one evaluate gives for the same rows, and the Evaluator then refuses."""
    with pytest.raises(hieval.HievalError) as whole_error:
        hieval.evaluate(bad["gold"], {"m": bad["m"]}, cache=cache)
    evaluator = hieval.Evaluator(cache=cache, reduce_rows=10**9)
    evaluator.update({"a": ["401.9"]}, {"m": {"a": ["401.9"]}})
    evaluator.update({"b": ["250.00"]}, {"m": {"b": ["428.0"]}})
    evaluator.update(bad["gold"], {"m": bad["m"]})  # queued: not normalised yet
    evaluator.update({"c": ["038.9"]}, {"m": {"c": ["038.9"]}})
    with pytest.raises(hieval.HievalError, match="(?s)" + said) as chunk_error:
        evaluator.compute()
    assert str(chunk_error.value) == f"batch 3: {whole_error.value}"
    for call in (
        evaluator.compute,
        lambda: evaluator.update({"e": ["401.9"]}, {"m": {"e": ["401.9"]}}),
    ):
        with pytest.raises(hieval.InputError, match=r"(?s)refused \(batch 3: .*new Evaluator"):
            call()
    assert chunks(evaluator) == 1  # the bad chunk dropped, and nothing computed from the rest


def test_an_error_in_a_chunk_filled_by_an_update_is_raised_there(cache):
    """The bound reached at batch 3 reduces batches 2 and 3 together: batch 2's error is
    raised by update 3, naming batch 2."""
    evaluator = hieval.Evaluator(cache=cache, reduce_rows=4)
    evaluator.update({"a": ["401.9"]}, {"m": {"a": ["401.9"]}})  # alone (a new layout)
    evaluator.update({"b": ["bo.gus"]}, {"m": {"b": ["428.0"]}})  # 2 rows queued
    with pytest.raises(hieval.HievalError, match=r"(?s)^batch 2: .*'b'.*bo\.gus"):
        evaluator.update({"c": ["038.9"]}, {"m": {"c": ["038.9"]}})
    with pytest.raises(hieval.InputError, match="refused"):
        evaluator.compute()


def test_a_batch_read_otherwise_alone_is_refused_at_its_update_as_evaluate_refuses_it(cache):
    """Undotted codes (``code_format="auto"`` reads a batch without a dotted code as
    undotted) are not gathered with dotted batches: the batch is normalised alone, at once,
    as one evaluate of its rows, whatever the bound."""
    evaluator = hieval.Evaluator(cache=cache, reduce_rows=10**9)
    evaluator.update({"a": ["401.9"]}, {"m": {"a": ["401.9"]}})
    evaluator.update({"b": ["250.00"]}, {"m": {"b": ["428.0"]}})
    with pytest.raises(hieval.InputError) as whole_error:
        hieval.evaluate({"q": ["bogus"]}, {"m": {"q": ["V103"]}}, cache=cache)
    with pytest.raises(hieval.InputError) as batch_error:
        evaluator.update({"q": ["bogus"]}, {"m": {"q": ["V103"]}})
    assert str(batch_error.value) == str(whole_error.value)
    assert "undotted" in str(batch_error.value)
    evaluator.update({"q": ["V103"]}, {"m": {"q": ["V103", "E8800"]}})  # read as undotted
    evaluator.update({"c": ["038.9"]}, {"m": {"c": ["038.9"]}})
    gold = {"a": ["401.9"], "b": ["250.00"], "q": ["V10.3"], "c": ["038.9"]}
    pred = {"a": ["401.9"], "b": ["428.0"], "q": ["V10.3", "E880.0"], "c": ["038.9"]}
    same(evaluator.compute(), hieval.evaluate(gold, {"m": pred}, cache=cache))


def test_a_batch_reduced_alone_at_its_update_is_refused_there_and_the_rest_stands(cache):
    """A batch whose gold holds no code is normalised alone, whatever the bound (one evaluate
    of its rows refuses them), at its own update: refused there, with evaluate's message, and
    the Evaluator goes on."""
    evaluator = hieval.Evaluator(cache=cache, reduce_rows=10**9)
    evaluator.update({"a": ["401.9"]}, {"m": {"a": ["401.9"]}})
    evaluator.update({"b": ["250.00"]}, {"m": {"b": ["428.0"]}})
    with pytest.raises(hieval.InputError) as whole_error:
        hieval.evaluate({"q": []}, {"m": {"q": ["401.9"]}}, cache=cache)
    with pytest.raises(hieval.InputError) as batch_error:
        evaluator.update({"q": []}, {"m": {"q": ["401.9"]}})
    assert str(batch_error.value) == str(whole_error.value)
    assert "no labels" in str(batch_error.value)
    evaluator.update({"c": ["038.9"]}, {"m": {"c": ["038.9"]}})
    gold = {"a": ["401.9"], "b": ["250.00"], "c": ["038.9"]}
    pred = {"a": ["401.9"], "b": ["428.0"], "c": ["038.9"]}
    same(evaluator.compute(), hieval.evaluate(gold, {"m": pred}, cache=cache))


@pytest.mark.parametrize("reduce_rows", [0, -5, 2.5, True, "many"])
def test_a_chunk_bound_that_is_no_row_count_is_refused(cache, reduce_rows):
    with pytest.raises(hieval.InputError, match="reduce_rows must be a whole number"):
        hieval.Evaluator(cache=cache, reduce_rows=reduce_rows)


FRAMES = [
    pl.DataFrame({"doc_id": ["a", "a", "b"], "code": ["401.9", None, "250.00"]}),
    pl.DataFrame({"doc_id": ["a", "b"], "code": ["4019", "25000"]}),  # undotted
    pl.DataFrame({"doc_id": ["a", "b"], "code": [None, " "]}),  # no code at all
    pl.DataFrame({"doc_id": ["a", None], "code": ["401.9", "428.0"]}),  # a null document
    pl.DataFrame({"doc_id": ["a", "zz"], "code": ["401.9", "428.0"]}),  # zz: not in the gold
    pl.DataFrame({"doc_id": ["b"], "code": ["401.9"], "score": [0.5]}),
    pl.DataFrame(schema={"doc_id": pl.String, "code": pl.String}),
    pl.DataFrame({"doc_id": ["a"], "code": [4019]}),  # a number: refused by the readers
]


@pytest.mark.parametrize("frame", FRAMES)
@pytest.mark.parametrize("gold_docs", [None, ["a", "b"]])
def test_a_small_batch_is_looked_at_in_python_as_polars_looks_at_a_large_one(
    monkeypatch, frame, gold_docs
):
    """What decides a batch's chunk (layout, documents, alone) is the same on both paths."""
    from hieval import evaluator as module

    small = module._facts(frame, gold_docs=gold_docs)
    monkeypatch.setattr(module, "_SMALL", -1)
    assert module._facts(frame, gold_docs=gold_docs) == small


def test_a_prediction_for_a_document_of_another_batch_is_judged_in_its_own_batch(cache):
    """Batch 2 predicts document 'c', whose gold comes in batch 3: in batch 2 it is unknown
    (refused by default, dropped with unknown_docs='drop'), whatever the bound; in a chunk
    with batch 3 it would be known."""
    batches = [
        ({"a": ["401.9"]}, {"m": {"a": ["401.9"]}}),
        ({"b": ["250.00"]}, {"m": {"b": ["250.00"], "c": ["428.0"]}}),
        ({"c": ["038.9"]}, {"m": {"c": ["038.9"]}}),
    ]
    refusing = hieval.Evaluator(cache=cache, reduce_rows=10**9)
    refusing.update(*batches[0])
    with pytest.raises(hieval.InputError, match="not in the gold: 'c'"):
        refusing.update(*batches[1])
    results = []
    for reduce_rows in (1, 10**9):
        dropping = hieval.Evaluator(cache=cache, reduce_rows=reduce_rows, unknown_docs="drop")
        for gold, pred in batches:
            dropping.update(gold, pred)
        results.append(dropping.compute())
        assert results[-1].records["m"]["unknown_documents_dropped"] == 1
    same(results[1], results[0])


def test_a_gold_batch_without_codes_is_refused_at_its_update_in_any_layout(cache):
    """Undotted codes throughout, so the codeless batch has the layout of the others."""

    def frame(rows: dict) -> pl.DataFrame:
        pairs = [(d, c) for d, codes in rows.items() for c in codes or [None]]
        return pl.DataFrame(pairs, schema={"doc_id": pl.String, "code": pl.String}, orient="row")

    evaluator = hieval.Evaluator(cache=cache, reduce_rows=10**9)
    evaluator.update(frame({"a": ["V103"]}), {"m": frame({"a": ["V103"]})})
    evaluator.update(frame({"b": ["E8800"]}), {"m": frame({"b": ["V103"]})})
    with pytest.raises(hieval.InputError, match="the gold holds no labels"):
        evaluator.update(frame({"q": []}), {"m": frame({"q": ["V103"]})})
    evaluator.update(frame({"c": ["V103"]}), {"m": frame({"c": ["E8800"]})})
    assert chunks(evaluator) == 1  # batches 2 and 4 wait (the refused batch 3 went alone)
    gold = {"a": ["V103"], "b": ["E8800"], "c": ["V103"]}
    pred = {"a": ["V103"], "b": ["V103"], "c": ["E8800"]}
    same(evaluator.compute(), hieval.evaluate(gold, {"m": pred}, cache=cache))


def test_batches_of_two_layouts_in_turn_are_never_read_together(cache):
    """Dotted and undotted batches in turn (both layouts known after the first two): each
    chunk holds one layout, so every batch is read as it is alone (every bound gives what
    bound 1 gives; one evaluate of all rows would read the undotted codes as dotted)."""
    dotted = [{"a": ["401.9"]}, {"c": ["250.00"]}, {"e": ["038.9"]}]
    undotted = [{"b": ["V103"]}, {"d": ["E8800"]}, {"f": ["V103"]}]
    results = []
    for reduce_rows in (1, 10**9):
        evaluator = hieval.Evaluator(cache=cache, reduce_rows=reduce_rows)
        for first, second in zip(dotted, undotted, strict=True):
            evaluator.update(first, {"m": first})
            evaluator.update(second, {"m": {d: ["V103"] for d in second}})
        results.append(evaluator.compute())
    same(results[1], results[0])
    gold = {k: v for batch in dotted for k, v in batch.items()}
    gold |= {"b": ["V10.3"], "d": ["E880.0"], "f": ["V10.3"]}
    pred = {**{k: v for batch in dotted for k, v in batch.items()}, "b": ["V10.3"]}
    pred |= {"d": ["V10.3"], "f": ["V10.3"]}
    same(results[1], hieval.evaluate(gold, {"m": pred}, cache=cache))
