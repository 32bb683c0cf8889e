"""Error distance: how near each error of a model is to the nearest error on the other side of
its document (CoPHE's argument, per error: a miss by a sibling is not a miss by another chapter).

A false negative (a gold code the model missed) is paired with every false positive (a
predicted code not in the gold) of the same document, and gets the lowest level at which it
meets the nearest of them: for ICD-9 ``e1`` (siblings), ``e0`` (same category), ``c`` (same
block), ``chapter``, ``root`` (nothing in common below the root); ``none`` when the document has
no false positive at all (a plain miss). False positives get theirs the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from hieval.analysis.tree import CODE_STATUSES, NONE, ROOT, Tree
from hieval.engine.keys import CodeSpace, Labels, Source, encode, split_keys
from hieval.metrics.uncertainty.settings import Settings
from hieval.metrics.uncertainty.weights import doc_keys, poisson_weights

FN, FP = "fn", "fp"
KINDS = (FN, FP)
#: The columns of ``errors.parquet`` (bootstrap intervals of ``share`` add ``low, high``).
COLUMNS = ("model", "kind", "lca_level", "code_status", "count", "share")
INTERVAL_COLUMNS = ("low", "high")
#: Replicate x document cells weighed at once (8 MB of float64), whatever the zoo's size.
_BLOCK_CELLS = 1 << 20
#: Error rows whose cells are counted at once (2 MB of cell numbers).
_SLICE_ROWS = 1 << 18
#: Labels from which the pairing is compiled (:mod:`hieval.analysis.errors_compiled`); fewer
#: are paired here, vectorised (importing numba would cost more than their whole pairing).
COMPILED_FROM_LABELS = 100_000


def _tables():
    """The interval helpers, imported on first use: they load scipy (through the AUC
    replicates), which importing the CLI or a workflow job must not (test_hierarchy_cache)."""
    from hieval.metrics.uncertainty import tables

    return tables


@dataclass(frozen=True)
class ModelErrors:
    """One model's errors as integers: the count engine's keys (:mod:`hieval.engine.keys`:
    documents numbered in ``doc_id`` order, codes by their index in a code space of the
    analysis tree), so that finding the nearest error is a few sorted searches per level. At
    100x MIMIC-III (3.2M errors) joining every error's ancestors on ``doc_id, level, ancestor``
    text took 20 s and several GB.

    ``fn`` and ``fp``: ``(doc, code)`` arrays of the false negatives and the false positives;
    ``space`` the code space (``node_of[level]``: each code's ancestor node there, -1 none);
    ``doc_ids`` the documents' names by number.
    """

    fn: tuple[np.ndarray, np.ndarray]
    fp: tuple[np.ndarray, np.ndarray]
    space: CodeSpace
    doc_ids: pl.Series
    tree: Tree
    compiled: bool = False  # paired by the compiled kernels (many labels: see model_errors)
    _nearest: dict[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)
    _pair_keys: dict[int, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    def nearest(self, kind: str) -> np.ndarray:
        """:func:`nearest_ranks` of ``kind``, computed once (error rows and confusions both
        read them; compiled, both kinds at once, with the confusions' pairs:
        :meth:`near_pair_keys`)."""
        if kind not in self._nearest:
            if self.compiled:
                self._pair_pass(self.tree.rank(self.tree.category))
            else:
                self._nearest[kind] = nearest_ranks(self, kind)
        return self._nearest[kind]

    def near_pair_keys(self, deepest: int) -> np.ndarray:
        """Compiled: the keys of the pairs meeting at ``tree.levels[deepest]`` or deeper
        (:func:`hieval.analysis.errors_compiled.nearest_and_pair_keys`), handed once (let go
        here): those of the category level come from the pass that found the nearest levels."""
        if deepest not in self._pair_keys:
            self._pair_pass(deepest)
        return self._pair_keys.pop(deepest)

    def _pair_pass(self, deepest: int) -> None:
        from hieval.analysis import errors_compiled

        *ranks, keys = errors_compiled.nearest_and_pair_keys(
            self.fn, self.fp, self.level_nodes(), deepest
        )
        self._nearest.update(zip(KINDS, ranks, strict=True))
        self._pair_keys[deepest] = keys

    def level_nodes(self) -> np.ndarray:
        """Each code's node at each of ``tree.levels`` (rows, deepest first; -1: none, and at
        the root, where no error is said to meet another) as one int64 array."""
        codes = self.space.codes.len()
        node = np.full((len(self.tree.levels), codes), -1, dtype=np.int64)
        for at, level in enumerate(self.tree.levels):
            if level != ROOT:
                node[at] = self.space.node_of[level][:codes]
        return node

    def side(self, kind: str) -> tuple[np.ndarray, np.ndarray]:
        """``(doc, code)`` of the errors of ``kind``."""
        return self.fn if kind == FN else self.fp

    def node_keys(self, kind: str, level: str, rows: np.ndarray | None = None) -> np.ndarray:
        """Each error's (or each of ``rows``') document and ancestor node at ``level`` in one
        int64 (-1: no node). Errors come by document and by code in hierarchy order, so those
        with a node are in key order already when the level's nodes are contiguous (as in a
        tree)."""
        doc, code = self.side(kind)
        if rows is not None:
            doc, code = doc[rows], code[rows]
        node = self.space.node_of[level][code].astype(np.int64)
        width = max(1, self.space.nodes[level].len())
        return np.where(node >= 0, doc * width + node, -1)


def model_errors(
    gold: Source, predicted: Source, tree: Tree | Callable[[pl.Series], Tree]
) -> ModelErrors:
    """The :class:`ModelErrors` of one model's gold and predicted labels (frames or
    normalised Parquet files). ``tree`` may be a function of the labels' distinct codes, which
    the encoder reads from the files' dictionaries (no pass of its own over the files).

    A document's label listed in the gold only is a false negative, in the predictions only a
    false positive: the sorted keys put a document's gold label right before its predicted
    label of the same code."""
    trees = []

    def space_for(codes: pl.Series) -> CodeSpace:
        trees.append(tree(codes) if callable(tree) else tree)
        return CodeSpace.build(trees[0].ancestors, trees[0].levels)

    labels = encode(gold, predicted, space_for)
    return errors_of(labels, trees[0])


def errors_of(labels: Labels, tree: Tree) -> ModelErrors:
    """The :class:`ModelErrors` of labels encoded already, in any code space of the hierarchy
    that places their codes (two codes meet at a level where their ancestor nodes there are
    the same, whichever other codes the space holds): the count engine's own encoding of a
    run of documents serves (:class:`hieval.Evaluator`), ``tree`` giving the codes'
    statuses and the levels."""
    compiled = labels.keys.size >= COMPILED_FROM_LABELS
    if compiled:
        from hieval.analysis import errors_compiled

        fn, fp = errors_compiled.unmatched(labels.keys)  # split already
    else:
        fn, fp = (split_keys(keys)[:2] for keys in _unmatched(labels.keys))
    return ModelErrors(
        fn=fn,
        fp=fp,
        space=labels.space,
        doc_ids=labels.doc_ids,
        tree=tree,
        compiled=compiled,
    )


def _unmatched(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The gold keys without a predicted twin and the predicted keys without a gold one,
    vectorised (:func:`hieval.analysis.errors_compiled.unmatched` for many labels)."""
    # Neighbouring keys (sorted) that differ in the flag bit alone are a document's code in
    # the gold and in the predictions (a match); equal ones repeat a label (dropped first).
    step = keys[1:] ^ keys[:-1]
    if keys.size > 1 and not step.all():
        keys = keys[np.concatenate(([True], step != 0))]
        step = keys[1:] ^ keys[:-1]
    matched = np.zeros(keys.size, dtype=bool)
    twin = step == 1
    matched[1:] |= twin
    matched[:-1] |= twin
    predicted_flag = (keys & 1).astype(bool)
    return keys[~(matched | predicted_flag)], keys[predicted_flag & ~matched]


