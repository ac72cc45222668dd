"""Sources and sinks: interfaces (base), in-memory ones (memory) and files via pyarrow (files, which
re-exports the sources of text_file_source and table_file_sources and the sinks of file_sinks)."""
