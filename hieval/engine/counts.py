"""Per-node and per-document TP/FP/FN for the flat, set-based and CoPHE families.

Per document and node, x counts the predicted leaves under the node and y the gold ones. Then:

- CoPHE (count-preserving): TP = min(x, y), FP = max(x - y, 0), FN = max(y - x, 0);
- set-based: the same with x and y clipped to 0/1;
- flat: the set-based rule at the pseudo-level ``leaf``, where each code is its own node.

Both output tables are sums over documents, so shards of documents add up to the whole and a
bootstrap can resample documents without recounting.

Why numpy over sorted integer keys (see keys.py) rather than a SQL group-by: the cost is
grouping (document, level, node) — at MIMIC-IV-and-beyond scale tens of millions of groups. A
hash group-by (DuckDB's, measured at 100× MIMIC-III: ~3.5 s after integer encoding) spends most of
that on a hash table that outgrows the caches. With labels sorted once by (document, code in
hierarchy order), each level's groups are runs of adjacent keys, found by one comparison of
neighbours; sums per group are ``np.add.reduceat`` and per node ``np.bincount``. Documents are
processed in slices of about a quarter of a million labels, so temporaries stay small (a few MB,
in the cores' caches) and the per-document table can be written slice by slice.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from hieval.atomic import atomic_path
from hieval.engine.groups import Groups, Slice, runs, sum_by_doc
from hieval.engine.keys import LEAF, CodeSpace
from hieval.errors import ConfigError, preview_value
from hieval.hints import setting

if TYPE_CHECKING:
    import pyarrow.parquet as pq

FAMILIES = ("flat", "set", "cophe")
#: Labels of a slice from which each level is counted by the compiled kernel
#: (:mod:`hieval.engine.counts_compiled`), as LCA-F's are from as many.
COMPILED_FROM_LABELS = 100_000
COUNTS = ("tp", "fp", "fn")


def evaluated_levels(levels: tuple[str, ...], max_level: str) -> tuple[str, ...]:
    """The hierarchy levels from the deepest up to ``max_level`` (never the root)."""
    usable = levels[:-1]
    if max_level not in usable:
        raise ConfigError(
            f"{setting('max_level')} {preview_value(max_level)} is not a level of this "
            f"hierarchy; choose one of {usable}"
        )
    return usable[: usable.index(max_level) + 1]


@dataclass(frozen=True)
class SliceCounts:
    """The counts of one slice: node sums per level (rows as in ``NODE_SUMS``) and the slice's
    per-document rows, already in table order."""

    node_sums: dict[str, np.ndarray]
    doc_rows: dict[str, np.ndarray]
    labels: int  # input keys of the slice (for progress)


#: Rows of a level's node sums: per family part (``cophe``: counts as they are; ``set``: clipped
#: to 0/1, which at the leaf level is also flat), TP, predicted and gold leaves under the node.
NODE_SUMS = ("cophe_tp", "cophe_pred", "cophe_gold", "set_tp", "set_pred", "set_gold")
_ROW = {name: i for i, name in enumerate(NODE_SUMS)}


def doc_combos(levels: tuple[str, ...]) -> list[tuple[str, str]]:
    """The (family, level) pairs of the per-document table, in its row order (as strings)."""
    return sorted([("flat", LEAF)] + [(f, lv) for f in ("set", "cophe") for lv in levels])


def family_counts(g: Groups, level: str) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """TP, predicted and gold of each (document, node) group per family at ``level`` — flat at
    the ``leaf`` pseudo-level, set-based and CoPHE at the hierarchy's levels: the counting rules
    of the module doc, written once (the count tables and the bootstrap's per-document node
    counts both use them)."""
    has_pred, has_gold = g.pred > 0, g.gold > 0
    clipped = (has_pred & has_gold, has_pred, has_gold)
    if level == LEAF:
        return {"flat": clipped}
    return {"set": clipped, "cophe": (np.minimum(g.pred, g.gold), g.pred, g.gold)}


def count_slice(part: Slice, levels: tuple[str, ...]) -> SliceCounts:
    """Count one slice of labels (pure: slices can be counted in parallel); a slice of
    :data:`COMPILED_FROM_LABELS` labels or more by the compiled kernel (same sums, one pass per
    level), a smaller one here, vectorised."""
    combos = doc_combos(levels)
    n_docs = part.n_docs
    # Per document and (family, level): TP, predicted, gold, and whether the document has a
    # group there (only then does it get a row, as a group-by would give).
    per_doc = np.zeros((3, n_docs, len(combos)), dtype=np.int64)
    present = np.zeros((n_docs, len(combos)), dtype=bool)
    node_sums = {}
    fused = part.code.size >= COMPILED_FROM_LABELS
    for level in (LEAF, *levels):
        g = part.groups(level)
        n = part.space.nodes[level].len()
        sums = np.zeros((len(NODE_SUMS), n), dtype=np.float64)
        if fused:  # one compiled pass over the groups (hieval.engine.counts_compiled)
            from hieval.engine.counts_compiled import level_counts

            leaf = level == LEAF
            level_counts(
                g,
                leaf=leaf,
                sums=sums,
                per_doc=per_doc,
                present=present,
                clipped=combos.index(("flat" if leaf else "set", level)),
                cophe=0 if leaf else combos.index(("cophe", level)),
            )
            node_sums[level] = sums
            continue
        families = family_counts(g, level)
        parts = {"set": families["flat"]} if level == LEAF else families
        for prefix, values in parts.items():
            for suffix, value in zip(("tp", "pred", "gold"), values, strict=True):
                sums[_ROW[f"{prefix}_{suffix}"]] += np.bincount(g.node, weights=value, minlength=n)
        node_sums[level] = sums
        for family, values in families.items():
            column = combos.index((family, level))
            per_doc[:, :, column] = sum_by_doc(g, list(values), n_docs)
            present[g.doc[g.doc_starts], column] = True
    doc_index, combo = np.nonzero(present)  # row-major: by document, then (family, level)
    tp, pred, gold = per_doc[:, doc_index, combo]
    doc_rows = {
        "di": doc_index + part.first,
        "combo": combo,
        "tp": tp,
        "fp": pred - tp,
        "fn": gold - tp,
    }
    return SliceCounts(node_sums, doc_rows, int(part.keys.size))


def doc_frame(rows: dict[str, np.ndarray], levels: tuple[str, ...], doc_ids: pl.Series):
    """Per-document rows as the table ``doc_id, family, level, tp, fp, fn``."""
    combos = doc_combos(levels)
    combo = pl.Series(rows["combo"], dtype=pl.Int64)
    return pl.DataFrame(
        {
            "doc_id": doc_ids.gather(pl.Series(rows["di"], dtype=pl.Int64)),
            "family": pl.Series([f for f, _ in combos], dtype=pl.String).gather(combo),
            "level": pl.Series([lv for _, lv in combos], dtype=pl.String).gather(combo),
            "tp": rows["tp"],
            "fp": rows["fp"],
            "fn": rows["fn"],
        },
        schema_overrides={"tp": pl.Int64, "fp": pl.Int64, "fn": pl.Int64},
    )


def node_frame(sums: dict[str, np.ndarray], space: CodeSpace) -> pl.DataFrame:
    """The per-node table ``family, level, node, tp, fp, fn, n_gold, n_pred`` (nodes with a
    gold or predicted leaf under them only; ``n_*`` count those leaves, clipped per document
    for flat and set-based), sorted by family, level and node."""
    parts = []
    for level, acc in sums.items():
        seen = np.flatnonzero(acc[_ROW["set_pred"]] + acc[_ROW["set_gold"]] > 0)
        names = space.nodes[level].gather(seen)
        counts = acc[:, seen].astype(np.int64)
        families = [("flat", "set")] if level == LEAF else [("set", "set"), ("cophe", "cophe")]
        for family, prefix in families:
            tp, pred, gold = (counts[_ROW[f"{prefix}_{s}"]] for s in ("tp", "pred", "gold"))
            parts.append(
                pl.DataFrame(
                    {
                        "family": pl.repeat(family, seen.size, eager=True, dtype=pl.String),
                        "level": pl.repeat(level, seen.size, eager=True, dtype=pl.String),
                        "node": names,
                        "tp": tp,
                        "fp": pred - tp,
                        "fn": gold - tp,
                        "n_gold": gold,
                        "n_pred": pred,
                    }
                )
            )
    return pl.concat(parts).sort("family", "level", "node")


def empty_sums(space: CodeSpace, levels: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Zero node sums, for an evaluation without labels."""
    return {lv: np.zeros((len(NODE_SUMS), space.nodes[lv].len())) for lv in (LEAF, *levels)}


