"""The Python API: :func:`evaluate`, :class:`Evaluation`, :func:`load_hierarchy` and the metric
registry as a table (:data:`METRICS`).

:func:`evaluate` is ``hieval evaluate`` called with keywords: every option of the command has a
keyword of the same (snake_case) name and default, checked by the command's own argument
types, and the stages run through the same composition (:func:`hieval.run.evaluate_into`) into
a private folder. In-memory inputs are written there as files (:mod:`hieval.memory`) and read by
the same readers, so they are validated and normalised exactly as a file is, and
:attr:`Evaluation.metrics` is the CLI's ``metrics.parquet`` bit for bit.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import polars as pl

from hieval import cli, hints, memory, paths, run
from hieval.atomic import staged_folder
from hieval.codesystem import DEFAULT_MAX_LEVEL
from hieval.conventions.registry import DEFAULT_PAPER_TABLE
from hieval.engine.icm import IcmParams
from hieval.errors import ConfigError, HievalError, preview_value
from hieval.hierarchy.table import read_level_table
from hieval.inputs.options import (
    DEFAULT_MALFORMED_CODES,
    DEFAULT_UNKNOWN_CODES,
    DEFAULT_UNKNOWN_DOCS,
    LabelOptions,
)
from hieval.metrics import registry
from hieval.metrics.ranking import DEFAULT_KS
from hieval.metrics.suite import DEFAULT_LABEL_SET
from hieval.metrics.tuning import DEFAULT_METHOD, DEFAULT_MIN_SUPPORT
from hieval.metrics.uncertainty.settings import Settings

#: The name of a model passed without one (``hieval.evaluate(gold, predictions)``).
DEFAULT_MODEL = "model"


def _metric_table() -> pl.DataFrame:
    """The registry, one row per kind of tidy row (derived, never listed twice)."""
    return pl.DataFrame(
        [
            {
                "family": m.family,
                "level": m.level,
                "average": m.average,
                "metric": m.metric,
                "definition": m.formula,
                "paper": m.paper,
                "higher_is_better": m.higher_is_better,
                "source": m.source,
            }
            for m in registry.REGISTRY
        ],
        schema={
            "family": pl.String,
            "level": pl.String,
            "average": pl.String,
            "metric": pl.String,
            "definition": pl.String,
            "paper": pl.String,
            "higher_is_better": pl.Boolean,
            "source": pl.String,
        },
    )


METRICS: pl.DataFrame = _metric_table()
"""Every metric hieval computes: ``family, level, average, metric, definition``, with its name
in the papers (``paper``), ``higher_is_better`` and the table it is computed from
(``source``), derived from the metric registry. A tidy row's ``(family, average, metric)`` is
one row here (``precision@5`` as ``precision@{k}``)."""


class _Private:
    """A temporary folder hieval owns, removed with the object that holds it (or at exit)."""

    def __init__(self, owner: object, prefix: str) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=prefix))
        weakref.finalize(owner, shutil.rmtree, self.path, True)


class Hierarchy:
    """A hierarchy built once (:func:`load_hierarchy`): pass it as ``hierarchy=`` to
    :func:`evaluate` and :class:`Evaluator` to skip the build on every call.

    Attributes
    ----------
    name : str
        The hierarchy as reports name it.
    levels : tuple of str
        Level names, deepest first, ending with ``root``.
    code_system : str
        ``icd9``, ``icd10`` or ``verbatim`` (a user's tree).
    """

    def __init__(self, tables: run.BuiltTables, code_system: str) -> None:
        self._tables = tables
        self.name = tables.name
        self.levels = tables.levels
        self.code_system = code_system

    @functools.cached_property
    def table(self) -> pl.DataFrame:
        """The level table: ``code, kind, depth``, one column per level, ``title``."""
        return read_level_table(self._tables.folder / "levels.parquet").frame

    @functools.cached_property
    def ancestors(self) -> pl.DataFrame:
        """The long ``code, level, ancestor`` table: each node at its own level and above."""
        return paths.read_parquet(self._tables.folder / "ancestors.parquet")

    def __repr__(self) -> str:
        return f"Hierarchy({self.name!r}, levels={list(self.levels)})"


def load_hierarchy(
    source: str | os.PathLike = "package",
    *,
    sha256: str | None = None,
    cache: str | os.PathLike = "resources",
) -> Hierarchy:
    """Build a hierarchy's tables once, to pass as ``hierarchy=`` to many evaluations.

    Parameters
    ----------
    source
        ``package`` (ICD-9-CM v32, offline), ``cms`` or ``cophe`` (pinned downloads),
        ``icd10`` (ICD-10-CM and ICD-10-PCS, offline), or the path of your own tree (a
        ``child,parent`` edge list or a CoPHE-style ``.json``), as ``hieval evaluate
        --hierarchy``.
    sha256
        The pin of a downloaded source (``--hierarchy-sha256``).
    cache
        The folder of downloads and built trees (``--cache``).

    Returns
    -------
    Hierarchy

    Examples
    --------
    >>> import hieval
    >>> icd9 = hieval.load_hierarchy("package", cache=cache)
    >>> icd9.levels
    ('e2', 'e1', 'e0', 'c', 'chapter', 'root')
    """
    options = run.EvaluateOptions(
        gold=[],
        pred=[],
        hierarchy=_source_text(source),
        hierarchy_sha256=sha256,
        cache=Path(cache),
    )
    hierarchy = Hierarchy.__new__(Hierarchy)
    folder = _Private(hierarchy, "hieval-hierarchy-").path
    with _api_errors():
        _levels, _ancestors, name = run.build_tables(options, folder)
    table = read_level_table(folder / "levels.parquet")
    built = run.BuiltTables(folder, run.hierarchy_config(options), name, table.levels)
    hierarchy.__init__(built, table.code_system)
    return hierarchy


def _source_text(source: str | os.PathLike | Hierarchy) -> str | run.BuiltTables:
    if isinstance(source, Hierarchy):
        return source._tables
    return os.fspath(source)


@contextmanager
def _api_errors(staged: Sequence[memory.Staged] = ()) -> Iterator[None]:
    """Hints in the API's words, and a reader's message about a staged input in the user's
    (:func:`hieval.memory.reword`), raised as the same :class:`HievalError` subclass."""
    with hints.entry_point(hints.API):
        try:
            yield
        except HievalError as exc:
            reworded = memory.reword(str(exc), staged)
            if reworded == str(exc):
                raise
            raise type(exc)(reworded) from None


class Evaluation:
    """The result of :func:`evaluate` (or :meth:`Evaluator.compute`): tables in memory, and the
    complete output folder of ``hieval evaluate --out`` ready for :meth:`write`.

    Attributes
    ----------
    models : list of str
        The models, in the order given.
    """

    def __init__(self, folder: Path, models: list[str], inputs: list[tuple[str, Path]]) -> None:
        self._folder = folder
        self.models = models
        self._inputs = inputs

    def _read(self, name: str) -> pl.DataFrame | None:
        path = self._folder / name
        return paths.read_parquet(path) if path.exists() else None

    @functools.cached_property
    def metrics(self) -> pl.DataFrame:
        """The tidy table ``model, family, level, average, metric, value``: the CLI's
        ``metrics.parquet``, row for row and bit for bit (values are fractions)."""
        return self._read("metrics.parquet")

    @functools.cached_property
    def intervals(self) -> pl.DataFrame | None:
        """Bootstrap intervals of every tidy row (``intervals.parquet``); None without
        ``bootstrap``."""
        return self._read("intervals.parquet")

    @functools.cached_property
    def comparisons(self) -> pl.DataFrame | None:
        """Paired comparisons of every pair of models (``comparisons.parquet``); None without
        ``bootstrap``."""
        return self._read("comparisons.parquet")

    @functools.cached_property
    def conventions(self) -> pl.DataFrame:
        """Each model's headline metrics under each named convention (``conventions.parquet``:
        ``model, convention, metric, value``), each metric named as that convention's
        reference code names it (docs/conventions.md)."""
        return self._read("conventions.parquet")

    @functools.cached_property
    def conventions_tests(self) -> pl.DataFrame:
        """Edin et al.'s McNemar test of each pair of models with the Bonferroni-adjusted p
        (``conventions_tests.parquet``; empty without the ``edin`` convention or with one
        model), beside :attr:`comparisons`' randomization test (docs/conventions.md)."""
        return self._read("conventions_tests.parquet")

    @functools.cached_property
    def nodes(self) -> pl.DataFrame:
        """Per-node counts of every model: ``model, family, level, node, tp, fp, fn, n_gold,
        n_pred`` (the additive table the metrics come from)."""
        return pl.concat(
            [
                paths.read_parquet(self._folder / "work" / "counts" / m / "nodes.parquet")
                .with_columns(pl.lit(m).alias("model"))
                .select("model", pl.exclude("model"))
                for m in self.models
            ]
        )

    @functools.cached_property
    def errors(self) -> pl.DataFrame:
        """Error distance (``errors.parquet``): ``model, kind, lca_level, code_status, count,
        share``, each model's false negatives (``fn``) and false positives (``fp``) by the
        level at which they meet the nearest error of the other kind in their document."""
        return self._read("errors.parquet")

    @functools.cached_property
    def confusions(self) -> dict[str, pl.DataFrame]:
        """Each model's near misses (``confusions/{model}.parquet``): ``gold_code,
        predicted_code, lca_level, documents``, most frequent first."""
        return {m: self._read(f"confusions/{m}.parquet") for m in self.models}

    @functools.cached_property
    def codes(self) -> dict[str, pl.DataFrame]:
        """Each model's per-code table (``codes/{model}.parquet``): ``code, title, level,
        support, tp, fp, fn, precision, recall, f1`` (and ``train_frequency`` with
        ``train_gold``) for every code and ancestor node up to ``max_level``."""
        return {m: self._read(f"codes/{m}.parquet") for m in self.models}

    @functools.cached_property
    def groups(self) -> pl.DataFrame | None:
        """Headline P/R/F1 per group of documents (``groups.parquet``): ``attribute, group,
        model, family, level, average, metric, value, low, high, documents``; None without
        ``doc_groups``."""
        return self._read("groups.parquet")

    @functools.cached_property
    def group_gaps(self) -> pl.DataFrame | None:
        """The largest gap between an attribute's groups, per model and metric
        (``group_gaps.parquet``), with its interval and Holm-adjusted permutation p-value
        when ``bootstrap`` > 0; None without ``doc_groups``."""
        return self._read("group_gaps.parquet")

    @functools.cached_property
    def records(self) -> dict[str, dict]:
        """What normalisation did to each input (rows read, duplicates, codes placed or
        dropped, coverage and other warnings): ``gold`` and each model, as in
        ``work/inputs/*.json``."""
        inputs = self._folder / "work" / "inputs"
        files = {"gold": inputs / "gold.json"}
        files |= {m: inputs / "predictions" / f"{m}.json" for m in self.models}
        return {name: json.loads(path.read_text("utf-8")) for name, path in files.items()}

    def summary(self) -> pl.DataFrame:
        """The headline table, one column per metric (``summary.csv``)."""
        return registry.wide(self.metrics)

    def write(self, out_dir: str | os.PathLike) -> Path:
        """Write exactly the files ``hieval evaluate --out OUT_DIR`` writes.

        ``out_dir`` is replaced whole, as the CLI replaces ``--out``: only when it holds
        nothing but an earlier hieval run's unchanged outputs, and none of this evaluation's
        input files; otherwise it is refused and left as it was.
        """
        out = Path(out_dir)
        with _api_errors(), staged_folder(out, inputs=self._inputs) as staging:
            for entry in self._folder.iterdir():
                if entry.is_dir():
                    shutil.copytree(entry, staging / entry.name)
                else:
                    shutil.copy2(entry, staging / entry.name)
        return out

    def __repr__(self) -> str:
        return f"Evaluation(models={self.models}, rows={self.metrics.height})"


