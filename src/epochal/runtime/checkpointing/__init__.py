"""The worker side of checkpoints (papers/000, papers/001 §3.2): barrier handling as pure machines,
alignment buffers, the snapshot pipeline, loop heads' back-edge logs, captures and uploads, fork snapshots."""
