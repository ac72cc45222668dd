"""PostgreSQL plumbing of :mod:`epochal.connectors.postgres.sink`, through psycopg 3 (connections
by :mod:`epochal.postgres_client`): the table's columns and keys, the ids of the sink's prepared
transactions (:class:`SinkTransactionId`, PostgreSQL's global transaction ids), and errors that
name the record and the constraint.

``psycopg`` is imported on first use, so jobs without PostgreSQL never load it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from epochal import postgres_client
from epochal.errors import SinkError
from epochal.postgres_client import first_line

#: Separates the parts of a global transaction id; never inside a part.
SEP = "|"


def connect(conninfo: str, connect_timeout: float, what: str) -> Any:
    """An autocommit connection, or a :class:`SinkError` that says the server cannot be reached."""
    return postgres_client.connect(conninfo, what=what, error=SinkError, connect_timeout=connect_timeout)


class TableInfo(NamedTuple):
    """What the sink checks of its table: its columns in order, and the column sets of its
    primary key and unique constraints/indexes (any of which ``ON CONFLICT`` can use)."""

    columns: list[str]
    unique_keys: list[set[str]]


def table_info(conn: Any, table: str) -> TableInfo | None:
    """The columns and unique keys of ``table``, or None if there is no such table."""
    with conn.cursor() as cur:
        cur.execute("SELECT to_regclass(%s)::oid", (table,))
        row = cur.fetchone()
        if row is None or row[0] is None:
            return None
        oid = row[0]
        cur.execute("SELECT attname FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped "
                    "ORDER BY attnum", (oid,))
        columns = [r[0] for r in cur.fetchall()]
        cur.execute("SELECT array_agg(a.attname) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                    "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s AND i.indisunique GROUP BY i.indexrelid",
                    (oid,))
        keys = [set(r[0]) for r in cur.fetchall()]
    return TableInfo(columns, keys)


def max_prepared_transactions(conn: Any) -> int:
    with conn.cursor() as cur:
        cur.execute("SHOW max_prepared_transactions")
        row = cur.fetchone()
    return int(row[0]) if row else 0


# ---------------------------------------------------------------------------------- transaction ids


class SinkTransactionId(NamedTuple):
    """The id of one prepared transaction of a sink (one subtask's writes of one checkpoint epoch),
    as PostgreSQL's global transaction id (``gid``) names it:
    ``<prefix>|<job id>|a<attempt>|s<subtask>|c<checkpoint>``."""

    prefix: str
    job_id: str
    attempt: int
    subtask: int
    checkpoint: int

    def __str__(self) -> str:
        return SEP.join((self.prefix, self.job_id, f"a{self.attempt}", f"s{self.subtask}", f"c{self.checkpoint}"))


def clean_part(text: str, limit: int) -> str:
    """``text`` usable inside a global transaction id: no separator, no quote, bounded length."""
    return re.sub(r"[^A-Za-z0-9_.:-]+", "-", text)[:limit] or "-"


def parse_transaction_id(gid: str, prefix: str) -> SinkTransactionId | None:
    """The global transaction id ``gid`` parsed if it is one of this prefix's, else None."""
    if not gid.startswith(prefix + SEP):
        return None
    parts = gid[len(prefix) + 1:].split(SEP)
    if len(parts) != 4 or not parts[1][1:].isdigit() or not parts[2][1:].isdigit() or not parts[3][1:].isdigit():
        return None
    return SinkTransactionId(prefix, parts[0], int(parts[1][1:]), int(parts[2][1:]), int(parts[3][1:]))


def prepared_transaction_ids(conn: Any, prefix: str) -> list[SinkTransactionId]:
    """The prepared transactions of this sink in the connection's database."""
    with conn.cursor() as cur:
        cur.execute("SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND starts_with(gid, %s)",
                    (prefix + SEP,))
        found = [parse_transaction_id(r[0], prefix) for r in cur.fetchall()]
    return [t for t in found if t is not None]


def transaction_status(conn: Any, xid: str) -> str | None:
    """``committed``, ``aborted`` or ``in progress`` for a transaction id; None once forgotten."""
    with conn.cursor() as cur:
        cur.execute("SELECT pg_xact_status(%s::xid8)", (xid,))
        row = cur.fetchone()
    return row[0] if row else None


# ---------------------------------------------------------------------------------- errors


def rejected(exc: Any, table: str, records: Sequence[Any] | None, what: str) -> SinkError:
    """A :class:`SinkError` for a statement PostgreSQL refused, naming the constraint and, where
    the server says which (COPY's line number, a key or failing row), the record."""
    diag = exc.diag
    parts = [f"{what}: PostgreSQL rejected a record for table {table}: {first_line(exc)}"]
    if diag.constraint_name:
        parts.append(f"constraint {diag.constraint_name!r}")
    if diag.message_detail:
        parts.append(diag.message_detail)
    line = re.search(r"COPY [^,]+, line (\d+)", diag.context or "")
    if line and records is not None and 0 < int(line.group(1)) <= len(records):
        parts.append(f"record {records[int(line.group(1)) - 1]!r}")
    return SinkError("; ".join(parts))
