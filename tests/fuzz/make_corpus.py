#!/usr/bin/env python3
# Writes the fuzz seed corpus: valid request streams of both TCPStore dialects (byte layouts as in
# store/wire_protocol.hpp). Each file is one mode byte (bit 0: 1 = torch 2.x) and then the stream.
# Run from anywhere: python3 tests/fuzz/make_corpus.py
import os
import struct

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
os.makedirs(here, exist_ok=True)


def s(b):
    b = b.encode() if isinstance(b, str) else b
    return struct.pack("<Q", len(b)) + b


def keys(*ks):
    return struct.pack("<Q", len(ks)) + b"".join(s(k) for k in ks)


V113 = dict(SET=0, COMPARE_SET=1, GET=2, ADD=3, CHECK=4, WAIT=5, GETNUMKEYS=6, WATCH_KEY=7, DELETE_KEY=8)
V2 = dict(VALIDATE=0, SET=1, COMPARE_SET=2, GET=3, ADD=4, CHECK=5, WAIT=6, GETNUMKEYS=7, DELETE_KEY=8, APPEND=9,
          MULTI_GET=10, MULTI_SET=11, CANCEL_WAIT=12, PING=13, QUEUE_PUSH=14, QUEUE_POP=15, QUEUE_LEN=16,
          LIST_KEYS=17, BARRIER=18)


def frames(v):
    c = lambda name: bytes([v[name]])
    out = {
        "set": c("SET") + s("/k1") + s("v1"),
        "compare_set": c("COMPARE_SET") + s("/k1") + s("v1") + s("v2"),
        "get": c("WAIT") + keys("/k1") + c("GET") + s("/k1"),
        "add": c("ADD") + s("/cnt") + struct.pack("<q", 5),
        "check": c("CHECK") + keys("/k1", "/cnt"),
        "wait": c("WAIT") + keys("/a", "/b", "/c"),
        "num_keys": c("GETNUMKEYS"),
        "delete": c("DELETE_KEY") + s("/k1"),
    }
    if "WATCH_KEY" in v:
        out["watch"] = c("WATCH_KEY") + s("/k1")
    else:
        out.update({
            "validate_ping": c("VALIDATE") + struct.pack("<I", 0x3C85F7CE) + c("PING") + struct.pack("<I", 1234),
            "append": c("APPEND") + s("/k1") + s("+tail"),
            "multi_get": c("MULTI_GET") + keys("/k1", "/a", "/missing"),
            "multi_set": c("MULTI_SET") + struct.pack("<q", 2) + s("/a") + s("A") + s("/b") + s("B"),
            "cancel_wait": c("WAIT") + keys("/never") + c("CANCEL_WAIT"),
            "queue": c("QUEUE_PUSH") + s("q") + s("job") + c("QUEUE_LEN") + s("q") + c("QUEUE_POP") + s("q"),
            "list_keys": c("LIST_KEYS"),
            "barrier": c("BARRIER") + s("bar") + struct.pack("<q", 2),
        })
    return out


for mode, name, v in ((0, "v113", V113), (1, "v2", V2)):
    fs = frames(v)
    for frame_name, frame in fs.items():
        with open(os.path.join(here, f"{name}_{frame_name}"), "wb") as f:
            f.write(bytes([mode | 0x10]) + frame)
    with open(os.path.join(here, f"{name}_session"), "wb") as f:  # everything in one stream
        f.write(bytes([mode | 0x2A]) + b"".join(fs.values()))
