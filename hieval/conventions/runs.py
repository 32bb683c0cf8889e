"""Mean and standard deviation of each convention's rows over the runs of a system, each with
the ddof its paper used: Edin et al. report ``np.mean ± np.std`` over their runs (ddof 0,
``reports/tables/*.py`` of their repository); hieval's own rows keep systems.parquet's sample
sd (ddof 1); CAML's paper reports single runs, so its rows get a mean and no sd.

The sheet's ``system`` column groups runs (seeds) of one system; the workflow writes this
table as ``results/report/conventions_systems.parquet`` beside systems.parquet.
"""

from __future__ import annotations

import numpy as np
import polars as pl

#: The ddof of each convention's sd over runs (None: its paper reports none).
DDOF = {"hieval": 1, "caml": None, "edin": 0, "edin_mullenbach": 0}

SCHEMA = {
    "system": pl.String,
    "convention": pl.String,
    "metric": pl.String,
    "runs": pl.Int64,
    "mean": pl.Float64,
    "sd": pl.Float64,
    "ddof": pl.Int64,
}


def _sd(values: np.ndarray, ddof: int | None) -> float | None:
    """``np.std`` with ``ddof``; None without one or with too few runs (n <= ddof)."""
    if ddof is None or values.size <= ddof:
        return None
    return float(np.std(values, ddof=ddof))


def system_rows(table: pl.DataFrame, systems: dict[str, str]) -> pl.DataFrame:
    """``conventions.parquet``'s rows of the models with a system, one row per (system,
    convention, metric) in the table's order: the number of runs, their mean and sd."""
    rows = []
    grouped: dict[tuple[str, str, str], list[float]] = {}
    for model, convention, metric, value in table.iter_rows():
        system = systems.get(model)
        if system:
            grouped.setdefault((system, convention, metric), []).append(value)
    for (system, convention, metric), values in grouped.items():
        array = np.asarray(values, dtype=np.float64)
        ddof = DDOF.get(convention)
        rows.append(
            (system, convention, metric, array.size, float(np.mean(array)), _sd(array, ddof), ddof)
        )
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")
