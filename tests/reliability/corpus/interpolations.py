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
    Case(
        "env_text_for_a_number",
        "`data.train_batch_size=${oc.env:BS}` with BS=8 (oc.env gives text)",
        ("data.train_batch_size=${{oc.env:BS}}",),
        ("oc.env gives text ('8')", "data.train_batch_size=$BS", "${oc.decode:${oc.env:BS}}"),
        env={"BS": "8"},
    ),
    Case(
        "interpolation_cycle",
        "`trainer.project_name=${trainer.experiment_name}` and the reverse",
        ("trainer.project_name=${{trainer.experiment_name}}", "trainer.experiment_name=${{trainer.project_name}}"),
        ("trainer.project_name -> trainer.experiment_name -> trainer.project_name", "a plain value"),
    ),
    Case(
        "hydra_resolver",
        "`trainer.experiment_name=${hydra:job.name}`",
        ("trainer.experiment_name=${{hydra:job.name}}",),
        ("${hydra:job.name} reads Hydra's job settings", "trainer.experiment_name=..."),
    ),
)
