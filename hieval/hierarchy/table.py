"""The level table: one row per node with its ancestor at every depth level.

Why levels and not parent links: in ICD-9 leaves sit at different depths (364.3 is a child of
364, 364.11 a grandchild), and CoPHE compares codes level by level. A node counts at its own
depth and at every level above it, so the long ``code, level, ancestor`` table derived here is
all the evaluation needs: one join and one group-by.

The level order (deepest first, the root last) and the root's code travel with the Parquet file
as key-value metadata, so readers never guess them.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from hieval import paths
from hieval.atomic import atomic_path
from hieval.errors import HierarchyError, preview

_META_LEVELS = "hieval.levels"
_META_ROOT = "hieval.root"
_META_SOURCE = "hieval.source"
_META_CODE_SYSTEM = "hieval.code_system"


@dataclass(frozen=True)
class LevelTable:
    """A hierarchy as levels.

    ``frame`` has columns ``code, kind, depth, <one column per level between the deepest and
    the root>, title``; ``levels`` lists the level names deepest first, ending with ``root``.
    ``code_system`` (``icd9``, ``icd10`` or ``verbatim``, see :mod:`hieval.codesystem`) says
    how labels are read against the tree; it travels with the Parquet files, so every later
    stage reads codes the way the tree was built for.
    """

    frame: pl.DataFrame
    levels: tuple[str, ...]
    root: str
    source: str = ""
    code_system: str = ""

    @functools.cached_property
    def known_codes(self) -> frozenset[str]:
        """The table's codes as a set, built once per table: every label file read against
        the table asks it of each of its distinct codes (the Evaluator, of every batch)."""
        return frozenset(self.frame["code"].to_list())

    @property
    def ancestor_columns(self) -> tuple[str, ...]:
        """Level columns of the frame: all levels but the deepest (the code itself) and root."""
        return self.levels[1:-1]

    def ancestors(self) -> pl.DataFrame:
        """The long ``code, level, ancestor`` table: each node at its own depth and above."""
        deepest = self.levels[0]
        parts = [
            self.frame.filter(pl.col("depth") == deepest).select(
                "code", pl.lit(deepest).alias("level"), pl.col("code").alias("ancestor")
            )
        ]
        parts += [
            self.frame.filter(pl.col(level).is_not_null()).select(
                "code", pl.lit(level).alias("level"), pl.col(level).alias("ancestor")
            )
            for level in self.ancestor_columns
        ]
        parts.append(
            self.frame.select(
                "code", pl.lit("root").alias("level"), pl.lit(self.root).alias("ancestor")
            )
        )
        order = {level: i for i, level in enumerate(self.levels)}
        return (
            pl.concat(parts)
            .with_columns(pl.col("level").replace_strict(order).alias("_order"))
            .sort("code", "_order")
            .drop("_order")
        )


def _path_problems(table: LevelTable) -> tuple[set[str], list[str]]:
    """The ancestors referenced but not defined as nodes, and what keeps nodes from a single
    path to the root (an ancestor below a node's depth, or above the level it is used at, or
    disagreeing with the node on a level above), as :func:`validate` reports them."""
    rank = {level: i for i, level in enumerate(table.levels)}
    rows = {r["code"]: r for r in table.frame.iter_rows(named=True)}
    missing_anc: set[str] = set()
    inconsistent: list[str] = []
    for code, row in rows.items():
        depth_rank = rank.get(row["depth"], -1)
        for level in table.ancestor_columns:
            anc = row[level]
            # Only the node itself may stand below its depth (a chapter with no blocks is its own
            # block); any other ancestor there would give the node a second path.
            if rank[level] < depth_rank and anc is not None and anc != code:
                inconsistent.append(f"{code} has an ancestor at {level}, below its depth")
            if anc is None or anc == code:
                continue
            parent = rows.get(anc)
            if parent is None:
                missing_anc.add(anc)
                continue
            if rank.get(parent["depth"], -1) < rank[level]:
                inconsistent.append(
                    f"{code}: {anc} is used at level {level} but is a {parent['depth']} node"
                )
            for above in table.ancestor_columns[table.ancestor_columns.index(level) + 1 :]:
                if parent[above] != row[above]:
                    inconsistent.append(
                        f"{code}: ancestor at {above} is {row[above]!r} but its {level} ancestor "
                        f"{anc} has {parent[above]!r} (two paths to the root)"
                    )
                    break
    return missing_anc, inconsistent


def validate(table: LevelTable, leaves: list[str] | None = None, strict: bool = True) -> list[str]:
    """Check that the table is a tree of levels; raise on violations, return warnings.

    Checks: codes are unique and non-empty; depths are known levels; each node is its own
    ancestor at its depth and has none below it; every referenced ancestor exists; every leaf
    code of the source is present. With ``strict`` (hierarchies hieval builds itself), an
    ancestor must also sit at or above the level it is referenced at and agree with the node on
    every level above, so each node has exactly one path to the root. Published graphs such as
    CoPHE's have known irregularities; for them these become warnings.
    """
    frame, levels = table.frame, table.levels
    problems: list[str] = []

    if frame["code"].null_count() or (frame["code"] == "").any():
        problems.append("some nodes have an empty code")
    dupes = frame.filter(pl.col("code").is_duplicated())["code"].unique().sort().to_list()
    if dupes:
        problems.append(f"codes listed more than once: {preview(dupes)}")
    bad_depth = frame.filter(~pl.col("depth").is_in(list(levels)))["code"].to_list()
    if bad_depth:
        problems.append(f"nodes with an unknown depth (levels are {levels}): {preview(bad_depth)}")

    warnings: list[str] = []
    missing_anc, inconsistent = _path_problems(table)
    if missing_anc:
        problems.append(
            f"ancestors referenced but not defined as nodes: {preview(sorted(missing_anc))}"
        )
    if inconsistent:
        if strict:
            problems.append(f"nodes without a single path to the root: {preview(inconsistent, 5)}")
        else:
            warnings.append(f"{len(inconsistent)} irregular nodes, e.g. {preview(inconsistent, 3)}")
    if leaves is not None:
        absent = sorted(set(leaves) - set(frame["code"].to_list()))
        if absent:
            problems.append(f"leaf codes of the source missing from the table: {preview(absent)}")
    if problems:
        raise HierarchyError(
            f"the {table.source or 'hierarchy'} is not a valid level tree:\n  - "
            + "\n  - ".join(problems)
        )
    return warnings


def write_level_table(
    table: LevelTable, levels_path: str | Path, ancestors_path: str | Path
) -> None:
    """Write ``levels.parquet`` and ``ancestors.parquet`` atomically, with the level order.

    The order goes in the Arrow schema's metadata, where pyarrow (and so pandas and DuckDB
    users) read it; pyarrow is imported here only: every workflow job and Snakemake itself
    import this module, and most never write a table.
    """
    import pyarrow.parquet as pq

    meta = {
        _META_LEVELS: json.dumps(list(table.levels)),
        _META_ROOT: table.root,
        _META_SOURCE: table.source,
        _META_CODE_SYSTEM: table.code_system,
    }
    for frame, path in (
        (table.frame.sort("code"), levels_path),
        (table.ancestors(), ancestors_path),
    ):
        arrow = frame.to_arrow()
        arrow = arrow.replace_schema_metadata({**(arrow.schema.metadata or {}), **meta})
        with atomic_path(path) as tmp:
            pq.write_table(arrow, tmp)


def read_level_table(levels_path: str | Path) -> LevelTable:
    """Read a level table written by :func:`write_level_table`."""
    try:
        frame = paths.read_parquet(levels_path)
        meta = _metadata(levels_path)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise HierarchyError(f"cannot read level table {levels_path}: {exc}") from exc
    if _META_LEVELS not in meta:
        raise HierarchyError(
            f"{levels_path} has no level order metadata; rebuild it with the `hierarchy` rule"
        )
    return LevelTable(
        frame=frame,
        levels=tuple(json.loads(meta[_META_LEVELS])),
        root=meta[_META_ROOT],
        source=meta.get(_META_SOURCE, ""),
        code_system=meta.get(_META_CODE_SYSTEM, ""),
    )


def _metadata(path: str | Path) -> dict[str, str]:
    """A Parquet file's key-value metadata (pyarrow stores the schema's metadata there too)."""
    return paths.read_parquet_metadata(path)


def level_order(path: str | Path) -> tuple[str, ...]:
    """The level order stored in a levels or ancestors Parquet file."""
    meta = _metadata(path)
    if _META_LEVELS not in meta:
        raise HierarchyError(f"{path} has no level order metadata; rebuild it with `hierarchy`")
    return tuple(json.loads(meta[_META_LEVELS]))
