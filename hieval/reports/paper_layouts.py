"""Paper tables laid out as CAML's and Edin et al.'s papers lay them out (``report.paper_table``:
``caml`` or ``edin``; ``cophe``, the default, is :func:`hieval.reports.paper_tables.paper_tables`).

Every cell comes from ``conventions.parquet``, computed under that paper's convention, never from
hieval's own rows, so a row can be pasted beside the paper's:

- ``caml`` (Mullenbach et al. 2018, Tables 3 and 4): AUC macro and micro, F1 macro and micro,
  P@K for the K of 5, 8 and 15 the run computed; fractions with three decimals, as that paper
  prints them; a system's runs averaged (the paper reports single runs, so no sd).
- ``edin`` (Edin et al. SIGIR 2023, the MIMIC-IV tables of ``reports/tables/``): AUC micro and
  macro, F1 micro and macro, EMR, precision@8 and @15, R-precision, MAP of the ``edin``
  convention (``filter_codes``); each run's value times 100, then mean ± sd over a system's
  runs with ``np.std`` (ddof 0), one decimal; rows by micro F1 ascending, as their script
  sorts them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from hieval.reports.paper_tables import Table


@dataclass(frozen=True)
class Layout:
    """One paper's table: its convention, its columns ``(heading, sub-heading, metric)``
    (``{k}``: each K of ``ks``), how it prints a value, the ddof of its sd over runs (None:
    it reports none), the metric it sorts its rows by (ascending; None: the sheet's order)."""

    convention: str
    columns: tuple[tuple[str, str, str], ...]
    scale: float
    decimals: int
    ddof: int | None
    sort_by: str | None
    ks: tuple[int, ...]
    caption: str


LAYOUTS = {
    "caml": Layout(
        convention="caml",
        columns=(
            ("AUC", "Macro", "auc_macro"),
            ("AUC", "Micro", "auc_micro"),
            ("F1", "Macro", "f1_macro"),
            ("F1", "Micro", "f1_micro"),
            ("P@k", "{k}", "prec_at_{k}"),
        ),
        scale=1.0,
        decimals=3,
        ddof=None,
        sort_by=None,
        ks=(5, 8, 15),
        caption="Mullenbach et al. (2018) layout, every value under the caml convention "
        "(caml-mimic's evaluation.py; conventions.parquet)",
    ),
    "edin": Layout(
        convention="edin",
        columns=(
            ("AUC", "Micro", "auc_micro"),
            ("AUC", "Macro", "auc_macro"),
            ("F1", "Micro", "f1_micro"),
            ("F1", "Macro", "f1_macro"),
            ("EMR", "", "exact_match_ratio"),
            ("Precision@k", "{k}", "precision@{k}"),
            ("R-precision", "", "precision@recall"),
            ("MAP", "", "map"),
        ),
        scale=100.0,
        decimals=1,
        ddof=0,
        sort_by="f1_micro",
        ks=(8, 15),
        caption="Edin et al. (2023) layout, every value under the edin convention (their "
        "src/metrics.py, codes with a positive in the test set; conventions.parquet), in %, "
        "mean and standard deviation over each system's runs (np.std, ddof 0); rows by micro "
        "F1, ascending",
    ),
}


def _columns(layout: Layout, present: set[str]) -> list[tuple[str, str, str]]:
    """The layout's columns, a ``{k}`` column once per K of the layout the run computed."""
    out = []
    for heading, sub, metric in layout.columns:
        if "{k}" not in metric:
            out.append((heading, sub, metric))
            continue
        out += [
            (heading, sub.format(k=k), metric.format(k=k))
            for k in layout.ks
            if metric.format(k=k) in present
        ]
    return out


def _runs(models: Sequence[str], systems: dict[str, str] | None) -> dict[str, list[str]]:
    """Each row's runs: a system's models, or a model without a system alone."""
    rows: dict[str, list[str]] = {}
    for model in models:
        rows.setdefault((systems or {}).get(model) or model, []).append(model)
    return rows


def layout_tables(
    conventions: pl.DataFrame,
    *,
    layout: str,
    models: Sequence[str],
    systems: dict[str, str] | None = None,
) -> list[Table]:
    """The ``layout`` paper's table from ``conventions`` (``model, convention, metric,
    value``); a cell whose value a run lacks (the convention left out or not computable, such
    as AUC without scores) is ``--``."""
    spec = LAYOUTS[layout]
    rows = conventions.filter(pl.col("convention") == spec.convention)
    value = {(r["model"], r["metric"]): r["value"] for r in rows.iter_rows(named=True)}
    columns = _columns(spec, set(rows["metric"].to_list()))
    table_rows, sds = [], []
    for row, runs in _runs(models, systems).items():
        means, deviations = [], []
        for _, _, metric in columns:
            values = [value.get((run, metric)) for run in runs]
            if any(v is None for v in values):
                means.append(None)
                deviations.append(None)
                continue
            scaled = np.asarray(values, dtype=np.float64) * spec.scale  # as their script
            means.append(float(np.mean(scaled)))
            deviations.append(None if spec.ddof is None else float(np.std(scaled, ddof=spec.ddof)))
        table_rows.append((row, means))
        sds.append(deviations)
    if spec.sort_by is not None and any(m == spec.sort_by for _, _, m in columns):
        at = [m for _, _, m in columns].index(spec.sort_by)
        order = sorted(
            range(len(table_rows)),
            key=lambda i: (table_rows[i][1][at] is None, table_rows[i][1][at] or 0.0),
        )
        table_rows, sds = [table_rows[i] for i in order], [sds[i] for i in order]
    groups: list[tuple[str, int]] = []
    for heading, _, _ in columns:
        if groups and groups[-1][0] == heading:
            groups[-1] = (heading, groups[-1][1] + 1)
        else:
            groups.append((heading, 1))
    missing = "" if rows.height else f"; the {spec.convention} convention was not computed (--)"
    if spec.ddof is None and any(len(runs) > 1 for runs in _runs(models, systems).values()):
        missing = "; mean over each system's runs" + missing
    return [
        Table(
            caption=spec.caption + missing,
            groups=groups,
            columns=[sub for _, sub, _ in columns],
            rows=table_rows,
            scale=1.0,
            decimals=spec.decimals,
            sds=sds if spec.ddof is not None else None,
        )
    ]
