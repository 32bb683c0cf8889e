"""Text label files read line by line, for what DuckDB's CSV reader cannot say well.

DuckDB reads CSV fast but its errors lose the reason ("CSV Error on Line: 1" for a line that is
too long, no "not UTF-8" once shortened to one line), and it numbers records, not lines: a blank
line or a quoted field spanning lines shifts every later row. So the fast path stays in DuckDB,
and only when something must be reported is the file scanned here, splitting records exactly as
DuckDB does (RFC 4180 quoting with ``"``, blank lines skipped), to name the physical line.
Valid files pay their header and the size of their last line (:func:`check_last_record`, for
the one over-long record DuckDB drops instead of refusing). Gzip files are read through
``gzip``, as DuckDB reads them; a damaged one is said to be damaged.

Every text file is UTF-8; a leading byte-order mark (as Excel and Windows tools write) is
dropped wherever a label file is read, so that it never sticks to the first column name or
document id.
"""

from __future__ import annotations

import csv
import gzip
import sys
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from hieval.errors import InputError

UTF8_BOM = b"\xef\xbb\xbf"
MB = 1_000_000


def not_utf8(path: Path, name: str, line: int, raw: bytes, exc: UnicodeDecodeError) -> str:
    """The message for a line that is not UTF-8: file, line, column and the offending byte."""
    column = len(raw[: exc.start].decode("utf-8", errors="replace")) + 1
    return (
        f"{name}: {path}, line {line}: byte 0x{raw[exc.start]:02x} at column {column} is not "
        "UTF-8; hieval reads text files as UTF-8: re-save the file as UTF-8 "
        "(e.g. iconv -f latin1 -t utf-8)"
    )


def unreadable(path: Path, name: str, exc: OSError | ValueError) -> InputError:
    """The message for a file the system refuses to open (permissions, a vanished file, a name
    it cannot look up)."""
    return InputError(
        f"{name}: cannot read {path} ({getattr(exc, 'strerror', None) or exc}); check the path "
        "and the file's "
        "permissions"
    )


def is_gzip(path: Path) -> bool:
    """Whether ``path`` is read through gzip (DuckDB decompresses ``.gz`` by its name too)."""
    return path.suffix.lower() == ".gz"


def _open(path: Path, name: str):
    """The file's bytes, decompressed when it is gzip, so that lines are the lines DuckDB
    reads."""
    try:
        return gzip.open(path, "rb") if is_gzip(path) else path.open("rb")
    except OSError as exc:
        raise unreadable(path, name, exc) from None


def corrupt_gzip(path: Path, name: str, exc: Exception) -> InputError:
    """The message for a gzip file that cannot be decompressed (truncated or damaged)."""
    return InputError(
        f"{name}: {path} is a corrupt or truncated gzip file ({exc}); copy or download it again "
        "whole (gzip -t checks it)"
    )


@contextmanager
def _gzip_errors(path: Path, name: str) -> Iterator[None]:
    """Decompression errors raised while a gzip file is read, as the user's message."""
    try:
        yield
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise corrupt_gzip(path, name, exc) from None


def decoded_lines(path: Path, name: str) -> Iterator[tuple[int, bytes, str]]:
    """Each physical line as ``(number, raw bytes, text)``, numbered from 1, without the BOM.

    A line that is not UTF-8 is an error naming the file, the line and the byte.
    """
    with _open(path, name) as handle, _gzip_errors(path, name):
        for number, raw in enumerate(handle, start=1):
            if number == 1 and raw.startswith(UTF8_BOM):
                raw = raw[len(UTF8_BOM) :]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(not_utf8(path, name, number, raw, exc)) from None
            yield number, raw, text


def decode_whole(path: Path, name: str) -> str:
    """A small file's whole text (BOM dropped); not UTF-8 is an error naming the line."""
    with _open(path, name) as handle, _gzip_errors(path, name):
        data = handle.read()
    data = data[len(UTF8_BOM) :] if data.startswith(UTF8_BOM) else data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = data.rfind(b"\n", 0, exc.start) + 1
        end = data.find(b"\n", exc.start)
        line = data[start : None if end < 0 else end]
        shifted = UnicodeDecodeError(exc.encoding, line, exc.start - start, exc.end - start, "")
        number = data.count(b"\n", 0, exc.start) + 1
        raise InputError(not_utf8(path, name, number, line, shifted)) from None


@contextmanager
def _unlimited_fields() -> Iterator[None]:
    """Python's csv module refuses fields over 128 kB by default; notes are longer."""
    old = csv.field_size_limit(sys.maxsize)
    try:
        yield
    finally:
        csv.field_size_limit(old)


@dataclass(frozen=True)
class Record:
    """One CSV record: the line it starts on, its size in bytes and its fields."""

    line: int
    size: int
    fields: list[str]


