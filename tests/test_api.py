"""The Python API (issue 31): ``hieval.evaluate`` gives the CLI's numbers for every input kind,
read from the CLI's own output files (an independent route: a process-level run on files);
in-memory inputs are validated and refused exactly as files are."""

from __future__ import annotations

import argparse
import doctest
import inspect
import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import scipy.sparse
from polars.testing import assert_frame_equal

import hieval
from hieval import api, cli, evaluator, memory
from hieval.experiments.demo import make_demo
from hieval.metrics import registry

UNCERTAINTY = ("--bootstrap", "20", "--permutations", "20")


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def zoo(icd9):
    """The demo zoo (small: scored and unscored models), with one more scored model."""
    gold, predictions = make_demo(icd9.frame, seed=5, documents=80)
    rng = np.random.default_rng(7)
    over = predictions["over_predictor"]
    predictions["scored"] = over.with_columns(score=pl.Series(np.round(rng.random(over.height), 3)))
    # A mapping holds a (document, code) once: so do the files it is compared with.
    once = {n: f.unique(["doc_id", "code"], keep="first", maintain_order=True)
            for n, f in predictions.items()}  # fmt: skip
    return gold, once


@pytest.fixture(scope="module")
def files(tmp_path_factory, zoo) -> tuple[Path, dict[str, Path]]:
    folder = tmp_path_factory.mktemp("zoo")
    gold, predictions = zoo
    gold.write_parquet(folder / "gold.parquet")
    paths = {}
    for name, frame in predictions.items():
        paths[name] = folder / f"{name}.parquet"
        frame.write_parquet(paths[name])
    return folder / "gold.parquet", paths


def run_cli(out: Path, gold: Path, predictions: dict[str, Path], cache: Path, *extra) -> Path:
    argv = ["evaluate", "--gold", str(gold), "--out", str(out), "--cache", str(cache)]
    for name, path in predictions.items():
        argv += ["--pred", f"{name}={path}"]
    assert cli.main([*argv, *extra]) == 0
    return out


@pytest.fixture(scope="module")
def cli_out(tmp_path_factory, files, cache) -> Path:
    gold, predictions = files
    return run_cli(tmp_path_factory.mktemp("cli") / "out", gold, predictions, cache, *UNCERTAINTY)


@pytest.fixture(scope="module")
def from_frames(zoo, cache) -> hieval.Evaluation:
    gold, predictions = zoo
    return hieval.evaluate(gold, predictions, cache=cache, bootstrap=20, permutations=20)


def same_bits(ours: pl.DataFrame, theirs: pl.DataFrame) -> None:
    """Equal row for row, and each float equal to the last bit (NaN included)."""
    assert_frame_equal(ours, theirs, check_exact=True)
    for column, dtype in ours.schema.items():
        if dtype == pl.Float64:
            a, b = (f[column].to_numpy().view(np.int64) for f in (ours, theirs))
            assert np.array_equal(a, b), column


def test_metrics_from_dataframes_are_the_cli_metrics_bit_for_bit(from_frames, cli_out):
    same_bits(from_frames.metrics, pl.read_parquet(cli_out / "metrics.parquet"))
    assert from_frames.models == ["sibling_confuser", "over_predictor", "cautious_coder",
                                  "distant_guesser", "scored"]  # fmt: skip


def test_intervals_comparisons_nodes_and_summary_are_the_cli_files(from_frames, cli_out):
    same_bits(from_frames.intervals, pl.read_parquet(cli_out / "intervals.parquet"))
    same_bits(from_frames.comparisons, pl.read_parquet(cli_out / "comparisons.parquet"))
    for model in from_frames.models:
        counts = pl.read_parquet(cli_out / "work" / "counts" / model / "nodes.parquet")
        ours = from_frames.nodes.filter(model=model).drop("model")
        assert_frame_equal(ours, counts, check_exact=True)
    summary = from_frames.summary()
    on_disk = pl.read_csv(cli_out / "summary.csv", schema=summary.schema)
    assert_frame_equal(summary, on_disk, check_exact=False, rel_tol=1e-12)


def test_records_are_the_cli_records_but_for_the_inputs_name(from_frames, cli_out):
    inputs = cli_out / "work" / "inputs"
    for name, record in from_frames.records.items():
        path = inputs / ("gold.json" if name == "gold" else f"predictions/{name}.json")
        theirs = json.loads(path.read_text("utf-8"))
        assert {k: v for k, v in record.items() if k != "path"} == {
            k: v for k, v in theirs.items() if k != "path"
        }
    assert from_frames.records["scored"]["path"] == "scored (in memory)"


