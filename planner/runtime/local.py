"""Run a function on N local worker processes joined by gloo over loopback (dryrun, tests).

Each worker calls `torch.set_num_threads(1)` first: with the default thread count a few
workers sharing two cores ran ~60× slower. `fn(rank, world, *args)` may call `init_world`
(repeatedly, once per plan, with a fresh store file each time) to join a gloo group of any
size up to `world`; its return value comes back to the caller, rank by rank.
"""

from __future__ import annotations

import datetime
import faulthandler
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

__all__ = ["WorkerError", "init_world", "run_local"]


class WorkerError(RuntimeError):
    """A worker process failed; carries its rank and traceback."""


def init_world(store_dir: str, name: str, rank: int, world: int,
               timeout_s: float = 300.0) -> None:
    """Join (or re-join) a gloo process group of `world` ranks; rendezvous through a file."""
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("gloo", init_method=f"file://{Path(store_dir) / name}",
                            rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))


def _entry(rank: int, fn: Callable[..., Any], world: int, store_dir: str, args: tuple[Any, ...],
           results: Any, timeout_s: float) -> None:
    torch.set_num_threads(1)
    # A hung collective would otherwise hang the caller: dump where each worker stands, exit.
    faulthandler.dump_traceback_later(timeout_s, exit=True, file=sys.__stderr__ or sys.stderr)
    # Loopback only: gloo otherwise resolves the host name to pick an interface.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    try:
        out = fn(rank, world, store_dir, *args)
        results.put((rank, "ok", out))
    except BaseException as exc:  # reported to the parent, which raises
        results.put((rank, "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_local(fn: Callable[..., Any], world: int, *args: Any, start_method: str = "fork",
              timeout_s: float = 600.0) -> list[Any]:
    """fn(rank, world, store_dir, *args) on `world` processes; returns results by rank.

    `fork` starts a worker in milliseconds (spawn re-imports torch, ~1.5 s each); the parent
    must not have started a process group itself.
    """
    ctx = mp.get_context(start_method)
    results = ctx.SimpleQueue()
    got: dict[int, tuple[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="hetplan-pg-") as store_dir:
        procs = mp.start_processes(_entry, args=(fn, world, store_dir, args, results, timeout_s),
                                   nprocs=world, join=False, start_method=start_method)
        try:
            done = False
            while not done:
                try:
                    done = procs.join(timeout=0.2)
                except (mp.ProcessExitedException, mp.ProcessRaisedException) as exc:
                    raise WorkerError(f"a worker died: {exc}") from None
                while not results.empty():
                    rank, status, out = results.get()
                    got[rank] = (status, out)
                    if status == "error":
                        # The others would wait for it in a collective until their timeout.
                        raise WorkerError(f"rank {rank}: {out}")
        finally:
            for p in procs.processes:
                if p.is_alive():
                    p.terminate()
    while not results.empty():
        rank, status, out = results.get()
        got[rank] = (status, out)
    missing = sorted(set(range(world)) - set(got))
    if missing:
        raise WorkerError(f"ranks {missing} returned nothing")
    return [got[r][1] for r in range(world)]
