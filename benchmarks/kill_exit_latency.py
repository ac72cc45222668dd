"""How long after a SIGKILL the peer of a killed process sees its socket close, against the
killed process's memory (docs/state_backends.md, PostgreSQL recovery).

Linux frees a dying process's memory (``exit_mm``) before it closes its files (``exit_files``),
so a JobMaster learns that a worker was SIGKILLed later the more memory the worker held: a
PostgreSQL backend's worker holds its read cache (up to ``cache_entries`` values per subtask),
a heap backend's worker its whole state. Each trial starts a Python process holding ``n`` dict
entries of ~130 bytes and a TCP connection to this one, SIGKILLs it and times the end of file.

    .venv/bin/python -m benchmarks.kill_exit_latency --entries 50000 1500000 5000000 --repeats 2
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time

CHILD = """
import os, socket, time
held = {{i.to_bytes(8, 'little') * 2: os.urandom(1) * 110 for i in range({n})}}
connection = socket.create_connection(('127.0.0.1', {port}))
connection.sendall(b'r')
time.sleep(600)
"""


def trial(entries: int) -> tuple[int, float]:
    """(resident MB of the killed process, seconds from its SIGKILL to the end of file here)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        child = subprocess.Popen([sys.executable, "-c", CHILD.format(n=entries, port=server.getsockname()[1])])
        connection, _ = server.accept()
        with connection:
            connection.recv(1)
            with open(f"/proc/{child.pid}/status") as status:
                rss_mb = int(status.read().split("VmRSS:")[1].split()[0]) // 1024
            started = time.monotonic()
            os.kill(child.pid, signal.SIGKILL)
            connection.recv(1)
            seconds = time.monotonic() - started
        child.wait()
    return rss_mb, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, nargs="+", default=[50_000, 1_500_000, 5_000_000])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    for _ in range(args.repeats):
        for entries in args.entries:
            rss_mb, seconds = trial(entries)
            print(f"{entries:>10,} entries, RSS {rss_mb:6,} MB: SIGKILL -> end of file at the peer "
                  f"{seconds * 1e3:7.1f} ms", flush=True)


if __name__ == "__main__":
    main()
