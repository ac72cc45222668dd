"""A real PostgreSQL server for the tests, started from the project's own dependencies.

The server binaries come from Debian's ``postgresql`` package when the machine has it
(``/usr/lib/postgresql/<version>/bin``), else from ``pgserver`` (a dev dependency that ships
PostgreSQL's binaries in its wheel). Each server gets a fresh data directory, listens on
127.0.0.1 at a free port and allows prepared transactions (two-phase commit). PostgreSQL refuses
to run as root: as root the server runs as the ``postgres`` user if it exists, else ``nobody``.
"""

from __future__ import annotations

import glob
import os
import pathlib
import pwd
import shutil
import socket
import subprocess
import time


def binaries() -> pathlib.Path:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``."""
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(candidate, "postgres")):
            return pathlib.Path(candidate)
    try:
        from pgserver._commands import POSTGRES_BIN_PATH
    except ImportError as exc:  # pragma: no cover - 'make setup' installs pgserver
        raise RuntimeError("no PostgreSQL server binaries: install the dev extra (pgserver) or Debian's "
                           "postgresql package") from exc
    return pathlib.Path(POSTGRES_BIN_PATH)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresServer:
    """One PostgreSQL server in ``directory``: ``start()``, ``stop()``, ``dsn`` and ``connect()``."""

    def __init__(self, directory: pathlib.Path, max_prepared_transactions: int = 64) -> None:
        self.directory = pathlib.Path(directory)
        self.data = self.directory / "data"
        self.log = self.directory / "server.log"
        self.port = free_port()
        self.bin = binaries()
        self.max_prepared_transactions = max_prepared_transactions
        self.user = None
        if os.geteuid() == 0:
            try:
                self.user = pwd.getpwnam("postgres")
            except KeyError:
                self.user = pwd.getpwnam("nobody")

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} dbname=postgres user=postgres connect_timeout=5"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        options = {}
        if self.user is not None:
            options = {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}
        return subprocess.run([str(self.bin / args[0]), *args[1:]], check=check, capture_output=True, text=True,
                              timeout=120, cwd=self.directory, **options)

    def init(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.user is not None:
            os.chmod(self.directory, 0o777)
            for parent in self.directory.parents:  # the server's user must reach its directory
                if parent == pathlib.Path("/"):
                    break
                os.chmod(parent, os.stat(parent).st_mode | 0o011)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")

    def start(self) -> PostgresServer:
        if not self.data.exists():
            self.init()
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.directory} -c fsync=off "
                   f"-c synchronous_commit=off -c max_prepared_transactions={self.max_prepared_transactions} "
                   "-c max_connections=200")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start")
        return self

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate``: like a crash; prepared transactions survive either way)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop", check=False)

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.directory, ignore_errors=True)

    def connect(self, dbname: str = "postgres"):
        import psycopg

        return psycopg.connect(self.dsn.replace("dbname=postgres", f"dbname={dbname}"), autocommit=True)

    def roll_back_prepared(self, table: str) -> list[str]:
        """Roll back every prepared transaction that holds a lock on ``table`` or its companions
        (``<table>_*``) in the ``postgres`` database, and return their ids: what a failed test
        left, which would block the next ``ensure_schema`` (its ``ALTER TABLE`` waits for them)."""
        from psycopg import sql

        with self.connect() as conn:
            gids = [row[0] for row in conn.execute(
                "SELECT DISTINCT p.gid FROM pg_prepared_xacts p"  # its locks: those of its xid lock's holder
                " JOIN pg_locks x ON x.locktype = 'transactionid' AND x.transactionid = p.transaction"
                " JOIN pg_locks l ON l.virtualtransaction = x.virtualtransaction AND l.locktype = 'relation'"
                " JOIN pg_class c ON c.oid = l.relation"
                " WHERE p.database = current_database()"
                " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                " AND (c.relname = %s OR starts_with(c.relname, %s))", (table, table + "_"))]
            for gid in gids:
                conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
        return gids

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.connect().close()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
