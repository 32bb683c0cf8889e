"""The formal-property experiments (experiments.meta): generator, five tests, table, workflow."""

from __future__ import annotations

import json
import shutil

import polars as pl
import pytest
from helpers import REPO, snakemake
from polars.testing import assert_frame_equal

from hieval.experiments import meta
from hieval.metrics.registry import PAPER_METRICS

SMALL = meta.MetaParams(trials=2, items=80, seed=7)


@pytest.fixture(scope="module")
def tree() -> meta.Tree:
    return meta.synthetic_tree()


@pytest.fixture(scope="module")
def gold(tree) -> meta.Labels:
    return meta.trial_gold(meta.MetaParams(), 0)[1]


@pytest.fixture(scope="module")
def small_run() -> tuple[pl.DataFrame, pl.DataFrame]:
    return meta.run(SMALL)


def _pairs(labels: meta.Labels) -> set[tuple[str, str]]:
    return {(doc, code) for doc, codes in labels.items() for code in codes}


def _contrast(test: str, trial: int = 0) -> tuple[meta.Tree, meta.Labels, meta.Contrast]:
    return meta.contrast(meta.MetaParams(), test, trial)


def test_hierarchy_has_700_categories_10_internal(tree):
    assert tree.categories == 700
    assert len(tree.internal) == 10
    assert len(tree.leaves) == 690
    assert tree.levels == ("d2", "d1", "root")
    d1 = tree.ancestors.filter(pl.col("level") == "d1")
    leaf_rows = d1.filter(pl.col("code").is_in(list(tree.leaves)))
    assert leaf_rows.height == 690
    assert all(tree.parent[c] == a for c, a in leaf_rows.select("code", "ancestor").iter_rows())


