"""Issue 35: the zoo's history keys an evaluation by gold, code system, hierarchy and settings,
and compares a model only within its series; an earlier hieval's history is read and upgraded
without losing a row; concurrent writers lose nothing; "Changes since the last evaluation"
(hand-worked numbers)."""

from __future__ import annotations

import math
import multiprocessing

import polars as pl
import pytest

from hieval.errors import HievalError
from hieval.reports import changes, history

TIDY_COLUMNS = ("model", "family", "level", "average", "metric", "value")
#: The headline rows of F-set and ICM (registry.BY_PAPER: paper level, average, metric).
F_SET = ("set", "overall", "micro", "f1")
ICM = ("icm", "overall", "mean", "icm")


def _tidy(values: dict[tuple[str, tuple], float]) -> pl.DataFrame:
    return pl.DataFrame(
        [(model, *row, value) for (model, row), value in values.items()],
        schema=dict.fromkeys(TIDY_COLUMNS, pl.String) | {"value": pl.Float64},
        orient="row",
    )


def _records(gold: str = "g" * 64, inputs: str = "i" * 64) -> list[dict]:
    return [{"name": "gold", "sha256": gold}, {"name": "m", "sha256": inputs}]


def _rows(*, value=0.5, code_system="icd9", inputs="i" * 64, when="t0", bootstrap=None, **kw):
    options = {"run": {"max_level": None}, "models": {"m": {"threshold": kw.get("threshold")}}}
    return history.history_rows(
        _tidy({("m", F_SET): value, ("m", ICM): 2.0 * value}),
        records=_records(gold=kw.get("gold", "g" * 64), inputs=inputs),
        settings=options,
        version="1.0",
        code_system=code_system,
        hierarchy_sha256=kw.get("hierarchy", "h" * 64),
        bootstrap=bootstrap,
        timestamp=when,
    )


def test_the_headline_rows_are_found_where_the_registry_puts_them():
    from hieval.metrics.registry import BY_PAPER, paper_level

    for name, row in (("F-set", F_SET), ("ICM", ICM)):
        metric = BY_PAPER[name]
        assert (metric.family, paper_level(metric), metric.average, metric.metric) == row


def test_another_code_system_gold_hierarchy_or_setting_is_another_series():
    base = _rows()
    assert base["metric"].to_list() == ["F-set", "ICM"] and base["series"].n_unique() == 1
    for other in (
        _rows(code_system="icd10"),
        _rows(gold="x" * 64),
        _rows(hierarchy="y" * 64),
        _rows(threshold=0.3),
    ):
        assert other["series"][0] != base["series"][0]
        assert other["key"][0] != base["key"][0]
    retrained = _rows(inputs="n" * 64, value=0.6)
    assert retrained["series"][0] == base["series"][0]  # the same model, new predictions
    assert retrained["key"][0] != base["key"][0]


def test_icd9_then_icd10_of_the_same_model_name_are_two_histories(tmp_path):
    path = tmp_path / "history" / "evaluations.parquet"
    nine = _rows(code_system="icd9", value=0.809, when="t1")
    history.append_history(path, nine)
    ten = _rows(code_system="icd10", value=0.734, gold="z" * 64, when="t2")
    whole = history.append_history(path, ten)
    assert whole.height == 4
    # the ICD-10 run has no earlier evaluation: nothing "changed", and its history is one row
    assert changes.last_changes(whole, ten).is_empty()
    assert changes.series_history(whole, ten, "m")["F-set"].to_list() == [0.734]
    assert changes.series_history(whole, nine, "m")["F-set"].to_list() == [0.809]
    assert changes.history_html(whole, ten, ["m"], {}) == ""


