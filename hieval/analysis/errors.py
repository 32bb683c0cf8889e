"""Error distance: how near each error of a model is to the nearest error on the other side of
its document (CoPHE's argument, per error: a miss by a sibling is not a miss by another chapter).

A false negative (a gold code the model missed) is paired with every false positive (a
predicted code not in the gold) of the same document, and gets the lowest level at which it
meets the nearest of them: for ICD-9 ``e1`` (siblings), ``e0`` (same category), ``c`` (same
block), ``chapter``, ``root`` (nothing in common below the root); ``none`` when the document has
no false positive at all (a plain miss). False positives get theirs the same way.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from hieval.analysis.tree import CODE_STATUSES, NONE, ROOT, Tree, labels_of
from hieval.metrics.uncertainty.settings import Settings
from hieval.metrics.uncertainty.weights import doc_keys, poisson_weights

FN, FP = "fn", "fp"
KINDS = (FN, FP)
#: The columns of ``errors.parquet`` (bootstrap intervals of ``share`` add ``low, high``).
COLUMNS = ("model", "kind", "lca_level", "code_status", "count", "share")
INTERVAL_COLUMNS = ("low", "high")
#: Replicate x document cells weighed at once (8 MB of float64), whatever the zoo's size.
_BLOCK_CELLS = 1 << 20


def _tables():
    """The interval helpers, imported on first use: they load scipy (through the AUC
    replicates), which importing the CLI or a workflow job must not (test_hierarchy_cache)."""
    from hieval.metrics.uncertainty import tables

    return tables


def errors_of(gold: pl.DataFrame, predicted: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The false negatives and false positives (``doc_id, code`` each) of one model."""
    gold, predicted = labels_of(gold), labels_of(predicted)
    missed = gold.join(predicted, on=["doc_id", "code"], how="anti")
    extra = predicted.join(gold, on=["doc_id", "code"], how="anti")
    return missed, extra


def error_pairs(missed: pl.DataFrame, extra: pl.DataFrame, tree: Tree) -> pl.DataFrame:
    """``doc_id, gold_code, predicted_code, lca_rank``: each missed and wrong code of one
    document that meet below the root, with the rank (in ``tree.levels``) of their lowest
    common ancestor. Pairs that meet only at the root have no row."""

    def up(frame: pl.DataFrame, name: str) -> pl.DataFrame:
        return frame.join(tree.ancestors, on="code").rename({"code": name})

    ranks = pl.DataFrame(
        {"level": list(tree.levels), "lca_rank": range(len(tree.levels))},
        schema={"level": pl.String, "lca_rank": pl.Int64},
    )
    return (
        up(missed, "gold_code")
        .join(up(extra, "predicted_code"), on=["doc_id", "level", "ancestor"])
        .join(ranks, on="level")
        .group_by("doc_id", "gold_code", "predicted_code")
        .agg(pl.col("lca_rank").min())
    )


def error_rows(gold: pl.DataFrame, predicted: pl.DataFrame, tree: Tree) -> pl.DataFrame:
    """One row per error: ``doc_id, kind, code, lca_level, code_status``."""
    missed, extra = errors_of(gold, predicted)
    pairs = error_pairs(missed, extra, tree)
    level_of = dict(enumerate(tree.levels))
    parts = []
    for kind, own, mine, other in (
        (FN, missed, "gold_code", extra),
        (FP, extra, "predicted_code", missed),
    ):
        nearest = (
            pairs.group_by("doc_id", mine).agg(pl.col("lca_rank").min()).rename({mine: "code"})
        )
        other_docs = other.select("doc_id").unique().with_columns(pl.lit(True).alias("_other"))
        parts.append(
            own.join(nearest, on=["doc_id", "code"], how="left")
            .join(other_docs, on="doc_id", how="left")
            .select(
                "doc_id",
                pl.lit(kind).alias("kind"),
                "code",
                pl.when(pl.col("lca_rank").is_not_null())
                .then(pl.col("lca_rank").replace_strict(level_of, return_dtype=pl.String))
                .when(pl.col("_other"))
                .then(pl.lit(ROOT))
                .otherwise(pl.lit(NONE))
                .alias("lca_level"),
            )
        )
    return (
        pl.concat(parts)
        .join(tree.statuses, on="code", how="left")
        .with_columns(pl.col("code_status").fill_null(CODE_STATUSES[0]))
    )


