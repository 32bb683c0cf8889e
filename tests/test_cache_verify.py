"""Every hierarchy cache is verified before use (issue 30): each file of an ICD-10 or ICD-9 cache
folder has its sha256 in the folder's manifest, and a changed, truncated, missing or unrecorded
file is refused in one line naming the file and the folder to delete, never read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from hieval.cli import main
from hieval.errors import HierarchyError
from hieval.hierarchy.icd10 import cached_icd10_table, icd10_cache_key
from hieval.pipeline import build_hierarchy

ICD10_FILES = ("levels.parquet", "ancestors.parquet", "leaves.parquet")


@pytest.fixture
def icd10_folder(tmp_path, icd10_built) -> Path:
    """A ``--cache`` folder of this test's own, holding a copy of the built ICD-10 tree."""
    shutil.copytree(icd10_built, tmp_path / "cache" / "hierarchy" / "icd10")
    return tmp_path / "cache" / "hierarchy" / "icd10" / icd10_cache_key()


def _evaluate_icd10(tmp_path: Path, capsys) -> tuple[int, str]:
    """Gold E11.9 (type 2 diabetes), predicted E10.9 (type 1): category F1 is 0."""
    (tmp_path / "gold.csv").write_text("doc_id,code\nd1,E11.9\n")
    (tmp_path / "pred.csv").write_text("doc_id,code\nd1,E10.9\n")
    code = main(
        [
            "evaluate", "--hierarchy", "icd10", "--cache", str(tmp_path / "cache"),
            "--gold", str(tmp_path / "gold.csv"), "--pred", f"m={tmp_path / 'pred.csv'}",
            "--out", str(tmp_path / "out"),
        ]
    )  # fmt: skip
    return code, capsys.readouterr().err


def _category_f1(out: Path) -> float:
    tidy = pl.read_parquet(out / "metrics.parquet")
    row = tidy.filter(
        (pl.col("family") == "set")
        & (pl.col("level") == "category")
        & (pl.col("average") == "micro")
        & (pl.col("metric") == "f1")
    )
    return row["value"].item()


def _assert_refused(code: int, err: str, folder: Path, name: str, out: Path) -> None:
    assert code != 0
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert str(folder) in err and name in err and "delete it to rebuild" in err, err
    assert not out.exists()


def test_a_rewritten_icd10_ancestors_file_is_refused_not_used(tmp_path, icd10_folder, capsys):
    """The issue's case: ancestors.parquet rewritten with E11.9 under E10 would make the wrong
    category right (F1 100 instead of 0)."""
    ancestors = icd10_folder / "ancestors.parquet"
    table = pl.read_parquet(ancestors)
    moved = (pl.col("code") == "E11.9") & (pl.col("level") == "category")
    table.with_columns(
        pl.when(moved).then(pl.lit("E10")).otherwise(pl.col("ancestor")).alias("ancestor")
    ).write_parquet(ancestors)
    code, err = _evaluate_icd10(tmp_path, capsys)
    _assert_refused(code, err, icd10_folder, "ancestors.parquet", tmp_path / "out")


def test_an_intact_icd10_cache_is_used(tmp_path, icd10_folder, capsys):
    """The control: the same run on the cache as built scores the wrong category 0."""
    code, err = _evaluate_icd10(tmp_path, capsys)
    assert code == 0, err
    assert _category_f1(tmp_path / "out") == 0.0


@pytest.mark.parametrize("name", ICD10_FILES)
@pytest.mark.parametrize("damage", ["truncate", "flip", "delete"])
def test_a_damaged_icd10_cache_file_is_named_not_a_polars_error(icd10_folder, name, damage):
    path = icd10_folder / name
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        path.write_bytes(data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])
    else:
        path.unlink()
    with pytest.raises(HierarchyError) as caught:
        cached_icd10_table(icd10_folder.parent)
    message = str(caught.value)
    assert name in message and str(icd10_folder) in message and "delete it to rebuild" in message
    assert "\n" not in message


