"""Machine settings of a run (config key ``engine``): threads and memory bounds.

They never change a number, only whether and how fast a job runs, so the workflow reads them
from the config rather than from rule parameters (changing them reruns nothing). The count
jobs' memory model lives here too, because the workflow sizes SLURM requests from it.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

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


#: Share of a whole machine's memory (``/proc/meminfo``'s MemTotal) that the default
#: ``engine.memory_limit`` takes, as DuckDB's own default does: the rest is the system's and
#: other programs'. A SLURM allocation or a cgroup limit is this process's alone (the scheduler
#: sized it from the same memory model, plus a floor), so it is taken whole.
MACHINE_SHARE = 0.8
#: cgroup v1's "no limit" is a page-rounded 2**63 - 1; anything this large is no limit.
_NO_CGROUP_LIMIT = 2**60


@dataclass(frozen=True)
class MemorySource:
    """The memory this process may use, and what says so (for messages)."""

    total: int  # bytes of the source
    usable: int  # bytes the default limit takes of them
    said_by: str


def machine_memory(
    env: Mapping[str, str] | None = None, root: str | os.PathLike = "/"
) -> MemorySource | None:
    """The memory this process may use, from the tightest of: a SLURM job's allocation
    (``SLURM_MEM_PER_NODE``, or ``SLURM_MEM_PER_CPU`` times its CPUs; megabytes), the cgroup
    limit of this process (v2 ``memory.max``, v1 ``memory.limit_in_bytes``, a container's or a
    systemd slice's) and :data:`MACHINE_SHARE` of the machine's memory (``/proc/meminfo``).
    None when none of them can be read. ``env`` and ``root`` are where to look (the tests'
    fake allocations and file systems)."""
    env = os.environ if env is None else env
    root = Path(root)
    found = [_slurm_memory(env), _cgroup_memory(root)]
    total = _meminfo_total(root / "proc" / "meminfo")
    if total is not None:
        found.append(
            MemorySource(
                total,
                int(MACHINE_SHARE * total),
                f"the machine's {_gigabytes(total)}, from /proc/meminfo",
            )
        )
    known = [source for source in found if source is not None]
    return min(known, key=lambda source: source.usable) if known else None


def _slurm_memory(env: Mapping[str, str]) -> MemorySource | None:
    """A SLURM job's allocation: per node, or per CPU times the job's CPUs on this node."""
    per_node = _megabytes(env.get("SLURM_MEM_PER_NODE"))
    if per_node:
        return MemorySource(
            per_node, per_node, f"the SLURM job's {_gigabytes(per_node)}, from SLURM_MEM_PER_NODE"
        )
    per_cpu = _megabytes(env.get("SLURM_MEM_PER_CPU"))
    if not per_cpu:
        return None
    for name in ("SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE"):
        cpus = env.get(name, "").strip()
        if cpus.isdigit() and int(cpus) > 0:
            total = per_cpu * int(cpus)
            said = f"the SLURM job's {_gigabytes(total)}, from SLURM_MEM_PER_CPU x {name}"
            return MemorySource(total, total, said)
    return MemorySource(
        per_cpu, per_cpu, f"the SLURM job's {_gigabytes(per_cpu)}, from SLURM_MEM_PER_CPU (one CPU)"
    )


def _megabytes(text: str | None) -> int | None:
    """SLURM's memory variables: megabytes, an optional unit letter (``4000``, ``4G``)."""
    match = re.fullmatch(r"\s*([0-9]+)\s*([KMGT]?)\s*", text or "", flags=re.IGNORECASE)
    if not match or int(match.group(1)) == 0:
        return None
    unit = {"": 2**20, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    return int(match.group(1)) * unit[match.group(2).upper()]


def _cgroup_memory(root: Path) -> MemorySource | None:
    """The tightest memory limit of this process's cgroup and the cgroups above it (v2 and
    v1 layouts), as mounted under ``root/sys/fs/cgroup``."""
    base = root / "sys" / "fs" / "cgroup"
    limits = []
    try:
        lines = (root / "proc" / "self" / "cgroup").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, group = parts
        if controllers == "":  # v2: one unified hierarchy
            folders, name = [base], "memory.max"
        elif "memory" in controllers.split(","):
            folders, name = [base / "memory", base / controllers], "memory.limit_in_bytes"
        else:
            continue
        for folder in folders:
            here = folder / group.lstrip("/")
            for level in (here, *here.parents):
                limits.append(_cgroup_limit(level / name))
                if level == folder:
                    break
    known = [limit for limit in limits if limit is not None]
    if not known:
        return None
    limit = min(known)
    return MemorySource(
        limit, limit, f"the cgroup limit of {_gigabytes(limit)}, from /sys/fs/cgroup"
    )


def _cgroup_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit() or int(text) >= _NO_CGROUP_LIMIT or int(text) == 0:
        return None  # "max", or v1's no limit
    return int(text)


def _meminfo_total(path: Path) -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def default_memory_limit(source: MemorySource | None = None) -> str | None:
    """``engine.memory_limit``'s default: the memory this process may use
    (:func:`machine_memory`), in megabytes (``18432MB``); None when it cannot be known."""
    source = source or machine_memory()
    return None if source is None else f"{source.usable // 10**6}MB"


def default_duckdb_limit() -> str:
    """:data:`DEFAULT_DUCKDB_BYTES`, or DuckDB's own default where that is less, in DuckDB's
    spelling. DuckDB's default is 80 % of the memory this process may use: of the machine, of a
    container's cgroup limit or of a SLURM job's allocation (``SLURM_MEM_PER_NODE``), so a small
    job is never given more than it has."""
    own = _size_bytes(duckdb_default_limit())
    limit = DEFAULT_DUCKDB_BYTES if own is None else min(DEFAULT_DUCKDB_BYTES, own)
    return f"{limit // 2**20}MiB"


def duckdb_default_limit() -> str:
    """DuckDB's own ``memory_limit`` in this process (e.g. ``18.8 GiB``), asked once for the
    SLURM variables DuckDB reads it from (a job's allocation), else from the machine's or the
    container's memory, fixed while the process runs: a connection to ask costs about 12 ms,
    which every file normalised (every chunk of an Evaluator's batches) would pay again."""
    slurm = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("SLURM_")))
    with _asking:  # a second caller waits for the first's answer instead of asking again
        return _duckdb_default_limit(slurm)


