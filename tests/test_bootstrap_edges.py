"""The bootstrap at its edges: replicates that draw nothing of a row, huge replicate counts,
and comparisons without a randomization test (issue 30)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers import parse_time_refusal, snakemake

from hieval.cli import main
from hieval.errors import ConfigError
from hieval.metrics.uncertainty.weights import doc_keys, poisson_weights
from hieval.resources import Resources

SEED = 11
REPLICATES = 400
DIAGNOSES = ["401.9", "250.00", "428.0", "584.9", "V58.11"]
PROCEDURES = ["96.04", "99.04"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One hierarchy cache for the module's CLI runs."""
    return tmp_path_factory.mktemp("cache")


def _write(path: Path, rows: list[tuple[str, str]]) -> Path:
    pl.DataFrame(rows, schema=["doc_id", "code"], orient="row").write_csv(path)
    return path


def _evaluate(folder: Path, cache: Path, gold: Path, preds: dict[str, Path], *extra: str) -> Path:
    out = folder / "out"
    args = ["evaluate", "--gold", str(gold), "--out", str(out), "--cache", str(cache)]
    for name, path in preds.items():
        args += ["--pred", f"{name}={path}"]
    assert main([*args, "--seed", str(SEED), *extra]) == 0
    return out


def _weights(doc_ids: list[str], replicates: int = REPLICATES) -> np.ndarray:
    """Each replicate's Poisson weights, columns in ``doc_ids``' order."""
    return poisson_weights(doc_keys(doc_ids), seed=SEED, first=0, count=replicates)


def _row(intervals: pl.DataFrame, family: str, average: str, metric: str, level: str = "leaf"):
    part = intervals.filter(
        (pl.col("family") == family)
        & (pl.col("level") == level)
        & (pl.col("average") == average)
        & (pl.col("metric") == metric)
    )
    assert part.height == 1, (family, level, average, metric)
    return part.row(0, named=True)


# -- replicates that draw nothing of a row are left out ---------------------------------------


@pytest.fixture(scope="module")
def three_perfect(tmp_path_factory, cache) -> tuple[pl.DataFrame, np.ndarray]:
    """A perfect model on a gold of 3 documents, bootstrapped; and the replicates' weights."""
    folder = tmp_path_factory.mktemp("three")
    rows = [("d1", "401.9"), ("d2", "250.00"), ("d3", "428.0"), ("d3", "96.04")]
    gold = _write(folder / "gold.csv", rows)
    pred = _write(folder / "pred.csv", rows)
    out = _evaluate(folder, cache, gold, {"m": pred}, "--bootstrap", str(REPLICATES))
    return pl.read_parquet(out / "intervals.parquet"), _weights(["d1", "d2", "d3"])


def test_a_perfect_model_on_three_documents_has_the_interval_one_one(three_perfect):
    """Every P/R/F1 and example-based row of a perfect model is 1 in every replicate that drew
    a document: the interval is [1, 1], not [0, 1] (the replicates that drew none scored 0)."""
    intervals, weights = three_perfect
    drew_something = int((weights.sum(1) > 0).sum())
    assert drew_something < REPLICATES  # the seed draws some empty replicates: the case
    perfect = intervals.filter(
        pl.col("metric").is_in(["precision", "recall", "f1"]) & (pl.col("value") == 1.0)
    )
    assert perfect.height > 20
    assert (perfect["low"] == 1.0).all() and (perfect["high"] == 1.0).all()
    flat = _row(intervals, "flat", "micro", "f1")
    assert flat["replicates"] == drew_something
    for family, level, metric in (("icm", "overall", "icm"), ("example", "leaf", "f1")):
        row = _row(intervals, family, "mean", metric, level=level)
        assert row["replicates"] == drew_something
    # Counts are defined in every replicate (a replicate that drew nothing counts 0 TPs).
    assert _row(intervals, "flat", "micro", "tp")["replicates"] == REPLICATES


def test_the_procedures_slice_counts_the_replicates_that_drew_a_procedure(three_perfect):
    intervals, weights = three_perfect
    drew_d3 = int((weights[:, 2] > 0).sum())
    proc = _row(intervals, "flat_proc", "micro", "f1")
    assert proc["replicates"] == drew_d3 < REPLICATES
    assert (proc["low"], proc["high"]) == (1.0, 1.0)


@pytest.fixture(scope="module")
def rare_procedures(tmp_path_factory, cache):
    """100 documents, procedures in 4 of them; a model imperfect on the procedures: a
    document with a missed procedure only (doc030: no predicted procedure), one with a
    wrong procedure (doc050) and one with a procedure where the gold has none (doc070)."""
    folder = tmp_path_factory.mktemp("rare")
    rng = np.random.default_rng(4)
    docs = [f"doc{d:03d}" for d in range(100)]
    gold = [(d, c) for d in docs for c in rng.choice(DIAGNOSES, 2, replace=False)]
    procedures = [("doc010", "96.04"), ("doc030", "99.04"), ("doc050", "99.04")]
    gold += [*procedures, ("doc090", "96.04")]
    pred = [r for r in gold if r not in procedures[1:]]
    pred += [("doc050", "96.04"), ("doc070", "99.04")]
    gold_file, pred_file = _write(folder / "gold.csv", gold), _write(folder / "pred.csv", pred)
    out = _evaluate(folder, cache, gold_file, {"m": pred_file}, "--bootstrap", str(REPLICATES))
    return pl.read_parquet(out / "intervals.parquet"), docs, gold, pred


