#!/usr/bin/env python3
"""Python anchor for the C++ worker: standard torch DDP doing the same work (CPU/Gloo by default; CUDA
with NCCL or Gloo, and bf16 autocast, for tools/gpu-check.sh).

Run it under the same launcher as the worker, e.g.
    tools/launch-local.sh 2 /usr/bin/python3 tools/bench/python_ddp.py --dataset fashion-mnist --epochs 1
    ddprun --nproc-per-node 1 --standalone tools/bench/python_ddp.py --device cuda --backend nccl --model cnn

It mirrors build/bin/worker --model mlp|cnn: the whole IDX data set is read once (gzip + numpy, no
torchvision) into one normalised float tensor, moved once to the device (cuda:LOCAL_RANK, shared modulo
the GPU count as the worker's Gloo ranks do); the MLP 784->256->ReLU->10 or the worker's CNN is wrapped
in DistributedDataParallel (default bucket_cap_mb); SGD with momentum; --amp runs forward and loss under
torch.autocast(bf16); torch.utils.data.DistributedSampler (shuffle, seed + epoch, padded, rank r takes
r::W) picks each rank's indices; samples/s counts global samples (per-rank batch x world size) over the
training time of each epoch (the GPU synchronised at its end), excluding data loading and evaluation.
Test accuracy is over the whole test set (each rank a strided shard, sums all_reduce'd).

On rank 0 it prints one JSON line per epoch with samples_per_s, train_time_s, test_accuracy, world_size.

--cuda-graph (CUDA only) is the strongest Python anchor: after 11 eager warm-up steps on a side stream (what
PyTorch's notes on CUDA graphs ask of DDP, constructed there too) the whole step of a full batch is captured once
with torch.cuda.graph, DDP's allreduce included, and replayed; batches are gathered inside the graph from static
indices. An epoch's smaller last batch runs eagerly.

For the restart benchmark (tools/bench/recovery.sh): --checkpoint FILE --checkpoint-every N saves model,
optimizer and step on rank 0 every N steps and resumes from it; --fail-at-step N --fail-rank R kills rank R
(SIGKILL) at global step N of the first attempt, after printing {"type": "kill", "time": …}; rank 0 prints
{"type": "first_step", "attempt": …, "time": …} after the first step of each attempt (wall times, seconds).
"""
import argparse
import contextlib
import gzip
import json
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

NORMALISATION = {"mnist": (0.1307, 0.3081), "fashion-mnist": (0.2860, 0.3530)}
DEFAULT_DIRS = {"mnist": "data/mnist", "fashion-mnist": "/usr/share/datasets/fashion-mnist"}
EVAL_BATCH = 1000


def find_idx(data_dir, dataset, base):
    sub = "MNIST" if dataset == "mnist" else "FashionMNIST"
    for d in (data_dir, os.path.join(data_dir, sub, "raw")):
        for suffix in ("", ".gz"):
            path = os.path.join(d, base + suffix)
            if os.path.isfile(path):
                return path
    raise FileNotFoundError(f"data file {base}[.gz] not found in {data_dir} (nor in its torchvision raw/ folder)")


def read_idx(path, ndim):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    zero, dtype_code, dims = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype_code != 0x08 or dims != ndim:
        raise ValueError(f"{path}: not a uint8 IDX file with {ndim} dimensions")
    shape = struct.unpack(">" + "I" * dims, raw[4 : 4 + 4 * dims])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"{path}: expected {np.prod(shape)} values, found {data.size}")
    return data.reshape(shape)


def load_split(dataset, data_dir, prefix):
    images = read_idx(find_idx(data_dir, dataset, prefix + "-images-idx3-ubyte"), 3)
    labels = read_idx(find_idx(data_dir, dataset, prefix + "-labels-idx1-ubyte"), 1)
    mean, std = NORMALISATION[dataset]
    x = torch.from_numpy(images.copy()).to(torch.float32).div_(255.0).sub_(mean).div_(std).unsqueeze(1)
    y = torch.from_numpy(labels.copy()).to(torch.int64)
    return x.contiguous(), y.contiguous()


FALLBACK_TRAIN_SIZE = 9000


def load_data(dataset, data_dir):
    """Train and test tensors; without the training files, the worker's fallback split of the test set
    (first 9,000 images to train, last 1,000 to test: worker/mnist_data.hpp)."""
    test_x, test_y = load_split(dataset, data_dir, "t10k")
    try:
        train_x, train_y = load_split(dataset, data_dir, "train")
    except FileNotFoundError:
        n = FALLBACK_TRAIN_SIZE
        return test_x[:n].contiguous(), test_y[:n].contiguous(), test_x[n:].contiguous(), test_y[n:].contiguous()
    return train_x, train_y, test_x, test_y


