"""dagrl/config/schema/: every key of conf/ is declared with a type (and every numeric key a range), and a wrong type
or an out-of-range value is one ConfigError line naming the key, the value and what is expected."""

from __future__ import annotations

import pytest

from dagrl.config.schema import check as schema
from dagrl.config.errors import ConfigError
from dagrl.config.schema.root import freeform_maps
from dagrl.config.load import compose
from dagrl.config.preflight.rollout import check_sampling
from dagrl.config.tree import leaves


@pytest.fixture(scope="module")
def defaults() -> dict:
    return compose()


def error(overrides: list[str]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        schema.check_schema(compose(overrides))
    message = str(info.value)
    assert "\n" not in message
    return info.value


def test_every_leaf_key_has_a_schema_entry_and_every_number_a_range(defaults):
    # the schema's defaults are compose()'s, in the same order (the first bad key in conf/'s order is named)
    assert list(leaves(schema.default_config()).items()) == list(leaves(defaults).items())
    table = schema.schema()
    graphs = ("dag.nodes", "dag.switches")  # maps whose entries are the graph's, not keys of their own
    composed = dict.fromkeys(next((g for g in graphs if key.startswith(g + ".")), key) for key in leaves(defaults))
    assert list(table) == list(composed), "declared keys (dagrl/config/schema/) and conf/'s keys differ"
    no_range = [key for key, kind in table.items() if kind.rstrip("?") in ("int", "float") and not schema.range_of(key)]
    assert not no_range, f"numeric keys declared without a range: {no_range}"
    assert freeform_maps() and all(table[key] == "dict" and defaults_at(defaults, key) == {} for key in freeform_maps())
    assert len(table) >= 180


def defaults_at(tree: dict, key: str):
    for part in key.split("."):
        tree = tree[part]
    return tree


def test_the_default_config_passes(defaults):
    schema.check_schema(defaults)
    check_sampling(defaults)


@pytest.mark.parametrize(
    "override, expect",
    [
        ("data.train_batch_size=abc", "data.train_batch_size='abc' must be a positive integer"),
        ("data.train_batch_size=2.5", "data.train_batch_size=2.5 must be a positive integer"),
        ("actor_rollout_ref.rollout.seed=x", "actor_rollout_ref.rollout.seed='x' must be an integer >= 0"),
        ("actor_rollout_ref.actor.clip_ratio=wide", "actor_rollout_ref.actor.clip_ratio='wide' must be a number >= 0"),
        ("actor_rollout_ref.rollout.top_p=high", "actor_rollout_ref.rollout.top_p='high' must be a number in (0, 1]"),
        ("trainer.experiment_name=2024", "trainer.experiment_name=2024 must be a string"),
        ("trainer.total_training_steps=many", "trainer.total_training_steps='many' must be null or a positive integer"),
        ("actor_rollout_ref.actor.optim.betas=0.9", "actor_rollout_ref.actor.optim.betas=0.9 must be two numbers"),
        ("data.train_files=3", "data.train_files=3 must be null or a file path or a list of them"),
        ("trainer.logger=[console,3]", "trainer.logger=['console', 3] must be a string or a list of strings"),
        ("dag.nodes=rollout", "dag.nodes='rollout' must be a map of node id to node (role, fn, deps), or a list"),
        ("actor_rollout_ref.rollout.name=1", "actor_rollout_ref.rollout.name=1 is not one of: hf, vllm"),
    ],
)
def test_a_wrong_type_names_the_key_the_value_and_the_type(override, expect):
    err = error([override])
    assert err.key == override.split("=")[0]
    assert expect in str(err)


@pytest.mark.parametrize(
    "override, expect",
    [
        ("actor_rollout_ref.rollout.temperature=-1", "actor_rollout_ref.rollout.temperature=-1 must be > 0"),
        ("actor_rollout_ref.rollout.top_p=0", "actor_rollout_ref.rollout.top_p=0 must be in (0, 1]"),
        ("actor_rollout_ref.rollout.top_p=5", "actor_rollout_ref.rollout.top_p=5 must be in (0, 1]"),
        ("actor_rollout_ref.rollout.top_k=0", "actor_rollout_ref.rollout.top_k=0 must be -1 (off) or an integer >= 1"),
        ("actor_rollout_ref.actor.clip_ratio=-0.1", "actor_rollout_ref.actor.clip_ratio=-0.1 must be >= 0"),
        ("actor_rollout_ref.actor.optim.lr=-1", "actor_rollout_ref.actor.optim.lr=-1 must be > 0"),
        ("algorithm.gamma=1.5", "algorithm.gamma=1.5 must be in [0, 1]"),
        ("actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=2", "lr_warmup_steps_ratio=2 must be in [0, 1]"),
        ("trainer.nnodes=0", "trainer.nnodes=0 must be a positive integer"),
        ("data.seed=-5", "data.seed=-5 must be an integer >= 0"),
        ("reward_model.timeout_s=0", "reward_model.timeout_s=0 must be > 0"),
        ("actor_rollout_ref.rollout.gpu_memory_utilization=1.5", "gpu_memory_utilization=1.5 must be in (0, 1)"),
    ],
)
def test_an_out_of_range_value_names_the_range(override, expect):
    assert expect in str(error([override]))


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_non_finite_numbers_are_out_of_every_range(defaults, value):
    import copy

    for key in (
        "actor_rollout_ref.rollout.temperature",
        "actor_rollout_ref.actor.entropy_coeff",
        "actor_rollout_ref.actor.optim.lr",
    ):
        config = copy.deepcopy(defaults)
        section, _, leaf = key.rpartition(".")
        node = config
        for part in section.split("."):
            node = node[part]
        node[leaf] = value
        with pytest.raises(ConfigError, match=f"{key}={value} must be"):
            schema.check_schema(config)


@pytest.mark.parametrize("value", ["maybe", "no", "yes", "1", "0", "off"])
@pytest.mark.parametrize("key", ["data.shuffle", "actor_rollout_ref.actor.use_kl_loss"])
def test_booleans_accept_only_true_or_false(key, value):
    err = error([f"{key}={value}"])
    assert err.key == key and str(err).startswith(f"{key}=") and str(err).endswith("must be true or false")


def test_numbers_keep_their_type_floats_accept_integers():
    config = compose(
        [
            "reward_model.timeout_s=3",
            "actor_rollout_ref.rollout.top_p=1",
            "actor_rollout_ref.rollout.multi_turn.tool_timeout_s=2.5",
            "trainer.logger=console",
            "trainer.total_training_steps=null",
            "+custom_reward_function.reward_kwargs.scale=2",
        ]
    )
    schema.check_schema(config)


def test_interpolated_keys_are_checked_by_their_resolved_value():
    err = error(["actor_rollout_ref.actor.ppo_epochs=0"])  # critic.ppo_epochs = ${...} follows; the actor's is named
    assert err.key == "actor_rollout_ref.actor.ppo_epochs"
    assert "(critic.ppo_epochs takes the value from actor_rollout_ref.actor.ppo_epochs)" in str(err)
    err = error(["actor_rollout_ref.actor.ppo_epochs=0", "critic.ppo_epochs=1"])  # set apart: not named
    assert "critic" not in str(err)


def test_sampling_validation_at_temperature_zero_contradicts_itself(defaults):
    config = compose(["actor_rollout_ref.rollout.val_kwargs.do_sample=true"])
    with pytest.raises(ConfigError, match="val_kwargs.temperature=0 with .*do_sample=true"):
        check_sampling(config)
    check_sampling(
        compose(
            [
                "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
                "actor_rollout_ref.rollout.val_kwargs.temperature=0.6",
            ]
        )
    )


def test_prompt_plus_response_beyond_the_models_positions():
    from dagrl.config.preflight.data import check_position_limit

    check_position_limit(256, {"max_position_embeddings": 256})
    check_position_limit(600, {"max_position_embeddings": 256, "rope_scaling": {"type": "linear", "factor": 4.0}})
    with pytest.raises(ConfigError, match="= 257 is longer than the model's max_position_embeddings=256"):
        check_position_limit(257, {"max_position_embeddings": 256})