def test_records_carry_the_coverage_warning_the_cli_records(tmp_path, cache):
    """A model that leaves most gold documents without a row is said to, in the record."""
    gold = {"a": ["401.9"], "b": ["250.00"], "c": ["428.0"], "d": ["V10.3"]}
    pred = {"a": ["401.9"]}
    (tmp_path / "g.csv").write_text("doc_id,code\n" + "".join(
        f"{d},{c}\n" for d, cs in gold.items() for c in cs))  # fmt: skip
    (tmp_path / "p.csv").write_text("doc_id,code\na,401.9\n")
    out = run_cli(tmp_path / "o", tmp_path / "g.csv", {"m": tmp_path / "p.csv"}, cache)
    theirs = json.loads((out / "work/inputs/predictions/m.json").read_text())["warnings"]
    ours = hieval.evaluate(gold, {"m": pred}, cache=cache).records["m"]["warnings"]
    assert ours == theirs
    assert "3 of 4 gold documents" in ours[0]


def test_write_writes_the_cli_files(tmp_path, files, cache):
    """From the same files, ``write`` leaves the CLI's file list, and its bytes wherever the
    CLI's own two runs agree byte for byte."""
    gold, predictions = files
    first = run_cli(tmp_path / "a", gold, predictions, cache)
    second = run_cli(tmp_path / "b", gold, predictions, cache)
    ev = hieval.evaluate(gold, predictions, cache=cache)
    assert ev.write(tmp_path / "api") == tmp_path / "api"

    def listing(folder: Path) -> dict[str, bytes]:
        return {
            str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()
        }

    a, b, ours = listing(first), listing(second), listing(tmp_path / "api")
    assert set(ours) == set(a)
    deterministic = [name for name in a if a[name] == b[name]]
    assert "metrics.parquet" in deterministic
    assert [n for n in deterministic if ours[n] != a[n]] == []


def test_write_refuses_a_folder_holding_a_users_file(tmp_path, from_frames):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(hieval.HievalError, match=r"notes\.txt"):
        from_frames.write(out)
    assert (out / "notes.txt").read_text() == "mine"
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


# --- every input kind ----------------------------------------------------------------------


def codes_of(frame: pl.DataFrame) -> dict[str, list[str]]:
    return {
        d: list(c) for d, c in frame.group_by("doc_id", maintain_order=True).agg("code").iter_rows()
    }


def scores_of(frame: pl.DataFrame) -> dict[str, dict[str, float]]:
    grouped = frame.group_by("doc_id", maintain_order=True).agg("code", "score").iter_rows()
    return {d: dict(zip(c, s, strict=True)) for d, c, s in grouped}


@pytest.fixture(scope="module")
def plain(tmp_path_factory, files, cache) -> pl.DataFrame:
    gold, predictions = files
    out = tmp_path_factory.mktemp("plain") / "out"
    return pl.read_parquet(run_cli(out, gold, predictions, cache) / "metrics.parquet")


@pytest.mark.parametrize(
    "kind", ["path", "pandas", "lazy", "codes", "scores", "single", "gold_codes", "gold_pandas"]
)
def test_every_input_kind_gives_the_cli_metrics(kind, zoo, files, plain, cache):
    gold, predictions = zoo
    gold_in: object = gold
    preds: object = dict(predictions)
    if kind == "path":
        gold_in, preds = files
    elif kind == "pandas":
        preds = {n: f.to_pandas() for n, f in predictions.items()}
    elif kind == "lazy":
        preds = {n: f.lazy() for n, f in predictions.items()}
    elif kind == "codes":
        preds = {n: f if "score" in f.columns else codes_of(f) for n, f in predictions.items()}
    elif kind == "scores":
        preds = {n: scores_of(f) if "score" in f.columns else f for n, f in predictions.items()}
    elif kind == "gold_codes":
        gold_in = codes_of(gold)
    elif kind == "gold_pandas":
        gold_in = gold.to_pandas()
    if kind == "single":
        ev = hieval.evaluate(gold, scores_of(predictions["scored"]), cache=cache)
        assert ev.models == [api.DEFAULT_MODEL]
        expected = plain.filter(model="scored").with_columns(model=pl.lit(api.DEFAULT_MODEL))
        same_bits(ev.metrics, expected)
        return
    same_bits(hieval.evaluate(gold_in, preds, cache=cache).metrics, plain)


