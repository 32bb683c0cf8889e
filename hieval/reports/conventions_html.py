"""The HTML report's "Conventions" section: each model's headline metrics under each named
convention side by side, the sentences saying why a value differs from hieval's own, what the
caml and edin values were computed over, and Edin et al.'s McNemar tests when the run has
them. The same content as summary.md's section (:mod:`hieval.reports.conventions` decides
it); this module only writes it as HTML."""

from __future__ import annotations

import html

import polars as pl

from hieval.reports.conventions import COLUMNS, note_text, side_by_side


def _esc(value: object) -> str:
    return html.escape(str(value))


def render(
    conventions: tuple[pl.DataFrame, dict[str, dict]] | None,
    *,
    models: list[str],
    tests: pl.DataFrame | None = None,
) -> str:
    """The section (empty without conventions rows): ``conventions`` is conventions.parquet and
    its notes, ``tests`` conventions_tests.parquet."""
    if conventions is None or conventions[0].height == 0:
        return ""
    table, notes = conventions
    rows, why = side_by_side(table, models)
    head = "".join(f"<th>{_esc(h)}</th>" for h in ("Model", "Convention", *COLUMNS))
    body = "".join(
        f"<tr><td>{_esc(model)}</td><td class='text'>{_esc(convention)}</td>"
        + "".join(
            "<td>–</td>" if v is None else f"<td data-value='{v!r}'>{100 * v:.1f}</td>"
            for v in values
        )
        + "</tr>"
        for model, convention, values in rows
    )
    parts = [
        "<h2 id='conventions'>Conventions</h2><p class='note'>The headline metrics (%) as each "
        "paper's code computes them (conventions.parquet; docs/conventions.md): hieval's own, "
        "CAML's (caml), Edin et al.'s (edin, and edin_mullenbach without their code filter).</p>",
        f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody>"
        "</table></div>",
    ]
    if why:
        items = "".join(f"<li>{_esc(sentence)}</li>" for sentence in why)
        parts.append(f"<p>Why they differ from hieval's:</p><ul class='why'>{items}</ul>")
    said = [
        f"<li>{_esc(model)}: {_esc(note_text(notes[model], escape=str))}</li>"
        for model in models
        if notes.get(model)
    ]
    if said:
        parts.append(f"<ul class='note'>{''.join(said)}</ul>")
    parts.append(_tests(tests))
    return "".join(parts)


def _tests(tests: pl.DataFrame | None) -> str:
    """Edin et al.'s McNemar test of each pair of models (Bonferroni-adjusted), said to stand
    beside the paired randomization test, not for it."""
    if tests is None or tests.height == 0:
        return ""
    rows = "".join(
        f"<tr><td>{_esc(r['model_a'])}</td><td class='text'>{_esc(r['model_b'])}</td>"
        f"<td>{r['only_a_correct']:,}</td><td>{r['only_b_correct']:,}</td>"
        f"<td>{r['statistic']:.4g}</td><td>{r['p_value']:.3g}</td>"
        f"<td>{r['p_bonferroni']:.3g}</td></tr>"
        for r in tests.iter_rows(named=True)
    )
    head = "".join(
        f"<th>{h}</th>"
        for h in ("Model A", "Model B", "Only A right", "Only B right", "χ²", "p", "p × pairs")
    )
    return (
        "<h3>McNemar's test (Edin et al.)</h3><p class='note'>Each pair of models on their "
        "code-document decisions (score &gt; threshold), continuity-corrected, with the "
        "Bonferroni-adjusted p (conventions_tests.parquet). It tests whether the two models err "
        "on different cells, not whether a metric differs: hieval's paired randomization test "
        "(comparisons.parquet, with a bootstrap) answers that.</p>"
        f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody>"
        "</table></div>"
    )
