"""Bad configuration, sheet rows and options: refused before any work with one clear message,
never a silent wrong number (issue 11). Each case is met as the user meets it: through the
workflow (``snakemake --configfile``) or the command line, plus the library guard behind them."""

from __future__ import annotations

import math
import re
from pathlib import Path

import polars as pl
import pytest
import yaml
from helpers import REPO, parse_time_refusal, snakemake

from hieval.cli import main
from hieval.config import MODEL_NAME_PATTERN, check_model_name, load_model_sheet
from hieval.engine.icm import IcmParams
from hieval.errors import HievalError, InputError
from hieval.inputs.options import LabelOptions
from hieval.pipeline import NormalizeJob, normalize_file
from hieval.resources import Resources

SCHEMAS = REPO / "workflow" / "schemas"
GOLD = {
    "doc_id": ["a", "a", "a", "b", "b", "c"],
    "code": ["364.11", "364.24", "364.9", "401.9", "96.04", ""],
}
SCORED = {
    "doc_id": ["a", "a", "b", "b", "c"],
    "code": ["364.11", "364.9", "401.9", "96.04", "250.00"],
    "score": [0.9, 0.2, 0.8, 0.7, 0.6],
}
SHEET = "model\tpredictions\tthreshold\nscored\tscored.csv\t0.5\n"


