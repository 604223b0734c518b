"""numpy arrays to and from :class:`~hadar_job.Tensor` (the ``numpy`` extra).

``job.save({"w": array})`` converts numpy arrays through this module by itself;
``Resumed.numpy()`` / ``Tensor.to_numpy()`` convert back. BF16 needs
``ml_dtypes`` (numpy has no bfloat16 of its own).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import TensorError
from .tensors import Tensor

__all__ = ["from_numpy", "to_numpy"]

#: safetensors dtype to numpy dtype (little-endian).
NUMPY_DTYPES: dict[str, str] = {
    "BOOL": "|b1",
    "U8": "|u1",
    "I8": "|i1",
    "I16": "<i2",
    "U16": "<u2",
    "F16": "<f2",
    "I32": "<i4",
    "U32": "<u4",
    "F32": "<f4",
    "C64": "<c8",
    "F64": "<f8",
    "I64": "<i8",
    "U64": "<u8",
}

_KIND: dict[tuple[str, int], str] = {
    ("b", 1): "BOOL",
    ("u", 1): "U8",
    ("i", 1): "I8",
    ("i", 2): "I16",
    ("u", 2): "U16",
    ("f", 2): "F16",
    ("i", 4): "I32",
    ("u", 4): "U32",
    ("f", 4): "F32",
    ("c", 8): "C64",
    ("f", 8): "F64",
    ("i", 8): "I64",
    ("u", 8): "U64",
}


def _bfloat16() -> Any:
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


def from_numpy(value: Any, name: str = "tensor") -> Tensor:
    """A :class:`~hadar_job.Tensor` of a numpy array or scalar (copied, little-endian,
    row-major).
    """
    arr = np.asarray(value)
    bf16 = _bfloat16()
    if bf16 is not None and arr.dtype == bf16:
        bits = arr.astype(arr.dtype, order="C", copy=False).view(np.uint16)
        bits = bits.astype("<u2", copy=False)
        return Tensor("BF16", tuple(arr.shape), bits.tobytes())
    dtype = _KIND.get((arr.dtype.kind, arr.dtype.itemsize))
    if dtype is None:
        raise TensorError(
            f"{name}: numpy dtype {arr.dtype} has no safetensors dtype "
            "(use float16/32/64, int8..64, uint8..64, bool or complex64)"
        )
    little = arr.astype(np.dtype(NUMPY_DTYPES[dtype]), order="C", copy=False)
    return Tensor(dtype, tuple(little.shape), little.tobytes())


def to_numpy(tensor: Tensor) -> np.ndarray:
    """A writable numpy array (native byte order) of ``tensor``'s values."""
    if tensor.dtype == "BF16":
        bf16 = _bfloat16()
        if bf16 is None:
            raise TensorError(
                "BF16 has no numpy dtype without ml_dtypes (pip install ml_dtypes), "
                "or read it with Tensor.to_torch() or Tensor.tolist()"
            )
        raw = np.frombuffer(tensor.data, dtype="<u2").astype("=u2")
        out: np.ndarray = raw.view(bf16).reshape(tensor.shape)
        return out
    np_dtype = NUMPY_DTYPES.get(tensor.dtype)
    if np_dtype is None:
        raise TensorError(f"{tensor.dtype} has no numpy dtype here; read Tensor.data")
    arr = np.frombuffer(tensor.data, dtype=np.dtype(np_dtype))
    return arr.astype(arr.dtype.newbyteorder("="), copy=True).reshape(tensor.shape)
