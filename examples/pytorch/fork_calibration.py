#!/usr/bin/env python3
"""HadarE's fork model checked on a real PyTorch model (issue #16).

k copies of one job, each training from the averaged model with its own data
order for H iterations of batch B per round, averaged at every round boundary
(parameters, BatchNorm buffers and momentum: what averaging every float tensor of
the copies' checkpoints does), against one copy: iterations per copy until the
averaged model first reaches a target test accuracy. The speed-up of k copies is
iterations(1) / iterations(k). Beside it, the gradient noise scale B_noise of the
same model measured as in McCandlish et al. 2018 (arXiv 1812.06162, appendix A)
and the model's prediction S(k) = k (B_noise + B) / (B_noise + k B); rho fitted
as measured / S(k) by least squares.

Model: ResNet-18 (torchvision, CIFAR stem: 3x3 first convolution, no max-pool),
10 classes. Data, made on the machine: 32x32x3 images of 10 smooth random class
templates, each shifted by up to 4 pixels, scaled, under strong Gaussian noise
(`--noise`; `auto` picks the first of 10, 20, 30 at which one copy needs at least
500 iterations), with 10% of training labels replaced at random (so that gradients
are noisy and batch size matters). Needs a GPU for the full size; `--quick` runs a
small version anywhere. `--budget-s` stops starting new runs after that long (the
seeds run last, so a cut keeps whole tables).

    python3 examples/pytorch/fork_calibration.py --out results.json
"""

import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision


def make_data(n_train, n_test, device, seed=0, noise=1.0, label_noise=0.1):
    g = torch.Generator(device="cpu").manual_seed(seed)
    templates = torch.randn(10, 3, 8, 8, generator=g)
    templates = F.interpolate(templates, size=(32, 32), mode="bilinear", align_corners=False)
    templates = templates / templates.flatten(1).std(dim=1).view(10, 1, 1, 1)
    padded = F.pad(templates, (4, 4, 4, 4), mode="reflect")

    def draw(n, flip):
        y = torch.randint(0, 10, (n,), generator=g)
        dx = torch.randint(0, 9, (n,), generator=g)
        dy = torch.randint(0, 9, (n,), generator=g)
        x = torch.empty(n, 3, 32, 32)
        for i in range(9):
            for j in range(9):
                m = (dx == i) & (dy == j)
                if m.any():
                    x[m] = padded[y[m], :, j : j + 32, i : i + 32]
        scale = 0.5 + torch.rand(n, 1, 1, 1, generator=g)
        x = (scale * x + noise * torch.randn(n, 3, 32, 32, generator=g)) / max(noise, 1.0)
        if flip > 0:
            swap = torch.rand(n, generator=g) < flip
            y = torch.where(swap, torch.randint(0, 10, (n,), generator=g), y)
        return x.to(device), y.to(device)

    return draw(n_train, label_noise), draw(n_test, 0.0)


def model(device):
    m = torchvision.models.resnet18(num_classes=10)
    m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    m.maxpool = nn.Identity()
    return m.to(device).to(memory_format=torch.channels_last)


def accuracy(m, test, batch=1000):
    x, y = test
    m.eval()
    right = 0
    with torch.no_grad(), torch.autocast("cuda", torch.bfloat16, enabled=x.is_cuda):
        for i in range(0, len(y), batch):
            right += (m(x[i : i + batch]).argmax(1) == y[i : i + batch]).sum().item()
    m.train()
    return right / len(y)