def concat_rows(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per-document rows of the slices, in slice order."""
    names = ("di", "combo", "tp", "fp", "fn")
    if not parts:
        return {name: np.zeros(0, dtype=np.int64) for name in names}
    return {name: np.concatenate([p[name] for p in parts]) for name in names}


def add_node_sums(totals: dict[str, np.ndarray], counts: SliceCounts) -> None:
    """Add a slice's node sums to the running totals."""
    for level, sums in counts.node_sums.items():
        if level in totals:
            totals[level] += sums
        else:
            totals[level] = sums


class DocSink:
    """The per-document table, kept in memory or streamed to Parquet slice by slice.

    At millions of documents the long table (a row per document, family and level) is the
    largest object of an evaluation; streaming it keeps memory bounded. The file is written to a
    temporary path and renamed when complete (use as a context manager).
    """

    def __init__(self, levels: tuple[str, ...], doc_ids: pl.Series, out: Path | None = None):
        self.levels, self.doc_ids, self.out = levels, doc_ids, out
        self.parts: list[dict[str, np.ndarray]] = []
        self._stack = contextlib.ExitStack()
        self._tmp: Path | None = None
        self._writer: pq.ParquetWriter | None = None
        self._arrow: tuple | None = None  # the Arrow pieces every batch reuses
        self.documents = 0  # documents with a row

    def __enter__(self) -> DocSink:
        if self.out is not None:
            self._tmp = self._stack.enter_context(atomic_path(self.out))
        return self

    def add(self, rows: dict[str, np.ndarray]) -> None:
        if rows["di"].size:
            self.documents += runs(rows["di"]).size
        if self._tmp is None:
            self.parts.append(rows)
            return
        batch = self._batch(rows)
        if self._writer is None:
            import pyarrow.parquet as pq  # here: the workflow's Snakefile imports this module

            # The file's columns are plain text: doc_id, family and level are written from
            # dictionaries (no string per row to hash) and read back as strings. Statistics
            # only for doc_id, by which the rows are sorted: on strings they cost as much as
            # the rest of the write, and family and level ranges prune nothing.
            self._writer = pq.ParquetWriter(
                self._tmp,
                batch.schema,
                compression="zstd",
                store_schema=False,
                write_statistics=["doc_id", "tp", "fp", "fn"],
            )
        self._writer.write_batch(batch)

    def _batch(self, rows: dict[str, np.ndarray]):
        """A slice's rows as the Arrow batch :func:`doc_frame` describes, built from arrays
        (through Polars: pyarrow's own ``pa.array`` imports pandas where installed)."""
        import pyarrow as pa

        if self._arrow is None:
            combos = doc_combos(self.levels)
            families = sorted({f for f, _ in combos})
            levels = sorted({lv for _, lv in combos})
            self._arrow = (
                self.doc_ids.to_arrow().cast(pa.string()),
                pl.Series(families).to_arrow().cast(pa.string()),
                pl.Series(levels).to_arrow().cast(pa.string()),
                np.array([families.index(f) for f, _ in combos], dtype=np.int32),
                np.array([levels.index(lv) for _, lv in combos], dtype=np.int32),
            )
        doc_ids, families, levels, family_of, level_of = self._arrow
        combo, di = rows["combo"], rows["di"]
        new = np.empty(di.size, dtype=bool)  # rows come by document: each one's rows are a run
        new[:1] = True
        np.not_equal(di[1:], di[:-1], out=new[1:])
        columns = {
            "doc_id": pa.DictionaryArray.from_arrays(
                pl.Series(np.cumsum(new, dtype=np.int32) - 1).to_arrow(),
                doc_ids.take(pl.Series(di[new]).to_arrow()),
            ),
            "family": pa.DictionaryArray.from_arrays(
                pl.Series(family_of[combo]).to_arrow(), families
            ),
            "level": pa.DictionaryArray.from_arrays(pl.Series(level_of[combo]).to_arrow(), levels),
            **{
                name: pl.Series(rows[name], dtype=pl.Int64).to_arrow()
                for name in ("tp", "fp", "fn")
            },
        }
        return pa.RecordBatch.from_arrays(list(columns.values()), names=list(columns))

    def frame(self) -> pl.DataFrame:
        """The whole table (when kept in memory)."""
        return doc_frame(concat_rows(self.parts), self.levels, self.doc_ids)

    def __exit__(self, *exc) -> None:
        try:
            if self._tmp is not None:
                if self._writer is not None:
                    self._writer.close()
                elif exc[0] is None:  # no labels at all: an empty table, with its columns
                    self.frame().write_parquet(self._tmp)
        except BaseException:
            self._stack.__exit__(*sys.exc_info())  # the temporary file goes, then re-raise
            raise
        self._stack.__exit__(*exc)
