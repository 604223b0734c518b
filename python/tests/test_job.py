"""The Job object and its loop: counting, stopping, saving, reporting."""

from __future__ import annotations

import array
import errno
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from conftest import PYTHON_SRC
from hadar_job import (
    CheckpointError,
    HadarJobError,
    Job,
    Tensor,
    init,
    load_file,
    read_step,
    write_checkpoint,
)


def hadar_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        "HADAR_PROTOCOL": "1",
        "HADAR_JOB_ID": "0",
        "HADAR_COPY": "0",
        "HADAR_ROUND": "0",
        "HADAR_ROUND_DEADLINE": str(time.time() + 3600),
        "HADAR_TOTAL_ITERATIONS": "5",
        "HADAR_CHECKPOINT_DIR": str(tmp_path),
        "HADAR_SEED": "0",
        "HADAR_JOB_NAME": "t",
        "HADAR_TASK_TOKEN": "tok",
    }
    env.update(extra)
    return env


def lines(out: io.StringIO) -> list[tuple[str, dict[str, Any]]]:
    got = []
    for line in out.getvalue().splitlines():
        marker, rest = line.split(" ", 1)
        got.append((marker, json.loads(rest)))
    return got


def make(tmp_path: Path, interval: float = 0.0, **env: str) -> tuple[Job, io.StringIO]:
    out = io.StringIO()
    job = Job(
        environ=hadar_env(tmp_path, **env),
        stream=out,
        install_signals=False,
        report_interval=interval,
    )
    return job, out


def saved_step(tmp_path: Path) -> int | None:
    return read_step(load_file(tmp_path / "checkpoint.safetensors"))


def test_a_loop_to_the_total(tmp_path: Path) -> None:
    job, out = make(tmp_path)
    w = array.array("f", [0.0])
    assert job.load() == ({}, 0)
    seen = []
    for step in job.steps(state=lambda: {"w": w}):
        assert job.step == step
        seen.append(step)
        w[0] += 1
    assert seen == [0, 1, 2, 3, 4]
    assert (job.step, job.iterations) == (5, 5)
    assert job.reached_total
    ck = load_file(tmp_path / "checkpoint.safetensors")
    assert read_step(ck) == 5 and ck["w"].tolist() == [5.0]
    got = lines(out)
    assert got[-1] == ("HADAR_DONE", {"iterations": 5, "step": 5})
    assert [m for m, _ in got[:-1]] == ["HADAR_PROGRESS"] * 5


def test_resume_counts_from_the_checkpoint(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, {"w": array.array("f", [3.0])}, 3, name="resume.safetensors")
    job, out = make(tmp_path)
    resumed = job.load()
    assert resumed.step == 3 and list(resumed.tensors) == ["w"]
    assert resumed.tensors["w"].tolist() == [3.0]
    assert resumed.arrays() == {"w": array.array("f", [3.0])}
    assert job.resumed_from == tmp_path / "resume.safetensors"
    w = resumed.tensors["w"].to_array()
    assert list(job.steps(state=lambda: {"w": w})) == [3, 4]
    assert (job.start_step, job.step, job.iterations) == (3, 5, 2)
    assert lines(out)[-1] == ("HADAR_DONE", {"iterations": 2, "step": 5})
    assert saved_step(tmp_path) == 5


def test_a_resume_file_not_loaded_is_refused_before_the_loop(tmp_path: Path) -> None:
    # The loop would start at step 0: the job's work so far redone, never credited.
    write_checkpoint(tmp_path, {"w": array.array("f", [3.0])}, 3, name="resume.safetensors")
    job, _ = make(tmp_path)
    with pytest.raises(HadarJobError, match=r"resume.safetensors is there to resume from"):
        job.steps(state=dict)
    job.load()
    assert list(job.steps(state=dict)) == [3, 4]