class IndexOnly(torch.utils.data.Dataset):
    """A TensorDataset-sized stand-in: DistributedSampler only needs len()."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


class Cnn(nn.Module):
    """The worker's CNN (worker/models.cpp), same layers in the same order, so the same init."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5)
        self.conv2 = nn.Conv2d(16, 32, 5)
        self.fc1 = nn.Linear(32 * 4 * 4, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def make_model(name):
    if name == "cnn":
        return Cnn()
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


def autocast(device, amp, cache_enabled=True):
    if not amp:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, cache_enabled=cache_enabled)


def evaluate(model, x, y, rank, world, amp=False):
    model.eval()
    idx = torch.arange(rank, x.size(0), world, dtype=torch.int64, device=x.device)
    totals = torch.zeros(3, dtype=torch.float64, device=x.device)  # loss sum, correct, count
    with torch.no_grad(), autocast(x.device, amp):
        for begin in range(0, idx.numel(), EVAL_BATCH):
            b = idx[begin : begin + EVAL_BATCH]
            logits = model(x.index_select(0, b))
            labels = y.index_select(0, b)
            totals[0] += F.cross_entropy(logits, labels, reduction="sum").double()
            totals[1] += logits.argmax(1).eq(labels).sum().double()
            totals[2] += b.numel()
    dist.all_reduce(totals)
    model.train()
    n = max(totals[2].item(), 1.0)
    return totals[0].item() / n, totals[1].item() / n, int(totals[2].item())


