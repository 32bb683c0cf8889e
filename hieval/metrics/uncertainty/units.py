"""One model's per-document tables (:class:`Units`), aligned to the documents and nodes
every model shares (:class:`Layout`): what every count-family and item replicate is a
weighted sum of."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl
from scipy import sparse

from hieval.codes.icd9 import CODE_TYPES
from hieval.engine.counts import family_counts
from hieval.engine.groups import Groups
from hieval.engine.icm import IcmParams
from hieval.engine.keys import LEAF
from hieval.metrics.registry import (
    COUNT_METRICS,
)
from hieval.metrics.suite import DEFAULT_LABEL_SET, icm_per_item, item_measures

log = logging.getLogger(__name__)

Key = tuple[str, str, str, str]  # family, level, average, metric


@dataclass(frozen=True)
class Layout:
    """What every model's tables are aligned to: the documents (the gold's, sorted), the
    evaluated levels and, per level, the nodes any model has a group at (sorted names)."""

    doc_ids: pl.Series
    levels: tuple[str, ...]  # evaluated levels, deepest first
    nodes: dict[str, pl.Series]  # LEAF and each evaluated level
    split_kinds: Callable[[str], str | None] | None  # node -> dx/proc (code system), or none
    label_set: str = DEFAULT_LABEL_SET
    n_labels: int | None = None

    @property
    def width(self) -> int:
        """The widest row of a replicate block: the documents, or a level's 3 × nodes."""
        return max(self.doc_ids.len(), *(3 * names.len() for names in self.nodes.values()))

    def kinds(self, level: str) -> dict[str, np.ndarray]:
        """Per code type, which nodes of ``level`` belong to it (code systems that split)."""
        branch = np.array([self.split_kinds(n) for n in self.nodes[level].to_list()], dtype=object)
        return {kind: branch == kind for kind in CODE_TYPES}

    def count_parts(self) -> list[tuple[str, str]]:
        """(family, level) of each node matrix: flat at the leaf, set-based and CoPHE per
        evaluated level."""
        return [("flat", LEAF)] + [(f, lv) for f in ("set", "cophe") for lv in self.levels]


@dataclass(frozen=True)
class Units:
    """One model's per-document tables, aligned to a :class:`Layout`.

    ``columns`` (documents × named columns) holds what is additive per document: TP/FP/FN per
    (family, level) and per code type, the item indicator and the per-item values of ICM,
    ICM(G,G), PROP-F and HF. ``nodes`` holds per (family, level) a sparse documents ×
    (3 × nodes) matrix, the TP, FP and FN blocks of each (document, node).
    """

    columns: np.ndarray
    names: dict[str, int]
    nodes: dict[tuple[str, str], sparse.csr_matrix]

    def column(self, name: str) -> np.ndarray:
        return self.columns[:, self.names[name]]


def node_table(groups: Groups, node_names: pl.Series, doc_index: np.ndarray) -> pl.DataFrame:
    """A model's groups at one level as ``doc, node, pred, gold`` with global document numbers
    (``doc_index`` maps the model's own) and node names."""
    return pl.DataFrame(
        {
            "doc": doc_index[groups.doc],
            "node": node_names.gather(pl.Series(groups.node, dtype=pl.Int64)),
            "pred": groups.pred,
            "gold": groups.gold,
        },
        schema={"doc": pl.Int64, "node": pl.String, "pred": pl.Int64, "gold": pl.Int64},
    )


def build_units(
    tables: dict[str, pl.DataFrame],
    items: pl.DataFrame,
    *,
    layout: Layout,
    params: IcmParams,
) -> Units:
    """A model's :class:`Units` from its per-level (document, node) tables (:func:`node_table`,
    ``leaf`` and each evaluated level) and its per-item sums (``item_sums.parquet``)."""
    n_docs = layout.doc_ids.len()
    names: dict[str, int] = {}
    columns: list[np.ndarray] = []

    def add(name: str, values: np.ndarray) -> None:
        names[name] = len(columns)
        columns.append(np.asarray(values, dtype=np.float64))

    nodes = {}
    for family, level in layout.count_parts():
        table = tables[level]
        node_names = layout.nodes[level]
        node = node_names.search_sorted(table["node"]).to_numpy().astype(np.int64)
        doc = table["doc"].to_numpy()
        g = Groups(doc, node, table["pred"].to_numpy(), table["gold"].to_numpy())
        tp, pred, gold = (np.asarray(v, dtype=np.int64) for v in family_counts(g, level)[family])
        n = node_names.len()
        blocks_ = (tp, pred - tp, gold - tp)
        matrix = sparse.csr_matrix(
            (
                np.concatenate(blocks_).astype(np.float64),
                (np.tile(doc, 3), np.concatenate([node + i * n for i in range(3)])),
            ),
            shape=(n_docs, 3 * n),
        )
        matrix.eliminate_zeros()
        nodes[family, level] = matrix
        kinds = {"": np.ones(n, dtype=bool)}
        if layout.split_kinds:
            kinds.update({f"_{kind}": mask for kind, mask in layout.kinds(level).items()})
        for suffix, mask in kinds.items():
            for i, metric in enumerate(COUNT_METRICS):
                add(f"{family}{suffix}|{level}|{metric}", matrix[:, i * n : (i + 1) * n] @ mask)

    position = layout.doc_ids.search_sorted(items["doc_id"]).to_numpy()
    if not layout.doc_ids.gather(pl.Series(position)).equals(items["doc_id"], check_names=False):
        raise ValueError("item_sums holds a document the gold lacks")

    def per_item(values: np.ndarray) -> np.ndarray:
        out = np.zeros(n_docs)
        out[position] = values
        return out

    add("item", per_item(np.ones(items.height)))
    icm, icm_gold = icm_per_item(items, params)
    add("icm|icm", per_item(icm))
    add("icm|icm_gold", per_item(icm_gold))
    for (family, metric), values in item_measures(items, params).items():
        add(f"{family}|{metric}", per_item(values))
    return Units(np.column_stack(columns), names, nodes)