def test_a_first_schema_history_is_read_upgraded_and_keeps_every_row(tmp_path):
    path = tmp_path / "evaluations.parquet"
    old = pl.DataFrame(
        [
            ("2026-01-01T00:00:00", "m", "F-set", 0.5, "g", "i", "s", "0.9", "k1"),
            ("2026-01-01T00:00:00", "m", "ICM", 1.0, "g", "i", "s", "0.9", "k1"),
        ],
        schema=history.SCHEMA_V1,
        orient="row",
    )
    old.write_parquet(path)
    read = history.read_history(path)
    assert dict(read.schema) == history.SCHEMA
    assert read.select(list(history.SCHEMA_V1)).equals(old)
    assert read["series"].null_count() == 2
    assert dict(pl.read_parquet(path).schema) == history.SCHEMA_V1  # reading changes nothing
    whole = history.append_history(path, _rows())
    on_disk = pl.read_parquet(path)
    assert dict(on_disk.schema) == history.SCHEMA and on_disk.equals(whole)
    assert on_disk.head(2).select(list(history.SCHEMA_V1)).equals(old)  # bit for bit
    assert on_disk.height == 4
    assert history.lock_path(path).exists()


def test_a_history_of_another_schema_is_refused(tmp_path):
    path = tmp_path / "evaluations.parquet"
    _rows().drop("confidence").write_parquet(path)
    with pytest.raises(HievalError, match="is not hieval's history"):
        history.read_history(path)


def _append_many(path: str, writer: int, count: int) -> None:
    for i in range(count):
        history.append_history(path, _rows(inputs=f"{writer}-{i:03d}".ljust(64, "0")))


def test_two_writers_at_once_lose_no_rows(tmp_path):
    """Two processes each add 12 evaluations to one history at the same time; without the
    lock, one's read-modify-write replaces the other's (rows lost)."""
    path = str(tmp_path / "evaluations.parquet")
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_append_many, args=(path, w, 12)) for w in (1, 2)]
    for process in writers:
        process.start()
    for process in writers:
        process.join(120)
        assert process.exitcode == 0
    assert pl.read_parquet(path)["key"].n_unique() == 24


# --- Changes since the last evaluation --------------------------------------------------------


def _interval_table(low: float, high: float) -> pl.DataFrame:
    return pl.DataFrame(
        [("m", *F_SET, low, high)],
        schema=dict.fromkeys(TIDY_COLUMNS[:5], pl.String) | {"low": pl.Float64, "high": pl.Float64},
        orient="row",
    )


def test_changes_against_hand_worked_intervals(tmp_path):
    path = tmp_path / "evaluations.parquet"
    # before: F-set 0.50 in [0.45, 0.55] (h 0.05); now 0.60 in [0.56, 0.64] (h 0.04)
    before = _rows(value=0.50, when="t1", bootstrap=(_interval_table(0.45, 0.55), 0.95))
    history.append_history(path, before)
    now = _rows(
        value=0.60, inputs="n" * 64, when="t2", bootstrap=(_interval_table(0.56, 0.64), 0.95)
    )
    whole = history.append_history(path, now)
    found = {r["metric"]: r for r in changes.last_changes(whole, now).iter_rows(named=True)}
    f_set = found["F-set"]
    assert (f_set["before"], f_set["now"]) == (0.50, 0.60)
    assert f_set["change"] == pytest.approx(0.10)
    assert f_set["half_width"] == pytest.approx(math.sqrt(0.05**2 + 0.04**2))  # 0.0640
    assert f_set["beyond"] is True and f_set["before_timestamp"] == "t1"
    icm = found["ICM"]  # no interval recorded for ICM: no verdict
    assert icm["change"] == pytest.approx(0.2) and icm["beyond"] is None
    # a smaller move (0.55 -> within 0.064) is not beyond the interval
    small = _rows(
        value=0.55, inputs="s" * 64, when="t3", bootstrap=(_interval_table(0.51, 0.59), 0.95)
    )
    whole = history.append_history(path, small)
    [row] = changes.last_changes(whole, small).filter(pl.col("metric") == "F-set").to_dicts()
    assert row["before"] == 0.60 and row["change"] == pytest.approx(-0.05)
    assert row["half_width"] == pytest.approx(math.sqrt(0.04**2 + 0.04**2))
    assert row["beyond"] is False
    # intervals at another confidence: no verdict
    other = _rows(
        value=0.9, inputs="o" * 64, when="t4", bootstrap=(_interval_table(0.85, 0.95), 0.9)
    )
    whole = history.append_history(path, other)
    [row] = changes.last_changes(whole, other).filter(pl.col("metric") == "F-set").to_dicts()
    assert row["beyond"] is None and row["half_width"] is None


