"""The stages of an evaluation as functions over files: the Snakemake scripts and the CLI both
call these, so a number from ``snakemake`` and from ``hieval evaluate`` is the same number.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import polars as pl

from hieval import counts as counting
from hieval import icm
from hieval.atomic import write_text
from hieval.codes import ICD9_LEVELS
from hieval.errors import HievalError
from hieval.hierarchy.sources import load_source
from hieval.hierarchy.table import (
    LevelTable,
    read_level_table,
    validate,
    write_level_table,
)
from hieval.icm import IcmParams
from hieval.inputs import (
    InputRecord,
    LabelOptions,
    normalize_labels,
    placed_ancestors,
    write_parquet,
)
from hieval.metrics import metrics_table
from hieval.suite import suite_rows

Log = Callable[[str], None]


def build_hierarchy(
    source: str,
    path: str | Path | None,
    levels_out: str | Path,
    ancestors_out: str | Path,
    log: Log = print,
) -> LevelTable:
    """Load a hierarchy source, validate it, and write the level and ancestor tables."""
    log(f"loading hierarchy source {source!r}" + (f" from {path}" if path else ""))
    table, leaves = load_source(source, path)
    # The published CoPHE graph and users' JSON graphs have known irregularities: warn, not stop.
    strict = source in ("package", "cms") or (source == "file" and Path(path).suffix != ".json")
    for warning in validate(table, leaves, strict=strict):
        log(f"warning: {warning}")
    write_level_table(table, levels_out, ancestors_out)
    depths = table.frame.group_by("depth").len().sort("depth").rows()
    log(f"{table.frame.height} nodes, {len(leaves)} leaf codes; nodes per depth: {dict(depths)}")
    return table


def normalize(
    path: str | Path,
    name: str,
    out: str | Path,
    record_out: str | Path,
    levels: str | Path,
    options: LabelOptions,
    unknown_codes: str,
    gold: str | Path | None = None,
    unknown_docs: str = "error",
    default_threshold: float = 0.5,
    log: Log = print,
) -> InputRecord:
    """Normalise one label file against the hierarchy and write its record beside it."""
    table = read_level_table(levels)
    record = normalize_labels(
        path,
        name,
        out,
        set(table.frame["code"].to_list()),
        table,
        options,
        unknown_codes,
        gold,
        unknown_docs,
        default_threshold,
        log,
    )
    write_text(record_out, record.to_json())
    return record


def count_model(
    gold: str | Path,
    predictions: str | Path,
    levels: str | Path,
    ancestors: str | Path,
    max_level: str,
    nodes_out: str | Path,
    docs_out: str | Path,
    items_out: str | Path,
    icm_params: IcmParams | None = None,
    threads: int | None = None,
    log: Log = print,
) -> pl.DataFrame:
    """Count one model; write the additive per-node, per-document and per-item tables.

    Per-item sums (ICM, HF, PROP-F) use the whole hierarchy up to the root; the node weights
    come from the gold, with codes outside the hierarchy placed first so that they weigh too.
    """
    table = read_level_table(levels)
    try:
        evaluated = counting.evaluated_levels(table.levels, max_level)
    except ValueError as exc:
        raise HievalError(str(exc)) from None
    known = set(table.frame["code"].to_list())
    codes = pl.concat(
        [pl.read_parquet(gold, columns=["code"]), pl.read_parquet(predictions, columns=["code"])]
    )["code"]
    unknown = {c for c in codes.drop_nulls().unique().to_list() if c not in known}
    extra = placed_ancestors(unknown, table) if unknown else None
    nodes, docs = counting.count(gold, predictions, ancestors, evaluated, extra, threads)
    params = icm_params or IcmParams()
    weights = icm.node_weights(gold, ancestors, table.levels, params, extra)
    items = icm.item_sums(gold, predictions, ancestors, table.levels, weights, params, extra)
    write_parquet(nodes, nodes_out)
    write_parquet(docs, docs_out)
    write_parquet(items, items_out)
    log(
        f"{nodes.height} (family, level, node) rows over levels {evaluated}; "
        f"{docs['doc_id'].n_unique()} documents; {items.height} ICM items"
    )
    return nodes


def model_metrics(
    counts_dir: str | Path,
    model: str,
    out: str | Path,
    levels: str | Path,
    icm_params: IcmParams | None = None,
    label_set: str = "observed",
) -> pl.DataFrame:
    """Tidy metric rows of one model from its count tables in ``counts_dir``, written to
    ``out``: flat/set/CoPHE (diagnoses and procedures apart too, for ICD-9 hierarchies), ICM
    and the comparison metrics."""
    table = read_level_table(levels)
    counts_dir = Path(counts_dir)
    nodes = pl.read_parquet(counts_dir / "nodes.parquet")
    split = table.levels == ICD9_LEVELS
    n_labels = leaf_count(table) if label_set == "hierarchy" else None
    extra = suite_rows(
        nodes,
        pl.read_parquet(counts_dir / "docs.parquet"),
        pl.read_parquet(counts_dir / "items.parquet"),
        icm_params or IcmParams(),
        label_set,
        n_labels,
    ).select(pl.lit(model).alias("model"), pl.all())
    tidy = pl.concat([metrics_table(nodes, model, split_kinds=split), extra])
    write_parquet(tidy, out)
    return tidy


def leaf_count(table: LevelTable) -> int:
    """The number of leaves: nodes that are no other node's ancestor."""
    anc = table.ancestors()
    internal = anc.filter(pl.col("ancestor") != pl.col("code"))["ancestor"].unique()
    return table.frame.filter(~pl.col("code").is_in(internal.implode())).height


def read_records(paths: list[str | Path]) -> list[dict]:
    """Input records (JSON) written by :func:`normalize`."""
    return [json.loads(Path(p).read_text("utf-8")) for p in paths]
