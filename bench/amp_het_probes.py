"""What we tried on AMP's heterogeneous cluster (12 V100 + 4 T4), where Spearman stays below the
0.85 target: each probe changes one mechanism and prints the file's MAPE, Spearman and top-1
regret, so the figures in docs/cost-model.md §7 can be re-run.

    .venv/bin/python bench/amp_het_probes.py [DATA_DIR]

Probes (none is used by `hetplan validate`; they are mechanisms of AMP's software stack
checked against its measurements):
- lock-step: DeepSpeed's `TrainSchedule` run step by step with host-synchronous exchanges
  (AMP's ds_config sets `wall_clock_breakdown`, so every send and receive synchronises).
- lock-step + DeepSpeed bytes: also the fp16 [1, 1, s, s] attention mask from every TP rank
  per micro-batch, and the gradient sent whole by every TP rank.
- blocking p2p: `Framework.p2p_blocking` (each transfer occupies both ends).
- AMP TP-2/4 profiles: AMP's measured TP-2/4 layer times at micro-batch 1, larger
  micro-batches adding the physics' extra time (the profile's fixed overhead not scaled).
- T4 node first in rank order.
And the excess per pipeline step of the TP >= 2, PP >= 4 rows.
"""

from __future__ import annotations

import csv
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scipy.stats import spearmanr  # noqa: E402

from cost_models.profiles import ProfileRow, ProfileSet, default_profiles  # noqa: E402
from planner.cluster import cluster_from_dict, load_cluster  # noqa: E402
from planner.costing import estimate  # noqa: E402
from planner.costing.links import p2p_time_s  # noqa: E402
from planner.costing.published_stacks import AMP_DEEPSPEED_MEGATRON  # noqa: E402
from planner.costing.stage_cost import stage_cost  # noqa: E402
from planner.costing.validation import default_data_dir  # noqa: E402
from planner.costing.validation.amp import amp_runs  # noqa: E402
from planner.costing.validation.common import graph_for  # noqa: E402

GRAPH = graph_for("gpt2-amp")
MASK_BYTES = 1024 * 1024 * 2  # fp16 [1, 1, s, s] attention mask, s = 1024


def ds_train_schedule(m: int, stages: int, s: int) -> list[tuple[str, int]]:
    """DeepSpeed `TrainSchedule` (deepspeed/runtime/pipe/schedule.py) commands of stage s:
    2(m + S − 1) steps; even stages run forwards on even steps; an exchange with the previous
    stage precedes a forward, one with the next stage precedes a backward."""
    def step_to_mb(k: int) -> tuple[int, bool]:
        if k % 2 == 0 and s % 2 == 0:
            return k // 2 - s // 2, True
        if k % 2 == 1 and s % 2 == 1:
            return (k - 1) // 2 - s // 2, True
        if k % 2 == 0:
            return k // 2 - stages + (s + 1) // 2, False
        return (k - 1) // 2 - stages + 1 + s // 2, False

    cmds: list[tuple[str, int]] = []
    prev = -1
    for k in range(2 * (m + stages - 1)):
        mb, fwd = step_to_mb(k)
        ok, prev_ok = 0 <= mb < m, 0 <= prev < m
        if fwd:
            cmds += [("recv_act", mb)] if ok and s > 0 else []
            cmds += [("send_grad", prev)] if prev_ok and s > 0 else []
        else:
            cmds += [("send_act", prev)] if prev_ok and s < stages - 1 else []
            cmds += [("recv_grad", mb)] if ok and s < stages - 1 else []
        cmds += [("fwd" if fwd else "bwd", mb)] if ok else []
        prev = mb
    return cmds


_PEER = {"send_act": ("recv_act", 1), "recv_act": ("send_act", -1),
         "send_grad": ("recv_grad", -1), "recv_grad": ("send_grad", 1)}


