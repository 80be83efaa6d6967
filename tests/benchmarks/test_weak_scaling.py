"""benchmarks/weak_scaling.py: each point's command line (layout, parallel sizes, the batch growing with G), the
report's medians, tokens/s/GPU and efficiency on small fake runs, dagrl.plan's figures, and the plan-only paths on
a CPU."""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import weak_scaling as ws  # noqa: E402 - after the sys.path insert above
import weak_scaling_report as wsr  # noqa: E402 - as above

ARGS = argparse.Namespace(prompts_per_gpu=16, mini_per_gpu=8, n=8, train_tokens=6144, logprob_tokens=24576, steps=5)


def as_dict(words: list[str]) -> dict[str, str]:
    pairs = [word.split("=", 1) for word in words]
    assert len({key for key, _ in pairs}) == len(pairs), "a key is set twice"
    return dict(pairs)


def test_points_leave_out_tp2_on_one_gpu():
    assert [p.name for p in ws.points_of("1,2,4,8", "dp,tp2")] == [
        "dp_g1",
        "dp_g2",
        "dp_g4",
        "dp_g8",
        "tp2_g2",
        "tp2_g4",
        "tp2_g8",
    ]
    assert [p.name for p in ws.points_of("1,3,4", "tp2")] == ["tp2_g4"]
    with pytest.raises(SystemExit, match="--layouts"):
        ws.points_of("1", "dp,pp2")


