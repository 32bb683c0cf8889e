"""The Information Contrast Model (Amigó & Delgado, ACL 2022), set-wise in DuckDB.

Per item i with predicted set P_i and gold set G_i:

    ICM_i = α1·IC(P_i) + α2·IC(G_i) − β·IC(P_i ∪ G_i)        (defaults α1 = α2 = 2, β = 3)

and a model's ICM is the mean over the gold items. IC(c) = −log2 P(c), with P(c) the share of
gold items carrying c or a descendant of c (1/N for a category never seen in the gold). The
IC of a set follows the paper's recursion through deepest common ancestors; on a tree it equals
the sum, over the union A(S) of the ancestor-or-self sets of the members, of
Δ(n) = IC(n) − IC(parent(n)), the root having IC 0. So the engine needs one join with the
ancestor table, a distinct, and a sum per item, never a Python loop over items.

The per-item sums (IC of P, G and P ∪ G) are additive, kept per document, so documents can be
sharded; the node weights Δ depend on the whole gold and are computed once.

The same per-item node sets also give the hierarchical F (HF): example-based precision, recall
and F1 over the ancestor-augmented sets A(P_i) and A(G_i) (the root excluded).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import duckdb
import polars as pl

from hieval.counts import Source, register_source

EMPTY_GOLD = ("keep", "drop")


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
        if self.empty_gold not in EMPTY_GOLD:
            raise ValueError(f"icm empty_gold must be one of {EMPTY_GOLD}, not {self.empty_gold!r}")


def _connect(
    gold: Source,
    ancestors: Source,
    levels: tuple[str, ...],
    extra: pl.DataFrame | None,
    params: IcmParams,
    predictions: Source | None = None,
) -> duckdb.DuckDBPyConnection:
    """A connection with ``gold_in``, ``pred_in``, ``anc`` (ranked levels) and ``items``."""
    con = duckdb.connect()
    register_source(con, "gold_in", gold)
    if predictions is not None:
        register_source(con, "pred_in", predictions)
    register_source(con, "anc_base", ancestors)
    union = ""
    if extra is not None and extra.height:
        con.register("anc_extra", extra)
        union = "UNION ALL SELECT code, level, ancestor FROM anc_extra"
    con.execute(
        f"""
        CREATE TEMP TABLE anc AS
        SELECT code, level, ancestor, list_position($levels, level) AS rank
        FROM (SELECT code, level, ancestor FROM anc_base {union})""",
        {"levels": list(levels)},
    )
    where = "" if params.empty_gold == "keep" else "WHERE code IS NOT NULL"
    con.execute(f"CREATE TEMP TABLE items AS SELECT DISTINCT doc_id FROM gold_in {where}")
    return con


def node_weights(
    gold: Source,
    ancestors: Source,
    levels: tuple[str, ...],
    params: IcmParams,
    extra_ancestors: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """``node, ic, delta, inv_propensity`` for every node (and placed code).

    ``inv_propensity`` is Jain et al.'s 1/p_l = 1 + C·(N_l + B)^(−A) with
    C = (ln N − 1)·(B + 1)^A, N the number of items and N_l the items whose gold holds label l
    itself; PROP-F weighs labels by it.

    ``ancestors`` must hold every level up to the root (``levels``, deepest first): ICM uses
    the whole tree, whatever ``max_level`` the CoPHE metrics use. IC depends on the whole gold,
    so this is computed once and shared by every shard of documents.
    """
    con = _connect(gold, ancestors, levels, extra_ancestors, params)
    n_items = con.execute("SELECT count(*) FROM items").fetchall()[0][0]
    root = levels[-1]
    return con.sql(
        """
        WITH freq AS (
            SELECT a.ancestor AS node, count(DISTINCT g.doc_id) AS f
            FROM gold_in g JOIN anc a USING (code)
            WHERE g.doc_id IN (SELECT doc_id FROM items)
            GROUP BY a.ancestor
        ),
        exact AS (
            SELECT code AS node, count(DISTINCT doc_id) AS n_l FROM gold_in
            WHERE code IS NOT NULL AND doc_id IN (SELECT doc_id FROM items) GROUP BY code
        ),
        nodes AS (SELECT DISTINCT ancestor AS node, level = $root AS is_root FROM anc),
        ic AS (
            SELECT node, CASE WHEN is_root OR $n = 0 THEN 0.0
                              ELSE -log2(coalesce(f, 1)::DOUBLE / $n) END AS ic
            FROM nodes LEFT JOIN freq USING (node)
        ),
        parent AS (  -- the nearest ancestor above the node that is not the node itself
            SELECT code AS node, arg_min(ancestor, rank) AS parent
            FROM anc WHERE ancestor <> code GROUP BY code
        )
        SELECT ic.node, ic.ic, ic.ic - coalesce(up.ic, 0.0) AS delta,
               1 + (ln(greatest($n, 1)) - 1) * pow($b + 1, $a)
                   * pow(coalesce(exact.n_l, 0) + $b, -$a) AS inv_propensity
        FROM ic LEFT JOIN parent USING (node) LEFT JOIN ic AS up ON up.node = parent.parent
             LEFT JOIN exact USING (node)
        ORDER BY ic.node
    """,
        params={"root": root, "n": n_items, "a": params.propensity_a, "b": params.propensity_b},
    ).pl()


def item_sums(
    gold: Source,
    predictions: Source,
    ancestors: Source,
    levels: tuple[str, ...],
    weights: pl.DataFrame,
    params: IcmParams,
    extra_ancestors: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Per gold item: IC of P, G and P ∪ G, and what HF and PROP-F need.

    Columns ``doc_id, ic_pred, ic_gold, ic_union, n_pred, n_gold, n_both`` (n_* count the
    ancestor-augmented sets without the root) and ``w_pred, w_gold, w_both`` (summed inverse
    propensities of the predicted, gold and shared labels themselves). Items with neither
    labels nor predictions are listed with zeros. Each item's sum runs over its nodes in a
    fixed order, so results are identical run after run.
    """
    con = _connect(gold, ancestors, levels, extra_ancestors, params, predictions)
    con.register("weights", weights)
    return con.sql(
        """
        WITH labels AS (
            SELECT doc_id, code, 1 AS g, 0 AS p FROM gold_in
            WHERE code IS NOT NULL AND doc_id IN (SELECT doc_id FROM items)
            UNION ALL
            SELECT doc_id, code, 0, 1 FROM pred_in
            WHERE code IS NOT NULL AND doc_id IN (SELECT doc_id FROM items)
        ),
        node_sets AS (
            SELECT l.doc_id, a.ancestor AS node, a.level = $root AS is_root,
                   max(l.g) AS in_gold, max(l.p) AS in_pred
            FROM labels l JOIN anc a USING (code)
            GROUP BY l.doc_id, a.ancestor, a.level = $root
        ),
        sums AS (
            SELECT doc_id,
                   list_sum(list(w.delta * in_pred ORDER BY node)) AS ic_pred,
                   list_sum(list(w.delta * in_gold ORDER BY node)) AS ic_gold,
                   list_sum(list(w.delta ORDER BY node)) AS ic_union,
                   count(*) FILTER (WHERE NOT is_root AND in_pred = 1) AS n_pred,
                   count(*) FILTER (WHERE NOT is_root AND in_gold = 1) AS n_gold,
                   count(*) FILTER (WHERE NOT is_root AND in_pred = 1 AND in_gold = 1) AS n_both
            FROM node_sets JOIN weights w USING (node)
            GROUP BY doc_id
        ),
        label_sets AS (
            SELECT doc_id, code AS node, max(g) AS in_gold, max(p) AS in_pred
            FROM labels GROUP BY doc_id, code
        ),
        prop AS (
            SELECT doc_id,
                   list_sum(list(w.inv_propensity * in_pred ORDER BY node)) AS w_pred,
                   list_sum(list(w.inv_propensity * in_gold ORDER BY node)) AS w_gold,
                   list_sum(list(w.inv_propensity * in_pred * in_gold ORDER BY node)) AS w_both
            FROM label_sets JOIN weights w USING (node)
            GROUP BY doc_id
        )
        SELECT i.doc_id,
               coalesce(ic_pred, 0.0) AS ic_pred, coalesce(ic_gold, 0.0) AS ic_gold,
               coalesce(ic_union, 0.0) AS ic_union,
               coalesce(n_pred, 0) AS n_pred, coalesce(n_gold, 0) AS n_gold,
               coalesce(n_both, 0) AS n_both,
               coalesce(w_pred, 0.0) AS w_pred, coalesce(w_gold, 0.0) AS w_gold,
               coalesce(w_both, 0.0) AS w_both
        FROM items i LEFT JOIN sums USING (doc_id) LEFT JOIN prop USING (doc_id)
        ORDER BY i.doc_id
    """,
        params={"root": levels[-1]},
    ).pl()