def _doc_groups_file(value: object, folder: Path) -> Path | None:
    """``doc_groups`` as a file: a path as given, a DataFrame written to ``folder``."""
    if value is None:
        return None
    if isinstance(value, pl.DataFrame):
        path = folder / "doc_groups.parquet"
        value.write_parquet(path)
        return path
    if isinstance(value, str | os.PathLike):
        return Path(value)
    raise ConfigError(
        f"doc_groups: a path or a Polars DataFrame doc_id, <attribute>..., not "
        f"{type(value).__name__}"
    )


def _single_input(value: object) -> bool:
    """Whether ``predictions`` is one model's labels rather than ``name -> labels``: a mapping
    of names holds inputs (paths, frames, :class:`~hieval.memory.Dense`, label mappings); a
    mapping of documents holds codes, or ``{code: score}`` whose values are numbers."""
    if not isinstance(value, Mapping):
        return True
    for inner in value.values():
        if isinstance(inner, str | os.PathLike | memory.Dense | pl.DataFrame | pl.LazyFrame):
            return False
        if type(inner).__module__.startswith("pandas"):
            return False
        if isinstance(inner, Mapping):
            first = next(iter(inner.values()), None)
            return first is None or isinstance(first, int | float) or hasattr(first, "dtype")
        return True
    return True


