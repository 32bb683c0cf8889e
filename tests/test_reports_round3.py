"""Issue 30, round three, the reports: user text (system and model names, node codes and
titles of an own tree) is shown as written and never acts — in LaTeX, Markdown, CSV and the
figures — and a damaged history never costs the previous report.

The LaTeX tables are compiled with pdflatex where it is installed (CI: texlive-latex-base,
texlive-latex-recommended for booktabs, poppler-utils for pdftotext); the Markdown is parsed by
markdown-it (CommonMark with GFM tables), the CSVs by Python's csv module: checks that do not
reuse the escaping code they check.
"""

from __future__ import annotations

import csv
import html
import io
import os
import re
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest

from hieval.cli import main
from hieval.errors import HievalError
from hieval.experiments.demo import make_demo
from hieval.reports import history, paper_tables
from hieval.reports.leftovers import MANIFEST, remove_leftovers
from hieval.reports.summary import summary_markdown

#: Names that act when written raw: LaTeX commands and specials, Markdown/HTML, formulas.
HOSTILE = (
    r"X \input{SECRET}",
    "100% & #1",
    "a_b $x$ {y}",
    r"t~u^v \relax",
    "p|q <b>bold</b> *em* `c` [l](u)",
    "=HYPERLINK(1)",
)

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


@pytest.fixture(scope="module")
def demo(tmp_path_factory, icd9):
    """The demo zoo (three models) evaluated through the CLI, small."""
    folder = tmp_path_factory.mktemp("demo")
    gold, predictions = make_demo(icd9.frame, seed=3, documents=40)
    gold.write_parquet(folder / "gold.parquet")
    args = ["evaluate", "--gold", str(folder / "gold.parquet"), "--out", str(folder / "out")]
    for model, frame in list(predictions.items())[:3]:
        frame.write_parquet(folder / f"{model}.parquet")
        args += ["--pred", f"{model}={folder / f'{model}.parquet'}"]
    assert main(args) == 0
    return folder / "out"


def _hostile_tidy(demo: Path) -> tuple[pl.DataFrame, list[str]]:
    """The demo's tidy table with its models renamed to hostile names (as the library's callers
    and a sheet's system column may name them)."""
    tidy = pl.read_parquet(demo / "metrics.parquet")
    models = list(dict.fromkeys(tidy["model"]))
    names = dict(zip(models, HOSTILE, strict=False))
    return tidy.with_columns(pl.col("model").replace_strict(names)), list(names.values())


# --- LaTeX -----------------------------------------------------------------------------------

PDFLATEX, PDFTOTEXT = shutil.which("pdflatex"), shutil.which("pdftotext")
needs_pdflatex = pytest.mark.skipif(
    (PDFLATEX is None or PDFTOTEXT is None) and not os.environ.get("CI"),
    reason="pdflatex/pdftotext missing (apt-get install texlive-latex-base "
    "texlive-latex-recommended poppler-utils; CI installs them)",
)


