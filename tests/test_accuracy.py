"""The issue's accuracy targets on the public measurements shipped with hetplan
(planner/costing/validation/data, sources in its README.md).

Targets not yet met are strict xfails with the figure we reach, so a model change that meets
them turns them into failures to update.
"""

from __future__ import annotations

import re

import pytest

from planner.costing.validation import default_data_dir, run_all
from planner.costing.validation.common import FileReport

DATA = default_data_dir()


@pytest.fixture(scope="module")
def reports() -> dict[tuple[str, str], FileReport]:
    return {(r.file, r.group): r for r in run_all(DATA, modes=("profiles",))["profiles"]}


@pytest.fixture(scope="module")
def analytic() -> dict[tuple[str, str], FileReport]:
    """AMP and Sailor without profiles (the large-run files have none, so both modes agree)."""
    from cost_models.profiles import ProfileSet
    from planner.costing.validation.amp import amp_reports
    from planner.costing.validation.sailor import sailor_reports

    none = ProfileSet()
    return {(r.file, r.group): r for r in amp_reports(DATA, none) + sailor_reports(DATA, none)}


# Regression ceilings: the figures measured when they were last changed (docs/cost-model.md §7)
# plus a small margin, so a change that makes a file worse fails here.
_ANALYTIC_MAPE = {  # (file, group): (measured %, ceiling %)
    # 42.0 / 29.4 % until a vocab-split head divided only its vocabulary-sized memory
    # traffic (before: 0.5 + 0.5/TP of all of it). The graph counts `loss_fn`'s 18 B per
    # 16-bit logit; Megatron v1.1.5's loss moves ~46 (clone, max, sub_, exp, sum, div_), which
    # the old half-whole price covered by accident. Pricing each record's own loss traffic
    # gave AMP 36.1 / 25.8 % but its T4 ρ 0.740 and nemo_h100_2025 5.1 -> 7.3 %: left out.
    ("amp_measured_plans.csv", "homogeneous"): (44.1, 44.6),
    ("amp_measured_plans.csv", "het_cluster"): (31.5, 32.0),
    ("sailor_measured_plans.csv", "clariden"): (13.8, 14.5),
    ("sailor_measured_plans.csv", "mit"): (40.7, 41.5),
    ("sailor_measured_plans.csv", "all"): (20.1, 21.0),
}
_PROFILE_MAPE = {
    ("amp_measured_plans.csv", "homogeneous"): (4.8, 5.3),
    ("amp_measured_plans.csv", "het_cluster"): (13.9, 14.4),
    ("sailor_measured_plans.csv", "clariden"): (9.8, 10.3),
    ("sailor_measured_plans.csv", "mit"): (10.4, 10.9),
    ("sailor_measured_plans.csv", "all"): (9.9, 10.4),
    # 9.1 % until torchtitan's TP rows ran sequence-parallel (its TP plan shards the norms and
    # the residual stream over the sequence): the 405B FSDP16 TP8 row from -16.2 % to +10.3 %.
    ("torchtitan_a100.csv", "all"): (8.4, 8.9),
    ("torchtitan_h100.csv", "all"): (8.3, 8.8),
    ("nemo_h100.csv", "all"): (4.3, 4.6),  # 9 rows since the cp rows count
    ("llama3_405b.csv", "all"): (5.2, 5.7),
    # Not a regression pin: the ceiling is the target (throughput within 10 %), and
    # the first figure only what it measured last (9.9 %). It was 8.5 % (ceiling 9.0) until
    # the head was no longer priced as recomputed under full recompute (DeepSpeed's
    # PipelineModule checkpoints only the transformer layers, `_is_checkpointable`): MT-NLG's
    # rows, already predicted 9-14 % fast, gain 1.5 %; BLOOM's moves from -2.1 % to +2.1 %.
    # The Ampere constants were fitted under the old pricing (recomputed head), so part of the
    # rise is that fit's, not the physics'; refit before tightening this. 9.9 -> 6.4 % when
    # the rows stopped running sequence parallelism, which neither stack had (published after
    # both trainings): BLOOM +2.1 -> -0.3 %, MT-NLG +10.3/+11.3/+15.6 -> +6.3/+7.3/+11.5 %.
    ("historic_runs.csv", "all"): (6.4, 6.9),
}


