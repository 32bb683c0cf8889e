"""Per-model evaluation. With `shards: 1` (the default) one job per model runs every stage
from its prediction file to its metric rows (`evaluate_model`: normalise, count, metrics,
scores), so a Python interpreter starts once per model; with `shards: N` documents are split
into N shards, each shard is counted by its own job, the additive counts are gathered exactly,
then the metrics are computed (each stage a job of its own, as a cluster wants)."""

if not SHARDED:

    rule evaluate_model:
        input:
            unpack(model_files),
            unpack(tuned_files),
            unpack(train_gold_input),
            levels=LEVELS,
            ancestors=ANCESTORS,
            gold=results("inputs/gold.parquet"),
        output:
            labels=results("inputs/predictions/{model}.parquet"),
            record=results("inputs/predictions/{model}.json"),
            scores=results("inputs/scores/{model}.parquet"),
            nodes=results("counts/{model}/nodes.parquet"),
            docs=results("counts/{model}/docs.parquet"),
            item_sums=results("counts/{model}/item_sums.parquet"),
            metrics=results("metrics/{model}.parquet"),
            nodes_report=results("report/nodes/{model}.csv"),
            ranking=results("ranking/{model}.parquet"),
            notes=results("ranking/{model}.json"),
        log:
            logs("models/{model}.log"),
        conda:
            "../envs/hieval.yaml"
        threads: threads_by("labels")
        resources:
            mem_mb=model_mem_mb,
            runtime=runtime,
        params:
            hieval=HIEVAL_CODE,
            options=model_options,
            unknown_codes=config["unknown_codes"],
            malformed_codes=config["malformed_codes"],
            unknown_docs=config["unknown_docs"],
            threshold=config["threshold"],
            max_level=config["max_level"],
            icm=icm_params(),
            label_set=config["comparison"]["label_set"],
            ks=sorted(config["ranking"]["k"]),
        script:
            "../../scripts/evaluate_model.py"


if SHARDED:

    scattergather:
        split=config["shards"],

    rule split_gold:
        input:
            results("inputs/gold.parquet"),
        output:
            scatter.split(results("shards/gold/{scatteritem}.parquet")),
        log:
            logs("shards/gold.log"),
        conda:
            "../envs/hieval.yaml"
        resources:
            mem_mb=mem_mb,
            runtime=runtime,
        params:
            hieval=HIEVAL_CODE,
        script:
            "../../scripts/split_shards.py"

    rule split_predictions:
        input:
            results("inputs/predictions/{model}.parquet"),
        output:
            scatter.split(results("shards/predictions/{{model}}/{scatteritem}.parquet")),
        log:
            logs("shards/{model}.log"),
        conda:
            "../envs/hieval.yaml"
        resources:
            mem_mb=mem_mb,
            runtime=runtime,
        params:
            hieval=HIEVAL_CODE,
        script:
            "../../scripts/split_shards.py"

    rule icm_weights:
        input:
            gold=results("inputs/gold.parquet"),
            predictions=results("inputs/predictions/{model}.parquet"),
            levels=LEVELS,
            ancestors=ANCESTORS,
        output:
            results("counts/{model}/icm_weights.parquet"),
        log:
            logs("counts/{model}/icm_weights.log"),
        conda:
            "../envs/hieval.yaml"
        resources:
            mem_mb=mem_mb,
            runtime=runtime,
        params:
            icm=icm_params(),
            hieval=HIEVAL_CODE,
        script:
            "../../scripts/icm_weights.py"

    rule count:
        input:
            gold=results("shards/gold/{scatteritem}.parquet"),
            predictions=results("shards/predictions/{model}/{scatteritem}.parquet"),
            weights=results("counts/{model}/icm_weights.parquet"),
            levels=LEVELS,
            ancestors=ANCESTORS,
        output:
            nodes=results("counts/{model}/shards/{scatteritem}/nodes.parquet"),
            docs=results("counts/{model}/shards/{scatteritem}/docs.parquet"),
            item_sums=results("counts/{model}/shards/{scatteritem}/item_sums.parquet"),
        log:
            logs("counts/{model}/{scatteritem}.log"),
        conda:
            "../envs/hieval.yaml"
        threads: threads_by("predictions")
        resources:
            mem_mb=count_mem_mb,
            runtime=runtime,
        params:
            max_level=config["max_level"],
            icm=icm_params(),
            hieval=HIEVAL_CODE,
        script:
            "../../scripts/count.py"

    rule gather_counts:
        input:
            nodes=gather.split(
                results("counts/{{model}}/shards/{scatteritem}/nodes.parquet")
            ),
            docs=gather.split(
                results("counts/{{model}}/shards/{scatteritem}/docs.parquet")
            ),
            item_sums=gather.split(
                results("counts/{{model}}/shards/{scatteritem}/item_sums.parquet")
            ),
        output:
            nodes=results("counts/{model}/nodes.parquet"),
            docs=results("counts/{model}/docs.parquet"),
            item_sums=results("counts/{model}/item_sums.parquet"),
        log:
            logs("counts/{model}/gather.log"),
        conda:
            "../envs/hieval.yaml"
        resources:
            mem_mb=mem_mb,
            runtime=runtime,
        params:
            hieval=HIEVAL_CODE,
        script:
            "../../scripts/gather_counts.py"

    rule metrics:
        input:
            nodes=results("counts/{model}/nodes.parquet"),
            docs=results("counts/{model}/docs.parquet"),
            item_sums=results("counts/{model}/item_sums.parquet"),
            levels=LEVELS,
        output:
            metrics=results("metrics/{model}.parquet"),
            nodes_report=results("report/nodes/{model}.csv"),
        log:
            logs("metrics/{model}.log"),
        conda:
            "../envs/hieval.yaml"
        resources:
            mem_mb=mem_mb,
            runtime=runtime,
        params:
            icm=icm_params(),
            label_set=config["comparison"]["label_set"],
            hieval=HIEVAL_CODE,
        script:
            "../../scripts/metrics.py"
