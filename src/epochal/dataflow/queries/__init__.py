"""Queryable state, the server side a dataflow worker runs (papers/001 §4.3; docs/queryable_state.md):
``server`` (the query server on the worker's mailbox loop), ``machine`` (its pure machine),
``committed`` and ``shown`` (the read_committed views and what a lookup shows of a value),
``native`` (the C answer path of a lone read_uncommitted lookup). The protocol it speaks with
its clients is :mod:`epochal.runtime.queries`."""