def _named(value: object) -> dict[str, object]:
    """``predictions`` as ``name -> labels`` (one model without a name is ``model``)."""
    return {DEFAULT_MODEL: value} if _single_input(value) else dict(value)


def _pairs(value: Mapping | None, what: str) -> list[tuple[str, object]]:
    if value is None:
        return []
    if not isinstance(value, Mapping):
        raise ConfigError(f"{what} must be a mapping {{name: value}}, got {preview_value(value)}")
    return list(value.items())


@functools.cache
def _actions() -> dict[str, argparse.Action]:
    """``hieval evaluate``'s options by destination: the API checks a keyword's value with the
    option's own type and choices, so a value is refused by both or neither."""
    sub = cli.build_parser()._subparsers._group_actions[0].choices["evaluate"]
    return {a.dest: a for a in sub._actions}


def _checked(dest: str, value: object, *, keyword: str | None = None) -> object:
    """``value`` as the CLI's option ``dest`` parses it (None stays None)."""
    if value is None:
        return None
    action = _actions()[dest]
    keyword = keyword or dest
    if action.type is not None and not isinstance(value, bool):
        try:
            value = action.type(value if isinstance(value, str) else str(value))
        except argparse.ArgumentTypeError as exc:
            raise ConfigError(f"{keyword}={preview_value(value)}: {exc}") from None
    if action.choices is not None and value not in action.choices:
        choices = ", ".join(map(repr, action.choices))  # argparse's own wording
        raise ConfigError(
            f"{keyword}={preview_value(value)}: invalid choice: {value!r} (choose from {choices})"
        )
    return value