_asking = threading.Lock()


def prefetch_duckdb_limit() -> threading.Thread:
    """Ask DuckDB for :func:`duckdb_default_limit` in a background thread, now.

    Why: the question opens a database (30–60 ms with other work beside it), and a run's first
    two normalisations (the gold's and a model's, side by side) both asked it as they started,
    one waiting for the other, before either read a row. Asked while the run prepares, the
    answer is there when they start. A failure is left for the first real caller to meet."""

    def ask() -> None:
        with contextlib.suppress(Exception):
            duckdb_default_limit()

    thread = threading.Thread(target=ask, name="duckdb-limit", daemon=True)
    thread.start()
    return thread


@functools.lru_cache(maxsize=8)
def _duckdb_default_limit(_slurm: tuple[tuple[str, str], ...]) -> str:
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
        folder, and a user's path is literal (``~`` is then a folder of that name); and
        ``threads``: the run's (``--threads``, ``engine.threads``), else the cores this process
        may use. DuckDB's own default is the host's core count, so a job pinned to two cores
        of a larger node (a SLURM allocation, ``taskset``) ran its queries on all of them."""
        limit = self.memory_limit or default_duckdb_limit()
        spill = os.path.abspath(self.temp_directory) if self.temp_directory else None
        threads = self.threads or default_threads()
        settings = {"memory_limit": limit, "temp_directory": spill, "threads": threads}
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
        (``--memory-limit 4GB``, ``engine.memory_limit: 4GB``), else the default: the memory
        this process may use (:func:`machine_memory`: a SLURM allocation, a cgroup limit, or 80 %
        of the machine), else DuckDB's reading of it."""
        if self.memory_limit:
            return parse_bytes(self.memory_limit), setting("memory_limit", self.memory_limit)
        source = machine_memory()
        if source is not None:
            return source.usable, (
                f"the default {setting('memory_limit')} of {_gigabytes(source.usable)}, what this "
                f"process may use ({_share(source)}{source.said_by})"
            )
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

    def check_budget(self, labels: int, *, what: str = "this count job has") -> None:
        """Refuse a job whose planned peak exceeds :meth:`memory_budget` (``memory_limit``, or
        its default derived from the machine), with the shards or the limit that fit.
        ``what`` says whose labels these are (a plan made before reading counts file rows)."""
        budget, source = self.memory_budget()
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
            f"{what} {labels:,} labels and needs about {_gigabytes(need)}, above {source}; {advice}"
        )

    def check_inputs(self, files: Iterable[tuple[str, str | os.PathLike, str]]) -> None:
        """Refuse, before anything is read, a score matrix or wide table (``(who, path,
        role)``) whose normalisation cannot fit :meth:`memory_budget`, or, expanded to long
        rows, DuckDB's limit, planned from its header or footer (:func:`input_shape`), naming
        the limit that fits (issue 36: never an out-of-memory error halfway). Other inputs are
        planned once read."""
        for who, path, role in files:
            shape = input_shape(path, role=role)
            if shape is not None:
                self._check_input(shape, f"{who}: {path} holds {shape.describe()}")

    def _check_input(self, shape: InputShape, holds: str) -> None:
        budget, source = self.memory_budget()
        need = self._fixed_bytes() + shape.bytes()
        in_duckdb = shape.duckdb_bytes()
        limit = self.memory_limit or default_duckdb_limit()
        if need <= budget and in_duckdb <= parse_bytes(limit):
            return
        fits = max(need, in_duckdb)
        advice = f"raise {setting('memory_limit')} to {math.ceil(fits / 1e9)}GB or more"
        if not shape.blocked and shape.role != "gold":
            blocked = _gigabytes(self._fixed_bytes() + shape.blocked_bytes())
            advice += (
                " (a floating .npy with its code and document lists is read by blocks of "
                f"documents, in about {blocked})"
            )
        if need > budget:
            raise HievalError(
                f"{holds} and needs about {_gigabytes(need)} {shape.how()}, above {source}; "
                f"{advice}"
            )
        flag = setting("memory_limit")
        bound = f"{flag} {limit}" if self.memory_limit else f"the default {limit} ({flag} unset)"
        raise HievalError(
            f"{holds}; DuckDB needs about {_gigabytes(in_duckdb)} to normalise them "
            f"{shape.how()}, above its limit, {bound}; {advice}"
        )


