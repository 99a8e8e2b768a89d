"""A stock PyTorch DDP script (Gloo, env://) that reports its step to DDPRUN_PROGRESS_FILE, the three-line way a
user would add it, plus knobs that make it hang or pause for the hang-detection tests.

    --steps N            train N steps (default 60)
    --step-seconds S     sleep S seconds per step, so steps have a known length (default 0.05)
    --hang-rank R --hang-step K
                         rank R blocks in time.sleep at step K (of the first attempt only; of every attempt
                         with --hang-every-attempt) while the others wait for it in the next allreduce
    --fail-rank R --fail-step K
                         rank R raises at step K of the first attempt
    --pause-step K --pause-seconds S
                         every rank pauses S seconds at step K (a long evaluation, say), then goes on
    --resume-step K      attempts after the first start at step K, as if resumed from a checkpoint of step K
    --no-progress        do not write the progress file (a script that knows nothing of ddprun)
    --mark-file F        the hanging rank writes the wall time (time.time()) at which it hangs to F
"""
import argparse
import os
import pathlib
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--step-seconds", type=float, default=0.05)
    parser.add_argument("--hang-rank", type=int, default=-1)
    parser.add_argument("--hang-step", type=int, default=-1)
    parser.add_argument("--hang-every-attempt", action="store_true")
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-step", type=int, default=-1)
    parser.add_argument("--pause-step", type=int, default=-1)
    parser.add_argument("--pause-seconds", type=float, default=0)
    parser.add_argument("--resume-step", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--mark-file", default="")
    args = parser.parse_args()

    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    progress = os.environ.get("DDPRUN_PROGRESS_FILE")
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.resume_step if attempt > 0 else 0, args.steps):
        if progress and not args.no_progress:
            pathlib.Path(progress).write_text(f"{step}\n")
        if rank == args.hang_rank and step == args.hang_step and (attempt == 0 or args.hang_every_attempt):
            if args.mark_file:
                pathlib.Path(args.mark_file).write_text(f"{time.time():.3f}\n")
            time.sleep(3600)  # the hang: the other ranks wait for this rank in the next allreduce
        if rank == args.fail_rank and step == args.fail_step and attempt == 0:
            raise RuntimeError(f"injected failure at step {step}")
        if step == args.pause_step:
            time.sleep(args.pause_seconds)
        time.sleep(args.step_seconds)
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"rank {rank}: {args.steps} steps done in attempt {attempt}", flush=True)
    dist.barrier()


if __name__ == "__main__":
    main()
