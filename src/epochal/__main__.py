"""``python -m epochal ...``: the ``epochal`` command line (:mod:`epochal.cli`)."""

from __future__ import annotations

import sys

from epochal.cli import main

if __name__ == "__main__":
    sys.exit(main())
