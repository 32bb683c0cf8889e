"""The demo's dev split (issue 35: the default demo tunes a model on a dev split): its own
documents, drawn by the same generator, and only the tuned models' predictions on it."""

from __future__ import annotations

import polars as pl
import yaml
from helpers import REPO

from hieval.experiments.demo import DEV_SHARE, TUNED, write_demo


def test_the_dev_split_has_its_own_documents_and_the_tuned_models_predictions(tmp_path, icd9):
    levels = tmp_path / "levels.parquet"
    icd9.frame.write_parquet(levels)
    out = tmp_path / "demo"
    write_demo(levels, out / "gold.parquet", out / "predictions", 7, 40,
               dev_gold_out=out / "dev/gold.parquet",
               dev_prediction_dir=out / "dev/predictions")  # fmt: skip
    gold, dev = pl.read_parquet(out / "gold.parquet"), pl.read_parquet(out / "dev/gold.parquet")
    assert sorted(gold["doc_id"].unique()) == [f"D{i:05d}" for i in range(40)]
    assert sorted(dev["doc_id"].unique()) == [f"D{i:05d}" for i in range(40, 60)]
    assert dev["doc_id"].n_unique() == int(40 * DEV_SHARE)
    assert sorted(p.stem for p in (out / "dev/predictions").iterdir()) == sorted(TUNED)
    for model in TUNED:
        predicted = pl.read_parquet(out / "dev/predictions" / f"{model}.parquet")
        assert set(predicted["doc_id"]) <= set(dev["doc_id"])
        assert "score" in predicted.columns
        test = pl.read_parquet(out / "predictions" / f"{model}.parquet")
        assert set(test["doc_id"]) <= set(gold["doc_id"])


def test_the_shipped_demo_tunes_the_tuned_models_on_the_demo_split():
    sheet = pl.read_csv(REPO / "config/models.tsv", separator="\t", infer_schema=False)
    tuned = sheet.filter(pl.col("threshold") == "tune")
    assert tuned["model"].to_list() == list(TUNED)
    assert tuned["dev_predictions"].to_list() == [
        f"results/demo/dev/predictions/{m}.parquet" for m in TUNED
    ]
    demo = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    assert demo["dev_gold"] == "results/demo/dev/gold.parquet"
    assert demo["uncertainty"]["bootstrap"] >= 200
