"""The conventions stage: ``conventions.parquet`` of every model from the files the earlier
stages wrote (normalised gold, decided predictions and scores, input records, tidy rows). The
CLI, the API and the workflow's ``conventions`` rule call :func:`write_conventions`."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from hieval import codesystem, paths
from hieval.atomic import atomic_path
from hieval.conventions.mcnemar import mcnemar_table
from hieval.conventions.table import (
    SCHEMA,
    check_names,
    decision_threshold,
    fitting,
    model_rows,
    read_label_space,
    strictly_above,
)
from hieval.hierarchy.table import read_level_table
from hieval.inputs.dense_scores import read_reference
from hieval.inputs.handoff import distinct_values

log = logging.getLogger(__name__)

#: The Parquet metadata key of the notes the report shows (per model: its label space, the
#: pairs outside it, the threshold of Edin et al.'s decisions).
NOTES_KEY = "hieval.conventions.notes"


def read_notes(path: str | Path) -> dict[str, dict]:
    """The notes :func:`write_conventions` kept in ``path``'s metadata."""
    return json.loads(paths.read_parquet_metadata(path).get(NOTES_KEY, "{}"))


def write_conventions(  # noqa: PLR0913 (rule conventions' inputs, params and outputs, one keyword each (scripts/conventions.py))
    *,
    models: Sequence[str],
    gold: str | Path,
    labels: dict[str, str | Path],
    scores: dict[str, str | Path],
    records: dict[str, str | Path],
    tidy: dict[str, Sequence[str | Path]],
    levels_file: str | Path,
    conventions: Sequence[str] | None,
    ks: Sequence[int],
    selections: dict[str, tuple[float | None, int | None]],
    default_threshold: float | str,
    label_spaces: dict[str, tuple[str | Path, str]],
    out: str | Path,
    tests_out: str | Path | None = None,
) -> pl.DataFrame:
    """Write ``out`` (``model, convention, metric, value``) for ``models`` in order, and
    ``tests_out`` (:mod:`hieval.conventions.mcnemar`'s table: Edin et al.'s McNemar test of
    each pair of models, empty when ``edin`` is not asked for or there is one model).

    ``selections`` holds each model's own ``(threshold, top_k)`` (None: not given), so the
    threshold its decisions used is known (Edin et al. decide ``score > threshold``);
    ``label_spaces`` maps a model to its label space file and how messages name it."""
    names = check_names(conventions)
    icd9 = codesystem.of_table(read_level_table(levels_file)).name == "icd9"
    gold_frame = _Gold(gold)
    frames, notes, strict = [], {}, {}
    for model in models:
        record = json.loads(Path(records[model]).read_text("utf-8"))
        threshold, top_k = selections.get(model, (None, None))
        space = label_spaces.get(model)
        space_codes = read_label_space(space[0], shown_as=space[1]) if space else None
        model_notes = notes.setdefault(model, {})
        named = names
        if conventions is None:  # the default: matrices only where they fit, judged here
            named = _fitting(model, names, gold_frame, labels[model], space_codes, model_notes)
        decision = decision_threshold(
            record, threshold=threshold, top_k=top_k, default=default_threshold
        )
        with_matrices = any(name != "hieval" for name in named)
        testing = "edin" in names and len(models) > 1  # one model: no pair to test
        decided = paths.read_parquet(labels[model]) if with_matrices or testing else None
        if testing:
            strict[model] = _edin_decisions(decided, decision, gold_frame(), space_codes)
        frames.append(
            model_rows(
                model,
                gold=gold_frame() if with_matrices else _NO_LABELS,
                decided=decided if with_matrices else _NO_LABELS,
                scores=paths.read_parquet(scores[model]),
                dense=read_reference(scores[model]),
                tidy=pl.concat([paths.read_parquet(p) for p in tidy[model]]),
                conventions=named,
                ks=ks,
                label_space=space_codes,
                label_space_name=space[1] if space else None,
                threshold=decision,
                icd9=icd9,
                notes=model_notes,
                asked=True,  # judged above when not
            )
        )
    table = pl.concat(frames) if frames else pl.DataFrame(schema=SCHEMA)
    import pyarrow.parquet as pq  # here: `import hieval.pipeline` must not load pyarrow

    arrow = table.to_arrow()
    arrow = arrow.replace_schema_metadata({NOTES_KEY: json.dumps(notes, sort_keys=True)})
    with atomic_path(out) as tmp:
        pq.write_table(arrow, tmp)
    if tests_out is not None:
        tests = mcnemar_table(gold_frame() if strict else _NO_LABELS, strict)
        with atomic_path(tests_out) as tmp:
            tests.write_parquet(tmp)
        log.info("McNemar's test (Edin et al.) of %d pairs of models", tests.height)
    computed = ", ".join(table["convention"].unique(maintain_order=True).to_list())
    log.info("%d convention rows (%s) for %d models", table.height, computed, len(models))
    return table


#: The labels handed to the stages that read none (only the ``hieval`` convention, no test).
_NO_LABELS = pl.DataFrame(schema={"doc_id": pl.String, "code": pl.String})


class _Gold:
    """The normalised gold, read on first use: a default run whose matrices do not fit
    reads none of its rows (at 100x MIMIC-III, a fifth of a second of the stage)."""

    def __init__(self, path: str | Path):
        self.path = path
        self._frame: pl.DataFrame | None = None

    def __call__(self) -> pl.DataFrame:
        if self._frame is None:
            self._frame = paths.read_parquet(self.path)
        return self._frame


def _fitting(
    model: str,
    names: list[str],
    gold: _Gold,
    labels: str | Path,
    label_space: list[str] | None,
    notes: dict,
) -> list[str]:
    """``names`` without the matrix conventions whose matrices do not fit a default run
    (:func:`hieval.conventions.table.fitting`), counted from the files' dictionaries: the
    gold's documents, and the codes of the gold and the decided predictions (or the label
    space) — as :func:`hieval.conventions.matrix.observed_labels` counts them."""
    matrix_conventions = [name for name in names if name != "hieval"]
    if not matrix_conventions:
        return names
    if label_space is not None:
        codes = len(label_space)
    else:
        found = pl.concat([distinct_values(source, "code") for source in (gold.path, labels)])
        codes = found.filter(found != "").n_unique()
    documents = distinct_values(gold.path, "doc_id").len()
    kept = fitting(model, matrix_conventions, documents=documents, codes=codes, notes=notes)
    return [name for name in names if name == "hieval" or name in kept]


def _edin_decisions(
    decided: pl.DataFrame,
    threshold: float | None,
    gold: pl.DataFrame,
    label_space: list[str] | None,
) -> pl.DataFrame:
    """The decisions Edin et al.'s McNemar test compares: ``score > threshold``, on the gold's
    documents, within the model's label space when one is given (as its matrices hold them)."""
    decisions = strictly_above(decided, threshold).filter(
        pl.col("doc_id").is_in(gold["doc_id"].unique().implode())
    )
    if label_space is not None:
        decisions = decisions.filter(pl.col("code").is_in(pl.Series(label_space).implode()))
    return decisions
