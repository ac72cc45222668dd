"""Sources and sinks. What every connector shares lives here: the interfaces (base), the
in-memory connectors (memory), which files a source path names and rows of Arrow data
(file_splits), a Parquet file read as a split (parquet_split) and the worker side of
``Environment.from_dataframe`` (dataframe_source). Each external system has a sub-package: files
via pyarrow (files), Kafka via confluent-kafka (kafka), Delta Lake via deltalake (delta);
PostgreSQL via psycopg 3 (postgres_sink, postgres_sql) is in modules here still."""
