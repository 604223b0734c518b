"""The job protocol's environment (docs/job-protocol.md), read into one object.

Every field has a default for a script run outside Hadar, so that the same script
runs unchanged by hand: no ``HADAR_*`` variables means job 0, copy 0, round 0, no
deadline, the total given by the script, checkpoints in ``./hadar-checkpoints``.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import EnvError

__all__ = ["DEFAULT_CHECKPOINT_DIR", "PROTOCOL_VARIABLES", "JobEnv"]

#: Where checkpoints go outside Hadar (relative to the working directory).
DEFAULT_CHECKPOINT_DIR = "hadar-checkpoints"

#: The variables ``hadar`` sets for every task (protocol version 1).
PROTOCOL_VARIABLES = (
    "HADAR_PROTOCOL",
    "HADAR_JOB_ID",
    "HADAR_COPY",
    "HADAR_ROUND",
    "HADAR_ROUND_DEADLINE",
    "HADAR_TOTAL_ITERATIONS",
    "HADAR_GPU_TYPE",
    "HADAR_CHECKPOINT_DIR",
    "HADAR_SEED",
    "HADAR_JOB_NAME",
    "HADAR_TASK_TOKEN",
)


#: An integer as ``hadar`` writes one: ASCII digits only. Python's ``int()`` also takes
#: ``1_000``, ``+5``, surrounding spaces and other scripts' digits (``'\u0661'``),
#: which no one meant to set and which would hide a broken value.
_DIGITS = re.compile(r"[0-9]+")


def _int(env: Mapping[str, str], key: str, default: int | None, minimum: int = 0) -> int | None:
    raw = env.get(key)
    if raw is None or raw == "":
        return default
    # Every variable read here has a minimum >= 0, so no sign is ever allowed; a
    # negative value is still told apart, as below the minimum ("-0" is not).
    if raw[:1] == "-" and _DIGITS.fullmatch(raw[1:]) and raw[1:].strip("0"):
        raise EnvError(f"{key}={raw!r} is below {minimum}")
    if _DIGITS.fullmatch(raw) is None:
        # ascii(), not repr(): a look-alike digit (fullwidth, Arabic-Indic) shows
        # as its escape.
        raise EnvError(
            f"{key}={raw!a} is not an integer (ASCII digits 0-9 only: no sign, spaces "
            "or underscores)"
        )
    try:
        value = int(raw)
    except ValueError:  # over Python's limit on the digits of an int (4300)
        raise EnvError(f"{key}={raw[:20]!r}... has {len(raw)} digits, too many") from None
    if value < minimum:
        raise EnvError(f"{key}={raw!r} is below {minimum}")
    return value


def _float(env: Mapping[str, str], key: str) -> float | None:
    raw = env.get(key)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        raise EnvError(f"{key}={raw!r} is not a number") from None
    if not math.isfinite(value):
        raise EnvError(f"{key}={raw!r} is not a finite number")
    return value


def _list(env: Mapping[str, str], key: str) -> tuple[str, ...]:
    raw = env.get(key, "")
    return tuple(x.strip() for x in raw.split(",") if x.strip())


@dataclass(frozen=True)
class JobEnv:
    """What the job protocol tells a task, with defaults outside Hadar.

    Build it with :meth:`from_environ`; every field is read-only.
    """

    #: Whether the task runs under Hadar (``HADAR_PROTOCOL`` is set).
    in_hadar: bool
    #: The protocol version (``HADAR_PROTOCOL``): 1, or 2 for a job of ranks;
    #: 0 outside Hadar.
    protocol: int
    #: The job's id (``HADAR_JOB_ID``; 0 outside Hadar).
    job_id: int
    #: The job's name in the jobs file (``HADAR_JOB_NAME``; the script's choice outside).
    job_name: str
    #: The copy index (``HADAR_COPY``): 0 for a job's only gang, 1..n for HadarE copies.
    copy: int
    #: The round the task was started in (``HADAR_ROUND``).
    round: int
    #: Unix time at which the task's first round ends (``HADAR_ROUND_DEADLINE``), a
    #: good moment to checkpoint; ``None`` outside Hadar.
    deadline: float | None
    #: The job's total iterations (``HADAR_TOTAL_ITERATIONS``; outside Hadar the
    #: script's default); ``None`` when neither gives one.
    total: int | None
    #: The task's own directory (``HADAR_CHECKPOINT_DIR``, absolute): resume from
    #: ``resume.safetensors`` there, write ``checkpoint.safetensors`` there.
    checkpoint_dir: Path
    #: A seed that differs between copies (``HADAR_SEED``), for data order.
    seed: int
    #: The GPU types of the task's GPUs (``HADAR_GPU_TYPE``, split on commas).
    gpu_types: tuple[str, ...]
    #: The task's GPUs (``CUDA_VISIBLE_DEVICES``, split on commas; fake ids on a
    #: machine without GPUs).
    visible_devices: tuple[str, ...]
    #: The task's token (``HADAR_TASK_TOKEN``); ``None`` outside Hadar.
    task_token: str | None
    #: This process's rank (``RANK``): 0 for a task of version 1.
    rank: int
    #: Ranks in the task (``WORLD_SIZE``): 1 for a task of version 1.
    world_size: int
    #: The rank on its node (``LOCAL_RANK``).
    local_rank: int
    #: Ranks on this node (``LOCAL_WORLD_SIZE``).
    local_world_size: int
    #: This node's index in the task (``GROUP_RANK``).
    group_rank: int
    #: Nodes in the task (``GROUP_WORLD_SIZE``).
    group_world_size: int
    #: Where rank 0 waits for the others (``MASTER_ADDR``), if set.
    master_addr: str | None
    #: Its port (``MASTER_PORT``), if set.
    master_port: int | None
    #: This node's name in the cluster (``HADAR_NODE``), if set.
    node: str | None
    #: This rank's share of the global batch (``HADAR_BATCH_SHARE``; default
    #: ``1 / world_size``).
    batch_share: float

    @property
    def is_rank0(self) -> bool:
        """Whether this process speaks for the task (reports, writes the checkpoint)."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """Whether the task has more than one rank."""
        return self.world_size > 1

    @property
    def resume_path(self) -> Path:
        """``checkpoint_dir / "resume.safetensors"``: the checkpoint to resume from."""
        return self.checkpoint_dir / "resume.safetensors"

    @property
    def checkpoint_path(self) -> Path:
        """``checkpoint_dir / "checkpoint.safetensors"``: where the task's checkpoint goes."""
        return self.checkpoint_dir / "checkpoint.safetensors"

    def local_batch_size(self, global_batch: int) -> int:
        """This rank's part of a global batch: ``round(global_batch * batch_share)``,
        at least 1 (the whole batch for one process).
        """
        if isinstance(global_batch, bool) or not isinstance(global_batch, int) or global_batch < 1:
            raise EnvError(f"global_batch must be an int >= 1, not {global_batch!r}")
        return max(1, round(global_batch * self.batch_share))

    def loss_scale(self, local_batch: int, global_batch: int) -> float:
        """The factor to scale this rank's loss by, ``local_batch / global_batch *
        world_size``, so that averaging gradients over ranks (as DDP does) averages
        them over examples when the shares are uneven (1.0 for equal shares).
        """
        if local_batch < 1 or global_batch < 1:
            raise EnvError(f"batches must be >= 1, not {local_batch} and {global_batch}")
        return local_batch / global_batch * self.world_size

    def seconds_to_deadline(self, now: float | None = None) -> float | None:
        """Seconds until :attr:`deadline` (negative once it has passed); ``None``
        without a deadline.
        """
        if self.deadline is None:
            return None
        return self.deadline - (time.time() if now is None else now)

    @classmethod
    def from_environ(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        total: int | None = None,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        job_name: str | None = None,
        seed: int = 0,
    ) -> JobEnv:
        """Reads the protocol's variables from ``environ`` (default ``os.environ``).

        Args:
            environ: the environment to read.
            total: the total iterations outside Hadar (under Hadar,
                ``HADAR_TOTAL_ITERATIONS`` wins).
            checkpoint_dir: the checkpoint directory outside Hadar (default
                ``./hadar-checkpoints``, made absolute).
            job_name: the job's name outside Hadar (default: ``"job"``).
            seed: the seed outside Hadar.

        Raises:
            EnvError: a variable holds a value the protocol does not allow (the
                message names it), or a version-2 task lacks ``RANK``/``WORLD_SIZE``.
        """
        env = os.environ if environ is None else environ
        if total is not None and (isinstance(total, bool) or not isinstance(total, int)):
            raise EnvError(f"total must be an int, not {type(total).__name__}")
        if total is not None and total < 1:
            raise EnvError(f"total must be at least 1, not {total}")
        protocol = _int(env, "HADAR_PROTOCOL", None, minimum=1)
        in_hadar = protocol is not None
        given_total = _int(env, "HADAR_TOTAL_ITERATIONS", None, minimum=1)
        ckdir_raw = env.get("HADAR_CHECKPOINT_DIR") or None
        if in_hadar and ckdir_raw is None:
            raise EnvError("HADAR_PROTOCOL is set but HADAR_CHECKPOINT_DIR is not")
        if ckdir_raw is not None:
            ckdir = Path(ckdir_raw)
        elif checkpoint_dir is not None:
            ckdir = Path(checkpoint_dir)
        else:
            ckdir = Path(DEFAULT_CHECKPOINT_DIR)
        ckdir = Path(os.path.abspath(ckdir))

        # Ranks: read for a task of version 2, and outside Hadar (a script run by
        # torchrun); a version-1 task is rank 0 of 1, whatever RANK it inherited.
        ranked = (protocol or 0) >= 2 or not in_hadar
        if (protocol or 0) >= 2:
            for key in ("RANK", "WORLD_SIZE"):
                if not env.get(key):
                    raise EnvError(
                        f"HADAR_PROTOCOL={protocol} (a job of ranks) but {key} is not set"
                    )
        rank = (_int(env, "RANK", 0) if ranked else 0) or 0
        world = (_int(env, "WORLD_SIZE", 1, minimum=1) if ranked else 1) or 1
        if rank >= world:
            raise EnvError(f"RANK={rank} is not below WORLD_SIZE={world}")
        local_rank = _int(env, "LOCAL_RANK", rank) if ranked else 0
        local_world = _int(env, "LOCAL_WORLD_SIZE", world, minimum=1) if ranked else 1
        group_rank = _int(env, "GROUP_RANK", 0) if ranked else 0
        group_world = _int(env, "GROUP_WORLD_SIZE", 1, minimum=1) if ranked else 1
        master_port = _int(env, "MASTER_PORT", None, minimum=1) if ranked else None
        if master_port is not None and master_port > 65535:
            raise EnvError(f"MASTER_PORT={master_port} is not a port")
        share = _float(env, "HADAR_BATCH_SHARE") if ranked else None
        if share is None:
            share = 1.0 / world
        elif not 0.0 < share <= 1.0:
            raise EnvError(f"HADAR_BATCH_SHARE={share} is not in (0, 1]")
        name = env.get("HADAR_JOB_NAME") or job_name or "job"
        return cls(
            in_hadar=in_hadar,
            protocol=protocol or 0,
            job_id=_int(env, "HADAR_JOB_ID", 0) or 0,
            job_name=name,
            copy=_int(env, "HADAR_COPY", 0) or 0,
            round=_int(env, "HADAR_ROUND", 0) or 0,
            deadline=_float(env, "HADAR_ROUND_DEADLINE"),
            total=given_total if given_total is not None else total,
            checkpoint_dir=ckdir,
            seed=_int(env, "HADAR_SEED", seed) or 0,
            gpu_types=_list(env, "HADAR_GPU_TYPE"),
            visible_devices=_list(env, "CUDA_VISIBLE_DEVICES"),
            task_token=env.get("HADAR_TASK_TOKEN") or None,
            rank=rank,
            world_size=world,
            local_rank=local_rank or 0,
            local_world_size=local_world or 1,
            group_rank=group_rank or 0,
            group_world_size=group_world or 1,
            master_addr=(env.get("MASTER_ADDR") or None) if ranked else None,
            master_port=master_port,
            node=env.get("HADAR_NODE") or None,
            batch_share=share,
        )
