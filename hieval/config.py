"""The config and the model sheet: validate them against their JSON schemas, explain what is
wrong.

A typo in a config or in a sheet of fifty models must fail before any work starts, naming the
key, or the line and column, and the value, not an hour later inside a cluster job. JSON Schema
alone lets some wrong values through, so the validators here add what it cannot say: numbers
are finite (YAML's ``.nan`` and a sheet's ``nan`` are floats, and NaN passes every
``minimum``/``maximum``), paths hold no braces (Snakemake would expand them as wildcards), and
model names follow one rule shared with the command line.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from jsonschema import Draft202012Validator, validators

from hieval.codes.icd9 import ICD9_LEVELS
from hieval.codes.icd10 import ICD10_LEVELS
from hieval.codesystem import PLACE, for_source
from hieval.conventions.table import check_paper_table
from hieval.engine.counts import evaluated_levels
from hieval.engine.icm import IcmParams
from hieval.errors import ConfigError, HievalError, InputError, preview, preview_value
from hieval.hints import setting
from hieval.inputs.options import TUNE, LabelOptions
from hieval.metrics.uncertainty.settings import Settings
from hieval.resources import Resources, memory_limit_problem

_NUMERIC = {"threshold": float, "top_k": int}

#: The model-name rule, for the sheet (``models.schema.yaml`` carries the same pattern; a test
#: checks that they agree) and for ``hieval evaluate --pred NAME=PATH``: names become file
#: names, so letters, digits and ``_ . + -``, starting with a letter or digit (no ``.``, ``..``
#: or hidden files); ``gold`` is reserved because ``--format gold=...`` and the gold's own
#: files use it.
MODEL_NAME_PATTERN = r"^(?!gold$)[A-Za-z0-9][A-Za-z0-9_.+-]*$"
#: A model name becomes file names (``NAME.parquet``, staged as ``.NAME.parquet.XXXXXXXX.tmp``)
#: and most file systems allow 255 bytes per name: a longer model name would fail at the first
#: write, deep in the run, so it is refused up front (the schema's ``maxLength`` is this).
MODEL_NAME_MAX = 128
RESERVED_MODEL_NAMES = ("gold",)

#: The pattern the schemas put on every path: Snakemake expands ``{...}`` in an input path as a
#: wildcard (``p{model}.csv`` would read ``pm.csv``), so a path with a brace is refused.
LITERAL_PATH_PATTERN = "^[^{}]*$"

#: Hierarchy sources whose levels are known without building them.
_SOURCE_LEVELS = {
    "package": ("ICD-9", ICD9_LEVELS),
    "cms": ("ICD-9", ICD9_LEVELS),
    "cophe": ("ICD-9", ICD9_LEVELS),
    "icd10": ("ICD-10", ICD10_LEVELS),
}


def gold_options(config: dict) -> LabelOptions:
    """How to read the gold file, from a validated config (the workflow's and the CLI's)."""
    return LabelOptions(
        code_type=config["gold_code_type"],
        code_format=config["gold_code_format"],
        format=config["gold_format"],
        code_list=config["gold_code_list"],
        doc_list=config["gold_doc_list"],
    )


def other_gold_options(config: dict) -> LabelOptions:
    """How to read the dev and the train gold: the gold's options without its code and
    document lists, which name the test gold's matrix alone (a train matrix read with the test
    split's document list would pair its rows with the wrong documents)."""
    return dataclasses.replace(gold_options(config), code_list=None, doc_list=None)


def ranking_ks(config: dict) -> tuple[int, ...]:
    """The K of precision@K and recall@K (config ``ranking.k``), ascending."""
    return tuple(sorted(config["ranking"]["k"]))


def tuning_options(config: dict) -> dict:
    """``per_code``, ``min_support`` and ``allow_dev_test_overlap`` of threshold tuning
    (config ``tuning``)."""
    return {
        "per_code": config["tuning"]["per_code"],
        "min_support": config["tuning"]["min_support"],
        "allow_dev_test_overlap": config["tuning"]["allow_dev_test_overlap"],
        "method": config["tuning"]["method"],
    }


