"""What every benchmark uses, in one place (issue 56: one home per concern).

* :mod:`benchmarks.common.stats` -- percentiles, medians, and ratios of throughputs with their
  confidence intervals (the geometric mean of paired ratios; the start-up subtraction of the peer
  benchmarks).

The package imports nothing by itself, and :mod:`~benchmarks.common.stats` imports only the
standard library at import time (scipy when a function needs it), so that a runner in a peer's
virtualenv can use it.
"""
