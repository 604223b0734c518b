"""One object for a training script: the protocol's environment, reports, the stop
request, checkpoints and the step counters.
"""

from __future__ import annotations

import array
import operator
import os
import signal
import sys
import warnings
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    NamedTuple,
    SupportsIndex,
    TextIO,
    TypeVar,
    overload,
)

from .checkpoint import has_checkpoint, load_file, read_step, write_checkpoint
from .env import JobEnv
from .errors import CheckpointError, HadarJobError
from .report import Reporter, format_line
from .stop import DEFAULT_SIGNALS, StopFlag
from .tensors import Tensor

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Job", "Resumed", "init"]

T = TypeVar("T")


class Resumed(NamedTuple):
    """What :meth:`Job.load` returns: the checkpoint's tensors (without ``step``) and
    the step to resume from (0, with no tensors, when there is nothing to resume).
    """

    tensors: dict[str, Tensor]
    step: int

    def arrays(self) -> dict[str, array.array[Any]]:
        """The tensors as flat :class:`array.array` values (standard library only),
        as a script that saves ``array.array`` values gets them back.
        """
        return {k: t.to_array() for k, t in self.tensors.items()}

    def numpy(self) -> dict[str, np.ndarray]:
        """The tensors as numpy arrays (needs the ``numpy`` extra)."""
        return {k: t.to_numpy() for k, t in self.tensors.items()}

    def torch(self) -> dict[str, Any]:
        """The tensors as CPU torch tensors: a state dict (needs the ``torch`` extra)."""
        return {k: t.to_torch() for k, t in self.tensors.items()}


