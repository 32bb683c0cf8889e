"""Config and model-sheet validation, and every input function of the workflow."""

import json
import re
from dataclasses import asdict, replace
from pathlib import Path

from hieval.config import (
    code_fingerprint,
    gold_options as gold_label_options,
    icm_params as config_icm_params,
    load_workflow_config,
    other_gold_options as config_other_gold_options,
    report_settings as run_settings,
)
from hieval.codesystem import for_source
from hieval.experiments.demo import ICD10_FILES as DEMO_ICD10_FILES
from hieval.experiments.demo import MODELS as DEMO_MODELS
from hieval.experiments.demo import TUNED as DEMO_TUNED
from hieval.errors import HievalError
from hieval.hierarchy.sources import DOWNLOADS, describe
from hieval.layout import config_name, results_folder
from hieval.reports.history import check_history

SCHEMAS = Path(workflow.current_basedir).parent / "schemas"

# hieval's own validation, not snakemake.utils.validate: one line per violation naming its key
# (not the whole schema), finite numbers, literal paths, and max_level where it is known.
# Values given with --config are typed first: Snakemake keeps a nested one a string ("200").
try:
    MODELS = load_workflow_config(
        config, SCHEMAS, command_line=workflow.config_settings.config
    )
except HievalError as exc:
    raise WorkflowError(str(exc)) from None
MODEL_NAMES = list(MODELS)
# Each configuration writes under its own folder: results/ for config/config.yaml, else
# results/<name>/ (config key name, default the config file's stem; hieval.layout), and its
# logs under logs/<name>/ likewise, so a second configuration never overwrites the first.
try:
    CONFIG_NAME = config_name(config["name"], workflow.config_settings.configfiles)
except HievalError as exc:
    raise WorkflowError(str(exc)) from None
RESULTS = results_folder(CONFIG_NAME)
LOGS = "logs" if CONFIG_NAME is None else f"logs/{CONFIG_NAME}"


def results(path):
    """``path`` inside this configuration's results folder (RESULTS)."""
    return f"{RESULTS}/{path}"


def logs(path):
    """``path`` inside this configuration's log folder (LOGS)."""
    return f"{LOGS}/{path}"


# Models whose threshold is tuned on their dev predictions (threshold tune, sheet or config).
TUNED = [name for name, spec in MODELS.items() if spec.tunes(config["threshold"])]
# More than one shard: each model's stages are jobs of their own (workflow/rules/evaluate.smk).
SHARDED = config["shards"] > 1
HIERARCHY = config["hierarchy"]
# The code system the hierarchy implies (icd9, icd10, verbatim): the paper's Table 1 is ICD-9's.
CODE_SYSTEM = for_source(HIERARCHY["source"]).name
ICD10_CACHE = "resources/hierarchy/icd10"

# Snakemake tracks a rule's own script, not the library it imports: a fingerprint of the hieval
# sources, passed as a param to every rule that computes numbers, reruns them when it changes.
HIEVAL_CODE = code_fingerprint()

LEVELS = results("hierarchy/levels.parquet")
# The zoo's history accumulates across runs, so it is no rule's output (Snakemake would delete
# it before the rule runs); the report rule adds this run's new evaluations to it. It is the
# one store every configuration shares: it keys evaluations by gold, code system, hierarchy
# and settings (hieval.reports.history), so histories of different gold sets never mix.
HISTORY = "results/history/evaluations.parquet"
# Checked now, before any job: Snakemake deletes the report rule's outputs before it runs, so
# a damaged, foreign or unwritable history found by the job itself would cost the report.
try:
    check_history(HISTORY)
except HievalError as exc:
    raise WorkflowError(str(exc)) from None
ANCESTORS = results("hierarchy/ancestors.parquet")


wildcard_constraints:
    model="|".join(map(re.escape, MODEL_NAMES)),
    source="|".join(DOWNLOADS),


def hierarchy_source(wildcards):
    """The file the hierarchy is built from: a pinned download, the user's tree, or none."""
    source = HIERARCHY["source"]
    if source in DOWNLOADS:
        return {"source": f"resources/hierarchy/{source}/{DOWNLOADS[source].filename}"}
    if source == "file":
        return {"source": HIERARCHY["path"]}
    return {}


def hierarchy_pin(wildcards):
    """The sha256 a cached download must still match (the cophe pin, or the user's own)."""
    source = HIERARCHY["source"]
    if source not in DOWNLOADS:
        return None
    return HIERARCHY["sha256"] or DOWNLOADS[source].sha256


def download_pin(wildcards):
    """The sha256 of the download being fetched."""
    return HIERARCHY["sha256"] if wildcards.source == "cms" else None


def model_files(wildcards):
    """The files of one model, from the sheet: predictions and any code/document lists."""
    return MODELS[wildcards.model].files()


