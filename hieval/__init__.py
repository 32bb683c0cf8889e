"""hieval: flat, set-based and count-preserving hierarchical (CoPHE) evaluation of
hierarchical multi-label coders (ICD-9, ICD-10, or your own tree).

The public API is what ``__all__`` names; nothing else is promised. The command line
(``hieval evaluate``) and the Snakemake workflow call the same stages
(:mod:`hieval.run`, :mod:`hieval.pipeline`), so every number is the same number by every route.

Examples
--------
>>> import hieval
>>> ev = hieval.evaluate({"a": ["401.9"]}, {"m": {"a": ["401.9"]}}, cache=cache)
>>> ev.models
['m']
"""

__version__ = "0.1.0"

from hieval.api import METRICS, Evaluation, Hierarchy, evaluate, load_hierarchy  # noqa: E402
from hieval.errors import ConfigError, HievalError, InputError  # noqa: E402
from hieval.evaluator import Evaluator  # noqa: E402
from hieval.memory import Dense, dense  # noqa: E402

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
