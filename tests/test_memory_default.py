"""``engine.memory_limit``'s default, derived from the machine (issue 36): a SLURM allocation, a
cgroup limit or 80 % of ``/proc/meminfo``'s MemTotal, whichever is tightest; and a count plan
that does not fit refused before anything is read, naming the limit or the shards that fit."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from hieval import hints, resources
from hieval.cli import main
from hieval.errors import HievalError
from hieval.resources import (
    BASE_BYTES,
    BYTES_PER_LABEL,
    BYTES_PER_THREAD,
    MemorySource,
    Resources,
    default_memory_limit,
    input_rows,
    machine_memory,
)

GIB = 2**30
NO_LIMIT_V1 = "9223372036854771712"  # cgroup v1's page-rounded 2**63 - 1


def _tree(root: Path, files: dict[str, str]) -> Path:
    """A fake file system: ``files`` by their path under ``root``."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _meminfo(kib: int) -> str:
    return f"MemTotal:       {kib} kB\nMemFree:        1234 kB\nMemAvailable:   99 kB\n"


def test_a_bare_machine_gives_80_percent_of_its_memory(tmp_path):
    root = _tree(tmp_path, {"proc/meminfo": _meminfo(16 * 2**20)})  # 16 GiB
    source = machine_memory({}, root)
    assert source.total == 16 * GIB and source.usable == int(0.8 * 16 * GIB)
    assert "/proc/meminfo" in source.said_by
    assert default_memory_limit(source) == f"{int(0.8 * 16 * GIB) // 10**6}MB"  # 13743MB
    assert machine_memory({}, tmp_path / "nothing") is None


def test_a_cgroup_v2_limit_above_this_group_is_taken_whole(tmp_path):
    root = _tree(
        tmp_path,
        {
            "proc/meminfo": _meminfo(64 * 2**20),
            "proc/self/cgroup": "0::/user.slice/job-7\n",
            "sys/fs/cgroup/user.slice/job-7/memory.max": "max\n",
            "sys/fs/cgroup/user.slice/memory.max": f"{3 * GIB}\n",
            "sys/fs/cgroup/memory.max": f"{5 * GIB}\n",
        },
    )
    source = machine_memory({}, root)
    assert (source.total, source.usable) == (3 * GIB, 3 * GIB)  # the tightest, not 80 % of it
    assert "cgroup" in source.said_by


def test_a_cgroup_v1_container_limit(tmp_path):
    # as in a container: the host's path is not mounted, the container's group is the root
    root = _tree(
        tmp_path,
        {
            "proc/meminfo": _meminfo(64 * 2**20),
            "proc/self/cgroup": "5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n",
            "sys/fs/cgroup/memory/memory.limit_in_bytes": f"{2 * GIB}\n",
        },
    )
    assert machine_memory({}, root).usable == 2 * GIB
    (root / "sys/fs/cgroup/memory/memory.limit_in_bytes").write_text(NO_LIMIT_V1)
    assert machine_memory({}, root).usable == int(0.8 * 64 * GIB)  # no limit: the machine's


@pytest.mark.parametrize(
    ("env", "expected", "named"),
    [
        ({"SLURM_MEM_PER_NODE": "4000"}, 4000 * 2**20, "SLURM_MEM_PER_NODE"),
        ({"SLURM_MEM_PER_NODE": "6G"}, 6 * GIB, "SLURM_MEM_PER_NODE"),
        (
            {"SLURM_MEM_PER_CPU": "2000", "SLURM_CPUS_PER_TASK": "3", "SLURM_CPUS_ON_NODE": "8"},
            6000 * 2**20,
            "SLURM_CPUS_PER_TASK",
        ),
        ({"SLURM_MEM_PER_CPU": "1500", "SLURM_CPUS_ON_NODE": "2"}, 3000 * 2**20, "ON_NODE"),
        ({"SLURM_MEM_PER_CPU": "1500"}, 1500 * 2**20, "one CPU"),
    ],
)
def test_a_slurm_allocation_is_taken_whole(tmp_path, env, expected, named):
    root = _tree(tmp_path, {"proc/meminfo": _meminfo(256 * 2**20)})
    source = machine_memory(env, root)
    assert (source.total, source.usable) == (expected, expected)
    assert "SLURM" in source.said_by and named in source.said_by