def zoo(workdir: Path, sheet: str | bytes = SHEET, **config) -> Path:
    """Gold, one scored model, a sheet and a config (``config`` adds or overrides keys)."""
    pl.DataFrame(GOLD).write_csv(workdir / "gold.csv")
    pl.DataFrame(SCORED).write_csv(workdir / "scored.csv")
    sheet_path = workdir / "models.tsv"
    if isinstance(sheet, bytes):
        sheet_path.write_bytes(sheet)
    else:
        sheet_path.write_text(sheet, encoding="utf-8")
    path = workdir / "my.yaml"
    # YAML text, not yaml.dump of floats: the user writes `.nan`, and that is what is tested.
    lines = ["gold: gold.csv", "models: models.tsv", "max_level: e0"]
    lines = [ln for ln in lines if ln.split(":")[0] not in config]
    lines += [f"{key}: {value}" for key, value in config.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def refused(workdir: Path, config: Path, *messages: str, through_snakemake: bool = False) -> str:
    """Check the workflow stops at parse time with ``messages``: by the check common.smk runs
    (fast), or ``through_snakemake``: non-zero, the messages, no traceback, nothing written."""
    if not through_snakemake:
        err = parse_time_refusal(workdir, config)
    else:
        result = snakemake(workdir, "--configfile", str(config))
        err = result.stderr
        assert result.returncode != 0, err[-2000:]
        assert "Traceback" not in err
        assert not (workdir / "results").exists()
    for message in messages:
        assert message in err, f"{message!r} not in {err[-3000:]!r}"
    return err


# 1. A NaN threshold deleted every prediction (score < NaN is never true, yet...).


@pytest.mark.parametrize(
    ("cell", "shown"), [("nan", "nan is not a finite number"), ("inf", "inf is not a finite")]
)
def test_non_finite_threshold_in_sheet_is_refused(tmp_path, cell, shown):
    config = zoo(tmp_path, f"model\tpredictions\tthreshold\nscored\tscored.csv\t{cell}\n")
    refused(tmp_path, config, "models.tsv, line 2, column 'threshold'", shown)


def test_nan_threshold_in_config_is_refused(tmp_path):
    config = zoo(tmp_path, threshold=".nan")
    refused(
        tmp_path,
        config,
        "config key 'threshold': nan is not a finite number",
        through_snakemake=True,
    )


def test_nan_threshold_on_the_command_line_is_refused(tmp_path, capsys):
    (tmp_path / "gold.csv").write_text("doc_id,code\nd1,401.9\n")
    (tmp_path / "pred.csv").write_text("doc_id,code,score\nd1,401.9,0.9\n")
    out = tmp_path / "out"
    argv = ["evaluate", "--gold", str(tmp_path / "gold.csv"), "--pred"]
    argv += [f"m={tmp_path / 'pred.csv'}", "--out", str(out), "--threshold", "nan"]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert "expected a finite number, got 'nan'" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("value", [math.nan, math.inf, -0.1, 1.5])
def test_library_refuses_a_threshold_outside_the_unit_interval(value):
    with pytest.raises(InputError, match="threshold must be a finite number in"):
        LabelOptions(threshold=value)


# 2. A cell starting with a quote swallowed the next row: a model silently disappeared.


def test_quote_in_sheet_is_text_and_every_model_is_evaluated(tmp_path):
    """A description opening a quote, a BOM before the header: both models are evaluated, with
    the numbers computed here from the files."""
    sheet = (
        "\ufeffmodel\tpredictions\tthreshold\tdescription\n"
        'exact\tscored.csv\t0.75\t"quoted, never closed\n'
        "scored\tscored.csv\t0.5\tthe model the quote used to swallow\n"
    )
    config = zoo(tmp_path, sheet)
    specs = load_model_sheet(tmp_path / "models.tsv", SCHEMAS / "models.schema.yaml")
    assert [(m.model, m.description) for m in specs] == [
        ("exact", '"quoted, never closed'),
        ("scored", "the model the quote used to swallow"),
    ]
    # Each model's metric rows (the report over them is tested elsewhere).
    targets = [f"results/my/metrics/{m}.parquet" for m in ("exact", "scored")]
    result = snakemake(tmp_path, *targets, "--configfile", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    tidy = pl.concat([pl.read_parquet(tmp_path / t) for t in targets])
    gold = {(d, c) for d, c in zip(GOLD["doc_id"], GOLD["code"], strict=True) if c}
    for model, threshold in (("exact", 0.75), ("scored", 0.5)):
        pred = {
            (d, c)
            for d, c, s in zip(SCORED["doc_id"], SCORED["code"], SCORED["score"], strict=True)
            if s >= threshold
        }
        for metric, expected in (("tp", gold & pred), ("fp", pred - gold), ("fn", gold - pred)):
            value = tidy.filter(
                (pl.col("model") == model)
                & (pl.col("family") == "flat")
                & (pl.col("average") == "micro")
                & (pl.col("metric") == metric)
            )["value"].item()
            assert value == len(expected), (model, metric)


def test_bom_is_stripped_from_the_sheet(tmp_path):
    path = tmp_path / "models.tsv"
    path.write_bytes(b"\xef\xbb\xbfmodel\tpredictions\nm1\tp.csv\n")
    [spec] = load_model_sheet(path, SCHEMAS / "models.schema.yaml")
    assert (spec.model, spec.predictions) == ("m1", "p.csv")


def test_latin1_sheet_names_the_line(tmp_path):
    sheet = "model\tpredictions\tdescription\nscored\tscored.csv\tcaf\xe9\n".encode("latin-1")
    config = zoo(tmp_path, sheet)
    refused(
        tmp_path,
        config,
        "models.tsv, line 2: not UTF-8 (byte 0xe9)",
        "save the sheet as UTF-8",
        through_snakemake=True,
    )


# 3. Braces in paths were expanded as Snakemake wildcards (p{model}.csv read pm.csv).


def test_braces_in_a_sheet_path_are_refused(tmp_path):
    config = zoo(tmp_path, "model\tpredictions\nm\tp{model}.csv\n")
    pl.DataFrame(SCORED).write_csv(tmp_path / "pm.csv")  # what the wildcard would have read
    refused(
        tmp_path,
        config,
        "models.tsv, line 2, column 'predictions'",
        "'p{model}.csv' contains { or }",
    )


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("gold", "'g{x}.csv'", "config key 'gold': path 'g{x}.csv' contains { or }"),
        ("gold_code_list", "'c}.txt'", "config key 'gold_code_list': path 'c}.txt'"),
        ("models", "'m{1}.tsv'", "config key 'models': path 'm{1}.tsv'"),
        (
            "hierarchy",
            "{source: file, path: 't{x}.csv'}",
            "config key 'hierarchy.path': path 't{x}.csv'",
        ),
    ],
)
def test_braces_in_a_config_path_are_refused(tmp_path, key, value, shown):
    config = zoo(tmp_path, **{key: value})
    refused(tmp_path, config, shown, "wildcard")


# 4. Non-finite ICM and propensity weights gave NaN/inf metrics with exit 0.


@pytest.mark.parametrize(("flag", "value"), [("--icm-beta", "nan"), ("--icm-alpha1", "inf")])
def test_non_finite_icm_weight_on_the_command_line_is_refused(tmp_path, capsys, flag, value):
    (tmp_path / "gold.csv").write_text("doc_id,code\nd1,401.9\n")
    out = tmp_path / "out"
    argv = ["evaluate", "--gold", str(tmp_path / "gold.csv"), "--pred"]
    argv += [f"m={tmp_path / 'gold.csv'}", "--out", str(out), flag, value]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"{flag}: expected a finite number, got {value!r}" in err
    assert "Traceback" not in err
    assert not out.exists()