@pytest.fixture(scope="module")
def dense_case(tmp_path_factory, zoo, cache):
    """The scored model as a documents x codes matrix (absent cells score 0), and the CLI's
    metrics for it as a ``.npy`` file with its lists."""
    gold, predictions = zoo
    scored = predictions["scored"]
    docs = sorted(gold["doc_id"].unique().to_list())
    codes = sorted(scored["code"].unique().to_list())
    matrix = np.zeros((len(docs), len(codes)))
    row = {d: i for i, d in enumerate(docs)}
    col = {c: j for j, c in enumerate(codes)}
    for d, c, s in scored.iter_rows():
        matrix[row[d], col[c]] = s
    folder = tmp_path_factory.mktemp("dense")
    np.save(folder / "m.npy", matrix)
    (folder / "m.codes.txt").write_text("".join(f"{c}\n" for c in codes))
    (folder / "m.docs.txt").write_text("".join(f"{d}\n" for d in docs))
    gold.write_parquet(folder / "gold.parquet")
    out = run_cli(folder / "out", folder / "gold.parquet", {"m": folder / "m.npy"}, cache,
                  "--format", "m=dense")  # fmt: skip
    return gold, matrix, codes, docs, pl.read_parquet(out / "metrics.parquet")


@pytest.mark.parametrize("as_sparse", [False, True])
def test_dense_scores_give_the_cli_metrics_of_the_npy_file(dense_case, cache, as_sparse):
    gold, matrix, codes, docs, expected = dense_case
    scores = scipy.sparse.csr_array(matrix) if as_sparse else matrix
    ev = hieval.evaluate(gold, {"m": hieval.dense(scores, codes=codes, doc_ids=docs)}, cache=cache)
    same_bits(ev.metrics, expected)


# --- read or refused exactly as in files ---------------------------------------------------

GOLD_ROWS = [("a", "401.9"), ("a", "428.0"), ("b", "250.00"), ("c", "V10.3")]


def location_free(message: str, where: str) -> list[str]:
    """Each line of a refusal without where (``where``: the file or the in-memory input; a
    file's line, or a document) and without the hint, whose syntax is the entry point's
    (``--code-type`` or ``code_type=``)."""
    message = message.replace("hieval: error: ", "").replace(where, "INPUT")
    message = re.sub(r", (?:line|row) \d+|, document '[^']*'", "", message)
    return sorted(line.split(";")[0].strip() for line in message.strip().splitlines())


@pytest.mark.parametrize(
    ("codes", "options"),
    [
        ({"a": ["4019"], "b": ["bogus"]}, {}),
        ({"a": ["4019", "4280"], "b": ["25000"]}, {}),
        ({"a": ["4019", "4280"], "b": ["25000"]}, {"code_type": "dx"}),
        ({"a": ["4019"], "b": ["9999"]}, {"code_type": "proc"}),
        ({"a": ["401.9"], "b": ["bogus", "250.00"]}, {"unknown_codes": "drop"}),
        ({"a": ["401.99"], "b": ["250.0"]}, {"unknown_codes": "error"}),
        ({"a": ["E849.7", "V10.3"], "c": ["V103"]}, {}),
    ],
)
def test_undotted_and_bogus_codes_are_read_or_refused_as_in_a_file(
    tmp_path, cache, capsys, codes, options
):
    gold = tmp_path / "gold.csv"
    gold.write_text("doc_id,code\n" + "".join(f"{d},{c}\n" for d, c in GOLD_ROWS))
    pred = tmp_path / "pred.csv"
    pred.write_text("doc_id,code\n" + "".join(f"{d},{c}\n" for d, cs in codes.items() for c in cs))
    argv = ["evaluate", "--gold", str(gold), "--pred", f"m={pred}", "--out", str(tmp_path / "o"),
            "--cache", str(cache)]  # fmt: skip
    for key, value in options.items():
        argv += [f"--{key.replace('_', '-')}", value]
    capsys.readouterr()
    code = cli.main(argv)
    cli_error = capsys.readouterr().err.partition("hieval: error: ")[2]
    gold_map = {d: [c for g, c in GOLD_ROWS if g == d] for d in dict(GOLD_ROWS)}
    if code == 0:
        ev = hieval.evaluate(gold_map, {"m": codes}, cache=cache, **options)
        same_bits(ev.metrics, pl.read_parquet(tmp_path / "o" / "metrics.parquet"))
        return
    with pytest.raises(hieval.HievalError) as raised:
        hieval.evaluate(gold_map, {"m": codes}, cache=cache, **options)
    message = str(raised.value)
    assert location_free(message, "m (in memory)") == location_free(cli_error, str(pred))
    assert message.startswith("m: ") and str(tmp_path) not in message
    assert "hieval-evaluate-" not in message  # no private file named
    if re.search(r", (?:line|row) \d+", cli_error):  # where the file's line is named
        assert re.search(r"document '[abc]'", message), message


