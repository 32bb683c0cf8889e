"""hieval.Evaluator (issue 31) counts a batch in the background while the next one is
normalised: a batch whose counting fails is dropped as a refused batch is, the error is raised
at the next call, and the batches before it give what one evaluate of them gives. A generative
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


def failing_on(monkeypatch, batch_folder: str) -> None:
    """The engine refuses the batch normalised into ``batch_folder`` (as its limits would)."""
    count = evaluator_module.Evaluator._count

    def refusing(self, name, config, *, folder):
        if folder.parent.parent.name == batch_folder:
            raise hieval.InputError("more than 8388608 distinct codes cannot be counted")
        return count(self, name, config, folder=folder)

    monkeypatch.setattr(evaluator_module.Evaluator, "_count", refusing)


@pytest.mark.parametrize("raised_by", ["update", "compute"])
def test_a_batch_whose_count_fails_is_dropped_and_the_error_raised(cache, monkeypatch, raised_by):
    failing_on(monkeypatch, "batch-2")
    evaluator = hieval.Evaluator(cache=cache)
    evaluator.update({"a": GOLD["a"]}, {"m": {"a": PRED["a"]}})
    evaluator.update({"b": GOLD["b"]}, {"m": {"b": PRED["b"]}})  # counted in the background
    with pytest.raises(hieval.InputError, match="distinct codes cannot be counted"):
        if raised_by == "update":
            evaluator.update({"c": GOLD["c"]}, {"m": {"c": PRED["c"]}})
        else:
            evaluator.compute()
    # Batch 2 (and the batch whose update raised) are gone; batch 1 stands, and "b" may come again.
    assert sorted(p.name for p in evaluator._folder.iterdir()) == ["batch-1", "hierarchy"]
    monkeypatch.undo()
    evaluator.update({d: GOLD[d] for d in "bc"}, {"m": {d: PRED[d] for d in "bc"}})
    ours = evaluator.compute()
    whole = hieval.evaluate(GOLD, {"m": PRED}, cache=cache)
    assert_frame_equal(ours.metrics, whole.metrics, check_exact=True)
    assert_frame_equal(ours.nodes, whole.nodes, check_exact=True)


def test_a_first_batch_whose_count_fails_leaves_nothing_behind(cache, monkeypatch):
    failing_on(monkeypatch, "batch-1")
    evaluator = hieval.Evaluator(cache=cache)
    evaluator.update({"a": GOLD["a"]}, {"m": {"a": PRED["a"]}})
    with pytest.raises(hieval.InputError, match="distinct codes cannot be counted"):
        evaluator.compute()
    monkeypatch.undo()
    with pytest.raises(hieval.InputError, match="no batch yet"):
        evaluator.compute()
    evaluator.update(GOLD, {"x": PRED})  # another model: the first batch's settings are gone
    assert evaluator.compute().models == ["x"]


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
