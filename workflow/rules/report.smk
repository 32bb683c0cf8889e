"""The reports over all models (results/report/) in one job — the tables (metrics, summary),
then the HTML report, the paper tables, the figures and the zoo's history — and the CoPHE
paper's Table 1 (results/paper/)."""


localrules:
    report,
    paper_table1,


rule report:
    input:
        unpack(uncertainty_files),
        unpack(train_gold_input),
        unpack(group_files),
        metrics=expand(results("metrics/{model}.parquet"), model=MODEL_NAMES),
        ranking=expand(results("ranking/{model}.parquet"), model=MODEL_NAMES),
        notes=expand(results("ranking/{model}.json"), model=MODEL_NAMES),
        conventions=results("report/conventions.parquet"),
        conventions_tests=results("report/conventions_tests.parquet"),
        records=[
            results("inputs/gold.json"),
            *expand(results("inputs/predictions/{model}.json"), model=MODEL_NAMES),
        ],
        levels=LEVELS,
        nodes=expand(results("counts/{model}/nodes.parquet"), model=MODEL_NAMES),
        # not read: named so the job knows every file of this run in results/report, and
        # removes what an earlier configuration left there (hieval.reports.leftovers)
        nodes_csv=expand(results("report/nodes/{model}.csv"), model=MODEL_NAMES),
        # each model's error distance rows, gathered here into report/errors.parquet (a job
        # of its own cost a process start for a concatenation)
        errors=expand(results("errors/{model}.parquet"), model=MODEL_NAMES),
        confusions=expand(
            results("report/confusions/{model}.parquet"), model=MODEL_NAMES
        ),
        codes=expand(results("report/codes/{model}.parquet"), model=MODEL_NAMES),
        curves=expand(results("thresholds/{model}.parquet"), model=TUNED),
    output:
        # mean and sd over each system's runs, when the sheet has a `system` column
        **systems_output(),
        metrics=results("report/metrics.parquet"),
        errors=results("report/errors.parquet"),
        metrics_csv=results("report/metrics.csv"),
        summary=results("report/summary.csv"),
        summary_md=results("report/summary.md"),
        html=report(
            results("report/report.html"),
            caption="../report/report_html.rst",
            category="Report",
        ),
        tex=report(
            results("report/tables.tex"),
            caption="../report/tables.rst",
            category="Tables",
        ),
        markdown=report(
            results("report/tables.md"),
            caption="../report/tables.rst",
            category="Tables",
        ),
        figures=report(
            directory(results("report/figures")),
            patterns=["{name}.svg"],
            caption="../report/figures.rst",
            category="Figures",
        ),
    log:
        logs("report/report.log"),
    conda:
        "../envs/hieval.yaml"
    params:
        hieval=HIEVAL_CODE,
        models=MODEL_NAMES,
        max_level=config["max_level"],
        hierarchy=hierarchy_label(),
        systems=SYSTEMS,
        settings=report_settings(),
        history=HISTORY,
        # the intervals' confidence, kept with them in the history
        confidence=config["uncertainty"]["confidence"] if UNCERTAINTY else None,
        tuned=TUNED,
        paper_table=config["report"]["paper_table"],
    script:
        "../../scripts/report.py"


rule paper_table1:
    input:
        levels=LEVELS,
    output:
        results("paper/table1.md"),
    log:
        logs("paper/table1.log"),
    conda:
        "../envs/hieval.yaml"
    params:
        hieval=HIEVAL_CODE,
    script:
        "../../scripts/paper_table1.py"
