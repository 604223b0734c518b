"""The package's exceptions: each names what was wrong and, where it can, what to do."""

from __future__ import annotations

__all__ = ["CheckpointError", "EnvError", "HadarJobError", "TensorError"]


class HadarJobError(Exception):
    """Base of every error this package raises on purpose."""


class EnvError(HadarJobError, ValueError):
    """A job protocol variable holds a value that is not what the protocol says."""


class TensorError(HadarJobError, ValueError):
    """A value cannot be stored as a tensor (unknown dtype, wrong size, no dtype)."""


class CheckpointError(HadarJobError, ValueError):
    """A checkpoint file is not a valid safetensors file, or a state cannot be saved."""
