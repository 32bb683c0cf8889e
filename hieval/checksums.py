"""The sha256 of a file: what every number hieval reports is traced to, and what proves a
cache or an output is unchanged since hieval wrote it.

One function, because the inputs' records, the hierarchy caches and the report folder's
manifest must agree on what a file's checksum is.
"""

from __future__ import annotations

import hashlib
import os


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks (inputs may be gigabytes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
