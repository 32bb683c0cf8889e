"""Machine settings of a run (config key ``engine``): threads and memory bounds.

They never change a number, only whether and how fast a job runs, so the workflow reads them
from the config rather than from rule parameters (changing them reruns nothing). The count
jobs' memory model lives here too, because the workflow sizes SLURM requests from it.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from hieval.engine.groups import default_threads
from hieval.errors import ConfigError, HievalError
from hieval.hints import offers, setting

#: Peak memory of a count job (one pass: counts, ICM sums, streamed per-document table), fitted
#: to benchmarks/harness.py at 100x and 1000x MIMIC-III with 2 threads (1.14 GB for 10.8M
#: labels, 2.37 GB for 108M) and rounded up: a base, each thread's slice in flight, the keys
#: and per-document sums.
BASE_BYTES, BYTES_PER_THREAD, BYTES_PER_LABEL = 550 * 2**20, 200 * 2**20, 20
#: The bootstrap keeps every replicate's value of every tidy row of every model (float64) until
#: the intervals are taken; a pair's paired differences, their quantiles' and median's copies
#: are three more such arrays per pair in flight (one per thread; a lone model's intervals
#: make the last two). Its blocks of weights are
#: bounded (about 32 MB) and the per-document tables are the count job's size, so the model is
#: the count job's fixed part plus these arrays.
BYTES_PER_VALUE, COPIES_PER_PAIR = 8, 3
#: Tidy rows of one model at most, for the check made before any row exists: about 340 for
#: ICD-9 without scores, about 620 for ICD-10 (seven levels) with ranking rows.
ROWS_PER_MODEL = 1024
_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}  # fmt: skip


#: DuckDB's memory in normalisation at most, when ``engine.memory_limit`` is unset. DuckDB's own
#: default is 80 % of the memory it sees, and it takes it: normalising the 1000x MIMIC-III gold
#: (54M rows) peaked at 5.0 GB; under 1.5 GB it spilled its sort and took the same 15.5 s
#: (benchmarks/README.md). So a run's footprint is the count job's, not DuckDB's appetite.
DEFAULT_DUCKDB_BYTES = 1536 * 2**20


def default_duckdb_limit() -> str:
    """:data:`DEFAULT_DUCKDB_BYTES`, or DuckDB's own default where that is less, in DuckDB's
    spelling. DuckDB's default is 80 % of the memory this process may use: of the machine, of a
    container's cgroup limit or of a SLURM job's allocation (``SLURM_MEM_PER_NODE``), so a small
    job is never given more than it has."""
    own = _size_bytes(duckdb_default_limit())
    limit = DEFAULT_DUCKDB_BYTES if own is None else min(DEFAULT_DUCKDB_BYTES, own)
    return f"{limit // 2**20}MiB"


def duckdb_default_limit() -> str:
    """DuckDB's own ``memory_limit`` in this process (e.g. ``18.8 GiB``)."""
    import duckdb  # where used: the Snakefile imports this module for its memory model

    with duckdb.connect() as con:
        return str(con.execute("SELECT current_setting('memory_limit')").fetchone()[0])


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
        raise ConfigError(f"{setting('memory_limit')} {memory_limit_problem(text)}")
    return size


