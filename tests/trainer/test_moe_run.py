"""Mixture-of-experts GRPO runs on CPU over two processes with the hf rollout, whose fused expert tensors
(transformers >= 5) take the actor's per-expert export at every weight sync: a tiny qwen3_moe at EP2 (the
distributed optimizer on: the dense params' Adam state sharded over DP2, the experts' kept in their expert-DP group)
and at TP2 x EP2 (attention TP2/DP1 and experts EP2/ETP1 in one world of 2), where the rollout's token log-probs
(partial rollout keeps them) equal the actor's. kill -9 inside step 3 and a relaunch reproduce the uninterrupted
run's metrics and its saved weights, Adam state and RNG exactly; two seeded runs agree."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from tests.conftest import cpu_run_overrides, make_tiny_model_dir
from tests.helpers import metrics_by_step, run_in_session, straight_and_resumed
from tests.reliability.test_self_healing import torchrun
from tests.trainer.test_end_to_end import REWARD

MEGATRON = "actor_rollout_ref.actor.megatron"
EP2 = {f"{MEGATRON}.expert_model_parallel_size": 2, f"{MEGATRON}.use_distributed_optimizer": True}
TP2_EP2 = {
    f"{MEGATRON}.tensor_model_parallel_size": 2,
    f"{MEGATRON}.sequence_parallel": True,  # Megatron's rule for MoE under TP
    f"{MEGATRON}.expert_model_parallel_size": 2,
    f"{MEGATRON}.expert_tensor_parallel_size": 1,
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,  # the hf rollout: a full model on each rank
}
# the hf rollout keeps its token log-probs under partial rollout: their gap to the actor's checks the weights
WITH_ROLLOUT_LOG_PROBS = {"async_training.partial_rollout": True}


@pytest.fixture(scope="module")
def moe_model(tmp_path_factory) -> Path:
    return make_tiny_model_dir(tmp_path_factory.mktemp("moe") / "model", family="qwen3_moe")


def moe_args(model: Path, data: dict[str, str], layout: dict, **extra) -> Callable[[Path], list[str]]:
    return lambda out: cpu_run_overrides(
        model,
        data,
        out,
        **{
            "trainer.n_gpus_per_node": 2,
            "custom_reward_function.path": str(REWARD),
            "trainer.val_before_train": False,
            **layout,
            **extra,
        },
    )


THREE_STEPS = {"trainer.total_training_steps": 3, "trainer.save_freq": 1}


@pytest.fixture(scope="module")
def ep2_runs(moe_model, tiny_data, tmp_path_factory) -> tuple[Path, Path]:
    """EP2, 3 steps saving each: uninterrupted, and killed (every rank) inside step 3's update then relaunched."""
    args = moe_args(moe_model, tiny_data, EP2, **THREE_STEPS)
    return straight_and_resumed(args, tmp_path_factory.mktemp("ep2"), launch=torchrun)


def sync_bytes(out: Path) -> dict[int, float]:
    return {
        row["step"]: row.get("perf/weight_sync_gb", 0) * 1e9 for row in map(json.loads, (out / "metrics.jsonl").open())
    }


def model_bytes(model: Path) -> tuple[int, int]:
    """(all tensors, expert tensors) of the HF checkpoint, in bytes."""
    from safetensors import safe_open

    total = experts = 0
    for file in model.glob("*.safetensors"):
        with safe_open(str(file), "pt") as tensors:
            for name in tensors.keys():
                size = tensors.get_slice(name).get_shape()
                nbytes = math.prod(size) * 4  # float32 throughout (cpu_run_overrides)
                total, experts = total + nbytes, experts + nbytes * (".experts." in name)
    return total, experts


def test_moe_grpo_at_ep2_trains_and_syncs_the_experts_to_the_rollout(ep2_runs, moe_model):
    straight, _ = ep2_runs
    metrics = metrics_by_step(straight)
    assert sorted(metrics) == [1, 2, 3], metrics
    for step in (1, 2, 3):
        assert math.isfinite(metrics[step]["actor/grad_norm"]) and metrics[step]["actor/grad_norm"] > 0
    total, experts = model_bytes(moe_model)
    # step 2 samples with step 1's update: every tensor went across once, both EP ranks' experts included
    assert experts > 0 and sync_bytes(straight)[2] == total


