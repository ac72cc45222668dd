"""What a user's terminal shows while epochal runs on real Spark, read through a pseudo-terminal:
a session epochal starts prints the job's output and nothing of Spark's (no JVM warning, log4j
banner, WARN lines or progress bars); quiet_spark=False gives Spark's console back; a user's own
session keeps Spark's console until quiet_spark=True, which stops its progress bars and WARN lines."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.slow

NOISE = ("WARNING: Using incubator modules", "log4j", "NativeCodeLoader", " WARN ", "[Stage")


def run_in_terminal(script: str, timeout: float = 240.0) -> str:
    """Run ``script`` with a fresh interpreter whose stdout and stderr are a pseudo-terminal;
    everything it printed, as the terminal received it."""
    main, terminal = pty.openpty()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    process = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], stdin=terminal, stdout=terminal,
                               stderr=terminal, env=env, close_fds=True)
    os.close(terminal)
    output = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(main, 1 << 16)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not chunk:
                    break
                output += chunk
            elif process.poll() is not None:
                break
        else:
            process.kill()
            pytest.fail(f"the script did not end within {timeout:g} s; it printed:\n{output.decode(errors='replace')}")
    finally:
        os.close(main)
        process.wait(timeout=30)
    text = output.decode(errors="replace").replace("\r\n", "\n")
    assert process.returncode == 0, text
    return text


JOB = """
    import epochal, time

    def slow(x):
        time.sleep(0.2)  # long enough for Spark to draw a progress bar, were it allowed to
        return x * 2

    def run(env, name):
        env.from_collection(list(range(10))).map(slow).print()
        print(env.execute(name), flush=True)
"""


def printed_records(text: str) -> list[int]:
    return sorted(int(line.split("> ")[1]) for line in text.splitlines() if "> " in line and line[0].isdigit())


def test_a_session_epochal_starts_shows_the_job_output_and_none_of_sparks_noise():
    text = run_in_terminal(JOB + """
    run(epochal.Environment(parallelism=2), "quiet")
    """)
    assert printed_records(text) == [2 * i for i in range(10)]
    assert "JobResult(job 'quiet'" in text
    assert not [line for line in text.splitlines() if any(noise in line for noise in NOISE)], text


def test_quiet_spark_false_gives_sparks_console_back():
    text = run_in_terminal(JOB + """
    run(epochal.Environment(parallelism=2, quiet_spark=False), "loud")
    """)
    assert printed_records(text) == [2 * i for i in range(10)]
    assert "WARNING: Using incubator modules" in text and "log4j" in text, text


def test_a_users_own_session_is_left_alone_unless_quiet_spark_is_true():
    text = run_in_terminal(JOB + """
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[2]").config("spark.ui.showConsoleProgress", "true").getOrCreate()
    print("=== own session ===", flush=True)
    run(epochal.Environment(parallelism=2, spark=spark), "own")
    print("=== quiet_spark=True ===", flush=True)
    run(epochal.Environment(parallelism=2, spark=spark, quiet_spark=True), "own-quiet")
    """)
    _, own, quiet = text.split("=== ")
    assert "[Stage" in own, own  # Spark's progress bars, drawn over the job's output
    assert printed_records(quiet) == [2 * i for i in range(10)]
    assert not [line for line in quiet.splitlines() if any(noise in line for noise in NOISE)], quiet
