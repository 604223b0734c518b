#!/usr/bin/env python3
"""A training job on hadar_job with numpy (the ``numpy`` extra), and nothing else.

Softmax regression by minibatch SGD on a synthetic data set (four Gaussian classes in 16
dimensions, from a fixed seed, so that every copy of the job sees the same data). The
weights are numpy arrays: ``job.load().numpy()`` gives them back, and ``state`` returns
them as they are (F32). Run by Hadar it resumes, reports loss and test accuracy,
saves when its round's deadline passes, stops on the stop signal or at the job's
total; HadarE's merge averages the copies' weights. Run by hand it trains to 3000
steps and keeps its checkpoint in ``./hadar-checkpoints``.

Knob (not part of the job protocol): ``TRAIN_STEP_SECONDS``, seconds to sleep per step.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import hadar_job

DIM, CLASSES, BATCH, LR = 16, 4, 32, 0.2


def make_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points of ``CLASSES`` Gaussian clusters (the centres fixed by seed 0)."""
    centres = np.random.default_rng(0).normal(0.0, 1.5, (CLASSES, DIM))
    rng = np.random.default_rng(seed)
    y = rng.integers(0, CLASSES, n)
    x = centres[y] + rng.normal(0.0, 1.0, (n, DIM))
    return x.astype(np.float32), y


def softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise softmax."""
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def main() -> int:
    """Trains until the job's total or a stop request; returns the exit status."""
    job = hadar_job.init(total=3000)
    resumed = job.load().numpy()
    params = {
        "w": resumed.get("w", np.zeros((DIM, CLASSES), dtype=np.float32)),
        "b": resumed.get("b", np.zeros(CLASSES, dtype=np.float32)),
    }
    w, b = params["w"], params["b"]  # updated in place
    (x, y), (tx, ty) = make_data(4096, seed=1), make_data(1024, seed=2)
    rng = np.random.default_rng(job.seed * 1_000_003 + job.step)
    delay = float(os.environ.get("TRAIN_STEP_SECONDS", "0"))

    for _ in job.steps(state=lambda: params):
        i = rng.integers(0, len(x), BATCH)
        p = softmax(x[i] @ w + b)
        loss = -np.log(p[np.arange(BATCH), y[i]] + 1e-9).mean()
        p[np.arange(BATCH), y[i]] -= 1.0
        np.subtract(w, LR * (x[i].T @ p / BATCH), out=w, casting="same_kind")
        np.subtract(b, LR * p.mean(axis=0), out=b, casting="same_kind")
        if job.step % 50 == 0:
            accuracy = float((softmax(tx @ w + b).argmax(axis=1) == ty).mean())
            job.report(loss=float(loss), accuracy=accuracy)
        if delay:
            time.sleep(delay)
    return 0


if __name__ == "__main__":
    sys.exit(main())
