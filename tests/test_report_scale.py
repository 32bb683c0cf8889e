"""The HTML report with many models (issue 35): a paper recipe's 3 systems × 10 runs and a
50-model zoo, rendered in headless Chromium at 1,366 × 768 and 1,920 × 1,080. The leaderboard
never scrolls sideways and no two pieces of text overlap; systems are rows of their own with the
mean ± sd of their runs (checked against numpy on metrics.parquet), the runs one click away."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from hieval.cli import main
from hieval.experiments.demo import MODELS, make_demo
from hieval.pipeline import ReportJob, publish_reports
from hieval.reports import figures
from hieval.reports.leaderboard import GROUPS

#: The leaderboard tab of the calibration columns.
CALIBRATION_TAB = next(i for i, (title, _) in enumerate(GROUPS) if title == "Calibration")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"),
    reason="chromium is not installed (apt-get install chromium; CI installs it)",
)
SCREENS = ("1366,768", "1920,1080")
#: The paper recipe's shape: three systems, ten runs each.
SYSTEMS = ("sibling_confuser", "over_predictor", "cautious_coder")
RUNS = 10


def _evaluate(
    folder: Path, runs: dict[str, tuple[str, float]], *, documents: int, train: bool = False
) -> Path:
    """The CLI on the demo's gold and, per name, its base demo model's predictions with a
    random share of rows dropped (so runs of one system differ a little); the --out folder.
    With ``train``, a training gold too (the report's rare and frequent codes)."""
    from hieval.hierarchy.sources import load_source

    table, _ = load_source("package")
    gold, predictions = make_demo(table.frame, seed=7, documents=documents)
    gold.write_parquet(folder / "gold.parquet")
    args = ["evaluate", "--gold", str(folder / "gold.parquet"), "--out", str(folder / "out")]
    if train:
        make_demo(table.frame, seed=8, documents=documents)[0].write_parquet(
            folder / "train.parquet"
        )
        args += ["--train-gold", str(folder / "train.parquet")]
    rng = np.random.default_rng(1)
    for name, (base, drop) in runs.items():
        frame = predictions[base]
        frame.filter(pl.Series(rng.random(frame.height) >= drop)).write_parquet(
            folder / f"{name}.parquet"
        )
        args += ["--pred", f"{name}={folder / f'{name}.parquet'}"]
    assert main(args) == 0
    return folder / "out"


def _publish(out: Path, dest: Path, systems: dict[str, str]) -> Path:
    """The report of an evaluated --out folder again, with the sheet's ``system`` column
    (the workflow's report rule does this; the CLI has no sheet)."""
    work = out / "work"
    models = list(dict.fromkeys(pl.read_parquet(out / "metrics.parquet")["model"]))
    predictions = work / "inputs" / "predictions"
    publish_reports(
        ReportJob(
            tidy=out / "metrics.parquet",
            nodes={m: work / "counts" / m / "nodes.parquet" for m in models},
            records=[work / "inputs" / "gold.json", *(predictions / f"{m}.json" for m in models)],
            levels_file=work / "hierarchy" / "levels.parquet",
            max_level=None,
            hierarchy="package",
            settings={},
            html_out=dest / "report.html",
            tex_out=dest / "tables.tex",
            markdown_out=dest / "tables.md",
            figures_out=dest / "figures",
            systems=systems,
            train_gold=work / "inputs" / "train_gold.parquet",
            notes=[work / "ranking" / f"{m}.json" for m in models],
        )
    )

    return dest / "report.html"


@pytest.fixture(scope="module")
def runs30(tmp_path_factory):
    """3 systems × 10 runs: the CLI's outputs, the report with systems, and the systems."""
    folder = tmp_path_factory.mktemp("runs30")
    runs = {f"{s}_run{r:02d}": (s, 0.1) for s in SYSTEMS for r in range(1, RUNS + 1)}
    out = _evaluate(folder, runs, documents=120, train=True)
    systems = {name: base for name, (base, _) in runs.items()}
    return out, _publish(out, folder / "report", systems), systems


@pytest.fixture(scope="module")
def zoo50(tmp_path_factory):
    """50 models of their own (the demo's four kinds, dropping 2 to 26 % of their rows)."""
    folder = tmp_path_factory.mktemp("zoo50")
    runs = {
        f"{MODELS[i % 4]}_v{i + 1:02d}": (MODELS[i % 4], 0.02 * (i // 4 + 1)) for i in range(50)
    }
    out = _evaluate(folder, runs, documents=100)
    return out, out / "report.html", list(runs)


# --- What the leaderboard shows ----------------------------------------------------------------


def _tables(fragment: str) -> list[list[list[str]]]:
    """Each <table> of ``fragment`` as rows of cell texts (the body rows)."""
    out = []
    for body in re.findall(r"<tbody>(.*?)</tbody>", fragment, re.S):
        rows = []
        for row in re.findall(r"<tr>(.*?)</tr>", body, re.S):
            cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
            rows.append([html.unescape(re.sub(r"<[^>]+>", " ", c)).split() for c in cells])
        out.append(rows)
    return out


def test_systems_are_rows_with_the_mean_and_sd_of_their_runs(runs30):
    out, page, systems = runs30
    text = page.read_text()
    tidy = pl.read_parquet(out / "metrics.parquet")
    first = text[text.index('id="lb-panel-0"') : text.index('id="lb-panel-1"')]
    main_table, run_table = _tables(first)
    assert [row[0][0] for row in main_table] == list(SYSTEMS)
    assert all(row[0][1:] == ["10", "runs"] for row in main_table)
    assert len(run_table) == len(systems)  # every run, one click away
    assert "<details><summary>Each run (30)</summary>" in first
    # Column 3 is flat micro F1 (Flat P, Flat R, Flat F1): the mean and sd by numpy.
    heads = re.findall(r"<th>(.*?)</th>", first.split("</thead>")[0])
    column = heads.index("Flat F1")
    for row, system in zip(main_table, SYSTEMS, strict=True):
        values = np.array(
            tidy.filter(
                pl.col("model").is_in([m for m, s in systems.items() if s == system])
                & (pl.col("family") == "flat")
                & (pl.col("level") == "leaf")
                & (pl.col("average") == "micro")
                & (pl.col("metric") == "f1")
            )["value"].to_list()
        )
        assert len(values) == RUNS
        assert row[column] == [f"{100 * values.mean():.1f}", "±", f"{100 * values.std(ddof=1):.1f}"]


def test_rare_and_frequent_codes_and_code_kinds_are_shown_per_system(runs30):
    _, page, _ = runs30
    for section_id in ("frequency", "kinds"):
        section = page.read_text().split(f"id='{section_id}'")[1].split("<h2")[0]
        names = [row[0][0] for row in _tables(section)[0]]
        assert names == list(SYSTEMS), section_id
        assert "mean over its runs" in section


def _bold_values(panel: str, heading: str) -> tuple[list[float], list[float]]:
    """The data-values of a column of the panel's first table, and those of its bold cells."""
    table = panel.split("</table>")[0]
    heads = re.findall(r"<th>(.*?)</th>", table.split("</thead>")[0])
    index = heads.index(heading)
    values, bold = [], []
    for row in re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>")[1], re.S):
        cell = re.findall(r"<td([^>]*)>", row)[index]
        found = re.search(r'data-value="([^"]+)"', cell)
        if found:
            values.append(float(found.group(1)))
            if "best" in cell:
                bold.append(float(found.group(1)))
    return values, bold


def test_best_is_bold_in_every_group_and_lowest_for_a_loss(zoo50):
    out, page, _ = zoo50
    text = page.read_text()
    tidy = pl.read_parquet(out / "metrics.parquet")
    panels = dict(
        zip(
            re.findall(r'<label for="lb-tab-\d">(.*?)</label>', text),
            re.split(r'<div class="panel" id="lb-panel-\d">', text)[1:],
            strict=True,
        )
    )
    assert list(panels) == [
        "Set-based and hierarchical", "Ranking", "ICM and suite", "Label and example-based",
        "Calibration",
    ]  # fmt: skip

    def tidy_values(family: str, metric: str, heading: str) -> list[float]:
        average = {"Brier": "micro", "Brier-scored": "scored"}.get(heading)
        rows = tidy.filter((pl.col("family") == family) & (pl.col("metric") == metric))
        if average is not None:  # calibration: over the label space, or the scored pairs
            rows = rows.filter(pl.col("average") == average)
        return rows.filter(pl.col("level").is_in(["overall", "leaf"]))["value"].to_list()

    for tab, heading, family, metric, higher in (
        ("ICM and suite", "ICM", "icm", "icm", True),
        ("Label and example-based", "EB-HAMM", "example", "hamming_loss", False),
        ("ICM and suite", "LCA-F", "lca", "f1", True),
        ("Calibration", "Brier", "calibration", "brier", False),
        ("Calibration", "Brier-scored", "calibration", "brier", False),
        ("Set-based and hierarchical", "CoPHE F1", "cophe", "f1", True),
    ):
        values, bold = _bold_values(panels[tab], heading)
        expected = tidy_values(family, metric, heading)
        if family == "cophe":
            expected = tidy.filter(
                (pl.col("family") == "cophe") & (pl.col("level") == "overall")
                & (pl.col("average") == "micro") & (pl.col("metric") == "f1")
            )["value"].to_list()  # fmt: skip
        assert sorted(values) == sorted(expected), heading
        best = max(expected) if higher else min(expected)
        assert bold and set(bold) == {best}, heading


def test_identical_notes_are_one_line_naming_every_model(runs30):
    out, _, systems = runs30
    summary = (out / "summary.md").read_text()
    notes = [line for line in summary.splitlines() if "hard predictions (no scores)" in line]
    assert len(notes) == 1
    hard = [m for m, s in systems.items() if s != "over_predictor"]
    assert all(f"**{m.replace('_', chr(92) + '_')}**" in notes[0] for m in hard)
    assert "over\\_predictor" not in notes[0]


# --- Figures -------------------------------------------------------------------------------------


def _svg_texts(svg: str) -> list[str]:
    return [html.unescape(t).strip() for t in re.findall(r"<text[^>]*>(.*?)</text>", svg, re.S)]


def test_figures_name_systems_and_highlight_a_few_of_many(runs30, zoo50):
    _, page, _ = runs30
    per_level = (page.parent / "figures" / "per_level.svg").read_text()
    assert [t for t in _svg_texts(per_level) if "_run" in t] == []  # systems, not 30 runs
    assert all(s in _svg_texts(per_level) for s in SYSTEMS)
    out, _, models = zoo50
    per_level = (out / "figures" / "per_level.svg").read_text()
    named = [t for t in _svg_texts(per_level) if t in models]
    assert len(named) == figures.HIGHLIGHTED  # not a 50-entry legend
    # The highlighted ones are the best by CoPHE F1 at the top evaluated level.
    tidy = pl.read_parquet(out / "metrics.parquet").filter(
        (pl.col("family") == "cophe") & (pl.col("level") == "c")
        & (pl.col("average") == "micro") & (pl.col("metric") == "f1")
    ).sort(["value", "model"], descending=[True, False])  # fmt: skip
    assert set(named) == set(tidy["model"][: figures.HIGHLIGHTED])


def test_heatmap_numbers_are_white_on_dark_cells_and_cells_keep_their_size(runs30, zoo50):
    """The number on a cell is white where the cell is dark (above 55 % of the panel's
    largest count) and black elsewhere; 50 columns make the figure wider, not the cells
    narrower."""
    for _, page, *_ in (runs30, zoo50):
        svg = (page.parent / "figures" / "disagreement.svg").read_text()
        texts = re.findall(
            r'<text[^>]*style="([^"]*6\.5px[^"]*)" x="([0-9.]+)"[^>]*>([0-9,]+)</text>', svg
        )
        numbers = [(int(t.replace(",", "")), "#ffffff" in s) for s, _, t in texts]
        assert numbers and len(numbers) % 2 == 0
        assert any(white for _, white in numbers)
        half = len(numbers) // 2  # the over panel's cells, then the under panel's
        for panel in (numbers[:half], numbers[half:]):
            top = max(n for n, _ in panel)
            for number, white in panel:
                # Cells show rounded means: a number at the boundary may go either way.
                assert white == (number > 0.55 * top) or abs(number - 0.55 * top) < 1, number
        # The cells' centres (SVG units are points) are CELL_WIDTH apart, 3 columns or 50.
        xs = sorted({float(x) for _, x, _ in texts[:half]})
        assert len(xs) in (len(SYSTEMS), 50)
        assert np.diff(xs) == pytest.approx(figures.CELL_WIDTH * 72, abs=0.01)


# --- In a browser --------------------------------------------------------------------------------

#: Run in the page: for each leaderboard tab (every <details> opened), whether a leaderboard
#: container or the page scrolls sideways, and every pair of text boxes (HTML text lines and
#: SVG <text>) that overlap by more than a pixel both ways; written into the DOM as JSON.
MEASURE = r"""
(function () {
  function boxes() {
    var out = [];
    var walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    var node;
    while ((node = walker.nextNode())) {
      var text = node.textContent.trim();
      if (!text || node.parentElement.closest("svg, script, style, #measure")) continue;
      var range = document.createRange();
      range.selectNodeContents(node);
      var rects = range.getClientRects();
      for (var i = 0; i < rects.length; i++) {
        var r = rects[i];
        if (r.width > 0 && r.height > 0) out.push([r.left, r.top, r.right, r.bottom, text]);
      }
    }
    document.querySelectorAll("svg text").forEach(function (el) {
      var r = el.getBoundingClientRect();
      if (r.width > 0 && r.height > 0) {
        out.push([r.left, r.top, r.right, r.bottom, el.textContent.trim()]);
      }
    });
    return out;
  }
  function overlaps(list) {
    var found = [];
    list.sort(function (a, b) { return a[1] - b[1]; });
    for (var i = 0; i < list.length; i++) {
      for (var j = i + 1; j < list.length && list[j][1] < list[i][3]; j++) {
        var a = list[i], b = list[j];
        var dx = Math.min(a[2], b[2]) - Math.max(a[0], b[0]);
        var dy = Math.min(a[3], b[3]) - Math.max(a[1], b[1]);
        if (dx > 1 && dy > 1) found.push([a[4].slice(0, 40), b[4].slice(0, 40)]);
      }
    }
    return found;
  }
  var result = {width: window.innerWidth, views: []};
  var radios = Array.prototype.slice.call(document.querySelectorAll(".tabs > input"));
  radios.forEach(function (radio) {
    radio.checked = true;
    document.querySelectorAll("details").forEach(function (d) { d.open = true; });
    var wide = [];
    document.querySelectorAll(".lb").forEach(function (el) {
      if (el.offsetParent !== null && el.scrollWidth > el.clientWidth + 1) {
        wide.push([el.scrollWidth, el.clientWidth]);
      }
    });
    result.views.push({tab: radio.id, page: document.documentElement.scrollWidth,
                       wide: wide, overlaps: overlaps(boxes())});
  });
  var pre = document.createElement("pre");
  pre.id = "measure";
  pre.textContent = JSON.stringify(result);
  document.body.appendChild(pre);
})();
"""


def _measure(page: Path, screen: str, folder: Path) -> dict:
    """What :data:`MEASURE` finds in ``page`` shown in a window of ``screen`` (``W,H``)."""
    probe = folder / f"probe-{screen.replace(',', 'x')}-{page.parent.name}.html"
    probe.write_text(page.read_text().replace("</body>", f"<script>{MEASURE}</script></body>"))
    result = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--window-size={screen}", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    found = re.search(r'<pre id="measure">(.*?)</pre>', result.stdout, re.S)
    assert found, result.stderr[-2000:]
    return json.loads(html.unescape(found.group(1)))


def _assert_fits(measured: dict, screen: str) -> None:
    width = int(screen.split(",")[0])
    assert measured["width"] == width  # the window is the screen asked for
    assert len(measured["views"]) == len(GROUPS)  # every group's tab was looked at
    for view in measured["views"]:
        assert view["wide"] == [], view["tab"]  # no leaderboard table scrolls sideways
        assert view["page"] <= width, view["tab"]  # nor does the page
        assert view["overlaps"] == [], view["tab"]


@needs_chromium
@pytest.mark.parametrize("screen", SCREENS)
def test_30_run_report_fits_the_screen_without_overlapping_text(runs30, screen, tmp_path):
    _, page, _ = runs30
    _assert_fits(_measure(page, screen, tmp_path), screen)


@needs_chromium
@pytest.mark.parametrize("screen", SCREENS)
def test_50_model_report_fits_the_screen_without_overlapping_text(zoo50, screen, tmp_path):
    _, page, _ = zoo50
    _assert_fits(_measure(page, screen, tmp_path), screen)


@needs_chromium
@pytest.mark.parametrize("screen", SCREENS)
def test_golden_zoo_report_with_intervals_fits_the_screen(screen, tmp_path):
    """The golden zoo's report (tests/golden/zoo: scored, tuned, bootstrapped, with training
    frequencies): intervals under every value, and still no sideways scrolling or overlap."""
    page = Path(__file__).parent / "golden" / "zoo" / "report.html"
    copy = tmp_path / "zoo" / "report.html"
    copy.parent.mkdir()
    shutil.copy(page, copy)
    _assert_fits(_measure(copy, screen, tmp_path), screen)


@needs_chromium
def test_the_browser_check_catches_overflow_and_overlap(runs30, tmp_path):
    """The measurement can fail: a leaderboard cell made too wide and a label drawn over
    another are both reported."""
    _, page, _ = runs30
    broken = tmp_path / "broken" / "report.html"
    broken.parent.mkdir()
    text = page.read_text()
    text = text.replace("<td>sibling_confuser", '<td style="min-width:1500px">sibling_confuser', 1)
    text = text.replace(
        "<h2 id='leaderboard'>Leaderboard</h2>",
        "<h2 id='leaderboard'>Leaderboard</h2><p style='position:relative'>one"
        "<span style='position:absolute;left:0;top:0'>two</span></p>",
    )
    broken.write_text(text)
    measured = _measure(broken, SCREENS[0], tmp_path)
    assert measured["views"][0]["wide"]
    assert ["one", "two"] in measured["views"][1]["overlaps"]


# --- Score metrics with their coverage ------------------------------------------------------------


def test_auc_brier_and_ece_are_shown_with_the_share_of_pairs_scored(zoo50):
    """A demo model scored on its own predictions covers about 1 % of the label space's
    pairs: that share (its numerator counted here from the prediction file) stands beside its
    AUC, Brier and ECE in the HTML and in summary.md; hard predictions have no such cells."""
    out, page, _ = zoo50
    model = "over_predictor_v02"
    note = json.loads((out / "work" / "ranking" / f"{model}.json").read_text())
    scored = pl.read_parquet(out.parent / f"{model}.parquet").unique(["doc_id", "code"]).height
    share = scored / note["label_space_pairs"]
    assert 0.005 < share < 0.05  # the point of the test: a small share
    text = page.read_text()
    row = re.search(rf"<tr><td>{model}</td>(.*?)</tr>", text.split('id="lb-panel-1"')[1]).group(1)
    assert row.count(f"scores for {100 * share:.1f} % of pairs") == 2  # micro and macro AUC
    calibration = text.split(f'id="lb-panel-{CALIBRATION_TAB}"')[1]
    row = re.search(rf"<tr><td>{model}</td>(.*?)</tr>", calibration).group(1)
    assert row.count(f"scores for {100 * share:.1f} % of pairs") == 2  # Brier and ECE
    hard = re.search(
        r"<tr><td>sibling_confuser_v01</td>(.*?)</tr>", text.split('id="lb-panel-1"')[1]
    )
    assert "scores for" not in hard.group(1)
    summary = (out / "summary.md").read_text().split("## Scores")[1]
    line = next(
        x for x in summary.splitlines() if x.startswith(f"| {model.replace('_', chr(92) + '_')} |")
    )
    assert line.split(" | ")[1] == f"{100 * share:.1f}"