def error_distance(
    rows: pl.DataFrame, tree: Tree, *, model: str, settings: Settings | None = None
) -> pl.DataFrame:
    """``model, kind, lca_level, code_status, count, share`` from :func:`error_rows`: ``share``
    is the fraction of the model's errors of that kind (FN or FP), so each kind's shares sum
    to 1; rows in the order kind, level (deepest first, ``none`` last), status. With
    ``settings.bootstrap`` replicates, ``low, high``: the share's percentile interval."""
    counts = rows.group_by("kind", "lca_level", "code_status").agg(pl.len().alias("count"))
    counts = counts.with_columns(
        (pl.col("count") / pl.col("count").sum().over("kind")).alias("share"),
        pl.col("count").cast(pl.Int64),
    )
    table = sort_errors(counts.with_columns(pl.lit(model).alias("model")), tree).select(COLUMNS)
    if settings is None or not settings.bootstrap:
        return table
    low, high = share_intervals(rows, table, settings)
    return table.with_columns(pl.Series("low", low), pl.Series("high", high))


def share_intervals(
    rows: pl.DataFrame, table: pl.DataFrame, settings: Settings
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bounds of each row's share over bootstrap replicates of the documents: the
    replicate weights of :mod:`hieval.metrics.uncertainty` (they depend on the seed, the
    document and the replicate only, so an error table is resampled as the metrics are). A
    replicate without an error of a kind leaves that kind's shares undefined (NaN), and the
    bounds are those of the other replicates."""
    cells = table.with_row_index("_cell").select("kind", "lca_level", "code_status", "_cell")
    per_doc = (
        rows.join(cells, on=["kind", "lca_level", "code_status"])
        .group_by("doc_id", "_cell")
        .agg(pl.len().alias("n"))
    )
    docs = per_doc["doc_id"].unique().sort()
    doc_index = per_doc.join(pl.DataFrame({"doc_id": docs}).with_row_index("_doc"), on="doc_id")
    from scipy import sparse  # on use: importing the CLI must not load scipy

    counts = sparse.csr_matrix(
        (
            doc_index["n"].to_numpy().astype(np.float64),
            (doc_index["_doc"].to_numpy(), doc_index["_cell"].to_numpy()),
        ),
        shape=(docs.len(), table.height),
    )
    kinds = table["kind"].to_numpy()
    same_kind = (kinds[:, None] == kinds[None, :]).astype(np.float64)
    keys = doc_keys(docs.to_list())
    step = max(1, _BLOCK_CELLS // max(1, docs.len()))
    shares = []
    for first in range(0, settings.bootstrap, step):
        count = min(step, settings.bootstrap - first)
        weights = poisson_weights(keys, seed=settings.seed, first=first, count=count)
        weighted = np.asarray((counts.T @ weights.T).T)  # replicates x cells
        totals = weighted @ same_kind  # each cell's kind's total
        with np.errstate(invalid="ignore", divide="ignore"):
            shares.append(np.where(totals > 0, weighted / totals, np.nan))
    values = np.vstack(shares)
    share = table["share"].to_numpy()
    return _tables().interval_bounds(
        values, share, np.zeros(table.height, bool), settings.confidence
    )


def sort_errors(frame: pl.DataFrame, tree: Tree) -> pl.DataFrame:
    """Rows ordered by kind, LCA level (deepest first) and status (keeping models' order)."""
    orders = {
        "kind": list(KINDS),
        "lca_level": list(tree.lca_levels),
        "code_status": list(CODE_STATUSES),
    }
    keys = [pl.col(c).replace_strict(o, list(range(len(o)))) for c, o in orders.items()]
    return frame.sort(keys, maintain_order=True)
