"""Continuous eventual checkpointing (papers/002, issue 14): persisted output queues first."""
