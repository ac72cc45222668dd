"""``python -m epochal.graph``: the graph command line, the same as ``epochal graph``
(:mod:`epochal.cli.graph`). An entry point, so it may import the command line."""

import sys

from epochal.cli.graph import main

if __name__ == "__main__":
    sys.exit(main())
