"""The package, its metadata and the workspace it ships the binary of agree on a version."""

import re
from pathlib import Path

import hadar_job

ROOT = Path(__file__).resolve().parents[2]


def _version_in(path: Path, section: str) -> str:
    text = path.read_text()
    body = text.split(f"[{section}]", 1)[1]
    m = re.search(r'^version\s*=\s*"([^"]+)"', body, re.MULTILINE)
    assert m, f"no version under [{section}] in {path}"
    return m.group(1)


def test_one_version_everywhere() -> None:
    cargo = _version_in(ROOT / "Cargo.toml", "workspace.package")
    assert _version_in(ROOT / "python" / "pyproject.toml", "project") == cargo
    assert hadar_job.__version__ == cargo
