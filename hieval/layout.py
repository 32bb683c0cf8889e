"""Where a configuration's results go: ``results/`` for the shipped ``config/config.yaml``,
``results/<name>/`` for every other configuration, so a second configuration (the ICD-10 test
config, a paper recipe, a user's zoo) never overwrites the first one's report.

The default configuration keeps ``results/`` because other tools, docs and users' scripts name
its files exactly (``results/report/metrics.parquet``). A configuration's ``name`` (config key
``name``) defaults to its file's stem (``config/test/icd10.yaml`` -> ``results/icd10/``). A
name may not be one of the folders the default configuration writes in ``results/`` (or the
zoo's shared history): ``results/report/`` of a configuration named ``report`` would be the
default report's folder, whose leftovers the report job removes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from hieval.errors import ConfigError

#: The top folder of every result.
RESULTS = "results"
#: The Snakefile's own ``configfile:``: a run reading only it (or naming it again) writes
#: ``results/`` itself.
DEFAULT_CONFIGFILE = "config/config.yaml"
#: A configuration name becomes one folder name.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$"
#: Folders of ``results/`` the default configuration (or every configuration) writes: a
#: configuration of one of these names would write inside them. ``history`` is the zoo's one
#: accumulating store; ``demo``/``demo_icd10`` the embedded demos' generated inputs.
RESERVED_NAMES = (
    "counts",
    "demo",
    "demo_icd10",
    "errors",
    "hierarchy",
    "history",
    "inputs",
    "meta",
    "metrics",
    "paper",
    "ranking",
    "report",
    "shards",
    "thresholds",
)


def _is_default(configfile: str | Path) -> bool:
    path = Path(configfile)
    return path.resolve() == Path(DEFAULT_CONFIGFILE).resolve()


def config_name(name: str | None, configfiles: Sequence[str | Path]) -> str | None:
    """The configuration's name: ``name`` when given, else the stem of the first config file
    given on the command line (``configfiles``, Snakemake's ``--configfile``: its values win
    over the Snakefile's own ``config/config.yaml``; files after it are overlays, such as a
    site's bounds, that leave the experiment and its folder as they are), or None for the
    default configuration (no such file, or ``config/config.yaml`` itself). Refuses a name
    that is no safe folder name or is reserved (:data:`RESERVED_NAMES`), naming the config
    file it came from."""
    if name is None:
        if not configfiles or _is_default(configfiles[0]):
            return None
        name = Path(configfiles[0]).stem
        where = f"the name of {configfiles[0]}"
    else:
        where = "config key name"
    if not re.fullmatch(NAME_PATTERN, name):
        raise ConfigError(
            f"{where} {name!r} is not a folder name (letters, digits and _ . + -, starting "
            "with a letter or digit); set `name: NAME` in the config"
        )
    if name in RESERVED_NAMES:
        raise ConfigError(
            f"{where} {name!r} is a folder the default configuration writes in {RESULTS}/ "
            f"({', '.join(RESERVED_NAMES)}); set another `name: NAME` in the config"
        )
    return name


def results_folder(name: str | None) -> str:
    """``results`` for the default configuration (``name`` None), else ``results/<name>``."""
    return RESULTS if name is None else f"{RESULTS}/{name}"
