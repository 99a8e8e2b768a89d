"""A stock DDP script whose rank 1 fails without an error file (no @record), as most scripts run under torchrun do.

usage: failing_rank.py MODE
  exception    rank 1 raises KeyError inside a training step (Python prints the traceback and exits 1)
  exit3        rank 1 prints a fatal line to stderr and calls sys.exit(3)
  segfault     rank 1 says so on stderr, then dereferences NULL (SIGSEGV; with PYTHONFAULTHANDLER=1 Python prints the
               crash's stack)
  interleaved  both ranks write 2,000 lines to stderr at once, then rank 1 raises KeyError
  megabyte     rank 1 prints 1 MB to stderr, then raises KeyError
Rank 0 waits in a barrier for rank 1, which never comes.
"""
import ctypes
import sys

import torch.distributed as dist


def load_batch(step):
    batch = {"images": [step]}
    return batch["labels"]


def main():
    mode = sys.argv[1]
    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    if mode == "interleaved":
        for i in range(2000):
            print(f"rank {rank} warming up {i}", file=sys.stderr)
    if rank == 1:
        if mode == "exit3":
            print("fatal: the config names no optimizer", file=sys.stderr, flush=True)
            sys.exit(3)
        if mode == "segfault":
            print("about to read a NULL pointer", file=sys.stderr, flush=True)
            ctypes.string_at(0)
        if mode == "megabyte":
            line = "x" * 99 + "\n"
            sys.stderr.write(line * 10_000)
        for step in range(3):
            load_batch(step)
    dist.barrier()


if __name__ == "__main__":
    main()
