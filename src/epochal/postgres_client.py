"""Connecting to PostgreSQL through psycopg 3, for every part of epochal that does: the PostgreSQL
sink (:mod:`epochal.connectors.postgres.sql`) and the PostgreSQL state backend
(:mod:`epochal.state.postgres.schema`). A leaf: it imports nothing of epochal but its errors.

Promises: a connection is autocommit; a failure to connect raises the caller's error type with
one line that names the server (host, port, database, user) and never the password.
``psycopg`` is imported on first use, so jobs without PostgreSQL never load it.
"""

from __future__ import annotations

from typing import Any

from epochal.errors import EpochalError


def connect(conninfo: str, *, what: str, error: type[EpochalError], connect_timeout: float = 10.0,
            application_name: str | None = None) -> Any:
    """An autocommit connection to ``conninfo`` (named ``application_name`` if given), or
    ``error`` raised with ``what`` and the server's first line of refusal."""
    import psycopg

    options: dict[str, Any] = {"autocommit": True, "connect_timeout": max(1, round(connect_timeout))}
    if application_name is not None:
        options["application_name"] = application_name
    try:
        return psycopg.connect(conninfo, **options)
    except psycopg.Error as exc:
        raise error(f"{what}: cannot connect to PostgreSQL ({describe_target(conninfo)}): {first_line(exc)}") from exc


def describe_target(conninfo: str) -> str:
    """Host, port, database and user of ``conninfo``, never its password."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(conninfo)
    except Exception:  # an unparsable conninfo: the connect error says why
        return "conninfo unreadable"
    return ", ".join(f"{k}={parts[k]}" for k in ("host", "port", "dbname", "user") if parts.get(k))


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (a psycopg error's is the server's own)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def table_identifier(table: str) -> Any:
    """``schema.table`` or ``table`` as a quoted SQL identifier."""
    from psycopg import sql

    return sql.Identifier(*table.split(".", 1))
