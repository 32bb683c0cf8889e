"""Code systems: how a label is read against a tree, chosen by the hierarchy, never guessed.

A label file says ``4019``; whether that is ICD-9 diagnosis 401.9, an ICD-10 string to refuse,
or the name of a node in a user's own tree depends on what the evaluation is about, not on the
string. So the hierarchy implies one code system, recorded in the level table's Parquet
metadata (``hieval.code_system``), and every stage after the tree asks it:

- ``icd9`` (sources ``package``, ``cms``, ``cophe``): canonical dotted ICD-9-CM
  (:mod:`hieval.codes.icd9`), a file read as dotted or undotted as a whole; codes missing from the
  tree are placed where their syntax and the range table say; diagnoses and procedures are
  reported apart; the CoPHE paper's Table 1 applies.
- ``icd10`` (source ``icd10``): ICD-10-CM dotted or undotted and ICD-10-PCS
  (:mod:`hieval.codes.icd10`), each code read on its own (the CM dot position is fixed); placement
  by prefixes; diagnoses (CM) and procedures (PCS) reported apart.
- ``verbatim`` (source ``file``, a user's own tree): a label is the node's name exactly as
  written, spaces around it trimmed, nothing else: no case folding, no dots, no kinds. A label
  that is not a node is unknown; it has no syntax to place it by, so ``unknown_codes: place``
  is refused and the default is ``error``.

The defaults that depend on the system (the highest level evaluated and what to do with codes
outside the tree) are resolved here, so the config, the CLI and the library agree on them.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import polars as pl

from hieval.codes.icd9 import ICD9_LEVELS, PROC, IcdCode, icd9_branch, kind_of_dotted, parse_code
from hieval.codes.icd10 import (
    ICD9,
    ICD10,
    ICD10_LEVELS,
    node_kind,
    normalize_icd10,
    system_mismatch_hint,
)
from hieval.errors import CodeError, preview, preview_value
from hieval.hierarchy.icd9 import icd9_nodes
from hieval.hierarchy.icd10 import placed_icd10_ancestors
from hieval.hierarchy.table import LevelTable
from hieval.hints import setting

VERBATIM = "verbatim"
#: The code systems, in the order the documentation lists them (docs/hierarchies.md).
CODE_SYSTEMS = (ICD9, ICD10, VERBATIM)
#: Hierarchy source -> the code system it implies.
SOURCE_SYSTEMS = {
    "package": ICD9,
    "cms": ICD9,
    "cophe": ICD9,
    "icd10": ICD10,
    "file": VERBATIM,
}
#: ``max_level`` and ``unknown_codes`` left unset (null) mean the code system's default.
DEFAULT_MAX_LEVEL = None
PLACE = "place"

_EMPTY_ANCESTORS = {"code": pl.String, "level": pl.String, "ancestor": pl.String}


@dataclass(frozen=True)
class CodeSystem:
    """What an evaluation needs to know about its labels' code system.

    ``default_max_level`` is the level evaluated up to when ``max_level`` is unset (None for
    ``verbatim``: the highest level of the tree below its root, whatever the tree's depth);
    ``mimic4_version`` the ``icd_version`` of MIMIC-IV rows it keeps (None: MIMIC-IV tables are
    ICD tables, not a user's tree).
    """

    name: str
    title: str
    default_max_level: str | None
    default_unknown_codes: str
    can_place: bool
    splits_kinds: bool
    mimic4_version: int | None

    def normalize(
        self,
        raw: str,
        code_type: str | None = None,
        code_format: str = "dotted",
        *,
        default_type: str | None = None,
    ) -> tuple[str, str | None]:
        """The canonical code and its kind (``dx``/``proc``; None for ``verbatim``).

        ``code_type`` is the code's own kind (its row's ``code_type``), which the code must
        match; ``default_type`` the file's setting, which only decides a string valid as both
        kinds (see :func:`hieval.codes.icd9.parse_code`).

        ``code_format`` (``dotted``/``undotted``) matters for ICD-9, whose undotted dot
        position depends on the kind; ICD-10's does not (it only tells a dotted file's PCS codes
        from undotted diagnoses), and verbatim labels have no syntax.
        Raises :class:`CodeError` naming the code and what to do.
        """
        if self.name == ICD9:
            code = parse_code(raw, code_type, code_format, default_type=default_type)
            return code.code, code.kind
        if self.name == ICD10:
            plain = raw.strip()
            # In a file that writes diagnoses dotted, a dotless code longer than a category is
            # not a diagnosis: a valid PCS code there is a procedure (as ICD-9's dotted files
            # read 412 as a category), so B211YZZ needs no code_type.
            if (
                code_type is None
                and default_type is None
                and code_format == "dotted"
                and "." not in plain
                and len(plain) > 3
            ):
                with contextlib.suppress(CodeError):
                    return normalize_icd10(raw, PROC)
            return normalize_icd10(raw, code_type, default_type=default_type)
        label = raw.strip(" ")
        if not label:
            raise CodeError(f"empty label {preview_value(raw)}")
        return label, None

    def mismatch_hint(self, codes: list[str]) -> str | None:
        """A sentence for an error over bad codes that look like the other ICD system."""
        return system_mismatch_hint(codes, self.name) if self.name in (ICD9, ICD10) else None

    def node_kind(self, node: str) -> str | None:
        """``dx`` or ``proc`` for a node of the tree (None for the root, or for ``verbatim``)."""
        if self.name == ICD9:
            return icd9_branch(node)
        if self.name == ICD10:
            return node_kind(node)
        return None

    def resolve_max_level(self, levels: tuple[str, ...], max_level: str | None) -> str:
        """``max_level`` as given, or this system's default for a tree with ``levels``."""
        if max_level is not None:
            return max_level
        return self.default_max_level or levels[-2]

    def resolve_unknown_codes(self, policy: str | None) -> str:
        """``unknown_codes`` as given, or this system's default; ``place`` refused where the
        labels have no syntax to place them by."""
        if policy is None:
            return self.default_unknown_codes
        if policy == PLACE and not self.can_place:
            raise CodeError(
                f"{setting('unknown_codes', 'place')} puts a code missing from the tree where its "
                f"ICD syntax says, but this evaluation's code system is {self.name} (your own "
                "tree: labels are node names, with no syntax); set "
                f"{setting('unknown_codes', 'error')} (the default here) or "
                f"{setting('unknown_codes', 'drop')}"
            )
        return policy

    def placed_ancestors(self, codes: set[str] | list[str], table: LevelTable) -> pl.DataFrame:
        """``code, level, ancestor`` rows for codes missing from ``table``, placed by syntax
        (only the nodes new to the table)."""
        codes = sorted(set(codes))
        if not codes:
            return pl.DataFrame(schema=_EMPTY_ANCESTORS)
        if self.name == ICD10:
            return placed_icd10_ancestors(codes, table)
        if self.name == VERBATIM:
            raise CodeError(
                f"codes not in the hierarchy ({preview(codes)}) cannot be placed: labels of your "
                "own tree have no syntax to place them by; set "
                f"{setting('unknown_codes', 'error')} or {setting('unknown_codes', 'drop')}"
            )
        return _placed_icd9(codes, table)


