"""Leave-one-file-out refit of the 16-bit / fp8 GEMM constants, with and without the attention
core priced at its kernel's published rate (docs/cost-model.md §1b, §2).

    .venv/bin/python bench/loo_refit.py [--variants gemm,kernels,kernels-b200] [--out F] [--load]

The constants: Ampere `tensor_eff`, Hopper `tensor_eff` (Blackwell borrows Hopper's values)
and Hopper `fp8_eff`. Each physics variant is priced once per grid value (bf16 rows: one
`tensor_eff` for both generations, each row depends on its own generation's only; fp8 rows: a
(`tensor_eff`, `fp8_eff`) grid), so every row's prediction is a curve over its constants.
Then, for each measurement file, the constants that minimise the mean of the other files'
MAPEs (each file one vote) price the held-out file: its leave-one-out MAPE. The fit on all
files gives the constants to ship. Variants:

- `gemm`: the shipped physics: only llm-foundry's Triton kernel priced apart (`PRICED`).
- `kernels`: also FlashAttention-2 (hetplan's runtime, torchtitan: Ampere and Hopper) and
  Transformer Engine's attention (`te`: cuDNN on Hopper, FlashAttention-2 on Ampere).
- `kernels-b200`: also cuDNN's attention on Blackwell (B200) at its figure
  (`cost_models.attention`); no bf16 row runs on Blackwell, so its bf16 table is `kernels`'.

It prints, per variant, each file's MAPE at the shipped constants, at the all-file fit and
left out (with the constants the other files chose), and the per-framework MAPE at the fit.
About 10 minutes of CPU per variant (a third for `kernels-b200`); docs/cost-model.md §1b.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cost_models import attention, efficiency  # noqa: E402
from cost_models.profiles import ProfileSet  # noqa: E402
from planner.costing.validation import default_data_dir  # noqa: E402
from planner.costing.validation import large_runs as lr  # noqa: E402
from planner.costing.validation.common import Row  # noqa: E402
from planner.costing.validation.mpt_foundry import mpt_reports  # noqa: E402
from planner.costing.validation.nemo_tables import nemo_table_reports  # noqa: E402

NONE = ProfileSet()
SHIPPED_PRICED = attention.PRICED
KERNELS_PRICED = SHIPPED_PRICED | {("fa2", "hopper"), ("fa2", "ampere"), ("cudnn", "hopper")}
B200_PRICED = KERNELS_PRICED | {("cudnn", "blackwell")}
T_GRID = [round(0.50 + 0.01 * i, 2) for i in range(36)]  # 0.50 .. 0.85
T_GRID_FP8 = T_GRID[::2]
F_GRID = [round(0.36 + 0.02 * i, 2) for i in range(14)]  # 0.36 .. 0.62
GENS = ("ampere", "ada", "hopper", "blackwell")
FILES = ("torchtitan_a100.csv", "torchtitan_h100.csv", "llama3_405b.csv", "historic_runs.csv",
         "mpt_llm_foundry.csv", "nemo_h100.csv", "nemo_b200.csv", "nemo_h100_2025.csv")
FP8_FILES = FILES[5:]
SHIPPED = {"ampere": efficiency.compute_constants("ampere").tensor_eff,  # the shipped tables
           "hopper": efficiency.compute_constants("hopper").tensor_eff,
           "fp8": efficiency.compute_constants("hopper").fp8_eff}
sc = importlib.import_module("planner.costing.stage_cost")


def _set(t: float, f: float) -> None:
    for gen in GENS:
        c = efficiency._CONSTANTS[gen]
        efficiency._CONSTANTS[gen] = dataclasses.replace(
            c, tensor_eff=t, fp8_eff=None if c.fp8_eff is None else f)
    sc._CACHE.clear()


def _variant(name: str) -> None:
    attention.PRICED = (SHIPPED_PRICED if name == "gemm" else
                        B200_PRICED if "b200" in name else KERNELS_PRICED)
    sc._CACHE.clear()


def _rows_bf16(data: Path) -> dict[str, list[Row]]:
    mpt = next(r for r in mpt_reports(data, NONE) if r.group == "all")
    return {"torchtitan_a100.csv": lr._torchtitan(data / "torchtitan_a100.csv", NONE, False),
            "torchtitan_h100.csv": lr._torchtitan(data / "torchtitan_h100.csv", NONE, True),
            "llama3_405b.csv": lr._llama3(data / "llama3_405b.csv", NONE),
            "historic_runs.csv": lr._historic(NONE), "mpt_llm_foundry.csv": list(mpt.rows)}


def _rows_fp8(data: Path) -> dict[str, list[Row]]:
    out = {"nemo_h100.csv": lr._nemo(data / "nemo_h100.csv", NONE)}
    out.update({r.file: list(r.rows) for r in nemo_table_reports(data, NONE)})
    return out


def _used(rows: list[Row]) -> list[dict]:
    return [{"label": x.label, "measured": x.measured, "predicted": x.predicted,
             "framework": x.framework, "gen": ""}
            for x in rows if x.used and x.measured is not None and x.predicted is not None]


def sweep(variant: str, data: Path, bf16: dict | None = None) -> dict:
    """{"bf16": {t: {file: rows}}, "fp8": {"t,f": {file: rows}}} for one physics variant
    (`bf16`: its bf16 table when it is another variant's, as no bf16 row runs on Blackwell)."""
    _variant(variant)
    out: dict = {"bf16": bf16 or {}, "fp8": {}}
    for t in (T_GRID if bf16 is None else []):
        _set(t, SHIPPED["fp8"])
        out["bf16"][str(t)] = {k: _used(v) for k, v in _rows_bf16(data).items()}
    # Which generation each bf16 row runs on: price Ampere at 0.60 and Hopper at 0.70 at
    # once; a row that matches the 0.60 pass is an Ampere row.
    _set(0.60, SHIPPED["fp8"])
    for gen in ("hopper", "blackwell"):
        efficiency._CONSTANTS[gen] = dataclasses.replace(efficiency._CONSTANTS[gen],
                                                         tensor_eff=0.70)
    sc._CACHE.clear()
    split = {k: _used(v) for k, v in _rows_bf16(data).items()} if bf16 is None else {}
    for file, rows in split.items():
        for i, x in enumerate(rows):
            gen = ("ampere" if abs(x["predicted"] / out["bf16"]["0.6"][file][i]["predicted"] - 1)
                   < 1e-9 else "hopper")
            for t in out["bf16"]:
                out["bf16"][t][file][i]["gen"] = gen
    for t in T_GRID_FP8:
        for f in F_GRID:
            _set(t, f)
            out["fp8"][f"{t},{f}"] = {k: _used(v) for k, v in _rows_fp8(data).items()}
        print(f"{variant}: t {t} done", file=sys.stderr, flush=True)
    return out


def _interp(table: dict, t: float, f: float | None) -> dict[str, list[dict]]:
    """Rows at (t, f), linear in t between grid points (f on its grid)."""
    grid = T_GRID if f is None else T_GRID_FP8
    lo = max(g for g in grid if g <= t + 1e-9)
    hi = min(g for g in grid if g >= t - 1e-9)
    key = (lambda g: str(g)) if f is None else (lambda g: f"{g},{f}")
    a, b = table[key(lo)], table[key(hi)]
    w = 0.0 if hi == lo else (t - lo) / (hi - lo)
    return {file: [{**x, "predicted": x["predicted"] * (1 - w) + y["predicted"] * w}
                   for x, y in zip(a[file], b[file], strict=True)] for file in a}


def predictions(sw: dict, ta: float, th: float, f: float) -> dict[str, list[dict]]:
    """Every counted row at Ampere `ta`, Hopper `th`, fp8 `f` (bf16 rows pick their
    generation's curve: the Ampere sweep value for A100 rows, the Hopper one for H100 rows)."""
    at_a, at_h = _interp(sw["bf16"], ta, None), _interp(sw["bf16"], th, None)
    out = {file: [h if a["gen"] == "hopper" else a
                  for a, h in zip(at_a[file], at_h[file], strict=True)] for file in at_a}
    out.update(_interp(sw["fp8"], th, f))
    return out


def mape(rows: list[dict]) -> float:
    return 100 * sum(abs(x["predicted"] - x["measured"]) / x["measured"] for x in rows) / len(rows)


def _abs_err(rows: list[dict]) -> float:
    return sum(abs(x["predicted"] - x["measured"]) / x["measured"] for x in rows)


def fit(sw: dict, files: tuple[str, ...]) -> tuple[float, float, float]:
    """(ta, th, f) minimising the mean file MAPE over `files`. Each row depends on its own
    generation's constants only, so the mean splits into an Ampere part (ta) and a Hopper
    part (th, f), each grid-searched alone."""
    n = {x: len(sw["bf16"]["0.6"].get(x) or sw["fp8"]["0.6,0.48"][x]) for x in files}
    bf16 = [x for x in files if x in sw["bf16"]["0.6"]]
    fp8 = [x for x in files if x in FP8_FILES]

    def part(rows_at: dict, file: str, gen: str | None) -> float:
        rows = rows_at[file] if gen is None else [r for r in rows_at[file] if r["gen"] == gen]
        return _abs_err(rows) / n[file]

    def ampere(ta: float) -> float:
        at = _interp(sw["bf16"], ta, None)
        return sum(part(at, x, "ampere") for x in bf16)

    def hopper(th: float, f: float) -> float:
        at = _interp(sw["bf16"], th, None)
        score = sum(part(at, x, "hopper") for x in bf16)
        if fp8:
            at8 = _interp(sw["fp8"], th, f)
            score += sum(part(at8, x, None) for x in fp8)
        return score

    ta = min(T_GRID, key=ampere)
    th_grid = [t for t in T_GRID if t <= T_GRID_FP8[-1]] if fp8 else T_GRID
    th, f = min(((th, f) for th in th_grid for f in (F_GRID if fp8 else [SHIPPED["fp8"]])),
                key=lambda p: hopper(*p))
    return ta, th, f


def report(sweeps: dict) -> None:
    """Per variant: the all-file fit, each file's MAPE at it, and each file's leave-one-out
    MAPE (constants fitted on the other files)."""
    for v, sw in sweeps.items():
        ta, th, f = fit(sw, FILES)
        at_fit = predictions(sw, ta, th, f)
        at_shipped = predictions(sw, SHIPPED["ampere"], SHIPPED["hopper"], SHIPPED["fp8"])
        print(f"\n== {v}: all-file fit ampere {ta:.2f} hopper {th:.2f} fp8 {f:.2f}")
        print(f"{'file':22s} {'shipped':>8s} {'fit':>8s} {'LOO':>8s}  LOO constants")
        loo_sum = 0.0
        for held in FILES:
            rest = tuple(x for x in FILES if x != held)
            la, lh, lf = fit(sw, rest)
            loo = mape(predictions(sw, la, lh, lf)[held])
            loo_sum += loo
            print(f"{held:22s} {mape(at_shipped[held]):8.2f} {mape(at_fit[held]):8.2f} "
                  f"{loo:8.2f}  {la:.2f} / {lh:.2f} / {lf:.2f}")
        print(f"{'mean':22s} {sum(mape(at_shipped[x]) for x in FILES) / len(FILES):8.2f} "
              f"{sum(mape(at_fit[x]) for x in FILES) / len(FILES):8.2f} "
              f"{loo_sum / len(FILES):8.2f}")
        fws: dict[str, list[dict]] = {}
        for file in FILES:
            for x in at_fit[file]:
                fws.setdefault(x["framework"], []).append(x)
        print("per framework at the fit: " + ", ".join(
            f"{k} {mape(r):.2f} ({len(r)})" for k, r in sorted(fws.items())))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="gemm,kernels,kernels-b200")
    ap.add_argument("--out", default="/tmp/loo_sweep.json")
    ap.add_argument("--load", action="store_true", help="reuse the sweeps saved in --out")
    a = ap.parse_args()
    data = default_data_dir()
    path = Path(a.out)
    sweeps = json.loads(path.read_text()) if a.load and path.exists() else {}
    for v in a.variants.split(","):
        if v not in sweeps:
            base = v.replace("-b200", "")
            sweeps[v] = sweep(v, data, sweeps[base]["bf16"] if base != v else None)
            path.write_text(json.dumps(sweeps))
    report({v: sweeps[v] for v in a.variants.split(",")})


if __name__ == "__main__":
    main()