def check_tuning(config: dict, specs: list[ModelSpec]) -> None:
    """Refuse a tuning setup that cannot run: a model tuned without dev predictions, or any
    tuned model without ``dev_gold``."""
    tuned = [s.model for s in specs if s.tunes(config["threshold"])]
    lacking = [s.model for s in specs if s.threshold == TUNE and not s.dev_predictions]
    if lacking:
        raise ConfigError(
            f"model(s) {', '.join(lacking)} have threshold tune but no dev predictions; give "
            f"each its predictions on the dev set ({setting('dev_predictions', 'PATH')})"
        )
    if tuned and not config.get("dev_gold"):
        raise ConfigError(
            f"model(s) {', '.join(tuned)} tune their threshold, which needs the dev gold: set "
            f"{setting('dev_gold', 'PATH')}"
        )


def icm_params(config: dict) -> IcmParams:
    """ICM's weights and the propensity parameters of PROP-F, from a validated config."""
    return IcmParams(
        **config["icm"],
        propensity_a=config["comparison"]["propensity_a"],
        propensity_b=config["comparison"]["propensity_b"],
    )


def report_settings(config: dict, model_options: dict[str, LabelOptions]) -> dict:
    """The settings that change numbers: the run's (shared by every model) and each model's
    reading options. The zoo's history keys evaluations by them; the HTML report shows them."""
    run = {
        key: config[key]
        for key in ("hierarchy", "max_level", "unknown_codes", "unknown_docs", "threshold")
    }
    if config.get("malformed_codes", "error") != "error":  # only when set: old keys unchanged
        run["malformed_codes"] = config["malformed_codes"]
    run["icm"] = dataclasses.asdict(icm_params(config))
    run["label_set"] = config["comparison"]["label_set"]
    models = {name: dataclasses.asdict(options) for name, options in model_options.items()}
    return {"run": run, "models": models}


def uncertainty_settings(config: dict) -> Settings:
    """Bootstrap and randomization-test settings (``uncertainty.*``) from a validated config."""
    return Settings(**config["uncertainty"])


def check_model_name(name: str) -> None:
    """Refuse a model name that is not a safe file name or is reserved (``gold``)."""
    if name in RESERVED_MODEL_NAMES:
        raise InputError(
            f"model name {preview_value(name)} is reserved (it names the gold's own files and "
            "options); choose another name"
        )
    if not re.fullmatch(MODEL_NAME_PATTERN, name):
        raise InputError(
            f"model name {preview_value(name)} may only use letters, digits and _ . + -, and "
            "must start with a letter or digit"
        )
    if len(name) > MODEL_NAME_MAX:
        raise InputError(
            f"model name {preview_value(name)} is longer than {MODEL_NAME_MAX} characters; it "
            "names the model's files: choose a shorter name"
        )


def _is_finite_number(checker, instance: object) -> bool:
    """JSON Schema's ``number``, without NaN and the infinities (no key means them)."""
    return Draft202012Validator.TYPE_CHECKER.is_type(instance, "number") and math.isfinite(instance)


