"""Subgroups: is a model worse for some patients? Documents are split by the attributes of a
``doc_groups`` table (``doc_id, <attribute>...``: sex, age band, admission type, any columns),
and the headline P/R/F1 of each group is computed from the model's per-document counts.

A micro-averaged count metric of a group evaluated alone is the ratio of the group's summed
per-document TP, FP and FN (a document's counts depend on that document only), so the rows
here equal an evaluation of the group's documents by themselves. ICM is not: its information
content comes from the whole gold, so each group's ICM is computed from the group's own labels
(:func:`group_icm`, the count engine on the group's documents alone), and its interval resamples
the group's items with those weights fixed, as the metrics' own bootstrap does.

For each attribute and metric, the largest gap between its groups gets a bootstrap interval
(documents resampled within their groups, with the replicate weights of the metrics' own
bootstrap) and a permutation p-value (group labels shuffled over the attribute's documents),
Holm-adjusted over the attributes. ICM's gap gets its interval and a p-value from the same
shuffles, each shuffled group's ICM recounted by the count engine with the group's own
information content (:func:`icm_recount`): a group's ICM is not a sum of per-document terms
fixed in advance, since its node weights come from its own gold counts. The recounts are
bounded (:data:`ICM_RECOUNT_CALLS`, :data:`ICM_RECOUNT_DOCUMENTS`); past the bound ICM's gap
has no p-value, with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from hieval import paths
from hieval.engine.icm import IcmParams
from hieval.errors import InputError, preview_value
from hieval.metrics.count_measures import PRF_MEASURES
from hieval.metrics.registry import HEADLINE_FAMILIES, OVERALL
from hieval.metrics.suite import icm_per_item, icm_values
from hieval.metrics.uncertainty.settings import Settings
from hieval.metrics.uncertainty.weights import doc_keys, poisson_weights

log = logging.getLogger(__name__)

#: The group of documents the table does not list, or lists without a value.
MISSING = "(missing)"
#: The (family, level) of the headline rows, micro-averaged: flat F1 at the leaves, set-based
#: and CoPHE pooled over the evaluated levels.
COLUMNS = (
    "attribute", "group", "model", "family", "level", "average", "metric",
    "value", "low", "high", "documents",
)  # fmt: skip
GAP_COLUMNS = (
    "attribute", "model", "family", "level", "average", "metric", "high_group", "low_group",
    "gap", "low", "high", "p_value", "p_adjusted", "permutations",
)  # fmt: skip
#: Replicate x document cells weighed at once (8 MB of float64).
_BLOCK_CELLS = 1 << 20


def _tables():
    """The interval helpers, imported on first use: they load scipy (through the AUC
    replicates), which importing the CLI or a workflow job must not (test_hierarchy_cache)."""
    from hieval.metrics.uncertainty import tables

    return tables


def read_doc_groups(path: str | Path) -> pl.DataFrame:
    """The ``doc_groups`` table, every column as text: CSV, TSV (``.tsv``, ``.txt``) or
    Parquet, with a ``doc_id`` column, at least one attribute column, each document once."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"doc_groups: no file {path}")
    try:
        if path.suffix == ".parquet":
            frame = paths.read_parquet(path)
            frame = frame.select(pl.all().cast(pl.String))
        else:
            separator = "\t" if path.suffix in (".tsv", ".txt") else ","
            frame = paths.read_csv(path, separator=separator, infer_schema=False)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise InputError(f"doc_groups: cannot read {path}: {exc}") from exc
    if "doc_id" not in frame.columns:
        raise InputError(
            f"doc_groups {path}: no doc_id column (columns: {', '.join(frame.columns)}); the "
            "table needs doc_id and one column per attribute"
        )
    if frame.width < 2:
        raise InputError(f"doc_groups {path}: no attribute column beside doc_id")
    dupes = frame.filter(pl.col("doc_id").is_duplicated())["doc_id"]
    if dupes.len():
        raise InputError(
            f"doc_groups {path}: document {preview_value(dupes[0])} is listed more than once; "
            "give each document one row"
        )
    return frame.filter(pl.col("doc_id").is_not_null())


