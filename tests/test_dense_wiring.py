"""A dense score matrix evaluated by blocks (issue 36) gives today's outputs bit for bit:
the same ``.npy`` evaluated with the long path forced (``HIEVAL_DENSE_LONG=1``, today's
expansion of every cell to long rows) and by blocks, every output file compared; the scores
Parquet is replaced by a reference to the matrix, checked before it is read again."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from hieval import cli
from hieval.inputs.dense_normalize import LONG_PATH_VARIABLE
from hieval.inputs.dense_scores import read_reference, read_scores
from hieval.metrics.uncertainty.ranking import RankingUnits

N_DOCS, N_CODES = 61, 37


def _matrix_case(
    folder,
    icd9_leaves,
    *,
    seed: int = 3,
    prefix: str = "d",
    logits: bool = False,
    codes_seed: int | None = None,
):
    """61 documents x 37 ICD-9 leaves listed out of code order, scores on a 0.05 grid (ties,
    a document scored all below 0.5), a gold with a code outside the list and a document
    without a row, and a matrix row the gold lacks (dropped by ``--unknown-docs drop``)."""
    rng = np.random.default_rng(seed)
    code_rng = np.random.default_rng(seed if codes_seed is None else codes_seed)
    picked = code_rng.choice(len(icd9_leaves), N_CODES + 1, replace=False)
    codes = [icd9_leaves[i] for i in picked[:N_CODES]]
    outside_code = icd9_leaves[picked[-1]]
    docs = [f"{prefix}{int(i):03d}" for i in rng.permutation(N_DOCS)]  # rows not in document order
    scores = np.round(rng.random((N_DOCS, N_CODES)) * 20) / 20
    scores[4] = np.minimum(scores[4], 0.3)  # no decision for this document
    if logits:  # no probabilities: no calibration rows
        scores = scores * 3 - 1
    np.save(folder / "m.npy", scores.astype(np.float32))
    (folder / "m.codes.txt").write_text("\n".join(codes) + "\n")
    (folder / "m.docs.txt").write_text("\n".join(docs) + "\n")
    gold_rows = []
    for d in docs[:-1]:  # the last row's document is not in the gold
        for j in rng.choice(N_CODES, rng.integers(1, 5), replace=False):
            gold_rows.append((d, codes[j]))
    gold_rows += [(docs[0], outside_code), (f"0{prefix}_no_row", codes[0])]
    gold = pl.DataFrame(gold_rows, schema=["doc_id", "code"], orient="row")
    gold.write_csv(folder / "gold.csv")
    return folder / "gold.csv", folder / "m.npy"


def _evaluate(monkeypatch, folder, gold, matrix, *extra, long: bool) -> dict:
    out = folder / ("long" if long else "blocked")
    if long:
        monkeypatch.setenv(LONG_PATH_VARIABLE, "1")
    else:
        monkeypatch.delenv(LONG_PATH_VARIABLE, raising=False)
    argv = ["evaluate", "--gold", str(gold), "--pred", f"m={matrix}", "--format", "m=dense",
            "--out", str(out), "--cache", str(folder / "cache"), "--unknown-docs", "drop",
            *extra]  # fmt: skip
    assert cli.main(argv) == 0
    return out


def _outputs(out) -> dict[str, object]:
    """Every Parquet output by its path (frames; a scores file as the long table, built from
    the matrix where it is a reference), and the model's input record."""
    found = {}
    for path in sorted(out.rglob("*.parquet")):
        name = str(path.relative_to(out))
        scores = "/scores/" in name  # the long scores, or the reference to the matrix
        found[name] = read_scores(path) if scores else pl.read_parquet(path)
    record = json.loads((out / "work/inputs/predictions/m.json").read_text())
    found["record"] = record
    return found


