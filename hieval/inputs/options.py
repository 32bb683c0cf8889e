"""How a label file is read: the options of one file (:class:`LabelOptions`), thresholds tuned on
a validation set, and the policies for codes and documents the gold or the hierarchy lacks.

Apart from the reader (:mod:`hieval.inputs.normalize`) because the workflow's config
validation needs them at every Snakemake start, and the reader loads DuckDB and pyarrow.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hieval.errors import InputError

#: A scored code is predicted when its score reaches this (unless a threshold or top-k is set).
DEFAULT_THRESHOLD = 0.5
#: The threshold that is tuned on a validation set (sheet, config and ``--threshold``).
TUNE = "tune"
#: ``count`` (predictions only): a code the release lacks is kept, placed nowhere, and so is a
#: false positive at the leaf level and nowhere else (a generative coder's invented code).
COUNT = "count"
UNKNOWN_CODE_POLICIES = ("error", "place", "drop", COUNT)
#: None: the code system's default (``place`` for ICD-9 and ICD-10, ``error`` for your own tree).
DEFAULT_UNKNOWN_CODES = None
UNKNOWN_DOC_POLICIES = ("error", "drop")
DEFAULT_UNKNOWN_DOCS = "error"
#: A prediction that is not a code at all (``hypertension``): ``error`` stops the run; ``count``
#: keeps it as a false positive at the leaf level (``code_status`` invalid). The gold is always
#: strict.
MALFORMED_CODE_POLICIES = ("error", COUNT)
DEFAULT_MALFORMED_CODES = "error"
#: ``lenient`` (predictions only) reads a code written with a description after it
#: (``401.9 - Unspecified essential hypertension``, ``I10 (Essential hypertension)``) as the code.
LENIENT = "lenient"
CODE_FORMATS = ("auto", "dotted", "undotted", LENIENT)
#: The gold is read strictly: no lenient reading.
GOLD_CODE_FORMATS = CODE_FORMATS[:-1]


@dataclass
class LabelOptions:
    """How to read one label file; the defaults suit a dotted long-format file."""

    code_type: str | None = None
    code_format: str = "auto"
    threshold: float | None = None
    top_k: int | None = None
    format: str = "auto"
    code_list: str | None = None
    doc_list: str | None = None

    def __post_init__(self) -> None:
        # ``score < NaN`` is never true, yet NaN is no threshold: refused here, whatever the
        # caller (sheet, config, command line or library) let through.
        check_threshold(self.threshold, "threshold")
        if self.top_k is not None and (
            isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1
        ):
            raise InputError(f"top_k must be a whole number of at least 1, not {self.top_k!r}")


@dataclass(frozen=True)
class TunedThresholds:
    """Thresholds tuned on a validation set (:mod:`hieval.metrics.tuning`): a global one and
    per-code ones (code -> threshold), with where they come from (for the input record).

    Any finite number: tuned on the model's own scores, which need not lie in [0, 1].
    """

    threshold: float
    per_code: dict[str, float] = field(default_factory=dict)
    source: dict = field(default_factory=dict)
    #: What tuning warned of (a dev/test overlap allowed, no signal): the report shows them.
    warnings: tuple[str, ...] = ()


def check_threshold(value: float | None, what: str) -> None:
    """Refuse a score threshold that is not a finite number in [0, 1] (None: no threshold)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise InputError(f"{what} must be a finite number in [0, 1], not {value!r}")
