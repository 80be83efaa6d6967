from __future__ import annotations

from tests.reliability.corpus.case import Case

TOPIC = "Interpolations and shapes OmegaConf refuses while composing"
CASES: tuple[Case, ...] = (
    Case(
        "dollar_brace_home",
        "`data.train_files='${HOME}/data/train.parquet'` (the shell's syntax)",
        ("data.train_files=${{HOME}}/data/train.parquet",),
        ("${HOME} is read as a config key", "${oc.env:HOME}"),
    ),
    Case(
        "env_resolver_old_name",
        "`default_local_dir=${env:HOME}/ckpts` (OmegaConf 1's resolver)",
        ("trainer.default_local_dir=${{env:HOME}}/ckpts",),
        ("no interpolation resolver 'env'", "oc.env"),
    ),
    Case(
        "logger_as_map",
        "`trainer.logger={console: true}`",
        ("trainer.logger={{console: true}}",),
        ("trainer.logger is a list, not a map", "trainer.logger=["),
    ),
    Case(
        "reward_kwargs_as_list",
        "`custom_reward_function.reward_kwargs=[scale,2]`",
        ("custom_reward_function.reward_kwargs=[scale,2]",),
        ("is a map, not a list", "+custom_reward_function.reward_kwargs.<name>=<value>"),
    ),
    Case(
        "interpolation_unclosed",
        "`${...` without its closing brace",
        ("actor_rollout_ref.rollout.n=${{data.train_batch_size",),
        ("close the interpolation", "actor_rollout_ref.rollout.n=${data.train_batch_size}"),
    ),
)
