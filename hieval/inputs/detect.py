"""A label file looked at once: the format it is read as and its sha256, each found on first
use and kept, whichever way of normalising (:mod:`hieval.inputs.parquet_fast`, then
:mod:`hieval.inputs.normalize`) asks.

Why: both ways need the format (a Parquet file may be a wide table; a CSV file may be a
MIMIC-IV table, kept at the evaluation's ICD version) and the record's sha256. Asked apart,
the header of a file was read by each detector twice and a file the fast path handed back after
hashing it was hashed again (hashing reads the whole file). One value, handed on, does each once.
Each is worked out when first asked, not up front, so that the order of checks and messages is
what it was: a Parquet file's format costs one schema read, a CSV file's is only looked at by the
general path.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from hieval.checksums import sha256_file
from hieval.codesystem import CodeSystem
from hieval.errors import InputError
from hieval.inputs.formats import detect, mimic4

#: The MIMIC-IV formats and the ICD version each keeps.
MIMIC4_FORMATS = {f"mimic4_icd{version}": version for version in mimic4.VERSIONS}


@dataclass(eq=False)
class LabelFile:
    """``path`` (called ``name`` in messages), to be read as ``requested`` (a format name or
    ``auto``) in an evaluation whose code system is ``system``."""

    path: Path
    name: str
    requested: str
    system: CodeSystem

    @cached_property
    def format(self) -> str:
        """The format the file is read as: the requested one, or with ``auto`` the one the file
        says it is (:func:`hieval.inputs.formats.detect`); a MIMIC-IV table of an ICD evaluation
        keeps the rows of that evaluation's version.

        A MIMIC-IV format naming the other ICD version is refused: its codes could never match
        the tree. An unknown format name is returned as is, for the reader to refuse.
        """
        version = MIMIC4_FORMATS.get(self.requested)
        ours = self.system.mimic4_version
        if version is not None and ours not in (None, version):
            raise InputError(
                f"{self.name}: {self.path} is read as {self.requested}, which keeps the "
                f"ICD-{version} rows, but this evaluation's code system is {self.system.name} "
                f"({self.system.title}); use the format mimic4_icd{ours}, or an ICD-{version} "
                "hierarchy"
            )
        if self.requested != "auto":
            return self.requested
        return detect(self.path, self.name, mimic4_version=ours)

    @cached_property
    def sha256(self) -> str:
        """The file's sha256, for its input record."""
        return sha256_file(self.path)
