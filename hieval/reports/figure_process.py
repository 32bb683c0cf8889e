"""Imported by the figure workers' fork server (:mod:`hieval.reports.drawing`) before it forks
a worker: every module a figure needs, pyplot ready on the Agg backend, so that a worker forked
at the report's end draws at once instead of importing matplotlib first.

Ctrl-C is the run's to handle: the server ignores it from here on (it would otherwise print a
traceback from the middle of these imports). A worker runs the main module again as
``__mp_main__`` (:mod:`multiprocessing`'s rule); with ``python -m hieval.cli`` Python warns
that the module is imported already, which is what the server arranged on purpose.
"""

import signal
import warnings

signal.signal(signal.SIGINT, signal.SIG_IGN)
from hieval.reports.drawing import die_with_parent  # noqa: E402

die_with_parent()  # the server ends with the run, even a run killed outright
warnings.filterwarnings(
    "ignore", message=r"'hieval\.[\w.]+' found in sys\.modules", category=RuntimeWarning
)

from hieval.reports import changes, error_sections, figures  # noqa: E402

figures._pyplot()

__all__ = ["changes", "error_sections", "figures"]
