"""A worker that counts Slurm's warning signal: every SIGUSR1 appends a line to DIR/usr1-<RANK>. It writes
DIR/ready-<RANK> (its host name and its parent's pid, the ddprun that started it) once the handler is in place,
and exits 0 when DIR/stop appears (at most 120 s later; then it exits 3). Knows nothing of ddprun: RANK is
torchrun's variable. Usage: usr1_worker.py DIR
"""
import os
import pathlib
import signal
import socket
import sys
import time


def main():
    out = pathlib.Path(sys.argv[1])
    rank = os.environ["RANK"]
    host = socket.gethostname()

    def on_usr1(*_):
        with open(out / f"usr1-{rank}", "a") as f:
            f.write(f"{host}\n")

    signal.signal(signal.SIGUSR1, on_usr1)
    (out / f"ready-{rank}").write_text(f"{host} {os.getppid()}")
    deadline = time.monotonic() + 120
    while not (out / "stop").exists():
        if time.monotonic() > deadline:
            print(f"rank {rank}: no stop file within 120 s", flush=True)
            return 3
        time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
