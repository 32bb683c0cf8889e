"""A deterministic synthetic test set and model zoo, so the workflow runs with no data at all.

Two demos share one generator: the default ICD-9 one (long-format Parquet under
``results/demo/``) and an ICD-10 one written as MIMIC-IV ships its tables
(``results/demo_icd10/diagnoses_icd.csv.gz`` and ``procedures_icd.csv.gz``, undotted codes,
with some ICD-9 admissions the evaluation skips and counts), whose models write the formats
ICD-10 coding models write (:func:`write_icd10_demo`).

Real leaf codes are drawn Zipf-like (a few frequent codes, a long tail), about 15 per
document. The models make different kinds of error, chosen so that flat and hierarchical metrics
rank them differently:

- ``sibling_confuser``: swaps many codes for a sibling in the same category (flat punishes it,
  hierarchical metrics forgive it);
- ``over_predictor``: keeps the gold but adds extra codes within the same category (with
  scores; CoPHE sees the over-count that set-based evaluation hides);
- ``cautious_coder``: precise but misses 40% of the codes;
- ``distant_guesser``: replaces codes with random codes from anywhere (with scores, top-k).

The ICD-9 demo also writes a dev split (:data:`DEV_SHARE` as many documents again, drawn by the
same generator, with ids of their own) holding the gold and the predictions of the models in
:data:`TUNED`, so the default run tunes a threshold on it, as a real evaluation would.
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import numpy as np
import polars as pl

from hieval import paths
from hieval.atomic import atomic_path, write_parquet
from hieval.codes.icd9 import DX, PROC
from hieval.errors import HievalError
from hieval.hierarchy.table import read_level_table

MODELS = ("sibling_confuser", "over_predictor", "cautious_coder", "distant_guesser")
#: The demo models whose threshold is tuned on the dev split (config/models.tsv says `tune`).
TUNED = ("over_predictor",)
#: The dev split's size, as a share of the test documents.
DEV_SHARE = 0.5
#: The ICD-10 demo's prediction files, one format each (see :func:`write_icd10_demo`).
ICD10_FILES = {
    "sibling_confuser": "sibling_confuser.csv",
    "over_predictor": "over_predictor.parquet",
    "cautious_coder": "cautious_coder.csv",
    "distant_guesser": "distant_guesser.parquet",
}
#: ICD-9 admissions mixed into the ICD-10 demo's MIMIC-IV tables (skipped by the evaluation):
#: diagnosis rows (401.9, 250.00, 428.0) and a procedure row (38.93), undotted as MIMIC-IV.
ICD9_ADMISSIONS = 25
_ICD9_DX, _ICD9_PROC = ("4019", "25000", "4280"), ("3893",)


def _siblings(leaves: pl.DataFrame, family: str) -> dict[str, list[str]]:
    families = leaves.group_by(family).agg(pl.col("code").sort()).sort(family)
    out: dict[str, list[str]] = {}
    for members in families["code"].to_list():
        for code in members:
            out[code] = [m for m in members if m != code]
    return out


def make_demo(
    levels: pl.DataFrame,
    seed: int = 20211107,
    documents: int = 1000,
    codes_per_document: float = 15.0,
    pool_size: int = 3000,
    *,
    family: str = "e0",
) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
    """Gold labels and one prediction table per model, all long format.

    ``levels`` is a level table's frame; leaves are its dx/proc nodes that are no other node's
    ancestor, and a code's siblings share its ancestor at the level ``family`` (the category:
    ``e0`` for ICD-9, ``category`` for ICD-10).
    """
    rng = np.random.default_rng(seed)
    ancestor_columns = [c for c in levels.columns if c not in ("code", "kind", "depth", "title")]
    internal = pl.concat(
        [levels.filter(pl.col(c) != pl.col("code"))[c] for c in ancestor_columns]
    ).unique()
    leaves = (
        levels.filter(pl.col("kind").is_in([DX, PROC]) & ~pl.col("code").is_in(internal.implode()))
        .select("code", family)
        .sort("code")
    )
    all_codes = leaves["code"].to_numpy()
    pool = rng.permutation(all_codes)[:pool_size]
    weights = 1.0 / np.arange(1, pool_size + 1) ** 1.1
    weights /= weights.sum()
    siblings = _siblings(leaves, family)

    gold_docs: list[list[str]] = []
    for _ in range(documents):
        n = int(np.clip(rng.poisson(codes_per_document), 1, 60))
        gold_docs.append(sorted(rng.choice(pool, size=n, replace=False, p=weights).tolist()))
    doc_ids = [f"D{i:05d}" for i in range(documents)]

    def sibling(code: str) -> str | None:
        options = siblings.get(code) or []
        return options[rng.integers(len(options))] if options else None

    rows: dict[str, list[tuple]] = {m: [] for m in MODELS}
    for doc, codes in zip(doc_ids, gold_docs, strict=True):
        for code in codes:
            swap = sibling(code) if rng.random() < 0.4 else None
            if rng.random() > 0.05:
                rows["sibling_confuser"].append((doc, swap or code))
            rows["over_predictor"].append((doc, code, float(rng.uniform(0.5, 1.0))))
            if rng.random() < 0.5 and (extra := sibling(code)):
                rows["over_predictor"].append((doc, extra, float(rng.uniform(0.5, 1.0))))
            if rng.random() < 0.5:  # noise below the threshold, removed by it
                noise = all_codes[rng.integers(len(all_codes))]
                rows["over_predictor"].append((doc, noise, float(rng.uniform(0.0, 0.5))))
            if rng.random() > 0.4:
                rows["cautious_coder"].append((doc, code))
            guess = code if rng.random() < 0.6 else all_codes[rng.integers(len(all_codes))]
            rows["distant_guesser"].append((doc, guess, float(rng.uniform(0.3, 1.0))))
            rows["distant_guesser"].append(
                (doc, all_codes[rng.integers(len(all_codes))], float(rng.uniform(0.0, 0.6)))
            )

    gold = pl.DataFrame(
        [(d, c) for d, cs in zip(doc_ids, gold_docs, strict=True) for c in cs],
        schema=["doc_id", "code"],
        orient="row",
    )
    schemas = {
        m: ["doc_id", "code"] if len(rows[m][0]) == 2 else ["doc_id", "code", "score"]
        for m in MODELS
    }
    predictions = {m: pl.DataFrame(rows[m], schema=schemas[m], orient="row") for m in MODELS}
    return gold, predictions


def split_demo(
    levels: pl.DataFrame, seed: int, documents: int, dev_documents: int
) -> tuple[tuple[pl.DataFrame, dict[str, pl.DataFrame]], tuple[pl.DataFrame, dict]]:
    """The demo with a dev split: ``(gold, predictions)`` of the first ``documents`` documents
    (the test set) and of the ``dev_documents`` after them (the dev set). One generator run
    makes both, so both draw codes from the same pool and the models err alike on them; the
    dev documents' ids follow the test ones' (``D02000`` after ``D01999``), so the two never
    share a document."""
    gold, predictions = make_demo(levels, seed, documents + dev_documents)
    test_ids = [f"D{i:05d}" for i in range(documents)]

    def part(frame: pl.DataFrame, test: bool) -> pl.DataFrame:
        inside = pl.col("doc_id").is_in(test_ids)
        return frame.filter(inside if test else ~inside)

    test = (part(gold, True), {m: part(f, True) for m, f in predictions.items()})
    dev = (part(gold, False), {m: part(f, False) for m, f in predictions.items()})
    return test, dev


def write_demo(
    levels_path: str | Path,
    gold_out: str | Path,
    prediction_dir: str | Path,
    seed: int,
    documents: int,
    *,
    dev_gold_out: str | Path,
    dev_prediction_dir: str | Path,
) -> None:
    """Generate the demo from a level table and write it as Parquet: the test set's gold and
    every model's predictions, and the dev split's gold and the :data:`TUNED` models'
    predictions."""
    dev_documents = max(1, int(documents * DEV_SHARE))
    (gold, predictions), (dev_gold, dev_predictions) = split_demo(
        paths.read_parquet(levels_path), seed, documents, dev_documents
    )
    write_parquet(gold, gold_out)
    for model, frame in predictions.items():
        write_parquet(frame, Path(prediction_dir) / f"{model}.parquet")
    write_parquet(dev_gold, dev_gold_out)
    for model in TUNED:
        write_parquet(dev_predictions[model], Path(dev_prediction_dir) / f"{model}.parquet")


def _gzip_csv(frame: pl.DataFrame, out: str | Path) -> None:
    """Write ``frame`` as a gzip-compressed CSV, byte for byte the same on every run (no
    timestamp in the gzip header)."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as handle:
        handle.write(frame.write_csv().encode("utf-8"))
    with atomic_path(out) as tmp:
        Path(tmp).write_bytes(buffer.getvalue())


