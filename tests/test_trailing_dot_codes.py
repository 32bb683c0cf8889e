"""A code that ends with a dot (``I10.``, ``401.``) is no code (issue 34 lists ``I10.`` among
predictions that are "not a code at all"), in ICD-9 and ICD-10 alike: in the gold, and in
predictions under ``malformed_codes: error`` (the default), the run stops with one message
naming the file, the value and what to write; under ``malformed_codes: count`` the prediction is
kept as written, a false positive at the leaf with ``code_status`` ``invalid``."""

from __future__ import annotations

import pytest

import hieval
from hieval import cli
from hieval.codes.icd9 import parse_code
from hieval.codes.icd10 import normalize_icd10
from hieval.errors import CodeError


@pytest.mark.parametrize("raw", ["401.", "34.", " 401. ", "V58.", "E849."])
def test_icd9_refuses_a_trailing_dot(raw):
    with pytest.raises(CodeError, match=r"malformed code .*write '[0-9VE]+'"):
        parse_code(raw)


@pytest.mark.parametrize("raw", ["I10.", "E11.", "i10."])
def test_icd10_refuses_a_trailing_dot(raw):
    with pytest.raises(CodeError, match=r"malformed code .*write '[A-Za-z0-9]+'"):
        normalize_icd10(raw)


def hierarchy_and_cache(system: str, request, tmp_path) -> tuple[str, str]:
    """The package ICD-9 tree (built in a fresh cache) or the tests' built ICD-10 tree."""
    if system == "icd10":
        return "icd10", str(request.getfixturevalue("icd10_cache"))
    return "package", str(tmp_path / "cache")


@pytest.mark.parametrize(
    ("system", "gold_code", "bad"), [("icd9", "401.9", "401."), ("icd10", "I10", "I10.")]
)
@pytest.mark.parametrize("where", ["gold", "pred"])
def test_the_cli_stops_with_one_message(request, tmp_path, capsys, system, gold_code, bad, where):
    good = f"doc_id,code\na,{gold_code}\nb,{gold_code}\n"
    wrong = f"doc_id,code\na,{gold_code}\nb,{bad}\n"
    (tmp_path / "gold.csv").write_text(wrong if where == "gold" else good)
    (tmp_path / "pred.csv").write_text(wrong if where == "pred" else good)
    hierarchy, cache = hierarchy_and_cache(system, request, tmp_path)
    argv = ["evaluate", "--gold", str(tmp_path / "gold.csv"), "--hierarchy", hierarchy]
    argv += ["--pred", f"m={tmp_path / 'pred.csv'}", "--out", str(tmp_path / "out")]
    argv += ["--cache", cache]
    if where == "gold":
        argv += ["--malformed-codes", "count"]  # the gold stays strict whatever the policy
    assert cli.main(argv) != 0
    err = capsys.readouterr().err
    assert f"{where}.csv" in err and repr(bad) in err and repr(bad[:-1]) in err
    assert "Traceback" not in err
    assert not (tmp_path / "out" / "metrics.parquet").exists()


@pytest.mark.parametrize(
    ("system", "codes", "bad"),
    [("icd9", ["401.9", "250.00"], "401."), ("icd10", ["I10", "E11.9"], "I10.")],
)
def test_counted_it_is_an_invalid_false_positive_at_the_leaf(request, tmp_path, system, codes, bad):
    gold = {"a": codes, "b": [codes[0]]}
    pred = {"a": [bad, codes[1]], "b": [codes[0]]}
    hierarchy, cache = hierarchy_and_cache(system, request, tmp_path)
    ev = hieval.evaluate(
        gold, {"m": pred}, hierarchy=hierarchy, malformed_codes="count", cache=cache
    )
    assert ev.records["m"]["counted_codes"] == [bad]
    flat = ev.metrics.filter(family="flat", level="leaf", average="micro")
    counts = dict(flat.select("metric", "value").iter_rows())
    assert (counts["tp"], counts["fp"], counts["fn"]) == (2, 1, 1)
    fp = ev.errors.filter(kind="fp")
    assert fp.select("code_status", "count").rows() == [("invalid", 1)]
    assert ev.codes["m"].filter(code=bad).select("level", "fp").rows() == [("leaf", 1)]


def test_camls_own_layout_keeps_reading_its_two_digit_procedures(tmp_path):
    """CAML's preprocessing writes procedure category 34 as ``34.``: its prediction, score and
    gold files are read as CAML wrote them (that one dot dropped), and the code is a match."""
    (tmp_path / "test_full.csv").write_text(
        "SUBJECT_ID,HADM_ID,TEXT,LABELS\n1,100,note,401.9;34.\n2,200,note,96.04\n"
    )
    (tmp_path / "preds_test.psv").write_text("100|401.9|34.\n200|96.04\n")
    (tmp_path / "pred_100_scores_test.json").write_text(
        '{"100": {"401.9": 0.9, "34.": 0.8}, "200": {"96.04": 0.7}}'
    )
    ev = hieval.evaluate(
        str(tmp_path / "test_full.csv"),
        {
            "psv": str(tmp_path / "preds_test.psv"),
            "json": str(tmp_path / "pred_100_scores_test.json"),
        },
        cache=tmp_path / "cache",
    )
    for model in ("psv", "json"):
        flat = ev.metrics.filter(model=model, family="flat", level="leaf", average="micro")
        counts = dict(flat.select("metric", "value").iter_rows())
        assert (counts["tp"], counts["fp"], counts["fn"]) == (3, 0, 0), model
