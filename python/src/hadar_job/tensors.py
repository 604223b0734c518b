"""Raw tensors: a dtype, a shape and little-endian bytes, as safetensors stores them.

The core of the package needs no numpy or torch: a :class:`Tensor` is made from an
:class:`array.array` (:meth:`Tensor.from_array`), from Python numbers
(:meth:`Tensor.from_values`) or from bytes with a dtype and a shape (the constructor).
numpy arrays and torch tensors are converted where those packages are installed
(:func:`as_tensor` recognises them without importing them first).
"""

from __future__ import annotations

import array
import math
import struct
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import TensorError

if TYPE_CHECKING:
    import numpy as np

__all__ = ["DTYPES", "Tensor", "as_tensor", "dtype_size"]

#: The safetensors dtypes this package reads and writes, in the order of the
#: safetensors library's ``Dtype`` enum (its files list tensors by this order,
#: descending, then by name), with the size of one element in bytes.
#: The sub-byte dtypes (F4, F6_*) are left out: their elements are not whole bytes.
DTYPES: dict[str, int] = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "F8_E8M0": 1,
    "F8_E4M3FNUZ": 1,
    "F8_E5M2FNUZ": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "C64": 8,
    "F64": 8,
    "I64": 8,
    "U64": 8,
}

#: Rank of each dtype in the safetensors ``Dtype`` enum (sub-byte ones included,
#: so that the ranks are the library's).
_ENUM_ORDER = [
    "BOOL",
    "F4",
    "F6_E2M3",
    "F6_E3M2",
    "U8",
    "I8",
    "F8_E5M2",
    "F8_E4M3",
    "F8_E8M0",
    "F8_E4M3FNUZ",
    "F8_E5M2FNUZ",
    "I16",
    "U16",
    "F16",
    "BF16",
    "I32",
    "U32",
    "F32",
    "C64",
    "F64",
    "I64",
    "U64",
]
DTYPE_RANK: dict[str, int] = {d: i for i, d in enumerate(_ENUM_ORDER)}

#: ``struct`` format of one element, for the dtypes Python can decode itself.
_STRUCT: dict[str, str] = {
    "BOOL": "?",
    "U8": "B",
    "I8": "b",
    "I16": "h",
    "U16": "H",
    "F16": "e",
    "I32": "i",
    "U32": "I",
    "F32": "f",
    "F64": "d",
    "I64": "q",
    "U64": "Q",
}

#: Integer dtypes and their ranges.
_INT_RANGE: dict[str, tuple[int, int]] = {
    "U8": (0, 2**8 - 1),
    "I8": (-(2**7), 2**7 - 1),
    "I16": (-(2**15), 2**15 - 1),
    "U16": (0, 2**16 - 1),
    "I32": (-(2**31), 2**31 - 1),
    "U32": (0, 2**32 - 1),
    "I64": (-(2**63), 2**63 - 1),
    "U64": (0, 2**64 - 1),
}

#: Floating-point dtypes (the ones ``hadar merge`` averages, and F64, C64).
FLOAT_DTYPES = frozenset({"F16", "BF16", "F32", "F64", "C64"})


def dtype_size(dtype: str) -> int:
    """The size in bytes of one element of ``dtype`` (a safetensors dtype name)."""
    try:
        return DTYPES[dtype]
    except KeyError:
        raise TensorError(f"unknown dtype {dtype!r}: give one of {', '.join(DTYPES)}") from None


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _swap_bytes(data: bytes, width: int) -> bytes:
    """``data`` with each ``width``-byte element reversed (native <-> little-endian
    on a big-endian machine).
    """
    if width == 1:
        return data
    b = bytearray(data)
    for i in range(0, len(b), width):
        b[i : i + width] = b[i : i + width][::-1]
    return bytes(b)


def _check_shape(shape: Any) -> tuple[int, ...]:
    try:
        dims = tuple(shape)
    except TypeError:
        raise TensorError(
            f"shape {shape!r} is not a sequence of sizes (e.g. (2, 3), or () for a scalar)"
        ) from None
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) or d < 0:
            raise TensorError(f"shape {shape!r}: every size must be an int >= 0, not {d!r}")
    return dims


