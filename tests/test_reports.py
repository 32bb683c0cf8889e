"""The reports people read: the HTML report rendered in a real browser, the paper tables
checked against the tidy table, long-tail bins against a naive count, the Snakemake report and
the zoo's history through Snakemake."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from hieval.cli import main
from hieval.experiments.demo import make_demo

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None and not __import__("os").environ.get("CI"),
    reason="chromium is not installed (apt-get install chromium; CI installs it)",
)


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory, icd9):
    """A small zoo evaluated through the CLI, with a training gold for the long-tail bins."""
    folder = tmp_path_factory.mktemp("reports")
    gold, predictions = make_demo(icd9.frame, seed=7, documents=150)
    train, _ = make_demo(icd9.frame, seed=8, documents=300)
    gold.write_parquet(folder / "gold.parquet")
    train.write_parquet(folder / "train.parquet")
    args = ["evaluate", "--gold", str(folder / "gold.parquet"), "--out", str(folder / "out")]
    for model, frame in predictions.items():
        frame.write_parquet(folder / f"{model}.parquet")
        args += ["--pred", f"{model}={folder / f'{model}.parquet'}"]
    assert main([*args, "--train-gold", str(folder / "train.parquet")]) == 0
    return folder / "out", list(predictions), train


def _chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _console_errors(page: Path) -> list[str]:
    result = _chromium("--enable-logging=stderr", "--v=1", "--dump-dom", page.as_uri())
    return [
        line
        for line in result.stderr.splitlines()
        if "CONSOLE" in line and ("Uncaught" in line or "Error" in line)
    ]


@needs_chromium
def test_report_renders_in_a_browser_without_errors(evaluated, tmp_path):
    out, models, _ = evaluated
    page = out / "report.html"
    # The check can fail: a page with a script error is caught.
    broken = tmp_path / "broken.html"
    broken.write_text("<html><body><script>undefinedFunction();</script></body></html>")
    assert _console_errors(broken)
    assert _console_errors(page) == []
    dom = _chromium("--dump-dom", page.as_uri()).stdout
    for model in models:
        assert f">{model}<" in dom, model
    shot = tmp_path / "shot.png"
    _chromium("--window-size=1280,1600", f"--screenshot={shot}", page.as_uri())
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert pixels.std() > 10  # not blank: text, tables and figures drawn


def test_summary_headline_names_each_models_decision_rule(evaluated):
    """summary.md's headline says how each model's predictions were decided."""
    out, _, _ = evaluated
    headline = (out / "summary.md").read_text().split("\n## ")[0]  # before the next section
    rows = {}
    for line in headline.splitlines():
        if line.startswith("| ") and "Decision" not in line:
            name = line.split(" | ")[0].removeprefix("| ").replace("\\_", "_")  # Markdown-escaped
            rows[name] = line.rstrip(" |").split(" | ")[-1]
    assert rows["over_predictor"] == "score ≥ 0.5"  # scored, the default threshold
    assert rows["sibling_confuser"] == "as given (no scores)"
    records = {
        p.stem: json.loads(p.read_text()) for p in (out / "work/inputs/predictions").glob("*.json")
    }
    assert records["over_predictor"]["below_threshold"] > 0  # the rule did remove rows


def test_report_is_self_contained(evaluated):
    """Opens offline: no script, style sheet, image or font fetched from anywhere."""
    text = (evaluated[0] / "report.html").read_text("utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", text)
    assert "@import" not in text and "<link" not in text
    # The only URLs are XML namespace names of the inline SVG figures, never fetched.
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", text))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}
    assert text.count("<svg") >= 3  # per level, disagreement, training frequency


def _tex_rows(tex: str) -> list[list[list[str]]]:
    """Per table, its body rows as cells (between \\midrule and \\bottomrule)."""
    tables = []
    for body in re.findall(r"\\midrule\n(.*?)\\bottomrule", tex, re.S):
        tables.append([line.rstrip(" \\").split(" & ") for line in body.strip().splitlines()])
    return tables


def test_paper_tables_hold_the_tidy_numbers_with_the_best_in_bold(evaluated):
    out, models, _ = evaluated
    tidy = pl.read_parquet(out / "metrics.parquet").filter(pl.col("average") == "micro")
    value = {
        (r["model"], r["family"], r["level"], r["metric"]): r["value"]
        for r in tidy.rows(named=True)
    }
    headline, per_level = _tex_rows((out / "tables.tex").read_text())
    expected_columns = [
        (f, lv, m)
        for f, lv in (("flat", "leaf"), ("set", "overall"), ("cophe", "overall"))
        for m in ("precision", "recall", "f1")
    ]
    levels = ("e2", "e1", "e0", "c")
    level_columns = [(f, lv, "f1") for lv in levels for f in ("set", "cophe")]
    for rows, columns in ((headline, expected_columns), (per_level, level_columns)):
        assert [r[0].replace("\\_", "_") for r in rows] == models
        for j, key in enumerate(columns):
            numbers = [value[(m, *key)] for m in models]
            for row, model, number in zip(rows, models, numbers, strict=True):
                cell = row[j + 1]
                bold = cell.startswith("\\textbf{")
                assert cell.removeprefix("\\textbf{").removesuffix("}") == f"{100 * number:.1f}"
                assert bold == (number == max(numbers)), (model, key)
    markdown = (out / "tables.md").read_text()
    assert markdown.count("**") >= 2 * (len(expected_columns) + len(level_columns))


def test_frequency_bins_match_a_naive_count(evaluated):
    out, models, train = evaluated
    from hieval.reports.frequency import BINS

    train_docs = train.unique(["doc_id", "code"]).group_by("code").len()
    freq = dict(zip(train_docs["code"], train_docs["len"], strict=True))
    model = models[0]
    nodes = pl.read_parquet(out / "work" / "counts" / model / "nodes.parquet")
    flat = nodes.filter(pl.col("family") == "flat")
    sums: dict[str, list[int]] = {}
    for code, tp, fp, fn in flat.select("node", "tp", "fp", "fn").iter_rows():
        n = freq.get(code, 0)
        label = next(lb for lb, lo, hi in BINS if n >= lo and (hi is None or n <= hi))
        acc = sums.setdefault(label, [0, 0, 0])
        acc[0], acc[1], acc[2] = acc[0] + tp, acc[1] + fp, acc[2] + fn
    html = (out / "report.html").read_text()
    section = html[html.index("id='frequency'") :]
    row = re.search(rf"<tr><td>{model}</td>(.*?)</tr>", section).group(1)
    shown = re.findall(r"<td>([^<]*)</td>", row)
    expected = [
        f"{100 * 2 * tp / (2 * tp + fp + fn):.1f}"
        for label, _, _ in BINS
        if label in sums
        for tp, fp, fn in [sums[label]]
    ]
    assert shown == expected
    assert len(sums) >= 2  # the bins separate codes
