"""Checkpoints of dataflow jobs: Asynchronous Barrier Snapshotting (papers/000, papers/001 §3.2),
both sides of it, one owner per concern.

The worker side: ``messages`` (the checkpoint and loop protocol between the JobMaster and the
workers), ``barriers`` and ``alignment`` (barrier handling as pure machines, alignment buffers),
``events`` (what the worker machine is told about its subtasks), ``snapshots`` (the snapshot
pipeline), ``loop_heads`` (back-edge logs), ``uploads`` and ``upload_queue`` (captures and their
asynchronous uploads, dropped when their checkpoint is aborted), ``fork_snapshots``.

The driver side, the JobMaster's checkpoint coordination as Flink splits it: ``coordinator``
(:class:`~epochal.dataflow.checkpointing.coordinator.CheckpointCoordinator`: trigger timing, the
pending checkpoints, the order of completion and abort), ``pending``, ``failures`` (what counts
as a failure), ``store`` (completed ids, retention, record totals), ``stats``, ``restore``
(``check_restore``). The checkpoint I/O they ask the driver for is every kind's
(:mod:`epochal.control.checkpoint_files`).

This package's ``__init__`` imports nothing: a worker that loads its worker-side modules loads
none of the driver's.
"""
