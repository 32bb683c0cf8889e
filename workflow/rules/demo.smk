"""The embedded synthetic demos: a seeded test set and model zoo (results/demo/), and its ICD-10
twin written as MIMIC-IV tables (results/demo_icd10/, config/test/icd10.yaml)."""


rule demo_data:
    input:
        levels=LEVELS,
    output:
        gold="results/demo/gold.parquet",
        predictions=expand(
            "results/demo/predictions/{model}.parquet", model=DEMO_MODELS
        ),
        dev_gold="results/demo/dev/gold.parquet",
        dev_predictions=expand(
            "results/demo/dev/predictions/{model}.parquet", model=DEMO_TUNED
        ),
    log:
        "logs/demo/demo_data.log",
    conda:
        "../envs/hieval.yaml"
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        hieval=HIEVAL_CODE,
        seed=config["demo"]["seed"],
        documents=config["demo"]["documents"],
    script:
        "../../scripts/demo_data.py"


rule demo_icd10_data:
    input:
        levels=LEVELS,
    output:
        diagnoses="results/demo_icd10/diagnoses_icd.csv.gz",
        procedures="results/demo_icd10/procedures_icd.csv.gz",
        predictions=[
            f"results/demo_icd10/predictions/{name}"
            for name in DEMO_ICD10_FILES.values()
        ],
    log:
        "logs/demo/demo_icd10_data.log",
    conda:
        "../envs/hieval.yaml"
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        hieval=HIEVAL_CODE,
        seed=config["demo"]["seed"],
        documents=config["demo"]["documents"],
    script:
        "../../scripts/demo_icd10_data.py"