def _same_bits(ours: pl.DataFrame, theirs: pl.DataFrame, where: str) -> None:
    assert ours.schema == theirs.schema, where
    assert ours.height == theirs.height, where
    for column, dtype in ours.schema.items():
        a, b = ours[column], theirs[column]
        if dtype == pl.Float64:
            assert np.array_equal(a.to_numpy().view(np.int64), b.to_numpy().view(np.int64)), (
                where,
                column,
            )
        else:
            assert a.equals(b), (where, column)


def _same_when_both_ran(folder, results, *, reference: bool | None = None) -> None:
    """Where the long path's run and the blocks' run (``results``: exit code and error lines
    of each) both succeeded, the same record and every output bit for bit; ``reference``:
    whether the blocks' run must have kept the scores as a matrix reference (None: either)."""
    if results[0][0] != 0:
        return
    long, blocked = _outputs(folder / "long"), _outputs(folder / "blocked")
    if reference is not None:
        kept = read_reference(folder / "blocked/work/inputs/scores/m.parquet")
        assert (kept is not None) == reference
    assert blocked.pop("record") == long.pop("record")
    for name, frame in long.items():
        _same_bits(blocked[name], frame, name)


@pytest.mark.parametrize("extra", [(), ("--top-k", "3"), ("--threshold", "0.45", "--top-k", "5")])
def test_blocked_outputs_equal_the_long_paths_bit_for_bit(
    tmp_path, monkeypatch, icd9_leaves, extra
):
    gold, matrix = _matrix_case(tmp_path, icd9_leaves)
    long = _outputs(_evaluate(monkeypatch, tmp_path, gold, matrix, *extra, long=True))
    blocked_out = _evaluate(monkeypatch, tmp_path, gold, matrix, *extra, long=False)
    blocked = _outputs(blocked_out)
    assert set(blocked) == set(long)
    assert blocked.pop("record") == long.pop("record")
    for name, frame in long.items():
        _same_bits(blocked[name], frame, name)
    metrics = long["metrics.parquet"]
    assert metrics.filter(pl.col("family") == "ranking").height > 20  # levels included
    reference = read_reference(blocked_out / "work/inputs/scores/m.parquet")
    assert reference is not None and reference.path == str(matrix.resolve())
    assert pl.read_parquet(blocked_out / "work/inputs/scores/m.parquet").height == 0


@pytest.mark.parametrize("size", ["1", "7"])
def test_blocks_of_any_size_give_the_same_rows(tmp_path, monkeypatch, icd9_leaves, size):
    """Blocks of 1 and 7 documents (the default is 1,024: one block here) change no bit of
    the ranking and calibration rows."""
    from hieval.metrics.blocked_rows import BLOCK_DOCS_VARIABLE

    gold, matrix = _matrix_case(tmp_path, icd9_leaves, seed=8)
    long = _outputs(_evaluate(monkeypatch, tmp_path, gold, matrix, long=True))
    monkeypatch.setenv(BLOCK_DOCS_VARIABLE, size)
    blocked = _outputs(_evaluate(monkeypatch, tmp_path, gold, matrix, long=False))
    _same_bits(blocked["metrics.parquet"], long["metrics.parquet"], "metrics.parquet")
    ranking = blocked["work/ranking/m.parquet"]
    assert set(ranking["family"]) == {"ranking", "calibration"}
    _same_bits(ranking, long["work/ranking/m.parquet"], "ranking")


def test_a_matrix_changed_after_normalisation_is_refused(tmp_path, monkeypatch, icd9_leaves):
    """The ranking stage checks the matrix's sha256 against the reference's."""
    from hieval.errors import InputError

    gold, matrix = _matrix_case(tmp_path, icd9_leaves)
    out = _evaluate(monkeypatch, tmp_path, gold, matrix, long=False)
    reference = read_reference(out / "work/inputs/scores/m.parquet")
    reference.matrix()  # unchanged: read
    np.save(matrix, np.zeros((N_DOCS, N_CODES), dtype=np.float32))
    with pytest.raises(InputError, match=r"changed .* since its scores were normalised"):
        reference.matrix()


