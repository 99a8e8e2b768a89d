"""Conformance of a TCPStore server with PyTorch's stock Python TCPStore client.

Usage: python3 tcpstore_client_conformance.py PORT     (the server must listen on 127.0.0.1:PORT, empty)

Runs every operation the installed torch's client offers against the server and asserts PyTorch's
semantics: set/get/add/compare_set/num_keys/delete_key/wait, wait timeouts, a get woken by another client,
8 concurrent adders; and where the client has them (torch 2.x): check, append, multi_get/multi_set,
queue_push/queue_pop/queue_len, list_keys. Prints one line per group and "TCPStore client: OK" at the end;
any failure is an AssertionError with the operation. Used by tests/store_interop_test.cpp (python3-torch
1.13) and tools/gpu-check.sh (the GPU machine's torch 2.x) against ddprun's store.
"""
import datetime
import sys
import threading
import time

import torch
import torch.distributed as dist

port = int(sys.argv[1])
TEN_S = datetime.timedelta(seconds=10)


def client():
    return dist.TCPStore("127.0.0.1", port, None, False, timeout=TEN_S)


def check_basics(s):
    s.set("k1", "v1")
    assert s.get("k1") == b"v1"
    assert s.add("cnt", 5) == 5 and s.add("cnt", 2) == 7 and s.get("cnt") == b"7"
    assert s.compare_set("k1", "v1", "v2") == b"v2"
    assert s.compare_set("k1", "nope", "v3") == b"v2"
    assert s.compare_set("fresh", "", "f") == b"f"
    assert s.num_keys() == 3, s.num_keys()
    assert s.delete_key("k1") and not s.delete_key("k1")
    s.wait(["cnt"])
    print("basics: OK", flush=True)


def check_timeouts(s):
    s.set_timeout(datetime.timedelta(milliseconds=300))
    start = time.time()
    try:
        s.wait(["never"])
        raise AssertionError("wait did not time out")
    except RuntimeError as e:  # 2.x raises DistStoreError, a RuntimeError ("wait timeout after 300ms, …")
        assert "timeout" in str(e).lower(), e
    assert 0.25 < time.time() - start < 5
    s.set_timeout(TEN_S)
    other = client()
    threading.Timer(0.2, lambda: s.set("late", "x")).start()
    assert other.get("late") == b"x"
    print("timeouts and waking waits: OK", flush=True)


def check_concurrent_adds():
    def adder():
        c = client()
        for _ in range(50):
            c.add("total", 1)

    threads = [threading.Thread(target=adder) for _ in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert client().add("total", 0) == 400
    print("8 concurrent adders: OK", flush=True)


def check_2x_operations(s):
    done = []
    if hasattr(s, "check"):
        assert s.check(["cnt"]) and not s.check(["cnt", "absent"])
        done.append("check")
    if hasattr(s, "append"):
        s.append("log", "a")
        s.append("log", "bc")
        assert s.get("log") == b"abc", s.get("log")
        done.append("append")
    if hasattr(s, "multi_set") and hasattr(s, "multi_get"):
        s.multi_set(["m1", "m2"], ["x", "yy"])
        assert s.multi_get(["m1", "m2"]) == [b"x", b"yy"]
        done.append("multi_get/multi_set")
    if hasattr(s, "queue_push") and hasattr(s, "queue_pop"):
        s.queue_push("q", "first")
        s.queue_push("q", "second")
        if hasattr(s, "queue_len"):
            assert s.queue_len("q") == 2, s.queue_len("q")
        assert s.queue_pop("q") == b"first"
        assert s.queue_pop("q") == b"second"
        done.append("queue_push/queue_pop/queue_len")
    if hasattr(s, "list_keys"):
        keys = set(s.list_keys())
        assert {"cnt", "log", "m1", "m2"} <= keys, keys
        done.append("list_keys")
    print("torch %s extra operations: %s" % (torch.__version__, ", ".join(done) or "none in this client"),
          flush=True)


s = client()
check_basics(s)
check_timeouts(s)
check_concurrent_adds()
check_2x_operations(s)
print("TCPStore client: OK", flush=True)