def write_icd10_demo(
    levels_path: str | Path,
    *,
    diagnoses_out: str | Path,
    procedures_out: str | Path,
    prediction_dir: str | Path,
    seed: int,
    documents: int,
) -> None:
    """The ICD-10 demo from the ICD-10 level table: the gold as MIMIC-IV's ``diagnoses_icd``
    and ``procedures_icd`` tables and one prediction file per model.

    The gold: ``hadm_id`` documents, undotted codes (``E119``, ``0DTJ4ZZ``), ``icd_version``
    10, plus :data:`ICD9_ADMISSIONS` ICD-9 admissions (version 9) the evaluation skips and
    counts. The predictions (:data:`ICD10_FILES`) use the other routes an ICD-10 model's
    output takes: undotted codes with a ``code_type`` column (CSV), dotted CM and PCS codes
    without one (CSV, and Parquet with scores).
    """
    table = read_level_table(levels_path)
    if table.code_system != "icd10":
        raise HievalError(
            f"the ICD-10 demo needs the icd10 hierarchy (hierarchy.source: icd10), not "
            f"{table.source or 'this tree'} ({table.code_system or 'unknown code system'})"
        )
    gold, predictions = make_demo(table.frame, seed, documents, family="category")
    kinds = table.frame.select("code", "kind")
    hadm = {f"D{i:05d}": 20_000_000 + i for i in range(documents)}
    # code_type of every code, and the undotted spelling MIMIC-IV writes
    gold = gold.join(kinds, on="code", how="left", maintain_order="left").with_columns(
        pl.col("doc_id").replace_strict(hadm, return_dtype=pl.Int64).alias("hadm_id"),
        pl.col("code").str.replace(".", "", literal=True).alias("icd_code"),
        pl.lit(10, dtype=pl.Int64).alias("icd_version"),
    )
    gold = gold.with_columns(
        (pl.col("hadm_id") // 2).alias("subject_id"),
        pl.int_range(1, pl.len() + 1).over("hadm_id", "kind").alias("seq_num"),
    )
    old = [20_000_000 + documents + i for i in range(ICD9_ADMISSIONS)]
    icd9_dx = pl.DataFrame(
        [(h // 2, h, n + 1, code, 9) for h in old for n, code in enumerate(_ICD9_DX)],
        schema=["subject_id", "hadm_id", "seq_num", "icd_code", "icd_version"],
        orient="row",
    )
    icd9_proc = pl.DataFrame(
        [(h // 2, h, n + 1, code, 9) for h in old for n, code in enumerate(_ICD9_PROC)],
        schema=["subject_id", "hadm_id", "seq_num", "icd_code", "icd_version"],
        orient="row",
    )
    columns = ["subject_id", "hadm_id", "seq_num", "icd_code", "icd_version"]
    diagnoses = pl.concat([gold.filter(pl.col("kind") == DX).select(columns), icd9_dx])
    procedures = pl.concat([gold.filter(pl.col("kind") == PROC).select(columns), icd9_proc])
    procedures = procedures.insert_column(3, pl.lit("2180-07-23").alias("chartdate"))
    _gzip_csv(diagnoses.sort("hadm_id", "seq_num"), diagnoses_out)
    _gzip_csv(procedures.sort("hadm_id", "seq_num"), procedures_out)

    out = Path(prediction_dir)
    for model, frame in predictions.items():
        frame = frame.with_columns(
            pl.col("doc_id").replace_strict(hadm, return_dtype=pl.Int64).cast(pl.String)
        )
        name = ICD10_FILES[model]
        if model == "sibling_confuser":  # MIMIC-style: undotted, with code_type
            frame = frame.join(kinds, on="code", how="left", maintain_order="left")
            frame = frame.select(
                "doc_id",
                pl.col("code").str.replace(".", "", literal=True),
                pl.col("kind").alias("code_type"),
            )
        if name.endswith(".csv"):
            with atomic_path(out / name) as tmp:
                frame.write_csv(tmp)
        else:
            write_parquet(frame, out / name)
