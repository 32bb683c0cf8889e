"""A cache folder written whole, with every file's sha256 in its manifest, and verified before
every use.

Why: a cache outlives the run that wrote it and is shared between runs (and, on a cluster,
users); a file changed, truncated or half-copied in it would otherwise be read as a smaller or
different tree, and every number after it would follow silently. So a folder is staged beside
its final name and renamed into place whole (:func:`publish`), and each read hashes its files
again against the manifest (:func:`verified`); a folder that fails says which file and to
delete the folder, in one line. The ICD-9 tables' cache (:mod:`hieval.hierarchy.cache`) and the
ICD-10 tree's (:mod:`hieval.hierarchy.icd10`) both use it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from hieval.atomic import _honour_umask as honour_umask
from hieval.checksums import sha256_file
from hieval.errors import HierarchyError

MANIFEST = "manifest.json"


def damaged(folder: Path, what: str, problem: str) -> HierarchyError:
    """The one-line refusal of a cache folder that cannot be trusted."""
    return HierarchyError(f"the {what} {folder} {problem}; delete it to rebuild")


def verified(folder: Path, files: tuple[str, ...], *, what: str = "hierarchy cache") -> dict:
    """The manifest of the cache ``folder``, once each of ``files`` hashes to the sha256 the
    manifest records for it (and the manifest names the folder).

    Why every read: a cache outlives the run that wrote it, and a file changed or truncated in
    it would otherwise be read as a smaller or different tree, every number following it. A
    manifest without a file's sha256 (damaged, or not one hieval wrote) is refused too.
    """
    try:
        manifest = json.loads((folder / MANIFEST).read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise damaged(folder, what, f"has no readable {MANIFEST} ({exc})") from None
    recorded = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(recorded, dict) or manifest.get("key") != folder.name:
        raise damaged(
            folder, what, f"has a {MANIFEST} that does not name it or lacks its files' sha256s"
        )
    for name in files:
        if not isinstance(recorded.get(name), str):
            raise damaged(folder, what, f"has no sha256 for {name} in its {MANIFEST}")
        try:
            actual = sha256_file(folder / name)
        except OSError as exc:
            raise damaged(folder, what, f"cannot read {name} ({exc.strerror or exc})") from None
        if actual != recorded[name]:
            raise damaged(
                folder, what, f"holds a {name} that does not match its {MANIFEST} (changed or "
                "truncated)",
            )  # fmt: skip
    return manifest


def publish(folder: Path, write: Callable[[Path], dict]) -> None:
    """Create the cache ``folder``: ``write(staging)`` writes its files into an empty staging
    folder and returns the manifest's other entries; the manifest adds the folder's name and
    every file's sha256 (:func:`verified` checks them on every read).

    The folder is written beside its final name and renamed into place, so it is complete once
    it exists; a concurrent builder that loses the race keeps the winner's copy.
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        honour_umask(staging, 0o777)  # a shared cache is readable as the user's umask allows
        manifest = write(staging)
        files = {p.name: sha256_file(p) for p in sorted(staging.iterdir())}
        manifest = {**manifest, "key": folder.name, "files": files}
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        with contextlib.suppress(OSError):  # another process cached it first: keep theirs
            os.replace(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
