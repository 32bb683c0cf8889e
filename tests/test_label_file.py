"""A label file's path makes one trip (issue 32): whichever way normalisation goes (the fast
Parquet path, the general DuckDB path, or the one handing over to the other), the file's
format is detected once and the file is hashed once. Counted by spying on the detectors and on
the hash the readers call; the outputs are checked by the golden and the normalisation tests."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hieval import checksums
from hieval.inputs.formats import mimic4, wide
from hieval.inputs.normalize import normalize_labels


class _Counting:
    """``hashlib`` with its ``sha256`` calls counted."""

    def __init__(self):
        self.sha256_calls = 0

    def sha256(self, *args):
        self.sha256_calls += 1
        return hashlib.sha256(*args)


@pytest.fixture
def calls(monkeypatch):
    counted = {"looks_wide": 0, "looks_like_mimic4": 0}
    hashes = _Counting()
    for module, attribute in ((wide, "looks_wide"), (mimic4, "looks_like_mimic4")):
        real = getattr(module, attribute)

        def spy(*args, _real=real, _name=attribute, **kwargs):
            counted[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, attribute, spy)
    monkeypatch.setattr(checksums, "hashlib", hashes)
    yield counted, hashes


def _parquet(path: Path, docs: list[str], codes: list[str]) -> Path:
    pq.write_table(pa.table({"doc_id": docs, "code": codes}), path)
    return path


def test_a_clean_parquet_file_is_detected_and_hashed_once(icd9, tmp_path, calls):
    counted, hashes = calls
    source = _parquet(tmp_path / "g.parquet", ["d1", "d2"], ["401.9", "412"])
    record = normalize_labels(
        source, name="gold", role="gold", out=tmp_path / "o.parquet", hierarchy=icd9
    )
    assert record.format == "long"
    assert (counted["looks_wide"], hashes.sha256_calls) == (1, 1)


def test_a_file_the_fast_path_hands_over_is_detected_and_hashed_once(icd9, tmp_path, calls):
    """Predictions whose codes the hierarchy lacks, dropped: the fast path has read, detected
    and hashed the file when it finds nothing to write, and hands it to DuckDB, which writes the
    empty table; neither the detection nor the hash is done again."""
    counted, hashes = calls
    source = _parquet(tmp_path / "p.parquet", ["d1"], ["401.99"])
    record = normalize_labels(
        source,
        name="m",
        role="predictions",
        out=tmp_path / "o.parquet",
        hierarchy=icd9,
        unknown_codes="drop",
    )
    assert record.labels == 0
    assert record.unknown_codes == {"401.99": 1}
    assert (counted["looks_wide"], hashes.sha256_calls) == (1, 1)


def test_a_csv_file_of_an_icd_evaluation_is_looked_at_once(icd9, tmp_path, calls):
    """An ICD-9 evaluation keeps a MIMIC-IV table's ICD-9 rows, so a CSV file is checked for
    MIMIC-IV's columns: once, not once for the version and once more for the format."""
    counted, hashes = calls
    source = tmp_path / "g.csv"
    source.write_text("doc_id,code\nd1,401.9\nd2,412\n")
    record = normalize_labels(
        source, name="gold", role="gold", out=tmp_path / "o.parquet", hierarchy=icd9
    )
    assert record.format == "long"
    assert (counted["looks_like_mimic4"], hashes.sha256_calls) == (1, 1)


def test_a_mimic4_table_is_read_at_the_evaluations_version(icd9, tmp_path, calls):
    counted, hashes = calls
    source = tmp_path / "diagnoses_icd.csv"
    source.write_text(
        "subject_id,hadm_id,seq_num,icd_code,icd_version\n1,10,1,4019,9\n1,10,2,I10,10\n"
    )
    record = normalize_labels(
        source, name="gold", role="gold", out=tmp_path / "o.parquet", hierarchy=icd9
    )
    assert record.format == "mimic4_icd9"
    assert record.other_version_rows == 1
    assert (counted["looks_like_mimic4"], hashes.sha256_calls) == (1, 1)
