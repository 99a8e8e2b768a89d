#!/usr/bin/python3
"""Records the hang watch's corpus: real jobs (tests/scripts/watch_patterns.py: stock python3-torch DDP, 2 ranks, Gloo)
run under ddprun --watch-record, each once on a quiet machine and once under two busy loops per core, into
tests/data/watch_traces/ with manifest.json (each trace's expected verdict and verdict time, which
tests/watch_replay_test.cpp replays them against). About 25 minutes on 2 cores.

    tools/record_watch_traces.py [--build build] [--only NAME[,NAME...]] [--load quiet|loaded|both] [--out DIR]

The expected verdicts are the design's (docs/watching.md), not what the recording happened to show: a trace whose
recording disagreed is reported here and fails the replay test until the watch is right.
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
PATTERNS = ROOT / "tests/scripts/watch_patterns.py"
FLOOR = 2  # --hang-min-timeout for every case: the watch is at its most sensitive
SPIN_BUSY_TIMEOUT = 70  # a reported spin is left to the busy timeout; keep the recording short

# name, what it is, watch_patterns.py arguments, extra ddprun flags, expected verdict, culprits, window after the mark
CASES = [
    # Healthy jobs that stop stepping for long: never flagged.
    ("big-allreduce", "a long Gloo allreduce moving gigabytes", ["--pattern", "big-allreduce", "--epochs", "1",
     "--steps-per-epoch", "5", "--mb", "200", "--count", "16"], [], "none", None, None),
    ("idle-all", "every rank sleep-polls 12 s for a data shard", ["--pattern", "idle-all", "--epochs", "2",
     "--steps-per-epoch", "5", "--seconds", "12"], [], "none", None, None),
    ("dataloader", "DataLoader workers starting (5 s of CPU each) at every epoch", ["--pattern", "dataloader",
     "--epochs", "2", "--steps-per-epoch", "10", "--seconds", "5"], [], "none", None, None),
    ("rank0-eval", "rank 0 evaluates 8 s (announced) while rank 1 waits in a barrier", ["--pattern", "rank0-eval",
     "--epochs", "2", "--steps-per-epoch", "10", "--seconds", "8"], [], "none", None, None),
    ("rank0-compute", "rank 0 computes 25 s (torch) while rank 1 waits in a barrier", ["--pattern",
     "rank0-compute", "--epochs", "1", "--steps-per-epoch", "5", "--seconds", "25"], [], "none", None, None),
    ("checkpoint", "rank 0 writes checkpoints 8 s while rank 1 waits in a barrier", ["--pattern", "checkpoint",
     "--epochs", "2", "--steps-per-epoch", "10", "--seconds", "8"], [], "none", None, None),
    ("rank0-poll", "rank 0 sleep-polls 20 s for a file while rank 1 waits in a barrier", ["--pattern", "rank0-poll",
     "--epochs", "1", "--steps-per-epoch", "5", "--seconds", "20"], [], "none", None, None),
    ("rank0-pycompute", "rank 0 preprocesses 40 s in pure Python while rank 1 waits in a barrier", ["--pattern",
     "rank0-pycompute", "--epochs", "1", "--steps-per-epoch", "5", "--seconds", "40"], [], "none", None, None),
    ("rank0-genexpr", "rank 0 counts with a generator expression for 45 s while rank 1 waits in a barrier",
     ["--pattern", "rank0-genexpr", "--epochs", "1", "--steps-per-epoch", "5", "--seconds", "45"], [], "none", None,
     None),
    ("lazy-first-step", "step 0 reported, then a 10 s first step (a warm-up)", ["--pattern", "warmup", "--epochs",
     "1", "--steps-per-epoch", "20", "--seconds", "10"], [], "none", None, None),
    ("coarse-reports", "a report every 25 steps of 0.2 s (every 5 s)", ["--pattern", "steps", "--epochs", "1",
     "--steps-per-epoch", "100", "--step-seconds", "0.2", "--report-every", "25"], [], "none", None, None),
    ("slow-exit", "rank 1 spends 8 s in an exit handler after rank 0 exited 0", ["--pattern", "slow-exit",
     "--epochs", "1", "--steps-per-epoch", "10", "--seconds", "8"], [], "none", None, None),
    # Hangs: found within seconds of the floor.
    ("deadlock-step0", "rank 1 hangs in step 0, before any report", ["--pattern", "hang", "--rank", "1", "--step",
     "0", "--report-after"], [], "hang", [1], (2 * FLOOR, 2 * FLOOR + 10)),
    ("deadlock-step2", "rank 1 hangs in time.sleep at step 2", ["--pattern", "hang", "--rank", "1", "--step", "2"],
     [], "hang", [1], (FLOOR, FLOOR + 10)),
    ("deadlock-step30", "rank 1 hangs in time.sleep at step 30", ["--pattern", "hang", "--rank", "1", "--step",
     "30"], [], "hang", [1], (FLOOR, FLOOR + 10)),
    ("lock-deadlock", "rank 1 acquires a lock it holds", ["--pattern", "lock", "--rank", "1", "--step", "3"], [],
     "hang", [1], (FLOOR, FLOOR + 10)),
    ("blocked-read", "rank 1 reads a pipe nobody writes", ["--pattern", "blocked-read", "--rank", "1", "--step",
     "3"], [], "hang", [1], (FLOOR, FLOOR + 10)),
    ("loader-hang", "rank 1's DataLoader worker blocks", ["--pattern", "loader-hang", "--rank", "1", "--step", "3"],
     [], "hang", [1], (FLOOR, FLOOR + 10)),
    # Spins: reported within a minute, left to the busy timeout.
    ("spin-one-bytecode", "rank 1 in `while True: pass`", ["--pattern", "spin", "--rank", "1", "--step", "3"],
     ["--hang-busy-timeout", str(SPIN_BUSY_TIMEOUT)], "spin", [1], (25, 60)),
    ("spin-flag", "rank 1 in `while not ready: pass`", ["--pattern", "spin-flag", "--rank", "1", "--step", "3"],
     ["--hang-busy-timeout", str(SPIN_BUSY_TIMEOUT)], "spin", [1], (25, 60)),
    ("spin-list", "rank 1 in `while True: for x in [1, 2, 3]: pass`", ["--pattern", "spin-list", "--rank", "1",
     "--step", "3"], ["--hang-busy-timeout", str(SPIN_BUSY_TIMEOUT)], "spin", [1], (25, 60)),
]


def busy_loops(count):
    return [subprocess.Popen(["/bin/sh", "-c", "while :; do :; done"]) for _ in range(count)]


def record(ddprun, case, load, out, work):
    name, what, args, flags, expect, culprits, window = case
    trace = out / f"{name}-{load}.jsonl"
    mark = work / f"{name}-{load}.mark"
    mark.unlink(missing_ok=True)
    command = [str(ddprun), "--nproc-per-node", "2", "--standalone", "--max-restarts", "0", "--hang-min-timeout",
               str(FLOOR), "--watch-record", str(trace), "--log-dir", str(work / "logs"), *flags, str(PATTERNS),
               *args, "--mark-file", str(mark), "--checkpoint-dir", str(work)]
    env = dict(os.environ, PYTHON_EXEC="/usr/bin/python3")
    loops = busy_loops(2 * os.cpu_count()) if load == "loaded" else []
    try:
        run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    finally:
        for loop in loops:
            loop.kill()
    header = json.loads(trace.read_text().splitlines()[0])
    row = {"trace": trace.name, "case": what, "load": load, "expect": expect}
    if expect != "none":
        row["culprits"] = culprits
        row["mark"] = round(float(mark.read_text()) - header["start_unix_ms"] / 1000, 3)
        row["within"] = list(window)
    saw = "spin" if "seems to spin" in run.stderr or "spins in one place" in run.stderr else None
    saw = "hang" if re.search(r"\] hang: ", run.stderr) and expect != "spin" else saw
    if (saw or "none") != expect:
        print(f"  {name} ({load}): expected {expect}, ddprun said {saw or 'nothing'} (rc {run.returncode})",
              file=sys.stderr)
    print(f"  {trace.name}: {trace.stat().st_size // 1024} KiB, rc {run.returncode}", file=sys.stderr)
    return row


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=str(ROOT / "build"))
    parser.add_argument("--only", default="")
    parser.add_argument("--load", default="both", choices=["quiet", "loaded", "both"])
    parser.add_argument("--out", default=str(ROOT / "tests/data/watch_traces"))
    args = parser.parse_args()
    ddprun = pathlib.Path(args.build) / "bin/ddprun"
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "manifest.json"
    rows = {row["trace"]: row for row in json.loads(manifest_path.read_text())} if manifest_path.exists() else {}
    only = set(filter(None, args.only.split(",")))
    loads = ["quiet", "loaded"] if args.load == "both" else [args.load]
    with tempfile.TemporaryDirectory() as work:
        for load in loads:
            for case in CASES:
                if only and case[0] not in only:
                    continue
                started = time.time()
                row = record(ddprun, case, load, out, pathlib.Path(work))
                rows[row["trace"]] = row
                print(f"{row['trace']}: {time.time() - started:.0f} s", file=sys.stderr)
                manifest_path.write_text(json.dumps(sorted(rows.values(), key=lambda r: r["trace"]), indent=1) + "\n")


if __name__ == "__main__":
    main()
