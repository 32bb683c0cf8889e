"""Per-node and per-document TP/FP/FN for the flat, set-based and CoPHE families, in DuckDB.

One join of the labels with the ancestor table and one group-by over (document, level, node)
give x (predicted leaves under the node) and y (gold leaves under it). Then:

- CoPHE (count-preserving): TP = min(x, y), FP = max(x - y, 0), FN = max(y - x, 0);
- set-based: the same with x and y clipped to 0/1;
- flat: the set-based rule at the pseudo-level ``leaf``, where each code is its own node.

Both output tables are sums over documents, so shards of documents add up to the whole and a
bootstrap can resample documents without recounting.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl

FAMILIES = ("flat", "set", "cophe")
NODE_COLUMNS = ("family", "level", "node", "tp", "fp", "fn", "n_gold", "n_pred")
DOC_COLUMNS = ("doc_id", "family", "level", "tp", "fp", "fn")


def evaluated_levels(levels: tuple[str, ...], max_level: str) -> tuple[str, ...]:
    """The hierarchy levels from the deepest up to ``max_level`` (never the root)."""
    usable = levels[:-1]
    if max_level not in usable:
        raise ValueError(
            f"max_level {max_level!r} is not a level of this hierarchy; choose one of {usable}"
        )
    return usable[: usable.index(max_level) + 1]


def count(
    gold: str | Path | pl.DataFrame,
    predictions: str | Path | pl.DataFrame,
    ancestors: str | Path | pl.DataFrame,
    levels: tuple[str, ...],
    extra_ancestors: pl.DataFrame | None = None,
    threads: int | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Count one model against the gold; return the per-node and per-document tables.

    ``levels`` are the hierarchy levels to evaluate (see :func:`evaluated_levels`);
    ``extra_ancestors`` holds ancestor rows for codes placed outside the hierarchy.
    Inputs are Parquet paths or frames with ``doc_id, code`` (and ``code, level, ancestor``).
    """
    con = duckdb.connect()
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    for name, source in (("gold_in", gold), ("pred_in", predictions), ("anc_in", ancestors)):
        if isinstance(source, pl.DataFrame):
            con.register(name, source)
        else:
            con.read_parquet(str(source)).create_view(name)
    if extra_ancestors is not None and extra_ancestors.height:
        con.register("extra_in", extra_ancestors)
        extra = (
            "UNION ALL SELECT code, level, ancestor FROM extra_in "
            "WHERE list_contains($levels, level)"
        )
    else:
        extra = ""
    con.execute(
        f"""
        CREATE TEMP TABLE xy AS
        WITH gold AS (SELECT DISTINCT doc_id, code FROM gold_in WHERE code IS NOT NULL),
             pred AS (SELECT DISTINCT doc_id, code FROM pred_in WHERE code IS NOT NULL),
             anc AS (
                SELECT code, level, ancestor FROM anc_in WHERE list_contains($levels, level)
                {extra}
                UNION ALL
                SELECT code, 'leaf', code FROM (SELECT code FROM gold UNION SELECT code FROM pred)
             ),
             y AS (SELECT doc_id, level, ancestor AS node, count(*) AS y
                   FROM gold JOIN anc USING (code) GROUP BY ALL),
             x AS (SELECT doc_id, level, ancestor AS node, count(*) AS x
                   FROM pred JOIN anc USING (code) GROUP BY ALL)
        SELECT doc_id, level, node, coalesce(x, 0) AS x, coalesce(y, 0) AS y
        FROM x FULL OUTER JOIN y USING (doc_id, level, node)
    """,
        {"levels": list(levels)},
    )
    con.execute("""
        CREATE TEMP VIEW family_counts AS
        SELECT doc_id, 'flat' AS family, level, node, least(x, 1) AS x, least(y, 1) AS y
        FROM xy WHERE level = 'leaf'
        UNION ALL
        SELECT doc_id, 'set', level, node, least(x, 1), least(y, 1) FROM xy WHERE level <> 'leaf'
        UNION ALL
        SELECT doc_id, 'cophe', level, node, x, y FROM xy WHERE level <> 'leaf'
    """)
    nodes = con.sql("""
        SELECT family, level, node,
               sum(least(x, y))::BIGINT AS tp,
               sum(greatest(x - y, 0))::BIGINT AS fp,
               sum(greatest(y - x, 0))::BIGINT AS fn,
               sum(y)::BIGINT AS n_gold,
               sum(x)::BIGINT AS n_pred
        FROM family_counts GROUP BY ALL ORDER BY family, level, node
    """).pl()
    docs = con.sql("""
        SELECT doc_id, family, level,
               sum(least(x, y))::BIGINT AS tp,
               sum(greatest(x - y, 0))::BIGINT AS fp,
               sum(greatest(y - x, 0))::BIGINT AS fn
        FROM family_counts GROUP BY ALL ORDER BY doc_id, family, level
    """).pl()
    return nodes, docs