def nearest_ranks(errors: ModelErrors, kind: str) -> np.ndarray:
    """Per error of ``kind``, the rank (in ``tree.levels``) of the deepest level at which it
    meets an error of the other kind in its document (an ancestor node in common), -1 when it
    meets none below the root. Levels are searched deepest first, each for the errors not met
    yet."""
    other = FP if kind == FN else FN
    rank = np.full(errors.side(kind)[0].size, -1, dtype=np.int64)
    for at, level in enumerate(errors.tree.levels):
        if level == ROOT:
            continue
        open_ = np.flatnonzero(rank < 0)
        mine = errors.node_keys(kind, level, rows=open_)
        theirs = errors.node_keys(other, level)
        found = _contains(_ascending(theirs[theirs >= 0]), mine) & (mine >= 0)
        rank[open_[found]] = at
    return rank


def _is_ascending(values: np.ndarray) -> bool:
    """Whether ``values`` are in order (repeats allowed)."""
    return values.size < 2 or bool((values[1:] >= values[:-1]).all())


def _ascending(values: np.ndarray) -> np.ndarray:
    """``values`` sorted: as they are when they are in order already (no copy, no sort)."""
    return values if _is_ascending(values) else np.sort(values)


def _distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct ``values``: a sort and a comparison of neighbours (NumPy's
    ``unique`` hashes integer arrays, which took 3 s an array of a million keys here)."""
    values = np.sort(values)
    return values[np.concatenate(([True], values[1:] != values[:-1]))] if values.size else values


def _contains(sorted_values: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Whether each of ``values`` is in ``sorted_values`` (sorted; repeats do no harm)."""
    if not sorted_values.size:
        return np.zeros(values.size, dtype=bool)
    at = np.minimum(np.searchsorted(sorted_values, values), sorted_values.size - 1)
    return sorted_values[at] == values


