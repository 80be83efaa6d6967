"""MoE routing replay in the Megatron actor (dagrl/engine/megatron/router_replay.py): given routes are the routes
every layer takes, in every micro-batch layout, whatever the router's own weights say; recording gives the
router's own routes and their agreement with the given ones."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dagrl.data.batch import Batch
from dagrl.engine.base import MegatronEngineSpec, OptimSpec
from dagrl.engine.megatron.router_replay import RoutingPass
from engine_helpers import fresh_parallel_state, make_batch, sum_loss
from tiny_models import load_hf, make_model_dir, tie_router_weights

EXPERTS, TOP_K, LAYERS = 4, 2, 2


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("moe") / "m", "qwen3_moe")


def engine(path: Path, optim: OptimSpec | None = None, **kwargs):
    from dagrl.engine.megatron.actor import MegatronActorEngine

    return MegatronActorEngine(MegatronEngineSpec(model_path=str(path), optim=optim, router_replay=True, **kwargs))


def random_routes(batch: Batch, seed: int = 0) -> torch.Tensor:
    """[B, P + R, layers, k] distinct random experts at every attended position, -1 elsewhere."""
    g = torch.Generator().manual_seed(seed)
    rows, width = batch["input_ids"].shape
    routes = torch.rand(rows, width, LAYERS, EXPERTS, generator=g).argsort(-1)[..., :TOP_K].to(torch.int16)
    routes[batch["attention_mask"] == 0] = -1
    return routes


def forced_hf_log_probs(model, batch: Batch) -> torch.Tensor:
    """Response log-probs of the HF model with every router's top-k replaced by the batch's routes (an independent
    replay: HF's own layout, left-padded rows flattened row-major)."""
    routes = batch["routed_experts"].long()
    handles = []
    for layer, block in enumerate(model.model.layers):
        gate = block.mlp.gate
        given = routes[:, :, layer].reshape(-1, TOP_K)
        given = torch.where(given < 0, torch.arange(TOP_K), given)

        def forced(module, args, output, given=given):
            logits = output[0]
            top = logits.float().softmax(-1).gather(1, given)
            if module.norm_topk_prob:
                top = top / top.sum(-1, keepdim=True)
            return logits, top.to(logits.dtype), given

        handles.append(gate.register_forward_hook(forced))
    try:
        from engine_helpers import hf_log_probs

        return hf_log_probs(model, batch)[0]
    finally:
        for handle in handles:
            handle.remove()


def routing_maps(actor) -> tuple[list[torch.Tensor], list]:
    """Collects each Megatron router's routing map [tokens, experts] per forward."""
    from megatron.core.transformer.moe.router import TopKRouter

    maps: list[torch.Tensor] = []
    handles = [
        sub.register_forward_hook(lambda m, a, out: maps.append((m.layer_number - 1, out[1].clone())))
        for module in actor.modules
        for sub in module.modules()
        if isinstance(sub, TopKRouter)
    ]
    return maps, handles


def expected_order(batch: Batch) -> list[list[int]]:
    """Each row's input_ids columns in the order the actor runs them: valid prompt tokens, then the response up to
    its last mask token."""
    prompt_len = batch["input_ids"].shape[1] - batch["responses"].shape[1]
    order = []
    for row in range(len(batch)):
        mask = batch["attention_mask"][row]
        last = int(batch["response_mask"][row].nonzero().max()) + 1
        order.append([c for c in range(prompt_len) if mask[c]] + list(range(prompt_len, prompt_len + last)))
    return order


def test_replay_forces_the_given_routes_at_every_layer(moe_dir):
    actor = engine(moe_dir)
    batch = make_batch(rows=4, vocab=128)
    batch["routed_experts"] = random_routes(batch)
    maps, handles = routing_maps(actor)
    log_probs, _ = actor.compute_log_prob(batch, 4, 1.0, with_entropy=False, routing=RoutingPass(replay=True))
    for handle in handles:
        handle.remove()
    assert sorted(layer for layer, _ in maps) == list(range(LAYERS))  # one micro-batch: each layer routed once
    order = expected_order(batch)
    seq = len(maps[0][1]) // len(batch)
    for layer, routing_map in maps:
        chosen = routing_map.view(seq, len(batch), EXPERTS)  # Megatron's sequence-major token order
        for row, columns in enumerate(order):
            for position, column in enumerate(columns):
                want = torch.zeros(EXPERTS, dtype=torch.bool)
                want[batch["routed_experts"][row, column, layer].long()] = True
                assert torch.equal(chosen[position, row], want), (layer, row, column)
    forced = forced_hf_log_probs(load_hf(moe_dir), batch)
    torch.testing.assert_close(log_probs, forced, atol=2e-5, rtol=1e-5)
    own, _ = actor.compute_log_prob(batch, 4, 1.0, with_entropy=False)
    assert not torch.allclose(own, log_probs, atol=1e-3)  # random routes are not the router's own


def test_a_perturbed_router_changes_nothing_under_replay(moe_dir):
    """Every token is given experts 0 and 1; the router's rows of experts 2 and 3 are then pushed up, so its own
    choice changes everywhere. Under replay the gate weights are the softmax over the given experts' logits
    (norm_topk_prob), which the push leaves alone: the log-probs stay those of the unperturbed model."""
    batch = make_batch(rows=4)
    routes = torch.zeros(*batch["input_ids"].shape, LAYERS, TOP_K, dtype=torch.int16)
    routes[..., 1] = 1
    batch["routed_experts"] = routes
    results = []
    for perturb in (False, True):
        actor = engine(moe_dir)
        if perturb:
            with torch.no_grad():
                for name, param in actor.modules[0].named_parameters():
                    if "router" in name:
                        param[2:] += 10 * torch.randn_like(param[2:])
        replayed, _ = actor.compute_log_prob(batch, 2, 1.0, with_entropy=False, routing=RoutingPass(replay=True))
        agreement = RoutingPass(record=True)
        own, _ = actor.compute_log_prob(batch, 2, 1.0, with_entropy=False, routing=agreement)
        results.append((replayed, own, agreement.agreed / agreement.compared))
    (replayed, own, agreed), (replayed_perturbed, own_perturbed, agreed_perturbed) = results
    torch.testing.assert_close(replayed, replayed_perturbed, atol=1e-6, rtol=1e-6)
    assert not torch.allclose(own, own_perturbed, atol=1e-3)
    assert agreed_perturbed < agreed


def test_switched_on_but_unused_is_bit_identical(moe_dir):
    """The replay hooks without a routing pass (mode=disabled with the hooks built) change no number."""
    from dagrl.engine.megatron.actor import MegatronActorEngine

    batch = make_batch(rows=4)
    adam = OptimSpec(lr=1e-3, weight_decay=0.0, clip_grad=1e9, total_training_steps=10)
    results = []
    for hooks in (False, True):
        actor = MegatronActorEngine(MegatronEngineSpec(model_path=str(moe_dir), optim=adam, router_replay=hooks))
        metrics = actor.train_step(batch, sum_loss, 2, 1.0)
        results.append((metrics, actor.compute_log_prob(batch, 2, 1.0, with_entropy=True)))
    (m0, (lp0, e0)), (m1, (lp1, e1)) = results
    assert m0 == m1 and torch.equal(lp0, lp1) and torch.equal(e0, e1)


@pytest.mark.parametrize("layout", ["packed", "dynamic"])
def test_replay_is_the_same_packed_and_by_token_budget(moe_dir, layout):
    batch = make_batch(rows=5)
    batch["routed_experts"] = random_routes(batch, seed=2)
    padded = engine(moe_dir)
    want, _ = padded.compute_log_prob(batch, 2, 1.0, with_entropy=False, routing=RoutingPass(replay=True))
    other = engine(moe_dir, remove_padding=layout == "packed")
    budget = 20 if layout == "dynamic" else None
    got, _ = other.compute_log_prob(batch, 2, 1.0, False, max_token_len=budget, routing=RoutingPass(replay=True))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("remove_padding", [False, True])
def test_recorded_routes_are_the_routers_own_and_replay_to_the_same_numbers(moe_dir, remove_padding):
    """R2: the old-log-prob pass records the router's own routes; replaying them reproduces that pass, and they
    agree with themselves entirely. Random routes agree by chance only."""
    actor = engine(moe_dir, remove_padding=remove_padding)
    batch = make_batch(rows=4)
    record = RoutingPass(record=True, keep=True)
    own, _ = actor.compute_log_prob(batch, 2, 1.0, with_entropy=False, routing=record)
    routes = record.routes
    assert routes.shape == (4, batch["input_ids"].shape[1], LAYERS, TOP_K)
    attended = torch.zeros_like(batch["attention_mask"], dtype=torch.bool)
    for row, columns in enumerate(expected_order(batch)):
        attended[row, columns] = True
    assert (routes[attended] >= 0).all() and (routes[~attended] == -1).all()
    batch["routed_experts"] = routes
    check = RoutingPass(replay=True, record=True)
    replayed, _ = actor.compute_log_prob(batch, 2, 1.0, with_entropy=False, routing=check)
    assert torch.equal(replayed, own)
    assert check.agreed == check.compared == attended.sum() * LAYERS * TOP_K
    batch["routed_experts"] = random_routes(batch, seed=3)
    chance = RoutingPass(record=True)
    actor.compute_log_prob(batch, 2, 1.0, with_entropy=False, routing=chance)
    assert chance.compared == batch["attention_mask"].sum() * LAYERS * TOP_K
    assert 0 < chance.agreed < chance.compared


def test_training_under_replay_uses_the_given_routes(moe_dir):
    """The update replays too: its loss is that of the replayed log-probs, not of the router's own."""
    adam = OptimSpec(lr=1e-3, weight_decay=0.0, clip_grad=1e9, total_training_steps=10)
    batch = make_batch(rows=4)
    batch["routed_experts"] = random_routes(batch, seed=4)
    actor = engine(moe_dir, adam)
    replayed, entropy = actor.compute_log_prob(batch, 2, 1.0, with_entropy=True, routing=RoutingPass(replay=True))
    own, _ = actor.compute_log_prob(batch, 2, 1.0, with_entropy=False)
    metrics = actor.train_step(batch, sum_loss, 2, 1.0, routing=RoutingPass(replay=True))
    mask = batch["response_mask"].float()
    want = float(-(replayed * mask).sum() - 0.01 * (entropy * mask).sum())
    assert metrics["loss"] == pytest.approx(want, rel=1e-5)
    assert abs(float(-(own * mask).sum()) - want) > 1e-2


def test_recomputed_forwards_replay_the_same_routes(moe_dir):
    """Activation recompute runs each layer's forward again in the backward: it must take the same routes, so the
    step is the one without recompute (random routes: the router's own would give another gradient)."""
    adam = OptimSpec(lr=1e-3, weight_decay=0.0, clip_grad=1e9, total_training_steps=10)
    batch = make_batch(rows=4)
    batch["routed_experts"] = random_routes(batch, seed=6)
    steps = [
        engine(moe_dir, adam, gradient_checkpointing=recompute).train_step(
            batch, sum_loss, 2, 1.0, routing=RoutingPass(replay=True)
        )
        for recompute in (False, True)
    ]
    assert steps[1]["actor/grad_norm"] == pytest.approx(steps[0]["actor/grad_norm"], rel=1e-5)
    assert steps[1]["loss"] == pytest.approx(steps[0]["loss"], rel=1e-6)


def hf_own_routes(model, batch: Batch) -> torch.Tensor:
    """[B, P + R, layers, k] the HF model's own top-k over the whole batch in one teacher-forced forward."""
    calls = []
    handles = [
        block.mlp.gate.register_forward_hook(lambda m, a, out: calls.append(out[2])) for block in model.model.layers
    ]
    with torch.no_grad():
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"])
    for handle in handles:
        handle.remove()
    rows, width = batch["input_ids"].shape
    return torch.stack([c.view(rows, width, -1) for c in calls], dim=2)


def rollout(path: Path, dtype: torch.dtype = torch.float32):
    from dagrl.engine.rollout.hf import HFRollout

    return HFRollout(str(path), [1], 0, torch.device("cpu"), dtype=dtype, record_routes=True)


def prompts(rows: int = 3, width: int = 6) -> Batch:
    """Left-padded prompts of uneven lengths."""
    ids = torch.randint(2, 128, (rows, width), generator=torch.Generator().manual_seed(rows))
    mask = torch.ones_like(ids)
    for row in range(rows):
        mask[row, : row % width] = 0
    ids = ids * mask
    return Batch({"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(1) - 1).clamp(min=0)})


@pytest.mark.parametrize("n", [1, 2])
def test_the_hf_rollout_records_the_routes_it_generated_with(moe_dir, n):
    """Prefill (shared by a prompt's n samples or not) and every decode step: the routes equal the model's own in
    a teacher-forced forward over the result, at every attended column but each response's last token (-1)."""
    from dagrl.engine.rollout.interface import SamplingSpec

    engine = rollout(moe_dir)
    out = engine.generate(prompts(), SamplingSpec(n=n, response_length=6, temperature=1.0), seed=3)
    routes = out["routed_experts"]
    assert routes.shape == (*out["input_ids"].shape, LAYERS, TOP_K) and routes.dtype == torch.int16
    attended = out["attention_mask"].bool()
    last = torch.zeros_like(attended)
    ends = 6 + out["response_mask"].sum(1) - 1
    last[torch.arange(len(out)), ends] = True
    assert (routes[~attended] == -1).all() and (routes[attended & ~last] >= 0).all()
    # the longest responses' last tokens were never fed back; a row that ended sooner fed its eos on
    longest = out["response_mask"].sum(1) == out["response_mask"].sum(1).max()
    assert (routes[last & longest[:, None]] == -1).all()
    recorded = routes[..., 0, 0] >= 0
    assert recorded.sum() == attended.sum() - longest.sum()
    own = hf_own_routes(engine.model, out)
    assert torch.equal(routes[recorded].long().sort(-1).values, own[recorded].sort(-1).values)


def test_the_hf_rollouts_log_probs_are_the_actors_in_fp32(moe_dir):
    """rollout.calculate_log_probs: the hf rollout returns its sampled tokens' log-probs at the sampling
    temperature, which the fp32 actor reproduces (the rollout/actor log-prob gap metric reads them)."""
    from dagrl.engine.rollout.hf import HFRollout
    from dagrl.engine.rollout.interface import SamplingSpec

    generated = HFRollout(str(moe_dir), [1], 0, torch.device("cpu"), log_probs=True)
    batch = generated.generate(prompts(4), SamplingSpec(n=2, response_length=6, temperature=0.7), seed=1)
    mask = batch["response_mask"].bool()
    assert (batch["rollout_log_probs"][mask] < 0).all() and (batch["rollout_log_probs"][~mask] == 0).all()
    actor, _ = engine(moe_dir).compute_log_prob(batch, 4, 0.7, with_entropy=False)
    torch.testing.assert_close(batch["rollout_log_probs"], actor, atol=1e-4, rtol=1e-4)


def test_tie_heavy_routes_disagree_and_replay_narrows_the_log_prob_gap(tmp_path):
    """A bf16 rollout of a tie-heavy router routes some tokens differently from the fp32 actor: agreement < 1
    without replay; replaying the rollout's routes brings the actor's log-probs closer to the rollout's own."""
    from dagrl.engine.rollout.interface import SamplingSpec

    path = tie_router_weights(make_model_dir(tmp_path / "ties", "qwen3_moe", seed=7))
    generated = rollout(path, torch.bfloat16)
    batch = generated.generate(prompts(4), SamplingSpec(n=2, response_length=6, temperature=1.0), seed=0)
    # the rollout's log-probs of its tokens, under the routes it took (bf16, like its decode steps)
    rollout_log_probs = forced_hf_log_probs(generated.model, batch).float()
    actor = engine(path)
    agreement = RoutingPass(record=True)
    own, _ = actor.compute_log_prob(batch, 4, 1.0, with_entropy=False, routing=agreement)
    replayed, _ = actor.compute_log_prob(batch, 4, 1.0, with_entropy=False, routing=RoutingPass(replay=True))
    assert 0 < agreement.agreed < agreement.compared
    mask = batch["response_mask"].bool()
    gap_own = (own - rollout_log_probs)[mask].abs().mean()
    gap_replayed = (replayed - rollout_log_probs)[mask].abs().mean()
    assert gap_replayed < gap_own


WORLD_LAYOUTS = {
    "pp2": {"pipeline_model_parallel_size": 2},
    "tp2_sp": {"tensor_model_parallel_size": 2, "sequence_parallel": True},
}


def replay_records(actor, batch: Batch) -> dict:
    """Replayed log-probs, the router's own routes and agreement with the batch's, and a replayed step's loss."""
    given = RoutingPass(replay=True)
    log_probs, _ = actor.compute_log_prob(batch, 2, 1.0, with_entropy=False, routing=given)
    record = RoutingPass(record=True, keep=True)
    actor.compute_log_prob(batch, 2, 1.0, with_entropy=False, routing=record)
    metrics = actor.train_step(batch, sum_loss, 2, 1.0, routing=RoutingPass(replay=True))
    return {
        "log_probs": log_probs,
        "routes": record.routes,
        "agreement": (record.agreed, record.compared),
        "loss": metrics["loss"],
    }


def world_batch() -> Batch:
    batch = make_batch(rows=4)
    batch["routed_experts"] = random_routes(batch, seed=5)
    return batch


def prepare_world_job(name: str, work_dir: Path) -> None:
    """The tiny MoE, and what one process computes with it (records.pt)."""
    model_dir = make_model_dir(work_dir / "model", "qwen3_moe", seed=8)
    adam = OptimSpec(lr=1e-3, weight_decay=0.0, clip_grad=1e9, total_training_steps=10)
    torch.save(replay_records(engine(model_dir, adam), world_batch()), work_dir / "expected.pt")


def run_world_job(name: str, work_dir: Path) -> None:
    """On both ranks: the same records at the job's layout, each stage or TP rank replaying its own share."""
    import torch.distributed as dist

    from dagrl.placement import ParallelLayout

    fresh_parallel_state()
    adam = OptimSpec(lr=1e-3, weight_decay=0.0, clip_grad=1e9, total_training_steps=10)
    actor = engine(work_dir / "model", adam, layout=ParallelLayout(**WORLD_LAYOUTS[name]))
    records = replay_records(actor, world_batch())
    if dist.get_rank() == 0:
        torch.save(records, work_dir / "records.pt")


@pytest.mark.parametrize(
    "layout",
    [pytest.param(name, marks=pytest.mark.engine_world(f"test_router_replay:{name}")) for name in WORLD_LAYOUTS],
)
def test_replay_and_record_across_pipeline_stages_and_sequence_parallel_ranks(engine_world, layout):
    """PP2: each stage replays and records its own layers; TP2 with sequence parallelism: each TP rank its slice of
    the tokens. Either gives one process's log-probs, routes, agreement and replayed loss."""
    work_dir = engine_world.result(f"test_router_replay:{layout}")
    got, want = torch.load(work_dir / "records.pt"), torch.load(work_dir / "expected.pt")
    torch.testing.assert_close(got["log_probs"], want["log_probs"], atol=1e-5, rtol=1e-5)
    assert torch.equal(got["routes"], want["routes"]) and got["agreement"] == want["agreement"]
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-5)
