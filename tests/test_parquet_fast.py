"""Normalisation over integer ranks (hieval.inputs.parquet_fast), the path clean Parquet files take,
checked against the general DuckDB path (hieval.inputs.normalize, forced here by switching the rank
path off) and against the plain-Python reference of test_normalize_onepass: the same rows, the same
record, the same scores file and the same error messages; and the files it must hand on to the
general path (it writes nothing for them).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hieval.codesystem import code_system
from hieval.errors import InputError
from hieval.hierarchy.table import write_level_table
from hieval.inputs import parquet_fast
from hieval.inputs.detect import LabelFile
from hieval.inputs.job import LabelJob
from hieval.inputs.normalize import normalize_labels
from hieval.inputs.options import LabelOptions
from tests.test_normalize_onepass import KNOWN, SPELLINGS, UNKNOWN, reference


def clean_rows(rng: random.Random, *, docs: int, spellings: bool) -> list[tuple[str, str]]:
    """Rows the rank path takes: no empty code, no surrounding spaces; duplicates, codes the
    tree lacks and (with ``spellings``) two spellings of one code."""
    pool = KNOWN + UNKNOWN + (list(SPELLINGS) if spellings else [])
    rows = [(f"d{rng.randint(1, docs)}", rng.choice(pool)) for _ in range(rng.randint(1, 80))]
    rows += [rows[rng.randrange(len(rows))] for _ in range(rng.randint(0, 5))]
    rng.shuffle(rows)
    return rows


def write(path: Path, rows: list[tuple[str, str]], *, layout: str) -> Path:
    """The rows as Parquet in one of the layouts a user's file may have."""
    if layout == "sorted-integer-ids":  # by document number, as most exports write them
        rows = sorted(rows, key=lambda row: int(row[0][1:]))
    docs, codes = [d for d, _ in rows], [c for _, c in rows]
    if layout in ("integer-ids", "sorted-integer-ids"):
        docs = [int(d[1:]) for d in docs]
    table = pa.table({"doc_id": docs, "code": codes})
    if layout == "large-strings":
        table = table.cast(pa.schema([("doc_id", pa.large_string()), ("code", pa.large_string())]))
    if layout == "dictionary-typed":
        table = pa.table({"doc_id": pa.array(docs).dictionary_encode(), "code": codes})
    pq.write_table(
        table,
        path,
        row_group_size=7 if layout.endswith(("small-row-groups", "integer-ids")) else None,
    )
    return path


class Paths:
    """Which way each call went, and the general path on demand."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.taken: list[bool] = []
        self.general = False
        real = parquet_fast.normalize

        def spy(*args, **kwargs):
            result = None if self.general else real(*args, **kwargs)
            self.taken.append(result is not None)
            return result

        monkeypatch.setattr(parquet_fast, "normalize", spy)

    def run(self, *, general: bool, **kwargs):
        self.general = general
        return normalize_labels(**kwargs)


def columns(path: Path) -> list[tuple[str, str, bool]]:
    """A Parquet file's columns as readers see them: name, Arrow type, nullable."""
    return [(f.name, str(f.type), f.nullable) for f in pq.read_schema(path)]


def dictionaries_hold_only_their_rows(path: Path) -> bool:
    """Each row group's ``doc_id`` and ``code`` dictionaries hold exactly the values of its rows:
    the encoder and the gold's document list read a file's values from its dictionaries."""
    parquet = pq.ParquetFile(path, read_dictionary=["doc_id", "code"])
    for group in range(parquet.num_row_groups):
        table = parquet.read_row_group(group, columns=["doc_id", "code"])
        for column in table.columns:
            for chunk in column.chunks:
                if sorted(chunk.dictionary.to_pylist()) != sorted(set(chunk.to_pylist())):
                    return False
    return True


def outputs(out: Path, scores: Path | None) -> tuple[list, list | None]:
    frame = pl.read_parquet(out)
    return frame.rows(), (pl.read_parquet(scores).rows() if scores else None)


LAYOUTS = [
    "small-row-groups",
    "integer-ids",
    "sorted-integer-ids",
    "large-strings",
    "dictionary-typed",
]
CASES = [  # (seed, spellings, policy, layout): random files as strings, and every layout
    *((seed, spellings, policy, "strings") for seed in range(3) for spellings in (False, True)
      for policy in ("place", "drop")),
    *((seed, seed % 2 == 1, policy, layout) for seed, layout in enumerate(LAYOUTS)
      for policy in ("place", "drop")),
]  # fmt: skip


