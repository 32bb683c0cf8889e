"""The codes of a normalised prediction file that are counted, never placed: what a generative
coder wrote that the release lacks (``unknown_codes: count``) or that is no code at all
(``malformed_codes: count``).

Normalisation lists them in the file's own Parquet metadata, so that every later step that
places codes missing from the hierarchy by their syntax (counts, ICM weights, the bootstrap, the
error analysis) reads the same list from the file it reads anyway, with no setting to pass along
and none to forget: such a code reaches no node above the leaf, so it is a false positive at the
leaf level and nowhere else. A file read under the other policies has no such key.
"""

from __future__ import annotations

import json
from pathlib import Path

#: The Parquet metadata key: a JSON object mapping each counted code to its status.
COUNTED_CODES_KEY = b"hieval.counted_codes"
#: A counted code's status (``errors.parquet``'s ``code_status``): no code at all, or a code
#: the release lacks (not placed: placed ones are ``placed``).
INVALID, UNKNOWN = "invalid", "unknown"


def mark_counted(path: str | Path, statuses: dict[str, str]) -> None:
    """Rewrite the normalised file at ``path`` with its counted codes (code -> status) in its
    metadata (such files are a generative coder's sets of codes, small; a file with no counted
    code is never rewritten)."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    metadata = dict(table.schema.metadata or {})
    metadata[COUNTED_CODES_KEY] = json.dumps(statuses, sort_keys=True).encode()
    pq.write_table(table.replace_schema_metadata(metadata), path, compression="zstd")


def counted_statuses(path: str | Path | list[Path] | None) -> dict[str, str]:
    """The counted codes of the normalised label file at ``path`` with their status (empty when
    there are none, or when ``path`` is not a file: a frame handed over in memory); of a table
    in parts (a list of files), every part's, sorted by code, as pooling the parts lists them."""
    if isinstance(path, list):
        statuses: dict[str, str] = {}
        for part in path:
            statuses |= counted_statuses(part)
        return dict(sorted(statuses.items()))
    if path is None or not isinstance(path, str | Path) or not Path(path).is_file():
        return {}
    import pyarrow.parquet as pq

    metadata = pq.read_schema(path).metadata or {}
    return json.loads(metadata.get(COUNTED_CODES_KEY, b"{}"))


def counted_codes(path: str | Path | None) -> frozenset[str]:
    """The counted codes of the normalised label file at ``path`` (see :func:`counted_statuses`)."""
    return frozenset(counted_statuses(path))
