"""benchmarks/vs_verl.py and vs_verl_report.py on CPU: verl's Ray-prefixed console lines and dagrl's jsonl rows parsed
into the tables (accuracy per evaluated step, median phases of steps 3..N), and benchmarks/verl_data.py's exact prompt
length. The verl lines are real lines of a verl 0.9.1 run on one H100 (benchmarks/verl_kit/run_smollm2_grpo.sh), cut
to fewer keys; the jsonl rows are dagrl's from the same job."""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import vs_verl  # noqa: E402 - after the sys.path insert above
import vs_verl_report  # noqa: E402 - after the sys.path insert above

P = "\x1b[36m(TaskRunner pid=2153)\x1b[0m "
VERL_LOG = "\n".join(
    [
        "versions: verl 0.9.1, vllm 0.26.0, torch 2.11.0+cu130, transformers 5.10.4, ray 2.60.0",
        "\x1b[36m(pid=2153)\x1b[0m /tmp/verl/site/verl/workers/engine/__init__.py:32: UserWarning: torchtitan engine "
        "is not available",
        P + "step:0 - val-core/dagrl/arithmetic/acc/mean@1:np.float64(0.1171875)",
        P + "Training Progress:   0%|          | 0/32 [00:00<?, ?it/s]",
        P + "step:1 - response_length/mean:11.859375 - timing_s/gen:0.5924565619999953 - "
        "timing_s/old_log_prob:1.585580789000005 - timing_s/update_actor:3.1181076679999933 - "
        "timing_s/update_weights:0.11893055699999877 - timing_s/step:5.525746058000038",
        P + "\rTraining Progress:   3%|▎         | 1/32 [00:05<02:54,  5.64s/it]",
        P + "step:3 - actor/pg_clipfrac:np.float64(0.0) - critic/advantages/mean:-0.005395879037678242 - "
        "response_length/mean:11.7578125 - timing_s/agent_loop/num_preempted/min:np.int64(-1) - "
        "timing_s/gen:0.54289234700002 - timing_s/old_log_prob:1.3526052089999894 - "
        "timing_s/update_actor:2.49344397699997 - timing_s/update_weights:0.14664415499998995 - "
        "timing_s/step:4.635444853000024",
        P + "\rTraining Progress:   9%|▉         | 3/32 [00:15<02:22,  4.92s/it]",
        P + "test_gen_batch meta info: {'eos_token_id': 2, 'pad_token_id': 2, 'recompute_log_prob': False, "
        "'do_sample': False, 'validate': True, 'global_steps': 4}",
        P + "step:4 - actor/pg_clipfrac:np.float64(0.0) - val-core/dagrl/arithmetic/acc/mean@1:np.float64(0.1875) - "
        "critic/advantages/mean:-0.006869451608508825 - response_length/mean:11.86328125 - "
        "timing_s/agent_loop/num_preempted/min:np.int64(-1) - timing_s/gen:0.4600678939999625 - "
        "timing_s/old_log_prob:0.8327316130000213 - timing_s/update_actor:2.5786337449999905 - "
        "timing_s/update_weights:0.1253115149999644 - timing_s/step:4.0585189789999845",
        P + "step:5 - actor/pg_clipfrac:np.float64(0.0) - critic/advantages/mean:-0.0019640661776065826 - "
        "response_length/mean:11.85546875 - timing_s/agent_loop/num_preempted/min:np.int64(-1) - "
        "timing_s/gen:0.6010216839999885 - timing_s/old_log_prob:0.8574571670000068 - "
        "timing_s/update_actor:2.7777407570000037 - timing_s/update_weights:0.12495694400001867 - "
        "timing_s/step:4.428343901999995",
    ]
)
DAGRL_ROWS = [
    {"step": 0, "time": 1795746267.281, "val-core/dagrl/arithmetic/acc/mean@1": 0.1171875},
    {
        "step": 1,
        "timing_s/gen": 0.43794429000001855,
        "timing_s/rollout_switch": 0.08278192599993872,
        "timing_s/old_log_prob": 0.5219303069999341,
        "timing_s/update_actor": 0.7774276369999598,
        "timing_s/step": 1.7566320280000127,
        "response_length/mean": 11.875,
    },
    {
        "step": 3,
        "time": 1795746271.212,
        "timing_s/gen": 0.3869175519999999,
        "timing_s/rollout_switch": 0.10750812300000234,
        "timing_s/weight_sync": 0.01128343900006712,
        "timing_s/old_log_prob": 0.2022564850000208,
        "timing_s/update_actor": 0.48263861800000996,
        "timing_s/step": 1.0852661410000337,
        "response_length/mean": 11.828125,
    },
    {
        "step": 4,
        "time": 1795746272.656,
        "timing_s/gen": 0.3752474540000321,
        "timing_s/rollout_switch": 0.11096120299998802,
        "timing_s/weight_sync": 0.011786357999994834,
        "timing_s/old_log_prob": 0.2167229579999912,
        "timing_s/update_actor": 0.4806660899999997,
        "timing_s/step": 1.0899090560000104,
        "response_length/mean": 11.79296875,
        "val-core/dagrl/arithmetic/acc/mean@1": 0.1875,
    },
    {
        "step": 5,
        "time": 1795746273.817,
        "timing_s/gen": 0.43957529199997225,
        "timing_s/rollout_switch": 0.0908052580000458,
        "timing_s/weight_sync": 0.023156334999953287,
        "timing_s/old_log_prob": 0.22126330899993718,
        "timing_s/update_actor": 0.4801516409999067,
        "timing_s/step": 1.1602765359999694,
        "response_length/mean": 11.68359375,
    },
]