class Job:
    """A training job's side of the job protocol.

    Creating it reads the environment (:class:`~hadar_job.JobEnv`) and installs the
    stop signal handlers. Then:

    - :meth:`load` the checkpoint to resume from (sets :attr:`step`);
    - train in :meth:`steps`, which counts steps, reports, stops at a stop request or
      at the total and saves on the way out; or in a loop of your own with
      :meth:`should_stop`, :meth:`advance`, :meth:`report`, :meth:`save`,
      :meth:`finish`.

    Args:
        total: the job's total iterations outside Hadar (under Hadar
            ``HADAR_TOTAL_ITERATIONS`` wins).
        checkpoint_dir: the checkpoint directory outside Hadar (default
            ``./hadar-checkpoints``).
        job_name: the job's name outside Hadar.
        seed: the seed outside Hadar.
        signals: the signals that ask to stop (default ``SIGTERM`` and ``SIGINT``;
            add the job's ``stop_signal`` if it sets another).
        install_signals: install their handlers (only from the main thread).
        report_interval: the least seconds between two progress lines.
        stream: where report lines go (default standard output).
        environ: the environment to read (default ``os.environ``).
    """

    def __init__(
        self,
        total: int | None = None,
        *,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        job_name: str | None = None,
        seed: int = 0,
        signals: Iterable[int | str | signal.Signals] = DEFAULT_SIGNALS,
        install_signals: bool = True,
        report_interval: float = 1.0,
        stream: TextIO | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        #: The protocol's environment.
        self.env: JobEnv = JobEnv.from_environ(
            environ, total=total, checkpoint_dir=checkpoint_dir, job_name=job_name, seed=seed
        )
        #: The stop request.
        self.stop: StopFlag = StopFlag(
            signals, install=install_signals, interrupt_twice=not self.env.in_hadar
        )
        #: Prints the report lines (on rank 0 only).
        self.reporter: Reporter = Reporter(stream, report_interval, enabled=self.env.is_rank0)
        #: The model's global step: the resumed step, plus the steps done since.
        self.step: int = 0
        #: The step this task resumed from.
        self.start_step: int = 0
        #: Iterations this task completed since it started (what ``iterations`` reports).
        self.iterations: int = 0
        #: The last metrics given to :meth:`report` (repeated in later lines).
        self.metrics: dict[str, Any] = {}
        #: The checkpoint :meth:`load` read, if any.
        self.resumed_from: Path | None = None
        #: The file and step of the last checkpoint :meth:`save` wrote.
        self.last_saved: tuple[Path, int] | None = None
        #: Turns this rank's stop request into the task's: every rank calls it at the
        #: same step boundary and gets the same answer (set by
        #: :func:`hadar_job.torch.init_process_group`); ``None`` for one process.
        self.agree_stop: Callable[[bool], bool] | None = None
        self._in_loop = False
        self._force_next = False

    # -- the environment -------------------------------------------------------------

    @property
    def total(self) -> int | None:
        """The job's total iterations (``None``: not given)."""
        return self.env.total

    @property
    def rank(self) -> int:
        """This process's rank (0 for one process)."""
        return self.env.rank

    @property
    def world_size(self) -> int:
        """Ranks in the task (1 for one process)."""
        return self.env.world_size

    @property
    def is_rank0(self) -> bool:
        """Whether this process reports and writes the checkpoint."""
        return self.env.is_rank0

    @property
    def seed(self) -> int:
        """A seed that differs between copies (``HADAR_SEED``), for the data order."""
        return self.env.seed

    @property
    def checkpoint_dir(self) -> Path:
        """The task's directory (``HADAR_CHECKPOINT_DIR``)."""
        return self.env.checkpoint_dir

    def local_batch_size(self, global_batch: int) -> int:
        """This rank's part of ``global_batch`` (``HADAR_BATCH_SHARE``); see
        :meth:`JobEnv.local_batch_size`.
        """
        return self.env.local_batch_size(global_batch)

    def loss_scale(self, local_batch: int, global_batch: int) -> float:
        """``local_batch / global_batch * world_size``; see :meth:`JobEnv.loss_scale`."""
        return self.env.loss_scale(local_batch, global_batch)

    @property
    def reached_total(self) -> bool:
        """Whether :attr:`step` has reached the total."""
        return self.total is not None and self.step >= self.total

    # -- stopping ----------------------------------------------------------------------

    @property
    def stop_requested(self) -> bool:
        """Whether this process was asked to stop (no collective call)."""
        return self.stop.requested

    def should_stop(self) -> bool:
        """Whether to stop at this step boundary.

        For one process, whether a stop signal came. With :attr:`agree_stop` set (a
        task of several ranks), whether any rank got one: a collective call, which
        every rank must make at the same step.
        """
        flag = self.stop.requested
        if self.agree_stop is not None:
            return bool(self.agree_stop(flag))
        return flag

    # -- checkpoints -------------------------------------------------------------------

    def load(self) -> Resumed:
        """Reads the checkpoint to resume from and sets :attr:`step` to its step.

        Under Hadar that is ``resume.safetensors`` in the task's directory; outside
        Hadar also ``checkpoint.safetensors`` there, so that a script run again by
        hand goes on where it stopped. Returns its tensors (``step`` left out) and
        step; no tensors and step 0 when there is none.

        Raises:
            CheckpointError: the file is not valid safetensors, or its ``step`` is not
                one non-negative integer; or something other than a readable regular
                file is there (a directory, FIFO, dangling link, unreadable file), which
                is refused rather than taken for no checkpoint (the work would be lost).
        """
        candidates = [self.env.resume_path]
        if not self.env.in_hadar:
            candidates.append(self.env.checkpoint_path)
        path = next((p for p in candidates if has_checkpoint(p)), None)
        if path is None:
            return Resumed({}, self.step)
        try:
            tensors = load_file(path)
        except OSError as e:
            raise CheckpointError(
                f"{path}: cannot be read ({e.strerror or e}); the job would start from "
                "step 0 and lose its work so far: make it readable by the task's user, "
                "or remove it to start from step 0"
            ) from None
        step = read_step(tensors)
        tensors.pop("step", None)
        if step is None:
            warnings.warn(f"{path} has no `step` tensor: resuming from step 0", stacklevel=2)
            step = 0
        self.step = self.start_step = step
        self.resumed_from = path
        return Resumed(tensors, step)

    def save(
        self,
        tensors: Mapping[str, Any],
        step: SupportsIndex | None = None,
        metadata: Mapping[str, str] | None = None,
        *,
        all_ranks: bool = False,
    ) -> Path | None:
        """Writes ``checkpoint.safetensors`` atomically: ``tensors`` and the ``step``
        tensor (I64). Only rank 0 writes (unless ``all_ranks``); returns the path
        written, or ``None`` on another rank.

        Args:
            tensors: name to tensor (:class:`~hadar_job.Tensor`, ``array.array``, numpy
                array, torch tensor); not ``step``.
            step: the global step it holds (default :attr:`step`).
            metadata: the header's ``__metadata__`` (str to str).
            all_ranks: write on every rank (each into its own node's directory).

        Raises:
            CheckpointError: a value that cannot be stored, or a tensor named ``step``;
                or the checkpoint directory cannot be written (the message names it
                and ``HADAR_CHECKPOINT_DIR``).
        """
        if not (self.env.is_rank0 or all_ranks):
            return None
        step = self.step if step is None else step
        directory = self.env.checkpoint_dir
        try:
            path = write_checkpoint(directory, tensors, step, metadata)
        except OSError as e:
            # A raw traceback would name neither the directory nor where it came from.
            why = f"{e.strerror or e}" + (f" ({e.filename})" if e.filename else "")
            if self.env.in_hadar:
                raise CheckpointError(
                    f"HADAR_CHECKPOINT_DIR={directory}: cannot write the checkpoint there: "
                    f"{why}; it must be a directory the task's user can write in (it lies "
                    "under the run's --remote-dir, by default its --state)"
                ) from None
            raise CheckpointError(
                f"cannot write the checkpoint in {directory} (HADAR_CHECKPOINT_DIR, else "
                f"the checkpoint_dir argument, else ./hadar-checkpoints): {why}; it must be "
                "a directory you can write in: fix it, or point HADAR_CHECKPOINT_DIR elsewhere"
            ) from None
        self.last_saved = (path, operator.index(step))
        return path

    # -- counting and reporting --------------------------------------------------------

    def advance(self, n: int = 1) -> None:
        """Counts ``n`` steps done (a loop of your own; :meth:`steps` counts itself)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise HadarJobError(f"advance() takes an int >= 0, not {n!r}")
        self.step += n
        self.iterations += n

    def report(
        self,
        iterations: SupportsIndex | None = None,
        *,
        step: SupportsIndex | None = None,
        force: bool = False,
        **metrics: Any,
    ) -> bool:
        """Reports progress: a ``HADAR_PROGRESS`` line, flushed, at most once per
        ``report_interval`` unless ``force``.

        ``iterations`` (default :attr:`iterations`) counts what this task did since
        it started, not since the round began and not the global ``step`` (default
        :attr:`step`). The metrics (``loss=...``, ``accuracy=...``) are kept and
        repeated in later lines.

        Inside :meth:`steps`, without ``iterations``, the metrics are kept and the
        line is printed at the end of the step (with that step counted); the call
        returns ``False``. Otherwise returns whether a line was printed.
        """
        format_line(0, None, False, **metrics)  # checks the metrics now
        self.metrics.update(metrics)
        if self._in_loop and iterations is None and step is None:
            self._force_next = self._force_next or force
            return False
        return self.reporter.progress(
            self.iterations if iterations is None else iterations,
            self.step if step is None else step,
            force,
            **self.metrics,
        )

    def done(
        self,
        iterations: SupportsIndex | None = None,
        *,
        step: SupportsIndex | None = None,
        **metrics: Any,
    ) -> bool:
        """Prints the ``HADAR_DONE`` line: the total is reached and the checkpoint
        written. Returns whether it was printed (rank 0 only).
        """
        self.metrics.update(metrics)
        return self.reporter.done(
            self.iterations if iterations is None else iterations,
            self.step if step is None else step,
            **self.metrics,
        )

    def finish(
        self, tensors: Mapping[str, Any] | None = None, metadata: Mapping[str, str] | None = None
    ) -> int:
        """Ends the task's work: saves ``tensors`` (when given) at :attr:`step`, then
        prints ``HADAR_DONE`` if the total is reached, else a last progress line.
        Returns the exit status the runtime expects (0): ``sys.exit(job.finish(...))``.
        """
        if tensors is not None:
            self.save(tensors, metadata=metadata)
        if (
            self.env.in_hadar
            and self.is_rank0
            and (self.last_saved is None or self.last_saved[1] != self.step)
        ):
            print(
                f"hadar_job: warning: no checkpoint at step {self.step} was written: hadar "
                "keeps only the work a checkpoint holds (give the loop a state= callback, "
                "or call save())",
                file=sys.stderr,
                flush=True,
            )
        if self.reached_total:
            self.done()
        else:
            self.reporter.progress(self.iterations, self.step, True, **self.metrics)
        return 0

    # -- the loop ----------------------------------------------------------------------

    @overload
    def steps(
        self,
        batches: None = None,
        *,
        state: Callable[[], Mapping[str, Any]] | None = None,
        exit: bool = False,
        cycle: bool = True,
        save_at_deadline: bool = True,
        save_every: float | None = None,
    ) -> Iterator[int]: ...

    @overload
    def steps(
        self,
        batches: Iterable[T],
        *,
        state: Callable[[], Mapping[str, Any]] | None = None,
        exit: bool = False,
        cycle: bool = True,
        save_at_deadline: bool = True,
        save_every: float | None = None,
    ) -> Iterator[T]: ...

    def steps(
        self,
        batches: Iterable[T] | None = None,
        *,
        state: Callable[[], Mapping[str, Any]] | None = None,
        exit: bool = False,
        cycle: bool = True,
        save_at_deadline: bool = True,
        save_every: float | None = None,
    ) -> Iterator[Any]:
        """Wraps a training loop: ``for batch in job.steps(loader, state=...)``, or
        ``for step in job.steps(state=...)`` (the global step numbers).

        Counts steps from the resumed one, reports, saves when the round's deadline
        passes, stops at a stop request or at the total, and on the way out saves
        ``state()``, prints ``HADAR_DONE`` (or a last progress line) and, with
        ``exit=True``, exits with status 0. See :func:`hadar_job.loop.steps`.
        """
        from .loop import steps

        return steps(
            self,
            batches,
            state=state,
            exit=exit,
            cycle=cycle,
            save_at_deadline=save_at_deadline,
            save_every=save_every,
        )


def init(
    total: int | None = None,
    *,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    job_name: str | None = None,
    seed: int = 0,
    signals: Iterable[int | str | signal.Signals] = DEFAULT_SIGNALS,
    install_signals: bool = True,
    report_interval: float = 1.0,
    stream: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> Job:
    """A :class:`Job` for this process: ``job = hadar_job.init(total=1000)``.

    Takes the arguments of :class:`Job`.
    """
    return Job(
        total,
        checkpoint_dir=checkpoint_dir,
        job_name=job_name,
        seed=seed,
        signals=signals,
        install_signals=install_signals,
        report_interval=report_interval,
        stream=stream,
        environ=environ,
    )
