"""A plain PyTorch DistributedDataParallel job (gloo, CPU) run by Hadar as ranks.

The DDP part is what any DDP script does: `init_process_group(init_method="env://")`
reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, which Hadar sets for a job with
`ranks = "gpu"` (docs/job-protocol.md, "Version 2: ranks"); the model is wrapped in
DDP; each rank trains on its own slice of the data. What Hadar adds, around it:

- rank 0 resumes from `resume.safetensors` before the model is wrapped (DDP then
  broadcasts rank 0's weights to every rank, so all start alike);
- every rank's local batch is its HADAR_BATCH_SHARE of the global batch, and the loss is
  scaled so that uneven shares average over examples, not over ranks;
- a stop signal on any rank is all-reduced at the next step, so that every rank stops at
  the same step; rank 0 reports progress and writes `checkpoint.safetensors`.

Run by hand (examples/pytorch/README.md): a jobs file with
`command = ["/path/to/python", "examples/pytorch/ddp.py"]` and `ranks = "gpu"`.
"""

import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file
from torch.nn.parallel import DistributedDataParallel as DDP

STOP = False


def ask_stop(*_):
    global STOP
    STOP = True


def data(n=8192, dim=32, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, dim, generator=g) * 2.0
    y = torch.randint(0, classes, (n,), generator=g)
    x = centers[y] + torch.randn(n, dim, generator=g)
    return x, y


def report(marker, iterations, step, model, x, y):
    with torch.no_grad():
        acc = (model(x).argmax(1) == y).float().mean().item()
    print(f"{marker} " + json.dumps({"iterations": iterations, "step": step, "accuracy": acc}), flush=True)


def main():
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, ask_stop)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    ckdir = os.environ.get("HADAR_CHECKPOINT_DIR", ".")
    total = int(os.environ.get("HADAR_TOTAL_ITERATIONS", 500))
    share = float(os.environ.get("HADAR_BATCH_SHARE", 1.0 / world))
    global_batch = 64
    local_batch = max(1, round(global_batch * share))

    # --- plain DDP ---------------------------------------------------------
    dist.init_process_group(backend="gloo", init_method="env://")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    step = 0
    resume = os.path.join(ckdir, "resume.safetensors")
    if rank == 0 and os.path.exists(resume):
        state = load_file(resume)
        step = int(state.pop("step").item())
        model.load_state_dict(state)
    ddp = DDP(model)  # broadcasts rank 0's parameters to every rank
    step_t = torch.tensor([step])
    dist.broadcast(step_t, 0)
    step = int(step_t.item())
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    x, y = data()
    g = torch.Generator().manual_seed(1000 * rank + step)
    # -------------------------------------------------------------------------

    iterations, last_report = 0, time.time()
    while step < total:
        stop = torch.tensor([1.0 if STOP else 0.0])
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        if stop.item() > 0:
            break
        idx = torch.randint(0, len(x), (local_batch,), generator=g)
        loss = torch.nn.functional.cross_entropy(ddp(x[idx]), y[idx])
        # DDP averages gradients over ranks: weight each by its examples.
        (loss * local_batch / global_batch * world).backward()
        opt.step()
        opt.zero_grad()
        step += 1
        iterations += 1
        if rank == 0 and time.time() - last_report > 0.5:
            report("HADAR_PROGRESS", iterations, step, model, x, y)
            last_report = time.time()
    if rank == 0:
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        state["step"] = torch.tensor(step, dtype=torch.int64)
        tmp = os.path.join(ckdir, "checkpoint.safetensors.tmp")
        save_file(state, tmp)
        os.replace(tmp, os.path.join(ckdir, "checkpoint.safetensors"))
        report("HADAR_DONE" if step >= total else "HADAR_PROGRESS", iterations, step, model, x, y)
    digest = sum(p.double().sum().item() for p in model.parameters())
    print(f"rank {rank}/{world}: step {step}, weight sum {digest:.9f}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
