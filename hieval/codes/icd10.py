"""ICD-10-CM and ICD-10-PCS code syntax: canonical form, code kind, and the ancestors a code's
characters imply.

Canonical forms (what the ICD-10 hierarchy's nodes are called, see
:mod:`hieval.hierarchy.icd10`):

- ICD-10-CM diagnoses: upper case, dotted after the third character, ``E11.9``, ``T36.0X1A``,
  ``M1A.0110``; a category has no dot, ``I10``. A category is a letter, a digit (or ``A``, for
  ``QA0``, new in FY2026) and an alphanumeric; up to four alphanumerics follow the dot.
- ICD-10-PCS procedures: seven characters from ``0-9`` and ``A-Z`` without ``I`` and ``O``,
  never dotted, ``0DTJ4ZZ``.

Unlike ICD-9, the dot position of an undotted CM code is fixed (after the third character), so
MIMIC-IV's undotted ``E119`` converts to ``E11.9`` without knowing anything else. The one
ambiguity is a seven-character undotted string starting with a letter that is also a PCS
section (``B C D F G H X``) and holding no ``I``/``O``: ``B200ZZZ`` reads as CM ``B20.0ZZZ`` or
as PCS ``B200ZZZ``. Such a string needs the file's ``code_type``; conversion refuses to guess.

A code's depth is its number of characters without the dot: 3 is a ``category``, 4 to 7 are
``sub4`` .. ``sub7``; its syntactic ancestors are its prefixes down to the category (for PCS
down to the section). That is also how a code missing from the hierarchy (a retired code) is
placed (:func:`hieval.hierarchy.icd10.placed_icd10_ancestors`), mirroring ICD-9's
``unknown_codes: place``.
"""

from __future__ import annotations

import re
from collections import Counter

from hieval.codes.icd9 import CODE_TYPES, DX, PROC, kind_of_dotted, trailing_dot_hint
from hieval.codes.icd9 import parse_code as normalize_icd9
from hieval.errors import CodeError, preview_value
from hieval.hints import setting

#: Depth levels of the ICD-10 hierarchy, deepest first, then the root. A code's depth is its
#: number of characters without the dot (3 ``category`` .. 7 ``sub7``); CM blocks and chapters
#: and the PCS section (1 character) and body system (2 characters) sit above.
ICD10_LEVELS = ("sub7", "sub6", "sub5", "sub4", "category", "block", "chapter", "root")
_DEPTH_BY_LENGTH = {3: "category", 4: "sub4", 5: "sub5", 6: "sub6", 7: "sub7"}
_PCS_DEPTH_BY_LENGTH = {1: "chapter", 2: "block", **_DEPTH_BY_LENGTH}

#: PCS prefixes (section, body system, root operation, ...) are named ``PCS:`` + prefix. Bare,
#: they would collide with CM nodes: sections ``1``-``9`` with CM chapter numbers, body system
#: ``10`` with chapter 10, and 59 root operations with CM categories (``B20``, ``C50``...,
#: ``F01``, ``X05``). No CM or PCS code contains ``:``, so a prefixed name is never a code.
PCS_PREFIX = "PCS:"

# The second character is a digit in every category but QA0 (FY2026); allowing only A besides
# digits keeps words such as HELLO from passing as CM codes (HEL.LO).
_CM_DOTTED = re.compile(r"^[A-Z][0-9A][0-9A-Z](?:\.[0-9A-Z]{1,4})?$")
_CM_UNDOTTED = re.compile(r"^[A-Z][0-9A][0-9A-Z]{1,5}$")
# PCS characters: digits and letters but I and O; the section (first) is one of 17 values.
_PCS = re.compile(r"^[0-9BCDFGHX][0-9A-HJ-NP-Z]{6}$")

ICD9, ICD10 = "icd9", "icd10"


def _clean(raw: str) -> str:
    """Surrounding spaces dropped, upper case. A trailing dot stays (``I10.`` is no code: a
    generative coder's cut-off output, refused or counted as malformed; ICD-9 agrees)."""
    return raw.strip().upper()


