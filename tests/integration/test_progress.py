"""The console's progress line, read through a pseudo-terminal: a job run from a terminal draws
it (records, records per second, how far its sources are, checkpoints, restarts) and removes it
at the end, and for a text file source the share of its files' bytes read; ``progress=False``
draws none, and neither does a job whose standard error is not a terminal. The driver prints the
dashboard's URL on the terminal too."""

from __future__ import annotations

import re

import pytest

from tests.integration.test_console import run_in_terminal

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCRIPT = """
    import os, sys, tempfile
    os.environ["COLUMNS"] = "160"  # the pseudo-terminal has no size: rich would cut the line at 80
    import epochal

    def run(name, count, **options):
        env = epochal.Environment(parallelism=2)
        env.enable_checkpointing(0.3, storage=tempfile.mkdtemp())
        (env.from_generator(lambda i: (i % 10, 1), count=count, rate=2000)
         .key_by(lambda kv: kv[0]).sum(lambda kv: kv[1]).discard())
        result = env.execute(name, **options)
        print(f"\\n=== {name}: {result.records_processed} records", flush=True)

    print("=== terminal ===", flush=True)
    run("shown", 5000)
    print("=== a file source ===", flush=True)
    import time
    directory = tempfile.mkdtemp()
    for part in range(2):
        with open(os.path.join(directory, f"part-{part}.txt"), "w") as out:
            out.writelines(f"{part} line {i}\\n" for i in range(3000))
    env = epochal.Environment(parallelism=2)
    # the map is chained with the source and slows it: ~3 s of reading, paced by the map
    env.read_text(directory).map(lambda line: (time.sleep(0.001), line)[1]).discard()
    print(f"\\n=== files: {env.execute('files').records_processed} records", flush=True)
    print("=== progress=False ===", flush=True)
    run("off", 3000, progress=False)
    print("=== not a terminal ===", flush=True)
    with tempfile.TemporaryFile("w+") as piped:
        terminal, sys.stderr = sys.stderr, piped
        try:
            run("piped", 3000)
        finally:
            sys.stderr = terminal
        piped.seek(0)
        print(f"piped stderr: {piped.read()!r}", flush=True)
"""


def test_a_terminal_gets_a_progress_line_and_other_outputs_get_none():
    text = run_in_terminal(SCRIPT)
    _, shown, files, off, piped = _parts(text)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", shown)  # without its colours
    lines = [line for line in plain.split("\r") if "shown running" in line]
    assert len(lines) >= 2, shown  # redrawn in place
    assert any(re.search(r"shown running 0:\d\d · [\d,]+ records · [\d,]+/s · sources \d+% · \d+ checkpoints? · "
                         r"0 restarts", line) for line in lines), lines
    assert shown.rstrip().endswith("\x1b[2K\n=== shown: 5000 records")  # the line removed at the end
    assert "dashboard http://127.0.0.1:" in shown and "token=" in shown
    # a text file source: the share of its files' bytes read, growing
    lines = [line for line in re.sub(r"\x1b\[[0-9;]*m", "", files).split("\r") if "files running" in line]
    shares = [int(m.group(1)) for line in lines if (m := re.search(r" · sources (\d+)% · ", line))]
    assert shares and shares == sorted(shares) and any(0 < share < 100 for share in shares), lines
    assert "=== files: 6000 records" in files
    assert "off running" not in off and "off: 3000 records" in off
    assert "piped running" not in piped and "piped: 3000 records" in piped
    assert "piped stderr: ''" in piped  # no line, no URL: nothing for a person to see there


def _parts(text: str) -> list[str]:
    """The output before the first marker, and of the four runs."""
    head, rest = text.split("=== terminal ===", 1)
    shown, rest = rest.split("=== a file source ===", 1)
    files, rest = rest.split("=== progress=False ===", 1)
    off, piped = rest.split("=== not a terminal ===", 1)
    return [head, shown, files, off, piped]
