"""ICM per group (issue 34's headline metrics include ICM): each group's ICM is that of the
group's documents evaluated alone (hieval.evaluate on the subset: the information content is
the group's own, not the whole gold's), with a bootstrap interval around it; the largest ICM
gap between an attribute's groups is the spread of those values, with an interval and a
permutation p-value (each shuffle recounts every group's information content)."""

from __future__ import annotations

import pytest
from test_error_analysis import frame_of
from test_error_analysis_groups import members, zoo  # noqa: F401 (the module's fixture)

import hieval

ICM = {"family": "icm", "level": "overall", "average": "mean", "metric": "icm"}


def test_group_icm_is_the_groups_evaluated_alone(zoo):  # noqa: F811
    evaluation, gold, models, groups, cache = zoo
    table = evaluation.groups.filter(**ICM)
    whole = evaluation.metrics.filter(**ICM)
    for attribute in ("sex", "band"):
        for group, docs in members(groups, sorted(gold), attribute).items():
            alone = hieval.evaluate(
                frame_of({d: gold[d] for d in docs}),
                {n: frame_of({d: s.get(d, set()) for d in docs}) for n, s in models.items()},
                cache=cache,
            ).metrics.filter(**ICM)
            for model in models:
                row = table.filter(attribute=attribute, group=group, model=model)
                theirs = alone.filter(model=model)["value"].item()
                assert row["value"].item() == pytest.approx(theirs, abs=1e-9)
                assert row["documents"].item() == len(docs)
                assert row["low"].item() <= row["high"].item()
                # not the whole gold's information content averaged over the group
                if len(docs) < len(gold):
                    assert row["value"].item() != pytest.approx(
                        whole.filter(model=model)["value"].item(), abs=1e-9
                    )


def test_icm_gap_is_the_spread_of_the_named_groups(zoo):  # noqa: F811
    evaluation, *_ = zoo
    groups, gaps = evaluation.groups.filter(**ICM), evaluation.group_gaps.filter(**ICM)
    assert gaps.height == 2 * 2  # attributes x models
    for row in gaps.iter_rows(named=True):
        values = groups.filter(attribute=row["attribute"], model=row["model"])
        by_group = {g: v for g, v in zip(values["group"], values["value"], strict=True)}
        by_group.pop("(missing)", None)
        assert row["gap"] == pytest.approx(max(by_group.values()) - min(by_group.values()))
        assert by_group[row["high_group"]] == max(by_group.values())
        assert by_group[row["low_group"]] == min(by_group.values())
        assert row["low"] <= row["high"]
        # its permutation p-value (checked against a naive test in test_group_icm_gap_p.py)
        assert 1 / 50 <= row["p_value"] <= row["p_adjusted"] <= 1
        assert row["permutations"] == 49


def test_who_it_fails_shows_each_groups_icm_and_the_icm_gap(zoo):  # noqa: F811
    from hieval.reports.error_sections import ErrorTables, who_it_fails

    evaluation, *_ = zoo
    tables = ErrorTables(
        errors=evaluation.errors,
        confusions=evaluation.confusions,
        codes=evaluation.codes,
        groups=evaluation.groups,
        gaps=evaluation.group_gaps,
    )
    html = who_it_fails(tables, models=list(evaluation.confusions))
    assert "<th>ICM</th>" in html
    for row in evaluation.groups.filter(**ICM).iter_rows(named=True):
        assert f"data-value='{row['value']}'>{row['value']:.2f} [" in html
    for row in evaluation.group_gaps.filter(**ICM).iter_rows(named=True):
        assert f"<td>{row['gap']:.2f}</td>" in html
