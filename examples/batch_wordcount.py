"""Batch mode demo: a word count over a bounded input that emits each word's final count once.

In the default streaming mode a keyed ``count()`` emits a rolling update per record: ``(word, 1)``,
``(word, 2)``, ... ``env.set_runtime_mode("batch")`` (Flink's batch execution mode for bounded
streams) makes every keyed aggregation of the job keep its running values in state and emit only
each key's final value when the input ends: one line per word. Every source must then be bounded.
(``stream.final_results()`` does the same for one aggregation of a streaming job.)

``python examples/batch_wordcount.py`` runs the job on the local runner (no Spark, no Java) in a
second or two. ``python examples/batch_wordcount.py --spark`` runs it on Spark ``local[N]`` with
two workers, a checkpoint every 200 ms and one worker killed midway (a real SIGKILL): the running
counts are keyed state in the checkpoint it restores from, and the committed output of the
exactly-once file sink, one line per word, is checked against a ``collections.Counter`` oracle.
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
import time
from collections import Counter

import epochal
from epochal.connectors.files import ExactlyOnceFileSink, read_committed_lines

VOCABULARY = ["stream", "state", "epoch", "barrier", "snapshot", "spark", "python", "worker",
              "subtask", "checkpoint", "savepoint", "key", "group", "window", "record", "channel"]


def line(i: int) -> str:
    """Line ``i`` of the generated text: deterministic, so the source can replay it."""
    rng = random.Random(i)
    return " ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(3, 9)))


def build(env: epochal.Environment, lines: int, rate: float | None, out: str) -> None:
    (env.from_generator(line, count=lines, rate=rate).name("text")  # bounded: batch mode requires it
     .flat_map(str.split).name("split")
     .key_by(lambda word: word)
     .count().name("count").uid("count")  # batch mode: only the final (word, count) per word
     .sink_to(ExactlyOnceFileSink(out, format=lambda kv: f"{kv[0]}\t{kv[1]}"), name="sink"))


def main(argv: list[str]) -> int:
    spark = "--spark" in argv
    workdir = tempfile.mkdtemp(prefix="epochal-batch-")
    try:
        return run(workdir, spark)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run(workdir: str, spark: bool) -> int:
    lines = 30_000
    env = epochal.Environment(parallelism=2).set_runtime_mode("batch")
    if spark:
        env.enable_checkpointing(0.2, storage=f"{workdir}/checkpoints")
    build(env, lines, 12_000 if spark else None, f"{workdir}/out")
    started = time.monotonic()
    if spark:
        from epochal.testing import Fault

        result = env.execute("batch wordcount", faults=[Fault("time", worker=1, after=1.5)])
        for restart in result.restarts:
            print(f"worker killed: {restart['cause'].split(': ', 1)[-1]}")
            print(f"recovered from the latest checkpoint in {restart.get('recovered_s', float('nan')):.2f} s; "
                  "the running counts came back with it")
        print(f"checkpoints completed: {result.completed_checkpoints} (every 0.2 s)")
    else:
        from epochal.testing import run_locally

        run_locally(env, "batch wordcount")
    elapsed = time.monotonic() - started
    committed = read_committed_lines(f"{workdir}/out")
    expected = Counter(word for i in range(lines) for word in line(i).split())
    where = "on Spark by 2 workers (Spark start-up and the recovery included)" if spark else "by the local runner"
    print(f"{lines:,} lines, {sum(expected.values()):,} words counted {where} in {elapsed:.1f} s: "
          f"{len(committed)} output lines (streaming mode would emit {sum(expected.values()):,} rolling updates)")
    if sorted(committed) != sorted(f"{word}\t{count}" for word, count in expected.items()):
        print("MISMATCH: the committed counts differ from the oracle (or a word has more than one line)",
              file=sys.stderr)
        return 1
    print(f"OK: one final count per word, equal to the oracle exactly ({len(expected)} words)")
    if spark:
        env.spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
