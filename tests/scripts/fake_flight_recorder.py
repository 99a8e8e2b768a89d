"""A rank with a stand-in for NCCL's flight recorder (torch >= 2.x), for ddprun's process tests on stock python3-torch.

torch's ProcessGroupNCCL, when TORCH_NCCL_TRACE_BUFFER_SIZE > 0, opens a FIFO at
<TORCH_NCCL_DEBUG_INFO_PIPE_FILE><rank>.pipe (non-blocking) and its heartbeat monitor checks, about once a second,
the key "exception_dump" at the root of its store through torch's own TCPStore client; either asks it to write its
dump to <TORCH_FR_DUMP_TEMP_FILE><rank>. Debian's torch 1.13 has neither, so this script does what that monitor does
with the same real client: a thread that reads the pipe and probes the key with a stock TCPStore connected to
MASTER_ADDR:MASTER_PORT (the key travels on the wire as torch's client sends it). --answer says which request it
obeys. Every rank steps (DDPRUN_PROGRESS_FILE) and, in attempt 0, rank 0 stops stepping at --hang-step: a hang.
At start each rank prints whether "exception_dump" is already set (an attempt must start without it).
"""
import argparse
import os
import pathlib
import threading
import time

import torch.distributed as dist


def key_is_set(store):
    # torch 1.13's Python TCPStore has no check(); a compare-and-set that can never match reads without writing.
    return store.compare_set("exception_dump", "\0absent", "\0absent") != b"\0absent"


def monitor(store, pipe_fd, dump, answer):
    while True:
        asked_by = None
        if pipe_fd is not None:
            try:
                if os.read(pipe_fd, 1) and answer in ("pipe", "both"):
                    asked_by = "the pipe"
            except BlockingIOError:
                pass
        if asked_by is None and answer in ("key", "both") and key_is_set(store):
            asked_by = "the store key"
        if asked_by:
            dump.write_text(f"dump of rank {os.environ['RANK']}, asked by {asked_by}\n")
            print(f"rank {os.environ['RANK']}: wrote {dump.name}, asked by {asked_by}", flush=True)
            return
        time.sleep(0.5)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--answer", choices=["pipe", "key", "both"], default="both")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--hang-step", type=int, default=5)
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False)
    print(f"rank {rank} attempt {attempt}: exception_dump at start: {'set' if key_is_set(store) else 'absent'}",
          flush=True)
    pipe_fd = None
    if os.environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE"):
        pipe = os.environ["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] + f"{rank}.pipe"
        os.mkfifo(pipe)
        pipe_fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    dump = pathlib.Path(os.environ["TORCH_FR_DUMP_TEMP_FILE"] + str(rank))
    threading.Thread(target=monitor, args=(store, pipe_fd, dump, args.answer), daemon=True).start()
    progress = pathlib.Path(os.environ["DDPRUN_PROGRESS_FILE"])
    for step in range(args.steps):
        if attempt == 0 and rank == 0 and step == args.hang_step:
            time.sleep(3600)
        progress.write_text(f"{step}\n")
        time.sleep(0.05)
    print(f"rank {rank} attempt {attempt}: done", flush=True)


if __name__ == "__main__":
    main()