def test_a_rerun_on_the_same_inputs_still_compares_with_the_evaluation_before(tmp_path):
    path = tmp_path / "evaluations.parquet"
    history.append_history(path, _rows(value=0.5, when="t1"))
    now = _rows(value=0.6, inputs="n" * 64, when="t2")
    history.append_history(path, now)
    again = _rows(value=0.6, inputs="n" * 64, when="t3")  # same key: adds no row
    whole = history.append_history(path, again)
    assert whole.height == 4
    [row] = changes.last_changes(whole, again).filter(pl.col("metric") == "F-set").to_dicts()
    assert (row["before"], row["now"], row["before_timestamp"]) == (0.5, 0.6, "t1")


def test_a_model_put_back_to_earlier_predictions_is_compared_with_the_one_it_replaced(tmp_path):
    path = tmp_path / "evaluations.parquet"
    history.append_history(path, _rows(value=0.5, when="t1"))
    history.append_history(path, _rows(value=0.6, inputs="n" * 64, when="t2"))
    back = _rows(value=0.5, when="t3")  # the first predictions again: their key, no new row
    whole = history.append_history(path, back)
    [row] = changes.last_changes(whole, back).filter(pl.col("metric") == "F-set").to_dicts()
    assert (row["before"], row["now"], row["before_timestamp"]) == (0.6, 0.5, "t2")


def test_summary_and_report_open_with_the_changes(tmp_path):
    path = tmp_path / "evaluations.parquet"
    history.append_history(path, _rows(value=0.5, when="2026-01-01T00:00:00"))
    now = _rows(value=0.625, inputs="n" * 64, when="2026-02-01T00:00:00")
    whole = history.append_history(path, now)
    summary = tmp_path / "summary.md"
    summary.write_text("# Evaluation summary\n\nHierarchy: x.\n\n| Model |\n")
    changes.open_summary(summary, whole, now)
    text = summary.read_text()
    assert text.startswith("# Evaluation summary\n\n## Changes since the last evaluation\n")
    assert "| m | F-set | 2026-01-01T00:00:00 | 50.0 | 62.5 | +12.5 | – | no interval |" in text
    assert "| m | ICM | 2026-01-01T00:00:00 | 1 | 1.25 | +0.25 | – | no interval |" in text
    assert text.endswith("Hierarchy: x.\n\n| Model |\n")
    page = changes.changes_html(whole, now)
    assert page.startswith("<h2 id='changes'>Changes since the last evaluation</h2>")
    assert "<td><b>+12.5</b></td>" in page
    drawn = {}
    section = changes.history_html(whole, now, ["m"], drawn)
    assert "<h2 id='history'>" in section and list(drawn) == ["history_m"]
    assert drawn["history_m"].startswith("<svg") and "2026-02-01 00:00" in drawn["history_m"]


def test_no_earlier_evaluation_leaves_summary_alone(tmp_path):
    path = tmp_path / "evaluations.parquet"
    now = _rows()
    whole = history.append_history(path, now)
    summary = tmp_path / "summary.md"
    summary.write_text("# Evaluation summary\n\nbody\n")
    changes.open_summary(summary, whole, now)
    assert summary.read_text() == "# Evaluation summary\n\nbody\n"
    assert changes.changes_html(whole, now) == ""