def near_pairs(errors: ModelErrors, deepest: int) -> pl.DataFrame:
    """``doc, gold_code, predicted_code, lca_rank`` (integers) of each missed and wrong code
    of one document that meet at ``tree.levels[deepest]`` or deeper: per level, each missed
    code's run of wrong codes under the same node of the same document (sorted searches)."""
    if errors.compiled:
        from hieval.analysis import errors_compiled

        pairs = errors_compiled.near_pairs(errors.fn, errors.fp, errors.level_nodes(), deepest)
        return pl.DataFrame(
            dict(zip(("doc", "gold_code", "predicted_code", "lca_rank"), pairs, strict=True))
        )
    parts = [dict.fromkeys(("doc", "gold_code", "predicted_code", "lca_rank"), np.zeros(0, int))]
    for at, level in enumerate(errors.tree.levels[: deepest + 1]):
        if level == ROOT:
            continue
        # Only errors whose nearest error of the other kind is this near can be in a pair.
        fn_rows, fp_rows = (np.flatnonzero(errors.nearest(k) <= deepest) for k in KINDS)
        fn_key = errors.node_keys(FN, level, rows=fn_rows)
        fp_key = errors.node_keys(FP, level, rows=fp_rows)
        fn_rows, fn_key = fn_rows[fn_key >= 0], fn_key[fn_key >= 0]
        fp_rows, fp_key = fp_rows[fp_key >= 0], fp_key[fp_key >= 0]
        if not _is_ascending(fp_key):  # in key order already but in a level that is no tree's
            order = np.argsort(fp_key, kind="stable")
            fp_rows, fp_key = fp_rows[order], fp_key[order]
        fp_sorted = fp_key
        first = np.searchsorted(fp_sorted, fn_key, side="left")
        runs = np.searchsorted(fp_sorted, fn_key, side="right") - first
        gold = np.repeat(fn_rows, runs)
        start = np.repeat(first - np.cumsum(runs) + runs, runs)  # each run's first slot
        wrong = fp_rows[start + np.arange(gold.size)]
        parts.append(
            {
                "doc": errors.fn[0][gold],
                "gold_code": errors.fn[1][gold],
                "predicted_code": errors.fp[1][wrong],
                "lca_rank": np.full(gold.size, at),
            }
        )
    return (
        pl.concat([pl.DataFrame(part).cast(pl.Int64) for part in parts])
        .group_by("doc", "gold_code", "predicted_code")
        .agg(pl.col("lca_rank").min())
    )


#: The columns of :func:`error_rows` that place an error in a row of ``errors.parquet``.
CELL = ("kind", "lca_level", "code_status")


def error_rows(errors: ModelErrors) -> pl.DataFrame:
    """One row per error: ``doc`` (its document's number in ``errors.doc_ids``) and its
    ``kind``, ``lca_level`` and ``code_status`` as positions in :data:`KINDS`,
    ``tree.lca_levels`` and :data:`CODE_STATUSES`: small integers, so that millions of errors
    are counted in a fraction of a second (:func:`error_distance` names them)."""
    tree = errors.tree
    status = (
        pl.DataFrame({"code": errors.space.codes})
        .join(tree.statuses, on="code", how="left", maintain_order="left")  # row i: code i
        .select(
            pl.col("code_status")
            .fill_null(CODE_STATUSES[0])
            .replace_strict(CODE_STATUSES, range(len(CODE_STATUSES)), return_dtype=pl.UInt8)
        )
        .to_series()
        .to_numpy()
    )
    documents = 1 + max(int(doc.max(initial=-1)) for doc, _ in (errors.fn, errors.fp))
    parts = []
    for at, kind in enumerate(KINDS):
        doc, code = errors.side(kind)
        # Which documents hold an error of the other kind: a mask over their numbers (no
        # sort, no search).
        meets = np.zeros(documents, dtype=bool)
        meets[errors.side(FP if kind == FN else FN)[0]] = True
        rank = errors.nearest(kind)
        level = rank.astype(np.uint8)
        apart = rank < 0  # met nothing below the root: the root, or no error to meet
        level[apart] = np.where(meets[doc[apart]], tree.rank(ROOT), tree.rank(NONE))
        parts.append(
            pl.DataFrame(
                {
                    "doc": doc,  # the errors' own array: Polars takes NumPy's without a copy
                    "kind": np.full(doc.size, at, dtype=np.uint8),
                    "lca_level": level,
                    "code_status": status[code],
                }
            )
        )
    return pl.concat(parts)


