"""The "Conventions" section of summary.md: each model's headline metrics under each named
convention side by side (from conventions.parquet), one sentence for each difference from
hieval's own numbers saying why it differs, and what the conventions were computed over."""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from hieval.reports.escaping import markdown as md

#: The headline columns: title and, per convention, the metric's name in conventions.parquet
#: (``{k}``: the K of the @K column).
COLUMNS = {
    "Micro F1": {
        "hieval": "f1_micro",
        "caml": "f1_micro",
        "edin": "f1_micro",
        "edin_mullenbach": "f1_micro_mullenbach",
    },
    "Macro F1": {
        "hieval": "f1_macro",
        "caml": "f1_macro",
        "edin": "f1_macro",
        "edin_mullenbach": "f1_macro_mullenbach",
    },
    "Micro AUC": {
        "hieval": "auc_micro",
        "caml": "auc_micro",
        "edin": "auc_micro",
        "edin_mullenbach": "auc_micro_mullenbach",
    },
    "Macro AUC": {
        "hieval": "auc_macro",
        "caml": "auc_macro",
        "edin": "auc_macro",
        "edin_mullenbach": "auc_macro_mullenbach",
    },
    "P@K": {
        "hieval": "precision@{k}",
        "caml": "prec_at_{k}",
        "edin": "precision@{k}",
        "edin_mullenbach": "precision@{k}_mullenbach",
    },
}

_SPACE = "over the label space's full matrix, unscored pairs scoring 0"
#: Why a convention's value differs from hieval's, by (convention, column).
WHY = {
    ("caml", "Micro F1"): "caml leaves out the codes outside its label space.",
    ("caml", "Macro F1"): (
        "caml's macro-F1 is the harmonic mean of macro precision and macro recall over every "
        "label of its label space (a label neither predicted nor gold counts 0, 1e-10 guards); "
        "hieval's `macro` is the mean of per-code F1 over the codes with gold or a prediction."
    ),
    ("edin", "Micro F1"): (
        "edin keeps only the codes with a positive in the gold (filter_codes), so false "
        "positives on other codes do not count, and decides score > threshold (hieval: >=)."
    ),
    ("edin", "Macro F1"): (
        "edin averages per-code F1 over the codes with a positive in the gold only "
        "(filter_codes), deciding score > threshold (hieval: >=)."
    ),
    ("edin_mullenbach", "Micro F1"): (
        "edin_mullenbach decides score > threshold where hieval decides score >= threshold."
    ),
    ("edin_mullenbach", "Macro F1"): (
        "edin_mullenbach averages per-code F1 over every code of its label space (a code "
        "neither predicted nor gold counts 0), deciding score > threshold."
    ),
    ("caml", "Micro AUC"): f"caml's micro AUC runs {_SPACE}; hieval's over the gold's and the "
    "scored codes.",
    ("edin", "Micro AUC"): f"Edin et al.'s micro AUC runs {_SPACE} (filter_codes or not).",
    ("caml", "Macro AUC"): (
        "caml and Edin et al. average AUC over the label space's codes with a positive "
        "(unscored pairs scoring 0); hieval over the codes with a positive and a negative, "
        "unscored pairs tied below every score."
    ),
    ("caml", "P@K"): (
        "caml's prec_at_K takes the top K as numpy's argsort orders tied scores (hieval: ties "
        "by code) from the label space's codes only."
    ),
    ("edin", "P@K"): (
        "edin's precision@K ranks only the codes with a positive in the gold, over the "
        "documents with one (filter_codes)."
    ),
    ("edin_mullenbach", "P@K"): (
        "edin_mullenbach's precision@K ranks the label space's codes, ties by code, dividing "
        "by K + 1e-10."
    ),
}
WHY[("edin", "Macro AUC")] = WHY[("edin_mullenbach", "Macro AUC")] = WHY[("caml", "Macro AUC")]
WHY[("edin_mullenbach", "Micro AUC")] = WHY[("edin", "Micro AUC")]
#: A difference below this (half the last digit shown) is no difference.
SHOWN = 0.0005


