"""Checkpoints that survive a change of plan: torch.distributed.checkpoint (DCP) by global name.

Every parameter and its Adam moments are saved under the parameter's global name in the
model's chain (`embed.weight`, `layers.3.attn.q.weight`, `head.norm.weight`) with its
unsharded shape; a TP shard is saved as a DTensor, so DCP records its offsets in the whole
tensor. Only the first holder group of each tensor writes it (each TP rank its shard, or its
first rank a tensor it keeps whole), so the saved chunks never overlap. Loading asks each
rank for the tensors it holds in the layout it holds them, and DCP reads the overlapping
chunks: any other TP, PP, DP or ZeRO-1 layout of the same model loads the same checkpoint.
ZeRO-1 state (flat slices of a shard or of the whole tensor, `zero.py`) is all-gathered
over its slice group into the parameter's layout to save, and cut back into slices on load;
the fp32 master slices equal the gathered weights, so they are rebuilt from them.

A checkpoint is a folder `step-NNNNNNNN/` under the folder the user names, holding DCP's
files, `rng.pt` (rank 0's torch RNG state) and `hetplan-checkpoint.json` (written last: model,
step, samples consumed, the plan it came from, optimizer step, loss scale, lr schedule);
`latest` names the newest complete one. Every rank must see the folder (a shared filesystem).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.tensor import DTensor, distribute_tensor

from planner.errors import HetplanError
from planner.outfile import write_output
from planner.runtime.grads import local_tensor

__all__ = ["META", "SCHEMA", "check_model", "find_checkpoint", "has_checkpoint",
           "load_checkpoint", "read_meta", "runner_optimizers", "save_checkpoint"]

META = "hetplan-checkpoint.json"
SCHEMA = "hetplan.checkpoint/v1"


def _sharded(t: torch.Tensor) -> bool:
    return isinstance(t, DTensor) and any(pl.is_shard() for pl in t.placements)


def _canon(t: torch.Tensor) -> torch.Tensor:
    """What DCP sees: a TP shard as a DTensor (offsets in the whole), else the whole tensor."""
    return t if _sharded(t) else local_tensor(t)


def _moments(runner: Any) -> tuple[str, ...]:
    return ("exp_avg", "exp_avg_sq") if runner.optimizer_name in ("adam", "adamw") else ()


def runner_optimizers(runner: Any) -> list[torch.optim.Optimizer]:
    """Every optimizer of a Runner: the plain one (whole parameters, or FSDP2 shards) and
    the ZeRO-1 slices' (either may be absent; they may be one object)."""
    found = [runner.optimizer, runner.zero.optimizer if runner.zero is not None else None]
    out: list[torch.optim.Optimizer] = []
    for opt in found:
        if opt is not None and all(opt is not o for o in out):
            out.append(opt)
    return out


def _zero_keys(runner: Any) -> dict[Any, Any]:
    return {s.key: s for s in runner.zero.slices} if runner.zero is not None else {}


def _names(runner: Any) -> dict[Any, str]:
    """Parameter key → global name in the chain [embed, layers.0 .. layers.L-1, head]."""
    last = runner.plan.pipelines[0].stages[-1].layers[1] - 1
    out = {}
    for (e, name), _ in runner.params:
        where = "embed" if e == 0 else "head" if e == last else f"layers.{e - 1}"
        out[(e, name)] = f"{where}.{name}"
    return out


def _writes(runner: Any, key: Any, p: torch.Tensor) -> bool:
    if key in getattr(runner, "fsdp_keys", ()):
        return True  # an FSDP2 DTensor over every replica: each holds its own shard
    first = runner.rules[key].holders[0]
    return runner.rank in first and (_sharded(p) or runner.rank == first[0])


def _dense_state(runner: Any, steps: int) -> None:
    """Adam creates its state on the first step: create it now (zeros, step `steps`)."""
    names = _moments(runner)
    for opt in runner_optimizers(runner):
        for group in opt.param_groups:
            for p in group["params"]:
                state = opt.state[p]
                if names and not state:
                    state["step"] = torch.tensor(float(steps))
                    for n in names:
                        state[n] = torch.zeros_like(p, memory_format=torch.preserve_format)


def _optimizer_steps(runner: Any) -> int:
    for opt in runner_optimizers(runner):
        for state in opt.state.values():
            if "step" in state:
                return int(state["step"])
    return 0


