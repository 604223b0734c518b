"""Raw tensors of the standard-library core."""

from __future__ import annotations

import array
import math
import struct
from typing import Any

import pytest

from hadar_job import DTYPES, Tensor, TensorError, as_tensor


def test_from_array_takes_dtype_and_shape() -> None:
    t = Tensor.from_array(array.array("f", [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), (2, 3))
    assert (t.dtype, t.shape, t.numel, t.nbytes) == ("F32", (2, 3), 6, 24)
    assert t.data == struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    assert t.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert t.to_array() == array.array("f", [1, 2, 3, 4, 5, 6])
    assert Tensor.from_array(array.array("d", [1.5])).dtype == "F64"
    assert Tensor.from_array(array.array("q", [-3])).dtype == "I64"
    assert Tensor.from_array(array.array("B", [255])).dtype == "U8"
    assert Tensor.from_array(array.array("h", [-2])).dtype == "I16"


@pytest.mark.parametrize(
    ("dtype", "values"),
    [
        ("F64", [1.25, -2.5]),
        ("F32", [0.5, -1.0]),
        ("F16", [0.5, 65504.0]),
        ("I64", [-(2**63), 2**63 - 1]),
        ("U64", [0, 2**64 - 1]),
        ("I32", [-(2**31), 7]),
        ("U32", [2**32 - 1, 0]),
        ("I16", [-5, 5]),
        ("U16", [65535, 1]),
        ("I8", [-128, 127]),
        ("U8", [0, 255]),
        ("BOOL", [True, False]),
        ("BF16", [1.0, -2.0]),
    ],
)
def test_from_values_round_trip(dtype: str, values: list[Any]) -> None:
    t = Tensor.from_values(dtype, values)
    assert t.nbytes == DTYPES[dtype] * len(values)
    assert t.tolist() == values


def test_bf16_rounds_to_nearest_even() -> None:
    # 1 + 2**-8 lies halfway between bf16 1.0 and 1 + 2**-7: ties go to even (1.0).
    assert Tensor.from_values("BF16", [1 + 2**-8]).tolist() == [1.0]
    assert Tensor.from_values("BF16", [1 + 3 * 2**-9]).tolist() == [1 + 2**-7]
    assert Tensor.from_values("BF16", [1.0]).data == b"\x80\x3f"
    assert math.isnan(Tensor.from_values("BF16", [math.nan]).tolist()[0])


def test_scalar_and_item() -> None:
    t = Tensor.scalar("I64", 42)
    assert t.shape == () and t.numel == 1 and t.item() == 42
    with pytest.raises(TensorError, match="item\\(\\) needs one element"):
        Tensor.from_values("F32", [1.0, 2.0]).item()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("F31", (1,), b"\0" * 4), "unknown dtype 'F31'"),
        (("F32", (2,), b"\0" * 4), r"F32 tensor of shape \[2\] needs 8 bytes"),
        (("F32", (-1,), b""), "every size must be an int >= 0"),
        (("F32", 3, b""), "is not a sequence of sizes"),
        (("F32", (1,), [0, 0, 0, 0]), "data must be bytes"),
    ],
)
def test_bad_tensors_are_refused(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(TensorError, match=message):
        Tensor(*args)


def test_bytearray_data_is_copied() -> None:
    buf = bytearray(4)
    t = Tensor("F32", (1,), buf)  # type: ignore[arg-type]
    buf[0] = 1
    assert t.data == b"\0\0\0\0"


def test_from_values_checks_ranges_and_types() -> None:
    with pytest.raises(TensorError, match="256 does not fit U8"):
        Tensor.from_values("U8", [256])
    with pytest.raises(TensorError, match="I32 values must be ints"):
        Tensor.from_values("I32", [1.5])
    with pytest.raises(TensorError, match="shape \\[3\\] holds 3 elements, 2 given"):
        Tensor.from_values("F32", [1.0, 2.0], (3,))
    with pytest.raises(TensorError, match="cannot encode C64"):
        Tensor.from_values("C64", [1.0])


def test_as_tensor_refuses_values_without_a_dtype() -> None:
    with pytest.raises(TensorError, match="w: raw bytes carry no dtype"):
        as_tensor(b"1234", "w")
    with pytest.raises(TensorError, match="w: a list has no dtype"):
        as_tensor([1.0], "w")
    with pytest.raises(TensorError, match="w: a float has no dtype"):
        as_tensor(1.0, "w")
    with pytest.raises(TensorError, match=r"cannot store a builtins\.object"):
        as_tensor(object(), "w")
    t = Tensor.scalar("F32", 1.0)
    assert as_tensor(t) is t
    assert as_tensor(array.array("f", [1.0])).dtype == "F32"


def test_decoding_limits() -> None:
    with pytest.raises(TensorError, match="tolist cannot decode C64"):
        Tensor("C64", (1,), b"\0" * 8).tolist()
    with pytest.raises(TensorError, match=r"no array\.array typecode holds BF16"):
        Tensor.from_values("BF16", [1.0]).to_array()
