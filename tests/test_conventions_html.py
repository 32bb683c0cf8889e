"""The HTML report's "Conventions" section: each model's headline metrics under each
convention side by side (the values of conventions.parquet, read back from the page), one
sentence per kind of difference from hieval's own, what caml and edin ran over, and Edin et
al.'s McNemar tests (conventions_tests.parquet); the section parses as HTML, and the CLI's
report renders in Chromium with it."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import polars as pl
import pytest

from hieval.cli import main
from hieval.reports.conventions import WHY
from hieval.reports.conventions_html import render


class _Cells(HTMLParser):
    """The text of every table cell, row by row."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _cells(text: str) -> list[list[str]]:
    parser = _Cells()
    parser.feed(text)
    return parser.rows


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("conventions_html")
    gold = folder / "gold.csv"
    gold.write_text("doc_id,code\na,401.9\na,428.0\nb,250.00\nb,38.93\nc,E849.7\nc,401.9\nd,486\n")
    one = folder / "one.csv"
    one.write_text(
        "doc_id,code,score\na,401.9,0.9\na,428.0,0.4\na,486,0.5\nb,250.00,0.7\nb,38.93,0.2\n"
        "c,E849.7,0.6\nc,427.31,0.55\nd,486,0.8\nd,401.9,0.3\n"
    )
    two = folder / "two.csv"
    two.write_text("doc_id,code,score\na,401.9,0.8\nb,250.00,0.6\nc,401.9,0.7\nd,486,0.4\n")
    out = folder / "out"
    argv = ["evaluate", "--gold", str(gold), "--pred", f"one={one}", "--pred", f"two={two}"]
    assert main([*argv, "--out", str(out), "--cache", str(folder / "cache"), "--k", "2"]) == 0
    return out


def _section(page: str) -> str:
    start = page.index("<h2 id='conventions'>")
    end = page.find("<h2", start + 1)
    return page[start : end if end > 0 else None]


def test_each_models_values_under_each_convention_are_the_parquets(run):
    page = (run / "report.html").read_text("utf-8")
    section = _section(page)
    table = pl.read_parquet(run / "conventions.parquet")
    side_by_side = section.split("<h3>")[0]  # the McNemar table follows
    rows = {(r[0], r[1]): r[2:] for r in _cells(side_by_side) if r[0] != "Model"}
    assert set(rows) == {(m, c) for m in ("one", "two") for c in ("hieval", "caml", "edin",
                                                                  "edin_mullenbach")}  # fmt: skip
    names = {"hieval": "f1_macro", "caml": "f1_macro", "edin": "f1_macro",
             "edin_mullenbach": "f1_macro_mullenbach"}  # fmt: skip
    for (model, convention), cells in rows.items():
        value = table.filter(model=model, convention=convention, metric=names[convention])
        assert cells[1] == f"{100 * value['value'].item():.1f}"  # the Macro F1 column
    # caml's macro-F1 (harmonic mean of macro P and R over the label space) differs here
    assert rows[("one", "caml")][1] != rows[("one", "hieval")][1]
    assert WHY[("caml", "Macro F1")].split(";")[0] in section.replace("&#x27;", "'")


def test_the_section_says_what_caml_and_edin_ran_over_and_the_mcnemar_tests(run):
    section = _section((run / "report.html").read_text("utf-8"))
    assert "codes observed in the gold and its predictions" in section
    assert "McNemar" in section and "randomization test" in section
    tests = pl.read_parquet(run / "conventions_tests.parquet").row(0, named=True)
    mcnemar = [r for r in _cells(section) if r[:2] == ["one", "two"]]
    assert mcnemar == [
        [
            "one",
            "two",
            str(tests["only_a_correct"]),
            str(tests["only_b_correct"]),
            f"{tests['statistic']:.4g}",
            f"{tests['p_value']:.3g}",
            f"{tests['p_bonferroni']:.3g}",
        ]
    ]


def test_no_conventions_no_section():
    assert render(None, models=["m"]) == ""
    empty = pl.DataFrame(
        schema={"model": pl.String, "convention": pl.String, "metric": pl.String,
                "value": pl.Float64}
    )  # fmt: skip
    assert render((empty, {}), models=["m"]) == ""


def test_names_are_escaped():
    table = pl.DataFrame(
        {"model": ["<b>m</b>"] * 2, "convention": ["hieval", "caml"],
         "metric": ["f1_micro", "f1_micro"], "value": [0.5, 0.4]}
    )  # fmt: skip
    text = render(
        (table, {"<b>m</b>": {"label_space": "<i>x</i>", "codes": 3}}), models=["<b>m</b>"]
    )
    assert "<b>m</b>" not in text and "&lt;b&gt;m&lt;/b&gt;" in text
    assert "<i>x</i>" not in text


def test_renders_in_chromium(run):
    from test_reports import CHROMIUM, _chromium, _console_errors

    if CHROMIUM is None:
        pytest.skip("chromium is not installed")
    page = run / "report.html"
    assert _console_errors(page) == []
    dom = _chromium("--dump-dom", page.as_uri()).stdout
    assert re.search(r"<h2 id=\"conventions\">Conventions</h2>", dom)
    assert "edin_mullenbach" in dom
