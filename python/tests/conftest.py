"""Shared fixtures: the repository's paths, the ``hadar`` binary, and the policy for
tests that need an optional extra (numpy, torch).

Tests marked ``numpy`` or ``torch`` run where that package imports. Where it does not,
they are skipped with the reason said, and counted in a line of the summary; with
``--require-extra NAME`` (repeatable) a missing package fails them instead.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYTHON_SRC = REPO / "python" / "src"
EXTRAS = {"numpy": ("numpy", "safetensors"), "torch": ("torch",)}
_missing: dict[str, list[str]] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--require-extra",
        action="append",
        default=[],
        choices=sorted(EXTRAS),
        help="fail (instead of skip) the tests of this extra when its packages are missing",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "numpy: needs numpy and safetensors (the numpy extra)")
    config.addinivalue_line("markers", "torch: needs PyTorch (the torch extra)")


def _absent(extra: str) -> list[str]:
    return [m for m in EXTRAS[extra] if importlib.util.find_spec(m) is None]


def pytest_runtest_setup(item: pytest.Item) -> None:
    for extra in EXTRAS:
        if item.get_closest_marker(extra) is None:
            continue
        absent = _absent(extra)
        if not absent:
            continue
        why = f"not installed: {', '.join(absent)} (the {extra} extra)"
        if extra in item.config.getoption("--require-extra"):
            pytest.fail(f"{why} (--require-extra {extra})")
        _missing.setdefault(extra, []).append(item.nodeid)
        pytest.skip(f"{why} (--require-extra {extra} makes this a failure)")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for extra, ids in _missing.items():
        terminalreporter.write_line(
            f"NOT RUN: {len(ids)} test(s) of the {extra} extra ({', '.join(_absent(extra))} "
            f"missing; pip install 'hadar-job[{extra}]' or --require-extra {extra})",
            yellow=True,
        )


@pytest.fixture(scope="session")
def hadar_bin() -> Path:
    """The ``hadar`` binary: ``$HADAR_BIN``, default ``<repo>/target/debug/hadar``.
    Missing, the test fails (it is never skipped)."""
    path = Path(os.environ.get("HADAR_BIN") or REPO / "target" / "debug" / "hadar")
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(
            f"the hadar binary {path} is missing: build it (cargo build -p hadar-cli, from "
            f"{REPO}) or point HADAR_BIN at one",
            pytrace=False,
        )
    return path


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No job protocol or torchrun variables in the environment."""
    for k in list(os.environ):
        if k.startswith("HADAR_") or k in (
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "LOCAL_WORLD_SIZE",
            "GROUP_RANK",
            "GROUP_WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
            "CUDA_VISIBLE_DEVICES",
        ):
            monkeypatch.delenv(k)
    return monkeypatch