def _naive_micro(docs, gold, pred, keep, weights) -> dict[str, np.ndarray]:
    """Micro P, R, F1 per replicate over the codes ``keep`` accepts, from the weighted
    per-document counts; NaN where a metric divides by 0 in the replicate (P: nothing
    predicted, R: no gold code, F1: neither)."""
    position = {d: i for i, d in enumerate(docs)}
    tp, fp, fn = (np.zeros(len(docs)) for _ in range(3))
    gold_set, pred_set = {r for r in gold if keep(r[1])}, {r for r in pred if keep(r[1])}
    for d, _ in gold_set & pred_set:
        tp[position[d]] += 1
    for d, _ in pred_set - gold_set:
        fp[position[d]] += 1
    for d, _ in gold_set - pred_set:
        fn[position[d]] += 1
    t, p, n = weights @ tp, weights @ fp, weights @ fn
    with np.errstate(invalid="ignore", divide="ignore"):
        return {
            "precision": np.where(t + p > 0, t / (t + p), np.nan),
            "recall": np.where(t + n > 0, t / (t + n), np.nan),
            "f1": np.where(t + p + n > 0, 2 * t / (2 * t + p + n), np.nan),
        }


@pytest.mark.parametrize("metric", ["precision", "recall", "f1"])
@pytest.mark.parametrize(
    ("family", "keep"),
    [("flat_proc", lambda c: c in PROCEDURES), ("flat_dx", lambda c: c not in PROCEDURES)],
)
def test_slice_interval_is_the_naive_bootstrap_over_the_replicates_that_drew_it(
    rare_procedures, family, keep, metric
):
    """A naive bootstrap written here (weighted counts of the slice's codes, replicates in
    which the metric divides by 0 left out) gives the interval and the number of replicates:
    a replicate that drew the wrong procedure of doc070 alone says nothing of the recall, one
    that drew the missed procedure of doc030 alone nothing of the precision."""
    intervals, docs, gold, pred = rare_procedures
    values = _naive_micro(docs, gold, pred, keep, _weights(docs))[metric]
    defined = values[~np.isnan(values)]
    low, high = np.quantile(defined, [0.025, 0.975])
    row = _row(intervals, family, "micro", metric)
    assert row["replicates"] == defined.size
    assert row["low"] == pytest.approx(low, rel=1e-12)
    assert row["high"] == pytest.approx(high, rel=1e-12)
    if family == "flat_proc":
        assert defined.size < REPLICATES


SCORED = [
    ("d1", "401.9", 0.9), ("d1", "428.0", 0.2), ("d2", "250.00", 0.8), ("d2", "401.9", 0.1),
    ("d3", "428.0", 0.95), ("d3", "96.04", 0.9), ("d3", "250.00", 0.3),
]  # fmt: skip
SCORED_GOLD = [("d1", "401.9"), ("d2", "250.00"), ("d3", "428.0"), ("d3", "96.04")]


def test_ranking_and_calibration_rows_leave_out_replicates_without_a_document(tmp_path, cache):
    """A scored model on 3 documents: recall@K and MAP are 1 in every replicate with a
    document ([1, 1]); Brier is the naive weighted ratio over those replicates alone."""
    gold = _write(tmp_path / "gold.csv", SCORED_GOLD)
    pred = tmp_path / "scored.csv"
    pl.DataFrame(SCORED, schema=["doc_id", "code", "score"], orient="row").write_csv(pred)
    out = _evaluate(tmp_path, cache, gold, {"m": pred}, "--bootstrap", str(REPLICATES))
    intervals = pl.read_parquet(out / "intervals.parquet")
    weights = _weights(["d1", "d2", "d3"])
    drew = weights.sum(1) > 0
    for metric in ("recall@5", "map", "r_precision"):
        row = _row(intervals, "ranking", "mean", metric)
        assert (row["low"], row["high"], row["replicates"]) == (1.0, 1.0, drew.sum()), metric
    # Brier over the label space (every gold or scored code), each document's squared errors.
    labels = sorted({c for _, c in SCORED_GOLD} | {c for _, c, _ in SCORED})
    score = {(d, c): s for d, c, s in SCORED}
    truth = set(SCORED_GOLD)
    squared = np.array(
        [
            sum((score.get((d, c), 0.0) - ((d, c) in truth)) ** 2 for c in labels)
            for d in ("d1", "d2", "d3")
        ]
    )
    brier = (weights[drew] @ squared) / (weights[drew].sum(1) * len(labels))
    low, high = np.quantile(brier, [0.025, 0.975])
    row = _row(intervals, "calibration", "micro", "brier")
    assert row["replicates"] == drew.sum() < REPLICATES
    assert row["low"] == pytest.approx(low, rel=1e-9) and row["high"] == pytest.approx(high)


