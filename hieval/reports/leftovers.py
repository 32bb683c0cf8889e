"""The workflow's report folder holds the outputs of its latest configuration only.

Snakemake removes and rewrites the outputs a run declares, but never a file the run no longer
declares: after ``bootstrap: 20`` then ``bootstrap: 0``, ``intervals.parquet`` of the first run
would sit beside the new summary as if it belonged to it; so would ``nodes/B.csv`` after model B
left the sheet, or ``systems.parquet`` after the sheet lost its ``system`` column. The report
job therefore records what it wrote in a manifest beside its outputs and, on its next run,
removes what the earlier manifest lists and this run no longer writes — only while the file
is byte for byte what hieval wrote (a file the user put there, or changed, is never touched).
The manifest is no Snakemake output, so Snakemake never deletes it before the job.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from hieval.atomic import write_text
from hieval.checksums import sha256_file

log = logging.getLogger(__name__)

#: The manifest's name inside the report folder.
MANIFEST = ".hieval-outputs.json"


def _files(paths: Iterable[str | os.PathLike], folder: Path) -> dict[str, Path]:
    """The files among ``paths`` (a folder stands for the files in it) inside ``folder``, by
    their path relative to it."""
    found = {}
    for path in map(Path, paths):
        inside = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in inside:
            try:
                found[file.absolute().relative_to(folder.absolute()).as_posix()] = file
            except ValueError:
                continue  # not in the report folder
    return found


def _previous(manifest: Path) -> dict[str, str]:
    """The earlier run's files and their sha256 (none when the manifest is absent or not
    hieval's: then nothing is removed)."""
    try:
        recorded = json.loads(manifest.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    files = recorded.get("files") if isinstance(recorded, dict) else None
    if not isinstance(files, dict):
        return {}
    return {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str)}


def _own_place(path: Path, folder: Path) -> bool:
    """Whether ``path`` is a plain file inside ``folder`` itself: a manifest's name that is
    absolute, climbs out with ``..`` or passes through a symbolic link points elsewhere,
    where hieval never wrote (a manifest can be edited or copied; it proves nothing there)."""
    if path.is_symlink() or not path.is_file():
        return False
    return path.resolve().is_relative_to(folder.resolve()) and ".." not in path.parts


def remove_leftovers(folder: str | os.PathLike, current: Iterable[str | os.PathLike]) -> list[str]:
    """Remove from ``folder`` the files an earlier report job wrote that this one does not
    (``current``: every input and output of this job; those outside ``folder`` are ignored),
    while unchanged since; record this job's files for the next. Returns what was removed."""
    folder = Path(folder)
    now = _files(current, folder)
    removed = []
    for name, sha in _previous(folder / MANIFEST).items():
        path = folder / name
        if name in now or not _own_place(path, folder):
            continue
        if sha256_file(path) != sha:
            log.warning("%s is not what hieval wrote there: left in place", path)
            continue
        path.unlink()
        removed.append(name)
        log.info("removed %s: an output of an earlier configuration", path)
    files = {name: sha256_file(path) for name, path in sorted(now.items())}
    write_text(folder / MANIFEST, json.dumps({"files": files}, indent=1, sort_keys=True) + "\n")
    return removed