@pytest.mark.parametrize(("seed", "spellings", "policy", "layout"), CASES)
def test_rank_path_writes_what_the_general_path_writes(
    icd9, tmp_path, monkeypatch, seed, spellings, policy, layout
):
    rng = random.Random(f"{seed}-{spellings}-{policy}-{layout}")
    paths = Paths(monkeypatch)
    monkeypatch.setattr(parquet_fast, "ROWS_PER_WRITE", 4)  # several row groups written
    gold_rows = [*clean_rows(rng, docs=8, spellings=spellings), ("d1", "401.9")]
    pred_rows = [*clean_rows(rng, docs=11, spellings=spellings), ("d2", "412")]
    gold_in = write(tmp_path / "gold_in.parquet", gold_rows, layout=layout)
    pred_in = write(tmp_path / "pred_in.parquet", pred_rows, layout=layout)
    results = {}
    for general in (False, True):
        tag = "general" if general else "ranks"
        gold_out, pred_out = tmp_path / f"gold_{tag}.parquet", tmp_path / f"pred_{tag}.parquet"
        scores = tmp_path / f"scores_{tag}.parquet"
        common = {"hierarchy": icd9, "unknown_codes": policy, "general": general}
        gold = paths.run(path=gold_in, name="gold", role="gold", out=gold_out, **common)
        pred = paths.run(
            path=pred_in,
            name="model",
            role="predictions",
            out=pred_out,
            gold_docs=gold_out,
            unknown_docs="drop",
            scores_out=scores,
            **common,
        )
        results[tag] = (
            json.loads(gold.to_json()),
            json.loads(pred.to_json()),
            outputs(gold_out, None),
            outputs(pred_out, scores),
            [columns(path) for path in (gold_out, pred_out, scores)],
        )
    assert paths.taken == [True, True, False, False]  # the rank path ran, then the general one
    assert results["ranks"] == results["general"]
    assert pq.ParquetFile(tmp_path / "gold_ranks.parquet").num_row_groups > 1
    for tag in ("ranks", "general"):
        for role in ("gold", "pred"):
            assert dictionaries_hold_only_their_rows(tmp_path / f"{role}_{tag}.parquet")
    # and both are right: the plain reference (documents as text, as SQL casts them)
    gold_docs = {str(d) for d, *_ in results["ranks"][2][0]}
    as_text = [(d[1:] if layout.endswith("integer-ids") else d, c) for d, c in pred_rows]
    expected_rows, expected = reference(as_text, policy=policy, gold_docs=gold_docs)
    got = results["ranks"][1]
    assert {key: got[key] for key in expected} == expected
    assert [(d, c) for d, c, _score in results["ranks"][3][0]] == expected_rows


@pytest.mark.parametrize(
    ("options", "pred_rows", "gold_rows"),
    [
        ({"unknown_codes": "error"}, [("d1", "401.99")], [("d1", "401.9")]),
        ({"unknown_docs": "error"}, [("d9", "401.9"), ("d1", "412")], [("d1", "401.9")]),
    ],
    ids=["unknown-code", "unknown-document"],
)
def test_refusals_are_worded_as_the_general_path_words_them(
    icd9, tmp_path, monkeypatch, options, pred_rows, gold_rows
):
    paths = Paths(monkeypatch)
    gold_out = tmp_path / "gold.parquet"
    paths.run(
        path=write(tmp_path / "g.parquet", gold_rows, layout="strings"),
        name="gold",
        role="gold",
        out=gold_out,
        hierarchy=icd9,
        general=True,
    )
    pred_in = write(tmp_path / "p.parquet", pred_rows, layout="strings")
    messages = []
    for general in (False, True):
        with pytest.raises(InputError) as caught:
            paths.run(
                path=pred_in,
                name="model",
                role="predictions",
                out=tmp_path / "new" / "out.parquet",
                hierarchy=icd9,
                gold_docs=gold_out,
                general=general,
                **options,
            )
        messages.append(str(caught.value))
        assert not (tmp_path / "new").exists()  # refused before anything is created
    assert messages[0] == messages[1]
    assert "not in the" in messages[0]


