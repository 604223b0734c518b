"""Safetensors files, written and read by the standard library alone, and the
job protocol's checkpoints.

The format (https://huggingface.co/docs/safetensors): an 8-byte little-endian
header length ``N``; ``N`` bytes of JSON, ``{"__metadata__": {str: str},
NAME: {"dtype": ..., "shape": [...], "data_offsets": [begin, end]}, ...}``, padded
with spaces to a multiple of 8; then the tensors' bytes, little-endian, one after
another (offsets count from the end of the header). Files written here are byte for
byte what the ``safetensors`` library writes for the same tensors: tensors ordered by
dtype (the library's enum order, descending) and then by name, compact JSON.

A checkpoint of the job protocol is such a file with a tensor ``step``: one I64, the
model's global step, which ``hadar`` reads to credit the work it holds (and which
``hadar merge`` takes from the copy with the most iterations, as every integer tensor).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any, NamedTuple, SupportsIndex, Union

from .errors import CheckpointError, TensorError
from .tensors import DTYPE_RANK, DTYPES, Tensor, as_tensor

__all__ = [
    "CHECKPOINT_FILE",
    "HEADER_ALLOWANCE",
    "MAX_HEADER_BYTES",
    "RESUME_FILE",
    "STEP",
    "SafetensorsFile",
    "encode",
    "has_checkpoint",
    "load_file",
    "read_file",
    "read_step",
    "save_file",
    "step_tensor",
    "write_atomic",
    "write_checkpoint",
]

#: The checkpoint a task writes before it exits, in ``HADAR_CHECKPOINT_DIR``.
CHECKPOINT_FILE = "checkpoint.safetensors"
#: The checkpoint a task resumes from, in ``HADAR_CHECKPOINT_DIR``, when it exists.
RESUME_FILE = "resume.safetensors"
#: The name of the tensor holding the model's global step.
STEP = "step"
#: The largest header the format allows (and ``hadar`` reads).
MAX_HEADER_BYTES = 100_000_000
#: A header up to this size is read whatever the file holds besides; a larger one
#: must be no larger than the tensor data it describes. A real checkpoint's header is
#: a small part of it (some 100 bytes a tensor); a huge one over little data is a
#: broken file, and parsing it first would take some 15 times its size in memory and
#: seconds per 10 MB (Python's JSON objects) before anything in it could be refused.
HEADER_ALLOWANCE = 1 << 20
#: The largest dimension and element count (``hadar`` reads them as 64-bit sizes).
_MAX_SIZE = 2**64 - 1

PathLike = Union[str, "os.PathLike[str]"]


class SafetensorsFile(NamedTuple):
    """What :func:`read_file` returns: the tensors, by name, and the header's
    ``__metadata__`` (empty when it has none).
    """

    tensors: dict[str, Tensor]
    metadata: dict[str, str]


def _check_metadata(metadata: Mapping[str, str] | None) -> dict[str, str] | None:
    if metadata is None:
        return None
    out = {}
    for k, v in metadata.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise CheckpointError(
                f"metadata must map str to str (safetensors' __metadata__); {k!r}: {v!r} does not"
            )
        out[k] = v
    return out


def _prepare(
    tensors: Mapping[str, Any], metadata: Mapping[str, str] | None
) -> tuple[bytes, list[Tensor]]:
    """The header (length and padded JSON) and the tensors in file order."""
    if not isinstance(tensors, Mapping):
        raise CheckpointError(
            f"tensors must be a mapping of names to tensors, not {type(tensors).__name__}"
        )
    items: list[tuple[str, Tensor]] = []
    for name, value in tensors.items():
        if not isinstance(name, str) or not name:
            raise CheckpointError(f"tensor names must be non-empty strings, not {name!r}")
        if name == "__metadata__":
            raise CheckpointError("`__metadata__` is the header's own key, not a tensor name")
        items.append((name, as_tensor(value, name)))
    items.sort(key=lambda nt: (-DTYPE_RANK[nt[1].dtype], nt[0]))
    header: dict[str, Any] = {}
    meta = _check_metadata(metadata)
    if meta is not None:
        header["__metadata__"] = meta
    offset = 0
    for name, t in items:
        header[name] = {
            "dtype": t.dtype,
            "shape": list(t.shape),
            "data_offsets": [offset, offset + t.nbytes],
        }
        offset += t.nbytes
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    if len(text) > max(HEADER_ALLOWANCE, offset):
        # What read_file() refuses is not written: a job would fail at its resume,
        # the round's work lost, rather than now.
        raise CheckpointError(
            f"the header would take {len(text)} bytes, more than the {offset} bytes of "
            f"tensor data (over {HEADER_ALLOWANCE} bytes, read_file refuses that as a "
            "broken file): keep __metadata__ small, or save fewer, larger tensors"
        )
    return len(text).to_bytes(8, "little") + text, [t for _, t in items]


def encode(tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> bytes:
    """The safetensors file of ``tensors`` (name to tensor-like) as bytes."""
    head, ordered = _prepare(tensors, metadata)
    return head + b"".join(t.data for t in ordered)


def write_atomic(path: PathLike, chunks: Iterator[bytes] | list[bytes]) -> Path:
    """Writes ``chunks`` to ``path`` atomically: to a temporary file in the same
    directory, flushed and fsynced, then renamed over ``path`` (and the directory
    fsynced), so that a process killed at any moment leaves either the old file or
    the new one, never half of one. Returns the path.
    """
    path = Path(path)
    directory = path.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return path
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
    return path


def save_file(
    tensors: Mapping[str, Any], path: PathLike, metadata: Mapping[str, str] | None = None
) -> Path:
    """Writes ``tensors`` (name to :class:`~hadar_job.Tensor`, ``array.array``, numpy
    array or torch tensor) to the safetensors file ``path``, atomically
    (:func:`write_atomic`). Returns the path.
    """
    head, ordered = _prepare(tensors, metadata)
    return write_atomic(path, [head, *(t.data for t in ordered)])


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise CheckpointError(f"the header names {k!r} twice")
        out[k] = v
    return out


def _clip(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to about ``limit`` characters: a broken header's names and
    shapes can be megabytes long, and the message must stay a line (a long list is
    not turned into text whole).
    """
    if isinstance(value, (list, tuple)):  # shapes: written as lists, as in the file
        head = ", ".join(_clip(x, 24) for x in value[:8])
        return f"[{head}, ... ({len(value)} in all)]" if len(value) > 8 else f"[{head}]"
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 20]}... ({len(text)} characters)"


