"""Does torch's NCCL flight recorder dump when only the store key asks? For the GPU check (tools/gpu-check.sh).

ddprun asks a hung rank for its dump in two ways: the rank's pipe and the key "exception_dump" at the root of the
workers' store, which every NCCL rank's heartbeat monitor polls (ProcessGroupNCCL.cpp, TORCH_NCCL_COORD_CHECK_MILSEC)
and which is the only way to reach ranks on other nodes. The flight-recorder step sees the pipe answer first; this
script checks the key alone, on one GPU: one rank, no pipe, a few allreduces, then the key set at the root of its
store; it prints how long the dump took to appear and exits 0, or 1 if none appeared within --wait seconds. It checks
torch's side alone (torch's own server and client); that ddprun's key is the one torch checks is the flight-recorder
step's (which requires torch's "Observed flight recorder dump signal") and Watch's process test's.
"""
import argparse
import os
import pathlib
import struct
import sys
import tempfile
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--wait", type=float, default=30.0)
    args = parser.parse_args()
    out = pathlib.Path(tempfile.mkdtemp(prefix="fr-key-"))
    # Set before torch reads them (ProcessGroupNCCL's constructor); no pipe, so only the key can ask.
    os.environ["TORCH_FR_DUMP_TEMP_FILE"] = str(out / "nccl_trace_rank_")
    os.environ["TORCH_NCCL_TRACE_BUFFER_SIZE"] = "2000"
    os.environ["TORCH_NCCL_DUMP_ON_TIMEOUT"] = "1"
    os.environ.pop("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", None)
    import torch
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, 1, True)
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=store, rank=0, world_size=1)
    t = torch.ones(1024, device="cuda")
    for _ in range(5):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    asked = time.monotonic()
    store.set("exception_dump", struct.pack("i", 0))  # the root of the store, as a torch rank sets it
    print(f"store key alone: key set at {time.strftime('%H:%M:%S')}.{int(time.time() * 1000) % 1000:03d}", flush=True)
    dump = out / "nccl_trace_rank_0"
    while time.monotonic() - asked < args.wait:
        if dump.exists() and dump.stat().st_size > 0:
            seen = time.monotonic() - asked
            time.sleep(0.5)  # let torch finish writing before the size is read
            print(f"store key alone: dump of {dump.stat().st_size} bytes in {dump}, first seen {seen:.1f} s after "
                  "the key was set", flush=True)
            os._exit(0)  # torch's monitor would abort the process after its dump; nothing else to wait for
        time.sleep(0.1)
    print(f"store key alone: no dump in {out} within {args.wait:.0f} s", flush=True)
    os._exit(1)


if __name__ == "__main__":
    sys.exit(main())