def _zero_whole(runner: Any, name: str) -> dict[Any, torch.Tensor]:
    """Each ZeRO-1 slice's moment `name` gathered over its slice group into the parameter's
    layout (a collective: groups in the order the optimizer step gathers them)."""
    zero = runner.zero
    by_group: dict[tuple[int, ...], list[int]] = {}
    for i, s in enumerate(zero.slices):
        by_group.setdefault(s.group, []).append(i)
    out: dict[Any, torch.Tensor] = {}
    for group in sorted(by_group, key=lambda g: sorted(g)):
        idx = by_group[group]
        mine = torch.cat([zero.optimizer.state[zero.masters[i]][name].reshape(-1) for i in idx])
        sizes = [sum(b - a for a, b in (zero.slices[i].ranges[j] for i in idx))
                 for j in range(len(group))]
        width = max(sizes)
        padded = torch.zeros(width, dtype=mine.dtype, device=mine.device)
        padded[:mine.numel()] = mine
        parts = [padded]
        if len(group) > 1:
            parts = [torch.empty_like(padded) for _ in group]
            dist.all_gather(parts, padded, group=zero.groups[tuple(sorted(group))])
        offsets = [0] * len(group)
        for i in idx:
            s = zero.slices[i]
            p = zero.params[s.key]
            whole = torch.empty(p.numel() if s.full else local_tensor(p).numel(),
                                dtype=mine.dtype, device=mine.device)
            for j, (a, b) in enumerate(s.ranges):
                whole[a:b] = parts[j][offsets[j]:offsets[j] + b - a]
                offsets[j] += b - a
            if not isinstance(p, DTensor):
                out[s.key] = whole.view(p.shape)
            elif s.full:
                out[s.key] = distribute_tensor(whole.view(p.shape), p.device_mesh, p.placements,
                                               src_data_rank=None)
            else:
                out[s.key] = DTensor.from_local(whole.view(local_tensor(p).shape), p.device_mesh,
                                                p.placements, run_check=False,
                                                shape=p.shape, stride=p.stride())
    return out


