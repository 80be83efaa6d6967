"""Pre-flight of the batch sizes: the global batch, the actor's mini- and micro-batches against the DP ranks of the
actor and the rollout, and the token budgets of dynamic batching (the critic's own sizes are preflight/critic.py's)."""

from __future__ import annotations

import logging

from dagrl.config.checks import divides, get, named, positive_int
from dagrl.config.derived import needs_reference, skips_old_log_prob
from dagrl.config.errors import require
from dagrl.config.tree import Cfg
from dagrl.placement import WorldLayout

logger = logging.getLogger(__name__)


def check_batches(cfg: Cfg, world: WorldLayout, rollout_dp: int | None = None) -> None:
    """Batch sizes against the actor's DP and the rollout's DP (`rollout_dp`: a separate pool's, else the world's)."""
    rollout_dp, actor_dp = rollout_dp or world.rollout_dp, world.dp
    n = positive_int(cfg, "actor_rollout_ref.rollout.n")
    train = positive_int(cfg, "data.train_batch_size")
    mini = positive_int(cfg, "actor_rollout_ref.actor.ppo_mini_batch_size")
    micro = positive_int(cfg, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu")
    forward_only = {
        prefix: positive_int(cfg, f"{prefix}.log_prob_micro_batch_size_per_gpu")
        for prefix in ("actor_rollout_ref.rollout", "actor_rollout_ref.ref")
    }
    positive_int(cfg, "actor_rollout_ref.actor.ppo_epochs")
    positive_int(cfg, "actor_rollout_ref.rollout.val_kwargs.n")
    divides(train, rollout_dp, "data.train_batch_size", f"data.train_batch_size over {rollout_dp} rollout-DP ranks")
    divides(
        train,
        actor_dp,
        "data.train_batch_size",
        f"data.train_batch_size over {actor_dp} actor-DP ranks (GRPO groups stay whole on one rank)",
    )
    divides(
        train,
        mini,
        "actor_rollout_ref.actor.ppo_mini_batch_size",
        "data.train_batch_size by actor_rollout_ref.actor.ppo_mini_batch_size",
    )
    divides(
        mini * n,
        actor_dp,
        "actor_rollout_ref.actor.ppo_mini_batch_size",
        f"ppo_mini_batch_size x rollout.n over {actor_dp} actor-DP ranks",
    )
    divides(
        mini * n // actor_dp,
        micro,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "responses per mini-batch per rank by actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    )
    if not cfg.actor_rollout_ref.actor.use_dynamic_bsz:
        hint_forward_micro_batches(cfg, forward_only, micro)


def hint_forward_micro_batches(cfg: Cfg, forward_only: dict[str, int], train_micro: int) -> None:
    """A forward-only pass (old or reference log-probs) in smaller micro-batches than the update runs more of
    them, each paying the model's fixed per-forward cost (Megatron's layers are launch-bound on small models:
    SmolLM2 on one H100 spent more on 16 old-log-prob forwards than on 4 forward+backward updates). It keeps no
    activations for a backward, so it can take micro-batches at least as large."""
    for prefix, size in forward_only.items():
        used = needs_reference(cfg) if prefix.endswith(".ref") else not skips_old_log_prob(cfg)
        if used and size < train_micro and not get(cfg, f"{prefix}.log_prob_use_dynamic_bsz"):
            logger.warning(
                "%s.log_prob_micro_batch_size_per_gpu=%d is below actor.ppo_micro_batch_size_per_gpu=%d: "
                "the forward-only pass runs %.0fx as many micro-batches as the update; set it to %d or "
                "more (it keeps no activations for a backward)",
                prefix,
                size,
                train_micro,
                train_micro / size,
                train_micro,
            )


# verl's dynamic batch size: each switch and the token budgets it turns on.
DYNAMIC_BATCHING = (
    ("actor_rollout_ref.actor.use_dynamic_bsz", ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu",)),
    (
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz",
        ("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",),
    ),
    ("actor_rollout_ref.ref.log_prob_use_dynamic_bsz", ("actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",)),
    ("critic.use_dynamic_bsz", ("critic.ppo_max_token_len_per_gpu", "critic.forward_max_token_len_per_gpu")),
)


def check_dynamic_batching(cfg: Cfg, sequence_length: int) -> None:
    """Every token budget that is switched on holds at least one whole sequence (prompt + response)."""
    for switch, budgets in DYNAMIC_BATCHING:
        on = get(cfg, switch)
        for key in budgets:
            value = get(cfg, key)
            filed, name = named(cfg, key)
            require(
                not on or (isinstance(value, int) and not isinstance(value, bool) and value >= sequence_length),
                filed,
                f"{name}={value!r} must be an integer >= max_prompt_length + max_response_length = "
                f"{sequence_length} while {switch}=true (a micro-batch holds at least one whole sequence)",
            )