def _with_defaults(validator_class):
    """A validator that fills each missing property's ``default`` as it validates, as
    ``snakemake.utils.validate(..., set_default=True)`` does (a nested object's default ``{}``
    is filled first, then its own properties' defaults). Defaults are copied, so the schema's
    own ``{}`` is never shared with (and mutated through) the config."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for key, subschema in properties.items():
                if "default" in subschema and key not in instance:
                    instance[key] = copy.deepcopy(subschema["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return validators.extend(validator_class, {"properties": set_defaults})


_FiniteValidator = validators.extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("number", _is_finite_number),
)
_DefaultingValidator = _with_defaults(_FiniteValidator)


def _message(error: jsonschema.ValidationError) -> str:
    """A schema violation in words a user acts on (jsonschema's own, where they are clear)."""
    value = error.instance
    if error.validator == "anyOf":  # a threshold: a number in [0, 1] or tune
        if isinstance(value, int | float) and not isinstance(value, bool):
            numeric = [e for e in error.context if list(e.relative_schema_path)[:1] == [0]]
            if numeric:
                return _message(numeric[0])
        return f"{preview_value(value)} must be a number in [0, 1] or {TUNE}"
    if error.validator == "type" and isinstance(value, float) and not math.isfinite(value):
        expected = error.validator_value
        if "number" in (expected if isinstance(expected, list) else [expected]):
            return f"{value} is not a finite number"
    if error.validator == "pattern" and error.validator_value == LITERAL_PATH_PATTERN:
        return (
            f"path {preview_value(value)} contains {{ or }}, which Snakemake would expand as a "
            "wildcard; rename the file or folder without braces"
        )
    if error.validator == "oneOf":
        return f"{preview_value(value)} is neither a path nor a list of paths"
    if error.validator == "enum" and None in error.validator_value:
        # a null choice means "the default": users pick among the named ones
        named = [v for v in error.validator_value if v is not None]
        return f"{preview_value(value)} is not one of {named}"
    if (error.validator, error.validator_value) in (
        ("pattern", MODEL_NAME_PATTERN),
        ("maxLength", MODEL_NAME_MAX),
    ):
        try:
            check_model_name(value)
        except InputError as exc:
            return str(exc)
    if isinstance(value, str):  # jsonschema quotes the value whole
        return error.message.replace(repr(value), preview_value(value))
    return error.message


def _key(path) -> str:
    return ".".join(str(part) for part in path)


def _branch_errors(error: jsonschema.ValidationError) -> list[jsonschema.ValidationError]:
    """A ``oneOf`` of a string and a list of strings (``gold``) reported as the branch the
    value meant: the string's own problem, or each bad item's, not "valid under none"."""
    if error.validator != "oneOf" or not error.context:
        return [error]
    if not isinstance(error.instance, str | list):
        return [error]
    branch = 0 if isinstance(error.instance, str) else 1
    chosen = [e for e in error.context if e.relative_schema_path[0] == branch]
    return chosen or [error]


def _schema_problems(validator, instance: dict) -> Iterator[str]:
    """One line per violation, naming the key path (unknown keys one by one)."""
    errors = sorted(
        (e for error in validator.iter_errors(instance) for e in _branch_errors(error)),
        key=lambda e: [str(p) for p in e.path],
    )
    for error in errors:
        where = _key(error.absolute_path)
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            allowed = list(error.schema.get("properties", {}))
            for extra in sorted(set(error.instance) - set(allowed)):
                key = f"{where}.{extra}" if where else str(extra)
                yield f"config key {key!r} is unknown; the keys here are {', '.join(allowed)}"
        elif error.validator == "required" and isinstance(error.instance, dict):
            for missing in (k for k in error.validator_value if k not in error.instance):
                key = f"{where}.{missing}" if where else missing
                yield f"config key {key!r} is required"
        else:
            yield (
                f"config key {where!r}: {_message(error)}"
                if where
                else f"config: {_message(error)}"
            )


def _max_level_problem(config: dict) -> str | None:
    """A ``max_level`` that the hierarchy surely lacks, from what is known before building it.

    ICD-9 sources have ICD-9's levels, ``icd10`` ICD-10's; an edge-list tree has levels ``d1``,
    ``d2``, ... whose depth is known once it is built (checked then, in the ``build_levels``
    job, before any file is normalised); a CoPHE-style ``.json`` tree has ICD-9's names (four
    parents) or depth names. Unset (null), it is the code system's default, always a level.
    """
    hierarchy, max_level = config["hierarchy"], config["max_level"]
    source, path = hierarchy["source"], hierarchy.get("path")
    if max_level is None or (source == "file" and not path):
        return None  # a missing hierarchy.path is reported on its own
    if source in _SOURCE_LEVELS:
        system, levels = _SOURCE_LEVELS[source]
        try:
            evaluated_levels(levels, max_level)
        except ConfigError:
            return (
                f"config key 'max_level': {preview_value(max_level)} is not a level of the "
                f"{system} hierarchy (hierarchy.source {source}); choose one of "
                f"{', '.join(levels[:-1])}"
            )
        return None
    depth_name = re.fullmatch(r"d[1-9][0-9]*", max_level)
    if Path(path).suffix == ".json":
        if not depth_name and max_level not in ICD9_LEVELS[:-1]:
            return (
                f"config key 'max_level': {preview_value(max_level)} is not a level of a "
                f"CoPHE-style JSON tree, whose levels are {', '.join(ICD9_LEVELS[:-1])} (four "
                "parents per entry) or d1 (just below the root), d2, ... (any other number)"
            )
    elif not depth_name:
        return (
            f"config key 'max_level': {preview_value(max_level)} is not a level of an edge-list "
            "tree, whose levels are d1 (children of the root), d2, ...; choose one of those"
        )
    return None


#: How YAML writes the scalars Snakemake's ``--config`` leaves as strings when they are nested
#: (``--config 'uncertainty={"bootstrap": 200}'`` gives ``"200"``).
_INTEGER = re.compile(r"[+-]?[0-9]+")
_BOOLEANS = {"true": True, "false": False}
_NULLS = ("null", "~")
_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}