def test_a_non_finite_cell_is_named_by_row_column_document_and_code(
    tmp_path, monkeypatch, capsys, icd9_leaves
):
    gold, matrix = _matrix_case(tmp_path, icd9_leaves)
    scores = np.load(matrix)
    scores[9, 5] = np.nan
    np.save(matrix, scores)
    doc = (tmp_path / "m.docs.txt").read_text().split()[9]
    code = (tmp_path / "m.codes.txt").read_text().split()[5]
    monkeypatch.delenv(LONG_PATH_VARIABLE, raising=False)
    argv = ["evaluate", "--gold", str(gold), "--pred", f"m={matrix}", "--format", "m=dense",
            "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache")]  # fmt: skip
    assert cli.main(argv) != 0
    message = capsys.readouterr().err
    assert f"row 10 (document '{doc}'), column 6 (code '{code}'): score 'nan'" in message
    assert "Traceback" not in message
    assert not (tmp_path / "out" / "metrics.parquet").exists()


@pytest.mark.parametrize("stage", ["tuned", "tuned per code", "bootstrap"])
def test_stages_reading_the_long_scores_give_the_same_outputs(
    tmp_path, monkeypatch, icd9_leaves, stage
):
    """Tuning on a dense dev matrix and the bootstrap read the scores back through the
    reference (the long table built from the matrix): the same outputs as the long path."""
    gold, matrix = _matrix_case(tmp_path, icd9_leaves)
    if stage.startswith("tuned"):
        (tmp_path / "dev").mkdir()
        dev_gold, dev_matrix = _matrix_case(
            tmp_path / "dev", icd9_leaves, seed=5, prefix="v", codes_seed=3
        )  # the test matrix's codes, so that per-code thresholds decide its cells
        extra = ("--threshold", "tune", "--dev-gold", str(dev_gold), "--dev-pred",
                 f"m={dev_matrix}")  # fmt: skip
        if stage == "tuned per code":
            extra += ("--tuning-per-code", "--tuning-min-support", "1")
    else:
        extra = ("--bootstrap", "20", "--permutations", "20")
    long = _outputs(_evaluate(monkeypatch, tmp_path, gold, matrix, *extra, long=True))
    blocked = _outputs(_evaluate(monkeypatch, tmp_path, gold, matrix, *extra, long=False))
    assert set(blocked) == set(long)
    record = blocked.pop("record")
    assert record == long.pop("record")
    if stage == "tuned per code":  # codes with their own thresholds decided the cells
        assert record["tuned_threshold"]["per_code"] > 10
    for name, frame in long.items():
        _same_bits(blocked[name], frame, name)
    if stage.startswith("tuned"):
        assert blocked["metrics.parquet"].filter(pl.col("metric") == "threshold").height == 1
    else:
        assert "intervals.parquet" in blocked


def test_logits_give_no_calibration_rows_on_either_path(tmp_path, monkeypatch, icd9_leaves):
    gold, matrix = _matrix_case(tmp_path, icd9_leaves, logits=True)
    long = _outputs(_evaluate(monkeypatch, tmp_path, gold, matrix, long=True))
    out = _evaluate(monkeypatch, tmp_path, gold, matrix, long=False)
    blocked = _outputs(out)
    _same_bits(blocked["metrics.parquet"], long["metrics.parquet"], "metrics.parquet")
    assert "calibration" not in set(blocked["metrics.parquet"]["family"])
    notes = json.loads((out / "work/ranking/m.json").read_text())
    assert notes["calibration"] == "scores outside [0, 1]: no calibration rows"


