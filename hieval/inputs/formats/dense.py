"""Dense arrays: a documents x codes matrix in ``.npy``/``.npz`` (scores, or 0/1 decisions),
with the code list and the document list as text files (one entry per line).

The lists are named in the model sheet (``code_list``, ``doc_list``) or sit beside the matrix as
``NAME.codes.txt`` and ``NAME.docs.txt``. Arrays are loaded with ``allow_pickle=False``.
"""

from __future__ import annotations

import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from hieval.atomic import atomic_path
from hieval.errors import InputError, preview, preview_value
from hieval.hints import setting
from hieval.inputs.formats import text


def _read_list(path: Path, name: str, what: str) -> tuple[list[str], list[int]]:
    """The entries of a code or document list, one per non-blank line.

    An entry listed twice would name two columns (or rows) of the matrix with one id, and the
    two would be merged without a word: refused, naming both lines. Returns the entries and the
    line each is on.
    """
    if not path.is_file():
        raise InputError(
            f"{name}: the {what} list {path} does not exist; give it with "
            f"{setting('code_list' if what == 'code' else 'doc_list', 'PATH', file=name)} "
            "or place it beside the matrix"
        )
    entries: list[str] = []
    first_line: dict[str, int] = {}
    for number, line in enumerate(text.decode_whole(path, name).splitlines(), start=1):
        entry = line.strip()
        if not entry:
            continue
        if entry in first_line:
            raise InputError(
                f"{name}: {path}, line {number}: {what} {preview_value(entry)} is listed again "
                f"(first on line {first_line[entry]}); each row and column of the matrix needs "
                f"its own {what}: remove the repeat or fix the list"
            )
        first_line[entry] = number
        entries.append(entry)
    return entries, list(first_line.values())


#: What NumPy raises for a truncated or damaged ``.npy`` or ``.npz`` (a zip archive whose
#: members are decompressed on access).
_DAMAGED = (EOFError, zipfile.BadZipFile, zlib.error)


#: The arrays ``scipy.sparse.save_npz`` writes.
_SPARSE = {"data", "indices", "indptr", "format", "shape"}


def _damaged(path: Path, name: str, exc: Exception) -> InputError:
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return InputError(
        f"{name}: {path} is a truncated or damaged NumPy file ({reason}); copy or save it again "
        "whole"
    )


def _matrix(path: Path, name: str) -> np.ndarray:
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.lib.npyio.NpzFile):
            keys = list(loaded.keys())
            if set(keys) >= _SPARSE and "scores" not in keys:
                raise InputError(
                    f"{name}: {path} is a SciPy sparse matrix (scipy.sparse.save_npz); hieval "
                    "reads dense matrices: save it with numpy.save(path, matrix.toarray()), or "
                    "write its non-zero cells in long format (doc_id,code,score)"
                )
            key = "scores" if "scores" in keys else (keys[0] if len(keys) == 1 else None)
            if key is None:
                raise InputError(
                    f"{name}: {path} holds arrays {preview(keys)}; name the matrix 'scores'"
                )
            loaded = loaded[key]
    except _DAMAGED as exc:
        raise _damaged(path, name, exc) from None
    except ValueError as exc:
        if "not fully written" in str(exc) or str(exc).startswith("EOF"):
            raise _damaged(path, name, exc) from None  # NumPy's words for a short file
        raise InputError(
            f"{name}: {path} holds Python objects or is not a NumPy file "
            f"({str(exc).split('. ')[0]}); hieval never unpickles: save a numeric array"
        ) from None
    if loaded.ndim != 2 or not (np.issubdtype(loaded.dtype, np.number) or loaded.dtype == bool):
        raise InputError(
            f"{name}: {path} must be a 2-D numeric matrix (documents x codes), got shape "
            f"{loaded.shape} of {loaded.dtype}"
        )
    return loaded


def _check_decisions(
    matrix: np.ndarray, path: Path, name: str, docs: list[str], codes: list[str]
) -> None:
    """A gold matrix holds 0/1 decisions; any other value (0.5, 2, NaN) would be counted as a
    label by "non-zero", so it is refused, naming the document (row) and the code (column)."""
    if matrix.dtype == bool:
        return
    bad = ~np.isin(matrix, (0, 1))  # NaN is never in (0, 1)
    if bad.any():
        row, col = (int(i) for i in np.argwhere(bad)[0])
        raise InputError(
            f"{name}: {path}, row {row + 1} (document {preview_value(docs[row])}), column "
            f"{col + 1} (code {preview_value(codes[col])}): value {matrix[row, col].item()!r} is "
            f"not 0 or 1; a gold matrix holds 0/1 decisions ({int(bad.sum())} cell(s) are neither)"
        )


