"""The PyTorch DDP example (examples/pytorch/ddp.py, on ``hadar_job.torch``) run by
``hadar run`` on the local backend as a task of two ranks, on the CPU (gloo).

Needs torch (the ``torch`` extra): CI does not install it (PyPI's torch brings about
3 GB of CUDA wheels); run with ``--require-extra torch`` where it is installed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PYTHON_SRC, REPO
from hadar_job import load_file, read_step

DDP = REPO / "examples" / "pytorch" / "ddp.py"
TWO_NODES = (
    '[[node]]\nname = "h1"\ngpus = { v100 = 1 }\n\n[[node]]\nname = "h2"\ngpus = { k80 = 1 }\n'
)


@pytest.mark.torch
def test_ddp_ranks_train_to_the_total_alike(tmp_path: Path, hadar_bin: Path) -> None:
    """Two ranks on two nodes finish the job with the same weights."""
    total = 300
    (tmp_path / "cluster.toml").write_text(TWO_NODES)
    (tmp_path / "jobs.toml").write_text(
        f"""
[[job]]
name = "torch-ddp"
command = [{json.dumps(sys.executable)}, {json.dumps(str(DDP))}]
iterations = {total}
gang = 2
ranks = "gpu"
throughput = {{ v100 = 50.0, k80 = 20.0 }}
env = {{ PYTHONPATH = {json.dumps(str(PYTHON_SRC))} }}
"""
    )
    state = tmp_path / "state"
    args = [str(hadar_bin), "run", "--cluster", str(tmp_path / "cluster.toml")]
    args += ["--jobs", str(tmp_path / "jobs.toml"), "--state", str(state)]
    # The last task's logs are read below: kept.
    args += ["--round-seconds", "5", "--keep-task-dirs", "--json"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [j["state"] for j in report["jobs"]] == ["finished"], report["jobs"]
    assert report["jobs"][0]["metrics"]["accuracy"] > 0.9
    latest = load_file(state / "jobs" / "0" / "latest.safetensors")
    assert read_step(latest) == total
    # The last task's two ranks: rank 0 in task.log, rank 1 in rank-1.log; each
    # prints its weights' digest at the end, and both are the same.
    last = sorted(state.glob("tasks/*"), key=lambda d: d.stat().st_mtime)[-1]
    digests = [
        re.findall(r"rank (\d)/2: step (\d+), weight sum (\S+)", (last / log).read_text())
        for log in ("task.log", "rank-1.log")
    ]
    assert [d[-1][0] for d in digests] == ["0", "1"], digests
    assert digests[0][-1][1:] == digests[1][-1][1:], digests
    assert digests[0][-1][1] == str(total)
