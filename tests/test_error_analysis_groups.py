"""Subgroups (issue 34): each group's headline P/R/F1 equals the metrics of the group's
documents evaluated alone (hieval.evaluate on the subset) and a naive micro F1 over sets; the
largest gap is the spread of those values, with an interval and a permutation p-value; a bad
doc_groups table is refused with one message."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from test_error_analysis import designed_zoo, frame_of, naive_ancestors

import hieval
from hieval import cli

HEADLINE = (("flat", "leaf"), ("set", "overall"), ("cophe", "overall"))


@pytest.fixture(scope="module")
def zoo(icd9, icd9_ancestors, tmp_path_factory):
    up = naive_ancestors(icd9_ancestors)
    gold, models, _ = designed_zoo(icd9, up, seed=4, documents=48)
    rng = np.random.default_rng(0)
    docs = sorted(gold)
    listed = docs[:-6]  # six documents the table lacks: the group (missing)
    groups = pl.DataFrame(
        {
            "doc_id": listed,
            "sex": [str(rng.choice(["F", "M"])) for _ in listed],
            "band": [str(rng.choice(["young", "old", ""])) for _ in listed],
        }
    )
    cache = tmp_path_factory.mktemp("cache")
    evaluation = hieval.evaluate(
        frame_of(gold),
        {name: frame_of(sets) for name, sets in models.items()},
        doc_groups=groups,
        cache=cache,
        bootstrap=40,
        permutations=49,
        seed=3,
    )
    return evaluation, gold, models, groups, cache


def members(groups: pl.DataFrame, docs: list[str], attribute: str) -> dict[str, list[str]]:
    value = dict(zip(groups["doc_id"], groups[attribute], strict=True))
    out: dict[str, list[str]] = {}
    for doc in docs:
        out.setdefault(value.get(doc) or "(missing)", []).append(doc)
    return out


def test_group_metrics_are_the_groups_evaluated_alone(zoo):
    evaluation, gold, models, groups, cache = zoo
    table = evaluation.groups
    assert table.columns == [
        "attribute", "group", "model", "family", "level", "average", "metric",
        "value", "low", "high", "documents",
    ]  # fmt: skip
    for attribute in ("sex", "band"):
        split = members(groups, sorted(gold), attribute)
        assert "(missing)" in split
        for group, docs in split.items():
            alone = hieval.evaluate(
                frame_of({d: gold[d] for d in docs}),
                {n: frame_of({d: s.get(d, set()) for d in docs}) for n, s in models.items()},
                cache=cache,
            ).metrics
            for model, pred in models.items():
                rows = table.filter(attribute=attribute, group=group, model=model)
                assert set(rows["documents"]) == {len(docs)}
                for family, level in HEADLINE:
                    for metric in ("precision", "recall", "f1"):
                        ours = rows.filter(family=family, level=level, metric=metric)["value"]
                        theirs = alone.filter(
                            model=model, family=family, level=level, average="micro",
                            metric=metric,
                        )["value"]  # fmt: skip
                        assert ours.item() == pytest.approx(theirs.item(), abs=1e-12)
                # and flat micro-F1 by hand, over sets
                tp = sum(len(gold[d] & pred.get(d, set())) for d in docs)
                wrong = sum(len(gold[d] ^ pred.get(d, set())) for d in docs)
                f1 = rows.filter(family="flat", metric="f1")["value"].item()
                assert f1 == pytest.approx(2 * tp / (2 * tp + wrong) if tp + wrong else 0.0)
    assert (table["low"] <= table["value"] + 1e-12).all()
    assert (table["value"] <= table["high"] + 1e-12).all()


def test_largest_gap_is_the_spread_of_the_named_groups(zoo):
    evaluation, *_ = zoo
    # ICM's gaps (no p-value) are tested in test_error_analysis_groups_icm.py.
    groups, gaps = evaluation.groups, evaluation.group_gaps.filter(pl.col("family") != "icm")
    assert gaps.height == 2 * 2 * 3 * 3  # attributes x models x families x metrics
    for row in gaps.iter_rows(named=True):
        values = groups.filter(
            attribute=row["attribute"], model=row["model"], family=row["family"],
            metric=row["metric"],
        ).filter(pl.col("group") != "(missing)")  # fmt: skip
        by_group = dict(zip(values["group"], values["value"], strict=True))
        assert row["gap"] == pytest.approx(max(by_group.values()) - min(by_group.values()))
        assert by_group[row["high_group"]] == max(by_group.values())
        assert by_group[row["low_group"]] == min(by_group.values())
        assert row["low"] <= row["gap"] + 1e-12 <= row["high"] + 2e-12
        assert 1 / 50 <= row["p_value"] <= 1 and row["permutations"] == 49
        assert row["p_value"] <= row["p_adjusted"] <= min(1.0, 2 * row["p_value"]) + 1e-12


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("id,sex\na,F\n", "no doc_id column"),
        ("doc_id\na\n", "no attribute column"),
        ("doc_id,sex\na,F\na,M\n", "listed more than once"),
    ],
)
def test_bad_doc_groups_are_refused_with_one_message(tmp_path, capsys, text, message):
    (tmp_path / "gold.csv").write_text("doc_id,code\na,401.9\n")
    (tmp_path / "groups.csv").write_text(text)
    argv = ["evaluate", "--gold", str(tmp_path / "gold.csv"), "--out", str(tmp_path / "out")]
    argv += ["--pred", f"m={tmp_path / 'gold.csv'}", "--cache", str(tmp_path / "cache")]
    argv += ["--doc-groups", str(tmp_path / "groups.csv")]
    assert cli.main(argv) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
