"""Two ranks, one of which skips a collective: the GPU check's two-rank NCCL hang (tools/gpu-check.sh).

Run as two ddprun "nodes" on one machine, one rank each on the same GPU, each agent with its own NCCL_HOSTID: NCCL
refuses two ranks on one device only when both report the same host (its duplicate-GPU check compares the host hash,
which NCCL_HOSTID replaces), so the two ranks are real NCCL peers, over its socket transport. A few allreduces, each
step written to DDPRUN_PROGRESS_FILE; then rank 1 skips the next allreduce and waits in time.sleep while rank 0 is in
it, its stream held by an NCCL kernel that waits for rank 1. --backend gloo runs the same on the CPU (the check's dry
run: no flight recorder there).
"""
import argparse
import os
import pathlib
import time

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    parser.add_argument("--wait", type=float, default=600.0, help="seconds the skipping rank waits")
    args = parser.parse_args()
    device = torch.device("cpu")
    if args.backend == "nccl":
        device = torch.device("cuda", 0)  # the one GPU both ranks share
        torch.cuda.set_device(device)
    dist.init_process_group(args.backend)
    rank = dist.get_rank()
    progress = pathlib.Path(os.environ["DDPRUN_PROGRESS_FILE"]) if "DDPRUN_PROGRESS_FILE" in os.environ else None
    t = torch.ones(1024, device=device)
    for step in range(args.steps):
        if progress:
            progress.write_text(f"{step}\n")
        dist.all_reduce(t)
        t.sum().item()  # done before the next step
    print(f"rank {rank}: {args.steps} allreduces done", flush=True)
    if rank == 1:
        print("rank 1: skipping the next allreduce", flush=True)
        time.sleep(args.wait)
    else:
        dist.all_reduce(t)
        print(t.sum().item(), flush=True)  # never returns: rank 1 is not in this allreduce


if __name__ == "__main__":
    main()