def _k(values: dict) -> int | None:
    """The K of the P@K column: 8 (CAML's and Edin et al.'s headline) when hieval has it,
    else hieval's smallest."""
    ks = sorted(int(m.split("@")[1]) for (c, m) in values if c == "hieval" and "precision@" in m)
    return 8 if 8 in ks else (ks[0] if ks else None)


def side_by_side(
    table: pl.DataFrame, models: list[str]
) -> tuple[list[tuple[str, str, list[float | None]]], list[str]]:
    """Each model's headline values under each convention, ``(model, convention, values in
    COLUMNS' order)``, and the sentences saying why a value differs from hieval's own (each
    once, for the differences the table shows). summary.md and the HTML report both show
    them."""
    conventions = table["convention"].unique(maintain_order=True).to_list()
    rows, differs = [], set()
    for model in models:
        frame = table.filter(pl.col("model") == model)
        values = {(r["convention"], r["metric"]): r["value"] for r in frame.iter_rows(named=True)}
        k = _k(values)
        for convention in conventions:
            cells = []
            for title, names in COLUMNS.items():
                value = values.get((convention, names[convention].format(k=k)))
                own = values.get(("hieval", names["hieval"].format(k=k)))
                cells.append(value)
                if value is not None and own is not None and abs(value - own) >= SHOWN:
                    differs.add((convention, title))
            rows.append((model, convention, cells))
    why = list(dict.fromkeys(WHY[key] for key in WHY if key in differs))
    return rows, why


def conventions_markdown(
    table: pl.DataFrame, notes: dict[str, dict], models: list[str]
) -> list[str]:
    """The section's lines (none for an empty table)."""
    if table.height == 0:
        return []
    lines = [
        "",
        "## Conventions",
        "",
        "The headline metrics as each paper's code computes them (conventions.parquet, "
        "percentages; docs/conventions.md).",
        "",
        "| Model | Convention | " + " | ".join(COLUMNS) + " |",
        "|---|---|" + "---:|" * len(COLUMNS),
    ]
    rows, why = side_by_side(table, models)
    for model, convention, values in rows:
        cells = ["-" if value is None else f"{100 * value:.1f}" for value in values]
        lines.append(f"| {md(model)} | {convention} | " + " | ".join(cells) + " |")
    if why:
        lines += ["", "Why they differ from hieval's:", ""]
        lines += [f"- {sentence}" for sentence in why]
    said = [f"- {md(model)}: {note_text(notes[model])}" for model in models if notes.get(model)]
    if said:
        lines += ["", *said]
    return lines


def note_text(note: dict, escape: Callable[[str], str] = md) -> str:
    """What one model's caml and edin values were computed over (its label space, the pairs
    left outside it, Edin et al.'s decisions), as a sentence; ``escape`` makes a name safe for
    the format shown."""
    if note.get("left_out"):
        return f"{escape(note['left_out'])}."
    space = note.get("label_space", "observed")
    over = (
        f"the {note['codes']:,} codes observed in the gold and its predictions (no label space "
        "given)"
        if space == "observed"
        else f"the {note['codes']:,} codes of {escape(space)}"
    )
    left = [f"{n:,} {what} pairs" for what, n in (note.get("outside") or {}).items() if n]
    threshold = note.get("threshold")
    if not note.get("scored", True):
        decides = "Edin et al.'s decisions: the listed codes (no scores)"
    elif threshold is not None:
        decides = f"Edin et al.'s decisions: score > {threshold:g}"
    else:
        decides = "Edin et al.'s decisions: the decided set as it is (no global threshold)"
    text = f"caml and edin over {over}"
    if left:
        text += f"; {' and '.join(left)} with a code outside it left out"
    return f"{text}. {decides}."