@pytest.mark.parametrize(
    ("columns", "role"),
    [
        ({"doc_id": ["d1", "d2"], "code": [" 401.9", "412"]}, "gold"),  # spaces: trimmed
        ({"doc_id": ["d1", "d2"], "code": ["", "412"]}, "gold"),  # an empty code row
        ({"doc_id": ["d1", None], "code": ["401.9", "412"]}, "gold"),  # a missing document
        ({"doc_id": ["d1", "d2"], "code": ["401.9", "nonsense"]}, "gold"),  # a bad code
        ({"doc_id": ["d1", "d2"], "code": ["401.9", "412"], "score": [0.9, 0.1]}, "predictions"),
        ({"doc_id": ["d1", "d2"], "code": ["401.9", "412"], "code_type": ["dx", "dx"]}, "gold"),
        ({"DOC_ID": ["d1", "d2"], "code": ["401.9", "412"]}, "gold"),  # another spelling
        ({"doc_id": [1.5, 2.0], "code": ["401.9", "412"]}, "gold"),  # fractional documents
    ],
    ids=["spaces", "empty-code", "null-doc", "bad-code", "scores", "code-type", "upper", "float"],
)
def test_files_out_of_the_ordinary_are_left_to_the_general_path(icd9, tmp_path, columns, role):
    source = tmp_path / "in.parquet"
    pq.write_table(pa.table(columns), source)
    job = LabelJob(
        role=role, out=tmp_path / "out.parquet", hierarchy=icd9, system=code_system("icd9"),
        options=LabelOptions(), unknown_codes="place", gold_docs=None, unknown_docs="error",
        default_threshold=0.5, tuned=None, scores_out=None, duckdb_config=None,
        memory_budget=None, on_fast_path=None,
    )  # fmt: skip
    found = parquet_fast.normalize(LabelFile(source, "x", "auto", job.system), job)
    assert found is None
    assert not (tmp_path / "out.parquet").exists()


def test_a_gold_of_unknown_codes_only_gets_the_general_message(icd9, tmp_path):
    """Nothing left to write: the rank path hands over, and the general path says why."""
    source = write(tmp_path / "g.parquet", [("d1", "401.99")], layout="strings")
    with pytest.raises(InputError, match="the gold holds no labels"):
        normalize_labels(
            source,
            name="gold",
            role="gold",
            out=tmp_path / "out.parquet",
            hierarchy=icd9,
            unknown_codes="drop",
        )


def test_normalising_and_encoding_a_clean_file_loads_no_pandas(icd9, tmp_path):
    """pyarrow's ``to_numpy``, ``pa.array`` and ``read_table`` import pandas where it is
    installed (a quarter second per process); the rank path and the encoder avoid them. Run in
    a fresh interpreter: the test workers have pandas loaded already."""
    pytest.importorskip("pandas")  # without it there is nothing to guard
    levels, ancestors = tmp_path / "levels.parquet", tmp_path / "ancestors.parquet"
    write_level_table(icd9, levels, ancestors)
    source = write(tmp_path / "in.parquet", [("d1", "401.9"), ("d2", "412")], layout="strings")
    script = f"""
import sys
import threading
from hieval.engine.driver import encode_labels
from hieval.hierarchy.table import read_level_table
from hieval.inputs.normalize import normalize_labels
table = read_level_table({str(levels)!r})
out = {str(tmp_path / "gold.parquet")!r}
normalize_labels({str(source)!r}, name="gold", role="gold", out=out, hierarchy=table)
encode_labels(out, out, {str(ancestors)!r}, levels=table.levels)
print("pandas" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_a_wide_table_and_text_that_is_not_utf8_are_left_to_the_general_path(icd9, tmp_path):
    """A Parquet file with ``_id`` and ``target`` is a wide table (format detection reads it
    so, whatever other columns it has); bytes that are not UTF-8 are refused by the general
    path's reader with its message, not by pyarrow with a traceback."""
    wide = tmp_path / "wide.parquet"
    pq.write_table(
        pa.table(
            {
                "_id": ["a", "b"],
                "target": [["401.9"], ["412"]],
                "doc_id": ["d1", "d2"],
                "code": ["401.9", "V58.61"],
            }
        ),
        wide,
    )
    record = normalize_labels(
        wide, name="gold", role="gold", out=tmp_path / "wide_out.parquet", hierarchy=icd9
    )
    assert record.format == "wide"
    assert pl.read_parquet(tmp_path / "wide_out.parquet").rows() == [("a", "401.9"), ("b", "412")]

    data = b"d1" + b"\xff\xfe" + b"d2"
    offsets = pa.py_buffer(bytes([0, 0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0, 6, 0, 0, 0]))
    docs = pa.Array.from_buffers(pa.string(), 3, [None, offsets, pa.py_buffer(data)])
    broken = tmp_path / "broken.parquet"
    pq.write_table(pa.table({"doc_id": docs, "code": ["412", "401.9", "401.9"]}), broken)
    with pytest.raises(InputError, match="not a readable Parquet file"):
        normalize_labels(
            broken, name="gold", role="gold", out=tmp_path / "broken_out.parquet", hierarchy=icd9
        )