def assignment(doc_ids: pl.Series, groups: pl.DataFrame) -> pl.DataFrame:
    """``doc_id, attribute, group`` for every document of ``doc_ids`` (the gold's) and every
    attribute; documents the table lacks, and empty values, are the group ``(missing)``."""
    attributes = [c for c in groups.columns if c != "doc_id"]
    frame = pl.DataFrame({"doc_id": doc_ids}).join(
        groups, on="doc_id", how="left", maintain_order="left"
    )
    return frame.unpivot(
        attributes, index="doc_id", variable_name="attribute", value_name="group"
    ).with_columns(
        pl.when(pl.col("group").is_null() | (pl.col("group") == ""))
        .then(pl.lit(MISSING))
        .otherwise(pl.col("group"))
        .alias("group")
    )


def headline_counts(docs: pl.DataFrame, doc_ids: pl.Series) -> dict[tuple[str, str], np.ndarray]:
    """``(family, level) -> (documents x 3)`` TP, FP, FN per document of ``doc_ids`` (in that
    order) from a model's per-document count table (levels summed for ``overall``)."""
    index = pl.DataFrame({"doc_id": doc_ids}).with_row_index("_doc")
    out = {}
    for family, level in HEADLINE_FAMILIES:
        rows = docs.filter(pl.col("family") == family)
        if level != OVERALL:
            rows = rows.filter(pl.col("level") == level)
        summed = rows.group_by("doc_id").agg(pl.col("tp", "fp", "fn").sum())
        aligned = index.join(summed, on="doc_id", how="left", maintain_order="none")
        aligned = aligned.sort("_doc").fill_null(0)
        out[(family, level)] = aligned.select("tp", "fp", "fn").to_numpy().astype(np.float64)
    return out


def _prf(sums: np.ndarray) -> dict[str, np.ndarray]:
    """P, R, F1 from summed TP, FP, FN (last axis), by the metrics' own formulas."""
    tp, fp, fn = sums[..., 0], sums[..., 1], sums[..., 2]
    return {name: np.asarray(formula(tp, fp, fn)) for name, formula in PRF_MEASURES.items()}


