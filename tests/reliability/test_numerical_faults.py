"""Numerical faults: an Inf in the loss (and so in the gradients) skips the optimizer step, which is counted and
logged; after trainer.max_consecutive_skips such steps the run stops and the last good checkpoint is intact.
(The NaN case is tests/trainer/test_end_to_end.py::test_non_finite_steps_are_skipped_...; this one checks also
that a skipped step leaves the weights and the optimizer state exactly as they were.)"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from tests.conftest import cpu_run_overrides
from tests.helpers import metrics_by_step, run_in_session
from tests.reliability.harness import checkpoint_state, complete_steps, differences

REWARD = Path(__file__).parents[1] / "trainer" / "reward_by_length.py"


@pytest.mark.slow  # one ~20 s run; the NaN test of the CI suite covers the same policy
def test_inf_in_the_loss_is_skipped_counted_logged_then_the_run_stops_on_the_last_good_checkpoint(
    tiny_model, tiny_data, tmp_path
):
    out = tmp_path / "inf"
    args = cpu_run_overrides(
        tiny_model,
        tiny_data,
        out,
        **{
            "custom_reward_function.path": str(REWARD),
            "data.val_files": "null",
            "trainer.val_before_train": False,
            "trainer.total_training_steps": 5,
            "trainer.save_freq": 1,
            "trainer.max_consecutive_skips": 2,
            "dag.custom_pipeline_fn": "tests.reliability.inf_pipeline:pipeline",
        },
    )
    code, stderr = run_in_session([sys.executable, "-m", "dagrl.main_dag", *args], {"DAGRL_TEST_INF_STEPS": "2,3"})

    assert code != 0
    assert stderr.count("non-finite grad norm") == 4  # logged for each skipped optimizer step: 2 mini-batches x 2
    records = metrics_by_step(out)
    assert [records[s]["actor/skipped_steps"] for s in (1, 2, 3)] == [0.0, 1.0, 1.0]  # counted
    assert not math.isfinite(records[2]["actor/grad_norm"]) and math.isfinite(records[1]["actor/grad_norm"])
    assert "2 consecutive steps (up to 3)" in stderr and "global_step_2" in stderr
    # stopped before saving step 3; the newest checkpoint is complete and is step 1's state: step 2 changed nothing
    assert complete_steps(out) == [1, 2] and (out / "latest_checkpointed_iteration.txt").read_text() == "2"
    before, after = checkpoint_state(out / "global_step_1"), checkpoint_state(out / "global_step_2")
    changed = sorted(key for key in before if differences(before[key], after[key]))
    assert [key for key in changed if not key.startswith(("rng_state", "common.pt", "data.pt"))] == [], changed
