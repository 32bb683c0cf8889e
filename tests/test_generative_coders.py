"""Generative coders (issue 34): set-only predictions with invented and malformed codes.

``unknown_codes: count`` keeps a prediction the release lacks, placed nowhere; ``malformed_codes:
count`` keeps a prediction that is no code at all; ``code_format: lenient`` reads a code written
with a description after it. Checked against a naive count over sets written here: flat counts
every such code as a false positive; set-based and CoPHE counts at every level (and ICM,
hierarchical F, PROP-F, which leave them out) equal those of the same predictions with those codes
removed. The gold stays strict.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers import small_demo_config, snakemake

import hieval
from hieval import cli
from hieval.errors import InputError
from hieval.inputs.counted import counted_statuses
from hieval.inputs.normalize import lenient_code, normalize_labels
from hieval.inputs.options import LabelOptions
from hieval.inputs.record import InputRecord

MALFORMED = ["hypertension", "401.9 - HTN", "not a code", "zz-9", "4019x"]
COUNTING = {"unknown_codes": "count", "malformed_codes": "count"}


def frame_of(sets: dict[str, set]) -> pl.DataFrame:
    rows = [(doc, code) for doc, codes in sets.items() for code in sorted(codes)]
    return pl.DataFrame(rows, schema=["doc_id", "code"], orient="row")


def generative_zoo(icd9, seed: int, documents: int = 50):
    """Gold sets of release leaves; predictions that keep, swap or drop gold codes and add
    invented codes (valid ICD-9 syntax, not in the release) and malformed strings."""
    rng = np.random.default_rng(seed)
    frame = icd9.frame.filter(pl.col("depth") == "e2", pl.col("kind") == "dx")
    leaves = sorted(frame["code"].to_list())
    known = set(icd9.frame["code"].to_list())
    invented = [
        f"{c[:5]}{d}" for c in leaves[::89] for d in "0123456789" if f"{c[:5]}{d}" not in known
    ][:30]
    gold, pred = {}, {}
    for i in range(documents):
        doc = f"d{i:03d}"
        gold[doc] = set(rng.choice(leaves, size=int(rng.integers(1, 6)), replace=False))
        pred[doc] = {c for c in gold[doc] if rng.random() < 0.6}
        if rng.random() < 0.4:
            pred[doc].add(str(rng.choice(leaves)))
        if rng.random() < 0.5:
            pred[doc].add(str(rng.choice(invented)))
        if rng.random() < 0.4:
            pred[doc].add(str(rng.choice(MALFORMED)))
    return gold, pred, set(invented)


@pytest.fixture(scope="module", params=[3, 4])
def zoo(request, icd9, tmp_path_factory):
    gold, pred, invented = generative_zoo(icd9, seed=request.param)
    cache = tmp_path_factory.mktemp("cache")
    counted = hieval.evaluate(frame_of(gold), {"m": frame_of(pred)}, cache=cache, **COUNTING)
    clean_sets = {
        d: {c for c in p if c not in invented and c not in MALFORMED} for d, p in pred.items()
    }
    clean = hieval.evaluate(frame_of(gold), {"m": frame_of(clean_sets)}, cache=cache)
    return gold, pred, invented, counted, clean


def micro(metrics: pl.DataFrame, family: str, level: str) -> dict[str, float]:
    rows = metrics.filter(family=family, level=level, average="micro")
    return dict(rows.select("metric", "value").iter_rows())


def test_flat_counts_every_invented_and_malformed_code_as_a_false_positive(zoo):
    gold, pred, invented, counted, _ = zoo
    tp = sum(len(gold[d] & pred[d]) for d in gold)
    fp = sum(len(pred[d] - gold[d]) for d in gold)
    fn = sum(len(gold[d] - pred[d]) for d in gold)
    assert any(pred[d] & invented for d in pred) and any(pred[d] & set(MALFORMED) for d in pred)
    flat = micro(counted.metrics, "flat", "leaf")
    assert (flat["tp"], flat["fp"], flat["fn"]) == (tp, fp, fn)
    assert flat["precision"] == pytest.approx(tp / (tp + fp), abs=1e-12)


def test_every_other_level_and_measure_is_that_of_the_predictions_without_them(zoo):
    _, _, _, counted, clean = zoo
    keys = ["family", "level", "average", "metric"]
    families = pl.col("family").str.starts_with("flat") | pl.col("family").is_in(
        ["example", "label"]  # leaf-level per-document and per-label views: they see the codes
    )
    got = counted.metrics.filter(~families).sort(keys)
    want = clean.metrics.filter(~families).sort(keys)
    assert set(got["family"]) >= {"set", "cophe", "icm", "hierarchical", "propensity"}
    assert got.select(keys).equals(want.select(keys))
    assert got["value"].to_list() == want["value"].to_list()  # bit for bit: no partial credit


def naive_statuses(gold, pred, invented) -> Counter:
    """(kind, lca_level, code_status) of each counted false positive: it meets nothing below
    the root, so its level is root when the document has a miss and none otherwise."""
    counts: Counter = Counter()
    for doc in gold:
        for code in pred[doc] - gold[doc]:
            if code in invented or code in MALFORMED:
                level = "root" if gold[doc] - pred[doc] else "none"
                counts[("fp", level, "unknown" if code in invented else "invalid")] += 1
    return counts


def test_errors_parquet_marks_invalid_and_unknown_codes(zoo):
    gold, pred, invented, counted, _ = zoo
    table = counted.errors.filter(pl.col("code_status").is_in(["invalid", "unknown"]))
    got = {
        (k, lv, s): c
        for k, lv, s, c in table.select("kind", "lca_level", "code_status", "count").iter_rows()
    }
    assert got == dict(naive_statuses(gold, pred, invented))
    assert "placed" not in set(counted.errors["code_status"])  # none was placed by syntax


def test_the_record_counts_invalid_and_nonexistent_codes(zoo):
    _, pred, invented, counted, _ = zoo
    record = counted.records["m"]
    rows = Counter(c for d in pred for c in pred[d])
    assert record["invalid_codes"] == {c: rows[c] for c in sorted(MALFORMED) if rows[c]}
    assert record["unknown_codes"] == {c: rows[c] for c in sorted(invented) if rows[c]}
    assert record["counted_codes"] == sorted(
        set(record["invalid_codes"]) | set(record["unknown_codes"])
    )
    assert record["malformed_code_policy"] == record["unknown_code_policy"] == "count"
    assert any("leave them out" in w for w in record["warnings"])


def test_an_invented_code_the_gold_also_holds_is_a_match(icd9, tmp_path):
    """The gold's codes missing from the release are placed by syntax (the gold is read as the
    system reads it); a prediction of the same code is the gold's code, not counted."""
    known = set(icd9.frame["code"].to_list())
    new = next(f"401.{d}" for d in "0123456789" if f"401.{d}" not in known)
    gold = {"a": [new, "250.00"], "b": ["428.0"]}
    pred = {"a": [new], "b": ["428.0", "hypertension"]}
    evaluation = hieval.evaluate(gold, {"m": pred}, cache=tmp_path, **COUNTING)
    flat = micro(evaluation.metrics, "flat", "leaf")
    assert (flat["tp"], flat["fp"], flat["fn"]) == (2, 1, 1)
    assert evaluation.records["m"]["counted_codes"] == ["hypertension"]
    codes = evaluation.codes["m"].filter(code=new)  # placed (it has ancestors): a leaf match
    assert codes.select("tp", "fp", "fn").rows() == [(1, 0, 0)]
    assert set(evaluation.errors["code_status"]) == {"valid", "invalid"}


