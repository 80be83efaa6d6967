from __future__ import annotations

from tests.reliability.corpus.case import DECOUPLED, LOG_PROBS, Case

TOPIC = "Off-policy correction"
CASES: tuple[Case, ...] = (
    Case(
        "off_policy_unknown",
        "`actor_rollout_ref.actor.policy_loss.off_policy=areal`",
        ("actor_rollout_ref.actor.policy_loss.off_policy=areal",),
        ("actor_rollout_ref.actor.policy_loss.off_policy", "none, decoupled"),
    ),
    Case(
        "decoupled_without_behaviour_log_probs",
        "decoupled PPO without the rollout's log-probs",
        (DECOUPLED,),
        ("policy_loss.off_policy=decoupled", "calculate_log_probs=true"),
    ),
    Case(
        "behaviour_weight_cap_not_above_one",
        "decoupled PPO with `policy_loss.behav_imp_weight_cap=1`",
        (DECOUPLED, LOG_PROBS, "actor_rollout_ref.actor.policy_loss.behav_imp_weight_cap=1"),
        ("actor_rollout_ref.actor.policy_loss.behav_imp_weight_cap", "> 1"),
    ),
    Case(
        "decoupled_with_tis",
        "decoupled PPO and truncated importance sampling together (the weight applied twice)",
        (DECOUPLED, LOG_PROBS, "actor_rollout_ref.actor.tis_imp_ratio_cap=2"),
        ("tis_imp_ratio_cap=-1",),
    ),
    Case(
        "sequence_mask_without_behaviour_log_probs",
        "`actor.mis_ratio_high=2` without the rollout's log-probs",
        ("actor_rollout_ref.actor.mis_ratio_high=2",),
        ("actor_rollout_ref.actor.mis_ratio_high", "calculate_log_probs=true"),
    ),
    Case(
        "sequence_mask_band_without_one",
        "`actor.mis_ratio_low=1.5` (the band would drop on-policy sequences)",
        (LOG_PROBS, "actor_rollout_ref.actor.mis_ratio_low=1.5"),
        ("actor_rollout_ref.actor.mis_ratio_low=1.5", "(0, 1)"),
    ),
)
