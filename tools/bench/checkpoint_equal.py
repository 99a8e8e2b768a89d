#!/usr/bin/python3
"""Whether two checkpoints of the C++ worker hold bit-identical training state, read with stock PyTorch.

Usage: tools/bench/checkpoint_equal.py A.pt B.pt
Prints "identical (N tensors: model, meta, rng)" and exits 0, or names the first tensor that differs (with the
largest absolute difference) and exits 1; exits 2 when a file cannot be read.

The worker's checkpoint (worker/checkpoint.cpp) is a LibTorch OutputArchive, i.e. a TorchScript zip that
torch.jit.load reads: an outer archive whose uint8 tensor "payload" is the inner archive with "meta/*",
"rng/cpu", "model/*" and the optimizer. The files' bytes differ between equal runs: LibTorch keys the optimizer's
state by tensor address. So the comparison is of the tensors, and leaves the optimizer out: its momentum is a
function of the same gradients as the parameters.
"""
import io
import sys

import torch


def tensors(path):
    outer = torch.jit.load(path, map_location="cpu")
    stored = dict(outer.named_buffers())
    stored.update(dict(outer.named_parameters()))
    payload = stored["payload"].detach().numpy().tobytes()
    inner = torch.jit.load(io.BytesIO(payload), map_location="cpu")
    found = dict(inner.named_buffers())
    found.update(dict(inner.named_parameters()))
    return {k: v for k, v in found.items() if k.split("/")[0] in ("model", "meta", "rng")}


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    try:
        a, b = tensors(argv[1]), tensors(argv[2])
    except Exception as e:  # noqa: BLE001 - one clear line for any unreadable file
        print(f"cannot read a checkpoint: {e}", file=sys.stderr)
        return 2
    if sorted(a) != sorted(b):
        print(f"differ: tensor names {sorted(set(a) ^ set(b))}")
        return 1
    for name in sorted(a):
        if not torch.equal(a[name], b[name]):
            diff = (a[name].double() - b[name].double()).abs().max().item()
            print(f"differ: {name} (max |a - b| = {diff:.3g})")
            return 1
    print(f"identical ({len(a)} tensors: model, meta, rng)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
