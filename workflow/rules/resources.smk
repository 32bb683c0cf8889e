"""What each job asks a scheduler for: memory and wall time from the sizes of its inputs.

Each submitted rule asks for `mem_mb` and `runtime` in its own `resources` block, so a profile's
or the command line's `--default-resources` (a site's partition and account) can never take
them away. Snakemake evaluates these functions again when a job is ready to run, with its
inputs on disk; a dry run, before the inputs exist, shows the floors. A retried job (the SLURM
profile's `retries`) asks for twice as much. And a SLURM run whose job states could never be
read stops before it submits anything, instead of waiting forever; and once the workflow is
done, Snakemake exits without waiting on its scheduler's timers.
"""

import math
import os
import shutil
import subprocess
import threading

from hieval.resources import BASE_BYTES, BYTES_PER_LABEL, BYTES_PER_THREAD, label_rows

MIB = 2**20
# Every job is a Python interpreter with polars, numpy and DuckDB loaded, inside Snakemake.
FLOOR_MB = 1000
# Queue granularity, and Snakemake's own start-up on a node (seconds each time).
FLOOR_MINUTES = 10


def existing(paths):
    """The paths among `paths` that exist (none of a job's inputs do in a dry run)."""
    return [path for path in paths if os.path.isfile(path)]


def input_mb(input):
    """Megabytes of a job's inputs on disk (those that exist)."""
    return sum(os.path.getsize(path) for path in existing(input)) / MIB


def round_mb(mb):
    """Up to the next 100 MB."""
    return int(math.ceil(mb / 100) * 100)


def mem_mb(wildcards, input, attempt):
    """Jobs that read their inputs through DuckDB or Polars: the floor plus five times their
    size on disk (CSV and Parquet expand in memory)."""
    return round_mb(FLOOR_MB + 5 * input_mb(input)) * attempt


def count_mem_mb(wildcards, input, threads, attempt):
    """A count job: the engine's own peak model (`hieval.pipeline`, the one
    `engine.memory_limit` is checked against) for the labels of its shard, plus the floor.
    """
    labels = sum(label_rows(path) for path in existing([input.gold, input.predictions]))
    need = BASE_BYTES + BYTES_PER_THREAD * threads + BYTES_PER_LABEL * labels
    return round_mb(FLOOR_MB + need / MIB) * attempt


def model_mem_mb(wildcards, input, threads, attempt):
    """A whole model's job (`shards: 1`): the larger of normalising its files (as `mem_mb`)
    and counting, where the predicted labels are estimated as many as the gold's (they are
    not normalised yet when the job is planned)."""
    gold = sum(label_rows(path) for path in existing([input.gold]))
    need = BASE_BYTES + BYTES_PER_THREAD * threads + BYTES_PER_LABEL * 2 * gold
    return (
        max(round_mb(FLOOR_MB + need / MIB), round_mb(FLOOR_MB + 5 * input_mb(input)))
        * attempt
    )


# A model's prediction file below this size is counted in one slice of labels (about a million):
# a second thread would wait, so its job takes one core and two such jobs run side by side.
SMALL_MODEL_MB = 10


def threads_by(name):
    """Threads of a job by the size of its input `name` (a model's prediction file, or a
    shard of it): 2 for a large file, 1 for a small one (a file not there yet, such as the
    demo's before it is generated, counts as small), so that on a 2-CPU node two small jobs run
    side by side. Threads never change a number."""

    def threads(wildcards, input):
        size = input_mb(existing([getattr(input, name)]))
        return 2 if size > SMALL_MODEL_MB else 1

    return threads


def runtime(wildcards, input, attempt):
    """Minutes: the floor plus one a 100 MB of input (normalising and counting run at several
    hundred MB a minute on one core)."""
    return (FLOOR_MINUTES + math.ceil(input_mb(input) / 100)) * attempt


def slurm_status_command(settings):
    """The command the SLURM plugin (2.8.0) will really read job states with: `squeue` is
    replaced by `sacct` when finished jobs leave squeue (MinJobAge) before three first status
    checks, and `sacct` by `squeue` where sacct is not installed."""
    command = getattr(settings, "status_command", None)
    if shutil.which("sacct") is None:
        return "squeue"
    if command == "squeue":
        from snakemake_executor_plugin_slurm.job_status_query import get_min_job_age

        age = get_min_job_age()
        first_check = getattr(settings, "init_seconds_before_status_checks", None) or 40
        if age is None or age < 3 * first_check:
            return "sacct"
    return command


def check_slurm_status_command():
    """Refuse a SLURM run that would wait forever: job states read with `sacct` on a cluster
    without an accounting database never arrive, and every finished job is taken for a
    running one."""
    plugin = workflow.executor_plugin
    if plugin is None or plugin.name != "slurm":
        return
    if slurm_status_command(workflow.executor_settings) != "sacct":
        return
    try:
        probe = subprocess.run(
            ["sacct", "--noheader", "-X", "--jobs", "1", "--format", "JobIdRaw"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        return  # slow, not broken: the plugin retries
    if probe.returncode != 0:
        raise WorkflowError(
            f"sacct cannot read SLURM job states here ({probe.stderr.strip()}), so Snakemake "
            "would wait forever for jobs that have finished. Without an accounting database, "
            "run with --slurm-status-command squeue, on a cluster whose MinJobAge is at least "
            "three times --slurm-init-seconds-before-status-checks (see docs/workflow.md, On a "
            "SLURM cluster)."
        )


def stop_rate_limit_timers():
    """Let Snakemake exit as soon as the workflow is done. Its scheduler re-checks the job rate
    limit (`--max-jobs-per-timespan`) on `threading.Timer`s that are not daemons, and Python
    waits for them at exit: up to a second after the last job, on every run, for timers whose
    only work is to wake a scheduler that has stopped. Only the scheduler's own timers are
    cancelled."""
    for thread in threading.enumerate():
        if isinstance(thread, threading.Timer) and getattr(
            thread.function, "__module__", ""
        ).startswith("snakemake.scheduling"):
            thread.cancel()