def gold_files(wildcards):
    """The gold file and any code/document lists it needs."""
    named = {
        "labels": config["gold"],  # one file, or a list of files whose rows are pooled
        "code_list": config["gold_code_list"],
        "doc_list": config["gold_doc_list"],
    }
    return {k: v for k, v in named.items() if v}


def model_options(wildcards):
    """How to read one model's prediction file (format, code format, threshold, top-k).

    A JSON string, not the dataclass or a dict: Snakemake records only string and number
    parameters, and a recorded change (a new threshold) is what makes it rerun the model.
    """
    return json.dumps(asdict(MODELS[wildcards.model].options()), sort_keys=True)


def gold_options():
    """How to read the gold file (a JSON string, see model_options)."""
    return json.dumps(asdict(gold_label_options(config)), sort_keys=True)


def icm_params():
    """ICM and propensity parameters as a JSON string (recorded, so changes rerun the jobs)."""
    return json.dumps(asdict(config_icm_params(config)), sort_keys=True)


def hierarchy_label():
    """A human-readable name of the hierarchy for reports."""
    return describe(HIERARCHY["source"], HIERARCHY["path"])


def group_files(wildcards):
    """The subgroup tables, when config ``doc_groups`` names a table of document attributes."""
    return (
        {
            "groups": results("report/groups.parquet"),
            "group_gaps": results("report/group_gaps.parquet"),
        }
        if config["doc_groups"]
        else {}
    )


def train_gold_input(wildcards):
    """The normalised training gold, when config ``train_gold`` names one (long-tail bins,
    the propensity-scored ranking rows)."""
    return (
        {"train_gold": results("inputs/train_gold.parquet")}
        if config["train_gold"]
        else {}
    )


def report_settings():
    """The settings that change numbers (hieval.config.report_settings) as a JSON string;
    a tuned model's own settings hold the tuning's too (the history keys evaluations by them),
    so that tuning one model, or no longer tuning it, leaves the other models' keys alone.
    """
    options = {name: spec.options() for name, spec in MODELS.items()}
    settings = run_settings(config, options)
    for name in TUNED:
        settings["models"][name]["tuning"] = config["tuning"]
    return json.dumps(settings, sort_keys=True)


# Runs of one system (the sheet's optional `system` column), as a JSON string (recorded).
SYSTEMS = json.dumps(
    {name: spec.system for name, spec in MODELS.items() if spec.system}, sort_keys=True
)
UNCERTAINTY = config["uncertainty"]["bootstrap"] > 0


def systems_output():
    """systems.parquet and conventions_systems.parquet (each convention's mean and sd with its
    paper's ddof), when the sheet groups models into systems (its `system` column)."""
    if not json.loads(SYSTEMS):
        return {}
    return {
        "systems": results("report/systems.parquet"),
        "conventions_systems": results("report/conventions_systems.parquet"),
    }


def uncertainty_files(wildcards):
    """The intervals and comparisons the report reads, when the bootstrap is on."""
    if not UNCERTAINTY:
        return {}
    return {
        "intervals": results("report/intervals.parquet"),
        "comparisons": results("report/comparisons.parquet"),
        "replicates": results("report/replicates.parquet"),
    }


def tuned_files(wildcards):
    """The tuned thresholds a model's decisions need (none unless it tunes)."""
    if wildcards.model not in TUNED:
        return {}
    return {
        "tuned": results(f"thresholds/{wildcards.model}.json"),
        "tuned_codes": results(f"thresholds/{wildcards.model}.codes.parquet"),
    }


def dev_model_files(wildcards):
    """A tuned model's dev predictions (read like its predictions, lists aside)."""
    return {"labels": MODELS[wildcards.model].dev_predictions}


def dev_model_options(wildcards):
    """How to read a model's dev predictions: as its predictions, without threshold/top-k
    (tuning sees every score) and without its test code/document lists."""
    options = MODELS[wildcards.model].options()
    return json.dumps(
        asdict(
            replace(options, threshold=None, top_k=None, code_list=None, doc_list=None)
        ),
        sort_keys=True,
    )


def other_gold_options():
    """How to read the dev and the train gold: the gold's options, without its code/document
    lists (hieval.config.other_gold_options)."""
    return json.dumps(asdict(config_other_gold_options(config)), sort_keys=True)


# The label space of the caml and edin conventions, by model (sheet column label_space).
LABEL_SPACES = {
    name: spec.label_space for name, spec in MODELS.items() if spec.label_space
}


def convention_selections():
    """Each model's own threshold (a number, else None) and top_k as a JSON string: with the
    config's threshold they tell the threshold its decisions used (Edin et al. decide
    ``score > threshold``)."""
    return json.dumps(
        {
            name: [
                spec.threshold if isinstance(spec.threshold, (int, float)) else None,
                spec.top_k,
            ]
            for name, spec in MODELS.items()
        },
        sort_keys=True,
    )
