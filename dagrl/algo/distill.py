"""On-policy distillation's per-token signal: the reverse KL(student || teacher) of the sampled tokens as a reward.

The student samples a response; both models score its tokens; a token the teacher finds likelier than the student
gets a positive advantage, one it finds less likely a negative one, with no discount (each token answers for
itself, as in Thinking Machines' on-policy distillation and verl's `use_policy_gradient`). Added to the task's
advantage the gradient is verl's `policy_loss + distillation_loss_coef x distillation_loss` under the vanilla policy
loss; alone (use_task_rewards=false) it is pure distillation, verl's weight 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dagrl.algo.kl import kl_penalty


@dataclass(frozen=True)
class DistillSpec:
    loss_mode: str  # a KL estimator's name (dagrl/algo/catalog.py KL_ESTIMATORS)
    use_task_rewards: bool
    coef: float  # the distillation term's weight when added to the task advantage
    loss_max_clamp: float | None
    log_prob_min_clamp: float | None


def reverse_kl(student: torch.Tensor, teacher: torch.Tensor, spec: DistillSpec) -> torch.Tensor:
    """The per-token estimate of KL(student || teacher) from the sampled tokens' log-probs, floors and cap applied."""
    student, teacher = student.float(), teacher.float()
    if spec.log_prob_min_clamp is not None:  # a token one model almost never samples would dominate the batch
        student, teacher = student.clamp(min=spec.log_prob_min_clamp), teacher.clamp(min=spec.log_prob_min_clamp)
    kl = kl_penalty(student, teacher, spec.loss_mode)
    return kl if spec.loss_max_clamp is None else kl.clamp(max=spec.loss_max_clamp)


def distill_advantages(
    task_advantages: torch.Tensor, student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor, spec: DistillSpec
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, per-token KL): the task's advantage plus coef x -KL with use_task_rewards, else -KL alone;
    0 outside `mask`."""
    kl = reverse_kl(student, teacher, spec) * mask
    advantages = task_advantages + spec.coef * -kl if spec.use_task_rewards else -kl
    return advantages * mask, kl
