"""What to do with one label file: the settings of :func:`hieval.inputs.normalize.normalize_labels`,
checked once and handed whole to both ways of normalising (:mod:`hieval.inputs.parquet_fast`,
then the general path in DuckDB) instead of a dozen arguments each."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hieval.codesystem import CodeSystem
from hieval.hierarchy.table import LevelTable
from hieval.inputs.formats import GOLD
from hieval.inputs.options import LabelOptions, TunedThresholds


@dataclass(frozen=True)
class LabelJob:
    """One file's normalisation: its ``role`` (gold or predictions), where it goes (``out``,
    ``scores_out``), the ``hierarchy`` and its code ``system``, how the file is read
    (``options``), the resolved ``unknown_codes`` policy, the normalised gold to check documents
    against (``gold_docs``, maybe still being written) and the ``unknown_docs`` policy, the
    score selection's ``default_threshold`` and ``tuned`` thresholds, the DuckDB bounds
    (``duckdb_config``) and the fast path's ``memory_budget`` and ``on_fast_path`` callback."""

    role: str
    out: str | Path
    hierarchy: LevelTable
    system: CodeSystem
    options: LabelOptions
    unknown_codes: str
    gold_docs: str | os.PathLike | None
    unknown_docs: str
    default_threshold: float
    tuned: TunedThresholds | None
    scores_out: str | Path | None
    duckdb_config: dict | None
    memory_budget: int | None
    on_fast_path: Callable[[], None] | None
    #: ``error`` or ``count`` (predictions only; always ``error`` for the gold).
    malformed_codes: str = "error"

    @property
    def is_gold(self) -> bool:
        return self.role == GOLD