@dataclass(frozen=True)
class Tensor:
    """One tensor as a safetensors file holds it.

    Args:
        dtype: a safetensors dtype name (``"F32"``, ``"I64"``, ``"BF16"``, ...).
        shape: the sizes of its dimensions; ``()`` for a scalar.
        data: its elements, row-major, little-endian: exactly
            ``prod(shape) * dtype_size(dtype)`` bytes.

    Raises:
        TensorError: an unknown dtype, a bad shape, or data of the wrong length.
    """

    dtype: str
    shape: tuple[int, ...]
    data: bytes

    def __post_init__(self) -> None:
        size = dtype_size(self.dtype)
        shape = _check_shape(self.shape)
        object.__setattr__(self, "shape", shape)
        if isinstance(self.data, (bytearray, memoryview)):
            object.__setattr__(self, "data", bytes(self.data))
        if not isinstance(self.data, bytes):
            raise TensorError(
                f"data must be bytes (little-endian elements), not {type(self.data).__name__}"
            )
        want = _numel(shape) * size
        if len(self.data) != want:
            raise TensorError(
                f"{self.dtype} tensor of shape {list(shape)} needs {want} bytes "
                f"({_numel(shape)} elements of {size}), got {len(self.data)}"
            )

    @property
    def numel(self) -> int:
        """The number of elements."""
        return _numel(self.shape)

    @property
    def nbytes(self) -> int:
        """The size of its data in bytes."""
        return len(self.data)

    # -- making tensors ----------------------------------------------------------

    @classmethod
    def from_array(cls, values: array.array[Any], shape: Sequence[int] | None = None) -> Tensor:
        """A tensor of an :class:`array.array`'s elements (``'f'``: F32, ``'d'``: F64,
        ``'q'``: I64, ...), of ``shape`` (default: one dimension).
        """
        if not isinstance(values, array.array):
            raise TensorError(f"expected an array.array, got {type(values).__name__}")
        dtype = _ARRAY_DTYPE.get((values.typecode, values.itemsize))
        if dtype is None:
            raise TensorError(
                f"array.array of typecode {values.typecode!r} has no safetensors dtype "
                "(use 'f', 'd', 'b', 'B', 'h', 'H', 'i', 'I', 'l', 'L', 'q' or 'Q')"
            )
        dims = (len(values),) if shape is None else _check_shape(shape)
        if _numel(dims) != len(values):
            raise TensorError(
                f"shape {list(dims)} holds {_numel(dims)} elements, the array has {len(values)}"
            )
        data = values.tobytes()
        if sys.byteorder == "big":
            data = _swap_bytes(data, values.itemsize)
        return cls(dtype, dims, data)

    @classmethod
    def from_values(
        cls, dtype: str, values: Iterable[Any], shape: Sequence[int] | None = None
    ) -> Tensor:
        """A tensor of Python numbers (``bool``, ``int`` or ``float``), encoded as ``dtype``.

        Supports every dtype except BF16, C64 and the F8 ones (give their bytes to
        the constructor instead); BF16 is rounded to nearest even.
        """
        vals = list(values)
        dims = (len(vals),) if shape is None else _check_shape(shape)
        if _numel(dims) != len(vals):
            raise TensorError(
                f"shape {list(dims)} holds {_numel(dims)} elements, {len(vals)} given"
            )
        if dtype == "BF16":
            return cls(dtype, dims, b"".join(_bf16_bytes(float(v)) for v in vals))
        fmt = _STRUCT.get(dtype)
        if fmt is None:
            raise TensorError(f"from_values cannot encode {dtype}; give its bytes to Tensor()")
        lo_hi = _INT_RANGE.get(dtype)
        if lo_hi is not None:
            for v in vals:
                if isinstance(v, bool) or not isinstance(v, int):
                    raise TensorError(f"{dtype} values must be ints, got {v!r}")
                if not lo_hi[0] <= v <= lo_hi[1]:
                    raise TensorError(f"{v} does not fit {dtype} ({lo_hi[0]}..{lo_hi[1]})")
        try:
            data = struct.pack(f"<{len(vals)}{fmt}", *vals)
        except (struct.error, OverflowError, TypeError) as e:
            raise TensorError(f"cannot encode {vals[:4]!r}... as {dtype}: {e}") from None
        return cls(dtype, dims, data)

    @classmethod
    def scalar(cls, dtype: str, value: float) -> Tensor:
        """A 0-dimensional tensor holding ``value`` (shape ``()``)."""
        return cls.from_values(dtype, [value], ())

    # -- reading them ------------------------------------------------------------

    def tolist(self) -> list[Any]:
        """The elements as a flat list of Python numbers (row-major).

        BF16 is widened exactly to float; C64 and the F8 dtypes are refused (read
        ``data``, or use :meth:`to_numpy` / :meth:`to_torch`).
        """
        n = self.numel
        if self.dtype == "BF16":
            halves = struct.unpack(f"<{n}H", self.data)
            return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]
        fmt = _STRUCT.get(self.dtype)
        if fmt is None:
            raise TensorError(f"tolist cannot decode {self.dtype}; read .data")
        return list(struct.unpack(f"<{n}{fmt}", self.data))

    def item(self) -> Any:
        """The only element of a one-element tensor, as a Python number."""
        if self.numel != 1:
            raise TensorError(
                f"item() needs one element; shape {list(self.shape)} has {self.numel}"
            )
        return self.tolist()[0]

    def to_array(self) -> array.array[Any]:
        """The elements as an :class:`array.array` (flat; native byte order)."""
        for (code, size), dt in _ARRAY_DTYPE.items():
            if dt == self.dtype and array.array(code).itemsize == size:
                data = self.data
                if sys.byteorder == "big":
                    data = _swap_bytes(data, size)
                out: array.array[Any] = array.array(code)
                out.frombytes(data)
                return out
        raise TensorError(f"no array.array typecode holds {self.dtype}; use tolist() or .data")

    def to_numpy(self) -> np.ndarray:
        """The tensor as a numpy array (needs the ``numpy`` extra)."""
        from .numpy import to_numpy

        return to_numpy(self)

    def to_torch(self) -> Any:
        """The tensor as a CPU ``torch.Tensor`` (needs the ``torch`` extra)."""
        from .torch import to_torch

        return to_torch(self)


