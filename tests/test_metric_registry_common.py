"""Checks every metric of the registry passes, found by iterating the registry (as
scikit-learn's ``test_common`` iterates its metric registries), so that no entry can be missed:

1. every entry has an independent reference test (:data:`REFERENCES`): the test exists and
   compares with scikit-learn, pyevall, a naive count or a hand-worked example;
2. every entry's all-ones replicate (the bootstrap's formula with every document weighing 1)
   is its reported value bit for bit, from the one declaration both evaluate.

A new registry entry fails (1) until it is given a reference test, and (2) until the
uncertainty stage replicates it.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from test_counts_reference import (  # noqa: F401 (pytest fixtures)
    LEVELS,
    dataset,
    naive_counts,
    naive_metrics,
    results,
)
from test_uncertainty import zoo  # noqa: F401 (a pytest fixture)
from test_uncertainty_ranking import KS, LEVEL, frames

from hieval import codesystem
from hieval.engine.icm import IcmParams
from hieval.metrics.prf import metrics_table
from hieval.metrics.propensity import TrainPropensities
from hieval.metrics.ranking import score_rows
from hieval.metrics.registry import (
    COUNT_FAMILIES,
    REGISTRY,
    SPLIT_FAMILIES,
    Metric,
    template,
)
from hieval.metrics.uncertainty.ranking import ranking_replicates, ranking_units
from hieval.metrics.uncertainty.replicates import replicate_values
from hieval.pipeline import count_model, model_metrics, zoo_units

TESTS = Path(__file__).parent

_COUNTS = "test_counts_reference.py::test_metrics_match_reference"
_SPLIT = "test_metric_registry_common.py::test_split_families_match_naive_counts"
_SUITE_SK = "test_suite.py::test_example_and_label_based_match_sklearn"
_RANKING = "test_ranking.py::test_ranking_metrics_match_sklearn_and_naive"
_SCORED = "test_calibration_scored.py::test_scored_calibration_matches_sklearn_and_naive"


def _reference(metric: Metric) -> str:
    """The reference test of an entry: the count families by family, the rest by key."""
    if metric.family in SPLIT_FAMILIES:
        return _SPLIT
    if metric.family in COUNT_FAMILIES:
        return _COUNTS
    return REFERENCES[metric.key]


#: The independent reference test of each entry outside the count families (family, average,
#: metric template) -> "file::test". The count families' (every average and measure) are
#: test_counts_reference's naive counts and metrics, flat ones also scikit-learn
#: (test_metrics_sklearn.py, test_metric_additions.py for F2); the dx/proc splits' are
#: test_split_families_match_naive_counts below.
REFERENCES: dict[tuple[str, str, str], str] = {
    ("icm", "mean", "icm"): "test_icm.py::test_matches_pyevall",
    ("icm", "mean", "icm_norm"): "test_icm.py::test_matches_pyevall",
    ("label", "macro", "accuracy"): _SUITE_SK,
    ("label", "macro", "f1"): _SUITE_SK,
    ("example", "mean", "precision"): (
        "test_suite.py::test_example_based_precision_and_recall_match_sklearn_samples"
    ),
    ("example", "mean", "recall"): (
        "test_suite.py::test_example_based_precision_and_recall_match_sklearn_samples"
    ),
    ("example", "mean", "f1"): _SUITE_SK,
    ("example", "mean", "hamming_loss"): _SUITE_SK,
    ("example", "mean", "jaccard"): _SUITE_SK,
    ("example", "mean", "subset_accuracy"): _SUITE_SK,
    ("example", "mean", "exact_match"): (
        "test_field_metrics.py::test_exact_match_matches_sklearn_accuracy_score"
    ),
    ("label", "macro", "fpr"): (
        "test_field_metrics.py::test_fpr_matches_sklearn_confusion_matrix_and_naive_count"
    ),
    ("label", "micro", "fpr"): (
        "test_field_metrics.py::test_fpr_matches_sklearn_confusion_matrix_and_naive_count"
    ),
    ("propensity", "mean", "f1"): "test_suite.py::test_propensity_f_and_hf_match_naive_formulas",
    ("hierarchical", "mean", "f1"): "test_suite.py::test_propensity_f_and_hf_match_naive_formulas",
    ("lca", "mean", "f1"): "test_lca_f.py::test_lca_f_matches_the_naive_reference",
    ("ranking", "micro", "auc"): _RANKING,
    ("ranking", "macro", "auc"): _RANKING,
    ("ranking", "mean", "precision@{k}"): _RANKING,
    ("ranking", "mean", "recall@{k}"): _RANKING,
    ("ranking", "mean", "r_precision"): _RANKING,
    ("ranking", "mean", "map"): _RANKING,
    ("ranking", "mean", "ndcg@{k}"): "test_metric_additions.py::test_ndcg_matches_a_naive_ranking",
    ("ranking", "mean", "psp@{k}"): (
        "test_propensity_metrics.py::test_psp_and_psndcg_match_the_reference"
    ),
    ("ranking", "mean", "psndcg@{k}"): (
        "test_propensity_metrics.py::test_psp_and_psndcg_match_the_reference"
    ),
    ("calibration", "micro", "brier"): (
        "test_ranking.py::test_calibration_matches_a_direct_computation"
    ),
    ("calibration", "micro", "ece"): (
        "test_ranking.py::test_calibration_matches_a_direct_computation"
    ),
    ("calibration", "scored", "brier"): _SCORED,
    ("calibration", "scored", "ece"): _SCORED,
    ("selection", "global", "threshold"): "test_tuning.py::test_brute_force_sweep",
}

#: Words that name an independent oracle in a reference test's source.
ORACLES = re.compile(r"sklearn|scikit|pyevall|naive|hand[- ]worked|brute|direct|reference")

#: Entries with no replicate, and why: the threshold is tuned on the dev set, so reweighting
#: the test set's documents does not move it (it is reported, never resampled).
NOT_RESAMPLED = {("selection", "global", "threshold")}


def _test_source(reference: str) -> str:
    file, name = reference.split("::")
    tree = ast.parse((TESTS / file).read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.get_source_segment((TESTS / file).read_text(), node) or ""
    raise AssertionError(f"{reference}: no such test")


@pytest.mark.parametrize("metric", REGISTRY, ids=lambda m: "/".join(m.key))
def test_every_entry_has_an_independent_reference_test(metric):
    reference = _reference(metric)
    source = _test_source(reference)
    assert ORACLES.search(source), f"{reference} names no independent oracle"


def test_references_name_registered_metrics_only():
    keys = {m.key for m in REGISTRY}
    assert set(REFERENCES) <= keys, set(REFERENCES) - keys
    assert keys >= NOT_RESAMPLED


# -- the dx/proc split families against naive counts ------------------------------------------


def test_split_families_match_naive_counts(dataset, results, icd9):  # noqa: F811
    """flat_dx, set_proc, ...: the micro rows of the diagnosis and procedure parts equal naive
    counts over the nodes of that kind. A node's kind is read here from its leaves (ICD-9
    procedure codes have two digits before the dot), not from hieval's code system."""
    anc = dataset["anc"]
    kind_of_leaf = {c: "proc" if re.match(r"^\d\d\.", c) else "dx" for c in anc}
    node_kind = {}
    for code, levels in anc.items():
        node_kind[code] = kind_of_leaf[code]
        for node in levels.values():
            node_kind[node] = kind_of_leaf[code]
    system = codesystem.of_table(icd9)
    checked = 0
    for model in ("sibling", "over", "random"):
        nodes, _ = results[model]
        tidy = metrics_table(nodes, model, split_kinds=system.node_kind)
        got = {
            (r["family"], r["level"], r["average"], r["metric"]): r["value"]
            for r in tidy.iter_rows(named=True)
        }
        expected_nodes, _ = naive_counts(dataset["gold"], dataset["models"][model], anc)
        for kind in ("dx", "proc"):
            part = {k: v for k, v in expected_nodes.items() if node_kind[k[2]] == kind}
            for (family, level, average, metric), value in naive_metrics(part).items():
                if average != "micro":
                    continue
                key = (f"{family}_{kind}", level, average, metric)
                assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key
                checked += 1
    assert checked > 100


