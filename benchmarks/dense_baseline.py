"""The naive dense-matrix evaluation, as the original CoPHE reference code does it.

modr00cka/CoPHE (``scripts/evaluation_setup.py``, ``scripts/multi_level_eval.py``) takes the
model's documents × codes 0/1 matrix and the gold's, builds per level a codes × ancestors 0/1
transition matrix, and multiplies: x = P·T and y = G·T are the per-document counts of
predicted and gold leaves under every ancestor. Then TP = Σ min(x, y), FP = Σ max(x − y, 0),
FN = Σ max(y − x, 0) (CoPHE), the same on x and y binarised with ``(x > 0) * 1``
(set-based), and on P and G themselves (flat). Everything is dense float64 numpy; the
columns are the codes that occur in the gold or the predictions.

Memory grows with documents × codes, so this only runs at small scales; :func:`plan` says how
much it would need before anything is allocated. Here it is the reference point for hieval's
speed and a second, independent implementation of the micro counts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

Source = str | Path | pl.DataFrame
Counts = dict[tuple[str, str], tuple[int, int, int]]
BYTES = 8  # float64


def _table(source: Source, columns: list[str]) -> pa.Table:
    if isinstance(source, pl.DataFrame):
        return source.select(columns).to_arrow()
    return pq.read_table(source, columns=columns)


@dataclass(frozen=True)
class Plan:
    """Sizes of the dense problem: documents, code columns, ancestor columns per level."""

    documents: int
    codes: int
    ancestors: dict[str, int]

    @property
    def peak_bytes(self) -> int:
        """G and P, plus two same-sized temporaries (flat) or the widest level's transition
        matrix, x, y and two temporaries of their size."""
        d, c = self.documents, self.codes
        widest = max(self.ancestors.values(), default=0)
        return BYTES * (2 * d * c + max(2 * d * c, c * widest + 4 * d * widest))


def plan(gold: Source, predictions: Source, ancestors: Source, levels: tuple[str, ...]) -> Plan:
    """The dense problem's sizes, from a cheap scan (nothing dense is allocated)."""
    gold_t = _table(gold, ["doc_id", "code"])
    codes = pc.unique(
        pa.chunked_array(
            gold_t["code"].chunks + _table(predictions, ["code"])["code"].chunks
        ).drop_null()
    )
    anc = pl.from_arrow(_table(ancestors, ["code", "level", "ancestor"]))
    used = anc.filter(
        pl.col("level").is_in(list(levels)) & pl.col("code").is_in(pl.Series(codes).implode())
    )
    per_level = dict(used.group_by("level").agg(pl.col("ancestor").n_unique()).iter_rows())
    return Plan(
        documents=len(pc.unique(gold_t["doc_id"])),
        codes=len(codes),
        ancestors={level: int(per_level.get(level, 0)) for level in levels},
    )


def _micro(pred: np.ndarray, gold: np.ndarray) -> tuple[int, int, int]:
    """The reference's tp/fp/fn_matrix_mul_full: sums over both axes."""
    tp = np.sum(np.minimum(pred, gold), axis=(0, 1))
    fp = np.sum(np.maximum(pred - gold, 0), axis=(0, 1))
    fn = np.sum(np.maximum(gold - pred, 0), axis=(0, 1))
    return round(float(tp)), round(float(fp)), round(float(fn))


def dense_counts(
    gold: Source, predictions: Source, ancestors: Source, levels: tuple[str, ...]
) -> tuple[Counts, dict[str, float]]:
    """Micro TP/FP/FN per (family, level), the flat family at level ``leaf``; and timings.

    ``levels`` are the hierarchy levels to evaluate (e.g. e2, e1, e0, c). Timings: ``load``
    (reading and indexing the long tables), ``matrices`` (dense G, P and the transition
    matrices), ``evaluate`` (products and sums).
    """
    started = time.perf_counter()
    gold_all = _table(gold, ["doc_id", "code"])
    doc_ids = pc.unique(gold_all["doc_id"])
    gold_t = gold_all.filter(pc.is_valid(pc.field("code")))
    pred_t = _table(predictions, ["doc_id", "code"]).filter(pc.is_valid(pc.field("code")))
    codes = pc.unique(pa.chunked_array(gold_t["code"].chunks + pred_t["code"].chunks)).sort()
    pred_index = pc.index_in(pred_t["doc_id"], doc_ids)
    if pred_index.null_count:
        raise ValueError("predictions for documents that are not in the gold")
    gold_rows = pc.index_in(gold_t["doc_id"], doc_ids).to_numpy()
    gold_cols = pc.index_in(gold_t["code"], codes).to_numpy()
    pred_rows, pred_cols = pred_index.to_numpy(), pc.index_in(pred_t["code"], codes).to_numpy()
    anc = pl.from_arrow(_table(ancestors, ["code", "level", "ancestor"])).filter(
        pl.col("level").is_in(list(levels))
    )
    code_index = pl.DataFrame({"code": codes.to_pylist()}).with_row_index("row")
    timings = {"load": time.perf_counter() - started, "matrices": 0.0, "evaluate": 0.0}

    def transition(level: str) -> np.ndarray:
        """Codes × ancestors at ``level``: 1 where the ancestor is the code's."""
        edges = anc.filter(pl.col("level") == level).join(code_index, on="code")
        columns = edges["ancestor"].unique().sort().to_frame().with_row_index("col")
        cells = edges.join(columns, on="ancestor")
        T = np.zeros((len(codes), columns.height))
        T[cells["row"].to_numpy(), cells["col"].to_numpy()] = 1
        return T

    clock = time.perf_counter()
    G = np.zeros((len(doc_ids), len(codes)))
    P = np.zeros((len(doc_ids), len(codes)))
    G[gold_rows, gold_cols] = 1
    P[pred_rows, pred_cols] = 1
    timings["matrices"] += time.perf_counter() - clock

    clock = time.perf_counter()
    counts: Counts = {("flat", "leaf"): _micro(P, G)}  # already 0/1
    timings["evaluate"] += time.perf_counter() - clock
    for level in levels:
        clock = time.perf_counter()
        T = transition(level)
        timings["matrices"] += time.perf_counter() - clock
        clock = time.perf_counter()
        x = P.dot(T)
        y = G.dot(T)
        del T
        counts[("cophe", level)] = _micro(x, y)
        x = (x > 0) * 1
        y = (y > 0) * 1
        counts[("set", level)] = _micro(x, y)
        del x, y
        timings["evaluate"] += time.perf_counter() - clock
    return counts, timings


def hieval_micro(nodes: pl.DataFrame) -> Counts:
    """The same micro counts from hieval's per-node table."""
    sums = nodes.group_by("family", "level").agg(pl.col("tp", "fp", "fn").sum())
    return {(f, lv): (int(tp), int(fp), int(fn)) for f, lv, tp, fp, fn in sums.iter_rows()}