def error_distance(
    rows: pl.DataFrame,
    tree: Tree,
    *,
    model: str,
    doc_ids: pl.Series,
    settings: Settings | None = None,
) -> pl.DataFrame:
    """``model, kind, lca_level, code_status, count, share`` from :func:`error_rows` (documents
    named by ``doc_ids``): ``share`` is the fraction of the model's errors of that kind (FN or
    FP), so each kind's shares sum to 1; rows in the order kind, level (deepest first,
    ``none`` last), status. With ``settings.bootstrap`` replicates, ``low, high``: the share's
    percentile interval."""
    counts = _cell_counts(rows, tree).with_columns(
        (pl.col("count") / pl.col("count").sum().over("kind")).alias("share"),
        pl.col("count").cast(pl.Int64),
    )
    names = {"kind": KINDS, "lca_level": tree.lca_levels, "code_status": CODE_STATUSES}
    counts = counts.with_columns(pl.col(c).alias(f"_{c}") for c in CELL).with_columns(
        pl.col(c).replace_strict(dict(enumerate(n)), return_dtype=pl.String)
        for c, n in names.items()
    )
    table = sort_errors(counts.with_columns(pl.lit(model).alias("model")), tree)
    if settings is None or not settings.bootstrap:
        return table.select(COLUMNS)
    low, high = share_intervals(rows, table, settings, doc_ids=doc_ids)
    return table.select(COLUMNS).with_columns(pl.Series("low", low), pl.Series("high", high))


def _cell_counts(rows: pl.DataFrame, tree: Tree) -> pl.DataFrame:
    """``kind, lca_level, code_status, count``: the rows of each cell that holds any, as
    ``rows.group_by(*CELL).agg(pl.len().alias("count"))`` gives them (same types; in cell
    order, which :func:`sort_errors` makes the table's). Why not that group-by: the cells are
    a few dozen small integers, so NumPy counts millions of errors in one ``bincount``, a
    tenth of the group-by's CPU."""
    shape = (len(KINDS), len(tree.lca_levels), len(CODE_STATUSES))
    count = np.zeros(int(np.prod(shape)), dtype=np.int64)
    # A slice at a time: the cell numbers (int64) of a slice fit in the caches, and the
    # memory they take is reused slice after slice instead of a fresh array of all rows.
    for part in rows.iter_slices(_SLICE_ROWS):
        cell = np.ravel_multi_index(tuple(part[c].to_numpy() for c in CELL), shape)
        count += np.bincount(cell, minlength=count.size)
    held = np.flatnonzero(count)
    kind, level, status = np.unravel_index(held, shape)
    return pl.DataFrame(
        {
            "kind": kind.astype(np.uint8),
            "lca_level": level.astype(np.uint8),
            "code_status": status.astype(np.uint8),
            "count": count[held].astype(np.uint32),
        }
    )


def share_intervals(
    rows: pl.DataFrame, table: pl.DataFrame, settings: Settings, *, doc_ids: pl.Series
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bounds of each row's share over bootstrap replicates of the documents: the
    replicate weights of :mod:`hieval.metrics.uncertainty` (they depend on the seed, the
    document and the replicate only, so an error table is resampled as the metrics are). A
    replicate without an error of a kind leaves that kind's shares undefined (NaN), and the
    bounds are those of the other replicates. ``table`` keeps :func:`error_rows`' integer
    cells as ``_kind, _lca_level, _code_status``."""
    cells = table.with_row_index("_cell").select(*(pl.col(f"_{c}").alias(c) for c in CELL), "_cell")
    per_doc = (
        rows.join(cells, on=list(CELL), maintain_order="none")
        .group_by("doc", "_cell")
        .agg(pl.len().alias("n"))
    )
    # Documents in doc_id order (their numbers are): the order the sums below add them in.
    docs = per_doc["doc"].unique().sort()
    doc_index = per_doc.join(  # cells placed by their indices: any order
        pl.DataFrame({"doc": docs}).with_row_index("_doc"), on="doc", maintain_order="none"
    )
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
    keys = doc_keys(doc_ids.gather(docs).to_list())
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
