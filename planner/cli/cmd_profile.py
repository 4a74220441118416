"""`hetplan profile MODEL --out FILE`: time the model's layers on this machine's GPU.

    hetplan profile llama3-8b --micro-batches 1,2,4 --out h100-llama3-8b.csv
    hetplan plan llama3-8b cluster.yaml --profiles h100-llama3-8b.csv

Writes a profile file (docs/cost-model.md §6) with the embedding, one block and the head at
each micro-batch size (TP 1), and prints measured against analytic milliseconds per layer.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from planner.cli.main import app
from planner.cli.options import SeqLenOption, parse_seq_len
from planner.cli.output import console, print_json
from planner.errors import HetplanError
from planner.outfile import check_output

if TYPE_CHECKING:
    import torch

    from cost_models.gpu import GpuSpec

__all__ = ["profile"]


def _micro_batches(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise HetplanError(f"--micro-batches {text!r}: expected positive integers such as 1,2,4")
    return values


def _device_and_gpu(device_arg: str | None,
                    gpu_arg: str | None) -> tuple[torch.device, GpuSpec]:
    import torch

    from cost_models.catalog import get_gpu, gpu_for_device

    name = device_arg or ("cuda" if torch.cuda.is_available() else None)
    if name is None:
        raise HetplanError("no CUDA device here: profile on the GPU machine, or pass "
                           "--device cpu --gpu NAME to exercise the command on the CPU")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise HetplanError(f"--device {name!r}: {exc}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise HetplanError(f"--device {name}: torch sees no CUDA device on this machine")
    if gpu_arg is not None:
        try:
            return device, get_gpu(gpu_arg)
        except LookupError as exc:
            raise HetplanError(f"--gpu: {exc}") from None
    if device.type != "cuda":
        raise HetplanError(f"--device {device}: say which catalog GPU the rows are for with "
                           "--gpu NAME (see `hetplan gpus`)")
    reported = torch.cuda.get_device_name(device)
    memory_gib = torch.cuda.get_device_properties(device).total_memory / 2**30
    try:
        gpu = gpu_for_device(reported, memory_gib)
    except LookupError as exc:
        raise HetplanError(str(exc)) from None
    return device, gpu


@app.command()
def profile(
    model: Annotated[str, typer.Argument(help="Model (zoo name / YAML / config.json).")],
    out: Annotated[Path | None, typer.Option("--out", help="Profile CSV to write (use it "
                                             "with --profiles).")] = None,
    micro_batches: Annotated[str, typer.Option("--micro-batches", help="Sizes to time, "
                                               "e.g. 1,2,4.")] = "1,2,4",
    precision: Annotated[str | None, typer.Option("--precision", help="bf16 | fp16 | fp32 "
                                                  "(default: the model spec's).")] = None,
    device: Annotated[str | None, typer.Option("--device", help="torch device (default: "
                                               "cuda).")] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="Catalog GPU the rows are for "
                                            "(default: the CUDA device's name).")] = None,
    warmup: Annotated[int, typer.Option("--warmup", min=0, max=10_000,
        help="Untimed calls per measurement.")
                      ] = 3,
    repeats: Annotated[int, typer.Option("--repeats", min=1, max=10_000,
        help="Timed calls; the median is "
                                         "kept.")] = 10,
    seq_len: SeqLenOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Time the embedding, one block and the head at each micro-batch size on this GPU.

    Rows are for the model's sequence length (--seq-len to time another): plans at that
    length use them.
    """
    from planner.graph.load_spec import load_model_spec
    from planner.profiler import profile_layers, profile_rows, write_profile_csv

    if warmup < 0 or repeats < 1:
        raise HetplanError(f"--warmup {warmup} / --repeats {repeats}: need warmup >= 0 and "
                           "repeats >= 1")
    if out is not None:
        check_output(out, "--out")  # before the timing, not after it
    spec = load_model_spec(model, seq_len=parse_seq_len(seq_len))
    sizes = _micro_batches(micro_batches)
    dev, gpu_spec = _device_and_gpu(device, gpu)
    prec = precision or spec.training.precision
    if dev.type != "cuda" and not json_out:
        console.print(f"[yellow]note:[/yellow] timing on {dev}: the rows are labelled "
                      f"{gpu_spec.name} but measure this machine's {dev}")
    try:
        timings = profile_layers(spec, device=dev, gpu=gpu_spec, micro_batches=sizes,
                                 precision=prec, warmup=warmup, repeats=repeats,
                                 progress=None if json_out else
                                 lambda msg: console.print(f"timing {msg} ..."))
    except RuntimeError as exc:  # out of device memory, an unsupported dtype on the device
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise HetplanError(f"profiling {spec.name} on {dev}: {first}") from None
    source = f"hetplan profile on {dev} ({gpu_spec.name})"
    rows = profile_rows(timings, spec, gpu_spec, prec, source)
    if out is not None:
        write_profile_csv(rows, out)
    if json_out:
        print_json({"gpu": gpu_spec.name, "model": spec.name, "precision": prec,
                    "seq_len": spec.seq_len,
                    "out": None if out is None else str(out),
                    "layers": [{"kind": t.kind, "micro_batch": t.micro_batch,
                                "fwd_ms": round(t.fwd_ms, 4), "bwd_ms": round(t.bwd_ms, 4),
                                "update_ms": round(t.update_ms, 4),
                                "analytic_fwd_ms": round(t.analytic_fwd_ms, 4),
                                "analytic_bwd_ms": round(t.analytic_bwd_ms, 4),
                                "analytic_update_ms": round(t.analytic_update_ms, 4)}
                               for t in timings]})
        return
    t = Table(title=f"{spec.name} on {gpu_spec.name}, {prec}, TP 1, seq_len {spec.seq_len:,}: "
              "measured vs analytic ms")
    for col in ("layer", "micro-batch", "fwd", "analytic", "bwd", "analytic", "update",
                "analytic"):
        t.add_column(col, justify="left" if col == "layer" else "right")
    for x in timings:
        t.add_row(x.kind, str(x.micro_batch), f"{x.fwd_ms:.3f}", f"{x.analytic_fwd_ms:.3f}",
                  f"{x.bwd_ms:.3f}", f"{x.analytic_bwd_ms:.3f}", f"{x.update_ms:.3f}",
                  f"{x.analytic_update_ms:.3f}")
    console.print(t)
    if out is not None:
        console.print(f"wrote {len(rows)} profile rows to {out}; use them with "
                      f"--profiles {out}")