def _bf16_bytes(x: float) -> bytes:
    """``x`` as a little-endian bfloat16, rounded to nearest, ties to even."""
    (bits,) = struct.unpack("<I", struct.pack("<f", x))
    if math.isnan(x):
        return struct.pack("<H", (bits >> 16) | 0x40)
    bits += 0x7FFF + ((bits >> 16) & 1)
    return struct.pack("<H", (bits >> 16) & 0xFFFF)


def _array_dtypes() -> dict[tuple[str, int], str]:
    out: dict[tuple[str, int], str] = {("f", 4): "F32", ("d", 8): "F64"}
    ints = {1: "I8", 2: "I16", 4: "I32", 8: "I64"}
    uints = {1: "U8", 2: "U16", 4: "U32", 8: "U64"}
    for code in "bhilq":
        size = array.array(code).itemsize
        out[(code, size)] = ints[size]
    for code in "BHILQ":
        size = array.array(code).itemsize
        out[(code, size)] = uints[size]
    return out


_ARRAY_DTYPE = _array_dtypes()


def _kind(value: Any) -> str:
    """``"numpy"``, ``"torch"`` or ``""``: which package's object ``value`` is,
    from its type's module, without importing either.
    """
    module = type(value).__module__ or ""
    root = module.split(".", 1)[0]
    return root if root in ("numpy", "torch") else ""


def as_tensor(value: Any, name: str = "tensor") -> Tensor:
    """Converts one value of a state to a :class:`Tensor`.

    Accepts a :class:`Tensor`; an :class:`array.array`; a numpy array or scalar
    (with the ``numpy`` extra); a torch tensor (with the ``torch`` extra). Bytes,
    lists and Python numbers are refused with a hint: their dtype and shape would
    be guesses.
    """
    if isinstance(value, Tensor):
        return value
    if isinstance(value, array.array):
        return Tensor.from_array(value)
    kind = _kind(value)
    if kind == "numpy":
        from .numpy import from_numpy

        return from_numpy(value, name)
    if kind == "torch":
        from .torch import from_torch

        return from_torch(value, name)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise TensorError(
            f"{name}: raw bytes carry no dtype or shape; give Tensor(dtype, shape, data)"
        )
    if isinstance(value, (list, tuple, int, float)):
        raise TensorError(
            f"{name}: a {type(value).__name__} has no dtype; give array.array('f', ...) or "
            "Tensor.from_values('F32', ...)"
        )
    raise TensorError(
        f"{name}: cannot store a {type(value).__module__}.{type(value).__name__} as a tensor "
        "(give a hadar_job.Tensor, an array.array, a numpy array or a torch tensor)"
    )
