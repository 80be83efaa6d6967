"""Every example run script composes with --cfg job, so a renamed key breaks CI."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# the scripts call python3: make it this interpreter even when the venv is not activated
ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
SCRIPTS = sorted(Path(__file__).resolve().parents[2].glob("examples/*/run_*.sh"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_script_composes(script, tmp_path):
    if script.name.endswith("-cpu.sh"):
        # the CPU script runs python3 -m dagrl.main_dag directly: compose its command line with --cfg job
        args = ["--cfg", "job"]
        env = ENV
    else:
        args, env = [], {**ENV, "DAGRL_DRY_RUN": "1"}
    proc = subprocess.run(
        ["bash", str(script), *args], capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "actor_rollout_ref:" in proc.stdout and "trainer:" in proc.stdout


def test_seed_script_keys_reach_the_config():
    script = next(s for s in SCRIPTS if s.name == "run_qwen3-8b-megatron.sh" and s.parent.name == "grpo_trainer")
    proc = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, timeout=120, env={**ENV, "DAGRL_DRY_RUN": "1"}
    )
    out = proc.stdout
    for expected in (
        "tensor_model_parallel_size: 2",
        "pipeline_model_parallel_size: 4",
        "sequence_parallel: true",
        "use_distributed_optimizer: true",
        "param_dtype: bfloat16",
        "name: vllm",
        "gpu_memory_utilization: 0.45",
        "prompt_length: 1024",
        "response_length: 2048",
    ):
        assert expected in out, expected


def test_ppo_script_runs_the_critic_graph():
    import yaml

    script = next(s for s in SCRIPTS if s.parent.name == "ppo_trainer" and s.name == "run_qwen3-8b-megatron.sh")
    proc = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, timeout=120, env={**ENV, "DAGRL_DRY_RUN": "1"}
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    cfg = yaml.safe_load(proc.stdout)
    assert cfg["algorithm"]["adv_estimator"] == "gae"
    assert {"values", "critic_update", "actor_update"} <= set(cfg["dag"]["nodes"])
    critic = cfg["critic"]
    assert critic["model"]["path"] == cfg["actor_rollout_ref"]["model"]["path"]
    assert critic["optim"]["lr"] == 1e-5 and critic["cliprange_value"] == 0.5 and critic["ppo_mini_batch_size"] == 128
    assert critic["megatron"] == {
        **critic["megatron"],
        "param_offload": True,
        "grad_offload": True,
        "optimizer_offload": True,
    }


def test_moe_script_keys_reach_the_config():
    import yaml

    script = next(s for s in SCRIPTS if s.name == "run_qwen3-30b-a3b-megatron.sh")
    proc = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, timeout=120, env={**ENV, "DAGRL_DRY_RUN": "1"}
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    megatron = yaml.safe_load(proc.stdout)["actor_rollout_ref"]["actor"]["megatron"]
    assert (
        megatron["tensor_model_parallel_size"],
        megatron["expert_model_parallel_size"],
        megatron["expert_tensor_parallel_size"],
        megatron["sequence_parallel"],
    ) == (4, 8, 1, True)
    assert megatron["override_transformer_config"] == {
        "moe_token_dispatcher_type": "alltoall",
        "moe_grouped_gemm": True,
        "recompute_granularity": "selective",
        "recompute_modules": ["layernorm", "moe_act"],
    }


def test_dapo_script_keys_reach_the_config():
    script = next(s for s in SCRIPTS if s.parent.name == "dapo_trainer" and s.name == "run_qwen3-8b-megatron.sh")
    proc = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, timeout=120, env={**ENV, "DAGRL_DRY_RUN": "1"}
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for expected in (
        "clip_ratio_low: 0.2",
        "clip_ratio_high: 0.28",
        "loss_agg_mode: token-mean",
        "reward_manager: dapo",
        "len: 512",
        "fn: dagrl.nodes.dynamic_sampling:filter_groups",
        "metric: acc",
        "max_num_gen_batches: 10",
        "on_limit: raise",
        "balance_batch: true",
        "tensor_model_parallel_size: 2",
        "pipeline_model_parallel_size: 4",
    ):
        assert expected in proc.stdout, expected


def test_lora_script_trains_qwen3_8b_adapters_on_one_gpu(tmp_path):
    """The LoRA script is the seed script on one GPU with rank-32 adapters, and its plan fits an 80 GB GPU with a
    Qwen3-8B-shaped model, where the same script training every weight does not."""
    import yaml

    script = next(s for s in SCRIPTS if s.name == "run_qwen3-8b-lora-megatron.sh")
    proc = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, timeout=120, env={**ENV, "DAGRL_DRY_RUN": "1"}
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    cfg = yaml.safe_load(proc.stdout)
    arr = cfg["actor_rollout_ref"]
    assert arr["model"]["lora"] == {**arr["model"]["lora"], "rank": 32, "alpha": 64, "merge": False}
    megatron = arr["actor"]["megatron"]
    assert (megatron["tensor_model_parallel_size"], megatron["pipeline_model_parallel_size"]) == (1, 1)
    assert (cfg["trainer"]["n_gpus_per_node"], arr["rollout"]["tensor_model_parallel_size"]) == (1, 1)
    assert "qwen3-8b-lora" in cfg["trainer"]["default_local_dir"]

    model = tmp_path / "qwen3-8b"
    init = [sys.executable, "scripts/init_random_model.py", "--family", "qwen3", "--size", "8b", "--config-only"]
    subprocess.run([*init, "--out", str(model)], check=True, capture_output=True, cwd=script.parents[2])
    env = {**ENV, "DAGRL_PLAN": "1", "MODEL_PATH": str(model)}

    def plan(*overrides: str) -> str:
        args = ["bash", str(script), *overrides, "--gpu-memory-gb", "80"]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout

    lora = plan()
    assert "1 node(s) x 1 GPU(s) = 1 ranks" in lora and "LoRA rank 32: frozen base" in lora
    assert re.search(r"peak [\d.]+ GiB \(rollout\) of 80 GiB: fits", lora), lora[-1500:]
    full = plan("actor_rollout_ref.model.lora.rank=0", "actor_rollout_ref.model.lora.alpha=32")  # alpha: its default
    assert "exceeds the 80 GiB GPU" in full, full[-1500:]


def checks_before_torchrun(script: Path) -> bool:
    """The script checks its input once before torchrun, itself or through the sibling script it runs."""
    text = script.read_text()
    runs = re.findall(r'exec bash "\$\(dirname "\$0"\)/([\w.-]+\.sh)"', text)
    return "DAGRL_CHECK_ONLY=1" in text or any(checks_before_torchrun(script.parent / name) for name in runs)


TORCHRUN_SCRIPTS = [s for s in SCRIPTS if checks_before_torchrun(s)]


@pytest.mark.parametrize("script", TORCHRUN_SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_torchrun_script_refuses_bad_input_once_before_torchrun(script, tmp_path):
    """No model or data under $HOME: each problem is one line, printed once, with exit 2, before torchrun starts a
    process per GPU (whose every rank would print the lines, then torchrun's traceback and exit 1)."""
    env = {k: v for k, v in ENV.items() if not k.endswith(("MODEL_PATH", "DATA_PATH", "DATA_DIR"))}
    proc = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, timeout=120, env={**env, "HOME": str(tmp_path)}
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("dagrl: error: ")]
    assert any("model directory" in line and str(tmp_path) in line for line in lines), proc.stderr[-2000:]
    assert len(lines) == len(set(lines)) and "Traceback" not in proc.stderr and "torch.distributed" not in proc.stderr


