"""Separate pools: a scheduler's SIGTERM during the validation that runs in the rollout pool cuts it between
generations, as in a colocated run (tests/reliability/test_signals_at_startup.py), so the training pool's preemption
checkpoint lands at once, within the grace, with the step's weights left to validate on resume."""

from __future__ import annotations

from tests.helpers import metrics_by_step
from tests.reliability.harness import complete_steps, partial_dirs
from tests.trainer.test_two_pools import args, launch  # noqa: F401 - args: the fixture, used by name

VAL = "val-core/dagrl/arithmetic/acc/mean@1"


def test_sigterm_in_the_rollout_pools_validation_cuts_it_and_the_training_pool_saves_at_once(args, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    run = args(out, **{"trainer.test_freq": 1, "trainer.save_freq": 4})
    # the rollout pool's process (launch rank 0) alone gets it, as it starts validating step 1's weights
    ((code, stderr),) = launch((run, 2, {"DAGRL_SIGNAL": "validation:1@0=SIGTERM"}))
    assert code == 0 and "Traceback" not in stderr, stderr[-3000:]
    assert "validation (step 1) stopped by SIGTERM after 0 of" in stderr, stderr[-3000:]
    assert "stopped on SIGTERM after step 1 of 4: checkpoint global_step_1 written" in stderr, stderr[-3000:]
    assert "NOT within it" not in stderr
    assert complete_steps(out) == [1] and partial_dirs(out) == []
    assert VAL not in metrics_by_step(out)[1]  # cut: the resume validates these weights first