class GraphedStep:
    """The whole training step of a full batch as one CUDA graph (PyTorch's notes on CUDA graphs: whole-network
    capture, and DDP: at least 11 eager iterations on a side stream before the capture)."""

    WARMUP = 11

    def __init__(self, ddp, opt, train_x, train_y, args, side):
        self.ddp, self.opt, self.train_x, self.train_y, self.args, self.side = ddp, opt, train_x, train_y, args, side
        device = train_x.device
        self.indices = torch.zeros(args.batch_size, dtype=torch.int64, device=device)
        self.images = torch.empty((args.batch_size,) + tuple(train_x.shape[1:]), dtype=train_x.dtype, device=device)
        self.labels = torch.empty(args.batch_size, dtype=train_y.dtype, device=device)
        self.warmups_left = self.WARMUP
        self.graph = None
        self.loss = None

    def _work(self):
        torch.index_select(self.train_x, 0, self.indices, out=self.images)
        torch.index_select(self.train_y, 0, self.indices, out=self.labels)
        # No autocast cache: casts cached inside a capture would be freed under the graph (PyTorch's notes).
        with autocast(self.images.device, self.args.amp, cache_enabled=False):
            loss = F.cross_entropy(self.ddp(self.images), self.labels)
        loss.backward()
        self.opt.step()
        return loss.detach().double()

    def step(self, batch_indices):
        """Runs one step on these sample indices; returns its loss (a device tensor)."""
        self.indices.copy_(batch_indices)
        current = torch.cuda.current_stream(self.indices.device)
        if self.warmups_left > 0:
            self.warmups_left -= 1
            self.side.wait_stream(current)
            with torch.cuda.stream(self.side):
                self.opt.zero_grad(set_to_none=True)
                loss = self._work()
            current.wait_stream(self.side)
            return loss
        if self.graph is None:
            self.graph = torch.cuda.CUDAGraph()
            self.opt.zero_grad(set_to_none=True)  # the graph's backward allocates .grad in its own pool
            self.side.wait_stream(current)
            with torch.cuda.graph(self.graph, stream=self.side):
                self.loss = self._work()
            current.wait_stream(self.side)
        self.graph.replay()
        return self.loss


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="fashion-mnist", choices=sorted(NORMALISATION))
    p.add_argument("--data-dir", default=None)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    p.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--amp", action="store_true", help="bf16 autocast for forward and loss")
    p.add_argument("--cuda-graph", action="store_true", help="capture the whole step as a CUDA graph (--device cuda)")
    p.add_argument("--checkpoint", default=None, help="file: save every --checkpoint-every steps, resume from it")
    p.add_argument("--checkpoint-every", type=int, default=10)
    p.add_argument("--fail-at-step", type=int, default=-1)
    p.add_argument("--fail-rank", type=int, default=-1)
    args = p.parse_args()
    if args.cuda_graph and args.device != "cuda":
        p.error("--cuda-graph needs --device cuda")
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    data_dir = args.data_dir or DEFAULT_DIRS[args.dataset]

    threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    if threads > 0:
        torch.set_num_threads(threads)
    device = torch.device("cpu")
    if args.device == "cuda":
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    dist.init_process_group(args.backend, init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()

    # The whole data set moves to the device once, as in the worker.
    train_x, train_y, test_x, test_y = (t.to(device) for t in load_data(args.dataset, data_dir))

    torch.manual_seed(args.seed)
    model = make_model(args.model).to(device)
    # default bucket_cap_mb (25); on CUDA DDP places the model's replica on its device
    side = torch.cuda.Stream(device) if args.cuda_graph else None
    with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
        ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=args.momentum)
    graph = GraphedStep(ddp, opt, train_x, train_y, args, side) if args.cuda_graph else None
    sampler = DistributedSampler(IndexOnly(train_x.size(0)), num_replicas=world, rank=rank, shuffle=True,
                                 seed=args.seed, drop_last=False)

    global_step = 0
    if args.checkpoint and os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        global_step = state["step"]
    steps_per_epoch = -(-len(sampler) // args.batch_size)
    first_step_done = False

    for epoch in range(global_step // steps_per_epoch, args.epochs):
        sampler.set_epoch(epoch)
        # Batches come from indexing the in-memory tensor with the sampler's indices, NOT from a
        # per-sample DataLoader (which would collate 64 tiny tensors per step in Python and be far
        # slower): this keeps the Python anchor a strong one, doing the same work as the C++ worker.
        indices = torch.tensor(list(iter(sampler)), dtype=torch.int64)
        if device.type == "cuda":
            indices = indices.pin_memory().to(device, non_blocking=True)
        ddp.train()
        start = time.monotonic()
        samples = 0
        steps = 0
        host_s = 0.0  # the host's time in the steps: issuing the work on CUDA
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)  # on the device: no sync per step
        for begin in range((global_step % steps_per_epoch) * args.batch_size, indices.numel(), args.batch_size):
            if rank == args.fail_rank and global_step == args.fail_at_step and attempt == 0:
                print(json.dumps({"type": "kill", "time": time.time(), "step": global_step}), flush=True)
                os.kill(os.getpid(), 9)
            step_start = time.perf_counter()
            b = indices[begin : begin + args.batch_size]
            if graph is not None and b.numel() == args.batch_size:
                loss_sum += graph.step(b)
            else:
                images = train_x.index_select(0, b)
                labels = train_y.index_select(0, b)
                opt.zero_grad()
                with autocast(device, args.amp):
                    loss = F.cross_entropy(ddp(images), labels)
                loss.backward()
                opt.step()
                loss_sum += loss.detach().double()
            host_s += time.perf_counter() - step_start
            samples += b.numel() * world
            steps += 1
            global_step += 1
            if rank == 0 and not first_step_done:
                print(json.dumps({"type": "first_step", "attempt": attempt, "time": time.time(),
                                  "step": global_step}), flush=True)
                first_step_done = True
            if rank == 0 and args.checkpoint and global_step % args.checkpoint_every == 0:
                tmp = args.checkpoint + ".tmp"
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": global_step}, tmp)
                os.replace(tmp, args.checkpoint)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        train_s = time.monotonic() - start
        eval_start = time.monotonic()
        test_loss, test_acc, test_n = evaluate(model, test_x, test_y, rank, world, args.amp)
        eval_s = time.monotonic() - eval_start
        if rank == 0:
            print(json.dumps({
                "type": "epoch", "impl": "python-ddp", "epoch": epoch + 1,
                "train_loss": loss_sum.item() / max(steps, 1), "test_loss": test_loss,
                "test_accuracy": test_acc, "test_samples": test_n,
                "samples_per_s": samples / max(train_s, 1e-9), "train_time_s": train_s,
                "host_ms_per_step": host_s * 1e3 / max(steps, 1),
                "eval_time_s": eval_s, "world_size": world, "torch": torch.__version__,
                "model": args.model, "backend": args.backend, "device": str(device), "amp": args.amp,
            }), flush=True)
    # Not dist.destroy_process_group(): with python3-torch 1.13 it sometimes hangs in
    # ~ProcessGroupGloo (a thread join) on rank 0. A barrier, then a hard exit, ends every rank cleanly.
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
