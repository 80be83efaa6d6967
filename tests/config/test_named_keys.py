"""An error names the key the user set: a value that reached a key through a `${...}` default is filed under
(and named by) its source, and a launch that does not match trainer.nnodes names trainer.nnodes."""

from __future__ import annotations

import pytest

from dagrl.config.checks import named, positive_int, source_key
from dagrl.config.schema.root import interpolated_defaults
from dagrl.config.errors import ConfigError
from dagrl.config.load import compose
from dagrl.config.tree import Cfg
from dagrl.config.preflight.layout import world_size_from_env


def test_interpolated_defaults_come_from_the_declarations():
    found = interpolated_defaults()
    assert found["critic.megatron.seed"] == "actor_rollout_ref.actor.megatron.seed"
    assert found["critic.forward_micro_batch_size_per_gpu"] == "critic.ppo_micro_batch_size_per_gpu"
    assert "trainer.default_local_dir" not in found  # a composed string, not one key's value


def test_source_key_follows_chains_while_the_values_agree():
    cfg = Cfg(compose(["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=0"]))
    assert (
        source_key(cfg, "critic.forward_micro_batch_size_per_gpu")
        == "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
    )
    key, name = named(cfg, "critic.forward_micro_batch_size_per_gpu")
    assert key == "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" and "(from actor_rollout_ref" in name
    with pytest.raises(ConfigError) as caught:
        positive_int(cfg, "critic.forward_micro_batch_size_per_gpu")
    assert caught.value.key == "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
    # the user set the derived key itself: it is named alone
    cfg = Cfg(compose(["critic.forward_micro_batch_size_per_gpu=0"]))
    assert named(cfg, "critic.forward_micro_batch_size_per_gpu") == ("critic.forward_micro_batch_size_per_gpu",) * 2
    assert source_key(cfg, "data.train_batch_size") == "data.train_batch_size"


@pytest.mark.parametrize(
    "overrides, world, expected",
    [
        (["trainer.nnodes=2"], "1", ("trainer.nnodes=2 x trainer.n_gpus_per_node=1", "set trainer.nnodes=1")),
        (
            ["trainer.nnodes=2", "trainer.n_gpus_per_node=4"],
            "4",
            ("torchrun --nnodes 2 --nproc-per-node 4", "set trainer.nnodes=1 or trainer.n_gpus_per_node=2"),
        ),
        (
            ["trainer.nnodes=3", "trainer.n_gpus_per_node=2"],
            "4",
            ("trainer.n_gpus_per_node=2 = 6", "set trainer.nnodes=2"),
        ),
    ],
)
def test_a_launch_that_does_not_match_nnodes_names_nnodes(monkeypatch, overrides, world, expected):
    monkeypatch.setenv("WORLD_SIZE", world)
    with pytest.raises(ConfigError) as caught:
        world_size_from_env(Cfg(compose(overrides)))
    assert caught.value.key == "trainer.nnodes"
    for part in expected:
        assert part in str(caught.value)
    assert (
        f"trainer.n_gpus_per_node={compose(overrides)['trainer']['n_gpus_per_node']} "
        not in str(caught.value).split("set ")[-1] + " "
    )  # never suggests the value it already has


def test_one_node_still_names_gpus_per_node(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(ConfigError) as caught:
        world_size_from_env(Cfg(compose(["trainer.n_gpus_per_node=2"])))
    assert caught.value.key == "trainer.n_gpus_per_node" and "n_gpus_per_node=1" in str(caught.value)
