"""State as a Spark DataFrame: audit a job's checkpoint, fix its state, and restore the fix.

A keyed job sums each account's payments (``key_by(account).sum(amount)``, uid ``balances``) with
checkpoints. After it ran, its final checkpoint's state is read as a DataFrame
(``epochal.read_state``), the negative balances are found and set to zero in a new savepoint
(``epochal.SavepointWriter``, which also drops the old source's offsets), and the job, restored
from that savepoint at another parallelism, goes on from the fixed balances.
``epochal.read_state_metadata`` lists what a checkpoint holds.

``python examples/state_dataframes.py`` runs it on Spark ``local[2]`` (Java 17+ needed).
"""

from __future__ import annotations

import shutil
import tempfile

import epochal

ACCOUNTS = 20


def payment(i: int) -> tuple[str, int]:
    """Payment ``i``: ``(account, amount)``; every seventh account only ever pays out."""
    account = i % ACCOUNTS
    return f"acct-{account:02d}", -5 if account % 7 == 3 else 10


def build(env: epochal.Environment, source: epochal.DataStream) -> epochal.CollectedStream:
    return source.key_by(lambda p: p[0]).sum(lambda p: p[1]).uid("balances").collect()


def main() -> None:
    storage = tempfile.mkdtemp(prefix="epochal-state-df-")
    try:
        env = epochal.Environment(2)
        env.enable_checkpointing(0.5, storage=storage)
        build(env, env.from_generator(payment, count=2_000).uid("payments"))
        env.execute("payments")
        spark = env.spark

        checkpoint = epochal.latest_checkpoint(storage, "payments")
        epochal.read_state_metadata(spark, checkpoint).select("uid", "kind", "state_name", "operator_bytes").show()
        balances = epochal.read_state(spark, checkpoint, "balances", "aggregate")  # key, value, key_group
        negative = balances.filter("value < 0")
        print(f"{negative.count()} of {balances.count()} accounts are overdrawn:")
        negative.orderBy("key").show()

        fixed = balances.selectExpr("key", "greatest(value, 0) AS value")
        savepoint = (epochal.SavepointWriter.from_existing(checkpoint)
                     .with_keyed_state("balances", "aggregate", fixed)
                     .remove_operator("payments")  # the generator's offsets: the new job reads another input
                     .write(f"{storage}/fixed"))

        env = epochal.Environment(3, spark=spark)  # restored at another parallelism
        after = build(env, env.from_collection([(f"acct-{a:02d}", 1) for a in range(ACCOUNTS)]))
        env.execute("payments, fixed", restore_from=savepoint)
        assert all(balance >= 1 for _, balance in after.get()), after.get()
        print("restored from the fixed savepoint: every balance is at least 1:", sorted(after.get())[:4], "...")
    finally:
        shutil.rmtree(storage, ignore_errors=True)


if __name__ == "__main__":
    main()