def _is_shape(shape: Any) -> bool:
    """Whether ``shape`` is a list of sizes (ints from 0 to 2**64 - 1), checked without
    a Python loop over it: a broken header's shape can have millions of entries.
    """
    return (
        isinstance(shape, list)
        and set(map(type, shape)) <= {int}  # not bool, whose type is bool
        and (not shape or (min(shape) >= 0 and max(shape) <= _MAX_SIZE))
    )


def _numel(shape: tuple[int, ...]) -> int | None:
    """The elements of a checked shape; ``None`` past 2**64 - 1 (counted one dimension
    after another, as a 64-bit reader does: a 0 after the overflow does not save it).
    Without a Python loop, and without big-integer products: past 64 factors of 2 or
    more, the count has overflowed.
    """
    head = shape[: shape.index(0)] if 0 in shape else shape
    if len(head) - head.count(1) > 64:
        return None
    n = math.prod(head)
    if n > _MAX_SIZE:
        return None
    return n if len(head) == len(shape) else 0


def _read_exact(f: IO[bytes], n: int, path: Path) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise CheckpointError(f"{path}: the file ended early (the header says more data)")
    return data


def _file_kind(mode: int) -> str:
    """What a file that is not a regular file is, for a message."""
    for test, what in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return what
    return "an unknown kind of file"