def _compile(tables_tex: str, folder: Path) -> tuple[str, str]:
    """Compile ``tables_tex`` in a minimal document (no shell escape); the PDF's text and the
    list of files pdflatex opened (its -recorder list)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tables.tex").write_text(tables_tex)
    (folder / "doc.tex").write_text(
        "\\documentclass{article}\\usepackage{booktabs}\\begin{document}\n"
        "\\input{tables.tex}\n\\end{document}\n"
    )
    run = subprocess.run(
        [
            PDFLATEX,
            "-no-shell-escape",
            "-interaction=nonstopmode",
            "-halt-on-error",
            "-recorder",
            "doc.tex",
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        env={**os.environ, "openin_any": "a"},
    )
    assert run.returncode == 0, run.stdout[-2000:]
    text = subprocess.run(
        [PDFTOTEXT, "-layout", "doc.pdf", "-"], cwd=folder, capture_output=True, text=True
    ).stdout
    return text, (folder / "doc.fls").read_text()


def _printed(name: str) -> str:
    """How the default (OT1) fonts print ``name`` in pdftotext's reading: ``_`` is a drawn rule
    (no character), ``~`` and ``^`` the accents small tilde and circumflex."""
    return name.replace("_", "").replace("~", "\u02dc").replace("^", "\u02c6")


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


@needs_pdflatex
def test_demo_tables_tex_compiles(demo, tmp_path):
    text, _ = _compile((demo / "tables.tex").read_text(), tmp_path)
    assert "Micro-averaged precision, recall and F1 (%)" in " ".join(text.split())
    for model in dict.fromkeys(pl.read_parquet(demo / "metrics.parquet")["model"]):
        assert _squash(_printed(model)) in _squash(text)


@needs_pdflatex
def test_hostile_names_compile_and_print_literally_without_reading_a_file(demo, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("THE-SECRET-CONTENT\n")
    tidy, models = _hostile_tidy(demo)
    models = [m.replace("SECRET", str(secret)) for m in models]
    tidy = tidy.with_columns(pl.col("model").str.replace("SECRET", str(secret), literal=True))
    # rows named by the hostile models, and by systems, whose names (with different numbers
    # of runs) also reach the caption
    one, two = f"sys {models[0]}", f"sys {models[1]}"
    systems = {models[0]: one, models[1]: one, models[2]: two}
    for name, table_systems, rows in (
        ("models", None, models),
        ("systems", systems, [one, two, *models[3:]]),
    ):
        tables = paper_tables.paper_tables(
            tidy, levels=("e2", "e1", "e0", "c"), models=models, systems=table_systems
        )
        text, opened = _compile(paper_tables.to_latex(tables), tmp_path / name)
        assert "THE-SECRET-CONTENT" not in text
        assert str(secret) not in opened
        for row in rows:
            assert _squash(_printed(row)) in _squash(text), row
        if table_systems:
            assert _squash(_printed(f"({one}: 2, {two}: 1)")) in _squash(text)


#: What LaTeX prints as one character: the escapes a name may become, nothing else.
_PRINTED_ESCAPES = re.compile(
    r"\\(?:textbackslash|textasciitilde|textasciicircum|textless|textgreater|textbar)\{\}"
    r"|\\[&%$#_{}]"
)


def test_hostile_tables_tex_has_no_active_character_in_a_name(demo):
    """Without pdflatex: every name, system and caption reaches tables.tex with each special
    character escaped, on one line."""
    tidy, models = _hostile_tidy(demo)
    systems = {models[0]: "sys \\input{x} 50%", models[1]: "sys \\input{x} 50%"}
    systems[models[2]] = "other\nline"
    tex = paper_tables.to_latex(
        paper_tables.paper_tables(
            tidy, levels=("e2", "e1", "e0", "c"), models=models, systems=systems
        )
    )
    assert "\\input" not in tex
    rows = [line.split(" & ")[0] for line in tex.splitlines() if line.endswith(" \\\\")]
    captions = re.findall(r"^\\caption\{(.*)\}$", tex, re.M)
    assert len(captions) == 2
    for text in [*rows, *captions]:
        assert not re.search(r"[\\&%$#_{}~^<>|]", _PRINTED_ESCAPES.sub("", text)), text


# --- Markdown --------------------------------------------------------------------------------


def _render(markdown_text: str) -> str:
    """``markdown_text`` as HTML, by markdown-it (CommonMark with GFM tables); it holds no tag
    a name wrote (HTML, emphasis, links; code spans would lose their backticks in the cells'
    text)."""
    markdown_it = pytest.importorskip("markdown_it")
    rendered = markdown_it.MarkdownIt("commonmark").enable("table").render(markdown_text)
    for tag in ("<b>", "<i>", "<u>", "<s>", "<em>", "<a "):
        assert tag not in rendered
    return rendered


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def _table_cells(markdown_text: str) -> list[list[str]]:
    """Every table row of ``markdown_text`` as its cells' text."""
    rendered = _render(markdown_text)
    return [
        [
            html.unescape(re.sub(r"<[^>]+>", "", cell))
            for cell in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.S)
        ]
        for row in re.findall(r"<tr>(.*?)</tr>", rendered, re.S)
    ]


def test_summary_md_shows_hostile_names_in_one_cell_each(demo):
    tidy, models = _hostile_tidy(demo)
    systems = {models[0]: "sys|<i>one</i>", models[1]: "sys|<i>one</i>"}
    text = summary_markdown(
        tidy,
        levels=("e2", "e1", "e0", "c"),
        models=models,
        records=[{"name": models[0], "duplicates_removed": 2}],
        hierarchy="own tree t|<u>x</u>.csv",
        systems=systems,
    )
    rows = _table_cells(text)
    widths = {len(row) for row in rows}
    header_widths = {len(row) for row in rows if row[0] in ("Model", "System")}
    assert widths <= header_widths  # no row is split by a name's |
    first_cells = [row[0] for row in rows]
    for model in models:
        assert model in first_cells
    assert "sys|<i>one</i>" in first_cells
    assert "<u>" not in text.replace("\\<u\\>", "")