def records(path: Path, name: str, separator: str) -> Iterator[Record]:
    """The non-blank records of a CSV/TSV file, split as DuckDB splits them."""
    state = {"line": 0, "size": 0}

    def feed() -> Iterator[str]:
        for number, raw, text in decoded_lines(path, name):
            state["line"] = number
            state["size"] += len(raw)
            yield text

    with _unlimited_fields():
        reader = csv.reader(feed(), delimiter=separator, quotechar='"', doublequote=True)
        start = 1
        for fields in reader:
            if fields:  # DuckDB skips blank lines
                yield Record(line=start, size=state["size"], fields=fields)
            start, state["size"] = state["line"] + 1, 0


def header(path: Path, name: str, separator: str) -> list[str]:
    """The first record's fields (the header), BOM dropped; empty for a file of blank lines."""
    return next((r.fields for r in records(path, name, separator)), [])


def record_lines(path: Path, name: str, separator: str, rows: Iterable[int]) -> dict[int, int]:
    """The line on which each data record starts; records are numbered from 1 after the header
    and blank lines are not counted (as DuckDB's ``row_number()`` over the file counts them)."""
    wanted = set(rows)
    found: dict[int, int] = {}
    if not wanted:
        return found
    for index, record in enumerate(records(path, name, separator)):
        if index in wanted:
            found[index] = record.line
            if len(found) == len(wanted):
                break
    return found


def diagnose(path: Path, name: str, separator: str, max_line_size: int, what: str) -> None:
    """Raise the first problem in a CSV/TSV file that its reader refused, in plain words.

    ``what`` says what a record of this format holds, for the message on a too-long line.
    Returns without raising when the scan finds nothing (the caller then reports the reader's
    own message).
    """
    width = None
    for record in records(path, name, separator):
        if record.size > max_line_size:
            raise _too_long(path, name, f"line {record.line}", record.size, max_line_size, what)
        if width is None:
            width = len(record.fields)
        elif len(record.fields) != width:
            sep = {"\t": "tab", ",": "comma"}.get(separator, separator)
            raise InputError(
                f"{name}: {path}, line {record.line}: the row has {len(record.fields)} fields "
                f"but the header has {width}; quote fields that contain a {sep}, and give every "
                "row the header's columns"
            )


def _too_long(path: Path, name: str, where: str, size: int, limit: int, what: str) -> InputError:
    return InputError(
        f"{name}: {path}, {where}: the record is {size / MB:.1f} MB, more than the "
        f"{limit / MB:.0f} MB hieval reads per record of {what}; check that this is the right "
        "file and that its quotes are balanced"
    )


_BLANK = b" \t\r\n"
_BLOCK = 1 << 20


def check_gzip(path: Path, name: str) -> None:
    """Decompress a gzip file to its end: a corrupt or truncated one is refused as such."""
    with _open(path, name) as handle, _gzip_errors(path, name):
        while handle.read(_BLOCK):
            pass


def last_line_size(path: Path, name: str, limit: int) -> int:
    """The size in bytes of the file's last non-blank line (of its decompressed text when it
    is gzip); past ``limit`` a plain file is read no further, and a larger bound is returned.

    A plain file is read backwards from its end, so this costs a block, not the file; a gzip
    file can only be decompressed from its start.
    """
    with _open(path, name) as handle, _gzip_errors(path, name):
        if is_gzip(path):
            return _last_line_streamed(handle)
        return _last_line_backwards(handle, path.stat().st_size, limit)


def _last_line_backwards(handle, size: int, limit: int) -> int:
    end = None  # the offset just past the last non-blank byte
    position = size
    while position > 0:
        start = max(0, position - _BLOCK)
        handle.seek(start)
        block = handle.read(position - start)
        if end is None:
            block = block.rstrip(_BLANK)
            if block:
                end = start + len(block)
        if end is not None:
            newline = block.rfind(b"\n")
            if newline >= 0:
                return end - (start + newline + 1)
            if end - start > limit:
                return end - start
        position = start
    return end or 0


def _last_line_streamed(handle) -> int:
    offset = start = end = 0
    last_newline = -1
    while block := handle.read(_BLOCK):
        content = block.rstrip(_BLANK)
        if content:
            end = offset + len(content)
            newline = content.rfind(b"\n")
            start = offset + newline + 1 if newline >= 0 else last_newline + 1
        newline = block.rfind(b"\n")
        if newline >= 0:
            last_newline = offset + newline
        offset += len(block)
    return end - start


def check_last_record(path: Path, name: str, separator: str, max_line_size: int, what: str) -> None:
    """Refuse a file whose last line is longer than ``max_line_size``.

    Why: DuckDB's CSV reader refuses an over-long record anywhere but at the end, where a line
    longer than its read buffer (32 MB by default) is dropped without a word, and a document
    with it. Every other record is left to DuckDB, so a valid file pays a block read.
    """
    size = last_line_size(path, name, max_line_size)
    if size <= max_line_size:
        return
    diagnose(path, name, separator, max_line_size, what)  # names the line
    raise _too_long(path, name, "last line", size, max_line_size, what)
