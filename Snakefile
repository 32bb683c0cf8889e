"""hieval: evaluate a zoo of hierarchical multi-label classifiers (ICD-9 and ICD-10 coding, any
taxonomy) with flat, set-based and count-preserving hierarchical (CoPHE) metrics.

Run `snakemake --cores all` for the embedded demo, or
`snakemake -s PATH/Snakefile -d WORKDIR --configfile my.yaml --cores N` for your own zoo.
"""

from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


# The demo's own settings, between config.yaml and the command line's (config/demo.yaml).
if config.get("gold") == "results/demo/gold.parquet":

    configfile: "config/demo.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/resources.smk"
include: "workflow/rules/hierarchy.smk"
include: "workflow/rules/demo.smk"
include: "workflow/rules/inputs.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/scores.smk"
include: "workflow/rules/conventions.smk"
include: "workflow/rules/analysis.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/uncertainty.smk"
include: "workflow/rules/meta.smk"


# A SLURM run whose job states can never be read stops here, before submitting anything.
onstart:
    check_slurm_status_command()


# Snakemake exits as soon as the workflow is done, without waiting on its scheduler's timers.
onsuccess:
    stop_rate_limit_timers()


onerror:
    stop_rate_limit_timers()


rule all:
    default_target: True
    input:
        rules.report.output,
        expand(results("report/nodes/{model}.csv"), model=MODEL_NAMES),
        # the CoPHE paper's worked example is ICD-9: regenerated for ICD-9 evaluations only
        rules.paper_table1.output if CODE_SYSTEM == "icd9" else [],
