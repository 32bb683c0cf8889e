"""The error analysis of runs of documents apart, joined (hieval.analysis.parts): the
Evaluator's chunks each keep their analysis, and the tables it gives at compute() equal the
naive reference of test_error_analysis (plain Python over sets and the package tree) and one
evaluate's; parts whose documents interleave are not joined."""

from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from test_error_analysis import designed_zoo, frame_of, naive_ancestors
from test_errors_compiled import assert_naive_tables

import hieval
from hieval.analysis import errors
from hieval.analysis.parts import ErrorPart, in_document_order, joined_rows


@pytest.mark.parametrize(("seed", "compiled"), [(3, False), (4, True)])
def test_chunks_analysed_apart_give_the_naive_tables(
    icd9, icd9_ancestors, tmp_path, monkeypatch, seed, compiled
):
    if compiled:  # every chunk, however small, paired by the compiled kernels
        monkeypatch.setattr(errors, "COMPILED_FROM_LABELS", 0)
    up = naive_ancestors(icd9_ancestors)
    gold, models, placed = designed_zoo(icd9, up, seed=seed, documents=80)
    docs = sorted(gold)
    runs = [docs[i : i + 17] for i in range(0, len(docs), 17)][::-1]  # reverse: reordered
    evaluator = hieval.Evaluator(cache=tmp_path / "cache", reduce_rows=1)  # a chunk a batch
    for run in runs:
        keep = set(run)
        evaluator.update(
            frame_of({d: c for d, c in gold.items() if d in keep}),
            {n: frame_of({d: c for d, c in m.items() if d in keep}) for n, m in models.items()},
        )
    ours = evaluator.compute()
    assert all(len(m.errors) == len(runs) for m in evaluator._models.values())
    assert_naive_tables(ours, gold, models, up, placed)
    whole = hieval.evaluate(
        frame_of(gold),
        {name: frame_of(sets) for name, sets in models.items()},
        cache=tmp_path / "cache",
    )
    assert_frame_equal(ours.errors, whole.errors, check_exact=True)
    for name in models:
        assert_frame_equal(ours.confusions[name], whole.confusions[name], check_exact=True)
        assert_frame_equal(ours.codes[name], whole.codes[name], check_exact=True)


def _part(docs: list[str], errors_of: list[int]) -> ErrorPart:
    rows = pl.DataFrame({"doc": errors_of, "kind": [0] * len(errors_of)})
    return ErrorPart(rows, pl.DataFrame(), pl.Series("doc_id", docs), pl.Series([], dtype=str))


def test_parts_are_joined_in_document_order_or_not_at_all():
    first, second, empty = _part(["a", "b"], [0, 1, 1]), _part(["c"], [0]), _part([], [])
    assert in_document_order([second, empty, first]) == [first, second]
    rows, doc_ids = joined_rows([first, second])
    assert rows["doc"].to_list() == [0, 1, 1, 2]  # the second part's document is the third
    assert doc_ids.to_list() == ["a", "b", "c"]
    assert in_document_order([_part(["a", "c"], []), _part(["b", "d"], [])]) is None  # interleaved
    assert in_document_order([first, _part(["b"], [])]) is None  # a document in both