def _accepted(schema: dict) -> tuple[set[str], list]:
    """The JSON types a schema accepts (through ``anyOf``/``oneOf`` branches too), and the
    strings it names (``enum``/``const``); an empty set: anything goes."""
    types = schema.get("type", [])
    types = {types} if isinstance(types, str) else set(types)
    named = [*schema.get("enum", []), *([schema["const"]] if "const" in schema else [])]
    for branch in (*schema.get("anyOf", []), *schema.get("oneOf", [])):
        more, more_named = _accepted(branch)
        types |= more or {"any"}
        named += more_named
    if "const" in schema or "enum" in schema:
        types |= {_JSON_TYPES[type(v)] for v in named if type(v) in _JSON_TYPES}
        if None in named:
            types.add("null")
    return types, named


def _typed(text: str, schema: dict) -> Any:
    """``text`` as the integer, number, boolean or null the schema asks for where it takes no
    string (or not this one); else ``text`` unchanged, for the validator to report."""
    types, named = _accepted(schema)
    word = text.strip()
    if "null" in types and word.lower() in _NULLS:
        return None  # YAML's null: no path, size or level is named "null"
    strings = [v for v in named if isinstance(v, str)]
    if not types or "any" in types or ("string" in types and (not named or text in strings)):
        return text
    if {"integer", "number"} & types and _INTEGER.fullmatch(word):
        return int(word)
    if "number" in types:
        try:
            number = float(word)
        except ValueError:
            number = math.nan
        if math.isfinite(number):
            return number
    if "boolean" in types and word.lower() in _BOOLEANS:
        return _BOOLEANS[word.lower()]
    return text


def _coerce(value: Any, schema: dict) -> Any:
    """``value`` with each string leaf typed by :func:`_typed` where the schema puts it."""
    if isinstance(value, Mapping):
        properties = schema.get("properties", {})
        return {key: _coerce(item, properties.get(key, {})) for key, item in value.items()}
    if isinstance(value, list):
        return [_coerce(item, schema.get("items", {})) for item in value]
    if isinstance(value, str):
        return _typed(value, schema)
    return value


def type_command_line(
    config: dict[str, Any], command_line: Mapping[str, Any], schema_path: str | Path
) -> None:
    """Give the values the user typed with ``snakemake --config`` the types the schema asks
    for, in ``config`` (the merged config), before it is validated.

    Snakemake reads a nested ``--config`` value with YAML's base loader, which keeps every
    scalar a string: ``uncertainty={"bootstrap": 200}`` arrives as ``"200"`` and would be
    refused although the user typed a number. Only those command-line values are typed, and
    only where the schema takes no such string; a config file is YAML already, and a quoted
    ``"200"`` there stays an error.
    """
    schema = yaml.safe_load(Path(schema_path).read_text("utf-8"))
    for key, value in command_line.items():
        if key in config:
            config[key] = _merge_typed(
                config[key], _coerce(value, schema.get("properties", {}).get(key, {}))
            )


def _merge_typed(current: Any, typed: Any) -> Any:
    """``typed`` (the command line's value, typed) where it replaced ``current`` in the merged
    config; keys of ``current`` the command line left alone stay as they are."""
    if isinstance(current, dict) and isinstance(typed, dict):
        return {**current, **{k: _merge_typed(current.get(k), v) for k, v in typed.items()}}
    return typed