def _code_types(code_type: str | Mapping[str, str] | None) -> list[tuple[str | None, str]]:
    if code_type is None:
        return []
    if isinstance(code_type, str):
        return [_checked("code_type", code_type)]
    return [_checked("code_type", f"{n}={k}", keyword="code_type") for n, k in code_type.items()]


def evaluate(  # noqa: PLR0913 (the public API: one keyword per `hieval evaluate` option)
    gold: object,
    predictions: object,
    *,
    hierarchy: str | os.PathLike | Hierarchy = "package",
    hierarchy_sha256: str | None = None,
    cache: str | os.PathLike = "resources",
    max_level: str | None = DEFAULT_MAX_LEVEL,
    unknown_codes: str | None = DEFAULT_UNKNOWN_CODES,
    malformed_codes: str = DEFAULT_MALFORMED_CODES,
    unknown_docs: str = DEFAULT_UNKNOWN_DOCS,
    threshold: float | str | None = None,
    top_k: int | None = None,
    code_format: str = LabelOptions.code_format,
    code_type: str | Mapping[str, str] | None = None,
    format: Mapping[str, str] | None = None,
    code_list: Mapping[str, str | os.PathLike] | None = None,
    doc_list: Mapping[str, str | os.PathLike] | None = None,
    k: Sequence[int] = DEFAULT_KS,
    dev_gold: object = None,
    dev_predictions: object = None,
    tuning_per_code: bool = False,
    tuning_min_support: int = DEFAULT_MIN_SUPPORT,
    tuning_method: str = DEFAULT_METHOD,
    allow_dev_test_overlap: bool = False,
    train_gold: object = None,
    doc_groups: str | os.PathLike | pl.DataFrame | None = None,
    icm_empty_gold: str = IcmParams.empty_gold,
    icm_alpha1: float = IcmParams.alpha1,
    icm_alpha2: float = IcmParams.alpha2,
    icm_beta: float = IcmParams.beta,
    propensity_a: float = IcmParams.propensity_a,
    propensity_b: float = IcmParams.propensity_b,
    label_set: str = DEFAULT_LABEL_SET,
    bootstrap: int = Settings.bootstrap,
    confidence: float = Settings.confidence,
    seed: int = Settings.seed,
    permutations: int = Settings.permutations,
    memory_limit: str | None = None,
    temp_directory: str | os.PathLike | None = None,
    threads: int | None = None,
    conventions: Sequence[str] | None = None,
    label_space: Mapping[str, str | os.PathLike] | None = None,
    paper_table: str = DEFAULT_PAPER_TABLE,
) -> Evaluation:
    """Evaluate models against a gold, as ``hieval evaluate`` does.

    Every option of ``hieval evaluate`` is a keyword of the same name (``--max-level`` is
    ``max_level``) and default; options naming one file (``--code-type NAME=dx``,
    ``--format``, ``--code-list``, ``--doc-list``, ``--dev-pred``, ``--label-space``) take a
    mapping from the file's name (``"gold"`` or a model) to the value; ``conventions`` is a
    list of names. The keywords not described below are the options ``hieval evaluate
    --help`` describes.

    Parameters
    ----------
    gold
        The gold labels: a path (or a list of paths, pooled), a Polars or pandas DataFrame
        ``doc_id, code[, code_type]``, a mapping ``doc_id -> iterable of codes`` (an empty
        iterable declares a document without codes), or :func:`hieval.dense` 0/1 decisions.
    predictions
        A mapping ``name -> labels``, or one model's labels (named ``model``). Labels are a
        path; a DataFrame ``doc_id, code[, score]``; a mapping ``doc_id -> iterable of
        codes``; a mapping ``doc_id -> {code: score}``; or :func:`hieval.dense` scores.
    hierarchy
        ``package``, ``cms``, ``cophe``, ``icd10``, a tree file, or a :class:`Hierarchy`.
    dev_gold, dev_predictions, train_gold
        As ``--dev-gold``, ``--dev-pred NAME=...`` (a mapping ``name -> labels``) and
        ``--train-gold``; each takes the kinds of input ``gold`` and ``predictions`` take.
    doc_groups
        As ``--doc-groups``: a path, or a Polars DataFrame ``doc_id, <attribute>...``.

    Returns
    -------
    Evaluation

    Raises
    ------
    HievalError
        A refused input or option, with the message the CLI gives (naming the model,
        document and value of an in-memory input instead of a file's line).

    Examples
    --------
    >>> import hieval
    >>> gold = {"a": ["401.9", "428.0"], "b": ["250.00"]}
    >>> ev = hieval.evaluate(gold, {"m": {"a": ["401.9"], "b": ["250.00"]}}, cache=cache)
    >>> ev.metrics.filter(family="flat", average="micro", metric="f1")["value"].item()
    0.8
    """
    keywords = {key: value for key, value in locals().items() if key not in ("gold", "predictions")}
    return _evaluate(gold, predictions, keywords)


