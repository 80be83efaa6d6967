"""benchmarks/moe_learn.py's table: each arm's held-out curve, step time, log-prob gap and routing agreement read
from its runs' metrics.jsonl; a metric a run never logged is a dash, not a zero."""

from tests.benchmarks.learn_runs import assert_unknown_arm_refused, write_run

import moe_learn  # after learn_runs, which puts it on sys.path


def test_the_table_has_each_arms_curve_gap_and_agreement(tmp_path):
    acc = "val-core/dagrl/arithmetic/acc/mean@1"
    write_run(tmp_path / "dense_seed0", [{"step": 0, acc: 0.1}, {"step": 1, "timing_s/step": 2.0, acc: 0.3}])
    write_run(
        tmp_path / "moe_r3_seed0",
        [
            {"step": 0, acc: 0.1},
            {"step": 1, "timing_s/step": 4.0, acc: 0.5, moe_learn.GAP: 0.02, moe_learn.AGREEMENT: 0.9},
            {"step": 2, "timing_s/step": 6.0, moe_learn.GAP: 0.04, moe_learn.AGREEMENT: 0.8},
        ],
    )
    table = moe_learn.report(moe_learn.parse(["--out", str(tmp_path), "--arms", "dense,moe_r3"])).splitlines()
    assert table[1] == "| arm | step 0 | step 1 | s/step (median) | gap | agreement |"
    assert table[3] == "| dense | 0.100 | 0.300 | 2.00 | - | - |"
    assert table[4] == "| moe_r3 | 0.100 | 0.500 | 5.00 | 0.030 | 0.850 |"


def test_an_unknown_arm_is_refused(tmp_path):
    assert_unknown_arm_refused(moe_learn, tmp_path, "moe_r3")
