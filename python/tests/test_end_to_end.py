"""The example job (examples/python/train.py, on this package) run by ``hadar run``
on the local backend: killed and resumed, and as HadarE copies that are merged."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from conftest import PYTHON_SRC, REPO
from hadar_job import load_file, read_file, read_step

TRAIN = REPO / "examples" / "python" / "train.py"
TRAIN_NUMPY = REPO / "examples" / "python" / "train_numpy.py"


def setup_run(
    tmp_path: Path, nodes: str, total: int, step_seconds: float, script: Path = TRAIN
) -> list[str]:
    """Writes the cluster and jobs files; returns ``hadar run``'s arguments after
    the binary."""
    (tmp_path / "cluster.toml").write_text(nodes)
    (tmp_path / "jobs.toml").write_text(
        f"""
[[job]]
name = "toy"
command = [{json.dumps(sys.executable)}, {json.dumps(str(script))}]
iterations = {total}
env = {{ PYTHONPATH = {json.dumps(str(PYTHON_SRC))}, TRAIN_STEP_SECONDS = "{step_seconds}" }}
"""
    )
    return [
        "run",
        "--cluster",
        str(tmp_path / "cluster.toml"),
        "--jobs",
        str(tmp_path / "jobs.toml"),
        "--state",
        str(tmp_path / "state"),
        "--round-seconds",
        "1",
        "--grace",
        "5",
        # The tests read the task directories' logs and checkpoints after the
        # run: kept (by default they go once each task is collected).
        "--keep-task-dirs",
        "--json",
    ]


def status(hadar: Path, state: Path) -> dict[str, Any]:
    out = subprocess.run(
        [str(hadar), "status", "--json", "--state", str(state)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if out.returncode != 0:
        return {}
    got: dict[str, Any] = json.loads(out.stdout)
    return got


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 60.0) -> Any:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = probe()
        if got:
            return got
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


def task_with(hadar: Path, state: Path, min_iterations: int, not_id: str | None = None) -> Any:
    for t in status(hadar, state).get("tasks", []):
        if t["id"] != not_id and t["iterations"] >= min_iterations:
            return t
    return None


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def finished_report(proc: subprocess.CompletedProcess[str], total: int) -> dict[str, Any]:
    assert proc.returncode == 0, f"hadar run failed:\n{proc.stderr}"
    report: dict[str, Any] = json.loads(proc.stdout)
    for job in report["jobs"]:
        assert job["state"] == "finished", job
        assert job["iterations"] == total, job
        assert job["accuracy"] >= 0.85, job
    return report


ONE_GPU = '[[node]]\nname = "n1"\ngpus = { v100 = 1 }\n'


def test_killed_and_resumed_to_the_total(tmp_path: Path, hadar_bin: Path) -> None:
    total = 600
    args = [str(hadar_bin), *setup_run(tmp_path, ONE_GPU, total, 0.01)]
    state = tmp_path / "state"
    with open(tmp_path / "first.err", "w") as err:
        first = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err)
        try:
            # The task is killed once, with hadar watching: it resumes from the
            # checkpoint the task wrote when its first round's deadline passed.
            task = wait_for("a task with progress", lambda: task_with(hadar_bin, state, 150))
            os.kill(int(task["id"]), signal.SIGKILL)
            again = wait_for(
                "the job's next task",
                lambda: task_with(hadar_bin, state, 20, not_id=task["id"]),
            )
            # hadar is killed with its task running: the task runs on.
            first.kill()
            first.wait(timeout=30)
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
    orphan = int(again["id"])
    assert alive(orphan), "the task outlives the killed hadar"
    first_err = (tmp_path / "first.err").read_text()
    assert re.search(r"job toy.*(killed|signal|exited)", first_err), first_err

    # The same command resumes the run, adopts the task and finishes the job.
    second = subprocess.run(args, capture_output=True, text=True, timeout=180)
    finished_report(second, total)
    latest = load_file(state / "jobs" / "0" / "latest.safetensors")
    assert read_step(latest) == total
    assert sorted(latest) == ["b", "step", "w"]
    assert not alive(orphan)
    logs = sorted(state.glob("tasks/*/task.log"))
    assert len(logs) >= 2
    assert any("HADAR_DONE" in p.read_text() for p in logs)


THREE_GPUS = (
    '[[node]]\nname = "n1"\ngpus = { v100 = 2 }\n\n[[node]]\nname = "n2"\ngpus = { k80 = 1 }\n'
)


def _round_groups(state: Path) -> dict[int, list[Path]]:
    groups: dict[int, list[Path]] = {}
    for d in sorted(state.glob("tasks/job0-round*-copy*-l*")):
        m = re.fullmatch(r"job0-round(\d+)-copy(\d+)-l\d+-\w+", d.name)
        assert m, d.name
        if (d / "checkpoint.safetensors").is_file():
            groups.setdefault(int(m.group(1)), []).append(d)
    return groups


def _credit(task_dir: Path) -> int:
    """What hadar credits a task with: its checkpoint's step minus its resume's."""
    step = read_step(load_file(task_dir / "checkpoint.safetensors")) or 0
    resume = task_dir / "resume.safetensors"
    base = read_step(load_file(resume)) or 0 if resume.is_file() else 0
    return step - base


def test_hadare_copies_are_merged(tmp_path: Path, hadar_bin: Path) -> None:
    total = 800
    args = [str(hadar_bin), *setup_run(tmp_path, THREE_GPUS, total, 0.01)]
    args += ["--policy", "hadare"]
    state = tmp_path / "state"
    proc = subprocess.run(args, capture_output=True, text=True, timeout=180)
    finished_report(proc, total)

    groups = _round_groups(state)
    forked = {r: ds for r, ds in groups.items() if len(ds) >= 2}
    assert forked, f"no round ran copies: {groups}"
    last = max(groups)
    copies = groups[last]
    assert len(copies) >= 2, f"the last round ran one copy: {copies}"
    # The job's checkpoint is the merge of its last round's copies, weighted by the
    # iterations hadar credits each with: merge them again and compare.
    again = tmp_path / "again.safetensors"
    merge = subprocess.run(
        [str(hadar_bin), "merge", "--out", str(again)]
        + [f"{d / 'checkpoint.safetensors'}:{_credit(d)}" for d in copies],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert merge.returncode == 0, merge.stderr
    latest = read_file(state / "jobs" / "0" / "latest.safetensors")
    merged = read_file(again)
    assert {k: v for k, v in latest.tensors.items() if k != "step"} == {
        k: v for k, v in merged.tensors.items() if k != "step"
    }
    assert latest.metadata == merged.metadata
    for d in copies:
        assert load_file(d / "checkpoint.safetensors")["w"] != latest.tensors["w"], (
            "a merge, not one copy's checkpoint"
        )
    # The merged step is where the job stands: the step the copies resumed from
    # plus what they added together (hadar sets it; the merge alone would take
    # the leading copy's).
    resume = copies[0] / "resume.safetensors"
    base = (read_step(load_file(resume)) or 0) if resume.is_file() else 0
    step = read_step(latest.tensors)
    assert step == base + sum(_credit(d) for d in copies)
    assert step is not None and step >= total


def test_the_example_runs_by_hand_and_goes_on_from_its_checkpoint(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    env = {**os.environ, "PYTHONPATH": str(PYTHON_SRC)}
    run = [sys.executable, str(TRAIN)]
    first = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-2].startswith('HADAR_DONE {"iterations": 2000, "step": 2000')
    ck = tmp_path / "hadar-checkpoints" / "checkpoint.safetensors"
    assert read_step(load_file(ck)) == 2000
    again = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "step 2000 to 2000" in again.stdout
    assert 'HADAR_DONE {"iterations": 0, "step": 2000' in again.stdout


@pytest.mark.numpy
def test_the_numpy_job_runs_as_hadare_copies(tmp_path: Path, hadar_bin: Path) -> None:
    """examples/python/train_numpy.py: numpy weights saved, merged across copies,
    resumed, to the total."""
    total = 1500
    args = [str(hadar_bin), *setup_run(tmp_path, THREE_GPUS, total, 0.002, TRAIN_NUMPY)]
    proc = subprocess.run(
        [*args, "--policy", "hadare"], capture_output=True, text=True, timeout=180
    )
    report = finished_report(proc, total)
    assert report["jobs"][0]["metrics"]["accuracy"] > 0.9
    latest = load_file(tmp_path / "state" / "jobs" / "0" / "latest.safetensors")
    # At least the total: copies of the round that finished the job count together.
    step = read_step(latest)
    assert step is not None
    assert step >= total
    assert latest["w"].dtype == "F32"
    assert latest["w"].shape == (16, 4)
