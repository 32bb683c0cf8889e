"""How a message names a setting the user can change: in the syntax of the entry point they run.

One refusal reaches users of the command line (``--unknown-docs drop``) and of the workflow's
config and model sheet (``unknown_docs: drop``); a hint in the other syntax sends them looking
for an option they do not have. So messages never spell a setting themselves: they name it by
its canonical key through :func:`setting`, and each entry point says once, with
:func:`entry_point`, which syntax its users read (the Python API's, :data:`API`, is keyword
arguments).

The style is a plain module value, not a context variable: a process runs one entry point at a
time, and the CLI's worker threads (the gold read in the background) must word their hints as
its main thread does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

CLI, WORKFLOW, API = "cli", "workflow", "api"
STYLES = (CLI, WORKFLOW, API)
#: The library's own default: the config's keys, which its functions' keywords follow.
_style = WORKFLOW

#: How a model's dev predictions are named in messages (``NAME (dev)``).
DEV_SUFFIX = " (dev)"
#: The names a label file goes by in messages that all read the gold's settings.
_GOLD_FILES = ("gold", "dev_gold", "train_gold")


@dataclass(frozen=True)
class _Setting:
    """One setting's spelling in each entry point.

    ``flag``: the CLI option (None: the CLI has no such setting), which takes ``NAME=VALUE``
    for one file when ``per_file`` (and also a plain value for every file when ``every_file``).
    ``config``: the config key that applies to every model (dotted for nested keys);
    ``gold_config``: the config key of the gold's own setting; ``sheet``: the model sheet's
    column of a model's own setting. None: there is none.
    """

    flag: str | None
    config: str | None = None
    gold_config: str | None = None
    sheet: str | None = None
    per_file: bool = False
    every_file: bool = True


_SETTINGS = {
    "unknown_codes": _Setting("--unknown-codes", "unknown_codes"),
    "unknown_docs": _Setting("--unknown-docs", "unknown_docs"),
    "memory_limit": _Setting("--memory-limit", "engine.memory_limit"),
    "max_level": _Setting("--max-level", "max_level"),
    "hierarchy": _Setting("--hierarchy", "hierarchy.source"),
    "shards": _Setting(None, "shards"),
    "bootstrap": _Setting("--bootstrap", "uncertainty.bootstrap"),
    "dev_gold": _Setting("--dev-gold", "dev_gold"),
    "allow_dev_test_overlap": _Setting("--allow-dev-test-overlap", "tuning.allow_dev_test_overlap"),
    "threshold": _Setting("--threshold", "threshold", sheet="threshold"),
    "top_k": _Setting("--top-k", sheet="top_k"),
    "code_type": _Setting(
        "--code-type", gold_config="gold_code_type", sheet="code_type", per_file=True
    ),
    "format": _Setting(
        "--format", gold_config="gold_format", sheet="format", per_file=True, every_file=False
    ),
    "code_list": _Setting(
        "--code-list",
        gold_config="gold_code_list",
        sheet="code_list",
        per_file=True,
        every_file=False,
    ),
    "doc_list": _Setting(
        "--doc-list",
        gold_config="gold_doc_list",
        sheet="doc_list",
        per_file=True,
        every_file=False,
    ),
    "dev_predictions": _Setting(
        "--dev-pred", sheet="dev_predictions", per_file=True, every_file=False
    ),
}


def style() -> str:
    """The syntax hints are written in now (``cli``, ``workflow`` or ``api``)."""
    return _style


@contextmanager
def entry_point(name: str) -> Iterator[None]:
    """Word every hint raised inside in the syntax of entry point ``name``, then restore."""
    global _style
    if name not in STYLES:
        raise ValueError(f"entry point must be one of {STYLES}, not {name!r}")
    previous, _style = _style, name
    try:
        yield
    finally:
        _style = previous


def offers(key: str) -> bool:
    """Whether the running entry point has setting ``key`` at all (the CLI has no shards)."""
    spec = _SETTINGS[key]
    if _style == CLI:
        return spec.flag is not None
    if _style == API:
        return key not in _NOT_IN_API
    return any((spec.config, spec.gold_config, spec.sheet))


def _owner(file: str) -> str:
    """The name a file's settings go by: the gold's for every gold, the model's for its dev
    predictions (read as ``NAME (dev)``)."""
    if file in _GOLD_FILES:
        return "gold"
    return file.removesuffix(DEV_SUFFIX)


def setting(key: str, value: object = None, *, file: str | None = None) -> str:
    """Setting ``key`` (with ``value``, when the hint proposes one) as the user writes it.

    ``file`` names the label file a per-file setting is for (``gold``, a model); without it a
    per-file setting is named for every file. ``True`` renders a flag (``--allow-...``) or
    ``key: true``.
    """
    spec = _SETTINGS[key]
    if _style == CLI:
        return _cli(spec, value, file)
    if _style == API:
        return _api(key, spec, value, file)
    return _workflow(spec, value, file)


def name(key: str) -> str:
    """Setting ``key``'s bare name in the running entry point's syntax (``--format``,
    ``format``, ``gold_format``), for a message about the setting itself rather than a value
    to set."""
    spec = _SETTINGS[key]
    if _style == CLI:
        return spec.flag or key
    if _style == API:
        return key
    return spec.config or spec.sheet or spec.gold_config or key


def _text(value: object) -> str:
    return "true" if value is True else "false" if value is False else str(value)


def _cli(spec: _Setting, value: object, file: str | None) -> str:
    if spec.flag is None:
        raise ValueError(f"the command line has no setting {spec.config!r}; ask offers() first")
    if value is True:
        return spec.flag
    if spec.per_file and (file is not None or not spec.every_file):
        name = _owner(file) if file is not None else "NAME"
        return f"{spec.flag} {name}={'VALUE' if value is None else _text(value)}"
    return spec.flag if value is None else f"{spec.flag} {_text(value)}"


def _workflow(spec: _Setting, value: object, file: str | None) -> str:
    """A config key (``key: value``) or a sheet column (``column value in model m's row``);
    without a file, the key for every model, else the gold's key and the sheet's column."""
    owner = _owner(file) if file is not None else None
    if owner == "gold" and spec.gold_config:
        return _config(spec.gold_config, value)
    if owner is not None and owner != "gold" and spec.sheet:
        shown = "" if value is None else f" {_text(value)}"
        return f"{spec.sheet}{shown} in model {owner}'s row of the model sheet"
    if spec.config:
        return _config(spec.config, value)
    column = f"the model sheet's column {spec.sheet}"
    if spec.gold_config:
        return f"{_config(spec.gold_config, value)} (the gold) or {column} (a model)"
    return column


#: Settings the Python API has no keyword for (it evaluates in one process, unsharded).
_NOT_IN_API = frozenset({"shards"})


def _api(key: str, spec: _Setting, value: object, file: str | None) -> str:
    """A keyword argument of :func:`hieval.evaluate`, named as the setting's key: a per-file
    setting for one file is a mapping from the file's name (``gold`` or a model)."""
    if key in _NOT_IN_API:
        raise ValueError(f"the Python API has no setting {key!r}; ask offers() first")
    if value is None:
        shown = "..."
    elif isinstance(value, str) and not _placeholder(value):
        shown = repr(value)
    else:  # a number, True, or a placeholder the user fills in (PATH, K, ...)
        shown = str(value)
    if spec.per_file and (file is not None or not spec.every_file):
        name = _owner(file) if file is not None else "NAME"
        return f"{key}={{{name!r}: {shown}}}"
    return f"{key}={shown}"


def _placeholder(value: str) -> bool:
    """Whether a hint's value is a placeholder (``PATH``, ``K``, ``...``), not a value."""
    return value == "..." or (value.isupper() and value.replace("_", "").isalpha())


def _config(key: str, value: object) -> str:
    return key if value is None else f"{key}: {_text(value)}"
