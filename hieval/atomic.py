"""Write outputs atomically: a file to a temporary path beside it, a folder of outputs to a
staging folder beside it, renamed into place only when complete.

A crash, a full disk or a validation error half-way through never leaves a file (or a set of
files) at the final path that looks complete; Snakemake and users only ever see whole outputs.
Files get the permissions the user's umask gives any new file (reports live on shared cluster
filesystems), not the 0600 of a private temporary file.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from hieval.errors import HievalError

if TYPE_CHECKING:
    import polars as pl


def _umask() -> int:
    """The process umask (read from /proc where possible: setting it to read it is racy)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _honour_umask(path: Path, mode: int) -> None:
    """Give ``path`` the mode a plain ``open``/``mkdir`` would have given it."""
    os.chmod(path, mode & ~_umask())


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path in the target's folder; rename it onto ``target`` on success."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        if tmp_path.is_file():
            _honour_umask(tmp_path, 0o666)
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text(target: str | os.PathLike, text: str) -> None:
    """Write a text file atomically."""
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_parquet(frame: pl.DataFrame, path: str | os.PathLike) -> None:
    """Write a Parquet file atomically (temp path, then rename)."""
    with atomic_path(path) as tmp:
        frame.write_parquet(tmp)


def _write_errors() -> tuple[type[Exception], ...]:
    """What a write can fail with: the OS's errors, and DuckDB's when it writes a file itself
    (imported only once a write failed: most processes that write a file never load DuckDB)."""
    import duckdb

    return (OSError, duckdb.IOException)


def _reason(exc: Exception) -> str:
    """The OS's reason (``No space left on device``) without the writer's wrapping."""
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno)
    code = re.search(r'"errno":\s*"(\d+)"', str(exc))
    if code:
        return os.strerror(int(code.group(1)))
    detail = re.search(r"Detail:\s*(.+)", str(exc))
    return (detail.group(1) if detail else str(exc).splitlines()[0]).strip()


@contextlib.contextmanager
def staged_folder(target: str | os.PathLike, *, replaceable: frozenset[str]) -> Iterator[Path]:
    """Yield an empty staging folder beside ``target``; on success it replaces ``target``.

    The output folder of a run then holds that run's outputs only (nothing of an earlier run
    with other models survives), and a failure at any point — a bad input, a full disk —
    leaves ``target`` as it was and no staging folder behind. An existing ``target`` is
    replaced only when it is empty or holds nothing but the entries a run writes
    (``replaceable``), so a user's own folder is never deleted. OS errors (read-only
    filesystem, no permission, no space) become one :class:`HievalError` naming the folder.
    """
    target = Path(target)
    if target.exists() and not target.is_dir():
        raise HievalError(f"output folder {target} is an existing file; choose another --out")
    if target.is_dir():
        foreign = sorted(p.name for p in target.iterdir() if p.name not in replaceable)
        if foreign:
            raise HievalError(
                f"output folder {target} holds files hieval did not write ({', '.join(foreign[:5])}"
                f"{', …' if len(foreign) > 5 else ''}); choose a new or empty --out"
            )
    parent = target.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=parent))
    except OSError as exc:
        raise HievalError(
            f"cannot write the output folder {target} ({_reason(exc)}); choose an --out in a "
            "folder you can write to"
        ) from None
    old: Path | None = None
    try:
        _honour_umask(staging, 0o777)
        yield staging
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=parent))
            os.replace(target, old / "previous")
        os.replace(staging, target)
    except _write_errors() as exc:
        if old is not None and not target.exists():  # put the previous outputs back
            with contextlib.suppress(OSError):
                os.replace(old / "previous", target)
        raise HievalError(
            f"cannot write the outputs to {target} ({_reason(exc)}); nothing was written, "
            "fix the cause and rerun"
        ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
