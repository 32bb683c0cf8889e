"""One model's rows of ``conventions.parquet`` (``model, convention, metric, value``) from its
normalised inputs: the gold, its decided predictions and its scores (``doc_id, code[, score]``),
its tidy metric rows, and the label space of CAML's and Edin et al.'s matrices."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from hieval.conventions.caml import by_type, caml_metrics
from hieval.conventions.edin import edin_metrics
from hieval.conventions.hieval_own import hieval_metrics
from hieval.conventions.matrix import matrices, observed_labels
from hieval.conventions.registry import NAMES, PAPER_TABLES
from hieval.errors import HievalError, preview_value
from hieval.inputs.dense_scores import DenseScores

log = logging.getLogger(__name__)

SCHEMA = {"model": pl.String, "convention": pl.String, "metric": pl.String, "value": pl.Float64}

#: CAML's and Edin et al.'s conventions work on dense documents x label space matrices (about
#: 60 bytes a cell at the peak, sorts included: 1.9 GB for CAML's 3,372 x 8,922). Beyond this
#: many cells they run only when asked for by name; by default they are left out, said in the
#: log and the notes, so a default run at MIMIC-IV scale does not exhaust the machine's memory.
MAX_DEFAULT_CELLS = 50_000_000


def check_names(names: Sequence[str] | None) -> tuple[str, ...]:
    """The conventions asked for, in the registry's order; None: every one."""
    if names is None:
        return NAMES
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        raise HievalError(
            f"conventions: no convention {preview_value(unknown[0])} (known: {', '.join(NAMES)})"
        )
    return tuple(n for n in NAMES if n in names)


def check_paper_table(layout: str, names: Sequence[str] | None) -> None:
    """Refuse a paper table whose convention the run leaves out (its cells would all be
    empty)."""
    needed = PAPER_TABLES[layout]
    if needed != "hieval" and names is not None and needed not in names:
        raise HievalError(
            f"report.paper_table {layout} is computed under the {needed} convention, which "
            f"conventions ({', '.join(names)}) leaves out; add {needed} to conventions"
        )


def read_label_space(path: str | Path, *, shown_as: str) -> list[str]:
    """A label space file: one code per line, as the gold is normalised (dotted ICD-9, e.g.
    ``401.9``); blank lines skipped, repeats counted once; sorted, as CAML's ``ind2c`` is."""
    try:
        text = Path(path).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise HievalError(f"{shown_as}: cannot read the label space ({exc})") from None
    codes = sorted({line.strip() for line in text.splitlines() if line.strip()})
    if not codes:
        raise HievalError(f"{shown_as}: the label space lists no code; give one code per line")
    return codes


def decision_threshold(
    record: dict, *, threshold: float | None, top_k: int | None, default: float | str
) -> float | None:
    """The global threshold the model's decisions were made with (``score >= t``), as the
    normalisation chose it; None when there is none or it is per code (then Edin et al.'s
    strict ``>`` cannot be told apart from the decided set, which is used as it is)."""
    tuned = record.get("tuned_threshold") or {}
    if tuned:
        return None if tuned.get("per_code") else float(tuned["threshold"])
    if threshold is not None:
        return float(threshold)
    if top_k is None and not isinstance(default, str):
        return float(default)
    return None


def strictly_above(decided: pl.DataFrame, threshold: float | None) -> pl.DataFrame:
    """The decided pairs with ``score > threshold`` (the decided set is ``score >= threshold``;
    unscored predictions stay)."""
    if threshold is None or "score" not in decided.columns:
        return decided
    return decided.filter(pl.col("score").is_null() | (pl.col("score") != threshold))


