#!/usr/bin/env python3
"""A toy training job on hadar_job, with the standard library only.

Logistic regression by minibatch SGD on a small synthetic data set (two Gaussian
classes in 8 dimensions, made from a fixed seed, so that every copy of the job sees
the same data); the weights are F32 tensors in ``array.array('f')``. Run by Hadar
(see README.md beside it) it resumes from its checkpoint, reports progress and test
accuracy, saves when its round's deadline passes, stops on SIGTERM and at the job's
total. Run by hand it trains to its default total and keeps its checkpoint in
``./hadar-checkpoints`` (run it again to go on from there).

Knob (not part of the job protocol): ``TRAIN_STEP_SECONDS``, seconds to sleep per step
(default 0), so that a toy job lasts long enough to watch.
"""

from __future__ import annotations

import array
import math
import os
import random
import sys
import time

import hadar_job

DIM = 8
BATCH = 16
LR = 0.5


def make_data(n: int, seed: int) -> list[tuple[list[float], int]]:
    """``n`` labelled points: class 1 around +0.6 in every coordinate, class 0 around -0.6."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        y = rng.randrange(2)
        centre = 0.6 if y else -0.6
        out.append(([rng.gauss(centre, 1.0) for _ in range(DIM)], y))
    return out


def predict(w: array.array, b: array.array, x: list[float]) -> float:
    """The model's probability that ``x`` is of class 1."""
    z = b[0] + sum(wi * xi for wi, xi in zip(w, x))
    return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))


def accuracy(w: array.array, b: array.array, data: list[tuple[list[float], int]]) -> float:
    """The share of ``data`` the model classifies right."""
    return sum((predict(w, b, x) > 0.5) == bool(y) for x, y in data) / len(data)


def main() -> int:
    """Trains until the job's total or a stop request; returns the exit status."""
    job = hadar_job.init(total=2000)
    resumed = job.load()
    if resumed.tensors:
        w = resumed.tensors["w"].to_array()
        b = resumed.tensors["b"].to_array()
    else:
        w = array.array("f", [0.0] * DIM)
        b = array.array("f", [0.0])
    train, test = make_data(512, seed=1), make_data(256, seed=2)
    # Each copy and round draws its own batches (HADAR_SEED), and a resumed run
    # does not repeat the batches it drew before.
    rng = random.Random(job.seed * 1_000_003 + job.step)
    delay = float(os.environ.get("TRAIN_STEP_SECONDS", "0"))
    print(f"{job.env.job_name} copy {job.env.copy}: step {job.step} to {job.total}", flush=True)

    for step in job.steps(state=lambda: {"w": w, "b": b}):
        gw, gb, loss = [0.0] * DIM, 0.0, 0.0
        for x, y in rng.sample(train, BATCH):
            p = predict(w, b, x)
            loss -= math.log(p if y else 1.0 - p) if 0.0 < p < 1.0 else 0.0
            for i in range(DIM):
                gw[i] += (p - y) * x[i]
            gb += p - y
        for i in range(DIM):
            w[i] -= LR * gw[i] / BATCH
        b[0] -= LR * gb / BATCH
        if step % 50 == 0:
            job.report(loss=loss / BATCH, accuracy=accuracy(w, b, test))
        if delay:
            time.sleep(delay)

    print(f"stopped at step {job.step}: test accuracy {accuracy(w, b, test):.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
