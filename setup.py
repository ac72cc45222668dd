"""The one compiled part of epochal: the native reader of RocksDB checkpoints for canonical
savepoints (``epochal.state._rocksdb_native``, see ``epochal/state/rocksdb_native.py``). It is
optional: without a C compiler the build goes on without it and RocksDB's canonical savepoints
are read in Python instead (slower, the same files). Everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("epochal.state._rocksdb_native", ["src/epochal/state/_rocksdb_native.c"],
                             libraries=["dl"], extra_compile_args=["-O2", "-std=c99", "-Wall"],
                             optional=True)])
