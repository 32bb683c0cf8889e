"""A seeded generator of MIMIC-III-like gold labels and predictions, at any scale.

Scale 1 is MIMIC-III full's test set: 3,372 documents with Poisson(15.9) codes each (at least
one), drawn without replacement, Zipf-like, from a label space ("pool") of 8,900 real ICD-9-CM
v32 leaf codes (78% diagnoses, the rest procedures, as in MIMIC-III's 8,922-code label space;
some of MIMIC's most frequent codes head the ranking, the rest of it is random).

One model's predictions follow a realistic error profile, per gold code: kept (70%), swapped
for a sibling in the same category (12%: the error hierarchical metrics forgive), or missed
(18%); plus about 0.2 extra codes per gold code (half siblings of one of the document's gold
codes, half frequent codes of the pool), so a document has about as many predicted codes as
gold codes. Like a real model, predictions stay inside the label space. Duplicates are
removed.

Everything is vectorised numpy over chunks of documents (never a Python loop per row), written
chunk by chunk as Parquet row groups, so 1000× (3.37M documents, ~106M rows) takes a few
hundred MB of memory. The result depends only on the seed and the number of documents.

    python benchmarks/generate.py --scale 10 [--seed 7] [--data-dir results/bench]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

if __package__ in (None, ""):  # run as a script: make `hieval` and `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hieval.atomic import atomic_path
from hieval.hierarchy.sources import load_source
from hieval.hierarchy.table import LevelTable, write_level_table

#: Bump when the generated data change, so cached files are regenerated.
VERSION = 2
MIMIC_DOCUMENTS = 3372
CODES_PER_DOCUMENT = 15.9
POOL_SIZE = 8900
DX_SHARE = 0.78
KEEP, SWAP = 0.70, 0.12  # the rest of the gold codes is missed
EXTRA_PER_GOLD = 0.2
EXTRA_SIBLING_SHARE = 0.5
MAX_CODES = 80
CHUNK_DOCUMENTS = 50_000
#: The hierarchy source each code system's data are drawn from (``--system``).
SYSTEM_SOURCES = {"icd9": "package", "icd10": "icd10"}
DEFAULT_DATA_DIR = Path(__file__).resolve().parents[1] / "results" / "bench"
#: Among MIMIC-III's most frequent codes; they head the pool (the rest is shuffled).
FREQUENT = (
    "401.9", "38.93", "428.0", "427.31", "414.01", "96.04", "96.6", "584.9", "250.00",
    "96.71", "272.4", "518.81", "99.04", "39.61", "599.0", "530.81", "96.72", "272.0",
    "285.9", "88.56",
)  # fmt: skip


@dataclass(frozen=True)
class Leaves:
    """Leaf codes in code order: code id = position."""

    codes: pa.Array  # the code strings
    kind: np.ndarray  # "dx" or "proc"
    category: np.ndarray  # a number per category (kind and e0)


@dataclass(frozen=True)
class Pool:
    """The label space: code ids by frequency rank, draw weights, and siblings within it."""

    ranked: np.ndarray  # code ids, most frequent first
    cdf: np.ndarray  # cumulative draw probability by rank
    members: np.ndarray  # code ids by category
    position: np.ndarray  # per code id: its index in ``members`` (-1 outside the pool)
    start: np.ndarray  # per member: index of its category's first member
    size: np.ndarray  # per member: members in its category


#: The level whose nodes are code families (where a sibling swap stays), per code system.
FAMILY_LEVEL = {"icd9": "e0", "icd10": "category"}


def leaves(table: LevelTable) -> Leaves:
    """The leaves of the hierarchy (dx/proc nodes that are no other node's ancestor)."""
    family = FAMILY_LEVEL.get(table.code_system, "e0")
    anc = table.ancestors()
    internal = anc.filter(pl.col("ancestor") != pl.col("code"))["ancestor"].unique()
    frame = (
        table.frame.filter(
            pl.col("kind").is_in(["dx", "proc"]) & ~pl.col("code").is_in(internal.implode())
        )
        .select("code", "kind", pl.col(family).alias("family"))
        .sort("code")
        .with_columns(pl.struct("kind", "family").rank("dense").alias("category"))
    )
    return Leaves(
        codes=frame["code"].to_arrow(),
        kind=frame["kind"].to_numpy(),
        category=frame["category"].to_numpy().astype(np.int64),
    )


def code_pool(leaf: Leaves, seed: int) -> Pool:
    """A MIMIC-sized label space of leaf codes with Zipf-like draw weights."""
    rng = np.random.default_rng([seed, 0])
    codes = np.asarray(leaf.codes.to_pylist(), dtype=object)
    head = np.array([i for c in FREQUENT for i in np.flatnonzero(codes == c)], dtype=np.int64)
    rest = np.setdiff1d(np.arange(len(codes)), head)
    dx, proc = rest[leaf.kind[rest] == "dx"], rest[leaf.kind[rest] == "proc"]
    n_dx = round(POOL_SIZE * DX_SHARE) - int((leaf.kind[head] == "dx").sum())
    n_proc = POOL_SIZE - len(head) - n_dx
    tail = np.concatenate(
        [rng.choice(dx, n_dx, replace=False), rng.choice(proc, n_proc, replace=False)]
    )
    ranked = np.concatenate([head, rng.permutation(tail)])
    # Zipf-Mandelbrot: the top code is in about a quarter of the documents.
    weights = 1.0 / (np.arange(1, len(ranked) + 1) + 8.0) ** 1.05
    cdf = np.cumsum(weights / weights.sum())
    cdf[-1] = 1.0
    members = ranked[np.lexsort((ranked, leaf.category[ranked]))]  # categories contiguous
    position = np.full(len(codes), -1, dtype=np.int64)
    position[members] = np.arange(len(members))
    category = leaf.category[members]
    start = np.searchsorted(category, category, side="left")
    size = np.searchsorted(category, category, side="right") - start
    return Pool(ranked, cdf, members, position, start, size)


def _draw(rng: np.random.Generator, pool: Pool, n: int) -> np.ndarray:
    rank = np.minimum(np.searchsorted(pool.cdf, rng.random(n), side="right"), len(pool.ranked) - 1)
    return pool.ranked[rank]


def _sibling(rng: np.random.Generator, pool: Pool, ids: np.ndarray) -> np.ndarray:
    """Another code of the pool in the same category (the code itself if it has none)."""
    at = pool.position[ids]
    start, size = pool.start[at], pool.size[at]
    shift = np.floor(rng.random(len(ids)) * np.maximum(size - 1, 1)).astype(np.int64) + 1
    other = pool.members[start + (at - start + shift) % size]
    return np.where(size > 1, other, ids)


def _dedupe_sorted(doc: np.ndarray, code: np.ndarray, n_codes: int) -> tuple[np.ndarray, ...]:
    key = np.unique(doc.astype(np.int64) * n_codes + code)
    return key // n_codes, key % n_codes


def chunk(
    rng: np.random.Generator, n_docs: int, pool: Pool, n_codes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Gold and predicted ``(doc, code id)`` pairs of ``n_docs`` documents, sorted."""
    want = np.clip(rng.poisson(CODES_PER_DOCUMENT, n_docs), 1, MAX_CODES)
    # Draw with replacement, oversampled, keep each document's first `want` distinct codes.
    tries = 2 * want + 10
    draw_doc = np.repeat(np.arange(n_docs, dtype=np.int64), tries)
    draw_code = _draw(rng, pool, len(draw_doc))
    _, first = np.unique(draw_doc * n_codes + draw_code, return_index=True)
    first.sort()
    doc, code = draw_doc[first], draw_code[first]
    rank = np.arange(len(doc)) - np.searchsorted(doc, doc)
    keep = rank < want[doc]
    gold_doc, gold_code = _dedupe_sorted(doc[keep], code[keep], n_codes)

    fate = rng.random(len(gold_doc))
    kept, swapped = fate < KEEP, (fate >= KEEP) & (fate < KEEP + SWAP)
    n_gold = np.bincount(gold_doc, minlength=n_docs)
    n_extra = rng.poisson(EXTRA_PER_GOLD * n_gold)
    extra_doc = np.repeat(np.arange(n_docs, dtype=np.int64), n_extra)
    gold_start = np.concatenate([[0], np.cumsum(n_gold)[:-1]])
    some_gold = gold_code[
        gold_start[extra_doc] + np.floor(rng.random(len(extra_doc)) * n_gold[extra_doc]).astype(int)
    ]
    extra_code = np.where(
        rng.random(len(extra_doc)) < EXTRA_SIBLING_SHARE,
        _sibling(rng, pool, some_gold),
        _draw(rng, pool, len(extra_doc)),
    )
    pred_doc, pred_code = _dedupe_sorted(
        np.concatenate([gold_doc[kept], gold_doc[swapped], extra_doc]),
        np.concatenate([gold_code[kept], _sibling(rng, pool, gold_code[swapped]), extra_code]),
        n_codes,
    )
    return gold_doc, gold_code, pred_doc, pred_code


def doc_ids(first: int, n: int, width: int) -> pa.Array:
    """``D`` followed by the zero-padded document number (1-based), vectorised."""
    numbers = np.arange(first + 1, first + n + 1).astype(str)
    return pa.array(np.char.add("D", np.char.zfill(numbers, width)))


def paths(
    out_dir: str | Path, documents: int, seed: int, system: str = "icd9"
) -> tuple[Path, Path, Path]:
    prefix = "" if system == "icd9" else f"{system}_"
    stem = Path(out_dir) / f"{prefix}docs{documents}_seed{seed}_v{VERSION}"
    return (
        stem.with_name(stem.name + "_gold.parquet"),
        stem.with_name(stem.name + "_pred.parquet"),
        stem.with_name(stem.name + ".json"),
    )


def documents_for(scale: float) -> int:
    return max(1, round(MIMIC_DOCUMENTS * scale))


def generate(
    scale: float = 1,
    seed: int = 7,
    out_dir: str | Path = DEFAULT_DATA_DIR,
    *,
    documents: int | None = None,
    table: LevelTable | None = None,
    system: str = "icd9",
    force: bool = False,
) -> tuple[Path, Path]:
    """Write (or reuse) ``gold`` and ``pred`` Parquet files with ``doc_id, code``.

    ``documents`` overrides ``scale`` (3,372 documents per unit). Files are cached in
    ``out_dir`` by documents, seed and generator version, with a JSON record of their sizes.
    """
    documents = documents if documents is not None else documents_for(scale)
    gold_path, pred_path, meta_path = paths(out_dir, documents, seed, system)
    if not force and gold_path.exists() and pred_path.exists() and meta_path.exists():
        return gold_path, pred_path
    started = time.perf_counter()
    table = table or load_source(SYSTEM_SOURCES[system])[0]
    leaf = leaves(table)
    pool = code_pool(leaf, seed)
    n_codes = len(leaf.category)
    width = max(7, len(str(documents)))
    schema = pa.schema([("doc_id", pa.string()), ("code", pa.string())])
    rows = {"gold": 0, "pred": 0}
    seen = {"gold": np.zeros(n_codes, bool), "pred": np.zeros(n_codes, bool)}
    with (
        atomic_path(gold_path) as gold_tmp,
        atomic_path(pred_path) as pred_tmp,
        pq.ParquetWriter(gold_tmp, schema) as gold_out,
        pq.ParquetWriter(pred_tmp, schema) as pred_out,
    ):
        for index, first in enumerate(range(0, documents, CHUNK_DOCUMENTS)):
            n = min(CHUNK_DOCUMENTS, documents - first)
            rng = np.random.default_rng([seed, index + 1])
            gold_doc, gold_code, pred_doc, pred_code = chunk(rng, n, pool, n_codes)
            ids = doc_ids(first, n, width)
            for name, out, doc, code in (
                ("gold", gold_out, gold_doc, gold_code),
                ("pred", pred_out, pred_doc, pred_code),
            ):
                out.write_table(
                    pa.table([ids.take(doc), leaf.codes.take(code)], schema=schema),
                    row_group_size=1 << 21,
                )
                rows[name] += len(doc)
                seen[name][code] = True
    record = {
        "version": VERSION,
        "seed": seed,
        "documents": documents,
        "gold_rows": rows["gold"],
        "pred_rows": rows["pred"],
        "gold_codes": int(seen["gold"].sum()),
        "pred_codes": int(seen["pred"].sum()),
        "codes": int((seen["gold"] | seen["pred"]).sum()),
        "seconds": round(time.perf_counter() - started, 2),
    }
    with atomic_path(meta_path) as tmp:
        tmp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return gold_path, pred_path


#: How the documents are named in a generated data set (``--doc-ids``): as generated
#: (``D0000001``: text, zero-padded, so file order is text order), integers (``1``), or text
#: as many users have it (``d1``: not zero-padded, so ``d10`` sorts before ``d2``).
DOC_ID_STYLES = ("padded", "int", "string")


def doc_id_variant(gold: Path, pred: Path, style: str) -> tuple[Path, Path]:
    """The generated ``gold`` and ``pred`` with their documents named in ``style`` (written once
    beside them, same rows in the same order; only ``doc_id`` differs)."""
    if style == "padded":
        return gold, pred
    if style not in DOC_ID_STYLES:
        raise ValueError(f"unknown doc id style {style!r}; one of {DOC_ID_STYLES}")
    out = []
    for path in (gold, pred):
        target = path.with_name(path.name.replace("_v", f"_{style}ids_v", 1))
        out.append(target)
        if target.exists():
            continue
        number = pl.col("doc_id").str.slice(1).cast(pl.Int64)
        doc = number if style == "int" else pl.concat_str(pl.lit("d"), number.cast(pl.String))
        table = pl.read_parquet(path).with_columns(doc.alias("doc_id")).to_arrow()
        with atomic_path(target) as tmp:
            pq.write_table(table, tmp, row_group_size=1 << 21)
    return out[0], out[1]


def record(gold_path: str | Path) -> dict:
    """The JSON record written beside a generated gold file."""
    path = Path(str(gold_path).removesuffix("_gold.parquet") + ".json")
    return json.loads(path.read_text(encoding="utf-8"))


def hierarchy(
    out_dir: str | Path = DEFAULT_DATA_DIR, table: LevelTable | None = None, system: str = "icd9"
) -> Path:
    """Write (once) the code system's level and ancestor tables; return the ancestors."""
    folder = "hierarchy" if system == "icd9" else f"hierarchy_{system}"
    levels_path = Path(out_dir) / folder / "levels.parquet"
    ancestors_path = levels_path.with_name("ancestors.parquet")
    if not ancestors_path.exists() or not levels_path.exists():
        table = table or load_source(SYSTEM_SOURCES[system])[0]
        write_level_table(table, levels_path, ancestors_path)
    return ancestors_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1)
    parser.add_argument("--documents", type=int, help="overrides --scale")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--system", choices=sorted(SYSTEM_SOURCES), default="icd9")
    parser.add_argument("--force", action="store_true", help="regenerate even if cached")
    args = parser.parse_args()
    gold, pred = generate(
        args.scale,
        args.seed,
        args.data_dir,
        documents=args.documents,
        system=args.system,
        force=args.force,
    )
    print(gold, pred, json.dumps(record(gold)), sep="\n")


if __name__ == "__main__":
    main()
