"""ICD-9-CM code syntax: canonical dotted form and kinds."""

from __future__ import annotations

import pytest

from hieval.codes.icd9 import parse_code, undotted_to_dotted
from hieval.errors import CodeError


@pytest.mark.parametrize(
    ("raw", "code", "kind"),
    [
        ("364.11", "364.11", "dx"),
        ("401.9", "401.9", "dx"),
        ("412", "412", "dx"),
        ("001.0", "001.0", "dx"),
        ("V58.61", "V58.61", "dx"),
        ("v58.61", "V58.61", "dx"),
        ("E849.7", "E849.7", "dx"),
        ("e849.7", "E849.7", "dx"),
        ("  401.9  ", "401.9", "dx"),
        ("\t96.04\n", "96.04", "proc"),
        ("96.04", "96.04", "proc"),
        ("00.10", "00.10", "proc"),
        ("34", "34", "proc"),
    ],
)
def test_dotted(raw, code, kind):
    ic = parse_code(raw)
    assert (ic.code, ic.kind) == (code, kind)


def test_depth_and_ancestors_from_syntax():
    assert parse_code("364.11").depth == "e2"
    assert parse_code("364.11").e1 == "364.1"
    assert parse_code("364.11").category == "364"
    assert parse_code("364.3").depth == "e1"
    assert parse_code("412").depth == "e0"
    assert parse_code("412").e1 is None
    assert parse_code("E849.7").category == "E849"
    assert parse_code("96.04").category == "96"


@pytest.mark.parametrize(
    ("raw", "code_type", "code"),
    [
        ("4019", "dx", "401.9"),
        ("4019", "proc", "40.19"),
        ("36411", "dx", "364.11"),
        ("V5861", "dx", "V58.61"),
        ("V5861", None, "V58.61"),
        ("v5861", None, "V58.61"),
        ("E8497", "dx", "E849.7"),
        ("E8497", None, "E849.7"),
        ("E849", "dx", "E849"),
        ("9604", "proc", "96.04"),
        ("0010", "proc", "00.10"),
        ("0010", "dx", "001.0"),
        ("412", "dx", "412"),
        ("96", "proc", "96"),
        (" 4019 ", "dx", "401.9"),
    ],
)
def test_undotted(raw, code_type, code):
    assert parse_code(raw, code_type=code_type, code_format="undotted").code == code


def test_undotted_to_dotted():
    assert undotted_to_dotted("E8497", "dx") == "E849.7"
    assert undotted_to_dotted("4019", "proc") == "40.19"


def test_dotted_input_accepted_in_undotted_file():
    # A dot makes the code unambiguous whatever the file's declared format.
    assert parse_code("401.9", code_format="undotted").code == "401.9"
    assert parse_code("40.19", code_format="undotted").code == "40.19"


def test_ambiguous_undotted_needs_code_type():
    with pytest.raises(CodeError, match="code_type") as err:
        parse_code("4019", code_format="undotted")
    assert "4019" in str(err.value)
    assert "ambiguous" in str(err.value)


@pytest.mark.parametrize(
    "raw", ["4O1.9", "40.1.9", "4019.1", "X01.1", "E84.97", "V5.861", "364.111", "", "."]
)
def test_malformed_dotted_raises(raw):
    with pytest.raises(CodeError) as err:
        parse_code(raw)
    assert repr(raw) in str(err.value)


@pytest.mark.parametrize("raw", ["4O19", "401999", "E84971", "ABC"])
def test_malformed_undotted_raises(raw):
    with pytest.raises(CodeError, match="malformed"):
        parse_code(raw, code_type="dx", code_format="undotted")


def test_kind_mismatch_raises():
    # A dotted diagnosis declared as a procedure is an error, not silently accepted.
    with pytest.raises(CodeError):
        parse_code("401.9", code_type="proc")
    with pytest.raises(CodeError):
        parse_code("96.04", code_type="dx")


def test_bad_code_type_raises():
    with pytest.raises(CodeError, match="code_type"):
        parse_code("401.9", code_type="diagnosis")
