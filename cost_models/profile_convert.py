"""Convert the public per-layer measurements in shared/data into hetplan profile files.

    python -m cost_models.profile_convert ../shared/data   # writes cost_models/profiles/*.csv

Sailor (sailor_layer_profiles.csv): per (model, GPU, micro-batch, TP) the forward, backward and
update ms of a transformer layer, of layer 0 (embedding) and of the last layer (head). Sailor
trained in fp32 (TF32 on Ampere/Hopper): a V100 GPT-Neo-2.7B layer forward at micro-batch 4
takes 114 ms for 1.46 TFLOP = 12.8 TFLOP/s, 81 % of the V100's 15.7 FP32 peak and far below
its fp16 tensor speed; the rows are written with precision fp32. Update 0.0 means not measured.

AMP (amp_layer_profiles.csv): forward ms only, micro-batch 1 (AMP's profiling script,
examples/ds_pretrain_gpt2_profile.sh: BATCHSIZE=1, --fp16), for the embedding, the mean
transformer layer, and head units 28 (logits) and 29 (loss), at TP 1, 2, 4. Backward is
written as 2 × forward (backward GEMMs do twice the forward's FLOPs; AMP's own assumption).
Units 26-27 (final norm) are not in the file and count as part of the head row's 28 + 29.
Only the TP-1 rows are written: AMP's own measured T4 plans contradict its TP-2/4 rows (with
them every TP-2 plan is over-predicted by 1.2-1.3x and every TP-4 plan by 1.3-1.5x, while the
TP-1 plans land within 0.85-1.1x); from TP-1 rows the estimate scales to TP 2/4 with the
analytic compute and PCIe all-reduce model (docs/cost-model.md, "AMP profiles").
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from cost_models.profiles import PROFILE_COLUMNS

__all__ = ["convert_amp", "convert_sailor", "main"]

# (hidden size, sequence length, our model name) of each profiled model.
_SAILOR_MODELS = {"OPT-350": (1024, 2048, "opt-350m"), "GPT-Neo-2.7": (2560, 2048, "gpt-neo-2.7b")}
_AMP_MODEL = (1024, 1024, "gpt2-amp")
_AMP_GPUS = {"T4 (g4dn.12xlarge)": "T4", "V100 (p3.8xlarge)": "V100-SXM2-16GB"}


def _gpu_name(name: str) -> str:
    from cost_models.catalog import get_gpu

    return get_gpu(name).name


def convert_sailor(src: Path) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    with src.open(newline="") as fh:
        for rec in csv.DictReader(fh):
            hidden, seq, model = _SAILOR_MODELS[rec["model"]]
            gpu = _gpu_name(rec["gpu"])
            upd = float(rec["xformer_layer_update_ms"])
            for kind, fwd, bwd in (
                ("embedding", "layer0_fwd_ms", "layer0_bwd_ms"),
                ("block", "xformer_layer_fwd_ms", "xformer_layer_bwd_ms"),
                ("head", "last_layer_fwd_ms", "last_layer_bwd_ms"),
            ):
                out.append({
                    "gpu": gpu, "model": model, "hidden_size": hidden, "seq_len": seq,
                    "layer_kind": kind, "micro_batch": int(rec["micro_batch"]),
                    "tp": int(rec["tp"]), "precision": "fp32", "fwd_ms": float(rec[fwd]),
                    "bwd_ms": float(rec[bwd]),
                    "update_ms": upd if kind == "block" and upd > 0 else "",
                    "source": f"sailor_layer_profiles.csv ({rec['model']}, {rec['gpu']})",
                })
    return out


def convert_amp(src: Path) -> list[dict[str, object]]:
    hidden, seq, model = _AMP_MODEL
    out: list[dict[str, object]] = []
    with src.open(newline="") as fh:
        for rec in csv.DictReader(fh):
            if int(rec["tp(mp)"]) != 1:
                continue
            gpu = _gpu_name(_AMP_GPUS[rec["gpu"]])
            head = float(rec["logits_layer_fwd_ms(idx28)"]) + float(rec["idx29_fwd_ms"])
            for kind, fwd in (("embedding", float(rec["embed_fwd_ms"])),
                              ("block", float(rec["transformer_layer_fwd_ms_mean"])),
                              ("head", head)):
                out.append({
                    "gpu": gpu, "model": model, "hidden_size": hidden, "seq_len": seq,
                    "layer_kind": kind, "micro_batch": 1, "tp": int(rec["tp(mp)"]),
                    "precision": "fp16", "fwd_ms": fwd, "bwd_ms": round(2 * fwd, 6),
                    "update_ms": "", "source": f"amp_layer_profiles.csv ({rec['gpu']}); bwd=2*fwd",
                })
    return out


def _write(rows: list[dict[str, object]], dst: Path) -> None:
    with dst.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=PROFILE_COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    data = Path(args[0]) if args else Path(__file__).resolve().parents[2] / "shared" / "data"
    dst = Path(__file__).parent / "profiles"
    for name, fn, out in (("sailor_layer_profiles.csv", convert_sailor, "sailor.csv"),
                          ("amp_layer_profiles.csv", convert_amp, "amp.csv")):
        src = data / name
        if not src.exists():
            print(f"{src}: not found; skipped")
            continue
        rows = fn(src)
        _write(rows, dst / out)
        print(f"{src} -> {dst / out}: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
