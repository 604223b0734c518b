"""Safetensors files by the standard library: the byte layout, round trips, invalid
files, atomic writes, the `step` tensor."""

from __future__ import annotations

import array
import json
import os
import struct
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hadar_job import (
    CheckpointError,
    Tensor,
    encode,
    load_file,
    read_file,
    read_step,
    save_file,
    write_atomic,
    write_checkpoint,
)
from hadar_job.checkpoint import HEADER_ALLOWANCE, step_tensor


def test_byte_layout_by_hand() -> None:
    got = encode({"w": array.array("f", [1.0, 2.0]), "step": step_tensor(5)})
    header = (
        b'{"step":{"dtype":"I64","shape":[],"data_offsets":[0,8]},'
        b'"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}'
    )
    assert len(header) == 110
    want = (
        (112).to_bytes(8, "little")  # the header's length, padded to a multiple of 8
        + header
        + b"  "  # padding: spaces
        + b"\x05\x00\x00\x00\x00\x00\x00\x00"  # step: I64 5
        + b"\x00\x00\x80\x3f\x00\x00\x00\x40"  # w: F32 1.0, 2.0
    )
    assert got == want


def test_order_is_dtype_descending_then_name_and_metadata_first() -> None:
    got = encode(
        {
            "z": Tensor.from_values("F32", [1.0]),
            "a": Tensor.from_values("F32", [2.0]),
            "m": Tensor.from_values("F16", [3.0]),
            "i": Tensor.from_values("I64", [4]),
            "flag": Tensor.from_values("BOOL", [True]),
            "d": Tensor.from_values("F64", [5.0]),
        },
        metadata={"format": "pt"},
    )
    n = int.from_bytes(got[:8], "little")
    assert n % 8 == 0
    text = got[8 : 8 + n].decode()
    assert text == text.rstrip() + " " * (len(text) - len(text.rstrip()))
    keys = list(json.loads(text))
    # The safetensors enum order: ... BOOL < F16 < F32 < F64 < I64, listed descending.
    assert keys == ["__metadata__", "i", "d", "a", "z", "m", "flag"]
    assert "," + '"' in text and ": " not in text, "compact JSON"


def test_round_trip_of_every_dtype(tmp_path: Path) -> None:
    tensors = {
        "f64": Tensor.from_values("F64", [1.5, -2.25], (2, 1)),
        "f32": Tensor.from_array(array.array("f", range(6)), (2, 3)),
        "f16": Tensor.from_values("F16", [0.5]),
        "bf16": Tensor.from_values("BF16", [2.0, 3.0]),
        "i64": Tensor.from_values("I64", [-7], ()),
        "u64": Tensor.from_values("U64", [2**64 - 1]),
        "i32": Tensor.from_values("I32", [1, 2, 3]),
        "u32": Tensor.from_values("U32", [4]),
        "i16": Tensor.from_values("I16", [-1]),
        "u16": Tensor.from_values("U16", [1]),
        "i8": Tensor.from_values("I8", [-1]),
        "u8": Tensor.from_values("U8", [1]),
        "bool": Tensor.from_values("BOOL", [True, False, True]),
        "c64": Tensor("C64", (1,), struct.pack("<2f", 1.0, -1.0)),
        "f8": Tensor("F8_E4M3", (2,), b"\x38\x40"),
        "empty": Tensor("F32", (0, 4), b""),
        "名前.weight": Tensor.from_values("F32", [9.0]),
    }
    path = save_file(tensors, tmp_path / "all.safetensors", metadata={"k": "v", "ü": "ß"})
    back = read_file(path)
    assert back.tensors == tensors
    assert back.metadata == {"k": "v", "ü": "ß"}
    assert load_file(path) == tensors


def test_no_metadata_reads_as_empty(tmp_path: Path) -> None:
    path = save_file({"a": Tensor.scalar("F32", 1.0)}, tmp_path / "a.safetensors")
    assert read_file(path).metadata == {}


def _file(tmp_path: Path, header: object, data: bytes = b"", raw: bytes | None = None) -> Path:
    text = raw if raw is not None else json.dumps(header).encode()
    p = tmp_path / "bad.safetensors"
    p.write_bytes(len(text).to_bytes(8, "little") + text + data)
    return p


def _t(dtype: str, shape: list[int], begin: int, end: int) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