def validate_config(config: dict[str, Any], schema_path: str | Path) -> dict[str, Any]:
    """Validate the workflow config in place, filling the schema's defaults; raise a
    :class:`ConfigError` listing every violation, one line each, naming its key.

    Beyond the schema: numbers are finite, ``hierarchy.path`` is set for ``source: file``,
    ``engine.memory_limit`` is a size DuckDB and the count jobs both read, and ``max_level``
    is a level of the hierarchy wherever that is known before building it.
    """
    schema = yaml.safe_load(Path(schema_path).read_text("utf-8"))
    problems = list(_schema_problems(_DefaultingValidator(schema), config))
    if not problems:
        hierarchy = config["hierarchy"]
        if hierarchy["source"] == "file" and not hierarchy["path"]:
            problems.append("config key 'hierarchy.path' must be set when hierarchy.source is file")
        limit = config["engine"]["memory_limit"]
        if limit is not None and (problem := memory_limit_problem(limit)):
            problems.append(f"config key 'engine.memory_limit': {problem}")
        if problem := _max_level_problem(config):
            problems.append(problem)
        try:
            check_paper_table(config["report"]["paper_table"], config["conventions"])
        except HievalError as exc:
            problems.append(f"config key 'report.paper_table': {exc}")
        system = for_source(hierarchy["source"])
        if config["unknown_codes"] == PLACE and not system.can_place:
            problems.append(
                "config key 'unknown_codes': place puts a code where its ICD syntax says, but "
                f"your own tree (hierarchy.source {hierarchy['source']}) is read verbatim: "
                "labels are node names, with no syntax; set unknown_codes to error (the "
                "default for your own tree) or drop"
            )
    if problems:
        raise ConfigError("\n".join(problems))
    return config


@dataclass(frozen=True)
class ModelSpec:
    """One model of the zoo."""

    model: str
    predictions: str
    threshold: float | str | None = None
    top_k: int | None = None
    format: str | None = None
    code_list: str | None = None
    doc_list: str | None = None
    code_format: str | None = None
    code_type: str | None = None
    description: str | None = None
    #: Rows with the same system are runs (seeds) of one system: the report gives their mean
    #: and standard deviation.
    system: str | None = None
    dev_predictions: str | None = None
    #: The label space of the caml and edin conventions (one code per line).
    label_space: str | None = None

    def tunes(self, default_threshold: float | str) -> bool:
        """Whether this model's threshold is tuned on its dev predictions: its own threshold
        is ``tune``, or the config's is and the model has dev predictions and no threshold or
        top-k of its own."""
        if self.threshold == TUNE:
            return True
        return (
            default_threshold == TUNE
            and self.threshold is None
            and self.top_k is None
            and bool(self.dev_predictions)
        )

    def options(self) -> LabelOptions:
        """How to read this model's prediction file (and its dev predictions)."""
        return LabelOptions(
            code_type=self.code_type,
            code_format=self.code_format or "auto",
            threshold=None if self.threshold == TUNE else self.threshold,
            top_k=self.top_k,
            format=self.format or "auto",
            code_list=self.code_list,
            doc_list=self.doc_list,
        )

    def files(self) -> dict[str, str]:
        """Every file this model's evaluation reads, for the workflow to track."""
        named = {"labels": self.predictions, "code_list": self.code_list, "doc_list": self.doc_list}
        return {k: v for k, v in named.items() if v}


def code_fingerprint() -> str:
    """sha256 over hieval's own source and data files, so results can name the code behind them."""
    root = Path(__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".tsv") and "__pycache__" not in path.parts:
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _convert(value: str, column: str, where: str):
    if value is None or value.strip() == "":
        return None
    value = value.strip()
    if column not in _NUMERIC or (column == "threshold" and value == TUNE):
        return value
    try:
        return _NUMERIC[column](value)
    except ValueError:
        kind = "a whole number" if column == "top_k" else "a number (or tune)"
        raise InputError(
            f"{where}: column {column!r} must be {kind}, got {preview_value(value)}"
        ) from None


def _is_dir(path: str, what: str) -> bool:
    """Whether a sheet's path is a folder; a path the system cannot look up (a name over 255
    bytes, a NUL byte) is refused here, naming its line, not raised as the system's error."""
    try:
        return Path(path).is_dir()
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise InputError(f"{what} {preview_value(path)} is not a usable path ({reason})") from None


