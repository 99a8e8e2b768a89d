#!/usr/bin/python3
"""Starts COUNT copies of a command at once, as a scheduler starts one agent per machine: posix_spawn (vfork and
exec, no shell), each with stdout and stderr to its own log file and stdin from /dev/null. In every argument and in
the log path, {i} becomes the node's number (1..COUNT) and {addr} its loopback address 127.0.<(i-1)/250>.<(i-1)%250+1>
(all of 127.0.0.0/8 routes to lo, so there is no cap at 250). Waits for all of them; prints one line:
"<ms from the first start to the last exit> <how many exited non-zero> <CPU ms of all of them>", the last being
the user + system time the kernel accounted to the commands and every descendant they waited for (wait4's
rusage: an agent, its orphan guard and its workers).

A bash loop (`cmd &` per node) was the benchmarks' spawner before: bash forks itself for every node, and at 1,024
nodes it competed for the two vCPUs with the agents it had already started (14% of all CPU; 14-16 s to start them).

Usage: spawn_nodes.py COUNT LOG_PATH_TEMPLATE COMMAND [ARG...]
"""
import os
import sys
import time


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    count, log_template, command = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    start = time.monotonic_ns()
    running = {}
    for i in range(1, count + 1):
        fill = {"{i}": str(i), "{addr}": f"127.0.{(i - 1) // 250}.{(i - 1) % 250 + 1}"}

        def filled(text):
            for key, value in fill.items():
                text = text.replace(key, value)
            return text

        argv = [filled(a) for a in command]
        actions = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                   (os.POSIX_SPAWN_OPEN, 1, filled(log_template), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
                   (os.POSIX_SPAWN_DUP2, 1, 2)]
        running[os.posix_spawnp(argv[0], argv, os.environ, file_actions=actions)] = i
    failed = 0
    cpu_seconds = 0.0
    while running:
        pid, status, usage = os.wait4(-1, 0)
        cpu_seconds += usage.ru_utime + usage.ru_stime
        if running.pop(pid, None) is not None and status != 0:
            failed += 1
    print((time.monotonic_ns() - start) // 1_000_000, failed, round(cpu_seconds * 1000), flush=True)


if __name__ == "__main__":
    main()
