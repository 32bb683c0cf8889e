"""``python -m hieval``: the command line, as the ``hieval`` script runs it."""

import sys

from hieval.console import main

if __name__ == "__main__":
    sys.exit(main())