def _placed_icd9(codes: list[str], table: LevelTable) -> pl.DataFrame:
    """ICD-9 codes placed where their syntax says: e1/e0 from the code, c/chapter from the
    range table (so only in a tree with ICD-9's levels)."""
    if table.levels != ICD9_LEVELS:
        raise CodeError(
            f"codes not in the hierarchy ({preview(codes)}) cannot be placed by syntax in a "
            f"non-ICD-9 hierarchy; set {setting('unknown_codes', 'drop')} or "
            f"{setting('unknown_codes', 'error')}"
        )
    nodes, unplaced = icd9_nodes((IcdCode(c, kind_of_dotted(c)), None) for c in codes)
    if unplaced:
        raise CodeError(
            f"codes not in the hierarchy fall in no ICD-9-CM chapter, so they cannot be placed: "
            f"{preview(unplaced)}; set {setting('unknown_codes', 'drop')} or fix the codes"
        )
    frame = pl.DataFrame(list(nodes.values()), schema=dict.fromkeys(table.frame.columns, pl.String))
    placed = LevelTable(frame=frame, levels=table.levels, root=table.root).ancestors()
    # Keep the codes and any ancestor they imply that the hierarchy lacks (so that ICM finds
    # each placed node's parent); rows of nodes already in the hierarchy would double-count.
    return placed.filter(~pl.col("code").is_in(table.frame["code"].implode()))


SYSTEMS = {
    ICD9: CodeSystem(
        name=ICD9,
        title="ICD-9-CM",
        default_max_level="c",
        default_unknown_codes=PLACE,
        can_place=True,
        splits_kinds=True,
        mimic4_version=9,
    ),
    ICD10: CodeSystem(
        name=ICD10,
        title="ICD-10-CM diagnoses and ICD-10-PCS procedures",
        default_max_level="block",
        default_unknown_codes=PLACE,
        can_place=True,
        splits_kinds=True,
        mimic4_version=10,
    ),
    VERBATIM: CodeSystem(
        name=VERBATIM,
        title="verbatim (labels are the tree's node names as written)",
        default_max_level=None,
        default_unknown_codes="error",
        can_place=False,
        splits_kinds=False,
        mimic4_version=None,
    ),
}


def code_system(name: str) -> CodeSystem:
    """The code system called ``name``."""
    if name not in SYSTEMS:
        raise CodeError(f"unknown code system {name!r}; one of {', '.join(CODE_SYSTEMS)}")
    return SYSTEMS[name]


def for_source(source: str) -> CodeSystem:
    """The code system a hierarchy source implies."""
    if source not in SOURCE_SYSTEMS:
        raise CodeError(f"unknown hierarchy source {source!r}; one of {', '.join(SOURCE_SYSTEMS)}")
    return SYSTEMS[SOURCE_SYSTEMS[source]]


def of_table(table: LevelTable) -> CodeSystem:
    """The code system of a level table: the one it was built with (its metadata).

    A table made in memory without one (a library user's or a test's ``LevelTable``) is read
    by its levels: ICD-9's or ICD-10's level names mean that system, anything else verbatim.
    """
    if table.code_system:
        return code_system(table.code_system)
    if table.levels == ICD9_LEVELS:
        return SYSTEMS[ICD9]
    if table.levels == ICD10_LEVELS:
        return SYSTEMS[ICD10]
    return SYSTEMS[VERBATIM]


def placed_codes(
    codes: pl.Series, table: LevelTable, counted: frozenset[str] = frozenset()
) -> pl.DataFrame | None:
    """Ancestor rows for those of ``codes`` that the hierarchy lacks (placed by syntax), but
    for the ``counted`` ones: with no ancestors they are false positives at the leaf only.
    The one rule for placing a run's codes (the count jobs, ICM's weights, the error analysis)."""
    known = table.known_codes
    unknown = {c for c in codes.to_list() if c not in known and c not in counted}
    return of_table(table).placed_ancestors(unknown, table) if unknown else None
