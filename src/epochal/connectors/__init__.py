"""Sources and sinks: interfaces (base), in-memory ones (memory), files via pyarrow (files, which
re-exports the sources of text_file_source and table_file_sources and the sinks of file_sinks),
Delta Lake via deltalake (delta_source, delta_sink, delta_tables), PostgreSQL via psycopg 3
(postgres_sink, postgres_sql) and the worker side of ``Environment.from_dataframe``
(dataframe_source)."""
