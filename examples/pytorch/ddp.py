"""A plain PyTorch DistributedDataParallel job (gloo on a CPU, NCCL on GPUs), on hadar_job.

The DDP part is what any DDP script does: a process group from the environment, the
model wrapped in DDP, each rank training on its own slice of the data. What Hadar needs
around it is `hadar_job` (python/README.md):

- `hj.init_process_group(job)`: the group from RANK, WORLD_SIZE, MASTER_ADDR and
  MASTER_PORT, which Hadar sets for a job with `ranks = "gpu"`, on device 0 (each rank
  sees its own GPUs only), and a stop request agreed by every rank at a step boundary;
- `hj.resume(job, model, opt)` before DDP wraps the model: rank 0 reads
  `resume.safetensors` and sends it to every rank, so that all start alike;
- each rank's batch is its HADAR_BATCH_SHARE of the global batch, and its loss is scaled
  so that uneven shares average over examples, not over ranks;
- `job.steps(...)` counts steps, reports, stops at the total or at a stop request and
  has rank 0 write `checkpoint.safetensors` on the way out.

Run by Hadar (examples/pytorch/README.md): a jobs file with
`command = ["/path/to/venv/bin/python", "/path/to/examples/pytorch/ddp.py"]`,
`ranks = "gpu"` and a gang of 2 or more. Run by hand (`python ddp.py`) it trains alone.
"""

import sys

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

import hadar_job
import hadar_job.torch as hj

GLOBAL_BATCH = 64


def data(n=8192, dim=32, classes=4, seed=0):
    """A fixed synthetic data set: `classes` Gaussian clusters in `dim` dimensions."""
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, dim, generator=g) * 2.0
    y = torch.randint(0, classes, (n,), generator=g)
    x = centers[y] + torch.randn(n, dim, generator=g)
    return x, y


def main():
    job = hadar_job.init(total=500)
    device = hj.init_process_group(job)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    hj.resume(job, model, opt)
    ddp = DDP(model) if job.world_size > 1 else model
    x, y = (t.to(device) for t in data())
    local = job.local_batch_size(GLOBAL_BATCH)
    scale = job.loss_scale(local, GLOBAL_BATCH)
    g = torch.Generator().manual_seed(1000 * job.rank + job.step)

    for _ in job.steps(state=hj.state_fn(model, opt)):
        idx = torch.randint(0, len(x), (local,), generator=g).to(device)
        loss = torch.nn.functional.cross_entropy(ddp(x[idx]), y[idx])
        (loss * scale).backward()
        opt.step()
        opt.zero_grad()
        if job.is_rank0 and job.step % 20 == 0:
            with torch.no_grad():
                acc = (model(x).argmax(1) == y).float().mean().item()
            job.report(loss=loss.item(), accuracy=acc)

    digest = sum(p.double().sum().item() for p in model.parameters())
    print(f"rank {job.rank}/{job.world_size}: step {job.step}, weight sum {digest:.9f}", flush=True)
    if job.world_size > 1:
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
