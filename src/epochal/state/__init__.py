"""Managed state: descriptors, the keyed and operator state backends, and how snapshots of them
are written to and read from checkpoint storage."""