#: Bytes a score cell takes expanded to long rows (DuckDB's text keys, then Polars' and NumPy's
#: copies) at least: the issue measured 24 GB at MIMIC-IV's 157M cells (150 bytes a cell) on
#: that path; the low end is taken so that no plan that fits is refused. DuckDB's share alone
#: is planned at as much: a wide table of 19.6M float32 scores ran out of its default 1.5 GiB
#: (more than 80 bytes a cell).
BYTES_PER_LONG_CELL = 100
#: Bytes a cell of one block of documents takes when a floating ``.npy`` is read by blocks:
#: the block and its copies (sorted columns, float64 views, pooled levels), about eight
#: float64s. Measured: 1.3-1.7 GB peak at 2,475-19,802 x 7,900 in blocks of 1,024 documents,
#: 2 threads (benchmarks/RESULTS.md), where this and the fixed part plan 1.5 GB.
BYTES_PER_BLOCK_CELL = 64
#: A dense dev matrix tuned by the exact sweep also holds its distinct scores (at most every
#: cell, in its dtype) this many times over (every block's, merged in place; the result),
#: with a byte a cell besides (the mask of the first of equal scores).
DISTINCT_COPIES = 2


@dataclass(frozen=True)
class InputShape:
    """A matrix-like input's shape known before reading: ``docs`` x ``codes`` cells of
    ``itemsize`` bytes, read by blocks (``blocked``) or expanded to long rows, as the ``role``
    (``gold``, ``predictions``, ``dev``: a dev matrix to tune on) is read."""

    role: str
    docs: int
    codes: int
    itemsize: int
    blocked: bool
    block_docs: int

    def bytes(self) -> int:
        """The planned bytes beyond a job's fixed part."""
        if self.role == "gold":  # 0/1 decisions, loaded whole and tested cell by cell
            return self.docs * self.codes * (self.itemsize + 2)
        if self.blocked:
            distinct = DISTINCT_COPIES * self.itemsize + 1 if self.role == "dev" else 0
            return self.blocked_bytes() + self.docs * self.codes * distinct
        return self.docs * self.codes * BYTES_PER_LONG_CELL

    def duckdb_bytes(self) -> int:
        """The planned bytes of DuckDB's normalisation (the decided pairs only, by blocks)."""
        if self.role == "gold" or self.blocked:
            return 0
        return self.docs * self.codes * BYTES_PER_LONG_CELL

    def describe(self) -> str:
        return f"{self.docs:,} x {self.codes:,} ({self.docs * self.codes:,}) {self.what()}"

    def blocked_bytes(self) -> int:
        return BYTES_PER_BLOCK_CELL * min(self.docs, self.block_docs) * self.codes

    def what(self) -> str:
        return "0/1 cells" if self.role == "gold" else "scores"

    def how(self) -> str:
        if self.role == "gold":
            return "loaded whole"
        if self.blocked:
            return f"read by blocks of {self.block_docs:,} documents"
        return "expanded to long rows"


