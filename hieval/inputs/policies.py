"""The unknown-code and unknown-document policies: what is refused, and how it is said.

Both ways of normalising a label file (:mod:`hieval.inputs.normalize` in DuckDB, and
:mod:`hieval.inputs.parquet_fast` over integer ranks) find the unknown codes and documents their
own way, then hand them here, so that a file gets the same verdict and the same words whichever
way it was read. The callers drop the rows themselves.
"""

from __future__ import annotations

import logging
from pathlib import Path

from hieval import codesystem
from hieval.errors import CodeError, InputError, preview
from hieval.hierarchy.table import LevelTable
from hieval.hints import DEV_SUFFIX, setting

log = logging.getLogger(__name__)


def check_unknown_codes(
    unknown: dict[str, int], *, hierarchy: LevelTable, policy: str, path: Path, name: str
) -> None:
    """Apply ``policy`` to the codes the hierarchy lacks (code -> rows): ``error`` raises,
    naming them; ``place`` makes sure each can be placed by its syntax; ``drop`` only logs (the
    caller removes the rows); ``count`` only logs (the rows stay, placed nowhere)."""
    if not unknown:
        return
    listing = preview(sorted(unknown))
    system = codesystem.of_table(hierarchy)
    if policy == "error":
        advice = (
            f"fix them, or set {setting('unknown_codes', 'place')} (put them where their syntax "
            f"says) or {setting('unknown_codes', 'drop')}"
            if system.can_place
            else "labels must be node names of your tree exactly as written (case included); "
            f"fix them, or set {setting('unknown_codes', 'drop')}"
        )
        mismatch = system.mismatch_hint(sorted(unknown)[:50])
        raise InputError(
            f"{name}: {len(unknown)} code(s) in {path} are not in the hierarchy: {listing}; "
            + advice
            + (f"\n  {mismatch}" if mismatch else "")
        )
    if policy == "count":  # kept, placed nowhere: false positives at the leaf level only
        log.info(
            "%s: %d codes not in the hierarchy counted as false positives at the leaf level: %s",
            name,
            len(unknown),
            listing,
        )
        return
    if policy == "drop":
        log.info(
            "%s: dropped %d rows with %d codes not in the hierarchy: %s",
            name,
            sum(unknown.values()),
            len(unknown),
            listing,
        )
        return
    try:
        system.placed_ancestors(set(unknown), hierarchy)
    except CodeError as exc:
        raise InputError(f"{name}: {path}: {exc}") from None
    log.info(
        "%s: %d codes not in the hierarchy placed by their syntax: %s", name, len(unknown), listing
    )


#: A model may leave this percentage of the gold's documents without a row before the report
#: warns (a few empty predictions are normal; a top-50 file against the full gold is not).
#: Whole percent, so the comparison is exact integer arithmetic.
COVERAGE_TOLERANCE_PERCENT = 1


def coverage_warning(name: str, *, missing: int, gold: int) -> list[str]:
    """The warning for a model with no rows for more than ``COVERAGE_TOLERANCE_PERCENT`` % of the
    gold's ``gold`` documents (``missing`` of them): they count as empty predictions, which lowers
    recall and F1 with no error, so the numbers need the coverage beside them."""
    if missing * 100 <= COVERAGE_TOLERANCE_PERCENT * gold:
        return []
    return [
        f"model {name} has no predictions for {missing:,} of {gold:,} gold documents "
        f"({100 * missing / gold:.1f} %)"
    ]


def gold_of(name: str) -> str:
    """The gold a label file named ``name`` is checked against, as messages say it: dev
    predictions are checked against the dev gold, and "the gold" would send the user to the
    test gold."""
    return "the dev gold" if name.endswith(DEV_SUFFIX) else "the gold"


def check_unknown_docs(docs: list[str], *, policy: str, path: Path, name: str) -> None:
    """Apply ``policy`` to the (sorted) documents of a prediction file the gold lacks:
    ``error`` raises, naming them; ``drop`` logs (the caller removes the rows)."""
    if not docs:
        return
    gold = gold_of(name)
    if policy == "error":
        raise InputError(
            f"{name}: {len(docs)} document(s) in {path} are not in {gold}: {preview(docs)}; "
            f"check that both files use the same doc_id, or set {setting('unknown_docs', 'drop')}"
        )
    log.info(
        "%s: dropped %d documents that are not in %s: %s", name, len(docs), gold, preview(docs)
    )
