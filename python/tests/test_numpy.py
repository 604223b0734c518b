"""The numpy extra: arrays in and out, byte for byte what the safetensors library writes."""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path
from typing import Any

import pytest

from hadar_job import Job, Tensor, TensorError, encode, format_line, load_file, read_file, save_file

pytestmark = pytest.mark.numpy

DTYPES = ["float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint64",
          "uint32", "uint16", "uint8", "bool", "complex64"]  # fmt: skip


def arrays() -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    out = {}
    for i, dt in enumerate(DTYPES):
        out[f"t{i}.{dt}"] = (rng.standard_normal((3, 2)) * 10).astype(dt)
    out["scalar"] = np.array(5, dtype=np.int64)
    out["empty"] = np.zeros((0, 3), dtype=np.float32)
    out["big-endian"] = np.arange(4, dtype=">f4")
    out["strided"] = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    return out


def test_bytes_identical_to_safetensors() -> None:
    import numpy as np
    from safetensors.numpy import save

    a = arrays()
    theirs = save({k: np.ascontiguousarray(v, dtype=v.dtype.newbyteorder("<")) if v.ndim else v
                   for k, v in a.items()})  # fmt: skip
    assert encode(a) == theirs


def test_safetensors_reads_ours_and_we_read_theirs(tmp_path: Path) -> None:
    import numpy as np
    from safetensors.numpy import load_file as st_load
    from safetensors.numpy import save_file as st_save

    a = arrays()
    save_file(a, tmp_path / "ours.safetensors", metadata={"by": "hadar_job"})
    back = st_load(str(tmp_path / "ours.safetensors"))
    assert set(back) == set(a)
    for k, v in a.items():
        np.testing.assert_array_equal(back[k], v)
        assert back[k].shape == v.shape

    st_save({k: np.ascontiguousarray(v) if v.ndim else v for k, v in a.items()},
            str(tmp_path / "theirs.safetensors"), metadata={"format": "np"})  # fmt: skip
    got = read_file(tmp_path / "theirs.safetensors")
    assert got.metadata == {"format": "np"}
    for k, v in a.items():
        arr = got.tensors[k].to_numpy()
        np.testing.assert_array_equal(arr, v)
        assert arr.dtype == v.dtype.newbyteorder("=") and arr.flags.writeable


def test_job_saves_and_resumes_numpy_state(tmp_path: Path) -> None:
    import numpy as np

    w = np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3)
    job = Job(1, checkpoint_dir=tmp_path, environ={}, install_signals=False, stream=io.StringIO())
    job.save({"w": w}, step=np.int64(4))
    resumed = Job(1, checkpoint_dir=tmp_path, environ={}, install_signals=False).load()
    assert resumed.step == 4
    np.testing.assert_array_equal(resumed.numpy()["w"], w)


def test_refused_dtypes_are_named() -> None:
    import numpy as np

    with pytest.raises(TensorError, match="w: numpy dtype complex128 has no safetensors dtype"):
        encode({"w": np.zeros(2, dtype=np.complex128)})
    with pytest.raises(TensorError, match="numpy dtype <U1"):
        encode({"w": np.array(["a"])})


def test_bf16() -> None:
    t = Tensor.from_values("BF16", [1.0, -2.0])
    if importlib.util.find_spec("ml_dtypes") is None:
        with pytest.raises(TensorError, match="ml_dtypes"):
            t.to_numpy()
    else:
        arr = t.to_numpy()
        assert arr.astype("float32").tolist() == [1.0, -2.0]
        assert encode({"x": arr}) == encode({"x": t})


def test_numpy_numbers_in_reports() -> None:
    import numpy as np

    line = format_line(np.int64(3), np.uint32(9), loss=np.float32(0.5), n=np.int16(2))
    assert json.loads(line.split(" ", 1)[1]) == {"iterations": 3, "step": 9, "loss": 0.5, "n": 2}


def test_numpy_scalars_as_tensors(tmp_path: Path) -> None:
    import numpy as np

    save_file({"s": np.float64(2.5)}, tmp_path / "s.safetensors")
    t = load_file(tmp_path / "s.safetensors")["s"]
    assert (t.dtype, t.shape, t.item()) == ("F64", (), 2.5)
