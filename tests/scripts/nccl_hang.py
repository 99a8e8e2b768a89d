"""An NCCL job whose collective never completes, for the GPU check's flight-recorder step (tools/gpu-check.sh).

One rank per GPU (NCCL refuses two ranks on one device, so the check runs one): a few allreduces, each step written
to DDPRUN_PROGRESS_FILE; then a kernel that spins on the GPU for --sleep-cycles blocks the stream, so the next
allreduce is enqueued and started on the host but never completes, and .item() waits for it: the shape of an NCCL
hang as ddprun sees it (the main thread in a CUDA synchronisation, the flight recorder holding the pending
collective).
"""
import argparse
import os
import pathlib

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--sleep-cycles", type=int, default=200_000_000_000)
    args = parser.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    progress = pathlib.Path(os.environ["DDPRUN_PROGRESS_FILE"]) if "DDPRUN_PROGRESS_FILE" in os.environ else None
    t = torch.ones(1024, device="cuda")
    for step in range(args.steps):
        if progress:
            progress.write_text(f"{step}\n")
        dist.all_reduce(t)
        torch.cuda.synchronize()
    print(f"rank {dist.get_rank()}: {args.steps} allreduces done; now blocking the stream", flush=True)
    torch.cuda._sleep(args.sleep_cycles)
    dist.all_reduce(t)
    print(t.sum().item(), flush=True)  # waits for the allreduce behind the spinning kernel


if __name__ == "__main__":
    main()
