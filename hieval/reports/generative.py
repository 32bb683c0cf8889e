"""Each model's invented and malformed codes: the share of its predicted rows that are not codes
of the release (non-existent) or not codes at all (invalid), with a few examples (issue 34).

Read from the input records (:class:`hieval.inputs.record.InputRecord`), shown in
``summary.md`` and the HTML report only when a run counts such codes (``unknown_codes: count``
or ``malformed_codes: count``): a run under the default policies reads exactly as before.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

#: Examples shown per model and kind (the input record lists every one).
EXAMPLES = 3


@dataclass(frozen=True)
class CodeRates:
    """One model's rows, and of them the rows with an invalid or a non-existent code."""

    model: str
    rows: int
    invalid: int
    nonexistent: int
    invalid_examples: tuple[str, ...]
    nonexistent_examples: tuple[str, ...]

    def share(self, count: int) -> float:
        return count / self.rows if self.rows else 0.0


def counts_codes(record: dict) -> bool:
    """Whether this file was read under a policy that counts invalid or non-existent codes."""
    return "count" in (record.get("unknown_code_policy"), record.get("malformed_code_policy"))


def code_rates(records: list[dict]) -> list[CodeRates]:
    """The rates of each prediction file read under a counting policy (none otherwise)."""
    rates = []
    for record in records:
        if not counts_codes(record) or record.get("name") == "gold":
            continue
        invalid = record.get("invalid_codes") or {}
        unknown = record.get("unknown_codes") or {}
        rates.append(
            CodeRates(
                model=record["name"],
                rows=int(record.get("rows") or 0),
                invalid=sum(invalid.values()),
                nonexistent=sum(unknown.values()),
                invalid_examples=tuple(sorted(invalid, key=lambda c: (-invalid[c], c))[:EXAMPLES]),
                nonexistent_examples=tuple(
                    sorted(unknown, key=lambda c: (-unknown[c], c))[:EXAMPLES]
                ),
            )
        )
    return rates


def _examples(codes: tuple[str, ...]) -> str:
    return ", ".join(repr(c) for c in codes)


_TITLE = "Invented and malformed codes"
_NOTE = (
    "Share of each model's predicted rows whose code is not a code of the release "
    "(non-existent) or not a code at all (invalid): each is a false positive at the leaf "
    "level and at no other level."
)


def rates_markdown(records: list[dict], md) -> list[str]:
    """The summary's small table (``md`` escapes a cell); no lines when nothing is counted."""
    rates = code_rates(records)
    if not rates:
        return []
    lines = ["", f"## {_TITLE}", "", _NOTE, ""]
    lines += [
        "| Model | Rows | Invalid | Non-existent | Examples |",
        "|---|---:|---:|---:|---|",
    ]
    for r in rates:
        examples = "; ".join(
            e for e in (_examples(r.invalid_examples), _examples(r.nonexistent_examples)) if e
        )
        lines.append(
            f"| {md(r.model)} | {r.rows:,} | {100 * r.share(r.invalid):.1f} % | "
            f"{100 * r.share(r.nonexistent):.1f} % | {md(examples)} |"
        )
    return lines


def rates_html(records: list[dict]) -> str:
    """The report's small table; "" when nothing is counted."""
    rates = code_rates(records)
    if not rates:
        return ""
    head = "".join(
        f"<th>{h}</th>"
        for h in ("Model", "Rows", "Invalid", "Non-existent", "Invalid e.g.", "Non-existent e.g.")
    )
    body = "".join(
        "<tr>"
        f"<td>{html.escape(r.model)}</td><td>{r.rows:,}</td>"
        f"<td>{100 * r.share(r.invalid):.1f} %</td>"
        f"<td>{100 * r.share(r.nonexistent):.1f} %</td>"
        f"<td class='text'>{html.escape(_examples(r.invalid_examples))}</td>"
        f"<td class='text'>{html.escape(_examples(r.nonexistent_examples))}</td>"
        "</tr>"
        for r in rates
    )
    return (
        f"<h2 id='invented-codes'>{_TITLE}</h2><p class='note'>{html.escape(_NOTE)}</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    )
