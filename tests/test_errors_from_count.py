"""The CLI's error analysis from the count's own encoding (issue 36): ``hieval evaluate`` hands
each model's encoded labels from its count to the analysis beside it, which finds the errors in
those keys instead of reading and encoding the labels a second time. Its ``errors.parquet``,
``confusions/`` and ``codes/`` must be the very bytes the file path writes (the analysis
reading and encoding the normalised files itself, as the workflow's job does, and as the CLI
does for a model whose count hands nothing), on inputs with string and integer doc ids, placed
and counted codes, documents on one side only, duplicate rows, an empty prediction set, several
models and bootstrap intervals; and on the designed zoo, the naive reference's tables
(test_error_analysis: plain Python over sets and the package tree)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
from test_error_analysis import designed_zoo, frame_of, naive_ancestors
from test_errors_compiled import assert_naive_tables

import hieval.analysis.errors
import hieval.errors
import hieval.pipeline
import hieval.run
from hieval import cli
from hieval.analysis import errors
from hieval.analysis_stage import Encodings

MALFORMED = ("hypertension", "zz-9")


def _rows(sets: dict[str, set], *, doubled: int = 0) -> pl.DataFrame:
    """The labels as long rows, the first ``doubled`` rows given twice (duplicates)."""
    frame = frame_of(sets)
    return pl.concat([frame, frame.head(doubled)]) if doubled else frame


def _write(frame: pl.DataFrame, path: Path, *, int_ids: bool) -> Path:
    if int_ids:  # d007 -> 7: integer ids in the file, as a table's INTEGER column holds them
        frame = frame.with_columns(pl.col("doc_id").str.slice(1).cast(pl.Int64))
    if path.suffix == ".csv":
        frame.write_csv(path)
    else:
        frame.write_parquet(path)
    return path


@pytest.fixture(scope="module")
def zoo(icd9, icd9_ancestors):
    """The designed zoo (sibling and same-category swaps, invented codes placed by syntax,
    other-chapter codes, misses, extras, documents a model leaves empty: only in the gold)."""
    up = naive_ancestors(icd9_ancestors)
    gold, models, placed = designed_zoo(icd9, up, seed=11, documents=90)
    return gold, models, placed, up


def _inputs(folder: Path, zoo, *, int_ids: bool, counted: bool) -> tuple[list[str], dict]:
    """The CLI's arguments for the zoo's files in ``folder`` (every case's inputs: duplicate
    rows, a predicted document the gold lacks, dropped, an empty model) and the labels the
    naive reference reads (None when codes are counted: the reference places none)."""
    gold, models, placed, _ = zoo
    models = dict(models)
    if counted:  # a generative coder's codes, kept and placed nowhere; the gold knows none
        gold = {d: {c for c in codes if c not in placed} or {"401.9"} for d, codes in gold.items()}
        for name, sets in models.items():
            models[name] = {
                d: codes | {MALFORMED[i % 2]} if i % 3 == 0 else codes
                for i, (d, codes) in enumerate(sorted(sets.items()))
            }
    folder.mkdir()
    argv = ["--gold", str(_write(_rows(gold, doubled=7), folder / "gold.csv", int_ids=int_ids))]
    for name, sets in models.items():
        extra = _rows({"d999": {"401.9"}})  # a document only in the predictions
        frame = pl.concat([_rows(sets, doubled=5), extra])
        argv += ["--pred", f"{name}={_write(frame, folder / f'{name}.parquet', int_ids=int_ids)}"]
    empty = pl.DataFrame(schema={"doc_id": pl.String, "code": pl.String})
    argv += ["--pred", f"empty={_write(empty, folder / 'empty.csv', int_ids=int_ids)}"]
    argv += ["--unknown-docs", "drop"]
    if counted:
        argv += ["--unknown-codes", "count", "--malformed-codes", "count"]
    naive = None if counted else (gold, {**models, "empty": {}})
    return argv, naive


class _Spy:
    """Counts the error analysis's own encodings of labels (model_errors' ``encode``) and the
    models whose count handed its encoding on."""

    def __init__(self, monkeypatch, *, from_count: bool):
        self.encodes, self.handed = 0, 0
        encode, hand = errors.encode, Encodings.hand

        def encoding(*args, **kwargs):
            self.encodes += 1
            return encode(*args, **kwargs)

        def handing(encodings, name):
            handed = hand(encodings, name)

            def counting(labels, codes):
                self.handed += 1
                handed(labels, codes)

            return counting

        monkeypatch.setattr(hieval.analysis.errors, "encode", encoding)
        monkeypatch.setattr(Encodings, "hand", handing)
        if not from_count:  # the count hands nothing: the analysis reads the files
            count_and_score = hieval.run.count_and_score

            def without_hand_off(**kwargs):
                return count_and_score(**{**kwargs, "on_encoded": None})

            monkeypatch.setattr(hieval.run, "count_and_score", without_hand_off)


def _evaluate(argv: list[str], out: Path, cache: Path, monkeypatch, *, from_count: bool) -> _Spy:
    with monkeypatch.context() as patch:
        spy = _Spy(patch, from_count=from_count)
        command = ["evaluate", *argv, "--out", str(out), "--cache", str(cache)]
        assert cli.main(command) == 0
    return spy


def _analysis_files(out: Path) -> dict[str, bytes]:
    files = [out / "errors.parquet", *sorted((out / "confusions").glob("*.parquet"))]
    files += sorted((out / "codes").glob("*.parquet"))
    return {str(path.relative_to(out)): path.read_bytes() for path in files}


CASES = {
    "string ids, placed codes": {"int_ids": False, "counted": False, "extra": []},
    "integer ids, counted codes": {"int_ids": True, "counted": True, "extra": []},
    "bootstrap, train gold, compiled": {
        "int_ids": False,
        "counted": False,
        "extra": ["--bootstrap", "25", "--seed", "3"],
        "train_gold": True,
        "compiled": True,
    },
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_count_encoding_gives_the_file_paths_bytes(case, zoo, tmp_path, monkeypatch):
    settings = CASES[case]
    if settings.get("compiled"):  # paired by the compiled kernels, in the count's code space
        monkeypatch.setattr(errors, "COMPILED_FROM_LABELS", 0)
    argv, naive = _inputs(
        tmp_path / "in", zoo, int_ids=settings["int_ids"], counted=settings["counted"]
    )
    if settings.get("train_gold"):
        train = {f"t{i}": codes for i, codes in enumerate(list(zoo[0].values())[::3])}
        argv += ["--train-gold", str(_write(_rows(train), tmp_path / "train.csv", int_ids=False))]
    argv += settings["extra"]
    cache = tmp_path / "cache"
    ours = _evaluate(argv, tmp_path / "ours", cache, monkeypatch, from_count=True)
    files = _evaluate(argv, tmp_path / "files", cache, monkeypatch, from_count=False)
    models = 3
    assert (ours.encodes, ours.handed) == (0, models)  # no second encoding: the count's keys
    assert (files.encodes, files.handed) == (models, 0)  # the file path did encode again
    got, expected = _analysis_files(tmp_path / "ours"), _analysis_files(tmp_path / "files")
    assert len(got) == 1 + 2 * models
    assert got.keys() == expected.keys()
    for name, content in got.items():
        assert content == expected[name], f"{name} differs from the file path's"
    errors_table = pl.read_parquet(tmp_path / "ours" / "errors.parquet")
    assert errors_table["model"].unique().sort().to_list() == ["empty", "far", "near"]
    if "--bootstrap" in argv:
        assert errors_table["low"].is_not_null().all()
    if naive is not None:  # and the tables are right: the naive reference's
        gold, models_sets = naive
        out = tmp_path / "ours"
        evaluation = SimpleNamespace(
            errors=errors_table,
            confusions={
                n: pl.read_parquet(out / "confusions" / f"{n}.parquet") for n in models_sets
            },
        )
        assert_naive_tables(evaluation, gold, models_sets, zoo[3], zoo[2])


def test_an_analysis_behind_the_counts_reads_the_files(zoo, tmp_path, monkeypatch):
    """One encoding waits to be taken at most: a count that finds the analysis behind hands
    none, and the analysis encodes that model's files itself, to the same bytes."""
    argv, _ = _inputs(tmp_path / "in", zoo, int_ids=False, counted=False)
    cache = tmp_path / "cache"
    take = Encodings._take
    late: list[str] = []

    def behind(encodings, name):  # the first model's labels taken only once all are counted
        if not late:
            late.append(name)
            for handed in encodings._handed.values():
                handed.exception()  # waits until each is handed (or none)
        return take(encodings, name)

    with monkeypatch.context() as patch:
        patch.setattr(Encodings, "_take", behind)
        ours = _evaluate(argv, tmp_path / "ours", cache, monkeypatch, from_count=True)
    _evaluate(argv, tmp_path / "files", cache, monkeypatch, from_count=False)
    assert (ours.encodes, ours.handed) == (2, 3)  # two counts found the first one waiting
    assert _analysis_files(tmp_path / "ours") == _analysis_files(tmp_path / "files")