def test_a_number_among_codes_is_refused_naming_document_and_value(cache):
    with pytest.raises(hieval.InputError, match=r"m: document 'b': code 4019 \(int\) among text"):
        hieval.evaluate({"a": ["401.9"], "b": ["250.00"]}, {"m": {"a": ["401.9"], "b": [4019]}},
                        cache=cache)  # fmt: skip


def test_a_string_for_a_documents_codes_is_refused(cache):
    with pytest.raises(hieval.InputError, match=r"document 'a' maps to '401.9'"):
        hieval.evaluate({"a": ["401.9"]}, {"m": {"a": "401.9"}}, cache=cache)


def test_unknown_documents_are_refused_with_the_api_setting(cache):
    with pytest.raises(hieval.InputError, match=r"unknown_docs='drop'"):
        hieval.evaluate({"a": ["401.9"]}, {"m": {"a": ["401.9"], "z": ["250.00"]}}, cache=cache)


# --- options ---------------------------------------------------------------------------------

#: CLI options whose keyword differs: the inputs (`--pred` is `predictions`, ...), and `--out`
#: (the API returns an Evaluation; Evaluation.write takes the folder).
RENAMED = {"pred": "predictions", "dev_pred": "dev_predictions", "gold": "gold", "out": None}


def evaluate_actions() -> list[argparse.Action]:
    sub = cli.build_parser()._subparsers._group_actions[0].choices["evaluate"]
    return [a for a in sub._actions if a.dest != "help"]


def test_every_cli_option_is_a_keyword_with_the_cli_default():
    parameters = inspect.signature(hieval.evaluate).parameters
    for action in evaluate_actions():
        keyword = RENAMED.get(action.dest, action.dest)
        if keyword is None:
            continue
        assert keyword in parameters, action.dest
        default = parameters[keyword].default
        if action.required:
            assert default is inspect.Parameter.empty, keyword
        elif action.default == []:  # repeated NAME=VALUE options: a mapping, none by default
            assert default is None, keyword
        elif isinstance(action.default, Path):
            assert Path(default) == action.default, keyword
        else:
            expected = action.default
            assert (list(default) if isinstance(default, tuple) else default) == expected, keyword


@pytest.mark.parametrize(
    ("keyword", "value", "flag"),
    [
        ("threshold", 2, "--threshold"),
        ("k", [0], "--k"),
        ("confidence", 1.5, "--confidence"),
        ("unknown_docs", "keep", "--unknown-docs"),
        ("memory_limit", "lots", "--memory-limit"),
        ("icm_alpha1", float("nan"), "--icm-alpha1"),
        ("top_k", 0, "--top-k"),
    ],
)
def test_a_bad_option_is_refused_with_the_cli_reason(keyword, value, flag, cache, capsys):
    with pytest.raises(hieval.ConfigError) as raised:
        hieval.evaluate({"a": ["401.9"]}, {"m": {"a": ["401.9"]}}, cache=cache, **{keyword: value})
    shown = value[0] if isinstance(value, list) else value
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["evaluate", "--gold", "g", "--pred", "m=p", "--out", "o",
                                       flag, str(shown)])  # fmt: skip
    cli_reason = capsys.readouterr().err.strip().splitlines()[-1].split(f"argument {flag}: ")[1]
    assert str(raised.value) == f"{keyword}={shown!r}: {cli_reason}"


def test_a_bad_model_name_is_refused(cache):
    with pytest.raises(hieval.ConfigError, match="predictions="):
        hieval.evaluate({"a": ["401.9"]}, {"m/x": {"a": ["401.9"]}}, cache=cache)


# --- hierarchy, registry, doctests ---------------------------------------------------------


def test_a_loaded_hierarchy_is_reused_with_the_same_numbers(zoo, cache, plain):
    gold, predictions = zoo
    icd9 = hieval.load_hierarchy("package", cache=cache)
    assert icd9.levels[-1] == "root" and icd9.code_system == "icd9"
    assert set(icd9.ancestors.columns) == {"code", "level", "ancestor"}
    same_bits(hieval.evaluate(gold, predictions, hierarchy=icd9, cache=cache).metrics, plain)
    with pytest.raises(hieval.HievalError, match="nope"):
        hieval.evaluate(gold, predictions, hierarchy=icd9, max_level="nope", cache=cache)


