"""What every benchmark uses, in one place (issue 56: one home per concern).

* :mod:`benchmarks.common.stats` -- percentiles, medians, and ratios of throughputs with their
  confidence intervals (the geometric mean of paired ratios; the start-up subtraction of the peer
  benchmarks);
* :mod:`benchmarks.common.results` -- the results directory, CSV files with a header (written and
  read back), the plots' matplotlib, colours and saving, and the one-line descriptions of the
  machine and its load printed beside them;
* :mod:`benchmarks.common.isolation` -- keeping runs apart: fresh processes (in the peers' own
  virtualenvs), their process trees watched, paused and killed, a private job registry, and the
  rotating order that interleaves configurations;
* :mod:`benchmarks.common.measure` -- what one run measures: wall time, peak memory, the
  JobMaster's events, a running job's throughput, the CPU of process trees;
* :mod:`benchmarks.common.noise` -- how busy and how fast the machine is beside a run: other
  processes' CPU, a wait for a quiet machine, and speed probes on every core.

The package imports nothing by itself, and :mod:`~benchmarks.common.stats` and
:mod:`~benchmarks.common.results` import only the standard library at import time (matplotlib,
psutil and scipy when a function needs them), so that a runner in a peer's virtualenv can use them.
"""