def test_a_users_tree_with_labels_at_inner_nodes(tmp_path, monkeypatch):
    """A user's tree, whose labels include inner and top nodes (the count's code space holds
    the nodes above the labels as codes too; the analysis's own holds the labels' only)."""
    tree = tmp_path / "tree.csv"
    tree.write_text(
        "child,parent\nA,\nB,\nA1,A\nA2,A\nB1,B\nA1x,A1\nA1y,A1\nA2x,A2\nB1x,B1\nB1y,B1\n"
    )
    gold = {"d1": {"A1x", "B1x", "A"}, "d2": {"A1", "B1y"}, "d3": {"B1y"}, "d4": {"A2x"}}
    pred = {"d1": {"A1y", "A2x", "B"}, "d2": {"A1x", "B1"}, "d3": set(), "d4": {"A2", "A1x"}}
    folder = tmp_path / "in"
    folder.mkdir()
    argv = ["--gold", str(_write(_rows(gold), folder / "gold.csv", int_ids=False))]
    argv += ["--pred", f"m={_write(_rows(pred), folder / 'm.csv', int_ids=False)}"]
    argv += ["--hierarchy", str(tree)]
    cache = tmp_path / "cache"
    ours = _evaluate(argv, tmp_path / "ours", cache, monkeypatch, from_count=True)
    files = _evaluate(argv, tmp_path / "files", cache, monkeypatch, from_count=False)
    assert (ours.encodes, files.encodes) == (0, 1)
    assert _analysis_files(tmp_path / "ours") == _analysis_files(tmp_path / "files")
    # By hand: pairs meeting at d2 (the near-miss level of a user's tree: the parent of its
    # deepest nodes) or deeper; d1's missed A meets its wrong A2x and B only above d2.
    confusions = pl.read_parquet(tmp_path / "ours" / "confusions" / "m.parquet")
    pairs = set(confusions.select("gold_code", "predicted_code", "lca_level").iter_rows())
    assert pairs == {
        ("A1x", "A1y", "d2"),  # d1
        ("A1", "A1x", "d2"),  # d2: an inner node missed, a leaf under it predicted
        ("B1y", "B1", "d2"),  # d2
        ("A2x", "A2", "d2"),  # d4
    }


