"""hieval.Evaluator (issue 31) counts a batch in the background while the next one is
normalised: a chunk whose counting fails is dropped, the error is raised at the next call, naming
the batch, and the Evaluator refuses from then on (its batches' updates had returned). A generative
coder's counted codes (``unknown_codes``/``malformed_codes`` ``count``) are reduced over batches:
equal to one evaluate, against which every table here is checked."""

from __future__ import annotations

import pytest
from polars.testing import assert_frame_equal

import hieval
from hieval import evaluator as evaluator_module

GOLD = {"a": ["401.9"], "b": ["250.00", "428.0"], "c": ["038.9"]}
PRED = {"a": ["401.9"], "b": ["250.00"], "c": ["428.0"]}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def failing_on(monkeypatch, chunk_folder: str) -> None:
    """The engine refuses the chunk normalised into ``chunk_folder`` (as its limits would)."""
    count = evaluator_module.Evaluator._count

    def refusing(self, name, config, *, folder):
        if folder.parent.parent.name == chunk_folder:
            raise hieval.InputError("more than 8388608 distinct codes cannot be counted")
        return count(self, name, config, folder=folder)

    monkeypatch.setattr(evaluator_module.Evaluator, "_count", refusing)


@pytest.mark.parametrize("raised_by", ["update", "compute"])
def test_a_chunk_whose_count_fails_is_dropped_and_the_evaluator_refuses(
    cache, monkeypatch, raised_by
):
    """Batch 2's update returned before its count failed: the error names it, and from then
    on the Evaluator refuses (a result without batch 2 would look complete)."""
    failing_on(monkeypatch, "chunk-2")
    evaluator = hieval.Evaluator(cache=cache, reduce_rows=1)  # a chunk per batch
    evaluator.update({"a": GOLD["a"]}, {"m": {"a": PRED["a"]}})
    evaluator.update({"b": GOLD["b"]}, {"m": {"b": PRED["b"]}})  # counted in the background
    with pytest.raises(hieval.InputError, match=r"^batch 2: more than 8388608 distinct codes"):
        if raised_by == "update":
            evaluator.update({"c": GOLD["c"]}, {"m": {"c": PRED["c"]}})
        else:
            evaluator.compute()
    # Chunk 2 (and the chunk of the update that raised) are gone.
    assert sorted(p.name for p in evaluator._folder.iterdir()) == ["chunk-1", "hierarchy"]
    monkeypatch.undo()
    for call in (
        evaluator.compute,
        lambda: evaluator.update({"d": ["401.9"]}, {"m": {"d": ["401.9"]}}),
    ):
        with pytest.raises(hieval.InputError, match=r"was refused \(batch 2: more than.*new Ev"):
            call()


def test_a_first_chunk_whose_count_fails_leaves_the_evaluator_refusing(cache, monkeypatch):
    failing_on(monkeypatch, "chunk-1")
    evaluator = hieval.Evaluator(cache=cache)
    evaluator.update({"a": GOLD["a"]}, {"m": {"a": PRED["a"]}})
    with pytest.raises(hieval.InputError, match=r"^batch 1: more than 8388608 distinct codes"):
        evaluator.compute()
    monkeypatch.undo()
    with pytest.raises(hieval.InputError, match="was refused"):
        evaluator.compute()
    assert sorted(p.name for p in evaluator._folder.iterdir()) == ["hierarchy"]


# A generative coder's predictions: codes the release lacks (999.99 is placed by its syntax
# under the default policy; 428.09 too) and text that is no code at all.
CODER_GOLD = {"a": ["401.9", "428.0"], "b": ["250.00"], "c": ["038.9", "428.0"], "d": ["V10.3"]}
CODER_PRED = {
    "a": ["401.9", "999.99", "chest pain"],
    "b": ["250.00", "428.09"],
    "c": ["038.9", "chest pain"],
    "d": ["V10.3", "999.99", "not a code"],
}


@pytest.mark.parametrize(
    "options",
    [
        {"unknown_codes": "count"},
        {"malformed_codes": "count"},
        {"unknown_codes": "count", "malformed_codes": "count"},
    ],
)
def test_counted_codes_in_batches_equal_one_evaluate(cache, options):
    """Counted codes are per batch and add up: the batches give one evaluate's metrics, node
    counts, error analysis and records (invalid codes summed per code, counted codes united),
    and the pooled predictions list every batch's counted codes."""
    if options.get("malformed_codes") != "count":  # no malformed text under the strict default
        pred = {
            d: [c for c in codes if c[0].isdigit() or c[0] == "V"]
            for d, codes in CODER_PRED.items()
        }
    else:
        pred = CODER_PRED
    evaluator = hieval.Evaluator(cache=cache, **options)
    for part in (["a"], ["b", "c"], ["d"]):
        evaluator.update({d: CODER_GOLD[d] for d in part}, {"m": {d: pred[d] for d in part}})
    ours = evaluator.compute()
    whole = hieval.evaluate(CODER_GOLD, {"m": pred}, cache=cache, **options)
    assert_frame_equal(ours.metrics, whole.metrics, check_exact=True)
    assert_frame_equal(ours.nodes, whole.nodes, check_exact=True)
    assert_frame_equal(ours.errors, whole.errors, check_exact=True)
    for key in ("unknown_codes", "invalid_codes", "counted_codes", "labels"):
        assert ours.records["m"].get(key) == whole.records["m"].get(key), key
    assert ours.records["m"]["counted_codes"]  # something was counted
    from hieval.inputs.counted import counted_statuses

    pooled = ours._folder / "work" / "inputs" / "predictions" / "m.parquet"
    one = whole._folder / "work" / "inputs" / "predictions" / "m.parquet"
    assert counted_statuses(pooled) == counted_statuses(one) != {}
