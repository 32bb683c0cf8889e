"""The stages of an evaluation as functions over files: the Snakemake scripts and the CLI both
call these, so a number from ``snakemake`` and from ``hieval evaluate`` is the same number.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.parquet as pq

from hieval import paths
from hieval.atomic import atomic_path, write_text
from hieval.codes import ICD9_LEVELS
from hieval.engine import counts as counting
from hieval.engine import icm
from hieval.engine.driver import evaluate
from hieval.engine.groups import default_threads
from hieval.engine.icm import IcmParams
from hieval.engine.keys import ROWS_PER_SLICE
from hieval.errors import HievalError
from hieval.hierarchy.sources import DOWNLOADS, check_cached, load_source
from hieval.hierarchy.table import (
    LevelTable,
    read_level_table,
    validate,
    write_level_table,
)
from hieval.inputs import (
    InputRecord,
    LabelOptions,
    normalize_labels,
    placed_ancestors,
    write_parquet,
)
from hieval.metrics.prf import metrics_table, sort_tidy
from hieval.metrics.suite import suite_rows

Log = Callable[[str], None]


def build_hierarchy(
    source: str,
    path: str | Path | None,
    levels_out: str | Path,
    ancestors_out: str | Path,
    log: Log = print,
    *,
    sha256: str | None = None,
    max_level: str | None = None,
) -> LevelTable:
    """Load a hierarchy source, validate it, and write the level and ancestor tables.

    A downloaded source is re-checked against its pin first (``sha256``, else the download's
    own), so a cached file that was replaced or truncated is refused here, by the workflow and
    the CLI alike, instead of being read as a smaller tree. ``max_level``, when given, must be
    one of the hierarchy's levels: a user's tree has its levels known only now, and checking
    here stops the run before any file is normalised.
    """
    if path is not None and source in DOWNLOADS:
        check_cached(path, sha256 or DOWNLOADS[source].sha256)
    log(f"loading hierarchy source {source!r}" + (f" from {path}" if path else ""))
    table, leaves = load_source(source, path)
    if max_level is not None:
        try:
            counting.evaluated_levels(table.levels, max_level)
        except ValueError as exc:
            raise HievalError(f"{exc} (max_level in the config)") from None
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
    engine: Engine | None = None,
) -> InputRecord:
    """Normalise one label file against the hierarchy and write its record beside it."""
    table = read_level_table(levels)
    engine = engine or Engine()
    try:
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
            engine.duckdb_config(),
        )
    except (duckdb.OutOfMemoryException, HievalError) as exc:
        if not _out_of_memory(exc):
            raise
        raise HievalError(_memory_advice(name, Path(path), engine.memory_limit)) from None
    write_text(record_out, record.to_json())
    return record


def _out_of_memory(exc: BaseException) -> bool:
    """Whether DuckDB ran out of memory, directly or behind a reader's own error message."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, duckdb.OutOfMemoryException):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _memory_advice(name: str, path: Path, limit: str | None) -> str:
    """One line for DuckDB running out of memory: the file, the limit, and a limit that fits.

    Normalising a CSV file of S bytes took about 16 MB + 3 S in DuckDB (24 MB for 2.6 MB,
    96 MB for 28 MB, 2 threads); the advice rounds that up to 64 MB + 4 S, more for Parquet,
    whose compression hides the rows' size.
    """
    size = path.stat().st_size if path.is_file() else 0
    factor = 4 if path.suffix.lower() not in (".parquet", ".npz", ".npy") else 12
    need = 64 * 10**6 + factor * size
    bound = f"engine.memory_limit {limit}" if limit else "the memory DuckDB may use"
    return (
        f"{name}: DuckDB ran out of memory normalising {path} ({size / 1e6:.1f} MB) under "
        f"{bound}; raise engine.memory_limit, to about {math.ceil(need / 1e6)}MB or more "
        "for this file"
    )


#: Peak memory of a count job (one pass: counts, ICM sums, streamed per-document table), fitted
#: to benchmarks/harness.py at 100x and 1000x MIMIC-III with 2 threads (1.14 GB for 10.8M
#: labels, 2.37 GB for 108M) and rounded up: a base, each thread's slice in flight, the keys
#: and per-document sums.
BASE_BYTES, BYTES_PER_THREAD, BYTES_PER_LABEL = 550 * 2**20, 200 * 2**20, 20
_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}  # fmt: skip