def model_rows(  # noqa: PLR0913 (one model's tables, each read once by the caller)
    model: str,
    *,
    gold: pl.DataFrame,
    decided: pl.DataFrame,
    scores: pl.DataFrame,
    tidy: pl.DataFrame,
    conventions: Sequence[str],
    ks: Sequence[int],
    label_space: list[str] | None = None,
    label_space_name: str | None = None,
    threshold: float | None = None,
    icd9: bool = True,
    notes: dict | None = None,
    asked: bool = True,
    dense: DenseScores | None = None,
) -> pl.DataFrame:
    """The rows of ``model`` under each of ``conventions``; with ``label_space`` None, CAML's and
    Edin et al.'s label space is the codes observed in the gold and the decided predictions.
    ``notes``, when given, receives what the report says about them (the label space, the
    pairs left outside it, the threshold of Edin et al.'s decisions). ``asked``: the
    conventions were named by the user (not the default), so they run at any size.
    ``dense``: the model's scores are its matrix (``scores`` is then empty)."""
    rows: list[tuple[str, str, float]] = []
    matrix_conventions = [c for c in conventions if c != "hieval"]
    if matrix_conventions and not asked:
        matrix_conventions = _fits(model, matrix_conventions, gold, decided, label_space, notes)
        conventions = [c for c in conventions if c == "hieval" or c in matrix_conventions]
    if matrix_conventions:
        if label_space is None:
            labels = observed_labels(gold, decided)
            log.info(
                "%s: conventions %s over the %d codes observed in the gold and the predictions "
                "(no label space given)", model, ", ".join(matrix_conventions), len(labels)
            )  # fmt: skip
        else:
            labels = label_space
        m = matrices(gold, decided, scores, labels=labels, dense=dense)
        _check_label_space(m.outside, gold, label_space_name)
        if notes is not None:
            notes.update(
                label_space=label_space_name or "observed",
                codes=len(labels),
                outside=m.outside,
                threshold=threshold,
                scored=m.raw is not None,
            )
        strict = matrices(gold, strictly_above(decided, threshold), scores.clear(), labels=labels)
    for convention in conventions:
        if convention == "hieval":
            values = hieval_metrics(tidy)
        elif convention == "caml":
            values = caml_metrics(m, ks)
            if icd9:
                values.update(by_type(gold, decided))
        else:
            values = edin_metrics(m, strict.yhat, filter_codes=convention == "edin")
        rows += [(convention, name, float(v)) for name, v in values.items()]
    return pl.DataFrame([(model, *row) for row in rows], schema=SCHEMA, orient="row")


def _fits(
    model: str,
    matrix_conventions: list[str],
    gold: pl.DataFrame,
    decided: pl.DataFrame,
    label_space: list[str] | None,
    notes: dict | None,
) -> list[str]:
    """The matrix conventions when their matrices are small enough for a default run
    (:func:`fitting`), counted from the tables."""
    codes = len(label_space) if label_space is not None else len(observed_labels(gold, decided))
    return fitting(
        model, matrix_conventions, documents=gold["doc_id"].n_unique(), codes=codes, notes=notes
    )


def fitting(
    model: str, matrix_conventions: list[str], *, documents: int, codes: int, notes: dict | None
) -> list[str]:
    """The matrix conventions when their matrices (``documents`` x ``codes``) are small
    enough for a default run; none, said in the log and the notes, when they are not
    (:data:`MAX_DEFAULT_CELLS`)."""
    cells = documents * codes
    if cells <= MAX_DEFAULT_CELLS:
        return matrix_conventions
    why = (
        f"{', '.join(matrix_conventions)} left out: their dense matrices would hold {cells:,} "
        f"cells (documents x {codes:,} codes; about {cells * 60 / 1e9:.0f} GB at the peak); "
        "name them (--conventions / config conventions) to compute them anyway"
    )
    log.warning("%s: %s", model, why)
    if notes is not None:
        notes["left_out"] = why
    return []


def _check_label_space(outside: dict[str, int], gold: pl.DataFrame, name: str | None) -> None:
    """A given label space that holds none of the gold's codes is refused (codes written
    another way, most likely); one that misses some is said."""
    if name is None:
        return
    gold_codes = gold.filter(pl.col("code").is_not_null() & (pl.col("code") != "")).height
    if gold_codes and outside["gold"] == gold_codes:
        raise HievalError(
            f"{name}: none of the gold's codes is in the label space; write one code per line "
            "as the gold is normalised (dotted ICD-9 such as 401.9, ICD-10-CM such as S72.001A)"
        )
    for what, n in outside.items():
        if n:
            log.warning(
                "warning: %d %s pairs have a code outside the label space %s: left out of the "
                "caml and edin conventions, as their tools cannot hold them", n, what, name
            )  # fmt: skip
