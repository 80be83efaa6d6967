from __future__ import annotations

from tests.reliability.corpus.case import Case

TOPIC = "Non-finite numbers"
CASES: tuple[Case, ...] = (
    Case(
        "inf_lr",
        "`actor_rollout_ref.actor.optim.lr=inf`",
        ("actor_rollout_ref.actor.optim.lr=inf",),
        ("actor_rollout_ref.actor.optim.lr=inf", "finite"),
    ),
    Case(
        "nan_entropy_coeff",
        "`actor_rollout_ref.actor.entropy_coeff=nan`",
        ("actor_rollout_ref.actor.entropy_coeff=nan",),
        ("actor_rollout_ref.actor.entropy_coeff=nan", "finite"),
    ),
    Case(
        "inf_temperature",
        "`actor_rollout_ref.rollout.temperature=inf`",
        ("actor_rollout_ref.rollout.temperature=inf",),
        ("actor_rollout_ref.rollout.temperature=inf", "finite"),
    ),
    Case(
        "lr_beyond_float32",
        "`actor_rollout_ref.actor.optim.lr=1e39` (no fp32 optimizer can hold it)",
        ("actor_rollout_ref.actor.optim.lr=1e39",),
        ("actor_rollout_ref.actor.optim.lr", "float32"),
    ),
)
