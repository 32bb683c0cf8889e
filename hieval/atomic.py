"""Write outputs atomically: a file to a temporary path beside it, a folder of outputs to a
staging folder beside it, renamed into place only when complete.

A crash, a full disk or a validation error half-way through never leaves a file (or a set of
files) at the final path that looks complete; Snakemake and users only ever see whole outputs.
Files get the permissions the user's umask gives any new file (reports live on shared cluster
filesystems), not the 0600 of a private temporary file.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from hieval import ownership
from hieval.errors import HievalError

if TYPE_CHECKING:
    import polars as pl

log = logging.getLogger(__name__)


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
    """Yield a temporary path in the target's folder; rename it onto ``target`` on success.

    An OS error of the writer that names no file (pyarrow's ``No space left on device``)
    is raised again naming ``target``, so that a message can say which write failed.
    """
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
    except OSError as exc:
        if exc.filename is None and exc.errno:
            raise OSError(exc.errno, os.strerror(exc.errno), str(target)) from exc
        raise
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
    """The OS's reason (``No space left on device``) without the writer's wrapping (DuckDB's
    text around it names the hidden temporary file)."""
    code = _errno(exc)
    if code:
        return os.strerror(code)
    detail = re.search(r"Detail:\s*(.+)", str(exc))
    return (detail.group(1) if detail else str(exc).splitlines()[0]).strip()


def _errno(exc: Exception) -> int | None:
    """The OS's error number of a failed write: an OS error's own; DuckDB's errors carry it
    as ``"errno": "28"`` or only as its text (``Cannot open file "x": File name too long``),
    which is matched back to it."""
    if isinstance(exc, OSError) and exc.errno:
        return exc.errno
    text = str(exc).strip()
    code = re.search(r'"errno":\s*"(\d+)"', text)
    if code:
        return int(code.group(1))
    first = text.splitlines()[0] if text else ""
    return next(
        (code for code in errno.errorcode if first.endswith(f": {os.strerror(code)}")), None
    )


#: The marker inside a staging folder: which process on which machine owns it. A staging
#: folder (``.OUT.*.partial``, ``.OUT.*.old``) is removed by a later run only when its marker
#: names a process of this machine that no longer runs.
STAGING_MARKER = ".hieval-staging.json"


def _mark(folder: Path) -> None:
    """Claim ``folder`` as this process's staging folder (see :data:`STAGING_MARKER`)."""
    marker = {"pid": os.getpid(), "host": socket.gethostname()}
    (folder / STAGING_MARKER).write_text(json.dumps(marker), encoding="utf-8")


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts: it exists)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _dead_runs_folder(folder: Path) -> bool:
    """Whether ``folder`` is provably the staging folder of a run that died (killed, or its
    machine rebooted): its marker names a process of this machine that no longer exists."""
    try:
        marker = json.loads((folder / STAGING_MARKER).read_text(encoding="utf-8"))
        pid, host = int(marker["pid"]), str(marker["host"])
    except (OSError, ValueError, KeyError, TypeError):
        return False  # not provably hieval's: never removed
    return host == socket.gethostname() and pid > 0 and not _alive(pid)


def _remove_stale_staging(target: Path, *, keep: list[Path]) -> None:
    """Remove the staging folders that dead runs left beside ``target`` (SIGKILL, power
    loss), unless one holds a path in ``keep`` (an input of this run).

    A dead run's ``.old`` folder holds the previous outputs it was swapping out: when
    ``target`` is missing they are put back first, as the run would have on failing.
    """
    parent = target.absolute().parent
    if not os.path.isdir(parent):  # missing, or a path the OS refuses (checked next)
        return
    for folder in sorted(parent.iterdir()):
        name = folder.name
        if not _staging_name(name, target):
            continue
        if folder.is_symlink() or not folder.is_dir() or not _dead_runs_folder(folder):
            continue
        if any(_inside(path, folder) for path in keep):
            continue
        previous = folder / "previous"
        if name.endswith(".old") and previous.is_dir():
            if not os.path.lexists(target):
                os.replace(previous, target)
            elif not ownership.remove_owned(previous):
                continue
        log.info("removing %s, left by a run that ended without cleaning up", folder)
        shutil.rmtree(folder, ignore_errors=True)


def _staging_name(name: str, target: Path) -> bool:
    """Whether ``name`` is that of a staging folder of ``target`` (``.T.XXXX.partial`` or
    ``.old``, the random part free of dots): not one of a sibling whose name starts as
    ``target``'s does (``.T.x.XXXX.old`` belongs to ``T.x``, and its previous outputs must go
    back there, not to ``T``)."""
    prefix = f".{target.name}."
    for suffix in (".partial", ".old"):
        if name.startswith(prefix) and name.endswith(suffix):
            middle = name[len(prefix) : -len(suffix)]
            return bool(middle) and "." not in middle
    return False