def _lists(
    matrix: np.ndarray, path: Path, name: str, extras, *, shape: tuple[int, ...] | None = None
) -> tuple[list[str], list[str], list[int], Path]:
    """The matrix's document and code lists (docs, codes, each code's line, the code list's
    path), each as long as its axis (of ``shape``, when given: a matrix not read yet)."""
    shape = shape or matrix.shape
    stem = path.with_suffix("")
    code_list = Path(extras.code_list or f"{stem}.codes.txt")
    doc_list = Path(extras.doc_list or f"{stem}.docs.txt")
    codes, code_lines = _read_list(code_list, name, "code")
    docs, _lines = _read_list(doc_list, name, "document")
    for axis, (entries, listed, what) in enumerate(
        ((docs, doc_list, "document"), (codes, code_list, "code"))
    ):
        if shape[axis] != len(entries):
            unit = ("rows", "columns")[axis]
            raise InputError(
                f"{name}: {path} is {shape[0]} x {shape[1]} (documents x codes) "
                f"but the {what} list {listed} holds {len(entries)} {what}s for its "
                f"{shape[axis]} {unit}; give one {what} per {unit[:-1]}, in order"
            )
    return docs, codes, code_lines, code_list


@dataclass(frozen=True)
class ScoreMatrix:
    """A floating ``.npy`` of scores, memory mapped, with its lists (checked against its
    shape): what normalisation decides block by block (:mod:`hieval.inputs.dense_decisions`).
    ``unscored``: its cells without a score (``-inf``, a long file's pairs it does not score;
    :mod:`hieval.inputs.dense_long`)."""

    matrix: np.ndarray
    docs: list[str]
    codes: list[str]
    code_lines: list[int]
    code_list: Path
    unscored: int = 0


def score_matrix(path: Path, name: str, extras) -> ScoreMatrix | None:
    """The score matrix of ``path`` read lazily, or None where it must be read whole: an
    ``.npz`` (compressed members cannot be mapped) or integer or boolean cells (decisions, or
    0/1 integers, read as today)."""
    if path.suffix.lower() != ".npy":
        return None
    try:
        matrix = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, *_DAMAGED):
        return None  # read whole by load(), which names what is wrong
    if matrix.ndim != 2 or not np.issubdtype(matrix.dtype, np.floating):
        return None
    docs, codes, code_lines, code_list = _lists(matrix, path, name, extras)
    return ScoreMatrix(matrix, docs, codes, code_lines, code_list)


#: Cells of an ``.npz`` member decompressed and copied at once (64 MB of float64): the copy's
#: memory does not grow with the matrix.
COPY_CELLS = 1 << 23


def npz_score_matrix(
    path: Path, name: str, extras, *, out: Path, cells: int | None = None
) -> ScoreMatrix | None:
    """The floating matrix of the ``.npz`` ``path`` (its ``scores``, or its only array)
    decompressed, ``cells`` at a time (:data:`COPY_CELLS` unless given), into the ``.npy``
    ``out`` (in the member's order, C or Fortran: the same bytes) and memory mapped, to be read
    by blocks like an ``.npy``; None where it is read whole (no such member, a sparse matrix,
    integer or boolean cells, a damaged archive: the long path reads it and says what is
    wrong). The lists are read (and checked against its shape) first."""
    if path.suffix.lower() != ".npz":
        return None
    try:
        with zipfile.ZipFile(path) as archive, archive.open(_npz_member(archive)) as handle:
            shape, fortran, dtype = _npy_header(handle)
            if len(shape) != 2 or not np.issubdtype(dtype, np.floating):
                return None
            docs, codes, code_lines, code_list = _lists(np.empty((0, 0)), path, name, extras,
                                                        shape=shape)  # fmt: skip
            _copy_cells(handle, out, shape=shape, dtype=dtype, fortran=fortran,
                        cells=cells or COPY_CELLS)  # fmt: skip
    except (KeyError, ValueError, OSError, *_DAMAGED):
        out.unlink(missing_ok=True)
        return None
    matrix = np.load(out, mmap_mode="r", allow_pickle=False)
    return ScoreMatrix(matrix, docs, codes, code_lines, code_list)


def _npz_member(archive: zipfile.ZipFile) -> str:
    """The member :func:`_matrix` reads (``scores``, or the only array); KeyError otherwise."""
    names = [n for n in archive.namelist() if n.endswith(".npy")]
    if "scores.npy" in names:
        return "scores.npy"
    if len(names) == 1:
        return names[0]
    raise KeyError("no single matrix")


