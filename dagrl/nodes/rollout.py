"""The weight_sync node wakes the rollout engine with the actor's latest weights; the rollout node after it samples n
responses per prompt and puts the engine back to sleep."""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from dagrl.algo.catalog import ADV_ESTIMATORS
from dagrl.data.batch import Batch
from dagrl.engine.rollout.interface import SamplingSpec
from dagrl.nodes.common import (
    response_limits,
    rollout_dp_rank,
    sample,
    sampling_seed,
    train_sampling,
    wake_rollout,
    woken,
)
from dagrl.nodes.context import StepContext
from dagrl.utils.dist import global_max


def weight_sync(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    """Node (role weight_sync): wakes the rollout engine with the actor's latest weights for the rollout node after
    it, which puts it back to sleep (`wake_rollout`)."""
    metrics, ctx.wake.switch_s = wake_rollout(ctx)
    return batch, metrics


def response_metrics(batch: Batch, response_length: int) -> dict[str, float]:
    lengths = batch["response_mask"].sum(-1).float()
    prompt_lengths = batch["attention_mask"][:, : batch["prompts"].shape[1]].sum(-1).float()
    limits = response_limits(batch, response_length)  # a row at its own limit is clipped too
    limit = response_length if limits is None else torch.tensor(limits, dtype=torch.float32)
    return {
        "response_length/mean": lengths.mean().item(),
        "response_length/max": lengths.max().item(),
        "response_length/min": lengths.min().item(),
        "response_length/clip_ratio": (lengths >= limit).float().mean().item(),
        "prompt_length/mean": prompt_lengths.mean().item(),
        "prompt_length/max": prompt_lengths.max().item(),
    }


def generate(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    start = time.perf_counter()
    sampling = train_sampling(ctx, batch)
    seed = sampling_seed(ctx.cfg.actor_rollout_ref.rollout.seed, ctx.step, rollout_dp_rank(ctx), "train")
    if ctx.partial is not None:
        out, metrics = generate_partial(ctx, batch, sampling, seed)
    else:
        greedy = None
        with woken(ctx) as metrics:
            out, sampled = sample(ctx, batch, sampling, seed)
            if needs_greedy_baseline(ctx.cfg):  # ReMax: in the same session, no second weight sync or wake-up
                greedy, _ = sample(ctx, batch, replace(sampling, n=1, do_sample=False), seed)
        metrics.update(sampled)
        metrics.update(response_metrics(out, sampling.response_length))
        if greedy is not None:
            out, baseline_metrics = attach_greedy_baselines(ctx, out, greedy)
            metrics.update(baseline_metrics)
    metrics["timing_s/gen_rank_spread"] = wait_for_the_slowest_rank(time.perf_counter() - start)
    return out, metrics


def needs_greedy_baseline(cfg) -> bool:
    """The estimator's baseline is the score of one greedy response per prompt (ReMax)."""
    estimator = ADV_ESTIMATORS.get(cfg.algorithm.adv_estimator)
    return estimator is not None and "reward_baselines" in estimator.needs


def attach_greedy_baselines(ctx: StepContext, out: Batch, greedy: Batch) -> tuple[Batch, dict[str, float]]:
    """`reward_baselines`: each response's prompt's greedy-response score, scored as the sampled ones are (verl
    generates and scores ReMax's baseline in its trainer the same way)."""
    start = time.perf_counter()
    scores, _, _ = ctx.reward_fn.score_batch(greedy, ctx.tokenizer)
    by_prompt = dict(zip(greedy["uid"], scores.sum(-1).tolist()))
    out["reward_baselines"] = torch.tensor(
        [by_prompt[uid] for uid in out["uid"]], dtype=torch.float32, device=out["responses"].device
    )
    return out, {
        "critic/reward_baseline/mean": sum(by_prompt.values()) / max(len(by_prompt), 1),
        "timing_s/reward_baseline": time.perf_counter() - start,
    }


def wait_for_the_slowest_rank(seconds: float) -> float:
    """Each rank generates its own shard, and with long-tailed responses one rank's longest response sets the
    step's pace. Wait for that rank here, so that `timing_s/gen` (this node's seconds) is the slowest rank's
    generation rather than a wait that surfaces in the next node holding a collective (the scorer's all-reduce made
    a rule reward look like 12 s). Returns the slowest minus the fastest rank's seconds."""
    negative_fastest, slowest = global_max(torch.tensor([-seconds, seconds], dtype=torch.float64)).tolist()
    return slowest + negative_fastest


def generate_partial(
    ctx: StepContext, batch: Batch, sampling: SamplingSpec, seed: int
) -> tuple[Batch, dict[str, float]]:
    """async_training.partial_rollout: the step's prompts join the rank's buffer, whose first `share` groups to
    finish are trained on; the rest are carried (nodes/partial_rollout.py)."""
    from dagrl.nodes.partial_rollout import buffer_target, staleness_metrics

    buffer, share = ctx.partial, len(batch)
    buffer.add(batch, batch["position"], seed, sampling)
    round_index = 1
    while len(buffer.groups) < buffer_target(ctx, share):  # the first step fills the buffer beyond one batch
        extra = ctx.draw_prompts(ctx.step, round_index)
        buffer.add(
            extra,
            extra["position"],
            sampling_seed(
                ctx.cfg.actor_rollout_ref.rollout.seed, ctx.step, rollout_dp_rank(ctx), f"train{round_index}"
            ),
            train_sampling(ctx, extra),
        )
        round_index += 1
    # the update of this step starts from version `base`: tokens more than K versions behind it restart
    base = ctx.versions.actor if ctx.update_base is None else ctx.update_base
    options = ctx.cfg.async_training
    restarted = buffer.restart_stale(base - options.max_staleness) if options.restart_stale else 0
    with woken(ctx) as metrics:
        groups = buffer.run(ctx.rollout, sampling, share, ctx.weight_updates)
    if buffer.agent is not None:  # multi-turn trajectories
        from dagrl.agent.partial import batch_of

        out, turns = batch_of(buffer.agent, buffer, groups, sampling.response_length)
        metrics.update(turns)
    else:
        out = buffer.batch(
            groups, sampling.response_length, sampling.stop_ids(ctx.rollout.eos_token_ids), ctx.rollout.pad_token_id
        )
    metrics.update(response_metrics(out, sampling.response_length))
    metrics.update(staleness_metrics(out, base))
    metrics.update({"async/buffer_groups": float(len(buffer.groups)), "async/restarted_groups": float(restarted)})
    if ctx.weight_updates is not None:
        metrics["async/mid_batch_loads"] = float(buffer.reloads)
    return out, metrics
