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
    documents_per_chunk: int = 50_000,
) -> pl.DataFrame:
    """Per gold item: IC of P, G and P ∪ G, and what HF and PROP-F need.

    Columns ``doc_id, ic_pred, ic_gold, ic_union, n_pred, n_gold, n_both`` (n_* count the
    ancestor-augmented sets without the root) and ``w_pred, w_gold, w_both`` (summed inverse
    propensities of the predicted, gold and shared labels themselves). Items with neither
    labels nor predictions are listed with zeros. Weights are summed in fixed point (units of
    2^-40, exact integer sums), so the result does not depend on the order a parallel engine
    adds them in and is identical run after run; the rounding is below 1e-10 per item.
    """
    con = _connect(gold, ancestors, levels, extra_ancestors, params, predictions)
    con.register("weights", weights)
    # Integer keys and document chunks, as in hieval.counts: one small hash table per chunk.
    script = """
        CREATE TEMP TABLE doc_ids AS
        SELECT doc_id, (row_number() OVER (ORDER BY doc_id) - 1)::BIGINT AS di FROM items;
        CREATE TEMP TABLE labels AS
        SELECT doc_id, code, 1 AS flag FROM gold_in WHERE code IS NOT NULL
        UNION ALL SELECT doc_id, code, 2 FROM pred_in WHERE code IS NOT NULL;
        CREATE TEMP TABLE code_ids AS
        SELECT code, (row_number() OVER (ORDER BY code) - 1)::INTEGER AS ci
        FROM (SELECT DISTINCT code FROM labels);
        CREATE TEMP TABLE node_ids AS
        SELECT node, (row_number() OVER (ORDER BY node) - 1)::BIGINT AS ni,
               bool_or(is_root) AS is_root
        FROM (SELECT DISTINCT a.ancestor AS node, a.level = $root AS is_root
              FROM anc a JOIN code_ids USING (code))
        GROUP BY node;
        CREATE TEMP TABLE wq AS  -- fixed-point weights: integer sums are exact, order-free
        SELECT n.ni, n.is_root, CAST(round(w.delta * $scale) AS BIGINT) AS dq,
               CAST(round(w.inv_propensity * $scale) AS BIGINT) AS pq
        FROM node_ids n JOIN weights w USING (node);
        CREATE TEMP TABLE code_nodes AS
        SELECT DISTINCT c.ci, n.ni, a.ancestor = a.code AS is_self
        FROM anc a JOIN code_ids c USING (code) JOIN node_ids n ON n.node = a.ancestor;
        CREATE TEMP TABLE labels_i AS
        SELECT d.di, c.ci, bit_or(l.flag) AS flag
        FROM labels l JOIN doc_ids d USING (doc_id) JOIN code_ids c USING (code)
        GROUP BY d.di, c.ci
    """
    for statement in script.split(";"):
        needs = {
            k: v
            for k, v in {"root": levels[-1], "scale": FIXED_POINT}.items()
            if f"${k}" in statement
        }
        con.execute(statement, needs or None)
    con.execute("""
        CREATE TEMP TABLE sums (di BIGINT, ic_pred HUGEINT, ic_gold HUGEINT, ic_union HUGEINT,
                                n_pred BIGINT, n_gold BIGINT, n_both BIGINT,
                                w_pred HUGEINT, w_gold HUGEINT, w_both HUGEINT)""")
    n_items = con.execute("SELECT count(*) FROM doc_ids").fetchall()[0][0]
    for first in range(0, max(n_items, 1), documents_per_chunk):
        con.execute(
            f"""
            INSERT INTO sums
            WITH chunk AS (SELECT * FROM labels_i WHERE di >= $first AND di < $last),
            node_sets AS (  -- flag: 1 in gold, 2 predicted, 3 both
                SELECT (l.di << 32) | cn.ni AS key, bit_or(l.flag) AS flag
                FROM chunk l JOIN code_nodes cn USING (ci) GROUP BY key
            ),
            ic AS (
                SELECT ns.key >> 32 AS di,
                       sum(w.dq * (ns.flag >> 1)) AS ic_pred, sum(w.dq * (ns.flag & 1)) AS ic_gold,
                       sum(w.dq) AS ic_union,
                       count_if(NOT w.is_root AND ns.flag >= 2) AS n_pred,
                       count_if(NOT w.is_root AND ns.flag & 1 = 1) AS n_gold,
                       count_if(NOT w.is_root AND ns.flag = 3) AS n_both
                FROM node_sets ns JOIN wq w ON w.ni = ns.key & {(1 << 32) - 1}
                GROUP BY ns.key >> 32
            ),
            prop AS (  -- the labels themselves, weighted by inverse propensity
                SELECT l.di, sum(w.pq * (l.flag >> 1)) AS w_pred,
                       sum(w.pq * (l.flag & 1)) AS w_gold, sum(w.pq * (l.flag = 3)::INT) AS w_both
                FROM chunk l JOIN code_nodes cn ON cn.ci = l.ci AND cn.is_self
                     JOIN wq w USING (ni)
                GROUP BY l.di
            )
            SELECT ic.*, prop.* EXCLUDE (di) FROM ic LEFT JOIN prop USING (di)
        """,
            {"first": first, "last": first + documents_per_chunk},
        )
    return con.sql(
        """
        SELECT d.doc_id,
               coalesce(ic_pred, 0) / $scale AS ic_pred, coalesce(ic_gold, 0) / $scale AS ic_gold,
               coalesce(ic_union, 0) / $scale AS ic_union,
               coalesce(n_pred, 0) AS n_pred, coalesce(n_gold, 0) AS n_gold,
               coalesce(n_both, 0) AS n_both,
               coalesce(w_pred, 0) / $scale AS w_pred, coalesce(w_gold, 0) / $scale AS w_gold,
               coalesce(w_both, 0) / $scale AS w_both
        FROM doc_ids d LEFT JOIN sums s USING (di)
        ORDER BY d.di
    """,
        params={"scale": FIXED_POINT},
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
