"""Labels as sorted integer keys: the form the counting and ICM engines work on.

Why: an evaluation's cost is grouping tens of millions of (document, node) pairs. Strings are
turned into dense integers once — documents by their rank in ``doc_id`` order, codes by their
position in a *hierarchy order* — and each label becomes one int64 key::

    document << 25 | code << 1 | predicted        (predicted: 0 gold, 1 predicted)

Sorting the keys once puts each document's labels together and, for the same code, the gold
label before the predicted one. In the hierarchy order (codes sorted by their ancestors from the
root down) the codes under any node are adjacent, so within a document every level's groups are
already runs of the sorted keys: a group-by becomes a linear scan (a level whose nodes are not
contiguous, in an irregular published graph, is sorted on its own). Strings come back only for
the final, small tables.

Memory: a key is 8 bytes per label. Inputs are read in slices, so the label strings of a whole
file are never held at once; what is kept is the run-length encoding of the document column —
one string per document for sorted inputs (as normalisation writes them), one per row at worst.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from hieval import paths
from hieval.errors import InputError

if TYPE_CHECKING:
    import pyarrow as pa

    from hieval.inputs.handoff import KeptLabels

#: A table: a frame, a Parquet file, or a table written in parts (Parquet files whose rows,
#: one file after another, are the table's: :func:`hieval.inputs.pooled.documents_in_order`).
Source = str | Path | pl.DataFrame | list[Path]

CODE_BITS = 24  # up to ~16.7M distinct codes
DOC_SHIFT = CODE_BITS + 1  # a key's document part starts here
_LOW = (1 << DOC_SHIFT) - 1
_MAX_DOCS = 1 << (63 - DOC_SHIFT)
LEAF = "leaf"
ROWS_PER_SLICE = 4_000_000  # rows of a frame dictionary-encoded at once
# Labels counted together. A slice's temporaries (a few arrays of 8 bytes a label, 2 MB each)
# then stay in the cores' caches: at 100x MIMIC-III the count took 1.65-1.83 s against
# 1.87-2.08 s with 2^20 (2.8 against 3.5 CPU-s; 2^17 no faster). benchmarks/README.md.
LABELS_PER_CHUNK = 1 << 18


def read_frame(source: Source, columns: list[str] | None = None) -> pl.DataFrame:
    """A whole (small) table: a frame as is, or a Parquet file read."""
    if isinstance(source, pl.DataFrame):
        return source.select(columns) if columns else source
    return paths.read_parquet(source, columns=columns)


@dataclass(frozen=True)
class CodeSpace:
    """Codes and nodes as integers, derived from the ancestor table (``code, level, ancestor``).

    ``codes`` lists the codes by index in hierarchy order, followed by label codes the table
    lacks (they count at the ``leaf`` pseudo-level only). Per level, ``node_of[level]`` maps a
    code index to its ancestor's node index at that level (-1 when it has none) and
    ``nodes[level]`` names the nodes; ``contiguous[level]`` says whether the codes under each node
    are adjacent in code order once codes without a node there are left out, and
    ``unbroken[level]`` whether they are adjacent even with those (no code without a node sits
    between two codes of one node, as in a tree where every node has one parent). For the
    whole-tree measures, ``anc_ptr``/``anc_node`` list each
    code's distinct ancestors (itself included) as indices into ``tree_nodes``, and ``is_root``
    marks the tree nodes found at the last level given (the root, when levels end with it);
    ``ancestors`` keeps the (small) ``code, level, ancestor`` rows the space was built from.

    ``tree_slots[level]`` — ``(canonical, tree_id)`` per node of the level — is set when every
    node is first met at one and the same level by all the codes under it (a regular tree of
    levels, such as ICD-9's): then a code's distinct ancestors are exactly its ancestors at the
    levels where they are canonical, and the whole-tree groups are the levels' own groups,
    with no expansion and sort (see :meth:`hieval.engine.groups.Slice.tree_groups`).
    """

    codes: pl.Series
    levels: tuple[str, ...]
    node_of: dict[str, np.ndarray]
    nodes: dict[str, pl.Series]
    contiguous: dict[str, bool]
    tree_nodes: pl.Series
    anc_ptr: np.ndarray
    anc_node: np.ndarray
    is_root: np.ndarray
    ancestors: pl.DataFrame
    tree_slots: dict[str, tuple[np.ndarray, np.ndarray]] | None = None
    unbroken: dict[str, bool] | None = None

    @classmethod
    def build(
        cls, ancestors: Source, levels: tuple[str, ...], extra: pl.DataFrame | None = None
    ) -> CodeSpace:
        """The space of an ancestor table (plus ``extra`` rows for codes placed outside it);
        ``levels`` orders the table's levels deepest first, the root last."""
        anc = read_frame(ancestors, ["code", "level", "ancestor"])
        if extra is not None and extra.height:
            anc = pl.concat([anc, extra.select("code", "level", "ancestor")])
        anc = anc.filter(pl.col("level").is_in(list(levels)) & pl.col("ancestor").is_not_null())
        twice = anc.filter(pl.struct("code", "level").is_duplicated())
        if twice.height:  # a level table holds one ancestor per code and level: never guess
            row = twice.sort("code", "level", "ancestor").row(0, named=True)
            raise InputError(
                f"the ancestor table gives code {row['code']!r} more than one ancestor at level "
                f"{row['level']!r} ({twice.height} such rows); a level table holds one per level"
            )
        wide = anc.pivot(on="level", index="code", values="ancestor", aggregate_function="first")
        wide = wide.with_columns(  # a level without rows still exists: it just has no nodes
            (pl.col(lv) if lv in wide.columns else pl.lit(None)).cast(pl.String).alias(lv)
            for lv in levels
        )
        # Root-most level first: the codes under one node end up next to each other.
        wide = wide.sort([*reversed(levels), "code"], nulls_last=False)
        codes = wide["code"]
        node_of, nodes, contiguous, unbroken = {}, {}, {}, {}
        for level in levels:
            column = wide[level]
            named = column.drop_nulls()
            order = named.unique(maintain_order=True)
            index = column.replace_strict(
                order, pl.int_range(order.len(), eager=True), default=-1, return_dtype=pl.Int32
            )
            node_of[level] = index.to_numpy()
            nodes[level] = order
            runs = int(named.rle_id().max()) + 1 if named.len() else 0
            contiguous[level] = runs == order.len()
            index = node_of[level]
            starts = np.flatnonzero(np.concatenate(([index.size > 0], index[1:] != index[:-1])))
            unbroken[level] = int(np.count_nonzero(index[starts] >= 0)) == order.len()
        node_of[LEAF] = np.arange(codes.len(), dtype=np.int32)
        nodes[LEAF] = codes
        contiguous[LEAF] = unbroken[LEAF] = True
        pairs = anc.select("code", "ancestor").unique()
        tree_nodes = pairs["ancestor"].unique().sort()
        pairs = pairs.with_columns(
            pl.col("code")
            .replace_strict(codes, pl.int_range(codes.len(), eager=True), return_dtype=pl.Int64)
            .alias("ci"),
            pl.col("ancestor")
            .replace_strict(
                tree_nodes, pl.int_range(tree_nodes.len(), eager=True), return_dtype=pl.Int64
            )
            .alias("ni"),
        ).sort("ci", "ni")
        is_root = tree_nodes.is_in(anc.filter(pl.col("level") == levels[-1])["ancestor"].implode())
        tree_slots = _tree_slots(anc, list(levels), nodes, tree_nodes)
        anc_ptr = np.zeros(codes.len() + 1, dtype=np.int64)
        code_index = pairs["ci"].to_numpy().astype(np.int64)  # int64 even when empty
        np.cumsum(np.bincount(code_index, minlength=codes.len()), out=anc_ptr[1:])
        return cls(
            codes=codes,
            levels=tuple(levels),
            node_of=node_of,
            nodes=nodes,
            contiguous=contiguous,
            tree_nodes=tree_nodes,
            anc_ptr=anc_ptr,
            anc_node=pairs["ni"].to_numpy().astype(np.int64),
            is_root=is_root.to_numpy(),
            ancestors=anc,
            tree_slots=tree_slots,
            unbroken=unbroken,
        )

    @functools.cached_property
    def self_node(self) -> np.ndarray:
        """Per code index, the index of the code's own node in ``tree_nodes`` (-1: none);
        computed once per space (the Evaluator's batches share one)."""
        index = self.tree_nodes.search_sorted(self.codes).cast(pl.Int64).to_numpy()
        index = np.minimum(index, max(self.tree_nodes.len() - 1, 0))
        found = self.tree_nodes.len() > 0
        same = found and (self.tree_nodes.gather(index) == self.codes).to_numpy()
        return np.where(same, index, -1)

    def with_codes(self, more: list[str]) -> CodeSpace:
        """This space with label codes the ancestor table lacks appended (no ancestors)."""
        if not more:
            return self
        n = len(more)
        pad = np.full(n, -1, dtype=np.int32)
        codes = pl.concat([self.codes, pl.Series("code", more, dtype=pl.String)])
        node_of = {lv: np.concatenate([a, pad]) for lv, a in self.node_of.items() if lv != LEAF}
        node_of[LEAF] = np.arange(codes.len(), dtype=np.int32)
        nodes = dict(self.nodes, **{LEAF: codes})
        anc_ptr = np.concatenate([self.anc_ptr, np.full(n, self.anc_ptr[-1], dtype=np.int64)])
        return CodeSpace(
            codes, self.levels, node_of, nodes, self.contiguous, self.tree_nodes, anc_ptr,
            self.anc_node, self.is_root, self.ancestors, self.tree_slots, self.unbroken,
        )  # fmt: skip


def _tree_slots(
    anc: pl.DataFrame, levels: list[str], nodes: dict[str, pl.Series], tree_nodes: pl.Series
) -> dict[str, tuple[np.ndarray, np.ndarray]] | None:
    """Per level, which of its nodes are met there first (canonical) and their tree index;
    None when some node is met first at different levels by different codes."""
    rank = {level: i for i, level in enumerate(levels)}
    first = (
        anc.with_columns(pl.col("level").replace_strict(rank, return_dtype=pl.Int32).alias("r"))
        .group_by("code", "ancestor")
        .agg(pl.col("r").min())
        .group_by("ancestor")
        .agg(pl.col("r").min().alias("lo"), pl.col("r").max().alias("hi"))
    )
    if (first["lo"] != first["hi"]).any():
        return None
    canon = dict(zip(first["ancestor"].to_list(), first["lo"].to_list(), strict=True))
    slots = {}
    for level in levels:
        names = nodes[level]
        canonical = np.array([canon[n] == rank[level] for n in names.to_list()], dtype=bool)
        tree_id = tree_nodes.search_sorted(names).cast(pl.Int64).to_numpy()
        slots[level] = (canonical, tree_id)
    return slots


@dataclass(frozen=True)
class Labels:
    """Gold and predicted labels of one evaluation as sorted int64 keys (see the module doc).

    ``doc_ids`` names the documents by index (sorted); ``in_gold`` marks the documents the gold
    lists (an empty-code row lists a document with no labels). Keys may repeat (duplicate input
    rows); consumers skip repeats, which sit next to each other.
    """

    keys: np.ndarray
    doc_ids: pl.Series
    in_gold: np.ndarray
    space: CodeSpace

    def chunks(self, rows: int | None = None) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(first_doc, end_doc, keys)`` slices of about ``rows`` labels (default
        LABELS_PER_CHUNK), cut between documents, so that per-document results of a slice are
        complete."""
        keys, start = self.keys, 0
        rows = rows or LABELS_PER_CHUNK
        while start < keys.size:
            stop = min(start + rows, keys.size)
            if stop < keys.size:
                next_doc = (int(keys[stop - 1]) >> DOC_SHIFT) + 1
                stop = int(np.searchsorted(keys, next_doc << DOC_SHIFT))
            first = int(keys[start]) >> DOC_SHIFT
            end = (int(keys[stop - 1]) >> DOC_SHIFT) + 1
            yield first, end, keys[start:stop]
            start = stop


def split_keys(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Document, code and predicted flag of each key (repeats removed; keys are sorted)."""
    if keys.size > 1:
        keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
    return keys >> DOC_SHIFT, (keys & _LOW) >> 1, keys & 1


def _parts(source: Source) -> Iterator[tuple[pa.DictionaryArray, pa.DictionaryArray]]:
    """``doc_id, code`` of a source as dictionary arrays, a Parquet row group (or a slice of
    at most ROWS_PER_SLICE rows of a frame) at a time; a table in parts, part after part.

    Why dictionaries: a label file holds a few thousand distinct codes and one document per
    run of rows, so each code is looked up once per dictionary and each document once per run,
    and the rows themselves are only integers (normalisation writes dictionary-encoded pages).
    """
    import pyarrow as pa  # here: the workflow's Snakefile imports this module
    import pyarrow.parquet as pq

    if isinstance(source, pl.DataFrame):
        frame = source.select(pl.col("doc_id").cast(pl.String), pl.col("code").cast(pl.String))
        for offset in range(0, frame.height, ROWS_PER_SLICE):
            part = frame.slice(offset, ROWS_PER_SLICE).to_arrow()
            yield (
                part["doc_id"].combine_chunks().dictionary_encode(),
                part["code"].combine_chunks().dictionary_encode(),
            )
        return
    columns = ["doc_id", "code"]
    for path in source if isinstance(source, list) else [source]:
        parquet = pq.ParquetFile(Path(path), read_dictionary=columns)
        for group in range(parquet.num_row_groups):
            table = parquet.read_row_group(group, columns=columns)
            for batch in table.to_batches():  # the columns' chunks aligned, however read
                docs, codes = batch.column(0), batch.column(1)
                if not pa.types.is_dictionary(docs.type):  # not text: as text, as SQL casts
                    docs = docs.cast(pa.string()).dictionary_encode()
                if not pa.types.is_dictionary(codes.type):
                    codes = codes.cast(pa.string()).dictionary_encode()
                yield docs, codes


def _indices(values: pa.DictionaryArray) -> np.ndarray:
    """The dictionary indices of ``values`` as int32 (nulls, if any, as -1)."""
    # Through Polars: pyarrow's to_numpy and fill_null import pandas where it is installed.
    indices = pl.Series(values.indices)
    if values.null_count:
        indices = indices.fill_null(-1)
    return indices.to_numpy().astype(np.int32)  # a writable copy


def label_codes(source: Source) -> pl.Series:
    """The distinct codes of a label table: for Parquet, the union of its row groups'
    dictionaries (no row is decoded; :func:`hieval.inputs.handoff.distinct_values`)."""
    from hieval.inputs.handoff import distinct_values

    return distinct_values(source, "code").alias("code")


@dataclass
class _Chunk:
    """One part of a label table, read but not yet keyed: its runs of documents (first row,
    value) and its rows' positions in the table's concatenated code dictionaries."""

    flag: int
    run_start: np.ndarray
    run_first: int  # index of the chunk's first run among all runs
    code: np.ndarray  # -1: a row that only lists a document


def encode(
    gold: Source,
    predictions: Source,
    space: CodeSpace | Callable[[pl.Series], CodeSpace],
    *,
    threads: int | None = None,
) -> Labels:
    """Read the gold and predicted ``doc_id, code`` tables into sorted keys.

    ``space`` may be a function of the tables' distinct codes (taken from the dictionaries just
    read), for a code space built for the codes the labels hold without reading them twice.

    Documents are numbered in ``doc_id`` order over both tables; a code the space lacks is
    appended to it (it then counts at the leaf level only). The tables are read first (runs of
    documents, dictionary positions of codes), then every key is written once, with its final
    document number: no pass over the keys renumbers them. Tables this process has just
    normalised are taken from memory (:mod:`hieval.inputs.handoff`), to the same keys, on
    ``threads`` threads (default: the cores this process may use).
    """
    from_memory = _kept_labels(gold, predictions, space, threads=threads)
    if from_memory is not None:
        return from_memory
    chunks: list[_Chunk] = []
    run_values: list[pl.Series] = []
    dictionaries: list[pl.Series] = []
    n_runs = n_codes = gold_runs = 0
    for flag, source in ((0, gold), (1, predictions)):
        for docs, codes in _parts(source):
            if docs.null_count:
                raise InputError("a label row has no doc_id")
            if len(docs) == 0:
                continue
            doc = _indices(docs)
            start = np.flatnonzero(np.concatenate(([True], doc[1:] != doc[:-1])))
            run_values.append(pl.Series(docs.dictionary).gather(pl.Series(doc[start])))
            code = _indices(codes)
            code[code >= 0] += n_codes
            dictionaries.append(pl.Series(codes.dictionary, dtype=pl.String))
            n_codes += len(codes.dictionary)
            chunks.append(_Chunk(flag, start, n_runs, code))
            n_runs += start.size
        if flag == 0:
            gold_runs = n_runs
    names = pl.concat(dictionaries) if dictionaries else pl.Series([], dtype=pl.String)
    if callable(space):
        space = space(names.drop_nulls().unique().alias("code"))
    lookup = names.cast(pl.Enum(space.codes), strict=False).to_physical()
    lookup = lookup.fill_null(-1).to_numpy().astype(np.int64)
    extra_codes: dict[str, int] = {}
    for at in np.flatnonzero(lookup < 0):  # codes the space lacks
        name = names[int(at)]
        lookup[at] = extra_codes.setdefault(name, space.codes.len() + len(extra_codes))
    if space.codes.len() + len(extra_codes) > 1 << CODE_BITS:
        raise InputError(f"more than {1 << CODE_BITS} distinct codes cannot be counted")
    values = pl.concat(run_values) if run_values else pl.Series("value", [], dtype=pl.String)
    # Each run's document number is its value's dense rank (one sort, where taking the sorted
    # distinct values and searching each run's among them was three times the time).
    doc_of_run = values.rank("dense").cast(pl.Int64).to_numpy() - 1
    n_docs = int(doc_of_run.max()) + 1 if doc_of_run.size else 0
    if n_docs >= _MAX_DOCS:
        raise InputError(f"more than {_MAX_DOCS} documents cannot be counted at once")
    first_run = np.empty(n_docs, dtype=np.int64)
    first_run[doc_of_run] = np.arange(doc_of_run.size)
    doc_ids = values.gather(pl.Series(first_run)).alias("doc_id")
    in_gold = np.zeros(doc_ids.len(), dtype=bool)
    in_gold[doc_of_run[:gold_runs]] = True
    keys = np.empty(sum(int(np.count_nonzero(c.code >= 0)) for c in chunks), dtype=np.int64)
    filled = 0
    for chunk in chunks:
        lengths = np.diff(np.append(chunk.run_start, chunk.code.size))
        runs = doc_of_run[chunk.run_first : chunk.run_first + chunk.run_start.size]
        doc, code = np.repeat(runs, lengths), chunk.code
        if (code < 0).any():  # rows that only list a document
            doc, code = doc[code >= 0], code[code >= 0]
        key = keys[filled : filled + code.size]
        np.left_shift(doc, DOC_SHIFT, out=key)
        key |= lookup[code] << 1
        key |= chunk.flag
        filled += code.size
    keys.sort()
    return Labels(keys, doc_ids, in_gold, space.with_codes(list(extra_codes)))


def _kept_labels(
    gold: Source,
    predictions: Source,
    space: CodeSpace | Callable[[pl.Series], CodeSpace],
    *,
    threads: int | None = None,
) -> Labels | None:
    """:func:`encode`'s labels from the tables kept in memory when both files are kept (and
    unchanged since written); None otherwise, or when a code lies outside the space (codes
    appended to a space are numbered in the order the files' dictionaries meet them)."""
    from hieval.inputs import handoff

    tables = []
    for source in (gold, predictions):
        path = handoff.path_of(source)
        table = handoff.kept(path) if path is not None else None
        if table is None:
            return None
        tables.append(_Used.of(table))
    names = pl.concat([used.code_names for used in tables])
    if callable(space):
        space = space(names.unique().alias("code"))
    if not names.is_in(space.codes.implode()).all():
        return None
    doc_ids = _documents_of(tables)
    if doc_ids.len() >= _MAX_DOCS:
        raise InputError(f"more than {_MAX_DOCS} documents cannot be counted at once")
    keys = _remapped(tables, doc_ids=doc_ids, codes=space.codes, threads=threads)
    in_gold = np.zeros(doc_ids.len(), dtype=bool)
    in_gold[tables[0].positions(doc_ids)] = True
    return Labels(keys, doc_ids, in_gold, space.with_codes([]))


def _documents_of(tables: list[_Used]) -> pl.Series:
    """The documents of the tables, sorted (bytewise, as :func:`encode` numbers them)."""
    first = tables[0].doc_names
    if all(used.doc_names.equals(first) for used in tables[1:]):  # the common case
        return first.alias("doc_id")
    return pl.concat([used.doc_names for used in tables]).unique().sort().alias("doc_id")


def _remapped(
    tables: list[_Used], *, doc_ids: pl.Series, codes: pl.Series, threads: int | None
) -> np.ndarray:
    """The tables' keys renumbered (the gold's flag 0, the predictions' 1) and sorted, in
    parts of documents that are remapped and sorted side by side.

    Why: the keys of each table come sorted by document, and the renumbering keeps documents
    in order but not codes within them, so the whole array must be sorted again (about 0.1 s
    for 10.8M keys) after the remap (as much): the one stretch of the count on one core. Cut
    at a document, every key of the first part is below every key of the second, so the
    parts sort apart and their concatenation is the sorted whole."""
    from hieval.engine.groups import default_threads  # here: that module imports this one

    lookups = [used.lookups(doc_ids=doc_ids, codes=codes) for used in tables]
    size = sum(used.table.keys.size for used in tables)
    parts = min(threads or default_threads(), 2) if size >= _SPLIT_FROM else 1
    # The cut needs each table's documents in the order of ``doc_ids`` (both sort text by its
    # bytes and numbers by value); were they not, one part sorts the whole, as before.
    positions = [of[used.docs] for used, (of, _) in zip(tables, lookups, strict=True)]
    if not all(np.all(np.diff(position) > 0) for position in positions):
        parts = 1
    # Each table's key index at the part boundaries: the first key of a document at or after
    # the part's first document position.
    cuts = []
    for used, (doc_of, _) in zip(tables, lookups, strict=True):
        inner = [used.cut(doc_of, doc_ids.len() * k // parts) for k in range(1, parts)]
        cuts.append([0, *inner, used.table.keys.size])
    keys = np.empty(size, dtype=np.int64)
    bounds = [0]
    for part in range(parts):
        bounds.append(bounds[-1] + sum(cut[part + 1] - cut[part] for cut in cuts))

    def fill(part: int) -> None:
        at = bounds[part]
        for flag, (used, (doc_of, code_of), cut) in enumerate(
            zip(tables, lookups, cuts, strict=True)
        ):
            start, stop = cut[part], cut[part + 1]
            used.remap(keys[at : at + stop - start], doc_of, code_of, start=start, flag=flag)
            at += stop - start
        keys[bounds[part] : bounds[part + 1]].sort()

    if parts == 1:
        fill(0)
    else:
        with ThreadPoolExecutor(parts, thread_name_prefix="encode") as pool:
            list(pool.map(fill, range(parts)))  # numpy's take and sort release the GIL
    return keys


#: Labels from which :func:`_remapped` works in two parts (below, a thread costs more than
#: it saves).
_SPLIT_FROM = 1_000_000


@dataclass
class _Used:
    """A kept table and the document and code ranks its keys use (sorted)."""

    table: KeptLabels
    docs: np.ndarray
    codes: np.ndarray

    @classmethod
    def of(cls, table: KeptLabels) -> _Used:
        return cls(table, table.doc_positions, table.code_positions)

    @functools.cached_property
    def doc_names(self) -> pl.Series:
        return self.table.docs.gather(self.docs)

    @property
    def code_names(self) -> pl.Series:
        return self.table.codes.gather(self.codes)

    def positions(self, doc_ids: pl.Series) -> np.ndarray:
        """The positions of the table's documents in ``doc_ids`` (sorted, holding them)."""
        if doc_ids.len() == self.docs.size:  # they are all of them
            return np.arange(self.docs.size)
        return doc_ids.search_sorted(self.doc_names).to_numpy()

    def lookups(self, *, doc_ids: pl.Series, codes: pl.Series) -> tuple[np.ndarray, np.ndarray]:
        """The table's document ranks as positions in ``doc_ids`` and its code ranks as
        positions in ``codes`` (0 for ranks its keys do not use)."""
        table = self.table
        doc_of = np.zeros(table.docs.len(), dtype=np.int64)
        doc_of[self.docs] = self.positions(doc_ids)
        code_of = np.zeros(table.codes.len(), dtype=np.int64)
        code_of[self.codes] = self.code_names.cast(pl.Enum(codes)).to_physical().to_numpy()
        return doc_of, code_of

    def cut(self, doc_of: np.ndarray, position: int) -> int:
        """The index of the first key whose document is at ``position`` or after it in the
        documents ``doc_of`` maps to (the keys are sorted by document, and so are the
        positions)."""
        first = np.searchsorted(doc_of[self.docs], position)
        if first == self.docs.size:
            return self.table.keys.size
        return int(np.searchsorted(self.table.keys, self.docs[first] << self.table.rank_bits))

    def remap(
        self, out: np.ndarray, doc_of: np.ndarray, code_of: np.ndarray, *, start: int, flag: int
    ) -> None:
        """The keys from index ``start`` renumbered into ``out`` (as many as it holds): the
        labels' document numbers and code numbers (``doc_of``, ``code_of``: :meth:`lookups`)
        and predicted flag; slice by slice, with no full-size temporaries."""
        table = self.table
        mask = (1 << table.rank_bits) - 1
        scratch = np.empty(min(LABELS_PER_CHUNK, out.size), dtype=np.int64)
        for at in range(0, out.size, LABELS_PER_CHUNK):
            source = table.keys[start + at : start + min(at + LABELS_PER_CHUNK, out.size)]
            target = out[at : at + LABELS_PER_CHUNK]
            part = scratch[: source.size]
            np.right_shift(source, table.rank_bits, out=part)
            np.take(doc_of, part, out=target)
            target <<= DOC_SHIFT
            np.bitwise_and(source, mask, out=part)
            np.take(code_of, part, out=part)
            part <<= 1
            target |= part
            if flag:
                target |= 1
