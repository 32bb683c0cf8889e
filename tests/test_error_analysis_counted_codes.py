"""Counted codes in the per-code table (issue 34): a generative coder's invented and malformed
predictions (``unknown_codes: count``, ``malformed_codes: count``) are false positives at the
leaf level, placed nowhere, so each gets one row of ``codes/{model}.parquet`` at the pseudo-level
``leaf``: checked against a naive count over the sets written here."""

from __future__ import annotations

from collections import Counter

import polars as pl
import pytest

import hieval

COUNTING = {"unknown_codes": "count", "malformed_codes": "count"}
MALFORMED = ("hypertension", "401.9 - HTN", "zz-9")


@pytest.fixture(scope="module")
def zoo(icd9, tmp_path_factory):
    known = set(icd9.frame["code"].to_list())
    invented = [f"401.{d}" for d in "0123456789" if f"401.{d}" not in known][:2]
    invented += [f"250.{d}9" for d in "0123456789" if f"250.{d}9" not in known][:1]
    gold = {
        "a": {"401.9", "250.00"},
        "b": {"428.0"},
        "c": {"401.9"},
        "d": {"038.9", "250.00"},
    }
    pred = {
        "a": {"401.9", invented[0], "hypertension"},
        "b": {"428.0", invented[0], invented[1], "401.9 - HTN"},
        "c": {"hypertension", invented[2]},
        "d": {"038.9", "zz-9", "hypertension"},
    }
    cache = tmp_path_factory.mktemp("cache")
    evaluation = hieval.evaluate(gold, {"m": pred}, cache=cache, **COUNTING)
    return gold, pred, set(invented), evaluation


def test_each_counted_code_is_a_leaf_row_of_its_false_positives(zoo):
    gold, pred, invented, evaluation = zoo
    counted = invented | set(MALFORMED)
    expected = Counter(c for doc, codes in pred.items() for c in codes - gold[doc] if c in counted)
    table = evaluation.codes["m"]
    leaf = table.filter(level="leaf")
    got = {r["code"]: r for r in leaf.iter_rows(named=True)}
    assert set(got) == set(expected) == counted
    for code, n in expected.items():
        row = got[code]
        assert (row["tp"], row["fp"], row["fn"], row["support"]) == (0, n, 0, 0)
        assert (row["precision"], row["recall"], row["f1"], row["title"]) == (0.0, 0.0, 0.0, None)
    # After the hierarchy's levels, by code; no counted code at any level of the hierarchy.
    assert table["level"].to_list()[-leaf.height :] == ["leaf"] * leaf.height
    assert leaf["code"].to_list() == sorted(expected)
    assert table.filter(pl.col("level") != "leaf", pl.col("code").is_in(list(counted))).height == 0


def test_the_leaf_rows_add_up_to_the_flat_false_positives_of_the_counted_codes(zoo):
    """The flat micro FP less the FP of release codes (the e2/e1 rows of real leaves) is the
    counted codes' FP: nothing counted is lost from the per-code table."""
    gold, pred, invented, evaluation = zoo
    flat = evaluation.metrics.filter(family="flat", level="leaf", average="micro", metric="fp")
    real_fp = sum(
        len({c for c in p - gold[d] if c not in invented | set(MALFORMED)}) for d, p in pred.items()
    )
    leaf = evaluation.codes["m"].filter(level="leaf")
    assert flat["value"].item() == real_fp + leaf["fp"].sum()