@pytest.mark.parametrize(
    ("header", "data", "raw", "message"),
    [
        (None, b"", b"{", "bad header"),
        ([], b"", None, "not a JSON object"),
        ({"a": _t("F32", [1], 0, 4)}, b"\0" * 3, None, "runs past the end of the file"),
        (
            {"a": _t("F32", [1], 0, 4)},
            b"\0" * 5,
            None,
            "describes 4 bytes of tensor data, the file holds 5",
        ),
        ({"a": _t("F32", [2], 0, 4)}, b"\0" * 4, None, "needs 8 bytes, its offsets give 4"),
        ({"a": _t("F32", [1], 4, 8)}, b"\0" * 8, None, "starts at 4, expected 0"),
        ({"a": _t("F4", [2], 0, 1)}, b"\0", None, "dtype 'F4', not read here"),
        ({"a": {"dtype": "F32"}}, b"", None, "needs dtype, shape and data_offsets"),
        ({"a": _t("F32", [-1], 0, 0)}, b"", None, "bad shape"),
        ({"__metadata__": {"a": 1}}, b"", None, "__metadata__ must map str to str"),
        (None, b"", b'{"a":{},"a":{}}', "names 'a' twice"),
    ],
)
def test_invalid_files_are_refused_with_the_reason(
    tmp_path: Path, header: object, data: bytes, raw: bytes | None, message: str
) -> None:
    p = _file(tmp_path, header, data, raw)
    with pytest.raises(CheckpointError) as e:
        read_file(p)
    assert message in str(e.value)
    assert str(p) in str(e.value)


def _raw_file(path: Path, header: bytes, data: bytes) -> Path:
    header += b" " * (-len(header) % 8)
    path.write_bytes(len(header).to_bytes(8, "little") + header + data)
    return path


def _peak_bytes(f: Any) -> int:
    """The most memory Python held while ``f()`` ran (it must raise CheckpointError)."""
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError):
            f()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_huge_header_over_little_data_is_refused_unread(tmp_path: Path) -> None:
    # 4 MiB of shape (2 million dimensions) over 4 bytes of data: parsing it first
    # took some 15 times its size in memory (100 MB: a gigabyte and half a minute).
    shape = b"[" + b"1," * (2 << 20) + b"1]"
    p = _raw_file(
        tmp_path / "huge.safetensors",
        b'{"a":{"dtype":"F32","shape":' + shape + b',"data_offsets":[0,4]}}',
        b"\0" * 4,
    )
    peak = _peak_bytes(lambda: read_file(p))
    assert peak < 256 << 10, f"{peak} bytes held: the header was read"
    with pytest.raises(CheckpointError) as e:
        read_file(p)
    n = p.stat().st_size - 12
    assert str(e.value) == (
        f"{p}: header length {n} is more than the 4 bytes of tensor data it describes "
        f"(over {HEADER_ALLOWANCE} bytes, a checkpoint's header is smaller than its "
        "tensors): a broken file"
    )


def test_a_large_header_is_read_over_as_much_data(tmp_path: Path) -> None:
    # Under the allowance, or no larger than the data: read as before.
    big = {"note": "x" * (2 << 20)}
    w = Tensor("U8", (3 << 20,), b"\1" * (3 << 20))
    p = save_file({"w": w}, tmp_path / "ok.safetensors", metadata=big)
    assert read_file(p) == ({"w": w}, big)
    small = {"note": "x" * (HEADER_ALLOWANCE - 200)}
    p = save_file({}, tmp_path / "small.safetensors", metadata=small)
    assert read_file(p) == ({}, small)


def test_what_the_reader_refuses_is_not_written(tmp_path: Path) -> None:
    # Else a job would save a checkpoint it fails to resume from, a round later.
    with pytest.raises(CheckpointError, match=r"more than the 4 bytes of tensor data"):
        save_file(
            {"w": Tensor.scalar("F32", 1.0)},
            tmp_path / "c.safetensors",
            metadata={"note": "x" * HEADER_ALLOWANCE},
        )
    assert not (tmp_path / "c.safetensors").exists()


@pytest.mark.parametrize(
    "header",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":{"dtype":"F32","shape":' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
        b'{"__metadata__":' + b'{"a":' * 100_000 + b'""' + b"}" * 100_000 + b"}",
    ],
)
def test_a_deeply_nested_header_is_a_checkpoint_error(tmp_path: Path, header: bytes) -> None:
    p = _raw_file(tmp_path / "deep.safetensors", header, b"")
    with pytest.raises(CheckpointError) as e:
        read_file(p)
    assert str(e.value) == f"{p}: bad header: nested too deeply"


def test_offsets_are_checked_before_any_tensor_is_read(tmp_path: Path) -> None:
    header = {"a": _t("U8", [4 << 20], 0, 4 << 20), "b": _t("F32", [1], 4 << 20, (4 << 20) + 8)}
    p = _file(tmp_path, header, b"\0" * ((4 << 20) + 8))
    peak = _peak_bytes(lambda: read_file(p))
    assert peak < 1 << 20, f"{peak} bytes held: tensor 'a' was read before 'b' was checked"
    with pytest.raises(CheckpointError, match=r"tensor 'b' .* needs 4 bytes, its offsets give 8"):
        read_file(p)