def _evaluate(gold: object, predictions: object, keywords: dict) -> Evaluation:
    """:func:`evaluate` with its keywords in one mapping: stage the in-memory inputs in a
    private folder, run ``hieval evaluate``'s stages on them, and keep what they wrote."""
    evaluation = Evaluation.__new__(Evaluation)
    folder = _Private(evaluation, "hieval-evaluate-").path
    inputs = folder / "inputs"
    inputs.mkdir()
    staged: list[memory.Staged] = []
    formats = dict(_pairs(keywords["format"], "format"))

    def file_of(value: object, name: str, role: str) -> Path:
        item = memory.stage(value, name=name, role=role, folder=inputs)
        if isinstance(item, memory.Staged):
            staged.append(item)
            if item.format is not None:
                formats.setdefault(name, item.format)
            return item.path
        return item

    with _api_errors(staged):
        options = _options(gold, predictions, keywords, file_of=file_of, inputs=inputs,
                           formats=formats)  # fmt: skip
        options.shown = {str(item.path): item.what for item in staged}
        out = folder / "out"
        out.mkdir()
        names = run.evaluate_into(options, out)
    shutil.rmtree(inputs)  # staged copies of in-memory inputs: read, and no longer needed
    user_files = [(f, p) for f, p in run.run_inputs(options) if not p.is_relative_to(folder)]
    evaluation.__init__(out, names, user_files)
    return evaluation


