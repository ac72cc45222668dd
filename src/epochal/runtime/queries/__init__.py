"""Queryable state, the worker side: the query protocol's messages and wire format, its pure
machine, the committed views, and the server a dataflow worker runs (docs/queryable_state.md)."""