def _readings(code: str) -> dict[str, str]:
    """Every ``kind -> canonical code`` the cleaned string is syntactically valid as."""
    if "." in code:
        return {DX: code} if _CM_DOTTED.match(code) else {}
    found = {}
    if _CM_UNDOTTED.match(code):
        found[DX] = code if len(code) == 3 else f"{code[:3]}.{code[3:]}"
    if _PCS.match(code):
        found[PROC] = code
    return found


def normalize_icd10(
    raw: str, code_type: str | None = None, *, default_type: str | None = None
) -> tuple[str, str]:
    """Canonical ICD-10 code and its kind (``dx`` for CM, ``proc`` for PCS) from a raw string.

    Accepts dotted or undotted CM, PCS, any case and surrounding spaces; not a trailing dot.
    ``code_type`` (``dx``/``proc``), when given, must agree with the code; it is required for
    the strings that are valid as both (see the module doc), which ``default_type`` (the file's
    setting) decides otherwise; it never changes a code that has one reading. Errors are
    :class:`CodeError`
    with a message saying what to do; a code that looks like ICD-9 says so.
    """
    if code_type is not None and code_type not in CODE_TYPES:
        raise CodeError(
            f"code_type {preview_value(code_type)} for code {preview_value(raw)} must be 'dx' "
            "or 'proc'"
        )
    code = _clean(raw)
    readings = _readings(code)
    if code_type is not None and readings and code_type not in readings:
        (other,) = readings
        raise CodeError(
            f"code {preview_value(raw)} is an ICD-10-"
            f"{'CM diagnosis' if other == DX else 'PCS procedure'} code but its code_type is "
            f"{preview_value(code_type)}; fix the code or its code_type"
        )
    if code_type is not None:
        readings = {k: v for k, v in readings.items() if k == code_type}
    elif len(readings) > 1 and default_type is not None:
        readings = {default_type: readings[default_type]}
    if len(readings) > 1:
        raise CodeError(
            f"ambiguous code {preview_value(raw)}: valid as an ICD-10-CM diagnosis "
            f"({readings[DX]}) and as an ICD-10-PCS procedure; add a code_type column (dx/proc) "
            f"or set {setting('code_type', 'dx|proc')}"
        )
    if not readings:
        hint = " (it looks like an ICD-9 code)" if looks_like(raw) == ICD9 else ""
        hint = trailing_dot_hint(raw) or hint
        raise CodeError(
            f"malformed code {preview_value(raw)}{hint}: not an ICD-10 code (CM diagnoses like "
            "E11.9 or E119, T36.0X1A; PCS procedures of 7 characters like 0DTJ4ZZ)"
        )
    ((kind, canonical),) = readings.items()
    return canonical, kind


def _valid_icd9(code: str) -> bool:
    """True when a cleaned string is ICD-9-CM syntax, dotted or undotted, of either kind."""
    if kind_of_dotted(code) is not None:
        return True
    for kind in CODE_TYPES:
        try:
            normalize_icd9(code, kind, "undotted")
        except CodeError:
            continue
        return True
    return False


def looks_like(raw: str) -> str | None:
    """``"icd9"`` or ``"icd10"`` when the string is valid syntax of that system only; None when
    it is valid in both (``V10.3``, ``E880``) or in neither.

    For messages only: it never decides how a code is read.
    """
    code = _clean(raw)
    as_icd10 = bool(_readings(code))
    as_icd9 = _valid_icd9(code)
    if as_icd9 == as_icd10:
        return None
    return ICD9 if as_icd9 else ICD10


_SYSTEM_NAMES = {ICD9: "ICD-9", ICD10: "ICD-10"}


def _hierarchy_hint(system: str) -> str:
    """How to choose ``system``'s hierarchy, in the running entry point's syntax."""
    if system == ICD10:
        return f"set {setting('hierarchy', 'icd10')}"
    return f"set {setting('hierarchy', 'package')} (or cms, cophe: ICD-9-CM)"


