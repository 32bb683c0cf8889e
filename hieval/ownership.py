"""What hieval may delete: only the files it can prove it wrote.

An output folder is replaced whole by the next run, so a user's file anywhere inside it — a
thesis in ``OUT/work/``, a plot in ``OUT/figures/`` — would go with it. Names cannot tell
hieval's files from a user's (both may be ``figures/plot.png``). So the last thing a run writes
into its folder is a manifest listing every file and folder it wrote, with each file's size and
modification time. A later run replaces the folder only when every entry under it (walked
without following symbolic links, which hieval never writes) is in the manifest and unchanged;
anything else is the user's, and the folder is refused, never removed.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hieval.errors import preview

log = logging.getLogger(__name__)

#: The manifest's name inside an output folder (hidden: it is hieval's bookkeeping).
MANIFEST = ".hieval-manifest.json"
_FORMAT = 1


@dataclass(frozen=True)
class Entry:
    """One entry under a folder: a ``dir``, a ``file`` (with size, mtime and inode) or
    ``other`` (a symbolic link, a socket, …: never something hieval writes).

    The inode is what a user's copy cannot keep: ``cp -p``, ``rsync -a`` or a restore give a
    file hieval's size and mtime, but a new inode (hashing every output would cost seconds on
    large runs)."""

    kind: str
    size: int = 0
    mtime_ns: int = 0
    inode: int = 0


def _entry(info: os.stat_result) -> Entry:
    if stat.S_ISDIR(info.st_mode):
        return Entry("dir")
    if stat.S_ISREG(info.st_mode):
        return Entry("file", info.st_size, info.st_mtime_ns, info.st_ino)
    return Entry("other")


def walk(folder: Path) -> Iterator[tuple[str, Entry]]:
    """Every entry under ``folder`` as (relative POSIX path, entry), parents before children.

    Symbolic links are reported as ``other`` and never followed, so nothing outside the
    folder is looked at (let alone judged or deleted) through a link inside it.
    """
    with os.scandir(folder) as entries:
        found = sorted(entries, key=lambda e: e.name)
    for item in found:
        entry = _entry(item.stat(follow_symlinks=False))
        yield item.name, entry
        if entry.kind == "dir":
            for below, sub in walk(Path(item.path)):
                yield f"{item.name}/{below}", sub


def write_manifest(folder: Path, *, leave_out: tuple[str, ...] = ()) -> None:
    """Record every entry under ``folder`` as hieval's own (but the top-level names in
    ``leave_out``, which go before the folder is published); call it after the last write."""
    skipped = {MANIFEST, *leave_out}
    entries = {name: vars(entry) for name, entry in walk(folder) if name not in skipped}
    text = json.dumps({"format": _FORMAT, "entries": entries}, indent=0, sort_keys=True)
    (folder / MANIFEST).write_text(text, encoding="utf-8")


def _recorded(folder: Path) -> dict[str, Entry] | None:
    """The manifest's entries, or None when there is no readable manifest of this format."""
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        return {name: Entry(**fields) for name, fields in data["entries"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _unchanged(entry: Entry, recorded: Entry | None) -> bool:
    """Whether an entry is the one hieval wrote (a folder's times change as files come and go,
    so a folder is matched by kind alone; its files are matched one by one)."""
    if recorded is None or entry.kind != recorded.kind or entry.kind == "other":
        return False
    return entry.kind == "dir" or entry == recorded


def foreign_entries(folder: Path) -> list[str] | None:
    """The entries under ``folder`` that hieval cannot prove it wrote: ``[]`` when the folder
    is empty or holds only its own unchanged files; ``None`` when it holds something but no
    manifest (a folder of the user's, or of a hieval too old to write one)."""
    if not any(folder.iterdir()):
        return []
    recorded = _recorded(folder)
    if recorded is None:
        return None
    return [
        name
        for name, entry in walk(folder)
        if name != MANIFEST and not _unchanged(entry, recorded.get(name))
    ]


def refusal(
    folder: Path, foreign: list[str] | None, *, what: str, shown_as: Path | None = None
) -> str | None:
    """The one-line reason ``folder`` may not be replaced, or None when it may; ``what``
    names the folder in the message (``output folder``), as ``shown_as`` if given (the path
    the user knows a folder moved aside by)."""
    if foreign is None:
        entries = list(walk(folder))
        folder = shown_as or folder
        files = [name for name, entry in entries if entry.kind != "dir"]
        shown = preview(files or [name for name, _ in entries], limit=3)
        return (
            f"{what} {folder} is not empty and has no record of hieval's own files "
            f"({MANIFEST}): it holds {shown}; choose a new --out, or empty it yourself"
        )
    if foreign:
        folder = shown_as or folder
        return (
            f"{what} {folder} holds files hieval did not write or that changed since "
            f"({preview(foreign, limit=5)}); move them out of it or choose a new --out"
        )
    return None


def remove_owned(folder: Path) -> bool:
    """Delete the entries of ``folder`` that its manifest proves are hieval's and unchanged,
    then the folder itself if that left it empty; returns whether the folder is gone.

    Anything else stays where it is (a folder holding it stays too)."""
    recorded = _recorded(folder) or {}
    for name, entry in reversed(list(walk(folder))):
        if name == MANIFEST or not _unchanged(entry, recorded.get(name)):
            continue
        path = folder / name
        try:
            path.rmdir() if entry.kind == "dir" else path.unlink()
        except OSError:
            continue  # a folder that still holds something not ours
    try:
        (folder / MANIFEST).unlink(missing_ok=True)
        folder.rmdir()
    except OSError:
        log.warning("left %s: it holds files hieval cannot prove it wrote", folder)
        return False
    return True