class Copy:
    """One copy: a model, its optimizer and its own data order."""

    def __init__(self, device, seed, lr):
        self.model = model(device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
        self.gen = torch.Generator(device=device).manual_seed(1000 + seed)

    def steps(self, train, batch, n):
        x, y = train
        for _ in range(n):
            idx = torch.randint(0, len(y), (batch,), device=y.device, generator=self.gen)
            with torch.autocast("cuda", torch.bfloat16, enabled=x.is_cuda):
                loss = F.cross_entropy(self.model(x[idx]), y[idx])
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()


def tensors(c):
    """Every float tensor of a copy's checkpoint: parameters, buffers, momentum."""
    out = [t for t in c.model.state_dict().values() if t.is_floating_point()]
    for p in c.model.parameters():
        buf = c.opt.state.get(p, {}).get("momentum_buffer")
        if buf is not None:
            out.append(buf)
    return out


def average(copies):
    with torch.no_grad():
        groups = list(zip(*(tensors(c) for c in copies)))
        for ts in groups:
            mean = torch.stack([t.float() for t in ts]).mean(0)
            for t in ts:
                t.copy_(mean.to(t.dtype))


DEADLINE = math.inf


class Cut(Exception):
    """The time budget ran out in the middle of a run."""


def run(k, h, batch, lr, train, test, target, max_iters, seed, device):
    """Iterations per copy until the averaged model reaches `target` (None: never)."""
    torch.manual_seed(seed)
    first = Copy(device, seed * 100, lr)
    copies = [first]
    for c in range(1, k):
        other = Copy(device, seed * 100 + c, lr)
        other.model.load_state_dict(first.model.state_dict())
        copies.append(other)
    done = 0
    curve = []
    while done < max_iters:
        if time.time() > DEADLINE:
            raise Cut()
        for c in copies:
            c.steps(train, batch, h)
        done += h
        if k > 1:
            average(copies)
        acc = accuracy(first.model, test)
        curve.append((done, acc))
        if acc >= target:
            return done, curve
    return None, curve


def grad_sq_norm(m, train, batch, gen):
    x, y = train
    idx = torch.randint(0, len(y), (batch,), device=y.device, generator=gen)
    m.zero_grad(set_to_none=True)
    F.cross_entropy(m(x[idx]), y[idx]).backward()
    return sum((p.grad.float() ** 2).sum().item() for p in m.parameters() if p.grad is not None)


def noise_scale(m, train, small, big, samples, device):
    """McCandlish et al. appendix A: unbiased |G|^2 and tr(Sigma) from gradient
    norms at two batch sizes, averaged over `samples` draws each before dividing."""
    gen = torch.Generator(device=device).manual_seed(7)
    m.eval()  # BatchNorm in eval mode: the gradient of one fixed function
    gs = statistics.fmean(grad_sq_norm(m, train, small, gen) for _ in range(samples))
    gb = statistics.fmean(grad_sq_norm(m, train, big, gen) for _ in range(samples))
    m.train()
    g2 = (big * gb - small * gs) / (big - small)
    trace = (gs - gb) / (1.0 / small - 1.0 / big)
    return trace / g2, g2, trace


def s_of_k(k, b_noise, b):
    return k * (b_noise + b) / (b_noise + k * b)


def target_of(curve):
    """0.97 of what one copy reached at the end of its curve."""
    best = max(acc for _, acc in curve[-5:])
    target = round(0.97 * best, 3)
    return target, next(i for i, acc in curve if acc >= target)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a small, CPU-sized version")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--noise", default="auto")
    ap.add_argument("--copies", default="1,2,4,8")
    ap.add_argument("--rounds", default="25,100", help="iterations per round (H)")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--target", type=float, default=None, help="skip the one-copy run that sets it (needs --noise)")
    ap.add_argument("--reached-at", type=int, default=None, help="with --target: one copy's iterations to it")
    ap.add_argument("--noise-samples", type=int, default=64, help="gradient draws per batch size for B_noise")
    ap.add_argument("--max-iters", type=int, default=2500)
    ap.add_argument("--budget-s", type=float, default=1e9)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if a.quick:
        a.max_iters, a.seeds, a.copies, a.rounds = 100, 1, "1,2", "20"
        n_train, n_test = 2000, 500
    else:
        n_train, n_test = 50000, 2000
    torch.backends.cudnn.benchmark = True
    t0 = time.time()
    copies = [int(k) for k in a.copies.split(",")]
    rounds = [int(h) for h in a.rounds.split(",")]
    h0 = rounds[0]

    # The data's noise and the target: what one copy reaches in max-iters.
    for noise in ([10.0, 20.0, 30.0] if a.noise == "auto" else [float(a.noise)]):
        train, test = make_data(n_train, n_test, device, noise=noise)
        if a.target is not None:
            curve, target, reached_at = [], a.target, a.reached_at or a.max_iters // 2
            break
        _, curve = run(1, h0, a.batch, a.lr, train, test, 2.0, a.max_iters, 0, device)
        target, reached_at = target_of(curve)
        print(f"noise {noise}: one copy reaches {target} after {reached_at} iterations; "
              f"curve {curve[::max(1, len(curve) // 10)]}", flush=True)
        if reached_at >= 500 or a.quick:
            break
    # B_noise along one copy's path: a quarter, half and all of the way.
    b_noise_at = {}
    probe = Copy(device, 0, a.lr)
    done = 0
    for frac in (0.25, 0.5, 1.0):
        at = max(h0, int(frac * reached_at))
        probe.steps(train, a.batch, at - done)
        done = at
        b, g2, trace = noise_scale(probe.model, train, a.batch, 8 * a.batch, 16 if a.quick else a.noise_samples, device)
        b_noise_at[at] = {"b_noise": b, "grad_sq_norm": g2, "trace_sigma": trace}
        print(f"B_noise after {at} iterations: {b:.1f}", flush=True)
    b_noise = statistics.fmean(v["b_noise"] for v in b_noise_at.values())

    global DEADLINE
    DEADLINE = t0 + a.budget_s
    runs = {}
    for seed in range(a.first_seed, a.first_seed + a.seeds):
        for h in rounds:
            for k in copies:
                t = time.time()
                try:
                    n, _ = run(k, h, a.batch, a.lr, train, test, target, a.max_iters, seed, device)
                except Cut:
                    print(f"H={h} k={k} seed={seed}: cut by --budget-s", flush=True)
                    continue
                runs.setdefault((h, k), []).append(n)
                print(f"H={h} k={k} seed={seed}: {n} iterations per copy ({time.time() - t:.1f} s)", flush=True)
    rows = []
    for h in rounds:
        base = None
        for k in copies:
            its = runs.get((h, k), [])
            reached = [n for n in its if n is not None]
            mean = statistics.fmean(reached) if its and len(reached) == len(its) else None
            if k == 1:
                base = mean
            rows.append({
                "round_iterations": h,
                "copies": k,
                "iterations_per_copy": its,
                "mean": mean,
                "speedup": (base / mean) if (base and mean) else None,
                "s_of_k": s_of_k(k, b_noise, a.batch),
            })
    fit = [(r["speedup"], r["s_of_k"]) for r in rows if r["copies"] > 1 and r["speedup"]]
    rho = sum(m * s for m, s in fit) / sum(s * s for _, s in fit) if fit else None
    result = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "model": "resnet18 (CIFAR stem), 10 classes, synthetic 32x32x3 data",
        "noise": noise,
        "train": n_train,
        "test": n_test,
        "batch": a.batch,
        "lr": a.lr,
        "max_iters": a.max_iters,
        "target_accuracy": target,
        "one_copy_curve": curve,
        "b_noise": b_noise,
        "b_noise_along_the_way": b_noise_at,
        "rho_fit": rho,
        "rows": rows,
        "seconds": time.time() - t0,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "one_copy_curve"}, indent=1))
    print(f"\nB_noise = {b_noise:.0f} (batch {a.batch}), target accuracy {target}, rho fit {rho}")
    print("| H | k | iterations per copy (seeds) | speed-up | S(k) |")
    print("|---|---|---|---|---|")
    for r in rows:
        sp = f"{r['speedup']:.2f}" if r["speedup"] else "-"
        print(f"| {r['round_iterations']} | {r['copies']} | {r['iterations_per_copy']} | {sp} | {r['s_of_k']:.2f} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
