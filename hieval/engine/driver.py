"""The engine driver: the one way labels are encoded and counted.

Every evaluation — a workflow count job, ``hieval evaluate``, the meta experiments, the paper's
tables, the benchmarks — goes through :func:`evaluate`: encode the gold and predicted labels
once as sorted keys (:mod:`hieval.engine.keys`), then one pass over slices of documents that
computes, slice by slice, the flat/set-based/CoPHE counts (:mod:`hieval.engine.counts`) and the
per-item ICM, HF and PROP-F sums (:mod:`hieval.engine.icm`). Both read the same labels and share
each level's groups, so one pass reads and encodes the inputs once and keeps each slice's arrays
in cache for both. :func:`gold_weights` is the gold-only pass ICM's node weights need (once per
model in a sharded run); :func:`count` is :func:`evaluate` without the item sums.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from hieval.engine.counts import (
    DocSink,
    add_node_sums,
    count_slice,
    empty_sums,
    node_frame,
)
from hieval.engine.frequencies import gold_frequencies
from hieval.engine.groups import Groups, Slice, default_threads, parallel_map, slices
from hieval.engine.icm import (
    FixedWeights,
    GoldCounts,
    IcmParams,
    ItemSums,
    gold_only,
    node_weights,
    slice_frequencies,
    slice_item_sums,
)
from hieval.engine.keys import LEAF, CodeSpace, Labels, Source, encode, label_codes, read_frame

log = logging.getLogger(__name__)

#: Ancestor rows of codes placed outside the hierarchy by their syntax, or a function giving
#: them for the labels' distinct codes (a count job knows its codes only once it reads them).
Placed = pl.DataFrame | Callable[[pl.Series], pl.DataFrame | None] | None


@dataclass(frozen=True)
class Evaluation:
    """The additive tables of one model (or one shard of its documents)."""

    nodes: pl.DataFrame
    docs: pl.DataFrame | None  # None when streamed to a file
    item_sums: pl.DataFrame | None  # None when not asked for
    documents: int  # documents with a label or a prediction


class Progress:
    """Logs the share of labels counted, every tenth of the way on large inputs."""

    def __init__(self, total: int, minimum: int = 5_000_000):
        self.total, self.done, self.next = total, 0, 0.1
        self.quiet = total < minimum  # small jobs finish before a line would help
        self.start = time.monotonic()

    def advance(self, labels: int) -> None:
        self.done += labels
        share = self.done / self.total if self.total else 1.0
        if self.quiet or share < self.next:
            return
        log.info(
            "counted %s of %s labels (%.0f%%) in %.1f s",
            f"{self.done:,}",
            f"{self.total:,}",
            100 * share,
            time.monotonic() - self.start,
        )
        self.next = math.floor(share * 10 + 1) / 10


def relevant_ancestors(
    ancestors: Source,
    *label_sources: Source,
    placed: pl.DataFrame | None = None,
    codes: pl.Series | None = None,
) -> pl.DataFrame:
    """The ancestor rows of the labels' codes and of every node above them (``codes``: the
    sources' distinct codes, when the caller has read them already).

    A large tree (ICD-10: 294,593 nodes) is mostly nodes no label of a job reaches; building the
    code space over them only costs time. Keeping each node with its own rows (closed upwards)
    leaves every count, IC and Δ of the nodes the labels reach exactly as over the whole tree.
    """
    anc = read_frame(ancestors, ["code", "level", "ancestor"])
    if codes is None:
        codes = pl.concat([label_codes(source) for source in label_sources]).unique()
    reached = [anc.filter(pl.col("code").is_in(codes.implode()))["ancestor"]]
    if placed is not None and placed.height:  # codes placed outside the tree reach its nodes too
        reached.append(placed["ancestor"].cast(pl.String))
    keep = pl.concat([codes, *reached]).unique()
    return anc.filter(pl.col("code").is_in(keep.implode()))


def encode_labels(
    gold: Source,
    predictions: Source,
    ancestors: Source,
    *,
    levels: tuple[str, ...],
    placed: Placed = None,
    threads: int | None = None,
) -> Labels:
    """Gold and predicted ``doc_id, code`` tables as sorted keys over the hierarchy's codes; the
    code space holds the part of the tree the labels reach, built from the codes the encoder
    reads (no separate pass over the files).

    ``placed``: ancestor rows of codes placed outside the hierarchy by their syntax, or a
    function giving them for the labels' distinct codes; ``threads``: :func:`encode`'s."""
    clock = time.monotonic()

    def space_for(codes: pl.Series) -> CodeSpace:
        rows = placed(codes) if callable(placed) else placed
        tree = relevant_ancestors(ancestors, placed=rows, codes=codes)
        return CodeSpace.build(tree, tuple(levels), rows)

    labels = encode(gold, predictions, space_for, threads=threads)
    # Experiments encode thousands of tiny outputs: only a large job's encoding is news.
    log.log(
        logging.INFO if labels.keys.size >= 1_000_000 else logging.DEBUG,
        "encoded %s labels of %s documents in %.1f s",
        f"{labels.keys.size:,}",
        f"{labels.doc_ids.len():,}",
        time.monotonic() - clock,
    )
    return labels


def labels_weights(
    labels: Labels, *, levels: tuple[str, ...], params: IcmParams, threads: int | None = None
) -> pl.DataFrame:
    """ICM node weights from the gold of encoded labels (the gold-only pass)."""
    counts = labels_gold_counts(labels, params=params, threads=threads)
    return node_weights(counts.ancestors, counts.nodes, counts.items, levels=levels, params=params)


def labels_gold_counts(
    labels: Labels, *, params: IcmParams, threads: int | None = None
) -> GoldCounts:
    """What ICM's node weights need of the gold of encoded labels (additive over documents):
    counted as runs of sorted keys on a tree of levels (:mod:`hieval.engine.frequencies`),
    group by group otherwise."""
    found = gold_frequencies(labels)
    if found is not None:
        return GoldCounts.of(labels, found, params)
    gold = gold_only(labels)
    freq = np.zeros(labels.space.tree_nodes.len(), dtype=np.int64)
    exact = np.zeros(labels.space.codes.len(), dtype=np.int64)
    for node_f, code_f in parallel_map(slice_frequencies, slices(gold), threads):
        freq += node_f
        exact += code_f
    return GoldCounts.of(labels, (freq, exact), params)


def labels_item_sums(
    labels: Labels,
    weights: pl.DataFrame,
    *,
    params: IcmParams,
    threads: int | None = None,
    fixed: FixedWeights | None = None,
) -> pl.DataFrame:
    """The per-item ICM, HF and PROP-F sums of encoded labels over given node ``weights``:
    the item pass of :func:`evaluate_labels` alone, for documents counted earlier whose
    weights were known only once the whole gold was (:class:`hieval.Evaluator`). ``fixed``:
    the weights already aligned to the labels' code space (:meth:`FixedWeights.of`), for
    batches sharing one space."""
    sums = ItemSums(labels, weights, params, fixed)

    def one_slice(part: Slice) -> tuple[int, int, np.ndarray]:
        return part.first, part.end, slice_item_sums(part, sums.weights)

    for first, end, part_sums in parallel_map(one_slice, slices(labels), threads):
        sums.add(first, end, part_sums)
    return sums.frame()


def gold_weights(
    gold: Source,
    ancestors: Source,
    *,
    levels: tuple[str, ...],
    params: IcmParams,
    predictions: Source | None = None,
    placed: pl.DataFrame | None = None,
    threads: int | None = None,
) -> pl.DataFrame:
    """ICM's node weights (IC, Δ, inverse propensity) from the whole gold, for the nodes the
    gold or ``predictions`` reach (every node of the tree when no predictions are given).

    IC depends on every gold document, so a sharded run computes this once and every shard of
    documents reads it. ``levels`` holds every level up to the root: ICM uses the whole tree.
    """
    empty = pl.DataFrame(schema={"doc_id": pl.String, "code": pl.String})
    if predictions is not None:
        ancestors = relevant_ancestors(ancestors, gold, predictions, placed=placed)
    labels = encode(gold, empty, CodeSpace.build(ancestors, tuple(levels), placed))
    return labels_weights(labels, levels=levels, params=params, threads=threads)


def evaluate(  # noqa: PLR0913 (keyword-only settings of the one pass; tests call it directly)
    gold: Source,
    predictions: Source,
    ancestors: Source,
    *,
    levels: tuple[str, ...],
    evaluated: tuple[str, ...],
    params: IcmParams | None = None,
    weights: pl.DataFrame | None = None,
    placed: Placed = None,
    threads: int | None = None,
    docs_out: Path | None = None,
    items: bool = True,
) -> Evaluation:
    """Count the ``evaluated`` levels and (with ``items``) sum ICM over the whole tree
    (``levels``, to the root) in one pass (``placed``: see :func:`encode_labels`).

    ``weights`` are the ICM node weights of the whole gold (:func:`gold_weights`); when not
    given they are computed from this gold, which is right for an unsharded run only. The
    per-document table is streamed to ``docs_out`` when given.
    """
    labels = encode_labels(gold, predictions, ancestors, levels=levels, placed=placed)
    return evaluate_labels(
        labels,
        levels=levels,
        evaluated=evaluated,
        params=params,
        weights=weights,
        threads=threads,
        docs_out=docs_out,
        items=items,
    )


def count_labels(
    labels: Labels, *, evaluated: tuple[str, ...], threads: int | None = None
) -> tuple[dict[str, np.ndarray], pl.DataFrame]:
    """The node sums (per level, arrays over the labels' code space) and the per-document
    rows of encoded labels: :func:`evaluate_labels` without the item pass and before the node
    table is made, so that batches of documents encoded in one code space add their sums as
    arrays and make one node table (:class:`hieval.Evaluator`)."""
    totals: dict[str, np.ndarray] = {}
    with DocSink(evaluated, labels.doc_ids, None) as docs:
        for counts in parallel_map(
            lambda part: count_slice(part, evaluated), slices(labels), threads
        ):
            add_node_sums(totals, counts)
            docs.add(counts.doc_rows)
    return totals or empty_sums(labels.space, evaluated), docs.frame()


def evaluate_labels(
    labels: Labels,
    *,
    levels: tuple[str, ...],
    evaluated: tuple[str, ...],
    params: IcmParams | None = None,
    weights: pl.DataFrame | None = None,
    threads: int | None = None,
    docs_out: Path | None = None,
    items: bool = True,
) -> Evaluation:
    """:func:`evaluate` of labels already encoded: the one pass over their slices."""
    params = params or IcmParams()
    progress = Progress(labels.keys.size)
    totals: dict[str, np.ndarray] = {}
    with ThreadPoolExecutor(1, thread_name_prefix="icm-weights") as background:
        item_job: Future | None = None
        if items:
            # The node weights come from a gold-only pass on one core; the slices' counts need
            # none of it, so they start beside it and wait for it only for their item sums
            # (one thread asked for: computed first, in this one).
            job = (_item_sums, labels, weights, levels, params, threads)
            if (threads or default_threads()) > 1:
                item_job = background.submit(*job)
            else:
                item_job = Future()
                item_job.set_result(job[0](*job[1:]))

        def one_slice(part: Slice):
            # Only the results leave the worker: a slice's groups are dropped with it.
            counts = count_slice(part, evaluated)
            if item_job is None:
                return part.first, part.end, counts, None
            return part.first, part.end, counts, slice_item_sums(part, item_job.result().weights)

        with DocSink(evaluated, labels.doc_ids, docs_out) as docs:
            for first, end, counts, part_sums in parallel_map(one_slice, slices(labels), threads):
                add_node_sums(totals, counts)
                docs.add(counts.doc_rows)
                if item_job is not None:
                    item_job.result().add(first, end, part_sums)
                progress.advance(counts.labels)
        sums = item_job.result() if item_job is not None else None
    return Evaluation(
        node_frame(totals or empty_sums(labels.space, evaluated), labels.space),
        docs.frame() if docs_out is None else None,
        sums.frame() if sums is not None else None,
        docs.documents,
    )


def _item_sums(
    labels: Labels,
    weights: pl.DataFrame | None,
    levels: tuple[str, ...],
    params: IcmParams,
    threads: int | None,
) -> ItemSums:
    """The per-item accumulator, over ``weights`` or those of this gold."""
    if weights is None:
        weights = labels_weights(labels, levels=levels, params=params, threads=threads)
    return ItemSums(labels, weights, params)


def count(
    gold: Source,
    predictions: Source,
    ancestors: Source,
    levels: tuple[str, ...],
    placed: pl.DataFrame | None = None,
    *,
    threads: int | None = None,
    docs_out: str | Path | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """The per-node and per-document count tables of one model (the latter written to
    ``docs_out`` instead, slice by slice, when that is given).

    ``levels`` are the hierarchy levels to evaluate (see
    :func:`hieval.engine.counts.evaluated_levels`); ``placed`` holds ancestor rows for codes
    placed outside the hierarchy. Inputs are Parquet paths or frames with ``doc_id, code`` (and
    ``code, level, ancestor``).
    """
    result = evaluate(
        gold,
        predictions,
        ancestors,
        levels=tuple(levels),
        evaluated=tuple(levels),
        placed=placed,
        threads=threads,
        docs_out=Path(docs_out) if docs_out else None,
        items=False,
    )
    return result.nodes, result.docs


def document_groups(
    labels: Labels, *, evaluated: tuple[str, ...], threads: int | None = None
) -> dict[str, Groups]:
    """Every (document, node) group of the ``leaf`` pseudo-level and the ``evaluated`` levels,
    documents numbered as ``labels.doc_ids`` (over all slices).

    The count tables sum these groups over documents; a bootstrap needs them per document, to
    weigh each document anew in every replicate (macro and label-based metrics are not
    functions of per-document totals). Memory: 32 bytes a group, which is about one per label
    and level.
    """
    wanted = (LEAF, *evaluated)

    def one_slice(part: Slice) -> list[Groups]:
        found = [part.groups(level) for level in wanted]
        return [Groups(g.doc + part.first, g.node, g.pred, g.gold) for g in found]

    parts: list[list[Groups]] = [[] for _ in wanted]
    for found in parallel_map(one_slice, slices(labels), threads):
        for bucket, g in zip(parts, found, strict=True):
            bucket.append(g)
    result = {}
    for level, bucket in zip(wanted, parts, strict=True):
        if not bucket:
            empty = np.zeros(0, dtype=np.int64)
            result[level] = Groups(empty, empty, empty, empty)
            continue
        result[level] = Groups(
            *(
                np.concatenate([getattr(g, f) for g in bucket])
                for f in ("doc", "node", "pred", "gold")
            )
        )
    return result