def _size_bytes(text: str) -> int | None:
    """``2GB``, ``1.5 GiB``, ``800MB`` as bytes; None when ``text`` is not such a size.

    Accepted: a positive number and a unit, which DuckDB reads the same way. A bare number
    (DuckDB refuses it), DuckDB's percentages and ``-1`` are not sizes: the count jobs' budget
    needs bytes.
    """
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]+)\s*", str(text))
    if not match or match.group(2).upper() not in _UNITS or float(match.group(1)) <= 0:
        return None
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def memory_limit_problem(text: str) -> str | None:
    """Why ``text`` is not a memory limit both DuckDB and the count jobs read, or None."""
    if _size_bytes(text) is not None:
        return None
    return (
        f"{text!r} is not a size such as 2GB, 800MB or 1.5GiB (a number and a unit: "
        "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
    )


def parse_bytes(text: str) -> int:
    """``2GB``, ``1.5 GiB``, ``800MB`` as bytes (DuckDB's spelling of a memory limit)."""
    size = _size_bytes(text)
    if size is None:
        raise HievalError(f"engine.memory_limit {memory_limit_problem(text)}")
    return size


@dataclass(frozen=True)
class Engine:
    """Machine settings: threads, and memory bounds.

    Normalisation runs in DuckDB under ``memory_limit``, spilling to ``temp_directory``. The
    counting engine keeps 8 bytes per label in memory, per-document sums, and one slice of
    about a million labels per thread at work, so its peak grows with the labels of one job:
    with ``memory_limit`` a count job that would exceed it stops before reading, saying how
    many shards fit (``shards`` in the config splits the documents so that each job holds a
    part). ``threads`` defaults to the cores this process may use.
    """

    threads: int | None = None
    memory_limit: str | None = None
    temp_directory: str | None = None

    def __post_init__(self) -> None:
        # A limit DuckDB cannot parse fails deep in a job with a parser error: check it first.
        if self.memory_limit:
            parse_bytes(self.memory_limit)

    def duckdb_config(self) -> dict[str, str]:
        """DuckDB connection settings for the bounds that are set."""
        settings = {"memory_limit": self.memory_limit, "temp_directory": self.temp_directory}
        return {key: str(value) for key, value in settings.items() if value}

    def check_budget(self, labels: int) -> None:
        """Refuse a job whose planned peak exceeds ``memory_limit``, with the shards that fit."""
        if not self.memory_limit:
            return
        budget = parse_bytes(self.memory_limit)
        fixed = BASE_BYTES + BYTES_PER_THREAD * (self.threads or default_threads())
        need = fixed + BYTES_PER_LABEL * labels
        if need <= budget:
            return
        room = budget - fixed
        shards = math.ceil(BYTES_PER_LABEL * labels / room) if room > 0 else None
        advice = (
            f"set shards: {shards} (or more) in the config so that each count job holds a part"
            if shards
            else "raise engine.memory_limit: it is below the engine's fixed needs"
        )
        raise HievalError(
            f"this count job has {labels:,} labels and needs about {need / 1e9:.1f} GB, above "
            f"engine.memory_limit {self.memory_limit}; {advice}"
        )


def _placed(gold: str | Path, predictions: str | Path, table: LevelTable) -> pl.DataFrame | None:
    """Ancestor rows for codes of these files that the hierarchy lacks (placed by syntax)."""
    known = set(table.frame["code"].to_list())
    codes = (  # streamed: only the distinct codes are ever held
        pl.concat([paths.scan_parquet(path).select("code") for path in (gold, predictions)])
        .select(pl.col("code").drop_nulls().unique())
        .collect(engine="streaming")["code"]
    )
    unknown = {c for c in codes.to_list() if c not in known}
    return placed_ancestors(unknown, table) if unknown else None


def icm_weights(
    gold: str | Path,
    predictions: str | Path,
    levels: str | Path,
    ancestors: str | Path,
    out: str | Path,
    icm_params: IcmParams | None = None,
) -> pl.DataFrame:
    """Node weights (IC, Δ, inverse propensity) from the whole gold, written to ``out``.

    They depend on every gold document, so a sharded run computes them once per model (the
    model's own codes outside the hierarchy are placed first, so that they weigh too) and
    every shard reads them.
    """
    table = read_level_table(levels)
    weights = icm.node_weights(
        gold, ancestors, table.levels, icm_params or IcmParams(), _placed(gold, predictions, table)
    )
    write_parquet(weights, out)
    return weights


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
    weights: str | Path | None = None,
    engine: Engine | None = None,
    log: Log = print,
) -> pl.DataFrame:
    """Count one model (or one shard of its documents); write the additive per-node,
    per-document and per-item tables.

    Per-item sums (ICM, HF, PROP-F) use the whole hierarchy up to the root and the node
    ``weights`` of :func:`icm_weights` (computed here from this gold when not given: right for
    an unsharded run only).
    """
    table = read_level_table(levels)
    engine = engine or Engine()
    try:
        evaluated = counting.evaluated_levels(table.levels, max_level)
    except ValueError as exc:
        raise HievalError(str(exc)) from None
    engine.check_budget(label_rows(gold) + label_rows(predictions))
    extra = _placed(gold, predictions, table)
    params = icm_params or IcmParams()
    try:
        result = evaluate(
            gold,
            predictions,
            ancestors,
            table.levels,
            evaluated,
            params,
            paths.read_parquet(weights) if weights is not None else None,
            extra,
            engine.threads,
            Path(docs_out),
            log,
        )
    except ValueError as exc:
        raise HievalError(str(exc)) from None
    nodes, items = result.nodes, result.items
    write_parquet(nodes, nodes_out)
    write_parquet(items, items_out)
    log(
        f"{nodes.height} (family, level, node) rows over levels {evaluated}; "
        f"{result.documents} documents; {items.height} ICM items"
    )
    return nodes