def icm_values(items: pl.DataFrame, params: IcmParams) -> dict[str, float]:
    """ICM, ICM(G, G) and ICM-Norm = max(0, (ICM(P,G) + ICM(G,G)) / (2·ICM(G,G))).

    Means use a correctly rounded sum (``math.fsum``) so they do not depend on item order.
    """
    n = items.height
    if n == 0:
        return {"icm": 0.0, "icm_gold": 0.0, "icm_norm": 0.0}
    a1, a2, b = params.alpha1, params.alpha2, params.beta
    per_item = (a1 * items["ic_pred"] + a2 * items["ic_gold"] - b * items["ic_union"]).to_list()
    per_gold = ((a1 + a2 - b) * items["ic_gold"]).to_list()
    icm, icm_gold = math.fsum(per_item) / n, math.fsum(per_gold) / n
    norm = max(0.0, (icm + icm_gold) / (2 * icm_gold)) if icm_gold else 0.0
    return {"icm": icm, "icm_gold": icm_gold, "icm_norm": norm}


def icm(
    gold: Source,
    predictions: Source,
    ancestors: Source,
    levels: tuple[str, ...],
    params: IcmParams | None = None,
    extra_ancestors: pl.DataFrame | None = None,
) -> dict[str, float]:
    """ICM of one model in one call (weights from this gold, then the per-item sums)."""
    params = params or IcmParams()
    weights = node_weights(gold, ancestors, levels, params, extra_ancestors)
    items = item_sums(gold, predictions, ancestors, levels, weights, params, extra_ancestors)
    return icm_values(items, params)
