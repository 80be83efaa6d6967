"""benchmarks/lora_learn.py: each arm's overrides, and its table of held-out accuracy per evaluated step and step
time read from the runs' metrics.jsonl (a step an arm did not evaluate is a dash)."""

from tests.benchmarks.learn_runs import assert_unknown_arm_refused, write_run

import lora_learn  # after learn_runs, which puts it on sys.path


def test_arms_and_the_table(tmp_path):
    acc = "val-core/dagrl/arithmetic/acc/mean@1"
    args = lora_learn.parse(["--out", str(tmp_path), "--arms", "lora,top4", "--rank", "8", "--lora-lr", "1e-4"])
    arms = lora_learn.arms(args)
    assert arms["top4"] == [] and "actor_rollout_ref.model.lora.rank=8" in arms["lora"]
    assert "actor_rollout_ref.actor.optim.lr=0.0001" in arms["lora"]
    assert "actor_rollout_ref.model.lora.merge=false" in arms["lora_adapter"]
    assert "actor_rollout_ref.model.lora.merge=true" in arms["lora"]
    sync = {"timing_s/weight_sync": 0.25, "perf/weight_sync_gb": 0.0042, "training/rollout_log_probs_diff_mean": 0.03}
    write_run(tmp_path / "lora_seed0", [{"step": 0, acc: 0.1}, {"step": 5, "timing_s/step": 3.0, acc: 0.4, **sync}])
    write_run(tmp_path / "top4_seed0", [{"step": 0, acc: 0.1}, {"step": 1, "timing_s/step": 5.0}])
    table = lora_learn.report(args).splitlines()
    assert table[0] == "| arm | acc @0 | acc @5 | s/step (median) | sync s | sync MB | gap |"
    assert table[2] == "| lora | 0.100 | 0.400 | 3.0 | 0.250 | 4.2 | 0.030 |"
    assert table[3] == "| top4 | 0.100 | - | 5.0 | - | - | - |"


def test_an_unknown_arm_is_refused(tmp_path):
    assert_unknown_arm_refused(lora_learn, tmp_path, "lora_adapter")
