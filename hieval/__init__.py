"""hieval: flat, set-based and count-preserving hierarchical (CoPHE) evaluation of
hierarchical multi-label coders (ICD-9, ICD-10, or your own tree).

The public API is what ``__all__`` names; nothing else is promised. The command line
(``hieval evaluate``) and the Snakemake workflow call the same stages (:mod:`hieval.run`,
:mod:`hieval.pipeline`), so a number is the same number by every route.

The names are imported on first use: a workflow job or the CLI that imports
``hieval.pipeline`` does not pay for the API's imports.

Examples
--------
>>> import hieval
>>> ev = hieval.evaluate({"a": ["401.9"]}, {"m": {"a": ["401.9"]}}, cache=cache)
>>> ev.models
['m']
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

#: Each public name and the module that defines it.
_HOMES = {
    "METRICS": "hieval.api",
    "Evaluation": "hieval.api",
    "Hierarchy": "hieval.api",
    "evaluate": "hieval.api",
    "load_hierarchy": "hieval.api",
    "Evaluator": "hieval.evaluator",
    "Dense": "hieval.memory",
    "dense": "hieval.memory",
    "HievalError": "hieval.errors",
    "InputError": "hieval.errors",
    "ConfigError": "hieval.errors",
}

__all__ = [
    "METRICS",
    "ConfigError",
    "Dense",
    "Evaluation",
    "Evaluator",
    "Hierarchy",
    "HievalError",
    "InputError",
    "dense",
    "evaluate",
    "load_hierarchy",
]

if TYPE_CHECKING:
    from hieval.api import METRICS, Evaluation, Hierarchy, evaluate, load_hierarchy
    from hieval.errors import ConfigError, HievalError, InputError
    from hieval.evaluator import Evaluator
    from hieval.memory import Dense, dense


def __getattr__(name: str) -> object:
    if name not in _HOMES:
        raise AttributeError(f"module 'hieval' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
