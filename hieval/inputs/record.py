"""What normalisation saw and did to one label file: the record that travels with its output.

Kept apart from the readers so that both ways of normalising (:mod:`hieval.inputs.normalize`,
the general one, and :mod:`hieval.inputs.parquet_fast`, the common case) fill in the same record.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

#: The selection of predictions without a score column: every listed code is predicted.
UNSCORED_SELECTION = "as given (no scores)"


@dataclass
class InputRecord:
    """What normalisation saw and did, kept next to the output for traceability."""

    name: str
    path: str
    sha256: str
    format: str = ""
    rows: int = 0
    documents: int = 0
    labels: int = 0
    code_format: str = ""
    duplicates_removed: int = 0
    below_threshold: int = 0
    outside_top_k: int = 0
    unknown_codes: dict[str, int] = field(default_factory=dict)
    unknown_code_policy: str = ""
    unknown_documents_dropped: int = 0
    code_system: str = ""
    #: MIMIC-IV tables: rows of the other ``icd_version``, skipped.
    other_version_rows: int = 0
    #: A gold pooled from several files: each file's own record (this one sums them).
    files: list[dict] = field(default_factory=list)
    scored_pairs: int = 0
    #: How predictions were decided: "score >= 0.5", "top 15", "as given (no scores)", ...
    selection: str = ""
    tuned_threshold: dict = field(default_factory=dict)
    #: ``malformed_codes: count``: the predictions that are no code (code -> rows), kept.
    invalid_codes: dict[str, int] = field(default_factory=dict)
    #: ``code_format: lenient``: distinct codes read from a code with a description after it.
    codes_read_leniently: int = 0
    malformed_code_policy: str = "error"
    #: Codes kept but placed nowhere (invalid, and non-existent under ``unknown_codes: count``).
    counted_codes: list[str] = field(default_factory=list)
    #: What makes this file's numbers other than they seem (partial coverage of the gold, a
    #: setting ignored, tuning without signal): logged once, and shown in the report's notes.
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """The one line both ways of normalising log when done."""
        return (
            f"{self.name}: {self.rows} rows -> {self.labels} labels over {self.documents} documents"
        )

    def to_json(self) -> str:
        """A stable JSON rendering (sorted keys) so reruns are byte-identical. The generative
        coders' fields appear only when used: the default record is as it always was."""
        fields = asdict(self)
        for key, default in _GENERATIVE_DEFAULTS.items():
            if fields[key] == default:
                del fields[key]
        return json.dumps(fields, indent=2, sort_keys=True) + "\n"


#: Fields of :class:`InputRecord` written only when they differ from these values.
_GENERATIVE_DEFAULTS = {
    "invalid_codes": {},
    "codes_read_leniently": 0,
    "malformed_code_policy": "error",
    "counted_codes": [],
}
