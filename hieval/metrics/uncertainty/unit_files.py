"""A dense model's bootstrap units (:class:`~hieval.metrics.uncertainty.ranking.RankingUnits`)
kept on disk from the score stage, which computes them in its own reads of the matrix
(:func:`hieval.metrics.blocked_rows.dense_rows_and_units`), to the uncertainty stage, which
would otherwise read and rank the matrix again (issue 36: about 10 s a MIMIC-IV-sized model).

Why a file and a plan: the two stages are separate jobs in the workflow and separate calls in
the CLI. The file records what the units were computed for (``plan``: the scores' reference
with its sha256, the sorted documents' digest, the seed, the replicates, the cut-offs and the
levels); :func:`load_units` gives them back only for the very same plan and None otherwise,
so the caller computes them again rather than use units of other inputs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence

import numpy as np

from hieval.atomic import atomic_path
from hieval.metrics.uncertainty.ranking import RankingUnits

log = logging.getLogger(__name__)

#: Bumped when the file's layout changes: an older file is then computed again, not misread.
FORMAT = 1
_META = "meta"
_COLUMNS = "columns"
_BOOT = "boot"


def units_plan(
    *,
    scores: str,
    doc_ids: Sequence[str],
    seed: int,
    bootstrap: int,
    ks: Sequence[int],
    levels: Sequence[str],
) -> dict:
    """What a model's units depend on, as a JSON-able dict: ``scores`` is the dense
    reference's JSON (its path, sha256, rows and columns), ``doc_ids`` the gold's documents
    sorted (kept as a digest)."""
    docs = hashlib.sha256("\n".join(doc_ids).encode("utf-8")).hexdigest()
    return {
        "format": FORMAT,
        "scores": hashlib.sha256(scores.encode("utf-8")).hexdigest(),
        "docs": docs,
        "seed": int(seed),
        "bootstrap": int(bootstrap),
        "ks": [int(k) for k in ks],
        "levels": list(levels),
    }


def save_units(path: str | os.PathLike, units: RankingUnits, *, plan: dict) -> None:
    """Write ``units`` (a dense model's: no exact AUC plans) with their ``plan``."""
    if units.auc or units.auc_plans:
        raise ValueError("only a dense model's units (no exact AUC plans) are kept on disk")
    boot = [(level, name) for level, values in units.auc_bootstrap.items() for name in values]
    meta = {"plan": plan, "names": units.names, "keys": units.keys, "boot": boot}
    arrays = {_META: np.array(json.dumps(meta)), _COLUMNS: units.columns}
    for number, (level, name) in enumerate(boot):  # in order: the tables iterate them
        arrays[f"{_BOOT}{number}"] = np.asarray(units.auc_bootstrap[level][name])
    with atomic_path(path) as tmp, open(tmp, "wb") as out:
        np.savez(out, **arrays)


def load_units(path: str | os.PathLike, *, plan: dict) -> RankingUnits | None:
    """The units :func:`save_units` wrote at ``path`` for this very ``plan``; None when
    there is no file or it was written for another plan (other inputs or settings)."""
    if not os.path.isfile(path):
        return None
    with np.load(path, allow_pickle=False) as archive:
        meta = json.loads(str(archive[_META]))
        if meta["plan"] != plan:
            log.info("%s was computed for other inputs or settings: computed again", path)
            return None
        boot: dict[str, dict[str, np.ndarray]] = {}
        for number, (level, name) in enumerate(meta["boot"]):
            boot.setdefault(level, {})[name] = archive[f"{_BOOT}{number}"]
        columns = archive[_COLUMNS]
    keys = tuple(tuple(key) for key in meta["keys"])
    return RankingUnits(columns, meta["names"], keys, {}, {}, boot)
