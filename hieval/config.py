"""The model sheet: read it, validate every row against its JSON schema, explain what is wrong.

A typo in a sheet of fifty models must fail before any work starts, naming the row and column,
not an hour later inside a cluster job.
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import yaml

from hieval.errors import InputError
from hieval.inputs import LabelOptions

_NUMERIC = {"threshold": float, "top_k": int}


@dataclass(frozen=True)
class ModelSpec:
    """One model of the zoo."""

    model: str
    predictions: str
    threshold: float | None = None
    top_k: int | None = None
    format: str | None = None
    code_list: str | None = None
    doc_list: str | None = None
    code_format: str | None = None
    code_type: str | None = None
    description: str | None = None

    def options(self) -> LabelOptions:
        """How to read this model's prediction file."""
        return LabelOptions(
            code_type=self.code_type,
            code_format=self.code_format or "auto",
            threshold=self.threshold,
            top_k=self.top_k,
            format=self.format or "auto",
            code_list=self.code_list,
            doc_list=self.doc_list,
        )

    def files(self) -> dict[str, str]:
        """Every file this model's evaluation reads, for the workflow to track."""
        named = {"labels": self.predictions, "code_list": self.code_list, "doc_list": self.doc_list}
        return {k: v for k, v in named.items() if v}


def code_fingerprint() -> str:
    """sha256 over hieval's own source and data files, so results can name the code behind them."""
    root = Path(__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".tsv") and "__pycache__" not in path.parts:
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _convert(value: str, column: str, where: str):
    if value is None or value.strip() == "":
        return None
    value = value.strip()
    if column not in _NUMERIC:
        return value
    try:
        return _NUMERIC[column](value)
    except ValueError:
        kind = "a whole number" if column == "top_k" else "a number"
        raise InputError(f"{where}: column {column!r} must be {kind}, got {value!r}") from None


def load_model_sheet(path: str | Path, schema_path: str | Path) -> list[ModelSpec]:
    """Read and validate the model sheet (TSV with a header)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"model sheet {path} does not exist; set `models` in your config")
    schema = yaml.safe_load(Path(schema_path).read_text("utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t")
        header = next(reader, None)
        if not header:
            raise InputError(f"model sheet {path} is empty; it needs a header 'model\tpredictions'")
        header = [h.strip() for h in header]
        if len(set(header)) != len(header):
            raise InputError(f"model sheet {path}: duplicated column in header {header}")
        allowed = list(schema["properties"])
        missing = [c for c in schema.get("required", []) if c not in header]
        unknown = [c for c in header if c not in allowed]
        if missing or unknown:
            raise InputError(
                f"model sheet {path}, line 1: "
                + (f"missing column(s) {missing}" if missing else "")
                + ("; " if missing and unknown else "")
                + (f"unknown column(s) {unknown}" if unknown else "")
                + f"; the columns are {allowed} (model and predictions required)"
            )
        specs, seen = [], {}
        for line, cells in enumerate(reader, start=2):
            if not any(c.strip() for c in cells):
                continue
            where = f"model sheet {path}, line {line}"
            if len(cells) > len(header):
                raise InputError(f"{where}: {len(cells)} fields but the header has {len(header)}")
            row = {col: _convert(val, col, where) for col, val in zip(header, cells, strict=False)}
            row = {k: v for k, v in row.items() if v is not None}
            errors = sorted(validator.iter_errors(row), key=lambda e: list(e.path))
            if errors:
                err = errors[0]
                column = err.path[0] if err.path else ", ".join(schema.get("required", []))
                raise InputError(f"{where}, column {column!r}: {err.message}")
            name = row["model"]
            if name in seen:
                raise InputError(
                    f"{where}: model {name!r} is already defined on line {seen[name]}; "
                    "model names must be unique"
                )
            seen[name] = line
            if Path(row["predictions"]).is_dir():
                raise InputError(
                    f"{where}: predictions {row['predictions']!r} is a directory; "
                    "point it at a prediction file"
                )
            specs.append(ModelSpec(**row))
    if not specs:
        raise InputError(f"model sheet {path} lists no models")
    return specs
