"""How a message names a setting the user can change: in the syntax of the entry point they run.

One refusal reaches users of the command line (``--unknown-docs drop``) and of the workflow's
config and model sheet (``unknown_docs: drop``); a hint in the other syntax sends them looking
for an option they do not have. So messages never spell a setting themselves: they name it by
its canonical key through :func:`setting`, and each entry point says once, with
:func:`entry_point`, which syntax its users read (a later Python API adds its own style here).

The style is a plain module value, not a context variable: a process runs one entry point at a
time, and the CLI's worker threads (the gold read in the background) must word their hints as
its main thread does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

CLI, WORKFLOW = "cli", "workflow"
STYLES = (CLI, WORKFLOW)
#: The library's own default: the config's keys, which its functions' keywords follow.
_style = WORKFLOW

#: The names a label file goes by in messages that all read the gold's settings.
_GOLD_FILES = ("gold", "dev_gold", "train_gold")


@dataclass(frozen=True)
class _Setting:
    """One setting's spelling in each entry point.

    ``flag``: the CLI option (None: the CLI has no such setting); ``config``: the config key
    (dotted for nested keys; None: none); ``sheet``: the model sheet's column for a per-file
    setting, whose gold counterpart is the config key ``config``.
    """

    flag: str | None
    config: str | None
    sheet: str | None = None


_SETTINGS = {
    "unknown_codes": _Setting("--unknown-codes", "unknown_codes"),
    "unknown_docs": _Setting("--unknown-docs", "unknown_docs"),
    "memory_limit": _Setting("--memory-limit", "engine.memory_limit"),
    "max_level": _Setting("--max-level", "max_level"),
    "hierarchy": _Setting("--hierarchy", "hierarchy.source"),
    "hierarchy_sha256": _Setting("--hierarchy-sha256", "hierarchy.sha256"),
    "shards": _Setting(None, "shards"),
    "dev_gold": _Setting("--dev-gold", "dev_gold"),
    "allow_dev_test_overlap": _Setting("--allow-dev-test-overlap", "tuning.allow_dev_test_overlap"),
    "threshold": _Setting("--threshold", "threshold", sheet="threshold"),
    "top_k": _Setting("--top-k", None, sheet="top_k"),
    "code_type": _Setting("--code-type", "gold_code_type", sheet="code_type"),
    "format": _Setting("--format", "gold_format", sheet="format"),
    "code_list": _Setting("--code-list", "gold_code_list", sheet="code_list"),
    "doc_list": _Setting("--doc-list", "gold_doc_list", sheet="doc_list"),
    "dev_predictions": _Setting("--dev-pred", None, sheet="dev_predictions"),
}
#: Per-file options the CLI takes as NAME=VALUE (the others apply to every file).
_NAMED_FLAGS = ("--code-type", "--format", "--code-list", "--doc-list", "--dev-pred")


def style() -> str:
    """The syntax hints are written in now (``cli`` or ``workflow``)."""
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
    return (spec.flag if _style == CLI else spec.config or spec.sheet) is not None


def _owner(file: str) -> str:
    """The name a file's settings go by: the gold's for every gold, the model's for its dev
    predictions (read as ``NAME (dev)``)."""
    if file in _GOLD_FILES:
        return "gold"
    return file.removesuffix(" (dev)")


def setting(key: str, value: object = None, *, file: str | None = None) -> str:
    """Setting ``key`` (with ``value``, when the hint proposes one) as the user writes it.

    ``file`` names the label file a per-file setting is for (``gold``, a model); without it a
    per-file setting is named for every file. ``True`` renders a flag (``--allow-...``) or
    ``key: true``.
    """
    spec = _SETTINGS[key]
    if _style == CLI:
        return _cli(spec, value, file)
    return _workflow(spec, value, file)


def _text(value: object) -> str:
    return "true" if value is True else "false" if value is False else str(value)


def _cli(spec: _Setting, value: object, file: str | None) -> str:
    if spec.flag is None:
        raise ValueError(f"the command line has no setting {spec.config!r}; ask offers() first")
    if value is True:
        return spec.flag
    if spec.flag in _NAMED_FLAGS:
        if file is None and spec.flag != "--code-type":
            return f"{spec.flag} NAME={_text(value) if value is not None else 'VALUE'}"
        if file is not None:
            return f"{spec.flag} {_owner(file)}={_text(value) if value is not None else 'VALUE'}"
    return spec.flag if value is None else f"{spec.flag} {_text(value)}"


def _workflow(spec: _Setting, value: object, file: str | None) -> str:
    shown = "" if value is None else f": {_text(value)}"
    if spec.sheet is None:
        return f"{spec.config}{shown}"
    column = f"the model sheet's column {spec.sheet}"
    if file is None:
        if spec.config is None:
            return column
        return f"{spec.config}{shown} (the gold) or {column} (a model)"
    owner = _owner(file)
    if owner == "gold" and spec.config is not None:
        return f"{spec.config}{shown}"
    value_text = "" if value is None else f" {_text(value)}"
    return f"{spec.sheet}{value_text} in model {owner}'s row of the model sheet"