# -- permutations 0: intervals of differences, no test ----------------------------------------

NO_TEST = "no test (permutations: 0)"


def _zoo(folder: Path) -> tuple[Path, dict[str, Path]]:
    """A gold of 12 documents and two models (one perfect, one missing codes)."""
    gold = [(f"d{d:02d}", DIAGNOSES[(d + k) % 5]) for d in range(12) for k in range(2)]
    weaker = [r for i, r in enumerate(gold) if i % 3] + [("d00", "96.04")]
    return _write(folder / "gold.csv", gold), {
        "perfect": _write(folder / "perfect.csv", gold),
        "weaker": _write(folder / "weaker.csv", weaker),
    }


def _assert_no_test_reported(report: Path) -> None:
    comparisons = pl.read_parquet(report / "comparisons.parquet")
    assert comparisons.height > 0
    assert comparisons["p_value"].is_null().all() and comparisons["low"].is_not_null().any()
    html = (report / "report.html").read_text()
    assert "Which differences are real" in html and NO_TEST in html
    assert NO_TEST in (report / "summary.md").read_text()


def test_cli_with_permutations_0_reports_differences_without_a_test(tmp_path, cache):
    gold, preds = _zoo(tmp_path)
    out = _evaluate(tmp_path, cache, gold, preds, "--bootstrap", "30", "--permutations", "0")
    _assert_no_test_reported(out)


def test_workflow_with_permutations_0_reports_differences_without_a_test(tmp_path):
    _, preds = _zoo(tmp_path)
    (tmp_path / "models.tsv").write_text(
        "model\tpredictions\n" + "".join(f"{m}\t{p.name}\n" for m, p in preds.items())
    )
    config = tmp_path / "my.yaml"
    config.write_text(
        "gold: gold.csv\nmodels: models.tsv\nmax_level: e0\n"
        "uncertainty:\n  bootstrap: 30\n  permutations: 0\n"
    )
    result = snakemake(tmp_path, "--configfile", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    _assert_no_test_reported(tmp_path / "results" / "my" / "report")


# -- more replicates than memory holds: refused up front, naming the largest that fits --------

HUGE = "1000000000"


def _largest_named(message: str) -> int:
    found = re.search(r"at most ([0-9,]+) fit", message)
    assert found, message
    return int(found.group(1).replace(",", ""))


def test_cli_refuses_a_bootstrap_that_cannot_fit_and_names_what_fits(tmp_path, capsys):
    gold, preds = _zoo(tmp_path)
    out = tmp_path / "out"
    args = ["evaluate", "--gold", str(gold), "--out", str(out), "--threads", "1"]
    args += [f"--pred={m}={p}" for m, p in preds.items()]
    assert main([*args, "--memory-limit", "4GB", "--bootstrap", HUGE]) != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "1,000,000,000" in err and "above --memory-limit 4GB;" in err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["gold.csv", "perfect.csv", "weaker.csv"]
    )
    largest = _largest_named(err)
    resources = Resources(threads=1, memory_limit="4GB")
    resources.check_bootstrap(largest, models=2)  # the number named fits ...
    with pytest.raises(ConfigError):
        resources.check_bootstrap(largest + 1, models=2)  # ... and is the largest that does
    # What fits is a real allowance: 2 models' replicates of every row within the 4 GB.
    assert 50_000 < largest < 4e9 / (8 * 2 * 300)


def test_cli_refuses_a_huge_bootstrap_without_a_memory_limit(tmp_path, capsys):
    """Without engine.memory_limit the budget is the memory the process may use."""
    gold, preds = _zoo(tmp_path)
    args = ["evaluate", "--gold", str(gold), "--out", str(tmp_path / "out")]
    args += [f"--pred={m}={p}" for m, p in preds.items()]
    assert main([*args, "--bootstrap", "1000000000000"]) != 0
    err = capsys.readouterr().err
    assert "this process may use" in err and "Traceback" not in err
    assert _largest_named(err) > 0 and not (tmp_path / "out").exists()


def test_workflow_refuses_a_bootstrap_that_cannot_fit_at_parse_time(tmp_path):
    _, preds = _zoo(tmp_path)
    (tmp_path / "models.tsv").write_text(
        "model\tpredictions\n" + "".join(f"{m}\t{p.name}\n" for m, p in preds.items())
    )
    config = tmp_path / "my.yaml"
    config.write_text(
        "gold: gold.csv\nmodels: models.tsv\nengine:\n  memory_limit: 4GB\n"
        f"uncertainty:\n  bootstrap: {HUGE}\n"
    )
    message = parse_time_refusal(tmp_path, config)
    assert "engine.memory_limit: 4GB" in message and _largest_named(message) > 50_000