def flat_checkpoint(actor_dir: Path, scratch: Path) -> dict[str, Any]:
    """Every entry of a Megatron dist checkpoint (weights, optimizer state, RNG), read in this process."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(str(actor_dir), str(scratch))
    flat: dict[str, Any] = {}

    def walk(tree: dict, prefix: str) -> None:
        for key, value in tree.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            else:
                flat[f"{prefix}{key}"] = value

    walk(torch.load(scratch, weights_only=False), "")
    return flat


def same(a: Any, b: Any) -> bool:
    """Exact equality of checkpoint entries: tensors (dtype too), numpy arrays (RNG states) and containers of them."""
    import numpy as np

    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def assert_same_checkpoint(a: Path, b: Path, scratch: Path) -> dict[str, Any]:
    first, second = flat_checkpoint(a, scratch / "a.pt"), flat_checkpoint(b, scratch / "b.pt")
    assert sorted(first) == sorted(second)
    differ = [key for key, value in first.items() if not same(value, second[key])]
    assert not differ, differ[:5]
    return first


def assert_exact_resume(straight: Path, resumed: Path, scratch: Path) -> None:
    """Steps 1-2 of the killed run are a second seeded run's (the same metrics); step 3 is the relaunch's, and its
    checkpoint holds the same weights, Adam state and RNG as the uninterrupted run's."""
    assert metrics_by_step(resumed) == metrics_by_step(straight)
    # the killed run logged steps 1-2 and the relaunch only step 3: it resumed rather than began again
    assert [row["step"] for row in map(json.loads, (resumed / "metrics.jsonl").open())] == [1, 2, 3]
    saved = assert_same_checkpoint(straight / "global_step_3" / "actor", resumed / "global_step_3" / "actor", scratch)
    # what the comparison covered: the experts' and the router's weights and Adam moments
    for part in ("experts.linear_fc1.weight", "experts.linear_fc2.weight", "router.weight"):
        names = [key for key in saved if key.endswith(part)]
        assert any("exp_avg_sq" in key for key in names) and any("optimizer" not in key for key in names), part


def test_moe_kill_9_and_resume_at_ep2_is_exact_and_seeded_runs_repeat(ep2_runs, tmp_path):
    assert_exact_resume(*ep2_runs, tmp_path)


def test_moe_grpo_at_tp2_ep2_trains_and_the_rollout_holds_the_actors_weights(moe_model, tiny_data, tmp_path):
    """Each rank's hf rollout samples with the weights gathered from both TP ranks (attention) and both EP ranks
    (experts): its token log-probs equal the actor's to float32 rounding, before and after an update's sync (an
    expert left stale or misplaced would put the gap at the size of an update)."""
    out = tmp_path / "run"
    code, stderr = run_in_session(
        torchrun(
            moe_args(moe_model, tiny_data, {**TP2_EP2, **WITH_ROLLOUT_LOG_PROBS}, **{"trainer.save_freq": 2})(out)
        ),
        {"OMP_NUM_THREADS": "1"},
    )
    assert code == 0, stderr[-3000:]
    metrics = metrics_by_step(out)
    assert sorted(metrics) == [1, 2], metrics
    for step in (1, 2):
        assert math.isfinite(metrics[step]["actor/grad_norm"]) and metrics[step]["actor/grad_norm"] > 0
        assert metrics[step]["async/staleness_max"] == 0  # every token was sampled with the step's weights
        assert metrics[step]["training/rollout_log_probs_diff_mean"] < 1e-5, metrics[step]
        assert metrics[step]["training/rollout_probs_diff_max"] < 1e-5, metrics[step]
    total, experts = model_bytes(moe_model)
    assert experts > 0 and sync_bytes(out)[2] == total
    assert (out / "global_step_2" / "dagrl_checkpoint.json").is_file()


@pytest.mark.slow  # a minute; the default suite keeps the EP2 kill -9 resume and the TP2 x EP2 run
def test_moe_grpo_kill_9_and_resume_at_tp2_ep2_is_exact(moe_model, tiny_data, tmp_path):
    args = moe_args(moe_model, tiny_data, TP2_EP2, **THREE_STEPS)
    assert_exact_resume(*straight_and_resumed(args, tmp_path, launch=torchrun), tmp_path)
