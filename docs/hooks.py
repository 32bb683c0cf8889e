"""MkDocs hooks: pages that show what the code declares are rendered from the code.

Why: a table of metrics typed into a page drifts from the registry the moment a metric is
added. The metrics page holds a marker instead, which :func:`on_page_markdown` replaces at
build time with :func:`metric_table`, rendered from :data:`hieval.metrics.registry.REGISTRY`
(``tests/test_docs.py`` checks that the page keeps the marker and that the table lists every
registered metric).
"""

from __future__ import annotations

from hieval.metrics.registry import REGISTRY, Metric

#: Where a page asks for the registry's table.
METRIC_TABLE_MARKER = "<!-- hieval:metric-table -->"

COLUMNS = ("family", "average", "metric", "levels", "paper name", "better", "from", "definition")


def _cell(text: str) -> str:
    """Text as one Markdown table cell: a ``|`` inside a formula (``|L|``) would end the cell."""
    return text.replace("|", "\\|")


def _row(metric: Metric) -> str:
    cells = (
        f"`{metric.family}`",
        f"`{metric.average}`",
        f"`{metric.metric}`",
        metric.level,
        metric.paper or "",
        "higher" if metric.higher_is_better else "lower",
        metric.source,
        metric.formula,
    )
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def metric_table() -> str:
    """Every registered metric, one row each, in the tidy table's order."""
    header = "| " + " | ".join(COLUMNS) + " |"
    rule = "|" + "---|" * len(COLUMNS)
    return "\n".join([header, rule, *(_row(m) for m in REGISTRY)])


def on_page_markdown(markdown: str, **_kwargs) -> str:
    """MkDocs event: replace the registry marker with the rendered table."""
    return markdown.replace(METRIC_TABLE_MARKER, metric_table())