# --- the policies' refusals ---------------------------------------------------------------


def write(path: Path, rows: list[tuple[str, str]]) -> Path:
    pl.DataFrame(rows, schema=["doc_id", "code"], orient="row").write_csv(path)
    return path


def test_malformed_gold_is_an_error_whatever_the_policy(tmp_path, capsys):
    gold = write(tmp_path / "gold.csv", [("a", "401.9"), ("b", "hypertension")])
    pred = write(tmp_path / "m.csv", [("a", "401.9")])
    argv = ["evaluate", "--gold", str(gold), "--pred", f"m={pred}", "--out", str(tmp_path / "o")]
    argv += ["--cache", str(tmp_path / "c"), "--malformed-codes", "count"]
    assert cli.main([*argv, "--unknown-codes", "count"]) != 0
    err = capsys.readouterr().err
    assert "gold.csv" in err and "line 3" in err and "hypertension" in err
    assert "Traceback" not in err
    assert not (tmp_path / "o" / "metrics.parquet").exists()


def test_malformed_codes_error_keeps_todays_message(tmp_path, capsys):
    gold = write(tmp_path / "gold.csv", [("a", "401.9")])
    pred = write(tmp_path / "m.csv", [("a", "401.9"), ("a", "401.9 - HTN")])
    argv = ["evaluate", "--gold", str(gold), "--pred", f"m={pred}", "--out", str(tmp_path / "o")]
    argv += ["--cache", str(tmp_path / "c")]
    assert cli.main(argv) != 0
    default = capsys.readouterr().err.split("error: ", 1)[-1]  # the message, past the log
    assert cli.main([*argv, "--malformed-codes", "error"]) != 0
    assert capsys.readouterr().err.split("error: ", 1)[-1] == default
    assert "1 bad code(s) in" in default and "line 3" in default and "401.9 - HTN" in default


