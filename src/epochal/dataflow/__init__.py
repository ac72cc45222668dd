"""The dataflow job kind: Flink's DataStream jobs on Spark workers, checkpointed by ABS."""
