"""The import paths of an earlier epochal keep working (epochal.moved): users' imports, and the
pickles in checkpoints and savepoints written before the code moved, which name classes by the
module they lived in."""

from __future__ import annotations

import importlib
import pathlib
import pickle
import pickletools
import subprocess
import sys
import warnings

import pytest

from epochal import moved

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"


@pytest.mark.parametrize("old", sorted(moved.MOVED))
def test_every_old_path_names_a_module_that_exists_and_has_no_file_of_its_own(old):
    """One home per concern: an old path is an alias only, never a second module."""
    assert not (SRC / (old.replace(".", "/") + ".py")).exists(), f"{old} still exists as a file"
    target = moved.MOVED[old]
    importlib.import_module(target.module)
    for where in target.elsewhere.values():
        moved.resolve(where)


def test_a_users_import_of_an_old_path_gets_the_same_objects_and_a_deprecation_warning():
    sys.modules.pop("epochal.connectors.delta_sink", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from epochal.connectors.delta_sink import DeltaSink
    from epochal.connectors.delta import DeltaSink as new

    assert DeltaSink is new
    assert any(issubclass(w.category, DeprecationWarning) and "epochal.connectors.delta.sink" in str(w.message)
               for w in caught)


def _renamed_global(data: bytes, old_module: str, old_name: str) -> bytes:
    """``data`` (a protocol-0 pickle of one object) with its class named as an earlier epochal named it."""
    module, name = (op[1].split(" ") for op in pickletools.genops(data) if op[0].name == "GLOBAL").__next__()
    return data.replace(f"c{module}\n{name}\n".encode(), f"c{old_module}\n{old_name}\n".encode(), 1)


def test_a_pickle_naming_a_class_where_it_lived_before_loads_as_the_class_of_today():
    """A Kafka split in a source's operator state was pickled as epochal.connectors.kafka_source.
    KafkaPartitionSplit; a Parquet split as table_file_sources._ParquetSplit."""
    from epochal.connectors.kafka.partitions import KafkaPartitionSplit
    from epochal.connectors.parquet_split import ParquetSplit

    split = KafkaPartitionSplit("events", 3, 42)
    old = _renamed_global(pickle.dumps(split, protocol=0), "epochal.connectors.kafka_source", "KafkaPartitionSplit")
    assert b"epochal.connectors.kafka_source" in old
    with warnings.catch_warnings():  # the alias module's first import warns: not this test's subject
        warnings.simplefilter("ignore", DeprecationWarning)
        loaded = pickle.loads(old)
    assert type(loaded) is KafkaPartitionSplit and vars(loaded) == vars(split)
    resolved = moved.resolve(moved.MOVED["epochal.connectors.table_file_sources"].elsewhere["_ParquetSplit"])
    assert resolved is ParquetSplit


def test_a_fresh_worker_process_reads_an_old_pickle_without_importing_the_driver():
    from epochal.connectors.kafka.partitions import KafkaPartitionSplit

    old = _renamed_global(pickle.dumps(KafkaPartitionSplit("t", 0, 7), protocol=0),
                          "epochal.connectors.kafka_source", "KafkaPartitionSplit")
    code = ("import pickle, sys, epochal.kinds; "
            f"split = pickle.loads({old!r}); print(type(split).__module__, split.start); "
            "print(sorted(m for m in sys.modules if m.startswith(('epochal.api', 'epochal.control'))))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=SRC.parent)
    assert run.returncode == 0, run.stderr
    first, second = run.stdout.strip().splitlines()
    assert first == "epochal.connectors.kafka.partitions 7" and second == "[]"


def test_a_name_that_left_a_module_still_there_is_read_from_where_it_lives_now():
    """A collect sink's committable was pickled as epochal.messages.CollectEpoch; the payloads
    live beside the sink's writer now, and epochal.messages is still a module of its own."""
    from epochal import messages
    from epochal.connectors.memory import CollectEpoch

    for module, names in moved.MOVED_NAMES.items():
        assert (SRC / (module.replace(".", "/") + ".py")).exists(), f"{module} is gone: put it in MOVED"
        for old, where in names.items():
            assert getattr(importlib.import_module(module), old) is moved.resolve(where)
    epoch = CollectEpoch("0.0.abc", 0, 3)
    data = pickle.dumps(epoch, protocol=0)
    old = data.replace(b"cepochal.connectors.memory\nCollectEpoch\n", b"cepochal.messages\nCollectEpoch\n")
    assert old != data
    loaded = pickle.loads(old)
    assert type(loaded) is CollectEpoch and loaded == epoch
    with pytest.raises(AttributeError, match="has no attribute 'Nothing'"):
        messages.Nothing  # noqa: B018 - a name it never had


def test_an_old_package_and_its_submodules_are_answered_by_name():
    """``epochal.control.checkpointing`` (a package then) exported names that now live in two
    kinds of place: the dataflow kind's coordinator and every kind's checkpoint files."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from epochal.control.checkpointing import CheckpointCoordinator, WriteCheckpoint
        from epochal.runtime.checkpointing.alignment import AlignmentBuffer
    from epochal.control.checkpoint_files import WriteCheckpoint as write
    from epochal.dataflow.checkpointing.alignment import AlignmentBuffer as buffer
    from epochal.dataflow.checkpointing.coordinator import CheckpointCoordinator as coordinator

    assert (CheckpointCoordinator, WriteCheckpoint, AlignmentBuffer) == (coordinator, write, buffer)
