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


@pytest.mark.parametrize("below", [0, 1])
def test_counted_from_kept_tables_as_from_the_tables(icd9, tmp_path, monkeypatch, below):
    """Tables this process normalised are counted from memory (hieval.inputs.handoff)."""
    from hieval.hierarchy.table import read_level_table, write_level_table
    from hieval.inputs import handoff
    from tests.test_handoff import normalise

    write_level_table(icd9, tmp_path / "levels.parquet", tmp_path / "ancestors.parquet")
    levels = read_level_table(tmp_path / "levels.parquet")
    gold_rows = [("a", "401.9"), ("a", "428.0"), ("b", "250.00"), ("é", "584.9")]
    pred_rows = [("a", "401.9"), ("b", "250.00"), ("é", "599.0"), ("z", "038.9")]
    handoff.forget()
    gold, labels = normalise(tmp_path, levels, gold_rows, pred_rows)
    assert handoff.kept(gold) is not None and handoff.kept(labels) is not None
    gold_frame, decided = pl.read_parquet(gold), pl.read_parquet(labels)
    cells = 3 * 5  # a, b, é x 401.9 428.0 250.00 584.9 599.0 (z dropped)
    monkeypatch.setattr(table, "MAX_DEFAULT_CELLS", cells - below)
    notes_kept, notes_frames = {}, {}
    names = ["hieval", "caml"]
    try:
        by_kept = stage._fitting("m", names, stage._Gold(gold), labels, None, notes_kept)
    finally:
        handoff.forget()
    assert by_kept == [
        "hieval",
        *table._fits("m", ["caml"], gold_frame, decided, None, notes_frames),
    ]
    assert by_kept == (["hieval"] if below else names)
    assert notes_kept == notes_frames
