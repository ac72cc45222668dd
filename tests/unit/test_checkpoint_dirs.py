"""Finding the checkpoint to restore: restore_from a checkpoint, a run or a job's directory,
epochal.latest_checkpoint and its command line, and errors that list what was found."""

from __future__ import annotations

import pytest

import epochal
from epochal.cli import main
from epochal.state.checkpoint_dirs import find_restore_point, job_directory, list_runs
from epochal.state.storage import CheckpointError, CheckpointStorage


def checkpoint(run_dir, checkpoint_id, timestamp=None):
    """A completed checkpoint (metadata written) or, without ``timestamp``, one never completed."""
    storage = CheckpointStorage(str(run_dir))
    storage.write_file(checkpoint_id, "op-0.operator", b"state")
    if timestamp is not None:
        storage.write_metadata(checkpoint_id, {"checkpoint_id": checkpoint_id, "timestamp": timestamp})


@pytest.fixture
def job(tmp_path):
    """Three runs of 'my job': an old one with chk-1, chk-2; a restored one with chk-5 (newer);
    the newest, which crashed before its first checkpoint completed."""
    job_dir = tmp_path / "my-job"
    checkpoint(job_dir / "aaaa", 1, 100.0)
    checkpoint(job_dir / "aaaa", 2, 200.0)
    checkpoint(job_dir / "bbbb", 5, 300.0)
    checkpoint(job_dir / "cccc", 6)
    return tmp_path, job_dir


def test_a_job_directory_restores_the_newest_completed_checkpoint_of_any_run(job):
    storage, job_dir = job
    point = find_restore_point(str(job_dir))
    assert point.location == f"{job_dir}/bbbb/chk-5"
    assert point.chosen == f"the newest completed checkpoint of the 3 run(s) of the job under {job_dir}"
    assert [r.path.rsplit("/", 1)[1] for r in list_runs(str(job_dir))] == ["cccc", "aaaa", "bbbb"]
    # by when it was taken, not by its number or the run's name
    checkpoint(job_dir / "0000", 3, 400.0)
    assert find_restore_point(str(job_dir)).location == f"{job_dir}/0000/chk-3"


def test_a_run_directory_and_a_checkpoint_resolve_as_before(job):
    _, job_dir = job
    run = find_restore_point(str(job_dir / "aaaa"))
    assert (run.location, run.chosen) == (f"{job_dir}/aaaa/chk-2", f"the latest completed checkpoint of the run "
                                                                  f"{job_dir}/aaaa")
    exact = find_restore_point(str(job_dir / "aaaa" / "chk-1"))
    assert (exact.checkpoint_id, exact.chosen) == (1, None)


def test_latest_checkpoint_takes_the_storage_and_the_job_name_as_execute_names_its_directory(job):
    storage, job_dir = job
    assert job_directory(str(storage), "my job!") == str(job_dir)
    assert epochal.latest_checkpoint(str(storage), "my job!") == f"{job_dir}/bbbb/chk-5"


def test_the_command_line_prints_it_or_says_what_it_found(job, capsys):
    storage, job_dir = job
    assert main(["latest-checkpoint", str(storage), "my job!"]) == 0
    assert capsys.readouterr().out.strip() == f"{job_dir}/bbbb/chk-5"
    assert main(["latest-checkpoint", str(storage), "other"]) == 3  # not found
    assert "no completed checkpoint under" in capsys.readouterr().err


def test_nothing_to_restore_lists_the_runs_found_and_their_checkpoints(tmp_path):
    job_dir = tmp_path / "crashed"
    checkpoint(job_dir / "run1", 1)
    checkpoint(job_dir / "run2", 4)
    with pytest.raises(CheckpointError, match=r"Found 2 run\(s\), none with a completed checkpoint: .*run1: "
                                              r"completed none; without _metadata \(not completed\): chk-1; .*run2"):
        find_restore_point(str(job_dir))
    with pytest.raises(CheckpointError, match="Found only checkpoints that never completed: .*chk-1"):
        find_restore_point(str(job_dir / "run1"))


def test_the_storage_root_names_the_jobs_it_holds(job):
    storage, job_dir = job
    with pytest.raises(CheckpointError, match=rf"holds the checkpoints of 1 job\(s\): pass one of '{job_dir}'.*"
                                              r"latest_checkpoint\(storage, job_name\)"):
        find_restore_point(str(storage))
    (storage / "empty").mkdir()
    with pytest.raises(CheckpointError, match="holds no checkpoints, only: a, b"):
        (storage / "empty" / "a").mkdir()
        (storage / "empty" / "b").mkdir()
        find_restore_point(str(storage / "empty"))
    with pytest.raises(CheckpointError, match="empty or does not exist"):
        find_restore_point(str(storage / "nowhere"))


def test_relative_paths_are_the_drivers_since_the_workers_have_another_working_directory(job, monkeypatch):
    storage, job_dir = job
    monkeypatch.chdir(storage)
    assert find_restore_point("my-job").location == f"{job_dir}/bbbb/chk-5"
    env = epochal.Environment(1).enable_checkpointing(1.0, storage="checkpoints")
    assert env.checkpoint_config.storage == str(storage / "checkpoints")
    assert epochal.Environment(1).enable_checkpointing(1.0, storage="s3://b/c").checkpoint_config.storage == "s3://b/c"