def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or lies under it (symbolic links resolved)."""
    return path.resolve().is_relative_to(folder.resolve())


def _refuse_inputs_inside(target: Path, inputs: list[tuple[str, Path]]) -> None:
    """Refuse a run whose output folder holds one of its inputs (or the current folder): the
    run replaces the folder whole, so the input would be deleted (and the next run would not
    find it; the user's shell would sit in a deleted folder)."""
    for named, path in inputs:
        if _inside(path, target):
            raise HievalError(
                f"{named} lies inside the output folder {target}, which a run replaces whole; "
                "choose an --out that does not hold it"
            )


def _check_replaceable(target: Path) -> None:
    """Refuse ``target`` unless it is missing, or a folder of hieval's own unchanged files."""
    if os.path.islink(target):
        raise HievalError(
            f"output folder {target} is a symbolic link; give the folder it points to as --out"
        )
    if not target.exists():
        return
    if not target.is_dir():
        raise HievalError(f"output folder {target} is an existing file; choose another --out")
    problem = ownership.refusal(target, ownership.foreign_entries(target), what="output folder")
    if problem:
        raise HievalError(problem)


#: Each staging folder being written (by :func:`staged_folder`) and the folder it becomes.
_STAGED: dict[Path, Path] = {}


def final_path(path: str | os.PathLike) -> Path:
    """Where ``path`` will be once its staging folder replaces the output folder; any other
    path as it is.

    Why: a log line or message names a file the user can open; the hidden staging folder
    (``.OUT.XXXX.partial``) is gone by the time they read it.
    """
    path = Path(path)
    for staging, target in _STAGED.items():
        if _inside(path, staging):
            return target / path.resolve().relative_to(staging.resolve())
    return path


#: What to do about a failed write, by the OS's error number.
_ADVICE = {
    errno.ENAMETOOLONG: "the name is too long for the file system: use a shorter model name "
    "or path",
    errno.ENOSPC: "free some space there, or choose another place",
    errno.EDQUOT: "free some space there, or choose another place",
    errno.EACCES: "choose a place you can write to",
    errno.EROFS: "choose a place you can write to",
    errno.ENOTDIR: "a part of that path is a file, not a folder: choose another place",
    errno.ENOENT: "a folder of that path does not exist: create it or choose another place",
}


def _write_failure(
    exc: Exception, *, staging: Path, target: Path, places: list[tuple[str, Path]]
) -> HievalError:
    """One line naming the path whose write failed (a file of the run shown at its final
    place under ``target``, not in the staging folder; else the option whose folder it is
    in, from ``places``, e.g. ``--cache``), the OS's reason and what to do."""
    failed = _failed_path(exc)
    place = f"the outputs to {target}"
    if failed is not None and _inside(failed, staging):
        place = str(final_path(failed))
    elif failed is not None:
        named = [(named, path) for named, path in places if _inside(failed, path)]
        # the innermost place: a --cache inside the --gold file's folder is the --cache
        named.sort(key=lambda pair: len(pair[1].resolve().parts), reverse=True)
        place = f"{failed}" + (f", in {named[0][0]}," if named else "")
    advice = _ADVICE.get(_errno(exc), "fix the cause and rerun")
    return HievalError(
        f"cannot write {place} ({_reason(exc)}); nothing was written to {target}: {advice}"
    )


def _failed_path(exc: Exception) -> Path | None:
    """The path an OS or DuckDB error is about, when it names one; a temporary file of
    :func:`atomic_path` (``.NAME.XXXX.tmp``) is shown as the file it was to become."""
    name = getattr(exc, "filename", None)
    if name is None:
        quoted = re.search(r'"([^"]+)"', str(exc))  # DuckDB quotes the path it was given
        name = quoted.group(1) if quoted else None
    if name is None:
        return None
    path = Path(os.fsdecode(name))
    temporary = re.fullmatch(r"(?:tmp_)?\.(.+)\.[^.]+\.tmp", path.name)  # DuckDB: tmp_
    return path.with_name(temporary.group(1)) if temporary else path


def _plain(target: Path) -> Path:
    """``target`` with a name of its own (``.`` and ``..`` are named by their absolute path,
    since the staging folder goes beside it), and without a ``..`` after a folder that does
    not exist (``new/../eval``): the OS cannot resolve that, only its lexical meaning is left,
    and creating ``new/`` just to step out of it would leave a folder behind."""
    if target.name in ("", ".."):
        return Path(os.path.abspath(target))
    if ".." in target.parts and not os.path.isdir(target.absolute().parent):
        return Path(os.path.normpath(target))
    return target


@contextlib.contextmanager
def staged_folder(
    target: str | os.PathLike, *, inputs: list[tuple[str, Path]] = ()
) -> Iterator[Path]:
    """Yield an empty staging folder beside ``target``; on success it replaces ``target``.

    The output folder of a run then holds that run's outputs only (nothing of an earlier run
    with other models survives), and a failure at any point — a bad input, a full disk, an
    interrupt — leaves ``target`` as it was and no staging folder behind. What hieval replaces
    or deletes it has proved it wrote (:mod:`hieval.ownership`), checked before the run and
    again at the swap: a user's file anywhere inside ``target``, even one added during the
    run, is refused, never removed; so is a ``target`` holding one of the run's ``inputs``
    (pairs of how the message names it, e.g. ``--gold gold.csv``, and its path). Staging
    folders left by dead runs beside ``target`` are removed. OS errors become one
    :class:`HievalError` naming the path that failed.
    """
    target = _plain(Path(target))
    inputs = list(inputs)
    _refuse_inputs_inside(target, [*inputs, ("the current folder", Path.cwd())])
    parent = target.absolute().parent
    try:
        _remove_stale_staging(target, keep=[path for _, path in inputs])
    except OSError as exc:
        raise HievalError(
            f"cannot clean up {_failed_path(exc) or parent}, left by an earlier run beside "
            f"{target} ({_reason(exc)}); move it away yourself and rerun"
        ) from None
    try:
        _check_replaceable(target)
        parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=parent))
    except OSError as exc:  # e.g. a name too long for the file system
        raise HievalError(_unwritable_parent(target, exc)) from None
    _STAGED[staging] = target
    try:
        _mark(staging)
        _honour_umask(staging, 0o777)
        yield staging
        # The marker stays until the rename (see _publish): a run killed before it leaves a
        # staging folder the next run can prove is a dead run's.
        ownership.write_manifest(staging, leave_out=(STAGING_MARKER,))
        _swap(staging, target, parent=parent)
    except _write_errors() as exc:
        raise _write_failure(exc, staging=staging, target=target, places=inputs) from None
    finally:
        _STAGED.pop(staging, None)
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _unwritable_parent(target: Path, exc: OSError) -> str:
    """Why the folder that holds ``target`` cannot be made or written: a file where a folder
    of the path should be is named as such (``mkdir`` reports it as ``File exists``)."""
    for part in (target.absolute(), *target.absolute().parents):
        if os.path.exists(part) and not os.path.isdir(part):  # False, never raises
            return (
                f"cannot write the output folder {target}: {part} is a file, not a folder; "
                "choose another --out"
            )
    advice = _ADVICE.get(_errno(exc), "choose an --out in a folder you can write to")
    return f"cannot write the output folder {target} ({_reason(exc)}): {advice}"