def group_rows(
    labels: pl.DataFrame,
    counts: dict[str, dict[tuple[str, str], np.ndarray]],
    doc_ids: pl.Series,
    settings: Settings,
    icm: dict[str, dict[tuple[str, str], GroupIcm]] | None = None,
    icm_recount: dict[str, Callable[[np.ndarray], float]] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``groups`` (:data:`COLUMNS`) and ``gaps`` (:data:`GAP_COLUMNS`) from the assignment
    ``labels`` (:func:`assignment`), each model's :func:`headline_counts` and, per model,
    each ``(attribute, group)``'s :func:`group_icm` and the :func:`icm_recount` that gives
    ICM's gap its permutation p-value (none without it)."""
    position = {d: i for i, d in enumerate(doc_ids.to_list())}
    rows, gaps = [], []
    replicates = _replicate_weights(doc_ids, settings)
    for attribute in labels["attribute"].unique(maintain_order=True).to_list():
        part = labels.filter(pl.col("attribute") == attribute)
        members = {
            group: np.array([position[d] for d in frame["doc_id"].to_list()], dtype=np.int64)
            for (group,), frame in part.group_by("group", maintain_order=True)
        }
        members = dict(sorted(members.items(), key=lambda kv: (kv[0] == MISSING, kv[0])))
        for model, tables in counts.items():
            for (family, level), table in tables.items():
                values = {g: _prf(table[idx].sum(0)) for g, idx in members.items()}
                bounds = {
                    g: _bounds(table[idx], replicates, idx, settings) for g, idx in members.items()
                }
                for group, idx in members.items():
                    for metric, value in values[group].items():
                        low, high = bounds[group][metric] if bounds[group] else (None, None)
                        rows.append(
                            (attribute, group, model, family, level, "micro", metric,
                             float(value), low, high, int(idx.size))
                        )  # fmt: skip
                gaps += _gaps(attribute, model, family, level, table, members, replicates, settings)
            if icm is not None:
                by_group = {g: icm[model][(attribute, g)] for g in members}
                recount = None if icm_recount is None else icm_recount[model]
                icm_rows, icm_gap = _icm_rows(
                    attribute, model, by_group, replicates, settings, members, recount
                )
                rows += icm_rows
                gaps += icm_gap
    groups = pl.DataFrame(rows, schema=_schema(COLUMNS), orient="row")
    gap_table = pl.DataFrame(gaps, schema=_schema(GAP_COLUMNS), orient="row")
    if gap_table.height:
        gap_table = _holm(gap_table)
    return groups, gap_table


@dataclass(frozen=True)
class GroupIcm:
    """A group's ICM evaluated alone: ``value`` (the mean over its items, as the metrics
    compute it), ``documents`` and, per item, ``positions`` (in the gold's ``doc_ids``) and
    ``per_item`` ICM, for the bootstrap."""

    value: float
    documents: int
    positions: np.ndarray
    per_item: np.ndarray


def group_icm(
    labels: pl.DataFrame,
    gold: pl.DataFrame,
    predicted: pl.DataFrame,
    doc_ids: pl.Series,
    *,
    item_sums: Callable[[pl.DataFrame, pl.DataFrame], pl.DataFrame],
    params: IcmParams,
) -> dict[tuple[str, str], GroupIcm]:
    """``(attribute, group) -> GroupIcm`` of one model: ``item_sums`` (the count engine's
    per-item sums of a gold and a prediction table, weights from that gold) of each group's
    documents alone, so that the information content is the group's own."""
    position = pl.DataFrame({"doc_id": doc_ids}).with_row_index("_position")
    out = {}
    for (attribute, group), part in labels.group_by("attribute", "group", maintain_order=True):
        docs = part["doc_id"].implode()
        items = item_sums(
            gold.filter(pl.col("doc_id").is_in(docs)),
            predicted.filter(pl.col("doc_id").is_in(docs)),
        )
        per_item, _ = icm_per_item(items, params)
        at = items.select("doc_id").join(position, on="doc_id", how="left", maintain_order="left")
        out[(str(attribute), str(group))] = GroupIcm(
            value=icm_values(items, params)["icm"],
            documents=part.height,
            positions=at["_position"].to_numpy().astype(np.int64),
            per_item=per_item,
        )
    return out


#: The (family, level, average, metric) of ICM's rows: the registry's headline ICM.
ICM_KEY = ("icm", OVERALL, "mean", "icm")


def _icm_replicates(icm: GroupIcm, weights: np.ndarray) -> np.ndarray:
    """ICM of each replicate: the weighted mean of the group's items (NaN without one)."""
    w = weights[:, icm.positions]
    count = w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, (w @ icm.per_item) / count, np.nan)


def _icm_rows(
    attribute, model, by_group, weights, settings, members, recount
) -> tuple[list[tuple], list[tuple]]:
    """The groups' ICM rows and the attribute's largest ICM gap, ``(missing)`` left out of the
    gap; its permutation p-value recounts each shuffled group (:func:`_icm_permutation_p`)."""
    rows, reps = [], {}
    for group, icm in by_group.items():
        low = high = None
        if weights is not None:
            reps[group] = _icm_replicates(icm, weights)
            bounds = _tables().interval_bounds(
                reps[group][:, None], np.zeros(1), np.zeros(1, bool), settings.confidence
            )
            low, high = float(bounds[0][0]), float(bounds[1][0])
        rows.append((attribute, group, model, *ICM_KEY, icm.value, low, high, icm.documents))
    named = [g for g, icm in by_group.items() if g != MISSING and icm.documents]
    if len(named) < 2:
        return rows, []
    ranked = sorted(named, key=lambda g: (-by_group[g].value, g))
    top, bottom = ranked[0], ranked[-1]
    low = high = None
    if weights is not None:
        bounds = _tables().interval_bounds(
            (reps[top] - reps[bottom])[:, None], np.zeros(1), np.zeros(1, bool), settings.confidence
        )
        low, high = float(bounds[0][0]), float(bounds[1][0])
    gap = by_group[top].value - by_group[bottom].value
    p_value = None
    if weights is not None and recount is not None:
        named_members = {g: members[g] for g in named}
        p_value = _icm_permutation_p(named_members, gap, recount, settings, attribute=attribute)
    permutations = settings.permutations if p_value is not None else None
    return rows, [
        (attribute, model, *ICM_KEY, top, bottom, gap, low, high, p_value, None, permutations)
    ]


