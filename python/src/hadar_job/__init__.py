"""hadar-job: write a training job for Hadar, the GPU-cluster scheduler, in Python.

The job protocol (environment in, ``HADAR_PROGRESS`` lines out, a signal to stop,
safetensors checkpoints) in a few calls::

    import hadar_job

    job = hadar_job.init(total=1000)          # HADAR_TOTAL_ITERATIONS wins under Hadar
    weights = job.load().arrays() or initial_weights()  # name -> array.array
    for batch in job.steps(loader, state=lambda: weights):
        loss = train(weights, batch)
        job.report(loss=loss)

The core needs only the standard library; ``hadar_job.numpy`` and
``hadar_job.torch`` need the ``numpy`` and ``torch`` extras.
"""

from __future__ import annotations

from .checkpoint import (
    CHECKPOINT_FILE,
    RESUME_FILE,
    SafetensorsFile,
    encode,
    load_file,
    read_file,
    read_step,
    save_file,
    write_atomic,
    write_checkpoint,
)
from .env import JobEnv
from .errors import CheckpointError, EnvError, HadarJobError, TensorError
from .job import Job, Resumed, init
from .report import DONE, PROGRESS, Reporter, format_line
from .stop import StopFlag
from .tensors import DTYPES, Tensor, as_tensor

__version__ = "0.1.0"

__all__ = [
    "CHECKPOINT_FILE",
    "DONE",
    "DTYPES",
    "PROGRESS",
    "RESUME_FILE",
    "CheckpointError",
    "EnvError",
    "HadarJobError",
    "Job",
    "JobEnv",
    "Reporter",
    "Resumed",
    "SafetensorsFile",
    "StopFlag",
    "Tensor",
    "TensorError",
    "__version__",
    "as_tensor",
    "encode",
    "format_line",
    "init",
    "load_file",
    "read_file",
    "read_step",
    "save_file",
    "write_atomic",
    "write_checkpoint",
]
