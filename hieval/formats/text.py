"""Text label files read line by line, for what DuckDB's CSV reader cannot say well.

DuckDB reads CSV fast but its errors lose the reason ("CSV Error on Line: 1" for a line that is
too long, no "not UTF-8" once shortened to one line), and it numbers records, not lines: a blank
line or a quoted field spanning lines shifts every later row. So the fast path stays in DuckDB,
and only when something must be reported is the file scanned here, splitting records exactly as
DuckDB does (RFC 4180 quoting with ``"``, blank lines skipped), to name the physical line.
Valid files pay nothing beyond reading their header.

Every text file is UTF-8; a leading byte-order mark (as Excel and Windows tools write) is
dropped wherever a label file is read, so that it never sticks to the first column name or
document id.
"""

from __future__ import annotations

import csv
import sys
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


def unreadable(path: Path, name: str, exc: OSError) -> InputError:
    """The message for a file the system refuses to open (permissions, a vanished file)."""
    return InputError(
        f"{name}: cannot read {path} ({exc.strerror or exc}); check the path and the file's "
        "permissions"
    )


def _open(path: Path, name: str):
    try:
        return path.open("rb")
    except OSError as exc:
        raise unreadable(path, name, exc) from None


def decoded_lines(path: Path, name: str) -> Iterator[tuple[int, bytes, str]]:
    """Each physical line as ``(number, raw bytes, text)``, numbered from 1, without the BOM.

    A line that is not UTF-8 is an error naming the file, the line and the byte.
    """
    with _open(path, name) as handle:
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
    with _open(path, name) as handle:
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
            raise InputError(
                f"{name}: {path}, line {record.line}: the record is {record.size / MB:.1f} MB, "
                f"more than the {max_line_size / MB:.0f} MB hieval reads per record of {what}; "
                "check that this is the right file and that its quotes are balanced"
            )
        if width is None:
            width = len(record.fields)
        elif len(record.fields) != width:
            sep = {"\t": "tab", ",": "comma"}.get(separator, separator)
            raise InputError(
                f"{name}: {path}, line {record.line}: the row has {len(record.fields)} fields "
                f"but the header has {width}; quote fields that contain a {sep}, and give every "
                "row the header's columns"
            )