def test_gold_is_unbalanced_and_leaf_only(tree, gold):
    sizes = [len(labels) for labels in gold.values()]
    assert len(gold) == 1000 and min(sizes) >= 1 and max(sizes) >= 10
    assert all(len(set(labels)) == len(labels) for labels in gold.values())
    assert {c for labels in gold.values() for c in labels} <= set(tree.leaves)
    freq = sorted(meta.frequencies(gold).values(), reverse=True)
    assert freq[0] > 20 * freq[len(freq) // 2]  # a long tail of rare categories
    assert len(freq) < 690  # some categories never occur


def test_generator_and_tests_are_deterministic():
    params = meta.MetaParams()
    for test in meta.TESTS:
        first, second = meta.contrast(params, test, 3), meta.contrast(params, test, 3)
        assert first[1] == second[1]
        assert first[2].better == second[2].better and first[2].worse == second[2].worse
    assert meta.trial_gold(params, 3)[1] != meta.trial_gold(params, 4)[1]


def test_error_rate_removes_9_and_10_percent():
    _, gold, pair = _contrast("error_rate")
    total = _pairs(gold)
    better, worse = _pairs(pair.better), _pairs(pair.worse)
    assert better < total and worse < total
    assert len(total - better) == round(0.09 * len(total))
    assert len(total - worse) == round(0.10 * len(total))
    assert (total - better) != (total - worse)  # independent draws, not nested


def test_true_category_specificity_drops_frequent_vs_rare_in_same_item():
    _, gold, pair = _contrast("true_category_specificity")
    freq = meta.frequencies(gold)
    assert len(pair.changes) == 100
    changed = {doc for doc, _, _ in pair.changes}
    for doc, frequent, rare in pair.changes:
        assert freq[frequent] > freq[rare]
        assert pair.better[doc] == tuple(c for c in gold[doc] if c != frequent)
        assert pair.worse[doc] == tuple(c for c in gold[doc] if c != rare)
    assert all(pair.better[d] == pair.worse[d] == gold[d] for d in gold if d not in changed)


def test_wrong_category_specificity_adds_frequent_vs_rare_wrong_category():
    _, gold, pair = _contrast("wrong_category_specificity")
    freq = meta.frequencies(gold)
    frequent, rare = meta.category_pools(gold, 0.10)
    assert min(freq[c] for c in frequent) > max(freq[c] for c in rare)
    assert len(pair.changes) == 100
    for doc, good, bad in pair.changes:
        assert good in frequent and bad in rare
        assert good not in gold[doc] and bad not in gold[doc]
        assert pair.better[doc] == tuple(sorted((*gold[doc], good)))
        assert pair.worse[doc] == tuple(sorted((*gold[doc], bad)))


def test_hierarchical_similarity_replaces_by_sibling_vs_other_branch():
    tree, gold, pair = _contrast("hierarchical_similarity")
    seen = meta.frequencies(gold)
    assert len(pair.changes) >= 0.09 * len(_pairs(gold))
    for doc, code, sibling, distant in pair.changes:
        assert tree.parent[sibling] == tree.parent[code] and sibling != code
        assert tree.parent[distant] != tree.parent[code]
        assert sibling in seen and distant in seen
        assert sibling not in gold[doc] and distant not in gold[doc]
        assert sibling in pair.better[doc] and code not in pair.better[doc]
        assert distant in pair.worse[doc] and code not in pair.worse[doc]
    for doc in gold:  # a swap, never a removal: every item keeps its number of labels
        assert len(pair.better[doc]) == len(pair.worse[doc]) == len(gold[doc])


def test_item_specificity_fails_generic_vs_specific_item_of_same_size():
    _, gold, pair = _contrast("item_specificity")
    freq = meta.frequencies(gold)
    assert len(pair.changes) == 50
    for generic, specific in pair.changes:
        assert len(gold[generic]) == len(gold[specific])
        g = sorted(freq[c] for c in gold[generic])
        s = sorted(freq[c] for c in gold[specific])
        assert all(a <= b for a, b in zip(s, g, strict=True)) and s != g
        assert pair.better[generic] == () and pair.better[specific] == gold[specific]
        assert pair.worse[specific] == () and pair.worse[generic] == gold[generic]


def test_outcome_counts_ties_half_and_respects_losses():
    assert meta.outcome(0.8, 0.7, True) == 1.0
    assert meta.outcome(0.8, 0.7, False) == 0.0  # a loss such as EB-HAMM: lower is better
    assert meta.outcome(0.3, 0.3 + 1e-15, True) == 0.5


def test_win_table_shares():
    scores = pl.DataFrame(
        {
            "test": ["error_rate"] * 4,
            "trial": [0, 1, 0, 1],
            "metric": ["ICM", "ICM", "EB-HAMM", "EB-HAMM"],
            "better": [2.0, 1.0, 0.1, 0.2],
            "worse": [1.0, 1.0, 0.2, 0.1],
            "changes": [1, 1, 1, 1],
        }
    )
    table = meta.win_table(scores)
    assert table["metric"].to_list() == ["ICM", "EB-HAMM"]
    assert table["win_share"].to_list() == [0.75, 0.5]
    assert table.row(0, named=True) == {
        "test": "error_rate",
        "metric": "ICM",
        "higher_is_better": True,
        "trials": 2,
        "wins": 1,
        "ties": 1,
        "losses": 0,
        "win_share": 0.75,
    }


def test_small_run_table_shape(small_run):
    scores, table = small_run
    assert scores.height == len(meta.TESTS) * SMALL.trials * len(PAPER_METRICS)
    assert table.height == len(meta.TESTS) * len(PAPER_METRICS)
    assert table["test"].unique(maintain_order=True).to_list() == list(meta.TESTS)
    assert table["trials"].unique().to_list() == [SMALL.trials]
    assert table["win_share"].is_between(0, 1).all()
    assert (table["wins"] + table["ties"] + table["losses"] == table["trials"]).all()
    # Outputs that differ only in which item misses a label tie on count-based metrics.
    flat = table.filter(
        (pl.col("test") == "true_category_specificity") & (pl.col("metric") == "F-flat")
    )
    assert flat["ties"].item() == SMALL.trials


def test_same_seed_same_scores(small_run):
    scores, _ = small_run
    again = pl.DataFrame(meta.run_trial(SMALL, 1), schema=scores.schema)
    assert_frame_equal(scores.filter(pl.col("trial") == 1), again)


def test_markdown_lists_parameters_and_choices(small_run):
    _, table = small_run
    text = meta.render_markdown(table, SMALL)
    assert "`trials`: 2" in text and "`seed`: 7" in text
    assert all(choice in text for choice in meta.GENERATOR_CHOICES)
    assert all(f"| {m}" in text for m in PAPER_METRICS)
    assert "700 categories (10 internal, 690 leaves)" in text
    info = meta.parameters(SMALL)
    assert json.loads(json.dumps(info))["parameters"]["items"] == 80


def test_config_full_switch():
    config = {"seed": 1, "trials": 3, "full": False, "full_trials": 9, "items": 50, "share": 0.2}
    assert meta.MetaParams.from_config(config).trials == 3
    full = meta.MetaParams.from_config(config | {"full": True})
    assert (full.trials, full.items, full.share, full.seed) == (9, 50, 0.2, 1)


def test_meta_target_in_workdir(tmp_path):
    """`snakemake meta` from a fresh working directory, with two worker processes."""
    shutil.copytree(REPO / "config", tmp_path / "config")
    (tmp_path / "small.yaml").write_text("meta:\n  trials: 2\n  items: 60\n")
    result = snakemake(tmp_path, "meta", "--configfile", str(tmp_path / "small.yaml"))
    assert result.returncode == 0, result.stderr[-3000:]
    out = tmp_path / "results" / "small" / "meta"
    table = pl.read_parquet(out / "formal_properties.parquet")
    assert table.height == len(meta.TESTS) * len(PAPER_METRICS)
    assert set(table["trials"]) == {2}
    assert "| F-CoPHE |" in (out / "formal_properties.md").read_text()
    assert json.loads((out / "parameters.json").read_text())["parameters"]["items"] == 60
    assert "2/2 trials scored" in (tmp_path / "logs/small/meta/meta_evaluation.log").read_text()
