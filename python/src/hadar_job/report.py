"""Progress lines: ``HADAR_PROGRESS {json}`` and ``HADAR_DONE {json}`` on standard output.

``hadar`` reads a task's last such line from its log. The line must be flushed:
Python buffers standard output when it is a file (as it is under Hadar), and a task
whose reports sit in a buffer reports nothing and is killed as hung (after 300 s
without a first report). :class:`Reporter` flushes every line it prints.
"""

from __future__ import annotations

import json
import math
import numbers
import sys
import time
from typing import Any, Callable, SupportsIndex, TextIO

from .errors import HadarJobError

__all__ = ["DONE", "PROGRESS", "Reporter", "format_line"]

#: Marker of a progress line.
PROGRESS = "HADAR_PROGRESS"
#: Marker of the line printed when the job's total work is done.
DONE = "HADAR_DONE"
_RESERVED = ("iterations", "step")


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise HadarJobError(f"{name} must be an int, not {type(value).__name__} {value!r}")
    count = int(value)
    if count < 0:
        raise HadarJobError(f"{name} must be >= 0, not {count}")
    return count


def _metric(name: str, value: Any) -> float | int | None:
    """A metric as a JSON number; ``None`` for NaN and infinities, which JSON cannot
    hold (one in a line would make ``hadar`` drop the whole line).
    """
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) or hasattr(value, "__float__"):
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise HadarJobError(
                f"metric {name!r}: {type(value).__name__} {value!r} is not a number"
            ) from None
        return x if math.isfinite(x) else None
    raise HadarJobError(
        f"metric {name!r} must be a number (hadar keeps numeric fields only), "
        f"not {type(value).__name__} {value!r}"
    )


def format_line(
    iterations: SupportsIndex,
    step: SupportsIndex | None = None,
    done: bool = False,
    **metrics: Any,
) -> str:
    """One report line, without its newline: ``HADAR_PROGRESS {"iterations": ...}``
    (or ``HADAR_DONE ...``).

    Args:
        iterations: iterations this task completed since it started (not since the
            round began, not the job's global step).
        step: the model's global step after them.
        done: whether the job's total work is done (``HADAR_DONE``).
        metrics: other numbers (``loss``, ``accuracy``, ...). NaN and infinities are
            left out (JSON has no such numbers).

    Raises:
        HadarJobError: a count that is not a non-negative int, a metric that is not a
            number, or a metric named ``iterations``/``step``.
    """
    obj: dict[str, Any] = {"iterations": _count("iterations", iterations)}
    if step is not None:
        obj["step"] = _count("step", step)
    for name, value in metrics.items():
        if name in _RESERVED:
            raise HadarJobError(f"{name!r} is not a metric; pass it as its own argument")
        x = _metric(name, value)
        if x is not None:
            obj[name] = x
    return f"{DONE if done else PROGRESS} {json.dumps(obj, allow_nan=False)}"


class Reporter:
    """Prints report lines, flushed, at most once per ``min_interval`` seconds.

    Args:
        stream: where lines go (default: ``sys.stdout`` at the time of each print).
        min_interval: the least time between two progress lines; a call sooner is
            dropped unless ``force=True``. ``HADAR_DONE`` is always printed.
        enabled: ``False`` prints nothing (ranks other than 0 of a task).
        clock: a monotonic clock (for tests).
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        min_interval: float = 1.0,
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not min_interval >= 0:
            raise HadarJobError(f"min_interval must be >= 0, not {min_interval}")
        self.stream = stream
        self.min_interval = float(min_interval)
        self.enabled = enabled
        self._clock = clock
        self._last: float | None = None
        #: The last line printed, if any (without its newline).
        self.last_line: str | None = None

    def _print(self, line: str) -> None:
        stream = self.stream if self.stream is not None else sys.stdout
        stream.write(line + "\n")
        stream.flush()
        self.last_line = line

    def due(self) -> bool:
        """Whether a progress line now would be printed (the interval has passed)."""
        return self._last is None or self._clock() - self._last >= self.min_interval

    def progress(
        self,
        iterations: SupportsIndex,
        step: SupportsIndex | None = None,
        force: bool = False,
        **metrics: Any,
    ) -> bool:
        """Prints a ``HADAR_PROGRESS`` line unless one was printed less than
        ``min_interval`` seconds ago (and ``force`` is false). The line is checked
        (see :func:`format_line`) even when it is not printed. Returns whether it was
        printed.
        """
        line = format_line(iterations, step, False, **metrics)
        if not self.enabled or not (force or self.due()):
            return False
        self._print(line)
        self._last = self._clock()
        return True

    def done(
        self, iterations: SupportsIndex, step: SupportsIndex | None = None, **metrics: Any
    ) -> bool:
        """Prints the ``HADAR_DONE`` line (the job's total work is done and its
        checkpoint written). Returns whether it was printed (not on ranks other
        than 0).
        """
        line = format_line(iterations, step, True, **metrics)
        if not self.enabled:
            return False
        self._print(line)
        self._last = self._clock()
        return True
