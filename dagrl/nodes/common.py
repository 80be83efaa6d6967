"""What more than one node uses, in one place: node modules import these from here, never from each other.

- The rollout engine's session (waking it with the actor's weights, sampling, putting it to sleep) and the sampling
  seeds: the weight_sync and rollout nodes, dynamic sampling's extra rounds and validation.
- Scoring in the rollout layout: the score node and dynamic sampling's rounds.
- Mini-batches, token budgets, sequence masking and masked statistics: the actor, critic, log-prob and distillation
  nodes.
"""

from __future__ import annotations

import contextlib
import numbers
import time
import zlib
from collections import defaultdict
from typing import Iterator

import numpy as np
import torch

from dagrl.algo.advantage import ReduceSum
from dagrl.algo.off_policy import sequence_keep
from dagrl.algo.policy_loss import aggregation_counts, token_weights
from dagrl.config.errors import ConfigError, RunError
from dagrl.config.tree import Cfg
from dagrl.data.batch import Batch
from dagrl.engine.rollout.interface import SamplingSpec
from dagrl.nodes.context import StepContext
from dagrl.plan.schedule import CriticSchedule, Schedule
from dagrl.utils.dist import data_parallel_sums, global_max

# ---- the rollout engine's session and sampling ----


def sync_weights(ctx: StepContext) -> dict[str, float]:
    """Stream the actor's HF-named weights into the rollout when it holds an older version (or none)."""
    if ctx.versions.rollout == ctx.versions.actor and not ctx.rollout.needs_weights:
        return {}
    bucket_bytes = int(ctx.cfg.actor_rollout_ref.rollout.update_weights_bucket_megabytes) << 20
    lora = ctx.cfg.actor_rollout_ref.model.lora
    if lora.rank and not lora.merge:  # adapter-only: the frozen base once (or after the rollout dropped it)
        metrics = {}
        if ctx.rollout.needs_weights:
            metrics = ctx.rollout.load_weights(
                ctx.actor.export_weights(bucket_bytes, adapters=False), ctx.versions.actor
            )
        adapter_metrics = ctx.rollout.load_adapter(ctx.actor.export_adapter(), version=ctx.versions.actor)
        metrics = {k: metrics.get(k, 0.0) + adapter_metrics.get(k, 0.0) for k in {*metrics, *adapter_metrics}}
    else:
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


def sample(ctx: StepContext, prompts: Batch, sampling: SamplingSpec, seed: int) -> tuple[Batch, dict[str, float]]:
    """`sampling.n` responses per prompt inside a rollout session: one turn each, or the multi-turn loop's
    trajectories (actor_rollout_ref.rollout.multi_turn)."""
    if ctx.agent is not None:
        return ctx.agent.generate(ctx.rollout, prompts, sampling, seed, sampling.response_length)
    return ctx.rollout.generate(prompts, sampling, seed=seed), {}


# ---- scoring ----