def system_mismatch_hint(codes: list[str], system: str) -> str | None:
    """A sentence for an error message when most of a sample of bad codes belong to the other
    coding system than the evaluation's ``system`` (``icd9``/``icd10``), else None.

    "Most" is more than half of the sample; codes that look like both systems or neither
    count against it, so a file of garbage never gets a misleading hint.
    """
    if system not in _SYSTEM_NAMES:
        raise ValueError(f"system must be one of {tuple(_SYSTEM_NAMES)}, not {system!r}")
    other = ICD10 if system == ICD9 else ICD9
    votes = Counter(looks_like(c) for c in codes)
    if not codes or votes[other] * 2 <= len(codes):
        return None
    example = next(c for c in codes if looks_like(c) == other)
    return (
        f"these codes look like {_SYSTEM_NAMES[other]} (e.g. {example.strip()}); this evaluation "
        f"uses {_SYSTEM_NAMES[system]}: {_hierarchy_hint(other)}, or check the file"
    )


# --- depth and syntactic ancestors -------------------------------------------------------------


def code_depth(code: str) -> str:
    """The level of a canonical code: ``category`` for 3 characters, ``sub4`` .. ``sub7``."""
    length = len(code.replace(".", ""))
    if length not in _DEPTH_BY_LENGTH:
        raise CodeError(f"{code!r} is not a canonical ICD-10 code (3 to 7 characters)")
    return _DEPTH_BY_LENGTH[length]


def pcs_node(prefix: str) -> str:
    """The node name of a PCS prefix: the code itself at 7 characters, else ``PCS:`` + prefix."""
    return prefix if len(prefix) == 7 else PCS_PREFIX + prefix


def pcs_depth(prefix: str) -> str:
    """The level of a PCS prefix: section ``chapter``, body system ``block``, then by length."""
    return _PCS_DEPTH_BY_LENGTH[len(prefix)]


def syntactic_ancestors(code: str, kind: str) -> list[tuple[str, str]]:
    """``(level, node)`` for the code and each prefix its characters imply, deepest first.

    CM stops at the category (blocks and chapters are ranges, not prefixes); PCS goes up to the
    section. ``S72.001A`` gives S72.001A, S72.001, S72.00, S72.0, S72; ``0DTJ4ZZ`` gives
    0DTJ4ZZ, PCS:0DTJ4Z, ... PCS:0.
    """
    plain = code.replace(".", "")
    if kind == DX:
        prefixes = [plain[:n] for n in range(len(plain), 2, -1)]
        return [(code_depth(p), p if len(p) == 3 else f"{p[:3]}.{p[3:]}") for p in prefixes]
    if kind == PROC:
        return [(pcs_depth(plain[:n]), pcs_node(plain[:n])) for n in range(len(plain), 0, -1)]
    raise CodeError(f"kind {kind!r} of code {code!r} must be 'dx' or 'proc'")


def icd10_kind(code: str) -> str | None:
    """``dx`` or ``proc`` for a canonical ICD-10 code, None for anything else.

    Canonical forms never overlap: a CM code longer than three characters is dotted, a PCS
    code never is.
    """
    if _CM_DOTTED.match(code):
        return DX
    if _PCS.match(code):
        return PROC
    return None


_CM_RANGE = re.compile(r"^[A-Z][0-9A][0-9A-Z]-[A-Z][0-9A][0-9A-Z]$")


def node_kind(node: str) -> str | None:
    """``dx`` or ``proc`` for a node of the ICD-10 hierarchy (a code, a CM chapter or block
    range, a ``PCS:`` prefix), None for the root or anything else.

    CM and PCS subtrees only meet at the root, so diagnoses and procedures can be reported
    apart from node names alone (as ``hieval.codes.icd9.icd9_branch`` does for ICD-9).
    """
    if node.startswith(PCS_PREFIX):
        return PROC
    if _CM_RANGE.match(node):
        return DX
    return icd10_kind(node)
