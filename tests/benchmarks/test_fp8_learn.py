"""benchmarks/fp8_learn.py: each arm's overrides (FP8 rollout with TIS, with sequence masking instead, bf16 as it
is), every arm run once a seed, and the table read from the runs' metrics.jsonl."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import fp8_learn  # noqa: E402 - after the sys.path insert above

ACC = "val-core/dagrl/arithmetic/acc/mean@1"


def test_arms_set_fp8_with_a_correction_and_bf16_as_it_is(tmp_path):
    arms = fp8_learn.arms(fp8_learn.parse(["--out", str(tmp_path), "--tis-cap", "3", "--mis-low", "0.25"]))
    assert arms["bf16"] == []
    assert arms["fp8_tis"] == [
        "actor_rollout_ref.rollout.quantization=fp8",
        "actor_rollout_ref.actor.tis_imp_ratio_cap=3.0",
    ]
    assert arms["fp8_mis"][0] == "actor_rollout_ref.rollout.quantization=fp8"
    assert "actor_rollout_ref.actor.mis_ratio_low=0.25" in arms["fp8_mis"]
    assert not any("tis_imp_ratio_cap" in o for o in arms["fp8_mis"])
    with pytest.raises(SystemExit, match="unknown"):  # before any run starts
        fp8_learn.main(["--out", str(tmp_path), "--arms", "bf16,fp8_none"])


def test_every_arm_runs_once_a_seed_and_the_table_reads_their_metrics(tmp_path, monkeypatch, capsys):
    calls = []

    def fake_run(name, overrides, seed, args):  # what the script's run leaves behind: its metrics.jsonl
        calls.append((name, overrides, seed))
        (args.out / name / "ckpt").mkdir(parents=True)
        rows = [{"step": 0, ACC: 0.2}, {"step": 4, ACC: 0.5 if "fp8" in name else 0.6, "timing_s/step": 2.0}]
        (args.out / name / "ckpt" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    monkeypatch.setattr(fp8_learn, "run", fake_run)
    fp8_learn.main(["--out", str(tmp_path), "--arms", "bf16,fp8_tis", "--seeds", "0,1"])
    assert [(name, seed) for name, _, seed in calls] == [
        ("bf16_seed0", 0),
        ("fp8_tis_seed0", 0),
        ("bf16_seed1", 1),
        ("fp8_tis_seed1", 1),
    ]
    table = capsys.readouterr().out.splitlines()
    assert table[0] == "| arm | acc @0 | acc @4 | s/step (median) | sync s | sync MB | gap |"
    # two seeds: each cell the mean with its min-max over the seeds
    assert table[2] == "| bf16 | 0.200 (0.200-0.200) | 0.600 (0.600-0.600) | 2.0 | - | - | - |"
    assert table[3] == "| fp8_tis | 0.200 (0.200-0.200) | 0.500 (0.500-0.500) | 2.0 | - | - | - |"
    assert (tmp_path / "report.md").read_text().splitlines() == table