@pytest.mark.parametrize(
    ("info", "message"),
    [
        (
            _t("F32", [1] * 100_000 + [2], 0, 4),
            "(F32 [1, 1, 1, 1, 1, 1, 1, 1, ... (100001 in all)])",
        ),
        (
            _t("F32", [2] * 65, 0, 4),
            "[2, 2, 2, 2, 2, 2, 2, 2, ... (65 in all)] of more than 2**64 - 1",
        ),
        (_t("F32", [2**63, 4, 0], 0, 0), "[9223372036854775808, 4, 0] of more than 2**64 - 1"),
        (_t("F32", [2**64], 0, 4), "has a bad shape [18446744073709551616]"),
        (_t("F32", [True], 0, 4), "has a bad shape [True]"),
        ({"dtype": "F32", "shape": "12", "data_offsets": [0, 4]}, "has a bad shape '12'"),
        ({"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}, "has dtype ['F32'], not read"),
        ({"dtype": {"F32": 1}, "shape": [], "data_offsets": [0, 4]}, "has dtype {'F32': 1}, not"),
    ],
)
def test_bad_shapes_and_dtypes_in_short_messages(
    tmp_path: Path, info: dict[str, Any], message: str
) -> None:
    p = _file(tmp_path, {"a" * 10_000: info}, b"\0" * 4)
    with pytest.raises(CheckpointError) as e:
        read_file(p)
    assert message in str(e.value)
    assert f"tensor {repr('a' * 10_000)[:60]}... (10002 characters)" in str(e.value)
    assert len(str(e.value)) < 300 + len(str(p))


def test_short_files(tmp_path: Path) -> None:
    p = tmp_path / "short.safetensors"
    p.write_bytes(b"\x01\x02")
    with pytest.raises(CheckpointError, match="shorter than the 8-byte header length"):
        read_file(p)
    p.write_bytes((1000).to_bytes(8, "little") + b"{}")
    with pytest.raises(CheckpointError, match="header length 1000 runs past the end"):
        read_file(p)
    p.write_bytes((2**40).to_bytes(8, "little"))
    with pytest.raises(CheckpointError, match="over the format's limit"):
        read_file(p)
    with pytest.raises(FileNotFoundError):
        read_file(tmp_path / "missing.safetensors")
    with pytest.raises(CheckpointError, match="not a regular file"):
        read_file(tmp_path)


def test_bad_inputs_to_the_writer() -> None:
    with pytest.raises(CheckpointError, match="mapping of names"):
        encode([("a", Tensor.scalar("F32", 1))])  # type: ignore[arg-type]
    with pytest.raises(CheckpointError, match="non-empty strings"):
        encode({"": Tensor.scalar("F32", 1)})
    with pytest.raises(CheckpointError, match="the header's own key"):
        encode({"__metadata__": Tensor.scalar("F32", 1)})
    with pytest.raises(CheckpointError, match="metadata must map str to str"):
        encode({}, metadata={"a": 1})  # type: ignore[dict-item]


def test_atomic_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    save_file({"a": Tensor.scalar("F32", 1)}, tmp_path / "c.safetensors")
    save_file({"a": Tensor.scalar("F32", 2)}, tmp_path / "c.safetensors")
    assert [p.name for p in tmp_path.iterdir()] == ["c.safetensors"]
    assert load_file(tmp_path / "c.safetensors")["a"].item() == 2
    assert oct((tmp_path / "c.safetensors").stat().st_mode & 0o777) == oct(0o644)


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "c.safetensors"
    target.write_bytes(b"old")

    def chunks() -> Iterator[bytes]:
        yield b"new, half of it"
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, chunks())
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["c.safetensors"]


def test_checkpoint_has_the_step_tensor(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "sub", {"w": array.array("f", [1.0])}, 1234)
    assert path == tmp_path / "sub" / "checkpoint.safetensors"
    t = load_file(path)
    assert t["step"] == Tensor("I64", (), (1234).to_bytes(8, "little"))
    assert read_step(t) == 1234


def test_checkpoint_refuses_a_step_in_the_state(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="holds a tensor named `step`"):
        write_checkpoint(tmp_path, {"step": Tensor.scalar("I64", 1)}, 1)
    with pytest.raises(CheckpointError, match="step must be between 0"):
        write_checkpoint(tmp_path, {}, -1)
    with pytest.raises(CheckpointError, match="step must be an int"):
        write_checkpoint(tmp_path, {}, 1.0)  # type: ignore[arg-type]
    with pytest.raises(CheckpointError, match="mapping"):
        write_checkpoint(tmp_path, None, 1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("tensor", "step"),
    [
        (Tensor.from_values("I64", [7], ()), 7),
        (Tensor.from_values("I64", [7]), 7),
        (Tensor.from_values("U64", [2**63 + 1]), 2**63 + 1),
        (Tensor.from_values("I32", [8], (1, 1)), 8),
        (Tensor.from_values("U32", [9]), 9),
    ],
)
def test_read_step_accepts_what_hadar_accepts(tensor: Tensor, step: int) -> None:
    assert read_step({"step": tensor}) == step


@pytest.mark.parametrize(
    "tensor",
    [
        Tensor.from_values("F32", [7.0]),
        Tensor.from_values("I64", [7, 8]),
        Tensor.from_values("I16", [7]),
        Tensor.from_values("I64", [-1]),
    ],
)
def test_read_step_refuses_the_rest(tensor: Tensor) -> None:
    with pytest.raises(CheckpointError, match="step"):
        read_step({"step": tensor})


def test_no_step() -> None:
    assert read_step({}) is None
