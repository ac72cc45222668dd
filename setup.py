"""The compiled parts of epochal, all optional: without a C compiler the build goes on without
them and the same work is done in Python instead (slower, the same results):

* ``epochal.state.rocksdb._native``: the native reader of RocksDB checkpoints for canonical
  savepoints (``epochal/state/rocksdb/native.py``);
* ``epochal.dataflow.queries._answer``: the native answer path of a worker's query server, for a
  lone read_uncommitted lookup of a heap state (``epochal/dataflow/queries/native.py``);
* ``epochal.plan._column_keygroups``: the key groups of a batch's Arrow key columns, hashed from
  their buffers without a Python call per row (``epochal/plan/column_keygroups.py``).

Everything else is in pyproject.toml."""

from setuptools import Extension, setup

FLAGS = ["-O2", "-std=c99", "-Wall"]
#: the hash of key groups both key-group extensions include (and the sdist ships: MANIFEST.in)
MURMUR3 = "src/epochal/_murmur3.h"

setup(ext_modules=[
    Extension("epochal.state.rocksdb._native", ["src/epochal/state/rocksdb/_native.c"],
              libraries=["dl"], extra_compile_args=FLAGS, optional=True),
    Extension("epochal.dataflow.queries._answer", ["src/epochal/dataflow/queries/_answer.c"],
              depends=[MURMUR3], extra_compile_args=FLAGS, optional=True),
    Extension("epochal.plan._column_keygroups", ["src/epochal/plan/_column_keygroups.c"],
              depends=[MURMUR3], extra_compile_args=FLAGS, optional=True),
])