#: ICM's permutation test recounts every group of every shuffle with the count engine (tens of
#: milliseconds a call on a few hundred documents), so its cost per (attribute, model) is
#: bounded: at most this many engine calls (permutations x named groups: 999 permutations of
#: up to 4 groups) and this many documents recounted (permutations x named documents). Past
#: either bound the gap keeps its interval but gets no p-value, and a warning says why.
ICM_RECOUNT_CALLS = 4_000
ICM_RECOUNT_DOCUMENTS = 2_000_000


def icm_recount(
    gold: pl.DataFrame,
    predicted: pl.DataFrame,
    doc_ids: pl.Series,
    *,
    item_sums: Callable[[pl.DataFrame, pl.DataFrame], pl.DataFrame],
    params: IcmParams,
) -> Callable[[np.ndarray], float]:
    """The ICM of the documents at some positions of ``doc_ids`` evaluated alone (their own
    information content), as :func:`group_icm` computes a group's: ICM's permutation test
    calls it on each shuffled group. A group's ICM is not a sum of per-document terms fixed in
    advance (its node weights come from its own gold counts), so each shuffle is recounted."""

    def icm(positions: np.ndarray) -> float:
        docs = doc_ids.gather(positions).implode()
        items = item_sums(
            gold.filter(pl.col("doc_id").is_in(docs)),
            predicted.filter(pl.col("doc_id").is_in(docs)),
        )
        return icm_values(items, params)["icm"]

    return icm


def _icm_permutation_p(
    named: dict[str, np.ndarray],
    gap: float,
    recount: Callable[[np.ndarray], float],
    settings: Settings,
    *,
    attribute: str,
) -> float | None:
    """(1 + #{shuffles whose largest ICM gap >= the observed}) / (1 + permutations), over the
    draws of :func:`shuffled_labels` (those of the P/R/F1 gaps), each shuffled group's ICM
    recounted with its own information content; None past :data:`ICM_RECOUNT_CALLS` or
    :data:`ICM_RECOUNT_DOCUMENTS`."""
    idx = np.concatenate(list(named.values()))
    calls, documents = settings.permutations * len(named), settings.permutations * idx.size
    if calls > ICM_RECOUNT_CALLS or documents > ICM_RECOUNT_DOCUMENTS:
        log.warning(
            "warning: no permutation p-value for the ICM gap of %s: %d permutations of %d "
            "groups (%d documents) would recount ICM %d times over %d documents, more than the "
            "%d times or %d documents allowed; lower uncertainty.permutations for one",
            attribute,
            settings.permutations,
            len(named),
            idx.size,
            calls,
            documents,
            ICM_RECOUNT_CALLS,
            ICM_RECOUNT_DOCUMENTS,
        )
        return None
    hits = 0
    for shuffled in shuffled_labels([v.size for v in named.values()], settings):
        values = [recount(np.sort(idx[shuffled == k])) for k in range(len(named))]
        hits += bool(max(values) - min(values) >= gap - 1e-12)
    return (1 + hits) / (1 + settings.permutations)


def _schema(columns: tuple[str, ...]) -> dict[str, pl.DataType]:
    numbers = {"value", "low", "high", "gap", "p_value", "p_adjusted"}
    counts = {"documents", "permutations"}
    return {
        c: pl.Float64 if c in numbers else pl.Int64 if c in counts else pl.String for c in columns
    }


