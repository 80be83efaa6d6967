"""What pre-flight says of a config that passes, where a setting may not do what its user expects:
trainer.total_training_steps only caps a run (more steps than trainer.total_epochs of the data holds end it early:
the run's length, and the total_epochs that would give every step), and KL in both the reward and the loss."""

import logging

from dagrl.config.derived import total_steps
from dagrl.config.load import compose
from dagrl.config.tree import Cfg
from dagrl.config.validate import preflight
from tests.conftest import cpu_run_overrides

LOGGER = "dagrl.config.preflight"


def run_length(tiny_model, tiny_data, tmp_path, caplog, **extra) -> tuple[int, list[str]]:
    cfg = Cfg(compose(cpu_run_overrides(tiny_model, tiny_data, tmp_path / "ckpt", **extra)))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        shape = preflight(cfg)
    lines = [r.getMessage() for r in caplog.records if r.name.startswith(LOGGER)]
    caplog.clear()
    return total_steps(cfg, shape.train_rows), lines


def test_steps_beyond_the_epochs_are_said(tiny_model, tiny_data, tmp_path, caplog):
    # 32 rows / data.train_batch_size=4: 8 steps an epoch
    steps, lines = run_length(tiny_model, tiny_data, tmp_path, caplog, **{"trainer.total_training_steps": 20})
    assert steps == 8
    assert lines == [
        "trainer.total_training_steps=20 is more than trainer.total_epochs=1 of the data holds (8 steps an epoch: "
        "32 rows / data.train_batch_size=4): the run stops at step 8; for 20 steps set trainer.total_epochs=3"
    ]
    steps, lines = run_length(
        tiny_model, tiny_data, tmp_path, caplog, **{"trainer.total_training_steps": 20, "trainer.total_epochs": 3}
    )
    assert (steps, lines) == (20, [])  # the fix it names runs every step, silently
    assert run_length(tiny_model, tiny_data, tmp_path, caplog, **{"trainer.total_training_steps": 8})[1] == []


def test_kl_in_reward_and_in_loss_is_said(tiny_model, tiny_data, tmp_path, caplog):
    both = {"algorithm.use_kl_in_reward": True, "actor_rollout_ref.actor.use_kl_loss": True}
    (line,) = run_length(tiny_model, tiny_data, tmp_path, caplog, **both)[1]
    assert line.startswith("algorithm.use_kl_in_reward=true and actor_rollout_ref.actor.use_kl_loss=true")
    assert "penalised twice" in line and "set one of them false" in line
    assert run_length(tiny_model, tiny_data, tmp_path, caplog, **{"algorithm.use_kl_in_reward": True})[1] == []
