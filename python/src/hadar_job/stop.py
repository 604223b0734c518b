"""The stop request: a signal handler that only sets a flag.

At a round boundary where a task must stop, ``hadar`` sends it the stop signal
(``SIGTERM`` unless the run or the job says otherwise), waits its grace period
(10 s by default) for the checkpoint and an exit with status 0, then kills it. The
training loop looks at the flag at a step boundary, saves and exits.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterable
from types import FrameType
from typing import Any, Callable, Union

from .errors import HadarJobError

__all__ = ["DEFAULT_SIGNALS", "StopFlag"]

#: The signals a :class:`StopFlag` catches by default: ``hadar``'s default stop
#: signal and Ctrl-C (a script run by hand stops as cleanly).
DEFAULT_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)

_Handler = Union[Callable[[int, Union[FrameType, None]], Any], int, signal.Handlers, None]


def _as_signal(s: int | str | signal.Signals) -> signal.Signals:
    if isinstance(s, str):
        name = s.upper()
        name = name if name.startswith("SIG") else "SIG" + name
        try:
            return signal.Signals[name]
        except KeyError:
            raise HadarJobError(f"{s!r} is not a signal name (TERM, INT, USR1, ...)") from None
    try:
        return signal.Signals(s)
    except ValueError:
        raise HadarJobError(f"{s!r} is not a signal number") from None


class StopFlag:
    """Set when one of ``signals`` arrives; :attr:`requested` is read at a step boundary.

    The handler only records the request (and which signal): nothing is saved or
    interrupted in the middle of a step. With ``interrupt_twice``, a second ``SIGINT``
    raises :class:`KeyboardInterrupt` (Ctrl-C twice ends a script run by hand at
    once); :class:`hadar_job.Job` sets it only outside Hadar, where a signal that
    arrives twice (a wrapper forwarding it, and the process group's) must not kill a
    task in the middle of its checkpoint.

    Args:
        signals: the signals to catch, as :class:`signal.Signals`, numbers or names
            (``"TERM"``, ``"SIGUSR1"``); default ``SIGTERM`` and ``SIGINT``.
        install: install the handlers now (they can only be installed from the
            main thread).
        interrupt_twice: a second ``SIGINT`` raises :class:`KeyboardInterrupt`.
    """

    def __init__(
        self,
        signals: Iterable[int | str | signal.Signals] = DEFAULT_SIGNALS,
        install: bool = True,
        interrupt_twice: bool = True,
    ) -> None:
        self.interrupt_twice = interrupt_twice
        self.signals: tuple[signal.Signals, ...] = tuple(_as_signal(s) for s in signals)
        self._requested = False
        #: The signal that asked to stop (``None``: none yet, or :meth:`request`).
        self.signum: int | None = None
        self._previous: dict[signal.Signals, _Handler] = {}
        if install:
            self.install()

    @property
    def requested(self) -> bool:
        """Whether a stop was asked for."""
        return self._requested

    def __bool__(self) -> bool:
        return self._requested

    def request(self, signum: int | None = None) -> None:
        """Asks to stop, as the signal would (for tests, or a script's own reasons)."""
        self._requested = True
        if signum is not None:
            self.signum = signum

    def clear(self) -> None:
        """Forgets a request."""
        self._requested = False
        self.signum = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._requested and signum == signal.SIGINT and self.interrupt_twice:
            raise KeyboardInterrupt
        self._requested = True
        self.signum = signum

    @property
    def installed(self) -> bool:
        """Whether the handlers are installed."""
        return bool(self._previous)

    def install(self) -> None:
        """Installs the handlers (again a no-op when installed).

        Raises:
            HadarJobError: called outside the main thread (Python runs signal handlers
                in the main thread only, and installs them only from there).
        """
        if self._previous:
            return
        if threading.current_thread() is not threading.main_thread():
            raise HadarJobError(
                "signal handlers can only be installed from the main thread: create the "
                "Job (or StopFlag) there, or pass install_signals=False and call "
                "request() yourself"
            )
        for s in self.signals:
            self._previous[s] = signal.signal(s, self._handle)

    def uninstall(self) -> None:
        """Puts back the handlers that were there before :meth:`install`."""
        for s, h in self._previous.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
        self._previous.clear()