def _replicate_weights(doc_ids: pl.Series, settings: Settings) -> np.ndarray | None:
    """The bootstrap's Poisson weights (replicates x documents), or None without a bootstrap.
    A document weighs the same in every group it belongs to: its weight depends on the seed,
    its id and the replicate only, so resampling every document resamples each group's."""
    if not settings.bootstrap:
        return None
    keys = doc_keys(doc_ids.to_list())
    step = max(1, _BLOCK_CELLS // max(1, len(keys)))
    blocks = [
        poisson_weights(
            keys, seed=settings.seed, first=first, count=min(step, settings.bootstrap - first)
        )
        for first in range(0, settings.bootstrap, step)
    ]
    return np.vstack(blocks)


def _bounds(
    table: np.ndarray, weights: np.ndarray | None, idx: np.ndarray, settings: Settings
) -> dict[str, tuple[float, float]] | None:
    """Each metric's percentile interval over the group's replicates."""
    if weights is None:
        return None
    values = _prf(weights[:, idx] @ table)
    out = {}
    for metric, reps in values.items():
        low, high = _tables().interval_bounds(
            reps[:, None], np.zeros(1), np.zeros(1, bool), settings.confidence
        )
        out[metric] = (float(low[0]), float(high[0]))
    return out


def _gaps(attribute, model, family, level, table, members, weights, settings) -> list[tuple]:
    """One row per metric: the largest gap between the attribute's groups (``(missing)``
    left out), its interval and its permutation p-value."""
    named = {g: idx for g, idx in members.items() if g != MISSING and idx.size}
    if len(named) < 2:
        return []
    observed = {g: _prf(table[idx].sum(0)) for g, idx in named.items()}
    tops = {}
    for metric in PRF_MEASURES:
        by_value = sorted(named, key=lambda g: (-float(observed[g][metric]), g))
        tops[metric] = (by_value[0], by_value[-1])
    gaps = {m: float(observed[t][m] - observed[b][m]) for m, (t, b) in tops.items()}
    p_values = _permutation_p(table, named, gaps, settings) if weights is not None else {}
    rows = []
    for metric, (top, bottom) in tops.items():
        low = high = None
        if weights is not None:
            star = (
                _prf(weights[:, named[top]] @ table[named[top]])[metric]
                - _prf(weights[:, named[bottom]] @ table[named[bottom]])[metric]
            )
            bounds = _tables().interval_bounds(
                star[:, None], np.zeros(1), np.zeros(1, bool), settings.confidence
            )
            low, high = float(bounds[0][0]), float(bounds[1][0])
        rows.append(
            (attribute, model, family, level, "micro", metric, top, bottom, gaps[metric], low,
             high, p_values.get(metric), None, settings.permutations if p_values else None)
        )  # fmt: skip
    return rows


def _permutation_p(
    table: np.ndarray, named: dict[str, np.ndarray], gaps: dict[str, float], settings: Settings
) -> dict[str, float]:
    """Per metric, (1 + #{shuffles whose largest gap >= the observed}) / (1 + permutations):
    the group labels shuffled over the attribute's documents (``(missing)`` left out)."""
    idx = np.concatenate(list(named.values()))
    sub = table[idx]
    hits = dict.fromkeys(gaps, 0)
    for shuffled in shuffled_labels([v.size for v in named.values()], settings):
        sums = np.stack(
            [np.bincount(shuffled, weights=sub[:, j], minlength=len(named)) for j in range(3)],
            axis=1,
        )
        for metric, values in _prf(sums).items():
            hits[metric] += bool(values.max() - values.min() >= gaps[metric] - 1e-12)
    return {m: (1 + hits[m]) / (1 + settings.permutations) for m in gaps}


def shuffled_labels(sizes: list[int], settings: Settings) -> Iterator[np.ndarray]:
    """The permutation test's draws, one per permutation: the group indices 0, 1, ... (``sizes[k]``
    times index k, in that order) shuffled over the attribute's named documents. Every gap of
    the module uses this one draw (seeded by ``settings.seed``), so ICM's test shuffles the
    documents exactly as P/R/F1's does."""
    labels = np.concatenate([np.full(size, i) for i, size in enumerate(sizes)])
    rng = np.random.default_rng(settings.seed)
    for _ in range(settings.permutations):
        yield rng.permutation(labels)


def _holm(gaps: pl.DataFrame) -> pl.DataFrame:
    """``p_adjusted``: Holm over the attributes, per model and metric."""
    keys = ["model", "family", "level", "average", "metric"]
    parts = []
    for _, part in gaps.with_row_index("_row").group_by(keys, maintain_order=True):
        p = part["p_value"].to_numpy()
        adjusted = (
            _tables().holm(p) if not np.isnan(p.astype(float)).any() else np.full(p.size, np.nan)
        )
        parts.append(part.with_columns(pl.Series("p_adjusted", adjusted)))
    return (
        pl.concat(parts).sort("_row").drop("_row").with_columns(pl.col("p_adjusted").fill_nan(None))
    )
