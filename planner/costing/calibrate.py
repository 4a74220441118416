"""Refit a cluster's few constants from its own measured runs (`hetplan calibrate`).

Input: RUNS.csv with columns `plan` (a plan JSON path, relative to the CSV) and
`measured_iteration_s`, or JSON lines with the same keys: the runtime's run log
(`python -m planner.runtime PLAN.json --run-log FILE.jsonl`, warm-up step skipped).
Fitted: one achievable-efficiency scale per GPU type the plans use (it multiplies that
type's tensor / fp8 / TF32 / CUDA-core efficiencies, `cost_models.efficiency.constants_for`,
each capped at 1) - never a constant per row. The fit minimises the squared log error of the
iteration times, one GPU type at a time (golden-section search on log scale, a few sweeps).
What the scales cannot absorb (two rows of one plan with different times, a run paced by
something the plan does not contain) stays as the residual, which `hetplan calibrate` prints.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cost_models.efficiency import installed_calibration, set_calibration
from planner.errors import HetplanError
from planner.input_files import (
    MAX_JSON_BYTES,
    clip,
    load_yaml_mapping,
    parse_json_text,
    read_text,
    short,
)
from planner.outfile import write_output

__all__ = ["CalibrationFit", "MeasuredRun", "apply_calibration", "fit", "load_calibration",
           "SCALE_BOUNDS", "load_runs", "scales_at_bound", "unused_scales", "write_calibration"]

_LO, _HI = 0.1, 10.0
"""Bounds of a fitted scale: beyond them the constants are not what is wrong."""
SCALE_BOUNDS = (_LO, _HI)


@dataclass(frozen=True, slots=True)
class MeasuredRun:
    where: str
    """file:line, for messages."""
    plan: Any
    measured_s: float


@dataclass(frozen=True, slots=True)
class CalibrationFit:
    scales: dict[str, float]
    before_s: tuple[float, ...]
    after_s: tuple[float, ...]
    measured_s: tuple[float, ...]

    @staticmethod
    def _rms_pct(pred: tuple[float, ...], meas: tuple[float, ...]) -> float:
        errs = [math.log(p / m) for p, m in zip(pred, meas, strict=True)]
        return 100.0 * (math.exp(math.sqrt(sum(e * e for e in errs) / len(errs))) - 1.0)

    @property
    def rms_before_pct(self) -> float:
        return self._rms_pct(self.before_s, self.measured_s)

    @property
    def rms_after_pct(self) -> float:
        return self._rms_pct(self.after_s, self.measured_s)


def load_runs(path: Path) -> list[MeasuredRun]:
    """Every row checked (plan file exists and loads, time > 0) before anything runs."""
    from planner.schema import Plan

    records: list[tuple[str, dict[str, Any]]] = []
    text = read_text(path, str(path), what="runs", max_bytes=MAX_JSON_BYTES)
    if path.suffix in (".jsonl", ".json"):
        for i, line in enumerate(text.splitlines(), 1):
            if line.strip():
                rec = parse_json_text(line, f"{path}:{i}")
                if not isinstance(rec, dict):
                    raise HetplanError(f"{path}:{i}: expected a JSON object with plan and "
                                       f"measured_iteration_s, got {short(rec)}")
                records.append((f"{path}:{i}", rec))
    else:
        reader = csv.DictReader(text.splitlines())
        try:
            missing = {"plan", "measured_iteration_s"} - set(reader.fieldnames or ())
            if missing:
                raise HetplanError(f"{path}: needs columns plan, measured_iteration_s (missing "
                                   f"{', '.join(sorted(missing))})")
            records = [(f"{path}:{i}", dict(r)) for i, r in enumerate(reader, 2)]
            for where, rec in records:
                if None in rec or None in rec.values():
                    # DictReader files extra cells under None and fills missing ones with
                    # None: the row does not line up with the header.
                    raise HetplanError(f"{where}: {len(reader.fieldnames or ())} columns in "
                                       "the header but not in this row; give each row one "
                                       "value per column")
        except csv.Error as exc:
            raise HetplanError(f"{path}:{reader.line_num}: not CSV ({exc})") from None
    runs = []
    for where, rec in records:
        if rec.get("warmup") is True:  # a run log's first step (planner/runtime/run_log.py)
            continue
        plan_ref, raw = rec.get("plan"), rec.get("measured_iteration_s")
        if not plan_ref or raw in (None, ""):
            raise HetplanError(f"{where}: needs plan and measured_iteration_s")
        if isinstance(raw, bool):  # float(true) would read as 1 second
            raise HetplanError(f"{where}: measured_iteration_s {short(raw)} is not a number")
        try:
            measured = float(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise HetplanError(f"{where}: measured_iteration_s {short(raw)} is not a number"
                               ) from None
        if not measured > 0 or math.isinf(measured):
            raise HetplanError(f"{where}: measured_iteration_s must be > 0, got {short(raw)}")
        plan_path = Path(str(plan_ref))
        if not plan_path.is_absolute():
            plan_path = path.parent / plan_path
        if not plan_path.is_file():
            raise HetplanError(f"{where}: plan {plan_ref} not found (paths are relative to "
                               f"{path.parent})")
        try:
            plan = Plan.load(plan_path)
        except Exception as exc:  # noqa: BLE001 - any load failure becomes one line
            raise HetplanError(f"{where}: plan {plan_ref}: {exc}") from None
        if not plan.model or not plan.cluster:
            raise HetplanError(f"{where}: plan {plan_ref} does not embed its model and "
                               "cluster (write it with `hetplan plan -o`)")
        from planner.costing.plan_check import check_plan

        # Before the fit: a broken plan's error then names its row, not "plan".
        check_plan(plan, where=f"{where}: plan {plan_ref}")
        runs.append(MeasuredRun(where, plan, measured))
    if not runs:
        raise HetplanError(f"{path}: no runs")
    return runs


def _gpus(plan: Any) -> set[str]:
    return {st.gpu for pipe in plan.pipelines for st in pipe.stages}


def _predict(runs: list[MeasuredRun], scales: dict[str, float],
             framework: str | None) -> tuple[float, ...]:
    from planner.costing.estimate import estimate
    from planner.costing.framework import framework_named

    apply_calibration(scales)
    return tuple(estimate(None, None, r.plan,
                          framework=framework_named(framework, r.plan.predicted)).iteration_time_s
                 for r in runs)


def _loss(pred: tuple[float, ...], runs: list[MeasuredRun]) -> float:
    return sum(math.log(p / r.measured_s) ** 2 for p, r in zip(pred, runs, strict=True))


def fit(runs: list[MeasuredRun], framework: str | None = None,
        sweeps: int = 3, steps: int = 24) -> CalibrationFit:
    """Per-GPU-type efficiency scales minimising the squared log error (see module doc)."""
    names = sorted(set().union(*(_gpus(r.plan) for r in runs)))
    scales = {n: 1.0 for n in names}
    before = _predict(runs, {}, framework)
    inv = (math.sqrt(5) - 1) / 2
    for _ in range(sweeps if len(names) > 1 else 1):
        for n in names:
            mine = [r for r in runs if n in _gpus(r.plan)]

            def f(x: float, n: str = n, mine: list[MeasuredRun] = mine) -> float:
                return _loss(_predict(mine, {**scales, n: math.exp(x)}, framework), mine)

            a, b = math.log(_LO), math.log(_HI)
            c, d = b - inv * (b - a), a + inv * (b - a)
            fc, fd = f(c), f(d)
            for _ in range(steps):
                if fc <= fd:  # ties: keep the smaller scale (above the cap at 1 all are equal)
                    b, d, fd = d, c, fc
                    c = b - inv * (b - a)
                    fc = f(c)
                else:
                    a, c, fc = c, d, fd
                    d = a + inv * (b - a)
                    fd = f(d)
            scales[n] = round(math.exp((a + b) / 2), 4)
    after = _predict(runs, scales, framework)
    apply_calibration({})
    return CalibrationFit(scales, before, after, tuple(r.measured_s for r in runs))


def scales_at_bound(scales: dict[str, float]) -> list[str]:
    """The GPU types whose fitted scale stopped at a bound of the search (`_LO`, `_HI`, to
    the golden-section search's resolution): no scale inside the bounds fits their runs."""
    return sorted(n for n, v in scales.items() if v <= _LO * 1.001 or v >= _HI / 1.001)


def apply_calibration(scales: dict[str, float]) -> None:
    """Install per-GPU scales for every later estimate of this process (and drop cost tables
    cached under the previous constants)."""
    import importlib

    if scales == installed_calibration():
        return  # nothing changes: keep the cost tables cached under these constants
    set_calibration(scales)
    importlib.import_module("planner.costing.stage_cost")._CACHE.clear()


def write_calibration(out: Path, result: CalibrationFit, source: Path) -> None:
    data = {"gpu_efficiency_scale": dict(sorted(result.scales.items())),
            "fitted_on": str(source), "runs": len(result.measured_s),
            "rms_error_before_pct": round(result.rms_before_pct, 3),
            "rms_error_after_pct": round(result.rms_after_pct, 3)}
    write_output(out, yaml.safe_dump(data, sort_keys=False))


def load_calibration(path: Path) -> dict[str, float]:
    """Read and check `--calibration FILE`; returns the scales (not yet applied)."""
    data = load_yaml_mapping(path, f"--calibration {path}", what="calibration",
                             example="`hetplan calibrate RUNS.csv --out FILE`")
    scales = data.get("gpu_efficiency_scale")
    if not isinstance(scales, dict) or not scales:
        raise HetplanError(f"--calibration {path}: needs a gpu_efficiency_scale mapping "
                           "(write it with `hetplan calibrate RUNS.csv --out FILE`)")
    out: dict[str, float] = {}
    named: dict[str, str] = {}
    for name, value in scales.items():
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or not _LO <= value <= _HI):
            raise HetplanError(f"--calibration {path}: gpu_efficiency_scale."
                               f"{clip(str(name), 40)} = {short(value)}; use a number in "
                               f"[{_LO}, {_HI}]")
        key = _scale_key(path, name)
        if key in named:
            # Both would set one GPU's scale, and the later one would silently win.
            raise HetplanError(f"--calibration {path}: gpu_efficiency_scale names "
                               f"{clip(named[key], 40)} and {clip(str(name), 40)}, both the "
                               f"{key}; keep one of them")
        named[key] = str(name)
        out[key] = float(value)
    return out


def _scale_key(path: Path, name: Any) -> str:
    """A scale's GPU as the cost model looks it up (the catalog's own name, so an alias
    applies too); "*" stands for every GPU without its own entry. A name the catalog lacks
    would silently calibrate nothing, so it is refused."""
    from cost_models.catalog import get_gpu

    if name == "*":
        return "*"
    try:
        return get_gpu(str(name)).name
    except (LookupError, ValueError) as exc:
        raise HetplanError(f"--calibration {path}: gpu_efficiency_scale.{clip(str(name), 40)}: "
                           f"{clip(str(exc), 200)}") from None


def unused_scales(scales: dict[str, float], gpus: set[str]) -> list[str]:
    """The GPU types of a calibration that none of `gpus` (catalog names) is: their scales
    change no estimate there ("*" always applies to the GPUs without their own entry)."""
    return sorted(name for name in scales if name != "*" and name not in gpus)
