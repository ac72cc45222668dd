"""Sources and sinks: interfaces (base), in-memory ones (memory) and files via pyarrow (files)."""
