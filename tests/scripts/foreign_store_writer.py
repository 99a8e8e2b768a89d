"""A client that writes to a store as another user would (tests and tools/bench run it through setpriv).

Speaks torch 1.13's wire format (TCPStore.cpp at v1.13.1: SET 0, GET 2), so it needs no torch. Each try is a fresh
connection that SETs KEY and then GETs it: a store that refuses the write closes the connection, so the GET gets
nothing back. Prints one line per try, "refused" or "written", and with --read, "read <value>" of that key.

foreign_store_writer.py PORT KEY [--value V] [--count N (0: until killed)] [--per-second R] [--read KEY]
"""
import argparse
import socket
import struct
import time


def string(b):
    return struct.pack('<Q', len(b)) + b


def ask(port, request):
    """Sends `request` over a fresh connection; what came back before the store closed it or 5 s passed."""
    with socket.create_connection(('127.0.0.1', port), timeout=5) as c:
        c.sendall(request)
        reply = b''
        try:
            while len(reply) < 8 or len(reply) < 8 + struct.unpack('<Q', reply[:8])[0]:
                piece = c.recv(65536)
                if not piece:
                    break
                reply += piece
        except (ConnectionResetError, socket.timeout):
            pass
        return reply


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('port', type=int)
    parser.add_argument('key')
    parser.add_argument('--value', default='5')
    parser.add_argument('--count', type=int, default=1)
    parser.add_argument('--per-second', type=float, default=0)
    parser.add_argument('--read')
    args = parser.parse_args()
    key = args.key.encode()
    tries = 0
    while args.count == 0 or tries < args.count:
        started = time.monotonic()
        reply = ask(args.port, bytes([0]) + string(key) + string(args.value.encode()) + bytes([2]) + string(key))
        print('refused' if reply == b'' else 'written', flush=True)
        tries += 1
        if args.per_second > 0:
            time.sleep(max(0.0, 1 / args.per_second - (time.monotonic() - started)))
    if args.read is not None:
        print('read', ask(args.port, bytes([2]) + string(args.read.encode()))[8:].decode(), flush=True)


main()