def has_checkpoint(path: PathLike) -> bool:
    """Whether ``path`` holds a checkpoint to resume from: ``False`` when nothing is
    there, ``True`` for a regular file (or a link to one).

    Anything else there is an error, not "no checkpoint": a job that took it for
    none would start again from step 0 and its work so far would be lost, silently.
    Only ``lstat``/``stat`` are used: opening a FIFO would block.

    Raises:
        CheckpointError: ``path`` is a directory, FIFO, socket or device, a dangling
            symbolic link, or cannot be looked at (the message names it and what to do).
    """
    path = Path(path)
    fix = "put the checkpoint file there, or remove it to start from step 0"
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as e:
        raise CheckpointError(
            f"{path}: cannot be looked at ({e.strerror}); the job would start from step 0 "
            f"and lose its work so far: give the task's user access to {path.parent}"
        ) from None
    if stat.S_ISLNK(st.st_mode):
        try:
            st = os.stat(path)
        except OSError as e:
            try:
                target = os.readlink(path)
            except OSError:
                target = "?"
            what = (
                "which does not exist"
                if isinstance(e, FileNotFoundError)
                else f"that cannot be followed ({e.strerror})"
            )
            raise CheckpointError(
                f"{path}: a symbolic link to {target}, {what}; the job would start from "
                f"step 0 and lose its work so far: {fix}"
            ) from None
    if not stat.S_ISREG(st.st_mode):
        raise CheckpointError(
            f"{path}: {_file_kind(st.st_mode)}, not a checkpoint file; the job would start "
            f"from step 0 and lose its work so far: {fix}"
        )
    return True


def read_file(path: PathLike) -> SafetensorsFile:
    """Reads the safetensors file ``path``: its tensors and ``__metadata__``.

    Raises:
        CheckpointError: the file is not valid safetensors (the message names the
            file and what is wrong: header length, JSON, an unknown dtype, offsets
            that do not match the shapes, a file longer or shorter than its header).
        OSError: the file cannot be read.
    """
    path = Path(path)
    # The kind first: opening a FIFO would block, a device never ends.
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise CheckpointError(f"{path}: not a regular file: {_file_kind(mode)}")
    # O_NONBLOCK, should it have become a FIFO since; no effect on a regular file.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"{path}: not a regular file: {_file_kind(st.st_mode)}")
        size = st.st_size
        if size < 8:
            raise CheckpointError(
                f"{path}: {size} bytes long, shorter than the 8-byte header length"
            )
        n = int.from_bytes(f.read(8), "little")
        if n > MAX_HEADER_BYTES:
            raise CheckpointError(
                f"{path}: header length {n} is over the format's limit of {MAX_HEADER_BYTES} bytes"
            )
        if 8 + n > size:
            raise CheckpointError(
                f"{path}: header length {n} runs past the end of the {size}-byte file"
            )
        data_len = size - 8 - n
        if n > max(HEADER_ALLOWANCE, data_len):
            raise CheckpointError(
                f"{path}: header length {n} is more than the {data_len} bytes of tensor "
                f"data it describes (over {HEADER_ALLOWANCE} bytes, a checkpoint's header "
                "is smaller than its tensors): a broken file"
            )
        raw = _read_exact(f, n, path)
        try:
            header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
        except CheckpointError as e:
            raise CheckpointError(f"{path}: {e}") from None
        except (UnicodeDecodeError, ValueError) as e:
            raise CheckpointError(f"{path}: bad header: {e}") from None
        except RecursionError:  # JSON nested deeper than Python's stack
            raise CheckpointError(f"{path}: bad header: nested too deeply") from None
        del raw  # up to the header's size, not held while the tensors are read
        if not isinstance(header, dict):
            raise CheckpointError(f"{path}: bad header: not a JSON object")
        metadata = header.pop("__metadata__", None) or {}
        if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            raise CheckpointError(f"{path}: bad header: __metadata__ must map str to str")
        entries = []
        for name, info in header.items():
            try:
                dtype = info["dtype"]
                shape = info["shape"]
                begin, end = info["data_offsets"]
            except (TypeError, KeyError, ValueError):
                raise CheckpointError(
                    f"{path}: bad header: tensor {_clip(name)} needs dtype, shape and data_offsets"
                ) from None
            if not isinstance(dtype, str) or dtype not in DTYPES:
                raise CheckpointError(
                    f"{path}: tensor {_clip(name)} has dtype {_clip(dtype)}, not read here"
                )
            if not _is_shape(shape):
                raise CheckpointError(
                    f"{path}: tensor {_clip(name)} has a bad shape {_clip(shape)}"
                )
            if not all(isinstance(x, int) and not isinstance(x, bool) for x in (begin, end)):
                raise CheckpointError(f"{path}: tensor {_clip(name)} has bad data_offsets")
            entries.append((begin, end, name, dtype, tuple(shape)))
        entries.sort()
        # Every offset checked before any tensor is read: a broken header is refused
        # without reading (and holding) the tensors that come before its fault.
        offset = 0
        for begin, end, name, dtype, shape in entries:
            if begin != offset:
                raise CheckpointError(
                    f"{path}: tensor {_clip(name)} starts at {begin}, expected {offset} "
                    "(offsets must follow one another from 0)"
                )
            numel = _numel(shape)
            if numel is None:
                raise CheckpointError(
                    f"{path}: tensor {_clip(name)} has a shape {_clip(shape)} "
                    "of more than 2**64 - 1 elements"
                )
            if end - begin != numel * DTYPES[dtype]:
                raise CheckpointError(
                    f"{path}: tensor {_clip(name)} ({dtype} {_clip(shape)}) needs "
                    f"{numel * DTYPES[dtype]} bytes, its offsets give {end - begin}"
                )
            if end > data_len:
                raise CheckpointError(
                    f"{path}: tensor {_clip(name)} runs past the end of the file "
                    f"(the header describes at least {end} bytes of data, "
                    f"the file holds {data_len})"
                )
            offset = end
        if offset != data_len:
            raise CheckpointError(
                f"{path}: the header describes {offset} bytes of tensor data, "
                f"the file holds {data_len}"
            )
        tensors: dict[str, Tensor] = {}
        for begin, end, name, dtype, shape in entries:
            try:
                tensors[name] = Tensor(dtype, shape, _read_exact(f, end - begin, path))
            except TensorError as e:
                raise CheckpointError(f"{path}: tensor {_clip(name)}: {e}") from None
    return SafetensorsFile(tensors, dict(metadata))


