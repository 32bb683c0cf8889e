"""Per-node and per-document TP/FP/FN for the flat, set-based and CoPHE families, in DuckDB.

One join of the labels with the ancestor table and one group-by over (document, level, node)
give x (predicted leaves under the node) and y (gold leaves under it). Then:

- CoPHE (count-preserving): TP = min(x, y), FP = max(x - y, 0), FN = max(y - x, 0);
- set-based: the same with x and y clipped to 0/1;
- flat: the set-based rule at the pseudo-level ``leaf``, where each code is its own node.

Both output tables are sums over documents, so shards of documents add up to the whole and a
bootstrap can resample documents without recounting.

Why the integer packing: the cost is the hash group-by over (document, level, node) after the
ancestor join (tens of millions of rows at MIMIC-IV scale). Strings are dictionary-encoded to
integers first, and the three keys are packed into one BIGINT — document << 24 | level << 20 |
node — so the group-by hashes a single integer; per-node sums then group on the low 24 bits and
per-document sums on the bits above 20. Gold and predicted leaves are summed in one integer too
(a gold leaf adds 1, a predicted one 2^20), so no outer join of two aggregates is needed.
Strings come back only for the final, small tables.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl

FAMILIES = ("flat", "set", "cophe")
LEAF = "leaf"
_NODE_BITS, _LEVEL_BITS = 20, 4  # up to ~1M nodes per level, 15 levels
_PRED = 1 << 20  # a predicted leaf's weight; gold leaves weigh 1 (< 2^20 per node and document)

Source = str | Path | pl.DataFrame


def evaluated_levels(levels: tuple[str, ...], max_level: str) -> tuple[str, ...]:
    """The hierarchy levels from the deepest up to ``max_level`` (never the root)."""
    usable = levels[:-1]
    if max_level not in usable:
        raise ValueError(
            f"max_level {max_level!r} is not a level of this hierarchy; choose one of {usable}"
        )
    return usable[: usable.index(max_level) + 1]


def connect(
    threads: int | None = None, memory_limit: str | None = None, temp_directory: str | None = None
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the engine settings (memory limit and spill folder bound the
    memory a large evaluation may take; DuckDB spills aggregates to disk beyond the limit)."""
    config = {"preserve_insertion_order": False}
    if threads:
        config["threads"] = int(threads)
    if memory_limit:
        config["memory_limit"] = memory_limit
    if temp_directory:
        config["temp_directory"] = str(temp_directory)
    con = duckdb.connect(config=config)
    con.execute("SET enable_progress_bar = false")  # logs are no place for a progress bar
    return con


def register_source(con: duckdb.DuckDBPyConnection, name: str, source: Source) -> None:
    """Make a Parquet file or a frame queryable as ``name`` (files are scanned, not loaded)."""
    if isinstance(source, pl.DataFrame):
        con.register(name, source)
    else:
        con.read_parquet(str(source)).create_view(name)