def test_tables_md_shows_hostile_names_and_captions_literally(demo):
    tidy, models = _hostile_tidy(demo)
    systems = {models[0]: "S & <s>", models[1]: "S & <s>", models[2]: "T|*t*"}
    tables = paper_tables.paper_tables(
        tidy, levels=("e2", "e1", "e0", "c"), models=models, systems=systems
    )
    text = paper_tables.to_markdown(tables)
    rows = _table_cells(text)
    assert len({len(row) for row in rows}) == 2  # the two tables' widths, no row split
    assert {row[0] for row in rows} >= {*models[3:], "S & <s>", "T|*t*"}
    captions = [_text(c) for c in re.findall(r"<strong>(.*?)</strong>", _render(text))]
    assert any("(S & <s>: 2, T|*t*: 1)" in caption for caption in captions)


# --- CSV -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def own_tree(tmp_path_factory):
    """A user's tree whose node codes look like formulas and whose titles hold ``$`` (valid
    and invalid mathtext) and HTML, evaluated through the CLI with two models."""
    folder = tmp_path_factory.mktemp("own")
    chapters = {
        '=HYPERLINK("http://x","y")': "$x$ chapter",
        "+cmd|' /C calc'!A0": r"$\foo$ bad math",
        "@SUM(1)": "<b>bold</b> | pipe",
        "-2+3": "plain",
    }
    edges = []
    leaves = []
    for i, (chapter, title) in enumerate(chapters.items()):
        edges.append((chapter, None, title))
        for j in range(2):
            block = f"{chapter}/b{j}"
            edges.append((block, chapter, f"block {title} {j}"))
            for k in range(2):
                leaf = f"-{i}{j}{k}" if k else f"L{i}{j}{k}"
                edges.append((leaf, block, f"leaf $y_{k}$"))
                leaves.append(leaf)
    pl.DataFrame(edges, schema=["child", "parent", "title"], orient="row").write_parquet(
        folder / "tree.parquet"
    )
    gold = pl.DataFrame(
        {
            "doc_id": [f"d{n}" for n in range(12)],
            "code": [leaves[n % len(leaves)] for n in range(12)],
        }
    )
    gold.write_parquet(folder / "gold.parquet")
    args = ["evaluate", "--gold", str(folder / "gold.parquet"), "--out", str(folder / "out")]
    args += ["--hierarchy", str(folder / "tree.parquet")]
    for m, shift in (("a", 1), ("b", 5)):
        gold.with_columns(
            code=pl.Series([leaves[(n + shift) % len(leaves)] for n in range(12)])
        ).write_parquet(folder / f"{m}.parquet")
        args += ["--pred", f"{m}={folder / f'{m}.parquet'}"]
    assert main(args) == 0
    return folder / "out", chapters


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_node_csvs_neutralise_formula_cells_and_keep_numbers(own_tree):
    out, chapters = own_tree
    rows = _csv_rows(out / "nodes" / "a.csv")
    assert rows
    for row in rows:
        for column in ("node", "title", "level"):
            assert not row[column].startswith(FORMULA_STARTS), row
        for column in ("n_gold", "n_pred", "tp", "over", "under", "balance"):
            int(row[column])  # numbers stay numbers (balance is often negative)
    shown = {row["node"] for row in rows}
    for chapter in chapters:
        quoted = "'" + chapter if chapter.startswith(FORMULA_STARTS) else chapter
        assert quoted in shown
    assert any(int(row["balance"]) < 0 for row in rows)


def test_metrics_and_summary_csv_keep_negative_numbers_as_numbers(own_tree):
    out, _ = own_tree
    rows = _csv_rows(out / "metrics.csv")
    values = [float(row["value"]) for row in rows]
    assert values == pl.read_parquet(out / "metrics.parquet")["value"].to_list()
    assert any(v < 0 for v in values)  # ICM of a poor model: a negative number, unquoted
    for row in _csv_rows(out / "summary.csv"):
        assert not any(
            cell.startswith(FORMULA_STARTS) and not _is_number(cell) for cell in row.values()
        )


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


# --- Figures ---------------------------------------------------------------------------------


def test_titles_with_dollars_are_drawn_as_text(own_tree):
    out, _ = own_tree
    page = (out / "report.html").read_text()
    assert "<svg" in page
    svg_text = html.unescape(" ".join(re.findall(r"<text[^>]*>(.*?)</text>", page, re.S)))
    for title in ("$x$ chapter", r"$\foo$ bad math"):
        assert title in svg_text, title


