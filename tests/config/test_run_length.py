"""trainer.total_training_steps only caps a run: more steps than trainer.total_epochs of the data holds end the
run early, and pre-flight says so (the run's length, and the total_epochs that would give every step)."""

import logging

from dagrl.config.derived import total_steps
from dagrl.config.load import compose
from dagrl.config.tree import Cfg
from dagrl.config.validate import preflight
from tests.conftest import cpu_run_overrides

LOGGER = "dagrl.config.preflight.trainer"


def run_length(tiny_model, tiny_data, tmp_path, caplog, **extra) -> tuple[int, list[str]]:
    cfg = Cfg(compose(cpu_run_overrides(tiny_model, tiny_data, tmp_path / "ckpt", **extra)))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        shape = preflight(cfg)
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
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
