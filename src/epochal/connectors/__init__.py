"""Sources and sinks. What every connector shares lives here: the interfaces (base), the
in-memory connectors (memory), which files a source path names and rows of Arrow data
(file_splits), a Parquet file read as a split (parquet_split) and the worker side of
``Environment.from_dataframe`` (dataframe_source). Each external system has a sub-package: files
via pyarrow (files), Kafka via confluent-kafka (kafka), Delta Lake via deltalake (delta) and
PostgreSQL via psycopg 3 (postgres). User code imports a connector from its sub-package.

The sub-packages are independent of each other: each may import the shared modules here, never
another sub-package, and the shared modules import no sub-package (tests/unit/test_layering.py)."""
