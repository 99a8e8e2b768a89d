"""Stock PyTorch DDP scripts (Gloo, env://) in the shapes real jobs take, for ddprun's hang detection: healthy
jobs that stop stepping for a while and must never be flagged, and jobs that really hang. They report their
step the way the README shows (`progress.write_text(f"{step}\n")`) and nothing else, unless a pattern says so.

    --pattern NAMES      one or more of (comma-separated, e.g. warmup,hang):
      steps              plain training (the baseline)
      eval               every rank evaluates (computes) for --seconds at each epoch end, not announced
      rank0-eval         rank 0 evaluates for --seconds (announced as phase "eval" on rank 0, as the docs
                         show) while the other ranks wait in dist.barrier()
      rank0-compute      rank 0 computes (torch) for --seconds, not announced, while the other ranks wait in
                         dist.barrier()
      rank0-pycompute    the same in a pure Python loop (a metric computed sample by sample)
      checkpoint         rank 0 serialises and writes a checkpoint for --seconds (not announced) while the
                         others wait in dist.barrier()
      dataloader         a DataLoader(num_workers=2) whose workers burn --seconds of CPU each when an epoch
                         starts, while the main thread waits on the loader's queue
      warmup             step 0 is reported, then a --seconds warm-up (computing), then training
      loader-hang        rank --rank's DataLoader worker (num_workers=1) blocks in time.sleep when it loads the
                         batch of step --step (first attempt only); the rank's main thread waits on the loader
      hang               rank --rank blocks in time.sleep at step --step (first attempt only)
      early-exit         rank --rank exits 0 at step --step (as a SIGTERM handler calling sys.exit(0) does),
                         while the others go on into the next allreduce
      slow-exit          after the last step rank 1 spends --seconds in an atexit handler (as one that uploads
                         logs does) while rank 0 has already exited 0
      big-allreduce      at each epoch end every rank allreduces --count tensors of --mb MB (gradient
                         accumulation's large sync): a long collective that moves gigabytes
      idle-all           at each epoch end every rank sleep-polls --seconds for a file (a data shard), outside any
                         collective
      spin               rank --rank spins in `while True: pass` at step --step (first attempt only) while the
                         others wait in the next allreduce
      spin-flag          the same in `while not ready: pass` (a flag nobody sets: a few bytecodes)
      spin-list          the same in `while True: for x in [1, 2, 3]: pass` (a loop over a fixed list)
      lock               rank --rank acquires a threading.Lock it already holds at step --step (a lock deadlock)
      blocked-read       rank --rank reads from a pipe nobody writes at step --step
      rank0-poll         rank 0 sleep-polls (0.5 s) for a file that never comes for --seconds while the others wait in
                         dist.barrier()
      rank0-genexpr      rank 0 counts the ones of a long list with a generator expression, again and again, for
                         --seconds while the others wait in dist.barrier() (a computation whose innermost frame's
                         locals repeat)
    --no-report          never write the progress file (a script that knows nothing of ddprun)
    --report-after       report a step once it is done (the step number + 1), not when it starts: a hang in step 0
                         then comes before any report
    --report-every N     report only every N-th step (coarse progress reports)
    --epochs E --steps-per-epoch S --step-seconds T
    --mb M --count N     big-allreduce's tensor size and count (default 200 MB, 16)
    --mark-file F        the hanging rank writes the wall time at which it hangs to F
    --checkpoint-dir D   where the checkpoint pattern writes (default /tmp)
"""
import argparse
import atexit
import os
import pathlib
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel


def py_burn(seconds):
    """Computes in pure Python for `seconds` of wall time (no torch, no I/O)."""
    end = time.time() + seconds
    total = 0
    while time.time() < end:
        for i in range(10000):
            total += (i * i) % 7
    return total


def burn(seconds):
    """Computes (matrix products) for `seconds` of wall time."""
    a = torch.randn(128, 128)
    end = time.time() + seconds
    while time.time() < end:
        a = torch.tanh(a @ a)


