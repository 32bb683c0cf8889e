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


#: How much of a user's value a message quotes; the rest is counted, not shown.
VALUE_CHARS = 60


def preview_value(value: object, limit: int = VALUE_CHARS) -> str:
    """A user's value as a message quotes it: ``repr`` for text, cut to its first ``limit``
    characters with the full length said, e.g. ``'a note pasted as an id…' (10000 characters)``.

    Why: a message is one line that names the value; a 10,000-character document id (a note in
    the id column) would bury the line and flood a log.
    """
    if not isinstance(value, str):
        return str(value)
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}… ({len(value)} characters)"


def preview(items, limit: int = 10) -> str:
    """Render up to ``limit`` offending values (each cut by :func:`preview_value`) and how many
    more there are.

    Error messages name examples instead of dumping thousands of codes.
    """
    items = list(items)
    shown = ", ".join(preview_value(i) for i in items[:limit])
    more = len(items) - limit
    return shown + (f" (and {more} more)" if more > 0 else "")
