from __future__ import annotations

from tests.reliability.corpus.case import Case

OPTIM = "actor_rollout_ref.actor.optim"
TOPIC = "Schedules that outlast the run"
CASES: tuple[Case, ...] = (
    Case(
        "warmup_longer_than_run",
        f"`{OPTIM}.lr_warmup_steps=100` in a run of 4 optimizer steps (2 steps x 2 mini-batches): the lr stays "
        "near 0 for the whole run",
        (f"{OPTIM}.lr_warmup_steps=100",),
        (f"{OPTIM}.lr_warmup_steps=100", "the 4 optimizer step(s)", "below 4", "lr_warmup_steps_ratio"),
    ),
    Case(
        "critic_warmup_longer_than_run",
        "`critic.optim.lr_warmup_steps=4` with `dag=ppo` in a run of 4 critic optimizer steps",
        ("dag=ppo", "algorithm.adv_estimator=gae", "critic.optim.lr_warmup_steps=4"),
        ("critic.optim.lr_warmup_steps=4", "below 4"),
    ),
)