@pytest.mark.parametrize("key", sorted(_ANALYTIC_MAPE))
def test_analytic_mape_does_not_regress(analytic: dict, key: tuple[str, str]) -> None:
    assert analytic[key].mape_pct <= _ANALYTIC_MAPE[key][1]


@pytest.mark.parametrize("key", sorted(_PROFILE_MAPE))
def test_mape_with_profiles_does_not_regress(reports: dict, key: tuple[str, str]) -> None:
    assert reports[key].mape_pct <= _PROFILE_MAPE[key][1]


def test_historic_runs_meet_the_target(reports: dict) -> None:
    # The target for the large published runs, throughput within 10 %; the lower
    # bound is only a sanity bound (four runs of three systems cannot all be priced exactly,
    # so a MAPE near 0 means the estimate echoes its inputs).
    assert 2.0 <= reports[("historic_runs.csv", "all")].mape_pct <= 10.0


def test_rankings_do_not_regress(reports: dict, analytic: dict) -> None:
    """Spearman ρ as last measured, less 0.01: AMP het 0.718 with profiles (the issue's floor
    is 0.7), Sailor all 0.989 / 0.978 analytic, AMP T4 0.990 / 0.881 analytic (0.918 until
    the head's hidden-sized traffic stayed whole; see _ANALYTIC_MAPE)."""
    assert reports[("amp_measured_plans.csv", "het_cluster")].spearman >= 0.708
    assert reports[("amp_measured_plans.csv", "homogeneous")].spearman >= 0.98
    assert reports[("sailor_measured_plans.csv", "all")].spearman >= 0.979
    assert analytic[("amp_measured_plans.csv", "homogeneous")].spearman >= 0.871
    assert analytic[("sailor_measured_plans.csv", "all")].spearman >= 0.968


def test_amp_t4_mape_and_rank(reports: dict) -> None:
    r = reports[("amp_measured_plans.csv", "homogeneous")]
    assert r.counted >= 40
    assert r.mape_pct <= 15.0
    assert r.spearman >= 0.85


def test_amp_heterogeneous_top1_regret(reports: dict) -> None:
    r = reports[("amp_measured_plans.csv", "het_cluster")]
    assert r.top1_regret_pct <= 3.0


@pytest.mark.xfail(strict=True, reason="Spearman 0.70 on AMP het: rows with TP>=2, PP>=4 and "
                   ">=16 micro-batches measured 1.6-2.1x slower than the same work in 4 "
                   "micro-batches; the model does not reproduce that (docs/cost-model.md)")
def test_amp_heterogeneous_rank(reports: dict) -> None:
    assert reports[("amp_measured_plans.csv", "het_cluster")].spearman >= 0.85


def test_sailor_mape_and_rank(reports: dict) -> None:
    r = reports[("sailor_measured_plans.csv", "all")]
    assert r.mape_pct <= 15.0
    assert r.spearman >= 0.85
    clariden = reports[("sailor_measured_plans.csv", "clariden")]  # the GH200 plans
    assert clariden.mape_pct <= 15.0
    assert clariden.spearman >= 0.85
    assert reports[("sailor_measured_plans.csv", "mit")].mape_pct <= 15.0  # heterogeneous


@pytest.mark.xfail(strict=True, reason="Spearman 0.81 on Sailor's 8 MIT (heterogeneous) rows: "
                   "the pure pipelines N2_D1 and N4_D1 are predicted 30 % and 22 % fast; "
                   "docs/cost-model.md §7")
def test_sailor_heterogeneous_rank(reports: dict) -> None:
    assert reports[("sailor_measured_plans.csv", "mit")].spearman >= 0.85


