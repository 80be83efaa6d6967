from __future__ import annotations

from tests.reliability.corpus.case import MEGATRON, Case
from tests.reliability.corpus.file_makers import text_file
from tests.reliability.corpus.texts import RUN_YAML

TOPIC = "The command line: unknown keys, and arguments passed the wrong way"
CASES: tuple[Case, ...] = (
    Case(
        "unknown_key",
        "a misspelt key: `trainer.totl_epochs=2`",
        ("trainer.totl_epochs=2",),
        ("trainer.totl_epochs", "did you mean 'trainer.total_epochs'"),
    ),
    Case(
        "plus_key_outside_free_maps",
        "`+trainer.new_key=1` (adding a key where none may be added)",
        ("+trainer.new_key=1",),
        ("trainer.new_key", "'+' adds keys only under"),
    ),
    Case(
        "free_map_key_without_plus",
        "`custom_reward_function.reward_kwargs.scale=2` without the `+`",
        ("custom_reward_function.reward_kwargs.scale=2",),
        ("+custom_reward_function.reward_kwargs.scale",),
    ),
    Case(
        "unparsable_override",
        "`data.train_batch_size=[` (not a value)",
        ("data.train_batch_size=[",),
        ("cannot parse the command line", "'['"),
    ),
    Case(
        "key_without_section_prefix",
        "`actor.optim.lr=1e-6` (the actor_rollout_ref. prefix left out)",
        ("actor.optim.lr=1e-6",),
        ("did you mean 'actor_rollout_ref.actor.optim.lr'?",),
    ),
    Case(
        "key_cut_short",
        "`reward_model.overlong_buffer.penalty=0.5`",
        ("reward_model.overlong_buffer.penalty=0.5",),
        ("did you mean 'reward_model.overlong_buffer.penalty_factor'?",),
    ),
    Case(
        "key_without_near_name",
        "`rollout.val_kwargs.greedy=true`",
        ("actor_rollout_ref.rollout.val_kwargs.greedy=true",),
        ("actor_rollout_ref.rollout.val_kwargs has: n, do_sample",),
    ),
    Case(
        "unknown_key_lists_its_section",
        "`dag.workflow_path=...` (no near key: the section's keys are listed)",
        ("dag.workflow_path={ws}/workflow.yaml",),
        ("unknown config key 'dag.workflow_path'", "dag has: custom_pipeline_fn, nodes"),
    ),
    Case(
        "transformer_override_unknown_field",
        "`+...override_transformer_config.recompute_everything=true` (not a TransformerConfig field)",
        (f"+{MEGATRON}.override_transformer_config.recompute_everything=true",),
        (
            "override_transformer_config.recompute_everything is not a field of megatron.core's TransformerConfig",
            "did you mean",
        ),
    ),
    Case(
        "plus_whole_section",
        "`+data={train_batch_size: 8}`",
        ("+data={{train_batch_size: 8}}",),
        ("data is a config group", "data.train_batch_size=8"),
    ),
    Case(
        "config_dir_is_a_file",
        "`--config-dir=my_run.yaml` (a file)",
        ("--config-dir={ws}/my_run.yaml",),
        ("--config-dir=<tmp>/my_run.yaml is a file", "key=value overrides"),
        make=text_file("my_run.yaml", RUN_YAML),
    ),
    Case(
        "config_dir_graph_not_yaml",
        "`--config-dir=D dag=mine` where D/dag/mine.yaml does not parse",
        ("--config-dir={ws}/conf", "dag=mine"),
        ("<tmp>/conf/dag/mine.yaml, line 3", "is not valid YAML", "fix the file there"),
        make=text_file("conf/dag/mine.yaml", "nodes:\n  rollout: [1, 2\n  reward: 3\n"),
    ),
    Case(
        "config_dir_graph_without_defaults",
        "`--config-dir=D dag=mine` where D/dag/mine.yaml has nodes only (no `defaults: [grpo, _self_]`)",
        ("--config-dir={ws}/conf", "dag=mine"),
        ("dag=mine (<tmp>/conf/dag/mine.yaml) lacks custom_pipeline_fn, switches", "defaults: [grpo, _self_]"),
        make=text_file("conf/dag/mine.yaml", "nodes:\n  rollout: {fn: my_nodes:rollout, deps: []}\n"),
    ),
    Case(
        "hydra_run_dir_unwritable",
        "`hydra.run.dir` under a file",
        ("hydra.run.dir={ws}/notes.txt/run",),
        ("hydra.run.dir", "<tmp>/notes.txt is a file", "writable folder"),
        make=text_file("notes.txt", "notes"),
    ),
    Case(
        "yaml_file_as_argument",
        "a config file as an argument",
        ("{ws}/my_run.yaml",),
        ("'<tmp>/my_run.yaml' is a config file", "key=value overrides"),
        make=text_file("my_run.yaml", RUN_YAML),
    ),
    Case(
        "torchrun_flag_after_module",
        "`--nproc_per_node=2` after `-m dagrl.main_dag`",
        ("--nproc_per_node=2",),
        ("torchrun's option", "torchrun --nproc_per_node=2 -m"),
    ),
    Case(
        "shell_comment_words",
        "`trainer.total_epochs=1 # one epoch` reaching the command (zsh)",
        ("trainer.total_epochs=1", "#", "one", "epoch"),
        ("'#' starts a comment", "move the comment"),
    ),
    Case(
        "backslash_space_argument",
        "a lone ' ' argument (`\\` with a space after it)",
        (" ",),
        ("only whitespace", "remove the space after the"),
    ),
    Case(
        "config_name_flag",
        "verl's `--config-name=ppo_megatron_trainer`",
        ("--config-name=ppo_megatron_trainer",),
        ("--config-name=ppo_megatron_trainer", "conf/dagrl.yaml", "drop --config-name"),
    ),
    Case(
        "override_with_dashes",
        "`--data.train_batch_size=8` (argparse style)",
        ("--data.train_batch_size=8",),
        ("'--data.train_batch_size=8' is not an option", "write data.train_batch_size=8"),
    ),
    Case(
        "override_yaml_colon",
        "`data.train_batch_size: 8` (YAML's colon, split by the shell)",
        ("data.train_batch_size:", "8"),
        ("write data.train_batch_size=8", "not YAML's key: value"),
    ),
    Case(
        "override_spaces_around_equals",
        "`optim.lr = 1e-6` (three words)",
        ("actor_rollout_ref.actor.optim.lr", "=", "1e-6"),
        ("write actor_rollout_ref.actor.optim.lr=<value>",),
    ),
    Case(
        "space_after_equals",
        "`trainer.total_epochs= 2` (the shell splits it in two)",
        ("trainer.total_epochs=", "2"),
        ("'trainer.total_epochs=' has no value and '2' follows it", "write trainer.total_epochs=2"),
    ),
    Case(
        "logger_split_by_space",
        "`trainer.logger=console tensorboard` (the shell splits the value)",
        ("trainer.logger=console", "tensorboard"),
        ("'tensorboard' follows 'trainer.logger=console'", "trainer.logger='[console,tensorboard]'"),
    ),
)
