"""User text made inert in each format hieval writes: LaTeX, Markdown and CSV cells.

System names, run names, node codes and titles (a user's own tree holds any text) and file
names reach the reports. Written raw, ``X \\input{/etc/hostname}`` makes pdflatex read a file,
``%`` or ``&`` break the table, ``|`` splits a Markdown row, ``<b>`` becomes HTML, and a cell
``=HYPERLINK(...)`` runs as a formula when the CSV is opened in a spreadsheet. Each writer sends
every user string through the one function of its format here, so a string is shown as written
and never acts.
"""

from __future__ import annotations

import re

import polars as pl

#: LaTeX's special characters and how each is written as text.
_LATEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    # not special, but the default (OT1) fonts print them as other glyphs (¡ ¿ —)
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
}
_LATEX_SPECIAL = re.compile(r"[\\&%$#_{}~^<>|]")
#: Line breaks (and other control characters) would end a table row or a paragraph.
_BREAKS = re.compile(r"[\x00-\x1f\x7f]+")


def latex(text: str) -> str:
    """``text`` as LaTeX that prints it literally (one pass, so a replacement's own braces are
    never escaped again); line breaks become spaces."""
    return _LATEX_SPECIAL.sub(lambda m: _LATEX[m.group()], _BREAKS.sub(" ", str(text)))


#: Markdown's (CommonMark and GitHub's) characters that start emphasis, code, links, HTML,
#: entities, math or strikethrough, or split a table cell; a backslash before any ASCII
#: punctuation makes it literal.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>|&$~])")


def markdown(text: str) -> str:
    """``text`` as Markdown that renders it literally, safe inside a table cell; line breaks
    become spaces."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", _BREAKS.sub(" ", str(text)))


#: What a spreadsheet reads as the start of a formula (OWASP's list: ``= + - @``, tab and
#: carriage return).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with every text cell that starts like a formula prefixed with a single quote,
    as OWASP recommends (the cell then reads ``'=1+1`` and never runs). Numbers (``-0.5``) are
    numeric columns and stay numbers."""
    starts = "^[" + re.escape("".join(FORMULA_STARTS)) + "]"
    return frame.with_columns(
        pl.when(pl.col(name).cast(pl.String).str.contains(starts))
        .then(pl.lit("'") + pl.col(name).cast(pl.String))
        .otherwise(pl.col(name).cast(pl.String))
        .alias(name)
        for name, dtype in frame.schema.items()
        if dtype in (pl.String, pl.Categorical, pl.Enum)
    )
