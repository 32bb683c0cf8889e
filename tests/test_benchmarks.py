"""The benchmark tooling at a tiny scale: generator, dense baseline (against hieval), harness."""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import generate as gen  # noqa: E402
from benchmarks.dense_baseline import dense_counts, hieval_micro, plan  # noqa: E402
from benchmarks.harness import measure, render, table_rows  # noqa: E402
from hieval.engine.counts import evaluated_levels  # noqa: E402
from hieval.engine.driver import count  # noqa: E402
from hieval.hierarchy.table import write_level_table  # noqa: E402

DOCS = 200


@pytest.fixture(scope="module")
def data(tmp_path_factory, icd9) -> tuple[Path, Path, Path]:
    out = tmp_path_factory.mktemp("bench")
    gold, pred = gen.generate(documents=DOCS, seed=11, out_dir=out, table=icd9)
    ancestors = out / "hierarchy" / "ancestors.parquet"
    write_level_table(icd9, ancestors.with_name("levels.parquet"), ancestors)
    return gold, pred, ancestors


def test_generator_is_deterministic_and_mimic_shaped(data, tmp_path, icd9, icd9_ancestors):
    gold_path, pred_path, _ = data
    again = gen.generate(documents=DOCS, seed=11, out_dir=tmp_path, table=icd9)
    gold, pred = pl.read_parquet(gold_path), pl.read_parquet(pred_path)
    assert gold.equals(pl.read_parquet(again[0])) and pred.equals(pl.read_parquet(again[1]))
    other = gen.generate(documents=DOCS, seed=12, out_dir=tmp_path, table=icd9)[0]
    assert not gold.equals(pl.read_parquet(other))

    for frame in (gold, pred):
        assert frame.schema == pl.Schema({"doc_id": pl.String, "code": pl.String})
        assert not frame.is_duplicated().any()
        assert frame.equals(frame.sort("doc_id", "code"))
    assert gold["doc_id"].n_unique() == DOCS
    assert gold["doc_id"].min() == "D0000001" and gold["doc_id"].max() == f"D{DOCS:07d}"
    assert set(pred["doc_id"]) <= set(gold["doc_id"])
    assert 14 < gold.height / DOCS < 18  # Poisson(15.9) codes per document
    assert 0.85 < pred.height / gold.height < 1.15  # about as many predicted as gold codes
    assert 0.6 < gold.join(pred, on=["doc_id", "code"]).height / gold.height < 0.8

    internal = icd9_ancestors.filter(pl.col("ancestor") != pl.col("code"))["ancestor"]
    codes = pl.concat([gold["code"], pred["code"]]).unique()
    assert codes.is_in(icd9.frame["code"].implode()).all()  # real ICD-9-CM codes ...
    assert not codes.is_in(internal.unique().implode()).any()  # ... and leaves
    record = gen.record(gold_path)
    assert (record["documents"], record["gold_rows"], record["pred_rows"]) == (
        DOCS,
        gold.height,
        pred.height,
    )


def test_dense_baseline_equals_hieval_at_every_level(data, icd9):
    gold, pred, ancestors = data
    levels = evaluated_levels(icd9.levels, "c")
    nodes, _ = count(gold, pred, ancestors, levels)
    ours = hieval_micro(nodes)
    theirs, timings = dense_counts(gold, pred, ancestors, levels)
    expected = {("flat", "leaf")} | {(f, lv) for f in ("set", "cophe") for lv in levels}
    assert set(theirs) == expected
    assert theirs == ours
    assert all(tp > 0 and fp > 0 and fn > 0 for tp, fp, fn in theirs.values())
    assert set(timings) == {"load", "matrices", "evaluate"}
    sizes = plan(gold, pred, ancestors, levels)
    assert sizes.documents == DOCS and sizes.codes > 0 and sizes.peak_bytes > 0


def test_harness_measures_in_a_child_and_renders(data):
    gold, pred, ancestors = data
    floor = measure("floor", gold, pred, ancestors, {"threads": 1})
    assert floor["rows"] == pl.scan_parquet([gold, pred]).select(pl.len()).collect().item()
    assert floor["peak_rss_mb"] > 10 and floor["seconds"] > 0
    run = {
        "scale": 0.05,
        "info": gen.record(gold),
        "results": {
            "floor": floor,
            "hieval": {"seconds": 0.5, "count_s": 0.4, "metrics_s": 0.1, "peak_rss_mb": 300},
            "baseline": {
                "seconds": 20.0,
                "load_s": 1,
                "matrices_s": 2,
                "evaluate_s": 17,
                "need_gb": 0.5,
                "peak_rss_mb": 900,
            },
        },
        "check": "identical (9 family × level cells)",
    }
    table = render(table_rows(run))
    lines = table.splitlines()
    assert lines[0].startswith("| scale | documents | gold rows | pred rows | step | wall s")
    assert len(lines) == 2 + 3
    assert "40× faster" in lines[3] and "identical" in lines[3]
    assert render([]) == ""
