"""The training loop helper, in the manner of Gavel's ``GavelIterator``.

``for batch in job.steps(loader, state=model.state_dict): train(batch)`` turns a
plain loop into a Hadar job: the loop counts steps from the resumed one, reports
progress, saves when the round's deadline passes, stops at a stop request (agreed
by every rank) or at the job's total, and on the way out saves the state, prints
``HADAR_DONE`` (or a last progress line) and, with ``exit=True``, exits with status 0.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from .checkpoint import has_checkpoint
from .errors import HadarJobError

if TYPE_CHECKING:
    from .job import Job

__all__ = ["steps"]

T = TypeVar("T")


def steps(
    job: Job,
    batches: Iterable[T] | None = None,
    *,
    state: Callable[[], Mapping[str, Any]] | None = None,
    exit: bool = False,
    cycle: bool = True,
    save_at_deadline: bool = True,
    save_every: float | None = None,
) -> Iterator[Any]:
    """Yields ``batches`` (or, without them, the global step numbers) until the job
    should stop.

    Each item is one step. Before it, the loop checks the total (``job.step >=
    job.total``) and the stop request (:meth:`Job.should_stop`: a collective call
    under DDP). After it, it counts the step (``job.step``, ``job.iterations``) and
    prints a progress line if one is due (with the metrics given to
    :meth:`Job.report` in the step). Inside the body, ``job.step`` is the number of
    steps done before this one (the step's 0-based index).

    When the loop ends by itself (total, stop request, batches run out) it calls
    ``state()`` on rank 0 and saves it at ``job.step``, prints ``HADAR_DONE`` (total
    reached) or a last ``HADAR_PROGRESS`` line, and with ``exit=True`` raises
    ``SystemExit(0)``. A ``break`` out of the loop, or an exception in its body,
    skips all of that: an exception should end the task with a non-zero status,
    which ``hadar`` takes for a crash (the job resumes from its last checkpoint).

    Args:
        job: the job.
        batches: any iterable (a DataLoader, a generator). A re-iterable one (not
            an iterator) is started again when it runs out (a new epoch), while the
            job has a total and ``cycle`` is true; otherwise the loop ends when it
            runs out. ``None``: yield ``job.step`` at each step (needs a total).
        state: returns the state to save (name to tensor: a torch ``state_dict``,
            numpy arrays, ``array.array``...). Called on rank 0 only, so it must not
            make collective calls. ``None``: nothing is saved (save yourself).
        exit: exit with status 0 after the loop's end (code after the loop does
            not run).
        cycle: start a re-iterable ``batches`` again when it runs out.
        save_at_deadline: save once when the round's deadline
            (``HADAR_ROUND_DEADLINE``) passes, so that the work is kept if the task
            dies later and a stop then is quick (with ``state`` only).
        save_every: also save every this many seconds (with ``state`` only).

    Raises:
        HadarJobError: no batches and no total, or batches that yield nothing; a
            checkpoint to resume from that was not loaded (under Hadar).
    """
    if batches is None and job.total is None:
        raise HadarJobError(
            "steps() without batches needs the job's total: Job(total=...) or "
            "HADAR_TOTAL_ITERATIONS"
        )
    if save_every is not None and not save_every > 0:
        raise HadarJobError(f"save_every must be > 0 seconds, not {save_every}")
    resume = job.env.resume_path
    # has_checkpoint() refuses a resume file that is not a regular file (a directory,
    # a dangling link) instead of taking it for none.
    if job.env.in_hadar and job.is_rank0 and job.resumed_from is None and has_checkpoint(resume):
        # The loop would start at step 0 and its checkpoint would say so: the
        # work the job did so far, redone and never credited.
        raise HadarJobError(
            f"{resume} is there to resume from but was not loaded: call job.load() (or "
            "hadar_job.torch.resume) before the loop"
        )
    return _run(job, batches, state, exit, cycle, save_at_deadline, save_every)


def _run(
    job: Job,
    batches: Iterable[T] | None,
    state: Callable[[], Mapping[str, Any]] | None,
    exit: bool,
    cycle: bool,
    save_at_deadline: bool,
    save_every: float | None,
) -> Iterator[Any]:
    total = job.total
    iterator: Iterator[T] | None = None if batches is None else iter(batches)
    reiterable = batches is not None and iterator is not batches
    in_epoch = 0
    deadline = job.env.deadline if save_at_deadline else None
    last_save = time.monotonic()
    stopped = False

    def save_now() -> None:
        nonlocal last_save
        if state is not None and job.is_rank0:
            job.save(state())
        last_save = time.monotonic()

    while True:
        if total is not None and job.step >= total:
            break
        if job.should_stop():
            stopped = True
            break
        if iterator is None:
            item: Any = job.step
        else:
            try:
                item = next(iterator)
            except StopIteration:
                if not (cycle and reiterable and total is not None):
                    break
                if in_epoch == 0:
                    raise HadarJobError("the batches yield nothing: an empty data set?") from None
                assert batches is not None
                iterator = iter(batches)
                in_epoch = 0
                continue
            in_epoch += 1
        job._in_loop = True
        try:
            yield item
        finally:
            job._in_loop = False
        job.step += 1
        job.iterations += 1
        force, job._force_next = job._force_next, False
        job.reporter.progress(job.iterations, job.step, force, **job.metrics)
        if state is not None:
            if deadline is not None and time.time() >= deadline:
                deadline = None
                if not job.stop_requested:  # else the loop ends now and saves anyway
                    save_now()
            elif save_every is not None and time.monotonic() - last_save >= save_every:
                save_now()

    if total is not None and job.step < total and iterator is not None and not stopped:
        print(
            f"hadar_job: the batches ran out at step {job.step}, before the total {total}",
            file=sys.stderr,
            flush=True,
        )
    job.finish(state() if (state is not None and job.is_rank0) else None)
    if exit:
        sys.exit(0)
