"""The Information Contrast Model (Amigó & Delgado, ACL 2022), set-wise over sorted keys.

Per item i with predicted set P_i and gold set G_i:

    ICM_i = α1·IC(P_i) + α2·IC(G_i) − β·IC(P_i ∪ G_i)        (defaults α1 = α2 = 2, β = 3)

and a model's ICM is the mean over the gold items. IC(c) = −log2 P(c), with P(c) the share of
gold items carrying c or a descendant of c (1/N for a category never seen in the gold). The
IC of a set follows the paper's recursion through deepest common ancestors; on a tree it equals
the sum, over the union A(S) of the ancestor-or-self sets of the members, of
Δ(n) = IC(n) − IC(parent(n)), the root having IC 0. So the engine needs each label's
ancestors, one (document, node) group-by (a sort of integer keys, see groups.py) and a
sum per item, never a Python loop over items.

The per-item sums (IC of P, G and P ∪ G) are additive, kept per document, so documents can be
sharded; the node weights Δ depend on the whole gold and are computed once.

The same per-item node sets also give the hierarchical F (HF): example-based precision, recall
and F1 over the ancestor-augmented sets A(P_i) and A(G_i) (the root excluded).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from hieval.engine import counts
from hieval.engine.groups import Slice, sum_by_doc
from hieval.engine.keys import DOC_SHIFT, LEAF, CodeSpace, Labels
from hieval.engine.lca import LCA_SUMS, node_depths, slice_lca_sums
from hieval.errors import ConfigError

EMPTY_GOLD = ("keep", "drop")
#: Per-item sums add weights in units of 2^-40: a per-item IC stays far below the 2^23 bits a
#: BIGINT sum can hold at this scale, and the rounding (< 1e-12 per weight) is invisible.
FIXED_POINT = float(1 << 40)


@dataclass(frozen=True)
class IcmParams:
    """ICM's weights and what to do with gold items that have no labels.

    ``empty_gold = keep`` counts such items in N, where they score −IC(P_i) (as an empty root
    label would); ``drop`` leaves them out, as the ``pyevall`` reference implementation does.
    """

    alpha1: float = 2.0
    alpha2: float = 2.0
    beta: float = 3.0
    empty_gold: str = "keep"
    #: Jain et al. (2016) propensity parameters, for PROP-F (computed in the same pass).
    propensity_a: float = 0.55
    propensity_b: float = 1.5

    def __post_init__(self) -> None:
        # A NaN or infinite weight makes every ICM value NaN or infinite, silently: refuse it.
        for name in ("alpha1", "alpha2", "beta", "propensity_a", "propensity_b"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"icm {name} must be a number, not {value!r}")
            if not math.isfinite(value):
                raise ConfigError(f"icm {name} must be a finite number, not {value}")
        if self.empty_gold not in EMPTY_GOLD:
            raise ConfigError(
                f"icm empty_gold must be one of {EMPTY_GOLD}, not {self.empty_gold!r}"
            )

    def inverse_propensity(self, n_l: float, n: int) -> float:
        """Jain et al.'s 1/p_l = 1 + C·(N_l + B)^(−A), C = (ln N − 1)·(B + 1)^A, for a label held
        by ``n_l`` of ``n`` items; the one place the formula is written (node weights and
        PROP-F's empty class use it).

        Scalar on purpose: ``math.pow`` is the C library's, the same on every machine, whereas
        numpy's vectorised power may differ in the last bit with the CPU's SIMD support, and
        reports must regenerate bit for bit across machines.
        """
        a, b = self.propensity_a, self.propensity_b
        return 1 + (math.log(max(n, 1)) - 1) * math.pow(b + 1, a) * math.pow(n_l + b, -a)


def _items(labels: Labels, params: IcmParams) -> np.ndarray:
    """The gold items: every document the gold lists (``keep``), or only those with a gold
    label (``drop``)."""
    if params.empty_gold == "keep":
        return labels.in_gold
    labelled = np.zeros(labels.doc_ids.len(), dtype=bool)
    labelled[_gold_keys(labels.keys) >> DOC_SHIFT] = True
    return labels.in_gold & labelled


def _gold_keys(keys: np.ndarray, step: int = 1 << 22) -> np.ndarray:
    """The gold labels' keys (in slices: no full-size temporaries)."""
    return np.concatenate(
        [part[(part & 1) == 0] for part in (keys[i : i + step] for i in range(0, keys.size, step))]
        or [keys[:0]]
    )


def _self_node(space: CodeSpace) -> np.ndarray:
    """Per code index, the index of the code's own node in ``space.tree_nodes`` (-1: none)."""
    return space.self_node


def slice_frequencies(part: Slice) -> tuple[np.ndarray, np.ndarray]:
    """Per tree node, the documents of a (gold-only) slice with the node in A(G); per code,
    the documents holding the code itself."""
    n_nodes = part.space.tree_nodes.len()
    freq = sum(np.bincount(g.node, minlength=n_nodes) for g in part.tree_groups())
    leaf = part.groups(LEAF)
    return freq, np.bincount(leaf.node, minlength=part.space.codes.len())


def gold_only(labels: Labels) -> Labels:
    """The gold labels alone (node weights depend on the gold, never on a model)."""
    return Labels(_gold_keys(labels.keys), labels.doc_ids, labels.in_gold, labels.space)


@dataclass(frozen=True)
class GoldCounts:
    """What ICM's node weights need of a gold, additive over its documents: per tree node the
    gold items with the node in A(G) (``f``) and those holding it as a label (``n_l``), the
    number of items, and the ancestor rows the nodes come from. Batches of documents (the
    Evaluator) or shards add them up (:meth:`add`) and weigh the nodes once, exactly as a
    whole gold would."""

    nodes: pl.DataFrame  # node, f, n_l
    items: int
    ancestors: pl.DataFrame  # code, level, ancestor

    @classmethod
    def of(
        cls, labels: Labels, frequencies: tuple[np.ndarray, np.ndarray], params: IcmParams
    ) -> GoldCounts:
        """The counts of encoded labels, from their gold :func:`slice_frequencies` summed."""
        space = labels.space
        freq, exact_by_code = frequencies
        self_node = _self_node(space)
        exact = np.zeros(space.tree_nodes.len(), dtype=np.int64)
        has_self = self_node >= 0
        np.add.at(exact, self_node[has_self], exact_by_code[has_self])
        nodes = pl.DataFrame(
            {"node": space.tree_nodes, "f": freq, "n_l": exact},
            schema={"node": pl.String, "f": pl.Int64, "n_l": pl.Int64},
        )
        return cls(nodes, int(_items(labels, params).sum()), space.ancestors)

    @staticmethod
    def add(parts: list[GoldCounts]) -> GoldCounts:
        """The counts of documents in disjoint parts, summed (integers: exact in any order)."""
        nodes = (
            pl.concat([p.nodes for p in parts])
            .group_by("node")
            .agg(pl.col("f", "n_l").sum())
            .sort("node")
        )
        ancestors = pl.concat([p.ancestors.select("code", "level", "ancestor") for p in parts])
        return GoldCounts(nodes, sum(p.items for p in parts), ancestors.unique())


def node_weights(
    ancestors: pl.DataFrame,
    counts: pl.DataFrame,
    n_items: int,
    *,
    levels: tuple[str, ...],
    params: IcmParams,
) -> pl.DataFrame:
    """``node, ic, delta, inv_propensity`` for every node of ``ancestors`` (and placed code),
    from the gold counts ``node, f, n_l`` (:class:`GoldCounts`) and the number of items.

    ``inv_propensity`` is :meth:`IcmParams.inverse_propensity` with N the number of items and
    N_l the items whose gold holds label l itself; PROP-F weighs labels by it. ``levels`` must
    hold every level up to the root (deepest first): ICM uses the whole tree, whatever
    ``max_level`` the CoPHE metrics use.
    """
    import duckdb  # here: the workflow's Snakefile imports this module for IcmParams

    con = duckdb.connect()
    con.register("anc_in", ancestors)
    con.register("counts", counts.select("node", "f", "n_l"))
    weights = con.sql(
        """
        WITH anc AS (
            SELECT code, level, ancestor, list_position($levels, level) AS rank
            FROM anc_in WHERE list_contains($levels, level)
        ),
        nodes AS (SELECT ancestor AS node, bool_or(level = $root) AS is_root
                  FROM anc GROUP BY ancestor),
        ic AS (
            SELECT node, CASE WHEN is_root OR $n = 0 THEN 0.0
                              ELSE -log2(greatest(c.f, 1)::DOUBLE / $n) END AS ic, c.n_l
            FROM nodes JOIN counts c USING (node)
        ),
        parent AS (  -- the nearest ancestor above the node that is not the node itself
            SELECT code AS node, arg_min(ancestor, rank) AS parent
            FROM anc WHERE ancestor <> code GROUP BY code
        )
        SELECT ic.node, ic.ic, ic.ic - coalesce(up.ic, 0.0) AS delta, ic.n_l
        FROM ic LEFT JOIN parent USING (node) LEFT JOIN ic AS up ON up.node = parent.parent
        ORDER BY ic.node
    """,
        params={"levels": list(levels), "root": levels[-1], "n": n_items},
    ).pl()
    inverse = [params.inverse_propensity(float(n_l), n_items) for n_l in weights["n_l"]]
    return weights.select(
        "node", "ic", "delta", pl.Series("inv_propensity", inverse, dtype=pl.Float64)
    )


ITEM_SUMS = ("ic_pred", "ic_gold", "ic_union", "anc_pred", "anc_gold", "anc_both")
PROP_SUMS = ("w_pred", "w_gold", "w_both")
#: Every per-item sum, in the order of the rows of :func:`slice_item_sums`.
ALL_SUMS = (*ITEM_SUMS, *PROP_SUMS, *LCA_SUMS)


@dataclass(frozen=True)
class FixedWeights:
    """Node weights as fixed-point integers indexed like the code space (see FIXED_POINT):
    Δ and "counted in anc_*" per tree node, inverse propensity per code; and each tree node's
    depth (LCA-F's distances, :mod:`hieval.engine.lca`)."""

    delta: np.ndarray
    counted: np.ndarray
    propensity: np.ndarray
    depth: np.ndarray

    @classmethod
    def of(
        cls, weights: pl.DataFrame, space: CodeSpace, *, depth: np.ndarray | None = None
    ) -> FixedWeights:
        """``weights`` aligned to ``space``'s nodes in fixed point; ``depth``: the space's
        :func:`~hieval.engine.lca.node_depths` when the caller has them already (the
        Evaluator's whole tree, a tenth of a second at ICD-9's size)."""
        aligned = pl.DataFrame({"node": space.tree_nodes}).join(
            weights.select("node", "delta", "inv_propensity"),
            on="node",
            how="left",
            maintain_order="left",  # row i is the space's node i
        )
        known = aligned["delta"].is_not_null().to_numpy()
        delta = np.round(aligned["delta"].fill_null(0.0).to_numpy() * FIXED_POINT)
        prop = np.round(aligned["inv_propensity"].fill_null(0.0).to_numpy() * FIXED_POINT)
        self_node = _self_node(space)
        propensity = np.zeros(self_node.size, dtype=np.int64)
        has_self = self_node >= 0
        propensity[has_self] = prop.astype(np.int64)[self_node[has_self]]
        counted = known & ~space.is_root
        depth = node_depths(space) if depth is None else depth
        return cls(delta.astype(np.int64), counted, propensity, depth)


def slice_item_sums(part: Slice, weights: FixedWeights) -> np.ndarray:
    """ALL_SUMS (fixed point for the IC and w sums) per document of a slice, as the rows of
    a (12, documents) array."""
    sums = np.zeros((len(ALL_SUMS), part.n_docs), dtype=np.int64)
    if part.code.size >= counts.COMPILED_FROM_LABELS:  # one compiled pass per part
        from hieval.engine.counts_compiled import item_sums

        for tree in part.tree_groups():
            item_sums(tree, weights, sums, leaf=False)
        item_sums(part.groups(LEAF), weights, sums, leaf=True)
        sums[len(ITEM_SUMS) + len(PROP_SUMS) :] = slice_lca_sums(part, weights.depth)
        return sums
    for tree in part.tree_groups():
        xs, ys = tree.pred > 0, tree.gold > 0
        delta, counted = weights.delta[tree.node], weights.counted[tree.node]
        sums[: len(ITEM_SUMS)] += sum_by_doc(
            tree,
            [delta * xs, delta * ys, delta, counted & xs, counted & ys, counted & xs & ys],
            part.n_docs,
        )
    leaf = part.groups(LEAF)
    lx, ly = leaf.pred > 0, leaf.gold > 0
    prop = weights.propensity[leaf.node]
    props = slice(len(ITEM_SUMS), len(ITEM_SUMS) + len(PROP_SUMS))
    sums[props] = sum_by_doc(leaf, [prop * lx, prop * ly, prop * (lx & ly)], part.n_docs)
    sums[props.stop :] = slice_lca_sums(part, weights.depth)
    return sums


class ItemSums:
    """Accumulates per-document ICM, HF, PROP-F and LCA-F sums over slices."""

    def __init__(
        self,
        labels: Labels,
        weights: pl.DataFrame,
        params: IcmParams,
        fixed: FixedWeights | None = None,
    ) -> None:
        self.labels = labels
        # ``fixed``: ``weights`` already aligned to the labels' space (batches sharing one).
        self.weights = fixed if fixed is not None else FixedWeights.of(weights, labels.space)
        self.params = params
        self.sums = np.zeros((len(ALL_SUMS), labels.doc_ids.len()), np.int64)

    def add(self, first: int, end: int, sums: np.ndarray) -> None:
        """The sums of documents ``first`` to ``end`` - 1."""
        self.sums[:, first:end] = sums

    def frame(self) -> pl.DataFrame:
        """Per gold item: IC of P, G and P ∪ G, and what HF and PROP-F need.

        Columns ``doc_id, ic_pred, ic_gold, ic_union`` (bits), ``anc_pred, anc_gold,
        anc_both`` (sizes of the ancestor-augmented sets A(P), A(G) and their intersection,
        the root excluded), ``w_pred, w_gold, w_both`` (summed inverse propensities of the
        predicted, gold and shared labels themselves) and ``lca_pred, lca_gold, lca_both``
        (sizes of LCA-F's sets, augmented only up to each label's LCA with its nearest label
        on the other side, :mod:`hieval.engine.lca`). Items with neither labels nor
        predictions are listed with zeros. Weights are summed in fixed point (units of 2^-40,
        exact integer sums), so the result does not depend on the order slices are added in;
        the rounding is below 1e-10 per item.
        """
        items = np.flatnonzero(_items(self.labels, self.params))
        sums = self.sums[:, items]
        columns = {"doc_id": self.labels.doc_ids.gather(pl.Series(items, dtype=pl.Int64))}
        for name, row in zip(ALL_SUMS, sums, strict=True):
            columns[name] = row / FIXED_POINT if name.startswith(("ic_", "w_")) else row
        return pl.DataFrame(columns)