def lockstep_s(fwd: list[float], bwd: list[float], act: list[float], grad: list[float],
               m: int) -> float:
    """Makespan when every exchange is a rendezvous: both ends wait for each other and for
    the transfer (act[s] / grad[s]: between stage s and s + 1)."""
    n = len(fwd)
    cmds = [ds_train_schedule(m, n, s) for s in range(n)]
    t, pos = [0.0] * n, [0] * n
    while any(pos[s] < len(cmds[s]) for s in range(n)):
        moved = False
        for s in range(n):
            while pos[s] < len(cmds[s]):
                kind, mb = cmds[s][pos[s]]
                if kind in ("fwd", "bwd"):
                    t[s] += fwd[s] if kind == "fwd" else bwd[s]
                else:
                    want, step = _PEER[kind]
                    peer = s + step
                    if pos[peer] >= len(cmds[peer]) or cmds[peer][pos[peer]] != (want, mb):
                        break
                    link = min(s, peer)
                    t[s] = t[peer] = max(t[s], t[peer]) + (act if "act" in kind else grad)[link]
                    pos[peer] += 1
                pos[s] += 1
                moved = True
        if not moved:
            raise RuntimeError("the schedule deadlocked")
    return max(t)


def _lockstep_variant(ds_bytes: bool):
    def predict(run, est) -> float:
        plan, nodes = run.plan, {n.name: n for n in run.cluster.nodes}
        rank_node = {r.rank: nodes[r.node] for r in plan.ranks}
        tail = max(t.makespan_s - t.pipeline_s for t in est.timeline)
        worst = 0.0
        for p, pipe in enumerate(plan.pipelines):
            stages = [s for s in est.stages if s.pipeline == p]
            full = 2.0 * 1024 * 1024 * run.micro_batch  # (b, s, h) fp16 activation
            act, grad = [], []
            lat = run.cluster.latency_us * 1e-6
            for j in range(len(pipe.stages) - 1):
                a, b = rank_node[pipe.stages[j].ranks[0]], rank_node[pipe.stages[j + 1].ranks[0]]
                tp = pipe.stages[j].tp
                if ds_bytes:  # per TP rank: partition + mask forward, the whole gradient back
                    act.append(p2p_time_s((full / tp + MASK_BYTES) * tp, a, tp, b, lat))
                    grad.append(p2p_time_s(full * tp, b, tp, a, lat))
                else:
                    act.append(p2p_time_s(full, a, tp, b, lat))
                    grad.append(act[-1])
            act.append(0.0)
            grad.append(0.0)
            worst = max(worst, lockstep_s([s.fwd_ms / 1e3 for s in stages],
                                          [s.bwd_ms / 1e3 for s in stages], act, grad,
                                          pipe.microbatches))
        return worst + tail
    return predict


def _amp_tp_profiles(data_dir: Path) -> ProfileSet:
    """Shipped profiles plus AMP's TP-2/4 rows, extended to micro-batches 2-32 by adding the
    physics' extra time at the TP-1 profile's level (profile / analytic at micro-batch 1)."""
    base = default_profiles()
    rows = list(base.rows)
    names = {"T4 (g4dn.12xlarge)": "T4", "V100 (p3.8xlarge)": "V100-SXM2-16GB"}
    clusters = [load_cluster("amp-het"), load_cluster("amp-t4")]
    groups = {g.gpu.name: g for c in clusters for g in c.groups}
    with (data_dir / "amp_layer_profiles.csv").open(newline="") as fh:
        for rec in csv.DictReader(fh):
            tp = int(rec["tp(mp)"])
            if tp == 1:
                continue
            group = groups[names[rec["gpu"]]]
            head = float(rec["logits_layer_fwd_ms(idx28)"]) + float(rec["idx29_fwd_ms"])
            for kind, index, fwd_ms in (("embedding", 0, float(rec["embed_fwd_ms"])),
                                        ("block", 1, float(rec["transformer_layer_fwd_ms_mean"])),
                                        ("head", len(GRAPH.layers) - 1, head)):
                def analytic(t: int, b: int, index: int = index, group=group) -> float:
                    return stage_cost(GRAPH, index, index + 1, group.gpu, t, b, "none",
                                      precision="fp16", profiles=ProfileSet(),
                                      intra_node_gb_per_s=group.intra_node_gb_per_s,
                                      intra_node_link=group.intra_node,
                                      framework=AMP_DEEPSPEED_MEGATRON).fwd_s
                tp1 = base.lookup(group.gpu.name, "gpt2-amp", 1024, 1024, kind, 1, "fp16", 1)
                level = tp1.fwd_ms / 1e3 / analytic(1, 1)
                for b in (1, 2, 4, 8, 16, 32):
                    f = fwd_ms / 1e3 + level * (analytic(tp, b) - analytic(tp, 1))
                    rows.append(ProfileRow(
                        gpu=group.gpu.name, model="gpt2-amp", hidden_size=1024, seq_len=1024,
                        layer_kind=kind, micro_batch=b, tp=tp, precision="fp16",
                        fwd_ms=f * 1e3, bwd_ms=2 * f * 1e3, update_ms=None, source="probe"))
    return ProfileSet(rows)