def test_a_count_failing_after_its_hand_off_stops_the_analysis(zoo, tmp_path, monkeypatch):
    """The analysis has the model's encoding, and waits for node counts that never come: the
    count's own error is reported, and the run does not hang."""
    argv, _ = _inputs(tmp_path / "in", zoo, int_ids=False, counted=False)

    def failing(**kwargs):
        raise hieval.errors.HievalError("the metrics failed here")

    monkeypatch.setattr(hieval.pipeline, "model_rows_and_scores", failing)
    with monkeypatch.context() as patch:
        spy = _Spy(patch, from_count=True)
        command = ["evaluate", *argv, "--out", str(tmp_path / "o"), "--cache", str(tmp_path / "c")]
        assert cli.main(command) != 0
    assert spy.handed == 1
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("layout", ["dense matrix", "scored long rows"])
def test_scored_models_give_the_file_paths_bytes(layout, icd9_leaves, tmp_path, monkeypatch):
    """A dense score matrix (counted from its thresholded labels, its scores a reference to
    the matrix) and a long file with scores, decided at the threshold: the same bytes."""
    from test_dense_wiring import _matrix_case

    folder = tmp_path / "in"
    folder.mkdir()
    gold, matrix = _matrix_case(folder, icd9_leaves)
    if layout == "dense matrix":
        argv = ["--gold", str(gold), "--pred", f"m={matrix}", "--format", "m=dense"]
    else:
        scores = np.load(matrix)
        docs = (folder / "m.docs.txt").read_text().split()
        codes = (folder / "m.codes.txt").read_text().split()
        rows = pl.DataFrame(
            {
                "doc_id": np.repeat(docs, len(codes)),
                "code": np.tile(codes, len(docs)),
                "score": scores.ravel().astype(np.float64),
            }
        )
        argv = [
            "--gold",
            str(gold),
            "--pred",
            f"m={_write(rows, folder / 'm.parquet', int_ids=False)}",
        ]
    argv += ["--unknown-docs", "drop", "--threshold", "0.45"]
    cache = tmp_path / "cache"
    ours = _evaluate(argv, tmp_path / "ours", cache, monkeypatch, from_count=True)
    files = _evaluate(argv, tmp_path / "files", cache, monkeypatch, from_count=False)
    assert (ours.encodes, ours.handed, files.encodes) == (0, 1, 1)
    got = _analysis_files(tmp_path / "ours")
    assert got == _analysis_files(tmp_path / "files")
    assert pl.read_parquet(tmp_path / "ours" / "errors.parquet")["count"].sum() > 0
