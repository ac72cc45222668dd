"""The compiled parts of epochal, both optional: without a C compiler the build goes on without
them and the same work is done in Python instead (slower, the same results):

* ``epochal.state.rocksdb._native``: the native reader of RocksDB checkpoints for canonical
  savepoints (``epochal/state/rocksdb/native.py``);
* ``epochal.dataflow.queries._answer``: the native answer path of a worker's query server, for a
  lone read_uncommitted lookup of a heap state (``epochal/dataflow/queries/native.py``).

Everything else is in pyproject.toml."""

from setuptools import Extension, setup

FLAGS = ["-O2", "-std=c99", "-Wall"]

setup(ext_modules=[
    Extension("epochal.state.rocksdb._native", ["src/epochal/state/rocksdb/_native.c"],
              libraries=["dl"], extra_compile_args=FLAGS, optional=True),
    Extension("epochal.dataflow.queries._answer", ["src/epochal/dataflow/queries/_answer.c"],
              extra_compile_args=FLAGS, optional=True),
])
