"""What pre-flight says of a config that passes, where a setting may not do what its user expects:
trainer.total_training_steps only caps a run (more steps than trainer.total_epochs of the data holds end it early:
the run's length, and the total_epochs that would give every step), KL in both the reward and the loss, a clip range
wider below than above, and a checkpoint limit of 0 (no limit)."""

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


def test_reversed_clip_range_is_said(tiny_model, tiny_data, tmp_path, caplog):
    swapped = {"actor_rollout_ref.actor.clip_ratio_low": 0.28, "actor_rollout_ref.actor.clip_ratio_high": 0.2}
    (line,) = run_length(tiny_model, tiny_data, tmp_path, caplog, **swapped)[1]
    assert line.startswith("actor_rollout_ref.actor.clip_ratio_low=0.28 is above clip_ratio_high=0.2")
    assert "[0.72, 1.2]" in line and "clip_ratio_low=0.2 clip_ratio_high=0.28" in line
    # the low side taken from clip_ratio counts too; clip-higher and equal sides are silent
    (line,) = run_length(tiny_model, tiny_data, tmp_path, caplog, **{"actor_rollout_ref.actor.clip_ratio_high": 0.1})[1]
    assert line.startswith("actor_rollout_ref.actor.clip_ratio_low=0.2 is above clip_ratio_high=0.1")
    higher = {"actor_rollout_ref.actor.clip_ratio_low": 0.2, "actor_rollout_ref.actor.clip_ratio_high": 0.28}
    assert run_length(tiny_model, tiny_data, tmp_path, caplog, **higher)[1] == []


def test_checkpoint_limit_of_zero_is_said(tiny_model, tiny_data, tmp_path, caplog):
    for keep in (0, -1):
        (line,) = run_length(tiny_model, tiny_data, tmp_path, caplog, **{"trainer.max_actor_ckpt_to_keep": keep})[1]
        assert line.startswith(f"trainer.max_actor_ckpt_to_keep={keep} keeps every checkpoint")
        assert "trainer.max_actor_ckpt_to_keep=N (N >= 1)" in line
    assert run_length(tiny_model, tiny_data, tmp_path, caplog, **{"trainer.max_actor_ckpt_to_keep": 2})[1] == []
    # what it says: 0 and below prune nothing
    from dagrl.trainer.checkpoint import CheckpointManager

    for keep in (0, -1):
        root = tmp_path / f"keep{keep}"
        manager = CheckpointManager(str(root), keep=keep, rank=0, barrier=lambda: None)
        for step in (1, 2, 3):
            manager.save(step, lambda directory: (directory / "actor").mkdir())
        assert sorted(p.name for p in root.iterdir() if p.name.startswith("global_step")) == [
            "global_step_1",
            "global_step_2",
            "global_step_3",
        ]
