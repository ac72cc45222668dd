"""The heap keyed-state backend: keyed state in Python dicts per key group (:mod:`.backend`)."""
