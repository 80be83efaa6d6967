"""The weight_sync node wakes the rollout engine with the actor's latest weights; the rollout node after it samples n
responses per prompt and puts the engine back to sleep."""

from __future__ import annotations

import contextlib
import numbers
import time
import zlib
from dataclasses import replace
from typing import Iterator

import torch

from dagrl.algo.catalog import ADV_ESTIMATORS
from dagrl.config.errors import ConfigError
from dagrl.data.batch import Batch
from dagrl.engine.rollout.interface import SamplingSpec
from dagrl.nodes.context import StepContext
from dagrl.utils.dist import global_max


def sync_weights(ctx: StepContext) -> dict[str, float]:
    """Stream the actor's HF-named weights into the rollout when it holds an older version (or none)."""
    if ctx.versions.rollout == ctx.versions.actor and not ctx.rollout.needs_weights:
        return {}
    bucket_bytes = int(ctx.cfg.actor_rollout_ref.rollout.update_weights_bucket_megabytes) << 20
    metrics = ctx.rollout.load_weights(ctx.actor.export_weights(bucket_bytes), version=ctx.versions.actor)
    ctx.versions.rollout = ctx.versions.actor
    return metrics


def wake_rollout(ctx: StepContext) -> tuple[dict[str, float], float]:
    """The memory choreography before a rollout on a GPU shared with the actor: the weight-sync metrics, and its
    seconds.

    Optimizer state and grads leave the device first (training does not need them until the update), the
    rollout's weights come back and are refreshed bucket by bucket from the actor, then the actor's (and the
    reference's, teacher's and critic's) parameters leave too, and only then does the rollout take its KV cache; with
    rollout.offload_train_state=false nothing leaves beyond what the *_offload flags keep on the host. After
    generating, `put_rollout_to_sleep`; the actor's phases bring back what each needs.
    """
    start = time.perf_counter()
    colocated = ctx.rollout.colocated
    # offload_train_state=false: the state stays where the *_offload flags keep it between phases (verl's way). The
    # KV cache is as large either way: vLLM sized it at start-up, beside the resident actor.
    offload = colocated and ctx.cfg.actor_rollout_ref.rollout.offload_train_state
    trainable = [engine for engine in (ctx.actor, ctx.critic) if engine is not None]
    if offload:
        for engine in trainable:
            engine.offload_grads()
            engine.offload_optimizer()
    ctx.rollout.wake_weights()
    metrics = sync_weights(ctx)
    if offload:
        for engine in (*trainable, ctx.reference, ctx.teacher):
            if engine is not None:
                engine.offload_params()
    elif colocated and torch.cuda.is_available():
        torch.cuda.empty_cache()  # the phases' freed blocks (activations, sync buckets) back to the driver for vLLM
    ctx.rollout.wake_cache()
    return metrics, time.perf_counter() - start


def put_rollout_to_sleep(ctx: StepContext, woke_s: float) -> dict[str, float]:
    """The rollout sleeps after generating; `timing_s/rollout_switch`: the seconds of the whole choreography
    (offloads, wake-ups, weight sync: `woke_s`, and the sleep), which a rollout pool of its own never pays."""
    start = time.perf_counter()
    ctx.rollout.sleep()
    return {"timing_s/rollout_switch": woke_s + time.perf_counter() - start}


def weight_sync(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    """Node (role weight_sync): wakes the rollout engine with the actor's latest weights for the rollout node after
    it, which puts it back to sleep (`wake_rollout`)."""
    metrics, ctx.wake.switch_s = wake_rollout(ctx)
    return batch, metrics


@contextlib.contextmanager
def rollout_session(ctx: StepContext) -> Iterator[dict[str, float]]:
    """One rollout outside the graph's weight_sync and rollout nodes (validation, dynamic sampling's extra rounds):
    woken with the actor's weights, put to sleep at the end. Yields the weight-sync metrics, and
    `timing_s/rollout_switch` once it ends."""
    metrics, woke_s = wake_rollout(ctx)
    try:
        yield metrics
    finally:
        metrics.update(put_rollout_to_sleep(ctx, woke_s))


@contextlib.contextmanager
def woken(ctx: StepContext) -> Iterator[dict[str, float]]:
    """The rollout the weight_sync node woke, put to sleep at the end; yields a dict that gets
    `timing_s/rollout_switch` then."""
    woke_s, ctx.wake.switch_s = ctx.wake.switch_s, None
    if woke_s is None:
        raise RuntimeError(
            "the rollout engine is asleep: a rollout node runs after a weight_sync node "
            "(dagrl.nodes.rollout:weight_sync), which wakes it"
        )
    metrics: dict[str, float] = {}
    try:
        yield metrics
    finally:
        metrics.update(put_rollout_to_sleep(ctx, woke_s))


def sampling_seed(base_seed: int, step: int, rollout_dp_rank: int, purpose: str) -> int:
    """A seed fixed by (seed, step, rollout-DP rank, purpose): resumed runs sample exactly what the original did,
    and the ranks of one rollout-TP group (one vLLM engine) send identical requests."""
    return zlib.crc32(f"{base_seed}/{step}/{rollout_dp_rank}/{purpose}".encode()) & 0x7FFFFFFF


def rollout_dp_rank(ctx: StepContext) -> int:
    """Consecutive ranks form one rollout-TP group and share a data shard."""
    return ctx.shape.layout.rollout_dp_rank(ctx.rank)


def train_sampling(ctx: StepContext, prompts: Batch | None = None) -> SamplingSpec:
    """The training rollout's sampling; for `prompts`, with their rows' own response limits (response_limits)."""
    rollout = ctx.cfg.actor_rollout_ref.rollout
    length = ctx.shape.response_length
    return SamplingSpec(
        n=rollout.n,
        temperature=rollout.temperature,
        top_p=rollout.top_p,
        top_k=rollout.top_k,
        do_sample=rollout.do_sample,
        response_length=length,
        ignore_eos=rollout.ignore_eos,
        response_lengths=None if prompts is None else response_limits(prompts, length),
    )


def response_limits(prompts: Batch, response_length: int) -> tuple[int, ...] | None:
    """Each prompt row's response limit: its `extra_info.max_response_length` (a long-tailed workload's lengths),
    capped at `response_length`, which rows without one get; None when no row has one."""
    extra = prompts.get("extra_info")
    infos = [] if extra is None else [info or {} for info in extra]
    if all(info.get("max_response_length") is None for info in infos):  # parquet structs fill absent keys: None
        return None
    limits = []
    for row, info in enumerate(infos):
        value = info.get("max_response_length")
        if value is None:
            limits.append(response_length)
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not float(value).is_integer() or value < 1:
            index = prompts["index"][row] if "index" in prompts else row
            raise ConfigError(
                "extra_info.max_response_length",
                f"extra_info.max_response_length={value!r} of prompt row {index} is not a positive "
                f"integer; set it to a token count >= 1 (capped at data.max_response_length) or drop "
                f"the key from the row",
            )
        limits.append(min(int(value), response_length))
    return tuple(limits)


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


def sample(ctx: StepContext, prompts: Batch, sampling: SamplingSpec, seed: int) -> tuple[Batch, dict[str, float]]:
    """`sampling.n` responses per prompt inside a rollout session: one turn each, or the multi-turn loop's
    trajectories (actor_rollout_ref.rollout.multi_turn)."""
    if ctx.agent is not None:
        return ctx.agent.generate(ctx.rollout, prompts, sampling, seed, sampling.response_length)
    return ctx.rollout.generate(prompts, sampling, seed=seed), {}


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