def count(
    gold: Source,
    predictions: Source,
    ancestors: Source,
    levels: tuple[str, ...],
    extra_ancestors: pl.DataFrame | None = None,
    threads: int | None = None,
    memory_limit: str | None = None,
    temp_directory: str | None = None,
    documents_per_chunk: int = 50_000,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Count one model against the gold; return the per-node and per-document tables.

    ``levels`` are the hierarchy levels to evaluate (see :func:`evaluated_levels`);
    ``extra_ancestors`` holds ancestor rows for codes placed outside the hierarchy.
    Inputs are Parquet paths or frames with ``doc_id, code`` (and ``code, level, ancestor``).
    """
    con = connect(threads, memory_limit, temp_directory)
    for name, source in (("gold_in", gold), ("pred_in", predictions), ("anc_in", ancestors)):
        register_source(con, name, source)
    if extra_ancestors is not None and extra_ancestors.height:
        con.register("extra_in", extra_ancestors)
        extra = "UNION ALL SELECT code, level, ancestor FROM extra_in"
    else:
        extra = ""
    all_levels = [LEAF, *levels]
    script = f"""
        CREATE TEMP TABLE labels AS
        SELECT doc_id, code, 1 AS w FROM gold_in WHERE code IS NOT NULL
        UNION ALL
        SELECT doc_id, code, {_PRED} FROM pred_in WHERE code IS NOT NULL;
        CREATE TEMP TABLE doc_ids AS
        SELECT doc_id, (row_number() OVER (ORDER BY doc_id) - 1)::BIGINT AS di
        FROM (SELECT DISTINCT doc_id FROM labels);
        CREATE TEMP TABLE code_ids AS
        SELECT code, (row_number() OVER (ORDER BY code) - 1)::INTEGER AS ci
        FROM (SELECT DISTINCT code FROM labels);
        CREATE TEMP TABLE level_nodes AS
        SELECT level, ancestor AS node,
               ((list_position($levels, level) - 1) << {_NODE_BITS})
               | (row_number() OVER (PARTITION BY level ORDER BY ancestor) - 1) AS lk
        FROM (SELECT DISTINCT a.level, a.ancestor
              FROM (SELECT code, level, ancestor FROM anc_in {extra}) a
              JOIN code_ids USING (code) WHERE list_contains($levels, a.level)
              UNION SELECT 'leaf', code FROM code_ids);
        CREATE TEMP TABLE code_nodes AS
        SELECT c.ci, n.lk
        FROM (SELECT code, level, ancestor FROM anc_in {extra}
              UNION ALL SELECT code, 'leaf', code FROM code_ids) a
        JOIN code_ids c USING (code)
        JOIN level_nodes n ON n.level = a.level AND n.node = a.ancestor;
        CREATE TEMP TABLE labels_i AS
        SELECT DISTINCT d.di, c.ci, l.w
        FROM labels l JOIN doc_ids d USING (doc_id) JOIN code_ids c USING (code)
    """
    if len(all_levels) > 1 << _LEVEL_BITS:
        raise ValueError(f"at most {(1 << _LEVEL_BITS) - 1} levels can be evaluated at once")
    for statement in script.split(";"):
        con.execute(statement, {"levels": all_levels} if "$levels" in statement else None)
        if "level_nodes AS" in statement:
            widest = con.execute(
                "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM level_nodes "
                "GROUP BY level)"
            ).fetchall()[0][0]
            if widest >= 1 << _NODE_BITS:  # the packed key would collide: refuse, never guess
                raise ValueError(
                    f"a level holds {widest} nodes; at most {(1 << _NODE_BITS) - 1}"
                    " nodes per level can be counted"
                )
    # Documents are counted in chunks: each chunk's hash table stays small (cache-friendly,
    # and memory stays bounded whatever the input size); counts add up exactly across chunks.
    # Six sums give every count: CoPHE FP = Σx − TP and FN = Σy − TP; set-based likewise with
    # x and y clipped. One pass per chunk computes the per-node and per-document sums together.
    n_docs = con.execute("SELECT count(*) FROM doc_ids").fetchall()[0][0]
    con.execute("""
        CREATE TEMP TABLE sums (lk BIGINT, dk BIGINT, c_tp HUGEINT, c_pred HUGEINT,
                                c_gold HUGEINT, s_tp BIGINT, s_pred BIGINT, s_gold BIGINT)""")
    for first in range(0, max(n_docs, 1), documents_per_chunk):
        con.execute(
            f"""
            INSERT INTO sums
            SELECT key & {(1 << (_NODE_BITS + _LEVEL_BITS)) - 1} AS lk,
                   key >> {_NODE_BITS} AS dk,
                   sum(least(x, y)), sum(x), sum(y),
                   count_if(x > 0 AND y > 0), count_if(x > 0), count_if(y > 0)
            FROM (SELECT key, s // {_PRED} AS x, s % {_PRED} AS y
                  FROM (SELECT (l.di << {_NODE_BITS + _LEVEL_BITS}) | cn.lk AS key,
                               sum(l.w)::BIGINT AS s
                        FROM labels_i l JOIN code_nodes cn USING (ci)
                        WHERE l.di >= $first AND l.di < $last
                        GROUP BY key))
            GROUP BY GROUPING SETS ((lk), (dk))
        """,
            {"first": first, "last": first + documents_per_chunk},
        )
    con.execute("""
        CREATE TEMP TABLE node_sums AS
        SELECT lk, NULL::BIGINT AS dk, sum(c_tp) AS c_tp, sum(c_pred) AS c_pred,
               sum(c_gold) AS c_gold, sum(s_tp) AS s_tp, sum(s_pred) AS s_pred,
               sum(s_gold) AS s_gold
        FROM sums WHERE dk IS NULL GROUP BY lk""")
    nodes = con.sql("""
        SELECT n.level, n.node, s.* EXCLUDE (lk, dk)
        FROM node_sums s JOIN level_nodes n USING (lk)
    """).pl()
    # The per-document table is long and large: build it in the engine, ordered by the integer
    # document id (assigned in doc_id order), so no string sort is needed.
    docs = con.sql(
        f"""
        WITH long AS (
            SELECT dk, 'flat' AS family, s_tp AS tp, s_pred - s_tp AS fp, s_gold - s_tp AS fn
            FROM sums WHERE lk IS NULL AND (dk & {(1 << _LEVEL_BITS) - 1}) = 0
            UNION ALL
            SELECT dk, 'set', s_tp, s_pred - s_tp, s_gold - s_tp
            FROM sums WHERE lk IS NULL AND (dk & {(1 << _LEVEL_BITS) - 1}) > 0
            UNION ALL
            SELECT dk, 'cophe', c_tp, c_pred - c_tp, c_gold - c_tp
            FROM sums WHERE lk IS NULL AND (dk & {(1 << _LEVEL_BITS) - 1}) > 0
        )
        SELECT d.doc_id, l.family, $levels[(l.dk & {(1 << _LEVEL_BITS) - 1}) + 1] AS level,
               l.tp::BIGINT AS tp, l.fp::BIGINT AS fp, l.fn::BIGINT AS fn
        FROM long l JOIN doc_ids d ON d.di = l.dk >> {_LEVEL_BITS}
        ORDER BY d.di, l.family, level
    """,
        params={"levels": all_levels},
    ).pl()
    return _nodes_by_family(nodes), docs


def _nodes_by_family(wide: pl.DataFrame) -> pl.DataFrame:
    """Turn the c_* (CoPHE) and s_* (set) node sums into rows per family (leaf rows: flat)."""
    leaf = pl.col("level") == LEAF
    parts = []
    for family, prefix, rows in (
        ("flat", "s_", leaf),
        ("set", "s_", ~leaf),
        ("cophe", "c_", ~leaf),
    ):
        tp, gold, pred = (pl.col(f"{prefix}{m}").cast(pl.Int64) for m in ("tp", "gold", "pred"))
        parts.append(
            wide.filter(rows).select(
                pl.lit(family).alias("family"),
                "level",
                "node",
                tp.alias("tp"),
                (pred - tp).alias("fp"),
                (gold - tp).alias("fn"),
                gold.alias("n_gold"),
                pred.alias("n_pred"),
            )
        )
    return pl.concat(parts).sort("family", "level", "node")