def test_the_workflow_ranks_a_dense_matrix_by_blocks_as_the_cli_does(
    tmp_path, monkeypatch, icd9_leaves
):
    """Snakemake's rules pass the reference between jobs (the scores file they declare is the
    reference): the workflow's ranking rows equal the CLI's, bit for bit."""
    from helpers import snakemake

    gold, matrix = _matrix_case(tmp_path, icd9_leaves)
    cli_rows = _outputs(_evaluate(monkeypatch, tmp_path, gold, matrix, long=True))
    (tmp_path / "models.tsv").write_text(f"model\tpredictions\tformat\nm\t{matrix}\tdense\n")
    config = tmp_path / "my.yaml"
    config.write_text(f"gold: {gold}\nmodels: models.tsv\nunknown_docs: drop\n")
    monkeypatch.delenv(LONG_PATH_VARIABLE)  # the workflow's jobs take the blocked path
    result = snakemake(tmp_path, "--configfile", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    assert read_reference(tmp_path / "results/my/inputs/scores/m.parquet") is not None
    ours = pl.read_parquet(tmp_path / "results/my/report/metrics.parquet")
    theirs = cli_rows["metrics.parquet"]
    pick = pl.col("family").is_in(["ranking", "calibration"])
    _same_bits(ours.filter(pick), theirs.filter(pick), "ranking rows")


def test_bootstrap_by_blocks_above_the_auc_cap_equals_the_long_path(
    tmp_path, monkeypatch, icd9_leaves
):
    """Above the AUC replicates' exact plan's cap (lowered here to 10 scored pairs) the
    bootstrap's units come from the blocks, not from the long table: every interval equals
    the long path's, but micro ROC-AUC's, binned on different first chunks
    (tests/test_auc_uncapped.py checks those against their bound)."""
    from hieval.metrics import blocked_rows
    from hieval.metrics.uncertainty import ranking as uncertainty_ranking

    monkeypatch.setattr(uncertainty_ranking, "AUC_MAX_SCORED_PAIRS", 10)
    monkeypatch.setattr(blocked_rows, "AUC_MAX_SCORED_PAIRS", 10)
    built = []
    monkeypatch.setattr(
        blocked_rows, "RankingUnits", lambda *a: built.append(1) or RankingUnits(*a)
    )
    gold, matrix = _matrix_case(tmp_path, icd9_leaves)
    extra = ("--bootstrap", "30")
    long = _outputs(_evaluate(monkeypatch, tmp_path, gold, matrix, *extra, long=True))
    blocked = _outputs(_evaluate(monkeypatch, tmp_path, gold, matrix, *extra, long=False))
    assert built  # the blocked units were used
    intervals = blocked["intervals.parquet"]
    assert intervals.filter(pl.col("family") == "ranking").height > 20
    micro_auc = (pl.col("metric") == "auc") & (pl.col("average") == "micro")
    assert intervals.filter(pl.col("metric") == "auc")["low"].null_count() == 0
    assert intervals.filter(micro_auc).height > 0  # above the cap: replicates all the same
    for name, frame in long.items():
        if name == "intervals.parquet":
            blocked[name], frame = blocked[name].filter(~micro_auc), frame.filter(~micro_auc)
        if name != "record":
            _same_bits(blocked[name], frame, name)


def _with_odd_columns(folder, icd9, icd9_leaves, extra_codes):
    """The usual case with more columns: ``extra_codes`` (scored 0.0 to 0.95)."""
    gold, matrix = _matrix_case(folder, icd9_leaves)
    scores = np.load(matrix)
    rng = np.random.default_rng(1)
    added = (np.round(rng.random((N_DOCS, len(extra_codes))) * 20) / 20).astype(np.float32)
    np.save(matrix, np.hstack([scores, added]))
    codes = (folder / "m.codes.txt").read_text().split()
    (folder / "m.codes.txt").write_text("\n".join([*codes, *extra_codes]) + "\n")
    return gold, matrix


def _unknown_code(icd9) -> str:
    known = set(icd9.frame["code"].to_list())
    return next(
        c for c in (f"{n}.{d}" for n in range(800, 999) for d in range(10)) if c not in known
    )


@pytest.mark.parametrize("policy", ["place", "drop", "count"])
def test_unknown_and_malformed_listed_codes_as_on_the_long_path(
    tmp_path, monkeypatch, icd9, icd9_leaves, policy
):
    """A listed code the release lacks (under each policy) and one that is no code at all
    (``--malformed-codes count``): the same outputs on both paths."""
    extra = [_unknown_code(icd9), "hypertension"]
    gold, matrix = _with_odd_columns(tmp_path, icd9, icd9_leaves, extra)
    flags = ("--unknown-codes", policy, "--malformed-codes", "count")
    long = _outputs(_evaluate(monkeypatch, tmp_path, gold, matrix, *flags, long=True))
    blocked = _outputs(_evaluate(monkeypatch, tmp_path, gold, matrix, *flags, long=False))
    assert blocked.pop("record") == long.pop("record")
    for name, frame in long.items():
        _same_bits(blocked[name], frame, name)


@pytest.mark.parametrize(
    ("flags", "extra"),
    [
        ((), ["hypertension"]),  # malformed: refused, naming the code list's line
        (("--unknown-codes", "error"), ["UNKNOWN"]),  # replaced by an unknown code below
        ((), ["REPEAT"]),  # a column that reads as another's code
    ],
)
def test_refusals_are_the_long_paths(
    tmp_path, monkeypatch, capsys, icd9, icd9_leaves, flags, extra
):
    codes_case = tmp_path / "case"
    codes_case.mkdir()
    if extra == ["UNKNOWN"]:
        extra = [_unknown_code(icd9)]
    if extra == ["REPEAT"]:
        _matrix_case(codes_case, icd9_leaves)
        first = (codes_case / "m.codes.txt").read_text().split()[0]
        extra = [first.replace(".", "")]  # undotted: the same code once read
        flags = ("--code-format", "auto")
    gold, matrix = _with_odd_columns(codes_case, icd9, icd9_leaves, extra)
    messages = []
    for long in (True, False):
        if long:
            monkeypatch.setenv(LONG_PATH_VARIABLE, "1")
        else:
            monkeypatch.delenv(LONG_PATH_VARIABLE, raising=False)
        argv = ["evaluate", "--gold", str(gold), "--pred", f"m={matrix}", "--format", "m=dense",
                "--out", str(tmp_path / f"out{long}"), "--cache", str(tmp_path / "cache"),
                "--unknown-docs", "drop", *flags]  # fmt: skip
        assert cli.main(argv) != 0
        err = capsys.readouterr().err
        messages.append(err[err.index("hieval: error") :])  # the refusal, every line
    assert messages[0] and messages[0] == messages[1]


def test_a_matrix_without_a_kept_cell_is_hard_predictions_on_both_paths(
    tmp_path, monkeypatch, icd9_leaves
):
    """Every column dropped (codes the hierarchy lacks, ``--unknown-codes drop``): the long
    path has no scores, so no ranking or calibration rows ("hard predictions"); the blocked
    path must not score the all-unscored pairs instead (it did: AUC and Brier rows)."""
    gold, matrix = _matrix_case(tmp_path, icd9_leaves)
    n = len((tmp_path / "m.codes.txt").read_text().split())
    (tmp_path / "m.codes.txt").write_text("".join(f"000.{j:02d}\n" for j in range(n)))
    extra = ("--unknown-codes", "drop")
    long = _outputs(_evaluate(monkeypatch, tmp_path, gold, matrix, *extra, long=True))
    blocked = _outputs(_evaluate(monkeypatch, tmp_path, gold, matrix, *extra, long=False))
    assert set(blocked) == set(long)
    assert blocked.pop("record") == long.pop("record")
    for name, frame in long.items():
        _same_bits(blocked[name], frame, name)
    metrics = long["metrics.parquet"]
    assert metrics.filter(pl.col("family").is_in(["ranking", "calibration"])).height == 0
