"""papers/002 (continuous eventual checkpointing) §IV on epochal's ``cec`` job kind, and a
recovery comparison of CEC, CRB and ABS: ``python -m benchmarks.cec <experiment>`` (see
:mod:`benchmarks.cec.__main__` and ``docs/cec_benchmarks.md``)."""