def _t4_first() -> dict:
    spec = load_cluster("amp-het").spec
    flipped = {**spec, "name": "amp-het-t4-first", "nodes": list(reversed(spec["nodes"]))}
    return {"het_cluster": cluster_from_dict(flipped)}


def _report(name: str, runs, predict, profiles: ProfileSet,
            framework=AMP_DEEPSPEED_MEGATRON) -> None:
    meas, pred = [], []
    for run in runs:
        if run.plan is None or run.measured_s is None or run.experiment != "het_cluster":
            continue
        est = estimate(GRAPH, run.cluster, run.plan, profiles=profiles, framework=framework)
        meas.append(run.measured_s)
        pred.append(predict(run, est) if predict else est.iteration_time_s)
    rho = spearmanr(meas, pred).correlation
    mape = 100 * sum(abs(p - m) / m for m, p in zip(meas, pred, strict=True)) / len(meas)
    first = min(range(len(pred)), key=pred.__getitem__)
    regret = 100 * (meas[first] / min(meas) - 1)
    print(f"{name:34s} rows {len(meas)}  MAPE {mape:5.1f} %  Spearman {rho:.3f}  "
          f"top-1 regret {regret:4.1f} %")


def _excess(runs, profiles: ProfileSet) -> None:
    print("\nexcess per pipeline step, TP >= 2 and PP >= 2 (measured - predicted) / (m + S - 1):")
    for run in runs:
        if (run.experiment != "het_cluster" or run.plan is None or run.measured_s is None
                or run.tp < 2 or run.pp < 2):
            continue
        est = estimate(GRAPH, run.cluster, run.plan, profiles=profiles,
                       framework=AMP_DEEPSPEED_MEGATRON)
        m = run.plan.pipelines[0].microbatches
        step = (run.measured_s - est.iteration_time_s) / (m + run.pp - 1)
        print(f"  mb{run.micro_batch:<3d}tp{run.tp} pp{run.pp} dp{run.dp}: {m:3d} micro-batches, "
              f"{1e3 * step:+6.1f} ms per step")


def main() -> None:
    data = Path(sys.argv[1]) if len(sys.argv) > 1 else default_data_dir()
    profiles = default_profiles()
    runs = list(amp_runs(data))
    _report("as validated", runs, None, profiles)
    _report("lock-step TrainSchedule", runs, _lockstep_variant(False), profiles)
    _report("lock-step + DeepSpeed bytes", runs, _lockstep_variant(True), profiles)
    _report("blocking p2p", runs, None, profiles,
            dataclasses.replace(AMP_DEEPSPEED_MEGATRON, p2p_blocking=True))
    _report("AMP TP-2/4 profiles (het)", runs, None, _amp_tp_profiles(data))
    tp_all = _amp_tp_profiles(data)
    t4 = [r for r in runs if r.experiment == "homogeneous" and r.plan and r.measured_s]
    mape = 100 * sum(abs(estimate(GRAPH, r.cluster, r.plan, profiles=tp_all,
                                  framework=AMP_DEEPSPEED_MEGATRON).iteration_time_s
                         - r.measured_s) / r.measured_s for r in t4) / len(t4)
    print(f"{'  ... and on the all-T4 file':34s} rows {len(t4)}  MAPE {mape:5.1f} %")
    _report("T4 node first", list(amp_runs(data, _t4_first())), None, profiles)
    _excess(runs, profiles)


if __name__ == "__main__":
    main()
