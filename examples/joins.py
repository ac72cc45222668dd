"""Joins on event time: an interval join and a window join, checked against plain Python.

Run with ``python examples/joins.py`` (on Spark ``local[N]``, two workers, a checkpoint every
200 ms) or ``python examples/joins.py --local`` (the in-process local runner: no Spark, no Java).

- Interval join: every payment that arrives 0 to 30 time units after its order (both keyed by
  order id) gives ``(order id, amount, delay)``; payments later than that match nothing.
- Window join: per user and tumbling window of 100, every (ad view, order) pair gives
  ``(user, ad, order id)``: orders placed in the same window as an ad the user saw.

Records carry no timestamps: each side names its event time with a function, and
``with_watermarks`` upstream of each side moves event time on, which is what frees the joins'
buffers as the streams go.
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
from collections import Counter
from typing import Any

import epochal
from epochal.api.joins import JoinContext, ProcessJoinFunction
from epochal.testing import run_locally

ORDERS = 4_000
USERS = 50
ADS = ["shoes", "hats", "bikes", "books", "tents"]
MAX_DELAY = 30  # a payment joins its order if it comes 0..30 after it


def orders() -> list[tuple[int, str, int, int]]:
    """``(order id, user, amount, time)``, in order of time."""
    rng = random.Random(1)
    return [(i, f"u{rng.randrange(USERS)}", rng.randrange(5, 500), 3 * i + rng.randrange(3)) for i in range(ORDERS)]


def payments() -> list[tuple[int, int]]:
    """``(order id, time)`` for most orders, 0..45 after the order, in order of time."""
    rng = random.Random(2)
    paid = [(order_id, at + rng.randrange(46)) for order_id, _, _, at in orders() if rng.random() < 0.9]
    return sorted(paid, key=lambda p: p[1])


def ad_views() -> list[tuple[str, str, int]]:
    """``(user, ad, time)``, in order of time."""
    rng = random.Random(3)
    return [(f"u{rng.randrange(USERS)}", rng.choice(ADS), 7 * i) for i in range(ORDERS * 3 // 7)]


class PaidOrder(ProcessJoinFunction):
    """An order and its payment: ``(order id, amount, delay)``."""

    def process_element(self, order: Any, payment: Any, ctx: JoinContext) -> Any:
        yield order[0], order[2], ctx.right_timestamp() - ctx.left_timestamp()


def main() -> int:
    local = "--local" in sys.argv[1:]
    workdir = tempfile.mkdtemp(prefix="epochal-joins-")
    env = epochal.Environment(parallelism=2)
    if not local:
        env.enable_checkpointing(0.2, storage=f"{workdir}/checkpoints")
    order_stream = env.from_collection(orders()).name("orders").with_watermarks(lambda o: o[3])
    payment_stream = env.from_collection(payments()).name("payments").with_watermarks(lambda p: p[1])
    view_stream = env.from_collection(ad_views()).name("ad views").with_watermarks(lambda v: v[2])

    paid = (order_stream.key_by(lambda o: o[0])
            .interval_join(payment_stream.key_by(lambda p: p[0]),
                           timestamp=lambda o: o[3], other_timestamp=lambda p: p[1])
            .between(0, MAX_DELAY)
            .process(PaidOrder()).name("paid orders")
            .collect())
    converted = (view_stream.join(order_stream)
                 .where(lambda v: v[0]).equal_to(lambda o: o[1])
                 .window(100, timestamp=lambda v: v[2], other_timestamp=lambda o: o[3])
                 .apply(lambda view, order: (view[0], view[1], order[0])).name("orders after ads")
                 .collect())

    try:
        result = run_locally(env, "joins") if local else env.execute("joins")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    by_id = {o[0]: o for o in orders()}
    expected_paid = Counter((i, by_id[i][2], at - by_id[i][3]) for i, at in payments()
                            if 0 <= at - by_id[i][3] <= MAX_DELAY)
    by_window: dict[tuple[str, int], list[int]] = {}
    for order_id, user, _, at in orders():
        by_window.setdefault((user, at // 100), []).append(order_id)
    expected_converted = Counter((user, ad, order_id) for user, ad, seen in ad_views()
                                 for order_id in by_window.get((user, seen // 100), ()))
    got_paid, got_converted = Counter(paid.get()), Counter(converted.get())
    print(f"ran {'in this process' if local else 'on Spark'}: {ORDERS:,} orders, {len(payments()):,} payments, "
          f"{len(ad_views()):,} ad views")
    print(f"paid within {MAX_DELAY}: {sum(got_paid.values()):,} orders "
          f"(mean delay {sum(d for _, _, d in got_paid.elements()) / max(1, sum(got_paid.values())):.1f})")
    print(f"orders in the window of an ad view: {sum(got_converted.values()):,} pairs")
    print(f"late records dropped: {result.late_records_dropped}")
    if got_paid != expected_paid or got_converted != expected_converted:
        print("MISMATCH: a join's output differs from the plain-Python oracle", file=sys.stderr)
        return 1
    print("both joins equal their plain-Python oracles exactly")
    if not local:
        env.spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
