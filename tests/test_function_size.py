"""No function in ``hieval/`` is longer than 80 lines (issue 32: small functions), so that the
limit cannot drift; ruff checks complexity (C901) and parameters (PLR0913), not length.

A function's length is counted from its ``def`` line to its last line, signature included
(a long signature is a function that takes too much), its docstring excluded (documentation is
not code, and the public API's ``hieval.evaluate`` documents its 40 keywords there), nested
functions included in their parent; decorators are not counted. Measured with ``ast``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 80


def _docstring_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    first = node.body[0]
    is_doc = (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    )
    return first.end_lineno - first.lineno + 1 if is_doc else 0


def function_lengths(source: str) -> list[tuple[str, int, int]]:
    """(name, first line, length) of every function and method in ``source``, as counted
    above."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = node.end_lineno - node.lineno + 1 - _docstring_lines(node)
            out.append((node.name, node.lineno, length))
    return out


def test_no_function_in_hieval_is_longer_than_the_limit():
    long = [
        f"{path.relative_to(ROOT)}:{line} {name} ({length} lines)"
        for path in sorted((ROOT / "hieval").rglob("*.py"))
        for name, line, length in function_lengths(path.read_text("utf-8"))
        if length > LIMIT
    ]
    assert long == [], f"functions over {LIMIT} lines (docstring excluded): split them"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("    return 1\n", 2),  # def line + body
        ('    """Doc\n    string."""\n    return 1\n', 2),  # the docstring is not counted
        ("    x = 1\n" * 80, 81),  # one over the limit
        ("    def inner():\n        return 1\n    return inner\n", 4),
    ],
)
def test_lengths_are_counted_as_documented(body, expected):
    (name, line, length), *_ = function_lengths("def f(\n    a,\n):\n" + body)
    assert (name, line) == ("f", 1)
    assert length == expected + 2  # the signature's two further lines count