def test_lenient_and_count_refused_or_strict_for_the_gold(icd9, tmp_path):
    gold = write(tmp_path / "gold.csv", [("a", "401.9 - Essential hypertension")])
    with pytest.raises(InputError, match="lenient reads predictions only"):
        normalize_labels(
            gold, name="gold", role="gold", out=tmp_path / "g.parquet", hierarchy=icd9,
            options=LabelOptions(code_format="lenient"),
        )  # fmt: skip
    with pytest.raises(InputError, match="bad code"):
        normalize_labels(
            gold, name="gold", role="gold", out=tmp_path / "g.parquet", hierarchy=icd9,
            unknown_codes="count", malformed_codes="count",
        )  # fmt: skip
    with pytest.raises(InputError, match="malformed_codes must be one of"):
        normalize_labels(
            gold, name="m", role="predictions", out=tmp_path / "p.parquet", hierarchy=icd9,
            malformed_codes="drop",
        )  # fmt: skip


# --- lenient reading ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("401.9 - Unspecified essential hypertension", "401.9"),
        ("I10 (Essential hypertension)", "I10"),
        ("I10: Essential (primary) hypertension", "I10"),
        ("428.0 \u2013 Congestive heart failure", "428.0"),
        ("  250.00 [diabetes]", "250.00"),
        ("401.9", "401.9"),
        ("hypertension", "hypertension"),  # a bare word stays what it is (then malformed)
    ],
)
def test_lenient_code_reads_the_code_before_its_description(raw, code):
    assert lenient_code(raw) == code


def test_lenient_predictions_score_as_their_codes_and_are_recorded(tmp_path):
    gold = {"a": ["401.9", "250.00"], "b": ["428.0"]}
    plain = {"a": ["401.9"], "b": ["428.0", "585.9"]}
    written = {
        "a": ["401.9 - Unspecified essential hypertension"],
        "b": ["428.0 (Congestive heart failure, unspecified)", "585.9"],
    }
    want = hieval.evaluate(gold, {"m": plain}, cache=tmp_path)
    got = hieval.evaluate(gold, {"m": written}, cache=tmp_path, code_format="lenient")
    keys = ["family", "level", "average", "metric"]
    assert got.metrics.sort(keys).equals(want.metrics.sort(keys))
    record = got.records["m"]
    assert record["code_format"] == "lenient dotted"
    assert record["codes_read_leniently"] == 2
    assert got.records["gold"]["code_format"] == "dotted"  # the gold is read as codes
    # Without lenient, the same file is refused (or, counted, scores nothing for those codes).
    with pytest.raises(hieval.HievalError, match="bad code"):
        hieval.evaluate(gold, {"m": written}, cache=tmp_path)


def test_default_record_json_has_no_new_keys():
    text = InputRecord(name="m", path="p", sha256="0").to_json()
    for key in ("invalid_codes", "codes_read_leniently", "malformed_code_policy", "counted_codes"):
        assert key not in json.loads(text)


# --- CLI and workflow ------------------------------------------------------------------------


def test_cli_parquet_predictions_under_count(tmp_path):
    """A Parquet file (the fast path's case) is read by the general path under these policies,
    and the CLI writes the record, the rates table and errors.parquet's statuses."""
    gold = write(tmp_path / "gold.csv", [("a", "401.9"), ("a", "250.00"), ("b", "428.0")])
    pred = tmp_path / "m.parquet"
    rows = [("a", "401.9"), ("a", "hypertension"), ("b", "428.0"), ("b", "999.99")]
    pl.DataFrame(rows, schema=["doc_id", "code"], orient="row").write_parquet(pred)
    out = tmp_path / "out"
    argv = ["evaluate", "--gold", str(gold), "--pred", f"m={pred}", "--out", str(out)]
    argv += ["--cache", str(tmp_path / "c"), "--unknown-codes", "count"]
    assert cli.main([*argv, "--malformed-codes", "count"]) == 0
    record = json.loads((out / "work" / "inputs" / "predictions" / "m.json").read_text())
    assert record["invalid_codes"] == {"hypertension": 1}
    assert record["unknown_codes"] == {"999.99": 1}
    normalised = out / "work" / "inputs" / "predictions" / "m.parquet"
    assert counted_statuses(normalised) == {"999.99": "unknown", "hypertension": "invalid"}
    errors = pl.read_parquet(out / "errors.parquet")
    fp = errors.filter(kind="fp")
    assert dict(fp.select("code_status", "count").iter_rows()) == {"invalid": 1, "unknown": 1}
    assert set(fp["lca_level"]) == {"root", "none"}  # a has a miss (250.00), b has none
    summary = (out / "summary.md").read_text()
    assert "## Invented and malformed codes" in summary
    assert "| m | 4 | 25.0 % | 25.0 % |" in summary
    assert "id='invented-codes'" in (out / "report.html").read_text()