# --- History ---------------------------------------------------------------------------------


def _history_file(tmp_path: Path) -> tuple[Path, pl.DataFrame]:
    rows = pl.DataFrame(
        [("2026-01-01T00:00:00", "m", "F-set", 0.5, "g", "i", "s", "1.0", "k1")] * 3,
        schema=history.SCHEMA_V1,  # a history an earlier hieval wrote: read and upgraded
        orient="row",
    )
    path = tmp_path / "evaluations.parquet"
    rows.write_parquet(path)
    return path, rows


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: data[:-40], id="truncated"),
        pytest.param(lambda data: data[: len(data) // 2], id="half"),
        pytest.param(lambda data: b"", id="empty"),
        pytest.param(lambda data: data[:60] + bytes(200) + data[260:], id="garbled"),
        pytest.param(
            lambda data: _parquet_bytes(pl.DataFrame({"model": ["m"], "score": [1.0]})),
            id="foreign columns",
        ),
        pytest.param(
            lambda data: _parquet_bytes(
                pl.read_parquet(io.BytesIO(data)).with_columns(pl.col("value").cast(pl.String))
            ),
            id="foreign types",
        ),
    ],
)
def test_a_damaged_or_foreign_history_is_refused_and_left_alone(tmp_path, damage):
    path, rows = _history_file(tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    before = path.read_bytes()
    with pytest.raises(HievalError) as refused:
        history.append_history(path, rows.with_columns(key=pl.lit("k2")))
    message = str(refused.value)
    assert "\n" not in message and str(path) in message and "move it aside" in message
    assert path.read_bytes() == before


def _parquet_bytes(frame: pl.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.write_parquet(buffer)
    return buffer.getvalue()


def test_a_whole_history_still_grows_by_new_keys_only(tmp_path):
    path, rows = _history_file(tmp_path)
    grown = history.append_history(path, pl.concat([rows, rows.with_columns(key=pl.lit("k2"))]))
    assert grown.height == 6 and pl.read_parquet(path).equals(grown)


# --- Leftovers of an earlier configuration ---------------------------------------------------


def test_only_unchanged_files_hieval_wrote_earlier_are_removed(tmp_path):
    report = tmp_path / "report"
    (report / "nodes").mkdir(parents=True)
    names = ("summary.md", "intervals.parquet", "nodes/B.csv", "edited.csv")
    for name in names:
        (report / name).write_text(f"written by hieval: {name}\n")
    outside = tmp_path / "counts.parquet"
    outside.write_text("an input outside the folder\n")
    assert remove_leftovers(report, [report / n for n in names] + [outside]) == []
    (report / "edited.csv").write_text("changed by the user\n")
    (report / "mine.txt").write_text("the user's own\n")
    removed = remove_leftovers(report, [report / "summary.md", outside])
    assert sorted(removed) == ["intervals.parquet", "nodes/B.csv"]
    assert sorted(p.name for p in report.rglob("*") if p.is_file()) == [
        ".hieval-outputs.json",
        "edited.csv",
        "mine.txt",
        "summary.md",
    ]
    assert outside.exists()


def test_no_manifest_or_a_foreign_one_removes_nothing(tmp_path):
    report = tmp_path / "report"
    report.mkdir()
    (report / "old.parquet").write_text("x")
    assert remove_leftovers(report, []) == []
    (report / MANIFEST).write_text('{"files": {"../outside.txt": "0", "old.parquet": 1}}')
    (tmp_path / "outside.txt").write_text("y")
    assert remove_leftovers(report, []) == []
    assert (report / "old.parquet").exists() and (tmp_path / "outside.txt").exists()


def test_a_history_in_a_folder_that_cannot_be_written_is_refused_up_front(tmp_path, monkeypatch):
    path, _ = _history_file(tmp_path)
    history.check_history(path)  # whole and writable: accepted
    history.check_history(tmp_path / "new" / "evaluations.parquet")  # none yet: accepted
    monkeypatch.setattr(os, "access", lambda *_: False)  # root may write anywhere
    with pytest.raises(HievalError, match=re.escape(f"cannot write the history {path}")):
        history.check_history(path)


def test_a_failed_history_write_is_one_message(tmp_path, monkeypatch):
    path, rows = _history_file(tmp_path)

    def full_disk(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(history, "write_parquet", full_disk)
    with pytest.raises(HievalError, match="No space left on device"):
        history.append_history(path, rows.with_columns(key=pl.lit("k2")))
