"""User-facing builders: Environment, DataStream, KeyedStream and function types."""
