"""The documentation says what the code does: every option, config key, sheet column, metric and
output file that exists is documented, and nothing documented is missing from the code.

The site itself is built by ``mkdocs build --strict`` in ``.ci/run`` (broken links and
references); these tests check its content against the code, cheaply, without MkDocs.
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.util
import json
import re
from pathlib import Path

import pytest
import yaml

from hieval.cli import build_parser, main
from hieval.metrics.registry import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CONFIG_README = ROOT / "config" / "README.md"
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', re.MULTILINE)


def _page(path: Path) -> str:
    """A page's Markdown with its snippet includes (``--8<-- "file"``) resolved, as MkDocs
    renders it."""
    return SNIPPET.sub(lambda m: (ROOT / m.group(1)).read_text(), path.read_text())


@pytest.fixture(scope="module")
def docs_text() -> str:
    return "\n".join(_page(p) for p in sorted(DOCS.rglob("*.md")))


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _flags() -> set[str]:
    parser = build_parser()
    parsers = [parser, *_subparsers(parser).values()]
    return {
        flag
        for p in parsers
        for action in p._actions
        for flag in action.option_strings
        if flag.startswith("--") and flag != "--help"
    }


def _mentions(text: str, flag: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text) is not None


# --- options, config keys and sheet columns ---------------------------------------------------


def test_every_command_line_option_is_documented(docs_text):
    missing = sorted(f for f in _flags() if not _mentions(docs_text, f))
    assert not missing, f"options of `hieval` not mentioned in docs/: {missing}"


def _commands(text: str) -> list[str]:
    """Every ``hieval …`` command of the pages' code blocks, continuation lines joined."""
    commands, current = [], None
    for line in text.splitlines():
        stripped = line.strip()
        if current is None and stripped.startswith("hieval "):
            current = stripped
        elif current is not None:
            current += " " + stripped
        if current is not None and not current.endswith("\\"):
            commands.append(current)
            current = None
    return commands


def test_every_documented_option_exists(docs_text):
    readme = (ROOT / "README.md").read_text()
    commands = _commands(docs_text) + _commands(readme)
    assert any("--bootstrap" in c for c in commands)  # the synopsis was found
    documented = {f for c in commands for f in re.findall(r"--[a-z][a-z0-9-]*", c)}
    table = [f for row in _table_rows(CONFIG_README.read_text(), "The config") for f in
             re.findall(r"`(--[a-z][a-z0-9-]*)", row[2])]  # fmt: skip
    assert table, "config/README.md names no CLI flag"
    unknown = sorted((documented | set(table)) - _flags())
    assert not unknown, f"documented options that `hieval` does not have: {unknown}"


def _schema_keys(properties: dict, prefix: str = "") -> set[str]:
    keys = set()
    for name, spec in properties.items():
        if spec.get("type") == "object" and "properties" in spec:
            keys |= _schema_keys(spec["properties"], f"{prefix}{name}.")
        else:
            keys.add(prefix + name)
    return keys


def _table_rows(text: str, section: str) -> list[list[str]]:
    """The cells of the Markdown table under the heading ``section`` (header aside)."""
    assert f"## {section}\n" in text, f"no section {section!r}"
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]] for row in rows]


def _table_keys(text: str, section: str) -> set[str]:
    """The first column of the Markdown table under the heading ``section``."""
    return {row[0].strip("`") for row in _table_rows(text, section)}


def test_config_readme_documents_exactly_the_config_keys():
    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    assert _table_keys(CONFIG_README.read_text(), "The config") == _schema_keys(
        schema["properties"]
    )


def test_config_readme_documents_exactly_the_sheet_columns():
    schema = yaml.safe_load((ROOT / "workflow/schemas/models.schema.yaml").read_text())
    assert _table_keys(CONFIG_README.read_text(), "The model sheet") == set(schema["properties"])


def test_the_configuration_page_is_the_config_readme():
    """One text for the repository and the site: the page includes the file."""
    assert _page(DOCS / "configuration.md").strip() == CONFIG_README.read_text().strip()


def test_threshold_tune_is_documented_for_the_sheet():
    sheet = CONFIG_README.read_text().split("## The model sheet\n", 1)[1]
    threshold_row = next(r for r in sheet.splitlines() if r.startswith("| `threshold` |"))
    assert "`tune`" in threshold_row


def test_troubleshooting_explains_every_refusal_class():
    from hieval import errors

    classes = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.HievalError)
    }
    page = (DOCS / "troubleshooting.md").read_text()
    rows = {re.match(r"\| `(\w+)` \|", line).group(1) for line in page.splitlines()
            if re.match(r"\| `\w+` \|", line)}  # fmt: skip
    assert classes <= rows, f"refusal classes without a row: {sorted(classes - rows)}"


# --- the metric table -------------------------------------------------------------------------


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _unescape(cell: str) -> str:
    return cell.strip().strip("`").replace("\\|", "|")


