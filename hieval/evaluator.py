"""Evaluation in batches, for validation loops: :class:`Evaluator` takes batches of documents
with :meth:`~Evaluator.update` and gives one :class:`~hieval.api.Evaluation` with
:meth:`~Evaluator.compute`, equal to one :func:`~hieval.api.evaluate` over every batch.

Why batches are kept (on disk, in a private folder), not reduced to counts as they come: the
counts of a document are additive, but ICM's node weights, the ranking metrics and the
bootstrap read the whole gold, exactly as the sharded workflow computes node weights once from
the whole gold before counting its shards. So :meth:`~Evaluator.compute` pools the batches
and runs the one composition of the stages once; what is checked at :meth:`~Evaluator.update`
is what a batch can settle alone: its kind of input, and that no document comes twice.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from hieval import api, memory
from hieval.errors import InputError, preview_value


class _Batches:
    """One input's batches (the gold, or one model's predictions), each written to a file as
    it comes: frames as Parquet, dense matrices as ``.npy`` with their lists in memory."""

    def __init__(self, folder: Path, name: str) -> None:
        folder.mkdir()
        self.folder, self.name = folder, name
        self.files: list[Path] = []
        self.codes: tuple[str, ...] | None = None
        self.doc_ids: list[str] = []

    def add(self, value: object, *, role: str) -> pl.Series:
        """Keep one batch; return its documents (for the check that none comes twice)."""
        target = self.folder / str(len(self.files))
        if isinstance(value, memory.Dense):
            if self.files and self.codes is None:
                raise InputError(
                    f"{self.name}: batch {len(self.files) + 1} is a dense matrix, the earlier "
                    "batches tables; give every batch of an input in one kind"
                )
            if self.codes not in (None, value.codes):
                raise InputError(
                    f"{self.name}: batch {len(self.files) + 1} is a dense matrix whose codes "
                    "differ from the earlier batches'; give every batch the same codes, in the "
                    "same order"
                )
            self.codes = value.codes
            self.doc_ids += value.doc_ids
            np.save(target.with_suffix(".npy"), value.matrix, allow_pickle=False)
            self.files.append(target.with_suffix(".npy"))
            return pl.Series("doc_id", value.doc_ids)
        if self.codes is not None:
            raise InputError(
                f"{self.name}: batch {len(self.files) + 1} is a table, the earlier batches "
                "dense matrices; give every batch of an input in one kind"
            )
        if isinstance(value, str | os.PathLike):
            raise InputError(
                f"{self.name}: batch {len(self.files) + 1} is a path ({value}); the Evaluator "
                "takes batches in memory (DataFrames, mappings, hieval.dense): for files, "
                "use hieval.evaluate"
            )
        frame = memory._frame(value, name=self.name, role=role)
        if self.files:
            first = pl.read_parquet_schema(self.files[0])
            if dict(frame.schema) != dict(first):
                raise InputError(
                    f"{self.name}: batch {len(self.files) + 1} has columns "
                    f"{dict(frame.schema)}, the first batch {dict(first)}; give every batch "
                    "the same columns and types"
                )
        frame.write_parquet(target.with_suffix(".parquet"))
        self.files.append(target.with_suffix(".parquet"))
        return frame["doc_id"] if "doc_id" in frame.columns else pl.Series("doc_id", [])

    def mark(self) -> tuple[int, int]:
        """Where the batches stand now, for :meth:`restore`."""
        return len(self.files), len(self.doc_ids)

    def restore(self, mark: tuple[int, int]) -> None:
        """Forget the batches added since ``mark`` (a batch refused part way)."""
        for path in self.files[mark[0] :]:
            path.unlink(missing_ok=True)
        del self.files[mark[0] :], self.doc_ids[mark[1] :]
        if not self.files:
            self.codes = None

    def pooled(self) -> object:
        """Every batch as one input of :func:`hieval.evaluate`, in the order given."""
        if self.codes is not None:
            matrix = np.vstack([np.load(f, allow_pickle=False) for f in self.files])
            return memory.Dense(matrix, self.codes, tuple(self.doc_ids))
        return pl.concat([pl.read_parquet(f) for f in self.files], how="vertical")


class Evaluator:
    """Evaluate in batches of documents: :meth:`update` any number of times, then
    :meth:`compute`.

    Parameters
    ----------
    hierarchy
        As :func:`hieval.evaluate`'s ``hierarchy`` (a :class:`hieval.Hierarchy` is built once
        for all batches).
    **options
        Every other keyword of :func:`hieval.evaluate` (``max_level``, ``threshold``, ...).

    Examples
    --------
    >>> import hieval
    >>> evaluator = hieval.Evaluator(cache=cache)
    >>> evaluator.update({"a": ["401.9"]}, {"m": {"a": ["401.9"]}})
    >>> evaluator.update({"b": ["250.00"]}, {"m": {"b": ["428.0"]}})
    >>> evaluator.compute().metrics.filter(family="flat", average="micro", metric="f1")["value"]
    shape: (1,)
    Series: 'value' [f64]
    [
        0.5
    ]
    """

    def __init__(self, *, hierarchy: str | os.PathLike | api.Hierarchy = "package", **options):
        unknown = set(options) - set(api.evaluate.__kwdefaults__)
        if unknown:
            raise TypeError(f"Evaluator got unknown option(s): {', '.join(sorted(unknown))}")
        self._options: dict[str, Any] = {"hierarchy": hierarchy, **options}
        self._folder = api._Private(self, "hieval-evaluator-").path
        self._gold = _Batches(self._folder / "gold", "gold")
        self._models: dict[str, _Batches] = {}
        self._seen: set[str] = set()

    def update(self, gold_batch: object, predictions_batch: object) -> None:
        """Add a batch of documents: their gold and each model's predictions, in any input
        kind :func:`hieval.evaluate` takes in memory. A document of an earlier batch is
        refused, naming it (its labels would be counted twice)."""
        models = api._named(predictions_batch, "predictions")
        if self._models and set(models) != set(self._models):
            raise InputError(
                f"batch {len(self._gold.files) + 1}: models {sorted(models)}, the earlier "
                f"batches {sorted(self._models)}; give every batch every model"
            )
        kept = {name: batches.mark() for name, batches in self._all().items()}
        try:
            docs = self._gold.add(gold_batch, role="gold")
            batch = set(docs.cast(pl.String, strict=False).drop_nulls().to_list())
            again = sorted(batch & self._seen)
            if again:
                raise InputError(
                    f"gold: batch {len(self._gold.files)}: document {preview_value(again[0])} "
                    f"came in an earlier batch ({len(again)} such document(s)); each document "
                    "belongs to one batch"
                )
            for name, value in models.items():
                if name not in self._models:
                    self._models[name] = _Batches(self._folder / str(len(self._models)), name)
                self._models[name].add(value, role="predictions")
        except BaseException:  # a refused batch leaves no trace: the earlier ones stand
            for name, batches in self._all().items():
                batches.restore(kept.get(name, (0, 0)))
            self._models = {n: b for n, b in self._models.items() if b.files}
            raise
        self._seen |= batch

    def _all(self) -> dict[str | None, _Batches]:
        return {None: self._gold, **self._models}

    def compute(self) -> api.Evaluation:
        """One :class:`~hieval.api.Evaluation` of every batch so far: equal to
        :func:`hieval.evaluate` over all of them at once."""
        if not self._gold.files:
            raise InputError("Evaluator.compute: no batch yet; call update(gold, predictions)")
        predictions: Mapping[str, object] = {
            name: batches.pooled() for name, batches in self._models.items()
        }
        return api.evaluate(self._gold.pooled(), predictions, **self._options)
