"""Data-parallel training of a poolgrad-converted model with PyTorch's DistributedDataParallel (gloo, CPU).

    python examples/ddp_train.py                     # 2 processes, 3 steps, prints each rank's losses
    python examples/ddp_train.py --check             # also checks the result against one process

Each process converts its copy of the model with one line, ``poolgrad.torch.convert(model)``, and wraps it in
``DistributedDataParallel``; DDP's own engine averages the gradients across processes (poolgrad only computes
each process's pooling backward). With ``--check`` rank 0 saves the gradients of the first step and the
parameters after the last one, and the launching process repeats the same steps in a single process on the
whole batch: averaged gradients of equal shards equal the gradient of the whole batch's mean loss, so the two
must agree to float32 rounding. The exit status is 0 when they do.

The model has no batch norm (whose statistics would differ between shards and the whole batch) and no dropout.
"""
from __future__ import annotations

import argparse
import datetime
import os
import socket
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

# Run from a source checkout without installing (the repository root holds the ``poolgrad`` package).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import poolgrad.torch as pt  # noqa: E402


def make_model(seed: int = 0) -> nn.Module:
    """A small CNN with every pooling module poolgrad converts."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(3, stride=2, padding=1),                 # 32 -> 16
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
        nn.AvgPool2d(2),                                      # 16 -> 8
        nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
        nn.AdaptiveMaxPool2d((3, 3)),
        nn.Flatten(), nn.Linear(32 * 9, 10))


def make_data(batch: int, steps: int, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, 3, 32, 32, generator=g), torch.randint(0, 10, (batch,), generator=g))
            for _ in range(steps)]


def train(model: nn.Module, data: list, shard: tuple[int, int] = (0, 1)) -> tuple[list[float], dict]:
    """SGD steps on this process's shard of every batch; returns the losses and the first step's gradients."""
    rank, world = shard
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses, first_grads = [], {}
    for step, (x, y) in enumerate(data):
        x, y = x.chunk(world)[rank], y.chunk(world)[rank]
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()                                       # under DDP: gradients all-reduced (averaged) here
        if step == 0:
            first_grads = {n.removeprefix("module."): p.grad.clone() for n, p in model.named_parameters()}
        opt.step()
        losses.append(loss.item())
    return losses, first_grads


def worker(rank: int, world: int, port: int, args: argparse.Namespace, out_dir: str) -> None:
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout))
    try:
        model = DDP(pt.convert(make_model()))                 # the one line: convert, then wrap as usual
        losses, grads = train(model, make_data(args.batch, args.steps), (rank, world))
        print(f"rank {rank}: losses {[round(v, 4) for v in losses]}", flush=True)
        if rank == 0 and out_dir:
            params = {n.removeprefix("module."): p.detach() for n, p in model.named_parameters()}
            torch.save({"grads": grads, "params": params}, os.path.join(out_dir, "ddp.pt"))
        # Leave together: a rank that tears down its gloo group while the other still uses the connection can
        # abort in gloo's background thread ("terminate called without an active exception"; seen here once in
        # four runs without this barrier).
        dist.barrier()
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16, help="global batch, split evenly across processes")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds for any collective to complete")
    parser.add_argument("--check", action="store_true", help="compare with one process on the whole batch")
    args = parser.parse_args(argv)
    if args.batch % args.world_size:
        parser.error("--batch must be a multiple of --world-size")
    # Loopback only: gloo would otherwise pick the interface of the host name, which may not be reachable.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    with tempfile.TemporaryDirectory() as out_dir:
        mp.spawn(worker, args=(args.world_size, free_port(), args, out_dir if args.check else ""),
                 nprocs=args.world_size, join=True)
        if not args.check:
            return 0
        ddp = torch.load(os.path.join(out_dir, "ddp.pt"))
    torch.set_num_threads(args.threads)
    ok = True
    # The reference: one process on the whole batch, with the converted model and with PyTorch's own pooling.
    for label, single in (("converted", pt.convert(make_model())), ("original", make_model())):
        losses, grads = train(single, make_data(args.batch, args.steps))
        params = dict(single.named_parameters())
        same = all(torch.allclose(ddp["grads"][n], g, rtol=1e-5, atol=1e-7) and
                   torch.allclose(ddp["params"][n], params[n].detach(), rtol=1e-5, atol=1e-6)
                   for n, g in grads.items())
        worst = max((ddp["grads"][n] - g).abs().max().item() for n, g in grads.items())
        print(f"single process, {label} model: losses {[round(v, 4) for v in losses]}")
        print(f"{'match' if same else 'MISMATCH'}: DDP-averaged gradients vs one process ({label} model) on the "
              f"whole batch, largest difference {worst:.3g}; parameters after {args.steps} steps "
              f"{'equal' if same else 'differ'} to float32 rounding")
        ok &= same
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