def _options(
    gold: object, predictions: object, kw: dict, *, file_of: Callable[[object, str, str], Path],
    inputs: Path, formats: dict[str, str], named: bool = False,
) -> run.EvaluateOptions:  # fmt: skip
    """``hieval evaluate``'s options from :func:`evaluate`'s arguments, each checked as the
    CLI checks it (in the order the keywords are listed, so the first bad one is named) and
    each input staged to a file by ``file_of``. ``named``: ``predictions`` is ``name ->
    labels`` already (:class:`hieval.Evaluator` builds each batch's options here too)."""
    models = dict(predictions) if named else _named(predictions)
    for name in models:
        _checked("pred", f"{name}=x", keyword="predictions")
    golds = list(gold) if isinstance(gold, list | tuple) else [gold]
    dev = {} if kw["dev_predictions"] is None else _named(kw["dev_predictions"])
    train_gold, dev_gold, conventions = kw["train_gold"], kw["dev_gold"], kw["conventions"]
    temp_directory = kw["temp_directory"]
    return run.EvaluateOptions(
        gold=[file_of(g, "gold", "gold") for g in golds],
        pred=[(n, file_of(v, n, "predictions")) for n, v in models.items()],
        train_gold=None if train_gold is None else file_of(train_gold, "train_gold", "gold"),
        doc_groups=_doc_groups_file(kw["doc_groups"], inputs),
        hierarchy=_source_text(kw["hierarchy"]),
        hierarchy_sha256=kw["hierarchy_sha256"],
        cache=Path(kw["cache"]),
        max_level=kw["max_level"],
        unknown_codes=_checked("unknown_codes", kw["unknown_codes"]),
        malformed_codes=_checked("malformed_codes", kw["malformed_codes"]),
        unknown_docs=_checked("unknown_docs", kw["unknown_docs"]),
        threshold=_checked("threshold", kw["threshold"]),
        dev_gold=None if dev_gold is None else file_of(dev_gold, "dev_gold", "gold"),
        dev_pred=[(n, file_of(v, f"{n} (dev)", "predictions")) for n, v in dev.items()],
        k=[_checked("k", value) for value in kw["k"]],
        tuning_per_code=bool(kw["tuning_per_code"]),
        tuning_min_support=_checked("tuning_min_support", kw["tuning_min_support"]),
        tuning_method=_checked("tuning_method", kw["tuning_method"]),
        allow_dev_test_overlap=bool(kw["allow_dev_test_overlap"]),
        top_k=_checked("top_k", kw["top_k"]),
        code_format=_checked("code_format", kw["code_format"]),
        code_type=_code_types(kw["code_type"]),
        **{name: _checked(name, kw[name]) for name in _ICM_KEYWORDS},
        label_set=_checked("label_set", kw["label_set"]),
        format=[_checked("format", f"{n}={f}", keyword="format") for n, f in formats.items()],
        code_list=[(n, Path(p)) for n, p in _pairs(kw["code_list"], "code_list")],
        doc_list=[(n, Path(p)) for n, p in _pairs(kw["doc_list"], "doc_list")],
        **{name: _checked(name, kw[name]) for name in _UNCERTAINTY_KEYWORDS},
        memory_limit=_checked("memory_limit", kw["memory_limit"]),
        temp_directory=None if temp_directory is None else Path(temp_directory),
        threads=_checked("threads", kw["threads"]),
        conventions=None
        if conventions is None
        else [_checked("conventions", c) for c in conventions],
        label_space=[(n, Path(p)) for n, p in _pairs(kw["label_space"], "label_space")],
        paper_table=_checked("paper_table", kw["paper_table"]),
    )


#: Keywords checked alike, in :func:`evaluate`'s order.
_ICM_KEYWORDS = ("icm_empty_gold", "icm_alpha1", "icm_alpha2", "icm_beta", "propensity_a",
                 "propensity_b")  # fmt: skip
_UNCERTAINTY_KEYWORDS = ("bootstrap", "confidence", "seed", "permutations")