def test_the_tightest_source_wins(tmp_path):
    """A SLURM job on a small machine: 80 % of the machine is below the allocation."""
    root = _tree(tmp_path, {"proc/meminfo": _meminfo(4 * 2**20)})
    source = machine_memory({"SLURM_MEM_PER_NODE": "8000"}, root)
    assert source.usable == int(0.8 * 4 * GIB) and "/proc/meminfo" in source.said_by
    assert machine_memory({"SLURM_MEM_PER_NODE": "0"}, root).usable == int(0.8 * 4 * GIB)


def _fake_machine(monkeypatch, usable: int) -> None:
    source = MemorySource(usable, usable, "the SLURM job's tiny allocation, from a test")
    monkeypatch.setattr(resources, "machine_memory", lambda *a, **k: source)


def test_the_default_budget_refuses_a_count_job_with_the_shards_that_fit(monkeypatch):
    fixed = BASE_BYTES + 2 * BYTES_PER_THREAD
    _fake_machine(monkeypatch, fixed + BYTES_PER_LABEL * 1_000_000)
    unset = Resources(threads=2)
    assert unset.memory_budget()[0] == fixed + BYTES_PER_LABEL * 1_000_000
    unset.check_budget(1_000_000)  # exactly fits
    with hints.entry_point(hints.WORKFLOW), pytest.raises(HievalError) as info:
        unset.check_budget(2_500_000)
    text = str(info.value)
    assert "2,500,000 labels" in text and "tiny allocation" in text
    assert "default engine.memory_limit" in text and "set shards: 3 (or more)" in text
    with hints.entry_point(hints.CLI), pytest.raises(HievalError, match="raise --memory-limit"):
        unset.check_budget(2_500_000)
    Resources(threads=2, memory_limit="20GB").check_budget(2_500_000)  # a user's limit rules


def test_input_rows_come_from_parquet_footers_only(tmp_path):
    frame = pl.DataFrame({"doc_id": ["a", "a", "b"], "code": ["401.9", "428.0", "401.9"]})
    frame.write_parquet(tmp_path / "g.parquet")
    frame.head(2).write_parquet(tmp_path / "p.parquet")
    frame.write_csv(tmp_path / "g.csv")
    assert input_rows([tmp_path / "g.parquet", tmp_path / "p.parquet"]) == 5
    assert input_rows([tmp_path / "g.parquet", tmp_path / "g.csv"]) is None
    pl.DataFrame({"x": [1]}).write_parquet(tmp_path / "wide.parquet")
    assert input_rows([tmp_path / "wide.parquet"]) is None
    frame.with_columns(score=0.5).write_parquet(tmp_path / "scored.parquet")
    assert input_rows([tmp_path / "scored.parquet"]) is None  # its threshold decides the labels


def test_cli_refuses_a_plan_that_does_not_fit_before_reading(tmp_path, monkeypatch, capsys):
    """With a small fake allocation, ``hieval evaluate`` stops before any file is normalised
    (or the hierarchy built), says what the job needs and the limit that would fit, and
    leaves no output folder."""
    docs = [f"d{i}" for i in range(3000)]
    gold = pl.DataFrame({"doc_id": docs, "code": ["401.9"] * len(docs)})
    gold.write_parquet(tmp_path / "gold.parquet")
    gold.write_parquet(tmp_path / "pred.parquet")
    fixed = BASE_BYTES + 1 * BYTES_PER_THREAD
    _fake_machine(monkeypatch, fixed + BYTES_PER_LABEL * 5000)  # 6,000 labels do not fit

    def never(*args, **kwargs):
        raise AssertionError("a file was read")

    monkeypatch.setattr("hieval.run.normalize_file", never)
    monkeypatch.setattr("hieval.run.build_tables", never)
    out = tmp_path / "out"
    args = ["evaluate", "--gold", str(tmp_path / "gold.parquet"), "--out", str(out)]
    args += ["--pred", f"m={tmp_path / 'pred.parquet'}", "--threads", "1"]
    args += ["--cache", str(tmp_path / "cache")]
    assert main(args) != 0
    err = capsys.readouterr().err
    assert "model 'm': its files have 6,000 labels" in err
    assert "tiny allocation" in err and "raise --memory-limit to 1GB or more" in err
    assert "Traceback" not in err and not out.exists()
    # the same files with room: they are read and counted
    monkeypatch.undo()
    assert main(args) == 0 and out.is_dir()
