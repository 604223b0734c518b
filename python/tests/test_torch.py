"""The torch helpers. The parts without torch (optimizer state flattening, the lazy
import) run everywhere; the tests marked ``torch`` need PyTorch."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, cast

import pytest

import hadar_job.torch as hj
from conftest import PYTHON_SRC
from hadar_job import HadarJobError, Job, Tensor, encode, load_file, read_step, write_checkpoint

HAS_TORCH = importlib.util.find_spec("torch") is not None


class Fake:
    """A stand-in tensor for the torch-free parts."""

    def __init__(self, v: float) -> None:
        self.v = v

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fake) and other.v == self.v


def test_optimizer_state_flattens_and_comes_back() -> None:
    opt = {
        "state": {
            0: {"momentum_buffer": Fake(1.0)},
            1: {"exp_avg": Fake(2.0), "exp_avg_sq": Fake(3.0), "step": 7, "lr.scale": 0.5},
        },
        "param_groups": [{"lr": 0.1, "params": [0, 1]}],
    }
    flat = hj.flatten_optimizer_state(opt, lambda x: isinstance(x, Fake), lambda n: ("n", n))
    assert flat == {
        "optimizer.state.0.momentum_buffer": Fake(1.0),
        "optimizer.state.1.exp_avg": Fake(2.0),
        "optimizer.state.1.exp_avg_sq": Fake(3.0),
        "optimizer.number.1.step": ("n", 7),
        "optimizer.number.1.lr.scale": ("n", 0.5),
    }
    back = hj.unflatten_optimizer_state({**flat, "layer.weight": Fake(0.0)}, lambda t: t[1])
    assert back == opt["state"]


def test_optimizer_state_that_cannot_be_saved_is_named() -> None:
    with pytest.raises(HadarJobError, match=r"optimizer state 0\.old_dirs is a list"):
        hj.flatten_optimizer_state({"state": {0: {"old_dirs": []}}}, lambda x: False, float)
    with pytest.raises(HadarJobError, match="not an optimizer entry"):
        hj.unflatten_optimizer_state({"optimizer.bogus": 1}, float)


def test_batch_helpers_need_no_torch() -> None:
    job = Job(
        environ={
            "HADAR_PROTOCOL": "2",
            "HADAR_CHECKPOINT_DIR": "/tmp/x",
            "RANK": "1",
            "WORLD_SIZE": "2",
            "HADAR_BATCH_SHARE": "0.75",
        },
        install_signals=False,
    )
    assert hj.local_batch_size(job, 64) == 48
    assert hj.loss_scale(job, 48, 64) == pytest.approx(1.5)


@pytest.mark.skipif(HAS_TORCH, reason="checks the message given where torch is missing")
def test_without_torch_the_message_says_what_to_install() -> None:
    with pytest.raises(ImportError, match=r"pip install 'hadar-job\[torch\]'"):
        hj.from_torch(cast(Any, object()))
    with pytest.raises(ImportError, match="hadar-job"):
        Tensor.scalar("F32", 1.0).to_torch()


# -- with torch ------------------------------------------------------------------------


@pytest.mark.torch
def test_tensors_round_trip() -> None:
    import torch

    values = {
        "f32": torch.randn(3, 4, requires_grad=True),
        "bf16": torch.randn(5).to(torch.bfloat16),
        "f16": torch.randn(2, 2).half(),
        "f64": torch.randn(2).double(),
        "i64": torch.tensor(7),
        "i32": torch.arange(3, dtype=torch.int32),
        "u8": torch.arange(3, dtype=torch.uint8),
        "bool": torch.tensor([True, False]),
        "strided": torch.arange(12.0).reshape(3, 4).t(),
        "empty": torch.zeros(0, 2),
    }
    for name, v in values.items():
        t = hj.from_torch(v, name)
        back = t.to_torch()
        assert back.dtype == v.dtype and back.shape == v.shape, name
        assert torch.equal(back, v.detach()), name
    assert hj.from_torch(torch.tensor(7)).shape == ()
    with pytest.raises(Exception, match="has no safetensors dtype"):
        hj.from_torch(torch.zeros(1, dtype=torch.complex128))


@pytest.mark.torch
@pytest.mark.numpy
def test_bytes_identical_to_safetensors_torch() -> None:
    import torch
    from safetensors.torch import save

    state = {"a": torch.randn(3), "b": torch.randn(2).bfloat16(), "step": torch.tensor(3)}
    assert encode(state) == save(state)


def _model_and_optimizer(seed: int) -> tuple[Any, Any]:
    import torch

    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, opt


def _train_one_step(model: Any, opt: Any) -> None:
    import torch

    x = torch.randn(16, 4)
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()


@pytest.mark.torch
def test_state_dict_save_and_resume(tmp_path: Path) -> None:
    import torch

    model, opt = _model_and_optimizer(0)
    _train_one_step(model, opt)
    state = hj.state_dict(torch.nn.DataParallel(model), opt)
    assert not any(k.startswith("module.") for k in state), "names do not depend on the wrapper"
    assert "optimizer.state.0.momentum_buffer" in state
    assert all(v.device.type == "cpu" and v.is_contiguous() for v in state.values())
    assert state["1.num_batches_tracked"].dtype == torch.int64

    job = Job(10, checkpoint_dir=tmp_path, environ={}, install_signals=False, stream=io.StringIO())
    hj.save(job, model, opt, step=3)
    ck = load_file(tmp_path / "checkpoint.safetensors")
    assert read_step(ck) == 3 and ck["0.weight"].dtype == "F32"

    model2, opt2 = _model_and_optimizer(1)
    job2 = Job(10, checkpoint_dir=tmp_path, environ={}, install_signals=False)
    assert hj.resume(job2, model2, opt2) == 3 and job2.step == 3
    for (k, a), b in zip(model.state_dict().items(), model2.state_dict().values()):
        assert torch.equal(a, b), k
    buf = [opt.state[p]["momentum_buffer"] for p in model.parameters()]
    buf2 = [opt2.state[p]["momentum_buffer"] for p in model2.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(buf, buf2))
    assert opt2.param_groups[0]["lr"] == 0.1


@pytest.mark.torch
def test_the_loop_with_a_torch_state(tmp_path: Path) -> None:
    model, opt = _model_and_optimizer(0)
    out = io.StringIO()
    job = Job(4, checkpoint_dir=tmp_path, environ={}, install_signals=False, stream=out)
    for _ in job.steps(state=hj.state_fn(model, opt)):
        _train_one_step(model, opt)
    assert read_step(load_file(tmp_path / "checkpoint.safetensors")) == 4
    assert out.getvalue().splitlines()[-1].startswith("HADAR_DONE ")


@pytest.mark.torch
def test_one_process_makes_no_group() -> None:
    import torch
    import torch.distributed as dist

    job = Job(1, environ={}, install_signals=False)
    device = hj.init_process_group(job)
    assert device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert job.agree_stop is None
    assert not dist.is_initialized()


RANK_SCRIPT = textwrap.dedent(
    """
    import json, os, signal
    import torch
    import hadar_job, hadar_job.torch as hj

    job = hadar_job.init(total=1000)
    device = hj.init_process_group(job)
    torch.manual_seed(100 + job.rank)  # ranks start apart: resume must align them
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    start = hj.resume(job, model, opt)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    local = job.local_batch_size(8)
    g = torch.Generator().manual_seed(job.rank)
    for step in job.steps(state=hj.state_fn(model, opt)):
        x = torch.randn(local, 4, generator=g)
        (ddp(x).pow(2).mean() * job.loss_scale(local, 8)).backward()
        opt.step()
        opt.zero_grad()
        if job.rank == 1 and step == start + 3:
            os.kill(os.getpid(), signal.SIGTERM)  # one rank asked to stop
    digest = sum(p.double().sum().item() for p in model.parameters())
    print("RESULT " + json.dumps({"rank": job.rank, "start": start, "step": job.step,
                                  "digest": digest}), flush=True)
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.torch
def test_two_ranks_resume_alike_and_stop_together(tmp_path: Path) -> None:
    import torch

    torch.manual_seed(0)
    resume = {"weight": torch.randn(2, 4), "bias": torch.randn(2)}
    write_checkpoint(tmp_path / "rank0", resume, 40, name="resume.safetensors")
    port = _free_port()
    procs = []
    for rank in (0, 1):
        ckdir = tmp_path / f"rank{rank}"
        ckdir.mkdir(exist_ok=True)
        env = {
            **os.environ,
            "PYTHONPATH": str(PYTHON_SRC),
            "CUDA_VISIBLE_DEVICES": "",
            "HADAR_PROTOCOL": "2",
            "HADAR_CHECKPOINT_DIR": str(ckdir),
            "HADAR_TOTAL_ITERATIONS": "1000",
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "HADAR_BATCH_SHARE": "0.75" if rank == 0 else "0.25",
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", RANK_SCRIPT],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        line = next(x for x in out.splitlines() if x.startswith("RESULT "))
        results.append(json.loads(line.split(" ", 1)[1]))
    r0, r1 = results
    assert r0["start"] == r1["start"] == 40, "rank 1 got rank 0's step (it had no file)"
    assert r0["step"] == r1["step"] == 44, "both stopped at the step the signal was agreed"
    assert r0["digest"] == pytest.approx(r1["digest"], abs=0), "same weights on both ranks"
    assert read_step(load_file(tmp_path / "rank0" / "checkpoint.safetensors")) == 44
    assert not (tmp_path / "rank1" / "checkpoint.safetensors").exists(), "rank 0 alone writes"


@pytest.mark.torch
def test_resume_on_a_rank_without_its_group_says_what_to_call(tmp_path: Path) -> None:
    model, opt = _model_and_optimizer(0)
    env = {
        "HADAR_PROTOCOL": "2",
        "RANK": "1",
        "WORLD_SIZE": "2",
        "HADAR_CHECKPOINT_DIR": str(tmp_path),
    }
    job = Job(10, environ=env, install_signals=False)
    with pytest.raises(HadarJobError, match=r"rank 1 of 2: call init_process_group"):
        hj.resume(job, model, opt)