def save_checkpoint(runner: Any, root: str | Path, *, step: int, samples: int,
                    meta: dict[str, Any]) -> Path:
    """Save this rank's share (call on every rank); returns the step folder. `meta` (model,
    plan, optimizer, history, ...) goes into the metadata JSON with step and samples."""
    folder = Path(root) / f"step-{step:08d}"
    steps = _optimizer_steps(runner)
    _dense_state(runner, steps)
    names = _names(runner)
    moments = _moments(runner)
    zero_state = {n: _zero_whole(runner, n) for n in moments} if runner.zero is not None else {}
    sliced = _zero_keys(runner)
    sd: dict[str, Any] = {}
    for key, p in runner.params:
        if not _writes(runner, key, p):
            continue
        sd[f"model.{names[key]}"] = _canon(p.detach())
        for n in moments:
            t = zero_state[n][key] if key in sliced else runner.optimizer.state[p][n]
            sd[f"optim.{names[key]}.{n}"] = _canon(t)
    if dist.get_rank() == 0:
        # Saving over an older save of this step: unmark it first (ours and DCP's), so a
        # save cut short never leaves old metadata beside new files.
        for name in (META, ".metadata"):
            (folder / name).unlink(missing_ok=True)
    dist.barrier()
    try:
        dcp.save(sd, storage_writer=dcp.FileSystemWriter(str(folder), overwrite=True))
    except (Exception, CheckpointException) as exc:  # DCP's is a BaseException
        raise HetplanError(f"--save-checkpoint {root}: cannot write {folder.name} "
                           f"({_first_line(exc)})") from None
    if dist.get_rank() == 0:
        torch.save({"cpu": torch.get_rng_state(),
                    "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None},
                   folder / "rng.pt")
        scaler = runner.scaler
        info = {"schema": SCHEMA, "step": step, "samples": samples, "optimizer_steps": steps,
                "loss_scale": None if scaler is None else {"scale": scaler.scale,
                                                           "clean": scaler._clean},
                **meta}
        write_output(folder / META, json.dumps(info, indent=1, sort_keys=True) + "\n")
        write_output(Path(root) / "latest", folder.name + "\n")
    dist.barrier()
    return folder


def _first_line(exc: BaseException) -> str:
    """One line for a DCP failure: the first rank's own error, not DCP's wrapper."""
    if isinstance(exc, CheckpointException) and exc.failures:
        exc = next(iter(exc.failures.values()))
        exc = exc[0] if isinstance(exc, tuple) else getattr(exc, "exc", exc)  # (error, frames)
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__


def has_checkpoint(path: str | Path) -> bool:
    """Whether `path` is, or holds (`latest`), a complete checkpoint."""
    try:
        find_checkpoint(path)
    except HetplanError:
        return False
    return True


def find_checkpoint(path: str | Path) -> Path:
    """The step folder `path` names: itself, or the newest under it (`latest`)."""
    p = Path(path)
    if (p / META).is_file():
        return p
    latest = p / "latest"
    if latest.is_file():
        folder = p / latest.read_text().strip()
        if (folder / META).is_file():
            return folder
    raise HetplanError(f"--resume {p}: no hetplan checkpoint there (no {META}, no `latest`); "
                       "name the folder given to --save-checkpoint")


def read_meta(path: str | Path) -> dict[str, Any]:
    folder = find_checkpoint(path)
    try:
        meta = json.loads((folder / META).read_text())
    except (OSError, ValueError) as exc:
        raise HetplanError(f"--resume {folder / META}: unreadable ({exc})") from None
    if meta.get("schema") != SCHEMA:
        raise HetplanError(f"--resume {folder / META}: schema {meta.get('schema')!r}, expected "
                           f"{SCHEMA}")
    meta["folder"] = str(folder)
    return meta


def _describe(model: dict[str, Any] | None) -> str:
    if not model:
        return "no model"
    dims = [f"{model[k]} {label}" for k, label in (("num_layers", "layers"),
            ("hidden_size", "hidden"), ("vocab_size", "vocab")) if k in model]
    return f"{model.get('name', '?')} ({', '.join(dims)})" if dims else str(model.get("name"))


def check_model(meta: dict[str, Any], model: dict[str, Any] | None) -> None:
    """One line when the checkpoint holds another model than the plan trains."""
    if meta.get("model") != model:
        raise HetplanError(f"--resume {meta['folder']}: the checkpoint holds model "
                           f"{_describe(meta.get('model'))}, this plan trains "
                           f"{_describe(model)}; resume with a plan of the same model")


def _like(t: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """`t` in `p`'s type: a DTensor that every TP rank keeps whole gets its DTensor back."""
    if isinstance(p, DTensor) and not isinstance(t, DTensor):
        return DTensor.from_local(t, p.device_mesh, p.placements, run_check=False)
    return t


def load_checkpoint(runner: Any, meta: dict[str, Any]) -> None:
    """Load the checkpoint `meta` describes into this rank's parameters, optimizer state, loss
    scale and RNG (call on every rank, after `check_model`)."""
    folder = Path(meta["folder"])
    steps = int(meta["optimizer_steps"])
    opt = runner.optimizer
    zero_opt = runner.zero.optimizer if runner.zero is not None else None
    if meta.get("optimizer") is not None and meta["optimizer"] != runner.optimizer_name:
        raise HetplanError(f"--resume {folder}: saved with optimizer {meta['optimizer']}, this "
                           f"run uses {runner.optimizer_name}; pass --optimizer "
                           f"{meta['optimizer']}")
    moments = _moments(runner)
    names = _names(runner)
    slices = _zero_keys(runner)
    dest: dict[str, Any] = {}
    for key, p in runner.params:
        s = slices.get(key)
        like = torch.empty(p.shape, dtype=p.dtype, device=local_tensor(p).device) \
            if s is not None and s.full else _canon(p.detach())
        dest[f"model.{names[key]}"] = like
        for n in moments:
            dest[f"optim.{names[key]}.{n}"] = torch.zeros_like(like)
    try:
        dcp.load(dest, checkpoint_id=str(folder))
    except (Exception, CheckpointException) as exc:  # missing or truncated files
        raise HetplanError(f"--resume {folder}: cannot load it ({_first_line(exc)})") from None
    with torch.no_grad():
        for key, p in runner.params:
            s = slices.get(key)
            if s is None:
                if moments:
                    opt.state[p] = {"step": torch.tensor(float(steps)), **{
                        n: _like(dest[f"optim.{names[key]}.{n}"], p) for n in moments}}
                continue
            whole = dest[f"model.{names[key]}"]
            if s.full and isinstance(p, DTensor):
                local_tensor(p).copy_(distribute_tensor(whole, p.device_mesh, p.placements,
                                                        src_data_rank=None).to_local())
            elif s.full:
                p.copy_(whole)
            a, b = s.ranges[s.group.index(runner.rank)]
            m = runner.zero.masters[runner.zero.slices.index(s)]
            m.copy_(local_tensor(whole).reshape(-1)[a:b])
            if moments:
                zero_opt.state[m] = {"step": torch.tensor(float(steps)), **{
                    n: local_tensor(dest[f"optim.{names[key]}.{n}"]).reshape(-1)[a:b].clone()
                    for n in moments}}
    scale = meta.get("loss_scale")
    if runner.scaler is not None and scale is not None:
        runner.scaler.scale, runner.scaler._clean = scale["scale"], scale["clean"]
    rng = torch.load(folder / "rng.pt", weights_only=False)
    torch.set_rng_state(rng["cpu"])
    if rng.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(rng["cuda"])