def load_file(path: PathLike) -> dict[str, Tensor]:
    """The tensors of the safetensors file ``path``, by name (see :func:`read_file`)."""
    return read_file(path).tensors


def step_tensor(step: SupportsIndex) -> Tensor:
    """The ``step`` tensor of a checkpoint: one I64, shape ``()``."""
    if isinstance(step, bool) or not isinstance(step, int):
        try:
            step = int(step.__index__())  # numpy integers
        except AttributeError:
            raise CheckpointError(f"step must be an int, not {type(step).__name__}") from None
    if not 0 <= step < 2**63:
        raise CheckpointError(f"step must be between 0 and 2**63 - 1, not {step}")
    return Tensor("I64", (), step.to_bytes(8, "little", signed=True))


def read_step(tensors: Mapping[str, Tensor]) -> int | None:
    """The step a checkpoint's tensors record, as ``hadar`` reads it: a tensor
    ``step`` holding one I64, U64, I32 or U32 (any shape of one element). ``None``
    when there is no ``step`` tensor.

    Raises:
        CheckpointError: ``step`` is there but is not one non-negative integer.
    """
    t = tensors.get(STEP)
    if t is None:
        return None
    if t.dtype not in ("I64", "U64", "I32", "U32") or t.numel != 1:
        raise CheckpointError(
            f"tensor `step` is {t.dtype} of shape {list(t.shape)}; "
            "the job protocol wants one integer (I64)"
        )
    value = int(t.item())
    if value < 0:
        raise CheckpointError(f"tensor `step` holds {value}, a negative step")
    return value


def write_checkpoint(
    directory: PathLike,
    tensors: Mapping[str, Any],
    step: SupportsIndex,
    metadata: Mapping[str, str] | None = None,
    name: str = CHECKPOINT_FILE,
) -> Path:
    """Writes ``tensors`` and the ``step`` tensor to ``directory/name`` atomically.

    Raises:
        CheckpointError: ``tensors`` already holds a ``step`` (give it as ``step``), or
            a value cannot be stored.
    """
    if not isinstance(tensors, Mapping):
        raise CheckpointError(
            f"tensors must be a mapping of names to tensors, not {type(tensors).__name__}"
        )
    if STEP in tensors:
        raise CheckpointError(
            "the state holds a tensor named `step`; the checkpoint's step is written from "
            "the step argument (rename the tensor, or leave it out)"
        )
    full = dict(tensors)
    full[STEP] = step_tensor(step)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return save_file(full, directory / name, metadata)
