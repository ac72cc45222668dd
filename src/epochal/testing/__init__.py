"""Tools for testing epochal jobs, shipped so users can test their own jobs the same way."""

from epochal.testing.faults import POINTS, Fault, kill_worker, random_faults

__all__ = ["POINTS", "Fault", "kill_worker", "random_faults"]
