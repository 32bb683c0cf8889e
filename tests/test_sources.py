"""The cms source (parsed from a fixture zip of the CMS layout), pinned downloads, and the
one-line error when the network is out of reach."""

from __future__ import annotations

import zipfile
from pathlib import Path

import polars as pl
import pytest

from hieval.errors import HierarchyError
from hieval.hierarchy.sources import (
    CMS_DX_FILE,
    CMS_PROC_FILE,
    Download,
    cms_table,
    cms_zip_files,
    download,
    load_source,
    package_cms_files,
    sha256_bytes,
)

DX_FIXTURE = (
    "0010  Cholera due to vibrio cholerae\n"
    "36411 Chronic iridocyclitis in diseases classified elsewhere\n"
    "3643  Unspecified iridocyclitis\n"
    "38600 M\u00e9ni\u00e8re's disease, unspecified\n"
    "412   Old myocardial infarction\n"
    "E8497 Accidents occurring in residential institution\n"
    "V5861 Long-term (current) use of anticoagulants\n"
)
SG_FIXTURE = "0010 Implantation of chemotherapeutic agent\n9604 Insertion of endotracheal tube\n"


def make_zip(path: Path, dx: bytes, sg: bytes) -> Path:
    """A zip laid out like the CMS master descriptions download (with other members)."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"v32/{CMS_DX_FILE}", dx)
        archive.writestr(f"v32/{CMS_PROC_FILE}", sg)
        archive.writestr("v32/CMS32_DESC_SHORT_DX.txt", b"0010 Cholera d/t vib cholerae\r\n")
    return path


def test_cms_zip_fixture_is_parsed(tmp_path):
    zipped = make_zip(
        tmp_path / "cms.zip",
        DX_FIXTURE.encode("latin-1"),
        SG_FIXTURE.replace("\n", "\r\n").encode("latin-1"),
    )
    table, leaves = cms_table(cms_zip_files(zipped), "cms", verify=False)
    rows = {r["code"]: r for r in table.frame.iter_rows(named=True)}
    assert sorted(leaves) == sorted(
        ["001.0", "364.11", "364.3", "386.00", "412", "E849.7", "V58.61", "00.10", "96.04"]
    )
    assert rows["386.00"]["title"] == "M\u00e9ni\u00e8re's disease, unspecified"  # Latin-1 read
    assert (rows["001.0"]["kind"], rows["00.10"]["kind"]) == ("dx", "proc")
    assert (
        rows["96.04"]["e1"],
        rows["96.04"]["e0"],
        rows["96.04"]["c"],
        rows["96.04"]["chapter"],
    ) == ("96.0", "96", "87-99", "87-99")
    assert rows["96.04"]["title"] == "Insertion of endotracheal tube"  # CRLF stripped


def test_cms_fixture_fails_the_content_pin(tmp_path):
    zipped = make_zip(tmp_path / "cms.zip", DX_FIXTURE.encode("latin-1"), SG_FIXTURE.encode())
    with pytest.raises(HierarchyError, match="is not the ICD-9-CM v32 list"):
        load_source("cms", zipped)


def test_genuine_lists_with_crlf_pass_the_content_pin(tmp_path):
    """The pin covers content, not bytes: the real lists re-zipped with CRLF still pass."""
    files = package_cms_files()
    crlf = {k: v.replace(b"\n", b"\r\n") for k, v in files.items()}
    zipped = make_zip(tmp_path / "cms.zip", crlf["dx"], crlf["proc"])
    table, leaves = load_source("cms", zipped)
    package, package_leaves = load_source("package")
    assert leaves == package_leaves
    assert table.frame.sort("code").equals(package.frame.sort("code"))


def test_not_a_zip(tmp_path):
    bad = tmp_path / "cms.zip"
    bad.write_text("<html>moved</html>")
    with pytest.raises(HierarchyError, match="is not a zip file"):
        load_source("cms", bad)


def test_zip_without_the_lists(tmp_path):
    path = tmp_path / "cms.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "nothing")
    with pytest.raises(HierarchyError, match=CMS_DX_FILE):
        load_source("cms", path)


def test_malformed_line_is_named(tmp_path):
    zipped = make_zip(tmp_path / "cms.zip", b"0010 Cholera\nXYZ1 Bad code\n", SG_FIXTURE.encode())
    with pytest.raises(HierarchyError, match=f"{CMS_DX_FILE}, line 2"):
        cms_table(cms_zip_files(zipped), "cms", verify=False)


def test_offline_download_is_one_clear_line(tmp_path):
    """Unreachable host (a closed loopback port): one line that says what to do instead."""
    spec = Download(url="http://127.0.0.1:9/ICD-9-CM.zip", sha256=None, filename="x.zip")
    dest = tmp_path / "resources" / "x.zip"
    with pytest.raises(HierarchyError) as err:
        download(spec, dest, timeout=5)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("cannot download http://127.0.0.1:9/ICD-9-CM.zip")
    assert "hierarchy.source: package" in message
    assert not dest.exists()


def test_download_checks_the_pin(tmp_path):
    payload = tmp_path / "graph.json"
    payload.write_text('{"a": 1}')
    good = Download(url=payload.as_uri(), sha256=sha256_bytes(b'{"a": 1}'), filename="g.json")
    assert download(good, tmp_path / "ok.json").read_text() == '{"a": 1}'
    bad = Download(url=payload.as_uri(), sha256="0" * 64, filename="g.json")
    with pytest.raises(HierarchyError, match="checksum mismatch"):
        download(bad, tmp_path / "bad.json")
    assert not (tmp_path / "bad.json").exists()


def test_unknown_source():
    with pytest.raises(HierarchyError, match=r"unknown hierarchy\.source"):
        load_source("umls", Path("x"))


def test_levels_written_with_metadata(tmp_path):
    from hieval.hierarchy.table import level_order, read_level_table, write_level_table

    table, _ = load_source("package")
    write_level_table(table, tmp_path / "levels.parquet", tmp_path / "ancestors.parquet")
    assert level_order(tmp_path / "ancestors.parquet") == table.levels
    back = read_level_table(tmp_path / "levels.parquet")
    assert back.root == "root" and back.frame.height == table.frame.height
    assert pl.read_parquet(tmp_path / "ancestors.parquet").height == table.ancestors().height
