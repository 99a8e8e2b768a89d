# A torch 1.13 TCPStore client whose wait() times out gives up without telling the server (1.13 has no
# CANCEL_WAIT). It then uses the same client again. Usage: abandoned_wait_113.py PORT ROUNDS
# Prints "abandoned waits: OK" when every answer after every abandoned wait is right.
import datetime
import sys

import torch.distributed as dist

port, rounds = int(sys.argv[1]), int(sys.argv[2])
timeout = datetime.timedelta(seconds=10)
first = dist.TCPStore("127.0.0.1", port, 1, False, timeout=timeout)
other = dist.TCPStore("127.0.0.1", port, 1, False, timeout=timeout)
other.set("anchor", "here")
base = first.num_keys()  # anchor, and the clients' own init/ key
for i in range(rounds):
    key = "late-%d" % i
    try:
        first.wait([key], datetime.timedelta(milliseconds=200))
        sys.exit("round %d: wait for a missing key returned" % i)
    except RuntimeError:
        pass  # the wait timed out on the client; the server still holds its registration
    # The first client goes on with its work before the key appears: the server must drop the abandoned
    # wait, or the key's arrival below sends a wake-up byte that the client reads as a later reply.
    # (get() first: 1.13 leaves the wait's 200 ms as the socket timeout until a get() restores it.)
    assert first.get("anchor") == b"here", "round %d: get" % i
    assert first.add("counter", 1) == i + 1, "round %d: add" % i
    other.set(key, "value-%d" % i)
    assert first.get(key) == ("value-%d" % i).encode(), "round %d: get" % i
    assert first.add("counter", 0) == i + 1, "round %d: add after get" % i
    first.wait([key], datetime.timedelta(seconds=5))
    assert first.num_keys() == base + i + 2, "round %d: num_keys" % i  # counter and i + 1 late keys
print("abandoned waits: OK")