def test_a_memory_limit_below_the_plan_leaves_the_file_to_duckdb(icd9, tmp_path):
    """``engine.memory_limit`` bounds normalisation: the rank path holds the file in memory, so
    under a limit its plan exceeds the file goes to DuckDB, which spills; the result is the
    same either way."""
    rows = [(f"d{i % 40}", KNOWN[i % len(KNOWN)]) for i in range(300)]
    source = write(tmp_path / "in.parquet", rows, layout="strings")
    plan = parquet_fast.planned_bytes(source)
    assert plan == parquet_fast.BASE_BYTES + parquet_fast.BYTES_PER_ROW * len(rows)
    options = {"path": source, "name": "gold", "role": "gold", "hierarchy": icd9}
    taken = []
    real = parquet_fast.normalize

    def spy(*args, **kwargs):
        result = real(*args, **kwargs)
        taken.append(result is not None)
        return result

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(parquet_fast, "normalize", spy)
        low = normalize_labels(out=tmp_path / "low.parquet", memory_budget=plan - 1, **options)
        high = normalize_labels(out=tmp_path / "high.parquet", memory_budget=plan, **options)
    assert taken == [False, True]
    assert low.to_json() == high.to_json()
    assert pl.read_parquet(tmp_path / "low.parquet").equals(
        pl.read_parquet(tmp_path / "high.parquet")
    )


@pytest.mark.parametrize("piece", [1, 3, 1000])
def test_keys_and_documents_built_in_pieces_match_a_plain_computation(monkeypatch, piece):
    """The keys and the distinct documents are built a piece of ``_SLICE`` rows at a time,
    with buffers reused across pieces: any piece size gives the whole-array answer."""
    import numpy as np

    monkeypatch.setattr(parquet_fast, "_SLICE", piece)
    rng = np.random.default_rng(piece)
    doc_rank, code_rank = rng.permutation(40), rng.permutation(25)
    doc_index = rng.integers(0, 40, 500).astype(np.int32)
    code_index = rng.integers(0, 25, 500).astype(np.int32)
    keys = parquet_fast._sorted_keys(doc_index, doc_rank, code_index, code_rank)
    plain = np.sort((doc_rank[doc_index] << parquet_fast.RANK_BITS) | code_rank[code_index])
    assert np.array_equal(keys, plain)
    documents = parquet_fast._documents(keys)
    assert np.array_equal(documents, np.unique(plain >> parquet_fast.RANK_BITS))
    assert parquet_fast._documents(keys[:0]).size == 0


@pytest.mark.parametrize(
    "numbers",
    [
        [3, 3, 5, 9, 9, 9, 12],
        [-4, -4, 0, 7],
        [42],
        [1, 2, 3, 4, 5],
        [7, 7, 7],
        [2**40, 2**40, 2**41],
    ],
)
@pytest.mark.parametrize("chunks", [1, 3])
def test_a_sorted_integer_column_is_encoded_as_arrow_encodes_it(numbers, chunks):
    """The runs of a sorted column give the indices and values Arrow's hash encoding gives
    (first appearance is ascending order), over one chunk or several."""
    size = -(-len(numbers) // chunks)
    column = pa.chunked_array(
        [numbers[at : at + size] for at in range(0, len(numbers), size)], pa.int64()
    )
    runs = parquet_fast._sorted_runs(column)
    encoded = column.combine_chunks().dictionary_encode()
    assert runs is not None
    assert runs[0].tolist() == encoded.indices.to_pylist()
    assert runs[0].dtype == np.int32
    assert runs[1].to_pylist() == encoded.dictionary.to_pylist()


@pytest.mark.parametrize("numbers", [[3, 1, 2], [1, 2, 2, 1], []])
def test_an_unsorted_or_empty_integer_column_is_left_to_the_hash_encoding(numbers):
    assert parquet_fast._sorted_runs(pa.chunked_array([numbers], pa.int64())) is None


def test_the_files_checksum_is_computed_beside_its_read(icd9, tmp_path, monkeypatch):
    """The record's sha256 comes from a thread of its own, started before the read (hashing
    releases the interpreter's lock), and is the file's."""
    from hieval import checksums

    seen: list[str] = []
    real = checksums.sha256_file

    def spy(path):
        seen.append(threading.current_thread().name)
        return real(path)

    monkeypatch.setattr("hieval.inputs.detect.sha256_file", spy)
    gold_in = write(tmp_path / "gold_in.parquet", [("d1", "401.9"), ("d2", "412")], layout="x")
    record = normalize_labels(
        path=gold_in, name="gold", role="gold", out=tmp_path / "gold.parquet", hierarchy=icd9
    )
    assert seen == ["sha256"]
    assert record.sha256 == real(gold_in)


def test_a_checksum_that_fails_is_reported_by_the_record_not_its_thread(tmp_path, capsys):
    """A file gone before its hash: the thread prints nothing; asking for the sha256 raises."""
    from hieval.inputs.detect import LabelFile

    source = LabelFile.__new__(LabelFile)
    source.path = tmp_path / "gone.parquet"
    parquet_fast._hash(source)
    assert capsys.readouterr().err == ""
    with pytest.raises(OSError):
        _ = source.sha256