def _publish(staging: Path, target: Path) -> None:
    """Rename the finished ``staging`` folder to ``target``, its marker removed first (the
    published folder holds what its manifest lists, nothing more)."""
    (staging / STAGING_MARKER).unlink(missing_ok=True)
    os.replace(staging, target)


def _swap(staging: Path, target: Path, *, parent: Path) -> None:
    """Move ``staging`` into place, moving the previous ``target`` aside first.

    The previous folder is checked again (a file may have been added during the run) both
    before and after it is moved aside; a foreign file puts it back and refuses. If the swap
    fails half-way, the previous outputs go back to ``target``; if even that fails, the
    message says where they are, and they are not deleted.
    """
    _check_replaceable(target)
    if not target.exists():
        _publish(staging, target)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=parent))
    previous = old / "previous"
    try:
        _mark(old)
        os.replace(target, previous)
    except BaseException:
        shutil.rmtree(old, ignore_errors=True)  # it holds nothing but the marker
        raise
    try:
        problem = ownership.refusal(
            previous, ownership.foreign_entries(previous), what="output folder", shown_as=target
        )
        if problem:
            raise HievalError(problem)
        _publish(staging, target)
    except BaseException as failure:
        try:
            os.replace(previous, target)
        except OSError as exc:
            cause = f" ({_reason(failure)})" if isinstance(failure, _write_errors()) else ""
            raise HievalError(
                f"cannot write the outputs to {target}{cause}, nor put the previous outputs "
                f"back ({_reason(exc)}); they are in {previous}: move them back yourself"
            ) from None
        shutil.rmtree(old, ignore_errors=True)
        raise
    if ownership.remove_owned(previous):
        shutil.rmtree(old, ignore_errors=True)
