"""The ``uncertainty.*`` settings and their defaults, apart from the computation.

Config validation (:mod:`hieval.config`, read at every Snakemake parse and job start) needs
these few values; importing :mod:`hieval.metrics.uncertainty` for them would load scipy and
numba's compiler into every job.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_BOOTSTRAP = 0
DEFAULT_CONFIDENCE = 0.95
DEFAULT_SEED = 20240515
DEFAULT_PERMUTATIONS = 999


@dataclass(frozen=True)
class Settings:
    """``uncertainty.*`` of the config: replicates (0: off), confidence, seed, permutations."""

    bootstrap: int = DEFAULT_BOOTSTRAP
    confidence: float = DEFAULT_CONFIDENCE
    seed: int = DEFAULT_SEED
    permutations: int = DEFAULT_PERMUTATIONS
