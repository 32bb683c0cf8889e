"""The built-hierarchy cache (hieval.hierarchy.cache): a second build reads the cache instead of
re-deriving the tree, gives byte-identical tables, and a damaged or stale cache is never
trusted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hieval import pipeline
from hieval.errors import ConfigError, HierarchyError
from hieval.hierarchy import cache
from hieval.pipeline import build_hierarchy

ROOT = Path(__file__).resolve().parents[1]


def build(tmp: Path, name: str, tables_cache: Path | None) -> tuple[Path, Path]:
    out = tmp / name
    build_hierarchy(
        "package",
        None,
        levels_out=out / "levels.parquet",
        ancestors_out=out / "ancestors.parquet",
        tables_cache=tables_cache,
    )
    return out / "levels.parquet", out / "ancestors.parquet"


def no_building(monkeypatch) -> None:
    """Make any re-derivation of the tree fail loudly."""

    def refuse(*args, **kwargs):
        raise AssertionError("the hierarchy was built again instead of read from the cache")

    monkeypatch.setattr(pipeline, "load_source", refuse)


@pytest.fixture(scope="module")
def uncached(tmp_path_factory) -> tuple[Path, Path]:
    """The tables built directly, without any cache (the reference)."""
    return build(tmp_path_factory.mktemp("plain"), "plain", None)


def test_second_build_reads_the_cache_byte_identical(tmp_path, uncached, monkeypatch):
    store = tmp_path / "cache"
    first = build(tmp_path, "first", store)
    (folder,) = store.iterdir()
    assert folder.name.startswith("package-")
    no_building(monkeypatch)
    second = build(tmp_path, "second", store)
    for ours, theirs, reference in zip(first, second, uncached, strict=True):
        assert ours.read_bytes() == reference.read_bytes()
        assert theirs.read_bytes() == reference.read_bytes()


def test_max_level_is_checked_on_a_cache_hit(tmp_path, monkeypatch):
    store = tmp_path / "cache"
    build(tmp_path, "first", store)
    no_building(monkeypatch)
    with pytest.raises(ConfigError, match="max_level 'nope' is not a level"):
        build_hierarchy(
            "package",
            None,
            levels_out=tmp_path / "x" / "levels.parquet",
            ancestors_out=tmp_path / "x" / "ancestors.parquet",
            max_level="nope",
            tables_cache=store,
        )
    assert not (tmp_path / "x" / "levels.parquet").exists()


@pytest.mark.parametrize("damage", ["truncate", "edit", "manifest"])
def test_damaged_cache_is_refused(tmp_path, damage):
    store = tmp_path / "cache"
    build(tmp_path, "first", store)
    (folder,) = store.iterdir()
    if damage == "truncate":
        data = (folder / "ancestors.parquet").read_bytes()
        (folder / "ancestors.parquet").write_bytes(data[: len(data) // 2])
    elif damage == "edit":
        data = bytearray((folder / "levels.parquet").read_bytes())
        data[len(data) // 2] ^= 0xFF
        (folder / "levels.parquet").write_bytes(bytes(data))
    else:
        (folder / "manifest.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(HierarchyError, match="delete it to rebuild"):
        build(tmp_path, "second", store)


def test_changed_builder_is_a_new_key_not_a_stale_hit(tmp_path, monkeypatch):
    store = tmp_path / "cache"
    build(tmp_path, "first", store)
    old = {p.name for p in store.iterdir()}
    monkeypatch.setattr(cache, "_builder_digest", lambda: "a different builder")
    build(tmp_path, "second", store)
    new = {p.name for p in store.iterdir()} - old
    assert len(new) == 1 and new.pop().startswith("package-")


def test_download_sources_are_keyed_by_the_file(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text("{}", encoding="utf-8")
    b.write_text("{ }", encoding="utf-8")
    assert cache.cache_key("cophe", a) != cache.cache_key("cophe", b)
    assert cache.cache_key("cophe", a) == cache.cache_key("cophe", a)
    with pytest.raises(ValueError):
        cache.cache_key("file", a)


def test_cli_uses_the_cache(tmp_path):
    """`hieval hierarchy --cache` twice: the second run logs a cache hit, same bytes."""
    outs = []
    for name in ("one", "two"):
        out, store = str(tmp_path / name), str(tmp_path / "cache")
        done = subprocess.run(
            [sys.executable, "-m", "hieval.cli", "hierarchy", "--out", out, "--cache", store],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        )
        outs.append(done.stderr)
    assert "built and cached" in outs[0]
    assert "from the cache" in outs[1]
    for table in ("levels.parquet", "ancestors.parquet"):
        assert (tmp_path / "one" / table).read_bytes() == (tmp_path / "two" / table).read_bytes()


def test_cli_import_leaves_heavy_modules_for_later():
    """`import hieval.cli` (every workflow job and every CLI run pays it) does not load
    matplotlib, scipy or numba: only the jobs that draw a figure or compute intervals and
    randomization tests do."""
    code = (
        "import sys, hieval, hieval.cli, hieval.pipeline, hieval.engine.driver, hieval.run; "
        "print(sorted(m for m in ('matplotlib', 'scipy', 'numba') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert done.stdout.strip() == "[]"


def test_pipeline_import_leaves_the_readers_for_the_jobs_that_read_labels():
    """`import hieval.pipeline` (every workflow script) does not load DuckDB, pyarrow or the
    label readers: only the jobs that read a label file or write with them pay for them
    (about a tenth of a second of each job's start)."""
    code = (
        "import sys, hieval.pipeline; "
        "print(sorted(m for m in ('duckdb', 'pyarrow', 'hieval.inputs.normalize', "
        "'hieval.inputs.formats') "
        "if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert done.stdout.strip() == "[]"
