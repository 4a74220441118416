"""Run a function on N local worker processes joined by gloo over loopback (dryrun, tests).

Each worker calls `torch.set_num_threads(1)` first: with the default thread count a few
workers sharing two cores ran ~60× slower. Workers report progress through a shared
heartbeat (every module call, or `beat()`), so a stalled run stops after `timeout_s` of
silence instead of hanging. `fn(rank, world, *args)` may call `init_world`
(repeatedly, once per plan, with a fresh store file each time) to join a gloo group of any
size up to `world`; its return value comes back to the caller, rank by rank.
"""

from __future__ import annotations

import datetime
import os
import signal
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

__all__ = ["WorkerError", "beat", "init_world", "run_local"]


class WorkerError(RuntimeError):
    """A worker process failed (raised, was killed, or stalled); `str()` is one line naming
    the rank, `detail` the worker's traceback when there is one."""

    def __init__(self, message: str, rank: int | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.rank = rank
        self.detail = detail


# This worker's slot in the shared heartbeat array (set in each worker by _entry).
_BEAT: tuple[Any, int] | None = None


def beat() -> None:
    """Tell the parent this worker is making progress (cheap; call as often as you like)."""
    if _BEAT is not None:
        array, rank = _BEAT
        array[rank] = time.monotonic()


def _beat_hook(module: Any, args: Any) -> None:
    beat()


def init_world(store_dir: str, name: str, rank: int, world: int,
               timeout_s: float = 300.0) -> None:
    """Join (or re-join) a gloo process group of `world` ranks; rendezvous through a file."""
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("gloo", init_method=f"file://{Path(store_dir) / name}",
                            rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))


def _entry(rank: int, fn: Callable[..., Any], world: int, store_dir: str, args: tuple[Any, ...],
           results: Any, beats: Any) -> None:
    global _BEAT
    torch.set_num_threads(1)
    _BEAT = (beats, rank)
    beat()
    # Every module call counts as progress: a stage computing is not stalled.
    torch.nn.modules.module.register_module_forward_pre_hook(_beat_hook)
    # Loopback only: gloo otherwise resolves the host name to pick an interface.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    try:
        out = fn(rank, world, store_dir, *args)
        results.put((rank, "ok", out))
    except BaseException as exc:  # reported to the parent, which raises
        results.put((rank, "error", (f"{type(exc).__name__}: {exc}".splitlines()[0][:300],
                                     traceback.format_exc())))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _died(exc: BaseException) -> WorkerError:
    rank = getattr(exc, "error_index", None)
    signal_name = getattr(exc, "signal_name", None)
    if signal_name:
        hint = " (out of memory? the kernel's OOM killer sends SIGKILL)" \
            if signal_name == "SIGKILL" else ""
        return WorkerError(f"rank {rank} was killed by {signal_name}{hint}", rank)
    code = getattr(exc, "exit_code", None)
    return WorkerError(f"rank {rank} exited with code {code} before reporting", rank)


def run_local(fn: Callable[..., Any], world: int, *args: Any, start_method: str = "fork",
              timeout_s: float = 120.0) -> list[Any]:
    """fn(rank, world, store_dir, *args) on `world` processes; returns results by rank.

    A run where no worker makes progress (a module call, or `beat()`) for `timeout_s` is
    stopped: WorkerError naming the ranks that went quiet first. A worker that raises or
    dies stops the others at once (they would wait for it in a collective).
    `fork` starts a worker in milliseconds (spawn re-imports torch, ~1.5 s each); the parent
    must not have started a process group itself.
    """
    ctx = mp.get_context(start_method)
    results = ctx.SimpleQueue()
    beats = ctx.Array("d", [time.monotonic()] * world, lock=False)
    got: dict[int, tuple[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="hetplan-pg-") as store_dir:
        procs = mp.start_processes(_entry, args=(fn, world, store_dir, args, results, beats),
                                   nprocs=world, join=False, start_method=start_method)
        try:
            done = False
            while not done:
                try:
                    done = procs.join(timeout=0.2)
                except (mp.ProcessExitedException, mp.ProcessRaisedException) as exc:
                    # A worker killed by a signal (the OOM killer) never reports; its peers'
                    # "Connection closed" errors can arrive first: the death is the cause.
                    if getattr(exc, "signal_name", None):
                        raise _died(exc) from None
                    _drain(results, got)
                    _raise_reported(got)
                    raise _died(exc) from None
                _drain(results, got)
                _raise_killed(procs.processes)
                _raise_reported(got)
                _check_stall(beats, world, got, timeout_s)
        finally:
            for p in procs.processes:
                if p.is_alive():
                    p.terminate()
    _drain(results, got)
    missing = sorted(set(range(world)) - set(got))
    if missing:
        raise WorkerError(f"ranks {missing} returned nothing", missing[0])
    return [got[r][1] for r in range(world)]


def _drain(results: Any, got: dict[int, tuple[str, Any]]) -> None:
    while not results.empty():
        rank, status, out = results.get()
        got[rank] = (status, out)


def _raise_killed(processes: list[Any]) -> None:
    """Raise `_died` for a worker a signal has already killed (before its peers' echoes of
    its death, which `join` has not yet seen when they land in the same poll)."""
    for rank, p in enumerate(processes):
        code = p.exitcode  # polls without blocking; < 0: killed by signal -code
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            raise _died(mp.ProcessExitedException("", error_index=rank, error_pid=p.pid,
                                                  exit_code=code, signal_name=name))


def _raise_reported(got: dict[int, tuple[str, Any]]) -> None:
    # The first to report (`got` keeps arrival order) is the cause: a worker that fails takes
    # its peers down with it ("Connection closed by peer" in their collectives), and a
    # lower-numbered peer's echo can land in the same drain.
    failed = [r for r, (status, _) in got.items() if status == "error"]
    if failed:
        line, detail = got[failed[0]][1]
        raise WorkerError(f"rank {failed[0]} failed: {line}", failed[0], detail)


def _check_stall(beats: Any, world: int, got: dict[int, tuple[str, Any]],
                 timeout_s: float) -> None:
    now = time.monotonic()
    waiting = [r for r in range(world) if r not in got]
    if not waiting or now - max(beats[r] for r in waiting) < timeout_s:
        return
    first = min(beats[r] for r in waiting)
    quiet = [r for r in waiting if beats[r] - first < 1.0]
    raise WorkerError(f"no progress for {timeout_s:g} s: rank(s) {quiet[:8]} went quiet first "
                      f"({now - first:.0f} s ago); raise the timeout if the machine is just "
                      "slow", quiet[0])
