"""Tools for testing epochal jobs, shipped so users can test their own jobs the same way."""

from epochal.testing.faults import kill_worker

__all__ = ["kill_worker"]
