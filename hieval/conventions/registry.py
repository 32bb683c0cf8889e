"""The conventions hieval computes, by name, each with where its definitions come from.

The names are the interface (config ``conventions``, ``--conventions``, the API's
``conventions=``, the ``convention`` column of ``conventions.parquet``); the order is the order
of the rows.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Convention:
    """A named set of choices: ``source`` says whose code defines it."""

    name: str
    source: str


CONVENTIONS = {
    c.name: c
    for c in (
        Convention("hieval", "hieval's own definitions (docs/metrics.md)"),
        Convention("caml", "Mullenbach et al. 2018, jamesmullenbach/caml-mimic evaluation.py"),
        Convention(
            "edin",
            "Edin et al. 2023, JoakimEdin/medical-coding-reproducibility src/metrics.py "
            "(filter_codes: codes with a positive in the gold)",
        ),
        Convention(
            "edin_mullenbach",
            "Edin et al. 2023, the same code without filter_codes (names ending _mullenbach)",
        ),
    )
}
NAMES = tuple(CONVENTIONS)

#: The layouts of tables.tex/.md (config ``report.paper_table``, ``--paper-table``, the API's
#: ``paper_table=``), each with the convention its cells are computed under: the CoPHE paper's
#: (hieval's own rows; the default), Mullenbach et al.'s, Edin et al.'s.
PAPER_TABLES = {"cophe": "hieval", "caml": "caml", "edin": "edin"}
DEFAULT_PAPER_TABLE = "cophe"