def test_workflow_counts_generative_codes(tmp_path):
    small_demo_config(tmp_path, documents=50, models=("sibling_confuser",))
    write(tmp_path / "gold.csv", [("a", "401.9"), ("a", "250.00"), ("b", "428.0")])
    write(
        tmp_path / "gen.csv",
        [("a", "401.9 - Unspecified essential hypertension"), ("a", "hypertension"),
         ("b", "428.0"), ("b", "999.99")],
    )  # fmt: skip
    (tmp_path / "models.tsv").write_text("model\tpredictions\tcode_format\ngen\tgen.csv\tlenient\n")
    config = tmp_path / "my.yaml"
    config.write_text(
        "gold: gold.csv\nmodels: models.tsv\nunknown_codes: count\nmalformed_codes: count\n"
    )
    result = snakemake(tmp_path, "--configfile", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(
        (tmp_path / "results" / "my" / "inputs" / "predictions" / "gen.json").read_text()
    )
    assert record["invalid_codes"] == {"hypertension": 1}
    assert record["unknown_codes"] == {"999.99": 1}
    assert record["codes_read_leniently"] == 1
    errors = pl.read_parquet(tmp_path / "results" / "my" / "report" / "errors.parquet")
    statuses = dict(errors.filter(kind="fp").select("code_status", "count").iter_rows())
    assert statuses == {"invalid": 1, "unknown": 1}
    summary = (tmp_path / "results" / "my" / "report" / "summary.md").read_text()
    assert "| gen | 4 | 25.0 % | 25.0 % |" in summary
    metrics = pl.read_parquet(tmp_path / "results" / "my" / "report" / "metrics.parquet")
    flat = micro(metrics.filter(model="gen"), "flat", "leaf")
    assert (flat["tp"], flat["fp"], flat["fn"]) == (2, 2, 1)
    cophe = micro(metrics.filter(model="gen"), "cophe", "overall")
    assert cophe["fp"] == 0  # counted codes reach no level above the leaf


def test_shards_keep_the_counted_codes(tmp_path):
    """A sharded run counts each shard of the normalised predictions: every shard must list
    the counted codes, or its count would place them by syntax."""
    from hieval.inputs.counted import mark_counted
    from hieval.pipeline import split_by_document

    source = tmp_path / "m.parquet"
    rows = [(f"d{i}", code) for i in range(20) for code in ("401.9", "999.99", "hypertension")]
    pl.DataFrame(rows, schema=["doc_id", "code"], orient="row").write_parquet(source)
    statuses = {"999.99": "unknown", "hypertension": "invalid"}
    mark_counted(source, statuses)
    shards = [tmp_path / f"s{i}.parquet" for i in range(30)]  # some shards stay empty
    assert sum(split_by_document(source, shards)) == len(rows)
    for shard in shards:
        assert counted_statuses(shard) == statuses
    plain = tmp_path / "plain.parquet"
    pl.DataFrame(rows, schema=["doc_id", "code"], orient="row").write_parquet(plain)
    split_by_document(plain, shards[:2])
    assert counted_statuses(shards[0]) == {}


def test_ranking_does_not_place_counted_scored_codes(tmp_path):
    """A scored file under ``unknown_codes: count``: an invented code, selected or not, is kept
    out of the ranking's levels as it is out of the counts (placed, 401.7x would reach 401)."""
    gold = {"a": ["401.9"], "b": ["428.0"]}
    scored = {"a": {"401.9": 0.9, "401.77": 0.8}, "b": {"428.0": 0.7, "401.78": 0.2}}
    without = {"a": {"401.9": 0.9}, "b": {"428.0": 0.7}}
    got = hieval.evaluate(gold, {"m": scored}, cache=tmp_path, unknown_codes="count")
    want = hieval.evaluate(gold, {"m": without}, cache=tmp_path)
    keys = ["family", "level", "average", "metric"]
    ranking = pl.col("family").is_in(["ranking", "ranking_set"]) | pl.col("metric").str.contains(
        "@"
    )
    g = got.metrics.filter(ranking, pl.col("level") != "leaf").sort(keys)
    w = want.metrics.filter(ranking, pl.col("level") != "leaf").sort(keys)
    assert g.height and g.select(keys).equals(w.select(keys))
    assert g["value"].to_list() == w["value"].to_list()
