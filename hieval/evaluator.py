"""Evaluation in batches, for validation loops: :class:`Evaluator` takes batches of documents
with :meth:`~Evaluator.update` and gives one :class:`~hieval.api.Evaluation` with
:meth:`~Evaluator.compute`, equal to one :func:`~hieval.api.evaluate` over every batch.

Why batches are kept (in memory, as given), not reduced to counts as they come: the
counts of a document are additive, but ICM's node weights, the ranking metrics and the
bootstrap read the whole gold, exactly as the sharded workflow computes node weights once from
the whole gold before counting its shards. So :meth:`~Evaluator.compute` pools the batches
and runs the one composition of the stages once; what is checked at :meth:`~Evaluator.update`
is what a batch can settle alone: its kind of input, and that no document comes twice.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl

from hieval import api, memory
from hieval.errors import InputError, preview_value


class _Batches:
    """One input's batches (the gold, or one model's predictions), as given: frames, or dense
    matrices with their codes (the same for every batch)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.parts: list[pl.DataFrame | np.ndarray] = []
        self.codes: tuple[str, ...] | None = None
        self.doc_ids: list[str] = []

    def add(self, value: object, *, role: str) -> pl.Series:
        """Keep one batch; return its documents (for the check that none comes twice)."""
        batch = len(self.parts) + 1
        if isinstance(value, memory.Dense):
            if self.parts and self.codes is None:
                raise InputError(
                    f"{self.name}: batch {batch} is a dense matrix, the earlier batches tables; "
                    "give every batch of an input in one kind"
                )
            if self.codes not in (None, value.codes):
                raise InputError(
                    f"{self.name}: batch {batch} is a dense matrix whose codes differ from the "
                    "earlier batches'; give every batch the same codes, in the same order"
                )
            self.codes = value.codes
            self.doc_ids += value.doc_ids
            self.parts.append(np.array(value.matrix, copy=True))  # a loop may reuse its buffer
            return pl.Series("doc_id", value.doc_ids)
        if self.codes is not None:
            raise InputError(
                f"{self.name}: batch {batch} is a table, the earlier batches dense matrices; "
                "give every batch of an input in one kind"
            )
        if isinstance(value, str | os.PathLike):
            raise InputError(
                f"{self.name}: batch {batch} is a path ({value}); the Evaluator takes batches "
                "in memory (DataFrames, mappings, hieval.dense): for files, use hieval.evaluate"
            )
        frame = memory._frame(value, name=self.name, role=role)
        if self.parts and frame.schema != self.parts[0].schema:
            raise InputError(
                f"{self.name}: batch {batch} has columns {dict(frame.schema)}, the first "
                f"batch {dict(self.parts[0].schema)}; give every batch the same columns and "
                "types"
            )
        self.parts.append(frame)
        return frame["doc_id"] if "doc_id" in frame.columns else pl.Series("doc_id", [])

    def mark(self) -> tuple[int, int]:
        """Where the batches stand now, for :meth:`restore`."""
        return len(self.parts), len(self.doc_ids)

    def restore(self, mark: tuple[int, int]) -> None:
        """Forget the batches added since ``mark`` (a batch refused part way)."""
        del self.parts[mark[0] :], self.doc_ids[mark[1] :]
        if not self.parts:
            self.codes = None

    def pooled(self) -> object:
        """Every batch as one input of :func:`hieval.evaluate`, in the order given."""
        if self.codes is not None:
            return memory.Dense(np.vstack(self.parts), self.codes, tuple(self.doc_ids))
        return pl.concat(self.parts, how="vertical", rechunk=True)


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
        self._gold = _Batches("gold")
        self._models: dict[str, _Batches] = {}
        self._seen: set[str] = set()

    def update(self, gold_batch: object, predictions_batch: object) -> None:
        """Add a batch of documents: their gold and each model's predictions, in any input
        kind :func:`hieval.evaluate` takes in memory. A document of an earlier batch is
        refused, naming it (its labels would be counted twice)."""
        models = api._named(predictions_batch)
        if self._models and set(models) != set(self._models):
            raise InputError(
                f"batch {len(self._gold.parts) + 1}: models {sorted(models)}, the earlier "
                f"batches {sorted(self._models)}; give every batch every model"
            )
        kept = {name: batches.mark() for name, batches in self._all().items()}
        try:
            docs = self._gold.add(gold_batch, role="gold")
            batch = set(docs.cast(pl.String, strict=False).drop_nulls().to_list())
            again = sorted(batch & self._seen)
            if again:
                raise InputError(
                    f"gold: batch {len(self._gold.parts)}: document {preview_value(again[0])} "
                    f"came in an earlier batch ({len(again)} such document(s)); each document "
                    "belongs to one batch"
                )
            for name, value in models.items():
                if name not in self._models:
                    self._models[name] = _Batches(name)
                self._models[name].add(value, role="predictions")
        except BaseException:  # a refused batch leaves no trace: the earlier ones stand
            for name, batches in self._all().items():
                batches.restore(kept.get(name, (0, 0)))
            self._models = {n: b for n, b in self._models.items() if b.parts}
            raise
        self._seen |= batch

    def _all(self) -> dict[str | None, _Batches]:
        return {None: self._gold, **self._models}

    def compute(self) -> api.Evaluation:
        """One :class:`~hieval.api.Evaluation` of every batch so far: equal to
        :func:`hieval.evaluate` over all of them at once."""
        if not self._gold.parts:
            raise InputError("Evaluator.compute: no batch yet; call update(gold, predictions)")
        predictions: Mapping[str, object] = {
            name: batches.pooled() for name, batches in self._models.items()
        }
        return api.evaluate(self._gold.pooled(), predictions, **self._options)
