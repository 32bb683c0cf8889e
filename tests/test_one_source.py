"""Defaults and choices have one source: the code's constants. The workflow's schemas, the
shipped config and the command line must say the same, and this test fails when they drift.

Also the registry's promises: every metric a report shows comes from it, and every tidy row of
an evaluation is a registered metric.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from pathlib import Path

import pytest
import yaml

from hieval import cli
from hieval.codes.icd9 import CODE_TYPES
from hieval.codesystem import DEFAULT_MAX_LEVEL, code_system
from hieval.config import validate_config
from hieval.engine.icm import EMPTY_GOLD, IcmParams
from hieval.experiments.demo import make_demo
from hieval.experiments.meta import MetaParams
from hieval.hierarchy.sources import SOURCES
from hieval.inputs.formats import FORMAT_NAMES, FORMATS, GOLD, PREDICTIONS
from hieval.inputs.options import (
    CODE_FORMATS,
    DEFAULT_MALFORMED_CODES,
    DEFAULT_THRESHOLD,
    DEFAULT_UNKNOWN_CODES,
    DEFAULT_UNKNOWN_DOCS,
    GOLD_CODE_FORMATS,
    MALFORMED_CODE_POLICIES,
    UNKNOWN_CODE_POLICIES,
    UNKNOWN_DOC_POLICIES,
    LabelOptions,
)
from hieval.metrics import registry
from hieval.metrics.ranking import DEFAULT_KS
from hieval.metrics.suite import DEFAULT_LABEL_SET, LABEL_SETS
from hieval.metrics.tuning import DEFAULT_MIN_SUPPORT

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
CONFIG = yaml.safe_load(SCHEMA.read_text("utf-8"))["properties"]
MODELS = yaml.safe_load((ROOT / "workflow/schemas/models.schema.yaml").read_text())["properties"]
ICM = {f.name: f.default for f in dataclasses.fields(IcmParams)}

#: Config keys the command line has no option for, and why.
WORKFLOW_ONLY = {
    "models": "the CLI names models with --pred NAME=PATH instead of a sheet",
    "shards": "the CLI counts each model in one job; sharding is a workflow feature",
    "demo": "the demo data set is a workflow target",
    "meta": "the meta experiments are a workflow target",
    "name": "the CLI writes where --out says; a workflow config's folder is results/NAME/",
}


def enum(schema: dict) -> list:
    return [v for v in schema["enum"] if v is not None]


def test_config_schema_enums_are_the_code_constants():
    assert enum(CONFIG["hierarchy"]["properties"]["source"]) == list(SOURCES)
    gold_formats = ["auto", *(n for n, f in FORMATS.items() if GOLD in f.roles)]
    assert enum(CONFIG["gold_format"]) == gold_formats
    assert enum(CONFIG["gold_code_format"]) == list(GOLD_CODE_FORMATS)
    assert enum(CONFIG["malformed_codes"]) == list(MALFORMED_CODE_POLICIES)
    assert enum(CONFIG["gold_code_type"]) == list(CODE_TYPES)
    assert enum(CONFIG["unknown_codes"]) == list(UNKNOWN_CODE_POLICIES)
    assert enum(CONFIG["unknown_docs"]) == list(UNKNOWN_DOC_POLICIES)
    assert enum(CONFIG["icm"]["properties"]["empty_gold"]) == list(EMPTY_GOLD)
    assert enum(CONFIG["comparison"]["properties"]["label_set"]) == list(LABEL_SETS)


def test_models_schema_enums_are_the_code_constants():
    prediction_formats = ["auto", *(n for n, f in FORMATS.items() if PREDICTIONS in f.roles)]
    assert enum(MODELS["format"]) == prediction_formats == list(FORMAT_NAMES)
    assert enum(MODELS["code_format"]) == list(CODE_FORMATS)
    assert enum(MODELS["code_type"]) == list(CODE_TYPES)


def test_config_schema_defaults_are_the_code_defaults():
    assert CONFIG["max_level"]["default"] == DEFAULT_MAX_LEVEL
    assert CONFIG["threshold"]["default"] == DEFAULT_THRESHOLD
    assert CONFIG["unknown_codes"]["default"] == DEFAULT_UNKNOWN_CODES
    assert CONFIG["unknown_docs"]["default"] == DEFAULT_UNKNOWN_DOCS
    assert CONFIG["malformed_codes"]["default"] == DEFAULT_MALFORMED_CODES
    assert CONFIG["gold_code_format"]["default"] == LabelOptions.code_format
    assert CONFIG["gold_format"]["default"] == LabelOptions.format
    for key in ("alpha1", "alpha2", "beta", "empty_gold"):
        assert CONFIG["icm"]["properties"][key]["default"] == ICM[key], key
    comparison = CONFIG["comparison"]["properties"]
    assert comparison["label_set"]["default"] == DEFAULT_LABEL_SET
    for key in ("propensity_a", "propensity_b"):
        assert comparison[key]["default"] == ICM[key], key
    assert CONFIG["ranking"]["properties"]["k"]["default"] == list(DEFAULT_KS)
    tuning = CONFIG["tuning"]["properties"]
    assert tuning["min_support"]["default"] == DEFAULT_MIN_SUPPORT
    assert tuning["per_code"]["default"] is False
    demo = inspect.signature(make_demo).parameters
    for key in ("seed", "documents"):
        assert CONFIG["demo"]["properties"][key]["default"] == demo[key].default, key
    meta = {f.name: f.default for f in dataclasses.fields(MetaParams)}
    for key in ("seed", "trials", "items", "share"):
        assert CONFIG["meta"]["properties"][key]["default"] == meta[key], key


def test_shipped_config_states_the_defaults():
    """config/config.yaml spells every setting out: each value is the schema's default (the
    demo's gold file aside)."""
    shipped = yaml.safe_load((ROOT / "config" / "config.yaml").read_text("utf-8"))
    defaults = validate_config({"gold": shipped["gold"]}, SCHEMA)
    assert shipped == defaults