@dataclass(frozen=True)
class Resources:
    """Machine settings: threads, and memory bounds.

    Normalisation runs in DuckDB under ``memory_limit``, spilling to ``temp_directory``. The
    counting engine keeps 8 bytes per label in memory, per-document sums, and one slice of
    about a quarter of a million labels per thread at work, so its peak grows with the labels
    of one job: with ``memory_limit`` a count job that would exceed it stops before reading,
    saying how many shards fit (``shards`` in the config splits the documents so that each job
    holds a part). ``threads`` defaults to the cores this process may use.
    """

    threads: int | None = None
    memory_limit: str | None = None
    temp_directory: str | None = None

    def __post_init__(self) -> None:
        # A limit DuckDB cannot parse fails deep in a job with a parser error: check it first.
        if self.memory_limit:
            parse_bytes(self.memory_limit)

    def duckdb_config(self) -> dict[str, str]:
        """DuckDB connection settings: ``memory_limit`` (unset: :func:`default_duckdb_limit`)
        and ``temp_directory`` when set, absolute: DuckDB reads a leading ``~`` as the home
        folder, and a user's path is literal (``~`` is then a folder of that name)."""
        limit = self.memory_limit or default_duckdb_limit()
        spill = os.path.abspath(self.temp_directory) if self.temp_directory else None
        settings = {"memory_limit": limit, "temp_directory": spill}
        return {key: str(value) for key, value in settings.items() if value}

    def count_job_bytes(self, labels: int) -> int:
        """The planned peak of a count job of ``labels`` labels (the module's memory model)."""
        return self._fixed_bytes() + BYTES_PER_LABEL * labels

    def _fixed_bytes(self) -> int:
        return BASE_BYTES + BYTES_PER_THREAD * (self.threads or default_threads())

    def allows_overlap(self, planned: int, *, labels: int) -> bool:
        """Whether work planned at ``planned`` bytes may run beside other work (two label
        files normalised at once): with two threads or more, and only when it needs no more
        memory than the count job of the same ``labels`` plans for anyway, nor more than
        ``memory_limit``. Overlap then never raises a run's peak (at 1000x MIMIC-III it would:
        two whole files in memory, 4.7 GB, against the count job's 3.1 GB)."""
        if (self.threads or default_threads()) < 2:
            return False
        ceiling = self.count_job_bytes(labels)
        if self.memory_limit:
            ceiling = min(ceiling, parse_bytes(self.memory_limit))
        return planned <= ceiling

    def memory_budget(self) -> tuple[int, str]:
        """The bytes a job may use and what sets them, in the running entry point's syntax
        (``--memory-limit 4GB``, ``engine.memory_limit: 4GB``), else DuckDB's
        reading of the memory this process may use (80 % of the machine, container or SLURM
        job: :func:`duckdb_default_limit`)."""
        if self.memory_limit:
            return parse_bytes(self.memory_limit), setting("memory_limit", self.memory_limit)
        own = duckdb_default_limit()
        size = _size_bytes(own)
        if size is None:  # DuckDB could not tell: no check
            return 2**63, "no known limit"
        return size, f"the {own} this process may use (80 % of its memory)"

    def bootstrap_bytes(self, replicates: int, *, models: int, rows: int = ROWS_PER_MODEL) -> int:
        """The planned peak of the bootstrap of ``models`` models of ``rows`` tidy rows each."""
        return self._fixed_bytes() + replicates * self._replicate_bytes(models, rows)

    def _replicate_bytes(self, models: int, rows: int) -> int:
        # at least one set of copies: a lone model's own quantiles and median
        pairs = models * (models - 1) // 2
        in_flight = max(1, min(pairs, self.threads or default_threads()))
        return BYTES_PER_VALUE * rows * (models + COPIES_PER_PAIR * in_flight)

    def check_bootstrap(self, replicates: int, *, models: int, rows: int = ROWS_PER_MODEL) -> None:
        """Refuse a bootstrap whose replicates cannot fit in :meth:`memory_budget`, naming the
        largest number that does (before anything is read: a billion replicates would
        otherwise fail after counting, allocating terabytes)."""
        if replicates <= 0 or models <= 0:
            return
        need = self.bootstrap_bytes(replicates, models=models, rows=rows)
        budget, source = self.memory_budget()
        if need <= budget:
            return
        fit = (budget - self._fixed_bytes()) // self._replicate_bytes(models, rows)
        advice = (
            f"at most {fit:,} fit: set {setting('bootstrap', fit)} or fewer"
            if fit > 0
            else f"raise {setting('memory_limit')}: it is below the engine's fixed needs"
        )
        raise ConfigError(
            f"bootstrap {replicates:,} replicates of {models} model(s) need about "
            f"{_gigabytes(need)}, above {source}; {advice}"
        )

    def check_budget(self, labels: int) -> None:
        """Refuse a job whose planned peak exceeds ``memory_limit``, with the shards that fit."""
        if not self.memory_limit:
            return
        budget = parse_bytes(self.memory_limit)
        fixed = self._fixed_bytes()
        need = self.count_job_bytes(labels)
        if need <= budget:
            return
        room = budget - fixed
        shards = math.ceil(BYTES_PER_LABEL * labels / room) if room > 0 else None
        if shards and offers("shards"):
            advice = (
                f"set {setting('shards', shards)} (or more) so that each count job holds a part"
            )
        elif shards:
            advice = f"raise {setting('memory_limit')} to {math.ceil(need / 1e9)}GB or more"
        else:
            advice = f"raise {setting('memory_limit')}: it is below the engine's fixed needs"
        raise HievalError(
            f"this count job has {labels:,} labels and needs about {_gigabytes(need)}, above "
            f"{setting('memory_limit', self.memory_limit)}; {advice}"
        )


def _gigabytes(size: int) -> str:
    return f"{size / 1e9:,.1f} GB"


def label_rows(path) -> int:
    """Rows of a normalised label table, from its Parquet footer (nothing else is read)."""
    import pyarrow.parquet as pq  # here: Snakemake imports this module at every start

    return pq.ParquetFile(path).metadata.num_rows