def test_metrics_page_renders_every_registered_metric():
    """The metrics page asks the hook for the table, MkDocs runs the hook, and the rendered
    table has one row per registry entry with its definition: a metric added to the registry
    appears on the page, and a table typed into the page instead fails here."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert "docs/hooks.py" in config["hooks"]
    hooks = _hooks()
    page = (DOCS / "metrics.md").read_text()
    assert page.count(hooks.METRIC_TABLE_MARKER) == 1
    rendered = hooks.on_page_markdown(page, page=None, config=None, files=None)
    lines = rendered.splitlines()
    start = lines.index("| " + " | ".join(hooks.COLUMNS) + " |")
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([_unescape(c) for c in re.split(r"(?<!\\)\|", line)[1:-1]])
    expected = [
        [
            m.family,
            m.average,
            m.metric,
            m.level,
            m.paper or "",
            "higher" if m.higher_is_better else "lower",
            m.source,
            m.formula,
        ]
        for m in REGISTRY
    ]
    assert rows == expected


# --- files a run writes -----------------------------------------------------------------------


def _documented_outputs(description: str) -> list[str]:
    """The file patterns listed in a ``--help`` description (indented lines, first column)."""
    patterns = []
    for line in description.splitlines():
        if line.startswith("  "):
            first = re.split(r"\s{2,}| with ", line.strip())[0]
            patterns += [p.strip() for p in first.split(",")]
    return patterns


def _written(out: Path) -> list[str]:
    """What a run left in its folder: each top-level entry (a folder as ``name/``) and each
    file of the folders other than ``work/`` (intermediates, documented as one)."""
    written = []
    for entry in sorted(out.iterdir()):
        if entry.is_dir():
            written.append(entry.name + "/")
            if entry.name != "work":
                written += [f"{entry.name}/{f.name}" for f in sorted(entry.iterdir())]
        else:
            written.append(entry.name)
    return written


def _check_listing(patterns: list[str], written: list[str]) -> None:
    """Every file written is listed (``NAME`` standing for a model), and every listed file was
    written by a run that asked for every optional output."""
    globs = [p.replace("NAME", "*") for p in patterns]
    folders = {p.split("/")[0] + "/" for p in patterns if "/" in p}

    def listed(entry: str) -> bool:
        return entry in folders or any(fnmatch.fnmatchcase(entry, g) for g in globs)

    def found(glob: str) -> bool:
        return any(fnmatch.fnmatchcase(entry, glob) for entry in written)

    unlisted = [entry for entry in written if not listed(entry)]
    assert not unlisted, f"written but not listed in --help: {unlisted}"
    unwritten = [p for p, g in zip(patterns, globs, strict=True) if not found(g)]
    assert not unwritten, f"listed in --help but not written: {unwritten}"


CODES = ["401.9", "428.0", "250.00", "96.04", "364.11", "38.93"]


def _caml_gold(path: Path, docs: range) -> Path:
    rows = [f'{i},{d},"note {i}",{CODES[i % 6]};{CODES[(i + 1) % 6]}' for i, d in enumerate(docs)]
    path.write_text("SUBJECT_ID,HADM_ID,TEXT,LABELS\n" + "\n".join(rows) + "\n")
    return path


def _caml_scores(path: Path, docs: range) -> Path:
    scores = {
        str(d): {c: ((i * 7 + j * 3) % 10) / 10 for j, c in enumerate(CODES)}
        for i, d in enumerate(docs)
    }
    path.write_text(json.dumps(scores))
    return path


def _doc_groups(path: Path, docs: range) -> Path:
    path.write_text("doc_id,sex\n" + "".join(f"{d},{'FM'[i % 2]}\n" for i, d in enumerate(docs)))
    return path


@pytest.fixture(scope="module")
def caml_run(tmp_path_factory) -> tuple[Path, Path]:
    """One evaluation of CAML files (as the README's example) that writes every optional
    output: intervals and comparisons (bootstrap) and tuned thresholds."""
    tmp = tmp_path_factory.mktemp("caml")
    test, dev = range(100, 130), range(500, 530)
    psv = tmp / "preds_test.psv"
    psv.write_text("".join(f"{d}|{CODES[i % 6]}|{CODES[(i + 2) % 6]}\n" for i, d in
                           enumerate(test)))  # fmt: skip
    cache, out = tmp / "cache", tmp / "eval"
    argv = [
        "evaluate",
        "--gold", str(_caml_gold(tmp / "test_full.csv", test)),
        "--pred", f"caml={psv}",
        "--pred", f"caml_scored={_caml_scores(tmp / 'pred_100_scores_test.json', test)}",
        "--threshold", "tune",
        "--dev-gold", str(_caml_gold(tmp / "dev_full.csv", dev)),
        "--dev-pred", f"caml_scored={_caml_scores(tmp / 'pred_100_scores_dev.json', dev)}",
        "--bootstrap", "3", "--permutations", "9",
        "--cache", str(cache), "--out", str(out),
        "--doc-groups", str(_doc_groups(tmp / "groups.csv", test)),
    ]  # fmt: skip
    assert main(argv) == 0
    return out, cache


def test_evaluate_help_lists_every_file_a_run_writes(caml_run):
    out, _cache = caml_run
    description = _subparsers(build_parser())["evaluate"].description
    patterns = _documented_outputs(description)
    assert "report.html" in patterns and "nodes/NAME.csv" in patterns
    _check_listing(patterns, _written(out))


def test_hierarchy_help_lists_every_file_it_writes(caml_run, tmp_path):
    _out, cache = caml_run
    out = tmp_path / "tables"
    assert main(["hierarchy", "--out", str(out), "--cache", str(cache)]) == 0
    description = _subparsers(build_parser())["hierarchy"].description
    named = set(re.findall(r"OUT/([\w.-]+)", description))
    assert named == {p.name for p in out.iterdir()}


# --- the README and measurements --------------------------------------------------------------


def test_readme_is_short_and_keeps_the_ci_test_command():
    readme = (ROOT / "README.md").read_text().splitlines()
    assert len(readme) <= 200
    ci_command = (ROOT / ".ci" / "run").read_text().rstrip("\n").splitlines()[-1]
    assert ci_command in readme


DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def test_user_documentation_holds_no_dated_measurement(docs_text):
    """Measurements live in benchmarks/RESULTS.md, dated; user pages say what to expect."""
    readme = (ROOT / "README.md").read_text()
    assert not DATE.findall(docs_text + readme)
    assert DATE.findall((ROOT / "benchmarks" / "RESULTS.md").read_text())