def _cli_args(*extra: str) -> argparse.Namespace:
    args = cli.build_parser().parse_args(
        ["evaluate", "--gold", "g.csv", "--pred", "m=p.csv", "--out", "o", *extra]
    )
    args.per_file = {}
    return args


def test_cli_defaults_are_the_config_defaults_and_cover_every_key():
    """With no options, the CLI amounts to the workflow's default config, key for key; every
    config key has an option, apart from the workflow-only ones named above."""
    from_cli = cli.config_from_args(_cli_args())
    defaults = validate_config({"gold": "g.csv"}, SCHEMA)
    assert set(from_cli) | set(WORKFLOW_ONLY) == set(defaults)
    for key, value in from_cli.items():
        assert value == defaults[key], key


@pytest.mark.parametrize(
    ("options", "key", "value"),
    [
        (["--max-level", "e0"], ("max_level",), "e0"),
        (["--unknown-codes", "drop"], ("unknown_codes",), "drop"),
        (["--unknown-docs", "drop"], ("unknown_docs",), "drop"),
        (["--malformed-codes", "count"], ("malformed_codes",), "count"),
        (["--code-format", "undotted"], ("gold_code_format",), "undotted"),
        (["--code-type", "proc"], ("gold_code_type",), "proc"),
        (["--icm-alpha1", "1.5"], ("icm", "alpha1"), 1.5),
        (["--icm-beta", "2"], ("icm", "beta"), 2.0),
        (["--icm-empty-gold", "drop"], ("icm", "empty_gold"), "drop"),
        (["--label-set", "hierarchy"], ("comparison", "label_set"), "hierarchy"),
        (["--propensity-a", "0.6"], ("comparison", "propensity_a"), 0.6),
        (["--propensity-b", "2.5"], ("comparison", "propensity_b"), 2.5),
        (["--memory-limit", "2GB"], ("engine", "memory_limit"), "2GB"),
        (["--temp-directory", "spill"], ("engine", "temp_directory"), "spill"),
        (["--hierarchy", "cophe"], ("hierarchy", "source"), "cophe"),
        (["--hierarchy", "tree.csv"], ("hierarchy", "path"), "tree.csv"),
        (["--hierarchy-sha256", "ab" * 32], ("hierarchy", "sha256"), "ab" * 32),
        (["--threshold", "tune"], ("threshold",), "tune"),
        (["--dev-gold", "dev.csv"], ("dev_gold",), "dev.csv"),
        (["--k", "1", "10"], ("ranking", "k"), [1, 10]),
        (["--tuning-per-code"], ("tuning", "per_code"), True),
        (["--tuning-min-support", "3"], ("tuning", "min_support"), 3),
    ],
)
def test_each_cli_option_sets_its_config_key(options, key, value):
    config = cli.config_from_args(_cli_args(*options))
    for part in key:
        config = config[part]
    assert config == value


