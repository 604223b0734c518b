"""The stop request: handlers that only set a flag."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hadar_job import HadarJobError, Job, StopFlag


@pytest.fixture
def flag() -> Iterator[StopFlag]:
    f = StopFlag()
    yield f
    f.uninstall()


def test_sigterm_sets_the_flag(flag: StopFlag) -> None:
    assert not flag.requested and not flag
    os.kill(os.getpid(), signal.SIGTERM)
    assert flag.requested and flag
    assert flag.signum == signal.SIGTERM


def test_sigint_sets_the_flag_and_a_second_one_interrupts(flag: StopFlag) -> None:
    os.kill(os.getpid(), signal.SIGINT)
    assert flag.requested and flag.signum == signal.SIGINT
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)


def test_a_second_sigterm_changes_nothing(flag: StopFlag) -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGTERM)
    assert flag.requested


def test_configurable_signals_by_name_or_number() -> None:
    f = StopFlag(["USR1", "SIGHUP", signal.SIGUSR2, int(signal.SIGQUIT)])
    try:
        assert f.signals == (signal.SIGUSR1, signal.SIGHUP, signal.SIGUSR2, signal.SIGQUIT)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert f.requested and f.signum == signal.SIGUSR1
    finally:
        f.uninstall()


def test_uninstall_restores_the_previous_handlers() -> None:
    before = signal.getsignal(signal.SIGTERM)
    f = StopFlag()
    assert f.installed
    assert signal.getsignal(signal.SIGTERM) != before
    f.uninstall()
    assert not f.installed
    assert signal.getsignal(signal.SIGTERM) == before


def test_request_and_clear_without_signals() -> None:
    f = StopFlag(install=False)
    assert not f.installed
    f.request()
    assert f.requested and f.signum is None
    f.clear()
    assert not f.requested


def test_bad_signals_are_named() -> None:
    with pytest.raises(HadarJobError, match="'NOPE' is not a signal name"):
        StopFlag(["NOPE"], install=False)
    with pytest.raises(HadarJobError, match="9999 is not a signal number"):
        StopFlag([9999], install=False)


def test_installing_outside_the_main_thread_says_why() -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            StopFlag()
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert len(errors) == 1 and isinstance(errors[0], HadarJobError)
    assert "main thread" in str(errors[0])


def test_under_hadar_a_second_sigint_does_not_interrupt(tmp_path: Path) -> None:
    """A signal delivered twice (a wrapper's and the group's) must not kill a task
    in the middle of its checkpoint: under Hadar the second SIGINT only asks again."""
    job = Job(environ={"HADAR_PROTOCOL": "1", "HADAR_CHECKPOINT_DIR": str(tmp_path)})
    try:
        assert not job.stop.interrupt_twice
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        assert job.stop.requested
    finally:
        job.stop.uninstall()
