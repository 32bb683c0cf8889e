"""Normalisation in one read (hieval.inputs.normalize): the output and the record of random files
full of duplicates, empty codes, codes the hierarchy lacks and documents the gold lacks, checked
against a plain-Python reference written here; and the sorted-output duplicate check.

Unscored files are no longer grouped (their duplicates are found in the sorted output), so
these files exercise every way a duplicate can hide: within a canonical file, behind two
spellings of one code (``412`` and ``412.``), beside empty codes, and among rows a policy
drops (``duplicates_removed`` counts those too, as it always has).
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hieval.inputs.normalize import _scan_sorted, normalize_labels

KNOWN = ["401.9", "364.11", "96.04", "412", "250.00", "V58.61", "E849.7", "00.10"]
UNKNOWN = ["401.99", "250.99", "038.99"]  # valid ICD-9 syntax, not in the tree: placeable
SPELLINGS = {"v58.61": "V58.61"}  # raw -> canonical (lower case), besides the identity


def canonical(code: str) -> str:
    code = code.strip()
    return SPELLINGS.get(code, code)


def random_rows(rng: random.Random, *, docs: int, spellings: bool) -> list[tuple[str, str]]:
    pool = KNOWN + UNKNOWN + (list(SPELLINGS) if spellings else [])
    rows = []
    for _ in range(rng.randint(1, 60)):
        doc = f"d{rng.randint(1, docs)}"
        code = "" if rng.random() < 0.1 else rng.choice(pool)
        if rng.random() < 0.1:
            doc, code = f" {doc} ", f" {code} "  # surrounding spaces are trimmed
        rows.append((doc, code))
        if rng.random() < 0.2:
            rows.append(rows[rng.randrange(len(rows))])  # an exact duplicate somewhere
    rng.shuffle(rows)
    return rows


def reference(
    rows: list[tuple[str, str]], *, policy: str, gold_docs: set[str] | None
) -> tuple[list[tuple[str, str | None]], dict]:
    """What normalisation must write and record, computed the plain way."""
    pairs = [(d.strip(), canonical(c) if c.strip() else None) for d, c in rows]
    coded = [p for p in pairs if p[1] is not None]
    record = {
        "rows": len(rows),
        "duplicates_removed": len(coded) - len(set(coded)),
        "unknown_codes": dict(sorted(Counter(c for _, c in coded if c in UNKNOWN).items())),
        "unknown_documents_dropped": 0,
    }
    if policy == "drop":
        pairs = [p for p in pairs if p[1] not in UNKNOWN]
    if gold_docs is not None:
        extra = {d for d, _ in pairs} - gold_docs
        record["unknown_documents_dropped"] = len(extra)
        pairs = [p for p in pairs if p[0] in gold_docs]
    with_codes = {d for d, c in pairs if c is not None}
    kept = {p for p in pairs if p[1] is not None or p[0] not in with_codes}
    record["documents"] = len({d for d, _ in pairs})
    record["labels"] = len({p for p in pairs if p[1] is not None})
    out = sorted(kept, key=lambda p: (p[0], p[1] is not None, p[1] or ""))
    return out, record


def write_file(path: Path, rows: list[tuple[str, str]]) -> Path:
    """A long-format CSV or Parquet file (by the suffix of ``path``)."""
    if path.suffix == ".parquet":
        docs, codes = [d for d, _ in rows], [c for _, c in rows]
        pq.write_table(pa.table({"doc_id": docs, "code": codes}), path)
        return path
    lines = ["doc_id,code", *(f'"{d}","{c}"' for d, c in rows)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def check(record, out: Path, expected_rows, expected: dict, *, predictions: bool) -> None:
    frame = pl.read_parquet(out)
    assert frame.columns == ["doc_id", "code", *(["score"] if predictions else [])]
    assert frame.select("doc_id", "code").rows() == expected_rows
    got = {key: getattr(record, key) for key in expected}
    assert got == expected


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("spellings", [False, True], ids=["canonical", "two-spellings"])
@pytest.mark.parametrize("policy", ["place", "drop"])
@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_random_files_match_the_reference(icd9, tmp_path, seed, spellings, policy, suffix):
    rng = random.Random(seed * 7919 + spellings * 31 + (policy == "drop"))
    gold_rows = random_rows(rng, docs=8, spellings=spellings)
    if not any(c.strip() and canonical(c) in KNOWN for _, c in gold_rows):
        gold_rows.append(("d1", "401.9"))  # a gold needs a label the tree knows
    gold_out = tmp_path / "gold.parquet"
    record = normalize_labels(
        write_file(tmp_path / f"gold_in{suffix}", gold_rows),
        name="gold",
        role="gold",
        out=gold_out,
        hierarchy=icd9,
        unknown_codes=policy,
    )
    expected_rows, expected = reference(gold_rows, policy=policy, gold_docs=None)
    check(record, gold_out, expected_rows, expected, predictions=False)

    pred_rows = random_rows(rng, docs=11, spellings=spellings)  # d9..d11: not in the gold
    pred_out = tmp_path / "pred.parquet"
    record = normalize_labels(
        write_file(tmp_path / f"pred_in{suffix}", pred_rows),
        name="model",
        role="predictions",
        out=pred_out,
        hierarchy=icd9,
        unknown_codes=policy,
        gold_docs=gold_out,
        unknown_docs="drop",
    )
    gold_docs = set(pl.read_parquet(gold_out)["doc_id"])
    expected_rows, expected = reference(pred_rows, policy=policy, gold_docs=gold_docs)
    check(record, pred_out, expected_rows, expected, predictions=True)


def test_parquet_input_with_duplicates_far_apart(icd9, tmp_path):
    """A Parquet file (read without a CSV parse) whose duplicates are rows apart."""
    rows = [(f"d{i % 50}", KNOWN[i % len(KNOWN)]) for i in range(400)]
    rows += [rows[3], rows[399], rows[3]]
    source = tmp_path / "gold.parquet"
    pq.write_table(pa.table({"doc_id": [d for d, _ in rows], "code": [c for _, c in rows]}), source)
    record = normalize_labels(
        source, name="gold", role="gold", out=tmp_path / "out.parquet", hierarchy=icd9
    )
    expected_rows, expected = reference(rows, policy="place", gold_docs=None)
    assert expected["duplicates_removed"] > 3  # the pattern repeats too
    check(record, tmp_path / "out.parquet", expected_rows, expected, predictions=False)


def sorted_file(path: Path, rows: list[tuple[str, str | None]], group_rows: int) -> Path:
    rows = sorted(rows, key=lambda p: (p[0], p[1] is not None, p[1] or ""))
    table = pa.table({"doc_id": [d for d, _ in rows], "code": [c for _, c in rows]})
    pq.write_table(table, path, row_group_size=group_rows)
    return path


@pytest.mark.parametrize("at", range(8))
def test_repeats_found_anywhere_including_across_row_groups(tmp_path, at):
    rows = [(f"d{i // 2}", f"{i:03d}.1") for i in range(8)]  # distinct, sorted already
    assert not has_repeats(sorted_file(tmp_path / "distinct.parquet", rows, 3))
    # the copy lands next to its original: inside a group of 3, or across a group boundary
    assert has_repeats(sorted_file(tmp_path / "repeat.parquet", [*rows, rows[at]], 3))


def test_empty_code_rows_repeat_too_but_distinct_documents_do_not(tmp_path):
    rows = [("d1", None), ("d2", None), ("d2", "401.9")]
    assert not has_repeats(sorted_file(tmp_path / "a.parquet", rows, 2))
    assert has_repeats(sorted_file(tmp_path / "b.parquet", [*rows, ("d1", None)], 2))
    assert not has_repeats(sorted_file(tmp_path / "c.parquet", [("d1", "x"), ("d2", "x")], 1))


def has_repeats(path: Path) -> bool:
    return _scan_sorted(path)[0]


@pytest.mark.parametrize("group_rows", [1, 2, 3, 100])
def test_documents_and_labels_counted_in_the_sorted_output(tmp_path, group_rows):
    rows = [("d1", None), ("d2", "401.9"), ("d2", "412"), ("d3", "412"), ("d4", None)]
    rows += [(f"d{i}", "96.04") for i in range(5, 12)]
    path = sorted_file(tmp_path / "out.parquet", rows, group_rows)
    assert _scan_sorted(path) == (
        False,
        len({d for d, _ in rows}),
        sum(c is not None for _, c in rows),
    )