def test_metrics_table_is_the_registry_and_names_every_tidy_row(from_frames):
    table = hieval.METRICS
    assert table.height == len(registry.REGISTRY)
    assert table.columns[:5] == ["family", "level", "average", "metric", "definition"]
    keys = set(table.select("family", "average", "metric").iter_rows())
    assert len(keys) == table.height
    declared = from_frames.metrics.with_columns(
        pl.col("metric").map_elements(registry.template, return_dtype=pl.String)
    )
    assert set(declared.select("family", "average", "metric").iter_rows()) <= keys
    assert table.filter(metric="f1", family="flat", average="micro")["definition"].item()


def test_public_names_are_all_and_documented():
    assert sorted(hieval.__all__) == sorted(hieval._HOMES)
    for name in hieval.__all__:
        obj = getattr(hieval, name)
        assert name in dir(hieval)
        if callable(obj) and not isinstance(obj, pl.DataFrame):
            assert inspect.getdoc(obj), name


@pytest.mark.parametrize("module", [hieval, api, evaluator, memory], ids=lambda m: m.__name__)
def test_docstring_examples_run(module, cache):
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(module, globs={"cache": cache}) if t.examples]
    assert tests, module
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


# --- one composition, quiet by default -------------------------------------------------------

STAGES = ("build_hierarchy", "normalize_file", "tune_threshold", "count_and_score",
          "uncertainty", "final_reports", "publish_reports")  # fmt: skip


@pytest.mark.parametrize("module", [cli, api, evaluator], ids=lambda m: m.__name__)
def test_entry_points_do_not_compose_the_stages_themselves(module):
    """The stages are composed once, in hieval.run; the CLI and the API only call it."""
    source = inspect.getsource(module)
    assert [stage for stage in STAGES if re.search(rf"\b{stage}\(", source)] == []


def test_a_clean_evaluation_prints_nothing(cache, capfd, caplog):
    """No progress lines or rules from a notebook; a warning goes to ``logging``, which the
    library leaves unconfigured (Python then prints warnings, not progress)."""
    import logging

    capfd.readouterr()
    gold = {"a": ["401.9"], "b": ["250.00"]}
    hieval.evaluate(gold, {"m": {"a": ["401.9"], "b": ["428.0"]}}, cache=cache)
    assert capfd.readouterr() == ("", "")
    assert logging.getLogger("hieval").handlers == []
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hieval"):
        hieval.evaluate(gold, {"m": {"a": ["401.9"]}}, cache=cache)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        "warning: model m has no predictions for 1 of 2 gold documents (50.0 %)"
    ]


@pytest.mark.parametrize(
    ("key", "value", "file", "expected"),
    [
        ("unknown_docs", "drop", None, "unknown_docs='drop'"),
        ("code_type", "dx", "m", "code_type={'m': 'dx'}"),
        ("code_type", "proc", "dev_gold", "code_type={'gold': 'proc'}"),
        ("dev_predictions", "PATH", "m (dev)", "dev_predictions={'m': PATH}"),
        ("top_k", "K", "m", "top_k=K"),
        ("code_type", "dx|proc", None, "code_type='dx|proc'"),
        ("allow_dev_test_overlap", True, None, "allow_dev_test_overlap=True"),
        ("bootstrap", 200, None, "bootstrap=200"),
    ],
)
def test_hints_in_the_api_are_keyword_arguments(key, value, file, expected):
    from hieval import hints

    with hints.entry_point(hints.API):
        assert hints.setting(key, value, file=file) == expected
        assert not hints.offers("shards")


def test_written_files_name_an_in_memory_input_not_a_private_file(tmp_path, cache):
    """Records, summary and report name ``m (in memory)``: the private copy is gone."""
    ev = hieval.evaluate({"a": ["401.9"], "b": ["250.00"]},
                         {"m": {"a": ["401.9"], "b": ["428.0"]}}, cache=cache)  # fmt: skip
    ev.write(tmp_path / "out")
    texts = {p.name: p.read_text("utf-8") for p in (tmp_path / "out").rglob("*")
             if p.suffix in (".json", ".md", ".html", ".csv", ".tex")}  # fmt: skip
    assert [name for name, text in texts.items() if "hieval-evaluate-" in text] == []
    assert json.loads(texts["m.json"])["path"] == "m (in memory)"
    assert json.loads(texts["gold.json"])["path"] == "gold (in memory)"
