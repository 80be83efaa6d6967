"""The weight_sync node wakes the rollout engine with the actor's weights; the rollout node after it generates and
puts the engine to sleep: together the choreography one rollout session makes, with the same metrics."""

from types import SimpleNamespace

import pytest
import torch

from dagrl.config.load import compose
from dagrl.config.tree import Cfg
from dagrl.data.batch import Batch
from dagrl.nodes.rollout import generate, weight_sync
from dagrl.nodes.common import rollout_session
from tests.helpers import node_context

PROMPT, RESPONSE = 2, 3


class RecordingRollout:
    """Records the choreography's calls; generates `n` one-token-longer-each responses a prompt."""

    colocated, needs_weights = True, False

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def __getattr__(self, name):
        if name in ("wake_weights", "wake_cache", "sleep"):
            return lambda: self.events.append(name)
        raise AttributeError(name)

    def load_weights(self, buckets, version=0):
        self.events.append(f"load_weights:{len(list(buckets))}")
        return {"timing_s/weight_sync": 0.5, "perf/weight_sync_gb": 0.25}

    def generate(self, prompts: Batch, sampling, seed: int) -> Batch:
        self.events.append("generate")
        out = prompts.repeat_interleave(sampling.n)
        rows = len(out)
        out["prompts"] = torch.ones(rows, PROMPT, dtype=torch.long)
        out["responses"] = torch.ones(rows, RESPONSE, dtype=torch.long)
        out["response_mask"] = torch.ones(rows, RESPONSE, dtype=torch.long)
        out["attention_mask"] = torch.ones(rows, PROMPT + RESPONSE, dtype=torch.long)
        return out


class RecordingActor:
    def __init__(self, events: list[str]) -> None:
        self.events = events

    def __getattr__(self, name):
        if name.startswith("offload_"):
            return lambda: self.events.append(f"actor.{name}")
        raise AttributeError(name)

    def export_weights(self, bucket_bytes):
        yield [("w", torch.zeros(2))]


def context(events: list[str]):
    cfg = Cfg(compose(["actor_rollout_ref.rollout.n=2"]))
    ctx = node_context(cfg, actor=RecordingActor(events), rollout=RecordingRollout(events), response_length=RESPONSE)
    ctx.versions.actor = 3  # the rollout holds version -1: stale
    return ctx


def prompts() -> Batch:
    return Batch(columns={"uid": ["a", "b"]})


def test_the_weight_sync_node_and_the_rollout_node_make_one_session_between_them():
    events: list[str] = []
    ctx = context(events)
    batch, sync_metrics = weight_sync(ctx, prompts())
    assert events == [
        "actor.offload_grads",
        "actor.offload_optimizer",
        "wake_weights",
        "load_weights:1",
        "actor.offload_params",
        "wake_cache",
    ]
    assert sync_metrics == {"timing_s/weight_sync": 0.5, "perf/weight_sync_gb": 0.25} and ctx.versions.rollout == 3
    out, metrics = generate(ctx, batch)
    assert events[6:] == ["generate", "sleep"] and len(out) == 4
    assert metrics["timing_s/rollout_switch"] > 0 and "timing_s/weight_sync" not in metrics  # the sync node's

    events.clear()  # validation and dynamic sampling's rounds: the same choreography in one block
    with rollout_session(ctx) as session:
        ctx.rollout.generate(prompts(), SimpleNamespace(n=1), seed=0)
    assert events == [
        "actor.offload_grads",
        "actor.offload_optimizer",
        "wake_weights",
        "actor.offload_params",
        "wake_cache",
        "generate",
        "sleep",
    ]  # weights current: no load
    assert set(session) == {"timing_s/rollout_switch"}


def test_a_rollout_node_without_the_weight_sync_before_it_says_so():
    events: list[str] = []
    with pytest.raises(RuntimeError, match="runs after a weight_sync node"):
        generate(context(events), prompts())
    assert "generate" not in events


def test_the_gpu_workers_context_is_a_step_context_a_session_runs_on():
    """tests/gpu/vllm_worker.py's context (the GPU test's) is the trainer's StepContext: the engines, the bucket size
    and the versions rollout_session reads."""
    from dagrl.nodes.context import StepContext
    from tests.gpu.vllm_worker import session_context

    events: list[str] = []
    rollout = RecordingRollout(events)
    rollout.colocated = False
    ctx = session_context(RecordingActor(events), rollout, 1, Batch({"input_ids": torch.ones(2, 4, dtype=torch.long)}))
    assert isinstance(ctx, StepContext) and ctx.cfg.actor_rollout_ref.rollout.update_weights_bucket_megabytes == 1
    with rollout_session(ctx) as metrics:
        rollout.generate(prompts(), SimpleNamespace(n=1), seed=0)
    assert events == ["wake_weights", "load_weights:1", "wake_cache", "generate", "sleep"]
    assert metrics["timing_s/weight_sync"] == 0.5 and metrics["timing_s/rollout_switch"] > 0
    assert ctx.versions.rollout == ctx.versions.actor == 0


def test_the_gpu_workers_session_syncs_the_actor_into_the_hf_rollout_on_cpu(tiny_model):
    """The same context around a real actor and the hf rollout: the session loads the actor's weights (changed by a
    step, so the sync is seen) into the rollout before it generates."""
    from dagrl.engine.base import MegatronEngineSpec, OptimSpec
    from dagrl.engine.megatron.actor import MegatronActorEngine
    from dagrl.engine.rollout.hf import HFRollout
    from dagrl.engine.rollout.interface import SamplingSpec
    from tests.gpu.vllm_worker import session_context

    actor = MegatronActorEngine(MegatronEngineSpec(model_path=str(tiny_model), optim=OptimSpec(lr=1e-3)))
    rollout = HFRollout(str(tiny_model), [2], 0, torch.device("cpu"))
    with torch.no_grad():
        for param in actor.modules[0].parameters():
            param.add_(0.5)
    ids = torch.randint(3, 64, (2, 4), generator=torch.Generator().manual_seed(0))
    batch = Batch(
        {"input_ids": ids, "attention_mask": torch.ones_like(ids), "position_ids": torch.arange(4).repeat(2, 1)}
    )
    ctx = session_context(actor, rollout, 1, batch)
    with rollout_session(ctx) as metrics:
        out = rollout.generate(batch, SamplingSpec(n=1, do_sample=False, response_length=RESPONSE), seed=0)
    assert metrics["timing_s/weight_sync"] > 0 and ctx.versions.rollout == 0
    exported = dict(pair for bucket in actor.export_weights(1 << 20) for pair in bucket)
    loaded = rollout.model.state_dict()
    assert exported and all(
        torch.equal(loaded[name], tensor.to(loaded[name].dtype)) for name, tensor in exported.items()
    )
    assert out["responses"].shape == (2, RESPONSE)