@pytest.mark.parametrize("layout,gpus,tp", [("dp", 1, 1), ("dp", 8, 1), ("tp2", 2, 2), ("tp2", 8, 2)])
def test_command_of_a_point(tmp_path, layout, gpus, tp):
    point = ws.Point(layout, gpus)
    words = ws.overrides(point, ARGS, "/m", "/d", tmp_path / point.name)
    command = ws.train_command(point, words)
    assert command[1:7] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(gpus), "-m"]
    assert command[7] == "dagrl.main_dag" and command[8:] == words
    cfg = as_dict(words)
    # the batch grows with G: each GPU generates and trains the same 16 prompts x 8 responses
    assert int(cfg["data.train_batch_size"]) == 16 * gpus
    assert int(cfg["actor_rollout_ref.actor.ppo_mini_batch_size"]) == 8 * gpus
    responses_per_dp_rank = int(cfg["data.train_batch_size"]) * 8 // (gpus // tp)
    assert responses_per_dp_rank // tp == 128
    assert cfg["trainer.n_gpus_per_node"] == str(gpus)
    assert cfg["actor_rollout_ref.actor.megatron.tensor_model_parallel_size"] == str(tp)
    assert cfg["actor_rollout_ref.rollout.tensor_model_parallel_size"] == str(tp)
    assert cfg["actor_rollout_ref.actor.megatron.sequence_parallel"] == ("true" if tp > 1 else "false")
    # fixed-length work: 512-token prompts, exactly 1,024 response tokens
    assert cfg["data.max_prompt_length"] == "512" and cfg["data.max_response_length"] == "1024"
    assert cfg["actor_rollout_ref.rollout.ignore_eos"] == "true"
    assert cfg["actor_rollout_ref.rollout.name"] == "vllm"
    assert cfg["actor_rollout_ref.model.enable_gradient_checkpointing"] == "false"
    assert cfg["actor_rollout_ref.actor.megatron.param_dtype"] == "bfloat16"
    assert cfg["actor_rollout_ref.actor.use_dynamic_bsz"] == "true"
    # the plan's row counts match the token budgets for 1,536-token sequences
    assert cfg["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == "4"
    assert cfg["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"] == "16"
    assert cfg["trainer.default_local_dir"] == str(tmp_path / point.name)
    assert cfg["trainer.total_training_steps"] == "5" and cfg["trainer.logger"] == "[console,jsonl]"
    assert ws.plan_command(words, 80)[1:5] == ["-m", "dagrl.plan", "--gpu-memory-gb", "80"]


PLAN_TWO_STAGES = """  phase totals:
    rollout                                        54.2       50.0
    log-prob                                       21.4       37.1
    update                                         23.2       30.8
  peak 54.2 GiB (stage 3, rollout) of 80 GiB: fits (68%)
"""


def test_plan_figures():
    assert ws.plan_figures(PLAN_TWO_STAGES, 0) == {
        "peak": 54.2,
        "where": "stage 3, rollout",
        "fits": True,
        "rollout": 54.2,
        "log-prob": 37.1,
        "update": 30.8,
    }
    warning = "  WARNING: estimated peak 90.0 GiB (update) exceeds the 80 GiB GPU: lower the micro-batch"
    over = ws.plan_figures("    update   90.0\n" + warning, 0)
    assert over["fits"] is False and over["peak"] == 90.0
    assert ws.plan_figures("noise\ndagrl: error: bad layout\n\n", 2) == {"error": "dagrl: error: bad layout"}
    assert ws.plan_cell(over) == "90.0 (update) EXCEEDS"


def fake_point(out: Path, name: str, gpus: int, tp: int, steps: list[dict], peak_gib: float | None = None) -> None:
    d = out / name
    d.mkdir(parents=True)
    (d / "point.json").write_text(
        json.dumps({"layout": name.split("_")[0], "gpus": gpus, "tp": tp, "prompts": 16 * gpus, "n": 8})
    )
    rows = [{"step": i + 1, "response_length/mean": 1024.0, **s} for i, s in enumerate(steps)]
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    if peak_gib is not None:
        (d / "run.json").write_text(json.dumps({"rc": 0, "wall_s": 100.0, "peak_gib": peak_gib}))
        plan = f"    rollout   50.0\n  peak {peak_gib - 5:.1f} GiB (rollout) of 80 GiB: fits (60%)\n"
        (d / "plan.txt").write_text(plan)


def step(gen: float, old: float, update: float, switch: float, rest: float) -> dict:
    """A metrics row: timing_s/gen includes the switch; the step is every phase."""
    return {
        "timing_s/step": gen + old + update + switch + rest,
        "timing_s/gen": gen + switch,
        "timing_s/old_log_prob": old,
        "timing_s/update_actor": update,
        "timing_s/rollout_switch": switch,
        "timing_s/weight_sync": switch / 4,
    }


def test_report_medians_efficiency_and_growth(tmp_path):
    # dp_g1: step 1 (vLLM's first wake-up) is left out; steps 2-4 are 10, 10 and 14 s: median 10
    fake_point(
        tmp_path,
        "dp_g1",
        1,
        1,
        [step(20, 1, 3, 5, 1), step(4, 1, 3, 1, 1), step(4, 1, 3, 1, 1), step(4, 1, 3, 1, 5)],
        peak_gib=60.0,
    )
    # dp_g8: the update grows 2 s, generation 0.5 s: 12.5 s a step
    fake_point(tmp_path, "dp_g8", 8, 1, [step(20, 1, 5, 5, 1)] + [step(4.5, 1, 5, 1, 1)] * 3, peak_gib=55.0)
    # tp2_g2: 10.24 s a step, the switch grew
    fake_point(tmp_path, "tp2_g2", 2, 2, [step(4, 1, 3, 1.24, 1)] * 3)
    # tp2_g4: 12.8 s a step, 0.8 of tp2_g2's 10.24
    fake_point(tmp_path, "tp2_g4", 4, 2, [step(4, 1, 5.56, 1.24, 1)] * 3)
    out = subprocess.run(
        [
            sys.executable,
            "benchmarks/weak_scaling.py",
            "--report",
            "--out",
            str(tmp_path),
            "--models",
            str(tmp_path / "models"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = {
        line.split("|")[1].strip() + "@" + layout: line.split("|")[2:-1]
        for layout, block in zip(("dp", "tp2"), out.split("layout ")[1:])
        for line in block.splitlines()
        if line.startswith("| ") and line.split("|")[1].strip().isdigit()
    }
    one, eight, two = rows["1@dp"], rows["8@dp"], rows["2@tp2"]
    assert [c.strip() for c in one[:8]] == ["3", "10.00", "4.00", "1.00", "3.00", "1.00 (0.25)", "1.00", "13,107"]
    # 16 prompts x 8 x 1,024 tokens / 10 s / 1 GPU = 13,107; 128 x 8 x 1,024 / 12.5 s / 8 GPUs = 10,486
    assert eight[1].strip() == "12.50" and eight[7].strip() == "10,486"
    assert float(eight[8]) == pytest.approx(0.8, abs=1e-3) and float(one[8]) == 1.0
    assert eight[9].strip() == "update +2.00 s (step +2.50)"
    assert one[10].strip() == "55.0 (rollout)" and one[11].strip() == "60.0"
    assert float(two[8]) == pytest.approx(12800 / 13107.2, abs=1e-3)
    assert two[9].strip().startswith("switch +0.24 s") and two[11].strip() == "-"
    assert "efficiency at G=8: 0.800 (misses the >= 0.90 goal)" in out
    assert "efficiency at G=4: 0.781 (misses the >= 0.90 goal, which is set at G=8)" in out
    assert "within layout tp2: G=4 keeps 0.800 of G=2's tokens/s/GPU" in out
    assert "within layout dp" not in out  # its smallest point is the baseline itself


def test_report_without_the_one_gpu_point_has_no_efficiency(tmp_path):
    fake_point(tmp_path, "dp_g2", 2, 1, [step(4, 1, 3, 1, 1)] * 2)
    fake_point(tmp_path, "dp_g4", 4, 1, [step(4, 1, 3, 1, 1)])  # step 1 only: nothing counted yet
    out = subprocess.run(
        [
            sys.executable,
            "benchmarks/weak_scaling.py",
            "--report",
            "--out",
            str(tmp_path),
            "--models",
            str(tmp_path / "models"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "not measured: efficiency not computed" in out
    row = next(line for line in out.splitlines() if line.startswith("| 2 |")).split("|")
    assert row[2].strip() == "1" and row[10].strip() == "-"
    assert not any(line.startswith("| 4 |") for line in out.splitlines())


def test_execute_records_exit_and_ends_a_run_past_its_timeout(tmp_path):
    assert ws.execute([sys.executable, "-c", "print('hello')"], tmp_path, 1, 30) == 0
    assert "hello" in (tmp_path / "console.log").read_text()
    assert json.loads((tmp_path / "run.json").read_text())["rc"] == 0
    start = time.perf_counter()
    assert ws.execute([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path, 1, 1) == 124
    assert time.perf_counter() - start < 45  # ended at its timeout, not at the child's 60 s, however loaded
    assert json.loads((tmp_path / "run.json").read_text())["rc"] == 124


def test_plan_only_on_a_config_only_model(tmp_path, tiny_model):
    """dagrl.plan for every point from a config-only 1.7B with the tiny tokenizer: TP2 halves the weights' share."""
    out = subprocess.run(
        [
            sys.executable,
            "benchmarks/weak_scaling.py",
            "--plan-only",
            "--gpus",
            "1,2",
            "--out",
            str(tmp_path / "out"),
            "--models",
            str(tmp_path / "models"),
            "--tokenizer",
            str(tiny_model),
            "--gpu-memory-gb",
            "80",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert not (tmp_path / "models" / "qwen3-1.7b-config" / "model.safetensors").exists()
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in out.splitlines()
        if line.startswith("| dp_") or line.startswith("| tp2_")
    }
    assert list(rows) == ["dp_g1", "dp_g2", "tp2_g2"]
    assert rows["tp2_g2"][:3] == ["TP2 x DP1", "TP2 x DP1", "32 x 8"]
    update = {name: float(cells[5]) for name, cells in rows.items()}
    assert update["tp2_g2"] < update["dp_g2"] < update["dp_g1"]  # TP shards everything; DP2 shards the optimizer
    for cells in rows.values():
        assert cells[6].endswith("(rollout)")  # vLLM's 0.5 of 80 GiB on top of the actor's state
        assert float(cells[6].split()[0]) == max(map(float, cells[3:6]))


def test_seed_script_plan_is_the_script_as_written(tmp_path, tiny_model):
    out = subprocess.run(
        [
            sys.executable,
            "benchmarks/weak_scaling.py",
            "--seed-script",
            "--plan-only",
            "--out",
            str(tmp_path / "out"),
            "--models",
            str(tmp_path / "models"),
            "--arith",
            str(tmp_path / "arith"),
            "--tokenizer",
            str(tiny_model),
            "--gpu-memory-gb",
            "141",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "bash examples/grpo_trainer/run_qwen3-8b-megatron.sh --gpu-memory-gb 141" in out
    assert "actor/reference: TP=2 PP=4 CP=1 DP=1, sequence parallel on" in out
    assert "rollout (vllm): TP=2 DP=4" in out and "128 prompts x n=8 = 1024 responses" in out
    assert wsr.PEAK.search(out) and "of 141 GiB" in out
    assert (tmp_path / "out" / "seed_8b" / "plan.txt").read_text() in out