@pytest.mark.parametrize("script", TORCHRUN_SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_dagrl_doctor_switch_launches_the_doctor_as_the_run(script, tmp_path):
    """DAGRL_DOCTOR=1: the input checks run as for training, then the launch that would train starts
    dagrl.doctor with the same overrides (stand-ins for python3 and torchrun record each command)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python3", "torchrun"):
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\necho "{name} $*" >> {tmp_path / "calls"}\n')
        shim.chmod(0o755)
    env = {**ENV, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "DAGRL_DOCTOR": "1"}
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    calls = (tmp_path / "calls").read_text().splitlines()
    checks, launch = [c for c in calls if "-I -c" not in c][-2:]  # the last: use_venv.sh's probe comes first
    assert "-m dagrl.main_dag" in checks and "dagrl.doctor" not in checks
    assert "-m dagrl.doctor" in launch and "dagrl.main_dag" not in launch
    assert launch.split("-m dagrl.doctor", 1)[1] == checks.split("-m dagrl.main_dag", 1)[1]  # the same overrides


@pytest.mark.parametrize("switch, module", [("DAGRL_DOCTOR", "dagrl.doctor"), ("DAGRL_PLAN", "dagrl.plan")])
def test_the_cpu_script_runs_the_doctor_or_the_plan_with_its_overrides(switch, module, tmp_path):
    """The quickstart's script with DAGRL_DOCTOR=1 (or DAGRL_PLAN=1) starts that tool with the overrides it would train
    with (a stand-in for python3 records each command)."""
    script = next(s for s in SCRIPTS if s.name == "run_smollm2-135m-cpu.sh" and s.parent.name == "grpo_trainer")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "python3"
    shim.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path / "calls"}\n')
    shim.chmod(0o755)
    env = {**ENV, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}

    def launched(**switches: str) -> str:
        (tmp_path / "calls").unlink(missing_ok=True)
        proc = subprocess.run(["bash", str(script), "trainer.total_epochs=1"], env={**env, **switches}, timeout=60)
        assert proc.returncode == 0
        return [c for c in (tmp_path / "calls").read_text().splitlines() if "-I -c" not in c][-1]

    train, tool = launched(), launched(**{switch: "1"})
    assert train.startswith("-m dagrl.main_dag ") and tool.startswith(f"-m {module} ")
    assert tool.split(module, 1)[1] == train.split("dagrl.main_dag", 1)[1]
    assert train.endswith("trainer.total_epochs=1")