def test_mit_network_rate_matches_sailors_gradient_reduction_times() -> None:
    """planner/configs/clusters/mit-het.yaml gives 1 Gbit/s between nodes. The evidence is not the
    iteration times but Sailor's own `red_grads_field`: for the data-parallel plans whose
    replicas run at similar speed it equals the DP all-reduce time we predict at 1 Gbit/s to
    within 15 % (0.87-1.14x; at 10 Gbit/s it would be ~10x too fast)."""
    import csv

    from cost_models.profiles import default_profiles
    from planner.costing.estimate import estimate
    from planner.costing.published_stacks import MEGATRON_EAGER
    from planner.costing.validation import sailor
    from planner.costing.validation.common import graph_for

    checked = 0
    with (DATA / "sailor_measured_plans.csv").open(newline="") as fh:
        for rec in csv.DictReader(fh):
            if rec["file"] not in ("mit/N4/plan_config_N4_D2.json",
                                   "mit/N4/plan_config_N4_D4.json",
                                   "mit/N6/plan_config_N6_D2.json",
                                   "mit/N6/plan_config_N6_D3.json",
                                   "mit/N6/plan_config_N6_D6.json"):
                continue
            graph = graph_for(sailor._MODELS[rec["model"]], precision="fp32")
            plan, extra = sailor._plan(rec, len(graph.layers))
            est = estimate(graph, extra["cluster"], plan, profiles=default_profiles(),
                           precision="fp32", framework=MEGATRON_EAGER)
            # red_grads is the data-parallel reduction only: D1 plans with the tied
            # embedding on two nodes (N2_D1, N4_D1) report ~0 s.
            dp_only = est.dp_sync_s - est.tied_sync_s
            assert dp_only == pytest.approx(float(rec["red_grads_field"]), rel=0.15)
            checked += 1
    assert checked == 5


@pytest.mark.parametrize("file", ["torchtitan_a100.csv", "torchtitan_h100.csv", "nemo_h100.csv",
                                  "llama3_405b.csv", "historic_runs.csv", "nemo_b200.csv",
                                  "nemo_h100_2025.csv"])
def test_large_runs_within_ten_percent(reports: dict, file: str) -> None:
    assert reports[(file, "all")].mape_pct <= 10.0


@pytest.mark.parametrize(("file", "counted", "target_pct"), [
    # Measured with the context-parallel rows priced at their cp and the Megatron-FSDP rows at
    # ZeRO-3: 4.29 % over 9 rows (was 3.10 % over the 7 rows without CP), 8.07 % over 8 (was
    # 9.01 % over 4), 5.06 % over 9 (was 6.26 % over 6).
    ("nemo_h100.csv", 9, 4.6),
    ("nemo_b200.csv", 8, 8.5),
    ("nemo_h100_2025.csv", 9, 5.5),
])
def test_nemo_tables(reports: dict, file: str, counted: int, target_pct: float) -> None:
    """NeMo 24.07, 25.02 and Megatron-Bridge 25.09-26.02 published tables (DGX-H100, DGX-B200,
    fp8): every row of a known model shape priced, context parallelism and FSDP included, MAPE
    at the measured figure (small margin), every run judged to fit in memory (they ran), and
    the rows left out (unknown shapes) say why instead of vanishing."""
    rep = reports[(file, "all")]
    assert rep.counted == counted
    assert rep.mape_pct <= target_pct
    assert all(x.feasible for x in rep.rows if x.used)
    assert {x.note for x in rep.rows if not x.used} <= {"model shape not known"}


def test_megatron_record_covers_every_nemo_table(reports: dict) -> None:
    """The per-framework report of the megatron record gathers the counted rows of every NeMo
    file (9 + 8 + 9); measured 5.72 % (5.60 % over the 17 rows counted before CP and FSDP)."""
    rep = reports[("per framework", "megatron")]
    nemo = sum(reports[(f, "all")].counted
               for f in ("nemo_h100.csv", "nemo_b200.csv", "nemo_h100_2025.csv"))
    assert rep.counted == nemo == 26
    assert rep.mape_pct <= 6.2


