"""A stock PyTorch DDP training script, as users write it for torchrun: nothing ddprun-specific.

Gloo, init_method="env://", DistributedDataParallel over a small model, a few SGD steps; then it checks
that the ranks agree and prints one line per rank.
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel


def main():
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)  # different init per rank: DDP must broadcast rank 0's
    model = DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(5):
        x = torch.randn(4, 8) + rank
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    assert all(torch.equal(g, gathered[0]) for g in gathered), "ranks disagree after DDP steps"
    print(f"stock DDP script: rank {rank} of {world} OK", flush=True)
    dist.barrier()


if __name__ == "__main__":
    main()