def test_cli_choices_are_the_code_constants():
    actions = {
        a.dest: a
        for a in cli.build_parser()._subparsers._group_actions[0].choices["evaluate"]._actions
    }
    assert list(actions["unknown_codes"].choices) == list(UNKNOWN_CODE_POLICIES)
    assert list(actions["unknown_docs"].choices) == list(UNKNOWN_DOC_POLICIES)
    assert list(actions["code_format"].choices) == list(CODE_FORMATS)
    # --code-type [NAME=]dx|proc: parsed by a type, which takes exactly the code constants
    parse = actions["code_type"].type
    assert [parse(kind) for kind in CODE_TYPES] == [(None, kind) for kind in CODE_TYPES]
    assert [parse(f"gold={kind}") for kind in CODE_TYPES] == [("gold", k) for k in CODE_TYPES]
    assert list(actions["icm_empty_gold"].choices) == list(EMPTY_GOLD)
    assert list(actions["label_set"].choices) == list(LABEL_SETS)


def test_registry_lists_each_metric_once_with_what_reports_need():
    keys = [m.key for m in registry.REGISTRY]
    assert len(keys) == len(set(keys))
    papers = [m.paper for m in registry.REGISTRY if m.paper]
    assert len(papers) == len(set(papers))
    for metric in registry.SUITE:
        assert metric.paper, metric  # summary.md names every suite metric by its paper name
        assert metric.source in (registry.NODES, registry.DOCUMENTS, registry.ITEMS)
    assert {"EB-P", "EB-R", "F-CoPHE", "ICM"} <= set(registry.PAPER_METRICS)
    assert registry.PAPER_METRICS["EB-HAMM"] is False  # a loss


#: The library's layers, bottom-up, as docs/development.md's layout map draws them.
LAYERS = (
    (
        "errors",
        "collector",
        "compiled",
        "hints",
        "signals",
        "ownership",
        "atomic",
        "checksums",
        "paths",
        "pending_file",
        "codes",
        "data",
    ),
    ("hierarchy", "codesystem"),
    ("inputs",),
    ("engine",),
    ("metrics", "conventions"),
    ("reports", "analysis"),
    ("resources", "pipeline", "config", "layout", "analysis_stage"),
    ("run",),
    ("cli", "__main__", "workflow_script", "console", "api", "evaluator", "memory"),
    ("experiments",),
)


def test_no_import_runs_back_up_the_layers():
    """Each module imports only from its own layer or below (docs/development.md's layout map)."""
    import ast

    layer_of = {name: i for i, names in enumerate(LAYERS) for name in names}
    package = ROOT / "hieval"
    wrong = []
    for path in package.rglob("*.py"):
        parts = path.relative_to(package).with_suffix("").parts
        if parts == ("__init__",):
            continue
        here = layer_of[parts[0]]
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            names = []
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("hieval")
            ):
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("hieval")]
            for name in names:
                top = name.split(".")[1] if "." in name else None
                if top in layer_of and layer_of[top] > here:
                    wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert wrong == []


def test_every_tidy_row_is_a_registered_metric_at_its_level(icd9):
    """An evaluation's rows are exactly the registry's (each at the levels it declares), and
    summary.csv has a column for each metric with a value in every row."""
    import polars as pl

    from hieval.engine.driver import evaluate
    from hieval.metrics.tidy import model_rows

    gold, predictions = make_demo(icd9.frame, seed=3, documents=60)
    levels = icd9.levels
    result = evaluate(gold, predictions["over_predictor"], icd9.ancestors(), levels=levels,
                      evaluated=levels[:-1], params=IcmParams())  # fmt: skip
    tidy = model_rows(result.nodes, result.docs, result.item_sums, model="m",
                      levels=levels[:-1], params=IcmParams(),
                      split_kinds=code_system("icd9").node_kind)  # fmt: skip
    declared = {m.key: m for m in registry.REGISTRY}
    seen = set()
    for row in tidy.iter_rows(named=True):
        key = (row["family"], row["average"], row["metric"])
        assert key in declared, key
        metric = declared[key]
        allowed = (
            {*levels[:-1], registry.OVERALL}
            if metric.level == registry.EACH_LEVEL
            else {metric.level}
        )
        assert row["level"] in allowed, (key, row["level"])
        seen.add(key)
    # The set families of an ICD-9 evaluation produce every registered metric but the score
    # families (ranking, calibration, selection), which come from a model's scores.
    scored = {m.key for m in registry.SCORE_METRICS}
    assert seen == set(declared) - scored
    wide = registry.wide(tidy)
    assert wide.columns[4:] == [
        m for m in registry.METRICS if any(k[2] == m for k in set(declared) - scored)
    ]
    values = wide.select(pl.all().exclude("model", "family", "level", "average"))
    assert values.select(pl.sum_horizontal(pl.all().is_not_null())).to_series().min() >= 1