def input_shape(path: str | os.PathLike, *, role: str) -> InputShape | None:
    """The shape of a dense matrix (``.npy`` header; ``.npz`` members' headers) or of a wide
    table's score columns (Parquet footer, Feather schema), read without reading a cell; None
    for other inputs or an unreadable header (the readers then say what is wrong)."""
    import numpy as np  # here: Snakemake imports this module at every start

    # Names from light modules: a long Parquet file asks for its footer only (numba and the
    # blocked kernels load where a matrix is read, not here).
    from hieval.inputs.dense_decisions import BLOCK_DOCS, BLOCK_DOCS_VARIABLE
    from hieval.inputs.dense_normalize import LONG_PATH_VARIABLE

    path = Path(path)
    suffix = path.suffix.lower()
    block = int(os.environ.get(BLOCK_DOCS_VARIABLE, BLOCK_DOCS))
    try:
        if suffix == ".npy":
            shape, dtype = _npy_header(path)
            blocked = (
                np.issubdtype(dtype, np.floating) and os.environ.get(LONG_PATH_VARIABLE) != "1"
            )
        elif suffix == ".npz":  # its member copied into an .npy, then read by blocks
            shape, dtype = _npz_header(path)
            blocked = (
                np.issubdtype(dtype, np.floating) and os.environ.get(LONG_PATH_VARIABLE) != "1"
            )
        elif suffix in (".parquet", ".feather") and role != "gold":
            shape, floating = _wide_shape(path)
            dtype = np.dtype(np.float64)  # copied as float64 (hieval.inputs.dense_wide)
            blocked = floating and os.environ.get(LONG_PATH_VARIABLE) != "1"
        else:
            return None
    except Exception:
        return None
    if shape is None or len(shape) != 2:
        return None
    return InputShape(role, int(shape[0]), int(shape[1]), dtype.itemsize, blocked, block)


def _npy_header(path: Path):

    with path.open("rb") as handle:
        return _array_header(handle)


def _array_header(handle):
    """The shape and dtype of the ``.npy`` whose bytes ``handle`` reads (its header only)."""
    import numpy as np

    major, _minor = np.lib.format.read_magic(handle)
    read = (
        np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
    )
    shape, _order, dtype = read(handle)
    return shape, dtype


def _npz_header(path: Path):
    """The shape and dtype of the matrix an ``.npz`` holds (``scores``, or its only array)."""
    import zipfile

    with zipfile.ZipFile(path) as archive:
        names = [n for n in archive.namelist() if n.endswith(".npy")]
        name = "scores.npy" if "scores.npy" in names else (names[0] if len(names) == 1 else None)
        if name is None:
            return None, None
        with archive.open(name) as handle:
            return _array_header(handle)


def _wide_shape(path: Path) -> tuple[tuple[int, int] | None, bool]:
    """Rows x score columns of a wide table (``_id``, ``target``, one column per code), and
    whether every score column is floating (read by blocks, else as long rows)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.suffix.lower() == ".parquet":
        metadata = pq.read_metadata(path)
        schema, rows = metadata.schema.to_arrow_schema(), metadata.num_rows
    else:
        with pa.memory_map(str(path)) as source:
            reader = pa.ipc.open_file(source)
            schema = reader.schema
            rows = sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
    scores = [f for f in schema if f.name not in ("_id", "target")]
    if not {"_id", "target"} <= set(schema.names):
        return None, False
    return (rows, len(scores)), all(pa.types.is_floating(f.type) for f in scores)


def _gigabytes(size: int) -> str:
    return f"{size / 1e9:,.1f} GB"


def _share(source: MemorySource) -> str:
    return "" if source.usable == source.total else f"{MACHINE_SHARE * 100:.0f} % of "


def input_rows(paths: Iterable[str | os.PathLike]) -> int | None:
    """Rows of label files from their Parquet footers, before anything is read: at least as
    many as their labels (repeats and dropped codes only lower them). None when one is not an
    unscored long Parquet file (``doc_id, code``): its labels are not known before reading
    (a scored file's labels are the pairs its threshold or top-k keeps, often far fewer)."""
    import pyarrow as pa  # here: Snakemake imports this module at every start
    import pyarrow.parquet as pq

    rows = 0
    for path in paths:
        if Path(path).suffix.lower() != ".parquet":
            return None
        try:
            metadata = pq.read_metadata(path)
        except (OSError, pa.ArrowException):
            return None  # the readers say what is wrong with it
        names = set(metadata.schema.names)
        if not {"doc_id", "code"} <= names or "score" in {n.lower() for n in names}:
            return None
        rows += metadata.num_rows
    return rows


def label_rows(path) -> int:
    """Rows of a normalised label table, from its Parquet footer (nothing else is read)."""
    import pyarrow.parquet as pq  # here: Snakemake imports this module at every start

    return pq.ParquetFile(path).metadata.num_rows
