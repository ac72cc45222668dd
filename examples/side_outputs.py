"""Side outputs demo: split valid and invalid records into a main output and a dead-letter queue.

Raw order lines (``order id,user,amount``) arrive from a source; some are broken. One process
function parses them: valid orders go to its main output, each broken line goes to the side
output ``DEAD_LETTERS`` with the reason (``ctx.output(tag, value)``), and large orders are also
reported to ``WARNINGS``, a side output nobody reads (its records are dropped, at no cost).

The dead letters are read twice with ``stream.side_output(DEAD_LETTERS)``: once by a sink chained
to the parser (same subtask, no network), and once across the network by a keyed count per reason
(``final_results()``: one line per reason when the input ends).

``python examples/side_outputs.py`` runs the job on the local runner (no Spark, no Java) in about
a second. ``python examples/side_outputs.py --spark`` runs it on Spark ``local[N]`` with two
workers, a checkpoint every 200 ms and one worker killed midway (a real SIGKILL); the committed
output of the three exactly-once file sinks is checked against a plain-Python oracle: every
order and every dead letter once, none lost, none duplicated, the counts per reason exact.
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from typing import Any

import epochal
from epochal import OutputTag, ProcessFunction
from epochal.connectors.files import ExactlyOnceFileSink, read_committed_lines

DEAD_LETTERS = OutputTag("dead-letters")
WARNINGS = OutputTag("warnings")  # emitted, never read: dropped


def raw(i: int) -> str:
    """Raw line ``i``; deterministic, so the source can replay it. About one in eight is broken."""
    rng = random.Random(i)
    user, amount = f"user{rng.randrange(40)}", rng.randrange(1, 2_000)
    damage = rng.randrange(24)
    if damage == 0:
        return f"{i},{user}"  # a field missing
    if damage == 1:
        return f"{i},{user},{amount}EUR"  # not a number
    if damage == 2:
        return f"{i},{user},-{amount}"  # negative
    return f"{i},{user},{amount}"


def check(line: str) -> tuple[tuple[int, str, int] | None, str]:
    """``(order, "")`` for a valid line, ``(None, reason)`` for a broken one."""
    fields = line.split(",")
    if len(fields) != 3:
        return None, "field count"
    order_id, user, amount = fields
    if not amount.lstrip("-").isdigit():
        return None, "amount not a number"
    if int(amount) < 0:
        return None, "negative amount"
    return (int(order_id), user, int(amount)), ""


class Validate(ProcessFunction):
    """Valid orders to the main output; broken lines to ``DEAD_LETTERS`` with their reason."""

    def process_element(self, value: str, ctx: Any) -> Any:
        order, reason = check(value)
        if order is None:
            ctx.output(DEAD_LETTERS, (reason, value))
            return
        if order[2] >= 1_900:
            ctx.output(WARNINGS, order)  # no stream reads this tag: dropped
        yield order


def build(env: epochal.Environment, lines: int, rate: float | None, out: str) -> None:
    orders = env.from_generator(raw, count=lines, rate=rate).name("raw orders").process(Validate())
    orders.name("validate").uid("validate")
    orders.sink_to(ExactlyOnceFileSink(f"{out}/orders", format=lambda o: " ".join(map(str, o))), name="orders")
    dead = orders.side_output(DEAD_LETTERS)
    # Chained: the dead letters go straight from the parser to this sink, in the same subtask.
    dead.sink_to(ExactlyOnceFileSink(f"{out}/dead", format=lambda d: f"{d[0]}: {d[1]}"), name="dead letters")
    # Across the network: counted per reason (hash-partitioned), one final line per reason.
    (dead.key_by(lambda d: d[0]).count().final_results().name("per reason").uid("per-reason")
     .sink_to(ExactlyOnceFileSink(f"{out}/reasons", format=lambda kv: f"{kv[0]}: {kv[1]}"), name="reasons"))


def oracle(lines: int) -> dict[str, Counter[str]]:
    orders, dead, reasons = Counter(), Counter(), Counter()
    for i in range(lines):
        line = raw(i)
        order, reason = check(line)
        if order is None:
            dead[f"{reason}: {line}"] += 1
            reasons[reason] += 1
        else:
            orders[" ".join(map(str, order))] += 1
    return {"orders": orders, "dead": dead,
            "reasons": Counter(f"{reason}: {count}" for reason, count in reasons.items())}


def main(argv: list[str]) -> int:
    spark = "--spark" in argv
    workdir = tempfile.mkdtemp(prefix="epochal-side-outputs-")
    try:
        return run(workdir, spark)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run(workdir: str, spark: bool) -> int:
    lines = 30_000
    env = epochal.Environment(parallelism=2)
    if spark:
        env.enable_checkpointing(0.2, storage=f"{workdir}/checkpoints")
    build(env, lines, 10_000 if spark else None, f"{workdir}/out")
    started = time.monotonic()
    if spark:
        from epochal.testing import Fault

        result = env.execute("dead letters", faults=[Fault("time", worker=1, after=1.5)])
        for restart in result.restarts:
            print(f"worker killed: {restart['cause'].split(': ', 1)[-1]}")
            print(f"recovered from the latest checkpoint in {restart.get('recovered_s', float('nan')):.2f} s")
        print(f"checkpoints completed: {result.completed_checkpoints} (every 0.2 s)")
    else:
        from epochal.testing import run_locally

        run_locally(env, "dead letters")
    elapsed = time.monotonic() - started
    expected = oracle(lines)
    committed = {name: Counter(read_committed_lines(f"{workdir}/out/{name}")) for name in expected}
    where = "on Spark by 2 workers (Spark start-up and the recovery included)" if spark else "by the local runner"
    print(f"{lines:,} lines split {where} in {elapsed:.1f} s: {sum(committed['orders'].values()):,} orders, "
          f"{sum(committed['dead'].values()):,} dead letters")
    for line in sorted(committed["reasons"]):
        print(f"  dead letters by reason: {line}")
    wrong = [name for name in expected if committed[name] != expected[name]]
    if wrong:
        print(f"MISMATCH: the committed {', '.join(wrong)} differ from the oracle", file=sys.stderr)
        return 1
    print("OK: main output, dead letters and counts per reason equal the oracle exactly "
          "(none lost, none duplicated)")
    if spark:
        env.spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
