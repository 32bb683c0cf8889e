"""Obtain the label hierarchy and build its level tables (results/hierarchy/)."""


localrules:
    fetch_hierarchy,


rule fetch_hierarchy:
    output:
        "resources/hierarchy/{source}/{filename}",
    log:
        logs("hierarchy/fetch_{source}_{filename}.log"),
    conda:
        "../envs/hieval.yaml"
    params:
        sha256=download_pin,
    script:
        "../../scripts/fetch_hierarchy.py"


rule build_levels:
    input:
        unpack(hierarchy_source),
    output:
        levels=LEVELS,
        ancestors=ANCESTORS,
    log:
        logs("hierarchy/build_levels.log"),
    conda:
        "../envs/hieval.yaml"
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        hieval=HIEVAL_CODE,
        source=HIERARCHY["source"],
        sha256=hierarchy_pin,
        # the ICD-10 tree is built once per machine there (hieval evaluate --cache finds it too)
        cache_dir=ICD10_CACHE,
        # the ICD-9 sources' built tables, shared with hieval evaluate's default --cache
        tables_cache="resources/hierarchy/built",
    script:
        "../../scripts/build_levels.py"


rule hierarchy:
    input:
        rules.build_levels.output,
