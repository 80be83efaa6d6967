"""Every example run script composes with --cfg job, so a renamed key breaks CI."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

# the scripts call python3: make it this interpreter even when the venv is not activated
ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
SCRIPTS = sorted(Path(__file__).resolve().parents[2].glob("examples/*/run_*.sh"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_composes(script, tmp_path):
    if script.name.endswith("-cpu.sh"):
        # the CPU script runs python3 -m dagrl.main_dag directly: compose its command line with --cfg job
        args = ["--cfg", "job"]
        env = ENV
    else:
        args, env = [], {**ENV, "DAGRL_DRY_RUN": "1"}
    proc = subprocess.run(["bash", str(script), *args], capture_output=True, text=True, env=env, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "actor_rollout_ref:" in proc.stdout and "trainer:" in proc.stdout


def test_seed_script_keys_reach_the_config():
    script = next(s for s in SCRIPTS if s.name == "run_qwen3-8b-megatron.sh")
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=120,
                          env={**ENV, "DAGRL_DRY_RUN": "1"})
    out = proc.stdout
    for expected in ("tensor_model_parallel_size: 2", "pipeline_model_parallel_size: 4", "sequence_parallel: true",
                     "use_distributed_optimizer: true", "param_dtype: bfloat16", "name: vllm",
                     "gpu_memory_utilization: 0.45", "prompt_length: 1024", "response_length: 2048"):
        assert expected in out, expected