@pytest.mark.parametrize("edit", ["no files", "one file unrecorded", "not json"])
def test_an_icd10_manifest_without_every_files_sha256_is_refused(icd10_folder, edit):
    """A manifest of the old layout (no per-file sha256s) or a damaged one is not trusted."""
    manifest_path = icd10_folder / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    if edit == "no files":
        del manifest["files"]
    elif edit == "one file unrecorded":
        del manifest["files"]["leaves.parquet"]
    manifest_path.write_text("{" if edit == "not json" else json.dumps(manifest))
    with pytest.raises(HierarchyError, match="delete it to rebuild") as caught:
        cached_icd10_table(icd10_folder.parent)
    if edit == "one file unrecorded":
        assert "leaves.parquet" in str(caught.value)


def test_an_icd10_cache_records_every_files_sha256(icd10_built):
    import hashlib

    (folder,) = (p for p in icd10_built.iterdir() if p.name == icd10_cache_key())
    recorded = json.loads((folder / "manifest.json").read_text())["files"]
    assert set(recorded) == set(ICD10_FILES)
    for name, digest in recorded.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest


# -- the ICD-9 tables' cache: the same verification, naming the file ---------------------------


@pytest.fixture(scope="module")
def icd9_built(tmp_path_factory) -> Path:
    store = tmp_path_factory.mktemp("icd9")
    _build_icd9(store / "first", store / "cache")
    return store / "cache"


def _build_icd9(out: Path, tables_cache: Path) -> None:
    build_hierarchy(
        "package",
        None,
        levels_out=out / "levels.parquet",
        ancestors_out=out / "ancestors.parquet",
        tables_cache=tables_cache,
    )


@pytest.mark.parametrize("name", ["levels.parquet", "ancestors.parquet"])
def test_a_truncated_icd9_cache_file_is_named(tmp_path, icd9_built, name):
    store = tmp_path / "cache"
    shutil.copytree(icd9_built, store)
    (folder,) = store.iterdir()
    data = (folder / name).read_bytes()
    (folder / name).write_bytes(data[: len(data) // 3])
    with pytest.raises(HierarchyError) as caught:
        _build_icd9(tmp_path / "second", store)
    message = str(caught.value)
    assert name in message and str(folder) in message and "delete it to rebuild" in message
    assert not (tmp_path / "second" / "ancestors.parquet").exists()


def _old_layout_key() -> str:
    """The ICD-10 cache key before manifests held per-file sha256s (hieval up to issue 30)."""
    import hashlib

    from hieval.hierarchy import icd10

    versions = icd10._versions()
    pin = {"content": icd10.ICD10_CONTENT_SHA256, "build": icd10.BUILD_VERSION}
    pin["levels"] = icd10.ICD10_LEVELS
    digest = hashlib.sha256(json.dumps(pin, sort_keys=True).encode()).hexdigest()[:16]
    cm, pcs = versions[icd10.CM_DISTRIBUTION], versions[icd10.PCS_DISTRIBUTION]
    return f"icd10-cm{cm}-pcs{pcs}-{digest}"


def test_an_old_layout_icd10_cache_is_left_alone_and_a_new_one_built(
    tmp_path, icd10_built, monkeypatch
):
    """A folder written before per-file sha256s is stale: never read (its files could be
    anything), never deleted (nothing lost); the verified cache is built beside it."""
    from hieval.hierarchy import icd10
    from hieval.hierarchy.table import read_level_table

    (current,) = (p for p in icd10_built.iterdir() if p.name == icd10_cache_key())
    old = tmp_path / "cache" / _old_layout_key()
    shutil.copytree(current, old)
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["files"]
    manifest["key"] = old.name
    (old / "manifest.json").write_text(json.dumps(manifest))
    before = {p.name: p.read_bytes() for p in old.iterdir()}
    table = read_level_table(current / "levels.parquet")
    leaves = pl.read_parquet(current / "leaves.parquet")["code"].to_list()
    monkeypatch.setattr(icd10, "build_icd10_table", lambda verify: (table, leaves))
    monkeypatch.setattr(icd10, "validate", lambda *a, **k: [])
    _, _, folder = cached_icd10_table(tmp_path / "cache")
    assert folder != old and folder.name == icd10_cache_key()
    assert {p.name: p.read_bytes() for p in old.iterdir()} == before
    assert set(json.loads((folder / "manifest.json").read_text())["files"]) == set(ICD10_FILES)
