from __future__ import annotations

from tests.reliability.corpus.case import Case
from tests.reliability.corpus.file_makers import text_file

OPTIM = "actor_rollout_ref.actor.optim"
REWARD_READS_TARGET = (
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    return float(solution_str.strip() == str(extra_info['target']))\n"
)
TOPIC = "Settings that would train next to nothing"
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
    Case(
        "reward_reads_missing_extra_info_key",
        "a custom reward function reads `extra_info['target']`, a key no data file's extra_info has (KeyError on "
        "every response, each scored 0)",
        ("custom_reward_function.path={ws}/reward.py",),
        (
            "compute_score in '<tmp>/reward.py' reads extra_info['target'] (line 2)",
            "'answer'",
            "extra_info.get('target')",
        ),
        make=text_file("reward.py", REWARD_READS_TARGET),
    ),
)