class SlowStartDataset(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.full((8,), float(i % 7))


class HangingDataset(torch.utils.data.Dataset):
    """Item `at` blocks forever: a loader worker stuck on a dead file system, say (the time written to mark_file)."""
    def __init__(self, n, at, mark_file=""):
        self.n, self.at, self.mark_file = n, at, mark_file

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.at:
            if self.mark_file:
                pathlib.Path(self.mark_file).write_text(f"{time.time():.3f}\n")
            time.sleep(3600)
        return torch.full((8,), float(i % 7))


def slow_worker_init(seconds):
    def init(_worker_id):
        torch.set_num_threads(1)
        burn(seconds)  # a loader worker that builds an index or opens shards when the epoch starts
    return init


ready = False


def fault(patterns, mark_file):
    """The first-attempt fault of rank --rank at step --step, if a pattern asks for one; writes the time to mark_file."""
    faults = {"hang", "spin", "spin-flag", "spin-list", "lock", "blocked-read"} & patterns
    if not faults:
        return
    if mark_file:
        pathlib.Path(mark_file).write_text(f"{time.time():.3f}\n")
    if "hang" in faults:
        time.sleep(3600)
    if "spin" in faults:
        while True: pass
    if "spin-flag" in faults:
        while not ready: pass
    if "spin-list" in faults:
        while True:
            for x in [1, 2, 3]: pass
    if "lock" in faults:
        import threading
        lock = threading.Lock()
        lock.acquire()
        lock.acquire()
    if "blocked-read" in faults:
        reader, _writer = os.pipe()
        os.read(reader, 1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pattern", default="steps")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps-per-epoch", type=int, default=20)
    parser.add_argument("--step-seconds", type=float, default=0.05)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--rank", type=int, default=1)
    parser.add_argument("--step", type=int, default=2)
    parser.add_argument("--mark-file", default="")
    parser.add_argument("--checkpoint-dir", default="/tmp")
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--count", type=int, default=16)
    parser.add_argument("--report-after", action="store_true")
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument("--report-every", type=int, default=1)
    args = parser.parse_args()
    patterns = set(args.pattern.split(","))

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    path = os.environ.get("DDPRUN_PROGRESS_FILE")
    progress = pathlib.Path(path) if path and not args.no_report else None
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    loader = None
    if "dataloader" in patterns:
        loader = torch.utils.data.DataLoader(SlowStartDataset(args.steps_per_epoch * 4), batch_size=4,
                                             num_workers=2, worker_init_fn=slow_worker_init(args.seconds))

    if "loader-hang" in patterns:
        at = args.step * 4 if rank == args.rank and attempt == 0 else -1
        loader = torch.utils.data.DataLoader(HangingDataset(args.steps_per_epoch * 4, at, args.mark_file), batch_size=4,
                                             num_workers=1)

    step = 0
    if "warmup" in patterns:
        if progress:
            progress.write_text(f"{step}\n")
        burn(args.seconds)

    for epoch in range(args.epochs):
        batches = iter(loader) if loader is not None else None
        for _ in range(args.steps_per_epoch):
            if progress and not args.report_after and step % args.report_every == 0:
                progress.write_text(f"{step}\n")
            if rank == args.rank and step == args.step and attempt == 0:
                fault(patterns, args.mark_file)
            if "early-exit" in patterns and rank == args.rank and step == args.step and attempt == 0:
                print(f"rank {rank}: leaving early with exit code 0", flush=True)
                sys.exit(0)
            x = next(batches) if batches is not None else torch.randn(4, 8)
            time.sleep(args.step_seconds)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if progress and args.report_after and step % args.report_every == 0:
                progress.write_text(f"{step}\n")
        if "eval" in patterns:
            burn(args.seconds)
        if "rank0-eval" in patterns:
            if rank == 0:
                if progress:
                    progress.write_text(f"{step}\n0 eval\n")
                burn(args.seconds)
                if progress:
                    progress.write_text(f"{step}\n0 train\n")
            dist.barrier()
        if "rank0-compute" in patterns or "rank0-pycompute" in patterns:
            if rank == 0:
                (burn if "rank0-compute" in patterns else py_burn)(args.seconds)
            dist.barrier()
        if "rank0-poll" in patterns:
            if rank == 0:
                end = time.time() + args.seconds
                while time.time() < end and not os.path.exists(f"/nonexistent/shard-{epoch}"):
                    time.sleep(0.5)
            dist.barrier()
        if "rank0-genexpr" in patterns:
            if rank == 0:
                data = [i % 10 for i in range(2_000_000)]
                end = time.time() + args.seconds
                while time.time() < end:
                    n = sum(1 for y in data if y == 1)
            dist.barrier()
        if "big-allreduce" in patterns:
            buffer = torch.ones(args.mb * (1 << 20) // 4)
            for _ in range(args.count):
                dist.all_reduce(buffer)
            del buffer
        if "idle-all" in patterns:
            shard = pathlib.Path(args.checkpoint_dir) / f"shard-{epoch}"
            end = time.time() + args.seconds
            while time.time() < end and not shard.exists():
                time.sleep(0.5)
        if "checkpoint" in patterns:
            if rank == 0:
                out = pathlib.Path(args.checkpoint_dir) / f"ckpt-{os.getpid()}.pt"
                end = time.time() + args.seconds
                while time.time() < end:
                    torch.save({"model": model.state_dict(), "blob": torch.randn(1 << 20)}, out)
                out.unlink(missing_ok=True)
            dist.barrier()
    print(f"rank {rank}: {step} steps done in attempt {attempt}", flush=True)
    dist.barrier()
    if "slow-exit" in patterns and rank == 1:
        atexit.register(time.sleep, args.seconds)


if __name__ == "__main__":
    main()
