"""PyTorch helpers (the ``torch`` extra); torch is imported only when a function
needs it, so ``import hadar_job.torch`` works without it.

- :func:`init_process_group`: the process group of a task of ranks (protocol
  version 2), from ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT``, on device 0
  (each rank sees only its own GPUs), with the stop request agreed across ranks.
- :func:`state_dict` / :func:`load_state_dict`: a model's (and optimizer's) state as
  flat, CPU, contiguous tensors with stable names, which ``hadar merge`` can average
  across HadarE copies, and back.
- :func:`resume`: rank 0 reads the checkpoint and sends it to every rank.
- :func:`save` and :func:`state_fn`: save that state (rank 0 only).

The batch share and loss scale are :meth:`hadar_job.Job.local_batch_size` and
:meth:`hadar_job.Job.loss_scale` (no torch needed); they are also here.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Callable, SupportsIndex

from .errors import HadarJobError, TensorError
from .tensors import Tensor, _swap_bytes

if TYPE_CHECKING:
    import torch

    from .job import Job

__all__ = [
    "OPTIMIZER_PREFIX",
    "agree_stop",
    "flatten_optimizer_state",
    "from_torch",
    "init_process_group",
    "load_state_dict",
    "local_batch_size",
    "loss_scale",
    "resume",
    "save",
    "state_dict",
    "state_fn",
    "to_torch",
    "unflatten_optimizer_state",
]

#: Names of optimizer entries in a saved state start with this.
OPTIMIZER_PREFIX = "optimizer."

# safetensors dtype <-> torch dtype attribute name (looked up on torch, so that dtypes
# an older torch lacks are simply not offered).
_TORCH_NAMES: dict[str, str] = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "F8_E5M2": "float8_e5m2",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E8M0": "float8_e8m0fnu",
    "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
    "I16": "int16",
    "U16": "uint16",
    "F16": "float16",
    "BF16": "bfloat16",
    "I32": "int32",
    "U32": "uint32",
    "F32": "float32",
    "C64": "complex64",
    "F64": "float64",
    "I64": "int64",
    "U64": "uint64",
}


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ImportError("hadar_job.torch needs PyTorch: pip install 'hadar-job[torch]'") from None
    return torch


def _dtype_maps() -> tuple[dict[str, Any], dict[Any, str]]:
    torch = _torch()
    to_torch_map = {
        st: getattr(torch, name) for st, name in _TORCH_NAMES.items() if hasattr(torch, name)
    }
    return to_torch_map, {v: k for k, v in to_torch_map.items()}


# -- tensors -----------------------------------------------------------------------------


def from_torch(value: torch.Tensor, name: str = "tensor") -> Tensor:
    """A :class:`~hadar_job.Tensor` of a torch tensor: detached, on the CPU,
    contiguous, little-endian (any device, any layout of strides).
    """
    torch = _torch()
    if not isinstance(value, torch.Tensor):
        raise TensorError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    _, from_map = _dtype_maps()
    dtype = from_map.get(value.dtype)
    if dtype is None:
        raise TensorError(f"{name}: torch dtype {value.dtype} has no safetensors dtype")
    if value.layout != torch.strided:
        raise TensorError(f"{name}: a {value.layout} tensor; save .to_dense() instead")
    t = value.detach().to("cpu").contiguous()
    shape = tuple(int(d) for d in t.shape)
    if t.numel() == 0:
        return Tensor(dtype, shape, b"")
    flat = t.reshape(-1).view(torch.uint8)
    try:
        data = flat.numpy().tobytes()
    except (ImportError, RuntimeError, TypeError):  # torch built without numpy
        data = bytes(flat.tolist())
    if sys.byteorder == "big":
        data = _swap_bytes(data, t.element_size() // (2 if dtype == "C64" else 1))
    return Tensor(dtype, shape, data)


def to_torch(tensor: Tensor) -> torch.Tensor:
    """A CPU torch tensor (writable, its own memory) of a :class:`~hadar_job.Tensor`."""
    torch = _torch()
    to_map, _ = _dtype_maps()
    dtype = to_map.get(tensor.dtype)
    if dtype is None:
        raise TensorError(f"{tensor.dtype} has no dtype in this torch {torch.__version__}")
    if tensor.numel == 0:
        return torch.empty(tensor.shape, dtype=dtype)
    data = tensor.data
    if sys.byteorder == "big":
        width = 4 if tensor.dtype == "C64" else len(data) // tensor.numel
        data = _swap_bytes(data, width)
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(tensor.shape)


# -- state dicts -------------------------------------------------------------------------


def _is_tensor(x: Any) -> bool:
    torch = _torch()
    return isinstance(x, torch.Tensor)


def flatten_optimizer_state(
    opt_state: Mapping[str, Any],
    is_tensor: Callable[[Any], bool],
    scalar: Callable[[int | float], Any],
) -> dict[str, Any]:
    """An optimizer's ``state_dict()['state']`` as flat entries:
    ``optimizer.state.{index}.{key}`` for each tensor (momentum buffers, Adam's
    moments and step), ``optimizer.number.{index}.{key}`` for each number (made a
    tensor by ``scalar``). ``param_groups`` (the hyperparameters) are not saved: the
    script builds its optimizer with them again (an LR schedule should follow
    ``job.step``).

    Raises:
        HadarJobError: a state value that is neither a tensor nor a number.
    """
    out: dict[str, Any] = {}
    for index, entries in opt_state.get("state", {}).items():
        for key, value in entries.items():
            if is_tensor(value):
                out[f"{OPTIMIZER_PREFIX}state.{index}.{key}"] = value
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                out[f"{OPTIMIZER_PREFIX}number.{index}.{key}"] = scalar(value)
            else:
                raise HadarJobError(
                    f"optimizer state {index}.{key} is a {type(value).__name__}; only tensors "
                    "and numbers can be saved (leave the optimizer out, or save it yourself)"
                )
    return out


def unflatten_optimizer_state(
    tensors: Mapping[str, Any], number: Callable[[Any], int | float]
) -> dict[int, dict[str, Any]]:
    """The optimizer ``state`` of :func:`flatten_optimizer_state`'s entries (others
    are ignored); ``number`` turns a saved number back into a Python number.
    """
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        if not name.startswith(OPTIMIZER_PREFIX):
            continue
        parts = name[len(OPTIMIZER_PREFIX) :].split(".", 2)
        if len(parts) != 3 or parts[0] not in ("state", "number") or not parts[1].isdigit():
            raise HadarJobError(f"{name!r} is not an optimizer entry this package wrote")
        kind, index, key = parts
        state.setdefault(int(index), {})[key] = value if kind == "state" else number(value)
    return state


def _unwrap(model: Any) -> Any:
    """The module inside a DistributedDataParallel/DataParallel wrapper (so that
    names do not depend on the wrapping: no ``module.`` prefix).
    """
    name = type(model).__name__
    if name in ("DistributedDataParallel", "DataParallel") and hasattr(model, "module"):
        return model.module
    return model


def state_dict(model: Any, optimizer: Any | None = None) -> dict[str, torch.Tensor]:
    """The state to save: the model's ``state_dict()`` (unwrapped from DDP) and, with
    ``optimizer``, its state (see :func:`flatten_optimizer_state`), every tensor
    detached, on the CPU and contiguous, names stable across runs. ``hadar merge``
    averages its float tensors across HadarE copies and takes integer ones from the
    copy with the most iterations.
    """
    th = _torch()
    out: dict[str, torch.Tensor] = {}
    for k, v in _unwrap(model).state_dict().items():
        if not isinstance(v, th.Tensor):
            raise HadarJobError(f"model state {k!r} is a {type(v).__name__}, not a tensor")
        out[k] = v.detach().to("cpu").contiguous()
    if optimizer is not None:
        for k in out:
            if k.startswith(OPTIMIZER_PREFIX):
                raise HadarJobError(
                    f"the model has an entry {k!r}: its names clash with the optimizer's"
                )

        def scalar(x: int | float) -> torch.Tensor:
            return th.tensor(x, dtype=th.int64 if isinstance(x, int) else th.float64)

        flat = flatten_optimizer_state(optimizer.state_dict(), _is_tensor, scalar)
        for k, v in flat.items():
            out[k] = v.detach().to("cpu").contiguous()
    return out


def load_state_dict(
    tensors: Mapping[str, Any], model: Any, optimizer: Any | None = None, strict: bool = True
) -> None:
    """Loads a state saved by :func:`state_dict` (its values torch tensors or
    :class:`~hadar_job.Tensor`) into ``model`` and ``optimizer``. The optimizer keeps
    its own ``param_groups`` (hyperparameters). Entries of the optimizer are ignored
    when ``optimizer`` is ``None``.
    """
    conv = {k: (to_torch(v) if isinstance(v, Tensor) else v) for k, v in tensors.items()}
    model_state = {k: v for k, v in conv.items() if not k.startswith(OPTIMIZER_PREFIX)}
    _unwrap(model).load_state_dict(model_state, strict=strict)
    if optimizer is not None:
        state = unflatten_optimizer_state(conv, lambda t: t.item())
        if state:
            current = optimizer.state_dict()
            optimizer.load_state_dict({"state": state, "param_groups": current["param_groups"]})


def state_fn(model: Any, optimizer: Any | None = None) -> Callable[[], dict[str, torch.Tensor]]:
    """A ``state`` callback for :meth:`hadar_job.Job.steps`:
    ``job.steps(loader, state=hj.state_fn(model, opt))``.
    """
    return lambda: state_dict(model, optimizer)


def save(
    job: Job, model: Any, optimizer: Any | None = None, step: SupportsIndex | None = None
) -> Any:
    """Saves the model's (and optimizer's) state as the job's checkpoint, on rank 0
    (see :meth:`hadar_job.Job.save`). Returns the path, or ``None`` on other ranks.
    """
    if not job.is_rank0:
        return None
    return job.save(state_dict(model, optimizer), step)


def resume(job: Job, model: Any, optimizer: Any | None = None, strict: bool = True) -> int:
    """Resumes every rank from rank 0's checkpoint: rank 0 reads it
    (:meth:`hadar_job.Job.load`) and, in a process group of several ranks, sends its
    tensors and step to the others, so that all start alike even where a node lacks the
    file. Loads them into ``model`` (and ``optimizer``), sets ``job.step`` and returns it.

    Call it before wrapping the model in DDP, on every rank (a collective call when
    the process group is initialised).
    """
    import torch.distributed as dist

    grouped = dist.is_available() and dist.is_initialized()
    if job.world_size > 1 and not grouped:
        raise HadarJobError(
            f"rank {job.rank} of {job.world_size}: call init_process_group(job) before "
            "resume(): the ranks other than 0 receive rank 0's checkpoint through the group"
        )
    payload: list[Any] = [None]
    if job.is_rank0:
        resumed = job.load()
        payload = [(resumed.tensors, resumed.step)]
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.broadcast_object_list(payload, src=0)
    tensors, step = payload[0]
    if tensors:
        load_state_dict(tensors, model, optimizer, strict=strict)
        job.resumed_from = job.resumed_from or job.env.resume_path
    job.step = job.start_step = int(step)
    return job.step


# -- the process group -----------------------------------------------------------------


def agree_stop(flag: bool, device: Any = None) -> bool:
    """Whether any rank asks to stop: an all-reduce (MAX) of this rank's flag. Every
    rank must call it at the same step boundary.
    """
    torch = _torch()
    import torch.distributed as dist

    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def init_process_group(
    job: Job, backend: str | None = None, timeout: timedelta | None = None
) -> torch.device:
    """Initialises ``torch.distributed`` for the task's ranks and returns the device
    to train on.

    - device: ``cuda:0`` where CUDA is available (``CUDA_VISIBLE_DEVICES`` shows each
      rank its own GPUs only, so ``LOCAL_RANK`` must not pick the device), else the CPU;
    - backend: ``nccl`` with CUDA, ``gloo`` without (unless given);
    - ``init_method="env://"`` with the protocol's ``RANK``, ``WORLD_SIZE``,
      ``MASTER_ADDR`` and ``MASTER_PORT``;
    - sets ``job.agree_stop``, so that :meth:`hadar_job.Job.should_stop` (and the
      :meth:`~hadar_job.Job.steps` loop) stop every rank at the same step.

    With one rank (protocol version 1, or a script run by hand) no group is made
    (there is no one to talk to): only the device is chosen.

    Raises:
        HadarJobError: several ranks but no ``MASTER_ADDR``/``MASTER_PORT``.
    """
    torch = _torch()
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(0)
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if job.world_size <= 1:
        return device
    env = job.env
    if env.master_addr is None or env.master_port is None:
        raise HadarJobError(
            f"rank {env.rank} of {env.world_size} but MASTER_ADDR/MASTER_PORT are not set"
        )
    backend = backend or ("nccl" if cuda else "gloo")
    kwargs: dict[str, Any] = {}
    if timeout is not None:
        kwargs["timeout"] = timeout
    if not dist.is_initialized():
        dist.init_process_group(
            backend=backend,
            init_method="env://",
            rank=env.rank,
            world_size=env.world_size,
            **kwargs,
        )
    flag_device = device if dist.get_backend() == "nccl" else torch.device("cpu")
    job.agree_stop = lambda flag: agree_stop(flag, flag_device)
    return device


def local_batch_size(job: Job, global_batch: int) -> int:
    """This rank's part of ``global_batch``: ``round(global_batch *
    HADAR_BATCH_SHARE)``, at least 1.
    """
    return job.local_batch_size(global_batch)


def loss_scale(job: Job, local_batch: int, global_batch: int) -> float:
    """``local_batch / global_batch * WORLD_SIZE``: multiply this rank's loss by it so
    that DDP's average over ranks is an average over examples.
    """
    return job.loss_scale(local_batch, global_batch)