def test_verl_console_lines_parse_through_ray_prefix_ansi_and_numpy_scalars():
    rows = vs_verl_report.console_steps(VERL_LOG)
    assert sorted(rows) == [0, 1, 3, 4, 5]  # tqdm's "3/32" and the meta-info line are not steps
    assert rows[0]["val-core/dagrl/arithmetic/acc/mean@1"] == 0.1171875
    assert rows[3]["timing_s/gen"] == pytest.approx(0.54289234700002)
    assert rows[3]["critic/advantages/mean"] == pytest.approx(-0.005395879037678242)  # "key:-0.005": not a separator
    assert rows[3]["timing_s/agent_loop/num_preempted/min"] == -1.0
    assert vs_verl_report.accuracy(rows[4]) == 0.1875 and vs_verl_report.accuracy(rows[3]) is None
    # dagrl's console logger writes the same format (read when its jsonl is missing)
    dagrl = vs_verl_report.console_steps("step:4 - timing_s/step:1.09 - val-core/dagrl/arithmetic/acc/mean@1:0.1875\n")
    assert dagrl[4]["timing_s/step"] == 1.09


def test_phases_split_dagrls_switch_out_of_its_generation():
    verl = vs_verl_report.phases(vs_verl_report.console_steps(VERL_LOG)[3], "verl")
    assert verl["weight sync"] == pytest.approx(0.14664415499998995)
    assert verl["generate"] == pytest.approx(0.54289234700002)
    assert verl["everything else"] == pytest.approx(4.635444853 - 0.542892347 - 1.352605209 - 2.493443977 - 0.146644155)
    dagrl = vs_verl_report.phases(DAGRL_ROWS[2], "dagrl")
    assert dagrl["weight sync"] == pytest.approx(0.10750812300000234)
    assert dagrl["generate"] == pytest.approx(0.3869175519999999 - 0.10750812300000234)