@pytest.mark.parametrize(("group", "counted", "target_pct"), [
    # Measured when the file was added: 13.6 % (A100 40GB), 22.9 % (A100 80GB), 42.7 % (H100
    # 80GB); with the attention core at llm-foundry's Triton kernel's published rate
    # (cost_models/attention.py): 10.4 %, 10.9 %, 7.4 % (docs/cost-model.md, "MPT / llm-foundry").
    ("a100_40gb", 78, 11.0),
    ("a100_80gb", 61, 11.5),
    ("h100_80gb", 52, 8.0),
])
def test_mpt_llm_foundry_at_measured_figure(reports: dict, group: str, counted: int,
                                            target_pct: float) -> None:
    """llm-foundry's published MPT tables (FSDP, 125M-70B, 512-65536 tokens): every bf16 row
    priced, MAPE at the figure measured (small margin), rows ranked right (Spearman)."""
    rep = reports[("mpt_llm_foundry.csv", group)]
    assert rep.counted == counted
    assert rep.mape_pct <= target_pct
    assert rep.spearman >= 0.99
    fp8 = reports[("mpt_llm_foundry.csv", "h100_80gb fp8")]
    assert fp8.counted == 0 and len(fp8.rows) == 10  # reported, not counted


def test_mpt_llm_foundry_within_ten_percent(reports: dict) -> None:
    """The issue's 10 % target over the 191 bf16 rows: 24.5 % with the attention core at the
    GEMM rate, 9.7 % at the Triton kernel's own rate."""
    assert reports[("mpt_llm_foundry.csv", "all")].mape_pct <= 10.0


@pytest.mark.parametrize("group", ["a100_40gb", "a100_80gb", "h100_80gb"])
def test_mpt_long_sequences_not_priced_too_fast(reports: dict, group: str) -> None:
    """Rows at 16k-65k tokens, where the attention core is 40-80 % of the FLOPs: their signed
    mean error was +40 % (A100 40GB), +46 % (A100 80GB), +114 % (H100) with attention at the
    GEMM rate; the kernel's own forward and backward rates bring each within ±10 %
    (measured +2.9 / +3.0 / +5.3 %)."""
    rows = [x for x in reports[("mpt_llm_foundry.csv", group)].rows
            if x.used and x.measured and x.predicted is not None
            and int(re.search(r"seq (\d+)", x.label).group(1)) >= 16384]
    assert len(rows) >= 11
    mean = sum((x.predicted - x.measured) / x.measured for x in rows) / len(rows)
    assert abs(mean) <= 0.10


def test_torchtitan_checkpointing_ratios(reports: dict) -> None:
    """Ratios between rows of one model cancel the GEMM efficiency: they check the recompute
    model alone. Llama 2 13B (torchtitan, A100): no checkpointing 2162 tokens/s, selective op
    1904 (measured ratio 1.136); Llama 2 70B: selective op (batch 1) 355 vs full (batch 2)
    353 (1.006)."""
    rows = {x.label: x.predicted for x in reports[("torchtitan_a100.csv", "all")].rows}
    none = rows["Llama2-13B 64 GPUs FSDP64 none bf16"]
    sel = rows["Llama2-13B 64 GPUs FSDP64 selective op bf16"]
    assert none / sel == pytest.approx(2162 / 1904, rel=0.03)
    sel70 = rows["Llama2-70B 64 GPUs FSDP64 selective op bf16"]
    full70 = rows["Llama2-70B 64 GPUs FSDP64 full bf16"]
    assert sel70 / full70 == pytest.approx(355 / 353, rel=0.20)


def test_torchtitan_peak_memory(reports: dict) -> None:
    """torchtitan's H100 tables publish each run's peak memory (its memory monitor's maximum
    reserved by the caching allocator, GiB). Counted as the throughput is: the two plain bf16
    rows, Llama 3.1 8B, FSDP2 over 8 and 128 GPUs, local batch 2, per-op selective
    checkpointing. Priced 75.2 / 61.1 GiB against 82.4 / 67.0 (126.4 / 112.3 at ZeRO-3 when
    the blocks kept the whole eager block, 90.3 GiB of activations): MAPE 8.8 %. The ceiling,
    12 %, leaves room for what the model does not price per kernel: the same plans compiled
    peak 7 % lower (77.0 / 62.0) with the same saved tensors. Every run ran, so none may be
    priced out of memory, nor far above its measured peak."""
    rep = reports[("torchtitan_h100.csv", "peak memory")]
    assert rep.counted == 2
    assert rep.mape_pct <= 12.0
    for x in rep.rows:
        if x.used:
            assert x.feasible
            assert 0.8 * x.measured <= x.predicted <= 1.05 * x.measured
