"""User-facing errors.

Every problem a user can fix (bad file, bad code, bad config) raises a subclass of
:class:`HievalError` whose message names the file, the row or code, and what to do. The CLI and
the workflow scripts print that message alone, without a traceback, and exit non-zero.
"""


class HievalError(Exception):
    """A problem with the user's input or configuration, explained in the message."""


class CodeError(HievalError):
    """A label code that is malformed, ambiguous, or absent from the hierarchy."""


class HierarchyError(HievalError):
    """A hierarchy that is not a tree, misses codes, or cannot be obtained."""


class InputError(HievalError, ValueError):
    """A gold or prediction file that cannot be read, fails validation, or exceeds what the
    engine can count at once. Also a ``ValueError``, so library callers may catch either."""


class ConfigError(HievalError, ValueError):
    """A setting (config key, command-line option or parameter) that hieval refuses."""


def preview(items, limit: int = 10) -> str:
    """Render up to ``limit`` offending values and how many more there are.

    Error messages name examples instead of dumping thousands of codes.
    """
    items = list(items)
    shown = ", ".join(repr(i) if isinstance(i, str) else str(i) for i in items[:limit])
    more = len(items) - limit
    return shown + (f" (and {more} more)" if more > 0 else "")
