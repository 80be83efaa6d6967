"""The distillation section: each key's type, default, range, choices and doc (conf/distillation/default.yaml is
written from it)."""

from __future__ import annotations

from dataclasses import dataclass

from dagrl.algo.catalog import KL_ESTIMATORS
from dagrl.config.schema.spec import LOG_PROB_FLOOR, POSITIVE, POSITIVE_INT, ModelDir, Section, hinted, key, section


@dataclass(frozen=True)
class TeacherModel(Section):
    """the frozen teacher"""

    model_path: ModelDir | None = key(
        None, "local HF model directory of the teacher (same vocabulary as actor_rollout_ref.model.path)"
    )
    param_offload: bool = key(False, "keep the teacher's parameters on the host outside its log-prob pass")
    log_prob_micro_batch_size_per_gpu: int = key(
        "${actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu}",
        "responses per teacher forward on one rank "
        "(the old log-prob pass's; lower it for a "
        "teacher much larger than the student)",
        POSITIVE_INT,
    )


@dataclass(frozen=True)
class DistillationLoss(Section):
    """how the teacher's log-probs train the student"""

    loss_mode: str = key(
        "k1",
        "estimator of the per-token reverse KL(student || teacher); k1 is the exact log-ratio",
        choices=KL_ESTIMATORS.choices,
    )
    use_policy_gradient: bool = key(
        True, "the KL as a per-token reward in the policy gradient (the only way dagrl has)"
    )
    use_task_rewards: bool = key(
        True, "add the task's advantage (algorithm.adv_estimator on the reward) to the distillation term"
    )
    distillation_loss_coef: float = key(
        1.0, "weight of the distillation term when use_task_rewards (alone it has weight 1)", POSITIVE
    )
    loss_max_clamp: float | None = key(
        10.0, "per-token KL estimates above this are cut to it; null = no cut", hinted(POSITIVE, "null for no cap")
    )
    log_prob_min_clamp: float | None = key(
        -10.0, "student and teacher log-probs below this are raised to it first; null = no floor", LOG_PROB_FLOOR
    )


@dataclass(frozen=True)
class Distillation(Section):
    """On-policy distillation (verl's distillation.* names; dag=opd runs it): the student samples, a frozen teacher
    scores the sampled tokens, and the per-token reverse KL between them is the student's reward (Thinking Machines'
    on-policy distillation), alone or added to the task's advantage. The teacher is a Megatron model in the actor's
    layout and dtype: any size whose heads and layers that layout divides, with the student's tokenizer."""

    enabled: bool = key(False, "on: dag=opd's teacher_log_prob and distill nodes run (dag=opd sets it)")
    teacher_model: TeacherModel = section(TeacherModel, "the frozen teacher")
    distillation_loss: DistillationLoss = section(DistillationLoss, "how the teacher's log-probs train the student")
