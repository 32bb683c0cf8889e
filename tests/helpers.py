"""Helpers shared by the tests that run the workflow for real."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hieval.config import load_workflow_config
from hieval.errors import HievalError

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
#: ``snakemake`` as the workflow tests run it: the console script's entry point, in an
#: interpreter where ``import pandas`` fails, as in a README install, which has no pandas
#: (PyEvALL, a test oracle, brings it into the test environment). Snakemake imports pandas when
#: it is installed, to store a script job's params: 0.3 s of CPU in each of the suite's ~60 runs.
#: The SLURM tests run the console script itself: the SLURM plugin needs pandas.
SNAKEMAKE_COMMAND = (
    sys.executable,
    "-c",
    "import sys; sys.modules['pandas'] = None; sys.argv[0] = 'snakemake'; "
    "from snakemake.cli import main; sys.exit(main())",
)
SCHEMAS = REPO / "workflow" / "schemas"
#: Set by .ci/run: SLURM tests fail instead of skipping when SLURM or its plugin is missing.
REQUIRE_SLURM = os.environ.get("HIEVAL_REQUIRE_SLURM") == "1"


def slurm_plugin_env() -> dict[str, str]:
    """The environment in which Snakemake finds the SLURM executor plugin, for the tests that
    run the SLURM profile; skips (fails under ``HIEVAL_REQUIRE_SLURM=1``) without the plugin.

    The plugin is not in the test extra: Snakemake imports every installed executor plugin at
    each start, so it would slow every other workflow test. It comes from the folder named by
    ``HIEVAL_SLURM_PLUGIN_PATH`` (``pip install --no-deps --target``: .ci/run fills one), put on
    ``PYTHONPATH`` here and so for the batch jobs too, or from the environment
    (``pip install -e ".[slurm]"``).
    """
    env = dict(os.environ)
    folder = os.environ.get("HIEVAL_SLURM_PLUGIN_PATH")
    if folder:
        if not (Path(folder) / "snakemake_executor_plugin_slurm").is_dir():
            pytest.fail(f"HIEVAL_SLURM_PLUGIN_PATH={folder} holds no SLURM executor plugin")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (folder, env.get("PYTHONPATH"))))
    elif importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        reason = (
            "the SLURM executor plugin is not installed: pip install -e '.[slurm]', or set "
            "HIEVAL_SLURM_PLUGIN_PATH to a folder holding it"
        )
        if REQUIRE_SLURM:
            pytest.fail(reason)
        pytest.skip(reason)
    return env


_BUILT: list[Path] = []  # the package ICD-9 tables of this test process, built on first use
BUILT_CACHE = Path("resources/hierarchy/built")  # where the workflow caches built tables


def prebuilt_tables() -> Path:
    """A tables cache (``resources/hierarchy/built``) holding the package ICD-9 tables, built
    once per test process by the workflow's own call (:func:`hieval.pipeline.build_hierarchy`):
    every workflow test's fresh folder would otherwise build them again (0.5 s of CPU each,
    some twenty times per suite)."""
    if not _BUILT:
        import tempfile

        from hieval.pipeline import build_hierarchy

        folder = Path(tempfile.mkdtemp(prefix="hieval-tests-built-"))
        build_hierarchy(
            "package",
            None,
            levels_out=folder / "levels.parquet",
            ancestors_out=folder / "ancestors.parquet",
            tables_cache=folder / "built",
        )
        _BUILT.append(folder / "built")
    return _BUILT[0]


def snakemake(
    workdir: Path, *args: str, quiet: bool = True, prebuilt: bool = True
) -> subprocess.CompletedProcess:
    """Run the repository's Snakefile in ``workdir`` (never in the checkout); with
    ``prebuilt``, a folder without a tables cache gets the process's built ICD-9 tables (as
    a machine that ran the workflow before has them)."""
    if prebuilt and not (workdir / BUILT_CACHE).exists():
        shutil.copytree(prebuilt_tables(), workdir / BUILT_CACHE)
    return subprocess.run(
        # --quiet takes several values, so it goes last, after any target in ``args``.
        [
            *SNAKEMAKE_COMMAND,
            *args,
            "-s",
            str(REPO / "Snakefile"),
            "-d",
            str(workdir),
            "--cores",
            "2",
            *(["--quiet", "progress", "rules", "host"] if quiet else []),
        ],
        capture_output=True,
        text=True,
        cwd=workdir,
        timeout=300,
    )


def copy_run(finished: Path, workdir: Path) -> Path:
    """A copy of a finished workflow run (inputs, results and Snakemake's metadata, with their
    times), so a test can change it and see what Snakemake reruns without running it all again.
    """
    shutil.copytree(finished, workdir, symlinks=True, dirs_exist_ok=True)
    return workdir


def small_demo_config(
    workdir: Path,
    documents: int = 300,
    models: tuple[str, ...] | None = None,
    *,
    plain: bool = False,
) -> None:
    """The shipped config/ in ``workdir``, with a smaller demo (the default target runs it);
    ``models`` keeps only those rows of the model sheet. ``plain``: no threshold tuning and
    no bootstrap (the demo's tuned model keeps the default threshold), for tests of the
    orchestration that need none of it."""
    shutil.copytree(REPO / "config", workdir / "config")
    config = workdir / "config" / "config.yaml"
    text = config.read_text()
    assert "documents: 1000" in text
    text = text.replace("documents: 1000", f"documents: {documents}")
    sheet = workdir / "config" / "models.tsv"
    header, *rows = sheet.read_text().splitlines(keepends=True)
    if plain:
        demo = workdir / "config" / "demo.yaml"
        assert "  bootstrap: 200\n" in demo.read_text() and "\ttune\t" in "".join(rows)
        demo.write_text(demo.read_text().replace("  bootstrap: 200\n", "  bootstrap: 0\n"))
        rows = [_untuned(row) for row in rows]
    config.write_text(text)
    if models is not None:
        rows = [row for row in rows if row.split("\t", 1)[0] in models]
        assert len(rows) == len(models), f"{models} are not all demo models"
    sheet.write_text(header + "".join(rows))


def _untuned(row: str) -> str:
    """A model sheet row (model, predictions, threshold, top_k, dev_predictions, ...) without
    its tuning: no threshold of its own, no dev predictions."""
    fields = row.split("\t")
    if fields[2] == "tune":
        fields[2] = fields[4] = ""
    return "\t".join(fields)


def parse_time_refusal(workdir: Path, config: Path) -> str:
    """The message the workflow stops with before any job, for ``snakemake --configfile
    CONFIG`` in ``workdir``: the check ``common.smk`` runs (``load_workflow_config``), called
    in-process on the config as Snakemake reads it (YAML). Tests that run Snakemake itself on
    such a config (tests/test_workflow.py, tests/test_bad_config.py) show that this message is
    what the user sees, alone, with a non-zero exit and nothing written."""
    settings = yaml.safe_load(config.read_text("utf-8")) or {}
    with contextlib.chdir(workdir):
        try:
            load_workflow_config(settings, SCHEMAS)
        except HievalError as exc:
            return str(exc)
    raise AssertionError(f"{config} was accepted")
