from __future__ import annotations

from tests.reliability.corpus.case import Case

TOPIC = "What Hydra refuses: its grammar, config groups and sweeps"
CASES: tuple[Case, ...] = (
    Case(
        "override_without_equals",
        "`trainer.total_epochs` (no `=value`)",
        ("trainer.total_epochs",),
        ("'trainer.total_epochs'", "write trainer.total_epochs=<value>"),
    ),
    Case(
        "delete_required_section",
        "`~trainer` (deleting a section the code reads)",
        ("~trainer",),
        ("'~trainer'", "cannot be deleted", "trainer.<key>="),
    ),
    Case(
        "plus_on_existing_key",
        "`+trainer.nnodes=2` (`+` on a key that exists)",
        ("+trainer.nnodes=2",),
        ("'+trainer.nnodes=2'", "drop the '+': trainer.nnodes=2"),
    ),
    Case(
        "unknown_group_option",
        "`dag=nope` (no conf/dag/nope.yaml)",
        ("dag=nope",),
        ("'dag=nope'", "choose one of dapo, grpo, opd, ppo"),
    ),
    Case(
        "unknown_single_option_group",
        "`actor_rollout_ref=nope` (a section set as a whole)",
        ("actor_rollout_ref=nope",),
        ("'actor_rollout_ref=nope'", "actor_rollout_ref.<key>="),
    ),
    Case(
        "missing_interpolation",
        "`trainer.project_name=${trainer.experimnt_name}` (a misspelt key)",
        ("trainer.project_name=${{trainer.experimnt_name}}",),
        ("trainer.project_name=", "did you mean ${trainer.experiment_name}"),
    ),
    Case(
        "list_without_brackets",
        "`trainer.logger=console,tensorboard` (verl's list syntax: a sweep to Hydra)",
        ("trainer.logger=console,tensorboard",),
        ("trainer.logger='[console,tensorboard]'",),
    ),
    Case(
        "list_index_out_of_range",
        "`trainer.logger.2=jsonl` (the list has 2 items: 0..1)",
        ("trainer.logger.2=jsonl",),
        ("trainer.logger has 2 items", "trainer.logger=[...]"),
    ),
    Case(
        "path_list_without_brackets",
        "`data.train_files=a.parquet,b.parquet` (verl's list syntax for files)",
        ("data.train_files={train},{train}",),
        ("a list needs brackets", "data.train_files='["),
    ),
    Case(
        "key_trailing_dot",
        "`trainer.=2`",
        ("trainer.=2",),
        ("the key 'trainer.' has an empty part", "trainer.<name>=2"),
    ),
    Case(
        "list_negative_index",
        "`trainer.logger.-1=jsonl`",
        ("trainer.logger.-1=jsonl",),
        ("no negative index", "trainer.logger.<index>=jsonl"),
    ),
    Case(
        "list_append_plus_equals",
        "`trainer.logger+=[wandb]` (Python's +=)",
        ("trainer.logger+=[wandb]",),
        ("Hydra has no '+='", "trainer.logger=[console,tensorboard,wandb]"),
    ),
    Case(
        "lr_unicode_minus",
        "`optim.lr=1e−6` (a Unicode minus)",
        ("actor_rollout_ref.actor.optim.lr=1e\u22126",),
        ("U+2212", "actor_rollout_ref.actor.optim.lr=1e-6"),
    ),
    Case(
        "train_files_smart_quotes",
        "`data.train_files=\u201c...\u201d` (curly quotes from a document)",
        ("data.train_files=\u201c{train}\u201d",),
        ("U+201C", "data.train_files=<data>/train.parquet"),
    ),
    Case(
        "tilde_other_user",
        "`model.path=~alice/models/qwen`",
        ("actor_rollout_ref.model.path=~alice/models/qwen",),
        ("'~alice'", "/models/qwen"),
    ),
    Case(
        "vllm_engine_kwargs_string",
        "`rollout.engine_kwargs.vllm=swap_space=4`",
        ("actor_rollout_ref.rollout.engine_kwargs.vllm=swap_space=4",),
        ("is a map", "+actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=4"),
    ),
    Case(
        "lr_trailing_comma",
        "`actor_rollout_ref.actor.optim.lr=1e-6,` (a trailing comma)",
        ("actor_rollout_ref.actor.optim.lr=1e-6,",),
        ("override 'actor_rollout_ref.actor.optim.lr=1e-6,'", "drop the trailing comma"),
    ),
    Case(
        "number_with_decimal_comma",
        "`actor.clip_ratio=0,2` (a decimal comma)",
        ("actor_rollout_ref.actor.clip_ratio=0,2",),
        ("a decimal point, not a comma", "actor_rollout_ref.actor.clip_ratio=0.2"),
    ),
    Case(
        "number_with_thousands_separator",
        "`data.train_batch_size=1,024`",
        ("data.train_batch_size=1,024",),
        ("no thousands separator", "data.train_batch_size=1024"),
    ),
    Case(
        "number_with_pasted_backslash",
        "`optim.lr=3e-6\\` (a line continuation pasted into the value)",
        ("actor_rollout_ref.actor.optim.lr=3e-6\\",),
        ("ends with a backslash", "actor_rollout_ref.actor.optim.lr=3e-6"),
    ),
    Case(
        "number_with_pasted_semicolon",
        "`optim.lr=1e-6;`",
        ("actor_rollout_ref.actor.optim.lr=1e-6;",),
        ("takes a number", "drop what follows it (';')", "actor_rollout_ref.actor.optim.lr=1e-6"),
    ),
    Case(
        "override_double_equals",
        "`data.train_batch_size==8`",
        ("data.train_batch_size==8",),
        ("one '=' goes between key and value", "data.train_batch_size=8"),
    ),
    Case(
        "logger_list_in_quotes",
        '`trainer.logger="[console,jsonl]"` (a quoted list: one string)',
        ('trainer.logger="[console,jsonl]"',),
        ("trainer.logger='[console,jsonl]' is one string (a list inside quotes)", "'trainer.logger=[console,jsonl]'"),
    ),
    Case(
        "list_lost_its_open_bracket",
        "`trainer.logger=console,jsonl]`",
        ("trainer.logger=console,jsonl]",),
        ("a list opens with '['", "trainer.logger=[console,jsonl]"),
    ),
    Case(
        "list_as_tuple",
        "`optim.betas=(0.9,0.999)` (Python's tuple)",
        ("actor_rollout_ref.actor.optim.betas=(0.9,0.999)",),
        ("a list is written in brackets", "actor_rollout_ref.actor.optim.betas=[0.9,0.999]"),
    ),
    Case(
        "list_index_in_brackets",
        "`trainer.logger[1]=jsonl` (Python's index)",
        ("trainer.logger[1]=jsonl",),
        ("write trainer.logger.1=jsonl",),
    ),
    Case(
        "map_as_json",
        '`reward_kwargs={"scale": 2}` (JSON\'s quoted keys)',
        ('custom_reward_function.reward_kwargs={{"scale": 2}}',),
        ("without quotes around its keys", "+custom_reward_function.reward_kwargs.scale=2"),
    ),
    Case(
        "hydra_key_unknown",
        "`hydra.run.dirr=x` (a typo in Hydra's own key)",
        ("hydra.run.dirr=x",),
        ("override 'hydra.run.dirr=x'", "has no key 'dirr'", "--cfg hydra"),
    ),
    Case(
        "hydra_bool_value",
        "`hydra.job.chdir=maybe`",
        ("hydra.job.chdir=maybe",),
        ("override 'hydra.job.chdir=maybe'", "takes a bool", "hydra.job.chdir=true or hydra.job.chdir=false"),
    ),
    Case(
        "hydra_plugin_missing",
        "`hydra/launcher=joblib` without the plugin",
        ("hydra/launcher=joblib",),
        ("Hydra has no hydra/launcher option 'joblib'", "pip install hydra-joblib-launcher"),
    ),
)