# -- all-ones replicates are the reported values ----------------------------------------------


def _count_and_suite_rows(zoo_folder, preds) -> tuple[dict, dict]:
    """Reported values and all-ones replicates of the count families and the suite."""
    params = IcmParams()
    levels, ancestors = zoo_folder / "levels.parquet", zoo_folder / "ancestors.parquet"
    reported, items = {}, {}
    for name, path in preds.items():
        out = zoo_folder / f"{name}-common"
        out.mkdir(exist_ok=True)
        count_model(
            zoo_folder / "gold.parquet", path, levels_file=levels, ancestors=ancestors,
            max_level="c", nodes_out=out / "nodes.parquet", docs_out=out / "docs.parquet",
            item_sums_out=out / "items.parquet", params=params,
        )  # fmt: skip
        items[name] = out / "items.parquet"
        tidy = model_metrics(
            model=name, nodes=out / "nodes.parquet", docs=out / "docs.parquet",
            item_sums=items[name], levels_file=levels, params=params, label_set="observed",
            metrics_out=out / "metrics.parquet", nodes_report_out=out / "nodes.csv",
        )  # fmt: skip
        for r in tidy.iter_rows(named=True):
            reported[name, r["family"], r["level"], r["average"], r["metric"]] = r["value"]
    layout, units = zoo_units(
        gold=zoo_folder / "gold.parquet", predictions=preds, item_sums=items,
        levels_file=levels, ancestors=ancestors, max_level="c", params=params,
        label_set="observed",
    )  # fmt: skip
    ones = np.ones((1, layout.doc_ids.len()))
    replicated = {
        (name, *key): value[0]
        for name in preds
        for key, value in replicate_values([(units[name], ones)], layout).items()
    }
    return reported, replicated


