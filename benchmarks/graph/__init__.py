"""Graph benchmarks: epochal's graph engine against PySpark, NetworkX and scipy.sparse, and the
checkpoint baseline of papers/003 Fig. 2. Run ``python -m benchmarks.graph --help``."""
