"""One pass over a model's encoded labels for everything an evaluation sums per document.

The counts (flat, set-based, CoPHE) and the per-item ICM, HF and PROP-F sums read the same
labels and share the leaf-level groups; computing them slice by slice in one pass reads and
encodes the inputs once and keeps each slice's arrays in cache for both.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from hieval.engine.counts import DocSink, add_node_sums, count_slice, empty_sums, node_frame
from hieval.engine.groups import Slice, parallel_map, slices
from hieval.engine.icm import (
    FixedWeights,
    IcmParams,
    ItemSums,
    slice_item_sums,
    weights_from_labels,
)
from hieval.engine.keys import CodeSpace, Source, encode


@dataclass(frozen=True)
class Evaluation:
    """The three additive tables of one model (or one shard of its documents)."""

    nodes: pl.DataFrame
    docs: pl.DataFrame | None  # None when streamed to a file
    items: pl.DataFrame
    weights: pl.DataFrame
    documents: int  # documents with a label or a prediction


class Progress:
    """Logs the share of labels counted, every tenth of the way on large inputs."""

    def __init__(self, total: int, log: Callable[[str], None], minimum: int = 5_000_000):
        self.total, self.log, self.done, self.next = total, log, 0, 0.1
        self.quiet = total < minimum  # small jobs finish before a line would help
        self.start = time.monotonic()

    def advance(self, labels: int) -> None:
        self.done += labels
        share = self.done / self.total if self.total else 1.0
        if self.quiet or share < self.next:
            return
        self.log(
            f"counted {self.done:,} of {self.total:,} labels ({share:.0%}) "
            f"in {time.monotonic() - self.start:.1f} s"
        )
        self.next = math.floor(share * 10 + 1) / 10


def evaluate(
    gold: Source,
    predictions: Source,
    ancestors: Source,
    levels: tuple[str, ...],
    evaluated: tuple[str, ...],
    params: IcmParams,
    weights: pl.DataFrame | None = None,
    extra_ancestors: pl.DataFrame | None = None,
    threads: int | None = None,
    docs_out: Path | None = None,
    log: Callable[[str], None] | None = None,
) -> Evaluation:
    """Count ``evaluated`` levels and sum ICM over the whole tree (``levels``, to the root).

    ``weights`` are the ICM node weights of the whole gold (:func:`hieval.engine.icm.node_weights`);
    when not given they are computed from this gold, which is right for an unsharded run only.
    The per-document table is streamed to ``docs_out`` when given; ``log`` hears of progress.
    """
    log = log or (lambda _message: None)
    clock = time.monotonic()
    space = CodeSpace.build(ancestors, levels, extra_ancestors)
    labels = encode(gold, predictions, space)
    log(
        f"encoded {labels.keys.size:,} labels of {labels.doc_ids.len():,} documents "
        f"in {time.monotonic() - clock:.1f} s"
    )
    progress = Progress(labels.keys.size, log)
    if weights is None:
        weights = weights_from_labels(labels, levels, params, threads)
    items = ItemSums(labels, weights, params)
    fixed: FixedWeights = items.weights

    def one_slice(part: Slice):
        # Only the results leave the worker: a slice's groups are dropped with it.
        return part.first, part.end, count_slice(part, evaluated), slice_item_sums(part, fixed)

    totals: dict[str, np.ndarray] = {}
    with DocSink(evaluated, labels.doc_ids, docs_out) as docs:
        for first, end, counts, sums in parallel_map(one_slice, slices(labels), threads):
            add_node_sums(totals, counts)
            docs.add(counts.doc_rows)
            items.add(first, end, sums)
            progress.advance(counts.labels)
    return Evaluation(
        node_frame(totals or empty_sums(labels.space, evaluated), labels.space),
        docs.frame() if docs_out is None else None,
        items.frame(),
        weights,
        docs.documents,
    )
