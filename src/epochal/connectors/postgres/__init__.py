"""PostgreSQL as a sink, through psycopg 3: :class:`PostgresSink` (``append`` exactly once by
two-phase commit, ``upsert`` by key).

User code imports from here. The modules: ``sink`` (the sink and its writers) and ``sql`` (its
PostgreSQL plumbing: the table's columns and keys, the sink's transaction ids, readable errors).
Connections come from :mod:`epochal.postgres_client`, shared with the PostgreSQL state backend."""

from __future__ import annotations

from epochal.connectors.postgres.sink import PostgresSink

__all__ = ["PostgresSink"]
