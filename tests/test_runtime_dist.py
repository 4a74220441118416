"""Plans run on local gloo workers, each checked against a single-process reference run.

Each check trains 2 steps (AdamW); before every update it compares the loss and every
gradient on every rank (TP shards gathered) with the whole model trained in one process on
the same global batch. Tolerance 1e-5 (fp32). Workers are forked (milliseconds each), one
launch per plan.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
from torch import nn

from planner.graph.load_spec import load_model_spec
from planner.models import build_model, loss_fn
from planner.runtime.check import CheckResult, check_plans
from planner.runtime.local import init_world, run_local
from tests.test_runtime_plans import make_plan, stage

TOL = 1e-5


def _with_own_loss(spec):
    """The model with a loss of its own (same math): the runtime then all-gathers split logits
    instead of running the loss under loss_parallel."""
    model = build_model(spec, device="cpu")
    model.loss_fn = lambda logits, labels: torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
    return model


def _check(plan, spec_name: str, steps: int = 2, own_loss: bool = False,
           **extra: float) -> CheckResult:
    spec = load_model_spec(spec_name)
    factory = (functools.partial(_with_own_loss, spec) if own_loss
               else functools.partial(build_model, spec, device="cpu"))
    opts = {"seq_len": spec.seq_len, "vocab_size": spec.vocab_size, **extra}
    (res,) = check_plans([(plan, factory, opts)], steps=steps)
    assert res.num_params_checked == res.num_reference_params  # every gradient was compared
    assert res.max_grad_diff <= TOL, res
    assert res.max_loss_diff <= TOL, res
    # A sanity anchor independent of the reference: random tokens over V classes start near
    # ln V (both runs could agree on nonsense otherwise).
    assert abs(res.reference_loss[0] - math.log(spec.vocab_size)) < 0.3
    return res


def test_uneven_1f1b_tp1_to_tp2_tied_embedding_selective_recompute() -> None:
    # tiny GPT (tied embeddings): 2 chain elements on rank 0, 4 on a TP-2 stage whose head
    # holds the tied weight, so the tie is summed between a TP-1 and a TP-2 stage. Gradients
    # clipped to global norm 0.1 (below the model's), as clip_grad_norm_ does on the whole
    # model: the tied weight and the replicated norms must count once, TP shards once each.
    plan = make_plan([{"microbatches": 4, "stages": [
        stage(0, 2, [0]), stage(2, 6, [1, 2], recompute="selective")]}])
    _check(plan, "tiny", max_grad_norm=0.1)


def test_sequence_parallel_tp2_to_tp1_with_full_recompute() -> None:
    # Megatron-SP inside TP stages (residual stream split along the sequence); boundaries stay
    # full, so a TP-2 SP stage feeds a TP-1 stage, which feeds a TP-2 SP stage with the head.
    plan = make_plan([{"microbatches": 3, "stages": [
        stage(0, 3, [0, 1], recompute="full"), stage(3, 4, [2]), stage(4, 6, [3, 4])]}],
        sequence_parallel=True)
    _check(plan, "tiny-llama")


def test_heterogeneous_pipelines_3_to_1_with_full_recompute() -> None:
    # Two pipelines of different shapes and TP degrees: 3 micro-batches through a TP-2 → TP-1
    # pipeline, 1 through a single rank. Gradients meet weighted 3 : 1. Llama with GQA.
    plan = make_plan([
        {"microbatches": 3, "stages": [stage(0, 3, [0, 1]), stage(3, 6, [2], recompute="full")]},
        {"microbatches": 1, "stages": [stage(0, 6, [3])]}])
    _check(plan, "tiny-llama")


def test_interleaved_with_microbatches_not_dividing_into_groups() -> None:
    # 2 device groups (TP 2 and TP 1) × 2 chunks, 3 micro-batches (Megatron's warm-up needs
    # M % S == 0; the runtime lengthens the warm-up until the schedule provably completes).
    # With fp16's loss scaling on (in fp32: scaling by 2^10 is exact), so the gradients the
    # stages exchange are scaled and the update must unscale them.
    plan = make_plan([{"microbatches": 3, "stages": [
        stage(0, 2, [0, 1]), stage(2, 3, [2]), stage(3, 5, [0, 1]), stage(5, 6, [2])]}],
        schedule="interleaved", virtual=2)
    _check(plan, "tiny-llama", loss_scale=1024.0)


def test_gpipe_identical_pipelines_sharded_dp_zero1() -> None:
    # DP over two identical TP-2 → TP-1 pipelines: shards all-reduce TP rank to TP rank, and
    # ZeRO-1 keeps each tensor's Adam state on one of the two DP peers, which broadcasts the
    # update; 3 steps, so steps 2 and 3 see the broadcast weights.
    plan = make_plan([
        {"microbatches": 2, "stages": [stage(0, 3, [0, 1]), stage(3, 6, [2])]},
        {"microbatches": 2, "stages": [stage(0, 3, [3, 4]), stage(3, 6, [5])]}],
        schedule="gpipe", mbs=2, zero1=True)
    _check(plan, "tiny-llama", steps=3)


def _vocab_worker(rank: int, world: int, store_dir: str, plan_dict: dict) -> tuple:
    from planner.runtime.engine import Runner
    from planner.runtime.grads import local_tensor
    from planner.schema import Plan

    init_world(store_dir, "vocab", rank, world)
    model = build_model(load_model_spec("tiny"), device="cpu")
    runner = Runner(Plan.from_dict(plan_dict), rank, {r: r for r in range(world)}, model,
                    torch.device("cpu"))
    emb, head = model.embed.tok.weight, model.head.lm_head.weight
    pos = local_tensor(model.embed.pos.weight)
    return tuple(local_tensor(emb).shape), head is emb, tuple(pos.shape), runner.loss_parallel


def test_vocab_parallel_tied_embedding_and_head_on_one_tp2_stage() -> None:
    # Embedding and head on the same TP-2 ranks, their weight tied: each rank keeps half the
    # vocabulary rows of one shared parameter (position table whole) and half the logits
    # (cross-entropy under loss_parallel), and two such pipelines reduce the shards rank to
    # rank; loss and gradients as in one process.
    plan = make_plan([{"microbatches": 2, "stages": [stage(0, 6, [0, 1])]},
                      {"microbatches": 2, "stages": [stage(0, 6, [2, 3])]}])
    spec = load_model_spec("tiny")
    shapes = run_local(_vocab_worker, 4, plan.to_dict())
    rows = spec.vocab_size // 2
    assert shapes == [((rows, spec.hidden_size), True, (spec.seq_len, spec.hidden_size),
                       True)] * 4
    _check(plan, "tiny")
    # A model's own loss function gets whole (all-gathered) logits instead.
    _check(make_plan([{"microbatches": 2, "stages": [stage(0, 3, [0]), stage(3, 6, [1, 2])]}]),
           "tiny", own_loss=True)


# --- train(): the plan's own model spec, built rank by rank, on synthetic data --------------


def _spec_worker(rank: int, world: int, store_dir: str, plan_dict: dict) -> list[float]:
    from planner.runtime.training import train
    from planner.schema import Plan

    init_world(store_dir, "pg", rank, world)
    return list(train(Plan.from_dict(plan_dict), steps=2, lr=1e-3, log=None).losses)


def test_train_builds_only_its_layers_from_the_plan_spec() -> None:
    # Pipeline 0 is one rank holding embedding and head (tied weight tied again on the rank);
    # pipeline 1 splits them over two ranks. Each rank builds only its elements.
    from planner.runtime.data import synthetic_batch
    from planner.runtime.engine import make_optimizer

    spec = load_model_spec("tiny")
    plan = make_plan([{"microbatches": 2, "stages": [stage(0, 6, [0])]},
                      {"microbatches": 2, "stages": [stage(0, 3, [1]), stage(3, 6, [2])]}],
                     model=spec.model_dump(mode="json"))
    per_rank = run_local(_spec_worker, 3, plan.to_dict())
    ref = build_model(spec, device="cpu")
    opt = make_optimizer(list(ref.parameters()), "adamw", 1e-3)
    expected = []
    for step in range(2):
        x, y = synthetic_batch(step, 4, spec.seq_len, spec.vocab_size)
        opt.zero_grad()
        loss = loss_fn(ref(x), y)
        loss.backward()
        opt.step()
        expected.append(float(loss.detach()))
    for losses in per_rank:
        assert losses == pytest.approx(expected, abs=TOL)


# --- a user's own module through the protocol, trained with train() and a data loader -----

VOCAB, HIDDEN, SEQ, LAYERS = 32, 16, 8, 3


class _UserBlock(nn.Module):
    tp_plan = {"up": "colwise", "down": "rowwise"}

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(HIDDEN)
        self.up = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.down = nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(self.norm(x))))


class _UserModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(7)
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(_UserBlock() for _ in range(LAYERS))
        self.head = nn.Sequential(nn.LayerNorm(HIDDEN), nn.Linear(HIDDEN, VOCAB))

    def loss_fn(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))


def _user_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(100 + step)
    tokens = torch.randint(0, VOCAB, (4, SEQ + 1), generator=gen)
    return tokens[:, :-1], tokens[:, 1:]


def _train_worker(rank: int, world: int, store_dir: str, plan_dict: dict) -> list[float]:
    from planner.runtime.training import train
    from planner.schema import Plan

    init_world(store_dir, "pg", rank, world)
    stats = train(Plan.from_dict(plan_dict), steps=3, model_factory=_UserModel,
                  data_loader=_user_batch, optimizer="sgd", lr=0.5, log=None)
    return list(stats.losses)


def test_user_module_with_train_api_and_data_loader() -> None:
    plan = make_plan([{"microbatches": 2, "stages": [stage(0, 2, [0]), stage(2, 5, [1, 2])]}],
                     mbs=2)
    per_rank = run_local(_train_worker, 3, plan.to_dict())
    ref = _UserModel()
    opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    expected = []
    for step in range(3):
        x, y = _user_batch(step)
        opt.zero_grad()
        h = ref.embed(x)
        for block in ref.layers:
            h = block(h)
        loss = ref.loss_fn(ref.head(h), y)
        loss.backward()
        opt.step()
        expected.append(float(loss.detach()))
    assert expected[2] < expected[0]  # SGD at lr 0.5 learns on a fixed-size toy batch stream
    for losses in per_rank:  # every rank reports the global loss
        assert losses == pytest.approx(expected, abs=TOL)


def _wrong_world_worker(rank: int, world: int, store_dir: str, plan_dict: dict) -> str:
    from planner.errors import HetplanError
    from planner.runtime.training import train
    from planner.schema import Plan

    init_world(store_dir, "pg", rank, world)
    try:
        train(Plan.from_dict(plan_dict), steps=1, model_factory=_UserModel,
              data_loader=_user_batch, log=None)
    except HetplanError as exc:
        return str(exc)
    return "no error"


def test_world_size_mismatch_is_one_clear_line() -> None:
    plan = make_plan([{"microbatches": 2, "stages": [stage(0, 2, [0]), stage(2, 5, [1, 2])]}])
    msgs = run_local(_wrong_world_worker, 2, plan.to_dict())
    assert msgs == ["the plan has 3 ranks but the process group has 2"] * 2


def _scaler_worker(rank: int, world: int, store_dir: str) -> tuple[bool, float, bool, float,
                                                                    list[float]]:
    from planner.runtime.scaler import LossScaler

    init_world(store_dir, "pg", rank, world)
    scaler = LossScaler(init_scale=8.0)
    bad = [torch.tensor([1.0, float("inf") if rank == 0 else 2.0])]
    first = scaler.unscale_or_skip(bad, torch.device("cpu"))
    scale_after_overflow = scaler.scale
    good = [torch.tensor([4.0, 8.0])]
    second = scaler.unscale_or_skip(good, torch.device("cpu"))
    return first, scale_after_overflow, second, scaler.scale, good[0].tolist()


def test_loss_scaler_skips_everywhere_when_one_rank_overflows() -> None:
    # Rank 0 overflows, rank 1 does not: both skip and halve the scale (8 → 4); the next clean
    # step unscales by 4 on both.
    assert run_local(_scaler_worker, 2) == [(False, 4.0, True, 4.0, [1.0, 2.0])] * 2