def test_non_finite_icm_and_propensity_in_config_are_refused(tmp_path):
    config = zoo(
        tmp_path,
        icm="{alpha1: .inf, beta: .nan}",
        comparison="{propensity_a: .nan, propensity_b: -.inf}",
    )
    err = refused(
        tmp_path,
        config,
        "config key 'icm.alpha1': inf is not a finite number",
        "config key 'icm.beta': nan is not a finite number",
        "config key 'comparison.propensity_a': nan is not a finite number",
        "config key 'comparison.propensity_b': -inf is not a finite number",
    )
    assert err.count("config key") == 4


@pytest.mark.parametrize("name", ["alpha1", "alpha2", "beta", "propensity_a", "propensity_b"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_library_refuses_non_finite_icm_parameters(name, value):
    with pytest.raises(ValueError, match=f"icm {name} must be a finite number"):
        IcmParams(**{name: value})


# 5. A schema violation printed ~280 lines of schema.


def test_config_errors_one_line_each_no_schema_dump(tmp_path):
    config = zoo(tmp_path, icm="{beta: x}", unknown_codes="ignore", shards="0", colour="blue")
    err = refused(
        tmp_path,
        config,
        "config key 'icm.beta': 'x' is not of type 'number'",
        "config key 'unknown_codes': 'ignore' is not one of ['error', 'place', 'drop', 'count']",
        "config key 'shards': 0 is less than the minimum of 1",
        "config key 'colour' is unknown",
    )
    assert err.count("config key") == 4
    assert "$schema" not in err and "description" not in err
    assert len(err.splitlines()) < 15, err


def test_validation_fills_defaults_like_snakemake():
    """validate_config fills the schema's defaults (nested ones too), as snakemake's
    validate(set_default=True) did, so every rule finds its keys."""
    from hieval.config import validate_config

    config = {"gold": "g.csv", "icm": {"beta": 4}}
    validate_config(config, SCHEMAS / "config.schema.yaml")
    assert config["icm"] == {"alpha1": 2, "alpha2": 2, "beta": 4, "empty_gold": "keep"}
    assert config["hierarchy"] == {"source": "package", "path": None, "sha256": None}
    assert config["engine"] == {"memory_limit": None, "temp_directory": None}
    assert config["threshold"] == 0.5 and config["max_level"] is None
    # The schema's own default objects are copied, never shared between configs.
    other = {"gold": "g.csv"}
    validate_config(other, SCHEMAS / "config.schema.yaml")
    other["hierarchy"]["source"] = "cms"
    again = validate_config({"gold": "g.csv"}, SCHEMAS / "config.schema.yaml")
    assert again["hierarchy"]["source"] == "package"


# 6. memory_limit: a DuckDB parser error, or an out-of-memory error deep in normalisation.


@pytest.mark.parametrize("limit", ["lots", "1000", "1.2.3GB", "80%"])
def test_memory_limit_syntax_is_checked_at_parse_time(tmp_path, limit):
    config = zoo(tmp_path, engine=f"{{memory_limit: '{limit}'}}")
    refused(
        tmp_path,
        config,
        f"config key 'engine.memory_limit': '{limit}' is not a size such as 2GB",
    )


def test_library_engine_refuses_a_bad_memory_limit():
    with pytest.raises(HievalError, match=r"engine\.memory_limit 'lots' is not a size"):
        Resources(memory_limit="lots")


def test_out_of_memory_in_normalisation_says_what_to_raise(tmp_path):
    config = zoo(tmp_path, engine="{memory_limit: 1MB}")
    result = snakemake(tmp_path, "--configfile", str(config))
    assert result.returncode != 0
    log = (tmp_path / "logs/my/inputs/gold.log").read_text()
    assert "gold: DuckDB ran out of memory normalising gold.csv" in log
    assert "under engine.memory_limit 1MB; raise engine.memory_limit, to about" in log
    assert "Traceback" not in log and "Possible solutions" not in log
    assert not (tmp_path / "results/my/inputs/gold.parquet").exists()
    assert not (tmp_path / "results/my/report").exists()


def test_out_of_memory_estimate_is_enough(tmp_path):
    """The advised limit is one that works for that file (a 2.6 MB CSV)."""
    from hieval.pipeline import build_hierarchy

    levels = tmp_path / "levels.parquet"
    build_hierarchy("package", None, levels_out=levels, ancestors_out=tmp_path / "anc.parquet")
    codes = ["401.9", "364.11", "96.04", "250.00", "428.0"]
    rows = 200_000
    pl.DataFrame(
        {"doc_id": [f"d{i // 5}" for i in range(rows)], "code": [codes[i % 5] for i in range(rows)]}
    ).write_csv(tmp_path / "gold.csv")

    def run(limit: str):
        return normalize_file(
            NormalizeJob(
                path=tmp_path / "gold.csv",
                name="gold",
                role="gold",
                out=tmp_path / "gold.parquet",
                record_out=tmp_path / "gold.json",
                levels_file=levels,
                options=LabelOptions(),
                unknown_codes="place",
                resources=Resources(memory_limit=limit),
            )
        )

    with pytest.raises(HievalError, match="ran out of memory") as info:
        run("4MB")
    advised = re.search(r"to about (\d+MB)", str(info.value)).group(1)
    assert "\n" not in str(info.value)
    assert run(advised).labels == rows


# 7. An impossible max_level was caught in the count job, after normalisation.


def test_bad_max_level_for_icd9_fails_at_parse_time(tmp_path):
    config = zoo(tmp_path, max_level="block")
    refused(
        tmp_path,
        config,
        "config key 'max_level': 'block' is not a level of the ICD-9 hierarchy",
        "e2, e1, e0, c, chapter",
    )


def test_bad_max_level_for_own_tree_fails_before_normalisation(tmp_path):
    (tmp_path / "tree.csv").write_text("child,parent\nX,R\nY,R\nx1,X\ny1,Y\n")
    config = zoo(tmp_path, max_level="d5", hierarchy="{source: file, path: tree.csv}")
    result = snakemake(tmp_path, "--configfile", str(config))
    assert result.returncode != 0
    log = (tmp_path / "logs/my/hierarchy/build_levels.log").read_text()
    assert "max_level 'd5' is not a level of this hierarchy; choose one of ('d2', 'd1')" in log
    assert "Traceback" not in log
    assert not (tmp_path / "results/my/inputs").exists()
    assert not (tmp_path / "results/my/counts").exists()
    assert not (tmp_path / "results/my/hierarchy/levels.parquet").exists()


def test_max_level_syntax_for_own_tree_fails_at_parse_time(tmp_path):
    (tmp_path / "tree.csv").write_text("child,parent\nX,R\nx1,X\n")
    config = zoo(tmp_path, max_level="c", hierarchy="{source: file, path: tree.csv}")
    refused(tmp_path, config, "config key 'max_level': 'c' is not a level of an edge-list tree")


# 8. Model names: one rule for the sheet and the command line, `gold` reserved.


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (".", "may only use letters, digits"),
        ("..", "may only use letters, digits"),
        ("gold", "model name 'gold' is reserved"),
        ("a/b", "may only use letters, digits"),
    ],
)
def test_bad_model_name_on_the_command_line(tmp_path, capsys, name, message):
    (tmp_path / "gold.csv").write_text("doc_id,code\nd1,401.9\n")
    out = tmp_path / "out"
    argv = ["evaluate", "--gold", str(tmp_path / "gold.csv"), "--pred"]
    argv += [f"{name}={tmp_path / 'gold.csv'}", "--out", str(out)]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("name", "message"), [("gold", "is reserved"), ("..", "must start with a letter or digit")]
)
def test_bad_model_name_in_the_sheet(tmp_path, name, message):
    config = zoo(tmp_path, f"model\tpredictions\n{name}\tscored.csv\n")
    refused(tmp_path, config, "models.tsv, line 2, column 'model'", f"{name!r}", message)


def test_schema_name_pattern_is_the_library_rule():
    schema = yaml.safe_load((SCHEMAS / "models.schema.yaml").read_text("utf-8"))
    assert schema["properties"]["model"]["pattern"] == MODEL_NAME_PATTERN
    for name in ["m", "bert-base_1.2+x", "Gold", "gold2", ".", "..", ".m", "gold", "a b", "é", ""]:
        in_schema = re.search(MODEL_NAME_PATTERN, name) is not None
        try:
            check_model_name(name)
            in_library = True
        except InputError:
            in_library = False
        assert in_schema == in_library, name
