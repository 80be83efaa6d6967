"""Engine layouts over 2 gloo ranks (TP2, TP2+SP, PP2, PP2xVPP2, DP2, EP2, distributed optimizer, cross-layout
checkpoints), each checked against HF transformers; see mp_worker.py for the checks of one launch."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_models import make_model_dir

WORKER = Path(__file__).parent / "mp_worker.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_worker(scenario: str, model_dir: Path, work_dir: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    # (--master-port 0 makes torchrun's rendezvous hang.)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--master-port", str(free_port()),
               str(WORKER), scenario, str(model_dir), str(work_dir)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{scenario} failed:\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
    assert (work_dir / "done.json").exists()
    print(done.stdout)


@pytest.mark.slow
def test_dense_layouts_match_hf_and_reshard_checkpoints(tmp_path):
    model_dir = make_model_dir(tmp_path / "qwen3", "qwen3", num_layers=4, seed=3)
    run_worker("dense", model_dir, tmp_path / "work")
    assert json.loads((tmp_path / "work" / "done.json").read_text())[0] == "tp2"


@pytest.mark.slow
def test_moe_expert_parallel_matches_hf(tmp_path):
    model_dir = make_model_dir(tmp_path / "moe", "qwen3_moe", num_layers=2, seed=4)
    run_worker("moe", model_dir, tmp_path / "work")