def _sheet_lines(path: Path) -> list[str]:
    """The sheet's lines as text: UTF-8, a leading byte-order mark dropped (spreadsheet programs
    write one), and a byte that is not UTF-8 named by its line."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(
            f"model sheet {path}, line {line}: not UTF-8 (byte 0x{data[exc.start]:02x}); "
            "save the sheet as UTF-8"
        ) from None
    return text.splitlines()


def load_workflow_config(
    config: dict[str, Any], schemas: str | Path, *, command_line: Mapping[str, Any] | None = None
) -> dict[str, ModelSpec]:
    """Everything the workflow checks before its first job, in one place (``common.smk`` and
    the tests call it): the config against ``schemas/config.schema.yaml`` (defaults filled in
    place; the ``command_line`` values, Snakemake's ``--config``, typed first:
    :func:`type_command_line`), the model sheet it names against
    ``schemas/models.schema.yaml``, the tuning setup and whether the bootstrap's replicates
    fit in memory. Returns the sheet's models by name; raises :class:`ConfigError` (or the
    sheet's :class:`InputError`) with one line per
    problem."""
    schemas = Path(schemas)
    if command_line:
        type_command_line(config, command_line, schemas / "config.schema.yaml")
    validate_config(config, schemas / "config.schema.yaml")
    specs = load_model_sheet(config["models"], schemas / "models.schema.yaml")
    check_tuning(config, specs)
    Resources(**config["engine"]).check_bootstrap(
        config["uncertainty"]["bootstrap"], models=len(specs)
    )
    return {spec.model: spec for spec in specs}


def load_model_sheet(path: str | Path, schema_path: str | Path) -> list[ModelSpec]:
    """Read and validate the model sheet (TSV with a header).

    The sheet is plain TSV: every line is one model (or the header, or blank). Quotes are
    text, not CSV quoting, so a cell starting with ``"`` cannot swallow the lines after it and
    make a model silently disappear.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"model sheet {path} does not exist; set `models` in your config")
    schema = yaml.safe_load(Path(schema_path).read_text("utf-8"))
    validator = _FiniteValidator(schema)
    # Plain TSV: a line is its tab-separated cells, whatever they hold (the csv module would
    # refuse a cell over 128 kB or a NUL byte with an exception of its own).
    reader = (line.split("\t") if line else [] for line in _sheet_lines(path))
    header = next(reader, None)
    if not header:
        raise InputError(f"model sheet {path} is empty; it needs a header 'model\tpredictions'")
    header = [h.strip() for h in header]
    if len(set(header)) != len(header):
        raise InputError(f"model sheet {path}: duplicated column in header {preview(header, 20)}")
    allowed = list(schema["properties"])
    missing = [c for c in schema.get("required", []) if c not in header]
    unknown = [c for c in header if c not in allowed]
    if missing or unknown:
        raise InputError(
            f"model sheet {path}, line 1: "
            + (f"missing column(s) {missing}" if missing else "")
            + ("; " if missing and unknown else "")
            + (f"unknown column(s) {preview(unknown)}" if unknown else "")
            + f"; the columns are {allowed} (model and predictions required)"
        )
    specs, seen = [], {}
    for line, cells in enumerate(reader, start=2):
        if not any(c.strip() for c in cells):
            continue
        where = f"model sheet {path}, line {line}"
        if len(cells) > len(header):
            raise InputError(f"{where}: {len(cells)} fields but the header has {len(header)}")
        row = {col: _convert(val, col, where) for col, val in zip(header, cells, strict=False)}
        row = {k: v for k, v in row.items() if v is not None}
        errors = sorted(validator.iter_errors(row), key=lambda e: [str(p) for p in e.path])
        if errors:
            err = errors[0]
            column = err.path[0] if err.path else ", ".join(schema.get("required", []))
            raise InputError(f"{where}, column {column!r}: {_message(err)}")
        name = row["model"]
        if name in seen:
            raise InputError(
                f"{where}: model {preview_value(name)} is already defined on line {seen[name]}; "
                "model names must be unique"
            )
        seen[name] = line
        if _is_dir(row["predictions"], f"{where}: predictions"):
            raise InputError(
                f"{where}: predictions {preview_value(row['predictions'])} is a directory; "
                "point it at a prediction file"
            )
        specs.append(ModelSpec(**row))
    if not specs:
        raise InputError(f"model sheet {path} lists no models")
    return specs