@pytest.fixture
def no_hang() -> Iterator[None]:
    """Fails a test that blocks (as opening a FIFO would) instead of hanging the run."""

    def timeout(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError("blocked for 10 s: was a FIFO opened?")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(10)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def not_a_file(path: Path, kind: str) -> str:
    """Makes ``path`` a ``kind`` of thing that is not a checkpoint file; returns what
    the error must say about it."""
    if kind == "directory":
        path.mkdir()
        return "a directory, not a checkpoint file"
    if kind == "fifo":
        os.mkfifo(path)
        return "a FIFO (named pipe), not a checkpoint file"
    if kind == "dangling symlink":
        path.symlink_to(path.parent / "gone.safetensors")
        return f"a symbolic link to {path.parent / 'gone.safetensors'}, which does not exist"
    if kind == "symlink loop":
        path.symlink_to(path)
        return f"a symbolic link to {path}, that cannot be followed (Too many levels"
    assert kind == "symlink to a directory"
    (path.parent / "elsewhere").mkdir()
    path.symlink_to(path.parent / "elsewhere")
    return "a directory, not a checkpoint file"


KINDS = ["directory", "fifo", "dangling symlink", "symlink loop", "symlink to a directory"]


@pytest.mark.usefixtures("no_hang")
@pytest.mark.parametrize("kind", KINDS)
def test_a_resume_file_that_is_not_a_file_is_refused(tmp_path: Path, kind: str) -> None:
    # Taken for "no checkpoint", it would start the job again from step 0: the work
    # so far lost, and nothing said.
    resume = tmp_path / "resume.safetensors"
    what = not_a_file(resume, kind)
    job, _ = make(tmp_path)
    with pytest.raises(CheckpointError) as e:
        job.load()
    message = str(e.value)
    assert message.startswith(f"{resume}: {what}"), message
    assert "lose its work so far" in message
    assert "remove it to start from step 0" in message
    assert (job.step, job.resumed_from) == (0, None)
    with pytest.raises(CheckpointError, match="lose its work so far"):
        job.steps(state=dict)  # not loaded: the loop refuses it as well


@pytest.mark.usefixtures("no_hang")
@pytest.mark.parametrize("kind", KINDS)
def test_outside_hadar_a_checkpoint_that_is_not_a_file_is_refused(
    tmp_path: Path, kind: str
) -> None:
    what = not_a_file(tmp_path / "checkpoint.safetensors", kind)
    job = Job(10, checkpoint_dir=tmp_path, environ={}, install_signals=False)
    with pytest.raises(CheckpointError, match="lose its work so far") as e:
        job.load()
    assert what in str(e.value)


def refuse_to_open(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """``os.open`` of ``path`` fails as a file of mode 000 does for a user other than
    root (root reads any file, so the test cannot make one it cannot read)."""
    real_open = os.open

    def fake_open(file: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.fspath(file) == str(path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(file, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake_open)


def test_an_unreadable_resume_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resume = write_checkpoint(tmp_path, {}, 3, name="resume.safetensors")
    if os.geteuid() == 0:
        refuse_to_open(monkeypatch, resume)
    else:
        resume.chmod(0)
    job, _ = make(tmp_path)
    with pytest.raises(CheckpointError) as e:
        job.load()
    message = str(e.value)
    assert message.startswith(f"{resume}: cannot be read (Permission denied)"), message
    assert "make it readable by the task's user" in message
    assert (job.step, job.resumed_from) == (0, None)


def unwritable(tmp_path: Path, kind: str) -> Path:
    """A checkpoint directory the task cannot write in, as root too (root writes in a
    directory of mode 555; only a user other than root gets that case)."""
    if kind == "a file":
        (tmp_path / "file").write_text("")
        return tmp_path / "file"
    if kind == "under a file":
        (tmp_path / "file").write_text("")
        return tmp_path / "file" / "ck"
    assert kind == "read-only"
    if os.geteuid() == 0:
        pytest.skip("root writes in a read-only directory")
    (tmp_path / "ro").mkdir(mode=0o555)
    return tmp_path / "ro"


UNWRITABLE = ["a file", "under a file", "read-only"]


@pytest.mark.parametrize("kind", UNWRITABLE)
def test_an_unwritable_checkpoint_dir_names_the_variable(tmp_path: Path, kind: str) -> None:
    directory = unwritable(tmp_path, kind)
    job, _ = make(tmp_path, HADAR_CHECKPOINT_DIR=str(directory))
    with pytest.raises(CheckpointError) as e:
        job.save({"w": array.array("f", [1.0])})
    message = str(e.value)
    assert message.startswith(f"HADAR_CHECKPOINT_DIR={directory}: cannot write the checkpoint")
    assert "it must be a directory the task's user can write in" in message
    assert job.last_saved is None
    job, _ = make(tmp_path, HADAR_CHECKPOINT_DIR=str(directory))
    with pytest.raises(CheckpointError, match=r"^HADAR_CHECKPOINT_DIR="):
        list(job.steps(state=dict))  # the loop's save on the way out


@pytest.mark.parametrize("kind", UNWRITABLE)
def test_outside_hadar_an_unwritable_checkpoint_dir_names_the_variable(
    tmp_path: Path, kind: str
) -> None:
    directory = unwritable(tmp_path, kind)
    job = Job(5, checkpoint_dir=directory, environ={}, install_signals=False)
    with pytest.raises(CheckpointError) as e:
        job.save({})
    message = str(e.value)
    assert message.startswith(f"cannot write the checkpoint in {directory} (")
    assert "HADAR_CHECKPOINT_DIR" in message and "checkpoint_dir argument" in message


def test_a_resume_at_the_total_runs_no_step(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, {}, 5, name="resume.safetensors")
    job, out = make(tmp_path)
    job.load()
    assert list(job.steps(state=dict)) == []
    assert lines(out) == [("HADAR_DONE", {"iterations": 0, "step": 5})]


def test_a_stop_request_ends_the_loop_at_a_step_boundary(tmp_path: Path) -> None:
    job, out = make(tmp_path, HADAR_TOTAL_ITERATIONS="100")
    for step in job.steps(state=lambda: {"x": Tensor.scalar("F32", 1.0)}):
        if step == 2:
            job.stop.request()
    assert job.step == 3
    assert saved_step(tmp_path) == 3
    assert lines(out)[-1] == ("HADAR_PROGRESS", {"iterations": 3, "step": 3})


def test_sigterm_stops_the_loop(tmp_path: Path) -> None:
    out = io.StringIO()
    job = Job(environ=hadar_env(tmp_path, HADAR_TOTAL_ITERATIONS="100"), stream=out)
    try:
        for step in job.steps(state=dict):
            if step == 1:
                os.kill(os.getpid(), signal.SIGTERM)
        assert job.step == 2 and job.stop.signum == signal.SIGTERM
        assert saved_step(tmp_path) == 2
    finally:
        job.stop.uninstall()


def test_exit_true_exits_0_after_saving(tmp_path: Path) -> None:
    job, _ = make(tmp_path)
    with pytest.raises(SystemExit) as e:
        list(job.steps(state=dict, exit=True))
    assert e.value.code == 0
    assert saved_step(tmp_path) == 5


def test_batches_cycle_through_epochs(tmp_path: Path) -> None:
    job, _ = make(tmp_path, HADAR_TOTAL_ITERATIONS="7")
    assert list(job.steps(["a", "b", "c"], state=dict)) == ["a", "b", "c", "a", "b", "c", "a"]
    job, _ = make(tmp_path, HADAR_TOTAL_ITERATIONS="7")
    assert list(job.steps(["a", "b", "c"], state=dict, cycle=False)) == ["a", "b", "c"]


def test_an_iterator_that_runs_out_ends_the_loop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job, out = make(tmp_path, HADAR_TOTAL_ITERATIONS="7")
    assert list(job.steps(iter("abc"), state=dict)) == ["a", "b", "c"]
    assert "the batches ran out at step 3, before the total 7" in capsys.readouterr().err
    assert lines(out)[-1][0] == "HADAR_PROGRESS"
    assert saved_step(tmp_path) == 3


def test_without_a_total_one_pass(tmp_path: Path) -> None:
    out = io.StringIO()
    job = Job(checkpoint_dir=tmp_path, environ={}, stream=out, install_signals=False)
    assert job.total is None
    assert list(job.steps(range(3), state=dict)) == [0, 1, 2]
    assert lines(out)[-1] == ("HADAR_PROGRESS", {"iterations": 3, "step": 3})


def test_loop_errors(tmp_path: Path) -> None:
    job = Job(environ={}, checkpoint_dir=tmp_path, install_signals=False)
    with pytest.raises(HadarJobError, match="needs the job's total"):
        job.steps()
    job, _ = make(tmp_path)
    with pytest.raises(HadarJobError, match="yield nothing"):
        list(job.steps([], state=dict))
    with pytest.raises(HadarJobError, match="save_every"):
        job.steps(save_every=0)


def test_report_in_the_loop_prints_at_the_step_boundary(tmp_path: Path) -> None:
    job, out = make(tmp_path, interval=3600.0)
    for step in job.steps(state=dict):
        assert job.report(loss=step * 0.5, force=step == 2) is False
    assert lines(out) == [
        ("HADAR_PROGRESS", {"iterations": 1, "step": 1, "loss": 0.0}),
        ("HADAR_PROGRESS", {"iterations": 3, "step": 3, "loss": 1.0}),
        ("HADAR_DONE", {"iterations": 5, "step": 5, "loss": 2.0}),
    ]


def test_report_checks_metrics_at_once(tmp_path: Path) -> None:
    job, _ = make(tmp_path)

    def train() -> None:
        for _ in job.steps(state=dict):
            job.report(loss="high")

    with pytest.raises(HadarJobError, match="must be a number"):
        train()


def test_the_deadline_saves_once(tmp_path: Path) -> None:
    job, _ = make(tmp_path, HADAR_ROUND_DEADLINE=str(time.time() - 1))
    calls = []

    def state() -> dict[str, Any]:
        calls.append(job.step)
        return {}

    for step in job.steps(state=state):
        if step == 1:
            assert saved_step(tmp_path) == 1, "saved after the first step"
    assert calls == [1, 5]


def test_save_every(tmp_path: Path) -> None:
    job, _ = make(tmp_path)
    calls = []

    def state() -> dict[str, Any]:
        calls.append(job.step)
        return {}

    for _ in job.steps(state=state, save_every=1e-9):
        time.sleep(0.001)
    assert calls == [1, 2, 3, 4, 5, 5]


def test_other_ranks_neither_report_nor_save(tmp_path: Path) -> None:
    job, out = make(tmp_path, HADAR_PROTOCOL="2", RANK="1", WORLD_SIZE="2")

    def state() -> dict[str, Any]:
        raise AssertionError("not called on rank 1")

    assert list(job.steps(state=state)) == [0, 1, 2, 3, 4]
    assert out.getvalue() == ""
    assert not (tmp_path / "checkpoint.safetensors").exists()
    assert job.save({}) is None
    assert job.save({}, all_ranks=True) == tmp_path / "checkpoint.safetensors"


def test_the_stop_is_agreed_by_every_rank(tmp_path: Path) -> None:
    job, _ = make(tmp_path, HADAR_TOTAL_ITERATIONS="100")
    asked = []

    def agree(flag: bool) -> bool:
        asked.append(flag)
        return len(asked) == 3  # another rank asked to stop

    job.agree_stop = agree
    assert list(job.steps(state=dict)) == [0, 1]
    assert asked == [False, False, False]


def test_break_skips_the_save_and_ends_the_loop_mode(tmp_path: Path) -> None:
    job, out = make(tmp_path, interval=0.0)
    for step in job.steps(state=dict):
        if step == 1:
            break
    assert not (tmp_path / "checkpoint.safetensors").exists()
    assert job.report(loss=1.0), "out of the loop, a report prints at once"
    assert lines(out)[-1] == ("HADAR_PROGRESS", {"iterations": 1, "step": 1, "loss": 1.0})


def test_an_exception_in_the_body_propagates_without_a_save(tmp_path: Path) -> None:
    job, _ = make(tmp_path)

    def train() -> None:
        for step in job.steps(state=dict):
            if step == 2:
                raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        train()
    assert not (tmp_path / "checkpoint.safetensors").exists()


def test_a_loop_of_your_own(tmp_path: Path) -> None:
    job, out = make(tmp_path)
    while job.step < job.total and not job.should_stop():  # type: ignore[operator]
        job.advance()
        job.report(loss=1)
    assert job.finish({"w": array.array("f", [1.0])}) == 0
    assert saved_step(tmp_path) == 5
    assert lines(out)[-1] == ("HADAR_DONE", {"iterations": 5, "step": 5, "loss": 1})
    with pytest.raises(HadarJobError):
        job.advance(-1)


def test_finish_without_a_checkpoint_warns_under_hadar(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job, out = make(tmp_path)
    job.advance(5)
    job.finish()
    assert "no checkpoint at step 5 was written" in capsys.readouterr().err
    assert lines(out)[-1][0] == "HADAR_DONE"


def test_load_outside_hadar_goes_on_from_its_own_checkpoint(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, {"w": array.array("f", [2.0])}, 40)
    job = Job(10, checkpoint_dir=tmp_path, environ={}, install_signals=False)
    assert job.load().step == 40
    job, _ = make(tmp_path)
    assert job.load() == ({}, 0), "under Hadar only resume.safetensors counts"


def test_load_without_a_step_warns(tmp_path: Path) -> None:
    from hadar_job import save_file

    save_file({"w": array.array("f", [2.0])}, tmp_path / "resume.safetensors")
    job, _ = make(tmp_path)
    with pytest.warns(UserWarning, match="no `step` tensor"):
        assert job.load().step == 0


def test_init_and_properties(tmp_path: Path) -> None:
    job = init(7, checkpoint_dir=tmp_path, environ={}, seed=3, install_signals=False)
    assert (job.total, job.rank, job.world_size, job.seed) == (7, 0, 1, 3)
    assert job.is_rank0 and job.checkpoint_dir == tmp_path
    assert job.local_batch_size(32) == 32 and job.loss_scale(32, 32) == 1.0
    assert not job.stop_requested and not job.should_stop()


SCRIPT = textwrap.dedent(
    """
    import array, sys, time
    import hadar_job

    job = hadar_job.init(total=1_000_000)
    w = array.array("f", [0.0])
    print("ready", flush=True)
    for step in job.steps(state=lambda: {"w": w}, exit=True):
        w[0] += 1
        time.sleep(0.001)
    print("not reached", flush=True)
    """
)


def test_a_script_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    env = {**os.environ, **hadar_env(tmp_path, HADAR_TOTAL_ITERATIONS="1000000")}
    env["PYTHONPATH"] = str(PYTHON_SRC)
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    first = proc.stdout.readline()
    assert first.startswith("HADAR_PROGRESS "), first
    proc.send_signal(signal.SIGTERM)
    rest, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    last = rest.splitlines()[-1]
    assert last.startswith("HADAR_PROGRESS "), rest
    assert "not reached" not in rest
    step = json.loads(last.split(" ", 1)[1])["step"]
    ck = load_file(tmp_path / "checkpoint.safetensors")
    assert read_step(ck) == step and ck["w"].tolist() == [float(step)]