def score_rows(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    """`token_level_scores`, per-response `score` and `acc` (what dynamic sampling may filter on) and `reward_failed`
    (1 for a response whose scorer failed). No collective, so it may run in the background."""
    scores, metrics, rows = ctx.reward_fn.score_batch(batch, ctx.tokenizer)
    sequence_scores = scores.sum(-1)  # on the CPU: a .item() on the GPU would wait for the other thread's kernels
    metrics.update(
        {
            "critic/score/mean": sequence_scores.mean().item(),
            "critic/score/max": sequence_scores.max().item(),
            "critic/score/min": sequence_scores.min().item(),
        }
    )
    device = batch["responses"].device
    batch["token_level_scores"] = scores.to(device)
    batch["reward_failed"] = rows.pop("failed")
    for key, values in rows.items():
        batch[key] = values.to(device)
    return batch, metrics


def stop_if_every_score_failed(ctx: StepContext, failed: torch.Tensor, model_parallel_size: int) -> None:
    """reward_model.on_error=zero keeps a run going past occasional scorer failures; a step where every response
    failed (a scorer that always raises or returns the wrong type) has no signal at all, and training on zeros
    would look like a run that succeeded. Summed over ranks, so all of them stop together rather than one waiting
    for the others in a collective."""
    totals = data_parallel_sums(
        torch.tensor([float(failed.sum()), float(len(failed))], dtype=torch.float64),
        model_parallel_size=model_parallel_size,
    )
    if totals[1] > 0 and totals[0] >= totals[1]:
        raise RunError(ctx.reward_fn.all_failed_message(int(round(float(totals[1]))), ctx.step))


def scored(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    """`score_rows` in the rollout layout, stopping a step whose every response failed (every rank of a rollout-TP
    group scores the same shard: the sums count it once per rank)."""
    batch, metrics = score_rows(ctx, batch)
    stop_if_every_score_failed(ctx, batch.pop("reward_failed"), model_parallel_size=1)
    return batch, metrics


# ---- mini-batches and statistics of the training nodes ----


def token_budget(section: Cfg, switch: str, budget: str) -> int | None:
    """verl's dynamic batch size: `section.<budget>` tokens per micro-batch when `section.<switch>` is on, else None
    (micro-batches of a fixed row count)."""
    return section[budget] if section[switch] else None


def weighted_mini_batches(
    ctx: StepContext,
    batch: Batch,
    cut: Schedule | CriticSchedule,
    shuffle: bool,
    loss_agg_mode: str,
    loss_scale_factor: float | None,
) -> Iterator[Batch]:
    """`cut.ppo_epochs` passes over this rank's rows in mini-batches of `cut.mini_batch_rows_per_rank` rows (the step's
    schedule, the actor's or the critic's; reshuffled each pass when `shuffle`). Each mini-batch gets
    `token_weights` for its global `loss_agg_mode` aggregate and `token_mean_weights` (a global token mean, for
    metrics), both from token and sequence counts summed over the DP ranks. Tokens are those of `loss_mask` where
    the batch has one (sequence masking), else of `response_mask`; sequences are those with a response token, masked
    or not, since verl's seq-mean modes divide by the nominal ppo_mini_batch_size x rollout.n however many it
    rejected."""
    for epoch in range(cut.ppo_epochs):
        order = np.arange(len(batch))
        if shuffle:
            order = np.random.default_rng([ctx.cfg.data.seed, ctx.step, epoch]).permutation(len(batch))
        for mini_batch in batch.select(order).split(cut.mini_batch_rows_per_rank):
            mask = mini_batch.get("loss_mask", mini_batch["response_mask"])
            counts = torch.stack([aggregation_counts(mask)[0], aggregation_counts(mini_batch["response_mask"])[1]])
            tokens, sequences = ctx.dp_sums(counts).tolist()
            mini_batch["token_weights"] = token_weights(mask, loss_agg_mode, tokens, sequences, loss_scale_factor)
            mini_batch["token_mean_weights"] = token_weights(mask, "token-mean", tokens)  # clip fractions, ppo_kl
            yield mini_batch


def mean_over_mini_batches(steps: list[dict[str, float]]) -> dict[str, float]:
    """Each metric's mean over the optimizer steps of one update."""
    per_key: dict[str, list[float]] = defaultdict(list)
    for metrics in steps:
        for key, value in metrics.items():
            per_key[key].append(value)
    return {key: float(np.mean(values)) for key, values in per_key.items()}


NO_ROLLOUT_LOG_PROBS = (
    "but the batch has none (a rollout returns them with calculate_log_probs=true or partial rollout): set "
    "actor_rollout_ref.rollout.calculate_log_probs=true"
)


def reject_sequences(cfg: Cfg, batch: Batch) -> Batch:
    """A copy of the batch with `loss_mask` = response_mask without the sequences outside [mis_ratio_low,
    mis_ratio_high]; the batch itself when no band is set, or when it has the mask already."""
    actor = cfg.actor_rollout_ref.actor
    band = (actor.mis_ratio_low, actor.mis_ratio_high)
    if band == (None, None) or "loss_mask" in batch:
        return batch
    if "rollout_log_probs" not in batch:
        raise RunError(f"actor_rollout_ref.actor.mis_ratio_* need the rollout's log-probs, {NO_ROLLOUT_LOG_PROBS}")
    mask = batch["response_mask"]
    keep = sequence_keep(batch["old_log_probs"], batch["rollout_log_probs"], mask, *band)
    return batch.union(Batch({"loss_mask": mask * keep.unsqueeze(-1).to(mask.dtype)}))


def masked_stats(prefix: str, values: torch.Tensor, mask: torch.Tensor, reduce_sum: ReduceSum) -> dict[str, float]:
    """<prefix>/mean, /max, /min over the response tokens of the global batch (0 when it has none)."""
    valid = values[mask.bool()].double()
    count, total = reduce_sum(
        torch.stack([torch.tensor(float(valid.numel()), dtype=torch.float64), valid.sum()])
    ).tolist()
    local = torch.stack([valid.max(), -valid.min()]) if valid.numel() else torch.full((2,), float("-inf"))
    high, neg_low = global_max(local).tolist()
    if count == 0:
        return {f"{prefix}/mean": 0.0, f"{prefix}/max": 0.0, f"{prefix}/min": 0.0}
    return {f"{prefix}/mean": total / count, f"{prefix}/max": high, f"{prefix}/min": -neg_low}
