"""Built-in sources: split layout and replay from a recorded position."""

from __future__ import annotations

import cloudpickle as pickle

from epochal.connectors.memory import CollectionSource, GeneratorSource, SequenceSource


def read_all(split, batch=3):
    out = []
    while (records := split.read_batch(batch)) is not None:
        out.extend(records)
    return out


def test_sequence_splits_cover_the_range_once():
    splits = SequenceSource(0, 100).create_splits(3)
    values = sorted(v for s in splits for v in read_all(s))
    assert values == list(range(100))


def test_positions_replay_exactly():
    for source in (SequenceSource(5, 50), GeneratorSource(lambda i: f"r{i}", 40), CollectionSource(list("abcdefghij"))):
        split = source.create_splits(2)[1]
        full = read_all(pickle.loads(pickle.dumps(split)))
        for k in (0, 1, 4, len(full)):
            fresh = pickle.loads(pickle.dumps(split))
            head = []
            while len(head) < k:
                head.extend(fresh.read_batch(k - len(head)))
            position = fresh.position()
            again = pickle.loads(pickle.dumps(split))
            again.seek(position)
            assert head + read_all(again) == full


def test_unbounded_sequence_never_ends():
    source = SequenceSource(0, None)
    assert not source.bounded
    split = source.create_splits(1)[0]
    for _ in range(10):
        assert len(split.read_batch(1000)) == 1000
