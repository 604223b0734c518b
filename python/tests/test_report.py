"""Report lines: format, flush, rate limit."""

from __future__ import annotations

import io
import json
import math
from fractions import Fraction
from typing import Any

import pytest

from hadar_job import DONE, PROGRESS, HadarJobError, Reporter, format_line


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class FlushCounter(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.flushes = 0
        self.unflushed = 0

    def write(self, s: str) -> int:
        self.unflushed += 1
        return super().write(s)

    def flush(self) -> None:
        self.flushes += 1
        self.unflushed = 0
        super().flush()


def parse(line: str) -> tuple[str, dict[str, Any]]:
    marker, rest = line.split(" ", 1)
    return marker, json.loads(rest)


def test_format_is_what_hadar_parses() -> None:
    line = format_line(1200, 5200, accuracy=0.91, loss=0.27)
    assert (
        line == 'HADAR_PROGRESS {"iterations": 1200, "step": 5200, "accuracy": 0.91, "loss": 0.27}'
    )
    assert format_line(3000, 8000, done=True) == 'HADAR_DONE {"iterations": 3000, "step": 8000}'
    assert format_line(5) == 'HADAR_PROGRESS {"iterations": 5}'
    assert PROGRESS == "HADAR_PROGRESS" and DONE == "HADAR_DONE"


def test_metric_values_are_numbers() -> None:
    _, obj = parse(format_line(1, loss=Fraction(1, 4), good=True, n=3))
    assert obj == {"iterations": 1, "loss": 0.25, "good": 1, "n": 3}


def test_non_finite_metrics_are_left_out_not_the_line() -> None:
    # hadar drops a line that is not JSON; NaN is not JSON.
    line = format_line(7, 7, loss=math.nan, grad=math.inf, accuracy=0.5)
    assert parse(line)[1] == {"iterations": 7, "step": 7, "accuracy": 0.5}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"iterations": -1}, "iterations must be >= 0"),
        ({"iterations": 1.5}, "iterations must be an int"),
        ({"iterations": True}, "iterations must be an int"),
        ({"iterations": 1, "step": "3"}, "step must be an int"),
        ({"iterations": 1, "loss": "low"}, "metric 'loss' must be a number"),
        ({"iterations": 1, "loss": [1.0]}, "metric 'loss' must be a number"),
    ],
)
def test_bad_values_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(HadarJobError, match=message):
        format_line(**kwargs)


def test_every_line_is_flushed() -> None:
    out = FlushCounter()
    r = Reporter(out, min_interval=0.0)
    r.progress(1, 1)
    assert out.unflushed == 0 and out.flushes == 1
    r.done(2, 2)
    assert out.unflushed == 0 and out.flushes == 2
    assert out.getvalue().splitlines() == [
        'HADAR_PROGRESS {"iterations": 1, "step": 1}',
        'HADAR_DONE {"iterations": 2, "step": 2}',
    ]


def test_rate_limited_unless_forced() -> None:
    out, clock = io.StringIO(), Clock()
    r = Reporter(out, min_interval=1.0, clock=clock)
    assert r.progress(1)
    clock.t += 0.5
    assert not r.progress(2), "within the interval: dropped"
    assert r.progress(3, force=True)
    clock.t += 0.99
    assert not r.progress(4)
    clock.t += 0.01
    assert r.due()
    assert r.progress(5)
    assert r.done(6), "HADAR_DONE is always printed"
    got = [parse(x)[1]["iterations"] for x in out.getvalue().splitlines()]
    assert got == [1, 3, 5, 6]
    assert r.last_line == 'HADAR_DONE {"iterations": 6}'


def test_a_dropped_line_is_still_checked() -> None:
    clock = Clock()
    r = Reporter(io.StringIO(), clock=clock)
    r.progress(1)
    with pytest.raises(HadarJobError):
        r.progress(-1)


def test_disabled_prints_nothing() -> None:
    out = io.StringIO()
    r = Reporter(out, enabled=False)
    assert not r.progress(1, force=True)
    assert not r.done(1)
    assert out.getvalue() == ""


def test_default_stream_is_stdout_at_print_time(capsys: pytest.CaptureFixture[str]) -> None:
    Reporter().progress(4, 9, loss=1)
    assert capsys.readouterr().out == 'HADAR_PROGRESS {"iterations": 4, "step": 9, "loss": 1}\n'


def test_bad_interval() -> None:
    with pytest.raises(HadarJobError):
        Reporter(min_interval=-1)