def write_out(out: Path) -> None:
    (out / "verl.log").write_text(VERL_LOG)
    (out / "dagrl_metrics.jsonl").write_text("\n".join(json.dumps(row) for row in DAGRL_ROWS) + "\n")
    (out / "dagrl.log").write_text(
        "versions: vllm 0.26.0, torch 2.11.0+cu130, transformers 5.17.0, megatron.core "
        "0.19.2, transformer_engine 2.17.1\nstep:1 - timing_s/step:1.757\n"
    )
    (out / "verl_mem.log").write_text("4 MiB\n26921 MiB\n28275 MiB\n2913 MiB\n")
    (out / "dagrl_mem.log").write_text("527 MiB\n7591 MiB\n")
    (out / "verl_run.json").write_text(json.dumps({"rc": 0, "wall_s": 240.0, "step_line_s": {"1": 80.0}}))
    (out / "dagrl_run.json").write_text(json.dumps({"rc": 0, "wall_s": 120.0, "step_line_s": {"1": 40.0}}))


def table_row(text: str, name: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| {name} |"))
    return [cell.strip() for cell in line.strip("|").split("|")][1:]


def test_report_prints_accuracy_and_median_rows(tmp_path):
    write_out(tmp_path)
    text = subprocess.run(
        [sys.executable, "benchmarks/vs_verl.py", "--job", "learn", "--report", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "verl : verl 0.9.1, vllm 0.26.0, torch 2.11.0+cu130, transformers 5.10.4, ray 2.60.0 (exit 0)" in text
    assert "dagrl: vllm 0.26.0, torch 2.11.0+cu130, transformers 5.17.0, megatron.core 0.19.2" in text
    assert table_row(text, "0") == ["0.117", "0.117", "+0.000"]
    assert table_row(text, "4") == ["0.188", "0.188", "+0.000"]
    assert "median of steps 3..5 (verl 3 steps, dagrl 3)" in text
    # medians of steps 3, 4, 5: verl's step 4.428 s, dagrl's 1.090 s
    assert table_row(text, "whole step") == ["4.428", "1.090", "0.25 !"]
    assert table_row(text, "generate") == ["0.543", "0.279", "0.51 !"]
    assert table_row(text, "old log-prob") == ["0.857", "0.217", "0.25 !"]
    assert table_row(text, "update") == ["2.579", "0.481", "0.19 !"]
    assert table_row(text, "weight sync") == ["0.125", "0.108", "0.86 !"]
    assert table_row(text, "everything else") == ["0.067", "0.017", "0.26 !"]
    assert table_row(text, "tokens/s/GPU") == ["685", "2770", "4.04 !"]  # 11.86 x 256 / 4.43 s; 11.79 x 256 / 1.09 s
    assert table_row(text, "peak GPU memory, MiB") == ["28275", "7591", "0.27 !"]
    assert table_row(text, "launch to first step, s") == ["74", "38", "0.51 !"]  # 80 - 5.53, 40 - 1.76
    assert table_row(text, "whole wall, s") == ["240", "120", "0.50 !"]


def test_report_without_run_files_leaves_their_cells_empty(tmp_path):
    write_out(tmp_path)
    for name in ("verl_run.json", "dagrl_run.json", "verl_mem.log"):
        (tmp_path / name).unlink()
    (tmp_path / "verl.log").write_text(VERL_LOG.split("\n", 1)[1])  # a log from before the versions line
    text = vs_verl_report.report(argparse.Namespace(job="learn", out=str(tmp_path), seed=0))
    assert "verl : not recorded" in text
    assert table_row(text, "launch to first step, s") == ["-", "-", "-"]
    assert table_row(text, "peak GPU memory, MiB") == ["-", "7591", "-"]


def test_verl_data_pads_every_prompt_to_the_exact_length(tmp_path):
    sys.path.insert(0, str(ROOT / "tests"))
    import pyarrow.parquet as pq
    from helpers import chat, make_row, make_tiny_tokenizer, write_parquet

    make_tiny_tokenizer(str(tmp_path / "tok"))
    rows = [make_row(i, f"What is {i} + {2 * i}?", str(3 * i)) for i in range(5)]
    write_parquet(str(tmp_path / "src" / "train.parquet"), rows)
    subprocess.run(
        [
            sys.executable,
            "benchmarks/verl_data.py",
            "--src",
            str(tmp_path / "src"),
            "--dst",
            str(tmp_path / "dst"),
            "--tokenizer",
            str(tmp_path / "tok"),
            "--prompt-length",
            "96",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    out = pq.read_table(tmp_path / "dst" / "train.parquet").to_pylist()
    assert [len(vs_verl_prompt(tokenizer, row["prompt"])) for row in out] == [96] * 5
    assert out[1]["reward_model"] == rows[1]["reward_model"] and out[1]["prompt"][-1]["content"].startswith(
        chat("What is 1 + 2?")[-1]["content"]
    )


def vs_verl_prompt(tokenizer, prompt):
    text = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_run_side_logs_versions_and_stamps_step_lines(tmp_path, monkeypatch):
    """The runner on a stand-in trainer: versions line first, console bytes kept (tqdm's carriage return too), the
    seconds from launch to each step line, the exit code, and dagrl's jsonl copied into --out."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "metrics.jsonl").write_text("a previous run's rows\n")
    fake = (
        "printf 'loading\\nstep:1 - timing_s/step:0.5\\n\\rTraining 1/2\\n'; sleep 0.3; echo 'step:2 - x:1'; "
        f"echo '{json.dumps(DAGRL_ROWS[1])}' >> {ckpt}/metrics.jsonl; exit 3"
    )
    monkeypatch.setattr(vs_verl, "command", lambda side, args: (fake, {"CKPT_DIR": str(ckpt)}))
    monkeypatch.setattr(vs_verl, "VERSIONS", {"dagrl": ["json"]})
    monkeypatch.setattr(vs_verl, "wait_for_idle_gpu", lambda: None)
    vs_verl.run_side("dagrl", argparse.Namespace(out=str(tmp_path), timeout=60, parallel=False))
    log = (tmp_path / "dagrl.log").read_bytes()
    assert log.startswith(b"versions: json ") and b"\n\rTraining 1/2\n" in log
    run = json.loads((tmp_path / "dagrl_run.json").read_text())
    assert run["rc"] == 3 and sorted(run["step_line_s"]) == ["1", "2"]
    assert run["step_line_s"]["2"] - run["step_line_s"]["1"] >= 0.25
    assert json.loads((tmp_path / "dagrl_metrics.jsonl").read_text())["step"] == 1


def test_run_json_is_written_at_each_step_line_then_closed_with_the_exit_code(tmp_path, monkeypatch):
    """A side cut short (no exit) still leaves its step times: S_run.json is rewritten at every new
    step line with exit code null, and the final write (the exit code) is the last one."""
    writes = []
    real = vs_verl.write_run
    monkeypatch.setattr(
        vs_verl,
        "write_run",
        lambda out, side, rc, wall, seen, shell: (
            writes.append((rc, dict(seen))),
            real(out, side, rc, wall, seen, shell),
        ),
    )
    fake = "echo 'step:1 - a:1'; sleep 0.3; echo 'step:1 - again'; echo 'step:2 - b:2'; sleep 0.3; exit 0"
    monkeypatch.setattr(vs_verl, "command", lambda side, args: (fake, {}))
    monkeypatch.setattr(vs_verl, "VERSIONS", {"verl": ["json"]})
    monkeypatch.setattr(vs_verl, "wait_for_idle_gpu", lambda: None)
    vs_verl.run_side("verl", argparse.Namespace(out=str(tmp_path), timeout=60, parallel=False))
    assert [rc for rc, _ in writes] == [None, None, 0]  # one write per new step, the repeat of step 1 none
    assert sorted(writes[0][1]) == ["1"] and sorted(writes[1][1]) == ["1", "2"]
    assert json.loads((tmp_path / "verl_run.json").read_text())["rc"] == 0
    assert not list(tmp_path.glob("*.tmp"))


def seed_dir(out: Path, seed: int, verl_acc: dict, dagrl_acc: dict) -> None:
    out.mkdir(parents=True)
    key = "val-core/dagrl/arithmetic/acc/mean@1"
    (out / "verl.log").write_text(
        "\n".join(f"{P}step:{step} - {key}:np.float64({acc})" for step, acc in verl_acc.items())
    )
    (out / "dagrl_metrics.jsonl").write_text(
        "\n".join(json.dumps({"step": step, key: acc}) for step, acc in dagrl_acc.items())
    )


def test_seeds_report_compares_the_means_within_the_seeds_spread(tmp_path):
    # step 4: verl 0.5/0.3 (mean 0.4), dagrl 0.30/0.32 (mean 0.31): spread 0.2 -> 0.31 >= 0.2: met
    # step 8: verl 0.80/0.78, dagrl 0.60/0.62: spread 0.02 -> 0.61 < 0.77: not met
    seed_dir(tmp_path / "seed0", 0, {0: 0.1, 4: 0.5, 8: 0.80}, {0: 0.1, 4: 0.30, 8: 0.60})
    seed_dir(tmp_path / "seed1", 1, {0: 0.1, 4: 0.3, 8: 0.78}, {0: 0.1, 4: 0.32, 8: 0.62})
    text = vs_verl_report.seeds_report(tmp_path)
    assert table_row(text, "0") == ["0.100", "0.100", "0.100", "0.100", "0.100", "0.100", "0.000", "yes"]
    assert table_row(text, "4") == ["0.500", "0.300", "0.300", "0.320", "0.400", "0.310", "0.200", "yes"]
    assert table_row(text, "8")[-2:] == ["0.020", "**no**"]
    assert text.splitlines()[-1].endswith(": no")
    (tmp_path / "seed1" / "dagrl_metrics.jsonl").write_text(json.dumps({"step": 0, "x": 1}))  # seed 1 never evaluated
    assert table_row(vs_verl_report.seeds_report(tmp_path), "4")[3] == "-"


def test_several_seeds_run_each_into_its_own_directory(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "benchmarks/vs_verl.py",
            "--job",
            "learn",
            "--out",
            str(tmp_path),
            "--seeds",
            "0,1",
            "--dry-run",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = out.strip().splitlines()
    assert (
        len(lines) == 4
        and [("SEED=0" in line, "SEED=1" in line) for line in lines] == [(True, False)] * 2 + [(False, True)] * 2
    )
    bad = subprocess.run(
        [
            sys.executable,
            "benchmarks/vs_verl.py",
            "--job",
            "learn",
            "--out",
            str(tmp_path),
            "--seeds",
            "0,x",
            "--dry-run",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "--seeds: comma-separated integers" in bad.stderr


def test_memory_is_watched_on_the_jobs_own_gpu(monkeypatch):
    """Two jobs on two GPUs of one host: each side's nvidia-smi samples and idle wait see only its own GPU."""
    calls = []
    monkeypatch.setattr(
        vs_verl.subprocess,
        "run",
        lambda argv, **kw: calls.append(argv) or subprocess.CompletedProcess(argv, 0, stdout="1200\n"),
    )
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert vs_verl.gpu_used_mib() == [1200] and calls[-1][:3] == ["nvidia-smi", "-i", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,2")
    vs_verl.gpu_used_mib()
    assert calls[-1][:3] == ["nvidia-smi", "-i", "3"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    vs_verl.gpu_used_mib()
    assert "-i" not in calls[-1]


def test_report_counts_the_steps_whose_prompts_are_the_same_on_both_sides(tmp_path):
    """dagrl draws verl's prompt order: equal prompt_length/mean at a step says both trained the same prompts."""
    write_out(tmp_path)
    lines = VERL_LOG.replace("step:1 - response", "step:1 - prompt_length/mean:30.15625 - response")
    (tmp_path / "verl.log").write_text(lines.replace("step:3 - actor", "step:3 - prompt_length/mean:29.5 - actor"))
    rows = [dict(row) for row in DAGRL_ROWS]
    rows[1]["prompt_length/mean"], rows[2]["prompt_length/mean"] = 30.15625, 30.09375
    (tmp_path / "dagrl_metrics.jsonl").write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    text = vs_verl_report.report(argparse.Namespace(out=str(tmp_path), job="learn", seed=0))
    assert "same prompts (equal prompt_length/mean): 1 of 2 steps" in text


def test_parallel_learn_runs_start_together_each_with_a_fixed_kv_cache_and_its_own_ports(tmp_path):
    """--parallel: every seed of every side on one GPU at once. Each vLLM gets a fixed KV cache (profiling free
    memory beside other starting runs is wrong), each verl its own Ray cluster, each dagrl its own torchrun port and
    run directory; the throughput job refuses it."""
    out = (
        subprocess.run(
            [
                sys.executable,
                "benchmarks/vs_verl.py",
                "--job",
                "learn",
                "--out",
                str(tmp_path),
                "--seeds",
                "0,1",
                "--parallel",
                "--dry-run",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .splitlines()
    )
    verl, dagrl = [line for line in out if "verl_kit" in line], [line for line in out if "grpo_trainer" in line]
    assert len(verl) == len(dagrl) == 2
    assert all("engine_kwargs.vllm.kv_cache_memory_bytes=4294967296" in line for line in out)
    assert all("ray_init.address=local" in line for line in verl) and not any("ray_init" in x for x in dagrl)
    assert [("PET_MASTER_PORT=29700" in x, "PET_MASTER_PORT=29701" in x) for x in dagrl] == [
        (True, False),
        (False, True),
    ]
    assert len({line.split("CKPT_DIR=")[1].split()[0] for line in dagrl}) == 2
    serial = subprocess.run(
        [sys.executable, "benchmarks/vs_verl.py", "--job", "learn", "--out", str(tmp_path), "--dry-run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "kv_cache_memory_bytes" not in serial and "PET_MASTER_PORT" not in serial
    bad = subprocess.run(
        [
            sys.executable,
            "benchmarks/vs_verl.py",
            "--job",
            "throughput",
            "--out",
            str(tmp_path),
            "--parallel",
            "--dry-run",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "--parallel: the learn job only" in bad.stderr


def test_parallel_runs_overlap_and_their_report_keeps_accuracy_but_no_step_table(tmp_path, monkeypatch):
    """The four runs of two seeds start before any ends (one wall, not four), the idle-GPU wait is skipped, and the
    report of a shared run prints the accuracy and the same-prompts count but no phase times."""
    stamps = tmp_path / "stamps"
    monkeypatch.setattr(
        vs_verl,
        "command",
        lambda side, args: (
            f"echo start >> {stamps}; sleep 2; echo end >> {stamps}; echo 'step:1 - timing_s/step:1'",
            {"CKPT_DIR": str(tmp_path / f"ckpt{args.seed}")} if side == "dagrl" else {},
        ),
    )
    monkeypatch.setattr(vs_verl, "VERSIONS", {"verl": ["json"], "dagrl": ["json"]})
    monkeypatch.setattr(vs_verl, "wait_for_idle_gpu", lambda: pytest.fail("a shared run waited for an idle GPU"))
    monkeypatch.setattr(vs_verl, "report", lambda args: "")
    monkeypatch.setattr(
        sys, "argv", ["vs_verl.py", "--job", "learn", "--out", str(tmp_path / "o"), "--seeds", "0,1", "--parallel"]
    )
    vs_verl.main()
    assert stamps.read_text().split() == ["start"] * 4 + ["end"] * 4
    assert all(
        json.loads((tmp_path / "o" / f"seed{s}" / f"{side}_run.json").read_text())["rc"] == 0
        for s in (0, 1)
        for side in ("verl", "dagrl")
    )
    monkeypatch.undo()
    (tmp_path / "r").mkdir()
    write_out(tmp_path / "r")
    (tmp_path / "r" / vs_verl_report.SHARED).write_text("4 runs shared one GPU (--parallel)\n")
    text = vs_verl_report.report(argparse.Namespace(out=str(tmp_path / "r"), job="learn", seed=0))
    assert "no step table: 4 runs shared one GPU" in text and "| whole step |" not in text
    assert table_row(text, "4") == ["0.188", "0.188", "+0.000"]


def test_the_curves_svg_draws_one_line_per_seed_at_the_accuracies(tmp_path):
    """--plot: the held-out curves of every seed of both sides (verl blue, dagrl orange, second seed dashed), each
    point at its step and accuracy (y 0..1 between the plot's bottom 320 and top 30)."""
    seed_dir(tmp_path / "seed3", 3, {0: 0.0, 4: 0.5, 8: 1.0}, {0: 0.0, 4: 0.25, 8: 0.75})
    seed_dir(tmp_path / "seed10", 10, {0: 0.0, 4: 0.5, 8: 1.0}, {0: 0.0, 8: 0.5})
    svg = vs_verl_report.curves_svg(vs_verl_report.learn_curves(tmp_path), "t")
    labels = [line.rpartition('">')[2].removesuffix("</text>") for line in svg.splitlines() if '<line x1="530' in line]
    assert labels == ["verl seed3", "verl seed10", "dagrl seed3", "dagrl seed10"]  # by seed, not by position
    lines = [line for line in svg.splitlines() if line.startswith("<polyline")]
    assert len(lines) == 4 and [('stroke="#1f77b4"' in line, "dasharray" in line) for line in lines] == [
        (True, False),
        (True, True),
        (False, False),
        (False, True),
    ]
    assert 'points="50.0,320.0 285.0,175.0 520.0,30.0"' in lines[0]  # verl seed 3: steps 0/4/8 at 0, 0.5, 1.0
    assert 'points="50.0,320.0 520.0,175.0"' in lines[3]  # dagrl seed 10 was evaluated twice
    assert svg.rstrip().endswith("</svg>")


def test_repeat_report_finds_a_rerun_equal_but_for_times_and_names_the_first_difference(tmp_path):
    earlier, rerun = tmp_path / "earlier" / "seed0", tmp_path / "rerun" / "seed0"
    for out in (earlier, rerun):
        out.mkdir(parents=True)
        write_out(out)
    # dagrl's rerun: other wall times and clock, the same values otherwise; verl's: another sample from step 4 on
    rows = [
        {k: (v * 1.5 if k.startswith("timing_s/") or k == "time" else v) for k, v in row.items()} for row in DAGRL_ROWS
    ]
    (rerun / "dagrl_metrics.jsonl").write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    (rerun / "verl.log").write_text(
        VERL_LOG.replace("acc/mean@1:np.float64(0.1875)", "acc/mean@1:np.float64(0.2)").replace(
            "response_length/mean:11.86328125", "response_length/mean:11.9"
        )
    )
    text = subprocess.run(
        [
            sys.executable,
            "benchmarks/vs_verl.py",
            "--job",
            "learn",
            "--report",
            "--seeds",
            "0,1",
            "--out",
            str(tmp_path / "rerun"),
            "--repeat-of",
            str(tmp_path / "earlier"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    verl = next(line for line in text.splitlines() if line.startswith("| verl | seed0 | 5 |"))
    dagrl = next(line for line in text.splitlines() if line.startswith("| dagrl | seed0 | 5 |"))
    # dagrl: acc at steps 0 and 4, response_length/mean at 1, 3, 4, 5 compared; times and the clock left out
    assert dagrl == "| dagrl | seed0 | 5 | 6 | 6 | none |"
    # verl: step 4's accuracy (0.2 against 0.1875, the larger relative change) is the first difference named
    assert verl.endswith("| 4, val-core/dagrl/arithmetic/acc/mean@1: 0.2 / 0.1875 |")
    assert "| verl | seed0 | 4 | 0.200 | 0.188 |" in text and "| dagrl | seed0 | 4 | 0.188 | 0.188 |" in text
    assert vs_verl_report.repeats({1: {"a": 1.0}}, {2: {"a": 1.0}})["steps"] == 0  # no step in common
