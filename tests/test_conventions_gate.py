"""A default run's gate on the matrix conventions (hieval.conventions.stage._fitting) counts the
documents and codes from the normalised files' dictionaries, without reading their rows: the
same counts, and so the same verdict and note, as the tables read in full
(hieval.conventions.table._fits), at the limit and one cell below it."""

from __future__ import annotations

import polars as pl
import pytest

from hieval.cli import main
from hieval.conventions import stage, table


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gate")
    gold = pl.DataFrame(
        {
            "doc_id": ["a", "a", "b", "c", "e"],
            "code": ["401.9", "428.0", "250.00", "584.9", ""],  # e: a document with no codes
        }
    )
    pred = pl.DataFrame(
        {"doc_id": ["a", "b", "c", "d"], "code": ["401.9", "250.00", "599.0", "038.9"]}
    )
    gold.write_csv(folder / "gold.csv")
    pred.write_csv(folder / "pred.csv")
    out = folder / "out"
    args = ["evaluate", "--gold", str(folder / "gold.csv"), "--pred", f"m={folder / 'pred.csv'}"]
    assert main([*args, "--unknown-docs", "drop", "--out", str(out), "--cache", str(folder)]) == 0
    work = out / "work" / "inputs"
    normalised = work / "gold.parquet", work / "predictions" / "m.parquet"
    # as written by hand: an empty code and a null one (normalisation writes a null)
    written = folder / "gold_written.parquet", folder / "pred_written.parquet"
    gold.with_columns(pl.col("code").replace("584.9", None)).write_parquet(written[0])
    pred.filter(pl.col("doc_id") != "d").vstack(
        pl.DataFrame({"doc_id": ["c"], "code": [""]})
    ).write_parquet(written[1])
    return {"normalised": normalised, "written": written}


@pytest.mark.parametrize("files", ["normalised", "written"])
@pytest.mark.parametrize("below", [0, 1])
@pytest.mark.parametrize("space", [None, ["401.9", "250.00"]])
def test_counted_from_dictionaries_as_from_the_tables(inputs, monkeypatch, files, below, space):
    gold, labels = inputs[files]
    gold_frame, decided = pl.read_parquet(gold), pl.read_parquet(labels)
    # 401.9 428.0 250.00 584.9 599.0 (d's row dropped); written: 584.9 is null
    codes = len(space) if space else {"normalised": 5, "written": 4}[files]
    cells = gold_frame["doc_id"].n_unique() * codes
    assert gold_frame["doc_id"].n_unique() == 4  # e counts as a document
    monkeypatch.setattr(table, "MAX_DEFAULT_CELLS", cells - below)
    names = ["hieval", "caml", "edin"]
    notes_files, notes_frames = {}, {}
    by_files = stage._fitting("m", names, stage._Gold(gold), labels, space, notes_files)
    by_frames = table._fits("m", names[1:], gold_frame, decided, space, notes_frames)
    assert by_files == ["hieval", *by_frames]
    assert by_files == (["hieval"] if below else names)
    assert notes_files == notes_frames
    assert bool(notes_files) == bool(below)