def _score_rows() -> tuple[dict, dict]:
    """Reported values and all-ones replicates of the ranking and calibration rows, with a
    document without gold codes (counted by P@K, not by the means over gold documents)."""
    reported, replicated = {}, {}
    for truncated in (False, True):
        gold, scores, ancestors = frames(4, truncated)
        gold = pl.concat(
            [gold, pl.DataFrame({"doc_id": ["zz"], "code": [None]}, schema=gold.schema)]
        )
        scores = pl.concat(
            [
                scores,
                pl.DataFrame({"doc_id": ["zz", "zz"], "code": ["c1", "c2"], "score": [0.7, 0.2]}),
            ]
        ).sort("doc_id", "code")
        doc_ids = gold["doc_id"].unique().sort()
        train = pl.DataFrame({"doc_id": ["t1", "t1", "t2", "t3"], "code": ["c1", "c2", "c1", None]})
        options = {
            "ks": KS, "ancestors": ancestors, "levels": (LEVEL,),
            "propensities": TrainPropensities.from_gold(train, IcmParams()),
        }  # fmt: skip
        units = ranking_units(gold, scores, doc_ids=doc_ids, **options)
        tidy, _ = score_rows(gold, scores, model="m", threshold=0.5, **options)
        for r in tidy.iter_rows(named=True):
            reported[truncated, r["family"], r["level"], r["average"], r["metric"]] = r["value"]
        ones = np.ones((1, doc_ids.len()))
        for key, value in ranking_replicates([(units, ones)], units.keys).items():
            replicated[(truncated, *key)] = value[0]
    return reported, replicated


def test_every_entry_all_ones_replicate_is_its_reported_value(zoo):  # noqa: F811
    folder, preds = zoo
    reported, replicated = _count_and_suite_rows(folder, preds)
    score_reported, score_replicated = _score_rows()
    reported.update(score_reported)
    replicated.update(score_replicated)
    by_entry: dict[tuple[str, str, str], list] = defaultdict(list)
    for key, value in reported.items():
        _, family, _, average, metric = key
        by_entry[family, average, template(metric)].append((key, value))
    for metric in REGISTRY:
        rows = by_entry.get(metric.key, [])
        assert rows, f"{metric.key}: no reported row in the test zoo"
        if metric.key in NOT_RESAMPLED:
            assert not any(key in replicated for key, _ in rows), metric.key
            continue
        for key, value in rows:
            assert key in replicated, f"{key}: reported, but no replicate"
            # bit for bit: counts are integers; float means are correctly rounded both ways
            # (math.fsum for the value, hieval.metrics.arithmetic's exact sums for replicates)
            assert replicated[key] == value, (key, replicated[key], value)
