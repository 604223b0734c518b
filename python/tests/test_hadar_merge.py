"""The Rust side reads what the package writes: ``hadar merge`` averages two
checkpoints written here, and the package reads its result back."""

from __future__ import annotations

import array
import json
import subprocess
from pathlib import Path

from hadar_job import Tensor, read_file, read_step, write_checkpoint


def _copy(tmp_path: Path, name: str, scale: float, step: int, mask: int) -> Path:
    return write_checkpoint(
        tmp_path / name,
        {
            "layer.weight": array.array("f", [1.0 * scale, 2.0 * scale, 3.0 * scale, 4.0 * scale]),
            "layer.bias": Tensor.from_values("F16", [0.5 * scale]),
            "emb": Tensor.from_values("BF16", [1.0 * scale, -1.0 * scale]),
            "f64": array.array("d", [10.0 * scale]),
            "mask": Tensor.from_values("U8", [mask]),
        },
        step,
        metadata={"copy": name},
    )


def test_hadar_merge_averages_package_checkpoints(tmp_path: Path, hadar_bin: Path) -> None:
    a = _copy(tmp_path, "a", 1.0, step=110, mask=1)
    b = _copy(tmp_path, "b", 3.0, step=130, mask=2)
    out = tmp_path / "merged.safetensors"
    proc = subprocess.run(
        [str(hadar_bin), "merge", "--json", "--out", str(out), f"{a}:100", f"{b}:300"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["tensors"] == 6
    assert report["averaged"] == 4 and report["copied"] == 2
    assert [c["weight"] for c in report["copies"]] == [0.25, 0.75]

    merged = read_file(out)
    t = {k: v.tolist() for k, v in merged.tensors.items()}
    # 0.25 * x + 0.75 * 3x = 2.5x, for every float dtype.
    assert t["layer.weight"] == [2.5, 5.0, 7.5, 10.0]
    assert t["layer.bias"] == [1.25]
    assert t["emb"] == [2.5, -2.5]
    assert t["f64"] == [25.0]
    # Integer tensors and the metadata come from the copy with the most iterations.
    assert t["mask"] == [2]
    assert read_step(merged.tensors) == 130
    assert merged.tensors["step"].shape == ()
    assert merged.metadata == {"copy": "b"}


def test_hadar_merge_refuses_a_different_shape(tmp_path: Path, hadar_bin: Path) -> None:
    a = write_checkpoint(tmp_path / "a", {"w": array.array("f", [1.0, 2.0])}, 1)
    b = write_checkpoint(tmp_path / "b", {"w": array.array("f", [1.0])}, 1)
    proc = subprocess.run(
        [str(hadar_bin), "merge", "--out", str(tmp_path / "m.safetensors"), f"{a}:1", f"{b}:1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "`w`" in proc.stderr and "shape" in proc.stderr