def label_rows(path: str | Path) -> int:
    """Rows of a normalised label table, from its Parquet footer (nothing else is read)."""
    return pq.ParquetFile(path).metadata.num_rows


def split_by_document(source: str | Path, outputs: list[str | Path]) -> list[int]:
    """Split a label table into ``len(outputs)`` shards by a stable hash of ``doc_id``.

    md5 is fixed forever (unlike a library's internal hash), so a document lands in the same
    shard on every machine and version; all of a document's rows land together, which is what
    makes per-document counts add up exactly. The hash is taken once per distinct document (in
    DuckDB, as ``md5_number(doc_id) % n``); the table is streamed in slices, each appended to
    its shards' files, so memory stays bounded (the input's order, sorted for a normalised
    table, is kept). Returns the rows per shard.
    """
    con = duckdb.connect()
    shard_of = con.sql(
        "SELECT doc_id, (md5_number(doc_id) % $n::UHUGEINT)::BIGINT AS shard "
        "FROM (SELECT DISTINCT doc_id FROM read_parquet($source))",
        params={"n": len(outputs), "source": paths.duckdb_path(source)},
    ).pl()
    sizes = [0] * len(outputs)
    with contextlib.ExitStack() as stack:
        tmps = [stack.enter_context(atomic_path(out)) for out in outputs]
        writers: list[pq.ParquetWriter | None] = [None] * len(outputs)
        scan = paths.scan_parquet(source)
        for batch in scan.collect_batches(chunk_size=ROWS_PER_SLICE):
            batch = batch.join(shard_of, on="doc_id", how="left", maintain_order="left")
            for index, part in batch.partition_by("shard", as_dict=True).items():
                table = part.drop("shard").to_arrow()
                shard = int(index[0])
                if writers[shard] is None:
                    writers[shard] = stack.enter_context(
                        pq.ParquetWriter(tmps[shard], table.schema, compression="zstd")
                    )
                writers[shard].write_table(table)
                sizes[shard] += part.height
        empty = scan.head(0).collect()
        for tmp, writer in zip(tmps, writers, strict=True):
            if writer is None:  # no document hashed here: an empty shard, with the columns
                empty.write_parquet(tmp)
    return sizes


def gather_counts(
    nodes: list[str | Path],
    docs: list[str | Path],
    items: list[str | Path],
    nodes_out: str | Path,
    docs_out: str | Path,
    items_out: str | Path,
) -> None:
    """Reduce shard count tables exactly: node counts are summed, document and item rows
    (disjoint across shards) concatenated, all sorted as an unsharded run sorts them."""
    node_table = (
        pl.concat([paths.read_parquet(p) for p in nodes])
        .group_by("family", "level", "node")
        .agg(pl.col("tp", "fp", "fn", "n_gold", "n_pred").sum())
        .sort("family", "level", "node")
    )
    doc_table = pl.concat([paths.read_parquet(p) for p in docs]).sort("doc_id", "family", "level")
    item_table = pl.concat([paths.read_parquet(p) for p in items]).sort("doc_id")
    write_parquet(node_table, nodes_out)
    write_parquet(doc_table, docs_out)
    write_parquet(item_table, items_out)


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
    nodes = paths.read_parquet(counts_dir / "nodes.parquet")
    split = table.levels == ICD9_LEVELS
    n_labels = leaf_count(table) if label_set == "hierarchy" else None
    extra = suite_rows(
        nodes,
        paths.read_parquet(counts_dir / "docs.parquet"),
        paths.read_parquet(counts_dir / "items.parquet"),
        icm_params or IcmParams(),
        label_set,
        n_labels,
    ).select(pl.lit(model).alias("model"), pl.all())
    # A stable row order: the intermediate file is reproducible bit for bit, like the reports.
    tidy = sort_tidy(
        pl.concat([metrics_table(nodes, model, split_kinds=split), extra]),
        table.levels[:-1],
        [model],
    )
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
