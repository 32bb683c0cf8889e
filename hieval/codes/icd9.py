"""ICD-9-CM code syntax: canonical dotted form, code kind, and the levels a code implies.

Codes are strings, never numbers: ``001.0`` and ``01.0`` are different codes, and a lost leading
zero silently changes a diagnosis into a procedure. The canonical form is dotted ICD-9-CM:

- diagnoses ``DDD[.D[D]]``, ``VDD[.D[D]]``, ``EDDD[.D]``;
- procedures ``DD[.D[D]]``.

Undotted strings (as in MIMIC's ``DIAGNOSES_ICD``) are ambiguous: ``4019`` is diagnosis 401.9 or
procedure 40.19. They are only converted when the code's kind is known (a ``code_type`` column
or a per-file setting); otherwise conversion refuses instead of guessing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hieval.errors import CodeError, preview_value
from hieval.hints import setting

DX, PROC = "dx", "proc"
CODE_TYPES = (DX, PROC)

#: The ICD-9 depth classes of the CoPHE paper, deepest first, then the root.
ICD9_LEVELS = ("e2", "e1", "e0", "c", "chapter", "root")

_DOTTED = {
    DX: re.compile(r"^(?:\d{3}|V\d{2})(?:\.\d{1,2})?$|^E\d{3}(?:\.\d)?$"),
    PROC: re.compile(r"^\d{2}(?:\.\d{1,2})?$"),
}
_UNDOTTED = {
    DX: re.compile(r"^(?:\d{3}|V\d{2})\d{0,2}$|^E\d{3}\d?$"),
    PROC: re.compile(r"^\d{2}\d{0,2}$"),
}


@dataclass(frozen=True)
class IcdCode:
    """A canonical ICD-9-CM code with the ancestors its syntax implies."""

    code: str
    kind: str

    @property
    def category(self) -> str:
        """The e0 ancestor: the three-character category (two digits for procedures)."""
        return self.code.split(".")[0]

    @property
    def depth(self) -> str:
        """``e0`` for a category, ``e1`` with one digit after the dot, ``e2`` with two."""
        if "." not in self.code:
            return "e0"
        return "e1" if len(self.code.split(".")[1]) == 1 else "e2"

    @property
    def e1(self) -> str | None:
        """The one-digit ancestor (the code itself at depth e1), None for a category."""
        if "." not in self.code:
            return None
        return self.code[: self.code.index(".") + 2]


def _clean(raw: str) -> str:
    """Surrounding spaces dropped, upper case. A trailing dot stays: ``401.`` is no code (as
    ICD-10's ``I10.``), refused or, for predictions under ``malformed_codes: count``, counted."""
    return raw.strip().upper()


def trailing_dot_hint(raw: str) -> str:
    """What to write instead of a code that ends with a dot (both systems' messages)."""
    code = raw.strip()
    return f" (a code does not end with a dot: write {code[:-1]!r})" if code.endswith(".") else ""


def kind_of_dotted(code: str) -> str | None:
    """The kind of an already canonical code, or None when it is not a valid dotted code.

    Dotted forms are never ambiguous: diagnoses have three characters before the dot,
    procedures two.
    """
    for kind in CODE_TYPES:
        if _DOTTED[kind].match(code):
            return kind
    return None


_PROC_RANGE = re.compile(r"^\d{2}-\d{2}$")


def icd9_branch(node: str) -> str | None:
    """``dx`` or ``proc`` for an ICD-9 node (a code or a range such as 360-379 or 87-99)."""
    if "-" in node:
        return PROC if _PROC_RANGE.match(node) else DX
    return kind_of_dotted(node)


def parse_code(
    raw: str,
    code_type: str | None = None,
    code_format: str = "dotted",
    *,
    default_type: str | None = None,
) -> IcdCode:
    """Convert one raw code to canonical dotted form.

    ``code_format`` says how the file writes codes: ``dotted`` (a code without a dot is a
    category: three characters for diagnoses, two digits for procedures) or ``undotted`` (MIMIC
    style; the dot position depends on the kind, so the kind is needed where the string is
    valid as both). Lower case and surrounding spaces are accepted; a trailing dot (``401.``)
    is not: it is malformed.

    ``code_type`` is the code's own kind (a ``code_type`` column): the code must be of that
    kind. ``default_type`` is the file's setting: it only decides between the two readings of
    an ambiguous undotted string, and never overrides a code whose form says its kind (a dotted
    ``401.9`` stays a diagnosis in a file set to ``proc``).
    """
    code = _clean(raw)
    if code_type is not None and code_type not in CODE_TYPES:
        raise CodeError(
            f"code_type {preview_value(code_type)} for code {preview_value(raw)} must be 'dx' "
            "or 'proc'"
        )
    if code_format == "dotted" or "." in code:
        kind = kind_of_dotted(code)
        if kind is None or (code_type is not None and kind != code_type):
            expected = f"a {code_type} code" if code_type else "an ICD-9-CM code"
            raise CodeError(
                f"malformed code {preview_value(raw)}: not {expected} in dotted form "
                f"(diagnoses DDD.DD, VDD.DD, EDDD.D; procedures DD.DD){trailing_dot_hint(raw)}"
            )
        return IcdCode(code, kind)
    kinds = [k for k in CODE_TYPES if _UNDOTTED[k].match(code)]
    if code_type is not None:
        kinds = [k for k in kinds if k == code_type]
    elif len(kinds) > 1 and default_type is not None:
        kinds = [default_type]
    if not kinds:
        raise CodeError(f"malformed code {preview_value(raw)}: not an undotted ICD-9-CM code")
    if len(kinds) > 1:
        raise CodeError(
            f"ambiguous undotted code {preview_value(raw)}: valid as a diagnosis and as a "
            f"procedure; add a code_type column (dx/proc) or set {setting('code_type', 'dx|proc')}"
        )
    kind = kinds[0]
    split = (4 if code.startswith("E") else 3) if kind == DX else 2
    dotted = code if len(code) == split else f"{code[:split]}.{code[split:]}"
    return IcdCode(dotted, kind)


def undotted_to_dotted(raw: str, kind: str) -> str:
    """Canonical form of an undotted code of known kind, as in the CMS description files."""
    return parse_code(raw, code_type=kind, code_format="undotted").code