def _npy_header(handle) -> tuple[tuple[int, ...], bool, np.dtype]:
    """Shape, Fortran order and dtype of the ``.npy`` stream ``handle``, past its header."""
    major, _minor = np.lib.format.read_magic(handle)
    formats = np.lib.format
    read = formats.read_array_header_1_0 if major == 1 else formats.read_array_header_2_0
    shape, fortran, dtype = read(handle)
    return shape, fortran, dtype


def _copy_cells(
    handle, out: Path, *, shape: tuple[int, ...], dtype: np.dtype, fortran: bool, cells: int
) -> None:
    """Copy the cells that follow ``handle``'s header, in their stored order, into the
    ``.npy`` ``out`` of the same layout, ``cells`` at a time; a short stream (a truncated
    member) raises EOFError."""
    with atomic_path(out) as tmp:
        copy = np.lib.format.open_memmap(
            tmp, mode="w+", dtype=dtype, shape=shape, fortran_order=fortran
        )
        flat = copy.reshape(-1, order="F" if fortran else "C")  # a view: the stored order
        for start in range(0, flat.size, max(1, cells)):
            count = min(max(1, cells), flat.size - start)
            data = handle.read(count * dtype.itemsize)
            if len(data) != count * dtype.itemsize:
                raise EOFError("the member ends early")
            flat[start : start + count] = np.frombuffer(data, dtype=dtype)
        copy.flush()
        del flat, copy


def register_lists(con: duckdb.DuckDBPyConnection, matrix: ScoreMatrix) -> None:
    """The tables :func:`code_rows` and :func:`code_places` read, for a matrix decided by
    blocks."""
    con.register(
        "dense_codes",
        pa.table(
            {
                "ci": np.arange(len(matrix.codes)),
                "code": matrix.codes,
                "line": matrix.code_lines,
            }
        ),
    )
    con.register("dense_code_list", pa.table({"path": [str(matrix.code_list)]}))


def load(con: duckdb.DuckDBPyConnection, path: Path, name: str, role: str, extras) -> None:
    """Register ``src``: one row per non-zero decision, or per score, plus each document."""
    matrix = _matrix(path, name)
    docs, codes, code_lines, code_list = _lists(matrix, path, name, extras)
    if role == "gold":
        _check_decisions(matrix, path, name, docs, codes)
    # A gold is decisions whatever its dtype (float 0/1 is common); predictions are decisions
    # only when stored as bool or 0/1 integers, and scores otherwise.
    binary = (
        role == "gold"
        or matrix.dtype == bool
        or (np.issubdtype(matrix.dtype, np.integer) and np.isin(matrix, (0, 1)).all())
    )
    con.register("dense_docs", pa.table({"di": np.arange(len(docs)), "doc_id": docs}))
    con.register(
        "dense_codes", pa.table({"ci": np.arange(len(codes)), "code": codes, "line": code_lines})
    )
    con.register("dense_code_list", pa.table({"path": [str(code_list)]}))
    if binary:
        di, ci = np.nonzero(matrix)
        cells = pa.table({"di": di, "ci": ci})
        score = "NULL::VARCHAR"
    else:
        di, ci = np.indices(matrix.shape).reshape(2, -1)
        cells = pa.table({"di": di, "ci": ci, "value": matrix.reshape(-1).astype(np.float64)})
        score = "CAST(value AS VARCHAR)"
    con.register("dense_cells", cells)
    extra = "" if binary else ", score"
    con.sql(f"""
        SELECT d.doc_id, c.code{extra}, d.di + 1 AS _line
        FROM (SELECT di, ci, {score} AS score FROM dense_cells) x
        JOIN dense_docs d USING (di) JOIN dense_codes c USING (ci)
        UNION ALL
        SELECT doc_id, NULL{", NULL" if not binary else ""}, di + 1 FROM dense_docs
    """).create_view("src", replace=True)


def code_rows(con: duckdb.DuckDBPyConnection):
    """Each code with the line of the code list it is on, as ``code, code_type, line``: a bad
    code is fixed in the list, so messages about codes name the list's line, not the first
    matrix row (a document) that happens to hold the code."""
    return con.sql("SELECT code, NULL::VARCHAR AS code_type, line FROM dense_codes").pl()


def code_places(con: duckdb.DuckDBPyConnection, lines) -> dict[int, str]:
    """The code list's ``path, line N`` of each of ``lines``."""
    ((code_list,),) = con.execute("SELECT path FROM dense_code_list").fetchall()
    return {line: f"{code_list}, line {line}" for line in lines}
