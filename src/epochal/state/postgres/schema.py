"""The PostgreSQL keyed-state backend's connection and tables: how a connection is opened (and
what its errors say, never a password), the identifiers of the tables named after the backend's
``table`` option, and :func:`ensure_schema`, which the driver runs when a job is submitted. The
tables themselves are described in :mod:`epochal.state.postgres.store`."""

from __future__ import annotations

from typing import Any

from epochal import postgres_client
from epochal.errors import PlanError, StateBackendError
from epochal.postgres_client import describe_target as describe
from epochal.postgres_client import first_line


def psycopg_sql() -> Any:
    from psycopg import sql

    return sql


def names(table: str) -> dict[str, Any]:
    """The identifiers of the backend's tables for the ``table`` option."""
    sql = psycopg_sql()
    schema, _, base = table.rpartition(".")

    def ident(suffix: str) -> Any:
        return sql.Identifier(schema, base + suffix) if schema else sql.Identifier(base + suffix)

    return {"rows": ident(""), "operators": ident("_operators"), "states": ident("_states"),
            "epochs": ident("_epochs"), "versions": ident("_versions"), "committed": ident("_committed"),
            # an index is named without its schema (it lives in its table's)
            "versions_by_epoch": sql.Identifier(base + "_versions_by_epoch")}


def connect(dsn: str, what: str = "the PostgreSQL state backend", application_name: str | None = None) -> Any:
    """An autocommit connection (named ``application_name`` if given), or a
    :class:`StateBackendError` that says why not."""
    return postgres_client.connect(dsn, what=what, error=StateBackendError, application_name=application_name)


SCHEMA = """
CREATE TABLE IF NOT EXISTS {operators} (op serial PRIMARY KEY, ns text NOT NULL, uid text NOT NULL,
                                        horizon bigint NOT NULL DEFAULT 0, UNIQUE (ns, uid));
CREATE TABLE IF NOT EXISTS {states} (state serial PRIMARY KEY, op integer NOT NULL, name text NOT NULL,
                                     UNIQUE (op, name));
CREATE TABLE IF NOT EXISTS {rows} (op integer NOT NULL, kg integer NOT NULL, key bytea NOT NULL,
                                   state integer NOT NULL, value bytea NOT NULL,
                                   PRIMARY KEY (op, kg, key, state)) WITH (fillfactor = 80);
CREATE TABLE IF NOT EXISTS {epochs} (op integer NOT NULL, kg integer NOT NULL, checkpoint bigint NOT NULL,
                                     PRIMARY KEY (op, kg));
CREATE TABLE IF NOT EXISTS {versions} (op integer NOT NULL, kg integer NOT NULL, key bytea NOT NULL,
                                       state integer NOT NULL, epoch bigint NOT NULL, value bytea,
                                       PRIMARY KEY (op, kg, key, state, epoch));
CREATE INDEX IF NOT EXISTS {versions_by_epoch} ON {versions} (op, epoch);
CREATE TABLE IF NOT EXISTS {committed} (ns text PRIMARY KEY, checkpoint bigint NOT NULL);
"""
#: What an existing schema may lack (tables of an earlier epochal): run only when it is missing,
#: since ``ALTER TABLE`` locks its table even when there is nothing to add, and an epoch a job
#: left prepared (its checkpoint's commit is for the next restore to decide) holds row locks on
#: the epochs table until then: the next submission would wait for the restore it comes before.
FENCE_COLUMN = "ALTER TABLE {epochs} ADD COLUMN IF NOT EXISTS fence bigint NOT NULL DEFAULT 0"
#: How long the schema's statements wait for a lock before the submission fails with a message.
LOCK_TIMEOUT = "10s"


def ensure_schema(dsn: str, table: str, mvcc: bool) -> None:
    """On the driver, when a job is submitted: the server answers, the tables exist (created if
    not, under an advisory lock so that two jobs do not race), and the non-MVCC variant has
    prepared transactions. Problems are :class:`~epochal.errors.PlanError`."""
    sql = psycopg_sql()
    try:
        conn = connect(dsn, f"set_state_backend('postgres', table={table!r})")
    except StateBackendError as exc:
        raise PlanError(str(exc)) from exc
    try:
        identifiers = names(table)
        with conn.transaction():
            conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"epochal-state:{table}",))
            for statement in SCHEMA.strip().split(";\n"):
                if "INDEX" in statement and _exists(conn, identifiers["versions_by_epoch"], identifiers["versions"]):
                    continue  # (CREATE INDEX locks its table before it sees the index exists)
                conn.execute(sql.SQL(statement.strip().rstrip(";")).format(**identifiers))
            if not _has_column(conn, identifiers["epochs"], "fence"):
                conn.execute(sql.SQL(FENCE_COLUMN).format(**identifiers))
        if not mvcc:
            row = conn.execute("SHOW max_prepared_transactions").fetchone()
            if not row or int(row[0]) < 1:
                raise PlanError(
                    f"set_state_backend('postgres'): the server ({describe(dsn)}) has max_prepared_transactions = 0; "
                    "the backend pre-commits every checkpoint epoch as a prepared transaction (one per keyed "
                    "operator subtask): set max_prepared_transactions (e.g. to 64) in postgresql.conf and restart "
                    "the server, or use mvcc=True (no prepared transactions)")
    except PlanError:
        raise
    except Exception as exc:
        if type(exc).__name__ == "LockNotAvailable":
            raise PlanError(f"set_state_backend('postgres'): the tables {table}* in {describe(dsn)} stayed locked by "
                            f"another transaction for {LOCK_TIMEOUT} while the job was submitted ({first_line(exc)}): "
                            "end it (pg_stat_activity; a prepared transaction not of epochal's: pg_prepared_xacts) "
                            "and submit again") from exc
        raise PlanError(f"set_state_backend('postgres'): cannot prepare the tables {table}* in "
                        f"{describe(dsn)}: {first_line(exc)}") from exc
    finally:
        conn.close()


def _exists(conn: Any, index: Any, table: Any) -> bool:
    """Whether index ``index`` (an identifier; it lives in ``table``'s schema) exists."""
    schema = table.as_string(conn).rpartition(".")[0]
    name = f"{schema}.{index.as_string(conn)}" if schema else index.as_string(conn)
    return conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()[0]


def _has_column(conn: Any, table: Any, column: str) -> bool:
    """Whether table ``table`` (an identifier) has column ``column``."""
    row = conn.execute("SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = %s "
                       "AND NOT attisdropped", (table.as_string(conn), column)).fetchone()
    return bool(row[0])
